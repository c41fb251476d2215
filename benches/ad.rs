//! The benchmark suite: each program of `benches/programs/` on native code (primal and
//! gradient), against the same function and its gradient written by hand in Rust.
//! `cargo bench -p mcir --bench ad`; `docs/performance.md` has the figures.

// The baselines index arrays in loops on purpose, as the `.mcir` programs do, and pass
// matrix shapes explicitly. A benchmark whose setup fails should stop where it fails.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments, clippy::unwrap_used, clippy::expect_used)]

use divan::Bencher;
use mcir::{Arg, GradSlot, Prepared, Program};
use std::sync::OnceLock;

fn main() {
    check_baselines();
    divan::main();
}

fn program_path(name: &str) -> String {
    format!("{}/../../benches/programs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The arguments of a benchmark, as JSON numbers and arrays.
fn args_json(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(program_path(&format!("{name}.json"))).expect("benchmark arguments");
    serde_json::from_str(&text).expect("JSON arguments")
}

fn vector(j: &serde_json::Value) -> Vec<f64> {
    j.as_array().expect("array").iter().map(|x| x.as_f64().expect("number")).collect()
}

fn matrix(j: &serde_json::Value) -> (Vec<f64>, usize, usize) {
    let rows: Vec<Vec<f64>> = j.as_array().expect("rows").iter().map(vector).collect();
    let (n, m) = (rows.len(), rows[0].len());
    (rows.concat(), n, m)
}

fn program(name: &str) -> &'static Program {
    static PROGRAMS: OnceLock<std::sync::Mutex<std::collections::HashMap<String, &'static Program>>> =
        OnceLock::new();
    let map = PROGRAMS.get_or_init(Default::default);
    let mut map = map.lock().expect("lock");
    map.entry(name.to_string()).or_insert_with(|| {
        Box::leak(Box::new(Program::compile_file(program_path(&format!("{name}.mcir"))).expect("compiles")))
    })
}

fn prepared(name: &str) -> Prepared<'static> {
    let mut p = program(name).function(name).expect("function").prepare().expect("prepare");
    p.compile_gradient().expect("gradient");
    p
}

// ---- hand-written baselines ----

fn sum_primal(x: &[f64]) -> f64 {
    x.iter().sum()
}

fn sum_gradient(x: &[f64], g: &mut [f64]) -> f64 {
    g.fill(1.0);
    x.iter().sum()
}

fn sum_sin_primal(x: &[f64]) -> f64 {
    x.iter().map(|v| v.sin()).sum()
}

fn sum_sin_gradient(x: &[f64], g: &mut [f64]) -> f64 {
    let mut s = 0.0;
    for (gi, &xi) in g.iter_mut().zip(x) {
        s += xi.sin();
        *gi = xi.cos();
    }
    s
}

/// C = A B (n×k times k×m), returns Σ C².
fn matmul_primal(a: &[f64], b: &[f64], n: usize, k: usize, m: usize, c: &mut [f64]) -> f64 {
    for i in 0..n {
        for j in 0..m {
            let mut s = 0.0;
            for l in 0..k {
                s += a[i * k + l] * b[l * m + j];
            }
            c[i * m + j] = s;
        }
    }
    c.iter().map(|v| v * v).sum()
}

fn matmul_gradient(
    a: &[f64],
    b: &[f64],
    n: usize,
    k: usize,
    m: usize,
    c: &mut [f64],
    ga: &mut [f64],
    gb: &mut [f64],
) -> f64 {
    let total = matmul_primal(a, b, n, k, m, c);
    // dC = 2C; dA = dC Bᵀ; dB = Aᵀ dC.
    for i in 0..n {
        for l in 0..k {
            let mut s = 0.0;
            for j in 0..m {
                s += 2.0 * c[i * m + j] * b[l * m + j];
            }
            ga[i * k + l] = s;
        }
    }
    gb.fill(0.0);
    for i in 0..n {
        for l in 0..k {
            let ail = a[i * k + l];
            for j in 0..m {
                gb[l * m + j] += ail * 2.0 * c[i * m + j];
            }
        }
    }
    total
}

