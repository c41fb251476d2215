//! Benchmarks of ordinary modular code: each program of `benches/shapes/` (a helper with a
//! branch, recursion, a `while` loop in a helper, helpers writing an `out` array, a
//! recursion that makes a fresh array per call) on native code, generic (compiled for
//! any shapes, as `mcc bench` without `--specialise`), against the same function and its
//! gradient written by hand in Rust. `cargo bench -p mcir --bench shapes`;
//! `docs/performance.md` has the figures.
//!
//! The arguments are drawn here with the generator `benches/shapes/args.py` uses, so
//! `mcc bench benches/shapes/NAME.mcir --args @NAME.json` measures the same inputs.

// The baselines index arrays in loops on purpose, as the `.mcir` programs do. A
// benchmark whose setup fails should stop where it fails.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments, clippy::unwrap_used, clippy::expect_used)]

use divan::Bencher;
use mcir::{Arg, GradSlot, Prepared, Program};
use std::sync::OnceLock;

fn main() {
    check_baselines();
    divan::main();
}

// ---- inputs ----

/// SplitMix64, as `benches/shapes/args.py` has it.
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

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn vector(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// Every benchmark's inputs, drawn in the order `args.py` draws them.
struct Inputs {
    branchy: Vec<f64>,
    divide: Vec<f64>,
    newton: Vec<f64>,
    /// Positions and velocities, `n × 2` each, and the number of steps.
    particles: (Vec<f64>, Vec<f64>, usize, usize),
    bundle: Bundle,
    /// An `n × n` matrix.
    matrix: (Vec<f64>, usize),
}

struct Bundle {
    cams: Vec<f64>,
    pts: Vec<f64>,
    cam_of: Vec<i64>,
    pt_of: Vec<i64>,
    obs: Vec<f64>,
}

const CAMS: usize = 16;
const POINTS: usize = 1000;

fn inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let mut rng = Rng(1);
        let branchy = rng.vector(100_000, -1.0, 1.0);
        let divide = rng.vector(65_536, -1.0, 1.0);
        let newton = rng.vector(100_000, -2.0, 2.0);
        let pos = rng.vector(2000, -1.0, 1.0);
        let vel = rng.vector(2000, -0.1, 0.1);
        let mut cams = Vec::new();
        for _ in 0..CAMS {
            cams.push(rng.uniform(0.8, 1.2));
            cams.push(rng.uniform(-0.1, 0.1));
            cams.push(rng.uniform(-0.1, 0.1));
            cams.push(rng.uniform(4.0, 5.0));
            cams.push(rng.uniform(-0.1, 0.1));
        }
        let pts = rng.vector(3 * POINTS, -1.0, 1.0);
        let n_obs = 100_000;
        let cam_of = (0..n_obs).map(|_| rng.below(CAMS as u64) as i64).collect();
        let pt_of = (0..n_obs).map(|_| rng.below(POINTS as u64) as i64).collect();
        let obs = rng.vector(2 * n_obs, -0.3, 0.3);
        let matrix = rng.vector(64, -1.0, 1.0);
        Inputs {
            branchy,
            divide,
            newton,
            particles: (pos, vel, 1000, 100),
            bundle: Bundle { cams, pts, cam_of, pt_of, obs },
            matrix: (matrix, 8),
        }
    })
}

fn prepared(name: &str) -> Prepared<'static> {
    static PROGRAMS: OnceLock<std::sync::Mutex<std::collections::HashMap<String, &'static Program>>> =
        OnceLock::new();
    let map = PROGRAMS.get_or_init(Default::default);
    let program = *map.lock().expect("lock").entry(name.to_string()).or_insert_with(|| {
        let path = format!("{}/../../benches/shapes/{name}.mcir", env!("CARGO_MANIFEST_DIR"));
        Box::leak(Box::new(Program::compile_file(path).expect("compiles")))
    });
    let mut p = program.function(name).expect("function").prepare().expect("prepare");
    p.compile_gradient().expect("gradient");
    p
}

// ---- hand-written baselines ----

