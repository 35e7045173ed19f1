//! C's `fmod` on the GPU, where there is no libm: exact, by long division of the significands
//! (one subtraction and shift per binade between `a` and `b`, at most ~2100 for f64). It is
//! the GPU emitter's `fmod` primitive; numpy's corrections on top of it (`floor_divide` and
//! `mod`) are the shared expansion, `math::arith::float_divmod`.

use super::gen::{bx, Gen};
use crate::error::{Error, Result};
use inkwell::types::IntType;
use inkwell::values::{FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

/// The layout of the float format: total bits, stored significand bits, exponent mask.
fn layout<'ctx>(g: &Gen<'ctx>, ty: inkwell::types::FloatType<'ctx>) -> (IntType<'ctx>, u32, u64) {
    if ty == g.ctx.f32_type() {
        (g.i32(), 23, 0xff)
    } else {
        (g.i64(), 52, 0x7ff)
    }
}

/// C's `fmod(a, b)`, exact: NaN when `a` is infinite or NaN, or `b` is zero or NaN; `a` when
/// `|a| < |b|` (`b` infinite included); otherwise the remainder with `a`'s sign.
pub fn fmod<'ctx>(
    g: &Gen<'ctx>,
    a: FloatValue<'ctx>,
    b: FloatValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let bl = &g.b;
    let ty = a.get_type();
    let (ity, mant, emask) = layout(g, ty);
    let width = ity.get_bit_width();
    let c = |v: u64| ity.const_int(v, false);
    let ab = bx(bl.build_bit_cast(a, ity, ""))?.into_int_value();
    let bb = bx(bl.build_bit_cast(b, ity, ""))?.into_int_value();
    let sign_mask = c(1u64 << (width - 1));
    let sign = bx(bl.build_and(ab, sign_mask, "sign"))?;
    // Exponent and significand (implicit bit included), normalized so that the top bit of the
    // significand is bit `mant`; subnormals get the exponent that says so (1 - shift).
    let split = |bits: IntValue<'ctx>| -> Result<(IntValue<'ctx>, IntValue<'ctx>)> {
        let e = bx(bl.build_right_shift(bits, c(mant as u64), false, ""))?;
        let e = bx(bl.build_and(e, c(emask), ""))?;
        let frac = bx(bl.build_and(bits, c((1u64 << mant) - 1), ""))?;
        let normal = bx(bl.build_int_compare(IntPredicate::NE, e, c(0), ""))?;
        let with_one = bx(bl.build_or(frac, c(1u64 << mant), ""))?;
        // Subnormal: shift the leading one up to bit `mant`.
        let lz = ctlz(g, frac)?;
        let shift = bx(bl.build_int_sub(lz, c((width - 1 - mant) as u64), ""))?;
        let sub_m = bx(bl.build_left_shift(frac, shift, ""))?;
        let sub_e = bx(bl.build_int_sub(c(1), shift, ""))?;
        let m = bx(bl.build_select(normal, with_one, sub_m, ""))?.into_int_value();
        let e = bx(bl.build_select(normal, e, sub_e, ""))?.into_int_value();
        Ok((e, m))
    };
    let (ea, ma) = split(ab)?;
    let (eb, mb) = split(bb)?;
    // Long division: for each binade of a above b's, subtract b's significand if it fits, then
    // shift. (Signed exponents: subnormals have e <= 0.)
    let func = bl
        .get_insert_block()
        .and_then(|b| b.get_parent())
        .ok_or_else(|| Error::Unsupported("ptx backend: fmod outside a function".into()))?;
    let pre = bl
        .get_insert_block()
        .ok_or_else(|| Error::Unsupported("ptx backend: no block".into()))?;
    let head = g.ctx.append_basic_block(func, "fmod_loop");
    let body = g.ctx.append_basic_block(func, "fmod_step");
    let done = g.ctx.append_basic_block(func, "fmod_done");
    bx(bl.build_unconditional_branch(head))?;
    bl.position_at_end(head);
    let e_phi = bx(bl.build_phi(ity, "e"))?;
    let m_phi = bx(bl.build_phi(ity, "m"))?;
    let e = e_phi.as_basic_value().into_int_value();
    let m = m_phi.as_basic_value().into_int_value();
    let more = bx(bl.build_int_compare(IntPredicate::SGT, e, eb, ""))?;
    bx(bl.build_conditional_branch(more, body, done))?;
    bl.position_at_end(body);
    let m_step = subtract_if_fits(g, m, mb)?;
    let m_next = bx(bl.build_left_shift(m_step, c(1), ""))?;
    let e_next = bx(bl.build_int_sub(e, c(1), ""))?;
    bx(bl.build_unconditional_branch(head))?;
    e_phi.add_incoming(&[(&ea, pre), (&e_next, body)]);
    m_phi.add_incoming(&[(&ma, pre), (&m_next, body)]);
    bl.position_at_end(done);
    let rem = subtract_if_fits(g, m, mb)?;
    // Renormalize the remainder (it is below b's significand) and rebuild the float.
    let lz = ctlz(g, rem)?;
    let shift = bx(bl.build_int_sub(lz, c((width - 1 - mant) as u64), ""))?;
    let rm = bx(bl.build_left_shift(rem, shift, ""))?;
    let re = bx(bl.build_int_sub(e, shift, ""))?;
    let normal = bx(bl.build_int_compare(IntPredicate::SGT, re, c(0), ""))?;
    let frac = bx(bl.build_and(rm, c((1u64 << mant) - 1), ""))?;
    let ebits = bx(bl.build_left_shift(re, c(mant as u64), ""))?;
    let normal_bits = bx(bl.build_or(frac, ebits, ""))?;
    // Subnormal result: shift right by 1 - re (exact: the remainder fits).
    let rshift = bx(bl.build_int_sub(c(1), re, ""))?;
    let rshift = bx(bl.build_select(normal, c(0), rshift, ""))?.into_int_value();
    let sub_bits = bx(bl.build_right_shift(rm, rshift, false, ""))?;
    let bits = bx(bl.build_select(normal, normal_bits, sub_bits, ""))?.into_int_value();
    let is_zero = bx(bl.build_int_compare(IntPredicate::EQ, rem, c(0), ""))?;
    let bits = bx(bl.build_select(is_zero, c(0), bits, ""))?.into_int_value();
    let bits = bx(bl.build_or(bits, sign, ""))?;
    let r = bx(bl.build_bit_cast(bits, ty, ""))?.into_float_value();
    // Special cases.
    let abs_a = g.fcall("fabs", &[a])?;
    let abs_b = g.fcall("fabs", &[b])?;
    let nan = ty.const_float(f64::NAN);
    let inf = ty.const_float(f64::INFINITY);
    let a_bad = bx(bl.build_float_compare(FloatPredicate::UGE, abs_a, inf, ""))?; // inf or NaN
    let b_bad = bx(bl.build_float_compare(FloatPredicate::UEQ, b, ty.const_float(0.0), ""))?; // 0 or NaN
    let bad = bx(bl.build_or(a_bad, b_bad, ""))?;
    let small = bx(bl.build_float_compare(FloatPredicate::OLT, abs_a, abs_b, ""))?;
    let r = bx(bl.build_select(small, a, r, ""))?.into_float_value();
    Ok(bx(bl.build_select(bad, nan, r, ""))?.into_float_value())
}

/// `m - d` when `d <= m`, else `m` (unsigned significands).
fn subtract_if_fits<'ctx>(
    g: &Gen<'ctx>,
    m: IntValue<'ctx>,
    d: IntValue<'ctx>,
) -> Result<IntValue<'ctx>> {
    let fits = bx(g.b.build_int_compare(IntPredicate::UGE, m, d, ""))?;
    let less = bx(g.b.build_int_sub(m, d, ""))?;
    Ok(bx(g.b.build_select(fits, less, m, ""))?.into_int_value())
}

/// Leading zeros (the width for 0).
fn ctlz<'ctx>(g: &Gen<'ctx>, v: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
    let w = v.get_type().get_bit_width();
    Ok(g.call(
        &format!("llvm.ctlz.i{w}"),
        v.get_type().into(),
        &[v.into(), g.i1().const_zero().into()],
    )?
    .into_int_value())
}
