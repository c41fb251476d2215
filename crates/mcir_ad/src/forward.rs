//! The forward pass of a derived rule: the primal, plus a zeroed shadow for every fresh
//! allocation, shadows threaded beside every address-identified value, and a copy of
//! whatever a store is about to overwrite, so that the reverse pass can put it back.

use crate::analysis::Edge;
use crate::emit::Emit;
use crate::tangent::{fdata_leaves, field_leaf_ranges, has_tangent, leaves, tangent_type, LeafKind};
use crate::{AdError, RuleIds};
use mcir_ir::entity::EntityRef;
use mcir_ir::{
    Block, BlockCall, FUnOp, Function, Inst, Module, Op, Terminator, Type, TypeId, TypeTable, Value,
};
use std::collections::HashMap;

/// The forward pass under construction, and what the reverse pass needs to know about it.
pub(crate) struct Forward {
    pub e: Emit,
    /// The forward block of each primal block.
    pub block_map: Vec<Block>,
    /// The forward copy of each primal value.
    pub vmap: Vec<Option<Value>>,
    /// The shadows of each primal value's fdata leaves.
    pub shadows: Vec<Vec<Value>>,
    /// Values the forward pass keeps for the reverse rule of an instruction: what a store
    /// overwrote, a callee's tape.
    pub saved: HashMap<Inst, Vec<Value>>,
    /// Edge blocks that record which incoming edge of a join was taken: (block, index).
    pub edge_marks: Vec<(Block, usize, Block)>,
    /// Edge blocks leaving a counted loop, which record its counter: (block, loop, value).
    pub counter_marks: Vec<(Block, usize, Value)>,
    /// Primal return blocks, in block order.
    pub returns: Vec<Block>,
    /// Arrays whose overwrites keep nothing (see `unrestored_arrays`).
    pub unrestored: std::collections::HashSet<Value>,
}

/// The arrays a function makes (`fill`, `zeros`, `zeros_like`, literals, copies) whose
/// overwrites need not be undone by its reverse pass. Every use of such an array in the
/// function is a load or a write of an element, its extent, returning it, or passing it
/// to a call that reads it (see [`reading_call`]), and no write can follow a load whose
/// value the reverse pass may read, or such a call (no store is reachable from either
/// without making the array anew: one made in a loop is a new array on every
/// iteration). The reverse pass reads the array's elements only where it reloads what
/// a load read, for a load whose value some adjoint needs, and in the reverse passes of
/// the calls it was passed to; as nothing is written after any of those, the array
/// then holds what each of them saw, so the reverse of a write need not restore the old
/// element and the forward pass need not keep it. A load whose value only flows
/// through sums into stores, as in `y[r] += a`, is never reloaded (see
/// [`value_unread_by_reverse`]), so an accumulation into a fresh array keeps nothing.
/// Nothing before the allocation could read the array, and a caller that reads a
/// returned array reverses those reads before this reverse pass runs. The gmm's
/// `main_term`, filled in one loop and read a row at a time by `logsumexp_row` in the
/// next, keeps nothing.
///
/// An array parameter marked `restored_by_caller` is a candidate too: the caller keeps a
/// copy of it and puts it back after the reverse pass (see [`params_restorable_by_copy`]),
/// so the argument, like a fresh array, need not be restored write by write.
pub(crate) fn unrestored_arrays(
    types: &TypeTable,
    rules: &[RuleIds],
    primal: &Function,
    restored_by_caller: &[bool],
) -> std::collections::HashSet<Value> {
    let mut out: std::collections::HashSet<Value> = std::collections::HashSet::new();
    for (k, &p) in primal.param_values().iter().enumerate() {
        if restored_by_caller.get(k).copied().unwrap_or(false)
            && types.as_array(primal.value_type(p)).is_some()
        {
            out.insert(p);
        }
    }
    for (_, data) in primal.blocks.iter() {
        for &i in &data.insts {
            let d = &primal.insts[i];
            if let (Op::ArrayFill | Op::ZerosLike | Op::ArrayLit(_) | Op::ArrayCopy, Some(r)) =
                (&d.op, d.result)
            {
                out.insert(r);
            }
        }
    }
    for (_, data) in primal.blocks.iter() {
        for &i in &data.insts {
            let d = &primal.insts[i];
            let reads = reading_call(types, rules, primal, i);
            for (k, a) in d.args.iter().enumerate() {
                let element_access =
                    k == 0 && matches!(d.op, Op::Store | Op::TrustedStore | Op::Load | Op::TrustedLoad);
                if !element_access && !reads && !matches!(d.op, Op::ArrayDim(_) | Op::ExpectDim(_)) {
                    out.remove(a);
                }
            }
        }
        match &data.term {
            Terminator::Return(_) => {}
            t => {
                for a in t.uses() {
                    out.remove(&a);
                }
            }
        }
    }
    if out.is_empty() {
        return out;
    }
    // The loads (of any array) whose value no adjoint reads, found once.
    let users = users_of(primal);
    let unread: std::collections::HashSet<Value> = primal
        .insts
        .values()
        .filter(|d| matches!(d.op, Op::Load | Op::TrustedLoad))
        .filter_map(|d| d.result)
        .filter(|&r| value_unread_by_reverse(primal, &users, r, UNREAD_DEPTH))
        .collect();
    out.retain(|&array| !store_follows_load(types, rules, primal, &unread, array));
    out
}

