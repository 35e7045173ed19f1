//! `conv2d` and pooling with their gradients. A convolution is a matrix product: each group's
//! windows of the image are unrolled into the columns of a matrix (im2col) and multiplied by
//! the filters with the same GEMM `matmul` uses; the image gradient rolls the product of the
//! transposed filters back into place (col2im). The geometry (how many windows fit) is
//! `ir::window`'s.

use super::linalg::MatElem;
use crate::error::Error;
use crate::ir::window::{Conv2d, Pool2d, PoolKind};
use crate::tensor::{Tensor, TensorRef};
use ndarray::{ArrayD, ArrayView2, ArrayViewD, ArrayViewMut2, IxDyn};

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

    /// For each row `r` of a group's unrolled image and output position `q`, the offset of the
    /// image element within the group's channels (or `None` in the padding), as `f(r, q, at)`.
    fn for_each_tap(&self, mut f: impl FnMut(usize, usize, Option<usize>)) {
        let [kh, kw] = self.kernel;
        let [h, w] = self.image;
        let [oh, ow] = self.out;
        let Conv2d {
            stride,
            padding,
            dilation,
            ..
        } = self.conv;
        for c in 0..self.c / self.conv.groups {
            for i in 0..kh {
                for j in 0..kw {
                    let r = (c * kh + i) * kw + j;
                    for y in 0..oh {
                        let iy = (y * stride[0] + i * dilation[0]).checked_sub(padding[0]);
                        for x in 0..ow {
                            let ix = (x * stride[1] + j * dilation[1]).checked_sub(padding[1]);
                            let at = match (iy, ix) {
                                (Some(iy), Some(ix)) if iy < h && ix < w => {
                                    Some((c * h + iy) * w + ix)
                                }
                                _ => None,
                            };
                            f(r, y * ow + x, at);
                        }
                    }
                }
            }
        }
    }

    /// Group `g` of image `n` unrolled into a `[k, p]` matrix.
    fn im2col<T: Copy + num_traits::Zero>(&self, img: &[T], n: usize, g: usize, cols: &mut [T]) {
        let cg = self.c / self.conv.groups;
        let base = (n * self.c + g * cg) * self.image[0] * self.image[1];
        let p = self.p();
        self.for_each_tap(|r, q, at| {
            cols[r * p + q] = at.map_or(T::zero(), |a| img[base + a]);
        });
    }

    /// The `[k, p]` matrix `cols` added back into group `g` of image `n`.
    fn col2im<T: Copy + std::ops::AddAssign>(&self, cols: &[T], n: usize, g: usize, img: &mut [T]) {
        let cg = self.c / self.conv.groups;
        let base = (n * self.c + g * cg) * self.image[0] * self.image[1];
        let p = self.p();
        self.for_each_tap(|r, q, at| {
            if let Some(a) = at {
                img[base + a] += cols[r * p + q];
            }
        });
    }
}

/// Conv elements: floats that kiln's GEMM multiplies.
trait ConvElem: MatElem + num_traits::Float + std::ops::AddAssign {}
impl ConvElem for f32 {}
impl ConvElem for f64 {}

fn dense<T: Copy>(a: &ArrayViewD<'_, T>) -> Vec<T> {
    a.iter().copied().collect()
}

fn matrix<T>(rows: usize, cols: usize, v: &[T]) -> ArrayView2<'_, T> {
    ArrayView2::from_shape((rows, cols), v).expect("a slice of rows * cols elements")
}

fn matrix_mut<T>(rows: usize, cols: usize, v: &mut [T]) -> ArrayViewMut2<'_, T> {
    ArrayViewMut2::from_shape((rows, cols), v).expect("a slice of rows * cols elements")
}

