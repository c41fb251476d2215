//! Gradients and vector-Jacobian products: the derived rules of a program run on the
//! interpreter, with cotangents in and out as runtime values or JSON (CLI.md `grad`).

use crate::error::{ArgError, GradError};
use crate::json::decode;
use crate::Program;
use mcir_ad::tangent::has_tangent;
use mcir_ad::{Derived, SeedPattern};
use mcir_interp::json::write_f64;
use mcir_interp::{Array, ArrayData, Limits, RuntimeError, Val};
use mcir_ir::{FuncId, Module, Scalar, Type, TypeId, TypeTable};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::rc::Rc;

pub use mcir_ad::{AdError, Options as AdOptions};

/// A program with the derived rule of every function, ready to compute VJPs.
#[derive(Clone, Debug)]
pub struct Differentiated {
    derived: Derived,
    drivers: HashMap<(FuncId, Vec<bool>), FuncId>,
    gradient_drivers: HashMap<(FuncId, Vec<bool>), FuncId>,
    probes: HashMap<FuncId, FuncId>,
    engine: crate::Engine,
    /// Native code of the derived module, by the function called (with what it calls).
    native: HashMap<FuncId, mcir_jit::Jit>,
}

/// What a VJP computes: the function's value and the cotangent of each argument upon
/// entry, as a value of the argument's tangent type (`()` where it has none).
#[derive(Clone, Debug)]
pub struct Vjp {
    /// The returned value (`None` for `()`).
    pub value: Option<Val>,
    /// One cotangent per argument.
    pub gradient: Vec<Val>,
}

impl Program {
    /// Derives the reverse rule of every function.
    pub fn differentiate(&self, options: &AdOptions) -> Result<Differentiated, AdError> {
        self.differentiate_with(options, None, &[])
    }

    /// [`Program::differentiate`], plus the rules of `entry` its gradients run (see
    /// [`mcir_ad::derive_with`]): one specialised to its arguments' kinds when some of
    /// them are constant, and one that restores arguments from copies when it has such
    /// arguments; [`Differentiated::pass_text`] then prints that rule for `entry`.
    pub fn differentiate_with(
        &self,
        options: &AdOptions,
        entry: Option<FuncId>,
        kinds: &[crate::ArgKind],
    ) -> Result<Differentiated, AdError> {
        let entry = entry.map(|f| {
            let n = self.module.funcs[f].params.len();
            let constant: Vec<bool> =
                (0..n).map(|i| crate::forward::kind_of(kinds, i) == crate::ArgKind::Const).collect();
            (f, constant)
        });
        let derived = mcir_ad::derive_with(&self.module, options, entry)?;
        Ok(Differentiated {
            derived,
            drivers: HashMap::new(),
            gradient_drivers: HashMap::new(),
            probes: HashMap::new(),
            engine: self.engine,
            native: HashMap::new(),
        })
    }

    /// `mcc grad`: the value and the cotangent of every argument upon entry, as the JSON
    /// document `{"value": V, "gradient": [G1, ...]}`. `seed` is the JSON cotangent of the
    /// result (default `1.0` for `f64`, nothing for `()`); `seed_args` a JSON array of
    /// cotangents for the arguments' state after the call (`null` = zero).
    pub fn grad_json(
        &self,
        func: FuncId,
        args_json: &str,
        seed: Option<&str>,
        seed_args: Option<&str>,
        limits: &Limits,
    ) -> Result<String, GradError> {
        self.grad_json_with(func, args_json, seed, seed_args, &[], limits)
    }

    /// [`Program::grad_json`] with argument kinds (missing ones are active): constant and
    /// cache arguments take no seed and report a `null` gradient; a cache's shadow
    /// starts at zero like every shadow.
    pub fn grad_json_with(
        &self,
        func: FuncId,
        args_json: &str,
        seed: Option<&str>,
        seed_args: Option<&str>,
        kinds: &[crate::ArgKind],
        limits: &Limits,
    ) -> Result<String, GradError> {
        let module = &self.module;
        let args = crate::json::decode_args(module, func, args_json).map_err(GradError::Args)?;
        let (seed, seeds) = self.decode_seeds(func, &args, seed, seed_args, kinds, limits)?;
        let out = self.vjp_with(func, &args, seed, &seeds, kinds, limits)?;
        Ok(encode_grad_output(module, func, &out))
    }

