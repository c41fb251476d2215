//! Local Jacobians: a rule whose reverse pass is straight-line scalar arithmetic on one
//! result cotangent gets the Jacobian of its step computed by the forward pass and stored
//! on the tape, so that its reverse pass is one multiplication per argument.
//!
//! A reverse pass is linear in the cotangents it is given. When it is one block that
//! only reads its tape record and does `f64` arithmetic, each of its results is
//! `Σ_k J[j][k] · ȳ_k`, where the coefficients `J[j][k]` depend on the record alone. The
//! forward pass can compute them (the reverse pass with the cotangent 1, done
//! symbolically, so that a zero coefficient costs nothing and a constant one is folded
//! and not stored) and store them in place of the record.
//!
//! Why: a step function called in a loop whose result feeds its next call, such as a
//! scalar ODE's integrator step, makes the reverse loop one long dependency chain through
//! the step's adjoint, which cannot start before the forward pass ends. With the
//! Jacobian stored, the reverse step's chain is one multiplication, and the adjoint's
//! arithmetic moves into the forward pass, where it does not wait on the previous step's
//! adjoint and fills the units the primal's own chain leaves idle. With one cotangent the
//! work is the same and the record no larger (it holds one number per argument that has
//! a derivative, at most what the reverse pass read). With two it would be the adjoint's
//! arithmetic twice: a two-state RK4 step's gradient went from 56 to 67 µs that way, so
//! only rules of [`MAX_COTANGENTS`] cotangent take it.

use crate::RuleIds;
use mcir_ir::entity::EntityRef;
use mcir_ir::{FBinOp, FUnOp, Function, Op, Terminator, TypeTable, Value};

/// The most result cotangents a rule may take to have its Jacobian stored (see the
/// module docs for why not two).
const MAX_COTANGENTS: usize = 1;

/// The most values a reverse pass may read from its record for its Jacobian to be stored.
/// The forward pass then computes the reverse pass's arithmetic after its own, so each
/// value read stays live from where it is made to where the adjoint reaches it: in a
/// long straight-line function (thousands of statements, with a call to `sin` on every
/// line, across which nothing stays in a register) register allocation grows with the
/// number of values live at each call, and the compile time with its square. Such a
/// function keeps its record, which it fills as it goes.
const MAX_RECORD_FIELDS: usize = 256;

/// One coefficient of a linear form: symbolic when it is zero (so that it costs nothing,
/// as a zero adjoint does) and folded when it is a constant (so that it is not stored).
#[derive(Copy, Clone, Debug, PartialEq)]
enum Coef {
    Zero,
    Const(f64),
    /// A value of the forward pass.
    Of(Value),
    /// The negation of a value of the forward pass: kept symbolic, so that the negations
    /// of an adjoint (`ā -= ȳ · b` is `ā += (-ȳ) · b`) cost nothing until a coefficient
    /// is stored, where one negation serves the whole chain. Negation is exact, so the
    /// coefficients are those the negations in place would give.
    Neg(Value),
}

const ONE: Coef = Coef::Const(1.0);

/// What a value of the reverse pass is in terms of the forward pass.
#[derive(Clone, Debug)]
enum Form {
    /// The tape record itself.
    Tape,
    /// A value that depends on the record only: this value of the forward pass.
    Primal(Value),
    /// A linear combination of the cotangents, one coefficient per cotangent.
    Linear(Vec<Coef>),
}

/// `(fwd, rev)` with the Jacobian of `rule`'s reverse pass stored on the tape in place
/// of the values it reads, when the rule qualifies (see the module docs); otherwise the
/// passes unchanged.
pub(crate) fn store_local_jacobian(
    types: &mut TypeTable,
    rule: &RuleIds,
    fwd: Function,
    rev: Function,
) -> (Function, Function) {
    match jacobian_passes(types, rule, &fwd, &rev) {
        Some((new_fwd, new_rev, fields)) => {
            types.struct_def_mut(rule.tape_sid).fields = fields;
            // The reverse pass recomputes what it can from values it reads; moved into
            // the forward pass, those recomputations repeat what the forward pass did.
            let merged = mcir_ir::cse::eliminate_common_subexpressions(new_fwd, types);
            (crate::dce::remove_dead_code(merged), new_rev)
        }
        None => (fwd, rev),
    }
}

