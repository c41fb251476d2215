//! Which innermost counted loops native code runs several iterations at a time.
//!
//! Cranelift neither unrolls nor vectorises, so a short loop body pays its test, its
//! branch back and the time-limit test on every iteration; the reverse pass of
//! `s += x[i]` (`dx[i] += s̄`) spends more on them than on its work. A loop of one
//! header and one body block whose counter steps by one is lowered with a second
//! header in front: when the counter shows that the next `factor` tests of the loop
//! would all pass, `factor` copies of the body run back to back and the test comes
//! again; otherwise the loop runs as written to its end, a loop of its own whose body
//! jumps back to its own header (fewer than `factor` iterations are left, and they do
//! not test for copies again). The copies are the same
//! instructions with the same checks in the same order as the iterations they stand
//! for, so the facts that made an index or a step safe (`bounds`) hold in every copy.
//! A load or store whose indices are proven, fixed for the loop, or moving with the
//! counter (`Unroll::moving_values`: `b[l, j]` in `for l in 0..size(a, 1)`, and
//! `l[c, base + r]`), into an array the loop does not make, keeps its checks in the loop as
//! written; the copies run only when the indices the next `factor` iterations reach
//! are within their extents, tested once in front of them, and skip the checks
//! (`lower.rs`, `guarded_accesses`). In the copies after the first, a load or store
//! whose index in a dimension other than the last follows the counter (`b[l, j]`,
//! every index in bounds, the other indices fixed) takes the previous copy's address
//! moved by that dimension's stride, rather than multiplying the index by the extents
//! again (`lower.rs`, `stepped_access`). When the body is elementwise work (`pairs`),
//! the copies run two at a time in 128-bit vectors. Each copy is compiled code, so
//! only small bodies are copied: four times up to 8 instructions (16 in vector
//! pairs), twice up to 24 (80 in a vector pair).

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, CmpOp, FBinOp, FUnOp, Function, Op, Terminator, Value};

/// How a loop's header decides to run its body once more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    /// `counter < bound` enters the body, and the body adds one to the counter.
    Below { bound: Value },
    /// `counter <= floor` leaves the loop, and the body subtracts one from the counter
    /// (the reverse passes' loops counting down); the floor is the same on every
    /// iteration.
    Above { floor: Value },
}

/// A loop to lower with unrolled copies of its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unroll {
    /// The loop's header.
    pub header: Block,
    /// The loop's only body block (its header's only latch).
    pub body: Block,
    /// The header parameter that counts iterations.
    pub counter: Value,
    pub test: Test,
    /// How many copies of the body run per pass of the unrolled loop (a power of two).
    pub factor: i64,
    /// Whether the body is too long to copy unless its copies run in vector pairs.
    pub pairs_only: bool,
}

impl Unroll {
    /// Whether the loop computes `v`: a parameter or instruction of its header or body.
    pub fn defines(&self, f: &Function, v: Value) -> bool {
        match f.values[v].def {
            mcir_ir::ValueDef::Param(b, _) => b == self.header || b == self.body,
            mcir_ir::ValueDef::Inst(i) => {
                f.blocks[self.header].insts.contains(&i) || f.blocks[self.body].insts.contains(&i)
            }
        }
    }

    /// Whether `v` is the same on every iteration: a constant, a value computed outside
    /// the loop, or a header parameter the body passes back unchanged.
    pub fn fixed(&self, f: &Function, v: Value) -> bool {
        if f.const_int(v).is_some() {
            return true;
        }
        let passed_back = match (&f.blocks[self.body].term, f.values[v].def) {
            (Terminator::Jump(back), mcir_ir::ValueDef::Param(b, k)) => {
                b == self.header && back.args.get(k as usize) == Some(&v)
            }
            _ => false,
        };
        !self.defines(f, v) || passed_back
    }

    /// Whether `v` is the counter, or the counter plus or minus a constant: it moves with
    /// the counter from one iteration to the next.
    pub fn follows_counter(&self, f: &Function, v: Value) -> bool {
        let constant = |x: Value| f.const_int(x).is_some();
        if v == self.counter {
            return true;
        }
        let mcir_ir::ValueDef::Inst(i) = f.values[v].def else { return false };
        let d = &f.insts[i];
        match d.op {
            Op::IBinary(mcir_ir::IBinOp::Add) => {
                d.args[0] == self.counter && constant(d.args[1])
                    || d.args[1] == self.counter && constant(d.args[0])
            }
            Op::IBinary(mcir_ir::IBinOp::Sub) => d.args[0] == self.counter && constant(d.args[1]),
            _ => false,
        }
    }

