//! Fixed tape records: a tape stack that one call of a forward pass pushes at most once
//! becomes a plain field of the call's tape record.
//!
//! The reverse pass reads what the forward pass kept from stacks, one per value (see
//! `reverse.rs`), because a value computed in a loop is kept once per iteration. A value
//! computed outside every loop is kept at most once per call, and a stack for it costs
//! an allocation and a length test per call for one value. Such a stack becomes a field:
//! the forward pass builds its record at each `ret` with the value the path taken
//! computed (an `unset` placeholder where that path computed none), and the reverse pass
//! reads the field where it popped the stack. It follows the path the forward pass took,
//! so it reads exactly the fields that path filled.
//!
//! A stack qualifies when it is pushed only outside loops, by pushes no one of which can
//! run after another in the same call (no push's block reaches another's), and is used
//! by nothing else than its pushes and the record in the forward pass, and its pops and
//! peeks in the reverse pass. So a function without loops keeps one record per call and
//! allocates nothing else for its tape; recursion keeps one record per activation, which
//! holds the records of the calls it made (a record that holds records of its own kind:
//! forward mode gives it a tangent struct of its own, `mcir_ad::tangent::holds_itself`).

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, Function, Inst, Op, StructId, Terminator, Type, TypeId, TypeTable, Value};
use std::collections::{HashMap, HashSet};

/// The most pushes of one stack whose order is checked (pairs of blocks are compared).
const MAX_PUSH_SITES: usize = 16;

/// `(fwd, rev)` with every tape stack that qualifies (see the module docs) turned into a
/// plain field of the record `tape_sid`, whose field types change accordingly.
pub(crate) fn fix_record_fields(
    types: &mut TypeTable,
    tape_sid: StructId,
    mut fwd: Function,
    mut rev: Function,
) -> (Function, Function) {
    let Some(plan) = Plan::of(types, tape_sid, &fwd, &rev) else { return (fwd, rev) };
    if plan.fields.is_empty() {
        return (fwd, rev);
    }
    thread_fields(&mut fwd, tape_sid, &plan);
    read_fields(&mut rev, &plan);
    for (&k, field) in &plan.fields {
        types.struct_def_mut(tape_sid).fields[k].1 = field.ty;
    }
    share_exclusive_fields(types, tape_sid, &mut fwd, &mut rev);
    (crate::dce::remove_dead_code(fwd), crate::dce::remove_dead_code(rev))
}

/// Lets fields of one type that no path fills both share one slot of the record (the
/// cosine a leaf of a recursion keeps and the partial result an inner node keeps): each
/// record the forward pass builds at a `ret` fills a field of a pair or neither, and the
/// reverse pass, following the path taken, reads only what that path filled.
fn share_exclusive_fields(types: &mut TypeTable, tape_sid: StructId, fwd: &mut Function, rev: &mut Function) {
    let records: Vec<Inst> = fwd
        .blocks
        .values()
        .flat_map(|b| b.insts.iter().copied())
        .filter(|&i| fwd.insts[i].op == Op::StructNew(tape_sid))
        .collect();
    if records.len() < 2 {
        return;
    }
    let fields = types.struct_def(tape_sid).fields.clone();
    let is_unset = |f: &Function, v: Value| f.defining(v).is_some_and(|d| d.op == Op::Unset);
    // Which records fill each field.
    let filled: Vec<Vec<bool>> = (0..fields.len())
        .map(|k| records.iter().map(|&r| !is_unset(fwd, fwd.insts[r].args[k])).collect())
        .collect();
    // Greedily, each field joins the first slot of its type that no record it fills fills.
    let mut slots: Vec<(TypeId, Vec<bool>, Vec<usize>)> = Vec::new();
    let mut slot_of = vec![0; fields.len()];
    for (k, (_, ty)) in fields.iter().enumerate() {
        let free = slots
            .iter()
            .position(|(t, used, _)| t == ty && used.iter().zip(&filled[k]).all(|(&a, &b)| !(a && b)));
        match free {
            Some(s) => {
                for (u, &f) in slots[s].1.iter_mut().zip(&filled[k]) {
                    *u |= f;
                }
                slots[s].2.push(k);
                slot_of[k] = s;
            }
            None => {
                slot_of[k] = slots.len();
                slots.push((*ty, filled[k].clone(), vec![k]));
            }
        }
    }
    if slots.len() == fields.len() {
        return;
    }
    for &r in &records {
        let args = fwd.insts[r].args.clone();
        fwd.insts[r].args = slots
            .iter()
            .map(|(_, _, members)| {
                let values = members.iter().map(|&k| args[k]);
                values.clone().find(|&v| !is_unset(fwd, v)).unwrap_or(args[members[0]])
            })
            .collect();
    }
    let live: Vec<Inst> = rev.blocks.values().flat_map(|b| b.insts.iter().copied()).collect();
    for i in live {
        if let Op::StructGet(s, k) = &mut rev.insts[i].op {
            if *s == tape_sid {
                if let Some(&slot) = slot_of.get(*k as usize) {
                    *k = slot as u32;
                }
            }
        }
    }
    types.struct_def_mut(tape_sid).fields = slots
        .iter()
        .map(|(ty, _, members)| {
            let names: Vec<&str> = members.iter().map(|&k| fields[k].0.as_str()).collect();
            (names.join("_or_"), *ty)
        })
        .collect();
}