    /// Decodes `--seed` (the result's cotangent: 1.0 by default for an `f64` result) and
    /// `--seed-args` (one cotangent per argument for its state after the call, `null` =
    /// zero), checked against the shapes a call at `args` produces.
    pub(crate) fn decode_seeds(
        &self,
        func: FuncId,
        args: &[Val],
        seed: Option<&str>,
        seed_args: Option<&str>,
        kinds: &[crate::ArgKind],
        limits: &Limits,
    ) -> Result<(Option<Val>, Vec<Option<Val>>), GradError> {
        let module = &self.module;
        let f = &module.funcs[func];
        let parse = |flag: &str, text: &str| -> Result<Json, GradError> {
            serde_json::from_str(text)
                .map_err(|e| GradError::Args(ArgError { message: format!("{flag} is not valid JSON: {e}") }))
        };
        let seed_json = seed.map(|s| parse("--seed", s)).transpose()?;
        let seed_args_json = seed_args.map(|s| parse("--seed-args", s)).transpose()?;
        // Cotangents are checked against the shapes the call produces.
        let needs_shapes = seed_json.is_some() || seed_args_json.is_some();
        let (value_like, args_after) = if needs_shapes {
            let copies = deep_copy_all(args);
            let v = self.call(func, &copies, limits).map_err(GradError::Runtime)?;
            (v, copies)
        } else {
            (None, Vec::new())
        };
        let seed_val = match (f.ret, &seed_json) {
            (None, None) | (None, Some(Json::Null)) => None,
            (None, Some(_)) => {
                return Err(GradError::Args(ArgError {
                    message: format!("`{}` returns nothing: its seed must be null", f.name),
                }))
            }
            (Some(t), None) if t == TypeTable::F64 => Some(Val::F64(1.0)),
            (Some(t), None) => {
                // A result with no derivative (an integer, a bool) takes a null seed.
                let how = if has_tangent(&module.types, t) { "the cotangent of the result" } else { "null" };
                return Err(GradError::Args(ArgError {
                    message: format!(
                        "`{}` returns {}, not an f64: give {how} with --seed",
                        f.name,
                        crate::with_article(&module.types.display(t).to_string())
                    ),
                }));
            }
            (Some(t), Some(j)) => {
                if has_tangent(&module.types, t) {
                    Some(
                        decode_tangent(&module.types, t, j, value_like.as_ref(), "--seed")
                            .map_err(GradError::Args)?,
                    )
                } else {
                    decode_tangent(&module.types, t, j, value_like.as_ref(), "--seed")
                        .map_err(GradError::Args)?;
                    None
                }
            }
        };
        let mut seeds: Vec<Option<Val>> = vec![None; f.params.len()];
        if let Some(j) = &seed_args_json {
            let Json::Array(items) = j else {
                return Err(GradError::Args(ArgError {
                    message: "--seed-args must be a JSON array with one cotangent per argument".into(),
                }));
            };
            if items.len() != f.params.len() {
                return Err(GradError::Args(ArgError {
                    message: format!(
                        "--seed-args has {} elements, but `{}` takes {}",
                        items.len(),
                        f.name,
                        crate::arguments(f.params.len())
                    ),
                }));
            }
            for (i, (item, &t)) in items.iter().zip(&f.params).enumerate() {
                if item.is_null() {
                    continue;
                }
                if crate::forward::kind_of(kinds, i) != crate::ArgKind::Active {
                    return Err(GradError::Args(ArgError {
                        message: format!(
                            "--seed-args[{i}]: argument {i} is not active, so its seed must be null"
                        ),
                    }));
                }
                let path = format!("--seed-args[{i}]");
                let v = decode_tangent(&module.types, t, item, args_after.get(i), &path)
                    .map_err(GradError::Args)?;
                if has_tangent(&module.types, t) {
                    seeds[i] = Some(v);
                }
            }
        }
        Ok((seed_val, seeds))
    }
}

impl Differentiated {
    /// The module with every derived function.
    pub fn module(&self) -> &Module {
        &self.derived.module
    }

