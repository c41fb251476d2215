//! The textual form of the IR. The printer numbers blocks and values afresh in layout
//! order, so equal functions print equally whatever their arena order, and the text
//! re-parses (see [`crate::parse`]) to IR that prints the same again.
//!
//! ```text
//! fn @sumsq(%x_0: f64[]) -> f64 {
//! bb0:
//!     %1: f64 = fconst 0.0
//!     ...
//!     br %5, bb2, bb3(%s_3)
//! }
//! ```

use crate::entity::{EntityRef, SecondaryMap};
use crate::function::*;
use crate::op::Op;
use crate::types::TypeTable;
use std::fmt::Write;

/// Prints a whole module: struct declarations, then every function.
pub fn print_module(module: &Module) -> String {
    let mut out = String::new();
    for (id, _) in module.types.structs() {
        out.push_str(&print_struct(&module.types, id));
    }
    for r in &module.rules {
        out.push_str(&print_rule(module, r));
    }
    for (i, (_, func)) in module.funcs.iter().enumerate() {
        if i > 0 || module.types.structs().next().is_some() || !module.rules.is_empty() {
            out.push('\n');
        }
        out.push_str(&print_function(module, func));
    }
    out
}

/// Prints the declaration of a struct, as [`print_module`] does: one line.
pub fn print_struct(types: &TypeTable, id: crate::types::StructId) -> String {
    let def = types.struct_def(id);
    let mut out = String::new();
    if def.mutable {
        out.push_str("mut ");
    }
    let _ = write!(out, "struct {} {{", def.name);
    for (i, (name, ty)) in def.fields.iter().enumerate() {
        let sep = if i == 0 { " " } else { ", " };
        let _ = write!(out, "{sep}{name}: {}", types.display(*ty));
    }
    out.push_str(if def.fields.is_empty() { "}\n" } else { " }\n" });
    out
}

/// Prints a hand-written rule's declaration, as [`print_module`] does: one line.
pub fn print_rule(module: &Module, r: &CustomRule) -> String {
    let name = |f: FuncId| module.funcs.get(f).map(|f| f.name.as_str()).unwrap_or("?");
    match &r.kind {
        RuleKind::Reverse { rule, pullback: closure } | RuleKind::Forward { rule, pushforward: closure } => {
            format!("rule {} @{} = @{}, @{}\n", r.kind.word(), name(r.func), name(*rule), name(*closure))
        }
        RuleKind::Zero => format!("rule zero @{}\n", name(r.func)),
        RuleKind::Checkpoint { inner } => format!("rule checkpoint @{} = @{}\n", name(r.func), name(*inner)),
    }
}

/// Prints one function of `module`.
pub fn print_function(module: &Module, func: &Function) -> String {
    Printer::new(module, func).print()
}

/// A value as printed, given the printer's numbering: `%7` or `%name_7`.
struct Printer<'a> {
    module: &'a Module,
    types: &'a TypeTable,
    func: &'a Function,
    value_numbers: SecondaryMap<Value, u32>,
    block_numbers: SecondaryMap<Block, u32>,
    out: String,
}

impl<'a> Printer<'a> {
    fn new(module: &'a Module, func: &'a Function) -> Self {
        let mut value_numbers = SecondaryMap::with_default(u32::MAX);
        let mut block_numbers = SecondaryMap::with_default(u32::MAX);
        let mut next = 0u32;
        for (bi, (block, data)) in func.blocks.iter().enumerate() {
            block_numbers.set(block, bi as u32);
            for &p in &data.params {
                value_numbers.set(p, next);
                next += 1;
            }
            for &inst in &data.insts {
                if let Some(r) = func.insts.get(inst).and_then(|i| i.result) {
                    value_numbers.set(r, next);
                    next += 1;
                }
            }
        }
        Printer { module, types: &module.types, func, value_numbers, block_numbers, out: String::new() }
    }

    fn value(&self, v: Value) -> String {
        let n = self.value_numbers[v];
        let num = if n == u32::MAX { format!("?{}", v.index()) } else { n.to_string() };
        match self.func.values.get(v).and_then(|d| d.name.as_deref()) {
            Some(name) => format!("%{name}_{num}"),
            None => format!("%{num}"),
        }
    }