fn shape(v: f64) -> f64 {
    if v > 0.25 {
        (3.0 * v).sin() * v
    } else {
        0.5 * v * v - 0.25 * v + 0.125
    }
}

fn branchy_primal(x: &[f64]) -> f64 {
    let mut s = 0.0;
    for &v in x {
        s += shape(v);
    }
    s
}

fn branchy_gradient(x: &[f64], g: &mut [f64]) -> f64 {
    let mut s = 0.0;
    for (gi, &v) in g.iter_mut().zip(x) {
        if v > 0.25 {
            let (sin, cos) = (3.0 * v).sin_cos();
            s += sin * v;
            *gi = 3.0 * cos * v + sin;
        } else {
            s += 0.5 * v * v - 0.25 * v + 0.125;
            *gi = v - 0.25;
        }
    }
    s
}

fn combine(v: &[f64], lo: usize, hi: usize) -> f64 {
    if hi - lo == 1 {
        let e = v[lo];
        return e * e * 0.5 + e.sin();
    }
    let mid = lo + (hi - lo) / 2;
    let left = combine(v, lo, mid);
    let right = combine(v, mid, hi);
    left + right + 0.001 * left * right
}

/// The forward sweep: each node pushes its halves' values, after its halves' own.
fn combine_forward(v: &[f64], lo: usize, hi: usize, tape: &mut Vec<f64>) -> f64 {
    if hi - lo == 1 {
        let e = v[lo];
        return e * e * 0.5 + e.sin();
    }
    let mid = lo + (hi - lo) / 2;
    let left = combine_forward(v, lo, mid, tape);
    let right = combine_forward(v, mid, hi, tape);
    tape.push(left);
    tape.push(right);
    left + right + 0.001 * left * right
}

/// The reverse sweep: pops what the forward sweep pushed, right half first.
fn combine_reverse(v: &[f64], lo: usize, hi: usize, adjoint: f64, tape: &mut Vec<f64>, g: &mut [f64]) {
    if hi - lo == 1 {
        let e = v[lo];
        g[lo] += adjoint * (e + e.cos());
        return;
    }
    let right = tape.pop().unwrap();
    let left = tape.pop().unwrap();
    let mid = lo + (hi - lo) / 2;
    combine_reverse(v, mid, hi, adjoint * (1.0 + 0.001 * left), tape, g);
    combine_reverse(v, lo, mid, adjoint * (1.0 + 0.001 * right), tape, g);
}

fn divide_primal(x: &[f64]) -> f64 {
    combine(x, 0, x.len())
}

fn divide_gradient(x: &[f64], g: &mut [f64], tape: &mut Vec<f64>) -> f64 {
    tape.clear();
    g.fill(0.0);
    let value = combine_forward(x, 0, x.len(), tape);
    combine_reverse(x, 0, x.len(), 1.0, tape, g);
    value
}

fn cube_root(a: f64) -> f64 {
    let mut y = 1.0 + 0.25 * a;
    let mut step: f64 = 1.0;
    while step.abs() > 1.0e-12 {
        step = (y * y * y - a) / (3.0 * y * y);
        y -= step;
    }
    y
}

/// The cube root and its derivative, carried through the iteration (forward mode).
fn cube_root_tangent(a: f64) -> (f64, f64) {
    let (mut y, mut dy) = (1.0 + 0.25 * a, 0.25);
    let mut step: f64 = 1.0;
    while step.abs() > 1.0e-12 {
        let (num, dnum) = (y * y * y - a, 3.0 * y * y * dy - 1.0);
        let (den, dden) = (3.0 * y * y, 6.0 * y * dy);
        step = num / den;
        let dstep = (dnum * den - num * dden) / (den * den);
        y -= step;
        dy -= dstep;
    }
    (y, dy)
}

fn newton_primal(x: &[f64]) -> f64 {
    let mut s = 0.0;
    for &v in x {
        s += cube_root(1.0 + v * v);
    }
    s
}

fn newton_gradient(x: &[f64], g: &mut [f64]) -> f64 {
    let mut s = 0.0;
    for (gi, &v) in g.iter_mut().zip(x) {
        let (y, dy) = cube_root_tangent(1.0 + v * v);
        s += y;
        *gi = dy * 2.0 * v;
    }
    s
}

