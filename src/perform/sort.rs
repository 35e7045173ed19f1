//! `sort` and `argsort` along an axis: numpy's stable order, NaN as the greatest value;
//! descending is the same order reversed for values, ties still in index order. Each lane is
//! sorted by its positions (a stable sort of `0..n`), so both ops share one comparison.

use super::index::split;
use crate::error::Error;
use crate::tensor::{Tensor, TensorRef};
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use std::cmp::Ordering;

/// The order of two elements: numpy's, with NaN after every number.
trait SortKey: Copy {
    fn order(self, other: Self) -> Ordering;
}

macro_rules! total_key {
    ($($t:ty),*) => {$(
        impl SortKey for $t {
            fn order(self, other: Self) -> Ordering {
                self.cmp(&other)
            }
        }
    )*};
}
total_key!(bool, i32, i64);

macro_rules! float_key {
    ($($t:ty),*) => {$(
        impl SortKey for $t {
            fn order(self, other: Self) -> Ordering {
                match (self.is_nan(), other.is_nan()) {
                    (false, false) => self.partial_cmp(&other).unwrap_or(Ordering::Equal),
                    (a, b) => a.cmp(&b),
                }
            }
        }
    )*};
}
float_key!(f32, f64, half::f16, half::bf16);

/// For each lane along `axis`, the positions of its elements in sorted order, in the
/// `[outer, n, inner]` layout of the row-major elements `v`.
fn orders<T: SortKey>(v: &[T], shape: &[usize], axis: usize, descending: bool) -> Vec<usize> {
    let (outer, n, inner) = split(shape, axis);
    let mut out = vec![0; v.len()];
    let mut lane: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            lane.clear();
            lane.extend(0..n);
            // `sort_by` is stable: equal elements keep their index order either way.
            if descending {
                lane.sort_by(|&p, &q| v[at(q)].order(v[at(p)]));
            } else {
                lane.sort_by(|&p, &q| v[at(p)].order(v[at(q)]));
            }
            for (k, &p) in lane.iter().enumerate() {
                out[at(k)] = p;
            }
        }
    }
    out
}

fn check(what: &str, x: &TensorRef<'_>, axis: usize) -> Result<(), Error> {
    if axis >= x.shape().len() {
        return Err(Error::Runtime(format!(
            "{what}: axis {axis} is out of range for rank {}",
            x.shape().len()
        )));
    }
    Ok(())
}

fn sorted<T: SortKey>(a: &ArrayViewD<'_, T>, axis: usize, descending: bool) -> ArrayD<T> {
    let v: Vec<T> = a.iter().copied().collect();
    let order = orders(&v, a.shape(), axis, descending);
    let (_, n, inner) = split(a.shape(), axis);
    // Element `e` of the result is the lane's element `order[e]`: same outer and inner index.
    let out = (0..v.len())
        .map(|e| {
            let (o, i) = (e / (n * inner), e % inner);
            v[(o * n + order[e]) * inner + i]
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(a.shape()), out).expect("the input's shape")
}

/// numpy `sort(x, axis)`, largest first when `descending`.
pub fn sort(x: &TensorRef<'_>, axis: usize, descending: bool) -> Result<Tensor, Error> {
    check("sort", x, axis)?;
    Ok(crate::for_each_ref!(x, a => sorted(a, axis, descending).into()))
}

/// numpy `argsort(x, axis, kind="stable")` as i64, largest first when `descending`.
pub fn argsort(x: &TensorRef<'_>, axis: usize, descending: bool) -> Result<Tensor, Error> {
    check("argsort", x, axis)?;
    let order = crate::for_each_ref!(x, a => {
        let v: Vec<_> = a.iter().copied().collect();
        orders(&v, a.shape(), axis, descending)
    });
    let positions = order.into_iter().map(|p| p as i64).collect();
    Ok(Tensor::I64(
        ArrayD::from_shape_vec(IxDyn(x.shape()), positions).expect("the input's shape"),
    ))
}
