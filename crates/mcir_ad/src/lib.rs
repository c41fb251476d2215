//! Reverse-mode automatic differentiation of mcir IR, in the model of LANGUAGE.md §7.
//!
//! For every function `f` of a module, [`derive`] adds a *derived rule*: two ordinary IR
//! functions that the printer prints, the verifier checks and the interpreter runs.
//!
//! - `f$fwd(x.., dx..) -> (y, dy.., tape)` runs the primal on the arguments and their
//!   shadows (one per fdata leaf, see [`tangent`]), gives every fresh allocation a zeroed
//!   shadow, and pushes onto the tape (a struct `f$tape` of typed stacks, one per value
//!   the reverse pass reads, plus one for the path taken through joins) what its reverse
//!   pass needs.
//! - `f$rev(tape, ybar..) -> (xbar..)` takes the result's rdata, runs the adjoint of
//!   every op backwards along the recorded path, increments shadows in place, restores
//!   every piece of memory the forward pass overwrote, and returns the parameters' rdata.
//!
//! Calls use the callee's rule, so recursion needs nothing special. [`vjp_driver`] adds
//! a function `f$vjp` that builds zero shadows for the arguments, runs both passes with
//! the given cotangents, and returns the value with the cotangent of every argument.

#![deny(missing_docs)]

mod analysis;
mod axpy;
mod chains;
mod custom;
mod dce;
mod driver;
mod emit;
mod forward;
mod inert;
mod invariant;
mod jacobian;
mod linearize;
mod linearize_loops;
pub mod pushforward;
mod record;
mod reverse;
mod rules;
mod signs;
mod sink;
pub mod tangent;

pub use driver::{gradient_driver, probe_driver, vjp_driver, vjp_driver_with, SeedPattern};
pub use reverse::rule_name;

use mcir_ir::entity::EntityRef;
use mcir_ir::{FuncId, Function, Module, StructDef, StructId, Type, TypeId};
use std::fmt;

/// A failure to derive a rule: an internal inconsistency or an op that has no rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdError {
    /// The function being differentiated.
    pub func: String,
    /// What went wrong.
    pub message: String,
}

impl AdError {
    pub(crate) fn internal(func: &str, message: String) -> AdError {
        AdError { func: func.to_string(), message: format!("internal error: {message}") }
    }
}

impl fmt::Display for AdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot differentiate `{}`: {}", self.func, self.message)
    }
}

impl std::error::Error for AdError {}

/// Options of the transform.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Corrupts the reverse rule of the op with this name (see [`rule_name`]) by scaling
    /// its adjoint by 1.5 (or, for zero-derivative ops, passing the adjoint through), so
    /// that tests can show the rule checker catches a wrong rule.
    pub corrupt: Option<String>,
}

/// The functions and tape type of one derived rule.
#[derive(Clone, Debug)]
pub struct RuleIds {
    /// The primal function's name.
    pub name: String,
    /// `f$fwd`.
    pub fwd: FuncId,
    /// `f$rev`.
    pub rev: FuncId,
    /// The struct `f$tape`.
    pub tape_sid: StructId,
    /// Its type.
    pub tape_ty: TypeId,
    /// The return type of `f$fwd`.
    pub fwd_ret: TypeId,
    /// The return type of `f$rev`, if it returns anything.
    pub rev_ret: Option<TypeId>,
    /// Whether the primal function may write memory it was given, directly or through a
    /// call (`mcir_ir::effects::argument_writes`): a caller that passes it a fresh array
    /// and writes the array only before the call need not undo those writes
    /// (`forward::unrestored_arrays`).
    pub writes_arguments: bool,
}

/// A module with a derived rule for each of its functions.
#[derive(Clone, Debug)]
pub struct Derived {
    /// The primal functions followed by the derived ones.
    pub module: Module,
    /// The rule of each primal function, indexed by its id.
    pub rules: Vec<RuleIds>,
    /// The entry's rule for constant arguments, if one was asked for (see [`derive_with`]).
    pub entry: Option<EntryRule>,
    /// The entry's rule that leaves some arguments for its caller to restore from a copy,
    /// if it has such arguments (see [`derive_with`]).
    pub copied: Option<CopiedEntryRule>,
}

/// A rule of the entry function whose reverse pass does not undo its writes to the
/// parameters marked `restored`: its caller copies them on entry and puts the copies
/// back after the reverse pass, so the forward pass keeps none of the values those
/// writes overwrite (`forward::params_restorable_by_copy`). It is right only when none
/// of those arguments is the same array as another argument, which the caller tests
/// (`driver`), running [`Derived::rule`] (or the [`EntryRule`]) otherwise.
#[derive(Clone, Debug)]
pub struct CopiedEntryRule {
    /// The primal function.
    pub func: FuncId,
    /// Which of its parameters are constant (as for [`EntryRule`]).
    pub constant: Vec<bool>,
    /// Which of its parameters the caller restores.
    pub restored: Vec<bool>,
    /// The rule.
    pub rule: RuleIds,
}

/// A rule of one function specialised to some of its parameters being constant:
/// `f$fwd$const` takes no shadow for them, and neither pass spends work on them.
#[derive(Clone, Debug)]
pub struct EntryRule {
    /// The primal function.
    pub func: FuncId,
    /// Which of its parameters are constant.
    pub constant: Vec<bool>,
    /// The specialised rule.
    pub rule: RuleIds,
}

impl Derived {
    /// The rule of a primal function.
    pub fn rule(&self, f: FuncId) -> &RuleIds {
        &self.rules[f.index()]
    }
}

/// Derives the rule of every function of `module`. The result verifies.
pub fn derive(module: &Module, options: &Options) -> Result<Derived, AdError> {
    derive_with(module, options, None)
}

