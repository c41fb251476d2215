//! Dense derivatives built from sweeps: Jacobians from forward sweeps of several
//! directions at once or from reverse sweeps, whichever the shape makes cheaper, and
//! Hessians from Hessian-vector products (CLI.md `jacobian`, and `mcc hessian`).
//!
//! Inputs are the arguments' differentiable scalars upon entry, outputs the returned
//! value's, each flattened in argument (field) order and row-major; the Jacobian is the
//! list of rows, one per output. Constant and cache arguments (see [`ArgKind`]) are not
//! inputs: they have no column (and no row of a Hessian).

use crate::check::{flatten_tangent, tangent_from, values_of};
use crate::error::{ArgError, GradError};
use crate::forward::kind_of;
use crate::grad::deep_copy_all;
use crate::{ArgKind, Program};
use mcir_ad::tangent::has_tangent;
use mcir_interp::{Limits, Val};
use mcir_ir::{FuncId, TypeTable};

/// Directions carried by one forward sweep of a Jacobian.
pub const JACOBIAN_WIDTH: usize = 8;

/// How a Jacobian was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Forward sweeps, each carrying up to [`Jacobian::width`] input directions.
    Forward,
    /// Reverse sweeps, one per output.
    Reverse,
}

impl Sweep {
    /// `forward` or `reverse`.
    pub fn word(self) -> &'static str {
        match self {
            Sweep::Forward => "forward",
            Sweep::Reverse => "reverse",
        }
    }
}

/// A dense Jacobian.
#[derive(Clone, Debug)]
pub struct Jacobian {
    /// The returned value.
    pub value: Option<Val>,
    /// One row per output scalar, one column per input scalar.
    pub rows: Vec<Vec<f64>>,
    /// Forward or reverse.
    pub sweep: Sweep,
    /// Sweeps run.
    pub sweeps: usize,
    /// Directions per forward sweep.
    pub width: usize,
}

/// A dense Hessian of a function returning `f64`.
#[derive(Clone, Debug)]
pub struct Hessian {
    /// The returned value.
    pub value: f64,
    /// The gradient, one cotangent per argument.
    pub gradient: Vec<Val>,
    /// One row per input scalar.
    pub rows: Vec<Vec<f64>>,
}

impl Program {
    /// The Jacobian of `func` at `args`, by forward sweeps of [`JACOBIAN_WIDTH`]
    /// directions when there are no more inputs than outputs, else by reverse sweeps.
    pub fn jacobian(&self, func: FuncId, args: &[Val], limits: &Limits) -> Result<Jacobian, GradError> {
        self.jacobian_with(func, args, None, JACOBIAN_WIDTH, limits)
    }

    /// [`Program::jacobian`] with the sweep (`None`: by shape) and the forward width chosen.
    pub fn jacobian_with(
        &self,
        func: FuncId,
        args: &[Val],
        sweep: Option<Sweep>,
        width: usize,
        limits: &Limits,
    ) -> Result<Jacobian, GradError> {
        self.jacobian_with_kinds(func, args, &[], sweep, width, limits)
    }

