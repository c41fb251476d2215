//! Random well-typed, terminating `.mcir` programs with arguments, for differential
//! testing (interpreter against native code, derived rules against finite differences)
//! and for fuzzing.
//!
//! A program is drawn from a seed, or from any byte string (a fuzzer's input), and mixes
//! what the language offers: constants, value and `mut` structs (a value struct holding
//! an array is an argument, captured by closures and written by a callee), tuples
//! (nested too), `#[checkpoint]` loops,
//! closures (capturing scalars and arrays, changing arrays, nested, passed to a function
//! that takes a function), hand-written rules,
//! refs (of scalars and of arrays), `f64` arrays of rank 1 to 3, `i64` and `bool`
//! arrays, loops with constant and data-dependent trip counts, loops around a reduction
//! (which native code runs several rows at a time), `while` loops,
//! branches, `break` and `continue`, early returns, calls with aliased arguments,
//! bounded recursion (of scalars, over halves of an array, writing an array on the
//! way down, on two branches making arrays on every level, and looping over fresh
//! copies as a determinant's expansion does), a
//! function that never returns (called only where it is not reached),
//! in-place updates, fresh allocations and the math builtins. Every program terminates
//! (every loop that runs has a bound), indexes in range, never overflows an
//! `i64`, and keeps real arithmetic smooth (no division by values near zero, `log` and
//! `sqrt` of positive arguments only) and its state bounded (every update of state adds
//! or multiplies by a bounded amount), so its derivative exists and finite differences
//! approximate it. Branch thresholds are random, so a kink is met with probability
//! near zero.

use std::fmt::Write as _;

/// A generated program and arguments for its entry function `main`.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The program's source text.
    pub source: String,
    /// The arguments of `main`, as the JSON array `mcc --args` takes.
    pub args: String,
}

/// Where random choices come from: a seed's generator, or the bytes of a fuzzer's
/// input (then zeros once they run out, which ends every choice at its simplest).
pub enum Source<'a> {
    /// SplitMix64 from a seed.
    Seed(u64),
    /// Bytes, read in order.
    Bytes(&'a [u8]),
}

impl Source<'_> {
    fn next(&mut self) -> u64 {
        match self {
            Source::Seed(s) => {
                *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = *s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^ (z >> 31)
            }
            Source::Bytes(b) => {
                let mut x = 0u64;
                for _ in 0..2 {
                    let (first, rest) = b.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
                    *b = rest;
                    x = (x << 8) | first as u64;
                }
                x
            }
        }
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// A number in about `-2..2`, with two decimals.
    fn real(&mut self) -> f64 {
        (self.below(400) as f64 - 200.0) / 100.0
    }

    /// A threshold for a branch: never a round number, so that no input sits on it.
    fn threshold(&mut self) -> String {
        format!("{:.5}", self.real() * 0.7 + 0.000_37)
    }
}

/// The program drawn from `seed`.
pub fn generate(seed: u64) -> Generated {
    generate_from(&mut Source::Seed(seed))
}

/// The program drawn from a fuzzer's bytes.
pub fn generate_from_bytes(data: &[u8]) -> Generated {
    generate_from(&mut Source::Bytes(data))
}

/// Sizes of the arrays `main` receives (fixed, so that constant indices are in range).
const X_LEN: usize = 5;
const M_ROWS: usize = 3;
const M_COLS: usize = 4;
const V_LEN: usize = 3;
const VEL_ROWS: usize = 2;

/// Names of scalar `f64` values any expression in `main` may read.
struct Scope {
    reals: Vec<String>,
    /// Non-negative `i64` values below 4 (loop counters, small parameters).
    small_ints: Vec<String>,
    /// Whether a `break`/`continue` may appear here (inside a loop).
    in_loop: bool,
    depth: usize,
}

struct Gen<'s, 'a> {
    src: &'s mut Source<'a>,
    out: String,
    fresh: usize,
}

impl Gen<'_, '_> {
    fn name(&mut self, base: &str) -> String {
        self.fresh += 1;
        format!("{base}{}", self.fresh)
    }

    /// A smooth real expression over the scope's reals.
    fn real(&mut self, scope: &Scope, depth: usize) -> String {
        if depth == 0 || self.src.chance(30) {
            return match self.src.below(10) {
                0..=6 if !scope.reals.is_empty() => scope.reals[self.src.below(scope.reals.len())].clone(),
                7 => format!("x[{}]", self.src.below(X_LEN)),
                8 => format!("m[{}, {}]", self.src.below(M_ROWS), self.src.below(M_COLS)),
                _ => format!("{:.2}", self.src.real()),
            };
        }
        let a = self.real(scope, depth - 1);
        match self.src.below(16) {
            0 | 1 => format!("({a} + {})", self.real(scope, depth - 1)),
            2 => format!("({a} - {})", self.real(scope, depth - 1)),
            3 | 4 => format!("({a} * {})", self.real(scope, depth - 1)),
            5 => {
                let b = self.real(scope, depth - 1);
                format!("({a} / (1.5 + {b} * {b}))")
            }
            6 => format!("sin({a})"),
            7 => format!("cos({a})"),
            8 => format!("tanh({a})"),
            9 => format!("exp(sin({a}))"),
            10 => format!("log(1.0 + {a} * {a})"),
            11 => format!("sqrt(2.0 + {a} * {a})"),
            12 => format!("atan2({a}, 2.0 + cos({}))", self.real(scope, depth - 1)),
            13 => format!("(tanh({a}) + 0.5) ** 2"),
            14 if !scope.small_ints.is_empty() => {
                let k = &scope.small_ints[self.src.below(scope.small_ints.len())];
                format!("({a} * f64({k}))")
            }
            _ => format!("(-{a})"),
        }
    }

    /// An index into `x`, in range.
    fn x_index(&mut self, scope: &Scope) -> String {
        if !scope.small_ints.is_empty() && self.src.chance(50) {
            let k = &scope.small_ints[self.src.below(scope.small_ints.len())];
            format!("({k} % {X_LEN})")
        } else {
            self.src.below(X_LEN).to_string()
        }
    }

