//! Lowering of scalar-program instructions to LLVM IR, one element at a time. Each op computes
//! what `src/codegen/clif/scalar_ops.rs` computes (and so what the interpreter computes):
//! wrapping integer arithmetic, integer division and mod by zero giving 0 (and `MIN / -1`
//! wrapping instead of trapping), NaN-propagating `maximum`/`minimum` with -0 < +0, float to
//! integer casts that truncate, saturate and send NaN to 0, and the transcendental functions
//! as the shared expansions of `crate::math`.
//!
//! Bools are `i1` in registers (one byte in memory, converted by the kernel's loads/stores).

use super::gen::{bx, Gen};
use super::math_llvm::{emit_arith, emit_math};
use super::pow::pow_f32;
use crate::error::{Error, Result};
use crate::ir::scalar::{ScalarOp, ScalarProgram};
use crate::ir::{BinaryOp, DType, UnaryOp};
use crate::math::{self, arith, Prec};
use inkwell::values::{BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

fn unsupported(what: String) -> Error {
    Error::Unsupported(format!("ptx backend: {what} has no GPU lowering yet"))
}

/// Computes `program`'s registers from the already loaded input values (`inputs[k]` is input
/// `k` in register form) and returns the output registers.
pub fn emit_program<'ctx>(
    g: &Gen<'ctx>,
    program: &ScalarProgram,
    inputs: &[Option<BasicValueEnum<'ctx>>],
) -> Result<Vec<BasicValueEnum<'ctx>>> {
    let mut regs: Vec<BasicValueEnum<'ctx>> = Vec::with_capacity(program.insts.len());
    for (r, inst) in program.insts.iter().enumerate() {
        let a = |i: usize| regs[inst.args[i]];
        let ad = |i: usize| program.insts[inst.args[i]].dtype;
        let v = match &inst.op {
            ScalarOp::Input(k) => inputs.get(*k).copied().flatten().ok_or_else(|| {
                Error::Unsupported(format!(
                    "ptx backend: register %{r} reads a missing input {k}"
                ))
            })?,
            ScalarOp::Const(c) => konst(g, inst.dtype, c.0),
            ScalarOp::Unary(u) => unary(g, *u, ad(0), a(0))?,
            ScalarOp::Binary(o) => binary(g, *o, ad(0), a(0), a(1))?,
            ScalarOp::Select => bx(g.b.build_select(a(0).into_int_value(), a(1), a(2), ""))?,
            ScalarOp::Cast(to) => cast(g, ad(0), *to, a(0))?,
        };
        regs.push(v);
    }
    Ok(program.outputs.iter().map(|&o| regs[o]).collect())
}

/// A constant of dtype `d` in register form.
pub fn konst<'ctx>(g: &Gen<'ctx>, d: DType, v: f64) -> BasicValueEnum<'ctx> {
    match d {
        DType::Bool => g.i1().const_int((v != 0.0) as u64, false).into(),
        DType::I32 => g.i32().const_int(v as i32 as i64 as u64, true).into(),
        DType::I64 => g.i64().const_int(v as i64 as u64, true).into(),
        DType::F32 => g.float_type(d).const_float(v as f32 as f64).into(),
        DType::F64 => g.float_type(d).const_float(v).into(),
        DType::F16 | DType::BF16 => (g.ctx.i16_type())
            .const_int(crate::ir::half_bits(d, v) as u64, false)
            .into(),
    }
}

fn prec(d: DType) -> Prec {
    if d == DType::F32 {
        Prec::F32
    } else {
        Prec::F64
    }
}

