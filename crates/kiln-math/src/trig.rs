//! sin, cos, tan.
//!
//! **Reduction**: `q = round(x * 2/pi)` by the shifter trick (the low bits of the shifted value
//! then hold `q`), `r = x - q pi/2` by Cody-Waite with fma and pi/2 split into positive parts
//! (4 f32 / 3 f64 parts, ~96 / ~159 bits: the reduced argument keeps its relative precision for
//! every float up to the bound). The first step is exact; `|r| <= pi/4` (in f32 up to
//! `pi/4 + 1/32`: 2/pi rounded to f32 can misplace q near the bound, so the f32 kernels are
//! fitted on `pi/4 + 0.04`). The parts are truncated
//! rather than rounded so that all are positive, which keeps `r = -0` for `x = -0`.
//!
//! **sin / cos** (one rounding in r: the first two parts give `r`, the rest is kept apart as a
//! small correction `rn`): kernels on `|r| <= pi/4`, `sin r = r + r^3 S(r^2)` (total degree 7
//! f32 / 13 f64) and `cos r = 1 - r^2/2 + r^4 C(r^2)` (degree 8 / 14), minimax for relative
//! error (`tools/math/fit_coeffs.py`). sin's kernel is evaluated as `r - (r^3 (-S) + rn)`, which
//! also gives sin(-0) = -0. The quadrant picks the kernel (bit 0 of q; for cos, of q + 1) and
//! the sign (bit 1, moved onto the sign bit and added to the result's bits: a wrapping add of
//! the top bit is an xor). For cos, q + 1 comes for free from the shifter `1.5 * 2^p + 1`.
//! The remaining error is mostly the rounding of r (up to ~0.9 ulp of a result in a lower
//! binade than r); removing it would take a double-word reduction (+9 ops), which only tan
//! uses.
//!
//! **tan**: the reduced argument is a double-word (`q C2` split exactly by fma and subtracted
//! by TwoSum): near the poles `tan x = -1/tan r` with tiny r, where one ulp of error in r would
//! cost two in the result. `tan r = r + r^3 T(r^2)` (minimax, relative, total degree 13 f32 /
//! 29 f64) kept as a double-word `th + tl` (fma residual, plus `rl (1 + th^2)`); odd q:
//! `-1/(th + tl)` by a division and one fma Newton step.
//!
//! Arguments with `|x|` above `2^20` (f32) / `2^30` (f64), and +-inf, go to `fallback` ("sin",
//! "cos", "tan"). NaN propagates through the fast path.
//!
//! Measured max errors (tests/math_ulp.rs, docs/math.md): sin 1.36 / 1.41 ulp (f32 / f64), cos 1.43 /
//! 1.45, tan 0.86 / 0.92.

use super::coeffs::*;
use super::helpers::*;
use super::Emit;

/// `|x|` above this goes to the fallback.
#[inline(always)]
fn bound<E: Emit>(e: &E) -> f64 {
    pick(e, 1048576.0, 1073741824.0)
}

#[inline(always)]
fn pio2_parts<E: Emit>(e: &E) -> &'static [f64] {
    pick(e, &PIO2_F32[..], &PIO2_F64[..])
}

/// `q = round(2x/pi)` with the given shifter offset: returns `(q, t)`, `bits(t)` holding
/// `q + off` in its low bits.
#[inline(always)]
fn quadrant<E: Emit>(e: &mut E, x: E::F, off: f64) -> (E::F, E::F) {
    let sh = fmt(e).shifter + off;
    let s = e.fconst(sh);
    let k = e.fconst(std::f64::consts::FRAC_2_PI);
    let t = e.fma(x, k, s);
    let q = e.sub(t, s);
    (q, t)
}

