//! The embedding API: calls from several threads on one compiled program, memory that
//! does not grow over many calls, and wrong arguments reported as errors.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcir::{ApiError, Arg, GradSlot, Program, Value};

const SOURCE: &str = "
fn sumsq(x: f64[]) -> f64 {
    let mut s = 0.0;
    for i in 0..len(x) { s += x[i] * x[i]; }
    return s;
}
fn pick(x: f64[], i: i64) -> f64 { return x[i]; }
fn scale(x: f64[], s: f64) { x *= s; }
";

#[test]
fn several_threads_share_one_program() {
    let program = Program::compile("api.mcir", SOURCE).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let program = &program;
            s.spawn(move || {
                let f = program.function("sumsq").unwrap();
                let mut prepared = f.prepare().unwrap();
                for k in 0..200 {
                    let v = (t * 1000 + k) as f64;
                    let mut x = vec![v, 1.0, 2.0];
                    let mut g = vec![0.0; 3];
                    let y = prepared
                        .value_and_gradient(
                            &mut [Arg::F64Array(&mut x, &[3])],
                            &mut [GradSlot::Array(&mut g)],
                        )
                        .unwrap();
                    assert_eq!(y, v * v + 5.0);
                    assert_eq!(g, vec![2.0 * v, 2.0, 4.0]);
                    // The value-based interface too.
                    let (y2, grad) = f.value_and_gradient(&[Value::vector(vec![v, 3.0])]).unwrap();
                    assert_eq!(y2, v * v + 9.0);
                    assert_eq!(grad[0].to_f64_vec().unwrap(), vec![2.0 * v, 6.0]);
                }
            });
        }
    });
}

#[test]
fn repeated_calls_do_not_grow_memory() {
    let program = Program::compile("api.mcir", SOURCE).unwrap();
    let mut prepared = program.function("sumsq").unwrap().prepare().unwrap();
    let mut x = vec![1.5; 64];
    let mut g = vec![0.0; 64];
    let mut call = |prepared: &mut mcir::Prepared<'_>| {
        prepared
            .value_and_gradient(&mut [Arg::F64Array(&mut x, &[64])], &mut [GradSlot::Array(&mut g)])
            .unwrap();
        prepared.call(&mut [Arg::F64Array(&mut x, &[64])]).unwrap();
    };
    for _ in 0..100 {
        call(&mut prepared);
    }
    let held = prepared.workspace_bytes();
    for _ in 0..100_000 {
        call(&mut prepared);
    }
    assert_eq!(prepared.workspace_bytes(), held, "the workspaces grew over 100 000 calls");
    assert!(held < 1 << 20, "the workspaces hold {held} bytes");
}

