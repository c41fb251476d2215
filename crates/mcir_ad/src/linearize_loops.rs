//! Loops linearized whole: a loop of scalar arithmetic that turns one or two values read
//! before it into its `f64` results carries the results' derivatives with respect to
//! those values forward, beside the values themselves, so that the reverse pass needs
//! neither the loop nor anything it computed.
//!
//! A loop qualifies when it is entered by one edge, leaves to one block that only it
//! enters, writes nothing (no store, call or allocation), and the derivatives of what it
//! passes out come from at most [`MAX_INPUTS`] `f64` values defined before it through
//! arithmetic forward mode handles (`linearize::supported`, and `abs`). Each `f64`
//! parameter of its blocks whose derivative is needed gains one parameter per input, the
//! derivative with respect to it (`dy_0` beside `y`); the entry edge passes the
//! derivatives of its arguments, the edges inside the loop those computed from them. The
//! exit block reads each result `y` through `linearized y, j₁, x₁, …` (`Op::Linearized`),
//! whose reverse is `x̄ₖ += ȳ · jₖ`: the tape holds the coefficients `jₖ` once per run
//! of the loop, and the loop's own reverse computes nothing, so it is bypassed
//! (`inert.rs`) with the values and trip count it would have read.
//!
//! An input computed by arithmetic in the block that enters the loop, from the loop's
//! other inputs only (a Newton iteration's first guess `1 + a / 4`, from `a`), is not an
//! input: its derivatives are computed there, so `y` carries one derivative, not two.
//!
//! Why: a helper iterating to a tolerance (Newton's method, a fixed point) made the
//! forward pass push each iterate and the reverse pass run every iteration backwards; a
//! hand-written gradient carries the derivative through the iteration, as this does.

use crate::linearize::{supported, tangent_of, tangent_through, Coef, Emitter};
use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, FUnOp, Function, Inst, Op, TypeTable, Value, ValueDef};
use std::collections::{HashMap, HashSet};

/// The most values a linearized loop's results may depend on: each costs one more
/// derivative computed per iteration and value carried.
pub(crate) const MAX_INPUTS: usize = 2;
/// The most `f64` results a linearized loop may pass out.
const MAX_OUTPUTS: usize = 4;
/// The most instructions a linearized loop may have.
const MAX_LOOP_INSTS: usize = 96;

/// `f` with every loop that qualifies (see the module docs) linearized whole, and every
/// other branch that qualifies linearized as `linearize::linearize_branches` does.
///
/// Branches go first, but for those inside loops of the right shape: a first guess
/// chosen by a branch before the loop is then a linearized value, which the loop's
/// derivatives go through (`1` input, not `2`), while a branch inside a loop linearized
/// whole is left to it. Branches inside a loop of that shape that then has too many
/// inputs are linearized last.
///
/// `varied` tells the values of `f` that depend on the arguments differentiated: the
/// others have no derivative to carry (an argument given as `--const`).
pub(crate) fn linearize_all(f: Function, varied: &[bool]) -> Function {
    let varies = |v: Value| varied.get(v.index()).copied().unwrap_or(true);
    let cfg = ControlFlow::compute(&f);
    let users = users_of(&f);
    let mut shaped: HashSet<Block> = HashSet::new();
    for h in loop_headers(&cfg) {
        if !shaped.contains(&h) {
            let body = cfg.loop_blocks(h);
            if plan(&f, &cfg, h, &body, false, &varies, &users).is_some() {
                shaped.extend(body);
            }
        }
    }
    let f = crate::linearize::linearize_branches(f, &|b| !shaped.contains(&b), &varies);
    if shaped.is_empty() {
        return f;
    }
    // Linearizing branches adds parameters and instructions, never edges: the control
    // flow is the same.
    let (f, done) = linearize_loops(f, &cfg, &varies);
    crate::linearize::linearize_branches(f, &|b| shaped.contains(&b) && !done.contains(&b), &varies)
}

/// The blocks that read each value.
fn users_of(f: &Function) -> HashMap<Value, Vec<Block>> {
    let mut users: HashMap<Value, Vec<Block>> = HashMap::new();
    for (b, data) in f.blocks.iter() {
        let uses = data.insts.iter().flat_map(|&i| f.insts[i].args.iter().copied()).chain(data.term.uses());
        for v in uses {
            users.entry(v).or_default().push(b);
        }
    }
    users
}