const DT: f64 = 0.01;

fn force(px: f64, py: f64) -> (f64, f64) {
    let r2 = px * px + py * py + 0.1;
    let inv = 1.0 / (r2 * r2.sqrt());
    (-px * inv, -py * inv)
}

/// Moves the particles `steps` times in place; the sum of their squared distances.
fn particles_primal(pos: &mut [f64], vel: &mut [f64], n: usize, steps: usize) -> f64 {
    for _ in 0..steps {
        for i in 0..n {
            let (fx, fy) = force(pos[2 * i], pos[2 * i + 1]);
            vel[2 * i] += DT * fx;
            vel[2 * i + 1] += DT * fy;
            pos[2 * i] += DT * vel[2 * i];
            pos[2 * i + 1] += DT * vel[2 * i + 1];
        }
    }
    pos.iter().map(|p| p * p).sum()
}

/// The gradient with respect to the initial positions and velocities, which are left
/// as they were; `work` holds the moving state and `tape` each step's positions.
fn particles_gradient(
    pos0: &[f64],
    vel0: &[f64],
    n: usize,
    steps: usize,
    gpos: &mut [f64],
    gvel: &mut [f64],
    work: &mut [Vec<f64>; 2],
    tape: &mut Vec<f64>,
) -> f64 {
    let [pos, vel] = work;
    pos.clear();
    pos.extend_from_slice(pos0);
    vel.clear();
    vel.extend_from_slice(vel0);
    tape.clear();
    for _ in 0..steps {
        for i in 0..n {
            let (px, py) = (pos[2 * i], pos[2 * i + 1]);
            tape.push(px);
            tape.push(py);
            let (fx, fy) = force(px, py);
            vel[2 * i] += DT * fx;
            vel[2 * i + 1] += DT * fy;
            pos[2 * i] += DT * vel[2 * i];
            pos[2 * i + 1] += DT * vel[2 * i + 1];
        }
    }
    let value = pos.iter().map(|p| p * p).sum();
    for (g, p) in gpos.iter_mut().zip(pos.iter()) {
        *g = 2.0 * p;
    }
    gvel.fill(0.0);
    for _ in 0..steps {
        for i in (0..n).rev() {
            let py = tape.pop().unwrap();
            let px = tape.pop().unwrap();
            // pos += dt vel, then vel += dt f, then f = F(pos), backwards.
            gvel[2 * i] += DT * gpos[2 * i];
            gvel[2 * i + 1] += DT * gpos[2 * i + 1];
            let (fbx, fby) = (DT * gvel[2 * i], DT * gvel[2 * i + 1]);
            let r2 = px * px + py * py + 0.1;
            let inv = 1.0 / (r2 * r2.sqrt());
            let inv5 = inv / r2;
            let (dxx, dxy, dyy) =
                (-inv + 3.0 * px * px * inv5, 3.0 * px * py * inv5, -inv + 3.0 * py * py * inv5);
            gpos[2 * i] += dxx * fbx + dxy * fby;
            gpos[2 * i + 1] += dxy * fbx + dyy * fby;
        }
    }
    value
}

fn bundle_primal(b: &Bundle) -> f64 {
    let mut s = 0.0;
    for k in 0..b.cam_of.len() {
        let (c, p) = (b.cam_of[k] as usize, b.pt_of[k] as usize);
        let cam = &b.cams[5 * c..5 * c + 5];
        let x = b.pts[3 * p] + cam[1];
        let y = b.pts[3 * p + 1] + cam[2];
        let z = b.pts[3 * p + 2] + cam[3];
        let (px, py) = (x / z, y / z);
        let r2 = px * px + py * py;
        let d = if r2 < 1.0 { 1.0 + cam[4] * r2 } else { 1.0 + cam[4] };
        let r0 = cam[0] * d * px - b.obs[2 * k];
        let r1 = cam[0] * d * py - b.obs[2 * k + 1];
        s += r0 * r0 + r1 * r1;
    }
    s
}

