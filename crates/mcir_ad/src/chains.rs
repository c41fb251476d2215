//! Shorter dependency chains in reverse passes. A reverse loop's step carries adjoints
//! from one iteration to the next, and each step computes the new ones from the old
//! through every intermediate adjoint in turn: `ū = x̄ · a`, then `v̄ = ū · b - ȳ · c`,
//! then `x̄' = v̄ · d + ...`. Those chains, not the arithmetic, bound a scalar reverse loop
//! (the machine has idle units while each step waits on the last). Every adjoint is a
//! linear combination of the adjoints it comes from, with coefficients that the tape
//! alone determines, so the pass rebuilds each one as `Σ atom · coefficient`: the
//! coefficients (`a · b · d`, `-c · d`) are products and sums of values that do not wait
//! on the carried adjoints and are computed beside the chain, and the chain itself is one
//! product and a short sum per stage. Terms of one atom are merged (`x̄ · a - x̄ · b` is
//! `x̄ · (a - b)`), and the sum of the terms adds those that are ready first first.
//!
//! What is an atom: a carried value (a parameter of a block other than the entry, and
//! whatever depends on one), as far as it is not itself a linear combination in the same
//! block; a combination of two or more atoms read more than once is computed once and is
//! an atom to its readers, so that no work is repeated but the coefficients.
//!
//! Where the new instructions go: a coefficient where the instruction it replaces was,
//! and anything that waits on a carried value right after the last of its operands, so
//! that each adjoint is added into the sums that read it as soon as it is computed and
//! few values are live at once. Native code keeps that order for reverse passes of
//! scalar code (`mcir_jit`'s in-order tier), where it is worth more than anything
//! Cranelift's e-graph would do (which computes every adjoint the block's first result
//! needs before any other result, all of them live at once).
//!
//! The rewrite reassociates floating-point arithmetic, so its results may differ from
//! the unrewritten ones in the last bits: it runs on reverse passes only
//! ([`Function::is_reverse_pass`]), whose sums' order the derivation chose in the first
//! place. Primal code is never touched.

use mcir_ir::cfg::ControlFlow;
use mcir_ir::entity::EntityRef;
use mcir_ir::{
    Block, FBinOp, FUnOp, Function, Inst, InstData, Op, Span, TypeTable, Value, ValueData, ValueDef,
};
use rustc_hash::FxHashMap as HashMap;

/// More terms (or more addends that wait on nothing) than this and a combination is
/// computed where it is defined: the coefficients of a longer one, repeated in each
/// reader, would cost more than the chain they shorten.
const MAX_TERMS: usize = 8;

/// Latencies, in cycles, that order the additions of a sum (a model, not a measure).
const ADD_LATENCY: i64 = 3;
const MUL_LATENCY: i64 = 3;
const DIV_LATENCY: i64 = 13;
const NEG_LATENCY: i64 = 1;
const OTHER_LATENCY: i64 = 10;

/// How deep [`is_zero`] looks.
const ZERO_DEPTH: u32 = 16;

/// Whether `v`, an addend of an adjoint that waits on no carried value, is a zero
/// adjoint: a constant zero, or sums, differences, negations and products of zeros and
/// quotients of a zero. A derived pass seeds what nothing contributes to with `0.0` (the
/// adjoint of a loop's `step`, read only by its test), and coefficients then scale it
/// (`0 / (3 y²)`). Zero adjoints are symbolic: such an addend contributes nothing,
/// whatever it is multiplied by or divided by (the rule's partial derivative may be
/// infinite where the adjoint reaching it is zero).
fn is_zero(f: &Function, v: Value, depth: u32) -> bool {
    let Some(d) = f.defining(v) else { return false };
    match (&d.op, d.args.as_slice()) {
        (Op::FConst(c), _) => *c == 0.0,
        _ if depth == 0 => false,
        (Op::FBinary(FBinOp::Add | FBinOp::Sub), [a, b]) => {
            is_zero(f, *a, depth - 1) && is_zero(f, *b, depth - 1)
        }
        (Op::FBinary(FBinOp::Mul), [a, b]) => is_zero(f, *a, depth - 1) || is_zero(f, *b, depth - 1),
        (Op::FBinary(FBinOp::Div), [a, _]) | (Op::FUnary(FUnOp::Neg), [a]) => is_zero(f, *a, depth - 1),
        _ => false,
    }
}

/// The latency the model gives `op`.
fn latency(op: &Op) -> i64 {
    match op {
        Op::FBinary(FBinOp::Add | FBinOp::Sub) => ADD_LATENCY,
        Op::FBinary(FBinOp::Mul) => MUL_LATENCY,
        Op::FBinary(FBinOp::Div) => DIV_LATENCY,
        Op::FUnary(FUnOp::Neg) => NEG_LATENCY,
        _ => OTHER_LATENCY,
    }
}

