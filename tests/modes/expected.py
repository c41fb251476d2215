"""Independent expectations for the cases of this directory: each program written
again in Python and differentiated with hyper-dual numbers (exact first and second
derivatives, no finite differences), printed as the JSON `mcc` should print.

    python3 tests/modes/expected.py
"""
import json
import math


class HD:
    """a + b e1 + c e2 + d e1 e2 with e1^2 = e2^2 = 0: f(x + e1 u + e2 v) carries
    f, f'(x) u, f'(x) v and u' f''(x) v."""

    def __init__(self, a, b=0.0, c=0.0, d=0.0):
        self.a, self.b, self.c, self.d = a, b, c, d

    def __add__(s, o):
        o = lift(o)
        return HD(s.a + o.a, s.b + o.b, s.c + o.c, s.d + o.d)

    __radd__ = __add__

    def __neg__(s):
        return HD(-s.a, -s.b, -s.c, -s.d)

    def __sub__(s, o):
        return s + (-lift(o))

    def __rsub__(s, o):
        return lift(o) + (-s)

    def __mul__(s, o):
        o = lift(o)
        return HD(s.a * o.a, s.a * o.b + s.b * o.a, s.a * o.c + s.c * o.a,
                  s.a * o.d + s.b * o.c + s.c * o.b + s.d * o.a)

    __rmul__ = __mul__

    def __truediv__(s, o):
        return s * apply(lift(o), 1 / lift(o).a, -1 / lift(o).a ** 2, 2 / lift(o).a ** 3)

    def __gt__(s, o):
        return s.a > lift(o).a


def lift(x):
    return x if isinstance(x, HD) else HD(float(x))


def apply(x, f0, f1, f2):
    x = lift(x)
    return HD(f0, f1 * x.b, f1 * x.c, f1 * x.d + f2 * x.b * x.c)


def sin(x):
    x = lift(x)
    return apply(x, math.sin(x.a), math.cos(x.a), -math.sin(x.a))


def exp(x):
    x = lift(x)
    e = math.exp(x.a)
    return apply(x, e, e, e)


def log(x):
    x = lift(x)
    return apply(x, math.log(x.a), 1 / x.a, -1 / x.a ** 2)


def sqrt(x):
    x = lift(x)
    r = math.sqrt(x.a)
    return apply(x, r, 0.5 / r, -0.25 / (r * x.a))


def tanh(x):
    x = lift(x)
    t = math.tanh(x.a)
    return apply(x, t, 1 - t * t, -2 * t * (1 - t * t))


def derivatives(f, x):
    """Value, gradient and Hessian of f at the flat point x."""
    n = len(x)
    hess = [[0.0] * n for _ in range(n)]
    grad = [0.0] * n
    value = None
    for i in range(n):
        for j in range(n):
            args = [HD(x[k], 1.0 if k == i else 0.0, 1.0 if k == j else 0.0) for k in range(n)]
            y = f(args)
            value, grad[i], hess[i][j] = y.a, y.b, y.d
    return value, grad, hess


def product_loop(x):
    s = 1.0
    for xi in x:
        s = s * xi
    return s


def log_sum_exp_loop(x):
    s = 0.0
    for xi in x:
        s = s + exp(xi)
    return log(s)


def sqrt_loop(x):
    s = 0.0
    for xi in x:
        s = s + sqrt(xi * xi + 1.0)
    return s


def sine_recurrence(v, n):
    x, a = v
    for _ in range(n):
        x = a * sin(x) + 0.1
    return x


def horner_squared(v):
    c, x = v[:-1], v[-1]
    p = 0.0
    for ci in c:
        p = p * x + ci
    return p * p


def in_place_scan(v):
    x = list(v)
    for i in range(1, len(x)):
        x[i] = x[i] * x[i - 1] + sin(x[i])
    return sum((xi * xi for xi in x), HD(0.0))


def tanh_layer(v):
    w, x = [v[0:2], v[2:4]], v[4:6]
    s = 0.0
    for row in w:
        a = 0.0
        for wij, xj in zip(row, x):
            a = a + wij * xj
        h = tanh(a)
        s = s + h * h
    return s


def cubes_through_a_closure(v):
    x, k = v[:-1], v[-1]
    s = 0.0
    for xi in x:
        s = s + k * xi * xi * xi
    return s