fn bundle_gradient(b: &Bundle, gcams: &mut [f64], gpts: &mut [f64], gobs: &mut [f64]) -> f64 {
    gcams.fill(0.0);
    gpts.fill(0.0);
    let mut s = 0.0;
    for k in 0..b.cam_of.len() {
        let (c, p) = (b.cam_of[k] as usize, b.pt_of[k] as usize);
        let cam = &b.cams[5 * c..5 * c + 5];
        let x = b.pts[3 * p] + cam[1];
        let y = b.pts[3 * p + 1] + cam[2];
        let z = b.pts[3 * p + 2] + cam[3];
        let (px, py) = (x / z, y / z);
        let r2 = px * px + py * py;
        let inside = r2 < 1.0;
        let d = if inside { 1.0 + cam[4] * r2 } else { 1.0 + cam[4] };
        let f = cam[0];
        let r0 = f * d * px - b.obs[2 * k];
        let r1 = f * d * py - b.obs[2 * k + 1];
        s += r0 * r0 + r1 * r1;
        let (rb0, rb1) = (2.0 * r0, 2.0 * r1);
        let fb = rb0 * d * px + rb1 * d * py;
        let db = rb0 * f * px + rb1 * f * py;
        let (mut pxb, mut pyb) = (rb0 * f * d, rb1 * f * d);
        gobs[2 * k] = -rb0;
        gobs[2 * k + 1] = -rb1;
        let kb = if inside {
            pxb += db * cam[4] * 2.0 * px;
            pyb += db * cam[4] * 2.0 * py;
            db * r2
        } else {
            db
        };
        let (xb, yb, zb) = (pxb / z, pyb / z, -(pxb * px + pyb * py) / z);
        let gc = &mut gcams[5 * c..5 * c + 5];
        gc[0] += fb;
        gc[1] += xb;
        gc[2] += yb;
        gc[3] += zb;
        gc[4] += kb;
        gpts[3 * p] += xb;
        gpts[3 * p + 1] += yb;
        gpts[3 * p + 2] += zb;
    }
    s
}

/// The bundle's gradient in two passes, as a reverse-mode tool runs it: the forward pass
/// keeps `x / z` and `y / z` per observation, the reverse pass computes everything else
/// again from them and the data. Kept beside the single-pass gradient to show what the
/// shape costs written either way.
fn bundle_gradient_taped(
    b: &Bundle,
    gcams: &mut [f64],
    gpts: &mut [f64],
    gobs: &mut [f64],
    tape: &mut Vec<f64>,
) -> f64 {
    gcams.fill(0.0);
    gpts.fill(0.0);
    tape.clear();
    let mut s = 0.0;
    for k in 0..b.cam_of.len() {
        let (c, p) = (b.cam_of[k] as usize, b.pt_of[k] as usize);
        let cam = &b.cams[5 * c..5 * c + 5];
        let z = b.pts[3 * p + 2] + cam[3];
        let (px, py) = ((b.pts[3 * p] + cam[1]) / z, (b.pts[3 * p + 1] + cam[2]) / z);
        let r2 = px * px + py * py;
        let d = if r2 < 1.0 { 1.0 + cam[4] * r2 } else { 1.0 + cam[4] };
        let r0 = cam[0] * d * px - b.obs[2 * k];
        let r1 = cam[0] * d * py - b.obs[2 * k + 1];
        s += r0 * r0 + r1 * r1;
        tape.extend_from_slice(&[px, py]);
    }
    for k in (0..b.cam_of.len()).rev() {
        let (c, p) = (b.cam_of[k] as usize, b.pt_of[k] as usize);
        let cam = &b.cams[5 * c..5 * c + 5];
        let (px, py) = (tape[2 * k], tape[2 * k + 1]);
        let r2 = px * px + py * py;
        let inside = r2 < 1.0;
        let d = if inside { 1.0 + cam[4] * r2 } else { 1.0 + cam[4] };
        let f = cam[0];
        let (rb0, rb1) = (2.0 * (f * d * px - b.obs[2 * k]), 2.0 * (f * d * py - b.obs[2 * k + 1]));
        let fb = rb0 * d * px + rb1 * d * py;
        let db = rb0 * f * px + rb1 * f * py;
        let (mut pxb, mut pyb) = (rb0 * f * d, rb1 * f * d);
        gobs[2 * k] = -rb0;
        gobs[2 * k + 1] = -rb1;
        let kb = if inside {
            pxb += db * cam[4] * 2.0 * px;
            pyb += db * cam[4] * 2.0 * py;
            db * r2
        } else {
            db
        };
        let rz = 1.0 / (b.pts[3 * p + 2] + cam[3]);
        let (xb, yb, zb) = (pxb * rz, pyb * rz, -(pxb * px + pyb * py) * rz);
        let gc = &mut gcams[5 * c..5 * c + 5];
        gc[0] += fb;
        gc[1] += xb;
        gc[2] += yb;
        gc[3] += zb;
        gc[4] += kb;
        gpts[3 * p] += xb;
        gpts[3 * p + 1] += yb;
        gpts[3 * p + 2] += zb;
    }
    s
}

