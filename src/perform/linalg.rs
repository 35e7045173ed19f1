//! `matmul` with numpy's semantics: 1-D operands are promoted (and the added dim removed), and
//! leading batch dims broadcast. The reference multiplies 2-D blocks with ndarray's `dot`
//! (floats) or a plain loop (integers, wrapping).

use crate::error::Error;
use crate::ir::types::broadcast_shapes;
use crate::tensor::Tensor;
use ndarray::{s, Array2, ArrayD, ArrayView2, Ix2, IxDyn, LinalgScalar};

fn err(msg: String) -> Error {
    Error::Shape(msg)
}

trait MatElem: LinalgScalar + Copy {
    fn mm(a: ArrayView2<Self>, b: ArrayView2<Self>) -> Array2<Self>;
}
impl MatElem for f32 {
    fn mm(a: ArrayView2<f32>, b: ArrayView2<f32>) -> Array2<f32> {
        a.dot(&b)
    }
}
impl MatElem for f64 {
    fn mm(a: ArrayView2<f64>, b: ArrayView2<f64>) -> Array2<f64> {
        a.dot(&b)
    }
}
macro_rules! int_mm {
    ($t:ty) => {
        impl MatElem for $t {
            fn mm(a: ArrayView2<$t>, b: ArrayView2<$t>) -> Array2<$t> {
                let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
                Array2::from_shape_fn((m, n), |(i, j)| {
                    (0..k).fold(0 as $t, |acc, p| {
                        acc.wrapping_add(a[[i, p]].wrapping_mul(b[[p, j]]))
                    })
                })
            }
        }
    };
}
int_mm!(i32);
int_mm!(i64);

fn matmul_t<T: MatElem>(a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>, Error> {
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
    // No batch: one product, written where it ends (no zero fill and copy).
    if batch.is_empty() {
        let x = av
            .into_dimensionality::<Ix2>()
            .map_err(|e| err(e.to_string()))?;
        let y = bv
            .into_dimensionality::<Ix2>()
            .map_err(|e| err(e.to_string()))?;
        let r = T::mm(x, y);
        // ndarray may lay the product out column-major (it follows the operands).
        let r = if r.is_standard_layout() {
            r
        } else {
            r.as_standard_layout().into_owned()
        };
        return r
            .into_dyn()
            .into_shape_with_order(IxDyn(&shape))
            .map_err(|e| err(e.to_string()));
    }
    let av = av
        .to_shape(IxDyn(&[nb, m, k]))
        .map_err(|e| err(e.to_string()))?;
    let bv = bv
        .to_shape(IxDyn(&[nb, k, n]))
        .map_err(|e| err(e.to_string()))?;
    let mut out = ndarray::Array3::<T>::zeros((nb, m, n));
    for i in 0..nb {
        let x = av
            .slice(s![i, .., ..])
            .into_dimensionality::<Ix2>()
            .map_err(|e| err(e.to_string()))?;
        let y = bv
            .slice(s![i, .., ..])
            .into_dimensionality::<Ix2>()
            .map_err(|e| err(e.to_string()))?;
        out.slice_mut(s![i, .., ..]).assign(&T::mm(x, y));
    }
    out.into_shape_with_order(IxDyn(&shape))
        .map_err(|e| err(e.to_string()))
}

pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, Error> {
    Ok(match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => Tensor::F32(matmul_t(x, y)?),
        (Tensor::F64(x), Tensor::F64(y)) => Tensor::F64(matmul_t(x, y)?),
        (Tensor::I32(x), Tensor::I32(y)) => Tensor::I32(matmul_t(x, y)?),
        (Tensor::I64(x), Tensor::I64(y)) => Tensor::I64(matmul_t(x, y)?),
        _ => {
            return Err(Error::Runtime(format!(
                "matmul is not defined on {} and {}",
                a.dtype(),
                b.dtype()
            )))
        }
    })
}
