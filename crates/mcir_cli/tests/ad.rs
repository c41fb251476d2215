//! Reverse-mode AD on the `.mcir` corpus: every op and builtin passes `mcc check`; a
//! rule corrupted on purpose is caught and named; every differentiable program of the
//! corpus passes the checker at its arguments; the derived forward and reverse passes
//! are snapshotted and, printed, re-parse and verify; a quotient's rule keeps to the
//! range of its operands.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

/// `mcc check` on a case file, with its `// fn:` and `// args:` headers.
fn check_case(path: &std::path::Path, extra: &[&str]) -> mcir_cli::Outcome {
    let mut words = vec!["--trials", "3"];
    words.extend(extra);
    command_on_case("check", path, &words)
}

#[test]
fn every_op_and_builtin_passes_the_checker() {
    let cases = cases("check");
    assert!(cases.len() >= 50, "tests/check should cover every op and builtin");
    let mut failures = Vec::new();
    for path in &cases {
        let out = check_case(path, &[]);
        if out.code != 0 {
            failures.push(format!("{}:\n{}{}", rel(path), out.stdout, out.stderr));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `mcc check --const I` holds argument I: it is not perturbed, and the rules checked
/// are those derived with it constant. A threshold sitting exactly at its branch fails
/// the check when it is perturbed, and passes when it is held; perturbed evaluations
/// that run out of time are counted in the report.
#[test]
fn a_constant_argument_is_held_by_the_checker() {
    let text = "fn f(x: f64, c: f64, w: f64[]) -> f64 {\n    w[0] = w[0] * x;\n    if c > 0.5 {\n        return x * x * c + w[1];\n    }\n    return sin(x) * w[0];\n}\n";
    let dir = std::env::temp_dir().join(format!("mcir-ad-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("threshold.mcir");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let args = "[1.3, 0.5, [0.7, 0.2]]";
    for engine in [&[][..], &["--interp"][..]] {
        let mut words = vec!["check", p, "--args", args, "--trials", "2"];
        words.extend(engine);
        let perturbed = mcc(&words);
        assert_eq!(perturbed.code, 1, "{engine:?}: {}{}", perturbed.stdout, perturbed.stderr);
        assert!(perturbed.stdout.contains("c"), "{}", perturbed.stdout);
        words.extend(["--const", "1"]);
        let held = mcc(&words);
        assert_eq!(held.code, 0, "{engine:?}: {}{}", held.stdout, held.stderr);
        // Fewer comparisons: none of c.
        let compared = |out: &str| -> usize {
            let words: Vec<&str> = out.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "component").unwrap();
            words[at - 1].parse().unwrap()
        };
        assert!(compared(&held.stdout) < compared(&perturbed.stdout), "{}", held.stdout);
    }
    let out = mcc(&["check", p, "--args", args, "--const", "3"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("takes 3 arguments"), "{}", out.stderr);
    // A tolerance perturbed below zero makes its loop run on: the report says how many
    // evaluations ran out of time; held, it is not perturbed at all.
    let text = "fn root(a: f64, tol: f64) -> f64 {\n    let mut y = 1.0;\n    let mut step = 1.0;\n    while abs(step) > tol {\n        let next = 0.5 * (y + a / y);\n        step = next - y;\n        y = next;\n    }\n    return y;\n}\n";
    let path = dir.join("tolerance.mcir");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let perturbed = mcc(&["check", p, "--args", "[2.0, 0.001]", "--trials", "1", "--order", "1"]);
    assert!(perturbed.stdout.contains("ran out of time"), "{}{}", perturbed.stdout, perturbed.stderr);
    let held = mcc(&["check", p, "--args", "[2.0, 0.001]", "--trials", "1", "--const", "1"]);
    assert_eq!(held.code, 0, "{}{}", held.stdout, held.stderr);
    assert!(!held.stdout.contains("ran out of time"), "{}", held.stdout);
}

/// Every builtin with a derivative, by the name its rule is selected with.
const DIFFERENTIABLE_BUILTINS: &[&str] = &[
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "abs",
    "floor",
    "ceil",
    "round",
    "sign",
    "atan2",
    "fpow",
    "fpowi",
    "fmin",
    "fmax",
    "array.sum",
    "array.dot",
    "array.matmul",
    "array.matvec",
    "array.transpose",
    "array.copy",
    "array.fill",
    "fadd",
    "fsub",
    "fmul",
    "fdiv",
    "fneg",
];

#[test]
fn a_primal_that_fails_at_the_arguments_is_reported_with_its_place() {
    let text = "fn act(v: f64[], i: i64) -> f64 {\n    return v[i + 1] * 2.0;\n}\nfn main(v: f64[]) -> f64 {\n    let mut s = 0.0;\n    for i in 0..len(v) { s += act(v, i); }\n    return s;\n}\n";
    let dir = std::env::temp_dir().join(format!("mcir-ad-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("past_the_end.mcir");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    for engine in [&[][..], &["--interp"][..]] {
        let mut words = vec!["check", p, "--args", "[[1.0, 2.0, 3.0]]", "--trials", "1"];
        words.extend(engine);
        let out = mcc(&words);
        assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
        let place = format!("in function `act`, at {p}:2:12");
        assert!(out.stdout.contains("the primal fails: index 3 is out of bounds"), "{}", out.stdout);
        assert!(out.stdout.contains(&place), "{}", out.stdout);
    }
}

#[test]
fn a_corrupted_rule_is_caught_and_named() {
    let mut covered = Vec::new();
    let mut failures = Vec::new();
    for path in cases("check") {
        let text = std::fs::read_to_string(&path).unwrap();
        let Some(rule) = header(&text, "corrupt") else { continue };
        covered.push(rule.clone());
        let out = check_case(&path, &["--corrupt-rule", &rule]);
        if out.code != 1 || !out.stderr.starts_with("error:") || !out.stdout.contains("FAIL trial") {
            failures.push(format!("{}: corrupting `{rule}` was not caught:\n{}", rel(&path), out.stdout));
            continue;
        }
        if let Some(name) = header(&text, "names") {
            if !out.stdout.contains(&format!("the rule of `{name}")) {
                failures.push(format!("{}: the report does not name `{name}`:\n{}", rel(&path), out.stdout));
            }
        }
    }
    for b in DIFFERENTIABLE_BUILTINS {
        if !covered.iter().any(|c| c == b) {
            failures.push(format!("no test corrupts the rule of `{b}`"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether the entry function of a corpus program has anything to differentiate.
fn differentiable(program: &mcir::Program, func: mcir::FuncId) -> bool {
    let f = &program.module().funcs[func];
    let types = &program.module().types;
    f.params.iter().chain(f.ret.iter()).any(|&t| mcir_ad_has_tangent(types, t))
}

fn mcir_ad_has_tangent(types: &mcir::ir::TypeTable, t: mcir::ir::TypeId) -> bool {
    use mcir::ir::{Scalar, Type};
    match types.get(t) {
        Type::Scalar(s) => *s == Scalar::F64,
        Type::Array { elem, .. } => *elem == Scalar::F64,
        Type::Ref(i) | Type::Stack(i) => mcir_ad_has_tangent(types, *i),
        Type::Tuple(items) => items.iter().any(|&i| mcir_ad_has_tangent(types, i)),
        Type::Struct(_) => {
            types.as_struct(t).is_some_and(|(_, d)| d.fields.iter().any(|f| mcir_ad_has_tangent(types, f.1)))
        }
    }
}

#[test]
fn the_corpus_passes_the_checker() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in cases("programs") {
        let text = std::fs::read_to_string(&path).unwrap();
        let program = mcir::Program::compile(&rel(&path), &text).unwrap();
        let func = program.entry(header(&text, "fn").as_deref()).unwrap();
        // Programs evaluated at kinks on purpose say so, with the reason.
        if !differentiable(&program, func) || header(&text, "nondifferentiable").is_some() {
            continue;
        }
        checked += 1;
        // At a kink on purpose, first derivatives follow the conventions but the
        // gradient jumps: only first order is checked.
        let order: &[&str] = if header(&text, "kink").is_some() { &["--order", "1"] } else { &[] };
        let out = check_case(&path, order);
        if out.code != 0 {
            failures.push(format!("{}:\n{}{}", rel(&path), out.stdout, out.stderr));
        }
    }
    assert!(checked >= 30, "only {checked} corpus programs are differentiable");
    assert!(failures.is_empty(), "{} programs fail the checker:\n{}", failures.len(), failures.join("\n"));
}

/// Why `module` does not print, re-parse, verify and print the same, if it does not.
fn round_trip_failure(name: &str, what: &str, module: &mcir::Module) -> Option<String> {
    let text = mcir::ir::print_module(module);
    match mcir::ir::parse_module(&text) {
        Ok(m) => match mcir::ir::verify_module(&m) {
            Err(e) => Some(format!("{name}: re-parsed {what} IR does not verify: {e}")),
            Ok(()) if mcir::ir::print_module(&m) != text => {
                Some(format!("{name}: {what} IR changes through print -> parse -> print"))
            }
            Ok(()) => None,
        },
        Err(e) => Some(format!("{name}: {what} IR does not parse: {e}")),
    }
}

#[test]
fn derived_passes_are_snapshotted_and_reparse() {
    let mut failures = Vec::new();
    let mut snapshots = 0;
    for dir in ["programs", "check"] {
        for path in cases(dir) {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let program = mcir::Program::compile(&rel(&path), &text).unwrap();
            let func = program.entry(header(&text, "fn").as_deref()).unwrap();
            let d = match program.differentiate(&mcir::AdOptions::default()) {
                Ok(d) => d,
                Err(e) => {
                    failures.push(format!("{name}: {e}"));
                    continue;
                }
            };
            // The whole derived module prints, re-parses, verifies and prints the same.
            failures.extend(round_trip_failure(&name, "derived", d.module()));
            if dir == "check" {
                let mut ir = format!("{}\n{}", d.pass_text(func, false), d.pass_text(func, true));
                // The entry's rule that restores arguments from copies, where it has one,
                // and its VJP driver, which tests them apart (`array.shares`).
                let mut entry =
                    program.differentiate_with(&mcir::AdOptions::default(), Some(func), &[]).unwrap();
                if entry.pass(func, false) != d.pass(func, false) {
                    let driver = entry.driver(func).unwrap();
                    let module = entry.module();
                    ir = format!(
                        "{ir}\n{}\n{}\n{}",
                        entry.pass_text(func, false),
                        entry.pass_text(func, true),
                        mcir::ir::print_function(module, &module.funcs[driver])
                    );
                    failures.extend(round_trip_failure(&name, "derived with copies", module));
                }
                snapshot_settings("derived").bind(|| insta::assert_snapshot!(name.clone(), ir));
                snapshots += 1;
            }
        }
    }
    assert!(snapshots >= 25);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Forward mode: the tangent functions of every program print, re-parse and verify, and
/// those of `tests/check` are snapshotted.
#[test]
fn tangent_functions_are_snapshotted_and_reparse() {
    let mut failures = Vec::new();
    let mut snapshots = 0;
    for dir in ["programs", "check"] {
        for path in cases(dir) {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let program = mcir::Program::compile(&rel(&path), &text).unwrap();
            let func = program.entry(header(&text, "fn").as_deref()).unwrap();
            let t = match program.tangent_module(&[func]) {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("{name}: {e}"));
                    continue;
                }
            };
            failures.extend(round_trip_failure(&name, "tangent", &t.module));
            if dir == "check" {
                let tf = t.tangent(func).unwrap();
                let ir = mcir::ir::print_function(&t.module, &t.module.funcs[tf]);
                snapshot_settings("tangent").bind(|| insta::assert_snapshot!(name.clone(), ir));
                snapshots += 1;
            }
        }
    }
    assert!(snapshots >= 25);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `c / y` with `c` a power of two has its divisor's adjoint made without a division;
/// its products keep the magnitudes of `g / y` and `c / y`, so that none overflows or
/// underflows where the quotient's own derivative does not, on both engines.
#[test]
fn a_quotient_of_a_power_of_two_keeps_to_the_range_of_its_derivative() {
    let dir = std::env::temp_dir().join(format!("mcir-quotient-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("q.mcir");
    let text = "fn f(y: f64) -> f64 { return 2.0 / y; }\n\
                fn g(y: f64) -> f64 { return 4.149515568880993e180 / y; }\n\
                fn h(y: f64) -> f64 { return 2.409919865102884e-181 / y; }\n";
    std::fs::write(&path, text).unwrap();
    let file = path.to_str().unwrap();
    for (func, y, want) in [
        ("f", "1.4142135623730951e-154", -1e308),
        ("g", "1.0", -4.149515568880993e180),
        ("h", "1.0", -2.409919865102884e-181),
    ] {
        for engine in [None, Some("--interp")] {
            let args = format!("[{y}]");
            let mut words = vec!["grad", file, "--fn", func, "--args", &args];
            words.extend(engine);
            let out = mcc(&words);
            assert_eq!(out.code, 0, "{}", out.stderr);
            let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
            let got = json["gradient"][0].as_f64().unwrap();
            assert!((got - want).abs() <= 1e-15 * want.abs(), "{func} {engine:?}: {got} against {want}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
