//! Random ops as GPU kernels: element `i` of the op's stream as `random::stream` expands it
//! over the emitter (the effective seed, Philox4x32-10, the 24- or 53-bit uniform), then the
//! op's transform, so each element has the CPU's bits: uniform, normal (Box-Muller with
//! kiln's own `log` and `cos`, the CPU's expansions) and Bernoulli ops.
//!
//! Parameters (docs/gpu.md): `out` (global pointer), then the per-call counter's pointer (an
//! `i64[]` array) when the op has one, then `n` (`i64`, the elements to write). The op's seed
//! is a constant of the kernel.

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, store};
use super::math_llvm::emit_arith;
use crate::error::Result;
use crate::ir::{DType, RandomDist};
use crate::math::{Emit, Prec};
use crate::random::stream::{mix_counter, plan, standard, Transform};
use inkwell::values::{BasicValueEnum, FloatValue};
use inkwell::FloatPredicate;

/// Defines the kernel `name` of the random op `dist` with `seed`, of dtype `dtype`, reading a
/// per-call counter when `counter`.
pub fn define_random<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    dist: RandomDist,
    seed: u64,
    dtype: DType,
    counter: bool,
) -> Result<()> {
    let readonly = [false].into_iter().chain(counter.then_some(true));
    let readonly: Vec<bool> = readonly.collect();
    let noalias = vec![true; readonly.len()];
    let k = declare_kernel(g, name, &readonly, &noalias, 1)?;
    let out = k.pointers[0];
    let n = k.scalars[0];
    let seed = match k.pointers.get(1) {
        Some(&c) => {
            let c = bx(g.b.build_load(g.i64(), c, "counter"))?.into_int_value();
            emit_arith(g, Prec::F64, |e| {
                let s = e.iconst(seed as i64);
                mix_counter(e, s, c)
            })?
        }
        None => g.c64(seed as i64),
    };
    let (start, step) = grid_stride(g)?;
    let (kind, transform) = plan(dist, dtype);
    counted_loop(g, k.func, start, step, n, "elems", |i| {
        let v = emit_arith(g, Prec::F64, |e| standard(e, kind, seed, i))?;
        let x = apply(g, transform, dtype, v)?;
        store(g, out, dtype, i, x)
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The op's transform of the standard value `v` (`f64`), as `random::perform::sample` has it.
fn apply<'ctx>(
    g: &Gen<'ctx>,
    t: Transform,
    dtype: DType,
    v: FloatValue<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    Ok(match t {
        Transform::Affine {
            offset,
            scale,
            f32: true,
        } => {
            // f32 arithmetic on the value rounded to f32, as the reference computes it.
            let f = g.ctx.f32_type();
            let v = bx(g.b.build_float_trunc(v, f, ""))?;
            let m =
                bx(g.b.build_float_mul(f.const_float(scale as f32 as f64), v, ""))?;
            bx(g.b.build_float_add(f.const_float(offset as f32 as f64), m, ""))?.into()
        }
        Transform::Affine { offset, scale, .. } => {
            let f = g.ctx.f64_type();
            let m = bx(g.b.build_float_mul(f.const_float(scale), v, ""))?;
            bx(g.b.build_float_add(f.const_float(offset), m, ""))?.into()
        }
        Transform::Below { p } => {
            let p = g.ctx.f64_type().const_float(p);
            let hit = bx(g.b.build_float_compare(FloatPredicate::OLT, v, p, "hit"))?;
            match dtype {
                DType::Bool => hit.into(),
                DType::I32 | DType::I64 => {
                    let ty = g.reg_type(dtype).into_int_type();
                    bx(g.b.build_int_z_extend(hit, ty, ""))?.into()
                }
                DType::F32 | DType::F64 => {
                    bx(g.b.build_unsigned_int_to_float(hit, g.float_type(dtype), ""))?.into()
                }
                DType::F16 | DType::BF16 => unreachable!("random ops make no halves (type rule)"),
            }
        }
    })
}
