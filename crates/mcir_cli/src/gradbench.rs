//! `mcc gradbench`: a tool for GradBench, the benchmark of automatic differentiation
//! tools. It speaks GradBench's protocol — one JSON message per line on standard input,
//! one JSON response per line on standard output — and evaluates each eval's functions
//! with the `.mcir` programs of `benches/gradbench/` (built into the binary; `--dir`
//! reads them from another directory).
//!
//! A program says which of its functions serve which of the eval's functions, in header
//! lines such as
//!
//! ```text
//! // gradbench: primal = value logsumexp
//! // gradbench: gradient = gradient logsumexp x
//! // gradbench: jacobian = gradient objective {alpha, mu, q, l}
//! // gradbench: jacobian = gradient objective [main_params, extra_params]
//! ```
//!
//! `value f` returns `f`'s result; `gradient f WRT` the gradient of `f` (which returns
//! `f64`) with respect to one parameter (`x`: an array or number), to several as an
//! object keyed by name (`{..}`), or to several flattened row-major and concatenated
//! (`[..]`). Every other parameter is constant: it gets no derivative code at all. The
//! arguments come from the fields of the eval's input named like the parameters (an
//! input that is a bare number is the argument of a one-parameter function).
//!
//! `define` compiles the program and the functions it names (the time is reported as a
//! `compile` timing); `evaluate` converts the input (a `prepare` timing), then calls the
//! compiled code at least `min_runs` times and until `min_seconds` have passed (at most
//! 100 000 times), one `evaluate` timing per call, on the same buffers each time (put
//! back to the input, untimed, before each run of a function that may write them). An
//! eval function returns an `f64` or an `f64` array; code specialised for the shapes of
//! its inputs is kept for its last 32 shapes.
//!
//! Every line gets one response line, and the session goes on: a line that is not a
//! message (not UTF-8, not a JSON object, longer than `--max-input`) gets an error
//! response with a null id; a blank line is skipped. Numbers that JSON cannot write go
//! out, and may come in, as the strings `mcc run` uses: `"NaN"`, `"Infinity"`,
//! `"-Infinity"`. A module is a name (letters, digits, `_`, `-`), read as `MODULE.mcir`
//! in `--dir`; defining it again frees the old one.

