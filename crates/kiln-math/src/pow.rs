//! `pow` of f64 values (C99's `pow`) where there is no libm: the GPU. `exp(y * log|x|)` needs
//! more than f64's precision in between: `y * log|x|` reaches ~745 before the result
//! overflows, so an error of one f64 ulp in `log|x|` would move the result by hundreds of ulps.
//! Here `log|x|` is a double-word value (`hi + lo`, about 2^-65 relative), the product with
//! `y` is double-word (an fma gives the product's rounding error), and `exp` takes both words.
//! Measured against libm's `pow` (`tests/math_pow.rs`): within 1 ulp; special inputs give
//! libm's results exactly.
//!
//! The steps (the textbook route, without tables; written for this crate's emitter):
//! - `|x| = 2^k * m` with `m` in `[sqrt(1/2), sqrt(2))` (subnormals scaled by 2^54 first);
//! - `log m = 2 atanh(s)` with `s = (m - 1) / (m + 1)`, `|s| <= 0.1716`: `2s + (2/3)s^3` in
//!   double words, the rest (`s^5 * (2/5 + 2/7 s^2 + ...)`, 12 terms) in f64, where its error
//!   is below 2^-65 of the sum;
//! - `log|x| = k ln2 + log m` (ln2 in two words whose high one has 32 bits, so `k * hi` is
//!   exact);
//! - `p = y * log|x|` in two words; `p = n ln2 + r`, `|r| <= ln2 / 2`, the reduction exact;
//! - `exp(r) = 1 + r + r^2 Q(r)` (Taylor to `r^16`, below 2^-70), `1 + r` summed exactly and
//!   the small terms added to its low word; then `* 2^n` in two steps, so that a subnormal
//!   result is rounded once.
//!
//! Special inputs (zeros, infinities, NaN, negative bases) are patched with selects, as every
//! expansion here: the arithmetic above runs on sanitized operands.

use super::coeffs::{LN2_HI32_F64, LN2_HI32_LO_F64};
use super::helpers::{horner, pow2_split, round_shifted, two_prod, two_sum};
use super::Emit;

/// `2 / (2n + 1)` for n = 2 ..= 13: the terms of `2 atanh(s)` after `2s + (2/3) s^3`, as a
/// polynomial in `s^2` times `s^5` (the last term below 2^-70 of the sum).
const ATANH_TAIL: [f64; 12] = {
    let mut c = [0.0; 12];
    let mut n = 0;
    while n < 12 {
        c[n] = 2.0 / (2 * (n + 2) + 1) as f64;
        n += 1;
    }
    c
};

/// `1 / k!` for k = 2 ..= 16: `exp(r) - 1 - r = r^2 (1/2 + r/6 + ...)`, Taylor's terms (below
/// 2^-70 for `|r| <= ln2 / 2`: more accurate than a minimax fit to f64 needs to be).
const EXP_TAYLOR: [f64; 15] = {
    let mut c = [0.0; 15];
    let mut fact = 1.0;
    let mut k = 0;
    while k < 15 {
        fact *= (k + 2) as f64;
        c[k] = 1.0 / fact;
        k += 1;
    }
    c
};

/// `2/3` in two words: `TWO_THIRDS_HI` is `(2^54 - 1) / (3 * 2^53)`, so the rest is exactly
/// `2^-53 / 3`.
const TWO_THIRDS_HI: f64 = 2.0 / 3.0;
const TWO_THIRDS_LO: f64 = 1.0 / (3.0 * 9007199254740992.0);

