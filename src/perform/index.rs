//! Indexing by tensors: `take` and `take_along_axis` (numpy's), `scatter_add` and
//! `scatter_set` (out of place, or into a buffer the runtime hands over) and `one_hot`; and
//! `cumsum`, `cumprod` and `cumprod`'s gradient, which walk an axis the same way. Each array is
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
pub(super) fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
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
        TensorRef::F16(a) => gather!(F16, a),
        TensorRef::BF16(a) => gather!(BF16, a),
    })
}

/// `scatter_add` (numpy's `add.at` on a copy of `x`: `updates[.., j, ..]` added at position
/// `indices[j]` along `axis`, in index order, so a repeated position adds up) or
/// `scatter_set` (numpy's `x[.., indices, ..] = updates` on a copy: where a position repeats,
/// the last write stays): `x` copied row-major, then updated where it is.
pub fn scatter_copy(op: &crate::ir::Op, args: &[TensorRef<'_>]) -> Result<Tensor, Error> {
    let [x, _, updates] = args else {
        return Err(err(format!("{} takes 3 inputs", op.name())));
    };
    let mut out = x.to_standard_owned();
    scatter_into(op, args, &mut out, true).unwrap_or_else(|| {
        Err(err(format!(
            "{}: an array of {} and updates of {} do not fit",
            op.name(),
            x.dtype(),
            updates.dtype()
        )))
    })?;
    Ok(out)
}

/// Where a scatter writes: every index checked against the array's axis and the updates'
/// shape against the indices before anything is written, so a failed scatter leaves its
/// buffer as it was.
struct ScatterPlan {
    at: Vec<usize>,
    outer: usize,
    n: usize,
    inner: usize,
    what: String,
}

impl ScatterPlan {
    fn new(
        what: &str,
        shape: &[usize],
        indices: &TensorRef<'_>,
        updates: &[usize],
        axis: usize,
    ) -> Result<ScatterPlan, Error> {
        if axis >= shape.len() {
            return Err(err(format!(
                "{what}: axis {axis} is out of range for rank {}",
                shape.len()
            )));
        }
        let (outer, n, inner) = split(shape, axis);
        let at = positions(what, indices, n, axis)?;
        let want = taken_shape(shape, indices, axis);
        if updates != want.as_slice() {
            return Err(err(format!(
                "{what}: the updates have shape {updates:?}, these indices need {want:?}"
            )));
        }
        Ok(ScatterPlan {
            at,
            outer,
            n,
            inner,
            what: what.to_string(),
        })
    }

    /// `combine(out element, update)` at each planned position of the row-major `out`.
    fn apply<T: Copy>(
        &self,
        out: &mut [T],
        updates: &ndarray::ArrayViewD<'_, T>,
        combine: impl Fn(&mut T, T),
    ) -> Result<(), Error> {
        let dense = updates.as_standard_layout();
        let upd = dense.as_slice().ok_or_else(|| {
            err(format!(
                "{}: a standard-layout array is contiguous",
                self.what
            ))
        })?;
        let (n, inner, m) = (self.n, self.inner, self.at.len());
        for o in 0..self.outer {
            for (j, &p) in self.at.iter().enumerate() {
                let dst = (o * n + p) * inner;
                let src = (o * m + j) * inner;
                for k in 0..inner {
                    combine(&mut out[dst + k], upd[src + k]);
                }
            }
        }
        Ok(())
    }
}

/// `scatter_add` or `scatter_set` written into `out`, a dense buffer of the result's dtype
/// and shape: where `out` is input 0's own buffer (`in_place`, the in-place pass's mark) only
/// the named positions are touched; otherwise input 0 is copied in first. `None` for other
/// ops, or where `out` does not fit.
pub fn scatter_into(
    op: &crate::ir::Op,
    args: &[TensorRef<'_>],
    out: &mut Tensor,
    in_place: bool,
) -> Option<Result<(), Error>> {
    use crate::ir::Op;
    let (what, axis, add) = match op {
        Op::ScatterAdd { axis } => ("scatter_add", *axis, true),
        Op::ScatterSet { axis } => ("scatter_set", *axis, false),
        _ => return None,
    };
    let [x, indices, updates] = args else {
        return None;
    };
    if out.shape() != x.shape() || out.dtype() != x.dtype() || out.dtype() != updates.dtype() {
        return None;
    }
    let plan = match ScatterPlan::new(what, x.shape(), indices, updates.shape(), axis) {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    macro_rules! into {
        ($o:ident, $x:ident, $u:ident, $combine:expr) => {{
            let dst = $o.as_slice_mut()?;
            if !in_place {
                match $x.as_slice() {
                    Some(src) => dst.copy_from_slice(src),
                    None => dst.iter_mut().zip($x.iter()).for_each(|(d, &v)| *d = v),
                }
            }
            plan.apply(dst, $u, $combine)
        }};
    }
    Some(match (out, x, updates) {
        (Tensor::I32(o), TensorRef::I32(a), TensorRef::I32(u)) if add => {
            into!(o, a, u, |d: &mut i32, v| *d = d.wrapping_add(v))
        }
        (Tensor::I64(o), TensorRef::I64(a), TensorRef::I64(u)) if add => {
            into!(o, a, u, |d: &mut i64, v| *d = d.wrapping_add(v))
        }
        (Tensor::F32(o), TensorRef::F32(a), TensorRef::F32(u)) if add => {
            into!(o, a, u, |d: &mut f32, v| *d += v)
        }
        (Tensor::F64(o), TensorRef::F64(a), TensorRef::F64(u)) if add => {
            into!(o, a, u, |d: &mut f64, v| *d += v)
        }
        (_, _, _) if add => return None,
        (Tensor::Bool(o), TensorRef::Bool(a), TensorRef::Bool(u)) => into!(o, a, u, |d, v| *d = v),
        (Tensor::I32(o), TensorRef::I32(a), TensorRef::I32(u)) => into!(o, a, u, |d, v| *d = v),
        (Tensor::I64(o), TensorRef::I64(a), TensorRef::I64(u)) => into!(o, a, u, |d, v| *d = v),
        (Tensor::F32(o), TensorRef::F32(a), TensorRef::F32(u)) => into!(o, a, u, |d, v| *d = v),
        (Tensor::F64(o), TensorRef::F64(a), TensorRef::F64(u)) => into!(o, a, u, |d, v| *d = v),
        (Tensor::F16(o), TensorRef::F16(a), TensorRef::F16(u)) => into!(o, a, u, |d, v| *d = v),
        (Tensor::BF16(o), TensorRef::BF16(a), TensorRef::BF16(u)) => into!(o, a, u, |d, v| *d = v),
        _ => return None,
    })
}

/// numpy `take_along_axis(x, indices, axis)`: in each lane along `axis`, the elements of `x` at
/// the positions `indices` holds there; the other dims broadcast.
pub fn take_along_axis(
    x: &TensorRef<'_>,
    indices: &TensorRef<'_>,
    axis: usize,
) -> Result<Tensor, Error> {
    let what = "take_along_axis";
    let rank = x.shape().len();
    if axis >= rank || indices.shape().len() != rank {
        return Err(err(format!(
            "{what}: axis {axis} of {}{:?} with indices of shape {:?}",
            x.dtype(),
            x.shape(),
            indices.shape()
        )));
    }
    let n = x.shape()[axis];
    let at = ArrayD::from_shape_vec(IxDyn(indices.shape()), positions(what, indices, n, axis)?)
        .map_err(|e| err(e.to_string()))?;
    // The indices' length along `axis`; elsewhere the dims broadcast (numpy's rule).
    let mut shape = Vec::with_capacity(rank);
    for (a, (&d, &i)) in x.shape().iter().zip(at.shape()).enumerate() {
        shape.push(match (d, i) {
            _ if a == axis => i,
            (d, i) if d == i || i == 1 => d,
            (1, i) => i,
            _ => {
                return Err(err(format!(
                    "{what}: axis {a} of {}{:?} and of indices of shape {:?} do not broadcast",
                    x.dtype(),
                    x.shape(),
                    at.shape()
                )))
            }
        });
    }
    let mut from = shape.clone();
    from[axis] = n;
    crate::for_each_ref!(x, a => Ok(gather_lanes(a, &at, axis, &shape, &from)?.into()))
}

/// `take_along_axis` on one dtype: `x` broadcast to `from`, the positions to `shape`.
fn gather_lanes<T: Copy>(
    x: &ndarray::ArrayViewD<'_, T>,
    at: &ArrayD<usize>,
    axis: usize,
    shape: &[usize],
    from: &[usize],
) -> Result<ArrayD<T>, Error> {
    let bad = || err("take_along_axis: the inputs do not broadcast".into());
    let xb = x.broadcast(IxDyn(from)).ok_or_else(bad)?;
    let ab = at.broadcast(IxDyn(shape)).ok_or_else(bad)?;
    let Some(&first) = xb.iter().next() else {
        // No element to read: the result is empty too (an index into an empty axis was
        // refused above).
        return ArrayD::from_shape_vec(IxDyn(shape), Vec::new()).map_err(|e| err(e.to_string()));
    };
    let mut out = ArrayD::from_elem(IxDyn(shape), first);
    let ax = ndarray::Axis(axis);
    ndarray::Zip::from(out.lanes_mut(ax))
        .and(xb.lanes(ax))
        .and(ab.lanes(ax))
        .for_each(|mut o, xl, al| {
            for (d, &p) in o.iter_mut().zip(al.iter()) {
                *d = xl[p];
            }
        });
    Ok(out)
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
impl OneOf for half::f16 {
    const ONE: half::f16 = half::f16::ONE;
}
impl OneOf for half::bf16 {
    const ONE: half::bf16 = half::bf16::ONE;
}

/// numpy `cumsum` (`op` is `Sum`) or `cumprod` (`Prod`) along `axis`: running sums or
/// products in order, in the reduction's dtype (bool counts as i64; integers wrap on
/// overflow, as numpy's do).
pub fn cumulative(
    x: &TensorRef<'_>,
    axis: usize,
    op: crate::ir::ReduceOp,
) -> Result<Tensor, Error> {
    let (what, sum) = match op {
        crate::ir::ReduceOp::Sum => ("cumsum", true),
        _ => ("cumprod", false),
    };
    macro_rules! combine {
        ($a:expr, $add:expr, $mul:expr) => {
            if sum {
                running(what, $a, axis, $add)
            } else {
                running(what, $a, axis, $mul)
            }
        };
    }
    match x {
        TensorRef::Bool(a) => combine!(
            &a.mapv(|b| b as i64).view(),
            i64::wrapping_add,
            i64::wrapping_mul
        ),
        TensorRef::I32(a) => combine!(a, i32::wrapping_add, i32::wrapping_mul),
        TensorRef::I64(a) => combine!(a, i64::wrapping_add, i64::wrapping_mul),
        TensorRef::F32(a) => combine!(a, |p: f32, q: f32| p + q, |p: f32, q: f32| p * q),
        TensorRef::F64(a) => combine!(a, |p: f64, q: f64| p + q, |p: f64, q: f64| p * q),
        TensorRef::F16(_) | TensorRef::BF16(_) => {
            Err(super::elementwise::half_arithmetic(what, x.dtype()))
        }
    }
}

/// Each element along `axis` combined with the running result before it, in order.
fn running<T: Copy>(
    what: &str,
    x: &ndarray::ArrayViewD<'_, T>,
    axis: usize,
    combine: impl Fn(T, T) -> T,
) -> Result<Tensor, Error>
where
    ArrayD<T>: Into<Tensor>,
{
    if axis >= x.ndim() {
        return Err(err(format!(
            "{what}: axis {axis} is out of range for rank {}",
            x.ndim()
        )));
    }
    let (outer, n, inner) = split(x.shape(), axis);
    let mut out: Vec<T> = x.iter().copied().collect();
    for o in 0..outer {
        for k in 1..n {
            for i in 0..inner {
                let at = (o * n + k) * inner + i;
                out[at] = combine(out[at - inner], out[at]);
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(x.shape()), out)
        .map_err(|e| err(e.to_string()))?
        .into())
}

/// The gradient of `cumprod` along `axis` with respect to `x`, given the output's gradient
/// `g`. Written without dividing by `x`, so it is exact where `x` holds zeros:
/// `dx[j] = prod(x[..j]) * s[j]` with `s[j] = g[j] + x[j + 1] * s[j + 1]`, which is
/// `sum over k >= j of g[k] * prod(x[j + 1..=k])`.
pub fn cumprod_grad(x: &TensorRef<'_>, g: &TensorRef<'_>, axis: usize) -> Result<Tensor, Error> {
    fn lanes<T: num_traits::Float>(
        x: &ndarray::ArrayViewD<'_, T>,
        g: &ndarray::ArrayViewD<'_, T>,
        axis: usize,
    ) -> Result<ArrayD<T>, Error> {
        if axis >= x.ndim() || x.shape() != g.shape() {
            return Err(err(format!(
                "cumprod_grad: axis {axis} of an input of shape {:?} and a gradient of {:?}",
                x.shape(),
                g.shape()
            )));
        }
        let (outer, n, inner) = split(x.shape(), axis);
        let xs: Vec<T> = x.iter().copied().collect();
        let gs: Vec<T> = g.iter().copied().collect();
        let mut dx = vec![T::zero(); xs.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| (o * n + k) * inner + i;
                // s, from the end, into dx.
                let mut s = T::zero();
                for k in (0..n).rev() {
                    s = if k + 1 < n {
                        gs[at(k)] + xs[at(k + 1)] * s
                    } else {
                        gs[at(k)]
                    };
                    dx[at(k)] = s;
                }
                let mut before = T::one();
                for k in 0..n {
                    dx[at(k)] = before * dx[at(k)];
                    before = before * xs[at(k)];
                }
            }
        }
        ArrayD::from_shape_vec(IxDyn(x.shape()), dx).map_err(|e| err(e.to_string()))
    }
    match (x, g) {
        (TensorRef::F32(a), TensorRef::F32(b)) => Ok(lanes(a, b, axis)?.into()),
        (TensorRef::F64(a), TensorRef::F64(b)) => Ok(lanes(a, b, axis)?.into()),
        _ => Err(err(format!(
            "cumprod_grad: takes floats of one dtype, got {} and {}",
            x.dtype(),
            g.dtype()
        ))),
    }
}
