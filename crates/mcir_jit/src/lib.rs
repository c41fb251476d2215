//! Native code for mcir IR through Cranelift. [`Jit::compile`] lowers every function of
//! a verified module — primal functions and derived passes alike — and [`Jit::call`]
//! runs one on runtime values with the interpreter's semantics: the same results, the
//! same arguments' state afterwards, and the same errors at the same source locations.
//!
//! Memory: every allocation a call makes (arrays, cells, records, tuples, tape stacks)
//! comes from a per-call arena ([`Workspace`]). Arguments are copied in before the call;
//! the result and the arguments' new state are copied out after it; then the arena is
//! reset, keeping its memory for the next call. Nothing the generated code allocates
//! outlives the call, so nothing leaks, and a workspace reused across calls of the same
//! shapes allocates nothing new.

#![deny(missing_docs)]

mod fuse;
mod layout;
mod lower;
mod marshal;
mod pool;
mod runtime;
mod unroll;
mod watchdog;

use cranelift_codegen::ir::{types, AbiParam, Function, InstBuilder, MemFlagsData};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId as CFuncId, Linkage, Module as _};
use layout::{Arena, Ctx, Runtime};
use mcir_interp::{Limits, RuntimeError, RuntimeErrorKind, Val};
use mcir_ir::entity::EntityRef;
use mcir_ir::{FuncId, Module, TypeTable};
use pool::{Batch, Job, Tier};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Type and source tables of a compiled module, shared with the runtime.
pub(crate) struct Tables {
    pub types: TypeTable,
    pub sites: lower::Sites,
}

/// Why a module could not be compiled (an internal error: verified IR always lowers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitError(pub String);

impl std::fmt::Display for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "native code generation failed: {}", self.0)
    }
}

impl std::error::Error for JitError {}

struct Compiled {
    jit: Option<JITModule>,
    /// The entry trampoline of each function: `extern "C" fn(ctx, args, ret)`.
    entries: Vec<*const u8>,
    tables: Box<Tables>,
    /// The signature (name, parameters, result, location) of each function that can be
    /// called, as a function without a body.
    signatures: Vec<Option<mcir_ir::Function>>,
}

// SAFETY: after `compile` the JIT module is never touched again except to free its
// memory in `Drop`; the finalized code is plain machine code that writes only through
// the context and arena of the call running it, so any number of threads may run it.
unsafe impl Send for Compiled {}
// SAFETY: as above.
unsafe impl Sync for Compiled {}

impl Drop for Compiled {
    fn drop(&mut self) {
        if let Some(jit) = self.jit.take() {
            // SAFETY: no function pointer into this module outlives `Compiled`: they are
            // only used by calls that borrow it.
            unsafe { jit.free_memory() };
        }
    }
}

/// A compiled module. Cheap to clone; calls may run on several threads at once.
#[derive(Clone)]
pub struct Jit {
    inner: Arc<Compiled>,
}

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Jit({} functions)", self.inner.entries.len())
    }
}

/// The memory of calls: an arena reset after each call but kept for the next.
pub struct Workspace {
    arena: Option<Arena>,
    tape: Option<Arena>,
}

impl Default for Workspace {
    fn default() -> Self {
        Workspace::new()
    }
}

impl Workspace {
    /// An empty workspace.
    pub fn new() -> Workspace {
        Workspace { arena: None, tape: None }
    }

    /// Bytes of memory the workspace holds for reuse.
    pub fn capacity_bytes(&self) -> usize {
        [&self.arena, &self.tape].iter().filter_map(|a| a.as_ref()).map(|a| a.capacity_bytes()).sum()
    }
}

fn math_functions() -> Vec<(&'static str, *const u8)> {
    use runtime::*;
    let f = |x: extern "C" fn(f64) -> f64| x as *const u8;
    vec![
        ("mc_sin", f(mc_sin)),
        ("mc_cos", f(mc_cos)),
        ("mc_tan", f(mc_tan)),
        ("mc_asin", f(mc_asin)),
        ("mc_acos", f(mc_acos)),
        ("mc_atan", f(mc_atan)),
        ("mc_sinh", f(mc_sinh)),
        ("mc_cosh", f(mc_cosh)),
        ("mc_tanh", f(mc_tanh)),
        ("mc_exp", f(mc_exp)),
        ("mc_log", f(mc_log)),
        ("mc_log1p", f(mc_log1p)),
        ("mc_expm1", f(mc_expm1)),
        ("mc_round", f(mc_round)),
    ]
}