/// The headers of `cfg`'s loops, outer loops first.
fn loop_headers(cfg: &ControlFlow) -> Vec<Block> {
    cfg.rpo.iter().copied().filter(|&h| cfg.latches(h).next().is_some()).collect()
}

/// `f` with every loop that qualifies (see the module docs) linearized, and the blocks
/// of those loops (their branches are left as they are).
fn linearize_loops(
    mut f: Function,
    cfg: &ControlFlow,
    varies: &dyn Fn(Value) -> bool,
) -> (Function, HashSet<Block>) {
    let mut done: HashSet<Block> = HashSet::new();
    // Linearizing a loop adds reads of its own values and of values defined before it
    // only, so what this says of the loops after it stays true.
    let users = users_of(&f);
    // Outer loops first: an outer loop linearized takes its inner loops with it. The
    // control flow does not change (only parameters and instructions are added), so the
    // analysis stays valid.
    for h in loop_headers(cfg) {
        if done.contains(&h) {
            continue;
        }
        let body = cfg.loop_blocks(h);
        if let Some(plan) = plan(&f, cfg, h, &body, true, varies, &users) {
            apply(&mut f, cfg, h, &body, plan, &users);
            done.extend(body);
        }
    }
    (f, done)
}

/// What linearizing one loop takes.
struct Plan {
    /// The block that enters the loop, and which of its terminator's targets is the loop.
    pre: Block,
    entry_slot: usize,
    /// The block the loop leaves to.
    exit: Block,
    /// The values whose derivatives the loop carries, defined before it.
    inputs: Vec<Value>,
    /// Values of `pre` whose derivatives are computed there (inputs made from inputs).
    expanded: HashSet<Value>,
    /// The values of the loop whose derivatives are needed.
    needed: HashSet<Value>,
    /// Values of the loop read after it directly (not through the exit's parameters).
    direct_outputs: Vec<Value>,
}

fn is_scalar(f: &Function, v: Value) -> bool {
    matches!(f.value_type(v), TypeTable::F64 | TypeTable::I64 | TypeTable::BOOL)
}

fn is_constant(f: &Function, v: Value) -> bool {
    matches!(f.defining(v).map(|d| &d.op), Some(Op::FConst(_) | Op::IToF))
}

/// Whether forward mode through `op` is done in a loop.
fn supported_in_loop(f: &Function, op: &Op, result: Option<Value>) -> bool {
    matches!(op, Op::FUnary(FUnOp::Abs)) || supported(f, op, result)
}

