//! Functions and modules: arenas of blocks, instructions and values.

use crate::entity::Arena;
use crate::op::Op;
use crate::types::{TypeId, TypeTable};
use std::collections::HashMap;

crate::entity!(
    /// A function of a [`Module`].
    FuncId,
    "fn"
);
crate::entity!(
    /// A basic block of a [`Function`].
    Block,
    "bb"
);
crate::entity!(
    /// An instruction of a [`Function`].
    Inst,
    "inst"
);
crate::entity!(
    /// An SSA value of a [`Function`]: a block parameter or an instruction result.
    Value,
    "%"
);

/// A byte range of the source program; `0..0` when the IR did not come from source.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// The range `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        let clamp = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Span { start: clamp(start), end: clamp(end) }
    }
}

/// Where a value comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ValueDef {
    /// The `n`-th parameter of a block.
    Param(Block, u32),
    /// The result of an instruction.
    Inst(Inst),
}

/// A value's type, definition and optional source name (kept for readable IR).
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    /// The value's type.
    pub ty: TypeId,
    /// Its definition.
    pub def: ValueDef,
    /// The source variable it came from, if any.
    pub name: Option<String>,
}

/// An instruction: an op applied to operands, with an optional result.
#[derive(Clone, Debug, PartialEq)]
pub struct InstData {
    /// The operation.
    pub op: Op,
    /// Operands.
    pub args: Vec<Value>,
    /// The result value, if the op produces one.
    pub result: Option<Value>,
    /// The source range the instruction came from (for runtime errors).
    pub span: Span,
    /// Whether what it allocates comes from the call's tape region rather than its arena
    /// (printed `tape` before the op): memory that no `arena.release` gives back, for
    /// what a forward pass returns to the reverse pass (`crate::reclaim`).
    pub in_tape: bool,
}

/// A jump target with the arguments for its block parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockCall {
    /// The target block.
    pub block: Block,
    /// One argument per parameter of `block`.
    pub args: Vec<Value>,
}

/// How a block ends.
#[derive(Clone, Debug, PartialEq)]
pub enum Terminator {
    /// `jump bbN(args)`.
    Jump(BlockCall),
    /// `br cond, bbT(args), bbE(args)`.
    Branch {
        /// A `bool` value.
        cond: Value,
        /// Taken when `cond` is true.
        then_dest: BlockCall,
        /// Taken when `cond` is false.
        else_dest: BlockCall,
    },
    /// `ret` or `ret v`.
    Return(Option<Value>),
}