/// [`derive`], plus for `entry = (f, constant)` a rule of `f` in which the parameters
/// marked constant are not differentiated: its forward pass `f$fwd$const` takes no
/// shadow for them and the reverse pass `f$rev$const` spends no work on them. A constant
/// gets a zero shadow of its own, inside the rule, only where it comes to carry a
/// derivative (it escapes into a call, or values that depend on the other arguments are
/// written into it; see `analysis::varied_values`), so no derivative is lost. If `f`
/// has array arguments that its caller could restore from copies
/// (`forward::params_restorable_by_copy`), also a rule `f$fwd$copy`, `f$rev$copy` (for
/// the same constants) that does not undo its writes to them, for the drivers to run
/// when no such argument is another argument ([`CopiedEntryRule`]).
pub fn derive_with(
    module: &Module,
    options: &Options,
    entry: Option<(FuncId, Vec<bool>)>,
) -> Result<Derived, AdError> {
    // The primals are read from the module as given; the copy grows their rules.
    let primals: Vec<(FuncId, &Function)> = module.funcs.iter().collect();
    let mut module = module.clone();
    let writes = mcir_ir::effects::argument_writes(&module);
    // Declare every rule first: calls refer to them before they are built.
    let mut rules = Vec::new();
    for (id, f) in &primals {
        let mut rule = declare_rule(&mut module, f, "", &[]);
        rule.writes_arguments = writes.get(id.index()).is_none_or(|w| w.is_some());
        rules.push(rule);
    }
    for (fid, primal) in &primals {
        let rule = rules[fid.index()].clone();
        let (fwd, rev) = rule_passes(&mut module, &rules, &rule, *fid, primal, options, &[], &[])?;
        module.funcs[rule.fwd] = fwd;
        module.funcs[rule.rev] = rev;
    }
    for (fid, _) in &primals {
        if module.rule_of(*fid, "reverse").is_none() && module.rule_of(*fid, "checkpoint").is_none() {
            invariant::record_invariants_once(&mut module, &rules[fid.index()]);
        }
    }
    // The entry's own rules: for its constants, and one leaving arguments to be
    // restored from copies.
    let entry_primal = match &entry {
        Some((f, _)) => {
            Some(primals.iter().find(|(id, _)| id == f).map(|&(_, p)| p).ok_or_else(|| {
                AdError::internal("", format!("no function {} to differentiate", f.index()))
            })?)
        }
        None => None,
    };
    let entry_rule = |module: &mut Module,
                      f: FuncId,
                      primal: &Function,
                      suffix: &str,
                      constant: &[bool],
                      restored: &[bool]|
     -> Result<RuleIds, AdError> {
        let mut rule = declare_rule(module, primal, suffix, constant);
        rule.writes_arguments = rules[f.index()].writes_arguments;
        let (fwd, rev) = rule_passes(module, &rules, &rule, f, primal, options, constant, restored)?;
        module.funcs[rule.fwd] = fwd;
        module.funcs[rule.rev] = rev;
        Ok(rule)
    };
    let mut special = None;
    let mut copied = None;
    if let (Some((f, constant)), Some(primal)) = (entry, entry_primal) {
        if constant.contains(&true) {
            let rule = entry_rule(&mut module, f, primal, "$const", &constant, &[])?;
            special = Some(EntryRule { func: f, constant: constant.clone(), rule });
        }
        let derived_here =
            module.rule_of(f, "reverse").is_none() && module.rule_of(f, "checkpoint").is_none();
        let restored = if derived_here && options.corrupt.is_none() {
            forward::params_restorable_by_copy(&module.types, &rules, primal)
        } else {
            Vec::new()
        };
        if restored.contains(&true) {
            let rule = entry_rule(&mut module, f, primal, "$copy", &constant, &restored)?;
            copied = Some(CopiedEntryRule { func: f, constant, restored, rule });
        }
    }
    let extra: Vec<&RuleIds> =
        special.iter().map(|s| &s.rule).chain(copied.iter().map(|c| &c.rule)).collect();
    let module = inline_passes(module, &rules, &extra);
    if let Err(e) = mcir_ir::verify_module(&module) {
        return Err(AdError::internal(&e.func, format!("the derived IR does not verify: {}", e.message)));
    }
    Ok(Derived { module, rules, entry: special, copied })
}

/// The most instructions a pass may have to be inlined into the one pass that calls it.
const MAX_INLINED_PASS_INSTS: usize = 400;

/// `module` with every forward or reverse pass that is called from one place, is one
/// block and cannot fail inlined there (`mcir_ir::inline::inline_single_calls`), and the
/// passes it went into cleaned: the callee's tape record is then a struct the caller
/// builds and pushes, and reads fields of, and its results are the values they hold.
fn inline_passes(module: Module, rules: &[RuleIds], extra: &[&RuleIds]) -> Module {
    let mut passes = vec![false; module.funcs.len()];
    for r in rules.iter().chain(extra.iter().copied()) {
        passes[r.fwd.index()] = true;
        passes[r.rev.index()] = true;
    }
    let (mut module, inlined_into) =
        mcir_ir::inline::inline_single_calls(module, &passes, MAX_INLINED_PASS_INSTS);
    let ids: Vec<FuncId> = module.funcs.keys().collect();
    for id in ids {
        if inlined_into[id.index()] {
            let f = std::mem::replace(&mut module.funcs[id], Function::new("", &[], None));
            let mut f = mcir_ir::hoist::fold_and_hoist_derived(f, &module.types);
            if f.is_reverse_pass() {
                // The chains of adjoints that run through the inlined passes are shortened
                // across them; the coefficients that do not change in a loop leave it.
                f = axpy::fuse_scaled_accumulations(shorten_chains(
                    dce::remove_dead_code(axpy::factor_sums(f)),
                    &module.types,
                ));
            }
            module.funcs[id] = dce::remove_dead_code(f);
        }
    }
    module
}

