//! Compile time on large programs: source to native code for a function and its
//! gradient (`Program::compile`, `prepare`, `compile_gradient`), for three shapes that
//! grow the compiler's work in different directions, each at two sizes so that the
//! figures show how time grows (twice the program should take about twice the time):
//!
//! - `straight_line`: one function of `n` statements, a call to `sin`, `cos` or `exp` on
//!   each line (one block of thousands of values, with calls across which nothing stays
//!   in a register);
//! - `call_chain`: `g0` calls `g1` calls … `gn`, each `sin` of the next (a deep call
//!   graph, each function's rule calling the next one's);
//! - `many_functions`: `n` small functions, every 25th called from `main` (many rules).
//!
//! `cargo bench -p mcir --bench compile`; `docs/performance.md` has the figures, with
//! `mcc` timings of the sizes the figures quote (10⁵ lines, a 2 000-function chain).

// A benchmark whose program fails to compile should stop where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use divan::Bencher;
use mcir::Program;

fn main() {
    divan::main();
}

/// `main(x)`: `n` statements updating `s`, each with a call to a math function.
pub fn straight_line(n: usize) -> String {
    let lines = [
        "s = sin(s) + 0.5 * x;",
        "s = s * 0.999 + cos(x);",
        "s = s / (1.0 + s * s);",
        "s = exp(-s * s) + s;",
    ];
    let mut text = String::from("fn main(x: f64) -> f64 {\n    let mut s = x;\n");
    for k in 0..n {
        text.push_str("    ");
        text.push_str(lines[k % lines.len()]);
        text.push('\n');
    }
    text.push_str("    return s;\n}\n");
    text
}

/// `main(x) = g0(x)`, `gk(x) = sin(gk+1(x))` for `k < n`, `gn(x) = x * x`.
pub fn call_chain(n: usize) -> String {
    let mut text = String::new();
    for k in 0..n {
        text.push_str(&format!("fn g{k}(x: f64) -> f64 {{ return sin(g{}(x)); }}\n", k + 1));
    }
    text.push_str(&format!("fn g{n}(x: f64) -> f64 {{ return x * x; }}\n"));
    text.push_str("fn main(x: f64) -> f64 { return g0(x); }\n");
    text
}

/// `n` functions of three lines, every 25th called from `main`.
pub fn many_functions(n: usize) -> String {
    let mut text = String::new();
    for k in 0..n {
        text.push_str(&format!(
            "fn h{k}(x: f64) -> f64 {{\n    let y = sin(x) * {}.0;\n    return y + x;\n}}\n",
            1 + k % 7
        ));
    }
    text.push_str("fn main(x: f64) -> f64 {\n    let mut s = 0.0;\n");
    for k in (0..n).step_by(25) {
        text.push_str(&format!("    s += h{k}(x);\n"));
    }
    text.push_str("    return s;\n}\n");
    text
}

/// Compiles `text` and the gradient of its `main`, to native code.
fn compile_with_gradient(text: &str) {
    let program = Program::compile("bench.mcir", text).expect("compiles");
    let mut prepared = program.function("main").expect("main").prepare().expect("prepares");
    prepared.compile_gradient().expect("gradient compiles");
}

#[divan::bench(args = [5_000, 10_000], sample_count = 5, sample_size = 1)]
fn straight_line_with_gradient(b: Bencher, n: usize) {
    let text = straight_line(n);
    b.bench(|| compile_with_gradient(&text));
}

#[divan::bench(args = [1_000, 2_000], sample_count = 5, sample_size = 1)]
fn call_chain_with_gradient(b: Bencher, n: usize) {
    let text = call_chain(n);
    b.bench(|| compile_with_gradient(&text));
}

#[divan::bench(args = [2_500, 5_000], sample_count = 5, sample_size = 1)]
fn many_functions_with_gradient(b: Bencher, n: usize) {
    let text = many_functions(n);
    b.bench(|| compile_with_gradient(&text));
}
