//! Second order and dense derivatives: Hessians of functions with known Hessians
//! (`tests/second_order/`) against their analytic values, Jacobians by forward and by
//! reverse sweeps against each other, and the number of forward sweeps a Jacobian takes.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use mcir::{Engine, Limits, Program, Val};
use support::*;

fn program(name: &str, engine: Engine) -> Program {
    let path = root().join("tests/second_order").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    Program::compile(&rel(&path), &text).unwrap().with_engine(engine)
}

fn vector(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.normal()).collect()
}

/// Compares a computed Hessian with the analytic one to 1e-10 (relative to the entry's
/// size, at least 1).
fn assert_hessian(what: &str, got: &[Vec<f64>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: row {i}");
        for (j, (a, b)) in g.iter().zip(w).enumerate() {
            assert!((a - b).abs() <= 1e-10 * b.abs().max(1.0), "{what}: H[{i}][{j}] = {a}, analytically {b}");
        }
    }
}

const ENGINES: [Engine; 2] = [Engine::Jit, Engine::Interpreter];

#[test]
fn hessian_of_a_quadratic_form() {
    let mut rng = Rng(11);
    for engine in ENGINES {
        let p = program("quadratic.mcir", engine);
        let f = p.entry(None).unwrap();
        for n in [1, 3, 5] {
            let a = vector(&mut rng, n * n);
            let (b, x) = (vector(&mut rng, n), vector(&mut rng, n));
            let args = vec![
                Val::f64_array(a.clone(), &[n, n]).unwrap(),
                Val::vector(b.clone()),
                Val::vector(x.clone()),
            ];
            let h = p.hessian(f, &args, &Limits::default()).unwrap();
            // Inputs in order: A (row-major), b, x.
            let (ia, ib, ix) =
                (|i: usize, j: usize| i * n + j, |i: usize| n * n + i, |i: usize| n * n + n + i);
            let m = n * n + 2 * n;
            let mut want = vec![vec![0.0; m]; m];
            for i in 0..n {
                for k in 0..n {
                    want[ix(i)][ix(k)] = 0.5 * (a[i * n + k] + a[k * n + i]);
                    // d²f / dA[i, j] dx[k] = (δik x[j] + x[i] δjk) / 2
                    for j in 0..n {
                        let v = 0.5 * (if i == k { x[j] } else { 0.0 } + if j == k { x[i] } else { 0.0 });
                        want[ia(i, j)][ix(k)] += v;
                        want[ix(k)][ia(i, j)] += v;
                    }
                }
                want[ib(i)][ix(i)] = 1.0;
                want[ix(i)][ib(i)] = 1.0;
            }
            assert_hessian(&format!("quadratic n={n} {engine:?}"), &h.rows, &want);
        }
    }
}

#[test]
fn hessian_of_rosenbrock() {
    let mut rng = Rng(12);
    for engine in ENGINES {
        let p = program("rosenbrock.mcir", engine);
        let f = p.entry(None).unwrap();
        for n in [2, 4, 7] {
            let x = vector(&mut rng, n);
            let h = p.hessian(f, &[Val::vector(x.clone())], &Limits::default()).unwrap();
            let mut want = vec![vec![0.0; n]; n];
            for i in 0..n - 1 {
                // 100 (x[i+1] - x[i]²)² + (1 - x[i])²
                want[i][i] += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
                want[i][i + 1] += -400.0 * x[i];
                want[i + 1][i] += -400.0 * x[i];
                want[i + 1][i + 1] += 200.0;
            }
            assert_hessian(&format!("rosenbrock n={n} {engine:?}"), &h.rows, &want);
        }
    }
}

