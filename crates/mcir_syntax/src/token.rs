//! The tokens of `.mcir` source, produced by a logos lexer.

use logos::Logos;
use std::fmt;

/// Why a piece of source is not a token.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum LexError {
    /// A character that starts no token.
    #[default]
    UnexpectedChar,
    /// An integer literal that does not fit in `i64`.
    IntTooLarge,
    /// A float literal that does not parse (cannot happen for the accepted forms, kept for safety).
    BadFloat,
    /// A `/*` comment with no `*/`.
    UnterminatedComment,
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LexError::UnexpectedChar => "unexpected character",
            LexError::IntTooLarge => "integer literal does not fit in i64",
            LexError::BadFloat => "malformed float literal",
            LexError::UnterminatedComment => "block comment is never closed with `*/`",
        })
    }
}

fn parse_int(lex: &mut logos::Lexer<'_, Token>) -> Result<i64, LexError> {
    lex.slice().replace('_', "").parse().map_err(|_| LexError::IntTooLarge)
}

fn parse_float(lex: &mut logos::Lexer<'_, Token>) -> Result<f64, LexError> {
    lex.slice().replace('_', "").parse().map_err(|_| LexError::BadFloat)
}

fn block_comment(lex: &mut logos::Lexer<'_, Token>) -> logos::FilterResult<(), LexError> {
    match lex.remainder().find("*/") {
        Some(end) => {
            lex.bump(end + 2);
            logos::FilterResult::Skip
        }
        None => {
            lex.bump(lex.remainder().len());
            logos::FilterResult::Error(LexError::UnterminatedComment)
        }
    }
}

/// A token. Keywords are listed in LANGUAGE.md §1; `f64`, `i64` and `bool` are identifiers.
#[derive(Logos, Clone, Debug, PartialEq)]
#[logos(error = LexError)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Token {
    /// `/* ... */`, skipped (comments do not nest).
    #[token("/*", block_comment)]
    BlockComment,

    /// `fn`
    #[token("fn")]
    Fn,
    /// `struct`
    #[token("struct")]
    Struct,
    /// `mut`
    #[token("mut")]
    Mut,
    /// `let`
    #[token("let")]
    Let,
    /// `const`
    #[token("const")]
    Const,
    /// `if`
    #[token("if")]
    If,
    /// `else`
    #[token("else")]
    Else,
    /// `while`
    #[token("while")]
    While,
    /// `for`
    #[token("for")]
    For,
    /// `in`
    #[token("in")]
    In,
    /// `break`
    #[token("break")]
    Break,
    /// `continue`
    #[token("continue")]
    Continue,
    /// `return`
    #[token("return")]
    Return,
    /// `true`
    #[token("true")]
    True,
    /// `false`
    #[token("false")]
    False,
    /// `ref`
    #[token("ref")]
    Ref,
    /// `rule` (reserved for custom derivative rules)
    #[token("rule")]
    Rule,

    /// An identifier.
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice().to_string())]
    Ident(String),
    /// An integer literal (`i64`).
    #[regex(r"[0-9][0-9_]*", parse_int)]
    Int(i64),
    /// A float literal: digits must follow a `.`; `1.` and `.5` are not floats.
    #[regex(r"[0-9][0-9_]*\.[0-9][0-9_]*([eE][+-]?[0-9][0-9_]*)?", parse_float)]
    #[regex(r"[0-9][0-9_]*[eE][+-]?[0-9][0-9_]*", parse_float)]
    Float(f64),

    /// `(`
    #[token("(")]
    LParen,
    /// `)`
    #[token(")")]
    RParen,
    /// `#`, which opens an attribute `#[name]`.
    #[token("#")]
    Hash,
    /// `[`
    #[token("[")]
    LBracket,
    /// `]`
    #[token("]")]
    RBracket,
    /// `{`
    #[token("{")]
    LBrace,
    /// `}`
    #[token("}")]
    RBrace,
    /// `,`
    #[token(",")]
    Comma,
    /// `;`
    #[token(";")]
    Semi,
    /// `:`
    #[token(":")]
    Colon,
    /// `.`
    #[token(".")]
    Dot,
    /// `..`
    #[token("..")]
    DotDot,
    /// `->`
    #[token("->")]
    Arrow,
    /// `=`
    #[token("=")]
    Assign,
    /// `+=`
    #[token("+=")]
    PlusAssign,
    /// `-=`
    #[token("-=")]
    MinusAssign,
    /// `*=`
    #[token("*=")]
    StarAssign,
    /// `/=`
    #[token("/=")]
    SlashAssign,
    /// `+`
    #[token("+")]
    Plus,
    /// `-`
    #[token("-")]
    Minus,
    /// `*`
    #[token("*")]
    Star,
    /// `/`
    #[token("/")]
    Slash,
    /// `%`
    #[token("%")]
    Percent,
    /// `**`
    #[token("**")]
    StarStar,
    /// `==`
    #[token("==")]
    EqEq,
    /// `!=`
    #[token("!=")]
    NotEq,
    /// `<`
    #[token("<")]
    Lt,
    /// `<=`
    #[token("<=")]
    Le,
    /// `>`
    #[token(">")]
    Gt,
    /// `>=`
    #[token(">=")]
    Ge,
    /// `&&`
    #[token("&&")]
    AndAnd,
    /// `||`
    #[token("||")]
    OrOr,
    /// `!`
    #[token("!")]
    Bang,
    /// `|`
    #[token("|")]
    Pipe,

    /// Stands for a lexer error in the token stream so that the parser can recover.
    Error,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Token::BlockComment => "comment",
            Token::Fn => "fn",
            Token::Struct => "struct",
            Token::Mut => "mut",
            Token::Let => "let",
            Token::Const => "const",
            Token::If => "if",
            Token::Else => "else",
            Token::While => "while",
            Token::For => "for",
            Token::In => "in",
            Token::Break => "break",
            Token::Continue => "continue",
            Token::Return => "return",
            Token::True => "true",
            Token::False => "false",
            Token::Ref => "ref",
            Token::Rule => "rule",
            Token::Ident(name) => return write!(f, "identifier `{name}`"),
            Token::Int(i) => return write!(f, "integer `{i}`"),
            Token::Float(x) => return write!(f, "number `{x:?}`"),
            Token::LParen => "(",
            Token::RParen => ")",
            Token::Hash => "#",
            Token::LBracket => "[",
            Token::RBracket => "]",
            Token::LBrace => "{",
            Token::RBrace => "}",
            Token::Comma => ",",
            Token::Semi => ";",
            Token::Colon => ":",
            Token::Dot => ".",
            Token::DotDot => "..",
            Token::Arrow => "->",
            Token::Assign => "=",
            Token::PlusAssign => "+=",
            Token::MinusAssign => "-=",
            Token::StarAssign => "*=",
            Token::SlashAssign => "/=",
            Token::Plus => "+",
            Token::Minus => "-",
            Token::Star => "*",
            Token::Slash => "/",
            Token::Percent => "%",
            Token::StarStar => "**",
            Token::EqEq => "==",
            Token::NotEq => "!=",
            Token::Lt => "<",
            Token::Le => "<=",
            Token::Gt => ">",
            Token::Ge => ">=",
            Token::AndAnd => "&&",
            Token::OrOr => "||",
            Token::Bang => "!",
            Token::Pipe => "|",
            Token::Error => "invalid token",
        };
        write!(f, "`{s}`")
    }
}