/// `x - q pi/2` as `r - rn`: `r` after the first two parts (one rounding: the first step is
/// exact), `rn = q * (the remaining parts)` (not negated, for the caller's fma).
#[inline(always)]
fn reduce<E: Emit>(e: &mut E, q: E::F, x: E::F) -> (E::F, E::F) {
    let c = pio2_parts(e);
    let k1 = e.fconst(-c[0]);
    let r1 = e.fma(q, k1, x);
    let k2 = e.fconst(-c[1]);
    let r = e.fma(q, k2, r1);
    let (last, mid) = c[2..].split_last().expect("at least 3 parts");
    let kl = e.fconst(*last);
    let mut rn = e.mul(q, kl);
    for &ci in mid.iter().rev() {
        let k = e.fconst(ci);
        rn = e.fma(q, k, rn);
    }
    (r, rn)
}

/// `x - q pi/2` as a double-word `(rh, rl)`.
#[inline(always)]
fn reduce_dw<E: Emit>(e: &mut E, q: E::F, x: E::F) -> (E::F, E::F) {
    let c = pio2_parts(e);
    let k1 = e.fconst(-c[0]);
    let r1 = e.fma(q, k1, x); // exact
                              // q c[1] = ph + pl exactly
    let c2 = e.fconst(c[1]);
    let ph = e.mul(q, c2);
    let nph = e.neg(ph);
    let pl = e.fma(q, c2, nph);
    // r1 - ph = s + err (TwoSum)
    let s = e.sub(r1, ph);
    let bb = e.sub(s, r1);
    let sb = e.sub(s, bb);
    let ea = e.sub(r1, sb);
    let eb = e.add(ph, bb);
    let err = e.sub(ea, eb);
    let mut rl = e.sub(err, pl);
    for &ci in &c[2..] {
        let k = e.fconst(-ci);
        rl = e.fma(q, k, rl);
    }
    (s, rl)
}

/// `sin(r - rn)`, `|r| <= pi/4`, `rn` tiny: `r - (r^3 (-S(r^2)) + rn)`. Written with the
/// negated polynomial so that `r = -0` gives -0 (`-0 - (+0)`), where `r + (r^3 S + ...)` would
/// give +0.
#[inline(always)]
fn sin_kernel<E: Emit>(e: &mut E, r: E::F, rn: E::F, r2: E::F) -> E::F {
    let sc = pick(e, &SINK_F32[..], &SINK_F64[..]);
    let r3 = e.mul(r2, r);
    let p = horner_neg(e, r2, sc);
    let t = e.fma(r3, p, rn);
    e.sub(r, t)
}

/// `cos r`, `|r| <= pi/4`.
#[inline(always)]
fn cos_kernel<E: Emit>(e: &mut E, r2: E::F) -> E::F {
    let cc = pick(e, &COSK_F32[..], &COSK_F64[..]);
    let p = horner(e, r2, cc);
    let mh = e.fconst(-0.5);
    let h = e.fma(p, r2, mh);
    let one = e.fconst(1.0);
    e.fma(h, r2, one)
}

#[inline(always)]
fn sin_cos<E: Emit>(e: &mut E, x: E::F, cos: bool) -> E::F {
    // cos x = sin(x + pi/2): the same reduction, quadrant read as q + 1.
    let (q, t) = quadrant(e, x, if cos { 1.0 } else { 0.0 });
    let (r, rn) = reduce(e, q, x);
    let tb = e.to_bits(t);
    let y = sin_of_reduced(e, tb, r, rn);
    let ax = e.abs(x);
    let b = e.fconst(bound(e));
    let huge = e.lt(b, ax); // includes inf
    e.fallback(if cos { "cos" } else { "sin" }, huge, x, y)
}

