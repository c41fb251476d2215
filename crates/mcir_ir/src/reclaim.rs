//! Memory given back at the end of each loop iteration. Native code allocates from a
//! per-call arena and frees nothing until the call returns, so a loop that makes an
//! array in every iteration would hold all of them; the interpreter frees each once
//! unused, but counts every allocation against the call's memory limit. A loop whose
//! iterations' arrays cannot be reached once the iteration ends instead takes an
//! `arena.mark` as each iteration begins and `arena.release`s to it on each back edge:
//! native code reuses the memory, and the interpreter's count goes back (both engines
//! run the function this pass gives, `for_engines`).
//!
//! **The invariant.** Nothing allocated after an iteration's mark is reachable after its
//! release. What an iteration allocates (itself or in the functions it calls) can be
//! reached afterwards only through a value that outlives it, or through memory that
//! outlives it; the pass rejects a loop where either is possible:
//!
//! - the values the back edges pass to the header's parameters are scalars, values made
//!   before the loop, or the header's own parameters (which, by induction, hold values
//!   made before the loop); a value made of scalars alone (a tuple or immutable struct of
//!   state) is passed as its scalars instead, through parameters the header gains, and
//!   made again at the top of the header, where the iteration's mark is then taken
//!   first (`split_carried`);
//! - a value made in the loop that is used outside it comes from the iteration that left
//!   the loop (its definition dominates the use), which passed no back edge and so no
//!   release. An edge that leaves the loop from its body (a `break`) releases too, in a
//!   block of its own, when no value the body makes that is not a scalar is used outside
//!   the loop; else the loop keeps its last iteration's memory, as a `return` from it does;
//! - nothing in the loop (or in a function it calls, transitively: [`Escapes`]) stores a
//!   value that is not a scalar into a reference, a mutable struct or a tape stack,
//!   reserves room in a tape stack (room native code may take from the arena), or
//!   touches the arena's marks. Arrays hold only scalars, so stores into them never keep
//!   memory alive; a scalar put into room reserved before the loop allocates nothing, a
//!   stack that a push grows grows in a tape region of its own that no release gives
//!   back (the interpreter counts pushes apart too), and a pop reads what was pushed
//!   before the loop began.
//!
//! A whole call of a recursive function is treated the same way: one that returns only
//! scalars, or a value made of scalars alone (tuples and immutable structs of them), and
//! in which nothing keeps memory as above, takes a mark as it begins and releases it
//! before each return: before building a tuple of scalars it builds last, else after
//! reading the scalars of its result out, which it then makes again (`copy_out`). What
//! it allocated can be reached after the release only through its result, which holds
//! no address. Recursion that makes arrays on each level then holds
//! those of the levels still running, not of every call made. (A call of any other
//! function is left alone: the loop around it, or the recursion it is called from,
//! gives back what it makes.)
//!
//! **Forward passes.** A forward pass returns the record its reverse pass reads and
//! pushes what its loops' reverse reads, so a recursive one could give back nothing of
//! what it made, nor a loop that pushes an array: the record holds arrays it made, and
//! everything shares the arena. Instead, the instructions that make
//! what its result may hold are marked `tape` (`InstData::in_tape`): both engines take
//! their memory from the call's tape region, which no release gives back. What the
//! result may hold is found backwards from each returned value, and from each value
//! pushed onto a stack, through the fields of records, tuples and cells, the aggregates
//! a value is read out of, the values passed to a block parameter, and those arguments
//! of a call whose result it is that the callee's result may hold (which parameters a
//! function's result may hold is solved for over the call graph: a determinant's record
//! holds the minor's shadow it was given, not the minor); an entry parameter was made
//! before the call. Such a pass then takes a mark as it begins and releases it
//! before each return, as above, when:
//!
//! - it stores no value that is not a scalar into a reference or mutable struct and
//!   marks no arena (a push or reservation is fine: what it pushes is held, and every
//!   reservation's room is marked `tape` too);
//! - nothing it calls stores into memory it was given ([`Escapes::stores_given`]); and
//! - every call whose result it may hold is of a forward pass marked so too.
//!
//! The forward passes marked so are the largest set closed under the last condition,
//! restricted to those that would still make an array in the arena and either recurse
//! or push arrays or records (the record of a helper called in a loop) onto their
//! stacks, and those whose results theirs hold. In a marked pass, pushes and
//! reservations keep no arena memory, so its loops and blocks may give theirs back by
//! the rules above: a loop that pushes what its reverse needs gives back the rest of
//! each iteration. Only forward passes are marked: the record lives until the reverse
//! pass has run anyway, while a primal's result may be dropped by a loop of its caller
//! that gives back its iterations' memory, which memory in the tape region would
//! outlive.
//!
//! A block on a cycle of the control flow that no such loop covers (the reverse of a
//! loop left by a `break` or `return` is entered in its middle by the early exit's
//! reverse, so it is no natural loop) takes a mark as it begins and releases it as it
//! ends, when no value it makes that is not a scalar is used by another block or passed
//! on by its terminator, and nothing in it keeps memory as above: what it allocated can
//! then be reached only through values that are dead once it ends.
//!
//! Only loops, blocks and functions that make arrays (themselves or through calls) are
//! changed: a release costs a little, and small records and tuples are not worth it.

use crate::callgraph::CallGraph;
use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::{Block, Function, Inst, Module, Op, Terminator, TypeId, TypeTable, Value, ValueDef};

/// What each function of a module may do that matters to a loop calling it.
pub struct Escapes {
    /// It may keep memory past its return through something it was given (a pointer
    /// stored into a reference or mutable struct, a tape stack grown) or release memory.
    keeps: Vec<bool>,
    /// It may make an array (itself or through the functions it calls).
    makes_arrays: Vec<bool>,
    /// The names of the functions that may call themselves (directly or not).
    recursive: std::collections::HashSet<String>,
    /// It may store a value that is not a scalar into memory it did not make (a
    /// reference, a mutable struct, a stack it was given), or mark or release the arena:
    /// itself or through the functions it calls.
    stores_given: Vec<bool>,
    /// The names of the forward passes whose results are made in the tape region (see
    /// the module docs): recursive forward passes, and those whose results theirs hold.
    tape_results: std::collections::HashSet<String>,
    /// The same, by function.
    tape_result: Vec<bool>,
    /// Which parameters each function's result may hold (see [`params_held`]).
    holds_param: Vec<Vec<bool>>,
    /// The module's types, for the shapes of values made of scalars alone (tuples and
    /// immutable structs of them), which a release keeps by reading them out before it
    /// and making them again after.
    types: TypeTable,
}

impl Escapes {
    /// The summaries of every function of `module`, through its call graph.
    pub fn of(module: &Module) -> Escapes {
        let n = module.funcs.len();
        let graph = CallGraph::new(module);
        let mut callers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for s in graph.sites() {
            if let Some(c) = callers.get_mut(s.callee.index()) {
                c.push(s.caller.index());
            }
        }
        // Each property flows from callees to callers.
        let spread = |flag: &mut Vec<bool>| {
            let mut work: Vec<usize> = (0..n).filter(|&i| flag[i]).collect();
            while let Some(g) = work.pop() {
                for &c in &callers[g] {
                    if !flag[c] {
                        flag[c] = true;
                        work.push(c);
                    }
                }
            }
        };
        let mut stores_given: Vec<bool> = module.funcs.values().map(stores_into_given).collect();
        spread(&mut stores_given);
        let is_recursive: Vec<bool> = module.funcs.keys().map(|id| graph.is_recursive(id)).collect();
        let holds_param = params_held(module, &callers);
        let held = tape_results(module, &stores_given, &is_recursive, &holds_param, &spread);
        let tape_result: Vec<bool> = held.iter().map(Option::is_some).collect();
        let mut keeps = vec![false; n];
        let mut makes_arrays = vec![false; n];
        for (id, f) in module.funcs.iter() {
            // What a forward pass's result holds is made in the tape region, not the arena.
            let held = held[id.index()].as_ref();
            for d in f.insts.values() {
                keeps[id.index()] |= keeps_memory(f, &d.op, &d.args);
                let in_tape = d.result.is_some_and(|r| held.is_some_and(|h| h.values[r.index()]));
                makes_arrays[id.index()] |= makes_array(&d.op) && !in_tape;
            }
        }
        spread(&mut keeps);
        spread(&mut makes_arrays);
        let tape_results = module
            .funcs
            .iter()
            .filter(|&(id, _)| tape_result[id.index()])
            .map(|(_, f)| f.name.clone())
            .collect();
        let recursive = module
            .funcs
            .iter()
            .filter(|&(id, _)| is_recursive[id.index()])
            .map(|(_, f)| f.name.clone())
            .collect();
        Escapes {
            keeps,
            makes_arrays,
            recursive,
            stores_given,
            tape_results,
            tape_result,
            holds_param,
            types: module.types.clone(),
        }
    }