#[test]
fn wrong_arguments_are_errors_not_crashes() {
    let program = Program::compile("api.mcir", SOURCE).unwrap();
    let pick = program.function("pick").unwrap();
    // Out of bounds, through values and through slices.
    match pick.call(&[Value::vector(vec![1.0, 2.0]), Value::I64(5)]) {
        Err(ApiError::Runtime(e)) => assert!(e.to_string().contains("out of bounds"), "{e}"),
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
    let mut prepared = pick.prepare().unwrap();
    let mut x = vec![1.0, 2.0];
    match prepared.call(&mut [Arg::F64Array(&mut x, &[2]), Arg::I64(-1)]) {
        Err(ApiError::Runtime(e)) => assert!(e.to_string().contains("out of bounds"), "{e}"),
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
    // A shape that does not fit the data, a wrong rank, a wrong kind, a wrong count.
    let mut y = vec![1.0, 2.0, 3.0];
    assert!(matches!(prepared.call(&mut [Arg::F64Array(&mut y, &[2]), Arg::I64(0)]), Err(ApiError::Args(_))));
    assert!(matches!(
        prepared.call(&mut [Arg::F64Array(&mut y, &[3, 1]), Arg::I64(0)]),
        Err(ApiError::Args(_))
    ));
    assert!(matches!(prepared.call(&mut [Arg::F64(1.0), Arg::I64(0)]), Err(ApiError::Args(_))));
    assert!(matches!(prepared.call(&mut [Arg::I64(0)]), Err(ApiError::Args(_))));
    assert!(matches!(pick.call(&[Value::F64(1.0), Value::I64(0)]), Err(ApiError::Args(_))));
    assert!(matches!(pick.call(&[]), Err(ApiError::Args(_))));
    // Gradient slots that do not fit.
    let mut sq = program.function("sumsq").unwrap().prepare().unwrap();
    let mut g = vec![0.0; 2];
    assert!(matches!(
        sq.value_and_gradient(&mut [Arg::F64Array(&mut y, &[3])], &mut [GradSlot::Array(&mut g)]),
        Err(ApiError::Args(_))
    ));
    // Signatures are checked.
    assert!(program.function("sumsq").unwrap().expect_signature("fn(f64[]) -> f64").is_ok());
    assert!(matches!(
        program.function("sumsq").unwrap().expect_signature("fn(f64) -> f64"),
        Err(ApiError::Signature { .. })
    ));
    assert!(matches!(program.function("nope"), Err(ApiError::NoSuchFunction(_))));
    assert!(matches!(
        program.function("scale").unwrap().value_and_gradient(&[Value::vector(vec![1.0]), Value::F64(2.0)]),
        Err(ApiError::Signature { .. })
    ));
}

#[test]
fn calls_update_arrays_in_place_and_files_compile() {
    let path = std::env::temp_dir().join(format!("mcir-api-{}.mcir", std::process::id()));
    std::fs::write(&path, SOURCE).unwrap();
    let program = Program::compile_file(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let x = Value::vector(vec![1.0, 2.0]);
    program.function("scale").unwrap().call(&[x.clone(), Value::F64(3.0)]).unwrap();
    assert_eq!(x.to_f64_vec().unwrap(), vec![3.0, 6.0]);
    assert!(matches!(Program::compile_file("/nonexistent/x.mcir"), Err(ApiError::Io(_))));
}

/// Forward mode on slices: the value and the derivative along a direction, with array
/// tangents updated in place; a tangent of the wrong shape is an error before any code
/// runs.
#[test]
fn prepared_forward_mode_on_slices() {
    let src = "fn f(x: f64[], s: f64, k: i64) -> f64 {\n    x *= s;\n    return sum(x * x) + f64(k);\n}\n";
    let program = Program::compile("fwd.mcir", src).unwrap();
    let mut p = program.function("f").unwrap().prepare().unwrap();
    let (mut x, shape) = (vec![1.0, 2.0, 3.0], vec![3usize]);
    let (mut dx, dshape) = (vec![1.0, 0.0, -1.0], vec![3usize]);
    let mut args = [Arg::F64Array(&mut x, &shape), Arg::F64(2.0), Arg::I64(4)];
    let mut tangents = [Arg::F64Array(&mut dx, &dshape), Arg::F64(0.5)];
    let (value, derivative) = p.value_and_derivative(&mut args, &mut tangents).unwrap();
    // f = s² Σx² + k; df = 2 s² Σ x dx + 2 s ds Σx²
    assert_eq!(value, 4.0 * 14.0 + 4.0);
    assert_eq!(derivative, 2.0 * 4.0 * (1.0 - 3.0) + 2.0 * 2.0 * 0.5 * 14.0);
    // x holds s·x, dx its tangent: ds·x + s·dx.
    assert_eq!(x, vec![2.0, 4.0, 6.0]);
    assert_eq!(dx, vec![2.5, 1.0, -0.5]);

    let (mut y, yshape) = (vec![1.0, 2.0, 3.0], vec![3usize]);
    let (mut dy, dyshape) = (vec![1.0, 0.0], vec![2usize]);
    let mut args = [Arg::F64Array(&mut y, &yshape), Arg::F64(2.0), Arg::I64(4)];
    let mut tangents = [Arg::F64Array(&mut dy, &dyshape), Arg::F64(0.5)];
    assert!(matches!(p.value_and_derivative(&mut args, &mut tangents), Err(ApiError::Args(_))));
    let mut tangents = [Arg::F64(0.5)];
    assert!(matches!(p.value_and_derivative(&mut args, &mut tangents), Err(ApiError::Args(_))));
}

#[test]
fn a_vjp_returns_the_value_the_function_returned() {
    // Results that share memory with what the reverse pass restores: an array written
    // after it was made, an argument changed and returned, and both inside a tuple.
    let src = "
fn written(x: f64[]) -> f64[] { let y = copy(x); y[0] = y[0] * 3.0; return y; }
fn changed(x: f64[]) -> f64[] { x[0] = x[0] * 3.0; return x; }
fn pair(x: f64[]) -> (f64, f64[]) { let y = copy(x); y[1] = y[1] * y[0]; return (y[1], y); }
fn cell(x: f64) -> ref<f64> { return ref(x * x); }
";
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let program = Program::compile("results.mcir", src).unwrap().with_engine(engine);
        for name in ["written", "changed"] {
            let f = program.function(name).unwrap();
            let x = Value::vector(vec![1.0, 2.0]);
            let out = f.vjp(std::slice::from_ref(&x), Some(Value::vector(vec![1.0, 1.0])), &[]).unwrap();
            assert_eq!(out.value.unwrap().to_f64_vec().unwrap(), vec![3.0, 2.0], "{name} {engine:?}");
            assert_eq!(out.gradient[0].to_f64_vec().unwrap(), vec![3.0, 1.0], "{name} {engine:?}");
            // The argument is back in its entry state.
            assert_eq!(x.to_f64_vec().unwrap(), vec![1.0, 2.0], "{name} {engine:?}");
        }
        let f = program.function("pair").unwrap();
        let seed = Value::Agg(vec![Value::F64(1.0), Value::vector(vec![1.0, 1.0])].into());
        let out = f.vjp(&[Value::vector(vec![2.0, 3.0])], Some(seed), &[]).unwrap();
        let Some(Value::Agg(items)) = &out.value else { panic!("a tuple") };
        assert_eq!(items[0].as_f64(), Some(6.0), "{engine:?}");
        assert_eq!(items[1].to_f64_vec().unwrap(), vec![2.0, 6.0], "{engine:?}");
        assert_eq!(out.gradient[0].to_f64_vec().unwrap(), vec![7.0, 4.0], "{engine:?}");
    }
}

#[test]
fn arguments_restored_from_copies_may_be_one_array() {
    // `drift` and `decay` write `v` in place and their reverse passes never read `v`:
    // their gradients copy `v` on entry instead of keeping what each step overwrites.
    // That is right only while `v` is not another argument too: `decay`'s reverse pass
    // reads `p[i]` as it was before `v[i]` was written, so passed one array twice it must
    // give what `decay_twice` gives, which passes one array twice itself (and whose rule
    // of `decay` keeps every old value), and leave the array as it was.
    let src = "
fn drift(p: f64[], v: f64[], steps: i64) -> f64 {
    for t in 0..steps {
        for i in 0..len(p) {
            v[i] += 0.1 * sin(p[i]);
            p[i] += 0.5 * v[i];
        }
    }
    let mut e = 0.0;
    for i in 0..len(p) { e += p[i] * p[i]; }
    return e;
}
fn decay(p: f64[], v: f64[], steps: i64) -> f64 {
    let mut e = 0.0;
    for t in 0..steps {
        for i in 0..len(p) {
            e += p[i] * p[i] * p[i];
            v[i] = 0.9 * v[i] + 0.1;
        }
    }
    return e;
}
fn decay_twice(p: f64[], steps: i64) -> f64 { return decay(p, p, steps); }
";
    let start = vec![0.3, -0.7, 1.1];
    let velocity = vec![0.2, 0.0, -0.1];
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let program = Program::compile("drift.mcir", src).unwrap().with_engine(engine);
        for name in ["drift", "decay"] {
            let f = program.function(name).unwrap();
            // Apart: against finite differences, and both arguments restored.
            let (p, v) = (Value::vector(start.clone()), Value::vector(velocity.clone()));
            let (_, grad) = f.value_and_gradient(&[p.clone(), v.clone(), Value::I64(4)]).unwrap();
            assert_eq!(p.to_f64_vec().unwrap(), start, "{name} {engine:?}");
            assert_eq!(v.to_f64_vec().unwrap(), velocity, "{name} {engine:?}");
            for (k, x) in [&start, &velocity].into_iter().enumerate() {
                for i in 0..3 {
                    let at = |d: f64| {
                        let mut args = [start.clone(), velocity.clone()];
                        args[k] = x.clone();
                        args[k][i] += d;
                        let [a, b] = args;
                        f.call(&[Value::vector(a), Value::vector(b), Value::I64(4)])
                            .unwrap()
                            .and_then(|y| y.as_f64())
                            .unwrap()
                    };
                    let fd = (at(1e-6) - at(-1e-6)) / 2e-6;
                    let g = grad[k].to_f64_vec().unwrap()[i];
                    assert!((fd - g).abs() < 1e-6 * (1.0 + g.abs()), "{name} {engine:?}: {fd} against {g}");
                }
            }
        }
        // One array twice.
        let decay = program.function("decay").unwrap();
        let a = Value::vector(start.clone());
        let (value, grad) = decay.value_and_gradient(&[a.clone(), a.clone(), Value::I64(4)]).unwrap();
        assert_eq!(a.to_f64_vec().unwrap(), start, "{engine:?}: the array is restored");
        let twice = program.function("decay_twice").unwrap();
        let (expected, expected_grad) =
            twice.value_and_gradient(&[Value::vector(start.clone()), Value::I64(4)]).unwrap();
        assert_eq!(value, expected, "{engine:?}");
        // One address, one shadow: each argument's cotangent is the array's gradient.
        let expected_grad = expected_grad[0].to_f64_vec().unwrap();
        for g in &grad[..2] {
            let g = g.to_f64_vec().unwrap();
            for (x, e) in g.iter().zip(&expected_grad) {
                assert!(
                    (x - e).abs() <= 1e-12 * (1.0 + e.abs()),
                    "{engine:?}: {g:?} against {expected_grad:?}"
                );
            }
        }
    }
}

#[test]
fn an_element_held_across_a_loop_may_be_read_through_another_argument() {
    // Native code holds `out[i]` in a value across the inner loop (`mcir_ir::promote`)
    // only once `out` and `v` are shown to be two arrays: passed one array twice, the
    // loop reads `v[j]`, which is `out[i]` when `j = i`, as it was just written. The
    // reverse pass adds into `v̄[j]` beside `ōut[i]` in the same way. `mix_twice` passes
    // one array twice itself, so nothing can take its two arguments for two arrays.
    let src = "
fn mix(out: f64[], v: f64[]) -> f64 {
    for i in 0..len(out) {
        for j in 0..len(v) {
            out[i] += 0.25 * sin(v[j]) * out[i];
        }
    }
    let mut e = 0.0;
    for i in 0..len(out) { e += out[i] * f64(i + 1); }
    return e;
}
fn mix_twice(a: f64[]) -> f64 { return mix(a, a); }
";
    let start = vec![0.3, -0.7, 1.1, 0.4];
    let mut results = Vec::new();
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let program = Program::compile("mix.mcir", src).unwrap().with_engine(engine);
        let mix = program.function("mix").unwrap();
        let twice = program.function("mix_twice").unwrap();
        // The run: the value and what the array holds after it.
        let a = Value::vector(start.clone());
        let value = mix.call(&[a.clone(), a.clone()]).unwrap().and_then(|y| y.as_f64()).unwrap();
        let b = Value::vector(start.clone());
        let expected = twice.call(std::slice::from_ref(&b)).unwrap().and_then(|y| y.as_f64()).unwrap();
        assert_eq!(value, expected, "{engine:?}");
        assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap(), "{engine:?}");
        // Apart, the two differ: the test above would not see a wrong shortcut otherwise.
        let apart = mix
            .call(&[Value::vector(start.clone()), Value::vector(start.clone())])
            .unwrap()
            .and_then(|y| y.as_f64());
        assert_ne!(apart, Some(value), "{engine:?}");
        // The gradient, one address with one shadow.
        let a = Value::vector(start.clone());
        let (value, grad) = mix.value_and_gradient(&[a.clone(), a.clone()]).unwrap();
        let (expected, expected_grad) = twice.value_and_gradient(&[Value::vector(start.clone())]).unwrap();
        assert_eq!(value, expected, "{engine:?}");
        let expected_grad = expected_grad[0].to_f64_vec().unwrap();
        for g in &grad {
            let g = g.to_f64_vec().unwrap();
            for (x, e) in g.iter().zip(&expected_grad) {
                assert!(
                    (x - e).abs() <= 1e-12 * (1.0 + e.abs()),
                    "{engine:?}: {g:?} against {expected_grad:?}"
                );
            }
        }
        results.push((value, expected_grad));
    }
    // And the engines agree.
    assert_eq!(results[0].0, results[1].0);
}

