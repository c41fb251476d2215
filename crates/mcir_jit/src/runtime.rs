//! The runtime generated code calls: allocation in the per-call arena, the array
//! operations that are loops over whole arrays, error reporting, `print`, and the math
//! functions Cranelift has no instruction for. Every function is `extern "C"`, never
//! unwinds (a panic is caught and reported as an internal error), and reports failures
//! by setting the context's status, after which generated code returns at once.

use crate::layout::{alloc, alloc_tape, array, stack, Ctx, Runtime};
use mcir_interp::RuntimeErrorKind as Kind;
use mcir_ir::{f64_to_i64, powi, FBinOp, FUnOp, IBinOp};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Element kinds of arrays, as generated code passes them.
pub(crate) const ELEM_F64: i64 = 0;
pub(crate) const ELEM_I64: i64 = 1;
pub(crate) const ELEM_BOOL: i64 = 2;

/// Failure codes of [`mc_fail`].
pub(crate) const FAIL_INDEX: i64 = 1;
pub(crate) const FAIL_DIV_ZERO: i64 = 2;
pub(crate) const FAIL_OVERFLOW: i64 = 3;
pub(crate) const FAIL_DEPTH: i64 = 4;
pub(crate) const FAIL_TIMEOUT: i64 = 5;
pub(crate) const FAIL_EMPTY_STACK: i64 = 6;
pub(crate) const FAIL_STACK_PUT: i64 = 7;
pub(crate) const FAIL_EXTENT: i64 = 8;
/// The machine stack allowed to a call ran out (deep recursion).
pub(crate) const FAIL_STACK: i64 = 9;

/// Records the first error of the call and sets the status.
fn fail(ctx: *mut Ctx, site: i64, kind: Kind) {
    // SAFETY: generated code passes the context it was called with, which the caller of
    // the entry point keeps alive and exclusive for the whole call.
    unsafe {
        if (*ctx).status == 0 {
            (*(*ctx).rt).error = Some((kind, site as u32));
        }
        (*ctx).status = 1;
    }
}

fn rt<'a>(ctx: *mut Ctx) -> &'a mut Runtime {
    // SAFETY: as in `fail`; the runtime outlives the call.
    unsafe { &mut *(*ctx).rt }
}

/// Runs a runtime function body; a panic becomes an internal error instead of unwinding
/// into generated code.
fn guard<T: Default>(ctx: *mut Ctx, site: i64, body: impl FnOnce() -> Result<T, Kind>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(kind)) => {
            fail(ctx, site, kind);
            T::default()
        }
        Err(_) => {
            fail(ctx, site, Kind::Internal("the runtime panicked".into()));
            T::default()
        }
    }
}

/// A view of an array header.
#[derive(Clone, Copy)]
pub(crate) struct ArrayRef {
    pub header: *mut u8,
}

impl ArrayRef {
    fn word(&self, offset: i32) -> i64 {
        // SAFETY: headers are 48-byte blocks the runtime allocated; offsets are in range.
        unsafe { *(self.header.add(offset as usize) as *const i64) }
    }
    pub fn len(&self) -> usize {
        self.word(array::LEN) as usize
    }
    pub fn rank(&self) -> usize {
        self.word(array::RANK) as usize
    }
    pub fn shape(&self) -> Shape {
        let mut shape = Shape { dims: [0; 3], rank: self.rank().min(3) };
        for d in 0..shape.rank {
            shape.dims[d] = self.word(array::DIMS + 8 * d as i32) as usize;
        }
        shape
    }
    pub fn data(&self) -> *mut u8 {
        self.word(array::DATA) as *mut u8
    }
    pub fn f64s<'a>(&self) -> &'a mut [f64] {
        // SAFETY: an f64 array's data holds `len` f64s; callers never hold two views of
        // one array at once (aliasing inputs are copied first where it matters).
        unsafe { std::slice::from_raw_parts_mut(self.data() as *mut f64, self.len()) }
    }
    pub fn i64s<'a>(&self) -> &'a mut [i64] {
        // SAFETY: as for `f64s`.
        unsafe { std::slice::from_raw_parts_mut(self.data() as *mut i64, self.len()) }
    }
    pub fn bools<'a>(&self) -> &'a mut [u8] {
        // SAFETY: as for `f64s`; booleans are bytes.
        unsafe { std::slice::from_raw_parts_mut(self.data(), self.len()) }
    }
}

/// The header of a stack that is empty and has no room (data, length, capacity): what
/// a record holds for a stack the path taken never made. Generated code may read it;
/// nothing pushes onto it, and a pop or peek finds it empty and fails.
pub(crate) static NO_STACK: [u64; 3] = [0, 0, 0];

