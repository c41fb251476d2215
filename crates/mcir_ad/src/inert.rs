//! Reverse loops that do nothing, and the tape they would have read.
//!
//! A primal loop that carries no derivative (a search for the index of the largest
//! element, say) still gets a reverse loop: it replays the loop's path backwards, popping
//! the branch taken in each iteration, and computes nothing with it. Such a loop is
//! bypassed, and the forward pass then stops recording what only it read.

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, BlockCall, Function, IBinOp, Inst, Op, StructId, Value, ValueDef};
use std::collections::{HashMap, HashSet};

/// `rev` with every loop bypassed whose only work is reading: arithmetic, comparisons,
/// loads, and pops and peeks of stacks that only such loops read, defining nothing used
/// after it. Derived reverse loops always terminate (each replays iterations the forward
/// pass ran), so skipping one loses nothing but time.
pub(crate) fn bypass_inert_loops(mut rev: Function) -> Function {
    let cfg = ControlFlow::compute(&rev);
    let block_of: HashMap<Inst, Block> =
        rev.blocks.iter().flat_map(|(b, d)| d.insts.iter().map(move |&i| (i, b))).collect();
    // The loops made of blocks that only read: the cycles among those blocks. A loop
    // entered at several blocks (the reverse of a loop left by a `break`) is one too,
    // though no block of it dominates the others.
    let reading: Vec<Block> = rev
        .blocks
        .iter()
        .filter(|(b, d)| cfg.is_reachable(*b) && reads_only(&rev, d))
        .map(|(b, _)| b)
        .collect();
    // Node `k` of the graph is block `reading[k]`.
    let mut graph: petgraph::Graph<(), ()> = petgraph::Graph::new();
    let node: HashMap<Block, petgraph::graph::NodeIndex> =
        reading.iter().map(|&b| (b, graph.add_node(()))).collect();
    for &b in &reading {
        for c in rev.blocks[b].term.successors() {
            if let Some(&to) = node.get(&c.block) {
                graph.add_edge(node[&b], to, ());
            }
        }
    }
    // Each natural loop of reading blocks (an inner loop of one that writes), then each
    // cycle of them that is not one (a loop entered at several blocks, or one with an
    // inner loop).
    let mut bodies: Vec<HashSet<Block>> = cfg
        .rpo
        .iter()
        .filter(|&&h| cfg.latches(h).next().is_some())
        .map(|&h| cfg.loop_blocks(h))
        .filter(|body| body.iter().all(|b| node.contains_key(b)))
        .collect();
    for c in petgraph::algo::tarjan_scc(&graph) {
        if c.len() > 1 || graph.contains_edge(c[0], c[0]) {
            let body: HashSet<Block> = c.into_iter().map(|k| reading[k.index()]).collect();
            if !bodies.contains(&body) {
                bodies.push(body);
            }
        }
    }
    let mut inert: Vec<InertLoop> =
        bodies.into_iter().filter_map(|body| inert_loop(&rev, &cfg, &block_of, body)).collect();
    // A stack popped by an inert loop and read anywhere else (the path stack is shared by
    // every branch of the function) keeps the loops that pop it: drop them until none is.
    loop {
        let inside: HashSet<Block> = inert.iter().flat_map(|l| l.body.iter().copied()).collect();
        let mut read_elsewhere: HashSet<Value> = HashSet::new();
        for (b, data) in rev.blocks.iter() {
            if inside.contains(&b) || !cfg.is_reachable(b) {
                continue;
            }
            for &i in &data.insts {
                read_elsewhere.extend(rev.insts[i].args.iter().copied());
            }
            read_elsewhere.extend(data.term.uses());
        }
        let before = inert.len();
        inert.retain(|l| l.stacks.iter().all(|s| !read_elsewhere.contains(s)));
        if inert.len() == before {
            break;
        }
    }
    if inert.is_empty() {
        return rev;
    }
    let mut subst: std::collections::HashMap<Value, Value> = std::collections::HashMap::new();
    for l in inert {
        for (from, slot) in l.entries {
            if let Some(c) = rev.blocks[from].term.successors_mut().nth(slot) {
                *c = l.exit.clone();
            }
        }
        subst.extend(l.invariant);
    }
    if !subst.is_empty() {
        // Through nested loops bypassed together: an inner loop's parameter may hold
        // an outer one's.
        rev.map_uses(|mut v| {
            while let Some(&w) = subst.get(&v) {
                v = w;
            }
            v
        });
    }
    drop_unread_stacks(rev).into_simplified_cfg()
}

