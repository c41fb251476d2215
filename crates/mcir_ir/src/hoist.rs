//! Two clean-ups of the primal IR that matter most once small functions are inlined:
//! a field read from a tuple or immutable struct built in the same function is the
//! value it was built from (`rhs` returns `(dx, dy)`, its caller reads `.0` and `.1`),
//! and pure computations whose operands do not change in a loop (`p.alpha`, `h / 6.0`)
//! run once before the loop instead of on every iteration.
//!
//! Both matter more to derivatives than to the primal (Cranelift hoists invariant code
//! by itself): a value computed in a loop and needed by the reverse pass is taped on
//! every iteration, one computed before the loop once.
//!
//! Only operations that cannot fail and touch no memory move, so no error can come
//! sooner or from a different place; a loop that runs no iteration computes them for
//! nothing. A loop gives up its invariants only through a preheader: its header's one
//! entry from outside the loop is a plain jump, after whose block's instructions they go.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::Op;
use crate::types::TypeTable;
use std::collections::{HashMap, HashSet};

/// `module` with projections of known aggregates folded, loop invariants hoisted and
/// common subexpressions merged (`crate::cse`).
pub fn fold_and_hoist(mut module: Module) -> Module {
    let ids: Vec<FuncId> = module.funcs.keys().collect();
    for id in ids {
        let f = std::mem::replace(&mut module.funcs[id], Function::new("", &[], None));
        let f = fold_projections(f, &module.types);
        let f = hoist_invariants(f, &module.types, false);
        module.funcs[id] = crate::cse::eliminate_common_subexpressions(f, &module.types);
    }
    module
}

/// Operations that may run earlier than written: no failure, no memory, no allocation.
/// (A constant is never moved as such: an operation moves only if it reads a value that
/// is not a constant, and the constants it reads are made again in front of the loop.)
fn movable(types: &TypeTable, op: &Op) -> bool {
    match op {
        Op::TupleGet(_) | Op::ArrayDim(_) => true,
        Op::StructGet(s, _) => !types.struct_def(*s).mutable,
        _ => op.is_scalar_arith(),
    }
}

fn is_constant(f: &Function, v: Value) -> bool {
    f.defining(v).is_some_and(|d| matches!(d.op, Op::FConst(_) | Op::IConst(_) | Op::BConst(_)))
}

/// `tuple.get k (tuple.new ..)` and `struct.get S.k (struct.new S ..)` of an immutable
/// struct read the value that went in.
fn fold_projections(mut f: Function, types: &TypeTable) -> Function {
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let blocks: Vec<Block> = f.blocks.keys().collect();
    for &b in &blocks {
        for &i in &f.blocks[b].insts {
            let d = &f.insts[i];
            let (Some(r), Some(&agg)) = (d.result, d.args.first()) else { continue };
            // The aggregate may itself be a projection folded above (`(t.0).1` of a tuple
            // of tuples, as an inlined pass returns its result inside `(result, tape)`).
            let mut agg = agg;
            while let Some(&n) = subst.get(&agg) {
                agg = n;
            }
            let ValueDef::Inst(src) = f.values[agg].def else { continue };
            let s = &f.insts[src];
            let item = match (&d.op, &s.op) {
                (Op::TupleGet(k), Op::TupleNew) => s.args.get(*k as usize),
                (Op::StructGet(a, k), Op::StructNew(b)) if a == b && !types.struct_def(*a).mutable => {
                    s.args.get(*k as usize)
                }
                _ => None,
            };
            if let Some(&v) = item {
                subst.insert(r, v);
            }
        }
    }
    if subst.is_empty() {
        return f;
    }
    f.substitute(&subst);
    for &b in &blocks {
        // The folded projections have no readers left.
        let folded: Vec<Inst> = f.blocks[b].insts.clone();
        f.blocks[b].insts = folded
            .into_iter()
            .filter(|&i| !f.insts[i].result.is_some_and(|r| subst.contains_key(&r)))
            .collect();
    }
    f
}

/// A derived pass with its loop invariants hoisted, among them reads of the top of a
/// tape stack that the loop neither pushes, pops nor hands on (a value the forward pass
/// kept once, before the loop, read on every iteration of the loop's reverse). The
/// stack cannot be empty there: the value's block dominates the loop, so it ran, and
/// pushed, before the loop did.
pub fn hoist_in_derived(f: Function, types: &TypeTable) -> Function {
    hoist_invariants(f, types, true)
}

/// A derived pass into which others were inlined: fields read from the tuples and
/// immutable structs it now builds itself (a step's results, its tape record) are the
/// values they were built from, then loop invariants are hoisted as in
/// [`hoist_in_derived`].
pub fn fold_and_hoist_derived(f: Function, types: &TypeTable) -> Function {
    let f = hoist_invariants(fold_projections(f, types), types, true);
    crate::cse::eliminate_common_subexpressions(f, types)
}

