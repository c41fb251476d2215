//! The `mcc` command line, as a library function so that tests can drive it in-process:
//! argument parsing, reading the program and arguments, and mapping every outcome to
//! the exit status of CLI.md (0 success, 1 program error, 2 command-line error).

pub mod gradbench;

use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::io::Read;
use std::time::Duration;

/// What a run of `mcc` produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit status.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Outcome {
    fn ok(stdout: String) -> Outcome {
        Outcome { code: 0, stdout, stderr: String::new() }
    }

    fn usage(message: impl std::fmt::Display) -> Outcome {
        Outcome { code: 2, stdout: String::new(), stderr: format!("error: {message}\n") }
    }

    fn program(rendered: String) -> Outcome {
        Outcome { code: 1, stdout: String::new(), stderr: rendered }
    }
}

#[derive(Parser, Debug)]
#[command(name = "mcc", version, about = "mcir: a compiler for automatic differentiation of .mcir programs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct Common {
    /// The .mcir program (`-` reads it from standard input).
    file: String,
    /// The entry function (default: `main`, else the only function).
    #[arg(long = "fn", value_name = "NAME")]
    func: Option<String>,
    /// Run with the reference interpreter instead of native code.
    #[arg(long)]
    interp: bool,
    /// Stop a program that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Stop a program whose calls nest deeper than this (default 100000).
    #[arg(long, value_name = "CALLS")]
    max_depth: Option<u64>,
    /// Stop a program that asks for a single allocation larger than this many bytes
    /// (default 4 GiB).
    #[arg(long, value_name = "BYTES")]
    max_alloc: Option<u64>,
    /// Stop a program whose allocations in one call add up to more than this many bytes
    /// (default 8 GiB).
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<u64>,
    /// Reject source whose brackets `( [ {` nest deeper than this (default 256).
    #[arg(long, value_name = "DEPTH")]
    max_nesting: Option<usize>,
    /// Reject source with an expression nested deeper than this (default 10000).
    #[arg(long, value_name = "DEPTH")]
    max_expr_depth: Option<usize>,
    /// Refuse a program text, or a JSON argument (`--args` and the like), longer than
    /// this many bytes (default 268435456, 256 MiB).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_INPUT)]
    max_input: u64,
}

/// The default of `--max-input`: larger than any program or argument list of real use,
/// small enough that reading up to it cannot exhaust a machine's memory.
pub const DEFAULT_MAX_INPUT: u64 = 256 << 20;

/// Argument kinds for differentiation (DifferentiationInterface's model).
#[derive(clap::Args, Debug, Default)]
struct Kinds {
    /// Treat argument I (from 0) as constant: not differentiated, no shadow, a null
    /// derivative. Repeatable.
    #[arg(long = "const", value_name = "I")]
    constant: Vec<usize>,
    /// Treat argument I (from 0) as a cache: scratch space whose initial contents do not
    /// matter; its shadow starts at zero and its derivative is null. Repeatable.
    #[arg(long = "cache", value_name = "I")]
    cache: Vec<usize>,
}