/// `sin(r - rn + q pi/2)`, `|r| <= pi/4` (and a little), `rn` tiny; `q` in the low two bits
/// of `qbits` (the shifter's bits, or an integer quadrant).
#[inline(always)]
fn sin_of_reduced<E: Emit>(e: &mut E, qbits: E::I, r: E::F, rn: E::F) -> E::F {
    let r2 = e.mul(r, r);
    let s = sin_kernel(e, r, rn, r2);
    // (rn moves cos r by under 0.05 ulp: left out)
    let c = cos_kernel(e, r2);
    let w = fmt(e).width;
    // bit 0: odd quadrant -> cos kernel
    let b0 = e.shl(qbits, w - 1);
    let z = e.iconst(0);
    let odd = e.ilt(b0, z);
    let y = e.select(odd, c, s);
    // bit 1: negate
    let b1 = e.shl(qbits, w - 2);
    let sign = e.iconst(i64::MIN >> (64 - w));
    let flip = e.iand(b1, sign);
    flip_sign(e, y, flip)
}

/// `sin`, `cos` or `tan` of `r_hi + r_lo + q pi/2` (a reduction done elsewhere: the GPU's
/// Payne-Hanek reduction of huge arguments), `|r_hi + r_lo| <= pi/4`, `r_lo` below an ulp
/// of `r_hi`; `q` in the low two bits of `q`. The kernels of the fast path.
pub fn of_reduced<E: Emit>(e: &mut E, f: super::MathFn, q: E::I, r_hi: E::F, r_lo: E::F) -> E::F {
    match f {
        super::MathFn::Tan => tan_of_reduced(e, q, r_hi, r_lo),
        super::MathFn::Cos => {
            let one = e.iconst(1);
            let q1 = e.iadd(q, one);
            let rn = e.neg(r_lo);
            sin_of_reduced(e, q1, r_hi, rn)
        }
        _ => {
            let rn = e.neg(r_lo);
            sin_of_reduced(e, q, r_hi, rn)
        }
    }
}

#[inline(always)]
pub(super) fn sin<E: Emit>(e: &mut E, x: E::F) -> E::F {
    sin_cos(e, x, false)
}

#[inline(always)]
pub(super) fn cos<E: Emit>(e: &mut E, x: E::F) -> E::F {
    sin_cos(e, x, true)
}

#[inline(always)]
pub(super) fn tan<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let (q, t) = quadrant(e, x, 0.0);
    let (r, rl) = reduce_dw(e, q, x);
    let tb = e.to_bits(t);
    let y = tan_of_reduced(e, tb, r, rl);
    let ax = e.abs(x);
    let b = e.fconst(bound(e));
    let huge = e.lt(b, ax);
    e.fallback("tan", huge, x, y)
}

/// `tan(r + rl + q pi/2)` for a double-word `r + rl`, `q` in the low bits of `qbits`.
#[inline(always)]
fn tan_of_reduced<E: Emit>(e: &mut E, qbits: E::I, r: E::F, rl: E::F) -> E::F {
    let tc = pick(e, &TAN_F32[..], &TAN_F64[..]);
    let r2 = e.mul(r, r);
    let r3 = e.mul(r2, r);
    let p = horner(e, r2, tc);
    let th = e.fma(r3, p, r);
    let d = e.sub(r, th); // exact: th is within a factor 2 of r
    let tl = e.fma(r3, p, d);
    // tan(r + rl) = tan r + rl (1 + tan^2 r) + ...
    let one = e.fconst(1.0);
    let dt = e.fma(th, th, one);
    let tl = e.fma(rl, dt, tl);
    let ye = e.add(th, tl);
    let ye = e.copysign(ye, r); // tan(-0) = -0 (th + tl would give +0)
                                // Odd quadrant: -1 / (th + tl), one Newton step: y0 (1 + (1 + y0 th + y0 tl)).
    let m1 = e.fconst(-1.0);
    let y0 = e.div(m1, th);
    let e1 = e.fma(y0, th, one);
    let e2 = e.fma(y0, tl, e1);
    let yo = e.fma(y0, e2, y0);
    let w = fmt(e).width;
    let par = e.shl(qbits, w - 1);
    let z = e.iconst(0);
    let odd = e.ilt(par, z);
    e.select(odd, yo, ye)
}
