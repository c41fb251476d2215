//! Small arrays returned as values: a function that returns a fresh array of a few
//! elements, with extents fixed in its body, gets a variant that returns the elements as
//! a tuple, and every call whose result is only read at constant indices calls the
//! variant instead.
//!
//! A helper that builds a 2 × 2 or 3 × 3 matrix and returns it, called from several
//! places (so not inlined) or recursively (a product of matrices over halves of a
//! range), allocated the matrix on every call, and its caller read it back from memory;
//! a reverse pass kept each call's matrix, and its shadow, to the end of the sweep. As a
//! tuple, the result is a few registers: the variant's own array never escapes, so
//! `scalarise` makes its elements values, and the caller reads `tuple.get`.
//!
//! A function qualifies when it returns an array of `f64` and every `ret` returns
//! either an array it made (`array.fill` with constant extents, at most
//! [`scalarise::MAX_ELEMENTS`] elements, the same extents at every `ret`) or the result
//! of a call of itself, with at least one of the former; an array it made may be read
//! and written at any index but not passed, stored or jumped with. A call qualifies when
//! its result is only loaded at constant indices within those extents, or asked its
//! extents. The function itself stays as it was, for the calls that do not qualify and
//! for callers outside the module (`--fn`); functions with hand-written rules are left
//! alone, as their calls must reach the rule.

use crate::function::*;
use crate::op::Op;
use crate::scalarise;
use crate::types::{Scalar, Type, TypeId, TypeTable};
use std::collections::{HashMap, HashSet};

/// `module` with a variant returning values for each function that qualifies and has
/// calls that qualify, and those calls made to it (see the module docs).
pub fn return_small_arrays_as_values(mut module: Module) -> Module {
    let ids: Vec<FuncId> = module.funcs.keys().collect();
    for g in ids {
        if has_rule(&module, g) {
            continue;
        }
        let Some(dims) = returned_extents(&module.funcs[g], &module.types, g) else { continue };
        let sites: Vec<(FuncId, Readers, Vec<Inst>)> = module
            .funcs
            .iter()
            .filter(|(_, f)| f.insts.values().any(|d| d.op == Op::Call(g)))
            .filter_map(|(fid, f)| {
                let readers = Readers::of(f);
                let calls = calls_reading_elements(f, &readers, g, &dims);
                (!calls.is_empty()).then_some((fid, readers, calls))
            })
            .collect();
        if sites.is_empty() {
            continue;
        }
        let count = dims.iter().product::<i64>() as usize;
        let tuple = module.types.intern(Type::Tuple(vec![TypeTable::F64; count]));
        let mut variant = module.funcs[g].clone();
        variant.name = format!("{}$values", variant.name);
        variant.ret = Some(tuple);
        let v = module.add_function(variant);
        // The variant's own calls of the function that qualify call the variant too,
        // and so do those whose result it returns.
        return_elements(&mut module.funcs[v], g, v, &dims, tuple);
        for (fid, readers, calls) in sites {
            redirect_all(&mut module.funcs[fid], &readers, &calls, v, &dims, tuple);
        }
    }
    module
}

/// Whether a hand-written rule names `g` (as the function ruled, or as a part of one).
fn has_rule(module: &Module, g: FuncId) -> bool {
    module.rules.iter().any(|r| {
        r.func == g
            || match r.kind {
                RuleKind::Reverse { rule, pullback } => rule == g || pullback == g,
                RuleKind::Forward { rule, pushforward } => rule == g || pushforward == g,
                RuleKind::Checkpoint { inner } => inner == g,
                RuleKind::Zero => false,
            }
    })
}