fn hoist_invariants(mut f: Function, types: &TypeTable, peeks: bool) -> Function {
    let cfg = ControlFlow::compute(&f);
    // Integer arithmetic that cannot fail moves too (`j * d - j * (j + 1) / 2`, a
    // packed triangle's column start): what range analysis shows within `i64` (the
    // operands, fixed in the loop, have the same ranges in front of it), and divisions by
    // a constant other than 0 and -1.
    let safe_ints = f.proofs().no_overflow;
    // Inner loops first, so that what leaves an inner loop can leave its outer one too.
    let headers: Vec<Block> =
        cfg.rpo.iter().rev().copied().filter(|&h| cfg.latches(h).next().is_some()).collect();
    for h in headers {
        let body = cfg.loop_blocks(h);
        let outside: Vec<Block> =
            cfg.preds.get(h.index()).into_iter().flatten().copied().filter(|p| !body.contains(p)).collect();
        let [pre] = outside.as_slice() else { continue };
        let pre = *pre;
        if !matches!(&f.blocks[pre].term, Terminator::Jump(c) if c.block == h) {
            continue;
        }
        // Header parameters that every back edge passes back unchanged (an outer
        // counter carried through an inner loop) hold what the preheader passes in; an
        // operation on them moves with that value in their place.
        let entry_args: Vec<Value> = match &f.blocks[pre].term {
            Terminator::Jump(c) => c.args.clone(),
            _ => Vec::new(),
        };
        let mut carried: HashMap<Value, Value> = HashMap::new();
        for (k, &p) in f.blocks[h].params.iter().enumerate() {
            let unchanged = cfg.incoming_args(&f, h, k).all(|(from, a)| from == pre || a == Some(p));
            if let (true, Some(&a)) = (unchanged, entry_args.get(k)) {
                carried.insert(p, a);
            }
        }
        // Values defined in the loop, as the walk finds them; a hoisted value leaves.
        let mut inside: HashSet<Value> = HashSet::new();
        for &b in &body {
            inside.extend(f.blocks[b].params.iter().copied().filter(|p| !carried.contains_key(p)));
            inside.extend(f.blocks[b].insts.iter().filter_map(|&i| f.insts[i].result));
        }
        let order: Vec<Block> = cfg.rpo.iter().copied().filter(|b| body.contains(b)).collect();
        // Values the loop uses other than as the stack of a `stack.peek`.
        let mut used: HashSet<Value> = HashSet::new();
        if peeks {
            for &b in &order {
                for &i in &f.blocks[b].insts {
                    if f.insts[i].op != Op::StackPeek {
                        used.extend(f.insts[i].args.iter().copied());
                    }
                }
                used.extend(f.blocks[b].term.uses());
            }
        }
        for b in order {
            let insts = f.blocks[b].insts.clone();
            let mut kept = Vec::with_capacity(insts.len());
            for i in insts {
                let d = &f.insts[i];
                let peek_of_untouched = peeks && d.op == Op::StackPeek && !used.contains(&d.args[0]);
                let invariant = (movable(types, &d.op) || peek_of_untouched || safe_ints.contains(&i))
                    && d.args.iter().any(|&a| !is_constant(&f, a))
                    && d.args.iter().all(|&a| !inside.contains(&a) || is_constant(&f, a));
                if !invariant {
                    kept.push(i);
                    continue;
                }
                // Constants the operation reads from inside the loop are made again
                // before it.
                let args = f.insts[i].args.clone();
                let mut moved = Vec::with_capacity(args.len());
                for a in args {
                    if let Some(&outer) = carried.get(&a) {
                        moved.push(outer);
                    } else if inside.contains(&a) {
                        let ValueDef::Inst(c) = f.values[a].def else { continue };
                        let (op, ty, span) = (f.insts[c].op.clone(), f.value_type(a), f.insts[c].span);
                        let nv = f.push_inst(pre, op, vec![], Some(ty), span);
                        moved.push(nv.unwrap_or(a));
                    } else {
                        moved.push(a);
                    }
                }
                f.insts[i].args = moved;
                f.blocks[pre].insts.push(i);
                if let Some(r) = f.insts[i].result {
                    inside.remove(&r);
                }
            }
            f.blocks[b].insts = kept;
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ir: &str) -> String {
        let m = crate::parse_module(ir).expect("parses");
        let out = fold_and_hoist(m);
        crate::verify_module(&out).expect("verifies");
        crate::print::print_module(&out)
    }

    #[test]
    fn invariants_leave_the_loop_and_projections_fold() {
        let text = run("fn @f(%h_0: f64, %n_1: i64) -> f64 {
bb0:
    %2: i64 = iconst 0
    %3: f64 = fconst 0.0
    jump bb1(%2, %3)
bb1(%i_4: i64, %s_5: f64):
    %6: bool = icmp lt %i_4, %n_1
    br %6, bb2, bb3
bb2:
    %7: f64 = fconst 6.0
    %8: f64 = fdiv %h_0, %7
    %9: (f64, f64) = tuple.new %8, %s_5
    %10: f64 = tuple.get 1 %9
    %11: f64 = fadd %10, %8
    %12: i64 = iconst 1
    %13: i64 = iadd %i_4, %12
    jump bb1(%13, %11)
bb3:
    ret %s_5
}
");
        let loop_body = text.split("bb2:").nth(1).expect("bb2");
        assert!(!loop_body.split("bb3").next().unwrap_or("").contains("fdiv"), "{text}");
        assert!(text.split("bb1").next().unwrap_or("").contains("fdiv"), "{text}");
        assert!(!text.contains("tuple.get"), "{text}");
        assert!(text.contains("fadd %s_"), "{text}");
    }

    #[test]
    fn a_projection_of_a_folded_projection_folds() {
        // An inlined pass returns `(result, tape)` with its result a tuple itself.
        let text = run("fn @f(%a_0: f64, %b_1: f64) -> f64 {
bb0:
    %2: (f64, f64) = tuple.new %a_0, %b_1
    %3: ((f64, f64), f64) = tuple.new %2, %a_0
    %4: (f64, f64) = tuple.get 0 %3
    %5: f64 = tuple.get 1 %4
    ret %5
}
");
        assert!(text.contains("ret %b_1"), "{text}");
    }
}
