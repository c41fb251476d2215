//! Hand-written rules that are wrong on purpose (`tests/rules/`): `mcc check` fails on
//! the program that uses them, and its report names the rule, where it is, and the
//! argument that disagrees (the `// names:` header), on both engines.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

#[test]
fn a_wrong_hand_written_rule_is_caught_and_named() {
    let cases = cases("rules");
    assert!(cases.len() >= 3);
    let mut failures = Vec::new();
    for path in &cases {
        let text = std::fs::read_to_string(path).unwrap();
        let names = header(&text, "names").expect("a `// names:` header");
        for engine in [&[][..], &["--interp"][..]] {
            let file = rel(path);
            let mut words = vec!["check", path.to_str().unwrap()];
            words.extend(engine);
            let mut out = mcc(&words);
            let prefix = format!("{}/", root().to_string_lossy());
            out.stdout = out.stdout.replace(&prefix, "");
            out.stderr = out.stderr.replace(&prefix, "");
            if out.code != 1 || !out.stdout.contains("FAIL") {
                failures.push(format!("{file} {engine:?}: the wrong rule was not caught:\n{}", out.stdout));
            } else if !out.stdout.contains(&names) {
                failures
                    .push(format!("{file} {engine:?}: the report does not say `{names}`:\n{}", out.stdout));
            } else if !out.stderr.starts_with("error: the hand-written") {
                failures
                    .push(format!("{file} {engine:?}: the error does not name the rule:\n{}", out.stderr));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