/// Declares the tape and the two passes of a rule of `f` (named `f$fwd{suffix}`,
/// `f$rev{suffix}`), to be built later: calls refer to rules before they are built.
fn declare_rule(module: &mut Module, f: &Function, suffix: &str, constant: &[bool]) -> RuleIds {
    let (tape_sid, tape_ty) = module.types.declare_struct(StructDef {
        name: format!("{}$tape{suffix}", f.name),
        mutable: false,
        fields: Vec::new(),
    });
    let (fparams, fwd_ret) = forward::forward_signature(&mut module.types, f, tape_ty, constant);
    let (rparams, rev_ret) = reverse::reverse_signature(&mut module.types, f, tape_ty);
    let fwd = module.add_function(Function::new(&format!("{}$fwd{suffix}", f.name), &fparams, Some(fwd_ret)));
    let rev = module.add_function(Function::new(&format!("{}$rev{suffix}", f.name), &rparams, rev_ret));
    // Whether the function writes what it is given is set by the caller, which knows the
    // module's effects; until then it is assumed to.
    RuleIds { name: f.name.clone(), fwd, rev, tape_sid, tape_ty, fwd_ret, rev_ret, writes_arguments: true }
}

/// The two passes of `rule`, a rule of `primal` (function `fid`): from its hand-written
/// reverse or zero rule if it has one, by recomputation if its calls are checkpointed,
/// else derived.
#[allow(clippy::too_many_arguments)]
fn rule_passes(
    module: &mut Module,
    rules: &[RuleIds],
    rule: &RuleIds,
    fid: FuncId,
    primal: &Function,
    options: &Options,
    constant: &[bool],
    restored_by_caller: &[bool],
) -> Result<(Function, Function), AdError> {
    if let Some(mcir_ir::RuleKind::Checkpoint { inner }) = module.rule_of(fid, "checkpoint").cloned() {
        let inner_rule = rules[inner.index()].clone();
        return custom::checkpoint_passes(module, rule, inner, &inner_rule, primal, constant);
    }
    match module.rule_of(fid, "reverse").cloned() {
        Some(kind) => custom::reverse_passes(module, rule, fid, primal, &kind, constant),
        None => derive_function(module, rules, rule, primal, options, constant, restored_by_caller),
    }
}

