//! The rule checker behind `mcc check`, modelled on Mooncake's `test_rule`: at given or
//! random arguments, the derived reverse rule is compared with central finite
//! differences of the primal over its result *and* the arguments' state after the call,
//! with random cotangents on both; the dot-product identity `<JVP(v), w> = <v, VJP(w)>`
//! holds with a finite-difference JVP and with the derived tangent function, which
//! also agrees with finite differences along `v`; the reverse pass leaves the arguments
//! as it found them; and the forward pass gives each address exactly one shadow.

use crate::error::GradError;
use crate::grad::{deep_copy_all, AdOptions, Differentiated};
use crate::Program;
use mcir_ad::tangent::{fdata_leaves, has_tangent};
use mcir_interp::{Array, ArrayData, Limits, Val};
use mcir_ir::{FuncId, Module, Scalar, Type, TypeId, TypeTable};
use std::collections::HashMap;
use std::fmt::Write;
use std::rc::Rc;

/// How to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Random draws (of arguments, unless given, and of directions and cotangents).
    pub trials: usize,
    /// Relative tolerance.
    pub rtol: f64,
    /// Seed of the random draws.
    pub seed: u64,
    /// The highest order checked: 1 (reverse and forward mode, Jacobians) or 2 (also
    /// forward over reverse: Hessian-vector products and the Hessian's symmetry).
    pub order: u8,
    /// Corrupts a rule on purpose (for testing the checker itself).
    pub ad: AdOptions,
    /// The arguments held constant (by position; `mcc check --const`): they are not
    /// perturbed and have no derivative, and the rules checked are the ones derived
    /// with them constant, as `mcc grad --const` runs them.
    pub constant: Vec<usize>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            trials: 5,
            rtol: 1e-6,
            seed: 0x6d63_6972,
            order: 2,
            ad: AdOptions::default(),
            constant: Vec::new(),
        }
    }
}

/// One disagreement found by the checker.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// Reverse mode and finite differences disagree on one component of an argument.
    Component {
        /// The trial (from 1).
        trial: usize,
        /// The argument's position.
        arg: usize,
        /// The argument's name and the component (`x[2]`, `p.y[1]`).
        component: String,
        /// The cotangent reverse mode computes for it.
        reverse: f64,
        /// What finite differences give.
        finite_difference: f64,
    },
    /// The dot-product identity fails for a random direction.
    DotProduct {
        /// The trial (from 1).
        trial: usize,
        /// `<v, VJP(w)>`.
        reverse: f64,
        /// `<JVP(v), w>` by finite differences.
        finite_difference: f64,
    },
    /// Forward mode and finite differences disagree along a random direction.
    Forward {
        /// The trial (from 1).
        trial: usize,
        /// `<JVP(v), w>` by forward mode.
        forward: f64,
        /// The same by finite differences.
        finite_difference: f64,
    },
    /// Forward mode and finite differences disagree along a direction that moves one
    /// argument only (found when they disagree along a random direction).
    ForwardArgument {
        /// The trial (from 1).
        trial: usize,
        /// The argument's position.
        arg: usize,
        /// Its name.
        name: String,
        /// `<JVP(v), w>` by forward mode.
        forward: f64,
        /// The same by finite differences.
        finite_difference: f64,
    },
    /// Forward and reverse mode disagree: `<JVP(v), w> != <v, VJP(w)>`.
    Adjoint {
        /// The trial (from 1).
        trial: usize,
        /// `<JVP(v), w>` by forward mode.
        forward: f64,
        /// `<v, VJP(w)>` by reverse mode.
        reverse: f64,
    },
    /// A column of the dense Jacobian (contracted with the result's random cotangent)
    /// disagrees with finite differences along one input component.
    Jacobian {
        /// The trial (from 1).
        trial: usize,
        /// How the Jacobian was computed.
        sweep: crate::Sweep,
        /// The argument's position.
        arg: usize,
        /// The argument's name and the component.
        component: String,
        /// `<ybar, J e_j>` from the Jacobian.
        jacobian: f64,
        /// The same by finite differences.
        finite_difference: f64,
    },
    /// Forward over reverse (the derivative of the VJP along a random direction `v`,
    /// contracted with a random `u`) disagrees with finite differences of the VJP.
    SecondOrder {
        /// The trial (from 1).
        trial: usize,
        /// `<u, H v>` by forward over reverse.
        forward_over_reverse: f64,
        /// `<u, (VJP(x + h v) - VJP(x - h v)) / 2h>`.
        finite_difference: f64,
    },
    /// One component of `H v` disagrees with finite differences of the VJP (found when
    /// the contraction disagrees).
    SecondOrderComponent {
        /// The trial (from 1).
        trial: usize,
        /// The argument's position.
        arg: usize,
        /// The argument's name and the component.
        component: String,
        /// The component of `H v` by forward over reverse.
        forward_over_reverse: f64,
        /// The same by finite differences of the VJP.
        finite_difference: f64,
    },
    /// The Hessian is not symmetric: `<w, H v> != <v, H w>` for random `v`, `w`.
    Symmetry {
        /// The trial (from 1).
        trial: usize,
        /// `<w, H v>`.
        along_v: f64,
        /// `<v, H w>`.
        along_w: f64,
    },
    /// After forward and reverse pass an argument is not in its entry state.
    NotRestored {
        /// The trial (from 1).
        trial: usize,
        /// The argument's position.
        arg: usize,
        /// Its name.
        name: String,
    },
    /// Two addresses share a shadow, or one address has two.
    Aliasing {
        /// The trial (from 1).
        trial: usize,
        /// What is wrong.
        detail: String,
    },
    /// The program failed while being checked.
    Error {
        /// The trial (from 1).
        trial: usize,
        /// The rendered error.
        message: String,
    },
}

/// A rule that fails the check on its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspect {
    /// The builtin or operator the rule is for, as written (`sin`, `* (elementwise)`), or
    /// the function a hand-written rule is for.
    pub name: String,
    /// For a hand-written rule: `reverse` or `forward`, and where it is (`file:line:col`).
    pub hand_written: Option<(String, String)>,
    /// What disagrees, naming the argument.
    pub detail: String,
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// The function checked.
    pub function: String,
    /// Trials run, and how many of them had a non-finite value and were skipped.
    pub trials: usize,
    /// Trials skipped.
    pub skipped: usize,
    /// Every disagreement.
    pub failures: Vec<Failure>,
    /// Rules that fail on their own, when the function fails: built-in ones, and
    /// hand-written ones of the functions it calls (or its own).
    pub suspects: Vec<Suspect>,
    /// Components compared.
    pub compared: usize,
    /// The arguments each failing trial drew (when none were given), as the JSON that
    /// `--args` takes, to reproduce it: `(trial, arguments)`.
    pub arguments: Vec<(usize, String)>,
    /// Evaluations at perturbed arguments stopped by the checker's time budget (a
    /// perturbation made a loop run on, as a tolerance pushed below zero does); they
    /// are left out of the comparisons.
    pub timed_out: usize,
}

impl Failure {
    /// The trial it happened in (from 1).
    pub fn trial(&self) -> usize {
        match self {
            Failure::Component { trial, .. }
            | Failure::DotProduct { trial, .. }
            | Failure::Forward { trial, .. }
            | Failure::ForwardArgument { trial, .. }
            | Failure::Adjoint { trial, .. }
            | Failure::Jacobian { trial, .. }
            | Failure::SecondOrder { trial, .. }
            | Failure::SecondOrderComponent { trial, .. }
            | Failure::Symmetry { trial, .. }
            | Failure::NotRestored { trial, .. }
            | Failure::Aliasing { trial, .. }
            | Failure::Error { trial, .. } => *trial,
        }
    }
}

