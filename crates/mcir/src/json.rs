//! Converting between JSON (the encoding of CLI.md) and runtime values.

use crate::error::ArgError;
use mcir_interp::json::write_value;
use mcir_interp::{Array, ArrayData, Val};
use mcir_ir::{FuncId, Module, Scalar, Type, TypeId, TypeTable};
use serde_json::Value as Json;

/// Parses a JSON array of arguments for `func` and checks it against the parameters.
pub fn decode_args(module: &Module, func: FuncId, text: &str) -> Result<Vec<Val>, ArgError> {
    let json: Json = serde_json::from_str(text)
        .map_err(|e| ArgError { message: format!("the arguments are not valid JSON: {e}") })?;
    decode_arg_list(module, func, &json)
}

/// Checks a parsed JSON array of arguments against the parameters of `func`.
pub fn decode_arg_list(module: &Module, func: FuncId, json: &Json) -> Result<Vec<Val>, ArgError> {
    let f = &module.funcs[func];
    let Json::Array(items) = json else {
        return Err(ArgError {
            message: format!(
                "the arguments must be a JSON array with one element per parameter of `{}`",
                f.name
            ),
        });
    };
    if items.len() != f.params.len() {
        return Err(ArgError {
            message: format!(
                "`{}` takes {} argument{}, but {} {} given",
                f.name,
                f.params.len(),
                if f.params.len() == 1 { "" } else { "s" },
                items.len(),
                if items.len() == 1 { "was" } else { "were" }
            ),
        });
    }
    items
        .iter()
        .zip(&f.params)
        .enumerate()
        .map(|(i, (j, &t))| decode(&module.types, t, j, &format!("args[{i}]")))
        .collect()
}

fn mismatch(types: &TypeTable, ty: TypeId, j: &Json, path: &str) -> ArgError {
    ArgError { message: format!("{path} must be {}, but it is {}", describe(types, ty), describe_json(j)) }
}

/// What a JSON value is, in words.
fn describe_json(j: &Json) -> String {
    match j {
        Json::Null => "null".to_string(),
        Json::Bool(_) => "a boolean".to_string(),
        Json::Number(n) if n.is_i64() || n.is_u64() => format!("the integer {n}"),
        Json::Number(n) => format!("the number {n}"),
        Json::String(s) => format!("the string {s:?}"),
        Json::Array(a) if a.len() == 1 => "an array of 1 element".to_string(),
        Json::Array(a) => format!("an array of {} elements", a.len()),
        Json::Object(_) => "an object".to_string(),
    }
}

fn describe(types: &TypeTable, ty: TypeId) -> String {
    match types.try_get(ty) {
        Some(Type::Scalar(Scalar::F64)) => "an f64 (a number)".into(),
        Some(Type::Scalar(Scalar::I64)) => "an i64 (an integer)".into(),
        Some(Type::Scalar(Scalar::Bool)) => "a bool".into(),
        Some(Type::Array { rank, .. }) => format!("an array of rank {rank} (`{}`)", types.display(ty)),
        Some(Type::Struct(_)) => format!("a `{}` (an object keyed by field name)", types.display(ty)),
        Some(Type::Tuple(fields)) => {
            format!("a `{}` (an array of {} elements)", types.display(ty), fields.len())
        }
        _ => format!("a value of type `{}`", types.display(ty)),
    }
}

