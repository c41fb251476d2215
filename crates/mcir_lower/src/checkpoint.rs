//! `#[checkpoint]` loops: a loop whose reverse pass recomputes its steps from a few saved
//! states instead of keeping every step's values, so that its memory grows with the
//! logarithm of its trip count.
//!
//! `#[checkpoint] for i in a..b { body }` becomes four functions and two calls:
//!
//! - `f$checkpoint$budget(lo, hi) -> (s, t, u)` picks the budget of the loop's steps:
//!   `s` saved states and the fewest repetitions `t` for which revolve's binomial bound
//!   `u = C(s + t, t)` covers `n` in units of [`SEGMENT`] steps;
//! - `f$checkpoint$steps(env, lo, hi, c..) -> (c..)` runs `body` for `i in lo..hi` on the
//!   carried variables `c` (the variables declared before the loop that it assigns);
//!   `env` holds what the body reads from outside, as a closure's environment does;
//! - `f$checkpoint$split(env, lo, hi, s, t, u, c..)` runs revolve's binomial chunks (the
//!   `j`-th of `C(s - j + t - 1, t - 1)` units, with a budget of `s - j` states and `t - 1`
//!   repetitions) through `f$checkpoint` while more than one unit remains, then the rest
//!   directly;
//! - `f$checkpoint` calls `f$checkpoint$split` and has a `checkpoint` rule
//!   (`mcir_ir::RuleKind::Checkpoint`): its forward pass runs the primal and keeps only
//!   its arguments, and its reverse pass runs the derived forward pass of
//!   `f$checkpoint$split` again from them before reversing it.
//!
//! Reversing a range of `n` steps thus keeps at most `s` states (logarithmic in `n`)
//! and runs each step at most `t + 1` times forward, and at most [`SEGMENT`] steps
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

/// Saved states allowed per bit of the trip count in units of [`SEGMENT`] steps: the
/// memory bound, `SNAPSHOTS_PER_BIT * (log2(n / SEGMENT) + 2)` states.
pub(crate) const SNAPSHOTS_PER_BIT: i64 = 4;

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
        let (id, steps_name, steps_id, split_name, split_id, entry_name, entry_id, budget_name, budget_id) = {
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
            let budget_name = ctx.unique_name(&format!("{entry_name}$budget"));
            let budget_id = ctx.new_id();
            let steps_name = ctx.unique_name(&format!("{entry_name}$steps"));
            let steps_id = ctx.new_id();
            (id, steps_name, steps_id, split_name, split_id, entry_name, entry_id, budget_name, budget_id)
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
        let mut fparams = steps.blocks[steps.entry()]
            .params
            .iter()
            .map(|&p| (steps.values[p].name.clone(), steps.value_type(p)))
            .collect::<Vec<_>>();
        let has_env = env.is_some();
        // The checkpointed function and the split take the budget after the range.
        let at = usize::from(has_env) + 2;
        for (k, budget) in ["$states", "$repetitions", "$units"].into_iter().enumerate() {
            fparams.insert(at + k, (Some(budget.to_string()), TypeTable::I64));
        }
        let budget = budget_function(&budget_name, sp, &mut self.types);
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
            ctx.done.push((budget_id, budget));
            ctx.done.push((entry_id, entry));
            ctx.checkpoints.push(CheckpointLoop {
                rule: CustomRule { func: entry_id, kind: RuleKind::Checkpoint { inner: split_id } },
                steps: steps_id,
                span: mark,
            });
        }

        // The loop itself: its budget, then one call.
        let budget_ty = self.types.intern(Type::Tuple(vec![TypeTable::I64; 3]));
        let budget = self.emit(Op::Call(budget_id), vec![a.v, b.v], budget_ty, span);
        let mut args: Vec<Value> = env.into_iter().collect();
        args.push(a.v);
        args.push(b.v);
        for k in 0..3 {
            args.push(self.emit(Op::TupleGet(k), vec![budget.v], TypeTable::I64, span).v);
        }
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

/// A small builder of straight-line IR, for the functions this module makes by hand.
struct Build<'f> {
    f: &'f mut Function,
    block: mcir_ir::Block,
    sp: mcir_ir::Span,
}

