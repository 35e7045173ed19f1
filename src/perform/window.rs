//! `conv2d` with its gradients (pooling is `perform::pool`). A convolution is a matrix product: each group's
//! windows of the image are unrolled into the columns of a matrix (im2col) and multiplied by
//! the filters with the same GEMM `matmul` uses; the image gradient rolls the product of the
//! transposed filters back into place (col2im). The geometry (how many windows fit) is
//! `ir::window`'s.

use super::linalg::MatElem;
use crate::error::Error;
use crate::ir::window::{tap_outputs, Conv2d};
use crate::tensor::{Tensor, TensorRef};
use ndarray::{ArrayD, ArrayView2, ArrayViewD, ArrayViewMut2, CowArray, IxDyn};

pub(super) fn err(msg: String) -> Error {
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
        conv.check_channels(Some(x[1]), Some(w[0]), Some(w[1]))
            .map_err(err)?;
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

    /// Columns: the output positions. Saturating: an empty batch may have more positions per
    /// image than a `usize` counts (a padding near 2^40 on both axes), and is never unrolled.
    fn p(&self) -> usize {
        self.out[0].saturating_mul(self.out[1])
    }

    /// Images to unroll: none where the output-shaped data (`[n, o, p]`) is empty, since then
    /// the output is empty and both gradients are zero. The positions of images that are not
    /// there may be too many to hold (a huge padding on an empty batch), so nothing is sized
    /// from them.
    fn images(&self) -> usize {
        if self.o == 0 || self.p() == 0 {
            0
        } else {
            self.n
        }
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
                if self.rows_keep_their_width() {
                    return self.im2col_shifted(chunk, g, c, img, rows);
                }
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

    /// Whether each output row is as wide as an image row and the window moves one element
    /// at a time (a "same" convolution: stride 1, an odd filter padded by half its width):
    /// then an unrolled row of one image is the image's rows shifted by the tap, whole, with
    /// the columns the shift brings in from the next row zeroed, and
    /// [`Geometry::im2col_shifted`] copies it in one piece instead of a run per output row
    /// (runs of a few elements, where the copies' calls cost more than the copying: 3/4 of
    /// the CNN example's convolutions).
    fn rows_keep_their_width(&self) -> bool {
        self.conv.stride == [1, 1] && self.conv.dilation[1] == 1 && self.out[1] == self.image[1]
    }

    /// [`Geometry::im2col`]'s rows of channel `c` of group `g` where
    /// [`Geometry::rows_keep_their_width`]: for each tap and image, the output rows whose tap
    /// row is in the image copied as one run, then the columns the tap puts in the padding
    /// and the rows outside the image zeroed. The same elements as the run-by-run copy.
    fn im2col_shifted<T: Copy + num_traits::Zero>(
        &self,
        chunk: Chunk,
        g: usize,
        c: usize,
        img: &[T],
        rows: &mut [T],
    ) {
        let [kh, kw] = self.kernel;
        let [h, w] = self.image;
        let oh = self.out[0];
        let (p, width) = (self.p(), chunk.len * self.p());
        let cg = self.c / self.conv.groups;
        let (pad, dil) = (self.conv.padding, self.conv.dilation[0]);
        for i in 0..kh {
            // Output rows `y0..y1` read image rows `y + i * dil - pad`, inside the image.
            let (y0, y1) = tap_outputs(i * dil, pad[0], 1, h, oh);
            for j in 0..kw {
                let row = &mut rows[(i * kw + j) * width..][..width];
                // Columns `lo..hi` of each output row read inside the image, column
                // `x + j - pad`.
                let (lo, hi) = tap_outputs(j, pad[1], 1, w, w);
                for b in 0..chunk.len {
                    let plane = ((chunk.start + b) * self.c + g * cg + c) * h * w;
                    let seg = &mut row[b * p..][..p];
                    if y0 >= y1 || lo >= hi {
                        seg.fill(T::zero());
                        continue;
                    }
                    // Output (y, x) reads image element (y + i * dil - pad) * w + x + j - pad
                    // of the plane: one shift for the whole run of rows. The run's first and
                    // last elements are those of columns `lo` and `hi - 1`, inside the image.
                    let (from, to) = (y0 * w + lo, (y1 - 1) * w + hi);
                    let src = (y0 + i * dil - pad[0]) * w + lo + j - pad[1];
                    seg[..from].fill(T::zero());
                    seg[from..to].copy_from_slice(&img[plane + src..plane + src + (to - from)]);
                    seg[to..].fill(T::zero());
                    // The columns of the padding, read from the rows beside, zeroed.
                    for y in y0..y1 {
                        seg[y * w..y * w + lo].fill(T::zero());
                        seg[y * w + hi..(y + 1) * w].fill(T::zero());
                    }
                }
            }
        }
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
                let (lo, hi) = tap_outputs(j * dilation[1], padding[1], stride[1], w, ow);
                // The image column of output `lo`'s tap: in range when lo < hi, unused (and
                // possibly wrapped, with a stride near 2^64) otherwise.
                let first = (lo.wrapping_mul(stride[1]))
                    .wrapping_add(j * dilation[1])
                    .wrapping_sub(padding[1]);
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
        (unroll_budget() / self.k().saturating_mul(self.p()).max(1)).clamp(1, self.images().max(1))
    }

    /// The chunks of the batch.
    fn chunks(&self) -> impl Iterator<Item = Chunk> {
        let (n, step) = (self.images(), self.chunk_images());
        (0..n).step_by(step).map(move |start| Chunk {
            start,
            len: step.min(n - start),
        })
    }

    /// Runs `f` on this convolution's two scratch matrices ([`with_scratch`]): room for a
    /// chunk's unrolled image (`[k, nc * p]`) and for a group's output-shaped rows
    /// (`[og, nc * p]`). None where there are no images to unroll.
    fn with_scratch<T: ConvElem, R>(&self, f: impl FnOnce(&mut [T], &mut [T]) -> R) -> R {
        let most = if self.images() == 0 {
            0
        } else {
            self.chunk_images() * self.p()
        };
        with_scratch(self.k() * most, self.o / self.conv.groups * most, f)
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

/// Conv elements: floats that kiln's GEMM multiplies.
pub(super) trait ConvElem:
    MatElem + num_traits::Float + std::ops::AddAssign + Send + Sync
{
    /// This thread's scratch of [`with_scratch`].
    fn scratch() -> &'static std::thread::LocalKey<std::cell::Cell<Vec<Self>>>;
}

macro_rules! conv_elem {
    ($t:ty) => {
        impl ConvElem for $t {
            fn scratch() -> &'static std::thread::LocalKey<std::cell::Cell<Vec<$t>>> {
                thread_local! {
                    static SCRATCH: std::cell::Cell<Vec<$t>> = const { std::cell::Cell::new(Vec::new()) };
                }
                &SCRATCH
            }
        }
    };
}
conv_elem!(f32);
conv_elem!(f64);

/// Runs `f` on two scratch matrices of `a` and `b` elements (the unrolled image and a product
/// or gathered gradient), whatever they held before: every use writes what it reads. The
/// storage is kept per thread between calls, so that a training step's convolutions neither
/// allocate nor zero their scratch each time (fresh pages and their zeroing were half of a
/// small convolution's time). Taken out of the thread's slot while `f` runs, so a convolution
/// that a waiting thread picks up meanwhile gets storage of its own.
fn with_scratch<T: ConvElem, R>(a: usize, b: usize, f: impl FnOnce(&mut [T], &mut [T]) -> R) -> R {
    let mut buf = T::scratch().with(|s| s.take());
    if buf.len() < a + b {
        buf.resize(a + b, T::zero());
    }
    let (first, rest) = buf.split_at_mut(a);
    let r = f(first, &mut rest[..b]);
    T::scratch().with(|s| {
        let other = s.take();
        s.set(if other.len() > buf.len() { other } else { buf });
    });
    r
}

/// The row-major elements of `a`, borrowed where they already are.
pub(super) fn dense<'a, T: Copy>(a: &'a ArrayViewD<'_, T>) -> CowArray<'a, T, IxDyn> {
    a.as_standard_layout()
}

pub(super) fn slice<'a, T>(a: &'a CowArray<'_, T, IxDyn>) -> &'a [T] {
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
    geo.with_scratch(|cols, prod| {
        for chunk in geo.chunks() {
            let width = chunk.len * p;
            for g in 0..groups {
                geo.im2col(chunk, g, img, cols);
                let wg = matrix(og, k, &filters[g * og * k..(g + 1) * og * k]);
                let dst = matrix_mut(og, width, &mut prod[..og * width]);
                T::mm_into(
                    wg,
                    matrix(k, width, &cols[..k * width]),
                    dst,
                    rayon::current_num_threads(),
                );
                geo.scatter_group(chunk, g, prod, &mut out);
            }
        }
    });
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
    geo.with_scratch(|cols, gmat| {
        for chunk in geo.chunks() {
            let width = chunk.len * p;
            for g in 0..groups {
                geo.gather_group(chunk, g, g_all, gmat);
                let wg = matrix(og, k, &filters[g * og * k..(g + 1) * og * k]);
                let dst = matrix_mut(k, width, &mut cols[..k * width]);
                T::mm_into(
                    wg.t(),
                    matrix(og, width, &gmat[..og * width]),
                    dst,
                    rayon::current_num_threads(),
                );
                geo.col2im(chunk, g, cols, &mut dx);
            }
        }
    });
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
    geo.with_scratch(|cols, gmat| {
        for chunk in geo.chunks() {
            let width = chunk.len * p;
            for g in 0..groups {
                geo.im2col(chunk, g, img, cols);
                geo.gather_group(chunk, g, g_all, gmat);
                // dw_g^T[k, og] = cols[k, width] @ g^T[width, og]: the unrolled image is the
                // row-major A, and only the group's few output channels are packed from a
                // transposed view.
                let gm = matrix(og, width, &gmat[..og * width]);
                let cm = matrix(k, width, &cols[..k * width]);
                T::mm_into(
                    cm,
                    gm.t(),
                    matrix_mut(k, og, &mut part),
                    rayon::current_num_threads(),
                );
                let dwg = &mut dw[g * og * k..(g + 1) * og * k];
                for (r, row) in part.chunks(og).enumerate() {
                    for (o, &v) in row.iter().enumerate() {
                        dwg[o * k + r] += v;
                    }
                }
            }
        }
    });
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

pub(super) fn floats_only(what: &str, a: &TensorRef<'_>, b: &TensorRef<'_>) -> Error {
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
