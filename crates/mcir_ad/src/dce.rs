//! Dead-code elimination: instructions without effect whose results nobody reads.

use mcir_ir::entity::EntityRef;
use mcir_ir::{Function, ValueDef};

/// `f` without the pure instructions whose results are unused (transitively).
/// Linear: each value counts its uses, and removing an instruction takes one use from
/// each of its operands, so that a chain of dead instructions goes in one sweep.
pub(crate) fn remove_dead_code(mut f: Function) -> Function {
    let mut uses = vec![0u32; f.values.len()];
    let mut placed = vec![false; f.insts.len()];
    for (_, data) in f.blocks.iter() {
        for &inst in &data.insts {
            placed[inst.index()] = true;
            for &a in &f.insts[inst].args {
                uses[a.index()] += 1;
            }
        }
        for v in data.term.uses() {
            uses[v.index()] += 1;
        }
    }
    let unused = |f: &Function, uses: &[u32], inst: mcir_ir::Inst| {
        let d = &f.insts[inst];
        !d.op.has_effect() && d.result.is_none_or(|r| uses[r.index()] == 0)
    };
    let mut dead = vec![false; f.insts.len()];
    let mut work: Vec<mcir_ir::Inst> = Vec::new();
    for (_, data) in f.blocks.iter() {
        for &inst in &data.insts {
            if unused(&f, &uses, inst) {
                dead[inst.index()] = true;
                work.push(inst);
            }
        }
    }
    if work.is_empty() {
        return f;
    }
    while let Some(inst) = work.pop() {
        for k in 0..f.insts[inst].args.len() {
            let a = f.insts[inst].args[k];
            uses[a.index()] -= 1;
            if uses[a.index()] > 0 {
                continue;
            }
            if let ValueDef::Inst(def) = f.values[a].def {
                if placed[def.index()] && !dead[def.index()] && unused(&f, &uses, def) {
                    dead[def.index()] = true;
                    work.push(def);
                }
            }
        }
    }
    let blocks: Vec<mcir_ir::Block> = f.blocks.keys().collect();
    for b in blocks {
        f.blocks[b].insts.retain(|&i| !dead[i.index()]);
    }
    f
}
