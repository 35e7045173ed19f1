//! The math expansions' emitter for Cranelift ([`crate::math::Emit`]): the same operation
//! sequence as the Rust evaluators, as scalar code (`f32`, `f64`) or as 128-bit vector code
//! (`f32x4`, `f64x2`). Masks are what comparisons give: `i8` 0/1 in scalar code, lanes of all
//! ones or all zeros (an integer vector of the lane width) in vector code.

use super::operand_table::OperandTable;
use crate::math::arith::ArithEmit;
use crate::math::{Emit, Prec};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, Endianness, InstBuilder, MemFlagsData, Signature, Type, Value,
};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{Linkage, Module};

/// The name generated code imports the reference function `name` under (see
/// `helpers::SYMBOLS`).
pub fn fallback_symbol(name: &str, prec: Prec) -> String {
    let p = if prec == Prec::F32 { "f32" } else { "f64" };
    format!("kiln_ref_{name}_{p}")
}

/// Emits the math expansions ([`crate::math::Emit`]) into the function `b` builds.
pub struct ClifMath<'x, 'f, M: Module> {
    /// The function being built.
    pub b: &'x mut FunctionBuilder<'f>,
    /// The module that reference functions are imported from.
    pub module: &'x mut M,
    /// The float type: `F32`, `F64`, `F32X4` or `F64X2`.
    pub fty: Type,
    /// Set when an import could not be declared (reported by the caller).
    pub error: Option<String>,
    /// Where `fconst_operand` takes vector constants from, in a loop body.
    pub table: Option<&'x mut OperandTable>,
}

impl<'x, 'f, M: Module> ClifMath<'x, 'f, M> {
    /// An emitter of `fty` code into `b`, with no error yet.
    pub fn new(
        b: &'x mut FunctionBuilder<'f>,
        module: &'x mut M,
        fty: Type,
        table: Option<&'x mut OperandTable>,
    ) -> Self {
        ClifMath {
            b,
            module,
            fty,
            error: None,
            table,
        }
    }

    fn ity(&self) -> Type {
        self.fty.as_int()
    }

    fn vector(&self) -> bool {
        self.fty.is_vector()
    }

    /// Vector bit casts must name a lane order; scalar ones must not.
    fn cast_flags(&self) -> MemFlagsData {
        if self.vector() {
            MemFlagsData::new().with_endianness(Endianness::Little)
        } else {
            MemFlagsData::new()
        }
    }

    fn fcmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(cc, a, b)
    }

    /// The C math library's `name` on scalars of the float type (for object files, which
    /// link libm). A failed declaration is kept in `error` and `args[0]` stands in.
    pub fn call_libm(&mut self, name: &str, args: &[Value]) -> Value {
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        sig.params
            .extend(args.iter().map(|_| AbiParam::new(self.fty)));
        sig.returns.push(AbiParam::new(self.fty));
        match self.module.declare_function(name, Linkage::Import, &sig) {
            Ok(id) => {
                let callee = self.module.declare_func_in_func(id, self.b.func);
                let call = self.b.ins().call(callee, args);
                self.b.inst_results(call)[0]
            }
            Err(e) => {
                self.error = Some(format!("{name}: {e}"));
                args[0]
            }
        }
    }
}

impl<M: Module> Emit for ClifMath<'_, '_, M> {
    type F = Value;
    type I = Value;
    type M = Value;

    fn prec(&self) -> Prec {
        if self.fty.lane_type() == types::F32 {
            Prec::F32
        } else {
            Prec::F64
        }
    }

    fn fconst(&mut self, v: f64) -> Value {
        let s = if self.fty.lane_type() == types::F32 {
            self.b.ins().f32const(v as f32)
        } else {
            self.b.ins().f64const(v)
        };
        if self.vector() {
            self.b.ins().splat(self.fty, s)
        } else {
            s
        }
    }

    fn fconst_operand(&mut self, v: f64) -> Value {
        let (b, fty) = (&mut *self.b, self.fty);
        let loaded = match &mut self.table {
            Some(t) if fty.is_vector() => t.operand(b, fty, v),
            _ => None,
        };
        loaded.unwrap_or_else(|| self.fconst(v))
    }

    fn iconst(&mut self, v: i64) -> Value {
        let lane = self.ity().lane_type();
        let s = self.b.ins().iconst(lane, v);
        if self.vector() {
            let ity = self.ity();
            self.b.ins().splat(ity, s)
        } else {
            s
        }
    }

    fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }
    fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }
    fn neg(&mut self, a: Value) -> Value {
        self.b.ins().fneg(a)
    }
    fn abs(&mut self, a: Value) -> Value {
        self.b.ins().fabs(a)
    }
    fn sqrt(&mut self, a: Value) -> Value {
        self.b.ins().sqrt(a)
    }
    fn floor(&mut self, a: Value) -> Value {
        self.b.ins().floor(a)
    }
    fn round(&mut self, a: Value) -> Value {
        self.b.ins().nearest(a)
    }
    fn copysign(&mut self, mag: Value, sign: Value) -> Value {
        if !self.vector() {
            return self.b.ins().fcopysign(mag, sign);
        }
        // x86 has no vector fcopysign in Cranelift: (mag & !s) | (sign & s), s the sign bit.
        let bits = self.fty.lane_bits();
        let s = self.iconst(i64::MIN >> (64 - bits));
        let m = self.to_bits(mag);
        let g = self.to_bits(sign);
        let m = self.b.ins().band_not(m, s);
        let g = self.b.ins().band(g, s);
        let r = self.b.ins().bor(m, g);
        self.from_bits(r)
    }

    fn lt(&mut self, a: Value, b: Value) -> Value {
        self.fcmp(FloatCC::LessThan, a, b)
    }
    fn le(&mut self, a: Value, b: Value) -> Value {
        self.fcmp(FloatCC::LessThanOrEqual, a, b)
    }
    fn eq(&mut self, a: Value, b: Value) -> Value {
        self.fcmp(FloatCC::Equal, a, b)
    }
    fn is_nan(&mut self, a: Value) -> Value {
        self.fcmp(FloatCC::Unordered, a, a)
    }
    fn mand(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn mor(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn mnot(&mut self, a: Value) -> Value {
        if self.vector() {
            self.b.ins().bnot(a)
        } else {
            // 0/1, not all bits.
            self.b.ins().bxor_imm_s(a, 1)
        }
    }
    fn select(&mut self, m: Value, a: Value, b: Value) -> Value {
        if self.vector() {
            let (fty, flags) = (self.fty, self.cast_flags());
            let fm = self.b.ins().bitcast(fty, flags, m);
            self.b.ins().bitselect(fm, a, b)
        } else {
            self.b.ins().select(m, a, b)
        }
    }
    fn iselect(&mut self, m: Value, a: Value, b: Value) -> Value {
        if self.vector() {
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(m, a, b)
        }
    }

    fn to_bits(&mut self, a: Value) -> Value {
        let flags = self.cast_flags();
        let ity = self.ity();
        self.b.ins().bitcast(ity, flags, a)
    }
    fn from_bits(&mut self, a: Value) -> Value {
        let flags = self.cast_flags();
        self.b.ins().bitcast(self.fty, flags, a)
    }
    fn to_int(&mut self, a: Value) -> Value {
        let ity = self.ity();
        self.b.ins().fcvt_to_sint_sat(ity, a)
    }
    fn to_float(&mut self, a: Value) -> Value {
        self.b.ins().fcvt_from_sint(self.fty, a)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().iadd(a, b)
    }
    fn isub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().isub(a, b)
    }
    fn iand(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn ior(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn shl(&mut self, a: Value, bits: u32) -> Value {
        self.b.ins().ishl_imm_s(a, bits as i64)
    }
    fn sshr(&mut self, a: Value, bits: u32) -> Value {
        self.b.ins().sshr_imm_s(a, bits as i64)
    }
    fn ushr(&mut self, a: Value, bits: u32) -> Value {
        self.b.ins().ushr_imm_s(a, bits as i64)
    }
    fn ieq(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().icmp(IntCC::Equal, a, b)
    }
    fn ilt(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().icmp(IntCC::SignedLessThan, a, b)
    }

    fn fallback(&mut self, name: &'static str, m: Value, x: Value, fast: Value) -> Value {
        let lane = self.fty.lane_type();
        let symbol = fallback_symbol(name, self.prec());
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        sig.params.push(AbiParam::new(lane));
        sig.returns.push(AbiParam::new(lane));
        if !super::helpers::is_registered(&symbol) {
            self.error = Some(format!(
                "{symbol}: no such helper is registered with the JIT"
            ));
            return fast;
        }
        let callee = match self.module.declare_function(&symbol, Linkage::Import, &sig) {
            Ok(id) => self.module.declare_func_in_func(id, self.b.func),
            Err(e) => {
                self.error = Some(format!("{symbol}: {e}"));
                return fast;
            }
        };
        let any = if self.vector() {
            self.b.ins().vany_true(m)
        } else {
            m
        };
        let slow = self.b.create_block();
        let join = self.b.create_block();
        self.b.append_block_param(join, self.fty);
        self.b.set_cold_block(slow);
        self.b.ins().brif(any, slow, &[], join, &[fast.into()]);
        self.b.switch_to_block(slow);
        let result = if self.vector() {
            // Every lane through the reference, then keep it only where the mask is set.
            let mut acc = fast;
            for l in 0..self.fty.lane_count() as u8 {
                let xl = self.b.ins().extractlane(x, l);
                let call = self.b.ins().call(callee, &[xl]);
                let r = self.b.inst_results(call)[0];
                acc = self.b.ins().insertlane(acc, r, l);
            }
            self.select(m, acc, fast)
        } else {
            let call = self.b.ins().call(callee, &[x]);
            self.b.inst_results(call)[0]
        };
        self.b.ins().jump(join, &[result.into()]);
        self.b.switch_to_block(join);
        self.b.block_params(join)[0]
    }
}

/// Scalar code only: Cranelift has no vector integer division. `fmod` calls the C math
/// library's `fmod` / `fmodf` (exact, as the interpreter's Rust `%` is): the object files'
/// helpers use it; the JIT's helpers are Rust functions that evaluate the same expansion.
impl<M: Module> ArithEmit for ClifMath<'_, '_, M> {
    fn fmod(&mut self, a: Value, b: Value) -> Value {
        let name = match self.prec() {
            Prec::F32 => "fmodf",
            Prec::F64 => "fmod",
        };
        self.call_libm(name, &[a, b])
    }
    fn idiv(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().sdiv(a, b)
    }
    fn irem(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().srem(a, b)
    }
    fn imul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().imul(a, b)
    }
}
