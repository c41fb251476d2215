//! The VJP driver `f$vjp`: the derived rule wrapped so that one call computes the whole
//! `X -> X × A` vector-Jacobian product. It builds zero shadows for the arguments, runs
//! the forward pass, adds the cotangents of the result and of the arguments' state after
//! the call into the shadows, runs the reverse pass, and returns the value together with
//! the cotangent of every argument upon entry (one value of tangent type each).

use crate::emit::Emit;
use crate::forward::{build_tangent, primal_extract, shadow_struct, tangent_extract};
use crate::tangent::{fdata_leaves, has_tangent, rdata_leaves, tangent_type};
use crate::RuleIds;
use crate::{AdError, Derived};
use mcir_ir::{FuncId, Function, Op, Terminator, Type, TypeId, TypeTable, Value};

/// Which arguments receive a cotangent for their state after the call (`--seed-args`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedPattern {
    /// One flag per parameter.
    pub args: Vec<bool>,
}

/// Adds `f$vjp` for the primal function `f` and returns its id. Its parameters are `f`'s,
/// then the result's cotangent (if the result has a tangent), then a cotangent for each
/// seeded argument that has a tangent; it returns `(value, xbar_0, .., xbar_n)` where
/// `xbar_i` has the tangent type of parameter `i` (`()` when it has none).
pub fn vjp_driver(derived: &mut Derived, f: FuncId, seeds: &SeedPattern) -> Result<FuncId, AdError> {
    vjp_driver_with(derived, f, seeds, &[])
}