fn unary<'ctx>(
    g: &Gen<'ctx>,
    u: UnaryOp,
    d: DType,
    x: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    let b = &g.b;
    if d == DType::Bool {
        return match u {
            UnaryOp::Not => Ok(bx(b.build_not(x.into_int_value(), ""))?.into()),
            _ => Err(unsupported(format!("{} on bool", u.name()))),
        };
    }
    if d.is_int() {
        let x = x.into_int_value();
        let zero = x.get_type().const_zero();
        let v: IntValue = match u {
            UnaryOp::Neg => bx(b.build_int_sub(zero, x, ""))?,
            UnaryOp::Abs => {
                let neg = bx(b.build_int_compare(IntPredicate::SLT, x, zero, ""))?;
                let minus = bx(b.build_int_sub(zero, x, ""))?;
                bx(b.build_select(neg, minus, x, ""))?.into_int_value()
            }
            UnaryOp::Sign => {
                let pos = bx(b.build_int_compare(IntPredicate::SGT, x, zero, ""))?;
                let neg = bx(b.build_int_compare(IntPredicate::SLT, x, zero, ""))?;
                let p = bx(b.build_int_z_extend(pos, x.get_type(), ""))?;
                let m = bx(b.build_int_z_extend(neg, x.get_type(), ""))?;
                bx(b.build_int_sub(p, m, ""))?
            }
            UnaryOp::Square => bx(b.build_int_mul(x, x, ""))?,
            UnaryOp::Relu => {
                let pos = bx(b.build_int_compare(IntPredicate::SGT, x, zero, ""))?;
                bx(b.build_select(pos, x, zero, ""))?.into_int_value()
            }
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => x,
            _ => return Err(unsupported(format!("{} on {d}", u.name()))),
        };
        return Ok(v.into());
    }
    let x = x.into_float_value();
    if let Some(f) = crate::math::of_unary(u) {
        return Ok(emit_math(g, f, prec(d), x)?.into());
    }
    let ty = x.get_type();
    let one = ty.const_float(1.0);
    let zero = ty.const_float(0.0);
    let sel =
        |m: IntValue<'ctx>, a: FloatValue<'ctx>, c: FloatValue<'ctx>| -> Result<FloatValue<'ctx>> {
            Ok(bx(b.build_select(m, a, c, ""))?.into_float_value())
        };
    let v: FloatValue = match u {
        UnaryOp::Neg => bx(b.build_float_neg(x, ""))?,
        UnaryOp::Abs => g.fcall("fabs", &[x])?,
        UnaryOp::Sqrt => g.fcall("sqrt", &[x])?,
        UnaryOp::Rsqrt => {
            let s = g.fcall("sqrt", &[x])?;
            bx(b.build_float_div(one, s, ""))?
        }
        UnaryOp::Floor => g.fcall("floor", &[x])?,
        UnaryOp::Ceil => g.fcall("ceil", &[x])?,
        UnaryOp::Round => g.fcall("rint", &[x])?,
        UnaryOp::Square => bx(b.build_float_mul(x, x, ""))?,
        UnaryOp::Reciprocal => bx(b.build_float_div(one, x, ""))?,
        UnaryOp::Sign => {
            // 1 above zero, -1 below, 0 for either zero, NaN stays NaN.
            let minus = ty.const_float(-1.0);
            let gt = bx(b.build_float_compare(FloatPredicate::OGT, x, zero, ""))?;
            let lt = bx(b.build_float_compare(FloatPredicate::OLT, x, zero, ""))?;
            let eq = bx(b.build_float_compare(FloatPredicate::OEQ, x, zero, ""))?;
            let z_or_nan = sel(eq, zero, x)?;
            let neg = sel(lt, minus, z_or_nan)?;
            sel(gt, one, neg)?
        }
        UnaryOp::Relu => {
            // x where x > 0 or x is NaN, else 0.
            let keep = bx(b.build_float_compare(FloatPredicate::UGT, x, zero, ""))?;
            sel(keep, x, zero)?
        }
        _ => return Err(unsupported(format!("{} on {d}", u.name()))),
    };
    Ok(v.into())
}

