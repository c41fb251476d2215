//! Hand-written primals and reverse-mode gradients of the six programs beside this
//! crate (`../*.mcir`), on the inputs `../args.py` writes (the same SplitMix64 draws),
//! to compare mcir with on programs written to check its class of code rather than
//! tuned on:
//!
//!   untuned_hand check DIR         writes DIR/NAME.json = {"value": v, "gradient": [...]}
//!   untuned_hand bench [NAME] [N]  medians of N (default 200) alternated primal/gradient calls
//!
//! `../compare.py` compares what `check` writes with `mcc grad`'s output.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use std::hint::black_box;
use std::time::Instant;

// ---------------------------------------------------------------- inputs

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
    fn vector(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

const N_PIECE: usize = 100_000;
const N_LSE: usize = 1 << 16;
const N_FP: usize = 20_000;
const N_CELLS: usize = 1000;
const STEPS: usize = 100;
const GRID: usize = 160;
const N_INV: usize = 10_000;

struct Inputs {
    piece: (Vec<f64>, Vec<f64>, f64),
    lse: (Vec<f64>, f64),
    fp: (Vec<f64>, Vec<f64>),
    pp: (Vec<f64>, Vec<f64>, Vec<f64>, [f64; 5], usize),
    mesh: (Vec<f64>, Vec<[usize; 3]>, Vec<f64>),
    inv: (Vec<f64>, f64, [f64; 9]),
}

fn inputs() -> Inputs {
    let mut rng = Rng(7);
    let piece = (rng.vector(N_PIECE, -2.0, 2.0), rng.vector(N_PIECE, -2.0, 2.0), 1.3);
    let lse = (rng.vector(N_LSE, -3.0, 3.0), 0.7);
    let fp = (rng.vector(N_FP, 0.02, 0.1), rng.vector(N_FP, -1.0, 1.0));
    let u = rng.vector(N_CELLS, 0.5, 1.5);
    let v = rng.vector(N_CELLS, 0.2, 0.8);
    let k = rng.vector(N_CELLS, 1.5, 2.5);
    let pp = (u, v, k, [1.0, 1.2, 0.8, 0.6, 0.3], STEPS);
    let mut x = Vec::with_capacity(GRID * GRID * 2);
    for r in 0..GRID {
        for c in 0..GRID {
            x.push(c as f64 + rng.uniform(-0.45, 0.45));
            x.push(r as f64 + rng.uniform(-0.45, 0.45));
        }
    }
    let mut tri = Vec::new();
    for r in 0..GRID - 1 {
        for c in 0..GRID - 1 {
            let v00 = r * GRID + c;
            let (v01, v10) = (v00 + 1, v00 + GRID);
            let v11 = v10 + 1;
            tri.push([v00, v01, v11]);
            tri.push([v00, v11, v10]);
        }
    }
    let a0 = rng.vector(tri.len(), 0.4, 0.6);
    let data = rng.vector(9 * N_INV, -1.0, 1.0);
    let w = rng.vector(9, -1.0, 1.0);
    Inputs {
        piece,
        lse,
        fp,
        pp,
        mesh: (x, tri, a0),
        inv: (data, 4.0, w.try_into().unwrap()),
    }
}

// ---------------------------------------------------------------- 1. piecewise_loss

#[inline]
fn piece(r: f64) -> f64 {
    if r < -1.0 {
        r.exp().ln_1p() - r - 0.9
    } else if r < 1.0 {
        r.cosh().ln()
    } else {
        r * r.tanh() - 0.33
    }
}

/// The value and the derivative of `piece`.
#[inline]
fn piece_d(r: f64) -> (f64, f64) {
    if r < -1.0 {
        let e = r.exp();
        (e.ln_1p() - r - 0.9, e / (1.0 + e) - 1.0)
    } else if r < 1.0 {
        let ch = r.cosh();
        (ch.ln(), r.sinh() / ch)
    } else {
        let th = r.tanh();
        (r * th - 0.33, th + r * (1.0 - th * th))
    }
}

fn piecewise_primal(x: &[f64], t: &[f64], c: f64) -> f64 {
    let mut s = 0.0;
    for (xi, ti) in x.iter().zip(t) {
        s += piece((xi - ti) / c);
    }
    c * s
}

fn piecewise_grad(x: &[f64], t: &[f64], c: f64, gx: &mut [f64], gt: &mut [f64], gc: &mut f64) -> f64 {
    let mut s = 0.0;
    let mut sc = 0.0;
    for i in 0..x.len() {
        let r = (x[i] - t[i]) / c;
        let (p, d) = piece_d(r);
        s += p;
        gx[i] = d;
        gt[i] = -d;
        sc += d * r;
    }
    *gc = s - sc;
    c * s
}

// ---------------------------------------------------------------- 2. recursive_lse

fn lse(x: &[f64], lo: usize, hi: usize, tau: f64) -> f64 {
    if hi - lo == 1 {
        return x[lo] / tau;
    }
    let mid = lo + (hi - lo) / 2;
    let a = lse(x, lo, mid, tau);
    let b = lse(x, mid, hi, tau);
    if a > b {
        a + (b - a).exp().ln_1p()
    } else {
        b + (a - b).exp().ln_1p()
    }
}

fn lse_primal(x: &[f64], tau: f64) -> f64 {
    tau * lse(x, 0, x.len(), tau)
}

/// Forward sweep: each node pushes its halves' weights after its halves' own.
fn lse_fwd(x: &[f64], lo: usize, hi: usize, tau: f64, tape: &mut Vec<(f64, f64)>) -> f64 {
    if hi - lo == 1 {
        return x[lo] / tau;
    }
    let mid = lo + (hi - lo) / 2;
    let a = lse_fwd(x, lo, mid, tau, tape);
    let b = lse_fwd(x, mid, hi, tau, tape);
    if a > b {
        let e = (b - a).exp();
        let s = e / (1.0 + e);
        tape.push((1.0 - s, s));
        a + e.ln_1p()
    } else {
        let e = (a - b).exp();
        let s = e / (1.0 + e);
        tape.push((s, 1.0 - s));
        b + e.ln_1p()
    }
}

/// Reverse sweep: pops the node's weights, then the right half, then the left.
fn lse_rev(x: &[f64], lo: usize, hi: usize, tau: f64, adj: f64, tape: &mut Vec<(f64, f64)>, gx: &mut [f64], gtau: &mut f64) {
    if hi - lo == 1 {
        gx[lo] += adj / tau;
        *gtau -= adj * x[lo] / (tau * tau);
        return;
    }
    let (wa, wb) = tape.pop().unwrap();
    let mid = lo + (hi - lo) / 2;
    lse_rev(x, mid, hi, tau, adj * wb, tape, gx, gtau);
    lse_rev(x, lo, mid, tau, adj * wa, tape, gx, gtau);
}

fn lse_grad(x: &[f64], tau: f64, gx: &mut [f64], gtau: &mut f64) -> f64 {
    let mut tape = Vec::with_capacity(x.len());
    gx.fill(0.0);
    let v = lse_fwd(x, 0, x.len(), tau, &mut tape);
    *gtau = v;
    lse_rev(x, 0, x.len(), tau, tau, &mut tape, gx, gtau);
    tau * v
}

// ---------------------------------------------------------------- 3. fixed_point

fn solve(a: f64, b: f64) -> f64 {
    let mut x = b;
    let mut dx: f64 = 1.0;
    while dx.abs() > 1.0e-10 {
        let xn = a * x.cos() + b;
        dx = xn - x;
        x = xn;
    }
    x
}

fn fp_primal(a: &[f64], b: &[f64]) -> f64 {
    let mut s = 0.0;
    for (ai, bi) in a.iter().zip(b) {
        let x = solve(*ai, *bi);
        s += x * x;
    }
    s
}

/// Reverse through the iterations: the iterates are kept, the reverse loop computes
/// sin(x_k) again (the forward loop's cos(x_k) kept too).
fn fp_grad(a: &[f64], b: &[f64], ga: &mut [f64], gb: &mut [f64]) -> f64 {
    let mut tape: Vec<(f64, f64)> = Vec::with_capacity(64);
    let mut s = 0.0;
    for i in 0..a.len() {
        let (ai, bi) = (a[i], b[i]);
        tape.clear();
        let mut x = bi;
        let mut dx: f64 = 1.0;
        while dx.abs() > 1.0e-10 {
            let c = x.cos();
            tape.push((x, c));
            let xn = ai * c + bi;
            dx = xn - x;
            x = xn;
        }
        s += x * x;
        let mut xb = 2.0 * x;
        let (mut ab, mut bb) = (0.0, 0.0);
        for &(xk, ck) in tape.iter().rev() {
            ab += xb * ck;
            bb += xb;
            xb *= -ai * xk.sin();
        }
        ga[i] = ab;
        gb[i] = bb + xb;
    }
    s
}

/// The same gradient by the implicit function theorem at the solution (not what mcir
/// computes, but what an expert might write; it agrees to about the tolerance).
fn fp_grad_ift(a: &[f64], b: &[f64], ga: &mut [f64], gb: &mut [f64]) -> f64 {
    let mut s = 0.0;
    for i in 0..a.len() {
        let x = solve(a[i], b[i]);
        s += x * x;
        let (sn, cs) = x.sin_cos();
        let g = 2.0 * x / (1.0 + a[i] * sn);
        ga[i] = g * cs;
        gb[i] = g;
    }
    s
}

// ---------------------------------------------------------------- 4. predator_prey

const DT: f64 = 0.02;

#[inline]
fn rates(u: f64, v: f64, k: f64, p: &[f64; 5]) -> [f64; 3] {
    let pred = p[1] * u * v / (1.0 + p[4] * u);
    [p[0] * u * (1.0 - u / k) - pred, p[2] * pred - p[3] * v, pred]
}

fn pp_primal(u: &mut [f64], v: &mut [f64], k: &[f64], p: &[f64; 5], steps: usize) -> f64 {
    let mut eaten = 0.0;
    for _ in 0..steps {
        for i in 0..u.len() {
            let r = rates(u[i], v[i], k[i], p);
            u[i] += DT * r[0];
            v[i] += DT * r[1];
            eaten += DT * r[2];
        }
    }
    let mut loss = 0.0;
    for i in 0..u.len() {
        loss += (u[i] - 1.0) * (u[i] - 1.0) + (v[i] - 0.5) * (v[i] - 0.5);
    }
    loss - 0.01 * eaten
}

/// Gradient with respect to u, v (upon entry), k and p. The trajectory is kept (two
/// values per cell and step), the reverse loop runs the steps backwards.
fn pp_grad(
    u0: &[f64], v0: &[f64], k: &[f64], p: &[f64; 5], steps: usize,
    gu: &mut [f64], gv: &mut [f64], gk: &mut [f64], gp: &mut [f64; 5],
) -> f64 {
    let n = u0.len();
    let mut u = u0.to_vec();
    let mut v = v0.to_vec();
    let mut traj = Vec::with_capacity(steps * n);
    let mut eaten = 0.0;
    for _ in 0..steps {
        for i in 0..n {
            traj.push((u[i], v[i]));
            let r = rates(u[i], v[i], k[i], p);
            u[i] += DT * r[0];
            v[i] += DT * r[1];
            eaten += DT * r[2];
        }
    }
    let mut loss = 0.0;
    for i in 0..n {
        loss += (u[i] - 1.0) * (u[i] - 1.0) + (v[i] - 0.5) * (v[i] - 0.5);
        gu[i] = 2.0 * (u[i] - 1.0);
        gv[i] = 2.0 * (v[i] - 0.5);
    }
    gk.fill(0.0);
    let mut g = [0.0; 5];
    let eb = -0.01 * DT;
    for t in (0..steps).rev() {
        for i in (0..n).rev() {
            let (ui, vi) = traj[t * n + i];
            let ki = k[i];
            let d = 1.0 / (1.0 + p[4] * ui);
            let pred = p[1] * ui * vi * d;
            let rb0 = DT * gu[i];
            let rb1 = DT * gv[i];
            let predb = -rb0 + p[2] * rb1 + eb;
            let uk = ui / ki;
            gu[i] += rb0 * p[0] * (1.0 - 2.0 * uk) + predb * p[1] * vi * d * d;
            gv[i] += -p[3] * rb1 + predb * p[1] * ui * d;
            gk[i] += rb0 * p[0] * uk * uk;
            g[0] += rb0 * ui * (1.0 - uk);
            g[1] += predb * ui * vi * d;
            g[2] += rb1 * pred;
            g[3] -= rb1 * vi;
            g[4] -= predb * pred * ui * d;
        }
    }
    *gp = g;
    loss - 0.01 * eaten
}

// ---------------------------------------------------------------- 5. mesh_energy

#[inline]
fn tri_energy(x: &[f64], [i, j, k]: [usize; 3], a0: f64) -> f64 {
    let e1x = x[2 * j] - x[2 * i];
    let e1y = x[2 * j + 1] - x[2 * i + 1];
    let e2x = x[2 * k] - x[2 * i];
    let e2y = x[2 * k + 1] - x[2 * i + 1];
    let area = 0.5 * (e1x * e2y - e1y * e2x);
    let e3x = e2x - e1x;
    let e3y = e2y - e1y;
    let l2 = e1x * e1x + e1y * e1y + e2x * e2x + e2y * e2y + e3x * e3x + e3y * e3y;
    if area > 0.05 * a0 {
        let q = area / a0 - 1.0;
        l2 / (4.0 * area) + q * q
    } else {
        let d = area - a0;
        100.0 * d * d / (a0 * a0) + l2
    }
}

fn mesh_primal(x: &[f64], tri: &[[usize; 3]], a0: &[f64]) -> f64 {
    let mut e = 0.0;
    for t in 0..tri.len() {
        e += tri_energy(x, tri[t], a0[t]);
    }
    e
}

fn mesh_grad(x: &[f64], tri: &[[usize; 3]], a0: &[f64], gx: &mut [f64], ga0: &mut [f64]) -> f64 {
    gx.fill(0.0);
    let mut e = 0.0;
    for t in 0..tri.len() {
        let [i, j, k] = tri[t];
        let a0t = a0[t];
        let e1x = x[2 * j] - x[2 * i];
        let e1y = x[2 * j + 1] - x[2 * i + 1];
        let e2x = x[2 * k] - x[2 * i];
        let e2y = x[2 * k + 1] - x[2 * i + 1];
        let area = 0.5 * (e1x * e2y - e1y * e2x);
        let e3x = e2x - e1x;
        let e3y = e2y - e1y;
        let l2 = e1x * e1x + e1y * e1y + e2x * e2x + e2y * e2y + e3x * e3x + e3y * e3y;
        let (lb, ab);
        if area > 0.05 * a0t {
            let q = area / a0t - 1.0;
            let ia = 1.0 / (4.0 * area);
            e += l2 * ia + q * q;
            lb = ia;
            ab = -l2 * ia / area + 2.0 * q / a0t;
            ga0[t] = -2.0 * q * area / (a0t * a0t);
        } else {
            let d = area - a0t;
            let ia2 = 1.0 / (a0t * a0t);
            e += 100.0 * d * d * ia2 + l2;
            lb = 1.0;
            ab = 200.0 * d * ia2;
            ga0[t] = -ab - 200.0 * d * d * ia2 / a0t;
        }
        let (e3xb, e3yb) = (2.0 * lb * e3x, 2.0 * lb * e3y);
        let h = 0.5 * ab;
        let e1xb = 2.0 * lb * e1x - e3xb + h * e2y;
        let e1yb = 2.0 * lb * e1y - e3yb - h * e2x;
        let e2xb = 2.0 * lb * e2x + e3xb - h * e1y;
        let e2yb = 2.0 * lb * e2y + e3yb + h * e1x;
        gx[2 * j] += e1xb;
        gx[2 * j + 1] += e1yb;
        gx[2 * k] += e2xb;
        gx[2 * k + 1] += e2yb;
        gx[2 * i] -= e1xb + e2xb;
        gx[2 * i + 1] -= e1yb + e2yb;
    }
    e
}

// ---------------------------------------------------------------- 6. small_inverse

#[inline]
fn inv3(m: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let c00 = m[1][1] * m[2][2] - m[1][2] * m[2][1];
    let c01 = m[1][2] * m[2][0] - m[1][0] * m[2][2];
    let c02 = m[1][0] * m[2][1] - m[1][1] * m[2][0];
    let id = 1.0 / (m[0][0] * c00 + m[0][1] * c01 + m[0][2] * c02);
    [
        [c00 * id, (m[0][2] * m[2][1] - m[0][1] * m[2][2]) * id, (m[0][1] * m[1][2] - m[0][2] * m[1][1]) * id],
        [c01 * id, (m[0][0] * m[2][2] - m[0][2] * m[2][0]) * id, (m[0][2] * m[1][0] - m[0][0] * m[1][2]) * id],
        [c02 * id, (m[0][1] * m[2][0] - m[0][0] * m[2][1]) * id, (m[0][0] * m[1][1] - m[0][1] * m[1][0]) * id],
    ]
}

#[inline]
fn build(data: &[f64], i: usize, lam: f64) -> [[f64; 3]; 3] {
    let mut m = [[0.0; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            m[r][c] = data[9 * i + 3 * r + c];
        }
        m[r][r] += lam;
    }
    m
}

fn inv_primal(data: &[f64], lam: f64, w: &[f64; 9]) -> f64 {
    let mut s = 0.0;
    for i in 0..data.len() / 9 {
        let inv = inv3(&build(data, i, lam));
        for r in 0..3 {
            for c in 0..3 {
                s += w[3 * r + c] * inv[r][c];
            }
        }
    }
    s
}

/// d<W, M^-1>/dM = -A^T W A^T with A = M^-1.
fn inv_grad(data: &[f64], lam: f64, w: &[f64; 9], gd: &mut [f64], glam: &mut f64, gw: &mut [f64; 9]) -> f64 {
    let mut s = 0.0;
    let mut gl = 0.0;
    let mut gww = [0.0; 9];
    for i in 0..data.len() / 9 {
        let a = inv3(&build(data, i, lam));
        // t = W A^T
        let mut t = [[0.0; 3]; 3];
        for r in 0..3 {
            for c in 0..3 {
                s += w[3 * r + c] * a[r][c];
                gww[3 * r + c] += a[r][c];
                t[r][c] = w[3 * r] * a[c][0] + w[3 * r + 1] * a[c][1] + w[3 * r + 2] * a[c][2];
            }
        }
        // gM = -A^T t
        for r in 0..3 {
            for c in 0..3 {
                let g = -(a[0][r] * t[0][c] + a[1][r] * t[1][c] + a[2][r] * t[2][c]);
                gd[9 * i + 3 * r + c] = g;
                if r == c {
                    gl += g;
                }
            }
        }
    }
    *glam = gl;
    *gw = gww;
    s
}

// ---------------------------------------------------------------- driver

fn json_vec(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", items.join(","))
}

fn json_rows(v: &[f64], m: usize) -> String {
    let items: Vec<String> = v.chunks(m).map(json_vec).collect();
    format!("[{}]", items.join(","))
}

fn check(inp: &Inputs, dir: &str) {
    let write = |name: &str, value: f64, grad: String| {
        std::fs::write(format!("{dir}/{name}.json"), format!("{{\"value\": {value:?}, \"gradient\": {grad}}}")).unwrap();
    };
    {
        let (x, t, c) = &inp.piece;
        let (mut gx, mut gt, mut gc) = (vec![0.0; x.len()], vec![0.0; x.len()], 0.0);
        let v = piecewise_grad(x, t, *c, &mut gx, &mut gt, &mut gc);
        assert_eq!(v, piecewise_primal(x, t, *c));
        let mut arms = [0usize; 3];
        for i in 0..x.len() {
            let r = (x[i] - t[i]) / c;
            arms[if r < -1.0 { 0 } else if r < 1.0 { 1 } else { 2 }] += 1;
        }
        eprintln!("piecewise_loss arms: {arms:?}");
        write("piecewise_loss", v, format!("[{},{},{gc:?}]", json_vec(&gx), json_vec(&gt)));
    }
    {
        let (x, tau) = &inp.lse;
        let (mut gx, mut gtau) = (vec![0.0; x.len()], 0.0);
        let v = lse_grad(x, *tau, &mut gx, &mut gtau);
        assert_eq!(v, lse_primal(x, *tau));
        write("recursive_lse", v, format!("[{},{gtau:?}]", json_vec(&gx)));
    }
    {
        let (a, b) = &inp.fp;
        let (mut ga, mut gb) = (vec![0.0; a.len()], vec![0.0; a.len()]);
        let v = fp_grad(a, b, &mut ga, &mut gb);
        assert_eq!(v, fp_primal(a, b));
        write("fixed_point", v, format!("[{},{}]", json_vec(&ga), json_vec(&gb)));
        let v = fp_grad_ift(a, b, &mut ga, &mut gb);
        write("fixed_point_ift", v, format!("[{},{}]", json_vec(&ga), json_vec(&gb)));
    }
    {
        let (u, v, k, p, steps) = &inp.pp;
        let n = u.len();
        let (mut gu, mut gv, mut gk, mut gp) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], [0.0; 5]);
        let val = pp_grad(u, v, k, p, *steps, &mut gu, &mut gv, &mut gk, &mut gp);
        let (mut uu, mut vv) = (u.clone(), v.clone());
        assert_eq!(val, pp_primal(&mut uu, &mut vv, k, p, *steps));
        write("predator_prey", val, format!("[{},{},{},{},null]", json_vec(&gu), json_vec(&gv), json_vec(&gk), json_vec(&gp)));
    }
    {
        let (x, tri, a0) = &inp.mesh;
        let (mut gx, mut ga) = (vec![0.0; x.len()], vec![0.0; a0.len()]);
        let v = mesh_grad(x, tri, a0, &mut gx, &mut ga);
        let mut arms = [0usize; 2];
        for t in 0..tri.len() {
            let [i, j, k] = tri[t];
            let area = 0.5 * ((x[2 * j] - x[2 * i]) * (x[2 * k + 1] - x[2 * i + 1]) - (x[2 * j + 1] - x[2 * i + 1]) * (x[2 * k] - x[2 * i]));
            arms[usize::from(area <= 0.05 * a0[t])] += 1;
        }
        eprintln!("mesh_energy arms (positive, barrier): {arms:?}");
        eprintln!("mesh primal {} grad {}", mesh_primal(x, tri, a0), v);
        write("mesh_energy", v, format!("[{},null,{}]", json_rows(&gx, 2), json_vec(&ga)));
    }
    {
        let (data, lam, w) = &inp.inv;
        let (mut gd, mut gl, mut gw) = (vec![0.0; data.len()], 0.0, [0.0; 9]);
        let v = inv_grad(data, *lam, w, &mut gd, &mut gl, &mut gw);
        eprintln!("inv primal {} grad {}", inv_primal(data, *lam, w), v);
        write("small_inverse", v, format!("[{},{gl:?},{}]", json_rows(&gd, 9), json_rows(&gw, 3)));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

/// Times `primal` and `gradient` alternately, `n` samples each; prints medians in µs.
fn bench2(name: &str, n: usize, mut primal: impl FnMut() -> f64, mut gradient: impl FnMut() -> f64) {
    for _ in 0..5 {
        black_box(primal());
        black_box(gradient());
    }
    let (mut tp, mut tg) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let s = Instant::now();
        black_box(primal());
        tp.push(s.elapsed().as_secs_f64() * 1e6);
        let s = Instant::now();
        black_box(gradient());
        tg.push(s.elapsed().as_secs_f64() * 1e6);
    }
    let (p, g) = (median(tp), median(tg));
    println!("{{\"program\":\"{name}\",\"primal_us\":{p:.2},\"gradient_us\":{g:.2},\"ratio\":{:.3}}}", g / p);
}

