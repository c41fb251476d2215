//! Property tests of the promise that no input makes `mcc` panic or crash: random bytes
//! and random token sequences for the front end, token-level mutations of the corpus,
//! random (often wrong) argument JSON for `mcc run`, and pathological nesting.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use mcir::ir::{Scalar, Type, TypeId};
use std::io::Write;
use support::*;

/// Compiles `text` through the CLI, reading it from stdin, and checks the contract.
fn compile_text(what: &str, text: &[u8]) -> Result<mcir_cli::Outcome, String> {
    let words: Vec<std::ffi::OsString> = vec!["mcc".into(), "ir".into(), "-".into()];
    let out = std::panic::catch_unwind(|| mcir_cli::run(words, &mut &text[..]))
        .map_err(|_| format!("{what}: panicked on {:?}", String::from_utf8_lossy(text)))?;
    check_outcome(what, &out).map(|_| out)
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(1);
    let alphabet = b"fn let mut (){}[];,.:+-*/%<>=!&|0123456789._eE abcxyz\n\"'#$@\x00\xff";
    for i in 0..1500 {
        let len = rng.below(120);
        let bytes: Vec<u8> = (0..len)
            .map(|_| if rng.chance(0.1) { rng.next() as u8 } else { alphabet[rng.below(alphabet.len())] })
            .collect();
        compile_text(&format!("random bytes #{i}"), &bytes).unwrap();
    }
}

const TOKENS: &[&str] = &[
    "fn", "struct", "mut", "let", "const", "if", "else", "while", "for", "in", "break", "continue", "return",
    "true", "false", "ref", "rule", "x", "y", "f", "main", "f64", "i64", "bool", "f64[]", "f64[,]", "0", "1",
    "2.5", "1e3", "0.1", "(", ")", "[", "]", "{", "}", ",", ";", ":", ".", "..", "->", "=", "+=", "-=", "*=",
    "/=", "+", "-", "*", "/", "%", "**", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!", "|", "zeros",
    "sum", "len", "sin",
];

#[test]
fn random_token_sequences_never_panic() {
    let mut rng = Rng(2);
    for i in 0..1500 {
        let n = rng.below(60);
        let mut text = String::new();
        if rng.chance(0.5) {
            text.push_str("fn main(x: f64) -> f64 { ");
        }
        for _ in 0..n {
            text.push_str(TOKENS[rng.below(TOKENS.len())]);
            text.push(' ');
        }
        compile_text(&format!("token sequence #{i}"), text.as_bytes()).unwrap();
    }
}

#[test]
fn token_mutations_of_the_corpus_never_panic() {
    let mut rng = Rng(3);
    let programs: Vec<String> =
        cases("programs").iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    for i in 0..600 {
        let text = &programs[rng.below(programs.len())];
        let mut toks: Vec<&str> = text.split_whitespace().collect();
        for _ in 0..1 + rng.below(3) {
            if toks.is_empty() {
                break;
            }
            let k = rng.below(toks.len());
            match rng.below(4) {
                0 => {
                    toks.remove(k);
                }
                1 => toks.insert(k, TOKENS[rng.below(TOKENS.len())]),
                2 => toks[k] = TOKENS[rng.below(TOKENS.len())],
                _ => {
                    let j = rng.below(toks.len());
                    toks.swap(k, j);
                }
            }
        }
        let mutated = toks.join(" ");
        let out = compile_text(&format!("mutation #{i}"), mutated.as_bytes()).unwrap();
        if out.code == 0 {
            // The mutated program compiled: its printed IR must re-parse and verify.
            let module = mcir::ir::parse_module(&out.stdout).unwrap_or_else(|e| panic!("mutation #{i}: {e}"));
            mcir::ir::verify_module(&module).unwrap_or_else(|e| panic!("mutation #{i}: {e}"));
        }
    }
}

