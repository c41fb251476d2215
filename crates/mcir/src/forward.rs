//! Forward mode: Jacobian-vector products through the derived tangent functions, with
//! tangents in and out as runtime values or JSON (CLI.md `jvp`).

use crate::error::{ArgError, GradError};
use crate::grad::{decode_forward_tangent, write_tangent, AdError, DriverRunner};
use crate::Program;
use mcir_ad::pushforward::Tangents;
use mcir_interp::{Limits, Val};
use mcir_ir::{FuncId, Module};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// How an argument takes part in differentiation (the model of DifferentiationInterface).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// Differentiated: it has a tangent and a cotangent.
    #[default]
    Active,
    /// Not differentiated: no tangent or seed, and its derivative is reported as `null`.
    /// Where values that depend on the other arguments are written into it, it gets a
    /// zero shadow inside the rule, so that the derivative flowing through it is not
    /// lost (`docs/ad.md`, "Argument kinds").
    Const,
    /// Scratch space: its contents upon entry must not matter to the result; its shadow
    /// starts at zero and no derivative is reported (`null`).
    Cache,
}

/// The kind of argument `i` (`Active` beyond the list).
pub(crate) fn kind_of(kinds: &[ArgKind], i: usize) -> ArgKind {
    kinds.get(i).copied().unwrap_or_default()
}

/// The JVP runners of a program, by function, width and constant arguments.
pub(crate) type JvpCache = Mutex<HashMap<(FuncId, usize, Vec<bool>), Arc<DriverRunner>>>;