impl CheckReport {
    /// Whether everything agreed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.skipped < self.trials
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "check `{}`: {} trial{}, {} component comparisons",
            self.function,
            self.trials,
            if self.trials == 1 { "" } else { "s" },
            self.compared
        );
        if self.skipped > 0 {
            let _ = writeln!(
                s,
                "  {} trial(s) skipped: the function is not finite at their arguments",
                self.skipped
            );
        }
        const SHOWN: usize = 12;
        for f in self.failures.iter().take(SHOWN) {
            let _ = match f {
                Failure::Component { trial, arg, component, reverse, finite_difference } => {
                    let (a, b, e) = compared(*reverse, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: argument {arg}, component `{component}`: reverse mode gives {a}, finite differences give {b} ({e})"
                    )
                }
                Failure::DotProduct { trial, reverse, finite_difference } => {
                    let (a, b, e) = compared(*reverse, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: dot-product identity: <v, VJP(w)> = {a} but <JVP(v), w> = {b} by finite differences ({e})"
                    )
                }
                Failure::Forward { trial, forward, finite_difference } => {
                    let (a, b, e) = compared(*forward, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: forward mode: <JVP(v), w> = {a} but finite differences give {b} ({e})"
                    )
                }
                Failure::ForwardArgument { trial, arg, name, forward, finite_difference } => {
                    let (a, b, e) = compared(*forward, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: forward mode along argument {arg} (`{name}`) gives {a}, finite differences give {b} ({e})"
                    )
                }
                Failure::Adjoint { trial, forward, reverse } => {
                    let (a, b, e) = compared(*forward, *reverse);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: forward and reverse mode disagree: <JVP(v), w> = {a} but <v, VJP(w)> = {b} ({e})"
                    )
                }
                Failure::Jacobian { trial, sweep, arg, component, jacobian, finite_difference } => {
                    let (a, b, e) = compared(*jacobian, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: the Jacobian by {} sweeps, argument {arg}, component `{component}`: its column gives {a}, finite differences give {b} ({e})",
                        sweep.word()
                    )
                }
                Failure::SecondOrder { trial, forward_over_reverse, finite_difference } => {
                    let (a, b, e) = compared(*forward_over_reverse, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: second order: <u, H v> = {a} by forward over reverse but {b} by finite differences of the VJP ({e})"
                    )
                }
                Failure::SecondOrderComponent { trial, arg, component, forward_over_reverse, finite_difference } => {
                    let (a, b, e) = compared(*forward_over_reverse, *finite_difference);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: second order, argument {arg}, component `{component}` of H v: forward over reverse gives {a}, finite differences of the VJP give {b} ({e})"
                    )
                }
                Failure::Symmetry { trial, along_v, along_w } => {
                    let (a, b, e) = compared(*along_v, *along_w);
                    writeln!(
                        s,
                        "  FAIL trial {trial}: the Hessian is not symmetric: <w, H v> = {a} but <v, H w> = {b} ({e})"
                    )
                }
                Failure::NotRestored { trial, arg, name } => writeln!(
                    s,
                    "  FAIL trial {trial}: argument {arg} (`{name}`) is not restored to its entry state by the reverse pass"
                ),
                Failure::Aliasing { trial, detail } => writeln!(s, "  FAIL trial {trial}: aliasing: {detail}"),
                Failure::Error { trial, message } => writeln!(s, "  FAIL trial {trial}: {message}"),
            };
        }
        if self.failures.len() > SHOWN {
            let _ = writeln!(s, "  ... and {} more disagreements", self.failures.len() - SHOWN);
        }
        for sus in &self.suspects {
            let _ = match &sus.hand_written {
                None => writeln!(s, "  the rule of `{}` is wrong on its own: {}", sus.name, sus.detail),
                Some((kind, at)) => {
                    writeln!(
                        s,
                        "  the hand-written {kind} rule of `{}` ({at}) is wrong: {}",
                        sus.name, sus.detail
                    )
                }
            };
        }
        if self.timed_out > 0 {
            let _ = writeln!(
                s,
                "  {} evaluation(s) at perturbed arguments ran out of time and were left out: a perturbation \
                 may make a loop run on (a tolerance below zero); hold such an argument with --const",
                self.timed_out
            );
        }
        for (trial, args) in &self.arguments {
            let _ = writeln!(s, "  trial {trial} drew --args '{args}'");
        }
        let _ = writeln!(s, "{}", if self.passed() { "ok: all checks agree" } else { "FAILED" });
        s
    }

    /// The report as a JSON document.
    pub fn to_json(&self) -> String {
        let mut fails = Vec::new();
        for f in &self.failures {
            let j = match f {
                Failure::Component { trial, arg, component, reverse, finite_difference } => {
                    serde_json::json!({
                        "check": "component", "trial": trial, "argument": arg, "component": component,
                        "reverse": num(*reverse), "finite_difference": num(*finite_difference)
                    })
                }
                Failure::DotProduct { trial, reverse, finite_difference } => serde_json::json!({
                    "check": "dot_product", "trial": trial,
                    "reverse": num(*reverse), "finite_difference": num(*finite_difference)
                }),
                Failure::Forward { trial, forward, finite_difference } => serde_json::json!({
                    "check": "forward", "trial": trial,
                    "forward": num(*forward), "finite_difference": num(*finite_difference)
                }),
                Failure::ForwardArgument { trial, arg, name, forward, finite_difference } => {
                    serde_json::json!({
                        "check": "forward_argument", "trial": trial, "argument": arg, "name": name,
                        "forward": num(*forward), "finite_difference": num(*finite_difference)
                    })
                }
                Failure::Adjoint { trial, forward, reverse } => serde_json::json!({
                    "check": "adjoint", "trial": trial, "forward": num(*forward), "reverse": num(*reverse)
                }),
                Failure::Jacobian { trial, sweep, arg, component, jacobian, finite_difference } => {
                    serde_json::json!({
                        "check": "jacobian", "trial": trial, "sweep": sweep.word(), "argument": arg,
                        "component": component, "jacobian": num(*jacobian),
                        "finite_difference": num(*finite_difference)
                    })
                }
                Failure::SecondOrder { trial, forward_over_reverse, finite_difference } => {
                    serde_json::json!({
                        "check": "second_order", "trial": trial,
                        "forward_over_reverse": num(*forward_over_reverse),
                        "finite_difference": num(*finite_difference)
                    })
                }
                Failure::SecondOrderComponent {
                    trial,
                    arg,
                    component,
                    forward_over_reverse,
                    finite_difference,
                } => {
                    serde_json::json!({
                        "check": "second_order_component", "trial": trial, "argument": arg,
                        "component": component, "forward_over_reverse": num(*forward_over_reverse),
                        "finite_difference": num(*finite_difference)
                    })
                }
                Failure::Symmetry { trial, along_v, along_w } => serde_json::json!({
                    "check": "symmetry", "trial": trial, "along_v": num(*along_v), "along_w": num(*along_w)
                }),
                Failure::NotRestored { trial, arg, name } => {
                    serde_json::json!({"check": "restored", "trial": trial, "argument": arg, "name": name})
                }
                Failure::Aliasing { trial, detail } => {
                    serde_json::json!({"check": "aliasing", "trial": trial, "detail": detail})
                }
                Failure::Error { trial, message } => {
                    serde_json::json!({"check": "error", "trial": trial, "message": message})
                }
            };
            fails.push(j);
        }
        let suspects: Vec<serde_json::Value> = self
            .suspects
            .iter()
            .map(|sus| match &sus.hand_written {
                None => serde_json::json!({"rule": sus.name, "kind": "builtin", "detail": sus.detail}),
                Some((kind, at)) => {
                    serde_json::json!({"rule": sus.name, "kind": kind, "at": at, "detail": sus.detail})
                }
            })
            .collect();
        serde_json::json!({
            "function": self.function, "passed": self.passed(), "trials": self.trials,
            "skipped": self.skipped, "compared": self.compared, "timed_out": self.timed_out, "failures": fails, "suspect_rules": suspects,
            "arguments": self.arguments.iter().map(|(t, a)| serde_json::json!({"trial": t, "args": a})).collect::<Vec<_>>()
        })
        .to_string()
    }
}

