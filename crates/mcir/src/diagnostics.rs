//! Source files and the rendering of diagnostics with the offending line and a caret.

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;
use mcir_syntax::Diagnostic;

/// A named source text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// The name shown in messages (usually the path).
    pub name: String,
    /// The text.
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    /// A source file called `name` holding `text`.
    pub fn new(name: &str, text: &str) -> SourceFile {
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        SourceFile { name: name.to_string(), text: text.to_string(), line_starts }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let start = self.line_starts.get(line).copied().unwrap_or(0);
        let col = self.text.get(start..offset).map(|s| s.chars().count()).unwrap_or(0) + 1;
        (line + 1, col)
    }

    /// `name:line:col` of a byte offset.
    pub fn location(&self, offset: usize) -> String {
        let (l, c) = self.line_col(offset);
        format!("{}:{l}:{c}", self.name)
    }

    /// Renders a diagnostic: an `error:` line, the location, the source line and a caret.
    pub fn render(&self, d: &Diagnostic) -> String {
        let clamp = |s: mcir_syntax::ast::Span| {
            let mut start = s.start.min(self.text.len());
            let mut end = s.end.clamp(start, self.text.len());
            while !self.text.is_char_boundary(start) {
                start -= 1;
            }
            while !self.text.is_char_boundary(end) {
                end += 1;
            }
            start..end
        };
        let mut primary = Label::primary((), clamp(d.span));
        if let Some(l) = &d.label {
            primary = primary.with_message(l);
        }
        let mut labels = vec![primary];
        for (s, m) in &d.secondary {
            labels.push(Label::secondary((), clamp(*s)).with_message(m));
        }
        let cs =
            CsDiagnostic::error().with_message(&d.message).with_labels(labels).with_notes(d.notes.clone());
        let file = SimpleFile::new(self.name.as_str(), self.text.as_str());
        let config = term::Config::default();
        match term::emit_into_string(&config, &file, &cs) {
            Ok(s) => s,
            Err(_) => format!("error: {}\n --> {}\n", d.message, self.location(d.span.start)),
        }
    }
}
