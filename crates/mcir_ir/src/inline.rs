//! Inlining small functions into their callers. Calls cost a native call each, and
//! differentiated, a tape record for every call; a helper such as
//! `fn sigmoid(x: f64) -> f64 { return 1.0 / (1.0 + exp(-x)); }` called in an inner loop
//! is better as its instructions in the loop.
//!
//! Two kinds of function are inlined where they are called, when they have no
//! hand-written derivative rule:
//!
//! - one block that cannot fail at run time (no memory access, integer arithmetic,
//!   allocation or call), of at most [`MAX_INSTS`] instructions;
//! - any function without calls (so it cannot recurse) of at most
//!   [`MAX_INSTS_WITH_CONTROL`] instructions in at most [`MAX_BLOCKS`] blocks: branches,
//!   loops, loads and stores included, but no array made and no loop over an array's
//!   extent, whose work makes a call's cost small (see `may_inline_with_control`). The calling block is split at the call: it jumps
//!   to a copy of the callee's entry, and each `ret v` jumps to the block holding the
//!   rest, which takes `v` as its parameter. A helper with an `if` called per element
//!   then costs what the same code written in the loop costs, in the primal and in every
//!   derived pass (its tape is part of the loop's).
//!
//! Inlined instructions keep their source spans, and a runtime error names the function
//! whose source holds the failing instruction (`Module::function_at`), so errors read the
//! same as without inlining. Callees are inlined first, in rounds: a step function that
//! calls a small right-hand side four times becomes one block without calls, and then
//! goes into its loop.

use crate::entity::EntityRef;
use crate::function::*;
use crate::op::Op;
use crate::types::TypeTable;
use std::collections::HashMap;

/// The most instructions a function may have to be inlined.
pub const MAX_INSTS: usize = 40;

/// The most instructions a function called from one place may have to be inlined there.
pub const MAX_INSTS_ONE_CALL: usize = 40;

/// The most instructions a function with branches, loops or fallible operations may
/// have to be inlined (counted over all its blocks).
pub const MAX_INSTS_WITH_CONTROL: usize = 64;

/// The most blocks a function may have to be inlined.
pub const MAX_BLOCKS: usize = 12;

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

/// Whether `f` (function `id` of `module`), of any shape, may replace its calls: at
/// most [`MAX_INSTS_WITH_CONTROL`] instructions in at most [`MAX_BLOCKS`] blocks, no
/// call (so it cannot recurse), nothing that only a derived pass makes, no hand-written
/// rule, and, when it has more than one block, no array it makes. A helper that makes
/// an array and fills it in a loop (an ODE's right-hand side) keeps its own rule, whose
/// reverse pass knows the array is fresh and only written and so undoes none of those
/// writes; inlined into its caller's loop, the array's writes went on the caller's tape
/// in every iteration (GradBench's `ode`: gradients 1.5 to 3 times slower). Nor is a
/// helper with a loop that measures an array (`for j in 0..size(v, 1)`): its loop's
/// work scales with the data and makes its call's cost small, while inlined, its loop's
/// values crowd the registers of its caller's loops (GradBench's `gmm` objective, with
/// a row's log-sum-exp inlined, reloaded a pointer from the stack in its innermost loop:
/// 12 % slower).
fn may_inline_with_control(module: &Module, id: FuncId, f: &Function) -> bool {
    let one_block = f.blocks.len() == 1;
    let measures_arrays = f.insts.values().any(|d| matches!(d.op, Op::ArrayDim(_)));
    let loops = !one_block && {
        let cfg = crate::cfg::ControlFlow::compute(f);
        f.blocks.keys().any(|b| cfg.latches(b).next().is_some())
    };
    !(loops && measures_arrays)
        && f.blocks.len() <= MAX_BLOCKS
        && f.insts.len() <= MAX_INSTS_WITH_CONTROL
        && f.blocks.iter().all(|(_, b)| {
            b.insts.iter().all(|&i| {
                let op = &f.insts[i].op;
                let makes_array = op.allocates() && !matches!(op, Op::RefNew | Op::StackNew);
                (one_block || !makes_array)
                    && !matches!(
                        op,
                        Op::Call(_)
                            | Op::StackNew
                            | Op::StackPush
                            | Op::StackPop
                            | Op::StackPeek
                            | Op::StackReserve
                            | Op::StackPut
                            | Op::ArenaMark
                            | Op::ArenaRelease
                            | Op::TapeMark
                            | Op::TapeRelease
                    )
            })
        })
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
            may_inline(module, id, f, limit) || may_inline_with_control(module, id, f)
        })
        .collect()
}

