//! The `.mcir` front end's syntax layer: tokens, the grammar (in `grammar/` at the
//! workspace root), the AST and syntax diagnostics. It knows nothing of types or IR.

#![deny(missing_docs)]

pub mod ast;
pub mod diag;
pub mod parser;
pub mod token;

pub use diag::Diagnostic;
pub use parser::{parse, parse_with, Parsed, SourceLimits};