/// One stack that becomes a field.
struct Field {
    /// The element type, which the field takes.
    ty: TypeId,
    /// The stack in the forward pass.
    stack: Value,
    /// Its pushes: the block and the value pushed.
    pushes: Vec<(Block, Inst, Value)>,
    /// The field read in the reverse pass, if it reads it.
    read: Vec<Value>,
}

struct Plan {
    /// The forward pass's record (`struct.new` of the tape) and the `ret` tuples that
    /// hold it.
    record: Inst,
    tuples: Vec<(Block, Inst)>,
    /// The fields that become plain, by field index.
    fields: std::collections::BTreeMap<usize, Field>,
}

impl Plan {
    fn of(types: &TypeTable, tape_sid: StructId, fwd: &Function, rev: &Function) -> Option<Plan> {
        // One record, used by nothing but the tuples that `ret` gives back.
        let mut records = fwd.insts.iter().filter(|(_, d)| d.op == Op::StructNew(tape_sid));
        let (record, rd) = records.next()?;
        if records.next().is_some() {
            return None;
        }
        let tape = rd.result?;
        let mut tuples = Vec::new();
        let mut uses: HashMap<Value, usize> = HashMap::new();
        for (b, data) in fwd.blocks.iter() {
            for &i in &data.insts {
                for &a in &fwd.insts[i].args {
                    *uses.entry(a).or_default() += 1;
                }
                if fwd.insts[i].args.contains(&tape) {
                    let ret =
                        matches!(data.term, Terminator::Return(Some(t)) if Some(t) == fwd.insts[i].result);
                    if !(ret && fwd.insts[i].op == Op::TupleNew && fwd.insts[i].args.last() == Some(&tape)) {
                        return None;
                    }
                    tuples.push((b, i));
                }
            }
            for v in data.term.uses() {
                *uses.entry(v).or_default() += 1;
                if v == tape {
                    return None;
                }
            }
        }
        let cfg = ControlFlow::compute(fwd);
        let depth = cfg.loop_depths();
        let position: HashMap<Inst, (Block, usize)> = fwd
            .blocks
            .iter()
            .flat_map(|(b, data)| data.insts.iter().enumerate().map(move |(k, &i)| (i, (b, k))))
            .collect();
        // Candidate stacks: made by `stack.new`, in the record once.
        let mut fields = std::collections::BTreeMap::new();
        for (k, &s) in rd.args.iter().enumerate() {
            if !fwd.defining(s).is_some_and(|d| d.op == Op::StackNew)
                || rd.args.iter().filter(|&&a| a == s).count() != 1
            {
                continue;
            }
            let Some(&Type::Stack(ty)) = types.try_get(fwd.value_type(s)) else { continue };
            fields.insert(k, Field { ty, stack: s, pushes: Vec::new(), read: Vec::new() });
        }
        let by_stack: HashMap<Value, usize> = fields.iter().map(|(&k, f)| (f.stack, k)).collect();
        let mut out: HashSet<usize> = HashSet::new();
        for (i, d) in fwd.insts.iter() {
            if i == record {
                continue;
            }
            for (pos, a) in d.args.iter().enumerate() {
                let Some(&k) = by_stack.get(a) else { continue };
                if d.op != Op::StackPush || pos != 0 {
                    out.insert(k);
                    continue;
                }
                let Some(&(b, _)) = position.get(&i) else {
                    out.insert(k);
                    continue;
                };
                if let Some(f) = fields.get_mut(&k) {
                    f.pushes.push((b, i, d.args[1]));
                }
            }
        }
        for (_, data) in fwd.blocks.iter() {
            for v in data.term.uses() {
                if let Some(&k) = by_stack.get(&v) {
                    out.insert(k);
                }
            }
        }
        // Pushed outside loops, at most once per call, before the tuple of a `ret` in its
        // block.
        for (&k, f) in &fields {
            let once = f.pushes.len() <= MAX_PUSH_SITES
                && f.pushes.iter().all(|&(b, i, _)| {
                    depth.get(b.index()).copied().unwrap_or(1) == 0
                        && tuples.iter().filter(|t| t.0 == b).all(|&(_, t)| position[&i].1 < position[&t].1)
                })
                && pushes_exclusive(fwd, &f.pushes);
            if !once {
                out.insert(k);
            }
        }
        // The reverse pass reads the field and pops or peeks the stack, nothing else.
        let mut gets: HashMap<Value, usize> = HashMap::new();
        for (_, d) in rev.insts.iter() {
            if let (Op::StructGet(s, k), Some(r)) = (&d.op, d.result) {
                if *s == tape_sid && fields.contains_key(&(*k as usize)) {
                    gets.insert(r, *k as usize);
                    if let Some(f) = fields.get_mut(&(*k as usize)) {
                        f.read.push(r);
                    }
                }
            }
        }
        for (_, d) in rev.insts.iter() {
            for (pos, a) in d.args.iter().enumerate() {
                if let Some(&k) = gets.get(a) {
                    if !(matches!(d.op, Op::StackPop | Op::StackPeek) && pos == 0) {
                        out.insert(k);
                    }
                }
            }
        }
        for (_, data) in rev.blocks.iter() {
            for v in data.term.uses() {
                if let Some(&k) = gets.get(&v) {
                    out.insert(k);
                }
            }
        }
        fields.retain(|k, _| !out.contains(k));
        Some(Plan { record, tuples, fields })
    }
}

