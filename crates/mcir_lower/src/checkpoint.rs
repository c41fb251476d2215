//! `#[checkpoint]` loops: a loop whose reverse pass recomputes its steps from a few saved
//! states instead of keeping every step's values, so that its memory grows with the
//! logarithm of its trip count.
//!
//! `#[checkpoint] for i in a..b { body }` becomes three functions and a call:
//!
//! - `f$checkpoint$steps(env, lo, hi, c..) -> (c..)` runs `body` for `i in lo..hi` on the
//!   carried variables `c` (the variables declared before the loop that it assigns);
//!   `env` holds what the body reads from outside, as a closure's environment does;
//! - `f$checkpoint$split(env, lo, hi, c..)` runs the first half of the remaining steps
//!   through `f$checkpoint` while more than [`SEGMENT`] remain, then the rest directly;
//! - `f$checkpoint` calls `f$checkpoint$split` and has a `checkpoint` rule
//!   (`mcir_ir::RuleKind::Checkpoint`): its forward pass runs the primal and keeps only
//!   its arguments, and its reverse pass runs the derived forward pass of
//!   `f$checkpoint$split` again from them before reversing it.
//!
//! Reversing a range of `n` steps thus runs its primal forward once and keeps the state
//! at the start of each first half along one path of halvings (about `log2(n / SEGMENT)`
//! states), and the recursion reverses each first half the same way: the steps are
//! recomputed about `log2(n / SEGMENT) / 2` times on average, and at most `SEGMENT` steps
//! are taped at once. Because the reverse pass recomputes from saved arguments, the loop
//! may read anything but must not write memory that outlives one step, and it carries
//! only value-identified data (numbers, booleans, tuples and immutable structs of them).

use crate::callable::{free_names_block, ClosureDef, FnSig, PType};
use crate::stmt::{FnLower, Typed};
use crate::Res;
use mcir_ir::{
    BlockCall, CmpOp, CustomRule, FuncId, Function, IBinOp, Op, RuleKind, Terminator, Type, TypeId,
    TypeTable, Value,
};
use mcir_syntax::ast::{self, ClosureBody, Expr, ExprKind, Span, Stmt, StmtKind};
use mcir_syntax::Diagnostic;
use std::rc::Rc;

/// How many steps a checkpointed loop runs, and tapes, without splitting its range.
pub(crate) const SEGMENT: i64 = 1024;

/// The fraction (one in `PARTS`) of the remaining steps that each checkpointed call runs.
pub(crate) const PARTS: i64 = 8;

/// A checkpointed loop's rule, recorded until the module is assembled.
#[derive(Clone, Debug)]
pub(crate) struct CheckpointLoop {
    pub rule: CustomRule,
    /// The function running the loop's steps.
    pub steps: FuncId,
    /// The `#[checkpoint]` attribute.
    pub span: Span,
}