use serde_json::{json, Value as Json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Instant;

/// The programs built into the binary, by module name.
const BUILT_IN: &[(&str, &str)] = &[
    ("hello", include_str!("../../../benches/gradbench/hello.mcir")),
    ("lse", include_str!("../../../benches/gradbench/lse.mcir")),
    ("llsq", include_str!("../../../benches/gradbench/llsq.mcir")),
    ("gmm", include_str!("../../../benches/gradbench/gmm.mcir")),
    ("ode", include_str!("../../../benches/gradbench/ode.mcir")),
    ("lstm", include_str!("../../../benches/gradbench/lstm.mcir")),
];

/// Where the programs come from, and how they are compiled.
#[derive(Clone, Debug)]
pub struct Options {
    /// A directory of `MODULE.mcir` files instead of the built-in programs.
    pub dir: Option<std::path::PathBuf>,
    /// Run the code compiled at `define` for any shapes, instead of compiling each
    /// function again for the shapes of the inputs it is evaluated on.
    pub generic: bool,
    /// The longest message (line) read: a longer one gets an error response.
    pub max_input: u64,
    /// How long one call of an eval function may run (none by default); a call that
    /// runs longer fails, and the session goes on.
    pub timeout: Option<std::time::Duration>,
}

impl Default for Options {
    fn default() -> Options {
        Options { dir: None, generic: false, max_input: crate::DEFAULT_MAX_INPUT, timeout: None }
    }
}

/// What an eval function computes.
#[derive(Clone, Debug, PartialEq)]
enum Computes {
    /// The result of a function.
    Value(String),
    /// The gradient of a function with respect to some of its parameters.
    Gradient(String, Wrt),
}

/// How a gradient is reported.
#[derive(Clone, Debug, PartialEq)]
enum Wrt {
    /// One parameter's gradient, shaped like the parameter.
    One(String),
    /// An object with each parameter's gradient, shaped like it.
    Object(Vec<String>),
    /// The parameters' gradients flattened row-major, one after the other.
    Concat(Vec<String>),
}

impl Wrt {
    fn names(&self) -> Vec<String> {
        match self {
            Wrt::One(n) => vec![n.clone()],
            Wrt::Object(ns) | Wrt::Concat(ns) => ns.clone(),
        }
    }
}

/// Reads the `// gradbench: NAME = ...` lines of a program.
fn directives(text: &str) -> Result<Vec<(String, Computes)>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("// gradbench:") else { continue };
        let (name, what) = rest.split_once('=').ok_or_else(|| format!("`{line}`: expected NAME = ..."))?;
        let words: Vec<&str> = what.split_whitespace().collect();
        let computes = match words.as_slice() {
            ["value", f] => Computes::Value(f.to_string()),
            ["gradient", f, wrt @ ..] if !wrt.is_empty() => {
                let spec = wrt.join(" ");
                let list = |s: &str| -> Vec<String> {
                    s.split(',').map(|w| w.trim().to_string()).filter(|w| !w.is_empty()).collect()
                };
                let wrt = if let Some(inner) = spec.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Wrt::Object(list(inner))
                } else if let Some(inner) = spec.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                    Wrt::Concat(list(inner))
                } else {
                    Wrt::One(spec)
                };
                if wrt.names().is_empty() {
                    return Err(format!("`{line}`: the gradient is with respect to no parameter"));
                }
                Computes::Gradient(f.to_string(), wrt)
            }
            _ => return Err(format!("`{line}`: expected `value F` or `gradient F WRT`")),
        };
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(format!("`{line}`: the eval function has no name"));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("`{line}`: the eval function `{name}` is named twice"));
        }
        out.push((name, computes));
    }
    Ok(out)
}