fn conv_t<T: ConvElem>(
    x: &ArrayViewD<'_, T>,
    w: &ArrayViewD<'_, T>,
    conv: &Conv2d,
) -> Result<ArrayD<T>, Error> {
    let geo = Geometry::new(conv, x.shape(), w.shape())?;
    let (k, p, groups) = (geo.k(), geo.p(), conv.groups);
    let og = geo.o / groups;
    let (img, filters) = (dense(x), dense(w));
    let mut out = vec![T::zero(); geo.n * geo.o * p];
    let mut cols = vec![T::zero(); k * p];
    for n in 0..geo.n {
        for g in 0..groups {
            geo.im2col(&img, n, g, &mut cols);
            let wg = matrix(og, k, &filters[g * og * k..(g + 1) * og * k]);
            let start = (n * geo.o + g * og) * p;
            let dst = matrix_mut(og, p, &mut out[start..start + og * p]);
            T::mm_into(wg, matrix(k, p, &cols), dst);
        }
    }
    let shape = [geo.n, geo.o, geo.out[0], geo.out[1]];
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))
}

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
    if gy.shape() != [geo.n, geo.o, geo.out[0], geo.out[1]] {
        return Err(err(format!(
            "conv2d_grad_image: a gradient of shape {:?} for an output of {:?}",
            gy.shape(),
            [geo.n, geo.o, geo.out[0], geo.out[1]]
        )));
    }
    let (k, p, groups) = (geo.k(), geo.p(), conv.groups);
    let og = geo.o / groups;
    let (g_all, filters) = (dense(gy), dense(w));
    let mut dx = vec![T::zero(); x_shape.iter().product()];
    let mut cols = vec![T::zero(); k * p];
    for n in 0..geo.n {
        for g in 0..groups {
            let wg = matrix(og, k, &filters[g * og * k..(g + 1) * og * k]);
            let start = (n * geo.o + g * og) * p;
            let gg = matrix(og, p, &g_all[start..start + og * p]);
            T::mm_into(wg.t(), gg, matrix_mut(k, p, &mut cols));
            geo.col2im(&cols, n, g, &mut dx);
        }
    }
    ArrayD::from_shape_vec(IxDyn(&x_shape), dx).map_err(|e| err(e.to_string()))
}

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
    if gs != [geo.n, geo.o, geo.out[0], geo.out[1]] {
        return Err(err(format!(
            "conv2d_grad_filter: a gradient of shape {gs:?} for an output of {:?}",
            [geo.n, geo.o, geo.out[0], geo.out[1]]
        )));
    }
    let (k, p, groups) = (geo.k(), geo.p(), conv.groups);
    let og = geo.o / groups;
    let (img, g_all) = (dense(x), dense(gy));
    let mut dw = vec![T::zero(); geo.o * k];
    let mut cols = vec![T::zero(); k * p];
    let mut part = vec![T::zero(); og * k];
    for n in 0..geo.n {
        for g in 0..groups {
            geo.im2col(&img, n, g, &mut cols);
            let start = (n * geo.o + g * og) * p;
            let gg = matrix(og, p, &g_all[start..start + og * p]);
            T::mm_into(gg, matrix(k, p, &cols).t(), matrix_mut(og, k, &mut part));
            for (d, &v) in dw[g * og * k..(g + 1) * og * k].iter_mut().zip(&part) {
                *d += v;
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&w_shape), dw).map_err(|e| err(e.to_string()))
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
trait PoolElem: Copy + PartialOrd {
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
    planes: usize,
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
            planes: shape[..r - 2].iter().product(),
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

    /// For each output element (its index) the input elements of its window that are not
    /// padding, in row-major order, as `f(out, inputs)`.
    fn for_each_window(&self, pool: &Pool2d, mut f: impl FnMut(usize, &[usize])) {
        let [h, w] = self.input;
        let [oh, ow] = self.out;
        let mut taps = Vec::with_capacity(pool.window[0] * pool.window[1]);
        for b in 0..self.planes {
            for y in 0..oh {
                for x in 0..ow {
                    taps.clear();
                    for i in 0..pool.window[0] {
                        let Some(iy) = (y * pool.stride[0] + i).checked_sub(pool.padding[0]) else {
                            continue;
                        };
                        for j in 0..pool.window[1] {
                            let ix = (x * pool.stride[1] + j).checked_sub(pool.padding[1]);
                            if let Some(ix) = ix.filter(|&ix| iy < h && ix < w) {
                                taps.push((b * h + iy) * w + ix);
                            }
                        }
                    }
                    f((b * oh + y) * ow + x, &taps);
                }
            }
        }
    }
}

/// The position of a window's greatest element: the first of equals, a NaN before anything.
fn argmax<T: PoolElem>(v: &[T], taps: &[usize]) -> usize {
    let mut best = taps[0];
    for &t in &taps[1..] {
        if v[best].is_nan() {
            break;
        }
        if v[t] > v[best] || v[t].is_nan() {
            best = t;
        }
    }
    best
}

fn max_pool_t<T: PoolElem>(x: &ArrayViewD<'_, T>, pool: &Pool2d) -> Result<ArrayD<T>, Error> {
    let planes = Planes::new(pool, x.shape())?;
    let v = dense(x);
    let shape = planes.out_shape(x.shape());
    let mut out = Vec::with_capacity(shape.iter().product());
    // Padding of at most half a window leaves every window an element (`Pool2d::check`).
    planes.for_each_window(pool, |_, taps| out.push(v[argmax(&v, taps)]));
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))
}

fn avg_pool_t<T: ConvElem>(x: &ArrayViewD<'_, T>, pool: &Pool2d) -> Result<ArrayD<T>, Error> {
    let planes = Planes::new(pool, x.shape())?;
    let v = dense(x);
    let shape = planes.out_shape(x.shape());
    let area = T::from(pool.window[0] * pool.window[1]).expect("a window's size");
    let mut out = Vec::with_capacity(shape.iter().product());
    planes.for_each_window(pool, |_, taps| {
        out.push(taps.iter().fold(T::zero(), |s, &t| s + v[t]) / area)
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
    let mut dx = vec![T::zero(); v.len()];
    let area = T::from(pool.window[0] * pool.window[1]).expect("a window's size");
    planes.for_each_window(pool, |o, taps| match pool.kind {
        PoolKind::Max => dx[argmax(&v, taps)] += g[o],
        PoolKind::Avg => {
            for &t in taps {
                dx[t] += g[o] / area;
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
