//! View steps: how the result of a view op (`transpose`, `broadcast_to`, `expand_dims`,
//! `squeeze`, `slice`, `reshape`) lies over its argument's buffer. This is the one definition
//! of what each view op does to a shape, element strides and an offset; every backend that
//! keeps views instead of copying (AOT's static plan, the GPU's device arrays) applies it, and
//! the schedule dump prints it. The reference `perform` of each op stays independent (ndarray
//! copies), so the tests compare the two.
//!
//! A view is data: per result axis, where it comes from ([`ViewAxis`]), which argument axes
//! are dropped, or a reshape. What depends on the run-time shape (a slice's bounds against a
//! `?` dim, whether a `?` dim stretches) is resolved by [`View::apply`] against the
//! argument's actual [`Layout`].

use crate::ir::Op;
use std::fmt;

/// Where a result axis of a view comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewAxis {
    /// Argument axis `axis`, as it is.
    Same(usize),
    /// Argument axis `axis` sliced: numpy's `start:stop:step` (`ir::infer::slice_bounds`),
    /// resolved against the axis's run-time length. A negative step walks it backwards (a
    /// negative stride).
    Slice {
        /// The argument axis sliced.
        axis: usize,
        /// The first position, as written (negative counts from the end; clamped).
        start: i64,
        /// The position to stop before, as written (negative counts from the end; clamped).
        stop: i64,
        /// The distance between positions taken (not 0).
        step: i64,
    },
    /// Argument axis `axis`, which has `len` elements or one (then read `len` times: stride
    /// 0), as `broadcast_to` stretches it.
    Stretch {
        /// The argument axis.
        axis: usize,
        /// The result axis's length.
        len: usize,
    },
    /// A new axis of `len` copies (stride 0): `expand_dims` (1), `broadcast_to`'s leading axes.
    New {
        /// The new axis's length.
        len: usize,
    },
}

/// What a view op does to its argument's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum View {
    /// Each result axis from `axes`; the argument axes in `dropped` must have one element and
    /// are left out (`squeeze`).
    Axes {
        /// Per result axis, where it comes from.
        axes: Vec<ViewAxis>,
        /// The argument axes left out (each of one element).
        dropped: Vec<usize>,
    },
    /// The same elements in row-major order with the shape `target` (`-1`: the dim that makes
    /// the count match): only of an argument laid out row-major and dense.
    Reshape {
        /// The result's shape, one dim possibly `-1`.
        target: Vec<i64>,
    },
}

/// Where the elements of an array lie in its buffer: element `i` is at
/// `offset + sum(i[k] * strides[k])`, in elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The array's shape.
    pub shape: Vec<usize>,
    /// Per axis, the distance in elements between neighbours along it (0: broadcast).
    pub strides: Vec<isize>,
    /// The position in the buffer, in elements, of the first element.
    pub offset: isize,
}

impl Layout {
    /// Row-major and dense from the buffer's start.
    pub fn row_major(shape: &[usize]) -> Layout {
        let mut strides = vec![0isize; shape.len()];
        let mut acc = 1isize;
        for (s, &d) in strides.iter_mut().zip(shape).rev() {
            *s = acc;
            acc = acc.saturating_mul(d.max(1) as isize);
        }
        Layout {
            shape: shape.to_vec(),
            strides,
            offset: 0,
        }
    }

    /// Whether the elements are row-major and dense from the offset (strides of axes with one
    /// element do not matter).
    pub fn is_row_major(&self) -> bool {
        let dense = Layout::row_major(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&dense.strides))
            .all(|(&d, (a, b))| d <= 1 || a == b)
    }
}

/// numpy's broadcasting, one axis at a time: the stride along axis `axis` of an index space
/// of rank `rank` of an array of `shape` and `strides` (aligned on the right), 0 along the
/// axes it lacks or has one element on. That its extents fit the space is checked where the
/// space is made (type inference, `ir::broadcast_shapes`, a launch's shape check). Every
/// backend reads an operand broadcast to a step's index space through this.
#[inline]
pub fn stride_over<T: Copy + Default>(
    shape: &[usize],
    strides: &[T],
    rank: usize,
    axis: usize,
) -> T {
    match (axis + shape.len()).checked_sub(rank) {
        Some(k) if shape[k] != 1 => strides[k],
        _ => T::default(),
    }
}

