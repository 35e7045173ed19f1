//! How a reduction kernel (`reduce.rs`) is called: from each operand's byte strides over the
//! reduction's index space to the kernel's `[O, N, I]` nest, the N-d descriptor of reduced
//! dims that do not merge, the kept dims the caller loops over, and the mode bits.
//!
//! The JIT works this out at call time from its arguments' strides, AOT at compile time from
//! its static views; both call this, so the two choose the same leaves for the same layout
//! and so compute the same bits.

/// One dim of the loop nest: its size and each operand's byte stride (inputs, then output).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NestDim {
    /// How many indices the dim has.
    pub size: usize,
    /// Per operand (inputs, then the output), its byte stride along the dim.
    pub strides: Vec<i64>,
}

/// What the caller of a reduction kernel passes, for one layout of its operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReduceCall {
    /// The outer kept dims, merged: the kernel's `O`.
    pub o: NestDim,
    /// All the reduced elements: the merged dim, or with the N-d descriptor their count and
    /// the innermost run's strides.
    pub n: NestDim,
    /// The inner kept dims, merged: the kernel's `I`.
    pub i: NestDim,
    /// Kept dims that merge neither into `O` nor into `I`, outer to inner: the caller loops
    /// over them, one kernel call per index.
    pub outer: Vec<NestDim>,
    /// The kernel's `sn` argument: each input's stride along `N`, or the N-d descriptor
    /// (`reduce_operands`) when the reduced dims do not merge.
    pub sn: Vec<i64>,
    /// The kernel's mode (`reduce.rs`): 1 vector leaves, 2 columns, 4 the N-d descriptor.
    pub mode: i64,
}

impl ReduceCall {
    /// Whether the leaves run along `I` (vectors of outputs).
    pub fn columns(&self) -> bool {
        self.mode & 2 != 0
    }

    /// Whether the vector leaves run.
    pub fn vector(&self) -> bool {
        self.mode & 1 != 0
    }

    /// Whether the reduced dims walk through the N-d descriptor.
    pub fn nd(&self) -> bool {
        self.mode & 4 != 0
    }
}

/// What the generated kernel offers (`ReduceKernelInfo`).
#[derive(Clone, Copy, Debug)]
pub struct KernelOffers {
    /// The vector leaves' lane count, if it has them.
    pub lanes: Option<i64>,
    /// Whether it has cursor leaves for reduced dims that do not merge.
    pub nd: bool,
    /// Whether it is argmax or argmin (positions are kept in lanes as wide as the values').
    pub arg: bool,
}

/// Splits `dims` (outer to inner) into runs that each merge into one dim (every operand steps
/// through the run as through one dim), outer to inner.
fn groups(dims: &[NestDim], n_ops: usize) -> Vec<NestDim> {
    let mut out: Vec<NestDim> = Vec::new();
    for d in dims.iter().rev() {
        match out.last_mut() {
            Some(acc) if (0..n_ops).all(|j| d.strides[j] == acc.size as i64 * acc.strides[j]) => {
                acc.size *= d.size
            }
            _ => out.push(d.clone()),
        }
    }
    out.reverse();
    out
}

/// The call for a reduction over `space` whose axes `reduced[a]` are reduced, with
/// `strides[j][a]` operand `j`'s byte stride along axis `a` (the inputs, 0 where broadcast,
/// then the output, 0 along reduced axes) and `es[j]` its element size. `None` when the
/// reduced dims do not merge into one and the kernel has no cursor leaves, or when the space
/// is empty (the caller handles both).
pub fn plan_call(
    space: &[usize],
    reduced: &[bool],
    strides: &[Vec<i64>],
    es: &[i64],
    kernel: KernelOffers,
) -> Option<ReduceCall> {
    if space.contains(&0) {
        return None;
    }
    let n_ops = strides.len();
    let m = n_ops - 1;
    let mut kept = Vec::new();
    let mut red = Vec::new();
    for (a, &size) in space.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let d = NestDim {
            size,
            strides: strides.iter().map(|s| s[a]).collect(),
        };
        if reduced[a] {
            red.push(d);
        } else {
            kept.push(d);
        }
    }
    let one = NestDim {
        size: 1,
        strides: vec![0; n_ops],
    };
    // The reduced dims in axis order: the flat index over them is the reference's order.
    let red = groups(&red, n_ops);
    let (n, nd) = match red.len() {
        0 => (one.clone(), None),
        1 => (red[0].clone(), None),
        _ if kernel.nd => {
            let n = NestDim {
                size: red.iter().map(|d| d.size).product(),
                strides: red[red.len() - 1].strides.clone(),
            };
            (n, Some(red))
        }
        _ => return None,
    };
    let along = |d: &NestDim, outputs: bool| {
        (0..n_ops)
            .filter(|&j| j < m || outputs)
            .all(|j| d.strides[j] == 0 || d.strides[j] == es[j])
    };
    let kept = groups(&kept, n_ops);
    let p = kept.len();
    let row = (
        kept.last().cloned().unwrap_or_else(|| one.clone()),
        one.clone(),
        kept[..p.saturating_sub(1)].to_vec(),
    );
    let col = (p >= 1).then(|| {
        (
            if p >= 2 {
                kept[p - 2].clone()
            } else {
                one.clone()
            },
            kept[p - 1].clone(),
            kept[..p.saturating_sub(2)].to_vec(),
        )
    });
    // Lanes along a contiguous reduced axis, else vectors of outputs along a contiguous kept
    // axis, else the nest with the fewest loops outside it (scalar leaves).
    let (o, i, outer) = match col {
        _ if nd.is_none() && along(&n, false) => row,
        Some(c) if along(&c.1, true) => c,
        _ if p <= 1 => row,
        Some(c) => c,
        None => row,
    };
    let column = i.size > 1;
    let fits_lanes = !kernel.arg || n.size <= i32::MAX as usize;
    let vector = kernel.lanes.is_some()
        && fits_lanes
        && if !column {
            nd.is_none() && (0..m).all(|j| n.strides[j] == 0 || n.strides[j] == es[j])
        } else {
            (0..m).all(|j| i.strides[j] == 0 || i.strides[j] == es[j]) && i.strides[m] == es[m]
        };
    let sn: Vec<i64> = match &nd {
        None => n.strides.clone(),
        Some(dims) => {
            let mut d = vec![dims.len() as i64, m as i64];
            d.extend(&dims[dims.len() - 1].strides[..m]);
            d.extend(dims.iter().map(|d| d.size as i64));
            for dim in dims {
                d.extend(&dim.strides[..m]);
            }
            d
        }
    };
    let mode = vector as i64 | (column as i64) << 1 | (nd.is_some() as i64) << 2;
    Some(ReduceCall {
        o,
        n,
        i,
        outer,
        sn,
        mode,
    })
}