/// The host's instruction set with the settings of `tier`, made once per process
/// (detecting the CPU's features is not free).
fn host_isa(tier: Tier) -> Result<cranelift_codegen::isa::OwnedTargetIsa, JitError> {
    type Isa = Result<cranelift_codegen::isa::OwnedTargetIsa, JitError>;
    static ISAS: [std::sync::OnceLock<Isa>; Tier::COUNT] =
        [const { std::sync::OnceLock::new() }; Tier::COUNT];
    ISAS[tier as usize]
        .get_or_init(|| {
            let err = |e: &dyn std::fmt::Display| JitError(e.to_string());
            let mut flags = settings::builder();
            let optimise = tier == Tier::Optimised;
            flags.set("opt_level", if optimise { "speed" } else { "none" }).map_err(|e| err(&e))?;
            let quick = tier == Tier::Quick;
            flags
                .set("regalloc_algorithm", if quick { "single_pass" } else { "backtracking" })
                .map_err(|e| err(&e))?;
            flags.set("is_pic", "false").map_err(|e| err(&e))?;
            flags.set("use_colocated_libcalls", "false").map_err(|e| err(&e))?;
            flags
                .set("enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })
                .map_err(|e| err(&e))?;
            cranelift_native::builder()
                .map_err(|e| err(&e))?
                .finish(settings::Flags::new(flags))
                .map_err(|e| err(&e))
        })
        .clone()
}

impl Jit {
    /// Compiles every function of `module`, which must pass the verifier.
    pub fn compile(module: &Module) -> Result<Jit, JitError> {
        let all: Vec<FuncId> = module.funcs.keys().collect();
        Jit::compile_reachable(module, &all)
    }

    /// Compiles the functions of `module` that `roots` call, directly or not; only they
    /// can be called.
    pub fn compile_reachable(module: &Module, roots: &[FuncId]) -> Result<Jit, JitError> {
        let mut builder = Jit::builder(module)?;
        builder.add(module, roots)?;
        builder.finish(module)
    }

    /// Native code to be built in steps: functions added with [`JitBuilder::add`] start
    /// compiling at once, on every core, while the caller goes on (deriving the rules
    /// of a program whose own functions are already compiling, say). `module` is the
    /// first module added; later ones may only extend it (same functions and types
    /// under the same ids, more after them).
    pub fn builder(module: &Module) -> Result<JitBuilder, JitError> {
        JitBuilder::new(module)
    }
    /// Runs `func` on `args` (which must fit its signature) with a fresh workspace.
    pub fn call(&self, func: FuncId, args: &[Val], limits: &Limits) -> Result<Option<Val>, RuntimeError> {
        self.call_in(&mut Workspace::new(), func, args, limits)
    }

    /// Runs `func` on `args` in `workspace`, whose memory is reused. Address-identified
    /// arguments show the call's effects afterwards, as with the interpreter.
    pub fn call_in(
        &self,
        workspace: &mut Workspace,
        func: FuncId,
        args: &[Val],
        limits: &Limits,
    ) -> Result<Option<Val>, RuntimeError> {
        let c = &*self.inner;
        let (f, entry) = c.entry(func)?;
        if args.len() != f.params.len() {
            return Err(internal("wrong number of arguments"));
        }
        let types = &c.tables.types;
        let result = c.with_call(
            f,
            entry,
            workspace,
            limits,
            |ctx| {
                let mut seen = HashMap::new();
                let mut inputs = marshal::Inputs::new();
                let mut words = Vec::with_capacity(args.len());
                for (a, &t) in args.iter().zip(&f.params) {
                    let w = marshal::to_native(types, ctx, t, a, &mut seen, &mut inputs)
                        .map_err(|kind| CallError::Runtime(fail_at(f, kind)))?;
                    words.push(w);
                }
                Ok((words, inputs))
            },
            |ret, inputs| {
                let mut known = HashMap::new();
                marshal::write_back(types, &inputs, &mut known);
                f.ret.map(|t| marshal::from_native(types, t, ret, &mut known))
            },
        );
        result.map_err(|e| match e {
            CallError::Runtime(r) => r,
            CallError::Args(m) => internal(&m),
        })
    }
}

/// Native code being built (see [`Jit::builder`]).
pub struct JitBuilder {
    jit: JITModule,
    runtime: HashMap<&'static str, CFuncId>,
    /// Each added function's Cranelift id, and its entry trampoline's if it is a root
    /// (by function index).
    funcs: Vec<Option<CFuncId>>,
    /// Which functions return their tuple's fields in registers (`lower::register_fields`):
    /// those Rust never calls (added as no root), so no trampoline reads their result.
    in_registers: Vec<bool>,
    tramps: Vec<Option<(CFuncId, cranelift_codegen::ir::Signature)>>,
    sites: lower::Sites,
    batch: pool::Open,
    helpers: Vec<Job>,
    fctx: FunctionBuilderContext,
}

impl JitBuilder {
    fn new(module: &Module) -> Result<JitBuilder, JitError> {
        let err = |e: &dyn std::fmt::Display| JitError(e.to_string());
        let isa = host_isa(Tier::Optimised)?;
        let isas = [isa.clone(), host_isa(Tier::InOrder)?, host_isa(Tier::Quick)?];
        let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        let rt_fns = lower::runtime_functions();
        let math = math_functions();
        for r in &rt_fns {
            jb.symbol(r.name, r.ptr);
        }
        for (name, ptr) in &math {
            jb.symbol(*name, *ptr);
        }
        // Libcalls Cranelift may emit on CPUs without SSE4.1.
        extern "C" fn floor(x: f64) -> f64 {
            x.floor()
        }
        extern "C" fn ceil(x: f64) -> f64 {
            x.ceil()
        }
        extern "C" fn trunc(x: f64) -> f64 {
            x.trunc()
        }
        extern "C" fn nearbyint(x: f64) -> f64 {
            x.round_ties_even()
        }
        jb.symbol("floor", floor as *const u8);
        jb.symbol("ceil", ceil as *const u8);
        jb.symbol("trunc", trunc as *const u8);
        jb.symbol("nearbyint", nearbyint as *const u8);
        // All of the module's code in one reserved region: calls between its functions
        // are 32-bit relative, which code scattered over the address space (between
        // other threads' stacks, say) could not reach. The reservation is address space
        // only (generous for the module's size and its derivatives', within the ±2 GiB
        // a call reaches); code that outgrows it is an error, not a crash.
        let insts: usize = module.funcs.iter().map(|(_, f)| f.insts.len()).sum();
        let reserve = (16usize << 20).saturating_add(insts.saturating_mul(16 << 10)).min(1 << 30);
        let arena = cranelift_jit::ArenaMemoryProvider::new_with_size(reserve).map_err(|e| err(&e))?;
        jb.memory_provider(Box::new(arena));
        let mut jit = JITModule::new(jb);
        // Imports.
        let mut runtime: HashMap<&'static str, CFuncId> = HashMap::new();
        for r in &rt_fns {
            let mut sig = jit.make_signature();
            sig.params.extend(r.params.iter().map(|&t| AbiParam::new(t)));
            sig.returns.extend(r.ret.iter().map(|&t| AbiParam::new(t)));
            let id = jit.declare_function(r.name, Linkage::Import, &sig).map_err(|e| err(&e))?;
            runtime.insert(r.name, id);
        }
        for (name, _) in &math {
            let mut sig = jit.make_signature();
            sig.params.push(AbiParam::new(types::F64));
            sig.returns.push(AbiParam::new(types::F64));
            let id = jit.declare_function(name, Linkage::Import, &sig).map_err(|e| err(&e))?;
            runtime.insert(name, id);
        }
        // Slow paths taken rarely from hot code (a new arena window, a bigger stack, the
        // time-limit test of a counted loop) go through helpers that preserve every
        // register, so that values live across them (a loop's accumulator) need not
        // leave their registers.
        let mut helpers: Vec<Job> = Vec::new();
        for (helper, target, arity) in
            [("alloc_refill", "mc_refill", 3), ("stack_grow", "mc_stack_grow", 3), ("poll", "mc_poll", 2)]
        {
            let mut rsig = jit.make_signature();
            rsig.call_conv = cranelift_codegen::isa::CallConv::PreserveAll;
            for _ in 0..arity {
                rsig.params.push(AbiParam::new(types::I64));
            }
            let id = jit.declare_function(helper, Linkage::Local, &rsig).map_err(|e| err(&e))?;
            let mut func = Function::with_name_signature(Default::default(), rsig.clone());
            let mut fctx = FunctionBuilderContext::new();
            let mut b = FunctionBuilder::new(&mut func, &mut fctx);
            let blk = b.create_block();
            b.append_block_params_for_function_params(blk);
            b.switch_to_block(blk);
            let ps = b.block_params(blk).to_vec();
            let callee = jit.declare_func_in_func(runtime[target], b.func);
            b.ins().call(callee, &ps);
            b.ins().return_(&[]);
            b.seal_all_blocks();
            b.finalize(jit.target_config());
            helpers.push(Job::new(id, helper.to_string(), func, Tier::Quick));
            runtime.insert(helper, id);
        }
        let dump = std::env::var_os("MCIR_JIT_DUMP").is_some();
        Ok(JitBuilder {
            jit,
            runtime,
            funcs: Vec::new(),
            in_registers: Vec::new(),
            tramps: Vec::new(),
            sites: Vec::new(),
            batch: pool::Open(Batch::start(isas, dump)),
            helpers,
            fctx: FunctionBuilderContext::new(),
        })
    }

    /// Starts compiling the functions of `module` that `roots` call, directly or not,
    /// and have not been added yet; the roots can be called.
    pub fn add(&mut self, module: &Module, roots: &[FuncId]) -> Result<(), JitError> {
        let err = |e: &dyn std::fmt::Display| JitError(e.to_string());
        let n = module.funcs.len();
        self.funcs.resize(n.max(self.funcs.len()), None);
        self.in_registers.resize(n.max(self.in_registers.len()), false);
        self.tramps.resize(n.max(self.tramps.len()), None);
        let mut reachable = vec![false; n];
        let mut todo: Vec<FuncId> = roots.to_vec();
        while let Some(f) = todo.pop() {
            let fresh = reachable.get(f.index()).is_some_and(|&r| !r) && self.funcs[f.index()].is_none();
            if !fresh {
                continue;
            }
            reachable[f.index()] = true;
            for d in module.funcs[f].insts.values() {
                if let mcir_ir::Op::Call(g) = d.op {
                    todo.push(g);
                }
            }
        }
        let runs_once = runs_once(module, &reachable, roots);
        // Compiled for speed of compiling: code that runs once per call, and functions
        // so large that optimising them would take longer than any run.
        let quick: Vec<bool> = module
            .funcs
            .iter()
            .map(|(id, f)| runs_once[id.index()] || f.insts.len() > LARGE_FUNCTION_INSTS)
            .collect();
        let escapes = mcir_ir::reclaim::Escapes::of(module);
        // Declarations first: bodies call functions declared in this step or before.
        for &r in roots {
            if self.in_registers.get(r.index()).copied().unwrap_or(false) {
                return Err(JitError(format!(
                    "internal error: @{} was compiled to be called from native code only",
                    module.funcs[r].name
                )));
            }
        }
        let mut is_root = vec![false; n];
        for r in roots {
            if let Some(x) = is_root.get_mut(r.index()) {
                *x = true;
            }
        }
        for (id, f) in module.funcs.iter() {
            if reachable[id.index()] {
                let in_registers = !is_root[id.index()] && lower::register_fields(&module.types, f).is_some();
                self.in_registers[id.index()] = in_registers;
                let sig = lower::signature(&self.jit, &module.types, f, in_registers);
                let cid = self
                    .jit
                    .declare_function(&format!("f{}", id.index()), Linkage::Local, &sig)
                    .map_err(|e| err(&e))?;
                self.funcs[id.index()] = Some(cid);
            }
        }
        for &r in roots {
            if r.index() >= n || self.tramps[r.index()].is_some() {
                continue;
            }
            let mut tsig = self.jit.make_signature();
            for _ in 0..3 {
                tsig.params.push(AbiParam::new(types::I64));
            }
            let tid = self
                .jit
                .declare_function(&format!("entry{}", r.index()), Linkage::Local, &tsig)
                .map_err(|e| err(&e))?;
            self.tramps[r.index()] = Some((tid, tsig));
        }
        // Each function's Cranelift IR, compiled as soon as it is built (largest first,
        // so that the cores finish together).
        let funcs: Vec<CFuncId> = self.funcs.iter().map(|f| f.unwrap_or(CFuncId::from_u32(0))).collect();
        let mut order: Vec<FuncId> = module.funcs.keys().filter(|id| reachable[id.index()]).collect();
        order.sort_by_key(|&id| std::cmp::Reverse(module.funcs[id].insts.len()));
        for id in order {
            let f = &module.funcs[id];
            let mut func = Function::new();
            {
                let mut l = lower::Lowering {
                    jit: &mut self.jit,
                    module,
                    funcs: &funcs,
                    in_registers: &self.in_registers,
                    runtime: &self.runtime,
                    sites: &mut self.sites,
                    compact: quick[id.index()],
                    escapes: &escapes,
                };
                l.lower(id, &mut func, &mut self.fctx).map_err(|e| JitError(format!("@{}: {e}", f.name)))?;
            }
            if std::env::var_os("MCIR_JIT_CLIF").is_some() {
                eprintln!("; @{}\n{}", f.name, func.display());
            }
            let tier = if quick[id.index()] {
                Tier::Quick
            } else if f.is_reverse_pass() && !touches_arrays(module, f) {
                Tier::InOrder
            } else {
                Tier::Optimised
            };
            self.batch.push(Job::new(funcs[id.index()], f.name.clone(), func, tier));
        }
        // Only the roots are called from Rust, so only they get a trampoline: unpack
        // arguments from 8-byte slots, call, store the result.
        for &r in roots {
            let (Some(Some((tid, tsig))), Some(f)) = (self.tramps.get(r.index()), module.funcs.get(r)) else {
                continue;
            };
            let mut func = Function::with_name_signature(Default::default(), tsig.clone());
            {
                let mut b = FunctionBuilder::new(&mut func, &mut self.fctx);
                let blk = b.create_block();
                b.append_block_params_for_function_params(blk);
                b.switch_to_block(blk);
                let ps = b.block_params(blk).to_vec();
                let mut args = vec![ps[0]];
                for (k, &t) in f.params.iter().enumerate() {
                    args.push(b.ins().load(
                        lower::machine_type(t),
                        MemFlagsData::trusted(),
                        ps[1],
                        8 * k as i32,
                    ));
                }
                let callee = self.jit.declare_func_in_func(funcs[r.index()], b.func);
                let call = b.ins().call(callee, &args);
                if let (Some(&res), Some(t)) = (b.inst_results(call).first(), f.ret) {
                    let w = if lower::machine_type(t) == types::I8 {
                        b.ins().uextend(types::I64, res)
                    } else {
                        res
                    };
                    b.ins().store(MemFlagsData::trusted(), w, ps[2], 0);
                }
                b.ins().return_(&[]);
                b.seal_all_blocks();
                b.finalize(self.jit.target_config());
            }
            self.batch.push(Job::new(*tid, format!("{} (entry)", f.name), func, Tier::Quick));
        }
        Ok(())
    }

    /// Waits for everything added to compile; `module` is the last module added.
    pub fn finish(mut self, module: &Module) -> Result<Jit, JitError> {
        let err = |e: &dyn std::fmt::Display| JitError(e.to_string());
        for helper in std::mem::take(&mut self.helpers) {
            self.batch.push(helper);
        }
        let work = self.batch.finish();
        let mut jit = self.jit;
        for job in &work {
            let code = match &job.code {
                Some(Ok(code)) => code,
                Some(Err(e)) => return Err(e.clone()),
                None => return Err(JitError(format!("@{} was not compiled", job.name))),
            };
            if let Some(v) = &code.vcode {
                eprintln!("; @{}\n{v}", job.name);
            }
            if let Some(dir) = std::env::var_os("MCIR_JIT_BYTES") {
                let _ =
                    std::fs::write(std::path::Path::new(&dir).join(format!("{}.bin", job.name)), &code.bytes);
            }
            jit.define_function_bytes(job.id, code.align, &code.bytes, &code.relocs).map_err(|e| err(&e))?;
        }
        jit.finalize_definitions().map_err(|e| err(&e))?;
        if std::env::var_os("MCIR_PERF_MAP").is_some() {
            write_perf_map(&jit, &work);
        }
        let n = module.funcs.len();
        let mut entries = vec![std::ptr::null(); n];
        let mut signatures = vec![None; n];
        for (id, f) in module.funcs.iter() {
            if let Some(Some((t, _))) = self.tramps.get(id.index()) {
                entries[id.index()] = jit.get_finalized_function(*t);
                let params: Vec<(Option<String>, mcir_ir::TypeId)> =
                    f.params.iter().map(|&t| (None, t)).collect();
                let mut sig = mcir_ir::Function::new(&f.name, &params, f.ret);
                sig.span = f.span;
                signatures[id.index()] = Some(sig);
            }
        }
        let tables = Box::new(Tables { types: module.types.clone(), sites: self.sites });
        Ok(Jit { inner: Arc::new(Compiled { jit: Some(jit), entries, tables, signatures }) })
    }
}

/// `n` arguments, in words ("1 argument", "2 arguments"), for messages.
fn arguments(n: usize) -> String {
    if n == 1 {
        "1 argument".to_string()
    } else {
        format!("{n} arguments")
    }
}

/// Names the generated code for `perf` (`/tmp/perf-PID.map`, one line per function:
/// start, size, name), so profiles of native code show IR function names. Best effort:
/// a map that cannot be written is left out.
fn write_perf_map(jit: &JITModule, work: &[Job]) {
    use std::io::Write;
    let path = format!("/tmp/perf-{}.map", std::process::id());
    let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) else { return };
    for job in work {
        let size = match &job.code {
            Some(Ok(c)) => c.bytes.len(),
            _ => 0,
        };
        let start = jit.get_finalized_function(job.id) as usize;
        let _ = writeln!(file, "{start:x} {size:x} {}", job.name);
    }
}

