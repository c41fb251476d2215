//! Several iterations of a loop around a reduction run side by side ("unroll and jam"),
//! so that native code has independent chains of floating-point operations to overlap.
//!
//! In `for r in 0..d { let mut y = 0.0; for j in 0..r { y += a[r, j] * x[j]; } s += y * y; }`
//! every addition to `y` waits for the one before it, so the inner loop runs at the
//! latency of one addition per element (two to four cycles) while the core could start
//! several per cycle. Reassociating the sum would break it into independent chains but
//! change its bits, which the project does not do. Running the inner loops of rows `r`,
//! `r + 1`, `r + 2` and `r + 3` together keeps each sum in its own order and still gives
//! four chains to overlap, and one load of `x[j]` serves all four.
//!
//! A loop qualifies when its body is a block `P` (the prefix, straight-line), an inner
//! counted loop (a header testing `j < hi` and one body block `B` stepping `j` by one;
//! `hi` the outer counter or fixed for the loop) carrying at least one `f64`, and a block `S` (the suffix) that steps the outer counter
//! by one. The outer counter is tested `r < bound` against a bound fixed for the loop.
//! A copy of the loop is put in front of it that runs `FACTOR` iterations per pass while
//! `r + FACTOR - 1 < bound`:
//!
//! - the prefixes of iterations `r .. r + FACTOR` in order;
//! - one inner loop over the iterations all of them run (`j` from the common start
//!   below the smallest `hi`), with the bodies of all of them;
//! - for each iteration in order, its inner loop's remaining iterations (up to its own
//!   `hi`: `j < r` runs one more in row `r + 1` than in row `r`);
//! - the suffixes in order, each carrying the outer values to the next.
//!
//! When the inner loops are known to be short (fewer than `MIN_RUN` iterations, in code
//! compiled for known shapes), the loop is left as it is: the extra tests cost more
//! than the overlap gains.
//!
//! The original loop then runs what is left (fewer than `FACTOR` iterations). Each
//! iteration computes what it computed before, with its operations in the same order,
//! so the results are the same bit for bit.
//!
//! Moving the prefixes and inner loops of later iterations in front of earlier suffixes
//! is sound only when nothing they do can be seen or can fail differently:
//!
//! - prefix and inner body only compute and load (no stores, calls or allocations);
//! - the inner loop cannot fail (its loads and integer arithmetic are proven safe by
//!   `bounds`), so the first error of the loop is still the first one;
//! - the suffix writes only tape stacks and arrays made in this function that the
//!   prefix and inner body do not read (and they read only arrays that cannot be those:
//!   the function's parameters and other arrays it made);
//! - when the prefix may fail (a load not proven in bounds), the suffix may neither
//!   fail nor store into arrays (only put records on stacks the function made):
//!   whichever prefix fails first fails first in both orders, and what the skipped
//!   suffixes would have done is invisible;
//! - when the suffix may fail, every load of the prefixes and bodies is proven in
//!   bounds for every iteration below the bound (a trusted load may be trusted only for
//!   the iterations the original reaches);
//! - nothing reads the loops' tests.
//!
//! Native code applies this to every function it compiles (`mcir_jit`); the
//! interpreter runs functions as written, which the tests compare it against.

use crate::bounds::Proofs;
use crate::cfg::ControlFlow;
use crate::cse::OpKey;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::{CmpOp, IBinOp, Op};
use crate::types::TypeTable;
use std::collections::{HashMap, HashSet};

/// How many iterations of the outer loop run side by side when the inner body is small.
pub const FACTOR: usize = 4;
/// The largest inner body (in instructions) jammed `FACTOR` times; up to twice this
/// size, two iterations run side by side.
const SMALL_BODY: usize = 12;
/// The most values the jammed inner loop carries (`f64` registers held across it).
const MAX_CHAINS: usize = 4;
/// The fewest iterations the longest inner loop must be known to run, when it is known.
const MIN_RUN: i64 = 24;
/// The largest prefix and suffix copied (instructions each).
const MAX_PREFIX: usize = 24;
const MAX_SUFFIX: usize = 32;