/// An array's extents, held inline: making an array at run time allocates nothing but
/// the array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    dims: [usize; 3],
    rank: usize,
}

impl std::ops::Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.dims[..self.rank]
    }
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        **self == **other
    }
}

fn arr(p: *mut u8) -> Result<ArrayRef, Kind> {
    if p.is_null() {
        return Err(Kind::Internal("a null array".into()));
    }
    Ok(ArrayRef { header: p })
}

fn same_shape(a: ArrayRef, b: ArrayRef) -> Result<(), Kind> {
    let (x, y) = (a.shape(), b.shape());
    if x != y {
        return Err(Kind::ShapeMismatch { left: x.to_vec(), right: y.to_vec() });
    }
    Ok(())
}

/// A new array; its elements are left as they are (every caller writes them all)
/// unless `zeroed`.
pub(crate) fn new_array_with(
    ctx: *mut Ctx,
    elem: i64,
    shape: &[usize],
    zeroed: bool,
) -> Result<ArrayRef, Kind> {
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX);
    let elem_bytes: u64 = if elem == ELEM_BOOL { 1 } else { 8 };
    let limit_bytes = (count as u64).saturating_mul(8);
    let max = rt(ctx).arena.max_alloc_bytes;
    if limit_bytes > max {
        return Err(Kind::AllocationTooLarge { bytes: limit_bytes, limit: max });
    }
    let header = alloc(ctx, array::HEADER_BYTES as u64, false)?;
    let data = alloc(ctx, (count as u64).saturating_mul(elem_bytes), zeroed)?;
    // SAFETY: `header` is a fresh 48-byte block.
    unsafe {
        let w = header as *mut i64;
        *w = data as i64;
        *w.add(1) = count as i64;
        *w.add(2) = shape.len() as i64;
        for (d, &n) in shape.iter().enumerate().take(3) {
            *w.add(3 + d) = n as i64;
        }
    }
    Ok(ArrayRef { header })
}

/// A header for an array whose elements live elsewhere (an argument's own buffer).
pub(crate) fn array_header(
    ctx: *mut Ctx,
    data: *mut u8,
    len: usize,
    shape: &[usize],
) -> Result<*mut u8, Kind> {
    if let Some(&n) = shape.iter().find(|&&n| n as u64 > mcir_ir::MAX_EXTENT as u64) {
        return Err(Kind::ExtentTooLarge(n.min(i64::MAX as usize) as i64));
    }
    let header = alloc(ctx, array::HEADER_BYTES as u64, false)?;
    // SAFETY: `header` is a fresh 48-byte block.
    unsafe {
        let w = header as *mut i64;
        *w = data as i64;
        *w.add(1) = len as i64;
        *w.add(2) = shape.len() as i64;
        for (d, &n) in shape.iter().enumerate().take(3) {
            *w.add(3 + d) = n as i64;
        }
    }
    Ok(header)
}

/// A new array whose every element the caller writes.
pub(crate) fn new_array(ctx: *mut Ctx, elem: i64, shape: &[usize]) -> Result<ArrayRef, Kind> {
    new_array_with(ctx, elem, shape, false)
}

fn extents(rank: i64, d0: i64, d1: i64, d2: i64) -> Result<Shape, Kind> {
    let mut shape = Shape { dims: [0; 3], rank: rank.clamp(0, 3) as usize };
    for (d, &n) in [d0, d1, d2].iter().enumerate().take(shape.rank) {
        if n > mcir_ir::MAX_EXTENT {
            return Err(Kind::ExtentTooLarge(n));
        }
        shape.dims[d] = usize::try_from(n).map_err(|_| Kind::NegativeExtent(n))?;
    }
    Ok(shape)
}

pub(crate) extern "C" fn mc_fail(ctx: *mut Ctx, site: i64, code: i64, a: i64, b: i64, c: i64) {
    let kind = match code {
        FAIL_INDEX => Kind::IndexOutOfBounds { index: a, dim: b as usize, extent: c as usize },
        FAIL_DIV_ZERO => Kind::DivisionByZero,
        FAIL_OVERFLOW => Kind::IntegerOverflow,
        // SAFETY: the context is valid for the call (see `fail`).
        FAIL_DEPTH => Kind::RecursionTooDeep(unsafe { (*ctx).max_depth } as usize),
        FAIL_STACK => Kind::StackExhausted(rt(ctx).stack_bytes),
        FAIL_TIMEOUT => Kind::Timeout(rt(ctx).timeout),
        FAIL_EMPTY_STACK => Kind::Internal("pop of an empty stack".into()),
        FAIL_STACK_PUT => Kind::Internal("stack.put past the end of a stack".into()),
        FAIL_EXTENT => Kind::UnexpectedExtent { dim: a as usize, extent: b as usize, expected: c },
        _ => Kind::Internal(format!("unknown failure {code}")),
    };
    fail(ctx, site, kind);
}