    /// The VJP driver of `f` for a cotangent on the result only (see
    /// [`mcir_ad::vjp_driver`]).
    pub fn driver(&mut self, f: FuncId) -> Result<FuncId, AdError> {
        let pattern = vec![false; self.derived.module.funcs[f].params.len()];
        let key = (f, pattern.clone());
        if let Some(&d) = self.drivers.get(&key) {
            return Ok(d);
        }
        let d = mcir_ad::vjp_driver(&mut self.derived, f, &SeedPattern { args: pattern })?;
        self.drivers.insert(key, d);
        Ok(d)
    }

    /// The VJP driver of `f` with the parameters marked `constant` not differentiated,
    /// through the rule specialised to them (see [`Program::differentiate_with`], which
    /// must have been asked for it).
    pub fn driver_with(&mut self, f: FuncId, constant: &[bool]) -> Result<FuncId, AdError> {
        if !constant.contains(&true) {
            return self.driver(f);
        }
        let pattern = vec![false; self.derived.module.funcs[f].params.len()];
        let seeds = SeedPattern { args: pattern };
        mcir_ad::vjp_driver_with(&mut self.derived, f, &seeds, constant)
    }

    /// The gradient driver of `f` (see [`mcir_ad::gradient_driver`]): array shadows are
    /// the caller's memory. Parameters marked `constant` need the rule specialised to them.
    pub fn gradient_driver(&mut self, f: FuncId, constant: &[bool]) -> Result<FuncId, AdError> {
        let key = (f, constant.iter().map(|&c| !c).collect::<Vec<bool>>());
        if let Some(&d) = self.gradient_drivers.get(&key) {
            return Ok(d);
        }
        let d = mcir_ad::gradient_driver(&mut self.derived, f, constant)?;
        self.gradient_drivers.insert(key, d);
        Ok(d)
    }

    /// The function `f$probe` that runs `f`'s forward pass alone (see
    /// [`mcir_ad::probe_driver`]).
    pub fn probe(&mut self, f: FuncId) -> Result<FuncId, AdError> {
        if let Some(&p) = self.probes.get(&f) {
            return Ok(p);
        }
        let p = mcir_ad::probe_driver(&mut self.derived, f)?;
        self.probes.insert(f, p);
        Ok(p)
    }

    /// Runs a function of the derived module with the program's engine.
    pub fn run(&mut self, func: FuncId, args: &[Val], limits: &Limits) -> Result<Option<Val>, RuntimeError> {
        match self.engine {
            crate::Engine::Interpreter => {
                mcir_interp::Interpreter::new(&self.derived.module, limits.clone()).call(func, args.to_vec())
            }
            crate::Engine::Jit => {
                if !self.native.contains_key(&func) {
                    let jit = mcir_jit::Jit::compile_reachable(&self.derived.module, &[func])
                        .map_err(crate::native_error)?;
                    self.native.insert(func, jit);
                }
                match self.native.get(&func) {
                    Some(jit) => jit.call(func, args, limits),
                    None => Err(internal_error("no native code")),
                }
            }
        }
    }

    /// The derived rule of `f`.
    pub fn rule(&self, f: FuncId) -> &mcir_ad::RuleIds {
        self.derived.rule(f)
    }

    /// The text of `f`'s forward pass (with the declaration of its tape) or reverse pass.
    pub fn pass_text(&self, f: FuncId, reverse: bool) -> String {
        self.pass_text_as(f, reverse, false)
    }

    /// [`Differentiated::pass_text`] as native code compiles the pass (see
    /// [`crate::Program::native_ir_text`]).
    pub fn native_pass_text(&self, f: FuncId, reverse: bool) -> String {
        self.pass_text_as(f, reverse, true)
    }

    /// `f`'s rule: the entry's own variant for its argument kinds, if it was derived
    /// with some; for the entry, the rule that leaves arguments to be restored from
    /// copies if it has one (what its gradient runs unless two arguments are one array).
    fn rule_for(&self, f: FuncId) -> &mcir_ad::RuleIds {
        match (&self.derived.copied, &self.derived.entry) {
            (Some(c), _) if c.func == f => &c.rule,
            (_, Some(e)) if e.func == f => &e.rule,
            _ => self.derived.rule(f),
        }
    }