/// The array parameters of `primal` whose overwrites its reverse pass need not undo one
/// by one when the caller copies them on entry and puts the copy back after the reverse
/// pass: those [`unrestored_arrays`] would treat as fresh arrays (only their elements
/// are read and written, and nothing the reverse pass reads is written after it was
/// read) and that `primal` writes. One copy then replaces every old value the forward
/// pass would keep: a velocity moved in place through a time loop keeps nothing per
/// step. That holds only while no other argument is the same memory (the reverse pass
/// reads the others as restored step by step): the caller tests that at run time against
/// the other arguments of the same type, and so an array qualifies only when no
/// parameter holds an array of its type inside it (in a record, a tuple, a cell), where
/// the caller could not compare it. (A function whose rule is hand-written or
/// checkpointed is not derived, and gets none: `derive_with`.)
pub(crate) fn params_restorable_by_copy(
    types: &TypeTable,
    rules: &[RuleIds],
    primal: &Function,
) -> Vec<bool> {
    let stored: std::collections::HashSet<Value> = primal
        .insts
        .values()
        .filter(|d| matches!(d.op, Op::Store | Op::TrustedStore))
        .map(|d| d.args[0])
        .collect();
    let candidates: Vec<bool> = primal
        .param_values()
        .iter()
        .zip(&primal.params)
        .map(|(p, &t)| {
            stored.contains(p)
                && types.as_array(t).is_some()
                && !primal.params.iter().any(|&u| u != t && holds_inside(types, u, t))
        })
        .collect();
    if !candidates.contains(&true) {
        return candidates;
    }
    let kept = unrestored_arrays(types, rules, primal, &candidates);
    primal.param_values().iter().map(|p| kept.contains(p)).collect()
}

/// Whether a value of type `outer` can hold a value of type `inner` (itself included).
/// (Program types are not recursive, so this ends.)
fn holds_inside(types: &TypeTable, outer: TypeId, inner: TypeId) -> bool {
    outer == inner
        || match types.get(outer) {
            mcir_ir::Type::Scalar(_) | mcir_ir::Type::Array { .. } | mcir_ir::Type::Stack(_) => false,
            mcir_ir::Type::Ref(t) => holds_inside(types, *t, inner),
            mcir_ir::Type::Tuple(items) => items.iter().any(|&t| holds_inside(types, t, inner)),
            mcir_ir::Type::Struct(s) => {
                types.struct_def(*s).fields.iter().any(|&(_, t)| holds_inside(types, t, inner))
            }
        }
}

/// Whether instruction `i` is a call that only reads the memory it is given and can keep
/// none of it: its callee writes nothing it was given (`RuleIds::writes_arguments`) and
/// its result holds no address, so after the call no alias of an array passed to it is
/// left, and the array holds what it did before.
fn reading_call(types: &TypeTable, rules: &[RuleIds], primal: &Function, i: mcir_ir::Inst) -> bool {
    let d = &primal.insts[i];
    let Op::Call(g) = d.op else { return false };
    rules.get(g.index()).is_some_and(|r| !r.writes_arguments)
        && d.result.is_none_or(|r| !mcir_ir::effects::holds_address(types, primal.value_type(r)))
}

/// For each value, the instructions that use it and whether a terminator does.
struct Users {
    insts: Vec<Vec<mcir_ir::Inst>>,
    in_terminator: Vec<bool>,
}

fn users_of(f: &Function) -> Users {
    let mut users =
        Users { insts: vec![Vec::new(); f.values.len()], in_terminator: vec![false; f.values.len()] };
    for (_, data) in f.blocks.iter() {
        for &i in &data.insts {
            for a in &f.insts[i].args {
                users.insts[a.index()].push(i);
            }
        }
        for a in data.term.uses() {
            users.in_terminator[a.index()] = true;
        }
    }
    users
}