/// Each operand's byte offset for every index of `outer` (row-major), starting from 0.
pub fn outer_offsets(outer: &[NestDim], n_ops: usize) -> Vec<Vec<i64>> {
    let mut offsets: Vec<Vec<i64>> = vec![vec![0; n_ops]];
    for d in outer {
        offsets = offsets
            .iter()
            .flat_map(|c| {
                (0..d.size).map(move |k| {
                    c.iter()
                        .zip(&d.strides)
                        .map(|(a, s)| a + k as i64 * s)
                        .collect()
                })
            })
            .collect();
    }
    offsets
}

/// The output's byte strides over `space`: standard layout over the kept axes, 0 along the
/// reduced ones (with or without keepdims the output's memory is the same).
pub fn output_strides(space: &[usize], reduced: &[bool], es_out: i64) -> Vec<i64> {
    let mut out = vec![0i64; space.len()];
    let mut step = es_out;
    for a in (0..space.len()).rev() {
        if !reduced[a] {
            out[a] = step;
            step *= space[a] as i64;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offers(lanes: Option<i64>, nd: bool) -> KernelOffers {
        KernelOffers {
            lanes,
            nd,
            arg: false,
        }
    }

    #[test]
    fn a_row_sum_runs_lanes_along_the_reduced_axis() {
        // f32[3, 5] summed over axis 1.
        let space = [3, 5];
        let red = [false, true];
        let st = vec![vec![20, 4], output_strides(&space, &red, 4)];
        let c = plan_call(&space, &red, &st, &[4, 4], offers(Some(4), false)).unwrap();
        assert_eq!((c.o.size, c.n.size, c.i.size), (3, 5, 1));
        assert!(c.vector() && !c.columns() && !c.nd());
        assert_eq!(c.sn, vec![4, 0]);
    }

    #[test]
    fn a_column_sum_runs_vectors_of_outputs() {
        let space = [5, 3];
        let red = [true, false];
        let st = vec![vec![12, 4], output_strides(&space, &red, 4)];
        let c = plan_call(&space, &red, &st, &[4, 4], offers(Some(4), false)).unwrap();
        assert_eq!((c.o.size, c.n.size, c.i.size), (1, 5, 3));
        assert!(c.vector() && c.columns());
    }

    #[test]
    fn reduced_dims_that_do_not_merge_need_the_cursor() {
        // f32[4, 3, 5] transposed to [3, 4, 5] (strides 20, 60, 4) and reduced over axes
        // 0 and 1: the two reduced dims do not merge.
        let space = [3, 4, 5];
        let red = [true, true, false];
        let st = vec![vec![20, 60, 4], output_strides(&space, &red, 4)];
        assert!(plan_call(&space, &red, &st, &[4, 4], offers(None, false)).is_none());
        let c = plan_call(&space, &red, &st, &[4, 4], offers(None, true)).unwrap();
        assert!(c.nd() && c.n.size == 12);
        assert_eq!(&c.sn[..2], &[2, 1]);
        assert!(plan_call(&[3, 0], &[false, true], &st, &[4, 4], offers(None, true)).is_none());
    }

    #[test]
    fn outer_offsets_walk_row_major() {
        let outer = vec![NestDim {
            size: 2,
            strides: vec![8, 4],
        }];
        assert_eq!(outer_offsets(&outer, 2), vec![vec![0, 0], vec![8, 4]]);
    }
}