/// A number for people: six significant digits.
pub(crate) fn show(x: f64) -> String {
    if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        let t = format!("{x:.6}");
        let t = t.trim_end_matches('0').trim_end_matches('.');
        t.to_string()
    } else {
        format!("{x:.5e}")
    }
}

/// `x` to `digits` significant digits, fixed-point where that reads well.
fn significant(x: f64, digits: usize) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        let magnitude = if x == 0.0 { 0 } else { x.abs().log10().floor() as i64 };
        let decimals = (digits as i64 - 1 - magnitude).max(0) as usize;
        let t = format!("{x:.decimals$}");
        let t = if t.contains('.') { t.trim_end_matches('0').trim_end_matches('.') } else { &t };
        t.to_string()
    } else {
        format!("{x:.prec$e}", prec = digits.saturating_sub(1))
    }
}

/// Two numbers that disagree, each with enough digits (six at least) that the printed
/// forms differ too, and their relative error.
pub(crate) fn compared(a: f64, b: f64) -> (String, String, String) {
    let mut shown = (show(a), show(b));
    for digits in 7..=17 {
        if shown.0 != shown.1 {
            break;
        }
        shown = (significant(a, digits), significant(b, digits));
    }
    let scale = a.abs().max(b.abs());
    let error = if scale == 0.0 { 0.0 } else { (a - b).abs() / scale };
    (shown.0, shown.1, format!("relative error {error:.1e}"))
}

fn num(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x)
        .map(serde_json::Value::Number)
        .unwrap_or_else(|| serde_json::Value::String(format!("{x}")))
}

/// SplitMix64: small, seedable, and good enough for test draws.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    /// A standard normal sample.
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// Random arguments as CLI.md describes them: `f64` from N(0, 1), `extent` (3 to 6)
/// elements per array dimension, `i64` in 1..=3, random `bool`. One extent serves every
/// array of a draw, so that arrays meant to have one shape have it.
pub fn random_value(rng: &mut Rng, types: &TypeTable, t: TypeId, extent: usize) -> Val {
    match types.get(t) {
        Type::Scalar(Scalar::F64) => Val::F64(rng.normal()),
        Type::Scalar(Scalar::I64) => Val::I64(rng.range(1, 3)),
        Type::Scalar(Scalar::Bool) => Val::Bool(rng.range(0, 1) == 1),
        Type::Array { elem, rank } => {
            let shape: Vec<usize> = vec![extent; *rank as usize];
            let n: usize = shape.iter().product();
            let data = match elem {
                Scalar::F64 => ArrayData::F64((0..n).map(|_| rng.normal()).collect()),
                Scalar::I64 => ArrayData::I64((0..n).map(|_| rng.range(1, 3)).collect()),
                Scalar::Bool => ArrayData::Bool((0..n).map(|_| rng.range(0, 1) == 1).collect()),
            };
            Val::Array(Array::new(shape, data))
        }
        Type::Ref(inner) => Val::new_ref(random_value(rng, types, *inner, extent)),
        Type::Tuple(items) => Val::Agg(items.iter().map(|&i| random_value(rng, types, i, extent)).collect()),
        Type::Struct(_) => match types.as_struct(t) {
            Some((_, d)) => {
                let fields: Vec<Val> =
                    d.fields.iter().map(|f| random_value(rng, types, f.1, extent)).collect();
                if d.mutable {
                    Val::new_mut(fields)
                } else {
                    Val::Agg(fields.into())
                }
            }
            None => Val::Unit,
        },
        Type::Stack(_) => Val::Unit,
    }
}

/// The differentiable scalars of a value of type `t`, in a fixed order, with labels.
fn flatten(types: &TypeTable, t: TypeId, v: &Val, label: &str, out: &mut Vec<(String, f64)>) {
    if !has_tangent(types, t) {
        return;
    }
    match (types.get(t), v) {
        (Type::Scalar(_), Val::F64(x)) => out.push((label.to_string(), *x)),
        (Type::Array { .. }, Val::Array(a)) => {
            if let ArrayData::F64(d) = &*a.data.borrow() {
                for (k, x) in d.iter().enumerate() {
                    out.push((format!("{label}[{}]", index_text(&a.shape, k)), *x));
                }
            }
        }
        (Type::Ref(inner), Val::Ref(c)) => flatten(types, *inner, &c.borrow(), &format!("(*{label})"), out),
        (Type::Tuple(items), Val::Agg(f)) => {
            for (i, (&it, fv)) in items.iter().zip(f.iter()).enumerate() {
                flatten(types, it, fv, &format!("{label}.{i}"), out);
            }
        }
        (Type::Struct(_), Val::Agg(_) | Val::Mut(_)) => {
            let fields = fields_of(v);
            if let Some((_, d)) = types.as_struct(t) {
                for ((name, ft), fv) in d.fields.iter().zip(&fields) {
                    flatten(types, *ft, fv, &format!("{label}.{name}"), out);
                }
            }
        }
        _ => {}
    }
}

fn index_text(shape: &[usize], mut flat: usize) -> String {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        idx[d] = flat % n;
        flat /= n;
    }
    idx.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

fn fields_of(v: &Val) -> Vec<Val> {
    match v {
        Val::Agg(f) => f.to_vec(),
        Val::Mut(f) => f.borrow().clone(),
        _ => Vec::new(),
    }
}

/// The differentiable scalars of a value of type `t`, in the order of its tangents.
pub fn values_of(types: &TypeTable, t: TypeId, v: &Val) -> Vec<f64> {
    let mut out = Vec::new();
    flatten(types, t, v, "", &mut out);
    out.into_iter().map(|p| p.1).collect()
}

/// A fresh copy of `v` (of type `t`) with its differentiable scalars taken from `vals`.
fn rebuild(types: &TypeTable, t: TypeId, v: &Val, vals: &mut dyn Iterator<Item = f64>) -> Val {
    if !has_tangent(types, t) {
        return deep_copy_all(std::slice::from_ref(v)).remove(0);
    }
    match (types.get(t), v) {
        (Type::Scalar(_), Val::F64(_)) => Val::F64(vals.next().unwrap_or(0.0)),
        (Type::Array { .. }, Val::Array(a)) => {
            let n = a.data.borrow().len();
            let data: Vec<f64> = (0..n).map(|_| vals.next().unwrap_or(0.0)).collect();
            Val::Array(Array::new(a.shape.clone(), ArrayData::F64(data)))
        }
        (Type::Ref(inner), Val::Ref(c)) => Val::new_ref(rebuild(types, *inner, &c.borrow(), vals)),
        (Type::Tuple(items), Val::Agg(f)) => {
            Val::Agg(items.iter().zip(f.iter()).map(|(&it, fv)| rebuild(types, it, fv, vals)).collect())
        }
        (Type::Struct(_), Val::Agg(_) | Val::Mut(_)) => {
            let fields = fields_of(v);
            let Some((_, d)) = types.as_struct(t) else { return Val::Unit };
            let new: Vec<Val> =
                d.fields.iter().zip(&fields).map(|(f, fv)| rebuild(types, f.1, fv, vals)).collect();
            if d.mutable {
                Val::new_mut(new)
            } else {
                Val::Agg(new.into())
            }
        }
        _ => v.clone(),
    }
}