    fn call_keeps(&self, op: &Op) -> bool {
        matches!(op, Op::Call(g) if self.keeps.get(g.index()).copied().unwrap_or(true))
    }

    /// The shape of a value of type `t` if it is made of scalars alone.
    fn shape(&self, t: TypeId) -> Option<Shape> {
        shape_of(&self.types, t, &mut { MAX_COPIED_SCALARS })
    }

    /// Whether `f` is a forward pass whose result is made in the tape region.
    fn result_in_tape(&self, f: &Function) -> bool {
        self.tape_results.contains(&f.name)
    }

    fn call_stores_given(&self, op: &Op) -> bool {
        matches!(op, Op::Call(g) if self.stores_given.get(g.index()).copied().unwrap_or(true))
    }

    /// Whether an instruction of `f` may keep memory alive past the iteration (or call)
    /// it runs in (see the module docs). In a forward pass whose result is made in the
    /// tape region, what it pushes is there too, or was made before the call.
    fn keeps(&self, f: &Function, in_tape: bool, d: &crate::InstData) -> bool {
        if in_tape {
            stores_or_marks(f, &d.op, &d.args, |_| true) || self.call_stores_given(&d.op)
        } else {
            keeps_memory(f, &d.op, &d.args) || self.call_keeps(&d.op)
        }
    }

    fn call_makes_arrays(&self, op: &Op) -> bool {
        matches!(op, Op::Call(g) if self.makes_arrays.get(g.index()).copied().unwrap_or(true))
    }
}

fn is_scalar(ty: crate::TypeId) -> bool {
    matches!(ty, TypeTable::F64 | TypeTable::I64 | TypeTable::BOOL)
}

/// Whether an op may keep memory alive past the iteration (or call) it runs in, through
/// something made before it: see the module docs.
fn keeps_memory(f: &Function, op: &Op, args: &[Value]) -> bool {
    match op {
        Op::RefStore | Op::MutStore(..) => args.last().is_some_and(|&v| !is_scalar(f.value_type(v))),
        // A scalar put into room reserved before the loop allocates nothing, and a push
        // grows its stack in the tape region; a pop or peek gives back an array only if
        // one was pushed or put, which happened before the loop began (an array pushed
        // or put in the loop keeps the loop as it is), so before the iteration's mark.
        // A stack grows in a region of its own, which no release gives back: a scalar
        // pushed in the iteration stays.
        Op::StackPut | Op::StackPush => args.iter().skip(1).any(|&v| !is_scalar(f.value_type(v))),
        Op::StackPop | Op::StackPeek => false,
        Op::StackReserve | Op::ArenaMark | Op::ArenaRelease | Op::TapeMark | Op::TapeRelease => true,
        _ => false,
    }
}

/// Whether an op stores a value that is not a scalar into memory that `made_here` does
/// not vouch for, or marks or releases the arena: a reference's or mutable struct's
/// content always; a stack push, put or reservation when the stack is not `made_here`.
fn stores_or_marks(f: &Function, op: &Op, args: &[Value], made_here: impl Fn(Value) -> bool) -> bool {
    match op {
        Op::RefStore | Op::MutStore(..) => args.last().is_some_and(|&v| !is_scalar(f.value_type(v))),
        Op::StackPut | Op::StackPush => {
            args.iter().skip(1).any(|&v| !is_scalar(f.value_type(v)))
                && !args.first().is_some_and(|&s| made_here(s))
        }
        Op::StackReserve => !args.first().is_some_and(|&s| made_here(s)),
        Op::ArenaMark | Op::ArenaRelease | Op::TapeMark | Op::TapeRelease => true,
        _ => false,
    }
}

/// Whether `f` itself stores into memory it was given, or marks the arena (see
/// [`Escapes::stores_given`]); a stack it makes with `stack.new` is its own.
fn stores_into_given(f: &Function) -> bool {
    let own_stack = |v: Value| match f.values[v].def {
        ValueDef::Inst(i) => matches!(f.insts[i].op, Op::StackNew),
        ValueDef::Param(..) => false,
    };
    f.insts.values().any(|d| stores_or_marks(f, &d.op, &d.args, own_stack))
}

/// What a forward pass's result may hold that its call makes: the values (not scalars)
/// whose memory must outlive the call, and the functions whose results are among them.
struct Held {
    values: Vec<bool>,
    callees: Vec<crate::FuncId>,
}

/// The values of `f` that its result may reach, and what it pushes onto stacks (the
/// reverse pass pops it): from each returned value back through the fields of the
/// records, tuples and cells it is made of, the arguments of the calls it comes from
/// that the callee's result may hold (`holds_param`: see [`params_held`]), the
/// aggregates it is read out of and the values passed to the block parameter it is. An
/// entry parameter was made before the call.
fn held_by_result(f: &Function, holds_param: &[Vec<bool>]) -> Held {
    let mut values = vec![false; f.values.len()];
    let mut callees = Vec::new();
    let mut work: Vec<Value> = Vec::new();
    let mut incoming: Vec<Vec<&[Value]>> = vec![Vec::new(); f.blocks.len()];
    let hold = |v: Value, values: &mut Vec<bool>, work: &mut Vec<Value>| {
        if !is_scalar(f.value_type(v)) && !std::mem::replace(&mut values[v.index()], true) {
            work.push(v);
        }
    };
    for (_, data) in f.blocks.iter() {
        for s in data.term.successors() {
            incoming[s.block.index()].push(&s.args);
        }
        if let Terminator::Return(Some(v)) = data.term {
            hold(v, &mut values, &mut work);
        }
        for &i in &data.insts {
            let d = &f.insts[i];
            if matches!(d.op, Op::StackPush | Op::StackPut) {
                for &a in &d.args[1..] {
                    hold(a, &mut values, &mut work);
                }
            }
        }
    }
    while let Some(v) = work.pop() {
        match f.values[v].def {
            ValueDef::Param(b, k) => {
                if b != f.entry() {
                    for args in &incoming[b.index()] {
                        if let Some(&a) = args.get(k as usize) {
                            hold(a, &mut values, &mut work);
                        }
                    }
                }
            }
            ValueDef::Inst(i) => {
                let d = &f.insts[i];
                match d.op {
                    Op::Call(g) => {
                        callees.push(g);
                        let held = holds_param.get(g.index());
                        for (k, &a) in d.args.iter().enumerate() {
                            if held.is_none_or(|h| h.get(k).copied().unwrap_or(true)) {
                                hold(a, &mut values, &mut work);
                            }
                        }
                        continue;
                    }
                    // What was pushed is held already, or was pushed before the call.
                    Op::StackPop | Op::StackPeek | Op::Unset => continue,
                    Op::TupleNew | Op::StructNew(_) | Op::RefNew => {}
                    // A fresh array or stack holds no value of the call.
                    ref op if op.may_take_tape() => continue,
                    _ => {}
                }
                for &a in &d.args {
                    hold(a, &mut values, &mut work);
                }
            }
        }
    }
    Held { values, callees }
}

