//! Compile threads kept for the whole process, and the batches of functions they share.
//!
//! A module's functions are compiled as soon as their Cranelift IR is built: the thread
//! compiling the module builds one function after another into a [`Batch`] while the
//! pool's threads compile what is ready, and once everything is built it compiles
//! alongside them. Each thread keeps one Cranelift context for its whole life, so the
//! register allocator's memory is reused from function to function and module to module.

use crate::JitError;
use cranelift_codegen::ir::Function;
use cranelift_codegen::isa::TargetIsa;
use cranelift_module::FuncId as CFuncId;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};

/// One function of a module: its Cranelift IR, then its machine code.
pub(crate) struct Job {
    pub id: CFuncId,
    pub name: String,
    /// Boxed: a module of thousands of functions queues thousands of jobs, and the
    /// queue moves them as it grows.
    pub func: Box<Function>,
    /// How the function is compiled.
    pub tier: Tier,
    pub code: Option<Result<MachineCode, JitError>>,
}

impl Job {
    pub fn new(id: CFuncId, name: String, func: Function, tier: Tier) -> Job {
        Job { id, name, func: Box::new(func), tier, code: None }
    }
}

/// How a function is compiled: the settings of one of a batch's instruction sets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    /// Optimised by Cranelift (its e-graph places pure instructions where their first
    /// use needs them).
    Optimised,
    /// Register-allocated as carefully as `Optimised`, but in the instruction order
    /// the IR gives: for derived reverse passes, whose order `mcir_ad` chose so that
    /// each adjoint is added into its sums as soon as it is ready, keeping few values
    /// live, where the e-graph would compute every adjoint a block's first result needs
    /// before any other result and keep them all live (spilling on the adjoints' chain).
    InOrder,
    /// Compiled for speed of compiling rather than of running.
    Quick,
}

impl Tier {
    /// The number of tiers, for arrays indexed by tier.
    pub const COUNT: usize = 3;
}

/// A compiled function, ready to be defined in the module.
pub(crate) struct MachineCode {
    pub bytes: Vec<u8>,
    pub align: u64,
    pub relocs: Vec<cranelift_module::ModuleReloc>,
    /// The machine code's listing, when `MCIR_JIT_DUMP` asks for it.
    pub vcode: Option<String>,
}

#[derive(Default)]
struct State {
    pending: VecDeque<Job>,
    /// No more jobs will be added.
    closed: bool,
    /// Jobs taken and not yet finished.
    running: usize,
    done: Vec<Job>,
}

/// The functions of one module on their way to machine code.
pub(crate) struct Batch {
    /// One instruction set per [`Tier`], in its order.
    isas: [Arc<dyn TargetIsa>; Tier::COUNT],
    dump: bool,
    state: Mutex<State>,
    changed: Condvar,
}

impl Batch {
    /// An empty batch, offered to the pool's threads.
    pub fn start(isas: [Arc<dyn TargetIsa>; Tier::COUNT], dump: bool) -> Arc<Batch> {
        let batch =
            Arc::new(Batch { isas, dump, state: Mutex::new(State::default()), changed: Condvar::new() });
        for worker in pool() {
            // A worker that has gone (it cannot, short of an abort) just leaves more work
            // for the others and the submitting thread.
            let _ = worker.lock().map(|w| w.send(Arc::clone(&batch)));
        }
        batch
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Jobs run outside the lock, so a panic cannot leave the state half-updated.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a function to compile.
    pub fn push(&self, job: Job) {
        self.lock().pending.push_back(job);
        self.changed.notify_one();
    }

    /// Says no more functions will come; the threads waiting for work return.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Compiles jobs until none is left (waiting for more while the batch is open).
    fn work(&self, ctx: &mut cranelift_codegen::Context) {
        loop {
            let mut job = {
                let mut s = self.lock();
                loop {
                    if let Some(job) = s.pending.pop_front() {
                        s.running += 1;
                        break job;
                    }
                    if s.closed {
                        return;
                    }
                    s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            };
            let func = *std::mem::replace(&mut job.func, Box::new(Function::new()));
            let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                compile(ctx, &*self.isas[job.tier as usize], job.tier, self.dump, func, job.id, &job.name)
            }));
            job.code = Some(compiled.unwrap_or_else(|_| {
                // The context may be left inconsistent by the panic: start afresh.
                *ctx = cranelift_codegen::Context::new();
                Err(JitError(format!("internal compiler error: Cranelift panicked on @{}", job.name)))
            }));
            let mut s = self.lock();
            s.running -= 1;
            s.done.push(job);
            drop(s);
            self.changed.notify_all();
        }
    }

    /// Closes the batch, compiles what is left on this thread too, waits for the pool's
    /// threads and returns every job, compiled.
    pub fn finish(&self) -> Vec<Job> {
        self.close();
        LOCAL_CONTEXT.with(|ctx| match ctx.try_borrow_mut() {
            Ok(mut ctx) => self.work(&mut ctx),
            Err(_) => self.work(&mut cranelift_codegen::Context::new()),
        });
        let mut s = self.lock();
        while s.running > 0 || !s.pending.is_empty() {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        std::mem::take(&mut s.done)
    }
}

