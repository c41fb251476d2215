//! Which elementwise array operations are computed inside their consumer's loop
//! instead of each making an array of its own (`sum(exp(x - m))` becomes one loop).
//!
//! An `f64` elementwise map is *fused* into its consumer when
//! - its result has exactly one use, by an `f64` map, an `f64` `sum` or as the source
//!   of an `array.add_into` or `array.copy_into` of the same block (the consumer: the
//!   reverse pass's `dx += g * cos(x)` and a program's `a += b * c` become one loop),
//! - and every instruction between the two can neither write memory nor fail, or is
//!   fused into the same root, or only allocates while no member of the group can
//!   fail (a derived pass's `array.zeros_like` between a map and its consumer).
//!
//! The first condition means no one else sees the intermediate array; the second
//! that the arrays the fused loop reads hold, when the loop runs at the root's place,
//! what they held at each map's place, and that shape errors are still reported in
//! program order (the root checks every fused operand pair, in order, before its
//! loop). A fused group is lowered as one loop at its *root*, the consumer that is
//! not itself fused; the members emit nothing where they stand.
//!
//! Fusion changes no result bit: each element goes through the same scalar
//! operations as in the runtime's loops, and a fused `sum` adds in the same order.

use std::collections::{HashMap, HashSet};

use mcir_ir::entity::EntityRef;
use mcir_ir::{Function, Inst, Op, TypeTable, Value};

/// The members of fused groups: maps lowered as part of a later instruction's loop.
pub(crate) fn fused_members(f: &Function, types: &TypeTable) -> HashSet<Inst> {
    if !f.insts.values().any(|d| is_map(&d.op)) {
        return HashSet::new();
    }
    let mut uses: Vec<u32> = vec![0; f.values.len()];
    let mut user: HashMap<Value, Inst> = HashMap::new();
    for (_, data) in f.blocks.iter() {
        for &i in &data.insts {
            for &a in &f.insts[i].args {
                if let Some(n) = uses.get_mut(a.index()) {
                    *n += 1;
                }
                user.insert(a, i);
            }
        }
        for a in data.term.uses() {
            if let Some(n) = uses.get_mut(a.index()) {
                *n += 1;
            }
        }
    }
    let f64_array =
        |v: Value| types.as_array(f.value_type(v)).is_some_and(|(e, _)| e == mcir_ir::Scalar::F64);
    // Candidates: each fusible map with its single consumer and their block positions.
    let mut consumer: HashMap<Inst, Inst> = HashMap::new();
    let mut position: HashMap<Inst, (usize, usize)> = HashMap::new();
    for (bi, (_, data)) in f.blocks.iter().enumerate() {
        for (k, &i) in data.insts.iter().enumerate() {
            position.insert(i, (bi, k));
        }
    }
    for (_, data) in f.blocks.iter() {
        for &i in &data.insts {
            let d = &f.insts[i];
            let Some(r) = d.result else { continue };
            if !is_map(&d.op) || !f64_array(r) || uses.get(r.index()) != Some(&1) {
                continue;
            }
            let Some(&c) = user.get(&r) else { continue };
            let cd = &f.insts[c];
            let consumes = (is_map(&cd.op) && cd.result.is_some_and(f64_array))
                || (matches!(cd.op, Op::Sum) && cd.result.is_some_and(|s| f.value_type(s) == TypeTable::F64))
                || (matches!(cd.op, Op::AddInto | Op::CopyInto)
                    && cd.args.get(1) == Some(&r)
                    && f64_array(cd.args[0]));
            let same_block = position.get(&i).map(|p| p.0) == position.get(&c).map(|p| p.0);
            if consumes && same_block && position[&i].1 < position[&c].1 {
                consumer.insert(i, c);
            }
        }
    }
    // Drop members whose span to their consumer holds something that is neither quiet
    // nor part of the same group, until nothing changes.
    let blocks: Vec<&[Inst]> = f.blocks.iter().map(|(_, d)| d.insts.as_slice()).collect();
    loop {
        // Each member's root, from the end of each block back (a consumer comes after
        // its members).
        let mut root: HashMap<Inst, Inst> = HashMap::new();
        for insts in &blocks {
            for &i in insts.iter().rev() {
                if let Some(&c) = consumer.get(&i) {
                    root.insert(i, root.get(&c).copied().unwrap_or(c));
                }
            }
        }
        // Groups none of whose members can fail may also move across allocations: only
        // the order of failures matters, and such a group has none to reorder.
        let mut group_can_fail: HashSet<Inst> = HashSet::new();
        for (m, r) in &root {
            if can_fail(f, types, *m) {
                group_can_fail.insert(*r);
            }
        }
        let dropped: Vec<Inst> = consumer
            .iter()
            .filter(|&(m, c)| {
                let (bi, from) = position[m];
                let r = root.get(m);
                let infallible = r.is_some_and(|r| !group_can_fail.contains(r));
                blocks[bi][from + 1..position[c].1].iter().any(|between| {
                    let allowed = is_quiet(f, types, *between)
                        || root.get(between) == r
                        || (infallible && only_allocates(&f.insts[*between].op));
                    !allowed
                })
            })
            .map(|(&m, _)| m)
            .collect();
        if dropped.is_empty() {
            break;
        }
        for m in dropped {
            consumer.remove(&m);
        }
    }
    consumer.into_keys().collect()
}

/// Whether a map can fail: one of two arrays, whose shapes may differ.
fn can_fail(f: &Function, types: &TypeTable, i: Inst) -> bool {
    let d = &f.insts[i];
    matches!(d.op, Op::MapFBinary(_)) && d.args.iter().all(|&a| types.as_array(f.value_type(a)).is_some())
}

