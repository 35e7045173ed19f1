//! `conv2d` and pooling with their gradients. A convolution is a matrix product: each group's
//! windows of the image are unrolled into the columns of a matrix (im2col) and multiplied by
//! the filters with the same GEMM `matmul` uses; the image gradient rolls the product of the
//! transposed filters back into place (col2im). The geometry (how many windows fit) is
//! `ir::window`'s.

use super::linalg::MatElem;
use crate::error::Error;
use crate::ir::window::{Conv2d, Pool2d, PoolKind};
use crate::tensor::{Tensor, TensorRef};
use ndarray::{ArrayD, ArrayView2, ArrayViewD, ArrayViewMut2, CowArray, IxDyn};

fn err(msg: String) -> Error {
    Error::Runtime(msg)
}

/// The shapes of one convolution, all in elements.
#[derive(Copy, Clone)]
struct Geometry {
    n: usize,
    c: usize,
    image: [usize; 2],
    o: usize,
    kernel: [usize; 2],
    out: [usize; 2],
    conv: Conv2d,
}

impl Geometry {
    fn new(conv: &Conv2d, x: &[usize], w: &[usize]) -> Result<Geometry, Error> {
        if x.len() != 4 || w.len() != 4 {
            return Err(err(format!(
                "conv2d: the image {x:?} and filters {w:?} must have rank 4"
            )));
        }
        conv.check().map_err(err)?;
        let g = conv.groups;
        if x[1] != w[1] * g || w[0] % g != 0 {
            return Err(err(format!(
                "conv2d: an image of {} channels and filters {w:?} in {g} group(s) do not fit",
                x[1]
            )));
        }
        let image = [x[2], x[3]];
        let kernel = [w[2], w[3]];
        Ok(Geometry {
            n: x[0],
            c: x[1],
            image,
            o: w[0],
            kernel,
            out: conv.output(image, kernel).map_err(err)?,
            conv: *conv,
        })
    }

    /// Rows of a group's unrolled image: its channels times the filter's taps.
    fn k(&self) -> usize {
        self.c / self.conv.groups * self.kernel[0] * self.kernel[1]
    }

