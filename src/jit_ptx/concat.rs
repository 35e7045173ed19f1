//! `concat` as a GPU kernel: element `i` of the contiguous result is copied from the input
//! whose span along the axis holds `i`'s coordinate there (its bits: any dtype). One launch
//! instead of a host step with a copy each way.
//!
//! Parameters (docs/gpu.md, "Concat"): `out, in_0 .. in_{k-1}`, then `n`, `dims[r]` (the
//! result's shape), `ends[k]` (where each input's span along the axis ends in the result: the
//! running sum of their lengths) and `strides_0[r] .. strides_{k-1}[r]` (elements).

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

/// Defines the kernel `name` joining `inputs` arrays of `dtype` and rank `rank` along `axis`.
pub fn define_concat(
    g: &Gen<'_>,
    name: &str,
    dtype: DType,
    rank: usize,
    axis: usize,
    inputs: usize,
) -> Result<()> {
    if axis >= rank || inputs == 0 {
        return Err(Error::Unsupported(format!(
            "{name}: concat of {inputs} inputs along axis {axis} of rank {rank}"
        )));
    }
    let readonly: Vec<bool> = std::iter::once(false)
        .chain(std::iter::repeat_n(true, inputs))
        .collect();
    let noalias = vec![true; inputs + 1];
    let k = declare_kernel(g, name, &readonly, &noalias, 1 + rank + inputs * (1 + rank))?;
    let (out, ins) = (k.pointers[0], &k.pointers[1..]);
    let s = &k.scalars;
    let n = s[0];
    let dims = &s[1..1 + rank];
    let ends = &s[1 + rank..1 + rank + inputs];
    let strides: Vec<&[IntValue]> = (0..inputs)
        .map(|j| &s[1 + rank + inputs + j * rank..1 + rank + inputs + (j + 1) * rank])
        .collect();
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, n, "elems", |i| {
        // Each input's offset as if `i`'s coordinate along the axis were its own, and that
        // coordinate (a unit stride over the axis).
        let mut ops: Vec<Vec<IntValue>> = strides.iter().map(|s| s.to_vec()).collect();
        ops.push((0..rank).map(|d| g.c64((d == axis) as i64)).collect());
        let mut offs = offsets(g, i, dims, &ops)?;
        let c = offs.pop().expect("the axis coordinate");
        let join = g.ctx.append_basic_block(k.func, "copied");
        let mut loaded: Vec<(BasicValueEnum, inkwell::basic_block::BasicBlock)> = Vec::new();
        for j in 0..inputs {
            // The last input takes what the others do not (its end is the axis's length).
            let take = g.ctx.append_basic_block(k.func, "take");
            let next = g.ctx.append_basic_block(k.func, "next");
            let inside = match j + 1 == inputs {
                true => g.ctx.bool_type().const_all_ones(),
                false => {
                    bx(g.b.build_int_compare(IntPredicate::ULT, c, ends[j], "inside"))?
                }
            };
            bx(g.b.build_conditional_branch(inside, take, next))?;
            g.b.position_at_end(take);
            // Made local: the input's span starts at the previous one's end.
            let first = if j == 0 { g.c64(0) } else { ends[j - 1] };
            let shift = bx(g.b.build_int_mul(first, strides[j][axis], ""))?;
            let at = bx(g.b.build_int_sub(offs[j], shift, "at"))?;
            let v = load(g, ins[j], dtype, at)?;
            let end = g.b.get_insert_block().unwrap_or(take);
            bx(g.b.build_unconditional_branch(join))?;
            loaded.push((v, end));
            g.b.position_at_end(next);
        }
        // Unreachable (the last input takes every remaining element).
        bx(g.b.build_unconditional_branch(join))?;
        let fallthrough = g.b.get_insert_block().unwrap_or(join);
        g.b.position_at_end(join);
        let phi = bx(g.b.build_phi(loaded[0].0.get_type(), "x"))?;
        for (v, bb) in &loaded {
            phi.add_incoming(&[(v, *bb)]);
        }
        let undef: BasicValueEnum = match loaded[0].0.get_type() {
            inkwell::types::BasicTypeEnum::IntType(t) => t.get_undef().into(),
            inkwell::types::BasicTypeEnum::FloatType(t) => t.get_undef().into(),
            _ => return Err(Error::Unsupported(format!("{name}: concat of {dtype}"))),
        };
        phi.add_incoming(&[(&undef, fallthrough)]);
        store(g, out, dtype, i, phi.as_basic_value())
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of a concat along `axis` of `inputs`: the result's shape and `[n, dims..,
/// ends.., strides..]`; inputs that do not join are the interpreter's error.
pub fn concat_launch<T: Operand>(axis: usize, inputs: &[T]) -> Result<Launch> {
    let first = inputs
        .first()
        .ok_or_else(|| Error::Runtime("concat takes at least one input".into()))?;
    let mut shape = first.shape().to_vec();
    let mut ends = Vec::with_capacity(inputs.len());
    let mut end = 0usize;
    for t in inputs {
        let joins = t.shape().len() == shape.len()
            && axis < shape.len()
            && t.shape()
                .iter()
                .zip(&shape)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b);
        if !joins {
            return Err(Error::Shape(format!(
                "concat: shapes {:?} and {:?} do not join along axis {axis}",
                first.shape(),
                t.shape()
            )));
        }
        end += t.shape()[axis];
        ends.push(end as i64);
    }
    shape[axis] = end;
    let n: usize = shape.iter().product();
    let mut scalars = vec![n as i64];
    scalars.extend(shape.iter().map(|&d| d as i64));
    scalars.extend(ends);
    for t in inputs {
        scalars.extend(t.strides().iter().map(|&s| s as i64));
    }
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: n > 0,
    })
}
