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
//!   extent, whose work makes a call's cost small (see `may_inline_with_control`); one
//!   block that makes an array, called from one place, may have up to
//!   [`MAX_STRAIGHT_INSTS_ONE_CALL`] instructions. The calling block is split at the call: it jumps
//!   to a copy of the callee's entry, and each `ret v` jumps to the block holding the
//!   rest, which takes `v` as its parameter. A helper with an `if` called per element
//!   then costs what the same code written in the loop costs, in the primal and in every
//!   derived pass (its tape is part of the loop's).
//!
//! A function that calls (a recursion, or one too large for either kind) may still have
//! its base case inlined: the test it begins with and the arm that returns without
//! calling take the place of its calls outside loops, and the call remains in the other
//! arm ([`inline_base_cases`], [`MAX_BASE_TEST_INSTS`], [`MAX_BASE_CASE_INSTS`]).
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

/// The most instructions (constants aside) a function of one block that makes an array,
/// called from one place, may have to be inlined there: its code moves rather than being copied, and its
/// fresh array, once in its caller, may become values (`crate::scalarise`) instead of an
/// allocation per call (a `3 × 3` inverse by cofactors returning a fresh array).
pub const MAX_STRAIGHT_INSTS_ONE_CALL: usize = 192;

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
fn may_inline_with_control(module: &Module, id: FuncId, f: &Function, calls: usize) -> bool {
    let one_block = f.blocks.len() == 1;
    // Written-out loops leave a constant per copy of each index: what is counted against
    // the budget of a one-block helper called once is the work, not the constants.
    let moved = one_block && calls == 1 && f.insts.values().any(|d| makes_array(&d.op));
    let size = if moved {
        let placed = f.blocks.values().flat_map(|b| b.insts.iter().map(|&i| &f.insts[i].op));
        placed.filter(|op| !matches!(op, Op::IConst(_) | Op::FConst(_) | Op::BConst(_))).count()
    } else {
        f.insts.len()
    };
    let limit = if moved { MAX_STRAIGHT_INSTS_ONE_CALL } else { MAX_INSTS_WITH_CONTROL };
    let measures_arrays = f.insts.values().any(|d| matches!(d.op, Op::ArrayDim(_)));
    let loops = !one_block && {
        let cfg = crate::cfg::ControlFlow::compute(f);
        f.blocks.keys().any(|b| cfg.latches(b).next().is_some())
    };
    !(loops && measures_arrays)
        && f.blocks.len() <= MAX_BLOCKS
        && size <= limit
        && f.blocks.iter().all(|(_, b)| {
            b.insts.iter().all(|&i| {
                let op = &f.insts[i].op;
                (one_block || !makes_array(op)) && !calls_or_tapes(op)
            })
        })
        && !module.rules.iter().any(|r| r.func == id)
}

/// Whether `op` makes an array (or another aggregate in memory that is not a cell or a
/// tape's stack).
fn makes_array(op: &Op) -> bool {
    op.allocates() && !matches!(op, Op::RefNew | Op::StackNew)
}

