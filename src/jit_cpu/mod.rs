//! The CPU backend: elementwise work (single ops and fused Composites) is compiled with
//! Cranelift into map kernels; every other op runs through the interpreter's per-op path, which
//! the compiled kernels plug into as thunks. See `codegen` for the kernel ABI.
//!
//! This is the first slice of the backend: scalar loops (no SIMD yet), transcendentals through
//! calls to the same Rust functions the reference `perform` uses (so results are bit-identical
//! to the interpreter's), and broadcasting of operands other than single elements done by
//! copying them to the output's shape first.

mod codegen;
mod helpers;

use crate::dump::DumpOptions;
use crate::error::{Error, Result};
use crate::ir::{DType, Func, Inst, Value};
use crate::rewrite::fuse::program_of;
use crate::runtime::interp::Interpreter;
use crate::runtime::{Executable, Thunk};
use crate::tensor::Tensor;
use crate::{for_each_dtype, map_tensor};
use codegen::KernelFn;
use cranelift_jit::JITModule;
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
fn strides_2d(t: &Tensor, shape: &[usize], rows: usize, cols: usize) -> Option<(i64, i64)> {
    let size = t.dtype().size() as i64;
    if t.len() == 1 {
        return Some((0, 0));
    }
    if !for_each_dtype!(t, a => a.is_standard_layout()) {
        return None;
    }
    // The operand's shape aligned on the right of the output's.
    let r = shape.len();
    let mut padded = vec![1usize; r.saturating_sub(t.shape().len())];
    padded.extend_from_slice(t.shape());
    let (lead, last) = (&padded[..r - 1], padded[r - 1]);
    let full_lead = lead == &shape[..r - 1];
    let ones_lead = lead.iter().all(|&d| d == 1);
    match (full_lead, last == cols) {
        (true, true) => Some((cols as i64 * size, size)),
        // One value per row: a `[.., 1]` column.
        (true, false) if last == 1 => Some((size, 0)),
        // The same row for every row: a `[1, .., cols]` operand.
        (false, true) if ones_lead || rows == 1 => Some((0, size)),
        _ => None,
    }
}

impl Thunk for MapKernel {
    fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let mut shape: Vec<usize> = Vec::new();
        for t in inputs {
            shape = crate::ir::broadcast_shapes(&shape, t.shape()).map_err(Error::Shape)?;
        }
        // The output as a `rows x cols` matrix; a 0-d output is 1 x 1.
        let cols = shape.last().copied().unwrap_or(1);
        let rows: usize = shape.iter().rev().skip(1).product();
        let mut copies: Vec<Tensor> = Vec::new();
        let mut ptrs: Vec<*mut u8> = Vec::new();
        let (mut outer, mut inner): (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
        for t in inputs {
            let direct = if shape.is_empty() {
                Some((0, 0))
            } else {
                strides_2d(t, &shape, rows, cols)
            };
            let (o, i) = match direct {
                Some(st) => {
                    ptrs.push(base_ptr(t));
                    st
                }
                None => {
                    let bad =
                        || Error::Shape(format!("cannot broadcast {:?} to {shape:?}", t.shape()));
                    let c = map_tensor!(t, a => a.broadcast(ndarray::IxDyn(&shape)).ok_or_else(bad)?.as_standard_layout().into_owned());
                    ptrs.push(base_ptr(&c));
                    copies.push(c);
                    let size = t.dtype().size() as i64;
                    (cols as i64 * size, size)
                }
            };
            outer.push(o);
            inner.push(i);
        }
        let outs: Vec<Tensor> = self.out_dtypes.iter().map(|&d| uninit(d, &shape)).collect();
        for o in &outs {
            let size = o.dtype().size() as i64;
            ptrs.push(base_ptr(o));
            outer.push(cols as i64 * size);
            inner.push(size);
        }
        // Addresses as integers, so blocks can be handed to other threads.
        let addrs: Vec<usize> = ptrs.iter().map(|&p| p as usize).collect();
        let run_block = |row0: usize, nrows: usize, col0: usize, ncols: usize| {
            let moved: Vec<*mut u8> = (0..addrs.len())
                .map(|j| {
                    (addrs[j] as i64 + row0 as i64 * outer[j] + col0 as i64 * inner[j]) as usize
                        as *mut u8
                })
                .collect();
            // SAFETY: each operand addresses the whole `rows x cols` view at its strides (its
            // own shape, checked by `strides_2d`, or a broadcast copy; stride 0 where it is
            // broadcast), and the block stays inside that view; outputs are fresh and distinct
            // from the inputs, blocks write disjoint parts, and the code is alive.
            unsafe {
                (self.f)(
                    nrows as i64,
                    ncols as i64,
                    moved.as_ptr(),
                    outer.as_ptr(),
                    inner.as_ptr(),
                )
            };
        };
        let n = rows * cols;
        let threads = rayon::current_num_threads();
        if n < PARALLEL_MIN || threads < 2 {
            run_block(0, rows, 0, cols);
        } else if rows >= threads {
            // A few blocks of rows per thread, so that a slow thread does not hold the others up.
            let per = rows.div_ceil(threads * 4);
            rayon::scope(|s| {
                for r in (0..rows).step_by(per) {
                    let run_block = &run_block;
                    s.spawn(move |_| run_block(r, per.min(rows - r), 0, cols));
                }
            });
        } else {
            let per = cols.div_ceil(threads * 4);
            rayon::scope(|s| {
                for r in 0..rows {
                    for c in (0..cols).step_by(per) {
                        let run_block = &run_block;
                        s.spawn(move |_| run_block(r, 1, c, per.min(cols - c)));
                    }
                }
            });
        }
        drop(copies);
        Ok(outs)
    }
}