/// Ops whose only effect is an allocation, which may fail at the memory limit.
fn only_allocates(op: &Op) -> bool {
    matches!(
        op,
        Op::ZerosLike | Op::ArrayLit(_) | Op::RefNew | Op::TupleNew | Op::StructNew(_) | Op::StackNew
    )
}

/// The elementwise `f64` maps that can be fused.
fn is_map(op: &Op) -> bool {
    matches!(op, Op::MapFBinary(_) | Op::MapFUnary(_) | Op::MapFPowI)
}

/// Whether an instruction neither writes memory nor can fail (so fused work may move
/// across it): an op without effect (`Op::has_effect`) that does not allocate, and a few
/// that have one only in general.
fn is_quiet(f: &Function, types: &TypeTable, i: Inst) -> bool {
    let d = &f.insts[i];
    match &d.op {
        // Its effect is reading memory, which fused loops do not write.
        Op::TrustedLoad => true,
        // An `f64` sum cannot fail (an `i64` sum can overflow).
        Op::Sum => d.result.is_some_and(|r| f.value_type(r) == TypeTable::F64),
        // With one scalar operand there is no shape to check.
        Op::MapFBinary(_) => d.args.iter().any(|&a| types.as_array(f.value_type(a)).is_none()),
        // Allocations may reach the allocation limit.
        Op::ArrayCopy
        | Op::ArrayLit(_)
        | Op::RefNew
        | Op::TupleNew
        | Op::StructNew(_)
        | Op::ZerosLike
        | Op::StackNew => false,
        op => !op.has_effect(),
    }
}

#[cfg(test)]
mod tests {
    use super::fused_members;
    use mcir_ir::entity::EntityRef;

    /// The results of the fused maps of the only function of `ir`, by value number.
    fn fused(ir: &str) -> Vec<usize> {
        let m = mcir_ir::parse_module(ir).expect("parses");
        let (_, f) = m.funcs.iter().next().expect("a function");
        let mut out: Vec<usize> = fused_members(f, &m.types)
            .into_iter()
            .filter_map(|i| f.insts[i].result)
            .map(|v| v.index())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_chain_into_a_sum_is_fused_across_quiet_instructions() {
        let ir = "fn @f(%x_0: f64[], %y_1: f64[]) -> f64 {
bb0:
    %2: f64[] = map.fsub %x_0, %y_1
    %3: f64[] = map.exp %2
    %4: f64 = fconst 3.0
    %5: f64[] = map.fmul %3, %4
    %6: f64 = array.sum %5
    ret %6
}
";
        assert_eq!(fused(ir), vec![2, 3, 5]);
    }

    #[test]
    fn a_chain_written_into_an_array_is_fused_into_the_write() {
        let ir = "fn @f(%x_0: f64[], %dx_1: f64[], %g_2: f64) {
bb0:
    %3: f64[] = map.cos %x_0
    %4: f64[] = map.fmul %3, %g_2
    array.add_into %dx_1, %4
    %5: f64[] = map.fadd %x_0, %dx_1
    array.copy_into %x_0, %5
    ret
}
";
        assert_eq!(fused(ir), vec![3, 4, 5]);
    }

    #[test]
    fn an_allocation_in_between_prevents_fusion_only_of_groups_that_can_fail() {
        let ir = "fn @f(%x_0: f64[], %y_1: f64[], %m_2: f64) -> f64 {
bb0:
    %3: f64[] = map.fsub %x_0, %m_2
    %4: f64[] = array.zeros_like %x_0
    %5: f64[] = map.exp %3
    %6: f64 = array.sum %5
    %7: f64[] = map.fsub %x_0, %y_1
    %8: f64[] = array.zeros_like %x_0
    %9: f64[] = map.exp %7
    %10: f64 = array.sum %9
    %11: f64 = fadd %6, %10
    ret %11
}
";
        assert_eq!(fused(ir), vec![3, 5, 9]);
    }

    #[test]
    fn a_store_between_a_map_and_its_use_prevents_fusion() {
        let ir = "fn @f(%x_0: f64[]) -> f64 {
bb0:
    %1: f64 = fconst 2.0
    %2: f64[] = map.fmul %x_0, %1
    %3: i64 = iconst 0
    store %x_0[%3], %1
    %5: f64 = array.sum %2
    ret %5
}
";
        assert_eq!(fused(ir), Vec::<usize>::new());
    }

    #[test]
    fn an_intermediate_used_twice_is_materialised() {
        let ir = "fn @f(%x_0: f64[]) -> f64[] {
bb0:
    %1: f64 = fconst 2.0
    %2: f64[] = map.fsub %x_0, %1
    %3: f64[] = map.fmul %2, %2
    %4: f64[] = map.abs %3
    ret %4
}
";
        assert_eq!(fused(ir), vec![3]);
    }

    #[test]
    fn a_shape_check_of_another_group_in_between_prevents_fusion() {
        // Fusing %2 into %6 would move its shape check after that of %3 (fused into %4).
        let ir = "fn @f(%x_0: f64[], %y_1: f64[]) -> f64 {
bb0:
    %2: f64[] = map.fsub %x_0, %y_1
    %3: f64[] = map.fadd %y_1, %x_0
    %4: f64 = array.sum %3
    %5: f64 = fconst 1.0
    %6: f64[] = map.fmul %2, %5
    %7: f64 = array.sum %6
    %8: f64 = fadd %4, %7
    ret %8
}
";
        assert_eq!(fused(ir), vec![3, 6]);
    }
}