    /// `f`'s forward pass, or its reverse pass, in [`Differentiated::module`] (the
    /// entry's own variant for its argument kinds, if it was derived with some).
    pub fn pass(&self, f: FuncId, reverse: bool) -> FuncId {
        let rule = self.rule_for(f);
        if reverse {
            rule.rev
        } else {
            rule.fwd
        }
    }

    fn pass_text_as(&self, f: FuncId, reverse: bool, native: bool) -> String {
        let module = &self.derived.module;
        let id = self.pass(f, reverse);
        let text = if native {
            crate::native_text(module, id)
        } else {
            mcir_ir::print_function(module, &module.funcs[id])
        };
        if reverse {
            return text;
        }
        mcir_ir::print_struct(&module.types, self.rule_for(f).tape_sid) + &text
    }

    /// The VJP of `func` at `args`: `seed` is the cotangent of the result (`None` = zero),
    /// `seed_args` cotangents for the arguments' state after the call. Arguments come
    /// back in their entry state.
    pub fn vjp(
        &mut self,
        func: FuncId,
        args: &[Val],
        seed: Option<Val>,
        seed_args: &[Option<Val>],
        limits: &Limits,
    ) -> Result<Vjp, RuntimeError> {
        let pattern: Vec<bool> = (0..args.len()).map(|i| matches!(seed_args.get(i), Some(Some(_)))).collect();
        let key = (func, pattern.clone());
        let driver = match self.drivers.get(&key) {
            Some(&d) => d,
            None => {
                let d = mcir_ad::vjp_driver(&mut self.derived, func, &SeedPattern { args: pattern })
                    .map_err(|e| internal_error(&e.to_string()))?;
                self.drivers.insert(key, d);
                d
            }
        };
        let module = &self.derived.module;
        let ret = module.funcs[func].ret;
        let mut call_args: Vec<Val> = args.to_vec();
        if let Some(r) = ret {
            if has_tangent(&module.types, r) {
                call_args.push(match seed {
                    Some(s) => s,
                    None => zero_tangent_of_type(&module.types, r),
                });
            }
        }
        for s in seed_args.iter().flatten() {
            call_args.push(s.clone());
        }
        let out = self.run(driver, &call_args, limits)?;
        let Some(Val::Agg(items)) = &out else {
            return Err(internal_error("the VJP driver returned no tuple"));
        };
        let value = if ret.is_some() { items.first().cloned() } else { None };
        Ok(Vjp { value, gradient: items.iter().skip(1).cloned().collect() })
    }
}

/// A driver function of a derived module (a VJP, JVP or HVP driver), compiled to native
/// code on first use and shared by every call (and thread) that needs it.
pub(crate) struct DriverRunner {
    module: Module,
    driver: FuncId,
    native: std::sync::OnceLock<Result<mcir_jit::Jit, mcir_jit::JitError>>,
}

impl std::fmt::Debug for DriverRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DriverRunner(@{})", self.module.funcs[self.driver].name)
    }
}

impl DriverRunner {
    pub(crate) fn new(module: Module, driver: FuncId) -> DriverRunner {
        DriverRunner { module, driver, native: Default::default() }
    }

    /// The derived module the driver is in.
    pub(crate) fn module(&self) -> &Module {
        &self.module
    }

    /// Runs the driver on `engine`; it returns a tuple, whose items come back.
    pub(crate) fn run(
        &self,
        engine: crate::Engine,
        args: Vec<Val>,
        limits: &Limits,
    ) -> Result<Vec<Val>, GradError> {
        let out = match engine {
            crate::Engine::Interpreter => {
                mcir_interp::Interpreter::new(&self.module, limits.clone()).call(self.driver, args)
            }
            crate::Engine::Jit => {
                let jit = self
                    .native
                    .get_or_init(|| mcir_jit::Jit::compile_reachable(&self.module, &[self.driver]))
                    .as_ref()
                    .map_err(|e| GradError::Runtime(crate::native_error(e.clone())))?;
                jit.call(self.driver, &args, limits)
            }
        }
        .map_err(GradError::Runtime)?;
        match &out {
            Some(Val::Agg(items)) => Ok(items.to_vec()),
            _ => Err(GradError::Runtime(internal_error(&format!(
                "`{}` returned no tuple",
                self.module.funcs[self.driver].name
            )))),
        }
    }
}

