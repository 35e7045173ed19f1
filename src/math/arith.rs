//! numpy's arithmetic that no target has as one instruction, written once over the emitter:
//! floor division and modulo of floats and of integers, and integer power. The interpreter
//! (`perform`) and the JIT's helpers evaluate the divisions with [`Eval32`] / [`Eval64`], the
//! object files' helpers emit them as Cranelift code and the GPU backend as LLVM IR, so every
//! backend computes the same operation sequence and the same bits. Integer power on Rust
//! numbers is a loop over the exponent's significant bits (the straight line always runs all
//! of them), tested equal to the expansion.
//!
//! An emitter adds four primitives ([`ArithEmit`]): exact `fmod` (libm on the CPU, long
//! division on the GPU), truncating integer division and remainder (never called with a zero
//! divisor or `MIN / -1`: the expansions select those away), and wrapping multiplication.
//! Integers use the emitter's integer lanes: `i32` values with an `f32` emitter, `i64` with
//! an `f64` one.

use super::{Emit, Eval32, Eval64, Prec};

/// The emitter precision whose lanes hold values of `d`: `i32` (and `f32`) in `F32` lanes,
/// `i64` (and `f64`) in `F64` lanes.
pub fn lanes_for(d: crate::ir::DType) -> Prec {
    match d {
        crate::ir::DType::F32 | crate::ir::DType::I32 => Prec::F32,
        _ => Prec::F64,
    }
}