fn binary<'ctx>(
    g: &Gen<'ctx>,
    o: BinaryOp,
    d: DType,
    x: BasicValueEnum<'ctx>,
    y: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    let b = &g.b;
    if o.is_comparison() {
        let v = if d.is_float() {
            let p = match o {
                BinaryOp::Lt => FloatPredicate::OLT,
                BinaryOp::Le => FloatPredicate::OLE,
                BinaryOp::Gt => FloatPredicate::OGT,
                BinaryOp::Ge => FloatPredicate::OGE,
                BinaryOp::Eq => FloatPredicate::OEQ,
                _ => FloatPredicate::UNE, // true for NaN, as numpy
            };
            bx(b.build_float_compare(p, x.into_float_value(), y.into_float_value(), ""))?
        } else {
            // bool compares as unsigned (false < true), integers signed.
            let signed = d != DType::Bool;
            let p = match (o, signed) {
                (BinaryOp::Lt, true) => IntPredicate::SLT,
                (BinaryOp::Le, true) => IntPredicate::SLE,
                (BinaryOp::Gt, true) => IntPredicate::SGT,
                (BinaryOp::Ge, true) => IntPredicate::SGE,
                (BinaryOp::Lt, false) => IntPredicate::ULT,
                (BinaryOp::Le, false) => IntPredicate::ULE,
                (BinaryOp::Gt, false) => IntPredicate::UGT,
                (BinaryOp::Ge, false) => IntPredicate::UGE,
                (BinaryOp::Eq, _) => IntPredicate::EQ,
                _ => IntPredicate::NE,
            };
            bx(b.build_int_compare(p, x.into_int_value(), y.into_int_value(), ""))?
        };
        return Ok(v.into());
    }
    match d {
        DType::Bool => {
            let (x, y) = (x.into_int_value(), y.into_int_value());
            Ok(match o {
                BinaryOp::And => bx(b.build_and(x, y, ""))?,
                BinaryOp::Or => bx(b.build_or(x, y, ""))?,
                _ => return Err(unsupported(format!("{} on bool", o.name()))),
            }
            .into())
        }
        DType::F32 | DType::F64 => {
            let (x, y) = (x.into_float_value(), y.into_float_value());
            Ok(match o {
                BinaryOp::Add => bx(b.build_float_add(x, y, ""))?,
                BinaryOp::Sub => bx(b.build_float_sub(x, y, ""))?,
                BinaryOp::Mul => bx(b.build_float_mul(x, y, ""))?,
                BinaryOp::Div => bx(b.build_float_div(x, y, ""))?,
                BinaryOp::Pow if d == DType::F32 => pow_f32(g, x, y)?,
                BinaryOp::Pow => super::math_llvm::emit_pow_f64(g, x, y)?,
                BinaryOp::FloorDiv | BinaryOp::Mod => {
                    let (q, m) =
                        emit_arith(g, arith::lanes_for(d), |e| arith::float_divmod(e, x, y))?;
                    if o == BinaryOp::Mod {
                        m
                    } else {
                        q
                    }
                }
                BinaryOp::Maximum => fminmax(g, x, y, true)?,
                BinaryOp::Minimum => fminmax(g, x, y, false)?,
                _ => return Err(unsupported(format!("{} on {d}", o.name()))),
            }
            .into())
        }
        DType::I32 | DType::I64 => {
            let (x, y) = (x.into_int_value(), y.into_int_value());
            Ok(match o {
                BinaryOp::Add => bx(b.build_int_add(x, y, ""))?,
                BinaryOp::Sub => bx(b.build_int_sub(x, y, ""))?,
                BinaryOp::Mul => bx(b.build_int_mul(x, y, ""))?,
                BinaryOp::Maximum | BinaryOp::Minimum => {
                    let p = if o == BinaryOp::Maximum {
                        IntPredicate::SGT
                    } else {
                        IntPredicate::SLT
                    };
                    let c = bx(b.build_int_compare(p, x, y, ""))?;
                    bx(b.build_select(c, x, y, ""))?.into_int_value()
                }
                BinaryOp::FloorDiv | BinaryOp::Mod => {
                    let (q, m) =
                        emit_arith(g, arith::lanes_for(d), |e| arith::int_divmod(e, x, y))?;
                    if o == BinaryOp::Mod {
                        m
                    } else {
                        q
                    }
                }
                BinaryOp::Pow => emit_arith(g, arith::lanes_for(d), |e| arith::int_pow(e, x, y))?,
                _ => return Err(unsupported(format!("{} on {d}", o.name()))),
            }
            .into())
        }
        DType::F16 | DType::BF16 => Err(unsupported(format!("{} on {d}", o.name()))),
    }
}

/// numpy's `maximum` / `minimum` (see `perform::elementwise`): `x` where it is greater
/// (smaller) or NaN, else `y`. A NaN on either side propagates, and of two equal values
/// (`+0.0` and `-0.0`) the second is returned.
fn fminmax<'ctx>(
    g: &Gen<'ctx>,
    x: FloatValue<'ctx>,
    y: FloatValue<'ctx>,
    max: bool,
) -> Result<FloatValue<'ctx>> {
    let b = &g.b;
    let p = if max {
        FloatPredicate::OGT
    } else {
        FloatPredicate::OLT
    };
    let wins = bx(b.build_float_compare(p, x, y, ""))?;
    let nan = bx(b.build_float_compare(FloatPredicate::UNO, x, x, ""))?;
    let keep = bx(b.build_or(wins, nan, ""))?;
    Ok(bx(b.build_select(keep, x, y, ""))?.into_float_value())
}

