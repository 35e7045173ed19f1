//! Indexing by tensors: `take` (numpy's, along one axis), `scatter_add` (numpy's `add.at`,
//! out of place) and `one_hot`; and `cumsum`, which walks an axis the same way. Each array is
//! seen as `[outer, n, inner]` around the indexed axis, in row-major order, so one loop serves
//! every rank. They read views (`TensorRef`): the VM's host device runs them on a call's
//! inputs where they are, so an embedding table is read, never copied.

use crate::error::Error;
use crate::tensor::{Tensor, TensorRef};
use ndarray::{ArrayD, IxDyn};

fn err(msg: String) -> Error {
    Error::Runtime(msg)
}

/// The indices as positions along an axis of `n` elements: negative counts from the end,
/// anything else outside `0..n` is an error naming the index (numpy's `IndexError`).
fn positions(
    what: &str,
    indices: &TensorRef<'_>,
    n: usize,
    axis: usize,
) -> Result<Vec<usize>, Error> {
    let raw = index_values(what, indices)?;
    raw.into_iter()
        .map(|i| {
            let p = if i < 0 { i + n as i64 } else { i };
            usize::try_from(p).ok().filter(|&p| p < n).ok_or_else(|| {
                err(format!(
                    "{what}: index {i} is out of range for axis {axis} of size {n}"
                ))
            })
        })
        .collect()
}

/// The values of an index tensor (i32 or i64), in row-major order.
fn index_values(what: &str, indices: &TensorRef<'_>) -> Result<Vec<i64>, Error> {
    Ok(match indices {
        TensorRef::I32(a) => a.iter().map(|&i| i as i64).collect(),
        TensorRef::I64(a) => a.iter().copied().collect(),
        t => {
            return Err(err(format!(
                "{what}: indices of {} are not integers",
                t.dtype()
            )))
        }
    })
}

/// `(outer, n, inner)` of `shape` around `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// The shape of `take` of an array of `shape` at `indices` along `axis`.
fn taken_shape(shape: &[usize], indices: &TensorRef<'_>, axis: usize) -> Vec<usize> {
    let mut out = shape[..axis].to_vec();
    out.extend(indices.shape());
    out.extend(&shape[axis + 1..]);
    out
}

/// numpy `take(x, indices, axis)`.
pub fn take(x: &TensorRef<'_>, indices: &TensorRef<'_>, axis: usize) -> Result<Tensor, Error> {
    if axis >= x.shape().len() {
        return Err(err(format!(
            "take: axis {axis} is out of range for rank {}",
            x.shape().len()
        )));
    }
    let (outer, n, inner) = split(x.shape(), axis);
    let at = positions("take", indices, n, axis)?;
    let shape = taken_shape(x.shape(), indices, axis);
    macro_rules! gather {
        ($v:ident, $a:ident) => {{
            // Row-major elements, borrowed where they already are (an embedding table is
            // read, not copied).
            let dense = $a.as_standard_layout();
            let src = dense
                .as_slice()
                .ok_or_else(|| err("take: a standard-layout array is contiguous".into()))?;
            let mut out = Vec::with_capacity(outer * at.len() * inner);
            for o in 0..outer {
                for &p in &at {
                    let start = (o * n + p) * inner;
                    out.extend_from_slice(&src[start..start + inner]);
                }
            }
            Tensor::$v(ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| err(e.to_string()))?)
        }};
    }
    Ok(match x {
        TensorRef::Bool(a) => gather!(Bool, a),
        TensorRef::I32(a) => gather!(I32, a),
        TensorRef::I64(a) => gather!(I64, a),
        TensorRef::F32(a) => gather!(F32, a),
        TensorRef::F64(a) => gather!(F64, a),
    })
}

/// numpy `add.at` on a copy of `x`: `updates[.., j, ..]` added at position `indices[j]` along
/// `axis`, in index order (a position repeated adds up).
pub fn scatter_add(
    x: &TensorRef<'_>,
    indices: &TensorRef<'_>,
    updates: &TensorRef<'_>,
    axis: usize,
) -> Result<Tensor, Error> {
    if axis >= x.shape().len() {
        return Err(err(format!(
            "scatter_add: axis {axis} is out of range for rank {}",
            x.shape().len()
        )));
    }
    let (outer, n, inner) = split(x.shape(), axis);
    let at = positions("scatter_add", indices, n, axis)?;
    let want = taken_shape(x.shape(), indices, axis);
    if updates.shape() != want.as_slice() || updates.dtype() != x.dtype() {
        return Err(err(format!(
            "scatter_add: the updates are {}{:?}, adding at these indices needs {}{want:?}",
            updates.dtype(),
            updates.shape(),
            x.dtype()
        )));
    }
    macro_rules! add_at {
        ($v:ident, $a:ident, $u:ident) => {{
            let mut out: Vec<_> = $a.iter().copied().collect();
            let dense = $u.as_standard_layout();
            let upd = dense
                .as_slice()
                .ok_or_else(|| err("scatter_add: a standard-layout array is contiguous".into()))?;
            let m = at.len();
            for o in 0..outer {
                for (j, &p) in at.iter().enumerate() {
                    let dst = (o * n + p) * inner;
                    let src = (o * m + j) * inner;
                    for k in 0..inner {
                        out[dst + k] += upd[src + k];
                    }
                }
            }
            Tensor::$v(
                ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| err(e.to_string()))?,
            )
        }};
    }
    Ok(match (x, updates) {
        (TensorRef::I32(a), TensorRef::I32(u)) => add_at!(I32, a, u),
        (TensorRef::I64(a), TensorRef::I64(u)) => add_at!(I64, a, u),
        (TensorRef::F32(a), TensorRef::F32(u)) => add_at!(F32, a, u),
        (TensorRef::F64(a), TensorRef::F64(u)) => add_at!(F64, a, u),
        _ => return Err(err(format!("scatter_add: adds numbers, not {}", x.dtype()))),
    })
}

