//! Forward mode: Jacobian-vector products through the derived tangent functions, with
//! tangents in and out as runtime values or JSON (CLI.md `jvp`).

use crate::error::{ArgError, GradError};
use crate::grad::{decode_forward_tangent, write_tangent, AdError};
use crate::Program;
use mcir_ad::pushforward::Tangents;
use mcir_interp::{Limits, Val};
use mcir_ir::{FuncId, Module};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// What a JVP computes: the function's value, its tangent, and the tangent of every
/// argument's state after the call (values of tangent type; `()` where there is none).
#[derive(Clone, Debug)]
pub struct Jvp {
    /// The returned value (`None` for `()`).
    pub value: Option<Val>,
    /// The tangent of the returned value (`()` when it has none).
    pub tangent: Val,
    /// One tangent per argument, for its state after the call.
    pub args_tangent: Vec<Val>,
}

/// The compiled JVP of one function, shared by every call that needs it.
pub(crate) struct JvpRunner {
    tangents: Tangents,
    driver: FuncId,
    native: OnceLock<Result<mcir_jit::Jit, mcir_jit::JitError>>,
}

impl std::fmt::Debug for JvpRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JvpRunner(@{})", self.tangents.module.funcs[self.driver].name)
    }
}

/// The JVP runners of a program, by function.
pub(crate) type JvpCache = Mutex<HashMap<FuncId, Arc<JvpRunner>>>;

impl Program {
    fn jvp_runner(&self, func: FuncId) -> Result<Arc<JvpRunner>, AdError> {
        if let Some(r) = self.jvp_cache.lock().ok().and_then(|c| c.get(&func).cloned()) {
            return Ok(r);
        }
        let mut tangents = mcir_ad::pushforward::tangents(&self.module, &[func], 1)?;
        let driver = mcir_ad::pushforward::jvp_driver(&mut tangents, func)?;
        let runner = Arc::new(JvpRunner { tangents, driver, native: Default::default() });
        if let Ok(mut c) = self.jvp_cache.lock() {
            c.insert(func, runner.clone());
        }
        Ok(runner)
    }

    /// The module with the tangent functions of `func` and what it calls (for printing).
    pub fn tangent_module(&self, funcs: &[FuncId]) -> Result<Tangents, AdError> {
        mcir_ad::pushforward::tangents(&self.module, funcs, 1)
    }

    /// The JVP of `func` at `args` along `tangents` (one value of tangent type per
    /// argument). The arguments are left in their state after the call.
    pub fn jvp(
        &self,
        func: FuncId,
        args: &[Val],
        tangents: &[Val],
        limits: &Limits,
    ) -> Result<Jvp, GradError> {
        // Native code reads a shadow where its primal's index was checked: shapes must
        // match before the call.
        let f = &self.module.funcs[func];
        if args.len() != f.params.len() || tangents.len() != f.params.len() {
            return Err(GradError::Args(ArgError {
                message: format!(
                    "`{}` takes {} arguments; {} arguments and {} tangents were given",
                    f.name,
                    f.params.len(),
                    args.len(),
                    tangents.len()
                ),
            }));
        }
        for (i, ((&t, x), dx)) in f.params.iter().zip(args).zip(tangents).enumerate() {
            check_tangent(&self.module.types, t, x, dx, &format!("tangent[{i}]")).map_err(GradError::Args)?;
        }
        let runner = self.jvp_runner(func).map_err(GradError::Derive)?;
        let module = &runner.tangents.module;
        let mut call_args: Vec<Val> = args.to_vec();
        call_args.extend(tangents.iter().cloned());
        let out = match self.engine {
            crate::Engine::Interpreter => {
                mcir_interp::Interpreter::new(module, limits.clone()).call(runner.driver, call_args)
            }
            crate::Engine::Jit => {
                let jit = runner
                    .native
                    .get_or_init(|| mcir_jit::Jit::compile_reachable(module, &[runner.driver]))
                    .as_ref()
                    .map_err(|e| GradError::Runtime(crate::native_error(e.clone())))?;
                jit.call(runner.driver, &call_args, limits)
            }
        }
        .map_err(GradError::Runtime)?;
        let Some(Val::Agg(items)) = out else {
            return Err(GradError::Runtime(crate::grad::internal_error("the JVP driver returned no tuple")));
        };
        let ret = module.funcs[func].ret;
        Ok(Jvp {
            value: if ret.is_some() { items.first().cloned() } else { None },
            tangent: items.get(1).cloned().unwrap_or(Val::Unit),
            args_tangent: items.iter().skip(2).cloned().collect(),
        })
    }