/// Whether native code may compute `op` as a loop over an array's elements in the
/// function itself rather than in a runtime routine.
fn loops_over_elements(op: &mcir_ir::Op) -> bool {
    use mcir_ir::Op;
    matches!(
        op,
        Op::Sum
            | Op::Dot
            | Op::MapFBinary(_)
            | Op::MapIBinary(_)
            | Op::MapFUnary(_)
            | Op::MapFPowI
            | Op::CopyInto
            | Op::AddInto
            | Op::Axpy
            | Op::MoveAdd
            | Op::ArrayCopy
            | Op::ArrayFill
            | Op::ZerosLike
    )
}

/// Whether any instruction of `f` reads or makes an array. Cranelift's e-graph earns its
/// keep in array code (it hoists and merges the loads of arrays' headers that each
/// access makes); a reverse pass of scalar arithmetic is better compiled in the order
/// its IR gives ([`Tier::InOrder`]).
fn touches_arrays(module: &Module, f: &mcir_ir::Function) -> bool {
    let is_array = |v: &mcir_ir::Value| module.types.as_array(f.value_type(*v)).is_some();
    f.blocks.values().flat_map(|b| &b.insts).any(|&i| {
        let data = &f.insts[i];
        data.args.iter().any(is_array) || data.result.as_ref().is_some_and(is_array)
    })
}