/// [`vjp_driver`] with the parameters marked `constant` not differentiated: the driver
/// calls the entry rule `derived.entry` (see [`crate::derive_with`]), which must be the
/// rule of `f` for the same constants; it builds no shadow for a constant and returns
/// `()` as its cotangent. Constants take no seed.
pub fn vjp_driver_with(
    derived: &mut Derived,
    f: FuncId,
    seeds: &SeedPattern,
    constant: &[bool],
) -> Result<FuncId, AdError> {
    let primal = derived.module.funcs[f].clone();
    let is_constant = |i: usize| constant.get(i).copied().unwrap_or(false);
    let rule = if constant.iter().any(|&c| c) {
        match &derived.entry {
            Some(e) if e.func == f && e.constant == constant => e.rule.clone(),
            _ => {
                return Err(AdError::internal(
                    &primal.name,
                    "no rule was derived for these constant arguments".to_string(),
                ))
            }
        }
    } else {
        derived.rule(f).clone()
    };
    let types = &mut derived.module.types;
    let mut params: Vec<(Option<String>, TypeId)> = Vec::new();
    for (&p, &t) in primal.param_values().iter().zip(&primal.params) {
        params.push((primal.values[p].name.clone(), t));
    }
    let result_seeded = primal.ret.is_some_and(|r| has_tangent(types, r));
    if let Some(r) = primal.ret.filter(|_| result_seeded) {
        params.push((Some("result_seed".into()), tangent_type(types, r)));
    }
    let seeded: Vec<bool> = primal
        .params
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            seeds.args.get(i).copied().unwrap_or(false) && has_tangent(types, t) && !is_constant(i)
        })
        .collect();
    for (i, (&p, &t)) in primal.param_values().iter().zip(&primal.params).enumerate() {
        if seeded[i] {
            let name = primal.values[p].name.as_ref().map(|n| format!("{n}_seed"));
            params.push((name, tangent_type(types, t)));
        }
    }
    let mut outs = vec![primal.ret.unwrap_or(TypeTable::UNIT)];
    for (i, &t) in primal.params.iter().enumerate() {
        outs.push(if is_constant(i) { TypeTable::UNIT } else { tangent_type(types, t) });
    }
    let ret = types.intern(Type::Tuple(outs));
    let mut base = format!("{}$vjp", primal.name);
    let mut n = 1;
    while derived.module.func_by_name(&base).is_some() {
        n += 1;
        base = format!("{}$vjp{n}", primal.name);
    }
    let types = &mut derived.module.types;
    let mut e = Emit::new(Function::new(&base, &params, Some(ret)));
    e.span = primal.span;
    let pv: Vec<Value> = e.func.param_values().to_vec();
    let np = primal.params.len();
    let xs = &pv[..np];
    let mut next = np;
    let result_seed = if result_seeded {
        next += 1;
        Some(pv[next - 1])
    } else {
        None
    };
    let mut arg_seeds = vec![None; np];
    for (i, s) in arg_seeds.iter_mut().enumerate() {
        if seeded[i] {
            *s = Some(pv[next]);
            next += 1;
        }
    }
    // Zero shadows for the arguments.
    let mut shadows: Vec<Vec<Value>> = Vec::new();
    let mut fargs: Vec<Value> = xs.to_vec();
    // The array leaves made shadows so far: (type, array, shadow).
    let mut arrays_met: Vec<(TypeId, Value, Value)> = Vec::new();
    for (i, &t) in primal.params.iter().enumerate() {
        let mut list = Vec::new();
        if is_constant(i) {
            shadows.push(list);
            continue;
        }
        // An array that is the same array as one met before (an argument, or a field
        // of one) takes its shadow: one address, one shadow (LANGUAGE.md §7), so that
        // `f(a, a)` differentiates as it does inside a program.
        for leaf in fdata_leaves(types, t) {
            let part = primal_extract(&mut e, types, xs[i], &leaf.path);
            let is_array = types.as_array(leaf.ty).is_some();
            let earlier: Vec<(Value, Value)> = arrays_met
                .iter()
                .filter(|&&(ty, _, _)| is_array && ty == leaf.ty)
                .map(|&(_, p, s)| (p, s))
                .collect();
            let s = if earlier.is_empty() {
                zero_shadow(&mut e, types, leaf.ty, part)?
            } else {
                let join = e.func.add_block();
                let shadow_ty = tangent_type(types, leaf.ty);
                let shared = e.func.add_block_param(join, shadow_ty, None);
                for (other, shadow) in earlier {
                    let same = e.val(Op::SharesMemory, vec![other, part], TypeTable::BOOL);
                    let next = e.func.add_block();
                    let block = e.block;
                    e.func.set_terminator(
                        block,
                        Terminator::Branch {
                            cond: same,
                            then_dest: mcir_ir::BlockCall { block: join, args: vec![shadow] },
                            else_dest: mcir_ir::BlockCall { block: next, args: Vec::new() },
                        },
                        primal.span,
                    );
                    e.block = next;
                }
                let fresh = zero_shadow(&mut e, types, leaf.ty, part)?;
                let block = e.block;
                e.func.set_terminator(
                    block,
                    Terminator::Jump(mcir_ir::BlockCall { block: join, args: vec![fresh] }),
                    primal.span,
                );
                e.block = join;
                shared
            };
            if is_array {
                arrays_met.push((leaf.ty, part, s));
            }
            list.push(s);
        }
        for s in &list {
            e.name(*s, primal.values[primal.param_values()[i]].name.as_ref().map(|n| format!("d{n}")));
        }
        fargs.extend(list.iter().copied());
        shadows.push(list);
    }
    let constant_flags: Vec<bool> = (0..np).map(is_constant).collect();
    let variants = split_on_aliasing(
        derived_copied(&derived.copied, f, &constant_flags),
        rule,
        &mut e,
        types,
        &primal.params,
        xs,
    );
    for (rule, restored, block) in variants {
        e.block = block;
        // Forward pass.
        let saved = save_restored(&mut e, &primal.params, xs, &restored);
        let out = e.val(Op::Call(rule.fwd), fargs.clone(), rule.fwd_ret);
        let mut k = 0;
        let mut y = None;
        let mut y_shadows = Vec::new();
        if let Some(r) = primal.ret {
            y = Some(e.tuple_get(types, out, 0));
            k = 1;
            for _ in fdata_leaves(types, r) {
                y_shadows.push(e.tuple_get(types, out, k));
                k += 1;
            }
        }
        let tape = e.tuple_get(types, out, k);
        e.name(tape, Some("tape".into()));
        // Cotangents of the arguments' state after the call go into their shadows; their
        // rdata parts add to the gradient directly (scalars are never mutated).
        let mut extra_rdata: Vec<Vec<Option<Value>>> = vec![Vec::new(); np];
        for (i, &t) in primal.params.iter().enumerate() {
            let Some(seed) = arg_seeds[i] else { continue };
            for leaf in rdata_leaves(types, t) {
                let v = tangent_extract(&mut e, types, seed, &leaf.path);
                extra_rdata[i].push(Some(v));
            }
            for (j, leaf) in fdata_leaves(types, t).into_iter().enumerate() {
                let sd = tangent_extract(&mut e, types, seed, &leaf.path);
                add_into_shadow(&mut e, types, leaf.ty, shadows[i][j], sd)?;
            }
        }
        let mut dys = Vec::new();
        if let (Some(r), Some(seed)) = (primal.ret, result_seed) {
            for leaf in rdata_leaves(types, r) {
                dys.push(tangent_extract(&mut e, types, seed, &leaf.path));
            }
            for (j, leaf) in fdata_leaves(types, r).into_iter().enumerate() {
                let sd = tangent_extract(&mut e, types, seed, &leaf.path);
                add_into_shadow(&mut e, types, leaf.ty, y_shadows[j], sd)?;
            }
        } else if let Some(r) = primal.ret {
            for _ in rdata_leaves(types, r) {
                dys.push(e.fconst(0.0));
            }
        }
        // The value as the forward pass left it: the reverse pass restores the memory it
        // overwrote, which a result may share (an array written after it was made, or an
        // argument returned), so a result that holds memory is copied first.
        let y = match (y, primal.ret) {
            (Some(y), Some(r)) if holds_memory(types, r) => Some(snapshot(&mut e, types, r, y)),
            (y, _) => y,
        };
        // Reverse pass.
        let mut rev_args = vec![tape];
        rev_args.extend(dys);
        let rd = e.func.push_inst(e.block, Op::Call(rule.rev), rev_args, rule.rev_ret, primal.span);
        let mut items = vec![match y {
            Some(y) => y,
            None => e.unit(),
        }];
        let mut k = 0u32;
        for (i, &t) in primal.params.iter().enumerate() {
            let mut rdata = Vec::new();
            for (j, _) in rdata_leaves(types, t).into_iter().enumerate() {
                let mut v = match rd {
                    Some(rd) => e.tuple_get(types, rd, k),
                    None => e.fconst(0.0),
                };
                k += 1;
                if let Some(Some(extra)) = extra_rdata[i].get(j) {
                    v = e.add(v, *extra);
                }
                rdata.push(v);
            }
            if is_constant(i) {
                items.push(e.unit());
                continue;
            }
            let g =
                build_tangent(&mut e, types, t, &mut rdata.into_iter(), &mut shadows[i].clone().into_iter());
            let name = primal.values[primal.param_values()[i]].name.as_ref().map(|n| format!("{n}_grad"));
            items.push(e.name(g, name));
        }
        put_back(&mut e, xs, &saved);
        let result = e.val(Op::TupleNew, items, ret);
        let block = e.block;
        e.func.set_terminator(block, Terminator::Return(Some(result)), primal.span);
    }
    let id = derived.module.add_function(e.func);
    if let Err(err) = mcir_ir::verify_function(&derived.module, &derived.module.funcs[id]) {
        return Err(AdError::internal(
            &primal.name,
            format!("the VJP driver does not verify: {}", err.message),
        ));
    }
    Ok(id)
}

