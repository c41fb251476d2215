//! The analyses the transform needs on the primal function: which values carry a
//! derivative (activity), which are live at the end of each block (liveness), and the
//! incoming edges of each block.

use crate::tangent::{fdata_leaves, has_tangent, rdata_count};
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, FUnOp, Function, Op, TypeTable, Value};

/// An edge of the control-flow graph: the block it leaves and which successor slot of
/// that block's terminator it is (0 for `jump` and the `then` side of `br`, 1 for `else`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Edge {
    pub from: Block,
    pub slot: usize,
}

/// Incoming edges of every block, in block order then slot order.
pub(crate) fn in_edges(f: &Function) -> Vec<Vec<Edge>> {
    let mut out = vec![Vec::new(); f.blocks.len()];
    for (b, data) in f.blocks.iter() {
        for (slot, s) in data.term.successors().enumerate() {
            if let Some(list) = out.get_mut(s.block.index()) {
                list.push(Edge { from: b, slot });
            }
        }
    }
    out
}

/// Whether a zero-derivative op stays inactive (it does, unless its rule is corrupted on
/// purpose to test the checker).
fn zero_derivative(op: FUnOp) -> bool {
    matches!(op, FUnOp::Floor | FUnOp::Ceil | FUnOp::Round | FUnOp::Sign)
}

