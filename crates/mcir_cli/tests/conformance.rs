//! The shared conformance cases, copied into `tests/conformance` so that a clone tests
//! itself: each case of a command this version has must produce its expected output.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::*;

/// The commands this version implements; cases of other commands are counted, not run.
const SUPPORTED: &[&str] = &["run", "grad", "jvp"];

#[test]
fn conformance_cases_pass() {
    let dir = root().join("tests/conformance");
    let mut jsons: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    jsons.sort();
    let (mut ran, mut failures) = (0, Vec::new());
    for path in jsons {
        let case: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let cmd = case["cmd"].as_str().unwrap();
        if !SUPPORTED.contains(&cmd) {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let program = path.with_extension("mcir");
        ran += 1;
        let args = case
            .get("args_raw")
            .and_then(|a| a.as_str().map(String::from))
            .unwrap_or_else(|| case["args"].to_string());
        let mut words: Vec<String> =
            vec![cmd.into(), program.to_string_lossy().into(), "--args".into(), args];
        if let Some(f) = case.get("fn").and_then(|f| f.as_str()) {
            words.extend(["--fn".into(), f.into()]);
        }
        for key in ["seed", "seed_args", "tangent"] {
            if let Some(v) = case.get(key) {
                words.extend([format!("--{}", key.replace('_', "-")), v.to_string()]);
            }
        }
        if let Some(extra) = case.get("extra_cli").and_then(|e| e.as_array()) {
            words.extend(extra.iter().filter_map(|w| w.as_str().map(String::from)));
        }
        for engine in [None, Some("--interp")] {
            let mut refs: Vec<&str> = words.iter().map(|s| s.as_str()).collect();
            refs.extend(engine);
            let name = format!("{name}{}", engine.map(|e| format!(" {e}")).unwrap_or_default());
            let out = mcc(&refs);
            if case.get("expect_error").and_then(|e| e.as_bool()).unwrap_or(false) {
                let want = case["exit"].as_i64().unwrap() as i32;
                let located = want != 1 || out.stderr.lines().any(|l| l.contains(".mcir:"));
                if out.code != want || !out.stderr.contains("error:") || !located {
                    failures.push(format!(
                        "{name}: expected exit {want} with a located error, got {}:\n{}",
                        out.code, out.stderr
                    ));
                }
                continue;
            }
            if out.code != 0 {
                failures.push(format!("{name}: exit {}:\n{}", out.code, out.stderr));
                continue;
            }
            let actual: Json = serde_json::from_str(&out.stdout).unwrap();
            let tol = case.get("tol").and_then(|t| t.as_f64()).unwrap_or(1e-9);
            for (key, expected) in case["expect"].as_object().unwrap() {
                if let Some(m) = json_mismatch(&actual[key], expected, tol, key) {
                    failures.push(format!("{name}: {m}"));
                }
            }
        }
    }
    assert!(ran >= 18, "expected the run, grad and jvp cases to be present, ran {ran}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
