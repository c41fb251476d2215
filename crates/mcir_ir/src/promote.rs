//! An array element that an inner loop reads and writes at one place, held in a value
//! across the loop instead of in memory.
//!
//! `for j in 0..m { y[i] += a[i, j] * x[j]; }` loads `y[i]`, adds and stores it back in
//! every iteration, so each addition waits for the store before it to reach the load
//! through memory, about three times as long as an addition in a register. Reverse
//! passes are full of such loops: the adjoint of `c[i + j] += a[i] * b[j]` adds into
//! `ā[i]` for every `j`. Such an element (its array and indices computed before the
//! loop, written at least once in it) becomes a parameter of the loop's header: loaded
//! once in front of the loop, its loads in the loop read the parameter, its stores pass
//! a new value on, and the value the loop ends with is stored once after it.
//!
//! That is only right when nothing else in the loop reads or writes that element. So:
//!
//! - the loop holds no operation that reads or writes array elements other than loads
//!   and stores (no call, kernel, copy or `print`);
//! - every other access to the same array value is at other constant indices, when the
//!   element's are constants too (`xc[0]` beside `xc[1]`);
//! - every other array of the same type the loop reads or writes is tested apart from
//!   it in front of the loop (`array.shares`), unless it is made fresh there or the two
//!   cannot be one (one made by the function, the other its argument);
//! - the element's indices are tested in bounds in front of the loop, so that the load
//!   before the loop and the store after it cannot fail, even if the loop runs no
//!   iteration.
//!
//! These tests run once each time the loop is entered. The loop gets a copy that holds
//! the element in a value, entered when every test passes; otherwise the loop runs as
//! written (`crate::version`'s copying). The copy computes the same values in the same
//! order, bit for bit. One thing differs: a run-time error inside the loop stops the
//! program before the element is stored, so an array the failed call was writing may
//! hold an older value of it (what a failed call leaves in its arguments is not
//! specified; see `docs/ir.md`).
//!
//! A loop qualifies when it is innermost, entered and left as versioning requires
//! ([`crate::version`]), at most [`MAX_PROMOTED_INSTS`] instructions long, and of one
//! block or two (a header that tests and a body that jumps back): each iteration then
//! runs the header's instructions and the body's in that order, so the element's value
//! at each access is known without building joins. An element's array and indices are
//! values from before the loop, constants (made anywhere), or parameters of the header
//! that every iteration passes on unchanged (an outer counter, as reverse passes carry
//! it). Native code runs the result, before versioning (`crate::version`), so that the
//! copy that holds elements is the one that gets a copy without checks; the
//! interpreter runs the loop as written.

use crate::cfg::ControlFlow;
use crate::function::*;
use crate::op::{CmpOp, Op};
use crate::types::{TypeId, TypeTable};
use crate::version::{copy_in_turn, copy_loop, innermost_loop, route_through_tests, LoopShape, Test};
use std::collections::{HashMap, HashSet};

/// The longest loop (in instructions) whose elements are held in values.
pub const MAX_PROMOTED_INSTS: usize = 200;

/// The most loops of one function that are copied.
const MAX_PROMOTED_LOOPS: usize = 8;

/// The most tests in front of one loop.
const MAX_TESTS: usize = 16;

/// An index of an element held in a value: a constant (wherever the loop makes it; the
/// copy makes its own), or a value computed before the loop.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Index {
    Const(i64),
    Value(Value),
}

/// An element held in a value: its array, its indices, and the element's type.
#[derive(Clone, PartialEq)]
struct Element {
    array: Value,
    index: Vec<Index>,
    ty: TypeId,
}

/// A loop, the elements it holds in values, and the pairs of arrays to test apart.
struct Plan {
    shape: LoopShape,
    /// The loop's blocks in the order an iteration runs them: the header, then the body
    /// (when it is a block of its own).
    order: Vec<Block>,
    elements: Vec<Element>,
    apart: Vec<(Value, Value)>,
}

/// An access to an array element in the loop.
struct Access {
    array: Value,
    index: Vec<Index>,
    /// The element's type: the load's result, or the value stored.
    ty: TypeId,
    store: bool,
}

