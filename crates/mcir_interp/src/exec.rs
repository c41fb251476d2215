//! The execution loop: one frame per active call, kept in a vector.

use crate::json::write_value;
use crate::kernels;
use crate::value::{Array, ArrayData, ArrayRef, Val};
use mcir_ir::entity::EntityRef;
use mcir_ir::*;
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Resource limits for one run.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The deepest chain of calls allowed.
    pub max_call_depth: usize,
    /// The largest single allocation, in bytes.
    pub max_alloc_bytes: u64,
    /// The most memory one call may allocate in total, in bytes: arrays, refs, mutable
    /// structs and the tape of a derived rule. Native code keeps every allocation until
    /// the call returns, so the total is what the call holds at its end.
    pub max_memory_bytes: u64,
    /// How long the run may take: `None`, or a duration too long to add to the present
    /// time (`Duration::MAX`), for no limit; zero stops the call before it starts.
    pub timeout: Option<Duration>,
    /// How much machine stack native code may use; deeper recursion is reported as too
    /// deep. A call from a thread with less stack left than this (and a margin for the
    /// runtime) runs on a stack the library maps for it, so any thread may call.
    pub stack_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_call_depth: 100_000,
            max_alloc_bytes: 4 << 30,
            max_memory_bytes: 8 << 30,
            timeout: None,
            stack_bytes: 1 << 20,
        }
    }
}

/// What went wrong at run time.
#[derive(Clone, Debug, PartialEq)]
pub enum RuntimeErrorKind {
    /// An index outside `0..extent` of its dimension.
    IndexOutOfBounds {
        /// The index used.
        index: i64,
        /// Which dimension (0-based).
        dim: usize,
        /// That dimension's extent.
        extent: usize,
    },
    /// Two arrays of different shapes where equal shapes are needed.
    ShapeMismatch {
        /// The first operand's shape.
        left: Vec<usize>,
        /// The second operand's shape.
        right: Vec<usize>,
    },
    /// A matrix product whose operands' inner extents differ (the extents of the
    /// operands as multiplied, after any transposition).
    MatrixShapes {
        /// The left operand's extents.
        left: Vec<usize>,
        /// The right operand's extents.
        right: Vec<usize>,
    },
    /// Integer division or remainder by zero.
    DivisionByZero,
    /// An `i64` result out of range.
    IntegerOverflow,
    /// `i64(x)` of NaN, an infinity or a value out of range.
    InvalidConversion(f64),
    /// Calls nested deeper than the limit.
    RecursionTooDeep(usize),
    /// Native code's calls needed more than this many bytes of machine stack.
    StackExhausted(usize),
    /// `zeros(-1)` and the like.
    NegativeExtent(i64),
    /// An argument of another shape than the one the function was compiled for
    /// (`array.expect_dim`).
    UnexpectedExtent {
        /// Which dimension (0-based).
        dim: usize,
        /// The argument's extent there.
        extent: usize,
        /// The extent the code was compiled for.
        expected: i64,
    },
    /// An extent above [`mcir_ir::MAX_EXTENT`].
    ExtentTooLarge(i64),
    /// An allocation larger than the limit.
    AllocationTooLarge {
        /// Bytes asked for (saturated).
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The call's allocations add up to more than the limit on memory.
    MemoryLimit {
        /// The limit.
        limit: u64,
    },
    /// The system could not supply memory the limits allow.
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The time limit was reached.
    Timeout(Duration),
    /// A value of the wrong kind reached an operation: a bug, reported rather than a crash.
    Internal(String),
}

/// A runtime error with the source span of the failing operation and the function it was in.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeError {
    /// What happened.
    pub kind: RuntimeErrorKind,
    /// Where, in the source.
    pub span: Span,
    /// The function being executed.
    pub function: String,
}

impl fmt::Display for RuntimeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeErrorKind::IndexOutOfBounds { index, dim, extent } => {
                write!(f, "index {index} is out of bounds for dimension {dim} of extent {extent}")
            }
            RuntimeErrorKind::ShapeMismatch { left, right } => {
                write!(f, "shape mismatch: an array of shape {left:?} and one of shape {right:?}")
            }
            RuntimeErrorKind::MatrixShapes { left, right } => {
                write!(f, "matrix product of shapes {left:?} and {right:?}: the inner extents differ")
            }
            RuntimeErrorKind::DivisionByZero => f.write_str("integer division by zero"),
            RuntimeErrorKind::IntegerOverflow => {
                f.write_str("integer overflow: the result does not fit in i64")
            }
            RuntimeErrorKind::InvalidConversion(x) => write!(f, "cannot convert {x} to i64"),
            RuntimeErrorKind::RecursionTooDeep(n) => {
                let calls = if *n == 1 { "call" } else { "calls" };
                write!(f, "calls nest too deep: more than {n} nested {calls} (--max-depth)")
            }
            RuntimeErrorKind::StackExhausted(n) => {
                write!(f, "calls nest too deep: they need more than the {} of machine stack allowed", bytes(*n))
            }
            RuntimeErrorKind::NegativeExtent(n) => write!(f, "array extent {n} is negative"),
            RuntimeErrorKind::UnexpectedExtent { dim, extent, expected } => write!(
                f,
                "an argument has extent {extent} in dimension {dim}, but this code was compiled for {expected}"
            ),
            RuntimeErrorKind::ExtentTooLarge(n) => {
                write!(f, "array extent {n} is larger than the largest allowed, {}", mcir_ir::MAX_EXTENT)
            }
            // The size saturates when the product of the extents overflows.
            RuntimeErrorKind::AllocationTooLarge { bytes: u64::MAX, limit } => {
                write!(f, "an array whose size in bytes overflows 64 bits exceeds the limit of {limit} bytes")
            }
            RuntimeErrorKind::AllocationTooLarge { bytes, limit } => {
                write!(f, "allocation of {bytes} bytes exceeds the limit of {limit} bytes")
            }
            RuntimeErrorKind::MemoryLimit { limit } => {
                write!(f, "out of memory: the call's allocations exceed the limit of {limit} bytes in total")
            }
            RuntimeErrorKind::OutOfMemory { bytes } => {
                write!(f, "out of memory: the system could not supply {bytes} bytes")
            }
            RuntimeErrorKind::Timeout(d) => write!(f, "timed out after {:.3} s", d.as_secs_f64()),
            RuntimeErrorKind::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A derived pass (`f$fwd`, `f$rev$copy`) stands for the function it derives from.
        let function = self.function.split('$').next().unwrap_or(&self.function);
        write!(f, "{} (in `{function}`)", self.kind)
    }
}