impl View {
    /// The view `op` is over an argument of rank `rank`, or `None` when `op` is not a view op.
    pub fn of(op: &Op, rank: usize) -> Option<View> {
        let axes = |axes: Vec<ViewAxis>| {
            Some(View::Axes {
                axes,
                dropped: Vec::new(),
            })
        };
        match op {
            Op::Transpose { perm } => axes(perm.iter().map(|&p| ViewAxis::Same(p)).collect()),
            Op::BroadcastTo { shape } => {
                let lead = shape.len().checked_sub(rank)?;
                axes(
                    shape
                        .iter()
                        .enumerate()
                        .map(|(k, &len)| match k.checked_sub(lead) {
                            None => ViewAxis::New { len },
                            Some(axis) => ViewAxis::Stretch { axis, len },
                        })
                        .collect(),
                )
            }
            Op::ExpandDims { axes: new } => {
                let mut src = 0..rank;
                axes(
                    (0..rank + new.len())
                        .map(|d| match new.contains(&d) {
                            true => Some(ViewAxis::New { len: 1 }),
                            false => src.next().map(ViewAxis::Same),
                        })
                        .collect::<Option<_>>()?,
                )
            }
            Op::Squeeze { axes: gone } => Some(View::Axes {
                axes: (0..rank)
                    .filter(|d| !gone.contains(d))
                    .map(ViewAxis::Same)
                    .collect(),
                dropped: gone.clone(),
            }),
            Op::Slice {
                starts,
                stops,
                steps,
            } => axes(
                (0..rank)
                    .map(
                        |axis| match (starts.get(axis), stops.get(axis), steps.get(axis)) {
                            (Some(&start), Some(&stop), Some(&step)) => ViewAxis::Slice {
                                axis,
                                start,
                                stop,
                                step,
                            },
                            _ => ViewAxis::Same(axis),
                        },
                    )
                    .collect(),
            ),
            Op::Reshape { shape } => Some(View::Reshape {
                target: shape.clone(),
            }),
            _ => None,
        }
    }

    /// The op named `name` whose view this is (the inverse of [`View::of`], for the plan's text
    /// form), or `None` when no such op gives this view.
    pub fn to_op(&self, name: &str) -> Option<Op> {
        let (axes, dropped) = match self {
            View::Reshape { target } => {
                return (name == "reshape").then(|| Op::Reshape {
                    shape: target.clone(),
                })
            }
            View::Axes { axes, dropped } => (axes, dropped),
        };
        let op = match name {
            "transpose" => Op::Transpose {
                perm: axes
                    .iter()
                    .map(|a| match a {
                        ViewAxis::Same(k) => Some(*k),
                        _ => None,
                    })
                    .collect::<Option<_>>()?,
            },
            "broadcast_to" => Op::BroadcastTo {
                shape: axes
                    .iter()
                    .map(|a| match a {
                        ViewAxis::New { len } | ViewAxis::Stretch { len, .. } => Some(*len),
                        _ => None,
                    })
                    .collect::<Option<_>>()?,
            },
            "expand_dims" => Op::ExpandDims {
                axes: (0..axes.len())
                    .filter(|&d| axes[d] == ViewAxis::New { len: 1 })
                    .collect(),
            },
            "squeeze" => Op::Squeeze {
                axes: dropped.clone(),
            },
            "slice" => {
                let (mut starts, mut stops, mut steps) = (Vec::new(), Vec::new(), Vec::new());
                for a in axes {
                    let ViewAxis::Slice {
                        start, stop, step, ..
                    } = *a
                    else {
                        break;
                    };
                    starts.push(start);
                    stops.push(stop);
                    steps.push(step);
                }
                Op::Slice {
                    starts,
                    stops,
                    steps,
                }
            }
            _ => return None,
        };
        Some(op)
    }

    /// The result's layout over the buffer of an argument laid out as `arg`, or `None` when
    /// the view does not apply to it: an axis out of range or of the wrong length, a dropped
    /// axis with more than one element, a zero slice step, a reshape of an argument that is not
    /// row-major (the step then copies), a count that does not match.
    pub fn apply(&self, arg: &Layout) -> Option<Layout> {
        match self {
            View::Reshape { target } => {
                if !arg.is_row_major() {
                    return None;
                }
                let shape = crate::perform::shape::resolve_reshape(&arg.shape, target).ok()?;
                Some(Layout {
                    offset: arg.offset,
                    ..Layout::row_major(&shape)
                })
            }
            View::Axes { axes, dropped } => {
                let rank = arg.shape.len();
                if dropped.iter().any(|&d| arg.shape.get(d) != Some(&1)) {
                    return None;
                }
                let mut out = Layout {
                    shape: Vec::with_capacity(axes.len()),
                    strides: Vec::with_capacity(axes.len()),
                    offset: arg.offset,
                };
                for a in axes {
                    let (len, stride) = match *a {
                        ViewAxis::Same(axis) if axis < rank => (arg.shape[axis], arg.strides[axis]),
                        ViewAxis::Stretch { axis, len } if axis < rank => match arg.shape[axis] {
                            n if n == len => (len, arg.strides[axis]),
                            1 => (len, 0),
                            _ => return None,
                        },
                        ViewAxis::New { len } => (len, 0),
                        ViewAxis::Slice {
                            axis,
                            start,
                            stop,
                            step,
                        } if axis < rank && step != 0 => {
                            let (first, len) =
                                crate::ir::infer::slice_bounds(arg.shape[axis], start, stop, step);
                            if len > 0 {
                                out.offset += first as isize * arg.strides[axis];
                            }
                            // One element needs no stride (a step may be as large as an i64
                            // is); more than one lie within the axis, so the product fits.
                            let stride = if len > 1 {
                                arg.strides[axis] * step as isize
                            } else {
                                0
                            };
                            (len, stride)
                        }
                        _ => return None,
                    };
                    out.shape.push(len);
                    out.strides.push(if len <= 1 { 0 } else { stride });
                }
                Some(out)
            }
        }
    }
}

