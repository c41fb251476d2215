//! Removing bounds checks that cannot fail: an index that counts up from a non-negative
//! start while it stays below an array's extent is in bounds for that array wherever the
//! loop's test has passed. Such loads and stores become `load.trusted`/`store.trusted`.
//! The same facts show that some integer steps cannot overflow: `p + 1` for such a
//! counter, and `x - c` (a constant `c >= 0`) where a branch has shown `x >= 0` (the
//! counters that derived reverse passes count down).
//!
//! Integer arithmetic is also given a range — an interval computed from constants,
//! array extents (at most [`crate::MAX_EXTENT`]) and counted loops (a counter lies in
//! `start..bound` in its loop's body) — and an addition, subtraction or product whose
//! range lies within `i64` cannot overflow: `j * d - j * (j + 1) / 2 + r` over loop
//! counters and extents needs no check.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::{CmpOp, IBinOp, Op};

/// An index known to lie in `0..bound` in the blocks dominated by `body`.
struct Fact {
    index: Value,
    bound: Value,
    body: Block,
    /// The loop's header.
    header: Block,
    /// The smallest and largest first value of the counter.
    start: (i64, i64),
}

/// A value known to be at least 0 in the blocks dominated by `body`.
struct NonNegative {
    value: Value,
    body: Block,
}

/// The block a branch edge enters, if that edge is its only way in (so the blocks it
/// dominates are reached only through the edge).
fn only_entry(cfg: &ControlFlow, call: &BlockCall) -> Option<Block> {
    (cfg.preds.get(call.block.index())?.len() == 1).then_some(call.block)
}

/// Branches on `x <= k` (else edge) or `x > k` (then edge) with a constant `k >= -1`.
fn non_negative(f: &Function, cfg: &ControlFlow) -> Vec<NonNegative> {
    let mut out = Vec::new();
    for (_, data) in f.blocks.iter() {
        let Terminator::Branch { cond, then_dest, else_dest } = &data.term else { continue };
        let Some(test) = f.defining(*cond) else { continue };
        let [x, k] = test.args.as_slice() else { continue };
        if f.const_int(*k).is_none_or(|k| k < -1) {
            continue;
        }
        let body = match test.op {
            Op::ICmp(CmpOp::Le) => only_entry(cfg, else_dest),
            Op::ICmp(CmpOp::Gt) => only_entry(cfg, then_dest),
            _ => None,
        };
        if let Some(body) = body {
            out.push(NonNegative { value: *x, body });
        }
    }
    out
}

/// The counted loops of `f`: a header parameter that starts at a value known to be
/// ≥ 0, grows by 1 along the back edge, and is tested `p < bound` by the header's
/// branch. A start is known when it is a constant, or, in a second round, when the
/// ranges the first round's loops give show it non-negative (`j + 1` for an outer
/// counter `j`, as in `for r in j + 1..d`).
fn facts(f: &Function, cfg: &ControlFlow) -> Vec<Fact> {
    let first = loop_facts(f, cfg, None);
    let ranges = Ranges::compute(f, cfg, &first);
    loop_facts(f, cfg, Some(&ranges))
}

fn loop_facts(f: &Function, cfg: &ControlFlow, ranges: Option<&Ranges>) -> Vec<Fact> {
    let mut out = Vec::new();
    for (h, data) in f.blocks.iter() {
        let Terminator::Branch { cond, then_dest, .. } = &data.term else { continue };
        let Some(test) = f.defining(*cond) else { continue };
        let (Op::ICmp(CmpOp::Lt), [p, bound]) = (&test.op, test.args.as_slice()) else { continue };
        let Some(k) = data.params.iter().position(|x| x == p) else { continue };
        let mut ok = !cfg.preds[h.index()].is_empty();
        let mut start = (i64::MAX, i64::MIN);
        for (pred, arg) in cfg.incoming_args(f, h, k) {
            let Some(arg) = arg else {
                ok = false;
                continue;
            };
            let is_step = f.is_increment_of(arg, *p);
            let first = match (f.const_int(arg), ranges) {
                (Some(c), _) => Some((c, c)),
                (None, Some(r)) if !is_step => {
                    let range = r.at(arg, pred, 0);
                    (range.lo >= 0 && range.fits()).then_some((range.lo as i64, range.hi as i64))
                }
                _ => None,
            }
            .filter(|&(lo, _)| lo >= 0);
            if let Some((lo, hi)) = first {
                start = (start.0.min(lo), start.1.max(hi));
            }
            ok &= is_step || first.is_some();
        }
        if let (true, Some(body), true) = (ok, only_entry(cfg, then_dest), start.0 <= start.1) {
            out.push(Fact { index: *p, bound: *bound, body, header: h, start });
        }
    }
    out
}

/// A closed interval of integers, in `i128` so that arithmetic on bounds is exact.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Range {
    lo: i128,
    hi: i128,
}

impl Range {
    const FULL: Range = Range { lo: i64::MIN as i128, hi: i64::MAX as i128 };

