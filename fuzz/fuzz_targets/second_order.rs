//! Second order on generated programs: the input's bytes choose a program from
//! `mcir_gen` and a direction; its Hessian-vector product (forward mode over the derived
//! reverse pass) must agree between native code and the interpreter.

#![no_main]

use libfuzzer_sys::fuzz_target;

/// Whether two lists of values agree: `f64`s within 1e-9 relative (native reverse
/// passes may add an adjoint's terms as two partial sums), everything else exactly.
fn agree(a: &[mcir::Val], b: &[mcir::Val]) -> bool {
    fn same(a: &mcir::Val, b: &mcir::Val) -> bool {
        use mcir::Val;
        match (a, b) {
            (Val::F64(x), Val::F64(y)) => x == y || (x - y).abs() <= 1e-9 * (1.0 + x.abs().max(y.abs())),
            (Val::Array(x), Val::Array(y)) => {
                let (p, q) = (x.data.borrow(), y.data.borrow());
                let floats = |d: &mcir_interp::ArrayData| match d {
                    mcir_interp::ArrayData::F64(v) => v.iter().map(|&f| Val::F64(f)).collect(),
                    _ => Vec::new(),
                };
                x.shape == y.shape && agree(&floats(&p), &floats(&q))
            }
            (Val::Ref(x), Val::Ref(y)) => same(&x.borrow(), &y.borrow()),
            (Val::Agg(x), Val::Agg(y)) if !x.is_empty() || !y.is_empty() => agree(x, y),
            (Val::Mut(x), Val::Mut(y)) => agree(&x.borrow(), &y.borrow()),
            // `()` is `Unit` or the empty tuple.
            (Val::Unit | Val::Agg(_), Val::Unit | Val::Agg(_)) => {
                let empty = |v: &Val| matches!(v, Val::Unit) || matches!(v, Val::Agg(x) if x.is_empty());
                empty(a) && empty(b)
            }
            _ => false,
        }
    }
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
}

fuzz_target!(|data: &[u8]| {
    let g = mcir_gen::generate_from_bytes(data);
    let program = match mcir::Program::compile("generated.mcir", &g.source) {
        Ok(p) => p,
        Err(e) => panic!("a generated program does not compile:\n{}\n{}", e.render(), g.source),
    };
    let Ok(main) = program.entry(Some("main")) else { panic!("no main:\n{}", g.source) };
    let module = program.module();
    let Ok(args) = mcir::json::decode_args(module, main, &g.args) else { panic!("bad arguments: {}", g.args) };
    // The direction: from the bytes' tail, each in about -1..1.
    let mut k = 0usize;
    let mut draws = std::iter::from_fn(|| {
        k += 1;
        let b = data.get(data.len().saturating_sub(k)).copied().unwrap_or(7);
        Some((b as f64 - 127.5) / 128.0)
    });
    let direction: Vec<mcir::Val> = module.funcs[main]
        .params
        .iter()
        .zip(&args)
        .map(|(&t, a)| mcir::check::tangent_from(&module.types, t, a, &mut draws))
        .collect();
    let limits = mcir::Limits { timeout: Some(std::time::Duration::from_secs(10)), ..Default::default() };
    let interp = program.clone().with_engine(mcir::Engine::Interpreter);
    let copies = |a: &[mcir::Val]| mcir::grad::deep_copy_all(a);
    let native = program.hvp(main, &copies(&args), &direction, &limits);
    let reference = interp.hvp(main, &copies(&args), &direction, &limits);
    let same = match (&native, &reference) {
        (Ok(a), Ok(b)) => {
            (a.value == b.value || (a.value - b.value).abs() <= 1e-12 * a.value.abs().max(1.0))
                && agree(&a.gradient, &b.gradient)
                && agree(&a.hvp, &b.hvp)
        }
        (Err(_), Err(_)) => true,
        _ => false,
    };
    if !same {
        panic!(
            "the HVPs disagree:\nnative: {native:?}\ninterpreter: {reference:?}\n{}\nargs: {}",
            g.source, g.args
        );
    }
});