/// For each function, which of its parameters its result may hold, as `held_by_result`
/// finds them: the least solution, from "none" upwards, of the equations the functions'
/// calls make (a recursive call holds what the callee's result holds). Exact for the
/// functions whose results go to the tape region, which store no value into memory;
/// for any other function the answer is never used, since a forward pass that holds
/// the result of a call to one does not qualify.
fn params_held(module: &Module, callers: &[Vec<usize>]) -> Vec<Vec<bool>> {
    let funcs: Vec<&Function> = module.funcs.values().collect();
    let mut holds: Vec<Vec<bool>> =
        funcs.iter().map(|f| vec![false; f.blocks[f.entry()].params.len()]).collect();
    let mut queued = vec![true; funcs.len()];
    let mut work: Vec<usize> = (0..funcs.len()).rev().collect();
    while let Some(c) = work.pop() {
        queued[c] = false;
        let f = funcs[c];
        let held = held_by_result(f, &holds);
        let now: Vec<bool> = f.blocks[f.entry()].params.iter().map(|p| held.values[p.index()]).collect();
        if now != holds[c] {
            holds[c] = now;
            for &caller in &callers[c] {
                if !std::mem::replace(&mut queued[caller], true) {
                    work.push(caller);
                }
            }
        }
    }
    holds
}

/// What the results of the forward passes made in the tape region may hold (`None` for
/// every other function). Those passes are each one that
/// qualifies, would still make an array in the arena so marked (else nothing would be
/// given back, and marking costs a little), and either recurses (each call gives back
/// the rest as it returns) or pushes arrays or records onto its stacks (its loops may
/// then give back their iterations' rest); and every forward pass whose result one of
/// those holds. A forward pass qualifies when it stores nothing into a
/// reference or mutable struct, marks no arena, calls nothing that stores into memory it
/// was given, and every function whose result its own may hold qualifies too (the
/// largest such set).
fn tape_results(
    module: &Module,
    stores_given: &[bool],
    is_recursive: &[bool],
    holds_param: &[Vec<bool>],
    spread: &dyn Fn(&mut Vec<bool>),
) -> Vec<Option<Held>> {
    let n = module.funcs.len();
    let mut callees: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut ok = vec![false; n];
    let mut helds: Vec<Option<Held>> = Vec::with_capacity(n);
    // Whether a call may leave an array in the arena, were the forward passes that
    // qualify marked: only then does one gain from being marked.
    let mut makes_in_arena = vec![false; n];
    for (id, f) in module.funcs.iter() {
        let local = f.is_forward_pass()
            && f.insts.values().all(|d| {
                !stores_or_marks(f, &d.op, &d.args, |_| true)
                    && !matches!(d.op, Op::Call(g) if stores_given.get(g.index()).copied().unwrap_or(true))
            });
        let held = local.then(|| held_by_result(f, holds_param));
        for data in f.blocks.values() {
            for &i in &data.insts {
                let d = &f.insts[i];
                let in_tape = d.result.is_some_and(|r| held.as_ref().is_some_and(|h| h.values[r.index()]));
                makes_in_arena[id.index()] |= makes_array(&d.op) && !in_tape;
            }
        }
        if let Some(held) = &held {
            ok[id.index()] = true;
            callees[id.index()] = held.callees.iter().map(|g| g.index()).collect();
        }
        helds.push(held);
    }
    spread(&mut makes_in_arena);
    // The largest set closed under "holds only results of the set": drop a function that
    // holds a result from outside it, then its dependants, until none is left to drop.
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (c, gs) in callees.iter().enumerate() {
        for &g in gs {
            if let Some(h) = holders.get_mut(g) {
                h.push(c);
            }
        }
    }
    let mut work: Vec<usize> = (0..n)
        .filter(|&c| ok[c] && callees[c].iter().any(|&g| !ok.get(g).copied().unwrap_or(false)))
        .collect();
    while let Some(c) = work.pop() {
        if std::mem::replace(&mut ok[c], false) {
            work.extend(holders[c].iter().copied().filter(|&h| ok[h]));
        }
    }
    // From the recursive ones that would give back arena memory as each call returns,
    // every forward pass whose result theirs may hold.
    let mut chosen = vec![false; n];
    let pushes_arrays: Vec<bool> = module
        .funcs
        .values()
        .map(|f| {
            f.insts.values().any(|d| {
                matches!(d.op, Op::StackPush | Op::StackPut)
                    && d.args.iter().skip(1).any(|&v| !is_scalar(f.value_type(v)))
            })
        })
        .collect();
    let mut work: Vec<usize> =
        (0..n).filter(|&c| ok[c] && makes_in_arena[c] && (is_recursive[c] || pushes_arrays[c])).collect();
    while let Some(c) = work.pop() {
        if !std::mem::replace(&mut chosen[c], true) {
            work.extend(callees[c].iter().copied());
        }
    }
    helds.into_iter().zip(chosen).map(|(held, chosen)| held.filter(|_| chosen)).collect()
}

/// Whether an instruction makes an array in the arena (not in the tape region).
fn makes_arena_array(d: &crate::InstData) -> bool {
    makes_array(&d.op) && !d.in_tape
}

/// Whether an op makes an array (what it allocates that is neither a cell nor a stack).
fn makes_array(op: &Op) -> bool {
    op.allocates() && !matches!(op, Op::RefNew | Op::StackNew)
}

/// `f` as both engines run it: with its memory given back at the end of each iteration
/// of the loops that qualify (see the module docs), or `None` when none does.
pub fn for_engines(f: &Function, escapes: &Escapes) -> Option<Function> {
    let in_tape = escapes.result_in_tape(f);
    // What the result may hold, and the room of every stack, from the tape region.
    let held = in_tape.then(|| held_by_result(f, &escapes.holds_param));
    let flagged = held.as_ref().map(|held| {
        let mut g = f.clone();
        for d in g.insts.values_mut() {
            let kept = d.result.is_some_and(|r| held.values[r.index()]);
            d.in_tape = d.op.may_take_tape() && (kept || matches!(d.op, Op::StackReserve));
        }
        g
    });
    let f = flagged.as_ref().unwrap_or(f);
    let cfg = ControlFlow::compute(f);
    let n = f.blocks.len();
    let mut block_of: Vec<Option<Block>> = vec![None; f.insts.len()];
    for (b, data) in f.blocks.iter() {
        for &i in &data.insts {
            if let Some(slot) = block_of.get_mut(i.index()) {
                *slot = Some(b);
            }
        }
    }
    let def_block = |v: Value| match f.values[v].def {
        ValueDef::Param(b, _) => Some(b),
        ValueDef::Inst(i) => block_of.get(i.index()).copied().flatten(),
    };
    let mut plans: Vec<Plan> = Vec::new();
    // The blocks of loops that give back their iterations' memory, and of those that
    // give back all of it (no iteration's memory outlives the loop).
    let mut given_back = vec![false; n];
    let mut all_given_back = vec![false; n];
    for &h in &cfg.rpo {
        let latches: Vec<Block> =
            cfg.preds[h.index()].iter().copied().filter(|&p| cfg.dominates(h, p)).collect();
        if latches.is_empty() || h == f.entry() {
            continue;
        }
        // The natural loop: the header and every block that reaches a latch without it.
        let mut body = vec![false; n];
        body[h.index()] = true;
        let mut work = latches.clone();
        while let Some(b) = work.pop() {
            if !std::mem::replace(&mut body[b.index()], true) {
                work.extend(cfg.preds[b.index()].iter().copied().filter(|p| cfg.is_reachable(*p)));
            }
        }
        if let Some(plan) = plan_loop(f, &cfg, h, &latches, &body, &def_block, escapes) {
            for (b, &inside) in body.iter().enumerate() {
                given_back[b] |= inside;
                all_given_back[b] |= inside && plan.all_given_back;
            }
            plans.push(plan);
        }
    }
    let scopes = block_scopes(f, &cfg, escapes, &given_back, &block_of, in_tape);
    for &b in &scopes {
        given_back[b.index()] = true;
        all_given_back[b.index()] = true;
    }
    let whole_call = plan_call(f, &cfg, escapes, &all_given_back, held.as_ref());
    if plans.is_empty() && whole_call.is_none() && scopes.is_empty() {
        return flagged;
    }
    let mut out = f.clone();
    for b in scopes {
        let span = out.blocks[b].term_span;
        let mark = mark_at_top(&mut out, b, span);
        out.push_inst(b, Op::ArenaRelease, vec![mark], None, span);
    }
    if let Some(returns) = whole_call {
        let entry = out.entry();
        let span = out.span;
        let mark = mark_at_top(&mut out, entry, span);
        for (b, at) in returns {
            let span = out.blocks[b].term_span;
            if at == COPY_OUT {
                copy_out(&mut out, b, mark, escapes);
                continue;
            }
            out.push_inst(b, Op::ArenaRelease, vec![mark], None, span);
            if let Some(inst) = out.blocks[b].insts.pop() {
                out.blocks[b].insts.insert(at, inst);
            }
        }
    }
    for plan in plans {
        for &k in &plan.split {
            split_carried(&mut out, plan.header, k, &plan.latches, escapes);
        }
        let span = out.blocks[plan.mark_block].term_span;
        let mark = mark_at_top(&mut out, plan.mark_block, span);
        for latch in plan.latches {
            let span = out.blocks[latch].term_span;
            out.push_inst(latch, Op::ArenaRelease, vec![mark], None, span);
        }
        for (from, k) in plan.exits {
            let span = out.blocks[from].term_span;
            let edge = out.add_block();
            let Some(call) = out.blocks[from].term.successors_mut().nth(k) else { continue };
            let target = std::mem::replace(call, crate::BlockCall { block: edge, args: Vec::new() });
            out.push_inst(edge, Op::ArenaRelease, vec![mark], None, span);
            out.set_terminator(edge, Terminator::Jump(target), span);
        }
    }
    Some(out)
}