/// The plan for the loop headed by `h` with blocks `body`, if it qualifies (if it has
/// the shape, when `count_inputs` is false: how many inputs it has is not looked at).
fn plan(
    f: &Function,
    cfg: &ControlFlow,
    h: Block,
    body: &HashSet<Block>,
    count_inputs: bool,
    varies: &dyn Fn(Value) -> bool,
    users: &HashMap<Value, Vec<Block>>,
) -> Option<Plan> {
    // One way in, from a block outside.
    let outside: Vec<Block> = cfg.preds[h.index()].iter().copied().filter(|p| !body.contains(p)).collect();
    let [pre] = outside.as_slice() else { return None };
    let pre = *pre;
    let entry_slot = {
        let slots: Vec<usize> = f.blocks[pre]
            .term
            .successors()
            .enumerate()
            .filter(|(_, c)| c.block == h)
            .map(|(k, _)| k)
            .collect();
        let [k] = slots.as_slice() else { return None };
        *k
    };
    // Nothing written, called or made; at most so many instructions.
    let mut count = 0;
    // Each value the loop defines, with its block.
    let mut defined: HashMap<Value, Block> = HashMap::new();
    for &b in body {
        if !cfg.dominates(h, b) {
            return None;
        }
        defined.extend(f.blocks[b].params.iter().map(|&p| (p, b)));
        for &i in &f.blocks[b].insts {
            count += 1;
            let d = &f.insts[i];
            let reads_only = !d.op.has_effect()
                || matches!(d.op, Op::IBinary(_) | Op::IUnary(_) | Op::FToI | Op::Load | Op::TrustedLoad);
            if !reads_only || matches!(d.op, Op::StackNew | Op::RefNew | Op::ArrayCopy | Op::ArrayLit(_)) {
                return None;
            }
            if let Some(r) = d.result {
                defined.insert(r, b);
            }
        }
    }
    if count > MAX_LOOP_INSTS {
        return None;
    }
    // One block after it, which only the loop enters.
    let mut exit: Option<Block> = None;
    for &b in body {
        for c in f.blocks[b].term.successors() {
            if body.contains(&c.block) {
                continue;
            }
            match exit {
                None => exit = Some(c.block),
                Some(e) if e == c.block => {}
                Some(_) => return None,
            }
        }
    }
    let exit = exit?;
    if cfg.preds[exit.index()].iter().any(|p| !body.contains(p))
        || f.blocks[exit].params.iter().any(|&p| !is_scalar(f, p))
    {
        return None;
    }
    // What the loop defines and is read after it: scalars only, from blocks that
    // dominate the exit.
    let mut direct_outputs = Vec::new();
    for (&v, &def_block) in &defined {
        if !users.get(&v).is_some_and(|bs| bs.iter().any(|b| !body.contains(b))) {
            continue;
        }
        if !is_scalar(f, v) || !cfg.dominates(def_block, exit) {
            return None;
        }
        if f.value_type(v) == TypeTable::F64 {
            direct_outputs.push(v);
        }
    }
    direct_outputs.sort_by_key(|v| v.index());
    let exit_outputs: Vec<Value> =
        f.blocks[exit].params.iter().copied().filter(|&p| f.value_type(p) == TypeTable::F64).collect();
    if exit_outputs.is_empty() && direct_outputs.is_empty() {
        return None;
    }
    if exit_outputs.len() + direct_outputs.len() > MAX_OUTPUTS {
        return None;
    }
    // The values whose derivatives are needed: back from the results, through the
    // arithmetic and the parameters of the loop's blocks.
    let mut needed: HashSet<Value> = HashSet::new();
    let mut direct_inputs: Vec<Value> = Vec::new();
    let mut work: Vec<Value> = direct_outputs.clone();
    for &b in body {
        for c in f.blocks[b].term.successors().filter(|c| c.block == exit) {
            for (&a, &p) in c.args.iter().zip(&f.blocks[exit].params) {
                if f.value_type(p) == TypeTable::F64 {
                    work.push(a);
                }
            }
        }
    }
    while let Some(v) = work.pop() {
        // What does not vary has no derivative (zero where it is read).
        if f.value_type(v) != TypeTable::F64 || is_constant(f, v) || !varies(v) {
            continue;
        }
        if !defined.contains_key(&v) {
            if !direct_inputs.contains(&v) {
                direct_inputs.push(v);
            }
            continue;
        }
        if !needed.insert(v) {
            continue;
        }
        match f.values[v].def {
            ValueDef::Inst(i) => {
                let d = &f.insts[i];
                if !supported_in_loop(f, &d.op, d.result) {
                    return None;
                }
                work.extend(d.args.iter().copied());
            }
            ValueDef::Param(b, k) => {
                for (_, a) in cfg.incoming_args(f, b, k as usize) {
                    work.push(a?);
                }
            }
        }
    }
    // Inputs computed in `pre` from the other inputs are derived there.
    direct_inputs.sort_by_key(|v| v.index());
    let in_pre: HashSet<Inst> = f.blocks[pre].insts.iter().copied().collect();
    let mut inputs = direct_inputs.clone();
    let mut expanded = HashSet::new();
    let mut changed = true;
    while changed {
        changed = false;
        for k in 0..inputs.len() {
            let c = inputs[k];
            let others: Vec<Value> = inputs.iter().copied().filter(|&x| x != c).collect();
            let mut reached = HashSet::new();
            if let Some(leaves) = leaves_in(f, &in_pre, c, &others, &mut reached) {
                if leaves.iter().all(|l| others.contains(l)) {
                    inputs.remove(k);
                    expanded.extend(reached);
                    changed = true;
                    break;
                }
            }
        }
    }
    if inputs.is_empty() || (count_inputs && inputs.len() > MAX_INPUTS) {
        return None;
    }
    inputs.sort_by_key(|v| v.index());
    Some(Plan { pre, entry_slot, exit, inputs, expanded, needed, direct_outputs })
}

/// The most values of the block entering a loop that an input's derivatives are
/// computed through.
const MAX_EXPANDED: usize = 32;

