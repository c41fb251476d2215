//! Closures and functions as values, compiled by specialisation: no function pointer or
//! dynamic dispatch reaches the IR.
//!
//! A closure `|x: T| body` becomes an IR function of its own, `owner$closureK`, whose
//! first parameter is its *environment*: a tuple of what it captured (value-identified
//! variables by value, as they were when the closure was made; arrays, refs and mut
//! structs by address). The closure value in the program is that tuple, so the
//! derivative with respect to what a closure captured — its "self" tangent — is the
//! tangent of an ordinary tuple: captured scalars as rdata, captured arrays through
//! their shadows.
//!
//! A function with a parameter of type `fn(..) -> R` is *generic*: each call lowers (once
//! per distinct combination of callables passed) an instance `f$with$g` in which the
//! parameter is the callable passed — its environment becomes an ordinary parameter,
//! and calling it is a direct call. Closures that take function parameters are
//! specialised the same way. Every generic function and closure is also lowered once
//! with opaque callables, only to check its body, so a mistake is reported even where
//! nothing calls it.

use crate::globals::{err, resolve_fn_type, Globals};
use crate::stmt::{FnLower, RetMode, Typed};
use crate::{Reported, Res};
use mcir_ir::entity::EntityRef;
use mcir_ir::{FuncId, Function, Op, Type, TypeId, TypeTable, Value};
use mcir_syntax::ast::{self, ClosureBody, Expr, ExprKind, FnDecl, Span, Stmt, StmtKind};
use mcir_syntax::Diagnostic;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// How many instances (of generic functions and closures) one program may need. A
/// function that passes a new closure to itself would need infinitely many.
pub(crate) const MAX_INSTANCES: usize = 2_000;

/// A parameter's type: a value type, or a function type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PType {
    Val(TypeId),
    Fn(FnSig),
}

/// A function type `fn(params) -> ret` (`None`: returns nothing).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FnSig {
    pub params: Vec<PType>,
    pub ret: Option<TypeId>,
}

impl FnSig {
    /// `fn(f64, f64[]) -> f64`.
    pub fn display(&self, types: &TypeTable) -> String {
        let ps: Vec<String> = self.params.iter().map(|p| p.display(types)).collect();
        let ret = match self.ret {
            Some(r) => types.display(r).to_string(),
            None => "()".to_string(),
        };
        format!("fn({}) -> {ret}", ps.join(", "))
    }
}

impl PType {
    pub fn display(&self, types: &TypeTable) -> String {
        match self {
            PType::Val(t) => types.display(*t).to_string(),
            PType::Fn(s) => s.display(types),
        }
    }
}

/// Which code a callable value runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CallableKind {
    /// A user function, by name (generic or not).
    Func(String),
    /// A closure, by index in [`Ctx::closures`].
    Closure(usize),
    /// A builtin wrapped in a function of one signature, by index in [`Ctx::wrappers`].
    Builtin(usize),
    /// A function parameter while a generic body is only checked: its type is known, its
    /// code is not (index in [`Ctx::opaque`]).
    Opaque(usize),
}

/// A callable value in a function being lowered: its code, and its environment (the
/// value holding what a closure captured; none for functions and closures that capture
/// nothing).
#[derive(Clone, Debug)]
pub(crate) struct Callable {
    pub kind: CallableKind,
    pub env: Option<Value>,
}

/// Where an instance's body comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Origin {
    Func(String),
    Closure(usize),
}

/// What a closure captured, in the order of its environment's fields.
#[derive(Clone, Debug)]
pub(crate) struct Capture {
    pub name: String,
    pub what: Captured,
    /// Its field in the environment, if it has a runtime part.
    pub field: Option<u32>,
}

#[derive(Clone, Debug)]
pub(crate) enum Captured {
    Value,
    Callable(CallableKind),
}

/// A closure expression as lowered in one function (or one instance of it).
#[derive(Clone, Debug)]
pub(crate) struct ClosureDef {
    /// The base name of its IR functions: `owner$closureK`.
    pub name: String,
    pub ast: Rc<ast::Closure>,
    pub span: Span,
    pub captures: Vec<Capture>,
    /// The environment's type; `None` when nothing with a runtime part is captured.
    pub env_ty: Option<TypeId>,
    /// Parameter types as annotated; the result type as inferred from the body.
    pub sig: FnSig,
}

