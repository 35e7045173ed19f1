//! Casts from and to the storage-only halves in Cranelift code: the conversions themselves
//! are `crate::math::half`'s (written once for every code generator), run through `ClifMath`
//! on f32 lanes; this adds the f64 step a half's rounding from f64 and the integers takes.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

/// Four halves at `addr + off`, each zero-extended into a 32-bit lane (how vector code holds
/// them).
pub fn load_x4(b: &mut FunctionBuilder, flags: MemFlagsData, addr: Value, off: i32) -> Value {
    b.ins().uload16x4(flags, addr, off)
}

/// Stores the halves in the low 16 bits of `v`'s four 32-bit lanes at `addr + off`.
pub fn store_x4(b: &mut FunctionBuilder, flags: MemFlagsData, v: Value, addr: Value, off: i32) {
    // The lanes hold 0..=0xFFFF, which the unsigned saturating narrow keeps exactly.
    let narrow = b.ins().unarrow(v, v);
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    let words = b.ins().bitcast(types::I64X2, le, narrow);
    let low = b.ins().extractlane(words, 0);
    b.ins().store(flags, low, addr, off);
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
