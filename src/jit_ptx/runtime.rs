//! The CUDA side of the GPU backend. Launching kernels is not written yet (there was no GPU to
//! test it on); what is here is the check that comes first: whether the CUDA driver library
//! can be loaded at all. Without it, cudarc would panic on first use.

use crate::error::{Error, Result};

/// Whether the CUDA driver library (`libcuda`) can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to load the library; no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The executable of `func` for the GPU: an `Err` saying why there is none.
pub fn executable(
    func: &crate::ir::Func,
    dump: &crate::dump::DumpOptions,
) -> Result<Box<dyn crate::runtime::Executable>> {
    if !driver_present() {
        return Err(Error::Unsupported("no CUDA driver found".into()));
    }
    // The PTX is produced (and dumped) so that a machine with a driver at least checks it.
    let m = super::compile_ptx(func, super::DEFAULT_ARCH, dump)?;
    Err(Error::Unsupported(format!(
        "the gpu backend generates PTX ({} kernels for @{}) but cannot launch it yet; \
         use `kiln ptx` or the cpu backend",
        m.kernels.len(),
        func.name
    )))
}