/// A builtin wrapped in a function, so that it can be passed as a value.
#[derive(Clone, Debug)]
pub(crate) struct Wrapper {
    pub builtin: String,
    pub sig: FnSig,
    pub id: FuncId,
}

/// An instance waiting to be lowered.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub id: FuncId,
    pub name: String,
    pub origin: Origin,
    pub kinds: Vec<CallableKind>,
}

/// State shared by every function being lowered: closures, instances and the functions
/// made for them.
pub(crate) struct Ctx<'p> {
    pub closures: Vec<ClosureDef>,
    pub instances: HashMap<(Origin, Vec<CallableKind>), FuncId>,
    pub queue: Vec<Pending>,
    pub done: Vec<(FuncId, Function)>,
    pub next_id: usize,
    pub opaque: Vec<FnSig>,
    pub wrappers: Vec<Wrapper>,
    /// The declarations of generic functions, by name.
    pub decls: HashMap<String, &'p FnDecl>,
    /// Names of functions made so far (kept unique).
    pub names: HashSet<String>,
    /// Closures made so far per owner function name (for numbering).
    pub closure_count: HashMap<String, usize>,
    /// The rules of `#[checkpoint]` loops made so far.
    pub checkpoints: Vec<crate::checkpoint::CheckpointLoop>,
}

impl<'p> Ctx<'p> {
    pub fn new(first_id: usize, user_names: impl Iterator<Item = String>) -> Ctx<'p> {
        Ctx {
            closures: Vec::new(),
            instances: HashMap::new(),
            queue: Vec::new(),
            done: Vec::new(),
            next_id: first_id,
            opaque: Vec::new(),
            wrappers: Vec::new(),
            decls: HashMap::new(),
            names: user_names.collect(),
            closure_count: HashMap::new(),
            checkpoints: Vec::new(),
        }
    }

    /// A function name not taken yet, from `base`.
    pub fn unique_name(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 1;
        while self.names.contains(&name) {
            n += 1;
            name = format!("{base}${n}");
        }
        self.names.insert(name.clone());
        name
    }

    pub fn new_id(&mut self) -> FuncId {
        let id = FuncId::new(self.next_id);
        self.next_id += 1;
        id
    }

    /// How the callable is named inside instance names.
    fn kind_name(&self, k: &CallableKind) -> String {
        match k {
            CallableKind::Func(n) => n.clone(),
            CallableKind::Closure(i) => self.closures[*i].name.clone(),
            CallableKind::Builtin(i) => self.wrappers[*i].builtin.clone(),
            CallableKind::Opaque(i) => format!("opaque{i}"),
        }
    }
}

/// The runtime type of a callable's environment, if it has one.
pub(crate) fn env_type(ctx: &Ctx, k: &CallableKind) -> Option<TypeId> {
    match k {
        CallableKind::Closure(i) => ctx.closures[*i].env_ty,
        _ => None,
    }
}

/// The signature of a callable.
pub(crate) fn sig_of(g: &Globals, ctx: &Ctx, k: &CallableKind) -> Option<FnSig> {
    match k {
        CallableKind::Func(n) => g.funcs.get(n).map(|s| s.fn_sig()),
        CallableKind::Closure(i) => Some(ctx.closures[*i].sig.clone()),
        CallableKind::Builtin(i) => Some(ctx.wrappers[*i].sig.clone()),
        CallableKind::Opaque(i) => ctx.opaque.get(*i).cloned(),
    }
}

/// An argument of a call, lowered: a value, or a callable for a parameter of function type.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    Value(Typed),
    Callable(Callable),
}