/// `f` with the elements of its qualifying loops held in values (see the module docs),
/// or `None` when no loop qualifies.
pub fn promote_elements(f: &Function) -> Option<Function> {
    let cfg = ControlFlow::compute(f);
    let mut g = f.clone();
    read_fixed_parameters_at_entry(&mut g, &cfg);
    let plans = plans(&g, &cfg);
    if plans.is_empty() {
        return None;
    }
    Some(copy_in_turn(g, plans, promote, Plan::read_after))
}

/// A parameter of an innermost loop's header that every back edge passes on unchanged
/// (an outer loop's counter, carried through the inner loop as a reverse pass carries
/// it) is the value the loop was entered with: its uses read that value instead, so
/// that an element it indexes is seen to be fixed for the loop.
fn read_fixed_parameters_at_entry(f: &mut Function, cfg: &ControlFlow) {
    let depth = cfg.loop_depths();
    let mut subst: HashMap<Value, Value> = HashMap::new();
    for &h in &cfg.rpo {
        let Some(shape) = innermost_loop(f, cfg, &depth, h) else { continue };
        let Some(entered) = f.blocks[shape.pre].term.successors().find(|s| s.block == h) else { continue };
        let back: Vec<&BlockCall> =
            cfg.latches(h).flat_map(|l| f.blocks[l].term.successors().filter(|s| s.block == h)).collect();
        for (k, &p) in f.blocks[h].params.iter().enumerate() {
            if back.iter().all(|call| call.args.get(k) == Some(&p)) {
                if let Some(&v) = entered.args.get(k) {
                    subst.insert(p, v);
                }
            }
        }
    }
    f.substitute(&subst);
}

/// The access `d` makes, if it is a load or a store.
fn access(f: &Function, d: &InstData) -> Option<Access> {
    let (rank, store) = match d.op {
        Op::Load | Op::TrustedLoad => (d.args.len().checked_sub(1)?, false),
        Op::Store | Op::TrustedStore => (d.args.len().checked_sub(2)?, true),
        _ => return None,
    };
    let ty = if store { f.value_type(*d.args.last()?) } else { f.value_type(d.result?) };
    let index =
        d.args[1..1 + rank].iter().map(|&v| f.const_int(v).map_or(Index::Value(v), Index::Const)).collect();
    Some(Access { array: d.args[0], index, ty, store })
}

/// Whether arrays `a` and `b` (two values) can never be one: one is made by an
/// instruction that allocates and the other is made by another, or is an argument of
/// the function.
fn known_apart(f: &Function, a: Value, b: Value) -> bool {
    let made = |v: Value| f.defining(v).is_some_and(|d| d.op.allocates());
    let argument = |v: Value| f.param_values().contains(&v);
    (made(a) && (made(b) || argument(b))) || (made(b) && argument(a))
}