/// The most IR instructions a function may have to be optimised. Cranelift's
/// optimisation and its backtracking register allocator take time that grows faster than
/// the function (the reverse pass of a straight-line function of 8 000 statements, 72 000
/// Cranelift instructions, took 14.4 s to optimise and 0.16 s to compile quickly); the
/// largest function of the benchmarks has about 2 000.
const LARGE_FUNCTION_INSTS: usize = 20_000;

/// The functions (by index) that run at most once per call from Rust and have no loop
/// (in the IR, or over array elements in native code), so that compiling them quickly
/// matters more than optimising them: the roots, and
/// functions outside any call cycle called only from such functions, outside loops.
fn runs_once(module: &Module, reachable: &[bool], roots: &[FuncId]) -> Vec<bool> {
    let n = module.funcs.len();
    let is_reachable = |f: FuncId| reachable.get(f.index()).copied().unwrap_or(false);
    let graph = mcir_ir::callgraph::CallGraph::of(module, is_reachable);
    let mut has_loop = vec![false; n];
    // Whether each call site (in `graph.sites()` order) is inside a loop.
    let mut in_loop = Vec::with_capacity(graph.sites().len());
    for (id, f) in module.funcs.iter() {
        if !is_reachable(id) {
            continue;
        }
        let depths = mcir_ir::cfg::ControlFlow::compute(f).loop_depths();
        // Native code runs these as loops over the elements, inline (a chain of maps
        // fused into its `sum`, say): worth optimising like a loop.
        has_loop[id.index()] = depths.iter().any(|&d| d > 0)
            || f.blocks.values().flat_map(|b| &b.insts).any(|&i| loops_over_elements(&f.insts[i].op));
        in_loop
            .extend(graph.calls_from(id).iter().map(|s| depths.get(s.block.index()).is_some_and(|&d| d > 0)));
    }
    let mut is_root = vec![false; n];
    for r in roots.iter().filter(|r| r.index() < n) {
        is_root[r.index()] = true;
    }
    // A function that reaches itself through calls runs any number of times, and so
    // does one called in a loop or from a function that does: a worklist from those.
    let mut once: Vec<bool> = (0..n).map(|i| reachable[i] && !graph.is_recursive(FuncId::new(i))).collect();
    let mut work: Vec<FuncId> = (0..n).filter(|&i| !once[i]).map(FuncId::new).collect();
    for (site, &looped) in graph.sites().iter().zip(&in_loop) {
        let callee = site.callee.index();
        if looped && callee < n && once[callee] && !is_root[callee] {
            once[callee] = false;
            work.push(site.callee);
        }
    }
    while let Some(f) = work.pop() {
        for site in graph.calls_from(f) {
            let callee = site.callee.index();
            if callee < n && once[callee] && !is_root[callee] {
                once[callee] = false;
                work.push(site.callee);
            }
        }
    }
    (0..n).map(|i| once[i] && !has_loop[i]).collect()
}

