//! Differential testing on generated programs (`mcir_gen`): each runs to the same result
//! on the interpreter and on native code, and compiled for the shapes of its arguments
//! (`--specialise`); then every derivative mode (`support::modes`: `grad`, a VJP with
//! random cotangents, `jvp`, `hvp`, `jacobian`, `hessian`, each specialised too and
//! with an argument constant) agrees across engines and, by the checker, with finite
//! differences; and the functions as native code compiles them verify.
//! `MCIR_GEN_PROGRAMS=N` sets how many (120 by default;
//! `docs/reliability.md` has the longer run), `MCIR_GEN_FIRST=K` the first seed.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value as Json;
use support::modes::{every_mode, Case};
use support::{json_mismatch, mcc};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What went wrong with the program of `seed`, if anything.
fn differences(seed: u64, dir: &std::path::Path) -> Option<String> {
    let g = mcir_gen::generate(seed);
    let path = dir.join(format!("gen_{seed}.mcir"));
    std::fs::write(&path, &g.source).unwrap();
    let file = path.to_str().unwrap();
    let report = |what: &str, detail: String| {
        Some(format!("seed {seed}: {what}\n{detail}\n{}\nargs: {}", g.source, g.args))
    };
    let native = mcc(&["run", file, "--args", &g.args]);
    let interp = mcc(&["run", file, "--args", &g.args, "--interp"]);
    if native.code != 0 || interp.code != 0 {
        return report(
            "a run failed",
            format!(
                "native: {}{}\ninterpreter: {}{}",
                native.stdout, native.stderr, interp.stdout, interp.stderr
            ),
        );
    }
    if native.stdout != interp.stdout {
        let (a, b): (Json, Json) =
            (serde_json::from_str(&native.stdout).unwrap(), serde_json::from_str(&interp.stdout).unwrap());
        if let Some(m) = json_mismatch(&a, &b, 1e-12, "") {
            return report("native code and the interpreter disagree", m);
        }
    }
    // Every function as native code compiles it (its loops copied to skip checks or to
    // hold elements in values) re-parses and verifies.
    let native_ir = mcc(&["ir", file, "--native", "--stage", "all"]);
    let ir_path = dir.join(format!("gen_{seed}.ir"));
    std::fs::write(&ir_path, &native_ir.stdout).unwrap();
    let reread = mcc(&["ir", ir_path.to_str().unwrap()]);
    if native_ir.code != 0 || reread.code != 0 {
        return report("the native IR does not verify", format!("{}{}", native_ir.stderr, reread.stderr));
    }
    // Compiled for the shapes of its arguments, the same result.
    let special = mcc(&["run", file, "--args", &g.args, "--specialise"]);
    if special.code != 0 {
        return report("`run --specialise` failed", format!("{}{}", special.stdout, special.stderr));
    }
    let (a, b): (Json, Json) =
        (serde_json::from_str(&special.stdout).unwrap(), serde_json::from_str(&native.stdout).unwrap());
    if let Some(m) = json_mismatch(&a, &b, 1e-12, "") {
        return report("`run --specialise` differs", m);
    }
    let case = Case {
        file,
        func: None,
        args: &g.args,
        kink: false,
        nondifferentiable: false,
        seed: seed ^ 0x6d6f_6465,
    };
    every_mode(&case).err().and_then(|m| report("a derivative mode failed", m))
}

#[test]
fn generated_programs_agree_across_engines_and_pass_the_checker() {
    let count = env_number("MCIR_GEN_PROGRAMS", 120);
    let first = env_number("MCIR_GEN_FIRST", 0);
    let dir = std::env::temp_dir().join(format!("mcir-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Seeds are shared out to one worker per core.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let started = std::time::Instant::now();
    let mut failures: Vec<(u64, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let dir = &dir;
                scope.spawn(move || {
                    (first + w..first + count)
                        .step_by(workers as usize)
                        .filter_map(|seed| {
                            let failure = differences(seed, dir).map(|m| (seed, m));
                            // Said at once, so that a long run shows what it found as it goes.
                            if let Some((seed, m)) = &failure {
                                eprintln!("FAILED seed {seed}: {}", m.lines().next().unwrap_or(""));
                            }
                            failure
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    failures.sort_by_key(|f| f.0);
    let failures: Vec<String> = failures.into_iter().map(|f| f.1).collect();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "generated programs: seeds {first}..{}, {} failed, {:.1} s",
        first + count,
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {count} generated programs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
