//! Removing bounds checks that cannot fail: an index that counts up from a non-negative
//! start while it stays below an array's extent is in bounds for that array wherever the
//! loop's test has passed. Such loads and stores become `load.trusted`/`store.trusted`.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::{CmpOp, IBinOp, Op};

/// An index known to lie in `0..bound` in the blocks dominated by `body`.
struct Fact {
    index: Value,
    bound: Value,
    body: Block,
}

fn defining(f: &Function, v: Value) -> Option<&InstData> {
    match f.values.get(v)?.def {
        ValueDef::Inst(i) => f.insts.get(i),
        ValueDef::Param(..) => None,
    }
}

fn const_of(f: &Function, v: Value) -> Option<i64> {
    match defining(f, v)?.op {
        Op::IConst(c) => Some(c),
        _ => None,
    }
}

/// The counted loops of `f`: a header parameter that starts at a constant ≥ 0, grows
/// by 1 along the back edge, and is tested `p < bound` by the header's branch.
fn facts(f: &Function, cfg: &ControlFlow) -> Vec<Fact> {
    let mut out = Vec::new();
    for (h, data) in f.blocks.iter() {
        let Terminator::Branch { cond, then_dest, .. } = &data.term else { continue };
        let Some(test) = defining(f, *cond) else { continue };
        let (Op::ICmp(CmpOp::Lt), [p, bound]) = (&test.op, test.args.as_slice()) else { continue };
        let Some(k) = data.params.iter().position(|x| x == p) else { continue };
        let preds = &cfg.preds[h.index()];
        let mut ok = !preds.is_empty();
        for &pred in preds {
            for call in f.blocks[pred].term.successors().filter(|c| c.block == h) {
                let Some(&arg) = call.args.get(k) else {
                    ok = false;
                    continue;
                };
                let is_step = defining(f, arg).is_some_and(|d| {
                    matches!(d.op, Op::IBinary(IBinOp::Add))
                        && ((d.args[0] == *p && const_of(f, d.args[1]) == Some(1))
                            || (d.args[1] == *p && const_of(f, d.args[0]) == Some(1)))
                });
                let is_start = const_of(f, arg).is_some_and(|c| c >= 0);
                ok &= is_step || is_start;
            }
        }
        if ok {
            out.push(Fact { index: *p, bound: *bound, body: then_dest.block });
        }
    }
    out
}

/// Whether `bound` is the extent of dimension `dim` of the array `a`.
fn is_extent(f: &Function, bound: Value, a: Value, dim: usize) -> bool {
    if defining(f, bound).is_some_and(|d| d.op == Op::ArrayDim(dim as u8) && d.args.first() == Some(&a)) {
        return true;
    }
    // An array made by `array.fill` with that very extent.
    defining(f, a).is_some_and(|d| matches!(d.op, Op::ArrayFill) && d.args.get(1 + dim) == Some(&bound))
}

impl Function {
    /// Turns every load and store whose indices are all provably in bounds into its
    /// trusted form. Returns how many were changed.
    pub fn trust_proven_indices(&mut self) -> usize {
        let cfg = ControlFlow::compute(self);
        let facts = facts(self, &cfg);
        if facts.is_empty() {
            return 0;
        }
        let mut changes = Vec::new();
        for (b, data) in self.blocks.iter() {
            let valid: Vec<&Fact> = facts.iter().filter(|fa| cfg.dominates(fa.body, b)).collect();
            if valid.is_empty() {
                continue;
            }
            for &inst in &data.insts {
                let d = &self.insts[inst];
                let n_idx = match d.op {
                    Op::Load => d.args.len().saturating_sub(1),
                    Op::Store => d.args.len().saturating_sub(2),
                    _ => continue,
                };
                let a = d.args[0];
                let proven = (0..n_idx).all(|dim| {
                    let idx = d.args[1 + dim];
                    valid.iter().any(|fa| fa.index == idx && is_extent(self, fa.bound, a, dim))
                });
                if proven && n_idx > 0 {
                    changes.push(inst);
                }
            }
        }
        for &inst in &changes {
            let op = &mut self.insts[inst].op;
            *op = if *op == Op::Load { Op::TrustedLoad } else { Op::TrustedStore };
        }
        changes.len()
    }
}
