//! The abstract syntax tree. Every node carries the byte span it was parsed from.

/// A byte range of the source.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

/// A name and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it was written.
    pub span: Span,
}

/// A whole source file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// Top-level items in source order.
    pub items: Vec<Item>,
}

/// A top-level item.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `const NAME: T = e;`
    Const(ConstDecl),
    /// `struct S { .. }` or `mut struct S { .. }`
    Struct(StructDecl),
    /// `fn f(..) -> R { .. }`
    Fn(FnDecl),
    /// `rule reverse f(..) { .. }`, `rule forward f(..) { .. }` or `rule zero f;`
    Rule(RuleDecl),
}

/// Which derivative a hand-written rule gives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// A reverse rule: the body returns the value and a pullback closure.
    Reverse,
    /// A forward rule: the body returns the value and a pushforward closure.
    Forward,
    /// The function's derivative is zero.
    Zero,
}

/// A hand-written derivative rule for a function (docs/rules.md).
#[derive(Clone, Debug, PartialEq)]
pub struct RuleDecl {
    /// Reverse, forward or zero.
    pub kind: RuleKind,
    /// The function the rule is for.
    pub name: Ident,
    /// The parameters, as the function declares them (none for `zero`).
    pub params: Vec<(Ident, TypeExpr)>,
    /// The function's return type as written.
    pub ret: Option<TypeExpr>,
    /// The rule's body (none for `zero`).
    pub body: Option<Block>,
    /// The whole rule.
    pub span: Span,
}

/// A global constant.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstDecl {
    /// Its name.
    pub name: Ident,
    /// Its declared type.
    pub ty: TypeExpr,
    /// Its value, a constant expression.
    pub value: Expr,
    /// The whole declaration.
    pub span: Span,
}

/// A struct declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct StructDecl {
    /// Its name.
    pub name: Ident,
    /// Whether it is a `mut struct`.
    pub mutable: bool,
    /// Fields in order.
    pub fields: Vec<(Ident, TypeExpr)>,
    /// The whole declaration.
    pub span: Span,
}

/// A function.
#[derive(Clone, Debug, PartialEq)]
pub struct FnDecl {
    /// Its name.
    pub name: Ident,
    /// Parameters in order.
    pub params: Vec<(Ident, TypeExpr)>,
    /// The declared return type; `None` for `()`.
    pub ret: Option<TypeExpr>,
    /// The body.
    pub body: Block,
    /// The whole function.
    pub span: Span,
}

/// A type as written.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeExpr {
    /// `f64`, `i64`, `bool` or a struct name.
    Named(Ident),
    /// `f64[]`, `i64[,]`, ...: element type name and rank.
    Array(Ident, u8, Span),
    /// `ref<T>`
    Ref(Box<TypeExpr>, Span),
    /// `(T, U)`; `()` is the unit type.
    Tuple(Vec<TypeExpr>, Span),
    /// `fn(T, U) -> R`
    Fn(Vec<TypeExpr>, Box<TypeExpr>, Span),
}

impl TypeExpr {
    /// Where the type was written.
    pub fn span(&self) -> Span {
        match self {
            TypeExpr::Named(i) => i.span,
            TypeExpr::Array(_, _, s)
            | TypeExpr::Ref(_, s)
            | TypeExpr::Tuple(_, s)
            | TypeExpr::Fn(_, _, s) => *s,
        }
    }
}

/// `{ stmt* }`
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Statements in order.
    pub stmts: Vec<Stmt>,
    /// From `{` to `}`.
    pub span: Span,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// What it is.
    pub kind: StmtKind,
    /// Where it was written.
    pub span: Span,
}

/// The statement forms of LANGUAGE.md §4.
#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `let [mut] x [: T] = e;`
    Let {
        /// The bound name.
        name: Ident,
        /// Whether the binding may be reassigned.
        mutable: bool,
        /// The annotated type, if any.
        ty: Option<TypeExpr>,
        /// The initial value.
        value: Expr,
    },
    /// `place = e;` or `place op= e;`
    Assign {
        /// The place assigned: a variable, `a[i]`, `p.f`, `*r` (or anything else, rejected later).
        place: Expr,
        /// `Some(op)` for compound assignment.
        op: Option<BinOp>,
        /// The assigned value.
        value: Expr,
    },
    /// `if c { } else if c2 { } else { }`
    If {
        /// Conditions and their blocks, in order.
        arms: Vec<(Expr, Block)>,
        /// The final `else` block.
        else_block: Option<Block>,
    },
    /// `while c { }`
    While {
        /// The condition.
        cond: Expr,
        /// The body.
        body: Block,
    },
    /// `for i in a..b { }`
    For {
        /// The loop variable.
        var: Ident,
        /// The first value.
        start: Expr,
        /// The end (exclusive).
        end: Expr,
        /// The body.
        body: Block,
        /// Where `#[checkpoint]` marks the loop: its reverse pass recomputes the forward
        /// pass from a logarithmic number of saved states instead of keeping every step.
        checkpoint: Option<Span>,
    },
    /// `break;`
    Break,
    /// `continue;`
    Continue,
    /// `return [e];`
    Return(Option<Expr>),
    /// `e;`
    Expr(Expr),
    /// A nested `{ .. }` scope.
    Block(Block),
    /// A statement that did not parse (already reported).
    Error,
}

