//! Collecting the program's items before any body is lowered: struct declarations,
//! constants and function signatures, so that items may be used before they appear.

use crate::callable::{FnSig, PType};
use crate::{Reported, Res};
use mcir_ir::{Scalar, StructDef, Type, TypeId, TypeTable};
use mcir_syntax::ast::*;
use mcir_syntax::Diagnostic;
use std::collections::HashMap;

/// Names of the builtin functions; a user function may not take one.
pub const BUILTIN_NAMES: &[&str] = &[
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "exp", "log", "log1p", "expm1",
    "sqrt", "abs", "atan2", "pow", "min", "max", "floor", "ceil", "round", "sign", "len", "size", "sum",
    "dot", "copy", "zeros", "ones", "fill", "print", "f64", "i64",
];

/// The note every rejection of global mutation carries.
pub(crate) const NO_GLOBAL_STATE: &str = "functions may communicate only through their arguments and return \
     values: a program has no mutable global state";

/// A compile-time constant.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum ConstVal {
    F64(f64),
    I64(i64),
    Bool(bool),
}

impl ConstVal {
    pub(crate) fn ty(self) -> TypeId {
        match self {
            ConstVal::F64(_) => TypeTable::F64,
            ConstVal::I64(_) => TypeTable::I64,
            ConstVal::Bool(_) => TypeTable::BOOL,
        }
    }
}

/// A function's signature.
#[derive(Clone, Debug)]
pub(crate) struct Signature {
    /// The function's id in the module; `None` for a function with a parameter of
    /// function type, which exists only as instances (see `callable`).
    pub id: Option<mcir_ir::FuncId>,
    pub params: Vec<PType>,
    pub ret: Option<TypeId>,
    pub span: Span,
}

impl Signature {
    /// Whether some parameter has a function type.
    pub fn is_generic(&self) -> bool {
        self.params.iter().any(|p| matches!(p, PType::Fn(_)))
    }

    /// The signature as a function type.
    pub fn fn_sig(&self) -> FnSig {
        FnSig { params: self.params.clone(), ret: self.ret }
    }
}

/// Everything the bodies may refer to.
pub(crate) struct Globals {
    pub types: TypeTable,
    pub consts: HashMap<String, ConstVal>,
    pub funcs: HashMap<String, Signature>,
}

pub(crate) fn err(diags: &mut Vec<Diagnostic>, d: Diagnostic) -> Reported {
    diags.push(d);
    Reported
}

/// Resolves a written type.
pub(crate) fn resolve_type(types: &mut TypeTable, t: &TypeExpr, diags: &mut Vec<Diagnostic>) -> Res<TypeId> {
    match t {
        TypeExpr::Named(id) => match id.name.as_str() {
            "f64" => Ok(TypeTable::F64),
            "i64" => Ok(TypeTable::I64),
            "bool" => Ok(TypeTable::BOOL),
            name => match types.struct_by_name(name) {
                Some(s) => Ok(types.intern(Type::Struct(s))),
                None => Err(err(
                    diags,
                    Diagnostic::error(format!("unknown type `{name}`"), id.span).with_note(
                        "the types are f64, i64, bool, arrays like f64[], ref<T>, tuples and structs",
                    ),
                )),
            },
        },
        TypeExpr::Array(elem, rank, span) => {
            let s = match elem.name.as_str() {
                "f64" => Scalar::F64,
                "i64" => Scalar::I64,
                "bool" => Scalar::Bool,
                other => {
                    return Err(err(
                        diags,
                        Diagnostic::error(format!("arrays hold f64, i64 or bool, not `{other}`"), *span),
                    ))
                }
            };
            Ok(types.array(s, *rank))
        }
        TypeExpr::Ref(inner, _) => {
            let inner = resolve_type(types, inner, diags)?;
            Ok(types.intern(Type::Ref(inner)))
        }
        TypeExpr::Tuple(items, _) => {
            let mut ids = Vec::new();
            for i in items {
                ids.push(resolve_type(types, i, diags)?);
            }
            Ok(types.intern(Type::Tuple(ids)))
        }
        TypeExpr::Fn(_, _, span) => Err(err(
            diags,
            Diagnostic::error("a function type `fn(..) -> R` can only be the type of a parameter", *span)
                .with_note(
                    "closures and functions are passed to parameters and called; they cannot be stored in \
                     tuples, structs, refs or arrays, or returned",
                ),
        )),
    }
}

/// Resolves the written type of a parameter, which may be a function type.
pub(crate) fn resolve_param_type(
    types: &mut TypeTable,
    t: &TypeExpr,
    diags: &mut Vec<Diagnostic>,
) -> Res<PType> {
    match t {
        TypeExpr::Fn(params, ret, _) => Ok(PType::Fn(resolve_fn_type(types, params, ret, diags)?)),
        other => Ok(PType::Val(resolve_type(types, other, diags)?)),
    }
}

