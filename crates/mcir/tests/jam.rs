//! Loops around reductions run side by side (`mcir_ir::jam`, which native code compiles)
//! compute what they computed before, bit for bit. Every program of the corpus with
//! arguments, and the GradBench programs on small inputs of awkward sizes, run on the
//! interpreter as written and jammed (primal, and gradient where the result is an
//! `f64`; as written and compiled for the arguments' shapes) and give identical bits
//! and identical errors. The test also checks that
//! jamming happens (in the gmm's triangular product among others), and that loops it
//! must leave alone are left alone.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcir::ir::jam::{jam_reductions, jammed_loops};
use mcir::ir::{verify, FuncId, Module};
use mcir::{AdOptions, Engine, Limits, Program, Val};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cases(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("tests").join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mcir"))
        .collect();
    out.sort();
    out
}

fn header(text: &str, key: &str) -> Option<String> {
    let tag = format!("// {key}:");
    text.lines().find_map(|l| l.strip_prefix(&tag)).map(|s| s.trim().to_string())
}

/// `module` with every function jammed where it can be, and how many were.
fn jammed(module: &Module) -> (Module, usize) {
    let mut out = module.clone();
    let mut count = 0;
    for (id, f) in module.funcs.iter() {
        if let Some(j) = jam_reductions(f) {
            if let Err(e) = verify::verify_function(module, &j) {
                panic!(
                    "jamming {} broke the IR: {e}\n{}",
                    f.name,
                    mcir::ir::print::print_function(module, &j)
                );
            }
            out.funcs[id] = j;
            count += 1;
        }
    }
    (out, count)
}

/// What a call gave, in a form compared bit for bit: the value and the arguments'
/// states after the call, or the error.
fn outcome(module: &Module, func: FuncId, args: &[Val]) -> String {
    let args = mcir::grad::deep_copy_all(args);
    match mcir_interp::Interpreter::new(module, Limits::default()).call(func, args.clone()) {
        Ok(v) => {
            let states: Vec<String> = args.iter().map(bits_of).collect();
            format!("{} | {}", v.as_ref().map_or("()".into(), bits_of), states.join(", "))
        }
        Err(e) => format!("error: {e}"),
    }
}

/// A value with every `f64` written as its bits.
fn bits_of(v: &Val) -> String {
    let list = |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join(",");
    match v {
        Val::F64(x) => format!("{:016x}", x.to_bits()),
        Val::I64(i) => i.to_string(),
        Val::Bool(b) => b.to_string(),
        Val::Array(a) => {
            let data = match &*a.data.borrow() {
                mcir_interp::ArrayData::F64(v) => {
                    list(&mut v.iter().map(|x| format!("{:016x}", x.to_bits())))
                }
                mcir_interp::ArrayData::I64(v) => list(&mut v.iter().map(|x| x.to_string())),
                mcir_interp::ArrayData::Bool(v) => list(&mut v.iter().map(|x| x.to_string())),
            };
            format!("{:?}[{data}]", a.shape)
        }
        Val::Ref(r) => format!("ref({})", bits_of(&r.borrow())),
        Val::Agg(items) => format!("({})", list(&mut items.iter().map(bits_of))),
        Val::Mut(items) => format!("mut({})", list(&mut items.borrow().iter().map(bits_of))),
        Val::Stack(_) => "stack".into(),
        Val::Unit => "()".into(),
    }
}

/// Runs `func` of `program` on `args` as written and jammed, primal and (for an `f64`
/// result) gradient, and returns how many functions jamming changed; differences are
/// pushed to `failures`.
fn compare(name: &str, program: &Program, func: FuncId, args: &[Val], failures: &mut Vec<String>) -> usize {
    let mut differentiated = program.differentiate(&AdOptions::default()).ok();
    let driver = differentiated.as_mut().and_then(|d| {
        let returns_f64 = program.module().funcs[func].ret == Some(mcir::ir::TypeTable::F64);
        returns_f64.then(|| d.driver(func).ok()).flatten()
    });
    let module = differentiated.as_ref().map_or(program.module(), |d| d.module());
    let (jam, count) = jammed(module);
    let mut runs = vec![(func, args.to_vec())];
    if let Some(driver) = driver {
        let mut with_seed = args.to_vec();
        with_seed.push(Val::F64(1.0));
        runs.push((driver, with_seed));
    }
    for (f, args) in runs {
        let written = outcome(module, f, &args);
        let changed = outcome(&jam, f, &args);
        if written != changed {
            failures.push(format!(
                "{name} ({}):\n  as written: {written}\n  jammed:     {changed}",
                module.funcs[f].name
            ));
        }
    }
    count
}

