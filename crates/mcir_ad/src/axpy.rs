//! Scaled adjoints added into a shadow in one pass, and summed without being made. The
//! adjoint of `c * a` for an array `a` is `c * ā`, which the rules compute as a fresh
//! array (`map.fmul`) and then add into `a`'s shadow (`array.add_into`): two passes over
//! the elements and an array made and dropped. When nothing else reads the product,
//! `array.axpy` does both in one pass, with the same two roundings per element
//! (`d + c · a`), so the result is bit for bit the same in both engines. A sum of such a
//! product, or of a negation, is the product or negation of a sum (`Σ -(c · aᵢ)` is
//! `-(c · Σ aᵢ)`): exact for the negation, a reassociation for the factor, which a
//! reverse pass allows (both engines run the rewritten IR).

use mcir_ir::entity::EntityRef;
use mcir_ir::{FBinOp, FUnOp, Function, Inst, InstData, Op, TypeTable, Value, ValueData, ValueDef};

/// `f` with every `array.add_into d, t` whose `t = map.fmul a, c` (an array and an `f64`
/// scalar, in either order) is read by nothing else and computed shortly before, in the
/// same block (nothing between them writes array elements), turned into `array.axpy d, c, a`,
/// and the product removed (a product of an array and a scalar cannot fail).
pub(crate) fn fuse_scaled_accumulations(f: Function) -> Function {
    // Maps left unread (by `factor_sums`, say) go first: they may be a product's other reader.
    let mut f = crate::dce::remove_dead_code(f);
    let mut uses = vec![0u32; f.values.len()];
    for b in f.blocks.values() {
        for &i in &b.insts {
            f.insts[i].args.iter().for_each(|a| uses[a.index()] += 1);
        }
        b.term.uses().iter().for_each(|a| uses[a.index()] += 1);
    }
    let mut fused = std::collections::HashSet::new();
    let blocks: Vec<_> = f.blocks.keys().collect();
    for &b in &blocks {
        for k in 0..f.blocks[b].insts.len() {
            let i = f.blocks[b].insts[k];
            let (Op::AddInto, [d, t]) = (&f.insts[i].op, f.insts[i].args.as_slice()) else { continue };
            let (d, t) = (*d, *t);
            if uses[t.index()] != 1 {
                continue;
            }
            // The product is computed shortly before, with nothing between that could
            // change an array's elements, so that `a` holds the same ones when the sum
            // reads it.
            let Some(at) = f.blocks[b].insts[..k].iter().rposition(|&j| f.insts[j].result == Some(t)) else {
                continue;
            };
            if f.blocks[b].insts[at + 1..k]
                .iter()
                .any(|&j| mcir_ir::memory::may_write_elements(&f.insts[j].op))
            {
                continue;
            }
            let Some(product) = f.defining(t) else { continue };
            let (Op::MapFBinary(FBinOp::Mul), [p, q]) = (&product.op, product.args.as_slice()) else {
                continue;
            };
            let scalar = |v: Value| f.value_type(v) == TypeTable::F64;
            let (c, a) = match (scalar(*p), scalar(*q)) {
                (false, true) => (*q, *p),
                (true, false) => (*p, *q),
                _ => continue,
            };
            f.insts[i].op = Op::Axpy;
            f.insts[i].args = vec![d, c, a];
            fused.insert(t);
        }
    }
    for b in blocks {
        let insts = std::mem::take(&mut f.blocks[b].insts);
        f.blocks[b].insts =
            insts.into_iter().filter(|&i| !f.insts[i].result.is_some_and(|r| fused.contains(&r))).collect();
    }
    f
}