/// The schedule's text of a view: `[1, 0]` (a transpose), `[new 1, 0, 1]`, `[0[1:7:2], 1]`,
/// `[new 8, 0 to 4] drop [2]`, `to [4, -1]` (a reshape).
impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            View::Reshape { target } => write!(f, "to {target:?}"),
            View::Axes { axes, dropped } => {
                let axes: Vec<String> = axes.iter().map(ViewAxis::to_string).collect();
                write!(f, "[{}]", axes.join(", "))?;
                if !dropped.is_empty() {
                    write!(f, " drop {dropped:?}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for ViewAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ViewAxis::Same(a) => write!(f, "{a}"),
            ViewAxis::Slice {
                axis,
                start,
                stop,
                step,
            } => {
                // An omitted bound is empty, as in Python: the start's is minus infinity for a
                // forward step and plus infinity for a backward one, the stop's the other.
                let (from, to) = omitted_bounds(step);
                let bound = |v: i64, omitted: i64| match v == omitted {
                    true => String::new(),
                    false => v.to_string(),
                };
                write!(
                    f,
                    "{axis}[{}:{}:{step}]",
                    bound(start, from),
                    bound(stop, to)
                )
            }
            ViewAxis::Stretch { axis, len } => write!(f, "{axis} to {len}"),
            ViewAxis::New { len } => write!(f, "new {len}"),
        }
    }
}

/// The start and stop an omitted slice bound stands for, for a step of this sign
/// (`ir::infer::slice_bounds`).
pub fn omitted_bounds(step: i64) -> (i64, i64) {
    if step > 0 {
        (i64::MIN, i64::MAX)
    } else {
        (i64::MAX, i64::MIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shape: &[usize], strides: &[isize], offset: isize) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        }
    }

    #[test]
    fn a_reversed_slice_of_a_transpose_has_a_negative_stride_and_an_offset() {
        let t = View::of(&Op::Transpose { perm: vec![1, 0] }, 2).unwrap();
        let x = t.apply(&Layout::row_major(&[3, 5])).unwrap();
        assert_eq!(x, layout(&[5, 3], &[1, 5], 0));
        let s = View::of(
            &Op::Slice {
                starts: vec![i64::MAX],
                stops: vec![i64::MIN],
                steps: vec![-2],
            },
            2,
        )
        .unwrap();
        assert_eq!(s.to_string(), "[0[::-2], 1]");
        // Rows 4, 2, 0 of the transpose: columns 4, 2, 0 of the original.
        assert_eq!(s.apply(&x).unwrap(), layout(&[3, 3], &[-2, 5], 4));
    }

    #[test]
    fn broadcasts_stretch_ones_and_add_leading_axes() {
        let b = View::of(
            &Op::BroadcastTo {
                shape: vec![2, 4, 3],
            },
            2,
        )
        .unwrap();
        assert_eq!(b.to_string(), "[new 2, 0 to 4, 1 to 3]");
        let r = b.apply(&layout(&[1, 3], &[3, 1], 7)).unwrap();
        assert_eq!(r, layout(&[2, 4, 3], &[0, 0, 1], 7));
        assert_eq!(b.apply(&layout(&[2, 3], &[3, 1], 0)), None);
    }

    #[test]
    fn squeeze_drops_only_single_elements_and_reshape_only_dense_rows() {
        let s = View::of(&Op::Squeeze { axes: vec![1] }, 3).unwrap();
        assert_eq!(
            s.apply(&layout(&[2, 1, 3], &[3, 3, 1], 0)).unwrap(),
            layout(&[2, 3], &[3, 1], 0)
        );
        assert_eq!(s.apply(&layout(&[2, 2, 3], &[6, 3, 1], 0)), None);
        let r = View::of(&Op::Reshape { shape: vec![-1] }, 2).unwrap();
        assert_eq!(
            r.apply(&layout(&[2, 3], &[3, 1], 5)).unwrap(),
            layout(&[6], &[1], 5)
        );
        assert_eq!(r.apply(&layout(&[2, 3], &[1, 2], 0)), None);
        let e = View::of(&Op::ExpandDims { axes: vec![0, 2] }, 2).unwrap();
        assert_eq!(e.to_string(), "[new 1, 0, new 1, 1]");
        assert_eq!(View::of(&Op::ExpandDims { axes: vec![5] }, 2), None);
    }
}
