//! Constant and cache arguments (`--const I`, `--cache I`, `mcir::ArgKind`): a constant
//! argument gets no tangent, no shadow and a `null` derivative; a cache argument's
//! initial contents change no result and its derivative is `null`.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

fn scratch() -> String {
    root().join("tests/arg_kinds/scratch.mcir").to_string_lossy().to_string()
}

const ENGINES: [&[&str]; 2] = [&[], &["--interp"]];

fn run(words: &[&str], engine: &[&str]) -> String {
    let mut w = words.to_vec();
    w.extend(engine);
    let out = mcc(&w);
    assert_eq!(out.code, 0, "{words:?}: {}", out.stderr);
    out.stdout.trim().to_string()
}

#[test]
fn a_constant_argument_gets_no_shadow_and_a_null_derivative() {
    let p = scratch();
    let args = "[[[1, 2], [3, 4]], [1, -1], [0, 0]]";
    for engine in ENGINES {
        assert_eq!(
            run(&["grad", &p, "--args", args, "--const", "0"], engine),
            r#"{"value": 2.0, "gradient": [null, [-8.0, -12.0], [0.0, 0.0]]}"#
        );
        assert_eq!(
            run(&["jvp", &p, "--args", args, "--tangent", "[null, [1, 0], null]", "--const", "0"], engine),
            r#"{"value": 2.0, "tangent": -8.0, "args_tangent": [null, [1.0, 0.0], [1.0, 3.0]]}"#
        );
    }
    // The tangent function for a constant `a` has no tangent parameter for it and makes
    // no shadow of it.
    let ir = run(&["ir", &p, "--fn", "main", "--stage", "tangent", "--const", "0"], &[]);
    let signature = ir.lines().next().unwrap();
    assert!(
        signature.starts_with("fn @main$tan$const(%a_0: f64[,], %x_1: f64[], %buf_2: f64[], %dx_"),
        "{signature}"
    );
    assert!(!signature.contains("%da"), "{signature}");
    assert!(!ir.contains("zeros_like"), "no shadow is made for the constant:\n{ir}");
    // Without --const, it has one.
    let ir = run(&["ir", &p, "--fn", "main", "--stage", "tangent"], &[]);
    assert!(ir.lines().next().unwrap().contains("%da_"), "{ir}");
}

#[test]
fn a_cache_argument_does_not_change_any_result() {
    let p = scratch();
    let mut outputs = Vec::new();
    for cache in ["[0, 0]", "[7, -9]", "[1e300, \"NaN\"]"] {
        let args = format!("[[[1, 2], [3, 4]], [1, -1], {cache}]");
        for engine in ENGINES {
            let g = run(&["grad", &p, "--args", &args, "--cache", "2"], engine);
            let j = run(
                &[
                    "jvp",
                    &p,
                    "--args",
                    &args,
                    "--tangent",
                    "[[[1, 0], [0, 0]], [1, 0], null]",
                    "--cache",
                    "2",
                ],
                engine,
            );
            outputs.push((g, j));
        }
    }
    assert_eq!(
        outputs[0].0,
        r#"{"value": 2.0, "gradient": [[[-2.0, 2.0], [-2.0, 2.0]], [-8.0, -12.0], null]}"#
    );
    assert_eq!(
        outputs[0].1,
        r#"{"value": 2.0, "tangent": -10.0, "args_tangent": [[[1.0, 0.0], [0.0, 0.0]], [1.0, 0.0], null]}"#
    );
    assert!(outputs.iter().all(|o| *o == outputs[0]), "{outputs:#?}");
}

#[test]
fn argument_kinds_are_checked() {
    let p = scratch();
    let args = "[[[1, 2], [3, 4]], [1, -1], [0, 0]]";
    for (words, expect) in [
        (vec!["grad", &p, "--args", args, "--const", "3"], "the function takes 3 arguments"),
        (vec!["grad", &p, "--args", args, "--const", "1", "--cache", "1"], "both --const and --cache"),
        (
            vec!["jvp", &p, "--args", args, "--tangent", "[[[1, 0], [0, 0]], null, null]", "--const", "0"],
            "is constant",
        ),
        (
            vec!["grad", &p, "--args", args, "--seed-args", "[null, null, [1, 1]]", "--cache", "2"],
            "not active",
        ),
    ] {
        let out = mcc(&words);
        assert_eq!(out.code, 2, "{words:?}: {}", out.stderr);
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains(expect),
            "{words:?}: {}",
            out.stderr
        );
    }
}