/// The entry rule that leaves arguments for its caller to restore, if `derived` has one
/// for `f` with these constants.
fn derived_copied<'a>(
    copied: &'a Option<crate::CopiedEntryRule>,
    f: FuncId,
    constant: &[bool],
) -> Option<&'a crate::CopiedEntryRule> {
    copied.as_ref().filter(|c| c.func == f && c.constant == constant)
}

/// The rules a driver runs, each with the arguments it restores from copies and each in
/// the block the driver's body fills up to its `ret`: `rule` alone, or, where `copied`
/// applies, that rule when no restored argument is the same array as another argument
/// of its type (tested with `array.shares` where two such exist) and `rule` otherwise.
fn split_on_aliasing(
    copied: Option<&crate::CopiedEntryRule>,
    rule: RuleIds,
    e: &mut Emit,
    types: &TypeTable,
    params: &[TypeId],
    xs: &[Value],
) -> Vec<(RuleIds, Vec<bool>, mcir_ir::Block)> {
    let Some(copied) = copied else { return vec![(rule, Vec::new(), e.block)] };
    let mut aliased: Option<Value> = None;
    for (i, &t) in params.iter().enumerate() {
        if !copied.restored.get(i).copied().unwrap_or(false) {
            continue;
        }
        for (j, &u) in params.iter().enumerate() {
            // Each pair once: a restored argument against those before it, and against
            // the unrestored ones after it.
            let restored_j = copied.restored.get(j).copied().unwrap_or(false);
            if j == i || u != t || (j > i && restored_j) || types.as_array(t).is_none() {
                continue;
            }
            let same = e.val(Op::SharesMemory, vec![xs[i], xs[j]], TypeTable::BOOL);
            aliased = Some(match aliased {
                None => same,
                Some(a) => {
                    let yes = e.val(Op::BConst(true), vec![], TypeTable::BOOL);
                    e.val(Op::Select, vec![a, yes, same], TypeTable::BOOL)
                }
            });
        }
    }
    let apart = (copied.rule.clone(), copied.restored.clone());
    let Some(aliased) = aliased else { return vec![(apart.0, apart.1, e.block)] };
    let (one, other) = (e.func.add_block(), e.func.add_block());
    let block = e.block;
    e.func.set_terminator(
        block,
        Terminator::Branch {
            cond: aliased,
            then_dest: mcir_ir::BlockCall { block: other, args: Vec::new() },
            else_dest: mcir_ir::BlockCall { block: one, args: Vec::new() },
        },
        e.span,
    );
    e.block = one;
    vec![(apart.0, apart.1, one), (rule, Vec::new(), other)]
}

