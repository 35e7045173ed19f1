//! `matmul` with numpy's semantics: 1-D operands are promoted (and the added dim removed), and
//! leading batch dims broadcast. The reference multiplies 2-D blocks with ndarray's
//! [`crate::gemm`] (floats, on hosts with AVX2 and FMA), ndarray's `general_mat_mul` (other
//! floats: matrixmultiply's GEMM) or a plain loop (integers, wrapping).

use crate::error::Error;
use crate::ir::types::broadcast_shapes;
use crate::tensor::{Tensor, TensorRef};
use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayD, ArrayView2, ArrayViewD, ArrayViewMut2, IxDyn, LinalgScalar};

fn err(msg: String) -> Error {
    Error::Shape(msg)
}

pub(super) trait MatElem: LinalgScalar + Copy + Send + Sync {
    /// `c = a @ b`, every element of `c` overwritten (whatever it held before), on at most
    /// `threads` threads.
    fn mm_into(a: ArrayView2<Self>, b: ArrayView2<Self>, c: ArrayViewMut2<Self>, threads: usize);

    /// `w = w - (a @ b) * scale` by kiln's GEMM where the host runs it (`true`); else `w` is
    /// untouched (`false`).
    fn gemm_update(
        _a: ArrayView2<Self>,
        _b: ArrayView2<Self>,
        _w: ArrayViewMut2<Self>,
        _scale: Self,
    ) -> bool {
        false
    }
}
macro_rules! float_mm {
    ($t:ty) => {
        impl MatElem for $t {
            fn mm_into(
                a: ArrayView2<$t>,
                b: ArrayView2<$t>,
                mut c: ArrayViewMut2<$t>,
                threads: usize,
            ) {
                // beta = 0: C is written, never read (kiln's GEMM, and ndarray zero-fills
                // before its own loop fallback; matrixmultiply does not read C), so a recycled
                // buffer is fine.
                #[cfg(target_arch = "x86_64")]
                if crate::gemm::product_on(a.view(), b.view(), c.view_mut(), threads).is_some() {
                    return;
                }
                general_mat_mul(1.0, &a, &b, 0.0, &mut c);
            }

            #[cfg(target_arch = "x86_64")]
            fn gemm_update(
                a: ArrayView2<$t>,
                b: ArrayView2<$t>,
                w: ArrayViewMut2<$t>,
                scale: $t,
            ) -> bool {
                crate::gemm::update(a, b, w, scale).is_some()
            }
        }
    };
}
float_mm!(f32);
float_mm!(f64);
macro_rules! int_mm {
    ($t:ty) => {
        impl MatElem for $t {
            fn mm_into(a: ArrayView2<$t>, b: ArrayView2<$t>, mut c: ArrayViewMut2<$t>, _: usize) {
                let k = a.ncols();
                for ((i, j), c) in c.indexed_iter_mut() {
                    *c = (0..k).fold(0 as $t, |acc, p| {
                        acc.wrapping_add(a[[i, p]].wrapping_mul(b[[p, j]]))
                    });
                }
            }
        }
    };
}
int_mm!(i32);
int_mm!(i64);