    fn line(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "    ".repeat(indent));
    }

    /// Statements of `main`'s body (or a nested block), updating `acc`.
    fn block(&mut self, scope: &mut Scope, indent: usize, count: usize) {
        for _ in 0..count {
            self.statement(scope, indent);
        }
    }

    fn statement(&mut self, scope: &mut Scope, indent: usize) {
        let nested = scope.depth < 2;
        let e = |g: &mut Self, s: &Scope| g.real(s, 2);
        match self.src.below(64) {
            0 | 1 => {
                let v = self.name("t");
                let value = e(self, scope);
                self.line(indent, &format!("let {v} = {value};"));
                scope.reals.push(v);
            }
            2 | 3 => {
                let value = e(self, scope);
                let op = ["+=", "-=", "*="][self.src.below(3)];
                let value = if op == "*=" {
                    format!("(1.0 + 0.25 * tanh({value}))")
                } else {
                    format!("tanh({value})")
                };
                self.line(indent, &format!("acc {op} {value};"));
            }
            4 => {
                let i = self.x_index(scope);
                let value = e(self, scope);
                self.line(indent, &format!("x[{i}] = 2.0 * tanh({value});"));
            }
            5 => {
                let i = self.x_index(scope);
                let value = e(self, scope);
                self.line(indent, &format!("x[{i}] *= 0.5 + 0.25 * cos({value});"));
            }
            6 => {
                let (r, c) = (self.src.below(M_ROWS), self.src.below(M_COLS));
                let value = e(self, scope);
                self.line(indent, &format!("m[{r}, {c}] += 0.5 * tanh({value});"));
            }
            7 if nested => {
                let i = self.name("i");
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                let mut inner = Scope {
                    reals: scope.reals.clone(),
                    small_ints: scope.small_ints.clone(),
                    in_loop: true,
                    depth: scope.depth + 1,
                };
                inner.reals.push(format!("x[{i}]"));
                inner.small_ints.push(i);
                let n = self.src.below(3) + 1;
                self.block(&mut inner, indent + 1, n);
                self.line(indent, "}");
            }
            8 if nested => {
                // A trip count that depends on the data (0 to 3).
                let k = self.name("k");
                let value = e(self, scope);
                self.line(indent, &format!("let {k} = i64(floor(1.5 + 1.49 * sin({value})));"));
                let j = self.name("j");
                self.line(indent, &format!("for {j} in 0..{k} {{"));
                let mut inner = Scope {
                    reals: scope.reals.clone(),
                    small_ints: scope.small_ints.clone(),
                    in_loop: true,
                    depth: scope.depth + 1,
                };
                inner.small_ints.push(j);
                let n = self.src.below(3) + 1;
                self.block(&mut inner, indent + 1, n);
                self.line(indent, "}");
            }
            9 if nested => {
                let c = self.name("c");
                let t = self.src.threshold();
                let value = e(self, scope);
                self.line(indent, &format!("let mut {c} = 0;"));
                self.line(indent, &format!("while {c} < 4 && acc < {t} + {value} {{"));
                self.line(indent + 1, "acc += 0.5 + 0.25 * tanh(acc);");
                self.line(indent + 1, &format!("{c} += 1;"));
                self.line(indent, "}");
            }
            10 | 11 if nested => {
                let value = e(self, scope);
                let t = self.src.threshold();
                self.line(indent, &format!("if {value} > {t} {{"));
                let mut inner = Scope {
                    reals: scope.reals.clone(),
                    small_ints: scope.small_ints.clone(),
                    in_loop: scope.in_loop,
                    depth: scope.depth + 1,
                };
                let n = self.src.below(2) + 1;
                self.block(&mut inner, indent + 1, n);
                if self.src.chance(50) {
                    self.line(indent, "} else {");
                    let mut other = Scope {
                        reals: scope.reals.clone(),
                        small_ints: scope.small_ints.clone(),
                        in_loop: scope.in_loop,
                        depth: scope.depth + 1,
                    };
                    let n = self.src.below(2) + 1;
                    self.block(&mut other, indent + 1, n);
                }
                self.line(indent, "}");
            }
            12 if scope.in_loop => {
                let value = e(self, scope);
                let t = self.src.threshold();
                let word = if self.src.chance(50) { "break" } else { "continue" };
                self.line(indent, &format!("if {value} > {t} {{ {word}; }}"));
            }
            13 if scope.depth > 0 && !scope.in_loop => {
                let value = e(self, scope);
                let t = self.src.threshold();
                let r = e(self, scope);
                self.line(indent, &format!("if {value} > {t} {{ return acc * tanh({r}); }}"));
            }
            14 => {
                let value = e(self, scope);
                self.line(indent, &format!("acc += 0.5 * scale(x, {value});"));
            }
            15 => {
                // Aliasing: the same array twice.
                self.line(indent, "acc += mix(x, x);");
            }
            16 => {
                let value = e(self, scope);
                let n = self.src.below(4);
                if self.src.chance(50) {
                    self.line(indent, &format!("acc += descend({value}, {n});"));
                } else {
                    self.line(indent, &format!("acc += branches({value}, x, {n});"));
                }
            }
            17 => {
                let value = e(self, scope);
                self.line(indent, &format!("*r += 0.5 * tanh({value});"));
                scope.reals.push("*r".into());
            }
            18 => {
                let (a, b) = (e(self, scope), e(self, scope));
                let p = self.name("p");
                self.line(indent, &format!("let {p} = Pair {{ a: tanh({a}), b: tanh({b}) }};"));
                self.line(indent, &format!("acc += pair_value({p});"));
            }
            19 => {
                let value = e(self, scope);
                self.line(indent, &format!("st.total += tanh({value});"));
                let i = self.src.below(X_LEN);
                self.line(indent, &format!("st.v[{i}] *= 0.75 + 0.125 * sin(st.total);"));
            }
            20 => {
                let y = self.name("y");
                let value = e(self, scope);
                match self.src.below(4) {
                    0 => self.line(indent, &format!("let {y} = sin(x) * tanh({value});")),
                    1 => self.line(indent, &format!("let {y} = copy(x);")),
                    2 => self.line(indent, &format!("let {y} = fill(tanh({value}), {X_LEN});")),
                    _ => self.line(indent, &format!("let {y} = x + tanh(x) * tanh({value});")),
                }
                self.line(indent, &format!("acc += tanh(dot({y}, x) * 0.1);"));
            }
            21 => {
                let value = e(self, scope);
                self.line(indent, &format!("x += tanh({value}) * 0.1;"));
            }
            22 => {
                let t = self.name("u");
                let value = e(self, scope);
                self.line(indent, &format!("let {t} = ({value}, x);"));
                let i = self.src.below(X_LEN);
                self.line(indent, &format!("acc += tanh({t}.0 + {t}.1[{i}]);"));
            }
            23 => {
                // An `i64` array: a literal, an in-place update, a sum.
                let a = self.name("ka");
                let (b, c) = (self.src.below(5), self.src.below(5));
                self.line(indent, &format!("let {a} = [n, {b}, {c}];"));
                let pick = self.src.below(3);
                self.line(indent, &format!("{a}[{pick}] += n * 2 - 1;"));
                let value = e(self, scope);
                self.line(indent, &format!("acc += tanh({value}) * f64(sum({a})) * 0.1;"));
            }
            24 => {
                // A `bool` array decided by the data, read by a branch.
                let a = self.name("flags");
                let t = self.src.threshold();
                let value = e(self, scope);
                self.line(indent, &format!("let {a} = [true, {value} > {t}, false];"));
                let body = e(self, scope);
                self.line(indent, &format!("if {a}[1] {{ acc += tanh({body}); }} else {{ acc -= 0.25; }}"));
            }
            25 => {
                // A fresh rank-3 array.
                let a = self.name("cube");
                let value = e(self, scope);
                let (i, j, k) = (self.src.below(2), self.src.below(3), self.src.below(2));
                self.line(indent, &format!("let {a} = zeros(2, 3, 2);"));
                self.line(indent, &format!("{a}[{i}, {j}, {k}] = tanh({value});"));
                let pick = self.src.below(X_LEN);
                self.line(indent, &format!("{a} += x[{pick}] * 0.1;"));
                self.line(indent, &format!("acc += sum({a}) * 0.1;"));
            }
            26 => {
                // A ref holding an array: updates through it reach the array.
                let q = self.name("q");
                let value = e(self, scope);
                self.line(indent, &format!("let {q} = ref(copy(x));"));
                let pick = self.src.below(X_LEN);
                self.line(indent, &format!("(*{q})[{pick}] += tanh({value});"));
                self.line(indent, &format!("acc += sum(*{q}) * 0.1;"));
            }
            27 => {
                // Nested tuples.
                let w = self.name("w");
                let value = e(self, scope);
                self.line(indent, &format!("let {w} = (({value}, n), x);"));
                self.line(indent, &format!("acc += tanh({w}.0.0 + f64({w}.0.1)) + {w}.1[0] * 0.1;"));
            }
            28 => {
                let value = e(self, scope);
                self.line(indent, &format!("acc += HALF * tanh({value});"));
            }
            29 if nested => {
                // A loop around a reduction over the elements before `i` (or all of
                // them): what native code runs several rows at a time.
                let (i, j, s) = (self.name("i"), self.name("j"), self.name("s"));
                let limit = if self.src.chance(50) { i.clone() } else { "len(x)".to_string() };
                let rows =
                    Scope { reals: vec![format!("x[{i}]")], small_ints: Vec::new(), in_loop: true, depth: 2 };
                let first = self.real(&rows, 2);
                let cells = Scope {
                    reals: vec![format!("x[{i}]"), format!("x[{j}]")],
                    small_ints: Vec::new(),
                    in_loop: true,
                    depth: 2,
                };
                let term = self.real(&cells, 2);
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(indent + 1, &format!("let mut {s} = tanh({first});"));
                self.line(indent + 1, &format!("for {j} in 0..{limit} {{"));
                self.line(indent + 2, &format!("{s} += x[{j}] * tanh({term});"));
                self.line(indent + 1, "}");
                self.line(indent + 1, &format!("acc += 0.1 * tanh({s});"));
                self.line(indent, "}");
            }
            30 => {
                // A closure capturing what the scope holds (scalars by value, `x` and `r`
                // by address), called twice.
                let f = self.name("f");
                let body = e(self, scope);
                self.line(indent, &format!("let {f} = |s: f64| tanh(s * 0.5 + {body});"));
                let (a, b) = (e(self, scope), e(self, scope));
                self.line(indent, &format!("acc += {f}({a}) * 0.5 + {f}({b}) * 0.25;"));
            }
            31 => {
                // A closure changing an array it captured.
                let f = self.name("bump");
                let i = self.src.below(X_LEN);
                let body = e(self, scope);
                self.line(indent, &format!("let {f} = |s: f64| {{ x[{i}] += 0.1 * tanh(s + {body}); }};"));
                let a = e(self, scope);
                self.line(indent, &format!("{f}({a});"));
            }
            32 => {
                // A closure passed to a function that takes a function.
                let (a, b) = (e(self, scope), e(self, scope));
                self.line(indent, &format!("acc += apply_twice(|s: f64| tanh(s + {a}), {b});"));
            }
            33 => {
                // Nested closures: the inner one captures the outer one's parameter.
                let f = self.name("outer");
                let body = e(self, scope);
                self.line(
                    indent,
                    &format!("let {f} = |s: f64| {{ let inner = |u: f64| u * s + {body}; return tanh(inner(s * 0.5)); }};"),
                );
                let a = e(self, scope);
                self.line(indent, &format!("acc += {f}({a});"));
            }
            34 => {
                // A named function and a function with hand-written rules, passed and called.
                let (a, b) = (e(self, scope), e(self, scope));
                self.line(indent, &format!("acc += apply_twice(soft, {a}) + 0.1 * softplus({b});"));
            }
            35 => {
                // Recursion over halves of the array (divide and conquer).
                let value = e(self, scope);
                self.line(indent, &format!("acc += 0.5 * halves(x, 0, len(x)) * tanh({value});"));
            }
            37 => {
                // The value struct holding an array: read, captured by a closure, and
                // passed to a function that writes its array.
                let i = self.src.below(V_LEN);
                let value = e(self, scope);
                match self.src.below(3) {
                    0 => self.line(indent, &format!("acc += tanh(p.w * {value}) + p.v[{i}] * 0.1;")),
                    1 => {
                        let f = self.name("near");
                        self.line(indent, &format!("let {f} = |s: f64| tanh(s * p.w + p.v[{i}]);"));
                        self.line(indent, &format!("acc += {f}({value}) * 0.5;"));
                    }
                    _ => self.line(indent, &format!("acc += 0.5 * spread(p, {value});")),
                }
            }
            38 if nested => {
                // A checkpointed loop carrying a value, reading arrays from outside.
                let (c, i) = (self.name("c"), self.name("i"));
                let value = e(self, scope);
                let steps = self.src.below(4) + 1;
                self.line(indent, &format!("let mut {c} = tanh({value});"));
                self.line(indent, "#[checkpoint]");
                self.line(indent, &format!("for {i} in 0..{steps} {{"));
                self.line(
                    indent + 1,
                    &format!("{c} = {c} * 0.5 + 0.25 * tanh({c} * p.v[{i} % {V_LEN}] + x[{i} % {X_LEN}]);"),
                );
                self.line(indent, "}");
                self.line(indent, &format!("acc += {c};"));
            }
            36 => {
                // Recursion that changes the array on the way down.
                let k = if scope.small_ints.is_empty() {
                    "n".to_string()
                } else {
                    scope.small_ints[self.src.below(scope.small_ints.len())].clone()
                };
                self.line(indent, &format!("acc += 0.25 * smooth(x, {k} % 4 + 1);"));
            }
            40 if nested => {
                // Helpers with a branch and a loop, called per element: inlined into the
                // loop (one writes its results into an array made before it).
                let (i, o) = (self.name("i"), self.name("o"));
                let value = e(self, scope);
                self.line(indent, &format!("let {o} = zeros(2);"));
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(indent + 1, &format!("into_pair(x[{i}] * 0.5 + 0.1 * tanh({value}), {o});"));
                self.line(indent + 1, &format!("acc += 0.1 * shaped(x[{i}] + {o}[0]) * {o}[1];"));
                self.line(indent, "}");
            }
            42 if nested => {
                // A small array read and written only at constant indices, under a branch
                // in a loop: its elements become values (loop-carried block parameters).
                let (i, w) = (self.name("i"), self.name("w"));
                let value = e(self, scope);
                self.line(indent, &format!("let {w} = [[0.3719, tanh({value})], [1.0, 0.25]];"));
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(indent + 1, &format!("if x[{i}] > {w}[0, 0] {{"));
                self.line(indent + 2, &format!("{w}[0, 1] = {w}[0, 1] * 0.5 + sin(x[{i}]);"));
                self.line(indent + 1, "} else {");
                self.line(indent + 2, &format!("{w}[1, 0] += 0.25 * x[{i}] * {w}[1, 1];"));
                self.line(indent + 1, "}");
                self.line(indent, "}");
                self.line(indent, &format!("acc += {w}[0, 1] * {w}[1, 0] + f64(size({w}, 1)) * 0.01;"));
            }
            43 if nested => {
                // Branches on loop counters (all but one column copied, as for a minor):
                // the reverse pass evaluates the comparisons again instead of taping
                // which way each iteration went.
                let (r, c) = (self.name("r"), self.name("c"));
                let value = e(self, scope);
                self.line(indent, &format!("for {r} in 0..size(m, 0) {{"));
                self.line(indent + 1, &format!("for {c} in 0..size(m, 1) {{"));
                self.line(indent + 2, &format!("if {c} < 1 {{"));
                self.line(indent + 3, &format!("acc += m[{r}, {c}] * tanh({value});"));
                self.line(indent + 2, &format!("}} else if {c} > {r} {{"));
                self.line(indent + 3, &format!("acc += sin(m[{r}, {c}]) * 0.5;"));
                self.line(indent + 2, "}");
                self.line(indent + 1, "}");
                self.line(indent, "}");
            }
            44 => {
                // Recursion with a loop that makes a fresh shorter copy per term (as a
                // determinant makes minors): its leaves make none of the stacks of the
                // loop, and its calls' records go on a stack.
                let k = if scope.small_ints.is_empty() {
                    "n".to_string()
                } else {
                    scope.small_ints[self.src.below(scope.small_ints.len())].clone()
                };
                let value = e(self, scope);
                self.line(indent, &format!("acc += 0.1 * expand(x, {k} % 3) * tanh({value});"));
            }
            45 if nested => {
                // An array made anew in each iteration of a loop, read at elements or
                // summed: the reverse pass tapes the elements it needs, makes the shadows
                // again, and both passes give each iteration's arrays back when it ends.
                let (i, a, b) = (self.name("i"), self.name("fresh"), self.name("g"));
                let value = e(self, scope);
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                match self.src.below(3) {
                    0 => self.line(indent + 1, &format!("let {a} = fill(tanh({value}), {X_LEN});")),
                    1 => self.line(indent + 1, &format!("let {a} = [x[{i}], tanh({value}), 0.5];")),
                    _ => self.line(indent + 1, &format!("let {a} = copy(x) * tanh({value});")),
                }
                self.line(indent + 1, &format!("let {b} = {a} * 0.5 + x[{i}];"));
                let read = self.src.below(3);
                if read == 0 {
                    self.line(indent + 1, &format!("acc += tanh({b}[{i} % len({b})]) * {a}[0] * 0.25;"));
                } else if read == 1 {
                    // Summed whole: the sum's adjoint is spread over a shape the reverse
                    // pass traces back to the fill, literal or copy; a product with the
                    // array reads it (a fill is filled again where nothing writes arrays
                    // of its type).
                    self.line(indent + 1, &format!("acc += sum({b}) * 0.01 + sum({a} * x[{i}]) * 0.01;"));
                } else {
                    // Read under a branch: the forward pass pushes the path in every
                    // iteration, and the shadows are made where each iteration's reverse
                    // begins.
                    let t = self.src.threshold();
                    self.line(indent + 1, &format!("if x[{i}] > {t} {{"));
                    self.line(indent + 2, &format!("acc += tanh({b}[{i} % len({b})]) * 0.25;"));
                    self.line(indent + 1, "} else {");
                    self.line(indent + 2, &format!("acc -= {a}[0] * {b}[1] * 0.1;"));
                    self.line(indent + 1, "}");
                }
                if self.src.chance(33) {
                    // Left early: the reverse of the loop is entered in its middle, and
                    // its blocks give back what each makes.
                    let t = self.src.threshold();
                    self.line(indent + 1, &format!("if x[{i}] > {t} {{ break; }}"));
                }
                self.line(indent, "}");
            }
            46 if nested => {
                // Particles moved in place by a helper writing an array, rows two at a
                // time in vectors: on fresh arrays, on `m` itself, or on one array
                // passed twice (which runs one row at a time).
                let (p, q) = (self.name("p"), self.name("q"));
                let value = e(self, scope);
                let k = scope.small_ints[self.src.below(scope.small_ints.len())].clone();
                self.line(indent, &format!("let {p} = copy(m) * tanh({value});"));
                self.line(indent, &format!("let {q} = copy(m) * 0.5;"));
                let (a, b) = match self.src.below(4) {
                    0 => (p.as_str(), "m"),
                    1 => (p.as_str(), p.as_str()),
                    _ => (p.as_str(), q.as_str()),
                };
                self.line(indent, &format!("acc += 0.1 * drift({a}, {b}, {k} % 3 + 1) + sum({q}) * 0.01;"));
            }
            47 if nested => {
                // A helper whose arms read the same element, called per element.
                let i = self.name("i");
                let value = e(self, scope);
                let k = scope.small_ints[self.src.below(scope.small_ints.len())].clone();
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(
                    indent + 1,
                    &format!(
                        "acc += 0.1 * bend(x[{i}] * 0.5 + 0.1 * tanh({value}), x, ({i} + {k} % 5) % len(x));"
                    ),
                );
                self.line(indent, "}");
            }
            48 if nested => {
                // A value each iteration negates (`w = -w`, the sign of an alternating
                // series, here carrying a derivative): the reverse pass negates it back
                // instead of reading it from the tape, through an inner loop, and after
                // an early exit from the loop.
                let (i, j, w) = (self.name("i"), self.name("j"), self.name("w"));
                let value = e(self, scope);
                self.line(indent, &format!("let mut {w} = tanh({value});"));
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                if self.src.chance(50) {
                    self.line(indent + 1, &format!("for {j} in 0..{i} % 3 {{"));
                    self.line(indent + 2, &format!("acc += {w} * x[{j}] * 0.1;"));
                    self.line(indent + 1, "}");
                } else {
                    self.line(indent + 1, &format!("acc += {w} * sin(x[{i}]) * 0.25;"));
                }
                if self.src.chance(33) {
                    let t = self.src.threshold();
                    self.line(indent + 1, &format!("if x[{i}] > {t} {{ break; }}"));
                }
                self.line(indent + 1, &format!("{w} = -{w};"));
                self.line(indent, "}");
                self.line(indent, &format!("acc += {w} * 0.1;"));
            }
            49 if nested => {
                // Rows of `m` picked by arithmetic on the counter, read at constant
                // columns under a branch: native code runs a copy of the loop that skips
                // the column checks, behind tests of `m`'s extent in front of it.
                let (i, r, a) = (self.name("i"), self.name("r"), self.name("a"));
                let value = e(self, scope);
                let k = scope.small_ints[self.src.below(scope.small_ints.len())].clone();
                let t = self.src.threshold();
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(indent + 1, &format!("let {r} = ({i} * 3 + {k}) % size(m, 0);"));
                self.line(indent + 1, &format!("let {a} = m[{r}, 0] * x[{i}] + m[{r}, 1] * tanh({value});"));
                self.line(indent + 1, &format!("if {a} > {t} {{"));
                self.line(indent + 2, &format!("acc += tanh({a}) * m[{r}, 2] * 0.1;"));
                self.line(indent + 1, "} else {");
                self.line(indent + 2, &format!("acc += m[{r}, 3] * 0.05 * {a};"));
                self.line(indent + 1, "}");
                self.line(indent, "}");
            }
            50 if nested => {
                // A scalar iteration per element, run to a tolerance or a fixed count:
                // a loop carrying its result's derivatives with respect to one or two
                // values forward (`linearize_loops.rs`), or, with three, reversed as
                // written. The first guess may be chosen by a branch, the loop left by
                // a `break`, or the iteration be a helper inlined in the loop.
                let (i, a, b, y) = (self.name("i"), self.name("a"), self.name("b"), self.name("y"));
                let value = e(self, scope);
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(indent + 1, &format!("let {a} = 1.5 + tanh(x[{i}] * 0.5 + 0.1 * {value});"));
                self.line(indent + 1, &format!("let {b} = 0.3 + 0.2 * tanh(x[{i}]);"));
                match self.src.below(5) {
                    0 => {
                        // Newton's method for a square root, to a tolerance.
                        let st = self.name("st");
                        self.line(indent + 1, &format!("let mut {y} = 1.0 + 0.25 * {a};"));
                        self.line(indent + 1, &format!("let mut {st} = 1.0;"));
                        self.line(indent + 1, &format!("while abs({st}) > 1.0e-12 {{"));
                        self.line(indent + 2, &format!("{st} = ({y} * {y} - {a}) / (2.0 * {y});"));
                        self.line(indent + 2, &format!("{y} = {y} - {st};"));
                        self.line(indent + 1, "}");
                    }
                    1 => {
                        // Kepler's equation, from a guess a branch picks, with a break.
                        let (k, d) = (self.name("k"), self.name("d"));
                        self.line(indent + 1, &format!("let mut {y} = {a};"));
                        self.line(indent + 1, &format!("if {b} > 0.4 {{ {y} = {a} + {b}; }}"));
                        self.line(indent + 1, &format!("for {k} in 0..60 {{"));
                        self.line(
                            indent + 2,
                            &format!("let {d} = ({y} - {b} * sin({y}) - {a}) / (1.0 - {b} * cos({y}));"),
                        );
                        self.line(indent + 2, &format!("{y} = {y} - {d};"));
                        self.line(indent + 2, &format!("if abs({d}) < 1.0e-13 {{ break; }}"));
                        self.line(indent + 1, "}");
                    }
                    2 => {
                        // A fixed count in two values, or in three (reversed as written).
                        let k = self.name("k");
                        let third =
                            if self.src.chance(50) { format!(" + 0.1 * x[0] * {b}") } else { String::new() };
                        self.line(indent + 1, &format!("let mut {y} = {a};"));
                        self.line(indent + 1, &format!("for {k} in 0..4 {{"));
                        self.line(indent + 2, &format!("{y} = {y} - 0.3 * sin({y} * {b}){third};"));
                        self.line(indent + 1, "}");
                    }
                    3 => {
                        // Two results, and an inner iteration nested in an outer one.
                        let (k, z, j) = (self.name("k"), self.name("z"), self.name("j"));
                        self.line(indent + 1, &format!("let mut {y} = {a};"));
                        self.line(indent + 1, &format!("let mut {z} = {a} + 1.0;"));
                        self.line(indent + 1, &format!("for {k} in 0..3 {{"));
                        self.line(indent + 2, &format!("let mut {j} = 0;"));
                        self.line(
                            indent + 2,
                            &format!("while abs({z} * {z} - {y}) > 1.0e-12 && {j} < 40 {{"),
                        );
                        self.line(indent + 3, &format!("{z} = 0.5 * ({z} + {y} / {z});"));
                        self.line(indent + 3, &format!("{j} += 1;"));
                        self.line(indent + 2, "}");
                        self.line(indent + 2, &format!("{y} = {y} * {b} + 0.25 * {z};"));
                        self.line(indent + 1, "}");
                        self.line(indent + 1, &format!("{y} = {y} + 0.1 * {z};"));
                    }
                    _ => {
                        self.line(indent + 1, &format!("let {y} = settle({a}, {b});"));
                    }
                }
                self.line(indent + 1, &format!("acc += cos({y}) * 0.1 + {y} * 0.05;"));
                self.line(indent, "}");
            }
            51 if nested => {
                // A fresh array moved like a velocity (`v += force`, `x += dt · v`) and
                // read only after its last write: its loads are only summed or scaled
                // by constants, so its overwrites keep nothing.
                let (t, i, v) = (self.name("t"), self.name("i"), self.name("v"));
                let value = e(self, scope);
                let pick = self.src.below(X_LEN);
                self.line(indent, &format!("let {v} = zeros(len(x));"));
                self.line(indent, &format!("for {t} in 0..2 {{"));
                if self.src.chance(50) {
                    self.line(indent + 1, &format!("for {i} in 0..len(x) {{"));
                    self.line(indent + 2, &format!("{v}[{i}] += 0.5 * tanh(x[{i}] + {value});"));
                    self.line(indent + 2, &format!("x[{i}] += 0.25 * {v}[{i}] - {v}[{i}] / 4.0 * 0.5;"));
                    self.line(indent + 1, "}");
                } else {
                    // Whole arrays: `sin(x)` computed in the update's loop, its taped
                    // `cos(x)` beside it.
                    self.line(indent + 1, &format!("{v} += sin(x) * 0.5 + tanh({value}) * 0.1;"));
                    self.line(indent + 1, &format!("x += 0.25 * {v} - {v} / 4.0 * 0.5;"));
                }
                self.line(indent, "}");
                self.line(indent, &format!("acc += {v}[{pick}] * {v}[{pick}] + 0.1 * {v}[0];"));
            }
            52..=54 => {
                // The argument `vel`, moved in place and read only through sums and
                // products with constants (its gradient restores it from one copy,
                // `mcir_ad::forward::params_restorable_by_copy`), unless the third form
                // reads it where an adjoint needs it.
                let k = self.x_index(scope);
                let value = e(self, scope);
                let c = self.src.below(2);
                match self.src.below(4) {
                    0 | 1 => self.line(
                        indent,
                        &format!("vel[{k} % {VEL_ROWS}, {c}] = 0.9 * vel[{k} % {VEL_ROWS}, {c}] + 0.1 * tanh({value});"),
                    ),
                    2 => self.line(indent, &format!("x[{k}] += 0.25 * vel[({k} + 1) % {VEL_ROWS}, {c}];")),
                    _ => self.line(indent, &format!("acc += 0.1 * sin(vel[{k} % {VEL_ROWS}, {c}] + {value});")),
                }
            }
            55 | 56 => {
                // An element an inner loop adds into, fixed for that loop: native code
                // holds it in a value across the loop (`mcir_ir::promote`). In `m`, while
                // the loop reads `vel`, of `m`'s type (the two are tested apart in front
                // of the loop); in a fresh array; in `x` while the loop reads `x` at
                // other indices (which keeps the element in memory); or in a fresh array at
                // the index a loop before it counted to (whose copy hands the count on).
                let (i, j) = (self.name("i"), self.name("j"));
                let cells =
                    Scope { reals: vec![format!("x[{j}]")], small_ints: Vec::new(), in_loop: true, depth: 2 };
                let term = self.real(&cells, 2);
                match self.src.below(4) {
                    3 => {
                        let (count, h) = (self.name("n"), self.name("h"));
                        let c0 = self.src.below(M_COLS);
                        self.line(indent, &format!("let mut {count} = 0;"));
                        self.line(indent, &format!("for {j} in 0..len(x) {{"));
                        self.line(indent + 1, &format!("m[0, {c0}] += 0.1 * tanh({term});"));
                        self.line(indent + 1, &format!("{count} += 1;"));
                        self.line(indent, "}");
                        self.line(indent, &format!("let {h} = zeros(len(x) + 1);"));
                        self.line(indent, &format!("for {i} in 0..len(x) {{"));
                        self.line(indent + 1, &format!("{h}[{count}] += 0.05 * tanh(x[{i}]);"));
                        self.line(indent, "}");
                        self.line(indent, &format!("acc += {h}[len(x)] * 0.5;"));
                        return;
                    }
                    0 => {
                        let c = self.src.below(M_COLS);
                        self.line(indent, &format!("for {i} in 0..{M_ROWS} {{"));
                        self.line(indent + 1, &format!("for {j} in 0..len(x) {{"));
                        self.line(
                            indent + 2,
                            &format!("m[{i}, {c}] += 0.1 * tanh({term}) * vel[{i} % {VEL_ROWS}, 0];"),
                        );
                    }
                    1 => {
                        let (w, pick) = (self.name("w"), self.src.below(X_LEN));
                        self.line(indent, &format!("let {w} = zeros(len(x));"));
                        self.line(indent, &format!("for {i} in 0..len(x) {{"));
                        self.line(indent + 1, &format!("for {j} in 0..len(x) {{"));
                        self.line(indent + 2, &format!("{w}[{i}] += x[{i}] * tanh({term});"));
                        self.line(indent + 1, "}");
                        self.line(indent, "}");
                        self.line(indent, &format!("acc += 0.1 * tanh({w}[{pick}]);"));
                        return;
                    }
                    _ => {
                        self.line(indent, &format!("for {i} in 0..len(x) {{"));
                        self.line(indent + 1, &format!("for {j} in 0..len(x) {{"));
                        self.line(indent + 2, &format!("x[{i}] += 0.05 * tanh({term});"));
                    }
                }
                self.line(indent + 1, "}");
                self.line(indent, "}");
            }
            57 | 58 => {
                // Short loops counted to constants, written out (`mcir_ir::expand`): a
                // fresh 2 × 2 or 3 × 3 matrix filled by nested loops that pick the
                // diagonal with `if r == c`, its top-left block inverted by a helper that
                // returns a fresh array, and the result summed by loops over constants.
                let (a, r, c, inv) = (self.name("a"), self.name("r"), self.name("c"), self.name("inv"));
                let n = 2 + self.src.below(2);
                let value = e(self, scope);
                self.line(indent, &format!("let {a} = zeros({n}, {n});"));
                self.line(indent, &format!("for {r} in 0..{n} {{"));
                self.line(indent + 1, &format!("for {c} in 0..{n} {{"));
                self.line(indent + 2, &format!("if {r} == {c} {{"));
                self.line(indent + 3, &format!("{a}[{r}, {c}] = 2.0 + tanh({value} + f64({r}));"));
                self.line(indent + 2, "} else {");
                self.line(indent + 3, &format!("{a}[{r}, {c}] = 0.1 * tanh(x[({r} + {c}) % {X_LEN}]);"));
                self.line(indent + 2, "}");
                self.line(indent + 1, "}");
                self.line(indent, "}");
                self.line(indent, &format!("let {inv} = inverse2({a});"));
                let (r2, c2) = (self.name("r"), self.name("c"));
                self.line(indent, &format!("for {r2} in 1..{n} {{"));
                self.line(indent + 1, &format!("for {c2} in 0..2 {{"));
                self.line(indent + 2, &format!("acc += 0.1 * {inv}[{r2} - 1, {c2}] * {a}[{r2}, {c2}];"));
                self.line(indent + 1, "}");
                self.line(indent, "}");
            }
            59 | 60 if nested => {
                // Chains of branches (`if`, `else if`, `else`) that meet in one join,
                // linearized whole: a helper with three ranges, the last split again on a
                // value computed on the way, called per element; and two values set in
                // each of three arms inline.
                let (i, u, v) = (self.name("i"), self.name("u"), self.name("v"));
                let value = e(self, scope);
                let (t1, t2) = (self.src.threshold(), self.src.threshold());
                self.line(indent, &format!("for {i} in 0..len(x) {{"));
                self.line(indent + 1, &format!("acc += 0.1 * tiers(x[{i}] * 0.5 - 0.25, tanh({value}));"));
                self.line(indent + 1, &format!("let mut {u} = x[{i}];"));
                self.line(indent + 1, &format!("let mut {v} = 0.5;"));
                self.line(indent + 1, &format!("if x[{i}] < {t1} - 0.4 {{"));
                self.line(indent + 2, &format!("{u} = sin({u}) * acc;"));
                self.line(indent + 1, &format!("}} else if x[{i}] < {t2} {{"));
                self.line(indent + 2, &format!("{v} = {u} * {u} - acc * 0.1;"));
                self.line(indent + 2, &format!("{u} = exp(-{u}) * {v};"));
                self.line(indent + 1, "} else {");
                self.line(indent + 2, &format!("{v} = tanh(acc) / (1.0 + {u} * {u});"));
                self.line(indent + 1, "}");
                self.line(indent + 1, &format!("acc += 0.1 * tanh({u} + {v});"));
                self.line(indent, "}");
            }
            61 | 62 => {
                // Small matrices returned by helpers that are not inlined (one called
                // twice, one recursive), read at constant indices: the calls take their
                // elements as tuples (`mcir_ir::returns`).
                let (q, w, c) = (self.name("q"), self.name("w"), self.name("c"));
                let value = e(self, scope);
                self.line(indent, &format!("let {q} = spin({value});"));
                self.line(indent, &format!("let {w} = spin(acc * 0.1);"));
                self.line(indent, &format!("acc += {q}[0, 1] * {w}[1, 1] + {q}[1, 0] * 0.5;"));
                if self.src.chance(50) {
                    self.line(indent, &format!("let {c} = halves_product(x, 0, len(x));"));
                    self.line(indent, &format!("acc += 0.1 * ({c}[0, 0] + {c}[1, 1]) - 0.05 * {c}[0, 1];"));
                }
            }
            63 => {
                // A recursion returning a pair, whose base case is inlined at its call
                // sites: the pairs meet in joins, passed as their fields.
                let pr = self.name("pr");
                let value = e(self, scope);
                self.line(indent, &format!("let {pr} = pair_halves(x, 0, len(x), tanh({value}));"));
                self.line(indent, &format!("acc += 0.1 * {pr}.0 - 0.05 * {pr}.1;"));
            }
            41 => {
                // A helper with a branch and a loop, called once.
                let value = e(self, scope);
                self.line(indent, &format!("acc += 0.25 * shaped(tanh({value}));"));
            }
            39 if self.src.chance(50) => {
                // A function that never returns, behind a test that never holds: its
                // passes must still be derived (and verify), though they never run.
                let value = e(self, scope);
                self.line(indent, &format!("if len(x) > 1000000 {{ acc += stuck({value}, x); }}"));
            }
            _ => {
                let value = e(self, scope);
                self.line(indent, &format!("acc += tanh(sum(m) * 0.05 + {value} * f64(n % 3));"));
            }
        }
    }
}