fn plans(f: &Function, cfg: &ControlFlow) -> Vec<Plan> {
    let depth = cfg.loop_depths();
    let mut out = Vec::new();
    for &h in &cfg.rpo {
        if out.len() >= MAX_PROMOTED_LOOPS {
            break;
        }
        let Some(shape) = innermost_loop(f, cfg, &depth, h) else { continue };
        let Some(order) = iteration_order(f, &shape) else { continue };
        let size: usize = order.iter().map(|&b| f.blocks[b].insts.len()).sum();
        if size > MAX_PROMOTED_INSTS {
            continue;
        }
        let insts: Vec<Inst> = order.iter().flat_map(|&b| f.blocks[b].insts.iter().copied()).collect();
        if insts.iter().any(|&i| !crate::memory::touches_elements_only_by_loads_and_stores(&f.insts[i].op)) {
            continue;
        }
        let made_inside: HashSet<Value> = order
            .iter()
            .flat_map(|&b| f.blocks[b].params.iter().copied())
            .chain(insts.iter().filter_map(|&i| f.insts[i].result))
            .collect();
        let accesses: Vec<Access> = insts.iter().filter_map(|&i| access(f, &f.insts[i])).collect();
        // The elements fixed for the loop that it writes.
        let mut elements: Vec<Element> = Vec::new();
        for a in &accesses {
            let before = |i: &Index| !matches!(i, Index::Value(v) if made_inside.contains(v));
            let fixed = !made_inside.contains(&a.array) && a.index.iter().all(before);
            let element = Element { array: a.array, index: a.index.clone(), ty: a.ty };
            if fixed && a.store && !elements.contains(&element) {
                elements.push(element);
            }
        }
        let mut kept: Vec<Element> = Vec::new();
        let mut apart: Vec<(Value, Value)> = Vec::new();
        'elements: for e in elements {
            if !matches!(e.ty, TypeTable::F64 | TypeTable::I64 | TypeTable::BOOL) {
                continue;
            }
            let array_type = f.value_type(e.array);
            let mut pairs: Vec<(Value, Value)> = Vec::new();
            for a in &accesses {
                if a.array == e.array {
                    if a.index == e.index {
                        continue;
                    }
                    let constants = |ix: &[Index]| {
                        ix.iter()
                            .map(|i| if let Index::Const(k) = i { Some(*k) } else { None })
                            .collect::<Option<Vec<_>>>()
                    };
                    match (constants(&a.index), constants(&e.index)) {
                        (Some(x), Some(y)) if x != y => continue,
                        _ => continue 'elements,
                    }
                }
                if f.value_type(a.array) != array_type || known_apart(f, e.array, a.array) {
                    continue;
                }
                if made_inside.contains(&a.array) {
                    // An array the loop makes fresh is apart; one it reads from a field or
                    // a cell cannot be tested in front of it.
                    if f.defining(a.array).is_some_and(|d| d.op.allocates()) {
                        continue;
                    }
                    continue 'elements;
                }
                if !pairs.contains(&(e.array, a.array)) {
                    pairs.push((e.array, a.array));
                }
            }
            for p in pairs {
                if !apart.contains(&p) {
                    apart.push(p);
                }
            }
            kept.push(e);
        }
        let bounds_tests: usize = bounds_checks(&kept)
            .iter()
            .map(|(_, _, i)| if matches!(i, Index::Const(_)) { 1 } else { 2 })
            .sum();
        if kept.is_empty() || bounds_tests + apart.len() > MAX_TESTS {
            continue;
        }
        out.push(Plan { shape, order, elements: kept, apart });
    }
    out
}

/// The indices of `elements` to test in bounds, by array and dimension: each index that
/// is a value once, and of the constants only the largest (`dp[0]` to `dp[4]`, the
/// adjoints of five parameters a reverse loop adds into, need one test, `4 < len`).
fn bounds_checks(elements: &[Element]) -> Vec<(Value, usize, Index)> {
    let mut out: Vec<(Value, usize, Index)> = Vec::new();
    for e in elements {
        for (dim, &i) in e.index.iter().enumerate() {
            let same_place = |c: &(Value, usize, Index)| c.0 == e.array && c.1 == dim;
            match i {
                Index::Const(k) if k >= 0 => {
                    match out.iter_mut().find(|c| same_place(c) && matches!(c.2, Index::Const(_))) {
                        Some(c) => {
                            if let Index::Const(m) = c.2 {
                                c.2 = Index::Const(m.max(k));
                            }
                        }
                        None => out.push((e.array, dim, i)),
                    }
                }
                _ => {
                    if !out.iter().any(|c| same_place(c) && c.2 == i) {
                        out.push((e.array, dim, i));
                    }
                }
            }
        }
    }
    out
}

/// The loop's blocks in the order each iteration runs them, when it is one block that
/// jumps back to itself or leaves, or a header that goes on to a body or leaves and a
/// body that jumps back to the header.
fn iteration_order(f: &Function, shape: &LoopShape) -> Option<Vec<Block>> {
    let h = shape.header;
    let Terminator::Branch { then_dest, else_dest, .. } = &f.blocks[h].term else { return None };
    let next = match (then_dest.block == shape.exit, else_dest.block == shape.exit) {
        (true, false) => else_dest.block,
        (false, true) => then_dest.block,
        _ => return None,
    };
    match shape.body.len() {
        1 if next == h => Some(vec![h]),
        2 if next != h => match &f.blocks[next].term {
            Terminator::Jump(back) if back.block == h => Some(vec![h, next]),
            _ => None,
        },
        _ => None,
    }
}