#[test]
fn hessian_of_logsumexp() {
    let mut rng = Rng(13);
    for engine in ENGINES {
        let p = program("logsumexp.mcir", engine);
        let f = p.entry(None).unwrap();
        for n in [1, 3, 6] {
            let x = vector(&mut rng, n);
            let h = p.hessian(f, &[Val::vector(x.clone())], &Limits::default()).unwrap();
            let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = x.iter().map(|v| (v - m).exp()).sum();
            let sm: Vec<f64> = x.iter().map(|v| (v - m).exp() / z).collect();
            let want: Vec<Vec<f64>> = (0..n)
                .map(|i| (0..n).map(|j| if i == j { sm[i] } else { 0.0 } - sm[i] * sm[j]).collect())
                .collect();
            assert_hessian(&format!("logsumexp n={n} {engine:?}"), &h.rows, &want);
            // One HVP agrees with the Hessian times the direction.
            let v = vector(&mut rng, n);
            let out =
                p.hvp(f, &[Val::vector(x.clone())], &[Val::vector(v.clone())], &Limits::default()).unwrap();
            let hv = out.hvp[0].to_f64_vec().unwrap();
            for i in 0..n {
                let expect: f64 = (0..n).map(|j| want[i][j] * v[j]).sum();
                assert!((hv[i] - expect).abs() <= 1e-10, "HVP[{i}] = {}, H v = {expect}", hv[i]);
            }
        }
    }
}

/// A Jacobian of 64 inputs takes ⌈64 / width⌉ forward sweeps, and agrees with the one
/// reverse sweeps give.
#[test]
fn a_jacobian_of_64_inputs_takes_64_over_width_forward_sweeps() {
    let text = "fn main(x: f64[]) -> f64[] {\n    let y = sin(x) * x;\n    y[0] += x[63] * x[1];\n    return y;\n}\n";
    let mut rng = Rng(14);
    let x = vector(&mut rng, 64);
    for engine in ENGINES {
        let p = Program::compile("jac.mcir", text).unwrap().with_engine(engine);
        let f = p.entry(None).unwrap();
        let args = [Val::vector(x.clone())];
        let fwd = p.jacobian(f, &args, &Limits::default()).unwrap();
        assert_eq!(fwd.sweep, mcir::Sweep::Forward);
        assert_eq!(fwd.sweeps, 64usize.div_ceil(mcir::dense::JACOBIAN_WIDTH));
        for width in [1, 3, 16] {
            let j = p.jacobian_with(f, &args, Some(mcir::Sweep::Forward), width, &Limits::default()).unwrap();
            assert_eq!(j.sweeps, 64usize.div_ceil(width), "width {width}");
            assert_eq!(j.rows, fwd.rows, "width {width}");
        }
        let rev = p.jacobian_with(f, &args, Some(mcir::Sweep::Reverse), 1, &Limits::default()).unwrap();
        assert_eq!(rev.sweeps, 64);
        for (i, (a, b)) in fwd.rows.iter().zip(&rev.rows).enumerate() {
            for (k, (u, v)) in a.iter().zip(b).enumerate() {
                assert!((u - v).abs() <= 1e-12 * v.abs().max(1.0), "J[{i}][{k}]: forward {u}, reverse {v}");
            }
        }
        // The analytic Jacobian.
        for (i, row) in fwd.rows.iter().enumerate() {
            for (k, &got) in row.iter().enumerate() {
                let mut want = if i == k { x[i].cos() * x[i] + x[i].sin() } else { 0.0 };
                if i == 0 && k == 63 {
                    want += x[1];
                }
                if i == 0 && k == 1 {
                    want += x[63];
                }
                assert!((got - want).abs() <= 1e-12, "J[{i}][{k}] = {got}, analytically {want}");
            }
        }
    }
}