/// A coefficient: a value that does not wait on carried adjoints, or 1, with a sign.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Coef {
    value: Option<Value>,
    negative: bool,
}

/// `atom · coefficient`.
#[derive(Clone, Copy, Debug)]
struct Term {
    atom: Value,
    coef: Coef,
}

/// A linear combination of atoms plus addends that wait on none (`rest`, each with a sign).
#[derive(Clone, Debug, Default)]
struct Form {
    terms: Vec<Term>,
    rest: Vec<(Value, bool)>,
}

impl Form {
    fn atom(atom: Value, negative: bool) -> Form {
        Form { terms: vec![Term { atom, coef: Coef { value: None, negative } }], rest: Vec::new() }
    }

    fn early(v: Value) -> Form {
        Form { terms: Vec::new(), rest: vec![(v, false)] }
    }

    fn negated(mut self) -> Form {
        self.terms.iter_mut().for_each(|t| t.coef.negative = !t.coef.negative);
        self.rest.iter_mut().for_each(|r| r.1 = !r.1);
        self
    }
}

/// `f` with the adjoints of each block of a reverse pass rebuilt as combinations of the
/// values they wait on (see the module doc); other functions are returned unchanged.
pub(crate) fn shorten_chains(mut f: Function) -> Function {
    if !f.is_reverse_pass() {
        return f;
    }
    let mut late = carried_values(&f);
    let (uses_here, escapes) = count_uses(&f);
    let mut same: HashMap<Value, Value> = HashMap::default();
    let first_new = f.values.len();
    let blocks: Vec<Block> = f.blocks.keys().collect();
    let invariant_in = outside_innermost_loop(&f);
    for b in blocks {
        let cleared = wait_in_block(&f, b, &mut late, &invariant_in);
        let mut pass = BlockPass {
            late: std::mem::take(&mut late),
            uses_here: &uses_here,
            escapes: &escapes,
            forms: HashMap::default(),
            made: HashMap::default(),
            atom_of: HashMap::default(),
            depth: HashMap::default(),
            first_new,
            names: HashMap::default(),
            out: Vec::new(),
            pos: HashMap::default(),
            now: 0,
            seq: 0,
            span: Span::default(),
            one: None,
            changed: false,
        };
        let insts = f.blocks[b].insts.clone();
        for i in insts {
            pass.visit(&mut f, i, &mut same);
        }
        if pass.changed {
            let mut out = std::mem::take(&mut pass.out);
            out.sort_by_key(|&(key, seq, _)| (key, seq));
            f.blocks[b].insts = out.into_iter().map(|(_, _, i)| i).collect();
        }
        late = pass.late;
        for v in cleared {
            late[v.index()] = true;
        }
    }
    f.substitute(&same);
    f
}

/// Which values wait on a carried value: the `f64` parameters of every block but the
/// entry (the adjoints a loop carries, the values a join merges), and every result
/// computed from one.
fn carried_values(f: &Function) -> Vec<bool> {
    let mut late = vec![false; f.values.len()];
    for b in f.blocks.keys().skip(1) {
        for &p in &f.blocks[b].params {
            if f.value_type(p) == TypeTable::F64 {
                late[p.index()] = true;
            }
        }
    }
    // Definitions may follow their uses in arena order (a loop's blocks), so iterate.
    let mut changed = true;
    while changed {
        changed = false;
        for b in f.blocks.keys() {
            for &i in &f.blocks[b].insts {
                let data = &f.insts[i];
                if let Some(r) = data.result {
                    if !late[r.index()] && data.args.iter().any(|a| late[a.index()]) {
                        late[r.index()] = true;
                        changed = true;
                    }
                }
            }
        }
    }
    late
}

/// For each block in a loop, whether a value is defined outside the innermost loop that
/// contains the block (so it is the same in every iteration of that loop); `None` for
/// blocks in no loop.
fn outside_innermost_loop(f: &Function) -> impl Fn(Block, Value) -> bool {
    let cfg = ControlFlow::compute(f);
    let n = f.blocks.len();
    let mut innermost: Vec<Option<usize>> = vec![None; n];
    let mut loops: Vec<std::collections::HashSet<Block>> = Vec::new();
    for &h in &cfg.rpo {
        if cfg.latches(h).next().is_none() {
            continue;
        }
        let body = cfg.loop_blocks(h);
        for &b in &body {
            let smaller = innermost[b.index()].is_none_or(|k| loops[k].len() > body.len());
            if smaller {
                innermost[b.index()] = Some(loops.len());
            }
        }
        loops.push(body);
    }
    let mut def_block: Vec<Option<Block>> = vec![None; f.values.len()];
    for (b, data) in f.blocks.iter() {
        for &p in &data.params {
            def_block[p.index()] = Some(b);
        }
        for &i in &data.insts {
            if let Some(r) = f.insts[i].result {
                def_block[r.index()] = Some(b);
            }
        }
    }
    move |b: Block, v: Value| match (innermost[b.index()], def_block.get(v.index()).copied().flatten()) {
        (Some(k), Some(d)) => !loops[k].contains(&d),
        _ => false,
    }
}

