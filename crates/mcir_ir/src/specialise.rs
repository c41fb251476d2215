//! Compiling a function for the shapes of its array arguments: every extent of an
//! argument becomes a constant, integer arithmetic and tests on constants are folded,
//! and counted loops that then run a known, small number of times are unrolled
//! completely, so that code generic in size runs as if written for that size.
//!
//! A short inner loop costs more in its tests, branches and records than in its work:
//! the gmm's `for j in 0..d` with `d = 2` runs its header three times for two
//! iterations, and differentiated, keeps a record for each. Once `d` is known, the loop
//! is the straight-line code a person would write for two dimensions, and the loops
//! inside it, whose bounds were the outer counter, have known bounds too.
//!
//! The result is valid only for arguments of those shapes, and checks them on entry
//! (`array.expect_dim`, which also tells the bounds analysis the extents). Unrolled
//! copies keep every check and span of the instructions they copy, so a runtime error
//! is reported as before.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::{CmpOp, Op};
use crate::types::TypeTable;
use std::collections::{HashMap, HashSet};

/// The most iterations a loop may run to be unrolled completely.
pub const MAX_TRIP: i64 = 16;

/// The most instructions the complete unrolling of one loop nest may add: beyond that,
/// the loop's own test and branch cost little beside its body.
pub const MAX_LOOP_GROWTH: usize = 512;

/// The most instructions complete unrolling may add to one function (each is compiled
/// four times over: the function, its forward and reverse passes and its tangent).
pub const MAX_GROWTH: usize = 2000;

/// How far complete unrolling may go: specialised code ([`SPECIALISED`]) goes further
/// than generic code (`crate::expand`).
#[derive(Clone, Copy, Debug)]
pub struct UnrollLimits {
    /// The most iterations a loop may run.
    pub max_trip: i64,
    /// The most instructions unrolling one loop nest may add.
    pub max_loop_growth: usize,
    /// The most instructions unrolling may add to one function.
    pub max_growth: usize,
    /// How the growth of a nest is estimated: each block by the trip counts of the loops
    /// around it (`true`), or every block by this loop's trip count to the power of the
    /// nest's depth (`false`, coarser: the estimate the budgets of specialised code were
    /// tuned with, on GradBench's `gmm`).
    pub per_block_estimate: bool,
}

/// The limits for code compiled for its arguments' shapes.
pub const SPECIALISED: UnrollLimits = UnrollLimits {
    max_trip: MAX_TRIP,
    max_loop_growth: MAX_LOOP_GROWTH,
    max_growth: MAX_GROWTH,
    per_block_estimate: false,
};

/// `module` with function `entry` compiled for arguments of the given shapes (`None`
/// for an argument whose shape is not fixed, or that is not an array), then cleaned as
/// a program is after inlining (`crate::hoist::fold_and_hoist`).
///
/// Only the call made from outside runs the specialised code: when the function can
/// call itself (directly or through others), those calls, which may pass arrays of other
/// shapes (a determinant's minors), go to a generic copy of it (`f$generic`, with the
/// function's hand-written rules).
pub fn specialise(module: &Module, entry: FuncId, shapes: &[Option<Vec<usize>>]) -> Module {
    let mut out = module.clone();
    if crate::callgraph::CallGraph::new(module).is_recursive(entry) {
        let mut generic = module.funcs[entry].clone();
        generic.name = format!("{}$generic", generic.name);
        let copy = out.add_function(generic);
        for f in out.funcs.values_mut() {
            for d in f.insts.values_mut() {
                if d.op == Op::Call(entry) {
                    d.op = Op::Call(copy);
                }
            }
        }
        let rules: Vec<CustomRule> = out
            .rules
            .iter()
            .filter(|r| r.func == entry)
            .map(|r| CustomRule { func: copy, kind: r.kind.clone() })
            .collect();
        out.rules.extend(rules);
    }
    let f = std::mem::replace(&mut out.funcs[entry], Function::new("", &[], None));
    let mut f = unroll_short_loops(fix_extents(f, &module.types, shapes));
    // Indices the known extents now prove in bounds are checked no more.
    f.trust_proven_indices();
    out.funcs[entry] = f;
    let mut out = crate::hoist::fold_and_hoist(out);
    // Once equal constants are one value, elements of the small arrays that unrolled
    // loops fill are read from what was stored, and arrays left unread are not filled.
    let f = std::mem::replace(&mut out.funcs[entry], Function::new("", &[], None));
    out.funcs[entry] = drop_unread_stores(crate::memory::forward_elements(f, false));
    out
}