/// A parameter of an entry function: its name and what it holds.
#[derive(Clone, Debug)]
struct Param {
    name: String,
    kind: ParamKind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ParamKind {
    F64,
    I64,
    F64Array(u8),
    I64Array(u8),
}

/// One eval function, compiled.
struct Entry {
    computes: Computes,
    params: Vec<Param>,
    /// Compiled at `define`, for any shapes.
    prepared: mcir::Prepared<'static>,
    /// Compiled for the shapes of an input (`mcir::Program::specialised`), the first
    /// time an input of those shapes comes, unless the session runs generic code.
    specialised: HashMap<Vec<Vec<usize>>, mcir::Prepared<'static>>,
    /// The shapes of `specialised`, oldest first.
    shape_order: Vec<Vec<Vec<usize>>>,
    /// Shared with the handles, which keep it alive: a module redefined or dropped
    /// frees its programs with its entries.
    program: Arc<mcir::Program>,
    /// The function's name and id in `program`.
    name: String,
    id: mcir::FuncId,
    kinds: Vec<mcir::ArgKind>,
    /// The limits calls run under (`--timeout`).
    limits: mcir::Limits,
    generic: bool,
    /// Whether the result is an array (else an `f64`).
    returns_array: bool,
    /// Whether the function may write the arrays it is given.
    writes_arguments: bool,
}

impl Entry {
    /// The compiled code to run on arguments of these shapes, and the time it took to
    /// compile it if it was compiled now.
    fn code_for(
        &mut self,
        shapes: &[Vec<usize>],
    ) -> Result<(&mut mcir::Prepared<'static>, Option<u64>), String> {
        if self.generic {
            return Ok((&mut self.prepared, None));
        }
        let mut took = None;
        if !self.specialised.contains_key(shapes) {
            // Code for a bounded number of shapes is kept: the oldest goes first.
            if self.specialised.len() >= MAX_SHAPES {
                if let Some(oldest) = self.shape_order.first().cloned() {
                    self.specialised.remove(&oldest);
                    self.shape_order.remove(0);
                }
            }
            let start = Instant::now();
            let id = self.id;
            let fixed: Vec<Option<Vec<usize>>> = self
                .params
                .iter()
                .zip(shapes)
                .map(|(p, s)| {
                    matches!(p.kind, ParamKind::F64Array(_) | ParamKind::I64Array(_)).then(|| s.clone())
                })
                .collect();
            let program = Arc::new(self.program.specialised(id, &fixed).map_err(|e| e.render())?);
            let mut prepared = program
                .shared_function(&self.name)
                .map_err(|e| e.to_string())?
                .with_limits(self.limits.clone())
                .with_kinds(&self.kinds)
                .prepare()
                .map_err(|e| e.to_string())?;
            if matches!(self.computes, Computes::Gradient(..)) {
                prepared.compile_gradient().map_err(|e| e.to_string())?;
            }
            self.specialised.insert(shapes.to_vec(), prepared);
            self.shape_order.push(shapes.to_vec());
            took = Some(start.elapsed().as_nanos() as u64);
        }
        let code = self.specialised.get_mut(shapes).ok_or("no specialised code")?;
        Ok((code, took))
    }
}

/// A defined module.
struct Module {
    entries: HashMap<String, Entry>,
}

/// A runtime buffer for one argument.
#[derive(Clone)]
enum Buffer {
    F64(f64),
    I64(i64),
    F64Array(Vec<f64>, Vec<usize>),
    I64Array(Vec<i64>, Vec<usize>),
}

impl Buffer {
    fn arg(&mut self) -> mcir::Arg<'_> {
        match self {
            Buffer::F64(x) => mcir::Arg::F64(*x),
            Buffer::I64(x) => mcir::Arg::I64(*x),
            Buffer::F64Array(d, s) => mcir::Arg::F64Array(d, s),
            Buffer::I64Array(d, s) => mcir::Arg::I64Array(d, s),
        }
    }

    fn shape(&self) -> Vec<usize> {
        match self {
            Buffer::F64Array(_, s) | Buffer::I64Array(_, s) => s.clone(),
            _ => Vec::new(),
        }
    }
}

/// Runs a session: reads messages from `input` until it ends, writing one response line
/// to `output` for each (flushed at once, since the eval waits for it). A line that is
/// not a message (not UTF-8, not JSON, longer than `options.max_input` bytes) gets an
/// error response, and the session goes on with the next line.
pub fn session(input: &mut dyn BufRead, output: &mut dyn Write, options: &Options) -> std::io::Result<()> {
    let mut modules: HashMap<String, Module> = HashMap::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let response = match read_line(input, &mut line, options.max_input)? {
            Line::End => return Ok(()),
            Line::TooLong => json!({"id": null, "success": false, "error": format!(
                "the message is longer than {} bytes (--max-input)", options.max_input
            )}),
            Line::Read => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match std::str::from_utf8(&line) {
                    Err(e) => {
                        json!({"id": null, "success": false, "error": format!("the message is not UTF-8: {e}")})
                    }
                    Ok(text) => match serde_json::from_str::<Json>(text) {
                        Ok(message) => respond(&message, &mut modules, options),
                        Err(e) => {
                            json!({"id": null, "success": false, "error": format!("the message is not JSON: {e}")})
                        }
                    },
                }
            }
        };
        writeln!(output, "{response}")?;
        output.flush()?;
    }
}