/// Makes `late` right for block `b`: a value defined outside the innermost loop that
/// contains `b` is ready whenever `b` runs (an adjoint an outer loop's step computed,
/// read by an inner loop), so to `b` it is an addend that waits on nothing, and so is
/// what `b` computes from such values alone. Returns the values cleared that are to be
/// marked again after `b` (those of other blocks).
fn wait_in_block(
    f: &Function,
    b: Block,
    late: &mut [bool],
    invariant_in: &dyn Fn(Block, Value) -> bool,
) -> Vec<Value> {
    let mut cleared = Vec::new();
    for &i in &f.blocks[b].insts {
        for &a in &f.insts[i].args {
            if late[a.index()] && invariant_in(b, a) {
                late[a.index()] = false;
                cleared.push(a);
            }
        }
        if let Some(r) = f.insts[i].result {
            late[r.index()] = late[r.index()] && f.insts[i].args.iter().any(|a| late[a.index()]);
        }
    }
    cleared
}

/// For each value: how many instructions of its own block read it, and whether anything
/// else does (another block's instruction, or any terminator).
fn count_uses(f: &Function) -> (Vec<u32>, Vec<bool>) {
    let mut here = vec![0u32; f.values.len()];
    let mut escapes = vec![false; f.values.len()];
    let block_of = |v: Value| match f.values[v].def {
        ValueDef::Param(b, _) => Some(b),
        ValueDef::Inst(_) => None,
    };
    let mut def_block: Vec<Option<Block>> = f.values.keys().map(block_of).collect();
    for b in f.blocks.keys() {
        for &i in &f.blocks[b].insts {
            if let Some(r) = f.insts[i].result {
                def_block[r.index()] = Some(b);
            }
        }
    }
    for b in f.blocks.keys() {
        for &i in &f.blocks[b].insts {
            for a in &f.insts[i].args {
                if def_block[a.index()] == Some(b) {
                    here[a.index()] += 1;
                } else {
                    escapes[a.index()] = true;
                }
            }
        }
        for a in f.blocks[b].term.uses() {
            escapes[a.index()] = true;
        }
    }
    (here, escapes)
}

/// The rewrite of one block.
struct BlockPass<'a> {
    /// Whether each value waits on a carried value (new values included).
    late: Vec<bool>,
    uses_here: &'a [u32],
    escapes: &'a [bool],
    /// Combinations not computed where they were defined: their readers take them apart.
    forms: HashMap<Value, Form>,
    /// Combinations of `forms` computed for a reader that needs the value itself.
    made: HashMap<Value, Value>,
    /// A computed combination that came out negated: its readers take `-atom` instead of
    /// the `fneg`.
    atom_of: HashMap<Value, Value>,
    /// When each carried value of the block is ready, in cycles after the block's start.
    depth: HashMap<Value, i64>,
    /// The names of products that forms replaced, by atom and coefficient.
    names: HashMap<(Value, Value), String>,
    /// Values from this index on are the pass's own.
    first_new: usize,
    /// The block's instructions with their places: sorted by `(place, order made)`.
    out: Vec<(u64, u64, Inst)>,
    /// Where each value of the block is computed (values from elsewhere: 0, the top).
    pos: HashMap<Value, u64>,
    /// The place of the instruction being visited (its position among the originals).
    now: u64,
    /// How many instructions have been placed, which orders those of one place.
    seq: u64,
    /// The span new instructions take: that of the instruction they replace.
    span: Span,
    /// The block's constant 1, once made (the coefficient of a bare atom).
    one: Option<Value>,
    /// Whether anything was rewritten, so that the block takes the new order.
    changed: bool,
}