/// Resolves `fn(params) -> ret`.
pub(crate) fn resolve_fn_type(
    types: &mut TypeTable,
    params: &[TypeExpr],
    ret: &TypeExpr,
    diags: &mut Vec<Diagnostic>,
) -> Res<FnSig> {
    let mut ps = Vec::new();
    for p in params {
        ps.push(resolve_param_type(types, p, diags)?);
    }
    let ret = match ret {
        TypeExpr::Tuple(items, _) if items.is_empty() => None,
        other => Some(resolve_type(types, other, diags)?),
    };
    Ok(FnSig { params: ps, ret })
}

pub(crate) fn collect(program: &Program, diags: &mut Vec<Diagnostic>) -> Option<Globals> {
    let start = diags.len();
    let mut types = TypeTable::new();
    let mut struct_spans: HashMap<String, Span> = HashMap::new();
    // Struct names first, so that fields may name structs declared later.
    for item in &program.items {
        if let Item::Struct(s) = item {
            if let Some(prev) = struct_spans.get(&s.name.name) {
                err(
                    diags,
                    Diagnostic::error(format!("struct `{}` is declared twice", s.name.name), s.name.span)
                        .with_secondary(*prev, "first declared here"),
                );
                continue;
            }
            if matches!(s.name.name.as_str(), "f64" | "i64" | "bool") {
                err(
                    diags,
                    Diagnostic::error(format!("`{}` is a built-in type name", s.name.name), s.name.span),
                );
                continue;
            }
            struct_spans.insert(s.name.name.clone(), s.name.span);
            types.declare_struct(StructDef {
                name: s.name.name.clone(),
                mutable: s.mutable,
                fields: Vec::new(),
            });
        }
    }
    for item in &program.items {
        let Item::Struct(s) = item else { continue };
        let Some(sid) = types.struct_by_name(&s.name.name) else { continue };
        if struct_spans.get(&s.name.name) != Some(&s.name.span) {
            continue;
        }
        let mut fields: Vec<(String, TypeId)> = Vec::new();
        for (fname, fty) in &s.fields {
            if fields.iter().any(|(n, _)| *n == fname.name) {
                err(
                    diags,
                    Diagnostic::error(
                        format!("field `{}` appears twice in struct `{}`", fname.name, s.name.name),
                        fname.span,
                    ),
                );
                continue;
            }
            if let Ok(t) = resolve_type(&mut types, fty, diags) {
                fields.push((fname.name.clone(), t));
            }
        }
        types.struct_def_mut(sid).fields = fields;
    }
    check_struct_cycles(program, &types, diags);

    // Constants, in order; one may use those before it.
    let mut consts: HashMap<String, ConstVal> = HashMap::new();
    for item in &program.items {
        let Item::Const(c) = item else { continue };
        if consts.contains_key(&c.name.name) {
            err(
                diags,
                Diagnostic::error(format!("constant `{}` is defined twice", c.name.name), c.name.span),
            );
            continue;
        }
        let Ok(ty) = resolve_type(&mut types, &c.ty, diags) else { continue };
        if types.as_scalar(ty).is_none() {
            err(
                diags,
                Diagnostic::error(
                    format!(
                        "constant `{}` has type {}, but a global must be a scalar",
                        c.name.name,
                        types.display(ty)
                    ),
                    c.ty.span(),
                )
                .with_label("not f64, i64 or bool")
                .with_note(NO_GLOBAL_STATE)
                .with_note("create arrays inside functions and pass them as arguments"),
            );
            continue;
        }
        let Ok(v) = const_eval(&c.value, &consts, diags) else { continue };
        if v.ty() != ty {
            err(
                diags,
                Diagnostic::error(
                    format!(
                        "constant `{}` is declared {} but its value is {}",
                        c.name.name,
                        types.display(ty),
                        types.display(v.ty())
                    ),
                    c.value.span,
                ),
            );
            continue;
        }
        consts.insert(c.name.name.clone(), v);
    }

    // Function signatures.
    let mut funcs: HashMap<String, Signature> = HashMap::new();
    let mut next_id = 0usize;
    for item in &program.items {
        let Item::Fn(f) = item else { continue };
        let name = &f.name.name;
        if BUILTIN_NAMES.contains(&name.as_str()) {
            err(
                diags,
                Diagnostic::error(
                    format!("`{name}` is a builtin function and cannot be redefined"),
                    f.name.span,
                )
                .with_note("choose another name for this function"),
            );
            continue;
        }
        if let Some(prev) = funcs.get(name) {
            err(
                diags,
                Diagnostic::error(format!("function `{name}` is defined twice"), f.name.span)
                    .with_secondary(prev.span, "first defined here"),
            );
            continue;
        }
        if consts.contains_key(name) || types.struct_by_name(name).is_some() {
            err(
                diags,
                Diagnostic::error(
                    format!("`{name}` is already the name of a constant or struct"),
                    f.name.span,
                ),
            );
            continue;
        }
        let mut params = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        let mut ok = true;
        for (pname, pty) in &f.params {
            if names.contains(&pname.name.as_str()) {
                err(
                    diags,
                    Diagnostic::error(format!("parameter `{}` is declared twice", pname.name), pname.span),
                );
                ok = false;
            }
            names.push(&pname.name);
            match resolve_param_type(&mut types, pty, diags) {
                Ok(t) => params.push(t),
                Err(_) => ok = false,
            }
        }
        let ret = match &f.ret {
            None => None,
            Some(TypeExpr::Tuple(items, _)) if items.is_empty() => None,
            Some(t) => match resolve_type(&mut types, t, diags) {
                Ok(t) => Some(t),
                Err(_) => {
                    ok = false;
                    None
                }
            },
        };
        if ok {
            let mut sig = Signature { id: None, params, ret, span: f.name.span };
            if !sig.is_generic() {
                sig.id = Some(<mcir_ir::FuncId as mcir_ir::entity::EntityRef>::new(next_id));
                next_id += 1;
            }
            funcs.insert(name.clone(), sig);
        }
    }
    if diags.len() > start {
        // Bodies are still checked when only some signatures failed? No: a body error
        // could then be a consequence of a bad signature. Report what we have.
        return None;
    }
    Some(Globals { types, consts, funcs })
}

