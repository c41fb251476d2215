//! Lowering mcir IR to Cranelift IR. Each IR block becomes a Cranelift block with the
//! same parameters; each op becomes a few instructions or a call into the runtime.
//! Every function takes the call context as a hidden first parameter. Every check the
//! interpreter makes is made here too: a failing check calls `mc_fail` with the site of
//! the operation and returns; after any call that may fail, the context's status is
//! tested and the function returns at once if it is set. Nothing traps.

use crate::layout::{array, ctx, stack};
use crate::runtime::*;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, Block as CBlock, FuncRef, InstBuilder, MemFlagsData, Signature, Type as CType,
    UserFuncName, Value as CValue,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId as CFuncId, Module as _};
use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{
    BlockCall, CmpOp, FBinOp, FUnOp, FuncId, Function, IBinOp, IUnOp, Module, Op, Scalar, Span, Terminator,
    TypeId, TypeTable, Value,
};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A runtime function as generated code sees it.
pub(crate) struct RtFn {
    pub name: &'static str,
    pub ptr: *const u8,
    pub params: &'static [CType],
    pub ret: Option<CType>,
}

const P: CType = types::I64;
const F: CType = types::F64;

macro_rules! rtfns {
    ($($name:literal => $f:expr, [$($p:expr),*] -> $r:expr;)*) => {
        pub(crate) fn runtime_functions() -> Vec<RtFn> {
            vec![$(RtFn { name: $name, ptr: $f as *const u8, params: &[$($p),*], ret: $r }),*]
        }
    };
}

rtfns! {
    "mc_fail" => mc_fail as extern "C" fn(_, _, _, _, _, _), [P, P, P, P, P, P] -> None;
    "mc_alloc" => mc_alloc as extern "C" fn(_, _, _) -> _, [P, P, P] -> Some(P);
    "mc_refill" => mc_refill as extern "C" fn(_, _, _), [P, P, P] -> None;
    "mc_array_new" => mc_array_new as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, P, P, P, P, P] -> Some(P);
    "mc_array_fill_f64" => mc_array_fill_f64 as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, F, P, P, P, P] -> Some(P);
    "mc_array_fill_i64" => mc_array_fill_i64 as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, P, P, P, P, P] -> Some(P);
    "mc_array_fill_bool" => mc_array_fill_bool as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, P, P, P, P, P] -> Some(P);
    "mc_array_copy" => mc_array_copy as extern "C" fn(_, _, _, _) -> _, [P, P, P, P] -> Some(P);
    "mc_copy_into" => mc_copy_into as extern "C" fn(_, _, _, _, _), [P, P, P, P, P] -> None;
    "mc_zeros_like" => mc_zeros_like as extern "C" fn(_, _, _) -> _, [P, P, P] -> Some(P);
    "mc_poll" => mc_poll as extern "C" fn(_, _), [P, P] -> None;
    "mc_arena_release" => mc_arena_release as extern "C" fn(_, _), [P, P] -> None;
    "mc_tape_release" => mc_tape_release as extern "C" fn(_, _), [P, P] -> None;
    "mc_stack_reserve" => mc_stack_reserve as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, P, P, P, P, P] -> Some(P);
    "mc_same_shape" => mc_same_shape as extern "C" fn(_, _, _, _), [P, P, P, P] -> None;
    "mc_array_like" => mc_array_like as extern "C" fn(_, _, _) -> _, [P, P, P] -> Some(P);
    "mc_sum_f64" => mc_sum_f64 as extern "C" fn(_, _, _) -> _, [P, P, P] -> Some(F);
    "mc_sum_i64" => mc_sum_i64 as extern "C" fn(_, _, _) -> _, [P, P, P] -> Some(P);
    "mc_dot" => mc_dot as extern "C" fn(_, _, _, _) -> _, [P, P, P, P] -> Some(F);
    "mc_matmul" => mc_matmul as extern "C" fn(_, _, _, _, _) -> _, [P, P, P, P, P] -> Some(P);
    "mc_matvec" => mc_matvec as extern "C" fn(_, _, _, _, _) -> _, [P, P, P, P, P] -> Some(P);
    "mc_matmul_acc" => mc_matmul_acc as extern "C" fn(_, _, _, _, _, _), [P, P, P, P, P, P] -> None;
    "mc_matvec_acc" => mc_matvec_acc as extern "C" fn(_, _, _, _, _, _), [P, P, P, P, P, P] -> None;
    "mc_transpose" => mc_transpose as extern "C" fn(_, _, _) -> _, [P, P, P] -> Some(P);
    "mc_outer_acc" => mc_outer_acc as extern "C" fn(_, _, _, _, _), [P, P, P, P, P] -> None;
    "mc_map_f64" => mc_map_f64 as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, P, P, P, P, F] -> Some(P);
    "mc_map_i64" => mc_map_i64 as extern "C" fn(_, _, _, _, _, _, _) -> _, [P, P, P, P, P, P, P] -> Some(P);
    "mc_map_unary" => mc_map_unary as extern "C" fn(_, _, _, _) -> _, [P, P, P, P] -> Some(P);
    "mc_map_powi" => mc_map_powi as extern "C" fn(_, _, _, _) -> _, [P, P, P, P] -> Some(P);
    "mc_add_into" => mc_add_into as extern "C" fn(_, _, _, _, _, _), [P, P, P, P, F, P] -> None;
    "mc_axpy" => mc_axpy as extern "C" fn(_, _, _, _, _), [P, P, P, F, P] -> None;
    "mc_move_add" => mc_move_add as extern "C" fn(_, _, _, _), [P, P, P, P] -> None;
    "mc_stack_new" => mc_stack_new as extern "C" fn(_, _) -> _, [P, P] -> Some(P);
    "mc_stack_grow" => mc_stack_grow as extern "C" fn(_, _, _), [P, P, P] -> None;
    "mc_ftoi" => mc_ftoi as extern "C" fn(_, _, _) -> _, [P, P, F] -> Some(P);
    "mc_print" => mc_print as extern "C" fn(_, _, _), [P, P, P] -> None;
    "mc_pow" => mc_pow as extern "C" fn(_, _) -> _, [F, F] -> Some(F);
    "mc_atan2" => mc_atan2 as extern "C" fn(_, _) -> _, [F, F] -> Some(F);
    "mc_powi" => mc_powi as extern "C" fn(_, _) -> _, [F, P] -> Some(F);
    "mc_sincos" => mc_sincos as extern "C" fn(_, _) -> _, [F, P] -> Some(F);
}

/// The machine type of an IR type: `f64`, `i64`, a byte for `bool`, a pointer otherwise.
pub(crate) fn machine_type(t: TypeId) -> CType {
    match t {
        TypeTable::F64 => types::F64,
        TypeTable::BOOL => types::I8,
        _ => types::I64,
    }
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// An array header never changes once made (contents do, the data pointer and extents
/// do not), so loads from it may be hoisted out of loops and merged.
fn header_flags() -> MemFlagsData {
    MemFlagsData::trusted().with_readonly().with_can_move()
}

/// Where each check and fallible call is in the source, by site number.
pub(crate) type Sites = Vec<(String, Span)>;

/// Declares, for every function of the module, its Cranelift signature: with
/// `fields_in_registers`, a function that returns a tuple returns its fields (see
/// [`register_fields`]).
pub(crate) fn signature(
    m: &JITModule,
    types: &TypeTable,
    f: &Function,
    fields_in_registers: bool,
) -> Signature {
    let mut sig = m.make_signature();
    sig.params.push(AbiParam::new(P));
    for &t in &f.params {
        sig.params.push(AbiParam::new(machine_type(t)));
    }
    match (f.ret, fields_in_registers.then(|| register_fields(types, f)).flatten()) {
        (_, Some(fields)) => sig.returns.extend(fields.into_iter().map(AbiParam::new)),
        (Some(r), None) => sig.returns.push(AbiParam::new(machine_type(r))),
        (None, None) => {}
    }
    sig
}

/// The machine types of the fields of the tuple `f` returns, when they fit in the
/// registers a call returns values in (two integers and two floats on x86-64 and
/// AArch64 alike): a rule's forward pass returns its value and its record so, which
/// then take no arena memory (a recursive function's forward pass runs once per
/// activation).
pub(crate) fn register_fields(types: &TypeTable, f: &Function) -> Option<Vec<CType>> {
    let mcir_ir::Type::Tuple(items) = types.get(f.ret?) else { return None };
    let fields: Vec<CType> = items.iter().map(|&t| machine_type(t)).collect();
    let floats = fields.iter().filter(|&&t| t == types::F64).count();
    (fields.len() >= 2 && floats <= 2 && fields.len() - floats <= 2).then_some(fields)
}

/// The tuples of `f` that live in registers, never in memory: those it builds and those
/// calls to functions of `in_registers` return, when nothing uses them but field reads
/// and, if `f` returns its tuple's fields in registers itself, its returns.
fn register_tuples(f: &Function, in_registers: &[bool], returns_fields: bool) -> HashSet<Value> {
    let mut candidates: HashSet<Value> = HashSet::default();
    for (_, d) in f.insts.iter() {
        match (&d.op, d.result) {
            (Op::TupleNew, Some(r)) if !d.args.is_empty() => {
                candidates.insert(r);
            }
            (Op::Call(g), Some(r)) if in_registers.get(g.index()).copied().unwrap_or(false) => {
                candidates.insert(r);
            }
            _ => {}
        }
    }
    for (_, d) in f.insts.iter() {
        let skip = usize::from(matches!(d.op, Op::TupleGet(_)));
        for a in d.args.iter().skip(skip) {
            candidates.remove(a);
        }
    }
    for (_, data) in f.blocks.iter() {
        if returns_fields && matches!(data.term, mcir_ir::Terminator::Return(Some(_))) {
            continue;
        }
        for u in data.term.uses() {
            candidates.remove(&u);
        }
    }
    candidates
}

/// The state shared by the lowering of every function of a module.
pub(crate) struct Lowering<'a> {
    pub jit: &'a mut JITModule,
    pub module: &'a Module,
    pub funcs: &'a [CFuncId],
    /// Which functions return their tuple's fields in registers (by function index).
    pub in_registers: &'a [bool],
    pub runtime: &'a std::collections::HashMap<&'static str, CFuncId>,
    pub sites: &'a mut Sites,
    /// Whether the function runs once per call from Rust (compiled for speed of
    /// compiling): its code is kept short, with `exp` a call to the runtime rather than
    /// forty instructions inline (the same operations, so the same result).
    pub compact: bool,
    /// What each function of the module may keep alive, for `mcir_ir::reclaim`.
    pub escapes: &'a mcir_ir::reclaim::Escapes,
}

struct FnLower<'a, 'b> {
    l: &'b mut Lowering<'a>,
    b: FunctionBuilder<'b>,
    f: &'b Function,
    ctx: CValue,
    unwind: CBlock,
    vals: Vec<Option<CValue>>,
    blocks: Vec<CBlock>,
    refs: HashMap<CFuncId, FuncRef>,
    proofs: mcir_ir::bounds::Proofs,
    /// How many loops contain each block, to order the targets of branches.
    loop_depth: Vec<u32>,
    /// Maps computed inside a later instruction's loop (see `fuse`), by result value.
    fused: HashMap<Value, mcir_ir::Inst>,
    /// The fixed-size allocations of the block being lowered come from one piece of the
    /// arena, taken at the first of them: the bytes they take in all, then the piece and
    /// the offset of the next allocation in it.
    block_bytes: i64,
    /// Where a failure of the instruction being lowered is reported when its own span is
    /// the whole function (what a derived pass gives its tape): the next instruction of
    /// its block whose span is narrower, as the interpreter reports it.
    narrow_span: Option<Span>,
    /// Whether allocations now take from the tape region (see `allocate_in_tape`).
    in_tape: bool,
    piece: Option<(CValue, i64)>,
    /// Records (tuples and structs of many fields) of the block being lowered whose
    /// memory is taken at the block's start, so that each field is stored as soon as its
    /// value is computed rather than all at the end, where every one of them would have
    /// to be live at once (a step's tape record): the record, and which fields are stored.
    early_records: HashMap<mcir_ir::Inst, (CValue, Vec<bool>)>,
    /// The records' fields still to store, by the value that goes in them.
    early_fields: HashMap<Value, Vec<(mcir_ir::Inst, usize)>>,
    /// Whether the function gives arena memory back (`arena.release`).
    releases_arena: bool,
    /// How array headers are read: as memory that never changes (`header_flags`), so
    /// that loads of extents and data pointers can be hoisted and merged; but plainly
    /// in a function that gives memory back, where an array made after a release may
    /// have its header where an earlier array's was.
    header_loads: MemFlagsData,
    /// Whether the function returns its tuple's fields in registers.
    returns_fields: bool,
    /// The tuples that live in registers (`register_tuples`), and once lowered, their
    /// fields.
    register_tuples: HashSet<Value>,
    tuple_fields: HashMap<Value, Vec<CValue>>,
    /// The values `unset` makes: a record's field that holds one is not stored, since
    /// nothing reads it (a rule's record holds the values of every path, and each run
    /// writes only those of its own).
    unset: HashSet<Value>,
    /// While the copies of an unrolled body are lowered: the accesses whose address
    /// moves by a fixed stride from one copy to the next (see `stepped_access`).
    stepped: Option<Stepped>,
    /// Where the back edge into a header goes when it is not the header's own block: an
    /// unrolled loop's body jumps back to the loop as written (`unrolled_copies`).
    latch_target: HashMap<mcir_ir::Block, CBlock>,
    /// The reservations whose stack nothing else grows (`sole_reservations`), and, once
    /// lowered, each one's data pointer and the stack's length after it, which the
    /// `stack.put`s into its room use instead of reading the stack again.
    sole_reservations: HashSet<Value>,
    cursors: HashMap<Value, (CValue, CValue)>,
    /// Stacks made with room for exactly what their sole reservation will ask (see
    /// `sized_stacks`): the stack, and that reservation's end operand, start, extra and
    /// width.
    sized_stacks: HashMap<Value, (Value, i64, i64, i64)>,
    /// The stacks this function only pops (`popped_only`), and, once read, each one's
    /// data pointer and its length in a variable: a pop then reads no length that the
    /// one before it has just stored, so pops in a loop do not wait on each other
    /// through memory. Nor is the length stored: no other value in the function refers
    /// to the stack, and the record that holds it is read once, by this function (a
    /// reverse pass consumes its tape), so no one reads the length in memory again.
    popped_only: HashSet<Value>,
    pop_cursors: HashMap<Value, (CValue, Variable)>,
    /// Pops of `popped_only` stacks that begin a run of pops of one stack in a block,
    /// with the run's length: the first checks that the stack holds them all, and the
    /// others (`unchecked_pops`) check nothing.
    pop_runs: HashMap<mcir_ir::Inst, i64>,
    unchecked_pops: HashSet<mcir_ir::Inst>,
    /// `sin x` and `cos x` of one operand in one block: each instruction's partner's
    /// result. The first of a pair to be lowered computes both with one `sincos` call.
    sincos_partner: HashMap<mcir_ir::Inst, Value>,
    /// The stack slot `sincos` writes its cosine to.
    sincos_slot: Option<cranelift_codegen::ir::StackSlot>,
    /// `map.sin x` fused into a loop, by instruction, and the `map.cos x` of the same
    /// block that loop computes too (or the other way round): see `map_sincos_pairs`.
    map_partner: HashMap<mcir_ir::Inst, mcir_ir::Inst>,
    /// The partners of `map_partner`, which are not lowered where they stand.
    map_partner_of: HashMap<mcir_ir::Inst, mcir_ir::Inst>,
    /// The byte offset of the element the fused loop being built is at.
    elem_offset: Option<CValue>,
}

/// The `sin` and `cos` maps of one array in one block where one of them is fused into
/// a later consumer's loop and the other stands alone, unused before that consumer:
/// the consumer's loop computes both with one `sincos` call per element (the forward
/// pass of `sum(sin(x))` keeps `cos(x)` for the reverse pass).
fn map_sincos_pairs(
    f: &Function,
    fused: &HashMap<Value, mcir_ir::Inst>,
) -> HashMap<mcir_ir::Inst, mcir_ir::Inst> {
    let mut out = HashMap::default();
    for (_, data) in f.blocks.iter() {
        let pos = |i: mcir_ir::Inst| data.insts.iter().position(|&x| x == i);
        // The instruction that consumes a fused map's chain: follow the single use.
        let root_of = |mut i: mcir_ir::Inst| -> Option<mcir_ir::Inst> {
            for _ in 0..data.insts.len() {
                let r = f.insts[i].result?;
                let user = *data.insts.iter().find(|&&u| f.insts[u].args.contains(&r))?;
                if !f.insts[user].result.is_some_and(|ur| fused.contains_key(&ur)) {
                    return Some(user);
                }
                i = user;
            }
            None
        };
        for &m in &data.insts {
            let dm = &f.insts[m];
            let (Op::MapFUnary(op @ (FUnOp::Sin | FUnOp::Cos)), Some(mr)) = (&dm.op, dm.result) else {
                continue;
            };
            if !fused.contains_key(&mr) || fused.contains_key(&dm.args[0]) {
                continue;
            }
            let want = if *op == FUnOp::Sin { FUnOp::Cos } else { FUnOp::Sin };
            let Some(root) = root_of(m) else { continue };
            let Some(root_pos) = pos(root) else { continue };
            let partner = data.insts.iter().copied().find(|&p| {
                let dp = &f.insts[p];
                dp.op == Op::MapFUnary(want)
                    && dp.args[0] == dm.args[0]
                    && dp.result.is_some_and(|pr| !fused.contains_key(&pr))
                    && !out.values().any(|&q| q == p)
            });
            let Some(p) = partner else { continue };
            let Some(pr) = f.insts[p].result else { continue };
            // Nothing reads the partner before the consumer's loop makes it.
            let early_use = data.insts[..=root_pos].iter().any(|&u| f.insts[u].args.contains(&pr));
            // Nothing writes memory (the operand's elements, say) between the two maps
            // and the consumer: the consumer's loop computes both from the elements as
            // they are when it runs.
            let (Some(at_m), Some(at_p)) = (pos(m), pos(p)) else { continue };
            let span = at_m.min(at_p)..=root_pos.max(at_p);
            let written = data.insts[span].iter().any(|&u| {
                let op = &f.insts[u].op;
                mcir_ir::memory::may_write_elements(op) || matches!(op, Op::ArenaRelease | Op::TapeRelease)
            });
            if !early_use && !written {
                out.insert(m, p);
            }
        }
    }
    out
}