/// The helper functions every program may call (a fixed prelude keeps `main` the
/// interesting part, while still exercising calls, aliasing and recursion).
const PRELUDE: &str = "const HALF: f64 = 0.5;

struct Pair { a: f64, b: f64 }

mut struct State { v: f64[], total: f64 }

struct Bundle { w: f64, v: f64[] }

// Scales an array in place and returns a smooth summary of it.
fn scale(v: f64[], s: f64) -> f64 {
    let f = 1.0 + 0.1 * tanh(s);
    v *= f;
    let mut t = 0.0;
    for i in 0..len(v) {
        t += sin(v[i]) * HALF;
    }
    return t;
}

// Reads and writes two arrays that may be the same one.
fn mix(a: f64[], b: f64[]) -> f64 {
    a[0] = a[0] * 0.5 + b[1] * 0.25;
    b[2] += tanh(a[0]);
    return a[0] + b[2];
}

// Recursion bounded by its integer argument.
fn descend(z: f64, n: i64) -> f64 {
    if n <= 0 { return sin(z); }
    return descend(z * 0.75 + 0.1, n - 1) * 0.9;
}

// Recursion on two branches making arrays on every level: the reverse pass reads some
// (the forward pass makes them in the tape region), and each call gives the rest back.
fn branches(z: f64, v: f64[], n: i64) -> f64 {
    if n <= 0 { return tanh(z) * v[0]; }
    let a = fill(z, 4) * 0.5 + v[n % len(v)];
    let b = sin(a) * a;
    let s = sum(b) * 0.25;
    return branches(z * 0.7 + 0.1, v, n - 1) * 0.5 + branches(s * 0.3, v, n - 1) * 0.25 + b[1] * 0.1;
}