/// The scalars of a tangent value of the tangent type of `t`, in the order of [`flatten`].
pub fn flatten_tangent(types: &TypeTable, t: TypeId, v: &Val, out: &mut Vec<f64>) {
    if !has_tangent(types, t) {
        return;
    }
    match (types.get(t), v) {
        (Type::Scalar(_), Val::F64(x)) => out.push(*x),
        (Type::Array { .. }, Val::Array(a)) => {
            if let ArrayData::F64(d) = &*a.data.borrow() {
                out.extend(d.iter().copied());
            }
        }
        (Type::Ref(inner), Val::Ref(c)) => flatten_tangent(types, *inner, &c.borrow(), out),
        (Type::Tuple(items), Val::Agg(f)) => {
            for (&it, fv) in items.iter().zip(f.iter()) {
                flatten_tangent(types, it, fv, out);
            }
        }
        (Type::Struct(_), Val::Agg(_) | Val::Mut(_)) => {
            let fields = fields_of(v);
            if let Some((_, d)) = types.as_struct(t) {
                for ((_, ft), fv) in d.fields.iter().zip(&fields) {
                    flatten_tangent(types, *ft, fv, out);
                }
            }
        }
        _ => {}
    }
}

/// A tangent value shaped like `like` (of type `t`) whose scalars come from `vals`.
pub fn tangent_from(types: &TypeTable, t: TypeId, like: &Val, vals: &mut dyn Iterator<Item = f64>) -> Val {
    if !has_tangent(types, t) {
        return Val::Unit;
    }
    match (types.get(t), like) {
        (Type::Scalar(_), _) => Val::F64(vals.next().unwrap_or(0.0)),
        (Type::Array { .. }, Val::Array(a)) => {
            let n = a.data.borrow().len();
            Val::Array(Array::new(
                a.shape.clone(),
                ArrayData::F64((0..n).map(|_| vals.next().unwrap_or(0.0)).collect()),
            ))
        }
        (Type::Ref(inner), Val::Ref(c)) => Val::new_ref(tangent_from(types, *inner, &c.borrow(), vals)),
        (Type::Tuple(items), Val::Agg(f)) => {
            Val::Agg(items.iter().zip(f.iter()).map(|(&it, fv)| tangent_from(types, it, fv, vals)).collect())
        }
        (Type::Struct(_), Val::Agg(_) | Val::Mut(_)) => {
            let fields = fields_of(like);
            let Some((_, d)) = types.as_struct(t) else { return Val::Unit };
            let new: Vec<Val> =
                d.fields.iter().zip(&fields).map(|(f, fv)| tangent_from(types, f.1, fv, vals)).collect();
            if d.mutable {
                Val::new_mut(new)
            } else {
                Val::Agg(new.into())
            }
        }
        _ => Val::Unit,
    }
}

/// Whether two values hold the same data (NaN equals NaN), shapes included.
fn same_state(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::F64(x), Val::F64(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Val::I64(x), Val::I64(y)) => x == y,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Unit, Val::Unit) => true,
        (Val::Array(x), Val::Array(y)) => {
            x.shape == y.shape
                && match (&*x.data.borrow(), &*y.data.borrow()) {
                    (ArrayData::F64(p), ArrayData::F64(q)) => {
                        p.iter().zip(q).all(|(u, v)| u == v || (u.is_nan() && v.is_nan()))
                    }
                    (p, q) => p == q,
                }
        }
        (Val::Ref(x), Val::Ref(y)) => Rc::ptr_eq(x, y) || same_state(&x.borrow(), &y.borrow()),
        (Val::Agg(x), Val::Agg(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same_state(p, q))
        }
        (Val::Mut(x), Val::Mut(y)) => {
            Rc::ptr_eq(x, y) || {
                let (p, q) = (x.borrow(), y.borrow());
                p.len() == q.len() && p.iter().zip(q.iter()).all(|(u, v)| same_state(u, v))
            }
        }
        _ => false,
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A primal evaluation: the result's and the arguments' differentiable scalars after the
/// call, the result, and the arguments after the call.
type Evaluation = (Vec<f64>, Vec<f64>, Option<Val>, Vec<Val>);

const STEPS: [f64; 7] = [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8];

/// The most result scalars for which the checker also checks the dense Jacobian (a
/// reverse sweep per row).
const MAX_JACOBIAN_ROWS: usize = 64;

fn close(a: f64, b: f64, rtol: f64, scale: f64) -> bool {
    (a - b).abs() <= rtol * a.abs().max(b.abs()) + 1e-9 * scale.max(1e-300)
}

impl Program {
    /// Checks the derived rule of `func` (see the module documentation). `args` fixes the
    /// arguments (JSON); otherwise each trial draws them.
    pub fn check(
        &self,
        func: FuncId,
        args: Option<&str>,
        options: &CheckOptions,
        limits: &Limits,
    ) -> Result<CheckReport, GradError> {
        let fixed = match args {
            Some(a) => Some(crate::json::decode_args(&self.module, func, a).map_err(GradError::Args)?),
            None => None,
        };
        let n = self.module.funcs[func].params.len();
        if options.ad.corrupt.is_some() && !options.constant.is_empty() {
            return Err(GradError::Args(crate::error::ArgError {
                message: "a corrupted rule is checked with every argument active, not with --const".into(),
            }));
        }
        if let Some(&i) = options.constant.iter().find(|&&i| i >= n) {
            return Err(GradError::Args(crate::error::ArgError {
                message: format!("--const {i}: the function takes {}", plural_arguments(n)),
            }));
        }
        // The entry's own rules, as `mcc grad` runs them (one that restores arguments
        // from copies among them).
        let mut d = self.differentiate_with(&options.ad, Some(func), &[]).map_err(GradError::Derive)?;
        let mut report = check_with(self, &mut d, func, fixed.as_deref(), options, limits);
        if !report.failures.is_empty() {
            report.suspects = crate::probe::suspect_rules(self, func, options, limits);
            report
                .suspects
                .extend(crate::probe::suspect_hand_written_rules(self, &mut d, func, options, limits));
        }
        Ok(report)
    }
}

/// `n` arguments, in words.
fn plural_arguments(n: usize) -> String {
    if n == 1 {
        "1 argument".to_string()
    } else {
        format!("{n} arguments")
    }
}

/// The arguments `x` of a function with parameter types `params`, each one not
/// `constant` rebuilt from `vals` (its differentiable scalars in order), the constant
/// ones as they are.
fn rebuild_args(
    types: &TypeTable,
    params: &[TypeId],
    constant: &[bool],
    x: &[Val],
    vals: &mut dyn Iterator<Item = f64>,
) -> Vec<Val> {
    x.iter()
        .zip(params)
        .enumerate()
        .map(|(i, (v, &t))| {
            if constant[i] {
                deep_copy_all(std::slice::from_ref(v)).remove(0)
            } else {
                rebuild(types, t, v, vals)
            }
        })
        .collect()
}

/// One tangent per argument: those not `constant` from `dir` in order, the constant
/// ones zero (forward mode ignores them).
fn tangents_along(
    types: &TypeTable,
    params: &[TypeId],
    constant: &[bool],
    x: &[Val],
    dir: &[f64],
) -> Vec<Val> {
    let mut it = dir.iter().copied();
    x.iter()
        .zip(params)
        .enumerate()
        .map(|(i, (xv, &t))| {
            if constant[i] {
                tangent_from(types, t, xv, &mut std::iter::repeat(0.0))
            } else {
                tangent_from(types, t, xv, &mut it)
            }
        })
        .collect()
}

/// The tangents `vals` (one per argument) flattened, those of `constant` arguments
/// left out.
fn flatten_tangents(types: &TypeTable, params: &[TypeId], constant: &[bool], vals: &[Val]) -> Vec<f64> {
    let mut out = Vec::new();
    for (i, (v, &t)) in vals.iter().zip(params).enumerate() {
        if !constant[i] {
            flatten_tangent(types, t, v, &mut out);
        }
    }
    out
}