/// A loop to jam: the blocks of the shape described in the module doc.
#[derive(Clone, Debug)]
struct Nest {
    header: Block,
    /// Position of the outer counter among the header's parameters.
    counter_at: usize,
    bound: Value,
    prefix: Block,
    inner: Block,
    /// Position of the inner counter among the inner header's parameters.
    j_at: usize,
    /// The inner loop's start (the same value in every iteration) and its limit.
    start: Value,
    limit: Value,
    body: Block,
    suffix: Block,
    factor: usize,
}

/// `f` with every loop of the shape in the module doc jammed, or `None` when it has
/// none.
pub fn jam_reductions(f: &Function) -> Option<Function> {
    let proofs = f.proofs();
    let nests = nests(f, &proofs);
    if nests.is_empty() {
        return None;
    }
    let mut out = f.clone();
    for n in &nests {
        jam(&mut out, &proofs, n);
    }
    Some(out)
}

/// `f` as native code compiles it: jammed (see [`jam_reductions`]) when that changes
/// it and the result passes the verifier, else as it is.
pub fn as_compiled<'f>(module: &crate::Module, f: &'f Function) -> std::borrow::Cow<'f, Function> {
    match jam_reductions(f).filter(|j| crate::verify::verify_function(module, j).is_ok()) {
        Some(j) => std::borrow::Cow::Owned(j),
        None => std::borrow::Cow::Borrowed(f),
    }
}

/// The headers of the loops [`jam_reductions`] runs side by side, and how many
/// iterations at a time.
pub fn jammed_loops(f: &Function) -> Vec<(Block, usize)> {
    nests(f, &f.proofs()).iter().map(|n| (n.header, n.factor)).collect()
}

fn nests(f: &Function, proofs: &Proofs) -> Vec<Nest> {
    let cfg = ControlFlow::compute(f);
    cfg.rpo.iter().filter_map(|&h| find_nest(f, &cfg, proofs, h)).collect()
}

/// Whether instruction `i` can fail at run time given what `bounds` proved.
fn can_fail(f: &Function, proofs: &Proofs, i: Inst) -> bool {
    let d = &f.insts[i];
    match d.op {
        Op::Load => !proofs.in_bounds.get(&i).is_some_and(|dims| dims.iter().all(|&x| x)),
        Op::IBinary(_) | Op::IUnary(_) => !proofs.no_overflow.contains(&i),
        _ => d.op.has_effect() && !matches!(d.op, Op::TrustedLoad),
    }
}

/// Ops a prefix or inner body may hold: they compute or read, nothing else.
fn computes_or_reads(op: &Op) -> bool {
    op.is_scalar_arith()
        || matches!(
            op,
            Op::Load | Op::TrustedLoad | Op::ArrayDim(_) | Op::IBinary(_) | Op::IUnary(_) | Op::TupleGet(_)
        )
}

/// Whether array value `a` is made by an instruction of `f` (so no parameter, and no
/// other array made there, is the same array).
fn made_here(f: &Function, a: Value) -> bool {
    f.defining(a).is_some_and(|d| d.op.allocates())
}