/// The primitives the arithmetic expansions need beyond [`Emit`].
pub trait ArithEmit: Emit {
    /// C's `fmod(a, b)`, exact: the remainder with `a`'s sign; NaN when `b` is zero or `a`
    /// infinite or either is NaN; `a` when `|a| < |b|`.
    fn fmod(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// Truncating division. The expansions never divide by zero or `MIN` by `-1`.
    fn idiv(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// The remainder of truncating division, under the same promise.
    fn irem(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Wrapping multiplication.
    fn imul(&mut self, a: Self::I, b: Self::I) -> Self::I;
}

fn mxor<E: Emit>(e: &mut E, a: E::M, b: E::M) -> E::M {
    let (na, nb) = (e.mnot(a), e.mnot(b));
    let x = e.mand(a, nb);
    let y = e.mand(na, b);
    e.mor(x, y)
}

/// numpy's `(floor_divide(a, b), mod(a, b))` of floats: `m = fmod(a, b)`, `div = (a - m) / b`;
/// a nonzero `m` of the other sign than `b` becomes `m + b` (and `div - 1`), a zero one takes
/// `b`'s sign; the quotient is `floor(div)`, plus one when `div - floor(div) > 0.5`, and a
/// zero `div` gives zero with the sign of `a / b`. A zero `b` gives `(a / b, NaN)`.
pub fn float_divmod<E: ArithEmit>(e: &mut E, a: E::F, b: E::F) -> (E::F, E::F) {
    let zero = e.fconst(0.0);
    let one = e.fconst(1.0);
    let half = e.fconst(0.5);
    let fm = e.fmod(a, b);
    let quot = e.div(a, b);
    let diff = e.sub(a, fm);
    let div = e.div(diff, b);
    let m_zero = e.eq(fm, zero);
    let m_nz = e.mnot(m_zero);
    let b_neg = e.lt(b, zero);
    let m_neg = e.lt(fm, zero);
    let differ = mxor(e, b_neg, m_neg);
    let adjust = e.mand(m_nz, differ);
    let m_adj = e.add(fm, b);
    let m = e.select(adjust, m_adj, fm);
    let zero_b = e.copysign(zero, b);
    let m = e.select(m_nz, m, zero_b);
    let div_adj = e.sub(div, one);
    let div = e.select(adjust, div_adj, div);
    let fl = e.floor(div);
    let frac = e.sub(div, fl);
    let up = e.lt(half, frac);
    let fl1 = e.add(fl, one);
    let q = e.select(up, fl1, fl);
    let div_zero = e.eq(div, zero);
    let zero_q = e.copysign(zero, quot);
    let q = e.select(div_zero, zero_q, q);
    let b_zero = e.eq(b, zero);
    let q = e.select(b_zero, quot, q);
    let m = e.select(b_zero, fm, m);
    (q, m)
}

/// numpy's `(floor_divide(a, b), mod(a, b))` of integers: rounded toward minus infinity, the
/// remainder with the divisor's sign; a zero divisor gives `(0, 0)` and `MIN / -1` wraps.
pub fn int_divmod<E: ArithEmit>(e: &mut E, a: E::I, b: E::I) -> (E::I, E::I) {
    let zero = e.iconst(0);
    let one = e.iconst(1);
    let minus_one = e.iconst(-1);
    let b_zero = e.ieq(b, zero);
    let b_m1 = e.ieq(b, minus_one);
    let special = e.mor(b_zero, b_m1);
    let safe = e.iselect(special, one, b);
    let q = e.idiv(a, safe);
    let r = e.irem(a, safe);
    // By -1: the quotient is -a (wrapping), the remainder 0.
    let neg_a = e.isub(zero, a);
    let q = e.iselect(b_m1, neg_a, q);
    let r = e.iselect(b_m1, zero, r);
    // Toward minus infinity: a nonzero remainder of the other sign than the divisor.
    let r_zero = e.ieq(r, zero);
    let r_nz = e.mnot(r_zero);
    let r_neg = e.ilt(r, zero);
    let b_neg = e.ilt(b, zero);
    let differ = mxor(e, r_neg, b_neg);
    let adjust = e.mand(r_nz, differ);
    let q1 = e.isub(q, one);
    let r1 = e.iadd(r, b);
    let q = e.iselect(adjust, q1, q);
    let r = e.iselect(adjust, r1, r);
    // By 0: both 0.
    let q = e.iselect(b_zero, zero, q);
    let r = e.iselect(b_zero, zero, r);
    (q, r)
}

/// `a` to the power `n`, wrapping: by squaring over every bit of a non-negative `n` (straight
/// line, no loop: every emitter can say it); a negative `n` gives 1 for `a == 1`, `+-1` for
/// `a == -1` by parity, else 0 (`1 / a^-n` truncated).
pub fn int_pow<E: ArithEmit>(e: &mut E, a: E::I, n: E::I) -> E::I {
    let bits = match e.prec() {
        Prec::F32 => 32,
        Prec::F64 => 64,
    };
    let zero = e.iconst(0);
    let one = e.iconst(1);
    let minus_one = e.iconst(-1);
    let negative = e.ilt(n, zero);
    let mut ex = e.iselect(negative, zero, n);
    let mut acc = one;
    let mut base = a;
    // A non-negative exponent has bits - 1 bits that can be set.
    for k in 0..bits - 1 {
        let bit = e.iand(ex, one);
        let clear = e.ieq(bit, zero);
        let prod = e.imul(acc, base);
        acc = e.iselect(clear, acc, prod);
        if k + 2 < bits {
            base = e.imul(base, base);
            ex = e.ushr(ex, 1);
        }
    }
    let a_one = e.ieq(a, one);
    let a_m1 = e.ieq(a, minus_one);
    let odd_bit = e.iand(n, one);
    let even = e.ieq(odd_bit, zero);
    let sign = e.iselect(even, one, minus_one);
    let tiny = e.iselect(a_m1, sign, zero);
    let tiny = e.iselect(a_one, one, tiny);
    e.iselect(negative, tiny, acc)
}

macro_rules! eval_arith {
    ($ty:ident, $i:ty) => {
        impl ArithEmit for $ty {
            fn fmod(&mut self, a: Self::F, b: Self::F) -> Self::F {
                // Rust's `%` on floats is C's fmod.
                a % b
            }
            fn idiv(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_div(b)
            }
            fn irem(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_rem(b)
            }
            fn imul(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_mul(b)
            }
        }
    };
}
eval_arith!(Eval32, i32);
eval_arith!(Eval64, i64);

/// The expansions on Rust numbers, for `perform` and the JIT's helpers.
pub trait Arith: Copy {
    /// `(floor_divide(self, b), mod(self, b))`.
    fn divmod(self, b: Self) -> (Self, Self);
}

/// Integer power, for `perform` and the JIT's helpers.
pub trait IntPow: Copy {
    /// `self` to the power `n`, wrapping; a negative `n` gives `1 / self^-n` truncated (1 or
    /// -1 for `self` of 1 or -1, else 0).
    fn ipow(self, n: Self) -> Self;
}

impl Arith for f32 {
    fn divmod(self, b: f32) -> (f32, f32) {
        float_divmod(&mut Eval32, self, b)
    }
}

impl Arith for f64 {
    fn divmod(self, b: f64) -> (f64, f64) {
        float_divmod(&mut Eval64, self, b)
    }
}

impl Arith for i32 {
    fn divmod(self, b: i32) -> (i32, i32) {
        int_divmod(&mut Eval32, self, b)
    }
}

impl Arith for i64 {
    fn divmod(self, b: i64) -> (i64, i64) {
        int_divmod(&mut Eval64, self, b)
    }
}

// On Rust numbers the power loops only over the exponent's significant bits: the straight
// line of `int_pow` runs 63 squarings where `x ** 2` needs two, in the interpreter and the
// JIT's helper alike. A test runs both on the same inputs, so they cannot drift.
macro_rules! int_pow_loop {
    ($t:ty) => {
        impl IntPow for $t {
            fn ipow(self, n: $t) -> $t {
                if n < 0 {
                    return match self {
                        1 => 1,
                        -1 if n % 2 == 0 => 1,
                        -1 => -1,
                        _ => 0,
                    };
                }
                let (mut base, mut e, mut acc): ($t, $t, $t) = (self, n, 1);
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
        }
    };
}
int_pow_loop!(i32);
int_pow_loop!(i64);

#[cfg(test)]
mod tests {
    use super::*;

    /// numpy's answers, written out.
    #[test]
    fn float_floor_division_and_modulo() {
        let cases: &[(f64, f64, f64, f64)] = &[
            (7.0, 2.0, 3.0, 1.0),
            (-7.0, 2.0, -4.0, 1.0),
            (7.0, -2.0, -4.0, -1.0),
            (-7.0, -2.0, 3.0, -1.0),
            (0.5, 0.25, 2.0, 0.0),
            (1.0, 0.1, 9.0, 0.09999999999999995),
        ];
        for &(a, b, q, m) in cases {
            assert_eq!(a.divmod(b), (q, m), "{a} divmod {b}");
        }
        let (q, m) = 1.0f64.divmod(0.0);
        assert!(q == f64::INFINITY && m.is_nan());
        let (q, m) = (-0.0f64).divmod(3.0);
        assert!(q == 0.0 && q.is_sign_negative() && m == 0.0 && m.is_sign_positive());
        let (_, m) = 6.0f32.divmod(-3.0);
        assert!(m == 0.0 && m.is_sign_negative());
    }

    #[test]
    fn integer_floor_division_modulo_and_power() {
        for (a, b) in [
            (7i64, 2i64),
            (-7, 2),
            (7, -2),
            (-7, -2),
            (0, 5),
            (5, 0),
            (i64::MIN, -1),
        ] {
            let (q, m) = a.divmod(b);
            if b == 0 {
                assert_eq!((q, m), (0, 0));
            } else {
                assert_eq!(
                    q,
                    a.wrapping_div(b) - ((a.wrapping_rem(b) != 0 && (a < 0) != (b < 0)) as i64)
                );
                assert_eq!(m, a.wrapping_sub(q.wrapping_mul(b)));
            }
        }
        assert_eq!(i32::MIN.divmod(-1), (i32::MIN, 0));
        assert_eq!(3i32.ipow(4), 81);
        assert_eq!((-2i64).ipow(63), i64::MIN);
        assert_eq!(3i64.ipow(40), 3i64.wrapping_pow(40));
        assert_eq!(7i32.ipow(i32::MAX), 7i32.wrapping_pow(i32::MAX as u32));
        assert_eq!(2i32.ipow(0), 1);
        assert_eq!(2i32.ipow(-1), 0);
        assert_eq!(1i32.ipow(-5), 1);
        assert_eq!((-1i64).ipow(-3), -1);
        assert_eq!((-1i64).ipow(-4), 1);
    }

    /// The loop on Rust numbers and the straight-line expansion the generators emit agree.
    #[test]
    fn the_power_loop_is_the_expansion() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for k in 0..20_000 {
            let r = next();
            let a = match k % 3 {
                0 => (r % 7) as i64 - 3,
                1 => (r >> 40) as i64 - (1 << 23),
                _ => r as i64,
            };
            let n = match k % 4 {
                0 => (next() % 70) as i64 - 5,
                _ => next() as i64 >> (next() % 64),
            };
            assert_eq!(a.ipow(n), int_pow(&mut Eval64, a, n), "{a} ** {n}");
            let (a32, n32) = (a as i32, n as i32);
            assert_eq!(
                a32.ipow(n32),
                int_pow(&mut Eval32, a32, n32),
                "{a32} ** {n32}"
            );
        }
    }
}