impl std::error::Error for RuntimeError {}

type Kind = RuntimeErrorKind;

struct Frame {
    func: FuncId,
    regs: Vec<Val>,
    block: Block,
    pos: usize,
    /// Where the caller wants the result.
    ret_dest: Option<Value>,
}

/// Runs functions of one module.
pub struct Interpreter<'m> {
    module: &'m Module,
    /// The functions as both engines run them (loops give back their iterations'
    /// memory, which here lowers the count against the limit).
    runnable: Rc<Runnable>,
    limits: Limits,
    /// Bytes the current call has allocated, counted against `limits.max_memory_bytes`.
    allocated: u64,
    /// Bytes of values pushed onto tape stacks and of what instructions marked `tape`
    /// allocate, counted against the same limit but apart: native code keeps them in a
    /// region no `arena.release` gives back.
    tape_allocated: u64,
    /// Whether the instruction running is marked `tape` (`InstData::in_tape`).
    in_tape: bool,
    /// Where `print` writes; standard error by default.
    print: Box<dyn FnMut(&str) + 'm>,
}

impl<'m> Interpreter<'m> {
    /// An interpreter for `module`, which must pass the verifier.
    pub fn new(module: &'m Module, limits: Limits) -> Self {
        let runnable = Rc::new(Runnable::new(module));
        Interpreter {
            module,
            runnable,
            limits,
            allocated: 0,
            tape_allocated: 0,
            in_tape: false,
            print: Box::new(|s| eprintln!("{s}")),
        }
    }

    /// Sends the output of `print` to `sink` instead of standard error.
    pub fn with_print(mut self, sink: impl FnMut(&str) + 'm) -> Self {
        self.print = Box::new(sink);
        self
    }

    /// Calls `func` with `args` (which must fit its signature) and returns its result.
    pub fn call(&mut self, func: FuncId, args: Vec<Val>) -> Result<Option<Val>, RuntimeError> {
        // A limit too far away to be a time (`Duration::MAX`) is none; a zero limit stops
        // the call before its first instruction, as in native code.
        let deadline = self.limits.timeout.and_then(|t| Some((Instant::now().checked_add(t)?, t)));
        self.allocated = 0;
        self.tape_allocated = 0;
        let runnable = Rc::clone(&self.runnable);
        let module = self.module;
        let function = |id: FuncId| runnable.function(module, id);
        let mut frames: Vec<Frame> = vec![new_frame(function(func), func, args, None)];
        let mut steps: u64 = 0;
        loop {
            steps += 1;
            let depth = frames.len();
            let frame = frames.last_mut().ok_or_else(|| internal_error("no frame"))?;
            let f = function(frame.func);
            let bdata = &f.blocks[frame.block];
            if steps.is_multiple_of(1024) || steps == 1 {
                if let Some((at, limit)) = deadline {
                    if Instant::now() >= at {
                        // The instruction about to run, or the next one whose source is
                        // narrower than the whole function (what a derived pass makes for
                        // its tape spans the function).
                        let span = bdata.insts[frame.pos.min(bdata.insts.len())..]
                            .iter()
                            .map(|&i| f.insts[i].span)
                            .chain([bdata.term_span])
                            .find(|s| s.end > 0 && *s != f.span)
                            .or_else(|| bdata.insts.get(frame.pos).map(|&i| f.insts[i].span))
                            .unwrap_or(bdata.term_span);
                        return Err(RuntimeError {
                            kind: Kind::Timeout(limit),
                            span,
                            function: self.module.function_at(f, span).to_string(),
                        });
                    }
                }
            }
            if let Some(&inst) = bdata.insts.get(frame.pos) {
                frame.pos += 1;
                let d = &f.insts[inst];
                let fail = |kind: Kind| RuntimeError {
                    kind,
                    span: d.span,
                    function: self.module.function_at(f, d.span).to_string(),
                };
                if let Op::Call(callee) = d.op {
                    if depth >= self.limits.max_call_depth {
                        return Err(fail(Kind::RecursionTooDeep(self.limits.max_call_depth)));
                    }
                    let args: Vec<Val> = d.args.iter().map(|a| frame.regs[a.index()].clone()).collect();
                    let new = new_frame(function(callee), callee, args, d.result);
                    frames.push(new);
                    continue;
                }
                if let (Op::Print, Some(&v)) = (&d.op, d.args.first()) {
                    let mut s = String::new();
                    write_value(&mut s, &self.module.types, f.values[v].ty, &frame.regs[v.index()]);
                    (self.print)(&s);
                    continue;
                }
                let args: Vec<&Val> = d.args.iter().map(|a| &frame.regs[a.index()]).collect();
                self.in_tape = d.in_tape;
                let out = self.exec(&d.op, &args);
                let charged = out.and_then(|out| {
                    if matches!(d.op, Op::StackPush) {
                        self.charge_tape(allocated_bytes(&d.op, &out))?;
                    } else {
                        self.charge(allocated_bytes(&d.op, &out))?;
                    }
                    Ok(out)
                });
                self.in_tape = false;
                let out = charged.map_err(fail)?;
                if let Some(r) = d.result {
                    frame.regs[r.index()] = out;
                }
                continue;
            }
            match &bdata.term {
                Terminator::Jump(call) => enter(frame, f, call),
                Terminator::Branch { cond, then_dest, else_dest } => {
                    let c = matches!(frame.regs[cond.index()], Val::Bool(true));
                    enter(frame, f, if c { then_dest } else { else_dest });
                }
                Terminator::Return(v) => {
                    let result = v.map(|v| std::mem::replace(&mut frame.regs[v.index()], Val::Unit));
                    let done = frames.pop();
                    match (frames.last_mut(), done.and_then(|d| d.ret_dest)) {
                        (None, _) => return Ok(result),
                        (Some(caller), Some(dest)) => caller.regs[dest.index()] = result.unwrap_or(Val::Unit),
                        (Some(_), None) => {}
                    }
                }
            }
        }
    }

