//! Shape ops. In the reference interpreter they copy or restride freely; aliasing (their
//! `view_map`) matters to the backends and the in-place pass, not here.

use crate::error::Error;
use crate::ir::infer::slice_bounds;
use crate::map_tensor;
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis, IxDyn};

fn err(msg: String) -> Error {
    Error::Shape(msg)
}

/// A view op applied to an array that is given up, without copying where its buffer can hold
/// the result as it is: a transpose restrides it (the result is then not row-major: whoever
/// needs row-major copies), a reshape of a row-major array relabels it. `Err` gives the array
/// back where the op needs a copy or its attributes do not fit (the copying op then says so).
/// The elements are the op's, so a backend may use it in place of `perform` for the last use
/// of an array.
pub fn view_moving(op: &crate::ir::Op, t: Tensor) -> Result<Tensor, Tensor> {
    use crate::ir::Op;
    match op {
        Op::Transpose { perm } if crate::ir::infer::is_permutation(perm, t.shape().len()) => {
            Ok(map_tensor!(t, a => a.permuted_axes(IxDyn(perm))))
        }
        Op::Reshape { shape } if t.view().is_standard_layout() => {
            let Ok(target) = resolve_reshape(t.shape(), shape) else {
                return Err(t);
            };
            // Row-major and dense: the same buffer read with the new shape.
            Ok(map_tensor!(t, a => a
                .into_shape_with_order(IxDyn(&target))
                .expect("a row-major array takes any shape of its size")))
        }
        _ => Err(t),
    }
}

pub fn transpose(t: &Tensor, perm: &[usize]) -> Result<Tensor, Error> {
    if perm.len() != t.shape().len() {
        return Err(err(format!(
            "transpose: perm {perm:?} does not fit rank {}",
            t.shape().len()
        )));
    }
    if perm == [1, 0] {
        return Ok(map_tensor!(t, a => transpose_2d(a)));
    }
    Ok(map_tensor!(t, a => crate::tensor::row_major_copy(&a.view().permuted_axes(IxDyn(perm)))))
}

/// A matrix transposed into row-major order, in 32 x 32 tiles so that both sides stay in cache
/// (walking the permuted n-d view element by element is several times slower; the MLP's
/// gradients transpose every weight matrix each step).
fn transpose_2d<T: Copy + Default>(a: &ndarray::ArrayD<T>) -> ndarray::ArrayD<T> {
    let (m, n) = (a.shape()[0], a.shape()[1]);
    let Some(src) = a.as_slice() else {
        return a.view().reversed_axes().as_standard_layout().into_owned();
    };
    const TILE: usize = 32;
    let mut out = vec![T::default(); m * n];
    for i0 in (0..m).step_by(TILE) {
        for j0 in (0..n).step_by(TILE) {
            for i in i0..(i0 + TILE).min(m) {
                for j in j0..(j0 + TILE).min(n) {
                    out[j * m + i] = src[i * n + j];
                }
            }
        }
    }
    ndarray::ArrayD::from_shape_vec(IxDyn(&[n, m]), out).expect("n * m elements")
}

/// The target shape with its -1 resolved, or an error when the element counts differ.
pub fn resolve_reshape(from: &[usize], to: &[i64]) -> Result<Vec<usize>, Error> {
    let total: usize = from.iter().product();
    let known =
        crate::ir::infer::checked_numel(to.iter().filter(|&&d| d >= 0).map(|&d| d as usize))
            .ok_or_else(|| {
                err(format!(
                    "reshape: the target shape {to:?} has too many elements"
                ))
            })?;
    let holes = to.iter().filter(|&&d| d == -1).count();
    let bad = || {
        err(format!(
            "reshape: cannot reshape {from:?} ({total} elements) to {to:?}"
        ))
    };
    match holes {
        0 if known == total => Ok(to.iter().map(|&d| d as usize).collect()),
        1 if known != 0 && total.is_multiple_of(known) => Ok(to
            .iter()
            .map(|&d| if d == -1 { total / known } else { d as usize })
            .collect()),
        _ => Err(bad()),
    }
}