/// A cast from or to a half, through f32 with `math::half`'s conversions (from f64 and the
/// integers by way of f64 rounded to odd, as `ir::f16_of` does): the CPU's bits.
fn cast_half<'ctx>(
    g: &Gen<'ctx>,
    from: DType,
    to: DType,
    x: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    let b = &g.b;
    if from.is_half() {
        let bits = bx(b.build_int_z_extend(x.into_int_value(), g.i32(), ""))?;
        let f = emit_arith(g, Prec::F32, |e| match from {
            DType::F16 => math::half::f16_to_f32(e, bits),
            _ => math::half::bf16_to_f32(e, bits),
        })?;
        return cast(g, DType::F32, to, f.into());
    }
    let f = match from {
        DType::F32 => x.into_float_value(),
        DType::Bool => cast(g, from, DType::F32, x)?.into_float_value(),
        // Rounded to odd on the way, so that the half's rounding is the only one.
        DType::I64 => {
            let i = x.into_int_value();
            let wide = emit_arith(g, Prec::F64, |e| math::half::i64_to_f64_odd(e, i))?;
            f64_to_f32_odd(g, wide)?
        }
        _ => f64_to_f32_odd(g, cast(g, from, DType::F64, x)?.into_float_value())?,
    };
    let bits = emit_arith(g, Prec::F32, |e| match to {
        DType::F16 => math::half::f32_to_f16(e, f),
        _ => math::half::f32_to_bf16(e, f),
    })?;
    Ok(bx(b.build_int_truncate(bits, g.ctx.i16_type(), ""))?.into())
}

/// The f64 `x` rounded to f32 toward zero, the last bit set where inexact (`ir::f32_round_to_odd`).
fn f64_to_f32_odd<'ctx>(g: &Gen<'ctx>, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
    let b = &g.b;
    let d = bx(b.build_float_trunc(x, g.ctx.f32_type(), ""))?;
    let back = bx(b.build_float_ext(d, g.ctx.f64_type(), ""))?;
    let inexact = bx(b.build_float_compare(FloatPredicate::ONE, back, x, ""))?;
    let f64t = g.ctx.f64_type().into();
    let ab = g
        .call("llvm.fabs.f64", f64t, &[back.into()])?
        .into_float_value();
    let ax = g
        .call("llvm.fabs.f64", f64t, &[x.into()])?
        .into_float_value();
    let up = bx(b.build_float_compare(FloatPredicate::OGT, ab, ax, ""))?;
    let bits = bx(b.build_bit_cast(d, g.i32(), ""))?.into_int_value();
    let down = bx(b.build_int_z_extend(up, g.i32(), ""))?;
    let bits = bx(b.build_int_sub(bits, down, ""))?;
    let odd = bx(b.build_int_z_extend(inexact, g.i32(), ""))?;
    let bits = bx(b.build_or(bits, odd, ""))?;
    Ok(bx(b.build_bit_cast(bits, g.ctx.f32_type(), ""))?.into_float_value())
}

/// `x` of dtype `from` as dtype `to`, as the CPU backend converts.
fn cast<'ctx>(
    g: &Gen<'ctx>,
    from: DType,
    to: DType,
    x: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    let b = &g.b;
    if from == to {
        return Ok(x);
    }
    if from.is_half() || to.is_half() {
        return cast_half(g, from, to, x);
    }
    Ok(match (from.is_float(), to) {
        // To bool: nonzero (NaN counts, as it is not equal to zero).
        (true, DType::Bool) => {
            let x = x.into_float_value();
            let z = x.get_type().const_float(0.0);
            bx(b.build_float_compare(FloatPredicate::UNE, x, z, ""))?.into()
        }
        (false, DType::Bool) => {
            let x = x.into_int_value();
            bx(b.build_int_compare(IntPredicate::NE, x, x.get_type().const_zero(), ""))?.into()
        }
        // Float to integer truncates and saturates; NaN gives 0.
        (true, DType::I32 | DType::I64) => {
            let x = x.into_float_value();
            let ity = g.reg_type(to).into_int_type();
            let name = format!(
                "llvm.fptosi.sat.{}.{}",
                if to == DType::I32 { "i32" } else { "i64" },
                if from == DType::F32 { "f32" } else { "f64" }
            );
            g.call(&name, ity.into(), &[x.into()])?
        }
        (true, _) => {
            let x = x.into_float_value();
            let ty = g.float_type(to);
            if to == DType::F64 {
                bx(b.build_float_ext(x, ty, ""))?.into()
            } else {
                bx(b.build_float_trunc(x, ty, ""))?.into()
            }
        }
        (false, DType::F32 | DType::F64) => {
            let x = x.into_int_value();
            let ty = g.float_type(to);
            if from == DType::Bool {
                bx(b.build_unsigned_int_to_float(x, ty, ""))?.into()
            } else {
                bx(b.build_signed_int_to_float(x, ty, ""))?.into()
            }
        }
        (false, _) => {
            let x = x.into_int_value();
            let ty = g.reg_type(to).into_int_type();
            let (fw, tw) = (x.get_type().get_bit_width(), ty.get_bit_width());
            if tw > fw {
                if from == DType::Bool {
                    bx(b.build_int_z_extend(x, ty, ""))?.into()
                } else {
                    bx(b.build_int_s_extend(x, ty, ""))?.into()
                }
            } else {
                bx(b.build_int_truncate(x, ty, ""))?.into()
            }
        }
    })
}