struct Mlp {
    x: Vec<f64>,
    w1: Vec<f64>,
    b1: Vec<f64>,
    w2: Vec<f64>,
    b2: Vec<f64>,
    t: Vec<f64>,
    n: usize,
}

fn mlp_data() -> Mlp {
    let j = args_json("mlp");
    let (w1, n, _) = matrix(&j[1]);
    let (w2, _, _) = matrix(&j[3]);
    Mlp { x: vector(&j[0]), w1, b1: vector(&j[2]), w2, b2: vector(&j[4]), t: vector(&j[5]), n }
}

/// The weight decay term of the MLP's loss.
fn decay(d: &Mlp) -> f64 {
    0.0001 * (d.w1.iter().map(|v| v * v).sum::<f64>() + d.w2.iter().map(|v| v * v).sum::<f64>())
}

fn mlp_primal(d: &Mlp, h: &mut [f64]) -> f64 {
    let n = d.n;
    for i in 0..n {
        let z: f64 = d.b1[i] + (0..n).map(|j| d.w1[i * n + j] * d.x[j]).sum::<f64>();
        h[i] = z.tanh();
    }
    let mut loss = 0.0;
    for i in 0..n {
        let y: f64 = d.b2[i] + (0..n).map(|j| d.w2[i * n + j] * h[j]).sum::<f64>();
        let e = y - d.t[i];
        loss += e * e;
    }
    0.5 * loss + decay(d)
}

/// Gradients with respect to x, w1, b1, w2, b2, t (in that order).
struct MlpGrad {
    h: Vec<f64>,
    dy: Vec<f64>,
    dz: Vec<f64>,
    x: Vec<f64>,
    w1: Vec<f64>,
    b1: Vec<f64>,
    w2: Vec<f64>,
    b2: Vec<f64>,
    t: Vec<f64>,
}

fn mlp_gradient(d: &Mlp, g: &mut MlpGrad) -> f64 {
    let n = d.n;
    for i in 0..n {
        let z: f64 = d.b1[i] + (0..n).map(|j| d.w1[i * n + j] * d.x[j]).sum::<f64>();
        g.h[i] = z.tanh();
    }
    let mut loss = 0.0;
    for i in 0..n {
        let y: f64 = d.b2[i] + (0..n).map(|j| d.w2[i * n + j] * g.h[j]).sum::<f64>();
        g.dy[i] = y - d.t[i];
        loss += g.dy[i] * g.dy[i];
    }
    for i in 0..n {
        g.b2[i] = g.dy[i];
        g.t[i] = -g.dy[i];
        for j in 0..n {
            g.w2[i * n + j] = g.dy[i] * g.h[j] + 0.0002 * d.w2[i * n + j];
        }
    }
    for j in 0..n {
        let dh: f64 = (0..n).map(|i| d.w2[i * n + j] * g.dy[i]).sum();
        g.dz[j] = dh * (1.0 - g.h[j] * g.h[j]);
    }
    for i in 0..n {
        g.b1[i] = g.dz[i];
        for j in 0..n {
            g.w1[i * n + j] = g.dz[i] * d.x[j] + 0.0002 * d.w1[i * n + j];
        }
    }
    for j in 0..n {
        g.x[j] = (0..n).map(|i| d.w1[i * n + j] * g.dz[i]).sum();
    }
    0.5 * loss + decay(d)
}

