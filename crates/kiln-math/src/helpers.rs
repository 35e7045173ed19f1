//! Building blocks shared by the expansions: the bit layout of the float format, Horner
//! evaluation, round-to-integer by the shifter trick, and `2^n` built from integer bits.
//!
//! The shifter trick: for `|v| < 2^(p-2)` (p = 24 or 53 significand bits), `t = v + S` with
//! `S = 1.5 * 2^(p-1)` rounds `v` to the nearest integer `n` (ties to even) and leaves `n` in
//! the low bits of `t`'s encoding: `bits(t) = bits(S) + n`. So `n` as a float is `t - S`, and
//! `n << (p-1)` (an exponent increment) is `bits(t) << (p-1)`, because `bits(S)` shifted that
//! far leaves nothing behind. This avoids float<->int conversions, which are slow for 64-bit
//! lanes on x86 SSE.

use super::{Emit, Prec};

/// Layout facts of the float format an expansion computes in.
#[derive(Clone, Copy)]
pub(super) struct Fmt {
    /// Stored significand bits: 23 or 52.
    pub mant: u32,
    /// Total bits: 32 or 64.
    pub width: u32,
    /// The rounding shifter `1.5 * 2^mant`.
    pub shifter: f64,
}

#[inline(always)]
pub(super) fn fmt<E: Emit>(e: &E) -> Fmt {
    match e.prec() {
        Prec::F32 => Fmt {
            mant: 23,
            width: 32,
            shifter: 12582912.0,
        },
        Prec::F64 => Fmt {
            mant: 52,
            width: 64,
            shifter: 6755399441055744.0,
        },
    }
}

/// Picks the constant for the emitter's precision.
#[inline(always)]
pub(super) fn pick<E: Emit, T: Copy>(e: &E, f32_value: T, f64_value: T) -> T {
    match e.prec() {
        Prec::F32 => f32_value,
        Prec::F64 => f64_value,
    }
}

/// The bits of the float `v` (rounded to the precision) as an integer constant.
#[inline(always)]
pub(super) fn bits_of<E: Emit>(e: &E, v: f64) -> i64 {
    match e.prec() {
        Prec::F32 => (v as f32).to_bits() as i32 as i64,
        Prec::F64 => v.to_bits() as i64,
    }
}

/// `c[0] + t * (c[1] + t * (... + t * c[n-1]))`, one fma per step.
#[inline(always)]
pub(super) fn horner<E: Emit>(e: &mut E, t: E::F, c: &[f64]) -> E::F {
    let (last, rest) = c.split_last().expect("empty polynomial");
    let mut acc = e.fconst_operand(*last);
    for &k in rest.iter().rev() {
        let k = e.fconst_operand(k);
        acc = e.fma(acc, t, k);
    }
    acc
}

/// `-(c[0] + t * (c[1] + ...))`: Horner on the negated coefficients.
#[inline(always)]
pub(super) fn horner_neg<E: Emit>(e: &mut E, t: E::F, c: &[f64]) -> E::F {
    let (last, rest) = c.split_last().expect("empty polynomial");
    let mut acc = e.fconst(-*last);
    for &k in rest.iter().rev() {
        let k = e.fconst(-k);
        acc = e.fma(acc, t, k);
    }
    acc
}

/// Rounds `x * scale + offset` to the nearest integer `n` by the shifter trick. Returns
/// `(n, t)`: `n` as a float and the shifted value `t`, whose low bits hold `n` (see
/// [`pow2`], [`parity_sign`]). Valid for `|x * scale| < 2^(mant-1)`.
#[inline(always)]
pub(super) fn round_shifted<E: Emit>(e: &mut E, x: E::F, scale: f64) -> (E::F, E::F) {
    let s = e.fconst(fmt(e).shifter);
    let k = e.fconst(scale);
    let t = e.fma(x, k, s);
    let n = e.sub(t, s);
    (n, t)
}

/// `2^(n + off)` where `t` came from [`round_shifted`] with result `n`; valid while `n + off`
/// is a normal exponent. Two integer ops.
#[inline(always)]
pub(super) fn pow2<E: Emit>(e: &mut E, t: E::F, off: i32) -> E::F {
    let f = fmt(e);
    let tb = e.to_bits(t);
    let nb = e.shl(tb, f.mant);
    let one = e.iconst(bits_of(e, (off as f64).exp2()));
    let sb = e.iadd(nb, one);
    e.from_bits(sb)
}

/// `(2^h, 2^(n-h))` with `h = floor(n/2)`, for `t` from [`round_shifted`]: their product is
/// `2^n` for `|n| < 2 * (bias - 1)`, which covers results that overflow or are subnormal, where
/// a single `2^n` is not representable. Multiply by the first, then the second (the second
/// product is the only rounding, so subnormal results are rounded once).
#[inline(always)]
pub(super) fn pow2_split<E: Emit>(e: &mut E, t: E::F) -> (E::F, E::F) {
    let f = fmt(e);
    let tb = e.to_bits(t);
    let nb = e.shl(tb, f.mant); // n << mant
    let hb = e.shl(tb, f.mant - 1); // n << (mant - 1)
    let mask = e.iconst(-(1i64 << f.mant));
    let hb = e.iand(hb, mask); // floor(n / 2) << mant
    let one = e.iconst(bits_of(e, 1.0));
    let s1 = e.iadd(hb, one);
    let rest = e.isub(nb, hb);
    let s2 = e.iadd(rest, one);
    (e.from_bits(s1), e.from_bits(s2))
}

/// `x` with its sign flipped where the sign bit of `flip` is set (a quadrant's bit moved there).
#[inline(always)]
pub(super) fn flip_sign<E: Emit>(e: &mut E, x: E::F, flip: E::I) -> E::F {
    let xb = e.to_bits(x);
    let yb = e.iadd(xb, flip);
    e.from_bits(yb)
}

/// A small integer (`|i| < 2^22`) to float: `to_float` for f32 lanes; for f64 lanes, the
/// shifter trick in reverse (64-bit int->float conversion is slow on x86 SSE).
#[inline(always)]
pub(super) fn small_int_to_float<E: Emit>(e: &mut E, i: E::I) -> E::F {
    match e.prec() {
        Prec::F32 => e.to_float(i),
        Prec::F64 => {
            let f = fmt(e);
            let sb = e.iconst(bits_of(e, f.shifter));
            let tb = e.iadd(i, sb);
            let t = e.from_bits(tb);
            let s = e.fconst(f.shifter);
            e.sub(t, s)
        }
    }
}

/// `(hi, lo)` with `hi + lo == a + b` exactly and `hi` the rounded sum (Knuth's TwoSum: no
/// condition on the magnitudes).
pub(super) fn two_sum<E: Emit>(e: &mut E, a: E::F, b: E::F) -> (E::F, E::F) {
    let s = e.add(a, b);
    let bb = e.sub(s, a);
    let ab = e.sub(s, bb);
    let da = e.sub(a, ab);
    let db = e.sub(b, bb);
    let err = e.add(da, db);
    (s, err)
}

/// `(hi, lo)` with `hi + lo == a * b` exactly (the fma gives the product's rounding error).
pub(super) fn two_prod<E: Emit>(e: &mut E, a: E::F, b: E::F) -> (E::F, E::F) {
    let p = e.mul(a, b);
    let np = e.neg(p);
    let err = e.fma(a, b, np);
    (p, err)
}
