//! Array elements forwarded within a block and into the blocks it alone enters: a load of
//! an element just stored or loaded is that value, a store of the value an element already holds is
//! dropped, and a store overwritten before anything could read it is dropped (and, on
//! the way, `x + 0` and `x * 1` are `x`).
//!
//! Reverse passes are where this pays. The adjoint of `y[r] = t` reads `ȳ[r]` and
//! zeroes it, and the adjoint of the load `t = y[r]` that fed it adds to `ȳ[r]` again:
//! `a = ȳ[r]; ȳ[r] = 0; ȳ[r] = ȳ[r] + a` is `ȳ[r]` left as it was, three memory
//! accesses and an addition for nothing. With the zero forwarded and `0 + a` folded
//! (an adjoint's sign of zero does not matter; see [`forward_elements`]), the second
//! store writes back the value loaded, and the first one is overwritten unread.
//!
//! Elements are identified by the array value and the index values, so two accesses
//! are to the same element when they use the same SSA values, and to different ones when
//! they use the same array value and different constants as an index (`xc[0]`, `xc[1]`
//! of an unrolled loop). Any other store may write an element of any other array of the
//! same type (two array values may be one array), so it forgets what is known of those,
//! unless the caller knows the two to be different arrays (`forward_elements_apart`: a
//! reverse pass's primal arguments and their shadows);
//! an operation that writes arrays some other way (a call, a kernel, an arena release)
//! forgets everything. A store is dropped as
//! overwritten only when it is trusted (it checks nothing), so no bounds error is lost.

use crate::entity::EntityRef;
use crate::function::*;
use crate::op::{FBinOp, Op};
use std::collections::HashMap;

/// What an operation does to array elements.
enum Access {
    /// Nothing.
    None,
    Load,
    Store,
    /// Reads elements of arrays it is given (a kernel, an array copy).
    Reads,
    /// May write elements of any array (a call, an in-place kernel).
    Writes,
}

fn access(op: &Op) -> Access {
    match op {
        Op::FConst(_)
        | Op::IConst(_)
        | Op::BConst(_)
        | Op::FBinary(_)
        | Op::FUnary(_)
        | Op::FPowI
        | Op::Linearized
        | Op::IBinary(_)
        | Op::IUnary(_)
        | Op::FCmp(_)
        | Op::ICmp(_)
        | Op::BCmp(_)
        | Op::Not
        | Op::IToF
        | Op::FToI
        | Op::ArrayFill
        | Op::ArrayLit(_)
        | Op::ArrayDim(_)
        | Op::SharesMemory
        | Op::ExpectDim(_)
        | Op::ZerosLike
        | Op::RefNew
        | Op::RefLoad
        | Op::RefStore
        | Op::TupleNew
        | Op::TupleGet(_)
        | Op::StructNew(_)
        | Op::StructGet(..)
        | Op::MutLoad(..)
        | Op::MutStore(..)
        | Op::Select
        | Op::StackNew
        | Op::Unset
        | Op::StackPush
        | Op::StackPop
        | Op::StackPeek
        | Op::StackReserve
        | Op::StackPut
        | Op::ArenaMark
        | Op::TapeMark => Access::None,
        Op::Load | Op::TrustedLoad => Access::Load,
        Op::Store | Op::TrustedStore => Access::Store,
        Op::ArrayCopy
        | Op::Sum
        | Op::Dot
        | Op::MapFBinary(_)
        | Op::MapIBinary(_)
        | Op::MapFUnary(_)
        | Op::MapFPowI
        | Op::MatMul(_)
        | Op::MatVec(_)
        | Op::Transpose
        | Op::Print => Access::Reads,
        Op::CopyInto
        | Op::MatMulAcc(_)
        | Op::MatVecAcc(_)
        | Op::OuterAcc
        | Op::AddInto
        | Op::Axpy
        | Op::MoveAdd
        | Op::Call(_)
        | Op::ArenaRelease
        | Op::TapeRelease => Access::Writes,
    }
}

/// Whether `op` may change elements of an array that exists before it (a store, an
/// in-place kernel, a call): what a pass that moves a read of an array past other
/// instructions must not move it past.
pub fn may_write_elements(op: &Op) -> bool {
    matches!(access(op), Access::Store | Access::Writes)
}

