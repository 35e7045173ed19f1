//! LLVM's NVPTX target: the target machine for an `sm_XX`, the O3 pipeline, and PTX text.

use crate::error::{Error, Result};
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;
use std::sync::Once;

/// The GPU architectures kiln emits PTX for, and the PTX ISA version each is written in
/// (7.8 is the first with sm_90; sm_90a needs 8.0).
pub const ARCHS: &[(&str, &str)] = &[
    ("sm_80", "+ptx78"),
    ("sm_86", "+ptx78"),
    ("sm_89", "+ptx78"),
    ("sm_90", "+ptx78"),
    ("sm_90a", "+ptx80"),
];

/// The default architecture (the H100).
pub const DEFAULT_ARCH: &str = "sm_90";

pub const TRIPLE: &str = "nvptx64-nvidia-cuda";

/// The target machine for `arch`, or an error naming the architectures there are.
pub fn machine(arch: &str) -> Result<TargetMachine> {
    static INIT: Once = Once::new();
    INIT.call_once(|| Target::initialize_nvptx(&InitializationConfig::default()));
    let features = ARCHS
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            Error::Input(format!(
                "unknown GPU architecture `{arch}` (expected one of {})",
                ARCHS.iter().map(|(a, _)| *a).collect::<Vec<_>>().join(", ")
            ))
        })?;
    let triple = TargetTriple::create(TRIPLE);
    let target = Target::from_triple(&triple)
        .map_err(|e| Error::Unsupported(format!("ptx backend: {e}")))?;
    target
        .create_target_machine(
            &triple,
            arch,
            features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| Error::Unsupported(format!("ptx backend: no target machine for {arch}")))
}

/// Runs the O3 pipeline on `module` (verified before) and returns its PTX text.
pub fn optimize_and_emit(module: &Module, tm: &TargetMachine) -> Result<String> {
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module
        .run_passes("default<O3>", tm, PassBuilderOptions::create())
        .map_err(|e| Error::Unsupported(format!("ptx backend: llvm passes: {e}")))?;
    let buf = tm
        .write_to_memory_buffer(module, FileType::Assembly)
        .map_err(|e| Error::Unsupported(format!("ptx backend: llvm codegen: {e}")))?;
    String::from_utf8(buf.as_slice().to_vec())
        .map(|s| s.trim_end_matches('\0').to_string())
        .map_err(|e| Error::Unsupported(format!("ptx backend: PTX is not text: {e}")))
}