/// Whether no adjoint can need `v`'s value: every use of it is the stored value of a
/// store, or an operand of an `f64` sum, difference or negation, a factor of a product
/// with a constant or the dividend of a quotient by one (`x += dt * v`), whose result
/// is itself unread. The adjoints of these operations read no operand but the constant,
/// which has no adjoint of its own, so the reverse pass neither reloads `v` nor
/// recomputes anything from it. Anything else, a terminator's use included (a loop's
/// carried value), counts as read.
fn value_unread_by_reverse(f: &Function, users: &Users, v: Value, depth: u32) -> bool {
    if depth == 0 || users.in_terminator[v.index()] || f.value_type(v) != mcir_ir::TypeTable::F64 {
        return false;
    }
    users.insts[v.index()].iter().all(|&u| {
        let d = &f.insts[u];
        match d.op {
            Op::Store | Op::TrustedStore => {
                d.args.last() == Some(&v) && d.args[..d.args.len() - 1].iter().all(|&a| a != v)
            }
            Op::FBinary(mcir_ir::FBinOp::Add | mcir_ir::FBinOp::Sub) | Op::FUnary(mcir_ir::FUnOp::Neg) => {
                d.result.is_some_and(|r| value_unread_by_reverse(f, users, r, depth - 1))
            }
            Op::FBinary(mcir_ir::FBinOp::Mul) => {
                let other = if d.args[0] == v { d.args[1] } else { d.args[0] };
                other != v
                    && is_fconst(f, other)
                    && d.result.is_some_and(|r| value_unread_by_reverse(f, users, r, depth - 1))
            }
            Op::FBinary(mcir_ir::FBinOp::Div) => {
                d.args[0] == v
                    && d.args[1] != v
                    && is_fconst(f, d.args[1])
                    && d.result.is_some_and(|r| value_unread_by_reverse(f, users, r, depth - 1))
            }
            _ => false,
        }
    })
}

/// Whether `v` is an `f64` constant.
pub(crate) fn is_fconst(f: &Function, v: Value) -> bool {
    f.defining(v).is_some_and(|d| matches!(d.op, Op::FConst(_)))
}

/// Whether a store into `array` can run after a load from it whose value the reverse
/// pass may read (one not among the `unread` loads): later in the block of such a load, or in a block reachable from that
/// block (itself included, around a loop) without running the allocation again. An
/// array made inside a loop is a new array on each iteration: what an iteration writes
/// after the last one read is another array.
fn store_follows_load(
    types: &TypeTable,
    rules: &[RuleIds],
    primal: &Function,
    unread: &std::collections::HashSet<Value>,
    array: Value,
) -> bool {
    let made_in = primal
        .blocks
        .iter()
        .find_map(|(b, data)| data.insts.iter().any(|&i| primal.insts[i].result == Some(array)).then_some(b));
    // Each access to `array` in block `b`, in order: `Some(true)` a store, `Some(false)`
    // a load the reverse pass may read or a call it is passed to, `None` a load it never
    // reads.
    let accesses = |b: Block| {
        primal.blocks[b].insts.iter().filter_map(move |&i| {
            let d = &primal.insts[i];
            if matches!(d.op, Op::Call(_)) {
                return (d.args.contains(&array) && reading_call(types, rules, primal, i))
                    .then_some(Some(false));
            }
            let store = matches!(d.op, Op::Store | Op::TrustedStore);
            let load = matches!(d.op, Op::Load | Op::TrustedLoad);
            if !(store || load) || d.args.first() != Some(&array) {
                return None;
            }
            let never_read = load && d.result.is_some_and(|r| unread.contains(&r));
            Some((!never_read).then_some(store))
        })
    };
    let mut seen = vec![false; primal.blocks.len()];
    let mut work: Vec<Block> = Vec::new();
    for (b, data) in primal.blocks.iter() {
        let mut loaded = false;
        for access in accesses(b) {
            match access {
                Some(true) if loaded => return true,
                Some(false) => loaded = true,
                _ => {}
            }
        }
        if loaded {
            work.extend(data.term.successors().map(|c| c.block));
        }
    }
    while let Some(b) = work.pop() {
        if std::mem::replace(&mut seen[b.index()], true) || Some(b) == made_in {
            continue;
        }
        if accesses(b).any(|a| a == Some(true)) {
            return true;
        }
        work.extend(primal.blocks[b].term.successors().map(|c| c.block));
    }
    false
}

/// How far [`value_unread_by_reverse`] follows sums before it gives up (and counts the
/// value as read).
const UNREAD_DEPTH: u32 = 8;

/// Names a shadow after its primal value: `dx` for `x`.
pub(crate) fn shadow_name(name: &Option<String>) -> Option<String> {
    name.as_ref().map(|n| format!("d{n}"))
}