/// Fails with a timeout if the watchdog has raised the context's interrupt flag (the
/// test that loops with a unit-step counter make every 1024 iterations).
pub(crate) extern "C" fn mc_poll(ctx: *mut Ctx, site: i64) {
    // SAFETY: the context is valid for the call; the flag is only read atomically.
    let raised = unsafe { (*ctx).interrupt.load(std::sync::atomic::Ordering::Relaxed) } != 0;
    if raised {
        mc_fail(ctx, site, FAIL_TIMEOUT, 0, 0, 0);
    }
}

/// Gives back what the call allocated since `mark`, a position `arena.mark` read: the
/// window starts at the mark again, in the chunk that holds it.
pub(crate) extern "C" fn mc_arena_release(ctx: *mut Ctx, mark: i64) {
    // SAFETY: the context is valid and exclusive for the call.
    let c = unsafe { &mut *ctx };
    if let Some((start, end)) = rt(ctx).arena.release(mark as u64) {
        c.bump = mark as u64;
        c.bump_end = end;
        c.arena_start = start;
    }
}

/// Gives back what the call's tape region took since `mark`, a position `tape.mark` read
/// (zero when the region had not been used): its window starts at the mark again.
pub(crate) extern "C" fn mc_tape_release(ctx: *mut Ctx, mark: i64) {
    // SAFETY: the context is valid and exclusive for the call.
    let c = unsafe { &mut *ctx };
    let rt = rt(ctx);
    if mark == 0 {
        rt.tape.reset();
        rt.tape_used = false;
        c.other_bump = 0;
        c.other_end = 0;
    } else if let Some((_, end)) = rt.tape.release(mark as u64) {
        c.other_bump = mark as u64;
        c.other_end = end;
    }
}

/// Makes the context's window hold at least `bytes` more bytes.
pub(crate) extern "C" fn mc_refill(ctx: *mut Ctx, site: i64, bytes: i64) {
    guard(ctx, site, || {
        let bytes = bytes.max(0) as u64;
        // SAFETY: the context is valid and exclusive for the call.
        let c = unsafe { &mut *ctx };
        if bytes > rt(ctx).arena.max_alloc_bytes {
            return Err(Kind::AllocationTooLarge { bytes, limit: rt(ctx).arena.max_alloc_bytes });
        }
        let (start, end) = rt(ctx).window(c.in_tape != 0, bytes.div_ceil(8).max(1) * 8)?;
        c.bump = start;
        c.bump_end = end;
        if c.in_tape == 0 {
            c.arena_start = start;
        }
        Ok(())
    })
}

pub(crate) extern "C" fn mc_alloc(ctx: *mut Ctx, site: i64, bytes: i64) -> *mut u8 {
    guard(ctx, site, || Ok(Ptr(alloc(ctx, bytes.max(0) as u64, true)?))).0
}

/// A pointer with a default (null), for [`guard`].
struct Ptr(*mut u8);

impl Default for Ptr {
    fn default() -> Self {
        Ptr(std::ptr::null_mut())
    }
}

pub(crate) extern "C" fn mc_array_new(
    ctx: *mut Ctx,
    site: i64,
    elem: i64,
    rank: i64,
    d0: i64,
    d1: i64,
    d2: i64,
) -> *mut u8 {
    guard(ctx, site, || Ok(Ptr(new_array(ctx, elem, &extents(rank, d0, d1, d2)?)?.header))).0
}

pub(crate) extern "C" fn mc_array_fill_f64(
    ctx: *mut Ctx,
    site: i64,
    v: f64,
    rank: i64,
    d0: i64,
    d1: i64,
    d2: i64,
) -> *mut u8 {
    guard(ctx, site, || {
        let a = new_array(ctx, ELEM_F64, &extents(rank, d0, d1, d2)?)?;
        a.f64s().fill(v);
        Ok(Ptr(a.header))
    })
    .0
}