/// `log a` in two words, for a finite `a > 0`.
fn log_dd<E: Emit>(e: &mut E, a: E::F) -> (E::F, E::F) {
    // Subnormals: scaled into the normal range, their exponent corrected.
    let tiny = e.fconst(f64::MIN_POSITIVE);
    let sub = e.lt(a, tiny);
    let scale = e.fconst(2f64.powi(54));
    let scaled = e.mul(a, scale);
    let a = e.select(sub, scaled, a);
    // a = 2^k * m, m in [sqrt(1/2), sqrt(2)): the bits of sqrt(1/2) as the offset.
    const SQRT_HALF: i64 = 0x3FE6_A09E_667F_3BCD;
    let bits = e.to_bits(a);
    let off = e.iconst(SQRT_HALF);
    let ix = e.isub(bits, off);
    let k = e.sshr(ix, 52);
    let mant_mask = e.iconst(0x000F_FFFF_FFFF_FFFF);
    let mant = e.iand(ix, mant_mask);
    let m_bits = e.iadd(mant, off);
    let m = e.from_bits(m_bits);
    let kf = e.to_float(k);
    let fifty_four = e.fconst(54.0);
    let kf_sub = e.sub(kf, fifty_four);
    let kf = e.select(sub, kf_sub, kf);

    // s = f / (2 + f) in two words, f = m - 1 (exact: m is within a factor 2 of 1).
    let one = e.fconst(1.0);
    let two = e.fconst(2.0);
    let f = e.sub(m, one);
    let u_hi = e.add(two, f);
    let back = e.sub(u_hi, two);
    let u_lo = e.sub(f, back); // exact: |2| >= |f|
    let s_hi = e.div(f, u_hi);
    // f - s_hi * (u_hi + u_lo), the quotient's residual.
    let ns = e.neg(s_hi);
    let r0 = e.fma(ns, u_hi, f);
    let r1 = e.mul(s_hi, u_lo);
    let res = e.sub(r0, r1);
    let s_lo = e.div(res, u_hi);

    // s^2 and s^3 in two words.
    let (z_hi, z_lo0) = two_prod(e, s_hi, s_hi);
    let two_s_hi = e.add(s_hi, s_hi);
    let z_lo = e.fma(two_s_hi, s_lo, z_lo0);
    let (c_hi, c_lo0) = two_prod(e, s_hi, z_hi);
    let c_lo1 = e.fma(s_hi, z_lo, c_lo0);
    let c_lo = e.fma(s_lo, z_hi, c_lo1);
    // (2/3) s^3 in two words (2/3 itself in two words).
    let th = e.fconst(TWO_THIRDS_HI);
    let tl = e.fconst(TWO_THIRDS_LO);
    let (t3_hi, t3_lo0) = two_prod(e, th, c_hi);
    let t3_lo1 = e.fma(th, c_lo, t3_lo0);
    let t3_lo = e.fma(tl, c_hi, t3_lo1);
    // The rest of 2 atanh(s): s^5 (2/5 + 2/7 s^2 + ... + 2/27 s^22).
    let q = horner(e, z_hi, &ATANH_TAIL);
    let s5 = e.mul(c_hi, z_hi);
    let tail = e.mul(s5, q);

    // log m = 2 s_hi + (2/3) s^3 + (2 s_lo + tail): the two large terms summed exactly.
    let (h, l0) = two_sum(e, two_s_hi, t3_hi);
    let two_s_lo = e.add(s_lo, s_lo);
    let small = e.add(t3_lo, tail);
    let small = e.add(small, two_s_lo);
    let l = e.add(l0, small);

    // + k ln2: k * LN2_HI32 is exact (k has at most 11 bits, LN2_HI32 32).
    let ln2_hi = e.fconst(LN2_HI32_F64);
    let ln2_lo = e.fconst(LN2_HI32_LO_F64);
    let kh = e.mul(kf, ln2_hi);
    let (hi, lo0) = two_sum(e, kh, h);
    let lo1 = e.add(lo0, l);
    let lo = e.fma(kf, ln2_lo, lo1);
    let (hi, lo) = two_sum(e, hi, lo);
    (hi, lo)
}

/// `exp(p_hi + p_lo)` for a double-word `p` (`|p_lo| <= ulp(p_hi)`), `|p_hi| <= 800`.
fn exp_dd<E: Emit>(e: &mut E, p_hi: E::F, p_lo: E::F) -> E::F {
    let (n, t) = round_shifted(e, p_hi, std::f64::consts::LOG2_E);
    let ln2_hi = e.fconst(LN2_HI32_F64);
    let ln2_lo = e.fconst(LN2_HI32_LO_F64);
    // r = p - n ln2 in two words: p_hi - n * LN2_HI32 is exact (n has at most 11 bits, the
    // constant 32, and the difference is within a factor 2 of p_hi where n != 0);
    // n * LN2_HI32_LO (up to ~2^-22) is taken off exactly, so that the low word is below an
    // ulp of r plus p_lo and its square is negligible below.
    let nn = e.neg(n);
    let rest = e.fma(nn, ln2_hi, p_hi);
    let (u_hi, u_lo) = two_prod(e, n, ln2_lo);
    let nu = e.neg(u_hi);
    let (r_hi, r_lo0) = two_sum(e, rest, nu);
    let r_lo1 = e.sub(r_lo0, u_lo);
    let r_lo = e.add(r_lo1, p_lo);
    // exp(r_hi) - 1 - r_hi = r_hi^2 Q(r_hi).
    let q = horner(e, r_hi, &EXP_TAYLOR);
    let r2 = e.mul(r_hi, r_hi);
    let poly = e.mul(r2, q);
    // exp(r) = (1 + r_hi) + (poly + r_lo (1 + r_hi + poly)): the first sum exactly.
    let one = e.fconst(1.0);
    let (a_hi, a_lo) = two_sum(e, one, r_hi);
    let s = e.add(r_hi, poly);
    let corr = e.fma(r_lo, s, r_lo);
    let small = e.add(poly, corr);
    let small = e.add(a_lo, small);
    let m = e.add(a_hi, small);
    // * 2^n in two factors, each a normal power of two, so that the product rounds once
    // (to a subnormal, infinity or zero where it must).
    let (f1, f2) = pow2_split(e, t);
    let m = e.mul(m, f1);
    e.mul(m, f2)
}