    /// The values of the body that move with the counter, the counter first: it, and
    /// sums and differences of them with constants or values fixed for the loop
    /// (`base + r`), when range analysis shows they cannot overflow. From one iteration
    /// to the next each moves as the counter does.
    pub fn moving_values(&self, f: &Function, proofs: &mcir_ir::bounds::Proofs) -> Vec<Value> {
        let constant = |x: Value| f.const_int(x).is_some();
        let offset = |x: Value| constant(x) || self.fixed(f, x);
        let mut moving = vec![self.counter];
        for &i in &f.blocks[self.body].insts {
            let d = &f.insts[i];
            let (Op::IBinary(op @ (mcir_ir::IBinOp::Add | mcir_ir::IBinOp::Sub)), [a, b]) =
                (&d.op, d.args.as_slice())
            else {
                continue;
            };
            let moves = (moving.contains(a) && offset(*b))
                || (*op == mcir_ir::IBinOp::Add && moving.contains(b) && offset(*a));
            if moves && proofs.no_overflow.contains(&i) {
                moving.extend(d.result);
            }
        }
        moving
    }
}

/// The most instructions (other than constants) of a body run four at a time, and
/// twice.
const FOUR_UP_TO: usize = 8;
const TWO_UP_TO: usize = 24;
/// The most instructions of a body that runs in vector pairs, four iterations a pass.
pub(crate) const PAIRS_FOUR_UP_TO: usize = 40;
/// The most instructions of a body that runs in vector pairs, two iterations a pass: a
/// pair's code is about one scalar copy's, so a body too long to copy as it is can
/// still run two iterations at once.
const PAIRS_TWO_UP_TO: usize = 80;

/// The unrolling of the loop whose header is `h`, if it is one this module handles: the
/// header computes nothing but constants, its test and integer arithmetic on values
/// fixed for the loop, the body is one block entered
/// only from the header and jumping back to it, and the counter steps by one towards
/// the end the test looks for.
pub(crate) fn plan(f: &Function, h: Block, cfg: &ControlFlow) -> Option<Unroll> {
    let latches: Vec<Block> = cfg.latches(h).collect();
    let [body] = latches.as_slice() else { return None };
    let body = *body;
    if body == h || !f.blocks[body].params.is_empty() {
        return None;
    }
    if cfg.preds.get(body.index()).is_none_or(|p| p.iter().any(|&b| b != h)) {
        return None;
    }
    let Terminator::Jump(back) = &f.blocks[body].term else { return None };
    if back.block != h {
        return None;
    }
    let Terminator::Branch { cond, then_dest, else_dest } = &f.blocks[h].term else { return None };
    // The header computes constants, its test, and integer arithmetic on values fixed
    // for the loop (a reverse pass's floor `j + 1`), which each copy repeats.
    let header_is_simple = f.blocks[h].insts.iter().all(|&i| {
        let d = &f.insts[i];
        match d.op {
            Op::IConst(_) | Op::FConst(_) | Op::BConst(_) | Op::ICmp(_) => true,
            Op::IBinary(mcir_ir::IBinOp::Add | mcir_ir::IBinOp::Sub | mcir_ir::IBinOp::Mul) => {
                d.args.iter().all(|&a| match f.values[a].def {
                    // A header parameter the body passes back unchanged is fixed too.
                    mcir_ir::ValueDef::Param(pb, k) if pb == h => back.args.get(k as usize) == Some(&a),
                    mcir_ir::ValueDef::Param(pb, _) => pb != body,
                    mcir_ir::ValueDef::Inst(ai) => {
                        !f.blocks[body].insts.contains(&ai)
                            && (!f.blocks[h].insts.contains(&ai) || matches!(f.insts[ai].op, Op::IConst(_)))
                    }
                })
            }
            _ => false,
        }
    });
    if !header_is_simple {
        return None;
    }
    let def = |v: Value| f.defining(v);
    let test = def(*cond)?;
    let [a, b] = test.args.as_slice() else { return None };
    let k = f.blocks[h].params.iter().position(|p| p == a)?;
    let counter = *a;
    let step = def(*back.args.get(k)?)?;
    let constant = |v: Value| f.const_int(v);
    let steps_by = |delta: i64| match step.op {
        Op::IBinary(mcir_ir::IBinOp::Add) => {
            step.args[0] == counter && constant(step.args[1]) == Some(delta)
                || step.args[1] == counter && constant(step.args[0]) == Some(delta)
        }
        Op::IBinary(mcir_ir::IBinOp::Sub) => {
            step.args[0] == counter && constant(step.args[1]) == Some(-delta)
        }
        _ => false,
    };
    // A bound or floor must be the same on every iteration: a constant, a value from
    // outside the loop, or one the header computes from those (`j + 1`).
    let outside = |v: Value| match f.values[v].def {
        mcir_ir::ValueDef::Param(pb, _) => pb != h && pb != body,
        mcir_ir::ValueDef::Inst(i) => !f.blocks[body].insts.contains(&i),
    };
    let test = match test.op {
        Op::ICmp(CmpOp::Lt) if then_dest.block == body && else_dest.block != body && steps_by(1) => {
            if !outside(*b) {
                return None;
            }
            Test::Below { bound: *b }
        }
        Op::ICmp(CmpOp::Le) if else_dest.block == body && then_dest.block != body && steps_by(-1) => {
            if !outside(*b) {
                return None;
            }
            Test::Above { floor: *b }
        }
        _ => return None,
    };
    if !then_dest.args.is_empty() && then_dest.block == body
        || !else_dest.args.is_empty() && else_dest.block == body
    {
        return None;
    }
    let work = f.blocks[body]
        .insts
        .iter()
        .filter(|&&i| !matches!(f.insts[i].op, Op::IConst(_) | Op::FConst(_) | Op::BConst(_)))
        .count();
    let (factor, pairs_only) = match work {
        0..=FOUR_UP_TO => (4, false),
        _ if work <= TWO_UP_TO => (2, false),
        _ if work <= PAIRS_TWO_UP_TO => (2, true),
        _ => return None,
    };
    Some(Unroll { header: h, body, counter, test, factor, pairs_only })
}

