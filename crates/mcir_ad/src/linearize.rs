//! Branches linearized in place: a branch whose arms compute a scalar function of a few
//! values has the function's partial derivatives computed in its arms, so that the
//! reverse pass needs neither the branch nor what the arms computed.
//!
//! A two-way branch whose arms are scalar arithmetic (each arm one block or the edge
//! itself) and meet in one join computes, at the join, `f64` results `yₚ` of the values
//! `xₖ` the arms read from before the branch. Forward mode through each arm gives
//! `∂yₚ/∂xₖ` there, passed to the join as more parameters `jₚₖ`; each `yₚ` is then read
//! through `linearized yₚ, jₚ₁, x₁, …` (see `Op::Linearized`), whose reverse is
//! `x̄ₖ += ȳₚ · jₚₖ`. Nothing flows back through the arms any more, so their reverse
//! does nothing and the join needs no path (`Reverse::drop_pointless_paths`); the tape
//! holds the coefficients instead of the path and the arms' values.
//!
//! Why: a scalar helper with an `if`, inlined in a loop, made the reverse pass pop the
//! path and branch again for every element, mispredicting as often as the forward pass
//! did, and tape the values of the arm taken. A hand-written gradient computes each
//! element's derivative in its forward loop; this does the same.

use mcir_ir::entity::EntityRef;
use mcir_ir::{Block, FBinOp, FUnOp, Function, Inst, Op, Terminator, TypeTable, Value};
use std::collections::HashMap;

/// The most values a linearized branch may read (coefficients per result).
const MAX_INPUTS: usize = 4;
/// The most coefficients (results × inputs) a linearized branch may pass to its join.
const MAX_COEFFICIENTS: usize = 8;
/// The most instructions a block between a branch and its join may have.
const MAX_ARM_INSTS: usize = 48;
/// The most blocks between a branch and its join (an `if` with seven `else if`s).
const MAX_REGION_BLOCKS: usize = 8;

/// A partial derivative while it is built: zero and one stay symbolic.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Coef {
    Zero,
    One,
    Of(Value),
}

/// A tree of branches from a head to one join: the blocks between them (the region),
/// each entered by one edge from the head or another region block, and the edges that
/// leave the tree, all into the join.
struct Fan {
    join: Block,
    /// The region's blocks, each after the block that enters it.
    region: Vec<Block>,
    exits: Vec<Exit>,
}

/// An edge into the join: the block it leaves (the head or a region block), which of its
/// successors it is, and the arguments it passes.
struct Exit {
    from: Block,
    side: usize,
    args: Vec<Value>,
}

/// `f` with every branch that qualifies (see the module docs) and whose head is `within`
/// linearized; values that do not vary (`varies`) have no derivative to pass on.
pub(crate) fn linearize_branches(
    mut f: Function,
    within: &dyn Fn(Block) -> bool,
    varies: &dyn Fn(Value) -> bool,
) -> Function {
    if !has_branches(&f) {
        return f;
    }
    let mut preds: HashMap<Block, usize> = HashMap::new();
    for (_, data) in f.blocks.iter() {
        for s in data.term.successors() {
            *preds.entry(s.block).or_default() += 1;
        }
    }
    let heads: Vec<Block> = f.blocks.keys().collect();
    // Uses of each join's results are redirected to their linearizations once, at the
    // end, for all branches (a pass over the function per branch grew with the number
    // of branches times the function's size); the linearizations keep reading the
    // results themselves.
    let mut subst = HashMap::new();
    let mut reads = Vec::new();
    for h in heads {
        if !within(h) {
            continue;
        }
        let Some(fan) = fan(&f, h, &preds) else { continue };
        linearize(&mut f, h, &fan, varies, &mut subst, &mut reads);
    }
    if !subst.is_empty() {
        f.map_uses(|v| subst.get(&v).copied().unwrap_or(v));
        for (i, y) in reads {
            f.insts[i].args[0] = y;
        }
    }
    f
}

/// Whether `f` has a two-way branch, the only place `linearize_branches` changes.
pub(crate) fn has_branches(f: &Function) -> bool {
    f.blocks.values().any(|d| matches!(d.term, Terminator::Branch { .. }))
}

