//! A million gradient calls of a prepared handle on a recursive program leave resident
//! memory where a thousand left it: nothing accumulates from call to call. Alone in its
//! test binary, so that no other test changes the process's memory meanwhile.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Resident memory of this process, in bytes (Linux).
#[cfg(target_os = "linux")]
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

const PROGRAM: &str = "
fn halves(v: f64[], lo: i64, hi: i64) -> f64 {
    if hi - lo == 1 { return sin(v[lo]) * v[lo]; }
    let mid = lo + (hi - lo) / 2;
    let left = halves(v, lo, mid);
    let right = halves(v, mid, hi);
    if left > right { return left * 0.75 + tanh(right); }
    return right * 0.75 + tanh(left);
}

fn total(x: f64[]) -> f64 {
    return halves(x, 0, len(x));
}
";

#[cfg(target_os = "linux")]
#[test]
fn a_million_gradient_calls_keep_resident_memory_flat() {
    let program = mcir::Program::compile("p.mcir", PROGRAM).unwrap();
    let mut p = program.function("total").unwrap().prepare().unwrap();
    p.compile_gradient().unwrap();
    let mut x: Vec<f64> = (0..16).map(|i| (i as f64 * 0.37).sin()).collect();
    let mut g = vec![0.0; x.len()];
    let n = [x.len()];
    let mut calls = |count: usize| {
        for _ in 0..count {
            p.value_and_gradient(
                &mut [mcir::Arg::F64Array(&mut x, &n)],
                &mut [mcir::GradSlot::Array(&mut g)],
            )
            .unwrap();
        }
    };
    calls(1_000);
    let after_thousand = resident();
    calls(999_000);
    let after_million = resident();
    let grown = after_million.saturating_sub(after_thousand);
    assert!(grown < 1 << 20, "resident memory grew by {grown} bytes from 10^3 to 10^6 calls");
}