/// What [`read_line`] found.
enum Line {
    /// A line (its newline left out), in the buffer.
    Read,
    /// A line longer than the limit, read to its end and dropped.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads one line of bytes into `line`, keeping at most `limit` of them: the rest of a
/// longer line is read and dropped, so that memory stays bounded whatever comes.
fn read_line(input: &mut dyn BufRead, line: &mut Vec<u8>, limit: u64) -> std::io::Result<Line> {
    let mut too_long = false;
    let mut any = false;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if !any {
                Line::End
            } else if too_long {
                Line::TooLong
            } else {
                Line::Read
            });
        }
        any = true;
        let (chunk, ended) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if (line.len() + chunk.len()) as u64 > limit {
                too_long = true;
                *line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = ended.unwrap_or(available.len());
        input.consume(used);
        if ended.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Read });
        }
    }
}

/// A number from JSON, or one of the strings `mcc run` reads for the non-finite ones.
fn real(value: &Json) -> Option<f64> {
    match value {
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        v => v.as_f64(),
    }
}

/// A number as JSON; the non-finite ones as the strings `mcc run` prints (`"NaN"`,
/// `"Infinity"`, `"-Infinity"`), since JSON has no numbers for them.
fn number(x: f64) -> Json {
    if x.is_finite() {
        json!(x)
    } else if x.is_nan() {
        json!("NaN")
    } else if x > 0.0 {
        json!("Infinity")
    } else {
        json!("-Infinity")
    }
}

fn respond(message: &Json, modules: &mut HashMap<String, Module>, options: &Options) -> Json {
    if !message.is_object() {
        return json!({"id": null, "success": false, "error": "a message is a JSON object"});
    }
    let id = message.get("id").cloned().unwrap_or(Json::Null);
    match message.get("kind").and_then(|k| k.as_str()) {
        Some("start") => json!({"id": id, "tool": "mcir", "config": {"version": env!("CARGO_PKG_VERSION")}}),
        Some("define") => {
            let Some(name) = message.get("module").and_then(|m| m.as_str()) else {
                return json!({"id": id, "success": false, "error": "`define` needs a module name, a string"});
            };
            let start = Instant::now();
            match define(name, options) {
                Ok(m) => {
                    let ns = start.elapsed().as_nanos() as u64;
                    modules.insert(name.to_string(), m);
                    json!({"id": id, "success": true, "timings": [{"name": "compile", "nanoseconds": ns}]})
                }
                Err(e) => json!({"id": id, "success": false, "error": e}),
            }
        }
        Some("evaluate") => {
            let module = message.get("module").and_then(|m| m.as_str()).unwrap_or("");
            let function = message.get("function").and_then(|f| f.as_str()).unwrap_or("");
            // Read in place: an input may be most of a large message.
            let input = message.get("input").unwrap_or(&Json::Null);
            let result = match modules.get_mut(module) {
                None => Err(format!("module `{module}` is not defined")),
                Some(m) => match m.entries.get_mut(function) {
                    None => Err(format!("module `{module}` has no function `{function}`")),
                    Some(entry) => evaluate(entry, input),
                },
            };
            match result {
                Ok((output, timings)) => {
                    json!({"id": id, "success": true, "output": output, "timings": timings})
                }
                Err(e) => json!({"id": id, "success": false, "error": e}),
            }
        }
        _ => json!({"id": id}),
    }
}

