//! Running generated reductions (`reduce_codegen`): the call-time part. The operands, seen in
//! the reduction's full (broadcast) shape, are brought to a `[O, N, I]` loop nest by merging
//! dims, and the kernel runs on blocks of outputs, on rayon's threads when the input is large.

use super::reduce_codegen::ReduceFn;
use super::{uninit, JitCode, PARALLEL_MIN};
use crate::error::{Error, Result};
use crate::for_each_ref;
use crate::ir::scalar::ScalarProgram;
use crate::ir::{DType, Op, ReduceOp};
use crate::runtime::Thunk;
use crate::tensor::{Tensor, TensorRef};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many calls ran generated reduction code (for tests: a reduction that silently fell back
/// to perform would not count).
static GENERATED_CALLS: AtomicUsize = AtomicUsize::new(0);

/// The number of reductions computed by generated code since the process started.
pub fn generated_reduce_calls() -> usize {
    GENERATED_CALLS.load(Ordering::Relaxed)
}

/// A `Reduce` or `FusedReduce` compiled to a generated loop nest.
pub(super) struct GenReduce {
    pub f: ReduceFn,
    pub op: ReduceOp,
    pub axes: Option<Vec<usize>>,
    pub keepdims: bool,
    /// The prologue (an identity program for a plain `Reduce`).
    pub program: Arc<ScalarProgram>,
    pub fused: bool,
    pub out_dtype: DType,
    /// The lane count of the vector leaves, if any.
    pub lanes: Option<i64>,
    pub _code: Arc<JitCode>,
}

/// One dim of the loop nest: its size and each operand's byte stride (inputs, then the output).
#[derive(Clone, Debug)]
struct Dim {
    size: usize,
    strides: Vec<i64>,
}

/// Merges `dims` (outer to inner) into one when every operand steps through them as one.
fn merge(dims: &[&Dim], n_ops: usize) -> Option<Dim> {
    let mut acc = match dims.last() {
        Some(d) => (*d).clone(),
        None => {
            return Some(Dim {
                size: 1,
                strides: vec![0; n_ops],
            })
        }
    };
    for d in dims.iter().rev().skip(1) {
        let fits = (0..n_ops).all(|j| d.strides[j] == acc.size as i64 * acc.strides[j]);
        if !fits {
            return None;
        }
        acc.size *= d.size;
    }
    Some(acc)
}

/// The loop nest of a call: `[O, N, I]` with strides (the output has none along `N`).
struct Nest {
    o: Dim,
    n: Dim,
    i: Dim,
}

impl GenReduce {
    fn fallback(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let owned: Vec<Tensor> = inputs.iter().map(|t| t.to_owned()).collect();
        let refs: Vec<&Tensor> = owned.iter().collect();
        let op = if self.fused {
            Op::FusedReduce {
                op: self.op,
                axes: self.axes.clone(),
                keepdims: self.keepdims,
                program: self.program.clone(),
            }
        } else {
            Op::Reduce {
                op: self.op,
                axes: self.axes.clone(),
                keepdims: self.keepdims,
            }
        };
        crate::perform::perform(&op, &refs)
    }

    /// The nest for these inputs and output shape, or `None` when the dims do not merge into
    /// one (then perform runs it).
    fn nest(&self, inputs: &[TensorRef<'_>], shape: &[usize], es_out: i64) -> Option<Nest> {
        let r = shape.len();
        let m = inputs.len();
        let reduced = |a: usize| self.axes.as_ref().is_none_or(|ax| ax.contains(&a));
        // Output strides of the kept dims (standard layout).
        let mut out_strides = vec![0i64; r];
        let mut step = es_out;
        for a in (0..r).rev() {
            if !reduced(a) {
                out_strides[a] = step;
                step *= shape[a] as i64;
            }
        }
        let mut kept = Vec::new();
        let mut red = Vec::new();
        for a in 0..r {
            if shape[a] == 1 {
                continue;
            }
            let mut strides = Vec::with_capacity(m + 1);
            for t in inputs {
                let rank = t.shape().len();
                let es = t.dtype().size() as i64;
                let st = if a + rank < r {
                    0
                } else {
                    let k = a + rank - r;
                    if t.shape()[k] == 1 {
                        0
                    } else {
                        for_each_ref!(t, v => v.strides()[k] as i64) * es
                    }
                };
                strides.push(st);
            }
            strides.push(out_strides[a]);
            let d = Dim {
                size: shape[a],
                strides,
            };
            if reduced(a) {
                red.push(d);
            } else {
                kept.push(d);
            }
        }
        let n_ops = m + 1;
        let n = merge(&red.iter().collect::<Vec<_>>(), n_ops)?;
        let es: Vec<i64> = inputs
            .iter()
            .map(|t| t.dtype().size() as i64)
            .chain([es_out])
            .collect();
        let along = |d: &Dim, outputs: bool| {
            (0..n_ops)
                .filter(|&j| j < m || outputs)
                .all(|j| d.strides[j] == 0 || d.strides[j] == es[j])
        };
        let one = Dim {
            size: 1,
            strides: vec![0; n_ops],
        };
        let row = merge(&kept.iter().collect::<Vec<_>>(), n_ops).map(|o| Nest {
            o,
            n: n.clone(),
            i: one.clone(),
        });
        let col = kept.split_last().and_then(|(last, rest)| {
            merge(&rest.iter().collect::<Vec<_>>(), n_ops).map(|o| Nest {
                o,
                n: n.clone(),
                i: last.clone(),
            })
        });
        // Lanes along a contiguous reduced axis, else vectors of outputs along a contiguous
        // kept axis, else whatever merges (scalar leaves).
        match (row, col) {
            (Some(rw), _) if along(&rw.n, false) => Some(rw),
            (_, Some(c)) if along(&c.i, true) => Some(c),
            (Some(rw), _) => Some(rw),
            (_, c) => c,
        }
    }
}

impl Thunk for GenReduce {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let mut shape: Vec<usize> = Vec::new();
        for t in inputs {
            shape = crate::ir::broadcast_shapes(&shape, t.shape()).map_err(Error::Shape)?;
        }
        let r = shape.len();
        let axes_ok = self
            .axes
            .as_ref()
            .is_none_or(|ax| ax.iter().all(|&a| a < r));
        if !axes_ok || shape.contains(&0) {
            // Errors and empty reductions as the reference has them.
            return self.fallback(inputs);
        }
        let reduced = |a: usize| self.axes.as_ref().is_none_or(|ax| ax.contains(&a));
        let out_shape: Vec<usize> = (0..r)
            .filter_map(|a| {
                if !reduced(a) {
                    Some(shape[a])
                } else if self.keepdims {
                    Some(1)
                } else {
                    None
                }
            })
            .collect();
        let es_out = self.out_dtype.size() as i64;
        let Some(nest) = self.nest(inputs, &shape, es_out) else {
            return self.fallback(inputs);
        };
        let out = uninit(self.out_dtype, &out_shape);
        let m = inputs.len();
        let out_base = super::base_ptr(&out) as usize;
        let mut bases: Vec<usize> = inputs.iter().map(|t| t.as_ptr() as usize).collect();
        bases.push(out_base);
        let Nest { o, n, i } = nest;
        let es: Vec<i64> = inputs.iter().map(|t| t.dtype().size() as i64).collect();
        let column = i.size > 1;
        let vector = self.lanes.is_some()
            && if !column {
                (0..m).all(|j| n.strides[j] == 0 || n.strides[j] == es[j])
            } else {
                (0..m).all(|j| i.strides[j] == 0 || i.strides[j] == es[j]) && i.strides[m] == es_out
            };
        let sn: Vec<i64> = n.strides.clone();
        // One block: outputs o0..o0+no, i0..i0+ni.
        let run = |o0: usize, no: usize, i0: usize, ni: usize| {
            let ptrs: Vec<*mut u8> = (0..=m)
                .map(|j| {
                    (bases[j] as i64 + o0 as i64 * o.strides[j] + i0 as i64 * i.strides[j]) as usize
                        as *mut u8
                })
                .collect();
            // SAFETY: every operand's strides and sizes describe memory it owns (the inputs'
            // views, broadcast with stride 0; the fresh output), the block lies inside the nest,
            // and blocks write disjoint outputs.
            unsafe {
                (self.f)(
                    no as i64,
                    n.size as i64,
                    ni as i64,
                    ptrs.as_ptr(),
                    o.strides.as_ptr(),
                    sn.as_ptr(),
                    i.strides.as_ptr(),
                    vector as i64 | (column as i64) << 1,
                )
            }
        };
        let work = o.size * n.size * i.size;
        let threads = rayon::current_num_threads();
        if work < PARALLEL_MIN || threads < 2 || o.size * i.size == 1 {
            run(0, o.size, 0, i.size);
        } else if o.size >= threads {
            let per = o.size.div_ceil(threads * 4);
            rayon::scope(|s| {
                for o0 in (0..o.size).step_by(per) {
                    let run = &run;
                    s.spawn(move |_| run(o0, per.min(o.size - o0), 0, i.size));
                }
            });
        } else {
            // Blocks along I, whole vectors each.
            let per = i.size.div_ceil(threads * 4).next_multiple_of(8);
            rayon::scope(|s| {
                for o0 in 0..o.size {
                    for i0 in (0..i.size).step_by(per) {
                        let run = &run;
                        s.spawn(move |_| run(o0, 1, i0, per.min(i.size - i0)));
                    }
                }
            });
        }
        GENERATED_CALLS.fetch_add(1, Ordering::Relaxed);
        Ok(vec![out])
    }
}
