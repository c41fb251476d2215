//! Hand-written rules (docs/rules.md), in place of derived ones. A function with a
//! reverse rule gets a forward pass that runs the rule's body — which returns the value
//! and the environment of its pullback closure — and a reverse pass that calls the
//! pullback with the result's cotangent and distributes what it returns: rdata is
//! returned, cotangents of arrays are added into their shadows. A forward rule gives the
//! tangent function the same way through its pushforward. A `zero` rule runs the
//! function and gives zero derivatives.
//!
//! A function with a rule must not change its arguments (the front end checks this; see
//! `mcir_ir::effects`), so there is nothing to restore and the arguments' state after
//! the call is their state upon entry.

use crate::emit::Emit;
use crate::forward::{build_tangent, primal_extract, tangent_extract};
use crate::tangent::{fdata_leaves, has_tangent, leaves, tangent_type, LeafKind};
use crate::{AdError, RuleIds};
use mcir_ir::{FuncId, Function, Module, Op, RuleKind, Terminator, Type, TypeId, TypeTable, Value};

/// The rule's function and its closure, or `None` for a zero rule.
fn parts(kind: &RuleKind) -> Option<(FuncId, FuncId)> {
    match kind {
        RuleKind::Reverse { rule, pullback } => Some((*rule, *pullback)),
        RuleKind::Forward { rule, pushforward } => Some((*rule, *pushforward)),
        RuleKind::Zero | RuleKind::Checkpoint { .. } => None,
    }
}

/// Runs the rule's body (or, for a zero rule, the function itself): the value, and the
/// closure's environment if it has one.
fn run_rule(
    e: &mut Emit,
    module: &Module,
    f: FuncId,
    kind: &RuleKind,
    xs: &[Value],
) -> Result<(Value, Option<Value>), AdError> {
    let types = &module.types;
    let primal = &module.funcs[f];
    let ret = primal
        .ret
        .ok_or_else(|| AdError::internal(&primal.name, "a rule for a function without result".into()))?;
    match parts(kind) {
        None => Ok((e.val(Op::Call(f), xs.to_vec(), ret), None)),
        Some((rule, _)) => {
            let rty = module.funcs[rule].ret.unwrap_or(TypeTable::UNIT);
            let out = e.val(Op::Call(rule), xs.to_vec(), rty);
            let y = e.tuple_get(types, out, 0);
            let n = match types.try_get(rty) {
                Some(Type::Tuple(items)) => items.len(),
                _ => 0,
            };
            let env = (n == 2).then(|| e.tuple_get(types, out, 1));
            Ok((y, env))
        }
    }
}

/// The parameters of `f` that have a tangent, in order (what a closure takes or gives).
fn differentiable(types: &TypeTable, f: &Function) -> Vec<usize> {
    (0..f.params.len()).filter(|&i| has_tangent(types, f.params[i])).collect()
}

