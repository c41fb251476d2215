//! Control-flow analyses: predecessors, reverse post-order and dominators.

use crate::entity::EntityRef;
use crate::function::{Block, Function, Value};

/// The control-flow graph of a function, with reverse post-order and dominators.
#[derive(Clone, Debug)]
pub struct ControlFlow {
    /// Predecessors of each block (by block index), one entry per edge.
    pub preds: Vec<Vec<Block>>,
    /// Blocks reachable from the entry, in reverse post-order.
    pub rpo: Vec<Block>,
    /// Position of each block in `rpo`, `usize::MAX` if unreachable.
    rpo_index: Vec<usize>,
    /// Immediate dominator of each reachable block (the entry is its own).
    idom: Vec<Option<Block>>,
    /// Each reachable block's position in a pre-order walk of the dominator tree and
    /// the size of its subtree there, so that dominance is two comparisons.
    dom_pre: Vec<u32>,
    dom_size: Vec<u32>,
}

/// The blocks reachable from the entry of `func`, in reverse post-order of a depth-first
/// search that follows each terminator's targets in order.
pub fn reverse_post_order(func: &Function) -> Vec<Block> {
    let n = func.blocks.len();
    let mut post = Vec::with_capacity(n);
    let mut visited = vec![false; n];
    if n > 0 {
        let mut stack: Vec<(Block, usize)> = vec![(func.entry(), 0)];
        visited[0] = true;
        while let Some((b, next)) = stack.pop() {
            if let Some(s) = func.blocks[b].term.successors().nth(next).map(|s| s.block) {
                stack.push((b, next + 1));
                if s.index() < n && !visited[s.index()] {
                    visited[s.index()] = true;
                    stack.push((s, 0));
                }
            } else {
                post.push(b);
            }
        }
    }
    post.reverse();
    post
}

impl ControlFlow {
    /// Computes the analyses. Blocks named by terminators must exist in `func`.
    pub fn compute(func: &Function) -> ControlFlow {
        let n = func.blocks.len();
        let mut preds = vec![Vec::new(); n];
        for (b, data) in func.blocks.iter() {
            for s in data.term.successors() {
                if let Some(p) = preds.get_mut(s.block.index()) {
                    p.push(b);
                }
            }
        }
        let rpo = reverse_post_order(func);
        let mut rpo_index = vec![usize::MAX; n];
        for (i, b) in rpo.iter().enumerate() {
            rpo_index[b.index()] = i;
        }
        // Cooper, Harvey and Kennedy, "A Simple, Fast Dominance Algorithm".
        let mut idom: Vec<Option<Block>> = vec![None; n];
        if let Some(&entry) = rpo.first() {
            idom[entry.index()] = Some(entry);
            let mut changed = true;
            while changed {
                changed = false;
                for &b in rpo.iter().skip(1) {
                    let mut new_idom: Option<Block> = None;
                    for &p in &preds[b.index()] {
                        if idom[p.index()].is_none() {
                            continue;
                        }
                        new_idom = Some(match new_idom {
                            None => p,
                            Some(cur) => intersect(&idom, &rpo_index, p, cur),
                        });
                    }
                    if new_idom.is_some() && idom[b.index()] != new_idom {
                        idom[b.index()] = new_idom;
                        changed = true;
                    }
                }
            }
        }
        // Number the dominator tree: children in reverse post-order, walked depth first.
        let mut children: Vec<Vec<Block>> = vec![Vec::new(); n];
        for &b in rpo.iter().skip(1) {
            if let Some(d) = idom[b.index()] {
                children[d.index()].push(b);
            }
        }
        let mut dom_pre = vec![u32::MAX; n];
        let mut dom_size = vec![0u32; n];
        if let Some(&entry) = rpo.first() {
            let mut counter = 0u32;
            let mut stack: Vec<(Block, usize)> = vec![(entry, 0)];
            dom_pre[entry.index()] = 0;
            while let Some((b, next)) = stack.pop() {
                if next == 0 {
                    dom_pre[b.index()] = counter;
                    counter += 1;
                }
                if let Some(&c) = children[b.index()].get(next) {
                    stack.push((b, next + 1));
                    stack.push((c, 0));
                } else {
                    dom_size[b.index()] = counter - dom_pre[b.index()];
                }
            }
        }
        ControlFlow { preds, rpo, rpo_index, idom, dom_pre, dom_size }
    }

    /// Whether `b` is reachable from the entry.
    pub fn is_reachable(&self, b: Block) -> bool {
        self.rpo_index.get(b.index()).is_some_and(|&i| i != usize::MAX)
    }

    /// The immediate dominator of `b` (the entry's is itself); `None` if unreachable.
    pub fn idom(&self, b: Block) -> Option<Block> {
        self.idom.get(b.index()).copied().flatten()
    }