/// A compiled function's entry trampoline.
type EntryFn = extern "C" fn(*mut Ctx, *const u64, *mut u64);

impl Compiled {
    /// A function and its entry trampoline, if it was compiled as an entry.
    fn entry(&self, func: FuncId) -> Result<(&mcir_ir::Function, EntryFn), RuntimeError> {
        let f = self.signatures.get(func.index()).and_then(|f| f.as_ref());
        let f = f.ok_or_else(|| internal("the function was not compiled"))?;
        let entry = *self.entries.get(func.index()).ok_or_else(|| internal("no such function"))?;
        if entry.is_null() {
            return Err(internal("the function was not compiled"));
        }
        // SAFETY: a non-null entry is the trampoline of `f`, finalized in this module
        // (which the caller borrows for the call), with exactly this signature.
        Ok((f, unsafe { std::mem::transmute::<*const u8, EntryFn>(entry) }))
    }

    /// One call in `workspace`'s arena: `args` turns the arguments into machine words
    /// (it may allocate through the context) and may keep some state for `done`, which
    /// reads the result before the arena is reset.
    fn with_call<W: AsRef<[u64]>, S, T>(
        &self,
        f: &mcir_ir::Function,
        entry: EntryFn,
        workspace: &mut Workspace,
        limits: &Limits,
        args: impl FnOnce(&mut Ctx) -> Result<(W, S), CallError>,
        done: impl FnOnce(u64, S) -> T,
    ) -> Result<T, CallError> {
        let mut arena = workspace
            .arena
            .take()
            .unwrap_or_else(|| Arena::new(limits.max_alloc_bytes, limits.max_memory_bytes));
        arena.max_alloc_bytes = limits.max_alloc_bytes;
        arena.max_memory_bytes = limits.max_memory_bytes;
        let mut tape = workspace
            .tape
            .take()
            .unwrap_or_else(|| Arena::new(limits.max_alloc_bytes, limits.max_memory_bytes));
        tape.max_alloc_bytes = limits.max_alloc_bytes;
        let mut rt = Runtime {
            arena,
            tape,
            tape_used: false,
            max_memory_bytes: limits.max_memory_bytes,
            error: None,
            tables: &*self.tables as *const Tables,
            timeout: limits.timeout.unwrap_or_default(),
            stack_bytes: limits.stack_bytes,
        };
        // Native code may use `stack_bytes` of machine stack below this frame, and the
        // runtime functions it calls a little more: on a thread with less left (a small
        // thread's stack, or a deep caller), the call runs on a stack mapped for it.
        let needed = limits.stack_bytes.saturating_add(RUNTIME_STACK);
        let result = stacker::maybe_grow(needed, needed.saturating_add(RUNTIME_STACK), || {
            let (bump, bump_end) =
                rt.arena.first_window().map_err(|kind| CallError::Runtime(fail_at(f, kind)))?;
            let here = 0u8;
            let sp = &here as *const u8 as u64;
            let mut ctx = Ctx {
                status: 0,
                depth: 1,
                max_depth: limits.max_call_depth as u64,
                stack_limit: sp.saturating_sub(limits.stack_bytes as u64),
                interrupt: AtomicU64::new(0),
                rt: &mut rt as *mut Runtime,
                bump,
                bump_end,
                other_bump: 0,
                other_end: 0,
                in_tape: 0,
                arena_start: bump,
            };
            let (words, state) = args(&mut ctx)?;
            let mut ret: u64 = 0;
            invoke(entry, &mut ctx, words.as_ref(), &mut ret, limits.timeout);
            if ctx.status != 0 {
                // SAFETY: the call is over; the runtime is ours again.
                let rt = unsafe { &mut *ctx.rt };
                let (kind, site) =
                    rt.error.take().unwrap_or((RuntimeErrorKind::Internal("unknown failure".into()), 0));
                let (function, span) = self.tables.sites.get(site as usize).cloned().unwrap_or_default();
                return Err(CallError::Runtime(RuntimeError { kind, span, function }));
            }
            Ok(done(ret, state))
        });
        rt.arena.reset();
        rt.tape.reset();
        workspace.arena = Some(rt.arena);
        workspace.tape = Some(rt.tape);
        result
    }
}