fn find_nest(f: &Function, cfg: &ControlFlow, proofs: &Proofs, h: Block) -> Option<Nest> {
    let latches: Vec<Block> = cfg.latches(h).collect();
    let [suffix] = latches.as_slice() else { return None };
    let body = cfg.loop_blocks(h);
    if body.len() != 5 {
        return None;
    }
    let hd = &f.blocks[h];
    let Terminator::Branch { cond, then_dest, else_dest } = &hd.term else { return None };
    let prefix = then_dest.block;
    if body.contains(&else_dest.block) || !then_dest.args.is_empty() || hd.insts.len() != 1 {
        return None;
    }
    let test = &f.insts[hd.insts[0]];
    if test.op != Op::ICmp(CmpOp::Lt) || test.result != Some(*cond) {
        return None;
    }
    let (counter, bound) = (test.args[0], test.args[1]);
    let counter_at = hd.params.iter().position(|&p| p == counter)?;
    let mut placed: HashSet<Inst> = HashSet::new();
    for &b in &body {
        for &i in &f.blocks[b].insts {
            placed.insert(i);
        }
    }
    let inside = |v: Value| match f.values[v].def {
        ValueDef::Param(b, _) => body.contains(&b),
        ValueDef::Inst(i) => placed.contains(&i),
    };
    if inside(bound) || prefix == h || cfg.preds[prefix.index()].iter().any(|&p| p != h) {
        return None;
    }
    // The prefix jumps to the inner header, whose test leads to its body or the suffix.
    let Terminator::Jump(into_inner) = &f.blocks[prefix].term else { return None };
    let inner = into_inner.block;
    let id = &f.blocks[inner];
    let Terminator::Branch { cond: icond, then_dest: ib, else_dest: is } = &id.term else { return None };
    let (body_block, suffix_block) = (ib.block, is.block);
    if suffix_block != *suffix || !ib.args.is_empty() || !is.args.is_empty() || id.insts.len() != 1 {
        return None;
    }
    if [prefix, inner, body_block, *suffix].iter().any(|b| !body.contains(b))
        || [prefix, inner, body_block, *suffix, h].iter().collect::<HashSet<_>>().len() != 5
    {
        return None;
    }
    let itest = &f.insts[id.insts[0]];
    if itest.op != Op::ICmp(CmpOp::Lt) || itest.result != Some(*icond) {
        return None;
    }
    let (j, limit) = (itest.args[0], itest.args[1]);
    let j_at = id.params.iter().position(|&p| p == j)?;
    let only_pred = |b: Block, p: Block| cfg.preds[b.index()].iter().all(|&q| q == p);
    let enters_inner = |p: &Block| *p == prefix || *p == body_block;
    if !only_pred(body_block, inner)
        || !only_pred(*suffix, inner)
        || !cfg.preds[inner.index()].iter().all(enters_inner)
    {
        return None;
    }
    // Both counters step by one, at the end of their loop's last block.
    let steps = |latch: Block, target: Block, at: usize, counter: Value| {
        let Terminator::Jump(back) = &f.blocks[latch].term else { return false };
        back.block == target && back.args.get(at).is_some_and(|&a| f.is_increment_of(a, counter))
    };
    if !steps(body_block, inner, j_at, j) || !steps(*suffix, h, counter_at, counter) {
        return None;
    }
    // The inner loop carries an f64 (the reduction this is for).
    let carries_f64 =
        id.params.iter().enumerate().any(|(k, &p)| k != j_at && f.values[p].ty == TypeTable::F64);
    if !carries_f64 {
        return None;
    }
    // Its start is the same in every iteration; its limit is the outer counter or fixed.
    let start = into_inner.args[j_at];
    let start_fixed = !inside(start) || f.const_int(start).is_some();
    let limit_known = !inside(limit) || limit == counter;
    if !start_fixed || !limit_known {
        return None;
    }
    // Short inner loops gain less than the side-by-side passes cost (the minimum of the
    // limits, and each iteration's own remaining run): code compiled for known shapes
    // knows how long they are.
    let longest = match (f.const_int(start), f.const_int(limit), f.const_int(bound)) {
        (Some(s), Some(l), _) => Some(l.saturating_sub(s)),
        (Some(s), None, Some(b)) if limit == counter => Some(b.saturating_sub(1).saturating_sub(s)),
        _ => None,
    };
    if longest.is_some_and(|run| run < MIN_RUN) {
        return None;
    }
    // Prefix and inner body read the outer loop's values only through its counter.
    let outer_params: HashSet<Value> = hd.params.iter().copied().filter(|&p| p != counter).collect();
    let reads_outer = |b: Block| {
        f.blocks[b].insts.iter().any(|&i| f.insts[i].args.iter().any(|a| outer_params.contains(a)))
            || f.blocks[b].term.uses().iter().any(|a| outer_params.contains(a))
    };
    if reads_outer(prefix) || reads_outer(inner) || reads_outer(body_block) {
        return None;
    }
    // The loops' tests are not copied: nothing else may read them.
    let reads_test = |b: Block| {
        let reads = |v: &Value| v == cond || v == icond;
        f.blocks[b].insts.iter().any(|&i| f.insts[i].args.iter().any(reads))
            || (b != h && b != inner && f.blocks[b].term.uses().iter().any(reads))
    };
    if [prefix, body_block, *suffix, h, inner].iter().any(|&b| reads_test(b)) {
        return None;
    }
    let pre = &f.blocks[prefix].insts;
    let inb = &f.blocks[body_block].insts;
    let suf = &f.blocks[*suffix].insts;
    if pre.len() > MAX_PREFIX || suf.len() > MAX_SUFFIX {
        return None;
    }
    if !pre.iter().chain(inb).all(|&i| computes_or_reads(&f.insts[i].op)) {
        return None;
    }
    if inb.iter().any(|&i| can_fail(f, proofs, i)) {
        return None;
    }
    let prefix_fails = pre.iter().any(|&i| can_fail(f, proofs, i));
    // What prefix and body read must not be an array the suffix writes.
    let read: HashSet<Value> = pre
        .iter()
        .chain(inb)
        .filter(|&&i| matches!(f.insts[i].op, Op::Load | Op::TrustedLoad))
        .map(|&i| f.insts[i].args[0])
        .collect();
    let distinct_reads = read.iter().all(|&a| made_here(f, a) || is_function_param(f, a));
    for &i in suf {
        let d = &f.insts[i];
        let ok = match d.op {
            // Tape records: a stack the function made is seen by no one if the call
            // fails. (A put fails only past the room reserved for it, which derived
            // passes reserve for the whole loop: a compiler error, not the program's.)
            Op::StackPut => !prefix_fails || made_stack(f, d.args[0]),
            Op::Store | Op::TrustedStore => {
                !prefix_fails && distinct_reads && made_here(f, d.args[0]) && !read.contains(&d.args[0])
            }
            _ if computes_or_reads(&d.op) => !prefix_fails || !can_fail(f, proofs, i),
            _ => false,
        };
        if !ok {
            return None;
        }
    }
    // When a suffix may fail, the original stops there and never runs the next
    // iterations' prefixes and bodies, which now run before it: their trusted loads must
    // be in bounds for every iteration below the bound (proven), not only for those the
    // original reaches.
    let suffix_fails = suf.iter().any(|&i| can_fail(f, proofs, i));
    let proven = |i: &Inst| proofs.in_bounds.get(i).is_some_and(|dims| dims.iter().all(|&x| x));
    let unproven_trusted = pre.iter().chain(inb).any(|i| f.insts[*i].op == Op::TrustedLoad && !proven(i));
    if suffix_fails && unproven_trusted {
        return None;
    }
    // Enough chains to overlap (`FACTOR` in all), and a body native code can hold in
    // registers.
    let chains =
        id.params.iter().enumerate().filter(|&(k, &p)| k != j_at && f.values[p].ty == TypeTable::F64).count();
    let work = inb.len().saturating_sub(2);
    let factor = if work <= SMALL_BODY && chains * FACTOR <= MAX_CHAINS {
        FACTOR
    } else if work <= 2 * SMALL_BODY && chains * 2 <= MAX_CHAINS {
        2
    } else {
        return None;
    };
    Some(Nest {
        header: h,
        counter_at,
        bound,
        prefix,
        inner,
        j_at,
        start,
        limit,
        body: body_block,
        suffix: *suffix,
        factor,
    })
}

