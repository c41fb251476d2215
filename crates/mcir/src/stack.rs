//! Threads with a big stack for the compiler's recursive passes, kept between compiles.
//!
//! Deeply nested (but accepted) source must not overflow the caller's stack, so the
//! front end runs on a thread of its own; starting one per compile would cost more than
//! compiling a small program, so a thread that has finished waits for the next compile.

use mcir_syntax::SourceLimits;
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

/// The stack of the compiler threads kept between compiles: enough for the default
/// [`SourceLimits`].
const COMPILER_STACK: usize = 256 << 20;

/// Stack to allow per level of nesting. The recursive passes take about 10 KiB a level
/// of expression at opt-level 0 (a 10 000-deep chain needs 64 to 128 MiB unoptimised);
/// this leaves twice that.
const STACK_PER_LEVEL: usize = 24 << 10;

/// The stack the front end needs for source within `limits`.
pub(crate) fn bytes_for(limits: &SourceLimits) -> usize {
    let deepest = limits.max_nesting.max(limits.max_expr_depth);
    deepest.saturating_mul(STACK_PER_LEVEL).saturating_add(16 << 20).max(COMPILER_STACK)
}

/// Work for a compiler thread, given the sender that hands that thread more work.
struct Task(Box<dyn FnOnce(&Handle) + Send>);

/// What hands a compiler thread its work.
type Handle = Sender<Task>;

/// Compiler threads waiting for work.
static IDLE: Mutex<Vec<Sender<Task>>> = Mutex::new(Vec::new());

/// Runs `work` on a compiler thread with at least `stack` bytes of stack and returns its
/// result, or `None` if it panicked or no thread could be started. A stack larger than
/// the kept threads' gets a thread of its own.
pub(crate) fn on_compiler_thread<T: Send + 'static>(
    stack: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if stack > COMPILER_STACK {
        let thread = std::thread::Builder::new().name("mcir-compile-deep".into()).stack_size(stack);
        return thread.spawn(work).ok()?.join().ok();
    }
    let (reply, result) = channel();
    let mut task = Task(Box::new(move |me: &Handle| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        // Ready for the next compile before this one's caller goes on.
        if let Ok(mut idle) = IDLE.lock() {
            idle.push(me.clone());
        }
        let _ = reply.send(r.ok());
    }));
    loop {
        let idle = IDLE.lock().ok().and_then(|mut idle| idle.pop());
        let thread = match idle {
            Some(t) => t,
            // Without a thread there is no stack known to be big enough.
            None => start_thread()?,
        };
        match thread.send(task) {
            Ok(()) => return result.recv().ok().flatten(),
            // That thread has gone: try another.
            Err(back) => task = back.0,
        }
    }
}

fn start_thread() -> Option<Sender<Task>> {
    let (send, receive) = channel::<Task>();
    let me = send.clone();
    std::thread::Builder::new()
        .name("mcir-compile".into())
        .stack_size(COMPILER_STACK)
        .spawn(move || {
            while let Ok(task) = receive.recv() {
                (task.0)(&me);
            }
        })
        .ok()?;
    Some(send)
}