/// Whether `op` touches array elements only as a load or a store does, or not at all (no
/// kernel reading or writing whole arrays, no call, no arena given back): a pass that
/// looks at a loop's loads and stores one by one sees every element it touches.
pub fn touches_elements_only_by_loads_and_stores(op: &Op) -> bool {
    matches!(access(op), Access::None | Access::Load | Access::Store)
}

/// An element: the array and its indices.
type Element = Vec<Value>;

/// `f` with array elements forwarded within each block (see the module docs). With
/// `adjoint`, the function computes derivatives, whose zeros carry no sign that
/// matters, and `x + 0.0` and `0.0 + x` are `x` (for `x = -0.0` IEEE gives `+0.0`);
/// otherwise only the exact `x + -0.0` and `x - 0.0` fold.
pub fn forward_elements(f: Function, adjoint: bool) -> Function {
    forward_elements_apart(f, adjoint, &|_, _| false)
}

/// [`forward_elements`], and whether it forwarded or dropped anything (operations on
/// forwarded elements may then repeat one another: worth merging again).
pub fn forward_elements_reporting(f: Function, adjoint: bool) -> (Function, bool) {
    forward_to_fixpoint(f, adjoint, &|_, _| false)
}

/// [`forward_elements`], where `apart(a, b)` says that array values `a` and `b` are
/// known to be different arrays (a reverse pass's primal argument and a shadow), so a
/// store to one keeps what is known of the other.
pub fn forward_elements_apart(f: Function, adjoint: bool, apart: &dyn Fn(Value, Value) -> bool) -> Function {
    forward_to_fixpoint(f, adjoint, apart).0
}

/// Forwarding passes until one changes nothing, and whether any changed something.
fn forward_to_fixpoint(
    mut f: Function,
    adjoint: bool,
    apart: &dyn Fn(Value, Value) -> bool,
) -> (Function, bool) {
    // Each pass can expose more (a dropped overwritten store leaves a store of the value
    // loaded before it); two or three reach the fixpoint in practice.
    let mut changed = false;
    for _ in 0..4 {
        if !forward_once(&mut f, adjoint, apart) {
            break;
        }
        changed = true;
    }
    (f, changed)
}

fn forward_once(f: &mut Function, adjoint: bool, apart: &dyn Fn(Value, Value) -> bool) -> bool {
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let mut changed = false;
    // Blocks in reverse post-order, so that a block entered by one edge comes after the
    // block that enters it, which hands it what it knew at its end; unreachable blocks
    // after, knowing nothing.
    let mut preds = vec![0usize; f.blocks.len()];
    for (_, data) in f.blocks.iter() {
        for s in data.term.successors() {
            preds[s.block.index()] += 1;
        }
    }
    let mut blocks = crate::cfg::reverse_post_order(f);
    let mut seen = vec![false; f.blocks.len()];
    blocks.iter().for_each(|b| seen[b.index()] = true);
    blocks.extend(f.blocks.keys().filter(|b| !seen[b.index()]));
    let mut handed: HashMap<Block, HashMap<Element, Value>> = HashMap::new();
    for b in blocks {
        let insts = std::mem::take(&mut f.blocks[b].insts);
        let mut kept: Vec<Inst> = Vec::with_capacity(insts.len());
        let mut dropped: Vec<Inst> = Vec::new();
        // What each element known in this block holds: at its start, what the block
        // that alone enters it knew at its end (that block dominates this one, so its
        // values are defined here, and nothing ran in between).
        let mut known: HashMap<Element, Value> = handed.remove(&b).unwrap_or_default();
        // Stores nothing may have read since they ran, by element.
        let mut unread: HashMap<Element, Inst> = HashMap::new();
        for i in insts {
            let args: Vec<Value> = f.insts[i].args.iter().map(|a| *subst.get(a).unwrap_or(a)).collect();
            f.insts[i].args = args.clone();
            if let (Some(r), Some(x)) = (f.insts[i].result, plus_zero(f, &f.insts[i].op, &args, adjoint)) {
                subst.insert(r, x);
                changed = true;
                continue;
            }
            match access(&f.insts[i].op) {
                Access::None => {}
                Access::Load => {
                    let element: Element = args.clone();
                    if let (Some(r), Some(&v)) = (f.insts[i].result, known.get(&element)) {
                        subst.insert(r, v);
                        changed = true;
                        continue;
                    }
                    let ty = f.value_type(args[0]);
                    unread.retain(|e, _| {
                        f.value_type(e[0]) != ty || distinct(f, e, &element) || apart(e[0], element[0])
                    });
                    if let Some(r) = f.insts[i].result {
                        known.insert(element, r);
                    }
                }
                Access::Store => {
                    let (element, value) = (args[..args.len() - 1].to_vec(), args[args.len() - 1]);
                    if known.get(&element) == Some(&value) {
                        changed = true;
                        continue;
                    }
                    if let Some(earlier) = unread.remove(&element) {
                        if f.insts[earlier].op == Op::TrustedStore {
                            dropped.push(earlier);
                            changed = true;
                        }
                    }
                    let ty = f.value_type(args[0]);
                    known.retain(|e, _| {
                        f.value_type(e[0]) != ty || distinct(f, e, &element) || apart(e[0], element[0])
                    });
                    known.insert(element.clone(), value);
                    unread.insert(element, i);
                }
                Access::Reads => unread.clear(),
                Access::Writes => {
                    unread.clear();
                    known.clear();
                }
            }
            kept.push(i);
        }
        kept.retain(|i| !dropped.contains(i));
        f.blocks[b].insts = kept;
        // Stores not read yet are not handed on: another successor may read them.
        if !known.is_empty() {
            let mut single: Vec<Block> = f.blocks[b]
                .term
                .successors()
                .map(|s| s.block)
                .filter(|&s| preds[s.index()] == 1 && s != b)
                .collect();
            // The last of them takes the map itself.
            if let Some(last) = single.pop() {
                for s in single {
                    handed.insert(s, known.clone());
                }
                handed.insert(last, known);
            }
        }
    }
    // Uses in terminators and in blocks visited before the replacement was known.
    f.substitute(&subst);
    changed
}

