//! Inlining small functions into their callers. Calls cost a native call each, and
//! differentiated, a tape record for every call; a helper such as
//! `fn sigmoid(x: f64) -> f64 { return 1.0 / (1.0 + exp(-x)); }` called in an inner loop
//! is better as its instructions in the loop.
//!
//! A function is inlined when it is one block that cannot fail at run time (no memory
//! access, integer arithmetic, allocation or call) and has no hand-written derivative
//! rule, of at most [`MAX_INSTS`] instructions, or of at most [`MAX_INSTS_ONE_CALL`] when
//! the module calls it from one place only (inlining it then adds no code). So no runtime
//! error can come from inlined code (errors keep naming the function they happen in), no
//! call is left that could recurse, and every rule a program gives is still used.
//! Callees are inlined first, in rounds: a step function that calls a small right-hand
//! side four times becomes one block without calls, and then goes into its loop.

use crate::entity::EntityRef;
use crate::function::*;
use crate::op::Op;
use crate::types::TypeTable;
use std::collections::HashMap;

/// The most instructions a function may have to be inlined.
pub const MAX_INSTS: usize = 40;

/// The most instructions a function called from one place may have to be inlined there.
pub const MAX_INSTS_ONE_CALL: usize = 40;

/// How many rounds of inlining run (each can inline functions the previous one made
/// free of calls).
const ROUNDS: usize = 4;

/// Whether `op` can never fail at run time and needs no memory of its own.
fn infallible(types: &TypeTable, op: &Op) -> bool {
    match op {
        Op::TupleNew | Op::TupleGet(_) | Op::StructGet(..) | Op::ArrayDim(_) => true,
        Op::StructNew(s) => !types.struct_def(*s).mutable,
        _ => op.is_scalar_arith(),
    }
}

/// How many places of `module` call each function.
fn call_sites(module: &Module) -> Vec<usize> {
    let mut call_sites = vec![0usize; module.funcs.len()];
    for (_, f) in module.funcs.iter() {
        for (_, d) in f.insts.iter() {
            if let Op::Call(g) = d.op {
                if let Some(n) = call_sites.get_mut(g.index()) {
                    *n += 1;
                }
            }
        }
    }
    call_sites
}

/// Whether `f` (function `id` of `module`) is one block that cannot fail, of at most
/// `limit` instructions, without a hand-written rule: what may replace a call of it.
fn may_inline(module: &Module, id: FuncId, f: &Function, limit: usize) -> bool {
    f.blocks.len() == 1
        && matches!(f.blocks[f.entry()].term, Terminator::Return(_))
        && f.blocks[f.entry()].insts.len() <= limit
        && f.blocks[f.entry()].insts.iter().all(|&i| infallible(&module.types, &f.insts[i].op))
        && !module.rules.iter().any(|r| r.func == id)
}

/// The functions of `module` that are inlined where they are called.
fn inlinable(module: &Module) -> Vec<bool> {
    let call_sites = call_sites(module);
    module
        .funcs
        .iter()
        .map(|(id, f)| {
            let limit = if call_sites[id.index()] == 1 { MAX_INSTS_ONE_CALL } else { MAX_INSTS };
            may_inline(module, id, f, limit)
        })
        .collect()
}

/// `module` with every call of a function called from one place, marked in `candidates`
/// and of at most `limit` instructions (one block that cannot fail), replaced by the
/// function's instructions, in rounds. Function ids do not change. Derived passes use
/// it: a step function's forward and reverse passes, each called from one loop of its
/// caller's, become that loop's body, so a step pays no call, and its tape record and
/// results are read where they were made.
pub fn inline_single_calls(module: &Module, candidates: &[bool], limit: usize) -> Module {
    inline_in_rounds(module, |m| {
        let sites = call_sites(m);
        m.funcs
            .iter()
            .map(|(id, f)| {
                candidates.get(id.index()).copied().unwrap_or(false)
                    && sites[id.index()] == 1
                    && may_inline(m, id, f, limit)
            })
            .collect()
    })
}

/// `module` with every call of a small function replaced by the function's instructions.
/// Function ids do not change (the functions themselves stay).
pub fn inline_small_functions(module: &Module) -> Module {
    inline_in_rounds(module, inlinable)
}

