//! Loop versioning on the extents a loop's accesses check against constants and against
//! its counter's bound. A loop over `k in 0..len(cam_of)` reading `cams[c, 1]`,
//! `cams[c, 4]`, `pts[p, 2]`, `pt_of[k]` and `obs[k, 0]`, with rows `c` and `p` picked
//! anew in each iteration, checks each constant column and each use of `k` against an
//! array's extent in every iteration, though neither the column, the counter's bound nor
//! the extent changes. Such a loop gets a copy that skips those checks, entered through
//! tests made once in front of the loop (`4 < size(cams, 1)`, `2 < size(pts, 1)`,
//! `len(cam_of) <= len(pt_of)`, `len(cam_of) <= size(obs, 0)`): when every test passes,
//! no check the copy skips could fail, and the copy runs; otherwise the loop runs as
//! written, and stops where it would have stopped. Rows and every other index keep their
//! checks in both.
//!
//! The copy's accesses are proven in bounds along those dimensions by
//! [`Function::proofs_in_place`], which takes `k < array.dim d a` on the only edge into
//! a block as a check of `a` at constant `k` along `d`, and `bound <= array.dim d a` as
//! one of every counter below `bound`, for the blocks that edge dominates. Both engines
//! could run the result (it computes what the loop computes); only native code does,
//! where the skipped checks are work.
//!
//! A loop qualifies when it is innermost, entered from one block outside it, and left
//! for one block that only it enters (so the values it leaves with become that block's
//! parameters, passed by whichever copy ran); when it has at least
//! [`MIN_CHECKS_SKIPPED`] such checks per iteration, on arrays made before it; and
//! when it is at most [`MAX_VERSIONED_INSTS`] instructions long, so that code grows by
//! a bounded amount. A counter qualifies when it starts at 0 or above, steps by one,
//! and its bound is computed before the loop; it is not tested against an array the
//! function made shorter than the bound by a constant (`zeros(n - 1, n - 1)`, a
//! minor read at a counter below `n`), as that test could never pass.

use crate::cfg::ControlFlow;
use crate::entity::EntityRef;
use crate::function::*;
use crate::op::{CmpOp, Op};
use crate::types::{TypeId, TypeTable};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The fewest checks against constants one iteration must make for a loop to be copied.
pub const MIN_CHECKS_SKIPPED: usize = 3;

/// The longest loop (in instructions) that is copied.
pub const MAX_VERSIONED_INSTS: usize = 160;

/// The most loops of one function that are copied.
const MAX_VERSIONED_LOOPS: usize = 8;

/// A loop to copy, and the tests that choose the copy.
struct Plan {
    shape: LoopShape,
    /// For each array and dimension, the largest constant an access checks against it.
    tests: BTreeMap<(Value, usize), i64>,
    /// The arrays and dimensions an access indexes by the loop's counter, and the bound
    /// the counter stays below: each is tested `bound <= extent`.
    counter_tests: BTreeSet<(Value, usize, Value)>,
}

/// `f` with its qualifying loops versioned (see the module docs), or `None` when no loop
/// qualifies.
pub fn version_loops(f: &Function) -> Option<Function> {
    let cfg = ControlFlow::compute(f);
    let plans = plans(f, &cfg);
    if plans.is_empty() {
        return None;
    }
    Some(copy_in_turn(f.clone(), plans, version, Plan::read_after))
}

/// `g` with each of `plans` applied in turn by `copy` (which copies a loop with
/// [`copy_loop`] and yields what that made exit parameters of), and rebuilt in order.
/// What a copied loop leaves with is read from its exit's parameters afterwards, so
/// `read_after` maps each later plan's values onto them.
pub(crate) fn copy_in_turn<P>(
    mut g: Function,
    mut plans: Vec<P>,
    copy: impl Fn(&mut Function, &P) -> HashMap<Value, Value>,
    read_after: impl Fn(&mut P, &dyn Fn(Value) -> Value),
) -> Function {
    for k in 0..plans.len() {
        let after = copy(&mut g, &plans[k]);
        let new = |v: Value| after.get(&v).copied().unwrap_or(v);
        for later in &mut plans[k + 1..] {
            read_after(later, &new);
        }
    }
    let order = ControlFlow::compute(&g).rpo;
    g.into_rebuilt(&order)
}