fn logsumexp_primal(x: &[f64]) -> f64 {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

fn logsumexp_gradient(x: &[f64], g: &mut [f64]) -> f64 {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut s = 0.0;
    for (gi, &xi) in g.iter_mut().zip(x) {
        *gi = (xi - m).exp();
        s += *gi;
    }
    let inv = 1.0 / s;
    g.iter_mut().for_each(|v| *v *= inv);
    m + s.ln()
}

/// Lotka-Volterra with RK4; inputs (alpha, beta, delta, gamma, x0, y0, h).
fn rk4_primal(p: [f64; 7], steps: usize) -> f64 {
    let [a, b, d, c, mut x, mut y, h] = p;
    let f = |x: f64, y: f64| (a * x - b * x * y, d * x * y - c * y);
    for _ in 0..steps {
        let k1 = f(x, y);
        let k2 = f(x + 0.5 * h * k1.0, y + 0.5 * h * k1.1);
        let k3 = f(x + 0.5 * h * k2.0, y + 0.5 * h * k2.1);
        let k4 = f(x + h * k3.0, y + h * k3.1);
        x += h / 6.0 * (k1.0 + 2.0 * k2.0 + 2.0 * k3.0 + k4.0);
        y += h / 6.0 * (k1.1 + 2.0 * k2.1 + 2.0 * k3.1 + k4.1);
    }
    2.0 * x + y
}

/// The gradient by forward sensitivities: the state carries its derivative with respect
/// to each of the 7 inputs (a common hand-written approach for a small ODE).
fn rk4_gradient(p: [f64; 7], steps: usize, grad: &mut [f64; 7]) -> f64 {
    type D = (f64, [f64; 7]);
    let unit = |k: usize, v: f64| -> D {
        let mut t = [0.0; 7];
        t[k] = 1.0;
        (v, t)
    };
    let add = |a: D, b: D| -> D { (a.0 + b.0, std::array::from_fn(|i| a.1[i] + b.1[i])) };
    let sub = |a: D, b: D| -> D { (a.0 - b.0, std::array::from_fn(|i| a.1[i] - b.1[i])) };
    let mul = |a: D, b: D| -> D { (a.0 * b.0, std::array::from_fn(|i| a.1[i] * b.0 + a.0 * b.1[i])) };
    let scale = |s: f64, a: D| -> D { (s * a.0, std::array::from_fn(|i| s * a.1[i])) };
    let (a, b, d, c) = (unit(0, p[0]), unit(1, p[1]), unit(2, p[2]), unit(3, p[3]));
    let (mut x, mut y, h) = (unit(4, p[4]), unit(5, p[5]), unit(6, p[6]));
    let f = |x: D, y: D| -> (D, D) { (sub(mul(a, x), mul(mul(b, x), y)), sub(mul(mul(d, x), y), mul(c, y))) };
    for _ in 0..steps {
        let k1 = f(x, y);
        let hh = scale(0.5, h);
        let k2 = f(add(x, mul(hh, k1.0)), add(y, mul(hh, k1.1)));
        let k3 = f(add(x, mul(hh, k2.0)), add(y, mul(hh, k2.1)));
        let k4 = f(add(x, mul(h, k3.0)), add(y, mul(h, k3.1)));
        let h6 = scale(1.0 / 6.0, h);
        let sx = add(add(k1.0, scale(2.0, k2.0)), add(scale(2.0, k3.0), k4.0));
        let sy = add(add(k1.1, scale(2.0, k2.1)), add(scale(2.0, k3.1), k4.1));
        x = add(x, mul(h6, sx));
        y = add(y, mul(h6, sy));
    }
    let out = add(scale(2.0, x), y);
    *grad = out.1;
    out.0
}

fn rk4_inputs() -> ([f64; 7], usize) {
    let j = args_json("rk4");
    let v: Vec<f64> = j.as_array().expect("args")[..7].iter().map(|x| x.as_f64().expect("number")).collect();
    (std::array::from_fn(|i| v[i]), j[7].as_u64().expect("steps") as usize)
}

/// The arguments of `rk4.mcir`: the seven inputs and the step count.
fn rk4_args(p: &[f64; 7], steps: usize) -> [Arg<'static>; 8] {
    let [a, b, d, c, x, y, h] = p.map(Arg::F64);
    [a, b, d, c, x, y, h, Arg::I64(steps as i64)]
}

/// Where the gradient of `rk4.mcir` goes: the seven inputs, not the step count.
fn rk4_slots(g: &mut [f64; 7]) -> [GradSlot<'_>; 8] {
    let [g0, g1, g2, g3, g4, g5, g6] = g;
    [
        GradSlot::F64(g0),
        GradSlot::F64(g1),
        GradSlot::F64(g2),
        GradSlot::F64(g3),
        GradSlot::F64(g4),
        GradSlot::F64(g5),
        GradSlot::F64(g6),
        GradSlot::Skip,
    ]
}

/// The hand-written gradients agree with mcir's, so the comparison is of equal work.
fn check_baselines() {
    let close = |a: &[f64], b: &[f64], what: &str| {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-8 * (1.0 + x.abs()), "{what}: hand-written {x} vs mcir {y}");
        }
    };
    for name in ["sum_builtin", "sum_loop", "sum_sin", "sum_sin_loop", "logsumexp"] {
        let mut x = vector(&args_json(name)[0]);
        let n = x.len();
        let mut g = vec![0.0; n];
        let v = prepared(name)
            .value_and_gradient(&mut [Arg::F64Array(&mut x, &[n])], &mut [GradSlot::Array(&mut g)])
            .expect("gradient");
        let mut h = vec![0.0; n];
        let hv = match name {
            "sum_builtin" | "sum_loop" => sum_gradient(&x, &mut h),
            "logsumexp" => logsumexp_gradient(&x, &mut h),
            _ => sum_sin_gradient(&x, &mut h),
        };
        close(&[hv], &[v], name);
        close(&h, &g, name);
    }
    for name in ["matmul", "matmul_rule", "matmul_builtin"] {
        let j = args_json(name);
        let ((mut x, n, _), (mut y, _, _)) = (matrix(&j[0]), matrix(&j[1]));
        let (mut gx, mut gy) = (vec![0.0; n * n], vec![0.0; n * n]);
        let v = prepared(name)
            .value_and_gradient(
                &mut [Arg::F64Array(&mut x, &[n, n]), Arg::F64Array(&mut y, &[n, n])],
                &mut [GradSlot::Array(&mut gx), GradSlot::Array(&mut gy)],
            )
            .expect("gradient");
        let (mut c, mut hx, mut hy) = (vec![0.0; n * n], vec![0.0; n * n], vec![0.0; n * n]);
        let hv = matmul_gradient(&x, &y, n, n, n, &mut c, &mut hx, &mut hy);
        close(&[hv], &[v], name);
        close(&hx, &gx, name);
        close(&hy, &gy, name);
    }
    let (p, steps) = rk4_inputs();
    let mut hand = [0.0; 7];
    let hv = rk4_gradient(p, steps, &mut hand);
    let mut gs = [0.0; 7];
    let v = prepared("rk4")
        .value_and_gradient(&mut rk4_args(&p, steps), &mut rk4_slots(&mut gs))
        .expect("gradient");
    close(&[hv], &[v], "rk4");
    close(&hand, &gs, "rk4");
}