/// The extents of the arrays `f` (function `g` of the module) returns, when it
/// qualifies (see the module docs).
fn returned_extents(f: &Function, types: &TypeTable, g: FuncId) -> Option<Vec<i64>> {
    let Some(Type::Array { elem: Scalar::F64, .. }) = f.ret.and_then(|r| types.try_get(r)) else {
        return None;
    };
    let mut dims: Option<Vec<i64>> = None;
    for data in f.blocks.values() {
        let Terminator::Return(Some(v)) = data.term else { continue };
        let ValueDef::Inst(def) = f.values[v].def else { return None };
        match f.insts[def].op {
            Op::Call(callee) if callee == g => {}
            Op::ArrayFill => {
                let extents = scalarise::fresh_extents(f, types, def)?;
                if dims.as_ref().is_some_and(|e| *e != extents) || !stays_here(f, v) {
                    return None;
                }
                dims = Some(extents);
            }
            _ => return None,
        }
    }
    dims
}

/// Whether array `v` is only read and written as an array (`load`, `store` into it,
/// `array.dim`) and returned: nothing else can hold it.
fn stays_here(f: &Function, v: Value) -> bool {
    for data in f.blocks.values() {
        for &i in &data.insts {
            let d = &f.insts[i];
            let Some(k) = d.args.iter().position(|&a| a == v) else { continue };
            let as_array = k == 0 && !d.args[1..].contains(&v);
            let fine = match d.op {
                Op::Load | Op::TrustedLoad | Op::ArrayDim(_) => as_array,
                Op::Store | Op::TrustedStore => as_array,
                _ => false,
            };
            if !fine {
                return false;
            }
        }
        match &data.term {
            Terminator::Return(_) => {}
            t => {
                if t.uses().contains(&v) {
                    return false;
                }
            }
        }
    }
    true
}

/// Where the values of a function are read, found once: by which instructions, and
/// whether by a `ret` or by another terminator.
struct Readers {
    insts: HashMap<Value, Vec<Inst>>,
    returned: HashSet<Value>,
    otherwise: HashSet<Value>,
}

impl Readers {
    fn of(f: &Function) -> Readers {
        let mut readers =
            Readers { insts: HashMap::new(), returned: HashSet::new(), otherwise: HashSet::new() };
        for data in f.blocks.values() {
            for &i in &data.insts {
                for &a in &f.insts[i].args {
                    let users = readers.insts.entry(a).or_default();
                    if users.last() != Some(&i) {
                        users.push(i);
                    }
                }
            }
            let by_term = if matches!(data.term, Terminator::Return(_)) {
                &mut readers.returned
            } else {
                &mut readers.otherwise
            };
            by_term.extend(data.term.uses());
        }
        readers
    }

    fn of_value(&self, v: Value) -> &[Inst] {
        self.insts.get(&v).map_or(&[], |u| u.as_slice())
    }
}

/// The calls of `g` in `f` whose results are only loaded at constant indices within
/// `dims` or asked their extents.
fn calls_reading_elements(f: &Function, readers: &Readers, g: FuncId, dims: &[i64]) -> Vec<Inst> {
    let mut calls = Vec::new();
    for data in f.blocks.values() {
        for &i in &data.insts {
            let d = &f.insts[i];
            if d.op != Op::Call(g) {
                continue;
            }
            let Some(r) = d.result else { continue };
            if read_at_constant_indices(f, readers, r, dims, false) {
                calls.push(i);
            }
        }
    }
    calls
}

/// Whether every use of array `r` is a load at constant indices within `dims` or an
/// extent (or, with `returned`, a `ret`).
fn read_at_constant_indices(f: &Function, readers: &Readers, r: Value, dims: &[i64], returned: bool) -> bool {
    if readers.otherwise.contains(&r) || (!returned && readers.returned.contains(&r)) {
        return false;
    }
    readers.of_value(r).iter().all(|&i| {
        let d = &f.insts[i];
        match d.op {
            Op::Load | Op::TrustedLoad => {
                d.args[0] == r
                    && !d.args[1..].contains(&r)
                    && scalarise::flat_index(f, dims, &d.args[1..]).is_some()
            }
            Op::ArrayDim(_) => d.args[0] == r,
            _ => false,
        }
    })
}

