//! Writing runtime values as JSON, in the encoding of CLI.md: arrays nest row-major,
//! a ref shows its content, tuples are arrays, structs are objects, and non-finite
//! floats are the strings `"NaN"`, `"Infinity"` and `"-Infinity"`.

use crate::value::{ArrayData, Val};
use mcir_ir::{Type, TypeId, TypeTable};
use std::fmt::Write;

/// A float as JSON: the shortest text that reads back as the same `f64`.
pub fn write_f64(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("\"NaN\"");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "\"Infinity\"" } else { "\"-Infinity\"" });
    } else {
        let _ = write!(out, "{x:?}");
    }
}

/// Appends the JSON encoding of `v`, a value of type `ty`.
pub fn write_value(out: &mut String, types: &TypeTable, ty: TypeId, v: &Val) {
    match (types.try_get(ty), v) {
        (_, Val::F64(x)) => write_f64(out, *x),
        (_, Val::I64(i)) => {
            let _ = write!(out, "{i}");
        }
        (_, Val::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
        (_, Val::Array(a)) => {
            let data = a.data.borrow();
            write_array(out, &a.shape, &data, 0);
        }
        (Some(Type::Ref(inner)), Val::Ref(cell)) => write_value(out, types, *inner, &cell.borrow()),
        (Some(Type::Tuple(items)), Val::Agg(fields)) => {
            out.push('[');
            for (i, (t, f)) in items.iter().zip(fields.iter()).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, types, *t, f);
            }
            out.push(']');
        }
        (Some(Type::Struct(_)), Val::Agg(fields)) => write_struct(out, types, ty, fields),
        (Some(Type::Struct(_)), Val::Mut(fields)) => write_struct(out, types, ty, &fields.borrow()),
        _ => out.push_str("null"),
    }
}

fn write_struct(out: &mut String, types: &TypeTable, ty: TypeId, fields: &[Val]) {
    out.push('{');
    if let Some((_, def)) = types.as_struct(ty) {
        for (i, ((name, t), f)) in def.fields.iter().zip(fields).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "\"{name}\": ");
            write_value(out, types, *t, f);
        }
    }
    out.push('}');
}

fn write_array(out: &mut String, shape: &[usize], data: &ArrayData, offset: usize) {
    out.push('[');
    let Some((&n, rest)) = shape.split_first() else {
        out.push(']');
        return;
    };
    let stride: usize = rest.iter().product();
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        let at = offset + i * stride;
        if rest.is_empty() {
            match data {
                ArrayData::F64(v) => write_f64(out, v.get(at).copied().unwrap_or(f64::NAN)),
                ArrayData::I64(v) => {
                    let _ = write!(out, "{}", v.get(at).copied().unwrap_or(0));
                }
                ArrayData::Bool(v) => {
                    out.push_str(if v.get(at).copied().unwrap_or(false) { "true" } else { "false" })
                }
            }
        } else {
            write_array(out, rest, data, at);
        }
    }
    out.push(']');
}