/// Where a return releases by reading its value out and making it again (see
/// [`copy_out`]), in place of a position in its block.
const COPY_OUT: usize = usize::MAX;

/// How a value-identified value is made of scalars: tuples and immutable structs, down to
/// their scalar fields.
#[derive(Clone, Debug)]
enum Shape {
    Scalar,
    Tuple(Vec<(TypeId, Shape)>),
    Struct(crate::StructId, Vec<(TypeId, Shape)>),
}

/// The most scalars a returned value may be read out into.
const MAX_COPIED_SCALARS: usize = 64;

/// The shape of a value of type `t` made of scalars alone, if it is one (and has at most
/// `*budget` scalars, which it takes from).
fn shape_of(types: &TypeTable, t: TypeId, budget: &mut usize) -> Option<Shape> {
    let fields = |ts: &[TypeId], budget: &mut usize| -> Option<Vec<(TypeId, Shape)>> {
        ts.iter().map(|&ft| Some((ft, shape_of(types, ft, budget)?))).collect()
    };
    match types.try_get(t)? {
        crate::Type::Scalar(_) => {
            *budget = budget.checked_sub(1)?;
            Some(Shape::Scalar)
        }
        crate::Type::Tuple(items) => Some(Shape::Tuple(fields(items, budget)?)),
        crate::Type::Struct(sid) => {
            let def = types.struct_def(*sid);
            if def.mutable {
                return None;
            }
            let ts: Vec<TypeId> = def.fields.iter().map(|f| f.1).collect();
            Some(Shape::Struct(*sid, fields(&ts, budget)?))
        }
        _ => None,
    }
}

/// Ends returning block `b` with a release to `mark` that keeps its value: the scalars
/// of the returned value are read out, the memory released, and the value made again
/// from them, which is returned instead.
fn copy_out(out: &mut Function, b: Block, mark: Value, escapes: &Escapes) {
    let span = out.blocks[b].term_span;
    let Terminator::Return(Some(v)) = out.blocks[b].term else { return };
    let t = out.value_type(v);
    let Some(shape) = escapes.shape(t) else { return };
    let shape = &shape;
    let mut leaves = Vec::new();
    read_scalars(out, b, v, shape, span, &mut leaves);
    out.push_inst(b, Op::ArenaRelease, vec![mark], None, span);
    if let Some(w) = build_from_scalars(out, b, t, shape, span, &mut leaves.into_iter()) {
        out.set_terminator(b, Terminator::Return(Some(w)), span);
    }
}

/// Reads the scalars of `v`, of the given shape, at the end of block `b`, in order.
fn read_scalars(
    out: &mut Function,
    b: Block,
    v: Value,
    shape: &Shape,
    span: crate::Span,
    leaves: &mut Vec<Value>,
) {
    let (fields, sid) = match shape {
        Shape::Scalar => return leaves.push(v),
        Shape::Tuple(fields) => (fields, None),
        Shape::Struct(sid, fields) => (fields, Some(*sid)),
    };
    for (k, (ft, fs)) in fields.iter().enumerate() {
        let op = match sid {
            Some(sid) => Op::StructGet(sid, k as u32),
            None => Op::TupleGet(k as u32),
        };
        let x = out.push_value(b, op, vec![v], *ft, span);
        read_scalars(out, b, x, fs, span, leaves);
    }
}

/// Makes a value of type `t` and the given shape from `leaves`, at the end of block `b`.
fn build_from_scalars(
    out: &mut Function,
    b: Block,
    t: TypeId,
    shape: &Shape,
    span: crate::Span,
    leaves: &mut std::vec::IntoIter<Value>,
) -> Option<Value> {
    let (fields, op) = match shape {
        Shape::Scalar => return leaves.next(),
        Shape::Tuple(fields) => (fields, Op::TupleNew),
        Shape::Struct(sid, fields) => (fields, Op::StructNew(*sid)),
    };
    let args: Option<Vec<Value>> =
        fields.iter().map(|(ft, fs)| build_from_scalars(out, b, *ft, fs, span, leaves)).collect();
    Some(out.push_value(b, op, args?, t, span))
}

/// The scalar types of a shape's leaves, in order.
fn scalar_types(t: TypeId, shape: &Shape, out: &mut Vec<TypeId>) {
    match shape {
        Shape::Scalar => out.push(t),
        Shape::Tuple(fields) | Shape::Struct(_, fields) => {
            for (ft, fs) in fields {
                scalar_types(*ft, fs, out);
            }
        }
    }
}