/// `f` without the stores into arrays it makes and never reads: an array whose every
/// use is a checked-free store into it (`store.trusted`, which cannot fail) holds
/// nothing anyone sees. Forwarding elements leaves such arrays behind: the gmm's `xc`,
/// filled for each point and component and read back in the same block.
pub fn drop_unread_stores(mut f: Function) -> Function {
    // Instructions in blocks only: passes leave dropped ones in the arena.
    let placed: Vec<Inst> = f.blocks.values().flat_map(|b| b.insts.iter().copied()).collect();
    let mut only_stored: HashSet<Value> = placed
        .iter()
        .map(|&i| &f.insts[i])
        .filter(|d| matches!(d.op, Op::ArrayFill | Op::ZerosLike))
        .filter_map(|d| d.result)
        .collect();
    for &i in &placed {
        let d = &f.insts[i];
        for (k, a) in d.args.iter().enumerate() {
            if !(k == 0 && d.op == Op::TrustedStore) {
                only_stored.remove(a);
            }
        }
    }
    for (_, data) in f.blocks.iter() {
        for a in data.term.uses() {
            only_stored.remove(&a);
        }
    }
    if only_stored.is_empty() {
        return f;
    }
    for b in f.blocks.keys().collect::<Vec<_>>() {
        let insts = std::mem::take(&mut f.blocks[b].insts);
        let kept = insts
            .into_iter()
            .filter(|&i| !(f.insts[i].op == Op::TrustedStore && only_stored.contains(&f.insts[i].args[0])))
            .collect();
        f.blocks[b].insts = kept;
    }
    f
}

/// `f` checking on entry that each parameter whose shape is given has it, and with
/// `array.dim k` of such a parameter replaced by the extent.
pub fn fix_extents(mut f: Function, types: &TypeTable, shapes: &[Option<Vec<usize>>]) -> Function {
    // The array parameters with a shape of their rank.
    let fixed: Vec<(Value, &Vec<usize>)> = f
        .param_values()
        .iter()
        .zip(shapes)
        .filter_map(|(&p, s)| s.as_ref().map(|s| (p, s)))
        .filter(|(p, s)| types.as_array(f.values[*p].ty).is_some_and(|(_, rank)| rank as usize == s.len()))
        .collect();
    let entry = f.entry();
    let before = f.blocks[entry].insts.len();
    for &(p, shape) in &fixed {
        for (k, &n) in shape.iter().enumerate() {
            let n = f.push_inst(entry, Op::IConst(n as i64), vec![], Some(TypeTable::I64), f.span);
            if let Some(n) = n {
                f.push_inst(entry, Op::ExpectDim(k as u8), vec![p, n], None, f.span);
            }
        }
    }
    // The checks come first.
    f.blocks[entry].insts.rotate_left(before);
    let fixed: HashMap<Value, &Vec<usize>> = fixed.into_iter().collect();
    for i in f.insts.keys().collect::<Vec<_>>() {
        let d = &f.insts[i];
        if let (Op::ArrayDim(k), Some(a)) = (&d.op, d.args.first()) {
            if let Some(&n) = fixed.get(a).and_then(|s| s.get(*k as usize)) {
                let d = &mut f.insts[i];
                d.op = Op::IConst(n as i64);
                d.args.clear();
            }
        }
    }
    f
}