/// Whether `op` calls, or is something only a derived pass makes (a tape's stacks,
/// arena and tape marks): what no inlined code may hold.
fn calls_or_tapes(op: &Op) -> bool {
    matches!(
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
}

/// The functions of `module` that are inlined where they are called.
fn inlinable(module: &Module) -> Vec<bool> {
    let call_sites = call_sites(module);
    module
        .funcs
        .iter()
        .map(|(id, f)| {
            let limit = if call_sites[id.index()] == 1 { MAX_INSTS_ONE_CALL } else { MAX_INSTS };
            may_inline(module, id, f, limit) || may_inline_with_control(module, id, f, call_sites[id.index()])
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

/// The most instructions a function's entry may have for its base case to be inlined
/// (they run at the call site, and again in the call when the base case does not hold).
pub const MAX_BASE_TEST_INSTS: usize = 8;

/// The most instructions a base case may have to be inlined where its function is called.
pub const MAX_BASE_CASE_INSTS: usize = 24;

/// A function whose base case is inlined where it is called: the function, and whether
/// the base case is the `then` arm of its entry's branch.
struct BaseCase {
    callee: Function,
    then_arm: bool,
}

/// `module` with the base case of each function that calls (a recursive one, or one too
/// large to inline) inlined where it is called: a call `f(args)` whose `f` begins by
/// testing its arguments and then returns from one arm without calling (`if hi - lo == 1
/// { return leaf(v[lo]); }`) becomes that test, that arm inlined, and the call only when
/// the test fails. Half the calls of a divide and conquer are its leaves; each then costs
/// what the leaf's arithmetic costs, with no call, no frame, and in derived passes no
/// record of its own (its values are kept in its caller's). Function ids do not change.
///
/// A base case qualifies when its function has no hand-written rule and is no part of
/// one; its entry has at most [`MAX_BASE_TEST_INSTS`] instructions that read and compute
/// (no write, call or allocation) and ends in a branch; and exactly one arm is a block
/// that returns, of at most [`MAX_BASE_CASE_INSTS`] instructions, none of which calls,
/// allocates or touches a stack or tape. Calls in loops are left as they are (derived
/// passes would record the test's outcome per iteration), and so are calls in functions
/// with a hand-written rule. An inlined base case is not a call: `--max-depth` does not
/// count it, as it counts no inlined function.
pub fn inline_base_cases(module: Module) -> Module {
    let in_rules: Vec<FuncId> = module
        .rules
        .iter()
        .flat_map(|r| {
            let parts = match r.kind {
                crate::function::RuleKind::Reverse { rule, pullback } => vec![rule, pullback],
                crate::function::RuleKind::Forward { rule, pushforward } => vec![rule, pushforward],
                crate::function::RuleKind::Checkpoint { inner } => vec![inner],
                crate::function::RuleKind::Zero => vec![],
            };
            std::iter::once(r.func).chain(parts)
        })
        .collect();
    let cases: Vec<Option<BaseCase>> = module
        .funcs
        .iter()
        .map(|(id, f)| {
            if in_rules.contains(&id) {
                return None;
            }
            base_case_arm(&module.types, f).map(|then_arm| BaseCase { callee: f.clone(), then_arm })
        })
        .collect();
    if cases.iter().all(Option::is_none) {
        return module;
    }
    let mut out = module;
    let ids: Vec<FuncId> = out.funcs.keys().collect();
    for id in ids {
        if in_rules.contains(&id) {
            continue;
        }
        let calls = out.funcs[id]
            .insts
            .iter()
            .any(|(_, d)| matches!(d.op, Op::Call(g) if cases.get(g.index()).is_some_and(Option::is_some)));
        if calls {
            let f = std::mem::replace(&mut out.funcs[id], Function::new("", &[], None));
            out.funcs[id] = split_calls(f, &cases);
        }
    }
    out
}

/// Whether `f` has a base case to inline (see [`inline_base_cases`]): `Some(true)` when
/// it is the `then` arm of the entry's branch, `Some(false)` when the `else` arm.
fn base_case_arm(types: &TypeTable, f: &Function) -> Option<bool> {
    if !f.insts.values().any(|d| matches!(d.op, Op::Call(_))) {
        return None;
    }
    let entry = &f.blocks[f.entry()];
    let Terminator::Branch { then_dest, else_dest, .. } = &entry.term else { return None };
    let tests = entry.insts.len() <= MAX_BASE_TEST_INSTS
        && entry.insts.iter().all(|&i| {
            let op = &f.insts[i].op;
            op.is_scalar_arith()
                || matches!(
                    op,
                    Op::IBinary(_) | Op::IUnary(_) | Op::FToI | Op::ArrayDim(_) | Op::Load | Op::TupleGet(_)
                )
                || matches!(op, Op::StructGet(..))
        });
    if !tests || then_dest.block == else_dest.block {
        return None;
    }
    let base = |b: Block| {
        let data = &f.blocks[b];
        b != f.entry()
            && matches!(data.term, Terminator::Return(_))
            && data.insts.len() <= MAX_BASE_CASE_INSTS
            && data.insts.iter().all(|&i| {
                let op = &f.insts[i].op;
                let mutable_record = matches!(op, Op::StructNew(s) if types.struct_def(*s).mutable);
                !op.allocates() && !mutable_record && !calls_or_tapes(op)
            })
    };
    match (base(then_dest.block), base(else_dest.block)) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    }
}

/// `f` with each call of a function that `cases` gives a base case for replaced by the
/// function's entry, its base case, and the call in the other arm.
fn split_calls(mut f: Function, cases: &[Option<BaseCase>]) -> Function {
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let blocks: Vec<Block> = f.blocks.keys().collect();
    let loop_depths = crate::cfg::ControlFlow::compute(&f).loop_depths();
    let mut order: Vec<Block> = Vec::with_capacity(blocks.len());
    for &first in &blocks {
        order.push(first);
        let term = std::mem::replace(&mut f.blocks[first].term, Terminator::Return(None));
        let term_span = f.blocks[first].term_span;
        let mut current = first;
        let old = std::mem::take(&mut f.blocks[first].insts);
        // In a loop, the join after the test would be recorded on a stack per iteration
        // by derived passes; outside loops it is a field of the call's record.
        let in_loop = loop_depths.get(first.index()).is_some_and(|&d| d > 0);
        for inst in old {
            let d = f.insts[inst].clone();
            let case = match d.op {
                Op::Call(g) if !in_loop => cases.get(g.index()).and_then(Option::as_ref),
                _ => None,
            };
            let Some(BaseCase { callee, then_arm }) = case else {
                f.blocks[current].insts.push(inst);
                continue;
            };
            let entry = callee.entry();
            let mut map: HashMap<Value, Value> =
                callee.param_values().iter().copied().zip(d.args.iter().copied()).collect();
            copy_block_mapped(&mut f, current, callee, entry, &mut map);
            let Terminator::Branch { cond, then_dest, else_dest } = &callee.blocks[entry].term else {
                unreachable!("a base case follows a branch")
            };
            let arm = if *then_arm { then_dest } else { else_dest };
            let mv = |map: &HashMap<Value, Value>, v: Value| map.get(&v).copied().unwrap_or(v);
            for (&p, &a) in callee.blocks[arm.block].params.iter().zip(&arm.args) {
                let image = mv(&map, a);
                map.insert(p, image);
            }
            // The base case, inlined.
            let base = f.add_block();
            copy_block_mapped(&mut f, base, callee, arm.block, &mut map);
            // The call, when the base case does not hold.
            let call = f.add_block();
            let ty = d.result.map(|r| f.value_type(r));
            let result = f.push_inst(call, d.op.clone(), d.args.clone(), ty, d.span);
            let after = f.add_block();
            if let (Some(r), Some(ty)) = (d.result, ty) {
                let name = f.values[r].name.clone();
                let p = f.add_block_param(after, ty, name);
                subst.insert(r, p);
            }
            let Terminator::Return(ret) = callee.blocks[arm.block].term else {
                unreachable!("a base case returns")
            };
            let base_result = ret.map(|v| mv(&map, v)).into_iter().filter(|_| d.result.is_some()).collect();
            let base_span = callee.blocks[arm.block].term_span;
            f.set_terminator(
                base,
                Terminator::Jump(BlockCall { block: after, args: base_result }),
                base_span,
            );
            let call_args = result.into_iter().filter(|_| d.result.is_some()).collect();
            f.set_terminator(call, Terminator::Jump(BlockCall { block: after, args: call_args }), d.span);
            let (yes, no) = if *then_arm { (base, call) } else { (call, base) };
            f.set_terminator(
                current,
                Terminator::Branch {
                    cond: mv(&map, *cond),
                    then_dest: BlockCall { block: yes, args: vec![] },
                    else_dest: BlockCall { block: no, args: vec![] },
                },
                callee.blocks[entry].term_span,
            );
            order.extend([base, call, after]);
            current = after;
        }
        f.set_terminator(current, term, term_span);
    }
    f.substitute(&subst);
    f.into_rebuilt(&order)
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
    copy_block_mapped(f, to, callee, from, &mut map);
    map
}

/// Copies the instructions of `callee`'s block `from` to the end of `f`'s block `to`,
/// each callee value that `map` holds read as its image; adds the copies' results to
/// `map`.
fn copy_block_mapped(
    f: &mut Function,
    to: Block,
    callee: &Function,
    from: Block,
    map: &mut HashMap<Value, Value>,
) {
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

    /// A recursion `pow(x, n)`: `n == 0` returns `1.0`, else `x * pow(x, n - 1)`.
    const POWER: &str = "fn @pow(%x_0: f64, %n_1: i64) -> f64 {\nbb0:\n    %z_2: i64 = iconst 0\n    %c_3: bool = icmp eq %n_1, %z_2\n    br %c_3, bb1, bb2\n\
                         bb1:\n    %o_4: f64 = fconst 1.0\n    ret %o_4\n\
                         bb2:\n    %k_5: i64 = iconst 1\n    %m_6: i64 = isub %n_1, %k_5\n    %p_7: f64 = call @pow(%x_0, %m_6)\n    %r_8: f64 = fmul %x_0, %p_7\n    ret %r_8\n}\n\n";

    #[test]
    fn a_recursive_functions_base_case_is_inlined_where_it_is_called() {
        let text = format!(
            "{POWER}fn @main(%a_0: f64, %n_1: i64) -> f64 {{\nbb0:\n    %b_2: f64 = call @pow(%a_0, %n_1)\n    ret %b_2\n}}\n"
        );
        let m = crate::parse_module(&text).unwrap();
        let split = inline_base_cases(m.clone());
        crate::verify_module(&split).unwrap();
        for name in ["main", "pow"] {
            let f = &split.funcs[split.func_by_name(name).unwrap()];
            let printed = crate::print_function(&split, f);
            // The test, then the base case beside the call, joined after them.
            assert_eq!(printed.matches("call @pow").count(), 1, "{printed}");
            assert!(printed.contains("fconst 1.0"), "{printed}");
            let entry = &f.blocks[f.entry()];
            assert!(matches!(entry.term, Terminator::Branch { .. }), "{printed}");
        }
        // `pow` tests twice on the way to its call: in its entry, and before calling.
        let pow = &split.funcs[split.func_by_name("pow").unwrap()];
        assert_eq!(crate::print_function(&split, pow).matches("icmp eq").count(), 2);
    }

    #[test]
    fn calls_in_loops_and_functions_with_rules_keep_their_calls_whole() {
        let text = format!(
            "{POWER}fn @main(%a_0: f64, %n_1: i64) -> f64 {{\nbb0:\n    %z_2: i64 = iconst 0\n    %s_3: f64 = fconst 0.0\n    jump bb1(%z_2, %s_3)\n\
             bb1(%i_4: i64, %t_5: f64):\n    %c_6: bool = icmp lt %i_4, %n_1\n    br %c_6, bb2, bb3\n\
             bb2:\n    %p_7: f64 = call @pow(%a_0, %i_4)\n    %u_8: f64 = fadd %t_5, %p_7\n    %k_9: i64 = iconst 1\n    %j_10: i64 = iadd %i_4, %k_9\n    jump bb1(%j_10, %u_8)\n\
             bb3:\n    ret %t_5\n}}\n"
        );
        let m = crate::parse_module(&text).unwrap();
        let split = inline_base_cases(m.clone());
        crate::verify_module(&split).unwrap();
        let main = &split.funcs[split.func_by_name("main").unwrap()];
        assert_eq!(main, &m.funcs[m.func_by_name("main").unwrap()]);
        // With a rule of its own, `pow` is left as written, and so are its calls.
        let mut ruled = crate::parse_module(&text).unwrap();
        let pow = ruled.func_by_name("pow").unwrap();
        ruled.rules.push(crate::function::CustomRule { func: pow, kind: crate::function::RuleKind::Zero });
        let split = inline_base_cases(ruled.clone());
        assert_eq!(split.funcs[pow], ruled.funcs[pow]);
    }
}
