//! The call graph of a module: its call sites, built in one pass over the functions,
//! and which functions take part in recursion, from the graph's strongly connected
//! components (petgraph's Tarjan). Whole-module analyses read it instead of walking the
//! calls again from every function, so that they stay linear in the module's size.

use crate::entity::EntityRef;
use crate::{Block, FuncId, Inst, Module, Op};
use petgraph::graph::{DiGraph, NodeIndex};

/// One `call` instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// The function the call is in.
    pub caller: FuncId,
    /// The function it calls.
    pub callee: FuncId,
    /// The block of the call.
    pub block: Block,
    /// The call instruction.
    pub inst: Inst,
}

/// The calls of a module's functions (those `include` accepts), and their cycles.
pub struct CallGraph {
    /// Call sites grouped by caller: those of function `f` are
    /// `sites[first[f]..first[f + 1]]`, in block and instruction order.
    sites: Vec<CallSite>,
    first: Vec<usize>,
    /// Whether each function (by index) can call itself, directly or through others.
    recursive: Vec<bool>,
}

impl CallGraph {
    /// The call graph of every function of `module`.
    pub fn new(module: &Module) -> CallGraph {
        CallGraph::of(module, |_| true)
    }

    /// The call graph of the functions `include` accepts: calls from the others are
    /// left out (calls to them are kept).
    pub fn of(module: &Module, include: impl Fn(FuncId) -> bool) -> CallGraph {
        let n = module.funcs.len();
        let mut sites = Vec::new();
        let mut first = Vec::with_capacity(n + 1);
        for (id, f) in module.funcs.iter() {
            first.push(sites.len());
            if !include(id) {
                continue;
            }
            for (b, data) in f.blocks.iter() {
                for &i in &data.insts {
                    if let Op::Call(g) = f.insts[i].op {
                        sites.push(CallSite { caller: id, callee: g, block: b, inst: i });
                    }
                }
            }
        }
        first.push(sites.len());
        let mut graph: DiGraph<(), ()> = DiGraph::with_capacity(n, sites.len());
        for _ in 0..n {
            graph.add_node(());
        }
        let mut recursive = vec![false; n];
        for s in &sites {
            if s.callee.index() < n {
                graph.add_edge(NodeIndex::new(s.caller.index()), NodeIndex::new(s.callee.index()), ());
                if s.caller == s.callee {
                    recursive[s.caller.index()] = true;
                }
            }
        }
        for component in petgraph::algo::tarjan_scc(&graph) {
            if component.len() > 1 {
                for node in component {
                    recursive[node.index()] = true;
                }
            }
        }
        CallGraph { sites, first, recursive }
    }

    /// The calls `f` makes, in block and instruction order.
    pub fn calls_from(&self, f: FuncId) -> &[CallSite] {
        match (self.first.get(f.index()), self.first.get(f.index() + 1)) {
            (Some(&a), Some(&b)) => &self.sites[a..b],
            _ => &[],
        }
    }

    /// Every call site.
    pub fn sites(&self) -> &[CallSite] {
        &self.sites
    }

    /// Whether `f` can call itself, directly or through other functions.
    pub fn is_recursive(&self, f: FuncId) -> bool {
        self.recursive.get(f.index()).copied().unwrap_or(false)
    }

    /// The functions (by index) that `roots` call, directly or not, with the roots.
    pub fn reachable_from(&self, roots: &[FuncId]) -> Vec<bool> {
        let n = self.first.len().saturating_sub(1);
        let mut seen = vec![false; n];
        let mut todo: Vec<FuncId> = roots.to_vec();
        while let Some(f) = todo.pop() {
            if f.index() >= n || std::mem::replace(&mut seen[f.index()], true) {
                continue;
            }
            todo.extend(self.calls_from(f).iter().map(|s| s.callee));
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::CallGraph;
    use crate::entity::EntityRef;
    use crate::FuncId;

    fn module(text: &str) -> crate::Module {
        match crate::parse::parse_module(text) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn cycles_are_found_through_any_number_of_calls() {
        let m = module(
            "fn @a(%x_0: i64) -> i64 {\nbb0:\n    %1: i64 = call @b(%x_0)\n    ret %1\n}\n\
             fn @b(%x_0: i64) -> i64 {\nbb0:\n    %1: i64 = call @c(%x_0)\n    ret %1\n}\n\
             fn @c(%x_0: i64) -> i64 {\nbb0:\n    %1: i64 = call @a(%x_0)\n    %2: i64 = call @d(%1)\n    ret %2\n}\n\
             fn @d(%x_0: i64) -> i64 {\nbb0:\n    %1: i64 = call @d(%x_0)\n    ret %1\n}\n\
             fn @e(%x_0: i64) -> i64 {\nbb0:\n    %1: i64 = call @a(%x_0)\n    ret %1\n}\n",
        );
        let g = CallGraph::new(&m);
        let recursive: Vec<bool> = (0..5).map(|k| g.is_recursive(FuncId::new(k))).collect();
        assert_eq!(recursive, [true, true, true, true, false]);
        assert_eq!(g.calls_from(FuncId::new(2)).len(), 2);
        assert_eq!(g.sites().len(), 6);
        assert_eq!(g.reachable_from(&[FuncId::new(3)]), [false, false, false, true, false]);
        assert_eq!(g.reachable_from(&[FuncId::new(4)]), [true; 5]);
        let only_e = CallGraph::of(&m, |f| f.index() == 4);
        assert_eq!(only_e.sites().len(), 1);
        assert!(!only_e.is_recursive(FuncId::new(0)));
    }
}