fn plans(f: &Function, cfg: &ControlFlow) -> Vec<Plan> {
    let depth = cfg.loop_depths();
    // What dominating accesses prove already, worked out once a loop might qualify; the
    // counted loops, once a loop is small enough.
    let mut proofs: Option<crate::bounds::Proofs> = None;
    let mut counted: Option<Vec<crate::bounds::CountedLoop>> = None;
    let mut out = Vec::new();
    for &h in &cfg.rpo {
        if out.len() >= MAX_VERSIONED_LOOPS {
            break;
        }
        let Some(shape) = innermost_loop(f, cfg, &depth, h) else { continue };
        let LoopShape { body, pre, exit, .. } = shape;
        let mut blocks: Vec<Block> = body.iter().copied().collect();
        blocks.sort();
        let size: usize = blocks.iter().map(|&b| f.blocks[b].insts.len()).sum();
        if size > MAX_VERSIONED_INSTS {
            continue;
        }
        // The checked accesses at constant indices, into arrays made before the loop.
        let made_inside: HashSet<Value> = blocks
            .iter()
            .flat_map(|&b| {
                f.blocks[b]
                    .params
                    .iter()
                    .copied()
                    .chain(f.blocks[b].insts.iter().filter_map(|&i| f.insts[i].result))
            })
            .collect();
        // The loop's counter, counting up by one from a non-negative start while it stays
        // below a bound computed before the loop.
        let counter = counted
            .get_or_insert_with(|| f.counted_loops(cfg))
            .iter()
            .find(|c| c.header == h && !made_inside.contains(&c.bound))
            .map(|c| (c.index, c.bound));
        let mut checks: Vec<(Inst, Value, usize, i64)> = Vec::new();
        let mut counter_checks: Vec<(Inst, Value, usize, Value)> = Vec::new();
        for &b in &blocks {
            for &i in &f.blocks[b].insts {
                let d = &f.insts[i];
                let n_idx = match d.op {
                    Op::Load => d.args.len().saturating_sub(1),
                    Op::Store => d.args.len().saturating_sub(2),
                    _ => continue,
                };
                if made_inside.contains(&d.args[0]) {
                    continue;
                }
                for dim in 0..n_idx {
                    if let Some(k) = f.const_int(d.args[1 + dim]).filter(|&k| k >= 0) {
                        checks.push((i, d.args[0], dim, k));
                    }
                    if let Some((_, bound)) = counter.filter(|&(index, _)| index == d.args[1 + dim]) {
                        if !short_of(f, d.args[0], dim, bound) {
                            counter_checks.push((i, d.args[0], dim, bound));
                        }
                    }
                }
            }
        }
        if checks.len() + counter_checks.len() < MIN_CHECKS_SKIPPED {
            continue;
        }
        // Those that no dominating access has made already.
        let proofs = proofs.get_or_insert_with(|| f.proofs_in_place());
        let mut tests: BTreeMap<(Value, usize), i64> = BTreeMap::new();
        let mut skipped = 0;
        for (i, a, dim, k) in checks {
            if proofs.in_bounds.get(&i).is_some_and(|p| p.get(dim).copied().unwrap_or(false)) {
                continue;
            }
            let t = tests.entry((a, dim)).or_insert(k);
            *t = (*t).max(k);
            skipped += 1;
        }
        let mut counter_tests: BTreeSet<(Value, usize, Value)> = BTreeSet::new();
        for (i, a, dim, bound) in counter_checks {
            if proofs.in_bounds.get(&i).is_some_and(|p| p.get(dim).copied().unwrap_or(false)) {
                continue;
            }
            counter_tests.insert((a, dim, bound));
            skipped += 1;
        }
        if skipped < MIN_CHECKS_SKIPPED {
            continue;
        }
        out.push(Plan { shape: LoopShape { header: h, body, pre, exit }, tests, counter_tests });
    }
    out
}

