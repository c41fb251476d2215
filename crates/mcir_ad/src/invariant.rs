//! What a recursive function passes on unchanged to itself is recorded once per call
//! tree, not once per activation.
//!
//! A recursive rule's record holds the records of the calls it made (`record.rs`), so a
//! call tree keeps one record per activation. When every call of the function to itself
//! passes an argument on as it was given (the array `v` of `combine(v, lo, mid)`, and
//! its shadow), and the reverse pass reads that argument from the record, every record
//! of the tree holds the same value. The rule then becomes two pairs of passes:
//!
//! - `f$fwd$nested` and `f$rev$nested` are the passes as derived, whose record
//!   `f$tape$nested` leaves those fields out: the reverse pass takes the values as
//!   parameters instead and passes them on to the calls it makes to itself;
//! - `f$fwd` and `f$rev`, which the rest of the module calls, wrap them: the forward
//!   pass records the nested record and the invariant values once (`f$tape` has the
//!   fields `nested` and one per value), and the reverse pass hands them over.
//!
//! A divide-and-conquer gradient over 65 536 leaves keeps 2 MB less per call this way,
//! and its reverse pass, which waits on memory, reads that much less.

use crate::RuleIds;
use mcir_ir::{FuncId, Function, Module, Op, StructDef, Terminator, Type, TypeId, Value};
use std::collections::{HashMap, HashSet};

