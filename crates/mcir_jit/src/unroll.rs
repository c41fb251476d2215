//! Which innermost counted loops native code runs several iterations at a time.
//!
//! Cranelift neither unrolls nor vectorises, so a short loop body pays its test, its
//! branch back and the time-limit test on every iteration; the reverse pass of
//! `s += x[i]` (`dx[i] += s̄`) spends more on them than on its work. A loop of one
//! header and one body block whose counter steps by one is lowered with a second
//! header in front: when the counter shows that the next `factor` tests of the loop
//! would all pass, `factor` copies of the body run back to back; otherwise the loop
//! runs as written, one iteration, and comes back. The copies are the same
//! instructions with the same checks in the same order as the iterations they stand
//! for, so the facts that made an index or a step safe (`bounds`) hold in every copy.

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, CmpOp, Function, Op, Terminator, Value};

/// How a loop's header decides to run its body once more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    /// `counter < bound` enters the body, and the body adds one to the counter.
    Below { bound: Value },
    /// `counter <= floor` leaves the loop, and the body subtracts one from the counter
    /// (the reverse passes' loops counting down).
    Above { floor: i64 },
}

/// A loop to lower with unrolled copies of its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unroll {
    /// The loop's only body block (its header's only latch).
    pub body: Block,
    /// The header parameter that counts iterations.
    pub counter: Value,
    pub test: Test,
    /// How many copies of the body run per pass of the unrolled loop (a power of two).
    pub factor: i64,
}

/// Instructions (other than constants) of a body run four at a time, and twice.
const FOUR_UP_TO: usize = 16;
const TWO_UP_TO: usize = 48;