/// `f` with its constants folded and every counted loop that runs at most [`MAX_TRIP`]
/// times, from a constant start to a constant bound, unrolled completely, outer loops
/// first (the loops inside then get constant bounds of their own), while the function
/// grows by at most [`MAX_GROWTH`] instructions.
pub fn unroll_short_loops(f: Function) -> Function {
    unroll_short_loops_within(f, &SPECIALISED)
}

/// [`unroll_short_loops`] within `limits`.
pub fn unroll_short_loops_within(mut f: Function, limits: &UnrollLimits) -> Function {
    let mut budget = limits.max_growth;
    // Each round unrolls one loop; a function has finitely many within the budget.
    for _ in 0..10_000 {
        fold_constants(&mut f);
        f = f.into_simplified_cfg();
        let Some(plan) = find_short_loop(&f, budget, limits) else { break };
        budget -= plan.growth;
        unroll(&mut f, &plan);
    }
    fold_constants(&mut f);
    f.into_simplified_cfg()
}

/// Folds integer arithmetic, comparisons and selections of constants, extents of
/// arrays made with known extents, and branches on constants; and gives the parameters
/// of a block entered by one edge the values that edge passes.
pub fn fold_constants(f: &mut Function) {
    loop {
        let mut subst: HashMap<Value, Value> = HashMap::new();
        let mut changed = false;
        // Only values something reads are worth replacing (and a replaced one is no
        // longer read, so the folding ends).
        let mut used: HashSet<Value> = HashSet::new();
        for (_, data) in f.blocks.iter() {
            for &i in &data.insts {
                used.extend(f.insts[i].args.iter().copied());
            }
            used.extend(data.term.uses());
        }
        // Parameters of blocks with a single incoming edge.
        let reachable = f.reachable_blocks();
        let mut edges: Vec<Vec<(Block, usize)>> = vec![Vec::new(); f.blocks.len()];
        for &b in &reachable {
            for (k, c) in f.blocks[b].term.successors().enumerate() {
                edges[c.block.index()].push((b, k));
            }
        }
        for (b, data) in f.blocks.iter() {
            if b == f.entry() || data.params.is_empty() {
                continue;
            }
            if let [(p, k)] = edges[b.index()].as_slice() {
                if let Some(call) = f.blocks[*p].term.successors().nth(*k) {
                    if *p != b {
                        for (&param, &arg) in data.params.iter().zip(&call.args) {
                            if param != arg && used.contains(&param) {
                                subst.insert(param, arg);
                            }
                        }
                    }
                }
            }
        }
        let int = |f: &Function, v: Value, subst: &HashMap<Value, Value>| {
            let v = resolve(subst, v);
            f.const_int(v)
        };
        let boolean =
            |f: &Function, v: Value, subst: &HashMap<Value, Value>| match f.defining(resolve(subst, v)) {
                Some(InstData { op: Op::BConst(c), .. }) => Some(*c),
                _ => None,
            };
        for &b in &reachable {
            for &i in &f.blocks[b].insts {
                let d = &f.insts[i];
                let Some(r) = d.result else { continue };
                let folded: Option<Result<Op, Value>> = match &d.op {
                    Op::IBinary(op) => match (int(f, d.args[0], &subst), int(f, d.args[1], &subst)) {
                        (Some(a), Some(b)) => op.eval(a, b).ok().map(|c| Ok(Op::IConst(c))),
                        _ => None,
                    },
                    Op::IUnary(op) => {
                        int(f, d.args[0], &subst).and_then(|a| op.eval(a).ok()).map(|c| Ok(Op::IConst(c)))
                    }
                    Op::ICmp(op) => match (int(f, d.args[0], &subst), int(f, d.args[1], &subst)) {
                        (Some(a), Some(b)) => Some(Ok(Op::BConst(op.eval(a, b)))),
                        _ => None,
                    },
                    Op::Not => boolean(f, d.args[0], &subst).map(|c| Ok(Op::BConst(!c))),
                    Op::Select => boolean(f, d.args[0], &subst).map(|c| Err(d.args[if c { 1 } else { 2 }])),
                    Op::ArrayDim(k) => made_extent(f, resolve(&subst, d.args[0]), *k).map(Err),
                    _ => None,
                };
                match folded {
                    Some(Ok(op)) => {
                        let d = &mut f.insts[i];
                        d.op = op;
                        d.args.clear();
                        changed = true;
                    }
                    Some(Err(v)) if v != r && used.contains(&r) => {
                        subst.insert(r, v);
                        changed = true;
                    }
                    _ => {}
                }
            }
        }
        for b in f.blocks.keys().collect::<Vec<_>>() {
            if let Terminator::Branch { cond, then_dest, else_dest } = &f.blocks[b].term {
                if let Some(c) = boolean(f, *cond, &subst) {
                    let dest = if c { then_dest.clone() } else { else_dest.clone() };
                    f.blocks[b].term = Terminator::Jump(dest);
                    changed = true;
                }
            }
        }
        changed |= !subst.is_empty();
        f.substitute(&subst);
        if !changed {
            break;
        }
    }
}

