//! Hand-written derivative rules (docs/rules.md): `rule reverse f(..) { .. }` and
//! `rule forward f(..) { .. }`, whose bodies return the value together with a pullback or
//! pushforward closure, and `rule zero f;`. Each body becomes a function `f$rrule` or
//! `f$frule` returning `(value, environment)`, and its closure a function of its own; the
//! module records which functions a rule gives (`mcir_ir::CustomRule`), and automatic
//! differentiation uses them instead of deriving the rule.

use crate::callable::{CallableKind, Ctx, FnSig, Origin, PType};
use crate::globals::{err, resolve_type, Globals};
use crate::stmt::{FnLower, RetMode, Typed};
use crate::{Reported, Res};
use mcir_ir::entity::EntityRef;
use mcir_ir::{CustomRule, Op, RuleKind, Terminator, Type, TypeId, TypeTable};
use mcir_syntax::ast::{self, Expr, ExprKind, Item, Program, RuleDecl, Span};
use mcir_syntax::Diagnostic;
use std::cell::RefCell;

/// The tangent type of `t` as a rule's closure sees it: `f64` and `f64` arrays are their
/// own; a tuple or value struct whose fields all have one, the tuple of theirs; `None`
/// for values without a derivative (`i64`, `bool`, their arrays). Anything else (refs,
/// mut structs, tuples mixing both kinds of field) cannot be handled by a rule.
pub(crate) fn rule_tangent(types: &mut TypeTable, t: TypeId) -> Result<Option<TypeId>, String> {
    let fields: Vec<TypeId> = match types.get(t).clone() {
        Type::Scalar(mcir_ir::Scalar::F64) => return Ok(Some(t)),
        Type::Scalar(_) => return Ok(None),
        Type::Array { elem: mcir_ir::Scalar::F64, .. } => return Ok(Some(t)),
        Type::Array { .. } => return Ok(None),
        Type::Tuple(items) => items,
        Type::Struct(s) if !types.struct_def(s).mutable => {
            types.struct_def(s).fields.iter().map(|f| f.1).collect()
        }
        _ => return Err(format!("{} (refs and mut structs)", types.display(t))),
    };
    let mut tans = Vec::new();
    for f in &fields {
        tans.push(rule_tangent(types, *f)?);
    }
    if tans.iter().all(|x| x.is_none()) {
        return Ok(None);
    }
    if tans.iter().any(|x| x.is_none()) {
        return Err(format!("{} (some of its fields have a derivative and some not)", types.display(t)));
    }
    Ok(Some(types.intern(Type::Tuple(tans.into_iter().flatten().collect()))))
}

/// Lowers every rule of `program`, after its functions.
pub(crate) fn lower_rules<'g>(
    program: &Program,
    g: &'g Globals,
    ctx: &'g RefCell<Ctx<'g>>,
    types: &mut TypeTable,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(CustomRule, Span)> {
    let mut out: Vec<(CustomRule, Span)> = Vec::new();
    for item in &program.items {
        let Item::Rule(r) = item else { continue };
        if let Ok(rule) = lower_rule(r, g, ctx, types, diags, &out) {
            out.push((rule, r.span));
        }
    }
    out
}

