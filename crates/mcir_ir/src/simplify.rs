//! Control-flow cleanup: a block that only jumps on is bypassed, and a block entered by
//! a plain jump from its only predecessor is merged into it. Lowering and the AD
//! transform leave many such blocks; removing them keeps printed IR short and gives the
//! back end fewer jumps. Both steps take time linear in the size of the function, and
//! the result is laid out in reverse post-order.

use crate::entity::EntityRef;
use crate::function::*;

impl Function {
    /// A copy without forwarding blocks and with straight-line chains merged.
    pub fn simplify_cfg(&self) -> Function {
        self.clone().into_simplified_cfg()
    }

    /// The function without forwarding blocks and with straight-line chains merged.
    pub fn into_simplified_cfg(self) -> Function {
        let mut f = self;
        for _ in 0..2 {
            bypass_forwarders(&mut f);
            merge_chains(&mut f);
        }
        let order = f.reachable_blocks();
        f.into_rebuilt(&order)
    }
}

fn calls_mut(term: &mut Terminator) -> Vec<&mut BlockCall> {
    match term {
        Terminator::Jump(t) => vec![t],
        Terminator::Branch { then_dest, else_dest, .. } => vec![then_dest, else_dest],
        Terminator::Return(_) => vec![],
    }
}

/// Sends jumps to a block that has no parameters, no instructions and ends in a jump
/// straight to that jump's target (following chains of such blocks). The target's
/// arguments are defined in blocks that strictly dominate the forwarding block, hence
/// dominate every predecessor, so the redirected jumps stay valid.
fn bypass_forwarders(f: &mut Function) {
    let entry = f.entry();
    let n = f.blocks.len();
    let forward: Vec<Option<BlockCall>> = f
        .blocks
        .iter()
        .map(|(b, d)| match &d.term {
            Terminator::Jump(t)
                if b != entry && d.params.is_empty() && d.insts.is_empty() && t.block != b =>
            {
                Some(t.clone())
            }
            _ => None,
        })
        .collect();
    // The final destination of each forwarding block; a cycle of them stays as it is.
    let mut resolved: Vec<Option<BlockCall>> = vec![None; n];
    for start in 0..n {
        if forward[start].is_none() || resolved[start].is_some() {
            continue;
        }
        let mut chain = vec![start];
        let mut cur = start;
        let dest = loop {
            let Some(next) = &forward[cur] else { break None };
            let t = next.block.index();
            if let Some(r) = &resolved[t] {
                break Some(r.clone());
            }
            if forward[t].is_none() {
                break Some(next.clone());
            }
            if chain.contains(&t) {
                break None;
            }
            chain.push(t);
            cur = t;
        };
        if let Some(dest) = dest {
            for b in chain {
                resolved[b] = Some(dest.clone());
            }
        }
    }
    for b in f.blocks.keys().collect::<Vec<_>>() {
        for c in calls_mut(&mut f.blocks[b].term) {
            if let Some(r) = &resolved[c.block.index()] {
                if c.block != b {
                    *c = r.clone();
                }
            }
        }
    }
}

/// Merges each block into its only predecessor when that predecessor ends with a plain
/// jump to it. Parameters of a merged block are replaced by the jump's arguments in one
/// pass at the end.
fn merge_chains(f: &mut Function) {
    let entry = f.entry();
    let n = f.blocks.len();
    let reachable = f.reachable_blocks();
    let mut preds = vec![0usize; n];
    for &b in &reachable {
        for s in f.blocks[b].term.successors() {
            preds[s.block.index()] += 1;
        }
    }
    let mut subst: Vec<Option<Value>> = vec![None; f.values.len()];
    let mut merged = vec![false; n];
    for &p in &reachable {
        if merged[p.index()] {
            continue;
        }
        while let Terminator::Jump(call) = f.blocks[p].term.clone() {
            let b = call.block;
            if b == entry || b == p || preds[b.index()] != 1 || merged[b.index()] {
                break;
            }
            for (&param, &arg) in f.blocks[b].params.iter().zip(&call.args) {
                subst[param.index()] = Some(arg);
            }
            let moved = std::mem::take(&mut f.blocks[b].insts);
            let (term, span) = (f.blocks[b].term.clone(), f.blocks[b].term_span);
            f.blocks[b].params.clear();
            f.blocks[b].term = Terminator::Return(None);
            merged[b.index()] = true;
            f.blocks[p].insts.extend(moved);
            f.blocks[p].term = term;
            f.blocks[p].term_span = span;
        }
    }
    let resolve = |mut v: Value| {
        // Chains of substitutions end: each step goes to a value defined earlier.
        let mut steps = 0;
        while let Some(next) = subst.get(v.index()).copied().flatten() {
            v = next;
            steps += 1;
            if steps > subst.len() {
                break;
            }
        }
        v
    };
    f.map_uses(resolve);
}
