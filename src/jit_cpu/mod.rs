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
pub(crate) mod codegen;
mod helpers;
mod math_clif;
mod reduce;
pub(crate) mod reduce_codegen;
mod reduce_operands;
pub(crate) mod scalar_ops;

pub use reduce::{generated_reduce_calls, generated_reduce_calls_on_this_thread};

use crate::dump::DumpOptions;
use crate::error::{Error, Result};
use crate::for_each_dtype;
use crate::ir::{DType, Func, Op, Value};
use crate::runtime::interp::Interpreter;
use crate::runtime::{Executable, Thunk};
use crate::tensor::{Tensor, TensorRef};
use codegen::KernelFn;
use cranelift_jit::JITModule;
use cranelift_module::FuncId;
use std::collections::HashMap;
use std::sync::Arc;

/// Owns the JIT memory the kernels live in; freed when the last kernel goes.
struct JitCode(Option<JITModule>);

// SAFETY: after `finalize_definitions` the module is never used again; it only keeps the
// generated code mapped. Calling the code from several threads is safe: kernels touch only the
// memory they are given.
unsafe impl Send for JitCode {}
unsafe impl Sync for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
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
    let size = t.dtype().size() as i64;
    if t.len() == 1 {
        return Some((0, 0));
    }
    if !t.is_standard_layout() {
        return None;
    }
    // The operand's shape aligned on the right of the output's (missing dims are 1).
    let r = shape.len();
    let ts = t.shape();
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
        let ops = place(inputs)?;
        let (rows, cols) = (ops.rows, ops.cols);
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
        // Output element (r, c) of a block starting at (row0, col0): addresses as integers, so
        // blocks can be handed to other threads.
        let out_at = |row0: usize, col0: usize| -> Small<(usize, i64, i64)> {
            outs.iter()
                .map(|o| {
                    let size = o.dtype().size();
                    (
                        base_ptr(o) as usize + (row0 * cols + col0) * size,
                        (cols * size) as i64,
                        size as i64,
                    )
                })
                .collect()
        };
        // SAFETY (all calls below): the outputs are arrays of the output's shape, distinct from
        // the inputs or read only at the element being written (in place), and blocks cover
        // disjoint parts of them.
        let n = rows * cols;
        let threads = rayon::current_num_threads();
        if n < PARALLEL_MIN || threads < 2 {
            unsafe { self.run_block(&ops, 0, rows, 0, cols, &out_at(0, 0)) };
        } else if rows >= threads {
            // A few blocks of rows per thread, so that a slow thread does not hold the others up.
            let per = rows.div_ceil(threads * 4);
            rayon::scope(|s| {
                for r in (0..rows).step_by(per) {
                    let (ops, out_at) = (&ops, &out_at);
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
                        let (ops, out_at) = (&ops, &out_at);
                        s.spawn(move |_| unsafe {
                            self.run_block(ops, r, 1, c, per.min(cols - c), &out_at(r, c))
                        });
                    }
                }
            });
        }
        Ok(outs)
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

/// A reduction to generate: its op, axes and prologue (the identity for a plain `Reduce`).
struct GenSpec {
    op: crate::ir::ReduceOp,
    axes: Option<Vec<usize>>,
    keepdims: bool,
    program: Arc<crate::ir::scalar::ScalarProgram>,
    fused: bool,
    lanes: Option<i64>,
    /// Whether the kernel has leaves for reduced dims that do not merge.
    nd: bool,
}

impl GenSpec {
    fn value_dtype(&self) -> DType {
        self.program.insts[self.program.outputs[0]].dtype
    }
}

/// What to generate for a step, if it is a reduction the generator takes.
fn gen_spec(step: &crate::lower::Step) -> Option<GenSpec> {
    let crate::lower::Kernel::Reduce {
        op,
        axes,
        keepdims,
        program,
        fused,
    } = &step.kernel
    else {
        return None;
    };
    let vd = program.insts[program.outputs[0]].dtype;
    reduce_codegen::acc_dtype(*op, vd)?;
    Some(GenSpec {
        op: *op,
        axes: axes.clone(),
        keepdims: *keepdims,
        program: program.clone(),
        fused: *fused,
        lanes: None,
        nd: false,
    })
}

