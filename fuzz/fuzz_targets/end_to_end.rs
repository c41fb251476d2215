//! End to end on generated programs: the input's bytes choose a program from
//! `mcir_gen`; it must compile, run to the same result on the interpreter and on native
//! code, and its gradient must agree between the two engines.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value as Json;

/// Whether two JSON documents agree: numbers within 1e-12 relative (native code may
/// order a reduction differently), everything else exactly.
fn agree(a: &str, b: &str) -> bool {
    fn same(a: &Json, b: &Json) -> bool {
        match (a, b) {
            (Json::Number(x), Json::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
                x == y || (x - y).abs() <= 1e-12 * (x.abs() + y.abs())
            }
            (Json::Array(x), Json::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q)),
            (Json::Object(x), Json::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            _ => a == b,
        }
    }
    match (serde_json::from_str::<Json>(a), serde_json::from_str::<Json>(b)) {
        (Ok(x), Ok(y)) => same(&x, &y),
        _ => a == b,
    }
}

fuzz_target!(|data: &[u8]| {
    let g = mcir_gen::generate_from_bytes(data);
    let program = match mcir::Program::compile("generated.mcir", &g.source) {
        Ok(p) => p,
        Err(e) => panic!("a generated program does not compile:\n{}\n{}", e.render(), g.source),
    };
    let Ok(main) = program.entry(Some("main")) else { panic!("no main:\n{}", g.source) };
    let limits = mcir::Limits { timeout: Some(std::time::Duration::from_secs(10)), ..Default::default() };
    let interp = program.clone().with_engine(mcir::Engine::Interpreter);
    let native = program.run_json(main, &g.args, &limits);
    let reference = interp.run_json(main, &g.args, &limits);
    match (&native, &reference) {
        (Ok(a), Ok(b)) if agree(a, b) => {}
        _ => panic!("the engines disagree:\nnative: {native:?}\ninterpreter: {reference:?}\n{}\nargs: {}", g.source, g.args),
    }
    let native = program.grad_json(main, &g.args, None, None, &limits);
    let reference = interp.grad_json(main, &g.args, None, None, &limits);
    let same = match (&native, &reference) {
        (Ok(a), Ok(b)) => agree(a, b),
        (Err(_), Err(_)) => true,
        _ => false,
    };
    if !same {
        panic!("the gradients disagree:\nnative: {native:?}\ninterpreter: {reference:?}\n{}\nargs: {}", g.source, g.args);
    }
});