pub(crate) extern "C" fn mc_array_fill_i64(
    ctx: *mut Ctx,
    site: i64,
    v: i64,
    rank: i64,
    d0: i64,
    d1: i64,
    d2: i64,
) -> *mut u8 {
    guard(ctx, site, || {
        let a = new_array(ctx, ELEM_I64, &extents(rank, d0, d1, d2)?)?;
        a.i64s().fill(v);
        Ok(Ptr(a.header))
    })
    .0
}

pub(crate) extern "C" fn mc_array_fill_bool(
    ctx: *mut Ctx,
    site: i64,
    v: i64,
    rank: i64,
    d0: i64,
    d1: i64,
    d2: i64,
) -> *mut u8 {
    guard(ctx, site, || {
        let a = new_array(ctx, ELEM_BOOL, &extents(rank, d0, d1, d2)?)?;
        a.bools().fill((v != 0) as u8);
        Ok(Ptr(a.header))
    })
    .0
}

fn elem_of(a: ArrayRef, elem: i64) -> usize {
    a.len() * if elem == ELEM_BOOL { 1 } else { 8 }
}

pub(crate) extern "C" fn mc_array_copy(ctx: *mut Ctx, site: i64, elem: i64, src: *mut u8) -> *mut u8 {
    guard(ctx, site, || {
        let s = arr(src)?;
        let d = new_array(ctx, elem, &s.shape())?;
        // SAFETY: both data blocks hold `elem_of` bytes and are distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(s.data(), d.data(), elem_of(s, elem)) };
        Ok(Ptr(d.header))
    })
    .0
}

pub(crate) extern "C" fn mc_copy_into(ctx: *mut Ctx, site: i64, elem: i64, dst: *mut u8, src: *mut u8) {
    guard(ctx, site, || {
        let (d, s) = (arr(dst)?, arr(src)?);
        same_shape(d, s)?;
        // SAFETY: equal shapes, so equal byte counts; `copy` allows overlap.
        unsafe { std::ptr::copy(s.data(), d.data(), elem_of(s, elem)) };
        Ok(())
    })
}

pub(crate) extern "C" fn mc_zeros_like(ctx: *mut Ctx, site: i64, src: *mut u8) -> *mut u8 {
    guard(ctx, site, || Ok(Ptr(new_array_with(ctx, ELEM_F64, &arr(src)?.shape(), true)?.header))).0
}

/// Fails unless two arrays have one shape (the check of a fused elementwise map).
pub(crate) extern "C" fn mc_same_shape(ctx: *mut Ctx, site: i64, a: *mut u8, b: *mut u8) {
    guard(ctx, site, || same_shape(arr(a)?, arr(b)?))
}

/// A new `f64` array of the shape of `like`, its elements unset (a fused map's result;
/// the caller writes every element).
pub(crate) extern "C" fn mc_array_like(ctx: *mut Ctx, site: i64, like: *mut u8) -> *mut u8 {
    guard(ctx, site, || Ok(Ptr(new_array(ctx, ELEM_F64, &arr(like)?.shape())?.header))).0
}

pub(crate) extern "C" fn mc_sum_f64(ctx: *mut Ctx, site: i64, a: *mut u8) -> f64 {
    guard(ctx, site, || Ok(arr(a)?.f64s().iter().fold(0.0, |s, x| s + x)))
}

pub(crate) extern "C" fn mc_sum_i64(ctx: *mut Ctx, site: i64, a: *mut u8) -> i64 {
    guard(ctx, site, || {
        let mut s: i64 = 0;
        for x in arr(a)?.i64s().iter() {
            s = s.checked_add(*x).ok_or(Kind::IntegerOverflow)?;
        }
        Ok(s)
    })
}

pub(crate) extern "C" fn mc_dot(ctx: *mut Ctx, site: i64, a: *mut u8, b: *mut u8) -> f64 {
    guard(ctx, site, || {
        let (x, y) = (arr(a)?, arr(b)?);
        same_shape(x, y)?;
        Ok(x.f64s().iter().zip(y.f64s().iter()).fold(0.0, |s, (p, q)| s + p * q))
    })
}

/// The extents of a rank-2 array.
fn extents2(a: ArrayRef) -> Result<(usize, usize), Kind> {
    match a.shape()[..] {
        [r, c] => Ok((r, c)),
        _ => Err(Kind::Internal("expected an array of rank 2".into())),
    }
}

/// A transposition code of generated code: bit 0 for `A`, bit 1 for `B`.
fn transpose(code: i64) -> mcir_ir::Transpose {
    mcir_ir::Transpose { a: code & 1 != 0, b: code & 2 != 0 }
}