/// Compiles module `name` and every function it names.
fn define(name: &str, options: &Options) -> Result<Module, String> {
    // A module is a name, not a path: it can name nothing outside `--dir`.
    let is_name = (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !is_name {
        return Err(format!("`{name}` is not a module name: one to 128 letters, digits, `_` or `-`"));
    }
    let (file, text) = match &options.dir {
        Some(dir) => {
            let path = dir.join(format!("{name}.mcir"));
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            (path.to_string_lossy().to_string(), text)
        }
        None => match BUILT_IN.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => (format!("{name}.mcir"), text.to_string()),
            None => return Err(format!("mcir has no program for the module `{name}`")),
        },
    };
    let program = Arc::new(mcir::Program::compile(&file, &text).map_err(|e| e.render())?);
    let argument_writes = mcir::ir::effects::argument_writes(program.module());
    let mut entries = HashMap::new();
    for (eval_name, computes) in directives(&text)? {
        let (fname, wrt) = match &computes {
            Computes::Value(f) => (f.clone(), Vec::new()),
            Computes::Gradient(f, w) => (f.clone(), w.names()),
        };
        let function = program.shared_function(&fname).map_err(|e| format!("{file}: {e}"))?;
        let id = function.id();
        let module = program.module();
        let f = &module.funcs[function.id()];
        let types = &module.types;
        let names: Vec<String> =
            f.param_values().iter().map(|&p| f.values[p].name.clone().unwrap_or_default()).collect();
        let mut params = Vec::new();
        for (name, &t) in names.iter().zip(&f.params) {
            let kind = match (types.as_scalar(t), types.as_array(t)) {
                (Some(mcir::ir::Scalar::F64), _) => ParamKind::F64,
                (Some(mcir::ir::Scalar::I64), _) => ParamKind::I64,
                (_, Some((mcir::ir::Scalar::F64, r))) => ParamKind::F64Array(r),
                (_, Some((mcir::ir::Scalar::I64, r))) => ParamKind::I64Array(r),
                _ => {
                    return Err(format!(
                        "{file}: parameter `{name}` of `{fname}` is not a number or an array"
                    ))
                }
            };
            params.push(Param { name: name.clone(), kind });
        }
        for w in &wrt {
            if !params
                .iter()
                .any(|p| p.name == *w && matches!(p.kind, ParamKind::F64 | ParamKind::F64Array(_)))
            {
                return Err(format!("{file}: `{fname}` has no f64 parameter `{w}`"));
            }
        }
        // Parameters the gradient is not taken with respect to are constants.
        let kinds: Vec<mcir::ArgKind> = params
            .iter()
            .map(|p| if wrt.contains(&p.name) { mcir::ArgKind::Active } else { mcir::ArgKind::Const })
            .collect();
        let returns_array = f.ret.is_some_and(|r| types.as_array(r).is_some());
        let returns_number = f.ret == Some(mcir::ir::TypeTable::F64)
            || f.ret.is_some_and(|r| types.as_array(r).is_some_and(|(e, _)| e == mcir::ir::Scalar::F64));
        if matches!(computes, Computes::Value(_)) && !returns_number {
            return Err(format!(
                "{file}: `{fname}` returns {}; an eval function returns an f64 or an f64 array",
                f.ret.map_or("nothing".to_string(), |r| types.display(r).to_string())
            ));
        }
        let limits = mcir::Limits { timeout: options.timeout, ..Default::default() };
        let function = function.with_limits(limits.clone());
        let mut prepared = function.with_kinds(&kinds).prepare().map_err(|e| format!("{file}: {e}"))?;
        if matches!(computes, Computes::Gradient(..)) {
            prepared.compile_gradient().map_err(|e| format!("{file}: {e}"))?;
        }
        entries.insert(
            eval_name,
            Entry {
                computes,
                params,
                prepared,
                specialised: HashMap::new(),
                shape_order: Vec::new(),
                program: Arc::clone(&program),
                name: fname.clone(),
                id,
                kinds,
                limits,
                generic: options.generic,
                returns_array,
                writes_arguments: argument_writes
                    .get(mcir::ir::entity::EntityRef::index(id))
                    .is_some_and(|w| w.is_some()),
            },
        );
    }
    Ok(Module { entries })
}

