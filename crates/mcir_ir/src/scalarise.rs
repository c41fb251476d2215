//! Small arrays that never escape become SSA values: no allocation, no memory traffic.
//!
//! A helper that writes its results into an `out` array, once inlined, leaves the
//! caller with a fresh array of two or three elements that it fills and reads back
//! (`let f = zeros(2); force(px, py, f); vel += dt * f[0]`). As memory, each of those
//! elements costs a store and a load in the primal and, worse, an overwrite that the
//! reverse pass must undo: its old value kept per iteration. As values, they cost
//! nothing.
//!
//! An array qualifies when it is made fresh (`array.fill` with constant extents or
//! `array.lit`) with at most [`MAX_ELEMENTS`] elements, and every use of it is a load or
//! a store at constant indices within its extents, or `array.dim`: it is never passed,
//! stored, returned, jumped with, or read by a kernel, so nothing else can see it. Each
//! element becomes a variable: a load reads its current value, a store sets it, and
//! where paths meet each block dominated by the array's definition receives the
//! current values as block parameters (those that carry nothing, being dead or the
//! same value on every edge, are removed again).

use crate::cfg::ControlFlow;
use crate::function::*;
use crate::op::Op;
use crate::types::{Type, TypeId, TypeTable};
use std::collections::{HashMap, HashSet};

/// The most elements an array may have to become values.
pub const MAX_ELEMENTS: usize = 16;

/// `module` with the small arrays of each function that never escape made values, and
/// its tuples of scalars passed between blocks split into their fields.
pub fn scalarise_small_arrays(mut module: Module) -> Module {
    let ids: Vec<FuncId> = module.funcs.keys().collect();
    for id in ids {
        let f = std::mem::replace(&mut module.funcs[id], Function::new("", &[], None));
        module.funcs[id] = split_tuple_params(scalarise(f, &module.types), &module.types);
    }
    module
}

/// `f` with each block parameter that is a tuple of scalars (other than the entry's)
/// replaced by one parameter per field: a jump passes the fields (the operands of the
/// `tuple.new` that made its argument, or projections of it), the block's projections
/// of the parameter read the field parameters, and any other use reads a tuple made
/// again from them at the block's start.
///
/// Why: native code keeps a tuple in registers only while nothing but projections read
/// it; one that flows into a join (a recursion whose base case is inlined at its call
/// sites, `let a = if … { (x, y) } else { f(…) }`) was made in the call's memory, which
/// grew with every call of a recursion until the outermost call returned.
pub fn split_tuple_params(mut f: Function, types: &TypeTable) -> Function {
    let blocks: Vec<Block> = f.blocks.keys().skip(1).collect();
    for b in blocks {
        let tuples: Vec<(Value, Vec<TypeId>)> = f.blocks[b]
            .params
            .iter()
            .filter_map(|&p| match types.try_get(f.value_type(p)) {
                Some(Type::Tuple(fields))
                    if !fields.is_empty()
                        && fields.len() <= MAX_ELEMENTS
                        && fields.iter().all(|&t| matches!(types.try_get(t), Some(Type::Scalar(_)))) =>
                {
                    Some((p, fields.clone()))
                }
                _ => None,
            })
            .collect();
        for (p, fields) in tuples {
            split_param(&mut f, b, p, &fields);
        }
    }
    f
}

