//! Which vector instructions the kernels use, chosen once per process at run time: the widest
//! the host has, unless `KILN_CPU_ISA` names one (`avx2` or `avx512`), so that one AVX-512
//! machine can test both paths. Every ISA sums each element of C in the same order, so the
//! choice changes speed, never bits.

use std::sync::OnceLock;

/// The environment variable that forces an ISA.
pub const ISA_VAR: &str = "KILN_CPU_ISA";

/// A set of vector instructions the kernels are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// 256-bit vectors: AVX2 and FMA (Haswell, Zen 1-3 and later).
    Avx2,
    /// 512-bit vectors: AVX-512 F (Skylake-X, Ice Lake, Zen 4 and 5).
    Avx512,
}

impl Isa {
    /// Every ISA, narrowest first.
    pub const ALL: [Isa; 2] = [Isa::Avx2, Isa::Avx512];

    /// The name `KILN_CPU_ISA` takes and dumps print.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The ISA named `name` (as [`Isa::name`] spells it).
    pub fn parse(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == name)
    }

    /// The bytes of one of its vectors (a kernel's row is two).
    pub fn vector_bytes(self) -> usize {
        match self {
            Isa::Avx2 => 32,
            Isa::Avx512 => 64,
        }
    }

    /// Whether this host runs the ISA's kernels. AVX-512 needs AVX2 and FMA too: the
    /// packing routines shared by both are AVX2.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            match self {
                Isa::Avx2 => avx2,
                Isa::Avx512 => avx2 && std::arch::is_x86_feature_detected!("avx512f"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// The widest ISA this host runs (AVX2 where it runs none: callers check
    /// [`crate::available`] first).
    pub fn widest() -> Isa {
        (Isa::ALL.into_iter().rev())
            .find(|i| i.available())
            .unwrap_or(Isa::Avx2)
    }
}

/// What `KILN_CPU_ISA` asks for: `Ok(None)` where it is unset, empty or `auto`; an error,
/// in words, where it names no ISA or one this host lacks.
pub fn requested_isa() -> Result<Option<Isa>, String> {
    let Ok(text) = std::env::var(ISA_VAR) else {
        return Ok(None);
    };
    let text = text.trim();
    if text.is_empty() || text == "auto" {
        return Ok(None);
    }
    let names = Isa::ALL.map(Isa::name).join(", ");
    match Isa::parse(text) {
        None => Err(format!(
            "{ISA_VAR}={text:?} names no ISA kiln has kernels for (auto, {names})"
        )),
        Some(isa) if !isa.available() => Err(format!(
            "{ISA_VAR}={text}: this CPU lacks {text} (it runs {})",
            Isa::widest().name()
        )),
        Some(isa) => Ok(Some(isa)),
    }
}

/// The ISA products use in this process: `KILN_CPU_ISA`'s where it names one this host runs,
/// else the widest this host runs. (kiln refuses to compile where `KILN_CPU_ISA` is wrong, so
/// the fallback only serves objects linked with its runtime library.)
pub fn isa() -> Isa {
    static CHOSEN: OnceLock<Isa> = OnceLock::new();
    *CHOSEN.get_or_init(|| requested_isa().ok().flatten().unwrap_or_else(Isa::widest))
}
