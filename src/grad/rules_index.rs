//! Gradient rules of the ops that move elements by positions: `take_along_axis`,
//! `scatter_set` and `sort`.

use super::rules::{unbroadcast, zeros_like, InGrad};
use crate::error::Result;
use crate::graph::{scatter_set as set_at, select, Var};
use crate::ir::DType;

/// `take_along_axis(x, indices, axis)`: each output element's gradient goes back to the
/// position it was read from, added up where positions repeat. It is written as a one-hot
/// product: `dx[.., p, ..] = sum over j of g[.., j, ..] * (indices[.., j, ..] == p)`, which
/// holds `m * n` elements per lane (m indices, n positions); then summed back over the dims
/// where `x` was broadcast.
pub fn take_along_axis(x: &Var, indices: &Var, gy: &Var, axis: usize) -> Result<Var> {
    let Some(n) = x.ty().shape[axis] else {
        return Err(crate::Error::Grad(format!(
            "take_along_axis: the gradient needs the length of axis {axis} of {} known",
            x.ty()
        )));
    };
    let rank = x.rank() as i64;
    let a = axis as i64;
    // Normalize negative positions as the op does, so -1 and n - 1 are one position.
    let idx = indices.cast(DType::I64);
    let idx = select(&idx.lt(0i64), &idx + n as i64, &idx);
    // [.., m, .., n] after the one-hot; the gradient broadcast along the new last axis.
    let hot = idx.one_hot(n as i64, x.dtype());
    let spread = &hot * &gy.expand_dims(&[rank]);
    // Sum over the indices' axis, then move the positions axis into its place.
    let summed = spread.sum(Some(&[a]), false);
    let mut perm: Vec<i64> = (0..x.rank() as i64 - 1).collect();
    perm.insert(axis, x.rank() as i64 - 1);
    Ok(unbroadcast(&summed.transpose(&perm), x))
}

/// `scatter_set(x, indices, updates, axis)`: `x`'s gradient is the output's with zeros where
/// updates were written; each update's is the output's at its position, or zero if a later
/// write to the same position overwrote it. Whether write `j` survived is found by writing
/// every write's number and reading back which number stayed at its position.
pub fn scatter_set(
    x: &Var,
    indices: &Var,
    updates: &Var,
    gy: &Var,
    axis: usize,
) -> Result<Vec<InGrad>> {
    if !x.dtype().is_float() {
        return Ok(vec![InGrad::Zero, InGrad::Zero, InGrad::Zero]);
    }
    let dx = set_at(gy, indices, &zeros_like(updates), axis as i64);
    // Write numbers 0..m (in index order) into a vector as long as the axis: its length comes
    // from `x` itself, so no dim has to be known.
    let others: Vec<i64> = (0..x.rank() as i64).filter(|&a| a != axis as i64).collect();
    let lane = if others.is_empty() {
        x.clone()
    } else {
        x.sum(Some(&others), false)
    };
    let slots = zeros_like(&lane).cast(DType::I64);
    let flat = indices.reshape(&[-1]);
    let ids = &(&zeros_like(&flat).cast(DType::I64) + 1i64).cumsum(0) - 1i64;
    let winners = set_at(&slots, &flat, &ids, 0);
    let survived = winners.take(&flat, 0).eq(&ids);
    // The survivors' mask in the updates' layout: the indices' dims at `axis`.
    let mut mask_shape: Vec<i64> = vec![1; axis];
    mask_shape.extend(
        indices
            .ty()
            .shape
            .iter()
            .map(|d| d.map_or(-1, |d| d as i64)),
    );
    mask_shape.extend(vec![1; x.rank() - axis - 1]);
    let mask = survived.reshape(&mask_shape);
    let taken = gy.take(indices, axis as i64);
    let dupd = select(&mask, &taken, zeros_like(&taken));
    Ok(vec![InGrad::Grad(dx), InGrad::Zero, InGrad::Grad(dupd)])
}

/// `sort` moves each element to a new place: its gradient moves the output's gradient back,
/// through the inverse permutation (the argsort of the argsort).
pub fn sort(x: &Var, gy: &Var, axis: usize, descending: bool) -> Var {
    let a = axis as i64;
    let order = if descending {
        x.argsort_descending(a)
    } else {
        x.argsort(a)
    };
    gy.take_along_axis(&order.argsort(a), a)
}