/// The VJP runners of a program, by function, seed pattern and constant arguments.
pub(crate) type VjpCache =
    std::sync::Mutex<HashMap<(FuncId, Vec<bool>, Vec<bool>), std::sync::Arc<DriverRunner>>>;

impl Program {
    fn vjp_runner(
        &self,
        func: FuncId,
        pattern: Vec<bool>,
        constant: Vec<bool>,
    ) -> Result<std::sync::Arc<DriverRunner>, AdError> {
        let key = (func, pattern, constant);
        if let Some(r) = self.vjp_cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(r);
        }
        let n = self.module.funcs[func].params.len();
        let constant: Vec<bool> = (0..n).map(|i| key.2.get(i).copied().unwrap_or(false)).collect();
        let entry = Some((func, constant));
        let mut derived = mcir_ad::derive_with(&self.module, &AdOptions::default(), entry)?;
        let seeds = SeedPattern { args: key.1.clone() };
        let driver = mcir_ad::vjp_driver_with(&mut derived, func, &seeds, &key.2)?;
        let runner = std::sync::Arc::new(DriverRunner::new(derived.module, driver));
        if let Ok(mut c) = self.vjp_cache.lock() {
            c.insert(key, runner.clone());
        }
        Ok(runner)
    }

    /// [`Program::vjp`] with argument kinds (missing ones are active): constant and cache
    /// arguments take no seed and their cotangents are reported as `()`. The rule runs
    /// specialised to the constants (see [`mcir_ad::derive_with`]): they get no shadow.
    pub fn vjp_with(
        &self,
        func: FuncId,
        args: &[Val],
        seed: Option<Val>,
        seed_args: &[Option<Val>],
        kinds: &[crate::ArgKind],
        limits: &Limits,
    ) -> Result<Vjp, GradError> {
        let active = |i: usize| crate::forward::kind_of(kinds, i) == crate::ArgKind::Active;
        if let Some(i) = (0..seed_args.len()).find(|&i| seed_args[i].is_some() && !active(i)) {
            return Err(GradError::Args(ArgError {
                message: format!("argument {i} is not active, so it takes no seed"),
            }));
        }
        let constant: Vec<bool> =
            (0..args.len()).map(|i| crate::forward::kind_of(kinds, i) == crate::ArgKind::Const).collect();
        let mut out = self.vjp_specialised(func, args, seed, seed_args, constant, limits)?;
        for (i, g) in out.gradient.iter_mut().enumerate() {
            if !active(i) {
                *g = Val::Unit;
            }
        }
        Ok(out)
    }

    /// The VJP of `func` (see [`Differentiated::vjp`]), with the derived code compiled
    /// once per program and shared.
    pub fn vjp(
        &self,
        func: FuncId,
        args: &[Val],
        seed: Option<Val>,
        seed_args: &[Option<Val>],
        limits: &Limits,
    ) -> Result<Vjp, GradError> {
        self.vjp_specialised(func, args, seed, seed_args, Vec::new(), limits)
    }

    /// [`Program::vjp`] with the arguments marked `constant` not differentiated.
    fn vjp_specialised(
        &self,
        func: FuncId,
        args: &[Val],
        seed: Option<Val>,
        seed_args: &[Option<Val>],
        constant: Vec<bool>,
        limits: &Limits,
    ) -> Result<Vjp, GradError> {
        let pattern: Vec<bool> = (0..args.len()).map(|i| matches!(seed_args.get(i), Some(Some(_)))).collect();
        let runner = self.vjp_runner(func, pattern, constant).map_err(GradError::Derive)?;
        let module = runner.module();
        let ret = module.funcs[func].ret;
        let mut call_args: Vec<Val> = args.to_vec();
        if let Some(r) = ret {
            if has_tangent(&module.types, r) {
                let seed = match seed {
                    Some(s) => s,
                    // No seed is a zero one; for a result that holds memory (arrays,
                    // cells), of the shapes a call on copies of the arguments returns.
                    None if mcir_ir::effects::holds_address(&module.types, r) => {
                        let copies = deep_copy_all(args);
                        let like = self.call(func, &copies, limits).map_err(GradError::Runtime)?;
                        zero_like(&module.types, r, like.as_ref(), "the seed").map_err(GradError::Args)?
                    }
                    None => zero_tangent_of_type(&module.types, r),
                };
                call_args.push(seed);
            }
        }
        call_args.extend(seed_args.iter().flatten().cloned());
        // Cotangents must have their tangent types: native code reads what it is given.
        let params = &module.funcs[runner.driver].params;
        for (v, &t) in call_args.iter().zip(params).skip(args.len()) {
            if !crate::api::fits(&module.types, t, v) {
                return Err(GradError::Args(ArgError {
                    message: format!(
                        "a cotangent must be {}",
                        crate::with_article(&module.types.display(t).to_string())
                    ),
                }));
            }
        }
        let items = runner.run(self.engine, call_args, limits)?;
        let value = if ret.is_some() { items.first().cloned() } else { None };
        Ok(Vjp { value, gradient: items.iter().skip(1).cloned().collect() })
    }
}

