//! Lowering of one scalar-program instruction to Cranelift, as scalar code or as 128-bit
//! vector code (4 lanes of 32 bits or 2 lanes of 64 bits).
//!
//! Bools are `i8` 0/1 in scalar code and lane masks (all ones or all zeros, of the program's
//! lane width) in vector code; they never touch memory in vector code (a program that loads or
//! stores bools runs scalar).

use super::half;
use super::math_clif::ClifMath;
use super::operand_table::OperandTable;
use crate::error::{Error, Result};
use crate::ir::scalar::{ScalarOp, ScalarProgram};
use crate::ir::{BinaryOp, DType, UnaryOp};
use crate::math::{self, MathFn};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, Endianness, InstBuilder, MemFlagsData, Signature, Type, Value,
};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{Linkage, Module};

/// The lane width of a vectorized program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    /// `f32x4`, `i32x4`, bool masks `i32x4`.
    X32,
    /// `f64x2`, `i64x2`, bool masks `i64x2`.
    X64,
}

impl Lanes {
    /// The number of lanes in a 128-bit vector: 4 or 2.
    pub fn count(self) -> i64 {
        match self {
            Lanes::X32 => 4,
            Lanes::X64 => 2,
        }
    }
}

/// The Cranelift type a scalar of dtype `d` has (halves are their `i16` bits, bools `i8`).
pub fn clif_type(d: DType) -> Type {
    match d {
        DType::Bool => types::I8,
        DType::I32 => types::I32,
        DType::I64 => types::I64,
        DType::F32 => types::F32,
        DType::F64 => types::F64,
        // The bits (see `half`).
        DType::F16 | DType::BF16 => types::I16,
    }
}

pub(super) fn suffix(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I32 => "i32",
        _ => "i64",
    }
}

/// The expansion in `crate::math` that computes `u`, if there is one.
pub fn math_fn(u: UnaryOp) -> Option<MathFn> {
    math::of_unary(u)
}

/// Whether `program` expands any math (whose vector constants come from an operand table).
pub fn uses_math(program: &ScalarProgram) -> bool {
    program
        .insts
        .iter()
        .any(|i| matches!(i.op, ScalarOp::Unary(u) if math_fn(u).is_some()))
}

fn is_transcendental(u: UnaryOp) -> bool {
    matches!(
        u,
        UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Tan
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Erf
    )
}

/// The lane width `program` can run at in vector code, or `None` when it must run scalar:
/// it mixes 32- and 64-bit values, loads or stores bools, or uses an op with no vector form
/// (integer division, `pow`, a transcendental without an expansion). Halves run in 32-bit
/// lanes (their bits in each lane's low half) where `halves` says the caller's loads and
/// stores convert them (map kernels), and convert to and from f32 only.
pub fn vector_lanes(program: &ScalarProgram, halves: bool) -> Option<Lanes> {
    let mut lanes = None;
    for inst in &program.insts {
        let l = match inst.dtype {
            DType::F16 | DType::BF16 if !halves => return None,
            DType::F16 | DType::BF16 => Some(Lanes::X32),
            DType::Bool => None,
            DType::I32 | DType::F32 => Some(Lanes::X32),
            DType::I64 | DType::F64 => Some(Lanes::X64),
        };
        if let Some(l) = l {
            if lanes.is_some_and(|x| x != l) {
                return None;
            }
            lanes = Some(l);
        }
        match &inst.op {
            ScalarOp::Input(_) if inst.dtype == DType::Bool => return None,
            ScalarOp::Unary(u) if is_transcendental(*u) && math_fn(*u).is_none() => return None,
            ScalarOp::Binary(BinaryOp::FloorDiv | BinaryOp::Mod | BinaryOp::Pow) => return None,
            ScalarOp::Cast(to) => {
                let from = program.insts[inst.args[0]].dtype;
                let fits = if from.is_half() || to.is_half() {
                    // Halves convert to and from f32 only, in 32-bit lanes.
                    from == DType::F32 || *to == DType::F32
                } else {
                    from == DType::Bool || *to == DType::Bool || from.size() == to.size()
                };
                if !fits {
                    return None;
                }
            }
            _ => {}
        }
    }
    if program
        .outputs
        .iter()
        .any(|&o| program.insts[o].dtype == DType::Bool)
    {
        return None;
    }
    lanes
}