fn internal(m: &str) -> RuntimeError {
    RuntimeError {
        kind: RuntimeErrorKind::Internal(m.to_string()),
        span: Default::default(),
        function: String::new(),
    }
}

/// An argument passed without copying: scalars, and arrays as the caller's own buffers.
pub enum RawArg<'a> {
    /// An `f64`.
    F64(f64),
    /// An `i64`.
    I64(i64),
    /// A `bool`.
    Bool(bool),
    /// An `f64` array: its elements (row-major) and its shape.
    F64Array(&'a mut [f64], &'a [usize]),
    /// An `i64` array.
    I64Array(&'a mut [i64], &'a [usize]),
}

/// Why a call on raw arguments failed.
#[derive(Clone, Debug)]
pub enum CallError {
    /// The arguments do not fit the parameters (nothing ran).
    Args(String),
    /// The program failed while running.
    Runtime(RuntimeError),
}

impl From<RuntimeError> for CallError {
    fn from(e: RuntimeError) -> Self {
        CallError::Runtime(e)
    }
}

/// Reads what a call returned, before its memory is reused.
pub struct RawResult<'w> {
    word: u64,
    _workspace: std::marker::PhantomData<&'w Workspace>,
}

impl RawResult<'_> {
    /// The returned word as an `f64`.
    pub fn f64(&self) -> f64 {
        f64::from_bits(self.word)
    }

    /// The returned word as an `i64`.
    pub fn i64(&self) -> i64 {
        self.word as i64
    }

    /// The returned word as a `bool`.
    pub fn bool(&self) -> bool {
        self.word & 0xff != 0
    }

    /// Field `k` of a returned tuple.
    pub fn field(&self, k: usize) -> RawResult<'_> {
        // SAFETY: the caller names a field of the tuple type the function returns; the
        // tuple lives in the workspace, which this result borrows.
        let word = unsafe { *(self.word as *const u64).add(k) };
        RawResult { word, _workspace: std::marker::PhantomData }
    }

    /// The elements of a returned `f64` array.
    pub fn f64s(&self) -> &[f64] {
        if self.word == 0 {
            return &[];
        }
        runtime::ArrayRef { header: self.word as *mut u8 }.f64s()
    }
}

