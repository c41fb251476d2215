//! Lowering expressions: operators (scalar and elementwise), literals, names, field
//! and index access, and calls to user functions.

use crate::stmt::{FnLower, Typed};
use crate::{Reported, Res};
use mcir_ir::{CmpOp, FBinOp, FUnOp, IBinOp, IUnOp, Op, Scalar, Type, TypeId, TypeTable, Value};
use mcir_syntax::ast::{BinOp, Expr, ExprKind, Span, UnOp};
use mcir_syntax::Diagnostic;

impl FnLower<'_> {
    /// Lowers an expression that must produce a value.
    pub(crate) fn expr(&mut self, e: &Expr) -> Res<Typed> {
        match self.expr_maybe_unit(e)? {
            Some(v) => Ok(v),
            None => {
                let d = Diagnostic::error("this call returns nothing, so it has no value to use", e.span);
                Err(self.error(d))
            }
        }
    }

    /// Lowers an expression; `None` for a call of a function that returns nothing.
    pub(crate) fn expr_maybe_unit(&mut self, e: &Expr) -> Res<Option<Typed>> {
        let span = e.span;
        let v = match &e.kind {
            ExprKind::Float(x) => self.emit(Op::FConst(*x), vec![], TypeTable::F64, span),
            ExprKind::Int(i) => self.emit(Op::IConst(*i), vec![], TypeTable::I64, span),
            ExprKind::Bool(b) => self.emit(Op::BConst(*b), vec![], TypeTable::BOOL, span),
            ExprKind::Name(n) => self.name(n, span)?,
            ExprKind::Unary(op, a) => self.unary(*op, a, span)?,
            ExprKind::Binary(BinOp::And, a, b) => self.short_circuit(true, a, b, span)?,
            ExprKind::Binary(BinOp::Or, a, b) => self.short_circuit(false, a, b, span)?,
            ExprKind::Binary(op, a, b) => {
                let av = self.expr(a)?;
                let bv = self.expr(b)?;
                self.binary_values(*op, av, bv, span, b.span)?
            }
            ExprKind::Call(callee, args) => return self.call(callee, args, span),
            ExprKind::Index(arr, idx) => {
                let a = self.expr(arr)?;
                let Some((elem, rank)) = self.types.as_array(a.ty) else {
                    let msg = format!("cannot index a value of type {}", self.types.display(a.ty));
                    return Err(
                        self.error(Diagnostic::error(msg, arr.span).with_note("only arrays can be indexed"))
                    );
                };
                let mut args = vec![a.v];
                args.extend(self.indices(idx, rank, span)?);
                self.emit(Op::Load, args, TypeTable::scalar(elem), span)
            }
            ExprKind::Field(obj, field) => {
                let o = self.expr(obj)?;
                let Some((sid, def)) = self.types.as_struct(o.ty) else {
                    let msg = format!("{} has no field `{}`", self.types.display(o.ty), field.name);
                    let d = Diagnostic::error(msg, field.span);
                    let d = if matches!(self.types.get(o.ty), Type::Ref(_)) {
                        d.with_note("dereference the ref first: `(*r).field`")
                    } else if matches!(obj.kind, ExprKind::Int(_)) && field.name.starts_with(['e', 'E']) {
                        d.with_note("a float literal needs digits after the `.`: write `1.0e3`, not `1.e3`")
                    } else {
                        d
                    };
                    return Err(self.error(d));
                };
                let Some(i) = def.field_index(&field.name) else {
                    let known: Vec<String> = def.fields.iter().map(|f| format!("`{}`", f.0)).collect();
                    let msg = format!("struct `{}` has no field `{}`", def.name, field.name);
                    let d = Diagnostic::error(msg, field.span)
                        .with_note(format!("its fields are {}", known.join(", ")));
                    return Err(self.error(d));
                };
                let (fty, mutable) = (def.fields[i].1, def.mutable);
                let op = if mutable { Op::MutLoad(sid, i as u32) } else { Op::StructGet(sid, i as u32) };
                self.emit(op, vec![o.v], fty, span)
            }
            ExprKind::TupleField(t, i, ispan) => {
                let tv = self.expr(t)?;
                let Type::Tuple(items) = self.types.get(tv.ty) else {
                    let msg = format!("{} is not a tuple, so it has no field {i}", self.types.display(tv.ty));
                    return Err(self.error(Diagnostic::error(msg, *ispan)));
                };
                let Some(&ity) = items.get(*i as usize) else {
                    let msg = format!("this tuple has {} fields, so there is no field {i}", items.len());
                    return Err(self.error(Diagnostic::error(msg, *ispan)));
                };
                self.emit(Op::TupleGet(*i), vec![tv.v], ity, span)
            }
            ExprKind::Tuple(items) => {
                let mut vals = Vec::new();
                for it in items {
                    vals.push(self.expr(it)?);
                }
                let ty = self.types.intern(Type::Tuple(vals.iter().map(|v| v.ty).collect()));
                self.emit(Op::TupleNew, vals.iter().map(|v| v.v).collect(), ty, span)
            }
            ExprKind::Array(items) => self.array_literal(items, span)?,
            ExprKind::StructLit(name, fields) => {
                let Some(sid) = self.types.struct_by_name(&name.name) else {
                    return Err(
                        self.error(Diagnostic::error(format!("unknown struct `{}`", name.name), name.span))
                    );
                };
                let def = self.types.struct_def(sid).clone();
                let mut vals: Vec<Option<Value>> = vec![None; def.fields.len()];
                for (fname, fe) in fields {
                    let Some(i) = def.field_index(&fname.name) else {
                        let msg = format!("struct `{}` has no field `{}`", def.name, fname.name);
                        return Err(self.error(Diagnostic::error(msg, fname.span)));
                    };
                    if vals[i].is_some() {
                        let msg = format!("field `{}` is given twice", fname.name);
                        return Err(self.error(Diagnostic::error(msg, fname.span)));
                    }
                    let v = self.expr(fe)?;
                    self.expect_type(v, def.fields[i].1, fe.span, &format!("field `{}`", fname.name))?;
                    vals[i] = Some(v.v);
                }
                let missing: Vec<String> = def
                    .fields
                    .iter()
                    .zip(&vals)
                    .filter(|(_, v)| v.is_none())
                    .map(|(f, _)| format!("`{}`", f.0))
                    .collect();
                if !missing.is_empty() {
                    let msg = format!(
                        "struct `{}` is missing {} {}",
                        def.name,
                        if missing.len() == 1 { "field" } else { "fields" },
                        missing.join(", ")
                    );
                    return Err(self.error(Diagnostic::error(msg, span)));
                }
                let ty = self.types.intern(Type::Struct(sid));
                self.emit(Op::StructNew(sid), vals.into_iter().flatten().collect(), ty, span)
            }
            ExprKind::RefNew(inner) => {
                let v = self.expr(inner)?;
                let ty = self.types.intern(Type::Ref(v.ty));
                self.emit(Op::RefNew, vec![v.v], ty, span)
            }
            ExprKind::Closure(_) => return Err(self.callable_as_value("a closure", span)),
            ExprKind::Error => return Err(Reported),
        };
        Ok(Some(v))
    }

    fn name(&mut self, n: &str, span: Span) -> Res<Typed> {
        if let Some(b) = self.lookup(n).cloned() {
            if let crate::stmt::Binding::Callable { .. } = b {
                return Err(self.callable_as_value(&format!("`{n}`"), span));
            }
            return self.binding_value(&b);
        }
        if let Some(&c) = self.g.consts.get(n) {
            return Ok(self.const_value(c, span));
        }
        let d = if self.g.funcs.contains_key(n) || crate::BUILTIN_NAMES.contains(&n) {
            Diagnostic::error(format!("`{n}` is a function; call it as `{n}(..)`"), span)
        } else {
            Diagnostic::error(format!("unknown variable `{n}`"), span).with_label("not found in this scope")
        };
        Err(self.error(d))
    }

    /// Index operands: exactly `rank` values of type `i64`.
    pub(crate) fn indices(&mut self, idx: &[Expr], rank: u8, span: Span) -> Res<Vec<Value>> {
        if idx.len() != rank as usize {
            let msg = format!(
                "an array of rank {rank} takes {rank} {}, but {} {} given",
                if rank == 1 { "index" } else { "indices" },
                idx.len(),
                if idx.len() == 1 { "is" } else { "are" }
            );
            return Err(self.error(Diagnostic::error(msg, span)));
        }
        let mut out = Vec::new();
        for i in idx {
            let v = self.expr(i)?;
            if v.ty != TypeTable::I64 {
                let msg = format!("an index must be an i64, not {}", self.types.display(v.ty));
                let d = Diagnostic::error(msg, i.span).with_note("convert with `i64(..)`");
                return Err(self.error(d));
            }
            out.push(v.v);
        }
        Ok(out)
    }

    fn unary(&mut self, op: UnOp, a: &Expr, span: Span) -> Res<Typed> {
        // `-1.5` and `-3` become constants directly.
        if op == UnOp::Neg {
            match a.kind {
                ExprKind::Float(x) => return Ok(self.emit(Op::FConst(-x), vec![], TypeTable::F64, span)),
                ExprKind::Int(i) => return Ok(self.emit(Op::IConst(-i), vec![], TypeTable::I64, span)),
                _ => {}
            }
        }
        let v = self.expr(a)?;
        let t = self.types.get(v.ty).clone();
        let r = match (op, &t) {
            (UnOp::Neg, Type::Scalar(Scalar::F64)) => Some((Op::FUnary(FUnOp::Neg), v.ty)),
            (UnOp::Neg, Type::Scalar(Scalar::I64)) => Some((Op::IUnary(IUnOp::Neg), v.ty)),
            (UnOp::Neg, Type::Array { elem: Scalar::F64, .. }) => Some((Op::MapFUnary(FUnOp::Neg), v.ty)),
            (UnOp::Neg, Type::Array { elem: Scalar::I64, .. }) => {
                let zero = self.emit(Op::IConst(0), vec![], TypeTable::I64, span);
                return Ok(self.emit(Op::MapIBinary(IBinOp::Sub), vec![zero.v, v.v], v.ty, span));
            }
            (UnOp::Not, Type::Scalar(Scalar::Bool)) => Some((Op::Not, v.ty)),
            (UnOp::Deref, Type::Ref(inner)) => Some((Op::RefLoad, *inner)),
            _ => None,
        };
        match r {
            Some((op, ty)) => Ok(self.emit(op, vec![v.v], ty, span)),
            None => {
                let (sym, what) = match op {
                    UnOp::Neg => ("-", "numbers and numeric arrays"),
                    UnOp::Not => ("!", "bool"),
                    UnOp::Deref => ("*", "refs"),
                };
                let msg = format!("`{sym}` applies to {what}, not to {}", self.types.display(v.ty));
                Err(self.error(Diagnostic::error(msg, span)))
            }
        }
    }

    /// `a op b` for every operator but `&&` and `||`, on values already computed.
    pub(crate) fn binary_values(
        &mut self,
        op: BinOp,
        a: Typed,
        b: Typed,
        span: Span,
        _rhs: Span,
    ) -> Res<Typed> {
        let ta = self.types.get(a.ty).clone();
        let tb = self.types.get(b.ty).clone();
        use Scalar::{Bool, F64, I64};
        let cmp = |op: BinOp| match op {
            BinOp::Eq => Some(CmpOp::Eq),
            BinOp::Ne => Some(CmpOp::Ne),
            BinOp::Lt => Some(CmpOp::Lt),
            BinOp::Le => Some(CmpOp::Le),
            BinOp::Gt => Some(CmpOp::Gt),
            BinOp::Ge => Some(CmpOp::Ge),
            _ => None,
        };
        let fop = match op {
            BinOp::Add => Some(FBinOp::Add),
            BinOp::Sub => Some(FBinOp::Sub),
            BinOp::Mul => Some(FBinOp::Mul),
            BinOp::Div => Some(FBinOp::Div),
            BinOp::Pow => Some(FBinOp::Pow),
            _ => None,
        };
        let iop = match op {
            BinOp::Add => Some(IBinOp::Add),
            BinOp::Sub => Some(IBinOp::Sub),
            BinOp::Mul => Some(IBinOp::Mul),
            BinOp::Div => Some(IBinOp::Div),
            BinOp::Rem => Some(IBinOp::Rem),
            _ => None,
        };
        let args = vec![a.v, b.v];
        let (bool_, f64_, i64_) = (TypeTable::BOOL, TypeTable::F64, TypeTable::I64);
        let result = match (&ta, &tb) {
            (Type::Scalar(F64), Type::Scalar(F64)) => match (cmp(op), fop) {
                (Some(c), _) => Some((Op::FCmp(c), bool_)),
                (_, Some(f)) => Some((Op::FBinary(f), f64_)),
                _ => None,
            },
            (Type::Scalar(F64), Type::Scalar(I64)) if op == BinOp::Pow => Some((Op::FPowI, f64_)),
            (Type::Scalar(I64), Type::Scalar(I64)) => match (cmp(op), iop) {
                (Some(c), _) => Some((Op::ICmp(c), bool_)),
                (_, Some(i)) => Some((Op::IBinary(i), i64_)),
                _ => None,
            },
            (Type::Scalar(Bool), Type::Scalar(Bool)) => match cmp(op) {
                Some(c @ (CmpOp::Eq | CmpOp::Ne)) => Some((Op::BCmp(c), bool_)),
                _ => None,
            },
            // Elementwise on f64 arrays.
            (Type::Array { elem: F64, .. }, Type::Array { elem: F64, .. })
                if a.ty == b.ty && fop.is_some() && op != BinOp::Pow =>
            {
                fop.map(|f| (Op::MapFBinary(f), a.ty))
            }
            (Type::Array { elem: F64, .. }, Type::Scalar(F64)) if fop.is_some() => {
                fop.map(|f| (Op::MapFBinary(f), a.ty))
            }
            (Type::Array { elem: F64, .. }, Type::Scalar(I64)) if op == BinOp::Pow => {
                Some((Op::MapFPowI, a.ty))
            }
            (Type::Scalar(F64), Type::Array { elem: F64, .. }) if fop.is_some() && op != BinOp::Pow => {
                fop.map(|f| (Op::MapFBinary(f), b.ty))
            }
            // Elementwise on i64 arrays: + - * only.
            (Type::Array { elem: I64, .. }, Type::Array { elem: I64, .. })
                if a.ty == b.ty && matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) =>
            {
                iop.map(|i| (Op::MapIBinary(i), a.ty))
            }
            (Type::Array { elem: I64, .. }, Type::Scalar(I64))
                if matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) =>
            {
                iop.map(|i| (Op::MapIBinary(i), a.ty))
            }
            (Type::Scalar(I64), Type::Array { elem: I64, .. })
                if matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) =>
            {
                iop.map(|i| (Op::MapIBinary(i), b.ty))
            }
            _ => None,
        };
        if let Some((op, ty)) = result {
            return Ok(self.emit(op, args, ty, span));
        }
        Err(self.binary_type_error(op, a.ty, b.ty, span))
    }

    fn binary_type_error(&mut self, op: BinOp, a: TypeId, b: TypeId, span: Span) -> Reported {
        let (da, db) = (self.types.display(a).to_string(), self.types.display(b).to_string());
        let msg = format!("`{}` cannot be applied to {da} and {db}", op.symbol());
        let mut d = Diagnostic::error(msg, span);
        let is_cmp = matches!(op, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge);
        let (arr_a, arr_b) = (self.types.as_array(a), self.types.as_array(b));
        if (a == TypeTable::F64 && b == TypeTable::I64) || (a == TypeTable::I64 && b == TypeTable::F64) {
            d = d.with_note(
                "there is no implicit conversion: use `f64(i)` or `i64(x)`, or write `2.0` for a float",
            );
        } else if is_cmp && (arr_a.is_some() || arr_b.is_some()) {
            d = d.with_note("comparisons take scalars only; compare elements with a loop");
        } else if op == BinOp::Rem {
            d = d.with_note("`%` takes two i64");
        } else if op == BinOp::Pow && a == TypeTable::I64 {
            d = d.with_note("`**` takes an f64 base: write `f64(n) ** k`");
        } else if matches!((arr_a, arr_b), (Some((Scalar::I64, _)), _) | (_, Some((Scalar::I64, _)))) {
            d = d.with_note("i64 arrays support elementwise `+`, `-` and `*` only");
        } else if arr_a.is_some() && arr_b.is_some() && a != b {
            d = d.with_note("elementwise operations need two arrays of the same element type and rank");
        }
        self.error(d)
    }

    fn array_literal(&mut self, items: &[Expr], span: Span) -> Res<Typed> {
        if items.is_empty() {
            let d = Diagnostic::error("an empty array literal `[]` is not allowed", span)
                .with_note("its type would be unknown: write `zeros(0)` for an empty f64[]");
            return Err(self.error(d));
        }
        // Find the shape from the nesting of literals.
        let mut dims: Vec<u32> = Vec::new();
        let mut level: &[Expr] = items;
        loop {
            dims.push(level.len() as u32);
            match &level[0].kind {
                ExprKind::Array(inner) if !inner.is_empty() => level = inner,
                _ => break,
            }
        }
        if dims.len() > 3 {
            return Err(self.error(Diagnostic::error("array literals have rank 1 to 3", span)));
        }
        let mut leaves: Vec<&Expr> = Vec::new();
        self.flatten_literal(items, &dims, &mut leaves, span)?;
        let mut vals = Vec::new();
        let mut elem: Option<(Scalar, Span)> = None;
        for leaf in leaves {
            let v = self.expr(leaf)?;
            let Some(s) = self.types.as_scalar(v.ty) else {
                let msg =
                    format!("array elements must be f64, i64 or bool, not {}", self.types.display(v.ty));
                return Err(self.error(Diagnostic::error(msg, leaf.span)));
            };
            match elem {
                None => elem = Some((s, leaf.span)),
                Some((e, first)) if e != s => {
                    let msg = format!("array elements must all have one type: {} and {}", e.name(), s.name());
                    let d = Diagnostic::error(msg, leaf.span)
                        .with_secondary(first, format!("this element is {}", e.name()))
                        .with_note("write `2.0` rather than `2` in an f64 array");
                    return Err(self.error(d));
                }
                _ => {}
            }
            vals.push(v.v);
        }
        let elem = elem.map(|e| e.0).unwrap_or(Scalar::F64);
        let ty = self.types.array(elem, dims.len() as u8);
        Ok(self.emit(Op::ArrayLit(dims), vals, ty, span))
    }

    fn flatten_literal<'e>(
        &mut self,
        items: &'e [Expr],
        dims: &[u32],
        out: &mut Vec<&'e Expr>,
        span: Span,
    ) -> Res<()> {
        if items.len() as u32 != dims[0] {
            let msg =
                format!("rows of an array literal must have equal lengths: {} and {}", dims[0], items.len());
            return Err(self.error(Diagnostic::error(msg, span)));
        }
        for it in items {
            match (&it.kind, dims.len()) {
                (ExprKind::Array(inner), n) if n > 1 => {
                    self.flatten_literal(inner, &dims[1..], out, it.span)?
                }
                (ExprKind::Array(_), _) => {
                    return Err(self
                        .error(Diagnostic::error("array literal nests deeper here than elsewhere", it.span)))
                }
                (_, 1) => out.push(it),
                _ => {
                    return Err(self.error(Diagnostic::error("expected a nested array literal here", it.span)))
                }
            }
        }
        Ok(())
    }

    fn call(&mut self, callee: &Expr, args: &[Expr], span: Span) -> Res<Option<Typed>> {
        let ExprKind::Name(name) = &callee.kind else {
            // `(|x: f64| x * x)(3.0)`
            if let Some(c) = self.callable_expr(callee, None)? {
                let sig = self.callable_sig(&c)?;
                let args = self.call_args(&sig, args, "this closure", span)?;
                return self.call_callable(&c, args, span);
            }
            let d = Diagnostic::error("only functions can be called", callee.span);
            return Err(self.error(d));
        };
        // A variable holding a closure or function shadows functions of the same name.
        if let Some(crate::stmt::Binding::Callable { callable, .. }) = self.lookup(name).cloned() {
            let sig = self.callable_sig(&callable)?;
            let args = self.call_args(&sig, args, &format!("`{name}`"), span)?;
            return self.call_callable(&callable, args, span);
        }
        if let Some(sig) = self.g.funcs.get(name).cloned() {
            if args.len() != sig.params.len() {
                let msg = format!(
                    "`{name}` takes {} argument{}, but {} {} given",
                    sig.params.len(),
                    if sig.params.len() == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "was" } else { "were" }
                );
                let d = Diagnostic::error(msg, span).with_secondary(sig.span, "defined here");
                return Err(self.error(d));
            }
            let args = self.call_args(&sig.fn_sig(), args, &format!("`{name}`"), span)?;
            let c = crate::callable::Callable {
                kind: crate::callable::CallableKind::Func(name.clone()),
                env: None,
            };
            return self.call_callable(&c, args, span);
        }
        if crate::BUILTIN_NAMES.contains(&name.as_str()) || crate::builtins::is_extension(name) {
            return self.builtin(name, callee.span, args, span);
        }
        let d = if matches!(self.lookup(name), Some(crate::stmt::Binding::Poisoned)) {
            return Err(Reported);
        } else if self.lookup(name).is_some() {
            Diagnostic::error(format!("`{name}` is a variable, not a function"), callee.span)
        } else {
            Diagnostic::error(format!("unknown function `{name}`"), callee.span)
        };
        Err(self.error(d))
    }
}
