//! `mcc ir --native` prints functions as native code compiles them: the loops of
//! `tests/programs/side_by_side_reductions.mcir` that run several iterations side by
//! side, and those of `tests/programs/elements_held_across_loops.mcir` that hold an
//! element in a value, snapshotted; the printed module re-parses, verifies and prints the same; and
//! the gmm's forward pass, compiled for GradBench's shapes at d = 64, has its
//! triangular product jammed.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

#[test]
fn native_ir_is_snapshotted_and_reparses() {
    let path = root().join("tests/programs/side_by_side_reductions.mcir");
    let out = mcc(&["ir", path.to_str().unwrap(), "--native"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    snapshot_settings("native")
        .bind(|| insta::assert_snapshot!("side_by_side_reductions", out.stdout.clone()));
    let module = mcir::ir::parse_module(&out.stdout).unwrap();
    mcir::ir::verify_module(&module).unwrap();
    assert_eq!(mcir::ir::print_module(&module), out.stdout);
    // More code than the optimised IR: the side-by-side copies.
    let opt = mcc(&["ir", path.to_str().unwrap(), "--opt"]);
    assert!(out.stdout.lines().count() > opt.stdout.lines().count() + 100);
}

#[test]
fn small_matrices_of_loops_counted_to_constants_become_values() {
    // Two helpers return fresh 3 × 3 matrices, one filled by loops over `0..3`; each is
    // inlined where it is called once, its loops written out, and its matrix, like the
    // caller's, made values: `main` keeps only the array it returns.
    let path = root().join("tests/programs/short_loops_written_out.mcir");
    let out = mcc(&["ir", path.to_str().unwrap(), "--opt", "--fn", "main"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let main = out.stdout.split("fn @main").nth(1).unwrap();
    assert!(!main.contains("call @"), "{main}");
    assert_eq!(main.matches("array.fill").count(), 1, "{main}");
    // The loops left are the one too long to write out and the one left by a `break`.
    assert_eq!(main.matches("icmp lt").count(), 2, "{main}");
}

#[test]
fn chains_of_branches_are_linearized_whole() {
    // A helper with `if`, `else if` and a branch on a value computed on the way, an
    // integer picked by a chain, and two values set inline by a chain whose condition
    // reads `x[i]` again: the reverse pass branches on none of them and keeps no path,
    // and reads `x[i]` from the array rather than from the tape.
    let path = root().join("tests/check/linearized_branch_chains.mcir");
    let out = mcc(&["ir", path.to_str().unwrap(), "--native", "--fn", "f", "--stage", "rev"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let rev = out.stdout.split("fn @f$rev").nth(1).unwrap();
    assert!(!rev.contains("path"), "{rev}");
    // The one branch left is the loop's test.
    assert_eq!(rev.lines().filter(|l| l.trim_start().starts_with("br ")).count(), 1, "{rev}");
    let fwd = mcc(&["ir", path.to_str().unwrap(), "--native", "--fn", "f", "--stage", "fwd"]);
    let fwd = fwd.stdout.split("fn @f$fwd").nth(1).unwrap();
    // The forward pass keeps the derivatives: one linearization per result of each chain.
    assert_eq!(fwd.matches("= linearized").count(), 3, "{fwd}");
    assert!(!fwd.contains("stack.push %path"), "{fwd}");
}

#[test]
fn a_read_every_arm_of_a_chain_begins_with_is_made_before_it() {
    // Four arms each read `c[k]` first: the read moves in front of the chain, whose
    // arms then only compute, and the reverse pass keeps no path.
    let path = root().join("tests/check/chain_arms_read_one_element.mcir");
    let out = mcc(&["ir", path.to_str().unwrap(), "--opt", "--fn", "f"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let f = out.stdout.split("fn @f(").nth(1).unwrap();
    assert_eq!(f.matches("load %c_").count(), 1, "{f}");
    let rev = mcc(&["ir", path.to_str().unwrap(), "--native", "--fn", "f", "--stage", "rev"]);
    let rev = rev.stdout.split("fn @f$rev").nth(1).unwrap();
    assert!(!rev.contains("path"), "{rev}");
}

#[test]
fn small_arrays_returned_to_readers_of_elements_are_tuples() {
    // An inverse called from several places and a recursive product of 2 × 2 matrices:
    // the calls whose results are read at constant indices take tuples, and the
    // variants make no array (they read their arguments only); the call whose result
    // is written into keeps the array.
    let path = root().join("tests/check/small_arrays_returned_as_values.mcir");
    let out = mcc(&["ir", path.to_str().unwrap(), "--opt", "--fn", "f"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let f = out.stdout.split("fn @f(").nth(1).unwrap().split("\n}\n").next().unwrap();
    assert_eq!(f.matches("call @inverse$values").count(), 3, "{f}");
    assert_eq!(f.matches("call @inverse(").count(), 1, "{f}");
    assert_eq!(f.matches("call @product$values").count(), 1, "{f}");
    for variant in ["fn @inverse$values", "fn @product$values"] {
        let body = out.stdout.split(variant).nth(1).unwrap().split("\n}\n").next().unwrap();
        assert!(!body.contains("array.fill") && !body.contains("store"), "{body}");
    }
}

#[test]
fn elements_added_into_by_inner_loops_are_held_in_values() {
    let path = root().join("tests/programs/elements_held_across_loops.mcir");
    let out = mcc(&["ir", path.to_str().unwrap(), "--native"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    snapshot_settings("native")
        .bind(|| insta::assert_snapshot!("elements_held_across_loops", out.stdout.clone()));
    let module = mcir::ir::parse_module(&out.stdout).unwrap();
    mcir::ir::verify_module(&module).unwrap();
    assert_eq!(mcir::ir::print_module(&module), out.stdout);
    // `accumulate`'s two arrays may be one: tested apart in front of its copy.
    let accumulate = out.stdout.split("fn @main").next().unwrap();
    assert_eq!(accumulate.matches("array.shares %out_0, %v_1").count(), 1, "{accumulate}");
    // `main` holds `y[i]` and `z[i + 5]` in values (loaded in front of a copy, stored
    // behind it), but not `x[i]`, which its loop reads at `x[j]` as well.
    let main = out.stdout.split("fn @main").nth(1).unwrap();
    for element in ["%y_5[%i_", "%z_"] {
        assert!(main.matches(&format!("store.trusted {element}")).count() >= 1, "{element}:\n{main}");
    }
    assert!(!main.contains("store.trusted %x_"), "{main}");
}

#[test]
fn the_gmm_forward_pass_at_d_64_is_jammed() {
    // GradBench's shapes at d = 64, k = 2, n = 3 (values do not matter to the code).
    let (d, k, n) = (64, 2, 3);
    let row = |m: usize| format!("[{}]", vec!["0.5"; m].join(","));
    let rows = |r: usize, m: usize| format!("[{}]", vec![row(m); r].join(","));
    let args = format!(
        "[{}, {}, {}, {}, {}, 0, 1.0]",
        row(k),
        rows(k, d),
        rows(k, d),
        rows(k, d * (d - 1) / 2),
        rows(n, d)
    );
    let gmm = root().join("benches/gradbench/gmm.mcir");
    let ir = |native: bool| {
        let mut cmd =
            vec!["ir", gmm.to_str().unwrap(), "--fn", "objective", "--shapes-of", &args, "--stage", "fwd"];
        cmd.extend(["--const", "4", "--const", "5", "--const", "6"]);
        if native {
            cmd.push("--native");
        }
        let out = mcc(&cmd);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout
    };
    let (written, native) = (ir(false), ir(true));
    // Four rows' `y += lower[c, r, j] * xc[j]` in one inner loop: the loads of `lower`
    // in the forward pass go from one to four in that loop, plus one in each row's rest.
    let loads = |text: &str| text.matches("load.trusted %lower").count();
    assert_eq!(loads(&written), 1, "{written}");
    assert_eq!(loads(&native), 1 + 4 + 4, "{native}");
}