pub fn reshape(t: &Tensor, shape: &[i64]) -> Result<Tensor, Error> {
    let target = resolve_reshape(t.shape(), shape)?;
    Ok(map_tensor!(t, a => {
        // Row-major elements are copied as one block; others row by row in logical order.
        let flat = crate::tensor::row_major_copy(&a.view()).into_raw_vec_and_offset().0;
        ArrayD::from_shape_vec(IxDyn(&target), flat).map_err(|e| err(e.to_string()))?
    }))
}

pub fn broadcast_to(t: &Tensor, shape: &[usize]) -> Result<Tensor, Error> {
    let bad = || {
        err(format!(
            "broadcast_to: cannot broadcast {:?} to {shape:?}",
            t.shape()
        ))
    };
    Ok(map_tensor!(t, a => a.broadcast(IxDyn(shape)).ok_or_else(bad)?.to_owned()))
}

pub fn expand_dims(t: &Tensor, axes: &[usize]) -> Result<Tensor, Error> {
    let rank = t.shape().len() + axes.len();
    if axes.iter().any(|&a| a >= rank) {
        return Err(err(format!(
            "expand_dims: axes {axes:?} out of range for rank {rank}"
        )));
    }
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    Ok(map_tensor!(t, a => {
        let mut v = a.view();
        for &ax in &sorted {
            v.insert_axis_inplace(Axis(ax));
        }
        v.to_owned()
    }))
}

pub fn squeeze(t: &Tensor, axes: &[usize]) -> Result<Tensor, Error> {
    for &ax in axes {
        match t.shape().get(ax) {
            Some(1) => {}
            Some(d) => return Err(err(format!("squeeze: axis {ax} has size {d}, not 1"))),
            None => return Err(err(format!("squeeze: axis {ax} is out of range"))),
        }
    }
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    Ok(map_tensor!(t, a => {
        let mut v = a.view();
        for &ax in sorted.iter().rev() {
            v = v.index_axis_move(Axis(ax), 0);
        }
        v.to_owned()
    }))
}

pub fn concat(ts: &[&Tensor], axis: usize) -> Result<Tensor, Error> {
    let first = ts
        .first()
        .ok_or_else(|| err("concat takes at least one input".into()))?;
    for t in ts {
        let same = t.dtype() == first.dtype()
            && t.shape().len() == first.shape().len()
            && axis < t.shape().len()
            && t.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(i, (a, b))| i == axis || a == b);
        if !same {
            return Err(err(format!(
                "concat: shapes {:?} and {:?} do not join along axis {axis}",
                first.shape(),
                t.shape()
            )));
        }
    }
    macro_rules! join {
        ($v:ident) => {{
            let views: Vec<_> = ts
                .iter()
                .map(|t| match t {
                    Tensor::$v(a) => Ok(a.view()),
                    _ => Err(err("concat: mixed dtypes".into())),
                })
                .collect::<Result<_, _>>()?;
            Tensor::$v(ndarray::concatenate(Axis(axis), &views).map_err(|e| err(e.to_string()))?)
        }};
    }
    Ok(match first {
        Tensor::Bool(_) => join!(Bool),
        Tensor::I32(_) => join!(I32),
        Tensor::I64(_) => join!(I64),
        Tensor::F32(_) => join!(F32),
        Tensor::F64(_) => join!(F64),
        Tensor::F16(_) => join!(F16),
        Tensor::BF16(_) => join!(BF16),
    })
}

pub fn slice(t: &Tensor, starts: &[i64], stops: &[i64], steps: &[i64]) -> Result<Tensor, Error> {
    if starts.len() > t.shape().len() || steps.contains(&0) {
        return Err(err(format!(
            "slice: {} axes with steps {steps:?} on rank {}",
            starts.len(),
            t.shape().len()
        )));
    }
    let mut out = t.clone();
    for ax in 0..starts.len() {
        let n = out.shape()[ax];
        let (start, len) = slice_bounds(n, starts[ax], stops[ax], steps[ax]);
        let idx: Vec<usize> = (0..len as i64)
            .map(|k| (start + k * steps[ax]) as usize)
            .collect();
        out = map_tensor!(&out, a => a.select(Axis(ax), &idx));
    }
    Ok(out)
}