/// `module` with the calls of the functions `can` marks (computed afresh each round)
/// replaced by their instructions, until a round inlines nothing.
fn inline_in_rounds(module: &Module, can: impl Fn(&Module) -> Vec<bool>) -> Module {
    let mut out = module.clone();
    for _ in 0..ROUNDS {
        let can = can(&out);
        if !can.iter().any(|&c| c) {
            break;
        }
        let callees = out.clone();
        let mut changed = false;
        let ids: Vec<FuncId> = out.funcs.keys().collect();
        for id in ids {
            let calls =
                out.funcs[id].insts.iter().any(|(_, d)| matches!(d.op, Op::Call(g) if can[g.index()]));
            if !calls {
                continue;
            }
            let f = std::mem::replace(&mut out.funcs[id], Function::new("", &[], None));
            out.funcs[id] = inline_into(f, &callees, &can);
            changed = true;
        }
        if !changed {
            break;
        }
    }
    out
}

fn inline_into(mut f: Function, module: &Module, can: &[bool]) -> Function {
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let blocks: Vec<Block> = f.blocks.keys().collect();
    for &b in &blocks {
        let old = std::mem::take(&mut f.blocks[b].insts);
        for inst in old {
            let d = f.insts[inst].clone();
            let Op::Call(g) = d.op else {
                f.blocks[b].insts.push(inst);
                continue;
            };
            if !can[g.index()] {
                f.blocks[b].insts.push(inst);
                continue;
            }
            let callee = &module.funcs[g];
            let mut map: HashMap<Value, Value> = HashMap::new();
            for (&p, &a) in callee.param_values().iter().zip(&d.args) {
                map.insert(p, a);
            }
            for &ci in &callee.blocks[callee.entry()].insts {
                let cd = &callee.insts[ci];
                let args: Vec<Value> = cd.args.iter().map(|a| map.get(a).copied().unwrap_or(*a)).collect();
                let ty = cd.result.map(|r| callee.value_type(r));
                let nv = f.push_inst(b, cd.op.clone(), args, ty, cd.span);
                if let (Some(r), Some(nv)) = (cd.result, nv) {
                    f.values[nv].name = callee.values[r].name.clone();
                    map.insert(r, nv);
                }
            }
            if let (Some(r), Terminator::Return(Some(rv))) = (d.result, &callee.blocks[callee.entry()].term) {
                subst.insert(r, map.get(rv).copied().unwrap_or(*rv));
            }
        }
    }
    if subst.is_empty() {
        return f;
    }
    // Uses of the calls' results read the inlined results instead (a chain of inlined
    // calls may map one result to another).
    f.substitute(&subst);
    // Drop the replaced calls and their results.
    f.into_rebuilt(&blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_infallible_function_is_inlined_and_the_result_verifies() {
        let text = "fn @sq(%x_0: f64) -> f64 {\nbb0:\n    %y_1: f64 = fmul %x_0, %x_0\n    ret %y_1\n}\n\n\
                    fn @main(%a_0: f64) -> f64 {\nbb0:\n    %b_1: f64 = call @sq(%a_0)\n    %c_2: f64 = call @sq(%b_1)\n    ret %c_2\n}\n";
        let m = crate::parse_module(text).unwrap();
        let inlined = inline_small_functions(&m);
        crate::verify_module(&inlined).unwrap();
        let main = inlined.func_by_name("main").unwrap();
        let printed = crate::print_function(&inlined, &inlined.funcs[main]);
        assert!(!printed.contains("call"), "{printed}");
        assert_eq!(printed.matches("fmul").count(), 2, "{printed}");
    }

    #[test]
    fn functions_that_may_fail_or_loop_are_kept() {
        let text = "fn @get(%x_0: f64[]) -> f64 {\nbb0:\n    %i_1: i64 = iconst 0\n    %y_2: f64 = load %x_0[%i_1]\n    ret %y_2\n}\n\n\
                    fn @main(%a_0: f64[]) -> f64 {\nbb0:\n    %b_1: f64 = call @get(%a_0)\n    ret %b_1\n}\n";
        let m = crate::parse_module(text).unwrap();
        let inlined = inline_small_functions(&m);
        let main = inlined.func_by_name("main").unwrap();
        assert!(crate::print_function(&inlined, &inlined.funcs[main]).contains("call @get"));
    }
}