impl Plan {
    /// This plan reading `new(v)` for each value `v` (the exit parameters an earlier
    /// loop's copy made, see [`copy_in_turn`]).
    fn read_after(&mut self, new: &dyn Fn(Value) -> Value) {
        for e in &mut self.elements {
            e.array = new(e.array);
            for i in &mut e.index {
                if let Index::Value(v) = i {
                    *v = new(*v);
                }
            }
        }
        self.apart.iter_mut().for_each(|(a, b)| (*a, *b) = (new(*a), new(*b)));
    }
}

/// The value of index `i` in block `b`: a constant made there, or the value itself.
fn index_value(g: &mut Function, b: Block, i: Index, span: Span) -> Option<Value> {
    match i {
        Index::Const(k) => g.push_inst(b, Op::IConst(k), vec![], Some(TypeTable::I64), span),
        Index::Value(v) => Some(v),
    }
}

/// The operands of an access to element `e` from block `b`: its array and indices.
fn element_operands(g: &mut Function, b: Block, e: &Element, span: Span) -> Option<Vec<Value>> {
    let mut operands = vec![e.array];
    for &i in &e.index {
        operands.push(index_value(g, b, i, span)?);
    }
    Some(operands)
}

/// Copies the loop of `plan`, holds its elements in values in the copy, and puts the
/// tests in front of both; yields what [`copy_loop`] made exit parameters of.
fn promote(g: &mut Function, plan: &Plan) -> HashMap<Value, Value> {
    let span = g.blocks[plan.shape.header].term_span;
    let (copy, after) = copy_loop(g, &plan.shape);
    let header = copy[&plan.shape.header];
    // The copy's way in: the header's arguments, and each element loaded.
    let entry = g.add_block();
    let mut args: Vec<Value> = Vec::new();
    for p in g.blocks[plan.shape.header].params.clone() {
        let (ty, name) = (g.values[p].ty, g.values[p].name.clone());
        args.push(g.add_block_param(entry, ty, name));
    }
    let mut current: Vec<Value> = Vec::new();
    for e in &plan.elements {
        let Some(operands) = element_operands(g, entry, e, span) else { return after };
        let Some(loaded) = g.push_inst(entry, Op::TrustedLoad, operands, Some(e.ty), span) else {
            return after;
        };
        args.push(loaded);
        current.push(g.add_block_param(header, e.ty, None));
    }
    g.set_terminator(entry, Terminator::Jump(BlockCall { block: header, args }), span);
    // Each iteration, in order: a load of an element reads its current value, a store
    // sets it.
    let of = |d: &InstData| {
        let a = access(g, d)?;
        let stored = if a.store { Some(*d.args.last()?) } else { None };
        plan.elements.iter().position(|e| e.array == a.array && e.index == a.index).map(|k| (k, stored))
    };
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let resolve = |subst: &HashMap<Value, Value>, mut v: Value| {
        while let Some(&w) = subst.get(&v) {
            v = w;
        }
        v
    };
    let order: Vec<Block> = plan.order.iter().map(|b| copy[b]).collect();
    let mut kept_insts: Vec<Vec<Inst>> = Vec::new();
    // The elements' values where the header branches (to leave or go on).
    let mut leaving: Vec<Value> = Vec::new();
    for &b in &order {
        let mut kept = Vec::new();
        for &i in &g.blocks[b].insts {
            match of(&g.insts[i]) {
                Some((k, None)) => {
                    if let Some(r) = g.insts[i].result {
                        subst.insert(r, current[k]);
                    }
                }
                Some((k, Some(stored))) => current[k] = resolve(&subst, stored),
                None => kept.push(i),
            }
        }
        kept_insts.push(kept);
        if b == header {
            leaving = current.clone();
        }
    }
    for (&b, kept) in order.iter().zip(kept_insts) {
        g.blocks[b].insts = kept;
    }
    // The header leaves through a block that stores each element's value there; the
    // back edge passes the values at the end of the iteration.
    let leave = g.add_block();
    for (e, &value) in plan.elements.iter().zip(&leaving) {
        let Some(mut operands) = element_operands(g, leave, e, span) else { return after };
        operands.push(value);
        g.push_inst(leave, Op::TrustedStore, operands, None, span);
    }
    // (After the last block, `current` holds the values at the end of the iteration.)
    let last = current;
    let mut term = g.blocks[header].term.clone();
    let mut exit_args = Vec::new();
    for s in term.successors_mut() {
        if s.block == plan.shape.exit {
            exit_args = std::mem::take(&mut s.args);
            s.block = leave;
        } else if s.block == header {
            s.args.extend(&last);
        }
    }
    g.blocks[header].term = term;
    g.set_terminator(leave, Terminator::Jump(BlockCall { block: plan.shape.exit, args: exit_args }), span);
    if let [_, body] = order[..] {
        let mut term = g.blocks[body].term.clone();
        for s in term.successors_mut() {
            s.args.extend(&last);
        }
        g.blocks[body].term = term;
    }
    g.substitute(&subst);
    // The tests: each element's indices in bounds, and the arrays apart.
    let mut tests: Vec<Test> = Vec::new();
    for (array, dim, i) in bounds_checks(&plan.elements) {
        if !matches!(i, Index::Const(k) if k >= 0) {
            tests.push(Box::new(move |g: &mut Function, t: Block, span: Span| {
                let i = index_value(g, t, i, span)?;
                let zero = g.push_inst(t, Op::IConst(0), vec![], Some(TypeTable::I64), span)?;
                g.push_inst(t, Op::ICmp(CmpOp::Ge), vec![i, zero], Some(TypeTable::BOOL), span)
            }));
        }
        tests.push(Box::new(move |g: &mut Function, t: Block, span: Span| {
            let i = index_value(g, t, i, span)?;
            let extent = g.push_inst(t, Op::ArrayDim(dim as u8), vec![array], Some(TypeTable::I64), span)?;
            g.push_inst(t, Op::ICmp(CmpOp::Lt), vec![i, extent], Some(TypeTable::BOOL), span)
        }));
    }
    for &(a, b) in &plan.apart {
        tests.push(Box::new(move |g: &mut Function, t: Block, span: Span| {
            let shares = g.push_inst(t, Op::SharesMemory, vec![a, b], Some(TypeTable::BOOL), span)?;
            g.push_inst(t, Op::Not, vec![shares], Some(TypeTable::BOOL), span)
        }));
    }
    route_through_tests(g, &plan.shape, entry, tests);
    after
}