/// Binary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `**`
    Pow,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&`
    And,
    /// `||`
    Or,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Pow => "**",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

/// Unary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-e`
    Neg,
    /// `!e`
    Not,
    /// `*e`
    Deref,
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where it was written.
    pub span: Span,
}

/// The expression forms of LANGUAGE.md §5.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A float literal.
    Float(f64),
    /// An integer literal.
    Int(i64),
    /// `true` / `false`.
    Bool(bool),
    /// A variable, constant or function name.
    Name(String),
    /// `op e`
    Unary(UnOp, Box<Expr>),
    /// `a op b`
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `f(args)`
    Call(Box<Expr>, Vec<Expr>),
    /// `a[i, j]`
    Index(Box<Expr>, Vec<Expr>),
    /// `p.field`
    Field(Box<Expr>, Ident),
    /// `t.0`
    TupleField(Box<Expr>, u32, Span),
    /// `(a, b)`; `()` is unit.
    Tuple(Vec<Expr>),
    /// `[a, b]`
    Array(Vec<Expr>),
    /// `S { f: e, .. }`
    StructLit(Ident, Vec<(Ident, Expr)>),
    /// `ref(e)`
    RefNew(Box<Expr>),
    /// `|params| body`
    Closure(Box<Closure>),
    /// An expression that did not parse (already reported).
    Error,
}

/// A closure expression: `|x: T, ..| e` or `|x: T, ..| { .. }`.
#[derive(Clone, Debug, PartialEq)]
pub struct Closure {
    /// Its parameters, each with its type.
    pub params: Vec<(Ident, TypeExpr)>,
    /// Its body.
    pub body: ClosureBody,
}

/// The body of a closure.
#[derive(Clone, Debug, PartialEq)]
pub enum ClosureBody {
    /// `|..| e`: the closure returns `e` (or nothing, when `e` is a call returning nothing).
    Expr(Expr),
    /// `|..| { .. }`: a block with `return`s, like a function body.
    Block(Block),
}

impl Expr {
    /// Builds an expression.
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }
}

/// The first `Some` that `visit` gives for an expression under `exprs` (each with its
/// depth) and `blocks`: every operand one deeper than its expression, each statement's
/// expressions at depth 1, closures' bodies included. Iterative, so a tree of any depth
/// needs no machine stack; the order of the visits is unspecified.
pub fn find_expr<'a, T>(
    mut exprs: Vec<(&'a Expr, usize)>,
    mut blocks: Vec<&'a Block>,
    mut visit: impl FnMut(&'a Expr, usize) -> Option<T>,
) -> Option<T> {
    loop {
        if let Some((e, depth)) = exprs.pop() {
            if let Some(found) = visit(e, depth) {
                return Some(found);
            }
            let d = depth + 1;
            match &e.kind {
                ExprKind::Float(_)
                | ExprKind::Int(_)
                | ExprKind::Bool(_)
                | ExprKind::Name(_)
                | ExprKind::Error => {}
                ExprKind::Unary(_, a)
                | ExprKind::Field(a, _)
                | ExprKind::TupleField(a, ..)
                | ExprKind::RefNew(a) => exprs.push((a, d)),
                ExprKind::Binary(_, a, b) => {
                    exprs.push((a, d));
                    exprs.push((b, d));
                }
                ExprKind::Call(f, args) | ExprKind::Index(f, args) => {
                    exprs.push((f, d));
                    exprs.extend(args.iter().map(|a| (a, d)));
                }
                ExprKind::Tuple(items) | ExprKind::Array(items) => exprs.extend(items.iter().map(|a| (a, d))),
                ExprKind::StructLit(_, fields) => exprs.extend(fields.iter().map(|(_, a)| (a, d))),
                ExprKind::Closure(c) => match &c.body {
                    ClosureBody::Expr(body) => exprs.push((body, d)),
                    ClosureBody::Block(b) => blocks.push(b),
                },
            }
            continue;
        }
        let block = blocks.pop()?;
        for s in &block.stmts {
            match &s.kind {
                StmtKind::Let { value, .. } | StmtKind::Expr(value) | StmtKind::Return(Some(value)) => {
                    exprs.push((value, 1))
                }
                StmtKind::Assign { place, value, .. } => {
                    exprs.push((place, 1));
                    exprs.push((value, 1));
                }
                StmtKind::If { arms, else_block } => {
                    for (c, b) in arms {
                        exprs.push((c, 1));
                        blocks.push(b);
                    }
                    blocks.extend(else_block);
                }
                StmtKind::While { cond, body } => {
                    exprs.push((cond, 1));
                    blocks.push(body);
                }
                StmtKind::For { start, end, body, .. } => {
                    exprs.push((start, 1));
                    exprs.push((end, 1));
                    blocks.push(body);
                }
                StmtKind::Block(b) => blocks.push(b),
                StmtKind::Break | StmtKind::Continue | StmtKind::Return(None) | StmtKind::Error => {}
            }
        }
    }
}
