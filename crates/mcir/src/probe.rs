//! Localising a failed check to a built-in rule: every differentiable operation the
//! function (or a function it calls) uses is checked on its own, in a one-instruction
//! function, at arguments inside its domain. A rule that fails alone is named in the
//! report.

use crate::check::{check_with, random_value, CheckOptions, Rng, Suspect};
use crate::Program;
use mcir_interp::{Array, ArrayData, Limits, Val};
use mcir_ir::{FBinOp, FUnOp, FuncId, Function, Module, Op, Scalar, Terminator, Type, TypeId, TypeTable};
use std::collections::HashSet;

/// The name of the builtin or operator an op comes from, as users write it.
pub fn source_name(op: &Op) -> Option<String> {
    let bin = |b: FBinOp| match b {
        FBinOp::Add => "+",
        FBinOp::Sub => "-",
        FBinOp::Mul => "*",
        FBinOp::Div => "/",
        FBinOp::Pow => "** (pow)",
        FBinOp::Min => "min",
        FBinOp::Max => "max",
        FBinOp::Atan2 => "atan2",
    };
    let un = |u: FUnOp| if u == FUnOp::Neg { "unary -" } else { u.name() };
    Some(match op {
        Op::FBinary(b) => bin(*b).to_string(),
        Op::MapFBinary(b) => format!("{} (elementwise)", bin(*b)),
        Op::FUnary(u) => un(*u).to_string(),
        Op::MapFUnary(u) => format!("{} (elementwise)", un(*u)),
        Op::FPowI => "** (integer power)".to_string(),
        Op::MapFPowI => "** (integer power, elementwise)".to_string(),
        Op::Sum => "sum".to_string(),
        Op::Dot => "dot".to_string(),
        Op::MatMul(_) => "matmul".to_string(),
        Op::MatVec(_) => "matvec".to_string(),
        Op::Transpose => "transpose".to_string(),
        Op::ArrayFill => "fill (zeros, ones)".to_string(),
        Op::ArrayCopy => "copy".to_string(),
        _ => return None,
    })
}

/// The built-in rules used by `func` and its callees that fail the check on their own.
pub(crate) fn suspect_rules(
    program: &Program,
    func: FuncId,
    options: &CheckOptions,
    limits: &Limits,
) -> Vec<Suspect> {
    let module = &program.module;
    // Functions reachable from `func`.
    let mut seen = HashSet::new();
    let mut todo = vec![func];
    let mut kinds: Vec<(Op, Vec<TypeId>, TypeId)> = Vec::new();
    while let Some(f) = todo.pop() {
        if !seen.insert(f) {
            continue;
        }
        let fd = &module.funcs[f];
        for (_, data) in fd.blocks.iter() {
            for &i in &data.insts {
                let d = &fd.insts[i];
                if let Op::Call(g) = d.op {
                    todo.push(g);
                    continue;
                }
                let Some(r) = d.result else { continue };
                if source_name(&d.op).is_none() {
                    continue;
                }
                let args: Vec<TypeId> = d.args.iter().map(|&a| fd.value_type(a)).collect();
                let key = (d.op.clone(), args, fd.value_type(r));
                if !kinds.contains(&key) {
                    kinds.push(key);
                }
            }
        }
    }
    let mut out: Vec<Suspect> = Vec::new();
    for (op, args, ret) in kinds {
        let Some(name) = source_name(&op) else { continue };
        if let Some(detail) = check_op(program, &op, &args, ret, options, limits) {
            if !out.iter().any(|s| s.name == name) {
                out.push(Suspect { name, hand_written: None, detail });
            }
        }
    }
    out
}

/// The functions reachable from `func` (itself included), by calls.
fn reachable(module: &Module, func: FuncId) -> Vec<FuncId> {
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    let mut todo = vec![func];
    while let Some(f) = todo.pop() {
        if !seen.insert(f) {
            continue;
        }
        order.push(f);
        for (_, d) in module.funcs[f].insts.iter() {
            if let Op::Call(g) = d.op {
                todo.push(g);
            }
        }
    }
    order
}

