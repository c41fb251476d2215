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

/// The values of one RK4 step that its reverse pass reads: the four stage states and
/// the first three stage slopes.
#[derive(Clone, Copy, Default)]
struct Rk4Stages {
    x: [f64; 4],
    y: [f64; 4],
    kx: [f64; 3],
    ky: [f64; 3],
}

/// The gradient in reverse mode, as one writes it by hand: the forward loop keeps each
/// step's stage states and slopes, the reverse loop runs each step's adjoint backwards.
fn rk4_gradient_reverse(p: [f64; 7], steps: usize, grad: &mut [f64; 7]) -> f64 {
    let [a, b, d, c, x0, y0, h] = p;
    let f = |x: f64, y: f64| (a * x - b * x * y, d * x * y - c * y);
    let mut tape = Vec::with_capacity(steps);
    let (mut x, mut y) = (x0, y0);
    for _ in 0..steps {
        let k1 = f(x, y);
        let (x2, y2) = (x + 0.5 * h * k1.0, y + 0.5 * h * k1.1);
        let k2 = f(x2, y2);
        let (x3, y3) = (x + 0.5 * h * k2.0, y + 0.5 * h * k2.1);
        let k3 = f(x3, y3);
        let (x4, y4) = (x + h * k3.0, y + h * k3.1);
        let k4 = f(x4, y4);
        tape.push(Rk4Stages {
            x: [x, x2, x3, x4],
            y: [y, y2, y3, y4],
            kx: [k1.0, k2.0, k3.0],
            ky: [k1.1, k2.1, k3.1],
        });
        x += h / 6.0 * (k1.0 + 2.0 * k2.0 + 2.0 * k3.0 + k4.0);
        y += h / 6.0 * (k1.1 + 2.0 * k2.1 + 2.0 * k3.1 + k4.1);
    }
    // The adjoint of rhs at (x, y) for slope cotangents (u, v): adds to the parameters'
    // adjoints, returns the state's.
    let rhs_adjoint = |x: f64, y: f64, u: f64, v: f64, pb: &mut [f64; 4]| {
        pb[0] += u * x;
        pb[1] -= u * x * y;
        pb[2] += v * x * y;
        pb[3] -= v * y;
        (u * (a - b * y) + v * d * y, v * (d * x - c) - u * b * x)
    };
    let (mut xb, mut yb) = (2.0, 1.0);
    let (mut pb, mut hb) = ([0.0; 4], 0.0);
    for t in tape.iter().rev() {
        let (sx, sy) = (xb * h / 6.0, yb * h / 6.0);
        let k4 = f(t.x[3], t.y[3]);
        hb += (xb * (t.kx[0] + 2.0 * t.kx[1] + 2.0 * t.kx[2] + k4.0)
            + yb * (t.ky[0] + 2.0 * t.ky[1] + 2.0 * t.ky[2] + k4.1))
            / 6.0;
        let (x4b, y4b) = rhs_adjoint(t.x[3], t.y[3], sx, sy, &mut pb);
        hb += x4b * t.kx[2] + y4b * t.ky[2];
        let (x3b, y3b) = rhs_adjoint(t.x[2], t.y[2], 2.0 * sx + h * x4b, 2.0 * sy + h * y4b, &mut pb);
        hb += 0.5 * (x3b * t.kx[1] + y3b * t.ky[1]);
        let (x2b, y2b) =
            rhs_adjoint(t.x[1], t.y[1], 2.0 * sx + 0.5 * h * x3b, 2.0 * sy + 0.5 * h * y3b, &mut pb);
        hb += 0.5 * (x2b * t.kx[0] + y2b * t.ky[0]);
        let (x1b, y1b) = rhs_adjoint(t.x[0], t.y[0], sx + 0.5 * h * x2b, sy + 0.5 * h * y2b, &mut pb);
        xb += x4b + x3b + x2b + x1b;
        yb += y4b + y3b + y2b + y1b;
    }
    *grad = [pb[0], pb[1], pb[2], pb[3], xb, yb, hb];
    2.0 * x + y
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

/// Logistic growth with harvesting, `dx/dt = r x (1 - x/k) - q x² / (1 + x²)`, with RK4;
/// inputs (r, k, q, x0, h).
fn logistic_rhs(p: &[f64; 5], x: f64) -> f64 {
    let [r, k, q, _, _] = *p;
    r * x * (1.0 - x / k) - q * x * x / (1.0 + x * x)
}

fn logistic_primal(p: [f64; 5], steps: usize) -> f64 {
    let h = p[4];
    let mut x = p[3];
    for _ in 0..steps {
        let k1 = logistic_rhs(&p, x);
        let k2 = logistic_rhs(&p, x + 0.5 * h * k1);
        let k3 = logistic_rhs(&p, x + 0.5 * h * k2);
        let k4 = logistic_rhs(&p, x + h * k3);
        x += h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
    }
    x
}

/// The gradient in reverse mode, by hand: the forward loop keeps each step's stage
/// states and slopes, the reverse loop runs each step's adjoint backwards with the
/// right-hand side's partial derivatives written out.
fn logistic_gradient(p: [f64; 5], steps: usize, grad: &mut [f64; 5]) -> f64 {
    let [r, k, q, x0, h] = p;
    let mut tape = Vec::with_capacity(steps);
    let mut x = x0;
    for _ in 0..steps {
        let k1 = logistic_rhs(&p, x);
        let x2 = x + 0.5 * h * k1;
        let k2 = logistic_rhs(&p, x2);
        let x3 = x + 0.5 * h * k2;
        let k3 = logistic_rhs(&p, x3);
        let x4 = x + h * k3;
        let k4 = logistic_rhs(&p, x4);
        tape.push(([x, x2, x3, x4], [k1, k2, k3, k4]));
        x += h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
    }
    // The adjoint of the right-hand side at x for the slope cotangent u.
    let rhs_adjoint = |x: f64, u: f64, g: &mut [f64; 5]| {
        let s = 1.0 + x * x;
        g[0] += u * x * (1.0 - x / k);
        g[1] += u * r * x * x / (k * k);
        g[2] -= u * x * x / s;
        u * (r * (1.0 - 2.0 * x / k) - 2.0 * q * x / (s * s))
    };
    let mut xb = 1.0;
    let mut g = [0.0; 5];
    for (xs, ks) in tape.iter().rev() {
        let s = xb * h / 6.0;
        g[4] += xb * (ks[0] + 2.0 * ks[1] + 2.0 * ks[2] + ks[3]) / 6.0;
        let x4b = rhs_adjoint(xs[3], s, &mut g);
        g[4] += x4b * ks[2];
        let x3b = rhs_adjoint(xs[2], 2.0 * s + h * x4b, &mut g);
        g[4] += 0.5 * x3b * ks[1];
        let x2b = rhs_adjoint(xs[1], 2.0 * s + 0.5 * h * x3b, &mut g);
        g[4] += 0.5 * x2b * ks[0];
        let x1b = rhs_adjoint(xs[0], s + 0.5 * h * x2b, &mut g);
        xb += x4b + x3b + x2b + x1b;
    }
    g[3] = xb;
    *grad = g;
    x
}

fn logistic_inputs() -> ([f64; 5], usize) {
    let j = args_json("logistic");
    let v: Vec<f64> = j.as_array().expect("args")[..5].iter().map(|x| x.as_f64().expect("number")).collect();
    (std::array::from_fn(|i| v[i]), j[5].as_u64().expect("steps") as usize)
}

/// The arguments of `logistic.mcir`: the five inputs and the step count.
fn logistic_args(p: &[f64; 5], steps: usize) -> [Arg<'static>; 6] {
    let [r, k, q, x, h] = p.map(Arg::F64);
    [r, k, q, x, h, Arg::I64(steps as i64)]
}

/// Where the gradient of `logistic.mcir` goes: the five inputs, not the step count.
fn logistic_slots(g: &mut [f64; 5]) -> [GradSlot<'_>; 6] {
    let [g0, g1, g2, g3, g4] = g;
    [
        GradSlot::F64(g0),
        GradSlot::F64(g1),
        GradSlot::F64(g2),
        GradSlot::F64(g3),
        GradSlot::F64(g4),
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
    let mut hand_reverse = [0.0; 7];
    let hv = rk4_gradient_reverse(p, steps, &mut hand_reverse);
    close(&[hv], &[v], "rk4 (reverse)");
    close(&hand_reverse, &gs, "rk4 (reverse)");
    let (p, steps) = logistic_inputs();
    let mut hand = [0.0; 5];
    let hv = logistic_gradient(p, steps, &mut hand);
    let mut gs = [0.0; 5];
    let v = prepared("logistic")
        .value_and_gradient(&mut logistic_args(&p, steps), &mut logistic_slots(&mut gs))
        .expect("gradient");
    close(&[hv], &[v], "logistic");
    close(&hand, &gs, "logistic");
    close(&[logistic_primal(p, steps)], &[v], "logistic");
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

    /// Forward sensitivities: the 7 input directions carried with the state.
    #[divan::bench]
    fn rust_gradient_forward(b: Bencher) {
        let (inputs, steps) = rk4_inputs();
        let mut g = [0.0; 7];
        b.bench_local(|| rk4_gradient(divan::black_box(inputs), steps, &mut g));
    }

    /// Reverse mode: the stage values taped, each step's adjoint run backwards.
    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let (inputs, steps) = rk4_inputs();
        let mut g = [0.0; 7];
        b.bench_local(|| rk4_gradient_reverse(divan::black_box(inputs), steps, &mut g));
    }
}

mod logistic {
    use super::*;

    #[divan::bench]
    fn mcir_primal(b: Bencher) {
        let mut p = prepared("logistic");
        let (inputs, steps) = logistic_inputs();
        b.bench_local(|| p.call(&mut logistic_args(&inputs, steps)).expect("call"));
    }

    #[divan::bench]
    fn mcir_gradient(b: Bencher) {
        let mut p = prepared("logistic");
        let (inputs, steps) = logistic_inputs();
        let mut g = [0.0; 5];
        b.bench_local(|| {
            p.value_and_gradient(&mut logistic_args(&inputs, steps), &mut logistic_slots(&mut g))
                .expect("gradient")
        });
    }

    #[divan::bench]
    fn rust_primal(b: Bencher) {
        let (inputs, steps) = logistic_inputs();
        b.bench_local(|| logistic_primal(divan::black_box(inputs), steps));
    }

    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let (inputs, steps) = logistic_inputs();
        let mut g = [0.0; 5];
        b.bench_local(|| logistic_gradient(divan::black_box(inputs), steps, &mut g));
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
