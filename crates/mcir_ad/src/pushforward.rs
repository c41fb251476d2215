//! Forward mode: the tangent function `f$tan` of a function, in the model of LANGUAGE.md
//! §7 read forwards. It runs the primal and, beside it, the tangent of every value: an
//! `f64` per rdata leaf, carried in registers (`None` while it is known to be zero, so
//! no useless work is emitted), and a shadow per fdata leaf, memory of the primal's shape
//! that holds the tangent of its content and is updated wherever the primal writes.
//!
//! `f$tan(x.., tx..) -> (y, ty..)`: the primal parameters, then the tangents of the
//! arguments upon entry (per lane, per parameter, one per leaf in leaf order); it
//! returns the result and its tangent leaves per lane. The tangents of the arguments'
//! state after the call are their shadows, updated in place; rdata never changes in a
//! call. With a width `w > 1` (`f$tan{w}`) one sweep carries `w` tangent directions
//! ("lanes"): the primal runs once and each op's tangent rule is emitted per lane.
//!
//! Every op of the IR has a rule, including those of derived passes (stacks, shadow
//! updates), so the tangent of a VJP driver is a Hessian-vector product
//! (forward over reverse).

use crate::emit::Emit;
use crate::forward::{shadow_struct, tangent_extract};
use crate::tangent::{field_leaf_ranges, has_tangent, holds_itself, leaves, tangent_type, LeafKind};
use crate::AdError;
use mcir_ir::entity::EntityRef;
use mcir_ir::{
    Block, BlockCall, CmpOp, FBinOp, FuncId, Function, Inst, Module, Op, Terminator, Type, TypeId, TypeTable,
    Value,
};
use std::collections::{BTreeSet, HashMap};

/// The tangent functions added to a module.
#[derive(Clone, Debug)]
pub struct Tangents {
    /// The module with the tangent functions added.
    pub module: Module,
    /// Lanes per sweep.
    pub width: usize,
    /// The tangent function of each function that has one, by the function's id.
    pub of: HashMap<FuncId, FuncId>,
    /// The entry's tangent function for constant arguments (see [`tangents_with`]): the
    /// primal, its tangent function, and which parameters are constant.
    pub entry: Option<(FuncId, FuncId, Vec<bool>)>,
}

impl Tangents {
    /// The tangent function of `f`.
    pub fn tangent(&self, f: FuncId) -> Option<FuncId> {
        self.of.get(&f).copied()
    }
}

/// The name of `f`'s tangent function at width `width`.
pub fn tangent_name(f: &str, width: usize) -> String {
    if width == 1 {
        format!("{f}$tan")
    } else {
        format!("{f}$tan{width}")
    }
}

/// Adds the tangent function of every function in `roots` and of every function they
/// call, carrying `width` directions per sweep. The result verifies.
pub fn tangents(module: &Module, roots: &[FuncId], width: usize) -> Result<Tangents, AdError> {
    tangents_with(module, roots, width, None)
}

/// [`tangents`], plus for `entry = (f, constant)` a tangent function of `f` in which the
/// parameters marked constant have no tangent: no parameter, and no shadow or tangent
/// code unless the constant comes to vary (it escapes into a call, or `f` writes values
/// that depend on the other arguments into it): then a zero shadow of its own, inside
/// the tangent function, carries what passes through it.
pub fn tangents_with(
    module: &Module,
    roots: &[FuncId],
    width: usize,
    entry: Option<(FuncId, Vec<bool>)>,
) -> Result<Tangents, AdError> {
    let width = width.max(1);
    let mut roots = roots.to_vec();
    if let Some((f, _)) = &entry {
        roots.push(*f);
    }
    let roots = &roots[..];
    let mut module = module.clone();
    // The functions reached from the roots.
    let mut todo: Vec<FuncId> = roots.to_vec();
    let mut reached: BTreeSet<FuncId> = BTreeSet::new();
    while let Some(f) = todo.pop() {
        if !reached.insert(f) {
            continue;
        }
        for (_, d) in module.funcs[f].insts.iter() {
            if let Op::Call(g) = d.op {
                todo.push(g);
            }
        }
    }
    // Declare first: calls refer to tangent functions before they are built.
    let mut of = HashMap::new();
    for &f in &reached {
        let primal = &module.funcs[f];
        let name = tangent_name(&primal.name, width);
        if module.func_by_name(&name).is_some() {
            return Err(AdError::internal(&primal.name, format!("`{name}` exists already")));
        }
        let none = vec![false; module.funcs[f].params.len()];
        let (params, ret) = tangent_signature(&mut module.types, &module.funcs[f], width, &none);
        let tf = module.add_function(Function::new(&name, &params, ret));
        of.insert(f, tf);
    }
    for &f in &reached {
        let primal = module.funcs[f].clone();
        let none = vec![false; primal.params.len()];
        let name = tangent_name(&primal.name, width);
        let built = build_or_custom(&mut module, &of, f, &primal, width, &none, &name)?;
        module.funcs[of[&f]] = crate::dce::remove_dead_code(built).into_simplified_cfg();
    }
    let mut special = None;
    if let Some((f, constant)) = entry.filter(|(_, c)| c.iter().any(|&k| k)) {
        let primal = module.funcs[f].clone();
        let name = format!("{}$const", tangent_name(&primal.name, width));
        let built = build_or_custom(&mut module, &of, f, &primal, width, &constant, &name)?;
        let tf = module.add_function(crate::dce::remove_dead_code(built).into_simplified_cfg());
        special = Some((f, tf, constant));
    }
    if let Err(e) = mcir_ir::verify_module(&module) {
        return Err(AdError::internal(&e.func, format!("the tangent IR does not verify: {}", e.message)));
    }
    Ok(Tangents { module, width, of, entry: special })
}