/// The types of the shadows of a value of type `t`, one per fdata leaf.
pub(crate) fn shadow_types(types: &mut TypeTable, t: TypeId) -> Vec<TypeId> {
    fdata_leaves(types, t).into_iter().map(|l| tangent_type(types, l.ty)).collect()
}

/// The signature of `f`'s forward pass: the primal parameters, then one shadow per fdata
/// leaf of each that is not `constant`; it returns `(result, result shadows.., tape)`.
pub(crate) fn forward_signature(
    types: &mut TypeTable,
    primal: &Function,
    tape_ty: TypeId,
    constant: &[bool],
) -> (Vec<(Option<String>, TypeId)>, TypeId) {
    let mut params: Vec<(Option<String>, TypeId)> = Vec::new();
    let names: Vec<Option<String>> =
        primal.param_values().iter().map(|&p| primal.values[p].name.clone()).collect();
    for (name, &t) in names.iter().zip(&primal.params) {
        params.push((name.clone(), t));
    }
    for (i, (name, &t)) in names.iter().zip(&primal.params).enumerate() {
        if constant.get(i).copied().unwrap_or(false) {
            continue;
        }
        for st in shadow_types(types, t) {
            params.push((shadow_name(name), st));
        }
    }
    let mut ret = Vec::new();
    if let Some(r) = primal.ret {
        ret.push(r);
        ret.extend(shadow_types(types, r));
    }
    ret.push(tape_ty);
    (params, types.intern(Type::Tuple(ret)))
}

impl Forward {
    pub fn fwd(&self, v: Value) -> Result<Value, AdError> {
        self.vmap
            .get(v.index())
            .copied()
            .flatten()
            .ok_or_else(|| AdError::internal(&self.e.func.name, format!("no forward value for {v}")))
    }

    fn shadows_of(&self, v: Value) -> Vec<Value> {
        self.shadows.get(v.index()).cloned().unwrap_or_default()
    }

    /// Arguments of a jump: the primal arguments, then their shadows.
    fn call_args(&self, call: &BlockCall) -> Result<Vec<Value>, AdError> {
        let mut args = Vec::new();
        for &a in &call.args {
            args.push(self.fwd(a)?);
        }
        for &a in &call.args {
            args.extend(self.shadows_of(a));
        }
        Ok(args)
    }
}

