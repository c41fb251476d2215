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
    pub const BUMP: i32 = 48;
    pub const BUMP_END: i32 = 56;
    pub const OTHER_BUMP: i32 = 64;
    pub const OTHER_END: i32 = 72;
    pub const IN_TAPE: i32 = 80;
    pub const ARENA_START: i32 = 88;
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

/// The state of one call into generated code. Generated code reads and writes every
/// field but `rt`, which the runtime owns.
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
    /// The free part of the arena's current chunk: generated code allocates small
    /// blocks by bumping this pointer, and calls the runtime when it reaches the end.
    pub bump: u64,
    pub bump_end: u64,
    /// The free part of the other region's current chunk: the tape region's while
    /// `bump..bump_end` is the arena's, and the arena's while it is the tape region's
    /// (`in_tape`). An instruction marked `tape` swaps the two windows around what it
    /// allocates. The tape region's is empty (zero) until the call first uses it.
    pub other_bump: u64,
    pub other_end: u64,
    /// Non-zero while `bump..bump_end` is the tape region's window.
    pub in_tape: u64,
    /// Where the arena's current chunk starts (whichever window is current): a release
    /// to a mark at or above it only moves the bump pointer back, which generated code
    /// does itself.
    pub arena_start: u64,
}

impl Ctx {
    /// Makes the other region's window the current one.
    fn swap_windows(&mut self) {
        std::mem::swap(&mut self.bump, &mut self.other_bump);
        std::mem::swap(&mut self.bump_end, &mut self.other_end);
        self.in_tape ^= 1;
    }
}

/// What the runtime keeps for one call: the arena and the first error.
pub(crate) struct Runtime {
    pub arena: Arena,
    /// Where tape stacks grow (`mc_stack_grow`), and what instructions marked `tape`
    /// allocate: apart from the arena, so that a loop or call giving its arena memory
    /// back (`arena.release`) never gives back a stack's room or a forward pass's
    /// record, which the reverse pass still reads.
    pub tape: Arena,
    /// Whether the call has taken a window of the tape region.
    pub tape_used: bool,
    /// The most the call may hold in the arena and the tape region together.
    pub max_memory_bytes: u64,
    pub error: Option<(RuntimeErrorKind, u32)>,
    /// Type and site tables of the compiled module, for `print` and error locations.
    pub tables: *const crate::Tables,
    /// The time limit, for the error message.
    pub timeout: std::time::Duration,
    /// The stack allowed to the call, for the error message.
    pub stack_bytes: usize,
}

/// Chunks of 8-byte words handed out front to back. Allocation itself bumps the
/// window in [`Ctx`]; the arena only supplies windows. Its chunks are kept when it is
/// reset, so repeated calls with the same shapes allocate nothing new.
pub(crate) struct Arena {
    chunks: Vec<Vec<u64>>,
    current: usize,
    /// Bytes of the chunks up to and including `current`: what the call holds.
    held_bytes: u64,
    /// The largest single allocation allowed.
    pub max_alloc_bytes: u64,
    /// The most a call may hold in total.
    pub max_memory_bytes: u64,
}

/// The first chunk is small (most calls need little); later ones double, up to a cap.
const FIRST_CHUNK_WORDS: usize = 1 << 9;
const MAX_CHUNK_WORDS: usize = 1 << 17;

impl Arena {
    pub fn new(max_alloc_bytes: u64, max_memory_bytes: u64) -> Arena {
        Arena { chunks: Vec::new(), current: 0, held_bytes: 0, max_alloc_bytes, max_memory_bytes }
    }

    /// Starts over at the first chunk, keeping the memory.
    pub fn reset(&mut self) {
        self.current = 0;
        self.held_bytes = self.chunks.first().map_or(0, |c| c.len() as u64 * 8);
    }

    fn window_of(chunk: &mut [u64]) -> (u64, u64) {
        let start = chunk.as_mut_ptr() as u64;
        (start, start + (chunk.len() * 8) as u64)
    }

