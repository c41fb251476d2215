//! The embedding API: functions looked up by name with a checked signature, called on
//! runtime values or — through a [`Prepared`] handle — on Rust slices without copies.
//!
//! ```
//! let program = mcir::Program::compile(
//!     "sumsq.mcir",
//!     "fn sumsq(x: f64[]) -> f64 { let mut s = 0.0; for i in 0..len(x) { s += x[i] * x[i]; } return s; }",
//! )
//! .unwrap();
//! let f = program.function("sumsq").unwrap().expect_signature("fn(f64[]) -> f64").unwrap();
//!
//! // On runtime values:
//! let (value, gradient) = f.value_and_gradient(&[mcir::Value::vector(vec![1.0, 2.0])]).unwrap();
//! assert_eq!(value, 5.0);
//! assert_eq!(gradient[0].to_f64_vec().unwrap(), vec![2.0, 4.0]);
//!
//! // On slices, with buffers reused from call to call:
//! let mut prepared = f.prepare().unwrap();
//! let mut x = [3.0, 4.0];
//! let mut g = [0.0; 2];
//! let v = prepared
//!     .value_and_gradient(&mut [mcir::Arg::F64Array(&mut x, &[2])], &mut [mcir::GradSlot::Array(&mut g)])
//!     .unwrap();
//! assert_eq!((v, g), (25.0, [6.0, 8.0]));
//! ```

use crate::grad::Differentiated;
use crate::{AdOptions, Limits, Program, RuntimeError, Val};
use mcir_ad::tangent::has_tangent;
use mcir_ir::{FuncId, TypeTable};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;

/// Arguments, shadows and gradient slots a prepared call keeps on the stack: a call with
/// more allocates for them.
const INLINE_ARGS: usize = 16;

pub use mcir_jit::RawArg as Arg;

/// Why an API call failed.
#[derive(Clone, Debug)]
pub enum ApiError {
    /// The source could not be read.
    Io(String),
    /// The source does not compile (rendered diagnostics).
    Compile(String),
    /// No function has that name.
    NoSuchFunction(String),
    /// The function's signature is not the one expected.
    Signature {
        /// The function.
        function: String,
        /// What the caller expected.
        expected: String,
        /// What it is.
        found: String,
    },
    /// The arguments or gradient buffers do not fit the parameters.
    Args(String),
    /// The program failed while running. Its `Display` is the message alone;
    /// [`Program::render_runtime_error`](crate::Program::render_runtime_error) renders it
    /// as `mcc` does, with `file:line:col` and the source line.
    Runtime(RuntimeError),
    /// No derivative could be derived.
    Derive(String),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Io(e) => write!(f, "cannot read the program: {e}"),
            ApiError::Compile(e) => write!(f, "the program does not compile:\n{e}"),
            ApiError::NoSuchFunction(n) => write!(f, "no function named `{n}`"),
            ApiError::Signature { function, expected, found } => {
                write!(f, "`{function}` has the signature `{found}`, not `{expected}`")
            }
            ApiError::Args(e) => f.write_str(e),
            ApiError::Runtime(e) => e.fmt(f),
            ApiError::Derive(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        ApiError::Runtime(e)
    }
}

/// Where a [`Prepared::value_and_gradient`] writes the gradient of one argument.
pub enum GradSlot<'a> {
    /// The derivative with respect to an `f64` argument.
    F64(&'a mut f64),
    /// The gradient with respect to an `f64` array, same length.
    Array(&'a mut [f64]),
    /// Not wanted (or the argument has no derivative).
    Skip,
}

impl Program {
    /// Reads and compiles a `.mcir` file.
    pub fn compile_file(path: impl AsRef<std::path::Path>) -> Result<Program, ApiError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| ApiError::Io(format!("{}: {e}", path.display())))?;
        Program::compile(&path.to_string_lossy(), &text).map_err(|e| ApiError::Compile(e.render()))
    }

    /// The function called `name`.
    pub fn function(&self, name: &str) -> Result<Function<'_>, ApiError> {
        let id = self.module.func_by_name(name).ok_or_else(|| ApiError::NoSuchFunction(name.to_string()))?;
        Ok(Function { program: ProgramRef::Borrowed(self), id, limits: Limits::default(), kinds: Vec::new() })
    }

    /// The function called `name`, holding a share of the program rather than a borrow:
    /// handles made from it ([`Function::prepare`]) keep the program alive and free it
    /// with the last of them, as a long-running server that loads and drops programs
    /// needs.
    pub fn shared_function(self: &Arc<Self>, name: &str) -> Result<Function<'static>, ApiError> {
        let id = self.module.func_by_name(name).ok_or_else(|| ApiError::NoSuchFunction(name.to_string()))?;
        Ok(Function {
            program: ProgramRef::Shared(Arc::clone(self)),
            id,
            limits: Limits::default(),
            kinds: Vec::new(),
        })
    }
}