/// The minor of `a` (`n × n`) without row 0 and column `j`.
fn minor(a: &[f64], n: usize, j: usize) -> Vec<f64> {
    let mut m = vec![0.0; (n - 1) * (n - 1)];
    for r in 1..n {
        for c in 0..n {
            if c < j {
                m[(r - 1) * (n - 1) + c] = a[r * n + c];
            } else if c > j {
                m[(r - 1) * (n - 1) + c - 1] = a[r * n + c];
            }
        }
    }
    m
}

fn det(a: &[f64], n: usize) -> f64 {
    if n == 1 {
        return a[0];
    }
    let mut total = 0.0;
    let mut sign = 1.0;
    for j in 0..n {
        let m = minor(a, n, j);
        total += sign * a[j] * det(&m, n - 1);
        sign = -sign;
    }
    total
}

/// The determinant; adds `adjoint` times its gradient into `g`.
fn det_gradient(a: &[f64], n: usize, adjoint: f64, g: &mut [f64]) -> f64 {
    if n == 1 {
        g[0] += adjoint;
        return a[0];
    }
    let mut total = 0.0;
    let mut sign = 1.0;
    for j in 0..n {
        let m = minor(a, n, j);
        let mut gm = vec![0.0; m.len()];
        let dm = det_gradient(&m, n - 1, adjoint * sign * a[j], &mut gm);
        total += sign * a[j] * dm;
        g[j] += adjoint * sign * dm;
        for r in 1..n {
            for c in 0..n {
                if c < j {
                    g[r * n + c] += gm[(r - 1) * (n - 1) + c];
                } else if c > j {
                    g[r * n + c] += gm[(r - 1) * (n - 1) + c - 1];
                }
            }
        }
        sign = -sign;
    }
    total
}

// ---- the programs' arguments ----

fn particle_args<'a>(
    pos: &'a mut [f64],
    vel: &'a mut [f64],
    shape: &'a [usize; 2],
    steps: usize,
) -> [Arg<'a>; 3] {
    [Arg::F64Array(pos, shape), Arg::F64Array(vel, shape), Arg::I64(steps as i64)]
}

/// The bundle's arguments, in buffers the program may read and write.
struct BundleArgs {
    cams: Vec<f64>,
    pts: Vec<f64>,
    cam_of: Vec<i64>,
    pt_of: Vec<i64>,
    obs: Vec<f64>,
    shapes: [[usize; 2]; 3],
    n_obs: [usize; 1],
}

impl BundleArgs {
    fn new(b: &Bundle) -> BundleArgs {
        let n = b.cam_of.len();
        BundleArgs {
            cams: b.cams.clone(),
            pts: b.pts.clone(),
            cam_of: b.cam_of.clone(),
            pt_of: b.pt_of.clone(),
            obs: b.obs.clone(),
            shapes: [[CAMS, 5], [POINTS, 3], [n, 2]],
            n_obs: [n],
        }
    }

