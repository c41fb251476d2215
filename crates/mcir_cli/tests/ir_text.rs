//! IR text as `mcc ir` prints it is a complete module at every stage: `mcc ir FILE.ir`
//! parses it, verifies it and prints it back byte for byte. And IR text that is not
//! what `mcc ir` printed (mutated, nested deep) gets an error, never a panic.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

/// The directories whose programs are round-tripped.
const DIRS: &[&str] = &["programs", "check", "second_order", "checkpoint", "rules"];

/// Where the printed IR goes: a file per test.
fn ir_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcir-ir-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.ir"))
}

#[test]
fn every_stage_of_every_program_reads_back_unchanged() {
    let file = ir_file("round_trip");
    let path = file.to_str().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for dir in DIRS {
        for program in cases(dir) {
            let p = program.to_str().unwrap();
            for words in [
                &["--stage", "primal"][..],
                &["--stage", "fwd"],
                &["--stage", "rev"],
                &["--stage", "tangent"],
                &["--stage", "all"],
                &["--stage", "all", "--opt"],
                &["--stage", "all", "--native"],
            ] {
                let mut args = vec!["ir", p];
                args.extend(words);
                let printed = mcc(&args);
                if printed.code != 0 {
                    // Programs that are meant to fail to derive (tests/rules) fail here too.
                    check_outcome(&format!("{} {words:?}", rel(&program)), &printed).unwrap();
                    continue;
                }
                std::fs::write(&file, &printed.stdout).unwrap();
                let back = mcc(&["ir", path]);
                checked += 1;
                if back.code != 0 {
                    failures.push(format!("{} {words:?}: {}", rel(&program), back.stderr.trim()));
                } else if back.stdout != printed.stdout {
                    failures.push(format!("{} {words:?}: printed back differently", rel(&program)));
                }
            }
        }
    }
    assert!(checked >= 1000, "only {checked} texts were read back");
    assert!(failures.is_empty(), "{} of {checked} failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn one_function_and_its_callees_read_back_unchanged() {
    let file = ir_file("one_function");
    let path = file.to_str().unwrap();
    // A generated program: structs, calls, recursion, closures, hand-written rules.
    let text = mcir_gen::generate(7).source;
    let program = ir_file("one_function").with_extension("mcir");
    std::fs::write(&program, &text).unwrap();
    let p = program.to_str().unwrap();
    let names: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("fn ")?.split('(').next()).collect();
    assert!(names.len() >= 10, "{names:?}");
    let mut checked = 0;
    for name in names {
        for stage in ["primal", "fwd", "rev", "tangent", "all"] {
            let printed = mcc(&["ir", p, "--fn", name, "--stage", stage]);
            if printed.code == 2 && printed.stderr.contains("takes a function as an argument") {
                continue;
            }
            assert_eq!(printed.code, 0, "{name} {stage}: {}", printed.stderr);
            checked += 1;
            std::fs::write(&file, &printed.stdout).unwrap();
            let back = mcc(&["ir", path]);
            assert_eq!(back.code, 0, "{name} {stage}: {}\n{}", back.stderr, printed.stdout);
            assert_eq!(back.stdout, printed.stdout, "{name} {stage}");
        }
    }
    assert!(checked >= 40, "only {checked} texts were read back");
}

#[test]
fn ir_files_take_no_stage_and_report_errors_with_their_place() {
    let file = ir_file("errors");
    let path = file.to_str().unwrap();
    std::fs::write(&file, "fn @f(%x_0: f64) -> f64 {\nbb0:\n    ret %y_9\n}\n").unwrap();
    let out = mcc(&["ir", path]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.starts_with(&format!("error: {path}:")), "{}", out.stderr);
    assert!(out.stderr.contains("`%y_9` is used but never defined"), "{}", out.stderr);
    std::fs::write(&file, "fn @f(%x_0: f64) -> f64 {\nbb0:\n    %1: i64 = iconst 1\n    ret %1\n}\n")
        .unwrap();
    let out = mcc(&["ir", path]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("does not verify"), "{}", out.stderr);
    let out = mcc(&["ir", path, "--stage", "rev"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    // A type nested past any real one, in place of a parameter type.
    let deep = format!(
        "fn @f(%x_0: {}f64{}) {{\nbb0:\n    ret\n}}\n",
        "stack<".repeat(100_000),
        ">".repeat(100_000)
    );
    std::fs::write(&file, deep).unwrap();
    let out = mcc(&["ir", path]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("nests deeper than"), "{}", out.stderr);
}

/// Words of IR text a mutation puts in.
const IR_TOKENS: &[&str] = &[
    "fn",
    "@f",
    "@main",
    "struct",
    "mut",
    "rule",
    "reverse",
    "bb0",
    "bb1",
    "bb9",
    "%1",
    "%x_0",
    "%99",
    ":",
    "=",
    ",",
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    "[",
    "]",
    "[,,]",
    "[,,,,]",
    "f64",
    "i64",
    "bool",
    "f64[]",
    "stack<f64>",
    "ref<i64>",
    "()",
    "iconst",
    "fconst",
    "1",
    "-1",
    "1.5e308",
    "9223372036854775807",
    "fadd",
    "call",
    "ret",
    "jump",
    "br",
    "tuple.new",
    "tuple.get",
    "stack.new",
    "stack.push",
    "stack.pop",
    "array.fill",
    "array.lit",
    "struct.new",
    "load",
    "store",
    "->",
];

#[test]
fn mutated_ir_text_never_panics() {
    let file = ir_file("mutated");
    let path = file.to_str().unwrap();
    let mut texts = Vec::new();
    for program in cases("programs").iter().chain(&cases("check")) {
        let out = mcc(&["ir", program.to_str().unwrap(), "--stage", "all"]);
        if out.code == 0 {
            texts.push(out.stdout);
        }
    }
    let mut rng = Rng(0x1e);
    let mut accepted = 0;
    let count = 1500;
    for i in 0..count {
        let text = &texts[rng.below(texts.len())];
        let mut lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
        for _ in 0..1 + rng.below(3) {
            let l = rng.below(lines.len());
            let words = &mut lines[l];
            if words.is_empty() {
                words.push("");
            }
            let k = rng.below(words.len());
            match rng.below(5) {
                0 => {
                    words.remove(k);
                }
                1 => words.insert(k, IR_TOKENS[rng.below(IR_TOKENS.len())]),
                2 => words[k] = IR_TOKENS[rng.below(IR_TOKENS.len())],
                3 => {
                    lines.remove(l);
                }
                _ => {
                    let m = rng.below(lines.len());
                    lines.swap(l, m);
                }
            }
            if lines.is_empty() {
                break;
            }
        }
        let mutated: String = lines.iter().map(|w| w.join(" ") + "\n").collect();
        std::fs::write(&file, &mutated).unwrap();
        let out = mcc(&["ir", path]);
        check_outcome(&format!("mutation #{i}"), &out).unwrap_or_else(|e| panic!("{e}\n{mutated}"));
        if out.code == 0 {
            accepted += 1;
            // What was accepted prints as a module that reads back the same.
            std::fs::write(&file, &out.stdout).unwrap();
            let again = mcc(&["ir", path]);
            assert_eq!(again.stdout, out.stdout, "mutation #{i}");
        }
    }
    eprintln!("{accepted} of {count} mutated texts were valid IR");
}