/// Whether two elements are different elements of one array: the same array value,
/// and in some dimension two different constant indices (`xc[0]` and `xc[1]`, once a
/// loop over them is unrolled).
fn distinct(f: &Function, a: &Element, b: &Element) -> bool {
    a.len() == b.len() && a.first() == b.first() && distinct_indices(f, &a[1..], &b[1..])
}

/// Whether two lists of indices into one array name different elements whatever their
/// values: in some dimension both are constants, and different.
pub fn distinct_indices(f: &Function, a: &[Value], b: &[Value]) -> bool {
    a.iter().zip(b).any(|(&x, &y)| matches!((f.const_int(x), f.const_int(y)), (Some(p), Some(q)) if p != q))
}

/// The operand that `x + 0`, `0 + x`, `x - 0`, `x * 1` or `1 * x` is, when the op is
/// one of those (see [`forward_elements`] for which zeros count; a product with one is
/// the other factor for every `x`). Adjoints make them: `0.5 * e * e` sends back
/// `1.0 * e` among its terms.
fn plus_zero(f: &Function, op: &Op, args: &[Value], adjoint: bool) -> Option<Value> {
    let zero = |v: Value| match f.defining(v)?.op {
        Op::FConst(c) if c == 0.0 => Some(c.is_sign_negative()),
        _ => None,
    };
    let one = |v: Value| f.defining(v).is_some_and(|d| d.op == Op::FConst(1.0));
    match (op, args) {
        (Op::FBinary(FBinOp::Mul), [a, b]) if one(*a) => Some(*b),
        (Op::FBinary(FBinOp::Mul), [a, b]) if one(*b) => Some(*a),
        (Op::FBinary(FBinOp::Add), [a, b]) => match (zero(*a), zero(*b)) {
            (_, Some(negative)) if adjoint || negative => Some(*a),
            (Some(negative), _) if adjoint || negative => Some(*b),
            _ => None,
        },
        (Op::FBinary(FBinOp::Sub), [a, b]) => match zero(*b) {
            Some(false) => Some(*a),
            Some(true) if adjoint => Some(*a),
            _ => None,
        },
        _ => None,
    }
}

