//! Turning source text into an AST: lexing, the generated LR parser with error
//! recovery, and the limits that keep later recursive passes within their stack.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::token::{LexError, Token};
use lalrpop_util::{ErrorRecovery, ParseError};
use logos::Logos;

// The generated parser's unwraps read its own parse tables, which hold by construction
// (and the fuzzing of the front end exercises them).
lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, clippy::expect_used, unused, missing_docs)]
    grammar,
    "/mcir.rs"
);

/// How deeply source may nest. Later passes recurse over the syntax tree, so these
/// bound the stack they need; the front end's stack is sized from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceLimits {
    /// The deepest nesting of `(`, `[` and `{` accepted.
    pub max_nesting: usize,
    /// The deepest expression tree accepted (long operator chains nest too).
    pub max_expr_depth: usize,
}

impl SourceLimits {
    /// The largest `max_nesting` and `max_expr_depth` a caller may ask for: the front
    /// end's stack grows with them, and beyond these it would take gigabytes.
    pub const CEILING: usize = 100_000;
}

impl Default for SourceLimits {
    fn default() -> Self {
        SourceLimits { max_nesting: 256, max_expr_depth: 10_000 }
    }
}

/// A syntax problem found by a grammar action.
#[derive(Clone, Debug, PartialEq)]
pub struct Issue {
    /// What is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
}

impl Issue {
    /// An issue over `start..end`.
    pub fn new(message: &str, start: usize, end: usize) -> Issue {
        Issue { message: message.to_string(), span: Span::new(start, end) }
    }
}

pub(crate) fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    let span = a.span.to(b.span);
    Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)), span)
}

pub(crate) fn un(op: UnOp, start: usize, e: Expr) -> Expr {
    let span = Span::new(start, e.span.end);
    Expr::new(ExprKind::Unary(op, Box::new(e)), span)
}

/// The result of parsing: the program (with error nodes where parts did not parse) and
/// every diagnostic. The program is meaningful only if there are no diagnostics.
#[derive(Debug, Default)]
pub struct Parsed {
    /// The syntax tree.
    pub program: Program,
    /// Lexical and syntax errors, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

/// Lexes `src`, turning lexical errors into [`Token::Error`] so the parser can go on.
/// `t.0.1` lexes as a float `0.1`; after a `.` it is split back into `0 . 1`.
pub fn lex(src: &str) -> (Vec<(usize, Token, usize)>, Vec<Diagnostic>) {
    // About one token per three bytes of source, reserved at once rather than grown by
    // doubling (each step of which copies every token into fresh memory); at most 2²²
    // up front, so that a huge input asks for no more than it would by growing.
    let mut toks: Vec<(usize, Token, usize)> = Vec::with_capacity((src.len() / 3 + 16).min(1 << 22));
    let mut diags = Vec::new();
    for (res, range) in Token::lexer(src).spanned() {
        match res {
            Ok(Token::Float(x)) if matches!(toks.last(), Some((_, Token::Dot, _))) => {
                let text = &src[range.clone()];
                match text.split_once('.') {
                    Some((a, b))
                        if a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit()) =>
                    {
                        let dot = range.start + a.len();
                        let ai = a.parse().unwrap_or(i64::MAX);
                        let bi = b.parse().unwrap_or(i64::MAX);
                        toks.push((range.start, Token::Int(ai), dot));
                        toks.push((dot, Token::Dot, dot + 1));
                        toks.push((dot + 1, Token::Int(bi), range.end));
                    }
                    _ => toks.push((range.start, Token::Float(x), range.end)),
                }
            }
            Ok(t) => toks.push((range.start, t, range.end)),
            Err(e) => {
                let span = Span::new(range.start, range.end);
                let message = match e {
                    LexError::UnexpectedChar => {
                        let ch = src[range.clone()].chars().next().unwrap_or('?');
                        format!("unexpected character `{}`", ch.escape_debug())
                    }
                    other => other.to_string(),
                };
                diags.push(Diagnostic::error(message, span));
                toks.push((range.start, Token::Error, range.end));
            }
        }
    }
    (toks, diags)
}