    fn typed_value(&self, v: Value) -> String {
        let ty = self.func.values.get(v).map(|d| d.ty);
        match ty {
            Some(ty) => format!("{}: {}", self.value(v), self.types.display(ty)),
            None => format!("{}: <invalid>", self.value(v)),
        }
    }

    fn block(&self, b: Block) -> String {
        format!("bb{}", self.block_numbers[b])
    }

    fn values(&self, vs: &[Value]) -> String {
        vs.iter().map(|&v| self.value(v)).collect::<Vec<_>>().join(", ")
    }

    fn block_call(&self, call: &BlockCall) -> String {
        if call.args.is_empty() {
            self.block(call.block)
        } else {
            format!("{}({})", self.block(call.block), self.values(&call.args))
        }
    }

    fn print(mut self) -> String {
        let f = self.func;
        let params: Vec<String> = f.param_values().iter().map(|&v| self.typed_value(v)).collect();
        let _ = write!(self.out, "fn @{}({})", f.name, params.join(", "));
        if let Some(ret) = f.ret {
            let _ = write!(self.out, " -> {}", self.types.display(ret));
        }
        self.out.push_str(" {\n");
        for (bi, (block, data)) in f.blocks.iter().enumerate() {
            if bi == 0 {
                let _ = writeln!(self.out, "{}:", self.block(block));
            } else {
                let ps: Vec<String> = data.params.iter().map(|&v| self.typed_value(v)).collect();
                if ps.is_empty() {
                    let _ = writeln!(self.out, "{}:", self.block(block));
                } else {
                    let _ = writeln!(self.out, "{}({}):", self.block(block), ps.join(", "));
                }
            }
            for &inst in &data.insts {
                let line = self.inst(inst);
                let _ = writeln!(self.out, "    {line}");
            }
            let term = self.terminator(&data.term);
            let _ = writeln!(self.out, "    {term}");
        }
        self.out.push_str("}\n");
        self.out
    }

    fn inst(&self, inst: Inst) -> String {
        let Some(data) = self.func.insts.get(inst) else {
            return format!("<invalid {inst:?}>");
        };
        let lhs = match data.result {
            Some(r) => format!("{} = ", self.typed_value(r)),
            None => String::new(),
        };
        let lhs = if data.in_tape { lhs + "tape " } else { lhs };
        let args = &data.args;
        let rhs = match &data.op {
            Op::Load | Op::TrustedLoad => match args.split_first() {
                Some((a, idx)) => {
                    format!("{} {}[{}]", op_head(self.types, &data.op), self.value(*a), self.values(idx))
                }
                None => "load".to_string(),
            },
            Op::Store | Op::TrustedStore => match (args.first(), args.last()) {
                (Some(a), Some(v)) if args.len() >= 2 => format!(
                    "{} {}[{}], {}",
                    op_head(self.types, &data.op),
                    self.value(*a),
                    self.values(&args[1..args.len() - 1]),
                    self.value(*v)
                ),
                _ => format!("store {}", self.values(args)),
            },
            Op::Call(callee) => {
                let name = self.module.funcs.get(*callee).map(|c| c.name.as_str()).unwrap_or("?");
                format!("call @{name}({})", self.values(args))
            }
            op => {
                let head = op_head(self.types, op);
                if args.is_empty() {
                    head
                } else {
                    format!("{head} {}", self.values(args))
                }
            }
        };
        format!("{lhs}{rhs}")
    }

    fn terminator(&self, term: &Terminator) -> String {
        match term {
            Terminator::Jump(t) => format!("jump {}", self.block_call(t)),
            Terminator::Branch { cond, then_dest, else_dest } => format!(
                "br {}, {}, {}",
                self.value(*cond),
                self.block_call(then_dest),
                self.block_call(else_dest)
            ),
            Terminator::Return(None) => "ret".to_string(),
            Terminator::Return(Some(v)) => format!("ret {}", self.value(*v)),
        }
    }
}

/// The mnemonic of an op alone (`sin`, `map.fmul`, `array.sum`, `struct.get`).
pub fn op_name(types: &TypeTable, op: &Op) -> String {
    let head = op_head(types, op);
    head.split_whitespace().next().unwrap_or("").to_string()
}