/// The tree of branches from `h` to a join, when it has that shape: a successor of `h`
/// or of a region block is in the region when it is not `h`, has no parameters, only
/// that edge enters it, it ends in a jump or a branch and has at most [`MAX_ARM_INSTS`]
/// instructions; every other successor is the join, one block that nothing else enters.
/// The region has at least one block and at most [`MAX_REGION_BLOCKS`].
fn fan(f: &Function, h: Block, preds: &HashMap<Block, usize>) -> Option<Fan> {
    if !matches!(f.blocks[h].term, Terminator::Branch { .. }) {
        return None;
    }
    let in_region = |b: Block| {
        let data = &f.blocks[b];
        b != h
            && data.params.is_empty()
            && preds.get(&b) == Some(&1)
            && !matches!(data.term, Terminator::Return(_))
            && data.insts.len() <= MAX_ARM_INSTS
    };
    let mut region = Vec::new();
    let mut exits = Vec::new();
    let mut join = None;
    let mut work = vec![h];
    while let Some(b) = work.pop() {
        let mut inner = Vec::new();
        for (side, t) in f.blocks[b].term.successors().enumerate() {
            if in_region(t.block) {
                inner.push(t.block);
                continue;
            }
            if join.is_some_and(|j| j != t.block) {
                return None;
            }
            join = Some(t.block);
            exits.push(Exit { from: b, side, args: t.args.clone() });
        }
        region.extend(&inner);
        if region.len() > MAX_REGION_BLOCKS {
            return None;
        }
        // The first successor's subtree is taken first.
        work.extend(inner.into_iter().rev());
    }
    let join = join?;
    if join == h || region.is_empty() || preds.get(&join) != Some(&exits.len()) {
        return None;
    }
    Some(Fan { join, region, exits })
}

/// Whether forward mode through `op` is done here.
pub(crate) fn supported(f: &Function, op: &Op, result: Option<Value>) -> bool {
    let is_f64 = result.is_some_and(|r| f.value_type(r) == TypeTable::F64);
    match op {
        Op::FBinary(FBinOp::Add | FBinOp::Sub | FBinOp::Mul | FBinOp::Div) => true,
        Op::FUnary(
            FUnOp::Neg
            | FUnOp::Sin
            | FUnOp::Cos
            | FUnOp::Tan
            | FUnOp::Asin
            | FUnOp::Acos
            | FUnOp::Atan
            | FUnOp::Sinh
            | FUnOp::Cosh
            | FUnOp::Tanh
            | FUnOp::Exp
            | FUnOp::Expm1
            | FUnOp::Log
            | FUnOp::Log1p
            | FUnOp::Sqrt
            | FUnOp::Abs,
        ) => true,
        Op::FConst(_) | Op::IToF => true,
        // Integer and boolean arithmetic that cannot fail has no derivative.
        op => op.is_scalar_arith() && !is_f64,
    }
}