// Divide and conquer: the halves of a range combined, down to single elements.
fn halves(v: f64[], lo: i64, hi: i64) -> f64 {
    if hi - lo <= 1 { return sin(v[lo]) * 0.5; }
    let mid = (lo + hi) / 2;
    return halves(v, lo, mid) * 0.75 + tanh(halves(v, mid, hi));
}

// Expansion by recursion: each level loops over the array, making a fresh copy without
// one element for the next level (a determinant's minors, in one dimension).
fn expand(v: f64[], depth: i64) -> f64 {
    let n = len(v);
    if n == 1 || depth <= 0 { return sin(v[0]); }
    let mut total = 0.0;
    let mut sign = 1.0;
    for j in 0..n {
        let rest = zeros(n - 1);
        for k in 0..n {
            if k < j { rest[k] = v[k]; } else if k > j { rest[k - 1] = v[k]; }
        }
        total += sign * v[j] * expand(rest, depth - 1) * 0.5;
        sign = -sign;
    }
    return total;
}

// Recursion that writes the array on the way down and reads it on the way back.
fn smooth(v: f64[], k: i64) -> f64 {
    if k <= 0 { return v[0]; }
    let i = k % len(v);
    v[i] = 0.5 * v[i] + 0.25 * tanh(v[(k + 1) % len(v)]);
    return smooth(v, k - 1) * 0.9 + v[i] * 0.1;
}

