//! Moving values between the interpreter's representation ([`Val`]) and native memory:
//! arguments go into the arena before a call, results and the arguments' new state come
//! back after it. Identity is preserved both ways: one `Rc` becomes one native block,
//! and a native block that came from an argument comes back as that argument's `Rc`.

use crate::layout::{alloc, Ctx};
use crate::runtime::{array_header, ArrayRef};
use mcir_interp::{Array, ArrayData, RuntimeErrorKind as Kind, Val};
use mcir_ir::{Scalar, Type, TypeId, TypeTable};
use std::collections::HashMap;
use std::rc::Rc;

/// Native blocks made from argument objects: native address → (the object, its type).
pub(crate) type Inputs = HashMap<u64, (Val, TypeId)>;

fn key(v: &Val) -> Option<usize> {
    match v {
        Val::Array(a) => Some(Rc::as_ptr(a) as *const () as usize),
        Val::Ref(c) => Some(Rc::as_ptr(c) as *const () as usize),
        Val::Mut(m) => Some(Rc::as_ptr(m) as *const () as usize),
        _ => None,
    }
}

/// The machine word for `v` (of type `ty`), allocating what it points to in the arena.
pub(crate) fn to_native(
    types: &TypeTable,
    rt: *mut Ctx,
    ty: TypeId,
    v: &Val,
    seen: &mut HashMap<usize, u64>,
    inputs: &mut Inputs,
) -> Result<u64, Kind> {
    if let Some(k) = key(v) {
        if let Some(&p) = seen.get(&k) {
            return Ok(p);
        }
    }
    let bad = || Kind::Internal(format!("a value does not fit its type {}", types.display(ty)));
    Ok(match (types.get(ty), v) {
        (_, Val::F64(x)) => x.to_bits(),
        (_, Val::I64(i)) => *i as u64,
        (_, Val::Bool(b)) => *b as u64,
        (_, Val::Unit) => 0,
        (Type::Array { elem, .. }, Val::Array(a)) => {
            // The array's own buffer, without a copy: generated code reads and writes it
            // in place. `inputs` keeps the `Rc` alive for the call, and nothing else can
            // touch the buffer while the call runs on this thread.
            let (data, len) = {
                let mut guard = a.data.try_borrow_mut().map_err(|_| bad())?;
                match (&mut *guard, elem) {
                    (ArrayData::F64(d), Scalar::F64) => (d.as_mut_ptr() as *mut u8, d.len()),
                    (ArrayData::I64(d), Scalar::I64) => (d.as_mut_ptr() as *mut u8, d.len()),
                    // `bool` is one byte holding 0 or 1, as generated code stores it.
                    (ArrayData::Bool(d), Scalar::Bool) => (d.as_mut_ptr() as *mut u8, d.len()),
                    _ => return Err(bad()),
                }
            };
            let p = array_header(rt, data, len, &a.shape)? as u64;
            seen.insert(key(v).unwrap_or(0), p);
            inputs.insert(p, (v.clone(), ty));
            p
        }
        (Type::Ref(inner), Val::Ref(cell)) => {
            let block = alloc(rt, 8, false)?;
            let p = block as u64;
            seen.insert(key(v).unwrap_or(0), p);
            inputs.insert(p, (v.clone(), ty));
            let content = to_native(types, rt, *inner, &cell.borrow(), seen, inputs)?;
            // SAFETY: `block` is a fresh 8-byte block.
            unsafe { *(block as *mut u64) = content };
            p
        }
        (Type::Tuple(items), Val::Agg(fields)) => {
            let items = items.clone();
            aggregate(types, rt, &items, fields, seen, inputs)?
        }
        (Type::Struct(s), Val::Agg(fields)) => {
            let items: Vec<TypeId> = types.struct_def(*s).fields.iter().map(|f| f.1).collect();
            aggregate(types, rt, &items, fields, seen, inputs)?
        }
        (Type::Struct(s), Val::Mut(fields)) => {
            let items: Vec<TypeId> = types.struct_def(*s).fields.iter().map(|f| f.1).collect();
            let block = alloc(rt, 8 * items.len().max(1) as u64, false)?;
            let p = block as u64;
            seen.insert(key(v).unwrap_or(0), p);
            inputs.insert(p, (v.clone(), ty));
            let fields = fields.borrow().clone();
            for (k, (t, f)) in items.iter().zip(&fields).enumerate() {
                let w = to_native(types, rt, *t, f, seen, inputs)?;
                // SAFETY: the block has one 8-byte slot per field.
                unsafe { *(block as *mut u64).add(k) = w };
            }
            p
        }
        _ => return Err(bad()),
    })
}