/// A batch that its builder may still add to: closed when the builder is done with it,
/// or gives up (the pool's threads waiting for more work then move on).
pub(crate) struct Open(pub Arc<Batch>);

impl std::ops::Deref for Open {
    type Target = Batch;
    fn deref(&self) -> &Batch {
        &self.0
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

thread_local! {
    /// The Cranelift context of a thread that compiles modules.
    static LOCAL_CONTEXT: RefCell<cranelift_codegen::Context> = RefCell::new(cranelift_codegen::Context::new());
}

/// The pool's threads (one fewer than the cores, at most seven), started on first use.
fn pool() -> &'static [Mutex<mpsc::Sender<Arc<Batch>>>] {
    static POOL: OnceLock<Vec<Mutex<mpsc::Sender<Arc<Batch>>>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::env::var("MCIR_JIT_THREADS")
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, 8);
        (1..cores)
            .filter_map(|k| {
                let (send, receive) = mpsc::channel::<Arc<Batch>>();
                std::thread::Builder::new()
                    .name(format!("mcir-jit-{k}"))
                    .spawn(move || {
                        let mut ctx = cranelift_codegen::Context::new();
                        while let Ok(batch) = receive.recv() {
                            batch.work(&mut ctx);
                        }
                    })
                    .ok()
                    .map(|_| Mutex::new(send))
            })
            .collect()
    })
}

/// Compiles `func` (module function `id`, called `name` in messages) in `ctx`.
fn compile(
    ctx: &mut cranelift_codegen::Context,
    isa: &dyn TargetIsa,
    tier: Tier,
    dump: bool,
    func: Function,
    id: CFuncId,
    name: &str,
) -> Result<MachineCode, JitError> {
    ctx.clear();
    ctx.set_disasm(dump);
    ctx.func = func;
    let mut plane = cranelift_codegen::control::ControlPlane::default();
    let started = std::time::Instant::now();
    let failed = ctx.compile(isa, &mut plane).err().map(|e| e.inner);
    if std::env::var_os("MCIR_JIT_TIMES").is_some() {
        eprintln!("{name}: {} insts, {:?} ({tier:?})", ctx.func.dfg.num_insts(), started.elapsed());
    }
    if std::env::var_os("MCIR_JIT_CLIF_OPT").is_some() {
        eprintln!("; @{name} (optimised)\n{}", ctx.func.display());
    }
    if let Some(e) = failed {
        let detail = cranelift_codegen::print_errors::pretty_error(&ctx.func, e);
        return Err(JitError(format!("@{name}: {detail}")));
    }
    let Some(code) = ctx.compiled_code() else {
        return Err(JitError(format!("@{name} was not compiled")));
    };
    let align = (code.buffer.alignment as u64)
        .max(isa.function_alignment().minimum as u64)
        .max(isa.symbol_alignment());
    let relocs = code
        .buffer
        .relocs()
        .iter()
        .map(|r| cranelift_module::ModuleReloc::from_mach_reloc(r, &ctx.func, id))
        .collect();
    let vcode = code.vcode.clone();
    Ok(MachineCode { bytes: code.code_buffer().to_vec(), align, relocs, vcode })
}