// A branch on the data, and a loop that runs until it converges: a helper small enough
// to be inlined where it is called.
// The inverse of the top-left 2 × 2 block of `a`, in a fresh array.
fn inverse2(a: f64[,]) -> f64[,] {
    let r = zeros(2, 2);
    let d = 1.0 / (a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]);
    r[0, 0] = a[1, 1] * d;
    r[0, 1] = -a[0, 1] * d;
    r[1, 0] = -a[1, 0] * d;
    r[1, 1] = a[0, 0] * d;
    return r;
}

fn shaped(z: f64) -> f64 {
    if z > 0.3137 {
        return sin(z) * z;
    }
    let a = 1.0 + z * z;
    let mut y = 1.0;
    let mut k = 0;
    while k < 30 && abs(y * y - a) > 1.0e-13 {
        y = 0.5 * (y + a / y);
        k += 1;
    }
    return y;
}

// Newton's method on `y + b sin(y) = a`, to a tolerance, counting its steps.
fn settle(a: f64, b: f64) -> f64 {
    let mut y = a;
    let mut step = 1.0;
    let mut n = 0;
    while abs(step) > 1.0e-13 && n < 50 {
        step = (y + b * sin(y) - a) / (1.0 + b * cos(y));
        y -= step;
        n += 1;
    }
    return y;
}

