//! Reductions. The input is brought into a `[kept, reduced]` matrix (reduced axes last, row
//! major), and each row is reduced; this keeps every reduction one simple loop over a slice.

use crate::error::Error;
use crate::ir::{ReduceOp, PAIRWISE};
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};
use num_traits::Float;
use rayon::prelude::*;
use std::borrow::Cow;

/// Reductions over fewer elements stay on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

/// A float sum in numpy's pairwise order ([`PAIRWISE`], which says it as data): the rounding
/// error grows with log(n) rather than n, and the eight interleaved partial sums of a block
/// let the compiler keep them in vector registers.
pub fn pairwise_sum<F: Float>(xs: &[F]) -> F {
    if xs.len() < PAIRWISE.lanes {
        xs.iter().fold(F::zero(), |acc, &x| acc + x)
    } else if xs.len() <= PAIRWISE.block {
        // The tree of partial sums below is written out for eight lanes.
        const { assert!(PAIRWISE.lanes == 8) };
        let mut acc = [F::zero(); PAIRWISE.lanes];
        let chunks = xs.chunks_exact(PAIRWISE.lanes);
        let rest = chunks.remainder();
        for c in chunks {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a = *a + x;
            }
        }
        let head =
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        rest.iter().fold(head, |s, &x| s + x)
    } else {
        let mid = PAIRWISE.mid(xs.len());
        pairwise_sum(&xs[..mid]) + pairwise_sum(&xs[mid..])
    }
}

/// The input rearranged as rows of reduced elements, with the output shape.
struct Rows<'a, T: Clone> {
    /// Borrowed when the input already has the reduced axes last in standard layout.
    data: Cow<'a, [T]>,
    row_len: usize,
    out_shape: Vec<usize>,
}

fn rows<'a, T: Copy>(a: &'a ArrayD<T>, axes: &Option<Vec<usize>>, keepdims: bool) -> Rows<'a, T> {
    let rank = a.ndim();
    let reduced = |i: usize| axes.as_ref().is_none_or(|ax| ax.contains(&i));
    let kept: Vec<usize> = (0..rank).filter(|&i| !reduced(i)).collect();
    let red: Vec<usize> = (0..rank).filter(|&i| reduced(i)).collect();
    let perm: Vec<usize> = kept.iter().chain(&red).copied().collect();
    let view = a.view().permuted_axes(IxDyn(&perm));
    let row_len: usize = red.iter().map(|&i| a.shape()[i]).product();
    let n_kept: usize = kept.iter().map(|&i| a.shape()[i]).product();
    let data = match view.to_slice() {
        Some(s) => Cow::Borrowed(s),
        // Reduced axes first (a bias gradient's sum over the batch): a 2-D transpose, which
        // is much faster than walking the permuted n-d view element by element.
        None if a.is_standard_layout() && red.iter().zip(0..).all(|(&r, i)| r == i) => {
            let flat = a.as_slice().expect("standard layout has a slice");
            let m = ndarray::ArrayView2::from_shape((row_len, n_kept), flat)
                .expect("the shape covers the data");
            Cow::Owned(
                m.t()
                    .as_standard_layout()
                    .into_owned()
                    .into_raw_vec_and_offset()
                    .0,
            )
        }
        None => Cow::Owned(view.iter().copied().collect()),
    };
    let out_shape = (0..rank)
        .filter_map(|i| {
            if !reduced(i) {
                Some(a.shape()[i])
            } else if keepdims {
                Some(1)
            } else {
                None
            }
        })
        .collect();
    Rows {
        data,
        row_len,
        out_shape,
    }
}

impl<T: Copy + Sync> Rows<'_, T> {
    fn n_rows(&self) -> usize {
        self.out_shape.iter().product()
    }

    fn map<U: Send>(&self, f: impl Fn(&[T]) -> U + Sync) -> ArrayD<U> {
        let n = self.n_rows();
        let row = |r: usize| f(&self.data[r * self.row_len..(r + 1) * self.row_len]);
        // Rows are independent, so running them on several threads changes no result.
        let out: Vec<U> = if self.data.len() >= PARALLEL_MIN && n > 1 {
            (0..n).into_par_iter().map(row).collect()
        } else {
            (0..n).map(row).collect()
        };
        ArrayD::from_shape_vec(IxDyn(&self.out_shape), out)
            .expect("row count matches the output shape")
    }

    fn check_nonempty(&self, op: ReduceOp) -> Result<(), Error> {
        if self.row_len == 0 && self.n_rows() > 0 {
            return Err(Error::Shape(format!(
                "{} of an empty axis has no identity",
                op.name()
            )));
        }
        Ok(())
    }
}