/// For each argument of a reduction over `axes` (of the arguments' broadcast shape; `None`:
/// all), what its type says about its broadcasting along those axes: always when its extent is
/// 1 on every one, never when it is a known size above 1 on one, unknown otherwise.
fn broadcast_along(func: &Func, args: &[Value], axes: Option<&[usize]>) -> Vec<codegen::Bcast> {
    let rank = args.iter().map(|&a| func.ty(a).rank()).max().unwrap_or(0);
    let all: Vec<usize> = (0..rank).collect();
    let axes = axes.unwrap_or(&all);
    args.iter()
        .map(|&a| {
            let ty = func.ty(a);
            let lead = rank - ty.rank();
            // The argument's extent on each reduced axis (1 where it has no such axis).
            let dims: Vec<Option<usize>> = axes
                .iter()
                .map(|&ax| {
                    if ax < lead {
                        Some(1)
                    } else {
                        ty.shape[ax - lead]
                    }
                })
                .collect();
            if dims.iter().any(|d| matches!(d, Some(n) if *n > 1)) {
                codegen::Bcast::Never
            } else if dims.iter().all(|d| *d == Some(1)) {
                codegen::Bcast::Always
            } else {
                codegen::Bcast::Unknown
            }
        })
        .collect()
}

/// Compiles `func` for the CPU.
pub fn compile(func: &Func, dump: &DumpOptions) -> Result<Box<dyn Executable>> {
    let (exec, asm) = codegen::with_listing(dump.enabled("asm"), || compile_kernels(func, dump));
    dump.dump(&func.name, "asm", || asm);
    exec
}