pub(crate) fn internal_error(message: &str) -> RuntimeError {
    RuntimeError {
        kind: mcir_interp::RuntimeErrorKind::Internal(message.to_string()),
        span: Default::default(),
        function: String::new(),
    }
}

/// A zero cotangent for a result of type `t` when no value is known (scalars only; the
/// drivers are called with explicit seeds for results that hold arrays).
fn zero_tangent_of_type(types: &TypeTable, t: TypeId) -> Val {
    match types.try_get(t) {
        Some(Type::Scalar(Scalar::F64)) => Val::F64(0.0),
        Some(Type::Tuple(items)) => Val::Agg(items.iter().map(|&i| zero_tangent_of_type(types, i)).collect()),
        Some(Type::Struct(_)) => match types.as_struct(t) {
            Some((_, d)) if !d.mutable => {
                Val::Agg(d.fields.iter().map(|f| zero_tangent_of_type(types, f.1)).collect())
            }
            _ => Val::Unit,
        },
        _ => Val::Unit,
    }
}

/// A copy of values that shares nothing with the originals but keeps their aliasing
/// among themselves.
pub fn deep_copy_all(vals: &[Val]) -> Vec<Val> {
    let mut seen: HashMap<usize, Val> = HashMap::new();
    vals.iter().map(|v| deep_copy(v, &mut seen)).collect()
}

fn deep_copy(v: &Val, seen: &mut HashMap<usize, Val>) -> Val {
    match v {
        Val::Array(a) => {
            let key = Rc::as_ptr(a) as *const () as usize;
            if let Some(c) = seen.get(&key) {
                return c.clone();
            }
            let c = Val::Array(Array::new(a.shape.clone(), a.data.borrow().clone()));
            seen.insert(key, c.clone());
            c
        }
        Val::Ref(cell) => {
            let key = Rc::as_ptr(cell) as *const () as usize;
            if let Some(c) = seen.get(&key) {
                return c.clone();
            }
            let new = Rc::new(std::cell::RefCell::new(Val::Unit));
            seen.insert(key, Val::Ref(new.clone()));
            let inner = deep_copy(&cell.borrow(), seen);
            *new.borrow_mut() = inner;
            Val::Ref(new)
        }
        Val::Mut(fields) => {
            let key = Rc::as_ptr(fields) as *const () as usize;
            if let Some(c) = seen.get(&key) {
                return c.clone();
            }
            let new = Rc::new(std::cell::RefCell::new(Vec::new()));
            seen.insert(key, Val::Mut(new.clone()));
            let inner: Vec<Val> = fields.borrow().iter().map(|f| deep_copy(f, seen)).collect();
            *new.borrow_mut() = inner;
            Val::Mut(new)
        }
        Val::Agg(items) => Val::Agg(items.iter().map(|i| deep_copy(i, seen)).collect()),
        other => other.clone(),
    }
}

