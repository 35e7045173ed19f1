//! Tensor types: a dtype and a shape whose dims are known or unknown.

use super::DType;
use std::fmt;

/// One dimension of a type: `Some(n)` when known at compile time, `None` (`?`) when not.
/// A known dim of 1 is broadcastable.
pub type Dim = Option<usize>;

/// The type of a tensor value. Two values of equal type are interchangeable to the compiler.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// The element type.
    pub dtype: DType,
    /// One entry per axis, outermost first; its length is the rank.
    pub shape: Vec<Dim>,
}

impl TensorType {
    /// The type of `dtype` elements with the dims `shape`, known or not.
    pub fn new(dtype: DType, shape: impl Into<Vec<Dim>>) -> Self {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// A type whose dims are all known.
    pub fn fixed(dtype: DType, shape: &[usize]) -> Self {
        TensorType {
            dtype,
            shape: shape.iter().map(|&d| Some(d)).collect(),
        }
    }

    /// The type of a 0-d tensor (one element) of `dtype`.
    pub fn scalar(dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: vec![],
        }
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The concrete shape if every dim is known.
    pub fn known_shape(&self) -> Option<Vec<usize>> {
        self.shape.iter().copied().collect()
    }

    /// Whether a concrete shape is an instance of this type's shape.
    pub fn accepts_shape(&self, shape: &[usize]) -> bool {
        shape.len() == self.shape.len()
            && self
                .shape
                .iter()
                .zip(shape)
                .all(|(d, &s)| d.is_none_or(|d| d == s))
    }

    /// Whether a value of type `other` may stand where this type is expected at run time:
    /// the same dtype and rank, and each dim unknown in one of them or equal (the rule for a
    /// shared variable's update).
    pub fn may_hold(&self, other: &TensorType) -> bool {
        self.dtype == other.dtype
            && self.rank() == other.rank()
            && (self.shape.iter().zip(&other.shape))
                .all(|(a, b)| a.is_none() || b.is_none() || a == b)
    }

    /// The same shape with elements of `dtype`.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: self.shape.clone(),
        }
    }
}

/// Writes a shape as `[4, ?]`.
pub struct ShapeDisplay<'a>(pub &'a [Dim]);

impl fmt::Display for ShapeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match d {
                Some(n) => write!(f, "{n}")?,
                None => f.write_str("?")?,
            }
        }
        f.write_str("]")
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, ShapeDisplay(&self.shape))
    }
}

/// Numpy broadcasting of two typed shapes: align on the right, a dim of 1 stretches.
/// An unknown dim against a known dim `n > 1` gives `n` (the run time checks it).
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, String> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            Some(1)
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            Some(1)
        };
        let d = match (da, db) {
            (Some(1), d) | (d, Some(1)) => d,
            (Some(x), Some(y)) if x == y => Some(x),
            (Some(_), Some(_)) => {
                return Err(format!(
                    "shapes {} and {} do not broadcast",
                    ShapeDisplay(a),
                    ShapeDisplay(b)
                ))
            }
            (None, Some(n)) | (Some(n), None) => Some(n),
            (None, None) => None,
        };
        out.push(d);
    }
    Ok(out)
}

/// Numpy broadcasting of two concrete shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out.push(match (da, db) {
            (1, d) | (d, 1) => d,
            (x, y) if x == y => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        });
    }
    Ok(out)
}

/// A size given as the builders take every integer (i64, numpy's int): at least 0. `what`
/// names the argument in the error.
pub fn size(what: &str, n: i64) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("{what}: {n} is negative"))
}

/// A shape given as the builders take it: every size at least 0.
pub fn sizes(what: &str, dims: &[i64]) -> Result<Vec<usize>, String> {
    (dims.iter())
        .map(|&d| {
            usize::try_from(d).map_err(|_| format!("{what}: size {d} in {dims:?} is negative"))
        })
        .collect()
}

/// A shape the builders can take back: sizes as i64 (a size beyond i64::MAX cannot be
/// allocated, and stays beyond any real one at i64::MAX).
pub(crate) fn dims_of(shape: &[usize]) -> Vec<i64> {
    (shape.iter())
        .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
        .collect()
}

/// Normalizes a possibly negative axis against a rank.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    } else {
        Ok(a as usize)
    }
}

/// Normalizes a list of axes: each in range, no repeats; the result is sorted.
pub fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(format!("axis {a} is repeated"));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(
            broadcast_dims(&[Some(3), Some(1)], &[Some(4)]).unwrap(),
            vec![Some(3), Some(4)]
        );
        assert_eq!(
            broadcast_dims(&[], &[Some(2), Some(5)]).unwrap(),
            vec![Some(2), Some(5)]
        );
        assert_eq!(broadcast_dims(&[None], &[Some(1)]).unwrap(), vec![None]);
        assert_eq!(broadcast_dims(&[None], &[Some(7)]).unwrap(), vec![Some(7)]);
        let e = broadcast_dims(&[Some(3)], &[Some(4)]).unwrap_err();
        assert!(e.contains("[3]") && e.contains("[4]"), "{e}");
        assert_eq!(
            broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap(),
            vec![2, 4, 3]
        );
        assert!(broadcast_shapes(&[2], &[3]).is_err());
        assert_eq!(broadcast_shapes(&[0], &[1]).unwrap(), vec![0]);
    }

    #[test]
    fn axes() {
        assert_eq!(normalize_axes(&[-1, 0], 3).unwrap(), vec![0, 2]);
        assert!(normalize_axes(&[3], 3).is_err());
        assert!(normalize_axes(&[1, -2], 3).is_err());
    }
}
