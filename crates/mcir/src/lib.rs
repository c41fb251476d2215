//! mcir as a library: compile `.mcir` source once, then run its functions on JSON or
//! on runtime values, with every error typed and located in the source.
//!
//! ```
//! let program = mcir::Program::compile("square.mcir", "fn sq(x: f64) -> f64 { return x * x; }").unwrap();
//! let f = program.entry(None).unwrap();
//! let out = program.run_json(f, "[3.0]", &mcir::Limits::default()).unwrap();
//! assert_eq!(out, r#"{"value": 9.0, "args": [3.0]}"#);
//! ```

#![deny(missing_docs)]

mod api;
pub mod bench;
pub mod check;
pub mod dense;
mod diagnostics;
mod error;
pub mod forward;
pub mod grad;
pub mod json;
pub mod listing;
mod probe;
mod stack;

pub use api::{ApiError, Arg, Function, GradSlot, Prepared};
pub use check::{CheckOptions, CheckReport, Failure, Suspect};
pub use dense::{Hessian, Jacobian, Sweep};
pub use diagnostics::SourceFile;
pub use error::{ArgError, CompileError, EntryError, GradError, RunError};
pub use forward::{ArgKind, Hvp, Jvp, VjpTangent};
pub use grad::{AdError, AdOptions, Differentiated, Vjp};
/// Runtime values: arguments and results of calls.
pub use mcir_interp::Val as Value;
pub use mcir_interp::{Limits, RuntimeError, RuntimeErrorKind, Val};
/// The IR: printer, parser and verifier, for tools built on the library.
pub use mcir_ir as ir;
pub use mcir_ir::{FuncId, Module};
pub use mcir_syntax::SourceLimits;

use std::sync::Arc;

/// Which engine runs code: native code through Cranelift (the default) or the
/// reference interpreter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// Native code through Cranelift.
    #[default]
    Jit,
    /// The reference interpreter over the IR.
    Interpreter,
}

/// A compiled program: its source (for error messages), its verified IR, and (made on
/// first use) its native code.
#[derive(Clone, Debug)]
pub struct Program {
    source: Arc<SourceFile>,
    /// The module every engine runs and every derivative is taken of: the lowered module
    /// after optimisation (small functions inlined).
    module: Module,
    /// The module as lowered, before optimisation: what `mcc ir` prints. Function ids are
    /// the same in both.
    written: Arc<Module>,
    engine: Engine,
    native: Arc<std::sync::OnceLock<Result<mcir_jit::Jit, mcir_jit::JitError>>>,
    vjp_cache: Arc<grad::VjpCache>,
    jvp_cache: Arc<forward::JvpCache>,
    hvp_cache: Arc<forward::HvpCache>,
    /// Functions that take a function argument: they exist only as specialised copies,
    /// so none can be an entry point.
    generic: Arc<Vec<String>>,
}

impl Program {
    /// Parses, checks and lowers `text`; `name` is used in error messages.
    pub fn compile(name: &str, text: &str) -> Result<Program, CompileError> {
        Program::compile_with(name, text, &SourceLimits::default())
    }

