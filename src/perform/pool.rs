//! Max and average pooling over the last two axes, with their gradients: tap by tap over
//! runs of outputs, blocks of planes on rayon's threads. The geometry (how many windows fit)
//! is `ir::window`'s.

use super::window::{dense, err, floats_only, slice, ConvElem};
use crate::error::Error;
use crate::ir::window::{tap_outputs, taps_reaching, Pool2d, PoolKind};
use crate::tensor::{Tensor, TensorRef};
use ndarray::{ArrayD, ArrayViewD, IxDyn};

/// Elements max pooling compares: NaN wins, as in numpy's `max`.
trait PoolElem: Copy + PartialOrd + Default + Send + Sync {
    fn is_nan(self) -> bool {
        false
    }
}
impl PoolElem for i32 {}
impl PoolElem for i64 {}
impl PoolElem for f32 {
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}
impl PoolElem for f64 {
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

/// The pooled planes: `planes` of `[h, w]` in, `[oh, ow]` out.
struct Planes {
    pool: Pool2d,
    input: [usize; 2],
    out: [usize; 2],
}

impl Planes {
    fn new(pool: &Pool2d, shape: &[usize]) -> Result<Planes, Error> {
        let name = pool.kind.name();
        pool.check().map_err(err)?;
        let r = shape.len();
        if r < 2 {
            return Err(err(format!("{name}: takes rank 2 or more, got {shape:?}")));
        }
        let input = [shape[r - 2], shape[r - 1]];
        Ok(Planes {
            pool: *pool,
            input,
            out: pool.output(input).map_err(err)?,
        })
    }

    fn out_shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut s = shape.to_vec();
        let r = s.len();
        s[r - 2] = self.out[0];
        s[r - 1] = self.out[1];
        s
    }

    fn in_len(&self) -> usize {
        self.input[0] * self.input[1]
    }

