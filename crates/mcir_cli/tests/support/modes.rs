//! Every derivative mode of one program at one point, on both engines: `grad`, a VJP
//! with random cotangents, `jvp` along a random tangent, `hvp` (plain, and of the VJP
//! with those cotangents), `jacobian` and `hessian` where small, each again with an
//! argument constant and with the function compiled for the arguments' shapes
//! (`--specialise`). Native code must agree with the interpreter, and the checker
//! (`mcc check`, finite differences for every mode) must pass on both engines. Each
//! argument made constant in turn leaves the others' derivatives as they were.

use super::{json_mismatch, mcc, Rng};
use mcir::check::{tangent_from, values_of};
use mcir::grad::{deep_copy_all, write_tangent};
use mcir::{Limits, Val};
use serde_json::Value as Json;

/// Native code and the interpreter agree to this relative tolerance: native reverse
/// passes may add an adjoint's terms as two partial sums (ARCHITECTURE.md), so their
/// derivatives agree up to rounding.
pub const ENGINE_TOL: f64 = 1e-9;

/// The most input scalars for which `hessian` runs, and input or output scalars for
/// which `jacobian` runs.
const MAX_DENSE: usize = 40;

/// A program and the point to differentiate it at.
pub struct Case<'a> {
    /// The `.mcir` file.
    pub file: &'a str,
    /// The entry function, if not the default.
    pub func: Option<&'a str>,
    /// The arguments (JSON).
    pub args: &'a str,
    /// Whether the arguments sit at a kink on purpose: second order is then not
    /// checked against finite differences (first order follows the conventions).
    pub kink: bool,
    /// Whether the point is not differentiable at all (only the engines are compared).
    pub nondifferentiable: bool,
    /// The seed of the random directions and cotangents.
    pub seed: u64,
}

