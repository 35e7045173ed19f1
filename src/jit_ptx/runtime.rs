//! `Backend::Gpu`: a function runs as a `device::DeviceFunction` (arrays on the device from the
//! first step to the last: kernels, cuBLAS products, views, host steps with explicit copies,
//! custom ops among them), called with host arrays copied in and out.

use super::cuda;
use crate::error::Result;

pub use cuda::driver_present;

/// The executable of the optimized `func` for the GPU, or an `Err` saying why there is none
/// (no driver, no GPU, a kernel the generator refuses).
pub fn executable(
    func: &crate::ir::Func,
    dump: &crate::dump::DumpOptions,
) -> Result<Box<dyn crate::runtime::Executable>> {
    let device = cuda::device()?;
    let plan = super::plan_of(func);
    dump.dump(&func.name, "schedule", || plan.to_string());
    let d = super::device::DeviceFunction::from_plan(func.clone(), plan, device, dump)?;
    Ok(d.into_executable())
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