/// The largest (or smallest) element, NaN if any element is NaN. Eight running extremes and
/// a NaN flag, with no early exit, so the loop vectorizes.
fn nan_max<F: Float>(xs: &[F], max: bool) -> F {
    if max {
        nan_extreme::<F, true>(xs)
    } else {
        nan_extreme::<F, false>(xs)
    }
}

/// `xs` combined by `f` in the generated kernels' order (`codegen::clif::reduce`, "Order of
/// operations"): element `n` of the whole groups of 8 into partial `n % 8` (each from
/// `start`), the partials combined as `((p0 p1) (p2 p3)) ((p4 p5) (p6 p7))`, then the last
/// `len % 8` one by one. Float sums split long ranges first ([`pairwise_sum`]); the other
/// float reductions take the whole row this way.
fn interleaved<F: Copy>(xs: &[F], start: F, f: impl Fn(F, F) -> F) -> F {
    let mut acc = [start; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x);
        }
    }
    let low = f(f(acc[0], acc[1]), f(acc[2], acc[3]));
    let high = f(f(acc[4], acc[5]), f(acc[6], acc[7]));
    rest.iter().fold(f(low, high), |r, &x| f(r, x))
}

/// A float product in the kernels' order ([`interleaved`]): the order shows in the rounding,
/// and in whether an overflow to infinity meets a zero (NaN) or not (a random program found a
/// product that was `0.0` on the CPU backend and NaN in a sequential fold).
fn interleaved_prod<F: Float>(xs: &[F]) -> F {
    interleaved(xs, F::one(), |a, x| a * x)
}

/// The extreme in the kernels' order ([`interleaved`]); a tie keeps the partial. Only zeros
/// of both signs show the order (a random program found `-0.0` against `0.0` when the fold of
/// the partials was sequential). Any NaN gives NaN.
fn nan_extreme<F: Float, const MAX: bool>(xs: &[F]) -> F {
    let pick = |a: F, x: F| {
        if (MAX && x > a) || (!MAX && x < a) {
            x
        } else {
            a
        }
    };
    let start = if MAX {
        F::neg_infinity()
    } else {
        F::infinity()
    };
    if xs.iter().any(|x| x.is_nan()) {
        return F::nan();
    }
    interleaved(xs, start, pick)
}

/// Index of the first extreme; a NaN counts as the extreme (the first one wins).
fn arg_extreme<T: PartialOrd + Copy>(xs: &[T], max: bool, is_nan: impl Fn(T) -> bool) -> i64 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if is_nan(x) {
            return i as i64;
        }
        if (max && x > xs[best]) || (!max && x < xs[best]) {
            best = i;
        }
    }
    best as i64
}

fn float_reduce<F: Float + Send + Sync>(
    r: &Rows<F>,
    op: ReduceOp,
    wrap: impl Fn(ArrayD<F>) -> Tensor,
) -> Result<Tensor, Error> {
    Ok(match op {
        ReduceOp::Sum => wrap(r.map(pairwise_sum)),
        ReduceOp::Mean => {
            let n = F::from(r.row_len).unwrap_or_else(F::nan);
            wrap(r.map(|xs| pairwise_sum(xs) / n))
        }
        ReduceOp::Prod => wrap(r.map(interleaved_prod)),
        ReduceOp::Max | ReduceOp::Min => {
            r.check_nonempty(op)?;
            wrap(r.map(|xs| nan_max(xs, op == ReduceOp::Max)))
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            r.check_nonempty(op)?;
            Tensor::I64(r.map(|xs| arg_extreme(xs, op == ReduceOp::ArgMax, |x: F| x.is_nan())))
        }
        ReduceOp::All => Tensor::Bool(r.map(|xs| xs.iter().all(|&x| x != F::zero()))),
        ReduceOp::Any => Tensor::Bool(r.map(|xs| xs.iter().any(|&x| x != F::zero()))),
    })
}