/// The values `v` is computed from by arithmetic forward mode handles among the
/// instructions `in_pre` (the block entering the loop), stopping at `stop` and at values
/// made elsewhere; `None` if `v` is not so computed, or through more than
/// [`MAX_EXPANDED`] values. `reached` collects the values passed through.
fn leaves_in(
    f: &Function,
    in_pre: &HashSet<Inst>,
    v: Value,
    stop: &[Value],
    reached: &mut HashSet<Value>,
) -> Option<Vec<Value>> {
    let through = |x: Value| -> Option<&mcir_ir::InstData> {
        let ValueDef::Inst(i) = f.values[x].def else { return None };
        let d = &f.insts[i];
        let handled = d.op == Op::Linearized || supported(f, &d.op, d.result);
        (in_pre.contains(&i) && f.value_type(x) == TypeTable::F64 && handled).then_some(d)
    };
    through(v)?;
    let mut out = Vec::new();
    let mut work = vec![v];
    reached.insert(v);
    while let Some(x) = work.pop() {
        let Some(d) = through(x) else {
            out.push(x);
            continue;
        };
        // A linearized value's derivatives come from the values it is linearized in.
        let args: Vec<Value> = if d.op == Op::Linearized {
            d.args.iter().skip(2).step_by(2).copied().collect()
        } else {
            d.args.clone()
        };
        for a in args {
            if f.value_type(a) != TypeTable::F64 || is_constant(f, a) {
                continue;
            }
            if stop.contains(&a) || through(a).is_none() {
                out.push(a);
            } else if reached.insert(a) {
                if reached.len() > MAX_EXPANDED {
                    return None;
                }
                work.push(a);
            }
        }
    }
    Some(out)
}

