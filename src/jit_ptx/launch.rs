//! The scalar parameters of a kernel launch for given inputs (docs/gpu.md, "Kernel ABI"): what
//! a launcher passes after the pointers, and the shape of the outputs. Shared by the host
//! oracle (`host.rs`) and the CUDA launcher (`device.rs`), over host arrays and device arrays
//! alike (`Operand`).

use crate::error::{Error, Result};
use crate::for_each_ref;
use crate::ir::ReduceOp;
use crate::tensor::TensorRef;

use super::{KernelInfo, KernelKind};

/// The launch of kernel `info` on `inputs` (its step's arguments).
pub fn kernel_launch<T: Operand>(info: &KernelInfo, inputs: &[T]) -> Result<Launch> {
    match (&info.kind, &info.reduce) {
        (KernelKind::Map, _) => map_launch(inputs, info.rank),
        (KernelKind::Reduce, Some((op, axes, keepdims))) => {
            reduce_launch(inputs, info.rank, *op, axes, *keepdims)
        }
        (KernelKind::Reduce, None) => Err(Error::Runtime(format!("{}: no reduction", info.name))),
        (KernelKind::Gather(g), _) => super::gather::gather_launch(*g, inputs),
        (KernelKind::Sort(sort), _) => super::sort::sort_launch(*sort, inputs),
        (KernelKind::ConvGrad(c, filter, dims), _) => {
            let dtype = info
                .out_dtypes
                .first()
                .copied()
                .unwrap_or(crate::ir::DType::F32);
            super::conv::conv_grad_launch(c, dtype, *dims, *filter, inputs)
        }
        (KernelKind::Pool(p, grad), _) => super::pool::pool_launch(p, *grad, inputs),
        (KernelKind::Conv(c), _) => {
            let dtype = info
                .out_dtypes
                .first()
                .copied()
                .unwrap_or(crate::ir::DType::F32);
            super::conv::conv_launch(c, dtype, inputs)
        }
        (KernelKind::Scatter(s), _) => super::scatter::scatter_launch(*s, inputs),
        (KernelKind::OneHot(depth), _) => super::one_hot::one_hot_launch(*depth, inputs),
        (KernelKind::Running(r), _) => super::running::running_launch(*r, inputs),
        (KernelKind::Concat(axis), _) => super::concat::concat_launch(*axis, inputs),
        (KernelKind::Rows(_), _) => {
            let frame = info.out_shape.as_deref().unwrap_or_default();
            super::rows::rows_launch(frame, inputs)
        }
        (KernelKind::Random, _) => {
            let shape = info.out_shape.clone().unwrap_or_default();
            let n: usize = shape.iter().product();
            Ok(Launch {
                out_shape: shape,
                scalars: vec![n as i64],
                work: n > 0,
            })
        }
    }
}

/// A kernel's launch: the output shape and the `i64` parameters that follow the pointers.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The shape of the index space the kernel's threads cover.
    pub out_shape: Vec<usize>,
    /// The `i64` parameters after the pointers: element counts, extents and strides, in the
    /// order the kernel reads them.
    pub scalars: Vec<i64>,
    /// Whether there is any work (no element: no launch).
    pub work: bool,
}

/// What the launch parameters are computed from: an argument's shape and element strides.
pub trait Operand {
    /// The argument's shape.
    fn shape(&self) -> &[usize];
    /// Its strides, in elements.
    fn strides(&self) -> Vec<isize>;

    /// Its element count.
    fn len(&self) -> usize {
        self.shape().iter().product()
    }

    /// Whether it has no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row-major and dense.
    fn is_standard_layout(&self) -> bool {
        let mut want = 1isize;
        for (&d, &s) in self.shape().iter().zip(&self.strides()).rev() {
            if d != 1 && s != want {
                return false;
            }
            want *= d as isize;
        }
        true
    }
}

impl<T: Operand> Operand for &T {
    fn shape(&self) -> &[usize] {
        (**self).shape()
    }
    fn strides(&self) -> Vec<isize> {
        (**self).strides()
    }
}

