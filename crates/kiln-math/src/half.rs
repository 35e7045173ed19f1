//! Conversions between `f32` and the storage-only halves (`f16`, `bf16`), written once over
//! the emitter (f32 lanes) for every code generator. A half is held as its 16 bits in the low
//! half of an i32 lane. Results agree bit for bit with the host's `half` crate (`ir::f16_of`
//! and friends), NaNs included: widening is exact and quiets a NaN; narrowing rounds to
//! nearest even, overflows to infinity, and keeps a quiet NaN's top payload bits.
//!
//! Written with integer ops because neither Cranelift nor x86 without F16C has a conversion
//! (and bf16 has none anywhere before AVX-512). The f16 algorithms are the branch-free ones of
//! Fabian Giesen's `half_to_float_fast5` and `float_to_half_fast3_rtne` (public domain).

use super::Emit;

/// `a < c` for a non-negative `a` and a constant `c` (signed compares suffice).
fn below<E: Emit>(e: &mut E, a: E::I, c: i64) -> E::M {
    let c = e.iconst(c);
    e.ilt(a, c)
}

fn above<E: Emit>(e: &mut E, a: E::I, c: i64) -> E::M {
    let c = e.iconst(c);
    e.ilt(c, a)
}

fn and<E: Emit>(e: &mut E, a: E::I, c: i64) -> E::I {
    let c = e.iconst(c);
    e.iand(a, c)
}

fn or<E: Emit>(e: &mut E, a: E::I, c: i64) -> E::I {
    let c = e.iconst(c);
    e.ior(a, c)
}

fn add<E: Emit>(e: &mut E, a: E::I, c: i64) -> E::I {
    let c = e.iconst(c);
    e.iadd(a, c)
}

/// The f32 value of the f16 bits `h` (0..=0xFFFF): exact.
pub fn f16_to_f32<E: Emit>(e: &mut E, h: E::I) -> E::F {
    // The exponent and fraction moved into f32's places are the value times 2^-112 (a
    // subnormal f16 lands on an f32 subnormal of the same digits): one exact multiply by
    // 2^112 rebiases normals and normalizes subnormals alike.
    let mag = and(e, h, 0x7FFF);
    let o = e.shl(mag, 13);
    let f = e.from_bits(o);
    let scale = e.fconst(2f64.powi(112));
    let f = e.mul(f, scale);
    let v = e.to_bits(f);
    // Infinity and NaN (exponent all ones): the f32 exponent all ones too, a NaN quieted.
    let inf = or(e, v, 0x7F80_0000);
    let quiet = or(e, inf, 0x0040_0000);
    let is_nan = above(e, mag, 0x7C00);
    let special = e.iselect(is_nan, quiet, inf);
    let is_special = above(e, mag, 0x7BFF);
    let r = e.iselect(is_special, special, v);
    let sign = and(e, h, 0x8000);
    let sign = e.shl(sign, 16);
    let r = e.ior(r, sign);
    e.from_bits(r)
}

/// The f16 bits nearest the f32 `x`, ties to even.
pub fn f32_to_f16<E: Emit>(e: &mut E, x: E::F) -> E::I {
    let bits = e.to_bits(x);
    let sign = e.ushr(bits, 16);
    let sign = and(e, sign, 0x8000);
    let a = and(e, bits, 0x7FFF_FFFF);
    // 65536 or more (or not a number): infinity, or a quiet NaN keeping its top bits.
    let top = e.ushr(a, 13);
    let top = and(e, top, 0x03FF);
    let nan = or(e, top, 0x7E00);
    let inf = e.iconst(0x7C00);
    let is_nan = above(e, a, 0x7F80_0000);
    let big = e.iselect(is_nan, nan, inf);
    // Below 2^-14 (an f16 subnormal or zero): adding 0.5 makes the FPU round the value to a
    // multiple of 2^-24, the subnormals' step, to nearest even; the low bits are the result.
    let af = e.from_bits(a);
    let half = e.fconst(0.5);
    let t = e.add(af, half);
    let t = e.to_bits(t);
    let sub = add(e, t, -0x3F00_0000);
    // Normal: rebias the exponent and round the 13 dropped bits to nearest even (a carry into
    // the exponent is right, up to infinity).
    let odd = e.ushr(a, 13);
    let odd = and(e, odd, 1);
    let n = add(e, a, 0xC800_0FFFu32 as i32 as i64);
    let n = e.iadd(n, odd);
    let normal = e.ushr(n, 13);
    let small_enough = below(e, a, 0x4780_0000);
    let is_sub = below(e, a, 0x3880_0000);
    let small = e.iselect(is_sub, sub, normal);
    let r = e.iselect(small_enough, small, big);
    e.ior(r, sign)
}