#[test]
fn jammed_loops_compute_the_same_bits() {
    let mut failures = Vec::new();
    let mut jammed_functions = 0;
    let mut compared = 0;
    for path in cases("programs").into_iter().chain(cases("check")) {
        let text = std::fs::read_to_string(&path).unwrap();
        // Programs that print would print here.
        let Some(args) = header(&text, "args").filter(|_| !text.contains("print(")) else { continue };
        let Ok(program) = Program::compile(&path.display().to_string(), &text) else { continue };
        let Ok(func) = program.entry(header(&text, "fn").as_deref()) else { continue };
        let Ok(args) = mcir::json::decode_args(program.module(), func, &args) else { continue };
        // As written, and compiled for the arguments' shapes, where the extents bounds
        // checks compare with are known (GradBench's code).
        let Ok(specialised) = program.specialised(func, &Program::shapes_of(&args)) else { continue };
        for (what, program) in [("generic", &program), ("specialised", &specialised)] {
            let name = format!("{} ({what})", path.display());
            jammed_functions += compare(&name, program, func, &args, &mut failures);
            compared += 1;
        }
    }
    assert!(compared > 50, "only {compared} programs compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(jammed_functions > 0, "no program of the corpus has a loop to jam");
}

#[test]
fn loops_that_may_run_side_by_side_are_found_and_the_rest_left_alone() {
    let path = root().join("tests/programs/side_by_side_reductions.mcir");
    let program = Program::compile_file(&path).unwrap();
    let main = program.entry(None).unwrap();
    let f = &program.module().funcs[main];
    let factors: Vec<usize> = jammed_loops(f).iter().map(|&(_, factor)| factor).collect();
    // `triangle`, `matvec` and `band` four at a time, `two_sums` (two sums) two at a
    // time; not `in_place` (its suffix writes what its body reads), nor `none` (one sum
    // over both loops), nor the loops filling the arrays (no sum).
    assert_eq!(factors, [4, 4, 4, 2], "{}", mcir::ir::print::print_function(program.module(), f));
}

/// Whether two arrays of `f64` agree to within rounding (1e-12 of the largest element).
fn close(a: &Val, b: &Val) -> bool {
    let (Val::Array(a), Val::Array(b)) = (a, b) else { return false };
    let (mcir_interp::ArrayData::F64(x), mcir_interp::ArrayData::F64(y)) =
        (&*a.data.borrow(), &*b.data.borrow())
    else {
        return false;
    };
    let scale = x.iter().chain(y).fold(1.0f64, |m, v| m.max(v.abs()));
    x.len() == y.len() && x.iter().zip(y).all(|(p, q)| (p - q).abs() <= 1e-12 * scale)
}

/// A deterministic stream of numbers in (-1, 1) for the GradBench inputs.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    fn matrix(&mut self, rows: usize, cols: usize) -> String {
        let row = |s: &mut Numbers| {
            format!("[{}]", (0..cols).map(|_| s.next().to_string()).collect::<Vec<_>>().join(","))
        };
        format!("[{}]", (0..rows).map(|_| row(self)).collect::<Vec<_>>().join(","))
    }

    fn vector(&mut self, n: usize) -> String {
        format!("[{}]", (0..n).map(|_| self.next().to_string()).collect::<Vec<_>>().join(","))
    }
}

#[test]
fn the_gmm_triangle_is_jammed_and_computes_the_same_bits() {
    let path = root().join("benches/gradbench/gmm.mcir");
    let program = Program::compile_file(&path).unwrap();
    let func = program.entry(Some("objective")).unwrap();
    let mut failures = Vec::new();
    let mut numbers = Numbers(7);
    // Dimensions that leave 0 to 3 rows to the loop as written, and a point count of 1.
    // d = 40 is jammed in code compiled for its shape too (longer inner loops).
    for (d, k, n) in
        [(1, 1, 1), (2, 2, 3), (5, 3, 4), (6, 2, 2), (7, 3, 5), (8, 1, 3), (11, 2, 2), (40, 2, 3)]
    {
        let args = format!(
            "[{}, {}, {}, {}, {}, 2, 1.5]",
            numbers.vector(k),
            numbers.matrix(k, d),
            numbers.matrix(k, d),
            numbers.matrix(k, d * (d - 1) / 2),
            numbers.matrix(n, d)
        );
        let args = mcir::json::decode_args(program.module(), func, &args).unwrap();
        let name = format!("gmm d={d} k={k} n={n}");
        let count = compare(&name, &program, func, &args, &mut failures);
        assert!(count >= 2, "the gmm's primal and forward pass should both be jammed, {count} were");
        // Native code, which jams, against the interpreter running the IR as written:
        // the same value bit for bit, and the same gradient up to the partial sums
        // native reverse passes may use; as written and compiled for these shapes.
        let specialised = program.specialised(func, &Program::shapes_of(&args)).unwrap();
        for program in [&program, &specialised] {
            let run = |engine: Engine| {
                let p = program.clone().with_engine(engine);
                p.function("objective").unwrap().value_and_gradient(&args).unwrap()
            };
            let (native, interpreted) = (run(Engine::Jit), run(Engine::Interpreter));
            if native.0.to_bits() != interpreted.0.to_bits() {
                failures.push(format!("{name}: native value {} against {}", native.0, interpreted.0));
            }
            for (g, (a, b)) in native.1.iter().zip(&interpreted.1).enumerate() {
                let (a, b) = (bits_of(a), bits_of(b));
                if a != b && !close(&native.1[g], &interpreted.1[g]) {
                    failures.push(format!("{name}: gradient {g} native {a} against {b}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
