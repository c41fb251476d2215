//! Differential testing on generated programs (`mcir_gen`): each runs to the same result
//! on the interpreter and on native code, and compiled for the shapes of its arguments
//! (`--specialise`) to the same result and gradient as generic code, the checker
//! confirms its derived rule against finite differences on both engines, and making any
//! argument constant leaves the derivatives of the others as they were. `MCIR_GEN_PROGRAMS=N` sets how many
//! (300 by default; `docs/reliability.md` has the longer run), `MCIR_GEN_FIRST=K` the
//! first seed.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::{json_mismatch, mcc};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What went wrong with the program of `seed`, if anything.
fn differences(seed: u64, dir: &std::path::Path) -> Option<String> {
    let g = mcir_gen::generate(seed);
    let path = dir.join(format!("gen_{seed}.mcir"));
    std::fs::write(&path, &g.source).unwrap();
    let file = path.to_str().unwrap();
    let report = |what: &str, detail: String| {
        Some(format!("seed {seed}: {what}\n{detail}\n{}\nargs: {}", g.source, g.args))
    };
    let native = mcc(&["run", file, "--args", &g.args]);
    let interp = mcc(&["run", file, "--args", &g.args, "--interp"]);
    if native.code != 0 || interp.code != 0 {
        return report(
            "a run failed",
            format!(
                "native: {}{}\ninterpreter: {}{}",
                native.stdout, native.stderr, interp.stdout, interp.stderr
            ),
        );
    }
    if native.stdout != interp.stdout {
        let (a, b): (Json, Json) =
            (serde_json::from_str(&native.stdout).unwrap(), serde_json::from_str(&interp.stdout).unwrap());
        if let Some(m) = json_mismatch(&a, &b, 1e-12, "") {
            return report("native code and the interpreter disagree", m);
        }
    }
    for cmd in ["run", "grad"] {
        let generic = mcc(&[cmd, file, "--args", &g.args]);
        let special = mcc(&[cmd, file, "--args", &g.args, "--specialise"]);
        if generic.code != special.code {
            return report(
                &format!("`{cmd} --specialise` ended otherwise"),
                format!(
                    "generic: {}{}\nspecialised: {}{}",
                    generic.stdout, generic.stderr, special.stdout, special.stderr
                ),
            );
        }
        if generic.code == 0 {
            let (a, b): (Json, Json) = (
                serde_json::from_str(&special.stdout).unwrap(),
                serde_json::from_str(&generic.stdout).unwrap(),
            );
            if let Some(m) = json_mismatch(&a, &b, 1e-12, "") {
                return report(&format!("`{cmd} --specialise` differs"), m);
            }
        }
    }
    for engine in [&[][..], &["--interp"][..]] {
        let mut words = vec!["check", file, "--args", &g.args, "--trials", "1"];
        words.extend(engine);
        let out = mcc(&words);
        if out.code != 0 {
            return report(
                &format!("the checker failed {engine:?}"),
                format!("{}{}", out.stdout, out.stderr),
            );
        }
    }
    constant_arguments(file, &g.args).and_then(|m| report("a constant argument changed a derivative", m))
}

/// Each argument in turn made constant (`--const I`): the gradient and the JVP of the
/// other arguments must not change, and the constant's derivative is `null`.
fn constant_arguments(file: &str, args: &str) -> Option<String> {
    let parse = |out: mcir_cli::Outcome| -> Result<Json, String> {
        if out.code != 0 {
            return Err(format!("{}{}", out.stdout, out.stderr));
        }
        serde_json::from_str(&out.stdout).map_err(|e| e.to_string())
    };
    let all = match parse(mcc(&["grad", file, "--args", args])) {
        Ok(j) => j,
        Err(e) => return Some(format!("grad: {e}")),
    };
    let gradient = all["gradient"].as_array().cloned().unwrap_or_default();
    for i in 0..gradient.len() {
        if gradient[i].is_null() {
            continue;
        }
        let k = i.to_string();
        let grad = match parse(mcc(&["grad", file, "--args", args, "--const", &k])) {
            Ok(j) => j,
            Err(e) => return Some(format!("grad --const {i}: {e}")),
        };
        let mut expected = all.clone();
        expected["gradient"][i] = Json::Null;
        if let Some(m) = json_mismatch(&grad, &expected, 1e-12, "") {
            return Some(format!("grad --const {i}: {m}"));
        }
        // The JVP with argument i constant equals the JVP with a zero tangent for it (the
        // gradient has the shape of the tangents: it serves as the direction).
        let mut without = gradient.clone();
        without[i] = Json::Null;
        let mut zeroed = gradient.clone();
        zeroed[i] = zero_numbers(&zeroed[i]);
        let jvp = |t: &[Json], extra: &[&str]| {
            let t = Json::Array(t.to_vec()).to_string();
            let mut words = vec!["jvp", file, "--args", args, "--tangent", &t];
            words.extend(extra);
            parse(mcc(&words))
        };
        let (with_const, with_zero) = match (jvp(&without, &["--const", &k]), jvp(&zeroed, &[])) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Some(format!("jvp --const {i}: {e}")),
        };
        let mut expected = with_zero;
        expected["args_tangent"][i] = Json::Null;
        if let Some(m) = json_mismatch(&with_const, &expected, 1e-12, "") {
            return Some(format!("jvp --const {i}: {m}"));
        }
    }
    None
}

/// `j` with every number replaced by zero.
fn zero_numbers(j: &Json) -> Json {
    match j {
        Json::Number(_) => Json::from(0.0),
        Json::Array(items) => Json::Array(items.iter().map(zero_numbers).collect()),
        Json::Object(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), zero_numbers(v))).collect()),
        other => other.clone(),
    }
}

#[test]
fn generated_programs_agree_across_engines_and_pass_the_checker() {
    let count = env_number("MCIR_GEN_PROGRAMS", 300);
    let first = env_number("MCIR_GEN_FIRST", 0);
    let dir = std::env::temp_dir().join(format!("mcir-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let failures: Vec<String> = (first..first + count).filter_map(|seed| differences(seed, &dir)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("generated programs: seeds {first}..{}, {} failed", first + count, failures.len());
    assert!(
        failures.is_empty(),
        "{} of {count} generated programs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
