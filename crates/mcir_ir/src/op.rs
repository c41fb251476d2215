//! The operations of the IR. Every pass matches on [`Op`] exhaustively, so a new
//! operation does not compile until the printer, parser, verifier, interpreter
//! (and later the AD rules and the JIT) all handle it.

use crate::types::StructId;

/// Binary operations on `f64` scalars; elementwise versions apply them per element.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FBinOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b` (IEEE: division by zero gives an infinity or NaN)
    Div,
    /// `a ** b`, `pow(a, b)`
    Pow,
    /// `min(a, b)`: `a` on a tie
    Min,
    /// `max(a, b)`: `a` on a tie
    Max,
    /// `atan2(a, b)`
    Atan2,
}

/// Unary operations on `f64`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FUnOp {
    /// `-x`
    Neg,
    /// `sin`
    Sin,
    /// `cos`
    Cos,
    /// `tan`
    Tan,
    /// `asin`
    Asin,
    /// `acos`
    Acos,
    /// `atan`
    Atan,
    /// `sinh`
    Sinh,
    /// `cosh`
    Cosh,
    /// `tanh`
    Tanh,
    /// `exp`
    Exp,
    /// `log`
    Log,
    /// `log1p`
    Log1p,
    /// `expm1`
    Expm1,
    /// `sqrt`
    Sqrt,
    /// `abs`
    Abs,
    /// `floor`
    Floor,
    /// `ceil`
    Ceil,
    /// `round`: half away from zero
    Round,
    /// `sign`: -1, 0 or 1 (NaN stays NaN)
    Sign,
}

/// Binary operations on `i64`; every one is checked (overflow and division by zero are errors).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum IBinOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`, truncating toward zero
    Div,
    /// `a % b`, with the sign of `a`
    Rem,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
}

/// Unary operations on `i64` (checked).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum IUnOp {
    /// `-x`
    Neg,
    /// `abs(x)`
    Abs,
}

/// Comparison predicates.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// Which operands of a matrix product are transposed: `op(A) op(B)`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Transpose {
    /// `A` is transposed.
    pub a: bool,
    /// `B` is transposed.
    pub b: bool,
}

impl Transpose {
    /// `A B`.
    pub const NONE: Transpose = Transpose { a: false, b: false };

    /// The suffix of the mnemonic: `""`, `.tn`, `.nt` or `.tt`.
    pub fn suffix(self) -> &'static str {
        match (self.a, self.b) {
            (false, false) => "",
            (true, false) => ".tn",
            (false, true) => ".nt",
            (true, true) => ".tt",
        }
    }
}