/// `module` with every call of a function called from one place, marked in `candidates`
/// and of at most `limit` instructions (one block that cannot fail), replaced by the
/// function's instructions, in rounds. Function ids do not change. Derived passes use
/// it: a step function's forward and reverse passes, each called from one loop of its
/// caller's, become that loop's body, so a step pays no call, and its tape record and
/// results are read where they were made.
///
/// Returns the module and which of its functions changed.
pub fn inline_single_calls(module: Module, candidates: &[bool], limit: usize) -> (Module, Vec<bool>) {
    inline_rounds(module, |m| {
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
    inline_rounds(module.clone(), can).0
}

/// [`inline_in_rounds`] on a module of its own, with which functions changed. Only the
/// functions a round inlines are copied for it, not the module.
fn inline_rounds(mut out: Module, can: impl Fn(&Module) -> Vec<bool>) -> (Module, Vec<bool>) {
    let mut inlined_into = vec![false; out.funcs.len()];
    for _ in 0..ROUNDS {
        let can = can(&out);
        if !can.iter().any(|&c| c) {
            break;
        }
        let callees: Vec<Option<Function>> = out
            .funcs
            .iter()
            .map(|(id, f)| can.get(id.index()).copied().unwrap_or(false).then(|| f.clone()))
            .collect();
        let mut changed = false;
        let ids: Vec<FuncId> = out.funcs.keys().collect();
        for id in ids {
            let calls =
                out.funcs[id].insts.iter().any(|(_, d)| matches!(d.op, Op::Call(g) if can[g.index()]));
            if !calls {
                continue;
            }
            let f = std::mem::replace(&mut out.funcs[id], Function::new("", &[], None));
            out.funcs[id] = inline_into(f, &callees);
            inlined_into[id.index()] = true;
            changed = true;
        }
        if !changed {
            break;
        }
    }
    (out, inlined_into)
}

/// `f` with its calls of the functions `callees` holds (by function index) replaced by
/// their instructions.
fn inline_into(mut f: Function, callees: &[Option<Function>]) -> Function {
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let blocks: Vec<Block> = f.blocks.keys().collect();
    // The layout of the result: each block, then the blocks of the functions inlined
    // into it, then the block that goes on after each call.
    let mut order: Vec<Block> = Vec::with_capacity(blocks.len());
    for &first in &blocks {
        order.push(first);
        let term = std::mem::replace(&mut f.blocks[first].term, Terminator::Return(None));
        let term_span = f.blocks[first].term_span;
        let mut current = first;
        let old = std::mem::take(&mut f.blocks[first].insts);
        for inst in old {
            let d = f.insts[inst].clone();
            let inlined = match d.op {
                Op::Call(g) => callees.get(g.index()).and_then(Option::as_ref),
                _ => None,
            };
            let callee = match inlined {
                Some(callee) => callee,
                None => {
                    f.blocks[current].insts.push(inst);
                    continue;
                }
            };
            if let [only] = callee.blocks.keys().collect::<Vec<_>>()[..] {
                if let Terminator::Return(ret) = callee.blocks[only].term {
                    // One block: its instructions take the call's place.
                    let map = copy_block(&mut f, current, callee, only, callee.param_values(), &d.args);
                    if let (Some(r), Some(rv)) = (d.result, ret) {
                        subst.insert(r, map.get(&rv).copied().unwrap_or(rv));
                    }
                    continue;
                }
            }
            // Several blocks: the current block jumps to a copy of the callee's entry,
            // each `ret v` jumps to a new block that takes `v` as its parameter and
            // holds the rest of the current block.
            let after = f.add_block();
            if let Some(ty) = callee.ret {
                let name = d.result.and_then(|r| f.values[r].name.clone());
                let p = f.add_block_param(after, ty, name);
                if let Some(r) = d.result {
                    subst.insert(r, p);
                }
            }
            let entry = copy_body(&mut f, callee, &d.args, after, &mut order);
            f.set_terminator(current, Terminator::Jump(BlockCall { block: entry, args: vec![] }), d.span);
            order.push(after);
            current = after;
        }
        f.set_terminator(current, term, term_span);
    }
    if subst.is_empty() && order.len() == blocks.len() {
        return f;
    }
    // Uses of the calls' results read the inlined results instead (a chain of inlined
    // calls may map one result to another).
    f.substitute(&subst);
    // Drop the replaced calls and their results, and lay the blocks out.
    let f = f.into_rebuilt(&order);
    // After a call that never returns (`while true {}`), the rest of its block is dead.
    if f.reachable_blocks().len() < f.blocks.len() {
        return f.remove_unreachable_blocks();
    }
    f
}

/// Copies the instructions of `callee`'s block `from` to the end of `f`'s block `to`,
/// with `params` read as `args`; returns the map from the callee's values to `f`'s.
fn copy_block(
    f: &mut Function,
    to: Block,
    callee: &Function,
    from: Block,
    params: &[Value],
    args: &[Value],
) -> HashMap<Value, Value> {
    let mut map: HashMap<Value, Value> = params.iter().copied().zip(args.iter().copied()).collect();
    for &ci in &callee.blocks[from].insts {
        let cd = &callee.insts[ci];
        let args: Vec<Value> = cd.args.iter().map(|a| map.get(a).copied().unwrap_or(*a)).collect();
        let ty = cd.result.map(|r| callee.value_type(r));
        let nv = f.push_inst(to, cd.op.clone(), args, ty, cd.span);
        if let (Some(r), Some(nv)) = (cd.result, nv) {
            f.values[nv].name = callee.values[r].name.clone();
            map.insert(r, nv);
        }
    }
    map
}

/// Copies every block of `callee` into `f` (appending them to `order`), its parameters
/// read as `args` and each `ret` a jump to `after`; returns the copy of its entry.
fn copy_body(
    f: &mut Function,
    callee: &Function,
    args: &[Value],
    after: Block,
    order: &mut Vec<Block>,
) -> Block {
    let mut map: HashMap<Value, Value> =
        callee.param_values().iter().copied().zip(args.iter().copied()).collect();
    let mut block_map: HashMap<Block, Block> = HashMap::new();
    // Blocks and their parameters first: a jump may name a block laid out later.
    for (cb, data) in callee.blocks.iter() {
        let nb = f.add_block();
        block_map.insert(cb, nb);
        order.push(nb);
        if cb != callee.entry() {
            for &p in &data.params {
                let np = f.add_block_param(nb, callee.value_type(p), callee.values[p].name.clone());
                map.insert(p, np);
            }
        }
    }
    // Then instructions, with operands mapped once every value has its copy (a value
    // may be used in a block laid out before the one that defines it).
    let mut copied: Vec<Inst> = Vec::new();
    for (cb, data) in callee.blocks.iter() {
        let nb = block_map[&cb];
        for &ci in &data.insts {
            let cd = &callee.insts[ci];
            let ty = cd.result.map(|r| callee.value_type(r));
            let nv = f.push_inst(nb, cd.op.clone(), cd.args.clone(), ty, cd.span);
            copied.extend(f.blocks[nb].insts.last().copied());
            if let (Some(r), Some(nv)) = (cd.result, nv) {
                f.values[nv].name = callee.values[r].name.clone();
                map.insert(r, nv);
            }
        }
    }
    let mv = |v: Value| map.get(&v).copied().unwrap_or(v);
    for i in copied {
        f.insts[i].args.iter_mut().for_each(|v| *v = mv(*v));
    }
    for (cb, data) in callee.blocks.iter() {
        let term = match &data.term {
            Terminator::Return(v) => {
                Terminator::Jump(BlockCall { block: after, args: v.map(mv).into_iter().collect() })
            }
            term => term.mapped(mv, |b| block_map[&b]),
        };
        f.set_terminator(block_map[&cb], term, data.term_span);
    }
    block_map[&callee.entry()]
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
    fn a_function_with_a_branch_and_a_load_is_inlined() {
        let text = "fn @get(%x_0: f64[], %i_1: i64) -> f64 {\nbb0:\n    %z_2: i64 = iconst 0\n    %c_3: bool = icmp gt %i_1, %z_2\n    br %c_3, bb1, bb2\n\
                    bb1:\n    %y_4: f64 = load %x_0[%i_1]\n    ret %y_4\nbb2:\n    %w_5: f64 = fconst 1.0\n    ret %w_5\n}\n\n\
                    fn @main(%a_0: f64[], %k_1: i64) -> f64 {\nbb0:\n    %b_2: f64 = call @get(%a_0, %k_1)\n    %c_3: f64 = call @get(%a_0, %k_1)\n    %d_4: f64 = fadd %b_2, %c_3\n    ret %d_4\n}\n";
        let m = crate::parse_module(text).unwrap();
        let inlined = inline_small_functions(&m);
        crate::verify_module(&inlined).unwrap();
        let main = inlined.func_by_name("main").unwrap();
        let printed = crate::print_function(&inlined, &inlined.funcs[main]);
        assert!(!printed.contains("call"), "{printed}");
        assert_eq!(printed.matches("load").count(), 2, "{printed}");
        // The entry, two copies of three blocks, and the block after each call.
        assert_eq!(inlined.funcs[main].blocks.len(), 9, "{printed}");
    }

    #[test]
    fn functions_that_call_or_have_rules_are_kept() {
        let text = "fn @leaf(%x_0: f64) -> f64 {\nbb0:\n    ret %x_0\n}\n\n\
                    fn @get(%x_0: f64[]) -> f64 {\nbb0:\n    %i_1: i64 = iconst 0\n    %y_2: f64 = load %x_0[%i_1]\n    %z_3: f64 = call @get(%x_0)\n    ret %z_3\n}\n\n\
                    fn @main(%a_0: f64[]) -> f64 {\nbb0:\n    %b_1: f64 = call @get(%a_0)\n    ret %b_1\n}\n";
        let m = crate::parse_module(text).unwrap();
        let inlined = inline_small_functions(&m);
        let main = inlined.func_by_name("main").unwrap();
        assert!(crate::print_function(&inlined, &inlined.funcs[main]).contains("call @get"));
    }
}