/// Builds the two passes of `rule`, a rule of `primal` with the parameters marked
/// `constant` not differentiated and the writes to those marked `restored_by_caller` not
/// undone (see [`CopiedEntryRule`]). Calls go to the rules of `rules`.
fn derive_function(
    module: &mut Module,
    rules: &[RuleIds],
    rule: &RuleIds,
    primal: &Function,
    options: &Options,
    constant: &[bool],
    restored_by_caller: &[bool],
) -> Result<(Function, Function), AdError> {
    // A copy of the primal is made only where counting trips or linearizing branches
    // changes it (a straight-line function of 10⁵ lines is not copied).
    let copy = match analysis::count_loop_trips(primal) {
        Some(counted) => Some(counted),
        None if linearize::has_branches(primal) => Some(primal.clone()),
        None => None,
    };
    let counted_primal = copy.map(|f| {
        let varied = analysis::varied_values(&module.types, &f, constant, options.corrupt.is_some());
        linearize_loops::linearize_all(f, &varied)
    });
    let primal = counted_primal.as_ref().unwrap_or(primal);
    let edges = analysis::in_edges(primal);
    let keep_zero_ops = options.corrupt.is_some();
    let mut active = analysis::activity(&module.types, primal, keep_zero_ops);
    // A value that does not depend on the varying arguments passes no derivative back.
    let varied = analysis::varied_values(&module.types, primal, constant, keep_zero_ops);
    for (a, v) in active.iter_mut().zip(&varied) {
        *a &= *v;
    }
    linearize::clear_unreached_activity(primal, &mut active);
    let live = analysis::live_out(primal);
    let counted = analysis::counted_headers(primal, &edges);
    let counters = analysis::loop_counters(primal, &edges, &counted);
    let range_loops = counters.clone();
    let mut fw = forward::build_forward(
        module,
        rules,
        rule,
        primal,
        &edges,
        &counted,
        &counters,
        constant,
        restored_by_caller,
    )?;
    let (mut rev, slots, rev_stacks, pushes, path_slot, counter_slots, replayed) = {
        let mut rv = reverse::Reverse::new(
            rule,
            primal,
            &fw,
            &mut module.types,
            rules,
            active,
            varied,
            &live,
            options.corrupt.clone(),
            counters,
        );
        rv.counted = counted.clone();
        rv.build_all(&edges)?;
        rv.drop_pointless_paths();
        let path = |join: Option<mcir_ir::Block>| rv.path_slot(join);
        let path: std::collections::HashMap<Option<mcir_ir::Block>, usize> = fw
            .edge_marks
            .iter()
            .map(|&(_, _, join)| Some(join))
            .chain([None])
            .filter_map(|j| path(j).map(|s| (j, s)))
            .collect();
        let slots: Vec<(Option<mcir_ir::Value>, TypeId, String, bool)> =
            rv.slots.iter().map(|s| (s.fwd, s.ty, s.name.clone(), s.direct)).collect();
        let rev_stacks: Vec<mcir_ir::Value> = rv.slots.iter().map(|s| s.rev_stack).collect();
        let counter_slots = rv.counter_slots.clone();
        let replayed = std::mem::take(&mut rv.replayed);
        (rv.e.func, slots, rev_stacks, rv.pushes, path, counter_slots, replayed)
    };
    // The tape: create the stacks on entry to the forward pass, push what the reverse
    // pass pops at the end of each block, mark edges into joins and the return taken.
    let entry = fw.e.func.entry();
    let mut stacks = Vec::new();
    let mut created = 0;
    for (fv, ty, name, direct) in slots.iter() {
        if *direct {
            stacks.push(fv.unwrap_or(tape_placeholder()));
            continue;
        }
        let sty = module.types.intern(Type::Stack(*ty));
        let s = insert_at(&mut fw.e.func, entry, created, mcir_ir::Op::StackNew, vec![], sty, primal.span);
        created += 1;
        fw.e.func.values[s].name =
            Some(format!("{}_stack", name.rsplit_once('_').map(|p| p.0).unwrap_or(name)));
        stacks.push(s);
    }
    let static_tape = StaticTape::new(primal, &edges, &counted, range_loops);
    let mut bases = Reserved::default();
    let records = shared_records(&rev, &slots, &rev_stacks, &pushes, &static_tape);
    let record_of: std::collections::HashMap<usize, usize> =
        records.iter().enumerate().flat_map(|(n, r)| r.iter().map(move |&slot| (slot, n))).collect();
    // A record's slots are each pushed once: the value each pushes.
    let pushed_value: std::collections::HashMap<usize, mcir_ir::Value> =
        pushes.iter().filter(|p| record_of.contains_key(&p.2)).map(|&(_, fv, slot)| (slot, fv)).collect();
    // Slots whose values another slot's record holds (they read that slot's stack).
    let mut merged: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let mut placed: std::collections::HashSet<usize> = std::collections::HashSet::new();
    for &(b, fv, slot) in &pushes {
        if placed.contains(&slot) {
            continue;
        }
        let fb = fw.block_map[b.index()];
        // In a range loop, a block run once per iteration (or the header, once more)
        // stores its record at the iteration's index in room reserved before the loop.
        if let Some(at) = static_tape.place(b) {
            // The values one reverse block pops side by side, in the order they are
            // pushed: one record of them all, on the stack of the first.
            let lanes = record_of.get(&slot).map_or_else(|| vec![slot], |&n| records[n].clone());
            let first = lanes[0];
            let width = lanes.len() as i64;
            if let Some((offset, i)) = static_tape.index(&mut fw, &mut bases, at, first, stacks[first], width)
            {
                let mut args = vec![stacks[first], offset, i];
                for &lane in &lanes {
                    placed.insert(lane);
                    args.push(pushed_value.get(&lane).copied().unwrap_or(fv));
                    if lane != first {
                        merged.insert(lane, first);
                        stacks[lane] = stacks[first];
                    }
                }
                fw.e.func.push_inst(fb, mcir_ir::Op::StackPut, args, None, primal.span);
                continue;
            }
        }
        // A push that outgrows the memory limit fails where the value it keeps was made.
        let span = value_span(&fw.e.func, fv).unwrap_or(primal.span);
        fw.e.func.push_inst(fb, mcir_ir::Op::StackPush, vec![stacks[slot], fv], None, span);
    }
    // The reverse pass pops a record's values from the stack of its first, named for
    // what it now holds; the others' fields hold the same stack and are not read.
    let firsts: std::collections::BTreeSet<usize> = merged.values().copied().collect();
    for &first in &firsts {
        let field = &mut module.types.struct_def_mut(rule.tape_sid).fields[first].0;
        *field = format!("record_{first}");
        fw.e.func.values[stacks[first]].name = Some("record_stack".to_string());
        rev.values[rev_stacks[first]].name = Some("record_stack".to_string());
    }
    if !merged.is_empty() {
        let to: std::collections::HashMap<mcir_ir::Value, mcir_ir::Value> =
            merged.iter().map(|(&lane, &first)| (rev_stacks[lane], rev_stacks[first])).collect();
        let insts: Vec<mcir_ir::Inst> = rev.insts.iter().map(|(i, _)| i).collect();
        for i in insts {
            let d = &mut rev.insts[i];
            if d.op == mcir_ir::Op::StackPop {
                if let Some(&s) = d.args.first().and_then(|a| to.get(a)) {
                    d.args[0] = s;
                }
            }
        }
    }
    // The tape is complete once the entry block has computed the values it holds directly.
    let tape =
        fw.e.func
            .push_inst(
                entry,
                mcir_ir::Op::StructNew(rule.tape_sid),
                stacks.clone(),
                Some(rule.tape_ty),
                primal.span,
            )
            .unwrap_or(tape_placeholder());
    fw.e.func.values[tape].name = Some("tape".to_string());
    let path = |join: Option<mcir_ir::Block>| path_slot.get(&join).map(|&s| stacks[s]);
    for (eb, k, join) in fw.edge_marks.clone() {
        if replayed.contains(&join) {
            continue;
        }
        if let Some(path) = path(Some(join)) {
            fw.e.block = eb;
            let c = fw.e.iconst(k as i64);
            fw.e.eff(mcir_ir::Op::StackPush, vec![path, c]);
        }
    }
    for (eb, k, value) in fw.counter_marks.clone() {
        if let Some(Some(slot)) = counter_slots.get(k) {
            fw.e.block = eb;
            fw.e.eff(mcir_ir::Op::StackPush, vec![stacks[*slot], value]);
        }
    }
    let returns = fw.returns.clone();
    for (k, &r) in returns.iter().enumerate() {
        let fb = fw.block_map[r.index()];
        fw.e.block = fb;
        fw.e.span = primal.blocks[r].term_span;
        if returns.len() > 1 {
            if let Some(path) = path(None) {
                let c = fw.e.iconst(k as i64);
                fw.e.eff(mcir_ir::Op::StackPush, vec![path, c]);
            }
        }
        let mut items = Vec::new();
        if let mcir_ir::Terminator::Return(Some(v)) = primal.blocks[r].term {
            items.push(fw.fwd(v)?);
            items.extend(fw.shadows[v.index()].iter().copied());
        }
        items.push(tape);
        let t = fw.e.val(mcir_ir::Op::TupleNew, items, rule.fwd_ret);
        fw.e.func.set_terminator(fb, mcir_ir::Terminator::Return(Some(t)), primal.blocks[r].term_span);
    }
    let types = &module.types;
    let cleaned =
        dce::remove_dead_code(inert::bypass_inert_loops(dce::remove_dead_code(rev).into_simplified_cfg()));
    let origins = record_origins(&fw.e.func, primal.param_values().len(), &slots, &cleaned, rule.tape_sid);
    let cleaned = mcir_ir::memory::forward_elements_apart(
        mcir_ir::cse::eliminate_common_subexpressions(
            mcir_ir::hoist::hoist_in_derived(signs::sink_negations(cleaned), types),
            types,
        ),
        true,
        &|a, b| matches!((origins.get(&a), origins.get(&b)), (Some(x), Some(y)) if x.apart_from(y)),
    );
    // Shortened once loads are forwarded and equal values merged, so that the terms of
    // one adjoint meet (`x̄ · l + x̄ · l`, two reads of `l[j]` that CSE made one).
    let rev_func = dce::remove_dead_code(axpy::fuse_scaled_accumulations(shorten_chains(
        dce::remove_dead_code(axpy::factor_sums(cleaned)),
        types,
    )));
    // Records on stacks the reverse pass no longer reads are not made.
    let read = inert::tape_fields_read(&rev_func, rule.tape_sid);
    let unread: std::collections::HashSet<mcir_ir::Value> = slots
        .iter()
        .enumerate()
        .filter(|(k, s)| !s.3 && !read.contains(&(*k as u32)) && !merged.contains_key(k))
        .map(|(k, _)| stacks[k])
        .collect();
    let fwd_func = dce::remove_dead_code(inert::drop_records(fw.e.func, &unread)).into_simplified_cfg();
    let (fwd_func, rev_func) = jacobian::store_local_jacobian(&mut module.types, rule, fwd_func, rev_func);
    let (fwd_func, rev_func) =
        record::fix_record_fields(&mut module.types, rule.tape_sid, fwd_func, rev_func);
    Ok((sink::sink_stack_creation(fwd_func, rule.tape_sid), sink::sink_record_reads(rev_func)))
}

