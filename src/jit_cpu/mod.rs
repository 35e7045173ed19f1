//! The CPU backend: elementwise work (single ops and fused Composites) is compiled with
//! Cranelift into map kernels (`codegen`: 128-bit SIMD loops with a scalar tail, inline vector
//! math from `crate::math`), and reductions (`Reduce`, and `FusedReduce` with its prologue
//! evaluated in the loop) into loop nests over any set of axes (`reduce_codegen`, with the
//! argmax/argmin leaves of `argreduce_codegen` and the operand walk of `reduce_operands`, run
//! by `reduce`: pairwise float sums in the reference's order, NaN-propagating max and min,
//! argmax and argmin with the reference's index, wrapping integers; reduced dims that do not
//! merge are walked in place in the reference's order). Shapes and strides are kernel
//! arguments, so one compiled function serves every call. Every other op runs through the
//! interpreter's per-op path, which the compiled kernels plug into as thunks; a reduction with
//! an empty axis runs its reference too.
//!
//! What to generate comes from the plan (`crate::lower`): its map and reduce steps, each kernel
//! compiled once however many steps share its program.
//!
//! Buffers are ndarray's, from the system allocator: elements are aligned to their size, and on
//! x86-64 glibc every block of 16 bytes or more to 16, the width of the vectors. Kernels do not
//! rely on more: vector loads and stores are unaligned accesses (`MemFlags` without `aligned`),
//! so views that start inside a buffer (slices, in-place steps) run the same code.

mod argreduce_codegen;
mod build;
pub(crate) mod codegen;
mod column_sum;
mod direct;
mod helpers;
pub mod host_math;
mod layout;
mod math_clif;
mod operand_table;
mod reduce;
pub(crate) mod reduce_codegen;
mod reduce_operands;
pub(crate) mod scalar_ops;

pub use build::compile;
pub use reduce::{generated_reduce_calls, generated_reduce_calls_on_this_thread};

use crate::error::{Error, Result};
use crate::for_each_dtype;
use crate::ir::{DType, Op};
use crate::runtime::Thunk;
use crate::tensor::{Tensor, TensorRef};
use codegen::KernelFn;
use cranelift_jit::JITModule;
use layout::{Layout, Operand, Small};
use std::sync::Arc;

/// Owns the JIT memory the kernels live in; freed when the last kernel goes.
struct JitCode(Vec<JITModule>);

// SAFETY: after `finalize_definitions` the module is never used again; it only keeps the
// generated code mapped. Calling the code from several threads is safe: kernels touch only the
// memory they are given.
unsafe impl Send for JitCode {}
unsafe impl Sync for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        for m in self.0.drain(..) {
            // SAFETY: the kernels that point into this memory hold an Arc to it; this is the
            // last one.
            unsafe { m.free_memory() };
        }
    }
}

/// Kernels over fewer elements run on the calling thread: splitting them costs more than it
/// saves.
const PARALLEL_MIN: usize = 1 << 16;

/// A tensor whose elements the kernel writes before anyone reads them.
fn uninit(dtype: DType, shape: &[usize]) -> Tensor {
    let sh = ndarray::IxDyn(shape);
    // SAFETY: the map kernel writes every element of its outputs (the loop covers all `n`),
    // and every dtype here is plain old data.
    unsafe {
        match dtype {
            DType::Bool => Tensor::Bool(ndarray::ArrayD::<bool>::uninit(sh).assume_init()),
            DType::I32 => Tensor::I32(ndarray::ArrayD::<i32>::uninit(sh).assume_init()),
            DType::I64 => Tensor::I64(ndarray::ArrayD::<i64>::uninit(sh).assume_init()),
            DType::F32 => Tensor::F32(ndarray::ArrayD::<f32>::uninit(sh).assume_init()),
            DType::F64 => Tensor::F64(ndarray::ArrayD::<f64>::uninit(sh).assume_init()),
        }
    }
}

/// A compiled map kernel and what it needs to be called safely.
struct MapKernel {
    f: KernelFn,
    out_dtypes: Vec<DType>,
    _code: Arc<JitCode>,
}

fn base_ptr(t: &Tensor) -> *mut u8 {
    for_each_dtype!(t, a => a.as_ptr() as *mut u8)
}

/// The inputs of a kernel call, placed for the kernel: the call's layout (`layout.rs`) and
/// each input's address. An input whose elements are not contiguous along its last axis (a
/// transposed or strided view) is copied into standard layout first, so that the kernel's
/// vector loop can read it; any other view (broadcast, sliced, reversed along other axes) is
/// read where it is.
struct Operands {
    layout: Layout,
    addrs: Small<usize>,
    /// Copies the addresses may point into; kept alive with the operands.
    _copies: Vec<Tensor>,
}

/// Whether the kernel's vector loop could read `t` where it is: one element, or its last axis
/// of extent above 1 (if any) at a step of one element.
fn vector_readable(t: &TensorRef) -> bool {
    let shape = t.shape();
    let strides: Small<isize> = crate::for_each_ref!(t, a => a.strides().into());
    match (0..shape.len()).rev().find(|&a| shape[a] > 1) {
        None => true,
        Some(a) => a == shape.len() - 1 && strides[a] == 1,
    }
}