#[test]
fn no_seed_is_a_zero_seed_for_a_result_that_holds_memory() {
    // A zero cotangent for an array or a cell needs its shape, which only a call tells.
    let src = "
fn relax(w: f64[], c: f64) -> f64[] { for i in 0..len(w) { w[i] = w[i] * 0.5 + c * c; } return w; }
fn pair(x: f64[]) -> (f64, f64[]) { let y = copy(x); y[1] = y[1] * y[0]; return (y[1], y); }
fn cell(x: f64) -> ref<f64> { return ref(x * x); }
";
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let program = Program::compile("seeds.mcir", src).unwrap().with_engine(engine);
        let w = Value::vector(vec![0.1, 0.2, 0.3]);
        let out = program.function("relax").unwrap().vjp(&[w.clone(), Value::F64(0.3)], None, &[]).unwrap();
        assert_eq!(out.value.unwrap().to_f64_vec().unwrap(), vec![0.14, 0.19, 0.24], "{engine:?}");
        assert_eq!(out.gradient[0].to_f64_vec().unwrap(), vec![0.0; 3], "{engine:?}");
        assert_eq!(out.gradient[1].as_f64(), Some(0.0), "{engine:?}");
        assert_eq!(w.to_f64_vec().unwrap(), vec![0.1, 0.2, 0.3], "{engine:?}: restored");
        let out = program.function("pair").unwrap().vjp(&[Value::vector(vec![2.0, 3.0])], None, &[]).unwrap();
        assert_eq!(out.gradient[0].to_f64_vec().unwrap(), vec![0.0, 0.0], "{engine:?}");
        let out = program.function("cell").unwrap().vjp(&[Value::F64(3.0)], None, &[]).unwrap();
        assert_eq!(out.gradient[0].as_f64(), Some(0.0), "{engine:?}");
    }
}