/// `one_hot(indices, depth)` of `dtype`: 1 where the last index equals the index, 0 elsewhere
/// (an index outside `0..depth` gives a row of zeros).
pub fn one_hot(
    indices: &TensorRef<'_>,
    depth: usize,
    dtype: crate::ir::DType,
) -> Result<Tensor, Error> {
    let raw = index_values("one_hot", indices)?;
    let mut shape = indices.shape().to_vec();
    shape.push(depth);
    let mut out = Tensor::zeros(dtype, &shape);
    let flat: Vec<usize> = raw
        .iter()
        .enumerate()
        .filter_map(|(r, &i)| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < depth)
                .map(|i| r * depth + i)
        })
        .collect();
    crate::for_each_dtype!(&mut out, a => {
        let s = a.as_slice_mut().ok_or_else(|| err("one_hot: a fresh array is contiguous".into()))?;
        for &k in &flat {
            s[k] = one_of(s[k]);
        }
    });
    Ok(out)
}

/// The value 1 of an element type (true for bool).
fn one_of<T: OneOf>(_: T) -> T {
    T::ONE
}

trait OneOf {
    const ONE: Self;
}
impl OneOf for bool {
    const ONE: bool = true;
}
impl OneOf for i32 {
    const ONE: i32 = 1;
}
impl OneOf for i64 {
    const ONE: i64 = 1;
}
impl OneOf for f32 {
    const ONE: f32 = 1.0;
}
impl OneOf for f64 {
    const ONE: f64 = 1.0;
}

/// numpy `cumsum` along `axis`: running sums in order, in `sum`'s dtype (bool counts as i64;
/// integers wrap on overflow, as numpy's do).
pub fn cumsum(x: &TensorRef<'_>, axis: usize) -> Result<Tensor, Error> {
    if axis >= x.shape().len() {
        return Err(err(format!(
            "cumsum: axis {axis} is out of range for rank {}",
            x.shape().len()
        )));
    }
    let (outer, n, inner) = split(x.shape(), axis);
    macro_rules! running {
        ($v:ident, $vals:expr, $add:expr) => {{
            let mut out: Vec<_> = $vals;
            for o in 0..outer {
                for k in 1..n {
                    for i in 0..inner {
                        let at = (o * n + k) * inner + i;
                        out[at] = $add(out[at - inner], out[at]);
                    }
                }
            }
            Tensor::$v(
                ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| err(e.to_string()))?,
            )
        }};
    }
    Ok(match x {
        TensorRef::Bool(a) => running!(
            I64,
            a.iter().map(|&b| b as i64).collect(),
            i64::wrapping_add
        ),
        TensorRef::I32(a) => running!(I32, a.iter().copied().collect(), i32::wrapping_add),
        TensorRef::I64(a) => running!(I64, a.iter().copied().collect(), i64::wrapping_add),
        TensorRef::F32(a) => running!(F32, a.iter().copied().collect(), |p: f32, q: f32| p + q),
        TensorRef::F64(a) => running!(F64, a.iter().copied().collect(), |p: f64, q: f64| p + q),
    })
}

/// Whether `op` has an implementation on views ([`perform_view`]): the index ops.
pub fn has_view_form(op: &crate::ir::Op) -> bool {
    use crate::ir::Op;
    matches!(
        op,
        Op::Take { .. } | Op::ScatterAdd { .. } | Op::OneHot { .. } | Op::Cumsum { .. }
    )
}

/// The index ops on views (`Op::Take`, `ScatterAdd`, `OneHot`, `Cumsum`), or `None` for any
/// other op.
pub fn perform_view(
    op: &crate::ir::Op,
    args: &[TensorRef<'_>],
) -> Option<Result<Vec<Tensor>, Error>> {
    use crate::ir::Op;
    let arity = match op {
        Op::Take { .. } => 2,
        Op::ScatterAdd { .. } => 3,
        Op::OneHot { .. } | Op::Cumsum { .. } => 1,
        _ => return None,
    };
    if args.len() != arity {
        return Some(Err(err(format!(
            "{} takes {arity} inputs, got {}",
            op.name(),
            args.len()
        ))));
    }
    let out = match op {
        Op::Take { axis } => take(&args[0], &args[1], *axis),
        Op::ScatterAdd { axis } => scatter_add(&args[0], &args[1], &args[2], *axis),
        Op::OneHot { depth, dtype } => one_hot(&args[0], *depth, *dtype),
        Op::Cumsum { axis } => cumsum(&args[0], *axis),
        _ => return None,
    };
    Some(out.map(|t| vec![t]))
}