    fn alloc_check(&self, count: usize) -> Result<(), Kind> {
        let bytes = (count as u64).saturating_mul(8);
        if bytes > self.limits.max_alloc_bytes {
            return Err(Kind::AllocationTooLarge { bytes, limit: self.limits.max_alloc_bytes });
        }
        Ok(())
    }

    /// A fresh `f64` buffer of `count` zeros for a product, checked against the limits
    /// and charged before it is taken (a product can be far larger than its operands).
    fn fresh_f64(&mut self, count: usize) -> Result<Vec<f64>, Kind> {
        self.alloc_check(count)?;
        self.charge(ARRAY_HEADER_BYTES + (count as u64).saturating_mul(8))?;
        filled(0.0, count)
    }

    /// Counts `bytes` more against the call's limit on memory (as tape when the
    /// instruction running takes its memory from the tape region).
    fn charge(&mut self, bytes: u64) -> Result<(), Kind> {
        if self.in_tape {
            return self.charge_tape(bytes);
        }
        self.allocated = self.allocated.saturating_add(bytes);
        self.check_memory()
    }

    /// Counts `bytes` more of tape stacks against the call's limit on memory.
    fn charge_tape(&mut self, bytes: u64) -> Result<(), Kind> {
        self.tape_allocated = self.tape_allocated.saturating_add(bytes);
        self.check_memory()
    }

    fn check_memory(&self) -> Result<(), Kind> {
        if self.allocated.saturating_add(self.tape_allocated) > self.limits.max_memory_bytes {
            return Err(Kind::MemoryLimit { limit: self.limits.max_memory_bytes });
        }
        Ok(())
    }

