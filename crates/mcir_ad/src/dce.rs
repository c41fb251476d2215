//! Dead-code elimination: instructions without effect whose results nobody reads.

use mcir_ir::entity::EntityRef;
use mcir_ir::Function;

/// A copy of `f` without the pure instructions whose results are unused (transitively).
pub(crate) fn remove_dead_code(f: &Function) -> Function {
    let mut f = f.clone();
    loop {
        let mut used = vec![false; f.values.len()];
        for (_, data) in f.blocks.iter() {
            for &inst in &data.insts {
                for &a in &f.insts[inst].args {
                    used[a.index()] = true;
                }
            }
            for v in data.term.uses() {
                used[v.index()] = true;
            }
        }
        let mut removed = false;
        let blocks: Vec<mcir_ir::Block> = f.blocks.keys().collect();
        for b in blocks {
            let keep: Vec<mcir_ir::Inst> = f.blocks[b]
                .insts
                .iter()
                .copied()
                .filter(|&i| {
                    let d = &f.insts[i];
                    d.op.has_effect() || d.result.is_some_and(|r| used[r.index()])
                })
                .collect();
            if keep.len() != f.blocks[b].insts.len() {
                removed = true;
                f.blocks[b].insts = keep;
            }
        }
        if !removed {
            return f;
        }
    }
}