/// Follows a chain of substitutions to its end (what `Function::substitute` will make
/// of a use), for the values folding reads before it is applied.
fn resolve(subst: &HashMap<Value, Value>, mut v: Value) -> Value {
    let mut steps = 0;
    while let Some(&w) = subst.get(&v) {
        v = w;
        steps += 1;
        if steps > subst.len() {
            break;
        }
    }
    v
}

/// Extent `k` of array `a`, when `a` is made where its extents are given (`fill`,
/// `zeros`) or copies one whose extent is known (a value defined before `a`).
fn made_extent(f: &Function, a: Value, k: u8) -> Option<Value> {
    let d = f.defining(a)?;
    match d.op {
        Op::ArrayFill => d.args.get(1 + k as usize).copied(),
        Op::ZerosLike | Op::ArrayCopy => made_extent(f, *d.args.first()?, k),
        _ => None,
    }
}

/// A loop to unroll completely.
struct Plan {
    header: Block,
    /// Every block of the loop, the header first, in reverse post-order.
    region: Vec<Block>,
    /// How many times the body runs.
    trips: i64,
    /// Instructions the unrolling adds.
    growth: usize,
}

/// Whether `f` has a loop [`unroll_short_loops_within`] would unroll as it stands.
pub fn has_short_loop(f: &Function, limits: &UnrollLimits) -> bool {
    find_short_loop(f, limits.max_growth, limits).is_some()
}