#[cfg(test)]
mod tests {
    use super::promote_elements;
    use crate::entity::EntityRef;

    /// `y[i] += a[i, j] * x[j]`: `y` made by the function, `x` its argument.
    const MATVEC: &str = "fn @main(%a_0: f64[,], %x_1: f64[]) -> f64[] {
bb0:
    %n_2: i64 = array.dim 0 %a_0
    %m_3: i64 = array.dim 1 %a_0
    %4: f64 = fconst 0.0
    %y_5: f64[] = array.fill %4, %n_2
    %6: i64 = iconst 0
    jump bb1(%6)
bb1(%i_7: i64):
    %8: bool = icmp lt %i_7, %n_2
    br %8, bb3, bb2
bb2:
    ret %y_5
bb3:
    %9: i64 = iconst 0
    jump bb4(%9)
bb4(%j_10: i64):
    %11: bool = icmp lt %j_10, %m_3
    br %11, bb6, bb5
bb5:
    %12: i64 = iconst 1
    %13: i64 = iadd %i_7, %12
    jump bb1(%13)
bb6:
    %14: f64 = load %a_0[%i_7, %j_10]
    %15: f64 = load %x_1[%j_10]
    %16: f64 = fmul %14, %15
    %17: f64 = load %y_5[%i_7]
    %18: f64 = fadd %17, %16
    store %y_5[%i_7], %18
    %19: i64 = iconst 1
    %20: i64 = iadd %j_10, %19
    jump bb4(%20)
}
";

    /// The function of `text` with its elements held in values, verified, and printed.
    fn promoted(text: &str) -> Option<String> {
        let m = crate::parse_module(text).expect("parses");
        let g = promote_elements(&m.funcs[crate::FuncId::new(0)])?;
        if let Err(e) = crate::verify::verify_function(&m, &g) {
            panic!("{e}");
        }
        Some(crate::print::print_function(&m, &g))
    }

    #[test]
    fn an_element_an_inner_loop_adds_into_is_held_in_a_value() {
        let text = promoted(MATVEC).expect("promoted");
        // The loop as written keeps its load and store; the copy loads once in front,
        // stores once behind, and adds in a value.
        assert_eq!(text.matches("load %y_5[%i_7]").count(), 1, "{text}");
        assert_eq!(text.matches("store %y_5[%i_7]").count(), 1, "{text}");
        assert_eq!(text.matches("load.trusted %y_5[%i_7]").count(), 1, "{text}");
        assert_eq!(text.matches("store.trusted %y_5[%i_7]").count(), 1, "{text}");
        // Tested in bounds in front of the loop; `x` is an argument and `y` made by the
        // function, so they need no test apart.
        assert!(text.contains("array.dim 0 %y_5"), "{text}");
        assert!(!text.contains("array.shares"), "{text}");
        // It re-parses.
        let again = crate::parse_module(&text).expect("re-parses");
        crate::verify::verify_module(&again).expect("verifies");
    }

    #[test]
    fn elements_at_constant_indices_of_one_array_are_tested_in_bounds_once() {
        // `acc[0] += x[j]; acc[1] += x[j]; acc[2] += x[j]` into an argument: one test,
        // `2 < len(acc)`, and one apart from `x`.
        let text = "fn @main(%x_0: f64[], %acc_1: f64[]) -> f64[] {
bb0:
    %m_2: i64 = array.dim 0 %x_0
    %3: i64 = iconst 0
    jump bb1(%3)
bb1(%j_4: i64):
    %5: bool = icmp lt %j_4, %m_2
    br %5, bb3, bb2
bb2:
    ret %acc_1
bb3:
    %6: f64 = load %x_0[%j_4]
    %7: i64 = iconst 0
    %8: f64 = load %acc_1[%7]
    %9: f64 = fadd %8, %6
    store %acc_1[%7], %9
    %10: i64 = iconst 1
    %11: f64 = load %acc_1[%10]
    %12: f64 = fadd %11, %6
    store %acc_1[%10], %12
    %13: i64 = iconst 2
    %14: f64 = load %acc_1[%13]
    %15: f64 = fadd %14, %6
    store %acc_1[%13], %15
    %16: i64 = iconst 1
    %17: i64 = iadd %j_4, %16
    jump bb1(%17)
}
";
        let text = promoted(text).expect("promoted");
        assert_eq!(text.matches("array.dim 0 %acc_1").count(), 1, "{text}");
        assert_eq!(text.matches("array.shares").count(), 1, "{text}");
        assert_eq!(text.matches("load.trusted %acc_1").count(), 3, "{text}");
    }

    #[test]
    fn arrays_of_its_type_that_could_be_it_are_tested_apart() {
        // `y` an argument too: it could be `x`.
        let text = MATVEC
            .replace(
                "fn @main(%a_0: f64[,], %x_1: f64[]) -> f64[] {",
                "fn @main(%a_0: f64[,], %x_1: f64[], %y_5: f64[]) -> f64[] {",
            )
            .replace("    %y_5: f64[] = array.fill %4, %n_2\n", "");
        let text = promoted(&text).expect("promoted");
        // (Printing numbers values afresh: `y` is `%y_2` now.)
        assert_eq!(text.matches("array.shares %y_2, %x_1").count(), 1, "{text}");
    }

    /// Two loops in a row: the first counts in `m`, the second adds into `y[m]`.
    const COUNT_THEN_ADD: &str = "fn @main(%x_0: f64[], %k_1: i64) -> f64[] {