impl Kinds {
    /// One kind per parameter of a function of `n` parameters.
    fn resolve(&self, n: usize) -> Result<Vec<mcir::ArgKind>, Outcome> {
        let mut kinds = vec![mcir::ArgKind::Active; n];
        for (flag, list, kind) in [
            ("--const", &self.constant, mcir::ArgKind::Const),
            ("--cache", &self.cache, mcir::ArgKind::Cache),
        ] {
            for &i in list {
                match kinds.get_mut(i) {
                    Some(k) if *k == mcir::ArgKind::Active || *k == kind => *k = kind,
                    Some(_) => {
                        return Err(Outcome::usage(format!("argument {i} is given both --const and --cache")))
                    }
                    None => {
                        return Err(Outcome::usage(format!(
                            "{flag} {i}: the function takes {n} argument{}",
                            if n == 1 { "" } else { "s" }
                        )))
                    }
                }
            }
        }
        Ok(kinds)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a function and print its value and its arguments' state after the call.
    Run {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// Compile the function for the shapes of --args (see `mcc bench --specialise`).
        #[arg(long)]
        specialise: bool,
    },
    /// Gradient (or, with seeds, vector-Jacobian product) of a function at the arguments.
    Grad {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// JSON cotangent of the returned value (default 1.0 for an f64 result).
        #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
        seed: Option<String>,
        /// JSON array of cotangents for the arguments' state after the call (null = zero).
        #[arg(long = "seed-args", value_name = "JSON", allow_hyphen_values = true)]
        seed_args: Option<String>,
        #[command(flatten)]
        kinds: Kinds,
        /// Compile the function, and its derivative, for the shapes of --args (see `mcc
        /// bench --specialise`).
        #[arg(long)]
        specialise: bool,
    },
    /// Jacobian-vector product: the tangent of the value and of every argument's state
    /// after the call, given the arguments' tangents upon entry (forward mode).
    Jvp {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// JSON array with the tangent of each argument upon entry (null = zero), or @path.json.
        #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
        tangent: String,
        #[command(flatten)]
        kinds: Kinds,
        /// Compile the function, and its derivatives, for the shapes of --args (see `mcc
        /// bench --specialise`).
        #[arg(long)]
        specialise: bool,
    },
    /// Hessian-vector product of a function returning f64: the value, the gradient, and
    /// the derivative of the gradient along the tangent (forward over reverse). With
    /// --seed and --seed-args, of <seed, f(x)> + <seed-args, x after the call>, for any
    /// result.
    Hvp {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// JSON array with the direction for each argument (null = zero), or @path.json.
        #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
        tangent: String,
        /// JSON cotangent of the returned value (default 1.0 for an f64 result).
        #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
        seed: Option<String>,
        /// JSON array of cotangents for the arguments' state after the call (null = zero).
        #[arg(long = "seed-args", value_name = "JSON", allow_hyphen_values = true)]
        seed_args: Option<String>,
        #[command(flatten)]
        kinds: Kinds,
        /// Compile the function, and its derivatives, for the shapes of --args (see `mcc
        /// bench --specialise`).
        #[arg(long)]
        specialise: bool,
    },
    /// Dense Jacobian of the returned value with respect to the arguments' differentiable
    /// scalars (forward or reverse sweeps, by shape).
    Jacobian {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        #[command(flatten)]
        kinds: Kinds,
        /// Compile the function, and its derivatives, for the shapes of --args (see `mcc
        /// bench --specialise`).
        #[arg(long)]
        specialise: bool,
    },
    /// Dense Hessian of a function returning f64, from Hessian-vector products.
    Hessian {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        #[command(flatten)]
        kinds: Kinds,
        /// Compile the function, and its derivatives, for the shapes of --args (see `mcc
        /// bench --specialise`).
        #[arg(long)]
        specialise: bool,
    },
    /// Check the derived rule against finite differences (CLI.md `check`).
    Check {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json (default: random arguments per trial).
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// Random draws.
        #[arg(long, default_value_t = 5)]
        trials: usize,
        /// Relative tolerance.
        #[arg(long, default_value_t = 1e-6)]
        rtol: f64,
        /// Seed of the random draws.
        #[arg(long, default_value_t = 0x6d63_6972)]
        seed: u64,
        /// The highest order checked: 1 (reverse and forward mode, Jacobians) or 2 (also
        /// Hessian-vector products and the Hessian's symmetry), for arguments at a kink.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
        order: u8,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Hold argument I (from 0) constant: it is not perturbed and has no derivative,
        /// and the rules checked are those `--const` derives. Repeatable.
        #[arg(long = "const", value_name = "I")]
        constant: Vec<usize>,
        /// Corrupt the reverse rule of this op on purpose (to see the checker catch it).
        #[arg(long, value_name = "OP", hide = true)]
        corrupt_rule: Option<String>,
    },
    /// Time compiling, and the primal and gradient on native code (medians; with
    /// `--interp`, on the reference interpreter, without the JVP).
    Bench {
        #[command(flatten)]
        common: Common,
        /// JSON array of arguments, or @path.json.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// Calls timed of each kind.
        #[arg(long, default_value_t = 200)]
        iters: usize,
        #[command(flatten)]
        kinds: Kinds,
        /// Compile the function for the shapes of --args: extents become constants and
        /// short loops are unrolled (the code checks the shapes on entry).
        #[arg(long)]
        specialise: bool,
    },
    /// A GradBench tool: GradBench's protocol on standard input and output (see
    /// `docs/performance.md`), with the programs of benches/gradbench.
    Gradbench {
        /// A directory of MODULE.mcir programs instead of the built-in ones.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
        /// Run the code compiled at `define` for any shapes, instead of compiling each
        /// function again for the shapes of the inputs it is evaluated on.
        #[arg(long)]
        generic: bool,
        /// Answer a message (one line) longer than this many bytes with an error
        /// (default 268435456, 256 MiB).
        #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_INPUT)]
        max_input: u64,
        /// Stop a call of an eval function that runs longer than this many seconds (its
        /// response is an error; the session goes on).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
    },
    /// Print the IR of the program (or of one function with --fn).
    Ir {
        #[command(flatten)]
        common: Common,
        /// Which IR to print.
        #[arg(long, value_enum, default_value = "primal")]
        stage: Stage,
        /// Print the primal IR after optimisation (small functions inlined), as it runs
        /// and is differentiated; derived passes are always of that IR.
        #[arg(long)]
        opt: bool,
        /// Print the function compiled for the shapes of these arguments (JSON array, or
        /// @path.json), as `mcc bench --specialise` and `mcc gradbench` run it: implies
        /// --opt.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        shapes_of: Option<String>,
        /// Print each function as native code compiles it: loops around a reduction run
        /// several iterations side by side, each sum in its order, and elements an inner
        /// loop adds into held in values across it (implies --opt).
        #[arg(long)]
        native: bool,
        #[command(flatten)]
        kinds: Kinds,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The function as compiled.
    Primal,
    /// The forward pass of its derived reverse rule.
    Fwd,
    /// The reverse pass of its derived reverse rule.
    Rev,
    /// The forward-mode tangent function.
    Tangent,
    /// Every stage.
    All,
}

/// Runs `mcc` with `args` (the first is the program name), reading `-` from `stdin`.
/// The command runs on a thread with a large stack (see `COMMAND_STACK`).
pub fn run(args: Vec<OsString>, stdin: &mut (dyn Read + Send)) -> Outcome {
    // A GradBench session talks on stdin and stdout as it goes, line by line.
    if args.get(1).is_some_and(|a| a == "gradbench") {
        return gradbench::run(&args, stdin);
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let text = e.render().to_string();
            return if code == 0 {
                Outcome::ok(text)
            } else {
                Outcome { code, stdout: String::new(), stderr: text }
            };
        }
    };
    // The command reads stdin itself (a chunk at a time, up to --max-input), on its thread.
    let worker = std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("mcc".into()).stack_size(COMMAND_STACK);
        thread.spawn_scoped(scope, move || run_here(cli, stdin)).map(|h| h.join())
    });
    match worker {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => {
            Outcome { code: 1, stdout: String::new(), stderr: "error: internal error: mcc panicked\n".into() }
        }
        Err(_) => Outcome::usage("cannot start a thread to run the command"),
    }
}