#[test]
fn an_array_inside_an_argument_and_passed_beside_it_has_one_shadow() {
    // `f(S { a: p, c }, p)` from the API: the record's field and the array argument are
    // one array, so they share a shadow, and each reports the array's whole gradient,
    // as `g`, which makes that call itself, computes it.
    let src = "
struct S { a: f64[], c: f64 }
fn f(s: S, v: f64[]) -> f64 {
    for t in 0..3 { for i in 0..len(v) { v[i] = 0.5 * v[i] + s.c * 0.1; } }
    let mut e = 0.0;
    for i in 0..len(v) { e += s.a[i] * s.a[i] * s.c; }
    return e;
}
fn g(p: f64[]) -> f64 { return f(S { a: p, c: 0.5 }, p); }
";
    let start = vec![0.3, -0.7, 1.1, 0.45];
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let program = Program::compile("inside.mcir", src).unwrap().with_engine(engine);
        let a = Value::vector(start.clone());
        let s = Value::Agg(vec![a.clone(), Value::F64(0.5)].into());
        let (value, grad) = program.function("f").unwrap().value_and_gradient(&[s, a.clone()]).unwrap();
        assert_eq!(a.to_f64_vec().unwrap(), start, "{engine:?}: restored");
        let (expected, expected_grad) =
            program.function("g").unwrap().value_and_gradient(&[Value::vector(start.clone())]).unwrap();
        assert_eq!(value, expected, "{engine:?}");
        let expected_grad = expected_grad[0].to_f64_vec().unwrap();
        let Value::Agg(fields) = &grad[0] else { panic!("a record's tangent") };
        for g in [fields[0].to_f64_vec().unwrap(), grad[1].to_f64_vec().unwrap()] {
            for (x, e) in g.iter().zip(&expected_grad) {
                assert!(
                    (x - e).abs() <= 1e-12 * (1.0 + e.abs()),
                    "{engine:?}: {g:?} against {expected_grad:?}"
                );
            }
        }
    }
}

