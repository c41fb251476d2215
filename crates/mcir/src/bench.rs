//! `mcc bench`: how long compiling takes, and the medians of many primal and gradient
//! calls on native code, measured in one process.

use crate::api::{ApiError, Arg, GradSlot};
use crate::{Limits, Program, Value};
use mcir_interp::ArrayData;
use std::time::Instant;

/// Rounds of compiling timed by `mcc bench`.
const COMPILE_ROUNDS: usize = 7;

/// What `mcc bench` reports.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Parsing, checking, lowering, deriving the rule and generating native code for the
    /// function and its gradient, in milliseconds (median of several rounds).
    pub compile_ms: f64,
    /// Median time of one primal call, in nanoseconds.
    pub primal_ns: f64,
    /// Median time of one gradient (forward and reverse pass, shadows zeroed), in ns.
    pub gradient_ns: f64,
    /// Median time of one JVP (forward mode, every input's tangent 1), in ns, for
    /// functions of scalars and arrays returning `f64`.
    pub jvp_ns: Option<f64>,
    /// Calls timed of each.
    pub iters: usize,
}

impl BenchReport {
    /// `{"compile_ms": C, "primal_ns": P, "gradient_ns": G, "ratio": G/P, "iters": N}`,
    /// with `"jvp_ns"` and `"jvp_ratio"` (JVP / primal) where a JVP was timed.
    pub fn to_json(&self) -> String {
        let num = |x: f64| {
            serde_json::Number::from_f64(x).map(serde_json::Value::Number).unwrap_or(serde_json::Value::Null)
        };
        let mut j = serde_json::json!({
            "compile_ms": num(self.compile_ms),
            "primal_ns": num(self.primal_ns),
            "gradient_ns": num(self.gradient_ns),
            "ratio": num(self.gradient_ns / self.primal_ns),
            "iters": self.iters,
        });
        if let (Some(t), Some(o)) = (self.jvp_ns, j.as_object_mut()) {
            o.insert("jvp_ns".into(), num(t));
            o.insert("jvp_ratio".into(), num(t / self.primal_ns));
        }
        j.to_string()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// An owned copy of an argument that the slice interface can lend.
enum Owned {
    F64(f64),
    I64(i64),
    Bool(bool),
    F64s(Vec<f64>, Vec<usize>),
    I64s(Vec<i64>, Vec<usize>),
}

fn owned(v: &Value) -> Option<Owned> {
    Some(match v {
        Value::F64(x) => Owned::F64(*x),
        Value::I64(x) => Owned::I64(*x),
        Value::Bool(x) => Owned::Bool(*x),
        Value::Array(a) => match &*a.data.borrow() {
            ArrayData::F64(d) => Owned::F64s(d.clone(), a.shape.clone()),
            ArrayData::I64(d) => Owned::I64s(d.clone(), a.shape.clone()),
            ArrayData::Bool(_) => return None,
        },
        _ => return None,
    })
}

fn lend(o: &mut Owned) -> Arg<'_> {
    match o {
        Owned::F64(x) => Arg::F64(*x),
        Owned::I64(x) => Arg::I64(*x),
        Owned::Bool(x) => Arg::Bool(*x),
        Owned::F64s(d, s) => Arg::F64Array(d, s),
        Owned::I64s(d, s) => Arg::I64Array(d, s),
    }
}

/// Compiles `source`, then times `iters` primal and gradient calls of `name` at `args`.
/// The gradient is taken with the parameters' `kinds` (constants are not differentiated;
/// see [`crate::ArgKind`]); the JVP along all-ones tangents of every differentiable one.
/// With `specialise`, the function is compiled for the shapes of `args`
/// ([`Program::specialised`]), and compiling is timed with that step. On
/// [`crate::Engine::Interpreter`] the reference interpreter runs the calls (and
/// compiling is source to IR and derived rules); no JVP is timed there.
#[allow(clippy::too_many_arguments)]
pub fn bench(
    file: &str,
    source: &str,
    name: Option<&str>,
    args_json: &str,
    iters: usize,
    kinds: &[crate::ArgKind],
    limits: &Limits,
    source_limits: &crate::SourceLimits,
    specialise: bool,
    engine: crate::Engine,
) -> Result<BenchReport, ApiError> {
    // Arguments are read first: decoding JSON is not compiling.
    let parsed =
        Program::compile_with(file, source, source_limits).map_err(|e| ApiError::Compile(e.render()))?;
    let pid = parsed.entry(name).map_err(|e| ApiError::Args(e.to_string()))?;
    let args =
        crate::json::decode_args(&parsed.module, pid, args_json).map_err(|e| ApiError::Args(e.message))?;
    let shapes = Program::shapes_of(&args);
    let compile = |file: &str, source: &str| -> Result<Program, crate::CompileError> {
        let p = Program::compile_with(file, source, source_limits)?;
        let p = match (specialise, p.entry(name)) {
            (true, Ok(id)) => p.specialised(id, &shapes)?,
            _ => p,
        };
        Ok(p.with_engine(engine))
    };
    if engine == crate::Engine::Interpreter {
        return bench_interpreted(&compile, file, source, name, &args, iters, kinds, limits);
    }
    // Compiling — source to native code for the function and its gradient — is timed
    // like the calls: the median of several rounds (the first round of a process also
    // pays one-time start-up costs, which a long-running embedding pays once).
    let mut compiles = Vec::new();
    for _ in 0..COMPILE_ROUNDS - 1 {
        let t = Instant::now();
        let p = compile(file, source).map_err(|e| ApiError::Compile(e.render()))?;
        let pid = p.entry(name).map_err(|e| ApiError::Args(e.to_string()))?;
        let fname = p.module.funcs[pid].name.clone();
        p.function(&fname)?.with_kinds(kinds).prepare()?;
        compiles.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let start = Instant::now();
    let program = compile(file, source).map_err(|e| ApiError::Compile(e.render()))?;
    let id = program.entry(name).map_err(|e| ApiError::Args(e.to_string()))?;
    let fname = program.module.funcs[id].name.clone();
    let function = program.function(&fname)?.with_kinds(kinds).with_limits(limits.clone());
    let constant: Vec<bool> = (0..program.module.funcs[id].params.len())
        .map(|i| crate::forward::kind_of(kinds, i) == crate::ArgKind::Const)
        .collect();
    let mut prepared = function.prepare()?;
    let flat: Option<Vec<Owned>> = args.iter().map(owned).collect();
    let returns_f64 = program.module.funcs[id].ret == Some(mcir_ir::TypeTable::F64);
    // Compiling means: source to native code for the function and its gradient.
    let mut grads: Vec<Vec<f64>> = Vec::new();
    if let (Some(flat), true) = (&flat, returns_f64) {
        prepared.compile_gradient()?;
        grads = flat
            .iter()
            .map(|o| if let Owned::F64s(d, _) = o { vec![0.0; d.len()] } else { Vec::new() })
            .collect();
    }
    compiles.push(start.elapsed().as_secs_f64() * 1e3);
    let compile_ms = median(compiles);
    // One untimed round of each warms caches and sizes the arenas.
    if let (Some(flat), true) = (&flat, returns_f64) {
        let mut work: Vec<Owned> = flat.iter().map(clone_owned).collect();
        let mut lent: Vec<Arg<'_>> = work.iter_mut().map(lend).collect();
        prepared.call(&mut lent)?;
        let mut work: Vec<Owned> = flat.iter().map(clone_owned).collect();
        gradient_once(&mut prepared, &mut work, &mut grads, &constant)?;
    } else {
        function.vjp(&crate::grad::deep_copy_all(&args), seed(&program, id), &[])?;
    }
    // Forward mode along all-ones tangents, for functions of scalars and arrays.
    let tangents: Option<Vec<Owned>> = match (&flat, returns_f64) {
        (Some(flat), true) => Some(
            flat.iter()
                .filter_map(|o| match o {
                    Owned::F64(_) => Some(Owned::F64(1.0)),
                    Owned::F64s(d, s) => Some(Owned::F64s(vec![1.0; d.len()], s.clone())),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    };
    if let (Some(flat), Some(tangents)) = (&flat, &tangents) {
        prepared.compile_tangent()?;
        jvp_once(&mut prepared, flat, tangents)?;
    }
    let iters = iters.max(1);
    let mut primal = Vec::with_capacity(iters);
    let mut gradient = Vec::with_capacity(iters);
    let mut jvp = Vec::with_capacity(iters);
    match (&flat, returns_f64) {
        (Some(flat), true) => {
            for _ in 0..iters {
                // Fresh arguments each time (the function may update them), outside the timing.
                let mut work: Vec<Owned> = flat.iter().map(clone_owned).collect();
                let mut lent: Vec<Arg<'_>> = work.iter_mut().map(lend).collect();
                let t = Instant::now();
                prepared.call(&mut lent)?;
                primal.push(t.elapsed().as_nanos() as f64);
                drop(lent);
                let mut work: Vec<Owned> = flat.iter().map(clone_owned).collect();
                let t = Instant::now();
                gradient_once(&mut prepared, &mut work, &mut grads, &constant)?;
                gradient.push(t.elapsed().as_nanos() as f64);
                if let Some(tangents) = &tangents {
                    jvp.push(jvp_once(&mut prepared, flat, tangents)?);
                }
            }
        }
        _ => {
            for _ in 0..iters {
                let a = crate::grad::deep_copy_all(&args);
                let t = Instant::now();
                function.call(&a)?;
                primal.push(t.elapsed().as_nanos() as f64);
                let a = crate::grad::deep_copy_all(&args);
                let t = Instant::now();
                function.vjp(&a, seed(&program, id), &[])?;
                gradient.push(t.elapsed().as_nanos() as f64);
            }
        }
    }
    let jvp_ns = (!jvp.is_empty()).then(|| median(jvp));
    Ok(BenchReport { compile_ms, primal_ns: median(primal), gradient_ns: median(gradient), jvp_ns, iters })
}

/// [`bench`] on the reference interpreter: the program compiled (to IR, with the rules
/// a gradient takes) and called through [`crate::Function`].
#[allow(clippy::too_many_arguments)]
fn bench_interpreted(
    compile: &dyn Fn(&str, &str) -> Result<Program, crate::CompileError>,
    file: &str,
    source: &str,
    name: Option<&str>,
    args: &[Value],
    iters: usize,
    kinds: &[crate::ArgKind],
    limits: &Limits,
) -> Result<BenchReport, ApiError> {
    let mut compiles = Vec::new();
    let mut last = None;
    for _ in 0..COMPILE_ROUNDS {
        let t = Instant::now();
        let program = compile(file, source).map_err(|e| ApiError::Compile(e.render()))?;
        let id = program.entry(name).map_err(|e| ApiError::Args(e.to_string()))?;
        let fname = program.module.funcs[id].name.clone();
        program
            .differentiate_with(&crate::AdOptions::default(), Some(id), kinds)
            .map_err(|e| ApiError::Derive(e.to_string()))?;
        compiles.push(t.elapsed().as_secs_f64() * 1e3);
        last = Some((program, id, fname));
    }
    let Some((program, id, fname)) = last else { return Err(ApiError::Args("nothing to run".into())) };
    let function = program.function(&fname)?.with_kinds(kinds).with_limits(limits.clone());
    let iters = iters.max(1);
    let (mut primal, mut gradient) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
    for _ in 0..iters {
        let a = crate::grad::deep_copy_all(args);
        let t = Instant::now();
        function.call(&a)?;
        primal.push(t.elapsed().as_nanos() as f64);
        let a = crate::grad::deep_copy_all(args);
        let t = Instant::now();
        function.vjp(&a, seed(&program, id), &[])?;
        gradient.push(t.elapsed().as_nanos() as f64);
    }
    Ok(BenchReport {
        compile_ms: median(compiles),
        primal_ns: median(primal),
        gradient_ns: median(gradient),
        jvp_ns: None,
        iters,
    })
}

fn seed(program: &Program, id: mcir_ir::FuncId) -> Option<Value> {
    (program.module.funcs[id].ret == Some(mcir_ir::TypeTable::F64)).then_some(Value::F64(1.0))
}

fn clone_owned(o: &Owned) -> Owned {
    match o {
        Owned::F64(x) => Owned::F64(*x),
        Owned::I64(x) => Owned::I64(*x),
        Owned::Bool(x) => Owned::Bool(*x),
        Owned::F64s(d, s) => Owned::F64s(d.clone(), s.clone()),
        Owned::I64s(d, s) => Owned::I64s(d.clone(), s.clone()),
    }
}

/// One JVP on fresh copies of the arguments and tangents; returns its time in ns.
fn jvp_once(prepared: &mut crate::Prepared<'_>, flat: &[Owned], tangents: &[Owned]) -> Result<f64, ApiError> {
    let mut work: Vec<Owned> = flat.iter().map(clone_owned).collect();
    let mut dwork: Vec<Owned> = tangents.iter().map(clone_owned).collect();
    let mut lent: Vec<Arg<'_>> = work.iter_mut().map(lend).collect();
    let mut dlent: Vec<Arg<'_>> = dwork.iter_mut().map(lend).collect();
    let t = Instant::now();
    prepared.value_and_derivative(&mut lent, &mut dlent)?;
    Ok(t.elapsed().as_nanos() as f64)
}

/// One gradient call; a constant parameter's slot is skipped.
fn gradient_once(
    prepared: &mut crate::Prepared<'_>,
    work: &mut [Owned],
    grads: &mut [Vec<f64>],
    constant: &[bool],
) -> Result<f64, ApiError> {
    let mut scalar_grads = vec![0.0; work.len()];
    let mut lent: Vec<Arg<'_>> = work.iter_mut().map(lend).collect();
    let mut slots: Vec<GradSlot<'_>> = grads
        .iter_mut()
        .zip(scalar_grads.iter_mut())
        .zip(lent.iter())
        .enumerate()
        .map(|(i, ((g, s), a))| match a {
            _ if constant.get(i).copied().unwrap_or(false) => GradSlot::Skip,
            Arg::F64(_) => GradSlot::F64(s),
            Arg::F64Array(..) => GradSlot::Array(g),
            _ => GradSlot::Skip,
        })
        .collect();
    prepared.value_and_gradient(&mut lent, &mut slots)
}