/// The tangent function of `primal` (function `f`): from its hand-written forward or zero
/// rule if it has one, else derived.
fn build_or_custom(
    module: &mut Module,
    tans: &HashMap<FuncId, FuncId>,
    f: FuncId,
    primal: &Function,
    width: usize,
    constant: &[bool],
    name: &str,
) -> Result<Function, AdError> {
    match module.rule_of(f, "forward").cloned() {
        Some(kind) => {
            let (params, ret) = tangent_signature(&mut module.types, primal, width, constant);
            crate::custom::tangent_function(module, f, primal, &kind, width, constant, &params, ret, name)
        }
        None => build(module, tans, primal, width, constant, name),
    }
}

/// The parameters and result of a tangent function.
fn tangent_signature(
    types: &mut TypeTable,
    primal: &Function,
    width: usize,
    constant: &[bool],
) -> (Vec<(Option<String>, TypeId)>, Option<TypeId>) {
    let names: Vec<Option<String>> =
        primal.param_values().iter().map(|&p| primal.values[p].name.clone()).collect();
    let mut params: Vec<(Option<String>, TypeId)> =
        names.iter().cloned().zip(primal.params.iter().copied()).collect();
    for lane in 0..width {
        for (i, (name, &t)) in names.iter().zip(&primal.params).enumerate() {
            if constant.get(i).copied().unwrap_or(false) {
                continue;
            }
            for leaf in leaves(types, t) {
                params.push((tangent_value_name(name, lane, width), tangent_type(types, leaf.ty)));
            }
        }
    }
    (params, tangent_ret(types, primal.ret, width))
}

/// `dx` for `x`, `dx_2` in lane 2 of a wider sweep.
fn tangent_value_name(name: &Option<String>, lane: usize, width: usize) -> Option<String> {
    name.as_ref().map(|n| if width == 1 { format!("d{n}") } else { format!("d{n}_{lane}") })
}

/// One value's tangent in one lane: its rdata leaves (`None` = zero) and its shadows.
#[derive(Clone, Debug, Default)]
struct Tan {
    rdata: Vec<Option<Value>>,
    fdata: Vec<Value>,
}

/// The tangent function under construction.
struct Builder<'a> {
    e: Emit,
    primal: &'a Function,
    tans: &'a HashMap<FuncId, FuncId>,
    width: usize,
    vmap: Vec<Option<Value>>,
    /// `tan[lane][value]`.
    tan: Vec<Vec<Tan>>,
    block_map: Vec<Block>,
    /// Which primal values may have a non-zero tangent (see [`crate::analysis::varied_values`]).
    varied: Vec<bool>,
    /// Each lane's `stack.reserve` of a shadow stack, by the reservation it mirrors (as
    /// copied into the tangent function): a put into the shadow stack indexes from its own reservation, so that
    /// every offset is paired with the stack it was reserved in.
    reserved: HashMap<(Value, usize), Value>,
}

fn build(
    module: &mut Module,
    tans: &HashMap<FuncId, FuncId>,
    primal: &Function,
    width: usize,
    constant: &[bool],
    name: &str,
) -> Result<Function, AdError> {
    let types = &mut module.types;
    let (params, ret) = tangent_signature(types, primal, width, constant);
    let mut func = Function::new(name, &params, ret);
    func.span = primal.span;
    let n = primal.values.len();
    let mut b = Builder {
        e: Emit::new(func),
        primal,
        tans,
        width,
        vmap: vec![None; n],
        tan: vec![vec![Tan::default(); n]; width],
        block_map: Vec::new(),
        varied: crate::analysis::varied_values(types, primal, constant, false),
        reserved: HashMap::new(),
    };
    // Blocks and their parameters: primal ones, then per lane each one's leaves.
    for (blk, data) in primal.blocks.iter() {
        let nb = if blk == primal.entry() { b.e.func.entry() } else { b.e.func.add_block() };
        b.block_map.push(nb);
        if blk == primal.entry() {
            let fparams = b.e.func.param_values().to_vec();
            let mut k = data.params.len();
            for (i, &p) in data.params.iter().enumerate() {
                b.vmap[p.index()] = Some(fparams[i]);
            }
            for lane in 0..width {
                for (i, &p) in data.params.iter().enumerate() {
                    let mut t = Tan::default();
                    let ty = primal.value_type(p);
                    if constant.get(i).copied().unwrap_or(false) {
                        // No tangent comes in: a zero one, with zero shadows that only
                        // stay if a callee needs them.
                        for leaf in leaves(types, ty) {
                            match leaf.kind {
                                LeafKind::Rdata => t.rdata.push(None),
                                LeafKind::Fdata => {
                                    let part = crate::forward::primal_extract(
                                        &mut b.e, types, fparams[i], &leaf.path,
                                    );
                                    t.fdata.push(crate::driver::zero_shadow(&mut b.e, types, leaf.ty, part)?);
                                }
                            }
                        }
                        b.tan[lane][p.index()] = t;
                        continue;
                    }
                    for leaf in leaves(types, ty) {
                        match leaf.kind {
                            LeafKind::Rdata => t.rdata.push(Some(fparams[k])),
                            LeafKind::Fdata => t.fdata.push(fparams[k]),
                        }
                        k += 1;
                    }
                    b.tan[lane][p.index()] = t;
                }
            }
        } else {
            for &p in &data.params {
                let d = &primal.values[p];
                let np = b.e.func.add_block_param(nb, d.ty, d.name.clone());
                b.vmap[p.index()] = Some(np);
            }
            for lane in 0..width {
                for &p in &data.params {
                    let d = primal.values[p].clone();
                    let mut t = Tan::default();
                    for leaf in leaves(types, d.ty) {
                        let ty = tangent_type(types, leaf.ty);
                        let v = b.e.func.add_block_param(nb, ty, tangent_value_name(&d.name, lane, width));
                        match leaf.kind {
                            LeafKind::Rdata => t.rdata.push(Some(v)),
                            LeafKind::Fdata => t.fdata.push(v),
                        }
                    }
                    b.tan[lane][p.index()] = t;
                }
            }
        }
    }
    for (blk, data) in primal.blocks.iter() {
        b.e.block = b.block_map[blk.index()];
        for &inst in &data.insts {
            b.inst(types, inst)?;
        }
        b.e.span = data.term_span;
        let term = match &data.term {
            Terminator::Jump(c) => Terminator::Jump(b.jump(types, c)?),
            Terminator::Branch { cond, then_dest, else_dest } => {
                let cond = b.v(*cond)?;
                let t = b.jump(types, then_dest)?;
                let f = b.jump(types, else_dest)?;
                Terminator::Branch { cond, then_dest: t, else_dest: f }
            }
            Terminator::Return(None) => Terminator::Return(None),
            Terminator::Return(Some(v)) => {
                let mut items = vec![b.v(*v)?];
                for lane in 0..width {
                    items.extend(b.leaves_of(types, lane, *v));
                }
                let ret = b.e.func.ret.unwrap_or(TypeTable::UNIT);
                let t = b.e.val(Op::TupleNew, items, ret);
                Terminator::Return(Some(t))
            }
        };
        let nb = b.block_map[blk.index()];
        b.e.func.set_terminator(nb, term, data.term_span);
    }
    Ok(b.e.func)
}