/// An innermost loop with one way in and one way out, as versioning and
/// [`crate::promote`] take them.
pub(crate) struct LoopShape {
    pub header: Block,
    pub body: HashSet<Block>,
    /// The block in front of the loop, its one edge into the header the only way in.
    pub pre: Block,
    /// The one block the loop leaves for, which nothing outside the loop enters.
    pub exit: Block,
}

/// The loop headed by `h` when it is innermost (every block of it as deep as `h`),
/// entered by one edge from one block outside it, and left for one block that only it
/// enters.
pub(crate) fn innermost_loop(f: &Function, cfg: &ControlFlow, depth: &[u32], h: Block) -> Option<LoopShape> {
    if cfg.latches(h).next().is_none() || h == f.entry() {
        return None;
    }
    let body = cfg.loop_blocks(h);
    let inside = |b: Block| body.contains(&b);
    if body.iter().any(|b| depth[b.index()] != depth[h.index()]) {
        return None;
    }
    let outside: Vec<Block> = cfg.preds[h.index()].iter().copied().filter(|&p| !inside(p)).collect();
    let [pre] = outside.as_slice() else { return None };
    if f.blocks[*pre].term.successors().filter(|s| s.block == h).count() != 1 {
        return None;
    }
    let mut exits: Vec<Block> = body
        .iter()
        .flat_map(|&b| f.blocks[b].term.successors().map(|s| s.block))
        .filter(|&s| !inside(s))
        .collect();
    exits.sort();
    exits.dedup();
    let [exit] = exits.as_slice() else { return None };
    if cfg.preds[exit.index()].iter().any(|&p| !inside(p)) || *exit == f.entry() {
        return None;
    }
    Some(LoopShape { header: h, pre: *pre, exit: *exit, body })
}

/// Whether dimension `dim` of array `a` is made shorter than `bound` (`zeros(n - 1, ..)`
/// against a counter below `n`, as a minor is against its matrix's columns): a test
/// `bound <= extent` would never pass, so it would only cost its time.
fn short_of(f: &Function, a: Value, dim: usize, bound: Value) -> bool {
    let Some(made) = f.defining(a).filter(|d| d.op == Op::ArrayFill) else { return false };
    let Some(extent) = made.args.get(1 + dim).and_then(|&e| f.defining(e)) else { return false };
    extent.op == Op::IBinary(crate::op::IBinOp::Sub)
        && extent.args[0] == bound
        && f.const_int(extent.args[1]).is_some_and(|k| k >= 1)
}

impl Plan {
    /// This plan reading `new(v)` for each value `v` (the exit parameters an earlier
    /// loop's copy made, see [`copy_in_turn`]).
    fn read_after(&mut self, new: &dyn Fn(Value) -> Value) {
        self.tests =
            std::mem::take(&mut self.tests).into_iter().map(|((a, d), k)| ((new(a), d), k)).collect();
        self.counter_tests = std::mem::take(&mut self.counter_tests)
            .into_iter()
            .map(|(a, d, b)| (new(a), d, new(b)))
            .collect();
    }
}

/// Copies the loop of `plan` and puts the tests in front of both copies; yields what
/// [`copy_loop`] made exit parameters of.
fn version(g: &mut Function, plan: &Plan) -> HashMap<Value, Value> {
    let (copy, after) = copy_loop(g, &plan.shape);
    // A constant column `k` is tested `k < extent`; a counter below `bound`,
    // `bound <= extent`.
    let mut tests: Vec<Test> = Vec::new();
    for (&(array, dim), &k) in &plan.tests {
        tests.push(Box::new(move |g: &mut Function, t: Block, span: Span| {
            let extent = g.push_inst(t, Op::ArrayDim(dim as u8), vec![array], Some(TypeTable::I64), span)?;
            let k = g.push_inst(t, Op::IConst(k), vec![], Some(TypeTable::I64), span)?;
            g.push_inst(t, Op::ICmp(CmpOp::Lt), vec![k, extent], Some(TypeTable::BOOL), span)
        }));
    }
    for &(array, dim, bound) in &plan.counter_tests {
        tests.push(Box::new(move |g: &mut Function, t: Block, span: Span| {
            let extent = g.push_inst(t, Op::ArrayDim(dim as u8), vec![array], Some(TypeTable::I64), span)?;
            g.push_inst(t, Op::ICmp(CmpOp::Le), vec![bound, extent], Some(TypeTable::BOOL), span)
        }));
    }
    route_through_tests(g, &plan.shape, copy[&plan.shape.header], tests);
    after
}