/// Rejects structs that contain themselves: their values would be infinite.
fn check_struct_cycles(program: &Program, types: &TypeTable, diags: &mut Vec<Diagnostic>) {
    fn reaches(types: &TypeTable, t: TypeId, target: mcir_ir::StructId, seen: &mut Vec<TypeId>) -> bool {
        if seen.contains(&t) {
            return false;
        }
        seen.push(t);
        match types.get(t) {
            Type::Scalar(_) | Type::Array { .. } => false,
            Type::Ref(inner) | Type::Stack(inner) => reaches(types, *inner, target, seen),
            Type::Tuple(items) => items.iter().any(|&i| reaches(types, i, target, seen)),
            Type::Struct(s) => {
                *s == target || types.struct_def(*s).fields.iter().any(|f| reaches(types, f.1, target, seen))
            }
        }
    }
    for item in &program.items {
        let Item::Struct(s) = item else { continue };
        let Some(sid) = types.struct_by_name(&s.name.name) else { continue };
        let def = types.struct_def(sid);
        for (fname, fty) in &def.fields {
            if reaches(types, *fty, sid, &mut Vec::new()) {
                err(
                    diags,
                    Diagnostic::error(
                        format!("struct `{}` contains itself through field `{fname}`", def.name),
                        s.name.span,
                    )
                    .with_note("recursive types are not supported: their values would have no end"),
                );
                break;
            }
        }
    }
}

/// Evaluates a constant's initialiser: literals, earlier constants, unary minus and
/// arithmetic on them.
fn const_eval(e: &Expr, consts: &HashMap<String, ConstVal>, diags: &mut Vec<Diagnostic>) -> Res<ConstVal> {
    let not_const = |diags: &mut Vec<Diagnostic>| {
        err(
            diags,
            Diagnostic::error("a constant's value must be computable before the program runs", e.span)
                .with_note("use literals, other constants and arithmetic"),
        )
    };
    match &e.kind {
        ExprKind::Float(x) => Ok(ConstVal::F64(*x)),
        ExprKind::Int(i) => Ok(ConstVal::I64(*i)),
        ExprKind::Bool(b) => Ok(ConstVal::Bool(*b)),
        ExprKind::Name(n) => consts.get(n).copied().ok_or_else(|| {
            err(diags, Diagnostic::error(format!("`{n}` is not a constant defined before this one"), e.span))
        }),
        ExprKind::Unary(UnOp::Neg, a) => match const_eval(a, consts, diags)? {
            ConstVal::F64(x) => Ok(ConstVal::F64(-x)),
            ConstVal::I64(i) => i.checked_neg().map(ConstVal::I64).ok_or_else(|| not_const(diags)),
            ConstVal::Bool(_) => Err(not_const(diags)),
        },
        ExprKind::Unary(UnOp::Not, a) => match const_eval(a, consts, diags)? {
            ConstVal::Bool(b) => Ok(ConstVal::Bool(!b)),
            _ => Err(not_const(diags)),
        },
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (const_eval(a, consts, diags)?, const_eval(b, consts, diags)?);
            let r = match (a, b) {
                (ConstVal::F64(x), ConstVal::F64(y)) => match op {
                    BinOp::Add => Some(ConstVal::F64(x + y)),
                    BinOp::Sub => Some(ConstVal::F64(x - y)),
                    BinOp::Mul => Some(ConstVal::F64(x * y)),
                    BinOp::Div => Some(ConstVal::F64(x / y)),
                    BinOp::Pow => Some(ConstVal::F64(x.powf(y))),
                    _ => None,
                },
                (ConstVal::I64(x), ConstVal::I64(y)) => match op {
                    BinOp::Add => x.checked_add(y).map(ConstVal::I64),
                    BinOp::Sub => x.checked_sub(y).map(ConstVal::I64),
                    BinOp::Mul => x.checked_mul(y).map(ConstVal::I64),
                    BinOp::Div => x.checked_div(y).map(ConstVal::I64),
                    BinOp::Rem => x.checked_rem(y).map(ConstVal::I64),
                    _ => None,
                },
                _ => None,
            };
            r.ok_or_else(|| not_const(diags))
        }
        _ => Err(not_const(diags)),
    }
}