    fn args(&mut self) -> [Arg<'_>; 5] {
        [
            Arg::F64Array(&mut self.cams, &self.shapes[0]),
            Arg::F64Array(&mut self.pts, &self.shapes[1]),
            Arg::I64Array(&mut self.cam_of, &self.n_obs),
            Arg::I64Array(&mut self.pt_of, &self.n_obs),
            Arg::F64Array(&mut self.obs, &self.shapes[2]),
        ]
    }
}

/// The hand-written gradients agree with mcir's, so the two compute the same thing.
fn check_baselines() {
    let close = |a: &[f64], b: &[f64], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-8 * (1.0 + x.abs()), "{what}: hand-written {x} vs mcir {y}");
        }
    };
    let inp = inputs();
    type Vector = (&'static str, fn(&[f64]) -> f64, &'static [f64]);
    let vectors: [Vector; 3] = [
        ("branchy_helper", branchy_primal, &inp.branchy),
        ("divide_conquer", divide_primal, &inp.divide),
        ("newton_helper", newton_primal, &inp.newton),
    ];
    for (name, primal, x) in vectors {
        let mut xs = x.to_vec();
        let n = xs.len();
        let mut g = vec![0.0; n];
        let v = prepared(name)
            .value_and_gradient(&mut [Arg::F64Array(&mut xs, &[n])], &mut [GradSlot::Array(&mut g)])
            .expect("gradient");
        let mut h = vec![0.0; n];
        let hv = match name {
            "branchy_helper" => branchy_gradient(x, &mut h),
            "divide_conquer" => divide_gradient(x, &mut h, &mut Vec::new()),
            _ => newton_gradient(x, &mut h),
        };
        close(&[hv, primal(x)], &[v, v], name);
        close(&h, &g, name);
    }
    let (pos, vel, n, steps) = &inp.particles;
    let (mut p, mut q) = (pos.clone(), vel.clone());
    let (mut gp, mut gv) = (vec![0.0; 2 * n], vec![0.0; 2 * n]);
    let v = prepared("out_array_helper")
        .value_and_gradient(
            &mut particle_args(&mut p, &mut q, &[*n, 2], *steps),
            &mut [GradSlot::Array(&mut gp), GradSlot::Array(&mut gv), GradSlot::Skip],
        )
        .expect("gradient");
    let (mut hp, mut hq) = (vec![0.0; 2 * n], vec![0.0; 2 * n]);
    let hv =
        particles_gradient(pos, vel, *n, *steps, &mut hp, &mut hq, &mut Default::default(), &mut Vec::new());
    close(
        &[hv, particles_primal(&mut pos.clone(), &mut vel.clone(), *n, *steps)],
        &[v, v],
        "out_array_helper",
    );
    close(&hp, &gp, "out_array_helper positions");
    close(&hq, &gv, "out_array_helper velocities");
    let b = &inp.bundle;
    let mut args = BundleArgs::new(b);
    let (mut gc, mut gp, mut go) = (vec![0.0; b.cams.len()], vec![0.0; b.pts.len()], vec![0.0; b.obs.len()]);
    let v = prepared("bundle_adjust")
        .value_and_gradient(
            &mut args.args(),
            &mut [
                GradSlot::Array(&mut gc),
                GradSlot::Array(&mut gp),
                GradSlot::Skip,
                GradSlot::Skip,
                GradSlot::Array(&mut go),
            ],
        )
        .expect("gradient");
    let (mut hc, mut hp, mut ho) = (vec![0.0; b.cams.len()], vec![0.0; b.pts.len()], vec![0.0; b.obs.len()]);
    let hv = bundle_gradient(b, &mut hc, &mut hp, &mut ho);
    close(&[hv, bundle_primal(b)], &[v, v], "bundle_adjust");
    close(&hc, &gc, "bundle_adjust cameras");
    close(&hp, &gp, "bundle_adjust points");
    close(&ho, &go, "bundle_adjust observations");
    let hv = bundle_gradient_taped(b, &mut hc, &mut hp, &mut ho, &mut Vec::new());
    close(&[hv], &[v], "bundle_adjust, two passes");
    close(&hc, &gc, "bundle_adjust cameras, two passes");
    close(&hp, &gp, "bundle_adjust points, two passes");
    close(&ho, &go, "bundle_adjust observations, two passes");
    let (a, n) = &inp.matrix;
    let mut m = a.clone();
    let mut g = vec![0.0; n * n];
    let v = prepared("determinant")
        .value_and_gradient(&mut [Arg::F64Array(&mut m, &[*n, *n])], &mut [GradSlot::Array(&mut g)])
        .expect("gradient");
    let mut h = vec![0.0; n * n];
    let hv = det_gradient(a, *n, 1.0, &mut h);
    close(&[hv, det(a, *n)], &[v, v], "determinant");
    close(&h, &g, "determinant");
}