/// Copies the loop of `shape` (blocks, parameters and instructions, its own values
/// renamed), left for the same exit. What the loop leaves with becomes a parameter of
/// the exit, passed by either copy: the blocks outside both copies, which the exit
/// dominates, read that parameter. Nothing enters the copy yet. Yields the copy's
/// blocks, by the original's, and the exit's new parameters, by the values they stand
/// for after the loop (which a plan for a later loop must read instead).
pub(crate) fn copy_loop(
    g: &mut Function,
    shape: &LoopShape,
) -> (HashMap<Block, Block>, HashMap<Value, Value>) {
    let inside = |b: Block| shape.body.contains(&b);
    let mut blocks: Vec<Block> = shape.body.iter().copied().collect();
    blocks.sort();
    let mut block_map: HashMap<Block, Block> = Default::default();
    let mut value_map: HashMap<Value, Value> = Default::default();
    for &b in &blocks {
        let nb = g.add_block();
        block_map.insert(b, nb);
        for p in g.blocks[b].params.clone() {
            let (ty, name) = (g.values[p].ty, g.values[p].name.clone());
            let np = g.add_block_param(nb, ty, name);
            value_map.insert(p, np);
        }
    }
    for &b in &blocks {
        for &i in &g.blocks[b].insts.clone() {
            if let Some(r) = g.insts[i].result {
                let v = g.values.push(g.values[r].clone());
                value_map.insert(r, v);
            }
        }
    }
    let map_value = |v: Value| value_map.get(&v).copied().unwrap_or(v);
    for &b in &blocks {
        let nb = block_map[&b];
        for i in g.blocks[b].insts.clone() {
            let mut d = g.insts[i].clone();
            d.args = d.args.iter().map(|&a| map_value(a)).collect();
            d.result = d.result.map(map_value);
            let ni = g.insts.push(d);
            if let Some(r) = g.insts[ni].result {
                g.values[r].def = ValueDef::Inst(ni);
            }
            g.blocks[nb].insts.push(ni);
        }
        let term = g.blocks[b].term.mapped(map_value, |t| block_map.get(&t).copied().unwrap_or(t));
        let span = g.blocks[b].term_span;
        g.set_terminator(nb, term, span);
    }
    let copies: HashSet<Block> = block_map.values().copied().collect();
    let outside: Vec<Block> =
        g.blocks.iter().map(|(b, _)| b).filter(|&b| !inside(b) && !copies.contains(&b)).collect();
    let mut live_out: Vec<Value> = Vec::new();
    for &b in &outside {
        let data = &g.blocks[b];
        let used = data.insts.iter().flat_map(|&i| g.insts[i].args.iter().copied()).chain(data.term.uses());
        for v in used {
            if value_map.contains_key(&v) && !live_out.contains(&v) {
                live_out.push(v);
            }
        }
    }
    let mut exit_params: HashMap<Value, Value> = Default::default();
    for &v in &live_out {
        let (ty, name) = (g.values[v].ty, g.values[v].name.clone());
        let p = g.add_block_param(shape.exit, ty, name);
        exit_params.insert(v, p);
    }
    for &b in &blocks {
        for (from, copy) in [(b, false), (block_map[&b], true)] {
            let mut term = g.blocks[from].term.clone();
            for s in term.successors_mut() {
                if s.block == shape.exit {
                    s.args.extend(live_out.iter().map(|&v| if copy { map_value(v) } else { v }));
                }
            }
            g.blocks[from].term = term;
        }
    }
    if !exit_params.is_empty() {
        for &b in &outside {
            for i in g.blocks[b].insts.clone() {
                for a in g.insts[i].args.iter_mut() {
                    if let Some(&p) = exit_params.get(a) {
                        *a = p;
                    }
                }
            }
            let term = g.blocks[b].term.mapped(|v| exit_params.get(&v).copied().unwrap_or(v), |t| t);
            g.blocks[b].term = term;
        }
    }
    (block_map, exit_params)
}

