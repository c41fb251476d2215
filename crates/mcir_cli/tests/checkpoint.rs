//! `#[checkpoint]` loops: a scalar recurrence of ten million steps differentiates within
//! 64 MiB (the limit on everything a call allocates, `--max-memory`), which the same loop
//! without checkpointing exceeds; checkpointed and plain gradients agree on both engines.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

fn program(name: &str) -> String {
    root().join(format!("tests/checkpoint/{name}.mcir")).to_string_lossy().to_string()
}

const SIXTY_FOUR_MIB: &str = "67108864";

/// The value and gradient of `mcc grad` output, as numbers (`null` for the step count).
fn value_and_gradient(stdout: &str) -> (f64, Vec<f64>) {
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let value = j["value"].as_f64().unwrap();
    let grad = j["gradient"].as_array().unwrap().iter().filter_map(|g| g.as_f64()).collect();
    (value, grad)
}

fn close(a: f64, b: f64, rtol: f64) -> bool {
    (a - b).abs() <= rtol * a.abs().max(b.abs()).max(1e-300)
}

#[test]
fn ten_million_checkpointed_steps_differentiate_within_64_mib() {
    let out = mcc(&[
        "grad",
        &program("recurrence"),
        "--args",
        "[0.4, 0.95, 0.3, 10000000]",
        "--max-memory",
        SIXTY_FOUR_MIB,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (value, grad) = value_and_gradient(&out.stdout);
    // Computed independently, with forward sensitivities in double precision.
    let expected = [3.85330862253974e-07, 4.873054711546194, 5.275972255208189];
    assert!(close(value, 2.5638386474416395, 1e-12), "value {value}");
    assert_eq!(grad.len(), 3);
    for (g, e) in grad.iter().zip(expected) {
        assert!(close(*g, e, 1e-8), "gradient {grad:?}, expected {expected:?}");
    }
}

#[test]
fn without_checkpointing_the_same_loop_exceeds_64_mib() {
    let out = mcc(&[
        "grad",
        &program("plain"),
        "--args",
        "[0.4, 0.95, 0.3, 10000000]",
        "--max-memory",
        SIXTY_FOUR_MIB,
    ]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stderr.contains("exceed the limit of 67108864 bytes"), "{}", out.stderr);
}

#[test]
fn checkpointed_and_plain_gradients_agree_on_both_engines() {
    for (n, engine) in [("100000", None), ("20000", Some("--interp"))] {
        let args = format!("[0.4, 0.95, 0.3, {n}]");
        let results: Vec<(f64, Vec<f64>)> = ["recurrence", "plain"]
            .iter()
            .map(|p| {
                let path = program(p);
                let mut words = vec!["grad", path.as_str(), "--args", args.as_str()];
                words.extend(engine);
                let out = mcc(&words);
                assert_eq!(out.code, 0, "{p} {engine:?}: {}", out.stderr);
                value_and_gradient(&out.stdout)
            })
            .collect();
        let ((v1, g1), (v2, g2)) = (&results[0], &results[1]);
        assert_eq!(v1, v2, "{engine:?}");
        for (a, b) in g1.iter().zip(g2) {
            assert!(close(*a, *b, 1e-10), "{engine:?}: {g1:?} vs {g2:?}");
        }
    }
}