/// The elements of an operand of an accumulating product, copied when they are the
/// accumulator's own (no view of them may coexist with the accumulator's).
fn operand(x: ArrayRef, acc: ArrayRef) -> std::borrow::Cow<'static, [f64]> {
    if x.data() == acc.data() {
        std::borrow::Cow::Owned(x.f64s().to_vec())
    } else {
        std::borrow::Cow::Borrowed(x.f64s())
    }
}

pub(crate) extern "C" fn mc_matmul(ctx: *mut Ctx, site: i64, t: i64, a: *mut u8, b: *mut u8) -> *mut u8 {
    guard(ctx, site, || {
        let (x, y) = (arr(a)?, arr(b)?);
        let (xe, ye) = (extents2(x)?, extents2(y)?);
        let t = transpose(t);
        let (m, n) = mcir_interp::kernels::matmul_shape(xe, ye, t)?;
        let out = new_array_with(ctx, ELEM_F64, &[m, n], true)?;
        mcir_interp::kernels::matmul_acc(out.f64s(), x.f64s(), xe, y.f64s(), ye, t);
        Ok(Ptr(out.header))
    })
    .0
}

pub(crate) extern "C" fn mc_matvec(ctx: *mut Ctx, site: i64, t: i64, a: *mut u8, v: *mut u8) -> *mut u8 {
    guard(ctx, site, || {
        let (x, y) = (arr(a)?, arr(v)?);
        let xe = extents2(x)?;
        let m = mcir_interp::kernels::matvec_len(xe, y.len(), t != 0)?;
        let out = new_array_with(ctx, ELEM_F64, &[m], true)?;
        mcir_interp::kernels::matvec_acc(out.f64s(), x.f64s(), xe, y.f64s(), t != 0);
        Ok(Ptr(out.header))
    })
    .0
}

pub(crate) extern "C" fn mc_transpose(ctx: *mut Ctx, site: i64, a: *mut u8) -> *mut u8 {
    guard(ctx, site, || {
        let x = arr(a)?;
        let (r, c) = extents2(x)?;
        let out = new_array(ctx, ELEM_F64, &[c, r])?;
        mcir_interp::kernels::transpose(out.f64s(), x.f64s(), (r, c));
        Ok(Ptr(out.header))
    })
    .0
}

pub(crate) extern "C" fn mc_matmul_acc(ctx: *mut Ctx, site: i64, t: i64, c: *mut u8, a: *mut u8, b: *mut u8) {
    guard(ctx, site, || {
        let (acc, x, y) = (arr(c)?, arr(a)?, arr(b)?);
        let (xe, ye) = (extents2(x)?, extents2(y)?);
        let t = transpose(t);
        let (m, n) = mcir_interp::kernels::matmul_shape(xe, ye, t)?;
        if acc.shape()[..] != [m, n] {
            return Err(Kind::ShapeMismatch { left: acc.shape().to_vec(), right: vec![m, n] });
        }
        let (xd, yd) = (operand(x, acc), operand(y, acc));
        mcir_interp::kernels::matmul_acc(acc.f64s(), &xd, xe, &yd, ye, t);
        Ok(())
    })
}

pub(crate) extern "C" fn mc_matvec_acc(ctx: *mut Ctx, site: i64, t: i64, o: *mut u8, a: *mut u8, v: *mut u8) {
    guard(ctx, site, || {
        let (acc, x, y) = (arr(o)?, arr(a)?, arr(v)?);
        let xe = extents2(x)?;
        let m = mcir_interp::kernels::matvec_len(xe, y.len(), t != 0)?;
        if acc.shape()[..] != [m] {
            return Err(Kind::ShapeMismatch { left: acc.shape().to_vec(), right: vec![m] });
        }
        let (xd, yd) = (operand(x, acc), operand(y, acc));
        mcir_interp::kernels::matvec_acc(acc.f64s(), &xd, xe, &yd, t != 0);
        Ok(())
    })
}

pub(crate) extern "C" fn mc_outer_acc(ctx: *mut Ctx, site: i64, c: *mut u8, a: *mut u8, b: *mut u8) {
    guard(ctx, site, || {
        let (acc, x, y) = (arr(c)?, arr(a)?, arr(b)?);
        if acc.shape()[..] != [x.len(), y.len()] {
            return Err(Kind::ShapeMismatch { left: acc.shape().to_vec(), right: vec![x.len(), y.len()] });
        }
        let (xd, yd) = (operand(x, acc), operand(y, acc));
        mcir_interp::kernels::outer_acc(acc.f64s(), &xd, &yd);
        Ok(())
    })
}

