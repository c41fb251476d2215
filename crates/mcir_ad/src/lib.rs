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
mod dce;
mod driver;
mod emit;
mod forward;
pub mod pushforward;
mod reverse;
mod rules;
pub mod tangent;

pub use driver::{probe_driver, vjp_driver, SeedPattern};
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
}

/// A module with a derived rule for each of its functions.
#[derive(Clone, Debug)]
pub struct Derived {
    /// The primal functions followed by the derived ones.
    pub module: Module,
    /// The rule of each primal function, indexed by its id.
    pub rules: Vec<RuleIds>,
}

impl Derived {
    /// The rule of a primal function.
    pub fn rule(&self, f: FuncId) -> &RuleIds {
        &self.rules[f.index()]
    }
}

/// Derives the rule of every function of `module`. The result verifies.
pub fn derive(module: &Module, options: &Options) -> Result<Derived, AdError> {
    let mut module = module.clone();
    let primals: Vec<(FuncId, Function)> = module.funcs.iter().map(|(id, f)| (id, f.clone())).collect();
    // Declare every rule first: calls refer to them before they are built.
    let mut rules = Vec::new();
    for (_, f) in &primals {
        let (tape_sid, tape_ty) = module.types.declare_struct(StructDef {
            name: format!("{}$tape", f.name),
            mutable: false,
            fields: Vec::new(),
        });
        let (fparams, fwd_ret) = forward::forward_signature(&mut module.types, f, tape_ty);
        let (rparams, rev_ret) = reverse::reverse_signature(&mut module.types, f, tape_ty);
        let fwd = module.add_function(Function::new(&format!("{}$fwd", f.name), &fparams, Some(fwd_ret)));
        let rev = module.add_function(Function::new(&format!("{}$rev", f.name), &rparams, rev_ret));
        rules.push(RuleIds { name: f.name.clone(), fwd, rev, tape_sid, tape_ty, fwd_ret, rev_ret });
    }
    for (fid, primal) in &primals {
        let (fwd, rev) = derive_function(&mut module, &rules, *fid, primal, options)?;
        let r = &rules[fid.index()];
        module.funcs[r.fwd] = fwd;
        module.funcs[r.rev] = rev;
    }
    if let Err(e) = mcir_ir::verify_module(&module) {
        return Err(AdError::internal(&e.func, format!("the derived IR does not verify: {}", e.message)));
    }
    Ok(Derived { module, rules })
}

fn derive_function(
    module: &mut Module,
    rules: &[RuleIds],
    fid: FuncId,
    primal: &Function,
    options: &Options,
) -> Result<(Function, Function), AdError> {
    let edges = analysis::in_edges(primal);
    let active = analysis::activity(&module.types, primal, options.corrupt.is_some());
    let live = analysis::live_out(primal);
    let counted = analysis::counted_headers(primal, &edges);
    let counters = analysis::loop_counters(primal, &edges, &counted);
    let mut fw = forward::build_forward(module, rules, fid, primal, &edges, &counted, &counters)?;
    let (rev, slots, pushes, path_slot, counter_slots) = {
        let mut rv = reverse::Reverse::new(
            fid,
            primal,
            &fw,
            &mut module.types,
            rules,
            active,
            &live,
            options.corrupt.clone(),
            counters,
        );
        rv.counted = counted;
        rv.build_all(&edges)?;
        let path = rv.path_slot();
        let slots: Vec<(Option<mcir_ir::Value>, TypeId, String, bool)> =
            rv.slots.iter().map(|s| (s.fwd, s.ty, s.name.clone(), s.direct)).collect();
        let counter_slots = rv.counter_slots.clone();
        (rv.e.func, slots, rv.pushes, path, counter_slots)
    };
    // The tape: create the stacks on entry to the forward pass, push what the reverse
    // pass pops at the end of each block, mark edges into joins and the return taken.
    let entry = fw.e.func.entry();
    let rule = &rules[fid.index()];
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
    for (b, fv, slot) in pushes {
        let fb = fw.block_map[b.index()];
        fw.e.func.push_inst(fb, mcir_ir::Op::StackPush, vec![stacks[slot], fv], None, primal.span);
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
    let path = path_slot.map(|s| stacks[s]);
    for (eb, k) in fw.edge_marks.clone() {
        if let Some(path) = path {
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
            if let Some(path) = path {
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
    let fwd_func = dce::remove_dead_code(&fw.e.func).into_simplified_cfg();
    let rev_func = dce::remove_dead_code(&rev).into_simplified_cfg();
    Ok((fwd_func, rev_func))
}

/// A value id that `push_inst` never returns in place of a real one.
fn tape_placeholder() -> mcir_ir::Value {
    mcir_ir::Value::new(0)
}

/// Inserts an instruction at position `pos` of `block`.
fn insert_at(
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