// ---- benchmarks ----

macro_rules! vector_bench {
    ($module:ident, $name:literal, $field:ident, $primal:expr, $gradient:expr) => {
        mod $module {
            use super::*;

            #[divan::bench]
            fn mcir_primal(b: Bencher) {
                let mut p = prepared($name);
                let mut x = inputs().$field.clone();
                let n = x.len();
                b.bench_local(|| p.call(&mut [Arg::F64Array(&mut x, &[n])]).expect("call"));
            }

            #[divan::bench]
            fn mcir_gradient(b: Bencher) {
                let mut p = prepared($name);
                let mut x = inputs().$field.clone();
                let n = x.len();
                let mut g = vec![0.0; n];
                b.bench_local(|| {
                    p.value_and_gradient(&mut [Arg::F64Array(&mut x, &[n])], &mut [GradSlot::Array(&mut g)])
                        .expect("gradient")
                });
            }

            #[divan::bench]
            fn rust_primal(b: Bencher) {
                let x = &inputs().$field;
                b.bench_local(|| ($primal)(divan::black_box(x)));
            }

            #[divan::bench]
            fn rust_gradient(b: Bencher) {
                let x = &inputs().$field;
                let mut g = vec![0.0; x.len()];
                let mut tape: Vec<f64> = Vec::new();
                b.bench_local(|| ($gradient)(divan::black_box(x.as_slice()), g.as_mut_slice(), &mut tape));
            }
        }
    };
}

vector_bench!(branchy_helper, "branchy_helper", branchy, branchy_primal, |x, g, _: &mut Vec<f64>| {
    branchy_gradient(x, g)
});
vector_bench!(divide_conquer, "divide_conquer", divide, divide_primal, divide_gradient);
vector_bench!(newton_helper, "newton_helper", newton, newton_primal, |x, g, _: &mut Vec<f64>| {
    newton_gradient(x, g)
});

mod out_array_helper {
    use super::*;

    // The program moves the particles in place: each primal call starts from a copy.
    #[divan::bench]
    fn mcir_primal(b: Bencher) {
        let mut p = prepared("out_array_helper");
        let (pos, vel, n, steps) = &inputs().particles;
        let (mut q, mut w) = (pos.clone(), vel.clone());
        b.bench_local(|| {
            q.copy_from_slice(pos);
            w.copy_from_slice(vel);
            p.call(&mut particle_args(&mut q, &mut w, &[*n, 2], *steps)).expect("call")
        });
    }

    #[divan::bench]
    fn mcir_gradient(b: Bencher) {
        let mut p = prepared("out_array_helper");
        let (pos, vel, n, steps) = &inputs().particles;
        let (mut q, mut w) = (pos.clone(), vel.clone());
        let (mut gq, mut gw) = (vec![0.0; 2 * n], vec![0.0; 2 * n]);
        b.bench_local(|| {
            p.value_and_gradient(
                &mut particle_args(&mut q, &mut w, &[*n, 2], *steps),
                &mut [GradSlot::Array(&mut gq), GradSlot::Array(&mut gw), GradSlot::Skip],
            )
            .expect("gradient")
        });
    }