    fn exec(&mut self, op: &Op, a: &[&Val]) -> Result<Val, Kind> {
        let types = &self.module.types;
        Ok(match op {
            Op::FConst(c) => Val::F64(*c),
            Op::IConst(c) => Val::I64(*c),
            Op::BConst(c) => Val::Bool(*c),
            Op::FBinary(b) => Val::F64(b.eval(f(a, 0)?, f(a, 1)?)),
            // Its value is its first operand; the rest speak of its derivative.
            Op::Linearized => Val::F64(f(a, 0)?),
            Op::FUnary(u) => Val::F64(u.eval(f(a, 0)?)),
            Op::FPowI => Val::F64(powi(f(a, 0)?, i(a, 1)?)),
            Op::IBinary(b) => Val::I64(b.eval(i(a, 0)?, i(a, 1)?).map_err(int_error)?),
            Op::IUnary(u) => Val::I64(u.eval(i(a, 0)?).map_err(int_error)?),
            Op::FCmp(c) => Val::Bool(c.eval(f(a, 0)?, f(a, 1)?)),
            Op::ICmp(c) => Val::Bool(c.eval(i(a, 0)?, i(a, 1)?)),
            Op::BCmp(c) => Val::Bool(c.eval(b(a, 0)?, b(a, 1)?)),
            Op::Not => Val::Bool(!b(a, 0)?),
            Op::IToF => Val::F64(i(a, 0)? as f64),
            Op::FToI => {
                let x = f(a, 0)?;
                Val::I64(f64_to_i64(x).ok_or(Kind::InvalidConversion(x))?)
            }
            Op::ArrayFill => {
                let mut shape = Vec::new();
                let mut count: usize = 1;
                for k in 1..a.len() {
                    let n = i(a, k)?;
                    if n > mcir_ir::MAX_EXTENT {
                        return Err(Kind::ExtentTooLarge(n));
                    }
                    let n = usize::try_from(n).map_err(|_| Kind::NegativeExtent(n))?;
                    count = count.saturating_mul(n);
                    shape.push(n);
                }
                self.alloc_check(count)?;
                // Charged before the memory is taken: a fill is how a program asks for a lot.
                self.charge(ARRAY_HEADER_BYTES + (count as u64).saturating_mul(8))?;
                let data = match a.first() {
                    Some(Val::F64(x)) => ArrayData::F64(filled(*x, count)?),
                    Some(Val::I64(x)) => ArrayData::I64(filled(*x, count)?),
                    Some(Val::Bool(x)) => ArrayData::Bool(filled(*x, count)?),
                    _ => return Err(internal("array.fill of a non-scalar")),
                };
                Val::Array(Array::new(shape, data))
            }
            Op::ArrayLit(dims) => {
                let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
                let data = match a.first() {
                    Some(Val::F64(_)) => {
                        ArrayData::F64((0..a.len()).map(|k| f(a, k)).collect::<Result<_, _>>()?)
                    }
                    Some(Val::I64(_)) => {
                        ArrayData::I64((0..a.len()).map(|k| i(a, k)).collect::<Result<_, _>>()?)
                    }
                    Some(Val::Bool(_)) => {
                        ArrayData::Bool((0..a.len()).map(|k| b(a, k)).collect::<Result<_, _>>()?)
                    }
                    _ => return Err(internal("array.lit of a non-scalar")),
                };
                Val::Array(Array::new(shape, data))
            }
            Op::ArrayDim(d) => {
                let arr = array(a, 0)?;
                Val::I64(arr.shape.get(*d as usize).copied().unwrap_or(0) as i64)
            }
            Op::ExpectDim(d) => {
                let arr = array(a, 0)?;
                let extent = arr.shape.get(*d as usize).copied().unwrap_or(0);
                let expected = i(a, 1)?;
                if extent as i64 != expected {
                    return Err(Kind::UnexpectedExtent { dim: *d as usize, extent, expected });
                }
                Val::Unit
            }
            // The interpreter checks trusted accesses too: checking is free here.
            Op::Load | Op::TrustedLoad => {
                let arr = array(a, 0)?;
                let at = flat_index(arr, &a[1..])?;
                match &*arr.data.borrow() {
                    ArrayData::F64(v) => Val::F64(v[at]),
                    ArrayData::I64(v) => Val::I64(v[at]),
                    ArrayData::Bool(v) => Val::Bool(v[at]),
                }
            }
            Op::Store | Op::TrustedStore => {
                let arr = array(a, 0)?;
                let (idx, value) = a[1..].split_at(a.len() - 2);
                let at = flat_index(arr, idx)?;
                match (&mut *arr.data.borrow_mut(), value.first()) {
                    (ArrayData::F64(v), Some(Val::F64(x))) => v[at] = *x,
                    (ArrayData::I64(v), Some(Val::I64(x))) => v[at] = *x,
                    (ArrayData::Bool(v), Some(Val::Bool(x))) => v[at] = *x,
                    _ => return Err(internal("store of a value of the wrong type")),
                }
                Val::Unit
            }
            Op::ArrayCopy => {
                let arr = array(a, 0)?;
                let data = arr.data.borrow().clone();
                Val::Array(Array::new(arr.shape.clone(), data))
            }
            Op::CopyInto => {
                let (dst, src) = (array(a, 0)?, array(a, 1)?);
                same_shape(dst, src)?;
                if !Rc::ptr_eq(dst, src) {
                    let data = src.data.borrow().clone();
                    *dst.data.borrow_mut() = data;
                }
                Val::Unit
            }
            Op::SharesMemory => Val::Bool(Rc::ptr_eq(array(a, 0)?, array(a, 1)?)),
            Op::Sum => {
                let arr = array(a, 0)?;
                match &*arr.data.borrow() {
                    ArrayData::F64(v) => Val::F64(v.iter().fold(0.0, |s, x| s + x)),
                    ArrayData::I64(v) => {
                        let mut s: i64 = 0;
                        for x in v {
                            s = s.checked_add(*x).ok_or(Kind::IntegerOverflow)?;
                        }
                        Val::I64(s)
                    }
                    ArrayData::Bool(_) => return Err(internal("sum of booleans")),
                }
            }
            Op::Dot => {
                let (x, y) = (array(a, 0)?, array(a, 1)?);
                same_shape(x, y)?;
                match (&*x.data.borrow(), &*y.data.borrow()) {
                    (ArrayData::F64(u), ArrayData::F64(v)) => {
                        Val::F64(u.iter().zip(v).fold(0.0, |s, (p, q)| s + p * q))
                    }
                    _ => return Err(internal("dot of non-f64 arrays")),
                }
            }
            Op::MatMul(t) => {
                let (x, y) = (array(a, 0)?, array(a, 1)?);
                let (xe, ye) = (extents2(x)?, extents2(y)?);
                let (m, n) = kernels::matmul_shape(xe, ye, *t)?;
                let mut out = self.fresh_f64(m.saturating_mul(n))?;
                kernels::matmul_acc(&mut out, &f64_data(x)?, xe, &f64_data(y)?, ye, *t);
                Val::Array(Array::new(vec![m, n], ArrayData::F64(out)))
            }
            Op::MatVec(t) => {
                let (x, v) = (array(a, 0)?, array(a, 1)?);
                let xe = extents2(x)?;
                let m = kernels::matvec_len(xe, v.shape.first().copied().unwrap_or(0), *t)?;
                let mut out = self.fresh_f64(m)?;
                kernels::matvec_acc(&mut out, &f64_data(x)?, xe, &f64_data(v)?, *t);
                Val::Array(Array::new(vec![m], ArrayData::F64(out)))
            }
            Op::Transpose => {
                let x = array(a, 0)?;
                let (r, c) = extents2(x)?;
                let mut out = self.fresh_f64(r.saturating_mul(c))?;
                kernels::transpose(&mut out, &f64_data(x)?, (r, c));
                Val::Array(Array::new(vec![c, r], ArrayData::F64(out)))
            }
            Op::MatMulAcc(t) => {
                let (c, x, y) = (array(a, 0)?, array(a, 1)?, array(a, 2)?);
                let (xe, ye) = (extents2(x)?, extents2(y)?);
                let (m, n) = kernels::matmul_shape(xe, ye, *t)?;
                if c.shape != [m, n] {
                    return Err(Kind::ShapeMismatch { left: c.shape.clone(), right: vec![m, n] });
                }
                // Operands are copied first, so that one may be the accumulator itself.
                let (xd, yd) = (f64_data(x)?, f64_data(y)?);
                update_f64(c, |d| kernels::matmul_acc(d, &xd, xe, &yd, ye, *t))?;
                Val::Unit
            }
            Op::MatVecAcc(t) => {
                let (out, x, v) = (array(a, 0)?, array(a, 1)?, array(a, 2)?);
                let xe = extents2(x)?;
                let m = kernels::matvec_len(xe, v.shape.first().copied().unwrap_or(0), *t)?;
                if out.shape != [m] {
                    return Err(Kind::ShapeMismatch { left: out.shape.clone(), right: vec![m] });
                }
                let (xd, vd) = (f64_data(x)?, f64_data(v)?);
                update_f64(out, |d| kernels::matvec_acc(d, &xd, xe, &vd, *t))?;
                Val::Unit
            }
            Op::OuterAcc => {
                let (c, x, y) = (array(a, 0)?, array(a, 1)?, array(a, 2)?);
                let want = vec![x.shape.first().copied().unwrap_or(0), y.shape.first().copied().unwrap_or(0)];
                if c.shape != want {
                    return Err(Kind::ShapeMismatch { left: c.shape.clone(), right: want });
                }
                let (xd, yd) = (f64_data(x)?, f64_data(y)?);
                update_f64(c, |d| kernels::outer_acc(d, &xd, &yd))?;
                Val::Unit
            }
            Op::MapFBinary(op) => map_binary(a, |x: f64, y: f64| Ok(op.eval(x, y)))?,
            Op::MapIBinary(op) => map_binary(a, |x: i64, y: i64| op.eval(x, y).map_err(int_error))?,
            Op::MapFUnary(u) => {
                let arr = array(a, 0)?;
                match &*arr.data.borrow() {
                    ArrayData::F64(v) => Val::Array(Array::new(
                        arr.shape.clone(),
                        ArrayData::F64(v.iter().map(|&x| u.eval(x)).collect()),
                    )),
                    _ => return Err(internal("map of a non-f64 array")),
                }
            }
            Op::MapFPowI => {
                let arr = array(a, 0)?;
                let n = i(a, 1)?;
                match &*arr.data.borrow() {
                    ArrayData::F64(v) => Val::Array(Array::new(
                        arr.shape.clone(),
                        ArrayData::F64(v.iter().map(|&x| powi(x, n)).collect()),
                    )),
                    _ => return Err(internal("map of a non-f64 array")),
                }
            }
            Op::RefNew => Val::new_ref(arg(a, 0)?.clone()),
            Op::RefLoad => match arg(a, 0)? {
                Val::Ref(cell) => cell.borrow().clone(),
                _ => return Err(internal("ref.load of a non-ref")),
            },
            Op::RefStore => match arg(a, 0)? {
                Val::Ref(cell) => {
                    let v = arg(a, 1)?.clone();
                    *cell.borrow_mut() = v;
                    Val::Unit
                }
                _ => return Err(internal("ref.store to a non-ref")),
            },
            Op::TupleNew => Val::Agg(a.iter().map(|v| (*v).clone()).collect()),
            Op::TupleGet(k) | Op::StructGet(_, k) => match arg(a, 0)? {
                Val::Agg(fields) => {
                    fields.get(*k as usize).cloned().ok_or_else(|| internal("no such field"))?
                }
                _ => return Err(internal("field of a non-aggregate")),
            },
            Op::StructNew(s) => {
                let fields: Vec<Val> = a.iter().map(|v| (*v).clone()).collect();
                if types.struct_def(*s).mutable {
                    Val::new_mut(fields)
                } else {
                    Val::Agg(fields.into())
                }
            }
            Op::MutLoad(_, k) => match arg(a, 0)? {
                Val::Mut(fields) => {
                    fields.borrow().get(*k as usize).cloned().ok_or_else(|| internal("no such field"))?
                }
                _ => return Err(internal("mut.load of a non-mut struct")),
            },
            Op::MutStore(_, k) => match arg(a, 0)? {
                Val::Mut(fields) => {
                    let v = arg(a, 1)?.clone();
                    match fields.borrow_mut().get_mut(*k as usize) {
                        Some(slot) => *slot = v,
                        None => return Err(internal("no such field")),
                    }
                    Val::Unit
                }
                _ => return Err(internal("mut.store to a non-mut struct")),
            },
            Op::Select => {
                let pick = if b(a, 0)? { 1 } else { 2 };
                arg(a, pick)?.clone()
            }
            Op::ZerosLike => {
                let arr = array(a, 0)?;
                let n = arr.data.borrow().len();
                Val::Array(Array::new(arr.shape.clone(), ArrayData::F64(vec![0.0; n])))
            }
            Op::AddInto => {
                let dst = array(a, 0)?;
                match arg(a, 1)? {
                    Val::F64(x) => update_f64(dst, |d| d.iter_mut().for_each(|e| *e += x))?,
                    Val::Array(src) => {
                        same_shape(dst, src)?;
                        let s = f64_data(src)?;
                        update_f64(dst, |d| d.iter_mut().zip(&s).for_each(|(e, x)| *e += x))?
                    }
                    _ => return Err(internal("array.add_into of a non-f64")),
                }
                Val::Unit
            }
            Op::Axpy => {
                let (dst, alpha, x) = (array(a, 0)?, f(a, 1)?, array(a, 2)?);
                same_shape(dst, x)?;
                let s = f64_data(x)?;
                update_f64(dst, |d| d.iter_mut().zip(&s).for_each(|(e, x)| *e += alpha * x))?;
                Val::Unit
            }
            Op::MoveAdd => {
                let (dst, src) = (array(a, 0)?, array(a, 1)?);
                same_shape(dst, src)?;
                if !Rc::ptr_eq(dst, src) {
                    let s = f64_data(src)?;
                    update_f64(dst, |d| d.iter_mut().zip(&s).for_each(|(e, x)| *e += x))?;
                    update_f64(src, |d| d.iter_mut().for_each(|e| *e = 0.0))?;
                }
                Val::Unit
            }
            Op::StackNew => Val::Stack(Rc::new(std::cell::RefCell::new(Vec::new()))),
            // Nothing reads it: reading `()` where a value is expected is an internal error.
            Op::Unset => Val::Unit,
            // Memory is collected here; only the count against the limit goes back, as
            // native code gives the memory back.
            Op::ArenaMark => Val::I64(self.allocated.min(i64::MAX as u64) as i64),
            Op::TapeMark => Val::I64(self.tape_allocated.min(i64::MAX as u64) as i64),
            Op::TapeRelease => {
                if let Val::I64(m) = arg(a, 0)? {
                    self.tape_allocated = self.tape_allocated.min((*m).max(0) as u64);
                }
                Val::Unit
            }
            Op::ArenaRelease => {
                if let Val::I64(m) = arg(a, 0)? {
                    self.allocated = self.allocated.min((*m).max(0) as u64);
                }
                Val::Unit
            }
            Op::StackPush => match arg(a, 0)? {
                Val::Stack(s) => {
                    s.borrow_mut().push(arg(a, 1)?.clone());
                    Val::Unit
                }
                _ => return Err(internal("stack.push to a non-stack")),
            },
            Op::StackPeek => match arg(a, 0)? {
                Val::Stack(s) => {
                    s.borrow().last().cloned().ok_or_else(|| internal("peek at an empty stack"))?
                }
                _ => return Err(internal("stack.peek of a non-stack")),
            },
            Op::StackPop => match arg(a, 0)? {
                Val::Stack(s) => s.borrow_mut().pop().ok_or_else(|| internal("pop of an empty stack"))?,
                _ => return Err(internal("stack.pop of a non-stack")),
            },
            Op::StackReserve => match arg(a, 0)? {
                Val::Stack(s) => {
                    let (lo, hi, extra) = (i(a, 1)? as i128, i(a, 2)? as i128, i(a, 3)? as i128);
                    let width = if a.len() > 4 { i(a, 4)? } else { 1 };
                    if width < 1 {
                        return Err(internal("stack.reserve of a width below one"));
                    }
                    let wanted = ((hi - lo).max(0) + extra.max(0)).saturating_mul(width as i128);
                    let bytes = u64::try_from(wanted.saturating_mul(8)).unwrap_or(u64::MAX);
                    self.charge(bytes)?;
                    let n = usize::try_from(wanted).map_err(|_| Kind::OutOfMemory { bytes })?;
                    let mut s = s.borrow_mut();
                    let base = s.len();
                    s.try_reserve(n).map_err(|_| Kind::OutOfMemory { bytes })?;
                    s.resize(base + n, Val::Unit);
                    Val::I64((base as i64).wrapping_sub((lo as i64).wrapping_mul(width)))
                }
                _ => return Err(internal("stack.reserve of a non-stack")),
            },
            Op::StackPut => match arg(a, 0)? {
                Val::Stack(s) => {
                    // A record of `width` values at `offset + width · i + k`.
                    let width = a.len().saturating_sub(3).max(1);
                    let first = i(a, 1)?.wrapping_add(i(a, 2)?.wrapping_mul(width as i64));
                    let mut s = s.borrow_mut();
                    for k in 0..width {
                        let at = first.wrapping_add(k as i64);
                        let slot = usize::try_from(at).ok().and_then(|at| s.get_mut(at));
                        *slot.ok_or_else(|| internal("stack.put past the end of a stack"))? =
                            arg(a, 3 + k)?.clone();
                    }
                    Val::Unit
                }
                _ => return Err(internal("stack.put to a non-stack")),
            },
            Op::Call(_) => return Err(internal("calls are handled by the frame loop")),
            Op::Print => return Err(internal("print is handled by the frame loop")),
        })
    }
}