/// Copies of the arguments marked `restored`, made before the forward pass.
fn save_restored(e: &mut Emit, params: &[TypeId], xs: &[Value], restored: &[bool]) -> Vec<(usize, Value)> {
    (0..params.len())
        .filter(|&i| restored.get(i).copied().unwrap_or(false))
        .map(|i| (i, e.val(Op::ArrayCopy, vec![xs[i]], params[i])))
        .collect()
}

/// Puts the copies [`save_restored`] made back into their arguments.
fn put_back(e: &mut Emit, xs: &[Value], saved: &[(usize, Value)]) {
    for &(i, copy) in saved {
        e.eff(Op::CopyInto, vec![xs[i], copy]);
    }
}

/// Whether a value of type `t` holds memory (an array, a cell, a `mut struct`, a stack).
fn holds_memory(types: &TypeTable, t: TypeId) -> bool {
    match types.get(t) {
        Type::Scalar(_) => false,
        Type::Array { .. } | Type::Ref(_) | Type::Stack(_) => true,
        Type::Tuple(items) => items.iter().any(|&i| holds_memory(types, i)),
        Type::Struct(s) => {
            let def = types.struct_def(*s);
            def.mutable || def.fields.iter().any(|&(_, f)| holds_memory(types, f))
        }
    }
}

/// A copy of `v` that shares no memory with it: arrays copied, cells and records made
/// afresh with copies of their contents. (Program types are not recursive, so this ends.)
fn snapshot(e: &mut Emit, types: &mut TypeTable, t: TypeId, v: Value) -> Value {
    if !holds_memory(types, t) {
        return v;
    }
    match types.get(t).clone() {
        Type::Array { .. } => e.val(Op::ArrayCopy, vec![v], t),
        Type::Ref(inner) => {
            let content = e.val(Op::RefLoad, vec![v], inner);
            let copy = snapshot(e, types, inner, content);
            e.val(Op::RefNew, vec![copy], t)
        }
        Type::Tuple(items) => {
            let fields = (0..items.len())
                .map(|i| {
                    let x = e.tuple_get(types, v, i as u32);
                    snapshot(e, types, items[i], x)
                })
                .collect();
            e.val(Op::TupleNew, fields, t)
        }
        Type::Struct(s) => {
            let def = types.struct_def(s).clone();
            let fields = def
                .fields
                .iter()
                .enumerate()
                .map(|(i, &(_, ft))| {
                    let op = if def.mutable { Op::MutLoad(s, i as u32) } else { Op::StructGet(s, i as u32) };
                    let x = e.val(op, vec![v], ft);
                    snapshot(e, types, ft, x)
                })
                .collect();
            e.val(Op::StructNew(s), fields, t)
        }
        Type::Scalar(_) | Type::Stack(_) => v,
    }
}