/// The checks, with rules already derived (possibly corrupted on purpose).
pub(crate) fn check_with(
    program: &Program,
    d: &mut Differentiated,
    func: FuncId,
    fixed: Option<&[Val]>,
    options: &CheckOptions,
    limits: &Limits,
) -> CheckReport {
    let module: &Module = &program.module;
    let f = &module.funcs[func];
    let types = &module.types;
    let names: Vec<String> = f
        .param_values()
        .iter()
        .enumerate()
        .map(|(i, &p)| f.values[p].name.clone().unwrap_or_else(|| format!("arg{i}")))
        .collect();
    let constant: Vec<bool> = (0..f.params.len()).map(|i| options.constant.contains(&i)).collect();
    let any_constant = constant.contains(&true);
    // No kinds at all where every argument is active: the rules every mode uses.
    let kinds: Vec<crate::ArgKind> = if any_constant {
        constant.iter().map(|&c| if c { crate::ArgKind::Const } else { crate::ArgKind::Active }).collect()
    } else {
        Vec::new()
    };
    let mut rng = Rng::new(options.seed);
    let mut report = CheckReport { function: f.name.clone(), trials: options.trials, ..Default::default() };
    // One line: the message and where in the source (`file:line:col`).
    let render = |e: &mcir_interp::RuntimeError| {
        let text = program.render_runtime_error(e);
        let message = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
        match text.lines().find_map(|l| l.split_once("┌─ ").map(|(_, at)| at.trim().to_string())) {
            Some(at) => format!("{message}, at {at}"),
            None => message,
        }
    };
    /// How long a call at drawn arguments may run when no time limit is given.
    const DRAWN_CALL_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);
    let mut drawn: Vec<String> = Vec::new();
    let timed_out = std::cell::Cell::new(0usize);
    for trial in 1..=options.trials {
        let x: Vec<Val> = match fixed {
            Some(a) => deep_copy_all(a),
            None => {
                let extent = rng.range(3, 6) as usize;
                f.params.iter().map(|&t| random_value(&mut rng, types, t, extent)).collect()
            }
        };
        if fixed.is_none() {
            let items: Vec<String> =
                f.params.iter().zip(&x).map(|(&t, v)| crate::json::encode(module, t, v)).collect();
            drawn.push(format!("[{}]", items.join(", ")));
        }
        // The primal at x, and a function that evaluates (y, x_post) flattened.
        let eval_with = |xs: &[Val], limits: &Limits| -> Result<Evaluation, mcir_interp::RuntimeError> {
            let copies = deep_copy_all(xs);
            let y = program.call(func, &copies, limits)?;
            let mut yv = Vec::new();
            if let (Some(v), Some(t)) = (&y, f.ret) {
                yv = values_of(types, t, v);
            }
            let mut post = Vec::new();
            for (i, (v, &t)) in copies.iter().zip(&f.params).enumerate() {
                if !constant[i] {
                    post.extend(values_of(types, t, v));
                }
            }
            Ok((yv, post, y, copies))
        };
        let started = std::time::Instant::now();
        // At drawn arguments a loop may never end (a square root found of a negative
        // number): without a time limit of the user's, the call gets one of its own.
        let first = match (fixed, limits.timeout) {
            (None, None) => eval_with(&x, &Limits { timeout: Some(DRAWN_CALL_BUDGET), ..limits.clone() }),
            _ => eval_with(&x, limits),
        };
        // A perturbed evaluation may loop for ever (a tolerance pushed below zero): it
        // gets a time budget well above what the unperturbed one took.
        let budget = (started.elapsed() * 100).max(std::time::Duration::from_millis(250));
        let fd_limits =
            Limits { timeout: Some(limits.timeout.map_or(budget, |t| t.min(budget))), ..limits.clone() };
        let eval = |xs: &[Val]| {
            let out = eval_with(xs, &fd_limits);
            if let Err(e) = &out {
                if matches!(e.kind, mcir_interp::RuntimeErrorKind::Timeout(_)) {
                    timed_out.set(timed_out.get() + 1);
                }
            }
            out
        };
        let (y0, post0, yval, post_args) = match first {
            Ok(r) => r,
            Err(e) => {
                report
                    .failures
                    .push(Failure::Error { trial, message: format!("the primal fails: {}", render(&e)) });
                continue;
            }
        };
        let mut comps: Vec<(usize, String, f64)> = Vec::new();
        for (i, (v, &t)) in x.iter().zip(&f.params).enumerate() {
            if constant[i] {
                continue;
            }
            let mut flat = Vec::new();
            flatten(types, t, v, &names[i], &mut flat);
            comps.extend(flat.into_iter().map(|(l, val)| (i, l, val)));
        }
        if y0.iter().chain(&post0).chain(comps.iter().map(|c| &c.2)).any(|v| !v.is_finite()) {
            report.skipped += 1;
            continue;
        }
        // Random cotangents on the result and on the arguments' state after the call.
        let ybar: Vec<f64> = (0..y0.len()).map(|_| rng.normal()).collect();
        let wbar: Vec<f64> = (0..post0.len()).map(|_| rng.normal()).collect();
        let seed = match (&yval, f.ret) {
            (Some(v), Some(t)) if has_tangent(types, t) => {
                Some(tangent_from(types, t, v, &mut ybar.iter().copied()))
            }
            _ => None,
        };
        let mut wit = wbar.iter().copied();
        let seed_args: Vec<Option<Val>> = post_args
            .iter()
            .zip(&f.params)
            .enumerate()
            .map(|(i, (v, &t))| {
                if has_tangent(types, t) && !constant[i] {
                    Some(tangent_from(types, t, v, &mut wit))
                } else {
                    None
                }
            })
            .collect();
        let x_for_vjp = deep_copy_all(&x);
        let before = deep_copy_all(&x_for_vjp);
        // With constants, the rule derived for them, as `mcc grad --const` runs it.
        let vjp = if any_constant {
            program.vjp_with(func, &x_for_vjp, seed.clone(), &seed_args, &kinds, limits).map_err(
                |e| match e {
                    GradError::Runtime(e) => render(&e),
                    other => other.to_string(),
                },
            )
        } else {
            d.vjp(func, &x_for_vjp, seed.clone(), &seed_args, limits).map_err(|e| render(&e))
        };
        let vjp = match vjp {
            Ok(v) => v,
            Err(e) => {
                report
                    .failures
                    .push(Failure::Error { trial, message: format!("the derived rule fails: {e}") });
                continue;
            }
        };
        for (i, (a, b)) in x_for_vjp.iter().zip(&before).enumerate() {
            if !same_state(a, b) {
                report.failures.push(Failure::NotRestored { trial, arg: i, name: names[i].clone() });
            }
        }
        let grad = flatten_tangents(types, &f.params, &constant, &vjp.gradient);
        if grad.len() != comps.len() {
            report.failures.push(Failure::Error {
                trial,
                message: format!("the gradient has {} components, the arguments {}", grad.len(), comps.len()),
            });
            continue;
        }
        // Central differences along a direction, at each step size that could be
        // evaluated: of the result and of the arguments' state after the call.
        let base: Vec<f64> = comps.iter().map(|c| c.2).collect();
        let differences = |dir: &[f64]| -> Vec<(f64, Vec<f64>, Vec<f64>)> {
            let mut out = Vec::new();
            for h in STEPS {
                let shifted = |sign: f64| -> Vec<Val> {
                    let mut vals = base.iter().zip(dir).map(|(b, d)| b + sign * h * d);
                    rebuild_args(types, &f.params, &constant, &x, &mut vals)
                };
                let (Ok(p), Ok(m)) = (eval(&shifted(1.0)), eval(&shifted(-1.0))) else { continue };
                if p.0.len() != y0.len()
                    || p.1.len() != post0.len()
                    || m.0.len() != y0.len()
                    || m.1.len() != post0.len()
                {
                    continue;
                }
                let dy: Vec<f64> = p.0.iter().zip(&m.0).map(|(a, b)| (a - b) / (2.0 * h)).collect();
                let dp: Vec<f64> = p.1.iter().zip(&m.1).map(|(a, b)| (a - b) / (2.0 * h)).collect();
                out.push((h, dy, dp));
            }
            out
        };
        // Whether `want` agrees with <yw, dy> + <ww, dpost> at some step size (the first
        // that agrees, else the closest). Rounding in the primal limits what a
        // difference quotient can resolve: about eps * |values| / h, weighted alike.
        let agrees = |diffs: &[(f64, Vec<f64>, Vec<f64>)], yw: &[f64], ww: &[f64], want: f64| {
            let magnitude: f64 = yw.iter().zip(&y0).map(|(a, b)| (a * b).abs()).sum::<f64>()
                + ww.iter().zip(&post0).map(|(a, b)| (a * b).abs()).sum::<f64>();
            let mut best: Option<(f64, f64)> = None;
            for (h, dy, dp) in diffs {
                let fd = dot(yw, dy) + dot(ww, dp);
                if !fd.is_finite() {
                    continue;
                }
                let scale: f64 = yw.iter().zip(dy).map(|(a, b)| (a * b).abs()).sum::<f64>()
                    + ww.iter().zip(dp).map(|(a, b)| (a * b).abs()).sum::<f64>();
                let noise = 8.0 * f64::EPSILON * magnitude / h;
                if close(fd, want, options.rtol, scale) || (fd - want).abs() <= noise {
                    return Some((fd, true));
                }
                let miss = (fd - want).abs();
                if best.is_none_or(|(_, m)| miss < m) {
                    best = Some((fd, miss));
                }
            }
            best.map(|(fd, _)| (fd, false))
        };
        let directional = |dir: &[f64], want: f64| agrees(&differences(dir), &ybar, &wbar, want);
        // The dense Jacobian of the result, by forward sweeps (vector mode) and by
        // reverse sweeps: its columns contracted with ybar are checked with the components.
        let mut jacobians: Vec<(crate::Sweep, Vec<Vec<f64>>)> = Vec::new();
        if !y0.is_empty() && y0.len() <= MAX_JACOBIAN_ROWS {
            for sweep in [crate::Sweep::Forward, crate::Sweep::Reverse] {
                match program.jacobian_with_kinds(
                    func,
                    &x,
                    &kinds,
                    Some(sweep),
                    crate::dense::JACOBIAN_WIDTH,
                    limits,
                ) {
                    Ok(j) if j.rows.len() == y0.len() && j.rows.iter().all(|r| r.len() == comps.len()) => {
                        jacobians.push((sweep, j.rows))
                    }
                    Ok(j) => report.failures.push(Failure::Error {
                        trial,
                        message: format!(
                            "the Jacobian by {} sweeps has {} rows, the result {} scalars",
                            sweep.word(),
                            j.rows.len(),
                            y0.len()
                        ),
                    }),
                    Err(e) => report.failures.push(Failure::Error {
                        trial,
                        message: format!("the Jacobian by {} sweeps fails: {e}", sweep.word()),
                    }),
                }
            }
        }
        let no_weights = vec![0.0; post0.len()];
        // A column of a Jacobian is a sum of partial derivatives of the size of its row's
        // and carries their rounding: where the derivative is zero by cancellation
        // (`x * 0.1 + x * 0.2 - x * 0.3`), the column is that rounding, and a difference
        // quotient gives 0. Columns within 64 ε of the row's size pass.
        let jacobian_rounding: Vec<f64> = jacobians
            .iter()
            .map(|(_, rows)| {
                let row: f64 = (0..comps.len())
                    .map(|k| rows.iter().zip(&ybar).map(|(r, w)| r[k] * w).sum::<f64>().abs())
                    .sum();
                64.0 * f64::EPSILON * row
            })
            .collect();
        // Each component on its own (at most 64, chosen at random beyond that).
        let mut picks: Vec<usize> = (0..comps.len()).collect();
        while picks.len() > 64 {
            let k = rng.range(0, picks.len() as i64 - 1) as usize;
            picks.swap_remove(k);
        }
        for j in picks {
            let mut e = vec![0.0; comps.len()];
            e[j] = 1.0;
            let diffs = differences(&e);
            let (arg, label, _) = &comps[j];
            report.compared += 1;
            if let Some((fd, false)) = agrees(&diffs, &ybar, &wbar, grad[j]) {
                report.failures.push(Failure::Component {
                    trial,
                    arg: *arg,
                    component: label.clone(),
                    reverse: grad[j],
                    finite_difference: fd,
                });
            }
            for ((sweep, rows), &rounding) in jacobians.iter().zip(&jacobian_rounding) {
                let column: f64 = rows.iter().zip(&ybar).map(|(r, w)| r[j] * w).sum();
                if let Some((fd, false)) = agrees(&diffs, &ybar, &no_weights, column) {
                    if (fd - column).abs() <= rounding {
                        continue;
                    }
                    report.failures.push(Failure::Jacobian {
                        trial,
                        sweep: *sweep,
                        arg: *arg,
                        component: label.clone(),
                        jacobian: column,
                        finite_difference: fd,
                    });
                }
            }
        }
        // The dot-product identity along a random direction.
        if !comps.is_empty() {
            let mut v: Vec<f64> = (0..comps.len()).map(|_| rng.normal()).collect();
            let norm = dot(&v, &v).sqrt().max(1e-300);
            v.iter_mut().for_each(|x| *x /= norm);
            let ad = dot(&v, &grad);
            if let Some((fd, false)) = directional(&v, ad) {
                report.failures.push(Failure::DotProduct { trial, reverse: ad, finite_difference: fd });
            }
            // Forward mode along the same direction: against finite differences, and
            // against reverse mode over the whole model, <JVP(v), w> = <v, VJP(w)>.
            // Forward mode along `dir`: the tangents of the result and of the arguments'
            // state after the call, flattened.
            let jvp = |dir: &[f64]| {
                let tangents = tangents_along(types, &f.params, &constant, &x, dir);
                program.jvp_with(func, &deep_copy_all(&x), &tangents, &kinds, limits).map(|out| {
                    let mut dy = Vec::new();
                    if let Some(t) = f.ret {
                        flatten_tangent(types, t, &out.tangent, &mut dy);
                    }
                    (dy, flatten_tangents(types, &f.params, &constant, &out.args_tangent))
                })
            };
            match jvp(&v) {
                Ok((dy, dpost)) => {
                    if dy.len() != ybar.len() || dpost.len() != wbar.len() {
                        report.failures.push(Failure::Error {
                            trial,
                            message: format!(
                                "forward mode gives {} + {} tangent components, the primal {} + {}",
                                dy.len(),
                                dpost.len(),
                                ybar.len(),
                                wbar.len()
                            ),
                        });
                    } else {
                        let forward = dot(&ybar, &dy) + dot(&wbar, &dpost);
                        if let Some((fd, false)) = directional(&v, forward) {
                            report.failures.push(Failure::Forward { trial, forward, finite_difference: fd });
                            // Which arguments forward mode gets wrong: one at a time.
                            for (a, name) in names.iter().enumerate() {
                                let va: Vec<f64> = comps
                                    .iter()
                                    .zip(&v)
                                    .map(|((arg, _, _), x)| if *arg == a { *x } else { 0.0 })
                                    .collect();
                                if va.iter().all(|x| *x == 0.0) {
                                    continue;
                                }
                                let Ok((dya, dpa)) = jvp(&va) else { continue };
                                if dya.len() != ybar.len() || dpa.len() != wbar.len() {
                                    continue;
                                }
                                let fa = dot(&ybar, &dya) + dot(&wbar, &dpa);
                                if let Some((fd, false)) = directional(&va, fa) {
                                    report.failures.push(Failure::ForwardArgument {
                                        trial,
                                        arg: a,
                                        name: name.clone(),
                                        forward: fa,
                                        finite_difference: fd,
                                    });
                                }
                            }
                        }
                        let scale = ybar.iter().zip(&dy).map(|(a, b)| (a * b).abs()).sum::<f64>()
                            + wbar.iter().zip(&dpost).map(|(a, b)| (a * b).abs()).sum::<f64>()
                            + v.iter().zip(&grad).map(|(a, b)| (a * b).abs()).sum::<f64>();
                        if !close(forward, ad, options.rtol, scale) {
                            report.failures.push(Failure::Adjoint { trial, forward, reverse: ad });
                        }
                    }
                }
                Err(e) => {
                    let message = match e {
                        GradError::Runtime(e) => format!("forward mode fails: {}", render(&e)),
                        other => format!("forward mode fails: {other}"),
                    };
                    report.failures.push(Failure::Error { trial, message });
                }
            }
        }
        // Second order: forward mode over the VJP with these cotangents.
        if !comps.is_empty() && options.order >= 2 {
            let cotangents = Cotangents { seed, seed_args: &seed_args };
            let at = Point { x: &x, comps: &comps, grad: &grad };
            let mut draw = || {
                let mut u: Vec<f64> = (0..comps.len()).map(|_| rng.normal()).collect();
                let norm = dot(&u, &u).sqrt().max(1e-300);
                u.iter_mut().for_each(|x| *x /= norm);
                u
            };
            let directions = [draw(), draw(), draw()];
            let second = SecondOrder {
                program,
                func,
                trial,
                options,
                limits,
                fd_limits: &fd_limits,
                constant: &constant,
                kinds: &kinds,
                timed_out: &timed_out,
            };
            second.check(&at, &cotangents, &directions, &render, &mut report);
            // For an `f64` result, also the Hessian of the result alone (what `mcc hvp`
            // and `mcc hessian` compute: a cotangent of 1, none on the arguments).
            if f.ret == Some(TypeTable::F64) {
                let none = vec![None; f.params.len()];
                let plain = Cotangents { seed: Some(Val::F64(1.0)), seed_args: &none };
                match second.vjp_at(&x, &plain, limits) {
                    Some(gradient) if gradient.len() == comps.len() => {
                        let at = Point { x: &x, comps: &comps, grad: &gradient };
                        second.check(&at, &plain, &directions, &render, &mut report);
                    }
                    _ => report.failures.push(Failure::Error {
                        trial,
                        message: "the gradient of the result alone could not be computed".into(),
                    }),
                }
            }
        }
        // One shadow per address after the forward pass.
        if let Err(detail) = check_aliasing(d, func, &x, limits) {
            report.failures.push(Failure::Aliasing { trial, detail });
        }
    }
    report.timed_out = timed_out.get();
    let failing: std::collections::BTreeSet<usize> = report.failures.iter().map(Failure::trial).collect();
    report.arguments = drawn
        .into_iter()
        .enumerate()
        .filter(|(k, _)| failing.contains(&(k + 1)))
        .map(|(k, a)| (k + 1, a))
        .collect();
    report
}