/// Activity: a value with rdata is *active* when its derivative may be non-zero — it
/// depends on a parameter, on memory (loads), or on a call. Constants, conversions from
/// integers and zero-derivative ops are not, and neither is arithmetic on inactive
/// values. Reverse passes keep adjoints only for active values.
pub(crate) fn activity(types: &TypeTable, f: &Function, keep_zero_ops: bool) -> Vec<bool> {
    let n = f.values.len();
    let tracked: Vec<bool> = f.values.values().map(|d| rdata_count(types, d.ty) > 0).collect();
    let mut active = vec![false; n];
    for &p in f.param_values() {
        active[p.index()] = tracked[p.index()];
    }
    loop {
        let mut changed = false;
        for (_, data) in f.blocks.iter() {
            for &inst in &data.insts {
                let d = &f.insts[inst];
                let Some(r) = d.result else { continue };
                if !tracked[r.index()] || active[r.index()] {
                    continue;
                }
                let any = |args: &[Value]| args.iter().any(|a| active[a.index()]);
                let a = match &d.op {
                    Op::FConst(_) | Op::IToF => false,
                    Op::FUnary(u) if zero_derivative(*u) => keep_zero_ops && any(&d.args),
                    Op::FBinary(_)
                    | Op::FUnary(_)
                    | Op::FPowI
                    | Op::Linearized
                    | Op::Select
                    | Op::TupleNew
                    | Op::TupleGet(_)
                    | Op::StructNew(_)
                    | Op::StructGet(..) => any(&d.args),
                    _ => true,
                };
                if a {
                    active[r.index()] = true;
                    changed = true;
                }
            }
            for s in data.term.successors() {
                for (&arg, &p) in s.args.iter().zip(&f.blocks[s.block].params) {
                    if active[arg.index()] && !active[p.index()] {
                        active[p.index()] = true;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            return active;
        }
    }
}

/// Values live at the end of each block: used later on some path without being redefined.
/// Jump arguments count as uses in the block that jumps. Computed per value by walking
/// back from each use to the definition, so time and memory follow the size of the
/// live ranges, not blocks × values.
pub(crate) fn live_out(f: &Function) -> Vec<Vec<Value>> {
    let nb = f.blocks.len();
    let mut preds: Vec<Vec<Block>> = vec![Vec::new(); nb];
    for (b, data) in f.blocks.iter() {
        for s in data.term.successors() {
            preds[s.block.index()].push(b);
        }
    }
    // Where each value is defined, and the blocks that use it.
    let mut def_block: Vec<Option<Block>> = vec![None; f.values.len()];
    let mut uses: Vec<Vec<Block>> = vec![Vec::new(); f.values.len()];
    for (b, data) in f.blocks.iter() {
        for &p in &data.params {
            def_block[p.index()] = Some(b);
        }
        for &inst in &data.insts {
            for &a in &f.insts[inst].args {
                uses[a.index()].push(b);
            }
            if let Some(r) = f.insts[inst].result {
                def_block[r.index()] = Some(b);
            }
        }
        for a in data.term.uses() {
            uses[a.index()].push(b);
        }
    }
    let mut out: Vec<Vec<Value>> = vec![Vec::new(); nb];
    // Stamps (value index + 1) mark the blocks already visited for the current value.
    let mut in_stamp = vec![0usize; nb];
    let mut out_stamp = vec![0usize; nb];
    let mut work = Vec::new();
    for (vi, use_blocks) in uses.iter().enumerate() {
        let Some(d) = def_block[vi] else { continue };
        let stamp = vi + 1;
        for &u in use_blocks {
            if u == d || in_stamp[u.index()] == stamp {
                continue;
            }
            in_stamp[u.index()] = stamp;
            work.push(u);
            while let Some(b) = work.pop() {
                for &p in &preds[b.index()] {
                    if out_stamp[p.index()] != stamp {
                        out_stamp[p.index()] = stamp;
                        out[p.index()].push(Value::new(vi));
                    }
                    if p != d && in_stamp[p.index()] != stamp {
                        in_stamp[p.index()] = stamp;
                        work.push(p);
                    }
                }
            }
        }
    }
    out
}

/// A loop header whose path need not be recorded: it has one edge from outside the loop
/// and one back edge, and a parameter that the back edge advances by a non-zero
/// constant. Coming from outside ⟺ that parameter still holds its initial value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CountedHeader {
    /// The header's parameter that counts.
    pub param: Value,
    /// Its initial value (the entry edge's argument).
    pub init: Value,
    /// Which of the header's incoming edges comes from outside.
    pub entry_edge: usize,
    /// Whether the back edge adds a positive constant (else a negative one).
    pub counts_up: bool,
}

/// The counted loop headers of `f`, by block index.
pub(crate) fn counted_headers(f: &Function, edges: &[Vec<Edge>]) -> Vec<Option<CountedHeader>> {
    let cfg = mcir_ir::cfg::ControlFlow::compute(f);
    let mut out = vec![None; f.blocks.len()];
    for (h, data) in f.blocks.iter() {
        let incoming = &edges[h.index()];
        if incoming.len() != 2 || data.params.is_empty() {
            continue;
        }
        let back: Vec<bool> = incoming.iter().map(|e| cfg.dominates(h, e.from)).collect();
        let (entry_edge, back_edge) = match (back[0], back[1]) {
            (false, true) => (0, 1),
            (true, false) => (1, 0),
            _ => continue,
        };
        let call = |e: Edge| f.blocks[e.from].term.successors().nth(e.slot).cloned();
        let (Some(entry), Some(latch)) = (call(incoming[entry_edge]), call(incoming[back_edge])) else {
            continue;
        };
        for (k, &p) in data.params.iter().enumerate() {
            if f.value_type(p) != mcir_ir::TypeTable::I64 {
                continue;
            }
            let Some(&next) = latch.args.get(k) else { continue };
            let mcir_ir::ValueDef::Inst(i) = f.values[next].def else { continue };
            let d = &f.insts[i];
            let step = |v: Value| match f.values[v].def {
                mcir_ir::ValueDef::Inst(c) => match f.insts[c].op {
                    Op::IConst(n) if n != 0 => Some(n),
                    _ => None,
                },
                _ => None,
            };
            let step = match d.op {
                Op::IBinary(mcir_ir::IBinOp::Add) if d.args[0] == p => step(d.args[1]),
                Op::IBinary(mcir_ir::IBinOp::Add) if d.args[1] == p => step(d.args[0]),
                _ => None,
            };
            if let (Some(step), Some(&init)) = (step, entry.args.get(k)) {
                out[h.index()] = Some(CountedHeader { param: p, init, entry_edge, counts_up: step > 0 });
                break;
            }
        }
    }
    out
}

/// A counted loop whose counter the reverse pass recomputes instead of reading from the
/// tape: inside the loop the counter travels as a parameter of the reverse blocks,
/// stepping back by `step` along the reversed back edge; each edge leaving the loop
/// records the counter's value once, for the reverse pass to start from. A parameter of
/// the same header that each iteration negates (`sign = -sign`) travels the same way:
/// negation is exact, so negating again steps it back (`negated`, with no `step`).
#[derive(Clone, Debug)]
pub(crate) struct LoopCounter {
    pub header: Block,
    pub latch: Block,
    pub param: Value,
    pub step: i64,
    /// An `f64` the back edge negates, rather than an integer it steps.
    pub negated: bool,
    /// The blocks of the loop (the header and every block that reaches the back edge).
    pub region: Vec<bool>,
    /// For a loop `for p in init..bound` (step 1, leaving only when the header finds
    /// `p < bound` false, `bound` computed before the loop): `(init, bound)`. The
    /// counter then leaves the loop holding `max(init, bound)`, which the reverse pass
    /// can compute instead of reading it from the tape.
    pub range: Option<(Value, Value)>,
}

/// The loop counters of `f`: counted headers whose loop has no `return` inside.
pub(crate) fn loop_counters(
    f: &Function,
    edges: &[Vec<Edge>],
    counted: &[Option<CountedHeader>],
) -> Vec<LoopCounter> {
    let mut out = Vec::new();
    for (h, _) in f.blocks.iter() {
        let Some(c) = counted[h.index()] else { continue };
        let latch = edges[h.index()][1 - c.entry_edge].from;
        let Some(call) = f.blocks[latch].term.successors().find(|s| s.block == h).cloned() else { continue };
        let Some(k) = f.blocks[h].params.iter().position(|&p| p == c.param) else { continue };
        let Some(&next) = call.args.get(k) else { continue };
        let mcir_ir::ValueDef::Inst(i) = f.values[next].def else { continue };
        let d = &f.insts[i];
        let other = if d.args[0] == c.param { d.args[1] } else { d.args[0] };
        let step = match f.values[other].def {
            mcir_ir::ValueDef::Inst(ci) => match f.insts[ci].op {
                Op::IConst(n) => n,
                _ => continue,
            },
            _ => continue,
        };
        let mut region = vec![false; f.blocks.len()];
        region[h.index()] = true;
        let mut work = vec![latch];
        while let Some(b) = work.pop() {
            if std::mem::replace(&mut region[b.index()], true) {
                continue;
            }
            work.extend(edges[b.index()].iter().map(|e| e.from));
        }
        let has_return = f
            .blocks
            .iter()
            .any(|(b, d)| region[b.index()] && matches!(d.term, mcir_ir::Terminator::Return(_)));
        if !has_return {
            let range = if step == 1 { range_of(f, h, c, &region) } else { None };
            // The header's `f64` parameters the back edge passes negated.
            for (j, &p) in f.blocks[h].params.iter().enumerate() {
                let Some(&next) = call.args.get(j) else { continue };
                let negated = j != k
                    && f.value_type(p) == mcir_ir::TypeTable::F64
                    && matches!(f.values[next].def, mcir_ir::ValueDef::Inst(i)
                        if f.insts[i].op == Op::FUnary(mcir_ir::FUnOp::Neg) && f.insts[i].args[0] == p);
                if negated {
                    out.push(LoopCounter {
                        header: h,
                        latch,
                        param: p,
                        step: 0,
                        negated: true,
                        region: region.clone(),
                        range: None,
                    });
                }
            }
            out.push(LoopCounter { header: h, latch, param: c.param, step, negated: false, region, range });
        }
    }
    out
}

/// `(init, bound)` when the loop of `header` (with blocks `region`) leaves only through
/// its header's branch on `counter < bound`, with `bound` defined outside the loop.
fn range_of(f: &Function, header: Block, c: CountedHeader, region: &[bool]) -> Option<(Value, Value)> {
    let inside = |b: Block| region.get(b.index()).copied().unwrap_or(false);
    let mcir_ir::Terminator::Branch { cond, then_dest, else_dest } = &f.blocks[header].term else {
        return None;
    };
    if !inside(then_dest.block) || inside(else_dest.block) {
        return None;
    }
    let leaves_elsewhere = f
        .blocks
        .iter()
        .any(|(b, d)| b != header && inside(b) && d.term.successors().any(|s| !inside(s.block)));
    if leaves_elsewhere {
        return None;
    }
    let mcir_ir::ValueDef::Inst(i) = f.values[*cond].def else { return None };
    let d = &f.insts[i];
    if d.op != Op::ICmp(mcir_ir::CmpOp::Lt) || d.args[0] != c.param {
        return None;
    }
    let bound = d.args[1];
    let bound_block = match f.values[bound].def {
        mcir_ir::ValueDef::Param(b, _) => b,
        mcir_ir::ValueDef::Inst(bi) => f.blocks.iter().find(|(_, bd)| bd.insts.contains(&bi))?.0,
    };
    (!inside(bound_block)).then_some((c.init, bound))
}

/// Forward activity: whether each value's tangent may be non-zero (whether it may
/// depend on a varying argument). Parameters with a tangent vary unless they are marked
/// `constant`, and so does what is computed from varying values.
///
/// An address that does not vary yet (a constant argument, an array made fresh from
/// constants, `zeros`) keeps not varying as long as it is only read, or written with
/// values that do not vary: writing a varying value into it, or letting it escape (into
/// a call, a cell, an aggregate, a join, the result), makes it vary from then on (the
/// analysis is flow-insensitive). A constant argument that comes to vary gets a zero
/// shadow of its own inside the derived function, so derivatives that pass through it
/// are kept.
///
/// Both modes use it: forward mode emits no tangent code for a value that does not vary
/// (besides saving work, this keeps `0 * inf` out of tangents: `sqrt` of a constant
/// array holding 0), and reverse mode no adjoint, since a value that does not depend on
/// the arguments passes no derivative back to them. `keep_zero_ops` treats
/// zero-derivative ops as varying (for a corrupted rule under test).
pub(crate) fn varied_values(
    types: &TypeTable,
    f: &Function,
    constant: &[bool],
    keep_zero_ops: bool,
) -> Vec<bool> {
    let n = f.values.len();
    let tracked: Vec<bool> = f.values.values().map(|d| has_tangent(types, d.ty)).collect();
    // Values that hold an address with a tangent: an address, or a tuple or value
    // struct with one inside. Where such a value escapes (into a call, a cell, an
    // aggregate, a join or the result), what it holds may be written, so it varies.
    let holds: Vec<bool> = f.values.values().map(|d| !fdata_leaves(types, d.ty).is_empty()).collect();
    let is_addr = |v: Value| tracked[v.index()] && holds[v.index()];
    // A load from a cell or record yields an address that may escape (and then be
    // written) unless the loaded value holds no address with a tangent.
    let loads_address = |v: Value| holds[v.index()];
    let mut varied = vec![false; n];
    for (i, &p) in f.param_values().iter().enumerate() {
        varied[p.index()] = tracked[p.index()] && !constant.get(i).copied().unwrap_or(false);
    }
    loop {
        let mut changed = false;
        let mut mark = |v: Value, varied: &mut Vec<bool>| {
            if tracked[v.index()] && !varied[v.index()] {
                varied[v.index()] = true;
                changed = true;
            }
        };
        for (_, data) in f.blocks.iter() {
            for &inst in &data.insts {
                let d = &f.insts[inst];
                let any = |varied: &Vec<bool>, args: &[Value]| args.iter().any(|a| varied[a.index()]);
                // What the op writes, and the addresses that escape through it.
                match &d.op {
                    Op::Store | Op::TrustedStore => {
                        if let (Some(&a), Some(&v)) = (d.args.first(), d.args.last()) {
                            if varied[v.index()] {
                                mark(a, &mut varied);
                            }
                        }
                    }
                    Op::CopyInto
                    | Op::AddInto
                    | Op::MoveAdd
                    | Op::Axpy
                    | Op::MatMulAcc(_)
                    | Op::MatVecAcc(_)
                    | Op::OuterAcc => {
                        if any(&varied, &d.args[1..]) {
                            mark(d.args[0], &mut varied);
                        }
                    }
                    Op::RefLoad | Op::MutLoad(..) if d.result.is_some_and(|r| !loads_address(r)) => {}
                    // An address taken out of a tuple or record that comes to vary makes
                    // the aggregate vary, so that every other copy taken out of it does.
                    Op::TupleGet(_) | Op::StructGet(..) => {
                        if d.result.is_some_and(|r| varied[r.index()] && loads_address(r)) {
                            mark(d.args[0], &mut varied);
                        }
                    }
                    Op::Load
                    | Op::TrustedLoad
                    | Op::Sum
                    | Op::Dot
                    | Op::MatMul(_)
                    | Op::MatVec(_)
                    | Op::Transpose
                    | Op::ArrayDim(_)
                    | Op::ExpectDim(_)
                    | Op::ArrayCopy
                    | Op::MapFBinary(_)
                    | Op::MapFUnary(_)
                    | Op::MapFPowI
                    | Op::MapIBinary(_)
                    | Op::ZerosLike
                    | Op::Print => {}
                    _ => {
                        for &a in &d.args {
                            if is_addr(a) {
                                mark(a, &mut varied);
                            }
                        }
                    }
                }
                let Some(r) = d.result else { continue };
                if !tracked[r.index()] || varied[r.index()] {
                    continue;
                }
                let v = match &d.op {
                    Op::FConst(_) | Op::IToF | Op::ZerosLike => false,
                    Op::FUnary(u) | Op::MapFUnary(u) if zero_derivative(*u) => {
                        keep_zero_ops && any(&varied, &d.args)
                    }
                    Op::RefLoad | Op::MutLoad(..) if !loads_address(r) => any(&varied, &d.args),
                    Op::FBinary(_)
                    | Op::FUnary(_)
                    | Op::FPowI
                    | Op::Linearized
                    | Op::Select
                    | Op::TupleNew
                    | Op::TupleGet(_)
                    | Op::StructGet(..)
                    | Op::Load
                    | Op::TrustedLoad
                    | Op::Sum
                    | Op::Dot
                    | Op::MatMul(_)
                    | Op::MatVec(_)
                    | Op::Transpose
                    | Op::ArrayFill
                    | Op::ArrayLit(_)
                    | Op::ArrayCopy
                    | Op::MapFBinary(_)
                    | Op::MapFUnary(_)
                    | Op::MapFPowI => any(&varied, &d.args),
                    Op::StructNew(s) if !types.struct_def(*s).mutable => any(&varied, &d.args),
                    _ => true,
                };
                if v {
                    mark(r, &mut varied);
                }
            }
            for s in data.term.successors() {
                for (&arg, &p) in s.args.iter().zip(&f.blocks[s.block].params) {
                    if is_addr(arg) {
                        mark(arg, &mut varied);
                    }
                    if varied[arg.index()] {
                        mark(p, &mut varied);
                    }
                }
            }
            if let mcir_ir::Terminator::Return(Some(v)) = data.term {
                if is_addr(v) {
                    mark(v, &mut varied);
                }
            }
        }
        if !changed {
            return varied;
        }
    }
}

/// `f` with a trip counter added to every loop that has one way in and one back edge
/// but counts nothing (a `while` loop): a parameter of its header, 0 on the way in and
/// one more along the back edge. The header is then counted (`counted_headers`), so the
/// forward pass records no path at each iteration, only the counter once where the loop
/// is left, and the reverse pass counts back down to leave it. `None` when no loop needs
/// a counter (the function is then its own result, and no copy of it is made).
pub(crate) fn count_loop_trips(f: &Function) -> Option<Function> {
    let edges = in_edges(f);
    let counted = counted_headers(f, &edges);
    let cfg = mcir_ir::cfg::ControlFlow::compute(f);
    let mut uncounted = Vec::new();
    for (h, _) in f.blocks.iter() {
        let incoming = &edges[h.index()];
        if incoming.len() != 2 || counted[h.index()].is_some() || incoming[0].from == incoming[1].from {
            continue;
        }
        let back: Vec<bool> = incoming.iter().map(|e| cfg.dominates(h, e.from)).collect();
        match (back[0], back[1]) {
            (false, true) => uncounted.push((h, incoming[0], incoming[1])),
            (true, false) => uncounted.push((h, incoming[1], incoming[0])),
            _ => continue,
        }
    }
    if uncounted.is_empty() {
        return None;
    }
    let mut out = f.clone();
    for (h, entry_edge, back_edge) in uncounted {
        let span = out.blocks[h].term_span;
        let trip = out.add_block_param(h, TypeTable::I64, Some("trip".to_string()));
        let zero = out.push_value(entry_edge.from, Op::IConst(0), vec![], TypeTable::I64, span);
        let one = out.push_value(back_edge.from, Op::IConst(1), vec![], TypeTable::I64, span);
        let next = out.push_value(
            back_edge.from,
            Op::IBinary(mcir_ir::IBinOp::Add),
            vec![trip, one],
            TypeTable::I64,
            span,
        );
        for (edge, arg) in [(entry_edge, zero), (back_edge, next)] {
            if let Some(call) = out.blocks[edge.from].term.successors_mut().nth(edge.slot) {
                call.args.push(arg);
            }
        }
    }
    Some(out)
}