/// `rev` without the pops and peeks of stacks whose every pop and peek reads a value
/// nothing uses (the trip count of a loop that was bypassed): nothing reads those
/// stacks any more, so the forward pass need not fill them.
fn drop_unread_stacks(mut rev: Function) -> Function {
    let mut used: HashSet<Value> = HashSet::new();
    let mut read_by_other: HashSet<Value> = HashSet::new();
    let mut popped: HashSet<Value> = HashSet::new();
    for (_, data) in rev.blocks.iter() {
        for &i in &data.insts {
            let d = &rev.insts[i];
            used.extend(d.args.iter().copied());
            match d.op {
                Op::StackPop | Op::StackPeek => {
                    popped.insert(d.args[0]);
                }
                _ => read_by_other.extend(d.args.iter().copied()),
            }
        }
        used.extend(data.term.uses());
        read_by_other.extend(data.term.uses());
    }
    let mut unread: HashSet<Value> = popped.difference(&read_by_other).copied().collect();
    if unread.is_empty() {
        return rev;
    }
    for (_, data) in rev.blocks.iter() {
        for &i in &data.insts {
            let d = &rev.insts[i];
            if matches!(d.op, Op::StackPop | Op::StackPeek) && d.result.is_some_and(|r| used.contains(&r)) {
                unread.remove(&d.args[0]);
            }
        }
    }
    if unread.is_empty() {
        return rev;
    }
    let blocks: Vec<Block> = rev.blocks.keys().collect();
    for b in blocks {
        let insts = std::mem::take(&mut rev.blocks[b].insts);
        rev.blocks[b].insts = insts
            .into_iter()
            .filter(|&i| {
                let d = &rev.insts[i];
                !(matches!(d.op, Op::StackPop | Op::StackPeek) && unread.contains(&d.args[0]))
            })
            .collect();
    }
    rev
}

/// A loop of the reverse pass that only reads.
struct InertLoop {
    /// The edges into it from outside: the block each leaves and which of its
    /// terminator's targets it is.
    entries: Vec<(Block, usize)>,
    exit: BlockCall,
    body: HashSet<Block>,
    /// The stacks it pops or peeks.
    stacks: HashSet<Value>,
    /// Header parameters every iteration passes on unchanged, with the value they hold.
    invariant: Vec<(Value, Value)>,
}

/// Whether block `d` of `f` only reads: arithmetic, comparisons, loads, pops and peeks.
fn reads_only(f: &Function, d: &mcir_ir::BlockData) -> bool {
    d.insts.iter().all(|&i| match &f.insts[i].op {
        Op::ArrayDim(_) | Op::TupleGet(_) | Op::StructGet(..) | Op::Load | Op::TrustedLoad => true,
        op if op.is_scalar_arith() => true,
        // The counters of a reverse loop step between bounds the forward pass reached;
        // their arithmetic cannot overflow.
        Op::IBinary(IBinOp::Add | IBinOp::Sub | IBinOp::Mul) => true,
        Op::StackPop | Op::StackPeek => true,
        _ => false,
    })
}

/// What a parameter of a loop's block holds, as far as the loop's edges tell.
#[derive(Clone, Copy, PartialEq)]
enum Held {
    /// Nothing yet (no edge seen passes it a value).
    Unknown,
    /// Always this value, defined outside the loop.
    Same(Value),
    /// Values that change.
    Varies,
}

