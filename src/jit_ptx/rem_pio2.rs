//! `x mod pi/2` for huge f64 arguments on the GPU (Payne and Hanek's reduction): where the
//! CPU calls libm for `sin`/`cos`/`tan` of `|x| > 2^30` (the shared expansions' Cody-Waite
//! reduction runs out of bits of pi there), the GPU has no libm. `x = M 2^E` with an integer
//! `M` of 53 bits; `x * 2/pi` modulo 4 needs only the bits of 2/pi from about position `E`
//! on, so 192 of them are read from a table at that position and multiplied by `M` in 64-bit
//! integer pieces: the product's top two bits are the quadrant, the next 190 the fraction,
//! of which the leading 106 (after its leading zeros: an f64 comes no closer to a multiple of
//! pi/2 than ~2^-61 of it) become a double-word `r`, times pi/2. Integer code only: NVPTX
//! has 64-bit multiplies and funnel shifts, and no 128-bit conversion to floats.

use super::gen::{bx, Gen, GLOBAL};
use crate::error::Result;
use inkwell::values::{FloatValue, IntValue, PointerValue};
use inkwell::IntPredicate;

/// The bits of 2/pi after the binary point, 64 per word (computed with integer arithmetic
/// from Machin's formula for pi; the first words are the well-known `A2F9836E4E441529...`).
/// 1344 bits: enough for a window of 192 bits starting at the bit of the largest exponent.
const TWO_OVER_PI: [u64; 21] = [
    0xA2F9836E4E441529,
    0xFC2757D1F534DDC0,
    0xDB6295993C439041,
    0xFE5163ABDEBBC561,
    0xB7246E3A424DD2E0,
    0x06492EEA09D1921C,
    0xFE1DEB1CB129A73E,
    0xE88235F52EBB4484,
    0xE99C7026B45F7E41,
    0x3991D639835339F4,
    0x9C845F8BBDF9283B,
    0x1FF897FFDE05980F,
    0xEF2F118B5A0A6D1F,
    0x6D367ECF27CB09B7,
    0x4F463F669E5FEA2D,
    0x7527BAC7EBE5F17B,
    0x3D0739F78A5292EA,
    0x6BFB5FB11F8D5D08,
    0x56033046FC7B6BAB,
    0xF0CFBC209AF4361D,
    0xA9E391615EE61B08,
];

/// pi/2 in two words.
const PIO2_HI: f64 = f64::from_bits(0x3FF9_21FB_5444_2D18);
const PIO2_LO: f64 = f64::from_bits(0x3C91_A626_3314_5C07);

/// The table in the module (once), after a word of zeros (the bits before the point, so that
/// a window may start up to 64 bits early).
fn table<'ctx>(g: &Gen<'ctx>) -> PointerValue<'ctx> {
    const NAME: &str = "kiln_two_over_pi";
    if let Some(t) = g.module.get_global(NAME) {
        return t.as_pointer_value();
    }
    let words: Vec<IntValue> = std::iter::once(0)
        .chain(TWO_OVER_PI)
        .map(|w| g.i64().const_int(w, false))
        .collect();
    let ty = g.i64().array_type(words.len() as u32);
    let t = g.module.add_global(ty, Some(g.space(GLOBAL)), NAME);
    t.set_initializer(&g.i64().const_array(&words));
    t.set_constant(true);
    t.set_linkage(inkwell::module::Linkage::Internal);
    t.as_pointer_value()
}

/// Integer operations on `i64` values, each a builder call.
struct Int<'g, 'ctx> {
    g: &'g Gen<'ctx>,
}