/// The first loop, in reverse post-order (outer loops first), that counts by one from a
/// constant to a constant bound at most `limits.max_trip` times above it, is left only
/// by its header's test, has one back edge and is entered by one edge, and whose copies
/// fit in `budget` instructions.
fn find_short_loop(f: &Function, budget: usize, limits: &UnrollLimits) -> Option<Plan> {
    let cfg = ControlFlow::compute(f);
    for &h in &cfg.rpo {
        let latches: Vec<Block> = cfg.latches(h).collect();
        let [latch] = latches.as_slice() else { continue };
        let body = cfg.loop_blocks(h);
        let Terminator::Branch { cond, then_dest, else_dest } = &f.blocks[h].term else { continue };
        if !body.contains(&then_dest.block) || body.contains(&else_dest.block) {
            continue;
        }
        // Left only by the header's test.
        let leaves =
            body.iter().any(|&b| b != h && f.blocks[b].term.successors().any(|c| !body.contains(&c.block)));
        if leaves {
            continue;
        }
        // Entered by one edge.
        let entries: Vec<(Block, &BlockCall)> = cfg.preds[h.index()]
            .iter()
            .filter(|p| !body.contains(p))
            .flat_map(|&p| f.blocks[p].term.successors().filter(|c| c.block == h).map(move |c| (p, c)))
            .collect();
        let [(_, entry_call)] = entries.as_slice() else { continue };
        let Some(test) = f.defining(*cond) else { continue };
        if test.op != Op::ICmp(CmpOp::Lt)
            || !f.blocks[h].insts.iter().any(|&i| f.insts[i].result == Some(*cond))
        {
            continue;
        }
        let (counter, bound) = (test.args[0], test.args[1]);
        let Some(k) = f.blocks[h].params.iter().position(|&p| p == counter) else { continue };
        let Some(bound) = f.const_int(bound) else { continue };
        let Some(start) = entry_call.args.get(k).and_then(|&a| f.const_int(a)) else { continue };
        let Terminator::Jump(back) = &f.blocks[*latch].term else { continue };
        let steps_by_one = back.args.get(k).is_some_and(|&a| f.is_increment_of(a, counter));
        if !steps_by_one {
            continue;
        }
        let trips = bound.saturating_sub(start).max(0);
        if trips > limits.max_trip {
            continue;
        }
        let region: Vec<Block> = cfg.rpo.iter().copied().filter(|b| body.contains(b)).collect();
        // Loops inside must have bounds that unrolling this one makes constant, and the
        // whole nest, each inner loop counted as running as often as this one, must fit.
        let inner: Vec<Block> =
            region.iter().copied().filter(|&b| b != h && cfg.latches(b).next().is_some()).collect();
        if !inner.iter().all(|&ih| closed_bounds(f, &cfg, ih, &body)) {
            continue;
        }
        // Each block of the nest ends up copied once per iteration of every loop around it
        // in the nest: this one's trips times, for a loop inside, its own trip count when
        // its bounds are constants already, and this one's otherwise (its bounds are made
        // of this loop's counter: a triangle's `0..i`) (or, coarser, this one's trips for
        // every loop of the nest).
        let trips_at_least_one = trips.max(1) as usize;
        let growth = if limits.per_block_estimate {
            let inner_trips: Vec<(HashSet<Block>, usize)> = inner
                .iter()
                .map(|&ih| {
                    (cfg.loop_blocks(ih), constant_trips(f, &cfg, ih).unwrap_or(trips).max(1) as usize)
                })
                .collect();
            region
                .iter()
                .map(|&b| {
                    let copies = inner_trips
                        .iter()
                        .filter(|(blocks, _)| blocks.contains(&b))
                        .fold(trips_at_least_one, |n, (_, t)| n.saturating_mul(*t));
                    (f.blocks[b].insts.len() + 1).saturating_mul(copies)
                })
                .fold(f.blocks[h].insts.len(), usize::saturating_add)
        } else {
            let depth = inner.iter().map(|&ih| nesting(&cfg, ih, &body)).max().unwrap_or(0);
            let size: usize = region.iter().map(|&b| f.blocks[b].insts.len() + 1).sum();
            let copies = trips_at_least_one.checked_pow(depth + 1).unwrap_or(usize::MAX);
            size.saturating_mul(copies).saturating_add(f.blocks[h].insts.len())
        };
        if growth > budget.min(limits.max_loop_growth) {
            continue;
        }
        return Some(Plan { header: h, region, trips, growth });
    }
    None
}

/// Whether the loop headed by `h` (inside the loop `outer`) starts and stops at values
/// made of constants and the counters of loops around it within `outer`: once those
/// loops are unrolled, its trip count is a constant.
fn closed_bounds(f: &Function, cfg: &ControlFlow, h: Block, outer: &HashSet<Block>) -> bool {
    let Terminator::Branch { cond, .. } = &f.blocks[h].term else { return false };
    let Some(test) = f.defining(*cond) else { return false };
    let [counter, bound] = test.args.as_slice() else { return false };
    let Some(k) = f.blocks[h].params.iter().position(|p| p == counter) else { return false };
    let own = cfg.loop_blocks(h);
    let starts_closed = cfg
        .incoming_args(f, h, k)
        .filter(|(p, _)| !own.contains(p))
        .all(|(_, a)| a.is_some_and(|a| closed(f, a, outer, 8)));
    starts_closed && closed(f, *bound, outer, 8)
}

