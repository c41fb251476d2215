//! `mcc gradbench` driven with a recorded GradBench session (`tests/gradbench/session.jsonl`):
//! each line holds a message of the eval, and what the response must say — success, an
//! output computed independently (in Python, from the evals' definitions) within a
//! tolerance, and as many `evaluate` timings as runs were asked for.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::{json_mismatch, root};

#[test]
fn a_recorded_session_gets_the_expected_responses() {
    let text = std::fs::read_to_string(root().join("tests/gradbench/session.jsonl")).unwrap();
    let cases: Vec<Json> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let input: String = cases.iter().map(|c| format!("{}\n", c["message"])).collect();
    let mut output = Vec::new();
    mcir_cli::gradbench::session(&mut input.as_bytes(), &mut output, &Default::default()).unwrap();
    let responses: Vec<Json> =
        String::from_utf8(output).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(responses.len(), cases.len(), "one response per message");
    let mut failures = Vec::new();
    for (case, response) in cases.iter().zip(&responses) {
        let message = &case["message"];
        let what = format!("{} {} {}", message["kind"], message["module"], message["function"]);
        if response["id"] != message["id"] {
            failures.push(format!("{what}: the response's id is {}", response["id"]));
        }
        let expect = &case["expect"];
        if let Some(s) = expect.get("success") {
            if response["success"] != *s {
                failures
                    .push(format!("{what}: success is {}, expected {s}: {response}", response["success"]));
            }
        }
        if let Some(out) = expect.get("output") {
            if response["success"] != Json::Bool(true) {
                failures.push(format!("{what}: failed: {response}"));
                continue;
            }
            let tol = case["tol"].as_f64().unwrap_or(1e-9);
            if let Some(m) = json_mismatch(&response["output"], out, tol, "output") {
                failures.push(format!("{what}: {m}"));
            }
            let runs = response["timings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["name"] == "evaluate" && t["nanoseconds"].is_u64())
                .count();
            let want = expect.get("runs").and_then(|r| r.as_u64()).unwrap_or(1) as usize;
            if runs < want {
                failures.push(format!("{what}: {runs} evaluate timings, at least {want} expected"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
