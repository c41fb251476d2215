//! The IR verifier. Every pass must leave IR that passes it; IR parsed from text is
//! trusted only after it passes. It checks, for every function of a module:
//!
//! 1. **Shape.** There is at least one block; the entry block (`bb0`) has one parameter
//!    per function parameter, of the same types, and no jump targets it.
//! 2. **Definitions.** Each instruction sits in exactly one block; each value is defined
//!    exactly once, and its recorded definition (block parameter or instruction result)
//!    is where it is.
//! 3. **Dominance.** Every operand is a value of the function whose definition dominates
//!    the use: a block's parameters dominate its instructions, and within a block an
//!    instruction's result is available only to later instructions and the terminator.
//!    Unreachable blocks are not allowed (passes remove them).
//! 4. **Types.** Each op gets operands of the count and types it takes and produces a
//!    result exactly when it has one, of the type it yields (see `check_op`); elementwise
//!    ops only name ops that have an elementwise form; arrays have rank 1 to 3; a
//!    `stack.reserve`'s width is a positive constant.
//! 5. **Control flow.** A branch condition is a `bool`; every jump passes one argument of
//!    the right type per parameter of its target; `ret` matches the declared return type.
//! 6. **Calls.** The callee exists; arguments and result fit its signature.
//! 7. **Types are well formed.** Struct and type ids exist in the module's type table.
//! 8. **Regions.** Only an op that allocates (`Op::may_take_tape`) is marked `tape`.
//!
//! And for every hand-written rule of the module (see [`RuleKind`]): the function exists,
//! has at most one rule of each kind (a `zero` or `checkpoint` rule is alone), and the
//! rule's functions fit it — the rule takes the function's parameters and returns
//! `(R, E)` or `(R,)` with `R` the function's result; the closure takes `E` first exactly
//! when there is one; a checkpointed function has the signature of the function whose
//! rule serves it, which has no hand-written rule.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::*;
use crate::print::op_head;
use crate::types::{Scalar, Type, TypeId, TypeTable};
use std::fmt;

/// An invariant that does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The function it was found in.
    pub func: String,
    /// What is wrong, naming the block, instruction or value.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in @{}: {}", self.func, self.message)
    }
}

impl std::error::Error for VerifyError {}

/// Checks every function of the module; returns the first violation found.
pub fn verify_module(module: &Module) -> Result<(), VerifyError> {
    for (_, func) in module.funcs.iter() {
        verify_function(module, func)?;
    }
    for (i, r) in module.rules.iter().enumerate() {
        verify_rule(module, r, &module.rules[..i])?;
    }
    Ok(())
}