    fn out_len(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// For each tap `(i, j)` of the window in row-major order, each output row `y` whose tap
    /// row is in the plane and the outputs `lo..hi` of that row whose tap column is:
    /// `f(output offset of (y, lo), input offset of its tap, hi - lo)`; along the run the
    /// output advances by 1 and the input by the stride.
    fn each_tap_run(&self, mut f: impl FnMut(usize, usize, usize)) {
        let Pool2d {
            window,
            stride,
            padding,
            ..
        } = self.pool;
        let [h, w] = self.input;
        let [oh, ow] = self.out;
        for i in taps_reaching(window[0], 1, stride[0], padding[0], h, oh) {
            for j in taps_reaching(window[1], 1, stride[1], padding[1], w, ow) {
                let (lo, hi) = tap_outputs(j, padding[1], stride[1], w, ow);
                if lo == hi {
                    continue;
                }
                let first = lo * stride[1] + j - padding[1];
                for y in 0..oh {
                    let Some(iy) = (y * stride[0] + i).checked_sub(padding[0]) else {
                        continue;
                    };
                    if iy < h {
                        f(y * ow + lo, iy * w + first, hi - lo);
                    }
                }
            }
        }
    }

    /// The input rows or columns (along axis `a`, 0 for rows) under output `o`'s window,
    /// clipped to the plane: never empty, since padding is at most half the window. No sum
    /// wraps: `o * stride + window` is at most the padded size, which `Pool2d::output`
    /// checked.
    fn under(&self, o: usize, a: usize) -> std::ops::Range<usize> {
        let (s, p) = (o * self.pool.stride[a], self.pool.padding[a]);
        s.saturating_sub(p)
            ..(s + self.pool.window[a])
                .saturating_sub(p)
                .min(self.input[a])
    }

    /// Each output of a plane with the input rows and columns under its window, in the
    /// outputs' row-major order: `f(output offset, rows, columns)`.
    fn each_window(
        &self,
        mut f: impl FnMut(usize, std::ops::Range<usize>, std::ops::Range<usize>),
    ) {
        let [oh, ow] = self.out;
        for y in 0..oh {
            let rows = self.under(y, 0);
            for x in 0..ow {
                f(y * ow + x, rows.clone(), self.under(x, 1));
            }
        }
    }

    /// The maximum of each window of plane `v`, and its input offset: the first of equals in
    /// the window's row-major order, a NaN before anything. Output by output, each window's
    /// taps in row-major order (a plane's outputs are few and its windows small, so a loop per
    /// tap over runs of outputs spent its time starting runs).
    fn each_max<T: PoolElem>(&self, v: &[T], mut f: impl FnMut(usize, T, usize)) {
        let w = self.input[1];
        let pick = |best: &mut T, at: &mut usize, e: T, t: usize| {
            let take = (e > *best) | (e.is_nan() & !best.is_nan());
            *best = if take { e } else { *best };
            *at = if take { t } else { *at };
        };
        if self.pool.window == [2, 2] && self.pool.stride == [2, 2] && self.pool.padding == [0, 0] {
            // The common 2x2 window with stride 2, straight-line: the same taps in the same
            // order as below, without a window's bounds per output.
            let ow = self.out[1];
            for y in 0..self.out[0] {
                let (r0, r1) = (2 * y * w, (2 * y + 1) * w);
                let (top, bottom) = (&v[r0..r0 + 2 * ow], &v[r1..r1 + 2 * ow]);
                for x in 0..ow {
                    let (mut best, mut at) = (top[2 * x], r0 + 2 * x);
                    pick(&mut best, &mut at, top[2 * x + 1], r0 + 2 * x + 1);
                    pick(&mut best, &mut at, bottom[2 * x], r1 + 2 * x);
                    pick(&mut best, &mut at, bottom[2 * x + 1], r1 + 2 * x + 1);
                    f(y * ow + x, best, at);
                }
            }
            return;
        }
        self.each_window(|o, rows, cols| {
            let mut at = rows.start * w + cols.start;
            let mut best = v[at];
            for iy in rows {
                let line = iy * w;
                for (k, &e) in v[line + cols.start..line + cols.end].iter().enumerate() {
                    pick(&mut best, &mut at, e, line + cols.start + k);
                }
            }
            f(o, best, at)
        });
    }

    /// Each block of planes of `input` (planes of `in_len`) with the matching ones of
    /// `output` (planes of `out_len`), on rayon's threads when there is enough work; blocks
    /// of about 16 Ki input elements (the CNN example's training step took 2.6 ms with them,
    /// 3.4 ms with blocks of 128 Ki, alternated; 4 Ki was no different).
    fn each_block<A: Send + Sync, B: Send>(
        &self,
        input: &[A],
        output: &mut [B],
        out_len: usize,
        f: impl Fn(usize, &[A], &mut [B]) + Send + Sync,
    ) {
        use rayon::prelude::*;
        let in_len = self.in_len();
        if in_len == 0 || out_len == 0 {
            return;
        }
        let per = self.block_planes();
        if input.len() <= in_len * per {
            f(0, input, output);
        } else {
            input
                .par_chunks(in_len * per)
                .zip(output.par_chunks_mut(out_len * per))
                .enumerate()
                .for_each(|(i, (a, b))| f(i, a, b));
        }
    }

    /// Planes per block of [`Planes::each_block`].
    fn block_planes(&self) -> usize {
        (1usize << 14).div_ceil(self.in_len().max(1))
    }
}

/// The window's area as `T` (the divisor of average pooling, padding included).
fn area<T: ConvElem>(pool: &Pool2d) -> T {
    T::from(pool.area()).expect("a window's size")
}

/// A forward pooling: `x`'s planes split into blocks over rayon's threads, `plane` filling one
/// output plane (starting as `zero`) from one input plane.
fn pool_planes<T: Copy + Send + Sync>(
    x: &ArrayViewD<'_, T>,
    pool: &Pool2d,
    zero: T,
    plane: impl Fn(&Planes, &[T], &mut [T]) + Send + Sync,
) -> Result<ArrayD<T>, Error> {
    let planes = Planes::new(pool, x.shape())?;
    let v = dense(x);
    let v = slice(&v);
    let shape = planes.out_shape(x.shape());
    let (n, in_len) = (planes.out_len(), planes.in_len());
    let mut out = vec![zero; shape.iter().product()];
    planes.each_block(v, &mut out, n, |_, v, out| {
        for (v, out) in v.chunks(in_len).zip(out.chunks_mut(n)) {
            plane(&planes, v, out);
        }
    });
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))
}