fn run_here(cli: Cli, stdin: &mut dyn Read) -> Outcome {
    match cli.command {
        Command::Run { common, args, specialise } => cmd_run(&common, args.as_deref(), specialise, stdin),
        Command::Ir { common, stage, opt, shapes_of, native, kinds } => {
            cmd_ir(&common, IrView { stage, opt, native }, shapes_of.as_deref(), &kinds, stdin)
        }
        // Reached only through `run`, which hands the session its real input first.
        Command::Gradbench { .. } => {
            Outcome::usage("mcc gradbench runs as a process, talking on stdin and stdout")
        }
        Command::Check { common, args, trials, rtol, seed, order, json, constant, corrupt_rule } => {
            let options = mcir::CheckOptions {
                trials,
                rtol,
                seed,
                order,
                ad: mcir::AdOptions { corrupt: corrupt_rule },
                constant,
            };
            cmd_check(&common, args.as_deref(), &options, json, stdin)
        }
        Command::Bench { common, args, iters, kinds, specialise } => {
            cmd_bench(&common, args.as_deref(), iters, &kinds, specialise, stdin)
        }
        Command::Jvp { common, args, tangent, kinds, specialise } => {
            cmd_jvp(&common, args.as_deref(), &tangent, &kinds, None, specialise, stdin)
        }
        Command::Jacobian { common, args, kinds, specialise } => {
            cmd_dense(&common, args.as_deref(), &kinds, false, specialise, stdin)
        }
        Command::Hessian { common, args, kinds, specialise } => {
            cmd_dense(&common, args.as_deref(), &kinds, true, specialise, stdin)
        }
        Command::Hvp { common, args, tangent, seed, seed_args, kinds, specialise } => {
            let seeds = (seed.as_deref(), seed_args.as_deref());
            cmd_jvp(&common, args.as_deref(), &tangent, &kinds, Some(seeds), specialise, stdin)
        }
        Command::Grad { common, args, seed, seed_args, kinds, specialise } => {
            let seeds = (seed.as_deref(), seed_args.as_deref());
            cmd_grad(&common, args.as_deref(), seeds, &kinds, specialise, stdin)
        }
    }
}

/// Reads all of `reader`, a chunk at a time, refusing (exit 2) more than `limit` bytes
/// as soon as they come, and, for `json`, at once a byte that JSON text cannot hold (a
/// control character other than whitespace): memory stays bounded whatever the input.
fn read_bounded(reader: &mut dyn Read, limit: u64, what: &str, json: bool) -> Result<Vec<u8>, Outcome> {
    let mut buf = Vec::new();
    read_into(&mut buf, reader, limit, what, json)?;
    Ok(buf)
}