/// The forward and reverse pass of `rule`, a rule of `primal` (function `fid`) made from
/// its hand-written reverse (or zero) rule `kind`. Parameters marked `constant` have no
/// shadow.
pub(crate) fn reverse_passes(
    module: &mut Module,
    rule: &RuleIds,
    fid: FuncId,
    primal: &Function,
    kind: &RuleKind,
    constant: &[bool],
) -> Result<(Function, Function), AdError> {
    let is_constant = |i: usize| constant.get(i).copied().unwrap_or(false);
    let (fparams, fwd_ret) =
        crate::forward::forward_signature(&mut module.types, primal, rule.tape_ty, constant);
    let fname = module.funcs[rule.fwd].name.clone();
    let mut e = Emit::new(Function::new(&fname, &fparams, Some(fwd_ret)));
    e.span = primal.span;
    let pv = e.func.param_values().to_vec();
    let np = primal.params.len();
    let xs = pv[..np].to_vec();
    // The shadows of the parameters' fdata leaves, by parameter (none for constants).
    let mut k = np;
    let mut shadows: Vec<Vec<Value>> = Vec::new();
    for (i, &t) in primal.params.iter().enumerate() {
        let n = if is_constant(i) { 0 } else { fdata_leaves(&module.types, t).len() };
        shadows.push(pv[k..k + n].to_vec());
        k += n;
    }
    let (y, env) = run_rule(&mut e, module, fid, kind, &xs)?;
    let r = primal.ret.unwrap_or(TypeTable::UNIT);
    let types = &mut module.types;
    // The result's shadows: fresh zeros (the result of a function with a rule is fresh).
    let mut dys = Vec::new();
    for leaf in fdata_leaves(types, r) {
        let part = primal_extract(&mut e, types, y, &leaf.path);
        dys.push(crate::driver::zero_shadow(&mut e, types, leaf.ty, part)?);
    }
    // The tape: the closure's environment, the parameters' shadows, the result's.
    let mut fields: Vec<(String, TypeId)> = Vec::new();
    let mut stored = Vec::new();
    if let Some(env) = env {
        fields.push(("env".into(), e.ty(env)));
        stored.push(env);
    }
    for (i, list) in shadows.iter().enumerate() {
        for (j, &s) in list.iter().enumerate() {
            fields.push((format!("dx{i}_{j}"), e.ty(s)));
            stored.push(s);
        }
    }
    for (j, &s) in dys.iter().enumerate() {
        fields.push((format!("dy_{j}"), e.ty(s)));
        stored.push(s);
    }
    types.struct_def_mut(rule.tape_sid).fields = fields.clone();
    let tape = e.val(Op::StructNew(rule.tape_sid), stored, rule.tape_ty);
    let mut items = vec![y];
    items.extend(dys.iter().copied());
    items.push(tape);
    let out = e.val(Op::TupleNew, items, fwd_ret);
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(Some(out)), primal.span);
    let fwd = e.func;

    // The reverse pass.
    let (rparams, rev_ret) = crate::reverse::reverse_signature(types, primal, rule.tape_ty);
    let rname = module.funcs[rule.rev].name.clone();
    let types = &mut module.types;
    let mut e = Emit::new(Function::new(&rname, &rparams, rev_ret));
    e.span = primal.span;
    let pv = e.func.param_values().to_vec();
    let tape = pv[0];
    let mut got: Vec<Value> = Vec::new();
    for (i, (_, t)) in fields.iter().enumerate() {
        got.push(e.val(Op::StructGet(rule.tape_sid, i as u32), vec![tape], *t));
    }
    let mut next = got.into_iter();
    let env = if env.is_some() { next.next() } else { None };
    let mut shadows_rev: Vec<Vec<Value>> = Vec::new();
    for list in &shadows {
        shadows_rev.push(list.iter().map(|_| next.next()).collect::<Option<Vec<_>>>().unwrap_or_default());
    }
    let dys_rev: Vec<Value> = next.collect();
    let ybar_rdata: Vec<Value> = pv[1..].to_vec();
    let mut rdata_out: Vec<Value> = Vec::new();
    let diff = differentiable(types, primal);
    let cotangents: Option<Vec<Value>> = match parts(kind) {
        None => None,
        Some((_, pullback)) => {
            let ybar = build_tangent(&mut e, types, r, &mut ybar_rdata.into_iter(), &mut dys_rev.into_iter());
            let mut args: Vec<Value> = env.into_iter().collect();
            args.push(ybar);
            let cty = module.funcs[pullback].ret.unwrap_or(TypeTable::UNIT);
            let cot = e.val(Op::Call(pullback), args, cty);
            Some(if diff.len() == 1 {
                vec![cot]
            } else {
                (0..diff.len()).map(|k| e.tuple_get(types, cot, k as u32)).collect()
            })
        }
    };
    for (i, &t) in primal.params.iter().enumerate() {
        let c = cotangents.as_ref().and_then(|cs| diff.iter().position(|&d| d == i).map(|k| cs[k]));
        let mut fdata = 0;
        for leaf in leaves(types, t) {
            match leaf.kind {
                LeafKind::Rdata => rdata_out.push(match c {
                    Some(c) => tangent_extract(&mut e, types, c, &leaf.path),
                    None => e.fconst(0.0),
                }),
                LeafKind::Fdata => {
                    if let (Some(c), Some(&s)) = (c, shadows_rev[i].get(fdata)) {
                        let part = tangent_extract(&mut e, types, c, &leaf.path);
                        e.eff(Op::AddInto, vec![s, part]);
                    }
                    fdata += 1;
                }
            }
        }
    }
    let ret_val = rev_ret.map(|rt| e.val(Op::TupleNew, rdata_out, rt));
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(ret_val), primal.span);
    Ok((fwd, e.func))
}