impl Build<'_> {
    fn op(&mut self, op: Op, args: Vec<Value>, ty: TypeId) -> Value {
        let fallback = args.first().copied().unwrap_or(<Value as mcir_ir::entity::EntityRef>::new(0));
        self.f.push_inst(self.block, op, args, Some(ty), self.sp).unwrap_or(fallback)
    }
    fn int(&mut self, c: i64) -> Value {
        self.op(Op::IConst(c), vec![], TypeTable::I64)
    }
    fn float(&mut self, c: f64) -> Value {
        self.op(Op::FConst(c), vec![], TypeTable::F64)
    }
    fn ibin(&mut self, op: IBinOp, a: Value, b: Value) -> Value {
        self.op(Op::IBinary(op), vec![a, b], TypeTable::I64)
    }
    fn fbin(&mut self, op: mcir_ir::FBinOp, a: Value, b: Value) -> Value {
        self.op(Op::FBinary(op), vec![a, b], TypeTable::F64)
    }
    fn icmp(&mut self, op: CmpOp, a: Value, b: Value) -> Value {
        self.op(Op::ICmp(op), vec![a, b], TypeTable::BOOL)
    }
    fn itof(&mut self, a: Value) -> Value {
        self.op(Op::IToF, vec![a], TypeTable::F64)
    }
    fn jump(&mut self, to: mcir_ir::Block, args: Vec<Value>) {
        self.f.set_terminator(self.block, Terminator::Jump(BlockCall { block: to, args }), self.sp);
    }
    fn branch(&mut self, cond: Value, then_block: mcir_ir::Block, else_block: mcir_ir::Block) {
        let term = Terminator::Branch {
            cond,
            then_dest: BlockCall { block: then_block, args: Vec::new() },
            else_dest: BlockCall { block: else_block, args: Vec::new() },
        };
        self.f.set_terminator(self.block, term, self.sp);
    }
}

