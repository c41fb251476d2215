//! Threads the library starts are gone when a call returns: a call with a time limit
//! runs a watchdog thread, which must have exited (not only finished its work) by then.
//! Alone in its test binary, so that no other test starts threads meanwhile.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(target_os = "linux")]
fn live_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn a_call_with_a_time_limit_leaves_no_thread_behind() {
    let program = mcir::Program::compile("t.mcir", "fn f(x: f64) -> f64 { return x * x; }").unwrap();
    let f = program.entry(Some("f")).unwrap();
    let limits = mcir::Limits { timeout: Some(std::time::Duration::from_secs(10)), ..Default::default() };
    // The first call starts the threads that live for the process (compiling).
    program.call(f, &[mcir::Val::F64(1.0)], &limits).unwrap();
    let before = live_threads();
    for k in 0..200 {
        program.call(f, &[mcir::Val::F64(k as f64)], &limits).unwrap();
        assert_eq!(live_threads(), before, "a thread outlived call {k}");
    }
}