    /// [`Program::compile`], rejecting source that nests deeper than `limits` allow
    /// (each limit at most [`SourceLimits::CEILING`]).
    pub fn compile_with(name: &str, text: &str, limits: &SourceLimits) -> Result<Program, CompileError> {
        let source = Arc::new(SourceFile::new(name, text));
        let fail = |message: String| CompileError {
            source: Arc::clone(&source),
            diagnostics: vec![mcir_syntax::Diagnostic::error(message, Default::default())],
        };
        let ceiling = SourceLimits::CEILING;
        if !(1..=ceiling).contains(&limits.max_nesting) || !(1..=ceiling).contains(&limits.max_expr_depth) {
            return Err(fail(format!(
                "source limits must be from 1 to {ceiling}, not {} (nesting) and {} (expression depth)",
                limits.max_nesting, limits.max_expr_depth
            )));
        }
        let src = Arc::clone(&source);
        let limits = *limits;
        let result =
            stack::on_compiler_thread(stack::bytes_for(&limits), move || compile_module(&src.text, &limits));
        match result {
            Some(Ok((written, generic))) => {
                // Short counted loops written out first: their counters become constants,
                // so that the small arrays they index can become values.
                let expanded = mcir_ir::expand::expand_short_loops(&written);
                if let Err(e) = mcir_ir::verify_module(&expanded) {
                    return Err(fail(format!(
                        "internal compiler error: writing out loops broke the IR: {e}"
                    )));
                }
                let module = mcir_ir::inline::inline_small_functions(&expanded);
                let mut module = mcir_ir::inline::inline_base_cases(module);
                if let Err(e) = mcir_ir::verify_module(&module) {
                    return Err(fail(format!("internal compiler error: inlining broke the IR: {e}")));
                }
                // An inlined body ends in a jump to the rest of its caller's block: merged,
                // so that what the body computes and what the caller does with it are one
                // block (the reverse pass recomputes within a block), and an array a helper
                // returns is the array made there, which may become values; merged again
                // after those values are made.
                simplify_every_function(&mut module);
                // A small array a function returns and its callers only read at constant
                // indices becomes a tuple of its elements (after the short loops that
                // fill and read it are written out), which the function then makes in
                // values.
                let module = mcir_ir::returns::return_small_arrays_as_values(module);
                let mut module = mcir_ir::scalarise::scalarise_small_arrays(module);
                simplify_every_function(&mut module);
                if let Err(e) = mcir_ir::verify_module(&module) {
                    return Err(fail(format!("internal compiler error: scalarising broke the IR: {e}")));
                }
                let mut module = mcir_ir::hoist::fold_and_hoist(module);
                // An element a block has just stored or loaded is not loaded again (an
                // `out` argument written by an inlined helper and read by its caller); the
                // constants indices are made of are merged by now, so `out[0]` in the
                // helper and in its caller are one element.
                // Arithmetic on a forwarded element may repeat arithmetic on the element
                // the load read again (`cams[c, 0] * d` in both lines of a helper that
                // loaded `cams[c, 0]` twice): merged once more where anything was forwarded.
                let ids: Vec<mcir_ir::FuncId> = module.funcs.keys().collect();
                // A load both arms of a branch begin with is made once, before it, so that
                // arms that then only compute can be linearized.
                for id in ids {
                    let f = std::mem::replace(&mut module.funcs[id], mcir_ir::Function::new("", &[], None));
                    let (f, forwarded) = mcir_ir::memory::forward_elements_reporting(f, false);
                    let (f, hoisted) = mcir_ir::memory::hoist_loads_both_arms_make(f);
                    module.funcs[id] = if forwarded || hoisted {
                        mcir_ir::cse::eliminate_common_subexpressions(f, &module.types)
                    } else {
                        f
                    };
                }
                if let Err(e) = mcir_ir::verify_module(&module) {
                    return Err(fail(format!("internal compiler error: hoisting broke the IR: {e}")));
                }
                let mut p = Program::from_parts_as_written(source, module, written);
                p.generic = Arc::new(generic);
                Ok(p)
            }
            Some(Err(diagnostics)) => Err(CompileError { source, diagnostics }),
            None => {
                Err(fail("internal compiler error: the compiler thread panicked or could not start".into()))
            }
        }
    }

    pub(crate) fn from_parts(source: Arc<SourceFile>, module: Module) -> Program {
        let written = module.clone();
        Program::from_parts_as_written(source, module, written)
    }

    /// A program that runs `module`, compiled from `written` (the module as the source
    /// wrote it, before inlining: what `mcc ir` prints without `--opt`).
    fn from_parts_as_written(source: Arc<SourceFile>, module: Module, written: Module) -> Program {
        Program {
            source,
            written: Arc::new(written),
            module,
            engine: Engine::default(),
            native: Default::default(),
            vjp_cache: Default::default(),
            jvp_cache: Default::default(),
            hvp_cache: Default::default(),
            generic: Default::default(),
        }
    }

    /// The same program, run by `engine`.
    pub fn with_engine(mut self, engine: Engine) -> Program {
        self.engine = engine;
        self
    }

    /// The shapes of `args` as [`Program::specialised`] takes them: each array's, and
    /// `None` for everything else.
    pub fn shapes_of(args: &[Val]) -> Vec<Option<Vec<usize>>> {
        args.iter().map(|a| if let Val::Array(a) = a { Some(a.shape.clone()) } else { None }).collect()
    }

    /// The same program with function `func` compiled for arguments of the given shapes
    /// (`None` for an argument left generic, a scalar or an array whose shape may vary):
    /// their extents become constants, and loops that then run a few times are unrolled
    /// (`mcir_ir::specialise`), as JAX's `jit` compiles for the shapes it is called
    /// with. The function checks on entry that its arguments have those shapes, and
    /// fails with an error saying so otherwise; derivatives are taken of this code.
    pub fn specialised(&self, func: FuncId, shapes: &[Option<Vec<usize>>]) -> Result<Program, CompileError> {
        let module = mcir_ir::specialise::specialise(&self.module, func, shapes);
        if let Err(e) = mcir_ir::verify_module(&module) {
            return Err(CompileError {
                source: Arc::clone(&self.source),
                diagnostics: vec![mcir_syntax::Diagnostic::error(
                    format!("internal compiler error: specialising broke the IR: {e}"),
                    Default::default(),
                )],
            });
        }
        let mut p = Program::from_parts(Arc::clone(&self.source), module);
        p.written = Arc::clone(&self.written);
        p.generic = Arc::clone(&self.generic);
        p.engine = self.engine;
        Ok(p)
    }