/// How the copies of an unrolled body can run two at a time in 128-bit registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pairs {
    /// Arrays one of which is written at one index and the other accessed at another
    /// (`y[r]` and `l[c, base + r]`): the pairs run only when they are different arrays,
    /// which is tested before each run of copies.
    pub distinct: Vec<(Value, Value)>,
    /// The header parameters (by position) the body carries round as sums, `s + x`,
    /// that run as two partial sums in the lanes of a vector, added together when the
    /// copies end. Only in a function whose sums may be reassociated.
    pub sums: Vec<usize>,
    /// Whether a load reads an element the body loaded or stored before, at the same
    /// indices, across a store into another array that might have been the same one
    /// (`pos[i, 0]` again after `vel[i, 0] = ...`). Then every array the body stores
    /// into must differ from every other array it accesses (`distinct` says so), and
    /// the pairs take such a load's vector from the earlier access instead of memory.
    pub forward: bool,
    /// The loads and stores that go in and out with a partner, as two columns of a row
    /// (`row_pairs`).
    pub rows: std::collections::HashMap<mcir_ir::Inst, (mcir_ir::Inst, bool)>,
}

/// Whether the copies of `u`'s body can run in pairs, each `f64` value of a pair of
/// iterations in the two lanes of one vector: the body carries nothing from one
/// iteration to the next but its counter and, where `reassociate` allows, sums (every
/// other header parameter goes round unchanged); its only memory accesses are loads and
/// stores of `f64` elements proven in bounds, one of whose indices moves with the counter
/// (the counter plus or minus constants and values fixed for the loop, without
/// overflow) while the others do not change in the loop; and it computes only
/// `+ - * /`, negation, absolute values and square roots of `f64`s, whose vector forms
/// give each lane exactly the scalar result. It may also put one record of `f64`s per
/// iteration at the iteration's index (a forward pass's), and pop `f64`s from stacks it
/// does not put into (a reverse pass's). Two iterations then touch two different
/// elements of every array accessed with one moving index in one dimension (`x[i]`, or
/// `p[i, 0]` and `p[i, 1]`, the rows of two iterations differing). An array written
/// with one moving index and accessed with another, or in another dimension, must be
/// another array than the one accessed (`distinct`) where the two have one type; arrays
/// never overlap unless they are the same array, which has one type.
pub(crate) fn pairs(
    f: &Function,
    u: &Unroll,
    proofs: &mcir_ir::bounds::Proofs,
    types: &mcir_ir::TypeTable,
    reassociate: bool,
) -> Option<Pairs> {
    if u.factor % 2 != 0 {
        return None;
    }
    let Terminator::Jump(back) = &f.blocks[u.body].term else { return None };
    let params = &f.blocks[u.header].params;
    let uses_in_loop = |v: Value| {
        let in_insts = [u.header, u.body]
            .iter()
            .flat_map(|&b| f.blocks[b].insts.iter())
            .filter(|&&i| f.insts[i].args.contains(&v))
            .count();
        in_insts + back.args.iter().filter(|&&a| a == v).count()
    };
    let mut sums = Vec::new();
    for (k, &p) in params.iter().enumerate() {
        let arg = *back.args.get(k)?;
        if p == u.counter || arg == p {
            continue;
        }
        // A sum: the back edge passes `p + x` (or `x + p`), which nothing else in the
        // loop reads, and `p` is read by that addition only.
        let add = f.defining(arg)?;
        let is_sum = reassociate
            && f.value_type(p) == mcir_ir::TypeTable::F64
            && add.op == Op::FBinary(FBinOp::Add)
            && add.args.iter().filter(|&&a| a == p).count() == 1
            && f.blocks[u.body].insts.iter().any(|&i| f.insts[i].result == Some(arg))
            && uses_in_loop(p) == 1
            && uses_in_loop(arg) == 1;
        if !is_sum {
            return None;
        }
        sums.push(k);
    }
    let invariant = |v: Value| u.fixed(f, v);
    let is_f64_array =
        |v: Value| types.as_array(f.value_type(v)).is_some_and(|(e, _)| e == mcir_ir::Scalar::F64);
    // The header's test is read by its branch only.
    let Terminator::Branch { cond, .. } = &f.blocks[u.header].term else { return None };
    // Values that move with the counter; every integer sum or difference must be one.
    let moving = u.moving_values(f, proofs);
    // (array, (moving dimension, its index), store) of each access.
    let mut accesses: Vec<(Value, (usize, Value), bool)> = Vec::new();
    // Each access's array and indices, in order, and whether it is a store.
    let mut elements: Vec<(Value, &[Value], bool)> = Vec::new();
    // The stacks put into (`true`) and popped from.
    let mut stacks: Vec<(Value, bool)> = Vec::new();
    for &i in &f.blocks[u.body].insts {
        let d = &f.insts[i];
        if d.args.contains(cond) {
            return None;
        }
        match &d.op {
            Op::IConst(_) | Op::FConst(_) => {}
            Op::IBinary(mcir_ir::IBinOp::Add | mcir_ir::IBinOp::Sub) => {
                if !d.result.is_some_and(|r| moving.contains(&r)) {
                    return None;
                }
            }
            // A forward pass's record of `f64`s, put at the index of its iteration in
            // room reserved for the loop: two iterations' records do not overlap.
            Op::StackPut => {
                let [stack, offset, index, values @ ..] = d.args.as_slice() else { return None };
                let is_f64 = |v: &Value| f.value_type(*v) == mcir_ir::TypeTable::F64;
                if !invariant(*stack)
                    || !invariant(*offset)
                    || !moving.contains(index)
                    || values.is_empty()
                    || !values.iter().all(is_f64)
                {
                    return None;
                }
                stacks.push((*stack, true));
            }
            // A reverse pass's record, popped: the later iteration's values first.
            Op::StackPop => {
                if !invariant(d.args[0])
                    || d.result.is_none_or(|r| f.value_type(r) != mcir_ir::TypeTable::F64)
                {
                    return None;
                }
                stacks.push((d.args[0], false));
            }
            Op::Load | Op::TrustedLoad | Op::Store | Op::TrustedStore => {
                let is_load = matches!(d.op, Op::Load | Op::TrustedLoad);
                let n_idx = if is_load { d.args.len() - 1 } else { d.args.len() - 2 };
                if n_idx == 0 || !is_f64_array(d.args[0]) || !invariant(d.args[0]) {
                    return None;
                }
                let proven = matches!(d.op, Op::TrustedLoad | Op::TrustedStore)
                    || proofs.in_bounds.get(&i).is_some_and(|p| p.len() == n_idx && p.iter().all(|&b| b));
                if !proven {
                    return None;
                }
                let idx = &d.args[1..1 + n_idx];
                let dim = idx.iter().position(|v| moving.contains(v))?;
                if !idx.iter().enumerate().all(|(k, &v)| k == dim || invariant(v)) {
                    return None;
                }
                accesses.push((d.args[0], (dim, idx[dim]), !is_load));
                elements.push((d.args[0], idx, !is_load));
            }
            Op::FBinary(FBinOp::Add | FBinOp::Sub | FBinOp::Mul | FBinOp::Div)
            | Op::FUnary(FUnOp::Neg | FUnOp::Abs | FUnOp::Sqrt) => {}
            _ => return None,
        }
    }
    // Integer values other than the index and the step are not allowed in f64 code.
    for &i in &f.blocks[u.body].insts {
        let d = &f.insts[i];
        if matches!(d.op, Op::FBinary(_) | Op::FUnary(_))
            && d.args.iter().any(|&a| f.value_type(a) != mcir_ir::TypeTable::F64)
        {
            return None;
        }
    }
    if accesses.is_empty() {
        return None;
    }
    // Elements a stride apart, and records of several values, go in and out of a vector
    // lane by lane, three instructions where one iteration needs one: worth it only
    // where the pair halves the cost of a division or square root, whose throughput
    // bounds such a body.
    let strided = elements.iter().any(|&(_, idx, _)| {
        idx.iter().position(|v| moving.contains(v)).is_some_and(|dim| dim + 1 < idx.len())
    }) || f.blocks[u.body].insts.iter().any(|&i| {
        let d = &f.insts[i];
        d.op == Op::StackPut && d.args.len() > 4
            || d.op == Op::StackPop
                && f.blocks[u.body]
                    .insts
                    .iter()
                    .filter(|&&j| f.insts[j].op == Op::StackPop && f.insts[j].args[0] == d.args[0])
                    .count()
                    > 1
    });
    let halves_slow_work = f.blocks[u.body]
        .insts
        .iter()
        .any(|&i| matches!(f.insts[i].op, Op::FBinary(FBinOp::Div) | Op::FUnary(FUnOp::Sqrt)));
    if strided && !halves_slow_work {
        return None;
    }
    // One put per body, into a stack it does not pop.
    let puts: Vec<Value> = stacks.iter().filter(|s| s.1).map(|s| s.0).collect();
    if puts.len() > 1 || puts.iter().any(|&p| stacks.contains(&(p, false))) {
        return None;
    }
    let mut distinct: Vec<(Value, Value)> = Vec::new();
    for &(a, i, store) in &accesses {
        if !store {
            continue;
        }
        for &(b, j, _) in &accesses {
            // Arrays of different types are never one array.
            if j == i || f.value_type(a) != f.value_type(b) {
                continue;
            }
            if a == b {
                return None;
            }
            if !distinct.contains(&(a, b)) && !distinct.contains(&(b, a)) {
                distinct.push((a, b));
            }
        }
    }
    let forward = elements.iter().enumerate().any(|(k, &(a, idx, store))| {
        !store
            && elements[..k]
                .iter()
                .rposition(|&(b, jdx, _)| b == a && jdx == idx)
                .is_some_and(|from| elements[from + 1..k].iter().any(|&(b, _, stored)| stored && b != a))
    });
    if forward {
        for &(a, _, store) in &accesses {
            if !store {
                continue;
            }
            for &(b, _, _) in &accesses {
                if b != a
                    && f.value_type(a) == f.value_type(b)
                    && !distinct.contains(&(a, b))
                    && !distinct.contains(&(b, a))
                {
                    distinct.push((a, b));
                }
            }
        }
    }
    let rows = row_pairs(f, u, forward);
    Some(Pairs { distinct, sums, forward, rows })
}