/// Operand modes of elementwise binary ops.
pub(crate) const MODE_ARRAYS: i64 = 0;
pub(crate) const MODE_ARRAY_SCALAR: i64 = 1;
pub(crate) const MODE_SCALAR_ARRAY: i64 = 2;

pub(crate) extern "C" fn mc_map_f64(
    ctx: *mut Ctx,
    site: i64,
    op: i64,
    mode: i64,
    a: *mut u8,
    b: *mut u8,
    s: f64,
) -> *mut u8 {
    guard(ctx, site, || {
        let op = *FBinOp::ALL.get(op as usize).ok_or_else(|| Kind::Internal("bad op".into()))?;
        let x = arr(a)?;
        let out = new_array(ctx, ELEM_F64, &x.shape())?;
        let (o, u) = (out.f64s(), x.f64s());
        let v: &[f64] = if mode == MODE_ARRAYS {
            let y = arr(b)?;
            same_shape(x, y)?;
            y.f64s()
        } else {
            &[]
        };
        // One loop per op and operand mode, so each is a tight loop the compiler can
        // vectorise where the op allows.
        macro_rules! each {
            ($($op:ident),*) => {
                match op {
                    $(FBinOp::$op => match mode {
                        MODE_ARRAYS => o.iter_mut().zip(u.iter().zip(v)).for_each(|(r, (&p, &q))| *r = FBinOp::$op.eval(p, q)),
                        MODE_ARRAY_SCALAR => o.iter_mut().zip(u.iter()).for_each(|(r, &e)| *r = FBinOp::$op.eval(e, s)),
                        _ => o.iter_mut().zip(u.iter()).for_each(|(r, &e)| *r = FBinOp::$op.eval(s, e)),
                    },)*
                }
            };
        }
        each!(Add, Sub, Mul, Div, Pow, Min, Max, Atan2);
        Ok(Ptr(out.header))
    })
    .0
}

pub(crate) extern "C" fn mc_map_i64(
    ctx: *mut Ctx,
    site: i64,
    op: i64,
    mode: i64,
    a: *mut u8,
    b: *mut u8,
    s: i64,
) -> *mut u8 {
    guard(ctx, site, || {
        let op = *IBinOp::ALL.get(op as usize).ok_or_else(|| Kind::Internal("bad op".into()))?;
        let int = |r: Result<i64, mcir_ir::IntError>| {
            r.map_err(|e| match e {
                mcir_ir::IntError::Overflow => Kind::IntegerOverflow,
                mcir_ir::IntError::DivisionByZero => Kind::DivisionByZero,
            })
        };
        let x = arr(a)?;
        let out = new_array(ctx, ELEM_I64, &x.shape())?;
        let (o, u) = (out.i64s(), x.i64s());
        match mode {
            MODE_ARRAYS => {
                let y = arr(b)?;
                same_shape(x, y)?;
                let v = y.i64s();
                for k in 0..o.len() {
                    o[k] = int(op.eval(u[k], v[k]))?;
                }
            }
            MODE_ARRAY_SCALAR => {
                for k in 0..o.len() {
                    o[k] = int(op.eval(u[k], s))?;
                }
            }
            _ => {
                for k in 0..o.len() {
                    o[k] = int(op.eval(s, u[k]))?;
                }
            }
        }
        Ok(Ptr(out.header))
    })
    .0
}

pub(crate) extern "C" fn mc_map_unary(ctx: *mut Ctx, site: i64, op: i64, a: *mut u8) -> *mut u8 {
    guard(ctx, site, || {
        let op = *FUnOp::ALL.get(op as usize).ok_or_else(|| Kind::Internal("bad op".into()))?;
        let x = arr(a)?;
        let out = new_array(ctx, ELEM_F64, &x.shape())?;
        let (o, u) = (out.f64s(), x.f64s());
        // One loop per op, so each is a tight loop over a known function.
        macro_rules! each {
            ($($op:ident),*) => {
                match op {
                    $(FUnOp::$op => o.iter_mut().zip(u.iter()).for_each(|(r, &e)| *r = FUnOp::$op.eval(e)),)*
                }
            };
        }
        each!(
            Neg, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Tanh, Exp, Log, Log1p, Expm1, Sqrt, Abs, Floor,
            Ceil, Round, Sign
        );
        Ok(Ptr(out.header))
    })
    .0
}

