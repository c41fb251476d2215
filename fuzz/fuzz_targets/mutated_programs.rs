//! Token-level mutations of valid programs (the project's own `tests/programs` and
//! `tests/check`): the input picks a program and a list of edits (drop, repeat, swap,
//! replace or insert a token). What comes out is mostly near-valid source, which reaches
//! the type checker and lowering far more often than random bytes do; whatever they
//! accept must also derive its rules and compile to native code.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// Tokens worth inserting: keywords, types, operators and a few names and numbers.
const VOCABULARY: &[&str] = &[
    "fn",
    "let",
    "mut",
    "if",
    "else",
    "while",
    "for",
    "in",
    "break",
    "continue",
    "return",
    "struct",
    "ref",
    "true",
    "false",
    "f64",
    "i64",
    "bool",
    "f64[]",
    "f64[,]",
    "i64[]",
    "ref<f64>",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ";",
    ":",
    "->",
    "..",
    "=",
    "+=",
    "-=",
    "*=",
    "/=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "&&",
    "||",
    "!",
    ".",
    "*",
    "x",
    "y",
    "i",
    "n",
    "s",
    "0",
    "1",
    "2",
    "0.5",
    "1.0",
    "-1",
    "1e308",
    "9223372036854775807",
    "len",
    "size",
    "zeros",
    "sum",
    "sin",
    "exp",
    "log",
    "sqrt",
    "copy",
];

/// The seed programs, each cut into tokens (runs of word characters, runs of spaces,
/// or single other characters).
fn seeds() -> &'static Vec<Vec<String>> {
    static SEEDS: OnceLock<Vec<Vec<String>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests");
        let mut out = Vec::new();
        for dir in ["programs", "check"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
            let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for p in paths {
                if p.extension().is_some_and(|e| e == "mcir") {
                    if let Ok(text) = std::fs::read_to_string(&p) {
                        out.push(tokens(&text));
                    }
                }
            }
        }
        out
    })
}

fn tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let class = |c: char| {
        if c.is_alphanumeric() || c == '_' || c == '.' {
            0
        } else if c.is_whitespace() {
            1
        } else {
            2
        }
    };
    for c in text.chars() {
        match out.last_mut() {
            Some(last) if class(c) != 2 && last.chars().last().is_some_and(|l| class(l) == class(c)) => {
                last.push(c)
            }
            _ => out.push(c.to_string()),
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let seeds = seeds();
    if seeds.is_empty() || data.len() < 2 {
        return;
    }
    let mut toks = seeds[(data[0] as usize * 256 + data[1] as usize) % seeds.len()].clone();
    for edit in data[2..].chunks(3) {
        if toks.is_empty() {
            break;
        }
        let at =
            edit.get(1).map_or(0, |&b| b as usize * 97 + edit.get(2).map_or(0, |&c| c as usize)) % toks.len();
        let word = VOCABULARY[edit.get(2).map_or(0, |&b| b as usize) % VOCABULARY.len()].to_string();
        match edit[0] % 5 {
            0 => {
                toks.remove(at);
            }
            1 => {
                let t = toks[at].clone();
                toks.insert(at, t);
            }
            2 => {
                let other = (at + 1 + edit[0] as usize / 5) % toks.len();
                toks.swap(at, other);
            }
            3 => toks[at] = word,
            _ => toks.insert(at, format!(" {word} ")),
        }
    }
    let text: String = toks.concat();
    let Ok(program) = mcir::Program::compile("fuzz.mcir", &text) else { return };
    if let Ok(derived) = program.differentiate(&mcir::AdOptions::default()) {
        if let Err(e) = mcir_jit::Jit::compile(derived.module()) {
            panic!("a derived module that verifies failed to compile: {e:?}\n{text}");
        }
    }
});