impl Operand for TensorRef<'_> {
    fn shape(&self) -> &[usize] {
        TensorRef::shape(self)
    }
    fn strides(&self) -> Vec<isize> {
        for_each_ref!(self, a => a.strides().to_vec())
    }
    fn len(&self) -> usize {
        TensorRef::len(self)
    }
    fn is_standard_layout(&self) -> bool {
        TensorRef::is_standard_layout(self)
    }
}

/// The broadcast shape of the inputs, which must have rank `rank`.
fn index_space<T: Operand>(inputs: &[T], rank: usize) -> Result<Vec<usize>> {
    let mut shape: Vec<usize> = Vec::new();
    for t in inputs {
        shape = crate::ir::broadcast_shapes(&shape, t.shape()).map_err(Error::Shape)?;
    }
    if shape.len() != rank {
        return Err(Error::Shape(format!(
            "the kernel was compiled for rank {rank}, the inputs broadcast to {shape:?}"
        )));
    }
    Ok(shape)
}

/// Input `t`'s element strides over the index space `shape` (aligned on the right): 0 along
/// dims it lacks or has as 1.
pub(super) fn strides_over<T: Operand>(t: &T, shape: &[usize]) -> Vec<i64> {
    let st: Vec<isize> = t.strides();
    (0..shape.len())
        .map(|d| crate::lower::view::stride_over(t.shape(), &st, shape.len(), d) as i64)
        .collect()
}

/// A map kernel of rank `rank` on `inputs`: `[n, flat, dims.., strides..]`.
pub fn map_launch<T: Operand>(inputs: &[T], rank: usize) -> Result<Launch> {
    let shape = index_space(inputs, rank)?;
    let n: usize = shape.iter().product();
    // Flat: each input is the whole output, contiguous, or one element.
    let flat = rank > 0
        && inputs
            .iter()
            .all(|t| t.len() == 1 || (t.shape() == shape.as_slice() && t.is_standard_layout()));
    let mut scalars = vec![n as i64, flat as i64];
    scalars.extend(shape.iter().map(|&d| d as i64));
    for t in inputs {
        let mut s = strides_over(t, &shape);
        if flat {
            // Only the last stride is read: the step from one linear index to the next.
            if let Some(last) = s.last_mut() {
                *last = (t.len() != 1) as i64;
            }
        }
        scalars.extend(s);
    }
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: n > 0,
    })
}

/// A reduce kernel of rank `rank` over `axes` (sorted) on `inputs`:
/// `[n_out, n_red, dims.., strides..]`. An empty axis of a reduction without an identity
/// (`ReduceOp::has_identity`: max, min) is the interpreter's error.
pub fn reduce_launch<T: Operand>(
    inputs: &[T],
    rank: usize,
    op: ReduceOp,
    axes: &[usize],
    keepdims: bool,
) -> Result<Launch> {
    let shape = index_space(inputs, rank)?;
    let n_red: usize = axes.iter().map(|&a| shape[a]).product();
    let out_shape: Vec<usize> = (0..rank)
        .filter_map(|d| match (axes.contains(&d), keepdims) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    let n_out: usize = out_shape.iter().product();
    if n_red == 0 && n_out > 0 && !op.has_identity() {
        return Err(Error::Shape(format!(
            "{} of an empty axis has no identity",
            op.name()
        )));
    }
    let mut scalars = vec![n_out as i64, n_red as i64];
    scalars.extend(shape.iter().map(|&d| d as i64));
    for t in inputs {
        scalars.extend(strides_over(t, &shape));
    }
    Ok(Launch {
        out_shape,
        scalars,
        work: n_out > 0,
    })
}

/// Row-major element strides of `shape` (a contiguous output's).
pub fn row_major(shape: &[usize]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1] as i64;
    }
    st
}

/// `v` without its entry `axis` (a lane's dims or strides, for kernels that walk an axis).
pub fn without(v: &[i64], axis: usize) -> Vec<i64> {
    (0..v.len()).filter(|&d| d != axis).map(|d| v[d]).collect()
}