/// Loads and stores of a body run in vector pairs (`crate::unroll::pairs`) that read or
/// write two neighbouring columns of one row moving with the counter (`p[i, 0]` and
/// `p[i, 1]`, as the second-to-last index): each, with its partner and whether it is
/// the lower column. Two such loads are read together at the first, as two rows of two
/// columns, when no store between them may write the second; two stores are written
/// together at the second, when nothing between them may read or write the first.
pub(crate) fn row_pairs(
    f: &Function,
    u: &Unroll,
    forward: bool,
) -> std::collections::HashMap<mcir_ir::Inst, (mcir_ir::Inst, bool)> {
    let insts = &f.blocks[u.body].insts;
    // (position, inst, load?, array, leading indices, column) of each candidate.
    let mut candidates = Vec::new();
    for (pos, &i) in insts.iter().enumerate() {
        let d = &f.insts[i];
        let is_load = match d.op {
            Op::Load | Op::TrustedLoad => true,
            Op::Store | Op::TrustedStore => false,
            _ => continue,
        };
        let n_idx = if is_load { d.args.len() - 1 } else { d.args.len() - 2 };
        if n_idx < 2 {
            continue;
        }
        let idx = &d.args[1..1 + n_idx];
        let Some(column) = f.const_int(idx[n_idx - 1]) else { continue };
        if u.fixed(f, idx[n_idx - 2]) || !idx[..n_idx - 2].iter().all(|&v| u.fixed(f, v)) {
            continue;
        }
        candidates.push((pos, i, is_load, d.args[0], &idx[..n_idx - 1], column));
    }
    let mut out = std::collections::HashMap::new();
    for (k, &(p1, i1, load1, a1, lead1, c1)) in candidates.iter().enumerate() {
        if out.contains_key(&i1) {
            continue;
        }
        let partner = candidates[k + 1..].iter().find(|&&(_, i2, load2, a2, lead2, c2)| {
            !out.contains_key(&i2) && load2 == load1 && a2 == a1 && lead2 == lead1 && c1.abs_diff(c2) == 1
        });
        let Some(&(p2, i2, _, _, _, c2)) = partner else { continue };
        // What lies between must leave alone the element read early (the second load's)
        // or written late (the first store's).
        let moved = if load1 { i2 } else { i1 };
        let clear = insts[p1 + 1..p2].iter().all(|&j| {
            let op = &f.insts[j].op;
            let touches = if load1 {
                matches!(op, Op::Store | Op::TrustedStore)
            } else {
                matches!(op, Op::Load | Op::TrustedLoad | Op::Store | Op::TrustedStore)
            };
            !touches || !may_alias(f, j, moved, forward)
        });
        if clear {
            out.insert(i1, (i2, c1 < c2));
            out.insert(i2, (i1, c2 < c1));
        }
    }
    out
}