    fn fits(self) -> bool {
        self.lo >= i64::MIN as i128 && self.hi <= i64::MAX as i128
    }

    /// The smallest range holding both.
    fn union(self, other: Range) -> Range {
        Range { lo: self.lo.min(other.lo), hi: self.hi.max(other.hi) }
    }

    /// The range of a value that an `i64` operation produced (it would have failed
    /// otherwise).
    fn clamped(self) -> Range {
        Range { lo: self.lo.max(i64::MIN as i128), hi: self.hi.min(i64::MAX as i128).max(self.lo) }
    }
}

/// A loop counting down, as reverse passes write them: a header parameter tested
/// `p <= floor` (the else edge enters the body), stepping `p - 1` along the back edge,
/// and entering with the values `starts`. In the body `floor < p <= max(starts)`.
struct DownFact {
    index: Value,
    floor: Value,
    body: Block,
    header: Block,
    /// The values the counter enters the loop with, and the blocks they come from.
    starts: Vec<(Value, Block)>,
}

fn down_facts(f: &Function, cfg: &ControlFlow) -> Vec<DownFact> {
    let mut out = Vec::new();
    for (h, data) in f.blocks.iter() {
        let Terminator::Branch { cond, else_dest, .. } = &data.term else { continue };
        let Some(test) = f.defining(*cond) else { continue };
        let (Op::ICmp(CmpOp::Le), [p, floor]) = (&test.op, test.args.as_slice()) else { continue };
        let Some(k) = data.params.iter().position(|x| x == p) else { continue };
        let Some(body) = only_entry(cfg, else_dest) else { continue };
        let mut starts = Vec::new();
        let mut ok = true;
        for (pred, arg) in cfg.incoming_args(f, h, k) {
            match arg {
                None => ok = false,
                Some(arg) if !is_down_step(f, cfg, arg, *p, 4) => starts.push((arg, pred)),
                Some(_) => {}
            }
        }
        if ok && !starts.is_empty() {
            out.push(DownFact { index: *p, floor: *floor, body, header: h, starts });
        }
    }
    out
}

/// Whether `arg` is `p - 1`, directly or through block parameters that pass it on
/// (a reverse pass steps an outer counter in the outer block and carries the result
/// through its inner loop back to the header).
fn is_down_step(f: &Function, cfg: &ControlFlow, arg: Value, p: Value, depth: u32) -> bool {
    match f.values[arg].def {
        ValueDef::Inst(_) => f.defining(arg).is_some_and(|d| {
            d.op == Op::IBinary(IBinOp::Sub) && d.args[0] == p && f.const_int(d.args[1]) == Some(1)
        }),
        ValueDef::Param(b, k) if depth > 0 && arg != p => cfg
            .incoming_args(f, b, k as usize)
            .all(|(_, a)| a.is_some_and(|a| a == arg || is_down_step(f, cfg, a, p, depth - 1))),
        ValueDef::Param(..) => false,
    }
}

/// The ranges of the integer values of a function.
struct Ranges<'a> {
    f: &'a Function,
    cfg: &'a ControlFlow,
    facts: &'a [Fact],
    downs: Vec<DownFact>,
    /// Ranges of instruction results, computed where they are defined.
    of: std::collections::HashMap<Value, Range>,
}