// Writes two results into the array it is given.
fn into_pair(z: f64, out: f64[]) {
    out[0] = sin(z) * 0.5;
    if z < -0.2113 {
        out[1] = z * z;
    } else {
        out[1] = cos(z);
    }
}

// The pull on a particle at (px, py), written into the array it is given.
fn pull(px: f64, py: f64, out: f64[]) {
    let r2 = px * px + py * py + 0.5;
    let inv = 1.0 / (r2 * sqrt(r2));
    out[0] = -px * inv;
    out[1] = -py * inv;
}

// Moves the rows of `p` as particles with velocities `q`, in place, through a helper
// writing an array: native code runs two rows at a time in vectors, reading `p[i, 0]`
// again from its lanes after the store into `q`, unless `p` and `q` are one array. The
// kink of `abs` lies away from the inputs' grid.
fn drift(p: f64[,], q: f64[,], steps: i64) -> f64 {
    let f = zeros(2);
    for t in 0..steps {
        for i in 0..size(p, 0) {
            pull(p[i, 0], p[i, 1], f);
            q[i, 0] += 0.1 * f[0];
            q[i, 1] += 0.1 * f[1];
            p[i, 0] += 0.1 * q[i, 0];
            p[i, 1] -= 0.1 * q[i, 1] / (1.0 + abs(p[i, 0] - 0.3137));
        }
    }
    return sum(p * p) * 0.1 + sum(q) * 0.1;
}

