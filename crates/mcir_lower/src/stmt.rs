//! Lowering function bodies: scopes, mutable variables as SSA values, statements and
//! structured control flow.

use crate::callable::{Callable, CallableKind, Capture, Captured, Ctx, PType};
use crate::globals::{err, resolve_type, ConstVal, Globals, NO_GLOBAL_STATE};
use crate::{Reported, Res};
use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, BlockCall, Function, Module, Op, Terminator, TypeId, TypeTable, Value};
use mcir_syntax::ast::{self, BinOp, Expr, ExprKind, Item, Program, Span, Stmt, StmtKind};
use mcir_syntax::Diagnostic;
use std::cell::RefCell;

/// A value with its type.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Typed {
    pub v: Value,
    pub ty: TypeId,
}

/// What a name in scope stands for.
#[derive(Clone, Debug)]
pub(crate) enum Binding {
    /// An immutable binding: `let`, a parameter or a `for` variable.
    Fixed { value: Typed, kind: FixedKind, span: Span },
    /// A `let mut` variable: its current value lives in `FnLower::vars`.
    Var { var: usize, ty: TypeId },
    /// A closure or function: bound by `let`, a parameter of function type, or captured.
    Callable { callable: Callable, span: Span },
    /// A binding whose initialiser had an error: uses are silently skipped, so that one
    /// mistake is reported once.
    Poisoned,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum FixedKind {
    Let,
    Param,
    ForVar,
    /// Captured by a closure (by value, when the closure was made).
    Captured,
}

/// How a function's result type is known.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum RetMode {
    /// Declared (`None`: returns nothing).
    Declared(Option<TypeId>),
    /// A closure's: from its first `return` (nothing if it has none).
    Infer,
    /// A hand-written rule's body, for a function returning this type: each `return`
    /// gives `(value, closure)`, lowered to `(value, environment)`.
    Rule(TypeId),
}

/// What the `return`s of a rule's body have given so far.
#[derive(Clone, Debug)]
pub(crate) struct RuleBody {
    /// The function's result type.
    pub value_ty: TypeId,
    /// The closure every `return` gives (one closure, so one pullback or pushforward).
    pub closure: Option<usize>,
}

/// An edge into a join block, with the values of the variables live there.
struct Incoming {
    from: Block,
    vars: Vec<Value>,
}

/// A block where control flow meets; its parameters are decided when all edges are known.
struct Join {
    block: Block,
    /// How many variables were live when the join was created.
    live: usize,
    incoming: Vec<Incoming>,
}

struct LoopCtx {
    /// Where `continue` goes.
    continue_to: ContinueTarget,
    /// Where `break` goes.
    exit: Join,
}

enum ContinueTarget {
    /// A while loop's header: takes the carried variables.
    Header { block: Block, carried: Vec<usize> },
    /// A for loop's latch, a join.
    Latch(Join),
}

pub(crate) struct FnLower<'g> {
    pub g: &'g Globals,
    /// Closures and instances, shared by every function being lowered.
    pub ctx: &'g RefCell<Ctx<'g>>,
    /// Whether this body is lowered only to check it (a generic body with opaque
    /// callables): its function is dropped, and nothing it calls is instantiated.
    pub checking: bool,
    /// Whether the result type is still to be inferred from the first `return`.
    infer_ret: bool,
    /// Set while lowering a rule's body.
    pub rule: Option<RuleBody>,
    pub types: TypeTable,
    pub f: Function,
    pub diags: Vec<Diagnostic>,
    /// The block being filled.
    pub cur: Block,
    /// Whether control can reach `cur` (false after `return`, `break`, `continue`).
    pub reachable: bool,
    scopes: Vec<Vec<(String, Binding)>>,
    /// Where each name is bound, innermost last (scope, position in it): a lookup
    /// takes one step, where searching the scopes took one per binding in them (every
    /// name a long function uses but does not bind, `sin` or a parameter, went past all
    /// its `let`s).
    bound_at: std::collections::HashMap<String, Vec<(usize, usize)>>,
    /// Current SSA value of every live `let mut` variable, by variable number.
    vars: Vec<Value>,
    var_names: Vec<String>,
    loops: Vec<LoopCtx>,
    /// Blocks whose terminator has been set.
    terminated: Vec<bool>,
}