fn split_param(f: &mut Function, b: Block, p: Value, fields: &[TypeId]) {
    let Some(k) = f.blocks[b].params.iter().position(|&q| q == p) else { return };
    let name = f.values[p].name.clone();
    let parts: Vec<Value> = fields
        .iter()
        .enumerate()
        .map(|(i, &t)| f.add_block_param(b, t, name.as_ref().map(|n| format!("{n}_{i}"))))
        .collect();
    // Each edge into `b` passes the fields of what it passed.
    let mut edges = Vec::new();
    for (c, data) in f.blocks.iter() {
        for (e, edge) in data.term.successors().enumerate() {
            if edge.block == b {
                if let Some(&a) = edge.args.get(k) {
                    edges.push((c, e, a));
                }
            }
        }
    }
    for (c, e, a) in edges {
        let made = f.defining(a).filter(|d| d.op == Op::TupleNew).map(|d| d.args.clone());
        let values: Vec<Value> = match made {
            Some(args) if args.len() == fields.len() => args,
            _ => {
                let span = f.blocks[c].term_span;
                (0..fields.len())
                    .map(|i| f.push_value(c, Op::TupleGet(i as u32), vec![a], fields[i], span))
                    .collect()
            }
        };
        if let Some(edge) = f.blocks[c].term.successors_mut().nth(e) {
            edge.args.extend(values);
        }
    }
    // Projections read the field parameters; anything else a tuple made again.
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let mut others = false;
    let block_ids: Vec<Block> = f.blocks.keys().collect();
    for c in &block_ids {
        let insts = std::mem::take(&mut f.blocks[*c].insts);
        let mut kept = Vec::with_capacity(insts.len());
        for i in insts {
            let d = &f.insts[i];
            match (&d.op, d.result) {
                (Op::TupleGet(field), Some(r)) if d.args[0] == p => {
                    if let Some(&part) = parts.get(*field as usize) {
                        subst.insert(r, part);
                        continue;
                    }
                    others = true;
                }
                _ => others |= d.args.contains(&p),
            }
            kept.push(i);
        }
        f.blocks[*c].insts = kept;
        others |= f.blocks[*c].term.uses().contains(&p);
    }
    if others {
        let span = f.blocks[b].term_span;
        let whole = f.push_value(b, Op::TupleNew, parts.clone(), f.value_type(p), span);
        if let Some(i) = f.blocks[b].insts.pop() {
            f.blocks[b].insts.insert(0, i);
        }
        f.values[whole].name = name;
        subst.insert(p, whole);
    }
    f.substitute(&subst);
    remove_param(f, b, p);
}

/// `f` with its small arrays that never escape made values (see the module docs).
pub fn scalarise(mut f: Function, types: &TypeTable) -> Function {
    // Candidates once; each transformation leaves the others' uses as they were.
    let candidates: Vec<Inst> =
        placed_insts(&f).into_iter().filter(|&i| fresh_extents(&f, types, i).is_some()).collect();
    for def in candidates {
        if let Some(plan) = Plan::of(&f, types, def) {
            plan.apply(&mut f);
        }
    }
    f
}

fn placed_insts(f: &Function) -> Vec<Inst> {
    f.blocks.values().flat_map(|b| b.insts.iter().copied()).collect()
}

/// The extents of the fresh array `def` makes, if it is small enough and of scalars.
pub(crate) fn fresh_extents(f: &Function, types: &TypeTable, def: Inst) -> Option<Vec<i64>> {
    let d = &f.insts[def];
    let r = d.result?;
    let Some(Type::Array { .. }) = types.try_get(f.value_type(r)) else { return None };
    let dims: Vec<i64> = match &d.op {
        Op::ArrayFill => d.args[1..].iter().map(|&a| f.const_int(a)).collect::<Option<_>>()?,
        Op::ArrayLit(shape) => shape.iter().map(|&n| i64::from(n)).collect(),
        _ => return None,
    };
    let count = dims.iter().try_fold(1i64, |a, &n| if n < 0 { None } else { a.checked_mul(n) })?;
    (count as u64 <= MAX_ELEMENTS as u64 && count > 0).then_some(dims)
}

/// One array to turn into values.
struct Plan {
    def: Inst,
    array: Value,
    dims: Vec<i64>,
    /// The element type.
    elem: TypeId,
    /// Where the array is defined.
    home: Block,
    /// Blocks strictly dominated by `home`'s definition that receive the elements as
    /// parameters: every reachable block dominated by `home`, except `home`.
    receivers: Vec<Block>,
}

impl Plan {
    fn of(f: &Function, types: &TypeTable, def: Inst) -> Option<Plan> {
        let dims = fresh_extents(f, types, def)?;
        let d = &f.insts[def];
        let array = d.result?;
        let elem = match &d.op {
            Op::ArrayFill => f.value_type(d.args[0]),
            _ => match types.try_get(f.value_type(array)) {
                Some(Type::Array { elem, .. }) => TypeTable::scalar(*elem),
                _ => return None,
            },
        };
        let cfg = ControlFlow::compute(f);
        let home = f.blocks.iter().find(|(_, b)| b.insts.contains(&def)).map(|(b, _)| b)?;
        if !cfg.is_reachable(home) {
            return None;
        }
        // Every use: an element access at constant indices in range, or an extent.
        for (b, data) in f.blocks.iter() {
            if data.term.uses().contains(&array) {
                return None;
            }
            for &i in &data.insts {
                let u = &f.insts[i];
                if !u.args.contains(&array) {
                    continue;
                }
                if !cfg.is_reachable(b) || !cfg.dominates(home, b) {
                    return None;
                }
                let ok = match u.op {
                    Op::Load | Op::TrustedLoad => {
                        u.args[0] == array && flat_index(f, &dims, &u.args[1..]).is_some()
                    }
                    Op::Store | Op::TrustedStore => {
                        let n = u.args.len();
                        u.args[0] == array
                            && u.args[n - 1] != array
                            && flat_index(f, &dims, &u.args[1..n - 1]).is_some()
                    }
                    Op::ArrayDim(k) => (k as usize) < dims.len(),
                    _ => false,
                };
                if !ok {
                    return None;
                }
            }
        }
        let receivers = cfg.rpo.iter().copied().filter(|&b| b != home && cfg.dominates(home, b)).collect();
        Some(Plan { def, array, dims, elem, home, receivers })
    }