/// `f` with each load that both arms of a branch begin with (after arithmetic that
/// cannot fail) made once, before the branch: `if r2 < 1.0 { d = 1.0 + k[c] * r2 } else
/// { d = 1.0 + k[c] }` reads `k[c]` in front of the `if`. Both arms would read the same
/// element, and nothing between the branch and either load reads, writes or fails, so
/// the load fails, if it does, as it would have in either arm (its error spans the text
/// of both reads). Arms that only compute
/// then let the branch be linearized when it is differentiated (`mcir_ad`'s
/// `linearize.rs`), so its reverse pass neither branches nor tapes the path. Returns
/// whether anything moved.
pub fn hoist_loads_both_arms_make(mut f: Function) -> (Function, bool) {
    // A chain `if … else if … else` reading one element in every arm: the inner branch's
    // read moves to its head, which the outer branch's arm is, so the outer one can move
    // it again on the next round.
    let mut moved_any = false;
    for _ in 0..MAX_HOIST_ROUNDS {
        let (g, moved) = hoist_loads_once(f);
        f = g;
        if !moved {
            break;
        }
        moved_any = true;
    }
    (f, moved_any)
}

/// How many arms deep a read every arm of a chain begins with is moved.
const MAX_HOIST_ROUNDS: usize = 8;

fn hoist_loads_once(mut f: Function) -> (Function, bool) {
    let mut moved_any = false;
    let mut preds: Vec<usize> = vec![0; f.blocks.len()];
    for (_, data) in f.blocks.iter() {
        for s in data.term.successors() {
            preds[s.block.index()] += 1;
        }
    }
    let blocks: Vec<Block> = f.blocks.keys().collect();
    for b in blocks {
        let Terminator::Branch { then_dest, else_dest, .. } = &f.blocks[b].term else { continue };
        let (t, e) = (then_dest.block, else_dest.block);
        if t == e || t == b || e == b || preds[t.index()] != 1 || preds[e.index()] != 1 {
            continue;
        }
        while let Some((lt, le)) = common_leading_load(&f, t, e) {
            // The load's indices: values from outside the arms, or constants made again
            // in front of the branch.
            let mut args = Vec::with_capacity(f.insts[lt].args.len());
            for &a in &f.insts[lt].args.clone() {
                let ValueDef::Inst(c) = f.values[a].def else {
                    args.push(a);
                    continue;
                };
                if f.blocks[t].insts.contains(&c) {
                    let (op, ty, span) = (f.insts[c].op.clone(), f.value_type(a), f.insts[c].span);
                    args.push(f.push_value(b, op, vec![], ty, span));
                } else {
                    args.push(a);
                }
            }
            let op = if f.insts[lt].op == Op::TrustedLoad && f.insts[le].op == Op::TrustedLoad {
                Op::TrustedLoad
            } else {
                Op::Load
            };
            let (Some(rt), Some(re)) = (f.insts[lt].result, f.insts[le].result) else { break };
            // A failing read is reported over both reads' text: either arm would have
            // failed there, with the same index and extent.
            let (st, se) = (f.insts[lt].span, f.insts[le].span);
            let span = Span { start: st.start.min(se.start), end: st.end.max(se.end) };
            let ty = f.value_type(rt);
            let x = f.push_value(b, op, args, ty, span);
            f.blocks[t].insts.retain(|&i| i != lt);
            f.blocks[e].insts.retain(|&i| i != le);
            let subst: HashMap<Value, Value> = [(rt, x), (re, x)].into_iter().collect();
            f.substitute(&subst);
            moved_any = true;
        }
    }
    (f, moved_any)
}