/// Whether `v` is a constant, a parameter of a block of `outer` (a counter there), or
/// integer arithmetic on such values, up to `depth` operations deep.
fn closed(f: &Function, v: Value, outer: &HashSet<Block>, depth: u32) -> bool {
    match f.values[v].def {
        ValueDef::Param(b, _) => outer.contains(&b),
        ValueDef::Inst(i) => match &f.insts[i].op {
            Op::IConst(_) => true,
            Op::IBinary(_) if depth > 0 => f.insts[i].args.iter().all(|&a| closed(f, a, outer, depth - 1)),
            _ => false,
        },
    }
}

/// How many loops inside `outer` hold the loop headed by `h`, counting itself.
fn nesting(cfg: &ControlFlow, h: Block, outer: &HashSet<Block>) -> u32 {
    outer
        .iter()
        .filter(|&&b| b != h && cfg.latches(b).next().is_some() && cfg.loop_blocks(b).contains(&h))
        .count() as u32
}

/// The trip count of the loop headed by `h` when it counts by one from a constant to a
/// constant (entered from outside it with the same start on every edge).
fn constant_trips(f: &Function, cfg: &ControlFlow, h: Block) -> Option<i64> {
    let Terminator::Branch { cond, .. } = &f.blocks[h].term else { return None };
    let test = f.defining(*cond)?;
    let [counter, bound] = test.args.as_slice() else { return None };
    if test.op != Op::ICmp(CmpOp::Lt) {
        return None;
    }
    let k = f.blocks[h].params.iter().position(|p| p == counter)?;
    let own = cfg.loop_blocks(h);
    let mut starts = cfg
        .incoming_args(f, h, k)
        .filter(|(p, _)| !own.contains(p))
        .map(|(_, a)| a.and_then(|a| f.const_int(a)));
    let start = starts.next()??;
    if !starts.all(|s| s == Some(start)) {
        return None;
    }
    Some(f.const_int(*bound)?.saturating_sub(start).max(0))
}