/// The cotangents of one trial: of the result, and of the arguments' state after the call.
struct Cotangents<'a> {
    seed: Option<Val>,
    seed_args: &'a [Option<Val>],
}

/// Where a trial evaluates: the arguments, their differentiable scalars (argument,
/// label, value) and the VJP there, flattened alike.
struct Point<'a> {
    x: &'a [Val],
    comps: &'a [(usize, String, f64)],
    grad: &'a [f64],
}

/// The second-order checks of one trial.
struct SecondOrder<'a> {
    program: &'a Program,
    func: FuncId,
    trial: usize,
    options: &'a CheckOptions,
    limits: &'a Limits,
    /// Limits for the evaluations at perturbed arguments (a time budget).
    fd_limits: &'a Limits,
    /// The arguments held constant, and the kinds that say so.
    constant: &'a [bool],
    kinds: &'a [crate::ArgKind],
    /// Evaluations at perturbed arguments that ran out of time.
    timed_out: &'a std::cell::Cell<usize>,
}

impl SecondOrder<'_> {
    /// The arguments of `at` moved by `step` along `dir` (over the differentiable scalars).
    fn shifted(&self, at: &Point, dir: &[f64], step: f64) -> Vec<Val> {
        let f = &self.program.module.funcs[self.func];
        let types = &self.program.module.types;
        let mut vals = at.comps.iter().zip(dir).map(|((_, _, b), d)| b + step * d);
        rebuild_args(types, &f.params, self.constant, at.x, &mut vals)
    }

    /// The VJP for `cot` at `x`, flattened, on the program's engine.
    fn vjp_at(&self, x: &[Val], cot: &Cotangents, limits: &Limits) -> Option<Vec<f64>> {
        let f = &self.program.module.funcs[self.func];
        let types = &self.program.module.types;
        let (x, seed) = (deep_copy_all(x), cot.seed.clone());
        let out = if self.kinds.is_empty() {
            self.program.vjp(self.func, &x, seed, cot.seed_args, limits)
        } else {
            self.program.vjp_with(self.func, &x, seed, cot.seed_args, self.kinds, limits)
        };
        let out = match out {
            Ok(out) => out,
            Err(GradError::Runtime(e))
                if matches!(e.kind, mcir_interp::RuntimeErrorKind::Timeout(_))
                    && std::ptr::eq(limits, self.fd_limits) =>
            {
                self.timed_out.set(self.timed_out.get() + 1);
                return None;
            }
            Err(_) => return None,
        };
        Some(flatten_tangents(types, &f.params, self.constant, &out.gradient))
    }

    /// The derivative of the VJP along `dir` (forward over reverse), flattened.
    fn vjp_tangent(&self, at: &Point, cot: &Cotangents, dir: &[f64]) -> Result<Vec<f64>, GradError> {
        let f = &self.program.module.funcs[self.func];
        let types = &self.program.module.types;
        let direction = tangents_along(types, &f.params, self.constant, at.x, dir);
        let out = self.program.vjp_tangent_with(
            self.func,
            &deep_copy_all(at.x),
            cot.seed.clone(),
            cot.seed_args,
            &direction,
            self.kinds,
            self.limits,
        )?;
        Ok(flatten_tangents(types, &f.params, self.constant, &out.tangent))
    }

    /// With `φ(x) = <seed, f(x)> + <seed_args, x after the call>`, whose gradient is the
    /// VJP: its Hessian along `directions[0]` by forward over reverse against central
    /// differences of the VJP (contracted with `directions[1]`, and component by
    /// component when that disagrees), and the Hessian's symmetry,
    /// `<d1, H d0> = <d0, H d1>`.
    fn check(
        &self,
        at: &Point,
        cot: &Cotangents,
        directions: &[Vec<f64>; 3],
        render: &dyn Fn(&mcir_interp::RuntimeError) -> String,
        report: &mut CheckReport,
    ) {
        let trial = self.trial;
        let rtol = self.options.rtol;
        let fail = |e: GradError| {
            let message = match e {
                GradError::Runtime(e) => format!("forward over reverse fails: {}", render(&e)),
                other => format!("forward over reverse fails: {other}"),
            };
            Failure::Error { trial, message }
        };
        let [v, u, w] = directions;
        let hv = match self.vjp_tangent(at, cot, v) {
            Ok(t) => t,
            Err(e) => return report.failures.push(fail(e)),
        };
        if hv.len() != at.grad.len() {
            let message =
                format!("forward over reverse gives {} components, the gradient {}", hv.len(), at.grad.len());
            return report.failures.push(Failure::Error { trial, message });
        }
        // Central differences of the VJP along v at each step size.
        let mut differences: Vec<(f64, Vec<f64>)> = Vec::new();
        for h in STEPS {
            let plus = self.vjp_at(&self.shifted(at, v, h), cot, self.fd_limits);
            let minus = self.vjp_at(&self.shifted(at, v, -h), cot, self.fd_limits);
            let (Some(p), Some(m)) = (plus, minus) else { continue };
            if p.len() != hv.len() || m.len() != hv.len() {
                continue;
            }
            let dg: Vec<f64> = p.iter().zip(&m).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            if dg.iter().all(|x| x.is_finite()) {
                differences.push((h, dg));
            }
        }
        // Agreement at some step size, allowing for what rounding in the VJP lets a
        // difference quotient resolve (about eps |VJP| / h).
        let sweep = |weights: &dyn Fn(usize) -> f64, want: f64| -> Option<(f64, bool)> {
            let magnitude: f64 = at.grad.iter().enumerate().map(|(i, g)| (weights(i) * g).abs()).sum();
            let mut best: Option<(f64, f64)> = None;
            for (h, dg) in &differences {
                let fd: f64 = dg.iter().enumerate().map(|(i, d)| weights(i) * d).sum();
                let scale: f64 = dg.iter().enumerate().map(|(i, d)| (weights(i) * d).abs()).sum();
                let noise = 8.0 * f64::EPSILON * magnitude / h;
                if close(fd, want, rtol, scale) || (fd - want).abs() <= noise {
                    return Some((fd, true));
                }
                let miss = (fd - want).abs();
                if best.is_none_or(|(_, m)| miss < m) {
                    best = Some((fd, miss));
                }
            }
            best.map(|(fd, _)| (fd, false))
        };
        report.compared += 1;
        let want = dot(u, &hv);
        if let Some((fd, false)) = sweep(&|i| u[i], want) {
            report.failures.push(Failure::SecondOrder {
                trial,
                forward_over_reverse: want,
                finite_difference: fd,
            });
            for (j, (arg, label, _)) in at.comps.iter().enumerate() {
                if let Some((fd, false)) = sweep(&|i| if i == j { 1.0 } else { 0.0 }, hv[j]) {
                    report.failures.push(Failure::SecondOrderComponent {
                        trial,
                        arg: *arg,
                        component: label.clone(),
                        forward_over_reverse: hv[j],
                        finite_difference: fd,
                    });
                }
            }
        }
        // Symmetry: <w, H v> = <v, H w>.
        match self.vjp_tangent(at, cot, w) {
            Ok(hw) if hw.len() == hv.len() => {
                let (a, b) = (dot(w, &hv), dot(v, &hw));
                let scale = w.iter().zip(&hv).map(|(p, q)| (p * q).abs()).sum::<f64>()
                    + v.iter().zip(&hw).map(|(p, q)| (p * q).abs()).sum::<f64>();
                // Rounding: forward over reverse computes `H v` from adjoints of the
                // gradient's size, so where the Hessian is zero or nearly (`x · s · (1 / s)`
                // is `x`), `<w, H v>` and `<v, H w>` are rounding of that size, with no
                // relation to each other.
                let norm = |x: &[f64]| x.iter().map(|c| c.abs()).sum::<f64>();
                let noise = 64.0 * f64::EPSILON * norm(at.grad) * norm(v) * norm(w);
                if !close(a, b, rtol, scale) && (a - b).abs() > noise {
                    report.failures.push(Failure::Symmetry { trial, along_v: a, along_w: b });
                }
            }
            Ok(_) => {}
            Err(e) => report.failures.push(fail(e)),
        }
    }
}