/// The argument of `param` from the eval's input.
fn buffer(param: &Param, input: &Json, single: bool) -> Result<Buffer, String> {
    let value = if single && !input.is_object() {
        input
    } else {
        input.get(&param.name).ok_or_else(|| format!("the input has no field `{}`", param.name))?
    };
    let bad = || format!("field `{}` does not fit {:?}", param.name, param.kind);
    Ok(match param.kind {
        ParamKind::F64 => Buffer::F64(real(value).ok_or_else(bad)?),
        ParamKind::I64 => Buffer::I64(value.as_i64().ok_or_else(bad)?),
        ParamKind::F64Array(rank) => {
            let (data, shape) = flatten(value, rank, &real).ok_or_else(bad)?;
            Buffer::F64Array(data, shape)
        }
        ParamKind::I64Array(rank) => {
            let (data, shape) = flatten(value, rank, &|v| v.as_i64()).ok_or_else(bad)?;
            Buffer::I64Array(data, shape)
        }
    })
}

/// A nested JSON list of `rank` levels, row-major, with its shape (`None` if ragged).
fn flatten<T>(value: &Json, rank: u8, leaf: &dyn Fn(&Json) -> Option<T>) -> Option<(Vec<T>, Vec<usize>)> {
    let mut shape = Vec::new();
    let mut level = value;
    for _ in 0..rank {
        let items = level.as_array()?;
        shape.push(items.len());
        match items.first() {
            Some(first) => level = first,
            None => break,
        }
    }
    shape.resize(rank as usize, 0);
    let mut out = Vec::with_capacity(shape.iter().product());
    fn walk<T>(
        v: &Json,
        depth: usize,
        shape: &[usize],
        leaf: &dyn Fn(&Json) -> Option<T>,
        out: &mut Vec<T>,
    ) -> Option<()> {
        if depth == shape.len() {
            out.push(leaf(v)?);
            return Some(());
        }
        let items = v.as_array()?;
        if items.len() != shape[depth] {
            return None;
        }
        for item in items {
            walk(item, depth + 1, shape, leaf, out)?;
        }
        Some(())
    }
    walk(value, 0, &shape, leaf, &mut out)?;
    Some((out, shape))
}

/// Row-major elements as nested JSON lists of `shape`.
fn nest(data: &[f64], shape: &[usize]) -> Json {
    match shape {
        [] => number(data.first().copied().unwrap_or(0.0)),
        [_] => Json::Array(data.iter().map(|&x| number(x)).collect()),
        [_, rest @ ..] => {
            let stride: usize = rest.iter().product();
            Json::Array(data.chunks(stride.max(1)).map(|c| nest(c, rest)).collect())
        }
    }
}

/// The most shapes of one eval function whose specialised code is kept (about 60 KB each).
const MAX_SHAPES: usize = 32;

/// The most runs of one `evaluate`, each a timing in the response: a bound on its
/// length, and on the time a message may ask for with a tiny function.
const MAX_RUNS: u64 = 100_000;

/// The longest `min_seconds` an `evaluate` may ask for.
const MAX_SECONDS: f64 = 3600.0;

