//! Appending blocks, parameters and instructions to a [`Function`].

use crate::function::*;
use crate::op::Op;
use crate::types::TypeId;

impl Function {
    /// A function with the given signature and an entry block holding one parameter per
    /// parameter type (named by `param_names` where given).
    pub fn new(name: &str, params: &[(Option<String>, TypeId)], ret: Option<TypeId>) -> Function {
        let mut f = Function {
            name: name.to_string(),
            params: params.iter().map(|p| p.1).collect(),
            ret,
            blocks: Default::default(),
            insts: Default::default(),
            values: Default::default(),
            span: Span::default(),
        };
        let entry = f.add_block();
        for (pname, ty) in params {
            f.add_block_param(entry, *ty, pname.clone());
        }
        f
    }

    /// Appends an empty block that returns nothing (its terminator is set later).
    pub fn add_block(&mut self) -> Block {
        self.blocks.push(BlockData {
            params: Vec::new(),
            insts: Vec::new(),
            term: Terminator::Return(None),
            term_span: Span::default(),
        })
    }

    /// Appends a parameter to a block.
    pub fn add_block_param(&mut self, block: Block, ty: TypeId, name: Option<String>) -> Value {
        let n = self.blocks[block].params.len() as u32;
        let v = self.values.push(ValueData { ty, def: ValueDef::Param(block, n), name });
        self.blocks[block].params.push(v);
        v
    }

    /// Appends an instruction to `block`; `result` is the result type, if the op has one.
    pub fn push_inst(
        &mut self,
        block: Block,
        op: Op,
        args: Vec<Value>,
        result: Option<TypeId>,
        span: Span,
    ) -> Option<Value> {
        let inst = self.insts.push(InstData { op, args, result: None, span, in_tape: false });
        let value =
            result.map(|ty| self.values.push(ValueData { ty, def: ValueDef::Inst(inst), name: None }));
        self.insts[inst].result = value;
        self.blocks[block].insts.push(inst);
        value
    }

    /// Appends an instruction with a result of type `ty` to `block`; returns the result.
    pub fn push_value(&mut self, block: Block, op: Op, args: Vec<Value>, ty: TypeId, span: Span) -> Value {
        let inst = self.insts.push(InstData { op, args, result: None, span, in_tape: false });
        let value = self.values.push(ValueData { ty, def: ValueDef::Inst(inst), name: None });
        self.insts[inst].result = Some(value);
        self.blocks[block].insts.push(inst);
        value
    }

    /// Sets how `block` ends.
    pub fn set_terminator(&mut self, block: Block, term: Terminator, span: Span) {
        let b = &mut self.blocks[block];
        b.term = term;
        b.term_span = span;
    }
}