fn place(inputs: &[TensorRef], keep_last: bool) -> Result<Operands> {
    let mut shape: Small<usize> = Small::new();
    for (k, t) in inputs.iter().enumerate() {
        let ts = t.shape();
        if k == 0 {
            shape.extend_from_slice(ts);
        } else if ts != shape.as_slice() {
            shape = crate::ir::broadcast_shapes(&shape, ts)
                .map_err(Error::Shape)?
                .into();
        }
    }
    let copies: Vec<Option<Tensor>> = inputs
        .iter()
        .map(|t| (!vector_readable(t)).then(|| t.to_standard_owned()))
        .collect();
    let views: Small<TensorRef> = inputs
        .iter()
        .zip(&copies)
        .map(|(t, c)| c.as_ref().map_or_else(|| t.reborrow(), Tensor::view))
        .collect();
    let (layout, addrs) = {
        let operands: Small<Operand> = views.iter().map(Operand::of).collect();
        let layout = layout::layout(&shape, &operands, keep_last);
        let addrs = views.iter().map(|t| t.as_ptr() as usize).collect();
        (layout, addrs)
    };
    drop(views);
    Ok(Operands {
        layout,
        addrs,
        _copies: copies.into_iter().flatten().collect(),
    })
}

impl MapKernel {
    /// Runs the kernel on the rows `row0..row0 + nrows` (counted across planes, see
    /// `Layout::total_rows`) and columns `col0..col0 + ncols`, writing outputs at `outs`
    /// (addresses of element (row0, col0), then the byte strides per row and per column).
    ///
    /// # Safety
    /// Every output address must have room for the block at its strides, and must not overlap
    /// the inputs or another block's outputs.
    unsafe fn run_block(
        &self,
        ops: &Operands,
        row0: usize,
        nrows: usize,
        col0: usize,
        ncols: usize,
        outs: &[(usize, i64, i64)],
    ) {
        let l = &ops.layout;
        let m = ops.addrs.len();
        let mut outer = l.outer.clone();
        let mut inner = l.inner.clone();
        for &(_, o, i) in outs {
            outer.push(o);
            inner.push(i);
        }
        let mut done = 0;
        for (p, r, n) in l.segments(row0, nrows) {
            let mut ptrs: Small<*mut u8> = (0..m)
                .map(|j| {
                    (ops.addrs[j] as i64
                        + l.plane_offset(j, p)
                        + r as i64 * l.outer[j]
                        + col0 as i64 * l.inner[j]) as usize as *mut u8
                })
                .collect();
            for &(addr, o, _) in outs {
                ptrs.push((addr as i64 + done as i64 * o) as usize as *mut u8);
            }
            // SAFETY: inputs address their whole views at the layout's strides (stride 0
            // where broadcast) and the segment lies inside one plane of them; the caller
            // vouches for the outputs; the code is alive.
            unsafe {
                (self.f)(
                    n as i64,
                    ncols as i64,
                    ptrs.as_ptr(),
                    outer.as_ptr(),
                    inner.as_ptr(),
                )
            };
            done += n;
        }
    }
}

