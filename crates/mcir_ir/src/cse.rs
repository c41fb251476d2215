//! Common-subexpression elimination: a pure operation (one that reads no memory,
//! allocates nothing, and either cannot fail or fails on its operands alone, as integer
//! arithmetic that overflows does) on the same operands as one in a dominating position
//! is that one's value: where the first did not stop the program, the repeat would not
//! either (`hi - lo`, tested and then halved, is checked once). Inlining leaves many (`rk4`'s step computes `0.5 * h` once per
//! stage), and they matter to derivatives more than to the primal: Cranelift merges them
//! in the primal's machine code by itself, but each copy a primal keeps is a value the
//! forward pass may tape and the reverse pass differentiates on its own.
//!
//! The walk goes down the dominator tree with the operations seen on the way, so a value
//! is reused only where it is defined on every path. Equal constants (by their bits:
//! `0.0` and `-0.0` differ) merge within a block, so that operations on them merge too,
//! but each block keeps its own: a loop's constants stay beside it. The result is the
//! same bit for bit: an operation on the same operands gives the same value.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::Op;
use crate::types::TypeTable;
use rustc_hash::FxHashMap as HashMap;

/// What identifies an operation apart from its operands: two with equal keys on equal
/// operands compute the same value, when they are pure (or, for loads, when nothing
/// between them stores: `jam.rs` merges those too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OpKey {
    kind: std::mem::Discriminant<Op>,
    payload: u64,
}

impl OpKey {
    /// The key of a computation, a projection or a load; `None` for anything else.
    pub(crate) fn of(op: &Op) -> Option<OpKey> {
        let payload = match op {
            Op::FConst(x) => x.to_bits(),
            Op::IConst(x) => *x as u64,
            Op::BConst(b) => *b as u64,
            Op::FBinary(o) => *o as u64,
            Op::FUnary(o) => *o as u64,
            Op::IBinary(o) => *o as u64,
            Op::IUnary(o) => *o as u64,
            Op::FCmp(c) | Op::ICmp(c) | Op::BCmp(c) => *c as u64,
            Op::FPowI | Op::Not | Op::IToF | Op::FToI | Op::Select | Op::Load | Op::TrustedLoad => 0,
            Op::TupleGet(k) => u64::from(*k),
            Op::ArrayDim(k) => u64::from(*k),
            Op::StructGet(s, k) => ((s.index() as u64) << 32) | u64::from(*k),
            _ => return None,
        };
        Some(OpKey { kind: std::mem::discriminant(op), payload })
    }
}

/// The operands of a pure operation, held inline (no pure operation takes more than
/// three), so that a table of a long block's operations allocates nothing per entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Operands {
    len: u8,
    values: [Value; 3],
}

impl Operands {
    fn of(args: &[Value]) -> Option<Operands> {
        let mut values = [Value::new(0); 3];
        values.get_mut(..args.len())?.copy_from_slice(args);
        Some(Operands { len: args.len() as u8, values })
    }
}

/// The key of `op` if it is pure in the sense above.
fn key(types: &TypeTable, op: &Op) -> Option<OpKey> {
    let pure = op.is_scalar_arith()
        || matches!(op, Op::IBinary(_) | Op::IUnary(_) | Op::FToI | Op::TupleGet(_) | Op::ArrayDim(_))
        || matches!(op, Op::StructGet(s, _) if !types.struct_def(*s).mutable);
    if pure {
        OpKey::of(op)
    } else {
        None
    }
}

