//! Where a map kernel's operands are in one call, for inputs of any rank, broadcasting and
//! strides.
//!
//! A map kernel runs on a `rows x cols` block with one byte stride per row and one per column
//! for each operand. A call's index space is the output's shape, of any rank: each input is
//! seen in it with a byte stride per axis (0 along the axes it is broadcast on, negative for
//! reversed views). Adjacent axes merge where every input steps through them as through one
//! axis (the output, in standard layout, always does), axes of extent 1 drop out, and what is
//! left is the kernel's `rows x cols` (the two innermost) and the **planes** outside them, which
//! the caller loops over. Nothing is copied to make a layout fit: an operand broadcast along a
//! leading axis and its last one at once (`[3, 1]` against `[2, 3, 4]`) is a plane axis with
//! stride 0 and a column stride of 0.
//!
//! Whether the kernel's vector loop may run for these strides is the kernel's own check, made
//! on the strides it is given, never on what the types said (see `codegen::VectorEntry`).

use crate::tensor::TensorRef;

/// A few numbers per operand or dim, kept on the stack: a small kernel call allocates nothing
/// for its bookkeeping (the call overhead of W7).
pub(super) type Small<T> = smallvec::SmallVec<[T; 8]>;

/// One axis of a call's index space: its extent, and each input's byte stride along it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Dim {
    pub size: usize,
    pub strides: Small<i64>,
}

/// A call's index space, merged (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Layout {
    /// The output's shape.
    pub shape: Small<usize>,
    /// The axes outside the kernel's block, outermost first.
    pub planes: Small<Dim>,
    /// The number of planes (the product of their extents; 1 when there are none).
    pub n_planes: usize,
    pub rows: usize,
    pub cols: usize,
    /// Per input: its byte stride per row and per column.
    pub outer: Small<i64>,
    pub inner: Small<i64>,
}

/// An input as a layout sees it: its shape and its byte strides.
#[derive(Clone, Debug)]
pub(super) struct Operand<'a> {
    pub shape: &'a [usize],
    pub strides: Small<i64>,
}

impl<'a> Operand<'a> {
    /// A view's shape and byte strides.
    pub fn of(t: &'a TensorRef<'_>) -> Operand<'a> {
        let size = t.dtype().size() as i64;
        let strides =
            crate::for_each_ref!(t, a => a.strides().iter().map(|&s| s as i64 * size).collect());
        Operand {
            shape: t.shape(),
            strides,
        }
    }

    /// An array of `shape` in standard layout with elements of `size` bytes.
    pub fn standard(shape: &'a [usize], size: usize) -> Operand<'a> {
        let mut strides: Small<i64> = Small::from_elem(0, shape.len());
        let mut step = size as i64;
        for a in (0..shape.len()).rev() {
            strides[a] = step;
            step *= shape[a] as i64;
        }
        Operand { shape, strides }
    }
}

