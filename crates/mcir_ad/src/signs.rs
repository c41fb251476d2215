//! Negations folded into the arithmetic around them. Adjoints of subtractions and
//! negations come out as `fneg`s whose results are multiplied and added
//! (`b̄ += -(ȳ) · x`); an `fneg` costs three machine instructions (the sign mask is
//! materialised each time) and a cycle on the chain it sits on. Pushing each negation
//! through products and quotients into the sum that takes it (`b̄ -= ȳ · x`) removes it.
//!
//! Every rewrite is exact in IEEE arithmetic: `-(a) · b` is `-(a · b)`, `-(a) / b` is
//! `-(a / b)`, `x + -(a)` is `x - a` and `-(-(a))` is `a`, bit for bit. The one rewrite
//! that is not, `-(a) + -(b)` as `-(a + b)`, differs only in the sign of an exact zero
//! sum, which no derivative depends on.

use mcir_ir::{FBinOp, FUnOp, Function, InstData, Op, TypeTable, Value, ValueData, ValueDef};
use std::collections::HashMap;

/// `f` with its negations pushed into the products, quotients and sums that use them.
/// No value changes meaning: an instruction whose result would become a negation is
/// computed unnegated into a new value and becomes the `fneg` of it, which the next
/// arithmetic absorbs; negations left without uses are for DCE to remove.
pub(crate) fn sink_negations(mut f: Function) -> Function {
    // `negation_of[v] = a` when `v = -a`.
    let mut negation_of: HashMap<Value, Value> = HashMap::new();
    // `-(-(a))` is `a`.
    let mut same: HashMap<Value, Value> = HashMap::new();
    let blocks: Vec<_> = f.blocks.keys().collect();
    for b in blocks {
        let insts = f.blocks[b].insts.clone();
        let mut out = Vec::with_capacity(insts.len());
        for i in insts {
            let args: Vec<Value> =
                f.insts[i].args.iter().map(|a| same.get(a).copied().unwrap_or(*a)).collect();
            f.insts[i].args = args.clone();
            let result = match f.insts[i].result {
                Some(r) if f.values[r].ty == TypeTable::F64 => r,
                _ => {
                    out.push(i);
                    continue;
                }
            };
            let neg = |v: &Value| negation_of.get(v).copied();
            // The new op and operands, and whether they compute the negation of the result.
            let rewrite = match (&f.insts[i].op, args.as_slice()) {
                (Op::FUnary(FUnOp::Neg), [a]) => {
                    match neg(a) {
                        Some(x) => {
                            same.insert(result, x);
                        }
                        None => {
                            negation_of.insert(result, *a);
                        }
                    }
                    None
                }
                (Op::FBinary(op @ (FBinOp::Mul | FBinOp::Div)), [x, y]) => match (neg(x), neg(y)) {
                    (Some(a), Some(c)) => Some((Op::FBinary(*op), vec![a, c], false)),
                    (Some(a), None) => Some((Op::FBinary(*op), vec![a, *y], true)),
                    (None, Some(c)) => Some((Op::FBinary(*op), vec![*x, c], true)),
                    (None, None) => None,
                },
                (Op::FBinary(FBinOp::Add), [x, y]) => match (neg(x), neg(y)) {
                    (Some(a), Some(c)) => Some((Op::FBinary(FBinOp::Add), vec![a, c], true)),
                    (Some(a), None) => Some((Op::FBinary(FBinOp::Sub), vec![*y, a], false)),
                    (None, Some(c)) => Some((Op::FBinary(FBinOp::Sub), vec![*x, c], false)),
                    (None, None) => None,
                },
                (Op::FBinary(FBinOp::Sub), [x, y]) => match (neg(x), neg(y)) {
                    (Some(a), Some(c)) => Some((Op::FBinary(FBinOp::Sub), vec![c, a], false)),
                    (Some(a), None) => Some((Op::FBinary(FBinOp::Add), vec![a, *y], true)),
                    (None, Some(c)) => Some((Op::FBinary(FBinOp::Add), vec![*x, c], false)),
                    (None, None) => None,
                },
                _ => None,
            };
            match rewrite {
                None => out.push(i),
                Some((op, new_args, false)) => {
                    f.insts[i].op = op;
                    f.insts[i].args = new_args;
                    out.push(i);
                }
                Some((op, new_args, true)) => {
                    // `t` computes the negation; the instruction becomes `fneg t`.
                    let span = f.insts[i].span;
                    let n = f.insts.push(InstData { op, args: new_args, result: None, span, in_tape: false });
                    let t =
                        f.values.push(ValueData { ty: TypeTable::F64, def: ValueDef::Inst(n), name: None });
                    f.insts[n].result = Some(t);
                    f.insts[i].op = Op::FUnary(FUnOp::Neg);
                    f.insts[i].args = vec![t];
                    negation_of.insert(result, t);
                    out.push(n);
                    out.push(i);
                }
            }
        }
        f.blocks[b].insts = out;
    }
    // Uses the walk did not reach (terminators, and uses before a definition in block
    // order) read the equal value too.
    f.substitute(&same);
    f
}
