//! Code compiled for the shapes of its arguments (`--specialise`) computes what the
//! generic code does: every program of the corpus and every case of `tests/check` gives
//! the same value, argument states and gradient, on native code and on the interpreter;
//! unrolled loops leave the gmm's inner loops straight-line code; specialised code
//! called with arguments of other shapes stops with an error that says so; and the
//! reverse pass of a long unrolled chain of sums stays proportionate to it.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::*;

#[test]
fn specialised_code_computes_what_generic_code_does() {
    let mut compared = 0;
    let mut failures = Vec::new();
    let paths: Vec<_> = cases("programs").into_iter().chain(cases("check")).collect();
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        if header(&text, "args").is_none() {
            continue;
        }
        for engine in [&[][..], &["--interp"][..]] {
            for cmd in ["run", "grad"] {
                let generic = command_on_case(cmd, path, engine);
                let mut extra = engine.to_vec();
                extra.push("--specialise");
                let special = command_on_case(cmd, path, &extra);
                if generic.code != special.code {
                    failures.push(format!(
                        "{} {cmd} {engine:?}: exit {} generic, {} specialised:\n{}{}",
                        rel(path),
                        generic.code,
                        special.code,
                        special.stdout,
                        special.stderr
                    ));
                    continue;
                }
                if generic.code != 0 {
                    // The same error, at the same place.
                    if generic.stderr != special.stderr {
                        failures.push(format!(
                            "{} {cmd} {engine:?}: errors differ:\n{}\n{}",
                            rel(path),
                            generic.stderr,
                            special.stderr
                        ));
                    }
                    continue;
                }
                let g: Json = serde_json::from_str(&generic.stdout).unwrap();
                let s: Json = serde_json::from_str(&special.stdout).unwrap();
                compared += 1;
                if let Some(m) = json_mismatch(&s, &g, 1e-9, "") {
                    failures.push(format!("{} {cmd} {engine:?}: {m}", rel(path)));
                }
            }
        }
    }
    assert!(compared >= 300, "only {compared} comparisons");
    assert!(failures.is_empty(), "{} differ:\n{}", failures.len(), failures.join("\n"));
}

/// The gmm's loops over the dimension, for d = 2, become straight-line code: the
/// specialised objective has loops over components and points only.
#[test]
fn short_loops_are_unrolled_for_known_shapes() {
    let gmm = root().join("benches/gradbench/gmm.mcir");
    let p = gmm.to_str().unwrap();
    // k = 3 components, d = 2 dimensions, n = 4 points.
    let args = r#"[[0.1, 0.2, 0.3], [[0, 1], [1, 0], [1, 1]], [[0.1, 0.2], [0.3, 0.1], [0.0, 0.2]],
        [[0.5], [0.1], [0.2]], [[1, 2], [0, 1], [1, 1], [2, 0]], 0, 1.0]"#;
    // Loop tests of `objective` itself (the module printed also holds its callees).
    let headers = |out: &mcir_cli::Outcome| {
        let body = out.stdout.split("fn @objective(").nth(1).unwrap_or("");
        let body = body.split("\n}\n").next().unwrap_or("");
        body.lines().filter(|l| l.contains("icmp lt")).count()
    };
    let generic = mcc(&["ir", p, "--fn", "objective", "--opt"]);
    let special = mcc(&["ir", p, "--fn", "objective", "--shapes-of", args]);
    assert_eq!(special.code, 0, "{}", special.stderr);
    assert!(special.stdout.contains("array.expect_dim 1 %x"), "{}", special.stdout);
    // Loop tests: the generic code tests d in many loops; the specialised code keeps the
    // loops over components (k = 3 is unrolled too) and points only.
    assert!(headers(&special) < headers(&generic), "{}", special.stdout);
    assert!(headers(&special) <= 4, "{}", special.stdout);
    // The entry's checks only read the shape of `x`, a constant: no shadow is made for it.
    let fwd = mcc(&["ir", p, "--fn", "objective", "--stage", "fwd", "--const", "4", "--shapes-of", args]);
    assert_eq!(fwd.code, 0, "{}", fwd.stderr);
    assert!(!fwd.stdout.contains("%dx_"), "{}", fwd.stdout);
    for engine in [&[][..], &["--interp"][..]] {
        let mut words = vec!["grad", p, "--fn", "objective", "--args", args, "--const", "4", "--const", "5"];
        words.extend(engine);
        let generic = mcc(&words);
        words.push("--specialise");
        let special = mcc(&words);
        assert_eq!(generic.code, 0, "{}", generic.stderr);
        let (g, s): (Json, Json) =
            (serde_json::from_str(&generic.stdout).unwrap(), serde_json::from_str(&special.stdout).unwrap());
        assert_eq!(json_mismatch(&s, &g, 1e-12, ""), None);
    }
}