/// Whether stack value `s` is made by an instruction of `f` (`stack.new`).
fn made_stack(f: &Function, s: Value) -> bool {
    f.defining(s).is_some_and(|d| d.op == Op::StackNew)
}

fn is_function_param(f: &Function, v: Value) -> bool {
    matches!(f.values[v].def, ValueDef::Param(b, _) if b == f.entry())
}

/// The copies made so far in one block: an op and its operands, and its result.
type Seen = HashMap<(OpKey, Vec<Value>), Value>;

/// What identifies an instruction whose repeat on the same operands in a copy is the
/// same value: a computation, or a load when the block copied stores nothing (`loads`).
fn dedup_key(op: &Op, loads: bool) -> Option<OpKey> {
    match op {
        Op::Load | Op::TrustedLoad if !loads => None,
        _ if computes_or_reads(op) => OpKey::of(op),
        _ => None,
    }
}

/// Appends copies of `src`'s instructions to `dst`, reading operands through `map` and
/// recording the copies' results in it. Within one copying block, an instruction that
/// repeats an earlier one on the same operands is that one (`seen`; loads only when
/// `loads`, for blocks that store nothing). A load proven in
/// bounds in the original is trusted in the copy: the copy runs with the values of an
/// iteration the original ran.
fn copy_insts(
    f: &mut Function,
    proofs: &Proofs,
    src: Block,
    dst: Block,
    map: &mut HashMap<Value, Value>,
    seen: &mut Seen,
    loads: bool,
) {
    for i in f.blocks[src].insts.clone() {
        let d = f.insts[i].clone();
        let args: Vec<Value> = d.args.iter().map(|a| *map.get(a).unwrap_or(a)).collect();
        let op = match d.op {
            Op::Load if proofs.in_bounds.get(&i).is_some_and(|dims| dims.iter().all(|&x| x)) => {
                Op::TrustedLoad
            }
            Op::Store if proofs.in_bounds.get(&i).is_some_and(|dims| dims.iter().all(|&x| x)) => {
                Op::TrustedStore
            }
            ref op => op.clone(),
        };
        if let (Some(key), Some(old)) = (dedup_key(&op, loads), d.result) {
            if let Some(&v) = seen.get(&(key, args.clone())) {
                map.insert(old, v);
                continue;
            }
        }
        let ty = d.result.map(|r| f.values[r].ty);
        let r = f.push_inst(dst, op.clone(), args.clone(), ty, d.span);
        if let (Some(old), Some(new)) = (d.result, r) {
            f.values[new].name = f.values[old].name.clone();
            map.insert(old, new);
            if let Some(key) = dedup_key(&op, loads) {
                seen.insert((key, args), new);
            }
        }
    }
}

