//! Parsing the IR text that [`crate::print`] writes. The parser checks syntax and
//! names; [`crate::verify`] checks everything else, so parse-then-verify accepts
//! exactly the valid IR. `;` starts a comment that runs to the end of the line.

use crate::entity::EntityRef;
use crate::function::*;
use crate::op::*;
use crate::types::{Scalar, StructDef, StructId, Type, TypeId, TypeTable};
use std::collections::HashMap;
use std::fmt;

/// A syntax or name error in IR text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// `%name_7` or `%7`: the full text after `%`.
    Value(String),
    /// `@name`.
    Func(String),
    /// Identifiers, mnemonics with dots, block labels, `true`/`false`, `NaN`, `inf`.
    Word(String),
    /// A number literal (with optional sign).
    Number(String),
    Punct(&'static str),
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Value(s) => write!(f, "`%{s}`"),
            Tok::Func(s) => write!(f, "`@{s}`"),
            Tok::Word(s) | Tok::Number(s) => write!(f, "`{s}`"),
            Tok::Punct(p) => write!(f, "`{p}`"),
            Tok::Eof => f.write_str("end of input"),
        }
    }
}

fn lex(src: &str) -> Result<Vec<(Tok, u32, u32)>, ParseError> {
    let mut toks = Vec::new();
    let bytes = src.as_bytes();
    let (mut i, mut line, mut line_start) = (0usize, 1u32, 0usize);
    // `$` appears in the names of derived functions and types (`@f$fwd`, `f$tape`).
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'$';
    while i < bytes.len() {
        let c = bytes[i];
        let col = (i - line_start) as u32 + 1;
        let err = |message: String| ParseError { line, col, message };
        if c == b'\n' {
            line += 1;
            i += 1;
            line_start = i;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b';' {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        let tok = match c {
            b'%' | b'@' => {
                i += 1;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'$')
                {
                    i += 1;
                }
                let text = src[start + 1..i].to_string();
                if text.is_empty() {
                    return Err(err(format!("expected a name after `{}`", c as char)));
                }
                if c == b'%' {
                    Tok::Value(text)
                } else {
                    Tok::Func(text)
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'>') => {
                i += 2;
                Tok::Punct("->")
            }
            b'-' | b'0'..=b'9' => {
                i += 1;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric()
                        || bytes[i] == b'.'
                        || ((bytes[i] == b'-' || bytes[i] == b'+') && matches!(bytes[i - 1], b'e' | b'E')))
                {
                    i += 1;
                }
                Tok::Number(src[start..i].to_string())
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' => {
                while i < bytes.len() && is_word(bytes[i]) {
                    i += 1;
                }
                Tok::Word(src[start..i].to_string())
            }
            _ => {
                let p = match c {
                    b'(' => "(",
                    b')' => ")",
                    b'[' => "[",
                    b']' => "]",
                    b'{' => "{",
                    b'}' => "}",
                    b',' => ",",
                    b':' => ":",
                    b'=' => "=",
                    b'<' => "<",
                    b'>' => ">",
                    _ => {
                        let ch = src[i..].chars().next().unwrap_or('?');
                        return Err(err(format!("unexpected character `{ch}`")));
                    }
                };
                i += 1;
                Tok::Punct(p)
            }
        };
        toks.push((tok, line, col));
    }
    let col = (bytes.len() - line_start) as u32 + 1;
    toks.push((Tok::Eof, line, col));
    Ok(toks)
}

/// Parses a module printed by [`crate::print_module`].
pub fn parse_module(src: &str) -> Result<Module, ParseError> {
    let toks = lex(src)?;
    let mut p = Parser { toks, pos: 0, module: Module::new(), type_depth: 0 };
    p.declare_names()?;
    while !matches!(p.peek(), Tok::Eof) {
        if p.eat_word("mut") || p.peek_word("struct") {
            p.struct_decl()?;
        } else if p.eat_word("rule") {
            p.rule_decl()?;
        } else {
            p.function()?;
        }
    }
    Ok(p.module)
}

struct Parser {
    toks: Vec<(Tok, u32, u32)>,
    pos: usize,
    module: Module,
    /// How deep the type being read nests (types are read recursively).
    type_depth: usize,
}

/// The deepest nesting of a type the parser reads: far beyond any type a program
/// declares or a derivation makes, and shallow enough for any thread's stack.
const MAX_TYPE_DEPTH: usize = 256;

/// Per-function name tables.
#[derive(Default)]
struct FnScope {
    values: HashMap<String, Value>,
    defined: Vec<bool>,
    blocks: HashMap<String, Block>,
    block_defined: Vec<bool>,
    order: Vec<Block>,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }

    fn error<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        let (_, line, col) = self.toks[self.pos.min(self.toks.len() - 1)];
        Err(ParseError { line, col, message: message.into() })
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn peek_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Word(x) if x == w)
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if self.peek_word(w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Tok::Punct(x) if *x == p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), ParseError> {
        if self.eat(p) {
            Ok(())
        } else {
            self.error(format!("expected `{p}`, found {}", self.peek()))
        }
    }

    fn word(&mut self) -> Result<String, ParseError> {
        match self.next() {
            Tok::Word(w) => Ok(w),
            t => {
                self.pos -= 1;
                self.error(format!("expected a name, found {t}"))
            }
        }
    }

    /// Declares every struct and function name up front, so that uses may precede definitions.
    fn declare_names(&mut self) -> Result<(), ParseError> {
        for i in 0..self.toks.len().saturating_sub(1) {
            match (&self.toks[i].0, &self.toks[i + 1].0) {
                (Tok::Word(w), Tok::Word(name)) if w == "struct" => {
                    let mutable = i > 0 && self.toks[i - 1].0 == Tok::Word("mut".into());
                    if self.module.types.struct_by_name(name).is_some() {
                        self.pos = i + 1;
                        return self.error(format!("struct `{name}` is declared twice"));
                    }
                    let def = StructDef { name: name.clone(), mutable, fields: Vec::new() };
                    self.module.types.declare_struct(def);
                }
                (Tok::Word(w), Tok::Func(name)) if w == "fn" => {
                    if self.module.func_by_name(name).is_some() {
                        self.pos = i + 1;
                        return self.error(format!("function `@{name}` is defined twice"));
                    }
                    self.module.add_function(Function::new(name, &[], None));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `rule reverse @f = @rule, @pullback`, `rule forward @f = @rule, @pushforward` or
    /// `rule zero @f` or `rule checkpoint @f = @inner` (after `rule`).
    fn rule_decl(&mut self) -> Result<(), ParseError> {
        let kind = self.word()?;
        let func = self.func_ref()?;
        let kind = match kind.as_str() {
            "zero" => RuleKind::Zero,
            "checkpoint" => {
                self.expect("=")?;
                RuleKind::Checkpoint { inner: self.func_ref()? }
            }
            "reverse" | "forward" => {
                self.expect("=")?;
                let rule = self.func_ref()?;
                self.expect(",")?;
                let closure = self.func_ref()?;
                if kind == "reverse" {
                    RuleKind::Reverse { rule, pullback: closure }
                } else {
                    RuleKind::Forward { rule, pushforward: closure }
                }
            }
            other => {
                self.pos -= 1;
                return self.error(format!(
                    "unknown rule kind `{other}`: expected reverse, forward, zero or checkpoint"
                ));
            }
        };
        self.module.rules.push(CustomRule { func, kind });
        Ok(())
    }

    /// `@name` of a declared function.
    fn func_ref(&mut self) -> Result<FuncId, ParseError> {
        match self.next() {
            Tok::Func(n) => match self.module.func_by_name(&n) {
                Some(f) => Ok(f),
                None => {
                    self.pos -= 1;
                    self.error(format!("unknown function `@{n}`"))
                }
            },
            t => {
                self.pos -= 1;
                self.error(format!("expected `@function`, found {t}"))
            }
        }
    }

    fn struct_decl(&mut self) -> Result<(), ParseError> {
        if !self.eat_word("struct") {
            return self.error("expected `struct`");
        }
        let name = self.word()?;
        let sid = self.struct_id(&name)?;
        self.expect("{")?;
        let mut fields = Vec::new();
        while !self.eat("}") {
            if !fields.is_empty() {
                self.expect(",")?;
            }
            let fname = self.word()?;
            self.expect(":")?;
            let ty = self.ty()?;
            fields.push((fname, ty));
        }
        self.module.types.struct_def_mut(sid).fields = fields;
        Ok(())
    }

    fn struct_id(&self, name: &str) -> Result<StructId, ParseError> {
        match self.module.types.struct_by_name(name) {
            Some(s) => Ok(s),
            None => self.error(format!("unknown type `{name}`")),
        }
    }

    fn ty(&mut self) -> Result<TypeId, ParseError> {
        if self.type_depth >= MAX_TYPE_DEPTH {
            return self.error(format!("a type nests deeper than {MAX_TYPE_DEPTH} levels"));
        }
        self.type_depth += 1;
        let ty = self.type_inner();
        self.type_depth -= 1;
        ty
    }

    fn type_inner(&mut self) -> Result<TypeId, ParseError> {
        if self.eat("(") {
            let mut items = Vec::new();
            while !self.eat(")") {
                items.push(self.ty()?);
                if !self.eat(",") {
                    self.expect(")")?;
                    break;
                }
            }
            return Ok(self.module.types.intern(Type::Tuple(items)));
        }
        let name = self.word()?;
        let scalar = match name.as_str() {
            "f64" => Some(Scalar::F64),
            "i64" => Some(Scalar::I64),
            "bool" => Some(Scalar::Bool),
            _ => None,
        };
        if let Some(s) = scalar {
            if self.eat("[") {
                let mut rank = 1u8;
                while self.eat(",") {
                    rank = rank.saturating_add(1);
                }
                self.expect("]")?;
                return Ok(self.module.types.array(s, rank));
            }
            return Ok(TypeTable::scalar(s));
        }
        if name == "ref" || name == "stack" {
            self.expect("<")?;
            let inner = self.ty()?;
            self.expect(">")?;
            let ty = if name == "ref" { Type::Ref(inner) } else { Type::Stack(inner) };
            return Ok(self.module.types.intern(ty));
        }
        self.pos -= 1;
        let sid = self.struct_id(&name)?;
        self.pos += 1;
        Ok(self.module.types.intern(Type::Struct(sid)))
    }

    fn function(&mut self) -> Result<(), ParseError> {
        if !self.eat_word("fn") {
            return self.error(format!("expected `fn` or `struct`, found {}", self.peek()));
        }
        let name = match self.next() {
            Tok::Func(n) => n,
            t => {
                self.pos -= 1;
                return self.error(format!("expected a function name `@name`, found {t}"));
            }
        };
        let fid = match self.module.func_by_name(&name) {
            Some(f) => f,
            None => return self.error(format!("unknown function `@{name}`")),
        };
        let mut f = Function::new(&name, &[], None);
        let mut scope = FnScope::default();
        let entry = f.entry();
        scope.order.push(entry);
        scope.block_defined.push(true);
        self.expect("(")?;
        while !self.eat(")") {
            if !f.params.is_empty() {
                self.expect(",")?;
            }
            let (v, ty) = self.value_def(&mut f, &mut scope)?;
            define_param(&mut f, entry, v, ty);
            f.params.push(ty);
        }
        if self.eat("->") {
            f.ret = Some(self.ty()?);
        }
        self.expect("{")?;
        // The entry block's label carries no parameters: they are the signature's.
        let label = self.word()?;
        if label != "bb0" {
            return self.error(format!("the entry block must be `bb0`, found `{label}`"));
        }
        scope.blocks.insert(label, entry);
        self.expect(":")?;
        self.block_body(&mut f, &mut scope, entry)?;
        while !self.eat("}") {
            let label = self.word()?;
            let b = self.block_ref(&mut f, &mut scope, &label)?;
            if std::mem::replace(&mut scope.block_defined[b.index()], true) {
                return self.error(format!("block `{label}` is defined twice"));
            }
            scope.order.push(b);
            if self.eat("(") {
                while !self.eat(")") {
                    if !f.blocks[b].params.is_empty() {
                        self.expect(",")?;
                    }
                    let (v, ty) = self.value_def(&mut f, &mut scope)?;
                    define_param(&mut f, b, v, ty);
                }
            }
            self.expect(":")?;
            self.block_body(&mut f, &mut scope, b)?;
        }
        if let Some((name, _)) = scope.blocks.iter().find(|(_, b)| !scope.block_defined[b.index()]) {
            return self.error(format!("block `{name}` is used but never defined in `@{}`", f.name));
        }
        if let Some((name, _)) = scope.values.iter().find(|(_, v)| !scope.defined[v.index()]) {
            return self.error(format!("value `%{name}` is used but never defined in `@{}`", f.name));
        }
        let f = f.rebuild(&scope.order);
        self.module.funcs[fid] = f;
        Ok(())
    }

    /// `%name: type` at a definition site; returns the value and its type.
    fn value_def(&mut self, f: &mut Function, scope: &mut FnScope) -> Result<(Value, TypeId), ParseError> {
        let v = self.value_use(f, scope)?;
        if std::mem::replace(&mut scope.defined[v.index()], true) {
            self.pos -= 1;
            return self.error("this value is defined twice".to_string());
        }
        self.expect(":")?;
        let ty = self.ty()?;
        f.values[v].ty = ty;
        Ok((v, ty))
    }

    fn value_use(&mut self, f: &mut Function, scope: &mut FnScope) -> Result<Value, ParseError> {
        let text = match self.next() {
            Tok::Value(t) => t,
            t => {
                self.pos -= 1;
                return self.error(format!("expected a value `%n`, found {t}"));
            }
        };
        if let Some(&v) = scope.values.get(&text) {
            return Ok(v);
        }
        // `%name_7` keeps `name` as the value's source name; `%7` has none.
        let name = match text.rfind('_') {
            Some(i) if text[i + 1..].bytes().all(|b| b.is_ascii_digit()) && i + 1 < text.len() => {
                Some(text[..i].to_string())
            }
            _ if text.bytes().all(|b| b.is_ascii_digit()) => None,
            _ => {
                self.pos -= 1;
                return self.error(format!("`%{text}` is not a value name (`%7` or `%name_7`)"));
            }
        };
        let v =
            f.values.push(ValueData { ty: TypeTable::UNIT, def: ValueDef::Param(f.entry(), u32::MAX), name });
        scope.values.insert(text, v);
        scope.defined.push(false);
        Ok(v)
    }

    fn block_ref(&mut self, f: &mut Function, scope: &mut FnScope, label: &str) -> Result<Block, ParseError> {
        let ok =
            label.strip_prefix("bb").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !ok {
            return self.error(format!("expected a block label `bbN`, found `{label}`"));
        }
        if let Some(&b) = scope.blocks.get(label) {
            return Ok(b);
        }
        let b = f.add_block();
        scope.blocks.insert(label.to_string(), b);
        scope.block_defined.push(false);
        Ok(b)
    }

    fn block_call(&mut self, f: &mut Function, scope: &mut FnScope) -> Result<BlockCall, ParseError> {
        let label = self.word()?;
        let block = self.block_ref(f, scope, &label)?;
        let mut args = Vec::new();
        if self.eat("(") {
            args = self.value_list(f, scope, ")")?;
        }
        Ok(BlockCall { block, args })
    }

    /// Comma-separated values up to (and eating) `close`.
    fn value_list(
        &mut self,
        f: &mut Function,
        scope: &mut FnScope,
        close: &str,
    ) -> Result<Vec<Value>, ParseError> {
        let mut out = Vec::new();
        while !self.eat(close) {
            if !out.is_empty() {
                self.expect(",")?;
            }
            out.push(self.value_use(f, scope)?);
        }
        Ok(out)
    }

    /// Operands up to the end of the instruction (the next line's start is found by
    /// looking for a token that cannot continue the list).
    fn operands(&mut self, f: &mut Function, scope: &mut FnScope) -> Result<Vec<Value>, ParseError> {
        let mut out = Vec::new();
        if !matches!(self.peek(), Tok::Value(_)) {
            return Ok(out);
        }
        // A value followed by `:` starts the next instruction's definition.
        if matches!(self.toks.get(self.pos + 1), Some((Tok::Punct(":"), _, _))) {
            return Ok(out);
        }
        out.push(self.value_use(f, scope)?);
        while self.eat(",") {
            out.push(self.value_use(f, scope)?);
        }
        Ok(out)
    }

    fn block_body(&mut self, f: &mut Function, scope: &mut FnScope, b: Block) -> Result<(), ParseError> {
        loop {
            let (_, line, col) = self.toks[self.pos];
            let _ = (line, col);
            if self.eat_word("jump") {
                let t = self.block_call(f, scope)?;
                f.set_terminator(b, Terminator::Jump(t), Span::default());
                return Ok(());
            }
            if self.eat_word("br") {
                let cond = self.value_use(f, scope)?;
                self.expect(",")?;
                let then_dest = self.block_call(f, scope)?;
                self.expect(",")?;
                let else_dest = self.block_call(f, scope)?;
                f.set_terminator(b, Terminator::Branch { cond, then_dest, else_dest }, Span::default());
                return Ok(());
            }
            if self.eat_word("ret") {
                let v = match self.peek() {
                    Tok::Value(_) => Some(self.value_use(f, scope)?),
                    _ => None,
                };
                f.set_terminator(b, Terminator::Return(v), Span::default());
                return Ok(());
            }
            let result = if matches!(self.peek(), Tok::Value(_)) {
                let (v, ty) = self.value_def(f, scope)?;
                self.expect("=")?;
                Some((v, ty))
            } else {
                None
            };
            let in_tape = self.eat_word("tape");
            let (op, args) = self.op(f, scope)?;
            let inst = f.insts.push(InstData {
                op,
                args,
                result: result.map(|r| r.0),
                span: Span::default(),
                in_tape,
            });
            if let Some((v, _)) = result {
                f.values[v].def = ValueDef::Inst(inst);
            }
            f.blocks[b].insts.push(inst);
        }
    }

    fn field(&mut self) -> Result<(StructId, u32), ParseError> {
        let w = self.word()?;
        let Some((sname, fname)) = w.split_once('.') else {
            self.pos -= 1;
            return self.error(format!("expected `Struct.field`, found `{w}`"));
        };
        self.pos -= 1;
        let sid = self.struct_id(sname)?;
        let Some(i) = self.module.types.struct_def(sid).field_index(fname) else {
            return self.error(format!("struct `{sname}` has no field `{fname}`"));
        };
        self.pos += 1;
        Ok((sid, i as u32))
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, ParseError> {
        let text = match self.next() {
            Tok::Number(t) | Tok::Word(t) => t,
            t => {
                self.pos -= 1;
                return self.error(format!("expected {what}, found {t}"));
            }
        };
        match text.parse() {
            Ok(x) => Ok(x),
            Err(_) => {
                self.pos -= 1;
                self.error(format!("`{text}` is not {what}"))
            }
        }
    }

    fn cmp(&mut self) -> Result<CmpOp, ParseError> {
        let w = self.word()?;
        match CmpOp::ALL.into_iter().find(|c| c.name() == w) {
            Some(c) => Ok(c),
            None => {
                self.pos -= 1;
                self.error(format!("unknown comparison `{w}`"))
            }
        }
    }

    fn op(&mut self, f: &mut Function, scope: &mut FnScope) -> Result<(Op, Vec<Value>), ParseError> {
        if let Tok::Word(w) = self.peek() {
            if w == "call" {
                self.pos += 1;
                let name = match self.next() {
                    Tok::Func(n) => n,
                    t => {
                        self.pos -= 1;
                        return self.error(format!("expected `@function`, found {t}"));
                    }
                };
                let Some(fid) = self.module.func_by_name(&name) else {
                    self.pos -= 1;
                    return self.error(format!("unknown function `@{name}`"));
                };
                self.expect("(")?;
                let args = self.value_list(f, scope, ")")?;
                return Ok((Op::Call(fid), args));
            }
            if w == "load" || w == "store" || w == "load.trusted" || w == "store.trusted" {
                let is_store = w.starts_with("store");
                let trusted = w.ends_with(".trusted");
                self.pos += 1;
                let mut args = vec![self.value_use(f, scope)?];
                self.expect("[")?;
                args.extend(self.value_list(f, scope, "]")?);
                if is_store {
                    self.expect(",")?;
                    args.push(self.value_use(f, scope)?);
                    return Ok((if trusted { Op::TrustedStore } else { Op::Store }, args));
                }
                return Ok((if trusted { Op::TrustedLoad } else { Op::Load }, args));
            }
        }
        let mnemonic = self.word()?;
        let op = match mnemonic.as_str() {
            "fconst" => Op::FConst(self.number("a float")?),
            "iconst" => Op::IConst(self.number("an integer")?),
            "bconst" => Op::BConst(self.number("`true` or `false`")?),
            "fpowi" => Op::FPowI,
            "fcmp" => Op::FCmp(self.cmp()?),
            "icmp" => Op::ICmp(self.cmp()?),
            "bcmp" => Op::BCmp(self.cmp()?),
            "not" => Op::Not,
            "itof" => Op::IToF,
            "ftoi" => Op::FToI,
            "array.fill" => Op::ArrayFill,
            "array.lit" => {
                self.expect("[")?;
                let mut dims = Vec::new();
                while !self.eat("]") {
                    if !dims.is_empty() {
                        self.expect(",")?;
                    }
                    dims.push(self.number("an extent")?);
                }
                Op::ArrayLit(dims)
            }
            "array.dim" => Op::ArrayDim(self.number("a dimension")?),
            "array.expect_dim" => Op::ExpectDim(self.number("a dimension")?),
            "array.copy" => Op::ArrayCopy,
            "array.copy_into" => Op::CopyInto,
            "array.shares" => Op::SharesMemory,
            "array.sum" => Op::Sum,
            "array.dot" => Op::Dot,
            "array.outer_acc" => Op::OuterAcc,
            "array.transpose" => Op::Transpose,
            m if m.starts_with("array.matmul") || m.starts_with("array.matvec") => {
                // `array.matmul_acc.tn` is `array.matmul_acc` with the suffix `.tn`.
                let head = "array.".len();
                let (base, suffix) = match m[head..].find('.') {
                    Some(k) => m.split_at(head + k),
                    None => (m, ""),
                };
                let t = [
                    Transpose::NONE,
                    Transpose { a: true, b: false },
                    Transpose { a: false, b: true },
                    Transpose { a: true, b: true },
                ]
                .into_iter()
                .find(|t| t.suffix() == suffix);
                match (base, suffix, t) {
                    ("array.matmul", _, Some(t)) => Op::MatMul(t),
                    ("array.matmul_acc", _, Some(t)) => Op::MatMulAcc(t),
                    ("array.matvec", "" | ".t", _) => Op::MatVec(suffix == ".t"),
                    ("array.matvec_acc", "" | ".t", _) => Op::MatVecAcc(suffix == ".t"),
                    _ => {
                        self.pos -= 1;
                        return self.error(format!("unknown operation `{m}`"));
                    }
                }
            }
            "map.fpowi" => Op::MapFPowI,
            "ref.new" => Op::RefNew,
            "ref.load" => Op::RefLoad,
            "ref.store" => Op::RefStore,
            "tuple.new" => Op::TupleNew,
            "tuple.get" => Op::TupleGet(self.number("a field index")?),
            "struct.new" => {
                let name = self.word()?;
                self.pos -= 1;
                let sid = self.struct_id(&name)?;
                self.pos += 1;
                Op::StructNew(sid)
            }
            "struct.get" => {
                let (s, i) = self.field()?;
                Op::StructGet(s, i)
            }
            "mut.load" => {
                let (s, i) = self.field()?;
                Op::MutLoad(s, i)
            }
            "mut.store" => {
                let (s, i) = self.field()?;
                Op::MutStore(s, i)
            }
            "print" => Op::Print,
            "select" => Op::Select,
            "linearized" => Op::Linearized,
            "array.zeros_like" => Op::ZerosLike,
            "array.add_into" => Op::AddInto,
            "array.axpy" => Op::Axpy,
            "array.move_add" => Op::MoveAdd,
            "stack.new" => Op::StackNew,
            "unset" => Op::Unset,
            "stack.push" => Op::StackPush,
            "stack.pop" => Op::StackPop,
            "stack.peek" => Op::StackPeek,
            "stack.reserve" => Op::StackReserve,
            "stack.put" => Op::StackPut,
            "arena.mark" => Op::ArenaMark,
            "tape.mark" => Op::TapeMark,
            "tape.release" => Op::TapeRelease,
            "arena.release" => Op::ArenaRelease,
            m => {
                let (mapped, base) = match m.strip_prefix("map.") {
                    Some(rest) => (true, rest),
                    None => (false, m),
                };
                let fb = FBinOp::ALL.into_iter().find(|o| o.name() == base);
                let fu = FUnOp::ALL.into_iter().find(|o| o.name() == base);
                let ib = IBinOp::ALL.into_iter().find(|o| o.name() == base);
                let iu = [IUnOp::Neg, IUnOp::Abs].into_iter().find(|o| o.name() == base);
                match (mapped, fb, fu, ib, iu) {
                    (false, Some(o), ..) => Op::FBinary(o),
                    (true, Some(o), ..) => Op::MapFBinary(o),
                    (false, _, Some(o), ..) => Op::FUnary(o),
                    (true, _, Some(o), ..) => Op::MapFUnary(o),
                    (false, _, _, Some(o), _) => Op::IBinary(o),
                    (true, _, _, Some(o), _) => Op::MapIBinary(o),
                    (false, _, _, _, Some(o)) => Op::IUnary(o),
                    _ => {
                        self.pos -= 1;
                        return self.error(format!("unknown operation `{m}`"));
                    }
                }
            }
        };
        let args = self.operands(f, scope)?;
        Ok((op, args))
    }
}

fn define_param(f: &mut Function, b: Block, v: Value, ty: TypeId) {
    let n = f.blocks[b].params.len() as u32;
    f.values[v].def = ValueDef::Param(b, n);
    f.values[v].ty = ty;
    f.blocks[b].params.push(v);
}