/// The program of a [`Function`]: borrowed, or shared.
#[derive(Clone)]
enum ProgramRef<'p> {
    Borrowed(&'p Program),
    Shared(Arc<Program>),
}

impl std::ops::Deref for ProgramRef<'_> {
    type Target = Program;

    fn deref(&self) -> &Program {
        match self {
            ProgramRef::Borrowed(p) => p,
            ProgramRef::Shared(p) => p,
        }
    }
}

/// A function of a compiled program.
#[derive(Clone)]
pub struct Function<'p> {
    program: ProgramRef<'p>,
    id: FuncId,
    limits: Limits,
    /// How each parameter is differentiated by [`Function::prepare`] (missing: active).
    kinds: Vec<crate::ArgKind>,
}

impl<'p> Function<'p> {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.program.module.funcs[self.id].name
    }

    /// Its id in the program's IR.
    pub fn id(&self) -> FuncId {
        self.id
    }

    /// Its signature as source spells it: `fn(f64[], i64) -> f64`.
    pub fn signature(&self) -> String {
        let f = &self.program.module.funcs[self.id];
        let types = &self.program.module.types;
        let params: Vec<String> = f.params.iter().map(|&t| types.display(t).to_string()).collect();
        match f.ret {
            Some(r) => format!("fn({}) -> {}", params.join(", "), types.display(r)),
            None => format!("fn({})", params.join(", ")),
        }
    }

    /// The function, if its signature is `signature` (spaces do not matter).
    pub fn expect_signature(self, signature: &str) -> Result<Self, ApiError> {
        let norm = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        let found = self.signature();
        if norm(&found) != norm(signature) {
            return Err(ApiError::Signature {
                function: self.name().to_string(),
                expected: signature.into(),
                found,
            });
        }
        Ok(self)
    }

    /// The same function with its parameters' kinds for gradients of a [`Prepared`]
    /// handle: a constant one is not differentiated (no shadow, no derivative: its
    /// gradient slot must be [`GradSlot::Skip`]), a cache one's contents do not matter.
    pub fn with_kinds(mut self, kinds: &[crate::ArgKind]) -> Self {
        self.kinds = kinds.to_vec();
        self
    }

    /// Which parameters are constant.
    fn constant(&self) -> Vec<bool> {
        let n = self.program.module.funcs[self.id].params.len();
        (0..n).map(|i| crate::forward::kind_of(&self.kinds, i) == crate::ArgKind::Const).collect()
    }

    /// The same function with other resource limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    fn check_args(&self, args: &[Val]) -> Result<(), ApiError> {
        let f = &self.program.module.funcs[self.id];
        if args.len() != f.params.len() {
            return Err(ApiError::Args(format!(
                "`{}` takes {}, {} given",
                f.name,
                crate::arguments(f.params.len()),
                args.len()
            )));
        }
        for (i, (a, &t)) in args.iter().zip(&f.params).enumerate() {
            if !fits(&self.program.module.types, t, a) {
                return Err(ApiError::Args(format!(
                    "argument {i} of `{}` must be of type {}",
                    f.name,
                    self.program.module.types.display(t)
                )));
            }
        }
        Ok(())
    }

    /// Calls the function; address-identified arguments show its effects afterwards
    /// (after a runtime error, some of them: see [`Prepared::call`]).
    pub fn call(&self, args: &[Val]) -> Result<Option<Val>, ApiError> {
        self.check_args(args)?;
        Ok(self.program.call(self.id, args, &self.limits)?)
    }

    /// The value of a function returning `f64` and its gradient with respect to every
    /// argument upon entry (one value of the argument's tangent type each).
    pub fn value_and_gradient(&self, args: &[Val]) -> Result<(f64, Vec<Val>), ApiError> {
        let f = &self.program.module.funcs[self.id];
        if f.ret != Some(TypeTable::F64) {
            return Err(ApiError::Signature {
                function: f.name.clone(),
                expected: "a function returning f64".into(),
                found: self.signature(),
            });
        }
        let out = self.vjp(args, Some(Val::F64(1.0)), &[])?;
        Ok((out.value.and_then(|v| v.as_f64()).unwrap_or(f64::NAN), out.gradient))
    }

    /// The vector-Jacobian product: the cotangent of every argument upon entry, given a
    /// cotangent of the result and cotangents of the arguments' state after the call
    /// (`seed_args` may be shorter than the arguments; missing ones are zero).
    pub fn vjp(
        &self,
        args: &[Val],
        seed: Option<Val>,
        seed_args: &[Option<Val>],
    ) -> Result<crate::Vjp, ApiError> {
        self.check_args(args)?;
        let mut seeds: Vec<Option<Val>> = seed_args.to_vec();
        seeds.resize(args.len(), None);
        self.program.vjp(self.id, args, seed, &seeds, &self.limits).map_err(|e| match e {
            crate::GradError::Args(a) => ApiError::Args(a.message),
            crate::GradError::Runtime(r) => ApiError::Runtime(r),
            crate::GradError::Derive(d) => ApiError::Derive(d.to_string()),
        })
    }

    fn differentiated(&self) -> Result<Differentiated, ApiError> {
        self.program
            .differentiate_with(&AdOptions::default(), Some(self.id), &self.kinds)
            .map_err(|e| ApiError::Derive(e.to_string()))
    }

    /// A handle that calls the function and its gradient on Rust slices, compiled once,
    /// with memory kept from call to call. Parameters must be scalars or arrays.
    pub fn prepare(&self) -> Result<Prepared<'p>, ApiError> {
        // One native module holds the function and its gradient: derived modules keep
        // the primal functions under their ids. The program's functions compile while
        // their rules are derived.
        let native = |e: mcir_jit::JitError| ApiError::Derive(e.to_string());
        let mut builder = mcir_jit::Jit::builder(&self.program.module).map_err(native)?;
        builder.add(&self.program.module, &[self.id]).map_err(native)?;
        let f = &self.program.module.funcs[self.id];
        if f.ret != Some(TypeTable::F64) {
            // Nothing to differentiate through a prepared handle: the primal alone.
            let jit = builder.finish(&self.program.module).map_err(native)?;
            return Ok(self.prepared(jit, None));
        }
        let mut d = self.differentiated()?;
        let driver =
            d.gradient_driver(self.id, &self.constant()).map_err(|e| ApiError::Derive(e.to_string()))?;
        builder.add(d.module(), &[driver]).map_err(native)?;
        let jit = builder.finish(d.module()).map_err(native)?;
        Ok(self.prepared(jit.clone(), Some((jit, driver))))
    }

    fn prepared(&self, primal: mcir_jit::Jit, gradient: Option<(mcir_jit::Jit, FuncId)>) -> Prepared<'p> {
        Prepared {
            function: self.clone(),
            primal,
            gradient,
            tangent: None,
            workspace: mcir_jit::Workspace::new(),
            grad_workspace: mcir_jit::Workspace::new(),
            tangent_workspace: mcir_jit::Workspace::new(),
            scratch: Vec::new(),
            constant: self.constant(),
        }
    }
}

