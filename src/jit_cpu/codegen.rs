//! Cranelift code for map kernels: one loop over the elements of the output, evaluating a
//! scalar program per element.
//!
//! # Kernel ABI
//! `extern "C" fn(rows: i64, cols: i64, ptrs: *const *mut u8, outer: *const i64, inner: *const i64)`:
//! the output is seen as a `rows x cols` matrix (its last dim is `cols`); `ptrs` holds one base
//! pointer per input, then one per output; element `(i, k)` of operand `j` is at
//! `ptrs[j] + i * outer[j] + k * inner[j]` (byte strides; 0 where the operand is broadcast).
//! Bools are one byte, 0 or 1.

use super::helpers::SYMBOLS;
use crate::error::{Error, Result};
use crate::ir::scalar::{ScalarOp, ScalarProgram};
use crate::ir::{BinaryOp, DType, UnaryOp};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Signature, Type, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};

/// The signature of a compiled map kernel.
pub type KernelFn = unsafe extern "C" fn(i64, i64, *const *mut u8, *const i64, *const i64);

fn clif_type(d: DType) -> Type {
    match d {
        DType::Bool => types::I8,
        DType::I32 => types::I32,
        DType::I64 => types::I64,
        DType::F32 => types::F32,
        DType::F64 => types::F64,
    }
}

fn suffix(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I32 => "i32",
        _ => "i64",
    }
}

/// A JIT module with every helper registered, ready for kernels.
pub fn new_module() -> Result<JITModule> {
    let mut flags = settings::builder();
    for (k, v) in [
        ("opt_level", "speed"),
        ("is_pic", "false"),
        ("use_colocated_libcalls", "false"),
    ] {
        flags
            .set(k, v)
            .map_err(|e| Error::Unsupported(format!("cranelift setting {k}: {e}")))?;
    }
    let isa = cranelift_native::builder()
        .map_err(|e| Error::Unsupported(format!("cranelift does not support this host: {e}")))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| Error::Unsupported(format!("cranelift: {e}")))?;
    let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    for &(name, ptr) in SYMBOLS {
        jb.symbol(name, ptr);
    }
    Ok(JITModule::new(jb))
}

/// Generates the kernel for `program` with `n_in` inputs into `module` and returns its id and
/// its CLIF text (for the `clif` dump).
pub fn define_map_kernel<M: Module>(
    module: &mut M,
    name: &str,
    program: &ScalarProgram,
    n_in: usize,
) -> Result<(FuncId, String)> {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend([
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
    ]);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        let row_header = b.create_block();
        let row_body = b.create_block();
        let col_header = b.create_block();
        let body = b.create_block();
        let row_next = b.create_block();
        let exit = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.append_block_param(row_header, types::I64);
        b.append_block_param(col_header, types::I64);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let (rows, cols, ptrs, outer, inner) = (p[0], p[1], p[2], p[3], p[4]);
        let n_out = program.outputs.len();
        let flags = MemFlagsData::trusted();
        let mut bases = Vec::new();
        let mut outer_steps = Vec::new();
        let mut inner_steps = Vec::new();
        for j in 0..n_in + n_out {
            bases.push(
                b.ins()
                    .load(ptr, flags, ptrs, (j * ptr.bytes() as usize) as i32),
            );
            outer_steps.push(b.ins().load(types::I64, flags, outer, (j * 8) as i32));
            inner_steps.push(b.ins().load(types::I64, flags, inner, (j * 8) as i32));
        }
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(row_header, &[zero.into()]);

        b.switch_to_block(row_header);
        let i = b.block_params(row_header)[0];
        let more_rows = b.ins().icmp(IntCC::SignedLessThan, i, rows);
        b.ins().brif(more_rows, row_body, &[], exit, &[]);

        // Each operand's address of element (i, 0).
        b.switch_to_block(row_body);
        let row_bases: Vec<Value> = (0..n_in + n_out)
            .map(|j| {
                let off = b.ins().imul(i, outer_steps[j]);
                b.ins().iadd(bases[j], off)
            })
            .collect();
        let zero_col = b.ins().iconst(types::I64, 0);
        b.ins().jump(col_header, &[zero_col.into()]);

        b.switch_to_block(col_header);
        let k = b.block_params(col_header)[0];
        let more = b.ins().icmp(IntCC::SignedLessThan, k, cols);
        b.ins().brif(more, body, &[], row_next, &[]);

        b.switch_to_block(row_next);
        let next_row = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(row_header, &[next_row.into()]);

        b.switch_to_block(body);
        let addr = |b: &mut FunctionBuilder, j: usize| {
            let off = b.ins().imul(k, inner_steps[j]);
            b.ins().iadd(row_bases[j], off)
        };
        let mut regs: Vec<Value> = Vec::with_capacity(program.insts.len());
        for inst in &program.insts {
            let ty = clif_type(inst.dtype);
            let a = |i: usize| regs[inst.args[i]];
            let arg_dtype = |i: usize| program.insts[inst.args[i]].dtype;
            let v = match &inst.op {
                ScalarOp::Input(i) => {
                    let p = addr(&mut b, *i);
                    b.ins().load(ty, flags, p, 0)
                }
                ScalarOp::Const(c) => match inst.dtype {
                    DType::F32 => b.ins().f32const(c.0 as f32),
                    DType::F64 => b.ins().f64const(c.0),
                    DType::Bool => b.ins().iconst(types::I8, (c.0 != 0.0) as i64),
                    _ => b.ins().iconst(ty, c.0 as i64),
                },
                ScalarOp::Unary(u) => unary(module, &mut b, *u, arg_dtype(0), a(0))?,
                ScalarOp::Binary(o) => binary(module, &mut b, *o, arg_dtype(0), a(0), a(1))?,
                ScalarOp::Select => b.ins().select(a(0), a(1), a(2)),
                ScalarOp::Cast(to) => cast(&mut b, arg_dtype(0), *to, a(0)),
            };
            regs.push(v);
        }
        for (o, &r) in program.outputs.iter().enumerate() {
            let p = addr(&mut b, n_in + o);
            b.ins().store(flags, regs[r], p, 0);
        }
        let next = b.ins().iadd_imm_s(k, 1);
        b.ins().jump(col_header, &[next.into()]);

        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    let text = ctx.func.display().to_string();
    module
        .define_function(id, &mut ctx)
        .map_err(|e| Error::Unsupported(format!("{name}: cranelift: {e:?}")))?;
    module.clear_context(&mut ctx);
    Ok((id, text))
}