/// An operation. Operands are the instruction's `args`; immediates live in the variant.
///
/// The result type of every instruction is recorded on its result value, so ops that
/// build a value (`array.fill`, `struct.new`) need not repeat it.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `fconst C`: an `f64` constant.
    FConst(f64),
    /// `iconst C`: an `i64` constant.
    IConst(i64),
    /// `bconst C`: a `bool` constant.
    BConst(bool),
    /// Binary `f64` arithmetic: `(f64, f64) -> f64`.
    FBinary(FBinOp),
    /// Unary `f64` math: `f64 -> f64`.
    FUnary(FUnOp),
    /// `fpowi`: `f64 ** i64 -> f64`.
    FPowI,
    /// Checked binary `i64` arithmetic.
    IBinary(IBinOp),
    /// Checked unary `i64` arithmetic.
    IUnary(IUnOp),
    /// `fcmp P`: compares two `f64`.
    FCmp(CmpOp),
    /// `icmp P`: compares two `i64`.
    ICmp(CmpOp),
    /// `bcmp P`: compares two `bool` (only `eq` and `ne`).
    BCmp(CmpOp),
    /// `not`: boolean negation.
    Not,
    /// `itof`: `i64 -> f64`.
    IToF,
    /// `ftoi`: `f64 -> i64`, truncating; NaN, infinities and out-of-range values are errors.
    FToI,

    /// `array.fill`: `(value, dim0, .., dimR-1) -> array` filled with `value`; a fresh allocation.
    ArrayFill,
    /// `array.lit [d0, ..]`: a fresh array of the given shape from its elements in row-major order.
    ArrayLit(Vec<u32>),
    /// `array.dim D`: the extent of dimension `D` of an array, as `i64`.
    ArrayDim(u8),
    /// `array.expect_dim D`: `(array, n)`, no result; fails unless the extent of
    /// dimension `D` of the array is `n`. A function compiled for arguments of fixed
    /// shapes (`crate::specialise`) checks them so on entry, and what follows may rely on
    /// the extent (`crate::bounds`).
    ExpectDim(u8),
    /// `load`: `(array, i0, .., iR-1) -> element`, bounds-checked.
    Load,
    /// `store`: `(array, i0, .., iR-1, value)`, bounds-checked; no result.
    Store,
    /// `load.trusted`: a load whose indices are known to be in bounds — derived reverse
    /// passes use it at indices the forward pass checked on an array of the same shape.
    TrustedLoad,
    /// `store.trusted`: a store whose indices are known to be in bounds.
    TrustedStore,
    /// `array.copy`: a fresh copy of an array (element values).
    ArrayCopy,
    /// `array.copy_into`: `(dst, src)` copies the elements of `src` into `dst`; shapes must match.
    CopyInto,
    /// `array.shares`: `(a, b) -> bool`, whether two arrays are one memory (writing an
    /// element of one changes the other). Gradient drivers test their arguments with it
    /// before they run a rule that assumes them apart (`mcir_ad::driver`).
    SharesMemory,
    /// `array.sum`: the sum of every element, `f64` or `i64` by element type.
    Sum,
    /// `array.dot`: the dot product of two rank-1 `f64` arrays of equal length.
    Dot,
    /// `map.OP`: elementwise `f64` arithmetic; operands are two arrays of one shape, or an
    /// array and a scalar in either order. Only `add sub mul div` and `pow` (array ** scalar).
    MapFBinary(FBinOp),
    /// `map.OP`: elementwise `i64` arithmetic (`add sub mul`), operands as for `MapFBinary`.
    MapIBinary(IBinOp),
    /// `map.OP`: a unary `f64` op applied to every element of an `f64` array.
    MapFUnary(FUnOp),
    /// `map.fpowi`: `f64 array ** i64 scalar`.
    MapFPowI,
    /// `array.matmul[.tn|.nt|.tt]`: `(A, B) -> op(A) op(B)`, a fresh `f64[,]`; the inner
    /// extents must agree.
    MatMul(Transpose),
    /// `array.matvec[.t]`: `(A, x) -> op(A) x`, a fresh `f64[]`.
    MatVec(bool),
    /// `array.transpose`: `A -> Aᵀ`, a fresh `f64[,]`.
    Transpose,
    /// `array.matmul_acc[..]`: `(C, A, B)` performs `C += op(A) op(B)` in place.
    MatMulAcc(Transpose),
    /// `array.matvec_acc[.t]`: `(y, A, x)` performs `y += op(A) x` in place.
    MatVecAcc(bool),
    /// `array.outer_acc`: `(C, x, y)` performs `C += x yᵀ` in place.
    OuterAcc,

    /// `ref.new`: a fresh cell holding the operand.
    RefNew,
    /// `ref.load`: the content of a cell.
    RefLoad,
    /// `ref.store`: `(ref, value)` replaces the content of a cell.
    RefStore,

    /// `tuple.new`: a tuple of the operands.
    TupleNew,
    /// `tuple.get I`: field `I` of a tuple.
    TupleGet(u32),
    /// `struct.new`: a value of an immutable struct, or a fresh `mut struct`, from its fields in order.
    StructNew(StructId),
    /// `struct.get S.f`: a field of an immutable struct value.
    StructGet(StructId, u32),
    /// `mut.load S.f`: a field of a `mut struct`.
    MutLoad(StructId, u32),
    /// `mut.store S.f`: `(record, value)` assigns a field of a `mut struct`.
    MutStore(StructId, u32),

    /// `select`: `(cond, a, b) -> a if cond else b`, for scalars of one type.
    Select,
    /// `linearized`: `(y, j₁, x₁, …, j_m, x_m)` is `y`, an `f64`, whose derivative is
    /// declared to be `Σ jₖ · dxₖ`: derivatives pass to the `xₖ` with the coefficients
    /// `jₖ`, and not through `y` or the `jₖ`. Only derivative code makes it: a branch
    /// whose arms compute a scalar function of a few values has its derivatives computed
    /// in the arms, so that no reverse pass needs the branch (`mcir_ad`'s `linearize.rs`).
    Linearized,

    /// `array.zeros_like`: a fresh `f64` array of the operand's shape, filled with zeros.
    ZerosLike,
    /// `array.add_into`: `(dst, src)` adds `src` (an array of `dst`'s shape, or an `f64`
    /// scalar) to every element of the `f64` array `dst`, in place.
    AddInto,
    /// `array.axpy`: `(dst, alpha, x)` performs `dst += alpha * x` elementwise, in place.
    Axpy,
    /// `array.move_add`: `(dst, src)` adds `src` into `dst` and then zeroes `src`; nothing
    /// happens when both are the same array. It moves an adjoint from one shadow to another.
    MoveAdd,

    /// `stack.new`: a fresh, empty stack.
    StackNew,
    /// `unset`: a value of any type that nothing reads: the field of a tape record that
    /// the path taken through the forward pass did not fill (the reverse pass follows the
    /// same path, so it never reads it). Derived rules only.
    Unset,
    /// `stack.push`: `(stack, value)` appends a value.
    StackPush,
    /// `stack.pop`: removes and yields the last value pushed; popping an empty stack is an error.
    StackPop,
    /// `stack.peek`: the last value pushed, left on the stack; an empty stack is an error.
    StackPeek,
    /// `stack.reserve`: `(stack, lo, hi, extra[, width])` appends room for
    /// `width · (max(hi - lo, 0) + extra)` values, to be filled by `stack.put`, and yields
    /// `base - width · lo`, `base` being the index of the first (arithmetic modulo 2⁶⁴,
    /// so that no bound overflows). `width`, a positive constant, is 1 when absent. The
    /// forward pass of a range loop `for i in lo..hi` reserves its iterations' records
    /// once instead of pushing in each; a record of `width` values per iteration keeps
    /// them side by side, behind one cursor.
    StackReserve,
    /// `stack.put`: `(stack, offset, i, v₀, …, v_{w-1})` stores the record of `w ≥ 1`
    /// values at indices `offset + w · i + k` (modulo 2⁶⁴) in room reserved with width
    /// `w`; an index past the stack's end is an error.
    StackPut,

    /// `arena.mark`: a position in the memory of the current call, for `arena.release`.
    /// Derived rules only: a checkpoint's passes mark before a recomputation.
    ArenaMark,
    /// `arena.release`: `(mark)` gives back everything allocated since the mark was taken;
    /// no value allocated since may be used afterwards. A no-op where memory is collected
    /// (the interpreter).
    ArenaRelease,
    /// `tape.mark`: a position in the current call's tape region (where tape stacks grow
    /// and what instructions marked `tape` allocate), for `tape.release`. Derived rules
    /// only: a checkpoint's reverse pass marks before its recomputation.
    TapeMark,
    /// `tape.release`: `(mark)` gives back everything the tape region took since the
    /// mark was taken; no value allocated there since may be used afterwards.
    TapeRelease,

    /// `call @f`: calls a function of the module.
    Call(crate::FuncId),
    /// `print`: writes the operand to the program's diagnostic output.
    Print,
}

