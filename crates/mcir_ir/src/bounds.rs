//! Removing bounds checks that cannot fail: an index that counts up from a non-negative
//! start while it stays below an array's extent is in bounds for that array wherever the
//! loop's test has passed. Such loads and stores become `load.trusted`/`store.trusted`.
//! The same facts show that some integer steps cannot overflow: `p + 1` for such a
//! counter, and `x - c` (a constant `c >= 0`) where a branch has shown `x >= 0` (the
//! counters that derived reverse passes count down).

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
        let Some(test) = defining(f, *cond) else { continue };
        let [x, k] = test.args.as_slice() else { continue };
        if const_of(f, *k).is_none_or(|k| k < -1) {
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
        if let (true, Some(body)) = (ok, only_entry(cfg, then_dest)) {
            out.push(Fact { index: *p, bound: *bound, body });
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

/// What the counted loops of a function prove about its instructions.
#[derive(Clone, Debug, Default)]
pub struct Proofs {
    /// For each load and store with a proven index, which of its indices are in bounds.
    pub in_bounds: std::collections::HashMap<Inst, Vec<bool>>,
    /// Additions `p + 1` of a counter tested `p < bound`, and subtractions of a
    /// non-negative constant from a value shown non-negative: they cannot overflow.
    pub no_overflow: std::collections::HashSet<Inst>,
}

impl Function {
    /// What the counted loops prove: indices in bounds, counter steps without overflow.
    pub fn proofs(&self) -> Proofs {
        let cfg = ControlFlow::compute(self);
        let facts = facts(self, &cfg);
        let signs = non_negative(self, &cfg);
        let mut out = Proofs::default();
        if facts.is_empty() && signs.is_empty() {
            return out;
        }
        for (b, data) in self.blocks.iter() {
            let valid: Vec<&Fact> = facts.iter().filter(|fa| cfg.dominates(fa.body, b)).collect();
            let non_neg: Vec<Value> =
                signs.iter().filter(|s| cfg.dominates(s.body, b)).map(|s| s.value).collect();
            if valid.is_empty() && non_neg.is_empty() {
                continue;
            }
            for &inst in &data.insts {
                let d = &self.insts[inst];
                let n_idx = match d.op {
                    Op::IBinary(IBinOp::Sub) => {
                        // x >= 0 and 0 <= c: x - c >= -c > i64::MIN.
                        if non_neg.contains(&d.args[0]) && const_of(self, d.args[1]).is_some_and(|c| c >= 0) {
                            out.no_overflow.insert(inst);
                        }
                        continue;
                    }
                    Op::Load | Op::TrustedLoad => d.args.len().saturating_sub(1),
                    Op::Store | Op::TrustedStore => d.args.len().saturating_sub(2),
                    Op::IBinary(IBinOp::Add) => {
                        let steps = |p: Value, c: Value| {
                            const_of(self, c) == Some(1) && valid.iter().any(|fa| fa.index == p)
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
                        let idx = d.args[1 + dim];
                        valid.iter().any(|fa| fa.index == idx && is_extent(self, fa.bound, a, dim))
                    })
                    .collect();
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
}