    /// `mcc jvp`: the value, its tangent and the tangent of every argument's state after
    /// the call, as `{"value": V, "tangent": T, "args_tangent": [T1, ...]}`. `tangent` is
    /// a JSON array with the tangent of each argument upon entry (`null` = zero).
    pub fn jvp_json(
        &self,
        func: FuncId,
        args_json: &str,
        tangent_json: &str,
        limits: &Limits,
    ) -> Result<String, GradError> {
        let module = &self.module;
        let f = &module.funcs[func];
        let args = crate::json::decode_args(module, func, args_json).map_err(GradError::Args)?;
        let j: Json = serde_json::from_str(tangent_json).map_err(|e| {
            GradError::Args(ArgError { message: format!("--tangent is not valid JSON: {e}") })
        })?;
        let Json::Array(items) = j else {
            return Err(GradError::Args(ArgError {
                message: "--tangent must be a JSON array with one tangent per argument".into(),
            }));
        };
        if items.len() != f.params.len() {
            return Err(GradError::Args(ArgError {
                message: format!(
                    "--tangent has {} elements, but `{}` takes {} arguments",
                    items.len(),
                    f.name,
                    f.params.len()
                ),
            }));
        }
        let mut tangents = Vec::new();
        for (i, (item, &t)) in items.iter().zip(&f.params).enumerate() {
            let path = format!("--tangent[{i}]");
            tangents.push(
                decode_forward_tangent(&module.types, t, item, args.get(i), &path)
                    .map_err(GradError::Args)?,
            );
        }
        let out = self.jvp(func, &args, &tangents, limits)?;
        Ok(encode_jvp_output(module, func, &out))
    }
}

/// Checks that `dx` is a tangent of `x`, a value of type `t`: the tangent type's
/// structure, and arrays of the same shapes.
fn check_tangent(
    types: &mcir_ir::TypeTable,
    t: mcir_ir::TypeId,
    x: &Val,
    dx: &Val,
    path: &str,
) -> Result<(), ArgError> {
    use mcir_ir::Type;
    let bad = |what: &str| Err(ArgError { message: format!("{path}: {what}") });
    if !mcir_ad::tangent::has_tangent(types, t) {
        return match dx {
            Val::Unit => Ok(()),
            _ => bad("a value without a derivative has the tangent ()"),
        };
    }
    match (types.get(t), x, dx) {
        (Type::Scalar(_), _, Val::F64(_)) => Ok(()),
        (Type::Array { .. }, Val::Array(a), Val::Array(d)) => {
            let same_kind = matches!(&*d.data.borrow(), mcir_interp::ArrayData::F64(_));
            if a.shape != d.shape || !same_kind {
                return bad(&format!("an f64 array of shape {:?} is needed, like its argument", a.shape));
            }
            Ok(())
        }
        (Type::Ref(inner), Val::Ref(c), Val::Ref(dc)) => {
            if std::rc::Rc::ptr_eq(c, dc) {
                return bad("a tangent may not share memory with its argument");
            }
            check_tangent(types, *inner, &c.borrow(), &dc.borrow(), path)
        }
        (Type::Tuple(items), Val::Agg(xs), Val::Agg(ds))
            if xs.len() == items.len() && ds.len() == items.len() =>
        {
            for (k, ((&it, xv), dv)) in items.iter().zip(xs.iter()).zip(ds.iter()).enumerate() {
                check_tangent(types, it, xv, dv, &format!("{path}[{k}]"))?;
            }
            Ok(())
        }
        (Type::Struct(_), _, _) => {
            let Some((_, def)) = types.as_struct(t) else { return bad("an unknown struct") };
            let (xs, ds): (Vec<Val>, Vec<Val>) = match (x, dx) {
                (Val::Agg(xs), Val::Agg(ds)) if !def.mutable => (xs.to_vec(), ds.to_vec()),
                (Val::Mut(xs), Val::Mut(ds)) if def.mutable => {
                    if std::rc::Rc::ptr_eq(xs, ds) {
                        return bad("a tangent may not share memory with its argument");
                    }
                    (xs.borrow().clone(), ds.borrow().clone())
                }
                _ => return bad(&format!("a tangent of a `{}` is needed", def.name)),
            };
            if xs.len() != def.fields.len() || ds.len() != def.fields.len() {
                return bad(&format!("a tangent of a `{}` is needed", def.name));
            }
            for (((name, ft), xv), dv) in def.fields.iter().zip(&xs).zip(&ds) {
                check_tangent(types, *ft, xv, dv, &format!("{path}.{name}"))?;
            }
            Ok(())
        }
        _ => bad(&format!("the value does not fit the tangent type of `{}`", types.display(t))),
    }
}

/// `{"value": V, "tangent": T, "args_tangent": [T1, ...]}`.
pub fn encode_jvp_output(module: &Module, func: FuncId, out: &Jvp) -> String {
    let f = &module.funcs[func];
    let mut s = String::from("{\"value\": ");
    match (&out.value, f.ret) {
        (Some(v), Some(t)) => mcir_interp::json::write_value(&mut s, &module.types, t, v),
        _ => s.push_str("null"),
    }
    s.push_str(", \"tangent\": ");
    match f.ret {
        Some(t) => write_tangent(&mut s, &module.types, t, &out.tangent),
        None => s.push_str("null"),
    }
    s.push_str(", \"args_tangent\": [");
    for (i, (&t, v)) in f.params.iter().zip(&out.args_tangent).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        write_tangent(&mut s, &module.types, t, v);
    }
    s.push_str("]}");
    s
}