/// One test in front of a loop's copy: it puts its instructions at the end of the given
/// block and yields the `bool` that must be true for the copy to run (`None` when an
/// instruction it needs has no result, and the test fails).
pub(crate) type Test = Box<dyn Fn(&mut Function, Block, Span) -> Option<Value>>;

/// Puts `tests` between the block in front of the loop of `shape` and `fast`, a block
/// taking the header's parameters: when every test passes, `fast` runs; the first that
/// fails goes to the loop as written, through one block of its own so that the loop
/// keeps one way in.
pub(crate) fn route_through_tests(g: &mut Function, shape: &LoopShape, fast: Block, tests: Vec<Test>) {
    let header_params: Vec<(TypeId, Option<String>)> =
        g.blocks[shape.header].params.iter().map(|&p| (g.values[p].ty, g.values[p].name.clone())).collect();
    let span = g.blocks[shape.header].term_span;
    let new_block = |g: &mut Function| {
        let b = g.add_block();
        let params: Vec<Value> =
            header_params.iter().map(|(ty, name)| g.add_block_param(b, *ty, name.clone())).collect();
        (b, params)
    };
    let (written, written_params) = new_block(g);
    g.set_terminator(
        written,
        Terminator::Jump(BlockCall { block: shape.header, args: written_params }),
        span,
    );
    // Built from the last test back, each test block passing on to the one after it.
    let mut next = fast;
    for test in tests.into_iter().rev() {
        let (t, params) = new_block(g);
        let term = match test(g, t, span) {
            Some(cond) => Terminator::Branch {
                cond,
                then_dest: BlockCall { block: next, args: params.clone() },
                else_dest: BlockCall { block: written, args: params },
            },
            None => Terminator::Jump(BlockCall { block: written, args: params }),
        };
        g.set_terminator(t, term, span);
        next = t;
    }
    let mut term = g.blocks[shape.pre].term.clone();
    for s in term.successors_mut() {
        if s.block == shape.header {
            s.block = next;
        }
    }
    g.blocks[shape.pre].term = term;
}

#[cfg(test)]
mod tests {
    use super::version_loops;
    use crate::entity::EntityRef;

    const GATHER: &str = "fn @main(%p_0: f64[,], %idx_1: i64[], %w_2: f64[]) -> f64 {
bb0:
    %s_3: f64 = fconst 0.0
    %4: i64 = iconst 0
    %5: i64 = array.dim 0 %idx_1
    jump bb1(%4, %s_3)
bb1(%k_6: i64, %s_7: f64):
    %8: bool = icmp lt %k_6, %5
    br %8, bb3, bb2
bb2:
    ret %s_7
bb3:
    %r_9: i64 = load.trusted %idx_1[%k_6]
    %10: f64 = load %w_2[%k_6]
    %s_11: f64 = fadd %s_7, %10
    %12: i64 = iconst 0
    %13: f64 = load %p_0[%r_9, %12]
    %14: f64 = fmul %13, %10
    %15: i64 = iconst 1
    %16: f64 = load %p_0[%r_9, %15]
    %17: f64 = fadd %14, %16
    %s_18: f64 = fadd %s_11, %17
    %19: i64 = iconst 2
    %20: f64 = load %p_0[%r_9, %19]
    %21: f64 = fconst 0.25
    %22: f64 = fmul %20, %21
    %23: i64 = iconst 3
    %24: f64 = load %p_0[%r_9, %23]
    %25: f64 = fconst 0.5
    %26: f64 = fmul %24, %25
    %27: f64 = fadd %22, %26
    %s_28: f64 = fadd %s_18, %27
    %29: i64 = iadd %k_6, %15
    jump bb1(%29, %s_28)
}
";

    /// The function of `text` versioned, verified, and printed.
    fn versioned(text: &str) -> Option<(crate::Function, String)> {
        let m = crate::parse_module(text).expect("parses");
        let g = version_loops(&m.funcs[crate::FuncId::new(0)])?;
        if let Err(e) = crate::verify::verify_function(&m, &g) {
            panic!("{e}");
        }
        let printed = crate::print::print_function(&m, &g);
        Some((g, printed))
    }

    /// The loads whose index along `dim` is proven in bounds where they stand.
    fn proven_along(g: &crate::Function, dim: usize) -> usize {
        let proofs = g.proofs_in_place();
        g.insts
            .iter()
            .filter(|(i, d)| {
                d.op == crate::Op::Load && proofs.in_bounds.get(i).is_some_and(|p| p.get(dim) == Some(&true))
            })
            .count()
    }

    /// Two loops in a row, each reading constant columns: the first leaves `w` as `b`,
    /// the second reads `w`.
    const SWITCH_THEN_READ: &str = "fn @main(%a_0: f64[,], %b_1: f64[,], %idx_2: i64[]) -> f64 {