/// Decodes one value of type `ty`; `path` names it in errors.
pub fn decode(types: &TypeTable, ty: TypeId, j: &Json, path: &str) -> Result<Val, ArgError> {
    let Some(t) = types.try_get(ty) else {
        return Err(ArgError { message: format!("{path}: unknown type") });
    };
    match t {
        Type::Scalar(s) => decode_scalar(*s, j).map_err(|_| mismatch(types, ty, j, path)),
        Type::Array { elem, rank } => {
            let mut shape = Vec::new();
            let mut cur = j;
            for _ in 0..*rank {
                match cur {
                    Json::Array(items) => {
                        shape.push(items.len());
                        match items.first() {
                            Some(first) => cur = first,
                            None => {
                                // An empty level: every deeper extent is zero.
                                while shape.len() < *rank as usize {
                                    shape.push(0);
                                }
                                break;
                            }
                        }
                    }
                    _ => return Err(mismatch(types, ty, j, path)),
                }
            }
            let count: usize = shape.iter().product();
            let mut data = match elem {
                Scalar::F64 => ArrayData::F64(Vec::with_capacity(count)),
                Scalar::I64 => ArrayData::I64(Vec::with_capacity(count)),
                Scalar::Bool => ArrayData::Bool(Vec::with_capacity(count)),
            };
            fill_array(j, &shape, *elem, &mut data, path)?;
            Ok(Val::Array(Array::new(shape, data)))
        }
        Type::Ref(inner) => Ok(Val::new_ref(decode(types, *inner, j, path)?)),
        Type::Stack(_) => Err(ArgError { message: format!("{path}: a stack cannot be given as JSON") }),
        Type::Tuple(items) => match j {
            Json::Array(vals) if vals.len() == items.len() => {
                let fields: Result<Vec<Val>, _> = items
                    .iter()
                    .zip(vals)
                    .enumerate()
                    .map(|(i, (&t, v))| decode(types, t, v, &format!("{path}[{i}]")))
                    .collect();
                Ok(Val::Agg(fields?.into()))
            }
            _ => Err(mismatch(types, ty, j, path)),
        },
        Type::Struct(_) => {
            let Some((_, def)) = types.as_struct(ty) else {
                return Err(mismatch(types, ty, j, path));
            };
            let Json::Object(map) = j else {
                return Err(mismatch(types, ty, j, path));
            };
            if let Some(extra) = map.keys().find(|k| def.field_index(k).is_none()) {
                return Err(ArgError {
                    message: format!("{path}: struct `{}` has no field `{extra}`", def.name),
                });
            }
            let mut fields = Vec::new();
            for (fname, fty) in &def.fields {
                let Some(v) = map.get(fname) else {
                    return Err(ArgError {
                        message: format!("{path}: field `{fname}` of struct `{}` is missing", def.name),
                    });
                };
                fields.push(decode(types, *fty, v, &format!("{path}.{fname}"))?);
            }
            Ok(if def.mutable { Val::new_mut(fields) } else { Val::Agg(fields.into()) })
        }
    }
}

fn decode_scalar(s: Scalar, j: &Json) -> Result<Val, ()> {
    match (s, j) {
        (Scalar::F64, Json::Number(n)) => n.as_f64().map(Val::F64).ok_or(()),
        (Scalar::F64, Json::String(t)) => match t.as_str() {
            "NaN" => Ok(Val::F64(f64::NAN)),
            "Infinity" => Ok(Val::F64(f64::INFINITY)),
            "-Infinity" => Ok(Val::F64(f64::NEG_INFINITY)),
            _ => Err(()),
        },
        (Scalar::I64, Json::Number(n)) => n.as_i64().map(Val::I64).ok_or(()),
        (Scalar::Bool, Json::Bool(b)) => Ok(Val::Bool(*b)),
        _ => Err(()),
    }
}

fn fill_array(
    j: &Json,
    shape: &[usize],
    elem: Scalar,
    out: &mut ArrayData,
    path: &str,
) -> Result<(), ArgError> {
    let Some((&n, rest)) = shape.split_first() else {
        let v = decode_scalar(elem, j).map_err(|_| ArgError {
            message: format!("{path} must be {}, but it is {}", describe_scalar(elem), describe_json(j)),
        })?;
        match (out, v) {
            (ArrayData::F64(d), Val::F64(x)) => d.push(x),
            (ArrayData::I64(d), Val::I64(x)) => d.push(x),
            (ArrayData::Bool(d), Val::Bool(x)) => d.push(x),
            _ => {}
        }
        return Ok(());
    };
    match j {
        Json::Array(items) if items.len() == n => {
            for (i, item) in items.iter().enumerate() {
                fill_array(item, rest, elem, out, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Json::Array(items) => Err(ArgError {
            message: format!(
                "{path} has {} elements where {n} were expected: rows of an array must have equal lengths",
                items.len()
            ),
        }),
        _ => Err(ArgError {
            message: format!("{path} must be an array (the argument has {} more dimensions)", shape.len()),
        }),
    }
}

fn describe_scalar(s: Scalar) -> &'static str {
    match s {
        Scalar::F64 => "an f64 (a number)",
        Scalar::I64 => "an i64 (an integer)",
        Scalar::Bool => "a bool",
    }
}

/// `{"value": V, "args": [A1, ...]}` after a run of `func`.
pub fn encode_run_output(module: &Module, func: FuncId, value: Option<&Val>, args: &[Val]) -> String {
    let f = &module.funcs[func];
    let mut out = String::from("{\"value\": ");
    match (value, f.ret) {
        (Some(v), Some(t)) => write_value(&mut out, &module.types, t, v),
        _ => out.push_str("null"),
    }
    out.push_str(", \"args\": [");
    for (i, (a, &t)) in args.iter().zip(&f.params).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_value(&mut out, &module.types, t, a);
    }
    out.push_str("]}");
    out
}

/// The JSON encoding of one value of type `ty`.
pub fn encode(module: &Module, ty: TypeId, v: &Val) -> String {
    let mut out = String::new();
    write_value(&mut out, &module.types, ty, v);
    out
}