/// The loop of blocks `body` (which only read), if it defines nothing used after it
/// and leaves to one place (whether its stacks are read elsewhere is left to the
/// caller). It may be entered at several blocks (a loop left by a `break` is, in
/// reverse).
fn inert_loop(
    f: &Function,
    cfg: &ControlFlow,
    block_of: &HashMap<Inst, Block>,
    body: HashSet<Block>,
) -> Option<InertLoop> {
    // Every edge into the loop: those from outside are its entries.
    let mut edges: Vec<(Block, usize)> = Vec::new();
    let mut entries: Vec<(Block, usize)> = Vec::new();
    let mut from: Vec<Block> =
        body.iter().flat_map(|b| cfg.preds.get(b.index()).into_iter().flatten().copied()).collect();
    from.sort_by_key(|b| b.index());
    from.dedup();
    for p in from {
        if !cfg.is_reachable(p) {
            continue;
        }
        for (slot, c) in f.blocks[p].term.successors().enumerate() {
            if body.contains(&c.block) {
                edges.push((p, slot));
                if !body.contains(&p) {
                    entries.push((p, slot));
                }
            }
        }
    }
    if entries.is_empty() {
        return None;
    }
    // A parameter that every edge passes one value defined outside, or the parameters
    // that hold it, holds that value: it may be read after the loop, as that value.
    let mut held: HashMap<Value, Held> =
        body.iter().flat_map(|&b| f.blocks[b].params.iter().map(|&p| (p, Held::Unknown))).collect();
    let made_inside = |v: Value| match f.values[v].def {
        ValueDef::Inst(i) => block_of.get(&i).is_some_and(|b| body.contains(b)),
        ValueDef::Param(b, _) => body.contains(&b),
    };
    loop {
        let mut changed = false;
        for &(p, slot) in &edges {
            let Some(c) = f.blocks[p].term.successors().nth(slot) else { continue };
            for (&a, &q) in c.args.iter().zip(&f.blocks[c.block].params) {
                let incoming = match held.get(&a) {
                    Some(Held::Unknown) => continue,
                    Some(&x) => x,
                    None if made_inside(a) => Held::Varies,
                    None => Held::Same(a),
                };
                let now = held[&q];
                let met = match (now, incoming) {
                    (Held::Unknown, x) => x,
                    (Held::Same(u), Held::Same(v)) if u == v => now,
                    _ => Held::Varies,
                };
                if met != now {
                    held.insert(q, met);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Where it is read after the loop, that value must be at hand: defined where every
    // entry to the loop passes.
    let at_every_entry = |v: Value| {
        let def = match f.values[v].def {
            ValueDef::Inst(i) => block_of.get(&i).copied(),
            ValueDef::Param(b, _) => Some(b),
        };
        def.is_some_and(|d| entries.iter().all(|&(p, _)| cfg.dominates(d, p)))
    };
    let invariant: Vec<(Value, Value)> = held
        .iter()
        .filter_map(|(&p, &x)| match x {
            Held::Same(v) if at_every_entry(v) => Some((p, v)),
            _ => None,
        })
        .collect();
    let mut defined: HashSet<Value> = HashSet::new();
    let mut stacks: HashSet<Value> = HashSet::new();
    for &b in &body {
        defined.extend(f.blocks[b].params.iter().copied().filter(|p| !invariant.iter().any(|(q, _)| q == p)));
        for &i in &f.blocks[b].insts {
            let d = &f.insts[i];
            if matches!(d.op, Op::StackPop | Op::StackPeek) {
                stacks.insert(d.args[0]);
            }
            defined.extend(d.result);
        }
    }
    // Nothing the loop defines is used after it, and it leaves by one jump.
    let mut exit: Option<BlockCall> = None;
    for (b, data) in f.blocks.iter() {
        let inside = body.contains(&b);
        if !inside {
            if !cfg.is_reachable(b) {
                continue;
            }
            for &i in &data.insts {
                if f.insts[i].args.iter().any(|a| defined.contains(a)) {
                    return None;
                }
            }
            if data.term.uses().iter().any(|a| defined.contains(a)) {
                return None;
            }
            continue;
        }
        for call in data.term.successors() {
            if body.contains(&call.block) {
                continue;
            }
            if call.args.iter().any(|a| defined.contains(a)) {
                return None;
            }
            match &exit {
                None => exit = Some(call.clone()),
                Some(e) if e.block == call.block && e.args == call.args => {}
                Some(_) => return None,
            }
        }
    }
    // Each entry jumps to the exit instead: what the exit carries must be at hand there.
    let mut exit = exit?;
    for a in exit.args.iter_mut() {
        if let Some(&(_, v)) = invariant.iter().find(|(p, _)| p == a) {
            *a = v;
        }
        if !at_every_entry(*a) {
            return None;
        }
    }
    Some(InertLoop { entries, exit, body, stacks, invariant })
}

/// The fields of tape struct `tape` that `rev` reads.
pub(crate) fn tape_fields_read(rev: &Function, tape: StructId) -> HashSet<u32> {
    let mut read = HashSet::new();
    for (_, data) in rev.blocks.iter() {
        for &i in &data.insts {
            if let Op::StructGet(s, k) = &rev.insts[i].op {
                if *s == tape {
                    read.insert(*k);
                }
            }
        }
    }
    read
}

/// `fwd` without the records it would push onto `stacks`, which nothing reads.
pub(crate) fn drop_records(mut fwd: Function, stacks: &HashSet<Value>) -> Function {
    if stacks.is_empty() {
        return fwd;
    }
    let blocks: Vec<Block> = fwd.blocks.keys().collect();
    for b in blocks {
        let insts = fwd.blocks[b].insts.clone();
        let kept: Vec<_> = insts
            .into_iter()
            .filter(|&i| {
                let d = &fwd.insts[i];
                !(matches!(d.op, Op::StackPush | Op::StackPut | Op::StackReserve)
                    && stacks.contains(&d.args[0]))
            })
            .collect();
        fwd.blocks[b].insts = kept;
    }
    fwd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one function of `ir` through `bypass_inert_loops`, verified.
    fn run(ir: &str) -> Function {
        let mut m = mcir_ir::parse_module(ir).expect("parses");
        let id = m.funcs.keys().next().expect("a function");
        m.funcs[id] = bypass_inert_loops(m.funcs[id].clone());
        mcir_ir::verify_module(&m).expect("verifies");
        m.funcs[id].clone()
    }

    fn has_loop(f: &Function) -> bool {
        let cfg = ControlFlow::compute(f);
        cfg.rpo.iter().any(|&h| cfg.latches(h).next().is_some())
    }

    #[test]
    fn a_count_down_entered_at_two_blocks_is_bypassed() {
        // The reverse of a loop left by a break: entered at its test or at its step,
        // carrying `a` unchanged to its exit.
        let f = run("fn @r(%n_0: i64, %c_1: bool, %x_2: f64) -> f64 {
bb0:
    br %c_1, bb1(%x_2, %n_0), bb2(%x_2, %n_0)
bb1(%a_3: f64, %k_4: i64):
    %z_5: i64 = iconst 0
    %t_6: bool = icmp le %k_4, %z_5
    br %t_6, bb3(%a_3), bb2(%a_3, %k_4)
bb2(%b_7: f64, %j_8: i64):
    %o_9: i64 = iconst 1
    %m_10: i64 = isub %j_8, %o_9
    jump bb1(%b_7, %m_10)
bb3(%r_11: f64):
    ret %r_11
}
");
        assert!(!has_loop(&f));
        // Both ways in now go straight to the exit, with `x`.
        let x = f.param_values()[2];
        let reaches_exit_with_x = |c: &BlockCall| {
            c.args == [x] && matches!(f.blocks[c.block].term, mcir_ir::Terminator::Return(Some(_)))
        };
        match &f.blocks[f.entry()].term {
            mcir_ir::Terminator::Branch { then_dest, else_dest, .. } => {
                assert!(reaches_exit_with_x(then_dest) && reaches_exit_with_x(else_dest))
            }
            t => panic!("the entry ends in {t:?}"),
        }
    }

    #[test]
    fn a_loop_whose_value_is_read_after_it_stays() {
        // `a` changes in each iteration and is read after the loop.
        let f = run("fn @r(%n_0: i64, %x_2: f64) -> f64 {
bb0:
    jump bb1(%x_2, %n_0)
bb1(%a_3: f64, %k_4: i64):
    %z_5: i64 = iconst 0
    %t_6: bool = icmp le %k_4, %z_5
    br %t_6, bb3(%a_3), bb2
bb2:
    %o_9: i64 = iconst 1
    %m_10: i64 = isub %k_4, %o_9
    %h_12: f64 = fconst 0.5
    %b_13: f64 = fmul %a_3, %h_12
    jump bb1(%b_13, %m_10)
bb3(%r_11: f64):
    ret %r_11
}
");
        assert!(has_loop(&f));
    }
}