    #[divan::bench]
    fn rust_primal(b: Bencher) {
        let (pos, vel, n, steps) = &inputs().particles;
        let (mut q, mut w) = (pos.clone(), vel.clone());
        b.bench_local(|| {
            q.copy_from_slice(pos);
            w.copy_from_slice(vel);
            particles_primal(divan::black_box(&mut q), &mut w, *n, *steps)
        });
    }

    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let (pos, vel, n, steps) = &inputs().particles;
        let (mut gq, mut gw) = (vec![0.0; 2 * n], vec![0.0; 2 * n]);
        let (mut work, mut tape) = (Default::default(), Vec::new());
        b.bench_local(|| {
            particles_gradient(divan::black_box(pos), vel, *n, *steps, &mut gq, &mut gw, &mut work, &mut tape)
        });
    }
}

mod bundle_adjust {
    use super::*;

    #[divan::bench]
    fn mcir_primal(b: Bencher) {
        let mut p = prepared("bundle_adjust");
        let mut args = BundleArgs::new(&inputs().bundle);
        b.bench_local(|| p.call(&mut args.args()).expect("call"));
    }

    #[divan::bench]
    fn mcir_gradient(b: Bencher) {
        let mut p = prepared("bundle_adjust");
        let bundle = &inputs().bundle;
        let mut args = BundleArgs::new(bundle);
        let (mut gc, mut gp, mut go) =
            (vec![0.0; bundle.cams.len()], vec![0.0; bundle.pts.len()], vec![0.0; bundle.obs.len()]);
        b.bench_local(|| {
            p.value_and_gradient(
                &mut args.args(),
                &mut [
                    GradSlot::Array(&mut gc),
                    GradSlot::Array(&mut gp),
                    GradSlot::Skip,
                    GradSlot::Skip,
                    GradSlot::Array(&mut go),
                ],
            )
            .expect("gradient")
        });
    }

    #[divan::bench]
    fn rust_primal(b: Bencher) {
        let bundle = &inputs().bundle;
        b.bench_local(|| bundle_primal(divan::black_box(bundle)));
    }

    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let bundle = &inputs().bundle;
        let (mut gc, mut gp, mut go) =
            (vec![0.0; bundle.cams.len()], vec![0.0; bundle.pts.len()], vec![0.0; bundle.obs.len()]);
        b.bench_local(|| bundle_gradient(divan::black_box(bundle), &mut gc, &mut gp, &mut go));
    }

    #[divan::bench]
    fn rust_gradient_taped(b: Bencher) {
        let bundle = &inputs().bundle;
        let (mut gc, mut gp, mut go) =
            (vec![0.0; bundle.cams.len()], vec![0.0; bundle.pts.len()], vec![0.0; bundle.obs.len()]);
        let mut tape = Vec::with_capacity(2 * bundle.cam_of.len());
        b.bench_local(|| {
            bundle_gradient_taped(divan::black_box(bundle), &mut gc, &mut gp, &mut go, &mut tape)
        });
    }
}

mod determinant {
    use super::*;

    #[divan::bench]
    fn mcir_primal(b: Bencher) {
        let mut p = prepared("determinant");
        let (a, n) = &inputs().matrix;
        let mut m = a.clone();
        b.bench_local(|| p.call(&mut [Arg::F64Array(&mut m, &[*n, *n])]).expect("call"));
    }

    #[divan::bench]
    fn mcir_gradient(b: Bencher) {
        let mut p = prepared("determinant");
        let (a, n) = &inputs().matrix;
        let mut m = a.clone();
        let mut g = vec![0.0; n * n];
        b.bench_local(|| {
            p.value_and_gradient(&mut [Arg::F64Array(&mut m, &[*n, *n])], &mut [GradSlot::Array(&mut g)])
                .expect("gradient")
        });
    }

    #[divan::bench]
    fn rust_primal(b: Bencher) {
        let (a, n) = &inputs().matrix;
        b.bench_local(|| det(divan::black_box(a), *n));
    }

    #[divan::bench]
    fn rust_gradient(b: Bencher) {
        let (a, n) = &inputs().matrix;
        let mut g = vec![0.0; n * n];
        b.bench_local(|| {
            g.fill(0.0);
            det_gradient(divan::black_box(a), *n, 1.0, &mut g)
        });
    }
}
