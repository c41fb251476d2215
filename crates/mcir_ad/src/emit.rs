//! Appending instructions to a function under construction, with the arithmetic the
//! derivative rules are written in: one helper serves scalars and arrays alike.

use mcir_ir::{Block, FBinOp, FUnOp, Function, Op, Span, Type, TypeId, TypeTable, Value};

/// A function being built and the block instructions go to.
pub(crate) struct Emit {
    pub func: Function,
    pub block: Block,
    pub span: Span,
}

impl Emit {
    pub fn new(func: Function) -> Emit {
        let block = func.entry();
        Emit { func, block, span: Span::default() }
    }

    pub fn ty(&self, v: Value) -> TypeId {
        self.func.value_type(v)
    }

    /// An instruction with a result of type `ty`.
    pub fn val(&mut self, op: Op, args: Vec<Value>, ty: TypeId) -> Value {
        match self.func.push_inst(self.block, op, args, Some(ty), self.span) {
            Some(v) => v,
            None => unreachable_value(),
        }
    }

    /// An instruction without a result.
    pub fn eff(&mut self, op: Op, args: Vec<Value>) {
        self.func.push_inst(self.block, op, args, None, self.span);
    }

    pub fn name(&mut self, v: Value, name: Option<String>) -> Value {
        self.func.values[v].name = name;
        v
    }

    pub fn fconst(&mut self, x: f64) -> Value {
        self.val(Op::FConst(x), vec![], TypeTable::F64)
    }

    pub fn iconst(&mut self, x: i64) -> Value {
        self.val(Op::IConst(x), vec![], TypeTable::I64)
    }

    pub fn unit(&mut self) -> Value {
        self.val(Op::TupleNew, vec![], TypeTable::UNIT)
    }

    pub fn tuple(&mut self, types: &mut TypeTable, items: Vec<Value>) -> Value {
        let ty = types.intern(Type::Tuple(items.iter().map(|&v| self.ty(v)).collect()));
        self.val(Op::TupleNew, items, ty)
    }

    pub fn tuple_get(&mut self, types: &TypeTable, t: Value, i: u32) -> Value {
        let ty = match types.get(self.ty(t)) {
            Type::Tuple(items) => items.get(i as usize).copied().unwrap_or(TypeTable::UNIT),
            _ => TypeTable::UNIT,
        };
        self.val(Op::TupleGet(i), vec![t], ty)
    }

    /// `a op b` on scalars, or elementwise when either is an array.
    pub fn bin(&mut self, op: FBinOp, a: Value, b: Value) -> Value {
        let (ta, tb) = (self.ty(a), self.ty(b));
        if ta == TypeTable::F64 && tb == TypeTable::F64 {
            self.val(Op::FBinary(op), vec![a, b], TypeTable::F64)
        } else {
            let ty = if ta == TypeTable::F64 { tb } else { ta };
            self.val(Op::MapFBinary(op), vec![a, b], ty)
        }
    }

    /// `op(a)` on a scalar, or elementwise on an array.
    pub fn un(&mut self, op: FUnOp, a: Value) -> Value {
        let ta = self.ty(a);
        if ta == TypeTable::F64 {
            self.val(Op::FUnary(op), vec![a], ta)
        } else {
            self.val(Op::MapFUnary(op), vec![a], ta)
        }
    }

    /// `a ** n` for an `i64` exponent, on a scalar or elementwise.
    pub fn powi(&mut self, a: Value, n: Value) -> Value {
        let ta = self.ty(a);
        let op = if ta == TypeTable::F64 { Op::FPowI } else { Op::MapFPowI };
        self.val(op, vec![a, n], ta)
    }

    pub fn add(&mut self, a: Value, b: Value) -> Value {
        self.bin(FBinOp::Add, a, b)
    }

    pub fn sub(&mut self, a: Value, b: Value) -> Value {
        self.bin(FBinOp::Sub, a, b)
    }

    pub fn mul(&mut self, a: Value, b: Value) -> Value {
        self.bin(FBinOp::Mul, a, b)
    }

    pub fn div(&mut self, a: Value, b: Value) -> Value {
        self.bin(FBinOp::Div, a, b)
    }

    pub fn neg(&mut self, a: Value) -> Value {
        self.un(FUnOp::Neg, a)
    }

    /// The sum of an array's elements, or a scalar itself.
    pub fn total(&mut self, a: Value) -> Value {
        if self.ty(a) == TypeTable::F64 {
            a
        } else {
            self.val(Op::Sum, vec![a], TypeTable::F64)
        }
    }
}

/// `push_inst` returns a value whenever a result type is given; this is never reached.
#[cold]
fn unreachable_value() -> Value {
    <Value as mcir_ir::entity::EntityRef>::new(u32::MAX as usize)
}