impl<'a> Ranges<'a> {
    /// Ranges of every integer instruction result, in reverse post-order (so that the
    /// operands' are known first).
    fn compute(f: &'a Function, cfg: &'a ControlFlow, facts: &'a [Fact]) -> Ranges<'a> {
        let mut r = Ranges { f, cfg, facts, downs: down_facts(f, cfg), of: Default::default() };
        for &b in &cfg.rpo {
            for &inst in &f.blocks[b].insts {
                let d = &f.insts[inst];
                let Some(v) = d.result else { continue };
                if let Some(range) = r.result_range(d, b) {
                    r.of.insert(v, range.clamped());
                }
            }
        }
        r
    }

    /// The range of `v` as seen in block `b`.
    fn at(&self, v: Value, b: Block, depth: usize) -> Range {
        if let Some(&r) = self.of.get(&v) {
            return r;
        }
        if depth > 64 {
            return Range::FULL;
        }
        if let Some(down) = self.downs.iter().find(|d| d.index == v) {
            return self.down_range(down, b, depth);
        }
        let Some(fact) = self.facts.iter().find(|fa| fa.index == v) else {
            return self.param_range(v, depth);
        };
        let bound = self.at(fact.bound, fact.header, depth + 1);
        let lo = fact.start.0 as i128;
        if self.cfg.dominates(fact.body, b) {
            Range { lo, hi: (bound.hi - 1).max(lo) }
        } else {
            Range { lo, hi: bound.hi.max(fact.start.1 as i128) }
        }
    }

    /// The range of a block parameter that is no counter: the union of what its
    /// incoming edges pass, leaving out the parameter itself passed back unchanged (an
    /// outer counter carried through an inner loop). Followed a few parameters deep.
    fn param_range(&self, v: Value, depth: usize) -> Range {
        const PARAM_DEPTH: usize = 6;
        let ValueDef::Param(b, k) = self.f.values[v].def else { return Range::FULL };
        if depth > PARAM_DEPTH {
            return Range::FULL;
        }
        let mut out: Option<Range> = None;
        for (pred, arg) in self.cfg.incoming_args(self.f, b, k as usize) {
            let Some(arg) = arg else { return Range::FULL };
            if arg != v {
                let r = self.at(arg, pred, depth + 1);
                out = Some(out.map_or(r, |o| o.union(r)));
            }
        }
        out.unwrap_or(Range::FULL)
    }

    /// The range of a counter counting down, in block `b`: what it enters with, and in
    /// the body above the floor.
    fn down_range(&self, down: &DownFact, b: Block, depth: usize) -> Range {
        let mut start: Option<Range> = None;
        for &(arg, pred) in &down.starts {
            let r = self.at(arg, pred, depth + 1);
            start = Some(start.map_or(r, |s| s.union(r)));
        }
        let Some(start) = start else { return Range::FULL };
        let floor = self.at(down.floor, down.header, depth + 1);
        if self.cfg.dominates(down.body, b) {
            // floor < p <= start.
            Range { lo: floor.lo + 1, hi: start.hi.max(floor.lo + 1) }
        } else {
            Range { lo: start.lo.min(floor.lo), hi: start.hi }
        }
    }

    /// The range of the result of `d`, computed in block `b`, if it is an integer
    /// operation this analysis knows.
    fn result_range(&self, d: &InstData, b: Block) -> Option<Range> {
        let arg = |k: usize| self.at(d.args[k], b, 0);
        Some(match d.op {
            Op::IConst(c) => Range { lo: c as i128, hi: c as i128 },
            Op::ArrayDim(_) => Range { lo: 0, hi: crate::MAX_EXTENT as i128 },
            Op::IBinary(op) => {
                let (x, y) = (arg(0), arg(1));
                match op {
                    IBinOp::Add => Range { lo: x.lo + y.lo, hi: x.hi + y.hi },
                    IBinOp::Sub => Range { lo: x.lo - y.hi, hi: x.hi - y.lo },
                    IBinOp::Mul => {
                        let c = [x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi];
                        Range { lo: *c.iter().min()?, hi: *c.iter().max()? }
                    }
                    // Division by a positive divisor truncates towards zero.
                    IBinOp::Div if y.lo > 0 => {
                        let c = [x.lo / y.lo, x.lo / y.hi, x.hi / y.lo, x.hi / y.hi];
                        Range { lo: *c.iter().min()?, hi: *c.iter().max()? }
                    }
                    IBinOp::Rem if y.lo > 0 && x.lo >= 0 => Range { lo: 0, hi: (y.hi - 1).min(x.hi) },
                    IBinOp::Min => Range { lo: x.lo.min(y.lo), hi: x.hi.min(y.hi) },
                    IBinOp::Max => Range { lo: x.lo.max(y.lo), hi: x.hi.max(y.hi) },
                    _ => return None,
                }
            }
            // Either operand: a reverse pass's trip count `select(0 < n, n, 0)`, say.
            Op::Select => arg(1).union(arg(2)),
            _ => return None,
        })
    }
}

/// Extents known as constants: (array, dimension) to extent.
type Known = std::collections::HashMap<(Value, usize), i64>;

/// The extents a function knows before it does anything: those its entry checks with
/// `array.expect_dim` against a constant (a function compiled for fixed shapes, see
/// `crate::specialise`, starts with these checks, so they hold everywhere after), and
/// those of arrays made by `array.fill` with a constant extent.
fn known_extents(f: &Function) -> Known {
    let mut out = Known::new();
    for &i in &f.blocks[f.entry()].insts {
        let d = &f.insts[i];
        match d.op {
            Op::ExpectDim(k) => {
                if let Some(n) = f.const_int(d.args[1]) {
                    out.insert((d.args[0], k as usize), n);
                }
            }
            Op::IConst(_) => {}
            _ => break,
        }
    }
    for (_, d) in f.insts.iter() {
        if let (Op::ArrayFill, Some(r)) = (&d.op, d.result) {
            for (k, &e) in d.args.iter().skip(1).enumerate() {
                if let Some(n) = f.const_int(e) {
                    out.insert((r, k), n);
                }
            }
        }
    }
    out
}

/// Whether `bound` is the extent of dimension `dim` of the array `a`.
fn is_extent(f: &Function, known: &Known, bound: Value, a: Value, dim: usize) -> bool {
    if f.defining(bound).is_some_and(|d| d.op == Op::ArrayDim(dim as u8) && d.args.first() == Some(&a)) {
        return true;
    }
    // A constant the extent is known to be.
    if f.const_int(bound).is_some_and(|n| known.get(&(a, dim)) == Some(&n)) {
        return true;
    }
    // An array made by `array.fill` with that very extent.
    f.defining(a).is_some_and(|d| matches!(d.op, Op::ArrayFill) && d.args.get(1 + dim) == Some(&bound))
}

/// Whether `idx` is a constant within the known extent of dimension `dim` of `a`.
fn constant_within(f: &Function, known: &Known, idx: Value, a: Value, dim: usize) -> bool {
    match (f.const_int(idx), known.get(&(a, dim))) {
        (Some(c), Some(&n)) => 0 <= c && c < n,
        _ => false,
    }
}

/// Whether counter `idx` (of one of the loops `valid`) stays below the extent of
/// dimension `dim` of `a`: its bound is that extent, or another such counter, which is
/// itself below it (`j < r < size(x, 1)` for `for r in 0..size(x, 1) { for j in 0..r }`),
/// up to `depth` counters deep.
fn below_extent(
    f: &Function,
    known: &Known,
    valid: &[&Fact],
    idx: Value,
    a: Value,
    dim: usize,
    depth: u32,
) -> bool {
    valid.iter().any(|fa| {
        fa.index == idx
            && (is_extent(f, known, fa.bound, a, dim)
                || (depth > 1 && below_extent(f, known, valid, fa.bound, a, dim, depth - 1)))
    })
}

/// Whether `idx` is `extent - 1 - j` for the extent of dimension `dim` of `a` and a
/// counter `j` below that extent (`x[len(x) - 1 - j]` walking an array backwards):
/// `0 <= j < extent` puts it in `0..extent` too.
fn reversed_below_extent(
    f: &Function,
    known: &Known,
    valid: &[&Fact],
    idx: Value,
    a: Value,
    dim: usize,
) -> bool {
    let Some(d) = f.defining(idx) else { return false };
    if d.op != Op::IBinary(IBinOp::Sub) {
        return false;
    }
    let (last, j) = (d.args[0], d.args[1]);
    let Some(l) = f.defining(last) else { return false };
    l.op == Op::IBinary(IBinOp::Sub)
        && f.const_int(l.args[1]) == Some(1)
        && is_extent(f, known, l.args[0], a, dim)
        && below_extent(f, known, valid, j, a, dim, 3)
}

/// A counted loop: its counter starts at least at 0, goes up by one, and stays below
/// `bound` in the loop's body.
#[derive(Clone, Copy, Debug)]
pub struct CountedLoop {
    /// The loop's header, whose branch tests `index < bound`.
    pub header: Block,
    /// The counter: a parameter of the header.
    pub index: Value,
    /// What the counter stays below.
    pub bound: Value,
}

/// What the counted loops of a function prove about its instructions.
#[derive(Clone, Debug, Default)]
pub struct Proofs {
    /// For each load and store with a proven index, which of its indices are in bounds.
    pub in_bounds: std::collections::HashMap<Inst, Vec<bool>>,
    /// Integer operations that cannot fail: additions `p + 1` of a counter tested
    /// `p < bound`, subtractions of a non-negative constant from a value shown
    /// non-negative, additions, subtractions and products whose range lies within
    /// `i64`, and divisions and remainders by a constant other than 0 and -1.
    pub no_overflow: std::collections::HashSet<Inst>,
}

impl Function {
    /// The counted loops, as the proofs see them, given the function's control flow.
    pub fn counted_loops(&self, cfg: &ControlFlow) -> Vec<CountedLoop> {
        facts(self, cfg)
            .into_iter()
            .map(|fa| CountedLoop { header: fa.header, index: fa.index, bound: fa.bound })
            .collect()
    }