/// Decodes the JSON cotangent of a value of type `t`; `like` (a value of type `t`) gives
/// the shapes arrays must have and those of the zeros `null` stands for.
pub fn decode_tangent(
    types: &TypeTable,
    t: TypeId,
    j: &Json,
    like: Option<&Val>,
    path: &str,
) -> Result<Val, ArgError> {
    decode_derivative(types, t, j, like, path, "cotangent")
}

/// Decodes the JSON tangent (forward mode) of a value of type `t`, as [`decode_tangent`].
pub fn decode_forward_tangent(
    types: &TypeTable,
    t: TypeId,
    j: &Json,
    like: Option<&Val>,
    path: &str,
) -> Result<Val, ArgError> {
    decode_derivative(types, t, j, like, path, "tangent")
}

/// Decodes a JSON tangent or cotangent (`what` names which, for messages).
fn decode_derivative(
    types: &TypeTable,
    t: TypeId,
    j: &Json,
    like: Option<&Val>,
    path: &str,
    what: &str,
) -> Result<Val, ArgError> {
    if !has_tangent(types, t) {
        return if j.is_null() {
            Ok(Val::Unit)
        } else {
            Err(ArgError {
                message: format!(
                    "{path}: `{}` has no derivative, so its {what} must be null",
                    types.display(t)
                ),
            })
        };
    }
    if j.is_null() {
        return zero_like(types, t, like, path);
    }
    match types.get(t) {
        Type::Scalar(_) => decode(types, t, j, path),
        Type::Array { .. } => {
            let v = decode(types, t, j, path)?;
            if let (Val::Array(a), Some(Val::Array(l))) = (&v, like) {
                if a.shape != l.shape {
                    return Err(ArgError {
                        message: format!(
                            "{path} has shape {:?}, but the array it is the {what} of has shape {:?}",
                            a.shape, l.shape
                        ),
                    });
                }
            }
            Ok(v)
        }
        Type::Ref(inner) => {
            let content = match like {
                Some(Val::Ref(c)) => Some(c.borrow().clone()),
                _ => None,
            };
            Ok(Val::new_ref(decode_derivative(types, *inner, j, content.as_ref(), path, what)?))
        }
        Type::Tuple(items) => match j {
            Json::Array(vals) if vals.len() == items.len() => {
                let likes: Vec<Option<Val>> = match like {
                    Some(Val::Agg(f)) => f.iter().cloned().map(Some).collect(),
                    _ => vec![None; items.len()],
                };
                let fields: Result<Vec<Val>, ArgError> = items
                    .iter()
                    .zip(vals)
                    .enumerate()
                    .map(|(i, (&it, v))| {
                        decode_derivative(types, it, v, likes[i].as_ref(), &format!("{path}[{i}]"), what)
                    })
                    .collect();
                Ok(Val::Agg(fields?.into()))
            }
            _ => Err(ArgError {
                message: format!("{path} must be an array of {} {what}s (one per tuple field)", items.len()),
            }),
        },
        Type::Struct(_) => {
            let Some((_, def)) = types.as_struct(t) else {
                return Err(ArgError { message: format!("{path}: unknown struct") });
            };
            let Json::Object(map) = j else {
                return Err(ArgError {
                    message: format!(
                        "{path} must be an object with the {what} of each field of `{}`",
                        def.name
                    ),
                });
            };
            if let Some(extra) = map.keys().find(|k| def.field_index(k).is_none()) {
                return Err(ArgError {
                    message: format!("{path}: struct `{}` has no field `{extra}`", def.name),
                });
            }
            let likes: Vec<Option<Val>> = match like {
                Some(Val::Agg(f)) => f.iter().cloned().map(Some).collect(),
                Some(Val::Mut(f)) => f.borrow().iter().cloned().map(Some).collect(),
                _ => vec![None; def.fields.len()],
            };
            let mut fields = Vec::new();
            for (i, (fname, fty)) in def.fields.iter().enumerate() {
                let v = map.get(fname).unwrap_or(&Json::Null);
                fields.push(decode_derivative(
                    types,
                    *fty,
                    v,
                    likes[i].as_ref(),
                    &format!("{path}.{fname}"),
                    what,
                )?);
            }
            Ok(if def.mutable { Val::new_mut(fields) } else { Val::Agg(fields.into()) })
        }
        Type::Stack(_) => Err(ArgError { message: format!("{path}: a stack has no {what}") }),
    }
}