/// `compile` without the machine-code listing.
fn compile_kernels(func: &Func, dump: &DumpOptions) -> Result<Box<dyn Executable>> {
    let mut module = codegen::new_module()?;
    type Pending = (
        Value,
        cranelift_module::FuncId,
        Vec<DType>,
        Option<(crate::ir::ReduceOp, bool)>,
    );
    let mut pending: Vec<Pending> = Vec::new();
    let mut clif = String::new();
    // The steps with a kernel to generate: maps and reductions with one result.
    let plan = crate::lower::lower_with(
        func,
        crate::lower::LowerOptions {
            fold_transposes: true,
            row_groups: true,
        },
    );
    dump.dump(&func.name, "schedule", || plan.to_string());
    let candidates: Vec<(Value, &crate::lower::Step)> = plan
        .all_steps()
        .into_iter()
        .filter(|s| {
            s.results.len() == 1
                && matches!(
                    s.kernel,
                    crate::lower::Kernel::Map { .. } | crate::lower::Kernel::Reduce { .. }
                )
        })
        .map(|s| (s.results[0], s))
        .collect();
    let mut kernels_text = String::new();
    let mut reductions: Vec<(Value, FuncId, GenSpec)> = Vec::new();
    // Kernels already generated, by what determines their code (kind, program, inputs): equal
    // steps share one (a training step's parameter updates, its bias-gradient sums), which
    // keeps compile time proportional to the distinct kernels.
    let mut generated_reduce: HashMap<String, reduce_codegen::ReduceKernelInfo> = HashMap::new();
    let mut generated_map: HashMap<String, FuncId> = HashMap::new();
    for (k, (value, step)) in candidates.iter().enumerate() {
        // Reductions over any axes: a generated loop nest (a prologue with several outputs
        // keeps the reference or the prologue-then-perform kernel).
        if let Some(spec) = gen_spec(step) {
            let name = format!("{}_r{k}", func.name);
            let along_n = broadcast_along(func, &step.args, spec.axes.as_deref());
            // Cursor leaves for reduced dims that do not merge: only several reduced axes
            // can fail to merge.
            let rank = step
                .args
                .iter()
                .map(|&a| func.ty(a).rank())
                .max()
                .unwrap_or(0);
            let nd = spec.axes.as_ref().map_or(rank, |a| a.len()) >= 2;
            let key = format!("{} {along_n:?} {nd} {}", spec.op.name(), spec.program);
            let defined = match generated_reduce.get(&key) {
                Some(info) => Ok(info.clone()),
                None => reduce_codegen::define_reduce_kernel(
                    &mut module,
                    &name,
                    spec.op,
                    &spec.program,
                    &along_n,
                    nd,
                )
                .inspect(|info| {
                    clif.push_str(&info.clif);
                    clif.push('\n');
                    generated_reduce.insert(key, info.clone());
                }),
            };
            match defined {
                Ok(info) => {
                    kernels_text.push_str(&format!(
                        "{name}: reduce {} over {} (generated{}) -> %{} over {} inputs: {}\n",
                        spec.op.name(),
                        match &spec.axes {
                            Some(a) => format!("axes {a:?}"),
                            None => "all axes".to_string(),
                        },
                        match info.lanes {
                            Some(l) => format!(", {l} lanes"),
                            None => ", scalar".to_string(),
                        },
                        value.0,
                        step.args.len(),
                        spec.program
                    ));
                    let spec = GenSpec {
                        lanes: info.lanes,
                        nd: info.nd,
                        ..spec
                    };
                    reductions.push((*value, info.entry, spec));
                    continue;
                }
                // Not generated (a construct Cranelift rejects): the paths below, or perform.
                Err(_) if matches!(step.op, Op::Reduce { .. }) => continue,
                Err(_) => {}
            }
        }
        if matches!(step.op, Op::Reduce { .. }) {
            continue;
        }
        // A fused reduction is compiled when it reduces the last axis of its prologue's
        // result; others run their reference implementation.
        let (program, reduce) = match &step.op {
            Op::FusedReduce {
                op,
                axes,
                keepdims,
                program,
            } => {
                let rank = step
                    .args
                    .iter()
                    .map(|&a| func.ty(a).rank())
                    .max()
                    .unwrap_or(0);
                if rank == 0 || axes.as_deref() != Some(&[rank - 1][..]) {
                    continue;
                }
                ((**program).clone(), Some((*op, *keepdims)))
            }
            _ => match &step.kernel {
                crate::lower::Kernel::Map { program } => ((**program).clone(), None),
                _ => continue,
            },
        };
        let name = format!("{}_k{k}", func.name);
        // What the types say about broadcasting along the rows the kernel's vectors run on.
        let bcast: Vec<codegen::Bcast> = step
            .args
            .iter()
            .map(|&a| codegen::Bcast::along_last(func.ty(a)))
            .collect();
        let key = format!("{} {bcast:?} {program}", step.args.len());
        let id = match generated_map.get(&key) {
            Some(&id) => id,
            None => {
                let (id, text) =
                    codegen::define_map_kernel_with(&mut module, &name, &program, &bcast).map_err(
                        |e| {
                            Error::Unsupported(format!(
                                "{}: cannot compile {}: {e}",
                                func.name,
                                step.op.display_name()
                            ))
                        },
                    )?;
                clif.push_str(&text);
                clif.push('\n');
                generated_map.insert(key, id);
                id
            }
        };
        let kind = match reduce {
            Some(_) => format!(
                "reduce {} over the last axis, prologue",
                step.op.display_name()
            ),
            None => format!("map {}", step.op.display_name()),
        };
        kernels_text.push_str(&format!(
            "{name}: {kind} -> %{} over {} inputs: {program}\n",
            value.0,
            step.args.len()
        ));
        let outs = program
            .outputs
            .iter()
            .map(|&o| program.insts[o].dtype)
            .collect();
        pending.push((*value, id, outs, reduce));
    }
    dump.dump(&func.name, "kernels", || kernels_text.clone());
    dump.dump(&func.name, "clif", || clif.clone());
    module
        .finalize_definitions()
        .map_err(|e| Error::Unsupported(format!("cranelift: {e}")))?;
    let gens: Vec<_> = reductions
        .into_iter()
        .map(|(v, id, spec)| (v, module.get_finalized_function(id), spec))
        .collect();
    let fns: Vec<_> = pending
        .into_iter()
        .map(|(v, id, d, r)| (v, module.get_finalized_function(id), d, r))
        .collect();
    let code = Arc::new(JitCode(Some(module)));
    let mut kernels: HashMap<Value, Arc<dyn Thunk>> = HashMap::new();
    for (v, p, out_dtypes, reduce) in fns {
        // SAFETY: `p` is the finalized code of a kernel generated with `KernelFn`'s signature.
        let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(p) };
        let map = MapKernel {
            f,
            out_dtypes,
            _code: code.clone(),
        };
        let thunk: Arc<dyn Thunk> = match reduce {
            Some((op, keepdims)) => Arc::new(ReduceKernel {
                prologue: map,
                op,
                keepdims,
            }),
            None => Arc::new(map),
        };
        kernels.insert(v, thunk);
    }
    for (v, p, spec) in gens {
        // SAFETY: `p` is the finalized entry of a reduction generated with `ReduceFn`'s
        // signature.
        let f = unsafe { std::mem::transmute::<*const u8, reduce_codegen::ReduceFn>(p) };
        let out_dtype = reduce_codegen::acc_dtype(spec.op, spec.value_dtype())
            .expect("only generated reductions get here");
        kernels.insert(
            v,
            Arc::new(reduce::GenReduce {
                f,
                op: spec.op,
                axes: spec.axes,
                keepdims: spec.keepdims,
                program: spec.program,
                fused: spec.fused,
                out_dtype,
                lanes: spec.lanes,
                nd: spec.nd,
                _code: code.clone(),
            }),
        );
    }
    Ok(Box::new(Interpreter::with_thunks(
        func.clone(),
        plan,
        kernels,
    )))
}