def shaped(flat, shapes):
    """Splits a flat list by the arguments' shapes (None = a scalar, n = a vector)."""
    out, k = [], 0
    for s in shapes:
        if s is None:
            out.append(flat[k])
            k += 1
        elif isinstance(s, int):
            out.append(flat[k:k + s])
            k += s
        else:
            rows, cols = s
            out.append([flat[k + r * cols:k + (r + 1) * cols] for r in range(rows)])
            k += rows * cols
    return out


def hessian_case(name, f, x, shapes):
    value, grad, hess = derivatives(f, x)
    print(name, json.dumps({"value": value, "gradient": shaped(grad, shapes), "hessian": hess}))


hessian_case("product_loop", product_loop, [0.5, 1.5, -2.0], [3])
hessian_case("log_sum_exp_loop", log_sum_exp_loop, [0.1, 0.2, 0.3, 0.4], [4])
hessian_case("sqrt_loop", sqrt_loop, [0.1, 0.2, 0.3, 0.4], [4])
for name in ["checkpointed_recurrence", "plain_recurrence"]:
    value, grad, hess = derivatives(lambda v: sine_recurrence(v, 20), [0.4, 0.95])
    print(name, json.dumps({"value": value, "gradient": [grad[0], grad[1], None], "hessian": hess}))
hessian_case("horner_squared", horner_squared, [0.1, 0.2, 0.3, 0.7], [3, None])
hessian_case("in_place_scan", in_place_scan, [0.1, 0.2, 0.3], [3])
hessian_case("tanh_layer", tanh_layer, [0.1, 0.2, 0.3, 0.5, 0.3, 0.9], [(2, 2), 2])
hessian_case("cubes_through_a_closure", cubes_through_a_closure, [0.1, 0.2, 0.3, 1.5], [3, None])


def recursive_sine(x, n):
    if n == 0:
        return x
    return sin(recursive_sine(x, n - 1)) * x


def tree_product(x, lo, hi):
    if hi - lo == 1:
        return sin(x[lo]) + 1.5
    mid = (lo + hi) // 2
    return tree_product(x, lo, mid) * tree_product(x, mid, hi)


value, grad, hess = derivatives(lambda v: recursive_sine(v[0], 4), [0.8])
print("recursive_sine", json.dumps({"value": value, "gradient": [grad[0], None], "hessian": hess}))
hessian_case("tree_product", lambda v: tree_product(v, 0, 5), [0.1, -0.4, 0.9, 1.3, -0.2], [5])


def print_loop_case(program, n=300):
    """Prints the case of a program `main(x, w, n)`: all its derivatives in x and
    w = [0.3, -0.5, 1.1] at x = 0.7 and the given n (which takes none)."""
    value, grad, hess = derivatives(lambda v: program(v, n), [0.7, 0.3, -0.5, 1.1])
    print(program.__name__, json.dumps({"value": value, "gradient": [grad[0], grad[1:4], None], "hessian": hess}))


def fresh_arrays_in_loops(v, n):
    x, w = v[0], v[1:4]
    s = 0.0
    for i in range(n):
        # a = fill(x, 2000); b = a * 2.0 + w[i % 3]: every element of b is the same.
        b = x * 2.0 + w[i % 3]
        s = s + (sin(b) * x + b)
    for i in range(n):
        m = [e + w[2] for e in [x, w[0], w[1] * x]]
        s = s + m[i % 3] * m[(i + 1) % 3] * 0.01
    for i in range(n):
        a = x * w[1]
        if i % 2 == 0:
            s = s + a * a
        else:
            s = s - sin(a) * 0.5
        for j in range(2):
            s = s + a * 0.01
    return s


print_loop_case(fresh_arrays_in_loops)


def summed_fresh_arrays(v, n):
    x, w = v[0], v[1:4]
    s = 0.0
    for i in range(n):
        # sum(fill(x, 2000) + w[i % 3]) * 0.001: 2000 equal elements.
        s = s + (x + w[i % 3]) * 2000.0 * 0.001
    for i in range(n):
        # sum(fill(x * w[0], 1000) * w[1] * 2.0 + 1.0) * x * 0.0001
        s = s + ((x * w[0]) * w[1] * 2.0 + 1.0) * 1000.0 * x * 0.0001
    return s