/// The zero cotangent of `like`, a value of type `t`.
pub fn zero_like(types: &TypeTable, t: TypeId, like: Option<&Val>, path: &str) -> Result<Val, ArgError> {
    if !has_tangent(types, t) {
        return Ok(Val::Unit);
    }
    match (types.get(t), like) {
        (Type::Scalar(_), _) => Ok(Val::F64(0.0)),
        (Type::Array { .. }, Some(Val::Array(a))) => {
            Ok(Val::Array(Array::new(a.shape.clone(), ArrayData::F64(vec![0.0; a.shape.iter().product()]))))
        }
        (Type::Ref(inner), Some(Val::Ref(c))) => {
            let content = c.borrow().clone();
            Ok(Val::new_ref(zero_like(types, *inner, Some(&content), path)?))
        }
        (Type::Tuple(items), Some(Val::Agg(f))) => Ok(Val::Agg(
            items
                .iter()
                .zip(f.iter())
                .map(|(&it, v)| zero_like(types, it, Some(v), path))
                .collect::<Result<Vec<_>, _>>()?
                .into(),
        )),
        (Type::Struct(_), Some(v)) => {
            let fields: Vec<Val> = match v {
                Val::Agg(f) => f.to_vec(),
                Val::Mut(f) => f.borrow().clone(),
                _ => Vec::new(),
            };
            let Some((_, def)) = types.as_struct(t) else {
                return Err(ArgError { message: format!("{path}: unknown struct") });
            };
            let zs: Vec<Val> = def
                .fields
                .iter()
                .zip(&fields)
                .map(|(f, v)| zero_like(types, f.1, Some(v), path))
                .collect::<Result<_, _>>()?;
            Ok(if def.mutable { Val::new_mut(zs) } else { Val::Agg(zs.into()) })
        }
        _ => Err(ArgError {
            message: format!("{path}: cannot build a zero cotangent without the value's shape"),
        }),
    }
}

/// Appends the JSON encoding of `v`, a cotangent of a value of type `t` (encoded like
/// the value itself; `null` where there is no derivative).
pub fn write_tangent(out: &mut String, types: &TypeTable, t: TypeId, v: &Val) {
    if !has_tangent(types, t) {
        out.push_str("null");
        return;
    }
    match (types.get(t), v) {
        (Type::Scalar(_), Val::F64(x)) => write_f64(out, *x),
        (Type::Array { .. }, Val::Array(_)) => mcir_interp::json::write_value(out, types, t, v),
        (Type::Ref(inner), Val::Ref(c)) => write_tangent(out, types, *inner, &c.borrow()),
        (Type::Tuple(items), Val::Agg(f)) => {
            out.push('[');
            for (i, (&it, fv)) in items.iter().zip(f.iter()).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_tangent(out, types, it, fv);
            }
            out.push(']');
        }
        (Type::Struct(_), Val::Agg(_) | Val::Mut(_)) => {
            let fields: Vec<Val> = match v {
                Val::Agg(f) => f.to_vec(),
                Val::Mut(f) => f.borrow().clone(),
                _ => Vec::new(),
            };
            out.push('{');
            if let Some((_, def)) = types.as_struct(t) {
                for (i, ((name, ft), fv)) in def.fields.iter().zip(&fields).enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&format!("\"{name}\": "));
                    write_tangent(out, types, *ft, fv);
                }
            }
            out.push('}');
        }
        _ => out.push_str("null"),
    }
}

/// `{"value": V, "gradient": [G1, ...]}`.
pub fn encode_grad_output(module: &Module, func: FuncId, out: &Vjp) -> String {
    let f = &module.funcs[func];
    let mut s = String::from("{\"value\": ");
    match (&out.value, f.ret) {
        (Some(v), Some(t)) => mcir_interp::json::write_value(&mut s, &module.types, t, v),
        _ => s.push_str("null"),
    }
    s.push_str(", \"gradient\": [");
    for (i, (g, &t)) in out.gradient.iter().zip(&f.params).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        write_tangent(&mut s, &module.types, t, g);
    }
    s.push_str("]}");
    s
}