    /// The engine that runs this program's code.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The program's native code, compiled on first use.
    pub fn native(&self) -> Result<&mcir_jit::Jit, mcir_jit::JitError> {
        self.native.get_or_init(|| mcir_jit::Jit::compile(&self.module)).as_ref().map_err(|e| e.clone())
    }

    /// The program's IR.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The program's source.
    pub fn source(&self) -> &SourceFile {
        &self.source
    }

    /// The function `name`, or without a name: `main` if there is one, else the only function.
    ///
    /// Only the program's own functions are candidates: not the functions made for its
    /// closures and specialised copies (their names contain `$`).
    pub fn entry(&self, name: Option<&str>) -> Result<FuncId, EntryError> {
        let own: Vec<(FuncId, &str)> = self
            .module
            .funcs
            .iter()
            .filter(|(_, f)| !f.name.contains('$'))
            .map(|(id, f)| (id, f.name.as_str()))
            .collect();
        let names = || own.iter().map(|(_, n)| n.to_string()).collect::<Vec<_>>();
        match name {
            Some(n) => match own.iter().find(|(_, f)| *f == n) {
                Some((id, _)) => Ok(*id),
                None if self.generic.iter().any(|g| g == n) => Err(EntryError::TakesFunction(n.to_string())),
                None => Err(EntryError::NoSuchFunction(n.to_string(), names())),
            },
            None => {
                if let Some((id, _)) = own.iter().find(|(_, f)| *f == "main") {
                    return Ok(*id);
                }
                match own.len() {
                    1 => Ok(own[0].0),
                    0 if !self.generic.is_empty() => Err(EntryError::TakesFunction(self.generic[0].clone())),
                    0 => Err(EntryError::NoFunctions),
                    _ => Err(EntryError::Ambiguous(names())),
                }
            }
        }
    }

    /// The module as lowered from the source, before optimisation (what `mcc ir`
    /// prints); function ids are those of [`Program::module`], which may have more
    /// after them (a variant of a function returning a small array's elements as a
    /// tuple, `mcir_ir::returns`).
    pub fn written_module(&self) -> &Module {
        &self.written
    }

    /// The IR of one function, or of the whole module, as text, as lowered from the
    /// source.
    pub fn ir_text(&self, func: Option<FuncId>) -> String {
        match func {
            Some(f) => match self.written.funcs.get(f) {
                Some(g) => mcir_ir::print_function(&self.written, g),
                // A function optimisation added has no written form.
                None => mcir_ir::print_function(&self.module, &self.module.funcs[f]),
            },
            None => mcir_ir::print_module(&self.written),
        }
    }

    /// The IR as it runs and is differentiated: after optimisation (`mcc ir --opt`).
    pub fn optimized_ir_text(&self, func: Option<FuncId>) -> String {
        match func {
            Some(f) => mcir_ir::print_function(&self.module, &self.module.funcs[f]),
            None => mcir_ir::print_module(&self.module),
        }
    }

    /// The IR as native code compiles it: after optimisation, with loops around a
    /// reduction run several iterations side by side (`mcc ir --native`,
    /// `mcir_ir::jam`), loops giving back their iterations' memory
    /// (`mcir_ir::reclaim`), elements inner loops read and write at one place held in
    /// values (`mcir_ir::promote`), and loops checking constant columns copied to skip
    /// those checks (`mcir_ir::version`).
    pub fn native_ir_text(&self, func: Option<FuncId>) -> String {
        match func {
            Some(f) => native_text(&self.module, f),
            None => {
                let mut module = self.module.clone();
                let escapes = mcir_ir::reclaim::Escapes::of(&self.module);
                for id in self.module.funcs.keys() {
                    module.funcs[id] = native_function(&self.module, id, &escapes);
                }
                mcir_ir::print_module(&module)
            }
        }
    }

    /// Runs `func` on runtime values with the reference interpreter; address-identified
    /// arguments (arrays, refs, mut structs) show the call's effects afterwards.
    pub fn call(&self, func: FuncId, args: &[Val], limits: &Limits) -> Result<Option<Val>, RuntimeError> {
        match self.engine {
            Engine::Interpreter => {
                let mut interp = mcir_interp::Interpreter::new(&self.module, limits.clone());
                interp.call(func, args.to_vec())
            }
            Engine::Jit => self.native().map_err(native_error)?.call(func, args, limits),
        }
    }