/// The tangent function `name` of `primal` (function `fid`) from its hand-written forward
/// (or zero) rule, carrying `width` lanes; parameters marked `constant` take no tangent.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tangent_function(
    module: &mut Module,
    fid: FuncId,
    primal: &Function,
    kind: &RuleKind,
    width: usize,
    constant: &[bool],
    params: &[(Option<String>, TypeId)],
    ret: Option<TypeId>,
    name: &str,
) -> Result<Function, AdError> {
    let is_constant = |i: usize| constant.get(i).copied().unwrap_or(false);
    let mut e = Emit::new(Function::new(name, params, ret));
    e.span = primal.span;
    let pv = e.func.param_values().to_vec();
    let np = primal.params.len();
    let xs = pv[..np].to_vec();
    let (y, env) = run_rule(&mut e, module, fid, kind, &xs)?;
    let r = primal.ret.unwrap_or(TypeTable::UNIT);
    let types = &mut module.types;
    let diff = differentiable(types, primal);
    let mut items = vec![y];
    let mut k = np;
    for _ in 0..width {
        // This lane's tangent of each parameter, as a value of its tangent type.
        let mut tans = Vec::new();
        for (i, &t) in primal.params.iter().enumerate() {
            if is_constant(i) {
                if diff.contains(&i) {
                    tans.push(zero_tangent(&mut e, types, t, xs[i])?);
                }
                continue;
            }
            let ls = leaves(types, t);
            let (mut rd, mut fd) = (Vec::new(), Vec::new());
            for leaf in &ls {
                match leaf.kind {
                    LeafKind::Rdata => rd.push(pv[k]),
                    LeafKind::Fdata => fd.push(pv[k]),
                }
                k += 1;
            }
            if diff.contains(&i) {
                tans.push(build_tangent(&mut e, types, t, &mut rd.into_iter(), &mut fd.into_iter()));
            }
        }
        let dy = match parts(kind) {
            None => zero_tangent(&mut e, types, r, y)?,
            Some((_, pushforward)) => {
                let mut args: Vec<Value> = env.into_iter().collect();
                args.extend(tans);
                let tty = tangent_type(types, r);
                e.val(Op::Call(pushforward), args, tty)
            }
        };
        for leaf in leaves(types, r) {
            items.push(tangent_extract(&mut e, types, dy, &leaf.path));
        }
    }
    let out = ret.map(|rt| e.val(Op::TupleNew, items, rt));
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(out), primal.span);
    Ok(e.func)
}

/// A zero value of the tangent type of `t`, shaped like the primal `v`: zeros for `f64`s,
/// fresh zero arrays for arrays.
fn zero_tangent(e: &mut Emit, types: &mut TypeTable, t: TypeId, v: Value) -> Result<Value, AdError> {
    let mut rd = Vec::new();
    let mut fd = Vec::new();
    for leaf in leaves(types, t) {
        match leaf.kind {
            LeafKind::Rdata => rd.push(e.fconst(0.0)),
            LeafKind::Fdata => {
                let part = primal_extract(e, types, v, &leaf.path);
                fd.push(crate::driver::zero_shadow(e, types, leaf.ty, part)?);
            }
        }
    }
    Ok(build_tangent(e, types, t, &mut rd.into_iter(), &mut fd.into_iter()))
}