/// `f` with each `array.sum t` whose `t` is `map.fneg u` or `map.fmul a, c` (an array
/// and an `f64` scalar) computed from the sum of `u` or `a` instead: `-Σu`, `c · Σa`. The
/// new sum is placed right after the map, where the map read its operand, so that writes
/// between the map and the old sum do not matter; the maps left unread go to DCE.
pub(crate) fn factor_sums(mut f: Function) -> Function {
    let is_f64 = |f: &Function, v: Value| f.value_type(v) == TypeTable::F64;
    let mut work: Vec<Inst> = f.blocks.values().flat_map(|b| b.insts.iter().copied()).collect();
    while let Some(i) = work.pop() {
        let (Op::Sum, [t]) = (&f.insts[i].op, f.insts[i].args.as_slice()) else { continue };
        let t = *t;
        let Some(r) = f.insts[i].result.filter(|&r| is_f64(&f, r)) else { continue };
        let ValueDef::Inst(map) = f.values[t].def else { continue };
        let (op, inner, scale) = match (&f.insts[map].op, f.insts[map].args.as_slice()) {
            (Op::MapFUnary(FUnOp::Neg), [u]) => (Op::FUnary(FUnOp::Neg), *u, None),
            (Op::MapFBinary(FBinOp::Mul), [p, q]) => match (is_f64(&f, *p), is_f64(&f, *q)) {
                (false, true) => (Op::FBinary(FBinOp::Mul), *p, Some(*q)),
                (true, false) => (Op::FBinary(FBinOp::Mul), *q, Some(*p)),
                _ => continue,
            },
            _ => continue,
        };
        let Some((b, k)) =
            f.blocks.iter().find_map(|(b, d)| d.insts.iter().position(|&j| j == map).map(|k| (b, k)))
        else {
            continue;
        };
        let span = f.insts[map].span;
        let sum =
            f.insts.push(InstData { op: Op::Sum, args: vec![inner], result: None, span, in_tape: false });
        let s = f.values.push(ValueData { ty: TypeTable::F64, def: ValueDef::Inst(sum), name: None });
        f.insts[sum].result = Some(s);
        f.blocks[b].insts.insert(k + 1, sum);
        f.insts[i].op = op;
        f.insts[i].args = match scale {
            Some(c) => vec![s, c],
            None => vec![s],
        };
        debug_assert_eq!(f.insts[i].result, Some(r));
        // The new sum may be of a map in turn.
        work.push(sum);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ir: &str) -> String {
        let m = mcir_ir::parse_module(ir).expect("parses");
        let mut out = m.clone();
        let ids: Vec<_> = out.funcs.keys().collect();
        for id in ids {
            out.funcs[id] = fuse_scaled_accumulations(m.funcs[id].clone());
        }
        mcir_ir::verify_module(&out).expect("verifies");
        mcir_ir::print_module(&out)
    }

    #[test]
    fn a_product_read_once_is_added_in_one_pass() {
        let out = run("fn @f(%d_0: f64[], %a_1: f64[], %c_2: f64) {
bb0:
    %3: f64[] = map.fmul %a_1, %c_2
    array.add_into %d_0, %3
    %4: f64[] = map.fmul %c_2, %a_1
    array.add_into %d_0, %4
    ret
}
");
        assert_eq!(out.matches("array.axpy %d_0, %c_2, %a_1").count(), 2, "{out}");
    }

    #[test]
    fn a_sum_of_a_scaled_negation_is_a_scaled_negated_sum() {
        // Σ -(c · a) read after a write to d: the new sum reads `a` where the maps did.
        let m = mcir_ir::parse_module(
            "fn @f(%d_0: f64[], %a_1: f64[], %c_2: f64) -> f64 {
bb0:
    %3: f64[] = map.fmul %c_2, %a_1
    array.add_into %d_0, %3
    %4: f64[] = map.fneg %3
    %5: f64 = array.sum %4
    ret %5
}
",
        )
        .expect("parses");
        let id = m.func_by_name("f").expect("the function");
        let f = crate::dce::remove_dead_code(factor_sums(m.funcs[id].clone()));
        let mut out = m.clone();
        out.funcs[id] = fuse_scaled_accumulations(f);
        mcir_ir::verify_module(&out).expect("verifies");
        let text = mcir_ir::print_module(&out);
        assert!(text.contains("= array.sum %a_1"), "{text}");
        assert!(text.contains("array.axpy %d_0, %c_2, %a_1"), "{text}");
        assert!(!text.contains("map."), "{text}");
        let sum = text.find("array.sum").expect("a sum");
        assert!(sum < text.find("array.axpy").expect("an axpy"), "the sum reads `a` first: {text}");
    }

    #[test]
    fn a_product_computed_before_a_write_is_kept() {
        // `a` changes between the product and the sum: the sum must add the old elements.
        let out = run("fn @f(%d_0: f64[], %a_1: f64[], %c_2: f64, %i_3: i64) {
bb0:
    %4: f64[] = map.fmul %a_1, %c_2
    store.trusted %a_1[%i_3], %c_2
    array.add_into %d_0, %4
    ret
}
");
        assert!(!out.contains("axpy"), "{out}");
    }

    #[test]
    fn a_product_read_twice_or_of_two_arrays_is_kept() {
        let ir = "fn @f(%d_0: f64[], %e_1: f64[], %a_2: f64[], %c_3: f64) {
bb0:
    %4: f64[] = map.fmul %a_2, %c_3
    array.add_into %d_0, %4
    array.add_into %e_1, %4
    %5: f64[] = map.fmul %a_2, %a_2
    array.add_into %d_0, %5
    ret
}
";
        let out = run(ir);
        assert!(!out.contains("axpy"), "{out}");
    }
}