macro_rules! vector_bench {
    ($module:ident, $name:literal, $primal:ident, $gradient:ident) => {
        mod $module {
            use super::*;

            #[divan::bench]
            fn mcir_primal(b: Bencher) {
                let mut p = prepared($name);
                let mut x = vector(&args_json($name)[0]);
                let n = x.len();
                b.bench_local(|| p.call(&mut [Arg::F64Array(&mut x, &[n])]).expect("call"));
            }

            #[divan::bench]
            fn mcir_gradient(b: Bencher) {
                let mut p = prepared($name);
                let mut x = vector(&args_json($name)[0]);
                let n = x.len();
                let mut g = vec![0.0; n];
                b.bench_local(|| {
                    p.value_and_gradient(&mut [Arg::F64Array(&mut x, &[n])], &mut [GradSlot::Array(&mut g)])
                        .expect("gradient")
                });
            }

            #[divan::bench]
            fn rust_primal(b: Bencher) {
                let x = vector(&args_json($name)[0]);
                b.bench_local(|| $primal(divan::black_box(&x)));
            }

            #[divan::bench]
            fn rust_gradient(b: Bencher) {
                let x = vector(&args_json($name)[0]);
                let mut g = vec![0.0; x.len()];
                b.bench_local(|| $gradient(divan::black_box(&x), &mut g));
            }
        }
    };
}