// Both arms begin by reading the same element: the read moves in front of the branch,
// whose arms then only compute (and are linearized when differentiated).
fn bend(z: f64, w: f64[], j: i64) -> f64 {
    if z > 0.2113 {
        return w[j] * z + 0.5;
    }
    return w[j] - z * z;
}

// A value picked from three ranges, the last split again on a value computed on the
// way: a tree of branches meeting in one join once inlined. The kinks lie away from the
// inputs' grid.
fn tiers(z: f64, w: f64) -> f64 {
    if z < -0.4137 {
        return exp(z) * w - 0.25;
    } else if z < 0.3137 {
        return log(cosh(z)) + w * z;
    }
    let q = z * w + 0.5;
    if q > 0.6137 {
        return q * tanh(z);
    }
    return sin(q) / (1.0 + z * z);
}

// A 2 × 2 matrix from one angle, returned in a fresh array.
fn spin(t: f64) -> f64[,] {
    let r = zeros(2, 2);
    r[0, 0] = cos(t);
    r[0, 1] = -sin(t) * 0.5;
    r[1, 0] = sin(t);
    r[1, 1] = cos(t) + 0.25 * t;
    return r;
}

// The product of such matrices over halves of a range, each level a fresh array.
fn halves_product(v: f64[], lo: i64, hi: i64) -> f64[,] {
    let m = zeros(2, 2);
    if hi - lo <= 1 {
        m[0, 0] = cos(v[lo] * 0.5);
        m[0, 1] = 0.25 * v[lo];
        m[1, 0] = -sin(v[lo] * 0.5);
        m[1, 1] = 1.0;
        return m;
    }
    let mid = (lo + hi) / 2;
    let a = halves_product(v, lo, mid);
    let b = halves_product(v, mid, hi);
    for i in 0..2 {
        for j in 0..2 {
            m[i, j] = a[i, 0] * b[0, j] + a[i, 1] * b[1, j];
        }
    }
    return m;
}