/// Parses a whole program, recovering at statement boundaries so that several errors are
/// reported in one run, with the default [`SourceLimits`].
pub fn parse(src: &str) -> Parsed {
    parse_with(src, &SourceLimits::default())
}

/// Parses a whole program, rejecting source that nests deeper than `limits` allow.
pub fn parse_with(src: &str, limits: &SourceLimits) -> Parsed {
    let (toks, mut diagnostics) = lex(src);
    if let Some(d) = check_bracket_depth(&toks, limits.max_nesting) {
        diagnostics.push(d);
        return Parsed { program: Program::default(), diagnostics };
    }
    let mut recovered: Vec<ErrorRecovery<usize, Token, Issue>> = Vec::new();
    let parser = grammar::ProgramParser::new();
    let result = parser.parse(&mut recovered, toks.into_iter().map(Ok::<_, Issue>));
    let mut syntax: Vec<(Diagnostic, bool)> = Vec::new();
    for r in recovered {
        let cascade = is_cascade(&r.error);
        if let Some(d) = parse_error_diag(r.error, src) {
            syntax.push((d, cascade));
        }
    }
    let program = match result {
        Ok(p) => p,
        Err(e) => {
            let cascade = is_cascade(&e);
            if let Some(d) = parse_error_diag(e, src) {
                syntax.push((d, cascade));
            }
            Program::default()
        }
    };
    // Recovery skips to the end of the statement in error, which can leave the braces
    // around it unbalanced: the rest of the function then reads as items, or the file
    // ends early. Those errors follow from the first and are not reported.
    let earliest = syntax.iter().map(|(d, _)| d).chain(&diagnostics).map(|d| d.span.start).min();
    for (d, cascade) in syntax {
        if cascade && earliest.is_some_and(|e| e < d.span.start) {
            continue;
        }
        diagnostics.push(d);
    }
    if diagnostics.is_empty() {
        if let Some(d) = check_expr_depth(&program, limits.max_expr_depth) {
            diagnostics.push(d);
        }
    }
    diagnostics.sort_by_key(|d| d.span.start);
    diagnostics.dedup_by(|a, b| a.span == b.span && a.message == b.message);
    Parsed { program, diagnostics }
}