/// Rewrites `rule` (a derived rule, its passes built) as described in the module docs
/// when it qualifies; otherwise leaves the module as it is.
pub(crate) fn record_invariants_once(module: &mut Module, rule: &RuleIds) {
    let Some(plan) = Plan::of(module, rule) else { return };
    let (nested_sid, nested_ty) = module.types.declare_struct(StructDef {
        name: format!("{}$tape$nested", rule.name),
        mutable: false,
        fields: Vec::new(),
    });
    let map = TypeMap::new(&mut module.types, rule.tape_ty, nested_ty, &plan.types_to_map);
    let tape_def = module.types.struct_def(rule.tape_sid).clone();
    // The nested record: the fields of the rule's record but the invariant ones.
    let mut kept_index = HashMap::new();
    let mut nested_fields = Vec::new();
    for (j, (name, ty)) in tape_def.fields.iter().enumerate() {
        if !plan.fields.contains_key(&j) {
            kept_index.insert(j, nested_fields.len());
            nested_fields.push((name.clone(), map.of(*ty)));
        }
    }
    module.types.struct_def_mut(nested_sid).fields = nested_fields;
    let fwd = module.funcs[rule.fwd].clone();
    let rev = module.funcs[rule.rev].clone();
    let nested_fwd_ret = map.of(rule.fwd_ret);
    let mut invariant: Vec<(usize, usize)> = plan.fields.iter().map(|(&j, &k)| (j, k)).collect();
    invariant.sort_unstable();
    let fwd_params = fwd.param_values().to_vec();
    let invariant_types: Vec<TypeId> =
        invariant.iter().map(|&(_, k)| fwd.value_type(fwd_params[k])).collect();

    let nested_fwd_id =
        module.add_function(Function::new(&format!("{}$nested", fwd.name), &[], Some(nested_fwd_ret)));
    let nested_rev_id = module.add_function(Function::new(&format!("{}$nested", rev.name), &[], rev.ret));

    // `f$fwd$nested`: the forward pass, calling itself, building the nested record.
    let mut nf = fwd.clone();
    nf.name = format!("{}$nested", fwd.name);
    nf.ret = Some(nested_fwd_ret);
    for v in nf.values.keys().collect::<Vec<_>>() {
        nf.values[v].ty = map.of(nf.values[v].ty);
    }
    for i in placed(&nf) {
        let d = &mut nf.insts[i];
        match d.op {
            Op::StructNew(s) if s == rule.tape_sid => {
                d.op = Op::StructNew(nested_sid);
                d.args = d
                    .args
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| !plan.fields.contains_key(j))
                    .map(|(_, &a)| a)
                    .collect();
            }
            Op::Call(g) if g == rule.fwd => d.op = Op::Call(nested_fwd_id),
            _ => {}
        }
    }
    module.funcs[nested_fwd_id] = crate::dce::remove_dead_code(nf);

    // `f$rev$nested`: the reverse pass, the invariant values its parameters.
    let mut nr = rev.clone();
    nr.name = format!("{}$nested", rev.name);
    for v in nr.values.keys().collect::<Vec<_>>() {
        nr.values[v].ty = map.of(nr.values[v].ty);
    }
    for p in nr.params.iter_mut() {
        *p = map.of(*p);
    }
    let entry = nr.entry();
    let mut extra = Vec::new();
    for (&(j, _), &ty) in invariant.iter().zip(&invariant_types) {
        nr.params.push(ty);
        extra.push(nr.add_block_param(
            entry,
            ty,
            tape_def.fields[j].0.rsplit_once('_').map(|p| p.0.to_string()),
        ));
    }
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let mut dropped = HashSet::new();
    for i in placed(&nr) {
        let d = &mut nr.insts[i];
        match d.op {
            Op::StructGet(s, j) if s == rule.tape_sid => {
                match invariant.iter().position(|&(f, _)| f == j as usize) {
                    Some(n) => {
                        if let Some(r) = d.result {
                            subst.insert(r, extra[n]);
                        }
                        dropped.insert(i);
                    }
                    None => d.op = Op::StructGet(nested_sid, kept_index[&(j as usize)] as u32),
                }
            }
            Op::Call(g) if g == rule.rev => {
                d.op = Op::Call(nested_rev_id);
                d.args.extend(extra.iter().copied());
            }
            _ => {}
        }
    }
    for b in nr.blocks.keys().collect::<Vec<_>>() {
        nr.blocks[b].insts.retain(|i| !dropped.contains(i));
    }
    nr.substitute(&subst);
    module.funcs[nested_rev_id] = crate::dce::remove_dead_code(nr);

    // The rule's record: the nested record, then the invariant values.
    let mut outer_fields = vec![("nested".to_string(), nested_ty)];
    outer_fields.extend(invariant.iter().map(|&(j, _)| tape_def.fields[j].clone()));
    module.types.struct_def_mut(rule.tape_sid).fields = outer_fields;

    // `f$fwd`: calls the nested pass and records its record with the invariant values.
    let named = |f: &Function| -> Vec<(Option<String>, TypeId)> {
        f.param_values().iter().map(|&v| (f.values[v].name.clone(), f.value_type(v))).collect()
    };
    let span = fwd.span;
    let mut wf = Function::new(&fwd.name, &named(&fwd), fwd.ret);
    wf.span = span;
    let e = wf.entry();
    let params = wf.param_values().to_vec();
    let r = wf.push_value(e, Op::Call(nested_fwd_id), params.clone(), nested_fwd_ret, span);
    let items = match module.types.get(rule.fwd_ret) {
        Type::Tuple(items) => items.clone(),
        _ => return,
    };
    let mut outs = Vec::new();
    for (k, &ty) in items.iter().enumerate() {
        outs.push(wf.push_value(e, Op::TupleGet(k as u32), vec![r], map.of(ty), span));
    }
    let nested = outs.pop().unwrap_or(r);
    let mut fields = vec![nested];
    fields.extend(invariant.iter().map(|&(_, k)| params[k]));
    let tape = wf.push_value(e, Op::StructNew(rule.tape_sid), fields, rule.tape_ty, span);
    wf.values[tape].name = Some("tape".to_string());
    outs.push(tape);
    let t = wf.push_value(e, Op::TupleNew, outs, rule.fwd_ret, span);
    wf.set_terminator(e, Terminator::Return(Some(t)), span);
    module.funcs[rule.fwd] = wf;

    // `f$rev`: reads the record and calls the nested pass.
    let mut wr = Function::new(&rev.name, &named(&rev), rev.ret);
    wr.span = rev.span;
    let e = wr.entry();
    let params = wr.param_values().to_vec();
    let nested = wr.push_value(e, Op::StructGet(rule.tape_sid, 0), vec![params[0]], nested_ty, span);
    let mut args = vec![nested];
    args.extend(params[1..].iter().copied());
    for (n, &ty) in invariant_types.iter().enumerate() {
        args.push(wr.push_value(e, Op::StructGet(rule.tape_sid, 1 + n as u32), vec![params[0]], ty, span));
    }
    let result = wr.push_inst(e, Op::Call(nested_rev_id), args, rev.ret, span);
    wr.set_terminator(e, Terminator::Return(result), span);
    module.funcs[rule.rev] = wr;
}

/// The instructions of `f`'s blocks. Those a pass removed stay in the arena, and may
/// read fields of the record that no longer exist.
fn placed(f: &Function) -> Vec<mcir_ir::Inst> {
    f.blocks.values().flat_map(|d| d.insts.iter().copied()).collect()
}

/// What qualifies a rule, and what it records once.
struct Plan {
    /// The invariant fields of the rule's record, each with the forward pass's parameter
    /// it holds.
    fields: HashMap<usize, usize>,
    /// The types of values of the passes that hold the rule's record.
    types_to_map: HashSet<TypeId>,
}