/// A call of the helper `name` (registered in `SYMBOLS`) with arguments of type `ty`.
fn call<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    name: &str,
    ty: Type,
    args: &[Value],
) -> Result<Value> {
    let mut sig = Signature::new(module.isa().default_call_conv());
    sig.params.extend(args.iter().map(|_| AbiParam::new(ty)));
    sig.returns.push(AbiParam::new(ty));
    let id = module
        .declare_function(name, Linkage::Import, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let f = module.declare_func_in_func(id, b.func);
    let inst = b.ins().call(f, args);
    Ok(b.inst_results(inst)[0])
}

fn fconst(b: &mut FunctionBuilder, ty: Type, v: f64) -> Value {
    if ty == types::F32 {
        b.ins().f32const(v as f32)
    } else {
        b.ins().f64const(v)
    }
}

fn unary<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    u: UnaryOp,
    d: DType,
    x: Value,
) -> Result<Value> {
    let ty = clif_type(d);
    if d == DType::Bool {
        return Ok(match u {
            UnaryOp::Not => b.ins().icmp_imm_s(IntCC::Equal, x, 0),
            _ => return Err(Error::Unsupported(format!("{} on bool", u.name()))),
        });
    }
    if d.is_int() {
        let zero = b.ins().iconst(ty, 0);
        return Ok(match u {
            UnaryOp::Neg => b.ins().ineg(x),
            UnaryOp::Abs => b.ins().iabs(x),
            UnaryOp::Sign => {
                let pos = b.ins().icmp(IntCC::SignedGreaterThan, x, zero);
                let neg = b.ins().icmp(IntCC::SignedLessThan, x, zero);
                let p = b.ins().uextend(ty, pos);
                let m = b.ins().uextend(ty, neg);
                b.ins().isub(p, m)
            }
            UnaryOp::Square => b.ins().imul(x, x),
            UnaryOp::Relu => b.ins().smax(x, zero),
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => x,
            _ => return Err(Error::Unsupported(format!("{} on {d}", u.name()))),
        });
    }
    let one = fconst(b, ty, 1.0);
    let zero = fconst(b, ty, 0.0);
    let helper = |name: &str| format!("kiln_{name}_{}", suffix(d));
    Ok(match u {
        UnaryOp::Neg => b.ins().fneg(x),
        UnaryOp::Abs => b.ins().fabs(x),
        UnaryOp::Sqrt => b.ins().sqrt(x),
        UnaryOp::Rsqrt => {
            let s = b.ins().sqrt(x);
            b.ins().fdiv(one, s)
        }
        UnaryOp::Floor => b.ins().floor(x),
        UnaryOp::Ceil => b.ins().ceil(x),
        UnaryOp::Round => b.ins().nearest(x),
        UnaryOp::Square => b.ins().fmul(x, x),
        UnaryOp::Reciprocal => b.ins().fdiv(one, x),
        UnaryOp::Sign => {
            // 1 above zero, -1 below, 0 for either zero, NaN stays NaN.
            let minus = fconst(b, ty, -1.0);
            let gt = b.ins().fcmp(FloatCC::GreaterThan, x, zero);
            let lt = b.ins().fcmp(FloatCC::LessThan, x, zero);
            let eq = b.ins().fcmp(FloatCC::Equal, x, zero);
            let z_or_nan = b.ins().select(eq, zero, x);
            let neg = b.ins().select(lt, minus, z_or_nan);
            b.ins().select(gt, one, neg)
        }
        UnaryOp::Relu => {
            // x where x > 0 or x is NaN, else 0.
            let keep = b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, x, zero);
            b.ins().select(keep, x, zero)
        }
        UnaryOp::Exp => call(module, b, &helper("exp"), ty, &[x])?,
        UnaryOp::Log => call(module, b, &helper("log"), ty, &[x])?,
        UnaryOp::Log1p => call(module, b, &helper("log1p"), ty, &[x])?,
        UnaryOp::Expm1 => call(module, b, &helper("expm1"), ty, &[x])?,
        UnaryOp::Sin => call(module, b, &helper("sin"), ty, &[x])?,
        UnaryOp::Cos => call(module, b, &helper("cos"), ty, &[x])?,
        UnaryOp::Tan => call(module, b, &helper("tan"), ty, &[x])?,
        UnaryOp::Tanh => call(module, b, &helper("tanh"), ty, &[x])?,
        UnaryOp::Sigmoid => call(module, b, &helper("sigmoid"), ty, &[x])?,
        UnaryOp::Erf => call(module, b, &helper("erf"), ty, &[x])?,
        UnaryOp::Not => return Err(Error::Unsupported(format!("not on {d}"))),
    })
}

