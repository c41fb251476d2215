//! Tangent, fdata and rdata types (LANGUAGE.md §2), and the leaves a value's derivative
//! splits into.
//!
//! A value's type nests tuples and immutable structs (value-identified) around scalars
//! and address-identified data. Its derivative has one *leaf* per differentiable part
//! reached without passing through an address: an **rdata** leaf per `f64`, carried by
//! value and returned by reverse passes, and an **fdata** leaf per address (array, ref,
//! mut struct) whose content is differentiable, carried as a shadow of the same shape
//! that reverse passes increment in place. Derived rules pass leaves one by one, so no
//! aggregate is built for a derivative unless a value of tangent type is needed (the
//! content of a shadow cell, the driver's inputs and outputs).

use mcir_ir::{Scalar, StructDef, Type, TypeId, TypeTable};

/// Which half of a tangent a leaf belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LeafKind {
    /// An `f64` carried by value.
    Rdata,
    /// An address whose shadow is incremented in place.
    Fdata,
}

/// One differentiable part of a value, reached from the value by `path` (field indices
/// through tuples and immutable structs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// Field indices from the value to the leaf.
    pub path: Vec<u32>,
    /// Rdata or fdata.
    pub kind: LeafKind,
    /// The primal type at the leaf.
    pub ty: TypeId,
}

/// Whether a value of type `t` has a non-trivial tangent.
pub fn has_tangent(types: &TypeTable, t: TypeId) -> bool {
    has_tangent_within(types, t, &mut Vec::new())
}

/// [`has_tangent`], with the structs being looked into: a struct reached again inside
/// itself (a recursive function's tape, holding its calls' tapes) adds nothing
/// that its other fields do not, so it counts as having none there.
fn has_tangent_within(types: &TypeTable, t: TypeId, open: &mut Vec<TypeId>) -> bool {
    match types.try_get(t) {
        Some(Type::Scalar(s)) => *s == Scalar::F64,
        Some(Type::Array { elem, .. }) => *elem == Scalar::F64,
        Some(Type::Ref(inner)) => has_tangent_within(types, *inner, open),
        Some(Type::Tuple(items)) => items.iter().any(|&i| has_tangent_within(types, i, open)),
        Some(Type::Struct(_)) => {
            if open.contains(&t) {
                return false;
            }
            open.push(t);
            let any = types
                .as_struct(t)
                .is_some_and(|(_, d)| d.fields.iter().any(|f| has_tangent_within(types, f.1, open)));
            open.pop();
            any
        }
        // A stack of a derived pass: its shadow, in forward mode, is a stack of tangents.
        Some(Type::Stack(inner)) => has_tangent_within(types, *inner, open),
        None => false,
    }
}

