//! Matrix kernels shared by the interpreter and native code (which calls them through
//! its runtime), so that both give the same results bit for bit. Every kernel
//! *accumulates* into its output; a fresh product starts from zeros. Operands are
//! row-major with the extents given; transposition is by index, no copy is made.

use crate::exec::RuntimeErrorKind;
use mcir_ir::Transpose;

/// The extents of `op(A)` for an `A` of extents `(rows, cols)`.
fn op_extents((rows, cols): (usize, usize), transposed: bool) -> (usize, usize) {
    if transposed {
        (cols, rows)
    } else {
        (rows, cols)
    }
}

/// The shape of `op(A) op(B)`, or the error when the inner extents differ.
pub fn matmul_shape(
    a: (usize, usize),
    b: (usize, usize),
    t: Transpose,
) -> Result<(usize, usize), RuntimeErrorKind> {
    let (m, ka) = op_extents(a, t.a);
    let (kb, n) = op_extents(b, t.b);
    if ka != kb {
        return Err(RuntimeErrorKind::MatrixShapes { left: vec![m, ka], right: vec![kb, n] });
    }
    Ok((m, n))
}

/// The length of `op(A) x`, or the error when `x` does not fit.
pub fn matvec_len(a: (usize, usize), x: usize, transposed: bool) -> Result<usize, RuntimeErrorKind> {
    let (m, k) = op_extents(a, transposed);
    if k != x {
        return Err(RuntimeErrorKind::MatrixShapes { left: vec![m, k], right: vec![x] });
    }
    Ok(m)
}

/// `c += op(A) op(B)`, `c` of the shape [`matmul_shape`] gives (checked by the caller).
pub fn matmul_acc(c: &mut [f64], a: &[f64], ae: (usize, usize), b: &[f64], be: (usize, usize), t: Transpose) {
    let (m, k) = op_extents(ae, t.a);
    let n = op_extents(be, t.b).1;
    // op(A)[i, p] and op(B)[p, j] through strides.
    let (a_i, a_p) = if t.a { (1, ae.1) } else { (ae.1, 1) };
    let (b_p, b_j) = if t.b { (1, be.1) } else { (be.1, 1) };
    // c[i, :] += op(A)[i, p] * op(B)[p, :], with the rows of op(B) contiguous: a
    // transposed B is copied transposed first (k * n copies against m * k * n products),
    // so that the inner loop is an update of a row, which vectorises, and not a dot
    // product, whose chain of additions does not.
    let transposed_b;
    let (b, b_p) = if t.b {
        let mut bt = vec![0.0; k * n];
        for j in 0..n {
            for p in 0..k {
                bt[p * n + j] = b[j * b_j + p];
            }
        }
        transposed_b = bt;
        (transposed_b.as_slice(), n)
    } else {
        (b, b_p)
    };
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            let x = a[i * a_i + p * a_p];
            let brow = &b[p * b_p..p * b_p + n];
            for (cj, bj) in row.iter_mut().zip(brow) {
                *cj += x * bj;
            }
        }
    }
}

/// `y += op(A) x`, `y` of the length [`matvec_len`] gives (checked by the caller).
pub fn matvec_acc(y: &mut [f64], a: &[f64], ae: (usize, usize), x: &[f64], transposed: bool) {
    let (rows, cols) = ae;
    if transposed {
        // y[j] += sum_i A[i, j] x[i]: rows of A scaled and added.
        for (i, xi) in x.iter().enumerate().take(rows) {
            let row = &a[i * cols..(i + 1) * cols];
            for (yj, aij) in y.iter_mut().zip(row) {
                *yj += aij * xi;
            }
        }
    } else {
        for (i, yi) in y.iter_mut().enumerate().take(rows) {
            let row = &a[i * cols..(i + 1) * cols];
            let mut s = 0.0;
            for (aij, xj) in row.iter().zip(x) {
                s += aij * xj;
            }
            *yi += s;
        }
    }
}

/// `out = Aᵀ` for an `A` of extents `(rows, cols)`; `out` has `rows * cols` elements.
pub fn transpose(out: &mut [f64], a: &[f64], (rows, cols): (usize, usize)) {
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = a[i * cols + j];
        }
    }
}

/// `c += x yᵀ`, `c` of extents `(len x, len y)` (checked by the caller).
pub fn outer_acc(c: &mut [f64], x: &[f64], y: &[f64]) {
    let n = y.len();
    for (i, xi) in x.iter().enumerate() {
        for (cij, yj) in c[i * n..(i + 1) * n].iter_mut().zip(y) {
            *cij += xi * yj;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f64], ae: (usize, usize), b: &[f64], be: (usize, usize), t: Transpose) -> Vec<f64> {
        let at = |i: usize, p: usize| if t.a { a[p * ae.1 + i] } else { a[i * ae.1 + p] };
        let bt = |p: usize, j: usize| if t.b { b[j * be.1 + p] } else { b[p * be.1 + j] };
        let (m, n) = matmul_shape(ae, be, t).unwrap();
        let k = if t.a { ae.0 } else { ae.1 };
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
            }
        }
        c
    }

    #[test]
    fn every_transposition_matches_the_definition() {
        let a: Vec<f64> = (0..6).map(|x| x as f64 * 0.5 - 1.0).collect();
        let b: Vec<f64> = (0..6).map(|x| (x * x) as f64 - 3.0).collect();
        for (t, ae, be) in [
            (Transpose { a: false, b: false }, (2, 3), (3, 2)),
            (Transpose { a: true, b: false }, (3, 2), (3, 2)),
            (Transpose { a: false, b: true }, (2, 3), (2, 3)),
            (Transpose { a: true, b: true }, (3, 2), (2, 3)),
        ] {
            let (m, n) = matmul_shape(ae, be, t).unwrap();
            let mut c = vec![1.0; m * n];
            matmul_acc(&mut c, &a, ae, &b, be, t);
            let want: Vec<f64> = naive(&a, ae, &b, be, t).iter().map(|x| x + 1.0).collect();
            assert_eq!(c, want, "{t:?}");
        }
        assert!(matmul_shape((2, 3), (2, 3), Transpose::NONE).is_err());
    }

    #[test]
    fn matvec_and_outer_match_the_definition() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 x 3
        let mut y = vec![0.0; 2];
        matvec_acc(&mut y, &a, (2, 3), &[1.0, -1.0, 2.0], false);
        assert_eq!(y, vec![5.0, 11.0]);
        let mut z = vec![1.0; 3];
        matvec_acc(&mut z, &a, (2, 3), &[1.0, -1.0], true);
        assert_eq!(z, vec![-2.0, -2.0, -2.0]);
        assert!(matvec_len((2, 3), 2, false).is_err());
        let mut c = vec![0.0; 6];
        outer_acc(&mut c, &[1.0, 2.0], &[3.0, 4.0, 5.0]);
        assert_eq!(c, vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
    }
}
