//! `Backend::Gpu`: a function's map and reduce kernels run on the GPU, everything else (perform
//! and gemm steps, `ifelse`, shared state, write requests, errors) in the interpreter, which
//! hands each kernel step to a `device::KernelThunk`. Arrays cross to the device and back at
//! each kernel; `device::DeviceFunction` keeps them there.

use super::cuda;
use super::device::{GpuKernel, KernelThunk};
use crate::error::Result;
use crate::runtime::interp::{Interpreter, Thunks};
use std::sync::Arc;

pub use cuda::driver_present;

/// The executable of the optimized `func` for the GPU, or an `Err` saying why there is none
/// (no driver, no GPU, a kernel the generator refuses).
pub fn executable(
    func: &crate::ir::Func,
    dump: &crate::dump::DumpOptions,
) -> Result<Box<dyn crate::runtime::Executable>> {
    let device = cuda::device()?;
    let plan = crate::lower::lower(func);
    dump.dump(&func.name, "schedule", || plan.to_string());
    let m = super::ptx_for_plan(func, &plan, device.arch())?;
    dump.dump(&func.name, "llvm", || m.llvm.clone());
    dump.dump(&func.name, "ptx", || m.ptx.clone());
    let module = Arc::new(device.load(&m.ptx)?);
    let mut thunks = Thunks::default();
    for kernel in GpuKernel::load_all(&module, &m.kernels)? {
        let step = kernel.info.step;
        let device = device.clone();
        thunks.insert(step, Arc::new(KernelThunk { device, kernel }));
    }
    Ok(Box::new(Interpreter::with_thunks(
        func.clone(),
        plan,
        thunks,
    )))
}

/// A `Function` of `func` on the GPU (optimized first when `optimize`), for tests.
pub fn compile_func(func: crate::ir::Func, optimize: bool) -> Result<crate::Function> {
    super::function_with(func, optimize, |f| {
        executable(f, &crate::dump::DumpOptions::default())
    })
}