fn lower_rule<'g>(
    r: &RuleDecl,
    g: &'g Globals,
    ctx: &'g RefCell<Ctx<'g>>,
    types: &mut TypeTable,
    diags: &mut Vec<Diagnostic>,
    earlier: &[(CustomRule, Span)],
) -> Res<CustomRule> {
    let name = &r.name.name;
    let Some(sig) = g.funcs.get(name).cloned() else {
        let d = Diagnostic::error(format!("there is no function `{name}` to give a rule to"), r.name.span);
        return Err(err(diags, d));
    };
    let Some(func) = sig.id else {
        let d =
            Diagnostic::error(format!("`{name}` takes a function, so it cannot have a rule"), r.name.span)
                .with_note("rules are for functions of values; give the rule to the functions it calls");
        return Err(err(diags, d));
    };
    let word = match r.kind {
        ast::RuleKind::Reverse => "reverse",
        ast::RuleKind::Forward => "forward",
        ast::RuleKind::Zero => "zero",
    };
    for (e, espan) in earlier.iter().filter(|(e, _)| e.func == func) {
        if e.kind.word() == word || word == "zero" || matches!(e.kind, RuleKind::Zero) {
            let d = Diagnostic::error(format!("`{name}` already has a {} rule", e.kind.word()), r.span)
                .with_secondary(*espan, "given here")
                .with_note(
                    "a function has at most one reverse and one forward rule; `rule zero` stands alone",
                );
            return Err(err(diags, d));
        }
    }
    if r.kind == ast::RuleKind::Zero {
        return Ok(CustomRule { func, kind: RuleKind::Zero });
    }
    // The rule restates the function's signature.
    let mismatch = |diags: &mut Vec<Diagnostic>, msg: String, span: Span| {
        err(diags, Diagnostic::error(msg, span).with_secondary(sig.span, "the function is declared here"))
    };
    if r.params.len() != sig.params.len() {
        let msg = format!(
            "`{name}` takes {} parameter{}, but its rule declares {}",
            sig.params.len(),
            if sig.params.len() == 1 { "" } else { "s" },
            r.params.len()
        );
        return Err(mismatch(diags, msg, r.name.span));
    }
    let mut params = Vec::new();
    for ((pname, pty), want) in r.params.iter().zip(&sig.params) {
        let t = resolve_type(types, pty, diags)?;
        if PType::Val(t) != *want {
            let msg = format!(
                "parameter `{}` of the rule is {}, but `{name}` takes {} there",
                pname.name,
                types.display(t),
                want.display(types)
            );
            return Err(mismatch(diags, msg, pty.span()));
        }
        params.push((pname.clone(), PType::Val(t)));
    }
    let ret = match &r.ret {
        None => None,
        Some(ast::TypeExpr::Tuple(items, _)) if items.is_empty() => None,
        Some(t) => Some(resolve_type(types, t, diags)?),
    };
    if ret != sig.ret {
        let show = |t: Option<TypeId>, types: &TypeTable| {
            t.map_or("nothing".to_string(), |t| types.display(t).to_string())
        };
        let msg =
            format!("the rule returns {}, but `{name}` returns {}", show(ret, types), show(sig.ret, types));
        return Err(mismatch(diags, msg, r.name.span));
    }
    let Some(value_ty) = ret else {
        let d = Diagnostic::error(
            format!("`{name}` returns nothing, so it has no derivative to give a rule for"),
            r.span,
        )
        .with_note("a function that only changes its arguments gets its derivative derived");
        return Err(err(diags, d));
    };
    // The tangents the closure works with.
    let unsupported = |diags: &mut Vec<Diagnostic>, what: String, span: Span| {
        err(
            diags,
            Diagnostic::error(format!("a rule cannot be written for a function of {what}"), span)
                .with_note("rules handle f64, f64 arrays, and tuples and value structs of them; the derivative of this function is derived instead"),
        )
    };
    let result_tangent = match rule_tangent(types, value_ty) {
        Ok(Some(t)) => t,
        Ok(None) => {
            let d = Diagnostic::error(
                format!("`{name}` returns {}, which has no derivative", types.display(value_ty)),
                r.span,
            )
            .with_note("use `rule zero` for a function whose derivative is zero");
            return Err(err(diags, d));
        }
        Err(what) => return Err(unsupported(diags, what, r.name.span)),
    };
    let mut param_tangents = Vec::new();
    for ((pname, pty), (_, p)) in r.params.iter().zip(&params) {
        let PType::Val(t) = p else { continue };
        match rule_tangent(types, *t) {
            Ok(Some(tt)) => param_tangents.push((pname.name.clone(), tt)),
            Ok(None) => {}
            Err(what) => return Err(unsupported(diags, what, pty.span())),
        }
    }
    if param_tangents.is_empty() {
        let d = Diagnostic::error(format!("no parameter of `{name}` has a derivative"), r.name.span)
            .with_note("use `rule zero` for a function whose derivative is zero");
        return Err(err(diags, d));
    }
    // What the closure must be.
    let expected = match r.kind {
        ast::RuleKind::Reverse => {
            let cot = if param_tangents.len() == 1 {
                param_tangents[0].1
            } else {
                types.intern(Type::Tuple(param_tangents.iter().map(|p| p.1).collect()))
            };
            FnSig { params: vec![PType::Val(result_tangent)], ret: Some(cot) }
        }
        _ => FnSig {
            params: param_tangents.iter().map(|p| PType::Val(p.1)).collect(),
            ret: Some(result_tangent),
        },
    };
    let suffix = if r.kind == ast::RuleKind::Reverse { "rrule" } else { "frule" };
    let (fname, fid) = {
        let mut c = ctx.borrow_mut();
        (c.unique_name(&format!("{name}${suffix}")), c.new_id())
    };
    let Some(body) = &r.body else { return Err(Reported) };
    let mut fl = FnLower::for_function(
        g,
        ctx,
        std::mem::take(types),
        &fname,
        &params,
        &[],
        None,
        RetMode::Rule(value_ty),
        r.span,
        false,
    );
    let what = format!("the {word} rule of `{name}`");
    let ok = fl.lower_block_body(body, &what).is_ok();
    let closure = fl.rule.as_ref().and_then(|b| b.closure);
    *types = std::mem::take(&mut fl.types);
    diags.append(&mut fl.diags);
    if !ok {
        return Err(Reported);
    }
    let Some(closure) = closure else { return Err(Reported) };
    let (have, cspan, cfid) = {
        let c = ctx.borrow();
        let def = &c.closures[closure];
        (def.sig.clone(), def.span, c.instances.get(&(Origin::Closure(closure), Vec::new())).copied())
    };
    if have != expected {
        let role = if r.kind == ast::RuleKind::Reverse {
            "the pullback takes the cotangent of the result and returns the cotangent of each parameter that has one"
        } else {
            "the pushforward takes the tangent of each parameter that has one and returns the tangent of the result"
        };
        let d = Diagnostic::error(
            format!("this closure is {}, but {what} needs {}", have.display(types), expected.display(types)),
            cspan,
        )
        .with_note(role);
        return Err(err(diags, d));
    }
    let Some(cfid) = cfid else { return Err(Reported) };
    let f = fl.f.remove_unreachable_blocks();
    ctx.borrow_mut().done.push((fid, f));
    Ok(CustomRule {
        func,
        kind: match r.kind {
            ast::RuleKind::Reverse => RuleKind::Reverse { rule: fid, pullback: cfid },
            _ => RuleKind::Forward { rule: fid, pushforward: cfid },
        },
    })
}