vector_bench!(sum_builtin, "sum_builtin", sum_primal, sum_gradient);
vector_bench!(sum_loop, "sum_loop", sum_primal, sum_gradient);
vector_bench!(sum_sin, "sum_sin", sum_sin_primal, sum_sin_gradient);
vector_bench!(sum_sin_loop, "sum_sin_loop", sum_sin_primal, sum_sin_gradient);
vector_bench!(logsumexp, "logsumexp", logsumexp_primal, logsumexp_gradient);

macro_rules! matrix_bench {
    ($module:ident, $name:literal) => {
        mod $module {
            use super::*;

            fn inputs() -> (Vec<f64>, Vec<f64>, usize) {
                let j = args_json($name);
                let (a, n, _) = matrix(&j[0]);
                let (b, _, _) = matrix(&j[1]);
                (a, b, n)
            }

            #[divan::bench]
            fn mcir_primal(b: Bencher) {
                let mut p = prepared($name);
                let (mut x, mut y, n) = inputs();
                b.bench_local(|| {
                    p.call(&mut [Arg::F64Array(&mut x, &[n, n]), Arg::F64Array(&mut y, &[n, n])])
                        .expect("call")
                });
            }

            #[divan::bench]
            fn mcir_gradient(b: Bencher) {
                let mut p = prepared($name);
                let (mut x, mut y, n) = inputs();
                let (mut gx, mut gy) = (vec![0.0; n * n], vec![0.0; n * n]);
                b.bench_local(|| {
                    p.value_and_gradient(
                        &mut [Arg::F64Array(&mut x, &[n, n]), Arg::F64Array(&mut y, &[n, n])],
                        &mut [GradSlot::Array(&mut gx), GradSlot::Array(&mut gy)],
                    )
                    .expect("gradient")
                });
            }

            #[divan::bench]
            fn rust_primal(b: Bencher) {
                let (x, y, n) = inputs();
                let mut c = vec![0.0; n * n];
                b.bench_local(|| matmul_primal(divan::black_box(&x), &y, n, n, n, &mut c));
            }

            #[divan::bench]
            fn rust_gradient(b: Bencher) {
                let (x, y, n) = inputs();
                let (mut c, mut gx, mut gy) = (vec![0.0; n * n], vec![0.0; n * n], vec![0.0; n * n]);
                b.bench_local(|| {
                    matmul_gradient(divan::black_box(&x), &y, n, n, n, &mut c, &mut gx, &mut gy)
                });
            }
        }
    };
}

// The product with loops and its derived rule; the same loops with a hand-written rule
// (two matrix products); and the `matmul` builtin.
matrix_bench!(matmul, "matmul");
matrix_bench!(matmul_rule, "matmul_rule");
matrix_bench!(matmul_builtin, "matmul_builtin");

mod mlp {
    use super::*;

    #[divan::bench]
    fn mcir_primal(b: Bencher) {
        let mut p = prepared("mlp");
        let mut d = mlp_data();
        let n = d.n;
        b.bench_local(|| {
            p.call(&mut [
                Arg::F64Array(&mut d.x, &[n]),
                Arg::F64Array(&mut d.w1, &[n, n]),
                Arg::F64Array(&mut d.b1, &[n]),
                Arg::F64Array(&mut d.w2, &[n, n]),
                Arg::F64Array(&mut d.b2, &[n]),
                Arg::F64Array(&mut d.t, &[n]),
            ])
            .expect("call")
        });
    }