/// A number of bytes for a message: in KiB, MiB or GiB when it is a whole number of them.
fn bytes(n: usize) -> String {
    for (unit, size) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} bytes")
}

/// `count` copies of `x`, or an error when the system has no memory for them (where
/// `vec![x; count]` would abort the process).
fn filled<T: Clone>(x: T, count: usize) -> Result<Vec<T>, Kind> {
    let mut v = Vec::new();
    v.try_reserve_exact(count).map_err(|_| Kind::OutOfMemory {
        bytes: (count as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    v.resize(count, x);
    Ok(v)
}

/// What native code spends on an array besides its elements.
const ARRAY_HEADER_BYTES: u64 = 48;

/// The bytes an op's result newly holds, as native code would allocate them (arrays
/// count 8 bytes an element plus a header, whatever their element type; a fill is
/// charged before it allocates).
fn allocated_bytes(op: &Op, out: &Val) -> u64 {
    match op {
        Op::ArrayLit(_)
        | Op::ArrayCopy
        | Op::MapFBinary(_)
        | Op::MapIBinary(_)
        | Op::MapFUnary(_)
        | Op::MapFPowI
        | Op::ZerosLike => match out {
            Val::Array(arr) => ARRAY_HEADER_BYTES + (arr.data.borrow().len() as u64).saturating_mul(8),
            _ => 0,
        },
        Op::RefNew | Op::StackPush => 8,
        Op::StackNew => 24,
        Op::Unset => 0,
        // A struct is a block of slots on native code, a record of a forward pass
        // included; a tuple is often kept in registers there, so it is not counted.
        Op::StructNew(_) => match out {
            Val::Mut(fields) => 8 * fields.borrow().len() as u64,
            Val::Agg(fields) => 8 * fields.len() as u64,
            _ => 0,
        },
        Op::ArenaMark
        | Op::ArenaRelease
        | Op::TapeMark
        | Op::TapeRelease
        | Op::FConst(_)
        | Op::IConst(_)
        | Op::BConst(_)
        | Op::Linearized
        | Op::FBinary(_)
        | Op::FUnary(_)
        | Op::FPowI
        | Op::IBinary(_)
        | Op::IUnary(_)
        | Op::FCmp(_)
        | Op::ICmp(_)
        | Op::BCmp(_)
        | Op::Not
        | Op::IToF
        | Op::FToI
        | Op::ArrayFill
        | Op::ArrayDim(_)
        | Op::SharesMemory
        | Op::ExpectDim(_)
        | Op::Load
        | Op::Store
        | Op::TrustedLoad
        | Op::TrustedStore
        | Op::CopyInto
        | Op::Sum
        | Op::Dot
        // Products are charged before they are taken.
        | Op::MatMul(_)
        | Op::MatVec(_)
        | Op::Transpose
        | Op::MatMulAcc(_)
        | Op::MatVecAcc(_)
        | Op::OuterAcc
        | Op::RefLoad
        | Op::RefStore
        | Op::TupleNew
        | Op::TupleGet(_)
        | Op::StructGet(..)
        | Op::MutLoad(..)
        | Op::MutStore(..)
        | Op::Select
        | Op::AddInto
        | Op::Axpy
        | Op::MoveAdd
        | Op::StackPeek
        | Op::StackPop
        | Op::StackReserve
        | Op::StackPut
        | Op::Call(_)
        | Op::Print => 0,
    }
}

fn enter(frame: &mut Frame, f: &Function, call: &BlockCall) {
    // Arguments are read before any parameter is written: a parallel copy.
    let vals: Vec<Val> = call.args.iter().map(|a| frame.regs[a.index()].clone()).collect();
    for (&p, v) in f.blocks[call.block].params.iter().zip(vals) {
        frame.regs[p.index()] = v;
    }
    frame.block = call.block;
    frame.pos = 0;
}

fn internal(msg: &str) -> Kind {
    Kind::Internal(msg.to_string())
}

fn internal_error(msg: &str) -> RuntimeError {
    RuntimeError { kind: internal(msg), span: Span::default(), function: String::new() }
}

fn int_error(e: IntError) -> Kind {
    match e {
        IntError::Overflow => Kind::IntegerOverflow,
        IntError::DivisionByZero => Kind::DivisionByZero,
    }
}

fn arg<'v>(a: &[&'v Val], k: usize) -> Result<&'v Val, Kind> {
    a.get(k).copied().ok_or_else(|| internal("missing operand"))
}