impl Builder<'_> {
    fn err(&self, message: String) -> AdError {
        AdError::internal(&self.primal.name, message)
    }

    /// The tangent function's copy of a primal value.
    fn v(&self, v: Value) -> Result<Value, AdError> {
        self.vmap.get(v.index()).copied().flatten().ok_or_else(|| self.err(format!("no value for {v}")))
    }

    fn t(&self, lane: usize, v: Value) -> Tan {
        self.tan[lane].get(v.index()).cloned().unwrap_or_default()
    }

    /// The rdata tangent of a scalar (`None` = zero).
    fn dr(&self, lane: usize, v: Value) -> Option<Value> {
        self.tan[lane].get(v.index()).and_then(|t| t.rdata.first().copied().flatten())
    }

    /// The shadow of an address (an array, a cell, a record, a stack). An array that
    /// does not vary has none until one is asked for: then it gets zeros.
    fn ds(&mut self, lane: usize, v: Value) -> Result<Value, AdError> {
        if let Some(s) = self.tan[lane].get(v.index()).and_then(|t| t.fdata.first().copied()) {
            return Ok(s);
        }
        let ty = self.primal.value_type(v);
        if self.varied[v.index()] {
            return Err(self.err(format!("{v} has no shadow")));
        }
        // Not kept for later requests: a later one may be in a block this one does not
        // dominate. Such shadows are only read.
        let pv = self.v(v)?;
        Ok(self.e.val(Op::ZerosLike, vec![pv], ty))
    }

    /// Whether `v` may have a non-zero tangent.
    fn varies(&self, v: Value) -> bool {
        self.varied.get(v.index()).copied().unwrap_or(true)
    }

    fn zero(&mut self) -> Value {
        self.e.fconst(0.0)
    }

    fn or_zero(&mut self, x: Option<Value>) -> Value {
        match x {
            Some(x) => x,
            None => self.zero(),
        }
    }

    /// A value's tangent leaves in one lane, in leaf order, zeros made concrete.
    fn leaves_of(&mut self, types: &TypeTable, lane: usize, v: Value) -> Vec<Value> {
        let t = self.t(lane, v);
        let (mut r, mut f) = (t.rdata.into_iter(), t.fdata.into_iter());
        let mut out = Vec::new();
        for leaf in leaves(types, self.primal.value_type(v)) {
            let x = match leaf.kind {
                LeafKind::Rdata => r.next().flatten(),
                LeafKind::Fdata => f.next(),
            };
            out.push(self.or_zero(x));
        }
        out
    }

    /// A value of the tangent type of `t` from a lane's leaves.
    fn tangent_value(&mut self, types: &mut TypeTable, t: TypeId, tan: &Tan) -> Value {
        let zeros: Vec<Value> = tan.rdata.iter().map(|x| self.or_zero(*x)).collect();
        crate::forward::build_tangent(
            &mut self.e,
            types,
            t,
            &mut zeros.into_iter(),
            &mut tan.fdata.clone().into_iter(),
        )
    }

    /// The leaves of a value `tv` of the tangent type of `t`.
    fn split_tangent(&mut self, types: &TypeTable, t: TypeId, tv: Value) -> Tan {
        let mut out = Tan::default();
        for leaf in leaves(types, t) {
            let x = tangent_extract(&mut self.e, types, tv, &leaf.path);
            match leaf.kind {
                LeafKind::Rdata => out.rdata.push(Some(x)),
                LeafKind::Fdata => out.fdata.push(x),
            }
        }
        out
    }

    /// A jump's arguments: primal ones, then per lane each one's leaves.
    fn jump(&mut self, types: &TypeTable, call: &BlockCall) -> Result<BlockCall, AdError> {
        let mut args = Vec::new();
        for &a in &call.args {
            args.push(self.v(a)?);
        }
        for lane in 0..self.width {
            for &a in &call.args {
                args.extend(self.leaves_of(types, lane, a));
            }
        }
        Ok(BlockCall { block: self.block_map[call.block.index()], args })
    }

    /// `a + b` where either may be zero.
    fn add(&mut self, a: Option<Value>, b: Option<Value>) -> Option<Value> {
        match (a, b) {
            (Some(a), Some(b)) => Some(self.e.add(a, b)),
            (x, None) | (None, x) => x,
        }
    }

    fn inst(&mut self, types: &mut TypeTable, inst: Inst) -> Result<(), AdError> {
        let d = self.primal.insts[inst].clone();
        self.e.span = d.span;
        let args: Vec<Value> = d.args.iter().map(|&a| self.v(a)).collect::<Result<_, _>>()?;
        let rty = d.result.map(|r| self.primal.value_type(r));
        let keep_name = d.result.and_then(|r| self.primal.values[r].name.clone());
        // Calls go to the callee's tangent function, which also gives the tangents.
        if let Op::Call(g) = d.op {
            return self.call(types, &d, g, args, rty, keep_name);
        }
        let r = self.e.func.push_inst(self.e.block, d.op.clone(), args.clone(), rty, d.span);
        if let (Some(pr), Some(nr)) = (d.result, r) {
            self.e.func.values[nr].name = keep_name.clone();
            self.vmap[pr.index()] = Some(nr);
        }
        // A result that does not vary needs no tangent code (ops without a result may
        // still write shadows, and so does `stack.reserve`, whose result is an index).
        let quiet = d.result.is_some_and(|pr| !self.varied[pr.index()]) && d.op != Op::StackReserve;
        for lane in 0..self.width {
            let t = if quiet { None } else { self.rule(types, lane, &d.op, &d.args, &args, r, rty)? };
            // A result whose rule gives no tangent has a zero one: no shadow is needed.
            let t = match (t, rty) {
                (Some(t), _) => Some(t),
                (None, Some(rt)) => {
                    if !quiet && !crate::tangent::fdata_leaves(types, rt).is_empty() {
                        return Err(self.err(format!(
                            "`{}` gives no shadow for its result",
                            crate::rule_name(types, &d.op)
                        )));
                    }
                    Some(Tan { rdata: vec![None; crate::tangent::rdata_count(types, rt)], fdata: Vec::new() })
                }
                (None, None) => None,
            };
            if let (Some(pr), Some(t)) = (d.result, t) {
                for &s in &t.fdata {
                    if self.e.func.values[s].name.is_none() {
                        let n = keep_name.as_ref().map(|n| format!("d{n}"));
                        self.e.func.values[s].name = n;
                    }
                }
                self.tan[lane][pr.index()] = t;
            }
        }
        Ok(())
    }

    fn call(
        &mut self,
        types: &mut TypeTable,
        d: &mcir_ir::InstData,
        g: FuncId,
        args: Vec<Value>,
        rty: Option<TypeId>,
        keep_name: Option<String>,
    ) -> Result<(), AdError> {
        let tg = *self.tans.get(&g).ok_or_else(|| self.err(format!("no tangent function for {g}")))?;
        let mut cargs = args;
        for lane in 0..self.width {
            for &a in &d.args {
                cargs.extend(self.leaves_of(types, lane, a));
            }
        }
        let ret = tangent_ret(types, rty, self.width);
        let out = self.e.func.push_inst(self.e.block, Op::Call(tg), cargs, ret, d.span);
        if let (Some(pr), Some(out), Some(rt)) = (d.result, out, rty) {
            let y = self.e.tuple_get(types, out, 0);
            self.e.name(y, keep_name.clone());
            self.vmap[pr.index()] = Some(y);
            let mut k = 1;
            for lane in 0..self.width {
                let mut t = Tan::default();
                for leaf in leaves(types, rt) {
                    let x = self.e.tuple_get(types, out, k);
                    k += 1;
                    match leaf.kind {
                        LeafKind::Rdata => t.rdata.push(Some(x)),
                        LeafKind::Fdata => t.fdata.push(x),
                    }
                }
                self.tan[lane][pr.index()] = t;
            }
        }
        Ok(())
    }

    /// The tangent of an op's result in one lane, after emitting what it writes to
    /// shadows. `pa` are the primal operands, `a` their copies, `r` the result's copy.
    #[allow(clippy::too_many_arguments)]
    fn rule(
        &mut self,
        types: &mut TypeTable,
        lane: usize,
        op: &Op,
        pa: &[Value],
        a: &[Value],
        r: Option<Value>,
        rty: Option<TypeId>,
    ) -> Result<Option<Tan>, AdError> {
        let scalar = |x: Option<Value>| Some(Tan { rdata: vec![x], fdata: Vec::new() });
        let shadow = |x: Value| Some(Tan { rdata: Vec::new(), fdata: vec![x] });
        let varied = self.varied.clone();
        let f64_array = |types: &TypeTable, v: Value, f: &Function| {
            has_tangent(types, f.value_type(v)) && varied.get(v.index()).copied().unwrap_or(true)
        };
        let r_or =
            |r: Option<Value>| r.ok_or_else(|| AdError::internal("", "an op without its result".into()));
        Ok(match op {
            Op::FConst(_)
            | Op::IConst(_)
            | Op::BConst(_)
            | Op::IBinary(_)
            | Op::IUnary(_)
            | Op::FCmp(_)
            | Op::ICmp(_)
            | Op::BCmp(_)
            | Op::Not
            | Op::IToF
            | Op::FToI
            | Op::ArrayDim(_)
            | Op::SharesMemory
            | Op::ExpectDim(_)
            | Op::MapIBinary(_)
            | Op::ArenaMark
            | Op::ArenaRelease
            | Op::TapeMark
            | Op::TapeRelease
            | Op::Print => None,
            Op::FBinary(bop) => {
                let (tx, ty) = (self.dr(lane, pa[0]), self.dr(lane, pa[1]));
                scalar(self.binary(*bop, a[0], a[1], r_or(r)?, tx, ty))
            }
            Op::FUnary(u) => {
                let t = match self.dr(lane, pa[0]) {
                    Some(g) => crate::rules::unary_times(&mut self.e, *u, Some(a[0]), r, g),
                    None => None,
                };
                scalar(t)
            }
            Op::FPowI => {
                let t = self.dr(lane, pa[0]).map(|g| crate::rules::powi_times(&mut self.e, a[0], a[1], g));
                scalar(t)
            }
            Op::Linearized => {
                // `dy = Σ jₖ · dxₖ`, whatever `y` and the `jₖ` are made of.
                let mut sum: Option<Value> = None;
                for k in (1..pa.len()).step_by(2) {
                    if let Some(dx) = self.dr(lane, pa[k + 1]) {
                        let t = self.e.mul(a[k], dx);
                        sum = Some(match sum {
                            Some(s) => self.e.add(s, t),
                            None => t,
                        });
                    }
                }
                scalar(sum)
            }
            Op::Select => {
                let (tb, tc) = (self.t(lane, pa[1]), self.t(lane, pa[2]));
                let mut out = Tan::default();
                for (x, y) in tb.rdata.iter().zip(&tc.rdata) {
                    out.rdata.push(match (x, y) {
                        (None, None) => None,
                        _ => {
                            let (x, y) = (self.or_zero(*x), self.or_zero(*y));
                            let ty = self.e.ty(x);
                            Some(self.e.val(Op::Select, vec![a[0], x, y], ty))
                        }
                    });
                }
                for (&x, &y) in tb.fdata.iter().zip(&tc.fdata) {
                    let ty = self.e.ty(x);
                    out.fdata.push(self.e.val(Op::Select, vec![a[0], x, y], ty));
                }
                Some(out)
            }
            Op::ArrayFill => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let x = self.dr(lane, pa[0]);
                let x = self.or_zero(x);
                let s = self.e.val(Op::ArrayFill, [vec![x], a[1..].to_vec()].concat(), rt);
                shadow(s)
            }
            Op::ArrayLit(_) => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let xs: Vec<Value> = pa
                    .iter()
                    .map(|&x| {
                        let t = self.dr(lane, x);
                        self.or_zero(t)
                    })
                    .collect();
                shadow(self.e.val(op.clone(), xs, rt))
            }
            Op::Load | Op::TrustedLoad => {
                if !f64_array(types, pa[0], self.primal) {
                    return Ok(None);
                }
                // The primal access has just checked the index, and a shadow has its
                // primal's shape.
                let s = self.ds(lane, pa[0])?;
                scalar(Some(self.e.val(Op::TrustedLoad, [vec![s], a[1..].to_vec()].concat(), TypeTable::F64)))
            }
            Op::Store | Op::TrustedStore => {
                // An array that does not vary is only ever written values that do not.
                if f64_array(types, pa[0], self.primal) && self.varies(pa[0]) {
                    let s = self.ds(lane, pa[0])?;
                    let x = self.dr(lane, pa[pa.len() - 1]);
                    let x = self.or_zero(x);
                    self.e.eff(Op::TrustedStore, [vec![s], a[1..a.len() - 1].to_vec(), vec![x]].concat());
                }
                None
            }
            Op::ArrayCopy => {
                if !has_tangent(types, self.primal.value_type(pa[0])) {
                    return Ok(None);
                }
                let s = self.ds(lane, pa[0])?;
                let ty = self.e.ty(s);
                shadow(self.e.val(Op::ArrayCopy, vec![s], ty))
            }
            Op::CopyInto => {
                // A destination that varies takes the source's shadow, zeros if it has none.
                if f64_array(types, pa[0], self.primal) && self.varies(pa[0]) {
                    let (sd, ss) = (self.ds(lane, pa[0])?, self.ds(lane, pa[1])?);
                    self.e.eff(Op::CopyInto, vec![sd, ss]);
                }
                None
            }
            Op::Sum => {
                if !f64_array(types, pa[0], self.primal) {
                    return Ok(None);
                }
                let s = self.ds(lane, pa[0])?;
                scalar(Some(self.e.val(Op::Sum, vec![s], TypeTable::F64)))
            }
            Op::Dot => {
                let u = match self.array_or_scalar_tangent(lane, pa[0])? {
                    Some(sx) => Some(self.e.val(Op::Dot, vec![sx, a[1]], TypeTable::F64)),
                    None => None,
                };
                let v = match self.array_or_scalar_tangent(lane, pa[1])? {
                    Some(sy) => Some(self.e.val(Op::Dot, vec![a[0], sy], TypeTable::F64)),
                    None => None,
                };
                scalar(self.add(u, v))
            }
            Op::MapFBinary(bop) => {
                let start = self.emitted();
                let tx = self.array_or_scalar_tangent(lane, pa[0])?;
                let ty = self.array_or_scalar_tangent(lane, pa[1])?;
                let rv = r_or(r)?;
                let t = self.binary(*bop, a[0], a[1], rv, tx, ty);
                shadow(self.fresh_array(t, rv, start))
            }
            Op::MapFUnary(u) => {
                let start = self.emitted();
                let rv = r_or(r)?;
                let t = match self.array_or_scalar_tangent(lane, pa[0])? {
                    Some(s) => crate::rules::unary_times(&mut self.e, *u, Some(a[0]), Some(rv), s),
                    None => None,
                };
                shadow(self.fresh_array(t, rv, start))
            }
            Op::MapFPowI => {
                let start = self.emitted();
                let rv = r_or(r)?;
                let t = match self.array_or_scalar_tangent(lane, pa[0])? {
                    Some(s) => Some(crate::rules::powi_times(&mut self.e, a[0], a[1], s)),
                    None => None,
                };
                shadow(self.fresh_array(t, rv, start))
            }
            Op::MatMul(_) | Op::MatVec(_) => {
                // d(op(A) op(B)) = op(dA) op(B) + op(A) op(dB); likewise for op(A) x.
                let rv = r_or(r)?;
                let rt = self.e.ty(rv);
                let ta = self.array_or_scalar_tangent(lane, pa[0])?;
                let tb = self.array_or_scalar_tangent(lane, pa[1])?;
                let acc = match op {
                    Op::MatMul(t) => Op::MatMulAcc(*t),
                    Op::MatVec(t) => Op::MatVecAcc(*t),
                    _ => return Err(self.err("not a product".into())),
                };
                let out = match ta {
                    Some(ta) => self.e.val(op.clone(), vec![ta, a[1]], rt),
                    None => self.e.val(Op::ZerosLike, vec![rv], rt),
                };
                if let Some(tb) = tb {
                    self.e.eff(acc, vec![out, a[0], tb]);
                }
                shadow(out)
            }
            Op::Transpose => {
                let rv = r_or(r)?;
                let rt = self.e.ty(rv);
                let t = match self.array_or_scalar_tangent(lane, pa[0])? {
                    Some(ta) => self.e.val(Op::Transpose, vec![ta], rt),
                    None => self.e.val(Op::ZerosLike, vec![rv], rt),
                };
                shadow(t)
            }
            Op::MatMulAcc(_) | Op::MatVecAcc(_) | Op::OuterAcc => {
                // d(C += L R) = dL R + L dR, added into C's shadow.
                if !self.varies(pa[0]) {
                    return Ok(None);
                }
                let sd = self.ds(lane, pa[0])?;
                if let Some(tl) = self.array_or_scalar_tangent(lane, pa[1])? {
                    self.e.eff(op.clone(), vec![sd, tl, a[2]]);
                }
                if let Some(tr) = self.array_or_scalar_tangent(lane, pa[2])? {
                    self.e.eff(op.clone(), vec![sd, a[1], tr]);
                }
                None
            }
            Op::RefNew => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let ct = self.primal.value_type(pa[0]);
                let tan = self.t(lane, pa[0]);
                let tv = self.tangent_value(types, ct, &tan);
                let sty = tangent_type(types, rt);
                shadow(self.e.val(Op::RefNew, vec![tv], sty))
            }
            Op::RefLoad | Op::MutLoad(..) | Op::StackPop | Op::StackPeek => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let cell = self.ds(lane, pa[0])?;
                let load = match op {
                    Op::MutLoad(s, i) => Op::MutLoad(shadow_struct(types, *s)?, *i),
                    other => other.clone(),
                };
                let tan_ty = tangent_type(types, rt);
                let tv = self.e.val(load, vec![cell], tan_ty);
                Some(self.split_tangent(types, rt, tv))
            }
            Op::RefStore | Op::MutStore(..) | Op::StackPush => {
                let ct = self.primal.value_type(pa[1]);
                if has_tangent(types, ct) {
                    let cell = self.ds(lane, pa[0])?;
                    let tan = self.t(lane, pa[1]);
                    let tv = self.tangent_value(types, ct, &tan);
                    let store = match op {
                        Op::MutStore(s, i) => Op::MutStore(shadow_struct(types, *s)?, *i),
                        other => other.clone(),
                    };
                    self.e.eff(store, vec![cell, tv]);
                }
                None
            }
            // Never read, so neither is its tangent: zero leaves, and placeholders for
            // the shadows of addresses.
            Op::Unset => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let mut tan = Tan::default();
                for leaf in crate::tangent::leaves(types, rt) {
                    match leaf.kind {
                        LeafKind::Rdata => tan.rdata.push(None),
                        LeafKind::Fdata => {
                            let ty = tangent_type(types, leaf.ty);
                            tan.fdata.push(self.e.val(Op::Unset, vec![], ty));
                        }
                    }
                }
                Some(tan)
            }
            Op::StackNew => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let sty = tangent_type(types, rt);
                shadow(self.e.val(Op::StackNew, vec![], sty))
            }
            // The shadow stack is kept level with its stack: the same room, the same index.
            Op::StackReserve => {
                if has_tangent(types, self.primal.value_type(pa[0])) {
                    let cell = self.ds(lane, pa[0])?;
                    let mut args = vec![cell];
                    args.extend_from_slice(&a[1..]);
                    let base = self.e.val(Op::StackReserve, args, TypeTable::I64);
                    if let Some(r) = r {
                        self.reserved.insert((r, lane), base);
                    }
                }
                None
            }
            Op::StackPut => {
                let ct = self.primal.value_type(pa[3]);
                if has_tangent(types, ct) {
                    let cell = self.ds(lane, pa[0])?;
                    let base = self.reserved.get(&(a[1], lane)).copied().unwrap_or(a[1]);
                    let mut args = vec![cell, base, a[2]];
                    // A record's tangent is the record of its values' tangents.
                    for &v in &pa[3..] {
                        let tan = self.t(lane, v);
                        args.push(self.tangent_value(types, ct, &tan));
                    }
                    self.e.eff(Op::StackPut, args);
                }
                None
            }
            Op::TupleNew => Some(self.fields_tangent(lane, pa)),
            Op::StructNew(s) => {
                // An immutable struct's tangent is its fields' leaves, unless it holds
                // itself: then, as for a mut struct, one value of its tangent struct.
                if !types.struct_def(*s).mutable && !rty.is_some_and(|t| holds_itself(types, t)) {
                    return Ok(Some(self.fields_tangent(lane, pa)));
                }
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let ss = shadow_struct(types, *s)?;
                let mut fields = Vec::new();
                for &x in pa {
                    let tan = self.t(lane, x);
                    fields.push(self.tangent_value(types, self.primal.value_type(x), &tan));
                }
                let sty = tangent_type(types, rt);
                shadow(self.e.val(Op::StructNew(ss), fields, sty))
            }
            Op::StructGet(s, i) if holds_itself(types, self.primal.value_type(pa[0])) => {
                let Some(rt) = rty.filter(|&t| has_tangent(types, t)) else { return Ok(None) };
                let Some(&whole) = self.t(lane, pa[0]).fdata.first() else { return Ok(None) };
                let ss = shadow_struct(types, *s)?;
                let tan_ty = tangent_type(types, rt);
                let tv = self.e.val(Op::StructGet(ss, *i), vec![whole], tan_ty);
                Some(self.split_tangent(types, rt, tv))
            }
            Op::TupleGet(i) | Op::StructGet(_, i) => {
                let at = self.primal.value_type(pa[0]);
                let t = self.t(lane, pa[0]);
                let rr = field_leaf_ranges(types, at, LeafKind::Rdata);
                let fr = field_leaf_ranges(types, at, LeafKind::Fdata);
                let i = *i as usize;
                Some(Tan {
                    rdata: rr.get(i).and_then(|r| t.rdata.get(r.clone())).unwrap_or(&[]).to_vec(),
                    fdata: fr.get(i).and_then(|r| t.fdata.get(r.clone())).unwrap_or(&[]).to_vec(),
                })
            }
            Op::ZerosLike => {
                let rv = r_or(r)?;
                let ty = self.e.ty(rv);
                shadow(self.e.val(Op::ZerosLike, vec![rv], ty))
            }
            Op::AddInto => {
                if !self.varies(pa[0]) {
                    return Ok(None);
                }
                let sd = self.ds(lane, pa[0])?;
                let src = self.array_or_scalar_tangent(lane, pa[1])?;
                if let Some(src) = src {
                    self.e.eff(Op::AddInto, vec![sd, src]);
                }
                None
            }
            Op::Axpy => {
                // dst += alpha x: d(dst) += d(alpha) x + alpha d(x).
                if !self.varies(pa[0]) {
                    return Ok(None);
                }
                let sd = self.ds(lane, pa[0])?;
                if let Some(ta) = self.dr(lane, pa[1]) {
                    self.e.eff(Op::Axpy, vec![sd, ta, a[2]]);
                }
                if let Some(sx) = self.array_or_scalar_tangent(lane, pa[2])? {
                    self.e.eff(Op::Axpy, vec![sd, a[1], sx]);
                }
                None
            }
            Op::MoveAdd => {
                if self.varies(pa[1]) {
                    let (sd, ss) = (self.ds(lane, pa[0])?, self.ds(lane, pa[1])?);
                    self.e.eff(Op::MoveAdd, vec![sd, ss]);
                }
                None
            }
            Op::Call(_) => return Err(self.err("calls are handled apart".into())),
        })
    }

    /// An operand's tangent for an elementwise op: a shadow for an array, an rdata
    /// tangent (maybe zero) for a scalar.
    fn array_or_scalar_tangent(&mut self, lane: usize, x: Value) -> Result<Option<Value>, AdError> {
        if self.primal.value_type(x) == TypeTable::F64 {
            Ok(self.dr(lane, x))
        } else if !self.varies(x) {
            Ok(None)
        } else {
            self.ds(lane, x).map(Some)
        }
    }

    /// The tangent of a tuple or value struct made of `fields`: their leaves, in order.
    fn fields_tangent(&self, lane: usize, fields: &[Value]) -> Tan {
        let mut out = Tan::default();
        for &x in fields {
            let t = self.t(lane, x);
            out.rdata.extend(t.rdata);
            out.fdata.extend(t.fdata);
        }
        out
    }

    /// How many instructions the current block holds.
    fn emitted(&self) -> usize {
        self.e.func.blocks[self.e.block].insts.len()
    }

    /// A fresh array holding tangent `t` of the array `r` (a copy when `t` is an operand's
    /// shadow, zeros when it is zero), so that the result's shadow never aliases another.
    /// `start` is where the rule began emitting: an array computed since is its own.
    fn fresh_array(&mut self, t: Option<Value>, r: Value, start: usize) -> Value {
        let rty = self.e.ty(r);
        match t {
            None => self.e.val(Op::ZerosLike, vec![r], rty),
            Some(t) if self.e.ty(t) != rty => {
                // A scalar tangent of an elementwise op's result: spread it.
                let z = self.e.val(Op::ZerosLike, vec![r], rty);
                self.e.eff(Op::AddInto, vec![z, t]);
                z
            }
            Some(t) if self.emitted_since(t, start) => t,
            Some(t) => self.e.val(Op::ArrayCopy, vec![t], rty),
        }
    }

    /// Whether `v` is the result of an instruction emitted since position `start` of the
    /// current block (every array op there makes a fresh array).
    fn emitted_since(&self, v: Value, start: usize) -> bool {
        match self.e.func.values[v].def {
            mcir_ir::ValueDef::Inst(i) => {
                self.e.func.blocks[self.e.block].insts[start.min(self.emitted())..].contains(&i)
            }
            _ => false,
        }
    }

    /// The tangent of `x op y` given the operands' tangents (`None` = zero), scalar or
    /// elementwise; `r` is the result.
    fn binary(
        &mut self,
        op: FBinOp,
        x: Value,
        y: Value,
        r: Value,
        tx: Option<Value>,
        ty: Option<Value>,
    ) -> Option<Value> {
        if tx.is_none() && ty.is_none() {
            return None;
        }
        match op {
            FBinOp::Add => self.add(tx, ty),
            FBinOp::Sub => {
                let ny = ty.map(|t| self.e.neg(t));
                self.add(tx, ny)
            }
            FBinOp::Mul => {
                let u = tx.map(|t| self.e.mul(t, y));
                let v = ty.map(|t| self.e.mul(x, t));
                self.add(u, v)
            }
            FBinOp::Div => {
                // (tx - r ty) / y
                let ry = ty.map(|t| {
                    let m = self.e.mul(r, t);
                    self.e.neg(m)
                });
                let num = self.add(tx, ry)?;
                Some(self.e.div(num, y))
            }
            FBinOp::Pow => {
                let u = tx.map(|t| {
                    let one = self.e.fconst(1.0);
                    let ym1 = self.e.sub(y, one);
                    let p = self.e.bin(FBinOp::Pow, x, ym1);
                    let p = self.e.mul(p, y);
                    self.e.mul(t, p)
                });
                let v = ty.map(|t| {
                    let l = self.e.un(mcir_ir::FUnOp::Log, x);
                    let p = self.e.mul(r, l);
                    self.e.mul(t, p)
                });
                self.add(u, v)
            }
            FBinOp::Min | FBinOp::Max => {
                // `y` wins only when strictly better: ties go to `x`.
                let pred = if op == FBinOp::Min { CmpOp::Lt } else { CmpOp::Gt };
                let y_wins = self.e.val(Op::FCmp(pred), vec![y, x], TypeTable::BOOL);
                let (tx, ty) = (self.or_zero(tx), self.or_zero(ty));
                Some(self.e.val(Op::Select, vec![y_wins, ty, tx], TypeTable::F64))
            }
            FBinOp::Atan2 => {
                // atan2(p, q)' = (q dp - p dq) / (p² + q²)
                let pp = self.e.mul(x, x);
                let qq = self.e.mul(y, y);
                let den = self.e.add(pp, qq);
                let u = tx.map(|t| self.e.mul(t, y));
                let v = ty.map(|t| {
                    let m = self.e.mul(x, t);
                    self.e.neg(m)
                });
                let num = self.add(u, v)?;
                Some(self.e.div(num, den))
            }
        }
    }
}

