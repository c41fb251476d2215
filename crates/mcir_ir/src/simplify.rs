//! Control-flow cleanup: a block that only jumps on is bypassed, and a block entered by
//! a plain jump from its only predecessor is merged into it. Lowering and the AD
//! transform leave many such blocks; removing them keeps printed IR short and gives the
//! back end fewer jumps. The result is laid out in reverse post-order.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;

impl Function {
    /// A copy without forwarding blocks and with straight-line chains merged.
    pub fn simplify_cfg(&self) -> Function {
        let mut f = self.clone();
        loop {
            let changed = bypass_forwarders(&mut f) | merge_chains(&mut f);
            if !changed {
                break;
            }
        }
        let order = f.reachable_blocks();
        f.rebuild(&order)
    }
}

/// Sends jumps to a block that has no parameters, no instructions and ends in a jump
/// straight to that jump's target. Its arguments are defined in blocks that strictly
/// dominate it, hence dominate every predecessor, so the redirected jumps stay valid.
fn bypass_forwarders(f: &mut Function) -> bool {
    let entry = f.entry();
    let mut changed = false;
    let blocks: Vec<Block> = f.blocks.keys().collect();
    for b in blocks {
        let data = &f.blocks[b];
        let Terminator::Jump(target) = &data.term else { continue };
        if b == entry || !data.params.is_empty() || !data.insts.is_empty() || target.block == b {
            continue;
        }
        let target = target.clone();
        for p in f.blocks.keys().collect::<Vec<_>>() {
            let term = &mut f.blocks[p].term;
            let calls: Vec<&mut BlockCall> = match term {
                Terminator::Jump(t) => vec![t],
                Terminator::Branch { then_dest, else_dest, .. } => vec![then_dest, else_dest],
                Terminator::Return(_) => vec![],
            };
            for c in calls {
                if c.block == b && p != b {
                    *c = target.clone();
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Merges a block into its only predecessor when that predecessor ends with a jump to it.
fn merge_chains(f: &mut Function) -> bool {
    let cfg = ControlFlow::compute(f);
    let entry = f.entry();
    for b in cfg.rpo.clone() {
        if b == entry {
            continue;
        }
        let preds = &cfg.preds[b.index()];
        if preds.len() != 1 || preds[0] == b {
            continue;
        }
        let p = preds[0];
        let Terminator::Jump(call) = f.blocks[p].term.clone() else { continue };
        if call.block != b {
            continue;
        }
        // Parameters become the jump's arguments everywhere they are used.
        let params = f.blocks[b].params.clone();
        let subst: Vec<(Value, Value)> = params.into_iter().zip(call.args).collect();
        let replace = |v: &mut Value| {
            if let Some(&(_, to)) = subst.iter().find(|(from, _)| from == v) {
                *v = to;
            }
        };
        let insts: Vec<Inst> = f.insts.keys().collect();
        for i in insts {
            f.insts[i].args.iter_mut().for_each(replace);
        }
        for blk in f.blocks.keys().collect::<Vec<_>>() {
            match &mut f.blocks[blk].term {
                Terminator::Jump(t) => t.args.iter_mut().for_each(replace),
                Terminator::Branch { cond, then_dest, else_dest } => {
                    replace(cond);
                    then_dest.args.iter_mut().for_each(replace);
                    else_dest.args.iter_mut().for_each(replace);
                }
                Terminator::Return(v) => v.iter_mut().for_each(replace),
            }
        }
        let moved = std::mem::take(&mut f.blocks[b].insts);
        let (term, span) = (f.blocks[b].term.clone(), f.blocks[b].term_span);
        f.blocks[b].params.clear();
        f.blocks[b].term = Terminator::Return(None);
        f.blocks[p].insts.extend(moved);
        f.blocks[p].term = term;
        f.blocks[p].term_span = span;
        return true;
    }
    false
}