fn binary<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    o: BinaryOp,
    d: DType,
    x: Value,
    y: Value,
) -> Result<Value> {
    let ty = clif_type(d);
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
            b.ins().fcmp(cc, x, y)
        } else {
            // bool compares as unsigned (false < true), integers signed.
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
            b.ins().icmp(cc, x, y)
        });
    }
    let helper = |name: &str| format!("kiln_{name}_{}", suffix(d));
    Ok(match (d, o) {
        (DType::Bool, BinaryOp::And) => b.ins().band(x, y),
        (DType::Bool, BinaryOp::Or) => b.ins().bor(x, y),
        (DType::Bool, _) => return Err(Error::Unsupported(format!("{} on bool", o.name()))),
        (_, BinaryOp::FloorDiv) => call(module, b, &helper("floordiv"), ty, &[x, y])?,
        (_, BinaryOp::Mod) => call(module, b, &helper("mod"), ty, &[x, y])?,
        (_, BinaryOp::Pow) => call(module, b, &helper("pow"), ty, &[x, y])?,
        (DType::F32 | DType::F64, o) => match o {
            BinaryOp::Add => b.ins().fadd(x, y),
            BinaryOp::Sub => b.ins().fsub(x, y),
            BinaryOp::Mul => b.ins().fmul(x, y),
            BinaryOp::Div => b.ins().fdiv(x, y),
            BinaryOp::Maximum => b.ins().fmax(x, y),
            BinaryOp::Minimum => b.ins().fmin(x, y),
            _ => return Err(Error::Unsupported(format!("{} on {d}", o.name()))),
        },
        (_, o) => match o {
            BinaryOp::Add => b.ins().iadd(x, y),
            BinaryOp::Sub => b.ins().isub(x, y),
            BinaryOp::Mul => b.ins().imul(x, y),
            BinaryOp::Maximum => b.ins().smax(x, y),
            BinaryOp::Minimum => b.ins().smin(x, y),
            _ => return Err(Error::Unsupported(format!("{} on {d}", o.name()))),
        },
    })
}

fn cast(b: &mut FunctionBuilder, from: DType, to: DType, x: Value) -> Value {
    let ty = clif_type(to);
    if from == to {
        return x;
    }
    match (from.is_float(), to) {
        // To bool: nonzero (NaN counts, as it is not equal to zero).
        (true, DType::Bool) => {
            let z = fconst(b, clif_type(from), 0.0);
            b.ins().fcmp(FloatCC::NotEqual, x, z)
        }
        (false, DType::Bool) => b.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
        // Float to integer truncates and saturates; NaN gives 0.
        (true, DType::I32 | DType::I64) => b.ins().fcvt_to_sint_sat(ty, x),
        (true, _) => {
            if to == DType::F64 {
                b.ins().fpromote(ty, x)
            } else {
                b.ins().fdemote(ty, x)
            }
        }
        (false, DType::F32 | DType::F64) => {
            if from == DType::Bool {
                b.ins().fcvt_from_uint(ty, x)
            } else {
                b.ins().fcvt_from_sint(ty, x)
            }
        }
        (false, _) => {
            let (fw, tw) = (clif_type(from).bits(), ty.bits());
            if tw > fw {
                if from == DType::Bool {
                    b.ins().uextend(ty, x)
                } else {
                    b.ins().sextend(ty, x)
                }
            } else {
                b.ins().ireduce(ty, x)
            }
        }
    }
}