/// `f$checkpoint$budget(lo, hi) -> (s, t, total)`: the budget of a checkpointed loop of
/// `n = hi - lo` steps, in units of [`SEGMENT`] steps (`u = ceil(n / SEGMENT)`, at least 1): `s =
/// SNAPSHOTS_PER_BIT * (bits(u) + 1)` saved states, and the fewest repetitions `t` for
/// which `total = C(s + t, t)`, the number of units `s` states and `t` repetitions can
/// reverse (revolve's binomial bound), reaches `u`.
fn budget_function(name: &str, sp: mcir_ir::Span, types: &mut TypeTable) -> Function {
    use mcir_ir::FBinOp;
    let i64t = TypeTable::I64;
    let ret = types.intern(Type::Tuple(vec![i64t, i64t, i64t]));
    let mut f = Function::new(name, &[(Some("lo".into()), i64t), (Some("hi".into()), i64t)], Some(ret));
    f.span = sp;
    let (lo, hi) = (f.param_values()[0], f.param_values()[1]);
    let entry = f.entry();
    let steps = f.add_block();
    let bits = f.add_block();
    let v = f.add_block_param(bits, i64t, Some("v".into()));
    let k = f.add_block_param(bits, i64t, Some("k".into()));
    let units = f.add_block_param(bits, i64t, Some("u".into()));
    let halve = f.add_block();
    let counted = f.add_block();
    let reps = f.add_block();
    let t = f.add_block_param(reps, i64t, Some("t".into()));
    let c = f.add_block_param(reps, TypeTable::F64, Some("c".into()));
    let more = f.add_block();
    let done = f.add_block();
    let mut b = Build { f: &mut f, block: entry, sp };
    // An empty range (`hi <= lo`, where `hi - lo` might overflow) is one unit.
    let some = b.icmp(CmpOp::Gt, hi, lo);
    let one = b.int(1);
    let zero = b.int(0);
    let term = Terminator::Branch {
        cond: some,
        then_dest: BlockCall { block: steps, args: Vec::new() },
        else_dest: BlockCall { block: bits, args: vec![one, zero, one] },
    };
    b.f.set_terminator(entry, term, sp);
    // u = max(ceil(n / SEGMENT), 1).
    b.block = steps;
    let n = b.ibin(IBinOp::Sub, hi, lo);
    let seg = b.int(SEGMENT);
    let whole = b.ibin(IBinOp::Div, n, seg);
    let rest = b.ibin(IBinOp::Rem, n, seg);
    let zero = b.int(0);
    let one = b.int(1);
    let has_rest = b.icmp(CmpOp::Gt, rest, zero);
    let extra = b.op(Op::Select, vec![has_rest, one, zero], i64t);
    let u = b.ibin(IBinOp::Add, whole, extra);
    let positive = b.icmp(CmpOp::Gt, u, zero);
    let u = b.op(Op::Select, vec![positive, u, one], i64t);
    b.jump(bits, vec![u, zero, u]);
    b.block = bits;
    let zero = b.int(0);
    let left = b.icmp(CmpOp::Gt, v, zero);
    b.branch(left, halve, counted);
    b.block = halve;
    let two = b.int(2);
    let one = b.int(1);
    let v2 = b.ibin(IBinOp::Div, v, two);
    let k2 = b.ibin(IBinOp::Add, k, one);
    b.jump(bits, vec![v2, k2, units]);
    b.block = counted;
    let one = b.int(1);
    let per_bit = b.int(SNAPSHOTS_PER_BIT);
    let k1 = b.ibin(IBinOp::Add, k, one);
    let snaps = b.ibin(IBinOp::Mul, per_bit, k1);
    let zero = b.int(0);
    let first = b.float(1.0);
    b.jump(reps, vec![zero, first]);
    b.block = reps;
    let uf = b.itof(units);
    let short = b.op(Op::FCmp(CmpOp::Lt), vec![c, uf], TypeTable::BOOL);
    b.branch(short, more, done);
    // C(s + t + 1, t + 1) = C(s + t, t) (s + t + 1) / (t + 1).
    b.block = more;
    let one = b.int(1);
    let t1 = b.ibin(IBinOp::Add, t, one);
    let st = b.ibin(IBinOp::Add, snaps, t1);
    let stf = b.itof(st);
    let t1f = b.itof(t1);
    let grown = b.fbin(FBinOp::Mul, c, stf);
    let c1 = b.fbin(FBinOp::Div, grown, t1f);
    b.jump(reps, vec![t1, c1]);
    b.block = done;
    let total = b.op(Op::FToI, vec![c], i64t);
    let out = b.op(Op::TupleNew, vec![snaps, t, total], ret);
    b.f.set_terminator(done, Terminator::Return(Some(out)), sp);
    f
}

