//! Every derivative mode on both engines: the regression cases of `tests/modes/` (each
//! a program, a command and an independently computed expectation), and every program
//! of the corpus (`tests/programs`, `tests/check`, `tests/second_order`, `tests/modes`,
//! `tests/checkpoint`, `tests/arg_kinds`; at drawn arguments where a program has none)
//! through every mode (`support::modes`): native code against the interpreter, and the
//! checker's finite differences for each mode on both.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::modes::{every_mode, Case};
use support::*;

#[test]
fn the_regression_cases_hold_on_both_engines() {
    let cases = cases("modes");
    assert!(cases.len() >= 15, "tests/modes holds the regression cases");
    let mut failures = Vec::new();
    for path in &cases {
        let text = std::fs::read_to_string(path).unwrap();
        let cmd = header(&text, "cmd").expect("cmd header");
        let expect: Json = serde_json::from_str(&header(&text, "expect").expect("expect header")).unwrap();
        let mut extra: Vec<String> = Vec::new();
        for flag in ["tangent", "seed", "seed-args"] {
            if let Some(v) = header(&text, flag) {
                extra.extend([format!("--{flag}"), v]);
            }
        }
        extra.extend(header(&text, "flags").unwrap_or_default().split_whitespace().map(String::from));
        for engine in [None, Some("--interp")] {
            let mut words: Vec<&str> = extra.iter().map(|s| s.as_str()).collect();
            words.extend(engine);
            let out = command_on_case(&cmd, path, &words);
            if out.code != 0 {
                failures.push(format!("{} ({engine:?}): exit {}:\n{}", rel(path), out.code, out.stderr));
                continue;
            }
            let got: Json = serde_json::from_str(&out.stdout).unwrap();
            if let Some(m) = json_mismatch(&got, &expect, 1e-11, "$") {
                failures.push(format!("{} ({engine:?}): {m}\n  got {}", rel(path), out.stdout.trim()));
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Arguments for a program that has none in its headers: drawn as `mcc check` draws
/// them (one extent for every array), as JSON.
fn drawn_args(path: &std::path::Path, func: Option<&str>) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let program = mcir::Program::compile(&rel(path), &text).unwrap();
    let id = program.entry(func).unwrap();
    let module = program.module();
    let mut rng = mcir::check::Rng::new(0x5eed);
    let vals: Vec<mcir::Val> = module.funcs[id]
        .params
        .iter()
        .map(|&t| mcir::check::random_value(&mut rng, &module.types, t, 4))
        .collect();
    let items: Vec<String> =
        module.funcs[id].params.iter().zip(&vals).map(|(&t, v)| mcir::json::encode(module, t, v)).collect();
    format!("[{}]", items.join(", "))
}

#[test]
fn every_mode_agrees_across_engines_and_with_finite_differences_on_the_corpus() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for dir in ["programs", "check", "second_order", "modes", "checkpoint", "arg_kinds"] {
        for (k, path) in cases(dir).iter().enumerate() {
            let text = std::fs::read_to_string(path).unwrap();
            let func = header(&text, "fn");
            let args = match header(&text, "args") {
                Some(a) => a,
                // Programs the checker runs at drawn arguments: so does this test.
                None if ["check", "checkpoint", "arg_kinds"].contains(&dir) => {
                    drawn_args(path, func.as_deref())
                }
                None => continue,
            };
            let file = path.to_str().unwrap();
            let case = Case {
                file,
                func: func.as_deref(),
                args: &args,
                kink: header(&text, "kink").is_some(),
                nondifferentiable: header(&text, "nondifferentiable").is_some(),
                seed: 0x6d6f_6465 + k as u64,
            };
            ran += 1;
            if let Err(e) = every_mode(&case) {
                failures.push(format!("{}: {e}", rel(path)));
            }
        }
    }
    eprintln!("every mode: {ran} programs, {} failed", failures.len());
    assert!(ran >= 150, "only {ran} corpus programs ran");
    assert!(failures.is_empty(), "{} programs failed:\n{}", failures.len(), failures.join("\n\n"));
}