/// Splits parameter `k` of loop header `h`, which carries a value made of scalars, into
/// one parameter per scalar: every edge into `h` passes the scalars of what it passed
/// (a back edge passes the parameter itself in its old place, which then only ever
/// holds the value from before the loop), and the value is made again at the top of
/// `h`, where the iteration's mark is then taken first, and used in place of the
/// parameter. So nothing made in an iteration is carried to the next.
fn split_carried(out: &mut Function, h: Block, k: usize, latches: &[Block], escapes: &Escapes) {
    let Some(&p) = out.blocks[h].params.get(k) else { return };
    let t = out.value_type(p);
    let Some(shape) = escapes.shape(t) else { return };
    let span = out.blocks[h].term_span;
    let mut types = Vec::new();
    scalar_types(t, &shape, &mut types);
    let params: Vec<Value> = types.iter().map(|&st| out.add_block_param(h, st, None)).collect();
    let preds: Vec<Block> = out
        .blocks
        .iter()
        .filter(|(_, d)| d.term.successors().any(|c| c.block == h))
        .map(|(b, _)| b)
        .collect();
    for b in preds {
        let edges = out.blocks[b].term.successors().count();
        for s in 0..edges {
            let passed = match out.blocks[b].term.successors().nth(s) {
                Some(c) if c.block == h => c.args.get(k).copied(),
                _ => None,
            };
            let Some(a) = passed else { continue };
            let mut leaves = Vec::new();
            read_scalars(out, b, a, &shape, span, &mut leaves);
            if let Some(c) = out.blocks[b].term.successors_mut().nth(s) {
                c.args.extend(leaves);
                if latches.contains(&b) {
                    c.args[k] = p;
                }
            }
        }
    }
    let before = out.blocks[h].insts.len();
    let Some(remade) = build_from_scalars(out, h, t, &shape, span, &mut params.into_iter()) else { return };
    let made: Vec<Inst> = out.blocks[h].insts.drain(before..).collect();
    out.blocks[h].insts.splice(0..0, made);
    // Every other use of the parameter reads the value made again.
    for d in out.insts.values_mut() {
        if d.result != Some(remade) {
            for a in d.args.iter_mut().filter(|a| **a == p) {
                *a = remade;
            }
        }
    }
    let blocks: Vec<Block> = out.blocks.keys().collect();
    for b in blocks {
        let latch = latches.contains(&b);
        let term = &mut out.blocks[b].term;
        if let Terminator::Return(Some(v)) = term {
            if *v == p {
                *v = remade;
            }
        }
        for c in term.successors_mut() {
            for (j, a) in c.args.iter_mut().enumerate() {
                if *a == p && !(latch && c.block == h && j == k) {
                    *a = remade;
                }
            }
        }
    }
}

/// An `arena.mark` taken first thing in `block`.
fn mark_at_top(out: &mut Function, block: Block, span: crate::Span) -> Value {
    let mark = out.push_value(block, Op::ArenaMark, vec![], TypeTable::I64, span);
    if let Some(inst) = out.blocks[block].insts.pop() {
        out.blocks[block].insts.insert(0, inst);
    }
    mark
}

/// Where a function whose memory nothing can reach after it returns releases it: each
/// returning block, and the position there (before a tuple of scalars the block builds
/// to return, else at its end). `None` when the function makes no array in the arena
/// outside the loops that give theirs back, may keep memory (see [`Escapes::keeps`]), or
/// returns anything but scalars and such a tuple, unless it is a forward pass whose
/// result is `held` in the tape region (see the module docs); and for functions that do
/// not recurse: the loop around a call, or the recursion it is called from, gives back
/// what one call makes, and a release costs a little.
fn plan_call(
    f: &Function,
    cfg: &ControlFlow,
    escapes: &Escapes,
    given_back: &[bool],
    held: Option<&Held>,
) -> Option<Vec<(Block, usize)>> {
    if !escapes.recursive.contains(&f.name) || !cfg.preds[f.entry().index()].is_empty() {
        return None;
    }
    // A result made in the tape region may hold results of other calls only when those
    // are made there too.
    if held.is_some_and(|h| {
        h.callees.iter().any(|&g| !escapes.tape_result.get(g.index()).copied().unwrap_or(false))
    }) {
        return None;
    }
    let mut makes = false;
    for (b, data) in f.blocks.iter() {
        for &i in &data.insts {
            let d = &f.insts[i];
            if escapes.keeps(f, held.is_some(), d) {
                return None;
            }
            let made = makes_arena_array(d) || escapes.call_makes_arrays(&d.op);
            makes |= made && !given_back.get(b.index()).copied().unwrap_or(false);
        }
    }
    if !makes {
        return None;
    }
    let mut returns = Vec::new();
    for (b, data) in f.blocks.iter() {
        if !cfg.is_reachable(b) {
            continue;
        }
        let Terminator::Return(r) = data.term else { continue };
        let at = match r {
            None => data.insts.len(),
            Some(v) if is_scalar(f.value_type(v)) || held.is_some() => data.insts.len(),
            Some(v) => {
                // A tuple of scalars built last in the block: released before it, so that
                // it is built after the release (it may be allocated). Another value made
                // of scalars is read out before the release and made again after it.
                let built_last = match f.values[v].def {
                    ValueDef::Inst(i) => {
                        let d = &f.insts[i];
                        matches!(d.op, Op::TupleNew)
                            && d.args.iter().all(|&a| is_scalar(f.value_type(a)))
                            && data.insts.last() == Some(&i)
                    }
                    ValueDef::Param(..) => false,
                };
                if built_last {
                    data.insts.len() - 1
                } else if escapes.shape(f.value_type(v)).is_some() {
                    COPY_OUT
                } else {
                    return None;
                }
            }
        };
        returns.push((b, at));
    }
    Some(returns)
}

/// The blocks on a cycle of the control flow that no loop above gives back (the reverse
/// of a loop with a `break` or `return`, which the break's reverse enters in the middle,
/// is no natural loop) and that can give back what they make themselves: each makes an
/// array, keeps no memory (see [`keeps_memory`]), and uses every value it makes that is
/// not a scalar only in its own instructions, not in its terminator nor anywhere else.
/// Such a block takes a mark as it begins and releases it as it ends.
fn block_scopes(
    f: &Function,
    cfg: &ControlFlow,
    escapes: &Escapes,
    given_back: &[bool],
    block_of: &[Option<Block>],
    in_tape: bool,
) -> Vec<Block> {
    let makes_here = |b: Block| {
        f.blocks[b]
            .insts
            .iter()
            .any(|&i| makes_arena_array(&f.insts[i]) || escapes.call_makes_arrays(&f.insts[i].op))
    };
    let candidates: Vec<Block> = cfg
        .rpo
        .iter()
        .copied()
        .filter(|&b| !given_back.get(b.index()).copied().unwrap_or(true) && makes_here(b))
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    // Blocks on a cycle: in a strongly connected component of more than one block, or
    // jumping to themselves.
    let mut graph: petgraph::graph::DiGraph<(), ()> = petgraph::graph::DiGraph::new();
    let nodes: Vec<petgraph::graph::NodeIndex> = (0..f.blocks.len()).map(|_| graph.add_node(())).collect();
    for &b in &cfg.rpo {
        for s in f.blocks[b].term.successors() {
            graph.add_edge(nodes[b.index()], nodes[s.block.index()], ());
        }
    }
    let mut on_cycle = vec![false; f.blocks.len()];
    for component in petgraph::algo::tarjan_scc(&graph) {
        if component.len() > 1 {
            for n in component {
                on_cycle[n.index()] = true;
            }
        }
    }
    for &b in &cfg.rpo {
        if f.blocks[b].term.successors().any(|s| s.block == b) {
            on_cycle[b.index()] = true;
        }
    }
    // The blocks a value they make (not a scalar) leaves: used by another block, or by
    // the block's own terminator. One pass over every use.
    let made_by = |v: Value| match f.values[v].def {
        ValueDef::Inst(i) if !is_scalar(f.value_type(v)) => block_of.get(i.index()).copied().flatten(),
        _ => None,
    };
    let mut leaks = vec![false; f.blocks.len()];
    for &o in &cfg.rpo {
        let data = &f.blocks[o];
        for &i in &data.insts {
            for &v in &f.insts[i].args {
                if let Some(b) = made_by(v).filter(|&b| b != o) {
                    leaks[b.index()] = true;
                }
            }
        }
        for v in data.term.uses() {
            if let Some(b) = made_by(v) {
                leaks[b.index()] = true;
            }
        }
    }
    candidates
        .into_iter()
        .filter(|&b| on_cycle[b.index()] && !leaks[b.index()])
        .filter(|&b| !f.blocks[b].insts.iter().any(|&i| escapes.keeps(f, in_tape, &f.insts[i])))
        .collect()
}

/// Where a loop takes its mark, and the blocks that release it.
struct Plan {
    header: Block,
    /// The header's parameters that carry a value made of scalars from one iteration to
    /// the next: split into scalar parameters (see [`split_carried`]).
    split: Vec<usize>,
    mark_block: Block,
    latches: Vec<Block>,
    /// The edges (block, successor) that leave the loop from its body and release too.
    exits: Vec<(Block, usize)>,
    /// Whether no iteration's memory outlives the loop.
    all_given_back: bool,
}