fn check_bracket_depth(toks: &[(usize, Token, usize)], max: usize) -> Option<Diagnostic> {
    let mut depth = 0usize;
    for (l, t, r) in toks {
        match t {
            Token::LParen | Token::LBracket | Token::LBrace => {
                depth += 1;
                if depth > max {
                    return Some(
                        Diagnostic::error(format!("brackets nest more than {max} deep"), Span::new(*l, *r))
                            .with_note("split the expression or the block into smaller functions")
                            .with_note(
                                "the limit is `--max-nesting` on the command line, `SourceLimits` in the API",
                            ),
                    );
                }
            }
            Token::RParen | Token::RBracket | Token::RBrace => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Measures expression depth without recursion, so that no later pass overflows its stack.
fn check_expr_depth(program: &Program, max: usize) -> Option<Diagnostic> {
    let mut stack: Vec<(&Expr, usize)> = Vec::new();
    let mut blocks: Vec<&Block> = Vec::new();
    for item in &program.items {
        match item {
            Item::Const(c) => stack.push((&c.value, 1)),
            Item::Fn(f) => blocks.push(&f.body),
            Item::Rule(r) => blocks.extend(&r.body),
            Item::Struct(_) => {}
        }
    }
    find_expr(stack, blocks, |e, depth| {
        (depth > max).then(|| {
            Diagnostic::error(format!("expression nests more than {max} operations deep"), e.span)
                .with_note("split it with `let` bindings")
                .with_note("the limit is `--max-expr-depth` on the command line, `SourceLimits` in the API")
        })
    })
}

fn friendly_expected(expected: &[String]) -> String {
    let mut names: Vec<String> = expected
        .iter()
        .map(|e| {
            let inner = e.trim_matches('"');
            match inner {
                "identifier" | "integer" | "float" => format!("an {inner}").replace("an float", "a float"),
                _ => format!("`{inner}`"),
            }
        })
        .filter(|e| e != "`invalid token`")
        .collect();
    names.sort();
    names.dedup();
    match names.len() {
        0 => String::new(),
        1 => format!("expected {}", names[0]),
        n if n <= 6 => format!("expected one of {}", names.join(", ")),
        _ => String::new(),
    }
}

/// Whether a syntax error is one that an earlier error's recovery may have caused: the
/// file ending early, or a token where only an item (`fn`, `struct`, ..) may start.
fn is_cascade(e: &ParseError<usize, Token, Issue>) -> bool {
    match e {
        ParseError::UnrecognizedEof { .. } => true,
        ParseError::UnrecognizedToken { expected, .. } => {
            expected.iter().any(|x| x == "\"fn\"") && expected.iter().any(|x| x == "\"struct\"")
        }
        _ => false,
    }
}

/// Advice for a syntax error at `l..r` on token `t`, from what other languages allow
/// and mcir does not.
fn hint(t: &Token, l: usize, src: &str) -> Option<&'static str> {
    let before = src.get(..l).unwrap_or("").trim_end();
    match t {
        Token::If => Some(
            "`if` is a statement, not an expression: declare the variable first and assign it in each arm \
             (`let mut y = b; if c { y = a; }`)",
        ),
        Token::Assign if before.ends_with("..") => {
            Some("ranges leave their end out and have no `..=`: `0..4` runs 0, 1, 2, 3")
        }
        Token::While if before.ends_with(']') && before.contains("#[") => {
            Some("`#[checkpoint]` goes before a `for` loop only, one that runs from start to end (docs/language.md)")
        }
        _ => {
            // `loop { y = .. }` reads as a struct literal `loop { field: .. }`.
            let head = before.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_').trim_end();
            let head = head.strip_suffix('{')?.trim_end();
            let word_start = head.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_');
            (&head[word_start.len()..] == "loop")
                .then_some("mcir has no `loop`: write `while true { .. }`, and leave it with `break` or `return`")
        }
    }
}

fn parse_error_diag(e: ParseError<usize, Token, Issue>, src: &str) -> Option<Diagnostic> {
    Some(match e {
        ParseError::InvalidToken { location } => {
            Diagnostic::error("invalid token", Span::new(location, location + 1))
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let at = location.min(src.len());
            let d = Diagnostic::error("unexpected end of file", Span::new(at, at));
            let exp = friendly_expected(&expected);
            if exp.is_empty() {
                d
            } else {
                d.with_label(exp)
            }
        }
        // A lexical error was already reported where it happened.
        ParseError::UnrecognizedToken { token: (_, Token::Error, _), .. } => return None,
        ParseError::UnrecognizedToken { token: (l, t, r), expected } => {
            let exp = friendly_expected(&expected);
            let d = Diagnostic::error(format!("unexpected {t}"), Span::new(l, r));
            let d = if exp.is_empty() { d } else { d.with_label(exp.clone()) };
            if t == Token::Dot
                && matches!(src.get(r..r + 1), Some(s) if s.bytes().all(|b| b.is_ascii_digit()))
            {
                d.with_note("a float literal needs a digit before the `.`: write `0.5`, not `.5`")
            } else if let Some(h) = hint(&t, l, src) {
                d.with_note(h)
            } else if expected.iter().any(|e| e == "\";\"") && l > 0 {
                d.with_note("is a `;` missing at the end of the previous statement?")
            } else {
                d
            }
        }
        ParseError::ExtraToken { token: (l, t, r) } => {
            Diagnostic::error(format!("unexpected {t}"), Span::new(l, r))
        }
        ParseError::User { error } => Diagnostic::error(error.message, error.span),
    })
}