/// Emits scalar-program instructions, scalar (`lanes == None`) or vector.
pub struct OpGen<'x, 'f, M: Module> {
    /// The function being built.
    pub b: &'x mut FunctionBuilder<'f>,
    /// The module that helper functions are imported from.
    pub module: &'x mut M,
    /// The vector lane width, or `None` for scalar code.
    pub lanes: Option<Lanes>,
    /// The function's operand constants, in a vector loop body (see `operand_table`).
    pub table: Option<&'x mut OperandTable>,
}

/// The type a value of dtype `d` has in code running on `lanes` (scalars with `None`).
pub fn lane_type(lanes: Option<Lanes>, d: DType) -> Type {
    match (lanes, d) {
        (None, d) => clif_type(d),
        (Some(Lanes::X32), DType::F32) => types::F32X4,
        (Some(Lanes::X32), _) => types::I32X4,
        (Some(Lanes::X64), DType::F64) => types::F64X2,
        (Some(Lanes::X64), _) => types::I64X2,
    }
}

impl<'x, 'f, M: Module> OpGen<'x, 'f, M> {
    /// The type a value of dtype `d` has in this code.
    pub fn ty(&self, d: DType) -> Type {
        lane_type(self.lanes, d)
    }

    fn vector(&self) -> bool {
        self.lanes.is_some()
    }

    fn splat(&mut self, ty: Type, s: Value) -> Value {
        if ty.is_vector() {
            self.b.ins().splat(ty, s)
        } else {
            s
        }
    }

    /// A constant of dtype `d`.
    pub fn konst(&mut self, d: DType, v: f64) -> Value {
        let ty = self.ty(d);
        let s = match d {
            DType::F32 => self.b.ins().f32const(v as f32),
            DType::F64 => self.b.ins().f64const(v),
            // Vector lanes hold a half's bits in 32 bits (see `vector_lanes`).
            DType::F16 | DType::BF16 => {
                let bits = crate::ir::half_bits(d, v);
                self.b.ins().iconst(ty.lane_type(), bits as i64)
            }
            DType::Bool if self.vector() => {
                let lane = ty.lane_type();
                self.b.ins().iconst(lane, -((v != 0.0) as i64))
            }
            DType::Bool => self.b.ins().iconst(types::I8, (v != 0.0) as i64),
            _ => self.b.ins().iconst(ty.lane_type(), v as i64),
        };
        self.splat(ty, s)
    }

    fn cast_flags(&self) -> MemFlagsData {
        if self.vector() {
            MemFlagsData::new().with_endianness(Endianness::Little)
        } else {
            MemFlagsData::new()
        }
    }

    /// `a` where the bool `m` holds, else `b` (values of type `ty`).
    fn sel(&mut self, m: Value, a: Value, b: Value) -> Value {
        if !self.vector() {
            return self.b.ins().select(m, a, b);
        }
        let ty = self.b.func.dfg.value_type(a);
        let m = if ty.is_float() || ty.lane_type().is_float() {
            let flags = self.cast_flags();
            self.b.ins().bitcast(ty, flags, m)
        } else {
            m
        };
        self.b.ins().bitselect(m, a, b)
    }

    /// Emits instruction `inst` of `program` with its argument registers `regs`; inputs are
    /// loaded by the caller.
    pub fn inst(&mut self, program: &ScalarProgram, r: usize, regs: &[Value]) -> Result<Value> {
        let inst = &program.insts[r];
        let a = |i: usize| regs[inst.args[i]];
        let arg_dtype = |i: usize| program.insts[inst.args[i]].dtype;
        Ok(match &inst.op {
            ScalarOp::Input(_) => unreachable!("inputs are loaded by the loop"),
            ScalarOp::Const(c) => self.konst(inst.dtype, c.0),
            ScalarOp::Unary(u) => self.unary(*u, arg_dtype(0), a(0))?,
            ScalarOp::Binary(o) => self.binary(*o, arg_dtype(0), a(0), a(1))?,
            ScalarOp::Select => self.sel(a(0), a(1), a(2)),
            ScalarOp::Cast(to) => self.cast(arg_dtype(0), *to, a(0)),
        })
    }