bb0:
    %s_3: f64 = fconst 0.0
    %4: i64 = iconst 0
    %5: i64 = array.dim 0 %idx_2
    jump bb1(%4, %a_0, %s_3)
bb1(%k_6: i64, %w_7: f64[,], %s_8: f64):
    %9: bool = icmp lt %k_6, %5
    br %9, bb6, bb2
bb2:
    %10: i64 = iconst 0
    jump bb3(%10, %s_8)
bb3(%k_11: i64, %s_12: f64):
    %13: bool = icmp lt %k_11, %5
    br %13, bb5, bb4
bb4:
    ret %s_12
bb5:
    %r_14: i64 = load.trusted %idx_2[%k_11]
    %15: i64 = iconst 1
    %16: f64 = load %w_7[%r_14, %15]
    %17: i64 = iconst 2
    %18: f64 = load %w_7[%r_14, %17]
    %19: i64 = iconst 3
    %20: f64 = load %w_7[%r_14, %19]
    %21: f64 = fmul %18, %20
    %22: f64 = fadd %16, %21
    %s_23: f64 = fadd %s_12, %22
    %24: i64 = iadd %k_11, %15
    jump bb3(%24, %s_23)
bb6:
    %25: i64 = load.trusted %idx_2[%k_6]
    %26: i64 = iconst 0
    %27: f64 = load %a_0[%25, %26]
    %28: i64 = iconst 1
    %29: f64 = load %a_0[%25, %28]
    %30: f64 = fmul %27, %29
    %31: i64 = iconst 2
    %32: f64 = load %a_0[%25, %31]
    %33: f64 = fadd %30, %32
    %s_34: f64 = fadd %s_8, %33
    %35: i64 = iadd %k_6, %28
    jump bb1(%35, %b_1, %s_34)
}
";

    #[test]
    fn a_later_loop_is_tested_on_what_an_earlier_copied_loop_leaves_with() {
        // Both loops are copied. The first one's copy makes the `w` it leaves with a
        // parameter of its exit, and the test in front of the second reads that
        // parameter (`versioned` verifies the result: the value the loop was entered
        // with does not reach there).
        let (_, text) = versioned(SWITCH_THEN_READ).expect("versioned");
        assert_eq!(text.matches("array.dim 1").count(), 2, "{text}");
    }

    #[test]
    fn a_loop_reading_constant_columns_gets_a_copy_without_their_checks() {
        let (g, text) = versioned(GATHER).expect("versioned");
        // One test in front: 3 < size(p, 1), the largest column read.
        assert_eq!(text.matches("array.dim 1 %p_0").count(), 1, "{text}");
        assert!(text.contains("iconst 3"), "{text}");
        assert_eq!(text.matches("load %p_0[").count(), 8, "{text}");
        // The copy's four reads have their columns proven; the loop as written proves
        // none of its own (column 0 does not cover columns 1 to 3).
        assert_eq!(proven_along(&g, 1), 4, "{text}");
        // What the loop leaves with reaches the return from either copy.
        assert_eq!(text.matches("ret %").count(), 1, "{text}");
    }

    /// A loop over `k < len(idx)` reading `w[k]`, `u[k]` and `v[k, 1]`, arrays whose
    /// lengths nothing relates to `idx`'s.
    const ALONGSIDE: &str = "fn @main(%idx_0: i64[], %w_1: f64[], %u_2: f64[], %v_3: f64[,]) -> f64 {