/// The passes computing and reading the Jacobian, with the tape's new fields.
type JacobianPasses = (Function, Function, Vec<(String, mcir_ir::TypeId)>);

fn jacobian_passes(
    types: &TypeTable,
    rule: &RuleIds,
    fwd: &Function,
    rev: &Function,
) -> Option<JacobianPasses> {
    if fwd.blocks.len() != 1 || rev.blocks.len() != 1 {
        return None;
    }
    let rev_block = &rev.blocks[rev.entry()];
    let Terminator::Return(Some(result)) = rev_block.term else { return None };
    let params = rev.param_values();
    let (&tape, cotangents) = params.split_first()?;
    if cotangents.is_empty()
        || cotangents.len() > MAX_COTANGENTS
        || cotangents.iter().any(|&c| rev.value_type(c) != TypeTable::F64)
    {
        return None;
    }
    let m = cotangents.len();
    // The record the forward pass builds, whose fields the reverse pass reads.
    let mut out = fwd.clone();
    let block = out.entry();
    let record_at =
        out.blocks[block].insts.iter().position(|&i| out.insts[i].op == Op::StructNew(rule.tape_sid))?;
    let record_inst = out.blocks[block].insts[record_at];
    let fields = out.insts[record_inst].args.clone();
    if fields.len() > MAX_RECORD_FIELDS {
        return None;
    }
    let first_new = out.blocks[block].insts.len();
    let span = out.insts[record_inst].span;

    let mut forms: Vec<Option<Form>> = vec![None; rev.values.len()];
    forms[tape.index()] = Some(Form::Tape);
    for (k, &c) in cotangents.iter().enumerate() {
        let mut coefs = vec![Coef::Zero; m];
        coefs[k] = ONE;
        forms[c.index()] = Some(Form::Linear(coefs));
    }
    let mut lin = Lin { f: &mut out, block, span, record: fields.clone() };
    for &inst in &rev_block.insts {
        let data = &rev.insts[inst];
        if data.result == Some(result) && data.op == Op::TupleNew {
            continue;
        }
        let args: Vec<&Form> = data.args.iter().map(|a| forms[a.index()].as_ref()).collect::<Option<_>>()?;
        let form = lin.form(types, &data.op, &args, data.result.map(|r| rev.value_type(r)))?;
        if let Some(r) = data.result {
            forms[r.index()] = Some(form);
        }
    }
    // The results: one linear form each, with every coefficient's sign applied.
    let results: Vec<Vec<Coef>> = match single_value_def(rev, result) {
        Some((Op::TupleNew, items)) => {
            items.iter().map(|v| lin.as_linear(forms[v.index()].as_ref()?, m)).collect::<Option<_>>()?
        }
        _ => vec![lin.as_linear(forms[result.index()].as_ref()?, m)?],
    };
    let results: Vec<Vec<Coef>> = results
        .into_iter()
        .map(|cs| {
            cs.into_iter()
                .map(|c| match c {
                    Coef::Neg(_) => Some(Coef::Of(lin.value(c)?)),
                    c => Some(c),
                })
                .collect::<Option<_>>()
        })
        .collect::<Option<_>>()?;
    let stored: Vec<(usize, usize, Value)> = results
        .iter()
        .enumerate()
        .flat_map(|(j, cs)| {
            cs.iter().enumerate().filter_map(move |(k, c)| match c {
                Coef::Of(v) => Some((j, k, *v)),
                _ => None,
            })
        })
        .collect();
    if stored.len() > fields.len() {
        return None;
    }
    // The record now holds the coefficients, computed just before it is built.
    let new_insts = out.blocks[block].insts.split_off(first_new);
    let tail = out.blocks[block].insts.split_off(record_at);
    out.blocks[block].insts.extend(new_insts);
    out.blocks[block].insts.extend(tail);
    out.insts[record_inst].args = stored.iter().map(|s| s.2).collect();
    let new_fields: Vec<(String, mcir_ir::TypeId)> =
        stored.iter().map(|&(j, k, _)| (format!("d{j}_{k}"), TypeTable::F64)).collect();

    // The reverse pass: each result is the sum of its coefficients times the cotangents.
    let param_types: Vec<(Option<String>, mcir_ir::TypeId)> =
        params.iter().map(|&p| (rev.values[p].name.clone(), rev.value_type(p))).collect();
    let mut new_rev = Function::new(&rev.name, &param_types, rev.ret);
    new_rev.span = rev.span;
    let entry = new_rev.entry();
    let (tape, cotangents) = {
        let ps = new_rev.param_values().to_vec();
        (ps[0], ps[1..].to_vec())
    };
    let rspan = rev_block.term_span;
    let mut coef_values = Vec::new();
    for (i, _) in stored.iter().enumerate() {
        let v = new_rev.push_inst(
            entry,
            Op::StructGet(rule.tape_sid, i as u32),
            vec![tape],
            Some(TypeTable::F64),
            rspan,
        )?;
        coef_values.push(v);
    }
    let mut items = Vec::new();
    let mut next = 0;
    for cs in &results {
        let mut sum: Option<Value> = None;
        for (k, c) in cs.iter().enumerate() {
            let factor = match *c {
                Coef::Zero => continue,
                Coef::Const(1.0) => None,
                Coef::Const(x) => {
                    Some(new_rev.push_inst(entry, Op::FConst(x), vec![], Some(TypeTable::F64), rspan)?)
                }
                Coef::Of(_) | Coef::Neg(_) => {
                    next += 1;
                    Some(coef_values[next - 1])
                }
            };
            let term = match factor {
                None => cotangents[k],
                Some(j) => new_rev.push_inst(
                    entry,
                    Op::FBinary(FBinOp::Mul),
                    vec![j, cotangents[k]],
                    Some(TypeTable::F64),
                    rspan,
                )?,
            };
            sum = Some(match sum {
                None => term,
                Some(s) => new_rev.push_inst(
                    entry,
                    Op::FBinary(FBinOp::Add),
                    vec![s, term],
                    Some(TypeTable::F64),
                    rspan,
                )?,
            });
        }
        let item = match sum {
            Some(s) => s,
            None => new_rev.push_inst(entry, Op::FConst(0.0), vec![], Some(TypeTable::F64), rspan)?,
        };
        items.push(item);
    }
    let returned = match (single_value_def(rev, result), rev.ret) {
        (Some((Op::TupleNew, _)), Some(ty)) => {
            new_rev.push_inst(entry, Op::TupleNew, items, Some(ty), rspan)?
        }
        _ => *items.first()?,
    };
    new_rev.set_terminator(entry, Terminator::Return(Some(returned)), rspan);
    Some((out, new_rev, new_fields))
}