/// [`read_bounded`] of a file: its buffer is allocated once when the file says its size.
fn read_file_bounded(path: &str, limit: u64, what: &str, json: bool) -> Result<Vec<u8>, Outcome> {
    let mut f = std::fs::File::open(path).map_err(|e| Outcome::usage(format!("cannot read {what}: {e}")))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0).min(limit.saturating_add(1));
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    read_into(&mut buf, &mut f, limit, what, json)?;
    Ok(buf)
}

fn read_into(
    buf: &mut Vec<u8>,
    reader: &mut dyn Read,
    limit: u64,
    what: &str,
    json: bool,
) -> Result<(), Outcome> {
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Outcome::usage(format!("cannot read {what}: {e}"))),
        };
        if json {
            if let Some(i) = chunk[..n].iter().position(|&b| b < 0x20 && !b"\t\n\r".contains(&b)) {
                return Err(Outcome::usage(format!(
                    "{what} is not JSON text: byte {:#04x} at offset {}",
                    chunk[i],
                    buf.len() + i
                )));
            }
        }
        if (buf.len() + n) as u64 > limit {
            return Err(Outcome::usage(format!(
                "{what} is longer than {limit} bytes, the limit set by --max-input"
            )));
        }
        if buf.capacity() - buf.len() < n {
            // Doubling, but never past the limit: memory stays within it.
            let ceiling = usize::try_from(limit).unwrap_or(usize::MAX).saturating_add(1);
            let want = (buf.capacity() * 2).max(buf.len() + n).min(ceiling);
            buf.reserve_exact(want.saturating_sub(buf.len()).max(n));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads the program text named on the command line.
fn read_program(file: &str, limit: u64, stdin: &mut dyn Read) -> Result<(String, String), Outcome> {
    let (name, bytes) = if file == "-" {
        ("<stdin>".to_string(), read_bounded(stdin, limit, "the program on stdin", false)?)
    } else {
        (file.to_string(), read_file_bounded(file, limit, &format!("`{file}`"), false)?)
    };
    match String::from_utf8(bytes) {
        Ok(text) => Ok((name, text)),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let before = &e.as_bytes()[..at];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let col = at - before.iter().rposition(|&b| b == b'\n').map(|p| p + 1).unwrap_or(0) + 1;
            Err(Outcome::program(format!(
                "error: {name}:{line}:{col}: the program is not valid UTF-8 text\n"
            )))
        }
    }
}

/// The JSON text of a flag: the value itself, or the contents of the file `@PATH` names
/// (at most `limit` bytes).
fn read_json_arg(flag: &str, text: &str, limit: u64) -> Result<String, Outcome> {
    let bytes = match text.strip_prefix('@') {
        Some(path) => read_file_bounded(path, limit, &format!("the {flag} file `{path}`"), true)?,
        None if text.len() as u64 > limit => {
            return Err(Outcome::usage(format!(
                "{flag} is longer than {limit} bytes, the limit set by --max-input"
            )))
        }
        None => return Ok(text.to_string()),
    };
    String::from_utf8(bytes).map_err(|e| {
        Outcome::usage(format!("the {flag} file `{}` is not UTF-8 text: {}", &text[1..], e.utf8_error()))
    })
}

fn source_limits(common: &Common) -> Result<mcir::SourceLimits, Outcome> {
    let mut limits = mcir::SourceLimits::default();
    let ceiling = mcir::SourceLimits::CEILING;
    for (flag, given, slot) in [
        ("--max-nesting", common.max_nesting, &mut limits.max_nesting),
        ("--max-expr-depth", common.max_expr_depth, &mut limits.max_expr_depth),
    ] {
        if let Some(n) = given {
            if !(1..=ceiling).contains(&n) {
                return Err(Outcome::usage(format!("{flag} must be from 1 to {ceiling}, not {n}")));
            }
            *slot = n;
        }
    }
    Ok(limits)
}

fn compile(common: &Common, stdin: &mut dyn Read) -> Result<mcir::Program, Outcome> {
    let source_limits = source_limits(common)?;
    let (name, text) = read_program(&common.file, common.max_input, stdin)?;
    let engine = if common.interp { mcir::Engine::Interpreter } else { mcir::Engine::Jit };
    mcir::Program::compile_with(&name, &text, &source_limits)
        .map(|p| p.with_engine(engine))
        .map_err(|e| Outcome::program(e.render()))
}

/// The stack commands run on: native code recurses on it, so it is large enough for
/// the deepest recursion the limits allow (the memory is reserved, not committed).
const COMMAND_STACK: usize = 1 << 30;

