//! The reverse pass of a derived rule: each primal block, backwards, with the adjoint of
//! every op written inline. Adjoints of `f64` values live in SSA values (symbolic zeros
//! cost nothing) and cross blocks as block parameters; adjoints of addresses are their
//! shadows, incremented in place. Every overwrite of the forward pass is undone, so when
//! the reverse rule of an op runs, memory is as the op found it. Whatever the reverse
//! pass reads from the forward pass is popped from the tape; which edge entered a join
//! is popped from the path stack, so the taken path is replayed, never recomputed.

use crate::analysis::Edge;
use crate::emit::Emit;
use crate::forward::{shadow_access, shadow_struct, tangent_extract, Forward};
use crate::tangent::{field_leaf_ranges, has_tangent, rdata_leaves, tangent_type, LeafKind};
use crate::{AdError, RuleIds};
use mcir_ir::entity::EntityRef;
use mcir_ir::{
    Block, BlockCall, CmpOp, FBinOp, FUnOp, Function, IBinOp, Inst, Op, Terminator, Transpose, Type, TypeId,
    TypeTable, Value,
};
use rustc_hash::FxHashMap as HashMap;

/// A buffer of the tape: one per value the reverse pass reads, plus the path stack.
pub(crate) struct Slot {
    /// The forward value pushed (none for the path stack).
    pub fwd: Option<Value>,
    pub ty: TypeId,
    pub name: String,
    /// The stack, as read from the tape in the reverse pass (for a direct slot, the value).
    pub rev_stack: Value,
    /// A value of the forward pass's entry block, computed once per call: the tape holds
    /// it directly instead of a stack of it.
    pub direct: bool,
}

pub(crate) struct Reverse<'a> {
    pub e: Emit,
    pub fw: &'a Forward,
    pub primal: &'a Function,
    pub types: &'a mut TypeTable,
    pub ids: &'a [RuleIds],
    pub active: Vec<bool>,
    /// Which primal values may depend on the varying arguments (forward activity): an
    /// address that does not gets no shadow work.
    varied: Vec<bool>,
    pub corrupt: Option<String>,
    corrupting: bool,
    tape: Value,
    tape_sid: mcir_ir::StructId,
    /// Where forward values are defined, as primal blocks.
    fw_inst_block: HashMap<Inst, Block>,
    fw_block_to_primal: HashMap<Block, Block>,
    /// Values pushed (block, value), popped in the reverse of their block, and to be
    /// popped there after the fact.
    pushed: rustc_hash::FxHashSet<(Block, Value)>,
    popped_in: rustc_hash::FxHashSet<(Block, Value)>,
    pop_in: Vec<(Block, Value, usize)>,
    /// Values defined in the forward pass's entry block.
    fw_entry_values: rustc_hash::FxHashSet<Value>,
    pub slots: Vec<Slot>,
    slot_of: HashMap<Value, usize>,
    /// Slots of values pushed where they are read rather than where they are computed:
    /// (forward value, reading primal block).
    read_slot_of: HashMap<(Value, Block), usize>,
    /// How many loops contain each primal block.
    loop_depth: Vec<u32>,
    /// The path stack that joins in loops share (edges are popped in the reverse of the
    /// order they were taken).
    path_slot: Option<usize>,
    /// The path of each join outside every loop, and of the return taken, on a stack of
    /// its own: pushed at most once per call, each becomes a field of the record
    /// (`record.rs`), where a shared stack would cost an allocation per call.
    own_path_slots: HashMap<Option<Block>, usize>,
    /// Values pushed at the end of each primal block: (primal block, forward value, slot).
    pub pushes: Vec<(Block, Value, usize)>,
    /// The reverse block of each primal block and the adjoints it receives.
    rblock: Vec<Block>,
    adj_in: Vec<Vec<(Value, u32)>>,
    /// The primal block whose reverse is being built, and where its pops go.
    cur: Block,
    cur_rblock: Block,
    pop_pos: usize,
    popped: HashMap<Value, Value>,
    zero: Option<Value>,
    adj: HashMap<(Value, u32), Value>,
    /// Position in the primal block of the instruction being reversed, the last write
    /// to memory before it, and the loads already emitted again.
    cur_pos: usize,
    last_write_before_current: Option<usize>,
    reloaded: HashMap<Value, Value>,
    /// The block and position of each instruction of the primal (by index), for the
    /// instructions of its blocks.
    inst_pos: Vec<Option<(Block, usize)>>,
    /// For each primal block, the block that alone enters it (by one edge), if any, and
    /// its instructions that may write memory: the position, and the type of the array
    /// a store writes (`None` for anything else, which may write any array).
    sole_pred: Vec<Option<Block>>,
    writes_in: Vec<Vec<(usize, Option<TypeId>)>>,
    /// Primal values that the adjoint of a product or quotient reads whatever else is
    /// recomputed (see [`read_by_products`]): a product of them is computed again from
    /// them instead of being taped.
    read_anyway: rustc_hash::FxHashSet<Value>,
    /// Array types no instruction of the primal writes (see [`never_written_arrays`]).
    never_written: rustc_hash::FxHashSet<TypeId>,
    /// Loop headers whose incoming edge is known from a counter.
    pub counted: Vec<Option<crate::analysis::CountedHeader>>,
    /// Loops whose counter the reverse pass recomputes, the counters' values in the
    /// reverse block being built, and the stacks their exit values are read from.
    pub counters: Vec<crate::analysis::LoopCounter>,
    counter_params: HashMap<Value, Value>,
    /// The primal value of each forward value that has one.
    fw_to_primal: HashMap<Value, Value>,
    pub counter_slots: Vec<Option<usize>>,
    /// Joins whose incoming edge the reverse pass finds by evaluating again the branch
    /// conditions that led to it (see [`Reverse::replay_region`]), or need not find (see
    /// [`Reverse::drop_pointless_paths`]): the forward pass marks no edge into them on
    /// the path stack.
    pub replayed: rustc_hash::FxHashSet<Block>,
    /// The path pop of each join's reverse (the value popped, and the join).
    path_pops: Vec<(Value, Block)>,
    /// The primal's control flow, for the dominators of joins.
    flow: mcir_ir::cfg::ControlFlow,
    /// Arrays made by elementwise maps whose adjoint is held in values, not in a shadow
    /// array (see `register_held_arrays`), and those adjoints so far.
    held: rustc_hash::FxHashSet<Value>,
    held_adj: HashMap<Value, HeldAdjoint>,
    /// Shadows the reverse pass makes again (see [`shadows_made_in_reverse`]).
    made_in_reverse: HashMap<Value, (ShapeSource, Remade)>,
    /// Shadows made again at the top of a latch's reverse, once per forward shadow.
    remade_at_latch: HashMap<Value, Value>,
    /// Primal arrays made in a loop, anew in each iteration (see [`fresh_in_loops`]).
    fresh_in_loops: rustc_hash::FxHashSet<Value>,
}

/// The adjoint of an array held in values: the same scalar for every element (the
/// adjoint `sum` sends back), or an array.
#[derive(Clone, Copy)]
enum HeldAdjoint {
    Uniform(Value),
    Array(Value),
}

/// Where a jump to `call` ends up past blocks that have no instructions and jump on
/// (their parameters replaced by the arguments they were given), at most 16 of them.
fn through_forwarding_blocks(f: &Function, call: &BlockCall) -> BlockCall {
    let mut call = call.clone();
    for _ in 0..16 {
        let data = &f.blocks[call.block];
        let Terminator::Jump(next) = &data.term else { break };
        if !data.insts.is_empty() || data.params.len() != call.args.len() {
            break;
        }
        let subst: HashMap<Value, Value> =
            data.params.iter().copied().zip(call.args.iter().copied()).collect();
        call = BlockCall {
            block: next.block,
            args: next.args.iter().map(|a| subst.get(a).copied().unwrap_or(*a)).collect(),
        };
    }
    call
}