impl<'ctx> Int<'_, 'ctx> {
    fn c(&self, v: u64) -> IntValue<'ctx> {
        self.g.i64().const_int(v, false)
    }
    fn add(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_int_add(a, b, ""))
    }
    fn sub(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_int_sub(a, b, ""))
    }
    fn mul(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_int_mul(a, b, ""))
    }
    fn and(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_and(a, b, ""))
    }
    fn or(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_or(a, b, ""))
    }
    fn not(&self, a: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_not(a, ""))
    }
    fn shl(&self, a: IntValue<'ctx>, n: u64) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_left_shift(a, self.c(n), ""))
    }
    fn shr(&self, a: IntValue<'ctx>, n: u64) -> Result<IntValue<'ctx>> {
        bx(self.g.b.build_right_shift(a, self.c(n), false, ""))
    }
    fn eq0(&self, a: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
        bx(self
            .g
            .b
            .build_int_compare(IntPredicate::EQ, a, self.c(0), ""))
    }
    fn select(
        &self,
        m: IntValue<'ctx>,
        a: IntValue<'ctx>,
        b: IntValue<'ctx>,
    ) -> Result<IntValue<'ctx>> {
        Ok(bx(self.g.b.build_select(m, a, b, ""))?.into_int_value())
    }
    /// `(hi << n) | (lo >> (64 - n))`, `n` taken modulo 64 (`hi` where it is 0).
    fn funnel(
        &self,
        hi: IntValue<'ctx>,
        lo: IntValue<'ctx>,
        n: IntValue<'ctx>,
    ) -> Result<IntValue<'ctx>> {
        let i64t = self.g.i64().into();
        Ok(self
            .g
            .call("llvm.fshl.i64", i64t, &[hi.into(), lo.into(), n.into()])?
            .into_int_value())
    }
    /// The full product of two `u64`s as `(low, high)` words, from 32-bit halves.
    fn mul_wide(
        &self,
        a: IntValue<'ctx>,
        b: IntValue<'ctx>,
    ) -> Result<(IntValue<'ctx>, IntValue<'ctx>)> {
        let m32 = self.c(0xFFFF_FFFF);
        let (a0, a1) = (self.and(a, m32)?, self.shr(a, 32)?);
        let (b0, b1) = (self.and(b, m32)?, self.shr(b, 32)?);
        let p00 = self.mul(a0, b0)?;
        let p01 = self.mul(a0, b1)?;
        let p10 = self.mul(a1, b0)?;
        let p11 = self.mul(a1, b1)?;
        let mid = self.add(self.shr(p00, 32)?, self.and(p01, m32)?)?;
        let mid = self.add(mid, self.and(p10, m32)?)?;
        let lo = self.or(self.shl(mid, 32)?, self.and(p00, m32)?)?;
        let hi = self.add(p11, self.shr(p01, 32)?)?;
        let hi = self.add(hi, self.shr(p10, 32)?)?;
        let hi = self.add(hi, self.shr(mid, 32)?)?;
        Ok((lo, hi))
    }
}