/// Runs the forward pass alone and checks that primal addresses and shadow addresses
/// correspond one to one, with equal shapes.
fn check_aliasing(d: &mut Differentiated, func: FuncId, x: &[Val], limits: &Limits) -> Result<(), String> {
    let probe = d.probe(func).map_err(|e| e.to_string())?;
    let module = d.module();
    let f = &module.funcs[func];
    let types = &module.types;
    let args = deep_copy_all(x);
    let mut interp = mcir_interp::Interpreter::new(module, limits.clone());
    let out = interp.call(probe, args.clone()).map_err(|e| format!("the forward pass fails: {e}"))?;
    let Some(Val::Agg(items)) = &out else { return Err("the probe returned no tuple".into()) };
    let mut pairs = Pairs::default();
    let mut k = 1;
    for (i, &t) in f.params.iter().enumerate() {
        for leaf in fdata_leaves(types, t) {
            let part = extract(&args[i], &leaf.path);
            let shadow = items.get(k).cloned().unwrap_or(Val::Unit);
            k += 1;
            pairs.walk(types, leaf.ty, &part, &shadow)?;
        }
    }
    if let (Some(r), Some(Val::Agg(fo))) = (f.ret, items.first()) {
        let y = fo.first().cloned().unwrap_or(Val::Unit);
        for (j, leaf) in fdata_leaves(types, r).into_iter().enumerate() {
            let part = extract(&y, &leaf.path);
            let shadow = fo.get(1 + j).cloned().unwrap_or(Val::Unit);
            pairs.walk(types, leaf.ty, &part, &shadow)?;
        }
    }
    Ok(())
}

