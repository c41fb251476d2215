//! Type checking of a `.mcir` AST and its lowering to SSA IR, in one walk: each
//! expression is checked as its IR is built, and every error becomes a
//! [`Diagnostic`] with a span. Lowering goes on after an error (the erroneous
//! expression is skipped) so that one run reports many.
//!
//! Mutable locals become SSA values: structured control flow lets joins be built
//! directly. An `if` joins the variables its arms left different as block parameters;
//! a loop header takes one parameter per outer variable its body assigns.

mod builtins;
mod callable;
mod checkpoint;
mod expr;
mod globals;
mod rules;
mod stmt;

use mcir_ir::Module;
use mcir_syntax::ast::Program;
use mcir_syntax::Diagnostic;

pub use globals::BUILTIN_NAMES;

/// Checks `program` and lowers it to a module that passes the IR verifier, or returns
/// every error found.
pub fn lower_program(program: &Program) -> Result<Module, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let globals = globals::collect(program, &mut diags);
    let module = globals.and_then(|g| stmt::lower_functions(program, g, &mut diags));
    match module {
        Some(m) if diags.is_empty() => Ok(m),
        _ => {
            diags.sort_by_key(|d| d.span.start);
            Err(diags)
        }
    }
}

/// The functions of `program` with a parameter of function type: they are compiled as
/// specialised copies, one per combination of functions passed to them.
pub fn generic_functions(program: &Program) -> Vec<String> {
    program
        .items
        .iter()
        .filter_map(|item| match item {
            mcir_syntax::ast::Item::Fn(f)
                if f.params.iter().any(|(_, t)| matches!(t, mcir_syntax::ast::TypeExpr::Fn(..))) =>
            {
                Some(f.name.name.clone())
            }
            _ => None,
        })
        .collect()
}

/// Marks that an error was reported: the caller skips what depended on it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Reported;

pub(crate) type Res<T> = Result<T, Reported>;
