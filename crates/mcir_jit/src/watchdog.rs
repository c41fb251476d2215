//! One thread watches the time limits of every native call in the process.
//!
//! Native code cannot be stopped from outside, so a call with a time limit registers
//! its context's interrupt flag and deadline here, and the watchdog raises the flag when
//! the deadline passes; the code stops at its next check (`runtime::poll`). Starting a
//! thread per call would cost far more than the calls a prepared handle makes (a
//! gradient of a small helper takes a fraction of a microsecond), so the thread is
//! started once, on first use, and sleeps until the earliest deadline it knows of.
//!
//! A registration is a slot in a table that keeps its capacity: after warm-up, a call
//! allocates nothing. A call that ends before its deadline leaves the watchdog asleep
//! (it wakes at the deadline it had planned, finds nothing due, and sleeps again), so
//! a run of calls with the same limit wakes it about once per limit, not once per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// A registered call: its flag (an address, valid while the slot is taken) and deadline.
#[derive(Clone, Copy)]
struct Watched {
    flag: usize,
    deadline: Instant,
    raised: bool,
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Watched>>,
    free: Vec<usize>,
    /// When the watchdog wakes next on its own (`None`: only when woken).
    planned: Option<Instant>,
}

struct Watchdog {
    table: Mutex<Table>,
    wake: Condvar,
}

/// The process's watchdog, started on first use; `None` if its thread cannot start.
fn watchdog() -> Option<&'static Watchdog> {
    static WATCHDOG: OnceLock<Option<&'static Watchdog>> = OnceLock::new();
    *WATCHDOG.get_or_init(|| {
        let w: &'static Watchdog =
            Box::leak(Box::new(Watchdog { table: Mutex::new(Table::default()), wake: Condvar::new() }));
        std::thread::Builder::new().name("mcir-watchdog".into()).spawn(move || watch(w)).ok().map(|_| w)
    })
}

fn lock(w: &Watchdog) -> MutexGuard<'_, Table> {
    // The table stays consistent across a panic (no code here panics while holding it).
    w.table.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watchdog's loop: raise the flags whose deadlines have passed, then sleep until
/// the next deadline.
fn watch(w: &'static Watchdog) {
    let mut table = lock(w);
    loop {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for slot in table.slots.iter_mut().flatten() {
            if slot.raised {
                continue;
            }
            if slot.deadline <= now {
                // SAFETY: a slot's flag stays valid until the slot is released, which
                // takes this lock.
                unsafe { (*(slot.flag as *const AtomicU64)).store(1, Ordering::Release) };
                slot.raised = true;
            } else {
                next = Some(next.map_or(slot.deadline, |n: Instant| n.min(slot.deadline)));
            }
        }
        table.planned = next;
        table = match next {
            None => w.wake.wait(table).unwrap_or_else(|e| e.into_inner()),
            Some(at) => {
                w.wake
                    .wait_timeout(table, at.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
    }
}

/// Runs `call` with `flag` raised once `limit` has passed. Uses the process's watchdog,
/// or, if its thread cannot start, a thread of its own for this call. `flag` must stay
/// valid until this returns (the context of the call, which `call` borrows mutably:
/// hence an address rather than a reference).
pub(crate) fn with_time_limit(flag: *const AtomicU64, limit: std::time::Duration, call: impl FnOnce()) {
    // A limit too far away to be a time (`Duration::MAX`) is none.
    let Some(deadline) = Instant::now().checked_add(limit) else {
        return call();
    };
    // A zero limit stops the call at its first check, always (rather than when the
    // watchdog happens to wake).
    if limit.is_zero() {
        // SAFETY: the caller keeps the flag valid for this call.
        unsafe { (*flag).store(1, Ordering::Release) };
        return call();
    }
    let Some(w) = watchdog() else {
        return with_own_thread(flag, deadline, call);
    };
    let slot = {
        let mut table = lock(w);
        let watched = Some(Watched { flag: flag as usize, deadline, raised: false });
        let slot = match table.free.pop() {
            Some(k) => {
                table.slots[k] = watched;
                k
            }
            None => {
                table.slots.push(watched);
                table.slots.len() - 1
            }
        };
        if table.planned.is_none_or(|p| deadline < p) {
            table.planned = Some(deadline);
            w.wake.notify_one();
        }
        slot
    };
    call();
    let mut table = lock(w);
    table.slots[slot] = None;
    table.free.push(slot);
}

/// The time limit kept by a thread of the call's own (when the watchdog cannot start).
fn with_own_thread(flag: *const AtomicU64, deadline: Instant, call: impl FnOnce()) {
    let done = std::sync::atomic::AtomicBool::new(false);
    let flag = flag as usize;
    std::thread::scope(|s| {
        let watchdog = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= deadline {
                    // SAFETY: the flag outlives this scope (see `with_time_limit`).
                    unsafe { (*(flag as *const AtomicU64)).store(1, Ordering::Release) };
                    break;
                }
                std::thread::park_timeout(deadline - now);
            }
        });
        call();
        done.store(true, Ordering::Release);
        watchdog.thread().unpark();
        // Joined here rather than at the end of the scope: the scope only waits for the
        // closure, and the thread's own exit (its thread-local destructors) would then
        // outlive the call (a leak checker sees its memory as lost).
        let _ = watchdog.join();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_flag_is_raised_when_its_deadline_passes_and_not_before() {
        let flag = AtomicU64::new(0);
        with_time_limit(&flag as *const AtomicU64, Duration::from_secs(60), || {});
        assert_eq!(flag.load(Ordering::Acquire), 0);
        with_time_limit(&flag as *const AtomicU64, Duration::from_millis(20), || {
            let start = Instant::now();
            while flag.load(Ordering::Acquire) == 0 && start.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        assert_eq!(flag.load(Ordering::Acquire), 1);
    }

    #[test]
    fn a_limit_too_far_away_is_none_and_a_zero_limit_stops_at_once() {
        let flag = AtomicU64::new(0);
        let mut ran = false;
        with_time_limit(&flag as *const AtomicU64, Duration::MAX, || ran = true);
        assert!(ran);
        assert_eq!(flag.load(Ordering::Acquire), 0);
        with_time_limit(&flag as *const AtomicU64, Duration::ZERO, || {});
        assert_eq!(flag.load(Ordering::Acquire), 1);
    }

    #[test]
    fn calls_on_several_threads_are_watched_at_once() {
        let flags: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|s| {
            for (k, flag) in flags.iter().enumerate() {
                s.spawn(move || {
                    // Two calls stop on their limits; two end long before theirs.
                    let limit = if k % 2 == 0 { Duration::from_millis(10) } else { Duration::from_secs(60) };
                    with_time_limit(flag as *const AtomicU64, limit, || {
                        let start = Instant::now();
                        while k % 2 == 0
                            && flag.load(Ordering::Acquire) == 0
                            && start.elapsed() < Duration::from_secs(20)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    });
                });
            }
        });
        let raised: Vec<u64> = flags.iter().map(|f| f.load(Ordering::Acquire)).collect();
        assert_eq!(raised, vec![1, 0, 1, 0]);
    }
}