/// Builds the forward pass `rule.fwd` of `primal` (without its tape, which is added once
/// the reverse pass is known). Parameters marked `constant` come without shadows: each
/// gets a zero shadow inside the pass, which dead-code elimination removes unless the
/// reverse pass or a callee reads it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_forward(
    module: &mut Module,
    ids: &[RuleIds],
    rule: &RuleIds,
    primal: &Function,
    edges: &[Vec<Edge>],
    counted: &[Option<crate::analysis::CountedHeader>],
    counters: &[crate::analysis::LoopCounter],
    constant: &[bool],
    restored_by_caller: &[bool],
) -> Result<Forward, AdError> {
    let (params, ret) = forward_signature(&mut module.types, primal, rule.tape_ty, constant);
    let name = module.funcs[rule.fwd].name.clone();
    let mut func = Function::new(&name, &params, Some(ret));
    func.span = primal.span;
    let nvals = primal.values.len();
    let mut fw = Forward {
        e: Emit::new(func),
        block_map: Vec::new(),
        vmap: vec![None; nvals],
        shadows: vec![Vec::new(); nvals],
        saved: HashMap::new(),
        edge_marks: Vec::new(),
        counter_marks: Vec::new(),
        returns: Vec::new(),
        unrestored: unrestored_arrays(&module.types, ids, primal, restored_by_caller),
    };
    let types = &mut module.types;
    // Blocks and their parameters.
    for (b, data) in primal.blocks.iter() {
        let fb = if b == primal.entry() { fw.e.func.entry() } else { fw.e.func.add_block() };
        fw.block_map.push(fb);
        if b == primal.entry() {
            let fparams = fw.e.func.param_values().to_vec();
            let mut k = data.params.len();
            for (i, &p) in data.params.iter().enumerate() {
                fw.vmap[p.index()] = Some(fparams[i]);
            }
            for (i, &p) in data.params.iter().enumerate() {
                let ty = primal.value_type(p);
                if constant.get(i).copied().unwrap_or(false) {
                    let mut list = Vec::new();
                    for leaf in fdata_leaves(types, ty) {
                        let part = primal_extract(&mut fw.e, types, fparams[i], &leaf.path);
                        let s = crate::driver::zero_shadow(&mut fw.e, types, leaf.ty, part)?;
                        list.push(fw.e.name(s, shadow_name(&primal.values[p].name)));
                    }
                    fw.shadows[p.index()] = list;
                    continue;
                }
                let n = fdata_leaves(types, ty).len();
                fw.shadows[p.index()] = fparams[k..k + n].to_vec();
                k += n;
            }
        } else {
            for &p in &data.params {
                let d = &primal.values[p];
                let np = fw.e.func.add_block_param(fb, d.ty, d.name.clone());
                fw.vmap[p.index()] = Some(np);
            }
            for &p in &data.params {
                let d = primal.values[p].clone();
                for st in shadow_types(types, d.ty) {
                    let sp = fw.e.func.add_block_param(fb, st, shadow_name(&d.name));
                    fw.shadows[p.index()].push(sp);
                }
            }
        }
    }
    for (b, data) in primal.blocks.iter() {
        fw.e.block = fw.block_map[b.index()];
        for &inst in &data.insts {
            forward_inst(&mut fw, types, ids, primal, inst)?;
        }
        // The terminator; an edge into a join goes through a block that marks it.
        let target = |fw: &mut Forward, slot: usize, call: &BlockCall| -> Result<BlockCall, AdError> {
            let args = fw.call_args(call)?;
            let dest = fw.block_map[call.block.index()];
            let incoming = &edges[call.block.index()];
            // A counted loop header knows where it came from without a record.
            let needs_path = incoming.len() > 1 && counted[call.block.index()].is_none();
            let exits: Vec<usize> = counters
                .iter()
                .enumerate()
                .filter(|(_, c)| c.region[b.index()] && !c.region[call.block.index()])
                .map(|(k, _)| k)
                .collect();
            if !needs_path && exits.is_empty() {
                return Ok(BlockCall { block: dest, args });
            }
            let eb = fw.e.func.add_block();
            fw.e.func.set_terminator(eb, Terminator::Jump(BlockCall { block: dest, args }), data.term_span);
            if needs_path {
                let k = incoming.iter().position(|e| e.from == b && e.slot == slot).unwrap_or(0);
                fw.edge_marks.push((eb, k, call.block));
            }
            for k in exits {
                let p = fw.fwd(counters[k].param)?;
                fw.counter_marks.push((eb, k, p));
            }
            Ok(BlockCall { block: eb, args: Vec::new() })
        };
        let fb = fw.block_map[b.index()];
        let term = match &data.term {
            Terminator::Jump(c) => Terminator::Jump(target(&mut fw, 0, c)?),
            Terminator::Branch { cond, then_dest, else_dest } => {
                let cond = fw.fwd(*cond)?;
                let t = target(&mut fw, 0, then_dest)?;
                let f = target(&mut fw, 1, else_dest)?;
                Terminator::Branch { cond, then_dest: t, else_dest: f }
            }
            Terminator::Return(_) => {
                fw.returns.push(b);
                Terminator::Return(None)
            }
        };
        fw.e.func.set_terminator(fb, term, data.term_span);
    }
    Ok(fw)
}

/// Reads the part of a primal value at `path` (through tuples and immutable structs).
pub(crate) fn primal_extract(e: &mut Emit, types: &TypeTable, mut v: Value, path: &[u32]) -> Value {
    for &i in path {
        let t = e.ty(v);
        v = match types.get(t) {
            Type::Struct(s) => {
                let fty = types.struct_def(*s).fields.get(i as usize).map(|f| f.1).unwrap_or(TypeTable::UNIT);
                e.val(Op::StructGet(*s, i), vec![v], fty)
            }
            _ => e.tuple_get(types, v, i),
        };
    }
    v
}

/// Reads the part of a tangent value at `path` (tangents of value types are tuples, or
/// for a struct that holds itself its immutable tangent struct).
pub(crate) fn tangent_extract(e: &mut Emit, types: &TypeTable, v: Value, path: &[u32]) -> Value {
    primal_extract(e, types, v, path)
}