/// The op and operands of the instruction defining `v`, if an instruction does.
fn single_value_def(f: &Function, v: Value) -> Option<(Op, Vec<Value>)> {
    f.defining(v).map(|d| (d.op.clone(), d.args.clone()))
}

/// The forward pass the coefficients are emitted into.
struct Lin<'a> {
    f: &'a mut Function,
    block: mcir_ir::Block,
    span: mcir_ir::Span,
    /// The operands of the forward pass's tape record: what the reverse pass reads.
    record: Vec<Value>,
}

impl Lin<'_> {
    fn emit(&mut self, op: Op, args: Vec<Value>, ty: mcir_ir::TypeId) -> Option<Value> {
        self.f.push_inst(self.block, op, args, Some(ty), self.span)
    }

    /// The form of the result of `op` on operands of forms `args`, emitting what the
    /// forward pass must compute for it; `None` when the op is not one the reverse pass
    /// may hold for its Jacobian to be stored.
    fn form(
        &mut self,
        types: &TypeTable,
        op: &Op,
        args: &[&Form],
        ty: Option<mcir_ir::TypeId>,
    ) -> Option<Form> {
        let linear = args.iter().any(|a| matches!(a, Form::Linear(_)));
        if !linear {
            return self.primal(types, op, args, ty?);
        }
        let m = args.iter().find_map(|a| match a {
            Form::Linear(c) => Some(c.len()),
            _ => None,
        })?;
        let coefs = match (op, args) {
            (Op::FBinary(FBinOp::Add), [a, b]) => {
                let (a, b) = (self.as_linear(a, m)?, self.as_linear(b, m)?);
                self.zip(&a, &b, |l, x, y| l.add(x, y))?
            }
            (Op::FBinary(FBinOp::Sub), [a, b]) => {
                let (a, b) = (self.as_linear(a, m)?, self.as_linear(b, m)?);
                self.zip(&a, &b, |l, x, y| l.sub(x, y))?
            }
            (Op::FBinary(FBinOp::Mul), [Form::Primal(p), Form::Linear(c)])
            | (Op::FBinary(FBinOp::Mul), [Form::Linear(c), Form::Primal(p)]) => {
                c.iter().map(|&x| self.scale(x, *p)).collect::<Option<_>>()?
            }
            (Op::FBinary(FBinOp::Div), [Form::Linear(c), Form::Primal(p)]) => {
                c.iter().map(|&x| self.divide(x, *p)).collect::<Option<_>>()?
            }
            (Op::FUnary(FUnOp::Neg), [a]) => {
                let a = self.as_linear(a, m)?;
                a.iter().map(|&x| self.neg(x)).collect::<Option<_>>()?
            }
            (Op::Select, [Form::Primal(cond), a, b]) => {
                let (a, b) = (self.as_linear(a, m)?, self.as_linear(b, m)?);
                let cond = *cond;
                self.zip(&a, &b, |l, x, y| {
                    if x == y {
                        return Some(x);
                    }
                    let (x, y) = (l.value(x)?, l.value(y)?);
                    Some(Coef::Of(l.emit(Op::Select, vec![cond, x, y], TypeTable::F64)?))
                })?
            }
            _ => return None,
        };
        Some(Form::Linear(coefs))
    }

    /// A value computed from the record alone: the same instruction in the forward pass.
    fn primal(&mut self, types: &TypeTable, op: &Op, args: &[&Form], ty: mcir_ir::TypeId) -> Option<Form> {
        let copyable = match op {
            Op::StructGet(sid, _) => !types.struct_def(*sid).mutable,
            Op::TupleGet(_) => true,
            _ => op.is_scalar_arith(),
        };
        if !copyable {
            return None;
        }
        if let (Op::StructGet(_, i), [Form::Tape]) = (op, args) {
            return self.record.get(*i as usize).map(|&v| Form::Primal(v));
        }
        let vals: Vec<Value> = args
            .iter()
            .map(|a| match a {
                Form::Primal(v) => Some(*v),
                _ => None,
            })
            .collect::<Option<_>>()?;
        Some(Form::Primal(self.emit(op.clone(), vals, ty)?))
    }

    /// `form` as a linear form of `m` cotangents: a constant zero is the zero form.
    fn as_linear(&self, form: &Form, m: usize) -> Option<Vec<Coef>> {
        match form {
            Form::Linear(c) => Some(c.clone()),
            Form::Primal(v) => match single_value_def(self.f, *v) {
                Some((Op::FConst(0.0), _)) => Some(vec![Coef::Zero; m]),
                _ => None,
            },
            Form::Tape => None,
        }
    }

    fn zip(
        &mut self,
        a: &[Coef],
        b: &[Coef],
        mut f: impl FnMut(&mut Self, Coef, Coef) -> Option<Coef>,
    ) -> Option<Vec<Coef>> {
        a.iter().zip(b).map(|(&x, &y)| f(self, x, y)).collect()
    }

    /// The constant a value of the forward pass is, if it is one.
    fn known(&self, v: Value) -> Option<f64> {
        match single_value_def(self.f, v) {
            Some((Op::FConst(x), _)) => Some(x),
            _ => None,
        }
    }

    /// A coefficient as a value of the forward pass.
    fn value(&mut self, c: Coef) -> Option<Value> {
        match c {
            Coef::Zero => self.emit(Op::FConst(0.0), vec![], TypeTable::F64),
            Coef::Const(x) => self.emit(Op::FConst(x), vec![], TypeTable::F64),
            Coef::Of(v) => Some(v),
            Coef::Neg(v) => match single_value_def(self.f, v) {
                Some((Op::FUnary(FUnOp::Neg), args)) => Some(args[0]),
                _ => self.emit(Op::FUnary(FUnOp::Neg), vec![v], TypeTable::F64),
            },
        }
    }

    /// A coefficient that is not zero as a value and a sign (true: negated).
    fn parts(&mut self, c: Coef) -> Option<(Value, bool)> {
        match c {
            Coef::Neg(v) => Some((v, true)),
            c => Some((self.value(c)?, false)),
        }
    }

    /// A value of the forward pass, negated if `negated`, as a coefficient.
    fn signed(v: Value, negated: bool) -> Coef {
        if negated {
            Coef::Neg(v)
        } else {
            Coef::Of(v)
        }
    }

    /// `x op y` on two coefficients neither of which is zero: folded when both are
    /// constants, else computed by the forward pass, signs kept symbolic.
    fn binary(&mut self, op: FBinOp, x: Coef, y: Coef) -> Option<Coef> {
        if let (Coef::Const(a), Coef::Const(b)) = (x, y) {
            let folded = match op {
                FBinOp::Add => Some(a + b),
                FBinOp::Sub => Some(a - b),
                FBinOp::Mul => Some(a * b),
                FBinOp::Div => Some(a / b),
                _ => None,
            };
            if let Some(c) = folded {
                return Some(Coef::Const(c));
            }
        }
        if op == FBinOp::Sub {
            let ny = self.neg(y)?;
            return self.binary(FBinOp::Add, x, ny);
        }
        let ((a, na), (b, nb)) = (self.parts(x)?, self.parts(y)?);
        let emit = |l: &mut Self, op: FBinOp, a: Value, b: Value| {
            l.emit(Op::FBinary(op), vec![a, b], TypeTable::F64)
        };
        Some(match (op, na, nb) {
            (FBinOp::Add, false, false) => Coef::Of(emit(self, FBinOp::Add, a, b)?),
            (FBinOp::Add, false, true) => Coef::Of(emit(self, FBinOp::Sub, a, b)?),
            (FBinOp::Add, true, false) => Coef::Of(emit(self, FBinOp::Sub, b, a)?),
            (FBinOp::Add, true, true) => Coef::Neg(emit(self, FBinOp::Add, a, b)?),
            _ => Self::signed(emit(self, op, a, b)?, na != nb),
        })
    }

    /// A primal value as a coefficient: a constant when it is one.
    fn primal_coef(&self, p: Value) -> Coef {
        match self.known(p) {
            Some(x) => Coef::Const(x),
            None => Coef::Of(p),
        }
    }

    fn add(&mut self, x: Coef, y: Coef) -> Option<Coef> {
        match (x, y) {
            (Coef::Zero, c) | (c, Coef::Zero) => Some(c),
            _ => self.binary(FBinOp::Add, x, y),
        }
    }

    fn sub(&mut self, x: Coef, y: Coef) -> Option<Coef> {
        match (x, y) {
            (c, Coef::Zero) => Some(c),
            (Coef::Zero, c) => self.neg(c),
            _ => self.binary(FBinOp::Sub, x, y),
        }
    }

    fn neg(&mut self, x: Coef) -> Option<Coef> {
        Some(match x {
            Coef::Zero => Coef::Zero,
            Coef::Const(c) => Coef::Const(-c),
            Coef::Of(v) => Coef::Neg(v),
            Coef::Neg(v) => Coef::Of(v),
        })
    }

    /// `x · p` for a primal value `p`.
    fn scale(&mut self, x: Coef, p: Value) -> Option<Coef> {
        match x {
            Coef::Zero => Some(Coef::Zero),
            Coef::Const(1.0) => Some(self.primal_coef(p)),
            Coef::Const(-1.0) => {
                let c = self.primal_coef(p);
                self.neg(c)
            }
            _ => self.binary(FBinOp::Mul, x, self.primal_coef(p)),
        }
    }

    /// `x / p` for a primal value `p`.
    fn divide(&mut self, x: Coef, p: Value) -> Option<Coef> {
        match x {
            Coef::Zero => Some(Coef::Zero),
            _ => self.binary(FBinOp::Div, x, self.primal_coef(p)),
        }
    }
}