    /// What the counted loops prove: indices in bounds, counter steps without overflow.
    pub fn proofs(&self) -> Proofs {
        self.proofs_with(&ControlFlow::compute(self))
    }

    fn proofs_with(&self, cfg: &ControlFlow) -> Proofs {
        let facts = facts(self, cfg);
        let signs = non_negative(self, cfg);
        let mut out = Proofs::default();
        let ranges = Ranges::compute(self, cfg, &facts);
        for &b in &cfg.rpo {
            for &inst in &self.blocks[b].insts {
                let d = &self.insts[inst];
                let safe = match (&d.op, d.args.as_slice()) {
                    (Op::IBinary(IBinOp::Add | IBinOp::Sub | IBinOp::Mul), _) => {
                        ranges.result_range(d, b).is_some_and(Range::fits)
                    }
                    (Op::IBinary(IBinOp::Div | IBinOp::Rem), [_, k]) => {
                        self.const_int(*k).is_some_and(|k| k != 0 && k != -1)
                    }
                    _ => false,
                };
                if safe {
                    out.no_overflow.insert(inst);
                }
            }
        }
        let known = known_extents(self);
        if facts.is_empty() && signs.is_empty() && known.is_empty() {
            return out;
        }
        for (b, data) in self.blocks.iter() {
            let valid: Vec<&Fact> = facts.iter().filter(|fa| cfg.dominates(fa.body, b)).collect();
            let non_neg: Vec<Value> =
                signs.iter().filter(|s| cfg.dominates(s.body, b)).map(|s| s.value).collect();
            if valid.is_empty() && non_neg.is_empty() && known.is_empty() {
                continue;
            }
            for &inst in &data.insts {
                let d = &self.insts[inst];
                let n_idx = match d.op {
                    Op::IBinary(IBinOp::Sub) => {
                        // x >= 0 and 0 <= c: x - c >= -c > i64::MIN.
                        if non_neg.contains(&d.args[0]) && self.const_int(d.args[1]).is_some_and(|c| c >= 0) {
                            out.no_overflow.insert(inst);
                        }
                        continue;
                    }
                    Op::Load | Op::TrustedLoad => d.args.len().saturating_sub(1),
                    Op::Store | Op::TrustedStore => d.args.len().saturating_sub(2),
                    Op::IBinary(IBinOp::Add) => {
                        let steps = |p: Value, c: Value| {
                            self.const_int(c) == Some(1) && valid.iter().any(|fa| fa.index == p)
                        };
                        if steps(d.args[0], d.args[1]) || steps(d.args[1], d.args[0]) {
                            out.no_overflow.insert(inst);
                        }
                        continue;
                    }
                    _ => continue,
                };
                let a = d.args[0];
                let dims: Vec<bool> = (0..n_idx)
                    .map(|dim| {
                        below_extent(self, &known, &valid, d.args[1 + dim], a, dim, 3)
                            || reversed_below_extent(self, &known, &valid, d.args[1 + dim], a, dim)
                            || constant_within(self, &known, d.args[1 + dim], a, dim)
                    })
                    .collect();
                if dims.iter().any(|&x| x) {
                    out.in_bounds.insert(inst, dims);
                }
            }
        }
        out
    }