impl BlockPass<'_> {
    fn visit(&mut self, f: &mut Function, i: Inst, same: &mut HashMap<Value, Value>) {
        self.span = f.insts[i].span;
        self.now += 1;
        let data = f.insts[i].clone();
        if let Some((r, form)) = self.linear_form(f, &data) {
            self.changed = true;
            let many_atoms = form.terms.len() >= 2 && self.uses_here[r.index()] > 1;
            // Long combinations are computed where they are defined. Addends that wait
            // on nothing count too: a chain of sums (straight-line code of an unrolled
            // loop) would otherwise hand each reader a longer copy of them, and each
            // product of a copy rebuilds every addend: quadratic in the chain's length.
            let long = form.terms.len() > MAX_TERMS || form.rest.len() > MAX_TERMS;
            if self.escapes[r.index()] || many_atoms || long {
                let (v, negative) = self.build(f, &form);
                if negative {
                    let n = self.emit(f, Op::FUnary(FUnOp::Neg), vec![v]);
                    f.values[n].name = f.values[r].name.clone();
                    self.atom_of.insert(r, v);
                    same.insert(r, n);
                    self.pos.insert(r, self.pos.get(&n).copied().unwrap_or(0));
                    self.depth.insert(r, self.ready(n));
                } else {
                    if v.index() >= self.first_new && f.values[v].name.is_none() {
                        f.values[v].name = f.values[r].name.clone();
                    }
                    same.insert(r, v);
                    self.pos.insert(r, self.pos.get(&v).copied().unwrap_or(0));
                    self.depth.insert(r, self.ready(v));
                }
            } else {
                // A product rebuilt from its form keeps the name it had.
                if let ([t], []) = (form.terms.as_slice(), form.rest.as_slice()) {
                    if let (Some(c), Some(name)) = (t.coef.value, &f.values[r].name) {
                        self.names.insert((t.atom, c), name.clone());
                    }
                }
                self.forms.insert(r, form);
            }
            return;
        }
        // Any other reader takes the value itself.
        let mut args = data.args.clone();
        for a in args.iter_mut() {
            if self.forms.contains_key(a) {
                *a = self.value_of(f, *a);
                self.changed = true;
            }
        }
        f.insts[i].args = args.clone();
        self.seq += 1;
        self.out.push((self.now, self.seq, i));
        if let Some(r) = data.result {
            self.pos.insert(r, self.now);
            if self.late[r.index()] {
                let start = args.iter().filter(|a| self.late[a.index()]).map(|a| self.ready(*a)).max();
                self.depth.insert(r, start.unwrap_or(0) + latency(&data.op));
            }
        }
    }

    /// The `f64` value `data` defines and the combination it computes, if it waits on a
    /// carried value and is linear in such values.
    fn linear_form(&mut self, f: &mut Function, data: &InstData) -> Option<(Value, Form)> {
        let r = data.result?;
        if f.value_type(r) != TypeTable::F64 || !self.late[r.index()] {
            return None;
        }
        self.linear_form_of(f, data).map(|form| (r, form))
    }

    /// The combination `data` computes, if it is linear in carried values: sums,
    /// differences and negations of them, and their products with and quotients by
    /// values that wait on none.
    fn linear_form_of(&mut self, f: &mut Function, data: &InstData) -> Option<Form> {
        let late: Vec<bool> = data.args.iter().map(|a| self.late[a.index()]).collect();
        match (&data.op, data.args.as_slice()) {
            (Op::FBinary(FBinOp::Add), [a, b]) => {
                let fa = self.form_of(f, *a);
                let fb = self.form_of(f, *b);
                Some(self.add(f, fa, fb))
            }
            (Op::FBinary(FBinOp::Sub), [a, b]) => {
                let fa = self.form_of(f, *a);
                let fb = self.form_of(f, *b).negated();
                Some(self.add(f, fa, fb))
            }
            (Op::FUnary(FUnOp::Neg), [a]) => Some(self.form_of(f, *a).negated()),
            (Op::FBinary(FBinOp::Mul), [a, b]) if late[0] != late[1] => {
                let (x, e) = if late[0] { (*a, *b) } else { (*b, *a) };
                let fx = self.form_of(f, x);
                Some(self.scale(f, fx, e, FBinOp::Mul))
            }
            (Op::FBinary(FBinOp::Div), [a, b]) if late[0] && !late[1] => {
                let fa = self.form_of(f, *a);
                Some(self.scale(f, fa, *b, FBinOp::Div))
            }
            _ => None,
        }
    }

    fn form_of(&self, f: &Function, v: Value) -> Form {
        if let Some(form) = self.forms.get(&v) {
            form.clone()
        } else if let Some(&atom) = self.atom_of.get(&v) {
            Form::atom(atom, true)
        } else if self.late[v.index()] {
            Form::atom(v, false)
        } else if is_zero(f, v, ZERO_DEPTH) {
            // A zero adjoint is no addend (see `is_zero`).
            Form::default()
        } else {
            Form::early(v)
        }
    }

    /// `form · e` or `form / e`. A quotient of an atom itself (coefficient 1) becomes
    /// its product with `1 / e`, computed beside the chain: a division's latency is
    /// four multiplications'.
    fn scale(&mut self, f: &mut Function, mut form: Form, e: Value, op: FBinOp) -> Form {
        let mut reciprocal = None;
        for t in form.terms.iter_mut() {
            t.coef.value = Some(match (t.coef.value, op) {
                (Some(c), _) => self.emit(f, Op::FBinary(op), vec![c, e]),
                (None, FBinOp::Div) => match reciprocal {
                    Some(r) => r,
                    None => {
                        let one = self.coef_value(f, None);
                        let r = self.emit(f, Op::FBinary(FBinOp::Div), vec![one, e]);
                        reciprocal = Some(r);
                        r
                    }
                },
                (None, _) => e,
            });
        }
        // Addends that wait on nothing are summed before they are scaled: one product,
        // not one per addend (the adjoints of `ū`, `v̄` and `eaten` reaching one term,
        // each scaled through every factor of its local derivatives).
        if form.rest.len() > 1 {
            let sum = self.sum_rest(f, &form.rest);
            form.rest = vec![sum];
        }
        for r in form.rest.iter_mut() {
            r.0 = self.emit(f, Op::FBinary(op), vec![r.0, e]);
        }
        form
    }

    /// The sum of addends that wait on nothing, in order, and its sign.
    fn sum_rest(&mut self, f: &mut Function, rest: &[(Value, bool)]) -> (Value, bool) {
        let mut acc = rest[0];
        for &r in &rest[1..] {
            acc = self.combine(f, acc, r);
        }
        acc
    }

    /// `a + b`, with the terms of one atom merged.
    fn add(&mut self, f: &mut Function, mut a: Form, b: Form) -> Form {
        for t in b.terms {
            match a.terms.iter().position(|u| u.atom == t.atom) {
                Some(k) => {
                    let u = a.terms[k].coef;
                    let uc = self.coef_value(f, u.value);
                    let tc = self.coef_value(f, t.coef.value);
                    // u·s_u + t·s_t = s_u · (u ± t)
                    let op = if u.negative == t.coef.negative { FBinOp::Add } else { FBinOp::Sub };
                    let value = self.emit(f, Op::FBinary(op), vec![uc, tc]);
                    a.terms[k].coef = Coef { value: Some(value), negative: u.negative };
                }
                None => a.terms.push(t),
            }
        }
        a.rest.extend(b.rest);
        a
    }

    fn coef_value(&mut self, f: &mut Function, c: Option<Value>) -> Value {
        match c {
            Some(v) => v,
            None => match self.one {
                Some(one) => one,
                None => {
                    let one = self.emit(f, Op::FConst(1.0), vec![]);
                    self.one = Some(one);
                    one
                }
            },
        }
    }

    /// The value of a combination a reader needs as such, computed once.
    fn value_of(&mut self, f: &mut Function, v: Value) -> Value {
        if let Some(&m) = self.made.get(&v) {
            return m;
        }
        let form = self.forms[&v].clone();
        let (value, negative) = self.build(f, &form);
        let m = if negative { self.emit(f, Op::FUnary(FUnOp::Neg), vec![value]) } else { value };
        self.made.insert(v, m);
        m
    }

    /// When `v` is ready: values that wait on no carried value before the block starts.
    fn ready(&self, v: Value) -> i64 {
        if !self.late[v.index()] {
            return -1;
        }
        self.depth.get(&v).copied().unwrap_or(0)
    }

    /// Computes `form`: its addends that wait on nothing first, in order, then one
    /// product per atom, then the sum of all of them, always adding the two that are
    /// ready first. Returns the value and whether it is the combination's negation.
    fn build(&mut self, f: &mut Function, form: &Form) -> (Value, bool) {
        // (ready, order, value, negative)
        let mut items: Vec<(i64, usize, Value, bool)> = Vec::new();
        if !form.rest.is_empty() {
            let (v, negative) = self.sum_rest(f, &form.rest);
            items.push((-1, 0, v, negative));
        }
        for t in &form.terms {
            let (ready, v) = match t.coef.value {
                None => (self.ready(t.atom), t.atom),
                Some(c) => {
                    let p = self.emit(f, Op::FBinary(FBinOp::Mul), vec![t.atom, c]);
                    if p != t.atom {
                        f.values[p].name = self.names.get(&(t.atom, c)).cloned();
                    }
                    (self.ready(t.atom) + MUL_LATENCY, p)
                }
            };
            items.push((ready, items.len(), v, t.coef.negative));
        }
        if items.is_empty() {
            // Every addend was a zero adjoint.
            return (self.emit(f, Op::FConst(0.0), vec![]), false);
        }
        let mut order = items.len();
        while items.len() > 1 {
            items.sort_by_key(|&(ready, k, ..)| (ready, k));
            let (ra, _, a, na) = items.remove(0);
            let (rb, _, b, nb) = items.remove(0);
            let (v, negative) = self.combine(f, (a, na), (b, nb));
            let ready = ra.max(rb) + ADD_LATENCY;
            items.push((ready, order, v, negative));
            order += 1;
        }
        let (_, _, v, negative) = items[0];
        (v, negative)
    }

    /// `±a ± b` as one addition or subtraction and a sign.
    fn combine(&mut self, f: &mut Function, (a, na): (Value, bool), (b, nb): (Value, bool)) -> (Value, bool) {
        let (op, args, negative) = match (na, nb) {
            (false, false) => (FBinOp::Add, vec![a, b], false),
            (false, true) => (FBinOp::Sub, vec![a, b], false),
            (true, false) => (FBinOp::Sub, vec![b, a], false),
            (true, true) => (FBinOp::Add, vec![a, b], true),
        };
        (self.emit(f, Op::FBinary(op), args), negative)
    }

    /// Appends a new instruction to the block and returns its result; arithmetic on
    /// constants is folded (`1 + 1`, from `x̄ + x̄`, is `2`), and a product with one is
    /// the other factor (`0.5 · e + 0.5 · e` is `1 · e`, which is `e`).
    fn emit(&mut self, f: &mut Function, op: Op, args: Vec<Value>) -> Value {
        let constant = |v: &Value| match f.defining(*v).map(|d| &d.op) {
            Some(Op::FConst(c)) => Some(*c),
            _ => None,
        };
        if let (Op::FBinary(FBinOp::Mul), [a, b]) = (&op, args.as_slice()) {
            match (constant(a), constant(b)) {
                (Some(1.0), None) => return *b,
                (None, Some(1.0)) => return *a,
                _ => {}
            }
        }
        let op = match (&op, args.iter().map(constant).collect::<Vec<_>>().as_slice()) {
            (Op::FBinary(b), [Some(x), Some(y)]) => Op::FConst(b.eval(*x, *y)),
            _ => op,
        };
        let args = if matches!(op, Op::FConst(_)) { Vec::new() } else { args };
        let late = args.iter().any(|a| self.late[a.index()]);
        self.late.push(late);
        let inst = f.insts.push(InstData { op, args, result: None, span: self.span, in_tape: false });
        let v = f.values.push(ValueData { ty: TypeTable::F64, def: ValueDef::Inst(inst), name: None });
        f.insts[inst].result = Some(v);
        self.seq += 1;
        let key = if late {
            f.insts[inst].args.iter().map(|a| self.pos.get(a).copied().unwrap_or(0)).max().unwrap_or(0)
        } else {
            self.now
        };
        self.pos.insert(v, key);
        if late {
            let op = &f.insts[inst].op;
            let start = f.insts[inst].args.iter().map(|a| self.ready(*a)).max().unwrap_or(0);
            self.depth.insert(v, start + latency(op));
        }
        self.out.push((key, self.seq, inst));
        debug_assert_eq!(self.late.len(), f.values.len());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcir_ir::{FuncId, Terminator};

    /// Every function of `ir` through the pass, verified.
    fn run(ir: &str) -> (mcir_ir::Module, mcir_ir::Module) {
        let m = mcir_ir::parse_module(ir).expect("parses");
        let mut out = m.clone();
        let ids: Vec<FuncId> = out.funcs.keys().collect();
        for id in ids {
            out.funcs[id] = shorten_chains(m.funcs[id].clone());
        }
        mcir_ir::verify_module(&out).expect("verifies");
        (m, out)
    }

    /// Runs a function of `f64` arithmetic, jumps and a returned tuple.
    fn eval(f: &Function, args: &[f64]) -> Vec<f64> {
        let mut env: HashMap<Value, f64> = HashMap::default();
        let mut tuple: HashMap<Value, Vec<f64>> = HashMap::default();
        let mut block = f.entry();
        let mut incoming: Vec<f64> = args.to_vec();
        loop {
            for (&p, &x) in f.blocks[block].params.iter().zip(&incoming) {
                env.insert(p, x);
            }
            for &i in &f.blocks[block].insts {
                let d = &f.insts[i];
                let a: Vec<f64> = d.args.iter().map(|v| env[v]).collect();
                let r = d.result.expect("a result");
                let x = match (&d.op, a.as_slice()) {
                    (Op::FConst(c), []) => *c,
                    (Op::FBinary(FBinOp::Add), [x, y]) => x + y,
                    (Op::FBinary(FBinOp::Sub), [x, y]) => x - y,
                    (Op::FBinary(FBinOp::Mul), [x, y]) => x * y,
                    (Op::FBinary(FBinOp::Div), [x, y]) => x / y,
                    (Op::FUnary(FUnOp::Neg), [x]) => -x,
                    (Op::FUnary(FUnOp::Exp), [x]) => x.exp(),
                    (Op::TupleNew, _) => {
                        tuple.insert(r, a);
                        continue;
                    }
                    (op, _) => panic!("{op:?} is not evaluated here"),
                };
                env.insert(r, x);
            }
            match &f.blocks[block].term {
                Terminator::Jump(call) => {
                    incoming = call.args.iter().map(|v| env[v]).collect();
                    block = call.block;
                }
                Terminator::Return(Some(v)) => return tuple[v].clone(),
                t => panic!("{t:?} is not evaluated here"),
            }
        }
    }

    /// The longest chain of arithmetic from the parameters of `block` to its terminator.
    fn chain(f: &Function, block: Block) -> i64 {
        let mut depth: HashMap<Value, i64> = f.blocks[block].params.iter().map(|&p| (p, 0)).collect();
        for &i in &f.blocks[block].insts {
            let d = &f.insts[i];
            if let Some(start) = d.args.iter().filter_map(|a| depth.get(a)).max().copied() {
                depth.insert(d.result.expect("a result"), start + 1);
            }
        }
        f.blocks[block].term.uses().iter().filter_map(|v| depth.get(v)).max().copied().unwrap_or(0)
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-13 * x.abs().max(y.abs()), "{a:?} against {b:?}");
        }
    }

    /// Four stages, each reading the last one's adjoints through products with taped
    /// values, as an inlined step's reverse pass does.
    const STAGES: &str = "fn @step$rev(%a_0: f64, %b_1: f64, %c_2: f64, %d_3: f64, %xb_4: f64, %yb_5: f64) -> (f64, f64, f64) {