/// The unrolling of the loop whose header is `h`, if it is one this module handles: the
/// header computes nothing but constants and its test, the body is one block entered
/// only from the header and jumping back to it, and the counter steps by one towards
/// the end the test looks for.
pub(crate) fn plan(f: &Function, h: Block, cfg: &ControlFlow) -> Option<Unroll> {
    let latches: Vec<Block> = cfg.latches(h).collect();
    let [body] = latches.as_slice() else { return None };
    let body = *body;
    if body == h || !f.blocks[body].params.is_empty() {
        return None;
    }
    if cfg.preds.get(body.index()).is_none_or(|p| p.iter().any(|&b| b != h)) {
        return None;
    }
    let Terminator::Jump(back) = &f.blocks[body].term else { return None };
    if back.block != h {
        return None;
    }
    let Terminator::Branch { cond, then_dest, else_dest } = &f.blocks[h].term else { return None };
    let header_is_simple = f.blocks[h]
        .insts
        .iter()
        .all(|&i| matches!(f.insts[i].op, Op::IConst(_) | Op::FConst(_) | Op::BConst(_) | Op::ICmp(_)));
    if !header_is_simple {
        return None;
    }
    let def = |v: Value| match f.values[v].def {
        mcir_ir::ValueDef::Inst(i) => Some(&f.insts[i]),
        mcir_ir::ValueDef::Param(..) => None,
    };
    let test = def(*cond)?;
    let [a, b] = test.args.as_slice() else { return None };
    let k = f.blocks[h].params.iter().position(|p| p == a)?;
    let counter = *a;
    let step = def(*back.args.get(k)?)?;
    let constant = |v: Value| match def(v)?.op {
        Op::IConst(c) => Some(c),
        _ => None,
    };
    let steps_by = |delta: i64| match step.op {
        Op::IBinary(mcir_ir::IBinOp::Add) => {
            step.args[0] == counter && constant(step.args[1]) == Some(delta)
                || step.args[1] == counter && constant(step.args[0]) == Some(delta)
        }
        Op::IBinary(mcir_ir::IBinOp::Sub) => {
            step.args[0] == counter && constant(step.args[1]) == Some(-delta)
        }
        _ => false,
    };
    let test = match test.op {
        Op::ICmp(CmpOp::Lt) if then_dest.block == body && else_dest.block != body && steps_by(1) => {
            // The bound must be the same on every iteration: a constant, or a value
            // from outside the loop.
            let outside = match f.values[*b].def {
                mcir_ir::ValueDef::Param(pb, _) => pb != h && pb != body,
                mcir_ir::ValueDef::Inst(i) => {
                    matches!(f.insts[i].op, Op::IConst(_))
                        || !f.blocks[h].insts.contains(&i) && !f.blocks[body].insts.contains(&i)
                }
            };
            if !outside {
                return None;
            }
            Test::Below { bound: *b }
        }
        Op::ICmp(CmpOp::Le) if else_dest.block == body && then_dest.block != body && steps_by(-1) => {
            Test::Above { floor: constant(*b)? }
        }
        _ => return None,
    };
    if !then_dest.args.is_empty() && then_dest.block == body
        || !else_dest.args.is_empty() && else_dest.block == body
    {
        return None;
    }
    let work = f.blocks[body]
        .insts
        .iter()
        .filter(|&&i| !matches!(f.insts[i].op, Op::IConst(_) | Op::FConst(_) | Op::BConst(_)))
        .count();
    let factor = match work {
        0..=FOUR_UP_TO => 4,
        _ if work <= TWO_UP_TO => 2,
        _ => return None,
    };
    if let Test::Above { floor } = test {
        floor.checked_add(factor - 1)?;
    }
    Some(Unroll { body, counter, test, factor })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(text: &str) -> Option<Unroll> {
        let m = mcir_ir::parse_module(text).expect("parses");
        let f = m.funcs.values().next().expect("a function");
        let cfg = ControlFlow::compute(f);
        cfg.rpo.iter().find_map(|&b| plan(f, b, &cfg))
    }

    #[test]
    fn counting_up_to_an_extent() {
        let p = plan_of(
            "fn @f(%x_0: f64[]) -> f64 {
bb0:
    %1: i64 = array.dim 0 %x_0
    %2: i64 = iconst 0
    %3: f64 = fconst 0.0
    jump bb1(%2, %3)
bb1(%i_4: i64, %a_5: f64):
    %6: bool = icmp lt %i_4, %1
    br %6, bb2, bb3
bb2:
    %7: f64 = load %x_0[%i_4]
    %8: f64 = fadd %a_5, %7
    %9: i64 = iconst 1
    %10: i64 = iadd %i_4, %9
    jump bb1(%10, %8)
bb3:
    ret %a_5
}",
        )
        .expect("unrolled");
        assert_eq!(p.factor, 4);
        assert!(matches!(p.test, Test::Below { .. }));
    }

    #[test]
    fn counting_down_to_zero() {
        let p = plan_of(
            "fn @f(%x_0: f64[], %n_1: i64) {
bb0:
    jump bb1(%n_1)
bb1(%i_2: i64):
    %3: i64 = iconst 0
    %4: bool = icmp le %i_2, %3
    br %4, bb3, bb2
bb2:
    %5: i64 = iconst 1
    %6: i64 = isub %i_2, %5
    %7: f64 = load %x_0[%6]
    store %x_0[%6], %7
    jump bb1(%6)
bb3:
    ret
}",
        )
        .expect("unrolled");
        assert_eq!(p.test, Test::Above { floor: 0 });
    }

    #[test]
    fn not_a_bound_that_moves_or_a_step_of_two() {
        // The bound is a header parameter: it may change from one iteration to the next.
        assert_eq!(
            plan_of(
                "fn @f(%n_0: i64) {
bb0:
    %1: i64 = iconst 0
    jump bb1(%1, %n_0)
bb1(%i_2: i64, %m_3: i64):
    %4: bool = icmp lt %i_2, %m_3
    br %4, bb2, bb3
bb2:
    %5: i64 = iconst 1
    %6: i64 = iadd %i_2, %5
    %7: i64 = isub %m_3, %5
    jump bb1(%6, %7)
bb3:
    ret
}"
            ),
            None
        );
        assert_eq!(
            plan_of(
                "fn @f(%n_0: i64) {
bb0:
    %1: i64 = iconst 0
    jump bb1(%1)
bb1(%i_2: i64):
    %3: bool = icmp lt %i_2, %n_0
    br %3, bb2, bb3
bb2:
    %4: i64 = iconst 2
    %5: i64 = iadd %i_2, %4
    jump bb1(%5)
bb3:
    ret
}"
            ),
            None
        );
    }
}