/// The JSON of a tangent of a value of type `t` shaped like `like`, with scalars drawn
/// from `rng` (or zero).
fn random_tangent(
    rng: &mut Rng,
    types: &mcir::ir::TypeTable,
    t: mcir::ir::TypeId,
    like: &Val,
    zero: bool,
) -> String {
    let mut draws = std::iter::from_fn(|| Some(if zero { 0.0 } else { rng.normal() }));
    let v = tangent_from(types, t, like, &mut draws);
    let mut s = String::new();
    write_tangent(&mut s, types, t, &v);
    s
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

/// `mcc` with `words[0]`, the case's file, function and arguments, then `words[1..]`.
fn words_for<'a>(case: &'a Case, words: &'a [String]) -> Vec<&'a str> {
    let mut base: Vec<&str> = vec![&words[0], case.file];
    if let Some(f) = case.func {
        base.extend(["--fn", f]);
    }
    base.extend(["--args", case.args]);
    base.extend(words[1..].iter().map(|s| s.as_str()));
    base
}

/// Runs `words` on native code.
fn native(case: &Case, words: &[String]) -> mcir_cli::Outcome {
    mcc(&words_for(case, words))
}

/// Runs `words` (after the file) on both engines: the outcomes must agree.
fn both_engines(case: &Case, words: &[String]) -> Result<mcir_cli::Outcome, String> {
    let base = words_for(case, words);
    let native = mcc(&base);
    let mut interp_words = base.clone();
    interp_words.push("--interp");
    let interp = mcc(&interp_words);
    let shown = words.join(" ");
    if native.code != interp.code {
        return Err(format!(
            "`{shown}`: native code exits {} and the interpreter {}\nnative: {}{}\ninterpreter: {}{}",
            native.code, interp.code, native.stdout, native.stderr, interp.stdout, interp.stderr
        ));
    }
    if native.code != 0 {
        if native.stderr != interp.stderr {
            return Err(format!(
                "`{shown}`: the engines fail differently\nnative: {}\ninterpreter: {}",
                native.stderr, interp.stderr
            ));
        }
        return Ok(interp);
    }
    same_json(&shown, &native, &interp)?;
    Ok(interp)
}

/// The two outputs hold the same JSON, numbers to [`ENGINE_TOL`].
fn same_json(what: &str, a: &mcir_cli::Outcome, b: &mcir_cli::Outcome) -> Result<(), String> {
    if a.stdout == b.stdout {
        return Ok(());
    }
    let parse = |o: &mcir_cli::Outcome| serde_json::from_str::<Json>(&o.stdout).map_err(|e| e.to_string());
    let (x, y) = (parse(a)?, parse(b)?);
    match json_mismatch(&x, &y, ENGINE_TOL, "$") {
        None => Ok(()),
        Some(m) => Err(format!("`{what}` differs: {m}\n  {}  {}", a.stdout.trim(), b.stdout.trim())),
    }
}

/// Every mode of `case` (see the module documentation): `Err` says what went wrong.
pub fn every_mode(case: &Case) -> Result<(), String> {
    let text = std::fs::read_to_string(case.file).map_err(|e| e.to_string())?;
    let program = mcir::Program::compile(case.file, &text).map_err(|e| e.render())?;
    let func = program.entry(case.func).map_err(|e| e.to_string())?;
    let module = program.module();
    let types = &module.types;
    let f = &module.funcs[func];
    let args = mcir::json::decode_args(module, func, case.args).map_err(|e| e.message)?;
    let after = deep_copy_all(&args);
    let Ok(value) = program.call(func, &after, &Limits::default()) else {
        // A program that fails at its arguments: `run` compares the errors elsewhere.
        return Ok(());
    };
    let mut rng = Rng(case.seed);
    let has = |t| mcir_ad::tangent::has_tangent(types, t);
    let n_in: usize = f.params.iter().zip(&args).map(|(&t, a)| values_of(types, t, a).len()).sum();
    let result = f.ret.filter(|&t| has(t)).zip(value.as_ref());
    let n_out = result.map_or(0, |(t, v)| values_of(types, t, v).len());
    let scalar = f.ret == Some(mcir::ir::TypeTable::F64);
    let differentiable: Vec<usize> = (0..f.params.len()).filter(|&i| has(f.params[i])).collect();

    let tangent: Vec<String> =
        f.params.iter().zip(&args).map(|(&t, a)| random_tangent(&mut rng, types, t, a, false)).collect();
    let seed = result.map(|(t, v)| random_tangent(&mut rng, types, t, v, false));
    let seed_args: Vec<String> = f
        .params
        .iter()
        .zip(&after)
        .map(|(&t, a)| {
            if has(t) && rng.chance(0.6) {
                random_tangent(&mut rng, types, t, a, false)
            } else {
                "null".into()
            }
        })
        .collect();
    let seeded = seed_args.iter().any(|s| s != "null");
    let mut seed_words: Vec<String> = Vec::new();
    if let Some(s) = &seed {
        seed_words.extend(["--seed".into(), s.clone()]);
    }
    if seeded {
        seed_words.extend(["--seed-args".into(), list(&seed_args)]);
    }
    let words = |w: &[&str]| -> Vec<String> { w.iter().map(|s| s.to_string()).collect() };
    let t = list(&tangent);

    // Each mode on both engines; those that succeed again compiled for the shapes.
    let mut commands: Vec<Vec<String>> = Vec::new();
    if scalar {
        commands.push(words(&["grad"]));
        commands.push(words(&["hvp", "--tangent", &t]));
    }
    if seed.is_some() || seeded {
        commands.push([words(&["grad"]), seed_words.clone()].concat());
        commands.push([words(&["hvp", "--tangent", &t]), seed_words.clone()].concat());
    }
    commands.push(words(&["jvp", "--tangent", &t]));
    if n_out > 0 && n_in <= MAX_DENSE && n_out <= MAX_DENSE {
        commands.push(words(&["jacobian"]));
    }
    if scalar && n_in <= MAX_DENSE {
        commands.push(words(&["hessian"]));
    }
    for cmd in &commands {
        let generic = both_engines(case, cmd)?;
        if generic.code != 0 {
            continue;
        }
        let mut special = cmd.clone();
        special.push("--specialise".into());
        let out = native(case, &special);
        if out.code != 0 {
            return Err(format!("`{}` fails: {}{}", special.join(" "), out.stdout, out.stderr));
        }
        same_json(&special.join(" "), &out, &generic)?;
    }

    // Each argument constant in turn: the other arguments' derivatives do not change,
    // and the constant's is null (where values are finite: a zero tangent times an
    // infinity is NaN, no tangent is zero). `jvp` and `grad` on native code for every
    // argument; for one of them `hvp` too, and a cache, on both engines.
    let chosen = (!differentiable.is_empty()).then(|| differentiable[rng.below(differentiable.len())]);
    for &i in differentiable.iter().filter(|_| !case.nondifferentiable) {
        let k = i.to_string();
        let mut zeroed = tangent.clone();
        zeroed[i] = random_tangent(&mut rng, types, f.params[i], &args[i], true);
        let mut without = tangent.clone();
        without[i] = "null".into();
        let mut pairs: Vec<(Vec<String>, Vec<String>, Vec<&str>)> = vec![(
            words(&["jvp", "--tangent", &list(&without), "--const", &k]),
            words(&["jvp", "--tangent", &list(&zeroed)]),
            vec!["args_tangent"],
        )];
        if scalar {
            pairs.push((words(&["grad", "--const", &k]), words(&["grad"]), vec!["gradient"]));
        }
        let both = chosen == Some(i);
        if both && scalar {
            pairs.push((
                words(&["hvp", "--tangent", &list(&without), "--const", &k]),
                words(&["hvp", "--tangent", &list(&zeroed)]),
                vec!["gradient", "hvp"],
            ));
        }
        for (with_const, reference, nulled) in pairs {
            let (a, b) = if both {
                (both_engines(case, &with_const)?, both_engines(case, &reference)?)
            } else {
                (native(case, &with_const), native(case, &reference))
            };
            if a.code != b.code {
                return Err(format!(
                    "`{}` exits {}, `{}` {}:\n{}{}",
                    with_const.join(" "),
                    a.code,
                    reference.join(" "),
                    b.code,
                    a.stderr,
                    b.stderr
                ));
            }
            if a.code != 0 {
                continue;
            }
            let got: Json = serde_json::from_str(&a.stdout).map_err(|e| e.to_string())?;
            let mut want: Json = serde_json::from_str(&b.stdout).map_err(|e| e.to_string())?;
            for key in nulled {
                want[key][i] = Json::Null;
            }
            if let Some(m) = json_mismatch(&got, &want, 1e-12, "$") {
                return Err(format!("`{}`: {m}", with_const.join(" ")));
            }
        }
        if both && scalar {
            both_engines(case, &words(&["grad", "--cache", &k]))?;
        }
    }

    // Every mode against finite differences, on both engines.
    if !case.nondifferentiable {
        let mut check = words(&["check", "--trials", "1"]);
        if case.kink {
            check.extend(words(&["--order", "1"]));
        }
        for engine in [None, Some("--interp")] {
            let mut w = words_for(case, &check);
            w.extend(engine);
            let out = mcc(&w);
            if out.code != 0 {
                return Err(format!("`{}` fails:\n{}{}", w[2..].join(" "), out.stdout, out.stderr));
            }
        }
    }
    Ok(())
}