/// The deepest nesting of calls `--max-depth` may allow (the interpreter needs some of
/// the command's stack for each call; deeper native recursion is stopped by the stack
/// limit first, with the same error).
const MAX_DEPTH_LIMIT: u64 = 1_000_000;

fn limits(common: &Common) -> Result<mcir::Limits, Outcome> {
    let mut limits = mcir::Limits { stack_bytes: COMMAND_STACK - (64 << 20), ..Default::default() };
    if let Some(t) = common.timeout {
        if !(t.is_finite() && t > 0.0 && t < 1e9) {
            return Err(Outcome::usage(format!(
                "--timeout must be a number of seconds above 0 and below 1e9 (about 31 years), not {t}"
            )));
        }
        limits.timeout = Some(Duration::from_secs_f64(t));
    }
    if let Some(d) = common.max_depth {
        if !(1..=MAX_DEPTH_LIMIT).contains(&d) {
            return Err(Outcome::usage(format!("--max-depth must be from 1 to {MAX_DEPTH_LIMIT}, not {d}")));
        }
        limits.max_call_depth = d as usize;
    }
    if let Some(b) = common.max_alloc {
        if b == 0 {
            return Err(Outcome::usage("--max-alloc must be a positive number of bytes".to_string()));
        }
        limits.max_alloc_bytes = b;
    }
    if let Some(b) = common.max_memory {
        if b == 0 {
            return Err(Outcome::usage("--max-memory must be a positive number of bytes".to_string()));
        }
        limits.max_memory_bytes = b;
    }
    Ok(limits)
}

/// `program` with `func` compiled for the shapes of the arguments `args` (JSON).
fn specialised_for(program: mcir::Program, func: mcir::FuncId, args: &str) -> Result<mcir::Program, Outcome> {
    let values =
        mcir::json::decode_args(program.module(), func, args).map_err(|e| Outcome::usage(e.message))?;
    program.specialised(func, &mcir::Program::shapes_of(&values)).map_err(|e| Outcome::program(e.render()))
}

fn cmd_run(common: &Common, args: Option<&str>, specialise: bool, stdin: &mut dyn Read) -> Outcome {
    let result = (|| {
        let limits = limits(common)?;
        let program = compile(common, stdin)?;
        let func = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
        let args = read_json_arg("--args", args.unwrap_or("[]"), common.max_input)?;
        let program = if specialise { specialised_for(program, func, &args)? } else { program };
        match program.run_json(func, &args, &limits) {
            Ok(json) => Ok(Outcome::ok(json + "\n")),
            Err(mcir::RunError::Args(e)) => Err(Outcome::usage(e)),
            Err(mcir::RunError::Runtime(e)) => Err(Outcome::program(program.render_runtime_error(&e))),
        }
    })();
    result.unwrap_or_else(|o| o)
}

fn cmd_grad(
    common: &Common,
    args: Option<&str>,
    (seed, seed_args): (Option<&str>, Option<&str>),
    kinds: &Kinds,
    specialise: bool,
    stdin: &mut dyn Read,
) -> Outcome {
    let result = (|| {
        let limits = limits(common)?;
        let program = compile(common, stdin)?;
        let func = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
        let args = read_json_arg("--args", args.unwrap_or("[]"), common.max_input)?;
        let program = if specialise { specialised_for(program, func, &args)? } else { program };
        let seed = seed.map(|s| read_json_arg("--seed", s, common.max_input)).transpose()?;
        let seed_args = seed_args.map(|s| read_json_arg("--seed-args", s, common.max_input)).transpose()?;
        let kinds = kinds.resolve(program.module().funcs[func].params.len())?;
        derivative_outcome(
            &program,
            program.grad_json_with(func, &args, seed.as_deref(), seed_args.as_deref(), &kinds, &limits),
        )
    })();
    result.unwrap_or_else(|o| o)
}

/// `jacobian`, or `hessian` when `hessian`.
fn cmd_dense(
    common: &Common,
    args: Option<&str>,
    kinds: &Kinds,
    hessian: bool,
    specialise: bool,
    stdin: &mut dyn Read,
) -> Outcome {
    let result = (|| {
        let limits = limits(common)?;
        let program = compile(common, stdin)?;
        let func = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
        let args = read_json_arg("--args", args.unwrap_or("[]"), common.max_input)?;
        let program = if specialise { specialised_for(program, func, &args)? } else { program };
        let kinds = kinds.resolve(program.module().funcs[func].params.len())?;
        let out = if hessian {
            program.hessian_json_with(func, &args, &kinds, &limits)
        } else {
            program.jacobian_json_with(func, &args, &kinds, &limits)
        };
        derivative_outcome(&program, out)
    })();
    result.unwrap_or_else(|o| o)
}

