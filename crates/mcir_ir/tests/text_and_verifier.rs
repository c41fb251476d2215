//! The IR text format and the verifier, on hand-written IR: a function using every op
//! round-trips, and each kind of malformed IR is rejected with a message naming it.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcir_ir::{parse_module, print_module, verify_module};

const EVERY_OP: &str = "\
struct Point { x: f64, y: f64 }
mut struct Body { pos: f64[], m: f64 }

fn @every(%x_0: f64, %n_1: i64, %a_2: f64[,], %p_3: Point, %b_4: Body) -> (f64, i64) {
bb0:
    %5: f64 = fconst -0.0
    %6: f64 = fconst NaN
    %7: f64 = fconst inf
    %8: f64 = fconst 1e-7
    %9: i64 = iconst -3
    %10: bool = bconst true
    %11: f64 = fadd %x_0, %5
    %12: f64 = atan2 %11, %8
    %13: f64 = fmin %12, %6
    %14: f64 = sign %13
    %15: f64 = fneg %14
    %16: f64 = fpowi %15, %9
    %17: i64 = irem %n_1, %9
    %18: i64 = iabs %17
    %19: i64 = imax %18, %n_1
    %20: bool = fcmp le %x_0, %7
    %21: bool = icmp ne %19, %9
    %22: bool = bcmp eq %20, %21
    %23: bool = not %22
    %24: f64 = itof %19
    %25: i64 = ftoi %24
    %26: i64 = array.dim 1 %a_2
    %27: f64[,] = array.fill %x_0, %25, %26
    %28: f64 = load %a_2[%9, %n_1]
    store %27[%9, %n_1], %28
    %29: f64[,] = array.copy %27
    array.copy_into %27, %29
    %30: f64 = array.sum %29
    %31: f64[] = array.lit [2] %30, %28
    %32: f64 = array.dot %31, %31
    %33: f64[,] = map.fmul %29, %32
    %34: f64[,] = map.fsub %32, %33
    %35: f64[,] = map.fpow %34, %x_0
    %36: f64[,] = map.fpowi %35, %9
    %37: f64[,] = map.tanh %36
    %38: i64[,] = array.lit [2, 1] %17, %18
    %39: i64[,] = map.imul %38, %38
    %40: ref<f64[,]> = ref.new %37
    %41: f64[,] = ref.load %40
    ref.store %40, %29
    %42: (f64, i64) = tuple.new %30, %25
    %43: f64 = tuple.get 0 %42
    %44: f64 = struct.get Point.y %p_3
    %45: Point = struct.new Point %43, %44
    %46: f64 = mut.load Body.m %b_4
    mut.store Body.m %b_4, %46
    print %45
    call @other(%b_4)
    br %23, bb1(%25), bb2
bb1(%k_47: i64):
    %48: bool = array.shares %a_2, %27
    jump bb2
bb2:
    ret %42
}

fn @other(%b_0: Body) {
bb0:
    ret
}
";

#[test]
fn every_op_round_trips() {
    let m = parse_module(EVERY_OP).unwrap_or_else(|e| panic!("{e}"));
    let printed = print_module(&m);
    let again = print_module(&parse_module(&printed).unwrap());
    assert_eq!(printed, again);
}

/// Replaces `from` by `to` in the every-op function and expects an error containing `want`.
fn rejects(from: &str, to: &str, want: &str) {
    rejects_in(EVERY_OP, from, to, want);
}

/// Replaces `from` by `to` in `ir` and expects an error containing `want`.
fn rejects_in(ir: &str, from: &str, to: &str, want: &str) {
    assert!(ir.contains(from), "test bug: {from:?} not in the text");
    let text = ir.replacen(from, to, 1);
    let err = match parse_module(&text) {
        Err(e) => e.to_string(),
        Ok(m) => match verify_module(&m) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("accepted IR with {to:?} for {from:?}"),
        },
    };
    assert!(err.contains(want), "expected {want:?} in: {err}");
}

#[test]
fn array_lit_shape_errors() {
    rejects(
        "%38: i64[,] = array.lit [2, 1]",
        "%38: i64[,] = array.lit [2]",
        "1 extents for an array of rank 2",
    );
    rejects("%38: i64[,] = array.lit [2, 1]", "%38: i64[,] = array.lit [3, 1]", "do not fill the shape");
}