fn f(a: &[&Val], k: usize) -> Result<f64, Kind> {
    match arg(a, k)? {
        Val::F64(x) => Ok(*x),
        _ => Err(internal("expected an f64")),
    }
}

fn i(a: &[&Val], k: usize) -> Result<i64, Kind> {
    match arg(a, k)? {
        Val::I64(x) => Ok(*x),
        _ => Err(internal("expected an i64")),
    }
}

fn b(a: &[&Val], k: usize) -> Result<bool, Kind> {
    match arg(a, k)? {
        Val::Bool(x) => Ok(*x),
        _ => Err(internal("expected a bool")),
    }
}

fn array<'v>(a: &[&'v Val], k: usize) -> Result<&'v ArrayRef, Kind> {
    match arg(a, k)? {
        Val::Array(arr) => Ok(arr),
        _ => Err(internal("expected an array")),
    }
}

/// A copy of an `f64` array's elements (a copy, so that source and destination may alias).
/// The extents of a rank-2 array.
fn extents2(arr: &Array) -> Result<(usize, usize), Kind> {
    match arr.shape[..] {
        [r, c] => Ok((r, c)),
        _ => Err(internal("expected an array of rank 2")),
    }
}

fn f64_data(arr: &Array) -> Result<Vec<f64>, Kind> {
    match &*arr.data.borrow() {
        ArrayData::F64(v) => Ok(v.clone()),
        _ => Err(internal("expected an f64 array")),
    }
}

