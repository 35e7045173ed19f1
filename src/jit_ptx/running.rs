//! `cumsum` and `cumprod` (and `cumprod`'s gradient) as GPU kernels: one thread per lane along
//! the axis (a grid-stride loop over the lanes), combining in order from the first element, as
//! `perform::index` does, so the sums and products round as the interpreter's do. A lane is
//! sequential: a long single lane runs on one thread (a parallel prefix sum would round
//! differently from numpy).
//!
//! Parameters (docs/gpu.md, "Running"): `out`, `x`, then `lanes` (how many), `len` (the axis),
//! `lane_dims[r - 1]` (the shape without the axis), `x_lane_strides[r - 1]`,
//! `out_lane_strides[r - 1]`, `x_axis_stride`, `out_axis_stride` (elements).

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{row_major, without, Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::values::BasicValueEnum;

/// Which running combination a kernel computes, and along which axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub axis: usize,
    pub sum: bool,
    /// `cumprod`'s gradient (inputs `x`, `g`; `sum` is then false).
    pub grad: bool,
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
    let x = match (inputs, running.grad) {
        ([x], false) => x,
        ([x, g], true) if g.shape() == x.shape() => x,
        _ => {
            return Err(Error::Runtime(
                "a running sum takes one input (its gradient two of one shape)".into(),
            ))
        }
    };
    let (shape, st) = (x.shape().to_vec(), x.strides());
    let a = running.axis;
    if a >= shape.len() {
        return Err(Error::Shape(format!(
            "cumsum/cumprod: axis {a} of an array of rank {}",
            shape.len()
        )));
    }
    let out_st = row_major(&shape);
    let lane = |v: &[i64]| without(v, a);
    let x_st: Vec<i64> = st.iter().map(|&s| s as i64).collect();
    let dims: Vec<i64> = lane(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
    let lanes: i64 = dims.iter().product();
    let len = shape[a] as i64;
    let mut scalars = vec![lanes, len];
    scalars.extend(&dims);
    scalars.extend(lane(&x_st));
    let g_st: Option<Vec<i64>> = inputs
        .get(1)
        .map(|g| g.strides().iter().map(|&s| s as i64).collect());
    if let Some(g_st) = &g_st {
        scalars.extend(lane(g_st));
    }
    scalars.extend(lane(&out_st));
    scalars.push(x_st[a]);
    if let Some(g_st) = &g_st {
        scalars.push(g_st[a]);
    }
    scalars.push(out_st[a]);
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: lanes > 0 && len > 0,
    })
}

/// Defines `cumprod`'s gradient kernel `name` over floats of `dtype` and rank `rank`: per
/// lane, `s[j] = g[j] + x[j + 1] * s[j + 1]` from the end (into the output), then
/// `dx[j] = before * s[j]`, `before = before * x[j]` from the start, as
/// `perform::index::cumprod_grad` computes it. Parameters: `out, x, g, lanes, len,
/// lane_dims[r-1], x_lane_strides[r-1], g_lane_strides[r-1], out_lane_strides[r-1],
/// x_axis_stride, g_axis_stride, out_axis_stride`.
pub fn define_cumprod_grad<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    dtype: DType,
    rank: usize,
) -> Result<()> {
    if !matches!(dtype, DType::F32 | DType::F64) || rank == 0 {
        return Err(Error::Unsupported(format!(
            "{name}: cumprod_grad of {dtype}"
        )));
    }
    let c = rank - 1;
    let k = declare_kernel(
        g,
        name,
        &[false, true, true],
        &[true, true, true],
        2 + 4 * c + 3,
    )?;
    let (dst, x, gy) = (k.pointers[0], k.pointers[1], k.pointers[2]);
    let s = &k.scalars;
    let (lanes, len) = (s[0], s[1]);
    let dims = s[2..2 + c].to_vec();
    let strides = vec![
        s[2 + c..2 + 2 * c].to_vec(),
        s[2 + 2 * c..2 + 3 * c].to_vec(),
        s[2 + 3 * c..2 + 4 * c].to_vec(),
    ];
    let (xs, gs, os) = (s[2 + 4 * c], s[3 + 4 * c], s[4 + 4 * c]);
    let fty = g.float_type(dtype);
    // The running product, in a register once LLVM promotes it (allocated in the entry block).
    let before = bx(g.b.build_alloca(fty, "before"))?;
    let at = |base: inkwell::values::IntValue<'ctx>, j: inkwell::values::IntValue<'ctx>, st| {
        let o = bx(g.b.build_int_mul(j, st, ""))?;
        bx(g.b.build_int_add(base, o, ""))
    };
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, lanes, "lanes", |l| {
        let offs = offsets(g, l, &dims, &strides)?;
        let any =
            bx(g.b.build_int_compare(inkwell::IntPredicate::UGT, len, g.c64(0), ""))?;
        let last = bx(g.b.build_int_sub(len, g.c64(1), "last"))?;
        let last = bx(g.b.build_select(any, last, g.c64(0), ""))?.into_int_value();
        let (body, done) = (
            g.ctx.append_basic_block(k.func, "lane"),
            g.ctx.append_basic_block(k.func, "lane_done"),
        );
        bx(g.b.build_conditional_branch(any, body, done))?;
        g.b.position_at_end(body);
        let v = load(g, gy, dtype, at(offs[1], last, gs)?)?;
        store(g, dst, dtype, at(offs[2], last, os)?, v)?;
        // s from the end: j = last - 1 - t for t in 0..last.
        counted_loop(g, k.func, g.c64(0), g.c64(1), last, "back", |t| {
            let j =
                bx(g.b.build_int_sub(bx(g.b.build_int_sub(last, g.c64(1), ""))?, t, "j"))?;
            let j1 = bx(g.b.build_int_add(j, g.c64(1), ""))?;
            let gv = load(g, gy, dtype, at(offs[1], j, gs)?)?.into_float_value();
            let xv = load(g, x, dtype, at(offs[0], j1, xs)?)?.into_float_value();
            let sv = load(g, dst, dtype, at(offs[2], j1, os)?)?.into_float_value();
            let m = bx(g.b.build_float_mul(xv, sv, ""))?;
            let v = bx(g.b.build_float_add(gv, m, ""))?;
            store(g, dst, dtype, at(offs[2], j, os)?, v.into())
        })?;
        bx(g.b.build_store(before, fty.const_float(1.0)))?;
        counted_loop(g, k.func, g.c64(0), g.c64(1), len, "forth", |j| {
            let b = bx(g.b.build_load(fty, before, "b"))?.into_float_value();
            let o = at(offs[2], j, os)?;
            let sv = load(g, dst, dtype, o)?.into_float_value();
            store(g, dst, dtype, o, bx(g.b.build_float_mul(b, sv, ""))?.into())?;
            let xv = load(g, x, dtype, at(offs[0], j, xs)?)?.into_float_value();
            bx(g.b.build_store(before, bx(g.b.build_float_mul(b, xv, ""))?))?;
            Ok(())
        })?;
        bx(g.b.build_unconditional_branch(done))?;
        g.b.position_at_end(done);
        Ok(())
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}