/// The f32 value of the bf16 bits `h` (0..=0xFFFF): exact, a NaN quieted.
pub fn bf16_to_f32<E: Emit>(e: &mut E, h: E::I) -> E::F {
    let mag = and(e, h, 0x7FFF);
    let is_nan = above(e, mag, 0x7F80);
    let quiet = or(e, h, 0x0040);
    let h = e.iselect(is_nan, quiet, h);
    let r = e.shl(h, 16);
    e.from_bits(r)
}

/// The bf16 bits nearest the f32 `x`, ties to even.
pub fn f32_to_bf16<E: Emit>(e: &mut E, x: E::F) -> E::I {
    let bits = e.to_bits(x);
    let hi = e.ushr(bits, 16);
    let odd = and(e, hi, 1);
    let r = add(e, bits, 0x7FFF);
    let r = e.iadd(r, odd);
    let r = e.ushr(r, 16);
    let a = and(e, bits, 0x7FFF_FFFF);
    let is_nan = above(e, a, 0x7F80_0000);
    let nan = or(e, hi, 0x0040);
    e.iselect(is_nan, nan, r)
}

/// The i64 `x` (an f64 emitter's integer) as an f64 rounded to odd: toward zero, the last bit
/// set where inexact. A cast of an i64 to a half goes through this and then through f32 the
/// same way (`ir::f32_round_to_odd`), so it rounds once, where converting to the nearest f64
/// first rounds twice (2^62 + 2^54 + 1 became the tie 2^62 + 2^54, then 2^62 in bf16).
///
/// `x` is split into `hi * 2^32 + lo` (both exact in f64); their sum rounds once and
/// `two_sum` gives its error exactly, whose sign says which way the sum rounded.
pub fn i64_to_f64_odd<E: Emit>(e: &mut E, x: E::I) -> E::F {
    let hi = e.sshr(x, 32);
    let lo = and(e, x, 0xFFFF_FFFF);
    let (hi, lo) = (e.to_float(hi), e.to_float(lo));
    let scale = e.fconst(4294967296.0);
    let hi = e.mul(hi, scale);
    let (sum, err) = super::helpers::two_sum(e, hi, lo);
    let zero = e.fconst(0.0);
    let exact = e.eq(err, zero);
    // Rounded away from zero: the error's sign is the opposite of the sum's.
    let (sum_neg, err_neg) = (e.lt(sum, zero), e.lt(err, zero));
    let (sum_pos, err_pos) = (e.lt(zero, sum), e.lt(zero, err));
    let up_pos = e.mand(sum_pos, err_neg);
    let up_neg = e.mand(sum_neg, err_pos);
    let up = e.mor(up_pos, up_neg);
    let bits = e.to_bits(sum);
    let one = e.iconst(1);
    let down = e.isub(bits, one);
    let toward_zero = e.iselect(up, down, bits);
    let odd = e.ior(toward_zero, one);
    let bits = e.iselect(exact, bits, odd);
    e.from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Eval32;
    use half::{bf16, f16};

    #[test]
    fn every_half_widens_as_the_host_does() {
        for b in 0..=u16::MAX {
            let want = f16::from_bits(b).to_f32().to_bits();
            assert_eq!(
                f16_to_f32(&mut Eval32, b as i32).to_bits(),
                want,
                "f16 {b:#06x}"
            );
            let want = bf16::from_bits(b).to_f32().to_bits();
            assert_eq!(
                bf16_to_f32(&mut Eval32, b as i32).to_bits(),
                want,
                "bf16 {b:#06x}"
            );
        }
    }

    #[test]
    fn f32s_narrow_as_the_host_does() {
        // Every exponent and sign, with the bit patterns around each rounding boundary.
        for hi in 0..=0xFFFFu32 {
            for lo in [
                0, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF,
            ] {
                let x = f32::from_bits(hi << 16 | lo);
                let got = f32_to_f16(&mut Eval32, x) as u16;
                assert_eq!(
                    got,
                    f16::from_f32(x).to_bits(),
                    "f16 of {x:e} ({:#x})",
                    x.to_bits()
                );
                let got = f32_to_bf16(&mut Eval32, x) as u16;
                assert_eq!(got, bf16::from_f32(x).to_bits(), "bf16 of {x:e}");
            }
        }
    }

    #[test]
    fn i64s_round_to_odd_into_f64_exactly() {
        use crate::Eval64;
        // Toward zero, the last bit set where inexact, from the exact value (in i128).
        let reference = |i: i64| {
            let d = i as f64;
            let (exact, near) = (i as i128, d as i128);
            match near == exact {
                true => d,
                false if near.abs() > exact.abs() => f64::from_bits((d.to_bits() - 1) | 1),
                false => f64::from_bits(d.to_bits() | 1),
            }
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut cases = vec![
            0,
            1,
            -1,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
            1 << 53,
            (1 << 53) + 1,
        ];
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every magnitude: shift the bits down by a random amount.
            cases.push((x as i64) >> (x % 64));
        }
        for i in cases {
            let got = i64_to_f64_odd(&mut Eval64, i);
            assert_eq!(got.to_bits(), reference(i).to_bits(), "{i}");
        }
    }
}