/// The first load of block `t` and the first load of block `e` when they read the same
/// element (the same array and, index by index, the same value or equal constants, the
/// values coming from outside both blocks), each preceded in its block only by
/// arithmetic that cannot fail and touches no memory.
fn common_leading_load(f: &Function, t: Block, e: Block) -> Option<(Inst, Inst)> {
    let leading = |b: Block| -> Option<Inst> {
        for &i in &f.blocks[b].insts {
            let op = &f.insts[i].op;
            if matches!(op, Op::Load | Op::TrustedLoad) {
                return Some(i);
            }
            if !op.is_scalar_arith() || matches!(op, Op::FPowI) {
                return None;
            }
        }
        None
    };
    let (lt, le) = (leading(t)?, leading(e)?);
    let (at, ae) = (&f.insts[lt].args, &f.insts[le].args);
    let inside = |v: Value| match f.values[v].def {
        ValueDef::Inst(i) => f.blocks[t].insts.contains(&i) || f.blocks[e].insts.contains(&i),
        ValueDef::Param(pb, _) => pb == t || pb == e,
    };
    let same = |x: Value, y: Value| {
        if x == y {
            return !inside(x);
        }
        let is_const = |v: Value| f.defining(v).is_some_and(|d| matches!(d.op, Op::IConst(_)));
        is_const(x) && is_const(y) && f.const_int(x) == f.const_int(y)
    };
    (at.len() == ae.len() && at.iter().zip(ae).all(|(&x, &y)| same(x, y))).then_some((lt, le))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ir: &str, adjoint: bool) -> String {
        let m = crate::parse_module(ir).expect("parses");
        let mut out = m.clone();
        let ids: Vec<FuncId> = out.funcs.keys().collect();
        for id in ids {
            out.funcs[id] = forward_elements(m.funcs[id].clone(), adjoint);
        }
        crate::verify_module(&out).expect("verifies");
        crate::print::print_module(&out)
    }

    #[test]
    fn an_adjoint_zeroed_then_restored_is_left_alone() {
        let out = run(
            "fn @f(%dy_0: f64[], %r_1: i64, %dx_2: f64[]) {
bb0:
    %3: f64 = load.trusted %dy_0[%r_1]
    %4: f64 = fconst 0.0
    store.trusted %dy_0[%r_1], %4
    %5: f64 = load.trusted %dy_0[%r_1]
    %6: f64 = fadd %5, %3
    store.trusted %dy_0[%r_1], %6
    %7: f64 = load.trusted %dx_2[%r_1]
    %8: f64 = fadd %7, %3
    store.trusted %dx_2[%r_1], %8
    ret
}",
            true,
        );
        // Only the read of ȳ[r] and the update of x̄[r] are left.
        assert_eq!(out.matches("store").count(), 1, "{out}");
        assert_eq!(out.matches("load").count(), 2, "{out}");
        assert!(out.contains("store.trusted %dx_2[%r_1]"), "{out}");
    }

    #[test]
    fn a_store_to_another_array_of_the_type_forgets_the_element() {
        // `b` may be `a`: the second load must read memory again.
        let out = run(
            "fn @f(%a_0: f64[], %b_1: f64[], %i_2: i64, %j_3: i64) -> f64 {
bb0:
    %4: f64 = load %a_0[%i_2]
    %5: f64 = fconst 1.0
    store %b_1[%j_3], %5
    %6: f64 = load %a_0[%i_2]
    %7: f64 = fadd %4, %6
    ret %7
}",
            false,
        );
        assert_eq!(out.matches("load").count(), 2, "{out}");
    }

    #[test]
    fn a_store_to_an_array_known_apart_keeps_the_element() {
        // A reverse pass restoring its primal argument `x` between the reads and writes
        // of the shadow `dx`: told that the two are different arrays, the zero stored
        // into dx[r] is forwarded past the restore, and what is left is dx[r] read once
        // and written once; not told, everything stays.
        let ir = "fn @f(%dx_0: f64[], %x_1: f64[], %r_2: i64, %old_3: f64, %g_4: f64) {
bb0:
    %5: f64 = load.trusted %dx_0[%r_2]
    %6: f64 = fconst 0.0
    store.trusted %dx_0[%r_2], %6
    store.trusted %x_1[%r_2], %old_3
    %7: f64 = load.trusted %dx_0[%r_2]
    %8: f64 = fmul %5, %g_4
    %9: f64 = fadd %7, %8
    store.trusted %dx_0[%r_2], %9
    ret
}";
        let m = crate::parse_module(ir).expect("parses");
        use crate::entity::EntityRef;
        let (dx, x) = (Value::new(0), Value::new(1));
        let id: FuncId = m.funcs.keys().next().expect("a function");
        let apart =
            forward_elements_apart(m.funcs[id].clone(), true, &|a, b| (a, b) == (dx, x) || (a, b) == (x, dx));
        let mut out = m.clone();
        out.funcs[id] = apart;
        crate::verify_module(&out).expect("verifies");
        let text = crate::print::print_module(&out);
        assert_eq!(text.matches("load").count(), 1, "{text}");
        assert_eq!(text.matches("store.trusted %dx_0").count(), 1, "{text}");
        assert!(text.contains("store.trusted %x_1[%r_2], %old_3"), "{text}");
        let text = run(ir, true);
        assert_eq!(text.matches("load").count(), 2, "{text}");
        assert_eq!(text.matches("store.trusted %dx_0").count(), 2, "{text}");
    }

    #[test]
    fn an_element_known_at_a_branch_is_known_in_its_arms_but_not_at_their_join() {
        // `a[i]` loaded before the branch is the value each arm reads again, and the
        // value the arm that stores it stored is what it reads back; at the join, which
        // two edges enter, nothing is known, so its load stays. A store to an array of
        // another type keeps what is known of `a`.
        let out = run(
            "fn @f(%a_0: f64[], %m_1: i64[], %i_2: i64) -> f64 {
bb0:
    %3: f64 = load %a_0[%i_2]
    %4: f64 = fconst 0.5
    %5: bool = fcmp lt %3, %4
    br %5, bb1, bb2
bb1:
    %6: f64 = load.trusted %a_0[%i_2]
    %7: f64 = fmul %6, %6
    store.trusted %a_0[%i_2], %7
    %8: f64 = load.trusted %a_0[%i_2]
    jump bb3(%8)
bb2:
    %9: i64 = iconst 1
    store %m_1[%i_2], %9
    %10: f64 = load.trusted %a_0[%i_2]
    jump bb3(%10)
bb3(%11: f64):
    %12: f64 = load.trusted %a_0[%i_2]
    %13: f64 = fadd %11, %12
    ret %13
}",
            false,
        );
        assert_eq!(out.matches("load").count(), 2, "{out}");
        assert!(out.contains("fmul %3, %3"), "{out}");
        assert!(out.contains("jump bb3(%6)") && out.contains("jump bb3(%3)"), "{out}");
    }

    #[test]
    fn primal_code_keeps_the_sign_of_zero() {
        // 0.0 + x is not x for x = -0.0 outside derivative code.
        let ir = "fn @f(%x_0: f64) -> f64 {
bb0:
    %1: f64 = fconst 0.0
    %2: f64 = fadd %1, %x_0
    ret %2
}";
        assert!(run(ir, false).contains("fadd"));
        assert!(!run(ir, true).contains("fadd"));
    }

    #[test]
    fn an_overwritten_store_that_checks_its_index_stays() {
        let out = run(
            "fn @f(%a_0: f64[], %i_1: i64) {
bb0:
    %2: f64 = fconst 1.0
    store %a_0[%i_1], %2
    %3: f64 = fconst 2.0
    store.trusted %a_0[%i_1], %3
    ret
}",
            false,
        );
        assert_eq!(out.matches("store").count(), 2, "{out}");
    }

    #[test]
    fn a_read_both_arms_begin_with_moves_in_front_of_the_branch() {
        let text = "fn @f(%k_0: f64[], %c_1: i64, %r_2: f64) -> f64 {
bb0:
    %3: f64 = fconst 1.0
    %4: bool = fcmp lt %r_2, %3
    br %4, bb1, bb2
bb1:
    %5: f64 = fconst 1.0
    %6: i64 = iconst 4
    %7: f64 = load %k_0[%6]
    %8: f64 = fmul %7, %r_2
    %9: f64 = fadd %5, %8
    jump bb3(%9)
bb2:
    %10: i64 = iconst 4
    %11: f64 = load %k_0[%10]
    %12: f64 = fadd %3, %11
    jump bb3(%12)
bb3(%13: f64):
    ret %13
}";
        let hoisted = |text: &str| {
            let m = crate::parse_module(text).expect("parses");
            let f = m.funcs.values().next().expect("a function").clone();
            let (f, moved) = hoist_loads_both_arms_make(f);
            let mut out = m.clone();
            let id = out.funcs.keys().next().expect("a function");
            out.funcs[id] = f;
            crate::verify_module(&out).expect("verifies");
            (moved, crate::print::print_module(&out))
        };
        let (moved, out) = hoisted(text);
        assert!(moved);
        let entry = out.split("bb1:").next().expect("the entry block");
        assert!(entry.contains("load %k_0"), "{out}");
        assert_eq!(out.matches("load").count(), 1, "{out}");
        // Reads of other elements stay where they are, as does a read after another read
        // (which may fail first).
        assert!(!hoisted(&text.replace("%10: i64 = iconst 4", "%10: i64 = iconst 3")).0);
        let after_a_check = text.replace(
            "%5: f64 = fconst 1.0",
            "%20: i64 = iconst 0\n    %21: f64 = load %k_0[%20]\n    %5: f64 = fadd %21, %3",
        );
        assert!(!hoisted(&after_a_check).0);
    }
}