/// `a @ b` written into `dest` when it has the result's shape and standard layout, else into a
/// new array. The interpreter and the compiled backends share it, so they agree bit for bit.
fn matmul_t<T: MatElem>(
    a: ArrayViewD<T>,
    b: ArrayViewD<T>,
    dest: Option<ArrayD<T>>,
) -> Result<ArrayD<T>, Error> {
    let (ra, rb) = (a.ndim(), b.ndim());
    if ra == 0 || rb == 0 {
        return Err(err("matmul: operands must have at least one dim".into()));
    }
    // Promote 1-D operands to matrices.
    let a2 = if ra == 1 {
        a.view().insert_axis(ndarray::Axis(0))
    } else {
        a.view()
    };
    let b2 = if rb == 1 {
        b.view().insert_axis(ndarray::Axis(1))
    } else {
        b.view()
    };
    let (m, k) = (a2.shape()[a2.ndim() - 2], a2.shape()[a2.ndim() - 1]);
    let (k2, n) = (b2.shape()[b2.ndim() - 2], b2.shape()[b2.ndim() - 1]);
    if k != k2 {
        return Err(err(format!(
            "matmul: inner dims {k} and {k2} differ ({:?} @ {:?})",
            a.shape(),
            b.shape()
        )));
    }
    let batch = broadcast_shapes(&a2.shape()[..a2.ndim() - 2], &b2.shape()[..b2.ndim() - 2])
        .map_err(|e| err(format!("matmul: {e}")))?;
    let full = |mut s: Vec<usize>, x: usize, y: usize| {
        s.push(x);
        s.push(y);
        s
    };
    let av = a2
        .broadcast(IxDyn(&full(batch.clone(), m, k)))
        .ok_or_else(|| err("matmul: batch".into()))?;
    let bv = b2
        .broadcast(IxDyn(&full(batch.clone(), k, n)))
        .ok_or_else(|| err("matmul: batch".into()))?;
    let nb: usize = batch.iter().product();
    let mut shape = batch.clone();
    if ra > 1 {
        shape.push(m);
    }
    if rb > 1 {
        shape.push(n);
    }
    let mut out = match dest {
        Some(d) if d.shape() == shape.as_slice() && d.is_standard_layout() => d,
        _ => ArrayD::zeros(IxDyn(&shape)),
    };
    let shape_err = |e: ndarray::ShapeError| err(e.to_string());
    if b2.ndim() == 2 && nb > 1 {
        // `b` is one matrix for the whole batch: one product of all the batch's rows, where a
        // product per batch would pack `b` again each time (and broadcasting `b` to the batch
        // copied it). Each element's sum runs over k in the same order: the same bits.
        let rows = a2.to_shape((nb * m, k)).map_err(shape_err)?;
        let b2 = b2
            .into_dimensionality::<ndarray::Ix2>()
            .map_err(shape_err)?;
        let c = out
            .view_mut()
            .into_shape_with_order((nb * m, n))
            .map_err(shape_err)?;
        T::mm_into(rows.view(), b2, c, rayon::current_num_threads());
        return Ok(out);
    }
    let mut c = out
        .view_mut()
        .into_shape_with_order((nb, m, n))
        .map_err(shape_err)?;
    // The batch's matrices read where they lie (a head split's transpose is a restride, and
    // merging its batch dims would copy it).
    let (xs, ys) = (matrices(av), matrices(bv));
    let threads = rayon::current_num_threads();
    if nb > 1 && threads > 1 && m * n * k < BATCH_SIDE_BY_SIDE {
        // Small products, one per thread side by side: split, each of attention's 64 x 64 x
        // 32 products ran at 0.4x the rate of one on a thread alone. The bits are the same:
        // a product's sums do not depend on its threads.
        use rayon::prelude::*;
        let cs: Vec<_> = c.outer_iter_mut().collect();
        cs.into_par_iter()
            .zip(xs.into_par_iter().zip(ys))
            .for_each(|(c, (x, y))| T::mm_into(x, y, c, 1));
    } else {
        for (c, (x, y)) in c.outer_iter_mut().zip(xs.into_iter().zip(ys)) {
            T::mm_into(x, y, c, threads);
        }
    }
    Ok(out)
}

/// Multiply-adds below which the products of a batch run side by side, each on one thread,
/// rather than one after another, each split among the threads.
const BATCH_SIDE_BY_SIDE: usize = 1 << 21;

