//! Scaled adjoints added into a shadow in one pass. The adjoint of `c * a` for an array
//! `a` is `c * ā`, which the rules compute as a fresh array (`map.fmul`) and then add
//! into `a`'s shadow (`array.add_into`): two passes over the elements and an array made
//! and dropped. When nothing else reads the product, `array.axpy` does both in one pass,
//! with the same two roundings per element (`d + c · a`), so the result is bit for bit
//! the same in both engines.

use mcir_ir::entity::EntityRef;
use mcir_ir::{FBinOp, Function, Op, TypeTable, Value};

/// `f` with every `array.add_into d, t` whose `t = map.fmul a, c` (an array and an `f64`
/// scalar, in either order) is read by nothing else and computed just before, in the
/// same block (nothing between them touches memory), turned into `array.axpy d, c, a`,
/// and the product removed (a product of an array and a scalar cannot fail).
pub(crate) fn fuse_scaled_accumulations(mut f: Function) -> Function {
    let mut uses = vec![0u32; f.values.len()];
    for b in f.blocks.values() {
        for &i in &b.insts {
            f.insts[i].args.iter().for_each(|a| uses[a.index()] += 1);
        }
        b.term.uses().iter().for_each(|a| uses[a.index()] += 1);
    }
    let mut fused = std::collections::HashSet::new();
    let blocks: Vec<_> = f.blocks.keys().collect();
    for &b in &blocks {
        for k in 0..f.blocks[b].insts.len() {
            let i = f.blocks[b].insts[k];
            let (Op::AddInto, [d, t]) = (&f.insts[i].op, f.insts[i].args.as_slice()) else { continue };
            let (d, t) = (*d, *t);
            if uses[t.index()] != 1 {
                continue;
            }
            // The product is computed right before (only scalar arithmetic between), so
            // that `a` holds the same elements when the sum reads it.
            let Some(at) = f.blocks[b].insts[..k].iter().rposition(|&j| f.insts[j].result == Some(t)) else {
                continue;
            };
            if !f.blocks[b].insts[at + 1..k].iter().all(|&j| f.insts[j].op.is_scalar_arith()) {
                continue;
            }
            let Some(product) = f.defining(t) else { continue };
            let (Op::MapFBinary(FBinOp::Mul), [p, q]) = (&product.op, product.args.as_slice()) else {
                continue;
            };
            let scalar = |v: Value| f.value_type(v) == TypeTable::F64;
            let (c, a) = match (scalar(*p), scalar(*q)) {
                (false, true) => (*q, *p),
                (true, false) => (*p, *q),
                _ => continue,
            };
            f.insts[i].op = Op::Axpy;
            f.insts[i].args = vec![d, c, a];
            fused.insert(t);
        }
    }
    for b in blocks {
        let insts = std::mem::take(&mut f.blocks[b].insts);
        f.blocks[b].insts =
            insts.into_iter().filter(|&i| !f.insts[i].result.is_some_and(|r| fused.contains(&r))).collect();
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ir: &str) -> String {
        let m = mcir_ir::parse_module(ir).expect("parses");
        let mut out = m.clone();
        let ids: Vec<_> = out.funcs.keys().collect();
        for id in ids {
            out.funcs[id] = fuse_scaled_accumulations(m.funcs[id].clone());
        }
        mcir_ir::verify_module(&out).expect("verifies");
        mcir_ir::print_module(&out)
    }

    #[test]
    fn a_product_read_once_is_added_in_one_pass() {
        let out = run("fn @f(%d_0: f64[], %a_1: f64[], %c_2: f64) {
bb0:
    %3: f64[] = map.fmul %a_1, %c_2
    array.add_into %d_0, %3
    %4: f64[] = map.fmul %c_2, %a_1
    array.add_into %d_0, %4
    ret
}
");
        assert_eq!(out.matches("array.axpy %d_0, %c_2, %a_1").count(), 2, "{out}");
    }

    #[test]
    fn a_product_computed_before_a_write_is_kept() {
        // `a` changes between the product and the sum: the sum must add the old elements.
        let out = run("fn @f(%d_0: f64[], %a_1: f64[], %c_2: f64, %i_3: i64) {
bb0:
    %4: f64[] = map.fmul %a_1, %c_2
    store.trusted %a_1[%i_3], %c_2
    array.add_into %d_0, %4
    ret
}
");
        assert!(!out.contains("axpy"), "{out}");
    }

    #[test]
    fn a_product_read_twice_or_of_two_arrays_is_kept() {
        let ir = "fn @f(%d_0: f64[], %e_1: f64[], %a_2: f64[], %c_3: f64) {
bb0:
    %4: f64[] = map.fmul %a_2, %c_3
    array.add_into %d_0, %4
    array.add_into %e_1, %4
    %5: f64[] = map.fmul %a_2, %a_2
    array.add_into %d_0, %5
    ret
}
";
        let out = run(ir);
        assert!(!out.contains("axpy"), "{out}");
    }
}
