//! The math expansions' emitter for LLVM ([`crate::math::Emit`]): the operation sequence the
//! Rust evaluators and the Cranelift backend compute, as scalar LLVM IR. No generic math
//! intrinsic (`llvm.exp`, `llvm.sin`, ...) is ever emitted: NVPTX cannot lower them (it aborts);
//! only `fma`, `sqrt`, `fabs`, `floor`, `rint` and `copysign`, which map to single PTX
//! instructions. Plain `fadd`/`fmul` carry no fast-math flags, so LLVM does not contract them
//! into fma, and NVPTX writes them with `.rn` (which ptxas does not contract either): the bits
//! are those of the CPU backend.
//!
//! The rare-input escape (`fallback`: sin/cos/tan of huge arguments) has no libm to call on the
//! GPU. f32 lanes branch to the f64 expansion (exact reduction for `|x| < 2^30`); f64 lanes
//! beyond that take Payne and Hanek's reduction (`rem_pio2.rs`) into the same kernels.

use super::gen::{bx, Gen};
use crate::error::{Error, Result};
use crate::math::arith::ArithEmit;
use crate::math::{self, Emit, MathFn, Prec};
use inkwell::types::{FloatType, IntType};
use inkwell::values::{FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

pub struct LlvmMath<'g, 'ctx> {
    g: &'g Gen<'ctx>,
    prec: Prec,
    fty: FloatType<'ctx>,
    ity: IntType<'ctx>,
    /// The first builder failure; the caller turns it into an `Err`.
    error: Option<Error>,
}

/// `pow(x, y)` for f64 values, as the shared double-word expansion (`math::pow_f64`).
pub fn emit_pow_f64<'ctx>(
    g: &Gen<'ctx>,
    x: FloatValue<'ctx>,
    y: FloatValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let mut e = LlvmMath::new(g, Prec::F64);
    let r = math::pow_f64(&mut e, x, y);
    match e.error {
        Some(err) => Err(err),
        None => Ok(r),
    }
}

/// `f(x)` for a float value of precision `prec`, as the shared expansion.
pub fn emit_math<'ctx>(
    g: &Gen<'ctx>,
    f: MathFn,
    prec: Prec,
    x: FloatValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let mut e = LlvmMath::new(g, prec);
    let y = math::unary(&mut e, f, x);
    match e.error {
        Some(err) => Err(err),
        None => Ok(y),
    }
}

/// Runs a shared arithmetic expansion (`math::arith`) at precision `prec` (integers: `i32`
/// lanes with `F32`, `i64` with `F64`).
pub fn emit_arith<'ctx, T>(
    g: &Gen<'ctx>,
    prec: Prec,
    f: impl FnOnce(&mut LlvmMath<'_, 'ctx>) -> T,
) -> Result<T> {
    let mut e = LlvmMath::new(g, prec);
    let y = f(&mut e);
    match e.error {
        Some(err) => Err(err),
        None => Ok(y),
    }
}

impl<'g, 'ctx> LlvmMath<'g, 'ctx> {
    fn new(g: &'g Gen<'ctx>, prec: Prec) -> Self {
        let (fty, ity) = match prec {
            Prec::F32 => (g.ctx.f32_type(), g.i32()),
            Prec::F64 => (g.ctx.f64_type(), g.i64()),
        };
        LlvmMath {
            g,
            prec,
            fty,
            ity,
            error: None,
        }
    }

    fn keep<T>(&mut self, r: Result<T>, fallback: T) -> T {
        match r {
            Ok(v) => v,
            Err(e) => {
                self.error.get_or_insert(e);
                fallback
            }
        }
    }