fn plan_loop(
    f: &Function,
    cfg: &ControlFlow,
    h: Block,
    latches: &[Block],
    body: &[bool],
    def_block: &dyn Fn(Value) -> Option<Block>,
    escapes: &Escapes,
) -> Option<Plan> {
    let in_tape = escapes.result_in_tape(f);
    let in_body = |b: Option<Block>| b.is_some_and(|b| body.get(b.index()).copied().unwrap_or(false));
    let mut makes = false;
    for (b, data) in f.blocks.iter() {
        if !body[b.index()] {
            continue;
        }
        for &i in &data.insts {
            let d = &f.insts[i];
            if escapes.keeps(f, in_tape, d) {
                return None;
            }
            makes |= makes_arena_array(d) || escapes.call_makes_arrays(&d.op);
        }
    }
    if !makes {
        return None;
    }
    // Each latch ends in a jump to the header (a branch would release on its other
    // edge too), whose arguments made in the loop are scalars or the header's own.
    // A value made of scalars alone (a tuple or struct of state) is passed on as its
    // scalars instead.
    let mut split: Vec<usize> = Vec::new();
    for &l in latches {
        let Terminator::Jump(call) = &f.blocks[l].term else { return None };
        if call.block != h {
            return None;
        }
        for (k, (&a, &p)) in call.args.iter().zip(&f.blocks[h].params).enumerate() {
            if is_scalar(f.value_type(p)) || !in_body(def_block(a)) || f.blocks[h].params.contains(&a) {
                continue;
            }
            escapes.shape(f.value_type(p))?;
            if !split.contains(&k) {
                split.push(k);
            }
        }
    }
    // A value made in the body may be used outside the loop: its definition dominates
    // the use, so the iteration that made it is the last one, which left the loop without
    // passing a back edge and so without a release. When no such value is used outside,
    // the edges that leave the loop from its body (a `break`) release too, each through a
    // block of its own; else the loop keeps its last iteration's memory.
    let made_in_body = |v: Value| {
        let b = def_block(v);
        in_body(b) && b != Some(h) && !is_scalar(f.value_type(v))
    };
    let used_outside = f.blocks.iter().any(|(b, data)| {
        !body[b.index()]
            && cfg.is_reachable(b)
            && data
                .insts
                .iter()
                .flat_map(|&i| f.insts[i].args.iter().copied())
                .chain(data.term.uses())
                .any(made_in_body)
    });
    let mut exits = Vec::new();
    let mut returns_from_body = false;
    for (b, data) in f.blocks.iter() {
        if b == h || !body[b.index()] {
            continue;
        }
        returns_from_body |= matches!(data.term, Terminator::Return(_));
        for (k, s) in data.term.successors().enumerate() {
            if !body[s.block.index()] {
                exits.push((b, k));
            }
        }
    }
    // The mark goes where each iteration's body begins when the header's only edge into
    // the loop leads there and the header makes no array (the header's test then stays as
    // it was); else at the top of the header.
    let inside: Vec<Block> =
        f.blocks[h].term.successors().map(|c| c.block).filter(|s| body[s.index()]).collect();
    let header_makes = f.blocks[h]
        .insts
        .iter()
        .any(|&i: &Inst| makes_arena_array(&f.insts[i]) || escapes.call_makes_arrays(&f.insts[i].op));
    let mark_block = match inside.as_slice() {
        [s] if split.is_empty()
            && *s != h
            && !header_makes
            && cfg.preds[s.index()].len() == 1
            && latches.iter().all(|&l| cfg.dominates(*s, l)) =>
        {
            *s
        }
        _ => h,
    };
    let releases_exits = !used_outside && exits.iter().all(|&(b, _)| cfg.dominates(mark_block, b));
    // A `return` from the body keeps its iteration's memory (the call's own release, if
    // any, gives it back).
    let all_given_back = !returns_from_body && (exits.is_empty() || releases_exits);
    if !releases_exits {
        exits.clear();
    }
    Some(Plan { header: h, split, mark_block, latches: latches.to_vec(), exits, all_given_back })
}

#[cfg(test)]
mod tests {
    use super::{for_engines, Escapes};
    use crate::entity::EntityRef;
    use crate::FuncId;

    /// The releases `for_engines` gives function `k` of `text`, by the block they end.
    fn releases(text: &str, k: usize) -> Option<String> {
        let m = match crate::parse::parse_module(text) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        let f = for_engines(&m.funcs[FuncId::new(k)], &Escapes::of(&m))?;
        if let Err(e) = crate::verify::verify_function(&m, &f) {
            panic!("{e}");
        }
        Some(crate::print::print_function(&m, &f))
    }

    /// A counted loop around `body`, which may use `%i_3` and `%s_4` and must define
    /// `%s_9`; `carried` is the type of `%s`.
    fn counted(carried: &str, init: &str, body: &str, extra: &str) -> String {
        format!(
            "fn @f(%x_0: f64, %n_1: i64, %r_2: ref<f64[]>) -> {carried} {{\nbb0:\n    %z_5: i64 = iconst 0\n    {init}\n    jump bb1(%z_5, %s0_6)\nbb1(%i_3: i64, %s_4: {carried}):\n    %c_7: bool = icmp lt %i_3, %n_1\n    br %c_7, bb3, bb2\nbb2:\n    ret %s_4\nbb3:\n{body}\n    %one_10: i64 = iconst 1\n    %next_11: i64 = iadd %i_3, %one_10\n    jump bb1(%next_11, %s_9)\n}}\n{extra}"
        )
    }

    #[test]
    fn a_loop_whose_arrays_stay_in_the_iteration_releases_them() {
        let text = counted(
            "f64",
            "%s0_6: f64 = fconst 0.0",
            "    %k_8: i64 = iconst 1000\n    %a_12: f64[] = array.fill %x_0, %k_8\n    %e_13: f64 = load %a_12[%i_3]\n    %s_9: f64 = fadd %s_4, %e_13",
            "",
        );
        let out = releases(&text, 0).expect("reclaimed");
        assert!(out.contains("bb3:\n    %8: i64 = arena.mark\n"), "{out}");
        assert!(out.contains("arena.release %8\n    jump bb1"), "{out}");
    }

    /// A cycle with two ways in, as the reverse of a loop left by a `break` has: bb1
    /// enters it at bb3, whose instructions `body` gives (it may use `%i_2` and `%t_10`
    /// and must define `%s_9`). With `passed` (an array `body` makes), bb3 hands it to
    /// bb5, which sums it on the way back to bb2.
    fn entered_in_the_middle(body: &str, passed: &str) -> String {
        let (next, extra) = if passed.is_empty() {
            ("jump bb2(%j_12, %s_9)".to_string(), String::new())
        } else {
            (
                format!("jump bb5(%j_12, %s_9, {passed})"),
                "bb5(%i_30: i64, %s_31: f64, %b_32: f64[]):\n    %e_33: f64 = array.sum %b_32\n    %s_34: f64 = fadd %s_31, %e_33\n    jump bb2(%i_30, %s_34)\n".to_string(),
            )
        };
        format!(
            "fn @f(%x_0: f64, %n_1: i64) -> f64 {{\nbb0:\n    %c_3: bool = icmp lt %n_1, %n_1\n    %s0_4: f64 = fconst 0.0\n    br %c_3, bb1, bb2(%n_1, %s0_4)\nbb1:\n    jump bb3(%n_1, %s0_4)\nbb2(%i_5: i64, %s_6: f64):\n    %z_7: i64 = iconst 0\n    %d_8: bool = icmp le %i_5, %z_7\n    br %d_8, bb4(%s_6), bb3(%i_5, %s_6)\nbb3(%i_2: i64, %t_10: f64):\n{body}\n    %one_11: i64 = iconst 1\n    %j_12: i64 = isub %i_2, %one_11\n    {next}\n{extra}bb4(%r_13: f64):\n    ret %r_13\n}}\n"
        )
    }