    /// What holds where each instruction stands: [`Function::proofs`], and the indices
    /// of an access that another access of the same array dominates with the same index
    /// along the same dimension (or a constant at least as large there): that one was
    /// checked, or proven, before this one runs, and extents do not change. The same
    /// value in a loop is the same value in an iteration, so the earlier check is of this
    /// iteration's index.
    ///
    /// A branch on `k < array.dim d a` (a constant `k >= 0`) whose taken edge is the only
    /// way into its block from outside what that block dominates counts as a check of
    /// `a` at `k` along `d` there, and one on `bound <= array.dim d a` as a check of every
    /// counter that stays below `bound` (the tests in front of a versioned loop,
    /// `crate::version`).
    ///
    /// Only for code in which no access moves any more (native lowering): a pass that
    /// moved an access above the one that checked it would lose the check, which is why
    /// [`Function::trust_proven_indices`] does not use these.
    pub fn proofs_in_place(&self) -> Proofs {
        let cfg = ControlFlow::compute(self);
        let mut out = self.proofs_with(&cfg);
        // Where each (array, dimension, index) and each (array, dimension) with a
        // constant index was seen first: a handful per key, as the first ones of a key
        // dominate most later ones.
        const KEPT: usize = 8;
        let mut seen: std::collections::HashMap<(Value, usize, Value), Vec<Block>> = Default::default();
        let mut constants: std::collections::HashMap<(Value, usize), Vec<(Block, i64)>> = Default::default();
        // Bounds tested `bound <= array.dim d a`: (array, dimension) to (block, bound).
        let mut bounded: std::collections::HashMap<(Value, usize), Vec<(Block, Value)>> = Default::default();
        for &b in &cfg.rpo {
            let Terminator::Branch { cond, then_dest, else_dest } = &self.blocks[b].term else { continue };
            let Some(test) = self.defining(*cond) else { continue };
            let [k, extent] = test.args.as_slice() else { continue };
            let Some(dim) = self.defining(*extent) else { continue };
            let (Op::ArrayDim(d), Some(&a)) = (&dim.op, dim.args.first()) else { continue };
            // The taken edge is the only way in from outside the blocks it enters (a loop
            // header's other edges come back from its body).
            let entered = then_dest.block;
            let only_way_in = entered != else_dest.block
                && cfg.preds[entered.index()].iter().all(|&p| p == b || cfg.dominates(entered, p));
            if !only_way_in {
                continue;
            }
            match test.op {
                Op::ICmp(CmpOp::Lt) => {
                    if let Some(k) = self.const_int(*k).filter(|&k| k >= 0) {
                        constants.entry((a, usize::from(*d))).or_default().push((entered, k));
                    }
                }
                Op::ICmp(CmpOp::Le) => bounded.entry((a, usize::from(*d))).or_default().push((entered, *k)),
                _ => {}
            }
        }
        let counters = if bounded.is_empty() { Vec::new() } else { facts(self, &cfg) };
        for &b in &cfg.rpo {
            for &inst in &self.blocks[b].insts {
                let d = &self.insts[inst];
                let n_idx = match d.op {
                    Op::Load | Op::TrustedLoad => d.args.len().saturating_sub(1),
                    Op::Store | Op::TrustedStore => d.args.len().saturating_sub(2),
                    _ => continue,
                };
                let a = d.args[0];
                let mut dims = out.in_bounds.get(&inst).cloned().unwrap_or_else(|| vec![false; n_idx]);
                dims.resize(n_idx, false);
                for (dim, proven) in dims.iter_mut().enumerate() {
                    let idx = d.args[1 + dim];
                    // Blocks are visited in reverse post-order, so a block seen before
                    // `b` that is `b` itself holds an earlier instruction.
                    let sites = seen.entry((a, dim, idx)).or_default();
                    *proven |= sites.iter().any(|&s| cfg.dominates(s, b));
                    if sites.len() < KEPT {
                        sites.push(b);
                    }
                    // A counter in `0..bound` where `bound <= extent` has been tested.
                    if let Some(tested) = bounded.get(&(a, dim)) {
                        *proven |= counters.iter().any(|fa| {
                            fa.index == idx
                                && cfg.dominates(fa.body, b)
                                && tested.iter().any(|&(s, bound)| bound == fa.bound && cfg.dominates(s, b))
                        });
                    }
                    if let Some(c) = self.const_int(idx).filter(|&c| c >= 0) {
                        let sites = constants.entry((a, dim)).or_default();
                        *proven |= sites.iter().any(|&(s, k)| k >= c && cfg.dominates(s, b));
                        if sites.len() < KEPT {
                            sites.push((b, c));
                        }
                    }
                }
                if dims.iter().any(|&x| x) {
                    out.in_bounds.insert(inst, dims);
                }
            }
        }
        out
    }