    fn f(
        &mut self,
        r: std::result::Result<FloatValue<'ctx>, inkwell::builder::BuilderError>,
    ) -> FloatValue<'ctx> {
        let undef = self.fty.get_undef();
        self.keep(bx(r), undef)
    }

    fn i(
        &mut self,
        r: std::result::Result<IntValue<'ctx>, inkwell::builder::BuilderError>,
    ) -> IntValue<'ctx> {
        let undef = self.ity.get_undef();
        self.keep(bx(r), undef)
    }

    fn m(
        &mut self,
        r: std::result::Result<IntValue<'ctx>, inkwell::builder::BuilderError>,
    ) -> IntValue<'ctx> {
        let undef = self.g.i1().get_undef();
        self.keep(bx(r), undef)
    }

    fn intrinsic(&mut self, name: &str, args: &[FloatValue<'ctx>]) -> FloatValue<'ctx> {
        let undef = self.fty.get_undef();
        let r = self.g.fcall(name, args);
        self.keep(r, undef)
    }

    fn fcmp(
        &mut self,
        p: FloatPredicate,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
    ) -> IntValue<'ctx> {
        let r = self.g.b.build_float_compare(p, a, b, "");
        self.m(r)
    }

    /// The slow path of `fallback`, in the block it branches to: a call of a function of the
    /// module's own (defined at the first call), so that the rare path is compiled once per
    /// module rather than at every use (a map kernel's vector body has one per lane): it is
    /// most of a kernel's code otherwise, and the time to compile it.
    fn slow_path(&mut self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let g = self.g;
        let prec = match self.prec {
            Prec::F32 => "f32",
            Prec::F64 => "f64",
        };
        let fname = format!("kiln_{name}_huge_{prec}");
        let func = match g.module.get_function(&fname) {
            Some(f) => f,
            None => {
                let here = g.b.get_insert_block().ok_or_else(|| {
                    Error::Unsupported("ptx backend: math outside a function".into())
                })?;
                let ty = self.fty.fn_type(&[self.fty.into()], false);
                let f = g
                    .module
                    .add_function(&fname, ty, Some(inkwell::module::Linkage::Internal));
                let noinline = inkwell::attributes::Attribute::get_named_enum_kind_id("noinline");
                f.add_attribute(
                    inkwell::attributes::AttributeLoc::Function,
                    g.ctx.create_enum_attribute(noinline, 0),
                );
                g.b.position_at_end(g.ctx.append_basic_block(f, "entry"));
                let arg = f
                    .get_first_param()
                    .ok_or_else(|| Error::Unsupported("ptx backend: no parameter".into()))?
                    .into_float_value();
                // (The builder ends where the body ends, which may have branched.)
                let done = self
                    .slow_body(name, arg)
                    .and_then(|y| bx(g.b.build_return(Some(&y))));
                g.b.position_at_end(here);
                done?;
                f
            }
        };
        let r = bx(g.b.build_call(func, &[x.into()], ""))?.try_as_basic_value();
        match r {
            inkwell::values::ValueKind::Basic(v) => Ok(v.into_float_value()),
            inkwell::values::ValueKind::Instruction(_) => Err(Error::Unsupported(
                "ptx backend: the slow path returns no value".into(),
            )),
        }
    }

    /// The body of the slow path of `name` (in the function `slow_path` defines).
    fn slow_body(&mut self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let f = match name {
            "sin" => MathFn::Sin,
            "cos" => MathFn::Cos,
            "tan" => MathFn::Tan,
            other => {
                return Err(Error::Unsupported(format!(
                    "ptx backend: no GPU fallback for {other}"
                )))
            }
        };
        match self.prec {
            Prec::F32 => {
                let g = self.g;
                let wide = bx(g.b.build_float_ext(x, g.ctx.f64_type(), ""))?;
                let y = emit_math(g, f, Prec::F64, wide)?;
                bx(g.b.build_float_trunc(y, self.fty, ""))
            }
            // Payne-Hanek's reduction, then the fast path's kernels; NaN for +-inf.
            Prec::F64 => {
                let g = self.g;
                let (q, r_hi, r_lo) = super::rem_pio2::rem_pio2_large(g, x)?;
                let y = math::trig_of_reduced(self, f, q, r_hi, r_lo);
                let ax = g.fcall("fabs", &[x])?;
                let inf = self.fty.const_float(f64::INFINITY);
                let is_inf = bx(g.b.build_float_compare(FloatPredicate::OEQ, ax, inf, ""))?;
                let nan = self.fty.const_float(f64::NAN);
                Ok(bx(g.b.build_select(is_inf, nan, y, ""))?.into_float_value())
            }
        }
    }
}

