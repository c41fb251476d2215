//! Prepared handles allocate nothing per call once warm: a counting global allocator
//! (alone in this test binary) counts the heap allocations of calls of a program with
//! calls in loops, after warm-up calls of the same shapes.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A global allocator is unsafe to implement; this one only counts, and forwards every
// call to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (and, with MCIR_TRACE_ALLOC set,
    /// where they come from printed).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; only a count is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Set from `MCIR_TRACE_ALLOC` before counting starts.
static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn note() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        COUNT.fetch_add(1, Ordering::Relaxed);
        if TRACE.load(Ordering::Relaxed) {
            COUNTING.with(|c| c.set(false));
            eprintln!("{}", std::backtrace::Backtrace::force_capture());
            COUNTING.with(|c| c.set(true));
        }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made by `work` on this thread.
fn allocations(work: impl FnOnce()) -> usize {
    TRACE.store(std::env::var_os("MCIR_TRACE_ALLOC").is_some(), Ordering::Relaxed);
    let before = COUNT.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    work();
    COUNTING.with(|c| c.set(false));
    COUNT.load(Ordering::Relaxed) - before
}

const PROGRAM: &str = "
fn shape(v: f64) -> f64 {
    if v > 0.25 { return sin(3.0 * v) * v; }
    return 0.5 * v * v - 0.25 * v + 0.125;
}

fn cube_root(a: f64) -> f64 {
    let mut y = 1.0 + 0.25 * a;
    let mut step = 1.0;
    while abs(step) > 1.0e-12 {
        step = (y * y * y - a) / (3.0 * y * y);
        y = y - step;
    }
    return y;
}

fn halves(v: f64[], lo: i64, hi: i64) -> f64 {
    if hi - lo == 1 { return sin(v[lo]); }
    let mid = lo + (hi - lo) / 2;
    return halves(v, lo, mid) * 0.75 + tanh(halves(v, mid, hi));
}

// Calls in a loop: one with a branch, one with a `while` loop; and a recursion.
fn total(x: f64[], scale: f64) -> f64 {
    let mut s = 0.0;
    for i in 0..len(x) {
        s += shape(x[i] * scale) + cube_root(1.0 + x[i] * x[i]);
    }
    return s + halves(x, 0, len(x));
}
";

#[test]
fn prepared_calls_allocate_nothing_once_warm() {
    calls_allocate_nothing_once_warm(mcir::Limits::default());
}

/// With a time limit, the process's one watchdog keeps it: a call registers and leaves
/// a slot of its table rather than starting a thread.
#[test]
fn prepared_calls_with_a_time_limit_allocate_nothing_once_warm() {
    let limits = mcir::Limits { timeout: Some(std::time::Duration::from_secs(30)), ..Default::default() };
    calls_allocate_nothing_once_warm(limits);
}

fn calls_allocate_nothing_once_warm(limits: mcir::Limits) {
    let program = mcir::Program::compile("p.mcir", PROGRAM).unwrap();
    let mut p = program.function("total").unwrap().with_limits(limits).prepare().unwrap();
    p.compile_gradient().unwrap();
    let mut x: Vec<f64> = (0..64).map(|i| (i as f64 * 0.37).sin()).collect();
    let mut g = vec![0.0; x.len()];
    let mut gs = 0.0;
    let n = [x.len()];
    let call = |p: &mut mcir::Prepared<'_>, x: &mut Vec<f64>| {
        p.call(&mut [mcir::Arg::F64Array(x, &n), mcir::Arg::F64(1.5)]).unwrap();
    };
    for _ in 0..3 {
        call(&mut p, &mut x);
    }
    let primal = allocations(|| {
        for _ in 0..100 {
            call(&mut p, &mut x);
        }
    });
    let gradient = |p: &mut mcir::Prepared<'_>, x: &mut Vec<f64>, g: &mut Vec<f64>, gs: &mut f64| {
        p.value_and_gradient(
            &mut [mcir::Arg::F64Array(x, &n), mcir::Arg::F64(1.5)],
            &mut [mcir::GradSlot::Array(g), mcir::GradSlot::F64(gs)],
        )
        .unwrap();
    };
    for _ in 0..3 {
        gradient(&mut p, &mut x, &mut g, &mut gs);
    }
    let reverse = allocations(|| {
        for _ in 0..100 {
            gradient(&mut p, &mut x, &mut g, &mut gs);
        }
    });
    let mut dx = vec![1.0; x.len()];
    let tangent = |p: &mut mcir::Prepared<'_>, x: &mut Vec<f64>, dx: &mut Vec<f64>| {
        p.value_and_derivative(
            &mut [mcir::Arg::F64Array(x, &n), mcir::Arg::F64(1.5)],
            &mut [mcir::Arg::F64Array(dx, &n), mcir::Arg::F64(0.5)],
        )
        .unwrap();
    };
    for _ in 0..3 {
        tangent(&mut p, &mut x, &mut dx);
    }
    let forward = allocations(|| {
        for _ in 0..100 {
            tangent(&mut p, &mut x, &mut dx);
        }
    });
    assert_eq!(
        (primal, reverse, forward),
        (0, 0, 0),
        "heap allocations in 100 calls: (primal, gradient, derivative)"
    );
}