fn bench(inp: &Inputs, only: Option<&str>, n: usize) {
    let want = |s: &str| only.is_none_or(|o| o == s);
    if want("piecewise_loss") {
        let (x, t, c) = &inp.piece;
        let (mut gx, mut gt, mut gc) = (vec![0.0; x.len()], vec![0.0; x.len()], 0.0);
        bench2("piecewise_loss", n, || piecewise_primal(black_box(x), black_box(t), black_box(*c)), || {
            piecewise_grad(black_box(x), black_box(t), black_box(*c), &mut gx, &mut gt, &mut gc)
        });
    }
    if only == Some("piecewise_sorted") {
        // Experiment: the same residuals sorted (t = 0), so the arms are predictable.
        let (x, t, c) = &inp.piece;
        let mut r: Vec<f64> = x.iter().zip(t).map(|(a, b)| a - b).collect();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let z = vec![0.0; r.len()];
        let (mut gx, mut gt, mut gc) = (vec![0.0; r.len()], vec![0.0; r.len()], 0.0);
        bench2("piecewise_sorted", n, || piecewise_primal(black_box(&r), black_box(&z), black_box(*c)), || {
            piecewise_grad(black_box(&r), black_box(&z), black_box(*c), &mut gx, &mut gt, &mut gc)
        });
    }
    if want("recursive_lse") {
        let (x, tau) = &inp.lse;
        let (mut gx, mut gtau) = (vec![0.0; x.len()], 0.0);
        bench2("recursive_lse", n, || lse_primal(black_box(x), black_box(*tau)), || {
            lse_grad(black_box(x), black_box(*tau), &mut gx, &mut gtau)
        });
    }
    if want("fixed_point") {
        let (a, b) = &inp.fp;
        let (mut ga, mut gb) = (vec![0.0; a.len()], vec![0.0; a.len()]);
        bench2("fixed_point", n, || fp_primal(black_box(a), black_box(b)), || fp_grad(black_box(a), black_box(b), &mut ga, &mut gb));
        bench2("fixed_point_ift", n, || fp_primal(black_box(a), black_box(b)), || {
            fp_grad_ift(black_box(a), black_box(b), &mut ga, &mut gb)
        });
    }
    if want("predator_prey") {
        let (u, v, k, p, steps) = &inp.pp;
        let n_ = u.len();
        let (mut uu, mut vv) = (u.clone(), v.clone());
        let (mut gu, mut gv, mut gk, mut gp) = (vec![0.0; n_], vec![0.0; n_], vec![0.0; n_], [0.0; 5]);
        bench2(
            "predator_prey",
            n,
            || {
                uu.copy_from_slice(u);
                vv.copy_from_slice(v);
                pp_primal(black_box(&mut uu), black_box(&mut vv), black_box(k), black_box(p), black_box(*steps))
            },
            || pp_grad(black_box(u), black_box(v), black_box(k), black_box(p), black_box(*steps), &mut gu, &mut gv, &mut gk, &mut gp),
        );
    }
    if want("mesh_energy") {
        let (x, tri, a0) = &inp.mesh;
        let (mut gx, mut ga) = (vec![0.0; x.len()], vec![0.0; a0.len()]);
        bench2("mesh_energy", n, || mesh_primal(black_box(x), black_box(tri), black_box(a0)), || {
            mesh_grad(black_box(x), black_box(tri), black_box(a0), &mut gx, &mut ga)
        });
    }
    if want("small_inverse") {
        let (data, lam, w) = &inp.inv;
        let (mut gd, mut gl, mut gw) = (vec![0.0; data.len()], 0.0, [0.0; 9]);
        bench2("small_inverse", n, || inv_primal(black_box(data), black_box(*lam), black_box(w)), || {
            inv_grad(black_box(data), black_box(*lam), black_box(w), &mut gd, &mut gl, &mut gw)
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let inp = inputs();
    match args.get(1).map(String::as_str) {
        Some("check") => check(&inp, args.get(2).map_or(".", String::as_str)),
        Some("bench") => {
            let only = args.get(2).map(String::as_str).filter(|s| *s != "all");
            let n = args.get(3).map_or(200, |s| s.parse().unwrap());
            bench(&inp, only, n);
        }
        _ => eprintln!("usage: untuned_hand check DIR | bench [NAME|all] [N]"),
    }
}