/// Adds `f$grad` for the primal function `f`, which returns `f64`: the gradient with the
/// caller's memory as the shadows of array arguments, so that nothing is allocated for
/// them and nothing copied back. Its parameters are `f`'s, then the result's cotangent,
/// then one shadow per array parameter that is not `constant`, which the caller zeroes
/// (the gradient is added into it); it returns `(value, rdata..)` with the cotangent of
/// every `f64` leaf of the parameters that are not constant, in order. Parameters with
/// other addresses (refs, records) get zero shadows of their own, as in [`vjp_driver`].
pub fn gradient_driver(derived: &mut Derived, f: FuncId, constant: &[bool]) -> Result<FuncId, AdError> {
    let primal = derived.module.funcs[f].clone();
    let is_constant = |i: usize| constant.get(i).copied().unwrap_or(false);
    let rule = if constant.iter().any(|&c| c) {
        match &derived.entry {
            Some(e) if e.func == f && e.constant == constant => e.rule.clone(),
            _ => {
                return Err(AdError::internal(
                    &primal.name,
                    "no rule was derived for these constant arguments".to_string(),
                ))
            }
        }
    } else {
        derived.rule(f).clone()
    };
    let types = &mut derived.module.types;
    if primal.ret != Some(TypeTable::F64) {
        return Err(AdError::internal(
            &primal.name,
            "a gradient driver for a function not returning f64".into(),
        ));
    }
    let mut params: Vec<(Option<String>, TypeId)> = Vec::new();
    for (&p, &t) in primal.param_values().iter().zip(&primal.params) {
        params.push((primal.values[p].name.clone(), t));
    }
    params.push((Some("result_seed".into()), TypeTable::F64));
    let own_shadow = |types: &TypeTable, i: usize, t: TypeId| {
        !is_constant(i) && types.as_array(t).is_some() && has_tangent(types, t)
    };
    for (i, (&p, &t)) in primal.param_values().iter().zip(&primal.params).enumerate() {
        if own_shadow(types, i, t) {
            params.push((primal.values[p].name.as_ref().map(|n| format!("d{n}")), t));
        }
    }
    let mut outs = vec![TypeTable::F64];
    for (i, &t) in primal.params.iter().enumerate() {
        if !is_constant(i) {
            outs.extend(rdata_leaves(types, t).iter().map(|_| TypeTable::F64));
        }
    }
    let ret = types.intern(Type::Tuple(outs));
    let name = format!("{}$grad", primal.name);
    let types = &mut derived.module.types;
    let mut e = Emit::new(Function::new(&name, &params, Some(ret)));
    e.span = primal.span;
    let pv: Vec<Value> = e.func.param_values().to_vec();
    let np = primal.params.len();
    let xs = &pv[..np];
    let seed = pv[np];
    let mut given = pv[np + 1..].iter().copied();
    // The shadows: the caller's for arrays, zero ones of their own for other addresses.
    let mut fargs: Vec<Value> = xs.to_vec();
    for (i, &t) in primal.params.iter().enumerate() {
        if is_constant(i) {
            continue;
        }
        if own_shadow(types, i, t) {
            fargs.extend(given.next());
            continue;
        }
        for leaf in fdata_leaves(types, t) {
            let part = primal_extract(&mut e, types, xs[i], &leaf.path);
            fargs.push(zero_shadow(&mut e, types, leaf.ty, part)?);
        }
    }
    let constant_flags: Vec<bool> = (0..np).map(is_constant).collect();
    let variants = split_on_aliasing(
        derived_copied(&derived.copied, f, &constant_flags),
        rule,
        &mut e,
        types,
        &primal.params,
        xs,
    );
    for (rule, restored, block) in variants {
        e.block = block;
        let saved = save_restored(&mut e, &primal.params, xs, &restored);
        let out = e.val(Op::Call(rule.fwd), fargs.clone(), rule.fwd_ret);
        let y = e.tuple_get(types, out, 0);
        let tape = e.tuple_get(types, out, 1);
        let rd = e.func.push_inst(e.block, Op::Call(rule.rev), vec![tape, seed], rule.rev_ret, primal.span);
        let mut items = vec![y];
        let mut k = 0u32;
        for (i, &t) in primal.params.iter().enumerate() {
            for _ in rdata_leaves(types, t) {
                if !is_constant(i) {
                    items.push(match rd {
                        Some(rd) => e.tuple_get(types, rd, k),
                        None => e.fconst(0.0),
                    });
                }
                k += 1;
            }
        }
        put_back(&mut e, xs, &saved);
        let result = e.val(Op::TupleNew, items, ret);
        let block = e.block;
        e.func.set_terminator(block, Terminator::Return(Some(result)), primal.span);
    }
    let id = derived.module.add_function(e.func);
    if let Err(err) = mcir_ir::verify_function(&derived.module, &derived.module.funcs[id]) {
        return Err(AdError::internal(
            &primal.name,
            format!("the gradient driver does not verify: {}", err.message),
        ));
    }
    Ok(id)
}