    /// Columns: the output positions.
    fn p(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// The images of one chunk and group unrolled into a `[k, nc * p]` matrix (im2col): row
    /// `(c, i, j)` holds, for each image of the chunk and output position, the image element
    /// under filter tap `(i, j)` of channel `c`, or zero in the padding. Channels are filled
    /// on rayon's threads.
    fn im2col<T: Copy + Send + Sync + num_traits::Zero>(
        &self,
        chunk: Chunk,
        g: usize,
        img: &[T],
        cols: &mut [T],
    ) {
        use rayon::prelude::*;
        let taps = self.kernel[0] * self.kernel[1];
        let width = chunk.len * self.p();
        let cg = self.c / self.conv.groups;
        cols[..cg * taps * width]
            .par_chunks_mut(taps * width)
            .enumerate()
            .for_each(|(c, rows)| {
                self.each_segment(chunk, g, c, rows, |seg, line, (lo, hi, first)| {
                    let Some(line) = line else {
                        seg.fill(T::zero());
                        return;
                    };
                    let (src, step) = (&img[line..line + self.image[1]], self.conv.stride[1]);
                    seg[..lo].fill(T::zero());
                    seg[hi..].fill(T::zero());
                    if step == 1 {
                        seg[lo..hi].copy_from_slice(&src[first..first + hi - lo]);
                    } else {
                        for (k, v) in seg[lo..hi].iter_mut().enumerate() {
                            *v = src[first + k * step];
                        }
                    }
                });
            });
    }

    /// The transpose of [`Geometry::im2col`] (col2im): each element of the `[k, nc * p]`
    /// matrix added into the image element it was read from.
    fn col2im<T: Copy + std::ops::AddAssign>(
        &self,
        chunk: Chunk,
        g: usize,
        cols: &mut [T],
        img: &mut [T],
    ) {
        let taps = self.kernel[0] * self.kernel[1];
        let width = chunk.len * self.p();
        let step = self.conv.stride[1];
        for (c, rows) in cols
            .chunks_mut(taps * width)
            .take(self.c / self.conv.groups)
            .enumerate()
        {
            self.each_segment(chunk, g, c, rows, |seg, src, (lo, hi, first)| {
                if let Some(line) = src {
                    for (k, v) in seg[lo..hi].iter().enumerate() {
                        img[line + first + k * step] += *v;
                    }
                }
            });
        }
    }

    /// For channel `c` of group `g`, each output row's segment of the unrolled rows `rows`
    /// (`[taps, nc * p]`) with the image row it reads (its offset, `None` in the padding) and
    /// the outputs `lo..hi` whose tap lands in the image, the first at column `first`.
    fn each_segment<T>(
        &self,
        chunk: Chunk,
        g: usize,
        c: usize,
        rows: &mut [T],
        mut f: impl FnMut(&mut [T], Option<usize>, (usize, usize, usize)),
    ) {
        let [kh, kw] = self.kernel;
        let [h, w] = self.image;
        let [oh, ow] = self.out;
        let Conv2d {
            stride,
            padding,
            dilation,
            ..
        } = self.conv;
        let (p, width) = (self.p(), chunk.len * self.p());
        let cg = self.c / self.conv.groups;
        for i in 0..kh {
            for j in 0..kw {
                let row = &mut rows[(i * kw + j) * width..][..width];
                let (lo, hi) = valid_x(j * dilation[1], padding[1], stride[1], w, ow);
                // The image column of output `lo`'s tap (in range when lo < hi).
                let first = (lo * stride[1] + j * dilation[1]).wrapping_sub(padding[1]);
                for b in 0..chunk.len {
                    let plane = ((chunk.start + b) * self.c + g * cg + c) * h * w;
                    for y in 0..oh {
                        let seg = &mut row[b * p + y * ow..][..ow];
                        let line = (y * stride[0] + i * dilation[0])
                            .checked_sub(padding[0])
                            .filter(|&iy| iy < h && lo < hi)
                            .map(|iy| plane + iy * w);
                        f(seg, line, (lo, hi, first));
                    }
                }
            }
        }
    }

    /// Images per chunk: as many as keep a group's unrolled matrix near
    /// [`UNROLL_BUDGET`] elements, so a large batch is not unrolled whole.
    fn chunk_images(&self) -> usize {
        (unroll_budget() / (self.k() * self.p()).max(1)).clamp(1, self.n.max(1))
    }

    /// The chunks of the batch.
    fn chunks(&self) -> impl Iterator<Item = Chunk> {
        let (n, step) = (self.n, self.chunk_images());
        (0..n).step_by(step).map(move |start| Chunk {
            start,
            len: step.min(n - start),
        })
    }

    /// Where group `g`'s channels of `[n, o, p]` output-shaped data sit in an `[og, nc * p]`
    /// matrix of a chunk: `(matrix offset, data offset)` of each run of `p` elements.
    fn group_runs(&self, chunk: Chunk, g: usize) -> impl Iterator<Item = (usize, usize)> {
        let (p, o_all) = (self.p(), self.o);
        let og = o_all / self.conv.groups;
        let width = chunk.len * p;
        (0..og).flat_map(move |o| {
            (0..chunk.len).map(move |b| {
                let at = ((chunk.start + b) * o_all + g * og + o) * p;
                (o * width + b * p, at)
            })
        })
    }

    /// Group `g`'s channels of a chunk of `nop` gathered into the matrix `mat`.
    fn gather_group<T: Copy>(&self, chunk: Chunk, g: usize, nop: &[T], mat: &mut [T]) {
        let p = self.p();
        for (m, d) in self.group_runs(chunk, g) {
            mat[m..m + p].copy_from_slice(&nop[d..d + p]);
        }
    }

    /// The matrix `mat` written into group `g`'s channels of a chunk of `nop`.
    fn scatter_group<T: Copy>(&self, chunk: Chunk, g: usize, mat: &[T], nop: &mut [T]) {
        let p = self.p();
        for (m, d) in self.group_runs(chunk, g) {
            nop[d..d + p].copy_from_slice(&mat[m..m + p]);
        }
    }
}

/// Unrolled elements per chunk of images (16 MiB of f32).
const UNROLL_BUDGET: usize = 1 << 22;

#[cfg(test)]
thread_local! {
    /// The budget in this crate's unit tests, which lower it to split small batches.
    static TEST_BUDGET: std::cell::Cell<usize> = const { std::cell::Cell::new(UNROLL_BUDGET) };
}

fn unroll_budget() -> usize {
    #[cfg(test)]
    return TEST_BUDGET.with(|b| b.get());
    #[cfg(not(test))]
    UNROLL_BUDGET
}

/// A run of images of the batch.
#[derive(Copy, Clone)]
struct Chunk {
    start: usize,
    len: usize,
}

/// The outputs `lo..hi` (of `ow`) whose tap at `offset` (the tap's dilated position) lands in
/// an image row of `w` padded by `pad`: `0 <= x * stride + offset - pad < w`.
fn valid_x(offset: usize, pad: usize, stride: usize, w: usize, ow: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = (w + pad).saturating_sub(offset).div_ceil(stride);
    let hi = hi.min(ow);
    (lo.min(hi), hi)
}

/// Conv elements: floats that kiln's GEMM multiplies.
trait ConvElem: MatElem + num_traits::Float + std::ops::AddAssign + Send + Sync {}
impl ConvElem for f32 {}
impl ConvElem for f64 {}

/// The row-major elements of `a`, borrowed where they already are.
fn dense<'a, T: Copy>(a: &'a ArrayViewD<'_, T>) -> CowArray<'a, T, IxDyn> {
    a.as_standard_layout()
}

fn slice<'a, T>(a: &'a CowArray<'_, T, IxDyn>) -> &'a [T] {
    a.as_slice().expect("a standard-layout array is contiguous")
}

fn matrix<T>(rows: usize, cols: usize, v: &[T]) -> ArrayView2<'_, T> {
    ArrayView2::from_shape((rows, cols), v).expect("a slice of rows * cols elements")
}