    /// Turns every load and store whose indices are all provably in bounds into its
    /// trusted form. Returns how many were changed.
    pub fn trust_proven_indices(&mut self) -> usize {
        let proofs = self.proofs();
        let mut changes = Vec::new();
        for (&inst, dims) in &proofs.in_bounds {
            if !dims.is_empty()
                && dims.iter().all(|&x| x)
                && matches!(self.insts[inst].op, Op::Load | Op::Store)
            {
                changes.push(inst);
            }
        }
        for &inst in &changes {
            let op = &mut self.insts[inst].op;
            *op = if *op == Op::Load { Op::TrustedLoad } else { Op::TrustedStore };
        }
        changes.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::entity::EntityRef;
    use crate::op::Op;

    /// The result values of the instructions proven not to overflow, by number.
    fn no_overflow(ir: &str) -> Vec<usize> {
        let m = crate::parse_module(ir).expect("parses");
        let (_, f) = m.funcs.iter().next().expect("a function");
        let mut out: Vec<usize> =
            f.proofs().no_overflow.iter().filter_map(|&i| f.insts[i].result).map(|v| v.index()).collect();
        out.sort();
        out
    }

    #[test]
    fn counters_of_reversed_loops_have_ranges() {
        // The reverse of `for j in 0..len(a) { for r in j + 1..len(a) { .. } }`: j counts
        // down from max(len(a), 0) to 0 and is carried unchanged through the inner loop,
        // whose counter r counts down to j + 1 from a value read off the tape. Then
        // j + 1 (%14), j * n (%18) and r - 1 (%17) cannot overflow; r + 1 could, as
        // nothing bounds r from above.
        let ir = "fn @f(%a_0: f64[], %s_1: stack<i64>) {
bb0:
    %2: i64 = iconst 0
    %3: i64 = array.dim 0 %a_0
    %4: bool = icmp lt %2, %3
    %5: i64 = select %4, %3, %2
    jump bb1(%5)
bb1(%j_6: i64):
    %7: bool = icmp le %j_6, %2
    br %7, bb5, bb2
bb2:
    %8: i64 = iconst 1
    %9: i64 = isub %j_6, %8
    %10: i64 = stack.pop %s_1
    jump bb3(%9, %10)
bb3(%j_11: i64, %r_12: i64):
    %13: i64 = iconst 1
    %14: i64 = iadd %j_11, %13
    %15: bool = icmp le %r_12, %14
    br %15, bb1(%j_11), bb4
bb4:
    %16: i64 = iconst 1
    %17: i64 = isub %r_12, %16
    %18: i64 = imul %j_11, %3
    %19: i64 = iadd %r_12, %16
    jump bb3(%j_11, %17)
bb5:
    ret
}
";
        assert_eq!(no_overflow(ir), vec![9, 14, 17, 18]);
    }

    #[test]
    fn a_step_down_past_a_test_against_zero_cannot_overflow() {
        let ir = "fn @f(%x_0: i64) -> i64 {
bb0:
    %1: i64 = iconst 0
    %2: bool = icmp le %x_0, %1
    br %2, bb2, bb1
bb1:
    %3: i64 = iconst 1
    %4: i64 = isub %x_0, %3
    ret %4
bb2:
    ret %x_0
}
";
        assert_eq!(no_overflow(ir), vec![4]);
    }

