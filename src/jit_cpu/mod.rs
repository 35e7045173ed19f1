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

/// How the kernel reads one operand of a `rows x cols` view of the output: byte strides per
/// row and per column, or `None` when the operand must be broadcast into a copy first.
fn strides_2d(t: &TensorRef, shape: &[usize], rows: usize, cols: usize) -> Option<(i64, i64)> {
    if t.len() == 1 {
        return Some((0, 0));
    }
    if !t.is_standard_layout() {
        return None;
    }
    contiguous_strides_2d(t.shape(), t.dtype().size(), shape, rows, cols)
}

/// `strides_2d` for a standard-layout operand of shape `ts` and element size `size` (more than
/// one element).
fn contiguous_strides_2d(
    ts: &[usize],
    size: usize,
    shape: &[usize],
    rows: usize,
    cols: usize,
) -> Option<(i64, i64)> {
    let size = size as i64;
    // The operand's shape aligned on the right of the output's (missing dims are 1).
    let r = shape.len();
    let dim = |i: usize| (i + ts.len()).checked_sub(r).map_or(1, |k| ts[k]);
    let last = dim(r - 1);
    let full_lead = (0..r - 1).all(|i| dim(i) == shape[i]);
    let ones_lead = (0..r - 1).all(|i| dim(i) == 1);
    match (full_lead, last == cols) {
        (true, true) => Some((cols as i64 * size, size)),
        // One value per row: a `[.., 1]` column.
        (true, false) if last == 1 => Some((size, 0)),
        // The same row for every row: a `[1, .., cols]` operand.
        (false, true) if ones_lead || rows == 1 => Some((0, size)),
        _ => None,
    }
}

/// The inputs of a kernel call, placed for the kernel: the output's shape as `rows x cols`, and
/// for each input its address and byte strides (after a broadcast copy where needed).
struct Operands {
    shape: Small<usize>,
    rows: usize,
    cols: usize,
    addrs: Small<usize>,
    outer: Small<i64>,
    inner: Small<i64>,
    /// Broadcast copies the addresses may point into; kept alive with the plan.
    _copies: Vec<Tensor>,
}

/// A few numbers per operand or dim, kept on the stack: a small kernel call allocates nothing
/// for its bookkeeping (the call overhead of W7).
type Small<T> = smallvec::SmallVec<[T; 8]>;

fn place(inputs: &[TensorRef]) -> Result<Operands> {
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
    // The output as a `rows x cols` matrix; a 0-d output is 1 x 1.
    let cols = shape.last().copied().unwrap_or(1);
    let rows: usize = shape.iter().rev().skip(1).product();
    let mut copies: Vec<Tensor> = Vec::new();
    let (mut addrs, mut outer, mut inner) = (Small::new(), Small::new(), Small::new());
    for t in inputs {
        let direct = if shape.is_empty() {
            Some((0, 0))
        } else {
            strides_2d(t, &shape, rows, cols)
        };
        let (o, i) = match direct {
            Some(st) => {
                addrs.push(t.as_ptr() as usize);
                st
            }
            None => {
                let bad = || Error::Shape(format!("cannot broadcast {:?} to {shape:?}", t.shape()));
                let c = t.broadcast_owned(&shape).ok_or_else(bad)?;
                addrs.push(base_ptr(&c) as usize);
                copies.push(c);
                let size = t.dtype().size() as i64;
                (cols as i64 * size, size)
            }
        };
        outer.push(o);
        inner.push(i);
    }
    Ok(Operands {
        shape,
        rows,
        cols,
        addrs,
        outer,
        inner,
        _copies: copies,
    })
}

impl Operands {
    /// The same operands as one row, where every input is the whole array in order (or one
    /// value): an elementwise map does not care where rows end, and a matrix of short rows
    /// (W5's 256 x 10 loss gradients) then runs as one vector loop instead of a loop a row.
    /// The kernel's notion of which inputs are broadcast along the row is unchanged: a whole
    /// input stays contiguous and a single value stays broadcast.
    fn flat(mut self) -> Self {
        let whole = |j: usize| match (self.outer[j], self.inner[j]) {
            (0, 0) => true,
            (o, i) => i != 0 && o == self.cols as i64 * i,
        };
        if self.rows > 1 && self.cols > 1 && (0..self.addrs.len()).all(whole) {
            self.cols *= self.rows;
            self.rows = 1;
            for (o, i) in self.outer.iter_mut().zip(&self.inner) {
                *o = self.cols as i64 * i;
            }
        }
        self
    }
}

impl MapKernel {
    /// Runs the kernel on the block of rows `row0..row0 + nrows` and columns
    /// `col0..col0 + ncols`, writing outputs at `outs` (addresses of element (row0, col0)) with
    /// the given row strides (column strides are the element sizes).
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
        let mut ptrs: Small<*mut u8> = (0..ops.addrs.len())
            .map(|j| {
                (ops.addrs[j] as i64 + row0 as i64 * ops.outer[j] + col0 as i64 * ops.inner[j])
                    as usize as *mut u8
            })
            .collect();
        let mut outer = ops.outer.clone();
        let mut inner = ops.inner.clone();
        for &(addr, o, i) in outs {
            ptrs.push(addr as *mut u8);
            outer.push(o);
            inner.push(i);
        }
        // SAFETY: inputs address the whole `rows x cols` view at their strides (their own shape,
        // checked by `strides_2d`, or a broadcast copy; stride 0 where broadcast) and the block
        // lies inside it; the caller vouches for the outputs; the code is alive.
        unsafe {
            (self.f)(
                nrows as i64,
                ncols as i64,
                ptrs.as_ptr(),
                outer.as_ptr(),
                inner.as_ptr(),
            )
        };
    }
}

impl Thunk for MapKernel {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        self.run_into(inputs, None)
    }

    fn run_into(&self, inputs: &[TensorRef<'_>], dest: Option<Tensor>) -> Result<Vec<Tensor>> {
        let ops = place(inputs)?.flat();
        // The caller's buffer for output 0 where it fits. It is distinct from the inputs, or
        // (an in-place step) the buffer of an input of the output's shape and layout, whose
        // elements are each read before the same element is written. One that does not fit is
        // still kept until the inputs have been read, as `Thunk::run_into` asks.
        let fits = |d: &Tensor| {
            d.dtype() == self.out_dtypes[0]
                && d.shape() == ops.shape.as_slice()
                && for_each_dtype!(d, a => a.is_standard_layout())
        };
        let (mut dest, _unused) = match dest {
            Some(d) if fits(&d) => (Some(d), None),
            d => (None, d),
        };
        let outs: Vec<Tensor> = self
            .out_dtypes
            .iter()
            .map(|&d| dest.take().unwrap_or_else(|| uninit(d, &ops.shape)))
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
        let ops = place(inputs)?.flat();
        if ops.shape.as_slice() != shape {
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
        let (rows, cols) = (ops.rows, ops.cols);
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
        let ops = place(inputs)?;
        let (rows, cols) = (ops.rows, ops.cols);
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
        let mut out_shape: Vec<i64> = ops.shape[..ops.shape.len() - 1]
            .iter()
            .map(|&d| d as i64)
            .collect();
        if self.keepdims {
            out_shape.push(1);
        }
        crate::perform::perform(&Op::Reshape { shape: out_shape }, &[&flat])
            .map(|mut v| vec![v.remove(0)])
    }
}
