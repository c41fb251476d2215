//! Converting between JSON (the encoding of CLI.md) and runtime values.

use crate::error::ArgError;
use mcir_interp::json::write_value;
use mcir_interp::{Array, ArrayData, Val};
use mcir_ir::{FuncId, Module, Scalar, Type, TypeId, TypeTable};
use serde_json::Value as Json;

/// Parses a JSON array of arguments for `func` and checks it against the parameters.
///
/// The text is decoded straight into values of the parameters' types, so a large array
/// takes its elements' size in memory and not that of a JSON tree (about four times
/// more). Text that does not fit is parsed again as a tree to say exactly what is wrong.
pub fn decode_args(module: &Module, func: FuncId, text: &str) -> Result<Vec<Val>, ArgError> {
    if let Ok(args) = typed::decode_args(&module.types, &module.funcs[func].params, text) {
        return Ok(args);
    }
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

/// Decoding JSON text straight into values of known types (see [`decode_args`]).
mod typed {
    use mcir_interp::{Array, ArrayData, Val};
    use mcir_ir::{Scalar, Type, TypeId, TypeTable};
    use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    /// The arguments of a function with parameters `params`, from `text`; any error
    /// means only that the text does not fit (the caller finds out how).
    pub(super) fn decode_args(types: &TypeTable, params: &[TypeId], text: &str) -> Result<Vec<Val>, ()> {
        let mut de = serde_json::Deserializer::from_str(text);
        let args = Args { types, params }.deserialize(&mut de).map_err(|_| ())?;
        de.end().map_err(|_| ())?;
        Ok(args)
    }

    struct Args<'a> {
        types: &'a TypeTable,
        params: &'a [TypeId],
    }

    impl<'de> DeserializeSeed<'de> for Args<'_> {
        type Value = Vec<Val>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Val>, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Args<'_> {
        type Value = Vec<Val>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array of arguments")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Val>, A::Error> {
            let mut out = Vec::with_capacity(self.params.len());
            for &ty in self.params {
                let v = seq.next_element_seed(Value { types: self.types, ty })?;
                out.push(v.ok_or_else(|| A::Error::custom("too few arguments"))?);
            }
            if seq.next_element::<IgnoredAny>()?.is_some() {
                return Err(A::Error::custom("too many arguments"));
            }
            Ok(out)
        }
    }

    /// A value of type `ty`.
    struct Value<'a> {
        types: &'a TypeTable,
        ty: TypeId,
    }

    impl<'de> DeserializeSeed<'de> for Value<'_> {
        type Value = Val;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
            let Some(t) = self.types.try_get(self.ty) else { return Err(D::Error::custom("unknown type")) };
            match t {
                Type::Scalar(s) => d.deserialize_any(ScalarOf(*s)),
                Type::Array { elem, rank } => {
                    let mut shape = vec![None; *rank as usize];
                    let mut data = match elem {
                        Scalar::F64 => ArrayData::F64(Vec::new()),
                        Scalar::I64 => ArrayData::I64(Vec::new()),
                        Scalar::Bool => ArrayData::Bool(Vec::new()),
                    };
                    Level { elem: *elem, depth: 0, shape: &mut shape, data: &mut data }.deserialize(d)?;
                    // An empty level leaves the extents below it unknown: zero.
                    let shape: Vec<usize> = shape.into_iter().map(|e| e.unwrap_or(0)).collect();
                    Ok(Val::Array(Array::new(shape, data)))
                }
                Type::Ref(inner) => Ok(Val::new_ref(Value { types: self.types, ty: *inner }.deserialize(d)?)),
                Type::Stack(_) => Err(D::Error::custom("a stack cannot be given as JSON")),
                Type::Tuple(items) => d.deserialize_seq(Fields { types: self.types, items }),
                Type::Struct(_) => d.deserialize_map(Record { types: self.types, ty: self.ty }),
            }
        }
    }

    /// A scalar: a number (or `"NaN"`, `"Infinity"`, `"-Infinity"` for `f64`), a bool.
    struct ScalarOf(Scalar);

    impl<'de> Visitor<'de> for ScalarOf {
        type Value = Val;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a scalar")
        }

        fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Val, E> {
            match self.0 {
                Scalar::F64 => Ok(Val::F64(x)),
                _ => Err(E::custom("not an integer")),
            }
        }

        fn visit_i64<E: serde::de::Error>(self, x: i64) -> Result<Val, E> {
            match self.0 {
                Scalar::F64 => Ok(Val::F64(x as f64)),
                Scalar::I64 => Ok(Val::I64(x)),
                Scalar::Bool => Err(E::custom("not a bool")),
            }
        }

        fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<Val, E> {
            match self.0 {
                Scalar::F64 => Ok(Val::F64(x as f64)),
                Scalar::I64 => i64::try_from(x).map(Val::I64).map_err(|_| E::custom("too large")),
                Scalar::Bool => Err(E::custom("not a bool")),
            }
        }

        fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Val, E> {
            match self.0 {
                Scalar::Bool => Ok(Val::Bool(b)),
                _ => Err(E::custom("not a number")),
            }
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Val, E> {
            match (self.0, s) {
                (Scalar::F64, "NaN") => Ok(Val::F64(f64::NAN)),
                (Scalar::F64, "Infinity") => Ok(Val::F64(f64::INFINITY)),
                (Scalar::F64, "-Infinity") => Ok(Val::F64(f64::NEG_INFINITY)),
                _ => Err(E::custom("not a number")),
            }
        }
    }

    /// One level of a nested array: its items, all of the extent the first had.
    struct Level<'s> {
        elem: Scalar,
        depth: usize,
        shape: &'s mut [Option<usize>],
        data: &'s mut ArrayData,
    }

    impl<'de> DeserializeSeed<'de> for Level<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            if self.depth == self.shape.len() {
                let v = d.deserialize_any(ScalarOf(self.elem))?;
                match (self.data, v) {
                    (ArrayData::F64(out), Val::F64(x)) => out.push(x),
                    (ArrayData::I64(out), Val::I64(x)) => out.push(x),
                    (ArrayData::Bool(out), Val::Bool(x)) => out.push(x),
                    _ => return Err(D::Error::custom("wrong element")),
                }
                return Ok(());
            }
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Level<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut count = 0usize;
            loop {
                let level =
                    Level { elem: self.elem, depth: self.depth + 1, shape: self.shape, data: self.data };
                if seq.next_element_seed(level)?.is_none() {
                    break;
                }
                count += 1;
            }
            match self.shape[self.depth] {
                Some(n) if n != count => Err(A::Error::custom("ragged")),
                // Below an empty level nothing was seen: an extent seen later elsewhere
                // (`[[], [1.0]]`) is ragged too.
                _ if count == 0 && self.shape[self.depth + 1..].iter().any(|e| e.is_some_and(|n| n > 0)) => {
                    Err(A::Error::custom("ragged"))
                }
                _ => {
                    self.shape[self.depth] = Some(count);
                    Ok(())
                }
            }
        }
    }

    /// The items of a tuple.
    struct Fields<'a> {
        types: &'a TypeTable,
        items: &'a [TypeId],
    }

    impl<'de> Visitor<'de> for Fields<'_> {
        type Value = Val;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a tuple")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
            let mut out = Vec::with_capacity(self.items.len());
            for &ty in self.items {
                let v = seq.next_element_seed(Value { types: self.types, ty })?;
                out.push(v.ok_or_else(|| A::Error::custom("too few items"))?);
            }
            if seq.next_element::<IgnoredAny>()?.is_some() {
                return Err(A::Error::custom("too many items"));
            }
            Ok(Val::Agg(out.into()))
        }
    }

    /// The fields of a struct, each given once, none unknown.
    struct Record<'a> {
        types: &'a TypeTable,
        ty: TypeId,
    }

    impl<'de> Visitor<'de> for Record<'_> {
        type Value = Val;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a struct")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
            let Some((_, def)) = self.types.as_struct(self.ty) else {
                return Err(A::Error::custom("not a struct"));
            };
            let mut fields: Vec<Option<Val>> = vec![None; def.fields.len()];
            while let Some(name) = map.next_key::<String>()? {
                let Some(k) = def.field_index(&name) else { return Err(A::Error::custom("unknown field")) };
                if fields[k].is_some() {
                    return Err(A::Error::custom("a field given twice"));
                }
                fields[k] = Some(map.next_value_seed(Value { types: self.types, ty: def.fields[k].1 })?);
            }
            let fields: Option<Vec<Val>> = fields.into_iter().collect();
            let fields = fields.ok_or_else(|| A::Error::custom("a field is missing"))?;
            Ok(if def.mutable { Val::new_mut(fields) } else { Val::Agg(fields.into()) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every text either decodes the same way straight into values and through a JSON
    /// tree, or fails to decode straight (and the tree names the problem).
    #[test]
    fn typed_decoding_agrees_with_the_tree() {
        let source = "struct P { a: f64, b: i64 }\nmut struct M { v: f64[] }\n\
                      fn f(x: f64[,], y: i64[], z: bool[,,], t: (f64, P), m: M, r: ref<f64>, s: f64) -> f64 { return s; }";
        let program = crate::Program::compile("t.mcir", source).unwrap();
        let module = program.module();
        let func = program.entry(Some("f")).unwrap();
        let params = &module.funcs[func].params;
        let cases = [
            r#"[[[1, 2.5], [3, 4]], [1, -2], [[[true]]], [1, {"a": 1, "b": 2}], {"v": [1]}, 2, 3]"#,
            r#"[[], [], [], [1e300, {"b": 2, "a": "NaN"}], {"v": []}, "Infinity", "-Infinity"]"#,
            r#"[[[], []], [9223372036854775807], [[], []], [0, {"a": 0, "b": 0}], {"v": [0]}, 0, 0]"#,
            r#"[[[1], []], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[], [1]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1, 2], [3]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [1.5], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [9223372036854775808], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [[[1]]], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [[[true], [false]], [[true]]], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0, "c": 1}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0, "a": 1}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0}, 1], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, null, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, "nan"]"#,
            r#"[[1], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0]"#,
            r#"[[[1]], [], [], [0, {"a": 0, "b": 0}], {"v": []}, 0, 0] x"#,
            r#"{}"#,
        ];
        for text in cases {
            let typed = typed::decode_args(&module.types, params, text);
            let tree: Result<Vec<Val>, ()> = serde_json::from_str::<Json>(text)
                .map_err(|_| ())
                .and_then(|j| decode_arg_list(module, func, &j).map_err(|_| ()));
            match (&typed, &tree) {
                (Ok(a), Ok(b)) => {
                    let show = |vs: &[Val]| -> Vec<String> {
                        params.iter().zip(vs).map(|(&t, v)| encode(module, t, v)).collect()
                    };
                    assert_eq!(show(a), show(b), "{text}");
                }
                // Duplicate fields: the tree keeps the last; the typed decoder defers.
                (Err(()), _) => {}
                (Ok(_), Err(())) => panic!("decoded straight but not through the tree: {text}"),
            }
        }
        assert!(typed::decode_args(&module.types, params, cases[0]).is_ok());
        assert!(typed::decode_args(&module.types, params, cases[1]).is_ok());
        assert!(typed::decode_args(&module.types, params, cases[2]).is_ok());
    }
}