    #[test]
    fn a_block_also_entered_without_the_test_proves_nothing() {
        let ir = "fn @f(%x_0: i64, %c_1: bool) -> i64 {
bb0:
    br %c_1, bb1, bb3
bb3:
    %2: i64 = iconst 0
    %3: bool = icmp le %x_0, %2
    br %3, bb2, bb1
bb1:
    %4: i64 = iconst 1
    %5: i64 = isub %x_0, %4
    ret %5
bb2:
    ret %x_0
}
";
        assert_eq!(no_overflow(ir), Vec::<usize>::new());
    }

    #[test]
    fn packed_triangle_indices_over_counters_and_extents_cannot_overflow() {
        // for r in 0..d { for j in 0..r { j * d - j * (j + 1) / 2 + r } }, d an extent.
        let ir = "fn @f(%a_0: f64[]) -> i64 {
bb0:
    %1: i64 = array.dim 0 %a_0
    %2: i64 = iconst 0
    jump bb1(%2, %2)
bb1(%r_3: i64, %acc_4: i64):
    %5: bool = icmp lt %r_3, %1
    br %5, bb2, bb5
bb2:
    jump bb3(%2, %acc_4)
bb3(%j_6: i64, %acc_7: i64):
    %8: bool = icmp lt %j_6, %r_3
    br %8, bb4, bb6
bb4:
    %9: i64 = imul %j_6, %1
    %10: i64 = iconst 1
    %11: i64 = iadd %j_6, %10
    %12: i64 = imul %j_6, %11
    %13: i64 = iconst 2
    %14: i64 = idiv %12, %13
    %15: i64 = isub %9, %14
    %16: i64 = iadd %15, %r_3
    %17: i64 = iadd %acc_7, %16
    %18: i64 = iadd %j_6, %10
    jump bb3(%18, %17)
bb6:
    %19: i64 = iconst 1
    %20: i64 = iadd %r_3, %19
    jump bb1(%20, %acc_7)
bb5:
    ret %acc_4
}
";
        // Everything but the accumulation `%17`, whose range is not known (the division
        // by the constant 2, `%14`, cannot fail either).
        assert_eq!(no_overflow(ir), vec![9, 11, 12, 14, 15, 16, 18, 20]);
    }

    #[test]
    fn a_counter_starting_past_an_outer_counter_is_in_bounds() {
        // for j in 0..len(a) { for r in j + 1..len(a) { a[r] } }: r starts at j + 1,
        // which the outer loop shows is at least 1; a start that may be negative
        // (`j - 1`) proves nothing.
        let ir = |start: &str| {
            format!(
                "fn @f(%a_0: f64[]) -> f64 {{
bb0:
    %1: i64 = iconst 0
    %2: i64 = array.dim 0 %a_0
    %3: f64 = fconst 0.0
    jump bb1(%1, %3)
bb1(%j_4: i64, %s_5: f64):
    %6: bool = icmp lt %j_4, %2
    br %6, bb3, bb2
bb2:
    ret %s_5
bb3:
    %7: i64 = iconst 1
    %8: i64 = {start} %j_4, %7
    jump bb4(%8, %s_5)
bb4(%r_9: i64, %s_10: f64):
    %11: bool = icmp lt %r_9, %2
    br %11, bb6, bb5
bb5:
    %12: i64 = iadd %j_4, %7
    jump bb1(%12, %s_10)
bb6:
    %13: f64 = load %a_0[%r_9]
    %14: f64 = fadd %s_10, %13
    %15: i64 = iadd %r_9, %7
    jump bb4(%15, %14)
}}
"
            )
        };
        let trusted = |start: &str| {
            let m = crate::parse_module(&ir(start)).expect("parses");
            let (_, f) = m.funcs.iter().next().expect("a function");
            f.clone().trust_proven_indices()
        };
        assert_eq!(trusted("iadd"), 1);
        assert_eq!(trusted("isub"), 0);
    }

    #[test]
    fn a_counter_bounded_by_a_counter_below_an_extent_is_in_bounds() {
        // for r in 0..len(a) { for j in 0..r { a[j] } }
        let ir = "fn @f(%a_0: f64[]) -> f64 {
bb0:
    %1: i64 = iconst 0
    %2: i64 = array.dim 0 %a_0
    %3: f64 = fconst 0.0
    jump bb1(%1, %3)
bb1(%r_4: i64, %s_5: f64):
    %6: bool = icmp lt %r_4, %2
    br %6, bb3, bb2
bb2:
    ret %s_5
bb3:
    %7: i64 = iconst 0
    jump bb4(%7, %s_5)
bb4(%j_8: i64, %s_9: f64):
    %10: bool = icmp lt %j_8, %r_4
    br %10, bb6, bb5
bb5:
    %11: i64 = iconst 1
    %12: i64 = iadd %r_4, %11
    jump bb1(%12, %s_9)
bb6:
    %13: f64 = load %a_0[%j_8]
    %14: f64 = fadd %s_9, %13
    %15: i64 = iconst 1
    %16: i64 = iadd %j_8, %15
    jump bb4(%16, %14)
}
";
        let m = crate::parse_module(ir).expect("parses");
        let (_, f) = m.funcs.iter().next().expect("a function");
        let mut f = f.clone();
        assert_eq!(f.trust_proven_indices(), 1);
    }

    #[test]
    fn an_index_counting_down_from_the_last_element_is_in_bounds() {
        // for j in 0..len(a) { a[len(a) - 1 - j] + a[len(a) - j] + b[len(a) - 1 - j] }:
        // only the first is proven; the second can reach len(a), the third is another array.
        let ir = "fn @f(%a_0: f64[], %b_1: f64[]) -> f64 {
bb0:
    %2: i64 = iconst 0
    %3: i64 = array.dim 0 %a_0
    %4: f64 = fconst 0.0
    jump bb1(%2, %4)
bb1(%j_5: i64, %s_6: f64):
    %7: bool = icmp lt %j_5, %3
    br %7, bb3, bb2
bb2:
    ret %s_6
bb3:
    %8: i64 = iconst 1
    %9: i64 = isub %3, %8
    %10: i64 = isub %9, %j_5
    %11: f64 = load %a_0[%10]
    %12: i64 = isub %3, %j_5
    %13: f64 = load %a_0[%12]
    %14: f64 = load %b_1[%10]
    %15: f64 = fadd %s_6, %11
    %16: f64 = fadd %15, %13
    %17: f64 = fadd %16, %14
    %18: i64 = iadd %j_5, %8
    jump bb1(%18, %17)
}
";
        let m = crate::parse_module(ir).expect("parses");
        let (_, f) = m.funcs.iter().next().expect("a function");
        let mut f = f.clone();
        assert_eq!(f.trust_proven_indices(), 1);
        let trusted: Vec<usize> = f
            .insts
            .iter()
            .filter(|(_, d)| d.op == Op::TrustedLoad)
            .filter_map(|(_, d)| d.result.map(|r| r.index()))
            .collect();
        assert_eq!(trusted, vec![11]);
    }

    #[test]
    fn a_product_of_unknown_values_keeps_its_check() {
        let ir = "fn @f(%x_0: i64, %y_1: i64) -> i64 {
bb0:
    %2: i64 = imul %x_0, %y_1
    %3: i64 = iconst 3
    %4: i64 = imul %2, %3
    ret %4
}
";
        assert_eq!(no_overflow(ir), Vec::<usize>::new());
    }

    #[test]
    fn an_index_checked_by_a_dominating_access_is_proven_in_place() {
        // In the loop's body, v[i, 0] and v[i, 1] are checked by the first loads of
        // v (bb2); the later ones need no check, nor does v[i, 0] after v[i, 1] (0 <= 1).
        // The join bb4 is dominated by bb2, bb3 is not by bb4's accesses. `proofs`
        // alone proves none of them (v's extents are unknown), and `trust_proven_indices`
        // turns none into trusted form.
        let ir = "fn @f(%v_0: f64[,], %n_1: i64, %c_2: bool) -> f64 {
bb0:
    %3: i64 = iconst 0
    %4: i64 = iconst 1
    jump bb1(%3)
bb1(%i_5: i64):
    %6: bool = icmp lt %i_5, %n_1
    br %6, bb2, bb5
bb2:
    %7: f64 = load %v_0[%i_5, %4]
    %8: f64 = load %v_0[%i_5, %3]
    %9: f64 = fadd %7, %8
    store %v_0[%i_5, %4], %9
    br %c_2, bb3, bb4
bb3:
    %10: i64 = iadd %i_5, %4
    %11: f64 = load %v_0[%10, %3]
    jump bb4
bb4:
    %12: f64 = load %v_0[%i_5, %3]
    %13: i64 = iadd %i_5, %4
    jump bb1(%13)
bb5:
    %14: f64 = fconst 0.0
    ret %14
}
";
        let m = crate::parse_module(ir).expect("parses");
        crate::verify_module(&m).expect("verifies");
        let (_, f) = m.funcs.iter().next().expect("a function");
        // The dimensions proven of the load of value `v`, or of the store (`None`).
        let proven = |p: &super::Proofs, v: Option<usize>| {
            let (i, _) = f
                .insts
                .iter()
                .find(|(_, d)| match v {
                    Some(v) => d.result.map(|r| r.index()) == Some(v),
                    None => d.op == Op::Store,
                })
                .expect("an instruction");
            p.in_bounds.get(&i).cloned().unwrap_or_default()
        };
        let alone = f.proofs();
        assert!(f.blocks.values().flat_map(|b| &b.insts).all(|i| !alone.in_bounds.contains_key(i)));
        let in_place = f.proofs_in_place();
        assert_eq!(proven(&in_place, Some(7)), Vec::<bool>::new());
        assert_eq!(proven(&in_place, Some(8)), vec![true, true]);
        assert_eq!(proven(&in_place, None), vec![true, true]);
        // bb3's row i + 1 is new; its column 0 is covered by bb2's column 1.
        assert_eq!(proven(&in_place, Some(11)), vec![false, true]);
        assert_eq!(proven(&in_place, Some(12)), vec![true, true]);
        let mut g = f.clone();
        assert_eq!(g.trust_proven_indices(), 0);
    }
}