impl Thunk for MapKernel {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        self.run_into(inputs, None)
    }

    fn run_into(&self, inputs: &[TensorRef<'_>], dest: Option<Tensor>) -> Result<Vec<Tensor>> {
        let ops = place(inputs, false)?;
        // The caller's buffer for output 0 where it fits. It is distinct from the inputs, or
        // (an in-place step) the buffer of an input of the output's shape and layout, whose
        // elements are each read before the same element is written. One that does not fit is
        // still kept until the inputs have been read, as `Thunk::run_into` asks.
        let fits = |d: &Tensor| {
            d.dtype() == self.out_dtypes[0]
                && d.shape() == ops.layout.shape.as_slice()
                && for_each_dtype!(d, a => a.is_standard_layout())
        };
        let (mut dest, _unused) = match dest {
            Some(d) if fits(&d) => (Some(d), None),
            d => (None, d),
        };
        let outs: Vec<Tensor> = self
            .out_dtypes
            .iter()
            .map(|&d| dest.take().unwrap_or_else(|| uninit(d, &ops.layout.shape)))
            .collect();
        let bases: Small<(usize, usize)> = outs
            .iter()
            .map(|o| (base_ptr(o) as usize, o.dtype().size()))
            .collect();
        // SAFETY: the outputs are arrays of the output's shape, distinct from the inputs or
        // read only at the element being written (in place).
        unsafe { self.run_all(&ops, &bases) };
        Ok(outs)
    }

    unsafe fn run_into_raw(
        &self,
        inputs: &[TensorRef<'_>],
        out: *mut u8,
        dtype: DType,
        shape: &[usize],
    ) -> Result<bool> {
        if self.out_dtypes.as_slice() != [dtype] {
            return Ok(false);
        }
        let ops = place(inputs, false)?;
        if ops.layout.shape.as_slice() != shape {
            return Ok(false);
        }
        // SAFETY: the caller vouches for `out` (see `Thunk::run_into_raw`).
        unsafe { self.run_all(&ops, &[(out as usize, dtype.size())]) };
        Ok(true)
    }
}

impl MapKernel {
    /// Runs the kernel on all of `ops`, on rayon's threads when it is large, writing output
    /// `k` at `outs[k]` (its address and element size; standard layout).
    ///
    /// # Safety
    /// Each output must have room for the output's shape, and be distinct from the inputs or
    /// read only at the element being written.
    unsafe fn run_all(&self, ops: &Operands, outs: &[(usize, usize)]) {
        let (rows, cols) = (ops.layout.total_rows(), ops.layout.cols);
        // Output element (r, c) of a block starting at (row0, col0): addresses as integers, so
        // blocks can be handed to other threads.
        let out_at = |row0: usize, col0: usize| -> Small<(usize, i64, i64)> {
            outs.iter()
                .map(|&(base, size)| {
                    (
                        base + (row0 * cols + col0) * size,
                        (cols * size) as i64,
                        size as i64,
                    )
                })
                .collect()
        };
        // SAFETY (all calls below): the caller vouches for the outputs, and blocks cover
        // disjoint parts of them.
        let n = rows * cols;
        let threads = rayon::current_num_threads();
        if n < PARALLEL_MIN || threads < 2 {
            unsafe { self.run_block(ops, 0, rows, 0, cols, &out_at(0, 0)) };
        } else if rows >= threads {
            // A few blocks of rows per thread, so that a slow thread does not hold the others up.
            let per = rows.div_ceil(threads * 4);
            rayon::scope(|s| {
                for r in (0..rows).step_by(per) {
                    let out_at = &out_at;
                    s.spawn(move |_| unsafe {
                        self.run_block(ops, r, per.min(rows - r), 0, cols, &out_at(r, 0))
                    });
                }
            });
        } else {
            let per = cols.div_ceil(threads * 4);
            rayon::scope(|s| {
                for r in 0..rows {
                    for c in (0..cols).step_by(per) {
                        let out_at = &out_at;
                        s.spawn(move |_| unsafe {
                            self.run_block(ops, r, 1, c, per.min(cols - c), &out_at(r, c))
                        });
                    }
                }
            });
        }
    }
}

/// A reduction over the last axis with a compiled prologue: blocks of rows are computed into
/// a small buffer by the prologue kernel and reduced there with the reference reduction, so the
/// prologue's result is never stored whole and the values are those of the unfused ops.
struct ReduceKernel {
    prologue: MapKernel,
    op: crate::ir::ReduceOp,
    keepdims: bool,
}

/// About this many elements per block: large enough to amortize the calls, small enough to
/// stay in cache.
const REDUCE_BLOCK: usize = 1 << 14;

impl Thunk for ReduceKernel {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let ops = place(inputs, true)?;
        let (rows, cols) = (ops.layout.total_rows(), ops.layout.cols);
        let dtype = self.prologue.out_dtypes[0];
        let per = (REDUCE_BLOCK / cols.max(1)).max(1);
        let starts: Vec<usize> = (0..rows).step_by(per).collect();
        let reduce = Op::Reduce {
            op: self.op,
            axes: Some(vec![1]),
            keepdims: false,
        };
        let block = |r: usize| -> Result<Tensor> {
            let nr = per.min(rows - r);
            let buf = uninit(dtype, &[nr, cols]);
            let size = dtype.size();
            // SAFETY: `buf` is a fresh `nr x cols` array, distinct from the inputs.
            unsafe {
                self.prologue.run_block(
                    &ops,
                    r,
                    nr,
                    0,
                    cols,
                    &[(base_ptr(&buf) as usize, (cols * size) as i64, size as i64)],
                )
            };
            Ok(crate::perform::perform(&reduce, &[&buf])?.remove(0))
        };
        let parts: Vec<Tensor> = if rows * cols >= PARALLEL_MIN && starts.len() > 1 {
            use rayon::prelude::*;
            starts
                .par_iter()
                .map(|&r| block(r))
                .collect::<Result<_>>()?
        } else {
            starts.iter().map(|&r| block(r)).collect::<Result<_>>()?
        };
        let refs: Vec<&Tensor> = parts.iter().collect();
        let flat = if refs.is_empty() {
            crate::perform::perform(&reduce, &[&uninit(dtype, &[0, cols])])?.remove(0)
        } else {
            crate::perform::perform(&Op::Concat { axis: 0 }, &refs)?.remove(0)
        };
        // Back to the kept dims (and a 1 for the reduced one with keepdims).
        let shape = &ops.layout.shape;
        let mut out_shape: Vec<i64> = shape[..shape.len() - 1].iter().map(|&d| d as i64).collect();
        if self.keepdims {
            out_shape.push(1);
        }
        crate::perform::perform(&Op::Reshape { shape: out_shape }, &[&flat])
            .map(|mut v| vec![v.remove(0)])
    }
}