/// The matrices of a batch (the last two axes of `a`), in row-major order of the batch.
fn matrices<T>(a: ArrayViewD<'_, T>) -> Vec<ArrayView2<'_, T>> {
    match a.ndim() {
        2 => vec![a.into_dimensionality().expect("two axes")],
        _ => (0..a.len_of(ndarray::Axis(0)))
            .flat_map(|i| matrices(a.clone().index_axis_move(ndarray::Axis(0), i)))
            .collect(),
    }
}

/// `a @ b` (numpy's matmul), written into `dest` where it fits.
pub fn matmul_into(
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    dest: Option<Tensor>,
) -> Result<Tensor, Error> {
    Ok(match (a, b) {
        (TensorRef::F32(x), TensorRef::F32(y)) => Tensor::F32(matmul_t(
            x.view(),
            y.view(),
            dest.and_then(|d| match d {
                Tensor::F32(d) => Some(d),
                _ => None,
            }),
        )?),
        (TensorRef::F64(x), TensorRef::F64(y)) => Tensor::F64(matmul_t(
            x.view(),
            y.view(),
            dest.and_then(|d| match d {
                Tensor::F64(d) => Some(d),
                _ => None,
            }),
        )?),
        (TensorRef::I32(x), TensorRef::I32(y)) => Tensor::I32(matmul_t(
            x.view(),
            y.view(),
            dest.and_then(|d| match d {
                Tensor::I32(d) => Some(d),
                _ => None,
            }),
        )?),
        (TensorRef::I64(x), TensorRef::I64(y)) => Tensor::I64(matmul_t(
            x.view(),
            y.view(),
            dest.and_then(|d| match d {
                Tensor::I64(d) => Some(d),
                _ => None,
            }),
        )?),
        // Halves: read once into f32 (O(mk + kn) beside the product's O(mkn)), multiplied by
        // the f32 GEMM, so they give the bits of the same product of f32 operands.
        (TensorRef::F16(_), TensorRef::F16(_)) | (TensorRef::BF16(_), TensorRef::BF16(_)) => {
            let (x, y) = (widen(a), widen(b));
            return matmul_into(&x.view(), &y.view(), dest);
        }
        _ => {
            return Err(Error::Runtime(format!(
                "matmul is not defined on {} and {}",
                a.dtype(),
                b.dtype()
            )))
        }
    })
}

/// A half tensor's f32 values, row-major (through `half`'s slice conversion, which uses the
/// host's F16C where it has it: ~10x the per-element conversion).
fn widen(t: &TensorRef<'_>) -> Tensor {
    use half::slice::HalfFloatSliceExt;
    fn wide<T: Clone>(a: &ArrayViewD<'_, T>, convert: impl Fn(&[T], &mut [f32])) -> Tensor {
        let a = a.as_standard_layout();
        let src = a.as_slice().expect("standard layout");
        let mut out = vec![0f32; src.len()];
        convert(src, &mut out);
        Tensor::F32(ArrayD::from_shape_vec(a.raw_dim(), out).expect("the same shape"))
    }
    match t {
        TensorRef::F16(a) => wide(a, |s, d| s.convert_to_f32_slice(d)),
        TensorRef::BF16(a) => wide(a, |s, d| s.convert_to_f32_slice(d)),
        _ => t.to_owned(),
    }
}

pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, Error> {
    matmul_into(&a.view(), &b.view(), None)
}

/// `w = w - (a @ b) * scale` for 2-D float operands of one dtype (a fused gradient step,
/// `lower::gemm_update`): kiln's GEMM update where the host runs it, else the product and
/// then the elementwise step. Both give the bits of the two separate steps.
pub fn matmul_update(
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    w: &mut Tensor,
    scale: f64,
) -> Result<(), Error> {
    match (a, b, w) {
        (TensorRef::F32(x), TensorRef::F32(y), Tensor::F32(w)) => update_t(x, y, w, scale as f32),
        (TensorRef::F64(x), TensorRef::F64(y), Tensor::F64(w)) => update_t(x, y, w, scale),
        (a, b, w) => Err(Error::Runtime(format!(
            "a gemm update is not defined on {}, {} and {}",
            a.dtype(),
            b.dtype(),
            w.dtype()
        ))),
    }
}

fn update_t<T>(
    a: &ArrayViewD<T>,
    b: &ArrayViewD<T>,
    w: &mut ArrayD<T>,
    scale: T,
) -> Result<(), Error>
where
    T: MatElem,
{
    let two_d = |s: &[usize]| -> Result<(usize, usize), Error> {
        match s {
            &[r, c] => Ok((r, c)),
            _ => Err(err(format!("a gemm update takes matrices, not {s:?}"))),
        }
    };
    let ((m, k), (k2, n)) = (two_d(a.shape())?, two_d(b.shape())?);
    if k != k2 || w.shape() != [m, n] {
        return Err(err(format!(
            "gemm update: {:?} @ {:?} into {:?}",
            a.shape(),
            b.shape(),
            w.shape()
        )));
    }
    let shape_err = |e: ndarray::ShapeError| err(e.to_string());
    let a = a
        .view()
        .into_dimensionality::<ndarray::Ix2>()
        .map_err(shape_err)?;
    let b = b
        .view()
        .into_dimensionality::<ndarray::Ix2>()
        .map_err(shape_err)?;
    let mut w = w
        .view_mut()
        .into_dimensionality::<ndarray::Ix2>()
        .map_err(shape_err)?;
    if !T::gemm_update(a.view(), b.view(), w.view_mut(), scale) {
        update_by_product(a, b, w, scale);
    }
    Ok(())
}

/// `w = w - (a @ b) * scale` as the two steps it stands for (hosts without kiln's GEMM).
fn update_by_product<T: MatElem>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    mut w: ArrayViewMut2<T>,
    scale: T,
) {
    let mut p = ndarray::Array2::<T>::zeros((a.nrows(), b.ncols()));
    T::mm_into(a, b, p.view_mut(), rayon::current_num_threads());
    w.zip_mut_with(&p, |w, &p| *w = *w - p * scale);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::s;

    /// The update by kiln's GEMM and the two steps give the same bits (where the host runs
    /// kiln's GEMM; elsewhere both are the two steps).
    #[test]
    fn the_fused_update_is_the_product_then_the_step() {
        let (m, k, n) = (37, 300, 29);
        let f = |i: usize| ((i * 7919) % 1013) as f32 / 97.0 - 5.0;
        let a = ndarray::Array2::from_shape_fn((m, k), |(i, j)| f(i * k + j));
        let b = ndarray::Array2::from_shape_fn((k, n), |(i, j)| f(i * n + j + 5));
        let w0 = ndarray::Array2::from_shape_fn((m, n), |(i, j)| f(i * n + j + 11));
        let mut steps = w0.clone();
        update_by_product(a.view(), b.view(), steps.view_mut(), 0.01);
        let mut fused = Tensor::F32(w0.clone().into_dyn());
        let (ta, tb) = (Tensor::F32(a.into_dyn()), Tensor::F32(b.into_dyn()));
        matmul_update(&ta.view(), &tb.view(), &mut fused, 0.01).unwrap();
        let same = fused
            .to_f64_vec()
            .iter()
            .zip(steps.iter())
            .all(|(x, &y)| *x == y as f64);
        assert!(same);
        assert_ne!(steps, w0, "the step changed nothing");
        // Shapes that do not chain, and dtypes it does not take, are errors.
        let bad = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[3, 3])));
        assert!(matmul_update(&ta.view(), &tb.view(), &mut bad.clone(), 0.5).is_err());
        let ints = Tensor::I32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[37, 29])));
        assert!(matmul_update(&ta.view(), &tb.view(), &mut ints.clone(), 0.5).is_err());
    }

    /// A batch against one matrix, done as one product of every row, gives the bits of a
    /// product per batch entry, for a batch in any layout (here transposed).
    #[test]
    fn one_product_for_a_batch_gives_the_bits_of_one_per_entry() {
        let f = |i: usize| ((i * 7919) % 1013) as f32 / 97.0 - 5.0;
        let a = ndarray::Array3::from_shape_fn((5, 3, 300), |(i, j, p)| f(i * 900 + j * 300 + p));
        let a = a.permuted_axes([1, 0, 2]); // [3, 5, 300], not contiguous
        let b = ndarray::Array2::from_shape_fn((300, 29), |(i, j)| f(i * 29 + j + 5));
        let got = matmul_t(a.view().into_dyn(), b.view().into_dyn(), None).unwrap();
        assert_eq!(got.shape(), [3, 5, 29]);
        for e in 0..3 {
            let mut one = ndarray::Array2::<f32>::zeros((5, 29));
            f32::mm_into(a.slice(s![e, .., ..]), b.view(), one.view_mut(), 1);
            let same = (got.slice(s![e, .., ..]).iter().zip(one.iter()))
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "batch entry {e}");
        }
    }
}