/// Runs an eval function on `input` as many times as asked; its output and timings.
fn evaluate(entry: &mut Entry, input: &Json) -> Result<(Json, Vec<Json>), String> {
    let min_runs = match input.get("min_runs") {
        None => 1,
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_RUNS => n.max(1),
            _ => return Err(format!("`min_runs` must be a whole number from 0 to {MAX_RUNS}")),
        },
    };
    let min_seconds = match input.get("min_seconds") {
        None => 0.0,
        Some(v) => match v.as_f64() {
            Some(t) if (0.0..=MAX_SECONDS).contains(&t) => t,
            _ => return Err(format!("`min_seconds` must be a number of seconds from 0 to {MAX_SECONDS}")),
        },
    };
    let prepare = Instant::now();
    let single = entry.params.len() == 1;
    let mut buffers: Vec<Buffer> =
        entry.params.iter().map(|p| buffer(p, input, single)).collect::<Result<_, _>>()?;
    let shapes: Vec<Vec<usize>> = buffers.iter().map(|b| b.shape()).collect();
    let wrt = match &entry.computes {
        Computes::Gradient(_, w) => w.names(),
        Computes::Value(_) => Vec::new(),
    };
    // Gradient buffers, one per parameter the gradient is taken with respect to.
    let mut grads: Vec<Option<Vec<f64>>> = entry
        .params
        .iter()
        .zip(&buffers)
        .map(|(p, b)| {
            wrt.contains(&p.name).then(|| match b {
                Buffer::F64Array(d, _) => vec![0.0; d.len()],
                _ => vec![0.0],
            })
        })
        .collect();
    let mut timings = vec![json!({"name": "prepare", "nanoseconds": prepare.elapsed().as_nanos() as u64})];
    let returns_array = entry.returns_array;
    let writes_arguments = entry.writes_arguments;
    let computes = entry.computes.clone();
    let params: Vec<ParamKind> = entry.params.iter().map(|p| p.kind).collect();
    let (code, compiled) = entry.code_for(&shapes)?;
    if let Some(ns) = compiled {
        timings.push(json!({"name": "specialise", "nanoseconds": ns}));
    }
    // A function that may write the arrays it is given finds them as the input said at
    // every run: put back (untimed) before each run but the first. Gradients leave them
    // as they were.
    let input_arrays = (matches!(computes, Computes::Value(_)) && writes_arguments)
        .then(|| buffers.clone())
        .filter(|b| b.iter().any(|b| matches!(b, Buffer::F64Array(..) | Buffer::I64Array(..))));
    let mut total = 0.0;
    let mut runs = 0;
    let output = loop {
        if let (Some(input), true) = (&input_arrays, runs > 0) {
            for (b, i) in buffers.iter_mut().zip(input) {
                match (b, i) {
                    (Buffer::F64Array(d, _), Buffer::F64Array(s, _)) => d.copy_from_slice(s),
                    (Buffer::I64Array(d, _), Buffer::I64Array(s, _)) => d.copy_from_slice(s),
                    _ => {}
                }
            }
        }
        let mut args: Vec<mcir::Arg<'_>> = buffers.iter_mut().map(|b| b.arg()).collect();
        let start = Instant::now();
        let out = match &computes {
            Computes::Value(_) if returns_array => {
                let v = code.call_array(&mut args).map_err(|e| e.to_string())?;
                Json::Array(v.into_iter().map(number).collect())
            }
            Computes::Value(_) => number(code.call(&mut args).map_err(|e| e.to_string())?),
            Computes::Gradient(..) => {
                let mut slots: Vec<mcir::GradSlot<'_>> = params
                    .iter()
                    .zip(grads.iter_mut())
                    .map(|(&kind, g)| match (kind, g) {
                        (ParamKind::F64, Some(g)) => mcir::GradSlot::F64(&mut g[0]),
                        (ParamKind::F64Array(_), Some(g)) => mcir::GradSlot::Array(g),
                        _ => mcir::GradSlot::Skip,
                    })
                    .collect();
                code.value_and_gradient(&mut args, &mut slots).map_err(|e| e.to_string())?;
                Json::Null
            }
        };
        let ns = start.elapsed().as_nanos() as u64;
        timings.push(json!({"name": "evaluate", "nanoseconds": ns}));
        total += ns as f64 * 1e-9;
        runs += 1;
        // Enough runs and time, or as many runs as one response reports.
        if (runs >= min_runs && total >= min_seconds) || runs >= MAX_RUNS {
            break out;
        }
    };
    let output = match &entry.computes {
        Computes::Value(_) => output,
        Computes::Gradient(_, w) => {
            let of = |name: &str| -> Json {
                let i = entry.params.iter().position(|p| p.name == name).unwrap_or(0);
                let g = grads[i].as_deref().unwrap_or(&[]);
                nest(g, &shapes[i])
            };
            match w {
                Wrt::One(n) => of(n),
                Wrt::Object(ns) => Json::Object(ns.iter().map(|n| (n.clone(), of(n))).collect()),
                Wrt::Concat(ns) => {
                    let mut flat: Vec<f64> = Vec::new();
                    for n in ns {
                        if let Some(i) = entry.params.iter().position(|p| p.name == *n) {
                            flat.extend(grads[i].as_deref().unwrap_or(&[]));
                        }
                    }
                    Json::Array(flat.into_iter().map(number).collect())
                }
            }
        }
    };
    Ok((output, timings))
}