    /// A call of the helper `name` (registered in `helpers::SYMBOLS`) on scalars of type `ty`.
    fn call(&mut self, name: &str, ty: Type, args: &[Value]) -> Result<Value> {
        if self.vector() {
            return Err(Error::Unsupported(format!("{name} in vector code")));
        }
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        sig.params.extend(args.iter().map(|_| AbiParam::new(ty)));
        sig.returns.push(AbiParam::new(ty));
        if !super::helpers::is_registered(name) {
            return Err(Error::Unsupported(format!(
                "{name}: no such helper is registered with the JIT"
            )));
        }
        let id = self
            .module
            .declare_function(name, Linkage::Import, &sig)
            .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        let inst = self.b.ins().call(f, args);
        Ok(self.b.inst_results(inst)[0])
    }

    fn math(&mut self, f: MathFn, d: DType, x: Value) -> Result<Value> {
        let fty = self.ty(d);
        let mut e = ClifMath::new(self.b, self.module, fty, self.table.as_deref_mut());
        let y = math::unary(&mut e, f, x);
        match e.error.take() {
            Some(err) => Err(Error::Unsupported(err)),
            None => Ok(y),
        }
    }

    fn unary(&mut self, u: UnaryOp, d: DType, x: Value) -> Result<Value> {
        let ty = self.ty(d);
        if d == DType::Bool {
            return Ok(match (u, self.vector()) {
                (UnaryOp::Not, true) => self.b.ins().bnot(x),
                (UnaryOp::Not, false) => self.b.ins().icmp_imm_s(IntCC::Equal, x, 0),
                _ => return Err(Error::Unsupported(format!("{} on bool", u.name()))),
            });
        }
        if d.is_int() {
            let zero = self.konst(d, 0.0);
            return Ok(match u {
                UnaryOp::Neg => self.b.ins().ineg(x),
                UnaryOp::Abs => self.b.ins().iabs(x),
                UnaryOp::Sign => {
                    let pos = self.b.ins().icmp(IntCC::SignedGreaterThan, x, zero);
                    let neg = self.b.ins().icmp(IntCC::SignedLessThan, x, zero);
                    if self.vector() {
                        // Masks are -1 where set: (-1 if negative) - (-1 if positive).
                        self.b.ins().isub(neg, pos)
                    } else {
                        let p = self.b.ins().uextend(ty, pos);
                        let m = self.b.ins().uextend(ty, neg);
                        self.b.ins().isub(p, m)
                    }
                }
                UnaryOp::Square => self.b.ins().imul(x, x),
                UnaryOp::Relu => self.b.ins().smax(x, zero),
                UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => x,
                _ => return Err(Error::Unsupported(format!("{} on {d}", u.name()))),
            });
        }
        if let Some(f) = math_fn(u) {
            return self.math(f, d, x);
        }
        let one = self.konst(d, 1.0);
        let zero = self.konst(d, 0.0);
        let helper = |name: &str| format!("kiln_{name}_{}", suffix(d));
        let lane = ty.lane_type();
        Ok(match u {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                self.b.ins().fdiv(one, s)
            }
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Ceil => self.b.ins().ceil(x),
            UnaryOp::Round => self.b.ins().nearest(x),
            UnaryOp::Square => self.b.ins().fmul(x, x),
            UnaryOp::Reciprocal => self.b.ins().fdiv(one, x),
            UnaryOp::Sign => {
                // 1 above zero, -1 below, 0 for either zero, NaN stays NaN.
                let minus = self.konst(d, -1.0);
                let gt = self.b.ins().fcmp(FloatCC::GreaterThan, x, zero);
                let lt = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                let eq = self.b.ins().fcmp(FloatCC::Equal, x, zero);
                let z_or_nan = self.sel(eq, zero, x);
                let neg = self.sel(lt, minus, z_or_nan);
                self.sel(gt, one, neg)
            }
            UnaryOp::Relu => {
                // x where x > 0 or x is NaN, else 0.
                let keep = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, x, zero);
                self.sel(keep, x, zero)
            }
            u if is_transcendental(u) => self.call(&helper(u.name()), lane, &[x])?,
            _ => return Err(Error::Unsupported(format!("{} on {d}", u.name()))),
        })
    }

    fn binary(&mut self, o: BinaryOp, d: DType, x: Value, y: Value) -> Result<Value> {
        let lane = self.ty(d).lane_type();
        if o.is_comparison() {
            return Ok(if d.is_float() {
                let cc = match o {
                    BinaryOp::Lt => FloatCC::LessThan,
                    BinaryOp::Le => FloatCC::LessThanOrEqual,
                    BinaryOp::Gt => FloatCC::GreaterThan,
                    BinaryOp::Ge => FloatCC::GreaterThanOrEqual,
                    BinaryOp::Eq => FloatCC::Equal,
                    _ => FloatCC::NotEqual, // true for NaN, as numpy
                };
                self.b.ins().fcmp(cc, x, y)
            } else {
                // bool compares as unsigned (false < true; masks too), integers signed.
                let signed = d != DType::Bool;
                let cc = match (o, signed) {
                    (BinaryOp::Lt, true) => IntCC::SignedLessThan,
                    (BinaryOp::Le, true) => IntCC::SignedLessThanOrEqual,
                    (BinaryOp::Gt, true) => IntCC::SignedGreaterThan,
                    (BinaryOp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
                    (BinaryOp::Lt, false) => IntCC::UnsignedLessThan,
                    (BinaryOp::Le, false) => IntCC::UnsignedLessThanOrEqual,
                    (BinaryOp::Gt, false) => IntCC::UnsignedGreaterThan,
                    (BinaryOp::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
                    (BinaryOp::Eq, _) => IntCC::Equal,
                    _ => IntCC::NotEqual,
                };
                self.b.ins().icmp(cc, x, y)
            });
        }
        let helper = |name: &str| format!("kiln_{name}_{}", suffix(d));
        Ok(match (d, o) {
            (DType::Bool, BinaryOp::And) => self.b.ins().band(x, y),
            (DType::Bool, BinaryOp::Or) => self.b.ins().bor(x, y),
            (DType::Bool, _) => return Err(Error::Unsupported(format!("{} on bool", o.name()))),
            (_, BinaryOp::FloorDiv) => self.call(&helper("floordiv"), lane, &[x, y])?,
            (_, BinaryOp::Mod) => self.call(&helper("mod"), lane, &[x, y])?,
            (_, BinaryOp::Pow) => self.call(&helper("pow"), lane, &[x, y])?,
            (DType::F32 | DType::F64, o) => match o {
                BinaryOp::Add => self.b.ins().fadd(x, y),
                BinaryOp::Sub => self.b.ins().fsub(x, y),
                BinaryOp::Mul => self.b.ins().fmul(x, y),
                BinaryOp::Div => self.b.ins().fdiv(x, y),
                // numpy's rule (see `perform::elementwise`): x where it is greater (smaller)
                // or NaN, else y; Cranelift's fmax/fmin order -0.0 below +0.0 instead.
                BinaryOp::Maximum | BinaryOp::Minimum => {
                    let cc = if o == BinaryOp::Maximum {
                        FloatCC::GreaterThan
                    } else {
                        FloatCC::LessThan
                    };
                    let wins = self.b.ins().fcmp(cc, x, y);
                    let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                    let keep = self.b.ins().bor(wins, nan);
                    self.sel(keep, x, y)
                }
                _ => return Err(Error::Unsupported(format!("{} on {d}", o.name()))),
            },
            (_, o) => match o {
                BinaryOp::Add => self.b.ins().iadd(x, y),
                BinaryOp::Sub => self.b.ins().isub(x, y),
                BinaryOp::Mul => self.b.ins().imul(x, y),
                BinaryOp::Maximum => self.b.ins().smax(x, y),
                BinaryOp::Minimum => self.b.ins().smin(x, y),
                _ => return Err(Error::Unsupported(format!("{} on {d}", o.name()))),
            },
        })
    }

    /// A cast from or to a half, through `f32` (exact from a half; to a half, one rounding:
    /// from `f64` and the integers by way of `f64` and round-to-odd, as `ir::f16_of` does; an
    /// i64 rounded to odd into `f64` too, `math::half::i64_to_f64_odd`).
    fn cast_half(&mut self, from: DType, to: DType, x: Value) -> Value {
        let vector = self.vector();
        // In vector code the only casts of halves are from and to f32 (`vector_lanes`), and
        // a half's bits already fill a 32-bit lane.
        let fty = if vector { types::F32X4 } else { types::F32 };
        if from.is_half() {
            let bits = if vector {
                x
            } else {
                self.b.ins().uextend(types::I32, x)
            };
            let mut e = ClifMath::new(self.b, self.module, fty, self.table.as_deref_mut());
            let f = match from {
                DType::F16 => math::half::f16_to_f32(&mut e, bits),
                _ => math::half::bf16_to_f32(&mut e, bits),
            };
            return self.cast(DType::F32, to, f);
        }
        let f = match from {
            DType::F32 => x,
            DType::Bool => self.cast(from, DType::F32, x),
            // Rounded to odd on the way, so that the half's rounding is the only one.
            DType::I64 => {
                let mut e =
                    ClifMath::new(self.b, self.module, types::F64, self.table.as_deref_mut());
                let wide = math::half::i64_to_f64_odd(&mut e, x);
                half::f64_to_f32_odd(self.b, wide)
            }
            _ => {
                let wide = self.cast(from, DType::F64, x);
                half::f64_to_f32_odd(self.b, wide)
            }
        };
        let mut e = ClifMath::new(self.b, self.module, fty, self.table.as_deref_mut());
        let bits = match to {
            DType::F16 => math::half::f32_to_f16(&mut e, f),
            _ => math::half::f32_to_bf16(&mut e, f),
        };
        if vector {
            bits
        } else {
            self.b.ins().ireduce(types::I16, bits)
        }
    }

    fn cast(&mut self, from: DType, to: DType, x: Value) -> Value {
        let ty = self.ty(to);
        if from == to {
            return x;
        }
        if from.is_half() || to.is_half() {
            return self.cast_half(from, to, x);
        }
        let vector = self.vector();
        match (from.is_float(), to) {
            // To bool: nonzero (NaN counts, as it is not equal to zero).
            (true, DType::Bool) => {
                let z = self.konst(from, 0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, x, z)
            }
            (false, DType::Bool) => {
                let z = self.konst(from, 0.0);
                self.b.ins().icmp(IntCC::NotEqual, x, z)
            }
            // From a mask: 1 (or 1.0) where set.
            (false, _) if vector && from == DType::Bool => {
                let one = self.konst(to, 1.0);
                if to.is_float() {
                    let flags = self.cast_flags();
                    let bits = self.b.ins().bitcast(ty.as_int(), flags, one);
                    let m = self.b.ins().band(x, bits);
                    self.b.ins().bitcast(ty, flags, m)
                } else {
                    self.b.ins().band(x, one)
                }
            }
            // Float to integer truncates and saturates; NaN gives 0.
            (true, DType::I32 | DType::I64) => self.b.ins().fcvt_to_sint_sat(ty, x),
            (true, _) => {
                if to == DType::F64 {
                    self.b.ins().fpromote(ty, x)
                } else {
                    self.b.ins().fdemote(ty, x)
                }
            }
            (false, DType::F32 | DType::F64) => {
                if from == DType::Bool {
                    self.b.ins().fcvt_from_uint(ty, x)
                } else {
                    self.b.ins().fcvt_from_sint(ty, x)
                }
            }
            (false, _) => {
                let (fw, tw) = (clif_type(from).bits(), ty.bits());
                if tw > fw {
                    if from == DType::Bool {
                        self.b.ins().uextend(ty, x)
                    } else {
                        self.b.ins().sextend(ty, x)
                    }
                } else {
                    self.b.ins().ireduce(ty, x)
                }
            }
        }
    }
}