/// Compiles `func` for the CPU.
pub fn compile(func: &Func, dump: &DumpOptions) -> Result<Box<dyn Executable>> {
    let mut module = codegen::new_module()?;
    let mut pending: Vec<(Value, cranelift_module::FuncId, Vec<DType>)> = Vec::new();
    let mut clif = String::new();
    fn visit(body: &[Inst], out: &mut Vec<(Value, Inst)>) {
        for inst in body {
            for r in &inst.regions {
                visit(&r.body, out);
            }
            if inst.results.len() == 1 && inst.op.is_elementwise() {
                out.push((inst.results[0], inst.clone()));
            }
        }
    }
    let mut candidates = Vec::new();
    visit(&func.body, &mut candidates);
    let mut kernels_text = String::new();
    for (k, (value, inst)) in candidates.iter().enumerate() {
        let Some(program) = program_of(&inst.op, func, &inst.args, *value) else {
            continue;
        };
        let name = format!("{}_k{k}", func.name);
        let (id, text) = codegen::define_map_kernel(&mut module, &name, &program, inst.args.len())
            .map_err(|e| {
                Error::Unsupported(format!(
                    "{}: cannot compile {}: {e}",
                    func.name,
                    inst.op.display_name()
                ))
            })?;
        clif.push_str(&text);
        clif.push('\n');
        kernels_text.push_str(&format!(
            "{name}: map {} -> %{} over {} inputs: {program}\n",
            inst.op.display_name(),
            value.0,
            inst.args.len()
        ));
        let outs = program
            .outputs
            .iter()
            .map(|&o| program.insts[o].dtype)
            .collect();
        pending.push((*value, id, outs));
    }
    dump.dump(&func.name, "kernels", || kernels_text.clone());
    dump.dump(&func.name, "clif", || clif.clone());
    module
        .finalize_definitions()
        .map_err(|e| Error::Unsupported(format!("cranelift: {e}")))?;
    let fns: Vec<(Value, *const u8, Vec<DType>)> = pending
        .into_iter()
        .map(|(v, id, d)| (v, module.get_finalized_function(id), d))
        .collect();
    let code = Arc::new(JitCode(Some(module)));
    let mut kernels: HashMap<Value, Arc<dyn Thunk>> = HashMap::new();
    for (v, p, out_dtypes) in fns {
        // SAFETY: `p` is the finalized code of a kernel generated with `KernelFn`'s signature.
        let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(p) };
        kernels.insert(
            v,
            Arc::new(MapKernel {
                f,
                out_dtypes,
                _code: code.clone(),
            }),
        );
    }
    Ok(Box::new(Interpreter::with_thunks(func.clone(), kernels)))
}