impl FBinOp {
    /// Every variant, for tables and tests.
    pub const ALL: [FBinOp; 8] = [
        FBinOp::Add,
        FBinOp::Sub,
        FBinOp::Mul,
        FBinOp::Div,
        FBinOp::Pow,
        FBinOp::Min,
        FBinOp::Max,
        FBinOp::Atan2,
    ];

    /// The mnemonic in IR text.
    pub fn name(self) -> &'static str {
        match self {
            FBinOp::Add => "fadd",
            FBinOp::Sub => "fsub",
            FBinOp::Mul => "fmul",
            FBinOp::Div => "fdiv",
            FBinOp::Pow => "fpow",
            FBinOp::Min => "fmin",
            FBinOp::Max => "fmax",
            FBinOp::Atan2 => "atan2",
        }
    }

    /// Applies the operation.
    #[inline]
    pub fn eval(self, a: f64, b: f64) -> f64 {
        match self {
            FBinOp::Add => a + b,
            FBinOp::Sub => a - b,
            FBinOp::Mul => a * b,
            FBinOp::Div => a / b,
            FBinOp::Pow => a.powf(b),
            // Ties go to `a`, and NaN propagates, so these are not `f64::min`/`f64::max`.
            FBinOp::Min => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else if b < a {
                    b
                } else {
                    a
                }
            }
            FBinOp::Max => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else if b > a {
                    b
                } else {
                    a
                }
            }
            FBinOp::Atan2 => a.atan2(b),
        }
    }

    /// Whether the elementwise form `map.OP` exists.
    pub fn is_elementwise(self) -> bool {
        matches!(self, FBinOp::Add | FBinOp::Sub | FBinOp::Mul | FBinOp::Div | FBinOp::Pow)
    }
}