/// New parameters for `dst` of the types and names of `params`.
fn params_like(f: &mut Function, dst: Block, params: &[Value]) -> Vec<Value> {
    params
        .iter()
        .map(|&p| {
            let (ty, name) = (f.values[p].ty, f.values[p].name.clone());
            f.add_block_param(dst, ty, name)
        })
        .collect()
}

fn map_args(map: &HashMap<Value, Value>, args: &[Value]) -> Vec<Value> {
    args.iter().map(|a| *map.get(a).unwrap_or(a)).collect()
}

fn jam(f: &mut Function, proofs: &Proofs, n: &Nest) {
    let factor = n.factor;
    let h_params = f.blocks[n.header].params.clone();
    let i_params = f.blocks[n.inner].params.clone();
    let span = f.blocks[n.header].term_span;
    let i64t = TypeTable::I64;
    let Terminator::Jump(into_inner) = f.blocks[n.prefix].term.clone() else { return };
    let Terminator::Jump(back_inner) = f.blocks[n.body].term.clone() else { return };
    let Terminator::Jump(back_outer) = f.blocks[n.suffix].term.clone() else { return };

    // The jammed header: `r < bound - (factor - 1)`, computed so that it cannot overflow.
    let jh = f.add_block();
    let jh_params = params_like(f, jh, &h_params);
    let r = jh_params[n.counter_at];
    let gap = factor as i64 - 1;
    let last_start = match f.const_int(n.bound) {
        Some(b) => f.push_value(jh, Op::IConst(b.saturating_sub(gap)), vec![], i64t, span),
        None => {
            let floor = f.push_value(jh, Op::IConst(i64::MIN + gap), vec![], i64t, span);
            let at_least = f.push_value(jh, Op::IBinary(IBinOp::Max), vec![n.bound, floor], i64t, span);
            let g = f.push_value(jh, Op::IConst(gap), vec![], i64t, span);
            f.push_value(jh, Op::IBinary(IBinOp::Sub), vec![at_least, g], i64t, span)
        }
    };
    let go = f.push_value(jh, Op::ICmp(CmpOp::Lt), vec![r, last_start], TypeTable::BOOL, span);

    // Prefixes, one per iteration, each with its own counter.
    let jp = f.add_block();
    let mut maps: Vec<HashMap<Value, Value>> = Vec::with_capacity(factor);
    let mut seen = HashMap::new();
    for k in 0..factor {
        let mut map: HashMap<Value, Value> =
            h_params.iter().copied().zip(jh_params.iter().copied()).collect();
        let rk = if k == 0 {
            r
        } else {
            let c = f.push_value(jp, Op::IConst(k as i64), vec![], i64t, span);
            f.push_value(jp, Op::IBinary(IBinOp::Add), vec![r, c], i64t, span)
        };
        map.insert(h_params[n.counter_at], rk);
        copy_insts(f, proofs, n.prefix, jp, &mut map, &mut seen, true);
        maps.push(map);
    }
    let limits: Vec<Value> = maps.iter().map(|m| *m.get(&n.limit).unwrap_or(&n.limit)).collect();
    let mut common = limits[0];
    for &l in &limits[1..] {
        if l != common {
            common = f.push_value(jp, Op::IBinary(IBinOp::Min), vec![common, l], i64t, span);
        }
    }
    let start = *maps[0].get(&n.start).unwrap_or(&n.start);

    // The common inner loop: its counter, then each iteration's carried values.
    let carried: Vec<Value> =
        i_params.iter().enumerate().filter(|&(k, _)| k != n.j_at).map(|(_, &p)| p).collect();
    let jih = f.add_block();
    let jc = f.add_block_param(jih, i64t, f.values[i_params[n.j_at]].name.clone());
    let mut jih_carried: Vec<Vec<Value>> = Vec::with_capacity(factor);
    for _ in 0..factor {
        jih_carried.push(params_like(f, jih, &carried));
    }
    let mut entry_args = vec![start];
    for map in &maps {
        let args = map_args(map, &into_inner.args);
        entry_args.extend(args.iter().enumerate().filter(|&(k, _)| k != n.j_at).map(|(_, &v)| v));
    }
    f.set_terminator(jp, Terminator::Jump(BlockCall { block: jih, args: entry_args }), span);

    let jib = f.add_block();
    let mut seen = HashMap::new();
    let mut back_args = Vec::new();
    let mut next_j = None;
    for (k, map) in maps.iter().enumerate() {
        let mut m = map.clone();
        m.insert(i_params[n.j_at], jc);
        for (&p, &q) in carried.iter().zip(&jih_carried[k]) {
            m.insert(p, q);
        }
        copy_insts(f, proofs, n.body, jib, &mut m, &mut seen, true);
        let args = map_args(&m, &back_inner.args);
        next_j.get_or_insert(args[n.j_at]);
        back_args.extend(args.iter().enumerate().filter(|&(a, _)| a != n.j_at).map(|(_, &v)| v));
    }
    let Some(next_j) = next_j else { return };
    back_args.insert(0, next_j);
    f.set_terminator(jib, Terminator::Jump(BlockCall { block: jih, args: back_args }), span);
    let more = f.push_value(jih, Op::ICmp(CmpOp::Lt), vec![jc, common], TypeTable::BOOL, span);

    // Each iteration's remaining inner iterations, in order, then the suffixes.
    let js = f.add_block();
    let mut rest_headers = Vec::with_capacity(factor);
    let mut rest_params = Vec::with_capacity(factor);
    for _ in 0..factor {
        let lh = f.add_block();
        rest_params.push(params_like(f, lh, &i_params));
        rest_headers.push(lh);
    }
    let rest_entry = |k: usize| {
        let mut args = jih_carried[k].clone();
        args.insert(n.j_at, jc);
        BlockCall { block: rest_headers[k], args }
    };
    f.set_terminator(
        jih,
        Terminator::Branch {
            cond: more,
            then_dest: BlockCall { block: jib, args: vec![] },
            else_dest: rest_entry(0),
        },
        span,
    );
    for k in 0..factor {
        let lh = rest_headers[k];
        let lb = f.add_block();
        let mut m = maps[k].clone();
        for (&p, &q) in i_params.iter().zip(&rest_params[k]) {
            m.insert(p, q);
        }
        let go_on = f.push_value(
            lh,
            Op::ICmp(CmpOp::Lt),
            vec![rest_params[k][n.j_at], limits[k]],
            TypeTable::BOOL,
            span,
        );
        let after = if k + 1 < factor { rest_entry(k + 1) } else { BlockCall { block: js, args: vec![] } };
        f.set_terminator(
            lh,
            Terminator::Branch {
                cond: go_on,
                then_dest: BlockCall { block: lb, args: vec![] },
                else_dest: after,
            },
            span,
        );
        let mut body_map = m.clone();
        copy_insts(f, proofs, n.body, lb, &mut body_map, &mut HashMap::new(), true);
        let args = map_args(&body_map, &back_inner.args);
        f.set_terminator(lb, Terminator::Jump(BlockCall { block: lh, args }), span);
        // The suffix reads the inner loop's values as it left them: this loop's header's.
        maps[k] = m;
    }
    let mut outer = jh_params.clone();
    let mut seen = HashMap::new();
    for map in maps.iter_mut() {
        for (&p, &v) in h_params.iter().zip(&outer) {
            if p != h_params[n.counter_at] {
                map.insert(p, v);
            }
        }
        // Suffixes may store: their loads are not merged.
        copy_insts(f, proofs, n.suffix, js, map, &mut seen, false);
        outer = map_args(map, &back_outer.args);
    }
    f.set_terminator(js, Terminator::Jump(BlockCall { block: jh, args: outer }), span);
    f.set_terminator(
        jh,
        Terminator::Branch {
            cond: go,
            then_dest: BlockCall { block: jp, args: vec![] },
            else_dest: BlockCall { block: n.header, args: jh_params.clone() },
        },
        span,
    );

    // Entries into the loop from outside now enter the jammed copy.
    let cfg_preds: Vec<Block> = f
        .blocks
        .iter()
        .filter(|(b, d)| *b != jh && *b != n.suffix && d.term.successors().any(|c| c.block == n.header))
        .map(|(b, _)| b)
        .collect();
    for b in cfg_preds {
        for c in f.blocks[b].term.successors_mut().filter(|c| c.block == n.header) {
            c.block = jh;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s = Σ_r (Σ_{j<r} x[j] · p_r)²` where the prefix computes `p_r` (`PREFIX`), the
    /// suffix may add an instruction (`SUFFIX`), and the function takes `z`, a stack and
    /// an array it makes (`%81`) to play with.
    const BASE: &str = "fn @f(%x_1: f64[], %z_0: f64[], %st_30: stack<f64>, %m_31: i64) -> f64 {
bb0:
    %2: i64 = array.dim 0 %x_1
    %3: i64 = iconst 0
    %4: f64 = fconst 0.0
    %80: i64 = iconst 1
    %81: f64[] = array.fill %4, %80
    %32: i64 = stack.reserve %st_30, %3, %m_31, %3
    jump bb1(%3, %4)
bb1(%r_5: i64, %s_6: f64):
    %7: bool = icmp lt %r_5, %2
    br %7, bb2, bb6
bb2:
    PREFIX
    jump bb3(%3, %4)
bb3(%j_8: i64, %y_9: f64):
    %10: bool = icmp lt %j_8, %r_5
    br %10, bb4, bb5
bb4:
    %12: f64 = load.trusted %x_1[%j_8]
    %13: f64 = fmul %11, %12
    %14: f64 = fadd %y_9, %13
    %15: i64 = iconst 1
    %16: i64 = iadd %j_8, %15
    jump bb3(%16, %14)
bb5:
    SUFFIX
    %17: f64 = fmul %y_9, %y_9
    %18: f64 = fadd %s_6, %17
    %19: i64 = iconst 1
    %20: i64 = iadd %r_5, %19
    jump bb1(%20, %18)
bb6:
    ret %s_6
}
";

    fn loops(prefix: &str, suffix: &str) -> Vec<usize> {
        let text = BASE.replace("PREFIX", prefix).replace("SUFFIX", suffix);
        let module = crate::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let f = module.funcs.values().next().unwrap();
        let found: Vec<usize> = jammed_loops(f).iter().map(|&(_, factor)| factor).collect();
        if let Some(j) = jam_reductions(f) {
            crate::verify::verify_function(&module, &j).unwrap_or_else(|e| panic!("{e}"));
        }
        found
    }

    #[test]
    fn a_row_reduction_is_jammed() {
        assert_eq!(loops("%11: f64 = load.trusted %x_1[%r_5]", ""), [4]);
        // A prefix that may fail, with a suffix that neither fails nor stores.
        assert_eq!(loops("%11: f64 = load %z_0[%r_5]", ""), [4]);
    }

    #[test]
    fn a_loop_whose_test_is_read_is_left_alone() {
        let prefix = "%51: f64 = load.trusted %x_1[%r_5]\n    %11: f64 = select %7, %51, %4";
        assert_eq!(loops(prefix, ""), [0usize; 0]);
        let suffix = "%52: f64 = select %10, %4, %y_9";
        assert_eq!(loops("%11: f64 = load.trusted %x_1[%r_5]", suffix), [0usize; 0]);
    }

    #[test]
    fn a_failing_prefix_keeps_the_suffix_from_writing_what_can_be_seen() {
        // A put into a stack the caller passed: left alone.
        let put = "stack.put %st_30, %32, %r_5, %y_9";
        assert_eq!(loops("%11: f64 = load %z_0[%r_5]", put), [0usize; 0]);
        // A store into an array the function made, which the loop does not read.
        assert_eq!(loops("%11: f64 = load %z_0[%r_5]", "store %81[%r_5], %y_9"), [0usize; 0]);
        // With a prefix that cannot fail, the store is fine.
        assert_eq!(loops("%11: f64 = load.trusted %x_1[%r_5]", "store.trusted %81[%r_5], %y_9"), [4]);
    }

    #[test]
    fn a_failing_suffix_keeps_unproven_trusted_loads_from_running_early() {
        // `z[r]` is trusted but not proven: the original might stop at the suffix's
        // failing store before reaching a row where it is out of bounds.
        assert_eq!(loops("%11: f64 = load.trusted %z_0[%r_5]", "store %81[%r_5], %y_9"), [0usize; 0]);
        // Proven (`x[r]` with `r < len(x)`), it may run early.
        assert_eq!(loops("%11: f64 = load.trusted %x_1[%r_5]", "store %81[%r_5], %y_9"), [4]);
    }
}