    #[test]
    fn a_block_on_a_cycle_that_is_no_loop_gives_back_what_stays_in_it() {
        let local = entered_in_the_middle(
            "    %k_20: i64 = iconst 100\n    %a_21: f64[] = array.fill %x_0, %k_20\n    %e_22: f64 = array.sum %a_21\n    %s_9: f64 = fadd %t_10, %e_22",
            "",
        );
        let out = releases(&local, 0).expect("reclaimed");
        let body = &out[out.find("\nbb3(").expect("bb3")..out.find("\nbb4(").expect("bb4")];
        assert!(body.contains("):\n    %") && body.contains("= arena.mark\n"), "{out}");
        assert!(body.contains("arena.release"), "{out}");
        // The array goes on to another block: the block keeps it.
        let leaves = entered_in_the_middle(
            "    %k_20: i64 = iconst 100\n    %a_21: f64[] = array.fill %x_0, %k_20\n    %s_9: f64 = fadd %t_10, %x_0",
            "%a_21",
        );
        assert_eq!(releases(&leaves, 0), None);
    }

    #[test]
    fn arrays_that_outlive_the_iteration_keep_the_loop_as_it_is() {
        // The fresh array is carried to the next iteration.
        let carried = counted(
            "f64[]",
            "%s0_6: f64[] = array.fill %x_0, %n_1",
            "    %s_9: f64[] = array.fill %x_0, %n_1",
            "",
        );
        assert_eq!(releases(&carried, 0), None);
        // It is stored into a reference made before the loop.
        let stored = counted(
            "f64",
            "%s0_6: f64 = fconst 0.0",
            "    %a_12: f64[] = array.fill %x_0, %n_1\n    ref.store %r_2, %a_12\n    %s_9: f64 = fadd %s_4, %x_0",
            "",
        );
        assert_eq!(releases(&stored, 0), None);
        // A function it calls stores one.
        let through_call = counted(
            "f64",
            "%s0_6: f64 = fconst 0.0",
            "    %u_12: f64 = call @g(%x_0, %r_2)\n    %s_9: f64 = fadd %s_4, %u_12",
            "fn @g(%x_0: f64, %r_1: ref<f64[]>) -> f64 {\nbb0:\n    %2: i64 = iconst 4\n    %a_3: f64[] = array.fill %x_0, %2\n    ref.store %r_1, %a_3\n    ret %x_0\n}\n",
        );
        assert_eq!(releases(&through_call, 0), None);
        // No array is made: nothing to give back.
        let scalar = counted("f64", "%s0_6: f64 = fconst 0.0", "    %s_9: f64 = fadd %s_4, %x_0", "");
        assert_eq!(releases(&scalar, 0), None);
    }

    #[test]
    fn scalars_put_on_a_tape_and_pops_keep_nothing() {
        // A forward pass's loop: a scalar of each iteration put into room reserved before it.
        let put = |value: &str| {
            counted(
                "f64",
                "%s0_6: f64 = fconst 0.0\n    %st_20: stack<f64[]> = stack.new\n    %sf_21: stack<f64> = stack.new\n    %w_22: i64 = stack.reserve %sf_21, %z_5, %n_1, %z_5\n    %v_23: i64 = stack.reserve %st_20, %z_5, %n_1, %z_5",
                &format!("    %k_8: i64 = iconst 1000\n    %a_12: f64[] = array.fill %x_0, %k_8\n    %e_13: f64 = load %a_12[%i_3]\n    {value}\n    %s_9: f64 = fadd %s_4, %e_13"),
                "",
            )
        };
        let scalar = releases(&put("stack.put %sf_21, %w_22, %i_3, %e_13"), 0);
        assert!(scalar.is_some_and(|t| t.contains("arena.release")));
        // The array itself put on the tape outlives the iteration.
        assert_eq!(releases(&put("stack.put %st_20, %v_23, %i_3, %a_12"), 0), None);
        // A push grows the stack in the tape region, which no release gives back; an
        // array pushed would be kept past the iteration.
        let pushed = releases(&put("stack.push %sf_21, %e_13"), 0);
        assert!(pushed.is_some_and(|t| t.contains("arena.release")));
        assert_eq!(releases(&put("stack.push %st_20, %a_12"), 0), None);
        // A reverse pass's loop pops what was pushed before it.
        let pop = releases(&put("%p_24: f64 = stack.pop %sf_21"), 0);
        assert!(pop.is_some_and(|t| t.contains("arena.release")));
    }

    #[test]
    fn a_recursive_call_gives_back_what_it_made_when_it_returns() {
        let rec = |ret_ty: &str, ret: &str| {
            // A tuple the recursive call returns is built again from its fields.
            let back = if ret_ty.starts_with('(') {
                "    %u_11: f64 = tuple.get 0 %r_8\n    %v_12: (f64, i64) = tuple.new %u_11, %n_1\n    ret %v_12"
            } else {
                "    ret %r_8"
            };
            format!(
                "fn @f(%x_0: f64, %n_1: i64) -> {ret_ty} {{\nbb0:\n    %z_2: i64 = iconst 0\n    %c_3: bool = icmp le %n_1, %z_2\n    br %c_3, bb1, bb2\nbb1:\n    %k_4: i64 = iconst 8\n    %a_5: f64[] = array.fill %x_0, %k_4\n{ret}\nbb2:\n    %one_6: i64 = iconst 1\n    %m_7: i64 = isub %n_1, %one_6\n    %r_8: {ret_ty} = call @f(%x_0, %m_7)\n{back}\n}}\n"
            )
        };
        let scalar =
            releases(&rec("f64", "    %e_9: f64 = load %a_5[%z_2]\n    ret %e_9"), 0).expect("released");
        assert!(scalar.contains("bb0:\n    %2: i64 = arena.mark\n"), "{scalar}");
        assert_eq!(scalar.matches("arena.release %2\n    ret").count(), 2, "{scalar}");
        // A tuple of scalars is built after the release.
        let tuple = releases(
            &rec("(f64, i64)", "    %e_9: f64 = load %a_5[%z_2]\n    %t_10: (f64, i64) = tuple.new %e_9, %n_1\n    ret %t_10"),
            0,
        )
        .expect("released");
        assert!(tuple.contains("arena.release %2\n    %t_8: (f64, i64) = tuple.new"), "{tuple}");
        // An array it returns is still in use.
        assert_eq!(releases(&rec("f64[]", "    ret %a_5"), 0), None);
    }

    #[test]
    fn an_array_made_through_a_call_that_keeps_nothing_is_given_back() {
        let text = counted(
            "f64",
            "%s0_6: f64 = fconst 0.0",
            "    %a_12: f64[] = call @g(%x_0)\n    %e_13: f64 = load %a_12[%i_3]\n    %s_9: f64 = fadd %s_4, %e_13",
            "fn @g(%x_0: f64) -> f64[] {\nbb0:\n    %1: i64 = iconst 4\n    %a_2: f64[] = array.fill %x_0, %1\n    ret %a_2\n}\n",
        );
        assert!(releases(&text, 0).is_some_and(|t| t.contains("arena.release")));
    }