/// A constant that comes to carry a derivative (values that depend on the other
/// arguments are written into it, directly or by a callee) gets a zero shadow of its own
/// inside the derived function, so nothing is lost.
#[test]
fn derivatives_that_pass_through_a_constant_are_kept() {
    let text = "fn put(c: f64[], x: f64) {\n    c[1] = x * 2.0;\n}\n\
                fn main(c: f64[], x: f64) -> f64 {\n    c[0] = x;\n    put(c, x);\n    return c[0] * c[1] + c[2];\n}\n";
    let path = std::env::temp_dir().join(format!("mcir-const-{}.mcir", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    // value 2 x^2 + c2: derivative 4 x = 6 at x = 1.5.
    for engine in ENGINES {
        assert_eq!(
            run(&["grad", p, "--args", "[[0, 0, 5], 1.5]", "--const", "0"], engine),
            r#"{"value": 9.5, "gradient": [null, 6.0]}"#
        );
        assert_eq!(
            run(&["jvp", p, "--args", "[[0, 0, 5], 1.5]", "--tangent", "[null, 1]", "--const", "0"], engine),
            r#"{"value": 9.5, "tangent": 6.0, "args_tangent": [null, 1.0]}"#
        );
    }
    std::fs::remove_file(&path).ok();
}

/// In reverse mode too, the rule for a constant argument takes no shadow of it and makes
/// none when the constant is only read.
#[test]
fn the_reverse_rule_for_a_constant_argument_has_no_shadow_of_it() {
    let p = scratch();
    let fwd = run(&["ir", &p, "--fn", "main", "--stage", "fwd", "--const", "0"], &[]);
    let signature = fwd.lines().find(|l| l.starts_with("fn @main$fwd")).unwrap();
    assert!(
        signature.starts_with(
            "fn @main$fwd$const(%a_0: f64[,], %x_1: f64[], %buf_2: f64[], %dx_3: f64[], %dbuf_4: f64[])"
        ),
        "{signature}"
    );
    let rev = run(&["ir", &p, "--fn", "main", "--stage", "rev", "--const", "0"], &[]);
    for pass in [&fwd, &rev] {
        assert!(!pass.contains("%da"), "no shadow of the constant:\n{pass}");
        assert!(!pass.contains("zeros_like"), "no shadow is made for the constant:\n{pass}");
    }
    // The general rule has one, and its reverse pass accumulates into it.
    let rev = run(&["ir", &p, "--fn", "main", "--stage", "rev"], &[]);
    assert!(rev.contains("%da_"), "{rev}");
}

/// `hvp`, `hessian` and `jacobian` take argument kinds too: constant and cache
/// arguments are not inputs (no row or column, a `null` gradient and HVP).
#[test]
fn second_order_commands_take_argument_kinds() {
    let p = root().join("tests/arg_kinds/quadratic.mcir").to_string_lossy().to_string();
    let args = "[[[2, 1], [1, 3]], [1, 2], 2]";
    for engine in ENGINES {
        // Every argument active: A's four entries, x's two and s are inputs.
        let all: serde_json::Value =
            serde_json::from_str(&run(&["hessian", &p, "--args", args], engine)).unwrap();
        assert_eq!(all["hessian"].as_array().unwrap().len(), 7);
        // With A constant, the Hessian is the block of (x, s): s (A + A^T) / 2, A x, 0.
        let text = run(&["hessian", &p, "--args", args, "--const", "0"], engine);
        assert_eq!(
            text,
            r#"{"value": 18.0, "gradient": [null, [8.0, 14.0], 9.0], "hessian": [[4.0, 2.0, 4.0], [2.0, 6.0, 7.0], [4.0, 7.0, 0.0]]}"#
        );
        let block: serde_json::Value = serde_json::from_str(&text).unwrap();
        for r in 0..3 {
            for c in 0..3 {
                assert_eq!(all["hessian"][4 + r][4 + c], block["hessian"][r][c]);
            }
        }
        assert_eq!(
            run(
                &[
                    "hvp",
                    &p,
                    "--args",
                    args,
                    "--tangent",
                    "[null, [1, 0], null]",
                    "--const",
                    "0",
                    "--cache",
                    "2"
                ],
                engine
            ),
            r#"{"value": 18.0, "gradient": [null, [8.0, 14.0], null], "hvp": [null, [4.0, 2.0], null]}"#
        );
        assert_eq!(
            run(&["jacobian", &p, "--args", args, "--const", "0"], engine),
            r#"{"value": 18.0, "jacobian": [[8.0, 14.0, 9.0]]}"#
        );
        assert_eq!(
            run(&["jacobian", &p, "--args", args, "--const", "0", "--const", "2"], engine),
            r#"{"value": 18.0, "jacobian": [[8.0, 14.0]]}"#
        );
    }
    let out =
        mcc(&["hvp", &p, "--args", args, "--tangent", "[[[1, 0], [0, 0]], [1, 0], null]", "--const", "0"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("is constant, so its tangent must be null"), "{}", out.stderr);
}

/// The same through the Rust API on values.
#[test]
fn argument_kinds_in_the_api() {
    use mcir::{ArgKind, Limits, Program, Val};
    let text = std::fs::read_to_string(scratch()).unwrap();
    let p = Program::compile("scratch.mcir", &text).unwrap();
    let f = p.entry(None).unwrap();
    let args = || {
        vec![
            Val::f64_array(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap(),
            Val::vector(vec![1.0, -1.0]),
            Val::vector(vec![5.0, 5.0]),
        ]
    };
    let kinds = [ArgKind::Const, ArgKind::Active, ArgKind::Cache];
    let out = p.vjp_with(f, &args(), Some(Val::F64(1.0)), &[], &kinds, &Limits::default()).unwrap();
    assert!(matches!(out.gradient[0], Val::Unit) && matches!(out.gradient[2], Val::Unit));
    assert_eq!(out.gradient[1].to_f64_vec().unwrap(), vec![-8.0, -12.0]);
    let zero = |v: &Val| {
        mcir::grad::zero_like(&p.module().types, p.module().funcs[f].params[0], Some(v), "").unwrap()
    };
    let a = args();
    let tangents = vec![zero(&a[0]), Val::vector(vec![1.0, 0.0]), Val::vector(vec![0.0, 0.0])];
    let out = p.jvp_with(f, &a, &tangents, &kinds, &Limits::default()).unwrap();
    assert!(matches!(out.tangent, Val::F64(t) if t == -8.0));
    assert!(matches!(out.args_tangent[0], Val::Unit) && matches!(out.args_tangent[2], Val::Unit));
}

#[test]
fn bench_times_the_gradient_with_argument_kinds() {
    let p = scratch();
    let args = "[[[1, 2], [3, 4]], [1, -1], [0, 0]]";
    let kinds_and_engines: [&[&str]; 5] = [
        &[],
        &["--const", "0"],
        &["--const", "0", "--cache", "2"],
        &["--interp"],
        &["--interp", "--const", "0"],
    ];
    for kinds in kinds_and_engines {
        let mut words = vec!["bench", &p, "--fn", "main", "--args", args, "--iters", "3"];
        words.extend(kinds);
        let out = mcc(&words);
        assert_eq!(out.code, 0, "{kinds:?}: {}", out.stderr);
        let report: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        for key in ["compile_ms", "primal_ns", "gradient_ns", "ratio"] {
            assert!(report[key].as_f64().is_some_and(|x| x > 0.0), "{kinds:?}: {key} in {report}");
        }
        assert_eq!(report["iters"], 3, "{report}");
    }
    let out = mcc(&["bench", &p, "--fn", "main", "--args", args, "--const", "3"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--const 3: the function takes 3 arguments"), "{}", out.stderr);
    let out = mcc(&["bench", &p, "--fn", "main", "--args", args, "--const", "1", "--cache", "1"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}
