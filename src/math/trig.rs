//! sin, cos, tan.
//!
//! **sin(x)**: `q = round(x / pi)` by the shifter trick, `r = x - q pi` with a three-part
//! (Cody-Waite) pi and fma (the first step is exact), `|r| <= pi/2`;
//! `sin(x) = (-1)^q sin(r)`, the sign flip done by adding `q`'s parity bit to the sign bit
//! (wrapping integer add = xor of the top bit). `sin(r) = r + r^3 S(r^2)` with `S` a minimax
//! polynomial (relative error) of degree 3 (f32, total degree 9) / 8 (f64, total degree 19).
//! The polynomial runs on `|r|` and the sign of r is copied back, which keeps sin(-0) = -0.
//!
//! **cos(x)**: `cos(x) = (-1)^(k+1) sin(r)`, `r = x - (k + 1/2) pi`, `k = round(x/pi - 1/2)`:
//! the zeros of cos land on `r = 0`, where the sin polynomial is accurate relatively. The
//! shifter is `1.5 * 2^p + 1` so that the parity bit read from it is that of `k + 1`.
//!
//! **tan(x)**: `q = round(2x / pi)`, `r = x - q pi/2`, `|r| <= pi/4`; `tan(r) = r + r^3 T(r^2)`
//! (minimax, relative, degree 7 f32 / 16 f64 in `r^2`), kept as a double-word `th + tl`
//! (the fma residual). Odd `q`: `tan(x) = -1/tan(r)`, a division refined by one fma Newton step
//! that includes `tl`.
//!
//! Arguments with `|x|` above `2^20` (f32) / `2^30` (f64) (and inf) go to `fallback`
//! ("sin", "cos", "tan"): there the three-part pi no longer gives the reduced argument to full
//! relative accuracy. NaN propagates through the fast path.
//!
//! Accuracy (max ulp measured by `tests/ulp.rs`): see `ACCURACY.md`.

use super::coeffs::*;
use super::helpers::*;
use super::Emit;

/// `|x|` above this goes to the fallback.
fn bound<E: Emit>(e: &E) -> f64 {
    pick(e, 1048576.0, 1073741824.0)
}

/// `x - q (c0 + c1 + c2)`, the first step exact.
fn reduce3<E: Emit>(e: &mut E, q: E::F, x: E::F, c: [f64; 3], scale: f64) -> E::F {
    let mut r = x;
    for ci in c {
        let k = e.fconst(-ci * scale);
        r = e.fma(q, k, r);
    }
    r
}

/// `sin(r)` for `|r| <= pi/2`, -0 kept.
fn sin_poly<E: Emit>(e: &mut E, r: E::F) -> E::F {
    let s = pick(e, &SIN_F32[..], &SIN_F64[..]);
    let a = e.abs(r);
    let a2 = e.mul(a, a);
    let a3 = e.mul(a2, a);
    let p = horner(e, a2, s);
    let y = e.fma(a3, p, a);
    e.copysign(y, r)
}

fn sin_cos<E: Emit>(e: &mut E, x: E::F, cos: bool) -> E::F {
    let pi = pick(e, PI_F32, PI_F64);
    let (r, t) = if cos {
        // k = round(x/pi - 1/2) with the odd shifter; q = 2k + 1; r = x - q pi/2.
        let sh = fmt(e).shifter + 1.0;
        let ip = e.fconst(std::f64::consts::FRAC_1_PI);
        let mh = e.fconst(-0.5);
        let v = e.fma(x, ip, mh);
        let s = e.fconst(sh);
        let t = e.add(v, s);
        let k = e.sub(t, s);
        let two = e.fconst(2.0);
        let one = e.fconst(1.0);
        let q = e.fma(k, two, one);
        (reduce3(e, q, x, pi, 0.5), t)
    } else {
        let (q, t) = round_shifted(e, x, std::f64::consts::FRAC_1_PI);
        (reduce3(e, q, x, pi, 1.0), t)
    };
    let flip = parity_sign(e, t);
    let s = sin_poly(e, r);
    let y = flip_sign(e, s, flip);
    let ax = e.abs(x);
    let b = e.fconst(bound(e));
    let huge = e.lt(b, ax); // includes inf
    e.fallback(if cos { "cos" } else { "sin" }, huge, x, y)
}

pub(super) fn sin<E: Emit>(e: &mut E, x: E::F) -> E::F {
    sin_cos(e, x, false)
}

pub(super) fn cos<E: Emit>(e: &mut E, x: E::F) -> E::F {
    sin_cos(e, x, true)
}

pub(super) fn tan<E: Emit>(e: &mut E, x: E::F) -> E::F {
    let pi = pick(e, PI_F32, PI_F64);
    let tc = pick(e, &TAN_F32[..], &TAN_F64[..]);
    let (q, t) = round_shifted(e, x, std::f64::consts::FRAC_2_PI);
    let r = reduce3(e, q, x, pi, 0.5);
    let r2 = e.mul(r, r);
    let r3 = e.mul(r2, r);
    let p = horner(e, r2, tc);
    let th = e.fma(r3, p, r);
    let d = e.sub(r, th); // exact: th is within a factor 2 of r
    let tl = e.fma(r3, p, d);
    // Odd quadrant: -1 / (th + tl), one Newton step: y0 (1 + (1 + y0 th + y0 tl)).
    let m1 = e.fconst(-1.0);
    let y0 = e.div(m1, th);
    let one = e.fconst(1.0);
    let e1 = e.fma(y0, th, one);
    let e2 = e.fma(y0, tl, e1);
    let y1 = e.fma(y0, e2, y0);
    let par = parity_sign(e, t);
    let z = e.iconst(0);
    let odd = e.ilt(par, z);
    let y = e.select(odd, y1, th);
    let ax = e.abs(x);
    let b = e.fconst(bound(e));
    let huge = e.lt(b, ax);
    e.fallback("tan", huge, x, y)
}