bb0:
    jump bb1(%xb_4, %yb_5)
bb1(%x_6: f64, %y_7: f64):
    %8: f64 = fmul %x_6, %a_0
    %9: f64 = fmul %8, %b_1
    %10: f64 = fmul %y_7, %c_2
    %11: f64 = fsub %9, %10
    %12: f64 = fmul %11, %d_3
    %13: f64 = fmul %y_7, %b_1
    %14: f64 = fadd %12, %13
    %15: f64 = fmul %14, %a_0
    %16: f64 = fmul %14, %c_2
    %17: f64 = fsub %15, %16
    %18: f64 = fmul %17, %b_1
    %19: f64 = fneg %18
    %20: f64 = fadd %19, %x_6
    %21: f64 = fdiv %20, %d_3
    %22: f64 = fadd %11, %8
    %23: (f64, f64, f64) = tuple.new %21, %22, %14
    ret %23
}
";

    #[test]
    fn a_reverse_step_keeps_its_values_and_shortens_its_chain() {
        let (before, after) = run(STAGES);
        let id = before.func_by_name("step$rev").expect("the function");
        let (old, new) = (&before.funcs[id], &after.funcs[id]);
        let bb1 = mcir_ir::entity::EntityRef::new(1);
        assert!(chain(new, bb1) < chain(old, bb1), "{} against {}", chain(new, bb1), chain(old, bb1));
        for args in [[1.5, -0.25, 3.0, 0.75, 2.0, -1.0], [0.1, 7.0, -2.5, 1e3, -4.0, 0.5]] {
            close(&eval(old, &args), &eval(new, &args));
        }
    }

    /// The number of products in block `b`.
    fn products(f: &Function, b: usize) -> usize {
        let block = mcir_ir::entity::EntityRef::new(b);
        f.blocks[block].insts.iter().filter(|&&i| f.insts[i].op == Op::FBinary(FBinOp::Mul)).count()
    }

    #[test]
    fn addends_that_wait_on_nothing_are_summed_before_they_are_scaled() {
        // `(x̄·a + b - e)` scaled by `a`, then by `b`: the carried term's coefficient is
        // one product per scaling, and `b - e` is summed once and scaled once per
        // scaling, not each addend on its own.
        let ir = "fn @f$rev(%a_0: f64, %b_1: f64, %xb_2: f64, %e_3: f64, %c_4: bool) -> f64 {
bb0:
    jump bb1(%xb_2)
bb1(%x_5: f64):
    %6: f64 = fmul %x_5, %a_0
    %7: f64 = fadd %6, %b_1
    %8: f64 = fsub %7, %e_3
    %9: f64 = fmul %8, %a_0
    %10: f64 = fmul %9, %b_1
    br %c_4, bb1(%10), bb2
bb2:
    ret %10
}";
        let (_, after) = run(ir);
        let f = after.funcs.values().next().expect("the function");
        let text = mcir_ir::print::print_function(&after, f);
        // x̄·(a·a·b) and (b - e)·a·b: two products for the coefficient a·a·b beside the
        // chain, one for the carried value, two for the early sum.
        assert_eq!(products(f, 1), 5, "{text}");
        assert_eq!(text.matches("fsub %b_1, %e_3").count(), 1, "{text}");
    }

    #[test]
    fn values_of_an_enclosing_loop_wait_on_nothing_in_an_inner_one() {
        // `ō · a`, computed in the outer loop, is the same in every iteration of the
        // inner one: there it is an addend that waits on nothing, summed with `b` and
        // `-e` and scaled once, and the inner block keeps its two products.
        let ir = "fn @f$rev(%a_0: f64, %b_1: f64, %xb_2: f64, %e_3: f64, %c_4: bool) -> f64 {
bb0:
    jump bb1(%xb_2)
bb1(%o_5: f64):
    %6: f64 = fmul %o_5, %a_0
    jump bb2(%o_5)
bb2(%x_7: f64):
    %8: f64 = fadd %6, %b_1
    %9: f64 = fsub %8, %e_3
    %10: f64 = fmul %9, %a_0
    %11: f64 = fmul %10, %b_1
    %12: f64 = fadd %x_7, %11
    br %c_4, bb2(%12), bb3
bb3:
    br %c_4, bb1(%12), bb4
bb4:
    ret %12
}";
        let (before, after) = run(ir);
        let (old, new) = (before.funcs.values().next().expect("f"), after.funcs.values().next().expect("f"));
        let text = mcir_ir::print::print_function(&after, new);
        assert_eq!(products(new, 2), products(old, 2), "{text}");
        assert_eq!(products(new, 2), 2, "{text}");
    }

    #[test]
    fn terms_of_one_atom_are_merged() {
        // x̄ · a - x̄ · b is x̄ · (a - b): one product of the carried value.
        let (_, after) = run("fn @f$rev(%a_0: f64, %b_1: f64, %xb_2: f64) -> (f64,) {
bb0:
    jump bb1(%xb_2)
bb1(%x_3: f64):
    %4: f64 = fmul %x_3, %a_0
    %5: f64 = fmul %x_3, %b_1
    %6: f64 = fsub %4, %5
    %7: (f64,) = tuple.new %6
    ret %7
}
");
        let text = mcir_ir::print_module(&after);
        assert!(text.contains("= fsub %a_0, %b_1"), "{text}");
        assert_eq!(text.matches("fmul").count(), 1, "{text}");
    }

    #[test]
    fn a_zero_adjoint_scaled_and_divided_contributes_nothing() {
        // The adjoint of a loop's `step` (read only by its test) is seeded with 0.0, and
        // the quotient's adjoint divides it: `ā' = ā - (0 - ȳ) / d`. Only ȳ's term is
        // left, and no division of the zero.
        let (before, after) = run("fn @f$rev(%d_0: f64, %ab_1: f64, %yb_2: f64) -> (f64, f64) {
bb0:
    jump bb1(%ab_1, %yb_2)
bb1(%a_3: f64, %y_4: f64):
    %5: f64 = fconst 0.0
    %6: f64 = fsub %5, %y_4
    %7: f64 = fdiv %5, %d_0
    %8: f64 = fdiv %6, %d_0
    %9: f64 = fsub %a_3, %8
    %10: f64 = fmul %7, %d_0
    %11: f64 = fadd %9, %10
    %12: (f64, f64) = tuple.new %11, %y_4
    ret %12
}
");
        let id = before.func_by_name("f$rev").expect("the function");
        for args in [[3.0, 0.5, -2.0], [-0.25, 1.5, 4.0]] {
            close(&eval(&before.funcs[id], &args), &eval(&after.funcs[id], &args));
        }
        // What the pipeline keeps of it: no zero, one division (ȳ's reciprocal).
        let kept = crate::dce::remove_dead_code(after.funcs[id].clone());
        let text = mcir_ir::print_function(&after, &kept);
        assert!(!text.contains("fconst 0.0"), "{text}");
        assert_eq!(text.matches("fdiv").count(), 1, "{text}");
    }

    #[test]
    fn values_read_otherwise_than_linearly_are_computed() {
        // `exp` reads the combination itself, which is computed once for it.
        let ir = "fn @f$rev(%a_0: f64, %xb_1: f64, %yb_2: f64) -> (f64,) {
bb0:
    jump bb1(%xb_1, %yb_2)
bb1(%x_3: f64, %y_4: f64):
    %5: f64 = fmul %x_3, %a_0
    %6: f64 = fadd %5, %y_4
    %7: f64 = exp %6
    %8: f64 = fmul %7, %a_0
    %9: f64 = fmul %8, %a_0
    %10: (f64,) = tuple.new %9
    ret %10
}
";
        let (before, after) = run(ir);
        let id = before.func_by_name("f$rev").expect("the function");
        close(&eval(&before.funcs[id], &[0.5, 1.0, 2.0]), &eval(&after.funcs[id], &[0.5, 1.0, 2.0]));
        let text = mcir_ir::print_module(&after);
        assert_eq!(text.matches("exp").count(), 1, "{text}");
    }

    #[test]
    fn primal_code_is_left_alone() {
        let primal = STAGES.replace("step$rev", "step");
        let (before, after) = run(&primal);
        assert_eq!(mcir_ir::print_module(&before), mcir_ir::print_module(&after));
    }
}