/// A fresh zero shadow for the address-identified value `v` of type `t`, mirroring the
/// structure of what it holds.
pub(crate) fn zero_shadow(
    e: &mut Emit,
    types: &mut TypeTable,
    t: TypeId,
    v: Value,
) -> Result<Value, AdError> {
    let sty = tangent_type(types, t);
    match types.get(t).clone() {
        Type::Array { .. } => Ok(e.val(Op::ZerosLike, vec![v], sty)),
        Type::Ref(inner) => {
            let content = e.val(Op::RefLoad, vec![v], inner);
            let tan = zero_tangent(e, types, inner, content)?;
            Ok(e.val(Op::RefNew, vec![tan], sty))
        }
        Type::Struct(s) => {
            let ss = shadow_struct(types, s)?;
            let fields = types.struct_def(s).fields.clone();
            let mut tans = Vec::new();
            for (i, (_, ft)) in fields.into_iter().enumerate() {
                let c = e.val(Op::MutLoad(s, i as u32), vec![v], ft);
                tans.push(zero_tangent(e, types, ft, c)?);
            }
            Ok(e.val(Op::StructNew(ss), tans, sty))
        }
        _ => Err(AdError::internal("", format!("no shadow for a {}", types.display(t)))),
    }
}

/// The zero tangent of the value `v` of type `t`.
fn zero_tangent(e: &mut Emit, types: &mut TypeTable, t: TypeId, v: Value) -> Result<Value, AdError> {
    if !has_tangent(types, t) {
        return Ok(e.unit());
    }
    if types.is_address(t) {
        return zero_shadow(e, types, t, v);
    }
    let n = match types.get(t).clone() {
        Type::Scalar(_) => return Ok(e.fconst(0.0)),
        Type::Tuple(items) => items.len(),
        Type::Struct(_) => types.as_struct(t).map(|(_, d)| d.fields.len()).unwrap_or(0),
        _ => 0,
    };
    let mut items = Vec::new();
    for i in 0..n {
        let part = primal_extract(e, types, v, &[i as u32]);
        let pt = e.ty(part);
        items.push(zero_tangent(e, types, pt, part)?);
    }
    Ok(e.tuple(types, items))
}