/// Linearizes the tree of branches `fan` from `h`: adds to `subst` what each result's
/// uses should read instead, and to `reads` each linearization with the result it reads.
fn linearize(
    f: &mut Function,
    h: Block,
    fan: &Fan,
    varies: &dyn Fn(Value) -> bool,
    subst: &mut HashMap<Value, Value>,
    reads: &mut Vec<(mcir_ir::Inst, Value)>,
) {
    for &b in &fan.region {
        for &i in &f.blocks[b].insts {
            let d = &f.insts[i];
            if !supported(f, &d.op, d.result) {
                return;
            }
        }
    }
    let join = fan.join;
    let params = f.blocks[join].params.clone();
    let outputs: Vec<usize> =
        (0..params.len()).filter(|&p| f.value_type(params[p]) == TypeTable::F64).collect();
    if outputs.is_empty() {
        return;
    }
    // The values the region reads from before the branch, whose derivatives pass on.
    let defined_in_arms: std::collections::HashSet<Value> = fan
        .region
        .iter()
        .flat_map(|&b| f.blocks[b].insts.iter().filter_map(|&i| f.insts[i].result))
        .collect();
    let constant = |v: Value| matches!(f.defining(v).map(|d| &d.op), Some(Op::FConst(_) | Op::IToF));
    let mut inputs: Vec<Value> = Vec::new();
    let note = |v: Value, inputs: &mut Vec<Value>| {
        if f.value_type(v) == TypeTable::F64
            && !defined_in_arms.contains(&v)
            && !constant(v)
            && varies(v)
            && !inputs.contains(&v)
        {
            inputs.push(v);
        }
    };
    for &b in &fan.region {
        for &i in &f.blocks[b].insts {
            for &a in &f.insts[i].args {
                note(a, &mut inputs);
            }
        }
    }
    for exit in &fan.exits {
        for &p in &outputs {
            note(exit.args[p], &mut inputs);
        }
    }
    inputs.sort_by_key(|v| v.index());
    let m = inputs.len();
    if m == 0 || m > MAX_INPUTS || m * outputs.len() > MAX_COEFFICIENTS {
        return;
    }
    // Each exit's coefficients, made where it leaves, after forward mode through the
    // region blocks on its way.
    let mut units: HashMap<Value, Vec<Coef>> = HashMap::new();
    for (k, &x) in inputs.iter().enumerate() {
        let mut unit = vec![Coef::Zero; m];
        unit[k] = Coef::One;
        units.insert(x, unit);
    }
    let span = f.blocks[h].term_span;
    let exit_coefs = vec![Vec::new(); fan.exits.len()];
    let mut walk = Walk { fan, h, m, outputs: &outputs, span, exit_coefs };
    walk.block(f, h, units);
    let exit_coefs = walk.exit_coefs;
    // The join takes the coefficients; each exit passes its own.
    let mut coef_params = Vec::new();
    for &p in &outputs {
        for k in 0..m {
            let name = f.values[params[p]].name.as_ref().map(|n| format!("d{n}_{k}"));
            coef_params.push(f.add_block_param(join, TypeTable::F64, name));
        }
    }
    for (exit, coefs) in fan.exits.iter().zip(exit_coefs) {
        if let Some(t) = f.blocks[exit.from].term.successors_mut().nth(exit.side) {
            t.args.extend(coefs);
        }
    }
    // Each result is read through its linearization from here on.
    let mut made = Vec::new();
    for (n, &p) in outputs.iter().enumerate() {
        let y = params[p];
        let mut args = vec![y];
        for (k, &x) in inputs.iter().enumerate() {
            args.extend([coef_params[n * m + k], x]);
        }
        let Some(z) = f.push_inst(join, Op::Linearized, args, Some(TypeTable::F64), span) else { return };
        f.values[z].name = f.values[y].name.clone();
        subst.insert(y, z);
        if let Some(i) = f.blocks[join].insts.pop() {
            made.push(i);
        }
    }
    // The linearizations themselves read the results, first in the join.
    for (n, &i) in made.iter().enumerate() {
        reads.push((i, params[outputs[n]]));
    }
    let rest = std::mem::take(&mut f.blocks[join].insts);
    f.blocks[join].insts = made.into_iter().chain(rest).collect();
}

/// Forward mode through a fan's region, block by block from its head.
struct Walk<'a> {
    fan: &'a Fan,
    h: Block,
    /// How many inputs.
    m: usize,
    /// The join's `f64` parameters, by position.
    outputs: &'a [usize],
    span: mcir_ir::Span,
    /// The coefficients each exit passes, in the order of `fan.exits`.
    exit_coefs: Vec<Vec<Value>>,
}

impl Walk<'_> {
    /// Forward mode through `b` (nothing for the head, whose values are inputs), the
    /// coefficients of the exits leaving it, and the same for the region blocks it
    /// enters, each with the tangents known at the end of `b`.
    fn block(&mut self, f: &mut Function, b: Block, mut tangent: HashMap<Value, Vec<Coef>>) {
        // Forward mode and the coefficients go after what the block computed, before its
        // terminator.
        let mut emitted = Emitter { f: &mut *f, block: b, out: Vec::new(), span: self.span };
        if b != self.h {
            let insts = emitted.f.blocks[b].insts.clone();
            for i in insts {
                let Some(r) = emitted.f.insts[i].result else { continue };
                if emitted.f.value_type(r) != TypeTable::F64 {
                    continue;
                }
                let t = tangent_through(&mut emitted, &tangent, i, r, self.m);
                tangent.insert(r, t);
            }
        }
        let out = std::mem::take(&mut emitted.out);
        f.blocks[b].insts.extend(out);
        let targets: Vec<Block> = f.blocks[b].term.successors().map(|t| t.block).collect();
        for (side, t) in targets.into_iter().enumerate() {
            match self.fan.exits.iter().position(|x| x.from == b && x.side == side) {
                Some(e) => {
                    let mut emitted = Emitter { f: &mut *f, block: b, out: Vec::new(), span: self.span };
                    let mut coefs = Vec::new();
                    for &p in self.outputs {
                        for c in tangent_of(&tangent, self.fan.exits[e].args[p], self.m) {
                            coefs.push(emitted.materialise(c));
                        }
                    }
                    let out = std::mem::take(&mut emitted.out);
                    f.blocks[b].insts.extend(out);
                    self.exit_coefs[e] = coefs;
                }
                None => self.block(f, t, tangent.clone()),
            }
        }
    }
}