fn matrix_mut<T>(rows: usize, cols: usize, v: &mut [T]) -> ArrayViewMut2<'_, T> {
    ArrayViewMut2::from_shape((rows, cols), v).expect("a slice of rows * cols elements")
}

/// `conv2d`: per chunk of images and group, `out[og, nc * p] = w_g[og, k] @ cols[k, nc * p]`.
fn conv_t<T: ConvElem>(
    x: &ArrayViewD<'_, T>,
    w: &ArrayViewD<'_, T>,
    conv: &Conv2d,
) -> Result<ArrayD<T>, Error> {
    let geo = Geometry::new(conv, x.shape(), w.shape())?;
    let (k, p, groups) = (geo.k(), geo.p(), conv.groups);
    let og = geo.o / groups;
    let (img, filters) = (dense(x), dense(w));
    let (img, filters) = (slice(&img), slice(&filters));
    let mut out = vec![T::zero(); geo.n * geo.o * p];
    let most = geo.chunk_images() * p;
    let (mut cols, mut prod) = (vec![T::zero(); k * most], vec![T::zero(); og * most]);
    for chunk in geo.chunks() {
        let width = chunk.len * p;
        for g in 0..groups {
            geo.im2col(chunk, g, img, &mut cols);
            let wg = matrix(og, k, &filters[g * og * k..(g + 1) * og * k]);
            let dst = matrix_mut(og, width, &mut prod[..og * width]);
            T::mm_into(wg, matrix(k, width, &cols[..k * width]), dst);
            geo.scatter_group(chunk, g, &prod, &mut out);
        }
    }
    let shape = [geo.n, geo.o, geo.out[0], geo.out[1]];
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))
}