/// Where an array a reverse pass reads from its record comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// An argument of the primal function.
    Primal,
    /// The shadow of an argument.
    Shadow,
    /// An array the forward pass made (the value that made it).
    Made(mcir_ir::Value),
}

impl Origin {
    /// Whether arrays of the two origins are certainly different arrays. A caller never
    /// passes one array as an argument and as a shadow (shadows are made by the driver or
    /// by forward passes, fresh), and an array made by the forward pass did not exist
    /// when its arguments did. Two arguments, or two shadows, may be one array.
    fn apart_from(&self, other: &Origin) -> bool {
        match (self, other) {
            (Origin::Primal, Origin::Shadow) | (Origin::Shadow, Origin::Primal) => true,
            (Origin::Made(a), Origin::Made(b)) => a != b,
            (Origin::Made(_), _) | (_, Origin::Made(_)) => true,
            _ => false,
        }
    }
}

/// The origins of the arrays reverse pass `rev` reads from the fields of its record that
/// the forward pass `fwd` (whose first `n_primal` parameters are the primal's) fills with
/// a value directly: an argument, a shadow argument, or an array it made.
fn record_origins(
    fwd: &Function,
    n_primal: usize,
    slots: &[(Option<mcir_ir::Value>, TypeId, String, bool)],
    rev: &Function,
    tape_sid: mcir_ir::StructId,
) -> std::collections::HashMap<mcir_ir::Value, Origin> {
    let fwd_params = fwd.param_values();
    let origin = |v: mcir_ir::Value| -> Option<Origin> {
        if let Some(k) = fwd_params.iter().position(|&p| p == v) {
            return Some(if k < n_primal { Origin::Primal } else { Origin::Shadow });
        }
        let made = matches!(
            fwd.defining(v)?.op,
            mcir_ir::Op::ArrayFill
                | mcir_ir::Op::ZerosLike
                | mcir_ir::Op::ArrayLit(_)
                | mcir_ir::Op::ArrayCopy
        );
        made.then_some(Origin::Made(v))
    };
    let Some(&tape) = rev.param_values().first() else { return Default::default() };
    let mut out = std::collections::HashMap::new();
    for data in rev.blocks.values() {
        for &i in &data.insts {
            let d = &rev.insts[i];
            let (mcir_ir::Op::StructGet(sid, k), Some(r)) = (&d.op, d.result) else { continue };
            if *sid != tape_sid || d.args.first() != Some(&tape) {
                continue;
            }
            if let Some((Some(fv), _, _, true)) = slots.get(*k as usize) {
                if let Some(o) = origin(*fv) {
                    out.insert(r, o);
                }
            }
        }
    }
    out
}

/// `f`, a reverse pass, with its chains of adjoints shortened (`chains.rs`), then its
/// negations folded, the coefficients that do not change in a loop hoisted and equal
/// values merged.
fn shorten_chains(f: Function, types: &mcir_ir::TypeTable) -> Function {
    let f = signs::sink_negations(chains::shorten_chains(f));
    mcir_ir::cse::eliminate_common_subexpressions(mcir_ir::hoist::hoist_in_derived(f, types), types)
}

/// The slots whose values one reverse block pops side by side, each group as it becomes
/// one record per iteration: every slot pushed once, by one block of a range loop (a
/// place of the static tape), and popped once, in one reverse block, with nothing else
/// reading its stack; the slots of a group share the pushing block, the popping block
/// and the type. Their values go in the order the forward pass pushes them (the reverse
/// of the pops'), so that the record's last value is the first popped. One cursor then
/// serves them all, in both passes, where each stack took its own.
/// The source of the instruction that made `v` in `f`, if it has one.
fn value_span(f: &Function, v: mcir_ir::Value) -> Option<mcir_ir::Span> {
    f.defining(v).map(|d| d.span).filter(|s| s.end > 0)
}