impl FnLower<'_> {
    /// The callable an expression denotes, if it denotes one: a closure expression, a
    /// variable bound to a callable, or the name of a function (of a builtin, when the
    /// signature it must have is `expected`). `None` for an ordinary value expression.
    pub(crate) fn callable_expr(&mut self, e: &Expr, expected: Option<&FnSig>) -> Res<Option<Callable>> {
        match &e.kind {
            ExprKind::Closure(c) => self.make_closure(c, e.span).map(Some),
            ExprKind::Name(n) => {
                if let Some(b) = self.lookup(n).cloned() {
                    return match b {
                        crate::stmt::Binding::Callable { callable, .. } => Ok(Some(callable)),
                        crate::stmt::Binding::Poisoned => Err(Reported),
                        _ => Ok(None),
                    };
                }
                if self.g.consts.contains_key(n) {
                    return Ok(None);
                }
                if self.g.funcs.contains_key(n) {
                    return Ok(Some(Callable { kind: CallableKind::Func(n.clone()), env: None }));
                }
                if crate::BUILTIN_NAMES.contains(&n.as_str()) || crate::builtins::is_extension(n) {
                    let Some(sig) = expected else {
                        let d = Diagnostic::error(
                            format!("the builtin `{n}` can be passed only where a `fn(..)` type says which form is meant"),
                            e.span,
                        )
                        .with_note(format!("wrap it in a closure, for example `|x: f64| {n}(x)`"));
                        return Err(self.error(d));
                    };
                    return self.wrap_builtin(n, sig, e.span).map(Some);
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// The error for a callable used where a value is needed.
    pub(crate) fn callable_as_value(&mut self, what: &str, span: Span) -> Reported {
        let d = Diagnostic::error(format!("{what} is a function value, not a value of a type"), span)
            .with_note(
                "a closure or function can be called, bound with `let`, or passed to a parameter of type \
             `fn(..) -> R`; it cannot be stored, returned or used in arithmetic",
            );
        self.error(d)
    }

    /// Lowers `|params| body` where it stands: captures what it names from the enclosing
    /// scopes into its environment, and lowers its body (for real when it takes no
    /// function parameters; else only to check it, instances come with the calls).
    pub(crate) fn make_closure(&mut self, c: &ast::Closure, span: Span) -> Res<Callable> {
        let mut params = Vec::new();
        let mut generic = false;
        let mut seen: Vec<&str> = Vec::new();
        for (pname, pty) in &c.params {
            if seen.contains(&pname.name.as_str()) {
                let msg = format!("parameter `{}` is declared twice", pname.name);
                return Err(self.error(Diagnostic::error(msg, pname.span)));
            }
            seen.push(&pname.name);
            let t = crate::globals::resolve_param_type(&mut self.types, pty, &mut self.diags)?;
            generic |= matches!(t, PType::Fn(_));
            params.push(t);
        }
        // What the body names from the enclosing scopes.
        let mut names = Vec::new();
        free_names_closure(c, &mut names);
        let own: Vec<&str> = c.params.iter().map(|(n, _)| n.name.as_str()).collect();
        let (captures, env, env_ty) = self.capture(names, &own, span)?;
        let owner = self.f.name.clone();
        let id = {
            let mut ctx = self.ctx.borrow_mut();
            let k = ctx.closure_count.entry(owner.clone()).or_insert(0);
            let name = format!("{owner}$closure{k}");
            *k += 1;
            ctx.closures.push(ClosureDef {
                name,
                ast: Rc::new(c.clone()),
                span,
                captures,
                env_ty,
                sig: FnSig { params, ret: None },
            });
            ctx.closures.len() - 1
        };
        // Lower the body now: for real, or (with function parameters) to check it and
        // learn its result type.
        let kinds = if generic { self.opaque_kinds(id) } else { Vec::new() };
        let checking = self.checking || generic;
        let (fid, name) = if checking {
            (FuncId::new(usize::MAX >> 1), format!("{owner}$closure"))
        } else {
            let mut ctx = self.ctx.borrow_mut();
            let base = ctx.closures[id].name.clone();
            let name = ctx.unique_name(&base);
            let fid = ctx.new_id();
            ctx.instances.insert((Origin::Closure(id), Vec::new()), fid);
            (fid, name)
        };
        let ret =
            lower_closure(self.g, self.ctx, &mut self.types, &mut self.diags, id, &kinds, &name, checking)?;
        let mut ctx = self.ctx.borrow_mut();
        ctx.closures[id].sig.ret = ret.0;
        if let Some(f) = ret.1 {
            ctx.done.push((fid, f));
        }
        Ok(Callable { kind: CallableKind::Closure(id), env })
    }

    /// The environment of a closure whose body names `names`, of which `own` are its
    /// own: what it captures, the tuple holding their runtime parts (made here) and its
    /// type.
    pub(crate) fn capture(
        &mut self,
        names: Vec<String>,
        own: &[&str],
        span: Span,
    ) -> Res<(Vec<Capture>, Option<Value>, Option<TypeId>)> {
        let mut captures = Vec::new();
        let mut fields = Vec::new();
        let mut field_tys = Vec::new();
        for n in names {
            if own.contains(&n.as_str()) || captures.iter().any(|c: &Capture| c.name == n) {
                continue;
            }
            let Some(b) = self.lookup(&n).cloned() else { continue };
            let (what, part) = match b {
                crate::stmt::Binding::Poisoned => return Err(Reported),
                crate::stmt::Binding::Callable { callable, .. } => (
                    Captured::Callable(callable.kind.clone()),
                    callable.env.map(|v| (v, self.f.value_type(v))),
                ),
                other => {
                    let v = self.binding_value(&other)?;
                    (Captured::Value, Some((v.v, v.ty)))
                }
            };
            let field = part.map(|(v, t)| {
                fields.push(v);
                field_tys.push(t);
                (fields.len() - 1) as u32
            });
            captures.push(Capture { name: n, what, field });
        }
        let (env, env_ty) = if fields.is_empty() {
            (None, None)
        } else {
            let ty = self.types.intern(Type::Tuple(field_tys));
            let v = self.emit(Op::TupleNew, fields, ty, span);
            (Some(v.v), Some(ty))
        };
        Ok((captures, env, env_ty))
    }

    /// Opaque callables standing for the function parameters of closure `id`.
    fn opaque_kinds(&mut self, id: usize) -> Vec<CallableKind> {
        let mut ctx = self.ctx.borrow_mut();
        let params = ctx.closures[id].sig.params.clone();
        let mut kinds = Vec::new();
        for p in params {
            if let PType::Fn(s) = p {
                ctx.opaque.push(s);
                kinds.push(CallableKind::Opaque(ctx.opaque.len() - 1));
            }
        }
        kinds
    }

    /// Wraps builtin `name` in a function of signature `sig`.
    fn wrap_builtin(&mut self, name: &str, sig: &FnSig, span: Span) -> Res<Callable> {
        if let Some(i) = {
            let ctx = self.ctx.borrow();
            ctx.wrappers.iter().position(|w| w.builtin == name && w.sig == *sig)
        } {
            return Ok(Callable { kind: CallableKind::Builtin(i), env: None });
        }
        let params: Vec<(ast::Ident, PType)> = sig
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| (ast::Ident { name: format!("x{i}"), span }, p.clone()))
            .collect();
        if params.iter().any(|(_, p)| matches!(p, PType::Fn(_))) {
            let d = Diagnostic::error(format!("the builtin `{name}` takes no function"), span);
            return Err(self.error(d));
        }
        let (fname, fid) = {
            let mut ctx = self.ctx.borrow_mut();
            (ctx.unique_name(&format!("builtin${name}")), ctx.new_id())
        };
        let types = std::mem::take(&mut self.types);
        let mut inner = FnLower::for_function(
            self.g,
            self.ctx,
            types,
            &fname,
            &params,
            &[],
            None,
            RetMode::Declared(sig.ret),
            span,
            false,
        );
        let call = Expr::new(
            ExprKind::Call(
                Box::new(Expr::new(ExprKind::Name(name.to_string()), span)),
                params.iter().map(|(n, _)| Expr::new(ExprKind::Name(n.name.clone()), span)).collect(),
            ),
            span,
        );
        let body = ast::Block {
            stmts: vec![Stmt {
                kind: if sig.ret.is_some() {
                    StmtKind::Return(Some(call.clone()))
                } else {
                    StmtKind::Expr(call)
                },
                span,
            }],
            span,
        };
        let ok = inner.lower_block_body(&body, &format!("`{name}` as {}", sig.display(&inner.types))).is_ok();
        self.types = std::mem::take(&mut inner.types);
        if !ok || !inner.diags.is_empty() {
            let d = Diagnostic::error(
                format!("the builtin `{name}` has no form of type {}", sig.display(&self.types)),
                span,
            );
            return Err(self.error(d));
        }
        let f = inner.f.remove_unreachable_blocks();
        let mut ctx = self.ctx.borrow_mut();
        ctx.done.push((fid, f));
        ctx.wrappers.push(Wrapper { builtin: name.to_string(), sig: sig.clone(), id: fid });
        Ok(Callable { kind: CallableKind::Builtin(ctx.wrappers.len() - 1), env: None })
    }

    /// The signature of callable `c`.
    pub(crate) fn callable_sig(&mut self, c: &Callable) -> Res<FnSig> {
        let ctx = self.ctx.borrow();
        sig_of(self.g, &ctx, &c.kind).ok_or(Reported)
    }

    /// Whether callable `c` fits a parameter of type `want`; if not, reports why.
    pub(crate) fn check_callable_fits(
        &mut self,
        c: &Callable,
        want: &FnSig,
        span: Span,
        what: &str,
    ) -> Res<()> {
        let have = {
            let ctx = self.ctx.borrow();
            sig_of(self.g, &ctx, &c.kind)
        };
        let Some(have) = have else { return Err(Reported) };
        if have == *want {
            return Ok(());
        }
        let msg = format!(
            "{what} has type {}, but this function is {}",
            want.display(&self.types),
            have.display(&self.types)
        );
        Err(self.error(Diagnostic::error(msg, span)))
    }

    /// Lowers the arguments of a call of something of signature `sig`.
    pub(crate) fn call_args(&mut self, sig: &FnSig, args: &[Expr], what: &str, span: Span) -> Res<Vec<Arg>> {
        if args.len() != sig.params.len() {
            let msg = format!(
                "{what} takes {} argument{}, but {} {} given",
                sig.params.len(),
                if sig.params.len() == 1 { "" } else { "s" },
                args.len(),
                if args.len() == 1 { "was" } else { "were" }
            );
            return Err(self.error(Diagnostic::error(msg, span)));
        }
        let mut out = Vec::new();
        for (i, (a, p)) in args.iter().zip(&sig.params).enumerate() {
            let label = format!("argument {} of {what}", i + 1);
            match p {
                PType::Val(t) => {
                    let v = self.expr(a)?;
                    self.expect_type(v, *t, a.span, &label)?;
                    out.push(Arg::Value(v));
                }
                PType::Fn(want) => {
                    let Some(c) = self.callable_expr(a, Some(want))? else {
                        let v = self.expr(a)?;
                        let msg = format!(
                            "{label} must be a function of type {}, not {}",
                            want.display(&self.types),
                            self.types.display(v.ty)
                        );
                        return Err(self.error(
                            Diagnostic::error(msg, a.span)
                                .with_note("pass a closure `|x: T| ..` or the name of a function"),
                        ));
                    };
                    self.check_callable_fits(&c, want, a.span, &label)?;
                    out.push(Arg::Callable(c));
                }
            }
        }
        Ok(out)
    }

    /// Calls callable `c` with lowered arguments.
    pub(crate) fn call_callable(&mut self, c: &Callable, args: Vec<Arg>, span: Span) -> Res<Option<Typed>> {
        let sig = {
            let ctx = self.ctx.borrow();
            sig_of(self.g, &ctx, &c.kind)
        };
        let Some(sig) = sig else { return Err(Reported) };
        let kinds: Vec<CallableKind> = args
            .iter()
            .filter_map(|a| match a {
                Arg::Callable(c) => Some(c.kind.clone()),
                Arg::Value(_) => None,
            })
            .collect();
        let mut vals: Vec<Value> = Vec::new();
        if let Some(env) = c.env {
            vals.push(env);
        }
        for a in &args {
            match a {
                Arg::Value(v) => vals.push(v.v),
                Arg::Callable(c) => vals.extend(c.env),
            }
        }
        let target = match &c.kind {
            CallableKind::Func(name) => {
                let s = self.g.funcs.get(name).cloned();
                match s.and_then(|s| s.id) {
                    Some(id) => Some(id),
                    None => self.instance(Origin::Func(name.clone()), kinds, span)?,
                }
            }
            CallableKind::Closure(id) => {
                let generic = sig.params.iter().any(|p| matches!(p, PType::Fn(_)));
                if generic {
                    self.instance(Origin::Closure(*id), kinds, span)?
                } else {
                    self.ctx.borrow().instances.get(&(Origin::Closure(*id), Vec::new())).copied()
                }
            }
            CallableKind::Builtin(i) => Some(self.ctx.borrow().wrappers[*i].id),
            CallableKind::Opaque(_) => None,
        };
        // Without a target (a body only being checked), a stand-in call with the right type.
        let fid = target.unwrap_or(FuncId::new(usize::MAX >> 1));
        let op = Op::Call(fid);
        Ok(match sig.ret {
            Some(r) => Some(self.emit(op, vals, r, span)),
            None => {
                self.emit_effect(op, vals, span);
                None
            }
        })
    }

    /// The instance of `origin` for the callables `kinds`, made (and queued for lowering)
    /// on first use. `None` while a body is only being checked.
    fn instance(&mut self, origin: Origin, kinds: Vec<CallableKind>, span: Span) -> Res<Option<FuncId>> {
        if self.checking || kinds.iter().any(|k| matches!(k, CallableKind::Opaque(_))) {
            return Ok(None);
        }
        let mut ctx = self.ctx.borrow_mut();
        if let Some(&id) = ctx.instances.get(&(origin.clone(), kinds.clone())) {
            return Ok(Some(id));
        }
        if ctx.instances.len() >= MAX_INSTANCES {
            let base = match &origin {
                Origin::Func(n) => format!("`{n}`"),
                Origin::Closure(_) => "this closure".to_string(),
            };
            drop(ctx);
            let d =
                Diagnostic::error(format!("{base} needs more than {MAX_INSTANCES} specialised copies"), span)
                    .with_note(
                        "each distinct closure passed to a function makes a copy of it; a function that \
                 passes a new closure to itself would need endlessly many",
                    );
            return Err(err(&mut self.diags, d));
        }
        let base = match &origin {
            Origin::Func(n) => n.clone(),
            Origin::Closure(i) => ctx.closures[*i].name.clone(),
        };
        let parts: Vec<String> = kinds.iter().map(|k| ctx.kind_name(k)).collect();
        let name = ctx.unique_name(&format!("{base}$with${}", parts.join("$")));
        let id = ctx.new_id();
        ctx.instances.insert((origin.clone(), kinds.clone()), id);
        ctx.queue.push(Pending { id, name, origin, kinds });
        Ok(Some(id))
    }
}

/// Lowers the body of closure `id` as function `name`, its function parameters bound to
/// `kinds`. Returns the result type and, unless `checking`, the function.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lower_closure<'g>(
    g: &'g Globals,
    ctx: &'g RefCell<Ctx<'g>>,
    types: &mut TypeTable,
    diags: &mut Vec<Diagnostic>,
    id: usize,
    kinds: &[CallableKind],
    name: &str,
    checking: bool,
) -> Res<(Option<TypeId>, Option<Function>)> {
    let def = ctx.borrow().closures[id].clone();
    let params: Vec<(ast::Ident, PType)> =
        def.ast.params.iter().map(|(n, _)| n.clone()).zip(def.sig.params.iter().cloned()).collect();
    let mut inner = FnLower::for_function(
        g,
        ctx,
        std::mem::take(types),
        name,
        &params,
        kinds,
        Some((&def.captures, def.env_ty)),
        RetMode::Infer,
        def.span,
        checking,
    );
    let ok = match &def.ast.body {
        ClosureBody::Block(b) => inner.lower_block_body(b, "this closure").is_ok(),
        ClosureBody::Expr(e) => inner.lower_expr_body(e).is_ok(),
    };
    *types = std::mem::take(&mut inner.types);
    let ret = inner.f.ret;
    diags.append(&mut inner.diags);
    if !ok {
        return Err(Reported);
    }
    let f = (!checking).then(|| inner.f.remove_unreachable_blocks());
    Ok((ret, f))
}

/// Lowers every queued instance (each may queue more).
pub(crate) fn lower_instances<'g>(
    g: &'g Globals,
    ctx: &'g RefCell<Ctx<'g>>,
    types: &mut TypeTable,
    diags: &mut Vec<Diagnostic>,
) {
    loop {
        let next = ctx.borrow_mut().queue.pop();
        let Some(p) = next else { return };
        match &p.origin {
            Origin::Func(name) => {
                let decl = ctx.borrow().decls.get(name).copied();
                let Some(decl) = decl else { continue };
                let Some(sig) = g.funcs.get(name) else { continue };
                let params: Vec<(ast::Ident, PType)> =
                    decl.params.iter().map(|(n, _)| n.clone()).zip(sig.params.iter().cloned()).collect();
                let mut fl = FnLower::for_function(
                    g,
                    ctx,
                    std::mem::take(types),
                    &p.name,
                    &params,
                    &p.kinds,
                    None,
                    RetMode::Declared(sig.ret),
                    decl.span,
                    false,
                );
                let ok = fl.lower_block_body(&decl.body, &format!("function `{name}`")).is_ok();
                *types = std::mem::take(&mut fl.types);
                diags.append(&mut fl.diags);
                if ok {
                    let f = fl.f.remove_unreachable_blocks();
                    ctx.borrow_mut().done.push((p.id, f));
                }
            }
            Origin::Closure(id) => {
                // Captures are read from the environment: no enclosing scope is needed.
                if let Ok((_, Some(f))) = lower_closure(g, ctx, types, diags, *id, &p.kinds, &p.name, false) {
                    ctx.borrow_mut().done.push((p.id, f));
                }
            }
        }
    }
}