pub(crate) fn lower_functions(program: &Program, g: Globals, diags: &mut Vec<Diagnostic>) -> Option<Module> {
    let mut types = g.types.clone();
    let first_instance = g.funcs.values().filter(|s| s.id.is_some()).count();
    let ctx = RefCell::new(Ctx::new(first_instance, g.funcs.keys().cloned()));
    let mut funcs: Vec<(mcir_ir::FuncId, Function)> = Vec::new();
    for item in &program.items {
        let Item::Fn(decl) = item else { continue };
        let Some(sig) = g.funcs.get(&decl.name.name) else { continue };
        if sig.is_generic() {
            ctx.borrow_mut().decls.insert(decl.name.name.clone(), decl);
            crate::callable::check_generic(&g, &ctx, &mut types, decl, diags);
            continue;
        }
        let Some(id) = sig.id else { continue };
        let params: Vec<(ast::Ident, PType)> =
            decl.params.iter().map(|(n, _)| n.clone()).zip(sig.params.iter().cloned()).collect();
        let mut fl = FnLower::for_function(
            &g,
            &ctx,
            std::mem::take(&mut types),
            &decl.name.name,
            &params,
            &[],
            None,
            RetMode::Declared(sig.ret),
            decl.span,
            false,
        );
        let ok = fl.lower_block_body(&decl.body, &format!("function `{}`", decl.name.name)).is_ok();
        types = std::mem::take(&mut fl.types);
        diags.append(&mut fl.diags);
        if ok {
            funcs.push((id, fl.f.remove_unreachable_blocks()));
        }
    }
    let rules = if diags.is_empty() {
        crate::rules::lower_rules(program, &g, &ctx, &mut types, diags)
    } else {
        Vec::new()
    };
    if diags.is_empty() {
        crate::callable::lower_instances(&g, &ctx, &mut types, diags);
    }
    if !diags.is_empty() {
        return None;
    }
    funcs.append(&mut ctx.borrow_mut().done);
    funcs.sort_by_key(|(id, _)| *id);
    let mut module = Module::new();
    module.types = types;
    for (i, (id, f)) in funcs.into_iter().enumerate() {
        if id.index() != i {
            diags.push(Diagnostic::error(
                format!("internal error: function ids are not contiguous at `{}`", f.name),
                Span::default(),
            ));
            return None;
        }
        module.add_function(f);
    }
    crate::rules::check_rules_do_not_write(&module, &rules, diags);
    let checkpoints = std::mem::take(&mut ctx.borrow_mut().checkpoints);
    crate::rules::check_checkpoints_do_not_write(&module, &checkpoints, diags);
    module.rules = rules.into_iter().map(|(r, _)| r).collect();
    module.rules.extend(checkpoints.into_iter().map(|c| c.rule));
    if diags.is_empty() {
        Some(module)
    } else {
        None
    }
}