/// `mcc jacobian`, `mcc hessian` and `mcc hvp` print what CLI.md describes.
#[test]
fn dense_commands_print_their_json() {
    let p = root().join("tests/second_order/rosenbrock.mcir");
    let p = p.to_str().unwrap();
    for engine in [&[][..], &["--interp"][..]] {
        let run = |words: &[&str]| {
            let mut w = words.to_vec();
            w.extend(engine);
            let out = mcc(&w);
            assert_eq!(out.code, 0, "{}", out.stderr);
            out.stdout
        };
        assert_eq!(
            run(&["hvp", p, "--args", "[[1.5, -0.5, 2.0]]", "--tangent", "[[1, 0, 0]]"]).trim(),
            r#"{"value": 1065.0, "gradient": [[1651.0, -203.0, 350.0]], "hvp": [[2902.0, -600.0, 0.0]]}"#
        );
        assert_eq!(
            run(&["hessian", p, "--args", "[[1.5, -0.5, 2.0]]"]).trim(),
            r#"{"value": 1065.0, "gradient": [[1651.0, -203.0, 350.0]], "hessian": [[2902.0, -600.0, 0.0], [-600.0, -298.0, 200.0], [0.0, 200.0, 200.0]]}"#
        );
        assert_eq!(
            run(&["jacobian", p, "--args", "[[1.5, -0.5, 2.0]]"]).trim(),
            r#"{"value": 1065.0, "jacobian": [[1651.0, -203.0, 350.0]]}"#
        );
    }
    let out = mcc(&["hvp", p, "--args", "[[1.5, -0.5, 2.0]]", "--tangent", "[[1, 0]]"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let map = root().join("tests/programs/elementwise_math_map.mcir");
    let out = mcc(&["hessian", map.to_str().unwrap(), "--args", "[[1.0, 4.0, 0.25]]"]);
    assert_eq!(out.code, 2, "a Hessian needs an f64 result: {}", out.stderr);
    assert!(out.stderr.contains("returning f64"), "{}", out.stderr);
}

#[test]
fn hessian_of_a_recursive_function() {
    // p(x, 0) = x, p(x, n) = sin(p(x, n - 1)) x: its reverse pass keeps tapes of its own
    // type on a stack, and forward mode goes through them. The value and its first and
    // second derivatives in x, by the recursion itself.
    let analytic = |x: f64, n: i64| {
        let (mut p, mut d1, mut d2) = (x, 1.0, 0.0);
        for _ in 0..n {
            let (s, c) = p.sin_cos();
            let next = (s * x, c * d1 * x + s, -s * d1 * d1 * x + c * d2 * x + 2.0 * c * d1);
            (p, d1, d2) = next;
        }
        (p, d1, d2)
    };
    for engine in ENGINES {
        let p = program("recursive.mcir", engine);
        let f = p.entry(None).unwrap();
        for (x, n) in [(0.5, 0), (0.5, 3), (-1.25, 5), (2.0, 8)] {
            let args = [Val::F64(x), Val::I64(n)];
            let (v, d1, d2) = analytic(x, n);
            let h = p.hessian(f, &args, &Limits::default()).unwrap();
            assert_hessian(&format!("p({x}, {n}) {engine:?}"), &h.rows, &[vec![d2]]);
            let out = p.hvp(f, &args, &[Val::F64(1.0), Val::Unit], &Limits::default()).unwrap();
            assert!((out.value - v).abs() <= 1e-12 * v.abs().max(1.0), "value {} against {v}", out.value);
            let (Val::F64(g), Val::F64(hv)) = (&out.gradient[0], &out.hvp[0]) else { panic!("{out:?}") };
            assert!((g - d1).abs() <= 1e-10 * d1.abs().max(1.0), "gradient {g} against {d1}");
            assert!((hv - d2).abs() <= 1e-10 * d2.abs().max(1.0), "HVP {hv} against {d2}");
        }
    }
}

#[test]
fn hessian_through_a_checkpointed_loop() {
    // Checkpointed and plain loops give the same Hessian (the checkpoint's reverse pass
    // recomputes steps, and forward mode goes through it like any other code).
    let args = "[0.4, 0.95, 0.3, 3000]";
    let get = |name: &str| {
        let p = root().join(format!("tests/checkpoint/{name}.mcir"));
        let out = mcc(&["hessian", p.to_str().unwrap(), "--args", args]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let j: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        j["hessian"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap_or(0.0)).collect())
            .collect::<Vec<Vec<f64>>>()
    };
    let (a, b) = (get("recurrence"), get("plain"));
    assert_hessian("checkpointed against plain", &a, &b);
}