    /// Runs `func` on arguments given as a JSON array and returns the JSON document of
    /// `mcc run`: `{"value": V, "args": [A1, ...]}`.
    pub fn run_json(&self, func: FuncId, args_json: &str, limits: &Limits) -> Result<String, RunError> {
        let args = json::decode_args(&self.module, func, args_json).map_err(RunError::Args)?;
        let value = self.call(func, &args, limits).map_err(RunError::Runtime)?;
        Ok(json::encode_run_output(&self.module, func, value.as_ref(), &args))
    }

    /// Renders a runtime error with its source location, as the CLI prints it.
    pub fn render_runtime_error(&self, e: &RuntimeError) -> String {
        let span = mcir_syntax::ast::Span::new(e.span.start as usize, e.span.end as usize);
        // Derived passes (`f$fwd`, `f$rev`) report the function they derive from.
        let function = e.function.split('$').next().unwrap_or(&e.function);
        let d = mcir_syntax::Diagnostic::error(format!("{}, in function `{function}`", e.kind), span);
        self.source.render(&d)
    }
}

/// A failure to generate native code, reported as the internal error it is.
/// `n` arguments, in words ("1 argument", "2 arguments"), for messages.
pub(crate) fn arguments(n: usize) -> String {
    if n == 1 {
        "1 argument".to_string()
    } else {
        format!("{n} arguments")
    }
}

/// A type's name with its article, as read aloud ("an f64[]", "a bool").
pub(crate) fn with_article(type_name: &str) -> String {
    let vowel_sound = type_name.starts_with(['f', 'i', 'a', 'e', 'o', 'u']);
    format!("{} {type_name}", if vowel_sound { "an" } else { "a" })
}

pub(crate) fn native_error(e: mcir_jit::JitError) -> RuntimeError {
    RuntimeError {
        kind: mcir_interp::RuntimeErrorKind::Internal(e.to_string()),
        span: Default::default(),
        function: String::new(),
    }
}

/// The module, and the names of the functions that take a function argument.
fn compile_module(
    text: &str,
    limits: &SourceLimits,
) -> Result<(Module, Vec<String>), Vec<mcir_syntax::Diagnostic>> {
    let parsed = mcir_syntax::parse_with(text, limits);
    if !parsed.diagnostics.is_empty() {
        return Err(parsed.diagnostics);
    }
    let generic = mcir_lower::generic_functions(&parsed.program);
    let mut module = mcir_lower::lower_program(&parsed.program)?;
    let ids: Vec<FuncId> = module.funcs.keys().collect();
    for id in ids {
        let f = std::mem::replace(&mut module.funcs[id], mcir_ir::Function::new("", &[], None));
        module.funcs[id] = f.into_simplified_cfg();
        module.funcs[id].trust_proven_indices();
    }
    if let Err(e) = mcir_ir::verify_module(&module) {
        return Err(vec![mcir_syntax::Diagnostic::error(
            format!("internal compiler error: the IR does not verify: {e}"),
            Default::default(),
        )]);
    }
    Ok((module, generic))
}

/// Function `id` of `module` as native code compiles it (see [`Program::native_ir_text`]).
pub fn native_text(module: &Module, id: FuncId) -> String {
    native_text_with(module, id, &mcir_ir::reclaim::Escapes::of(module))
}

/// [`native_text`] with the module's `escapes` (`mcir_ir::reclaim::Escapes::of`) made
/// once, for printing many of its functions.
pub fn native_text_with(module: &Module, id: FuncId, escapes: &mcir_ir::reclaim::Escapes) -> String {
    mcir_ir::print_function(module, &native_function(module, id, escapes))
}

/// Every function of `module` without forwarding blocks and with straight chains merged.
fn simplify_every_function(module: &mut Module) {
    let ids: Vec<FuncId> = module.funcs.keys().collect();
    for id in ids {
        let f = std::mem::replace(&mut module.funcs[id], mcir_ir::Function::new("", &[], None));
        module.funcs[id] = f.into_simplified_cfg();
    }
}

/// Function `id` of `module` as native code compiles it (`mcir_ir::native_form`), the
/// copying passes' results as they left them.
fn native_function(module: &Module, id: FuncId, escapes: &mcir_ir::reclaim::Escapes) -> mcir_ir::Function {
    mcir_ir::native_form(module, &module.funcs[id], escapes, true).into_owned()
}
