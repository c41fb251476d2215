//! Calls leave no thread behind: the time limits of all calls are kept by one watchdog
//! thread for the process, which the first call with a limit starts (with the threads
//! that compile), and later calls start none. The kernel may list an exited thread for
//! a moment longer, and longer on a busy machine, so the count is read once things
//! settle, for up to ten seconds. Alone in its test binary, so that no other test
//! starts threads meanwhile.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(target_os = "linux")]
fn live_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn calls_with_a_time_limit_leave_no_thread_behind() {
    let program = mcir::Program::compile("t.mcir", "fn f(x: f64) -> f64 { return x * x; }").unwrap();
    let f = program.entry(Some("f")).unwrap();
    let limits = mcir::Limits { timeout: Some(std::time::Duration::from_secs(10)), ..Default::default() };
    // The first call starts the threads that live for the process (compiling, and the
    // watchdog).
    program.call(f, &[mcir::Val::F64(1.0)], &limits).unwrap();
    let before = live_threads();
    for k in 0..200 {
        program.call(f, &[mcir::Val::F64(k as f64)], &limits).unwrap();
    }
    let settled = (0..1000).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        live_threads() <= before
    });
    assert!(settled, "{} threads are left after 200 calls, against {before} before", live_threads());
}