/// C99's `pow(x, y)` for f64 values (see the module doc). The emitter must be in f64.
pub fn pow_f64<E: Emit>(e: &mut E, x: E::F, y: E::F) -> E::F {
    let zero = e.fconst(0.0);
    let one = e.fconst(1.0);
    let inf = e.fconst(f64::INFINITY);
    let nan = e.fconst(f64::NAN);
    let ax = e.abs(x);
    let ay = e.abs(y);
    let x_fin = e.lt(ax, inf);
    let y_fin = e.lt(ay, inf);
    let x_zero = e.eq(ax, zero);
    let x_nz = e.mnot(x_zero);
    let x_ok = e.mand(x_fin, x_nz);

    // The magnitude for a finite nonzero x and finite y, on sanitized operands.
    let a = e.select(x_ok, ax, one);
    let yy = e.select(y_fin, y, zero);
    let (l_hi, l_lo) = log_dd(e, a);
    let (p_hi, p_lo0) = two_prod(e, yy, l_hi);
    let p_lo = e.fma(yy, l_lo, p_lo0);
    // Past +-800 the result is infinite or zero whatever the low word: clamp, drop it (it
    // may be an infinity's NaN residue).
    let bound = e.fconst(800.0);
    let ap = e.abs(p_hi);
    let inside = e.lt(ap, bound);
    let clamped = e.copysign(bound, p_hi);
    let p_hi = e.select(inside, p_hi, clamped);
    let p_lo = e.select(inside, p_lo, zero);
    let core = exp_dd(e, p_hi, p_lo);

    // Zero or infinite x: 0 or inf by the sign of y (an infinite x as the reciprocal of 0).
    let y_neg = e.lt(y, zero);
    let to_inf = same(e, x_zero, y_neg);
    let edge = e.select(to_inf, inf, zero);
    let mag = e.select(x_ok, core, edge);
    // An infinite y: inf where |x| > 1 and y > 0 or |x| < 1 and y < 0, else 0; 1 at |x| == 1.
    let x_big = e.lt(one, ax);
    let stays = same(e, x_big, y_neg);
    let grows = e.mnot(stays);
    let ax_one = e.eq(ax, one);
    let y_inf_mag = e.select(grows, inf, zero);
    let y_inf_mag = e.select(ax_one, one, y_inf_mag);
    let mag = e.select(y_fin, mag, y_inf_mag);

    // y an odd integer: finite, integral, below 2^53 (every f64 from there on is even).
    let fy = e.floor(y);
    let y_int = e.eq(fy, y);
    let y_int = e.mand(y_int, y_fin);
    let limit = e.fconst(2f64.powi(53));
    let small_y = e.lt(ay, limit);
    let safe_y = e.select(small_y, y, zero);
    let yi = e.to_int(safe_y);
    let one_i = e.iconst(1);
    let low_bit = e.iand(yi, one_i);
    let odd = e.ieq(low_bit, one_i);
    let small_odd = e.mand(small_y, odd);
    let y_odd = e.mand(y_int, small_odd);
    // The sign: x's sign bit (-0 and -inf included) with an odd integer y.
    let xb = e.to_bits(x);
    let zero_i = e.iconst(0);
    let x_neg_bit = e.ilt(xb, zero_i);
    let flip = e.mand(x_neg_bit, y_odd);
    let neg_mag = e.neg(mag);
    let r = e.select(flip, neg_mag, mag);
    // A negative finite x to a finite non-integer y: NaN.
    let x_lt0 = e.lt(x, zero);
    let not_int = e.mnot(y_int);
    let neg_fin = e.mand(x_lt0, x_fin);
    let fraction = e.mand(y_fin, not_int);
    let bad = e.mand(neg_fin, fraction);
    let r = e.select(bad, nan, r);
    // NaN in, NaN out, except below.
    let x_nan = e.is_nan(x);
    let y_nan = e.is_nan(y);
    let any_nan = e.mor(x_nan, y_nan);
    let r = e.select(any_nan, nan, r);
    // pow(1, y) = 1 and pow(x, 0) = 1 whatever the other operand; pow(-1, +-inf) = 1.
    let x_one = e.eq(x, one);
    let y_zero = e.eq(y, zero);
    let m_one = e.fconst(-1.0);
    let x_m1 = e.eq(x, m_one);
    let y_not_fin = e.mnot(y_fin);
    let y_not_nan = e.mnot(y_nan);
    let y_inf = e.mand(y_not_fin, y_not_nan);
    let m1_inf = e.mand(x_m1, y_inf);
    let trivial = e.mor(x_one, y_zero);
    let unit = e.mor(m1_inf, trivial);
    e.select(unit, one, r)
}

/// `a == b` for two masks.
fn same<E: Emit>(e: &mut E, a: E::M, b: E::M) -> E::M {
    let both = e.mand(a, b);
    let na = e.mnot(a);
    let nb = e.mnot(b);
    let neither = e.mand(na, nb);
    e.mor(both, neither)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_constants_are_what_they_say() {
        // 2 - 3 hi is exact in an fma.
        let lo = (-3.0f64).mul_add(super::TWO_THIRDS_HI, 2.0) / 3.0;
        assert_eq!(super::TWO_THIRDS_LO, lo);
        assert_eq!(super::EXP_TAYLOR[0], 0.5);
        assert_eq!(super::EXP_TAYLOR[1], 1.0 / 6.0);
        assert_eq!(super::ATANH_TAIL[0], 0.4);
        assert_eq!(super::ATANH_TAIL[11], 2.0 / 27.0);
    }
}