    /// Whether `a` dominates `b` (every block dominates itself).
    pub fn dominates(&self, a: Block, b: Block) -> bool {
        if a == b {
            return true;
        }
        match (self.dom_pre.get(a.index()), self.dom_pre.get(b.index())) {
            (Some(&pa), Some(&pb)) if pa != u32::MAX && pb != u32::MAX => {
                pa <= pb && pb < pa + self.dom_size[a.index()]
            }
            _ => false,
        }
    }
    /// What each edge into block `b` passes as `b`'s parameter `k`, with the block the
    /// edge leaves (`None` for an edge that passes too few arguments).
    pub fn incoming_args<'a>(
        &'a self,
        f: &'a Function,
        b: Block,
        k: usize,
    ) -> impl Iterator<Item = (Block, Option<Value>)> + 'a {
        self.preds.get(b.index()).into_iter().flatten().flat_map(move |&pred| {
            f.blocks[pred]
                .term
                .successors()
                .filter(move |c| c.block == b)
                .map(move |c| (pred, c.args.get(k).copied()))
        })
    }

    /// The blocks whose edges into `h` are back edges (not before `h` in reverse
    /// post-order), one per edge; `h` is a loop header when there is one.
    pub fn latches(&self, h: Block) -> impl Iterator<Item = Block> + '_ {
        let at = self.rpo_index.get(h.index()).copied().unwrap_or(usize::MAX);
        self.preds
            .get(h.index())
            .into_iter()
            .flatten()
            .copied()
            .filter(move |&p| at != usize::MAX && self.is_reachable(p) && self.rpo_index[p.index()] >= at)
    }

    /// The blocks of the loop whose header is `h`: those that reach one of its latches
    /// without passing through `h`, and `h`.
    pub fn loop_blocks(&self, h: Block) -> std::collections::HashSet<Block> {
        let mut body = std::collections::HashSet::from([h]);
        let mut work: Vec<Block> = self.latches(h).collect();
        while let Some(b) = work.pop() {
            if body.insert(b) {
                work.extend(self.preds.get(b.index()).into_iter().flatten().copied());
            }
        }
        body
    }

    /// How many loops contain each block (by block index): a loop is a back edge
    /// `b -> h` (`h` before `b` in reverse post-order) with every block that reaches
    /// `b` without passing through `h`. Unreachable blocks are at depth 0.
    pub fn loop_depths(&self) -> Vec<u32> {
        let n = self.preds.len();
        let mut depth = vec![0u32; n];
        let mut seen = vec![usize::MAX; n];
        let mut work = Vec::new();
        let mut loop_id = 0usize;
        for &h in &self.rpo {
            // Each header counts once, however many back edges enter it.
            let latches: Vec<Block> = self.latches(h).collect();
            if latches.is_empty() {
                continue;
            }
            seen[h.index()] = loop_id;
            depth[h.index()] += 1;
            work.extend(latches);
            while let Some(b) = work.pop() {
                if seen[b.index()] == loop_id {
                    continue;
                }
                seen[b.index()] = loop_id;
                depth[b.index()] += 1;
                work.extend(self.preds[b.index()].iter().copied().filter(|&p| self.is_reachable(p)));
            }
            loop_id += 1;
        }
        depth
    }
}

fn intersect(idom: &[Option<Block>], order: &[usize], mut a: Block, mut b: Block) -> Block {
    while a != b {
        while order[a.index()] > order[b.index()] {
            a = idom[a.index()].unwrap_or(a);
        }
        while order[b.index()] > order[a.index()] {
            b = idom[b.index()].unwrap_or(b);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::ControlFlow;
    use crate::entity::EntityRef;
    use crate::function::{Block, BlockCall, Function, Span, Terminator};
    use crate::{Op, TypeTable};

    /// Dominance by definition: `a` is on `b`'s chain of immediate dominators.
    fn dominates_by_walk(cfg: &ControlFlow, a: Block, b: Block) -> bool {
        let mut cur = b;
        loop {
            if cur == a {
                return true;
            }
            match cfg.idom(cur) {
                Some(up) if up != cur => cur = up,
                _ => return false,
            }
        }
    }

    /// Random control flow over `n` blocks (some unreachable), from a simple generator.
    fn random_function(n: usize, seed: &mut u64) -> Function {
        let mut next = move |m: usize| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((*seed >> 33) as usize) % m
        };
        let mut f = Function::new("f", &[], None);
        let blocks: Vec<Block> = std::iter::once(f.entry()).chain((1..n).map(|_| f.add_block())).collect();
        let cond = f.push_inst(f.entry(), Op::BConst(true), vec![], Some(TypeTable::BOOL), Span::default());
        let cond = cond.expect("a constant has a result");
        for (k, &b) in blocks.iter().enumerate() {
            let target = |next: &mut dyn FnMut(usize) -> usize| BlockCall {
                block: blocks[1 + next(n - 1)],
                args: Vec::new(),
            };
            let term = match (k + 1 == n, next(3)) {
                (true, _) | (_, 0) => Terminator::Return(None),
                (_, 1) => Terminator::Jump(target(&mut next)),
                _ => Terminator::Branch { cond, then_dest: target(&mut next), else_dest: target(&mut next) },
            };
            f.set_terminator(b, term, Span::default());
        }
        f
    }

    #[test]
    fn dominance_from_tree_numbering_matches_the_idom_chain() {
        let mut seed = 7;
        for n in (2..40).chain([100, 300]) {
            for _ in 0..20 {
                let f = random_function(n, &mut seed);
                let cfg = ControlFlow::compute(&f);
                for a in 0..n {
                    for b in 0..n {
                        let (a, b) = (Block::new(a), Block::new(b));
                        assert_eq!(cfg.dominates(a, b), dominates_by_walk(&cfg, a, b), "{a} dom {b}?");
                    }
                }
            }
        }
    }
}
