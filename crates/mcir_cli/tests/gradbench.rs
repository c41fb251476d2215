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

/// Runs a session on `input` with `options`; its responses.
fn session(input: &[u8], options: &mcir_cli::gradbench::Options) -> Vec<Json> {
    let mut output = Vec::new();
    mcir_cli::gradbench::session(&mut &input[..], &mut output, options).unwrap();
    String::from_utf8(output).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn any_line_gets_a_response_and_the_session_goes_on() {
    let options = mcir_cli::gradbench::Options { max_input: 200, ..Default::default() };
    let mut input = Vec::new();
    input.extend_from_slice(b"\xff\xfe{\"id\": 1}\n");
    input.extend_from_slice(b"{\"id\": 2, \"kind\": \"define\", \"module\": \"hello\"}\n");
    input.extend_from_slice(b"not json\n");
    input.extend_from_slice(format!("{{\"id\": 3, \"pad\": \"{}\"}}\n", "x".repeat(5000)).as_bytes());
    input.extend_from_slice(b"{\"id\": 4, \"kind\": \"evaluate\", \"module\": \"hello\", \"function\": \"square\", \"input\": 3.0}\n");
    // The last line has no newline.
    input.extend_from_slice(b"\x00\x00");
    let responses = session(&input, &options);
    let summary: Vec<(Json, Json)> =
        responses.iter().map(|r| (r["id"].clone(), r["success"].clone())).collect();
    let expected = [
        (Json::Null, Json::Bool(false)),
        (Json::from(2), Json::Bool(true)),
        (Json::Null, Json::Bool(false)),
        (Json::Null, Json::Bool(false)),
        (Json::from(4), Json::Bool(true)),
        (Json::Null, Json::Bool(false)),
    ];
    assert_eq!(summary, expected, "responses: {responses:?}");
    assert!(responses[0]["error"].as_str().unwrap().contains("not UTF-8"), "{}", responses[0]);
    assert!(responses[3]["error"].as_str().unwrap().contains("longer than 200 bytes"), "{}", responses[3]);
    assert_eq!(responses[4]["output"], Json::from(9.0));
}

/// A fresh directory of module programs.
fn module_dir(name: &str, modules: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcir-gradbench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (module, text) in modules {
        std::fs::write(dir.join(format!("{module}.mcir")), text).unwrap();
    }
    dir
}

#[test]
fn non_finite_outputs_are_the_strings_mcc_run_prints() {
    let program = "// gradbench: primal = value f\n// gradbench: many = value g\n// gradbench: gradient = gradient f x\n\
                   fn f(x: f64) -> f64 { return exp(x * x); }\n\
                   fn g(x: f64) -> f64[] { return [exp(x), -exp(x), log(x), sqrt(x)]; }\n";
    let dir = module_dir("nonfinite", &[("edge", program)]);
    let options = mcir_cli::gradbench::Options { dir: Some(dir.clone()), ..Default::default() };
    let messages = [
        r#"{"id": 1, "kind": "define", "module": "edge"}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "edge", "function": "primal", "input": 40.0}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "edge", "function": "gradient", "input": 40.0}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "edge", "function": "many", "input": 1000.0}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "edge", "function": "many", "input": -1.0}"#,
    ];
    let responses = session(messages.join("\n").as_bytes(), &options);
    let outputs: Vec<String> = responses[1..].iter().map(|r| r["output"].to_string()).collect();
    assert_eq!(
        outputs,
        [
            r#""Infinity""#,
            r#""Infinity""#,
            r#"["Infinity","-Infinity",6.907755278982137,31.622776601683793]"#,
            r#"[0.36787944117144233,-0.36787944117144233,"NaN","NaN"]"#,
        ],
        "{responses:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn modules_are_names_inside_the_directory() {
    let outside = module_dir(
        "outside",
        &[("secret", "// gradbench: primal = value f\nfn f(x: f64) -> f64 { return x; }\n")],
    );
    let dir = outside.join("inner");
    std::fs::create_dir_all(&dir).unwrap();
    let options = mcir_cli::gradbench::Options { dir: Some(dir), ..Default::default() };
    let secret = outside.join("secret").to_string_lossy().to_string();
    for name in ["../secret", secret.as_str(), "inner/../../secret", "", ".", "a\\b"] {
        let message = serde_json::json!({"id": 1, "kind": "define", "module": name});
        let responses = session(format!("{message}\n").as_bytes(), &options);
        assert_eq!(responses[0]["success"], Json::Bool(false), "{name}: {}", responses[0]);
        assert!(responses[0]["error"].as_str().unwrap().contains("is not a module name"), "{}", responses[0]);
    }
    std::fs::remove_dir_all(outside).unwrap();
}

#[test]
fn evaluations_are_bounded_in_runs_and_time() {
    let program = "// gradbench: primal = value f\n// gradbench: stuck = value spin\n\
                   fn f(x: f64) -> f64 { return x * 2.0; }\n\
                   fn spin(x: f64) -> f64 { let mut s = x; while s > -1.0 { s += 1.0; } return s; }\n";
    let dir = module_dir("bounded", &[("edge", program)]);
    let options = mcir_cli::gradbench::Options {
        dir: Some(dir.clone()),
        timeout: Some(std::time::Duration::from_millis(200)),
        ..Default::default()
    };
    let messages = [
        r#"{"id": 1, "kind": "define", "module": "edge"}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "edge", "function": "stuck", "input": 1.0}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "edge", "function": "primal", "input": {"x": 1, "min_runs": 3000000000}}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "edge", "function": "primal", "input": {"x": 1, "min_seconds": 1e20}}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "edge", "function": "primal", "input": {"x": "Infinity", "min_runs": 3}}"#,
        r#"[1, 2, 3]"#,
        r#"{"id": 6, "kind": "define", "module": 5}"#,
    ];
    let responses = session(messages.join("\n").as_bytes(), &options);
    assert_eq!(responses.len(), messages.len(), "{responses:?}");
    let error = |k: usize| responses[k]["error"].as_str().unwrap_or("").to_string();
    assert_eq!(responses[0]["success"], Json::Bool(true), "{}", responses[0]);
    assert!(error(1).contains("timed out after 0.200 s"), "{}", responses[1]);
    assert!(error(2).contains("`min_runs` must be"), "{}", responses[2]);
    assert!(error(3).contains("`min_seconds` must be"), "{}", responses[3]);
    assert_eq!(responses[4]["output"], Json::from("Infinity"), "{}", responses[4]);
    let evaluations =
        responses[4]["timings"].as_array().unwrap().iter().filter(|t| t["name"] == "evaluate").count();
    assert_eq!(evaluations, 3, "{}", responses[4]);
    assert!(error(5).contains("a message is a JSON object"), "{}", responses[5]);
    assert!(error(6).contains("needs a module name"), "{}", responses[6]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn each_run_starts_from_the_input_and_definitions_are_checked() {
    let good = "// gradbench: mutate = value mutate\n\
                fn mutate(x: f64[]) -> f64 { x *= 2.0; return sum(x); }\n";
    let modules = [
        ("good", good),
        (
            "twice",
            "// gradbench: f = value f\n// gradbench: f = value f\nfn f(x: f64) -> f64 { return x; }\n",
        ),
        ("nameless", "// gradbench:  = value f\nfn f(x: f64) -> f64 { return x; }\n"),
        ("empty", "// gradbench: g = gradient f {}\nfn f(x: f64) -> f64 { return x; }\n"),
        ("boolean", "// gradbench: f = value f\nfn f(x: f64) -> bool { return x > 0.0; }\n"),
        ("integer", "// gradbench: f = value f\nfn f(x: i64) -> i64 { return x; }\n"),
    ];
    let dir = module_dir("checked", &modules);
    let options = mcir_cli::gradbench::Options { dir: Some(dir.clone()), ..Default::default() };
    let mut messages = vec![
        r#"{"id": 1, "kind": "define", "module": "good"}"#.to_string(),
        r#"{"id": 2, "kind": "evaluate", "module": "good", "function": "mutate", "input": {"x": [1, 2], "min_runs": 10}}"#
            .to_string(),
    ];
    for (k, (name, _)) in modules.iter().enumerate().skip(1) {
        messages.push(format!(r#"{{"id": {}, "kind": "define", "module": "{name}"}}"#, 10 + k));
    }
    let responses = session(messages.join("\n").as_bytes(), &options);
    assert_eq!(responses[1]["output"], Json::from(6.0), "{}", responses[1]);
    let errors: Vec<&str> = responses[2..].iter().map(|r| r["error"].as_str().unwrap_or("")).collect();
    let expected = [
        "is named twice",
        "has no name",
        "with respect to no parameter",
        "returns bool; an eval function returns an f64 or an f64 array",
        "returns i64; an eval function returns an f64 or an f64 array",
    ];
    for (e, want) in errors.iter().zip(expected) {
        assert!(e.contains(want), "{e:?} should say {want:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn specialised_code_is_kept_for_a_bounded_number_of_shapes() {
    // 40 shapes, then the first again: it is compiled anew (it was dropped), and the
    // session answers every message.
    let mut messages = vec![r#"{"id": 0, "kind": "define", "module": "lse"}"#.to_string()];
    for n in (1..=40).chain([1]) {
        let x: Vec<f64> = (0..n).map(|i| i as f64 * 0.1).collect();
        messages.push(serde_json::json!({"id": n, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": x}}).to_string());
    }
    let responses = session(messages.join("\n").as_bytes(), &Default::default());
    assert_eq!(responses.len(), 42);
    assert!(responses.iter().all(|r| r["success"] != Json::Bool(false)), "{responses:?}");
    let specialised = |r: &Json| r["timings"].as_array().unwrap().iter().any(|t| t["name"] == "specialise");
    assert!(specialised(&responses[41]), "the oldest shape's code was dropped: {}", responses[41]);
}