    /// The window to allocate from after a reset.
    pub fn first_window(&mut self) -> Result<(u64, u64), RuntimeErrorKind> {
        self.current = 0;
        if self.chunks.is_empty() {
            self.push_chunk(FIRST_CHUNK_WORDS)?;
        }
        self.held_bytes = self.chunks[0].len() as u64 * 8;
        Ok(Self::window_of(&mut self.chunks[0]))
    }

    /// A fresh window of at least `bytes` bytes: the next chunk that is large enough.
    pub fn next_window(&mut self, bytes: u64) -> Result<(u64, u64), RuntimeErrorKind> {
        let words = (bytes as usize).div_ceil(8).max(1);
        loop {
            self.current += 1;
            match self.chunks.get_mut(self.current) {
                Some(c) => {
                    // A chunk too small for this request is passed over but still held.
                    self.held_bytes = self.held_bytes.saturating_add(c.len() as u64 * 8);
                    if self.held_bytes > self.max_memory_bytes {
                        return Err(RuntimeErrorKind::MemoryLimit { limit: self.max_memory_bytes });
                    }
                    if c.len() >= words {
                        return Ok(Self::window_of(c));
                    }
                }
                None => {
                    let grown =
                        self.chunks.last().map_or(FIRST_CHUNK_WORDS, |c| (c.len() * 2).min(MAX_CHUNK_WORDS));
                    let new_words = words.max(grown);
                    self.held_bytes = self.held_bytes.saturating_add((new_words as u64).saturating_mul(8));
                    if self.held_bytes > self.max_memory_bytes {
                        return Err(RuntimeErrorKind::MemoryLimit { limit: self.max_memory_bytes });
                    }
                    self.push_chunk(new_words)?;
                    let last = self.chunks.len() - 1;
                    self.current = last;
                    return Ok(Self::window_of(&mut self.chunks[last]));
                }
            }
        }
    }

    fn push_chunk(&mut self, words: usize) -> Result<(), RuntimeErrorKind> {
        let bytes = (words as u64).saturating_mul(8);
        if bytes > self.max_alloc_bytes.saturating_add(1 << 20) {
            return Err(RuntimeErrorKind::AllocationTooLarge { bytes, limit: self.max_alloc_bytes });
        }
        self.chunks.push(zeroed_words(words).ok_or(RuntimeErrorKind::OutOfMemory { bytes })?);
        Ok(())
    }

    /// Makes the chunk holding address `mark` current again, so that allocation resumes
    /// at the mark: what was allocated after it is given back (its chunks are kept for
    /// reuse). Returns the start and end of that chunk, or `None` if no chunk holds the
    /// address.
    pub fn release(&mut self, mark: u64) -> Option<(u64, u64)> {
        let mut held = 0u64;
        for (i, c) in self.chunks.iter_mut().enumerate().take(self.current + 1) {
            held = held.saturating_add(c.len() as u64 * 8);
            let (start, end) = Self::window_of(c);
            if (start..=end).contains(&mark) {
                self.current = i;
                self.held_bytes = held;
                return Some((start, end));
            }
        }
        None
    }

    /// Bytes of the chunks the call holds so far.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Bytes of memory the arena holds.
    pub fn capacity_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len() * 8).sum()
    }
}

/// `words` zeroed words, or `None` when the system has no memory for them (where
/// `vec![0; words]` would abort the process). Zeroed memory comes from the allocator's
/// zeroed pages: cheap even when large.
fn zeroed_words(words: usize) -> Option<Vec<u64>> {
    let words = words.max(1);
    let layout = std::alloc::Layout::array::<u64>(words).ok()?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut u64;
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `words` u64s,
    // all initialised (zero is a valid u64), so it is a valid vector's buffer.
    Some(unsafe { Vec::from_raw_parts(p, words, words) })
}

