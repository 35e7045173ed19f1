//! How a map or reduce step reads its operands: each step has an index space (the shape it
//! iterates over: a map's result, a reduction's operands before reducing) and each operand an
//! [`Access`] over it, which says for every axis of the index space which axis of the operand
//! walks along it, or that the operand is broadcast there (stride 0).
//!
//! Broadcasting is decided here, once, from the types (docs/reference/semantics.md: a dim broadcasts only
//! where its type says 1, or where the operand lacks the axis; a `?` dim never does). Code
//! generators read the access and never decide from the types themselves; the run-time check
//! that a `?` dim does not stretch is `stretch.rs`.

use crate::ir::{Dim, TensorType};
use std::fmt;

/// An operand's reading over a step's index space: per index axis, the operand's axis that
/// walks along it, or `None` where the operand is broadcast (stride 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// Per axis of the index space, the operand's axis along it (`None`: broadcast).
    pub axes: Vec<Option<usize>>,
}

impl Access {
    /// The access of an operand of type `operand` over an index space of rank `rank`: numpy's
    /// alignment on the right, broadcast on the axes the operand lacks and where its type says
    /// 1.
    pub fn of(rank: usize, operand: &TensorType) -> Access {
        let lead = rank.saturating_sub(operand.rank());
        let axes = (0..rank)
            .map(|i| {
                if i < lead {
                    return None;
                }
                let j = i - lead;
                match operand.shape[j] {
                    Some(1) => None,
                    _ => Some(j),
                }
            })
            .collect();
        Access { axes }
    }

    /// Whether the operand is broadcast along index axis `axis`.
    pub fn broadcast_on(&self, axis: usize) -> bool {
        self.axes.get(axis).is_some_and(Option::is_none)
    }

    /// Whether the operand is broadcast along the last index axis (a rank-0 space counts as
    /// broadcast: one element).
    pub fn broadcast_on_last(&self) -> bool {
        self.axes.last().is_none_or(Option::is_none)
    }
}

/// `(0, 1)`, `(_, 0)`: the operand's axis per index axis, `_` where broadcast.
impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axes: Vec<String> = self
            .axes
            .iter()
            .map(|a| a.map_or("_".to_string(), |j| j.to_string()))
            .collect();
        write!(f, "({})", axes.join(", "))
    }
}

/// A step's index space: the broadcast shape of `operands` (for a map, its result's shape).
pub fn index_space(operands: &[&TensorType]) -> Vec<Dim> {
    let rank = operands.iter().map(|t| t.rank()).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            let dims = operands.iter().filter_map(|t| {
                let lead = rank - t.rank();
                (i >= lead).then(|| t.shape[i - lead])
            });
            // A known dim above 1 is the extent; else an unknown one (which must then match
            // at run time); else 1.
            let mut out = Some(1);
            for d in dims {
                match d {
                    Some(n) if n != 1 => return Some(n),
                    None => out = None,
                    _ => {}
                }
            }
            out
        })
        .collect()
}

/// Each operand's access over an index space of rank `rank`.
pub fn accesses(rank: usize, operands: &[&TensorType]) -> Vec<Access> {
    operands.iter().map(|t| Access::of(rank, t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn ty(shape: &[Dim]) -> TensorType {
        TensorType::new(DType::F32, shape.to_vec())
    }

    #[test]
    fn operands_broadcast_where_they_lack_an_axis_or_their_type_says_one() {
        // f32[3, 1] against f32[2, 3, 4]: the case the CPU backend once read wrongly.
        let a = Access::of(3, &ty(&[Some(3), Some(1)]));
        assert_eq!(a.axes, vec![None, Some(0), None]);
        assert_eq!(a.to_string(), "(_, 0, _)");
        assert!(a.broadcast_on(0) && !a.broadcast_on(1) && a.broadcast_on_last());
        // A `?` dim never broadcasts.
        let b = Access::of(2, &ty(&[None, Some(4)]));
        assert_eq!(b.axes, vec![Some(0), Some(1)]);
        // A scalar is broadcast everywhere; a rank-0 space has no axes.
        assert_eq!(Access::of(2, &ty(&[])).axes, vec![None, None]);
        assert!(Access::of(0, &ty(&[])).broadcast_on_last());
    }

    #[test]
    fn the_index_space_is_the_broadcast_shape_with_unknown_dims_kept() {
        let (a, b) = (ty(&[Some(3), Some(1)]), ty(&[Some(2), Some(1), Some(4)]));
        assert_eq!(index_space(&[&a, &b]), vec![Some(2), Some(3), Some(4)]);
        let (c, d) = (ty(&[None, Some(1)]), ty(&[Some(1), Some(5)]));
        assert_eq!(index_space(&[&c, &d]), vec![None, Some(5)]);
        assert_eq!(index_space(&[]), Vec::<Dim>::new());
    }
}