/// Builds a value of the tangent type of `t` from its rdata leaves and its fdata leaves
/// (in leaf order); parts without a tangent are `()`.
pub(crate) fn build_tangent(
    e: &mut Emit,
    types: &mut TypeTable,
    t: TypeId,
    rdata: &mut dyn Iterator<Item = Value>,
    fdata: &mut dyn Iterator<Item = Value>,
) -> Value {
    if !has_tangent(types, t) {
        return e.unit();
    }
    if types.is_address(t) || crate::tangent::holds_itself(types, t) {
        return match fdata.next() {
            Some(v) => v,
            None => e.unit(),
        };
    }
    let fields: Vec<TypeId> = match types.get(t) {
        Type::Scalar(_) => {
            return match rdata.next() {
                Some(v) => v,
                None => e.fconst(0.0),
            }
        }
        Type::Tuple(items) => items.clone(),
        Type::Struct(_) => {
            types.as_struct(t).map(|(_, d)| d.fields.iter().map(|f| f.1).collect()).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let items: Vec<Value> = fields.into_iter().map(|ft| build_tangent(e, types, ft, rdata, fdata)).collect();
    let tt = tangent_type(types, t);
    match types.get(tt) {
        Type::Struct(s) => {
            let s = *s;
            e.val(Op::StructNew(s), items, tt)
        }
        _ => e.tuple(types, items),
    }
}

/// The tangent a fresh cell or record holds for `v` during the forward pass: zero for
/// its `f64` parts (adjoints accumulate only in the reverse pass) and the shadows of its
/// addresses.
fn zero_tangent_of(fw: &mut Forward, types: &mut TypeTable, t: TypeId, shadows: Vec<Value>) -> Value {
    let nr = leaves(types, t).iter().filter(|l| l.kind == LeafKind::Rdata).count();
    let zeros: Vec<Value> = (0..nr).map(|_| fw.e.fconst(0.0)).collect();
    build_tangent(&mut fw.e, types, t, &mut zeros.into_iter(), &mut shadows.into_iter())
}

fn forward_inst(
    fw: &mut Forward,
    types: &mut TypeTable,
    ids: &[RuleIds],
    primal: &Function,
    inst: Inst,
) -> Result<(), AdError> {
    let d = primal.insts[inst].clone();
    fw.e.span = d.span;
    let args: Vec<Value> = d.args.iter().map(|&a| fw.fwd(a)).collect::<Result<_, _>>()?;
    let result_ty = d.result.map(|r| primal.value_type(r));
    // Unnamed results are named after their op in the derived passes, so that the tape's
    // fields and the reverse pass read well.
    let name = d.result.and_then(|r| {
        primal.values[r].name.clone().or_else(|| match d.op {
            Op::FConst(_) | Op::IConst(_) | Op::BConst(_) => None,
            _ => Some(crate::reverse::rule_name(types, &d.op).replace('.', "_")),
        })
    });
    let keep_primal_name = d.result.and_then(|r| primal.values[r].name.clone());
    let mut saved = Vec::new();
    // Save what an overwrite destroys, before it happens.
    match &d.op {
        Op::Store | Op::TrustedStore if !fw.unrestored.contains(&d.args[0]) => {
            let arr_ty = fw.e.ty(args[0]);
            let elem = types.as_array(arr_ty).map(|(e, _)| TypeTable::scalar(e)).unwrap_or(TypeTable::F64);
            let load = if d.op == Op::TrustedStore { Op::TrustedLoad } else { Op::Load };
            let old = fw.e.val(load, args[..args.len() - 1].to_vec(), elem);
            let target = primal.values[d.args[0]].name.clone().unwrap_or_else(|| "elem".into());
            saved.push(fw.e.name(old, Some(format!("old_{target}"))));
        }
        Op::CopyInto => {
            let ty = fw.e.ty(args[0]);
            let old = fw.e.val(Op::ArrayCopy, vec![args[0]], ty);
            let target = primal.values[d.args[0]].name.clone().unwrap_or_else(|| "array".into());
            saved.push(fw.e.name(old, Some(format!("old_{target}"))));
        }
        Op::RefStore | Op::MutStore(..) => {
            let (load, content_ty) = match &d.op {
                Op::MutStore(s, i) => {
                    let fty =
                        types.struct_def(*s).fields.get(*i as usize).map(|f| f.1).unwrap_or(TypeTable::UNIT);
                    (Op::MutLoad(*s, *i), fty)
                }
                _ => (Op::RefLoad, fw.e.ty(args[1])),
            };
            let target = primal.values[d.args[0]].name.clone().unwrap_or_else(|| "cell".into());
            let old = fw.e.val(load.clone(), vec![args[0]], content_ty);
            saved.push(fw.e.name(old, Some(format!("old_{target}"))));
            if has_tangent(types, content_ty) {
                let cell_shadow = fw.cell_shadow(primal, d.args[0])?;
                let tan_ty = tangent_type(types, content_ty);
                let (sload, _) = shadow_access(types, &d.op)?;
                let old = fw.e.val(sload, vec![cell_shadow], tan_ty);
                saved.push(fw.e.name(old, Some(format!("old_d{target}"))));
            }
        }
        _ => {}
    }
    // The primal operation (a call becomes a call of the callee's forward pass).
    let mut result_shadows = Vec::new();
    let result = match &d.op {
        Op::Call(g) => {
            let callee = ids[g.index()].fwd;
            let mut cargs = args.clone();
            for &a in &d.args {
                cargs.extend(fw.shadows_of(a));
            }
            let ret_ty = ids[g.index()].fwd_ret;
            let tuple = fw.e.val(Op::Call(callee), cargs, ret_ty);
            let mut k = 0;
            let res = match result_ty {
                Some(rt) => {
                    let v = fw.e.tuple_get(types, tuple, 0);
                    fw.e.name(v, name.clone());
                    k = 1;
                    for _ in 0..fdata_leaves(types, rt).len() {
                        let s = fw.e.tuple_get(types, tuple, k);
                        fw.e.name(s, shadow_name(&name));
                        result_shadows.push(s);
                        k += 1;
                    }
                    Some(v)
                }
                None => None,
            };
            let tape = fw.e.tuple_get(types, tuple, k);
            let callee_name = &ids[g.index()].name;
            fw.e.name(tape, Some(format!("{callee_name}_tape")));
            saved.push(tape);
            res
        }
        // The reverse of `sin x` multiplies by `cos x` (of `cos x`, by `sin x`): computed
        // here, beside its partner, native code makes the two one `sincos` call, and the
        // reverse pass reads the factor from the tape instead of calling `cos` again.
        // Dead-code elimination drops the factor when the reverse pass does not read it.
        Op::FUnary(u @ (FUnOp::Sin | FUnOp::Cos)) => {
            let partner = if *u == FUnOp::Sin { FUnOp::Cos } else { FUnOp::Sin };
            let res = fw.e.func.push_inst(fw.e.block, d.op.clone(), args.clone(), result_ty, d.span);
            let factor = fw.e.un(partner, args[0]);
            saved.push(fw.e.name(factor, Some(partner.name().to_string())));
            res
        }
        // The same for the elementwise forms: native code computes both maps in one
        // loop of `sincos` calls when one of them is fused into its consumer.
        Op::MapFUnary(u @ (FUnOp::Sin | FUnOp::Cos)) => {
            let partner = if *u == FUnOp::Sin { FUnOp::Cos } else { FUnOp::Sin };
            let res = fw.e.func.push_inst(fw.e.block, d.op.clone(), args.clone(), result_ty, d.span);
            let factor = fw.e.un(partner, args[0]);
            saved.push(fw.e.name(factor, Some(partner.name().to_string())));
            res
        }
        op => fw.e.func.push_inst(fw.e.block, op.clone(), args.clone(), result_ty, d.span),
    };
    if let (Some(r), Some(nr)) = (d.result, result) {
        fw.e.func.values[nr].name = keep_primal_name.clone().or_else(|| name.clone());
        fw.vmap[r.index()] = Some(nr);
    }
    // Shadows of the result.
    if let (Some(r), Some(nr), Some(rt)) = (d.result, result, result_ty) {
        let sname = shadow_name(&name);
        match &d.op {
            Op::ArrayFill
            | Op::ArrayLit(_)
            | Op::ArrayCopy
            | Op::MapFBinary(_)
            | Op::MapFUnary(_)
            | Op::MapFPowI
            | Op::MatMul(_)
            | Op::MatVec(_)
            | Op::Transpose
                if has_tangent(types, rt) =>
            {
                // An elementwise map's result has the shape of its array operands: its
                // shadow, made from one of them just before the map, leaves the result
                // one use and nothing between the map and its consumer, so native code
                // computes the map inside its consumer's loop (`sum(sin(x))`, one loop).
                // Through chains of maps to the array they start from, so that no map
                // of the chain gets a second use either.
                let is_map = |op: &Op| matches!(op, Op::MapFBinary(_) | Op::MapFUnary(_) | Op::MapFPowI);
                let mut like = None;
                let mut operands = is_map(&d.op).then(|| args.clone());
                while let Some(ops) = operands.take() {
                    let Some(a) = ops.into_iter().find(|&a| fw.e.ty(a) == rt) else { break };
                    like = Some(a);
                    if let mcir_ir::ValueDef::Inst(i) = fw.e.func.values[a].def {
                        let inner = &fw.e.func.insts[i];
                        if is_map(&inner.op) {
                            operands = Some(inner.args.clone());
                        }
                    }
                }
                let s = fw.e.val(Op::ZerosLike, vec![like.unwrap_or(nr)], rt);
                if like.is_some() {
                    let insts = &mut fw.e.func.blocks[fw.e.block].insts;
                    if let (mcir_ir::ValueDef::Inst(map), Some(zeros)) =
                        (fw.e.func.values[nr].def, insts.last().copied())
                    {
                        if let Some(at) = insts.iter().position(|&i| i == map) {
                            insts.pop();
                            insts.insert(at, zeros);
                        }
                    }
                }
                result_shadows.push(fw.e.name(s, sname));
            }
            Op::RefNew if has_tangent(types, rt) => {
                let content = d.args[0];
                let ct = primal.value_type(content);
                let sh = fw.shadows_of(content);
                let tan = zero_tangent_of(fw, types, ct, sh);
                let sty = tangent_type(types, rt);
                let s = fw.e.val(Op::RefNew, vec![tan], sty);
                result_shadows.push(fw.e.name(s, sname));
            }
            Op::RefLoad | Op::MutLoad(..) if !fdata_leaves(types, rt).is_empty() => {
                let cell = fw.cell_shadow(primal, d.args[0])?;
                let tan_ty = tangent_type(types, rt);
                let (load, _) = shadow_access(types, &d.op)?;
                let tan = fw.e.val(load, vec![cell], tan_ty);
                for leaf in fdata_leaves(types, rt) {
                    let s = tangent_extract(&mut fw.e, types, tan, &leaf.path);
                    result_shadows.push(fw.e.name(s, sname.clone()));
                }
            }
            Op::TupleNew => {
                for &a in &d.args {
                    result_shadows.extend(fw.shadows_of(a));
                }
            }
            Op::StructNew(s) => {
                if types.struct_def(*s).mutable {
                    if has_tangent(types, rt) {
                        let ss = shadow_struct(types, *s)?;
                        let mut fields = Vec::new();
                        for &a in &d.args {
                            let sh = fw.shadows_of(a);
                            fields.push(zero_tangent_of(fw, types, primal.value_type(a), sh));
                        }
                        let sty = tangent_type(types, rt);
                        let sv = fw.e.val(Op::StructNew(ss), fields, sty);
                        result_shadows.push(fw.e.name(sv, sname));
                    }
                } else {
                    for &a in &d.args {
                        result_shadows.extend(fw.shadows_of(a));
                    }
                }
            }
            Op::TupleGet(i) | Op::StructGet(_, i) => {
                let agg = d.args[0];
                let ranges = field_leaf_ranges(types, primal.value_type(agg), LeafKind::Fdata);
                let all = fw.shadows_of(agg);
                if let Some(range) = ranges.get(*i as usize) {
                    result_shadows.extend(all.get(range.clone()).unwrap_or(&[]).iter().copied());
                }
            }
            _ => {}
        }
        fw.shadows[r.index()] = result_shadows;
    }
    // The shadow of a cell follows its content.
    if let Op::RefStore | Op::MutStore(..) = &d.op {
        let content_ty = primal.value_type(d.args[1]);
        if has_tangent(types, content_ty) {
            let cell_shadow = fw.cell_shadow(primal, d.args[0])?;
            let sh = fw.shadows_of(d.args[1]);
            let tan = zero_tangent_of(fw, types, content_ty, sh);
            let (_, store) = shadow_access(types, &d.op)?;
            fw.e.eff(store, vec![cell_shadow, tan]);
        }
    }
    if !saved.is_empty() {
        fw.saved.insert(inst, saved);
    }
    Ok(())
}

/// The ops that read and write, in a cell's or record's shadow, the tangent of the slot
/// `op` (a ref or mut-record load or store) reads or writes: the shadow ref's content,
/// or the same field of the record's `S$tan`.
pub(crate) fn shadow_access(types: &mut TypeTable, op: &Op) -> Result<(Op, Op), AdError> {
    Ok(match op {
        Op::MutLoad(s, i) | Op::MutStore(s, i) => {
            let ss = shadow_struct(types, *s)?;
            (Op::MutLoad(ss, *i), Op::MutStore(ss, *i))
        }
        _ => (Op::RefLoad, Op::RefStore),
    })
}

impl Forward {
    /// The shadow of a cell or record whose content is differentiable.
    fn cell_shadow(&self, primal: &Function, cell: Value) -> Result<Value, AdError> {
        self.shadows_of(cell)
            .first()
            .copied()
            .ok_or_else(|| AdError::internal(&primal.name, "a differentiable cell has no shadow".to_string()))
    }
}

/// The `S$tan` struct of a mut struct `S`.
pub(crate) fn shadow_struct(
    types: &mut TypeTable,
    s: mcir_ir::StructId,
) -> Result<mcir_ir::StructId, AdError> {
    let ty = types.intern(Type::Struct(s));
    let tan = tangent_type(types, ty);
    types.as_struct(tan).map(|(sid, _)| sid).ok_or_else(|| {
        AdError::internal("", format!("struct {} has no tangent record", types.struct_def(s).name))
    })
}