/// The tangent of `v` (with respect to each input), zero where none is known.
pub(crate) fn tangent_of(tangent: &HashMap<Value, Vec<Coef>>, v: Value, m: usize) -> Vec<Coef> {
    tangent.get(&v).cloned().unwrap_or_else(|| vec![Coef::Zero; m])
}

/// Forward mode through instruction `i` (result `r`) into `em`, from the tangents known:
/// `+ - * /`, the unary ops of `Emitter::unary`, and a linearized value; zero otherwise.
pub(crate) fn tangent_through(
    em: &mut Emitter,
    tangent: &HashMap<Value, Vec<Coef>>,
    i: Inst,
    r: Value,
    m: usize,
) -> Vec<Coef> {
    let d = em.f.insts[i].clone();
    let get = |v: &Value| tangent_of(tangent, *v, m);
    match (&d.op, d.args.as_slice()) {
        (Op::FBinary(op), [a, b]) => {
            let (ta, tb) = (get(a), get(b));
            // A quotient with several inputs divides each input's numerator by one
            // reciprocal rather than each by the divisor: a division costs what several
            // products do.
            let divided = (0..m).filter(|&k| ta[k] != Coef::Zero || tb[k] != Coef::Zero).count();
            if *op == FBinOp::Div && divided > 1 {
                let one = em.emit(Op::FConst(1.0), vec![]);
                let reciprocal = em.emit(Op::FBinary(FBinOp::Div), vec![one, *b]);
                return (0..m)
                    .map(|k| {
                        let top = em.quotient_numerator(r, ta[k], tb[k]);
                        em.scale(top, reciprocal)
                    })
                    .collect();
            }
            (0..m).map(|k| em.binary(*op, *a, *b, r, ta[k], tb[k])).collect()
        }
        (Op::FUnary(op), [a]) => {
            let ta = get(a);
            let mut factor = None;
            (0..m).map(|k| em.unary(*op, *a, r, ta[k], &mut factor)).collect()
        }
        // `Σ jₖ · dxₖ`
        (Op::Linearized, [_, rest @ ..]) => {
            let mut t = vec![Coef::Zero; m];
            for pair in rest.chunks(2) {
                if let [j, x] = *pair {
                    let tx = get(&x);
                    for k in 0..m {
                        let term = em.scale(tx[k], j);
                        t[k] = em.add(t[k], term);
                    }
                }
            }
            t
        }
        _ => vec![Coef::Zero; m],
    }
}

/// Emits forward-mode arithmetic into a block, folding what zero and one make trivial.
pub(crate) struct Emitter<'a> {
    pub(crate) f: &'a mut Function,
    pub(crate) block: Block,
    /// Instructions made, to be placed before the block's terminator.
    pub(crate) out: Vec<mcir_ir::Inst>,
    pub(crate) span: mcir_ir::Span,
}