impl FUnOp {
    /// Every variant, for tables and tests.
    pub const ALL: [FUnOp; 20] = [
        FUnOp::Neg,
        FUnOp::Sin,
        FUnOp::Cos,
        FUnOp::Tan,
        FUnOp::Asin,
        FUnOp::Acos,
        FUnOp::Atan,
        FUnOp::Sinh,
        FUnOp::Cosh,
        FUnOp::Tanh,
        FUnOp::Exp,
        FUnOp::Log,
        FUnOp::Log1p,
        FUnOp::Expm1,
        FUnOp::Sqrt,
        FUnOp::Abs,
        FUnOp::Floor,
        FUnOp::Ceil,
        FUnOp::Round,
        FUnOp::Sign,
    ];

    /// The mnemonic in IR text; also the builtin's name in source, except `fneg`.
    pub fn name(self) -> &'static str {
        match self {
            FUnOp::Neg => "fneg",
            FUnOp::Sin => "sin",
            FUnOp::Cos => "cos",
            FUnOp::Tan => "tan",
            FUnOp::Asin => "asin",
            FUnOp::Acos => "acos",
            FUnOp::Atan => "atan",
            FUnOp::Sinh => "sinh",
            FUnOp::Cosh => "cosh",
            FUnOp::Tanh => "tanh",
            FUnOp::Exp => "exp",
            FUnOp::Log => "log",
            FUnOp::Log1p => "log1p",
            FUnOp::Expm1 => "expm1",
            FUnOp::Sqrt => "sqrt",
            FUnOp::Abs => "abs",
            FUnOp::Floor => "floor",
            FUnOp::Ceil => "ceil",
            FUnOp::Round => "round",
            FUnOp::Sign => "sign",
        }
    }

    /// Applies the operation.
    #[inline]
    pub fn eval(self, x: f64) -> f64 {
        match self {
            FUnOp::Neg => -x,
            FUnOp::Sin => x.sin(),
            FUnOp::Cos => x.cos(),
            FUnOp::Tan => x.tan(),
            FUnOp::Asin => x.asin(),
            FUnOp::Acos => x.acos(),
            FUnOp::Atan => x.atan(),
            FUnOp::Sinh => x.sinh(),
            FUnOp::Cosh => x.cosh(),
            FUnOp::Tanh => x.tanh(),
            FUnOp::Exp => crate::math::exp(x),
            FUnOp::Log => x.ln(),
            FUnOp::Log1p => x.ln_1p(),
            FUnOp::Expm1 => x.exp_m1(),
            FUnOp::Sqrt => x.sqrt(),
            FUnOp::Abs => x.abs(),
            FUnOp::Floor => x.floor(),
            FUnOp::Ceil => x.ceil(),
            FUnOp::Round => x.round(),
            FUnOp::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    // 0.0, -0.0 and NaN are their own sign.
                    x
                }
            }
        }
    }
}

