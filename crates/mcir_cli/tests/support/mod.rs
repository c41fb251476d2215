//! Shared helpers for the data-driven tests: reading `.mcir` case headers, running
//! `mcc` in-process, and comparing JSON with a float tolerance.

#![allow(dead_code)]

use serde_json::Value as Json;
use std::path::{Path, PathBuf};

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