/// The mnemonic of an op with its immediates (everything before the operands).
/// `load`, `store` and `call` have their own syntax and are printed by the caller.
pub(crate) fn op_head(types: &TypeTable, op: &Op) -> String {
    let field = |s: crate::StructId, i: u32| {
        let def = types.struct_def(s);
        let fname = def.fields.get(i as usize).map(|f| f.0.as_str()).unwrap_or("?");
        format!("{}.{}", def.name, fname)
    };
    match op {
        Op::FConst(c) => format!("fconst {c:?}"),
        Op::IConst(c) => format!("iconst {c}"),
        Op::BConst(c) => format!("bconst {c}"),
        Op::FBinary(b) => b.name().to_string(),
        Op::FUnary(u) => u.name().to_string(),
        Op::FPowI => "fpowi".to_string(),
        Op::IBinary(b) => b.name().to_string(),
        Op::IUnary(u) => u.name().to_string(),
        Op::FCmp(c) => format!("fcmp {}", c.name()),
        Op::ICmp(c) => format!("icmp {}", c.name()),
        Op::BCmp(c) => format!("bcmp {}", c.name()),
        Op::Not => "not".to_string(),
        Op::IToF => "itof".to_string(),
        Op::FToI => "ftoi".to_string(),
        Op::ArrayFill => "array.fill".to_string(),
        Op::ArrayLit(dims) => {
            let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            format!("array.lit [{}]", d.join(", "))
        }
        Op::ArrayDim(d) => format!("array.dim {d}"),
        Op::ExpectDim(d) => format!("array.expect_dim {d}"),
        Op::Load => "load".to_string(),
        Op::Store => "store".to_string(),
        Op::TrustedLoad => "load.trusted".to_string(),
        Op::TrustedStore => "store.trusted".to_string(),
        Op::ArrayCopy => "array.copy".to_string(),
        Op::CopyInto => "array.copy_into".to_string(),
        Op::SharesMemory => "array.shares".to_string(),
        Op::Sum => "array.sum".to_string(),
        Op::Dot => "array.dot".to_string(),
        Op::MatMul(t) => format!("array.matmul{}", t.suffix()),
        Op::MatVec(t) => format!("array.matvec{}", if *t { ".t" } else { "" }),
        Op::MatMulAcc(t) => format!("array.matmul_acc{}", t.suffix()),
        Op::MatVecAcc(t) => format!("array.matvec_acc{}", if *t { ".t" } else { "" }),
        Op::OuterAcc => "array.outer_acc".to_string(),
        Op::Transpose => "array.transpose".to_string(),
        Op::MapFBinary(b) => format!("map.{}", b.name()),
        Op::MapIBinary(b) => format!("map.{}", b.name()),
        Op::MapFUnary(u) => format!("map.{}", u.name()),
        Op::MapFPowI => "map.fpowi".to_string(),
        Op::RefNew => "ref.new".to_string(),
        Op::RefLoad => "ref.load".to_string(),
        Op::RefStore => "ref.store".to_string(),
        Op::TupleNew => "tuple.new".to_string(),
        Op::TupleGet(i) => format!("tuple.get {i}"),
        Op::StructNew(s) => format!("struct.new {}", types.struct_def(*s).name),
        Op::StructGet(s, i) => format!("struct.get {}", field(*s, *i)),
        Op::MutLoad(s, i) => format!("mut.load {}", field(*s, *i)),
        Op::MutStore(s, i) => format!("mut.store {}", field(*s, *i)),
        Op::Call(_) => "call".to_string(),
        Op::Print => "print".to_string(),
        Op::Select => "select".to_string(),
        Op::Linearized => "linearized".to_string(),
        Op::ZerosLike => "array.zeros_like".to_string(),
        Op::AddInto => "array.add_into".to_string(),
        Op::Axpy => "array.axpy".to_string(),
        Op::MoveAdd => "array.move_add".to_string(),
        Op::StackNew => "stack.new".to_string(),
        Op::Unset => "unset".to_string(),
        Op::StackPush => "stack.push".to_string(),
        Op::StackPop => "stack.pop".to_string(),
        Op::StackPeek => "stack.peek".to_string(),
        Op::StackReserve => "stack.reserve".to_string(),
        Op::StackPut => "stack.put".to_string(),
        Op::ArenaMark => "arena.mark".to_string(),
        Op::TapeMark => "tape.mark".to_string(),
        Op::TapeRelease => "tape.release".to_string(),
        Op::ArenaRelease => "arena.release".to_string(),
    }
}