/// `x = (q + r / (pi/2)) pi/2` for a finite f64 `x` with `|x| >= 2^30`: the quadrant `q`
/// (its low two bits; an `i64`) and `r` as two words (`|r| <= pi/4`, the low word below an
/// ulp of the high). For other `x` (infinities) the values are meaningless but harmless: the
/// caller selects its own result there.
pub fn rem_pio2_large<'ctx>(
    g: &Gen<'ctx>,
    x: FloatValue<'ctx>,
) -> Result<(IntValue<'ctx>, FloatValue<'ctx>, FloatValue<'ctx>)> {
    let b = &g.b;
    let i = Int { g };
    let f64t = g.ctx.f64_type();
    let bits = bx(b.build_bit_cast(x, g.i64(), ""))?.into_int_value();
    // |x| = M 2^E.
    let biased = i.and(i.shr(bits, 52)?, i.c(0x7FF))?;
    let m = i.or(i.and(bits, i.c((1 << 52) - 1))?, i.c(1 << 52))?;
    // Bits of 2/pi before the one of 2^-(E-1) only add multiples of 4 to M 2^E 2/pi: the
    // window starts there (bit 2^-k is at position k + 63 of the table, after its word of
    // zeros), clamped into the table. E = biased - 1075.
    let start = i.sub(biased, i.c(1075 - 62))?;
    let neg_start = bx(b.build_int_compare(IntPredicate::SLT, start, i.c(0), ""))?;
    let start = i.select(neg_start, i.c(0), start)?;
    let last = (TWO_OVER_PI.len() as u64 - 3) * 64 + 63;
    let past = bx(b.build_int_compare(IntPredicate::UGT, start, i.c(last), ""))?;
    let start = i.select(past, i.c(last), start)?;
    let word = i.shr(start, 6)?;
    let shift = i.and(start, i.c(63))?;
    let tab = table(g);
    let ty = g.i64().array_type(TWO_OVER_PI.len() as u32 + 1);
    let load = |k: u64| -> Result<IntValue<'ctx>> {
        let at = i.add(word, i.c(k))?;
        // SAFETY: `at` <= the table's last index: `start` is clamped above.
        let p = unsafe { bx(b.build_in_bounds_gep(ty, tab, &[i.c(0), at], ""))? };
        Ok(bx(b.build_load(g.i64(), p, ""))?.into_int_value())
    };
    let (w0, w1, w2, w3) = (load(0)?, load(1)?, load(2)?, load(3)?);
    let t2 = i.funnel(w0, w1, shift)?;
    let t1 = i.funnel(w1, w2, shift)?;
    let t0 = i.funnel(w2, w3, shift)?;
    // P = M T mod 2^192 (T = t2:t1:t0); value P 2^-190, in [0, 4).
    let (p0, c0) = i.mul_wide(m, t0)?;
    let (l1, h1) = i.mul_wide(m, t1)?;
    let l2 = i.mul(m, t2)?;
    let p1 = i.add(c0, l1)?;
    let carry = bx(b.build_int_compare(IntPredicate::ULT, p1, l1, ""))?;
    let carry = bx(b.build_int_z_extend(carry, g.i64(), ""))?;
    let p2 = i.add(i.add(h1, l2)?, carry)?;
    // The quadrant and the 190-bit fraction (f2:f1:f0, over 2^192).
    let q = i.shr(p2, 62)?;
    let two = i.c(2);
    let f2 = i.funnel(p2, p1, two)?;
    let f1 = i.funnel(p1, p0, two)?;
    let f0 = i.shl(p0, 2)?;
    // A fraction of 1/2 or more rounds the quadrant up and leaves 1 - fraction, negated.
    let up = bx(b.build_int_compare(IntPredicate::SLT, f2, i.c(0), ""))?;
    let (n0, z0) = (i.sub(i.c(0), f0)?, i.eq0(f0)?);
    let n1 = i.add(i.not(f1)?, bx(b.build_int_z_extend(z0, g.i64(), ""))?)?;
    let z1 = bx(b.build_and(z0, i.eq0(f1)?, ""))?;
    let n2 = i.add(i.not(f2)?, bx(b.build_int_z_extend(z1, g.i64(), ""))?)?;
    let g0 = i.select(up, n0, f0)?;
    let g1 = i.select(up, n1, f1)?;
    let g2 = i.select(up, n2, f2)?;
    let q = i.add(q, bx(b.build_int_z_extend(up, g.i64(), ""))?)?;
    // The leading 106 bits after the fraction's leading zeros, as two exact f64 words.
    let i64t = g.i64().into();
    let lz = g
        .call(
            "llvm.ctlz.i64",
            i64t,
            &[g2.into(), g.i1().const_int(0, false).into()],
        )?
        .into_int_value();
    let hi = i.funnel(g2, g1, lz)?;
    let lo = i.funnel(g1, g0, lz)?;
    let c1 = i.shr(hi, 11)?;
    let c2 = i.or(i.shl(i.and(hi, i.c(0x7FF))?, 42)?, i.shr(lo, 22)?)?;
    let to_f = |v: IntValue<'ctx>| bx(b.build_unsigned_int_to_float(v, f64t, ""));
    // 2^-(53 + lz) and 2^-(106 + lz), from their bits (lz <= 64).
    let pow2 = |neg: u64| -> Result<FloatValue<'ctx>> {
        let e = i.sub(i.c(1023 - neg), lz)?;
        let bits = i.shl(e, 52)?;
        Ok(bx(b.build_bit_cast(bits, f64t, ""))?.into_float_value())
    };
    let fh = bx(b.build_float_mul(to_f(c1)?, pow2(53)?, ""))?;
    let fl = bx(b.build_float_mul(to_f(c2)?, pow2(106)?, ""))?;
    // r = (fh + fl) pi/2 in two words.
    let (ph, pl) = (f64t.const_float(PIO2_HI), f64t.const_float(PIO2_LO));
    let rh = bx(b.build_float_mul(fh, ph, ""))?;
    let nrh = bx(b.build_float_neg(rh, ""))?;
    let err = g.fcall("fma", &[fh, ph, nrh])?;
    let cross = g.fcall("fma", &[fl, ph, err])?;
    let rl = g.fcall("fma", &[fh, pl, cross])?;
    let s = bx(b.build_float_add(rh, rl, ""))?;
    let back = bx(b.build_float_sub(s, rh, ""))?;
    let rl = bx(b.build_float_sub(rl, back, ""))?;
    let rh = s;
    // The signs: the rounded-up fraction's, then x's (x -> -x: q -> -q, r -> -r).
    let x_neg = bx(b.build_int_compare(IntPredicate::SLT, bits, i.c(0), ""))?;
    let flip = bx(b.build_xor(up, x_neg, ""))?;
    let neg = |v: FloatValue<'ctx>| -> Result<FloatValue<'ctx>> {
        let n = bx(b.build_float_neg(v, ""))?;
        Ok(bx(b.build_select(flip, n, v, ""))?.into_float_value())
    };
    let (rh, rl) = (neg(rh)?, neg(rl)?);
    let nq = i.sub(i.c(0), q)?;
    let q = i.select(x_neg, nq, q)?;
    Ok((q, rh, rl))
}