    fn apply(self, f: &mut Function) {
        let count = self.dims.iter().product::<i64>() as usize;
        let mut added: HashMap<Block, Vec<Value>> = HashMap::new();
        for &b in &self.receivers {
            let params = (0..count).map(|_| f.add_block_param(b, self.elem, None)).collect();
            added.insert(b, params);
        }
        let initial: Vec<Value> = {
            let d = &f.insts[self.def];
            match d.op {
                Op::ArrayFill => vec![d.args[0]; count],
                _ => d.args.clone(),
            }
        };
        let mut subst: HashMap<Value, Value> = HashMap::new();
        let resolve = |subst: &HashMap<Value, Value>, mut v: Value| {
            while let Some(&w) = subst.get(&v) {
                v = w;
            }
            v
        };
        let mut blocks = vec![self.home];
        blocks.extend(&self.receivers);
        for b in blocks {
            let insts = f.blocks[b].insts.clone();
            let (mut current, start) = if b == self.home {
                (Vec::new(), insts.iter().position(|&i| i == self.def).unwrap_or(0))
            } else {
                (added[&b].clone(), 0)
            };
            let mut kept = insts[..start].to_vec();
            for &i in &insts[start..] {
                if i == self.def {
                    current = initial.clone();
                    continue;
                }
                let d = &f.insts[i];
                if d.args.first().is_none_or(|&a| a != self.array) {
                    kept.push(i);
                    continue;
                }
                match d.op {
                    Op::Load | Op::TrustedLoad => {
                        let k = flat_index(f, &self.dims, &d.args[1..]).unwrap_or(0);
                        if let Some(r) = d.result {
                            subst.insert(r, current[k]);
                        }
                    }
                    Op::Store | Op::TrustedStore => {
                        let n = d.args.len();
                        let k = flat_index(f, &self.dims, &d.args[1..n - 1]).unwrap_or(0);
                        current[k] = resolve(&subst, d.args[n - 1]);
                    }
                    Op::ArrayDim(k) => {
                        let extent = self.dims[k as usize];
                        let d = &mut f.insts[i];
                        d.op = Op::IConst(extent);
                        d.args.clear();
                        kept.push(i);
                    }
                    _ => kept.push(i),
                }
            }
            f.blocks[b].insts = kept;
            for edge in f.blocks[b].term.successors_mut() {
                if added.contains_key(&edge.block) {
                    edge.args.extend(current.iter().map(|&v| resolve(&subst, v)));
                }
            }
        }
        f.substitute(&subst);
        remove_idle_params(f, &added);
    }
}

/// The flat (row-major) index of constant `indices` within `dims`, if each is in range.
pub(crate) fn flat_index(f: &Function, dims: &[i64], indices: &[Value]) -> Option<usize> {
    if indices.len() != dims.len() {
        return None;
    }
    let mut flat = 0i64;
    for (&v, &n) in indices.iter().zip(dims) {
        let k = f.const_int(v)?;
        if !(0..n).contains(&k) {
            return None;
        }
        flat = flat * n + k;
    }
    Some(flat as usize)
}