/// The forward and reverse pass of `rule`, the rule of `primal`, whose calls are
/// checkpointed: `primal` computes what `inner` (of rule `inner_rule`) computes. The
/// forward pass runs `inner`'s primal and tapes the arguments and their shadows; the
/// reverse pass runs `inner`'s derived forward pass again from them (memory is then as
/// the call found it: the reverse pass of the caller has restored it, and `inner` writes
/// nothing it was given) and reverses it with the result's cotangent. Parameters marked
/// `constant` have no shadow; the recomputation gives them zero ones.
pub(crate) fn checkpoint_passes(
    module: &mut Module,
    rule: &RuleIds,
    inner: FuncId,
    inner_rule: &RuleIds,
    primal: &Function,
    constant: &[bool],
) -> Result<(Function, Function), AdError> {
    let is_constant = |i: usize| constant.get(i).copied().unwrap_or(false);
    let r = primal
        .ret
        .ok_or_else(|| AdError::internal(&primal.name, "a checkpointed function without result".into()))?;
    if !fdata_leaves(&module.types, r).is_empty() {
        return Err(AdError::internal(&primal.name, "a checkpointed function returns memory".into()));
    }
    let (fparams, fwd_ret) =
        crate::forward::forward_signature(&mut module.types, primal, rule.tape_ty, constant);
    let fname = module.funcs[rule.fwd].name.clone();
    let mut e = Emit::new(Function::new(&fname, &fparams, Some(fwd_ret)));
    e.span = primal.span;
    let pv = e.func.param_values().to_vec();
    // What the primal allocates is dead once its result is read.
    let mark = e.val(Op::ArenaMark, vec![], TypeTable::I64);
    let y = e.val(Op::Call(inner), pv[..primal.params.len()].to_vec(), r);
    let y = copy_out(&mut e, &module.types, y, r, Marks { arena: mark, tape: None });
    let fields: Vec<(String, TypeId)> =
        pv.iter().enumerate().map(|(i, &v)| (format!("arg{i}"), e.ty(v))).collect();
    module.types.struct_def_mut(rule.tape_sid).fields = fields.clone();
    let tape = e.val(Op::StructNew(rule.tape_sid), pv.clone(), rule.tape_ty);
    let out = e.val(Op::TupleNew, vec![y, tape], fwd_ret);
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(Some(out)), primal.span);
    let fwd = e.func;

    let (rparams, rev_ret) = crate::reverse::reverse_signature(&mut module.types, primal, rule.tape_ty);
    let rname = module.funcs[rule.rev].name.clone();
    let types = &mut module.types;
    let mut e = Emit::new(Function::new(&rname, &rparams, rev_ret));
    e.span = primal.span;
    let pv = e.func.param_values().to_vec();
    let saved: Vec<Value> = fields
        .iter()
        .enumerate()
        .map(|(i, (_, t))| e.val(Op::StructGet(rule.tape_sid, i as u32), vec![pv[0]], *t))
        .collect();
    let np = primal.params.len();
    let xs = &saved[..np];
    // The recomputation's tape and what it allocates are dead once its reverse returns:
    // both what it took from the arena and what from the tape region (its stacks' room,
    // a recursive forward pass's records).
    let mark = e.val(Op::ArenaMark, vec![], TypeTable::I64);
    let tape_mark = e.val(Op::TapeMark, vec![], TypeTable::I64);
    let mut args = xs.to_vec();
    let mut taped = saved[np..].iter();
    for (i, &t) in primal.params.iter().enumerate() {
        for leaf in fdata_leaves(types, t) {
            if is_constant(i) {
                let part = primal_extract(&mut e, types, xs[i], &leaf.path);
                args.push(crate::driver::zero_shadow(&mut e, types, leaf.ty, part)?);
            } else {
                let s = taped.next().copied().ok_or_else(|| {
                    AdError::internal(&primal.name, "a checkpoint's tape misses a shadow".into())
                })?;
                args.push(s);
            }
        }
    }
    let again = e.val(Op::Call(inner_rule.fwd), args, inner_rule.fwd_ret);
    let inner_tape = e.tuple_get(types, again, 1);
    let mut rargs = vec![inner_tape];
    rargs.extend(pv[1..].iter().copied());
    let cot = match inner_rule.rev_ret {
        Some(t) => {
            let cot = e.val(Op::Call(inner_rule.rev), rargs, t);
            Some(copy_out(&mut e, types, cot, t, Marks { arena: mark, tape: Some(tape_mark) }))
        }
        None => {
            e.eff(Op::Call(inner_rule.rev), rargs);
            e.eff(Op::ArenaRelease, vec![mark]);
            e.eff(Op::TapeRelease, vec![tape_mark]);
            None
        }
    };
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(cot), primal.span);
    Ok((fwd, e.func))
}

