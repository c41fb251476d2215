//! The library's error types.

use crate::diagnostics::SourceFile;
use mcir_interp::RuntimeError;
use std::fmt;
use std::sync::Arc;

/// The program does not compile: every diagnostic found.
#[derive(Clone, Debug)]
pub struct CompileError {
    pub(crate) source: Arc<SourceFile>,
    /// The errors, in source order.
    pub diagnostics: Vec<mcir_syntax::Diagnostic>,
}

impl CompileError {
    /// Every diagnostic rendered with its source line.
    pub fn render(&self) -> String {
        self.diagnostics.iter().map(|d| self.source.render(d)).collect::<Vec<_>>().join("")
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.diagnostics {
            writeln!(f, "{}: {}", self.source.location(d.span.start), d.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for CompileError {}

/// The entry function cannot be chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// No function has that name; the program's functions follow.
    NoSuchFunction(String, Vec<String>),
    /// Several functions and none is `main`.
    Ambiguous(Vec<String>),
    /// The program has no functions.
    NoFunctions,
    /// The function takes a function argument, which no caller outside the program can give.
    TakesFunction(String),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::NoSuchFunction(n, all) => {
                write!(f, "no function named `{n}`; the program defines: {}", all.join(", "))
            }
            EntryError::Ambiguous(all) => write!(
                f,
                "the program has several functions and none is called `main`; choose one with --fn: {}",
                all.join(", ")
            ),
            EntryError::NoFunctions => f.write_str("the program defines no functions"),
            EntryError::TakesFunction(n) => write!(
                f,
                "`{n}` takes a function as an argument, so it cannot be called from outside the program; \
                 call it from another function"
            ),
        }
    }
}

impl std::error::Error for EntryError {}

/// Arguments that do not fit the function's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError {
    /// What is wrong, naming the argument (`args[1].y[2]`).
    pub message: String,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ArgError {}

/// Why a run failed.
#[derive(Clone, Debug)]
pub enum RunError {
    /// The arguments do not fit (a usage error).
    Args(ArgError),
    /// The program failed while running.
    Runtime(RuntimeError),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Args(e) => e.fmt(f),
            RunError::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RunError {}

/// Why a gradient could not be computed.
#[derive(Clone, Debug)]
pub enum GradError {
    /// The arguments or cotangents do not fit (a usage error).
    Args(ArgError),
    /// The program failed while running.
    Runtime(RuntimeError),
    /// No rule could be derived.
    Derive(mcir_ad::AdError),
}

impl fmt::Display for GradError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GradError::Args(e) => e.fmt(f),
            GradError::Runtime(e) => e.fmt(f),
            GradError::Derive(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for GradError {}