fn update_f64(arr: &Array, update: impl FnOnce(&mut [f64])) -> Result<(), Kind> {
    match &mut *arr.data.borrow_mut() {
        ArrayData::F64(v) => {
            update(v);
            Ok(())
        }
        _ => Err(internal("expected an f64 array")),
    }
}

fn same_shape(x: &Array, y: &Array) -> Result<(), Kind> {
    if x.shape != y.shape {
        return Err(Kind::ShapeMismatch { left: x.shape.clone(), right: y.shape.clone() });
    }
    Ok(())
}

fn flat_index(arr: &Array, idx: &[&Val]) -> Result<usize, Kind> {
    if idx.len() != arr.shape.len() {
        return Err(internal("wrong number of indices"));
    }
    let mut at = 0usize;
    for (dim, (&extent, v)) in arr.shape.iter().zip(idx).enumerate() {
        let index = match v {
            Val::I64(x) => *x,
            _ => return Err(internal("non-integer index")),
        };
        if index < 0 || index as u64 >= extent as u64 {
            return Err(Kind::IndexOutOfBounds { index, dim, extent });
        }
        at = at * extent + index as usize;
    }
    Ok(at)
}

/// Elements of one kind, for elementwise binary ops.
trait Elem: Copy {
    fn from_val(v: &Val) -> Option<Self>;
    fn slice(d: &ArrayData) -> Option<&[Self]>;
    fn wrap(v: Vec<Self>) -> ArrayData;
}

