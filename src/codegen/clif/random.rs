//! Random ops as Cranelift code: the stream expansion of `random::stream` (Philox4x32-10, then
//! a uniform or Box-Muller value in `f64`) per element, then the op's transform, into a dense
//! output. The values are the interpreter's, bit for bit (`log` and `cos` are the C math
//! library's, which is what the reference's Rust `ln` and `cos` call).
//!
//! # Kernel ABI
//! `extern "C" fn(out: *mut u8, n: i64, seed: i64)`: elements `0..n` of the stream of `seed`
//! (the effective seed: a per-call counter already mixed in), row-major, in the op's dtype.

use super::map::{counted_loop, define_in};
use super::math_clif::ClifMath;
use super::scalar_ops::clif_type;
use crate::error::{Error, Result};
use crate::ir::{DType, RandomDist};
use crate::random::stream::{plan, standard, Transform};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};

/// Generates the kernel of the random op `dist` of dtype `dtype`; returns its id and CLIF text.
pub fn define_random_kernel<M: Module>(
    module: &mut M,
    name: &str,
    dist: RandomDist,
    dtype: DType,
) -> Result<(FuncId, String)> {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    for t in [ptr, types::I64, types::I64] {
        sig.params.push(AbiParam::new(t));
    }
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let mut error = None;
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let (out, n, seed) = (p[0], p[1], p[2]);
        let zero = b.ins().iconst(types::I64, 0);
        let (kind, transform) = plan(dist, dtype);
        let size = dtype.size() as i64;
        counted_loop(&mut b, zero, n, 1, |b, i| {
            let mut e = ClifMath::new(b, module, types::F64, None);
            let v = standard(&mut e, kind, seed, i);
            if let Some(msg) = e.error.take() {
                error = Some(msg);
            }
            let x = apply(b, transform, dtype, v);
            let off = b.ins().imul_imm_s(i, size);
            let at = b.ins().iadd(out, off);
            b.ins().store(MemFlagsData::new().with_notrap(), x, at, 0);
            Ok(())
        })?;
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    if let Some(msg) = error {
        return Err(Error::Unsupported(format!("{name}: {msg}")));
    }
    let text = define_in(module, id, name, &mut ctx)?;
    Ok((id, text))
}

/// The op's transform of the standard value `v` (`f64`), as `random::perform::sample` has it.
fn apply(b: &mut FunctionBuilder, t: Transform, dtype: DType, v: Value) -> Value {
    match t {
        Transform::Affine {
            offset,
            scale,
            f32: true,
        } => {
            // f32 arithmetic on the value rounded to f32, as the reference computes it.
            let v = b.ins().fdemote(types::F32, v);
            let (o, s) = (
                b.ins().f32const(offset as f32),
                b.ins().f32const(scale as f32),
            );
            let m = b.ins().fmul(s, v);
            b.ins().fadd(o, m)
        }
        Transform::Affine { offset, scale, .. } => {
            let (o, s) = (b.ins().f64const(offset), b.ins().f64const(scale));
            let m = b.ins().fmul(s, v);
            b.ins().fadd(o, m)
        }
        Transform::Below { p } => {
            let p = b.ins().f64const(p);
            let hit = b.ins().fcmp(FloatCC::LessThan, v, p);
            match dtype {
                DType::Bool => hit,
                DType::I32 | DType::I64 => b.ins().uextend(clif_type(dtype), hit),
                DType::F16 | DType::BF16 => unreachable!("random ops make no halves (type rule)"),
                DType::F32 | DType::F64 => {
                    let i = b.ins().uextend(types::I32, hit);
                    b.ins().fcvt_from_uint(clif_type(dtype), i)
                }
            }
        }
    }
}