/// Removes the parameters of `added` that carry nothing: those no instruction,
/// condition or return reads (through other such parameters or not), then, until none
/// is left, those that receive one value on every edge other than their own.
fn remove_idle_params(f: &mut Function, added: &HashMap<Block, Vec<Value>>) {
    let ours: HashMap<Value, Block> =
        added.iter().flat_map(|(&b, ps)| ps.iter().map(move |&p| (p, b))).collect();
    // Live: read by an instruction or a terminator other than as a jump argument, or
    // passed to a live parameter.
    let mut live: HashSet<Value> = HashSet::new();
    for data in f.blocks.values() {
        for &i in &data.insts {
            live.extend(f.insts[i].args.iter().copied());
        }
        match &data.term {
            Terminator::Branch { cond, .. } => {
                live.insert(*cond);
            }
            Terminator::Return(v) => live.extend(v.iter().copied()),
            Terminator::Jump(_) => {}
        }
    }
    // Jump arguments into other blocks' parameters that are not ours are live too.
    for data in f.blocks.values() {
        for edge in data.term.successors() {
            let params = &f.blocks[edge.block].params;
            for (k, &a) in edge.args.iter().enumerate() {
                if params.get(k).is_some_and(|p| !ours.contains_key(p)) {
                    live.insert(a);
                }
            }
        }
    }
    let mut todo: Vec<Value> = ours.keys().copied().filter(|p| live.contains(p)).collect();
    while let Some(p) = todo.pop() {
        let b = ours[&p];
        let Some(k) = f.blocks[b].params.iter().position(|&q| q == p) else { continue };
        for data in f.blocks.values() {
            for edge in data.term.successors().filter(|e| e.block == b) {
                if let Some(&a) = edge.args.get(k) {
                    if live.insert(a) && ours.contains_key(&a) {
                        todo.push(a);
                    }
                }
            }
        }
    }
    for (&p, &b) in &ours {
        if !live.contains(&p) {
            remove_param(f, b, p);
        }
    }
    // Parameters with one incoming value (besides themselves) are that value.
    loop {
        let mut changed = false;
        for (&p, &b) in &ours {
            let Some(k) = f.blocks[b].params.iter().position(|&q| q == p) else { continue };
            let mut incoming: HashSet<Value> = HashSet::new();
            for data in f.blocks.values() {
                for edge in data.term.successors().filter(|e| e.block == b) {
                    if let Some(&a) = edge.args.get(k) {
                        if a != p {
                            incoming.insert(a);
                        }
                    }
                }
            }
            if incoming.len() == 1 {
                let v = incoming.into_iter().next().unwrap_or(p);
                remove_param(f, b, p);
                f.map_uses(|u| if u == p { v } else { u });
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Removes parameter `p` of block `b` and the arguments every edge into `b` gives it.
fn remove_param(f: &mut Function, b: Block, p: Value) {
    let Some(k) = f.blocks[b].params.iter().position(|&q| q == p) else { return };
    f.blocks[b].params.remove(k);
    for (n, &q) in f.blocks[b].params.clone().iter().enumerate().skip(k) {
        f.values[q].def = ValueDef::Param(b, n as u32);
    }
    let blocks: Vec<Block> = f.blocks.keys().collect();
    for c in blocks {
        for edge in f.blocks[c].term.successors_mut() {
            if edge.block == b && k < edge.args.len() {
                edge.args.remove(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(ir: &str) -> String {
        let m = crate::parse_module(ir).expect("parses");
        let mut out = m.clone();
        let ids: Vec<FuncId> = out.funcs.keys().collect();
        for id in ids {
            out.funcs[id] = split_tuple_params(m.funcs[id].clone(), &m.types);
        }
        crate::verify_module(&out).expect("verifies");
        crate::print::print_module(&out)
    }

    #[test]
    fn a_tuple_passed_to_a_join_is_passed_as_its_fields() {
        // One edge passes a tuple it made (its operands go instead), the other a call's
        // result (projected before the jump); the join's projections read the new
        // parameters, and its call, which needs the tuple, reads one made again.
        let out = split(
            "fn @g(%x_0: f64) -> (f64, i64) {
bb0:
    %1: i64 = iconst 1
    %2: (f64, i64) = tuple.new %x_0, %1
    ret %2
}

fn @f(%x_0: f64, %c_1: bool) -> f64 {
bb0:
    br %c_1, bb1, bb2
bb1:
    %2: i64 = iconst 3
    %3: (f64, i64) = tuple.new %x_0, %2
    jump bb3(%3)
bb2:
    %4: (f64, i64) = call @g(%x_0)
    jump bb3(%4)
bb3(%t_5: (f64, i64)):
    %6: f64 = tuple.get 0 %t_5
    %7: i64 = tuple.get 1 %t_5
    %8: f64 = itof %7
    %9: (f64, i64) = call @h(%t_5)
    %10: f64 = fadd %6, %8
    ret %10
}

fn @h(%t_0: (f64, i64)) -> (f64, i64) {
bb0:
    ret %t_0
}",
        );
        let f = out.split("fn @f(").nth(1).expect("f").split("\n}\n").next().expect("f's body");
        assert!(f.contains("jump bb3(%x_0, %2)"), "{f}");
        assert!(f.contains("tuple.get 0 %4") && f.contains("tuple.get 1 %4"), "{f}");
        assert!(f.contains("bb3(%t_0_"), "{f}");
        assert_eq!(f.matches("tuple.new").count(), 2, "{f}");
        assert!(!f.contains("tuple.get 0 %t_5"), "{f}");
    }
}