impl Elem for f64 {
    fn from_val(v: &Val) -> Option<Self> {
        if let Val::F64(x) = v {
            Some(*x)
        } else {
            None
        }
    }
    fn slice(d: &ArrayData) -> Option<&[Self]> {
        if let ArrayData::F64(v) = d {
            Some(v)
        } else {
            None
        }
    }
    fn wrap(v: Vec<Self>) -> ArrayData {
        ArrayData::F64(v)
    }
}

impl Elem for i64 {
    fn from_val(v: &Val) -> Option<Self> {
        if let Val::I64(x) = v {
            Some(*x)
        } else {
            None
        }
    }
    fn slice(d: &ArrayData) -> Option<&[Self]> {
        if let ArrayData::I64(v) = d {
            Some(v)
        } else {
            None
        }
    }
    fn wrap(v: Vec<Self>) -> ArrayData {
        ArrayData::I64(v)
    }
}

/// array∘array (equal shapes), array∘scalar or scalar∘array.
fn map_binary<T: Elem>(a: &[&Val], op: impl Fn(T, T) -> Result<T, Kind>) -> Result<Val, Kind> {
    let bad = || internal("elementwise operands of the wrong kind");
    let (x, y) = (arg(a, 0)?, arg(a, 1)?);
    let (shape, out) = match (x, y) {
        (Val::Array(p), Val::Array(q)) => {
            same_shape(p, q)?;
            let (pd, qd) = (p.data.borrow(), q.data.borrow());
            let (u, v) = (T::slice(&pd).ok_or_else(bad)?, T::slice(&qd).ok_or_else(bad)?);
            (p.shape.clone(), u.iter().zip(v).map(|(&s, &t)| op(s, t)).collect::<Result<Vec<T>, Kind>>()?)
        }
        (Val::Array(p), s) => {
            let s = T::from_val(s).ok_or_else(bad)?;
            let pd = p.data.borrow();
            (
                p.shape.clone(),
                T::slice(&pd).ok_or_else(bad)?.iter().map(|&e| op(e, s)).collect::<Result<_, _>>()?,
            )
        }
        (s, Val::Array(q)) => {
            let s = T::from_val(s).ok_or_else(bad)?;
            let qd = q.data.borrow();
            (
                q.shape.clone(),
                T::slice(&qd).ok_or_else(bad)?.iter().map(|&e| op(s, e)).collect::<Result<_, _>>()?,
            )
        }
        _ => return Err(bad()),
    };
    Ok(Val::Array(Array::new(shape, T::wrap(out))))
}

/// A frame for a call of `f` (function `func`) with `args`.
fn new_frame(f: &Function, func: FuncId, args: Vec<Val>, ret_dest: Option<Value>) -> Frame {
    let mut regs = vec![Val::Unit; f.values.len()];
    for (&p, a) in f.param_values().iter().zip(args) {
        regs[p.index()] = a;
    }
    Frame { func, regs, block: f.entry(), pos: 0, ret_dest }
}

/// Functions as both engines run them (`mcir_ir::reclaim::for_engines`), each made when
/// first called, with what the module's functions may keep alive found once.
struct Runnable {
    escapes: std::cell::OnceCell<mcir_ir::reclaim::Escapes>,
    /// By function index: `None` for a function that runs as written.
    funcs: Vec<std::cell::OnceCell<Option<Function>>>,
}

impl Runnable {
    fn new(module: &Module) -> Runnable {
        let funcs = (0..module.funcs.len()).map(|_| std::cell::OnceCell::new()).collect();
        Runnable { escapes: std::cell::OnceCell::new(), funcs }
    }

    /// Function `id` of `module` as it runs.
    fn function<'a>(&'a self, module: &'a Module, id: FuncId) -> &'a Function {
        let made = self.funcs.get(id.index()).and_then(|cell| {
            cell.get_or_init(|| {
                let escapes = self.escapes.get_or_init(|| mcir_ir::reclaim::Escapes::of(module));
                mcir_ir::reclaim::for_engines(&module.funcs[id], escapes)
            })
            .as_ref()
        });
        made.unwrap_or(&module.funcs[id])
    }
}
