//! The elementary functions whose results both engines define themselves rather than
//! take from the C library, so native code can compute them inline, bit for bit as the
//! interpreter does.
//!
//! `exp` is the first: the C library's costs a call per element (and the spills of
//! every live floating-point register around it) in the loops where it matters most,
//! `sum(exp(x - m))` and the softmax of a mixture. [`exp`] is the definition; native
//! code emits the same operations in the same order (`mcir_jit`'s `lower.rs`), with the
//! same constants, from the same table.

mod exp_table;

pub use exp_table::EXP_TABLE;

/// Inputs of at least this magnitude, and NaN, go to the C library's `exp`: below it
/// the scale `2^k` of the reduction is a normal number and the result neither
/// overflows nor becomes subnormal.
pub const EXP_FAST_LIMIT: f64 = 704.0;
/// `128 / ln 2`.
pub const EXP_INV_LN2_N: f64 = 184.6649652337873;
/// `1.5 · 2^52`: adding it rounds a double below 2^51 to an integer, which the low bits
/// of the sum then hold.
pub const EXP_SHIFT: f64 = 6755399441055744.0;
/// `ln 2 / 128` with its low 17 bits cleared, so `k · EXP_LN2_HI_N` is exact for every
/// `|k| < 2^17` the reduction meets.
pub const EXP_LN2_HI_N: f64 = f64::from_bits(0x3f762e42fefa0000);
/// `ln 2 / 128 - EXP_LN2_HI_N`, rounded.
pub const EXP_LN2_LO_N: f64 = f64::from_bits(0x3d0cf79abc9e3b3a);
/// The Taylor coefficients `1/2, 1/6, 1/24, 1/120` of `e^r - 1 - r`; with
/// `|r| <= ln 2 / 256` the first term left out, `r^6 / 720`, is below 2^-60.
pub const EXP_C2: f64 = 0.5;
/// See [`EXP_C2`].
pub const EXP_C3: f64 = 0.16666666666666666;
/// See [`EXP_C2`].
pub const EXP_C4: f64 = 0.041666666666666664;
/// See [`EXP_C2`].
pub const EXP_C5: f64 = 0.008333333333333333;

/// `e^x`, within about 0.51 units in the last place (the C library's is within about
/// 0.5, so the two differ in the last bit for a small share of inputs).
///
/// With `x = (128 e + j) ln 2 / 128 + r`, `|r| <= ln 2 / 256`:
/// `e^x = 2^e · 2^(j/128) · e^r`, where `2^(j/128)` is a table entry carried as a
/// double and its relative remainder, and `e^r` a polynomial. Every step is one IEEE
/// operation with no fused multiply-add, so any faithful evaluation of the same steps
/// gives the same bits.
#[inline]
pub fn exp(x: f64) -> f64 {
    // NaN fails the test too, and goes to the C library.
    let in_range = x.abs() < EXP_FAST_LIMIT;
    if !in_range {
        return x.exp();
    }
    let z = x * EXP_INV_LN2_N + EXP_SHIFT;
    let kd = z - EXP_SHIFT;
    let k = (z.to_bits() as i64).wrapping_sub(EXP_SHIFT.to_bits() as i64);
    let r = (x - kd * EXP_LN2_HI_N) - kd * EXP_LN2_LO_N;
    let j = (k & 127) as usize;
    let e = k >> 7;
    let scale = f64::from_bits(EXP_TABLE[2 * j].wrapping_add((e as u64) << 52));
    let tail = f64::from_bits(EXP_TABLE[2 * j + 1]);
    let r2 = r * r;
    let p = (tail + r) + r2 * ((EXP_C2 + r * EXP_C3) + r2 * (EXP_C4 + r * EXP_C5));
    scale + scale * p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite doubles of one sign.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64).abs_diff(b.to_bits() as i64)
    }

    #[test]
    fn exp_is_within_one_ulp_of_the_c_library_and_mostly_equal() {
        // A deterministic sweep over the whole fast range and dense near zero.
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut differ = 0usize;
        let total = 2_000_000;
        for i in 0..total {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            let x = if i % 2 == 0 {
                (u * 2.0 - 1.0) * 709.0
            } else {
                (u * 2.0 - 1.0) * 2.0f64.powi(-((i % 60) as i32))
            };
            let (ours, libm) = (exp(x), x.exp());
            assert!(ulps(ours, libm) <= 1, "exp({x:e}) = {ours:e}, the C library gives {libm:e}");
            differ += (ours != libm) as usize;
        }
        assert!(differ * 100 < total, "{differ} of {total} differ");
    }

    #[test]
    fn exp_at_the_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(1.0), std::f64::consts::E);
        assert!(exp(f64::NAN).is_nan());
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(-746.0), 0.0);
        // Either side of the fast range's limit.
        for x in [703.999, -703.999, 704.0, -704.0, 708.0, -708.0, -740.0] {
            assert!(ulps(exp(x), x.exp()) <= 1, "{x}");
        }
        // Integers k ln 2 / 128 + tiny: the reduction's edges.
        for k in -130_000i64..130_000 {
            let x = k as f64 * (std::f64::consts::LN_2 / 128.0);
            if x.abs() < 704.0 {
                assert!(ulps(exp(x), x.exp()) <= 1, "{x}");
            }
        }
    }
}