/// Replaces the loop of `plan` by `plan.trips` copies of its blocks one after the other,
/// each header jumping straight into its body, and a last copy of the header that
/// jumps out. Values of the header used after the loop are the last copy's.
fn unroll(f: &mut Function, plan: &Plan) {
    let h = plan.header;
    let copies = plan.trips as usize + 1;
    // Blocks and parameters of every copy first: a copy's back edge jumps to the next.
    let mut blocks: Vec<HashMap<Block, Block>> = Vec::with_capacity(copies);
    let mut values: Vec<HashMap<Value, Value>> = Vec::with_capacity(copies);
    for t in 0..copies {
        let last = t + 1 == copies;
        let mut bmap = HashMap::new();
        let mut vmap = HashMap::new();
        for &b in &plan.region {
            if last && b != h {
                continue;
            }
            let nb = f.add_block();
            for p in f.blocks[b].params.clone() {
                let (ty, name) = (f.values[p].ty, f.values[p].name.clone());
                vmap.insert(p, f.add_block_param(nb, ty, name));
            }
            bmap.insert(b, nb);
        }
        blocks.push(bmap);
        values.push(vmap);
    }
    for t in 0..copies {
        let last = t + 1 == copies;
        for &b in &plan.region {
            if last && b != h {
                continue;
            }
            let nb = blocks[t][&b];
            for i in f.blocks[b].insts.clone() {
                let d = f.insts[i].clone();
                let args = d.args.iter().map(|a| *values[t].get(a).unwrap_or(a)).collect();
                let ty = d.result.map(|r| f.values[r].ty);
                let r = f.push_inst(nb, d.op.clone(), args, ty, d.span);
                if let (Some(old), Some(new)) = (d.result, r) {
                    f.values[new].name = f.values[old].name.clone();
                    values[t].insert(old, new);
                }
            }
        }
        for &b in &plan.region {
            if last && b != h {
                continue;
            }
            let map_call = |c: &BlockCall, t: usize| BlockCall {
                block: blocks[t].get(&c.block).copied().unwrap_or(c.block),
                args: c.args.iter().map(|a| *values[t].get(a).unwrap_or(a)).collect(),
            };
            let term = match &f.blocks[b].term {
                Terminator::Branch { then_dest, else_dest, .. } if b == h => {
                    // The header's test: true in every copy but the last.
                    if last {
                        Terminator::Jump(map_call(else_dest, t))
                    } else {
                        Terminator::Jump(map_call(then_dest, t))
                    }
                }
                term => {
                    let mut term = term.clone();
                    let calls: Vec<&mut BlockCall> = match &mut term {
                        Terminator::Jump(c) => vec![c],
                        Terminator::Branch { cond, then_dest, else_dest } => {
                            *cond = *values[t].get(cond).unwrap_or(cond);
                            vec![then_dest, else_dest]
                        }
                        Terminator::Return(v) => {
                            if let Some(v) = v {
                                *v = *values[t].get(v).unwrap_or(v);
                            }
                            vec![]
                        }
                    };
                    for c in calls {
                        // The back edge goes on to the next copy's header.
                        let next = if c.block == h { t + 1 } else { t };
                        let mapped = BlockCall {
                            block: blocks[next].get(&c.block).copied().unwrap_or(c.block),
                            args: c.args.iter().map(|a| *values[t].get(a).unwrap_or(a)).collect(),
                        };
                        *c = mapped;
                    }
                    term
                }
            };
            let span = f.blocks[b].term_span;
            f.set_terminator(blocks[t][&b], term, span);
        }
    }
    // The loop is entered at the first copy; what follows it reads the last copy's
    // header. No copy jumps to the loop or reads its values, and the loop's own blocks
    // are now unreachable, so every block may be rewritten alike.
    let first = blocks[0][&h];
    for b in f.blocks.keys().collect::<Vec<_>>() {
        if let Terminator::Jump(c) | Terminator::Branch { then_dest: c, .. } = &mut f.blocks[b].term {
            if c.block == h {
                c.block = first;
            }
        }
        if let Terminator::Branch { else_dest, .. } = &mut f.blocks[b].term {
            if else_dest.block == h {
                else_dest.block = first;
            }
        }
    }
    let last = &values[copies - 1];
    let header_values: HashSet<Value> = f.blocks[h]
        .params
        .iter()
        .copied()
        .chain(f.blocks[h].insts.iter().filter_map(|&i| f.insts[i].result))
        .collect();
    let after: HashMap<Value, Value> =
        header_values.iter().filter_map(|v| Some((*v, *last.get(v)?))).collect();
    f.map_uses(|v| *after.get(&v).unwrap_or(&v));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::IBinOp;

    /// `for r in 0..3 { for j in 0..r { s += x[j] * f64(r) } }`, and its module.
    const TRIANGLE: &str = "fn @tri(%x_0: f64[]) -> f64 {
bb0:
    %s_1: f64 = fconst 0.0
    %2: i64 = iconst 0
    %3: i64 = iconst 3
    jump bb1(%2, %s_1)
bb1(%r_4: i64, %s_5: f64):
    %6: bool = icmp lt %r_4, %3
    br %6, bb3, bb2
bb2:
    ret %s_5
bb3:
    %7: i64 = iconst 0
    %8: f64 = itof %r_4
    jump bb4(%7, %s_5)
bb4(%j_9: i64, %s_10: f64):
    %11: bool = icmp lt %j_9, %r_4
    br %11, bb6, bb5
bb5:
    %12: i64 = iconst 1
    %13: i64 = iadd %r_4, %12
    jump bb1(%13, %s_10)
bb6:
    %14: f64 = load %x_0[%j_9]
    %15: f64 = fmul %14, %8
    %s_16: f64 = fadd %s_10, %15
    %17: i64 = iconst 1
    %18: i64 = iadd %j_9, %17
    jump bb4(%18, %s_16)
}
";

    fn module(text: &str) -> Module {
        crate::parse_module(text).expect("parses")
    }

    fn loads(f: &Function) -> Vec<Option<i64>> {
        f.insts
            .values()
            .filter(|d| matches!(d.op, Op::Load | Op::TrustedLoad))
            .map(|d| f.const_int(d.args[1]))
            .collect()
    }

    #[test]
    fn a_triangular_nest_of_constant_loops_becomes_straight_line_code() {
        let m = module(TRIANGLE);
        let f = unroll_short_loops(m.funcs.values().next().expect("a function").clone());
        crate::verify_function(&m, &f).expect("verifies");
        let reachable = f.reachable_blocks();
        assert_eq!(reachable.len(), 1, "{}", crate::print_function(&m, &f));
        // j = 0 for r = 1; j = 0, 1 for r = 2: three loads at constant indices.
        let mut at = loads(&f);
        at.sort();
        assert_eq!(at, vec![Some(0), Some(0), Some(1)]);
    }

    #[test]
    fn a_loop_to_an_unknown_bound_stays() {
        let text = TRIANGLE.replace("%3: i64 = iconst 3", "%3: i64 = array.dim 0 %x_0");
        let m = module(&text);
        let f = unroll_short_loops(m.funcs.values().next().expect("a function").clone());
        crate::verify_function(&m, &f).expect("verifies");
        assert!(f.blocks.values().any(|b| matches!(b.term, Terminator::Branch { .. })));
        // With the extent fixed at 2, the loops unroll and the entry checks it.
        let fixed =
            fix_extents(m.funcs.values().next().expect("a function").clone(), &m.types, &[Some(vec![2])]);
        let entry = &fixed.blocks[fixed.entry()];
        let first: Vec<&Op> = entry.insts.iter().take(2).map(|&i| &fixed.insts[i].op).collect();
        assert_eq!(first, vec![&Op::IConst(2), &Op::ExpectDim(0)]);
        let f = unroll_short_loops(fixed);
        crate::verify_function(&m, &f).expect("verifies");
        assert_eq!(f.reachable_blocks().len(), 1, "{}", crate::print_function(&m, &f));
        assert_eq!(loads(&f), vec![Some(0)]);
    }

    #[test]
    fn a_loop_of_too_many_trips_stays() {
        let text = TRIANGLE.replace("%3: i64 = iconst 3", &format!("%3: i64 = iconst {}", MAX_TRIP + 1));
        let m = module(&text);
        let f = unroll_short_loops(m.funcs.values().next().expect("a function").clone());
        crate::verify_function(&m, &f).expect("verifies");
        // The outer loop stays; its inner loop's bound is its counter, not a constant.
        assert!(f.blocks.values().filter(|b| matches!(b.term, Terminator::Branch { .. })).count() >= 2);
    }

    #[test]
    fn constants_fold_through_single_entries_and_branches() {
        let text = "fn @f(%a_0: i64) -> i64 {
bb0:
    %1: i64 = iconst 6
    %2: i64 = iconst 7
    %3: i64 = imul %1, %2
    %4: bool = icmp lt %3, %1
    br %4, bb1(%3), bb2(%3)
bb1(%5: i64):
    ret %a_0
bb2(%6: i64):
    %7: i64 = iadd %6, %a_0
    ret %7
}
";
        let m = module(text);
        let mut f = m.funcs.values().next().expect("a function").clone();
        fold_constants(&mut f);
        let f = f.into_simplified_cfg();
        crate::verify_function(&m, &f).expect("verifies");
        assert_eq!(f.reachable_blocks().len(), 1);
        let sum = f.insts.values().find(|d| d.op == Op::IBinary(IBinOp::Add)).expect("the addition");
        assert_eq!(f.const_int(sum.args[0]), Some(42));
    }
}