impl Jit {
    /// Runs `func` on `args` without copying arrays in: generated code reads and writes
    /// the caller's buffers. `read` sees the result before the workspace is reused.
    /// Arguments must match the parameters (scalars and arrays only).
    pub fn call_raw<T>(
        &self,
        workspace: &mut Workspace,
        func: FuncId,
        args: &mut [RawArg<'_>],
        limits: &Limits,
        read: impl FnOnce(&RawResult<'_>) -> T,
    ) -> Result<T, CallError> {
        let c = &*self.inner;
        let (f, entry) = c.entry(func)?;
        if args.len() != f.params.len() {
            return Err(CallError::Args(format!(
                "`{}` takes {}, {} given",
                f.name,
                arguments(f.params.len()),
                args.len()
            )));
        }
        let types = &c.tables.types;
        c.with_call(
            f,
            entry,
            workspace,
            limits,
            |ctx| {
                let mut words = Words::new();
                for (k, (a, &t)) in args.iter_mut().zip(&f.params).enumerate() {
                    let w = match (a, types.as_array(t)) {
                        (RawArg::F64(x), None) if t == TypeTable::F64 => x.to_bits(),
                        (RawArg::I64(x), None) if t == TypeTable::I64 => *x as u64,
                        (RawArg::Bool(x), None) if t == TypeTable::BOOL => *x as u64,
                        (RawArg::F64Array(d, shape), Some((mcir_ir::Scalar::F64, rank))) => {
                            raw_array(ctx, f, k, d.as_mut_ptr() as *mut u8, d.len(), shape, rank)?
                        }
                        (RawArg::I64Array(d, shape), Some((mcir_ir::Scalar::I64, rank))) => {
                            raw_array(ctx, f, k, d.as_mut_ptr() as *mut u8, d.len(), shape, rank)?
                        }
                        _ => {
                            return Err(CallError::Args(format!(
                                "argument {k} of `{}` must be of type {}",
                                f.name,
                                types.display(t)
                            )))
                        }
                    };
                    words.push(w);
                }
                Ok((words, ()))
            },
            |ret, ()| read(&RawResult { word: ret, _workspace: std::marker::PhantomData }),
        )
    }
}

/// The machine words of a call's arguments: kept inline for up to 16 arguments, so a
/// call on slices allocates nothing for them.
enum Words {
    Inline([u64; 16], usize),
    Heap(Vec<u64>),
}

impl Words {
    fn new() -> Words {
        Words::Inline([0; 16], 0)
    }

    fn push(&mut self, w: u64) {
        match self {
            Words::Inline(a, n) if *n < a.len() => {
                a[*n] = w;
                *n += 1;
            }
            Words::Inline(a, n) => {
                let mut v = a[..*n].to_vec();
                v.push(w);
                *self = Words::Heap(v);
            }
            Words::Heap(v) => v.push(w),
        }
    }
}

impl AsRef<[u64]> for Words {
    fn as_ref(&self) -> &[u64] {
        match self {
            Words::Inline(a, n) => &a[..*n],
            Words::Heap(v) => v,
        }
    }
}

fn fail_at(f: &mcir_ir::Function, kind: RuntimeErrorKind) -> RuntimeError {
    RuntimeError { kind, span: f.span, function: f.name.clone() }
}

#[allow(clippy::too_many_arguments)]
fn raw_array(
    ctx: &mut Ctx,
    f: &mcir_ir::Function,
    k: usize,
    data: *mut u8,
    len: usize,
    shape: &[usize],
    rank: u8,
) -> Result<u64, CallError> {
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if shape.len() != rank as usize {
        return Err(CallError::Args(format!(
            "argument {k} of `{}` has rank {rank}, but a shape of {} extents was given",
            f.name,
            shape.len()
        )));
    }
    if count != Some(len) {
        return Err(CallError::Args(format!(
            "argument {k} of `{}`: the shape {shape:?} does not hold {len} elements",
            f.name
        )));
    }
    runtime::array_header(ctx, data, len, shape)
        .map(|p| p as u64)
        .map_err(|kind| CallError::Runtime(fail_at(f, kind)))
}

/// Machine stack kept beyond `Limits::stack_bytes` for what native code calls into:
/// runtime functions (allocation, errors, printing), the system's own calls, and the
/// frames between this function and the generated code.
const RUNTIME_STACK: usize = 256 << 10;

/// Calls an entry trampoline; with a time limit, the process's watchdog sets the
/// context's interrupt flag when it passes, and generated code stops at its next check.
fn invoke(call: EntryFn, ctx: &mut Ctx, words: &[u64], ret: &mut u64, timeout: Option<std::time::Duration>) {
    let Some(limit) = timeout else {
        call(ctx, words.as_ptr(), ret);
        return;
    };
    let interrupt = &ctx.interrupt as *const AtomicU64;
    watchdog::with_time_limit(interrupt, limit, || call(ctx, words.as_ptr(), ret));
}

#[cfg(test)]
mod tests {
    use super::runs_once;
    use mcir_ir::entity::EntityRef;
    use mcir_ir::FuncId;

    #[test]
    fn only_loop_free_code_outside_loops_and_recursion_runs_once() {
        let ir = "fn @main(%n_0: i64) -> i64 {
bb0:
    %1: i64 = call @once(%n_0)
    %2: i64 = call @recursive(%n_0)
    %3: i64 = iconst 0
    jump bb1(%3)
bb1(%i_4: i64):
    %5: bool = icmp lt %i_4, %n_0
    br %5, bb2, bb3
bb2:
    %6: i64 = call @in_loop(%i_4)
    %7: i64 = iconst 1
    %8: i64 = iadd %i_4, %7
    jump bb1(%8)
bb3:
    ret %1
}
fn @once(%x_0: i64) -> i64 {
bb0:
    ret %x_0
}
fn @in_loop(%x_0: i64) -> i64 {
bb0:
    %1: i64 = call @under_loop(%x_0)
    ret %1
}
fn @under_loop(%x_0: i64) -> i64 {
bb0:
    ret %x_0
}
fn @recursive(%x_0: i64) -> i64 {
bb0:
    %1: i64 = iconst 0
    %2: bool = icmp le %x_0, %1
    br %2, bb1, bb2
bb1:
    ret %x_0
bb2:
    %3: i64 = iconst 1
    %4: i64 = isub %x_0, %3
    %5: i64 = call @recursive(%4)
    ret %5
}
";
        let m = mcir_ir::parse_module(ir).expect("parses");
        let main: FuncId = m.func_by_name("main").expect("main");
        let once = runs_once(&m, &vec![true; m.funcs.len()], &[main]);
        let named: Vec<(&str, bool)> =
            m.funcs.iter().map(|(id, f)| (f.name.as_str(), once[id.index()])).collect();
        assert_eq!(
            named,
            [
                ("main", false),
                ("once", true),
                ("in_loop", false),
                ("under_loop", false),
                ("recursive", false)
            ]
        );
    }

    /// A loop storing records of three values (`stack.reserve` with a width, one
    /// `stack.put` per record) and a loop popping them back, last value first, into a
    /// sum that depends on their order; and more pops than values, an error.
    const RECORDS: &str = "fn @records(%n_0: i64, %start_1: i64) -> f64 {
bb0:
    %2: stack<f64> = stack.new
    %3: i64 = iconst 0
    %4: i64 = iconst 3
    %5: i64 = stack.reserve %2, %start_1, %n_0, %3, %4
    jump bb1(%start_1)
bb1(%i_6: i64):
    %7: bool = icmp lt %i_6, %n_0
    br %7, bb2, bb3
bb2:
    %8: f64 = itof %i_6
    %9: f64 = fconst 2.0
    %10: f64 = fmul %8, %9
    %11: f64 = fconst 0.5
    %12: f64 = fadd %8, %11
    stack.put %2, %5, %i_6, %8, %10, %12
    %13: i64 = iconst 1
    %14: i64 = iadd %i_6, %13
    jump bb1(%14)
bb3:
    %15: f64 = fconst 0.0
    jump bb4(%n_0, %15)
bb4(%k_16: i64, %acc_17: f64):
    %18: bool = icmp gt %k_16, %start_1
    br %18, bb5, bb6
bb5:
    %19: f64 = stack.pop %2
    %20: f64 = stack.pop %2
    %21: f64 = stack.pop %2
    %22: f64 = fconst 0.25
    %23: f64 = fmul %acc_17, %22
    %24: f64 = fconst 100.0
    %25: f64 = fmul %19, %24
    %26: f64 = fconst 10.0
    %27: f64 = fmul %20, %26
    %28: f64 = fadd %23, %25
    %29: f64 = fadd %28, %27
    %30: f64 = fadd %29, %21
    %31: i64 = iconst 1
    %32: i64 = isub %k_16, %31
    jump bb4(%32, %30)
bb6:
    %33: f64 = stack.pop %2
    ret %acc_17
}
";