impl<'g> FnLower<'g> {
    /// A function named `name` being lowered. Its IR parameters: the environment of a
    /// closure (`env`: what it captured and the environment's type), then one per
    /// parameter — a value, or for a parameter of function type the environment of the
    /// callable bound to it (`kinds`, in order; nothing for one without environment).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_function(
        g: &'g Globals,
        ctx: &'g RefCell<Ctx<'g>>,
        types: TypeTable,
        name: &str,
        params: &[(ast::Ident, PType)],
        kinds: &[CallableKind],
        env: Option<(&[Capture], Option<TypeId>)>,
        ret: RetMode,
        span: Span,
        checking: bool,
    ) -> Self {
        let mut ir_params: Vec<(Option<String>, TypeId)> = Vec::new();
        if let Some((_, Some(env_ty))) = env {
            ir_params.push((Some("env".to_string()), env_ty));
        }
        let mut kind_iter = kinds.iter();
        let mut bound: Vec<(usize, Option<CallableKind>)> = Vec::new();
        {
            let c = ctx.borrow();
            for (pname, p) in params {
                match p {
                    PType::Val(t) => {
                        bound.push((ir_params.len(), None));
                        ir_params.push((Some(pname.name.clone()), *t));
                    }
                    PType::Fn(_) => {
                        let k = kind_iter.next().cloned().unwrap_or(CallableKind::Opaque(usize::MAX));
                        match crate::callable::env_type(&c, &k) {
                            Some(t) => {
                                bound.push((ir_params.len(), Some(k)));
                                ir_params.push((Some(pname.name.clone()), t));
                            }
                            None => bound.push((usize::MAX, Some(k))),
                        }
                    }
                }
            }
        }
        let declared = match ret {
            RetMode::Declared(r) => r,
            RetMode::Infer | RetMode::Rule(_) => None,
        };
        let mut f = Function::new(name, &ir_params, declared);
        f.span = mcir_ir::Span::new(span.start, span.end);
        let entry = f.entry();
        let pvals: Vec<Value> = f.blocks[entry].params.clone();
        let mut fl = FnLower {
            g,
            ctx,
            checking,
            infer_ret: ret == RetMode::Infer,
            rule: match ret {
                RetMode::Rule(t) => Some(RuleBody { value_ty: t, closure: None }),
                _ => None,
            },
            types,
            f,
            diags: Vec::new(),
            cur: entry,
            reachable: true,
            scopes: vec![Vec::new()],
            bound_at: std::collections::HashMap::new(),
            vars: Vec::new(),
            var_names: Vec::new(),
            loops: Vec::new(),
            terminated: vec![false],
        };
        // What a closure captured, read from its environment.
        if let Some((captures, env_ty)) = env {
            let env_v = env_ty.map(|_| pvals[0]);
            for c in captures {
                let part = match (env_v, c.field) {
                    (Some(e), Some(i)) => {
                        let fty = match fl.types.get(fl.f.value_type(e)) {
                            mcir_ir::Type::Tuple(items) => items.get(i as usize).copied(),
                            _ => None,
                        };
                        fty.map(|t| fl.emit(Op::TupleGet(i), vec![e], t, span))
                    }
                    _ => None,
                };
                if let Some(p) = part {
                    fl.name_value(p.v, &c.name);
                }
                let b = match &c.what {
                    Captured::Value => match part {
                        Some(value) => Binding::Fixed { value, kind: FixedKind::Captured, span },
                        None => Binding::Poisoned,
                    },
                    Captured::Callable(k) => Binding::Callable {
                        callable: Callable { kind: k.clone(), env: part.map(|p| p.v) },
                        span,
                    },
                };
                fl.bind(&c.name, b);
            }
        }
        for ((pname, _), (slot, kind)) in params.iter().zip(bound) {
            let b = match kind {
                None => Binding::Fixed {
                    value: Typed { v: pvals[slot], ty: fl.f.value_type(pvals[slot]) },
                    kind: FixedKind::Param,
                    span: pname.span,
                },
                Some(k) => Binding::Callable {
                    callable: Callable { kind: k, env: pvals.get(slot).copied() },
                    span: pname.span,
                },
            };
            fl.bind(&pname.name, b);
        }
        fl
    }

    /// Lowers a function's (or closure's) block body; `what` names it in errors.
    pub(crate) fn lower_block_body(&mut self, body: &ast::Block, what: &str) -> Res<()> {
        self.block(body);
        if self.reachable && self.diags.is_empty() {
            let close = Span::new(body.span.end.saturating_sub(1), body.span.end);
            if self.infer_ret {
                // A closure that never returns a value returns nothing.
                self.infer_ret = false;
                self.f.ret = None;
            }
            if self.rule.is_some() {
                let d = Diagnostic::error(format!("{what} can reach its end without returning"), close)
                    .with_label("expected `return (value, |..| ..)` before here");
                self.diags.push(d);
                return Err(Reported);
            }
            match self.f.ret {
                None => self.terminate(Terminator::Return(None), close),
                Some(t) => {
                    let d = Diagnostic::error(
                        format!("{what} can reach its end without returning a value"),
                        close,
                    )
                    .with_label(format!("expected a `return` of type {} before here", self.types.display(t)));
                    self.diags.push(d);
                }
            }
        }
        if self.infer_ret {
            self.infer_ret = false;
        }
        if self.diags.is_empty() {
            Ok(())
        } else {
            Err(Reported)
        }
    }

    /// Lowers the body of `|..| e`: it returns `e`, or nothing when `e` gives nothing.
    pub(crate) fn lower_expr_body(&mut self, e: &Expr) -> Res<()> {
        let v = self.expr_maybe_unit(e);
        self.infer_ret = false;
        let v = v?;
        self.f.ret = v.map(|v| v.ty);
        self.terminate(Terminator::Return(v.map(|v| v.v)), e.span);
        if self.diags.is_empty() {
            Ok(())
        } else {
            Err(Reported)
        }
    }

    // ---------------------------------------------------------------- building blocks

    pub(crate) fn error(&mut self, d: Diagnostic) -> Reported {
        err(&mut self.diags, d)
    }

    pub(crate) fn span(s: Span) -> mcir_ir::Span {
        mcir_ir::Span::new(s.start, s.end)
    }

    pub(crate) fn new_block(&mut self) -> Block {
        self.terminated.push(false);
        self.f.add_block()
    }

    /// Appends an instruction to the current block.
    pub(crate) fn emit(&mut self, op: Op, args: Vec<Value>, ty: TypeId, span: Span) -> Typed {
        let v = self.f.push_inst(self.cur, op, args, Some(ty), Self::span(span));
        // `push_inst` returns a value whenever a result type is given.
        Typed { v: v.unwrap_or_else(|| Value::new(0)), ty }
    }

    /// Appends an instruction without a result.
    pub(crate) fn emit_effect(&mut self, op: Op, args: Vec<Value>, span: Span) {
        self.f.push_inst(self.cur, op, args, None, Self::span(span));
    }

    /// Ends the current block; what follows is unreachable until a new block is entered.
    pub(crate) fn terminate(&mut self, term: Terminator, span: Span) {
        if self.reachable {
            self.f.set_terminator(self.cur, term, Self::span(span));
            self.terminated[self.cur.index()] = true;
        }
        self.reachable = false;
        self.cur = self.new_block();
    }

    fn switch_to(&mut self, b: Block, reachable: bool) {
        self.cur = b;
        self.reachable = reachable;
    }

    fn new_join(&mut self) -> Join {
        Join { block: self.new_block(), live: self.vars.len(), incoming: Vec::new() }
    }

    /// Ends the current block with a jump to `join`, or with `term` whose edge into the
    /// join gets its arguments when the join is finished.
    fn jump_to_join(&mut self, join: &mut Join, span: Span) {
        if !self.reachable {
            return;
        }
        join.incoming.push(Incoming { from: self.cur, vars: self.vars.clone() });
        let call = BlockCall { block: join.block, args: Vec::new() };
        self.terminate(Terminator::Jump(call), span);
    }

    /// Records that the (already set) terminator of `from` enters `join` with `vars`.
    fn add_edge(join: &mut Join, from: Block, vars: Vec<Value>) {
        join.incoming.push(Incoming { from, vars });
    }

    /// Decides the join's parameters (the variables whose values differ between edges),
    /// fills in the edges' arguments and continues lowering in the join block.
    fn finish_join(&mut self, join: Join) {
        let Join { block, live, incoming } = join;
        if incoming.is_empty() {
            self.switch_to(block, false);
            self.vars.truncate(live);
            return;
        }
        let first = incoming[0].vars.clone();
        let merged: Vec<usize> =
            (0..live).filter(|&var| incoming.iter().any(|inc| inc.vars[var] != first[var])).collect();
        self.vars = first[..live].to_vec();
        for &var in &merged {
            let ty = self.f.value_type(first[var]);
            let p = self.f.add_block_param(block, ty, Some(self.var_names[var].clone()));
            self.vars[var] = p;
        }
        for inc in &incoming {
            let args: Vec<Value> = merged.iter().map(|&var| inc.vars[var]).collect();
            set_edge_args(&mut self.f.blocks[inc.from].term, block, args);
        }
        self.switch_to(block, true);
    }

    // ---------------------------------------------------------------- scopes

    pub(crate) fn lookup(&self, name: &str) -> Option<&Binding> {
        let &(scope, pos) = self.bound_at.get(name)?.last()?;
        self.scopes.get(scope)?.get(pos).map(|(_, b)| b)
    }

    /// The current value of a binding.
    pub(crate) fn binding_value(&self, b: &Binding) -> Res<Typed> {
        match b {
            Binding::Fixed { value, .. } => Ok(*value),
            Binding::Var { var, ty } => Ok(Typed { v: self.vars[*var], ty: *ty }),
            // Callers handle callables before asking for a value.
            Binding::Poisoned | Binding::Callable { .. } => Err(Reported),
        }
    }

    pub(crate) fn bind(&mut self, name: &str, b: Binding) {
        let depth = self.scopes.len();
        if let Some(scope) = self.scopes.last_mut() {
            self.bound_at.entry(name.to_string()).or_default().push((depth - 1, scope.len()));
            scope.push((name.to_string(), b));
        }
    }

    fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    fn pop_scope(&mut self) {
        for (name, _) in self.scopes.pop().unwrap_or_default().iter().rev() {
            if let Some(at) = self.bound_at.get_mut(name) {
                at.pop();
            }
        }
    }

    pub(crate) fn name_value(&mut self, v: Value, name: &str) {
        let is_param = self.f.param_values().contains(&v);
        if let Some(d) = self.f.values.get_mut(v) {
            if d.name.is_none() && !is_param {
                d.name = Some(name.to_string());
            }
        }
    }

    fn block(&mut self, b: &ast::Block) {
        self.push_scope();
        let live = self.vars.len();
        for s in &b.stmts {
            self.stmt(s);
        }
        self.pop_scope();
        self.vars.truncate(live);
        self.var_names.truncate(live);
    }

    // ---------------------------------------------------------------- statements

    fn stmt(&mut self, s: &Stmt) {
        if self.stmt_inner(s).is_err() {
            match &s.kind {
                // Keep later uses of the name from reporting the same mistake again.
                StmtKind::Let { name, .. } => self.bind(&name.name, Binding::Poisoned),
                // A `return` that failed still ends the path.
                StmtKind::Return(_) => self.reachable = false,
                _ => {}
            }
        }
    }

    fn stmt_inner(&mut self, s: &Stmt) -> Res<()> {
        match &s.kind {
            StmtKind::Let { name, mutable, ty, value } => {
                let declared_fn = match ty {
                    Some(t) => crate::callable::annotated_fn_type(&mut self.types, t, &mut self.diags)?,
                    None => None,
                };
                // `let g = |..| .. g(..) ..`: the closure's body cannot see `g`, which is
                // bound only once the `let` ends.
                if let ExprKind::Closure(c) = &value.kind {
                    let known = self.g.funcs.contains_key(&name.name)
                        || crate::BUILTIN_NAMES.contains(&name.name.as_str())
                        || crate::builtins::is_extension(&name.name)
                        || self.lookup(&name.name).is_some();
                    if let Some(at) = call_of(&c.body, &name.name).filter(|_| !known) {
                        let d = Diagnostic::error(
                            format!("the closure bound to `{}` calls itself", name.name),
                            at,
                        )
                        .with_secondary(name.span, "bound here, once the closure is made")
                        .with_note(format!(
                            "a closure cannot call itself: for recursion, write a named function `fn {}(..)`",
                            name.name
                        ));
                        return Err(self.error(d));
                    }
                }
                if let Some(c) = self.callable_expr(value, declared_fn.as_ref())? {
                    if *mutable {
                        let d = Diagnostic::error(
                            format!("`{}` holds a function: it cannot be declared `let mut`", name.name),
                            name.span,
                        )
                        .with_note("a variable holding a closure or function cannot be reassigned");
                        return Err(self.error(d));
                    }
                    if let Some(want) = &declared_fn {
                        self.check_callable_fits(&c, want, value.span, &format!("`{}`", name.name))?;
                    }
                    self.bind(&name.name, Binding::Callable { callable: c, span: name.span });
                    return Ok(());
                }
                if declared_fn.is_some() {
                    let msg = format!(
                        "`{}` is declared with a function type, but its value is not a function",
                        name.name
                    );
                    return Err(self.error(Diagnostic::error(msg, value.span)));
                }
                let declared = match ty {
                    Some(t) => Some(resolve_type(&mut self.types, t, &mut self.diags)?),
                    None => None,
                };
                let v = self.expr(value)?;
                if let Some(d) = declared {
                    if d != v.ty {
                        let msg = format!(
                            "`{}` is declared {} but its value is {}",
                            name.name,
                            self.types.display(d),
                            self.types.display(v.ty)
                        );
                        return Err(self.error(Diagnostic::error(msg, value.span)));
                    }
                }
                self.name_value(v.v, &name.name);
                if *mutable {
                    let var = self.vars.len();
                    self.vars.push(v.v);
                    self.var_names.push(name.name.clone());
                    self.bind(&name.name, Binding::Var { var, ty: v.ty });
                } else {
                    self.bind(&name.name, Binding::Fixed { value: v, kind: FixedKind::Let, span: name.span });
                }
                Ok(())
            }
            StmtKind::Assign { place, op, value } => self.assign(place, *op, value, s.span),
            StmtKind::If { arms, else_block } => {
                self.if_stmt(arms, else_block.as_ref(), s.span);
                Ok(())
            }
            StmtKind::While { cond, body } => self.while_stmt(cond, body, s.span),
            StmtKind::For { var, start, end, body, checkpoint } => {
                self.for_stmt(var, start, end, body, s.span, *checkpoint)
            }
            StmtKind::Break | StmtKind::Continue => {
                let is_break = matches!(s.kind, StmtKind::Break);
                let Some(mut lp) = self.loops.pop() else {
                    let word = if is_break { "break" } else { "continue" };
                    return Err(self.error(Diagnostic::error(format!("`{word}` outside of a loop"), s.span)));
                };
                if is_break {
                    self.jump_to_join(&mut lp.exit, s.span);
                } else {
                    match &mut lp.continue_to {
                        ContinueTarget::Header { block, carried } => {
                            let args = carried.iter().map(|&c| self.vars[c]).collect();
                            let call = BlockCall { block: *block, args };
                            self.terminate(Terminator::Jump(call), s.span);
                        }
                        ContinueTarget::Latch(join) => self.jump_to_join(join, s.span),
                    }
                }
                self.loops.push(lp);
                Ok(())
            }
            StmtKind::Return(value) if self.rule.is_some() => self.rule_return(value.as_ref(), s.span),
            StmtKind::Return(value) => {
                let v = match value {
                    Some(e) => Some(self.expr(e)?),
                    None => None,
                };
                if self.infer_ret {
                    // A closure's result type is that of its first `return`.
                    self.infer_ret = false;
                    self.f.ret = v.map(|v| v.ty);
                }
                match (v, self.f.ret) {
                    (None, None) => {}
                    (Some(v), Some(r)) if v.ty == r => {}
                    (Some(v), Some(r)) => {
                        let msg = format!(
                            "this function returns {}, but this value is {}",
                            self.types.display(r),
                            self.types.display(v.ty)
                        );
                        return Err(self.error(Diagnostic::error(msg, s.span)));
                    }
                    (None, Some(r)) => {
                        let msg = format!("`return` needs a value of type {}", self.types.display(r));
                        return Err(self.error(Diagnostic::error(msg, s.span)));
                    }
                    (Some(v), None) => {
                        let msg = format!(
                            "this function returns nothing, but `return` gives a {}",
                            self.types.display(v.ty)
                        );
                        return Err(self.error(
                            Diagnostic::error(msg, s.span).with_note("declare the return type with `-> T`"),
                        ));
                    }
                }
                self.terminate(Terminator::Return(v.map(|v| v.v)), s.span);
                Ok(())
            }
            StmtKind::Expr(e) => {
                self.expr_maybe_unit(e)?;
                Ok(())
            }
            StmtKind::Block(b) => {
                self.block(b);
                Ok(())
            }
            StmtKind::Error => Err(Reported),
        }
    }

    fn if_stmt(&mut self, arms: &[(Expr, ast::Block)], else_block: Option<&ast::Block>, span: Span) {
        let mut join = self.new_join();
        for (cond, body) in arms {
            let c = self.condition(cond);
            let then_b = self.new_block();
            let else_b = self.new_block();
            let reachable = self.reachable;
            match c {
                Ok(c) => {
                    let term = Terminator::Branch {
                        cond: c,
                        then_dest: BlockCall { block: then_b, args: Vec::new() },
                        else_dest: BlockCall { block: else_b, args: Vec::new() },
                    };
                    self.terminate(term, cond.span);
                }
                // Keep checking the arms; nothing is emitted for them.
                Err(_) => self.terminate(Terminator::Return(None), cond.span),
            }
            let saved = self.vars.clone();
            self.switch_to(then_b, reachable);
            self.block(body);
            self.jump_to_join(&mut join, span);
            self.vars = saved;
            self.switch_to(else_b, reachable);
        }
        if let Some(b) = else_block {
            self.block(b);
        }
        self.jump_to_join(&mut join, span);
        self.finish_join(join);
    }

    /// Lowers a condition, which must be a `bool`.
    fn condition(&mut self, cond: &Expr) -> Res<Value> {
        let c = self.expr(cond)?;
        if c.ty != TypeTable::BOOL {
            let msg = format!("a condition must be a bool, not {}", self.types.display(c.ty));
            let d = Diagnostic::error(msg, cond.span);
            let d = if c.ty == TypeTable::I64 || c.ty == TypeTable::F64 {
                d.with_note("compare explicitly, for example `x != 0`")
            } else {
                d
            };
            return Err(self.error(d));
        }
        Ok(c.v)
    }

    /// The outer `let mut` variables a loop body may assign, by a syntactic scan.
    pub(crate) fn carried_vars(&self, body: &ast::Block) -> Vec<usize> {
        let mut names = Vec::new();
        collect_assigned(&body.stmts, &mut names);
        let mut out: Vec<usize> = Vec::new();
        for n in names {
            if let Some(Binding::Var { var, .. }) = self.lookup(&n) {
                if !out.contains(var) {
                    out.push(*var);
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// The current value of `let mut` variable `var`.
    pub(crate) fn var_value(&self, var: usize) -> Value {
        self.vars[var]
    }

    /// The name of `let mut` variable `var`.
    pub(crate) fn var_name(&self, var: usize) -> &str {
        &self.var_names[var]
    }

    /// Gives `let mut` variable `var` a new value.
    pub(crate) fn set_var_value(&mut self, var: usize, v: Value) {
        self.vars[var] = v;
    }

    /// A loop header with one parameter per carried variable; jumps to it from here.
    fn enter_header(&mut self, carried: &[usize], extra: Option<(Value, &str)>, span: Span) -> Block {
        let header = self.new_block();
        let mut args = Vec::new();
        if let Some((v, name)) = extra {
            let ty = self.f.value_type(v);
            self.f.add_block_param(header, ty, Some(name.to_string()));
            args.push(v);
        }
        for &c in carried {
            args.push(self.vars[c]);
        }
        self.terminate(Terminator::Jump(BlockCall { block: header, args }), span);
        // The header is entered from the preheader; `terminate` left us unreachable.
        for &c in carried {
            let ty = self.f.value_type(self.vars[c]);
            let p = self.f.add_block_param(header, ty, Some(self.var_names[c].clone()));
            self.vars[c] = p;
        }
        header
    }

    fn while_stmt(&mut self, cond: &Expr, body: &ast::Block, span: Span) -> Res<()> {
        let reachable = self.reachable;
        let carried = self.carried_vars(body);
        let header = self.enter_header(&carried, None, cond.span);
        self.switch_to(header, reachable);
        let mut exit = self.new_join();
        let body_b = self.new_block();
        let always = matches!(cond.kind, ExprKind::Bool(true));
        if always {
            self.terminate(Terminator::Jump(BlockCall { block: body_b, args: Vec::new() }), cond.span);
        } else {
            let c = self.condition(cond);
            let vars = self.vars.clone();
            let from = self.cur;
            let c = match c {
                Ok(c) => c,
                Err(r) => {
                    // Check the body anyway, in unreachable code.
                    self.terminate(Terminator::Return(None), cond.span);
                    self.switch_to(body_b, false);
                    self.block(body);
                    return Err(r);
                }
            };
            let term = Terminator::Branch {
                cond: c,
                then_dest: BlockCall { block: body_b, args: Vec::new() },
                else_dest: BlockCall { block: exit.block, args: Vec::new() },
            };
            let was = self.reachable;
            self.terminate(term, cond.span);
            if was {
                Self::add_edge(&mut exit, from, vars);
            }
        }
        self.switch_to(body_b, reachable);
        self.loops.push(LoopCtx {
            continue_to: ContinueTarget::Header { block: header, carried: carried.clone() },
            exit,
        });
        self.block(body);
        let lp = self.loops.pop();
        let args = carried.iter().map(|&c| self.vars[c]).collect();
        self.terminate(Terminator::Jump(BlockCall { block: header, args }), span);
        if let Some(lp) = lp {
            self.finish_join(lp.exit);
        }
        Ok(())
    }

    pub(crate) fn for_stmt(
        &mut self,
        var: &ast::Ident,
        start: &Expr,
        end: &Expr,
        body: &ast::Block,
        span: Span,
        checkpoint: Option<Span>,
    ) -> Res<()> {
        if let Some(mark) = checkpoint {
            return self.checkpointed_for(var, start, end, body, span, mark);
        }
        let (a, b) = self.range_bounds(start, end)?;
        let reachable = self.reachable;
        let carried = self.carried_vars(body);
        let header = self.enter_header(&carried, Some((a.v, &var.name)), start.span.to(end.span));
        self.switch_to(header, reachable);
        let i = self.f.blocks[header].params[0];
        let c =
            self.emit(Op::ICmp(mcir_ir::CmpOp::Lt), vec![i, b.v], TypeTable::BOOL, start.span.to(end.span));
        let mut exit = self.new_join();
        let body_b = self.new_block();
        let vars = self.vars.clone();
        let from = self.cur;
        let term = Terminator::Branch {
            cond: c.v,
            then_dest: BlockCall { block: body_b, args: Vec::new() },
            else_dest: BlockCall { block: exit.block, args: Vec::new() },
        };
        self.terminate(term, start.span.to(end.span));
        if reachable {
            Self::add_edge(&mut exit, from, vars);
        }
        self.switch_to(body_b, reachable);
        let latch = self.new_join();
        self.loops.push(LoopCtx { continue_to: ContinueTarget::Latch(latch), exit });
        self.push_scope();
        self.bind(
            &var.name,
            Binding::Fixed {
                value: Typed { v: i, ty: TypeTable::I64 },
                kind: FixedKind::ForVar,
                span: var.span,
            },
        );
        self.block(body);
        self.pop_scope();
        let Some(mut lp) = self.loops.pop() else { return Ok(()) };
        if let ContinueTarget::Latch(mut latch) = std::mem::replace(
            &mut lp.continue_to,
            ContinueTarget::Header { block: header, carried: Vec::new() },
        ) {
            self.jump_to_join(&mut latch, span);
            self.finish_join(latch);
            if self.reachable {
                let one = self.emit(Op::IConst(1), vec![], TypeTable::I64, var.span);
                let next =
                    self.emit(Op::IBinary(mcir_ir::IBinOp::Add), vec![i, one.v], TypeTable::I64, var.span);
                let mut args = vec![next.v];
                args.extend(carried.iter().map(|&c| self.vars[c]));
                self.terminate(Terminator::Jump(BlockCall { block: header, args }), span);
            }
        }
        self.finish_join(lp.exit);
        Ok(())
    }

    // ---------------------------------------------------------------- assignment

    fn assign(&mut self, place: &Expr, op: Option<BinOp>, value: &Expr, span: Span) -> Res<()> {
        match &place.kind {
            ExprKind::Name(name) => self.assign_name(name, place, op, value, span),
            ExprKind::Index(arr, idx) => {
                let a = self.expr(arr)?;
                let Some((elem, rank)) = self.types.as_array(a.ty) else {
                    let msg = format!("cannot index a value of type {}", self.types.display(a.ty));
                    return Err(self.error(Diagnostic::error(msg, arr.span)));
                };
                let mut args = vec![a.v];
                args.extend(self.indices(idx, rank, place.span)?);
                let elem_ty = TypeTable::scalar(elem);
                let rhs = self.expr(value)?;
                let new = match op {
                    None => rhs,
                    Some(op) => {
                        let old = self.emit(Op::Load, args.clone(), elem_ty, place.span);
                        self.binary_values(op, old, rhs, span, value.span)?
                    }
                };
                self.expect_type(new, elem_ty, value.span, "the array's elements")?;
                args.push(new.v);
                self.emit_effect(Op::Store, args, place.span);
                Ok(())
            }
            ExprKind::Field(obj, field) => {
                let o = self.expr(obj)?;
                let Some((sid, def)) = self.types.as_struct(o.ty) else {
                    let msg = format!("{} has no fields to assign", self.types.display(o.ty));
                    return Err(self.error(Diagnostic::error(msg, obj.span)));
                };
                let (mutable, sname) = (def.mutable, def.name.clone());
                let Some(fi) = def.field_index(&field.name) else {
                    let msg = format!("struct `{sname}` has no field `{}`", field.name);
                    return Err(self.error(Diagnostic::error(msg, field.span)));
                };
                let fty = def.fields[fi].1;
                if !mutable {
                    let msg =
                        format!("cannot assign to field `{}` of `{sname}`, an immutable struct", field.name);
                    return Err(self.error(
                        Diagnostic::error(msg, place.span)
                            .with_note(format!("declare it `mut struct {sname}` to assign its fields")),
                    ));
                }
                let rhs = self.expr(value)?;
                let op_field = Op::MutStore(sid, fi as u32);
                match op {
                    None => {
                        self.expect_type(rhs, fty, value.span, "the field")?;
                        self.emit_effect(op_field, vec![o.v, rhs.v], place.span);
                    }
                    Some(op) => {
                        let old = self.emit(Op::MutLoad(sid, fi as u32), vec![o.v], fty, place.span);
                        let new = self.binary_values(op, old, rhs, span, value.span)?;
                        self.store_compound(old, new, span, |s, new| {
                            s.emit_effect(op_field.clone(), vec![o.v, new.v], place.span)
                        })?;
                    }
                }
                Ok(())
            }
            ExprKind::Unary(ast::UnOp::Deref, r) => {
                let rv = self.expr(r)?;
                let inner = match self.types.get(rv.ty) {
                    mcir_ir::Type::Ref(inner) => *inner,
                    _ => {
                        let msg = format!("cannot dereference a value of type {}", self.types.display(rv.ty));
                        return Err(self.error(Diagnostic::error(msg, r.span)));
                    }
                };
                let rhs = self.expr(value)?;
                match op {
                    None => {
                        self.expect_type(rhs, inner, value.span, "the ref's content")?;
                        self.emit_effect(Op::RefStore, vec![rv.v, rhs.v], place.span);
                    }
                    Some(op) => {
                        let old = self.emit(Op::RefLoad, vec![rv.v], inner, place.span);
                        let new = self.binary_values(op, old, rhs, span, value.span)?;
                        self.store_compound(old, new, span, |s, new| {
                            s.emit_effect(Op::RefStore, vec![rv.v, new.v], place.span)
                        })?;
                    }
                }
                Ok(())
            }
            ExprKind::TupleField(..) => Err(self.error(
                Diagnostic::error("cannot assign to a tuple field: tuples are immutable", place.span)
                    .with_note("build a new tuple, or use a `mut struct`"),
            )),
            _ => Err(self
                .error(Diagnostic::error("cannot assign to this expression", place.span).with_note(
                    "a place is a `let mut` variable, `a[i]`, `p.field` of a mut struct, or `*r`",
                ))),
        }
    }

    /// After `place op= value` computed `new` from `old`: an array place is updated in
    /// place (its aliases see the change); a scalar place gets the new value via `store`.
    fn store_compound(
        &mut self,
        old: Typed,
        new: Typed,
        span: Span,
        store: impl FnOnce(&mut Self, Typed),
    ) -> Res<()> {
        if new.ty != old.ty {
            let msg = format!(
                "the result is {}, but the place holds {}",
                self.types.display(new.ty),
                self.types.display(old.ty)
            );
            return Err(self.error(Diagnostic::error(msg, span)));
        }
        if self.types.as_array(old.ty).is_some() {
            self.emit_effect(Op::CopyInto, vec![old.v, new.v], span);
        } else {
            store(self, new);
        }
        Ok(())
    }

    fn assign_name(
        &mut self,
        name: &str,
        place: &Expr,
        op: Option<BinOp>,
        value: &Expr,
        span: Span,
    ) -> Res<()> {
        let binding = self.lookup(name).cloned();
        match binding {
            Some(Binding::Poisoned) => Err(Reported),
            Some(Binding::Callable { span: def_span, .. }) => Err(self.error(
                Diagnostic::error(format!("cannot assign to `{name}`: it holds a function"), place.span)
                    .with_secondary(def_span, "defined here"),
            )),
            Some(Binding::Var { var, ty }) => {
                let rhs = self.expr(value)?;
                let new = match op {
                    None => rhs,
                    Some(op) => {
                        let old = Typed { v: self.vars[var], ty };
                        let new = self.binary_values(op, old, rhs, span, value.span)?;
                        if self.types.as_array(ty).is_some() {
                            self.store_compound(old, new, span, |_, _| {})?;
                            return Ok(());
                        }
                        new
                    }
                };
                self.expect_type(new, ty, value.span, &format!("`{name}`"))?;
                self.name_value(new.v, name);
                self.vars[var] = new.v;
                Ok(())
            }
            Some(Binding::Fixed { value: old, kind, span: def_span }) => {
                if op.is_some() && self.types.as_array(old.ty).is_some() {
                    // In-place update of the array the binding holds: the binding is unchanged.
                    let rhs = self.expr(value)?;
                    let new = self.binary_values(op.unwrap_or(BinOp::Add), old, rhs, span, value.span)?;
                    return self.store_compound(old, new, span, |_, _| {});
                }
                let (msg, note) = match kind {
                    FixedKind::Let => (
                        format!("cannot assign twice to immutable variable `{name}`"),
                        format!("declare it with `let mut {name}` to make it assignable"),
                    ),
                    FixedKind::Param => (
                        format!("cannot assign to parameter `{name}`: parameters are immutable"),
                        format!("copy it into a local first: `let mut {name} = {name};`"),
                    ),
                    FixedKind::ForVar => (
                        format!("cannot assign to loop variable `{name}`"),
                        "a `for` variable is immutable inside the loop; use a `while` loop to control the index"
                            .to_string(),
                    ),
                    FixedKind::Captured => (
                        format!("cannot assign to `{name}`: a closure captures it by value"),
                        "a closure sees the value a variable had when the closure was made and cannot \
                         change it; keep state that a closure updates in an array, a ref or a mut struct"
                            .to_string(),
                    ),
                };
                let label =
                    if kind == FixedKind::Captured { "captured by this closure" } else { "defined here" };
                Err(self.error(
                    Diagnostic::error(msg, place.span).with_secondary(def_span, label).with_note(note),
                ))
            }
            None if self.g.consts.contains_key(name) => Err(self.error(
                Diagnostic::error(format!("cannot assign to `{name}`: it is a global constant"), place.span)
                    .with_label("mutates global state")
                    .with_note(NO_GLOBAL_STATE),
            )),
            None if self.g.funcs.contains_key(name) => {
                Err(self.error(Diagnostic::error(format!("cannot assign to function `{name}`"), place.span)))
            }
            None => Err(self.error(Diagnostic::error(format!("unknown variable `{name}`"), place.span))),
        }
    }

    pub(crate) fn expect_type(&mut self, v: Typed, want: TypeId, span: Span, what: &str) -> Res<()> {
        if v.ty == want {
            return Ok(());
        }
        let msg = format!(
            "{what} has type {}, but this value is {}",
            self.types.display(want),
            self.types.display(v.ty)
        );
        let d = Diagnostic::error(msg, span);
        let d = match (want, v.ty) {
            (TypeTable::F64, TypeTable::I64) => {
                d.with_note("convert with `f64(..)`, or write a float literal like `2.0`")
            }
            (TypeTable::I64, TypeTable::F64) => {
                d.with_note("convert with `i64(..)` (it truncates toward zero)")
            }
            _ => d,
        };
        Err(self.error(d))
    }

    pub(crate) fn const_value(&mut self, c: ConstVal, span: Span) -> Typed {
        match c {
            ConstVal::F64(x) => self.emit(Op::FConst(x), vec![], TypeTable::F64, span),
            ConstVal::I64(i) => self.emit(Op::IConst(i), vec![], TypeTable::I64, span),
            ConstVal::Bool(b) => self.emit(Op::BConst(b), vec![], TypeTable::BOOL, span),
        }
    }

    /// Short-circuit `&&` / `||`: the right operand runs only when needed.
    pub(crate) fn short_circuit(&mut self, is_and: bool, a: &Expr, b: &Expr, span: Span) -> Res<Typed> {
        let av = self.condition(a)?;
        let reachable = self.reachable;
        let rhs_b = self.new_block();
        let join = self.new_block();
        let short = self.emit(Op::BConst(!is_and), vec![], TypeTable::BOOL, a.span);
        let (then_dest, else_dest) = if is_and {
            (BlockCall { block: rhs_b, args: vec![] }, BlockCall { block: join, args: vec![short.v] })
        } else {
            (BlockCall { block: join, args: vec![short.v] }, BlockCall { block: rhs_b, args: vec![] })
        };
        self.terminate(Terminator::Branch { cond: av, then_dest, else_dest }, span);
        self.switch_to(rhs_b, reachable);
        let bv = self.condition(b)?;
        self.terminate(Terminator::Jump(BlockCall { block: join, args: vec![bv] }), span);
        let p = self.f.add_block_param(join, TypeTable::BOOL, None);
        self.switch_to(join, reachable);
        Ok(Typed { v: p, ty: TypeTable::BOOL })
    }
}

fn set_edge_args(term: &mut Terminator, target: Block, args: Vec<Value>) {
    match term {
        Terminator::Jump(c) if c.block == target => c.args = args,
        Terminator::Branch { then_dest, else_dest, .. } => {
            if then_dest.block == target {
                then_dest.args = args;
            } else if else_dest.block == target {
                else_dest.args = args;
            }
        }
        _ => {}
    }
}

/// Names assigned (`x = ..`, `x op= ..`) anywhere in `stmts`, nested blocks included.
fn collect_assigned(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        match &s.kind {
            StmtKind::Assign { place: Expr { kind: ExprKind::Name(n), .. }, .. } => out.push(n.clone()),
            StmtKind::If { arms, else_block } => {
                for (_, b) in arms {
                    collect_assigned(&b.stmts, out);
                }
                if let Some(b) = else_block {
                    collect_assigned(&b.stmts, out);
                }
            }
            StmtKind::While { body, .. } | StmtKind::For { body, .. } | StmtKind::Block(body) => {
                collect_assigned(&body.stmts, out)
            }
            _ => {}
        }
    }
}

/// Where `body` calls a function by the name `name` (its own calls, and those of the
/// closures it makes), if it does.
fn call_of(body: &ast::ClosureBody, name: &str) -> Option<Span> {
    let (exprs, blocks) = match body {
        ast::ClosureBody::Expr(e) => (vec![(e, 1)], vec![]),
        ast::ClosureBody::Block(b) => (vec![], vec![b]),
    };
    ast::find_expr(exprs, blocks, |e, _| match &e.kind {
        ExprKind::Call(f, _) if matches!(&f.kind, ExprKind::Name(n) if n == name) => Some(f.span),
        _ => None,
    })
}