/// Checks a hand-written rule against its function and the rules before it.
fn verify_rule(module: &Module, r: &CustomRule, earlier: &[CustomRule]) -> Result<(), VerifyError> {
    let Some(f) = module.funcs.get(r.func) else {
        return Err(VerifyError {
            func: "?".into(),
            message: "a rule for a function that does not exist".into(),
        });
    };
    let fail = |message: String| Err(VerifyError { func: f.name.clone(), message });
    for e in earlier.iter().filter(|e| e.func == r.func) {
        if e.kind.word() == r.kind.word()
            || matches!(e.kind, RuleKind::Zero | RuleKind::Checkpoint { .. })
            || matches!(r.kind, RuleKind::Zero | RuleKind::Checkpoint { .. })
        {
            return fail(format!("a {} rule after a {} rule", r.kind.word(), e.kind.word()));
        }
    }
    let (rule, closure) = match r.kind {
        RuleKind::Reverse { rule, pullback } => (rule, pullback),
        RuleKind::Forward { rule, pushforward } => (rule, pushforward),
        RuleKind::Zero => return Ok(()),
        RuleKind::Checkpoint { inner } => {
            return match module.funcs.get(inner) {
                None => fail("the rule names a function that does not exist".into()),
                Some(g) if g.params != f.params || g.ret != f.ret => {
                    fail(format!("the checkpointed function @{} has another signature", g.name))
                }
                Some(g) if module.rules.iter().any(|e| e.func == inner) => {
                    fail(format!("the checkpointed function @{} has a rule of its own", g.name))
                }
                Some(_) => Ok(()),
            }
        }
    };
    let (Some(rf), Some(cf)) = (module.funcs.get(rule), module.funcs.get(closure)) else {
        return fail("the rule names a function that does not exist".into());
    };
    if rf.params != f.params {
        return fail(format!(
            "the {} rule @{} does not take the function's parameters",
            r.kind.word(),
            rf.name
        ));
    }
    let items = match rf.ret.and_then(|t| module.types.try_get(t)) {
        Some(Type::Tuple(items)) if (1..=2).contains(&items.len()) => items.clone(),
        _ => {
            return fail(format!(
                "the {} rule @{} does not return (value, environment)",
                r.kind.word(),
                rf.name
            ))
        }
    };
    if Some(items[0]) != f.ret {
        return fail(format!("the {} rule @{} returns a value of another type", r.kind.word(), rf.name));
    }
    let env_ok = match items.get(1) {
        Some(&e) => cf.params.first() == Some(&e),
        None => true,
    };
    if !env_ok {
        return fail(format!("@{} does not take the environment @{} returns", cf.name, rf.name));
    }
    Ok(())
}

/// Checks one function of `module`.
pub fn verify_function(module: &Module, func: &Function) -> Result<(), VerifyError> {
    Verifier { module, types: &module.types, func }
        .run()
        .map_err(|message| VerifyError { func: func.name.clone(), message })
}

struct Verifier<'a> {
    module: &'a Module,
    types: &'a TypeTable,
    func: &'a Function,
}

type Check = Result<(), String>;