bb0:
    %2: i64 = iconst 4
    %3: f64 = fconst 0.0
    %y_4: f64[] = array.fill %3, %2
    %m_5: i64 = iconst 0
    %6: i64 = array.dim 0 %x_0
    jump bb1(%m_5, %m_5)
bb1(%j_7: i64, %m_8: i64):
    %9: bool = icmp lt %j_7, %6
    br %9, bb6, bb2
bb2:
    %10: i64 = iconst 0
    jump bb3(%10)
bb3(%j_11: i64):
    %12: bool = icmp lt %j_11, %6
    br %12, bb5, bb4
bb4:
    ret %y_4
bb5:
    %13: f64 = load.trusted %x_0[%j_11]
    %14: f64 = load %y_4[%m_8]
    %15: f64 = fadd %14, %13
    store %y_4[%m_8], %15
    %16: i64 = iconst 1
    %17: i64 = iadd %j_11, %16
    jump bb3(%17)
bb6:
    %18: f64 = load.trusted %x_0[%j_7]
    %19: f64 = load %y_4[%k_1]
    %20: f64 = fadd %19, %18
    store %y_4[%k_1], %20
    %21: i64 = iconst 1
    %m_22: i64 = iadd %m_8, %21
    %23: i64 = iadd %j_7, %21
    jump bb1(%23, %m_22)
}
";

    #[test]
    fn a_later_loop_reads_what_an_earlier_copied_loop_leaves_with() {
        // Copying the first loop makes the `m` it leaves with a parameter of its exit;
        // the second loop's element, load, store and tests read that parameter.
        let text = promoted(COUNT_THEN_ADD).expect("promoted");
        assert_eq!(text.matches("load.trusted %y_").count(), 2, "{text}");
        assert_eq!(text.matches("store.trusted %y_").count(), 2, "{text}");
        // Both loops as written keep their own load and store.
        assert_eq!(text.matches("load %y_").count(), 2, "{text}");
    }

    #[test]
    fn an_element_read_elsewhere_in_its_array_stays_in_memory() {
        // `y[j]` may be `y[i]`.
        let text = MATVEC.replace("load %x_1[%j_10]", "load %y_5[%j_10]");
        assert!(promoted(&text).is_none(), "{text}");
        // So may `y[k]` for a `k` fixed for the loop.
        let text = MATVEC.replace("load %x_1[%j_10]", "load %y_5[%n_2]");
        assert!(promoted(&text).is_none(), "{text}");
    }

    #[test]
    fn a_loop_that_calls_or_runs_a_kernel_is_left_alone() {
        let text = MATVEC.replace("    %16: f64 = fmul %14, %15\n", "    %16: f64 = array.sum %x_1\n");
        assert!(promoted(&text).is_none(), "{text}");
    }

    #[test]
    fn an_element_at_indices_the_loop_computes_stays_in_memory() {
        let text = MATVEC
            .replace("load %y_5[%i_7]", "load %y_5[%j_10]")
            .replace("store %y_5[%i_7]", "store %y_5[%j_10]");
        assert!(promoted(&text).is_none(), "{text}");
    }

    #[test]
    fn an_outer_counter_carried_through_the_inner_loop_indexes_a_fixed_element() {
        // The inner header carries `i` as reverse passes do: passed on unchanged.
        let text = MATVEC
            .replace(
                "    jump bb4(%9)\nbb4(%j_10: i64):",
                "    jump bb4(%i_7, %9)\nbb4(%i_30: i64, %j_10: i64):",
            )
            .replace("    jump bb4(%20)", "    jump bb4(%i_30, %20)")
            .replace("%y_5[%i_7]", "%y_5[%i_30]")
            .replace("%a_0[%i_7, %j_10]", "%a_0[%i_30, %j_10]");
        let text = promoted(&text).expect("promoted");
        assert_eq!(text.matches("load.trusted %y_5[%i_7]").count(), 1, "{text}");
    }
}
