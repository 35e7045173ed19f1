//! The machine an object file is for: a target triple (parsed by `target-lexicon`) and the
//! Cranelift ISA with the flags object files need.

use crate::error::{Error, Result};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use target_lexicon::{Architecture, BinaryFormat, Triple};

/// A target: its triple and what the code needs of the CPU (for the header).
pub struct Target {
    pub triple: Triple,
    pub isa: OwnedTargetIsa,
    pub cpu: &'static str,
}

/// The ISA for `triple` (the host's when `None`). x86_64 objects use Cranelift's `haswell`
/// preset (AVX2, FMA, BMI: x86-64-v3 CPUs, 2013 on); aarch64 objects the base ISA.
pub fn target(triple: Option<&str>) -> Result<Target> {
    let triple: Triple = match triple {
        Some(t) => t
            .parse()
            .map_err(|e| Error::Input(format!("target `{t}`: {e}")))?,
        None => Triple::host(),
    };
    let arch_ok = matches!(
        triple.architecture,
        Architecture::X86_64 | Architecture::Aarch64(_)
    );
    if !arch_ok || triple.binary_format != BinaryFormat::Elf {
        return Err(Error::Unsupported(format!(
            "target `{triple}`: ahead-of-time objects are ELF files for x86_64 or aarch64 (Linux)"
        )));
    }
    let mut flags = settings::builder();
    for (k, v) in [
        ("opt_level", "speed"),
        ("is_pic", "true"),
        ("use_colocated_libcalls", "false"),
    ] {
        flags
            .set(k, v)
            .map_err(|e| Error::Unsupported(format!("cranelift setting {k}: {e}")))?;
    }
    let mut isa = cranelift_codegen::isa::lookup(triple.clone())
        .map_err(|e| Error::Unsupported(format!("target `{triple}`: {e}")))?;
    let cpu = if triple.architecture == Architecture::X86_64 {
        isa.enable("haswell")
            .map_err(|e| Error::Unsupported(format!("cranelift preset haswell: {e}")))?;
        "x86-64 with AVX2 and FMA (Haswell or later, x86-64-v3)"
    } else {
        "AArch64 (ARMv8-A with NEON)"
    };
    let isa = isa
        .finish(settings::Flags::new(flags))
        .map_err(|e| Error::Unsupported(format!("target `{triple}`: {e}")))?;
    Ok(Target { triple, isa, cpu })
}
