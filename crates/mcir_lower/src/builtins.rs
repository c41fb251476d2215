//! Lowering calls of the builtin functions of LANGUAGE.md §6.

use crate::stmt::{FnLower, Typed};
use crate::Res;
use mcir_ir::{FBinOp, FUnOp, IBinOp, IUnOp, Op, Scalar, Transpose, Type, TypeTable};
use mcir_syntax::ast::{Expr, ExprKind, Span};
use mcir_syntax::Diagnostic;

/// Builtins beyond LANGUAGE.md §6. Unlike those, a program may define a function of the
/// same name, which then takes precedence.
pub(crate) const EXTENSION_NAMES: &[&str] = &["matmul", "matvec", "transpose"];

/// Whether `name` is an extension builtin.
pub(crate) fn is_extension(name: &str) -> bool {
    EXTENSION_NAMES.contains(&name)
}

fn unary_math(name: &str) -> Option<FUnOp> {
    FUnOp::ALL.into_iter().find(|u| *u != FUnOp::Neg && u.name() == name)
}

impl FnLower<'_> {
    pub(crate) fn builtin(
        &mut self,
        name: &str,
        name_span: Span,
        args: &[Expr],
        span: Span,
    ) -> Res<Option<Typed>> {
        let arity: (usize, usize) = match name {
            "atan2" | "pow" | "min" | "max" | "size" | "dot" | "matmul" | "matvec" => (2, 2),
            "zeros" | "ones" => (1, 3),
            "fill" => (2, 4),
            _ => (1, 1),
        };
        if args.len() < arity.0 || args.len() > arity.1 {
            let want =
                if arity.0 == arity.1 { arity.0.to_string() } else { format!("{} to {}", arity.0, arity.1) };
            let msg = format!(
                "`{name}` takes {want} argument{}, but {} {} given",
                if want == "1" { "" } else { "s" },
                args.len(),
                if args.len() == 1 { "was" } else { "were" }
            );
            return Err(self.error(Diagnostic::error(msg, span)));
        }
        // `size(a, d)` needs its dimension as a literal; lower it before the generic path.
        if name == "size" {
            let a = self.expr(&args[0])?;
            let Some((_, rank)) = self.types.as_array(a.ty) else {
                return Err(self.wrong_arg(name, 1, "an array", a, &args[0]));
            };
            let d = match args[1].kind {
                ExprKind::Int(d) => d,
                _ => {
                    let msg = "the dimension of `size(a, d)` must be an integer literal";
                    return Err(self.error(Diagnostic::error(msg, args[1].span)));
                }
            };
            if d < 0 || d >= rank as i64 {
                let msg = format!(
                    "dimension {d} does not exist: the array has rank {rank} (dimensions 0 to {})",
                    rank - 1
                );
                return Err(self.error(Diagnostic::error(msg, args[1].span)));
            }
            return Ok(Some(self.emit(Op::ArrayDim(d as u8), vec![a.v], TypeTable::I64, span)));
        }
        let mut vals = Vec::new();
        for a in args {
            vals.push(self.expr(a)?);
        }
        let t0 = self.types.get(vals[0].ty).clone();
        let (f64_, i64_) = (TypeTable::F64, TypeTable::I64);
        let v0 = vals[0];
        let out = match name {
            "f64" => match t0 {
                Type::Scalar(Scalar::I64) => self.emit(Op::IToF, vec![v0.v], f64_, span),
                Type::Scalar(Scalar::F64) => v0,
                _ => return Err(self.wrong_arg(name, 1, "an i64", v0, &args[0])),
            },
            "i64" => match t0 {
                Type::Scalar(Scalar::F64) => self.emit(Op::FToI, vec![v0.v], i64_, span),
                Type::Scalar(Scalar::I64) => v0,
                _ => return Err(self.wrong_arg(name, 1, "an f64", v0, &args[0])),
            },
            "abs" if v0.ty == i64_ => self.emit(Op::IUnary(IUnOp::Abs), vec![v0.v], i64_, span),
            "atan2" | "pow" | "min" | "max" => {
                let v1 = vals[1];
                let (f, i) = match name {
                    "atan2" => (FBinOp::Atan2, None),
                    "pow" => (FBinOp::Pow, None),
                    "min" => (FBinOp::Min, Some(IBinOp::Min)),
                    _ => (FBinOp::Max, Some(IBinOp::Max)),
                };
                match (v0.ty, v1.ty) {
                    (TypeTable::F64, TypeTable::F64) => {
                        self.emit(Op::FBinary(f), vec![v0.v, v1.v], f64_, span)
                    }
                    (TypeTable::F64, TypeTable::I64) if name == "pow" => {
                        self.emit(Op::FPowI, vec![v0.v, v1.v], f64_, span)
                    }
                    (TypeTable::I64, TypeTable::I64) if i.is_some() => {
                        self.emit(Op::IBinary(i.unwrap_or(IBinOp::Min)), vec![v0.v, v1.v], i64_, span)
                    }
                    _ => {
                        let takes = if i.is_some() { "two f64 or two i64" } else { "two f64" };
                        let msg = format!(
                            "`{name}` takes {takes}, not {} and {}",
                            self.types.display(v0.ty),
                            self.types.display(v1.ty)
                        );
                        let d = Diagnostic::error(msg, span)
                            .with_note("it applies to scalars only; use a loop for arrays");
                        return Err(self.error(d));
                    }
                }
            }
            "len" => match t0 {
                Type::Array { rank: 1, .. } => self.emit(Op::ArrayDim(0), vec![v0.v], i64_, span),
                Type::Array { rank, .. } => {
                    let msg = format!("`len` takes a rank-1 array, not one of rank {rank}");
                    let d = Diagnostic::error(msg, span)
                        .with_note("use `size(a, d)` for the extent of dimension d");
                    return Err(self.error(d));
                }
                _ => return Err(self.wrong_arg(name, 1, "an array", v0, &args[0])),
            },
            "sum" => match t0 {
                Type::Array { elem: e @ (Scalar::F64 | Scalar::I64), .. } => {
                    self.emit(Op::Sum, vec![v0.v], TypeTable::scalar(e), span)
                }
                _ => return Err(self.wrong_arg(name, 1, "an f64 or i64 array", v0, &args[0])),
            },
            "dot" => {
                let f1 = self.types.array(Scalar::F64, 1);
                if v0.ty != f1 {
                    return Err(self.wrong_arg(name, 1, "an f64[]", v0, &args[0]));
                }
                if vals[1].ty != f1 {
                    return Err(self.wrong_arg(name, 2, "an f64[]", vals[1], &args[1]));
                }
                self.emit(Op::Dot, vec![v0.v, vals[1].v], f64_, span)
            }
            "matmul" | "matvec" => {
                let (m2, v1) = (self.types.array(Scalar::F64, 2), self.types.array(Scalar::F64, 1));
                if v0.ty != m2 {
                    return Err(self.wrong_arg(name, 1, "an f64[,]", v0, &args[0]));
                }
                let (want, what, op) = if name == "matmul" {
                    (m2, "an f64[,]", Op::MatMul(Transpose::NONE))
                } else {
                    (v1, "an f64[]", Op::MatVec(false))
                };
                if vals[1].ty != want {
                    return Err(self.wrong_arg(name, 2, what, vals[1], &args[1]));
                }
                self.emit(op, vec![v0.v, vals[1].v], want, span)
            }
            "transpose" => {
                if v0.ty != self.types.array(Scalar::F64, 2) {
                    return Err(self.wrong_arg(name, 1, "an f64[,]", v0, &args[0]));
                }
                self.emit(Op::Transpose, vec![v0.v], v0.ty, span)
            }
            "copy" => match t0 {
                Type::Array { .. } => self.emit(Op::ArrayCopy, vec![v0.v], v0.ty, span),
                _ => return Err(self.wrong_arg(name, 1, "an array", v0, &args[0])),
            },
            "zeros" | "ones" | "fill" => {
                let (fill, dims, first_dim) = if name == "fill" {
                    let Some(s) = self.types.as_scalar(v0.ty) else {
                        return Err(self.wrong_arg(name, 1, "a scalar", v0, &args[0]));
                    };
                    (Typed { v: v0.v, ty: TypeTable::scalar(s) }, &vals[1..], 2)
                } else {
                    let c = if name == "zeros" { 0.0 } else { 1.0 };
                    (self.emit(Op::FConst(c), vec![], f64_, name_span), &vals[..], 1)
                };
                for (k, d) in dims.iter().enumerate() {
                    if d.ty != i64_ {
                        let n = k + first_dim;
                        return Err(self.wrong_arg(name, n, "an i64 extent", *d, &args[n - 1]));
                    }
                }
                let elem = self.types.as_scalar(fill.ty).unwrap_or(Scalar::F64);
                let ty = self.types.array(elem, dims.len() as u8);
                let mut ops = vec![fill.v];
                ops.extend(dims.iter().map(|d| d.v));
                self.emit(Op::ArrayFill, ops, ty, span)
            }
            "print" => {
                self.emit_effect(Op::Print, vec![v0.v], span);
                return Ok(None);
            }
            math => {
                let Some(u) = unary_math(math) else {
                    let msg = format!("unknown function `{math}`");
                    return Err(self.error(Diagnostic::error(msg, name_span)));
                };
                match t0 {
                    Type::Scalar(Scalar::F64) => self.emit(Op::FUnary(u), vec![v0.v], f64_, span),
                    Type::Array { elem: Scalar::F64, .. } => {
                        self.emit(Op::MapFUnary(u), vec![v0.v], v0.ty, span)
                    }
                    _ => {
                        let what = if math == "abs" {
                            "an f64, an i64 or an f64 array"
                        } else {
                            "an f64 or an f64 array"
                        };
                        return Err(self.wrong_arg(name, 1, what, v0, &args[0]));
                    }
                }
            }
        };
        Ok(Some(out))
    }

    fn wrong_arg(&mut self, name: &str, n: usize, want: &str, got: Typed, arg: &Expr) -> crate::Reported {
        let msg = format!("argument {n} of `{name}` must be {want}, not {}", self.types.display(got.ty));
        let d = Diagnostic::error(msg, arg.span);
        let d = if got.ty == TypeTable::I64 && want.contains("f64") {
            d.with_note("convert with `f64(..)`, or write a float literal like `2.0`")
        } else {
            d
        };
        self.error(d)
    }
}