/// The pairs `sin x`, `cos x` of one operand in one block (see `FnLower::sincos_partner`).
fn sincos_pairs(f: &Function) -> HashMap<mcir_ir::Inst, Value> {
    let mut out = HashMap::default();
    for (_, data) in f.blocks.iter() {
        let mut first: HashMap<(Value, bool), (mcir_ir::Inst, Value)> = HashMap::default();
        for &i in &data.insts {
            let d = &f.insts[i];
            let (Op::FUnary(op @ (FUnOp::Sin | FUnOp::Cos)), Some(r)) = (&d.op, d.result) else { continue };
            let is_sin = *op == FUnOp::Sin;
            if let Some(&(other, other_r)) = first.get(&(d.args[0], !is_sin)) {
                if !out.contains_key(&other) {
                    out.insert(other, r);
                    out.insert(i, other_r);
                }
            } else {
                first.entry((d.args[0], is_sin)).or_insert((i, r));
            }
        }
    }
    out
}

/// How many bytes of the arena `op` (with `nargs` arguments) takes, when that is fixed.
fn fixed_allocation(op: &Op, nargs: usize) -> Option<i64> {
    let bytes = match op {
        Op::RefNew => 8,
        Op::TupleNew | Op::StructNew(_) if nargs > 0 => 8 * nargs as i64,
        Op::StackNew => stack::HEADER_BYTES as i64 + 8 * STACK_FIRST,
        _ => return None,
    };
    Some((bytes + 7) / 8 * 8)
}

/// A load or store of an unrolled body whose indices the test in front of the copies
/// checks once for all of them (see `FnLower::guarded_accesses`).
struct Guarded {
    inst: mcir_ir::Inst,
    n_idx: usize,
    /// The dimensions it checks, and whether each index moves with the counter (else it
    /// is fixed for the loop).
    dims: Vec<(usize, bool)>,
}

/// How an unrolled loop's copies run (see `FnLower::copy_plan`).
struct CopyPlan {
    unroll: crate::unroll::Unroll,
    guarded: Vec<Guarded>,
    pairs: Option<crate::unroll::Pairs>,
}

/// The copies of an unrolled loop's body being lowered, for addresses that step.
struct Stepped {
    /// The loop, and by how much its counter moves from one copy to the next.
    unroll: crate::unroll::Unroll,
    delta: i64,
    /// For each stepping access: the address of the previous copy's, and how many bytes
    /// it moves per copy.
    previous: HashMap<mcir_ir::Inst, (CValue, CValue)>,
}

/// A number of bytes taken from the arena: known when the code is compiled, or computed
/// when it runs.
#[derive(Clone, Copy)]
enum Amount {
    Fixed(i64),
    Computed(CValue),
}

/// The fewest fields of a record whose fields are stored as they are computed.
const EARLY_RECORD_FIELDS: usize = 6;

/// Room for this many values in a new stack, before it first grows.
const STACK_FIRST: i64 = 16;

/// The most elements an array made in native code (`zeros(n, m)`, `fill(x, n)`,
/// `zeros_like`; of any rank, and each extent below it too) may have to be made inline
/// from the arena's window
/// rather than by a runtime call: a call costs about as much as storing 64 elements one
/// by one, and the runtime fills a longer array faster (an ODE's state of 1000
/// elements, made on every step, took 60 % longer inline).
const INLINE_ARRAY_ELEMS: i64 = 64;

/// The shape of an array made inline (`array_from_window`).
enum Extents {
    /// The extents given, one to three.
    Given(Vec<CValue>),
    /// Those of an existing array of the given rank.
    Like(CValue, u8),
}

/// The `stack.reserve`s of `f` whose stack is used by nothing else but `stack.put`s and
/// being recorded in a tuple or struct (the tape): between such a reservation and a put
/// into its room (which uses its result, so runs after it), the stack cannot have grown
/// or moved, unless the reservation ran again and made a new result.
fn sole_reservations(f: &Function) -> HashSet<Value> {
    if !f.insts.values().any(|d| matches!(d.op, Op::StackReserve)) {
        return HashSet::default();
    }
    let mut reservations: HashMap<Value, Vec<Value>> = HashMap::default();
    let mut other_uses: HashSet<Value> = HashSet::default();
    // Each put's stack and the reservation it indexes from: a cursor holds one stack's
    // data, so an offset used to index another stack disqualifies its reservation.
    let mut puts: Vec<(Value, Value)> = Vec::new();
    for (_, d) in f.insts.iter() {
        match d.op {
            Op::StackReserve => {
                if let (Some(&st), Some(r)) = (d.args.first(), d.result) {
                    reservations.entry(st).or_default().push(r);
                }
                other_uses.extend(d.args.iter().skip(1).copied());
            }
            Op::StackPut => {
                if let [st, base, ..] = d.args[..] {
                    puts.push((st, base));
                }
                other_uses.extend(d.args.iter().skip(2).copied());
            }
            Op::TupleNew | Op::StructNew(_) => {}
            _ => other_uses.extend(d.args.iter().copied()),
        }
    }
    for (_, data) in f.blocks.iter() {
        other_uses.extend(data.term.uses());
    }
    let foreign: HashSet<Value> = puts
        .iter()
        .filter(|&&(st, base)| reservations.get(&st).is_none_or(|rs| !rs.contains(&base)))
        .map(|&(_, base)| base)
        .collect();
    reservations
        .into_iter()
        .filter(|(st, rs)| rs.len() == 1 && !other_uses.contains(st))
        .flat_map(|(_, rs)| rs)
        .filter(|r| !foreign.contains(r))
        .collect()
}

/// The most values a stack made for its reservation has room for; a larger reservation
/// grows it through the runtime, as for any stack.
const MAX_SIZED_ROOM: i64 = 4096;

/// The stacks that `f` makes in the block of their sole reservation (`sole_reservations`)
/// from constant start and extra counts: made with room for what the reservation asks,
/// not [`STACK_FIRST`] values. A recursion's inner node then takes memory for the few
/// records its loop keeps, not for sixteen on each of its stacks.
fn sized_stacks(f: &Function) -> HashMap<Value, (Value, i64, i64, i64)> {
    let sole = sole_reservations(f);
    let mut out = HashMap::default();
    for (_, data) in f.blocks.iter() {
        let made: HashSet<Value> = data
            .insts
            .iter()
            .filter(|&&i| f.insts[i].op == Op::StackNew)
            .filter_map(|&i| f.insts[i].result)
            .collect();
        for &i in &data.insts {
            let d = &f.insts[i];
            let (Op::StackReserve, Some(r), [st, lo, hi, extra, rest @ ..]) = (&d.op, d.result, &d.args[..])
            else {
                continue;
            };
            let width = rest.first().map_or(Some(1), |&w| f.const_int(w));
            if let (true, true, Some(lo), Some(extra), Some(width)) =
                (sole.contains(&r), made.contains(st), f.const_int(*lo), f.const_int(*extra), width)
            {
                out.insert(*st, (*hi, lo, extra, width));
            }
        }
    }
    out
}

/// The stacks `f` reads from a record it was given and only pops or peeks: the record's
/// field is read once, and the record itself only has its fields read (it is not passed
/// on or stored), so no other value in the function refers to the stack and nothing but
/// these pops changes it while the function runs. A reverse pass's tape stacks are so.
fn popped_only(f: &Function) -> HashSet<Value> {
    let mut fields: HashMap<(Value, u32), Vec<Value>> = HashMap::default();
    let mut popped: HashSet<Value> = HashSet::default();
    let mut other_uses: HashSet<Value> = HashSet::default();
    for (_, d) in f.insts.iter() {
        match d.op {
            Op::StructGet(_, k) => {
                if let (Some(&rec), Some(r)) = (d.args.first(), d.result) {
                    fields.entry((rec, k)).or_default().push(r);
                }
            }
            Op::StackPop | Op::StackPeek => {
                popped.extend(d.args.first().copied());
                other_uses.extend(d.args.iter().skip(1).copied());
            }
            _ => other_uses.extend(d.args.iter().copied()),
        }
    }
    for (_, data) in f.blocks.iter() {
        other_uses.extend(data.term.uses());
    }
    fields
        .into_iter()
        .filter(|((rec, _), vs)| vs.len() == 1 && !other_uses.contains(rec))
        .flat_map(|(_, vs)| vs)
        .filter(|v| popped.contains(v) && !other_uses.contains(v))
        .collect()
}

/// The runs of pops in `f`'s blocks (see `FnLower::pop_runs`): pops of one stack of
/// `popped` (whose length only pops change) that follow each other in a block with
/// nothing else using that stack between them. A record of several values is popped so.
fn pop_runs(f: &Function, popped: &HashSet<Value>) -> (HashMap<mcir_ir::Inst, i64>, HashSet<mcir_ir::Inst>) {
    let mut runs = HashMap::default();
    let mut rest = HashSet::default();
    for (_, data) in f.blocks.iter() {
        // Per stack: the run being built (its first pop and length).
        let mut open: HashMap<Value, (mcir_ir::Inst, i64)> = HashMap::default();
        for &i in &data.insts {
            let d = &f.insts[i];
            for (k, a) in d.args.iter().enumerate() {
                if !popped.contains(a) {
                    continue;
                }
                if d.op == Op::StackPop && k == 0 {
                    match open.get_mut(a) {
                        Some((_, n)) => {
                            *n += 1;
                            rest.insert(i);
                        }
                        None => {
                            open.insert(*a, (i, 1));
                        }
                    }
                } else if let Some((first, n)) = open.remove(a) {
                    runs.insert(first, n);
                }
            }
        }
        runs.extend(open.into_values());
    }
    runs.retain(|_, n| *n > 1);
    (runs, rest)
}

/// A parameter of loop header `h` that every back edge moves by exactly one (`p + 1`,
/// `p - 1`, `p + -1`), so it passes a multiple of 1024 every 1024 iterations.
fn unit_step_param(f: &Function, h: mcir_ir::Block, cfg: &ControlFlow) -> Option<Value> {
    let is_unit = |v: Value| {
        let mcir_ir::ValueDef::Inst(i) = f.values[v].def else { return false };
        matches!(f.insts[i].op, Op::IConst(1) | Op::IConst(-1))
    };
    let steps = |arg: Value, p: Value| {
        let mcir_ir::ValueDef::Inst(i) = f.values[arg].def else { return false };
        let d = &f.insts[i];
        match d.op {
            Op::IBinary(IBinOp::Add) => {
                (d.args[0] == p && is_unit(d.args[1])) || (d.args[1] == p && is_unit(d.args[0]))
            }
            Op::IBinary(IBinOp::Sub) => d.args[0] == p && is_unit(d.args[1]),
            _ => false,
        }
    };
    let back_edges: Vec<&BlockCall> =
        cfg.latches(h).flat_map(|l| f.blocks[l].term.successors().filter(|c| c.block == h)).collect();
    if back_edges.is_empty() {
        return None;
    }
    f.blocks[h].params.iter().enumerate().find_map(|(k, &p)| {
        let counts = f.value_type(p) == TypeTable::I64
            && back_edges.iter().all(|call| call.args.get(k).is_some_and(|&a| steps(a, p)));
        counts.then_some(p)
    })
}

/// One element of a fused elementwise expression.
enum Elem {
    /// The element of the `k`-th array read by the loop.
    Array(usize),
    /// A scalar operand, the same for every element.
    Scalar(CValue),
    Unary(FUnOp, Box<Elem>),
    /// `sin` (or `cos`) of an element whose partner map, `cos` (or `sin`) of the same
    /// array, is computed in the same loop by one `sincos` call and stored at the
    /// element's place in the partner's array (whose data this is).
    SinCos(FUnOp, Box<Elem>, CValue),
    Binary(FBinOp, Box<Elem>, Box<Elem>),
    PowI(Box<Elem>, CValue),
}

impl<'a> Lowering<'a> {
    /// Lowers `func` into `clif` (a fresh Cranelift function with the right signature).
    pub fn lower(
        &mut self,
        func: FuncId,
        clif: &mut cranelift_codegen::ir::Function,
        fctx: &mut FunctionBuilderContext,
    ) -> Result<(), String> {
        // Loops around reductions run side by side, loops give back their iterations'
        // memory as on the interpreter, elements inner loops add into are held in
        // values, and loops checking constant columns get a copy without those checks.
        let native = mcir_ir::native_form(self.module, &self.module.funcs[func], self.escapes, false);
        let f = &*native;
        let returns_fields = self.in_registers.get(func.index()).copied().unwrap_or(false);
        clif.signature = signature(self.jit, &self.module.types, f, returns_fields);
        clif.name = UserFuncName::user(0, func.index() as u32);
        let target = self.jit.target_config();
        let b = FunctionBuilder::new(clif, fctx);
        let fused = crate::fuse::fused_members(f, &self.module.types)
            .into_iter()
            .filter_map(|i| f.insts[i].result.map(|r| (r, i)))
            .collect();
        let register_tuples = register_tuples(f, self.in_registers, returns_fields);
        let popped_only = popped_only(f);
        let (pop_runs, unchecked_pops) = pop_runs(f, &popped_only);
        // A stack `unset` is stored (see `Op::Unset`); other unset fields are not.
        let unset = f
            .insts
            .iter()
            .filter(|(_, d)| matches!(d.op, Op::Unset))
            .filter_map(|(_, d)| d.result)
            .filter(|&r| !matches!(self.module.types.get(f.value_type(r)), mcir_ir::Type::Stack(_)))
            .collect();
        let releases_arena = f.insts.iter().any(|(_, d)| matches!(d.op, Op::ArenaRelease | Op::TapeRelease));
        let mut fl = FnLower {
            l: self,
            b,
            f,
            ctx: CValue::from_u32(0),
            unwind: CBlock::from_u32(0),
            vals: vec![None; f.values.len()],
            blocks: Vec::new(),
            refs: HashMap::default(),
            proofs: f.proofs_in_place(),
            loop_depth: Vec::new(),
            fused,
            block_bytes: 0,
            narrow_span: None,
            in_tape: false,
            piece: None,
            early_records: HashMap::default(),
            early_fields: HashMap::default(),
            releases_arena,
            header_loads: if releases_arena { flags() } else { header_flags() },
            returns_fields,
            register_tuples,
            tuple_fields: HashMap::default(),
            unset,
            stepped: None,
            latch_target: HashMap::default(),
            sole_reservations: sole_reservations(f),
            sized_stacks: sized_stacks(f),
            cursors: HashMap::default(),
            popped_only,
            pop_cursors: HashMap::default(),
            pop_runs,
            unchecked_pops,
            sincos_partner: sincos_pairs(f),
            sincos_slot: None,
            map_partner: HashMap::default(),
            map_partner_of: HashMap::default(),
            elem_offset: None,
        };
        fl.map_partner = map_sincos_pairs(f, &fl.fused);
        fl.map_partner_of = fl.map_partner.iter().map(|(&m, &p)| (p, m)).collect();
        fl.run()?;
        fl.b.finalize(target);
        Ok(())
    }
}

impl FnLower<'_, '_> {
    fn site(&mut self, span: Span) -> i64 {
        let span = if span == self.f.span || span.end == 0 { self.narrow_span.unwrap_or(span) } else { span };
        self.l.sites.push((self.l.module.function_at(self.f, span).to_string(), span));
        (self.l.sites.len() - 1) as i64
    }

    fn func_ref(&mut self, id: CFuncId) -> FuncRef {
        if let Some(&r) = self.refs.get(&id) {
            return r;
        }
        let r = self.l.jit.declare_func_in_func(id, self.b.func);
        self.refs.insert(id, r);
        r
    }

    fn rt_call(&mut self, name: &str, args: &[CValue]) -> Option<CValue> {
        let id = *self.l.runtime.get(name)?;
        let r = self.func_ref(id);
        // The runtime allocates from `Ctx::bump`: the tape region's window goes there
        // for the call when allocations take from it.
        let in_tape = self.in_tape;
        if in_tape {
            self.exchange_windows(true);
        }
        let call = self.b.ins().call(r, args);
        let result = self.b.inst_results(call).first().copied();
        if in_tape {
            self.exchange_windows(false);
        }
        result
    }

    /// A call that may fail: on failure, return at once.
    fn rt_call_checked(&mut self, name: &str, args: &[CValue]) -> Option<CValue> {
        let r = self.rt_call(name, args);
        self.status_check();
        r
    }