/// The arrays made by elementwise maps whose every use is an elementwise map, a `sum` or
/// a `dot` later in the same block. Nothing else can see such an array, so its adjoint
/// is the sum of what those uses send back, and can be kept as a value: no zeroed
/// shadow, no accumulation through memory, and when `sum` is the only use, no array at
/// all (`sum(exp(v))` sends back one scalar for every element).
/// The primal values that the adjoint of an active product or quotient reads: both
/// factors of a product of two active values (`y * y`, `a * b`), the divisor of a
/// quotient, and the quotient itself where the divisor is active. The reverse pass has
/// them at hand whatever it decides for other values, so a cheap computation of them (`y
/// * y`, `3 * y` in a Newton step) costs less to do again than to tape.
fn read_by_products(primal: &Function, active: &[bool]) -> rustc_hash::FxHashSet<Value> {
    let is_active = |v: Value| active.get(v.index()).copied().unwrap_or(false);
    let mut out = rustc_hash::FxHashSet::default();
    for data in primal.blocks.values() {
        for &i in &data.insts {
            let d = &primal.insts[i];
            let Some(r) = d.result else { continue };
            if !is_active(r) {
                continue;
            }
            match d.op {
                Op::FBinary(FBinOp::Mul) if d.args[0] == d.args[1] => {
                    out.insert(d.args[0]);
                }
                Op::FBinary(FBinOp::Mul) if is_active(d.args[0]) && is_active(d.args[1]) => {
                    out.extend([d.args[0], d.args[1]]);
                }
                Op::FBinary(FBinOp::Div) => {
                    // A constant numerator's quotient stands in for the divisor.
                    let constant_numerator =
                        !is_active(d.args[0]) && exact_inverse_of_constant(primal, d.args[0]).is_some();
                    if !constant_numerator {
                        out.insert(d.args[1]);
                    }
                    if is_active(d.args[1]) {
                        out.insert(r);
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// `1 / c` when `v` is a constant `c` whose inverse is exact (a power of two, `±1`
/// among them), so that `c / y` gives `1 / y` back as a product.
fn exact_inverse_of_constant(primal: &Function, v: Value) -> Option<f64> {
    let Some(Op::FConst(c)) = primal.defining(v).map(|d| &d.op) else {
        return None;
    };
    let c = *c;
    let inverse = 1.0 / c;
    let power_of_two = |x: f64| x.is_normal() && x.to_bits() & ((1u64 << 52) - 1) == 0;
    (power_of_two(c) && power_of_two(inverse)).then_some(inverse)
}

/// The array types of which `primal` writes no element: not stored into, not written by
/// a kernel. A function that calls another or gives arena memory back (a checkpointed
/// loop, whose arrays' memory a later array may reuse) counts as writing every array.
/// Elements of the others are the same all through a call.
fn never_written_arrays(primal: &Function) -> rustc_hash::FxHashSet<TypeId> {
    let mut types: rustc_hash::FxHashSet<TypeId> = primal.values.values().map(|v| v.ty).collect();
    for data in primal.blocks.values() {
        for &i in &data.insts {
            let d = &primal.insts[i];
            match d.op {
                Op::Store | Op::TrustedStore => {
                    types.remove(&primal.value_type(d.args[0]));
                }
                ref op if mcir_ir::memory::may_write_elements(op) => {
                    if matches!(op, Op::Call(_) | Op::ArenaRelease | Op::TapeRelease) || d.args.is_empty() {
                        return Default::default();
                    }
                    for &a in &d.args {
                        types.remove(&primal.value_type(a));
                    }
                }
                _ => {}
            }
        }
    }
    types
}

/// The values made by allocating ops and calls in loops (arrays among them): each
/// iteration makes its own.
fn fresh_in_loops(primal: &Function, depth: &[u32]) -> rustc_hash::FxHashSet<Value> {
    let mut out = rustc_hash::FxHashSet::default();
    for (b, data) in primal.blocks.iter() {
        if depth.get(b.index()).copied().unwrap_or(0) == 0 {
            continue;
        }
        for &i in &data.insts {
            let d = &primal.insts[i];
            if let Some(r) = d.result {
                if d.op.allocates() || matches!(d.op, Op::Call(_)) {
                    out.insert(r);
                }
            }
        }
    }
    out
}

/// How the reverse pass makes an array of a primal array's shape without the tape
/// keeping an array for it.
#[derive(Clone)]
enum ShapeSource {
    /// The extents a `fill` was given (its arguments after the first).
    Extents(Inst),
    /// An array literal's shape.
    Literal(Vec<u32>),
    /// An array of the same shape that the tape holds once per call (a parameter, or a
    /// value of the entry block).
    Like(Value),
}

/// Where the shape of primal array `v` can be found in the reverse pass: through the
/// copies and elementwise maps it was made by, down to a `fill`, a literal, or an array
/// of the entry block.
fn shape_source(primal: &Function, fw: &Forward, v: Value, depth: u32) -> Option<ShapeSource> {
    let entry = primal.entry();
    match primal.values[v].def {
        mcir_ir::ValueDef::Param(b, _) => (b == entry).then_some(ShapeSource::Like(v)),
        mcir_ir::ValueDef::Inst(i) => {
            let d = &primal.insts[i];
            let in_entry = primal.blocks[entry].insts.contains(&i);
            match &d.op {
                Op::ArrayFill => Some(ShapeSource::Extents(i)),
                Op::ArrayLit(dims) => Some(ShapeSource::Literal(dims.clone())),
                _ if in_entry && fw.fwd(v).is_ok() => Some(ShapeSource::Like(v)),
                Op::ArrayCopy | Op::ZerosLike | Op::MapFBinary(_) | Op::MapFUnary(_) | Op::MapFPowI
                    if depth > 0 =>
                {
                    let ty = primal.value_type(v);
                    let operand = d.args.iter().copied().find(|&a| primal.value_type(a) == ty)?;
                    shape_source(primal, fw, operand, depth - 1)
                }
                _ => None,
            }
        }
    }
}

/// Where the reverse pass makes a shadow again: in the reverse of the block that makes
/// the array, before its first read there, or at the top of the reverse of the loop's
/// latch, where each iteration's reverse begins.
#[derive(Clone, Copy)]
enum Remade {
    InBlock(Block),
    AtLatch(Block),
}

/// The zeroed shadows of arrays made in loops that the reverse pass makes again instead
/// of reading them from the tape: (forward shadow, how to make it, where). The forward
/// pass only makes such a shadow (nothing in it reads, writes or passes on the shadow),
/// and only the reverse of the iteration that made the array reads it, so a fresh
/// zeroed array made before the first of those reads holds what the taped one would.
/// Each iteration's shadow then lives only in that iteration's reverse, where the loop
/// can give it back, instead of one per iteration being kept from the forward pass to
/// the end of the call. Either every use of the array is in the block that makes it
/// (the shadow is made there), or the array is made on every iteration of a loop with
/// one latch, is used only in blocks that block dominates, and no path from it leaves
/// the loop but through the latch (no `break` or `return`): the reverse of the latch
/// then begins the reverse of every iteration and dominates every read, and the shadow
/// is made there, from a shape that does not change from one iteration to the next.
fn shadows_made_in_reverse(
    primal: &Function,
    fw: &Forward,
    cfg: &mcir_ir::cfg::ControlFlow,
    depth: &[u32],
) -> HashMap<Value, (ShapeSource, Remade)> {
    let mut made: HashMap<Value, Block> = HashMap::default();
    for (b, data) in primal.blocks.iter() {
        if depth.get(b.index()).copied().unwrap_or(0) == 0 {
            continue;
        }
        for &i in &data.insts {
            if let Some(r) = primal.insts[i].result {
                made.insert(r, b);
            }
        }
    }
    if made.is_empty() {
        return HashMap::default();
    }
    // The blocks that use each array made in a loop.
    let mut used_in: HashMap<Value, Vec<Block>> = HashMap::default();
    for (b, data) in primal.blocks.iter() {
        let mut uses: Vec<Value> = data.term.uses();
        for &i in &data.insts {
            uses.extend(primal.insts[i].args.iter().copied());
        }
        for u in uses {
            if made.contains_key(&u) {
                used_in.entry(u).or_default().push(b);
            }
        }
    }
    let entry = primal.entry();
    let entry_insts: rustc_hash::FxHashSet<Inst> = primal.blocks[entry].insts.iter().copied().collect();
    let per_call = |v: Value| match primal.values[v].def {
        mcir_ir::ValueDef::Param(b, _) => b == entry,
        mcir_ir::ValueDef::Inst(i) => {
            entry_insts.contains(&i) || matches!(primal.insts[i].op, Op::IConst(_) | Op::FConst(_))
        }
    };
    let mut loops: Vec<(Block, std::collections::HashSet<Block>)> = Vec::new();
    let mut place = |r: Value, b: Block, source: &ShapeSource| -> Option<Remade> {
        let blocks = used_in.get(&r).map(Vec::as_slice).unwrap_or(&[]);
        if blocks.iter().all(|&u| u == b) {
            return Some(Remade::InBlock(b));
        }
        let steady = match source {
            ShapeSource::Extents(i) => primal.insts[*i].args[1..].iter().all(|&x| per_call(x)),
            ShapeSource::Literal(_) | ShapeSource::Like(_) => true,
        };
        if !steady {
            return None;
        }
        if loops.is_empty() {
            for &h in &cfg.rpo {
                if cfg.latches(h).next().is_some() {
                    loops.push((h, cfg.loop_blocks(h)));
                }
            }
        }
        // The innermost loop around the array's block.
        let (h, body) =
            loops.iter().filter(|(_, body)| body.contains(&b)).min_by_key(|(_, body)| body.len())?;
        let latches: Vec<Block> = cfg.latches(*h).collect();
        let [latch] = latches[..] else { return None };
        // The latch's reverse must run once per iteration: not when the latch is also
        // the header of an inner loop (or in one), whose reverse runs on every one of
        // its own iterations.
        if loops.iter().any(|(h2, b2)| h2 != h && b2.contains(&latch) && b2.len() < body.len()) {
            return None;
        }
        if !cfg.dominates(b, latch) || !blocks.iter().all(|&u| body.contains(&u) && cfg.dominates(b, u)) {
            return None;
        }
        // Every path from the array's block stays in the loop up to the latch.
        let mut seen: rustc_hash::FxHashSet<Block> = rustc_hash::FxHashSet::default();
        let mut work = vec![b];
        while let Some(x) = work.pop() {
            if x == latch || !seen.insert(x) {
                continue;
            }
            let term = &primal.blocks[x].term;
            if matches!(term, Terminator::Return(_)) {
                return None;
            }
            for c in term.successors() {
                if !body.contains(&c.block) || c.block == *h {
                    return None;
                }
                work.push(c.block);
            }
        }
        Some(Remade::AtLatch(latch))
    };
    let mut candidates: HashMap<Value, (ShapeSource, Remade)> = HashMap::default();
    for (r, b) in made {
        let Some(&s) = fw.shadows.get(r.index()).and_then(|s| s.first()) else { continue };
        let mcir_ir::ValueDef::Inst(si) = fw.e.func.values[s].def else { continue };
        if !matches!(fw.e.func.insts[si].op, Op::ZerosLike) {
            continue;
        }
        let Some(source) = shape_source(primal, fw, r, 8) else { continue };
        if let Some(at) = place(r, b, &source) {
            candidates.insert(s, (source, at));
        }
    }
    if candidates.is_empty() {
        return candidates;
    }
    let f = &fw.e.func;
    let mut used: rustc_hash::FxHashSet<Value> = rustc_hash::FxHashSet::default();
    for data in f.blocks.values() {
        for &i in &data.insts {
            used.extend(f.insts[i].args.iter().copied().filter(|a| candidates.contains_key(a)));
        }
        used.extend(data.term.uses().into_iter().filter(|a| candidates.contains_key(a)));
    }
    candidates.into_iter().filter(|(s, _)| !used.contains(s)).collect()
}

fn register_held_arrays(primal: &Function) -> rustc_hash::FxHashSet<Value> {
    let is_map = |op: &Op| matches!(op, Op::MapFBinary(_) | Op::MapFUnary(_) | Op::MapFPowI);
    let mut candidates: HashMap<Value, (Block, usize)> = HashMap::default();
    for (b, data) in primal.blocks.iter() {
        for (pos, &i) in data.insts.iter().enumerate() {
            let d = &primal.insts[i];
            if let (true, Some(r)) = (is_map(&d.op), d.result) {
                candidates.insert(r, (b, pos));
            }
        }
    }
    let mut out: rustc_hash::FxHashSet<Value> = candidates.keys().copied().collect();
    for (b, data) in primal.blocks.iter() {
        for (pos, &i) in data.insts.iter().enumerate() {
            let d = &primal.insts[i];
            let consumes = is_map(&d.op) || matches!(d.op, Op::Sum | Op::Dot);
            for a in &d.args {
                if let Some(&(db, dpos)) = candidates.get(a) {
                    if !consumes || db != b || dpos >= pos {
                        out.remove(a);
                    }
                }
            }
        }
        for a in data.term.uses() {
            out.remove(&a);
        }
    }
    out
}

/// How many blocks back, each entered by one edge, a load is looked for to be loaded again
/// in a reverse pass rather than taped.
const MAX_RELOAD_CHAIN: usize = 8;

/// How deep a chain of cheap computations is recomputed in a reverse pass.
const REMAT_DEPTH: u32 = 12;

fn adjoint_name(name: &Option<String>) -> Option<String> {
    Some(match name {
        Some(n) => format!("{n}_bar"),
        None => "bar".to_string(),
    })
}

/// The signature of a reverse pass: the tape and the result's rdata leaves in; the
/// parameters' rdata leaves out, as a tuple (nothing when no parameter has rdata).
pub(crate) fn reverse_signature(
    types: &mut TypeTable,
    primal: &Function,
    tape_ty: TypeId,
) -> (Vec<(Option<String>, TypeId)>, Option<TypeId>) {
    let mut params = vec![(Some("tape".to_string()), tape_ty)];
    if let Some(r) = primal.ret {
        for _ in rdata_leaves(types, r) {
            params.push((Some("result_bar".to_string()), TypeTable::F64));
        }
    }
    let n: usize = primal.params.iter().map(|&t| rdata_leaves(types, t).len()).sum();
    let ret = if n == 0 { None } else { Some(types.intern(Type::Tuple(vec![TypeTable::F64; n]))) };
    (params, ret)
}

impl<'a> Reverse<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rule: &RuleIds,
        primal: &'a Function,
        fw: &'a Forward,
        types: &'a mut TypeTable,
        ids: &'a [RuleIds],
        active: Vec<bool>,
        varied: Vec<bool>,
        live_out: &[Vec<Value>],
        corrupt: Option<String>,
        counters: Vec<crate::analysis::LoopCounter>,
    ) -> Reverse<'a> {
        let (params, ret) = reverse_signature(types, primal, rule.tape_ty);
        let read_anyway = read_by_products(primal, &active);
        let name = fw.e.func.name.replacen("$fwd", "$rev", 1);
        let mut func = Function::new(&name, &params, ret);
        func.span = primal.span;
        let tape = func.param_values()[0];
        let entry = func.entry();
        let mut e = Emit::new(func);
        // Adjoint parameters of each reverse block: active values live at the end of the
        // primal block or passed by its terminator, one per rdata leaf.
        let mut adj_in = Vec::new();
        for (b, data) in primal.blocks.iter() {
            let mut vals: Vec<Value> = live_out[b.index()].clone();
            vals.extend(data.term.uses());
            vals.sort();
            vals.dedup();
            let mut list = Vec::new();
            for v in vals {
                if active.get(v.index()).copied().unwrap_or(false) {
                    for k in 0..rdata_leaves(types, primal.value_type(v)).len() {
                        list.push((v, k as u32));
                    }
                }
            }
            adj_in.push(list);
        }
        let mut rblock = vec![entry; primal.blocks.len()];
        for (b, _) in primal.blocks.iter().rev() {
            let rb = e.func.add_block();
            for &(v, _) in &adj_in[b.index()] {
                e.func.add_block_param(rb, TypeTable::F64, adjoint_name(&primal.values[v].name));
            }
            // The counters of the loops the block is in.
            for c in counters.iter().filter(|c| c.region[b.index()]) {
                let ty = if c.negated { TypeTable::F64 } else { TypeTable::I64 };
                e.func.add_block_param(rb, ty, primal.values[c.param].name.clone());
            }
            rblock[b.index()] = rb;
        }
        let flow = mcir_ir::cfg::ControlFlow::compute(primal);
        let loop_depth = flow.loop_depths();
        Reverse {
            made_in_reverse: shadows_made_in_reverse(primal, fw, &flow, &loop_depth),
            fresh_in_loops: fresh_in_loops(primal, &loop_depth),
            e,
            fw,
            primal,
            types,
            ids,
            active,
            varied,
            corrupt,
            corrupting: false,
            tape,
            tape_sid: rule.tape_sid,
            fw_inst_block: fw
                .e
                .func
                .blocks
                .iter()
                .flat_map(|(b, d)| d.insts.iter().map(move |&i| (i, b)))
                .collect(),
            fw_block_to_primal: fw
                .block_map
                .iter()
                .enumerate()
                .map(|(pi, &fb)| (fb, Block::new(pi)))
                .collect(),
            pushed: Default::default(),
            popped_in: Default::default(),
            pop_in: Vec::new(),
            fw_entry_values: {
                let f = &fw.e.func;
                let entry = &f.blocks[f.entry()];
                let mut set: rustc_hash::FxHashSet<Value> = entry.params.iter().copied().collect();
                set.extend(entry.insts.iter().filter_map(|&i| f.insts[i].result));
                set
            },
            slots: Vec::new(),
            slot_of: HashMap::default(),
            read_slot_of: HashMap::default(),
            loop_depth,
            path_slot: None,
            own_path_slots: HashMap::default(),
            pushes: Vec::new(),
            rblock,
            adj_in,
            cur: primal.entry(),
            cur_rblock: entry,
            pop_pos: 0,
            popped: HashMap::default(),
            zero: None,
            adj: HashMap::default(),
            cur_pos: 0,
            last_write_before_current: None,
            inst_pos: Vec::new(),
            sole_pred: Vec::new(),
            writes_in: Vec::new(),
            reloaded: HashMap::default(),
            read_anyway,
            never_written: never_written_arrays(primal),
            counted: Vec::new(),
            counter_params: HashMap::default(),
            fw_to_primal: fw
                .vmap
                .iter()
                .enumerate()
                .filter_map(|(pi, fv)| fv.map(|fv| (fv, Value::new(pi))))
                .collect(),
            counter_slots: vec![None; counters.len()],
            replayed: Default::default(),
            path_pops: Vec::new(),
            flow,
            counters,
            held: register_held_arrays(primal),
            held_adj: HashMap::default(),
            remade_at_latch: HashMap::default(),
        }
    }

    fn err(&self, msg: String) -> AdError {
        AdError::internal(&self.primal.name, msg)
    }

    // ---- the tape ----

    fn new_slot(&mut self, fwd: Option<Value>, ty: TypeId, name: String, direct: bool) -> usize {
        let k = self.slots.len();
        let stack_ty = if direct { ty } else { self.types.intern(Type::Stack(ty)) };
        let entry = self.e.func.entry();
        let field_name = format!("{name}_{k}");
        self.types.struct_def_mut(self.tape_sid).fields.push((field_name.clone(), stack_ty));
        let get = Op::StructGet(self.tape_sid, k as u32);
        let s = self.e.func.push_inst(entry, get, vec![self.tape], Some(stack_ty), self.primal.span);
        let s = s.unwrap_or(self.tape);
        self.e.func.values[s].name = Some(if direct { name } else { format!("{name}_stack") });
        self.slots.push(Slot { fwd, ty, name: field_name, rev_stack: s, direct });
        k
    }

    /// The tape slot of forward value `fv`, made on first use (`direct`: the tape holds
    /// the value itself, not a stack of it).
    fn slot_for(&mut self, fv: Value, direct: bool) -> usize {
        if let Some(&s) = self.slot_of.get(&fv) {
            return s;
        }
        let ty = self.fw.e.ty(fv);
        let name = self.fw.e.func.values[fv].name.clone().unwrap_or_else(|| "v".to_string());
        let s = self.new_slot(Some(fv), ty, name, direct);
        self.slot_of.insert(fv, s);
        s
    }

    /// A value of the forward pass, as the reverse block being built sees it: constants
    /// are rematerialised, anything else is popped from its tape buffer (once per block).
    fn get(&mut self, fv: Value) -> Value {
        if let mcir_ir::ValueDef::Inst(i) = self.fw.e.func.values[fv].def {
            let op = &self.fw.e.func.insts[i].op;
            if let Op::FConst(_) | Op::IConst(_) | Op::BConst(_) = op {
                let ty = self.fw.e.ty(fv);
                return self.e.val(op.clone(), vec![], ty);
            }
        }
        if let Some(&v) = self.popped.get(&fv) {
            return v;
        }
        if let Some(v) = self.recompute(fv, REMAT_DEPTH) {
            return v;
        }
        let ty = self.fw.e.ty(fv);
        let name = self.fw.e.func.values[fv].name.clone();
        let direct = self.fw_entry_values.contains(&fv);
        let def = self.fw_def_block(fv).unwrap_or(self.cur);
        if !direct && self.depth_of(self.cur) < self.depth_of(def) {
            // Read outside a loop that computes it (a sum's final value, say): pushed
            // once where it is read, instead of in every iteration of that loop.
            let key = (fv, self.cur);
            let slot = match self.read_slot_of.get(&key) {
                Some(&s) => s,
                None => {
                    let s =
                        self.new_slot(Some(fv), ty, name.clone().unwrap_or_else(|| "v".to_string()), false);
                    self.read_slot_of.insert(key, s);
                    s
                }
            };
            let stack = self.slots[slot].rev_stack;
            let v = self.insert_front(Op::StackPop, vec![stack], ty);
            self.e.func.values[v].name = name;
            self.popped.insert(fv, v);
            self.pushes.push((self.cur, fv, slot));
            return v;
        }
        let slot = self.slot_for(fv, direct);
        if direct {
            return self.slots[slot].rev_stack;
        }
        let stack = self.slots[slot].rev_stack;
        // A value computed in another block (an outer loop's index, say) is pushed once
        // where it is computed and popped in that block's reverse; here the top of its
        // stack is the instance this block saw, so it is read without popping.
        let v = if def == self.cur {
            self.popped_in.insert((self.cur, fv));
            self.insert_front(Op::StackPop, vec![stack], ty)
        } else {
            self.pop_in.push((def, fv, slot));
            self.insert_front(Op::StackPeek, vec![stack], ty)
        };
        self.e.func.values[v].name = name;
        self.popped.insert(fv, v);
        if self.pushed.insert((def, fv)) {
            self.pushes.push((def, fv, slot));
        }
        v
    }

    /// A cheap computation — integer arithmetic, comparisons, conversions, an array's
    /// extent, a field of an immutable struct — whose operands the reverse block has at hand (constants, values the tape
    /// holds once, loop counters, values already read in this block, or such
    /// computations themselves) is done again instead of being taped: index arithmetic
    /// such as `j * d + i` costs less to recompute than to push and pop.
    fn recompute(&mut self, fv: Value, depth: u32) -> Option<Value> {
        if depth == 0 {
            return None;
        }
        let mcir_ir::ValueDef::Inst(i) = self.fw.e.func.values[fv].def else { return None };
        let d = self.fw.e.func.insts[i].clone();
        let ty = self.fw.e.ty(fv);
        let cheap = match d.op {
            Op::IBinary(_)
            | Op::IUnary(_)
            | Op::ICmp(_)
            | Op::BCmp(_)
            | Op::Not
            | Op::IToF
            | Op::ArrayDim(_) => true,
            Op::StructGet(s, _) => !self.types.struct_def(s).mutable,
            Op::Select => ty == TypeTable::I64 || ty == TypeTable::BOOL,
            _ => false,
        };
        if !cheap {
            return None;
        }
        // An extent the record would hold once anyway is kept as itself rather than
        // through its array, unless the record holds the array already: a record that
        // holds an array keeps its memory alive until the reverse pass (a recursive
        // call's fresh argument, say, which the caller could otherwise give back).
        if matches!(d.op, Op::ArrayDim(_))
            && self.fw_entry_values.contains(&fv)
            && !self.slot_of.contains_key(&d.args[0])
        {
            return None;
        }
        let mut args = Vec::with_capacity(d.args.len());
        for &a in &d.args {
            args.push(self.at_hand(a, depth - 1)?);
        }
        let v = self.e.val(d.op.clone(), args, ty);
        self.e.func.values[v].name = self.fw.e.func.values[fv].name.clone();
        self.popped.insert(fv, v);
        Some(v)
    }

    /// A forward value the reverse block can read without taping it anew, if there is one.
    fn at_hand(&mut self, fv: Value, depth: u32) -> Option<Value> {
        if let mcir_ir::ValueDef::Inst(i) = self.fw.e.func.values[fv].def {
            let op = &self.fw.e.func.insts[i].op;
            if let Op::FConst(_) | Op::IConst(_) | Op::BConst(_) = op {
                let ty = self.fw.e.ty(fv);
                return Some(self.e.val(op.clone(), vec![], ty));
            }
        }
        if let Some(&v) = self.popped.get(&fv) {
            return Some(v);
        }
        if let Some(p) = self.fw_to_primal.get(&fv) {
            if let Some(&v) = self.counter_params.get(p) {
                return Some(v);
            }
        }
        if self.fw_entry_values.contains(&fv) {
            return Some(self.get(fv));
        }
        if let Some(v) = self.recompute(fv, depth) {
            return Some(v);
        }
        // A value of an enclosing loop's iteration (`col[j]` in `for r in .. { col[j] + r }`)
        // is taped once per iteration of that loop and read here without popping, so
        // that what is computed from it is recomputed instead of taped per iteration.
        let def = self.fw_def_block(fv)?;
        (self.depth_of(def) < self.depth_of(self.cur)).then(|| self.get(fv))
    }

    /// The primal block whose forward block defines `fv`.
    fn depth_of(&self, b: Block) -> u32 {
        self.loop_depth.get(b.index()).copied().unwrap_or(0)
    }

    fn fw_def_block(&self, fv: Value) -> Option<Block> {
        let fb = match self.fw.e.func.values[fv].def {
            mcir_ir::ValueDef::Param(b, _) => b,
            mcir_ir::ValueDef::Inst(i) => *self.fw_inst_block.get(&i)?,
        };
        self.fw_block_to_primal.get(&fb).copied()
    }

    /// Pops, in the reverse of their defining blocks, the values other blocks only read.
    fn finish_pops(&mut self) {
        let pending = std::mem::take(&mut self.pop_in);
        for (def, fv, slot) in pending {
            if !self.popped_in.insert((def, fv)) {
                continue;
            }
            let rb = self.rblock[def.index()];
            let stack = self.slots[slot].rev_stack;
            let ty = self.slots[slot].ty;
            self.e.func.push_inst(rb, Op::StackPop, vec![stack], Some(ty), self.primal.span);
            if let Some(inst) = self.e.func.blocks[rb].insts.pop() {
                self.e.func.blocks[rb].insts.insert(0, inst);
            }
        }
    }

    fn insert_front(&mut self, op: Op, args: Vec<Value>, ty: TypeId) -> Value {
        let b = self.cur_rblock;
        let v = self.e.func.push_inst(b, op, args, Some(ty), self.e.span).unwrap_or(self.tape);
        if let Some(inst) = self.e.func.blocks[b].insts.pop() {
            self.e.func.blocks[b].insts.insert(self.pop_pos, inst);
            self.pop_pos += 1;
        }
        v
    }

    fn fwdv(&mut self, primal_v: Value) -> Result<Value, AdError> {
        if let Some(&v) = self.counter_params.get(&primal_v) {
            return Ok(v);
        }
        if let Some(v) = self.reload(primal_v)? {
            return Ok(v);
        }
        if let Some(v) = self.recompute_arithmetic(primal_v)? {
            return Ok(v);
        }
        if let Some(v) = self.refill(primal_v)? {
            return Ok(v);
        }
        let fv = self.fw.fwd(primal_v)?;
        Ok(self.get(fv))
    }

    /// An array a loop's iteration fills with one value (`fill(v, m)`), of a type whose
    /// elements nothing writes, is filled again in the reverse block that reads it, from
    /// the value and extents, instead of being kept on the tape: the tape keeps a few
    /// scalars per iteration rather than the array, which the loop can then give back.
    fn refill(&mut self, primal_v: Value) -> Result<Option<Value>, AdError> {
        let mcir_ir::ValueDef::Inst(i) = self.primal.values[primal_v].def else { return Ok(None) };
        if self.primal.insts[i].op != Op::ArrayFill
            || !self.fresh_in_loops.contains(&primal_v)
            || !self.never_written.contains(&self.primal.value_type(primal_v))
        {
            return Ok(None);
        }
        let fv = self.fw.fwd(primal_v)?;
        if let Some(&v) = self.popped.get(&fv) {
            return Ok(Some(v));
        }
        if self.slot_of.contains_key(&fv) {
            return Ok(None);
        }
        let args = self.primal.insts[i].args.clone();
        let mut ops = Vec::with_capacity(args.len());
        for a in args {
            ops.push(self.fwdv(a)?);
        }
        let ty = self.primal.value_type(primal_v);
        let v = self.e.val(Op::ArrayFill, ops, ty);
        self.e.func.values[v].name = self.fw.e.func.values[fv].name.clone();
        self.popped.insert(fv, v);
        Ok(Some(v))
    }

    /// A sum, difference, product or negation of elements loaded earlier in the block
    /// being reversed (or of values the reverse pass reads anyway, of constants, loop counters, or such computations themselves) is
    /// computed again from reloaded elements instead of being taped: `x[i, j] - mu[c, j]`
    /// costs two loads and a subtraction, and an index `col[j] + r` a load and an
    /// addition, where taping either costs a store, a load and the tape's memory traffic.
    /// Integer operations were checked for overflow when the forward pass did them.
    fn recompute_arithmetic(&mut self, primal_v: Value) -> Result<Option<Value>, AdError> {
        self.recompute_arithmetic_within(primal_v, REMAT_DEPTH)
    }

    fn recompute_arithmetic_within(&mut self, primal_v: Value, depth: u32) -> Result<Option<Value>, AdError> {
        if depth == 0 {
            return Ok(None);
        }
        let mcir_ir::ValueDef::Inst(inst) = self.primal.values[primal_v].def else { return Ok(None) };
        let d = &self.primal.insts[inst];
        let (op, ty) = match d.op {
            Op::FBinary(FBinOp::Add | FBinOp::Sub | FBinOp::Mul) | Op::FUnary(FUnOp::Neg) => {
                (d.op.clone(), TypeTable::F64)
            }
            Op::IBinary(IBinOp::Add | IBinOp::Sub | IBinOp::Mul) => (d.op.clone(), TypeTable::I64),
            _ => return Ok(None),
        };
        let args = d.args.clone();
        let Some(pos) = self.position_in_current_block(inst) else {
            return Ok(None);
        };
        if pos >= self.cur_pos {
            return Ok(None);
        }
        if let Some(&v) = self.reloaded.get(&primal_v) {
            return Ok(Some(v));
        }
        let mut ops = Vec::with_capacity(2);
        for a in args {
            let v = match self.primal.values[a].def {
                mcir_ir::ValueDef::Inst(c)
                    if matches!(self.primal.insts[c].op, Op::FConst(_) | Op::IConst(_)) =>
                {
                    let cty = self.primal.value_type(a);
                    self.e.val(self.primal.insts[c].op.clone(), vec![], cty)
                }
                _ => {
                    if let Some(&v) = self.counter_params.get(&a) {
                        v
                    } else if let Some(v) = self.reload(a)? {
                        v
                    } else if let Some(v) = self.recompute_arithmetic_within(a, depth - 1)? {
                        v
                    } else if depth + 1 >= REMAT_DEPTH
                        && self.depth_of(self.cur) > 0
                        && self.read_anyway.contains(&a)
                    {
                        // In a loop, where taping costs memory in every iteration, and
                        // within two operations of the value asked for: outside loops a
                        // value is one field of a record, and deeper chains would redo a
                        // whole computation (an RK4 step) that a few words keep.
                        let fv = self.fw.fwd(a)?;
                        self.get(fv)
                    } else {
                        return Ok(None);
                    }
                }
            };
            ops.push(v);
        }
        let v = self.e.val(op, ops, ty);
        self.e.func.values[v].name = self.fw.e.func.values[self.fw.fwd(primal_v)?].name.clone();
        self.reloaded.insert(primal_v, v);
        Ok(Some(v))
    }

    /// A value loaded from an array earlier in the block being reversed is loaded again
    /// instead of being kept on the tape, when nothing may have written memory between
    /// the load and the instruction whose adjoint needs it: by then the reverse pass has
    /// undone everything after that instruction, so memory is as the load saw it. So is
    /// a value loaded anywhere from an array of a type that the function never writes
    /// (the data of an objective, its index arrays): its elements never change.
    fn reload(&mut self, primal_v: Value) -> Result<Option<Value>, AdError> {
        let mcir_ir::ValueDef::Inst(load) = self.primal.values[primal_v].def else { return Ok(None) };
        if !matches!(self.primal.insts[load].op, Op::Load | Op::TrustedLoad) {
            return Ok(None);
        }
        let unchanged_since = match self.position_in_current_block(load) {
            Some(pos) => pos < self.cur_pos && self.last_write_before_current.is_none_or(|w| w <= pos),
            None => self.unwritten_since_earlier_block(load),
        };
        let array_ty = self.primal.value_type(self.primal.insts[load].args[0]);
        if !unchanged_since && !self.never_written.contains(&array_ty) {
            return Ok(None);
        }
        if let Some(&v) = self.reloaded.get(&primal_v) {
            return Ok(Some(v));
        }
        let args = self.primal.insts[load].args.clone();
        // An array each iteration of a loop makes anew is not taped for a reload alone:
        // it would stay allocated to the end of the call, where taping the element keeps
        // eight bytes and lets the iteration give the array back.
        if self.fresh_in_loops.contains(&args[0]) {
            let taped = self.fw.fwd(args[0]).is_ok_and(|fv| self.popped.contains_key(&fv));
            if !taped {
                return Ok(None);
            }
        }
        let mut ops = Vec::new();
        for a in args {
            ops.push(self.fwdv(a)?);
        }
        let ty = self.primal.value_type(primal_v);
        // The forward pass checked these indices on this very array.
        let v = self.e.val(Op::TrustedLoad, ops, ty);
        self.e.func.values[v].name = self.fw.e.func.values[self.fw.fwd(primal_v)?].name.clone();
        self.reloaded.insert(primal_v, v);
        Ok(Some(v))
    }

    fn shadow(&mut self, primal_v: Value) -> Result<Value, AdError> {
        let fv = self
            .fw
            .shadows
            .get(primal_v.index())
            .and_then(|s| s.first().copied())
            .ok_or_else(|| self.err(format!("{primal_v} has no shadow")))?;
        if let Some((source, at)) = self.made_in_reverse.get(&fv).cloned() {
            let v = match at {
                Remade::InBlock(block) => {
                    if let Some(&v) = self.popped.get(&fv) {
                        return Ok(v);
                    }
                    if block != self.cur {
                        return Err(self.err(format!("the shadow of {primal_v} is read outside its block")));
                    }
                    let v = self.zeroed(&source, fv, false)?;
                    self.popped.insert(fv, v);
                    v
                }
                Remade::AtLatch(latch) => {
                    if let Some(&v) = self.remade_at_latch.get(&fv) {
                        return Ok(v);
                    }
                    // Made in the latch's reverse block, before everything there, from
                    // constants and values the tape holds once per call.
                    let here = self.e.block;
                    let rb = self.rblock[latch.index()];
                    self.e.block = rb;
                    let before = self.e.func.blocks[rb].insts.len();
                    let v = self.zeroed(&source, fv, true);
                    self.e.block = here;
                    let v = v?;
                    let made: Vec<Inst> = self.e.func.blocks[rb].insts.drain(before..).collect();
                    self.e.func.blocks[rb].insts.splice(0..0, made);
                    self.remade_at_latch.insert(fv, v);
                    v
                }
            };
            self.e.func.values[v].name = self.fw.e.func.values[fv].name.clone();
            return Ok(v);
        }
        Ok(self.get(fv))
    }

    /// A zeroed array of primal array `like`'s shape. When the tape holds no copy of
    /// `like` yet and its shape can be traced to a `fill`, a literal or an array the tape
    /// holds once per call (`shape_source`), the array is made from that shape: the tape
    /// then keeps the extents, not the array, which a loop can give back with the rest
    /// of its iteration (a sum's adjoint spread over `fill(x, m) + 1.0`, say).
    fn zeros_shaped_like(&mut self, like: Value) -> Result<Value, AdError> {
        let fv = self.fw.fwd(like)?;
        let held = self.popped.contains_key(&fv)
            || self.slot_of.contains_key(&fv)
            || self.fw_entry_values.contains(&fv);
        if !held {
            if let Some(source) = shape_source(self.primal, self.fw, like, REMAT_DEPTH) {
                return self.zeroed(&source, fv, false);
            }
        }
        let like = self.fwdv(like)?;
        let ty = self.e.ty(like);
        Ok(self.e.val(Op::ZerosLike, vec![like], ty))
    }

    /// A zeroed array of the shape `source` gives, for the forward shadow `fv`. With
    /// `per_call`, every value it reads is a constant or one the tape holds once per call
    /// (see [`shadows_made_in_reverse`]), read without the block's own tape reads.
    fn zeroed(&mut self, source: &ShapeSource, fv: Value, per_call: bool) -> Result<Value, AdError> {
        let ty = self.fw.e.ty(fv);
        let read = |this: &mut Self, x: Value| -> Result<Value, AdError> {
            if !per_call {
                return this.fwdv(x);
            }
            let f = this.fw.fwd(x)?;
            if let mcir_ir::ValueDef::Inst(i) = this.fw.e.func.values[f].def {
                if let op @ (Op::IConst(_) | Op::FConst(_)) = &this.fw.e.func.insts[i].op {
                    let ty = this.fw.e.ty(f);
                    return Ok(this.e.val(op.clone(), vec![], ty));
                }
            }
            if !this.fw_entry_values.contains(&f) {
                return Err(this.err(format!("{x} is not held once per call")));
            }
            // The tape's field for it, read in the reverse pass's entry block (never a
            // value of the block being built, which the latch's reverse may precede).
            let slot = this.slot_for(f, true);
            Ok(this.slots[slot].rev_stack)
        };
        let v = match source {
            ShapeSource::Extents(fill) => {
                let mut args = vec![self.e.fconst(0.0)];
                let primal = self.primal;
                for &x in &primal.insts[*fill].args[1..] {
                    args.push(read(self, x)?);
                }
                self.e.val(Op::ArrayFill, args, ty)
            }
            ShapeSource::Literal(dims) => {
                let mut args = vec![self.e.fconst(0.0)];
                for &d in dims {
                    args.push(self.e.iconst(i64::from(d)));
                }
                self.e.val(Op::ArrayFill, args, ty)
            }
            ShapeSource::Like(a) => {
                let like = read(self, *a)?;
                self.e.val(Op::ZerosLike, vec![like], ty)
            }
        };
        Ok(v)
    }

    fn saved(&mut self, inst: Inst, k: usize) -> Result<Value, AdError> {
        let fv = self
            .fw
            .saved
            .get(&inst)
            .and_then(|s| s.get(k).copied())
            .ok_or_else(|| self.err(format!("{inst} kept nothing")))?;
        Ok(self.get(fv))
    }

    /// The stack the path into a join (the block and where its edges come from) is
    /// popped from, or (`None`) the path of the return taken. A join outside loops that
    /// no edge reaches from inside one, and the return, have a stack of their own; joins
    /// in loops share one.
    fn path_stack(&mut self, join_from: Option<(Block, &[Block])>) -> Value {
        let own = match join_from {
            None => true,
            Some((b, from)) => self.depth_of(b) == 0 && from.iter().all(|&f| self.depth_of(f) == 0),
        };
        let join = join_from.map(|(b, _)| b);
        if own {
            if let Some(&s) = self.own_path_slots.get(&join) {
                return self.slots[s].rev_stack;
            }
            let name = if join.is_some() { "path" } else { "ret" };
            let s = self.new_slot(None, TypeTable::I64, name.to_string(), false);
            self.own_path_slots.insert(join, s);
            return self.slots[s].rev_stack;
        }
        let slot = match self.path_slot {
            Some(s) => s,
            None => {
                let s = self.new_slot(None, TypeTable::I64, "path".to_string(), false);
                self.path_slot = Some(s);
                s
            }
        };
        self.slots[slot].rev_stack
    }

    /// The slot of the path into `join` (`None`: of the return taken) in the forward
    /// pass's pushes.
    pub fn path_slot(&self, join: Option<Block>) -> Option<usize> {
        self.own_path_slots.get(&join).copied().or(self.path_slot)
    }

    // ---- adjoints ----

    fn zero(&mut self) -> Value {
        match self.zero {
            Some(z) => z,
            None => {
                let z = self.e.fconst(0.0);
                self.zero = Some(z);
                z
            }
        }
    }

    fn is_active(&self, v: Value) -> bool {
        self.active.get(v.index()).copied().unwrap_or(false)
    }

    /// Whether an address may hold values that depend on the varying arguments: one
    /// that does not needs no shadow work, since nothing it holds passes a derivative back.
    fn varies(&self, v: Value) -> bool {
        self.varied.get(v.index()).copied().unwrap_or(true)
    }

    fn take(&mut self, v: Value) -> Vec<Option<Value>> {
        let n = rdata_leaves(self.types, self.primal.value_type(v)).len();
        (0..n).map(|k| self.adj.remove(&(v, k as u32))).collect()
    }

    /// Scales a contribution when this op's rule is corrupted on purpose.
    fn corrupt(&mut self, x: Value) -> Value {
        if self.corrupting {
            let c = self.e.fconst(1.5);
            self.e.mul(x, c)
        } else {
            x
        }
    }

    /// Adds `x` to the adjoint of leaf `k` of `v`.
    fn contribute(&mut self, v: Value, k: u32, x: Value) {
        if !self.is_active(v) {
            return;
        }
        let x = self.corrupt(x);
        let new = match self.adj.get(&(v, k)) {
            Some(&old) => self.e.add(old, x),
            None => x,
        };
        let pname = self.primal.values[v].name.clone().or_else(|| match self.primal.values[v].def {
            mcir_ir::ValueDef::Inst(i) => {
                Some(rule_name(self.types, &self.primal.insts[i].op).replace('.', "_"))
            }
            mcir_ir::ValueDef::Param(..) => None,
        });
        let name = adjoint_name(&pname);
        if self.e.func.values[new].name.is_none() {
            self.e.func.values[new].name = name;
        }
        self.adj.insert((v, k), new);
    }

    /// `shadow += t` for an array `t` of the shadow's shape, or a scalar added to each element.
    fn acc_array(&mut self, shadow: Value, t: Value) {
        if self.corrupting {
            let t = self.corrupt(t);
            self.e.eff(Op::AddInto, vec![shadow, t]);
        } else {
            self.e.eff(Op::AddInto, vec![shadow, t]);
        }
    }

    /// An array adjoint scaled by 1.5 when this op's rule is corrupted on purpose.
    fn corrupt_array(&mut self, g: Value) -> Value {
        if self.corrupting {
            let c = self.e.fconst(1.5);
            let ty = self.e.ty(g);
            self.e.val(Op::MapFBinary(FBinOp::Mul), vec![g, c], ty)
        } else {
            g
        }
    }

    fn acc_axpy(&mut self, shadow: Value, alpha: Value, x: Value) {
        let alpha = self.corrupt(alpha);
        self.e.eff(Op::Axpy, vec![shadow, alpha, x]);
    }

    /// `shadow[idx] += g`, at indices the forward pass checked on the primal array (a
    /// shadow has its array's shape).
    fn acc_element(&mut self, shadow: Value, idx: Vec<Value>, g: Value) {
        let g = self.corrupt(g);
        let old = self.e.val(Op::TrustedLoad, [vec![shadow], idx.clone()].concat(), TypeTable::F64);
        let new = self.e.add(old, g);
        self.e.eff(Op::TrustedStore, [vec![shadow], idx, vec![new]].concat());
    }

    /// Sends an array-shaped contribution `t` to an operand of an elementwise op: into its
    /// shadow if it is an array, summed into its adjoint if it is a scalar.
    fn send_to_operand(&mut self, x: Value, t: Value) -> Result<(), AdError> {
        if self.primal.value_type(x) == TypeTable::F64 {
            if self.is_active(x) {
                let s = self.e.total(t);
                self.contribute(x, 0, s);
            }
        } else if self.varies(x) {
            self.acc_operand(x, t)?;
        }
        Ok(())
    }

    /// Adds `t` (an array of `x`'s shape, or a scalar for every element) to the adjoint
    /// of array `x`.
    fn acc_operand(&mut self, x: Value, t: Value) -> Result<(), AdError> {
        if !self.held.contains(&x) {
            let sx = self.shadow(x)?;
            self.acc_array(sx, t);
            return Ok(());
        }
        let t = if self.corrupting { self.corrupt(t) } else { t };
        let scalar = self.e.ty(t) == TypeTable::F64;
        let new = match self.held_adj.get(&x).copied() {
            None if scalar => HeldAdjoint::Uniform(t),
            None => HeldAdjoint::Array(t),
            Some(HeldAdjoint::Uniform(s)) if scalar => HeldAdjoint::Uniform(self.e.add(s, t)),
            Some(HeldAdjoint::Uniform(s) | HeldAdjoint::Array(s)) => HeldAdjoint::Array(self.e.add(s, t)),
        };
        self.held_adj.insert(x, new);
        Ok(())
    }

    /// The adjoint of the array a map `inst` made, as its rule reads it: the shadow, or
    /// for an array held in values, its adjoint (`None` when nothing was sent back). A
    /// uniform adjoint is passed on as a scalar when every `f64` operand of the map is an
    /// array (each operand's share is then elementwise); otherwise it is made an array.
    fn map_adjoint(&mut self, inst: Inst, r: Value) -> Result<Option<Value>, AdError> {
        if !self.held.contains(&r) {
            return Ok(Some(self.shadow(r)?));
        }
        match self.held_adj.get(&r).copied() {
            None => Ok(None),
            Some(HeldAdjoint::Array(a)) => Ok(Some(a)),
            Some(HeldAdjoint::Uniform(s)) => {
                let args = self.primal.insts[inst].args.clone();
                let scalar_operand = args.iter().any(|&a| self.primal.value_type(a) == TypeTable::F64);
                let Some(&like) =
                    args.iter().find(|&&a| self.primal.value_type(a) == self.primal.value_type(r))
                else {
                    return Err(self.err(format!("the map making {r} has no array operand")));
                };
                if !scalar_operand {
                    return Ok(Some(s));
                }
                let z = self.zeros_shaped_like(like)?;
                self.e.eff(Op::AddInto, vec![z, s]);
                Ok(Some(z))
            }
        }
    }

    fn wants(&self, x: Value) -> bool {
        if self.primal.value_type(x) == TypeTable::F64 {
            self.is_active(x)
        } else {
            self.varies(x)
        }
    }

    // ---- blocks ----

    /// Builds the reverse of every primal block and the entry that dispatches on the
    /// block the forward pass returned from.
    pub fn build(&mut self) -> Result<(), AdError> {
        let primal = self.primal;
        let entry = self.e.func.entry();
        let dys: Vec<Value> = self.e.func.param_values()[1..].to_vec();
        // Entry: start at the return block the forward pass left from.
        self.cur_rblock = entry;
        self.e.block = entry;
        self.pop_pos = 0;
        let returns = self.fw.returns.clone();
        let targets: Vec<BlockCall> = returns
            .iter()
            .map(|&r| {
                let args = self.adj_in[r.index()].iter().map(|&(_, k)| dys[k as usize]).collect();
                BlockCall { block: self.rblock[r.index()], args }
            })
            .collect();
        if targets.len() > 1 {
            let stack = self.path_stack(None);
            let k = self.e.val(Op::StackPop, vec![stack], TypeTable::I64);
            self.e.name(k, Some("ret".to_string()));
            self.dispatch(k, targets)?;
        } else if let Some(t) = targets.into_iter().next() {
            self.e.func.set_terminator(entry, Terminator::Jump(t), primal.span);
        } else {
            // The function never returns (`while true` without a `break`), so neither does
            // its forward pass, and this pass never runs; it still returns what its
            // signature says: a zero for every parameter's rdata.
            self.zero = None;
            let mut outs = Vec::new();
            for &p in &primal.blocks[primal.entry()].params {
                for _ in 0..rdata_leaves(self.types, primal.value_type(p)).len() {
                    outs.push(self.zero());
                }
            }
            let ret = if self.e.func.ret.is_some() { Some(self.e.tuple(self.types, outs)) } else { None };
            self.e.func.set_terminator(entry, Terminator::Return(ret), primal.span);
        }
        Ok(())
    }

    /// Drops the path of every join whose reverse does the same whichever edge was
    /// taken: a branch of the reverse pass whose targets, past blocks that only pass
    /// their parameters on, are one block with the same arguments (the arms of a branch
    /// that computes nothing with a derivative) becomes a jump; a path pop nothing then
    /// reads is removed, and the forward pass marks no edge into its join.
    pub fn drop_pointless_paths(&mut self) {
        let blocks: Vec<Block> = self.e.func.blocks.keys().collect();
        let fold = |f: &mut Function| {
            let mut folded = false;
            for &b in &blocks {
                let Terminator::Branch { then_dest, else_dest, .. } = &f.blocks[b].term else { continue };
                let (t, e) =
                    (through_forwarding_blocks(f, then_dest), through_forwarding_blocks(f, else_dest));
                if t == e {
                    let span = f.blocks[b].term_span;
                    f.set_terminator(b, Terminator::Jump(t), span);
                    folded = true;
                }
            }
            folded
        };
        // Every path pop still decides a branch unless one was folded.
        if !fold(&mut self.e.func) || self.path_pops.is_empty() {
            return;
        }
        // Compares of path values now read by nothing go first, then the pops. A
        // dispatch among three targets or more is a chain of branches, each testing one
        // index: once the last is folded, its compare is dead, and the one before can
        // fold in turn.
        let mut cleaned = crate::dce::remove_dead_code(self.e.func.clone());
        while fold(&mut cleaned) {
            cleaned = crate::dce::remove_dead_code(cleaned);
        }
        let mut used = rustc_hash::FxHashSet::default();
        for (_, data) in cleaned.blocks.iter() {
            for &i in &data.insts {
                used.extend(cleaned.insts[i].args.iter().copied());
            }
            used.extend(data.term.uses());
        }
        let unread: rustc_hash::FxHashSet<Value> =
            self.path_pops.iter().filter(|(k, _)| !used.contains(k)).map(|&(k, _)| k).collect();
        if unread.is_empty() {
            return;
        }
        let mut f = cleaned;
        for b in blocks {
            let insts = std::mem::take(&mut f.blocks[b].insts);
            f.blocks[b].insts = insts
                .into_iter()
                .filter(|&i| f.insts[i].result.is_none_or(|r| !unread.contains(&r)))
                .collect();
        }
        self.e.func = f;
        for &(k, join) in &self.path_pops {
            if unread.contains(&k) {
                self.replayed.insert(join);
            }
        }
    }

    /// Ends the current block with a dispatch on `k`, which holds the index of the target
    /// to take among `targets`.
    fn dispatch(&mut self, k: Value, mut targets: Vec<BlockCall>) -> Result<(), AdError> {
        let span = self.e.span;
        let mut j = 0;
        while targets.len() > 1 {
            let t = targets.remove(0);
            let c = self.e.iconst(j);
            j += 1;
            let cond = self.e.val(Op::ICmp(CmpOp::Eq), vec![k, c], TypeTable::BOOL);
            let last = targets.len() == 1;
            let else_dest = if last {
                targets.remove(0)
            } else {
                let next = self.e.func.add_block();
                BlockCall { block: next, args: vec![] }
            };
            let next = else_dest.block;
            self.e.func.set_terminator(
                self.e.block,
                Terminator::Branch { cond, then_dest: t, else_dest },
                span,
            );
            if last {
                return Ok(());
            }
            self.e.block = next;
        }
        if let Some(t) = targets.pop() {
            self.e.func.set_terminator(self.e.block, Terminator::Jump(t), span);
        }
        Ok(())
    }

    /// The reverse of primal block `b`: its instructions backwards, then the way back to
    /// the block that jumped to it (or, for the entry block, the return of the parameters'
    /// rdata).
    fn block(&mut self, b: Block, edges: &[Edge]) -> Result<(), AdError> {
        let primal = self.primal;
        let rb = self.rblock[b.index()];
        self.cur = b;
        self.cur_rblock = rb;
        self.e.block = rb;
        self.pop_pos = 0;
        self.popped.clear();
        self.zero = None;
        self.adj.clear();
        let params = self.e.func.blocks[rb].params.clone();
        for (&key, &p) in self.adj_in[b.index()].iter().zip(&params) {
            self.adj.insert(key, p);
        }
        self.counter_params.clear();
        let n_adj = self.adj_in[b.index()].len();
        for (k, c) in (n_adj..).zip(self.counters.iter().filter(|c| c.region[b.index()])) {
            if let Some(&p) = params.get(k) {
                self.counter_params.insert(c.param, p);
            }
        }
        let data = &primal.blocks[b];
        self.reloaded.clear();
        // For each position, the last instruction before it that may write memory.
        let mut last_write_before = Vec::with_capacity(data.insts.len());
        let mut last = None;
        for (pos, &i) in data.insts.iter().enumerate() {
            last_write_before.push(last);
            if writes_memory(&primal.insts[i].op) {
                last = Some(pos);
            }
        }
        for (pos, &inst) in data.insts.iter().enumerate().rev() {
            self.cur_pos = pos;
            self.last_write_before_current = last_write_before[pos];
            let d = &primal.insts[inst];
            self.e.span = d.span;
            self.corrupting = match &self.corrupt {
                Some(name) => rule_name(self.types, &d.op) == *name,
                None => false,
            };
            self.reverse_inst(inst)?;
            self.corrupting = false;
        }
        self.e.span = data.term_span;
        if b == primal.entry() {
            let mut outs = Vec::new();
            for &p in &data.params {
                for k in 0..rdata_leaves(self.types, primal.value_type(p)).len() {
                    let v = match self.adj.get(&(p, k as u32)) {
                        Some(&v) => v,
                        None => self.zero(),
                    };
                    outs.push(v);
                }
            }
            let ret = if self.e.func.ret.is_some() { Some(self.e.tuple(self.types, outs)) } else { None };
            self.e.func.set_terminator(self.e.block, Terminator::Return(ret), data.term_span);
            return Ok(());
        }
        if edges.len() == 1 {
            let t = self.edge_code(b, edges[0])?;
            self.e.func.set_terminator(self.e.block, Terminator::Jump(t), data.term_span);
            return Ok(());
        }
        // A counted header was entered from outside exactly when its counter holds its
        // initial value: the counter moves one way only (its steps are checked for
        // overflow), so `<=` (or `>=`) says the same as `==` and, on the other branch,
        // tells range analysis the counter is past its start.
        let first = match self.counted.get(b.index()).copied().flatten() {
            Some(c) => {
                let p = self.fwdv(c.param)?;
                let p0 = self.fwdv(c.init)?;
                let cmp = if c.counts_up { CmpOp::Le } else { CmpOp::Ge };
                Some((self.e.val(Op::ICmp(cmp), vec![p, p0], TypeTable::BOOL), c.entry_edge))
            }
            None => None,
        };
        let replay = if first.is_none() { self.replay_region(b, edges) } else { None };
        let conditions = match &replay {
            Some(branches) => Some(self.replayed_conditions(branches)?),
            None => None,
        };
        let k = match first {
            Some(_) => None,
            None if conditions.is_some() => None,
            None => {
                let from: Vec<Block> = edges.iter().map(|e| e.from).collect();
                let stack = self.path_stack(Some((b, &from)));
                let k = self.e.val(Op::StackPop, vec![stack], TypeTable::I64);
                self.e.name(k, Some("from".to_string()));
                self.path_pops.push((k, b));
                Some(k)
            }
        };
        let mut targets = Vec::new();
        // Each edge's code is a block of its own, a sibling of the others: what one of
        // them computes again (a loop's trip count, say) is not at hand in the next, but
        // what was popped at the top of the block's reverse is.
        let popped_before: rustc_hash::FxHashSet<Value> = self.popped.keys().copied().collect();
        let reloaded_before = self.reloaded.clone();
        for &edge in edges {
            let eb = self.e.func.add_block();
            self.e.block = eb;
            self.zero = None;
            let t = self.edge_code(b, edge)?;
            self.e.func.set_terminator(eb, Terminator::Jump(t), data.term_span);
            targets.push(BlockCall { block: eb, args: vec![] });
            let at_top: rustc_hash::FxHashSet<Inst> = self.e.func.blocks[rb].insts.iter().copied().collect();
            let func = &self.e.func;
            self.popped.retain(|k, v| {
                popped_before.contains(k)
                    || matches!(func.values[*v].def, mcir_ir::ValueDef::Inst(i) if at_top.contains(&i))
            });
            self.reloaded.clone_from(&reloaded_before);
        }
        self.e.block = rb;
        if let (Some(conditions), Some(d)) = (conditions, self.flow.idom(b)) {
            let target_of: HashMap<(Block, usize), BlockCall> =
                edges.iter().zip(targets).map(|(e, t)| ((e.from, e.slot), t)).collect();
            self.replayed.insert(b);
            self.emit_replay(d, b, rb, &conditions, &target_of, data.term_span)?;
            return Ok(());
        }
        match (first, k) {
            (Some((cond, entry_edge)), _) if targets.len() == 2 => {
                let back = targets.remove(1 - entry_edge);
                let entry = targets.remove(0);
                let term = Terminator::Branch { cond, then_dest: entry, else_dest: back };
                self.e.func.set_terminator(rb, term, data.term_span);
                Ok(())
            }
            (_, Some(k)) => self.dispatch(k, targets),
            _ => Err(self.err("a counted loop header without two incoming edges".to_string())),
        }
    }

    /// The blocks from the immediate dominator of join `b` to `b`, when the edge the
    /// forward pass took into `b` follows from branch conditions that the reverse pass
    /// can evaluate again without the tape: the region from the dominator is acyclic,
    /// ends only in `b`, and each of its branches compares constants, loop counters or
    /// values the tape holds once (`c < j` when copying all but one column of a row).
    /// Then no path is taped for `b`: its reverse replays the decisions. Conditions are
    /// only comparisons of such values, which cannot fail, so evaluating those of a path
    /// not taken is harmless.
    fn replay_region(&self, b: Block, edges: &[Edge]) -> Option<Vec<Block>> {
        /// The most blocks between a join and its dominator that are replayed.
        const MAX_REPLAYED_BLOCKS: usize = 8;
        let d = self.flow.idom(b).filter(|&d| d != b)?;
        let mut region = Vec::new();
        let mut leaves = Vec::new();
        let mut todo = vec![d];
        while let Some(x) = todo.pop() {
            if region.contains(&x) || region.len() >= MAX_REPLAYED_BLOCKS || !self.flow.dominates(d, x) {
                return None;
            }
            region.push(x);
            let term = &self.primal.blocks[x].term;
            match term {
                Terminator::Return(_) => return None,
                Terminator::Branch { cond, .. } if !self.replayable_condition(*cond) => return None,
                _ => {}
            }
            for (slot, s) in term.successors().enumerate() {
                if s.block == b {
                    leaves.push((x, slot));
                } else if s.block == d {
                    return None;
                } else {
                    todo.push(s.block);
                }
            }
        }
        let incoming: Vec<(Block, usize)> = edges.iter().map(|e| (e.from, e.slot)).collect();
        let all = leaves.len() == incoming.len() && leaves.iter().all(|l| incoming.contains(l));
        all.then_some(region)
    }

    /// Whether `cond` compares values the reverse pass of the current block has without
    /// the tape's per-iteration records: constants, loop counters, entry values.
    fn replayable_condition(&self, cond: Value) -> bool {
        let Some(d) = self.primal.defining(cond) else { return false };
        matches!(d.op, Op::ICmp(_) | Op::FCmp(_)) && d.args.iter().all(|&a| self.replayable_operand(a))
    }

    fn replayable_operand(&self, a: Value) -> bool {
        if self.counter_params.contains_key(&a) {
            return true;
        }
        if let Some(d) = self.primal.defining(a) {
            if matches!(d.op, Op::IConst(_) | Op::FConst(_) | Op::BConst(_)) {
                return true;
            }
        }
        self.fw.vmap.get(a.index()).copied().flatten().is_some_and(|fv| self.fw_entry_values.contains(&fv))
    }

    /// The conditions of the branches of `region`, evaluated again in the current block.
    fn replayed_conditions(&mut self, region: &[Block]) -> Result<HashMap<Value, Value>, AdError> {
        let mut out = HashMap::default();
        for &x in region {
            if let Terminator::Branch { cond, .. } = self.primal.blocks[x].term {
                if out.contains_key(&cond) {
                    continue;
                }
                let Some(d) = self.primal.defining(cond).cloned() else { continue };
                let mut args = Vec::new();
                for a in d.args {
                    args.push(self.fwdv(a)?);
                }
                let v = self.e.val(d.op, args, TypeTable::BOOL);
                out.insert(cond, v);
            }
        }
        Ok(out)
    }

    /// Ends `into` with the decisions the forward pass took from `x` on its way to join
    /// `b`, each edge into `b` going to its reverse in `target_of`.
    fn emit_replay(
        &mut self,
        x: Block,
        b: Block,
        into: Block,
        conditions: &HashMap<Value, Value>,
        target_of: &HashMap<(Block, usize), BlockCall>,
        span: mcir_ir::Span,
    ) -> Result<(), AdError> {
        let term = self.primal.blocks[x].term.clone();
        let mut dests = Vec::new();
        for (slot, s) in term.successors().enumerate() {
            if s.block == b {
                let t = target_of.get(&(x, slot)).cloned();
                dests.push(t.ok_or_else(|| self.err(format!("no reverse for the edge {x}:{slot}")))?);
            } else if matches!(term, Terminator::Jump(_)) {
                return self.emit_replay(s.block, b, into, conditions, target_of, span);
            } else {
                let nb = self.e.func.add_block();
                self.emit_replay(s.block, b, nb, conditions, target_of, span)?;
                dests.push(BlockCall { block: nb, args: vec![] });
            }
        }
        let term = match (term, dests.len()) {
            (Terminator::Jump(_), 1) => Terminator::Jump(dests.remove(0)),
            (Terminator::Branch { cond, .. }, 2) => {
                let c = *conditions.get(&cond).ok_or_else(|| self.err(format!("{cond} was not replayed")))?;
                let else_dest = dests.remove(1);
                Terminator::Branch { cond: c, then_dest: dests.remove(0), else_dest }
            }
            _ => return Err(self.err(format!("{x} cannot be replayed"))),
        };
        self.e.func.set_terminator(into, term, span);
        Ok(())
    }

    /// Adjoints for the end of the block an edge leaves: what flows through `b` unchanged,
    /// plus the adjoints of `b`'s parameters sent to the jump's arguments.
    fn edge_code(&mut self, b: Block, edge: Edge) -> Result<BlockCall, AdError> {
        let primal = self.primal;
        let call = primal.blocks[edge.from]
            .term
            .successors()
            .nth(edge.slot)
            .cloned()
            .ok_or_else(|| self.err(format!("edge {edge:?} does not exist")))?;
        let params = &primal.blocks[b].params;
        let wanted = self.adj_in[edge.from.index()].clone();
        let mut args = Vec::new();
        for (v, k) in wanted {
            // A parameter of `b` is a new instance: its adjoint goes to the argument only.
            let mut acc = if params.contains(&v) { None } else { self.adj.get(&(v, k)).copied() };
            for (i, &a) in call.args.iter().enumerate() {
                if a == v {
                    if let Some(&g) = self.adj.get(&(params[i], k)) {
                        acc = Some(match acc {
                            Some(x) => self.e.add(x, g),
                            None => g,
                        });
                    }
                }
            }
            args.push(match acc {
                Some(x) => x,
                None => self.zero(),
            });
        }
        // Counters of the loops the source block is in: the same value inside one
        // iteration, one step back along the back edge, and read from the tape when the
        // edge left the loop.
        for k in 0..self.counters.len() {
            let c = &self.counters[k];
            if !c.region[edge.from.index()] {
                continue;
            }
            let (param, step, header, latch, negated) = (c.param, c.step, c.header, c.latch, c.negated);
            let value = if c.region[b.index()] {
                let here = *self
                    .counter_params
                    .get(&param)
                    .ok_or_else(|| self.err("a counter is missing".into()))?;
                if b == header && edge.from == latch && negated {
                    self.e.neg(here)
                } else if b == header && edge.from == latch {
                    let s = self.e.iconst(step);
                    self.e.val(Op::IBinary(mcir_ir::IBinOp::Sub), vec![here, s], TypeTable::I64)
                } else {
                    here
                }
            } else if let Some(exit) = self.computed_exit(k) {
                exit
            } else {
                let slot = match self.counter_slots[k] {
                    Some(s) => s,
                    None => {
                        let name = self.primal.values[param].name.clone().unwrap_or_else(|| "counter".into());
                        let ty = if negated { TypeTable::F64 } else { TypeTable::I64 };
                        let s = self.new_slot(None, ty, format!("{name}_exit"), false);
                        self.counter_slots[k] = Some(s);
                        s
                    }
                };
                let stack = self.slots[slot].rev_stack;
                let ty = self.slots[slot].ty;
                self.e.val(Op::StackPop, vec![stack], ty)
            };
            args.push(value);
        }
        Ok(BlockCall { block: self.rblock[edge.from.index()], args })
    }

    /// The value loop `k`'s counter left it with, computed as `max(init, bound)` when the
    /// loop is a range whose ends the reverse pass has without reading the tape.
    fn computed_exit(&mut self, k: usize) -> Option<Value> {
        let (init, bound) = self.counters[k].range?;
        if !self.free_to_read(init) || !self.free_to_read(bound) {
            return None;
        }
        let init = self.read_free(init)?;
        let bound = self.read_free(bound)?;
        let ran = self.e.val(Op::ICmp(mcir_ir::CmpOp::Lt), vec![init, bound], TypeTable::BOOL);
        Some(self.e.val(Op::Select, vec![ran, bound, init], TypeTable::I64))
    }

    /// Whether the reverse pass has primal value `v` without a tape entry per loop
    /// iteration: a constant, a value the tape holds once, an enclosing loop's counter,
    /// the size of an array that is one of these, or a sum, difference or product of
    /// such values (`j + 1`, the start of `for r in j + 1..d`), which it recomputes.
    fn free_to_read(&self, v: Value) -> bool {
        self.free_to_read_within(v, 3)
    }

    fn free_to_read_within(&self, v: Value, depth: u32) -> bool {
        if self.counter_params.contains_key(&v) {
            return true;
        }
        let Ok(fv) = self.fw.fwd(v) else { return false };
        if let mcir_ir::ValueDef::Inst(i) = self.fw.e.func.values[fv].def {
            if matches!(self.fw.e.func.insts[i].op, Op::IConst(_)) {
                return true;
            }
        }
        if self.fw_entry_values.contains(&fv) {
            return true;
        }
        match self.primal.values[v].def {
            mcir_ir::ValueDef::Inst(i) => {
                let d = &self.primal.insts[i];
                match d.op {
                    Op::ArrayDim(_) => self.free_to_read_within(d.args[0], depth),
                    Op::IBinary(IBinOp::Add | IBinOp::Sub | IBinOp::Mul) if depth > 0 => {
                        d.args.iter().all(|&a| self.free_to_read_within(a, depth - 1))
                    }
                    _ => false,
                }
            }
            mcir_ir::ValueDef::Param(..) => false,
        }
    }

    /// Primal value `v`, for which `free_to_read` holds, in the reverse block being built
    /// (an array's size is asked again: arrays never change shape).
    fn read_free(&mut self, v: Value) -> Option<Value> {
        if let mcir_ir::ValueDef::Inst(i) = self.primal.values[v].def {
            let d = &self.primal.insts[i];
            if let Op::ArrayDim(axis) = d.op {
                let in_entry = self.fw.fwd(v).is_ok_and(|fv| self.fw_entry_values.contains(&fv));
                if !in_entry && !self.counter_params.contains_key(&v) {
                    let array = self.read_free(d.args[0])?;
                    return Some(self.e.val(Op::ArrayDim(axis), vec![array], TypeTable::I64));
                }
            }
        }
        self.fwdv(v).ok()
    }

    // ---- the adjoint of each op ----

    fn result(&self, inst: Inst) -> Result<Value, AdError> {
        self.primal.insts[inst].result.ok_or_else(|| self.err(format!("{inst} has no result")))
    }

    fn reverse_inst(&mut self, inst: Inst) -> Result<(), AdError> {
        let primal = self.primal;
        let d = &primal.insts[inst];
        let a = &d.args;
        let g = match d.result {
            Some(r) => self.take(r),
            None => Vec::new(),
        };
        let g0 = g.first().copied().flatten();
        match &d.op {
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
            | Op::Print => {}
            Op::FBinary(op) => {
                if let Some(g) = g0 {
                    self.binary_rule(*op, a[0], a[1], inst, g)?;
                }
            }
            Op::Linearized => {
                // `x̄ₖ += ȳ · jₖ`: nothing passes to the value or the coefficients.
                let Some(g) = g0 else { return Ok(()) };
                for pair in a[1..].chunks(2) {
                    if let [j, x] = *pair {
                        if self.is_active(x) {
                            let fj = self.fwdv(j)?;
                            let t = self.e.mul(g, fj);
                            self.contribute(x, 0, t);
                        }
                    }
                }
            }
            Op::FUnary(op) => {
                let Some(g) = g0 else { return Ok(()) };
                if !self.is_active(a[0]) {
                    return Ok(());
                }
                let t = match op {
                    // The forward pass computed the factor beside the op.
                    FUnOp::Sin | FUnOp::Cos if !self.corrupting => {
                        let factor = self.saved(inst, 0)?;
                        let t = self.e.mul(g, factor);
                        Some(if *op == FUnOp::Cos { self.e.neg(t) } else { t })
                    }
                    _ => {
                        let r = self.result(inst)?;
                        self.unary_adjoint(*op, a[0], r, g)?
                    }
                };
                if let Some(t) = t {
                    self.contribute(a[0], 0, t);
                }
            }
            Op::FPowI => {
                let Some(g) = g0 else { return Ok(()) };
                if self.is_active(a[0]) {
                    let t = self.powi_factor(a[0], a[1], g)?;
                    self.contribute(a[0], 0, t);
                }
            }
            Op::Select => {
                let Some(g) = g0 else { return Ok(()) };
                if !self.is_active(a[1]) && !self.is_active(a[2]) {
                    return Ok(());
                }
                let c = self.fwdv(a[0])?;
                let z = self.zero();
                if self.is_active(a[1]) {
                    let t = self.e.val(Op::Select, vec![c, g, z], TypeTable::F64);
                    self.contribute(a[1], 0, t);
                }
                if self.is_active(a[2]) {
                    let t = self.e.val(Op::Select, vec![c, z, g], TypeTable::F64);
                    self.contribute(a[2], 0, t);
                }
            }
            Op::ArrayFill => {
                let r = self.result(inst)?;
                if has_tangent(self.types, primal.value_type(r)) && self.is_active(a[0]) {
                    let s = self.shadow(r)?;
                    let t = self.e.val(Op::Sum, vec![s], TypeTable::F64);
                    self.contribute(a[0], 0, t);
                }
            }
            Op::ArrayLit(dims) => {
                let r = self.result(inst)?;
                if !has_tangent(self.types, primal.value_type(r)) || !a.iter().any(|&x| self.is_active(x)) {
                    return Ok(());
                }
                let s = self.shadow(r)?;
                for (flat, &x) in a.iter().enumerate() {
                    if !self.is_active(x) {
                        continue;
                    }
                    let mut idx = Vec::new();
                    let mut rest = flat;
                    for i in 0..dims.len() {
                        let stride: usize =
                            dims[i + 1..].iter().map(|&d| d as usize).product::<usize>().max(1);
                        idx.push(self.e.iconst((rest / stride) as i64));
                        rest %= stride;
                    }
                    let t = self.e.val(Op::Load, [vec![s], idx].concat(), TypeTable::F64);
                    self.contribute(x, 0, t);
                }
            }
            Op::Load | Op::TrustedLoad => {
                if let Some(g) = g0 {
                    if has_tangent(self.types, primal.value_type(a[0])) {
                        let s = self.shadow(a[0])?;
                        let idx = a[1..].iter().map(|&i| self.fwdv(i)).collect::<Result<Vec<_>, _>>()?;
                        self.acc_element(s, idx, g);
                    }
                }
            }
            Op::Store | Op::TrustedStore => {
                let idx = a[1..a.len() - 1].iter().map(|&i| self.fwdv(i)).collect::<Result<Vec<_>, _>>()?;
                // An array that does not vary is only ever written values that do not.
                if has_tangent(self.types, primal.value_type(a[0])) && self.varies(a[0]) {
                    let s = self.shadow(a[0])?;
                    let v = a[a.len() - 1];
                    if self.is_active(v) {
                        let t = self.e.val(Op::TrustedLoad, [vec![s], idx.clone()].concat(), TypeTable::F64);
                        self.contribute(v, 0, t);
                    }
                    let z = self.zero();
                    self.e.eff(Op::TrustedStore, [vec![s], idx.clone(), vec![z]].concat());
                }
                if !self.fw.unrestored.contains(&a[0]) {
                    let arr = self.fwdv(a[0])?;
                    let old = self.saved(inst, 0)?;
                    self.e.eff(Op::TrustedStore, [vec![arr], idx, vec![old]].concat());
                }
            }
            Op::ArrayCopy => {
                let r = self.result(inst)?;
                if has_tangent(self.types, primal.value_type(r)) && self.varies(r) {
                    let (sa, sc) = (self.shadow(a[0])?, self.shadow(r)?);
                    self.acc_array(sa, sc);
                }
            }
            Op::CopyInto => {
                if has_tangent(self.types, primal.value_type(a[0])) && self.varies(a[0]) {
                    let (sd, ss) = (self.shadow(a[0])?, self.shadow(a[1])?);
                    if self.corrupting {
                        let c = self.e.fconst(0.5);
                        self.e.eff(Op::Axpy, vec![ss, c, sd]);
                    }
                    self.e.eff(Op::MoveAdd, vec![ss, sd]);
                }
                let dst = self.fwdv(a[0])?;
                let old = self.saved(inst, 0)?;
                self.e.eff(Op::CopyInto, vec![dst, old]);
            }
            Op::Sum => {
                if let Some(g) = g0 {
                    if has_tangent(self.types, primal.value_type(a[0])) {
                        self.acc_operand(a[0], g)?;
                    }
                }
            }
            Op::Dot => {
                if let Some(g) = g0 {
                    for (x, y) in [(a[0], a[1]), (a[1], a[0])] {
                        if !self.varies(x) {
                            continue;
                        }
                        let fy = self.fwdv(y)?;
                        if self.held.contains(&x) {
                            let t = self.e.mul(g, fy);
                            self.acc_operand(x, t)?;
                        } else {
                            let sx = self.shadow(x)?;
                            self.acc_axpy(sx, g, fy);
                        }
                    }
                }
            }
            Op::MapFBinary(_)
            | Op::MapFUnary(_)
            | Op::MapFPowI
            | Op::MatMul(_)
            | Op::MatVec(_)
            | Op::Transpose
                if !self.varies(self.result(inst)?) => {}
            Op::Transpose => {
                // Y = Aᵀ: dA += gYᵀ.
                let r = self.result(inst)?;
                let gy = self.shadow(r)?;
                let gy = self.corrupt_array(gy);
                let sa = self.shadow(a[0])?;
                let ty = self.e.ty(sa);
                let t = self.e.val(Op::Transpose, vec![gy], ty);
                self.e.eff(Op::AddInto, vec![sa, t]);
            }
            Op::MatMul(t) => {
                // C = op(A) op(B): each operand's adjoint is a product of the other with
                // C's adjoint, transposed to fit (A B: dA += gC Bᵀ, dB += Aᵀ gC).
                let r = self.result(inst)?;
                let gc = self.shadow(r)?;
                let gc = self.corrupt_array(gc);
                let tr = |a: bool, b: bool| Transpose { a, b };
                // For each operand: the product's transposition, and whether the adjoint
                // comes first (the other operand second) or second.
                let (rule_a, rule_b) = match (t.a, t.b) {
                    (false, false) => ((tr(false, true), true), (tr(true, false), false)),
                    (true, false) => ((tr(false, true), false), (tr(false, false), false)),
                    (false, true) => ((tr(false, false), true), (tr(true, false), true)),
                    (true, true) => ((tr(true, true), false), (tr(true, true), true)),
                };
                for (x, other, (t, adjoint_first)) in [(a[0], a[1], rule_a), (a[1], a[0], rule_b)] {
                    if self.varies(x) {
                        let sx = self.shadow(x)?;
                        let o = self.fwdv(other)?;
                        let (l, rr) = if adjoint_first { (gc, o) } else { (o, gc) };
                        self.e.eff(Op::MatMulAcc(t), vec![sx, l, rr]);
                    }
                }
            }
            Op::MatVec(t) => {
                // y = op(A) x: dA += gy xᵀ (x gyᵀ when transposed), dx += op(A)ᵀ gy.
                let r = self.result(inst)?;
                let gy = self.shadow(r)?;
                let gy = self.corrupt_array(gy);
                if self.varies(a[0]) {
                    let sa = self.shadow(a[0])?;
                    let fx = self.fwdv(a[1])?;
                    let (l, rr) = if *t { (fx, gy) } else { (gy, fx) };
                    self.e.eff(Op::OuterAcc, vec![sa, l, rr]);
                }
                if self.varies(a[1]) {
                    let sx = self.shadow(a[1])?;
                    let fa = self.fwdv(a[0])?;
                    self.e.eff(Op::MatVecAcc(!*t), vec![sx, fa, gy]);
                }
            }
            Op::MapFBinary(op) => {
                let r = self.result(inst)?;
                if let Some(gs) = self.map_adjoint(inst, r)? {
                    self.map_binary_rule(*op, a[0], a[1], r, gs)?;
                }
            }
            Op::MapFUnary(op) => {
                let r = self.result(inst)?;
                if let Some(gs) = self.map_adjoint(inst, r)? {
                    let t = match op {
                        // The forward pass computed the factor beside the map.
                        FUnOp::Sin | FUnOp::Cos if !self.corrupting => {
                            let factor = self.saved(inst, 0)?;
                            let t = self.e.mul(gs, factor);
                            Some(if *op == FUnOp::Cos { self.e.neg(t) } else { t })
                        }
                        _ => self.unary_adjoint(*op, a[0], r, gs)?,
                    };
                    if let Some(t) = t {
                        self.acc_operand(a[0], t)?;
                    }
                }
            }
            Op::MapFPowI => {
                let r = self.result(inst)?;
                if let Some(gs) = self.map_adjoint(inst, r)? {
                    let t = self.powi_factor(a[0], a[1], gs)?;
                    self.acc_operand(a[0], t)?;
                }
            }
            Op::RefNew => self.fresh_cell_rule(inst, None)?,
            Op::StructNew(s) if self.types.struct_def(*s).mutable => self.fresh_cell_rule(inst, Some(*s))?,
            Op::RefLoad | Op::MutLoad(..) => {
                if g.iter().all(|x| x.is_none()) {
                    return Ok(());
                }
                let cell = self.shadow(a[0])?;
                let r = self.result(inst)?;
                let ct = primal.value_type(r);
                let tan_ty = tangent_type(self.types, ct);
                let (load, store) = shadow_access(self.types, &d.op)?;
                let tan = self.e.val(load, vec![cell], tan_ty);
                let g: Vec<Option<Value>> = g.into_iter().map(|x| x.map(|x| self.corrupt(x))).collect();
                let new = self.tangent_add(ct, tan, &g);
                self.e.eff(store, vec![cell, new]);
            }
            Op::RefStore | Op::MutStore(..) => {
                let v = a[1];
                let ct = primal.value_type(v);
                if has_tangent(self.types, ct) {
                    let (load, store) = shadow_access(self.types, &d.op)?;
                    let cell = self.shadow(a[0])?;
                    if self.is_active(v) {
                        let tan_ty = tangent_type(self.types, ct);
                        let tan = self.e.val(load, vec![cell], tan_ty);
                        for (k, leaf) in rdata_leaves(self.types, ct).into_iter().enumerate() {
                            let t = tangent_extract(&mut self.e, self.types, tan, &leaf.path);
                            self.contribute(v, k as u32, t);
                        }
                    }
                    let old_tan = self.saved(inst, 1)?;
                    self.e.eff(store, vec![cell, old_tan]);
                }
                let target = self.fwdv(a[0])?;
                let old = self.saved(inst, 0)?;
                self.e.eff(d.op.clone(), vec![target, old]);
            }
            Op::TupleNew | Op::StructNew(_) => {
                let r = self.result(inst)?;
                let ranges = field_leaf_ranges(self.types, primal.value_type(r), LeafKind::Rdata);
                for (i, range) in ranges.into_iter().enumerate() {
                    for (k, j) in range.enumerate() {
                        if let Some(Some(x)) = g.get(j) {
                            self.contribute(a[i], k as u32, *x);
                        }
                    }
                }
            }
            Op::TupleGet(i) | Op::StructGet(_, i) => {
                let ranges = field_leaf_ranges(self.types, primal.value_type(a[0]), LeafKind::Rdata);
                if let Some(range) = ranges.get(*i as usize) {
                    for (k, x) in g.iter().enumerate() {
                        if let Some(x) = x {
                            self.contribute(a[0], (range.start + k) as u32, *x);
                        }
                    }
                }
            }
            Op::Call(callee) => {
                let (rev, rev_ret) = (self.ids[callee.index()].rev, self.ids[callee.index()].rev_ret);
                let tape = self.saved(inst, 0)?;
                let mut cargs = vec![tape];
                for x in &g {
                    cargs.push(match x {
                        Some(x) => *x,
                        None => self.zero(),
                    });
                }
                let rd = self.e.func.push_inst(self.e.block, Op::Call(rev), cargs, rev_ret, d.span);
                if let Some(rd) = rd {
                    let mut k = 0u32;
                    for &x in a {
                        for j in 0..rdata_leaves(self.types, primal.value_type(x)).len() {
                            if self.is_active(x) {
                                let t = self.e.tuple_get(self.types, rd, k);
                                self.contribute(x, j as u32, t);
                            }
                            k += 1;
                        }
                    }
                }
            }
            Op::ZerosLike
            | Op::AddInto
            | Op::Axpy
            | Op::MoveAdd
            | Op::MatMulAcc(_)
            | Op::MatVecAcc(_)
            | Op::OuterAcc
            | Op::StackNew
            | Op::Unset
            | Op::StackPush
            | Op::StackPop
            | Op::StackPeek
            | Op::StackReserve
            | Op::StackPut
            | Op::ArenaMark
            | Op::ArenaRelease
            | Op::TapeMark
            | Op::TapeRelease => {
                return Err(AdError {
                    func: primal.name.clone(),
                    message: format!(
                        "`{}` belongs to derived passes and has no reverse rule",
                        rule_name(self.types, &d.op)
                    ),
                })
            }
        }
        Ok(())
    }

    /// A fresh cell (`ref.new`) or mut record: its shadow holds the adjoint of what it was
    /// built from.
    fn fresh_cell_rule(&mut self, inst: Inst, record: Option<mcir_ir::StructId>) -> Result<(), AdError> {
        let primal = self.primal;
        let r = self.result(inst)?;
        let fields: Vec<Value> = primal.insts[inst].args.clone();
        if !has_tangent(self.types, primal.value_type(r)) || !fields.iter().any(|&x| self.is_active(x)) {
            return Ok(());
        }
        let s = self.shadow(r)?;
        for (i, x) in fields.into_iter().enumerate() {
            if !self.is_active(x) {
                continue;
            }
            let ty = tangent_type(self.types, primal.value_type(x));
            let tan = match record {
                Some(sid) => {
                    let ss = shadow_struct(self.types, sid)?;
                    self.e.val(Op::MutLoad(ss, i as u32), vec![s], ty)
                }
                None => self.e.val(Op::RefLoad, vec![s], ty),
            };
            for (k, leaf) in rdata_leaves(self.types, primal.value_type(x)).into_iter().enumerate() {
                let t = tangent_extract(&mut self.e, self.types, tan, &leaf.path);
                self.contribute(x, k as u32, t);
            }
        }
        Ok(())
    }

    /// `2 g x`, the adjoint `x * x` sends to `x`: the doubling on the scalar cotangent
    /// when it is one, so that an array's adjoint is one elementwise product. Doubling is
    /// exact, so this is `g x + g x` bit for bit.
    fn twice_times(&mut self, g: Value, x: Value) -> Result<Value, AdError> {
        let fx = self.fwdv(x)?;
        if self.e.ty(g) == TypeTable::F64 {
            let g2 = self.e.add(g, g);
            Ok(self.e.mul(g2, fx))
        } else {
            let t = self.e.mul(g, fx);
            Ok(self.e.add(t, t))
        }
    }

    fn binary_rule(&mut self, op: FBinOp, x: Value, y: Value, inst: Inst, g: Value) -> Result<(), AdError> {
        let (ax, ay) = (self.is_active(x), self.is_active(y));
        match op {
            FBinOp::Add => {
                self.contribute(x, 0, g);
                self.contribute(y, 0, g);
            }
            FBinOp::Sub => {
                self.contribute(x, 0, g);
                if ay {
                    let n = self.e.neg(g);
                    self.contribute(y, 0, n);
                }
            }
            FBinOp::Mul if x == y => {
                // `x * x`: one contribution of `2 g x` instead of `g x` twice.
                if ax {
                    let t = self.twice_times(g, x)?;
                    self.contribute(x, 0, t);
                }
            }
            FBinOp::Mul => {
                if ax {
                    let fy = self.fwdv(y)?;
                    let t = self.e.mul(g, fy);
                    self.contribute(x, 0, t);
                }
                if ay {
                    let fx = self.fwdv(x)?;
                    let t = self.e.mul(g, fx);
                    self.contribute(y, 0, t);
                }
            }
            FBinOp::Div => {
                if !ax && !ay {
                    return Ok(());
                }
                if let (false, Some(inverse)) = (ax, exact_inverse_of_constant(self.primal, x)) {
                    // `r = c / y`: `1 / y` is `r / c`, so the divisor's adjoint
                    // `-g r / y` is `-(g r)(r / c)`, products and no division. `r / c`
                    // (exact) keeps the magnitudes of `g / y` and `r`, so that no product
                    // overflows or underflows where those do not.
                    let fr = self.fwdv(self.result(inst)?)?;
                    let u = self.e.mul(g, fr);
                    let w = if inverse != 1.0 {
                        let k = self.e.fconst(inverse);
                        self.e.mul(fr, k)
                    } else {
                        fr
                    };
                    let v = self.e.mul(u, w);
                    let n = self.e.neg(v);
                    self.contribute(y, 0, n);
                    return Ok(());
                }
                let fy = self.fwdv(y)?;
                // `g · (1 / y)` rather than `g / y` for a divisor that is not a constant:
                // the reciprocal waits on the primal divisor only, so its division runs
                // beside the adjoints' chain instead of on it, and the quotients of one
                // divisor (`x / z`, `y / z`) share it. (It differs from `g / y` only
                // where `1 / y` overflows: a subnormal divisor.)
                let t = if crate::forward::is_fconst(self.primal, y) {
                    self.e.div(g, fy)
                } else {
                    let one = self.e.fconst(1.0);
                    let reciprocal = self.e.div(one, fy);
                    self.e.mul(g, reciprocal)
                };
                self.contribute(x, 0, t);
                if ay {
                    let fr = self.fwdv(self.result(inst)?)?;
                    let u = self.e.mul(t, fr);
                    let n = self.e.neg(u);
                    self.contribute(y, 0, n);
                }
            }
            FBinOp::Pow => {
                if ax || ay {
                    self.pow_rule(x, y, self.result(inst)?, g)?;
                }
            }
            FBinOp::Min | FBinOp::Max => {
                if !ax && !ay {
                    return Ok(());
                }
                let (fx, fy) = (self.fwdv(x)?, self.fwdv(y)?);
                let pred = if op == FBinOp::Min { CmpOp::Lt } else { CmpOp::Gt };
                // `y` wins only when strictly better: ties go to `x`.
                let y_wins = self.e.val(Op::FCmp(pred), vec![fy, fx], TypeTable::BOOL);
                let z = self.zero();
                if ax {
                    let t = self.e.val(Op::Select, vec![y_wins, z, g], TypeTable::F64);
                    self.contribute(x, 0, t);
                }
                if ay {
                    let t = self.e.val(Op::Select, vec![y_wins, g, z], TypeTable::F64);
                    self.contribute(y, 0, t);
                }
            }
            FBinOp::Atan2 => {
                if !ax && !ay {
                    return Ok(());
                }
                // atan2(p, q): d/dp = q / (p² + q²), d/dq = -p / (p² + q²).
                let (fp, fq) = (self.fwdv(x)?, self.fwdv(y)?);
                let pp = self.e.mul(fp, fp);
                let qq = self.e.mul(fq, fq);
                let den = self.e.add(pp, qq);
                let w = self.e.div(g, den);
                if ax {
                    let t = self.e.mul(w, fq);
                    self.contribute(x, 0, t);
                }
                if ay {
                    let t = self.e.mul(w, fp);
                    let n = self.e.neg(t);
                    self.contribute(y, 0, n);
                }
            }
        }
        Ok(())
    }

    /// `x ** y`: d/dx = y x^(y-1), d/dy = x^y log x (scalar, or array ** scalar).
    fn pow_rule(&mut self, x: Value, y: Value, r: Value, g: Value) -> Result<(), AdError> {
        let fx = self.fwdv(x)?;
        let fy = self.fwdv(y)?;
        if self.wants(x) {
            let one = self.e.fconst(1.0);
            let ym1 = self.e.sub(fy, one);
            let p = self.e.bin(FBinOp::Pow, fx, ym1);
            let t = self.e.mul(p, fy);
            let t = self.e.mul(g, t);
            self.send(x, t)?;
        }
        if self.wants(y) {
            let fr = self.fwdv(r)?;
            let l = self.e.un(FUnOp::Log, fx);
            let t = self.e.mul(fr, l);
            let t = self.e.mul(g, t);
            self.send(y, t)?;
        }
        Ok(())
    }

    /// Sends a contribution to an operand: a scalar adjoint, or an array shadow.
    fn send(&mut self, x: Value, t: Value) -> Result<(), AdError> {
        if self.primal.value_type(x) == TypeTable::F64 && self.e.ty(t) == TypeTable::F64 {
            self.contribute(x, 0, t);
            Ok(())
        } else {
            self.send_to_operand(x, t)
        }
    }

    /// `g * n * x^(n-1)` for `x ** n` with an integer `n`, scalar or elementwise.
    fn powi_factor(&mut self, x: Value, n: Value, g: Value) -> Result<Value, AdError> {
        let fx = self.fwdv(x)?;
        let fnn = self.fwdv(n)?;
        Ok(crate::rules::powi_times(&mut self.e, fx, fnn, g))
    }

    /// The contribution `g * f'(x)` of a unary op to its operand (scalar or elementwise),
    /// or `None` for ops whose derivative is zero.
    fn unary_adjoint(&mut self, op: FUnOp, x: Value, r: Value, g: Value) -> Result<Option<Value>, AdError> {
        let (reads_x, reads_r) = crate::rules::unary_reads(op);
        let fx = if reads_x { Some(self.fwdv(x)?) } else { None };
        let fr = if reads_r { Some(self.fwdv(r)?) } else { None };
        match crate::rules::unary_times(&mut self.e, op, fx, fr, g) {
            Some(t) => Ok(Some(t)),
            // Zero derivative; a corrupted rule passes the adjoint through instead.
            None => Ok(if self.corrupting { Some(g) } else { None }),
        }
    }

    /// Elementwise binary ops: `gs` is the shadow of the result.
    fn map_binary_rule(
        &mut self,
        op: FBinOp,
        x: Value,
        y: Value,
        r: Value,
        gs: Value,
    ) -> Result<(), AdError> {
        match op {
            FBinOp::Add | FBinOp::Sub => {
                if self.wants(x) {
                    self.send_to_operand(x, gs)?;
                }
                if self.wants(y) {
                    let t = if op == FBinOp::Sub { self.e.neg(gs) } else { gs };
                    self.send_to_operand(y, t)?;
                }
            }
            FBinOp::Mul if x == y => {
                if self.wants(x) {
                    let t = self.twice_times(gs, x)?;
                    self.send_to_operand(x, t)?;
                }
            }
            FBinOp::Mul => {
                if self.wants(x) {
                    let fy = self.fwdv(y)?;
                    let t = self.e.mul(gs, fy);
                    self.send_to_operand(x, t)?;
                }
                if self.wants(y) {
                    let fx = self.fwdv(x)?;
                    let t = self.e.mul(gs, fx);
                    self.send_to_operand(y, t)?;
                }
            }
            FBinOp::Div => {
                let fy = self.fwdv(y)?;
                let t = self.e.div(gs, fy);
                if self.wants(x) {
                    self.send_to_operand(x, t)?;
                }
                if self.wants(y) {
                    let fr = self.fwdv(r)?;
                    let u = self.e.mul(t, fr);
                    let n = self.e.neg(u);
                    self.send_to_operand(y, n)?;
                }
            }
            FBinOp::Pow => self.pow_rule(x, y, r, gs)?,
            FBinOp::Min | FBinOp::Max | FBinOp::Atan2 => {
                return Err(self.err(format!("`{}` has no elementwise form", op.name())))
            }
        }
        Ok(())
    }

    /// Adds rdata adjoints `g` (one per rdata leaf of type `t`) to a tangent value `tan` of
    /// type `tangent(t)`, rebuilding only the parts that change.
    fn tangent_add(&mut self, t: TypeId, tan: Value, g: &[Option<Value>]) -> Value {
        if g.iter().all(|x| x.is_none()) {
            return tan;
        }
        if t == TypeTable::F64 {
            return match g.first().copied().flatten() {
                Some(x) => self.e.add(tan, x),
                None => tan,
            };
        }
        let fields: Vec<TypeId> = match self.types.get(t) {
            Type::Tuple(items) => items.clone(),
            Type::Struct(_) => self
                .types
                .as_struct(t)
                .map(|(_, d)| d.fields.iter().map(|f| f.1).collect())
                .unwrap_or_default(),
            _ => return tan,
        };
        let ranges = field_leaf_ranges(self.types, t, LeafKind::Rdata);
        let mut items = Vec::new();
        for (i, (ft, range)) in fields.into_iter().zip(ranges).enumerate() {
            let sub = self.e.tuple_get(self.types, tan, i as u32);
            let part = g.get(range).unwrap_or(&[]).to_vec();
            items.push(self.tangent_add(ft, sub, &part));
        }
        self.e.tuple(self.types, items)
    }

    /// The position of `inst` in the block being reversed, if it is there.
    /// Whether `load`, in a block that enters the current one through a chain of blocks
    /// each entered by one edge (the head of a branch, for an arm), read memory as it is
    /// before the instruction being reversed: nothing after the load in its block, in
    /// the blocks between, or before the instruction in the current block may write its
    /// array. A store to an array of another type cannot (as in `mcir_ir::memory`).
    fn unwritten_since_earlier_block(&self, load: mcir_ir::Inst) -> bool {
        let Some((at, pos)) = self.inst_pos.get(load.index()).copied().flatten() else { return false };
        let ty = self.primal.value_type(self.primal.insts[load].args[0]);
        let clear = |b: Block, range: std::ops::Range<usize>| {
            self.writes_in[b.index()].iter().all(|&(w, t)| !range.contains(&w) || t.is_some_and(|t| t != ty))
        };
        if !clear(self.cur, 0..self.cur_pos) {
            return false;
        }
        let mut b = self.cur;
        for _ in 0..MAX_RELOAD_CHAIN {
            let Some(p) = self.sole_pred.get(b.index()).copied().flatten() else { return false };
            if p == at {
                return clear(p, pos + 1..usize::MAX);
            }
            if !clear(p, 0..usize::MAX) {
                return false;
            }
            b = p;
        }
        false
    }

    fn position_in_current_block(&self, inst: mcir_ir::Inst) -> Option<usize> {
        match self.inst_pos.get(inst.index()).copied().flatten() {
            Some((b, pos)) if b == self.cur => Some(pos),
            _ => None,
        }
    }

    /// Builds the whole reverse pass; `edges` are the primal in-edges of each block.
    pub fn build_all(&mut self, edges: &[Vec<Edge>]) -> Result<(), AdError> {
        self.inst_pos = vec![None; self.primal.insts.len()];
        let n = self.primal.blocks.len();
        let mut entering: Vec<(usize, Option<Block>)> = vec![(0, None); n];
        self.writes_in = vec![Vec::new(); n];
        for (b, data) in self.primal.blocks.iter() {
            for s in data.term.successors() {
                let e = &mut entering[s.block.index()];
                *e = (e.0 + 1, Some(b));
            }
            for (pos, &i) in data.insts.iter().enumerate() {
                let d = &self.primal.insts[i];
                if writes_memory(&d.op) {
                    let stored = matches!(d.op, Op::Store | Op::TrustedStore)
                        .then(|| self.primal.value_type(d.args[0]));
                    self.writes_in[b.index()].push((pos, stored));
                }
            }
        }
        self.sole_pred = entering.into_iter().map(|(k, p)| if k == 1 { p } else { None }).collect();
        for (b, data) in self.primal.blocks.iter() {
            for (pos, &i) in data.insts.iter().enumerate() {
                if let Some(slot) = self.inst_pos.get_mut(i.index()) {
                    *slot = Some((b, pos));
                }
            }
        }
        self.build()?;
        for (b, _) in self.primal.blocks.iter().rev() {
            self.block(b, &edges[b.index()])?;
        }
        self.finish_pops();
        Ok(())
    }
}

/// Whether an op may write memory a load reads (calls may write anything).
fn writes_memory(op: &Op) -> bool {
    matches!(
        op,
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
            | Op::Call(_)
            | Op::StackPush
            | Op::StackPop
            | Op::StackPeek
    )
}

/// The name a corrupted rule is selected by: the op's mnemonic, without `map.` (so that
/// `sin` covers `sin` on scalars and on arrays).
pub fn rule_name(types: &TypeTable, op: &Op) -> String {
    let n = mcir_ir::print::op_name(types, op);
    n.strip_prefix("map.").map(str::to_string).unwrap_or(n)
}
