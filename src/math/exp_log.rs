//! exp, expm1, log, log1p.
//!
//! **exp(x)**: `n = round(x / ln2)` by the shifter trick, `r = x - n ln2` with a two-part
//! (Cody-Waite) ln2 and fma, so the first step is exact and `|r| <= ln2/2`;
//! `e^r = 1 + (r + r^2 Q(r))` with `Q` a minimax polynomial of degree 4 (f32, total degree 6)
//! or 10 (f64, total degree 12) fitted for relative error (`tools/fit_coeffs.py`); the result is
//! `e^r * 2^h * 2^(n-h)` with `h = floor(n/2)`, so overflow gives inf and the subnormal range is
//! rounded once by the last product. Lanes beyond the thresholds get inf / 0.
//!
//! **expm1(x)**: the same reduction, but `n` is forced to 0 for `|x| < ln2`, so the polynomial
//! `r + r^2 Q(r)` (degree 8 f32 / 14 f64, fitted on `[-ln2, ln2]` for relative error) alone
//! gives the small results with no cancellation; otherwise `expm1 = 2 * (s e + (s - 1/2))` with
//! `s = 2^(n-1)` and `e = expm1(r)` in one fma (`s - 1/2` is exact while `n <= p`). Lanes below
//! the threshold give -1; the sign of the result is copied from x (exact -0).
//!
//! **log(x)**: subnormals are scaled by `2^p` first. `x = 2^k m` with `m` in `[2/3, 4/3)` taken
//! from the bits (`bits(x) - bits(2/3)`, arithmetic shift), `f = m - 1` exact. f32:
//! `log1p(f) = f + f^2 Q(f)` with `Q` of degree 7 (minimax, relative); f64: the fdlibm form
//! `log1p(f) = f - (f^2/2 - s (f^2/2 + R(s^2)))`, `s = f / (2 + f)`, `R` of degree 7 in `s^2`.
//! Then `k ln2` is added (two-part ln2 in f64). Specials by select: log(0) = -inf, log(<0) =
//! NaN, log(inf) = inf.
//!
//! **log1p(x)**: `u = 1 + x` rounded, its rounding error `err` by TwoSum, `c = err / u`; then
//! log's kernel on `u` with `c` added to the low-order part (`log1p(x) = log(u) + c` to first
//! order). The sign of the result is copied from x (exact -0).
//!
//! Accuracy (max ulp measured by `tests/ulp.rs`): see `ACCURACY.md`.

use super::coeffs::*;
use super::helpers::*;
use super::{Emit, Prec};

/// `x = n ln2 + r`: returns `(n, t, r)` with `t` the shifted value (see `helpers`).
pub(super) fn exp_reduce<E: Emit>(e: &mut E, x: E::F) -> (E::F, E::F, E::F) {
    let (hi, lo) = pick(e, (LN2_HI_F32, LN2_LO_F32), (LN2_HI_F64, LN2_LO_F64));
    let (n, t) = round_shifted(e, x, std::f64::consts::LOG2_E);
    let r = reduce_ln2(e, n, x, hi, lo);
    (n, t, r)
}

fn reduce_ln2<E: Emit>(e: &mut E, n: E::F, x: E::F, hi: f64, lo: f64) -> E::F {
    let mhi = e.fconst(-hi);
    let mlo = e.fconst(-lo);
    let r = e.fma(n, mhi, x); // exact
    e.fma(n, mlo, r)
}

/// `e^r - 1` for `|r| <= ln2/2` (plus a little): `r + r^2 Q(r)`.
pub(super) fn expm1_reduced<E: Emit>(e: &mut E, r: E::F) -> E::F {
    let q = pick(e, &EXP_F32[..], &EXP_F64[..]);
    let r2 = e.mul(r, r);
    let p = horner(e, r, q);
    e.fma(r2, p, r)
}

/// `e^x` without the threshold patches: valid for `x` in about `[-2 bias ln2, 2 bias ln2]`,
/// NaN in, NaN out. Subnormal results are rounded once.
pub(super) fn exp_core<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let (_, t, r) = exp_reduce(e, x);
    let em1 = expm1_reduced(e, r);
    let one = e.fconst(1.0);
    let p = e.add(one, em1);
    let (s1, s2) = pow2_split(e, t);
    let y = e.mul(p, s1);
    e.mul(y, s2)
}

pub(super) fn exp<E: Emit>(e: &mut E, x: E::F) -> E::F {
    // Beyond these the core's exponent arithmetic would wrap; inside them it already
    // overflows to inf / underflows to 0 on its own.
    let (hi, lo) = pick(e, (100.0, -120.0), (720.0, -760.0));
    let y = exp_core(e, x);
    let hi = e.fconst(hi);
    let big = e.lt(hi, x);
    let inf = e.fconst(f64::INFINITY);
    let y = e.select(big, inf, y);
    let lo = e.fconst(lo);
    let small = e.lt(x, lo);
    let zero = e.fconst(0.0);
    e.select(small, zero, y)
}