impl Terminator {
    /// The blocks this terminator may jump to.
    pub fn successors(&self) -> impl Iterator<Item = &BlockCall> {
        let (a, b) = match self {
            Terminator::Jump(t) => (Some(t), None),
            Terminator::Branch { then_dest, else_dest, .. } => (Some(then_dest), Some(else_dest)),
            Terminator::Return(_) => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// The jumps of this terminator, to change in place.
    pub fn successors_mut(&mut self) -> impl Iterator<Item = &mut BlockCall> {
        let (a, b) = match self {
            Terminator::Jump(t) => (Some(t), None),
            Terminator::Branch { then_dest, else_dest, .. } => (Some(then_dest), Some(else_dest)),
            Terminator::Return(_) => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// This terminator with every value it reads replaced by `value(v)` and every block
    /// it jumps to by `block(b)`.
    pub fn mapped(&self, value: impl Fn(Value) -> Value, block: impl Fn(Block) -> Block) -> Terminator {
        let call = |c: &BlockCall| BlockCall {
            block: block(c.block),
            args: c.args.iter().map(|&v| value(v)).collect(),
        };
        match self {
            Terminator::Jump(t) => Terminator::Jump(call(t)),
            Terminator::Branch { cond, then_dest, else_dest } => Terminator::Branch {
                cond: value(*cond),
                then_dest: call(then_dest),
                else_dest: call(else_dest),
            },
            Terminator::Return(v) => Terminator::Return(v.map(&value)),
        }
    }

    /// Every value the terminator reads.
    pub fn uses(&self) -> Vec<Value> {
        let mut out = Vec::new();
        match self {
            Terminator::Jump(t) => out.extend(&t.args),
            Terminator::Branch { cond, then_dest, else_dest } => {
                out.push(*cond);
                out.extend(&then_dest.args);
                out.extend(&else_dest.args);
            }
            Terminator::Return(v) => out.extend(v),
        }
        out
    }
}

/// A basic block: parameters, straight-line instructions and a terminator.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockData {
    /// Block parameters (for the entry block: the function's parameters).
    pub params: Vec<Value>,
    /// Instructions in order.
    pub insts: Vec<Inst>,
    /// How the block ends.
    pub term: Terminator,
    /// The source range of the terminator.
    pub term_span: Span,
}

/// A function in SSA form. Its entry block is the first block; blocks are printed and
/// executed in arena order.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// The function's name (without `@`).
    pub name: String,
    /// Parameter types; they are the entry block's parameter types.
    pub params: Vec<TypeId>,
    /// The return type, or `None` for a function that returns nothing.
    pub ret: Option<TypeId>,
    /// Blocks; the first is the entry.
    pub blocks: Arena<Block, BlockData>,
    /// Instructions.
    pub insts: Arena<Inst, InstData>,
    /// Values.
    pub values: Arena<Value, ValueData>,
    /// The source range of the whole function.
    pub span: Span,
}

impl Function {
    /// Whether this is a forward pass that automatic differentiation derived (named
    /// `f$fwd`, with a suffix for a variant): its result holds the record its reverse
    /// pass reads, which is kept until the reverse pass has run.
    pub fn is_forward_pass(&self) -> bool {
        self.name.contains("$fwd")
    }

    /// Whether this is a reverse pass that automatic differentiation derived (named
    /// `f$rev`, with a suffix such as `$const` for a variant; source names cannot hold
    /// `$`). A reverse pass computes adjoints, each a sum of products whose order the
    /// derivation chose, so native code may add its sums in another order (two partial
    /// sums in the lanes of a vector).
    pub fn is_reverse_pass(&self) -> bool {
        self.name.contains("$rev")
    }

    /// The entry block.
    pub fn entry(&self) -> Block {
        crate::entity::EntityRef::new(0)
    }

    /// The function's parameters as values of the entry block.
    pub fn param_values(&self) -> &[Value] {
        self.blocks.get(self.entry()).map(|b| b.params.as_slice()).unwrap_or(&[])
    }

    /// The type of a value.
    pub fn value_type(&self, v: Value) -> TypeId {
        self.values[v].ty
    }

    /// The instruction that defines `v`, if an instruction does (not a block parameter).
    pub fn defining(&self, v: Value) -> Option<&InstData> {
        match self.values.get(v)?.def {
            ValueDef::Inst(i) => self.insts.get(i),
            ValueDef::Param(..) => None,
        }
    }

    /// The integer constant `v` is, if it is one.
    pub fn const_int(&self, v: Value) -> Option<i64> {
        match self.defining(v)?.op {
            crate::op::Op::IConst(c) => Some(c),
            _ => None,
        }
    }

    /// Whether `v` is `counter + 1` (either way round): a counted loop's step.
    pub fn is_increment_of(&self, v: Value, counter: Value) -> bool {
        self.defining(v).is_some_and(|d| {
            d.op == crate::op::Op::IBinary(crate::op::IBinOp::Add)
                && (d.args[0] == counter && self.const_int(d.args[1]) == Some(1)
                    || d.args[1] == counter && self.const_int(d.args[0]) == Some(1))
        })
    }

    /// Every use of a value that `subst` replaces reads its replacement instead, following
    /// chains (`a → b → c` reads `c`): what a pass that found values equal to others does
    /// once it knows them all. Each replacement must be a value defined before the one it
    /// replaces, so that chains end.
    pub fn substitute<S: std::hash::BuildHasher>(
        &mut self,
        subst: &std::collections::HashMap<Value, Value, S>,
    ) {
        if subst.is_empty() {
            return;
        }
        self.map_uses(|mut v| {
            while let Some(&w) = subst.get(&v) {
                v = w;
            }
            v
        });
    }

    /// Every use of a value, by instructions and terminators, reads `map(value)` instead:
    /// what a pass that found values equal to others does once it knows them all.
    pub fn map_uses(&mut self, map: impl Fn(Value) -> Value) {
        for i in self.insts.keys() {
            self.insts[i].args.iter_mut().for_each(|a| *a = map(*a));
        }
        for b in self.blocks.keys() {
            match &mut self.blocks[b].term {
                Terminator::Jump(t) => t.args.iter_mut().for_each(|a| *a = map(*a)),
                Terminator::Branch { cond, then_dest, else_dest } => {
                    *cond = map(*cond);
                    then_dest.args.iter_mut().for_each(|a| *a = map(*a));
                    else_dest.args.iter_mut().for_each(|a| *a = map(*a));
                }
                Terminator::Return(v) => v.iter_mut().for_each(|a| *a = map(*a)),
            }
        }
    }
}

/// A whole program: its types and functions.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// Interned types and struct declarations.
    pub types: TypeTable,
    /// Functions, in source order.
    pub funcs: Arena<FuncId, Function>,
    /// Hand-written derivative rules, which automatic differentiation uses instead of
    /// deriving one from the function.
    pub rules: Vec<CustomRule>,
    names: HashMap<String, FuncId>,
}

/// A hand-written derivative rule for a function of the module (docs/rules.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomRule {
    /// The function the rule is for.
    pub func: FuncId,
    /// What it gives.
    pub kind: RuleKind,
}

