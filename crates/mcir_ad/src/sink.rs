//! A reverse pass reads each field of its record where the paths that use it begin,
//! not on entry.
//!
//! The reverse pass reads its record at the start (`struct.get` of the tape, where it
//! popped stacks before they became fields), so every path reads every field: the leaf
//! of a recursion reads the fields its inner nodes filled, and native code loads the
//! header of each of the record's stacks (their data and length, which it keeps in
//! registers) even on a path that pops none of them. Each read moves to the nearest
//! block that dominates all its uses and is in no loop, so a path that does not use a
//! field does not read it: a determinant's leaves no longer touch the five stacks of
//! its expansion loop.

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, Function, Inst, Op, Value};
use std::collections::HashMap;

/// `rev` with the reads of its record (parameter 0) in its entry block moved down to
/// where they are used, as the module docs say.
pub(crate) fn sink_record_reads(mut rev: Function) -> Function {
    let entry = rev.entry();
    let Some(&tape) = rev.param_values().first() else { return rev };
    let reads: Vec<Inst> = rev.blocks[entry]
        .insts
        .iter()
        .copied()
        .filter(|&i| {
            matches!(rev.insts[i].op, Op::StructGet(..) | Op::TupleGet(_)) && rev.insts[i].args == [tape]
        })
        .collect();
    if reads.is_empty() || rev.blocks.len() < 2 {
        return rev;
    }
    let cfg = ControlFlow::compute(&rev);
    let depth = cfg.loop_depths();
    // The blocks that use each value (a branch's arguments are used where it leaves).
    let mut users: HashMap<Value, Vec<Block>> = HashMap::new();
    for (b, data) in rev.blocks.iter() {
        for &i in &data.insts {
            for &a in &rev.insts[i].args {
                users.entry(a).or_default().push(b);
            }
        }
        for a in data.term.uses() {
            users.entry(a).or_default().push(b);
        }
    }
    let common = |a: Block, b: Block| common_dominator(&cfg, entry, a, b);
    let mut moves: Vec<(Inst, Block)> = Vec::new();
    for i in reads {
        let Some(r) = rev.insts[i].result else { continue };
        let Some(blocks) = users.get(&r) else { continue };
        if blocks.iter().any(|&b| b == entry || !cfg.is_reachable(b)) {
            continue;
        }
        let mut at = blocks[0];
        for &b in &blocks[1..] {
            at = common(at, b);
        }
        // Out of every loop: a read runs once per call.
        while at != entry && depth.get(at.index()).copied().unwrap_or(0) > 0 {
            at = cfg.idom(at).unwrap_or(entry);
        }
        if at != entry {
            moves.push((i, at));
        }
    }
    if moves.is_empty() {
        return rev;
    }
    let moved: std::collections::HashSet<Inst> = moves.iter().map(|m| m.0).collect();
    rev.blocks[entry].insts.retain(|i| !moved.contains(i));
    // Reads keep their order within the block they move to, ahead of its instructions.
    let mut into: HashMap<Block, Vec<Inst>> = HashMap::new();
    for (i, b) in moves {
        into.entry(b).or_default().push(i);
    }
    for (b, insts) in into {
        let rest = std::mem::take(&mut rev.blocks[b].insts);
        rev.blocks[b].insts = insts.into_iter().chain(rest).collect();
    }
    rev
}

/// `fwd` with each tape stack made where the paths that push it begin rather than on
/// entry: at the nearest block in no loop that dominates every use but the records
/// (`record.rs` builds one at each `ret`). A record on a path that cannot pass that
/// block holds `unset` for the stack, and its reverse pass pops nothing from it; a stack
/// that a record may or may not have been made for, depending on the path, stays on
/// entry. A recursion's leaves so make none of the stacks of its inner nodes' loops.
pub(crate) fn sink_stack_creation(mut fwd: Function, tape_sid: mcir_ir::StructId) -> Function {
    let entry = fwd.entry();
    let stacks: Vec<Inst> =
        fwd.blocks[entry].insts.iter().copied().filter(|&i| fwd.insts[i].op == Op::StackNew).collect();
    if stacks.is_empty() || fwd.blocks.len() < 2 {
        return fwd;
    }
    let block_of: HashMap<Inst, Block> =
        fwd.blocks.iter().flat_map(|(b, d)| d.insts.iter().map(move |&i| (i, b))).collect();
    let records: Vec<(Inst, Block)> = block_of
        .iter()
        .filter(|(i, _)| fwd.insts[**i].op == Op::StructNew(tape_sid))
        .map(|(&i, &b)| (i, b))
        .collect();
    // Records built at each `ret` (a record built on entry holds every stack on every path).
    if records.is_empty()
        || records.iter().any(|&(_, b)| !matches!(fwd.blocks[b].term, mcir_ir::Terminator::Return(_)))
    {
        return fwd;
    }
    let cfg = ControlFlow::compute(&fwd);
    let depth = cfg.loop_depths();
    let common = |a: Block, b: Block| common_dominator(&cfg, entry, a, b);
    let reaches = |from: Block, to: Block| {
        let mut seen = std::collections::HashSet::new();
        let mut work = vec![from];
        while let Some(b) = work.pop() {
            if b == to {
                return true;
            }
            if seen.insert(b) {
                work.extend(fwd.blocks[b].term.successors().map(|c| c.block));
            }
        }
        false
    };
    let mut moves: Vec<(Inst, Block, Vec<Inst>)> = Vec::new();
    for s in stacks {
        let Some(v) = fwd.insts[s].result else { continue };
        let mut at: Option<Block> = None;
        let mut used_on_entry = fwd.blocks.values().any(|d| d.term.uses().contains(&v));
        for (&i, &b) in &block_of {
            if i == s || fwd.insts[i].op == Op::StructNew(tape_sid) || !fwd.insts[i].args.contains(&v) {
                continue;
            }
            used_on_entry |= b == entry;
            at = Some(at.map_or(b, |a| common(a, b)));
        }
        let Some(mut at) = at.filter(|_| !used_on_entry) else { continue };
        while at != entry && depth.get(at.index()).copied().unwrap_or(0) > 0 {
            at = cfg.idom(at).unwrap_or(entry);
        }
        if at == entry {
            continue;
        }
        // Every record either follows the stack's block or cannot be reached from it.
        let mut unset_in = Vec::new();
        let mut ok = true;
        for &(r, b) in &records {
            if !fwd.insts[r].args.contains(&v) || cfg.dominates(at, b) {
                continue;
            }
            if reaches(at, b) {
                ok = false;
                break;
            }
            unset_in.push(r);
        }
        if ok {
            moves.push((s, at, unset_in));
        }
    }
    for (s, at, unset_in) in moves {
        let Some(v) = fwd.insts[s].result else { continue };
        fwd.blocks[entry].insts.retain(|&i| i != s);
        fwd.blocks[at].insts.insert(0, s);
        if unset_in.is_empty() {
            continue;
        }
        let ty = fwd.value_type(v);
        let span = fwd.span;
        let u = crate::insert_at(&mut fwd, entry, 0, Op::Unset, vec![], ty, span);
        for r in unset_in {
            for a in fwd.insts[r].args.iter_mut() {
                if *a == v {
                    *a = u;
                }
            }
        }
    }
    fwd
}

/// The nearest block that dominates both `a` and `b` (`entry` when only it does).
fn common_dominator(cfg: &ControlFlow, entry: Block, a: Block, b: Block) -> Block {
    let mut d = a;
    while !cfg.dominates(d, b) {
        match cfg.idom(d) {
            Some(up) if up != d => d = up,
            _ => return entry,
        }
    }
    d
}