fn extract(v: &Val, path: &[u32]) -> Val {
    let mut cur = v.clone();
    for &i in path {
        cur = match &cur {
            Val::Agg(f) => f.get(i as usize).cloned().unwrap_or(Val::Unit),
            _ => Val::Unit,
        };
    }
    cur
}

#[derive(Default)]
struct Pairs {
    to_shadow: HashMap<usize, usize>,
    to_primal: HashMap<usize, usize>,
}

impl Pairs {
    fn pair(&mut self, p: usize, s: usize, what: &str) -> Result<bool, String> {
        match (self.to_shadow.get(&p), self.to_primal.get(&s)) {
            (Some(&s0), _) if s0 != s => Err(format!("one {what} has two different shadows")),
            (_, Some(&p0)) if p0 != p => Err(format!("two different {what}s share one shadow")),
            (Some(_), _) => Ok(false),
            _ => {
                self.to_shadow.insert(p, s);
                self.to_primal.insert(s, p);
                Ok(true)
            }
        }
    }

    fn walk(&mut self, types: &TypeTable, t: TypeId, p: &Val, s: &Val) -> Result<(), String> {
        if !has_tangent(types, t) {
            return Ok(());
        }
        match (types.get(t), p, s) {
            (Type::Array { .. }, Val::Array(a), Val::Array(b)) => {
                if a.shape != b.shape {
                    return Err(format!(
                        "an array of shape {:?} has a shadow of shape {:?}",
                        a.shape, b.shape
                    ));
                }
                self.pair(Rc::as_ptr(a) as *const () as usize, Rc::as_ptr(b) as *const () as usize, "array")?;
                Ok(())
            }
            (Type::Ref(inner), Val::Ref(a), Val::Ref(b)) => {
                if self.pair(
                    Rc::as_ptr(a) as *const () as usize,
                    Rc::as_ptr(b) as *const () as usize,
                    "ref",
                )? {
                    let (pa, pb) = (a.borrow().clone(), b.borrow().clone());
                    self.walk(types, *inner, &pa, &pb)?;
                }
                Ok(())
            }
            (Type::Struct(_), Val::Mut(a), Val::Mut(b)) => {
                if self.pair(
                    Rc::as_ptr(a) as *const () as usize,
                    Rc::as_ptr(b) as *const () as usize,
                    "record",
                )? {
                    let (fa, fb) = (a.borrow().clone(), b.borrow().clone());
                    if let Some((_, def)) = types.as_struct(t) {
                        for ((_, ft), (x, y)) in def.fields.iter().zip(fa.iter().zip(fb.iter())) {
                            self.walk(types, *ft, x, y)?;
                        }
                    }
                }
                Ok(())
            }
            (Type::Tuple(items), Val::Agg(a), Val::Agg(b)) => {
                for ((&it, x), y) in items.iter().zip(a.iter()).zip(b.iter()) {
                    self.walk(types, it, x, y)?;
                }
                Ok(())
            }
            (Type::Struct(_), Val::Agg(a), Val::Agg(b)) => {
                if let Some((_, def)) = types.as_struct(t) {
                    for ((_, ft), (x, y)) in def.fields.iter().zip(a.iter().zip(b.iter())) {
                        self.walk(types, *ft, x, y)?;
                    }
                }
                Ok(())
            }
            (Type::Scalar(_), _, _) => Ok(()),
            _ => Err(format!("a {} has a shadow of the wrong kind", types.display(t))),
        }
    }
}
