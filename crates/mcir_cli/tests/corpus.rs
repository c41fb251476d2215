//! The `.mcir` corpus under `tests/`: every program's IR is snapshotted, re-parses to
//! the same text and runs to its expected output; every rejected program's rendered
//! diagnostics are snapshotted; every runtime error points at the failing line.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::*;

#[test]
fn programs_print_parse_and_run() {
    let cases = cases("programs");
    assert!(cases.len() >= 40, "the corpus should hold at least 40 programs");
    let mut failures = Vec::new();
    for path in &cases {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let program = match mcir::Program::compile(&rel(path), &text) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{name}: does not compile:\n{}", e.render()));
                continue;
            }
        };
        // The printed IR, snapshotted, and its round trip through the IR parser.
        let ir = program.ir_text(None);
        snapshot_settings("ir").bind(|| insta::assert_snapshot!(name.clone(), ir));
        match mcir::ir::parse_module(&ir) {
            Ok(m) => {
                if let Err(e) = mcir::ir::verify_module(&m) {
                    failures.push(format!("{name}: re-parsed IR does not verify: {e}"));
                } else if mcir::ir::print_module(&m) != ir {
                    failures.push(format!("{name}: print -> parse -> print changes the text"));
                }
            }
            Err(e) => failures.push(format!("{name}: printed IR does not parse: {e}")),
        }
        // The run result against the independently computed expectation.
        let expect: Json = serde_json::from_str(&header(&text, "expect").expect("expect header")).unwrap();
        let out = run_case(path, &text, None, &[]);
        if out.code != 0 {
            failures.push(format!("{name}: mcc run failed ({}):\n{}", out.code, out.stderr));
            continue;
        }
        let actual: Json = serde_json::from_str(&out.stdout).unwrap();
        if let Some(m) = json_mismatch(&actual, &expect, 1e-9, "$") {
            failures.push(format!("{name}: {m}\n  got {}", out.stdout.trim()));
        }
        // An independently computed gradient, where the case gives one (`// grad:`), on
        // both engines, within `// grad_tol:` (default 1e-9).
        if let Some(g) = header(&text, "grad") {
            let expect: Json = serde_json::from_str(&g).expect("grad header");
            let tol: f64 = header(&text, "grad_tol").map(|t| t.parse().expect("grad_tol")).unwrap_or(1e-9);
            for engine in [&[][..], &["--interp"][..]] {
                let args = header(&text, "args").unwrap_or_else(|| "[]".into());
                let mut words = vec!["grad", path.to_str().unwrap(), "--args", &args];
                let f = header(&text, "fn");
                if let Some(f) = &f {
                    words.extend(["--fn", f.as_str()]);
                }
                words.extend(engine);
                let out = mcc(&words);
                if out.code != 0 {
                    failures.push(format!("{name}: mcc grad {engine:?} failed:\n{}", out.stderr));
                    continue;
                }
                let actual: Json = serde_json::from_str(&out.stdout).unwrap();
                if let Some(m) = json_mismatch(&actual, &expect, tol, "$") {
                    failures.push(format!("{name} (grad {engine:?}): {m}\n  got {}", out.stdout.trim()));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} programs failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn rejected_programs_render_their_errors() {
    let cases = cases("reject");
    assert!(cases.len() >= 15);
    let mut failures = Vec::new();
    for path in &cases {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let out = run_case(path, &text, None, &[]);
        let rendered = out.stderr.replace(&format!("{}/", root().to_string_lossy()), "");
        if out.code != 1 || !rendered.lines().any(|l| l.starts_with("error:")) {
            failures.push(format!(
                "{name}: expected a compile error (exit 1), got exit {}:\n{rendered}",
                out.code
            ));
            continue;
        }
        if !rendered.contains(&format!("{}:", path.file_name().unwrap().to_string_lossy())) {
            failures.push(format!("{name}: the error has no file:line:col location:\n{rendered}"));
        }
        snapshot_settings("reject").bind(|| insta::assert_snapshot!(name.clone(), rendered));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn runtime_errors_point_at_the_failing_line() {
    let cases = cases("runtime_errors");
    let mut failures = Vec::new();
    for path in &cases {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let line: usize = header(&text, "error-line").expect("error-line header").parse().unwrap();
        let out = run_case(path, &text, None, &[]);
        let rendered = out.stderr.replace(&format!("{}/", root().to_string_lossy()), "");
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        if out.code != 1 || !rendered.starts_with("error:") {
            failures.push(format!(
                "{name}: expected a runtime error (exit 1), got exit {}:\n{rendered}",
                out.code
            ));
        } else if !rendered.contains(&format!("{file}:{line}:")) {
            failures.push(format!("{name}: expected the error at line {line}:\n{rendered}"));
        }
        // `grad-error: same`: the gradient fails with the run's error, on both engines.
        if header(&text, "grad-error").as_deref() == Some("same") {
            let args = header(&text, "args").unwrap_or_else(|| "[]".into());
            for extra in [&[][..], &["--interp"][..]] {
                let mut words = vec!["grad", path.to_str().unwrap(), "--args", &args];
                words.extend(extra);
                let grad = mcc(&words);
                if grad.code != out.code || grad.stderr != out.stderr {
                    failures.push(format!("{name}: grad {extra:?} failed otherwise:\n{}", grad.stderr));
                }
            }
        }
        snapshot_settings("runtime_errors").bind(|| insta::assert_snapshot!(name.clone(), rendered));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether two `grad` outcomes agree: the same exit and errors, and the same values up
/// to rounding (CLI.md: the engines agree "up to float rounding"). Native reverse passes
/// may add an adjoint's terms in another order (two partial sums at a time), so their
/// gradients can differ from the interpreter's in the last bits.
fn gradients_agree(a: &mcir_cli::Outcome, b: &mcir_cli::Outcome) -> bool {
    fn close(x: &Json, y: &Json) -> bool {
        match (x, y) {
            (Json::Number(p), Json::Number(q)) => match (p.as_f64(), q.as_f64()) {
                (Some(p), Some(q)) => p == q || (p - q).abs() <= 1e-12 * p.abs().max(q.abs()),
                _ => p == q,
            },
            (Json::Array(p), Json::Array(q)) => {
                p.len() == q.len() && p.iter().zip(q).all(|(p, q)| close(p, q))
            }
            (Json::Object(p), Json::Object(q)) => {
                p.len() == q.len() && p.iter().all(|(k, v)| q.get(k).is_some_and(|w| close(v, w)))
            }
            _ => x == y,
        }
    }
    if a.code != b.code || a.stderr != b.stderr {
        return false;
    }
    match (serde_json::from_str::<Json>(&a.stdout), serde_json::from_str::<Json>(&b.stdout)) {
        (Ok(x), Ok(y)) => close(&x, &y),
        _ => a.stdout == b.stdout,
    }
}

/// Every program of the corpus runs to the same output, or fails with the same error at
/// the same place, on native code and on the interpreter; gradients agree up to
/// rounding.
#[test]
fn native_code_and_interpreter_agree() {
    let mut failures = Vec::new();
    let mut compared = 0;
    for dir in ["programs", "runtime_errors", "check"] {
        for path in cases(dir) {
            let text = std::fs::read_to_string(&path).unwrap();
            if header(&text, "args").is_none() && dir == "check" {
                continue;
            }
            let native = run_case(&path, &text, None, &[]);
            let interp = run_case(&path, &text, None, &["--interp"]);
            compared += 1;
            // Gradients too: run_case's first word is the command.
            let grad = |extra: &[&str]| {
                let args = header(&text, "args").unwrap_or_else(|| "[]".into());
                let mut words = vec!["grad", path.to_str().unwrap(), "--args", &args];
                let f = header(&text, "fn");
                if let Some(f) = &f {
                    words.extend(["--fn", f.as_str()]);
                }
                words.extend(extra);
                mcc(&words)
            };
            let (gn, gi) = (grad(&[]), grad(&["--interp"]));
            if !gradients_agree(&gn, &gi) {
                failures.push(format!(
                    "{} (grad):\n  native: {}{}\n  interpreter: {}{}",
                    rel(&path),
                    gn.stdout,
                    gn.stderr,
                    gi.stdout,
                    gi.stderr
                ));
            }
            if native != interp {
                failures.push(format!(
                    "{}:\n  native (exit {}): {}{}\n  interpreter (exit {}): {}{}",
                    rel(&path),
                    native.code,
                    native.stdout,
                    native.stderr,
                    interp.code,
                    interp.stdout,
                    interp.stderr
                ));
            }
        }
    }
    assert!(compared >= 80);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
