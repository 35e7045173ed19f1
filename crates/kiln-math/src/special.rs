//! tanh, sigmoid, erf.
//!
//! **tanh(x)**, on `a = |x|`, the sign copied back at the end (tanh(-0) = -0):
//! - `a < 0.55`: `a + a^3 P(a^2)`, minimax for relative error, total degree 9 (f32) / 21 (f64).
//! - otherwise `1 - 2/(e^(2a) + 1)` computed as `(d - 2) / d`: `d = fma(s, em1, s + 1)` from
//!   exp's reduction `e^(2a) = s (1 + em1)`, `s = 2^n` (one rounding), `d - 2` exact, and the
//!   rounding of d moves the quotient by only `2 delta / d^2` (<= 0.5 ulp at a = 0.55, less
//!   beyond). From `a > 6` (f32) / `12` (f64), where `d - 2` would round, `1 - 2/d` (2/d tiny).
//! - `a > 9.1` / `19.1`: 1 (what tanh rounds to there; also +-inf).
//!
//! tanh and sigmoid are each written as two halves, `*_head` (the exp) and `*_tail`, so that
//! buffer functions can run each half over many vectors in turn (`math::avx2`); the function
//! is the two in a row, so every backend computes the same operations.
//!
//! **sigmoid(x)** = `N / (1 + E)`, `E = exp(-|x|)` (exp's core: subnormal results rounded
//! once), `N = 1` for `x >= 0` and `N = E` for `x < 0`. `1 + E` is kept as a double-word
//! (Fast2Sum) and the quotient gets one correction, `y0 - (y0 (d + dl) - N) / d`, with `1/d`
//! from the minimax line `24/17 - 8/17 d` on [1, 2] (1/17 relative error is plenty for a
//! correction). Without it the rounding of `1 + E` costs up to 1 ulp near 1 (measured 1.98 ulp
//! in f32). What is left is mostly exp's own rounding of `1 + em1`.
//!
//! **erf(x)**, on `a = |x|`, the sign copied back (erf(-0) = -0):
//! - `a < 1`: `a + a P(a^2)` (`P(0) = 2/sqrt(pi) - 1`: the rounding of 2/sqrt(pi) stays out of
//!   the leading term), minimax for relative error, degree 6 (f32) / 12 (f64) in `a^2`.
//! - `1 <= a < 3.93` (f32) / `5.93` (f64): `1 - exp(-a^2) R(a - c)`, `R ~ erfc(a) exp(a^2)` a
//!   minimax polynomial (degree 8 / 22) around the middle c of the interval, fitted for the
//!   absolute error of erf; `a^2` is split exactly (`a^2 = h + l` by fma) and
//!   `exp(-h - l) = exp(-h) (1 - l)`.
//! - beyond: 1 (what erf rounds to; also +-inf).
//!
//! Measured max errors (tests/math_ulp.rs, docs/math.md): tanh 0.95 / 0.95 ulp (f32 / f64),
//! sigmoid 1.34 / 1.33, erf 0.83 / 0.82.

use super::coeffs::*;
use super::exp_log::{exp_core, exp_reduce, expm1_reduced};
use super::helpers::*;
use super::Emit;

#[inline(always)]
pub(super) fn tanh<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let d = tanh_head(e, x);
    tanh_tail(e, x, d)
}

/// The first half of `tanh`: `d = e^(2|x|) + 1`, the long chain through exp. Buffer functions
/// run it over a run of vectors before `tanh_tail` over the same run (`math::avx2`), so that
/// the chains of many vectors are in flight at once; `tanh` is the two in a row.
#[inline(always)]
pub(super) fn tanh_head<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let a = e.abs(x);
    // Large: 1 - 2/(e^2a + 1) as (d - 2) / d: d = e^2a + 1 = fma(s, em1, s + 1) rounds once,
    // d - 2 is exact, and d's rounding moves the quotient by 2 delta / d^2 only.
    let a2x = e.add(a, a);
    let (_, t, r) = exp_reduce(e, a2x);
    let em1 = expm1_reduced(e, r);
    let s = pow2(e, t, 0);
    let one = e.fconst(1.0);
    let sp = e.add(s, one);
    e.fma(s, em1, sp)
}