/// Marks of the arena and, where a recomputation ran, of the tape region.
struct Marks {
    arena: Value,
    tape: Option<Value>,
}

/// Gives back the memory allocated since `marks` but `v`, a value of value-identified
/// type `t` (numbers, and tuples and immutable structs of them): its numbers are read,
/// the memory released, and the value rebuilt from them.
fn copy_out(e: &mut Emit, types: &TypeTable, v: Value, t: TypeId, marks: Marks) -> Value {
    fn read(e: &mut Emit, types: &TypeTable, v: Value, t: TypeId, out: &mut Vec<Value>) {
        match types.try_get(t) {
            Some(Type::Tuple(items)) => {
                for (i, &it) in items.clone().iter().enumerate() {
                    let x = e.val(Op::TupleGet(i as u32), vec![v], it);
                    read(e, types, x, it, out);
                }
            }
            Some(Type::Struct(sid)) => {
                let sid = *sid;
                let fields: Vec<TypeId> = types.struct_def(sid).fields.iter().map(|f| f.1).collect();
                for (i, ft) in fields.into_iter().enumerate() {
                    let x = e.val(Op::StructGet(sid, i as u32), vec![v], ft);
                    read(e, types, x, ft, out);
                }
            }
            _ => out.push(v),
        }
    }
    fn build(e: &mut Emit, types: &TypeTable, t: TypeId, leaves: &mut std::vec::IntoIter<Value>) -> Value {
        match types.try_get(t) {
            Some(Type::Tuple(items)) => {
                let items = items.clone();
                let fields: Vec<Value> = items.iter().map(|&it| build(e, types, it, leaves)).collect();
                e.val(Op::TupleNew, fields, t)
            }
            Some(Type::Struct(sid)) => {
                let sid = *sid;
                let fts: Vec<TypeId> = types.struct_def(sid).fields.iter().map(|f| f.1).collect();
                let fields: Vec<Value> = fts.into_iter().map(|ft| build(e, types, ft, leaves)).collect();
                e.val(Op::StructNew(sid), fields, t)
            }
            _ => leaves.next().unwrap_or(mark_placeholder()),
        }
    }
    let mut leaves = Vec::new();
    read(e, types, v, t, &mut leaves);
    e.eff(Op::ArenaRelease, vec![marks.arena]);
    if let Some(tape) = marks.tape {
        e.eff(Op::TapeRelease, vec![tape]);
    }
    build(e, types, t, &mut leaves.into_iter())
}

/// A value never used: `build` only runs out of leaves if `read` and it disagree.
fn mark_placeholder() -> Value {
    use mcir_ir::entity::EntityRef;
    Value::new(0)
}
