//! The GPU kernels compiled for the host CPU: the test oracle of the GPU backend where there
//! is no GPU. The same LLVM IR builders (`map.rs`, `reduce.rs`, `scalar.rs`, `math_llvm.rs`)
//! run in host mode (one thread: `tid = ctaid = 0`, `ntid = nctaid = 1`, no shuffles or
//! barriers, address space 0), and the parameters come from `launch.rs`, as a launcher's
//! would. A `Function` built here runs the kernels through LLVM's JIT and everything else
//! through the interpreter, so its results can be compared with the interpreter's: that
//! checks the scalar lowering, the math, the index arithmetic, broadcasting and the launch
//! parameters, though not the parallel parts (the warp shuffles, shared memory, several
//! blocks).
//!
//! Meant for tests: each compiled function keeps its LLVM context and JIT memory until the
//! process ends (they are leaked: LLVM's JIT is neither `Send` nor `Sync`, the code it made is).

use super::gen::{bx, Gen};
use super::launch::{kernel_launch, Launch};
use super::{define_kernels, KernelInfo};
use crate::error::{Error, Result};
use crate::for_each_dtype;
use crate::ir::Func;
use crate::runtime::interp::{Interpreter, Thunks};
use crate::runtime::{Executable, Thunk};
use crate::tensor::{Tensor, TensorRef};
use inkwell::context::Context;
use inkwell::targets::{InitializationConfig, Target};
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::BasicMetadataValueEnum;
use inkwell::OptimizationLevel;
use std::sync::Arc;

/// `extern "C" fn(args: *const i64)`: the wrapper that unpacks a kernel's parameters.
pub type Entry = super::cuda::HostEntry;

struct HostKernel {
    f: Entry,
    info: KernelInfo,
}

impl Thunk for HostKernel {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let info = &self.info;
        let launch: Launch = kernel_launch(info, inputs)?;
        let mut outs: Vec<Tensor> = info
            .out_dtypes
            .iter()
            .enumerate()
            .map(|(o, &d)| Tensor::zeros(d, info.result_shape(o, &launch)))
            .collect();
        if !launch.work && info.checks_indices() {
            // Nothing to compute, but maybe indices to check: `perform`'s check.
            return Ok(vec![info.on_host(inputs)?]);
        }
        if launch.work {
            let mut args: Vec<i64> = Vec::new();
            for o in outs.iter_mut() {
                args.push(for_each_dtype!(o, a => a.as_mut_ptr() as i64));
            }
            args.extend(inputs.iter().map(|t| t.as_ptr() as i64));
            // The flag of an index out of range, after the inputs.
            let mut flag = 0i32;
            if info.checks_indices() {
                args.push(&mut flag as *mut i32 as i64);
            }
            // A sort's scratch arrays, after the inputs.
            let n_out: usize = launch.out_shape.iter().product();
            let mut scratch: Vec<Vec<i64>> = vec![vec![0; n_out]; info.scratch_arrays()];
            args.extend(scratch.iter_mut().map(|v| v.as_mut_ptr() as i64));
            args.extend(&launch.scalars);
            // SAFETY: the kernel reads the inputs at the offsets the launch parameters give,
            // which stay inside each input's elements (its shape and strides), and writes the
            // outputs, fresh contiguous arrays of the launch's output shape (and the flag, a live
            // i32).
            unsafe { (self.f)(args.as_ptr()) };
            if flag != 0 {
                return Err(info.index_error(inputs));
            }
        }
        Ok(outs)
    }
}

/// The kernels of `plan` (lowered from the optimized, verified `func`) compiled for the host,
/// each with its entry (`NAME_host(args)`).
pub fn host_kernels(func: &Func, plan: &crate::lower::Plan) -> Result<Vec<(KernelInfo, Entry)>> {
    Target::initialize_native(&InitializationConfig::default())
        .map_err(|e| Error::Unsupported(format!("host oracle: {e}")))?;
    // Leaked on purpose (see the module doc).
    let ctx: &'static Context = Box::leak(Box::new(Context::create()));
    let g = Gen::new_host(ctx, &func.name);
    let kernels = define_kernels(&g, func, plan)?;
    for info in &kernels {
        define_entry(&g, &info.name)?;
    }
    g.module
        .verify()
        .map_err(|e| Error::Unsupported(format!("host oracle: invalid LLVM IR: {e}")))?;
    let ee = g
        .module
        .create_jit_execution_engine(OptimizationLevel::Default)
        .map_err(|e| Error::Unsupported(format!("host oracle: {e}")))?;
    let mut out = Vec::new();
    for info in kernels {
        let addr = ee
            .get_function_address(&format!("{}_host", info.name))
            .map_err(|e| Error::Unsupported(format!("host oracle: {}: {e}", info.name)))?;
        // SAFETY: the address of a function defined by `define_entry` with `Entry`'s signature.
        let f = unsafe { std::mem::transmute::<usize, Entry>(addr) };
        out.push((info, f));
    }
    std::mem::forget(ee);
    Ok(out)
}

/// The kernels of `func` (optimized, verified) compiled for the host, plugged into the
/// interpreter.
pub fn executable(func: &Func) -> Result<Box<dyn Executable>> {
    let plan = super::plan_of(func);
    let mut thunks: Thunks = Thunks::default();
    for (info, f) in host_kernels(func, &plan)? {
        thunks.insert(info.step, Arc::new(HostKernel { f, info }));
    }
    Ok(Box::new(Interpreter::with_thunks(
        func.clone(),
        plan,
        thunks,
    )))
}

/// A `Function` of `func` running its kernels on the host (optimized first when `optimize`).
pub fn compile_func(func: Func, optimize: bool) -> Result<crate::Function> {
    super::function_with(func, optimize, executable)
}

/// `void NAME_host(i64 *args)`: loads each parameter of kernel `name` from `args` (pointers
/// as integers) and calls it.
fn define_entry(g: &Gen, name: &str) -> Result<()> {
    let kernel = g
        .module
        .get_function(name)
        .ok_or_else(|| Error::Unsupported(format!("host oracle: no kernel {name}")))?;
    let ptr = g.ctx.ptr_type(inkwell::AddressSpace::from(0));
    let ty = g
        .ctx
        .void_type()
        .fn_type(&[BasicMetadataTypeEnum::from(ptr)], false);
    let f = g.module.add_function(&format!("{name}_host"), ty, None);
    let entry = g.ctx.append_basic_block(f, "entry");
    g.b.position_at_end(entry);
    let args = f
        .get_nth_param(0)
        .ok_or_else(|| Error::Unsupported("host oracle: no argument".into()))?
        .into_pointer_value();
    let mut call_args: Vec<BasicMetadataValueEnum> = Vec::new();
    for (k, p) in kernel.get_params().iter().enumerate() {
        let at = bx(unsafe {
            g.b.build_in_bounds_gep(g.i64(), args, &[g.c64(k as i64)], "")
        })?;
        let v = bx(g.b.build_load(g.i64(), at, ""))?.into_int_value();
        call_args.push(if p.is_pointer_value() {
            let pt = p.into_pointer_value().get_type();
            bx(g.b.build_int_to_ptr(v, pt, ""))?.into()
        } else {
            v.into()
        });
    }
    bx(g.b.build_call(kernel, &call_args, ""))?;
    bx(g.b.build_return(None))?;
    Ok(())
}
