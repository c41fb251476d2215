//! The reference interpreter: executes any verified IR function, with every runtime
//! check the language requires (bounds, shapes, integer overflow and division by zero,
//! recursion depth, allocation size, time limit) reported as a [`RuntimeError`] that
//! carries the source span of the failing operation.
//!
//! Calls do not recurse on the Rust stack: frames live in a vector, so a deep recursion
//! in the program is a clean error, never a stack overflow of the host.

#![deny(missing_docs)]

mod exec;
pub mod json;
pub mod kernels;
mod value;

pub use exec::{Interpreter, Limits, RuntimeError, RuntimeErrorKind};
pub use value::{Array, ArrayData, ArrayRef, Val};