fn shared_records(
    rev: &Function,
    slots: &[(Option<mcir_ir::Value>, TypeId, String, bool)],
    rev_stacks: &[mcir_ir::Value],
    pushes: &[(mcir_ir::Block, mcir_ir::Value, usize)],
    static_tape: &StaticTape,
) -> Vec<Vec<usize>> {
    use std::collections::{BTreeMap, HashMap, HashSet};
    let slot_of_stack: HashMap<mcir_ir::Value, usize> =
        rev_stacks.iter().enumerate().filter(|(k, _)| !slots[*k].3).map(|(k, &v)| (v, k)).collect();
    let mut pops: HashMap<usize, Vec<(mcir_ir::Block, usize)>> = HashMap::new();
    let mut other: HashSet<usize> = HashSet::new();
    for (b, data) in rev.blocks.iter() {
        for (pos, &i) in data.insts.iter().enumerate() {
            let d = &rev.insts[i];
            for (k, a) in d.args.iter().enumerate() {
                if let Some(&slot) = slot_of_stack.get(a) {
                    if d.op == mcir_ir::Op::StackPop && k == 0 {
                        pops.entry(slot).or_default().push((b, pos));
                    } else {
                        other.insert(slot);
                    }
                }
            }
        }
        other.extend(data.term.uses().into_iter().filter_map(|v| slot_of_stack.get(&v).copied()));
    }
    let mut pushed: HashMap<usize, Vec<mcir_ir::Block>> = HashMap::new();
    for &(b, _, slot) in pushes {
        pushed.entry(slot).or_default().push(b);
    }
    let mut groups: BTreeMap<(usize, usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
    for (slot, sites) in pops {
        let (Some(&[b]), [(rb, pos)]) = (pushed.get(&slot).map(|v| v.as_slice()), sites.as_slice()) else {
            continue;
        };
        if other.contains(&slot) || static_tape.place(b).is_none() {
            continue;
        }
        groups.entry((b.index(), rb.index(), slots[slot].1.index())).or_default().push((*pos, slot));
    }
    groups
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort_unstable();
            g.into_iter().rev().map(|(_, slot)| slot).collect()
        })
        .collect()
}

/// Where the forward pass may store a block's tape records by index instead of pushing
/// them: blocks of a range loop `for i in init..bound` (step 1, left only by its header's
/// test) that run exactly once per iteration, and its header, which runs once more. The
/// loop's preheader reserves `max(bound - init, 0)` records (one more for the header) on
/// the record's stack, and iteration `i` stores at `base + (i - init)` (computed modulo
/// 2⁶⁴ as `(base - init) + i`, so that no extreme bound overflows): the same order pushes
/// would give, without a length and capacity test per record.
struct StaticTape<'a> {
    primal: &'a Function,
    cfg: mcir_ir::cfg::ControlFlow,
    depth: Vec<u32>,
    edges: &'a [Vec<analysis::Edge>],
    counted: &'a [Option<analysis::CountedHeader>],
    loops: Vec<analysis::LoopCounter>,
}

/// What the preheaders of range loops compute for the static tape: for each (loop,
/// record slot), the offset that turns the loop's counter into the record's index.
#[derive(Default)]
struct Reserved {
    offsets: std::collections::HashMap<(usize, usize), mcir_ir::Value>,
    /// For (loop, header) whose records are reserved in front of an enclosing loop
    /// (`StaticTape::reserve_for_nest`), what all its stacks share.
    nests: std::collections::HashMap<(usize, bool), Nest>,
}

/// The counts a nest's reservations share: zero and the records of all runs (in front
/// of the outer loop), and the records of the runs before this one (in front of each).
/// The records of all runs are reserved at once only when they are at most
/// `MAX_NEST_RECORDS`.
#[derive(Clone, Copy)]
struct Nest {
    zero: mcir_ir::Value,
    total: mcir_ir::Value,
    skipped: mcir_ir::Value,
    /// Whether all runs' records fit in one reservation; else each run makes its own,
    /// from `start_value` to `run_end` with `run_extra` more (nothing when they fit).
    fits: mcir_ir::Value,
    start_value: mcir_ir::Value,
    run_end: mcir_ir::Value,
    run_extra: mcir_ir::Value,
}

/// A block's place in a range loop: the loop (index into `StaticTape::loops`), and
/// whether the block is the loop's header.
#[derive(Copy, Clone)]
struct Place {
    lp: usize,
    header: bool,
}

impl<'a> StaticTape<'a> {
    fn new(
        primal: &'a Function,
        edges: &'a [Vec<analysis::Edge>],
        counted: &'a [Option<analysis::CountedHeader>],
        loops: Vec<analysis::LoopCounter>,
    ) -> Self {
        let cfg = mcir_ir::cfg::ControlFlow::compute(primal);
        let depth = cfg.loop_depths();
        let loops = loops.into_iter().filter(|l| l.step == 1 && l.range.is_some()).collect();
        StaticTape { primal, cfg, depth, edges, counted, loops }
    }

    fn place(&self, b: mcir_ir::Block) -> Option<Place> {
        let d = *self.depth.get(b.index())?;
        let lp = self.loops.iter().position(|l| {
            l.region.get(b.index()).copied().unwrap_or(false) && self.depth.get(l.header.index()) == Some(&d)
        })?;
        let l = &self.loops[lp];
        if b == l.header {
            return Some(Place { lp, header: true });
        }
        self.cfg.dominates(b, l.latch).then_some(Place { lp, header: false })
    }