    /// [`Program::jacobian_with`] with argument kinds (missing ones are active): only the
    /// active arguments' scalars are inputs.
    pub fn jacobian_with_kinds(
        &self,
        func: FuncId,
        args: &[Val],
        kinds: &[ArgKind],
        sweep: Option<Sweep>,
        width: usize,
        limits: &Limits,
    ) -> Result<Jacobian, GradError> {
        let module = &self.module;
        let types = &module.types;
        let f = &module.funcs[func];
        check_kinds(f, kinds)?;
        let width = width.clamp(1, 64);
        let active = |i: usize| kind_of(kinds, i) == ArgKind::Active;
        let n_in = input_count(self, func, args, kinds);
        let value = self.call(func, &deep_copy_all(args), limits).map_err(GradError::Runtime)?;
        let ret = f.ret.filter(|&t| has_tangent(types, t));
        let n_out = match (ret, &value) {
            (Some(t), Some(v)) => values_of(types, t, v).len(),
            _ => 0,
        };
        let sweep = sweep.unwrap_or(if n_in <= n_out { Sweep::Forward } else { Sweep::Reverse });
        let mut rows = vec![vec![0.0; n_in]; n_out];
        let mut sweeps = 0;
        match sweep {
            Sweep::Forward => {
                let np = f.params.len();
                for start in (0..n_in).step_by(width) {
                    let mut tangents = Vec::with_capacity(width * np);
                    for lane in 0..width {
                        tangents.extend(unit_direction(self, func, args, kinds, n_in, start + lane));
                    }
                    let items =
                        self.run_jvp_kinds(func, width, kinds, &deep_copy_all(args), &tangents, limits)?;
                    sweeps += 1;
                    for lane in 0..width.min(n_in - start) {
                        let mut column = Vec::new();
                        if let (Some(t), Some(tv)) = (ret, items.get(1 + lane * (1 + np))) {
                            flatten_tangent(types, t, tv, &mut column);
                        }
                        for (row, x) in rows.iter_mut().zip(column) {
                            row[start + lane] = x;
                        }
                    }
                }
            }
            Sweep::Reverse => {
                let (Some(t), Some(v)) = (ret, &value) else {
                    return Ok(Jacobian { value, rows, sweep, sweeps, width });
                };
                let none: Vec<Option<Val>> = vec![None; f.params.len()];
                for (k, row) in rows.iter_mut().enumerate() {
                    let mut e = vec![0.0; n_out];
                    e[k] = 1.0;
                    let seed = tangent_from(types, t, v, &mut e.into_iter());
                    let out = self.vjp_with(func, &deep_copy_all(args), Some(seed), &none, kinds, limits)?;
                    sweeps += 1;
                    let mut g = Vec::new();
                    for (i, (gv, &pt)) in out.gradient.iter().zip(&f.params).enumerate() {
                        if active(i) {
                            flatten_tangent(types, pt, gv, &mut g);
                        }
                    }
                    for (r, x) in row.iter_mut().zip(g) {
                        *r = x;
                    }
                }
            }
        }
        Ok(Jacobian { value, rows, sweep, sweeps, width })
    }

    /// `mcc jacobian`: `{"value": V, "jacobian": J}`.
    pub fn jacobian_json(&self, func: FuncId, args_json: &str, limits: &Limits) -> Result<String, GradError> {
        self.jacobian_json_with(func, args_json, &[], limits)
    }