bb0:
    %s_4: f64 = fconst 0.0
    %5: i64 = iconst 0
    %6: i64 = array.dim 0 %idx_0
    jump bb1(%5, %s_4)
bb1(%k_7: i64, %s_8: f64):
    %9: bool = icmp lt %k_7, %6
    br %9, bb3, bb2
bb2:
    ret %s_8
bb3:
    %10: f64 = load %w_1[%k_7]
    %11: f64 = load %u_2[%k_7]
    %12: i64 = iconst 1
    %13: f64 = load %v_3[%k_7, %12]
    %14: f64 = fmul %10, %11
    %15: f64 = fadd %14, %13
    %s_16: f64 = fadd %s_8, %15
    %17: i64 = iadd %k_7, %12
    jump bb1(%17, %s_16)
}
";

    #[test]
    fn a_loop_reading_other_arrays_at_its_counter_gets_a_copy_without_those_checks() {
        let (g, text) = versioned(ALONGSIDE).expect("versioned");
        // One test per array along the counter's dimension, `len(idx) <= extent`, and
        // one for the constant column.
        for a in ["%w_1", "%u_2", "%v_3"] {
            assert_eq!(text.matches(&format!("array.dim 0 {a}")).count(), 1, "{text}");
        }
        assert_eq!(text.matches("icmp le %6, ").count(), 3, "{text}");
        // The copy's three reads have their counters proven; the loop as written's do not.
        assert_eq!(proven_along(&g, 0), 3, "{text}");
        assert_eq!(text.matches("load %w_1[").count(), 2, "{text}");
        // A counter whose bound the loop computes itself gets no test.
        let inside = ALONGSIDE.replace(
            "    %9: bool = icmp lt %k_7, %6",
            "    %b_20: i64 = iconst 3\n    %9: bool = icmp lt %k_7, %b_20",
        );
        assert!(versioned(&inside).is_none(), "{inside}");
        // Nor does an array made one shorter than the bound (a minor against its
        // matrix): its test could never pass. The other arrays' tests stay.
        let short = ALONGSIDE.replace(
            "    %6: i64 = array.dim 0 %idx_0\n",
            "    %6: i64 = array.dim 0 %idx_0\n    %one_30: i64 = iconst 1\n    %m_31: i64 = isub %6, %one_30\n    %z_32: f64 = fconst 0.0\n    %w_33: f64[] = array.fill %z_32, %m_31\n",
        )
        .replace("load %w_1[%k_7]", "load %w_33[%k_7]");
        assert!(short.contains("array.fill"));
        let (_, text) = versioned(&short).expect("versioned");
        assert!(!text.contains("array.dim 0 %w_33"), "{text}");
        assert_eq!(text.matches("icmp le %6, ").count(), 2, "{text}");
    }

    #[test]
    fn loops_with_few_checks_or_two_ways_out_stay_as_they_are() {
        // Two columns only, and a read at the counter: three checks, so the loop is
        // copied; with `w` read at the row instead, two are too few.
        let three = GATHER
            .replace("%24: f64 = load %p_0[%r_9, %23]", "%24: f64 = fconst 0.5")
            .replace("%20: f64 = load %p_0[%r_9, %19]", "%20: f64 = fconst 0.5");
        assert!(versioned(&three).is_some());
        let few = three.replace("load %w_2[%k_6]", "load %w_2[%r_9]");
        assert!(versioned(&few).is_none());
        // Left early, to a block of its own.
        let early = GATHER.replace(
            "    %29: i64 = iadd %k_6, %15\n    jump bb1(%29, %s_28)",
            "    %29: i64 = iadd %k_6, %15\n    %30: bool = fcmp gt %s_28, %21\n    br %30, bb4, bb1(%29, %s_28)\nbb4:\n    ret %s_28",
        );
        assert!(early.contains("bb4:"));
        assert!(versioned(&early).is_none());
    }
}