impl IBinOp {
    /// Every variant, for tables and tests.
    pub const ALL: [IBinOp; 7] =
        [IBinOp::Add, IBinOp::Sub, IBinOp::Mul, IBinOp::Div, IBinOp::Rem, IBinOp::Min, IBinOp::Max];

    /// The mnemonic in IR text.
    pub fn name(self) -> &'static str {
        match self {
            IBinOp::Add => "iadd",
            IBinOp::Sub => "isub",
            IBinOp::Mul => "imul",
            IBinOp::Div => "idiv",
            IBinOp::Rem => "irem",
            IBinOp::Min => "imin",
            IBinOp::Max => "imax",
        }
    }

    /// Applies the operation, or says why it has no result.
    #[inline]
    pub fn eval(self, a: i64, b: i64) -> Result<i64, IntError> {
        match self {
            IBinOp::Add => a.checked_add(b).ok_or(IntError::Overflow),
            IBinOp::Sub => a.checked_sub(b).ok_or(IntError::Overflow),
            IBinOp::Mul => a.checked_mul(b).ok_or(IntError::Overflow),
            IBinOp::Div | IBinOp::Rem if b == 0 => Err(IntError::DivisionByZero),
            IBinOp::Div => a.checked_div(b).ok_or(IntError::Overflow),
            IBinOp::Rem => a.checked_rem(b).ok_or(IntError::Overflow),
            IBinOp::Min => Ok(a.min(b)),
            IBinOp::Max => Ok(a.max(b)),
        }
    }

    /// Whether the elementwise form `map.OP` exists.
    pub fn is_elementwise(self) -> bool {
        matches!(self, IBinOp::Add | IBinOp::Sub | IBinOp::Mul)
    }
}

impl IUnOp {
    /// The mnemonic in IR text.
    pub fn name(self) -> &'static str {
        match self {
            IUnOp::Neg => "ineg",
            IUnOp::Abs => "iabs",
        }
    }

    /// Applies the operation, or says why it has no result.
    #[inline]
    pub fn eval(self, a: i64) -> Result<i64, IntError> {
        match self {
            IUnOp::Neg => a.checked_neg().ok_or(IntError::Overflow),
            IUnOp::Abs => a.checked_abs().ok_or(IntError::Overflow),
        }
    }
}

/// Why an integer operation has no result.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IntError {
    /// The exact result does not fit in `i64`.
    Overflow,
    /// Division or remainder by zero.
    DivisionByZero,
}

impl CmpOp {
    /// Every variant, for tables and tests.
    pub const ALL: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

    /// The predicate's name in IR text.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// Compares two values (IEEE for floats: every comparison with NaN but `ne` is false).
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

impl Op {
    /// Constants, and arithmetic and comparisons of scalars that cannot fail at run time
    /// (integer arithmetic, which can overflow, is not among them): no memory, no
    /// allocation, no effect. What inlining, hoisting and the inert-loop pass build on.
    pub fn is_scalar_arith(&self) -> bool {
        matches!(
            self,
            Op::FConst(_)
                | Op::IConst(_)
                | Op::BConst(_)
                | Op::FBinary(_)
                | Op::FUnary(_)
                | Op::FPowI
                | Op::Linearized
                | Op::FCmp(_)
                | Op::ICmp(_)
                | Op::BCmp(_)
                | Op::Not
                | Op::IToF
                | Op::Select
        )
    }

