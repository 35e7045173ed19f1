//! Max and average pooling and their gradients as GPU kernels, with `perform::pool`'s bits:
//! the window's taps are unrolled (the window, strides and padding are constants of the op)
//! and visited in `perform`'s order. A window of more taps than `MAX_TAPS` unrolls to (a
//! whole image's, one near 2^64) has no kernel: the step runs on the host.
//!
//! - Pooling: one thread per output element; a max starts from the window's first element that
//!   is not padding and takes a later one that is greater, or a NaN where it holds none; an
//!   average adds the taps inside the input from zero, then divides by the window's size.
//! - Gradients: one thread per input element, adding what each window it is in sends it, in
//!   `perform`'s order: for an average, `g / area` of each window, taps in order; for a max,
//!   `g` of each window whose maximum it is (found again as the forward pass finds it), in
//!   the windows' row-major order, which is the taps' reverse order for one element.
//!
//! Parameters (docs/gpu.md, "Pooling"): `out`, then the inputs (`x`; the gradient: `x`, `g`),
//! then `n`, `dims[r]` (the thread's index space: the output, or for a gradient the input),
//! `x_strides[r]`, for a gradient `g_strides[r]`, then `h`, `w` (the input's last two dims)
//! and `oh`, `ow` (the output's).

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store, window_of};
use super::launch::{Launch, Operand};
use super::scalar::konst;
use crate::error::{Error, Result};
use crate::ir::window::{Pool2d, PoolKind};
use crate::ir::DType;
use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

/// The most taps a kernel unrolls: a window of up to 32 x 32 (a max's gradient visits every
/// tap of every window an element is in, so it unrolls a window's taps squared).
const MAX_TAPS: usize = 1024;

/// Whether `pool`'s kernel (or its gradient's) unrolls few enough taps to be compiled: a larger
/// window (a whole image's average, a window near 2^64 over a padded image) runs on the host.
pub fn unrolls(pool: &Pool2d, grad: bool) -> bool {
    let taps = pool.window[0].checked_mul(pool.window[1]);
    let unrolled = match (grad, pool.kind) {
        (true, PoolKind::Max) => taps.and_then(|t| t.checked_mul(t)),
        _ => taps,
    };
    unrolled.is_some_and(|t| t <= MAX_TAPS)
}

/// The running maximum `m` after element `e` (`inside` the input): `perform`'s rule, with
/// `started` false until the first element inside.
fn max_step<'ctx>(
    g: &Gen<'ctx>,
    dtype: DType,
    (m, started): (BasicValueEnum<'ctx>, IntValue<'ctx>),
    e: BasicValueEnum<'ctx>,
    inside: IntValue<'ctx>,
) -> Result<(IntValue<'ctx>, BasicValueEnum<'ctx>, IntValue<'ctx>)> {
    // A greater element, or a NaN over a number: the sort order's, NaN last.
    let better = super::sort::before(g, dtype, m, e)?;
    let fresh = bx(g.b.build_not(started, ""))?;
    let wins = bx(g.b.build_or(fresh, better, ""))?;
    let take = bx(g.b.build_and(inside, wins, "take"))?;
    let m = bx(g.b.build_select(take, e, m, "m"))?;
    let started = bx(g.b.build_or(started, inside, "started"))?;
    Ok((take, m, started))
}

/// The coordinates `(lead offset, row, column)` of index `i` over `dims`, the lead offset
/// through `strides` (the last two dims left out).
fn coordinates<'ctx>(
    g: &Gen<'ctx>,
    i: IntValue<'ctx>,
    dims: &[IntValue<'ctx>],
    strides: &[Vec<IntValue<'ctx>>],
) -> Result<(Vec<IntValue<'ctx>>, IntValue<'ctx>, IntValue<'ctx>)> {
    let r = dims.len();
    let unit = |d: usize| (0..r).map(|e| g.c64((d == e) as i64)).collect::<Vec<_>>();
    let mut ops: Vec<Vec<IntValue>> = strides
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s[r - 2] = g.c64(0);
            s[r - 1] = g.c64(0);
            s
        })
        .collect();
    ops.push(unit(r - 2));
    ops.push(unit(r - 1));
    let mut at = offsets(g, i, dims, &ops)?;
    let col = at.pop().expect("two coordinates");
    let row = at.pop().expect("two coordinates");
    Ok((at, row, col))
}

