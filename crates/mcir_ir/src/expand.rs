//! Loops of a few iterations counted between constants, written out once per iteration.
//!
//! Code about points in space and small matrices loops over two, three or four
//! coordinates: `for r in 0..3 { for c in 0..3 { m[r, c] = data[i, 3 * r + c]; } }`.
//! As loops, each access indexes by a counter, so a fresh `3 × 3` array stays memory
//! (its elements loaded and stored with checks, its overwritten values taped by the
//! forward pass), and a helper the loops call per element is a call. Written out, the
//! counters are constants: the array's elements become values (`crate::scalarise`),
//! comparisons of constants (`if r == c`) pick their arm before run time, and what is
//! left is straight-line code that inlining and the derived passes handle as if the
//! source had spelled it out.
//!
//! A loop is written out when it counts by one from a constant to a constant at most
//! [`GENERIC.max_trip`](GENERIC) iterations above it, is left only by its header's test,
//! has one back edge and is entered by one edge, and its copies add at most
//! [`GENERIC.max_loop_growth`](GENERIC) instructions (the function at most
//! [`GENERIC.max_growth`](GENERIC)). This is the complete unrolling that code compiled
//! for its arguments' shapes gets (`crate::specialise`), within tighter limits: generic
//! code knows only the loops the source counted to constants, and each instruction
//! added is compiled four times over (the function, its forward and reverse passes and
//! its tangent). Outer loops go first, so a loop inside whose bounds are the outer
//! counter gets constant bounds too.
//!
//! Iteration `t` is a copy of the loop's blocks in which the counter is the constant
//! `start + t`. The copies run the same operations on the same values in the same
//! order as the loop did, with the same checks and spans, so results and runtime errors
//! are the same, bit for bit. Integer arithmetic and comparisons on constants are then
//! folded (arithmetic that would overflow stays, to fail at run time), and a branch on
//! a constant becomes a jump.

use crate::function::*;
use crate::specialise::{has_short_loop, unroll_short_loops_within, UnrollLimits};

/// How far generic code is unrolled: loops of up to eight iterations (points in the
/// plane and in space, quaternions, `3 × 3` and `4 × 4` matrices, a handful of
/// features), within the budgets of instructions added.
pub const GENERIC: UnrollLimits =
    UnrollLimits { max_trip: 8, max_loop_growth: 512, max_growth: 1536, per_block_estimate: true };

/// `module` with the short counted loops of every function written out.
pub fn expand_short_loops(module: &Module) -> Module {
    let mut out = module.clone();
    for (id, f) in module.funcs.iter() {
        if let Some(g) = expand_function(f) {
            out.funcs[id] = g;
        }
    }
    out
}

/// `f` with its short counted loops written out, or `None` when it has none (and is
/// left exactly as it is).
pub fn expand_function(f: &Function) -> Option<Function> {
    has_short_loop(f, &GENERIC).then(|| unroll_short_loops_within(f.clone(), &GENERIC))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s += a[i]` for `i` from 0 to `BOUND` (a value named in the text, `%2 = iconst
    /// COUNT` or `%n_12`).
    const SUM: &str = "fn @f(%a_0: f64[], %n_12: i64) -> f64 {
bb0:
    %1: i64 = iconst 0
    %2: i64 = iconst COUNT
    %3: f64 = fconst 0.0
    jump bb1(%1, %3)
bb1(%i_9: i64, %s_10: f64):
    %4: bool = icmp lt %i_9, BOUND
    br %4, bb2, bb3(%s_10)
bb2:
    %5: f64 = load %a_0[%i_9]
    %6: f64 = fadd %s_10, %5
    %7: i64 = iconst 1
    %8: i64 = iadd %i_9, %7
    jump bb1(%8, %6)
bb3(%r_11: f64):
    ret %r_11
}
";

    fn expanded(count: i64, bound: &str) -> Option<String> {
        let text = SUM.replace("COUNT", &count.to_string()).replace("BOUND", bound);
        let m = crate::parse_module(&text).expect("parses");
        let f = m.funcs.values().next().expect("one function");
        let g = expand_function(f)?;
        let mut out = m.clone();
        let id = out.funcs.keys().next().expect("one function");
        out.funcs[id] = g;
        crate::verify_module(&out).expect("verifies");
        Some(crate::print_module(&out))
    }

    #[test]
    fn a_loop_of_three_iterations_becomes_three_copies_with_constant_counters() {
        let printed = expanded(3, "%2").expect("a loop is written out");
        assert!(!printed.contains("icmp"), "the test is gone:\n{printed}");
        assert_eq!(printed.matches("load").count(), 3, "{printed}");
        for k in ["iconst 0", "iconst 1", "iconst 2"] {
            assert!(printed.contains(k), "{k} in:\n{printed}");
        }
        assert_eq!(printed.matches("bb").count(), 1, "one block:\n{printed}");
    }

    #[test]
    fn a_loop_counted_to_a_value_or_beyond_the_limit_stays() {
        assert!(expanded(3, "%n_12").is_none());
        assert!(expanded(GENERIC.max_trip + 1, "%2").is_none());
    }
}
