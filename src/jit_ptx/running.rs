//! `cumsum` and `cumprod` as GPU kernels: one thread per lane along the axis (a grid-stride
//! loop over the lanes), combining in order from the first element, as `perform::index` does,
//! so the sums and products round as the interpreter's do. A lane is sequential: a long single
//! lane runs on one thread (a parallel prefix sum would round differently from numpy).
//!
//! Parameters (docs/gpu.md, "Running"): `out`, `x`, then `lanes` (how many), `len` (the axis),
//! `lane_dims[r - 1]` (the shape without the axis), `x_lane_strides[r - 1]`,
//! `out_lane_strides[r - 1]`, `x_axis_stride`, `out_axis_stride` (elements).

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::values::BasicValueEnum;

/// Which running combination a kernel computes, and along which axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub axis: usize,
    pub sum: bool,
}

/// Defines the running kernel `name` over an input of `x` and rank `rank`, giving `out`
/// (`sum`'s or `prod`'s dtype: i64 for bool).
pub fn define_running<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    x: DType,
    out: DType,
    rank: usize,
    sum: bool,
) -> Result<()> {
    if x.is_half() || rank == 0 {
        return Err(Error::Unsupported(format!(
            "{name}: a running combination of {x} of rank {rank}"
        )));
    }
    let lanes_rank = rank - 1;
    let k = declare_kernel(g, name, &[false, true], &[true, true], 4 + 3 * lanes_rank)?;
    let (dst, src) = (k.pointers[0], k.pointers[1]);
    let s = &k.scalars;
    let (lanes, len) = (s[0], s[1]);
    let dims = s[2..2 + lanes_rank].to_vec();
    let strides = vec![
        s[2 + lanes_rank..2 + 2 * lanes_rank].to_vec(),
        s[2 + 2 * lanes_rank..2 + 3 * lanes_rank].to_vec(),
    ];
    let (x_step, out_step) = (s[2 + 3 * lanes_rank], s[3 + 3 * lanes_rank]);
    let widen = |v: BasicValueEnum<'ctx>| -> Result<BasicValueEnum<'ctx>> {
        Ok(match x {
            DType::Bool => bx(g.b.build_int_z_extend(v.into_int_value(), g.i64(), "wide"))?.into(),
            _ => v,
        })
    };
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, lanes, "lanes", |l| {
        let offs = offsets(g, l, &dims, &strides)?;
        let first = widen(load(g, src, x, offs[0])?)?;
        store(g, dst, out, offs[1], first)?;
        counted_loop(g, k.func, g.c64(1), g.c64(1), len, "along", |j| {
            let xo = bx(g.b.build_int_mul(j, x_step, ""))?;
            let xo = bx(g.b.build_int_add(offs[0], xo, ""))?;
            let oo = bx(g.b.build_int_mul(j, out_step, ""))?;
            let oo = bx(g.b.build_int_add(offs[1], oo, ""))?;
            let e = widen(load(g, src, x, xo)?)?;
            // The running value so far: the element this thread wrote last.
            let before = bx(g.b.build_int_sub(oo, out_step, ""))?;
            let acc = load(g, dst, out, before)?;
            let next: BasicValueEnum = if out.is_float() {
                let (a, b) = (acc.into_float_value(), e.into_float_value());
                if sum {
                    bx(g.b.build_float_add(a, b, "sum"))?.into()
                } else {
                    bx(g.b.build_float_mul(a, b, "prod"))?.into()
                }
            } else {
                let (a, b) = (acc.into_int_value(), e.into_int_value());
                if sum {
                    bx(g.b.build_int_add(a, b, "sum"))?.into()
                } else {
                    bx(g.b.build_int_mul(a, b, "prod"))?.into()
                }
            };
            store(g, dst, out, oo, next)
        })
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of a running kernel along `axis` on `[x]`: the output (x's shape, contiguous)
/// and `[lanes, len, lane_dims.., x_lane_strides.., out_lane_strides.., x_axis_stride,
/// out_axis_stride]`.
pub fn running_launch<T: Operand>(running: Running, inputs: &[T]) -> Result<Launch> {
    let [x] = inputs else {
        return Err(Error::Runtime("a running sum takes one input".into()));
    };
    let (shape, st) = (x.shape().to_vec(), x.strides());
    let a = running.axis;
    if a >= shape.len() {
        return Err(Error::Shape(format!(
            "cumsum/cumprod: axis {a} of an array of rank {}",
            shape.len()
        )));
    }
    let mut out_st = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        out_st[d] = out_st[d + 1] * shape[d + 1] as i64;
    }
    let lane = |v: &[i64]| -> Vec<i64> { (0..v.len()).filter(|&d| d != a).map(|d| v[d]).collect() };
    let x_st: Vec<i64> = st.iter().map(|&s| s as i64).collect();
    let dims: Vec<i64> = lane(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
    let lanes: i64 = dims.iter().product();
    let len = shape[a] as i64;
    let mut scalars = vec![lanes, len];
    scalars.extend(&dims);
    scalars.extend(lane(&x_st));
    scalars.extend(lane(&out_st));
    scalars.extend([x_st[a], out_st[a]]);
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: lanes > 0 && len > 0,
    })
}