impl<'g> FnLower<'g> {
    /// Lowers `#[checkpoint] for var in start..end { body }` (`mark` is the attribute).
    pub(crate) fn checkpointed_for(
        &mut self,
        var: &ast::Ident,
        start: &Expr,
        end: &Expr,
        body: &ast::Block,
        span: Span,
        mark: Span,
    ) -> Res<()> {
        if let Some((what, at)) = escaping_jump(&body.stmts, false) {
            let msg = format!("a `#[checkpoint]` loop cannot `{what}` out of itself");
            return Err(self.error(
                Diagnostic::error(msg, at).with_secondary(mark, "the loop is checkpointed here").with_note(
                    "its steps are recomputed from saved states, so it must run from start to end",
                ),
            ));
        }
        let carried = self.carried_vars(body);
        if carried.is_empty() {
            return Err(self.error(
                Diagnostic::error("this `#[checkpoint]` loop assigns no variable declared before it", mark)
                    .with_note("a checkpointed loop saves and recomputes the variables it updates (`x = ..`); without one it computes nothing"),
            ));
        }
        let mut carried_tys = Vec::new();
        for &c in &carried {
            let ty = self.f.value_type(self.var_value(c));
            if !value_identified(&self.types, ty) {
                let msg = format!(
                    "a `#[checkpoint]` loop can only carry numbers, booleans, and tuples or immutable structs of them; `{}` is {}",
                    self.var_name(c),
                    self.types.display(ty)
                );
                return Err(self.error(Diagnostic::error(msg, mark).with_note(
                    "the loop may read arrays, but each step's state must be values: its reverse pass recomputes steps from saved states",
                )));
            }
            carried_tys.push(ty);
        }
        if self.checking {
            // A generic body is only checked: the loop as it would run suffices.
            return self.for_stmt(var, start, end, body, span, None);
        }
        let (a, b) = self.range_bounds(start, end)?;
        let carried_names: Vec<String> = carried.iter().map(|&c| self.var_name(c).to_string()).collect();
        let mut names = Vec::new();
        free_names_block(body, &mut names);
        let mut own: Vec<&str> = carried_names.iter().map(|s| s.as_str()).collect();
        own.push(&var.name);
        let (captures, env, env_ty) = self.capture(names, &own, mark)?;

        // The steps lo..hi as a closure taking the carried variables.
        let name_expr = |n: &str| Expr::new(ExprKind::Name(n.to_string()), mark);
        let ident = |n: &str| ast::Ident { name: n.to_string(), span: mark };
        let unit_type = ast::TypeExpr::Tuple(Vec::new(), mark);
        let mut params = vec![(ident("$lo"), unit_type.clone()), (ident("$hi"), unit_type.clone())];
        let mut stmts = Vec::new();
        for n in &carried_names {
            params.push((ident(n), unit_type.clone()));
            let kind = StmtKind::Let { name: ident(n), mutable: true, ty: None, value: name_expr(n) };
            stmts.push(Stmt { kind, span: mark });
        }
        let kind = StmtKind::For {
            var: var.clone(),
            start: name_expr("$lo"),
            end: name_expr("$hi"),
            body: body.clone(),
            checkpoint: None,
        };
        stmts.push(Stmt { kind, span });
        let result = if carried_names.len() == 1 {
            name_expr(&carried_names[0])
        } else {
            Expr::new(ExprKind::Tuple(carried_names.iter().map(|n| name_expr(n)).collect()), mark)
        };
        stmts.push(Stmt { kind: StmtKind::Return(Some(result)), span: mark });
        let closure =
            ast::Closure { params, body: ClosureBody::Block(ast::Block { stmts, span: body.span }) };
        let mut sig_params = vec![PType::Val(TypeTable::I64), PType::Val(TypeTable::I64)];
        sig_params.extend(carried_tys.iter().map(|&t| PType::Val(t)));

        let owner = self.f.name.clone();
        let (id, steps_name, steps_id, split_name, split_id, entry_name, entry_id) = {
            let mut ctx = self.ctx.borrow_mut();
            ctx.closures.push(ClosureDef {
                name: format!("{owner}$checkpoint"),
                ast: Rc::new(closure),
                span: mark,
                captures,
                env_ty,
                sig: FnSig { params: sig_params, ret: None },
            });
            let id = ctx.closures.len() - 1;
            let entry_name = ctx.unique_name(&format!("{owner}$checkpoint"));
            let entry_id = ctx.new_id();
            let split_name = ctx.unique_name(&format!("{entry_name}$split"));
            let split_id = ctx.new_id();
            let steps_name = ctx.unique_name(&format!("{entry_name}$steps"));
            let steps_id = ctx.new_id();
            (id, steps_name, steps_id, split_name, split_id, entry_name, entry_id)
        };
        let (ret, steps) = crate::callable::lower_closure(
            self.g,
            self.ctx,
            &mut self.types,
            &mut self.diags,
            id,
            &[],
            &steps_name,
            false,
        )?;
        let (Some(ret), Some(steps)) = (ret, steps) else {
            return Err(self.error(Diagnostic::error(
                "internal error: a checkpointed loop's steps returned nothing",
                mark,
            )));
        };
        let sp = mcir_ir::Span::new(mark.start, mark.end);
        let fparams = steps.blocks[steps.entry()]
            .params
            .iter()
            .map(|&p| (steps.values[p].name.clone(), steps.value_type(p)))
            .collect::<Vec<_>>();
        let has_env = env.is_some();
        let split = split_function(&split_name, &fparams, ret, has_env, steps_id, entry_id, sp);
        let mut entry = Function::new(&entry_name, &fparams, Some(ret));
        entry.span = sp;
        let e = entry.entry();
        let pv = entry.param_values().to_vec();
        let r = entry.push_inst(e, Op::Call(split_id), pv, Some(ret), sp);
        entry.set_terminator(e, Terminator::Return(r), sp);
        {
            let mut ctx = self.ctx.borrow_mut();
            ctx.done.push((steps_id, steps));
            ctx.done.push((split_id, split));
            ctx.done.push((entry_id, entry));
            ctx.checkpoints.push(CheckpointLoop {
                rule: CustomRule { func: entry_id, kind: RuleKind::Checkpoint { inner: split_id } },
                steps: steps_id,
                span: mark,
            });
        }

        // The loop itself: one call.
        let mut args: Vec<Value> = env.into_iter().collect();
        args.push(a.v);
        args.push(b.v);
        args.extend(carried.iter().map(|&c| self.var_value(c)));
        let out = self.emit(Op::Call(entry_id), args, ret, span);
        for (j, &c) in carried.iter().enumerate() {
            let v = if carried.len() == 1 {
                out
            } else {
                self.emit(Op::TupleGet(j as u32), vec![out.v], carried_tys[j], span)
            };
            self.set_var_value(c, v.v);
        }
        Ok(())
    }

    /// The bounds of `start..end`, which must be `i64`s.
    pub(crate) fn range_bounds(&mut self, start: &Expr, end: &Expr) -> Res<(Typed, Typed)> {
        let a = self.expr(start)?;
        let b = self.expr(end)?;
        for (e, t) in [(start, a), (end, b)] {
            if t.ty != TypeTable::I64 {
                let msg = format!("a range bound must be an i64, not {}", self.types.display(t.ty));
                return Err(self.error(
                    Diagnostic::error(msg, e.span).with_note("convert with `i64(x)` if you mean to truncate"),
                ));
            }
        }
        Ok((a, b))
    }
}

