//! Reverse loops that do nothing, and the tape they would have read.
//!
//! A primal loop that carries no derivative (a search for the index of the largest
//! element, say) still gets a reverse loop: it replays the loop's path backwards, popping
//! the branch taken in each iteration, and computes nothing with it. Such a loop is
//! bypassed, and the forward pass then stops recording what only it read.

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, BlockCall, Function, IBinOp, Op, StructId, Terminator, Value};
use std::collections::HashSet;

/// `rev` with every loop bypassed whose only work is reading: arithmetic, comparisons,
/// loads, and pops and peeks of stacks that only such loops read, defining nothing used
/// after it. Derived reverse loops always terminate (each replays iterations the forward
/// pass ran), so skipping one loses nothing but time.
pub(crate) fn bypass_inert_loops(mut rev: Function) -> Function {
    let cfg = ControlFlow::compute(&rev);
    let headers: Vec<Block> = cfg.rpo.iter().copied().filter(|&h| cfg.latches(h).next().is_some()).collect();
    let mut inert: Vec<InertLoop> = headers.into_iter().filter_map(|h| inert_loop(&rev, &cfg, h)).collect();
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
        rev.blocks[l.pre].term = Terminator::Jump(l.exit);
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
    drop_unread_stacks(rev.into_simplified_cfg())
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
    pre: Block,
    exit: BlockCall,
    body: HashSet<Block>,
    /// The stacks it pops or peeks.
    stacks: HashSet<Value>,
    /// Header parameters every iteration passes on unchanged, with the value they hold.
    invariant: Vec<(Value, Value)>,
}

/// The loop headed by `h`, if it only reads and defines nothing used after it (whether
/// its stacks are read elsewhere is left to the caller).
fn inert_loop(f: &Function, cfg: &ControlFlow, h: Block) -> Option<InertLoop> {
    let body = cfg.loop_blocks(h);
    let outside: Vec<Block> = cfg
        .preds
        .get(h.index())?
        .iter()
        .copied()
        .filter(|p| !body.contains(p) && cfg.is_reachable(*p))
        .collect();
    let [pre] = outside.as_slice() else { return None };
    if !matches!(&f.blocks[*pre].term, Terminator::Jump(c) if c.block == h) {
        return None;
    }
    // A header parameter that every edge from inside passes on unchanged holds what the
    // preheader passed: it may be read after the loop, as that value.
    let Terminator::Jump(entry) = &f.blocks[*pre].term else { return None };
    let params = &f.blocks[h].params;
    let invariant: Vec<(Value, Value)> = params
        .iter()
        .enumerate()
        .filter(|&(k, &p)| {
            body.iter()
                .all(|&b| f.blocks[b].term.successors().all(|c| c.block != h || c.args.get(k) == Some(&p)))
        })
        .filter_map(|(k, &p)| Some((p, *entry.args.get(k)?)))
        .collect();
    let mut defined: HashSet<Value> = HashSet::new();
    let mut stacks: HashSet<Value> = HashSet::new();
    for &b in &body {
        // Entered only through its header (so what its exit carries from outside
        // dominates the header, and the preheader).
        if !cfg.dominates(h, b) {
            return None;
        }
        defined.extend(f.blocks[b].params.iter().copied().filter(|p| !invariant.iter().any(|(q, _)| q == p)));
        for &i in &f.blocks[b].insts {
            let d = &f.insts[i];
            let reads_only = match &d.op {
                Op::ArrayDim(_) | Op::TupleGet(_) | Op::StructGet(..) | Op::Load | Op::TrustedLoad => true,
                op if op.is_scalar_arith() => true,
                // The counters of a reverse loop step between bounds the forward pass
                // reached; their arithmetic cannot overflow.
                Op::IBinary(IBinOp::Add | IBinOp::Sub | IBinOp::Mul) => true,
                Op::StackPop | Op::StackPeek => {
                    stacks.insert(d.args[0]);
                    true
                }
                _ => false,
            };
            if !reads_only {
                return None;
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
    // The exit's arguments are defined outside the loop (checked above) and used in a
    // block of it, which the header dominates, so they dominate the header and hence
    // its only way in, the preheader: the preheader can jump to the exit with them.
    let mut exit = exit?;
    for a in exit.args.iter_mut() {
        if let Some(&(_, v)) = invariant.iter().find(|(p, _)| p == a) {
            *a = v;
        }
    }
    Some(InertLoop { pre: *pre, exit, body, stacks, invariant })
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