impl Plan {
    fn of(module: &Module, rule: &RuleIds) -> Option<Plan> {
        let fwd = &module.funcs[rule.fwd];
        let rev = &module.funcs[rule.rev];
        fn calls(f: &Function, g: FuncId) -> Vec<&mcir_ir::InstData> {
            live(f).filter(|d| matches!(d.op, Op::Call(h) if h == g)).collect()
        }
        let self_calls = calls(fwd, rule.fwd);
        if self_calls.is_empty() || calls(rev, rule.rev).is_empty() {
            return None;
        }
        let params = fwd.param_values();
        let passed_on: Vec<bool> =
            (0..params.len()).map(|k| self_calls.iter().all(|d| d.args.get(k) == Some(&params[k]))).collect();
        let unset = |v: Value| fwd.defining(v).is_some_and(|d| d.op == Op::Unset);
        let records: Vec<_> =
            live(fwd).filter(|d| matches!(d.op, Op::StructNew(s) if s == rule.tape_sid)).collect();
        if records.is_empty() {
            return None;
        }
        let n_fields = module.types.struct_def(rule.tape_sid).fields.len();
        if records.iter().any(|d| d.args.len() != n_fields) {
            return None;
        }
        let mut fields = HashMap::new();
        for j in 0..n_fields {
            let mut holds = None;
            let qualifies = records.iter().all(|d| {
                let a = d.args[j];
                if unset(a) {
                    return true;
                }
                match params.iter().position(|&p| p == a) {
                    Some(k) if passed_on[k] && holds.is_none_or(|h| h == k) => {
                        holds = Some(k);
                        true
                    }
                    _ => false,
                }
            });
            if let (true, Some(k)) = (qualifies, holds) {
                fields.insert(j, k);
            }
        }
        if fields.is_empty() {
            return None;
        }
        // Only the record itself, its stacks and the forward pass's result may hold it.
        let tape = rule.tape_ty;
        let mut types_to_map = HashSet::new();
        if live(fwd).any(|d| matches!(d.op, Op::StructGet(s, _) if s == rule.tape_sid)) {
            return None;
        }
        let value_types: HashSet<TypeId> =
            [fwd, rev].iter().flat_map(|f| f.values.values().map(|v| v.ty)).collect();
        for ty in value_types {
            if mentions(&module.types, ty, tape, &mut HashSet::new()) {
                let direct = ty == tape
                    || ty == rule.fwd_ret
                    || matches!(module.types.get(ty), Type::Stack(t) if *t == tape);
                if !direct {
                    return None;
                }
                types_to_map.insert(ty);
            }
        }
        for (_, ty) in &module.types.struct_def(rule.tape_sid).fields {
            if mentions(&module.types, *ty, tape, &mut HashSet::new()) {
                if !(*ty == tape || matches!(module.types.get(*ty), Type::Stack(t) if *t == tape)) {
                    return None;
                }
                types_to_map.insert(*ty);
            }
        }
        types_to_map.insert(rule.fwd_ret);
        Some(Plan { fields, types_to_map })
    }
}

/// The instructions of `f`'s blocks (the arena also holds ones passes have dropped).
fn live(f: &Function) -> impl Iterator<Item = &mcir_ir::InstData> {
    f.blocks.values().flat_map(|b| b.insts.iter().map(|&i| &f.insts[i]))
}

/// Whether type `t` is or holds `target`.
fn mentions(types: &mcir_ir::TypeTable, t: TypeId, target: TypeId, seen: &mut HashSet<TypeId>) -> bool {
    if t == target {
        return true;
    }
    if !seen.insert(t) {
        return false;
    }
    match types.get(t) {
        Type::Tuple(items) => items.iter().any(|&i| mentions(types, i, target, seen)),
        Type::Stack(e) | Type::Ref(e) => mentions(types, *e, target, seen),
        Type::Struct(s) => types.struct_def(*s).fields.iter().any(|f| mentions(types, f.1, target, seen)),
        Type::Scalar(_) | Type::Array { .. } => false,
    }
}

/// The types of the nested passes: the rule's record becomes the nested record.
struct TypeMap {
    map: HashMap<TypeId, TypeId>,
}

impl TypeMap {
    fn new(
        types: &mut mcir_ir::TypeTable,
        tape: TypeId,
        nested: TypeId,
        to_map: &HashSet<TypeId>,
    ) -> TypeMap {
        let mut map = HashMap::new();
        for &t in to_map {
            let mapped = match types.get(t).clone() {
                _ if t == tape => nested,
                Type::Stack(_) => types.intern(Type::Stack(nested)),
                Type::Tuple(items) => {
                    let items = items.iter().map(|&i| if i == tape { nested } else { i }).collect();
                    types.intern(Type::Tuple(items))
                }
                _ => t,
            };
            map.insert(t, mapped);
        }
        TypeMap { map }
    }

    fn of(&self, t: TypeId) -> TypeId {
        self.map.get(&t).copied().unwrap_or(t)
    }
}