/// Checks the body of generic function `decl` once, with opaque callables for its
/// function parameters.
pub(crate) fn check_generic<'g>(
    g: &'g Globals,
    ctx: &'g RefCell<Ctx<'g>>,
    types: &mut TypeTable,
    decl: &FnDecl,
    diags: &mut Vec<Diagnostic>,
) {
    let Some(sig) = g.funcs.get(&decl.name.name) else { return };
    let mut kinds = Vec::new();
    {
        let mut c = ctx.borrow_mut();
        for p in &sig.params {
            if let PType::Fn(s) = p {
                c.opaque.push(s.clone());
                kinds.push(CallableKind::Opaque(c.opaque.len() - 1));
            }
        }
    }
    let params: Vec<(ast::Ident, PType)> =
        decl.params.iter().map(|(n, _)| n.clone()).zip(sig.params.iter().cloned()).collect();
    let mut fl = FnLower::for_function(
        g,
        ctx,
        std::mem::take(types),
        &decl.name.name,
        &params,
        &kinds,
        None,
        RetMode::Declared(sig.ret),
        decl.span,
        true,
    );
    let _ = fl.lower_block_body(&decl.body, &format!("function `{}`", decl.name.name));
    *types = std::mem::take(&mut fl.types);
    diags.append(&mut fl.diags);
}