/// Makes call `call` of `f` a call of `variant`, its result the tuple of elements:
/// its loads (among `users`, the instructions that read it) read the tuple and its
/// extents are constants.
fn redirect(f: &mut Function, call: Inst, users: &[Inst], variant: FuncId, dims: &[i64], tuple: TypeId) {
    f.insts[call].op = Op::Call(variant);
    let Some(r) = f.insts[call].result else { return };
    f.values[r].ty = tuple;
    for &i in users {
        match f.insts[i].op {
            Op::Load | Op::TrustedLoad => {
                if let Some(k) = scalarise::flat_index(f, dims, &f.insts[i].args[1..]) {
                    f.insts[i].op = Op::TupleGet(k as u32);
                    f.insts[i].args = vec![r];
                }
            }
            Op::ArrayDim(axis) => {
                f.insts[i].op = Op::IConst(dims.get(usize::from(axis)).copied().unwrap_or(0));
                f.insts[i].args = Vec::new();
            }
            _ => {}
        }
    }
}

/// Redirects each call of `calls` in `f` (see [`redirect`]).
fn redirect_all(
    f: &mut Function,
    readers: &Readers,
    calls: &[Inst],
    variant: FuncId,
    dims: &[i64],
    tuple: TypeId,
) {
    for &call in calls {
        let users = f.insts[call].result.map(|r| readers.of_value(r).to_vec()).unwrap_or_default();
        redirect(f, call, &users, variant, dims, tuple);
    }
}

/// Makes `f` (the variant `v` of `g`) return the elements of its arrays: its calls of
/// `g` in `own` call `v`, and each `ret` of an array returns its elements read in
/// row-major order (the array made here, or the result of a call of `g`, whose
/// extents are the same), or the tuple a call of `v` gave.
fn return_elements(f: &mut Function, g: FuncId, v: FuncId, dims: &[i64], tuple: TypeId) {
    // Calls whose result is read at constant indices, and returned or not: a `ret` of
    // one takes the tuple.
    let readers = Readers::of(f);
    let mut redirected = Vec::new();
    for data in f.blocks.values() {
        for &i in &data.insts {
            let d = &f.insts[i];
            let Some(r) = d.result else { continue };
            if d.op == Op::Call(g) && read_at_constant_indices(f, &readers, r, dims, true) {
                redirected.push(i);
            }
        }
    }
    redirect_all(f, &readers, &redirected, v, dims, tuple);
    let blocks: Vec<Block> = f.blocks.keys().collect();
    for b in blocks {
        let Terminator::Return(Some(x)) = f.blocks[b].term else { continue };
        if f.value_type(x) == tuple {
            continue;
        }
        let span = f.blocks[b].term_span;
        let count = dims.iter().product::<i64>();
        let mut elements = Vec::with_capacity(count as usize);
        for at in 0..count {
            let mut rest = at;
            let mut indices = vec![0i64; dims.len()];
            for (k, &n) in dims.iter().enumerate().rev() {
                indices[k] = rest % n;
                rest /= n;
            }
            let mut args = vec![x];
            for ix in indices {
                args.push(f.push_value(b, Op::IConst(ix), vec![], TypeTable::I64, span));
            }
            // The array has these extents (made here with them, or returned by `g`,
            // whose every array has them): the indices are in bounds.
            elements.push(f.push_value(b, Op::TrustedLoad, args, TypeTable::F64, span));
        }
        let t = f.push_value(b, Op::TupleNew, elements, tuple, span);
        f.set_terminator(b, Terminator::Return(Some(t)), span);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ir: &str) -> String {
        let m = crate::parse_module(ir).expect("parses");
        let out = return_small_arrays_as_values(m);
        crate::verify_module(&out).expect("verifies");
        crate::print::print_module(&out)
    }

    /// The printed function `name` of a printed module.
    fn function<'a>(module: &'a str, name: &str) -> &'a str {
        let from = module.find(&format!("fn @{name}(")).expect("the function");
        let rest = &module[from..];
        &rest[..rest.find("\n}\n").map_or(rest.len(), |e| e + 3)]
    }

    const PAIR: &str = "fn @pair(%x_0: f64) -> f64[] {