/// Whether loads or stores `a` and `b` of a body run in vector pairs may touch one
/// element: not when they index one array with different constants somewhere, nor when
/// they access arrays of different types, nor, where every array stored into is tested
/// distinct from every other (`forward`), when they access two arrays.
pub(crate) fn may_alias(f: &Function, a: mcir_ir::Inst, b: mcir_ir::Inst, forward: bool) -> bool {
    let (da, db) = (&f.insts[a], &f.insts[b]);
    let indices = |d: &mcir_ir::InstData| -> Vec<Value> {
        let n = if matches!(d.op, Op::Load | Op::TrustedLoad) { d.args.len() - 1 } else { d.args.len() - 2 };
        d.args[1..1 + n].to_vec()
    };
    if da.args[0] == db.args[0] {
        return !mcir_ir::memory::distinct_indices(f, &indices(da), &indices(db));
    }
    f.value_type(da.args[0]) == f.value_type(db.args[0]) && !forward
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(text: &str) -> Option<Unroll> {
        let m = mcir_ir::parse_module(text).expect("parses");
        let f = m.funcs.values().next().expect("a function");
        let cfg = ControlFlow::compute(f);
        cfg.rpo.iter().find_map(|&b| plan(f, b, &cfg))
    }

    #[test]
    fn counting_up_to_an_extent() {
        let p = plan_of(
            "fn @f(%x_0: f64[]) -> f64 {
bb0:
    %1: i64 = array.dim 0 %x_0
    %2: i64 = iconst 0
    %3: f64 = fconst 0.0
    jump bb1(%2, %3)
bb1(%i_4: i64, %a_5: f64):
    %6: bool = icmp lt %i_4, %1
    br %6, bb2, bb3
bb2:
    %7: f64 = load %x_0[%i_4]
    %8: f64 = fadd %a_5, %7
    %9: i64 = iconst 1
    %10: i64 = iadd %i_4, %9
    jump bb1(%10, %8)
bb3:
    ret %a_5
}",
        )
        .expect("unrolled");
        assert_eq!(p.factor, 4);
        assert!(matches!(p.test, Test::Below { .. }));
    }

    #[test]
    fn counting_down_to_zero() {
        let p = plan_of(
            "fn @f(%x_0: f64[], %n_1: i64) {
bb0:
    jump bb1(%n_1)
bb1(%i_2: i64):
    %3: i64 = iconst 0
    %4: bool = icmp le %i_2, %3
    br %4, bb3, bb2
bb2:
    %5: i64 = iconst 1
    %6: i64 = isub %i_2, %5
    %7: f64 = load %x_0[%6]
    store %x_0[%6], %7
    jump bb1(%6)
bb3:
    ret
}",
        )
        .expect("unrolled");
        assert!(matches!(p.test, Test::Above { .. }));
    }

    fn pairs_of(text: &str) -> Option<Pairs> {
        pairs_of_with(text, false)
    }

    #[test]
    fn elementwise_bodies_run_in_pairs_carried_values_do_not() {
        // dx[i - 1] += g, counting down, as a reverse pass writes it.
        assert!(pairs_of(
            "fn @f(%dx_0: f64[], %g_1: f64) {
bb0:
    %2: i64 = array.dim 0 %dx_0
    jump bb1(%g_1, %2)
bb1(%g_3: f64, %i_4: i64):
    %5: i64 = iconst 0
    %6: bool = icmp le %i_4, %5
    br %6, bb3, bb2
bb2:
    %7: i64 = iconst 1
    %8: i64 = isub %i_4, %7
    %9: f64 = load.trusted %dx_0[%8]
    %10: f64 = fadd %9, %g_3
    store.trusted %dx_0[%8], %10
    jump bb1(%g_3, %8)
bb3:
    ret
}"
        )
        .is_some());
        // y[i] = y[i - 1] + 1: two indices, so one iteration reads what the other writes.
        assert!(pairs_of(
            "fn @f(%y_0: f64[]) {
bb0:
    %1: i64 = array.dim 0 %y_0
    %2: i64 = iconst 1
    jump bb1(%2)
bb1(%i_3: i64):
    %4: bool = icmp lt %i_3, %1
    br %4, bb2, bb3
bb2:
    %5: i64 = iconst 1
    %6: i64 = isub %i_3, %5
    %7: f64 = load %y_0[%6]
    %8: f64 = fconst 1.0
    %9: f64 = fadd %7, %8
    store %y_0[%i_3], %9
    %10: i64 = iadd %i_3, %5
    jump bb1(%10)
bb3:
    ret
}"
        )
        .is_none());
    }

    fn pairs_of_with(text: &str, reassociate: bool) -> Option<Pairs> {
        let m = mcir_ir::parse_module(text).expect("parses");
        let f = m.funcs.values().next().expect("a function");
        let cfg = ControlFlow::compute(f);
        let proofs = f.proofs();
        cfg.rpo
            .iter()
            .find_map(|&b| plan(f, b, &cfg).and_then(|u| pairs(f, &u, &proofs, &m.types, reassociate)))
    }

    #[test]
    fn a_column_update_at_an_offset_runs_in_pairs_of_distinct_arrays() {
        // for r in 0..len(y) { y[r] += l[b + r] * t } (b = len(l), a value the loop does
        // not change): y is written at r and l read at b + r, so the pairs run when y
        // and l are different arrays.
        let text = "fn @f(%y_0: f64[], %l_1: f64[], %t_3: f64) {
bb0:
    %4: i64 = array.dim 0 %y_0
    %5: i64 = iconst 0
    %6: i64 = iconst 1
    %10: i64 = array.dim 0 %l_1
    jump bb1(%5)
bb1(%r_11: i64):
    %12: bool = icmp lt %r_11, %4
    br %12, bb2, bb3
bb2:
    %13: i64 = iadd %10, %r_11
    %14: f64 = load %l_1[%13]
    %15: f64 = fmul %14, %t_3
    %16: f64 = load %y_0[%r_11]
    %17: f64 = fadd %16, %15
    store %y_0[%r_11], %17
    %18: i64 = iconst 1
    %19: i64 = iadd %r_11, %18
    jump bb1(%19)
bb3:
    ret
}";
        let m = mcir_ir::parse_module(text).expect("parses");
        let f = m.funcs.values().next().expect("a function");
        let cfg = ControlFlow::compute(f);
        let u = cfg.rpo.iter().find_map(|&b| plan(f, b, &cfg)).expect("unrolled");
        // With the access to l at an offset proven in bounds (as the copies' test does),
        // the body runs in pairs once y and l are known to differ.
        let mut proofs = f.proofs();
        for &i in &f.blocks[u.body].insts {
            if matches!(f.insts[i].op, Op::Load | Op::Store) {
                proofs.in_bounds.insert(i, vec![true]);
            }
        }
        let p = pairs(f, &u, &proofs, &m.types, false).expect("pairs");
        assert_eq!(p.distinct.len(), 1);
        assert!(p.sums.is_empty());
    }

    #[test]
    fn rows_run_in_pairs_and_reloads_across_another_array_are_forwarded() {
        // for i in 0..size(p, 0) { v[i, 0] += p[i, 0] / t; p[i, 0] += v[i, 0] * t }: the
        // rows move with the counter, the columns are constants; p[i, 0] is read again
        // after the store into v, which might be p. The division makes the lane-by-lane
        // loads and stores of rows worth it.
        let text = "fn @f(%p_0: f64[,], %v_1: f64[,], %t_2: f64) {
bb0:
    %3: i64 = array.dim 0 %p_0
    %4: i64 = iconst 0
    jump bb1(%4)
bb1(%i_5: i64):
    %6: bool = icmp lt %i_5, %3
    br %6, bb2, bb3
bb2:
    %7: i64 = iconst 0
    %8: f64 = load.trusted %p_0[%i_5, %7]
    %9: f64 = fdiv %8, %t_2
    %10: f64 = load.trusted %v_1[%i_5, %7]
    %11: f64 = fadd %10, %9
    store.trusted %v_1[%i_5, %7], %11
    %12: f64 = load.trusted %p_0[%i_5, %7]
    %13: f64 = fmul %11, %t_2
    %14: f64 = fadd %12, %13
    store.trusted %p_0[%i_5, %7], %14
    %15: i64 = iconst 1
    %16: i64 = iadd %i_5, %15
    jump bb1(%16)
bb3:
    ret
}";
        let p = pairs_of(text).expect("pairs");
        assert!(p.forward);
        assert_eq!(p.distinct.len(), 1);
        // Without the reload nothing needs the arrays to differ: the rows of two
        // iterations are different elements even where p and v are one array.
        let p = pairs_of(&text.replace("%12: f64 = load.trusted %p_0[%i_5, %7]", "%12: f64 = fadd %8, %t_2"))
            .expect("pairs");
        assert!(!p.forward);
        assert!(p.distinct.is_empty());
        // A row and a column of one array written: two iterations may touch one element.
        assert_eq!(
            pairs_of(&text.replace("store.trusted %p_0[%i_5, %7]", "store.trusted %p_0[%7, %i_5]")),
            None
        );
        // Without the division, rows one at a time cost less than rows in lanes.
        assert_eq!(pairs_of(&text.replace("fdiv %8", "fmul %8")), None);
    }

    #[test]
    fn two_columns_of_a_row_go_in_and_out_together() {
        // for i in 0..size(p, 0) { q[i, 0] = p[i, 0] / t; q[i, 1] = q[i, 1] + p[i, 1] }:
        // p's two loads are read together at the first; q's two stores are written
        // together at the second, the load of q[i, 1] between them reading another
        // element.
        let text = "fn @f(%p_0: f64[,], %q_1: f64[,], %t_2: f64) {
bb0:
    %3: i64 = array.dim 0 %p_0
    %4: i64 = iconst 0
    jump bb1(%4)
bb1(%i_5: i64):
    %6: bool = icmp lt %i_5, %3
    br %6, bb2, bb3
bb2:
    %7: i64 = iconst 0
    %8: i64 = iconst 1
    %9: f64 = load.trusted %p_0[%i_5, %7]
    %10: f64 = load.trusted %p_0[%i_5, %8]
    %11: f64 = fdiv %9, %t_2
    store.trusted %q_1[%i_5, %7], %11
    %12: f64 = load.trusted %q_1[%i_5, %8]
    %13: f64 = fadd %12, %10
    store.trusted %q_1[%i_5, %8], %13
    %14: i64 = iadd %i_5, %8
    jump bb1(%14)
bb3:
    ret
}";
        let groups_of = |text: &str| {
            let m = mcir_ir::parse_module(text).expect("parses");
            let f = m.funcs.values().next().expect("a function").clone();
            let cfg = ControlFlow::compute(&f);
            let u = cfg.rpo.iter().find_map(|&b| plan(&f, b, &cfg)).expect("unrolled");
            let p = pairs(&f, &u, &f.proofs(), &m.types, false).expect("pairs");
            let mut g: Vec<(usize, usize, bool)> = row_pairs(&f, &u, p.forward)
                .iter()
                .map(|(a, (b, lower))| (a.index(), b.index(), *lower))
                .collect();
            g.sort();
            g
        };
        let insts = |text: &str| {
            let m = mcir_ir::parse_module(text).expect("parses");
            let f = m.funcs.values().next().expect("a function").clone();
            let body = f.blocks.keys().nth(2).expect("the body");
            f.blocks[body].insts.clone()
        };
        let i = insts(text);
        // Loads %9, %10 (insts 2, 3) and stores of %11, %13 (insts 5, 8).
        let expect = |a: usize, b: usize| {
            let mut g = vec![(i[a].index(), i[b].index(), true), (i[b].index(), i[a].index(), false)];
            g.sort();
            g
        };
        let mut both = expect(2, 3);
        both.extend(expect(5, 8));
        both.sort();
        assert_eq!(groups_of(text), both);
        // Reading q[i, 0] between the stores keeps them apart: it must see the first.
        let reads_first =
            text.replace("%12: f64 = load.trusted %q_1[%i_5, %8]", "%12: f64 = load.trusted %q_1[%i_5, %7]");
        assert_eq!(groups_of(&reads_first), expect(2, 3));
        // A store into q (which may be p) between the loads keeps them apart too.
        let store_between = text.replace(
            "%10: f64 = load.trusted %p_0[%i_5, %8]",
            "store.trusted %q_1[%i_5, %7], %t_2\n    %10: f64 = load.trusted %p_0[%i_5, %8]",
        );
        let i = insts(&store_between);
        let g = groups_of(&store_between);
        assert!(!g.iter().any(|&(a, _, _)| a == i[2].index()), "{g:?}");
    }

    #[test]
    fn sums_run_in_pairs_only_where_they_may_be_reassociated() {
        // s += dy[i - 1] * x[i - 1], counting down to a floor that is not a constant.
        let text = "fn @f(%dy_0: f64[], %x_1: f64[], %lo_2: i64) -> f64 {
bb0:
    %3: i64 = array.dim 0 %dy_0
    %4: f64 = fconst 0.0
    jump bb1(%4, %3)
bb1(%s_5: f64, %i_6: i64):
    %7: bool = icmp le %i_6, %lo_2
    br %7, bb3, bb2
bb2:
    %8: i64 = iconst 1
    %9: i64 = isub %i_6, %8
    %10: f64 = load.trusted %dy_0[%9]
    %11: f64 = load.trusted %x_1[%9]
    %12: f64 = fmul %10, %11
    %13: f64 = fadd %s_5, %12
    jump bb1(%13, %9)
bb3:
    ret %s_5
}";
        assert_eq!(pairs_of_with(text, false), None);
        let p = pairs_of_with(text, true).expect("pairs");
        assert_eq!(p.sums, vec![0]);
        assert!(p.distinct.is_empty());
    }

    #[test]
    fn not_a_bound_that_moves_or_a_step_of_two() {
        // The bound is a header parameter: it may change from one iteration to the next.
        assert_eq!(
            plan_of(
                "fn @f(%n_0: i64) {
bb0:
    %1: i64 = iconst 0
    jump bb1(%1, %n_0)
bb1(%i_2: i64, %m_3: i64):
    %4: bool = icmp lt %i_2, %m_3
    br %4, bb2, bb3
bb2:
    %5: i64 = iconst 1
    %6: i64 = iadd %i_2, %5
    %7: i64 = isub %m_3, %5
    jump bb1(%6, %7)
bb3:
    ret
}"
            ),
            None
        );
        assert_eq!(
            plan_of(
                "fn @f(%n_0: i64) {
bb0:
    %1: i64 = iconst 0
    jump bb1(%1)
bb1(%i_2: i64):
    %3: bool = icmp lt %i_2, %n_0
    br %3, bb2, bb3
bb2:
    %4: i64 = iconst 2
    %5: i64 = iadd %i_2, %4
    jump bb1(%5)
bb3:
    ret
}"
            ),
            None
        );
    }
}