pub(crate) fn fits(types: &TypeTable, t: mcir_ir::TypeId, v: &Val) -> bool {
    use mcir_ir::{Scalar, Type};
    match (types.get(t), v) {
        (Type::Scalar(Scalar::F64), Val::F64(_)) => true,
        (Type::Scalar(Scalar::I64), Val::I64(_)) => true,
        (Type::Scalar(Scalar::Bool), Val::Bool(_)) => true,
        (Type::Array { elem, rank }, Val::Array(a)) => {
            a.shape.len() == *rank as usize
                && a.shape.iter().all(|&n| n as u64 <= mcir_ir::MAX_EXTENT as u64)
                && matches!(
                    (elem, &*a.data.borrow()),
                    (Scalar::F64, mcir_interp::ArrayData::F64(_))
                        | (Scalar::I64, mcir_interp::ArrayData::I64(_))
                        | (Scalar::Bool, mcir_interp::ArrayData::Bool(_))
                )
        }
        (Type::Ref(inner), Val::Ref(c)) => fits(types, *inner, &c.borrow()),
        // `()`, the cotangent of what has no derivative.
        (Type::Tuple(items), Val::Unit) => items.is_empty(),
        (Type::Tuple(items), Val::Agg(f)) => {
            items.len() == f.len() && items.iter().zip(f.iter()).all(|(&t, v)| fits(types, t, v))
        }
        (Type::Struct(_), Val::Agg(f)) => types.as_struct(t).is_some_and(|(_, d)| {
            !d.mutable
                && d.fields.len() == f.len()
                && d.fields.iter().zip(f.iter()).all(|(x, v)| fits(types, x.1, v))
        }),
        (Type::Struct(_), Val::Mut(f)) => types.as_struct(t).is_some_and(|(_, d)| {
            let f = f.borrow();
            d.mutable
                && d.fields.len() == f.len()
                && d.fields.iter().zip(f.iter()).all(|(x, v)| fits(types, x.1, v))
        }),
        _ => false,
    }
}

