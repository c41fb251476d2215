//! Shared helpers for the data-driven tests: reading `.mcir` case headers, running
//! `mcc` in-process, and comparing JSON with a float tolerance.

// Test helpers: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use serde_json::Value as Json;
use std::path::{Path, PathBuf};

pub mod modes;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// Every `*.mcir` file of `tests/<dir>`, sorted.
pub fn cases(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("tests").join(dir))
        .expect("test directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "mcir"))
        .collect();
    out.sort();
    out
}

/// The value of a `// key: value` header line, if the file has one.
pub fn header(text: &str, key: &str) -> Option<String> {
    let prefix = format!("// {key}:");
    text.lines().find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

/// `mcc CMD` on a case file with its `// fn:` and `// args:` headers, then `extra`.
pub fn command_on_case(cmd: &str, path: &Path, extra: &[&str]) -> mcir_cli::Outcome {
    let text = std::fs::read_to_string(path).unwrap();
    let mut words: Vec<String> = vec![cmd.into(), path.to_string_lossy().into()];
    if let Some(f) = header(&text, "fn") {
        words.extend(["--fn".into(), f]);
    }
    if let Some(a) = header(&text, "args") {
        words.extend(["--args".into(), a]);
    }
    words.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = words.iter().map(|s| s.as_str()).collect();
    mcc(&refs)
}

/// Runs `mcc` with the given words (no program name) in-process.
pub fn mcc(args: &[&str]) -> mcir_cli::Outcome {
    let mut words: Vec<std::ffi::OsString> = vec!["mcc".into()];
    words.extend(args.iter().map(|a| a.into()));
    mcir_cli::run(words, &mut std::io::empty())
}

/// `None` if `actual` matches `expected`: floats within `tol * (1 + |expected|)`, an
/// expected integer only by an equal integer, everything else exactly.
pub fn json_mismatch(actual: &Json, expected: &Json, tol: f64, path: &str) -> Option<String> {
    match (actual, expected) {
        (Json::Number(a), Json::Number(e)) => {
            if e.is_i64() || e.is_u64() {
                return if a.is_i64() && a.as_i64() == e.as_i64() {
                    None
                } else {
                    Some(format!("{path}: expected integer {e}, got {a}"))
                };
            }
            let (a, e) = (a.as_f64().unwrap_or(f64::NAN), e.as_f64().unwrap_or(f64::NAN));
            if (a - e).abs() <= tol * (1.0 + e.abs()) {
                None
            } else {
                Some(format!("{path}: expected {e:?}, got {a:?}"))
            }
        }
        (Json::Array(a), Json::Array(e)) => {
            if a.len() != e.len() {
                return Some(format!("{path}: expected {} elements, got {}", e.len(), a.len()));
            }
            a.iter()
                .zip(e)
                .enumerate()
                .find_map(|(i, (x, y))| json_mismatch(x, y, tol, &format!("{path}[{i}]")))
        }
        (Json::Object(a), Json::Object(e)) => {
            let mut ak: Vec<&String> = a.keys().collect();
            let mut ek: Vec<&String> = e.keys().collect();
            ak.sort();
            ek.sort();
            if ak != ek {
                return Some(format!("{path}: keys differ: {ak:?} vs {ek:?}"));
            }
            e.iter().find_map(|(k, v)| json_mismatch(&a[k], v, tol, &format!("{path}.{k}")))
        }
        _ if actual == expected => None,
        _ => Some(format!("{path}: expected {expected}, got {actual}")),
    }
}

/// The path of `p` relative to the workspace root, with `/` separators.
pub fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).to_string_lossy().replace('\\', "/")
}

/// Insta settings that keep snapshots under `tests/snapshots/<dir>` at the root.
pub fn snapshot_settings(dir: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(root().join("tests/snapshots").join(dir));
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

/// A small deterministic generator (SplitMix64), so property tests are reproducible.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A standard normal sample.
    pub fn normal(&mut self) -> f64 {
        let u = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let v = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// Checks the CLI contract on an outcome: exit 0, 1 or 2; a failure says `error:`;
/// nothing panicked.
pub fn check_outcome(what: &str, out: &mcir_cli::Outcome) -> Result<(), String> {
    if out.stderr.contains("panicked") || out.stderr.contains("internal compiler error") {
        return Err(format!("{what}: internal failure:\n{}", out.stderr));
    }
    match out.code {
        0 => Ok(()),
        1 | 2 if out.stderr.lines().any(|l| l.starts_with("error:")) => Ok(()),
        c => Err(format!("{what}: exit {c} without an `error:` line:\n{}", out.stderr)),
    }
}

/// Runs `mcc run` on a corpus file with the entry function of its `// fn:` header and
/// `args` (by default its `// args:` header), then `extra` words.
pub fn run_case(path: &Path, text: &str, args: Option<&str>, extra: &[&str]) -> mcir_cli::Outcome {
    let args = args.map(String::from).or_else(|| header(text, "args")).unwrap_or_else(|| "[]".into());
    let func = header(text, "fn");
    let mut words = vec!["run", path.to_str().expect("UTF-8 path"), "--args", &args];
    if let Some(f) = &func {
        words.extend(["--fn", f.as_str()]);
    }
    // Extra command-line flags a case asks for (`// flags: --max-depth 50`).
    let flags = header(text, "flags").unwrap_or_default();
    words.extend(flags.split_whitespace());
    words.extend(extra);
    mcc(&words)
}