/// The result of a tangent function whose primal returns `r`: `(y, leaves.. per lane)`.
fn tangent_ret(types: &mut TypeTable, r: Option<TypeId>, width: usize) -> Option<TypeId> {
    r.map(|r| {
        let mut items = vec![r];
        for _ in 0..width {
            for leaf in leaves(types, r) {
                items.push(tangent_type(types, leaf.ty));
            }
        }
        types.intern(Type::Tuple(items))
    })
}

/// Adds `f$jvp` (width 1) for `f`, whose tangent function must exist in `t`, and returns
/// its id. Its parameters are `f`'s, then one value of tangent type per parameter (`()`
/// where there is none); it returns `(value, tangent of the value, tangent of each
/// argument's state after the call)`. The arguments' tangents are the values passed in:
/// their address-identified parts are the shadows, updated in place.
pub fn jvp_driver(t: &mut Tangents, f: FuncId) -> Result<FuncId, AdError> {
    let primal = t.module.funcs[f].clone();
    // The entry's tangent function for constant arguments, if there is one for `f`.
    let (tan_fn, constant) = match &t.entry {
        Some((ef, tf, c)) if *ef == f => (*tf, c.clone()),
        _ => (
            t.tangent(f).ok_or_else(|| AdError::internal(&primal.name, "no tangent function".into()))?,
            vec![false; primal.params.len()],
        ),
    };
    let width = t.width;
    let types = &mut t.module.types;
    let mut params: Vec<(Option<String>, TypeId)> = Vec::new();
    let names: Vec<Option<String>> =
        primal.param_values().iter().map(|&p| primal.values[p].name.clone()).collect();
    for (name, &ty) in names.iter().zip(&primal.params) {
        params.push((name.clone(), ty));
    }
    for lane in 0..width {
        for (name, &ty) in names.iter().zip(&primal.params) {
            params.push((tangent_value_name(name, lane, width), tangent_type(types, ty)));
        }
    }
    let ret_ty = primal.ret.unwrap_or(TypeTable::UNIT);
    let mut outs = vec![ret_ty];
    for _ in 0..width {
        outs.push(tangent_type(types, ret_ty));
        for &ty in &primal.params {
            outs.push(tangent_type(types, ty));
        }
    }
    let ret = types.intern(Type::Tuple(outs));
    let name =
        if width == 1 { format!("{}$jvp", primal.name) } else { format!("{}$jvp{width}", primal.name) };
    let mut e = Emit::new(Function::new(&name, &params, Some(ret)));
    e.span = primal.span;
    let pv = e.func.param_values().to_vec();
    let np = primal.params.len();
    let mut cargs: Vec<Value> = pv[..np].to_vec();
    for lane in 0..width {
        for (i, &ty) in primal.params.iter().enumerate() {
            if constant.get(i).copied().unwrap_or(false) {
                continue;
            }
            let tv = pv[np * (1 + lane) + i];
            for leaf in leaves(types, ty) {
                cargs.push(tangent_extract(&mut e, types, tv, &leaf.path));
            }
        }
    }
    let tan_ret = tangent_ret(types, primal.ret, width);
    let out = e.func.push_inst(e.block, Op::Call(tan_fn), cargs, tan_ret, primal.span);
    let mut items = Vec::new();
    match (out, primal.ret) {
        (Some(out), Some(r)) => {
            items.push(e.tuple_get(types, out, 0));
            let n = leaves(types, r).len();
            for lane in 0..width {
                let mut rdata = Vec::new();
                let mut fdata = Vec::new();
                for (k, leaf) in leaves(types, r).into_iter().enumerate() {
                    let x = e.tuple_get(types, out, (1 + lane * n + k) as u32);
                    match leaf.kind {
                        LeafKind::Rdata => rdata.push(x),
                        LeafKind::Fdata => fdata.push(x),
                    }
                }
                let ty = crate::forward::build_tangent(
                    &mut e,
                    types,
                    r,
                    &mut rdata.into_iter(),
                    &mut fdata.into_iter(),
                );
                items.push(ty);
                items.extend((0..np).map(|i| pv[np * (1 + lane) + i]));
            }
        }
        _ => {
            items.push(e.unit());
            for lane in 0..width {
                items.push(e.unit());
                items.extend((0..np).map(|i| pv[np * (1 + lane) + i]));
            }
        }
    }
    let result = e.val(Op::TupleNew, items, ret);
    let block = e.block;
    e.func.set_terminator(block, Terminator::Return(Some(result)), primal.span);
    let id = t.module.add_function(e.func);
    if let Err(err) = mcir_ir::verify_function(&t.module, &t.module.funcs[id]) {
        return Err(AdError::internal(
            &primal.name,
            format!("the JVP driver does not verify: {}", err.message),
        ));
    }
    Ok(id)
}
