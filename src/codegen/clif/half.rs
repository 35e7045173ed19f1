//! Casts from and to the storage-only halves in Cranelift code: the conversions themselves
//! are `crate::math::half`'s (written once for every code generator), run through `ClifMath`
//! on f32 lanes; this adds the f64 step a half's rounding from f64 and the integers takes.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

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