// A sum and a sum of squares over halves of a range, as a pair.
fn pair_halves(v: f64[], lo: i64, hi: i64, w: f64) -> (f64, f64) {
    if hi - lo == 1 { return (v[lo] * w, sin(v[lo]) * v[lo]); }
    let mid = (lo + hi) / 2;
    let a = pair_halves(v, lo, mid, w);
    let b = pair_halves(v, mid, hi, w * 0.9);
    return (a.0 + b.0 * 0.5, a.1 * b.0 + b.1);
}

// Never returns (`while true` without a `break`); called only where it is not reached.
fn stuck(z: f64, v: f64[]) -> f64 {
    while true {
        v[0] = sin(v[0]) * z;
    }
}

// Writes the array of a value struct it was given and reads it back.
fn spread(b: Bundle, s: f64) -> f64 {
    b.v[0] += 0.1 * tanh(s * b.w);
    return b.v[0] * b.v[1] + tanh(b.w);
}

fn pair_value(p: Pair) -> f64 {
    return p.a * cos(p.b) + HALF * p.b;
}

// Calls a function twice.
fn apply_twice(g: fn(f64) -> f64, v: f64) -> f64 {
    return g(g(v) * 0.5);
}

fn soft(z: f64) -> f64 {
    return tanh(z) * 0.75;
}

// softplus, with hand-written rules in both modes.
fn softplus(z: f64) -> f64 {
    return log1p(exp(z));
}

rule reverse softplus(z: f64) -> f64 {
    let s = 1.0 / (1.0 + exp(-z));
    return (softplus(z), |ybar: f64| ybar * s);
}

rule forward softplus(z: f64) -> f64 {
    let s = 1.0 / (1.0 + exp(-z));
    return (softplus(z), |dz: f64| dz * s);
}
";

fn generate_from(src: &mut Source<'_>) -> Generated {
    let mut g = Gen { src, out: String::new(), fresh: 0 };
    let statements = g.src.below(8) + 3;
    let mut scope = Scope {
        // The accumulator is read through `tanh`: it may grow to tens, and an expression
        // such as `cos(acc ** 4)` would be too steep for finite differences.
        reals: vec!["y".into(), "tanh(acc)".into()],
        small_ints: vec!["n".into()],
        in_loop: false,
        depth: 0,
    };
    g.out.push_str(PRELUDE);
    g.out.push_str(
        "\nfn main(x: f64[], m: f64[,], y: f64, n: i64, r: ref<f64>, p: Bundle, vel: f64[,]) -> f64 {\n    let mut acc = y;\n    let st = State { v: copy(x), total: 0.0 };\n",
    );
    g.block(&mut scope, 1, statements);
    g.out.push_str(
        "    for i in 0..size(vel, 0) {\n        acc += vel[i, 0] * 0.1 + vel[i, 1] * 0.05;\n    }\n",
    );
    g.out.push_str(
        "    return acc + sum(x) * 0.1 + st.total + sum(st.v) * 0.01 + *r + p.w * sum(p.v) * 0.1;\n}\n",
    );
    let mut args = String::from("[[");
    for k in 0..X_LEN {
        let _ = write!(args, "{}{:.3}", if k > 0 { ", " } else { "" }, g.src.real());
    }
    args.push_str("], [");
    for i in 0..M_ROWS {
        args.push_str(if i > 0 { ", [" } else { "[" });
        for j in 0..M_COLS {
            let _ = write!(args, "{}{:.3}", if j > 0 { ", " } else { "" }, g.src.real());
        }
        args.push(']');
    }
    let (y, n, r) = (g.src.real(), g.src.below(4), g.src.real());
    let _ = write!(args, "], {y:.3}, {n}, {r:.3}, {{\"w\": {:.3}, \"v\": [", g.src.real());
    for k in 0..V_LEN {
        let _ = write!(args, "{}{:.3}", if k > 0 { ", " } else { "" }, g.src.real());
    }
    args.push_str("]}, [");
    for i in 0..VEL_ROWS {
        let (a, b) = (g.src.real(), g.src.real());
        let _ = write!(args, "{}[{a:.3}, {b:.3}]", if i > 0 { ", " } else { "" });
    }
    args.push_str("]]");
    Generated { source: g.out, args }
}
