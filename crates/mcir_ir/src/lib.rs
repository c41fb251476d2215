//! The mcir SSA IR: typed values, blocks with parameters instead of phis, one [`Op`]
//! enum, and the tools every pass relies on — printer, text parser and verifier.
//!
//! Entities are `u32` indices into per-function arenas ([`Block`], [`Inst`], [`Value`])
//! or per-module ones ([`FuncId`], [`TypeId`], [`StructId`]).

#![deny(missing_docs)]

pub mod bounds;
pub mod builder;
pub mod callgraph;
pub mod cfg;
pub mod compact;
pub mod cse;
pub mod effects;
pub mod entity;
pub mod expand;
pub mod function;
pub mod hoist;
pub mod inline;
pub mod jam;
pub mod math;
pub mod memory;
pub mod op;
pub mod parse;
pub mod print;
pub mod promote;
pub mod reclaim;
pub mod returns;
pub mod scalarise;
pub mod simplify;
pub mod specialise;
pub mod types;
pub mod verify;
pub mod version;

pub use function::{
    Block, BlockCall, BlockData, CustomRule, FuncId, Function, Inst, InstData, Module, RuleKind, Span,
    Terminator, Value, ValueData, ValueDef,
};
/// The largest extent of one dimension of an array: `zeros(n)` with a larger `n` is a
/// runtime error. The bound lets range analysis prove index arithmetic free of overflow
/// (a product of two indices or extents is below 2^62).
pub const MAX_EXTENT: i64 = i32::MAX as i64;

/// Function `f` of `module` as native code compiles it: loops around a reduction run
/// side by side ([`jam`]), loops giving back their iterations' memory ([`reclaim`]),
/// elements inner loops read and write at one place held in values ([`promote`]), and
/// loops checking constant columns copied to skip those checks ([`version`]), in that
/// order. What `jam`, `promote` and `version` make must pass the verifier, or the
/// function goes on as it was before that pass; with `as_left`, what `promote` and
/// `version` make is kept as it is, to print it (the tests on generated programs verify
/// the printed text).
pub fn native_form<'f>(
    module: &Module,
    f: &'f Function,
    escapes: &reclaim::Escapes,
    as_left: bool,
) -> std::borrow::Cow<'f, Function> {
    let verified = |g: &Function| as_left || verify_function(module, g).is_ok();
    let mut form = jam::as_compiled(module, f);
    if let Some(g) = reclaim::for_engines(&form, escapes) {
        form = std::borrow::Cow::Owned(g);
    }
    if let Some(g) = promote::promote_elements(&form).filter(verified) {
        form = std::borrow::Cow::Owned(g);
    }
    if let Some(g) = version::version_loops(&form).filter(verified) {
        form = std::borrow::Cow::Owned(g);
    }
    form
}

pub use op::{f64_to_i64, powi, CmpOp, FBinOp, FUnOp, IBinOp, IUnOp, IntError, Op, Transpose};
pub use parse::{parse_module, ParseError};
pub use print::{print_function, print_module, print_rule, print_struct};
pub use types::{Scalar, StructDef, StructId, Type, TypeId, TypeTable};
pub use verify::{verify_function, verify_module, VerifyError};
