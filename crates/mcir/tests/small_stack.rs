//! Calls from threads with small stacks: deep recursion under the default limits is an
//! error that names the limit it hit, never an overflow of the caller's stack, on both
//! engines and in every mode (native code runs on a stack of the library's own when the
//! caller's has too little left).

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcir::{Arg, Engine, GradSlot, Limits, Program, Val};

const DEEP: &str = "fn down(x: f64, n: i64) -> f64 {\n    if n <= 0 { return x; }\n    return sin(down(x, n - 1)) + 0.0 * x;\n}\n";

/// Runs `work` on a fresh thread with `stack` bytes of stack; its result.
fn on_thread<T: Send + 'static>(stack: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new().stack_size(stack).spawn(work).unwrap().join().unwrap()
}

/// Every mode of `down` at `depth`, on `engine`: each one's result, as text.
fn every_mode(engine: Engine, depth: i64) -> Vec<Result<(), String>> {
    let program = Program::compile("deep.mcir", DEEP).unwrap().with_engine(engine);
    let f = program.function("down").unwrap();
    let id = f.id();
    let args = [Val::F64(0.5), Val::I64(depth)];
    let limits = Limits::default();
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let mut out = vec![
        f.call(&args).map(|_| ()).map_err(|e| text(&e)),
        f.value_and_gradient(&args).map(|_| ()).map_err(|e| text(&e)),
        program.jvp(id, &args, &[Val::F64(1.0), Val::Unit], &limits).map(|_| ()).map_err(|e| text(&e)),
        program.hvp(id, &args, &[Val::F64(1.0), Val::Unit], &limits).map(|_| ()).map_err(|e| text(&e)),
    ];
    if engine == Engine::Jit {
        let mut prepared = f.prepare().unwrap();
        let mut a = [Arg::F64(0.5), Arg::I64(depth)];
        out.push(prepared.call(&mut a).map(|_| ()).map_err(|e| text(&e)));
        let mut g = 0.0;
        let mut slots = [GradSlot::F64(&mut g), GradSlot::Skip];
        out.push(prepared.value_and_gradient(&mut a, &mut slots).map(|_| ()).map_err(|e| text(&e)));
        let mut t = [Arg::F64(1.0)];
        out.push(prepared.value_and_derivative(&mut a, &mut t).map(|_| ()).map_err(|e| text(&e)));
    }
    out
}

#[test]
fn deep_recursion_from_a_256_kib_thread_is_an_error_that_names_its_limit() {
    for engine in [Engine::Jit, Engine::Interpreter] {
        // Within what the interpreter allows (100 000 calls), past the 1 MiB native code
        // may use; and past both.
        for depth in [50_001i64, 1_000_000] {
            let results = on_thread(256 << 10, move || every_mode(engine, depth));
            for (mode, r) in results.iter().enumerate() {
                let expected = match (engine, depth) {
                    (Engine::Interpreter, 50_001) => None,
                    (Engine::Interpreter, _) => Some("more than 100000 nested calls"),
                    (Engine::Jit, _) => Some("need more than the 1 MiB of machine stack allowed"),
                };
                match (expected, r) {
                    (None, Ok(())) => {}
                    (Some(m), Err(e)) if e.contains(m) => {}
                    _ => panic!("{engine:?}, depth {depth}, mode {mode}: {r:?}, expected {expected:?}"),
                }
            }
        }
    }
}

#[test]
fn recursion_within_the_limits_answers_from_a_small_thread() {
    // 2 000 calls fit in 1 MiB of native stack; the caller's 256 KiB would not hold them.
    let results = on_thread(256 << 10, || every_mode(Engine::Jit, 2_000));
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
}