/// Resolves a `fn(..) -> R` annotation of a `let`.
pub(crate) fn annotated_fn_type(
    types: &mut TypeTable,
    t: &ast::TypeExpr,
    diags: &mut Vec<Diagnostic>,
) -> Res<Option<FnSig>> {
    match t {
        ast::TypeExpr::Fn(params, ret, _) => Ok(Some(resolve_fn_type(types, params, ret, diags)?)),
        _ => Ok(None),
    }
}

// ---------------------------------------------------------------- free names

/// Every name a closure's body mentions (in order of first mention, nested closures
/// included); those that resolve to enclosing locals are its captures.
fn free_names_closure(c: &ast::Closure, out: &mut Vec<String>) {
    match &c.body {
        ClosureBody::Expr(e) => free_names_expr(e, out),
        ClosureBody::Block(b) => free_names_block(b, out),
    }
}

pub(crate) fn free_names_block(b: &ast::Block, out: &mut Vec<String>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. } | StmtKind::Expr(value) | StmtKind::Return(Some(value)) => {
                free_names_expr(value, out)
            }
            StmtKind::Assign { place, value, .. } => {
                free_names_expr(place, out);
                free_names_expr(value, out);
            }
            StmtKind::If { arms, else_block } => {
                for (c, b) in arms {
                    free_names_expr(c, out);
                    free_names_block(b, out);
                }
                if let Some(b) = else_block {
                    free_names_block(b, out);
                }
            }
            StmtKind::While { cond, body } => {
                free_names_expr(cond, out);
                free_names_block(body, out);
            }
            StmtKind::For { start, end, body, .. } => {
                free_names_expr(start, out);
                free_names_expr(end, out);
                free_names_block(body, out);
            }
            StmtKind::Block(b) => free_names_block(b, out),
            StmtKind::Break | StmtKind::Continue | StmtKind::Return(None) | StmtKind::Error => {}
        }
    }
}

fn free_names_expr(e: &Expr, out: &mut Vec<String>) {
    // An explicit stack: expressions may nest deeply.
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match &e.kind {
            ExprKind::Name(n) => {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
            ExprKind::Float(_) | ExprKind::Int(_) | ExprKind::Bool(_) | ExprKind::Error => {}
            ExprKind::Unary(_, a)
            | ExprKind::Field(a, _)
            | ExprKind::TupleField(a, ..)
            | ExprKind::RefNew(a) => stack.push(a),
            ExprKind::Binary(_, a, b) => {
                stack.push(b);
                stack.push(a);
            }
            ExprKind::Call(f, args) | ExprKind::Index(f, args) => {
                stack.extend(args.iter().rev());
                stack.push(f);
            }
            ExprKind::Tuple(items) | ExprKind::Array(items) => stack.extend(items.iter().rev()),
            ExprKind::StructLit(_, fields) => stack.extend(fields.iter().rev().map(|(_, a)| a)),
            ExprKind::Closure(c) => free_names_closure(c, out),
        }
    }
}
