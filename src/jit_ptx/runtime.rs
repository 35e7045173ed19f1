//! `Backend::Gpu`: a function runs as a `device::DeviceFunction` (arrays on the device from the
//! first step to the last: kernels, cuBLAS products, host steps with explicit copies), called
//! with host arrays copied in and out. Functions with custom ops (state and write requests the
//! interpreter manages) run in the interpreter instead, which hands each map and reduce step
//! to a kernel on the GPU (`device::KernelThunk`, a round trip per kernel).

use super::cuda;
use super::device::{load_kernels, KernelThunk};
use crate::error::Result;
use crate::runtime::interp::{Interpreter, Thunks};
use std::sync::Arc;

pub use cuda::driver_present;

/// The executable of the optimized `func` for the GPU, or an `Err` saying why there is none
/// (no driver, no GPU, a kernel the generator refuses): a `DeviceFunction` (values on the
/// device from the first step to the last), or, for functions with custom ops, the
/// interpreter with kernel thunks.
pub fn executable(
    func: &crate::ir::Func,
    dump: &crate::dump::DumpOptions,
) -> Result<Box<dyn crate::runtime::Executable>> {
    let device = cuda::device()?;
    let plan = crate::lower::lower(func);
    dump.dump(&func.name, "schedule", || plan.to_string());
    let has_custom = plan
        .all_steps()
        .iter()
        .any(|s| matches!(s.op, crate::ir::Op::Custom(_)));
    if !has_custom {
        let d = super::device::DeviceFunction::from_plan(func.clone(), plan, device, dump)?;
        return Ok(d.into_executable());
    }
    thunk_executable(func, plan, dump, device)
}

/// The interpreter running `plan` (lowered from `func`), each map and reduce step a kernel on
/// `device`.
fn thunk_executable(
    func: &crate::ir::Func,
    plan: crate::lower::Plan,
    dump: &crate::dump::DumpOptions,
    device: Arc<cuda::Device>,
) -> Result<Box<dyn crate::runtime::Executable>> {
    let mut thunks = Thunks::default();
    for kernel in load_kernels(func, &plan, &device, dump)? {
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

/// A `Function` of `func` (optimized first when `optimize`) as a `DeviceFunction` on a host
/// device (`cuda::Device::host`): the GPU runtime's logic with the kernels compiled for the
/// CPU, for tests without a GPU.
pub fn compile_func_on_host_device(
    func: crate::ir::Func,
    optimize: bool,
) -> Result<crate::Function> {
    super::function_with(func, optimize, |f| {
        let d = super::device::DeviceFunction::from_optimized(f.clone(), cuda::Device::host())?;
        Ok(d.into_executable())
    })
}

/// A `Function` of `func` run by the interpreter with kernel thunks on a host device: the
/// path of functions with custom ops, for tests without a GPU.
pub fn compile_thunks_on_host_device(
    func: crate::ir::Func,
    optimize: bool,
) -> Result<crate::Function> {
    super::function_with(func, optimize, |f| {
        thunk_executable(
            f,
            crate::lower::lower(f),
            &crate::dump::DumpOptions::default(),
            cuda::Device::host(),
        )
    })
}