macro_rules! int_reduce {
    ($r:expr, $op:expr, $v:ident, $t:ty) => {{
        let (r, op) = ($r, $op);
        Ok(match op {
            ReduceOp::Sum => {
                Tensor::$v(r.map(|xs| xs.iter().fold(0 as $t, |a, &x| a.wrapping_add(x))))
            }
            ReduceOp::Prod => {
                Tensor::$v(r.map(|xs| xs.iter().fold(1 as $t, |a, &x| a.wrapping_mul(x))))
            }
            ReduceOp::Mean => {
                let n = r.row_len as f64;
                Tensor::F64(
                    r.map(|xs| pairwise_sum(&xs.iter().map(|&x| x as f64).collect::<Vec<_>>()) / n),
                )
            }
            ReduceOp::Max | ReduceOp::Min => {
                r.check_nonempty(op)?;
                let max = op == ReduceOp::Max;
                Tensor::$v(r.map(|xs| {
                    xs.iter()
                        .copied()
                        .reduce(|a, x| if max { a.max(x) } else { a.min(x) })
                        .unwrap_or(0)
                }))
            }
            ReduceOp::ArgMax | ReduceOp::ArgMin => {
                r.check_nonempty(op)?;
                Tensor::I64(r.map(|xs| arg_extreme(xs, op == ReduceOp::ArgMax, |_: $t| false)))
            }
            ReduceOp::All => Tensor::Bool(r.map(|xs| xs.iter().all(|&x| x != 0))),
            ReduceOp::Any => Tensor::Bool(r.map(|xs| xs.iter().any(|&x| x != 0))),
        })
    }};
}

pub fn reduce(
    t: &Tensor,
    op: ReduceOp,
    axes: &Option<Vec<usize>>,
    keepdims: bool,
) -> Result<Tensor, Error> {
    if let Some(ax) = axes {
        if let Some(&bad) = ax.iter().find(|&&a| a >= t.shape().len()) {
            return Err(Error::Shape(format!(
                "{}: axis {bad} is out of range for rank {}",
                op.name(),
                t.shape().len()
            )));
        }
    }
    match t {
        Tensor::F16(_) | Tensor::BF16(_) => {
            Err(super::elementwise::half_arithmetic(op.name(), t.dtype()))
        }
        Tensor::F32(a) => float_reduce(&rows(a, axes, keepdims), op, Tensor::F32),
        Tensor::F64(a) => float_reduce(&rows(a, axes, keepdims), op, Tensor::F64),
        Tensor::I32(a) => int_reduce!(&rows(a, axes, keepdims), op, I32, i32),
        Tensor::I64(a) => int_reduce!(&rows(a, axes, keepdims), op, I64, i64),
        Tensor::Bool(a) => {
            let r = rows(a, axes, keepdims);
            Ok(match op {
                ReduceOp::Sum => Tensor::I64(r.map(|xs| xs.iter().filter(|&&x| x).count() as i64)),
                ReduceOp::Prod => Tensor::I64(r.map(|xs| xs.iter().all(|&x| x) as i64)),
                ReduceOp::Mean => Tensor::F64(
                    r.map(|xs| xs.iter().filter(|&&x| x).count() as f64 / xs.len() as f64),
                ),
                ReduceOp::All => Tensor::Bool(r.map(|xs| xs.iter().all(|&x| x))),
                ReduceOp::Any => Tensor::Bool(r.map(|xs| xs.iter().any(|&x| x))),
                ReduceOp::Max | ReduceOp::Min => {
                    r.check_nonempty(op)?;
                    let max = op == ReduceOp::Max;
                    Tensor::Bool(r.map(|xs| {
                        if max {
                            xs.iter().any(|&x| x)
                        } else {
                            xs.iter().all(|&x| x)
                        }
                    }))
                }
                ReduceOp::ArgMax | ReduceOp::ArgMin => {
                    r.check_nonempty(op)?;
                    Tensor::I64(
                        r.map(|xs| arg_extreme(xs, op == ReduceOp::ArgMax, |_: bool| false)),
                    )
                }
            })
        }
    }
}