/// `jvp`, or `hvp` with its seeds (`--seed`, `--seed-args`).
fn cmd_jvp(
    common: &Common,
    args: Option<&str>,
    tangent: &str,
    kinds: &Kinds,
    hvp: Option<(Option<&str>, Option<&str>)>,
    specialise: bool,
    stdin: &mut dyn Read,
) -> Outcome {
    let result = (|| {
        let limits = limits(common)?;
        let program = compile(common, stdin)?;
        let func = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
        let args = read_json_arg("--args", args.unwrap_or("[]"), common.max_input)?;
        let program = if specialise { specialised_for(program, func, &args)? } else { program };
        let tangent = read_json_arg("--tangent", tangent, common.max_input)?;
        let kinds = kinds.resolve(program.module().funcs[func].params.len())?;
        let out = match hvp {
            Some((seed, seed_args)) => {
                let seed = seed.map(|s| read_json_arg("--seed", s, common.max_input)).transpose()?;
                let seed_args =
                    seed_args.map(|s| read_json_arg("--seed-args", s, common.max_input)).transpose()?;
                let seeds = (seed.as_deref(), seed_args.as_deref());
                program.hvp_json_seeded(func, &args, &tangent, seeds, &kinds, &limits)
            }
            None => program.jvp_json_with(func, &args, &tangent, &kinds, &limits),
        };
        derivative_outcome(&program, out)
    })();
    result.unwrap_or_else(|o| o)
}

/// The outcome of a derivative command: its JSON, or the error with its exit status.
fn derivative_outcome(
    program: &mcir::Program,
    out: Result<String, mcir::GradError>,
) -> Result<Outcome, Outcome> {
    match out {
        Ok(json) => Ok(Outcome::ok(json + "\n")),
        Err(mcir::GradError::Args(e)) => Err(Outcome::usage(e)),
        Err(mcir::GradError::Runtime(e)) => Err(Outcome::program(program.render_runtime_error(&e))),
        Err(mcir::GradError::Derive(e)) => Err(Outcome::program(format!("error: {e}\n"))),
    }
}

fn cmd_bench(
    common: &Common,
    args: Option<&str>,
    iters: usize,
    kinds: &Kinds,
    specialise: bool,
    stdin: &mut dyn Read,
) -> Outcome {
    let result = (|| {
        if iters == 0 || iters > 10_000_000 {
            return Err(Outcome::usage("--iters must be between 1 and 10000000"));
        }
        let limits = limits(common)?;
        let source_limits = source_limits(common)?;
        let (name, text) = read_program(&common.file, common.max_input, stdin)?;
        // Compile errors are reported with their source lines, as for every command.
        let program = mcir::Program::compile_with(&name, &text, &source_limits)
            .map_err(|e| Outcome::program(e.render()))?;
        let entry = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
        let kinds = kinds.resolve(program.module().funcs[entry].params.len())?;
        let args = read_json_arg("--args", args.unwrap_or("[]"), common.max_input)?;
        let func = common.func.as_deref();
        match mcir::bench::bench(
            &name,
            &text,
            func,
            &args,
            iters,
            &kinds,
            &limits,
            &source_limits,
            specialise,
            if common.interp { mcir::Engine::Interpreter } else { mcir::Engine::Jit },
        ) {
            Ok(r) => Ok(Outcome::ok(r.to_json() + "\n")),
            Err(mcir::ApiError::Args(m)) => Err(Outcome::usage(m)),
            Err(mcir::ApiError::Runtime(e)) => {
                let program =
                    mcir::Program::compile(&name, &text).map_err(|e| Outcome::program(e.render()))?;
                Err(Outcome::program(program.render_runtime_error(&e)))
            }
            Err(e) => Err(Outcome::program(format!("error: {e}\n"))),
        }
    })();
    result.unwrap_or_else(|o| o)
}