/// Linearizes the loop headed by `h` as `plan` says.
fn apply(
    f: &mut Function,
    cfg: &ControlFlow,
    h: Block,
    body: &HashSet<Block>,
    plan: Plan,
    users: &HashMap<Value, Vec<Block>>,
) {
    let m = plan.inputs.len();
    let span = f.blocks[h].term_span;
    let mut tangent: HashMap<Value, Vec<Coef>> = HashMap::new();
    for (k, &x) in plan.inputs.iter().enumerate() {
        let mut unit = vec![Coef::Zero; m];
        unit[k] = Coef::One;
        tangent.insert(x, unit);
    }
    // The derivatives of inputs made from inputs, at the end of the block entering.
    {
        let mut em = Emitter { f: &mut *f, block: plan.pre, out: Vec::new(), span };
        let insts = em.f.blocks[plan.pre].insts.clone();
        for i in insts {
            let Some(r) = em.f.insts[i].result else { continue };
            if plan.expanded.contains(&r) {
                let t = tangent_through(&mut em, &tangent, i, r, m);
                tangent.insert(r, t);
            }
        }
        let out = std::mem::take(&mut em.out);
        f.blocks[plan.pre].insts.extend(out);
    }
    // A parameter per input beside each parameter whose derivative is needed, in the
    // loop's blocks and for each `f64` parameter of the exit.
    let mut added: HashMap<Block, Vec<(usize, Vec<Value>)>> = HashMap::new();
    let order: Vec<Block> = cfg.rpo.iter().copied().filter(|b| body.contains(b)).collect();
    for &b in order.iter().chain(std::iter::once(&plan.exit)) {
        let params = f.blocks[b].params.clone();
        for (k, &p) in params.iter().enumerate() {
            let wanted =
                if b == plan.exit { f.value_type(p) == TypeTable::F64 } else { plan.needed.contains(&p) };
            if !wanted {
                continue;
            }
            // An exit's parameter is often unnamed: it is named for what it receives.
            let received = || cfg.incoming_args(f, b, k).find_map(|(_, a)| f.values[a?].name.clone());
            let name = f.values[p].name.clone().or_else(received).unwrap_or_else(|| "v".to_string());
            let ds: Vec<Value> =
                (0..m).map(|j| f.add_block_param(b, TypeTable::F64, Some(format!("d{name}_{j}")))).collect();
            tangent.insert(p, ds.iter().map(|&d| Coef::Of(d)).collect());
            added.entry(b).or_default().push((k, ds));
        }
    }
    // What an edge into `target` passes beside its arguments, emitted by `em`.
    let extra_args =
        |em: &mut Emitter, tangent: &HashMap<Value, Vec<Coef>>, target: Block, args: &[Value]| {
            let mut out = Vec::new();
            for (k, _) in added.get(&target).into_iter().flatten() {
                for c in tangent_of(tangent, args[*k], m) {
                    out.push(em.materialise(c));
                }
            }
            out
        };
    // The entry edge.
    {
        let args = f.blocks[plan.pre]
            .term
            .successors()
            .nth(plan.entry_slot)
            .map(|c| c.args.clone())
            .unwrap_or_default();
        let mut em = Emitter { f: &mut *f, block: plan.pre, out: Vec::new(), span };
        let extra = extra_args(&mut em, &tangent, h, &args);
        let out = std::mem::take(&mut em.out);
        f.blocks[plan.pre].insts.extend(out);
        if let Some(c) = f.blocks[plan.pre].term.successors_mut().nth(plan.entry_slot) {
            c.args.extend(extra);
        }
    }
    // Forward mode through each block of the loop, then the edges it leaves by.
    for &b in &order {
        let mut em = Emitter { f: &mut *f, block: b, out: Vec::new(), span };
        let insts = em.f.blocks[b].insts.clone();
        for i in insts {
            let Some(r) = em.f.insts[i].result else { continue };
            if plan.needed.contains(&r) {
                let t = tangent_through(&mut em, &tangent, i, r, m);
                tangent.insert(r, t);
            }
        }
        let calls: Vec<(Block, Vec<Value>)> =
            em.f.blocks[b].term.successors().map(|c| (c.block, c.args.clone())).collect();
        let extras: Vec<Vec<Value>> =
            calls.iter().map(|(t, args)| extra_args(&mut em, &tangent, *t, args)).collect();
        let out = std::mem::take(&mut em.out);
        f.blocks[b].insts.extend(out);
        for (c, extra) in f.blocks[b].term.successors_mut().zip(extras) {
            c.args.extend(extra);
        }
    }
    // The results, read through their linearizations from the exit on.
    let mut made: Vec<Inst> = Vec::new();
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let mut results: Vec<(Value, Vec<Value>)> = Vec::new();
    for (k, ds) in added.get(&plan.exit).into_iter().flatten() {
        results.push((f.blocks[plan.exit].params[*k], ds.clone()));
    }
    {
        let mut em = Emitter { f: &mut *f, block: plan.exit, out: Vec::new(), span };
        for &v in &plan.direct_outputs {
            let ds = tangent_of(&tangent, v, m).into_iter().map(|c| em.materialise(c)).collect();
            results.push((v, ds));
        }
        made.extend(std::mem::take(&mut em.out));
    }
    for (y, ds) in results {
        let mut args = vec![y];
        for (&j, &x) in ds.iter().zip(&plan.inputs) {
            args.extend([j, x]);
        }
        let Some(z) = f.push_inst(plan.exit, Op::Linearized, args, Some(TypeTable::F64), span) else {
            continue;
        };
        f.values[z].name = f.values[y].name.clone();
        subst.insert(y, z);
        if let Some(i) = f.blocks[plan.exit].insts.pop() {
            made.push(i);
        }
    }
    // Every read after the loop (not the linearizations themselves) reads the result
    // through its linearization.
    let mut blocks: Vec<Block> = subst
        .keys()
        .flat_map(|y| users.get(y).into_iter().flatten().copied())
        .filter(|b| !body.contains(b))
        .collect();
    blocks.sort_by_key(|b| b.index());
    blocks.dedup();
    for b in blocks {
        let insts = f.blocks[b].insts.clone();
        for i in insts {
            for a in f.insts[i].args.iter_mut() {
                if let Some(&z) = subst.get(a) {
                    *a = z;
                }
            }
        }
        f.blocks[b].term = f.blocks[b].term.mapped(|v| subst.get(&v).copied().unwrap_or(v), |b| b);
    }
    let rest = std::mem::take(&mut f.blocks[plan.exit].insts);
    f.blocks[plan.exit].insts = made.into_iter().chain(rest).collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one function of `ir`, through `linearize_all`, verified.
    fn run(ir: &str) -> Function {
        let mut m = mcir_ir::parse_module(ir).expect("parses");
        let id = m.funcs.keys().next().expect("a function");
        m.funcs[id] = linearize_all(m.funcs[id].clone(), &[]);
        mcir_ir::verify_module(&m).expect("verifies");
        m.funcs[id].clone()
    }

    /// The operands of each `linearized` of `f`.
    fn linearizations(f: &Function) -> Vec<Vec<Value>> {
        f.blocks
            .values()
            .flat_map(|d| d.insts.iter().map(|&i| &f.insts[i]))
            .filter(|d| d.op == Op::Linearized)
            .map(|d| d.args.clone())
            .collect()
    }

    /// A square root by Newton's method, from a first guess made of `a`, then `tail`
    /// (which may read `%a_0`, `%b_1`, `%c_2` and the root `%r_17`).
    fn newton(step: &str, tail: &str) -> String {
        format!(
            "fn @f(%a_0: f64, %b_1: f64, %c_2: f64, %v_3: f64[]) -> f64 {{
bb0:
    %one_4: f64 = fconst 1.0
    %q_5: f64 = fconst 0.25
    %t_6: f64 = fmul %q_5, %a_0
    %y0_7: f64 = fadd %one_4, %t_6
    jump bb1(%y0_7, %one_4)
bb1(%y_8: f64, %step_9: f64):
    %m_10: f64 = abs %step_9
    %tol_11: f64 = fconst 1e-12
    %cond_12: bool = fcmp gt %m_10, %tol_11
    br %cond_12, bb2, bb3(%y_8)
bb2:
    %yy_13: f64 = fmul %y_8, %y_8
    %num_14: f64 = fsub %yy_13, %a_0
{step}
    %y2_15: f64 = fsub %y_8, %s_16
    jump bb1(%y2_15, %s_16)
bb3(%r_17: f64):
{tail}
}}
"
        )
    }

    const HALVED: &str = "    %two_20: f64 = fconst 2.0
    %den_21: f64 = fmul %two_20, %y_8
    %s_16: f64 = fdiv %num_14, %den_21";

    #[test]
    fn a_loop_of_one_input_carries_one_derivative() {
        let f = run(&newton(HALVED, "    ret %r_17"));
        // The first guess is made of `a`: its derivative is computed before the loop,
        // and the root is linearized in `a` alone.
        let lin = linearizations(&f);
        assert_eq!(lin.len(), 1);
        assert_eq!(lin[0].len(), 3);
        assert_eq!(f.values[lin[0][2]].name.as_deref(), Some("a"));
        // The header carries `y` and its derivative; `step` needs none.
        let header = f.blocks.keys().nth(1).expect("a header");
        assert_eq!(f.blocks[header].params.len(), 3);
    }

    #[test]
    fn a_loop_of_three_inputs_is_left_as_it_is() {
        let step = "    %den0_22: f64 = fmul %b_1, %y_8
    %den_21: f64 = fadd %den0_22, %c_2
    %s_16: f64 = fdiv %num_14, %den_21";
        let before = mcir_ir::parse_module(&newton(step, "    ret %r_17")).expect("parses");
        let f = run(&newton(step, "    ret %r_17"));
        assert!(linearizations(&f).is_empty());
        let id = before.funcs.keys().next().expect("a function");
        assert_eq!(before.funcs[id].blocks[f.entry()].insts.len(), f.blocks[f.entry()].insts.len());
    }

    #[test]
    fn a_loop_of_two_inputs_carries_two() {
        let step = "    %den_21: f64 = fmul %b_1, %y_8
    %s_16: f64 = fdiv %num_14, %den_21";
        let f = run(&newton(step, "    ret %r_17"));
        let lin = linearizations(&f);
        assert_eq!(lin.len(), 1);
        assert_eq!(lin[0].len(), 5);
    }

    #[test]
    fn a_loop_that_stores_or_loads_what_it_differentiates_is_left_as_it_is() {
        let stores = "    %two_20: f64 = fconst 2.0
    %den_21: f64 = fmul %two_20, %y_8
    %s_16: f64 = fdiv %num_14, %den_21
    %k_23: i64 = iconst 0
    store %v_3[%k_23], %s_16";
        assert!(linearizations(&run(&newton(stores, "    ret %r_17"))).is_empty());
        let loads = "    %k_23: i64 = iconst 0
    %w_24: f64 = load %v_3[%k_23]
    %den_21: f64 = fmul %w_24, %y_8
    %s_16: f64 = fdiv %num_14, %den_21";
        assert!(linearizations(&run(&newton(loads, "    ret %r_17"))).is_empty());
    }
}
