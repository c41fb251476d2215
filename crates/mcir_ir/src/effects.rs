//! Which functions may write memory they were given: a function with a hand-written
//! derivative rule must not (its rule could not undo the write), and this is how that is
//! checked. The analysis is conservative: a write counts unless its target is memory the
//! function itself allocated (a fresh array, cell or record, or a join of such), and a
//! call counts when its callee may write and it passes an address the caller did not
//! allocate.

use crate::entity::EntityRef;
use crate::function::*;
use crate::op::Op;
use crate::types::{Type, TypeId, TypeTable};

/// For each function (by id), the span of the first operation that may write memory the
/// function was given, directly or through a call; `None` when it cannot.
pub fn argument_writes(module: &Module) -> Vec<Option<Span>> {
    argument_write_sites(module).into_iter().map(|w| w.map(|(span, _)| span)).collect()
}

/// The spans from the first operation of function `id` that may write memory it was
/// given down to the write itself: a call, the calls it leads through, and the store
/// (one span when the function writes directly); empty when it cannot write.
pub fn argument_write_chain(module: &Module, id: FuncId) -> Vec<Span> {
    let sites = argument_write_sites(module);
    let mut chain = Vec::new();
    let mut at = Some(id);
    while let Some(f) = at {
        let Some(Some((span, callee))) = sites.get(f.index()) else { break };
        if chain.len() > module.funcs.len() {
            break;
        }
        chain.push(*span);
        at = *callee;
    }
    chain
}

/// For each function, [`argument_writes`]'s span and, when that is a call, its callee.
fn argument_write_sites(module: &Module) -> Vec<Option<(Span, Option<FuncId>)>> {
    let n = module.funcs.len();
    let fresh: Vec<Vec<bool>> = module.funcs.values().map(|f| fresh_values(&module.types, f)).collect();
    let mut writes: Vec<Option<(Span, Option<FuncId>)>> = vec![None; n];
    loop {
        let mut changed = false;
        for (id, f) in module.funcs.iter() {
            if writes[id.index()].is_some() {
                continue;
            }
            let fr = &fresh[id.index()];
            let given = |v: Value| !fr[v.index()] && holds_address(&module.types, f.value_type(v));
            let mut found = None;
            'scan: for (_, data) in f.blocks.iter() {
                for &inst in &data.insts {
                    let d = &f.insts[inst];
                    let hit = match &d.op {
                        Op::Store
                        | Op::TrustedStore
                        | Op::CopyInto
                        | Op::AddInto
                        | Op::Axpy
                        | Op::MoveAdd
                        | Op::MatMulAcc(_)
                        | Op::MatVecAcc(_)
                        | Op::OuterAcc
                        | Op::RefStore
                        | Op::MutStore(..)
                        | Op::StackPush
                        | Op::StackPop
                        | Op::StackReserve
                        | Op::StackPut => d.args.first().is_some_and(|&a| given(a)),
                        Op::Call(g) => {
                            writes.get(g.index()).is_some_and(|w| w.is_some())
                                && d.args.iter().any(|&a| given(a))
                        }
                        _ => false,
                    };
                    if hit {
                        let callee = match d.op {
                            Op::Call(g) => Some(g),
                            _ => None,
                        };
                        found = Some((d.span, callee));
                        break 'scan;
                    }
                }
            }
            if found.is_some() {
                writes[id.index()] = found;
                changed = true;
            }
        }
        if !changed {
            return writes;
        }
    }
}

/// Whether a value of type `t` is, or holds, the address of memory: an array, cell or
/// stack, or a tuple or struct holding one (a mutable struct is memory itself).
pub fn holds_address(types: &TypeTable, t: TypeId) -> bool {
    match types.try_get(t) {
        Some(Type::Array { .. } | Type::Ref(_) | Type::Stack(_)) => true,
        Some(Type::Tuple(items)) => items.iter().any(|&i| holds_address(types, i)),
        Some(Type::Struct(_)) => types
            .as_struct(t)
            .is_some_and(|(_, d)| d.mutable || d.fields.iter().any(|f| holds_address(types, f.1))),
        _ => false,
    }
}

/// Values that are memory the function allocated itself: results of allocating ops (a
/// value struct is not memory: it may hold what the function was given), and block
/// parameters every incoming edge passes such a value.
fn fresh_values(types: &TypeTable, f: &Function) -> Vec<bool> {
    let mut fresh = vec![false; f.values.len()];
    for (_, data) in f.blocks.iter() {
        for &inst in &data.insts {
            let d = &f.insts[inst];
            let allocates =
                d.op.allocates() || matches!(d.op, Op::StructNew(s) if types.struct_def(s).mutable);
            if let (true, Some(r)) = (allocates, d.result) {
                fresh[r.index()] = true;
            }
        }
    }
    // Block parameters: fresh until an incoming edge passes something else.
    let entry = f.entry();
    for (b, data) in f.blocks.iter() {
        if b != entry {
            for &p in &data.params {
                fresh[p.index()] = true;
            }
        }
    }
    loop {
        let mut changed = false;
        for (_, data) in f.blocks.iter() {
            for s in data.term.successors() {
                for (&arg, &p) in s.args.iter().zip(&f.blocks[s.block].params) {
                    if fresh[p.index()] && !fresh[arg.index()] {
                        fresh[p.index()] = false;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            return fresh;
        }
    }
}
