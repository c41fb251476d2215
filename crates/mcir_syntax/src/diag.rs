//! Diagnostics: a message about a span of source, with optional secondary labels and notes.
//! Rendering them with the source line is the facade's job.

use crate::ast::Span;

/// An error found in a program, located in its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// One line saying what is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
    /// A short text under the primary span, if any.
    pub label: Option<String>,
    /// Other places that explain the error.
    pub secondary: Vec<(Span, String)>,
    /// Extra lines of explanation or advice.
    pub notes: Vec<String>,
}

impl Diagnostic {
    /// An error at `span`.
    pub fn error(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { message: message.into(), span, label: None, secondary: Vec::new(), notes: Vec::new() }
    }

    /// Adds a label under the primary span.
    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = Some(label.into());
        self
    }

    /// Adds a secondary label.
    pub fn with_secondary(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.secondary.push((span, label.into()));
        self
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
}