    #[divan::bench]
    fn mcir_gradient(b: Bencher) {
        let mut p = prepared("mlp");
        let mut d = mlp_data();
        let n = d.n;
        let mut g: Vec<Vec<f64>> =
            vec![vec![0.0; n], vec![0.0; n * n], vec![0.0; n], vec![0.0; n * n], vec![0.0; n], vec![0.0; n]];
        b.bench_local(|| {
            let [g0, g1, g2, g3, g4, g5] = &mut g[..] else { unreachable!() };
            p.value_and_gradient(
                &mut [
                    Arg::F64Array(&mut d.x, &[n]),
                    Arg::F64Array(&mut d.w1, &[n, n]),
                    Arg::F64Array(&mut d.b1, &[n]),
                    Arg::F64Array(&mut d.w2, &[n, n]),
                    Arg::F64Array(&mut d.b2, &[n]),
                    Arg::F64Array(&mut d.t, &[n]),
                ],
                &mut [
                    GradSlot::Array(g0),
                    GradSlot::Array(g1),
                    GradSlot::Array(g2),
                    GradSlot::Array(g3),
                    GradSlot::Array(g4),
                    GradSlot::Array(g5),
                ],
            )
            .expect("gradient")
        });
    }

    #[divan::bench]
    fn rust_primal(b: Bencher) {
        let d = mlp_data();
        let mut h = vec![0.0; d.n];
        b.bench_local(|| mlp_primal(divan::black_box(&d), &mut h));
    }

    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let d = mlp_data();
        let n = d.n;
        let z = |k| vec![0.0; k];
        let mut g = MlpGrad {
            h: z(n),
            dy: z(n),
            dz: z(n),
            x: z(n),
            w1: z(n * n),
            b1: z(n),
            w2: z(n * n),
            b2: z(n),
            t: z(n),
        };
        b.bench_local(|| mlp_gradient(divan::black_box(&d), &mut g));
    }
}

mod rk4 {
    use super::*;

    #[divan::bench]
    fn mcir_primal(b: Bencher) {
        let mut p = prepared("rk4");
        let (inputs, steps) = rk4_inputs();
        b.bench_local(|| p.call(&mut rk4_args(&inputs, steps)).expect("call"));
    }

    #[divan::bench]
    fn mcir_gradient(b: Bencher) {
        let mut p = prepared("rk4");
        let (inputs, steps) = rk4_inputs();
        let mut g = [0.0; 7];
        b.bench_local(|| {
            p.value_and_gradient(&mut rk4_args(&inputs, steps), &mut rk4_slots(&mut g)).expect("gradient")
        });
    }

    #[divan::bench]
    fn rust_primal(b: Bencher) {
        let (inputs, steps) = rk4_inputs();
        b.bench_local(|| rk4_primal(divan::black_box(inputs), steps));
    }

    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let (inputs, steps) = rk4_inputs();
        let mut g = [0.0; 7];
        b.bench_local(|| rk4_gradient(divan::black_box(inputs), steps, &mut g));
    }
}

/// Compile latency: source text to native code for the function and its gradient
/// (what `mcc bench` reports as `compile_ms`), for the largest program and a small one.
mod compile {
    use super::program_path;
    use divan::Bencher;
    use mcir::Program;

    fn compile(b: Bencher, name: &str) {
        let path = program_path(&format!("{name}.mcir"));
        let text = std::fs::read_to_string(&path).expect("benchmark program");
        b.bench_local(|| {
            let p = Program::compile(name, &text).expect("compiles");
            p.function(name).expect("function").prepare().expect("prepare").workspace_bytes()
        });
    }

    #[divan::bench]
    fn mlp(b: Bencher) {
        compile(b, "mlp");
    }

    #[divan::bench]
    fn sum_loop(b: Bencher) {
        compile(b, "sum_loop");
    }
}