impl Emitter<'_> {
    fn emit(&mut self, op: Op, args: Vec<Value>) -> Value {
        let v = self.f.push_value(self.block, op, args, TypeTable::F64, self.span);
        if let Some(i) = self.f.blocks[self.block].insts.pop() {
            self.out.push(i);
        }
        v
    }

    pub(crate) fn materialise(&mut self, c: Coef) -> Value {
        match c {
            Coef::Zero => self.emit(Op::FConst(0.0), vec![]),
            Coef::One => self.emit(Op::FConst(1.0), vec![]),
            Coef::Of(v) => v,
        }
    }

    pub(crate) fn add(&mut self, a: Coef, b: Coef) -> Coef {
        match (a, b) {
            (Coef::Zero, x) | (x, Coef::Zero) => x,
            (a, b) => {
                let (a, b) = (self.materialise(a), self.materialise(b));
                Coef::Of(self.emit(Op::FBinary(FBinOp::Add), vec![a, b]))
            }
        }
    }

    fn neg(&mut self, a: Coef) -> Coef {
        match a {
            Coef::Zero => Coef::Zero,
            a => {
                let a = self.materialise(a);
                Coef::Of(self.emit(Op::FUnary(FUnOp::Neg), vec![a]))
            }
        }
    }

    /// `c · v` for a primal value `v`.
    pub(crate) fn scale(&mut self, c: Coef, v: Value) -> Coef {
        match c {
            Coef::Zero => Coef::Zero,
            Coef::One => Coef::Of(v),
            Coef::Of(c) => Coef::Of(self.emit(Op::FBinary(FBinOp::Mul), vec![c, v])),
        }
    }

    /// `c / v` for a primal value `v`.
    fn divide(&mut self, c: Coef, v: Value) -> Coef {
        match c {
            Coef::Zero => Coef::Zero,
            c => {
                let c = self.materialise(c);
                Coef::Of(self.emit(Op::FBinary(FBinOp::Div), vec![c, v]))
            }
        }
    }

    /// The tangent of `a op b` (result `r`) from those of `a` and `b`.
    pub(crate) fn binary(&mut self, op: FBinOp, a: Value, b: Value, r: Value, ta: Coef, tb: Coef) -> Coef {
        match op {
            FBinOp::Add => self.add(ta, tb),
            FBinOp::Sub => {
                let n = self.neg(tb);
                self.add(ta, n)
            }
            // d(a · a) = da · a + da · a: one product, added to itself.
            FBinOp::Mul if a == b => {
                let x = self.scale(ta, a);
                self.add(x, x)
            }
            FBinOp::Mul => {
                let (x, y) = (self.scale(ta, b), self.scale(tb, a));
                self.add(x, y)
            }
            // d(a / b) = (da - r db) / b
            _ => {
                let top = self.quotient_numerator(r, ta, tb);
                self.divide(top, b)
            }
        }
    }

    /// `da - r db`, the numerator of the tangent of a quotient `r = a / b`.
    fn quotient_numerator(&mut self, r: Value, ta: Coef, tb: Coef) -> Coef {
        let rb = self.scale(tb, r);
        let n = self.neg(rb);
        self.add(ta, n)
    }

    /// The tangent of `op(a)` (result `r`) from the tangent `ta` of `a`; `factor` keeps
    /// the derivative of `op` at `a`, made once for all inputs.
    pub(crate) fn unary(
        &mut self,
        op: FUnOp,
        a: Value,
        r: Value,
        ta: Coef,
        factor: &mut Option<Value>,
    ) -> Coef {
        if ta == Coef::Zero {
            return Coef::Zero;
        }
        // The derivatives of `mcir_ad::rules::unary_times`, as factors.
        let d = match (op, *factor) {
            (FUnOp::Neg, _) => return self.neg(ta),
            (FUnOp::Log, _) => return self.divide(ta, a),
            (FUnOp::Floor | FUnOp::Ceil | FUnOp::Round | FUnOp::Sign, _) => return Coef::Zero,
            (_, Some(d)) => d,
            (FUnOp::Sin, None) => self.emit(Op::FUnary(FUnOp::Cos), vec![a]),
            (FUnOp::Cos, None) => {
                let s = self.emit(Op::FUnary(FUnOp::Sin), vec![a]);
                self.emit(Op::FUnary(FUnOp::Neg), vec![s])
            }
            (FUnOp::Sinh, None) => self.emit(Op::FUnary(FUnOp::Cosh), vec![a]),
            (FUnOp::Cosh, None) => self.emit(Op::FUnary(FUnOp::Sinh), vec![a]),
            // tan' = 1 + tan², tanh' = 1 - tanh²
            (FUnOp::Tan | FUnOp::Tanh, None) => {
                let sq = self.emit(Op::FBinary(FBinOp::Mul), vec![r, r]);
                let one = self.emit(Op::FConst(1.0), vec![]);
                let op = if op == FUnOp::Tan { FBinOp::Add } else { FBinOp::Sub };
                self.emit(Op::FBinary(op), vec![one, sq])
            }
            // asin' = 1 / sqrt(1 - a²), acos' its negative
            (FUnOp::Asin | FUnOp::Acos, None) => {
                let sq = self.emit(Op::FBinary(FBinOp::Mul), vec![a, a]);
                let one = self.emit(Op::FConst(1.0), vec![]);
                let d = self.emit(Op::FBinary(FBinOp::Sub), vec![one, sq]);
                let root = self.emit(Op::FUnary(FUnOp::Sqrt), vec![d]);
                let sign = self.emit(Op::FConst(if op == FUnOp::Acos { -1.0 } else { 1.0 }), vec![]);
                self.emit(Op::FBinary(FBinOp::Div), vec![sign, root])
            }
            // atan' = 1 / (1 + a²), log1p' = 1 / (1 + a)
            (FUnOp::Atan | FUnOp::Log1p, None) => {
                let one = self.emit(Op::FConst(1.0), vec![]);
                let t = if op == FUnOp::Atan { self.emit(Op::FBinary(FBinOp::Mul), vec![a, a]) } else { a };
                let d = self.emit(Op::FBinary(FBinOp::Add), vec![one, t]);
                self.emit(Op::FBinary(FBinOp::Div), vec![one, d])
            }
            (FUnOp::Exp, None) => r,
            // expm1' = expm1 + 1
            (FUnOp::Expm1, None) => {
                let one = self.emit(Op::FConst(1.0), vec![]);
                self.emit(Op::FBinary(FBinOp::Add), vec![r, one])
            }
            (FUnOp::Abs, None) => self.emit(Op::FUnary(FUnOp::Sign), vec![a]),
            // d sqrt(a) = da / (2 sqrt(a))
            (FUnOp::Sqrt, None) => {
                let two = self.emit(Op::FConst(2.0), vec![]);
                let twice = self.emit(Op::FBinary(FBinOp::Mul), vec![two, r]);
                let one = self.emit(Op::FConst(1.0), vec![]);
                self.emit(Op::FBinary(FBinOp::Div), vec![one, twice])
            }
        };
        *factor = Some(d);
        self.scale(ta, d)
    }
}