    /// The offset and counter whose sum (modulo 2⁶⁴) is this iteration's record index in
    /// `stack` (of `slot`), reserving the room in the loop's preheader on first use.
    fn index(
        &self,
        fw: &mut forward::Forward,
        bases: &mut Reserved,
        at: Place,
        slot: usize,
        stack: mcir_ir::Value,
        width: i64,
    ) -> Option<(mcir_ir::Value, mcir_ir::Value)> {
        use mcir_ir::Op;
        let l = &self.loops[at.lp];
        let (init, bound) = l.range?;
        let fwd = |v: mcir_ir::Value| fw.vmap.get(v.index()).copied().flatten();
        let (finit, fbound, fi) = (fwd(init)?, fwd(bound)?, fwd(l.param)?);
        if let Some(&o) = bases.offsets.get(&(at.lp, slot)) {
            return Some((o, fi));
        }
        let c = self.counted.get(l.header.index()).copied().flatten()?;
        let pre = self.edges.get(l.header.index())?.get(c.entry_edge)?.from;
        // The reservation runs once each time the loop is entered only if the block it
        // goes in does nothing else: a loop entered straight from another loop's header
        // (which runs once more than that loop's body) pushes its records instead.
        if !self.only_enters(pre, l.header) {
            return None;
        }
        let fpre = *fw.block_map.get(pre.index())?;
        if let Some(o) = self.reserve_for_nest(fw, bases, at, stack, pre, init, bound, width) {
            bases.offsets.insert((at.lp, slot), o);
            return Some((o, fi));
        }
        let f = &mut fw.e.func;
        // A reservation that outgrows the memory limit fails at the loop it is for.
        let span = self.loop_span(l.header);
        let i64t = Some(mcir_ir::TypeTable::I64);
        // Room for max(bound - init, 0) iterations, and the header's one more run; the
        // offset `base - init` makes iteration i's index `offset + i`.
        let extra = f.push_inst(fpre, Op::IConst(i64::from(at.header)), vec![], i64t, span)?;
        let mut args = vec![stack, finit, fbound, extra];
        if width > 1 {
            args.push(f.push_inst(fpre, Op::IConst(width), vec![], i64t, span)?);
        }
        let o = f.push_inst(fpre, Op::StackReserve, args, i64t, span)?;
        bases.offsets.insert((at.lp, slot), o);
        Some((o, fi))
    }
}

