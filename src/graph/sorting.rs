//! Builders for the ops that gather by positions along an axis and those that give them:
//! `take_along_axis`, `scatter_set`, `cumprod`, `sort`, `argsort` and `topk`.

use super::Var;
use crate::error::SourceLoc;
use crate::ir::types::normalize_axis;
use crate::ir::Op;

impl Var {
    /// numpy `take_along_axis`: `indices` (i32 or i64, this tensor's rank) picks, in each lane
    /// along `axis` (negative counts from the end), which elements go there; the other dims
    /// broadcast. With `argsort`'s result it reorders, with `topk`'s it selects. Its gradient
    /// adds the output's gradient back at the positions read. An index out of range is an
    /// error when the function runs.
    #[track_caller]
    pub fn take_along_axis(&self, indices: &Var, axis: i64) -> Var {
        let loc = SourceLoc::caller();
        match normalize_axis(axis, self.rank()) {
            Ok(axis) => self.apply1(Op::TakeAlongAxis { axis }, &[indices], loc),
            Err(e) => self.apply_with(loc, |_| Err(format!("take_along_axis: {e}"))),
        }
    }

    /// numpy `cumprod` along `axis` (negative counts from the end): running products,
    /// multiplied in order; the dtype is `prod`'s (bool gives i64). Its gradient is exact where
    /// the input holds zeros.
    #[track_caller]
    pub fn cumprod(&self, axis: i64) -> Var {
        self.along(axis, SourceLoc::caller(), |axis| Op::Cumprod { axis })
    }

    /// numpy `sort` along `axis` (negative counts from the end): stable, NaN last.
    #[track_caller]
    pub fn sort(&self, axis: i64) -> Var {
        self.along(axis, SourceLoc::caller(), |axis| Op::Sort {
            axis,
            descending: false,
        })
    }

    /// `sort`, largest first (NaN first); equal elements stay in index order.
    #[track_caller]
    pub fn sort_descending(&self, axis: i64) -> Var {
        self.along(axis, SourceLoc::caller(), |axis| Op::Sort {
            axis,
            descending: true,
        })
    }

    /// numpy `argsort(kind="stable")` along `axis`, as i64 positions.
    #[track_caller]
    pub fn argsort(&self, axis: i64) -> Var {
        self.along(axis, SourceLoc::caller(), |axis| Op::Argsort {
            axis,
            descending: false,
        })
    }

    /// The positions that sort the lanes along `axis` largest first (equal elements in index
    /// order), as i64.
    #[track_caller]
    pub fn argsort_descending(&self, axis: i64) -> Var {
        self.along(axis, SourceLoc::caller(), |axis| Op::Argsort {
            axis,
            descending: true,
        })
    }

    /// JAX's `lax.top_k`: the `k` largest elements of each lane along the last axis, largest
    /// first (equal elements in index order), and their positions (i64). Built from
    /// `argsort_descending` and `take_along_axis`, so it sorts the whole lane. A lane shorter
    /// than `k` is an error (at build time where its length is known, else at run time), as
    /// in JAX.
    #[track_caller]
    pub fn topk(&self, k: i64) -> (Var, Var) {
        let loc = SourceLoc::caller();
        let rank = self.rank();
        let n = self.ty().shape.last().copied().flatten();
        // A negative k takes nothing and is refused; no lane holds more than i64::MAX.
        let fits = rank > 0 && k >= 0 && n.is_none_or(|n| k as usize <= n);
        if !fits {
            let bad = self.apply_with(loc, |t| {
                Err(match k < 0 {
                    true => format!("topk: k = {k} is negative"),
                    false => format!("topk: k = {k} is more than the last axis of {t} holds"),
                })
            });
            return (bad.clone(), bad);
        }
        let order = self.apply1(
            Op::Argsort {
                axis: rank - 1,
                descending: true,
            },
            &[],
            loc,
        );
        // The first `stop` positions of each lane.
        let first = |stop: i64| {
            let mut ranges = vec![(None, None, 1); rank];
            ranges[rank - 1] = (None, Some(stop), 1);
            order.slice(&ranges)
        };
        let indices = if n.is_some() || k == 0 {
            first(k)
        } else {
            // A lane known only at run time may be shorter than k, where a slice would give
            // fewer without a word. The first k - 1 positions are sliced and the k-th is taken
            // by index, which is an error naming `topk` where the lane is shorter: nothing of
            // k elements is made before that check (k indices to take would be 16 GB for
            // k = 2^31, on a lane of 3).
            let kth = crate::Tensor::I64(ndarray::arr1(&[k - 1]).into_dyn());
            let kth = order
                .apply1(
                    Op::Take { axis: rank - 1 },
                    &[&self.graph().constant(kth)],
                    loc,
                )
                .named("topk positions");
            let first_k = super::concat(&[&first(k - 1), &kth], rank as i64 - 1);
            // The lane is now k long: said in the type where the other dims allow.
            let lead = &self.ty().shape[..rank - 1];
            let unknown = lead.iter().filter(|d| d.is_none()).count();
            if unknown <= 1 && lead.iter().all(|d| *d != Some(0)) {
                let mut dims: Vec<i64> = lead.iter().map(|d| d.map_or(-1, |d| d as i64)).collect();
                dims.push(k);
                first_k.reshape(&dims)
            } else {
                first_k
            }
        };
        let values = self.apply1(Op::TakeAlongAxis { axis: rank - 1 }, &[&indices], loc);
        (values, indices)
    }

    /// An op with one axis parameter, the axis normalized against this tensor's rank.
    fn along(&self, axis: i64, loc: SourceLoc, op: impl Fn(usize) -> Op) -> Var {
        self.apply_with(loc, |t| {
            let axis =
                normalize_axis(axis, t.rank()).map_err(|e| format!("{}: {e}", op(0).name()))?;
            Ok(op(axis))
        })
    }
}

/// numpy's `x[.., indices, ..] = updates` on a copy of `x` (Theano's `set_subtensor` with
/// integer indices), along `axis` (negative counts from the end): `updates` has the shape
/// `x.take(indices, axis)` has; where a position repeats, the last write in index order stays.
/// Gradients: `x`'s is the output's with zeros where it was written, `updates`' the output's
/// taken at the indices (zero for writes that a later one overwrote). An index out of range is
/// an error when the function runs.
#[track_caller]
pub fn scatter_set(x: &Var, indices: &Var, updates: &Var, axis: i64) -> Var {
    let loc = SourceLoc::caller();
    match normalize_axis(axis, x.rank()) {
        Ok(axis) => x.apply1(Op::ScatterSet { axis }, &[indices, updates], loc),
        Err(e) => x.apply_with(loc, |_| Err(format!("scatter_set: {e}"))),
    }
}