fn cmd_check(
    common: &Common,
    args: Option<&str>,
    options: &mcir::CheckOptions,
    json: bool,
    stdin: &mut dyn Read,
) -> Outcome {
    let result = (|| {
        if options.trials == 0 || options.trials > 100_000 {
            return Err(Outcome::usage("--trials must be between 1 and 100000"));
        }
        if !(options.rtol.is_finite() && options.rtol > 0.0) {
            return Err(Outcome::usage("--rtol must be a positive number"));
        }
        let limits = limits(common)?;
        let program = compile(common, stdin)?;
        let func = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
        let args = args.map(|a| read_json_arg("--args", a, common.max_input)).transpose()?;
        let report = match program.check(func, args.as_deref(), options, &limits) {
            Ok(r) => r,
            Err(mcir::GradError::Args(e)) => return Err(Outcome::usage(e)),
            Err(mcir::GradError::Runtime(e)) => {
                return Err(Outcome::program(program.render_runtime_error(&e)))
            }
            Err(mcir::GradError::Derive(e)) => return Err(Outcome::program(format!("error: {e}\n"))),
        };
        let stdout = if json { report.to_json() + "\n" } else { report.render() };
        if report.passed() {
            Ok(Outcome::ok(stdout))
        } else {
            let only_errors = report.failures.iter().all(|f| matches!(f, mcir::Failure::Error { .. }));
            let why = if report.failures.is_empty() && args.is_some() {
                "nothing could be checked: the function is not finite at the arguments given".to_string()
            } else if report.failures.is_empty() {
                "no trial could be checked: the function is not finite at any drawn arguments".to_string()
            } else if only_errors && args.is_some() {
                format!("`{}` fails at the arguments given (see the report)", report.function)
            } else if only_errors {
                format!(
                    "`{}` fails at the arguments checked (see the report); give valid ones with --args",
                    report.function
                )
            } else if let Some((sus, (kind, at))) =
                report.suspects.iter().find_map(|s| s.hand_written.as_ref().map(|h| (s, h)))
            {
                format!(
                    "the hand-written {kind} rule of `{}` at {at} does not agree with finite differences: {}",
                    sus.name, sus.detail
                )
            } else if report
                .failures
                .iter()
                .all(|f| matches!(f, mcir::Failure::Symmetry { .. } | mcir::Failure::Error { .. }))
            {
                format!("the second derivatives of `{}` are not symmetric (see the report)", report.function)
            } else {
                format!(
                    "the derived rule of `{}` does not agree with finite differences (see the report)",
                    report.function
                )
            };
            Ok(Outcome { code: 1, stdout, stderr: format!("error: {why}\n") })
        }
    })();
    result.unwrap_or_else(|o| o)
}

/// Which IR `mcc ir` prints, and in which form.
#[derive(Clone, Copy)]
struct IrView {
    stage: Stage,
    /// After optimisation.
    opt: bool,
    /// As native code compiles it.
    native: bool,
}

/// `mcc ir FILE.ir`: IR text (as `mcc ir` prints it) parsed, verified and printed back.
fn ir_file(common: &Common, stdin: &mut dyn Read) -> Outcome {
    let (name, text) = match read_program(&common.file, common.max_input, stdin) {
        Ok(t) => t,
        Err(o) => return o,
    };
    let module = match mcir::ir::parse_module(&text) {
        Ok(m) => m,
        Err(e) => return Outcome::program(format!("error: {name}:{}:{}: {}\n", e.line, e.col, e.message)),
    };
    if let Err(e) = mcir::ir::verify_module(&module) {
        return Outcome::program(format!("error: {name}: the IR does not verify: {e}\n"));
    }
    Outcome::ok(mcir::ir::print_module(&module))
}