/// A function ready to be called many times on Rust slices: its native code and its
/// gradient's are compiled once, and the arena memory of one call is reused by the next,
/// so calls with the same shapes allocate nothing new. Not shared between threads: make
/// one per thread (the program itself may be shared).
pub struct Prepared<'p> {
    function: Function<'p>,
    primal: mcir_jit::Jit,
    gradient: Option<(mcir_jit::Jit, FuncId)>,
    tangent: Option<(mcir_jit::Jit, FuncId)>,
    workspace: mcir_jit::Workspace,
    grad_workspace: mcir_jit::Workspace,
    tangent_workspace: mcir_jit::Workspace,
    /// Shadows for array arguments whose gradient the caller does not want.
    scratch: Vec<Vec<f64>>,
    /// Which parameters are constant, by position (fixed when the handle is made).
    constant: Vec<bool>,
}

impl Prepared<'_> {
    /// Bytes of memory the handle keeps for reuse between calls.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.capacity_bytes()
            + self.grad_workspace.capacity_bytes()
            + self.tangent_workspace.capacity_bytes()
    }

    /// Derives and compiles the tangent function (forward mode) now rather than on the
    /// first call that needs it.
    pub fn compile_tangent(&mut self) -> Result<(), ApiError> {
        if self.tangent.is_none() {
            let derive = |e: mcir_ad::AdError| ApiError::Derive(e.to_string());
            let t = mcir_ad::pushforward::tangents(&self.function.program.module, &[self.function.id], 1)
                .map_err(derive)?;
            let tf =
                t.tangent(self.function.id).ok_or_else(|| ApiError::Derive("no tangent function".into()))?;
            let jit = mcir_jit::Jit::compile_reachable(&t.module, &[tf])
                .map_err(|e| ApiError::Derive(e.to_string()))?;
            self.tangent = Some((jit, tf));
        }
        Ok(())
    }

    /// The value of a function returning `f64` and its derivative along `tangents`
    /// (forward mode): one tangent per parameter with a derivative, in order — an `f64`
    /// for an `f64`, an array of the argument's shape for an `f64` array. Arrays are
    /// updated in place: arguments to their state after the call, tangents to the
    /// tangent of that state.
    pub fn value_and_derivative<'a>(
        &mut self,
        args: &mut [Arg<'a>],
        tangents: &mut [Arg<'a>],
    ) -> Result<(f64, f64), ApiError> {
        let program: &Program = &self.function.program;
        let module = &program.module;
        let f = &module.funcs[self.function.id];
        if f.ret != Some(TypeTable::F64) {
            return Err(ApiError::Signature {
                function: f.name.clone(),
                expected: "a function returning f64".into(),
                found: self.function.signature(),
            });
        }
        // Native code reads a shadow where its primal's index was checked, so each
        // tangent must have its argument's shape.
        let types = &module.types;
        let differentiable = || (0..f.params.len()).filter(|&i| has_tangent(types, f.params[i]));
        let count = differentiable().count();
        if tangents.len() != count || args.len() != f.params.len() {
            return Err(ApiError::Args(format!(
                "`{}` takes {}, {count} of them with a tangent; {} and {} were given",
                f.name,
                crate::arguments(f.params.len()),
                args.len(),
                tangents.len()
            )));
        }
        for (k, (i, t)) in differentiable().zip(tangents.iter()).enumerate() {
            let fits = match (&args[i], t) {
                (Arg::F64(_), Arg::F64(_)) => true,
                (Arg::F64Array(a, sa), Arg::F64Array(d, sd)) => sa == sd && a.len() == d.len(),
                _ => false,
            };
            if !fits {
                return Err(ApiError::Args(format!(
                    "tangent {k} does not fit argument {i}: it needs the same kind and shape"
                )));
            }
        }
        self.compile_tangent()?;
        let program: &Program = &self.function.program;
        let f = &program.module.funcs[self.function.id];
        let Some((jit, tf)) = &self.tangent else {
            return Err(ApiError::Derive("no tangent function".into()));
        };
        let mut all: SmallVec<[Arg<'_>; INLINE_ARGS]> =
            args.iter_mut().chain(tangents.iter_mut()).map(reborrow).collect();
        jit.call_raw(&mut self.tangent_workspace, *tf, &mut all, &self.function.limits, |r| {
            (r.field(0).f64(), r.field(1).f64())
        })
        .map_err(|e| raw_error(&f.name, e))
    }

    /// Derives and compiles the gradient now rather than on the first gradient call.
    pub fn compile_gradient(&mut self) -> Result<(), ApiError> {
        if self.gradient.is_none() {
            let mut d = self.function.differentiated()?;
            let constant = self.function.constant();
            let driver = d
                .gradient_driver(self.function.id, &constant)
                .map_err(|e| ApiError::Derive(e.to_string()))?;
            let jit = mcir_jit::Jit::compile_reachable(d.module(), &[driver])
                .map_err(|e| ApiError::Derive(e.to_string()))?;
            self.gradient = Some((jit, driver));
        }
        Ok(())
    }

    /// Calls the function; arrays are read and updated in place. Returns the result of
    /// a function returning `f64` (or `NaN` for one returning nothing). After a runtime
    /// error, an array the call was updating holds some of its writes and not
    /// necessarily all of those made before the error: native code may keep an element
    /// in a register across a loop and store it once the loop ends (`mcir_ir::promote`).
    pub fn call(&mut self, args: &mut [Arg<'_>]) -> Result<f64, ApiError> {
        let f = &self.function.program.module.funcs[self.function.id];
        let ret = f.ret;
        let r =
            self.primal.call_raw(&mut self.workspace, self.function.id, args, &self.function.limits, |r| {
                match ret {
                    Some(TypeTable::F64) => r.f64(),
                    Some(TypeTable::I64) => r.i64() as f64,
                    _ => f64::NAN,
                }
            });
        r.map_err(|e| raw_error(self.function.name(), e))
    }

    /// Calls a function returning an `f64` array and returns its elements, row-major.
    pub fn call_array(&mut self, args: &mut [Arg<'_>]) -> Result<Vec<f64>, ApiError> {
        let module = &self.function.program.module;
        let f = &module.funcs[self.function.id];
        if !f.ret.is_some_and(|r| module.types.as_array(r).is_some_and(|(e, _)| e == mcir_ir::Scalar::F64)) {
            return Err(ApiError::Signature {
                function: f.name.clone(),
                expected: "a function returning an f64 array".into(),
                found: self.function.signature(),
            });
        }
        let r =
            self.primal.call_raw(&mut self.workspace, self.function.id, args, &self.function.limits, |r| {
                r.f64s().to_vec()
            });
        r.map_err(|e| raw_error(self.function.name(), e))
    }

    /// The value and gradient of a function returning `f64`, written into `grads` (one
    /// slot per argument). Arguments come back unchanged.
    pub fn value_and_gradient(
        &mut self,
        args: &mut [Arg<'_>],
        grads: &mut [GradSlot<'_>],
    ) -> Result<f64, ApiError> {
        // The program outlives the handle: what it holds is borrowed, not copied, per call.
        let program: &Program = &self.function.program;
        let module = &program.module;
        let f = &module.funcs[self.function.id];
        if f.ret != Some(TypeTable::F64) {
            return Err(ApiError::Signature {
                function: f.name.clone(),
                expected: "a function returning f64".into(),
                found: self.function.signature(),
            });
        }
        if grads.len() != f.params.len() {
            return Err(ApiError::Args(format!(
                "{} gradient slots for {} arguments",
                grads.len(),
                f.params.len()
            )));
        }
        self.compile_gradient()?;
        let program: &Program = &self.function.program;
        let module = &program.module;
        let f = &module.funcs[self.function.id];
        let Some((jit, driver)) = &self.gradient else { return Err(ApiError::Derive("no gradient".into())) };
        let types = &module.types;
        let params = &f.params;
        let constant = &self.constant;
        // Array gradients are written straight into the caller's slots (or scratch memory
        // for those not wanted), zeroed first: the reverse pass adds into them.
        let differentiable_array =
            |i: usize| !constant[i] && has_tangent(types, params[i]) && types.as_array(params[i]).is_some();
        let mut scratch_needed = 0;
        for (i, slot) in grads.iter().enumerate() {
            let t = params[i];
            match slot {
                GradSlot::Skip => {
                    if differentiable_array(i) {
                        scratch_needed += 1;
                    }
                    continue;
                }
                _ if constant[i] => {
                    return Err(ApiError::Args(format!(
                        "argument {i} is constant: its gradient slot must be Skip"
                    )))
                }
                GradSlot::F64(_) if t == TypeTable::F64 => {}
                GradSlot::Array(out) if differentiable_array(i) => match args.get(i) {
                    Some(Arg::F64Array(d, _)) if d.len() == out.len() => {}
                    Some(Arg::F64Array(d, _)) => {
                        return Err(ApiError::Args(format!(
                            "gradient slot {i} has {} elements, the argument {}",
                            out.len(),
                            d.len()
                        )))
                    }
                    _ => return Err(ApiError::Args(format!("argument {i} must be an f64 array"))),
                },
                _ => {
                    return Err(ApiError::Args(format!(
                        "gradient slot {i} does not fit a {}",
                        types.display(t)
                    )))
                }
            }
        }
        if self.scratch.len() < scratch_needed {
            self.scratch.resize_with(scratch_needed, Vec::new);
        }
        let mut scratch = self.scratch.iter_mut();
        let mut all: SmallVec<[Arg<'_>; INLINE_ARGS]> = SmallVec::new();
        all.extend(args.iter_mut().map(reborrow));
        let n_args = all.len();
        all.push(Arg::F64(1.0));
        // The driver returns (value, one f64 per f64 parameter that is not constant).
        let mut rdata: SmallVec<[Option<&mut f64>; INLINE_ARGS]> = SmallVec::new();
        for (i, slot) in grads.iter_mut().enumerate() {
            if params[i] == TypeTable::F64 && !constant[i] {
                rdata.push(match slot {
                    GradSlot::F64(out) => Some(out),
                    _ => None,
                });
                continue;
            }
            if !differentiable_array(i) {
                continue;
            }
            let shape: &[usize] = match all.get(i) {
                Some(Arg::F64Array(_, s)) if i < n_args => s,
                _ => &[],
            };
            let n: usize = shape.iter().product();
            let buf: &mut [f64] = match slot {
                GradSlot::Array(out) => out,
                _ => match scratch.next() {
                    Some(v) => {
                        v.resize(n, 0.0);
                        v.as_mut_slice()
                    }
                    None => return Err(ApiError::Args("no scratch shadow".into())),
                },
            };
            buf.fill(0.0);
            all.push(Arg::F64Array(buf, shape));
        }
        let value = jit.call_raw(&mut self.grad_workspace, *driver, &mut all, &self.function.limits, |r| {
            for (k, out) in rdata.iter_mut().enumerate() {
                if let Some(out) = out {
                    **out = r.field(1 + k).f64();
                }
            }
            r.field(0).f64()
        });
        value.map_err(|e| raw_error(&f.name, e))
    }
}

/// An argument lent again for the length of one call (arrays stay updated in place).
fn reborrow<'b>(a: &'b mut Arg<'_>) -> Arg<'b> {
    match a {
        Arg::F64(x) => Arg::F64(*x),
        Arg::I64(x) => Arg::I64(*x),
        Arg::Bool(x) => Arg::Bool(*x),
        Arg::F64Array(d, s) => Arg::F64Array(d, s),
        Arg::I64Array(d, s) => Arg::I64Array(d, s),
    }
}

/// Errors of the slice interface: a mismatch found before the call is an argument error.
fn raw_error(function: &str, e: mcir_jit::CallError) -> ApiError {
    match e {
        mcir_jit::CallError::Args(m) => ApiError::Args(format!("{m} (calling `{function}`)")),
        mcir_jit::CallError::Runtime(r) => ApiError::Runtime(r),
    }
}