/// The hand-written rules of `func` and the functions it calls that fail the check on
/// their own, at random arguments: each named with its kind, where it is, and the
/// argument that disagrees.
pub(crate) fn suspect_hand_written_rules(
    program: &Program,
    d: &mut crate::grad::Differentiated,
    func: FuncId,
    options: &CheckOptions,
    limits: &Limits,
) -> Vec<Suspect> {
    let module = &program.module;
    let mut out = Vec::new();
    for g in reachable(module, func) {
        let kinds: Vec<&mcir_ir::RuleKind> = module
            .rules
            .iter()
            .filter(|r| r.func == g && !matches!(r.kind, mcir_ir::RuleKind::Checkpoint { .. }))
            .map(|r| &r.kind)
            .collect();
        if kinds.is_empty() {
            continue;
        }
        let opts =
            CheckOptions { trials: options.trials.clamp(2, 5), constant: Vec::new(), ..options.clone() };
        let report = check_with(program, d, g, None, &opts, limits);
        let name = module.funcs[g].name.clone();
        let at = |kind: &mcir_ir::RuleKind| {
            let span = match kind {
                mcir_ir::RuleKind::Reverse { rule, .. } | mcir_ir::RuleKind::Forward { rule, .. } => {
                    module.funcs[*rule].span
                }
                mcir_ir::RuleKind::Zero | mcir_ir::RuleKind::Checkpoint { .. } => module.funcs[g].span,
            };
            program.source.location(span.start as usize)
        };
        let rule_of = |word: &str| kinds.iter().find(|k| k.word() == word || k.word() == "zero").copied();
        let mut named = Vec::new();
        for f in &report.failures {
            let (word, detail) = match f {
                crate::check::Failure::Component { arg, component, reverse, finite_difference, .. } => {
                    ("reverse", {
                        let (a, b, e) = crate::check::compared(*reverse, *finite_difference);
                        format!(
                            "for argument {arg} (`{component}`) reverse mode gives {a}, finite differences give {b} ({e})"
                        )
                    })
                }
                crate::check::Failure::ForwardArgument {
                    arg,
                    name: arg_name,
                    forward,
                    finite_difference,
                    ..
                } => ("forward", {
                    let (a, b, e) = crate::check::compared(*forward, *finite_difference);
                    format!(
                            "for argument {arg} (`{arg_name}`) forward mode gives {a}, finite differences give {b} ({e})"
                        )
                }),
                crate::check::Failure::NotRestored { name: arg, .. } => {
                    ("reverse", format!("argument `{arg}` is not restored to its entry state"))
                }
                // A rule whose result is one of its arguments gives one array two shadows.
                crate::check::Failure::Aliasing { detail, .. } => ("reverse", format!("aliasing: {detail}")),
                // Forward mode over a pullback differentiates the pullback's code: right
                // at first order, it may still miss how its values depend on the input.
                crate::check::Failure::SecondOrderComponent {
                    arg,
                    component,
                    forward_over_reverse,
                    finite_difference,
                    ..
                } => ("reverse", {
                    let (a, b, e) = crate::check::compared(*forward_over_reverse, *finite_difference);
                    format!(
                        "at second order, for argument {arg} (`{component}`) of H v forward over reverse gives {a}, finite differences of the VJP give {b} ({e})"
                    )
                }),
                _ => continue,
            };
            let Some(kind) = rule_of(word) else { continue };
            if named.contains(&kind.word()) {
                continue;
            }
            named.push(kind.word());
            out.push(Suspect {
                name: name.clone(),
                hand_written: Some((kind.word().to_string(), at(kind))),
                detail,
            });
        }
    }
    out
}

/// Checks one op alone; `Some(detail)` when its rule disagrees with finite differences.
fn check_op(
    program: &Program,
    op: &Op,
    args: &[TypeId],
    ret: TypeId,
    options: &CheckOptions,
    limits: &Limits,
) -> Option<String> {
    let mut module = Module::new();
    module.types = program.module.types.clone();
    let params: Vec<(Option<String>, TypeId)> =
        args.iter().enumerate().map(|(i, &t)| (Some(format!("a{i}")), t)).collect();
    let mut f = Function::new("rule", &params, Some(ret));
    let entry = f.entry();
    let pv = f.param_values().to_vec();
    let r = f.push_inst(entry, op.clone(), pv, Some(ret), Default::default())?;
    f.set_terminator(entry, Terminator::Return(Some(r)), Default::default());
    let id = module.add_function(f);
    mcir_ir::verify_module(&module).ok()?;
    let probe = Program::from_parts(program.source.clone(), module).with_engine(program.engine());
    let mut d = probe.differentiate(&options.ad).ok()?;
    let mut rng = Rng::new(options.seed ^ 0x5eed);
    let types = &probe.module.types;
    let (lo, hi) = domain(op);
    let shape: Vec<usize> = vec![rng.range(3, 5) as usize; 3];
    let opts = CheckOptions { trials: 1, constant: Vec::new(), ..options.clone() };
    for _ in 0..options.trials.max(2) {
        let xs: Vec<Val> = args.iter().map(|&t| draw(&mut rng, types, t, &shape, lo, hi)).collect();
        let report = check_with(&probe, &mut d, id, Some(&xs), &opts, limits);
        if let Some(f) = report.failures.first() {
            return Some(failure_text(f));
        }
    }
    None
}

/// What a failed check of a single op found, in a few words.
fn failure_text(f: &crate::check::Failure) -> String {
    match f {
        crate::check::Failure::Component { component, reverse, finite_difference, .. } => {
            let (a, b, e) = crate::check::compared(*reverse, *finite_difference);
            format!("for operand `{component}` reverse mode gives {a}, finite differences give {b} ({e})")
        }
        other => format!("{other:?}"),
    }
}

/// Where arguments of an op are drawn: inside its domain, away from kinks.
fn domain(op: &Op) -> (f64, f64) {
    let u = match op {
        Op::FUnary(u) | Op::MapFUnary(u) => Some(*u),
        _ => None,
    };
    match (op, u) {
        (_, Some(FUnOp::Asin | FUnOp::Acos)) => (-0.8, 0.8),
        (_, Some(FUnOp::Log | FUnOp::Log1p | FUnOp::Sqrt)) => (0.3, 2.0),
        (Op::FBinary(FBinOp::Pow) | Op::MapFBinary(FBinOp::Pow), _) => (0.3, 2.0),
        _ => (-2.0, 2.0),
    }
}

fn draw(rng: &mut Rng, types: &TypeTable, t: TypeId, shape: &[usize], lo: f64, hi: f64) -> Val {
    let uni = |rng: &mut Rng| {
        // Away from zero, where abs and sign have their kink.
        let x = lo + (hi - lo) * ((rng.normal().abs() * 0.37).fract());
        if x.abs() < 0.05 {
            x + 0.1
        } else {
            x
        }
    };
    match types.get(t) {
        Type::Scalar(Scalar::F64) => Val::F64(uni(rng)),
        Type::Array { elem: Scalar::F64, rank } => {
            let sh: Vec<usize> = shape[..*rank as usize].to_vec();
            let n: usize = sh.iter().product();
            Val::Array(Array::new(sh, ArrayData::F64((0..n).map(|_| uni(rng)).collect())))
        }
        _ => random_value(rng, types, t, shape[0]),
    }
}