    #[test]
    fn records_of_several_values_come_back_in_order_on_both_engines() {
        use mcir_interp::{Interpreter, Limits, Val};
        let m = mcir_ir::parse_module(RECORDS).expect("parses");
        mcir_ir::verify_module(&m).expect("verifies");
        let f: FuncId = m.func_by_name("records").expect("records");
        let jit = super::Jit::compile(&m).expect("compiles");
        for (n, start) in [(5, 0), (3, -2), (0, 0)] {
            let args = [Val::I64(n), Val::I64(start)];
            let native = jit.call(f, &args, &Limits::default());
            let interp = Interpreter::new(&m, Limits::default()).call(f, args.to_vec());
            // The final pop finds the stack empty: both engines fail the same way.
            let (native, interp) =
                (native.expect_err("pops past the end"), interp.expect_err("pops past the end"));
            assert_eq!(native.kind, interp.kind, "n = {n}");
        }
        // Without the extra pop, the order-dependent sum.
        let text = RECORDS.replace("    %33: f64 = stack.pop %2\n", "");
        let m = mcir_ir::parse_module(&text).expect("parses");
        let jit = super::Jit::compile(&m).expect("compiles");
        for (n, start) in [(5i64, 0i64), (3, -2), (0, 0), (1, 0)] {
            let args = [Val::I64(n), Val::I64(start)];
            let native = jit.call(f, &args, &Limits::default()).expect("runs");
            let interp = Interpreter::new(&m, Limits::default()).call(f, args.to_vec()).expect("runs");
            let mut want = 0.0;
            for i in (start..n).rev() {
                let a = i as f64;
                want = want * 0.25 + (a + 0.5) * 100.0 + (a * 2.0) * 10.0 + a;
            }
            for got in [native, interp] {
                let Some(Val::F64(got)) = got else { panic!("not an f64") };
                assert_eq!(got, want, "n = {n}, start = {start}");
            }
        }
    }

    #[test]
    fn a_function_whose_array_operations_loop_over_elements_is_optimised() {
        // `sum(exp(x))` has no loop in the IR, but native code runs one over x.
        let ir = "fn @main(%x_0: f64[]) -> f64 {
bb0:
    %1: f64[] = map.exp %x_0
    %2: f64 = array.sum %1
    ret %2
}
fn @scalar(%x_0: f64) -> f64 {
bb0:
    %1: f64 = exp %x_0
    ret %1
}
";
        let m = mcir_ir::parse_module(ir).expect("parses");
        let roots: Vec<FuncId> = m.funcs.iter().map(|(id, _)| id).collect();
        let once = runs_once(&m, &vec![true; m.funcs.len()], &roots);
        let named: Vec<(&str, bool)> =
            m.funcs.iter().map(|(id, f)| (f.name.as_str(), once[id.index()])).collect();
        assert_eq!(named, [("main", false), ("scalar", true)]);
    }

    #[test]
    fn argument_words_stay_in_order_past_the_inline_ones() {
        let mut w = super::Words::new();
        for k in 0..40u64 {
            w.push(k * 3);
            assert_eq!(w.as_ref(), (0..=k).map(|j| j * 3).collect::<Vec<_>>().as_slice());
        }
        assert!(matches!(w, super::Words::Heap(_)));
    }
}