pub(crate) extern "C" fn mc_map_powi(ctx: *mut Ctx, site: i64, a: *mut u8, n: i64) -> *mut u8 {
    guard(ctx, site, || {
        let x = arr(a)?;
        let out = new_array(ctx, ELEM_F64, &x.shape())?;
        out.f64s().iter_mut().zip(x.f64s().iter()).for_each(|(r, &e)| *r = powi(e, n));
        Ok(Ptr(out.header))
    })
    .0
}

/// `dst += src` (`dst += alpha * src`) elementwise, for arrays of one shape. Element `k`
/// of `dst` depends only on element `k` of each, so one array as both, or two headers of
/// one buffer, is updated in place; partly overlapping buffers (which the runtime never
/// makes) are read from a copy.
fn add_scaled(d: ArrayRef, x: ArrayRef, alpha: Option<f64>) {
    let n = d.len().min(x.len());
    let (dp, xp) = (d.data() as *mut f64, x.data() as *const f64);
    let (lo, hi) = (dp as usize, dp as usize + 8 * n);
    let (xlo, xhi) = (xp as usize, xp as usize + 8 * n);
    let overlap = n > 0 && lo < xhi && xlo < hi && lo != xlo;
    let copy;
    let xp = if overlap {
        copy = x.f64s()[..n].to_vec();
        copy.as_ptr()
    } else {
        xp
    };
    // SAFETY: both buffers hold at least `n` f64s; raw pointers, not slices, because they
    // may be one buffer, and each element is read before it is written.
    unsafe {
        match alpha {
            None => (0..n).for_each(|k| *dp.add(k) += *xp.add(k)),
            Some(a) => (0..n).for_each(|k| *dp.add(k) += a * *xp.add(k)),
        }
    }
}

pub(crate) extern "C" fn mc_add_into(
    ctx: *mut Ctx,
    site: i64,
    dst: *mut u8,
    src: *mut u8,
    s: f64,
    scalar: i64,
) {
    guard(ctx, site, || {
        let d = arr(dst)?;
        if scalar != 0 {
            d.f64s().iter_mut().for_each(|e| *e += s);
            return Ok(());
        }
        let x = arr(src)?;
        same_shape(d, x)?;
        add_scaled(d, x, None);
        Ok(())
    })
}

pub(crate) extern "C" fn mc_axpy(ctx: *mut Ctx, site: i64, dst: *mut u8, alpha: f64, src: *mut u8) {
    guard(ctx, site, || {
        let (d, x) = (arr(dst)?, arr(src)?);
        same_shape(d, x)?;
        add_scaled(d, x, Some(alpha));
        Ok(())
    })
}

pub(crate) extern "C" fn mc_move_add(ctx: *mut Ctx, site: i64, dst: *mut u8, src: *mut u8) {
    guard(ctx, site, || {
        let (d, x) = (arr(dst)?, arr(src)?);
        same_shape(d, x)?;
        if d.header != x.header {
            add_scaled(d, x, None);
            x.f64s().fill(0.0);
        }
        Ok(())
    })
}

pub(crate) extern "C" fn mc_stack_new(ctx: *mut Ctx, site: i64) -> *mut u8 {
    guard(ctx, site, || Ok(Ptr(alloc(ctx, stack::HEADER_BYTES as u64, true)?))).0
}

/// Makes room for one more value on a stack (generated code pushes when there is room).
pub(crate) extern "C" fn mc_stack_grow(ctx: *mut Ctx, site: i64, s: *mut u8) {
    guard(ctx, site, || {
        if s.is_null() {
            return Err(Kind::Internal("a null stack".into()));
        }
        // SAFETY: `s` is a 24-byte stack header the runtime allocated.
        unsafe {
            let w = s as *mut i64;
            let (data, len, cap) = (*w as *mut u64, *w.add(1) as usize, *w.add(2) as usize);
            let new_cap = (cap * 2).max(16);
            let bytes = (new_cap as u64).checked_mul(8).ok_or(Kind::IntegerOverflow)?;
            // In the tape region: a loop may give back the arena memory of its
            // iterations, and a stack pushed in one keeps its room.
            let new = alloc_tape(ctx, bytes)? as *mut u64;
            if len > 0 {
                std::ptr::copy_nonoverlapping(data, new, len);
            }
            *w = new as i64;
            *w.add(2) = new_cap as i64;
        }
        Ok(())
    })
}