impl FnLower<'_> {
    /// `return (value, closure);` in a rule's body: returns `(value, environment)`.
    pub(crate) fn rule_return(&mut self, value: Option<&Expr>, span: Span) -> Res<()> {
        let shape_error = |s: &mut Self, at: Span| {
            let d = Diagnostic::error("a rule returns `(value, closure)`", at).with_note(
                "the value is the function's result; the closure is its pullback (reverse) or pushforward (forward)",
            );
            Err(s.error(d))
        };
        let Some(e) = value else { return shape_error(self, span) };
        let ExprKind::Tuple(items) = &e.kind else { return shape_error(self, e.span) };
        let [v, c] = &items[..] else { return shape_error(self, e.span) };
        let Some(body) = self.rule.clone() else { return Err(Reported) };
        let v: Typed = self.expr(v)?;
        self.expect_type(v, body.value_ty, items[0].span, "the rule's value")?;
        let Some(callable) = self.callable_expr(c, None)? else {
            let d = Diagnostic::error("the second element of a rule's result must be a closure", c.span);
            return Err(self.error(d));
        };
        let CallableKind::Closure(id) = callable.kind else {
            let d = Diagnostic::error("the second element of a rule's result must be a closure", c.span)
                .with_note("write it in place: `|dy: f64| ..`");
            return Err(self.error(d));
        };
        if let Some(first) = body.closure {
            if first != id {
                let d = Diagnostic::error("every `return` of a rule must give the same closure", c.span)
                    .with_note("compute what differs before one closure, and capture it");
                return Err(self.error(d));
            }
        }
        let env = callable.env;
        let mut items = vec![v.ty];
        items.extend(env.map(|e| self.f.value_type(e)));
        let ty = self.types.intern(Type::Tuple(items));
        if let Some(prev) = self.f.ret {
            if prev != ty {
                return Err(Reported);
            }
        }
        self.f.ret = Some(ty);
        if let Some(b) = self.rule.as_mut() {
            b.closure = Some(id);
        }
        let mut vals = vec![v.v];
        vals.extend(env);
        let t = self.emit(Op::TupleNew, vals, ty, span);
        self.terminate(Terminator::Return(Some(t.v)), span);
        Ok(())
    }
}

/// The hand-written rules whose function may write memory it was given, which a rule
/// cannot undo: one diagnostic each.
pub(crate) fn check_rules_do_not_write(
    module: &mcir_ir::Module,
    rules: &[(CustomRule, Span)],
    diags: &mut Vec<Diagnostic>,
) {
    let writes = mcir_ir::effects::argument_writes(module);
    for (rule, span) in rules {
        let Some(Some(at)) = writes.get(rule.func.index()) else { continue };
        let name = &module.funcs[rule.func].name;
        let d = Diagnostic::error(
            format!("`{name}` has a hand-written rule, so it must not change its arguments"),
            *span,
        )
        .with_secondary(
            Span::new(at.start as usize, at.end as usize),
            "it may write memory it was given here",
        )
        .with_note("a rule cannot undo such a change; remove the rule, or make the function work on a copy");
        diags.push(d);
    }
}

/// Reports every `#[checkpoint]` loop that may write memory from outside it: its reverse
/// pass recomputes steps from saved states, which such a write would have changed.
pub(crate) fn check_checkpoints_do_not_write(
    module: &mcir_ir::Module,
    loops: &[crate::checkpoint::CheckpointLoop],
    diags: &mut Vec<Diagnostic>,
) {
    if loops.is_empty() {
        return;
    }
    for l in loops {
        let chain = mcir_ir::effects::argument_write_chain(module, l.steps);
        let Some(at) = chain.first() else { continue };
        let mut d = Diagnostic::error(
            "a `#[checkpoint]` loop must not write memory from outside it",
            Span::new(at.start as usize, at.end as usize),
        )
        .with_secondary(l.span, "the loop is checkpointed here");
        // A write in a function the loop calls: where it is.
        if let Some(write) = chain.last().filter(|_| chain.len() > 1) {
            d = d.with_secondary(Span::new(write.start as usize, write.end as usize), "the call writes here");
        }
        let d = d
        .with_note("its reverse pass recomputes steps from saved states; keep the state the loop updates in variables (`x = ..`), or allocate the arrays it writes inside it");
        diags.push(d);
    }
}