#[test]
fn malformed_ir_is_rejected() {
    rejects("%11: f64 = fadd %x_0, %5", "%11: f64 = fadd %x_0, %9", "takes (f64, f64)");
    rejects("%11: f64 = fadd %x_0, %5", "%11: i64 = fadd %x_0, %5", "yields f64");
    rejects("%11: f64 = fadd %x_0, %5", "%11: f64 = fadd %x_0, %99", "never defined");
    rejects("%11: f64 = fadd %x_0, %5", "%11: f64 = frobnicate %x_0", "unknown operation");
    rejects("%12: f64 = atan2 %11, %8", "%11: f64 = atan2 %11, %8", "defined twice");
    rejects("%12: f64 = atan2 %11, %8", "%12: f64 = atan2 %13, %8", "before it is defined");
    rejects("jump bb2\n", "jump bb7\n", "never defined");
    rejects("jump bb2\n", "jump bb2(%k_47)\n", "passes 1 arguments");
    rejects("br %23, bb1(%25), bb2", "br %25, bb1(%25), bb2", "not a bool");
    rejects("br %23, bb1(%25), bb2", "br %23, bb1(%10), bb2", "passes a bool to a i64");
    rejects("    ret %42\n}\n\nfn", "    ret %43\n}\n\nfn", "returns a f64");
    rejects("%28: f64 = load %a_2[%9, %n_1]", "%28: f64 = load %a_2[%9]", "takes");
    rejects("%44: f64 = struct.get Point.y %p_3", "%44: f64 = mut.load Point.y %p_3", "struct.get");
    rejects("%44: f64 = struct.get Point.y %p_3", "%44: f64 = struct.get Point.z %p_3", "no field");
    rejects("call @other(%b_4)", "call @nowhere(%b_4)", "unknown function");
    rejects("call @other(%b_4)", "call @other(%p_3)", "takes (Body)");
    rejects("%26: i64 = array.dim 1 %a_2", "%26: i64 = array.dim 2 %a_2", "dimension 2");
    rejects("%39: i64[,] = map.imul %38, %38", "%39: i64[,] = map.idiv %38, %38", "no elementwise form");
    rejects(
        "%48: bool = array.shares %a_2, %27",
        "%48: bool = array.shares %a_2, %31",
        "takes (f64[,], f64[,])",
    );
    rejects("%48: bool = array.shares %a_2, %27", "%48: i64 = array.shares %a_2, %27", "yields bool");
}

/// A record of three values per counter value: the reservation's width, the put's values.
const RECORDS: &str = "\
fn @f(%n_0: i64, %x_1: f64) -> f64 {
bb0:
    %2: stack<f64> = stack.new
    %3: i64 = iconst 0
    %4: i64 = iconst 3
    %5: i64 = stack.reserve %2, %3, %n_0, %3, %4
    stack.put %2, %5, %3, %x_1, %x_1, %x_1
    %6: f64 = stack.pop %2
    ret %6
}
";

#[test]
fn records_take_a_constant_width_and_values_of_the_stack_type() {
    let m = parse_module(RECORDS).unwrap();
    verify_module(&m).unwrap();
    assert_eq!(print_module(&m), RECORDS);
    let bad = |from: &str, to: &str, want: &str| rejects_in(RECORDS, from, to, want);
    bad("%3, %n_0, %3, %4", "%3, %n_0, %3, %n_0", "positive constant width");
    bad("%4: i64 = iconst 3", "%4: i64 = iconst 0", "positive constant width");
    bad("%x_1, %x_1, %x_1", "%x_1, %n_0, %x_1", "takes (stack<f64>, i64, i64, f64, f64, f64)");
}

/// A value whose derivative is declared: `y`, then pairs of a coefficient and a value.
const LINEARIZED: &str = "\
fn @f(%x_0: f64, %y_1: f64) -> f64 {
bb0:
    %2: f64 = fmul %x_0, %y_1
    %3: f64 = linearized %2, %y_1, %x_0, %x_0, %y_1
    ret %3
}
";

#[test]
fn linearized_takes_a_value_and_pairs_of_f64() {
    let m = parse_module(LINEARIZED).unwrap();
    verify_module(&m).unwrap();
    assert_eq!(print_module(&m), LINEARIZED);
    let bad = |from: &str, to: &str, want: &str| rejects_in(LINEARIZED, from, to, want);
    bad("%2, %y_1, %x_0, %x_0, %y_1", "%2, %y_1, %x_0, %x_0", "pairs of a coefficient and a value");
    bad("%3: f64 = linearized", "%3: i64 = linearized", "yields f64");
}

#[test]
fn unreachable_blocks_and_entry_targets_are_rejected() {
    let unreachable = "fn @f() {\nbb0:\n    ret\nbb1:\n    ret\n}\n";
    let e = verify_module(&parse_module(unreachable).unwrap()).unwrap_err();
    assert!(e.to_string().contains("unreachable"), "{e}");
    let to_entry = "fn @f() {\nbb0:\n    jump bb1\nbb1:\n    jump bb0\n}\n";
    let e = verify_module(&parse_module(to_entry).unwrap()).unwrap_err();
    assert!(e.to_string().contains("entry block"), "{e}");
}

#[test]
fn parser_reports_line_and_column() {
    let e = parse_module("fn @f() {\nbb0:\n    %1: f64 = fconst abc\n    ret\n}\n").unwrap_err();
    assert_eq!((e.line, e.col), (3, 22), "{e}");
}