    /// A recursive function `name` returning `(f64, g$tape)`: a record holding an array
    /// made from a temporary, and the record of the call below.
    fn recursive_with_record(name: &str) -> String {
        format!(
            "struct g$tape {{ kept: f64[], inner: g$tape }}\n\nfn @{name}(%x_0: f64, %n_1: i64) -> (f64, g$tape) {{\nbb0:\n    %z_2: i64 = iconst 0\n    %c_3: bool = icmp le %n_1, %z_2\n    %u_4: g$tape = unset\n    %k_5: i64 = iconst 100\n    %t_6: f64[] = array.fill %x_0, %k_5\n    %e_7: f64 = array.sum %t_6\n    %a_8: f64[] = map.sin %t_6\n    br %c_3, bb1, bb2\nbb1:\n    %r_9: g$tape = struct.new g$tape %a_8, %u_4\n    %p_10: (f64, g$tape) = tuple.new %e_7, %r_9\n    ret %p_10\nbb2:\n    %one_11: i64 = iconst 1\n    %m_12: i64 = isub %n_1, %one_11\n    %q_13: (f64, g$tape) = call @{name}(%x_0, %m_12)\n    %v_14: f64 = tuple.get 0 %q_13\n    %i_15: g$tape = tuple.get 1 %q_13\n    %r_16: g$tape = struct.new g$tape %a_8, %i_15\n    %s_17: f64 = fadd %v_14, %e_7\n    %p_18: (f64, g$tape) = tuple.new %s_17, %r_16\n    ret %p_18\n}}\n"
        )
    }

    #[test]
    fn a_recursive_forward_pass_makes_its_record_in_the_tape_region_and_gives_back_the_rest() {
        let out = releases(&recursive_with_record("g$fwd"), 0).expect("reclaimed");
        // The temporary stays in the arena; what the record holds, the record and the
        // returned tuple come from the tape region.
        assert!(out.contains("f64[] = array.fill %x_0"), "{out}");
        assert!(out.contains("f64[] = tape map.sin"), "{out}");
        assert_eq!(out.matches("tape struct.new").count(), 2, "{out}");
        assert_eq!(out.matches("tape tuple.new").count(), 2, "{out}");
        // Each call gives its arena memory back as it returns.
        assert_eq!(out.matches("arena.mark").count(), 1, "{out}");
        assert_eq!(out.matches("arena.release").count(), 2, "{out}");
        // The printed function parses again, its regions as they were.
        let again =
            crate::parse::parse_module(&format!("struct g$tape {{ kept: f64[], inner: g$tape }}\n\n{out}"))
                .expect("parses");
        assert_eq!(crate::print::print_function(&again, &again.funcs[FuncId::new(0)]), out);
    }

    /// A recursive forward pass that makes two arrays for its recursive call and keeps
    /// `kept` (one of its parameters `%v_0`, `%dv_1`) in its record.
    fn recursion_keeping(kept: &str) -> String {
        format!(
            "struct g$tape {{ kept: f64[], inner: g$tape }}\n\nfn @g$fwd(%v_0: f64[], %dv_1: f64[], %n_2: i64) -> (f64, g$tape) {{\nbb0:\n    %z_3: i64 = iconst 0\n    %c_4: bool = icmp le %n_2, %z_3\n    %u_5: g$tape = unset\n    br %c_4, bb1, bb2\nbb1:\n    %e_6: f64 = array.sum %v_0\n    %r_7: g$tape = struct.new g$tape {kept}, %u_5\n    %p_8: (f64, g$tape) = tuple.new %e_6, %r_7\n    ret %p_8\nbb2:\n    %one_9: i64 = iconst 1\n    %m_10: i64 = isub %n_2, %one_9\n    %k_11: i64 = iconst 100\n    %h_12: f64 = fconst 0.5\n    %t_13: f64[] = array.fill %h_12, %k_11\n    %dt_14: f64[] = array.fill %h_12, %k_11\n    %q_15: (f64, g$tape) = call @g$fwd(%t_13, %dt_14, %m_10)\n    %w_16: f64 = tuple.get 0 %q_15\n    %i_17: g$tape = tuple.get 1 %q_15\n    %r_18: g$tape = struct.new g$tape {kept}, %i_17\n    %p_19: (f64, g$tape) = tuple.new %w_16, %r_18\n    ret %p_19\n}}\n"
        )
    }

    #[test]
    fn only_the_arguments_a_callee_keeps_go_to_the_tape_region() {
        // The record keeps the shadow `%dv_1`: the recursive call's record holds the
        // array passed as it, not the one passed as `%v_0`, which stays in the arena and
        // is given back as the call returns.
        let made_in_tape = |out: &str, name: &str| {
            let line = out.lines().find(|l| l.trim_start().starts_with(name)).expect("the array is made");
            line.contains("= tape array.fill")
        };
        let out = releases(&recursion_keeping("%dv_1"), 0).expect("reclaimed");
        assert!(!made_in_tape(&out, "%t_"), "{out}");
        assert!(made_in_tape(&out, "%dt_"), "{out}");
        assert_eq!(out.matches("arena.release").count(), 2, "{out}");
        // Kept the other way round, the other array goes to the tape region.
        let out = releases(&recursion_keeping("%v_0"), 0).expect("reclaimed");
        assert!(made_in_tape(&out, "%t_"), "{out}");
        assert!(!made_in_tape(&out, "%dt_"), "{out}");
    }

    #[test]
    fn a_function_that_is_no_forward_pass_keeps_what_its_result_may_hold() {
        // Its result may be kept by a loop that gives back its iterations' arena memory,
        // which the tape region would outlive: it is left as it is.
        assert_eq!(releases(&recursive_with_record("g"), 0), None);
    }

    #[test]
    fn a_recursive_call_returning_scalars_in_tuples_reads_them_out_and_releases() {
        let text = "fn @g(%x_0: f64, %n_1: i64) -> (f64, (f64, i64)) {\nbb0:\n    %z_2: i64 = iconst 0\n    %c_3: bool = icmp le %n_1, %z_2\n    br %c_3, bb1, bb2\nbb1:\n    %i_4: (f64, i64) = tuple.new %x_0, %n_1\n    %r_5: (f64, (f64, i64)) = tuple.new %x_0, %i_4\n    ret %r_5\nbb2:\n    %one_6: i64 = iconst 1\n    %m_7: i64 = isub %n_1, %one_6\n    %k_8: i64 = iconst 100\n    %t_9: f64[] = array.fill %x_0, %k_8\n    %e_10: f64 = array.sum %t_9\n    %q_11: (f64, (f64, i64)) = call @g(%e_10, %m_7)\n    ret %q_11\n}\n";
        let out = releases(text, 0).expect("reclaimed");
        // Each return reads its three scalars out, releases, and builds the value again.
        assert_eq!(out.matches("arena.release").count(), 2, "{out}");
        let tail = &out[out.rfind("arena.release").expect("a release")..];
        assert_eq!(tail.matches("tuple.new").count(), 2, "{out}");
        assert!(tail.contains("ret %"), "{out}");
    }

    #[test]
    fn a_tuple_of_state_goes_to_the_next_iteration_as_its_scalars() {
        let text = counted(
            "(f64, f64)",
            "%s0_6: (f64, f64) = tuple.new %x_0, %x_0",
            "    %k_20: i64 = iconst 100\n    %a_21: f64[] = array.fill %x_0, %k_20\n    %e_22: f64 = array.sum %a_21\n    %u_23: f64 = tuple.get 0 %s_4\n    %v_24: f64 = fadd %u_23, %e_22\n    %s_9: (f64, f64) = tuple.new %v_24, %u_23",
            "",
        );
        let out = releases(&text, 0).expect("reclaimed");
        // The header gains a parameter per scalar, takes its mark first and makes the
        // tuple again after it; the back edge passes the scalars and releases.
        let header = &out[out.find("\nbb1(").expect("bb1")..out.find("\nbb2:").expect("bb2")];
        assert!(header.contains(": f64, %") && header.contains("arena.mark\n"), "{out}");
        let after_mark = &header[header.find("arena.mark").expect("mark")..];
        assert!(after_mark.contains("tuple.new"), "{out}");
        assert!(out.contains("arena.release"), "{out}");
        // Both edges into the header pass four values: the counter, the tuple's old
        // place, and its two scalars.
        for jump in out.lines().filter(|l| l.trim_start().starts_with("jump bb1(")) {
            assert_eq!(jump.matches(',').count(), 3, "{out}");
        }
    }
}