/// Appends room for `width · (max(hi - lo, 0) + extra)` values to stack `s`, growing it
/// once, and returns the index of the first.
pub(crate) extern "C" fn mc_stack_reserve(
    ctx: *mut Ctx,
    site: i64,
    s: *mut u8,
    lo: i64,
    hi: i64,
    extra: i64,
    width: i64,
) -> i64 {
    guard(ctx, site, || {
        if s.is_null() {
            return Err(Kind::Internal("a null stack".into()));
        }
        if width < 1 {
            return Err(Kind::Internal("a stack reservation of a width below one".into()));
        }
        let records = (hi as i128 - lo as i128).max(0) + (extra as i128).max(0);
        let wanted = records.saturating_mul(width as i128);
        let bytes = u64::try_from(wanted.saturating_mul(8)).unwrap_or(u64::MAX);
        let n = usize::try_from(wanted).map_err(|_| Kind::OutOfMemory { bytes })?;
        // SAFETY: `s` is a 24-byte stack header the runtime allocated.
        unsafe {
            let w = s as *mut i64;
            let (data, len, cap) = (*w as *mut u64, *w.add(1) as usize, *w.add(2) as usize);
            let need = len.checked_add(n).ok_or(Kind::OutOfMemory { bytes })?;
            if need > cap {
                let new_cap = cap.saturating_mul(2).max(need).max(16);
                let bytes = (new_cap as u64).checked_mul(8).ok_or(Kind::OutOfMemory { bytes })?;
                let new = alloc(ctx, bytes, false)? as *mut u64;
                if len > 0 {
                    std::ptr::copy_nonoverlapping(data, new, len);
                }
                *w = new as i64;
                *w.add(2) = new_cap as i64;
            }
            *w.add(1) = need as i64;
            Ok(len as i64)
        }
    })
}

pub(crate) extern "C" fn mc_ftoi(ctx: *mut Ctx, site: i64, x: f64) -> i64 {
    guard(ctx, site, || f64_to_i64(x).ok_or(Kind::InvalidConversion(x)))
}

pub(crate) extern "C" fn mc_print(ctx: *mut Ctx, ty: i64, bits: i64) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let r = rt(ctx);
        // SAFETY: the tables outlive every call into the module.
        let tables = unsafe { &*r.tables };
        let t = <mcir_ir::TypeId as mcir_ir::entity::EntityRef>::new(ty as usize);
        let v = crate::marshal::from_native(&tables.types, t, bits as u64, &mut Default::default());
        let mut s = String::new();
        mcir_interp::json::write_value(&mut s, &tables.types, t, &v);
        eprintln!("{s}");
    }));
}

// Math functions without a Cranelift instruction: the same Rust functions the
// interpreter uses, so both engines agree bit for bit.
macro_rules! unary {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(pub(crate) extern "C" fn $name(x: f64) -> f64 { $op.eval(x) })*
    };
}
unary! {
    mc_sin => FUnOp::Sin, mc_cos => FUnOp::Cos, mc_tan => FUnOp::Tan, mc_asin => FUnOp::Asin,
    mc_acos => FUnOp::Acos, mc_atan => FUnOp::Atan, mc_sinh => FUnOp::Sinh, mc_cosh => FUnOp::Cosh,
    mc_tanh => FUnOp::Tanh, mc_exp => FUnOp::Exp, mc_log => FUnOp::Log, mc_log1p => FUnOp::Log1p,
    mc_expm1 => FUnOp::Expm1, mc_round => FUnOp::Round,
}

pub(crate) extern "C" fn mc_pow(x: f64, y: f64) -> f64 {
    FBinOp::Pow.eval(x, y)
}

pub(crate) extern "C" fn mc_atan2(y: f64, x: f64) -> f64 {
    FBinOp::Atan2.eval(y, x)
}

/// `sin x`, with `cos x` written to `cos_out`: one evaluation for both where the C
/// library has `sincos` (glibc's gives exactly its `sin` and `cos`, which the
/// interpreter calls).
pub(crate) extern "C" fn mc_sincos(x: f64, cos_out: *mut f64) -> f64 {
    let (s, c) = sin_cos(x);
    // SAFETY: generated code passes an 8-byte stack slot.
    unsafe { *cos_out = c };
    s
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn sin_cos(x: f64) -> (f64, f64) {
    extern "C" {
        fn sincos(x: f64, s: *mut f64, c: *mut f64);
    }
    let (mut s, mut c) = (0.0, 0.0);
    // SAFETY: glibc's sincos writes the two results and nothing else.
    unsafe { sincos(x, &mut s, &mut c) };
    (s, c)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn sin_cos(x: f64) -> (f64, f64) {
    (FUnOp::Sin.eval(x), FUnOp::Cos.eval(x))
}

pub(crate) extern "C" fn mc_powi(x: f64, n: i64) -> f64 {
    powi(x, n)
}
