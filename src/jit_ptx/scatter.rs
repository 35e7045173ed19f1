//! `scatter_add` and `scatter_set` as GPU kernels, deterministic: one thread per column of the
//! array (a position on every axis but the scattered one), which copies its column and then
//! applies the updates of that column in index order. A thread owns its column, so no two
//! threads write one element and no atomics are needed: repeated positions add up (or the last
//! write stays) in index order, as `perform::index` does, giving its bits. Parallelism is the
//! number of columns (an embedding's width times the rows outside the axis).
//!
//! Parameters (docs/gpu.md, "Scatter"): `out`, `x`, `index`, `updates`, `flag` (as a
//! gather's: set to 1 on an index out of range), then `cols`, `len` (the axis), `m` (indices),
//! `col_dims[r-1]`, `x_col_strides[r-1]`, `out_col_strides[r-1]`, `u_col_strides[r-1]`,
//! `x_axis_stride`, `out_axis_stride`, `index_dims[q]`, `index_strides[q]`,
//! `u_index_strides[q]` (elements).

use super::gather::at_position;
use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{row_major, without, Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::DType;
use crate::tensor::{Tensor, TensorRef};
use inkwell::values::BasicValueEnum;

/// Which scatter a kernel computes, along which axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scatter {
    pub axis: usize,
    pub add: bool,
}

/// Defines the scatter kernel `name` for an array of `data` and rank `rank`, indices of
/// `index` and rank `q`.
pub fn define_scatter<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    data: DType,
    index: DType,
    (rank, q): (usize, usize),
    add: bool,
) -> Result<()> {
    if !matches!(index, DType::I32 | DType::I64) || rank == 0 || (add && data.is_half()) {
        return Err(Error::Unsupported(format!(
            "{name}: a scatter of {data} at indices of {index}, rank {rank}"
        )));
    }
    let c = rank - 1;
    let k = declare_kernel(
        g,
        name,
        &[false, true, true, true, false],
        &[true, true, true, true, true],
        3 + 4 * c + 2 + 3 * q,
    )?;
    let [out, x, idx, upd, flag] = [0, 1, 2, 3, 4].map(|i| k.pointers[i]);
    let s = &k.scalars;
    let (cols, len, m) = (s[0], s[1], s[2]);
    let at = |from: usize, n: usize| s[from..from + n].to_vec();
    let col_dims = at(3, c);
    let col_strides = vec![at(3 + c, c), at(3 + 2 * c, c), at(3 + 3 * c, c)];
    let (x_step, out_step) = (s[3 + 4 * c], s[4 + 4 * c]);
    let idx_dims = at(5 + 4 * c, q);
    let idx_strides = vec![at(5 + 4 * c + q, q), at(5 + 4 * c + 2 * q, q)];
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, cols, "columns", |l| {
        let offs = offsets(g, l, &col_dims, &col_strides)?;
        counted_loop(g, k.func, g.c64(0), g.c64(1), len, "copy", |p| {
            let from = bx(g.b.build_int_mul(p, x_step, ""))?;
            let from = bx(g.b.build_int_add(offs[0], from, ""))?;
            let to = bx(g.b.build_int_mul(p, out_step, ""))?;
            let to = bx(g.b.build_int_add(offs[1], to, ""))?;
            let v = load(g, x, data, from)?;
            store(g, out, data, to, v)
        })?;
        counted_loop(g, k.func, g.c64(0), g.c64(1), m, "updates", |j| {
            let io = offsets(g, j, &idx_dims, &idx_strides)?;
            at_position(g, k.func, (idx, index, io[0]), len, flag, |p| {
                let to = bx(g.b.build_int_mul(p, out_step, ""))?;
                let to = bx(g.b.build_int_add(offs[1], to, "to"))?;
                let from = bx(g.b.build_int_add(offs[2], io[1], "from"))?;
                let u = load(g, upd, data, from)?;
                let v: BasicValueEnum = if add {
                    let old = load(g, out, data, to)?;
                    if data.is_float() {
                        let (a, b) = (old.into_float_value(), u.into_float_value());
                        bx(g.b.build_float_add(a, b, "sum"))?.into()
                    } else {
                        let (a, b) = (old.into_int_value(), u.into_int_value());
                        bx(g.b.build_int_add(a, b, "sum"))?.into()
                    }
                } else {
                    u
                };
                store(g, out, data, to, v)
            })
        })
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of a scatter along `axis` on `[x, index, updates]`: `x`'s shape and the
/// parameters after the flag.
pub fn scatter_launch<T: Operand>(scatter: Scatter, inputs: &[T]) -> Result<Launch> {
    let [x, idx, upd] = inputs else {
        return Err(Error::Runtime(
            "a scatter takes an array, indices and updates".into(),
        ));
    };
    let (xs, a) = (x.shape().to_vec(), scatter.axis);
    let (is, q) = (idx.shape().to_vec(), idx.shape().len());
    let mut want = xs[..a.min(xs.len())].to_vec();
    want.extend(&is);
    want.extend(xs.get(a + 1..).unwrap_or(&[]));
    if a >= xs.len() || upd.shape() != want.as_slice() {
        return Err(Error::Shape(format!(
            "scatter: an array of {xs:?}, indices of {is:?} along axis {a} and updates of {:?}",
            upd.shape()
        )));
    }
    let wide = |v: Vec<isize>| -> Vec<i64> { v.into_iter().map(|s| s as i64).collect() };
    let (x_st, i_st, u_st) = (wide(x.strides()), wide(idx.strides()), wide(upd.strides()));
    let out_st = row_major(&xs);
    let col = |v: &[i64]| without(v, a);
    let dims: Vec<i64> = col(&xs.iter().map(|&d| d as i64).collect::<Vec<_>>());
    let cols: i64 = dims.iter().product();
    let m: i64 = is.iter().product::<usize>() as i64;
    let mut u_col = u_st[..a].to_vec();
    u_col.extend(&u_st[a + q..]);
    let mut scalars = vec![cols, xs[a] as i64, m];
    scalars.extend(&dims);
    scalars.extend(col(&x_st));
    scalars.extend(col(&out_st));
    scalars.extend(u_col);
    scalars.extend([x_st[a], out_st[a]]);
    scalars.extend(is.iter().map(|&d| d as i64));
    scalars.extend(&i_st);
    scalars.extend(&u_st[a..a + q]);
    Ok(Launch {
        out_shape: xs,
        scalars,
        work: cols > 0,
    })
}

/// The scatter on the host (`perform`): for a scatter with no column, whose indices are still
/// checked, and to name the index a kernel found out of range.
pub fn scatter_on_host(scatter: Scatter, inputs: &[TensorRef<'_>]) -> Result<Tensor> {
    let op = if scatter.add {
        crate::ir::Op::ScatterAdd { axis: scatter.axis }
    } else {
        crate::ir::Op::ScatterSet { axis: scatter.axis }
    };
    let owned: Vec<Tensor> = inputs.iter().map(|t| t.to_owned()).collect();
    let refs: Vec<&Tensor> = owned.iter().collect();
    let mut out = crate::perform::perform(&op, &refs)?;
    Ok(out.remove(0))
}