/// Whether no push of `pushes` can run after another in one call: no push's block
/// reaches the block of another (nor its own again).
fn pushes_exclusive(f: &Function, pushes: &[(Block, Inst, Value)]) -> bool {
    let blocks: HashSet<Block> = pushes.iter().map(|p| p.0).collect();
    if blocks.len() != pushes.len() {
        return false;
    }
    for &from in &blocks {
        let mut seen: HashSet<Block> = HashSet::new();
        let mut work: Vec<Block> = f.blocks[from].term.successors().map(|c| c.block).collect();
        while let Some(b) = work.pop() {
            if blocks.contains(&b) {
                return false;
            }
            if seen.insert(b) {
                work.extend(f.blocks[b].term.successors().map(|c| c.block));
            }
        }
    }
    true
}

/// A block parameter `thread_fields` adds: its block, its field, and the value each
/// predecessor passes.
type NewParam = (Block, usize, Vec<(Block, Value)>);

/// Makes each field's value flow through the forward pass as an SSA variable (`unset`
/// on entry, the pushed value after its push, block parameters where paths that hold
/// different values meet) and builds the record at each `ret` from the values there.
fn thread_fields(fwd: &mut Function, tape_sid: StructId, plan: &Plan) {
    let cfg = ControlFlow::compute(fwd);
    let entry = fwd.entry();
    let span = fwd.span;
    // Phase 1, one field at a time: the field's value at the end of each block, in
    // reverse post-order; a block whose processed predecessors disagree takes a
    // parameter. Predecessors along back edges are in loops, which push nothing, so they
    // carry what the loop's header has. The values are kept in one table, which each
    // field's sweep overwrites for every reachable block before reading it (a function
    // of many branches has as many fields as blocks, and a table of every pair grew with
    // their product); what phase 2 and the records need is copied out of it.
    let n = fwd.blocks.len();
    let mut rpo_index = vec![usize::MAX; n];
    for (k, &b) in cfg.rpo.iter().enumerate() {
        rpo_index[b.index()] = k;
    }
    let mut at_end: Vec<Option<Value>> = vec![None; n];
    let mut pushed: Vec<Option<Value>> = vec![None; n];
    // For each parameter added, in order: its block, its field, and the value each
    // predecessor passes.
    let mut params: Vec<NewParam> = Vec::new();
    let mut at_ret: HashMap<(usize, Block), Value> = HashMap::new();
    for (&k, field) in &plan.fields {
        let u = crate::insert_at(fwd, entry, 0, Op::Unset, vec![], field.ty, span);
        for &(b, _, v) in &field.pushes {
            pushed[b.index()] = Some(v);
        }
        let first_param = params.len();
        for &b in &cfg.rpo {
            let start = if b == entry {
                u
            } else {
                let here = rpo_index[b.index()];
                let mut incoming = cfg.preds[b.index()]
                    .iter()
                    .filter(|p| rpo_index[p.index()] < here)
                    .filter_map(|p| at_end[p.index()]);
                match incoming.next() {
                    Some(v) if incoming.all(|w| w == v) => v,
                    _ => {
                        params.push((b, k, Vec::new()));
                        fwd.add_block_param(b, field.ty, None)
                    }
                }
            };
            at_end[b.index()] = Some(pushed[b.index()].unwrap_or(start));
        }
        for (b, _, args) in &mut params[first_param..] {
            for p in cfg.preds[b.index()].iter().copied().collect::<HashSet<Block>>() {
                args.push((p, at_end[p.index()].unwrap_or(u)));
            }
        }
        for &(b, _) in &plan.tuples {
            at_ret.insert((k, b), at_end[b.index()].unwrap_or(u));
        }
        for &(b, _, _) in &field.pushes {
            pushed[b.index()] = None;
        }
    }
    // Phase 2: every jump into a block with new parameters passes each field's value at
    // the end of the jumping block, in the order the parameters were added.
    for (b, _, args) in &params {
        for &(p, v) in args {
            for c in fwd.blocks[p].term.successors_mut().filter(|c| c.block == *b) {
                c.args.push(v);
            }
        }
    }
    // The record of each `ret`, and no stacks or pushes for the fields.
    let old_args = fwd.insts[plan.record].args.clone();
    for &(b, tuple) in &plan.tuples {
        let args: Vec<Value> =
            old_args.iter().enumerate().map(|(k, &a)| at_ret.get(&(k, b)).copied().unwrap_or(a)).collect();
        let pos = fwd.blocks[b].insts.iter().position(|&i| i == tuple).unwrap_or(0);
        let ty = fwd.value_type(fwd.insts[plan.record].result.unwrap_or(old_args[0]));
        let rec = crate::insert_at(fwd, b, pos, Op::StructNew(tape_sid), args, ty, span);
        if let Some(last) = fwd.insts[tuple].args.last_mut() {
            *last = rec;
        }
    }
    let dropped: HashSet<Inst> =
        plan.fields.values().flat_map(|f| f.pushes.iter().map(|p| p.1)).chain([plan.record]).collect();
    let blocks: Vec<Block> = fwd.blocks.keys().collect();
    for b in blocks {
        fwd.blocks[b].insts.retain(|i| !dropped.contains(i));
    }
}

/// Reads each field where the reverse pass popped or peeked its stack.
fn read_fields(rev: &mut Function, plan: &Plan) {
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let reads: HashMap<Value, TypeId> =
        plan.fields.values().flat_map(|f| f.read.iter().map(move |&r| (r, f.ty))).collect();
    for (&r, &ty) in &reads {
        rev.values[r].ty = ty;
        // Named after the value it now is, not the stack it was.
        if let Some(name) = rev.values[r].name.as_mut() {
            if let Some(base) = name.strip_suffix("_stack") {
                *name = base.to_string();
            }
        }
    }
    let mut dropped: HashSet<Inst> = HashSet::new();
    for (i, d) in rev.insts.iter() {
        if let (Op::StackPop | Op::StackPeek, Some(r), Some(s)) = (&d.op, d.result, d.args.first()) {
            if reads.contains_key(s) {
                subst.insert(r, *s);
                dropped.insert(i);
            }
        }
    }
    let blocks: Vec<Block> = rev.blocks.keys().collect();
    for b in blocks {
        rev.blocks[b].insts.retain(|i| !dropped.contains(i));
    }
    rev.substitute(&subst);
}