/// Clears the activity of the values no derivative reaches: those that only a
/// linearization's result or coefficients are made from (the arms' arithmetic, a loop
/// linearized whole), and those only comparisons and integer arithmetic read (a loop's
/// test, a branch on the data). The reverse pass computes no adjoint for them and needs
/// none of their operands. A value keeps its activity if some use may pass a derivative
/// back: a linearized value, an effect (a store, a call, a return, an op that may fail),
/// or a pure op whose result keeps it and carries a derivative, through jumps to the
/// parameters they fill.
pub(crate) fn clear_unreached_activity(f: &Function, active: &mut [bool]) {
    // Each value kept, once, from the uses that keep whatever they read, back through
    // the pure ops that make kept values and the jumps that fill kept parameters.
    let mut kept = vec![false; f.values.len()];
    let mut work = Vec::new();
    let keep = |v: Value, kept: &mut Vec<bool>, work: &mut Vec<Value>| {
        if !kept[v.index()] {
            kept[v.index()] = true;
            work.push(v);
        }
    };
    let mut incoming: HashMap<Value, Vec<Value>> = HashMap::new();
    for data in f.blocks.values() {
        for &i in &data.insts {
            let d = &f.insts[i];
            match (&d.op, d.result) {
                (Op::Linearized, _) => {
                    for &x in d.args.iter().skip(2).step_by(2) {
                        keep(x, &mut kept, &mut work);
                    }
                }
                (op, Some(_)) if !op.has_effect() => {}
                _ => d.args.iter().for_each(|&a| keep(a, &mut kept, &mut work)),
            }
        }
        match &data.term {
            Terminator::Return(v) => v.iter().for_each(|&v| keep(v, &mut kept, &mut work)),
            Terminator::Branch { cond, .. } => keep(*cond, &mut kept, &mut work),
            Terminator::Jump(_) => {}
        }
        for s in data.term.successors() {
            for (&arg, &p) in s.args.iter().zip(&f.blocks[s.block].params) {
                incoming.entry(p).or_default().push(arg);
            }
        }
    }
    while let Some(v) = work.pop() {
        match f.values[v].def {
            mcir_ir::ValueDef::Inst(i) => {
                let d = &f.insts[i];
                // A comparison or an integer passes no derivative to what it reads.
                let carries = !matches!(f.value_type(v), TypeTable::BOOL | TypeTable::I64);
                if d.op != Op::Linearized && !d.op.has_effect() && carries {
                    d.args.iter().for_each(|&a| keep(a, &mut kept, &mut work));
                }
            }
            mcir_ir::ValueDef::Param(..) => {
                for &a in incoming.get(&v).into_iter().flatten() {
                    keep(a, &mut kept, &mut work);
                }
            }
        }
    }
    for (a, k) in active.iter_mut().zip(&kept) {
        if !*k {
            *a = false;
        }
    }
}
