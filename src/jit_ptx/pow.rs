//! `pow` of f32 on the GPU, where there is no libm: `exp(y * log|x|)` in f64 through the
//! shared expansions (each within ~1.5 ulp of f64; `y * log|x|` stays below ~150 in magnitude
//! wherever the f32 result is finite and nonzero, so the f64 result is within ~2^-44 relative,
//! and rounding it to f32 gives the correctly rounded result except in rare near-halfway
//! cases: at most 1 ulp from libm's `powf`), with C99's special cases as selects. f64 `pow`
//! is the shared double-word expansion (`math::pow_f64`, emitted by `math_llvm`).

use super::gen::{bx, Gen};
use super::math_llvm::emit_math;
use crate::error::Result;
use crate::math::{MathFn, Prec};
use inkwell::values::{FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

/// `powf(x, y)` for f32 values.
pub fn pow_f32<'ctx>(
    g: &Gen<'ctx>,
    x: FloatValue<'ctx>,
    y: FloatValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let b = &g.b;
    let f32t = x.get_type();
    let f64t = g.ctx.f64_type();
    let cmp = |p: FloatPredicate, a: FloatValue<'ctx>, c: FloatValue<'ctx>| {
        bx(b.build_float_compare(p, a, c, ""))
    };
    let sel =
        |m: IntValue<'ctx>, a: FloatValue<'ctx>, c: FloatValue<'ctx>| -> Result<FloatValue<'ctx>> {
            Ok(bx(b.build_select(m, a, c, ""))?.into_float_value())
        };
    let (zero, one) = (f32t.const_float(0.0), f32t.const_float(1.0));
    // The magnitude, in f64.
    let ax = g.fcall("fabs", &[x])?;
    let ax64 = bx(b.build_float_ext(ax, f64t, ""))?;
    let y64 = bx(b.build_float_ext(y, f64t, ""))?;
    let l = emit_math(g, MathFn::Log, Prec::F64, ax64)?;
    let t = bx(b.build_float_mul(y64, l, ""))?;
    let m64 = emit_math(g, MathFn::Exp, Prec::F64, t)?;
    let mag = bx(b.build_float_trunc(m64, f32t, ""))?;
    // y an integer (finite), and odd (every f32 of magnitude 2^24 or more is even).
    let ay = g.fcall("fabs", &[y])?;
    let fy = g.fcall("floor", &[y])?;
    let y_int = cmp(FloatPredicate::OEQ, fy, y)?;
    let y_fin = cmp(FloatPredicate::OLT, ay, f32t.const_float(f64::INFINITY))?;
    let y_int = bx(b.build_and(y_int, y_fin, ""))?;
    let small = cmp(FloatPredicate::OLT, ay, f32t.const_float(16777216.0))?;
    let safe_y = sel(small, y, zero)?;
    let yi = bx(b.build_float_to_signed_int(safe_y, g.i32(), ""))?;
    let bit = bx(b.build_and(yi, g.c32(1), ""))?;
    let odd_bit = bx(b.build_int_compare(IntPredicate::NE, bit, g.c32(0), ""))?;
    let y_odd = bx(b.build_and(y_int, bx(b.build_and(small, odd_bit, ""))?, ""))?;
    // The sign: x's sign bit (-0 included) with an odd integer y.
    let xb = bx(b.build_bit_cast(x, g.i32(), ""))?.into_int_value();
    let x_neg = bx(b.build_int_compare(IntPredicate::SLT, xb, g.c32(0), ""))?;
    let flip = bx(b.build_and(x_neg, y_odd, ""))?;
    let neg_mag = bx(b.build_float_neg(mag, ""))?;
    let r = sel(flip, neg_mag, mag)?;
    // A negative finite x to a finite non-integer y: NaN.
    let x_fin = cmp(FloatPredicate::OLT, ax, f32t.const_float(f64::INFINITY))?;
    let x_lt0 = cmp(FloatPredicate::OLT, x, zero)?;
    let not_int = bx(b.build_not(y_int, ""))?;
    let bad = bx(b.build_and(
        bx(b.build_and(x_lt0, x_fin, ""))?,
        bx(b.build_and(y_fin, not_int, ""))?,
        "",
    ))?;
    let nan = f32t.const_float(f64::NAN);
    let r = sel(bad, nan, r)?;
    // NaN in, NaN out, except below.
    let any_nan = cmp(FloatPredicate::UNO, x, y)?;
    let r = sel(any_nan, nan, r)?;
    // pow(-1, +-inf) = 1, pow(1, y) = 1, pow(x, 0) = 1, whatever the other operand.
    let x_m1 = cmp(FloatPredicate::OEQ, x, f32t.const_float(-1.0))?;
    let y_inf = bx(b.build_not(y_fin, ""))?;
    let y_not_nan = cmp(FloatPredicate::ORD, y, y)?;
    let m1_inf = bx(b.build_and(x_m1, bx(b.build_and(y_inf, y_not_nan, ""))?, ""))?;
    let x_one = cmp(FloatPredicate::OEQ, x, one)?;
    let y_zero = cmp(FloatPredicate::OEQ, y, zero)?;
    let unit = bx(b.build_or(m1_inf, bx(b.build_or(x_one, y_zero, ""))?, ""))?;
    sel(unit, one, r)
}