bb0:
    %1: f64 = fconst 0.0
    %2: i64 = iconst 2
    %3: f64[] = array.fill %1, %2
    %4: i64 = iconst 0
    store.trusted %3[%4], %x_0
    %5: i64 = iconst 1
    %6: f64 = fmul %x_0, %x_0
    store.trusted %3[%5], %6
    ret %3
}

fn @main(%x_0: f64) -> f64 {
bb0:
    %1: f64[] = call @pair(%x_0)
    %2: i64 = iconst 1
    %3: f64 = load %1[%2]
    %4: f64[] = call @pair(%3)
    %5: i64 = iconst 0
    %6: f64 = load %4[%5]
    %7: i64 = array.dim 0 %4
    %8: f64 = fadd %3, %6
    ret %8
}
";

    #[test]
    fn calls_read_at_constant_indices_take_the_elements_as_a_tuple() {
        let out = run(PAIR);
        assert!(out.contains("fn @pair$values(%x_0: f64) -> (f64, f64)"), "{out}");
        let main = function(&out, "main");
        assert_eq!(main.matches("call @pair$values").count(), 2, "{main}");
        assert!(main.contains("tuple.get 1") && main.contains("tuple.get 0"), "{main}");
        assert!(!main.contains("load"), "{main}");
        // The function itself stays, for other callers.
        assert!(out.contains("fn @pair(%x_0: f64) -> f64[]"), "{out}");
    }

    #[test]
    fn a_call_whose_array_is_passed_on_keeps_the_array() {
        let ir = PAIR.replace("%7: i64 = array.dim 0 %4", "%7: f64 = call @total(%4)").replace(
            "fn @main",
            "fn @total(%v_0: f64[]) -> f64 {\nbb0:\n    %1: f64 = array.sum %v_0\n    ret %1\n}\n\nfn @main",
        );
        let out = run(&ir);
        let main = function(&out, "main");
        assert_eq!(main.matches("call @pair$values").count(), 1, "{main}");
        assert_eq!(main.matches("call @pair(").count(), 1, "{main}");
    }

    #[test]
    fn a_recursion_returning_its_own_result_returns_the_tuple() {
        // `down` returns a fresh pair at the bottom and its own call's result above it:
        // the variant calls itself and returns the tuple it gets.
        let ir = "fn @down(%x_0: f64, %n_1: i64) -> f64[] {
bb0:
    %2: i64 = iconst 0
    %3: bool = icmp le %n_1, %2
    br %3, bb1, bb2
bb1:
    %4: f64 = fconst 0.0
    %5: i64 = iconst 2
    %6: f64[] = array.fill %4, %5
    %7: i64 = iconst 1
    store.trusted %6[%7], %x_0
    ret %6
bb2:
    %8: i64 = iconst 1
    %9: i64 = isub %n_1, %8
    %10: f64[] = call @down(%x_0, %9)
    ret %10
}

fn @main(%x_0: f64) -> f64 {
bb0:
    %1: i64 = iconst 3
    %2: f64[] = call @down(%x_0, %1)
    %3: i64 = iconst 1
    %4: f64 = load %2[%3]
    ret %4
}
";
        let out = run(ir);
        let variant = function(&out, "down$values");
        assert!(variant.contains("call @down$values(%x_0"), "{variant}");
        assert_eq!(variant.matches("tuple.new").count(), 1, "{variant}");
        assert!(function(&out, "main").contains("tuple.get 1"), "{out}");
    }

    #[test]
    fn an_array_that_escapes_its_function_is_returned_as_it_is() {
        // Passed to a call, it could be held elsewhere: no variant.
        let ir = PAIR.replace(
            "    ret %3\n}\n\nfn @main",
            "    %7: f64 = call @total(%3)\n    ret %3\n}\n\nfn @total(%v_0: f64[]) -> f64 {\nbb0:\n    %1: f64 = array.sum %v_0\n    ret %1\n}\n\nfn @main",
        );
        assert!(!run(&ir).contains("pair$values"));
    }
}