/// The image gradient: per chunk and group, `cols[k, nc * p] = w_g^T @ g[og, nc * p]`, added
/// back into the image (col2im).
fn grad_image_t<T: ConvElem>(
    gy: &ArrayViewD<'_, T>,
    w: &ArrayViewD<'_, T>,
    conv: &Conv2d,
    image: [usize; 2],
) -> Result<ArrayD<T>, Error> {
    let ws = w.shape();
    if gy.ndim() != 4 || ws.len() != 4 {
        return Err(err("conv2d_grad_image: takes rank-4 tensors".into()));
    }
    let x_shape = [gy.shape()[0], ws[1] * conv.groups, image[0], image[1]];
    let geo = Geometry::new(conv, &x_shape, ws)?;
    check_output("conv2d_grad_image", &geo, gy.shape())?;
    let (k, p, groups) = (geo.k(), geo.p(), conv.groups);
    let og = geo.o / groups;
    let (g_all, filters) = (dense(gy), dense(w));
    let (g_all, filters) = (slice(&g_all), slice(&filters));
    let mut dx = vec![T::zero(); x_shape.iter().product()];
    let most = geo.chunk_images() * p;
    let (mut cols, mut gmat) = (vec![T::zero(); k * most], vec![T::zero(); og * most]);
    for chunk in geo.chunks() {
        let width = chunk.len * p;
        for g in 0..groups {
            geo.gather_group(chunk, g, g_all, &mut gmat);
            let wg = matrix(og, k, &filters[g * og * k..(g + 1) * og * k]);
            let dst = matrix_mut(k, width, &mut cols[..k * width]);
            T::mm_into(wg.t(), matrix(og, width, &gmat[..og * width]), dst);
            geo.col2im(chunk, g, &mut cols, &mut dx);
        }
    }
    ArrayD::from_shape_vec(IxDyn(&x_shape), dx).map_err(|e| err(e.to_string()))
}