/// `f` with every pure operation that repeats one dominating it removed, its uses
/// reading the dominating one's value.
pub fn eliminate_common_subexpressions(mut f: Function, types: &TypeTable) -> Function {
    let cfg = ControlFlow::compute(&f);
    let mut children: Vec<Vec<Block>> = vec![Vec::new(); f.blocks.len()];
    for &b in &cfg.rpo {
        if let Some(d) = cfg.idom(b) {
            if d != b {
                children[d.index()].push(b);
            }
        }
    }
    let mut subst: HashMap<Value, Value> = HashMap::default();
    // Room for every instruction's entry up front: growing the table step by step
    // rehashes and copies it, which a function of 10⁵ lines pays for many times.
    let mut seen: HashMap<(OpKey, Operands), Value> =
        HashMap::with_capacity_and_hasher(f.insts.len(), Default::default());
    let root = f.entry();
    // Depth-first down the dominator tree; each block's entries leave the table when
    // the walk leaves the block's subtree.
    enum Step {
        Enter(Block),
        Leave(Vec<(OpKey, Operands)>),
    }
    let mut work = vec![Step::Enter(f.entry())];
    while let Some(step) = work.pop() {
        let b = match step {
            Step::Enter(b) => b,
            // The last block left is the entry, the root: nothing needs its entries
            // removed once the walk is over.
            Step::Leave(_) if work.is_empty() => break,
            Step::Leave(keys) => {
                for k in keys {
                    seen.remove(&k);
                }
                continue;
            }
        };
        let mut added = Vec::new();
        let mut constants: HashMap<OpKey, Value> = HashMap::default();
        let insts = std::mem::take(&mut f.blocks[b].insts);
        let mut kept = Vec::with_capacity(insts.len());
        for i in insts {
            if !subst.is_empty() {
                for a in f.insts[i].args.iter_mut() {
                    if let Some(&to) = subst.get(a) {
                        *a = to;
                    }
                }
            }
            let (Some(r), Some(k)) = (f.insts[i].result, key(types, &f.insts[i].op)) else {
                kept.push(i);
                continue;
            };
            if f.insts[i].args.is_empty() {
                // A constant: merged within its block only, so that each block keeps the
                // constants it uses beside it (where a loop's pattern is recognised).
                match constants.get(&k) {
                    Some(&v) => {
                        subst.insert(r, v);
                    }
                    None => {
                        constants.insert(k, r);
                        kept.push(i);
                    }
                }
                continue;
            }
            let Some(operands) = Operands::of(&f.insts[i].args) else {
                kept.push(i);
                continue;
            };
            match seen.entry((k, operands)) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    subst.insert(r, *e.get());
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    // The root's entries stay to the end: they need no list for removal.
                    if b != root {
                        added.push(*e.key());
                    }
                    e.insert(r);
                    kept.push(i);
                }
            }
        }
        f.blocks[b].insts = kept;
        work.push(Step::Leave(added));
        for &c in children[b.index()].iter().rev() {
            work.push(Step::Enter(c));
        }
    }
    // Uses in terminators, and in blocks the walk reached before a value's replacement
    // was known (a loop header's parameters flow back from its latch).
    f.substitute(&subst);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ir: &str) -> String {
        let m = crate::parse_module(ir).expect("parses");
        let mut out = m.clone();
        let ids: Vec<FuncId> = out.funcs.keys().collect();
        for id in ids {
            out.funcs[id] = eliminate_common_subexpressions(m.funcs[id].clone(), &m.types);
        }
        crate::verify_module(&out).expect("verifies");
        crate::print::print_module(&out)
    }

    #[test]
    fn a_repeat_in_a_dominated_block_reads_the_first_and_siblings_keep_theirs() {
        let text = run("fn @f(%h_0: f64, %c_1: bool) -> f64 {
bb0:
    %2: f64 = fconst 0.5
    %3: f64 = fmul %2, %h_0
    %4: f64 = fconst 0.5
    %5: f64 = fmul %4, %h_0
    %6: f64 = fadd %3, %5
    br %c_1, bb1, bb2
bb1:
    %7: f64 = fconst 0.5
    %8: f64 = fmul %2, %h_0
    %9: f64 = fsub %h_0, %6
    ret %9
bb2:
    %10: f64 = fsub %h_0, %6
    ret %10
}
");
        // Within the entry block, the second constant and product are the first ones.
        let entry = text.split("bb1:").next().unwrap_or("");
        assert_eq!(entry.matches("fconst 0.5").count(), 1, "{text}");
        assert_eq!(entry.matches("fmul").count(), 1, "{text}");
        assert!(entry.contains("fadd %3, %3"), "{text}");
        // bb1's product repeats the entry's and goes; its constant stays (constants are
        // merged within a block only); bb1 and bb2 each keep their own subtraction.
        let bb1 = text.split("bb1:").nth(1).and_then(|t| t.split("bb2:").next()).unwrap_or("");
        assert!(!bb1.contains("fmul"), "{text}");
        assert!(bb1.contains("fconst 0.5"), "{text}");
        assert_eq!(text.matches("fsub %h_0, %4").count(), 2, "{text}");
    }

    #[test]
    fn checked_integer_arithmetic_repeated_below_is_the_first() {
        // `hi - lo` tested, then halved: where the first subtraction did not overflow,
        // the second cannot, so it is the first one's value. A division that may fail is
        // merged the same way; an addition on other operands stays.
        let text = run("fn @f(%lo_0: i64, %hi_1: i64) -> i64 {
bb0:
    %2: i64 = isub %hi_1, %lo_0
    %3: i64 = iconst 1
    %4: bool = icmp eq %2, %3
    br %4, bb1, bb2
bb1:
    ret %lo_0
bb2:
    %5: i64 = isub %hi_1, %lo_0
    %6: i64 = iconst 2
    %7: i64 = idiv %5, %6
    %8: i64 = idiv %5, %6
    %9: i64 = iadd %lo_0, %7
    %10: i64 = iadd %9, %8
    ret %10
}
");
        assert_eq!(text.matches("isub").count(), 1, "{text}");
        assert_eq!(text.matches("idiv").count(), 1, "{text}");
        assert_eq!(text.matches("iadd").count(), 2, "{text}");
    }
}
