//! Partial derivatives of the elementary ops, shared by reverse and forward mode: both
//! multiply an incoming adjoint or tangent `g` by the same derivative, since a
//! scalar op's pullback and pushforward are the same linear map.

use crate::emit::Emit;
use mcir_ir::{FUnOp, IBinOp, Op, TypeTable, Value};

/// Which primal values `g * f'(x)` reads for a unary op: its operand, its result.
pub(crate) fn unary_reads(op: FUnOp) -> (bool, bool) {
    match op {
        FUnOp::Neg | FUnOp::Floor | FUnOp::Ceil | FUnOp::Round | FUnOp::Sign => (false, false),
        FUnOp::Tan | FUnOp::Tanh | FUnOp::Exp | FUnOp::Expm1 | FUnOp::Sqrt => (false, true),
        FUnOp::Sin
        | FUnOp::Cos
        | FUnOp::Sinh
        | FUnOp::Cosh
        | FUnOp::Asin
        | FUnOp::Acos
        | FUnOp::Atan
        | FUnOp::Log
        | FUnOp::Log1p
        | FUnOp::Abs => (true, false),
    }
}

/// `g * f'(x)` for a unary op, scalar or elementwise, given the operand `x` and result
/// `r` where [`unary_reads`] asks for them; `None` for ops whose derivative is zero.
pub(crate) fn unary_times(
    e: &mut Emit,
    op: FUnOp,
    x: Option<Value>,
    r: Option<Value>,
    g: Value,
) -> Option<Value> {
    let (x, r) = (x.unwrap_or(g), r.unwrap_or(g));
    Some(match op {
        FUnOp::Neg => e.neg(g),
        FUnOp::Sin | FUnOp::Sinh | FUnOp::Cosh => {
            let d = match op {
                FUnOp::Sin => FUnOp::Cos,
                FUnOp::Sinh => FUnOp::Cosh,
                _ => FUnOp::Sinh,
            };
            let c = e.un(d, x);
            e.mul(g, c)
        }
        FUnOp::Cos => {
            let s = e.un(FUnOp::Sin, x);
            let t = e.mul(g, s);
            e.neg(t)
        }
        FUnOp::Tan | FUnOp::Tanh => {
            // tan' = 1 + tan², tanh' = 1 - tanh²
            let sq = e.mul(r, r);
            let one = e.fconst(1.0);
            let d = if op == FUnOp::Tan { e.add(one, sq) } else { e.sub(one, sq) };
            e.mul(g, d)
        }
        FUnOp::Asin | FUnOp::Acos => {
            let sq = e.mul(x, x);
            let one = e.fconst(1.0);
            let d = e.sub(one, sq);
            let d = e.un(FUnOp::Sqrt, d);
            let t = e.div(g, d);
            if op == FUnOp::Acos {
                e.neg(t)
            } else {
                t
            }
        }
        FUnOp::Atan => {
            let sq = e.mul(x, x);
            let one = e.fconst(1.0);
            let d = e.add(one, sq);
            e.div(g, d)
        }
        FUnOp::Exp => e.mul(g, r),
        FUnOp::Log => e.div(g, x),
        FUnOp::Log1p => {
            let one = e.fconst(1.0);
            let d = e.add(one, x);
            e.div(g, d)
        }
        FUnOp::Expm1 => {
            let one = e.fconst(1.0);
            let d = e.add(r, one);
            e.mul(g, d)
        }
        FUnOp::Sqrt => {
            // `g · (0.5 / r)`, not `g / (2 r)`: the quotient waits on the primal result
            // only, so it is computed beside the chain of adjoints (or tangents) rather
            // than on it, where its latency is four products'. `0.5 / sqrt(x)` cannot
            // overflow where `g / (2 sqrt(x))` does not: `sqrt` of the smallest positive
            // number is above 1e-162.
            let half = e.fconst(0.5);
            let d = e.div(half, r);
            e.mul(g, d)
        }
        FUnOp::Abs => {
            let s = e.un(FUnOp::Sign, x);
            e.mul(g, s)
        }
        FUnOp::Floor | FUnOp::Ceil | FUnOp::Round | FUnOp::Sign => return None,
    })
}

/// `g * n * x^(n-1)` for `x ** n` with an `i64` exponent, scalar or elementwise.
pub(crate) fn powi_times(e: &mut Emit, x: Value, n: Value, g: Value) -> Value {
    let one = e.iconst(1);
    let nm1 = e.val(Op::IBinary(IBinOp::Sub), vec![n, one], TypeTable::I64);
    let p = e.powi(x, nm1);
    let nf = e.val(Op::IToF, vec![n], TypeTable::F64);
    let t = e.mul(p, nf);
    e.mul(g, t)
}
