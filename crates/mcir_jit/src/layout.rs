//! Memory layout shared by generated code and the runtime: the call context, array and
//! stack headers, and the per-call arena every allocation comes from.
//!
//! Every IR value is one machine word in generated code: `f64` and `i64` as themselves,
//! `bool` as a byte (0 or 1), and everything else — arrays, refs, tuples, structs,
//! stacks — as a pointer into the arena. Aggregates are blocks of 8-byte slots, one per
//! field; a ref is one slot.

use mcir_interp::RuntimeErrorKind;

/// Offsets into [`Ctx`], as generated code reads them.
pub(crate) mod ctx {
    pub const STATUS: i32 = 0;
    pub const DEPTH: i32 = 8;
    pub const MAX_DEPTH: i32 = 16;
    pub const STACK_LIMIT: i32 = 24;
    pub const INTERRUPT: i32 = 32;
}

/// Offsets into an array header.
pub(crate) mod array {
    pub const DATA: i32 = 0;
    pub const LEN: i32 = 8;
    pub const RANK: i32 = 16;
    pub const DIMS: i32 = 24;
    pub const HEADER_BYTES: usize = 48;
}

/// Offsets into a stack header.
pub(crate) mod stack {
    pub const DATA: i32 = 0;
    pub const LEN: i32 = 8;
    pub const CAP: i32 = 16;
    pub const HEADER_BYTES: usize = 24;
}

/// The state of one call into generated code. Generated code reads and writes the first
/// five fields; the runtime owns the rest.
#[repr(C)]
pub(crate) struct Ctx {
    /// Non-zero once an error happened: generated code returns at once.
    pub status: u64,
    /// Calls currently active.
    pub depth: u64,
    /// The deepest chain of calls allowed.
    pub max_depth: u64,
    /// The lowest stack address generated code may use.
    pub stack_limit: u64,
    /// Set (by a watchdog) to stop the program.
    pub interrupt: std::sync::atomic::AtomicU64,
    /// The runtime's side of the call.
    pub rt: *mut Runtime,
}

/// What the runtime keeps for one call: the arena and the first error.
pub(crate) struct Runtime {
    pub arena: Arena,
    pub error: Option<(RuntimeErrorKind, u32)>,
    /// Type and site tables of the compiled module, for `print` and error locations.
    pub tables: *const crate::Tables,
    /// The time limit, for the error message.
    pub timeout: std::time::Duration,
}

/// A bump allocator of 8-byte-aligned blocks. Its chunks are kept when it is reset, so
/// repeated calls with the same shapes allocate nothing new.
pub(crate) struct Arena {
    chunks: Vec<Vec<u64>>,
    current: usize,
    used: usize,
    /// Bytes handed out since the last reset.
    pub live_bytes: u64,
    /// The largest single allocation allowed.
    pub max_alloc_bytes: u64,
}

const CHUNK_WORDS: usize = 1 << 16;

impl Arena {
    pub fn new(max_alloc_bytes: u64) -> Arena {
        Arena { chunks: Vec::new(), current: 0, used: 0, live_bytes: 0, max_alloc_bytes }
    }

    /// Forgets every allocation but keeps the memory.
    pub fn reset(&mut self) {
        self.current = 0;
        self.used = 0;
        self.live_bytes = 0;
    }

    /// Zeroed memory for `bytes` bytes, or why not.
    pub fn alloc(&mut self, bytes: u64) -> Result<*mut u8, RuntimeErrorKind> {
        if bytes > self.max_alloc_bytes {
            return Err(RuntimeErrorKind::AllocationTooLarge { bytes, limit: self.max_alloc_bytes });
        }
        let words = (bytes as usize).div_ceil(8).max(1);
        loop {
            if let Some(chunk) = self.chunks.get_mut(self.current) {
                if self.used + words <= chunk.len() {
                    let slice = &mut chunk[self.used..self.used + words];
                    slice.fill(0);
                    self.used += words;
                    self.live_bytes += (words * 8) as u64;
                    return Ok(slice.as_mut_ptr() as *mut u8);
                }
                // Try the next chunk; a chunk too small for this block is skipped.
                self.current += 1;
                self.used = 0;
                continue;
            }
            let size = words.max(CHUNK_WORDS);
            let mut chunk = Vec::new();
            if chunk.try_reserve_exact(size).is_err() {
                return Err(RuntimeErrorKind::AllocationTooLarge { bytes, limit: self.max_alloc_bytes });
            }
            chunk.resize(size, 0u64);
            self.chunks.push(chunk);
            self.current = self.chunks.len() - 1;
            self.used = 0;
        }
    }

    /// Bytes of memory the arena holds.
    pub fn capacity_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len() * 8).sum()
    }
}