    /// [`Program::jacobian_json`] with argument kinds: only active arguments have columns.
    pub fn jacobian_json_with(
        &self,
        func: FuncId,
        args_json: &str,
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<String, GradError> {
        let module = &self.module;
        let args = crate::json::decode_args(module, func, args_json).map_err(GradError::Args)?;
        let j = self.jacobian_with_kinds(func, &args, kinds, None, JACOBIAN_WIDTH, limits)?;
        let mut s = String::from("{\"value\": ");
        match (&j.value, module.funcs[func].ret) {
            (Some(v), Some(t)) => mcir_interp::json::write_value(&mut s, &module.types, t, v),
            _ => s.push_str("null"),
        }
        s.push_str(", \"jacobian\": ");
        write_rows(&mut s, &j.rows);
        s.push('}');
        Ok(s)
    }

    /// The Hessian of `func`, which must return `f64`: one Hessian-vector product per
    /// input scalar.
    pub fn hessian(&self, func: FuncId, args: &[Val], limits: &Limits) -> Result<Hessian, GradError> {
        self.hessian_with(func, args, &[], limits)
    }

    /// [`Program::hessian`] with argument kinds (missing ones are active): rows and
    /// columns only for the active arguments' scalars; constant and cache arguments have
    /// a `()` gradient.
    pub fn hessian_with(
        &self,
        func: FuncId,
        args: &[Val],
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<Hessian, GradError> {
        let module = &self.module;
        let types = &module.types;
        let f = &module.funcs[func];
        if f.ret != Some(TypeTable::F64) {
            return Err(GradError::Args(ArgError {
                message: format!("a Hessian needs a function returning f64; `{}` does not", f.name),
            }));
        }
        check_kinds(f, kinds)?;
        let n = input_count(self, func, args, kinds);
        let mut rows = Vec::with_capacity(n);
        let mut first = None;
        for j in 0..n.max(1) {
            let dir = unit_direction(self, func, args, kinds, n, j);
            let out = self.hvp_with(func, &deep_copy_all(args), &dir, kinds, limits)?;
            if j < n {
                let mut column = Vec::new();
                for (i, (hv, &t)) in out.hvp.iter().zip(&f.params).enumerate() {
                    if kind_of(kinds, i) == ArgKind::Active {
                        flatten_tangent(types, t, hv, &mut column);
                    }
                }
                rows.push(column);
            }
            if first.is_none() {
                first = Some(out);
            }
        }
        let first = first.ok_or_else(|| GradError::Runtime(crate::grad::internal_error("no HVP ran")))?;
        // Columns were computed; the Hessian is symmetric, but report it as computed
        // (row i = d(gradient_i)), transposing the columns.
        let rows = (0..n).map(|i| (0..n).map(|j| rows[j][i]).collect()).collect();
        Ok(Hessian { value: first.value, gradient: first.gradient, rows })
    }

    /// `mcc hessian`: `{"value": V, "gradient": [G1, ...], "hessian": H}`.
    pub fn hessian_json(&self, func: FuncId, args_json: &str, limits: &Limits) -> Result<String, GradError> {
        self.hessian_json_with(func, args_json, &[], limits)
    }

    /// [`Program::hessian_json`] with argument kinds: only active arguments have rows and
    /// columns, and the others a `null` gradient.
    pub fn hessian_json_with(
        &self,
        func: FuncId,
        args_json: &str,
        kinds: &[ArgKind],
        limits: &Limits,
    ) -> Result<String, GradError> {
        let module = &self.module;
        let args = crate::json::decode_args(module, func, args_json).map_err(GradError::Args)?;
        let h = self.hessian_with(func, &args, kinds, limits)?;
        let f = &module.funcs[func];
        let mut s = String::from("{\"value\": ");
        mcir_interp::json::write_f64(&mut s, h.value);
        s.push_str(", \"gradient\": [");
        for (i, (&t, v)) in f.params.iter().zip(&h.gradient).enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            crate::grad::write_tangent(&mut s, &module.types, t, v);
        }
        s.push_str("], \"hessian\": ");
        write_rows(&mut s, &h.rows);
        s.push('}');
        Ok(s)
    }
}

/// Refuses more kinds than parameters.
fn check_kinds(f: &mcir_ir::Function, kinds: &[ArgKind]) -> Result<(), GradError> {
    if kinds.len() > f.params.len() {
        return Err(GradError::Args(ArgError {
            message: format!(
                "`{}` takes {}; {} kinds were given",
                f.name,
                crate::arguments(f.params.len()),
                kinds.len()
            ),
        }));
    }
    Ok(())
}

/// How many differentiable scalars the active arguments hold.
fn input_count(p: &Program, func: FuncId, args: &[Val], kinds: &[ArgKind]) -> usize {
    let types = &p.module.types;
    let f = &p.module.funcs[func];
    f.params
        .iter()
        .zip(args)
        .enumerate()
        .filter(|(i, _)| kind_of(kinds, *i) == ArgKind::Active)
        .map(|(_, (&t, v))| values_of(types, t, v).len())
        .sum()
}

/// One tangent per argument: input scalar `j` of the active arguments' `n` set to 1,
/// everything else zero (`j >= n` gives the zero direction).
fn unit_direction(
    p: &Program,
    func: FuncId,
    args: &[Val],
    kinds: &[ArgKind],
    n: usize,
    j: usize,
) -> Vec<Val> {
    let types = &p.module.types;
    let f = &p.module.funcs[func];
    let mut e = vec![0.0; n];
    if let Some(x) = e.get_mut(j) {
        *x = 1.0;
    }
    let mut it = e.into_iter();
    f.params
        .iter()
        .zip(args)
        .enumerate()
        .map(|(i, (&t, v))| {
            if kind_of(kinds, i) == ArgKind::Active {
                tangent_from(types, t, v, &mut it)
            } else {
                tangent_from(types, t, v, &mut std::iter::repeat(0.0))
            }
        })
        .collect()
}

fn write_rows(s: &mut String, rows: &[Vec<f64>]) {
    s.push('[');
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('[');
        for (k, x) in row.iter().enumerate() {
            if k > 0 {
                s.push_str(", ");
            }
            mcir_interp::json::write_f64(s, *x);
        }
        s.push(']');
    }
    s.push(']');
}