impl Runtime {
    /// What the tape region holds (nothing before the call's first growth).
    fn tape_held(&self) -> u64 {
        if self.tape_used {
            self.tape.held_bytes()
        } else {
            0
        }
    }

    /// A fresh arena window of at least `bytes` bytes, within what the tape region leaves
    /// of the call's memory limit.
    pub fn arena_window(&mut self, bytes: u64) -> Result<(u64, u64), RuntimeErrorKind> {
        self.arena.max_memory_bytes = self.max_memory_bytes.saturating_sub(self.tape_held());
        self.arena.next_window(bytes).map_err(|e| self.whole_limit(e))
    }

    /// The limit an error names is the call's, not what one region had left of it.
    fn whole_limit(&self, e: RuntimeErrorKind) -> RuntimeErrorKind {
        match e {
            RuntimeErrorKind::MemoryLimit { .. } => {
                RuntimeErrorKind::MemoryLimit { limit: self.max_memory_bytes }
            }
            e => e,
        }
    }

    /// A fresh window of the tape region of at least `size` bytes, within what the arena
    /// leaves of the call's memory limit.
    pub fn tape_window(&mut self, size: u64) -> Result<(u64, u64), RuntimeErrorKind> {
        self.tape.max_memory_bytes = self.max_memory_bytes.saturating_sub(self.arena.held_bytes());
        let first = !std::mem::replace(&mut self.tape_used, true);
        let mut window = if first { self.tape.first_window() } else { self.tape.next_window(size) };
        if first && window.as_ref().is_ok_and(|&(s, e)| e - s < size) {
            window = self.tape.next_window(size);
        }
        window.map_err(|e| self.whole_limit(e))
    }

    /// A fresh window of at least `size` bytes of the region generated code allocates
    /// from now.
    pub fn window(&mut self, in_tape: bool, size: u64) -> Result<(u64, u64), RuntimeErrorKind> {
        if in_tape {
            self.tape_window(size)
        } else {
            self.arena_window(size)
        }
    }
}

/// `bytes` bytes of the tape region, for a stack's room.
pub(crate) fn alloc_tape(ctx: *mut Ctx, bytes: u64) -> Result<*mut u8, RuntimeErrorKind> {
    // SAFETY: the context is valid and exclusive for the call; no reference to it is
    // held across `alloc`.
    let in_tape = unsafe { (*ctx).in_tape != 0 };
    if in_tape {
        return alloc(ctx, bytes, false);
    }
    // SAFETY: as above.
    unsafe { (*ctx).swap_windows() };
    let p = alloc(ctx, bytes, false);
    // SAFETY: as above.
    unsafe { (*ctx).swap_windows() };
    p
}

/// `bytes` bytes from the call's arena, zeroed if `zero`.
pub(crate) fn alloc(ctx: *mut Ctx, bytes: u64, zero: bool) -> Result<*mut u8, RuntimeErrorKind> {
    // SAFETY: the context and its runtime are valid and exclusive for the call.
    let (c, rt) = unsafe { (&mut *ctx, &mut *(*ctx).rt) };
    if bytes > rt.arena.max_alloc_bytes {
        return Err(RuntimeErrorKind::AllocationTooLarge { bytes, limit: rt.arena.max_alloc_bytes });
    }
    let size = bytes.div_ceil(8).max(1) * 8;
    if c.bump.checked_add(size).is_none_or(|end| end > c.bump_end) {
        let (start, end) = rt.window(c.in_tape != 0, size)?;
        c.bump = start;
        c.bump_end = end;
        if c.in_tape == 0 {
            c.arena_start = start;
        }
    }
    let p = c.bump as *mut u8;
    c.bump += size;
    if zero {
        // SAFETY: `p` starts `size` bytes inside the current chunk.
        unsafe { std::ptr::write_bytes(p, 0, size as usize) };
    }
    Ok(p)
}