/// `mcc gradbench [--dir DIR]`: a session on standard input and output.
pub fn run(args: &[std::ffi::OsString], stdin: &mut dyn std::io::Read) -> crate::Outcome {
    let mut options = Options::default();
    let mut it = args.iter().skip(2);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--dir") => match it.next() {
                Some(d) => options.dir = Some(d.into()),
                None => return crate::Outcome::usage("--dir needs a directory"),
            },
            Some("--generic") => options.generic = true,
            Some("--timeout") => match it.next().and_then(|n| n.to_str()).and_then(|n| n.parse::<f64>().ok()) {
                Some(t) if t > 0.0 && t.is_finite() && t < 1e9 => {
                    options.timeout = Some(std::time::Duration::from_secs_f64(t))
                }
                _ => return crate::Outcome::usage("--timeout needs a positive number of seconds"),
            },
            Some("--max-input") => match it.next().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()) {
                Some(n) => options.max_input = n,
                None => return crate::Outcome::usage("--max-input needs a number of bytes"),
            },
            Some("-h" | "--help") => {
                return crate::Outcome::ok(
                    "mcc gradbench [--dir DIR] [--generic] [--max-input BYTES] [--timeout SECONDS]: a GradBench tool; it \
                     speaks GradBench's protocol on standard input and output. Each function is \
                     compiled at `define`, and again for the shapes of the first input of each shape \
                     it is evaluated on (timed as `specialise`), unless --generic. A module is \
                     MODULE.mcir in DIR (default: the built-in programs). A message longer than \
                     BYTES (default 268435456) gets an error response; so does a call that runs \
                     longer than SECONDS (default: no limit). One evaluate runs at most 100000 \
                     times and asks for at most 3600 seconds.\n"
                        .to_string(),
                )
            }
            _ => return crate::Outcome::usage(format!("unexpected argument `{}`", a.to_string_lossy())),
        }
    }
    let mut input = std::io::BufReader::new(stdin);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match session(&mut input, &mut out, &options) {
        Ok(()) => crate::Outcome { code: 0, stdout: String::new(), stderr: String::new() },
        Err(e) => crate::Outcome { code: 1, stdout: String::new(), stderr: format!("error: {e}\n") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_name_values_and_gradients() {
        let d = directives(
            "// gradbench: primal = value f\n// gradbench: gradient = gradient f x\n\
             // gradbench: jacobian = gradient g {a, b}\n// gradbench: flat = gradient g [a, b]\n",
        )
        .unwrap();
        assert_eq!(d[0], ("primal".into(), Computes::Value("f".into())));
        assert_eq!(d[1], ("gradient".into(), Computes::Gradient("f".into(), Wrt::One("x".into()))));
        assert_eq!(d[2].1, Computes::Gradient("g".into(), Wrt::Object(vec!["a".into(), "b".into()])));
        assert_eq!(d[3].1, Computes::Gradient("g".into(), Wrt::Concat(vec!["a".into(), "b".into()])));
        assert!(directives("// gradbench: nonsense").is_err());
    }

    #[test]
    fn nested_lists_flatten_and_nest_again() {
        let j = json!([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]);
        let (d, s) = flatten(&j, 2, &|v| v.as_f64()).unwrap();
        assert_eq!((d.clone(), s.clone()), (vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![2, 3]));
        assert_eq!(nest(&d, &s), j);
        assert!(flatten(&json!([[1.0], [2.0, 3.0]]), 2, &|v| v.as_f64()).is_none());
    }
}