/// The layout of a call whose output has `shape` (every input broadcasts to it). With
/// `keep_last`, the output's last axis stays the column axis whatever its extent and never
/// merges with another (a reduction along it reads whole columns).
pub(super) fn layout(shape: &[usize], inputs: &[Operand<'_>], keep_last: bool) -> Layout {
    let r = shape.len();
    let m = inputs.len();
    // Input `j`'s byte stride along output axis `a`: 0 where it lacks the axis or has extent 1.
    let stride = |j: usize, a: usize| -> i64 {
        crate::lower::view::stride_over(inputs[j].shape, &inputs[j].strides, r, a)
    };
    // Inner to outer: each axis merges into the one inside it where every input allows.
    let mut dims: Small<Dim> = Small::new();
    for a in (0..r).rev() {
        let last = keep_last && a == r - 1;
        if shape[a] == 1 && !last {
            continue;
        }
        let d = Dim {
            size: shape[a],
            strides: (0..m).map(|j| stride(j, a)).collect(),
        };
        let keeps_apart = keep_last && dims.len() == 1;
        match dims.last_mut() {
            Some(acc)
                if !keeps_apart
                    && (0..m).all(|j| d.strides[j] == acc.size as i64 * acc.strides[j]) =>
            {
                acc.size *= d.size
            }
            _ => dims.push(d),
        }
    }
    dims.reverse();
    let zeros = || Small::from_elem(0i64, m);
    let (rows, cols, outer, inner, planes) = match dims.len() {
        0 => (1, 1, zeros(), zeros(), Small::new()),
        1 => (
            1,
            dims[0].size,
            zeros(),
            dims[0].strides.clone(),
            Small::new(),
        ),
        k => {
            let (row, col) = (&dims[k - 2], &dims[k - 1]);
            (
                row.size,
                col.size,
                row.strides.clone(),
                col.strides.clone(),
                dims[..k - 2].iter().cloned().collect(),
            )
        }
    };
    let n_planes = planes.iter().map(|d: &Dim| d.size).product();
    Layout {
        shape: shape.into(),
        planes,
        n_planes,
        rows,
        cols,
        outer,
        inner,
    }
}

impl Layout {
    /// Input `j`'s byte offset of the first element of plane `p` (row-major over the planes).
    pub fn plane_offset(&self, j: usize, p: usize) -> i64 {
        let mut rest = p;
        let mut off = 0;
        for d in self.planes.iter().rev() {
            off += (rest % d.size) as i64 * d.strides[j];
            rest /= d.size;
        }
        off
    }

    /// All the rows of the call, planes one after another: `n_planes * rows`.
    pub fn total_rows(&self) -> usize {
        self.n_planes * self.rows
    }

    /// The rows `row0..row0 + n` of the call (rows counted across planes, as `total_rows`) as
    /// runs that stay within one plane: `(plane, first row in it, rows)`.
    pub fn segments(&self, row0: usize, n: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        let rows = self.rows.max(1);
        let end = row0 + n;
        let mut at = row0;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let (p, r) = (at / rows, at % rows);
            let len = (rows - r).min(end - at);
            at += len;
            Some((p, r, len))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn std_layout(shape: &[usize], inputs: &[&[usize]]) -> Layout {
        let ops: Vec<Operand> = inputs.iter().map(|s| Operand::standard(s, 4)).collect();
        layout(shape, &ops, false)
    }

    #[test]
    fn a_column_against_a_leading_axis_is_a_plane() {
        let l = std_layout(&[2, 3, 4], &[&[2, 3, 4], &[3, 1]]);
        assert_eq!((l.n_planes, l.rows, l.cols), (2, 3, 4));
        assert_eq!(l.outer.as_slice(), &[16, 4]);
        assert_eq!(l.inner.as_slice(), &[4, 0]);
        assert_eq!(l.plane_offset(0, 1), 48);
        assert_eq!(l.plane_offset(1, 1), 0);
    }

    #[test]
    fn whole_arrays_and_single_values_merge_into_one_row() {
        let l = std_layout(&[5, 6, 7], &[&[5, 6, 7], &[], &[1, 1, 1]]);
        assert_eq!((l.n_planes, l.rows, l.cols), (1, 1, 210));
        assert_eq!(l.inner.as_slice(), &[4, 0, 0]);
    }

    #[test]
    fn a_row_broadcast_keeps_rows() {
        let l = std_layout(&[5, 6, 7], &[&[5, 6, 7], &[7]]);
        assert_eq!((l.n_planes, l.rows, l.cols), (1, 30, 7));
        assert_eq!(l.outer.as_slice(), &[28, 0]);
        let l = std_layout(&[5, 6, 7], &[&[5, 6, 7], &[5, 1, 7]]);
        assert_eq!((l.n_planes, l.rows, l.cols), (5, 6, 7));
    }

    #[test]
    fn keep_last_leaves_the_last_axis_alone() {
        let ops = [Operand::standard(&[4, 8], 4)];
        let l = layout(&[4, 8], &ops, true);
        assert_eq!((l.n_planes, l.rows, l.cols), (1, 4, 8));
        let ops = [Operand::standard(&[4, 1], 4)];
        let l = layout(&[4, 1], &ops, true);
        assert_eq!((l.rows, l.cols), (4, 1));
    }

    #[test]
    fn segments_stay_within_planes() {
        let l = std_layout(&[2, 3, 4], &[&[3, 1]]);
        let s: Vec<_> = l.segments(1, 4).collect();
        assert_eq!(s, vec![(0, 1, 2), (1, 0, 2)]);
    }
}
