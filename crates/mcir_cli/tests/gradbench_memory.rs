//! A GradBench session that defines a module again and again keeps the memory of one
//! definition, not of all: a counting global allocator (alone in this test binary, so
//! that no other test allocates beside it) measures the heap a session holds.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A global allocator is unsafe to implement; this one only counts, and forwards every
// call to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Bytes allocated and not yet freed.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; only a count is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A session of `defines` definitions of `hello`, each evaluated once (so that its
/// specialised code is made too); the heap it holds at its last message, in bytes.
fn heap_after(defines: usize) -> isize {
    use std::io::Write as _;
    let mut input = Vec::new();
    for id in 0..defines {
        writeln!(input, r#"{{"id": {id}, "kind": "define", "module": "hello"}}"#).unwrap();
        writeln!(
            input,
            r#"{{"id": {id}, "kind": "evaluate", "module": "hello", "function": "double", "input": 3.0}}"#
        )
        .unwrap();
    }
    /// Output that records the heap when the session writes its last response.
    struct Watch {
        responses: usize,
        last: usize,
        heap: isize,
    }
    impl std::io::Write for Watch {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.responses += buf.iter().filter(|&&b| b == b'\n').count();
            if self.responses == self.last {
                self.heap = LIVE.load(Ordering::Relaxed);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut watch = Watch { responses: 0, last: 2 * defines, heap: 0 };
    let before = LIVE.load(Ordering::Relaxed);
    mcir_cli::gradbench::session(&mut input.as_slice(), &mut watch, &Default::default()).unwrap();
    assert_eq!(watch.responses, 2 * defines);
    watch.heap - before
}

#[test]
fn redefining_a_module_frees_the_old_one() {
    // The least of three sessions each: other threads of the library (its compiler
    // threads) may hold a few kilobytes for a moment when the heap is read.
    let least = |defines| (0..3).map(|_| heap_after(defines)).min().unwrap();
    let few = least(10);
    let many = least(410);
    // 400 more definitions: a leak of even 160 bytes each would show.
    assert!(
        many - few < 64_000,
        "the heap grew by {} bytes over 400 definitions ({few} → {many})",
        many - few
    );
}