impl<'ctx> Emit for LlvmMath<'_, 'ctx> {
    type F = FloatValue<'ctx>;
    type I = IntValue<'ctx>;
    type M = IntValue<'ctx>;

    fn prec(&self) -> Prec {
        self.prec
    }
    fn fconst(&mut self, v: f64) -> Self::F {
        match self.prec {
            Prec::F32 => self.fty.const_float(v as f32 as f64),
            Prec::F64 => self.fty.const_float(v),
        }
    }
    fn iconst(&mut self, v: i64) -> Self::I {
        self.ity.const_int(v as u64, true)
    }
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let r = self.g.b.build_float_add(a, b, "");
        self.f(r)
    }
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let r = self.g.b.build_float_sub(a, b, "");
        self.f(r)
    }
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let r = self.g.b.build_float_mul(a, b, "");
        self.f(r)
    }
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let r = self.g.b.build_float_div(a, b, "");
        self.f(r)
    }
    fn fma(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F {
        self.intrinsic("fma", &[a, b, c])
    }
    fn neg(&mut self, a: Self::F) -> Self::F {
        let r = self.g.b.build_float_neg(a, "");
        self.f(r)
    }
    fn abs(&mut self, a: Self::F) -> Self::F {
        self.intrinsic("fabs", &[a])
    }
    fn sqrt(&mut self, a: Self::F) -> Self::F {
        self.intrinsic("sqrt", &[a])
    }
    fn floor(&mut self, a: Self::F) -> Self::F {
        self.intrinsic("floor", &[a])
    }
    fn round(&mut self, a: Self::F) -> Self::F {
        // rint rounds in the current mode, which on the GPU is always nearest-even.
        self.intrinsic("rint", &[a])
    }
    fn copysign(&mut self, mag: Self::F, sign: Self::F) -> Self::F {
        self.intrinsic("copysign", &[mag, sign])
    }
    fn lt(&mut self, a: Self::F, b: Self::F) -> Self::M {
        self.fcmp(FloatPredicate::OLT, a, b)
    }
    fn le(&mut self, a: Self::F, b: Self::F) -> Self::M {
        self.fcmp(FloatPredicate::OLE, a, b)
    }
    fn eq(&mut self, a: Self::F, b: Self::F) -> Self::M {
        self.fcmp(FloatPredicate::OEQ, a, b)
    }
    fn is_nan(&mut self, a: Self::F) -> Self::M {
        self.fcmp(FloatPredicate::UNO, a, a)
    }
    fn mand(&mut self, a: Self::M, b: Self::M) -> Self::M {
        let r = self.g.b.build_and(a, b, "");
        self.m(r)
    }
    fn mor(&mut self, a: Self::M, b: Self::M) -> Self::M {
        let r = self.g.b.build_or(a, b, "");
        self.m(r)
    }
    fn mnot(&mut self, a: Self::M) -> Self::M {
        let r = self.g.b.build_not(a, "");
        self.m(r)
    }
    fn select(&mut self, m: Self::M, a: Self::F, b: Self::F) -> Self::F {
        let r = self
            .g
            .b
            .build_select(m, a, b, "")
            .map(|v| v.into_float_value());
        self.f(r)
    }
    fn iselect(&mut self, m: Self::M, a: Self::I, b: Self::I) -> Self::I {
        let r = self
            .g
            .b
            .build_select(m, a, b, "")
            .map(|v| v.into_int_value());
        self.i(r)
    }
    fn to_bits(&mut self, a: Self::F) -> Self::I {
        let r = self
            .g
            .b
            .build_bit_cast(a, self.ity, "")
            .map(|v| v.into_int_value());
        self.i(r)
    }
    fn from_bits(&mut self, a: Self::I) -> Self::F {
        let r = self
            .g
            .b
            .build_bit_cast(a, self.fty, "")
            .map(|v| v.into_float_value());
        self.f(r)
    }
    fn to_int(&mut self, a: Self::F) -> Self::I {
        let r = self.g.b.build_float_to_signed_int(a, self.ity, "");
        self.i(r)
    }
    fn to_float(&mut self, a: Self::I) -> Self::F {
        let r = self.g.b.build_signed_int_to_float(a, self.fty, "");
        self.f(r)
    }
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_int_add(a, b, "");
        self.i(r)
    }
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_int_sub(a, b, "");
        self.i(r)
    }
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_and(a, b, "");
        self.i(r)
    }
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_or(a, b, "");
        self.i(r)
    }
    fn shl(&mut self, a: Self::I, bits: u32) -> Self::I {
        let n = self.ity.const_int(bits as u64, false);
        let r = self.g.b.build_left_shift(a, n, "");
        self.i(r)
    }
    fn sshr(&mut self, a: Self::I, bits: u32) -> Self::I {
        let n = self.ity.const_int(bits as u64, false);
        let r = self.g.b.build_right_shift(a, n, true, "");
        self.i(r)
    }
    fn ushr(&mut self, a: Self::I, bits: u32) -> Self::I {
        let n = self.ity.const_int(bits as u64, false);
        let r = self.g.b.build_right_shift(a, n, false, "");
        self.i(r)
    }
    fn ieq(&mut self, a: Self::I, b: Self::I) -> Self::M {
        let r = self.g.b.build_int_compare(IntPredicate::EQ, a, b, "");
        self.m(r)
    }
    fn ilt(&mut self, a: Self::I, b: Self::I) -> Self::M {
        let r = self.g.b.build_int_compare(IntPredicate::SLT, a, b, "");
        self.m(r)
    }

    /// Branches to the slow path only in threads that need it: the common path stays
    /// straight-line code.
    fn fallback(&mut self, name: &'static str, m: Self::M, x: Self::F, fast: Self::F) -> Self::F {
        let r = (|| -> Result<FloatValue<'ctx>> {
            let g = self.g;
            let here = g
                .b
                .get_insert_block()
                .ok_or_else(|| Error::Unsupported("ptx backend: math outside a function".into()))?;
            let func = here.get_parent().ok_or_else(|| {
                Error::Unsupported("ptx backend: block outside a function".into())
            })?;
            let slow = g.ctx.append_basic_block(func, "fallback");
            let join = g.ctx.append_basic_block(func, "fallback_join");
            bx(g.b.build_conditional_branch(m, slow, join))?;
            g.b.position_at_end(slow);
            let y = self.slow_path(name, x)?;
            let slow_end = g.b.get_insert_block().unwrap_or(slow);
            bx(g.b.build_unconditional_branch(join))?;
            g.b.position_at_end(join);
            let phi = bx(g.b.build_phi(self.fty, "fb"))?;
            phi.add_incoming(&[(&fast, here), (&y, slow_end)]);
            Ok(phi.as_basic_value().into_float_value())
        })();
        self.keep(r, fast)
    }
}

/// `fmod` is the exact long division of `float_divmod.rs` (there is no libm on the GPU);
/// LLVM's `sdiv` and `srem` are never reached with a zero divisor or `MIN / -1` (the
/// expansions select those away).
impl<'ctx> ArithEmit for LlvmMath<'_, 'ctx> {
    fn fmod(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let r = super::float_divmod::fmod(self.g, a, b);
        let undef = self.fty.get_undef();
        self.keep(r, undef)
    }
    fn idiv(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_int_signed_div(a, b, "");
        self.i(r)
    }
    fn irem(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_int_signed_rem(a, b, "");
        self.i(r)
    }
    fn imul(&mut self, a: Self::I, b: Self::I) -> Self::I {
        let r = self.g.b.build_int_mul(a, b, "");
        self.i(r)
    }
}