/// Whether type `t` reaches itself through its fields, elements or cells (a recursive
/// function's record): such a type has no finite tuple of leaves for a tangent.
pub fn contains_itself(types: &TypeTable, t: TypeId) -> bool {
    fn parts(types: &TypeTable, t: TypeId) -> Vec<TypeId> {
        match types.try_get(t) {
            Some(Type::Ref(inner)) | Some(Type::Stack(inner)) => vec![*inner],
            Some(Type::Tuple(items)) => items.clone(),
            Some(Type::Struct(_)) => {
                types.as_struct(t).map(|(_, d)| d.fields.iter().map(|f| f.1).collect()).unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }
    // Depth-first from the parts of `t`, looking for `t`.
    let mut seen = std::collections::HashSet::new();
    let mut todo = parts(types, t);
    while let Some(u) = todo.pop() {
        if u == t {
            return true;
        }
        if seen.insert(u) {
            todo.extend(parts(types, u));
        }
    }
    false
}

/// Whether `t` is an immutable struct that holds a value of its own type (a recursive
/// function's record, holding the records of its recursive calls). Its parts cannot be
/// flattened into leaves, so its derivative is one fdata leaf: a value of its tangent
/// struct `S$tan`, built and read field by field like a mut struct's shadow.
pub fn holds_itself(types: &TypeTable, t: TypeId) -> bool {
    matches!(types.try_get(t), Some(Type::Struct(_))) && !types.is_address(t) && contains_itself(types, t)
}

/// The leaves of a value of type `t`, in depth-first field order.
pub fn leaves(types: &TypeTable, t: TypeId) -> Vec<Leaf> {
    let mut out = Vec::new();
    collect(types, t, &mut Vec::new(), &mut out);
    out
}

fn collect(types: &TypeTable, t: TypeId, path: &mut Vec<u32>, out: &mut Vec<Leaf>) {
    if !has_tangent(types, t) {
        return;
    }
    if types.is_address(t) || holds_itself(types, t) {
        out.push(Leaf { path: path.clone(), kind: LeafKind::Fdata, ty: t });
        return;
    }
    match types.try_get(t) {
        Some(Type::Scalar(_)) => out.push(Leaf { path: path.clone(), kind: LeafKind::Rdata, ty: t }),
        Some(Type::Tuple(items)) => {
            for (i, &item) in items.clone().iter().enumerate() {
                path.push(i as u32);
                collect(types, item, path, out);
                path.pop();
            }
        }
        Some(Type::Struct(_)) => {
            let fields: Vec<TypeId> =
                types.as_struct(t).map(|(_, d)| d.fields.iter().map(|f| f.1).collect()).unwrap_or_default();
            for (i, field) in fields.into_iter().enumerate() {
                path.push(i as u32);
                collect(types, field, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The rdata leaves of `t`.
pub fn rdata_leaves(types: &TypeTable, t: TypeId) -> Vec<Leaf> {
    leaves(types, t).into_iter().filter(|l| l.kind == LeafKind::Rdata).collect()
}

/// The fdata leaves of `t`.
pub fn fdata_leaves(types: &TypeTable, t: TypeId) -> Vec<Leaf> {
    leaves(types, t).into_iter().filter(|l| l.kind == LeafKind::Fdata).collect()
}

/// The number of rdata leaves of `t`.
pub fn rdata_count(types: &TypeTable, t: TypeId) -> usize {
    leaves(types, t).iter().filter(|l| l.kind == LeafKind::Rdata).count()
}

/// The number of fdata leaves of `t`.
pub fn fdata_count(types: &TypeTable, t: TypeId) -> usize {
    leaves(types, t).iter().filter(|l| l.kind == LeafKind::Fdata).count()
}

/// For a tuple or immutable struct type, where each field's leaves of `kind` start in
/// the value's leaf list, and how many there are.
pub fn field_leaf_ranges(types: &TypeTable, t: TypeId, kind: LeafKind) -> Vec<std::ops::Range<usize>> {
    let fields: Vec<TypeId> = match types.try_get(t) {
        Some(Type::Tuple(items)) => items.clone(),
        Some(Type::Struct(_)) => {
            types.as_struct(t).map(|(_, d)| d.fields.iter().map(|f| f.1).collect()).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let mut start = 0;
    fields
        .into_iter()
        .map(|f| {
            let n = leaves(types, f).iter().filter(|l| l.kind == kind).count();
            let r = start..start + n;
            start += n;
            r
        })
        .collect()
}

/// The tangent type of `t`: `f64` for `f64`; the same array type for `f64` arrays;
/// `ref<tangent>` for a ref; a tuple of field tangents for tuples and immutable structs
/// (the immutable struct `S$tan` for one that holds itself, which a tuple cannot); the
/// mut struct `S$tan` of field tangents for a `mut struct S`; and `()` for every type
/// without a tangent (`i64`, `bool`, their arrays, aggregates of them).
pub fn tangent_type(types: &mut TypeTable, t: TypeId) -> TypeId {
    if !has_tangent(types, t) {
        return TypeTable::UNIT;
    }
    match types.get(t).clone() {
        Type::Scalar(_) | Type::Array { .. } => t,
        Type::Ref(inner) => {
            let ti = tangent_type(types, inner);
            types.intern(Type::Ref(ti))
        }
        Type::Tuple(items) => {
            let ts: Vec<TypeId> = items.iter().map(|&i| tangent_type(types, i)).collect();
            types.intern(Type::Tuple(ts))
        }
        Type::Struct(s) => {
            let def = types.struct_def(s).clone();
            // An immutable struct's tangent is the tuple of its fields' tangents, unless
            // it holds itself (a recursive function's tape, holding its calls' tapes): a
            // tuple cannot, so its tangent is the immutable struct `S$tan`.
            if !def.mutable && !contains_itself(types, t) {
                let ts: Vec<TypeId> = def.fields.iter().map(|f| tangent_type(types, f.1)).collect();
                return types.intern(Type::Tuple(ts));
            }
            let name = format!("{}$tan", def.name);
            if let Some(sid) = types.struct_by_name(&name) {
                return types.intern(Type::Struct(sid));
            }
            let mutable = def.mutable;
            let (sid, ty) = types.declare_struct(StructDef { name, mutable, fields: Vec::new() });
            let fields: Vec<(String, TypeId)> =
                def.fields.iter().map(|(n, ft)| (n.clone(), tangent_type(types, *ft))).collect();
            types.struct_def_mut(sid).fields = fields;
            ty
        }
        Type::Stack(inner) => {
            let ti = tangent_type(types, inner);
            types.intern(Type::Stack(ti))
        }
    }
}
