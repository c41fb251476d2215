//! Property test: randomly generated programs that mix loops (counted and with
//! data-dependent trip counts), branches, early returns, recursion, refs, aliasing and
//! in-place updates are differentiated, and the checker confirms every gradient against
//! finite differences, the restoration of the arguments and the shadows' aliasing.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Rng;

/// A smooth expression over the given scalar names (no kinks, no poles, no overflow).
fn expr(rng: &mut Rng, vars: &[&str], depth: usize) -> String {
    if depth == 0 || rng.chance(0.3) {
        return if rng.chance(0.8) {
            vars[rng.below(vars.len())].to_string()
        } else {
            format!("{:.2}", rng.normal())
        };
    }
    let a = expr(rng, vars, depth - 1);
    let b = expr(rng, vars, depth - 1);
    match rng.below(9) {
        0 => format!("({a} + {b})"),
        1 => format!("({a} - {b})"),
        2 => format!("({a} * {b})"),
        3 => format!("({a} / (1.0 + {b} * {b}))"),
        4 => format!("sin({a})"),
        5 => format!("cos({a})"),
        6 => format!("tanh({a})"),
        7 => format!("exp(sin({a}))"),
        _ => format!("({a} * 0.5)"),
    }
}

fn statement(rng: &mut Rng, depth: usize) -> String {
    let e = |rng: &mut Rng, vars: &[&str]| expr(rng, vars, 2);
    match rng.below(11) {
        0 => format!(
            "    for i in 0..len(x) {{\n        if x[i] > {:.5} {{ acc += {}; }} else {{ acc -= {}; }}\n    }}\n",
            rng.normal() * 0.5 + 0.000_07,
            e(rng, &["x[i]", "acc", "y"]),
            e(rng, &["x[i]", "y"])
        ),
        1 => format!(
            "    let mut k = 0;\n    while k < 6 && acc < {:.5} {{\n        acc += 0.5 + tanh({}) * 0.25;\n        k += 1;\n    }}\n",
            rng.normal() * 2.0 + 1.000_07,
            e(rng, &["acc", "y"])
        ),
        2 => format!("    x[{}] = {};\n", rng.below(4), e(rng, &["x[0]", "x[1]", "acc", "y"])),
        3 => format!("    x[{}] *= {};\n", rng.below(4), e(rng, &["x[2]", "acc", "y"])),
        4 => "    *r = x;\n".to_string(),
        5 => format!("    *r = x * {};\n", e(rng, &["y", "acc"])),
        6 => format!("    bump(*r, {});\n", e(rng, &["acc", "y"])),
        7 => "    acc += pair(x, x);\n".to_string(),
        8 => format!("    acc = rec({}, {});\n", e(rng, &["acc", "y", "x[3]"]), rng.below(4)),
        9 if depth > 0 => format!(
            "    if acc > {:.5} {{\n        return acc * {};\n    }}\n",
            rng.normal() + 0.000_07,
            e(rng, &["y", "x[1]"])
        ),
        _ => format!("    acc += helper({}, x);\n", e(rng, &["acc", "y"])),
    }
}

fn program(rng: &mut Rng) -> String {
    let mut body = String::new();
    for d in 0..rng.below(6) + 2 {
        body.push_str(&statement(rng, d));
    }
    format!(
        "fn helper(a: f64, v: f64[]) -> f64 {{\n    let mut s = a;\n    for i in 0..len(v) {{ s = s * 0.5 + {}; }}\n    return s;\n}}\n\n\
         fn rec(z: f64, n: i64) -> f64 {{\n    if n <= 0 {{ return z; }}\n    return rec({}, n - 1);\n}}\n\n\
         fn pair(a: f64[], b: f64[]) -> f64 {{\n    a[0] = a[0] * b[1];\n    b[2] += a[0];\n    return a[0] + b[2];\n}}\n\n\
         fn bump(v: f64[], s: f64) {{\n    v *= s;\n    v[1] += s * s;\n}}\n\n\
         fn main(x: f64[], y: f64, r: ref<f64[]>) -> f64 {{\n    let mut acc = y;\n{body}    return acc + sum(x) + sum(*r);\n}}\n",
        expr(rng, &["s", "v[i]", "a"], 2),
        expr(rng, &["z"], 2),
    )
}

fn args(rng: &mut Rng) -> String {
    let arr = |rng: &mut Rng| {
        let v: Vec<String> = (0..4).map(|_| format!("{:.3}", rng.normal())).collect();
        format!("[{}]", v.join(", "))
    };
    format!("[{}, {:.3}, {}]", arr(rng), rng.normal(), arr(rng))
}

#[test]
fn random_programs_have_correct_gradients() {
    let count: usize =
        std::env::var("MCIR_AD_PROPERTY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let mut rng = Rng(0xad_5eed);
    let mut failures = Vec::new();
    for case in 0..count {
        let text = program(&mut rng);
        let a = args(&mut rng);
        let program = match mcir::Program::compile("random.mcir", &text) {
            Ok(p) => p,
            Err(e) => panic!("case {case} does not compile:\n{}\n{text}", e.render()),
        };
        let func = program.entry(Some("main")).unwrap();
        let options = mcir::CheckOptions { trials: 2, ..Default::default() };
        let report = program.check(func, Some(&a), &options, &mcir::Limits::default()).unwrap();
        assert!(report.compared > 0, "case {case}: nothing was compared");
        if !report.passed() {
            failures.push(format!("case {case} with args {a}:\n{text}\n{}", report.render()));
        }
    }
    assert!(failures.is_empty(), "{} of {count} programs fail:\n{}", failures.len(), failures.join("\n\n"));
}