/// The filter gradient: per chunk and group, `dw_g[og, k] += g[og, nc * p] @ cols^T`.
fn grad_filter_t<T: ConvElem>(
    x: &ArrayViewD<'_, T>,
    gy: &ArrayViewD<'_, T>,
    conv: &Conv2d,
    kernel: [usize; 2],
) -> Result<ArrayD<T>, Error> {
    let (xs, gs) = (x.shape(), gy.shape());
    if xs.len() != 4 || gs.len() != 4 || conv.groups == 0 {
        return Err(err("conv2d_grad_filter: takes rank-4 tensors".into()));
    }
    let w_shape = [gs[1], xs[1] / conv.groups, kernel[0], kernel[1]];
    let geo = Geometry::new(conv, xs, &w_shape)?;
    check_output("conv2d_grad_filter", &geo, gs)?;
    let (k, p, groups) = (geo.k(), geo.p(), conv.groups);
    let og = geo.o / groups;
    let (img, g_all) = (dense(x), dense(gy));
    let (img, g_all) = (slice(&img), slice(&g_all));
    let mut dw = vec![T::zero(); geo.o * k];
    let mut part = vec![T::zero(); k * og];
    let most = geo.chunk_images() * p;
    let (mut cols, mut gmat) = (vec![T::zero(); k * most], vec![T::zero(); og * most]);
    for chunk in geo.chunks() {
        let width = chunk.len * p;
        for g in 0..groups {
            geo.im2col(chunk, g, img, &mut cols);
            geo.gather_group(chunk, g, g_all, &mut gmat);
            // dw_g^T[k, og] = cols[k, width] @ g^T[width, og]: the unrolled image is the
            // row-major A, and only the group's few output channels are packed from a
            // transposed view.
            let gm = matrix(og, width, &gmat[..og * width]);
            let cm = matrix(k, width, &cols[..k * width]);
            T::mm_into(cm, gm.t(), matrix_mut(k, og, &mut part));
            let dwg = &mut dw[g * og * k..(g + 1) * og * k];
            for (r, row) in part.chunks(og).enumerate() {
                for (o, &v) in row.iter().enumerate() {
                    dwg[o * k + r] += v;
                }
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&w_shape), dw).map_err(|e| err(e.to_string()))
}

/// The output gradient has the convolution's output shape.
fn check_output(what: &str, geo: &Geometry, got: &[usize]) -> Result<(), Error> {
    let want = [geo.n, geo.o, geo.out[0], geo.out[1]];
    if got != want {
        return Err(err(format!(
            "{what}: a gradient of shape {got:?} for an output of {want:?}"
        )));
    }
    Ok(())
}

fn floats_only(what: &str, a: &TensorRef<'_>, b: &TensorRef<'_>) -> Error {
    err(format!(
        "{what}: takes two f32 or two f64 tensors, got {} and {}",
        a.dtype(),
        b.dtype()
    ))
}

/// `conv2d` of image `x` with filters `w`.
pub fn conv2d(x: &TensorRef<'_>, w: &TensorRef<'_>, conv: &Conv2d) -> Result<Tensor, Error> {
    match (x, w) {
        (TensorRef::F32(a), TensorRef::F32(b)) => Ok(conv_t(a, b, conv)?.into()),
        (TensorRef::F64(a), TensorRef::F64(b)) => Ok(conv_t(a, b, conv)?.into()),
        _ => Err(floats_only("conv2d", x, w)),
    }
}

/// The gradient of `conv2d` with respect to its image, from the output's gradient `g`.
pub fn conv2d_grad_image(
    g: &TensorRef<'_>,
    w: &TensorRef<'_>,
    conv: &Conv2d,
    image: [usize; 2],
) -> Result<Tensor, Error> {
    match (g, w) {
        (TensorRef::F32(a), TensorRef::F32(b)) => Ok(grad_image_t(a, b, conv, image)?.into()),
        (TensorRef::F64(a), TensorRef::F64(b)) => Ok(grad_image_t(a, b, conv, image)?.into()),
        _ => Err(floats_only("conv2d_grad_image", g, w)),
    }
}

/// The gradient of `conv2d` with respect to its filters, from the image `x` and the output's
/// gradient `g`.
pub fn conv2d_grad_filter(
    x: &TensorRef<'_>,
    g: &TensorRef<'_>,
    conv: &Conv2d,
    kernel: [usize; 2],
) -> Result<Tensor, Error> {
    match (x, g) {
        (TensorRef::F32(a), TensorRef::F32(b)) => Ok(grad_filter_t(a, b, conv, kernel)?.into()),
        (TensorRef::F64(a), TensorRef::F64(b)) => Ok(grad_filter_t(a, b, conv, kernel)?.into()),
        _ => Err(floats_only("conv2d_grad_filter", x, g)),
    }
}

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
        for i in 0..window[0] {
            for j in 0..window[1] {
                let (lo, hi) = valid_x(j, padding[1], stride[1], w, ow);
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

    /// Max pooling of one plane `v` into `out`; with `ARG`, the input offset of each maximum
    /// in `arg`: the first of equals in the window's row-major order, a NaN before anything.
    /// Each output starts from its window's first element that is not padding.
    fn max_plane<T: PoolElem, const ARG: bool>(&self, v: &[T], out: &mut [T], arg: &mut [usize]) {
        let [oh, ow] = self.out;
        let first =
            |o: usize, a: usize| (o * self.pool.stride[a]).saturating_sub(self.pool.padding[a]);
        for y in 0..oh {
            let row = first(y, 0) * self.input[1];
            for x in 0..ow {
                let t = row + first(x, 1);
                out[y * ow + x] = v[t];
                if ARG {
                    arg[y * ow + x] = t;
                }
            }
        }
        let step = self.pool.stride[1];
        self.each_tap_run(|o0, t0, n| {
            // Branch-free selects; the run's elements sliced first, so an index is checked
            // against one bound.
            let src = &v[t0..=t0 + (n - 1) * step];
            let out = &mut out[o0..o0 + n];
            for (k, o) in out.iter_mut().enumerate() {
                let e = src[k * step];
                let take = (e > *o) | (e.is_nan() & !o.is_nan());
                *o = if take { e } else { *o };
                if ARG {
                    arg[o0 + k] = if take { t0 + k * step } else { arg[o0 + k] };
                }
            }
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
    T::from(pool.window[0] * pool.window[1]).expect("a window's size")
}

fn max_pool_t<T: PoolElem>(x: &ArrayViewD<'_, T>, pool: &Pool2d) -> Result<ArrayD<T>, Error> {
    let planes = Planes::new(pool, x.shape())?;
    let v = dense(x);
    let v = slice(&v);
    let shape = planes.out_shape(x.shape());
    let (n, in_len) = (planes.out_len(), planes.in_len());
    let mut out = vec![T::default(); shape.iter().product()];
    planes.each_block(v, &mut out, n, |_, v, out| {
        for (v, out) in v.chunks(in_len).zip(out.chunks_mut(n)) {
            planes.max_plane::<T, false>(v, out, &mut []);
        }
    });
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))
}

fn avg_pool_t<T: ConvElem>(x: &ArrayViewD<'_, T>, pool: &Pool2d) -> Result<ArrayD<T>, Error> {
    let planes = Planes::new(pool, x.shape())?;
    let v = dense(x);
    let v = slice(&v);
    let shape = planes.out_shape(x.shape());
    let (n, in_len) = (planes.out_len(), planes.in_len());
    let mut out = vec![T::zero(); shape.iter().product()];
    let (step, area) = (pool.stride[1], area::<T>(pool));
    planes.each_block(v, &mut out, n, |_, v, out| {
        for (v, out) in v.chunks(in_len).zip(out.chunks_mut(n)) {
            planes.each_tap_run(|o0, t0, len| {
                let src = v[t0..].iter().step_by(step);
                for (o, &e) in out[o0..o0 + len].iter_mut().zip(src) {
                    *o += e;
                }
            });
        }
        for o in out.iter_mut() {
            *o = *o / area;
        }
    });
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))
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
        let (mut out, mut arg) = (vec![T::zero(); n], vec![0; n]);
        let planes_of = v.chunks(in_len).zip(g.chunks(n)).zip(dx.chunks_mut(in_len));
        for ((v, g), dx) in planes_of {
            match pool.kind {
                PoolKind::Max => {
                    planes.max_plane::<T, true>(v, &mut out, &mut arg);
                    for (&a, &gv) in arg.iter().zip(g) {
                        dx[a] += gv;
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f64 / 250.0 - 2.0)
            .collect()
    }

    fn array(shape: &[usize], seed: u64) -> ArrayD<f64> {
        ArrayD::from_shape_vec(IxDyn(shape), values(shape.iter().product(), seed)).unwrap()
    }

    fn close(a: &ArrayD<f64>, b: &ArrayD<f64>) -> bool {
        a.shape() == b.shape()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
    }

    /// Runs `f` with the unroll budget set to `budget` elements.
    fn with_budget<R>(budget: usize, f: impl FnOnce() -> R) -> R {
        let old = TEST_BUDGET.with(|b| b.replace(budget));
        let out = f();
        TEST_BUDGET.with(|b| b.set(old));
        out
    }

    #[test]
    fn a_batch_unrolled_in_chunks_gives_what_one_chunk_gives() {
        let conv = Conv2d {
            stride: [2, 1],
            padding: [1, 2],
            dilation: [1, 2],
            groups: 2,
        };
        let x = array(&[5, 4, 7, 9], 1);
        let w = array(&[6, 2, 3, 2], 2);
        let whole = conv_t(&x.view(), &w.view(), &conv).unwrap();
        let g = array(whole.shape(), 3);
        let dx = grad_image_t(&g.view(), &w.view(), &conv, [7, 9]).unwrap();
        let dw = grad_filter_t(&x.view(), &g.view(), &conv, [3, 2]).unwrap();
        // One image per chunk, then two (the last chunk holding one).
        for budget in [1, 2 * 4 * 3 * 2 * 4 * 7] {
            with_budget(budget, || {
                let geo = Geometry::new(&conv, x.shape(), w.shape()).unwrap();
                assert!(geo.chunks().count() > 1, "budget {budget}");
                let y = conv_t(&x.view(), &w.view(), &conv).unwrap();
                assert!(close(&y, &whole), "budget {budget}: forward");
                let d = grad_image_t(&g.view(), &w.view(), &conv, [7, 9]).unwrap();
                assert!(close(&d, &dx), "budget {budget}: image gradient");
                let d = grad_filter_t(&x.view(), &g.view(), &conv, [3, 2]).unwrap();
                assert!(close(&d, &dw), "budget {budget}: filter gradient");
            });
        }
    }
}