print_loop_case(summed_fresh_arrays)


def loops_that_leave_early(v, n):
    x, w = v[0], v[1:4]
    s = 0.0
    for i in range(n):
        # a = fill(x * w[i % 3], 10000): every element equal.
        a = x * w[i % 3]
        s = s + a * a * 0.5
        if i == n - 5:
            break
    i = 0
    while i < n:
        a = x + w[1]
        s = s + a * w[2] + a * 10000.0 * 0.0001
        if i == n - 10:
            return s
        i += 1
    return s


print_loop_case(loops_that_leave_early)


def tree_recursion(v, n):
    x, w = v[0], v[1:4]
    if n == 0:
        return sin(x) * w[0]
    # a = fill(0, 1000) with a[i] = (i * n) % 13, read at n * 7.
    c = ((n * 7 * n) % 13) * 0.01
    return (tree_recursion([x * 0.9 + w[1] * 0.1] + w, n - 1) * 0.5
            + tree_recursion([x * c + 0.2] + w, n - 1) * 0.25 + x * w[1])


print_loop_case(tree_recursion, 9)


def checkpointed_recursion(v):
    x, w = v

    def rec(z, n):
        if n == 0:
            return z
        # a = fill(z, 100), read at n % 7.
        return rec(sin(z), n - 1) * 0.5 + z * 0.1

    s = x
    for _ in range(10000):
        s = rec(s, 3) * 0.5 + x * w * 0.1
    return s


value, grad, hess = derivatives(checkpointed_recursion, [0.7, 0.4])
print("checkpointed_recursion", json.dumps({"value": value, "gradient": [grad[0], grad[1], None], "hessian": hess}))


def pushed_records_in_loops(v, n):
    x, w = v[0], v[1:4]

    def scaled(z):
        # t = fill(z, 10000), read at 3.
        return [e * z for e in [z * w[0], w[1] * z, z]]

    def settle(z):
        # t = fill(3, 10000): f64(t[k % 5] + k) is 3 + k.
        y = z
        for k in range(50):
            y = 0.5 * y + 0.25 * (3.0 + k) * w[2]
            if k == 20:
                return y * w[0]
        return y

    s = 0.0
    for i in range(n):
        a = x * w[i % 3]
        u = scaled(x + a)
        s = s + u[0] * u[1] + a * 0.1
    for i in range(n):
        s = s + settle(x + w[i % 3] * 0.1) * 0.01
    return s


print_loop_case(pushed_records_in_loops)


def recursion_returning_values(v, n):
    x, w = v[0], v[1:4]
    if n == 0:
        return ((x, w[0]), (x * w[1], 1))
    # t = fill(n, 10000): f64(t[n] - n + 1) * 0.5 is 0.5.
    c = 0.5
    left = recursion_returning_values([x * 0.9 + w[2] * 0.1] + w, n - 1)
    right = recursion_returning_values([x * 0.8] + w, n - 1)
    return ((left[0][0] * c + right[0][1], right[0][0] * left[0][1]),
            (left[1][0] + right[1][0] * x, left[1][1] + right[1][1]))


def recursion_returning_values_main(v):
    s = recursion_returning_values(v, 9)
    return s[0][0] + s[0][1] * 0.5 + s[1][0] * 0.25 + s[1][1] * 0.001


value, grad, _ = derivatives(recursion_returning_values_main, [0.7, 0.3, -0.5, 1.1])
tangent = [1.0, 0.5, -1.0, 0.25]
print("recursion_returning_values", json.dumps({
    "value": value, "tangent": sum(g * t for g, t in zip(grad, tangent)),
    "args_tangent": [1.0, [0.5, -1.0, 0.25], None]}))


def carried_state_in_loops(v, n):
    x, w = v[0], v[1:4]
    st = (x, 0.0)
    q = (w[0], 1.0)
    for i in range(n):
        t = x * w[i % 3]  # t = fill(x * w[i % 3], 10000)
        st = (0.9 * sin(st[0]) + 0.1 * t, st[1] + st[0] * w[1])
        q = (q[0] * 0.5 + st[0] * w[2], q[1] * 0.99 + t * 0.001)
    return st[0] + st[1] * 0.01 + q[0] + q[1]


print_loop_case(carried_state_in_loops)