/// Defines the pooling kernel `name` (or, with `grad`, its gradient) over `dtype` and rank
/// `rank`.
pub fn define_pool<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    pool: &Pool2d,
    dtype: DType,
    rank: usize,
    grad: bool,
) -> Result<()> {
    let max = pool.kind == PoolKind::Max;
    if rank < 2 || dtype.is_half() || (!dtype.is_float() && (grad || !max)) || dtype == DType::Bool
    {
        return Err(Error::Unsupported(format!(
            "{name}: pooling {dtype} of rank {rank}"
        )));
    }
    let n_in = 1 + grad as usize;
    let mut readonly = vec![false];
    readonly.extend(std::iter::repeat_n(true, n_in));
    let k = declare_kernel(
        g,
        name,
        &readonly,
        &vec![true; 1 + n_in],
        1 + r_params(rank, n_in),
    )?;
    let (out, x) = (k.pointers[0], k.pointers[1]);
    let s = &k.scalars;
    let n = s[0];
    let dims = s[1..1 + rank].to_vec();
    let strides: Vec<Vec<IntValue>> = (0..n_in)
        .map(|j| s[1 + rank * (1 + j)..1 + rank * (2 + j)].to_vec())
        .collect();
    let tail = 1 + rank * (1 + n_in);
    let (h, w, oh, ow) = (s[tail], s[tail + 1], s[tail + 2], s[tail + 3]);
    let xs = &strides[0];
    let (kh, kw) = (pool.window[0], pool.window[1]);
    let c64 = |v: i64| g.c64(v);
    let area = konst(g, dtype, pool.area());
    let (start, step) = grid_stride(g)?;
    // The element of the input at window position (oy, ox), tap (ti, tj) of the plane at `lead`
    // (an offset of x), and whether it is inside the input.
    let tap =
        |lead: IntValue<'ctx>, oy: IntValue<'ctx>, ox: IntValue<'ctx>, ti: usize, tj: usize| {
            let iy = bx(g.b.build_int_mul(oy, c64(pool.stride[0] as i64), ""))?;
            let iy =
                bx(g.b.build_int_add(iy, c64(ti as i64 - pool.padding[0] as i64), ""))?;
            let ix = bx(g.b.build_int_mul(ox, c64(pool.stride[1] as i64), ""))?;
            let ix =
                bx(g.b.build_int_add(ix, c64(tj as i64 - pool.padding[1] as i64), ""))?;
            let in_y = bx(g.b.build_int_compare(IntPredicate::ULT, iy, h, ""))?;
            let in_x = bx(g.b.build_int_compare(IntPredicate::ULT, ix, w, ""))?;
            let inside = bx(g.b.build_and(in_y, in_x, "inside"))?;
            let off = bx(g.b.build_int_add(
                bx(g.b.build_int_mul(iy, xs[rank - 2], ""))?,
                bx(g.b.build_int_mul(ix, xs[rank - 1], ""))?,
                "",
            ))?;
            let off = bx(g.b.build_int_add(lead, off, ""))?;
            // Padding reads the plane's first element, which is not used.
            let safe = bx(g.b.build_select(inside, off, lead, ""))?.into_int_value();
            Ok::<_, Error>((load(g, x, dtype, safe)?, inside))
        };
    counted_loop(g, k.func, start, step, n, "elems", |i| {
        let (lead, row, col) = coordinates(g, i, &dims, &strides)?;
        let v = if !grad {
            // Pooling: (row, col) is the window.
            let (mut m, mut started) = (konst(g, dtype, 0.0), g.i1().const_zero());
            for ti in 0..kh {
                for tj in 0..kw {
                    let (e, inside) = tap(lead[0], row, col, ti, tj)?;
                    if max {
                        (_, m, started) = max_step(g, dtype, (m, started), e, inside)?;
                    } else {
                        let sum = bx(g.b.build_float_add(
                            m.into_float_value(),
                            e.into_float_value(),
                            "",
                        ))?;
                        m = bx(g.b.build_select(inside, sum.into(), m, ""))?;
                    }
                }
            }
            if max {
                m
            } else {
                bx(g.b.build_float_div(m.into_float_value(), area.into_float_value(), ""))?.into()
            }
        } else {
            // A gradient: (row, col) is the input element; the planes' lead offsets of x and g.
            let gs = &strides[1];
            let gp = k.pointers[2];
            let mut total = konst(g, dtype, 0.0);
            let order: Vec<(usize, usize)> = if max {
                (0..kh)
                    .rev()
                    .flat_map(|ti| (0..kw).rev().map(move |tj| (ti, tj)))
                    .collect()
            } else {
                (0..kh)
                    .flat_map(|ti| (0..kw).map(move |tj| (ti, tj)))
                    .collect()
            };
            for (ti, tj) in order {
                // The window whose tap (ti, tj) is this element: o = (i + pad - t) / stride.
                let window = |c: IntValue<'ctx>, a: usize, t: usize, bound: IntValue<'ctx>| {
                    let num =
                        bx(g.b.build_int_add(c, c64(pool.padding[a] as i64 - t as i64), ""))?;
                    window_of(g, num, pool.stride[a], bound)
                };
                let (oy, ok_y) = window(row, 0, ti, oh)?;
                let (ox, ok_x) = window(col, 1, tj, ow)?;
                let valid = bx(g.b.build_and(ok_y, ok_x, "valid"))?;
                let oy = bx(g.b.build_select(valid, oy, c64(0), ""))?.into_int_value();
                let ox = bx(g.b.build_select(valid, ox, c64(0), ""))?.into_int_value();
                let g_off = bx(g.b.build_int_add(
                    bx(g.b.build_int_mul(oy, gs[rank - 2], ""))?,
                    bx(g.b.build_int_mul(ox, gs[rank - 1], ""))?,
                    "",
                ))?;
                let g_off = bx(g.b.build_int_add(lead[1], g_off, ""))?;
                let gv = load(g, gp, dtype, g_off)?.into_float_value();
                let send = if max {
                    // Which tap wins window (oy, ox), as the forward pass finds it.
                    let (mut m, mut started) = (konst(g, dtype, 0.0), g.i1().const_zero());
                    let mut winner = c64(-1);
                    for ui in 0..kh {
                        for uj in 0..kw {
                            let (e, inside) = tap(lead[0], oy, ox, ui, uj)?;
                            let take;
                            (take, m, started) = max_step(g, dtype, (m, started), e, inside)?;
                            winner =
                                bx(g.b.build_select(take, c64((ui * kw + uj) as i64), winner, ""))?
                                    .into_int_value();
                        }
                    }
                    let mine = bx(g.b.build_int_compare(
                        IntPredicate::EQ,
                        winner,
                        c64((ti * kw + tj) as i64),
                        "",
                    ))?;
                    let mine = bx(g.b.build_and(mine, valid, ""))?;
                    (mine, gv)
                } else {
                    let share = bx(g.b.build_float_div(gv, area.into_float_value(), ""))?;
                    (valid, share)
                };
                let sum = bx(g.b.build_float_add(total.into_float_value(), send.1, ""))?;
                total = bx(g.b.build_select(send.0, sum.into(), total, ""))?;
            }
            total
        };
        store(g, out, dtype, i, v)
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The scalars after `n`: `dims`, the inputs' strides, and the four spatial sizes.
fn r_params(rank: usize, n_in: usize) -> usize {
    rank * (1 + n_in) + 4
}

/// The launch of `pool` (or its gradient, on `[x, g]`) on `inputs`.
pub fn pool_launch<T: Operand>(pool: &Pool2d, grad: bool, inputs: &[T]) -> Result<Launch> {
    let x = inputs
        .first()
        .ok_or_else(|| Error::Runtime("pooling takes an input".into()))?;
    let xs = x.shape().to_vec();
    let r = xs.len();
    if r < 2 {
        return Err(Error::Shape(format!(
            "pooling takes rank 2 or more, got {xs:?}"
        )));
    }
    pool.check().map_err(Error::Shape)?;
    let o = pool.output([xs[r - 2], xs[r - 1]]).map_err(Error::Shape)?;
    let mut out = xs.clone();
    out[r - 2] = o[0];
    out[r - 1] = o[1];
    let space = if grad {
        let gy = inputs.get(1).ok_or_else(|| {
            Error::Runtime("a pooling gradient takes the output's gradient".into())
        })?;
        if gy.shape() != out.as_slice() {
            return Err(Error::Shape(format!(
                "{}: a gradient of shape {:?} for an output of {out:?}",
                pool.kind.grad_name(),
                gy.shape()
            )));
        }
        xs.clone()
    } else {
        out
    };
    let n: usize = space.iter().product();
    let mut scalars = vec![n as i64];
    scalars.extend(space.iter().map(|&d| d as i64));
    for t in inputs {
        scalars.extend(t.strides().iter().map(|&s| s as i64));
    }
    scalars.extend([xs[r - 2], xs[r - 1], o[0], o[1]].map(|v| v as i64));
    Ok(Launch {
        out_shape: space,
        scalars,
        work: n > 0,
    })
}