    /// Whether the op's result is memory it allocates: no other value held before it is
    /// the same array, ref or stack. (A `mut struct` made with `struct.new` is too; that
    /// needs the type table to tell.)
    pub fn allocates(&self) -> bool {
        matches!(
            self,
            Op::ArrayFill
                | Op::ArrayLit(_)
                | Op::ArrayCopy
                | Op::MapFBinary(_)
                | Op::MapIBinary(_)
                | Op::MapFUnary(_)
                | Op::MapFPowI
                | Op::MatMul(_)
                | Op::MatVec(_)
                | Op::Transpose
                | Op::ZerosLike
                | Op::RefNew
                | Op::StackNew
        )
    }

    /// Whether the op may allocate on native code, and so may take its memory from the
    /// call's tape region (`InstData::in_tape`): what [`Op::allocates`] names, records
    /// and tuples (blocks of slots), a stack's reservation of room, and a call (whose
    /// result, returned in registers, native code may have to put in memory).
    pub fn may_take_tape(&self) -> bool {
        self.allocates() || matches!(self, Op::TupleNew | Op::StructNew(_) | Op::StackReserve | Op::Call(_))
    }

    /// Whether the op has an effect besides its result (writes memory, prints, calls), so
    /// that it must be kept even when its result is unused. Ops that may fail at run time
    /// are also kept: removing them would remove the error.
    pub fn has_effect(&self) -> bool {
        match self {
            Op::FConst(_)
            | Op::IConst(_)
            | Op::BConst(_)
            | Op::FBinary(_)
            | Op::FUnary(_)
            | Op::FPowI
            | Op::Linearized
            | Op::FCmp(_)
            | Op::ICmp(_)
            | Op::BCmp(_)
            | Op::Not
            | Op::IToF
            | Op::ArrayDim(_)
            | Op::SharesMemory
            | Op::ArrayCopy
            | Op::ArrayLit(_)
            | Op::Sum
            | Op::MapFUnary(_)
            | Op::MapFPowI
            | Op::RefNew
            | Op::RefLoad
            | Op::TupleNew
            | Op::TupleGet(_)
            | Op::StructNew(_)
            | Op::StructGet(..)
            | Op::MutLoad(..)
            | Op::Select
            | Op::ZerosLike
            | Op::StackNew
            | Op::Unset => false,
            Op::IBinary(_)
            | Op::IUnary(_)
            | Op::FToI
            | Op::ArrayFill
            | Op::Load
            | Op::Store
            | Op::CopyInto
            | Op::Dot
            | Op::MatMul(_)
            | Op::MatVec(_)
            | Op::Transpose
            | Op::MatMulAcc(_)
            | Op::MatVecAcc(_)
            | Op::OuterAcc
            | Op::MapFBinary(_)
            | Op::MapIBinary(_)
            | Op::RefStore
            | Op::MutStore(..)
            | Op::Call(_)
            | Op::Print
            | Op::AddInto
            | Op::Axpy
            | Op::MoveAdd
            | Op::StackPush
            | Op::StackPop
            | Op::StackPeek
            | Op::StackReserve
            | Op::StackPut
            | Op::TrustedLoad
            | Op::TrustedStore
            | Op::ArenaMark
            | Op::ArenaRelease
            | Op::TapeMark
            | Op::TapeRelease
            | Op::ExpectDim(_) => true,
        }
    }
}

/// `x ** n` for an integer exponent, by repeated squaring. The interpreter and the JIT
/// both use this, so they agree bit for bit.
#[inline]
pub fn powi(x: f64, n: i64) -> f64 {
    let mut base = x;
    let mut e = n.unsigned_abs();
    let mut acc = 1.0;
    while e > 0 {
        if e & 1 == 1 {
            acc *= base;
        }
        e >>= 1;
        if e > 0 {
            base *= base;
        }
    }
    if n < 0 {
        1.0 / acc
    } else {
        acc
    }
}

/// `i64(x)`: truncation toward zero, or `None` for NaN, infinities and values out of range.
pub fn f64_to_i64(x: f64) -> Option<i64> {
    let t = x.trunc();
    // -2^63 is representable; 2^63 is not.
    if t.is_nan() || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&t) {
        None
    } else {
        Some(t as i64)
    }
}