impl StaticTape<'_> {
    /// The source of the loop whose header is `header` (its test), or of the function.
    fn loop_span(&self, header: mcir_ir::Block) -> mcir_ir::Span {
        let test = self.primal.blocks[header].term_span;
        if test.end > 0 {
            test
        } else {
            self.primal.span
        }
    }

    /// Whether block `pre` only leads into loop header `header`: it jumps there and
    /// nowhere else, so what it does runs once per entry into the loop.
    fn only_enters(&self, pre: mcir_ir::Block, header: mcir_ir::Block) -> bool {
        matches!(&self.primal.blocks[pre].term, mcir_ir::Terminator::Jump(t) if t.block == header)
    }

    /// When range loop `at.lp` (preheader `pre`, `for i in init..bound`) runs once in
    /// every iteration of an enclosing range loop and its bounds are the same in each,
    /// its records for all of them are reserved once, in front of the enclosing loop,
    /// and each run stores its records after the previous run's: the stack grows at
    /// most once instead of doubling (and copying what it holds) as the runs come.
    /// Returns the offset that turns the counter into the record's index in this run.
    ///
    /// Both loops must start at a constant in `0..=2³²` (so that no difference below can
    /// overflow), and the inner bound must be a constant or computed before the outer
    /// loop. Only up to `MAX_NEST_RECORDS` are reserved at once (so that the product
    /// cannot overflow, and a nest that fails part of the way asks for little memory
    /// for runs it never makes); beyond, each run reserves its own, as without a nest.
    #[allow(clippy::too_many_arguments)]
    fn reserve_for_nest(
        &self,
        fw: &mut forward::Forward,
        bases: &mut Reserved,
        at: Place,
        stack: mcir_ir::Value,
        pre: mcir_ir::Block,
        init: mcir_ir::Value,
        bound: mcir_ir::Value,
        width: i64,
    ) -> Option<mcir_ir::Value> {
        use mcir_ir::{IBinOp, Op};
        let around = self.place(pre)?;
        if around.header {
            return None;
        }
        let outer = &self.loops[around.lp];
        let (outer_init, outer_bound) = outer.range?;
        let start = |v: mcir_ir::Value| self.primal.const_int(v).filter(|c| (0..=1i64 << 32).contains(c));
        let (inner_start, outer_start) = (start(init)?, start(outer_init)?);
        let inner_bound_const = self.primal.const_int(bound);
        // Checked once per nest: its other stacks share the answer.
        if inner_bound_const.is_none() && !bases.nests.contains_key(&(at.lp, at.header)) {
            let in_outer = |b: mcir_ir::Block| outer.region.get(b.index()).copied().unwrap_or(true);
            let before = match self.primal.values[bound].def {
                mcir_ir::ValueDef::Param(b, _) => !in_outer(b),
                mcir_ir::ValueDef::Inst(i) => {
                    !self.primal.blocks.iter().any(|(b, data)| in_outer(b) && data.insts.contains(&i))
                }
            };
            if !before {
                return None;
            }
        }
        let oc = self.counted.get(outer.header.index()).copied().flatten()?;
        let outer_pre = self.edges.get(outer.header.index())?.get(oc.entry_edge)?.from;
        if !self.only_enters(outer_pre, outer.header) {
            return None;
        }
        let fouter = *fw.block_map.get(outer_pre.index())?;
        let fpre = *fw.block_map.get(pre.index())?;
        let span = self.loop_span(outer.header);
        let i64t = Some(mcir_ir::TypeTable::I64);
        let emit = |fw: &mut forward::Forward, b: mcir_ir::Block, op: Op, args: Vec<mcir_ir::Value>| {
            fw.e.func.push_inst(b, op, args, i64t, span)
        };
        // `x - c`, or `x` for `c = 0`.
        let less = |fw: &mut forward::Forward, b: mcir_ir::Block, x: mcir_ir::Value, c: i64| {
            if c == 0 {
                return Some(x);
            }
            let k = emit(fw, b, Op::IConst(c), vec![])?;
            emit(fw, b, Op::IBinary(IBinOp::Sub), vec![x, k])
        };
        let nest = match bases.nests.get(&(at.lp, at.header)) {
            Some(&n) => n,
            None => {
                let fwd =
                    |fw: &forward::Forward, v: mcir_ir::Value| fw.vmap.get(v.index()).copied().flatten();
                let (f_outer_bound, f_outer_counter) = (fwd(fw, outer_bound)?, fwd(fw, outer.param)?);
                // In front of the outer loop: `per` records a run (one more for the
                // header), `runs` runs.
                let inner_bound = match inner_bound_const {
                    Some(k) => emit(fw, fouter, Op::IConst(k), vec![])?,
                    None => fwd(fw, bound)?,
                };
                let zero = emit(fw, fouter, Op::IConst(0), vec![])?;
                let per = less(fw, fouter, inner_bound, inner_start)?;
                let mut per = emit(fw, fouter, Op::IBinary(IBinOp::Max), vec![per, zero])?;
                if at.header {
                    let one = emit(fw, fouter, Op::IConst(1), vec![])?;
                    per = emit(fw, fouter, Op::IBinary(IBinOp::Add), vec![per, one])?;
                }
                let runs = less(fw, fouter, f_outer_bound, outer_start)?;
                let runs = emit(fw, fouter, Op::IBinary(IBinOp::Max), vec![runs, zero])?;
                // Only up to `MAX_NEST_RECORDS` at once: a loop that would fail part of
                // the way must fail there, not on a reservation for runs it never makes
                // (or on the count's overflow). Otherwise each run reserves its own.
                let one = emit(fw, fouter, Op::IConst(1), vec![])?;
                let per_at_least_one = emit(fw, fouter, Op::IBinary(IBinOp::Max), vec![per, one])?;
                let cap = emit(fw, fouter, Op::IConst(MAX_NEST_RECORDS), vec![])?;
                let most_runs = emit(fw, fouter, Op::IBinary(IBinOp::Div), vec![cap, per_at_least_one])?;
                let fits = fw.e.func.push_inst(
                    fouter,
                    Op::ICmp(mcir_ir::CmpOp::Le),
                    vec![runs, most_runs],
                    Some(mcir_ir::TypeTable::BOOL),
                    span,
                )?;
                let per_if_fits = emit(fw, fouter, Op::Select, vec![fits, per, zero])?;
                let total = emit(fw, fouter, Op::IBinary(IBinOp::Mul), vec![runs, per_if_fits])?;
                // In front of each run: the records of the runs before it.
                let done = less(fw, fpre, f_outer_counter, outer_start)?;
                let skipped = emit(fw, fpre, Op::IBinary(IBinOp::Mul), vec![done, per_if_fits])?;
                // The run's own reservation, of nothing when the nest's fits.
                let start_value = emit(fw, fpre, Op::IConst(inner_start), vec![])?;
                let run_end = emit(fw, fpre, Op::Select, vec![fits, start_value, inner_bound])?;
                let extra = emit(fw, fpre, Op::IConst(i64::from(at.header)), vec![])?;
                let run_extra = emit(fw, fpre, Op::Select, vec![fits, zero, extra])?;
                let n = Nest { zero, total, skipped, fits, start_value, run_end, run_extra };
                bases.nests.insert((at.lp, at.header), n);
                n
            }
        };
        // Records of `width` values: every count above is in records.
        let mut all = vec![stack, nest.zero, nest.total, nest.zero];
        let mut own = vec![stack, nest.start_value, nest.run_end, nest.run_extra];
        let mut skipped = nest.skipped;
        if width > 1 {
            let w = emit(fw, fouter, Op::IConst(width), vec![])?;
            all.push(w);
            own.push(w);
            // At most `MAX_NEST_RECORDS` records: no overflow.
            skipped = emit(fw, fpre, Op::IBinary(IBinOp::Mul), vec![skipped, w])?;
        }
        let base = emit(fw, fouter, Op::StackReserve, all)?;
        let first = emit(fw, fpre, Op::IBinary(IBinOp::Add), vec![base, skipped])?;
        let nested = less(fw, fpre, first, inner_start.checked_mul(width)?)?;
        let own = emit(fw, fpre, Op::StackReserve, own)?;
        emit(fw, fpre, Op::Select, vec![nest.fits, nested, own])
    }
}

/// The most records a nest reserves at once for one stack (`StaticTape::reserve_for_nest`):
/// 8 MiB per value a record holds, as much as each value's own stack would take.
const MAX_NEST_RECORDS: i64 = 1 << 20;

/// A value id that `push_inst` never returns in place of a real one.
fn tape_placeholder() -> mcir_ir::Value {
    mcir_ir::Value::new(0)
}

/// Inserts an instruction at position `pos` of `block`.
pub(crate) fn insert_at(
    f: &mut Function,
    block: mcir_ir::Block,
    pos: usize,
    op: mcir_ir::Op,
    args: Vec<mcir_ir::Value>,
    ty: TypeId,
    span: mcir_ir::Span,
) -> mcir_ir::Value {
    let v = f.push_inst(block, op, args, Some(ty), span).unwrap_or(mcir_ir::Value::new(0));
    if let Some(inst) = f.blocks[block].insts.pop() {
        let pos = pos.min(f.blocks[block].insts.len());
        f.blocks[block].insts.insert(pos, inst);
    }
    v
}