/// The rest of `tanh(x)`, from `d = tanh_head(x)`.
#[inline(always)]
pub(super) fn tanh_tail<E: Emit>(e: &mut E, x: E::F, d: E::F) -> E::F {
    let (pc, big_a, one_a) = pick(e, (&TANH_F32[..], 6.0, 9.1), (&TANH_F64[..], 12.0, 19.1));
    let a = e.abs(x);
    // Small: a + a^3 P(a^2).
    let a2 = e.mul(a, a);
    let a3 = e.mul(a2, a);
    let p = horner(e, a2, pc);
    let ys = e.fma(a3, p, a);
    let one = e.fconst(1.0);
    let two = e.fconst(2.0);
    let q = e.sub(d, two);
    // Where d - 2 would round (d >= 2^(p+1)), 1 - 2/d instead: 2/d is tiny there.
    let ba = e.fconst(big_a);
    let big = e.lt(ba, a);
    let q = e.select(big, two, q);
    let z = e.div(q, d);
    let zc = e.sub(one, z);
    let yl = e.select(big, zc, z);
    let t0 = e.fconst(0.55);
    let small = e.lt(a, t0);
    let y = e.select(small, ys, yl);
    let oa = e.fconst(one_a);
    let sat = e.lt(oa, a);
    let y = e.select(sat, one, y);
    e.copysign(y, x)
}

#[inline(always)]
pub(super) fn sigmoid<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let ex = sigmoid_head(e, x);
    sigmoid_tail(e, x, ex)
}

/// The first half of `sigmoid`: `exp(-|x|)`, 0 where that underflows (split as `tanh` is).
#[inline(always)]
pub(super) fn sigmoid_head<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let lo = pick(e, -150.0, -1100.0);
    let m1 = e.fconst(-1.0);
    let a = e.copysign(x, m1); // -|x|
    let ex = exp_core(e, a);
    // exp_core's exponent arithmetic is valid down to about -2 bias ln2; below, exp is 0.
    let lo = e.fconst(lo);
    let tiny = e.lt(a, lo);
    let zero = e.fconst(0.0);
    e.select(tiny, zero, ex)
}

/// The rest of `sigmoid(x)`, from `ex = sigmoid_head(x)`.
#[inline(always)]
pub(super) fn sigmoid_tail<E: Emit>(e: &mut E, x: E::F, ex: E::F) -> E::F {
    let zero = e.fconst(0.0);
    let one = e.fconst(1.0);
    let d = e.add(one, ex);
    let neg = e.lt(x, zero);
    let num = e.select(neg, ex, one);
    let y0 = e.div(num, d);
    // Correction: d + dl = 1 + E exactly (Fast2Sum, 1 >= E); rho = y0 (d + dl) - num;
    // y = y0 - rho / d, 1/d ~ 24/17 - 8/17 d on [1, 2] (relative error 1/17).
    let dm1 = e.sub(d, one);
    let dl = e.sub(ex, dm1);
    let nnum = e.neg(num);
    let rho = e.fma(y0, d, nnum);
    let rho = e.fma(y0, dl, rho);
    let c0 = e.fconst(-24.0 / 17.0);
    let c1 = e.fconst(8.0 / 17.0);
    let ninv = e.fma(d, c1, c0);
    e.fma(rho, ninv, y0)
}

#[inline(always)]
pub(super) fn erf<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let (ps, pl, center, one_a) = pick(
        e,
        (&ERF_SMALL_F32[..], &ERF_LARGE_F32[..], ERF_CENTER_F32, 3.93),
        (&ERF_SMALL_F64[..], &ERF_LARGE_F64[..], ERF_CENTER_F64, 5.93),
    );
    let a = e.abs(x);
    // Small: a + a P(a^2).
    let a2 = e.mul(a, a);
    let p = horner(e, a2, ps);
    let ys = e.fma(a, p, a);
    // Large: 1 - exp(-a^2) R(a), a^2 = a2 + a2l exactly.
    let na2 = e.neg(a2);
    let a2l = e.fma(a, a, na2);
    let ex = exp_core(e, na2);
    let exl = e.mul(ex, a2l);
    let ex = e.sub(ex, exl);
    let c = e.fconst(center);
    let v = e.sub(a, c);
    let rr = horner(e, v, pl);
    let one = e.fconst(1.0);
    let nex = e.neg(ex);
    let yl = e.fma(nex, rr, one);
    let t0 = e.fconst(1.0);
    let small = e.lt(a, t0);
    let y = e.select(small, ys, yl);
    let oa = e.fconst(one_a);
    let sat = e.lt(oa, a);
    let y = e.select(sat, one, y);
    e.copysign(y, x)
}