/// What a hand-written rule gives, through functions of the module. With `E` the
/// environment of the closure the rule's body returned (absent when it captured nothing):
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// `rule(params..) -> (R, E)` computes the value and what the pullback needs;
    /// `pullback(E, cotangent of R) -> cotangents of the differentiable parameters` (one
    /// value, or a tuple of them when there are several).
    Reverse {
        /// The rule's body as a function.
        rule: FuncId,
        /// The pullback closure as a function.
        pullback: FuncId,
    },
    /// `rule(params..) -> (R, E)`; `pushforward(E, tangents of the differentiable
    /// parameters..) -> tangent of R`.
    Forward {
        /// The rule's body as a function.
        rule: FuncId,
        /// The pushforward closure as a function.
        pushforward: FuncId,
    },
    /// The function's derivative is zero.
    Zero,
    /// The function computes what `inner` computes (it has the same parameters and
    /// result, and writes no memory it was given), and its calls are reversed by
    /// recomputation: the forward pass runs `inner` and keeps only the arguments; the
    /// reverse pass runs `inner`'s derived forward pass again from them, then its
    /// reverse pass. A `#[checkpoint]` loop is made of such calls.
    Checkpoint {
        /// The function whose derived rule serves.
        inner: FuncId,
    },
}

impl RuleKind {
    /// `reverse`, `forward`, `zero` or `checkpoint`.
    pub fn word(&self) -> &'static str {
        match self {
            RuleKind::Reverse { .. } => "reverse",
            RuleKind::Forward { .. } => "forward",
            RuleKind::Zero => "zero",
            RuleKind::Checkpoint { .. } => "checkpoint",
        }
    }
}

impl Module {
    /// An empty module.
    pub fn new() -> Module {
        Module::default()
    }

    /// Adds a function (or a declaration to be filled later) and returns its id.
    pub fn add_function(&mut self, func: Function) -> FuncId {
        let name = func.name.clone();
        let id = self.funcs.push(func);
        self.names.insert(name, id);
        id
    }

    /// The function called `name`.
    pub fn func_by_name(&self, name: &str) -> Option<FuncId> {
        self.names.get(name).copied()
    }

    /// The function a runtime error at `span`, in an instruction of `f`, names: `f`,
    /// unless the instruction came from a function inlined into `f` (its source lies
    /// outside `f`'s), then the innermost function of the module whose source holds it.
    pub fn function_at<'a>(&'a self, f: &'a Function, span: Span) -> &'a str {
        let holds = |outer: Span| outer.start <= span.start && span.end <= outer.end;
        if span.end == 0 || holds(f.span) {
            return &f.name;
        }
        self.funcs
            .values()
            .filter(|g| g.span.end > 0 && holds(g.span))
            .min_by_key(|g| (g.span.end - g.span.start, g.name.contains('$')))
            .map_or(&f.name, |g| &g.name)
    }

    /// The hand-written rule of `func` of the given kind (`reverse`, `forward`), or a
    /// `zero` rule, which serves both.
    pub fn rule_of(&self, func: FuncId, word: &str) -> Option<&RuleKind> {
        self.rules
            .iter()
            .filter(|r| r.func == func)
            .map(|r| &r.kind)
            .find(|k| k.word() == word || matches!(k, RuleKind::Zero))
    }
}