/// `f$checkpoint$split(env, lo, hi, s, t, total, c..)`: reverses `lo..hi` within a
/// budget of `s` saved states and `t` repetitions, of which `total = C(s + t, t)` units of
/// [`SEGMENT`] steps is the most it can cover. While more than one unit remains and the
/// budget allows, the next chunk — as many steps as a budget of one state fewer and one
/// repetition fewer covers, `C(s - j + t - 1, t - 1)` units for the `j`-th — goes through
/// the checkpointed `entry` with that budget; the rest runs directly. The chunks are
/// revolve's binomial schedule, taken greedily from the largest. (A loop rather than
/// recursion, so that no tape holds a tape of its own type.)
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
    use mcir_ir::FBinOp;
    let mut f = Function::new(name, params, Some(ret));
    f.span = sp;
    let b0 = f.entry();
    let pv = f.param_values().to_vec();
    let k = usize::from(has_env);
    let (env, lo, hi) = (pv[..k].to_vec(), pv[k], pv[k + 1]);
    let (snaps, reps, total) = (pv[k + 2], pv[k + 3], pv[k + 4]);
    let carried = pv[k + 5..].to_vec();
    let i64t = TypeTable::I64;
    let header = f.add_block();
    let l = f.add_block_param(header, i64t, Some("lo".into()));
    let left = f.add_block_param(header, i64t, Some("states".into()));
    let units = f.add_block_param(header, TypeTable::F64, Some("units".into()));
    let cs: Vec<Value> = carried
        .iter()
        .map(|&c| {
            let (ty, name) = (f.value_type(c), f.values[c].name.clone());
            f.add_block_param(header, ty, name)
        })
        .collect();
    let direct = f.add_block();
    let sized = f.add_block();
    let budgeted = f.add_block();
    let chunk = f.add_block();
    let mut b = Build { f: &mut f, block: b0, sp };
    // The first chunk's units, C(s + t - 2, t - 1) = total t / (s + t) * s / (s + t - 1).
    let totalf = b.itof(total);
    let sf = b.itof(snaps);
    let tf = b.itof(reps);
    let st = b.fbin(FBinOp::Add, sf, tf);
    let one_f = b.float(1.0);
    let st1 = b.fbin(FBinOp::Sub, st, one_f);
    let a = b.fbin(FBinOp::Mul, totalf, tf);
    let a = b.fbin(FBinOp::Div, a, st);
    let a = b.fbin(FBinOp::Mul, a, sf);
    let first = b.fbin(FBinOp::Div, a, st1);
    // Binomial coefficients are integers: rounding keeps the recurrences exact.
    let first = b.op(Op::FUnary(mcir_ir::FUnOp::Round), vec![first], TypeTable::F64);
    let mut args = vec![lo, snaps, first];
    args.extend(carried.iter().copied());
    b.jump(header, args);
    // Directly when the range is empty (`hi - lo` might overflow), at most one unit is
    // left, or the budget is spent.
    b.block = header;
    let empty = b.icmp(CmpOp::Le, hi, l);
    b.branch(empty, direct, sized);
    b.block = sized;
    let n = b.ibin(IBinOp::Sub, hi, l);
    let seg = b.int(SEGMENT);
    let small = b.icmp(CmpOp::Le, n, seg);
    b.branch(small, direct, budgeted);
    b.block = budgeted;
    let zero = b.int(0);
    let no_states = b.icmp(CmpOp::Le, left, zero);
    let no_reps = b.icmp(CmpOp::Le, reps, zero);
    let either = b.op(Op::Select, vec![no_states, no_states, no_reps], TypeTable::BOOL);
    b.branch(either, direct, chunk);
    b.block = direct;
    let mut args = env.clone();
    args.extend([l, hi]);
    args.extend(cs.iter().copied());
    let r = b.op(Op::Call(steps), args, ret);
    b.f.set_terminator(direct, Terminator::Return(Some(r)), sp);
    // This chunk: min(units * SEGMENT, n) steps with a budget of left - 1 states, t - 1
    // repetitions and `units` units.
    b.block = chunk;
    let segf = b.float(SEGMENT as f64);
    let nf = b.itof(n);
    let wanted = b.fbin(FBinOp::Mul, units, segf);
    let take = b.fbin(FBinOp::Min, wanted, nf);
    let take = b.op(Op::FToI, vec![take], i64t);
    let mid = b.ibin(IBinOp::Add, l, take);
    let one = b.int(1);
    let left1 = b.ibin(IBinOp::Sub, left, one);
    let reps1 = b.ibin(IBinOp::Sub, reps, one);
    let units_i = b.op(Op::FToI, vec![units], i64t);
    let mut args = env.clone();
    args.extend([l, mid, left1, reps1, units_i]);
    args.extend(cs.iter().copied());
    let out = b.op(Op::Call(entry), args, ret);
    // The next chunk's units: C(x - 1 + t - 1, t - 1) = C(x + t - 1, t - 1) x / (x + t - 1)
    // for x = left - 1 states.
    let xf = b.itof(left1);
    let tf = b.itof(reps);
    let x_t = b.fbin(FBinOp::Add, xf, tf);
    let one_f = b.float(1.0);
    let x_t1 = b.fbin(FBinOp::Sub, x_t, one_f);
    let next_units = b.fbin(FBinOp::Mul, units, xf);
    let next_units = b.fbin(FBinOp::Div, next_units, x_t1);
    let next_units = b.op(Op::FUnary(mcir_ir::FUnOp::Round), vec![next_units], TypeTable::F64);
    let mut next = vec![mid, left1, next_units];
    if cs.len() == 1 {
        next.push(out);
    } else {
        for (j, &c) in cs.iter().enumerate() {
            let ty = b.f.value_type(c);
            next.push(b.op(Op::TupleGet(j as u32), vec![out], ty));
        }
    }
    b.jump(header, next);
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