/// Adds the tangent `sd` into the shadow `s` of an address of type `t`, in place.
fn add_into_shadow(
    e: &mut Emit,
    types: &mut TypeTable,
    t: TypeId,
    s: Value,
    sd: Value,
) -> Result<(), AdError> {
    match types.get(t).clone() {
        Type::Array { .. } => {
            e.eff(Op::AddInto, vec![s, sd]);
            Ok(())
        }
        Type::Ref(inner) => {
            let tt = tangent_type(types, inner);
            let cur = e.val(Op::RefLoad, vec![s], tt);
            let add = e.val(Op::RefLoad, vec![sd], tt);
            let new = add_tangent(e, types, inner, cur, add)?;
            e.eff(Op::RefStore, vec![s, new]);
            Ok(())
        }
        Type::Struct(sid) => {
            let ss = shadow_struct(types, sid)?;
            let fields = types.struct_def(sid).fields.clone();
            for (i, (_, ft)) in fields.into_iter().enumerate() {
                if !has_tangent(types, ft) {
                    continue;
                }
                let tt = tangent_type(types, ft);
                let cur = e.val(Op::MutLoad(ss, i as u32), vec![s], tt);
                let add = e.val(Op::MutLoad(ss, i as u32), vec![sd], tt);
                let new = add_tangent(e, types, ft, cur, add)?;
                e.eff(Op::MutStore(ss, i as u32), vec![s, new]);
            }
            Ok(())
        }
        _ => Err(AdError::internal("", format!("no shadow for a {}", types.display(t)))),
    }
}

/// `cur + add` for tangents of type `t`: scalars add, shadows are incremented in place.
fn add_tangent(
    e: &mut Emit,
    types: &mut TypeTable,
    t: TypeId,
    cur: Value,
    add: Value,
) -> Result<Value, AdError> {
    if !has_tangent(types, t) {
        return Ok(cur);
    }
    if types.is_address(t) {
        add_into_shadow(e, types, t, cur, add)?;
        return Ok(cur);
    }
    let fields: Vec<TypeId> = match types.get(t).clone() {
        Type::Scalar(_) => return Ok(e.add(cur, add)),
        Type::Tuple(items) => items,
        Type::Struct(_) => {
            types.as_struct(t).map(|(_, d)| d.fields.iter().map(|f| f.1).collect()).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let mut items = Vec::new();
    for (i, ft) in fields.into_iter().enumerate() {
        let c = e.tuple_get(types, cur, i as u32);
        let a = e.tuple_get(types, add, i as u32);
        items.push(add_tangent(e, types, ft, c, a)?);
    }
    Ok(e.tuple(types, items))
}

/// Adds `f$probe` for the primal function `f`: it builds zero shadows for the arguments,
/// runs the forward pass only, and returns `(forward output, argument shadows..)`, so
/// that a checker can compare the structure of the shadows with that of the primal data
/// (one shadow per address, aliasing preserved).
pub fn probe_driver(derived: &mut Derived, f: FuncId) -> Result<FuncId, AdError> {
    let primal = derived.module.funcs[f].clone();
    let rule = derived.rule(f).clone();
    let types = &mut derived.module.types;
    let params: Vec<(Option<String>, TypeId)> = primal
        .param_values()
        .iter()
        .zip(&primal.params)
        .map(|(&p, &t)| (primal.values[p].name.clone(), t))
        .collect();
    let mut outs = vec![rule.fwd_ret];
    for &t in &primal.params {
        for leaf in fdata_leaves(types, t) {
            outs.push(tangent_type(types, leaf.ty));
        }
    }
    let ret = types.intern(Type::Tuple(outs));
    let name = format!("{}$probe", primal.name);
    let mut e = Emit::new(Function::new(&name, &params, Some(ret)));
    e.span = primal.span;
    let xs: Vec<Value> = e.func.param_values().to_vec();
    let mut shadows = Vec::new();
    for (i, &t) in primal.params.iter().enumerate() {
        for leaf in fdata_leaves(types, t) {
            let part = primal_extract(&mut e, types, xs[i], &leaf.path);
            shadows.push(zero_shadow(&mut e, types, leaf.ty, part)?);
        }
    }
    let mut fargs = xs.clone();
    fargs.extend(shadows.iter().copied());
    let out = e.val(Op::Call(rule.fwd), fargs, rule.fwd_ret);
    let mut items = vec![out];
    items.extend(shadows);
    let result = e.val(Op::TupleNew, items, ret);
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(Some(result)), primal.span);
    let id = derived.module.add_function(e.func);
    if let Err(err) = mcir_ir::verify_function(&derived.module, &derived.module.funcs[id]) {
        return Err(AdError::internal(&primal.name, format!("the probe does not verify: {}", err.message)));
    }
    Ok(id)
}