fn aggregate(
    types: &TypeTable,
    rt: *mut Ctx,
    items: &[TypeId],
    fields: &[Val],
    seen: &mut HashMap<usize, u64>,
    inputs: &mut Inputs,
) -> Result<u64, Kind> {
    if items.is_empty() {
        return Ok(0);
    }
    let block = alloc(rt, 8 * items.len() as u64, false)?;
    for (k, (t, f)) in items.iter().zip(fields).enumerate() {
        let w = to_native(types, rt, *t, f, seen, inputs)?;
        // SAFETY: the block has one 8-byte slot per item.
        unsafe { *(block as *mut u64).add(k) = w };
    }
    Ok(block as u64)
}

fn slot(p: u64, k: usize) -> u64 {
    // SAFETY: callers pass blocks generated code or `to_native` built for this type.
    unsafe { *(p as *const u64).add(k) }
}

/// The value a machine word of type `ty` stands for. `known` maps native blocks to the
/// objects already made for them (seeded with the arguments).
pub(crate) fn from_native(types: &TypeTable, ty: TypeId, w: u64, known: &mut HashMap<u64, Val>) -> Val {
    match types.get(ty) {
        Type::Scalar(Scalar::F64) => Val::F64(f64::from_bits(w)),
        Type::Scalar(Scalar::I64) => Val::I64(w as i64),
        Type::Scalar(Scalar::Bool) => Val::Bool(w & 0xff != 0),
        Type::Tuple(items) if items.is_empty() => Val::Unit,
        _ if w == 0 => Val::Unit,
        Type::Array { elem, .. } => {
            if let Some(v) = known.get(&w) {
                return v.clone();
            }
            let a = ArrayRef { header: w as *mut u8 };
            let data = match elem {
                Scalar::F64 => ArrayData::F64(a.f64s().to_vec()),
                Scalar::I64 => ArrayData::I64(a.i64s().to_vec()),
                Scalar::Bool => ArrayData::Bool(a.bools().iter().map(|&b| b != 0).collect()),
            };
            let v = Val::Array(Array::new(a.shape().to_vec(), data));
            known.insert(w, v.clone());
            v
        }
        Type::Ref(inner) => {
            if let Some(v) = known.get(&w) {
                return v.clone();
            }
            let v = Val::new_ref(Val::Unit);
            known.insert(w, v.clone());
            let content = from_native(types, *inner, slot(w, 0), known);
            if let Val::Ref(c) = &v {
                *c.borrow_mut() = content;
            }
            v
        }
        Type::Tuple(items) => {
            let items = items.clone();
            Val::Agg(
                items.iter().enumerate().map(|(k, &t)| from_native(types, t, slot(w, k), known)).collect(),
            )
        }
        Type::Struct(s) => {
            let def = types.struct_def(*s);
            let items: Vec<TypeId> = def.fields.iter().map(|f| f.1).collect();
            if !def.mutable {
                return Val::Agg(
                    items
                        .iter()
                        .enumerate()
                        .map(|(k, &t)| from_native(types, t, slot(w, k), known))
                        .collect(),
                );
            }
            if let Some(v) = known.get(&w) {
                return v.clone();
            }
            let v = Val::new_mut(Vec::new());
            known.insert(w, v.clone());
            let fields: Vec<Val> =
                items.iter().enumerate().map(|(k, &t)| from_native(types, t, slot(w, k), known)).collect();
            if let Val::Mut(m) = &v {
                *m.borrow_mut() = fields;
            }
            v
        }
        Type::Stack(_) => Val::Unit,
    }
}

/// After a call: copies the new state of every argument object back into it.
pub(crate) fn write_back(types: &TypeTable, inputs: &Inputs, known: &mut HashMap<u64, Val>) {
    for (&p, (v, _)) in inputs {
        known.insert(p, v.clone());
    }
    for (&p, (v, ty)) in inputs {
        match (v, types.get(*ty)) {
            // Arrays were updated in place.
            (Val::Array(_), _) => {}
            (Val::Ref(c), Type::Ref(inner)) => {
                let content = from_native(types, *inner, slot(p, 0), known);
                *c.borrow_mut() = content;
            }
            (Val::Mut(m), Type::Struct(s)) => {
                let items: Vec<TypeId> = types.struct_def(*s).fields.iter().map(|f| f.1).collect();
                let fields: Vec<Val> = items
                    .iter()
                    .enumerate()
                    .map(|(k, &t)| from_native(types, t, slot(p, k), known))
                    .collect();
                *m.borrow_mut() = fields;
            }
            _ => {}
        }
    }
}