impl Verifier<'_> {
    fn run(&self) -> Check {
        let f = self.func;
        if f.blocks.is_empty() {
            return Err("the function has no blocks".into());
        }
        for &t in f.params.iter().chain(f.ret.iter()) {
            self.check_type(t)?;
        }
        let entry = &f.blocks[f.entry()];
        if entry.params.len() != f.params.len() {
            return Err(format!(
                "the entry block has {} parameters but the signature {}",
                entry.params.len(),
                f.params.len()
            ));
        }
        for (&v, &t) in entry.params.iter().zip(&f.params) {
            if f.values.get(v).map(|d| d.ty) != Some(t) {
                return Err(format!("entry parameter {v} does not have the signature's type"));
            }
        }
        // Definitions.
        let mut inst_seen = vec![false; f.insts.len()];
        let mut value_seen = vec![false; f.values.len()];
        let mut def_site: Vec<Option<(Block, usize)>> = vec![None; f.values.len()];
        for (b, data) in f.blocks.iter() {
            for (i, &p) in data.params.iter().enumerate() {
                let d = f.values.get(p).ok_or_else(|| format!("{b} has an unknown parameter {p}"))?;
                if d.def != ValueDef::Param(b, i as u32)
                    || std::mem::replace(&mut value_seen[p.index()], true)
                {
                    return Err(format!(
                        "parameter {p} of {b} is defined more than once or in the wrong place"
                    ));
                }
                self.check_type(d.ty)?;
                def_site[p.index()] = Some((b, 0));
            }
            for (pos, &inst) in data.insts.iter().enumerate() {
                let d = f.insts.get(inst).ok_or_else(|| format!("{b} lists an unknown instruction"))?;
                if std::mem::replace(&mut inst_seen[inst.index()], true) {
                    return Err(format!("{inst} appears in more than one place"));
                }
                if let Some(r) = d.result {
                    let rd = f.values.get(r).ok_or_else(|| format!("{inst} has an unknown result"))?;
                    if rd.def != ValueDef::Inst(inst) || std::mem::replace(&mut value_seen[r.index()], true) {
                        return Err(format!(
                            "result {r} of {inst} is defined more than once or in the wrong place"
                        ));
                    }
                    self.check_type(rd.ty)?;
                    def_site[r.index()] = Some((b, pos + 1));
                }
            }
        }
        // Control flow and dominance.
        let cfg = ControlFlow::compute(f);
        for (b, data) in f.blocks.iter() {
            if !cfg.is_reachable(b) {
                return Err(format!("{b} is unreachable"));
            }
            for s in data.term.successors() {
                if s.block == f.entry() {
                    return Err("the entry block must not be a jump target".into());
                }
                if !f.blocks.contains(s.block) {
                    return Err(format!("{b} jumps to a block that does not exist"));
                }
            }
            let uses_ok = |v: Value, pos: usize| -> Check {
                match def_site.get(v.index()).copied().flatten() {
                    Some((db, dpos)) if db == b => {
                        if dpos <= pos {
                            Ok(())
                        } else {
                            Err(format!("{v} is used in {b} before it is defined"))
                        }
                    }
                    Some((db, _)) if cfg.dominates(db, b) => Ok(()),
                    Some(_) => Err(format!("{v} is used in {b}, which its definition does not dominate")),
                    None => Err(format!("{v} is used in {b} but defined nowhere")),
                }
            };
            for (pos, &inst) in data.insts.iter().enumerate() {
                let d = &f.insts[inst];
                for &a in &d.args {
                    uses_ok(a, pos)?;
                }
                self.check_op(d).map_err(|e| format!("`{}` in {b}: {e}", op_head(self.types, &d.op)))?;
            }
            for v in data.term.uses() {
                uses_ok(v, data.insts.len())?;
            }
            self.check_terminator(b, &data.term)?;
        }
        Ok(())
    }

    fn check_type(&self, t: TypeId) -> Check {
        match self.types.try_get(t) {
            None => Err(format!("unknown type {t:?}")),
            Some(Type::Array { rank, .. }) if !(1..=3).contains(rank) => Err(format!("array of rank {rank}")),
            Some(Type::Struct(s)) if self.types.as_struct(t).is_none() => {
                Err(format!("unknown struct {s:?}"))
            }
            _ => Ok(()),
        }
    }

    fn ty(&self, v: Value) -> TypeId {
        self.func.values.get(v).map(|d| d.ty).unwrap_or(TypeTable::UNIT)
    }

    fn show(&self, t: TypeId) -> String {
        self.types.display(t).to_string()
    }

    fn check_terminator(&self, b: Block, term: &Terminator) -> Check {
        let f = self.func;
        if let Terminator::Branch { cond, .. } = term {
            if self.ty(*cond) != TypeTable::BOOL {
                return Err(format!("the branch condition of {b} is not a bool"));
            }
        }
        for call in term.successors() {
            let params = &f.blocks[call.block].params;
            if params.len() != call.args.len() {
                return Err(format!(
                    "{b} passes {} arguments to {}, which has {} parameters",
                    call.args.len(),
                    call.block,
                    params.len()
                ));
            }
            for (&a, &p) in call.args.iter().zip(params) {
                if self.ty(a) != self.ty(p) {
                    return Err(format!(
                        "{b} passes a {} to a {} parameter of {}",
                        self.show(self.ty(a)),
                        self.show(self.ty(p)),
                        call.block
                    ));
                }
            }
        }
        if let Terminator::Return(v) = term {
            match (v.map(|v| self.ty(v)), f.ret) {
                (None, None) => {}
                (Some(a), Some(r)) if a == r => {}
                (Some(a), Some(r)) => {
                    return Err(format!(
                        "{b} returns a {} from a function returning {}",
                        self.show(a),
                        self.show(r)
                    ))
                }
                (None, Some(_)) => {
                    return Err(format!("{b} returns no value from a function that returns one"))
                }
                (Some(_), None) => {
                    return Err(format!("{b} returns a value from a function that returns nothing"))
                }
            }
        }
        Ok(())
    }

    fn check_op(&self, d: &InstData) -> Check {
        if d.in_tape && !d.op.may_take_tape() {
            return Err("allocates nothing, so cannot take from the tape region".into());
        }
        let t = &self.types;
        let args: Vec<TypeId> = d.args.iter().map(|&v| self.ty(v)).collect();
        let result = d.result.map(|r| self.ty(r));
        let (f64_, i64_, bool_) = (TypeTable::F64, TypeTable::I64, TypeTable::BOOL);
        let want = |expected: &[TypeId], res: Option<TypeId>| -> Check {
            if args != expected {
                let e: Vec<String> = expected.iter().map(|&x| self.show(x)).collect();
                let a: Vec<String> = args.iter().map(|&x| self.show(x)).collect();
                return Err(format!("takes ({}), given ({})", e.join(", "), a.join(", ")));
            }
            self.result_is(result, res)
        };
        let array_of = |v: usize| args.get(v).and_then(|&x| t.as_array(x));
        match &d.op {
            Op::FConst(_) => want(&[], Some(f64_)),
            Op::IConst(_) => want(&[], Some(i64_)),
            Op::BConst(_) => want(&[], Some(bool_)),
            Op::FBinary(_) => want(&[f64_, f64_], Some(f64_)),
            Op::FUnary(_) => want(&[f64_], Some(f64_)),
            Op::FPowI => want(&[f64_, i64_], Some(f64_)),
            Op::IBinary(_) => want(&[i64_, i64_], Some(i64_)),
            Op::IUnary(_) => want(&[i64_], Some(i64_)),
            Op::FCmp(_) => want(&[f64_, f64_], Some(bool_)),
            Op::ICmp(_) => want(&[i64_, i64_], Some(bool_)),
            Op::BCmp(c) => {
                if !matches!(c, CmpOp::Eq | CmpOp::Ne) {
                    return Err("booleans compare only with `eq` and `ne`".into());
                }
                want(&[bool_, bool_], Some(bool_))
            }
            Op::Not => want(&[bool_], Some(bool_)),
            Op::IToF => want(&[i64_], Some(f64_)),
            Op::FToI => want(&[f64_], Some(i64_)),
            Op::ArrayFill => {
                let (elem, rank) = self.result_array(result)?;
                let mut expected = vec![TypeTable::scalar(elem)];
                expected.extend(std::iter::repeat_n(i64_, rank as usize));
                want(&expected, result)
            }
            Op::ArrayLit(dims) => {
                let (elem, rank) = self.result_array(result)?;
                if dims.len() != rank as usize {
                    return Err(format!("{} extents for an array of rank {rank}", dims.len()));
                }
                let count = dims.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x as usize));
                if count.is_none_or(|c| c == 0 || c != args.len()) {
                    return Err(format!("{} elements do not fill the shape {dims:?}", args.len()));
                }
                if args.iter().any(|&a| a != TypeTable::scalar(elem)) {
                    return Err(format!("elements must be {}", elem.name()));
                }
                Ok(())
            }
            Op::ArrayDim(dim) => {
                let (_, rank) = array_of(0).ok_or("takes an array")?;
                if args.len() != 1 || *dim >= rank {
                    return Err(format!("dimension {dim} of an array of rank {rank}"));
                }
                self.result_is(result, Some(i64_))
            }
            Op::ExpectDim(dim) => {
                let (_, rank) = array_of(0).ok_or("takes an array")?;
                if *dim >= rank {
                    return Err(format!("dimension {dim} of an array of rank {rank}"));
                }
                want(&[args[0], i64_], None)
            }
            Op::Load | Op::Store | Op::TrustedLoad | Op::TrustedStore => {
                let (elem, rank) = array_of(0).ok_or("takes an array first")?;
                let mut expected = vec![args[0]];
                expected.extend(std::iter::repeat_n(i64_, rank as usize));
                if matches!(d.op, Op::Load | Op::TrustedLoad) {
                    want(&expected, Some(TypeTable::scalar(elem)))
                } else {
                    expected.push(TypeTable::scalar(elem));
                    want(&expected, None)
                }
            }
            Op::ArrayCopy => {
                array_of(0).ok_or("takes an array")?;
                want(&[args[0]], Some(args[0]))
            }
            Op::CopyInto => {
                array_of(0).ok_or("takes arrays")?;
                want(&[args[0], args[0]], None)
            }
            Op::SharesMemory => {
                array_of(0).ok_or("takes arrays")?;
                want(&[args[0], args[0]], Some(TypeTable::BOOL))
            }
            Op::Sum => {
                let (elem, _) = array_of(0).ok_or("takes an array")?;
                if elem == Scalar::Bool {
                    return Err("cannot sum booleans".into());
                }
                want(&[args[0]], Some(TypeTable::scalar(elem)))
            }
            Op::MatMul(_) | Op::MatVec(_) | Op::MatMulAcc(_) | Op::MatVecAcc(_) | Op::OuterAcc => {
                let f64_rank =
                    |v: Option<TypeId>, rank: u8| v.and_then(|x| t.as_array(x)) == Some((Scalar::F64, rank));
                // The ranks of (accumulator, left, right) or of (left, right) -> result.
                let (ranks, acc): (&[u8], bool) = match d.op {
                    Op::MatMul(_) => (&[2, 2, 2], false),
                    Op::MatVec(_) => (&[2, 1, 1], false),
                    Op::MatMulAcc(_) => (&[2, 2, 2], true),
                    Op::MatVecAcc(_) => (&[1, 2, 1], true),
                    _ => (&[2, 1, 1], true),
                };
                let ok = if acc {
                    args.len() == 3
                        && (0..3).all(|i| f64_rank(args.get(i).copied(), ranks[i]))
                        && result.is_none()
                } else {
                    args.len() == 2
                        && f64_rank(args.first().copied(), ranks[0])
                        && f64_rank(args.get(1).copied(), ranks[1])
                        && f64_rank(result, ranks[2])
                };
                if ok {
                    Ok(())
                } else {
                    Err(match d.op {
                        Op::MatMul(_) => "takes two f64[,] and yields an f64[,]",
                        Op::MatVec(_) => "takes an f64[,] and an f64[] and yields an f64[]",
                        Op::MatMulAcc(_) => "takes three f64[,] and yields nothing",
                        Op::MatVecAcc(_) => "takes an f64[], an f64[,] and an f64[] and yields nothing",
                        _ => "takes an f64[,] and two f64[] and yields nothing",
                    }
                    .into())
                }
            }
            Op::Transpose => match array_of(0) {
                Some((Scalar::F64, 2)) => want(&[args[0]], Some(args[0])),
                _ => Err("takes an f64[,]".into()),
            },
            Op::Dot => match array_of(0) {
                Some((Scalar::F64, 1)) => want(&[args[0], args[0]], Some(f64_)),
                _ => Err("takes two f64[]".into()),
            },
            Op::MapFBinary(op) => {
                if !op.is_elementwise() {
                    return Err("has no elementwise form".into());
                }
                self.check_map(&args, result, Scalar::F64, *op == FBinOp::Pow)
            }
            Op::MapIBinary(op) => {
                if !op.is_elementwise() {
                    return Err("has no elementwise form".into());
                }
                self.check_map(&args, result, Scalar::I64, false)
            }
            Op::MapFUnary(_) => match array_of(0) {
                Some((Scalar::F64, _)) => want(&[args[0]], Some(args[0])),
                _ => Err("takes an f64 array".into()),
            },
            Op::MapFPowI => match array_of(0) {
                Some((Scalar::F64, _)) => want(&[args[0], i64_], Some(args[0])),
                _ => Err("takes an f64 array and an i64".into()),
            },
            Op::RefNew => {
                let r = result.ok_or("has a result")?;
                match t.try_get(r) {
                    Some(Type::Ref(inner)) => want(&[*inner], result),
                    _ => Err("yields a ref".into()),
                }
            }
            Op::RefLoad | Op::RefStore => {
                let inner = match args.first().and_then(|&a| t.try_get(a)) {
                    Some(Type::Ref(inner)) => *inner,
                    _ => return Err("takes a ref first".into()),
                };
                if matches!(d.op, Op::RefLoad) {
                    want(&[args[0]], Some(inner))
                } else {
                    want(&[args[0], inner], None)
                }
            }
            Op::TupleNew => {
                let r = result.ok_or("has a result")?;
                match t.try_get(r) {
                    Some(Type::Tuple(items)) => want(items, result),
                    _ => Err("yields a tuple".into()),
                }
            }
            Op::TupleGet(i) => match args.first().and_then(|&a| t.try_get(a)) {
                Some(Type::Tuple(items)) => {
                    let item = *items.get(*i as usize).ok_or_else(|| format!("tuple has no field {i}"))?;
                    want(&[args[0]], Some(item))
                }
                _ => Err("takes a tuple".into()),
            },
            Op::StructNew(s) => {
                let r = result.ok_or("has a result")?;
                match t.as_struct(r) {
                    Some((rs, def)) if rs == *s => {
                        let fields: Vec<TypeId> = def.fields.iter().map(|f| f.1).collect();
                        want(&fields, result)
                    }
                    _ => Err("yields a value of the struct it names".into()),
                }
            }
            Op::StructGet(s, i) | Op::MutLoad(s, i) | Op::MutStore(s, i) => {
                let (rs, def) = args.first().and_then(|&a| t.as_struct(a)).ok_or("takes a struct first")?;
                if rs != *s {
                    return Err("operand is not of the struct it names".into());
                }
                let is_mut_op = !matches!(d.op, Op::StructGet(..));
                if def.mutable != is_mut_op {
                    return Err(if def.mutable {
                        "a mut struct is read with mut.load".into()
                    } else {
                        "an immutable struct has only struct.get".into()
                    });
                }
                let fty = def.fields.get(*i as usize).ok_or("no such field")?.1;
                if matches!(d.op, Op::MutStore(..)) {
                    want(&[args[0], fty], None)
                } else {
                    want(&[args[0]], Some(fty))
                }
            }
            Op::Call(callee) => {
                let c = self.module.funcs.get(*callee).ok_or("calls a function that does not exist")?;
                want(&c.params, c.ret)
            }
            Op::Print => {
                if args.len() != 1 {
                    return Err("takes one operand".into());
                }
                self.result_is(result, None)
            }
            Op::Linearized => {
                // `y`, then pairs of a coefficient and a value, all `f64`.
                if args.len().is_multiple_of(2) {
                    return Err("takes y and pairs of a coefficient and a value".into());
                }
                want(&vec![f64_; args.len()], Some(f64_))
            }
            Op::Select => {
                let ty = *args.get(1).ok_or("takes a condition and two scalars")?;
                if t.as_scalar(ty).is_none() {
                    return Err("selects between scalars".into());
                }
                want(&[bool_, ty, ty], Some(ty))
            }
            Op::ZerosLike => match array_of(0) {
                Some((_, rank)) => {
                    let r = self.types.as_array(result.unwrap_or(TypeTable::UNIT));
                    if r != Some((Scalar::F64, rank)) {
                        return Err("yields an f64 array of the operand's rank".into());
                    }
                    want(&[args[0]], result)
                }
                None => Err("takes an array".into()),
            },
            Op::AddInto | Op::MoveAdd => match array_of(0) {
                Some((Scalar::F64, _)) => {
                    let src = *args.get(1).ok_or("takes two operands")?;
                    if src != args[0] && !(matches!(d.op, Op::AddInto) && src == f64_) {
                        return Err("takes an f64 array and an array of its type (or, to add, an f64)".into());
                    }
                    want(&[args[0], src], None)
                }
                _ => Err("takes an f64 array first".into()),
            },
            Op::Axpy => match array_of(0) {
                Some((Scalar::F64, _)) => want(&[args[0], f64_, args[0]], None),
                _ => Err("takes an f64 array, an f64 and an array of the first's type".into()),
            },
            Op::ArenaMark | Op::TapeMark => want(&[], Some(TypeTable::I64)),
            Op::ArenaRelease | Op::TapeRelease => want(&[TypeTable::I64], None),
            Op::Unset => match result {
                Some(_) => want(&[], result),
                None => Err("yields a value".into()),
            },
            Op::StackNew => match result.and_then(|r| t.try_get(r)) {
                Some(Type::Stack(_)) => want(&[], result),
                _ => Err("yields a stack".into()),
            },
            Op::StackReserve | Op::StackPut => {
                let inner = match args.first().and_then(|&a| t.try_get(a)) {
                    Some(Type::Stack(inner)) => *inner,
                    _ => return Err("takes a stack first".into()),
                };
                if matches!(d.op, Op::StackReserve) {
                    if let Some(&width) = d.args.get(4) {
                        if self.func.const_int(width).is_none_or(|w| w < 1) {
                            return Err("takes a positive constant width".into());
                        }
                        return want(&[args[0], i64_, i64_, i64_, i64_], Some(i64_));
                    }
                    want(&[args[0], i64_, i64_, i64_], Some(i64_))
                } else {
                    // One or more values: a record of that width.
                    let width = args.len().saturating_sub(3).max(1);
                    let mut expected = vec![args[0], i64_, i64_];
                    expected.extend(std::iter::repeat_n(inner, width));
                    want(&expected, None)
                }
            }
            Op::StackPush | Op::StackPop | Op::StackPeek => {
                let inner = match args.first().and_then(|&a| t.try_get(a)) {
                    Some(Type::Stack(inner)) => *inner,
                    _ => return Err("takes a stack first".into()),
                };
                if matches!(d.op, Op::StackPop | Op::StackPeek) {
                    want(&[args[0]], Some(inner))
                } else {
                    want(&[args[0], inner], None)
                }
            }
        }
    }

    fn result_is(&self, actual: Option<TypeId>, expected: Option<TypeId>) -> Check {
        match (actual, expected) {
            (None, None) => Ok(()),
            (Some(a), Some(e)) if a == e => Ok(()),
            (Some(a), Some(e)) => Err(format!("yields {}, not {}", self.show(e), self.show(a))),
            (None, Some(e)) => Err(format!("yields a {} that is not bound", self.show(e))),
            (Some(_), None) => Err("has no result".into()),
        }
    }

    fn result_array(&self, result: Option<TypeId>) -> Result<(Scalar, u8), String> {
        result.and_then(|r| self.types.as_array(r)).ok_or_else(|| "yields an array".to_string())
    }

    /// Elementwise binary ops: array∘array of one type, array∘scalar, scalar∘array
    /// (`pow` only array∘scalar); the result has the array's type.
    fn check_map(
        &self,
        args: &[TypeId],
        result: Option<TypeId>,
        elem: Scalar,
        scalar_rhs_only: bool,
    ) -> Check {
        let scalar = TypeTable::scalar(elem);
        let is_arr = |x: TypeId| self.types.as_array(x).is_some_and(|(e, _)| e == elem);
        let arr = match args {
            [a, b] if is_arr(*a) && *a == *b && !scalar_rhs_only => *a,
            [a, s] if is_arr(*a) && *s == scalar => *a,
            [s, a] if is_arr(*a) && *s == scalar && !scalar_rhs_only => *a,
            _ => {
                return Err(format!(
                    "takes two {} arrays of one rank, or such an array and a {}",
                    elem.name(),
                    elem.name()
                ))
            }
        };
        self.result_is(result, Some(arr))
    }
}
