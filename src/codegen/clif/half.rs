//! Conversions between `f32` and the storage-only halves (`f16`, `bf16`) in Cranelift code, on
//! scalars or on `i32x4` / `f32x4` vectors. A half is held as its 16 bits in the low half of an
//! `i32` (lane); the host follows the same rules through the `half` crate (`ir::f16_of`), and
//! the results agree bit for bit, NaNs included.
//!
//! Written by hand with integer ops because Cranelift has no half-precision conversion (x86's
//! F16C is not exposed, and bf16 has no instruction at all). The f16 algorithms are the
//! branch-free ones of Fabian Giesen's "half_to_float" / "float_to_half_fast3_rtne" (public
//! domain), with NaNs quieted as IEEE 754 (and `half`) do.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// Integer code on 32-bit scalars or 4-lane vectors.
struct Bits<'x, 'f> {
    b: &'x mut FunctionBuilder<'f>,
    vector: bool,
}

impl Bits<'_, '_> {
    fn int(&self) -> Type {
        if self.vector {
            types::I32X4
        } else {
            types::I32
        }
    }

    fn float(&self) -> Type {
        if self.vector {
            types::F32X4
        } else {
            types::F32
        }
    }

    fn k(&mut self, c: u32) -> Value {
        let s = self.b.ins().iconst(types::I32, c as i32 as i64);
        if self.vector {
            self.b.ins().splat(types::I32X4, s)
        } else {
            s
        }
    }

    fn flags(&self) -> MemFlagsData {
        if self.vector {
            MemFlagsData::new().with_endianness(Endianness::Little)
        } else {
            MemFlagsData::new()
        }
    }

    fn to_float(&mut self, x: Value) -> Value {
        let (ty, f) = (self.float(), self.flags());
        self.b.ins().bitcast(ty, f, x)
    }

    fn to_int(&mut self, x: Value) -> Value {
        let (ty, f) = (self.int(), self.flags());
        self.b.ins().bitcast(ty, f, x)
    }

    fn and(&mut self, x: Value, c: u32) -> Value {
        let c = self.k(c);
        self.b.ins().band(x, c)
    }

    fn or(&mut self, x: Value, c: u32) -> Value {
        let c = self.k(c);
        self.b.ins().bor(x, c)
    }

    fn add(&mut self, x: Value, c: u32) -> Value {
        let c = self.k(c);
        self.b.ins().iadd(x, c)
    }

    fn shr(&mut self, x: Value, n: i64) -> Value {
        self.b.ins().ushr_imm_s(x, n)
    }

    fn shl(&mut self, x: Value, n: i64) -> Value {
        self.b.ins().ishl_imm_s(x, n)
    }

    /// Whether `x cc c`, as a condition for `pick`.
    fn cmp(&mut self, cc: IntCC, x: Value, c: u32) -> Value {
        let c = self.k(c);
        self.b.ins().icmp(cc, x, c)
    }

    /// `a` where `m` holds, else `b`.
    fn pick(&mut self, m: Value, a: Value, b: Value) -> Value {
        if self.vector {
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(m, a, b)
        }
    }
}

/// The `f32` value of the f16 bits `h` (an `i32` or `i32x4` holding 0..=0xFFFF): exact.
pub fn f16_to_f32(b: &mut FunctionBuilder, vector: bool, h: Value) -> Value {
    let mut g = Bits { b, vector };
    let mag = g.and(h, 0x7FFF);
    let o = g.shl(mag, 13);
    let exp = g.and(o, 0x0F80_0000);
    // Rebias the exponent from 15 to 127.
    let normal = g.add(o, 0x3800_0000);
    // Infinity or NaN: the exponent all ones again; a NaN quieted.
    let inf = g.add(normal, 0x3800_0000);
    let quiet = g.or(inf, 0x0040_0000);
    let frac = g.and(h, 0x03FF);
    let is_nan = g.cmp(IntCC::NotEqual, frac, 0);
    let special = g.pick(is_nan, quiet, inf);
    // Zero or subnormal: 2^-14 * (1 + m/2^10) - 2^-14, exact in f32.
    let biased = g.add(normal, 0x0080_0000);
    let f = g.to_float(biased);
    let magic = g.k(0x3880_0000);
    let magic = g.to_float(magic);
    let sub = g.b.ins().fsub(f, magic);
    let sub = g.to_int(sub);
    let is_special = g.cmp(IntCC::Equal, exp, 0x0F80_0000);
    let is_sub = g.cmp(IntCC::Equal, exp, 0);
    let small = g.pick(is_sub, sub, normal);
    let r = g.pick(is_special, special, small);
    let sign = g.and(h, 0x8000);
    let sign = g.shl(sign, 16);
    let r = g.b.ins().bor(r, sign);
    g.to_float(r)
}