fn max_pool_t<T: PoolElem>(x: &ArrayViewD<'_, T>, pool: &Pool2d) -> Result<ArrayD<T>, Error> {
    pool_planes(x, pool, T::default(), |planes, v, out| {
        planes.each_max(v, |o, best, _| out[o] = best)
    })
}

fn avg_pool_t<T: ConvElem>(x: &ArrayViewD<'_, T>, pool: &Pool2d) -> Result<ArrayD<T>, Error> {
    let area = area::<T>(pool);
    pool_planes(x, pool, T::zero(), |planes, v, out| {
        let w = planes.input[1];
        // From zero, the taps in row-major order, then the division: the window's sum.
        planes.each_window(|o, rows, cols| {
            let mut sum = T::zero();
            for iy in rows {
                for &e in &v[iy * w + cols.start..iy * w + cols.end] {
                    sum += e;
                }
            }
            out[o] = sum / area;
        });
    })
}

fn pool_grad_t<T: ConvElem + PoolElem>(
    x: &ArrayViewD<'_, T>,
    gy: &ArrayViewD<'_, T>,
    pool: &Pool2d,
) -> Result<ArrayD<T>, Error> {
    let planes = Planes::new(pool, x.shape())?;
    if gy.shape() != planes.out_shape(x.shape()).as_slice() {
        return Err(err(format!(
            "{}: a gradient of shape {:?} for an output of {:?}",
            pool.kind.grad_name(),
            gy.shape(),
            planes.out_shape(x.shape())
        )));
    }
    let (v, g) = (dense(x), dense(gy));
    let (v, g) = (slice(&v), slice(&g));
    let (n, in_len) = (planes.out_len(), planes.in_len());
    let mut dx = vec![T::zero(); v.len()];
    let (step, area) = (pool.stride[1], area::<T>(pool));
    let per = planes.block_planes();
    planes.each_block(v, &mut dx, in_len, |block, v, dx| {
        // This block's planes of the output's gradient.
        let g = &g[block * per * n..][..v.len() / in_len.max(1) * n];
        let planes_of = v.chunks(in_len).zip(g.chunks(n)).zip(dx.chunks_mut(in_len));
        for ((v, g), dx) in planes_of {
            match pool.kind {
                PoolKind::Max => planes.each_max(v, |o, _, at| dx[at] += g[o]),
                PoolKind::Avg => planes.each_tap_run(|o0, t0, len| {
                    for k in 0..len {
                        dx[t0 + k * step] += g[o0 + k] / area;
                    }
                }),
            }
        }
    });
    ArrayD::from_shape_vec(IxDyn(x.shape()), dx).map_err(|e| err(e.to_string()))
}

/// Max or average pooling of the last two axes of `x`.
pub fn pool2d(x: &TensorRef<'_>, pool: &Pool2d) -> Result<Tensor, Error> {
    Ok(match (pool.kind, x) {
        (PoolKind::Max, TensorRef::I32(a)) => max_pool_t(a, pool)?.into(),
        (PoolKind::Max, TensorRef::I64(a)) => max_pool_t(a, pool)?.into(),
        (PoolKind::Max, TensorRef::F32(a)) => max_pool_t(a, pool)?.into(),
        (PoolKind::Max, TensorRef::F64(a)) => max_pool_t(a, pool)?.into(),
        (PoolKind::Avg, TensorRef::F32(a)) => avg_pool_t(a, pool)?.into(),
        (PoolKind::Avg, TensorRef::F64(a)) => avg_pool_t(a, pool)?.into(),
        _ => {
            return Err(err(format!(
                "{}: does not take {}",
                pool.kind.name(),
                x.dtype()
            )))
        }
    })
}

/// The gradient of pooling `x`, from the output's gradient `g`: max pooling's goes to the
/// first greatest element of each window, average pooling's is spread over the window.
pub fn pool2d_grad(x: &TensorRef<'_>, g: &TensorRef<'_>, pool: &Pool2d) -> Result<Tensor, Error> {
    match (x, g) {
        (TensorRef::F32(a), TensorRef::F32(b)) => Ok(pool_grad_t(a, b, pool)?.into()),
        (TensorRef::F64(a), TensorRef::F64(b)) => Ok(pool_grad_t(a, b, pool)?.into()),
        _ => Err(floats_only(pool.kind.grad_name(), x, g)),
    }
}