/// `f$checkpoint$split(env, lo, hi, c..)`: while more than [`SEGMENT`] steps remain,
/// the first half of them through the checkpointed `entry`; then the rest directly. (A
/// loop rather than recursion, so that no tape holds a tape of its own type.)
#[allow(clippy::too_many_arguments)]
fn split_function(
    name: &str,
    params: &[(Option<String>, TypeId)],
    ret: TypeId,
    has_env: bool,
    steps: FuncId,
    entry: FuncId,
    sp: mcir_ir::Span,
) -> Function {
    let mut f = Function::new(name, params, Some(ret));
    f.span = sp;
    let b0 = f.entry();
    let pv = f.param_values().to_vec();
    let k = usize::from(has_env);
    let (env, lo, hi, carried) = (pv[..k].to_vec(), pv[k], pv[k + 1], pv[k + 2..].to_vec());
    let i64t = Some(TypeTable::I64);
    let header = f.add_block();
    let l = f.add_block_param(header, TypeTable::I64, Some("lo".into()));
    let cs: Vec<Value> = carried
        .iter()
        .map(|&c| {
            let (ty, name) = (f.value_type(c), f.values[c].name.clone());
            f.add_block_param(header, ty, name)
        })
        .collect();
    let mut args = vec![lo];
    args.extend(carried.iter().copied());
    f.set_terminator(b0, Terminator::Jump(BlockCall { block: header, args }), sp);
    let n = f.push_inst(header, Op::IBinary(IBinOp::Sub), vec![hi, l], i64t, sp).unwrap_or(lo);
    let seg = f.push_inst(header, Op::IConst(SEGMENT), vec![], i64t, sp).unwrap_or(lo);
    let small =
        f.push_inst(header, Op::ICmp(CmpOp::Le), vec![n, seg], Some(TypeTable::BOOL), sp).unwrap_or(lo);
    let direct = f.add_block();
    let halve = f.add_block();
    f.set_terminator(
        header,
        Terminator::Branch {
            cond: small,
            then_dest: BlockCall { block: direct, args: Vec::new() },
            else_dest: BlockCall { block: halve, args: Vec::new() },
        },
        sp,
    );
    let mut args = env.clone();
    args.extend([l, hi]);
    args.extend(cs.iter().copied());
    let r = f.push_inst(direct, Op::Call(steps), args, Some(ret), sp);
    f.set_terminator(direct, Terminator::Return(r), sp);
    let parts = f.push_inst(halve, Op::IConst(PARTS), vec![], i64t, sp).unwrap_or(lo);
    let half = f.push_inst(halve, Op::IBinary(IBinOp::Div), vec![n, parts], i64t, sp).unwrap_or(lo);
    let mid = f.push_inst(halve, Op::IBinary(IBinOp::Add), vec![l, half], i64t, sp).unwrap_or(lo);
    let mut args = env.clone();
    args.extend([l, mid]);
    args.extend(cs.iter().copied());
    let first = f.push_inst(halve, Op::Call(entry), args, Some(ret), sp).unwrap_or(lo);
    let mut next = vec![mid];
    if cs.len() == 1 {
        next.push(first);
    } else {
        for (j, &c) in cs.iter().enumerate() {
            let ty = f.value_type(c);
            next.push(f.push_inst(halve, Op::TupleGet(j as u32), vec![first], Some(ty), sp).unwrap_or(lo));
        }
    }
    f.set_terminator(halve, Terminator::Jump(BlockCall { block: header, args: next }), sp);
    f
}

/// Whether `t` holds no address: numbers, booleans, tuples and immutable structs of them.
fn value_identified(types: &TypeTable, t: TypeId) -> bool {
    match types.try_get(t) {
        Some(Type::Scalar(_)) => true,
        Some(Type::Tuple(items)) => items.iter().all(|&i| value_identified(types, i)),
        Some(Type::Struct(sid)) => {
            let def = types.struct_def(*sid);
            !def.mutable && def.fields.iter().all(|&(_, f)| value_identified(types, f))
        }
        _ => false,
    }
}

/// The first `return`, or `break` not inside a nested loop, in `stmts` (`nested`: inside
/// a loop of the body).
fn escaping_jump(stmts: &[Stmt], nested: bool) -> Option<(&'static str, Span)> {
    for s in stmts {
        let found = match &s.kind {
            StmtKind::Return(_) => Some(("return", s.span)),
            StmtKind::Break if !nested => Some(("break", s.span)),
            StmtKind::If { arms, else_block } => arms
                .iter()
                .map(|(_, b)| b)
                .chain(else_block.iter())
                .find_map(|b| escaping_jump(&b.stmts, nested)),
            StmtKind::While { body, .. } | StmtKind::For { body, .. } => escaping_jump(&body.stmts, true),
            StmtKind::Block(b) => escaping_jump(&b.stmts, nested),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}