/// A random JSON value for type `ty`, usually well-formed, sometimes subtly wrong.
fn random_json(rng: &mut Rng, module: &mcir::Module, ty: TypeId, depth: usize) -> String {
    if rng.chance(0.04) {
        // A value of the wrong kind altogether.
        return [
            "null",
            "true",
            "\"NaN\"",
            "[]",
            "{}",
            "1",
            "2.5",
            "[[1.0], [2.0, 3.0]]",
            "\"x\"",
            "9223372036854775807",
        ][rng.below(10)]
        .to_string();
    }
    let types = &module.types;
    match types.get(ty).clone() {
        Type::Scalar(Scalar::F64) => match rng.below(12) {
            0 => "\"Infinity\"".into(),
            1 => "\"NaN\"".into(),
            2 => "3".into(),
            _ => format!("{:?}", rng.normal()),
        },
        Type::Scalar(Scalar::I64) => match rng.below(14) {
            0 => i64::MAX.to_string(),
            1 => i64::MIN.to_string(),
            2 => "-1".into(),
            _ => (rng.below(6) as i64).to_string(),
        },
        Type::Scalar(Scalar::Bool) => if rng.chance(0.5) { "true" } else { "false" }.into(),
        Type::Array { elem, rank } => {
            let dims: Vec<usize> = (0..rank).map(|_| rng.below(5)).collect();
            let elem_ty = mcir::ir::TypeTable::scalar(elem);
            fn nest(rng: &mut Rng, m: &mcir::Module, t: TypeId, dims: &[usize], d: usize) -> String {
                let Some((&n, rest)) = dims.split_first() else { return random_json(rng, m, t, d + 1) };
                // Occasionally a ragged row.
                let n = if rng.chance(0.03) { n + 1 } else { n };
                let items: Vec<String> = (0..n).map(|_| nest(rng, m, t, rest, d)).collect();
                format!("[{}]", items.join(", "))
            }
            nest(rng, module, elem_ty, &dims, depth)
        }
        Type::Ref(inner) | Type::Stack(inner) => random_json(rng, module, inner, depth + 1),
        Type::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(|&t| random_json(rng, module, t, depth + 1)).collect();
            format!("[{}]", parts.join(", "))
        }
        Type::Struct(_) => {
            let (_, def) = types.as_struct(ty).unwrap();
            let mut parts: Vec<String> = Vec::new();
            for (n, t) in &def.fields {
                if !rng.chance(0.03) {
                    parts.push(format!("\"{n}\": {}", random_json(rng, module, *t, depth + 1)));
                }
            }
            format!("{{{}}}", parts.join(", "))
        }
    }
}

#[test]
fn random_arguments_to_mcc_run_never_panic() {
    let mut rng = Rng(4);
    let mut args_file = tempfile_path("random_args.json");
    let (mut runs, mut successes) = (0, 0);
    for path in cases("programs") {
        let text = std::fs::read_to_string(&path).unwrap();
        let program = mcir::Program::compile("p.mcir", &text).unwrap();
        let func = program.entry(header(&text, "fn").as_deref()).unwrap();
        let params = program.module().funcs[func].params.clone();
        for trial in 0..8 {
            let mut parts: Vec<String> =
                params.iter().map(|&t| random_json(&mut rng, program.module(), t, 0)).collect();
            if rng.chance(0.05) {
                parts.pop();
            }
            let args = format!("[{}]", parts.join(", "));
            std::fs::File::create(&args_file).unwrap().write_all(args.as_bytes()).unwrap();
            let arg_word = format!("@{}", args_file.display());
            let out = run_case(&path, &text, Some(&arg_word), &["--timeout", "0.5"]);
            assert!(!out.stderr.contains("cannot be used multiple times"), "{}", out.stderr);
            check_outcome(&format!("{} trial {trial} with {args}", rel(&path)), &out).unwrap();
            runs += 1;
            if out.code == 0 {
                successes += 1;
                serde_json::from_str::<serde_json::Value>(&out.stdout).expect("stdout is one JSON document");
            }
        }
    }
    // Most generated arguments are well-formed: a test whose runs all fail early tests nothing.
    assert!(successes * 4 >= runs, "only {successes} of {runs} runs succeeded");
    args_file.set_extension("");
}

