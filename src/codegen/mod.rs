//! Code generators: from the plan's kernels to machine code. Each is a sibling that reads the
//! plan (`crate::lower`), the scalar programs (`crate::ir::scalar`), the reduction semantics
//! (`crate::ir::reduce`) and the math expansions (`crate::math`); none imports a backend, so
//! the JIT (`crate::jit_cpu`) and ahead-of-time objects (`crate::aot`) share one Cranelift
//! generator and their kernels' bits.

pub mod clif;