#[test]
fn a_cotangent_of_the_wrong_type_is_an_error() {
    // Native code reads what it is given: a seed that is not the result's cotangent
    // (a number for a cell, for an array) must be refused before it runs, on both engines.
    let src =
        "fn cell(x: f64) -> ref<f64> { return ref(x * x); }\nfn arr(x: f64[]) -> f64[] { return x * 2.0; }";
    for engine in [mcir::Engine::Jit, mcir::Engine::Interpreter] {
        let program = Program::compile("seeds.mcir", src).unwrap().with_engine(engine);
        let cell = program.function("cell").unwrap().vjp(&[Value::F64(3.0)], Some(Value::F64(1.0)), &[]);
        assert!(matches!(&cell, Err(ApiError::Args(m)) if m.contains("ref<f64>")), "{engine:?}: {cell:?}");
        let arr = program.function("arr").unwrap();
        let x = Value::vector(vec![1.0, 2.0]);
        let wrong = arr.vjp(std::slice::from_ref(&x), Some(Value::F64(1.0)), &[]);
        assert!(matches!(&wrong, Err(ApiError::Args(m)) if m.contains("f64[]")), "{engine:?}: {wrong:?}");
        let short = arr.vjp(std::slice::from_ref(&x), Some(Value::vector(vec![1.0])), &[]);
        assert!(matches!(&short, Err(ApiError::Runtime(_))), "{engine:?}: {short:?}");
        let seed_args = [Some(Value::F64(1.0))];
        let wrong = arr.vjp(std::slice::from_ref(&x), Some(Value::vector(vec![1.0, 1.0])), &seed_args);
        assert!(matches!(&wrong, Err(ApiError::Args(_))), "{engine:?}: {wrong:?}");
    }
}