#[test]
fn random_arguments_and_seeds_to_mcc_grad_and_check_never_panic() {
    let mut rng = Rng(5);
    let (mut runs, mut successes) = (0, 0);
    for path in cases("programs").into_iter().chain(cases("check")) {
        let text = std::fs::read_to_string(&path).unwrap();
        let program = mcir::Program::compile("p.mcir", &text).unwrap();
        let func = program.entry(header(&text, "fn").as_deref()).unwrap();
        let f = &program.module().funcs[func];
        let (params, ret) = (f.params.clone(), f.ret);
        let p = path.to_str().unwrap();
        for trial in 0..4 {
            let args = header(&text, "args").filter(|_| rng.chance(0.5)).unwrap_or_else(|| {
                let parts: Vec<String> =
                    params.iter().map(|&t| random_json(&mut rng, program.module(), t, 0)).collect();
                format!("[{}]", parts.join(", "))
            });
            let mut words = vec!["grad".to_string(), p.to_string(), "--args".into(), args.clone()];
            if let Some(fname) = header(&text, "fn") {
                words.extend(["--fn".into(), fname]);
            }
            if let (Some(r), true) = (ret, rng.chance(0.5)) {
                words.extend(["--seed".into(), random_json(&mut rng, program.module(), r, 0)]);
            }
            if rng.chance(0.5) {
                let parts: Vec<String> = params
                    .iter()
                    .map(|&t| {
                        if rng.chance(0.4) {
                            "null".into()
                        } else {
                            random_json(&mut rng, program.module(), t, 0)
                        }
                    })
                    .collect();
                words.extend(["--seed-args".into(), format!("[{}]", parts.join(", "))]);
            }
            words.extend(["--timeout".into(), "0.5".into()]);
            let refs: Vec<&str> = words.iter().map(|w| w.as_str()).collect();
            let out = mcc(&refs);
            check_outcome(&format!("{} grad trial {trial}: {words:?}", rel(&path)), &out).unwrap();
            runs += 1;
            if out.code == 0 {
                successes += 1;
                serde_json::from_str::<serde_json::Value>(&out.stdout).expect("stdout is one JSON document");
            }
            if trial == 0 {
                let mut words = vec!["check".to_string(), p.to_string(), "--trials".into(), "1".into()];
                words.extend(["--args".into(), args]);
                if let Some(fname) = header(&text, "fn") {
                    words.extend(["--fn".into(), fname]);
                }
                words.extend(["--timeout".into(), "0.5".into()]);
                let refs: Vec<&str> = words.iter().map(|w| w.as_str()).collect();
                let out = mcc(&refs);
                check_outcome(&format!("{} check: {words:?}", rel(&path)), &out).unwrap();
            }
        }
    }
    assert!(successes * 5 >= runs, "only {successes} of {runs} gradients succeeded");
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcir-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn malformed_argument_json_is_a_usage_error() {
    let prog = root().join("tests/programs/dot_sum.mcir");
    let p = prog.to_str().unwrap();
    for bad in [
        "",
        "[",
        "[1.0,",
        "{\"a\": 1}",
        "[NaN]",
        "nul",
        "[1e999999]",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    ] {
        let out = mcc(&["run", p, "--args", bad]);
        assert_eq!(out.code, 2, "args {bad:?}: {}", out.stderr);
        assert!(out.stderr.starts_with("error:"), "{}", out.stderr);
    }
}

/// `mcc grad` on a function whose result is not an `f64` says which seed to give: the
/// cotangent of a result with a derivative, null for one without.
#[test]
fn a_result_that_is_not_an_f64_asks_for_the_right_seed() {
    let path = tempfile_path("seeds.mcir");
    std::fs::write(&path, "fn positive(x: f64) -> bool {\n    return x > 0.0;\n}\n\nfn pair(x: f64) -> (f64, f64) {\n    return (x, x * x);\n}\n").unwrap();
    let p = path.to_str().unwrap();
    let out = mcc(&["grad", p, "--fn", "positive", "--args", "[1.0]"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("returns a bool, not an f64: give null with --seed"), "{}", out.stderr);
    let out = mcc(&["grad", p, "--fn", "positive", "--args", "[1.0]", "--seed", "null"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = mcc(&["grad", p, "--fn", "pair", "--args", "[1.0]"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("give the cotangent of the result with --seed"), "{}", out.stderr);
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let parens = format!("fn main() -> f64 {{ return {}1.0{}; }}", "(".repeat(100_000), ")".repeat(100_000));
    let out = compile_text("100 000 parentheses", parens.as_bytes()).unwrap();
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("nest"), "{}", out.stderr);

    let negs = format!("fn main(x: f64) -> f64 {{ return {}x; }}", "-".repeat(100_000));
    let out = compile_text("100 000 minus signs", negs.as_bytes()).unwrap();
    assert_eq!(out.code, 1, "{}", out.stderr);

    let chain = format!("fn main(x: f64) -> f64 {{ return x{}; }}", " + x".repeat(100_000));
    let out = compile_text("a sum of 100 000 terms", chain.as_bytes()).unwrap();
    assert_eq!(out.code, 1, "{}", out.stderr);

    let blocks = format!("fn main() {{ {} {} }}", "{".repeat(50_000), "}".repeat(50_000));
    let out = compile_text("50 000 nested blocks", blocks.as_bytes()).unwrap();
    assert_eq!(out.code, 1);
}

#[test]
fn long_programs_compile_and_run() {
    // A chain deep but within the limit compiles.
    let chain = format!("fn main(x: f64) -> f64 {{ return x{}; }}", " + x".repeat(5_000));
    let out = compile_text("a sum of 5 000 terms", chain.as_bytes()).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);

    // 20 000 statements in one function, and 2 000 functions.
    let mut text = String::from("fn main(x: f64) -> f64 {\n    let mut s = x;\n");
    for i in 0..20_000 {
        text.push_str(&format!("    s = s + {}.0;\n", i % 7));
    }
    text.push_str("    return s + g1(s);\n}\n");
    for i in 1..2_000 {
        text.push_str(&format!("fn g{i}(x: f64) -> f64 {{ return g{}(x) * 0.5; }}\n", i + 1));
    }
    text.push_str("fn g2000(x: f64) -> f64 { return x; }\n");
    let dir = tempfile_path("long.mcir");
    std::fs::write(&dir, &text).unwrap();
    let out = mcc(&["run", dir.to_str().unwrap(), "--args", "[1.0]"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let expected_s = 1.0 + (0..20_000).map(|i| (i % 7) as f64).sum::<f64>();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let got = v["value"].as_f64().unwrap();
    let want = expected_s + expected_s * 0.5f64.powi(1999);
    assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
}

#[test]
fn non_utf8_and_empty_programs() {
    let out = compile_text("invalid UTF-8", b"fn main() -> f64 { return 1.0; }\n\xff\xfe").unwrap();
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains(":2:1"), "{}", out.stderr);
    let out = compile_text("empty file", b"").unwrap();
    assert_eq!(out.code, 0, "an empty program compiles to an empty module");
    let words: Vec<std::ffi::OsString> = vec!["mcc".into(), "run".into(), "-".into()];
    let out = mcir_cli::run(words, &mut &b""[..]);
    assert_eq!(out.code, 2, "running a program with no functions is a usage error: {}", out.stderr);
}

/// `--timeout` stops a program that never ends, on native code and on the interpreter,
/// with an error that names the function and shows the line of a loop: a `while` loop
/// (tested every iteration), counted loops (tested every 1024 iterations in native
/// code), and short inner loops inside a long one, which native code does not test at
/// all: the loops around them test on every entry. A loop inlined into its caller is
/// named after the function it was written in. A recursion shows a line of its body.
#[test]
fn timeout_stops_native_code_and_the_interpreter() {
    let programs = [
        ("forever.mcir", "fn spin(x: f64) -> f64 {\n    let mut s = x;\n    while s > -1.0 { s += 1.0; }\n    return s;\n}\n", &[":3:"][..]),
        (
            "counted.mcir",
            "fn spin(x: f64) -> f64 {\n    let mut s = x;\n    for i in 0..4000000000000000 { s += 1.0; }\n    return s;\n}\n",
            &[":3:"],
        ),
        // Native code runs this loop four iterations at a time from an odd counter, so
        // the counter is never a multiple of 1024 there: the test looks at its bits
        // above the unrolling factor's.
        (
            "counted_odd.mcir",
            "fn spin(x: f64) -> f64 {\n    let mut s = x;\n    for i in 3..4000000000000003 { s += 1.0; }\n    return s;\n}\n",
            &[":3:"],
        ),
        (
            "short_inner.mcir",
            "fn spin(x: f64) -> f64 {\n    let mut s = x;\n    for i in 0..4000000000000000 {\n        for j in 0..2 { s += 1.0; }\n    }\n    return s;\n}\n",
            &[":3:", ":4:"],
        ),
        // `spin` is inlined into `main`: the error still names `spin`.
        (
            "inlined.mcir",
            "fn spin(x: f64) -> f64 {\n    let mut s = x;\n    while s > -1.0 { s += 1.0; }\n    return s;\n}\nfn main(x: f64) -> f64 { return spin(x) * 2.0; }\n",
            &[":3:"],
        ),
        // A recursion has no loop: it is tested on entry, and the error shows a line
        // of its body, in derived passes too (whose entry begins with tape operations
        // spanning the whole function).
        (
            "recursion.mcir",
            "fn main(x: f64) -> f64 {\n    return tree(x, 60);\n}\nfn tree(x: f64, n: i64) -> f64 {\n    if n == 0 { return x; }\n    return tree(sin(x), n - 1) * 0.5 + tree(x * 0.5, n - 1) * 0.5;\n}\n",
            &[":5:", ":6:"],
        ),
        (
            "short_inner_nest.mcir",
            "fn spin(x: f64) -> f64 {\n    let mut s = x;\n    for i in 0..4000000000000000 {\n        for j in 0..3 {\n            for k in 0..2 { s += 1.0; }\n        }\n    }\n    return s;\n}\n",
            &[":3:", ":4:", ":5:"],
        ),
    ];
    for (name, text, lines) in programs {
        let path = tempfile_path(name);
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap();
        for extra in [&[][..], &["--interp"][..]] {
            for cmd in ["run", "grad"] {
                let mut words = vec![cmd, p, "--args", "[1.0]", "--timeout", "0.2"];
                words.extend(extra);
                let started = std::time::Instant::now();
                let out = mcc(&words);
                assert_eq!(out.code, 1, "{name} {cmd} {extra:?}: {}", out.stderr);
                let function = if name == "recursion.mcir" { "`tree`" } else { "`spin`" };
                assert!(out.stderr.contains("timed out") && out.stderr.contains(function), "{}", out.stderr);
                assert!(
                    lines.iter().any(|l| out.stderr.contains(l)),
                    "the error shows a loop's line: {}",
                    out.stderr
                );
                assert!(started.elapsed().as_secs_f64() < 5.0);
            }
        }
    }
}

/// The source limits move with `--max-nesting` and `--max-expr-depth`: a chain past
/// the default depth compiles (on a front-end stack sized for it) once allowed, and a
/// lowered limit rejects what the default accepts, at the place it is passed.
#[test]
fn source_limits_are_configurable() {
    let chain = format!("fn main(x: f64) -> f64 {{ return x{}; }}", " + x".repeat(15_000));
    let path = tempfile_path("chain15000.mcir");
    std::fs::write(&path, &chain).unwrap();
    let p = path.to_str().unwrap();
    let out = mcc(&["run", p, "--args", "[2.0]"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("more than 10000 operations deep"), "{}", out.stderr);
    assert!(out.stderr.contains("chain15000.mcir:1:"), "the error has a location: {}", out.stderr);
    for extra in [&[][..], &["--interp"][..]] {
        let mut words = vec!["grad", p, "--args", "[2.0]", "--max-expr-depth", "20000"];
        words.extend(extra);
        let out = mcc(&words);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(out.stdout.trim(), r#"{"value": 30002.0, "gradient": [15001.0]}"#);
    }

    let nested = tempfile_path("nested.mcir");
    std::fs::write(&nested, "fn main() -> f64 {\n    return ((1.0));\n}\n").unwrap();
    let n = nested.to_str().unwrap();
    assert_eq!(mcc(&["run", n, "--max-nesting", "3"]).code, 0);
    let out = mcc(&["run", n, "--max-nesting", "2"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("brackets nest more than 2 deep"), "{}", out.stderr);
    assert!(out.stderr.contains("nested.mcir:2:13"), "at the third bracket: {}", out.stderr);

    for (flag, value) in [("--max-nesting", "0"), ("--max-expr-depth", "100001"), ("--max-nesting", "-1")] {
        let out = mcc(&["run", n, flag, value]);
        assert_eq!(out.code, 2, "{flag} {value}: {}", out.stderr);
        assert!(out.stderr.starts_with("error:"), "{}", out.stderr);
    }
    let limits = mcir::SourceLimits { max_nesting: 0, ..Default::default() };
    assert!(mcir::Program::compile_with("x.mcir", "fn main() {}", &limits).is_err());
}

/// `--max-memory` caps what one call allocates in total, the derived rule's tape
/// included, on both engines, and a tape that outgrows it is reported at its loop; and
/// a zero limit is a usage error.
#[test]
fn the_memory_limit_stops_a_call_cleanly() {
    // The loop reads a factor that varies from an array, so that its derivative is not
    // carried forward in it (a loop of scalar arithmetic needs no tape).
    let text = "fn main(x: f64, n: i64) -> f64 {\n    let w = [1.5, x];\n    let mut s = x;\n    for i in 0..n {\n        s = sin(s) * w[i % 2];\n    }\n    return s;\n}\n";
    let path = tempfile_path("tape.mcir");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    for extra in [&[][..], &["--interp"][..]] {
        // The primal allocates one small array; its gradient tapes a value per iteration.
        let mut words = vec!["run", p, "--args", "[0.5, 200000]", "--max-memory", "100000"];
        words.extend(extra);
        assert_eq!(mcc(&words).code, 0, "{extra:?}");
        words[0] = "grad";
        let out = mcc(&words);
        assert_eq!(out.code, 1, "{extra:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("out of memory") && out.stderr.contains("100000 bytes"),
            "{}",
            out.stderr
        );
        // It points at the loop whose records outgrow the limit, not the whole function.
        assert!(out.stderr.contains("tape.mcir:4:"), "the error is at the loop: {}", out.stderr);
        // A limit the tape fits in.
        let mut words = vec!["grad", p, "--args", "[0.5, 200000]", "--max-memory", "100000000"];
        words.extend(extra);
        assert_eq!(mcc(&words).code, 0, "{extra:?}");
    }
    let out = mcc(&["run", p, "--args", "[0.5, 1]", "--max-memory", "0"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}

/// A memory limit reached in a derived pass's tape, at the start of a recursive
/// function that makes a fresh minor, is reported inside the function's body on both
/// engines (the record's span is the whole function; the next operation's is shown).
#[test]
fn the_memory_limit_in_a_recursion_points_into_its_body() {
    let text = "fn minor_of(a: f64[,], row: i64) -> f64[,] {
    let n = size(a, 0);
    let m = zeros(n - 1, n - 1);
    let mut rr = 0;
    for r in 0..n {
        if r == row { continue; }
        for c in 1..n {
            m[rr, c - 1] = a[r, c];
        }
        rr += 1;
    }
    return m;
}

fn det(a: f64[,]) -> f64 {
    let n = size(a, 0);
    if n == 1 { return a[0, 0]; }
    if n == 2 { return a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]; }
    let mut s = 0.0;
    for r in 0..n {
        let sg = sign_of(r);
        s += sg * a[r, 0] * det(minor_of(a, r));
    }
    return s;
}

fn sign_of(r: i64) -> f64 {
    if r % 2 == 0 { return 1.0; }
    return -1.0;
}

fn main(a: f64[,]) -> f64 {
    return det(a);
}
";
    let path = tempfile_path("det.mcir");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let rows: Vec<String> = (0..9)
        .map(|i| {
            format!(
                "[{}]",
                (0..9)
                    .map(|j| format!("{:.2}", ((i * 9 + j) as f64 * 0.37).sin()))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        })
        .collect();
    let args = format!("[[{}]]", rows.join(","));
    for extra in [&[][..], &["--interp"][..]] {
        let mut words = vec!["grad", p, "--args", &args, "--max-memory", "100000"];
        words.extend(extra);
        let out = mcc(&words);
        assert_eq!(out.code, 1, "{extra:?}: {}", out.stderr);
        assert!(out.stderr.contains("out of memory"), "{}", out.stderr);
        let line = out
            .stderr
            .split("det.mcir:")
            .nth(1)
            .and_then(|rest| rest.split(':').next())
            .and_then(|l| l.parse::<u32>().ok())
            .expect("a location");
        let first_lines: Vec<u32> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("fn "))
            .map(|(k, _)| k as u32 + 1)
            .collect();
        assert!(
            !first_lines.contains(&line),
            "{extra:?}: the error is at a function's first line: {}",
            out.stderr
        );
    }
}

/// Every kind of bad argument in `tests/bad_input/arguments.cases` (malformed JSON,
/// wrong types and shapes, NaN and infinities, empty arrays) gives a defined result or a
/// clear usage error, the same on both engines, for `run` and `grad`.
#[test]
fn bad_arguments_give_defined_results_or_clear_errors() {
    let dir = root().join("tests/bad_input");
    let program = dir.join("arguments.mcir");
    let p = program.to_str().unwrap();
    let cases = std::fs::read_to_string(dir.join("arguments.cases")).unwrap();
    let mut transcript = String::new();
    let mut count = 0;
    for line in cases.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (name, args) = line.split_once('\t').expect("name, a tab, the arguments");
        transcript.push_str(&format!("== {name}: {args}\n"));
        for cmd in ["run", "grad"] {
            let native = mcc(&[cmd, p, "--args", args]);
            let interp = mcc(&[cmd, p, "--args", args, "--interp"]);
            assert_eq!(native, interp, "{name}: {cmd} differs between the engines");
            match native.code {
                0 => assert!(native.stderr.is_empty(), "{name}: {}", native.stderr),
                2 => assert!(native.stderr.starts_with("error: ") && native.stdout.is_empty(), "{name}"),
                code => panic!("{name}: {cmd} exited {code}: {}", native.stderr),
            }
            transcript.push_str(&format!("{cmd} [{}] {}{}", native.code, native.stdout, native.stderr));
        }
        count += 1;
    }
    assert!(count >= 25);
    snapshot_settings("bad_input").bind(|| insta::assert_snapshot!("arguments", transcript));
}

/// `mcc jvp` with bad tangents: each is a usage error naming the problem, the same on
/// both engines; NaN and empty arrays give defined results.
#[test]
fn bad_tangents_to_mcc_jvp() {
    let program = root().join("tests/bad_input/arguments.mcir");
    let p = program.to_str().unwrap();
    let args = r#"[1.0, [1, 2], [[1, 2], [3, 4]], 3, {"w": 2.0, "v": [1.0]}, 0.5, [1.0, true], [1, 2]]"#;
    let good = r#"[1.0, [0, 1], [[0, 0], [1, 0]], null, {"w": 0.5, "v": [1.0]}, 0.25, [1.0, null], null]"#;
    let out = mcc(&["jvp", p, "--args", args, "--tangent", good]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        r#"{"value": 21.5, "tangent": 8.75, "args_tangent": [1.0, [0.0, 1.0], [[0.0, 0.0], [1.0, 0.0]], null, {"w": 0.5, "v": [1.0]}, 8.75, [1.0, null], null]}"#
    );
    for (tangent, expect) in [
        ("[1.0]", "--tangent has 1 elements, but `main` takes 8 arguments"),
        ("{}", "--tangent must be a JSON array"),
        ("[1.0, [0, 1", "--tangent is not valid JSON"),
        (r#"[1.0, [0, 1, 2], null, null, null, null, null, null]"#, "--tangent[1] has shape [3]"),
        (r#"[1.0, null, null, 5, null, null, null, null]"#, "--tangent[3]: `i64` has no derivative"),
        (r#"["x", null, null, null, null, null, null, null]"#, "--tangent[0] must be an f64"),
        (r#"[null, null, null, null, {"q": 1}, null, null, null]"#, "has no field `q`"),
    ] {
        let native = mcc(&["jvp", p, "--args", args, "--tangent", tangent]);
        let interp = mcc(&["jvp", p, "--args", args, "--tangent", tangent, "--interp"]);
        assert_eq!(native, interp, "{tangent}");
        assert_eq!(native.code, 2, "{tangent}: {}", native.stderr);
        assert!(
            native.stderr.starts_with("error: ") && native.stderr.contains(expect),
            "{tangent}: {}",
            native.stderr
        );
    }
    let nan = r#"["NaN", null, null, null, null, null, null, null]"#;
    let out = mcc(&["jvp", p, "--args", args, "--tangent", nan]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains(r#""tangent": "NaN""#), "{}", out.stdout);
    let empty = r#"[1.0, [], [], 0, {"w": 2.0, "v": []}, 0.5, [1.0, true], []]"#;
    let out =
        mcc(&["jvp", p, "--args", empty, "--tangent", "[1.0, null, null, null, null, null, null, null]"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        r#"{"value": 1.5, "tangent": 0.0, "args_tangent": [1.0, [], [], null, {"w": 0.0, "v": []}, 0.0, [0.0, null], null]}"#
    );
}

#[test]
fn input_is_read_up_to_a_limit() {
    let prog = root().join("tests/programs/dot_sum.mcir");
    let p = prog.to_str().unwrap();
    // No JSON text holds a NUL: refused at the first byte, whatever follows.
    let out = mcc(&["run", p, "--args", "@/dev/zero"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("is not JSON text: byte 0x00 at offset 0"), "{}", out.stderr);
    // A program that never ends: refused at the limit.
    let out = mcc(&["run", "/dev/zero", "--max-input", "100000"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("longer than 100000 bytes, the limit set by --max-input"), "{}", out.stderr);
    let words: Vec<std::ffi::OsString> =
        ["mcc", "run", "-", "--max-input", "5000"].iter().map(|w| w.into()).collect();
    let out = mcir_cli::run(words, &mut std::io::repeat(b' '));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("the program on stdin is longer than 5000 bytes"), "{}", out.stderr);
    // Arguments as long as the limit allows pass; one byte more does not.
    let args = format!("[[{}], [{}]]", vec!["1.0"; 200].join(","), vec!["2.0"; 200].join(","));
    let file = tempfile_path("long_args.json");
    std::fs::write(&file, &args).unwrap();
    let at_file = format!("@{}", file.display());
    let limit = args.len().to_string();
    let one_less = (args.len() - 1).to_string();
    assert_eq!(mcc(&["run", p, "--args", &at_file, "--max-input", &limit]).code, 0);
    assert_eq!(mcc(&["run", p, "--args", &args, "--max-input", &limit]).code, 0);
    for given in [at_file.as_str(), args.as_str()] {
        let out = mcc(&["grad", p, "--args", given, "--max-input", &one_less]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains(&format!("longer than {one_less} bytes")), "{}", out.stderr);
    }
}
