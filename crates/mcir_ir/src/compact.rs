//! Rebuilding a function with a new block order, dropping blocks left out and every
//! instruction and value that only they held, and renumbering all entities densely.

use crate::entity::{EntityRef, SecondaryMap};
use crate::function::*;

impl Function {
    /// A copy of the function with exactly the blocks of `order`, in that order (the first
    /// must be the entry). Values defined in dropped blocks must not be used by kept ones.
    pub fn rebuild(&self, order: &[Block]) -> Function {
        self.clone().into_rebuilt(order)
    }

    /// [`Function::rebuild`], reusing this function's names and argument lists.
    pub fn into_rebuilt(mut self, order: &[Block]) -> Function {
        let mut out = Function {
            name: std::mem::take(&mut self.name),
            params: self.params.clone(),
            ret: self.ret,
            blocks: crate::entity::Arena::with_capacity(order.len()),
            insts: crate::entity::Arena::with_capacity(
                order.iter().map(|&b| self.blocks[b].insts.len()).sum(),
            ),
            values: crate::entity::Arena::with_capacity(self.values.len()),
            span: self.span,
        };
        let mut block_map: SecondaryMap<Block, Option<Block>> =
            SecondaryMap::with_default_for(None, self.blocks.len());
        for &b in order {
            let nb = out.add_block();
            block_map.set(b, Some(nb));
        }
        // Values first, so that forward uses (loop back edges) can be remapped.
        let mut value_map: SecondaryMap<Value, Option<Value>> =
            SecondaryMap::with_default_for(None, self.values.len());
        for &b in order {
            let nb = block_map[b].unwrap_or(Block::new(0));
            for &p in &self.blocks[b].params {
                let d = &mut self.values[p];
                let nv = out.add_block_param(nb, d.ty, d.name.take());
                value_map.set(p, Some(nv));
            }
            for &i in &self.blocks[b].insts {
                if let Some(r) = self.insts[i].result {
                    let d = &mut self.values[r];
                    // The definition is fixed below, once the instruction exists.
                    let nv = out.values.push(ValueData {
                        ty: d.ty,
                        def: ValueDef::Param(nb, u32::MAX),
                        name: d.name.take(),
                    });
                    value_map.set(r, Some(nv));
                }
            }
        }
        // A use of a value that was not kept maps to itself; the verifier reports it.
        let mv = |v: Value| value_map[v].unwrap_or(v);
        let mb = |b: Block| block_map[b].unwrap_or(b);
        for &b in order {
            let nb = mb(b);
            let data = &self.blocks[b];
            out.blocks[nb].insts.reserve_exact(data.insts.len());
            for &i in &data.insts {
                let d = &mut self.insts[i];
                let result = d.result.map(mv);
                let mut args = std::mem::take(&mut d.args);
                args.iter_mut().for_each(|v| *v = mv(*v));
                let ni = out.insts.push(InstData {
                    op: d.op.clone(),
                    args,
                    result,
                    span: d.span,
                    in_tape: d.in_tape,
                });
                if let Some(r) = result {
                    out.values[r].def = ValueDef::Inst(ni);
                }
                out.blocks[nb].insts.push(ni);
            }
            let term = data.term.mapped(mv, mb);
            out.set_terminator(nb, term, data.term_span);
        }
        out
    }

    /// The blocks reachable from the entry, in reverse post-order (so a block's
    /// dominators come before it, and loop bodies before loop exits).
    pub fn reachable_blocks(&self) -> Vec<Block> {
        crate::cfg::reverse_post_order(self)
    }

    /// Drops the blocks no path from the entry reaches, with their instructions and values.
    pub fn remove_unreachable_blocks(&self) -> Function {
        self.rebuild(&self.reachable_blocks())
    }
}