    fn status_check(&mut self) {
        let st = self.b.ins().load(types::I64, flags(), self.ctx, ctx::STATUS);
        let cont = self.b.create_block();
        self.b.ins().brif(st, self.unwind, &[], cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// Fails with `code` when `bad` is true.
    fn check(&mut self, bad: CValue, site: i64, code: i64, payload: [CValue; 3]) {
        let fail = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(bad, fail, &[], cont, &[]);
        self.b.switch_to_block(fail);
        self.b.set_cold_block(fail);
        let (s, c) = (self.b.ins().iconst(P, site), self.b.ins().iconst(P, code));
        self.rt_call("mc_fail", &[self.ctx, s, c, payload[0], payload[1], payload[2]]);
        self.b.ins().jump(self.unwind, &[]);
        self.b.switch_to_block(cont);
    }

    fn zero(&mut self) -> CValue {
        self.b.ins().iconst(P, 0)
    }

    fn v(&self, x: Value) -> Result<CValue, String> {
        self.vals.get(x.index()).copied().flatten().ok_or_else(|| format!("{x} is used before it is lowered"))
    }

    fn interrupt_check(&mut self, site: i64) {
        let c = self.ctx;
        let addr = self.b.ins().iadd_imm_s(c, ctx::INTERRUPT as i64);
        let flag = self.b.ins().atomic_load(types::I64, flags(), addr);
        let z = self.zero();
        self.check(flag, site, FAIL_TIMEOUT, [z, z, z]);
    }

    /// The time-limit test of a loop whose header has a counter that steps by one, once
    /// every 1024 iterations, through the runtime and the shared unwinding block. Every
    /// other iteration pays one test of the counter and keeps the context out of its
    /// registers. (A failure block of its own, outside the loop, would also stop
    /// Cranelift hoisting invariant code out of the rest of the loop.)
    ///
    /// A loop that holds other loops tests when the counter is a multiple of 1024 (a
    /// `mask` of 1023, or fewer low bits for a loop that runs several iterations per
    /// pass), so also on entry at 0: whatever runs inside it runs between two tests. An
    /// innermost loop (`innermost`) tests when the counter's low bits are all ones, so a
    /// short one, entered at 0 and left before 1023, does not test at all: short inner
    /// loops (the gmm's `for j in 0..r`, entered for every point and component) paid
    /// for a test on every entry. Every stretch of running without a test is then at
    /// most 1024 iterations of an innermost loop for each of 1024 iterations of the
    /// loop around it.
    fn poll_every(&mut self, counter: CValue, site: i64, mask: i64, innermost: bool) {
        let low = self.b.ins().band_imm_u(counter, mask);
        let low = if innermost {
            // False (poll) when every bit of the mask is set: one comparison.
            self.b.ins().icmp_imm_u(IntCC::NotEqual, low, mask)
        } else {
            low
        };
        let poll = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(low, cont, &[], poll, &[]);
        self.b.switch_to_block(poll);
        self.b.set_cold_block(poll);
        // The flag is read here; only a raised one goes through the runtime. (A loop
        // entered at counter 0 comes here on every entry: short inner loops do so often.)
        let addr = self.b.ins().iadd_imm_s(self.ctx, ctx::INTERRUPT as i64);
        let flag = self.b.ins().atomic_load(types::I64, flags(), addr);
        let raised = self.b.create_block();
        self.b.ins().brif(flag, raised, &[], cont, &[]);
        self.b.switch_to_block(raised);
        self.b.set_cold_block(raised);
        let s = self.b.ins().iconst(P, site);
        self.rt_call("poll", &[self.ctx, s]);
        self.status_check();
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// Lowers the instructions of block `b` into the current Cranelift block.
    fn block_insts(&mut self, b: mcir_ir::Block) -> Result<(), String> {
        let f = self.f;
        let data = &f.blocks[b];
        let sizes = data
            .insts
            .iter()
            .filter(|&&i| {
                !f.insts[i].in_tape
                    && !f.insts[i].result.is_some_and(|r| {
                        self.register_tuples.contains(&r) || self.sized_stacks.contains_key(&r)
                    })
            })
            .filter_map(|&i| fixed_allocation(&f.insts[i].op, f.insts[i].args.len()));
        let (count, total) = sizes.fold((0, 0), |(c, t), s| (c + 1, t + s));
        self.block_bytes = if count > 1 { total } else { 0 };
        self.piece = None;
        self.take_early_records(b)?;
        // Each instruction's narrower span: its own, or the next one's in the block.
        let narrow = |s: Span| s.end > 0 && s != f.span;
        let mut next = narrow(data.term_span).then_some(data.term_span);
        let mut narrow_spans = vec![None; data.insts.len()];
        for (k, &inst) in data.insts.iter().enumerate().rev() {
            if narrow(f.insts[inst].span) {
                next = Some(f.insts[inst].span);
            }
            narrow_spans[k] = next;
        }
        for (k, &inst) in data.insts.iter().enumerate() {
            self.narrow_span = narrow_spans[k];
            let d = &f.insts[inst];
            if d.result.is_some_and(|r| self.fused.contains_key(&r))
                || self.map_partner_of.contains_key(&inst)
            {
                continue;
            }
            let tape = self.takes_tape(inst);
            if tape {
                self.allocate_in_tape(true);
            }
            if d.args.iter().any(|a| self.fused.contains_key(a)) {
                self.fused_loop(inst, &data.insts)?;
            } else {
                self.inst(inst)?;
            }
            if tape {
                self.allocate_in_tape(false);
            }
            if let Some(r) = d.result {
                self.store_early_fields(r)?;
            }
        }
        self.narrow_span = None;
        Ok(())
    }

    /// Takes the memory of block `b`'s records of at least [`EARLY_RECORD_FIELDS`] fields
    /// (see `early_records`) and stores the fields whose values come from before the
    /// block. A block that marks or releases the arena keeps its allocations in order.
    fn take_early_records(&mut self, b: mcir_ir::Block) -> Result<(), String> {
        let f = self.f;
        self.early_records.clear();
        self.early_fields.clear();
        let insts = &f.blocks[b].insts;
        let records: Vec<mcir_ir::Inst> = insts
            .iter()
            .copied()
            .filter(|&i| {
                let d = &f.insts[i];
                matches!(d.op, Op::TupleNew | Op::StructNew(_))
                    && !d.in_tape
                    && d.args.len() >= EARLY_RECORD_FIELDS
                    && !d.result.is_some_and(|r| self.register_tuples.contains(&r))
                    && !d.args.iter().any(|a| self.fused.contains_key(a))
            })
            .collect();
        if records.is_empty()
            || insts.iter().any(|&i| {
                matches!(f.insts[i].op, Op::ArenaMark | Op::ArenaRelease | Op::TapeMark | Op::TapeRelease)
            })
        {
            return Ok(());
        }
        let defined_here: HashSet<Value> = insts.iter().filter_map(|&i| f.insts[i].result).collect();
        for inst in records {
            let d = &f.insts[inst];
            let site = self.site(d.span);
            let base = self.alloc(8 * d.args.len() as i64, site);
            let mut stored = vec![false; d.args.len()];
            for (k, &a) in d.args.iter().enumerate() {
                if self.unset.contains(&a) {
                    stored[k] = true;
                } else if defined_here.contains(&a) {
                    self.early_fields.entry(a).or_default().push((inst, k));
                } else {
                    let v = self.v(a)?;
                    self.b.ins().store(flags(), v, base, 8 * k as i32);
                    stored[k] = true;
                }
            }
            self.early_records.insert(inst, (base, stored));
        }
        Ok(())
    }

    /// Stores `v` into the fields of early records that hold it.
    fn store_early_fields(&mut self, v: Value) -> Result<(), String> {
        let Some(fields) = self.early_fields.remove(&v) else { return Ok(()) };
        let Some(cv) = self.vals[v.index()] else { return Ok(()) };
        for (record, k) in fields {
            if let Some((base, stored)) = self.early_records.get_mut(&record) {
                self.b.ins().store(flags(), cv, *base, 8 * k as i32);
                stored[k] = true;
            }
        }
        Ok(())
    }

    /// Whether a body block can be lowered more than once: fused maps and `sin`/`cos`
    /// pairs keep state across the instructions of one block, so such bodies are left
    /// as they are.
    fn may_copy(&self, body: mcir_ir::Block) -> bool {
        self.f.blocks[body].insts.iter().all(|&i| {
            let d = &self.f.insts[i];
            !self.sincos_partner.contains_key(&i)
                && !d.result.is_some_and(|r| self.fused.contains_key(&r))
                && !d.args.iter().any(|a| self.fused.contains_key(a))
        })
    }

    /// In front of loop header `h` (whose block is current, its parameters bound):
    /// when the next `u.factor` tests of the loop would pass, run that many copies of
    /// its body and come back; otherwise go on to the header as written, in a block of
    /// its own that the loop's body jumps back to (see `crate::unroll`). Leaves that
    /// block current, `h`'s parameters bound to its parameters.
    fn unrolled_copies(&mut self, h: mcir_ir::Block, plan: CopyPlan, site: i64) -> Result<(), String> {
        let f = self.f;
        let CopyPlan { unroll: u, guarded, pairs } = plan;
        // The header computes only constants, tests and fixed arithmetic; its bound may
        // be one of them.
        self.block_insts(h)?;
        let counter = self.v(u.counter)?;
        let saved_proofs = self.trust_guarded(&guarded);
        let distinct = pairs.as_ref().map(|p| p.distinct.clone()).unwrap_or_default();
        let short = self.copies_cannot_run(u, counter, &guarded, &distinct)?;
        let copies = self.b.create_block();
        let params = f.blocks[h].params.clone();
        let bound: Vec<Option<CValue>> = params.iter().map(|p| self.vals[p.index()]).collect();
        // The loop as written is a loop of its own, with a header block taking the same
        // parameters, which its body jumps back to: once fewer than `factor` iterations
        // are left, the last ones do not test for copies again.
        let rest = self.b.create_block();
        let mut into_rest: Vec<cranelift_codegen::ir::BlockArg> = Vec::with_capacity(params.len());
        let mut rest_params: Vec<Option<CValue>> = Vec::with_capacity(params.len());
        for v in &bound {
            let v = v.ok_or("an unrolled loop's header parameter is not lowered")?;
            let t = self.b.func.dfg.value_type(v);
            rest_params.push(Some(self.b.append_block_param(rest, t)));
            into_rest.push(v.into());
        }
        // The target that leaves the unrolled loop first (see `terminator`).
        self.b.ins().brif(short, rest, &into_rest, copies, &[]);
        self.b.switch_to_block(copies);
        let Terminator::Jump(back) = &f.blocks[u.body].term else {
            return Err("an unrolled loop's body must jump back to its header".into());
        };
        let up = matches!(u.test, crate::unroll::Test::Below { .. });
        let counter_at = params.iter().position(|&p| p == u.counter).ok_or("no counter")?;
        let mut args: Vec<CValue> = Vec::new();
        match pairs {
            Some(pairs) if !pairs.sums.is_empty() => {
                // Sums run as two partial sums each, in the lanes of a vector carried
                // round a loop of their own; they are added together when it ends.
                let vloop = self.b.create_block();
                let vexit = self.b.create_block();
                let vcounter = self.b.append_block_param(vloop, P);
                let xcounter = self.b.append_block_param(vexit, P);
                let mut start: Vec<cranelift_codegen::ir::BlockArg> = vec![counter.into()];
                let mut vsums = Vec::new();
                let mut xsums = Vec::new();
                let zero = self.b.ins().f64const(0.0);
                let zeros = self.b.ins().splat(types::F64X2, zero);
                for &k in &pairs.sums {
                    let s0 = self.v(params[k])?;
                    start.push(self.b.ins().insertlane(zeros, s0, 0).into());
                    vsums.push(self.b.append_block_param(vloop, types::F64X2));
                    xsums.push(self.b.append_block_param(vexit, types::F64X2));
                }
                self.b.ins().jump(vloop, &start);
                self.b.switch_to_block(vloop);
                self.poll_every(vcounter, site, 1023 & !(u.factor - 1), true);
                let carried = pairs.sums.iter().zip(&vsums).map(|(&k, &v)| (params[k], v)).collect();
                let (c, lanes_in) = self.pair_copies(h, u, vcounter, carried, &pairs)?;
                let more_short = self.copies_cannot_run(u, c, &guarded, &distinct)?;
                let mut out: Vec<cranelift_codegen::ir::BlockArg> = vec![c.into()];
                for &k in &pairs.sums {
                    out.push(lanes_in[&params[k]].into());
                }
                self.b.ins().brif(more_short, vexit, &out, vloop, &out);
                self.b.switch_to_block(vexit);
                args = params.iter().map(|&p| self.v(p)).collect::<Result<_, _>>()?;
                args[counter_at] = xcounter;
                for (&k, &v) in pairs.sums.iter().zip(&xsums) {
                    let lo = self.b.ins().extractlane(v, 0);
                    let hi = self.b.ins().extractlane(v, 1);
                    args[k] = self.b.ins().fadd(lo, hi);
                }
            }
            Some(pairs) => {
                // Every other header parameter goes round unchanged.
                let (c, _) = self.pair_copies(h, u, counter, HashMap::default(), &pairs)?;
                args = params.iter().map(|&p| self.v(p)).collect::<Result<_, _>>()?;
                args[counter_at] = c;
            }
            None => {
                let delta = if up { 1 } else { -1 };
                self.stepped = Some(Stepped { unroll: u, delta, previous: HashMap::default() });
                for copy in 0..u.factor {
                    if copy > 0 {
                        for (k, p) in params.iter().enumerate() {
                            self.vals[p.index()] = args.get(k).copied();
                        }
                    }
                    self.block_insts(h)?;
                    self.block_insts(u.body)?;
                    args = back.args.iter().map(|&a| self.v(a)).collect::<Result<_, _>>()?;
                }
                self.stepped = None;
            }
        }
        let jump_args: Vec<cranelift_codegen::ir::BlockArg> = args.iter().map(|&v| v.into()).collect();
        self.b.ins().jump(self.blocks[h.index()], &jump_args);
        for (p, v) in params.iter().zip(rest_params) {
            self.vals[p.index()] = v;
        }
        // The loop as written, for the last iterations, checks them again.
        self.restore_proofs(saved_proofs);
        self.b.switch_to_block(rest);
        self.latch_target.insert(h, rest);
        Ok(())
    }

    /// `u.factor / 2` pairs of iterations of loop `h` from counter value `c`, the sums
    /// (`pairs.sums`, header positions) carried from pair to pair in the vectors
    /// `carried` (header parameter to vector): returns the counter after them and the
    /// sums' vectors then.
    fn pair_copies(
        &mut self,
        h: mcir_ir::Block,
        u: crate::unroll::Unroll,
        mut c: CValue,
        mut carried: HashMap<Value, CValue>,
        pairs: &crate::unroll::Pairs,
    ) -> Result<(CValue, HashMap<Value, CValue>), String> {
        let f = self.f;
        let up = matches!(u.test, crate::unroll::Test::Below { .. });
        let Terminator::Jump(back) = &f.blocks[u.body].term else {
            return Err("an unrolled loop's body must jump back to its header".into());
        };
        let params = &f.blocks[h].params;
        for _ in 0..u.factor / 2 {
            self.vals[u.counter.index()] = Some(c);
            self.block_insts(h)?;
            let lanes = self.paired_body(&u, up, &carried, pairs)?;
            for &k in &pairs.sums {
                let next = *lanes.get(&back.args[k]).ok_or("a sum left its lanes")?;
                carried.insert(params[k], next);
            }
            c = self.b.ins().iadd_imm_s(c, if up { 2 } else { -2 });
        }
        Ok((c, carried))
    }

    /// Marks every index of the `guarded` accesses in bounds, as it is in the copies the
    /// test in front of them admits; returns what the proofs held before.
    fn trust_guarded(&mut self, guarded: &[Guarded]) -> Vec<(mcir_ir::Inst, Option<Vec<bool>>)> {
        guarded.iter().map(|g| (g.inst, self.proofs.in_bounds.insert(g.inst, vec![true; g.n_idx]))).collect()
    }

    /// Puts back what `trust_guarded` replaced.
    fn restore_proofs(&mut self, saved: Vec<(mcir_ir::Inst, Option<Vec<bool>>)>) {
        for (inst, proven) in saved {
            match proven {
                Some(p) => self.proofs.in_bounds.insert(inst, p),
                None => self.proofs.in_bounds.remove(&inst),
            };
        }
    }

    /// How loop `u`'s copies run: the accesses the test in front of them checks (loads
    /// and stores whose indices are proven, fixed for the loop, or moving with the
    /// counter, into arrays the loop does not make; in the copies they need no check),
    /// and whether they run in vector pairs. A body that does, of up to
    /// `crate::unroll::PAIRS_FOUR_UP_TO` instructions, gets four copies instead of two:
    /// two pairs per pass halve the loop control a pass pays for, and a pair's code is
    /// about one scalar copy's. A body too long to copy unless it runs in pairs
    /// (`pairs_only`) that does not is left as it is.
    fn copy_plan(&mut self, mut u: crate::unroll::Unroll) -> Option<CopyPlan> {
        let f = self.f;
        let guarded = self.guarded_accesses(u);
        let saved = self.trust_guarded(&guarded);
        let pairs = crate::unroll::pairs(f, &u, &self.proofs, &self.l.module.types, f.is_reverse_pass());
        self.restore_proofs(saved);
        let work = f.blocks[u.body]
            .insts
            .iter()
            .filter(|&&i| !matches!(f.insts[i].op, Op::IConst(_) | Op::FConst(_) | Op::BConst(_)))
            .count();
        if pairs.is_none() && u.pairs_only {
            return None;
        }
        if pairs.is_some() && u.factor == 2 && work <= crate::unroll::PAIRS_FOUR_UP_TO {
            u.factor = 4;
        }
        Some(CopyPlan { unroll: u, guarded, pairs })
    }

    /// Whether the next `u.factor` iterations from `counter` cannot all run as copies:
    /// the loop's test would fail before, an index of a guarded access would leave its
    /// extent, or two arrays that must differ (`distinct`) are the same array. The
    /// values it reads are fixed for the loop, so it can be asked again at the end of a
    /// run of copies.
    fn copies_cannot_run(
        &mut self,
        u: crate::unroll::Unroll,
        counter: CValue,
        guarded: &[Guarded],
        distinct: &[(Value, Value)],
    ) -> Result<CValue, String> {
        let below_by = u.factor - 1;
        let up = matches!(u.test, crate::unroll::Test::Below { .. });
        let mut short = match u.test {
            crate::unroll::Test::Below { bound } => {
                // `counter + factor <= bound`, as `counter < bound - (factor - 1)`; a bound
                // so low that the subtraction would wrap admits no counter.
                let n = self.v(bound)?;
                let lowest = self.b.ins().iconst(P, i64::MIN);
                let wraps = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, n, i64::MIN + below_by);
                let shifted = self.b.ins().iadd_imm_s(n, -below_by);
                let limit = self.b.ins().select(wraps, lowest, shifted);
                self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, counter, limit)
            }
            crate::unroll::Test::Above { floor } => {
                // `counter - (factor - 1) > floor`; a floor so high that the addition
                // would wrap admits no counter.
                let n = self.v(floor)?;
                let highest = self.b.ins().iconst(P, i64::MAX);
                let wraps = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, n, i64::MAX - below_by);
                let shifted = self.b.ins().iadd_imm_s(n, below_by);
                let limit = self.b.ins().select(wraps, highest, shifted);
                self.b.ins().icmp(IntCC::SignedLessThanOrEqual, counter, limit)
            }
        };
        // What is fixed for the loop is or-ed together before the counter's tests join
        // it, so that it is one value computed in front of the loop rather than one
        // value per test kept across it and or-ed in each time.
        let mut fixed: Option<CValue> = None;
        let either = |b: &mut FunctionBuilder, acc: &mut Option<CValue>, bad: CValue| {
            *acc = Some(match *acc {
                Some(x) => b.ins().bor(x, bad),
                None => bad,
            });
        };
        let mut tested: Vec<(Value, usize, Value)> = Vec::new();
        for g in guarded {
            let d = &self.f.insts[g.inst];
            let a = d.args[0];
            for &(dim, moves) in &g.dims {
                let idx = d.args[1 + dim];
                if tested.contains(&(a, dim, idx)) {
                    continue;
                }
                tested.push((a, dim, idx));
                let arr = self.v(a)?;
                let extent = self.b.ins().load(P, self.header_loads, arr, array::DIMS + 8 * dim as i32);
                if moves {
                    // The copies reach `lowest..=lowest + factor - 1`: in bounds when
                    // `lowest` is below `extent - (factor - 1)` (unsigned, so that a
                    // negative one fails too); an extent is never negative, so that
                    // subtraction cannot wrap, and a negative room admits nothing.
                    let first = self.index_at(u, idx, counter)?;
                    let lowest = if up { first } else { self.b.ins().iadd_imm_s(first, -below_by) };
                    let room = self.b.ins().iadd_imm_s(extent, -below_by);
                    let zero = self.zero();
                    let room = self.b.ins().smax(room, zero);
                    let bad = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, lowest, room);
                    short = self.b.ins().bor(short, bad);
                } else {
                    // Fixed for the loop: a value from outside it, or a constant of
                    // the body, which is not lowered yet.
                    let i = self.index_at(u, idx, counter)?;
                    let bad = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, extent);
                    either(&mut self.b, &mut fixed, bad);
                }
            }
        }
        for &(a, b) in distinct {
            let (a, b) = (self.v(a)?, self.v(b)?);
            let da = self.b.ins().load(P, self.header_loads, a, array::DATA);
            let db = self.b.ins().load(P, self.header_loads, b, array::DATA);
            let same = self.b.ins().icmp(IntCC::Equal, da, db);
            either(&mut self.b, &mut fixed, same);
        }
        Ok(match fixed {
            Some(fixed) => self.b.ins().bor(short, fixed),
            None => short,
        })
    }

    /// Index `v` of the loop's body (the counter, or sums and differences of it with
    /// constants and values fixed for the loop) at counter value `counter`, computed in
    /// the current block.
    fn index_at(&mut self, u: crate::unroll::Unroll, v: Value, counter: CValue) -> Result<CValue, String> {
        let f = self.f;
        if v == u.counter {
            return Ok(counter);
        }
        let mcir_ir::ValueDef::Inst(i) = f.values[v].def else { return self.v(v) };
        let d = &f.insts[i];
        match d.op {
            Op::IConst(c) => Ok(self.b.ins().iconst(P, c)),
            Op::IBinary(op @ (IBinOp::Add | IBinOp::Sub)) if u.defines(f, v) => {
                let a = self.index_at(u, d.args[0], counter)?;
                let b = self.index_at(u, d.args[1], counter)?;
                Ok(if op == IBinOp::Add { self.b.ins().iadd(a, b) } else { self.b.ins().isub(a, b) })
            }
            _ if !u.defines(f, v) => self.v(v),
            _ => Err(format!("{v} does not move with the counter")),
        }
    }

    /// The checked loads and stores of an unrolled body into an array defined outside
    /// the loop whose every index is proven, fixed for the loop, or moving with the
    /// counter (the counter plus or minus constants and fixed values), with at least one
    /// not proven.
    fn guarded_accesses(&self, u: crate::unroll::Unroll) -> Vec<Guarded> {
        let f = self.f;
        let follows = u.moving_values(f, &self.proofs);
        let mut out = Vec::new();
        for &inst in &f.blocks[u.body].insts {
            let d = &f.insts[inst];
            if !matches!(d.op, Op::Load | Op::Store) {
                continue;
            }
            let n_idx = if d.op == Op::Load { d.args.len() - 1 } else { d.args.len() - 2 };
            let Some(&array) = d.args.first() else { continue };
            if u.defines(f, array) {
                continue;
            }
            let proven = self.proofs.in_bounds.get(&inst);
            let mut dims = Vec::new();
            let mut ok = true;
            for k in 0..n_idx {
                if proven.is_some_and(|p| p.get(k).copied().unwrap_or(false)) {
                    continue;
                }
                let idx = d.args[1 + k];
                if follows.contains(&idx) {
                    dims.push((k, true));
                } else if u.fixed(f, idx) {
                    dims.push((k, false));
                } else {
                    ok = false;
                }
            }
            if ok && !dims.is_empty() {
                out.push(Guarded { inst, n_idx, dims });
            }
        }
        out
    }

    /// Two iterations of a body that `crate::unroll::pairs` accepted, in the lanes of
    /// 128-bit vectors: the first iteration's counter is bound; the second's indices
    /// are one above (`up`) or below the first's, so each pair of elements starts at
    /// the lower of the two. `carried` gives the vectors of the sums the body carries;
    /// returns the vectors of the values it computed.
    fn paired_body(
        &mut self,
        u: &crate::unroll::Unroll,
        up: bool,
        carried: &HashMap<Value, CValue>,
        pairs: &crate::unroll::Pairs,
    ) -> Result<HashMap<Value, CValue>, String> {
        let f = self.f;
        let body = u.body;
        let (forward, groups) = (pairs.forward, &pairs.rows);
        let mut lanes: HashMap<Value, CValue> = carried.clone();
        // With `forward`, the vectors of elements accessed so far, by array and indices:
        // every array stored into differs from every other array accessed, so a store
        // changes only elements of its own array.
        let mut known: Vec<(Value, &[Value], CValue)> = Vec::new();
        // The vectors of the values the body pops, once its first pop is lowered.
        let mut popped: HashMap<Value, CValue> = HashMap::default();
        // Each index that moves with the counter at the lower of the two iterations: the
        // first's (`up`) or one below.
        let mut low: HashMap<Value, CValue> = HashMap::default();
        let lower_index =
            |me: &mut Self, low: &mut HashMap<Value, CValue>, v: Value| -> Result<CValue, String> {
                if let Some(&x) = low.get(&v) {
                    return Ok(x);
                }
                let j = me.v(v)?;
                let x = if up { j } else { me.b.ins().iadd_imm_s(j, -1) };
                low.insert(v, x);
                Ok(x)
            };
        // Two columns of a row that move together (`pairs.rows`): a load's vector read
        // with its partner's, and a store's vector waiting for its partner's.
        let mut read_early: HashMap<mcir_ir::Inst, CValue> = HashMap::default();
        let mut waiting: Vec<(mcir_ir::Inst, CValue)> = Vec::new();
        for &inst in &f.blocks[body].insts {
            let d = &f.insts[inst];
            let vector =
                |me: &mut Self, lanes: &HashMap<Value, CValue>, v: Value| -> Result<CValue, String> {
                    match lanes.get(&v) {
                        Some(&x) => Ok(x),
                        None => {
                            let x = me.v(v)?;
                            Ok(me.b.ins().splat(types::F64X2, x))
                        }
                    }
                };
            match &d.op {
                Op::IConst(_) | Op::FConst(_) | Op::IBinary(_) => self.inst(inst)?,
                Op::Load | Op::TrustedLoad | Op::Store | Op::TrustedStore => {
                    let is_load = matches!(d.op, Op::Load | Op::TrustedLoad);
                    let n_idx = if is_load { d.args.len() - 1 } else { d.args.len() - 2 };
                    // The one index that moves with the counter.
                    let dim = (0..n_idx)
                        .find(|&k| !u.fixed(f, d.args[1 + k]))
                        .ok_or("a paired access has no index that moves")?;
                    let moving = d.args[1 + dim];
                    let element = &d.args[1..1 + n_idx];
                    if forward && is_load {
                        if let Some(&(_, _, x)) = known.iter().find(|k| k.0 == d.args[0] && k.1 == element) {
                            if let Some(r) = d.result {
                                lanes.insert(r, x);
                            }
                            continue;
                        }
                    }
                    if let Some(x) = read_early.remove(&inst) {
                        if let Some(r) = d.result {
                            lanes.insert(r, x);
                        }
                        if forward {
                            known.push((d.args[0], element, x));
                        }
                        continue;
                    }
                    let start = lower_index(self, &mut low, moving)?;
                    let mut idx: Vec<CValue> =
                        d.args[1..1 + n_idx].iter().map(|&a| self.v(a)).collect::<Result<_, _>>()?;
                    idx[dim] = start;
                    let arr = self.v(d.args[0])?;
                    let addr = self.element_addr(arr, &idx, 8, None, &vec![true; n_idx]);
                    // Along the last dimension the two elements are side by side; along
                    // another they lie a stride apart and go in and out lane by lane.
                    let apart = (dim + 1 < n_idx).then(|| {
                        let mut stride = self.b.ins().iconst(P, 8);
                        for k in dim + 1..n_idx {
                            let ext =
                                self.b.ins().load(P, self.header_loads, arr, array::DIMS + 8 * k as i32);
                            stride = self.b.ins().imul(stride, ext);
                        }
                        self.b.ins().iadd(addr, stride)
                    });
                    // The first of two columns of a row read together, unless a store
                    // still waiting for its partner may write one of them.
                    let pair = groups.get(&inst).copied().filter(|&(partner, _)| {
                        !is_load
                            || !waiting.iter().any(|&(w, _)| {
                                crate::unroll::may_alias(f, w, inst, forward)
                                    || crate::unroll::may_alias(f, w, partner, forward)
                            })
                    });
                    // Where the two rows of such a pair begin: at this element, or at its
                    // left neighbour.
                    let rows = |me: &mut Self, lower: bool, next: CValue| {
                        if lower {
                            (addr, next)
                        } else {
                            (me.b.ins().iadd_imm_s(addr, -8), me.b.ins().iadd_imm_s(next, -8))
                        }
                    };
                    if is_load {
                        let x = match (pair, apart) {
                            (Some((partner, lower)), Some(next)) => {
                                // Both rows' two columns, then each column's two rows.
                                let (first, second) = rows(self, lower, next);
                                let a = self.b.ins().load(types::F64X2, flags(), first, 0);
                                let b = self.b.ins().load(types::F64X2, flags(), second, 0);
                                let (lo, hi) = self.interleave(a, b);
                                let (own, other) = if lower { (lo, hi) } else { (hi, lo) };
                                read_early.insert(partner, other);
                                own
                            }
                            (_, None) => self.b.ins().load(types::F64X2, flags(), addr, 0),
                            (_, Some(next)) => {
                                let lo = self.b.ins().load(types::F64, flags(), addr, 0);
                                let hi = self.b.ins().load(types::F64, flags(), next, 0);
                                let v = self.b.ins().splat(types::F64X2, lo);
                                self.b.ins().insertlane(v, hi, 1)
                            }
                        };
                        if let Some(r) = d.result {
                            lanes.insert(r, x);
                        }
                        if forward {
                            known.push((d.args[0], element, x));
                        }
                    } else {
                        let x = vector(self, &lanes, d.args[d.args.len() - 1])?;
                        if forward {
                            // An element of the same array survives where an index
                            // is another constant than the store's.
                            known.retain(|k| {
                                k.0 != d.args[0] || mcir_ir::memory::distinct_indices(f, k.1, element)
                            });
                            known.push((d.args[0], element, x));
                        }
                        match (pair, apart) {
                            (Some((partner, lower)), Some(next)) => {
                                match waiting.iter().position(|&(w, _)| w == partner) {
                                    None => waiting.push((inst, x)),
                                    Some(k) => {
                                        // Each row's two columns, stored whole.
                                        let (_, y) = waiting.remove(k);
                                        let (left, right) = if lower { (x, y) } else { (y, x) };
                                        let (first, second) = rows(self, lower, next);
                                        let (row_lo, row_hi) = self.interleave(left, right);
                                        self.b.ins().store(flags(), row_lo, first, 0);
                                        self.b.ins().store(flags(), row_hi, second, 0);
                                    }
                                }
                            }
                            (_, None) => {
                                self.b.ins().store(flags(), x, addr, 0);
                            }
                            (_, Some(next)) => {
                                let lo = self.b.ins().extractlane(x, 0);
                                let hi = self.b.ins().extractlane(x, 1);
                                self.b.ins().store(flags(), lo, addr, 0);
                                self.b.ins().store(flags(), hi, next, 0);
                            }
                        }
                    }
                }
                Op::FBinary(op) => {
                    let a = vector(self, &lanes, d.args[0])?;
                    let b = vector(self, &lanes, d.args[1])?;
                    let x = match op {
                        FBinOp::Add => self.b.ins().fadd(a, b),
                        FBinOp::Sub => self.b.ins().fsub(a, b),
                        FBinOp::Mul => self.b.ins().fmul(a, b),
                        FBinOp::Div => self.b.ins().fdiv(a, b),
                        _ => return Err(format!("{op:?} has no paired form")),
                    };
                    if let Some(r) = d.result {
                        lanes.insert(r, x);
                    }
                }
                Op::FUnary(op) => {
                    let a = vector(self, &lanes, d.args[0])?;
                    let x = match op {
                        FUnOp::Neg => self.b.ins().fneg(a),
                        FUnOp::Abs => self.b.ins().fabs(a),
                        FUnOp::Sqrt => self.b.ins().sqrt(a),
                        _ => return Err(format!("{op:?} has no paired form")),
                    };
                    if let Some(r) = d.result {
                        lanes.insert(r, x);
                    }
                }
                Op::StackPut => {
                    // The two iterations' records, side by side: value k of the lower
                    // iteration at `offset + w · i + k`, of the upper `w` further on.
                    let start = lower_index(self, &mut low, d.args[2])?;
                    let values = &d.args[3..];
                    let width = values.len() as i64;
                    let st = self.v(d.args[0])?;
                    let offset = self.v(d.args[1])?;
                    let len = self.put_end(d.args[1], st);
                    let scaled = if width == 1 { start } else { self.b.ins().imul_imm_s(start, width) };
                    let first = self.b.ins().iadd(offset, scaled);
                    // Room for both records: `first < len` and `len - first >= 2w`.
                    let past = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, first, len);
                    let left = self.b.ins().isub(len, first);
                    let short = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, left, 2 * width);
                    let bad = self.b.ins().bor(past, short);
                    let site = self.site(d.span);
                    let z = self.zero();
                    self.check(bad, site, FAIL_STACK_PUT, [z, z, z]);
                    let data = self.put_data(d.args[1], st);
                    let off = self.b.ins().ishl_imm_u(first, 3);
                    let addr = self.b.ins().iadd(data, off);
                    for (k, &v) in values.iter().enumerate() {
                        let x = vector(self, &lanes, v)?;
                        if width == 1 {
                            self.b.ins().store(flags(), x, addr, 0);
                        } else {
                            let lo = self.b.ins().extractlane(x, 0);
                            let hi = self.b.ins().extractlane(x, 1);
                            self.b.ins().store(flags(), lo, addr, 8 * k as i32);
                            self.b.ins().store(flags(), hi, addr, 8 * (width as usize + k) as i32);
                        }
                    }
                }
                Op::StackPop => {
                    // At the body's first pop of a stack, every pop of it for both
                    // iterations at once: the `w` values of the iteration that runs
                    // first lie on top, the other's below them.
                    if !popped.contains_key(&d.result.ok_or("a pop without a result")?) {
                        let stack_value = d.args[0];
                        let pops: Vec<mcir_ir::Inst> = f.blocks[body]
                            .insts
                            .iter()
                            .copied()
                            .filter(|&i| f.insts[i].op == Op::StackPop && f.insts[i].args[0] == stack_value)
                            .collect();
                        let width = pops.len() as i64;
                        let st = self.v(stack_value)?;
                        let len = self.pop_len(stack_value, st);
                        let short = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, len, 2 * width);
                        let site = self.site(d.span);
                        let z = self.zero();
                        self.check(short, site, FAIL_EMPTY_STACK, [z, z, z]);
                        let base = self.b.ins().iadd_imm_s(len, -2 * width);
                        self.set_pop_len(stack_value, st, base);
                        let data = self.pop_data(stack_value, st);
                        let off = self.b.ins().ishl_imm_u(base, 3);
                        let addr = self.b.ins().iadd(data, off);
                        for (k, &pop) in pops.iter().enumerate() {
                            // Slots from `base`: the first-popped iteration's value k at
                            // 2w - 1 - k, the other's at w - 1 - k.
                            let (later, earlier) =
                                ((2 * width - 1 - k as i64) * 8, (width - 1 - k as i64) * 8);
                            let (lo_at, hi_at) = if up { (later, earlier) } else { (earlier, later) };
                            let v = if width == 1 && !up {
                                self.b.ins().load(types::F64X2, flags(), addr, 0)
                            } else {
                                let lo = self.b.ins().load(types::F64, flags(), addr, lo_at as i32);
                                let hi = self.b.ins().load(types::F64, flags(), addr, hi_at as i32);
                                let v = self.b.ins().splat(types::F64X2, lo);
                                self.b.ins().insertlane(v, hi, 1)
                            };
                            popped.insert(f.insts[pop].result.ok_or("a pop without a result")?, v);
                        }
                    }
                    if let Some(r) = d.result {
                        lanes.insert(r, *popped.get(&r).ok_or("a pop was not paired")?);
                    }
                }
                op => return Err(format!("{op:?} cannot run in pairs")),
            }
        }
        if !waiting.is_empty() {
            return Err("a store of two columns lost its partner".into());
        }
        Ok(lanes)
    }

    /// The end of the room a `stack.put` at `offset` writes into, on stack `st`: the end
    /// of the reservation `offset` comes from where this block made it (`cursors`), else
    /// the stack's length.
    fn put_end(&mut self, offset: Value, st: CValue) -> CValue {
        match self.cursors.get(&offset) {
            Some(&(_, end)) => end,
            None => self.b.ins().load(P, flags(), st, stack::LEN),
        }
    }

    /// The data of stack `st` for a `stack.put` at `offset` (see `put_end`).
    fn put_data(&mut self, offset: Value, st: CValue) -> CValue {
        match self.cursors.get(&offset) {
            Some(&(data, _)) => data,
            None => self.b.ins().load(P, flags(), st, stack::DATA),
        }
    }

    /// The length of stack `stack` (lowered `st`) where its pops read it: for a stack
    /// only popped (`popped_only`), the variable it lives in, else the stack's header.
    fn pop_len(&mut self, stack: Value, st: CValue) -> CValue {
        match self.pop_cursors.get(&stack) {
            Some(&(_, var)) => self.b.use_var(var),
            None => self.b.ins().load(P, flags(), st, stack::LEN),
        }
    }

    /// Sets what `pop_len` reads.
    fn set_pop_len(&mut self, stack: Value, st: CValue, len: CValue) {
        match self.pop_cursors.get(&stack) {
            Some(&(_, var)) => self.b.def_var(var, len),
            None => {
                self.b.ins().store(flags(), len, st, stack::LEN);
            }
        }
    }

    /// The data of stack `stack` for its pops (see `pop_len`).
    fn pop_data(&mut self, stack: Value, st: CValue) -> CValue {
        match self.pop_cursors.get(&stack) {
            Some(&(data, _)) => data,
            None => self.b.ins().load(P, flags(), st, stack::DATA),
        }
    }

    /// `[a₀, b₀]` and `[a₁, b₁]`: the low halves of two vectors side by side, and their
    /// high halves (`punpcklqdq`, `punpckhqdq`).
    fn interleave(&mut self, a: CValue, b: CValue) -> (CValue, CValue) {
        let little = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        let a = self.b.ins().bitcast(types::I8X16, little, a);
        let b = self.b.ins().bitcast(types::I8X16, little, b);
        let mask = |half: u8| -> Vec<u8> {
            (0..16u8).map(|k| if k < 8 { half + k } else { 16 + half + k - 8 }).collect()
        };
        let low = self.b.func.dfg.immediates.push(cranelift_codegen::ir::ConstantData::from(mask(0)));
        let high = self.b.func.dfg.immediates.push(cranelift_codegen::ir::ConstantData::from(mask(8)));
        let lo = self.b.ins().shuffle(a, b, low);
        let hi = self.b.ins().shuffle(a, b, high);
        (self.b.ins().bitcast(types::F64X2, little, lo), self.b.ins().bitcast(types::F64X2, little, hi))
    }

    fn run(&mut self) -> Result<(), String> {
        let f = self.f;
        let cfg = ControlFlow::compute(f);
        self.loop_depth = cfg.loop_depths();
        for (_, _) in f.blocks.iter() {
            let blk = self.b.create_block();
            self.blocks.push(blk);
        }
        self.unwind = self.b.create_block();
        // Parameters.
        let entry = self.blocks[0];
        self.b.append_block_params_for_function_params(entry);
        for (bi, (_, data)) in f.blocks.iter().enumerate() {
            if bi == 0 {
                let ps = self.b.block_params(entry).to_vec();
                self.ctx = ps[0];
                for (k, &p) in data.params.iter().enumerate() {
                    self.vals[p.index()] = Some(ps[k + 1]);
                }
            } else {
                for &p in &data.params {
                    let t = machine_type(f.value_type(p));
                    let v = self.b.append_block_param(self.blocks[bi], t);
                    self.vals[p.index()] = Some(v);
                }
            }
        }
        for (k, &b) in cfg.rpo.iter().enumerate() {
            let data = &f.blocks[b];
            self.b.switch_to_block(self.blocks[b.index()]);
            let first_span = data.insts.first().map(|&i| f.insts[i].span).unwrap_or(data.term_span);
            if k == 0 {
                // Entry: the machine stack must not run out (deep recursion).
                let site = self.site(f.span);
                let sp = self.b.ins().get_stack_pointer(P);
                let limit = self.b.ins().load(P, flags(), self.ctx, ctx::STACK_LIMIT);
                let low = self.b.ins().icmp(IntCC::UnsignedLessThan, sp, limit);
                let z = self.zero();
                self.check(low, site, FAIL_STACK, [z, z, z]);
                // A time-out on entry points at the first line of the body: the first
                // instruction whose source is narrower than the whole function (a derived
                // pass begins with what it makes for its tape, spanning the function).
                let narrower = data
                    .insts
                    .iter()
                    .map(|&i| f.insts[i].span)
                    .chain([data.term_span])
                    .find(|s| s.end > 0 && *s != f.span)
                    .unwrap_or(first_span);
                let site = self.site(narrower);
                self.interrupt_check(site);
            } else if cfg.latches(b).next().is_some() {
                let site = self.site(first_span);
                let plan = crate::unroll::plan(f, b, &cfg)
                    .filter(|u| self.may_copy(u.body))
                    .and_then(|u| self.copy_plan(u));
                match (unit_step_param(f, b, &cfg), plan) {
                    (Some(p), Some(plan)) => {
                        // Both loops pass a counter value whose low bits are all ones
                        // give or take the factor at least once every 1024 iterations;
                        // a loop of one body block holds no other.
                        self.poll_every(self.v(p)?, site, 1023 & !(plan.unroll.factor - 1), true);
                        self.unrolled_copies(b, plan, site)?;
                    }
                    (Some(p), None) => {
                        let innermost =
                            cfg.loop_blocks(b).iter().all(|&l| l == b || cfg.latches(l).next().is_none());
                        self.poll_every(self.v(p)?, site, 1023, innermost)
                    }
                    _ => self.interrupt_check(site),
                }
            }
            self.block_insts(b)?;
            self.terminator(&data.term)?;
        }
        // Unwinding: return dummy values; the caller tests the status.
        self.b.switch_to_block(self.unwind);
        self.b.set_cold_block(self.unwind);
        let returned: Vec<CType> = match f.ret {
            _ if self.returns_fields => {
                register_fields(&self.l.module.types, f).ok_or("no register fields")?
            }
            Some(t) => vec![machine_type(t)],
            None => Vec::new(),
        };
        let zeros: Vec<CValue> = returned
            .into_iter()
            .map(|t| match t {
                types::F64 => self.b.ins().f64const(0.0),
                mt => self.b.ins().iconst(mt, 0),
            })
            .collect();
        self.b.ins().return_(&zeros);
        self.b.seal_all_blocks();
        Ok(())
    }

    fn block_args(&self, call: &BlockCall) -> Result<Vec<cranelift_codegen::ir::BlockArg>, String> {
        call.args.iter().map(|&a| self.v(a).map(|v| v.into())).collect()
    }

    fn terminator(&mut self, term: &Terminator) -> Result<(), String> {
        match term {
            Terminator::Jump(c) => {
                let args = self.block_args(c)?;
                let target = self.latch_target.get(&c.block).copied().unwrap_or(self.blocks[c.block.index()]);
                self.b.ins().jump(target, &args);
            }
            Terminator::Branch { cond, then_dest, else_dest } => {
                let c = self.v(*cond)?;
                let (ta, ea) = (self.block_args(then_dest)?, self.block_args(else_dest)?);
                let (t, e) = (self.blocks[then_dest.block.index()], self.blocks[else_dest.block.index()]);
                let depth = |b: mcir_ir::Block| self.loop_depth.get(b.index()).copied().unwrap_or(0);
                if depth(then_dest.block) > depth(else_dest.block) {
                    // The target that leaves a loop goes first. Cranelift's loop-invariant
                    // code motion visits the dominator tree in reverse post-order of a
                    // search that follows a branch's first target first, and forgets a
                    // loop once it has visited a block outside it: a loop's body must be
                    // visited before its exit for invariant loads and arithmetic (array
                    // headers, row offsets) to leave the loop.
                    let inv = self.b.ins().icmp_imm_u(IntCC::Equal, c, 0);
                    self.b.ins().brif(inv, e, &ea, t, &ta);
                } else {
                    self.b.ins().brif(c, t, &ta, e, &ea);
                }
            }
            Terminator::Return(Some(v)) if self.returns_fields => {
                let vals = match self.tuple_fields.get(v) {
                    Some(fields) => fields.clone(),
                    None => {
                        // A tuple from memory (a block parameter, say): its fields.
                        let t = self.v(*v)?;
                        let fields =
                            register_fields(&self.l.module.types, self.f).ok_or("no register fields")?;
                        fields
                            .iter()
                            .enumerate()
                            .map(|(k, &ty)| self.b.ins().load(ty, flags(), t, 8 * k as i32))
                            .collect()
                    }
                };
                self.b.ins().return_(&vals);
            }
            Terminator::Return(v) => {
                let vals: Vec<CValue> = v.iter().map(|&x| self.v(x)).collect::<Result<_, _>>()?;
                self.b.ins().return_(&vals);
            }
        }
        Ok(())
    }

    fn elem_kind(types: &TypeTable, t: TypeId) -> (i64, CType, i64) {
        match types.as_array(t).map(|(e, _)| e) {
            Some(Scalar::I64) => (ELEM_I64, types::I64, 8),
            Some(Scalar::Bool) => (ELEM_BOOL, types::I8, 1),
            _ => (ELEM_F64, types::F64, 8),
        }
    }

    /// The address of element `idx` of array `a`; with a site, every index not proven in
    /// bounds (`proven`) is checked.
    fn element_addr(
        &mut self,
        a: CValue,
        idx: &[CValue],
        elem_bytes: i64,
        site: Option<i64>,
        proven: &[bool],
    ) -> CValue {
        let (addr, offset) = self.element_addr_parts(a, idx, elem_bytes, site, proven);
        if offset == 0 {
            addr
        } else {
            self.b.ins().iadd_imm_s(addr, i64::from(offset))
        }
    }

    /// A value as a variable part and a constant added to it: `(None, c)` for a constant,
    /// `(Some(x), c)` for `x + c` or `x - c` (through a few such steps: `(i - 1) - 1` is
    /// `i - 2`), `(Some(v), 0)` otherwise. Only small constants are split off, so that
    /// they fit a memory operand's displacement once scaled.
    fn split_constant(&self, v: CValue) -> (Option<CValue>, i64) {
        use cranelift_codegen::ir::{InstructionData, Opcode, ValueDef};
        const SMALL: i64 = 1 << 20;
        let dfg = &self.b.func.dfg;
        let constant = |x: CValue| match dfg.value_def(x) {
            ValueDef::Result(i, 0) => match dfg.insts[i] {
                InstructionData::UnaryImm { opcode: Opcode::Iconst, imm } => {
                    Some(imm.bits()).filter(|c| c.abs() < SMALL)
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(c) = constant(v) {
            return (None, c);
        }
        let (mut var, mut total) = (v, 0i64);
        for _ in 0..4 {
            let ValueDef::Result(i, 0) = dfg.value_def(var) else { break };
            // A sum's or difference's first result is `x ± c` (a checked one's too: it
            // traps, or is exact).
            let step = match dfg.insts[i] {
                InstructionData::Binary { opcode: Opcode::Iadd | Opcode::SaddOverflow, args } => {
                    match (constant(args[1]), constant(args[0])) {
                        (Some(c), _) => Some((args[0], c)),
                        (None, Some(c)) => Some((args[1], c)),
                        _ => None,
                    }
                }
                InstructionData::Binary { opcode: Opcode::Isub | Opcode::SsubOverflow, args } => {
                    constant(args[1]).map(|c| (args[0], -c))
                }
                _ => None,
            };
            match step {
                Some((x, c)) if (total + c).abs() < SMALL => {
                    var = x;
                    total += c;
                }
                _ => break,
            }
        }
        (Some(var), total)
    }

    /// [`Self::element_addr`] as an address and a constant byte offset from it: a constant
    /// added to the last index (`p[k, 2]`, `x[i + 1]`) becomes the offset, which a load or
    /// store takes as its displacement rather than an addition per access.
    fn element_addr_parts(
        &mut self,
        a: CValue,
        idx: &[CValue],
        elem_bytes: i64,
        site: Option<i64>,
        proven: &[bool],
    ) -> (CValue, i32) {
        let mut flat: Option<CValue> = None;
        let mut offset = 0i64;
        let last = idx.len().saturating_sub(1);
        for (d, &i) in idx.iter().enumerate() {
            let check = site.filter(|_| !proven.get(d).copied().unwrap_or(false));
            // The innermost extent is needed only for the check.
            let ext = if check.is_some() || d > 0 {
                self.b.ins().load(P, self.header_loads, a, array::DIMS + 8 * d as i32)
            } else {
                i
            };
            if let Some(site) = check {
                let bad = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, ext);
                let dim = self.b.ins().iconst(P, d as i64);
                self.check(bad, site, FAIL_INDEX, [i, dim, ext]);
            }
            let (var, c) = if d == last { self.split_constant(i) } else { (Some(i), 0) };
            offset = c * elem_bytes;
            flat = match (flat, var) {
                (None, var) => var,
                (Some(prev), var) => {
                    let m = self.b.ins().imul(prev, ext);
                    Some(match var {
                        Some(i) => self.b.ins().iadd(m, i),
                        None => m,
                    })
                }
            };
        }
        let data = self.b.ins().load(P, self.header_loads, a, array::DATA);
        let Some(flat) = flat else { return (data, offset as i32) };
        let off = if elem_bytes == 1 { flat } else { self.b.ins().imul_imm_s(flat, elem_bytes) };
        (self.b.ins().iadd(data, off), offset as i32)
    }

    /// In the copies of an unrolled body, the dimension of a load or store (`inst`, with
    /// `n_idx` indices, every one in bounds) whose index there is the loop's counter give
    /// or take a constant, when that dimension is not the last and the array and every
    /// other index are fixed for the whole loop (`b[l, j]` in a loop over `l`): from one
    /// copy to the next its address moves by the same number of bytes, so the copies after
    /// the first add that instead of multiplying the index by an extent again.
    fn stepped_access(
        &self,
        inst: mcir_ir::Inst,
        n_idx: usize,
        trusted: bool,
        proven: &[bool],
    ) -> Option<usize> {
        let st = self.stepped.as_ref()?;
        let f = self.f;
        let d = &f.insts[inst];
        if n_idx < 2 || !(trusted || (0..n_idx).all(|k| proven.get(k).copied().unwrap_or(false))) {
            return None;
        }
        let u = &st.unroll;
        if !u.fixed(f, d.args[0]) {
            return None;
        }
        let idx = &d.args[1..1 + n_idx];
        let dim = idx.iter().position(|&v| u.follows_counter(f, v))?;
        let others_fixed = idx.iter().enumerate().all(|(k, &v)| k == dim || u.fixed(f, v));
        (dim + 1 < n_idx && others_fixed).then_some(dim)
    }

    /// The address of a stepping access (`stepped_access`): computed in full in the first
    /// copy, then the previous copy's moved by the stride of dimension `dim`.
    fn stepped_addr(
        &mut self,
        inst: mcir_ir::Inst,
        a: CValue,
        idx: &[CValue],
        elem_bytes: i64,
        dim: usize,
    ) -> CValue {
        let delta = self.stepped.as_ref().map_or(1, |st| st.delta);
        if let Some(&(prev, stride)) = self.stepped.as_ref().and_then(|st| st.previous.get(&inst)) {
            let addr =
                if delta > 0 { self.b.ins().iadd(prev, stride) } else { self.b.ins().isub(prev, stride) };
            if let Some(st) = self.stepped.as_mut() {
                st.previous.insert(inst, (addr, stride));
            }
            return addr;
        }
        let addr = self.element_addr(a, idx, elem_bytes, None, &vec![true; idx.len()]);
        // Bytes per unit of index `dim`: the element size times the later extents.
        let mut stride = self.b.ins().iconst(P, elem_bytes);
        for k in dim + 1..idx.len() {
            let ext = self.b.ins().load(P, self.header_loads, a, array::DIMS + 8 * k as i32);
            stride = self.b.ins().imul(stride, ext);
        }
        if let Some(st) = self.stepped.as_mut() {
            st.previous.insert(inst, (addr, stride));
        }
        addr
    }

    /// A small block from the arena: bump the context's window inline, and ask the
    /// runtime for a new window only when this one is full.
    fn alloc(&mut self, bytes: i64, site: i64) -> CValue {
        let size = (bytes + 7) / 8 * 8;
        if self.in_tape {
            // The block's piece is the arena's.
            return self.bump(bytes, size, site);
        }
        if let Some((piece, offset)) = self.piece {
            if offset + size <= self.block_bytes {
                self.piece = Some((piece, offset + size));
                return self.b.ins().iadd_imm_s(piece, offset);
            }
        }
        if self.piece.is_none() && size < self.block_bytes {
            // The first fixed-size allocation of a block with several takes them all.
            let piece = self.bump(self.block_bytes, self.block_bytes, site);
            self.piece = Some((piece, size));
            return piece;
        }
        self.bump(bytes, size, site)
    }

    /// How many values a stack `stack.new` makes as `result` has room for, when it is
    /// sized for its reservation (`sized_stacks`) and the reservation's end is known here.
    fn sized_room(&mut self, result: Option<Value>) -> Option<CValue> {
        let &(hi, lo, extra, width) = self.sized_stacks.get(&result?)?;
        let hi = match self.f.const_int(hi) {
            Some(c) => self.b.ins().iconst(P, c),
            None => self.vals.get(hi.index()).copied().flatten()?,
        };
        let lo = self.b.ins().iconst(P, lo);
        let some = self.b.ins().icmp(IntCC::SignedGreaterThan, hi, lo);
        let diff = self.b.ins().isub(hi, lo);
        let zero = self.zero();
        let runs = self.b.ins().select(some, diff, zero);
        // `width · (runs + extra) + 1`, used only when `runs` is small (else it may wrap).
        let records = self.b.ins().iadd_imm_s(runs, extra);
        let values = self.b.ins().imul_imm_s(records, width);
        let room = self.b.ins().iadd_imm_s(values, 1);
        let few = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, runs, MAX_SIZED_ROOM);
        let fits = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, room, MAX_SIZED_ROOM);
        let small = self.b.ins().band(few, fits);
        let first = self.b.ins().iconst(P, STACK_FIRST);
        Some(self.b.ins().select(small, room, first))
    }

    /// Makes the tape region's window the one allocations take from (`into_tape`), or
    /// the arena's again. Inline allocation then bumps the tape region's window where it
    /// lies in the context (`window_fields`); only around a call into the runtime do the
    /// two windows change places (`exchange_windows`), so that the runtime, which
    /// allocates from `Ctx::bump` and refills the region `Ctx::in_tape` names, serves
    /// the tape region.
    fn allocate_in_tape(&mut self, into_tape: bool) {
        self.in_tape = into_tape;
    }

    /// The context's fields of the window allocations take from now: the arena's, or
    /// the tape region's (see `allocate_in_tape`).
    fn window_fields(&self) -> (i32, i32) {
        if self.in_tape {
            (ctx::OTHER_BUMP, ctx::OTHER_END)
        } else {
            (ctx::BUMP, ctx::BUMP_END)
        }
    }

    /// The two windows in the context change places, and the runtime is told which one
    /// it refills.
    fn exchange_windows(&mut self, into_tape: bool) {
        let fields = [ctx::BUMP, ctx::BUMP_END, ctx::OTHER_BUMP, ctx::OTHER_END];
        let [bump, end, other, other_end] = fields.map(|at| self.b.ins().load(P, flags(), self.ctx, at));
        for (v, at) in
            [(other, ctx::BUMP), (other_end, ctx::BUMP_END), (bump, ctx::OTHER_BUMP), (end, ctx::OTHER_END)]
        {
            self.b.ins().store(flags(), v, self.ctx, at);
        }
        let flag = self.b.ins().iconst(P, into_tape as i64);
        self.b.ins().store(flags(), flag, self.ctx, ctx::IN_TAPE);
    }

    /// Whether lowering `inst` allocates in the tape region: it is marked `tape` and
    /// allocates here (a tuple returned in registers does not). The partner of a fused
    /// `map.sin` or `map.cos` is made in its own region where its consumer's loop runs
    /// (`map_elem`).
    fn takes_tape(&self, inst: mcir_ir::Inst) -> bool {
        let f = self.f;
        // A call runs its callee in the arena's window; the tuple it may put its result
        // in is taken from the tape region where it is made (`Op::Call` below).
        f.insts[inst].in_tape
            && !matches!(f.insts[inst].op, Op::Call(_))
            && !f.insts[inst].result.is_some_and(|r| self.register_tuples.contains(&r))
    }

    /// Takes `size` bytes (`bytes` rounded up) from the arena.
    fn bump(&mut self, bytes: i64, size: i64, site: i64) -> CValue {
        self.bump_by(Amount::Fixed(bytes), Amount::Fixed(size), site)
    }

    /// Takes `bytes` bytes (a multiple of 8, computed at run time) from the arena.
    fn bump_value(&mut self, bytes: CValue, site: i64) -> CValue {
        self.bump_by(Amount::Computed(bytes), Amount::Computed(bytes), site)
    }

    /// Takes `size` bytes from the arena's window, or from a new window of at least
    /// `bytes` when the window is full.
    fn bump_by(&mut self, bytes: Amount, size: Amount, site: i64) -> CValue {
        let (bump_at, end_at) = self.window_fields();
        let p = self.b.ins().load(P, flags(), self.ctx, bump_at);
        let end = self.b.ins().load(P, flags(), self.ctx, end_at);
        let q = self.advance(p, size);
        let full = self.b.ins().icmp(IntCC::UnsignedGreaterThan, q, end);
        let slow = self.b.create_block();
        let fast = self.b.create_block();
        let join = self.b.create_block();
        let out = self.b.append_block_param(join, P);
        self.b.ins().brif(full, slow, &[], fast, &[]);
        self.b.switch_to_block(fast);
        self.b.ins().store(flags(), q, self.ctx, bump_at);
        self.b.ins().jump(join, &[p.into()]);
        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let s = self.b.ins().iconst(P, site);
        let n = match bytes {
            Amount::Fixed(n) => self.b.ins().iconst(P, n),
            Amount::Computed(n) => n,
        };
        // A new window through a helper that preserves every register, so values live
        // across an allocation (a loop's accumulator) need not leave their registers.
        self.rt_call("alloc_refill", &[self.ctx, s, n]);
        self.status_check();
        let p2 = self.b.ins().load(P, flags(), self.ctx, bump_at);
        let q2 = self.advance(p2, size);
        self.b.ins().store(flags(), q2, self.ctx, bump_at);
        self.b.ins().jump(join, &[p2.into()]);
        self.b.switch_to_block(join);
        out
    }

    /// `p + size`.
    fn advance(&mut self, p: CValue, size: Amount) -> CValue {
        match size {
            Amount::Fixed(n) => self.b.ins().iadd_imm_s(p, n),
            Amount::Computed(n) => self.b.ins().iadd(p, n),
        }
    }

    /// An array of 8-byte elements of the given shape, all `value`: made inline from the
    /// arena's window when it can be (`array_from_window`), else by the runtime function
    /// `runtime` called with `call`, which also reports an invalid extent.
    fn short_array(
        &mut self,
        shape: Extents,
        value: CValue,
        runtime: &str,
        call: &[CValue],
    ) -> Result<CValue, String> {
        let (made, fast) = self.array_from_window(shape, value);
        let slow = self.b.create_block();
        let join = self.b.create_block();
        let out = self.b.append_block_param(join, P);
        self.b.ins().brif(made, join, &[fast.into()], slow, &[]);
        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let h = self.rt_call_checked(runtime, call).ok_or_else(|| format!("{runtime} has no result"))?;
        self.b.ins().jump(join, &[h.into()]);
        self.b.switch_to_block(join);
        Ok(out)
    }

    /// An array of 8-byte elements of the given shape, all `value`, made inline from the
    /// arena's current window: the header and the elements side by side, as the runtime
    /// lays them out. Returns whether it was made (it has fewer than
    /// `INLINE_ARRAY_ELEMS` elements and the window has room) and the array; when it was
    /// not, nothing was taken and the caller asks the runtime, which also reports a
    /// negative or too large extent.
    fn array_from_window(&mut self, shape: Extents, value: CValue) -> (CValue, CValue) {
        let header = array::HEADER_BYTES as i64;
        // The element count, and whether it is small. Given extents are each tested
        // first (unsigned, so a negative one is large), so that their product cannot
        // overflow; the extents of an existing array are valid, their product its length.
        let (n, small) = match &shape {
            Extents::Given(dims) => {
                let mut any = dims[0];
                for &d in &dims[1..] {
                    any = self.b.ins().bor(any, d);
                }
                let each = self.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, any, INLINE_ARRAY_ELEMS);
                let mut n = dims[0];
                for &d in &dims[1..] {
                    n = self.b.ins().imul(n, d);
                }
                if dims.len() == 1 {
                    (n, each)
                } else {
                    let few = self.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, n, INLINE_ARRAY_ELEMS);
                    (n, self.b.ins().band(each, few))
                }
            }
            Extents::Like(src, _) => {
                let n = self.b.ins().load(P, self.header_loads, *src, array::LEN);
                (n, self.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, n, INLINE_ARRAY_ELEMS))
            }
        };
        let try_window = self.b.create_block();
        let made = self.b.create_block();
        let done = self.b.create_block();
        let ok = self.b.append_block_param(done, types::I8);
        let out = self.b.append_block_param(done, P);
        let no = self.b.ins().iconst(types::I8, 0);
        let null = self.zero();
        self.b.ins().brif(small, try_window, &[], done, &[no.into(), null.into()]);

        self.b.switch_to_block(try_window);
        let (bump_at, end_at) = self.window_fields();
        let p = self.b.ins().load(P, flags(), self.ctx, bump_at);
        let end = self.b.ins().load(P, flags(), self.ctx, end_at);
        let bytes = self.b.ins().ishl_imm_s(n, 3);
        let bytes = self.b.ins().iadd_imm_s(bytes, header);
        let q = self.b.ins().iadd(p, bytes);
        let fits = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q, end);
        let no = self.b.ins().iconst(types::I8, 0);
        let null = self.zero();
        self.b.ins().brif(fits, made, &[], done, &[no.into(), null.into()]);

        self.b.switch_to_block(made);
        self.b.ins().store(flags(), q, self.ctx, bump_at);
        let data = self.b.ins().iadd_imm_s(p, header);
        self.b.ins().store(flags(), data, p, array::DATA);
        self.b.ins().store(flags(), n, p, array::LEN);
        match &shape {
            Extents::Given(dims) => {
                let rank = self.b.ins().iconst(P, dims.len() as i64);
                self.b.ins().store(flags(), rank, p, array::RANK);
                for (k, &d) in dims.iter().enumerate() {
                    self.b.ins().store(flags(), d, p, array::DIMS + 8 * k as i32);
                }
            }
            Extents::Like(src, rank) => {
                let r = self.b.ins().iconst(P, *rank as i64);
                self.b.ins().store(flags(), r, p, array::RANK);
                for k in 0..*rank as i32 {
                    let d = self.b.ins().load(P, self.header_loads, *src, array::DIMS + 8 * k);
                    self.b.ins().store(flags(), d, p, array::DIMS + 8 * k);
                }
            }
        }
        // The elements, one store each: the arrays made this way are short.
        let fill = self.b.create_block();
        let at = self.b.append_block_param(fill, P);
        let step = self.b.create_block();
        self.b.ins().jump(fill, &[data.into()]);
        self.b.switch_to_block(fill);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, at, q);
        let yes = self.b.ins().iconst(types::I8, 1);
        self.b.ins().brif(more, step, &[], done, &[yes.into(), p.into()]);
        self.b.switch_to_block(step);
        self.b.ins().store(flags(), value, at, 0);
        let next = self.b.ins().iadd_imm_s(at, 8);
        self.b.ins().jump(fill, &[next.into()]);

        self.b.switch_to_block(done);
        (ok, out)
    }

    fn fbinary(&mut self, op: FBinOp, a: CValue, b: CValue) -> CValue {
        match op {
            FBinOp::Add => self.b.ins().fadd(a, b),
            FBinOp::Sub => self.b.ins().fsub(a, b),
            FBinOp::Mul => self.b.ins().fmul(a, b),
            FBinOp::Div => self.b.ins().fdiv(a, b),
            FBinOp::Min | FBinOp::Max => self.fmin_max(op, a, b),
            FBinOp::Pow => self.rt_call("mc_pow", &[a, b]).unwrap_or(a),
            FBinOp::Atan2 => self.rt_call("mc_atan2", &[a, b]).unwrap_or(a),
        }
    }

    /// The expression a fused map computes per element; `arrays` collects the arrays
    /// it reads and `checked` the maps of two arrays, whose shapes must agree.
    fn fused_elem(
        &mut self,
        v: Value,
        arrays: &mut Vec<CValue>,
        checked: &mut Vec<(mcir_ir::Inst, usize, usize)>,
    ) -> Result<Elem, String> {
        let f = self.f;
        if self.l.module.types.as_array(f.value_type(v)).is_none() {
            return Ok(Elem::Scalar(self.v(v)?));
        }
        let Some(&inst) = self.fused.get(&v) else {
            arrays.push(self.v(v)?);
            return Ok(Elem::Array(arrays.len() - 1));
        };
        self.map_elem(inst, arrays, checked)
    }

    fn map_elem(
        &mut self,
        inst: mcir_ir::Inst,
        arrays: &mut Vec<CValue>,
        checked: &mut Vec<(mcir_ir::Inst, usize, usize)>,
    ) -> Result<Elem, String> {
        let d = &self.f.insts[inst];
        Ok(match &d.op {
            Op::MapFUnary(op) if self.map_partner.contains_key(&inst) => {
                // Make the partner's array now, before the loop, from the same array, in
                // the region the partner is marked for: a taped partner (the `cos x` a
                // reverse pass reads) outlives the arena's release at the end of the
                // iteration, whatever region the consumer that computes it allocates in.
                let p = self.map_partner[&inst];
                let x = self.fused_elem(d.args[0], arrays, checked)?;
                let source = self.v(d.args[0])?;
                let site = self.site(self.f.insts[p].span);
                let s = self.b.ins().iconst(P, site);
                let region = self.in_tape;
                self.allocate_in_tape(self.f.insts[p].in_tape);
                let out = self.rt_call_checked("mc_array_like", &[self.ctx, s, source]);
                self.allocate_in_tape(region);
                let out = out.ok_or("no array")?;
                if let Some(pr) = self.f.insts[p].result {
                    self.vals[pr.index()] = Some(out);
                }
                let data = self.b.ins().load(P, self.header_loads, out, array::DATA);
                Elem::SinCos(*op, Box::new(x), data)
            }
            Op::MapFUnary(op) => Elem::Unary(*op, Box::new(self.fused_elem(d.args[0], arrays, checked)?)),
            Op::MapFPowI => {
                Elem::PowI(Box::new(self.fused_elem(d.args[0], arrays, checked)?), self.v(d.args[1])?)
            }
            Op::MapFBinary(op) => {
                let first = arrays.len();
                let a = self.fused_elem(d.args[0], arrays, checked)?;
                let second = arrays.len();
                let b = self.fused_elem(d.args[1], arrays, checked)?;
                if !matches!(a, Elem::Scalar(_)) && !matches!(b, Elem::Scalar(_)) {
                    checked.push((inst, first, second));
                }
                Elem::Binary(*op, Box::new(a), Box::new(b))
            }
            other => return Err(format!("{other:?} cannot be fused")),
        })
    }

    fn elem_value(&mut self, e: &Elem, loaded: &[CValue]) -> CValue {
        match e {
            Elem::Array(k) => loaded[*k],
            Elem::Scalar(v) => *v,
            Elem::Unary(op, x) => {
                let x = self.elem_value(x, loaded);
                self.unary(*op, x)
            }
            Elem::SinCos(op, x, partner) => {
                let x = self.elem_value(x, loaded);
                let (sin, cos) = self.sincos(x);
                let (mine, theirs) = if *op == FUnOp::Sin { (sin, cos) } else { (cos, sin) };
                let off = self.elem_offset.unwrap_or(x);
                let addr = self.b.ins().iadd(*partner, off);
                self.b.ins().store(flags(), theirs, addr, 0);
                mine
            }
            Elem::Binary(op, a, b) => {
                let (a, b) = (self.elem_value(a, loaded), self.elem_value(b, loaded));
                self.fbinary(*op, a, b)
            }
            Elem::PowI(x, n) => {
                let x = self.elem_value(x, loaded);
                self.rt_call("mc_powi", &[x, *n]).unwrap_or(x)
            }
        }
    }

    /// A map or an `f64` sum whose array operands include fused maps: one loop over
    /// the elements computes the whole expression, with no intermediate arrays.
    fn fused_loop(&mut self, root: mcir_ir::Inst, block: &[mcir_ir::Inst]) -> Result<(), String> {
        let f = self.f;
        let d = &f.insts[root];
        let mut arrays = Vec::new();
        let mut checked = Vec::new();
        let is_sum = matches!(d.op, Op::Sum);
        let add_into = matches!(d.op, Op::AddInto);
        let into = add_into || matches!(d.op, Op::CopyInto);
        let e = if is_sum {
            self.fused_elem(d.args[0], &mut arrays, &mut checked)?
        } else if into {
            self.fused_elem(d.args[1], &mut arrays, &mut checked)?
        } else {
            self.map_elem(root, &mut arrays, &mut checked)?
        };
        // Shape checks in program order, each at its own map's source location.
        let position = |i: mcir_ir::Inst| block.iter().position(|&b| b == i).unwrap_or(usize::MAX);
        checked.sort_by_key(|&(i, _, _)| position(i));
        for (inst, a, b) in checked {
            let site = self.site(f.insts[inst].span);
            let s = self.b.ins().iconst(P, site);
            self.rt_call_checked("mc_same_shape", &[self.ctx, s, arrays[a], arrays[b]]);
        }
        let first = *arrays.first().ok_or("a fused map reads no array")?;
        let n = self.b.ins().load(P, self.header_loads, first, array::LEN);
        // `add_into` and `copy_into` write their destination, whose shape they check last.
        let dst = if into {
            let dst = self.v(d.args[0])?;
            let site = self.site(d.span);
            let s = self.b.ins().iconst(P, site);
            self.rt_call_checked("mc_same_shape", &[self.ctx, s, dst, first]);
            Some(self.b.ins().load(P, self.header_loads, dst, array::DATA))
        } else {
            None
        };
        let out = if is_sum || into {
            None
        } else {
            let site = self.site(d.span);
            let s = self.b.ins().iconst(P, site);
            let out = self.rt_call_checked("mc_array_like", &[self.ctx, s, first]).ok_or("no array")?;
            Some((out, self.b.ins().load(P, self.header_loads, out, array::DATA)))
        };
        let data: Vec<CValue> =
            arrays.iter().map(|&a| self.b.ins().load(P, self.header_loads, a, array::DATA)).collect();
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let k = self.b.append_block_param(header, P);
        let acc = self.b.append_block_param(header, F);
        let total = self.b.append_block_param(exit, F);
        let (k0, acc0) = (self.zero(), self.b.ins().f64const(0.0));
        self.b.ins().jump(header, &[k0.into(), acc0.into()]);
        self.b.switch_to_block(header);
        let done = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, k, n);
        self.b.ins().brif(done, exit, &[acc.into()], body, &[]);
        self.b.switch_to_block(body);
        let off = self.b.ins().ishl_imm_u(k, 3);
        self.elem_offset = Some(off);
        let loaded: Vec<CValue> = data
            .iter()
            .map(|&p| {
                let addr = self.b.ins().iadd(p, off);
                self.b.ins().load(F, flags(), addr, 0)
            })
            .collect();
        let x = self.elem_value(&e, &loaded);
        let next_acc = match (out, dst) {
            (Some((_, out_data)), _) => {
                let addr = self.b.ins().iadd(out_data, off);
                self.b.ins().store(flags(), x, addr, 0);
                acc
            }
            (None, Some(dst_data)) => {
                // Every operand's element is loaded before the destination's is written:
                // the destination may be one of them.
                let addr = self.b.ins().iadd(dst_data, off);
                let new = if add_into {
                    let old = self.b.ins().load(F, flags(), addr, 0);
                    self.b.ins().fadd(old, x)
                } else {
                    x
                };
                self.b.ins().store(flags(), new, addr, 0);
                acc
            }
            (None, None) => self.b.ins().fadd(acc, x),
        };
        let next = self.b.ins().iadd_imm_s(k, 1);
        self.b.ins().jump(header, &[next.into(), next_acc.into()]);
        self.b.switch_to_block(exit);
        let result = match out {
            Some((out, _)) => out,
            None => total,
        };
        if into {
            return Ok(());
        }
        let r = d.result.ok_or("a fused root has no result")?;
        self.vals[r.index()] = Some(result);
        Ok(())
    }

    fn fmin_max(&mut self, op: FBinOp, a: CValue, b: CValue) -> CValue {
        // `b` only when strictly better; NaN in either gives NaN (as the interpreter).
        let cc = if op == FBinOp::Min { FloatCC::LessThan } else { FloatCC::GreaterThan };
        let better = self.b.ins().fcmp(cc, b, a);
        let r = self.b.ins().select(better, b, a);
        let b_nan = self.b.ins().fcmp(FloatCC::Unordered, b, b);
        self.b.ins().select(b_nan, b, r)
    }

    /// `sin x` and `cos x` from one call.
    fn sincos(&mut self, x: CValue) -> (CValue, CValue) {
        use cranelift_codegen::ir::{StackSlotData, StackSlotKind};
        let slot = match self.sincos_slot {
            Some(s) => s,
            None => {
                let s = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 8, 3));
                self.sincos_slot = Some(s);
                s
            }
        };
        let addr = self.b.ins().stack_addr(P, slot, 0);
        let sin = self.rt_call("mc_sincos", &[x, addr]).unwrap_or(x);
        let cos = self.b.ins().stack_load(P, F, slot, 0);
        (sin, cos)
    }

    /// `e^x` as `mcir_ir::math::exp` defines it, the same operations in the same
    /// order: inline for `|x| < 704`, through the runtime (which calls the C library)
    /// for larger magnitudes and NaN, on a cold path.
    fn exp_inline(&mut self, x: CValue) -> CValue {
        use mcir_ir::math::*;
        let ax = self.b.ins().fabs(x);
        let limit = self.b.ins().f64const(EXP_FAST_LIMIT);
        let in_range = self.b.ins().fcmp(FloatCC::LessThan, ax, limit);
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        let join = self.b.create_block();
        let out = self.b.append_block_param(join, types::F64);
        self.b.ins().brif(in_range, fast, &[], slow, &[]);

        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let slow_result = match self.l.runtime.get("mc_exp").copied() {
            Some(id) => {
                let r = self.func_ref(id);
                let call = self.b.ins().call(r, &[x]);
                self.b.inst_results(call)[0]
            }
            None => x,
        };
        self.b.ins().jump(join, &[slow_result.into()]);

        self.b.switch_to_block(fast);
        let inv_ln2_n = self.b.ins().f64const(EXP_INV_LN2_N);
        let shift = self.b.ins().f64const(EXP_SHIFT);
        let t = self.b.ins().fmul(x, inv_ln2_n);
        let z = self.b.ins().fadd(t, shift);
        let kd = self.b.ins().fsub(z, shift);
        let z_bits = self.b.ins().bitcast(types::I64, MemFlagsData::new(), z);
        let k = self.b.ins().iadd_imm_s(z_bits, (EXP_SHIFT.to_bits() as i64).wrapping_neg());
        let hi = self.b.ins().f64const(EXP_LN2_HI_N);
        let lo = self.b.ins().f64const(EXP_LN2_LO_N);
        let khi = self.b.ins().fmul(kd, hi);
        let r0 = self.b.ins().fsub(x, khi);
        let klo = self.b.ins().fmul(kd, lo);
        let r = self.b.ins().fsub(r0, klo);
        let j = self.b.ins().band_imm_u(k, 127);
        let e = self.b.ins().sshr_imm_u(k, 7);
        let offset = self.b.ins().ishl_imm_u(j, 4);
        let table = self.b.ins().iconst(P, EXP_TABLE.as_ptr() as i64);
        let entry = self.b.ins().iadd(table, offset);
        let table_flags = MemFlagsData::trusted().with_readonly().with_can_move();
        let scale_bits = self.b.ins().load(types::I64, table_flags, entry, 0);
        let tail = self.b.ins().load(types::F64, table_flags, entry, 8);
        let e_bits = self.b.ins().ishl_imm_u(e, 52);
        let scaled = self.b.ins().iadd(scale_bits, e_bits);
        let scale = self.b.ins().bitcast(types::F64, MemFlagsData::new(), scaled);
        let c2 = self.b.ins().f64const(EXP_C2);
        let c3 = self.b.ins().f64const(EXP_C3);
        let c4 = self.b.ins().f64const(EXP_C4);
        let c5 = self.b.ins().f64const(EXP_C5);
        let r2 = self.b.ins().fmul(r, r);
        let rc3 = self.b.ins().fmul(r, c3);
        let q23 = self.b.ins().fadd(c2, rc3);
        let rc5 = self.b.ins().fmul(r, c5);
        let q45 = self.b.ins().fadd(c4, rc5);
        let r2q45 = self.b.ins().fmul(r2, q45);
        let q = self.b.ins().fadd(q23, r2q45);
        let tr = self.b.ins().fadd(tail, r);
        let r2q = self.b.ins().fmul(r2, q);
        let p = self.b.ins().fadd(tr, r2q);
        let sp = self.b.ins().fmul(scale, p);
        let fast_result = self.b.ins().fadd(scale, sp);
        self.b.ins().jump(join, &[fast_result.into()]);

        self.b.switch_to_block(join);
        out
    }

    fn unary(&mut self, op: FUnOp, x: CValue) -> CValue {
        match op {
            FUnOp::Neg => self.b.ins().fneg(x),
            FUnOp::Sqrt => self.b.ins().sqrt(x),
            FUnOp::Abs => self.b.ins().fabs(x),
            FUnOp::Floor => self.b.ins().floor(x),
            FUnOp::Ceil => self.b.ins().ceil(x),
            FUnOp::Exp if !self.l.compact => self.exp_inline(x),
            FUnOp::Sign => {
                let zero = self.b.ins().f64const(0.0);
                let one = self.b.ins().f64const(1.0);
                let minus = self.b.ins().f64const(-1.0);
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, x, zero);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                let r = self.b.ins().select(neg, minus, x);
                self.b.ins().select(pos, one, r)
            }
            _ => {
                let name = format!("mc_{}", op.name());
                let id = self.l.runtime.get(name.as_str()).copied();
                match id {
                    Some(id) => {
                        let r = self.func_ref(id);
                        let call = self.b.ins().call(r, &[x]);
                        self.b.inst_results(call)[0]
                    }
                    None => x,
                }
            }
        }
    }

    fn inst(&mut self, inst: mcir_ir::Inst) -> Result<(), String> {
        let f = self.f;
        let types = &self.l.module.types;
        let d = &f.insts[inst];
        if let (Op::TupleGet(k), Some(r), Some(t)) = (&d.op, d.result, d.args.first()) {
            if let Some(fields) = self.tuple_fields.get(t) {
                self.vals[r.index()] = Some(*fields.get(*k as usize).ok_or("tuple field out of range")?);
                return Ok(());
            }
        }
        let args: Vec<CValue> = d.args.iter().map(|&a| self.v(a)).collect::<Result<_, _>>()?;
        let arg_ty = |k: usize| f.value_type(d.args[k]);
        let result_ty = d.result.map(|r| f.value_type(r));
        let fallible_site = |s: &mut Self| s.site(d.span);
        let out: Option<CValue> = match &d.op {
            Op::FConst(c) => Some(self.b.ins().f64const(*c)),
            Op::IConst(c) => Some(self.b.ins().iconst(types::I64, *c)),
            Op::BConst(c) => Some(self.b.ins().iconst(types::I8, *c as i64)),
            Op::FBinary(op) => Some(self.fbinary(*op, args[0], args[1])),
            Op::FUnary(op @ (FUnOp::Sin | FUnOp::Cos)) if self.sincos_partner.contains_key(&inst) => {
                let own = d.result.and_then(|r| self.vals[r.index()]);
                match own {
                    // Its partner, lowered first, computed it.
                    Some(v) => Some(v),
                    None => {
                        let (sin, cos) = self.sincos(args[0]);
                        let (mine, theirs) = if *op == FUnOp::Sin { (sin, cos) } else { (cos, sin) };
                        let partner = self.sincos_partner[&inst];
                        self.vals[partner.index()] = Some(theirs);
                        Some(mine)
                    }
                }
            }
            Op::FUnary(op) => Some(self.unary(*op, args[0])),
            Op::FPowI => self.rt_call("mc_powi", &args),
            Op::IBinary(op) => {
                let site = fallible_site(self);
                let z = self.zero();
                let (a, b) = (args[0], args[1]);
                Some(match op {
                    IBinOp::Add if self.proofs.no_overflow.contains(&inst) => self.b.ins().iadd(a, b),
                    IBinOp::Sub if self.proofs.no_overflow.contains(&inst) => self.b.ins().isub(a, b),
                    IBinOp::Mul if self.proofs.no_overflow.contains(&inst) => self.b.ins().imul(a, b),
                    // A constant divisor other than 0 and -1.
                    IBinOp::Div if self.proofs.no_overflow.contains(&inst) => self.b.ins().sdiv(a, b),
                    IBinOp::Rem if self.proofs.no_overflow.contains(&inst) => self.b.ins().srem(a, b),
                    IBinOp::Add | IBinOp::Sub | IBinOp::Mul => {
                        let (r, of) = match op {
                            IBinOp::Add => self.b.ins().sadd_overflow(a, b),
                            IBinOp::Sub => self.b.ins().ssub_overflow(a, b),
                            _ => self.b.ins().smul_overflow(a, b),
                        };
                        self.check(of, site, FAIL_OVERFLOW, [z, z, z]);
                        r
                    }
                    IBinOp::Div | IBinOp::Rem => {
                        let is_zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                        self.check(is_zero, site, FAIL_DIV_ZERO, [z, z, z]);
                        let min = self.b.ins().icmp_imm_s(IntCC::Equal, a, i64::MIN);
                        let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
                        let both = self.b.ins().band(min, m1);
                        self.check(both, site, FAIL_OVERFLOW, [z, z, z]);
                        if *op == IBinOp::Div {
                            self.b.ins().sdiv(a, b)
                        } else {
                            self.b.ins().srem(a, b)
                        }
                    }
                    IBinOp::Min => self.b.ins().smin(a, b),
                    IBinOp::Max => self.b.ins().smax(a, b),
                })
            }
            Op::IUnary(op) => {
                let site = fallible_site(self);
                let z = self.zero();
                let a = args[0];
                let min = self.b.ins().icmp_imm_s(IntCC::Equal, a, i64::MIN);
                self.check(min, site, FAIL_OVERFLOW, [z, z, z]);
                Some(match op {
                    IUnOp::Neg => self.b.ins().ineg(a),
                    IUnOp::Abs => self.b.ins().iabs(a),
                })
            }
            Op::FCmp(c) => {
                let cc = match c {
                    CmpOp::Eq => FloatCC::Equal,
                    CmpOp::Ne => FloatCC::NotEqual,
                    CmpOp::Lt => FloatCC::LessThan,
                    CmpOp::Le => FloatCC::LessThanOrEqual,
                    CmpOp::Gt => FloatCC::GreaterThan,
                    CmpOp::Ge => FloatCC::GreaterThanOrEqual,
                };
                Some(self.b.ins().fcmp(cc, args[0], args[1]))
            }
            Op::ICmp(c) | Op::BCmp(c) => {
                let cc = match c {
                    CmpOp::Eq => IntCC::Equal,
                    CmpOp::Ne => IntCC::NotEqual,
                    CmpOp::Lt => IntCC::SignedLessThan,
                    CmpOp::Le => IntCC::SignedLessThanOrEqual,
                    CmpOp::Gt => IntCC::SignedGreaterThan,
                    CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
                };
                Some(self.b.ins().icmp(cc, args[0], args[1]))
            }
            Op::Not => Some(self.b.ins().icmp_imm_s(IntCC::Equal, args[0], 0)),
            Op::IToF => Some(self.b.ins().fcvt_from_sint(types::F64, args[0])),
            Op::FToI => {
                let site = fallible_site(self);
                let s = self.b.ins().iconst(P, site);
                self.rt_call_checked("mc_ftoi", &[self.ctx, s, args[0]])
            }
            Op::Select => Some(self.b.ins().select(args[0], args[1], args[2])),
            // Its value is its first operand; the rest speak of its derivative.
            Op::Linearized => Some(args[0]),
            Op::ArrayFill => {
                let site = fallible_site(self);
                let rt = result_ty.ok_or("array.fill without result")?;
                let (kind, _, _) = Self::elem_kind(types, rt);
                let s = self.b.ins().iconst(P, site);
                let rank = self.b.ins().iconst(P, (args.len() - 1) as i64);
                let mut dims: Vec<CValue> = args[1..].to_vec();
                while dims.len() < 3 {
                    dims.push(self.zero());
                }
                let name = match kind {
                    ELEM_F64 => "mc_array_fill_f64",
                    ELEM_I64 => "mc_array_fill_i64",
                    _ => "mc_array_fill_bool",
                };
                let v = if kind == ELEM_BOOL { self.b.ins().uextend(P, args[0]) } else { args[0] };
                if kind != ELEM_BOOL {
                    let call = [self.ctx, s, v, rank, dims[0], dims[1], dims[2]];
                    Some(self.short_array(Extents::Given(args[1..].to_vec()), args[0], name, &call)?)
                } else {
                    self.rt_call_checked(name, &[self.ctx, s, v, rank, dims[0], dims[1], dims[2]])
                }
            }
            Op::ArrayLit(dims) => {
                let site = fallible_site(self);
                let rt = result_ty.ok_or("array.lit without result")?;
                let (kind, _, bytes) = Self::elem_kind(types, rt);
                let s = self.b.ins().iconst(P, site);
                let k = self.b.ins().iconst(P, kind);
                let rank = self.b.ins().iconst(P, dims.len() as i64);
                let mut ds: Vec<CValue> = dims.iter().map(|&n| self.b.ins().iconst(P, n as i64)).collect();
                while ds.len() < 3 {
                    ds.push(self.zero());
                }
                let hdr = self.rt_call_checked("mc_array_new", &[self.ctx, s, k, rank, ds[0], ds[1], ds[2]]);
                let hdr = hdr.ok_or("mc_array_new has no result")?;
                let data = self.b.ins().load(P, flags(), hdr, array::DATA);
                for (i, &e) in args.iter().enumerate() {
                    self.b.ins().store(flags(), e, data, (i as i64 * bytes) as i32);
                }
                Some(hdr)
            }
            Op::ArrayDim(dim) => {
                Some(self.b.ins().load(P, self.header_loads, args[0], array::DIMS + 8 * *dim as i32))
            }
            Op::SharesMemory => {
                // One memory when their elements start at one address (an array is one
                // block: no two arrays overlap otherwise). Empty arrays may share a
                // dangling address; calling them one memory is only more cautious.
                let a = self.b.ins().load(P, self.header_loads, args[0], array::DATA);
                let b = self.b.ins().load(P, self.header_loads, args[1], array::DATA);
                Some(self.b.ins().icmp(IntCC::Equal, a, b))
            }
            Op::ExpectDim(dim) => {
                let site = fallible_site(self);
                let extent = self.b.ins().load(P, self.header_loads, args[0], array::DIMS + 8 * *dim as i32);
                let other = self.b.ins().icmp(IntCC::NotEqual, extent, args[1]);
                let k = self.b.ins().iconst(P, i64::from(*dim));
                self.check(other, site, FAIL_EXTENT, [k, extent, args[1]]);
                None
            }
            Op::Load | Op::Store | Op::TrustedLoad | Op::TrustedStore => {
                let trusted = matches!(d.op, Op::TrustedLoad | Op::TrustedStore);
                let site = if trusted { None } else { Some(fallible_site(self)) };
                let (_, et, bytes) = Self::elem_kind(types, arg_ty(0));
                let is_load = matches!(d.op, Op::Load | Op::TrustedLoad);
                let n_idx = if is_load { args.len() - 1 } else { args.len() - 2 };
                let proven = self.proofs.in_bounds.get(&inst).cloned().unwrap_or_default();
                let (addr, offset) = match self.stepped_access(inst, n_idx, trusted, &proven) {
                    Some(dim) => (self.stepped_addr(inst, args[0], &args[1..1 + n_idx], bytes, dim), 0),
                    None => self.element_addr_parts(args[0], &args[1..1 + n_idx], bytes, site, &proven),
                };
                if is_load {
                    Some(self.b.ins().load(et, flags(), addr, offset))
                } else {
                    self.b.ins().store(flags(), args[args.len() - 1], addr, offset);
                    None
                }
            }
            Op::ArrayCopy | Op::CopyInto => {
                let site = fallible_site(self);
                let (kind, _, _) = Self::elem_kind(types, arg_ty(0));
                let s = self.b.ins().iconst(P, site);
                let k = self.b.ins().iconst(P, kind);
                if matches!(d.op, Op::ArrayCopy) {
                    self.rt_call_checked("mc_array_copy", &[self.ctx, s, k, args[0]])
                } else {
                    self.rt_call_checked("mc_copy_into", &[self.ctx, s, k, args[0], args[1]]);
                    None
                }
            }
            Op::ZerosLike => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                let (kind, _, _) = Self::elem_kind(types, arg_ty(0));
                let rank = types.as_array(arg_ty(0)).map(|(_, rank)| rank);
                if let (true, Some(rank @ 1..=3)) = (kind != ELEM_BOOL, rank) {
                    let zero = match kind {
                        ELEM_F64 => self.b.ins().f64const(0.0),
                        _ => self.zero(),
                    };
                    let shape = Extents::Like(args[0], rank);
                    Some(self.short_array(shape, zero, "mc_zeros_like", &[self.ctx, s, args[0]])?)
                } else {
                    self.rt_call_checked("mc_zeros_like", &[self.ctx, s, args[0]])
                }
            }
            Op::Sum => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                let name = if result_ty == Some(TypeTable::F64) { "mc_sum_f64" } else { "mc_sum_i64" };
                self.rt_call_checked(name, &[self.ctx, s, args[0]])
            }
            Op::Dot => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                self.rt_call_checked("mc_dot", &[self.ctx, s, args[0], args[1]])
            }
            Op::Transpose => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                self.rt_call_checked("mc_transpose", &[self.ctx, s, args[0]])
            }
            Op::MatMul(_) | Op::MatVec(_) | Op::MatMulAcc(_) | Op::MatVecAcc(_) | Op::OuterAcc => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                let (name, code) = match &d.op {
                    Op::MatMul(t) => ("mc_matmul", Some(t.a as i64 + 2 * t.b as i64)),
                    Op::MatVec(t) => ("mc_matvec", Some(*t as i64)),
                    Op::MatMulAcc(t) => ("mc_matmul_acc", Some(t.a as i64 + 2 * t.b as i64)),
                    Op::MatVecAcc(t) => ("mc_matvec_acc", Some(*t as i64)),
                    _ => ("mc_outer_acc", None),
                };
                let mut call = vec![self.ctx, s];
                if let Some(code) = code {
                    call.push(self.b.ins().iconst(P, code));
                }
                call.extend(args.iter().copied());
                self.rt_call_checked(name, &call)
            }
            Op::MapFBinary(_) | Op::MapIBinary(_) => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                let is_f = matches!(d.op, Op::MapFBinary(_));
                let code = match &d.op {
                    Op::MapFBinary(op) => FBinOp::ALL.iter().position(|o| o == op).unwrap_or(0),
                    Op::MapIBinary(op) => IBinOp::ALL.iter().position(|o| o == op).unwrap_or(0),
                    _ => 0,
                };
                let code = self.b.ins().iconst(P, code as i64);
                let a_arr = types.as_array(arg_ty(0)).is_some();
                let b_arr = types.as_array(arg_ty(1)).is_some();
                let (mode, arr_a, arr_b, scalar) = match (a_arr, b_arr) {
                    (true, true) => (MODE_ARRAYS, args[0], args[1], None),
                    (true, false) => (MODE_ARRAY_SCALAR, args[0], self.zero(), Some(args[1])),
                    _ => (MODE_SCALAR_ARRAY, args[1], self.zero(), Some(args[0])),
                };
                let scalar = match scalar {
                    Some(x) => x,
                    None if is_f => self.b.ins().f64const(0.0),
                    None => self.zero(),
                };
                let m = self.b.ins().iconst(P, mode);
                let name = if is_f { "mc_map_f64" } else { "mc_map_i64" };
                self.rt_call_checked(name, &[self.ctx, s, code, m, arr_a, arr_b, scalar])
            }
            Op::MapFUnary(op) => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                let code = FUnOp::ALL.iter().position(|o| o == op).unwrap_or(0);
                let code = self.b.ins().iconst(P, code as i64);
                self.rt_call_checked("mc_map_unary", &[self.ctx, s, code, args[0]])
            }
            Op::MapFPowI => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                self.rt_call_checked("mc_map_powi", &[self.ctx, s, args[0], args[1]])
            }
            Op::AddInto => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                let scalar = arg_ty(1) == TypeTable::F64;
                let (src, x) =
                    if scalar { (self.zero(), args[1]) } else { (args[1], self.b.ins().f64const(0.0)) };
                let flag = self.b.ins().iconst(P, scalar as i64);
                self.rt_call_checked("mc_add_into", &[self.ctx, s, args[0], src, x, flag]);
                None
            }
            Op::Axpy => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                self.rt_call_checked("mc_axpy", &[self.ctx, s, args[0], args[1], args[2]]);
                None
            }
            Op::MoveAdd => {
                let s = fallible_site(self);
                let s = self.b.ins().iconst(P, s);
                self.rt_call_checked("mc_move_add", &[self.ctx, s, args[0], args[1]]);
                None
            }
            Op::RefNew => {
                let site = fallible_site(self);
                let cell = self.alloc(8, site);
                self.b.ins().store(flags(), args[0], cell, 0);
                Some(cell)
            }
            Op::RefLoad => {
                let t = machine_type(result_ty.ok_or("ref.load without result")?);
                Some(self.b.ins().load(t, flags(), args[0], 0))
            }
            Op::RefStore => {
                self.b.ins().store(flags(), args[1], args[0], 0);
                None
            }
            Op::TupleNew if d.result.is_some_and(|r| self.register_tuples.contains(&r)) => {
                if let Some(r) = d.result {
                    self.tuple_fields.insert(r, args.clone());
                }
                None
            }
            Op::TupleNew | Op::StructNew(_) if self.early_records.contains_key(&inst) => {
                let (base, stored) = self.early_records.remove(&inst).ok_or("no early record")?;
                for (k, &a) in args.iter().enumerate() {
                    if !stored[k] {
                        self.b.ins().store(flags(), a, base, 8 * k as i32);
                    }
                }
                Some(base)
            }
            Op::TupleNew | Op::StructNew(_) => {
                if args.is_empty() {
                    Some(self.zero())
                } else {
                    let site = fallible_site(self);
                    let block = self.alloc(8 * args.len() as i64, site);
                    for (k, &a) in args.iter().enumerate() {
                        if !self.unset.contains(&d.args[k]) {
                            self.b.ins().store(flags(), a, block, 8 * k as i32);
                        }
                    }
                    Some(block)
                }
            }
            Op::TupleGet(k) | Op::StructGet(_, k) if !self.releases_arena => {
                // Tuples and immutable structs never change once built, and in a function
                // that gives no arena memory back none is freed while the function can
                // still read it: Cranelift may read a field where its value is first
                // needed (a step's tape record is read field by field through the
                // reverse step, not all at its start).
                let t = machine_type(result_ty.ok_or("field read without result")?);
                Some(self.b.ins().load(t, self.header_loads, args[0], 8 * *k as i32))
            }
            Op::TupleGet(k) | Op::StructGet(_, k) | Op::MutLoad(_, k) => {
                let t = machine_type(result_ty.ok_or("field read without result")?);
                Some(self.b.ins().load(t, flags(), args[0], 8 * *k as i32))
            }
            Op::MutStore(_, k) => {
                self.b.ins().store(flags(), args[1], args[0], 8 * *k as i32);
                None
            }
            Op::Call(callee) => {
                let site = fallible_site(self);
                let depth = self.b.ins().load(P, flags(), self.ctx, ctx::DEPTH);
                let max = self.b.ins().load(P, flags(), self.ctx, ctx::MAX_DEPTH);
                let deep = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, depth, max);
                let z = self.zero();
                self.check(deep, site, FAIL_DEPTH, [max, z, z]);
                let up = self.b.ins().iadd_imm_s(depth, 1);
                self.b.ins().store(flags(), up, self.ctx, ctx::DEPTH);
                let id = self.l.funcs[callee.index()];
                let r = self.func_ref(id);
                let mut cargs = vec![self.ctx];
                cargs.extend(args.iter().copied());
                let call = self.b.ins().call(r, &cargs);
                let results = self.b.inst_results(call).to_vec();
                self.b.ins().store(flags(), depth, self.ctx, ctx::DEPTH);
                self.status_check();
                match d.result {
                    Some(t) if self.l.in_registers.get(callee.index()).copied().unwrap_or(false) => {
                        if self.register_tuples.contains(&t) {
                            self.tuple_fields.insert(t, results);
                            None
                        } else {
                            // Used as a whole (passed on, stored): the tuple in memory.
                            if d.in_tape {
                                self.allocate_in_tape(true);
                            }
                            let block = self.alloc(8 * results.len() as i64, site);
                            if d.in_tape {
                                self.allocate_in_tape(false);
                            }
                            for (k, &v) in results.iter().enumerate() {
                                self.b.ins().store(flags(), v, block, 8 * k as i32);
                            }
                            Some(block)
                        }
                    }
                    _ => results.first().copied(),
                }
            }
            Op::Print => {
                let t = arg_ty(0);
                let bits = match machine_type(t) {
                    types::F64 => self.b.ins().bitcast(types::I64, MemFlagsData::new(), args[0]),
                    types::I8 => self.b.ins().uextend(P, args[0]),
                    _ => args[0],
                };
                let ty = self.b.ins().iconst(P, t.index() as i64);
                self.rt_call("mc_print", &[self.ctx, ty, bits]);
                None
            }
            Op::ArenaMark => Some(self.b.ins().load(P, flags(), self.ctx, ctx::BUMP)),
            Op::ArenaRelease => {
                // A mark in the arena's current chunk (at or above its start, at or below
                // the bump pointer) is given back by moving the pointer; any other
                // through the runtime, which makes the mark's chunk current again. The
                // join after the two ways keeps Cranelift from taking the pointer read
                // after it for the mark: an array made there would have the mark's
                // address, and its header's extents (read-only loads) would be merged
                // with those of the array made there before.
                let mark = args[0];
                let start = self.b.ins().load(P, flags(), self.ctx, ctx::ARENA_START);
                let bump = self.b.ins().load(P, flags(), self.ctx, ctx::BUMP);
                let above = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, mark, start);
                let below = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, mark, bump);
                let here = self.b.ins().band(above, below);
                let fast = self.b.create_block();
                let slow = self.b.create_block();
                let join = self.b.create_block();
                self.b.ins().brif(here, fast, &[], slow, &[]);
                self.b.switch_to_block(fast);
                self.b.ins().store(flags(), mark, self.ctx, ctx::BUMP);
                self.b.ins().jump(join, &[]);
                self.b.switch_to_block(slow);
                self.b.set_cold_block(slow);
                self.rt_call("mc_arena_release", &[self.ctx, mark]);
                self.b.ins().jump(join, &[]);
                self.b.switch_to_block(join);
                // What the block's piece still holds may lie past the mark: take a new one.
                self.piece = None;
                None
            }
            // Marks are never taken while allocations go to the tape region: the tape
            // region's window is the other one.
            Op::TapeMark => Some(self.b.ins().load(P, flags(), self.ctx, ctx::OTHER_BUMP)),
            Op::TapeRelease => {
                self.rt_call("mc_tape_release", &[self.ctx, args[0]]);
                None
            }
            Op::Unset if result_ty.is_some_and(|t| matches!(types.get(t), mcir_ir::Type::Stack(_))) => {
                // A stack the path taken never made (`mcir_ad::sink`): nothing pops it, but
                // a reverse pass that reads the record may load its header, so it is one
                // that is empty and has no room.
                Some(self.b.ins().iconst(P, std::ptr::addr_of!(NO_STACK) as i64))
            }
            Op::Unset => {
                // Nothing reads it; zero bits keep the code deterministic.
                let t = machine_type(result_ty.ok_or("unset without result")?);
                Some(match t {
                    types::F64 => self.b.ins().f64const(0.0),
                    t => self.b.ins().iconst(t, 0),
                })
            }
            Op::StackNew if self.sized_stacks.contains_key(&d.result.ok_or("stack.new without result")?) => {
                // Header and room for what the stack's one reservation will ask, plus one
                // (a reservation takes its fast path when more than its runs fit); the
                // first few values' room when that is not known here.
                let site = fallible_site(self);
                let first = self.b.ins().iconst(P, STACK_FIRST);
                let room = self.sized_room(d.result).unwrap_or(first);
                let bytes = self.b.ins().ishl_imm_u(room, 3);
                let bytes = self.b.ins().iadd_imm_s(bytes, stack::HEADER_BYTES as i64);
                let block = self.bump_value(bytes, site);
                let data = self.b.ins().iadd_imm_s(block, stack::HEADER_BYTES as i64);
                let zero = self.zero();
                self.b.ins().store(flags(), data, block, stack::DATA);
                self.b.ins().store(flags(), zero, block, stack::LEN);
                self.b.ins().store(flags(), room, block, stack::CAP);
                Some(block)
            }
            Op::StackNew => {
                // Header and room for a first few values in one block from the arena.
                const FIRST: i64 = STACK_FIRST;
                let site = fallible_site(self);
                let block = self.alloc(stack::HEADER_BYTES as i64 + 8 * FIRST, site);
                let data = self.b.ins().iadd_imm_s(block, stack::HEADER_BYTES as i64);
                let zero = self.zero();
                let cap = self.b.ins().iconst(P, FIRST);
                self.b.ins().store(flags(), data, block, stack::DATA);
                self.b.ins().store(flags(), zero, block, stack::LEN);
                self.b.ins().store(flags(), cap, block, stack::CAP);
                Some(block)
            }
            Op::StackPush => {
                // Fast path inline: store when there is room, grow through the runtime if not.
                let site = fallible_site(self);
                let st = args[0];
                let len = self.b.ins().load(P, flags(), st, stack::LEN);
                let cap = self.b.ins().load(P, flags(), st, stack::CAP);
                let full = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, len, cap);
                let grow = self.b.create_block();
                let push = self.b.create_block();
                self.b.ins().brif(full, grow, &[], push, &[]);
                self.b.switch_to_block(grow);
                self.b.set_cold_block(grow);
                let s = self.b.ins().iconst(P, site);
                self.rt_call("stack_grow", &[self.ctx, s, st]);
                self.status_check();
                self.b.ins().jump(push, &[]);
                self.b.switch_to_block(push);
                let data = self.b.ins().load(P, flags(), st, stack::DATA);
                let off = self.b.ins().imul_imm_s(len, 8);
                let addr = self.b.ins().iadd(data, off);
                let v = match machine_type(arg_ty(1)) {
                    types::I8 => self.b.ins().uextend(P, args[1]),
                    _ => args[1],
                };
                self.b.ins().store(flags(), v, addr, 0);
                let up = self.b.ins().iadd_imm_s(len, 1);
                self.b.ins().store(flags(), up, st, stack::LEN);
                None
            }
            Op::StackReserve => {
                // Fast path inline: when the room is there, move the length; the runtime
                // grows the stack otherwise (and reports a count too large for memory).
                // Counts are unsigned differences: `hi - lo` cannot overflow.
                let site = fallible_site(self);
                let (st, lo, hi, extra) = (args[0], args[1], args[2], args[3]);
                // The verifier makes a width a positive constant.
                let width = d.args.get(4).map_or(Some(1), |&w| self.f.const_int(w)).filter(|&w| w >= 1);
                let width = width.ok_or("stack.reserve of a width that is not a positive constant")?;
                let some = self.b.ins().icmp(IntCC::SignedGreaterThan, hi, lo);
                let diff = self.b.ins().isub(hi, lo);
                let z = self.zero();
                let runs = self.b.ins().select(some, diff, z);
                let records = self.b.ins().iadd(runs, extra);
                let len = self.b.ins().load(P, flags(), st, stack::LEN);
                let cap = self.b.ins().load(P, flags(), st, stack::CAP);
                let room = self.b.ins().isub(cap, len);
                let runs_fit = self.b.ins().icmp(IntCC::UnsignedLessThan, runs, room);
                // `width · records ≤ room` without the product's overflow.
                let room_records = if width == 1 { room } else { self.b.ins().udiv_imm_u(room, width) };
                let all_fit = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, records, room_records);
                let fits = self.b.ins().band(runs_fit, all_fit);
                let wanted = if width == 1 { records } else { self.b.ins().imul_imm_s(records, width) };
                let fast = self.b.create_block();
                let slow = self.b.create_block();
                let done = self.b.create_block();
                let base = self.b.append_block_param(done, P);
                self.b.ins().brif(fits, fast, &[], slow, &[]);
                self.b.switch_to_block(fast);
                let up = self.b.ins().iadd(len, wanted);
                self.b.ins().store(flags(), up, st, stack::LEN);
                self.b.ins().jump(done, &[len.into()]);
                self.b.switch_to_block(slow);
                self.b.set_cold_block(slow);
                let s = self.b.ins().iconst(P, site);
                let w = self.b.ins().iconst(P, width);
                let r = self
                    .rt_call_checked("mc_stack_reserve", &[self.ctx, s, st, lo, hi, extra, w])
                    .unwrap_or(len);
                self.b.ins().jump(done, &[r.into()]);
                self.b.switch_to_block(done);
                if let Some(r) = d.result.filter(|r| self.sole_reservations.contains(r)) {
                    // Nothing grows the stack until this reservation runs again, which
                    // makes a new offset: the puts into this room keep these.
                    let data = self.b.ins().load(P, flags(), st, stack::DATA);
                    let end = self.b.ins().iadd(base, wanted);
                    self.cursors.insert(r, (data, end));
                }
                let lo = if width == 1 { lo } else { self.b.ins().imul_imm_s(lo, width) };
                Some(self.b.ins().isub(base, lo))
            }
            Op::StackPut => {
                let site = fallible_site(self);
                let st = args[0];
                let len = self.put_end(d.args[1], st);
                // A record of `width` values at `offset + width · i + k`, in reserved room
                // only: an index past the end is an internal error.
                let width = args.len().saturating_sub(3).max(1) as i64;
                let scaled = if width == 1 { args[2] } else { self.b.ins().imul_imm_s(args[2], width) };
                let index = self.b.ins().iadd(args[1], scaled);
                let past = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, index, len);
                let past = if width == 1 {
                    past
                } else {
                    // `index < len` makes `len - index` the room left, which must hold them all.
                    let left = self.b.ins().isub(len, index);
                    let short = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, left, width);
                    self.b.ins().bor(past, short)
                };
                let z = self.zero();
                self.check(past, site, FAIL_STACK_PUT, [z, z, z]);
                let data = self.put_data(d.args[1], st);
                let off = self.b.ins().ishl_imm_u(index, 3);
                let addr = self.b.ins().iadd(data, off);
                let lane_type = machine_type(arg_ty(3));
                for (k, &value) in args[3..].iter().enumerate() {
                    let v = match lane_type {
                        types::I8 => self.b.ins().uextend(P, value),
                        _ => value,
                    };
                    self.b.ins().store(flags(), v, addr, 8 * k as i32);
                }
                None
            }
            Op::StackPop | Op::StackPeek => {
                let site = fallible_site(self);
                let st = args[0];
                let len = self.pop_len(d.args[0], st);
                if !self.unchecked_pops.contains(&inst) {
                    // Room for the whole run (`pop_runs`) or this one value.
                    let run = self.pop_runs.get(&inst).copied().unwrap_or(1);
                    let short = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, len, run);
                    let z = self.zero();
                    self.check(short, site, FAIL_EMPTY_STACK, [z, z, z]);
                }
                let down = self.b.ins().iadd_imm_s(len, -1);
                if matches!(d.op, Op::StackPop) {
                    self.set_pop_len(d.args[0], st, down);
                }
                let data = self.pop_data(d.args[0], st);
                let off = self.b.ins().imul_imm_s(down, 8);
                let addr = self.b.ins().iadd(data, off);
                let t = machine_type(result_ty.ok_or("stack.pop without result")?);
                Some(self.b.ins().load(t, flags(), addr, 0))
            }
        };
        if let (Some(r), Some(v)) = (d.result, out) {
            self.vals[r.index()] = Some(v);
            if self.popped_only.contains(&r) {
                let data = self.b.ins().load(P, flags(), v, stack::DATA);
                let len = self.b.ins().load(P, flags(), v, stack::LEN);
                let var = match self.pop_cursors.get(&r) {
                    Some(&(_, var)) => var,
                    None => self.b.declare_var(P),
                };
                self.b.def_var(var, len);
                self.pop_cursors.insert(r, (data, var));
            }
        } else if let Some(r) = d.result.filter(|r| !self.tuple_fields.contains_key(r)) {
            return Err(format!("{r} ({}) has no lowered value", types.display(f.value_type(r))));
        }
        Ok(())
    }
}
