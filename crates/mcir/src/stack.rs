//! Threads with a big stack for the compiler's recursive passes, kept between compiles.
//!
//! Deeply nested (but accepted) source must not overflow the caller's stack, so the
//! front end runs on a thread of its own; starting one per compile would cost more than
//! compiling a small program, so a thread that has finished waits for the next compile.

use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

/// The stack given to the compiler's recursive passes.
const COMPILER_STACK: usize = 256 << 20;

/// Work for a compiler thread, given the sender that hands that thread more work.
struct Task(Box<dyn FnOnce(&Handle) + Send>);

/// What hands a compiler thread its work.
type Handle = Sender<Task>;

/// Compiler threads waiting for work.
static IDLE: Mutex<Vec<Sender<Task>>> = Mutex::new(Vec::new());

/// Runs `work` on a compiler thread and returns its result, or `None` if it panicked.
/// When no thread can be started, `work` runs on the calling thread.
pub(crate) fn on_compiler_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
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
            None => match start_thread() {
                Some(t) => t,
                None => {
                    // No thread: run here with a sender nobody listens to.
                    let (me, _) = channel();
                    (task.0)(&me);
                    return result.recv().ok().flatten();
                }
            },
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
