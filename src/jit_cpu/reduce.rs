//! Running generated reductions (`codegen::clif::reduce`): the call-time part. The operands, seen in
//! the reduction's full (broadcast) shape, are brought to a `[O, N, I]` loop nest by merging
//! dims, and the kernel runs on blocks of outputs, on rayon's threads when the input is large.
//!
//! Dims that do not merge are not copied: reduced ones stay separate runs that the kernel's
//! cursor leaves walk in row-major order (mode 4, with an N-d descriptor built here), and kept
//! ones beyond the two that become `O` and `I` are looped over here, one kernel call (or block)
//! per index. What still runs perform: an empty axis (the reference's errors and empty
//! results), axes out of range, and reduced dims that do not merge for a kernel generated
//! without cursor leaves (which cannot happen: those have one reduced axis).

use super::{uninit, JitCode, PARALLEL_MIN};
use crate::codegen::clif::reduce::ReduceFn;
use crate::codegen::clif::reduce_call::{
    outer_offsets, output_strides, plan_call, KernelOffers, ReduceCall,
};
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

thread_local! {
    /// The same count for the calls made on this thread.
    static GENERATED_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The number of reductions computed by generated code since the process started.
pub fn generated_reduce_calls() -> usize {
    GENERATED_CALLS.load(Ordering::Relaxed)
}

/// The number of reductions computed by generated code for calls made on this thread: unlike
/// [`generated_reduce_calls`], tests running beside each other do not change it, so a test can
/// check that each of its own calls ran generated code.
pub fn generated_reduce_calls_on_this_thread() -> usize {
    GENERATED_HERE.with(|c| c.get())
}

/// `column_sum` on byte addresses and a byte stride between rows; with the last argument,
/// `column_sum_in_halves` (on two threads).
pub(super) type ColumnSum = unsafe fn(*const u8, i64, usize, *mut u8, usize, bool);

/// The host column sum (`column_sum`) for a plain float sum (not a fused one, whose prologue
/// it would not run), chosen when the kernel is built.
pub(super) fn host_column_sum(op: ReduceOp, fused: bool, out: DType) -> Option<ColumnSum> {
    match out {
        _ if fused || op != ReduceOp::Sum => None,
        DType::F32 => Some(column_sum_bytes::<f32>),
        DType::F64 => Some(column_sum_bytes::<f64>),
        _ => None,
    }
}

/// # Safety
/// As `column_sum`, with `rs` in bytes (a multiple of `T`'s size).
unsafe fn column_sum_bytes<T: num_traits::Float + Send>(
    x: *const u8,
    rs: i64,
    n: usize,
    out: *mut u8,
    len: usize,
    halves: bool,
) {
    use super::column_sum::{column_sum, column_sum_in_halves};
    let rs = rs as isize / std::mem::size_of::<T>() as isize;
    let (x, out) = (x as *const T, out as *mut T);
    // SAFETY: the caller vouches for the rows and the outputs.
    unsafe {
        match halves {
            true => column_sum_in_halves(x, rs, n, out, len),
            false => column_sum(x, rs, n, out, len),
        }
    }
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
    /// Whether the kernel has cursor leaves for reduced dims that do not merge.
    pub nd: bool,
    /// Runs calls that sum down columns (`host_column_sum`).
    pub column_sum: Option<ColumnSum>,
    pub _code: Arc<JitCode>,
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

    /// The kernel call for these inputs (`reduce_call`), or `None` when the reduced dims do
    /// not merge into one and the kernel has no cursor leaves (then perform runs it).
    fn call(&self, inputs: &[TensorRef<'_>], shape: &[usize], es_out: i64) -> Option<ReduceCall> {
        let r = shape.len();
        let reduced: Vec<bool> = (0..r)
            .map(|a| self.axes.as_ref().is_none_or(|ax| ax.contains(&a)))
            .collect();
        // Each input's byte strides over the full shape (0 where it is broadcast).
        let mut strides: Vec<Vec<i64>> = inputs
            .iter()
            .map(|t| {
                let rank = t.shape().len();
                let es = t.dtype().size() as i64;
                let own: Vec<isize> = for_each_ref!(t, v => v.strides().to_vec());
                (0..r)
                    .map(|a| match (a + rank).checked_sub(r) {
                        Some(k) if t.shape()[k] != 1 => own[k] as i64 * es,
                        _ => 0,
                    })
                    .collect()
            })
            .collect();
        strides.push(output_strides(shape, &reduced, es_out));
        let es: Vec<i64> = inputs
            .iter()
            .map(|t| t.dtype().size() as i64)
            .chain([es_out])
            .collect();
        let offers = KernelOffers {
            lanes: self.lanes,
            nd: self.nd,
            arg: crate::codegen::clif::reduce::is_arg(self.op),
        };
        plan_call(shape, &reduced, &strides, &es, offers)
    }
}

impl Thunk for GenReduce {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        // The kernel reads an input whose type gives it an extent above 1 along the reduced
        // axes as one that steps through memory there (its vector leaves load it whole). A
        // view with stride 0 along such an axis (a broadcast view a caller passed) would be
        // read past its end: it is copied into standard layout first.
        if inputs.iter().any(has_stride_zero_axis) {
            let copies: Vec<Option<Tensor>> = inputs
                .iter()
                .map(|t| has_stride_zero_axis(t).then(|| t.to_standard_owned()))
                .collect();
            let views: Vec<TensorRef> = inputs
                .iter()
                .zip(&copies)
                .map(|(t, c)| c.as_ref().map_or_else(|| t.reborrow(), Tensor::view))
                .collect();
            return self.run_laid_out(&views);
        }
        self.run_laid_out(inputs)
    }
}

/// Whether a view steps by 0 along an axis of extent above 1 (a broadcast view).
fn has_stride_zero_axis(t: &TensorRef<'_>) -> bool {
    let strides: Vec<isize> = for_each_ref!(t, v => v.strides().to_vec());
    t.shape().iter().zip(strides).any(|(&n, s)| n > 1 && s == 0)
}

impl GenReduce {
    /// `run` on inputs without broadcast views.
    fn run_laid_out(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
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
        let Some(call) = self.call(inputs, &shape, es_out) else {
            return self.fallback(inputs);
        };
        let out = uninit(self.out_dtype, &out_shape);
        let m = inputs.len();
        let out_base = super::base_ptr(&out) as usize;
        let mut bases: Vec<usize> = inputs.iter().map(|t| t.as_ptr() as usize).collect();
        bases.push(out_base);
        let (vector, column, nd) = (call.vector(), call.columns(), call.nd());
        let ReduceCall {
            o,
            n,
            i,
            outer,
            sn,
            mode,
        } = call;
        // A plain float sum down columns reads row by row on the host (`column_sum`).
        let down_columns = vector && column && m == 1 && !nd && inputs[0].dtype() == self.out_dtype;
        let column_sum = self.column_sum.filter(|_| down_columns);
        // Each operand's offset for every index of the outer kept dims.
        let offsets = outer_offsets(&outer, m + 1);
        let n_outer = offsets.len();
        let work = n_outer * o.size * n.size * i.size;
        let threads = rayon::current_num_threads();
        // A column sum is a few loads and a store an element: from outside the pool (a
        // worker to wake, the caller to wake after) two threads pay off only later. From a
        // worker (`runtime::warm`), 256 x 512 f32 24 -> 17.5 us on two.
        let parallel_min = if column_sum.is_some() && rayon::current_thread_index().is_none() {
            1 << 18
        } else {
            PARALLEL_MIN
        };
        // One row of column sums, large enough for two threads: they split its rows rather
        // than its columns (`column_sum_in_halves`). W5's bias gradients: 19 -> 16.5 us.
        let halves = column_sum.is_some()
            && n_outer == 1
            && o.size == 1
            && work >= parallel_min
            && threads >= 2;
        // One block: outputs o0..o0+no, i0..i0+ni at one index of the outer dims.
        let run = |off: &[i64], o0: usize, no: usize, i0: usize, ni: usize| {
            let ptrs: Vec<*mut u8> = (0..=m)
                .map(|j| {
                    (bases[j] as i64 + off[j] + o0 as i64 * o.strides[j] + i0 as i64 * i.strides[j])
                        as usize as *mut u8
                })
                .collect();
            // SAFETY: every operand's strides and sizes describe memory it owns (the inputs'
            // views, broadcast with stride 0; the fresh output), the block lies inside the nest,
            // the N-d descriptor describes the reduced dims of these views, and blocks write
            // disjoint outputs. The column sum's outputs are contiguous along `I`, as are its
            // input's (`vector`).
            if let Some(sum) = column_sum {
                for k in 0..no as i64 {
                    let (x, y) = (
                        ptrs[0] as i64 + k * o.strides[0],
                        ptrs[1] as i64 + k * o.strides[1],
                    );
                    unsafe {
                        sum(
                            x as usize as *const u8,
                            n.strides[0],
                            n.size,
                            y as usize as *mut u8,
                            ni,
                            halves,
                        )
                    };
                }
                return;
            }
            unsafe {
                (self.f)(
                    no as i64,
                    n.size as i64,
                    ni as i64,
                    ptrs.as_ptr(),
                    o.strides.as_ptr(),
                    sn.as_ptr(),
                    i.strides.as_ptr(),
                    mode,
                )
            }
        };
        if halves || work < parallel_min || threads < 2 || n_outer * o.size * i.size == 1 {
            for off in &offsets {
                run(off, 0, o.size, 0, i.size);
            }
        } else if n_outer >= threads * 4 {
            // Many outer indices: a few runs of them per thread.
            let per = n_outer.div_ceil(threads * 4);
            rayon::scope(|s| {
                for chunk in offsets.chunks(per) {
                    let run = &run;
                    s.spawn(move |_| {
                        for off in chunk {
                            run(off, 0, o.size, 0, i.size);
                        }
                    });
                }
            });
        } else if n_outer * o.size >= threads {
            let per = o.size.div_ceil((threads * 4).div_ceil(n_outer));
            rayon::scope(|s| {
                for off in &offsets {
                    for o0 in (0..o.size).step_by(per) {
                        let run = &run;
                        s.spawn(move |_| run(off, o0, per.min(o.size - o0), 0, i.size));
                    }
                }
            });
        } else {
            // Blocks along I, whole vectors each.
            let per = i.size.div_ceil(threads * 4).next_multiple_of(8);
            rayon::scope(|s| {
                for off in &offsets {
                    for o0 in 0..o.size {
                        for i0 in (0..i.size).step_by(per) {
                            let run = &run;
                            s.spawn(move |_| run(off, o0, 1, i0, per.min(i.size - i0)));
                        }
                    }
                }
            });
        }
        GENERATED_CALLS.fetch_add(1, Ordering::Relaxed);
        GENERATED_HERE.with(|c| c.set(c.get() + 1));
        Ok(vec![out])
    }
}