/// Through the library, code specialised for one shape refuses arguments of another,
/// on both engines and for the gradient too, with an error naming the extents.
#[test]
fn specialised_code_checks_the_shapes_it_is_called_with() {
    let text = "fn total(x: f64[,]) -> f64 {\n    let mut s = 0.0;\n    for i in 0..size(x, 0) {\n        \
                for j in 0..size(x, 1) {\n            s += x[i, j] * x[i, j];\n        }\n    }\n    return s;\n}\n";
    let program = mcir::Program::compile("total.mcir", text).unwrap();
    let id = program.entry(Some("total")).unwrap();
    let special = program.specialised(id, &[Some(vec![2, 3])]).unwrap();
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let special = special.clone().with_engine(engine);
        let f = special.function("total").unwrap();
        let fits = mcir::Value::f64_array(vec![1.0; 6], &[2, 3]).unwrap();
        assert_eq!(f.call(std::slice::from_ref(&fits)).unwrap().and_then(|v| v.as_f64()), Some(6.0));
        let (value, grad) = f.value_and_gradient(&[fits]).unwrap();
        assert_eq!(value, 6.0);
        let expected = mcir::Value::f64_array(vec![2.0; 6], &[2, 3]).unwrap();
        assert_eq!(format!("{grad:?}"), format!("{:?}", [expected]));
        let other = mcir::Value::f64_array(vec![1.0; 6], &[3, 2]).unwrap();
        let e = f.call(std::slice::from_ref(&other)).unwrap_err().to_string();
        assert!(e.contains("extent 3 in dimension 0") && e.contains("compiled for 2"), "{engine:?}: {e}");
        let e = f.value_and_gradient(&[other]).unwrap_err().to_string();
        assert!(e.contains("compiled for 2"), "{engine:?}: {e}");
    }
    // Through a prepared handle, on slices.
    let f = special.function("total").unwrap();
    let mut prepared = f.prepare().unwrap();
    let mut data = vec![1.0; 6];
    let e = prepared.call(&mut [mcir::Arg::F64Array(&mut data, &[6, 1])]).unwrap_err().to_string();
    assert!(e.contains("compiled for 2"), "{e}");
    assert_eq!(prepared.call(&mut [mcir::Arg::F64Array(&mut data, &[2, 3])]).unwrap(), 6.0);
}

#[test]
fn unrolled_sums_keep_the_reverse_pass_linear_in_their_length() {
    // `tests/check/long_sum_chains.mcir`: 25 updates of one accumulator in a block once
    // unrolled. Its reverse pass used to grow quadratically in them (past 8 GB); it is
    // now a few hundred instructions, like the code it reverses.
    let path = root().join("tests/check/long_sum_chains.mcir");
    let text = std::fs::read_to_string(&path).unwrap();
    let args = header(&text, "args").unwrap();
    let ir = |stage: &str| {
        let out = mcc(&["ir", path.to_str().unwrap(), "--fn", "f", "--shapes-of", &args, "--stage", stage]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout.lines().count()
    };
    let (primal, reverse) = (ir("primal"), ir("rev"));
    assert!(reverse < 3 * primal, "the reverse pass has {reverse} lines for a primal of {primal}");
}
