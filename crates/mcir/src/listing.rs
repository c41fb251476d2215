//! IR text that is a complete module: the functions asked for, every function they
//! call (or name in a rule), and the structs their values use, in the layout of
//! [`mcir_ir::print_module`], so that `mcc ir` prints what `mcc ir FILE.ir` reads back.
//!
//! The functions may come from several modules (a program's, its derived rules', its
//! tangents'), which agree on every name they share: a derived module is the program's
//! module with functions and structs added.

use mcir_ir::op::Op;
use mcir_ir::{FuncId, Module, StructId, Type, TypeId};
use std::collections::HashSet;

/// How a function is printed (as written, or as native code compiles it).
pub type PrintFn<'a> = &'a dyn Fn(&Module, FuncId) -> String;

/// A module's text being put together.
#[derive(Default)]
pub struct Listing {
    structs: Vec<String>,
    struct_names: HashSet<String>,
    rules: Vec<String>,
    functions: Vec<String>,
    function_names: HashSet<String>,
}

impl Listing {
    /// An empty listing.
    pub fn new() -> Listing {
        Listing::default()
    }

    /// Lists `f` of `module`, printed by `print`, with the structs it uses and the
    /// rules for it (a function already listed under its name is left out).
    pub fn add(&mut self, module: &Module, f: FuncId, print: PrintFn<'_>) {
        let name = &module.funcs[f].name;
        if !self.function_names.insert(name.clone()) {
            return;
        }
        self.structs_of(module, f);
        self.functions.push(print(module, f));
        for r in module.rules.iter().filter(|r| r.func == f) {
            self.rules.push(mcir_ir::print_rule(module, r));
        }
    }

    /// Lists `roots` of `module`, and then every function they call or name in a rule,
    /// transitively, that is not listed yet.
    pub fn add_with_callees(&mut self, module: &Module, roots: &[FuncId], print: PrintFn<'_>) {
        for &f in roots {
            self.add(module, f, print);
        }
        let mut stack: Vec<FuncId> = roots.to_vec();
        let mut seen: HashSet<FuncId> = roots.iter().copied().collect();
        let mut callees = Vec::new();
        while let Some(f) = stack.pop() {
            let mut named: Vec<FuncId> = module.funcs[f]
                .insts
                .iter()
                .filter_map(|(_, d)| if let Op::Call(c) = d.op { Some(c) } else { None })
                .collect();
            for r in module.rules.iter().filter(|r| r.func == f) {
                named.extend(rule_functions(&r.kind));
            }
            for c in named {
                if seen.insert(c) {
                    callees.push(c);
                    stack.push(c);
                }
            }
        }
        for c in callees {
            self.add(module, c, print);
        }
    }

    /// The module's text.
    pub fn text(&self) -> String {
        let mut out: String = self.structs.concat();
        out.push_str(&self.rules.concat());
        for (i, f) in self.functions.iter().enumerate() {
            if i > 0 || !out.is_empty() {
                out.push('\n');
            }
            out.push_str(f);
        }
        out
    }

    /// Lists the structs `f`'s values use, each after those its fields use.
    fn structs_of(&mut self, module: &Module, f: FuncId) {
        let func = &module.funcs[f];
        let mut types: Vec<TypeId> = func.params.clone();
        types.extend(func.ret);
        types.extend(func.values.iter().map(|(_, v)| v.ty));
        let mut order: Vec<StructId> = Vec::new();
        let mut seen: HashSet<TypeId> = HashSet::new();
        for t in types {
            walk(module, t, &mut seen, &mut order);
        }
        // In the module's order, as `print_module` prints them.
        order.sort_by_key(|s| mcir_ir::entity::EntityRef::index(*s));
        for s in order {
            let def = module.types.struct_def(s);
            if self.struct_names.insert(def.name.clone()) {
                self.structs.push(mcir_ir::print_struct(&module.types, s));
            }
        }
    }
}

/// The functions a rule names.
fn rule_functions(kind: &mcir_ir::RuleKind) -> Vec<FuncId> {
    match kind {
        mcir_ir::RuleKind::Reverse { rule, pullback: other }
        | mcir_ir::RuleKind::Forward { rule, pushforward: other } => {
            vec![*rule, *other]
        }
        mcir_ir::RuleKind::Zero => Vec::new(),
        mcir_ir::RuleKind::Checkpoint { inner } => vec![*inner],
    }
}

/// Collects the structs type `t` mentions.
fn walk(module: &Module, t: TypeId, seen: &mut HashSet<TypeId>, out: &mut Vec<StructId>) {
    if !seen.insert(t) {
        return;
    }
    match module.types.get(t) {
        Type::Scalar(_) | Type::Array { .. } => {}
        Type::Ref(inner) | Type::Stack(inner) => walk(module, *inner, seen, out),
        Type::Tuple(items) => {
            for &i in items {
                walk(module, i, seen, out);
            }
        }
        Type::Struct(s) => {
            if !out.contains(s) {
                out.push(*s);
            }
            for &(_, field) in &module.types.struct_def(*s).fields {
                walk(module, field, seen, out);
            }
        }
    }
}