fn cmd_ir(
    common: &Common,
    view: IrView,
    shapes_of: Option<&str>,
    kinds: &Kinds,
    stdin: &mut dyn Read,
) -> Outcome {
    let IrView { stage, opt, native } = view;
    if common.file.to_ascii_lowercase().ends_with(".ir") {
        let plain = stage == Stage::Primal && !opt && !native && shapes_of.is_none();
        if !plain || common.func.is_some() || !kinds.constant.is_empty() || !kinds.cache.is_empty() {
            return Outcome::usage(
                "an .ir file is read, verified and printed back whole: --stage, --opt, --native, \
                 --shapes-of, --fn, --const and --cache apply to .mcir programs",
            );
        }
        return ir_file(common, stdin);
    }
    let result = (|| {
        let mut program = compile(common, stdin)?;
        let opt = opt || native || shapes_of.is_some();
        if let Some(args) = shapes_of {
            let entry = program.entry(common.func.as_deref()).map_err(Outcome::usage)?;
            let args = read_json_arg("--shapes-of", args, common.max_input)?;
            program = specialised_for(program, entry, &args)?;
        }
        // Argument kinds belong to the entry function, named or not.
        let has_kinds = !kinds.constant.is_empty() || !kinds.cache.is_empty();
        let func = match &common.func {
            Some(n) => Some(program.entry(Some(n)).map_err(Outcome::usage)?),
            None if has_kinds => Some(program.entry(None).map_err(Outcome::usage)?),
            None => None,
        };
        // Every stage prints a complete module: the functions asked for, then what they
        // call, and the structs they use (mcir::listing).
        let plain = |m: &mcir::Module, f: mcir::FuncId| mcir::ir::print_function(m, &m.funcs[f]);
        // What the module's functions may keep alive, found once per module printed.
        let escapes: std::cell::RefCell<
            Option<(*const mcir::Module, std::rc::Rc<mcir::ir::reclaim::Escapes>)>,
        > = Default::default();
        let compiled = |m: &mcir::Module, f: mcir::FuncId| {
            let known =
                escapes.borrow().as_ref().filter(|(at, _)| std::ptr::eq(*at, m)).map(|(_, e)| e.clone());
            let e = known.unwrap_or_else(|| {
                let e = std::rc::Rc::new(mcir::ir::reclaim::Escapes::of(m));
                *escapes.borrow_mut() = Some((m as *const mcir::Module, e.clone()));
                e
            });
            mcir::native_text_with(m, f, &e)
        };
        let print: mcir::listing::PrintFn<'_> = if native { &compiled } else { &plain };
        let primal = if opt { program.module() } else { program.written_module() };
        if stage == Stage::Primal {
            return Ok(Outcome::ok(match func {
                Some(f) => {
                    let mut listing = mcir::listing::Listing::new();
                    listing.add_with_callees(primal, &[f], print);
                    listing.text()
                }
                None if native => program.native_ir_text(None),
                None => mcir::ir::print_module(primal),
            }));
        }
        let funcs: Vec<mcir::FuncId> = match func {
            Some(f) => vec![f],
            None => program.module().funcs.keys().collect(),
        };
        let derive_error = |e: mcir::AdError| Outcome::program(format!("error: {e}\n"));
        // With constant arguments, the entry's own tangent function.
        let tangents = match (stage, func) {
            (Stage::Tangent | Stage::All, Some(f)) => {
                let kinds = kinds.resolve(program.module().funcs[f].params.len())?;
                if kinds.contains(&mcir::ArgKind::Const) {
                    let t = program.tangent_module_with(f, &kinds).map_err(derive_error)?;
                    let tf = t.entry.as_ref().map(|(_, tf, _)| *tf);
                    Some((t, tf))
                } else {
                    let t = program.tangent_module(&funcs).map_err(derive_error)?;
                    let tf = t.tangent(f);
                    Some((t, tf))
                }
            }
            (Stage::Tangent | Stage::All, None) => {
                Some((program.tangent_module(&funcs).map_err(derive_error)?, None))
            }
            _ => None,
        };
        let tangent_of = |f: mcir::FuncId| match &tangents {
            Some((_, Some(tf))) if Some(f) == func => Some(*tf),
            Some((t, _)) => t.tangent(f),
            None => None,
        };
        // With constant arguments, the entry's own rule.
        let entry_kinds = match func {
            Some(f) => kinds.resolve(program.module().funcs[f].params.len())?,
            None => Vec::new(),
        };
        // The rules a gradient of the entry runs (`grad` takes `main`, or the only
        // function, when no `--fn` is given), though every function is printed.
        let rule_entry = func.or_else(|| program.entry(None).ok());
        let d = if stage == Stage::Tangent {
            None
        } else {
            Some(
                program
                    .differentiate_with(&mcir::AdOptions::default(), rule_entry, &entry_kinds)
                    .map_err(derive_error)?,
            )
        };
        let mut listing = mcir::listing::Listing::new();
        let (mut primal_roots, mut pass_roots, mut tangent_roots) = (Vec::new(), Vec::new(), Vec::new());
        for &f in &funcs {
            // The module as written lacks the functions optimisation adds (a variant
            // returning values, `mcir::ir::returns`).
            if stage == Stage::All && primal.funcs.get(f).is_some() {
                listing.add(primal, f, print);
                primal_roots.push(f);
            }
            if let Some(d) = &d {
                for reverse in [false, true] {
                    let wanted = if reverse { Stage::Rev } else { Stage::Fwd };
                    if stage == wanted || stage == Stage::All {
                        let pass = d.pass(f, reverse);
                        listing.add(d.module(), pass, print);
                        pass_roots.push(pass);
                    }
                }
            }
            if let (Some((t, _)), Some(tf)) = (&tangents, tangent_of(f)) {
                listing.add(&t.module, tf, print);
                tangent_roots.push(tf);
            }
        }
        listing.add_with_callees(primal, &primal_roots, print);
        if let Some(d) = &d {
            listing.add_with_callees(d.module(), &pass_roots, print);
        }
        if let Some((t, _)) = &tangents {
            listing.add_with_callees(&t.module, &tangent_roots, print);
        }
        let out = listing.text();
        Ok(Outcome::ok(out))
    })();
    result.unwrap_or_else(|o| o)
}