impl Program {
    fn jvp_runner(
        &self,
        func: FuncId,
        width: usize,
        constant: &[bool],
    ) -> Result<Arc<DriverRunner>, AdError> {
        let key = (func, width, constant.to_vec());
        if let Some(r) = self.jvp_cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(r);
        }
        let entry = constant.iter().any(|&c| c).then(|| (func, constant.to_vec()));
        let mut tangents = mcir_ad::pushforward::tangents_with(&self.module, &[func], width, entry)?;
        let driver = mcir_ad::pushforward::jvp_driver(&mut tangents, func)?;
        let runner = Arc::new(DriverRunner::new(tangents.module, driver));
        if let Ok(mut c) = self.jvp_cache.lock() {
            c.insert(key, runner.clone());
        }
        Ok(runner)
    }

    /// The tangent module with the entry's tangent function for constant arguments.
    pub fn tangent_module_with(&self, func: FuncId, kinds: &[ArgKind]) -> Result<Tangents, AdError> {
        let constant: Vec<bool> =
            (0..self.module.funcs[func].params.len()).map(|i| kind_of(kinds, i) == ArgKind::Const).collect();
        mcir_ad::pushforward::tangents_with(&self.module, &[func], 1, Some((func, constant)))
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
        self.jvp_with(func, args, tangents, &[], limits)
    }

    /// [`Program::jvp`] with argument kinds (missing ones are active): the tangents
    /// given for constant and cache arguments are ignored (a cache's is zero), and their
    /// tangents after the call are reported as `()`.
    pub fn jvp_with(
        &self,
        func: FuncId,
        args: &[Val],
        tangents: &[Val],
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<Jvp, GradError> {
        let given = tangents_to_pass(&self.module, func, args, tangents, kinds)?;
        let f = &self.module.funcs[func];
        let constant: Vec<bool> = (0..f.params.len()).map(|i| kind_of(kinds, i) == ArgKind::Const).collect();
        let items = self.run_jvp_with(func, 1, &constant, args, &given, limits)?;
        let ret = f.ret;
        Ok(Jvp {
            value: if ret.is_some() { items.first().cloned() } else { None },
            tangent: items.get(1).cloned().unwrap_or(Val::Unit),
            args_tangent: items
                .iter()
                .skip(2)
                .enumerate()
                .map(|(i, v)| if kind_of(kinds, i) == ArgKind::Active { v.clone() } else { Val::Unit })
                .collect(),
        })
    }

    /// Runs the JVP driver of width `width` with argument kinds: constants are not
    /// differentiated, and the tangents given for constant and cache arguments must be
    /// zero. Returns what [`Program::run_jvp_with`] does.
    pub(crate) fn run_jvp_kinds(
        &self,
        func: FuncId,
        width: usize,
        kinds: &[ArgKind],
        args: &[Val],
        tangents: &[Val],
        limits: &Limits,
    ) -> Result<Vec<Val>, GradError> {
        let n = self.module.funcs[func].params.len();
        let constant: Vec<bool> = (0..n).map(|i| kind_of(kinds, i) == ArgKind::Const).collect();
        self.run_jvp_with(func, width, &constant, args, tangents, limits)
    }

    /// Runs the JVP driver of width `width`: `tangents` holds `width` lanes of one tangent
    /// per argument. Returns `(value, [tangent, args' tangents..] per lane)` flattened.
    fn run_jvp_with(
        &self,
        func: FuncId,
        width: usize,
        constant: &[bool],
        args: &[Val],
        tangents: &[Val],
        limits: &Limits,
    ) -> Result<Vec<Val>, GradError> {
        let runner = self.jvp_runner(func, width, constant).map_err(GradError::Derive)?;
        let mut call_args: Vec<Val> = args.to_vec();
        call_args.extend(tangents.iter().cloned());
        runner.run(self.engine, call_args, limits)
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
        self.jvp_json_with(func, args_json, tangent_json, &[], limits)
    }

    /// [`Program::jvp_json`] with argument kinds: the tangent of a constant or cache
    /// argument must be `null`, and its `args_tangent` is `null`.
    pub fn jvp_json_with(
        &self,
        func: FuncId,
        args_json: &str,
        tangent_json: &str,
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<String, GradError> {
        let module = &self.module;
        let args = crate::json::decode_args(module, func, args_json).map_err(GradError::Args)?;
        let tangents = decode_tangents(module, func, &args, tangent_json, kinds)?;
        let out = self.jvp_with(func, &args, &tangents, kinds, limits)?;
        Ok(encode_jvp_output(module, func, &out))
    }
}

/// Checks `tangents` against the arguments `args` of `func` — counts, and each active
/// tangent's structure and shapes, since native code reads a shadow where its primal's
/// index was checked — and returns the tangents to pass: zeros for constant and cache
/// arguments.
fn tangents_to_pass(
    module: &Module,
    func: FuncId,
    args: &[Val],
    tangents: &[Val],
    kinds: &[ArgKind],
) -> Result<Vec<Val>, GradError> {
    let f = &module.funcs[func];
    let types = &module.types;
    if args.len() != f.params.len() || tangents.len() != f.params.len() || kinds.len() > f.params.len() {
        return Err(GradError::Args(ArgError {
            message: format!(
                "`{}` takes {}; {} arguments, {} tangents and {} kinds were given",
                f.name,
                crate::arguments(f.params.len()),
                args.len(),
                tangents.len(),
                kinds.len()
            ),
        }));
    }
    let mut given = Vec::with_capacity(tangents.len());
    for (i, ((&t, x), dx)) in f.params.iter().zip(args).zip(tangents).enumerate() {
        if kind_of(kinds, i) == ArgKind::Active {
            check_tangent(types, t, x, dx, &format!("tangent[{i}]")).map_err(GradError::Args)?;
            given.push(dx.clone());
        } else {
            given.push(
                crate::grad::zero_like(types, t, Some(x), &format!("args[{i}]")).map_err(GradError::Args)?,
            );
        }
    }
    Ok(given)
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

/// A Hessian-vector product: the value, the gradient and the derivative of the gradient
/// along a direction (one value of tangent type per argument).
#[derive(Clone, Debug)]
pub struct Hvp {
    /// The returned value.
    pub value: f64,
    /// The gradient, one cotangent per argument.
    pub gradient: Vec<Val>,
    /// The Hessian-vector product, encoded like the gradient.
    pub hvp: Vec<Val>,
}

/// Forward over reverse with any cotangents: the VJP at the arguments for fixed
/// cotangents of the result and of the arguments' state after the call, and its
/// derivative along a direction. For `φ(x) = <seed, f(x)> + <seed_args, x after the
/// call>` these are `φ(x)`'s gradient and its Hessian times the direction.
#[derive(Clone, Debug)]
pub struct VjpTangent {
    /// The returned value (`None` for `()`).
    pub value: Option<Val>,
    /// The VJP: one cotangent per argument, for its state upon entry.
    pub gradient: Vec<Val>,
    /// The derivative of the VJP along the direction, encoded like it.
    pub tangent: Vec<Val>,
}

/// The second-order runners of a program, by function, seeded arguments and constant
/// arguments.
pub(crate) type HvpCache = Mutex<HashMap<(FuncId, Vec<bool>, Vec<bool>), Arc<DriverRunner>>>;

impl Program {
    /// Forward mode over the VJP driver for the seed pattern `seeded` (which arguments
    /// take a cotangent for their state after the call); with constant arguments, over
    /// the driver of the rule specialised to them. The cotangents are held fixed: the
    /// tangent function takes no tangent for them.
    fn hvp_runner(
        &self,
        func: FuncId,
        seeded: Vec<bool>,
        constant: Vec<bool>,
    ) -> Result<Arc<DriverRunner>, AdError> {
        let key = (func, seeded, constant);
        if let Some(r) = self.hvp_cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(r);
        }
        let (seeded, constant) = (&key.1, &key.2);
        let n = self.module.funcs[func].params.len();
        let entry = Some((func, (0..n).map(|i| constant.get(i).copied().unwrap_or(false)).collect()));
        let mut derived = mcir_ad::derive_with(&self.module, &crate::AdOptions::default(), entry)?;
        let seeds = mcir_ad::SeedPattern { args: seeded.clone() };
        let vjp = mcir_ad::vjp_driver_with(&mut derived, func, &seeds, constant)?;
        // The driver's parameters: the arguments, then the cotangents, held fixed.
        let held = derived.module.funcs[vjp].params.len() - constant.len();
        let driver_constant = [constant.clone(), vec![true; held]].concat();
        let mut tangents =
            mcir_ad::pushforward::tangents_with(&derived.module, &[vjp], 1, Some((vjp, driver_constant)))?;
        let driver = mcir_ad::pushforward::jvp_driver(&mut tangents, vjp)?;
        let runner = Arc::new(DriverRunner::new(tangents.module, driver));
        if let Ok(mut c) = self.hvp_cache.lock() {
            c.insert(key, runner.clone());
        }
        Ok(runner)
    }

    /// The Hessian-vector product of `func`, which must return `f64`, at `args` along
    /// `direction` (one value of tangent type per argument): forward mode applied to the
    /// derived reverse pass. The arguments come back in their entry state.
    pub fn hvp(
        &self,
        func: FuncId,
        args: &[Val],
        direction: &[Val],
        limits: &Limits,
    ) -> Result<Hvp, GradError> {
        self.hvp_with(func, args, direction, &[], limits)
    }

    /// [`Program::hvp`] with argument kinds (missing ones are active): the directions of
    /// constant and cache arguments are ignored (zero), and their gradient and HVP are
    /// reported as `()`. Constants are not differentiated at all (no shadow, no tangent).
    pub fn hvp_with(
        &self,
        func: FuncId,
        args: &[Val],
        direction: &[Val],
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<Hvp, GradError> {
        let f = &self.module.funcs[func];
        if f.ret != Some(mcir_ir::TypeTable::F64) {
            return Err(GradError::Args(ArgError {
                message: format!("a Hessian needs a function returning f64; `{}` does not", f.name),
            }));
        }
        let out = self.vjp_tangent_with(func, args, Some(Val::F64(1.0)), &[], direction, kinds, limits)?;
        let value = match out.value {
            Some(Val::F64(v)) => v,
            _ => {
                return Err(GradError::Runtime(crate::grad::internal_error(
                    "the HVP driver returned no value",
                )))
            }
        };
        Ok(Hvp { value, gradient: out.gradient, hvp: out.tangent })
    }

    /// The VJP of `func` at `args` for the cotangents `seed` (of the result; `None` =
    /// zero) and `seed_args` (of the arguments' state after the call), and its derivative
    /// along `direction` with the cotangents held fixed (see [`VjpTangent`]). Argument
    /// kinds as for [`Program::hvp_with`]; constant and cache arguments take no seed.
    #[allow(clippy::too_many_arguments)]
    pub fn vjp_tangent_with(
        &self,
        func: FuncId,
        args: &[Val],
        seed: Option<Val>,
        seed_args: &[Option<Val>],
        direction: &[Val],
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<VjpTangent, GradError> {
        let f = &self.module.funcs[func];
        let types = &self.module.types;
        let active = |i: usize| kind_of(kinds, i) == ArgKind::Active;
        if let Some(i) = (0..seed_args.len()).find(|&i| seed_args[i].is_some() && !active(i)) {
            return Err(GradError::Args(ArgError {
                message: format!("argument {i} is not active, so it takes no seed"),
            }));
        }
        if seed_args.len() > f.params.len() {
            return Err(GradError::Args(ArgError {
                message: format!(
                    "`{}` takes {}; {} seeds were given",
                    f.name,
                    crate::arguments(f.params.len()),
                    seed_args.len()
                ),
            }));
        }
        let direction = tangents_to_pass(&self.module, func, args, direction, kinds)?;
        let constant: Vec<bool> = (0..f.params.len()).map(|i| kind_of(kinds, i) == ArgKind::Const).collect();
        let seeded: Vec<bool> = (0..f.params.len())
            .map(|i| {
                matches!(seed_args.get(i), Some(Some(_))) && mcir_ad::tangent::has_tangent(types, f.params[i])
            })
            .collect();
        let runner = self.hvp_runner(func, seeded.clone(), constant).map_err(GradError::Derive)?;
        // (x.., seed, seed_args.., dx.., and zero tangents for the cotangents, which the
        // tangent function does not read)
        let mut call_args: Vec<Val> = args.to_vec();
        let mut held: Vec<Val> = Vec::new();
        if let Some(r) = f.ret.filter(|&r| mcir_ad::tangent::has_tangent(types, r)) {
            held.push(match seed {
                Some(s) => s,
                None => crate::grad::zero_like(types, r, None, "seed").map_err(GradError::Args)?,
            });
        }
        for (i, s) in seed_args.iter().enumerate() {
            if let (Some(s), true) = (s, seeded[i]) {
                held.push(s.clone());
            }
        }
        let zeros: Vec<Val> = held.iter().map(zero_numbers).collect();
        call_args.extend(held);
        call_args.extend(direction);
        call_args.extend(zeros);
        let items = runner.run(self.engine, call_args, limits)?;
        let shape_error =
            || GradError::Runtime(crate::grad::internal_error("the second-order driver returned no VJP"));
        // items: (value, gradients..), its tangent (tvalue, tangents..), the arguments' tangents.
        let (Some(Val::Agg(primal)), Some(Val::Agg(tangent))) = (items.first(), items.get(1)) else {
            return Err(shape_error());
        };
        let value = if f.ret.is_some() { primal.first().cloned() } else { None };
        // `()` for arguments without a derivative, whichever engine ran.
        let active_only = |(i, v): (usize, &Val)| {
            let differentiated =
                kind_of(kinds, i) == ArgKind::Active && mcir_ad::tangent::has_tangent(types, f.params[i]);
            if differentiated {
                v.clone()
            } else {
                Val::Unit
            }
        };
        Ok(VjpTangent {
            value,
            gradient: primal.iter().skip(1).enumerate().map(active_only).collect(),
            tangent: tangent.iter().skip(1).enumerate().map(active_only).collect(),
        })
    }

    /// `mcc hvp`: `{"value": V, "gradient": [G1, ...], "hvp": [H1, ...]}` along the JSON
    /// direction `tangent` (one tangent per argument, `null` = zero).
    pub fn hvp_json(
        &self,
        func: FuncId,
        args_json: &str,
        tangent_json: &str,
        limits: &Limits,
    ) -> Result<String, GradError> {
        self.hvp_json_with(func, args_json, tangent_json, &[], limits)
    }

    /// [`Program::hvp_json`] with argument kinds: the direction of a constant or cache
    /// argument must be `null`, and its gradient and HVP are `null`.
    pub fn hvp_json_with(
        &self,
        func: FuncId,
        args_json: &str,
        tangent_json: &str,
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<String, GradError> {
        self.hvp_json_seeded(func, args_json, tangent_json, (None, None), kinds, limits)
    }

    /// `mcc hvp` with `--seed` and `--seed-args` (JSON, as for `mcc grad`): the HVP of
    /// `φ(x) = <seed, f(x)> + <seed_args, x after the call>`, so for any result type;
    /// the seed is `1.0` by default for an `f64` result. Prints
    /// `{"value": V, "gradient": [G1, ...], "hvp": [H1, ...]}`, the gradient being `φ`'s
    /// (the VJP).
    pub fn hvp_json_seeded(
        &self,
        func: FuncId,
        args_json: &str,
        tangent_json: &str,
        (seed, seed_args): (Option<&str>, Option<&str>),
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<String, GradError> {
        let module = &self.module;
        let args = crate::json::decode_args(module, func, args_json).map_err(GradError::Args)?;
        let direction = decode_tangents(module, func, &args, tangent_json, kinds)?;
        let (seed, seeds) = self.decode_seeds(func, &args, seed, seed_args, kinds, limits)?;
        let out = self.vjp_tangent_with(func, &args, seed, &seeds, &direction, kinds, limits)?;
        let f = &module.funcs[func];
        let mut s = String::from("{\"value\": ");
        match (&out.value, f.ret) {
            (Some(v), Some(t)) => mcir_interp::json::write_value(&mut s, &module.types, t, v),
            _ => s.push_str("null"),
        }
        for (key, list) in [("gradient", &out.gradient), ("hvp", &out.tangent)] {
            s.push_str(&format!(", \"{key}\": ["));
            for (i, (&t, v)) in f.params.iter().zip(list).enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                write_tangent(&mut s, &module.types, t, v);
            }
            s.push(']');
        }
        s.push('}');
        Ok(s)
    }
}

/// A value of the same structure and shapes with every number zero and no memory shared
/// with `v`: the tangent of a cotangent that is held fixed.
fn zero_numbers(v: &Val) -> Val {
    use mcir_interp::ArrayData;
    match v {
        Val::F64(_) => Val::F64(0.0),
        Val::Array(a) => {
            let data = match &*a.data.borrow() {
                ArrayData::F64(d) => ArrayData::F64(vec![0.0; d.len()]),
                other => other.clone(),
            };
            Val::Array(std::rc::Rc::new(mcir_interp::Array {
                shape: a.shape.clone(),
                data: std::cell::RefCell::new(data),
            }))
        }
        Val::Ref(c) => Val::new_ref(zero_numbers(&c.borrow())),
        Val::Agg(items) => Val::Agg(items.iter().map(zero_numbers).collect()),
        Val::Mut(fields) => Val::new_mut(fields.borrow().iter().map(zero_numbers).collect()),
        other => other.clone(),
    }
}

/// Decodes `--tangent`: a JSON array with one tangent per argument of `func`, `null`
/// for constant and cache arguments.
fn decode_tangents(
    module: &Module,
    func: FuncId,
    args: &[Val],
    tangent_json: &str,
    kinds: &[ArgKind],
) -> Result<Vec<Val>, GradError> {
    let f = &module.funcs[func];
    let j: Json = serde_json::from_str(tangent_json)
        .map_err(|e| GradError::Args(ArgError { message: format!("--tangent is not valid JSON: {e}") }))?;
    let Json::Array(items) = j else {
        return Err(GradError::Args(ArgError {
            message: "--tangent must be a JSON array with one tangent per argument".into(),
        }));
    };
    if items.len() != f.params.len() {
        return Err(GradError::Args(ArgError {
            message: format!(
                "--tangent has {} elements, but `{}` takes {}",
                items.len(),
                f.name,
                crate::arguments(f.params.len())
            ),
        }));
    }
    let mut tangents = Vec::new();
    for (i, (item, &t)) in items.iter().zip(&f.params).enumerate() {
        let kind = kind_of(kinds, i);
        if kind != ArgKind::Active && !item.is_null() {
            let what = if kind == ArgKind::Const { "constant" } else { "a cache" };
            return Err(GradError::Args(ArgError {
                message: format!("--tangent[{i}]: argument {i} is {what}, so its tangent must be null"),
            }));
        }
        let path = format!("--tangent[{i}]");
        tangents.push(
            decode_forward_tangent(&module.types, t, item, args.get(i), &path).map_err(GradError::Args)?,
        );
    }
    Ok(tangents)
}