pub(super) fn expm1<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let (hi, lo, q) = pick(
        e,
        (89.0, -40.0, &EXPM1_F32[..]),
        (710.0, -100.0, &EXPM1_F64[..]),
    );
    let (l2hi, l2lo) = pick(e, (LN2_HI_F32, LN2_LO_F32), (LN2_HI_F64, LN2_LO_F64));
    let (n, t) = round_shifted(e, x, std::f64::consts::LOG2_E);
    // n = 0 for |x| < ln2: the polynomial covers that range without cancellation.
    let ax = e.abs(x);
    let ln2 = e.fconst(std::f64::consts::LN_2);
    let near0 = e.lt(ax, ln2);
    let zero = e.fconst(0.0);
    let n = e.select(near0, zero, n);
    let r = reduce_ln2(e, n, x, l2hi, l2lo);
    let r2 = e.mul(r, r);
    let p = horner(e, r, q);
    let em1 = e.fma(r2, p, r);
    // 2 * (s em1 + (s - 1/2)), s = 2^(n-1): one rounding, s - 1/2 exact for n <= p.
    let s = pow2(e, t, -1);
    let half = e.fconst(0.5);
    let s = e.select(near0, half, s);
    let sm = e.sub(s, half);
    let y = e.fma(s, em1, sm);
    let y = e.add(y, y);
    let hi = e.fconst(hi);
    let big = e.lt(hi, x);
    let inf = e.fconst(f64::INFINITY);
    let y = e.select(big, inf, y);
    let lo = e.fconst(lo);
    let small = e.lt(x, lo);
    let m1 = e.fconst(-1.0);
    let y = e.select(small, m1, y);
    e.copysign(y, x)
}

/// `log(u) + c` for a positive normal finite `u` (`c` a small correction, or none), with `kadj`
/// (if any) added to the exponent. No special values.
fn log_kernel<E: Emit>(e: &mut E, u: E::F, kadj: Option<E::F>, c: Option<E::F>) -> E::F {
    let f = fmt(e);
    let ub = e.to_bits(u);
    let off = e.iconst(bits_of(e, 2.0 / 3.0));
    let tmp = e.isub(ub, off);
    let ki = e.sshr(tmp, f.mant);
    let kb = e.shl(ki, f.mant);
    let mb = e.isub(ub, kb);
    let m = e.from_bits(mb); // in [2/3, 4/3)
    let one = e.fconst(1.0);
    let fr = e.sub(m, one); // exact
    let mut k = small_int_to_float(e, ki);
    if let Some(ka) = kadj {
        k = e.add(k, ka);
    }
    match e.prec() {
        Prec::F32 => {
            // log1p(f) = f + f^2 Q(f); then + k ln2 (ln2's f32 rounding error is 2^-25 relative,
            // far below an ulp of the result when k != 0).
            let f2 = e.mul(fr, fr);
            let q = horner(e, fr, &LOG_F32);
            let lp = match c {
                None => e.fma(f2, q, fr),
                Some(c) => {
                    let t = e.fma(f2, q, c);
                    e.add(fr, t)
                }
            };
            let ln2 = e.fconst(std::f64::consts::LN_2);
            e.fma(k, ln2, lp)
        }
        Prec::F64 => {
            // fdlibm: log1p(f) = f - (hfsq - s (hfsq + R)), s = f / (2 + f), R = z P(z), z = s^2.
            let two = e.fconst(2.0);
            let d = e.add(two, fr);
            let s = e.div(fr, d);
            let z = e.mul(s, s);
            let p = horner(e, z, &LOG_F64);
            let rr = e.mul(z, p);
            let half = e.fconst(0.5);
            let hf = e.mul(half, fr);
            let hfsq = e.mul(hf, fr);
            let t = e.add(hfsq, rr);
            // k ln2_lo (+ c) goes in with the small terms; k ln2_hi (32 bits) is exact.
            let lo = e.fconst(LN2_HI32_LO_F64);
            let klo = match c {
                None => e.mul(k, lo),
                Some(c) => e.fma(k, lo, c),
            };
            let t = e.fma(s, t, klo);
            let t = e.sub(hfsq, t);
            let t = e.sub(fr, t);
            let hi = e.fconst(LN2_HI32_F64);
            e.fma(k, hi, t)
        }
    }
}

/// log's special values on top of `y`: `v == 0 -> -inf`, `v < 0 or NaN -> NaN`,
/// `v == inf -> inf`.
fn log_specials<E: Emit>(e: &mut E, v: E::F, y: E::F) -> E::F {
    let zero = e.fconst(0.0);
    let inf = e.fconst(f64::INFINITY);
    let ninf = e.fconst(f64::NEG_INFINITY);
    let nan = e.fconst(f64::NAN);
    let is0 = e.eq(v, zero);
    let y = e.select(is0, ninf, y);
    let nonneg = e.le(zero, v);
    let y = e.select(nonneg, y, nan);
    let isinf = e.eq(v, inf);
    e.select(isinf, inf, y)
}

pub(super) fn log<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let (scale, kadj, min_normal) = pick(
        e,
        (2f64.powi(24), -24.0, f32::MIN_POSITIVE as f64),
        (2f64.powi(54), -54.0, f64::MIN_POSITIVE),
    );
    // Subnormal inputs: scale into the normal range, correct the exponent.
    let mn = e.fconst(min_normal);
    let sub = e.lt(x, mn);
    let sc = e.fconst(scale);
    let xs = e.mul(x, sc);
    let u = e.select(sub, xs, x);
    let ka = e.fconst(kadj);
    let zero = e.fconst(0.0);
    let ka = e.select(sub, ka, zero);
    let y = log_kernel(e, u, Some(ka), None);
    log_specials(e, x, y)
}

pub(super) fn log1p<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let one = e.fconst(1.0);
    // u = 1 + x and its rounding error (TwoSum).
    let u = e.add(one, x);
    let bb = e.sub(u, one);
    let ab = e.sub(u, bb);
    let ea = e.sub(one, ab);
    let eb = e.sub(x, bb);
    let err = e.add(ea, eb);
    let c = e.div(err, u);
    let y = log_kernel(e, u, None, Some(c));
    let y = log_specials(e, u, y);
    e.copysign(y, x)
}