/// The f16 bits (in an `i32` or `i32x4`) nearest the `f32` `x`, ties to even.
pub fn f32_to_f16(b: &mut FunctionBuilder, vector: bool, x: Value) -> Value {
    let mut g = Bits { b, vector };
    let bits = g.to_int(x);
    let sign = g.shr(bits, 16);
    let sign = g.and(sign, 0x8000);
    let a = g.and(bits, 0x7FFF_FFFF);
    // At least 65536 (or not a number): infinity, or a quiet NaN keeping its top bits.
    let top = g.shr(a, 13);
    let top = g.and(top, 0x03FF);
    let nan = g.or(top, 0x7E00);
    let inf = g.k(0x7C00);
    let is_nan = g.cmp(IntCC::UnsignedGreaterThan, a, 0x7F80_0000);
    let big = g.pick(is_nan, nan, inf);
    // Below 2^-14 (an f16 subnormal or zero): adding 0.5 makes the FPU round the value to a
    // multiple of 2^-24, the f16 subnormals' step, to nearest even; the low bits are it.
    let af = g.to_float(a);
    let half = g.k(0x3F00_0000);
    let half = g.to_float(half);
    let t = g.b.ins().fadd(af, half);
    let t = g.to_int(t);
    let neg_half = g.k(0x3F00_0000u32.wrapping_neg());
    let sub = g.b.ins().iadd(t, neg_half);
    // Normal: rebias the exponent, round the 13 dropped bits to nearest even (a carry into
    // the exponent is right, up to infinity).
    let odd = g.shr(a, 13);
    let odd = g.and(odd, 1);
    let n = g.add(a, 0xC800_0FFF);
    let n = g.b.ins().iadd(n, odd);
    let normal = g.shr(n, 13);
    let is_big = g.cmp(IntCC::UnsignedGreaterThanOrEqual, a, 0x4780_0000);
    let is_sub = g.cmp(IntCC::UnsignedLessThan, a, 0x3880_0000);
    let small = g.pick(is_sub, sub, normal);
    let r = g.pick(is_big, big, small);
    g.b.ins().bor(r, sign)
}

/// The `f32` value of the bf16 bits `h` (an `i32` or `i32x4` holding 0..=0xFFFF): exact, a
/// NaN quieted.
pub fn bf16_to_f32(b: &mut FunctionBuilder, vector: bool, h: Value) -> Value {
    let mut g = Bits { b, vector };
    let mag = g.and(h, 0x7FFF);
    let is_nan = g.cmp(IntCC::UnsignedGreaterThan, mag, 0x7F80);
    let quiet = g.or(h, 0x0040);
    let h = g.pick(is_nan, quiet, h);
    let r = g.shl(h, 16);
    g.to_float(r)
}

/// The bf16 bits (in an `i32` or `i32x4`) nearest the `f32` `x`, ties to even.
pub fn f32_to_bf16(b: &mut FunctionBuilder, vector: bool, x: Value) -> Value {
    let mut g = Bits { b, vector };
    let bits = g.to_int(x);
    let hi = g.shr(bits, 16);
    let odd = g.and(hi, 1);
    let r = g.add(bits, 0x7FFF);
    let r = g.b.ins().iadd(r, odd);
    let r = g.shr(r, 16);
    let a = g.and(bits, 0x7FFF_FFFF);
    let is_nan = g.cmp(IntCC::UnsignedGreaterThan, a, 0x7F80_0000);
    let nan = g.or(hi, 0x0040);
    g.pick(is_nan, nan, r)
}

/// The `f64` scalar `x` rounded to `f32` toward zero, the last bit set where that was inexact
/// (round to odd, `ir::f32_round_to_odd`): rounding the result to a half rounds `x` once.
pub fn f64_to_f32_odd(b: &mut FunctionBuilder, x: Value) -> Value {
    let d = b.ins().fdemote(types::F32, x);
    let back = b.ins().fpromote(types::F64, d);
    // Ordered and unequal: false for a NaN, which stays as it is.
    let inexact = b.ins().fcmp(FloatCC::OrderedNotEqual, back, x);
    let (ab, ax) = (b.ins().fabs(back), b.ins().fabs(x));
    let rounded_up = b.ins().fcmp(FloatCC::GreaterThan, ab, ax);
    let bits = b.ins().bitcast(types::I32, MemFlagsData::new(), d);
    let down = b.ins().uextend(types::I32, rounded_up);
    let bits = b.ins().isub(bits, down);
    let odd = b.ins().uextend(types::I32, inexact);
    let bits = b.ins().bor(bits, odd);
    b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
}
