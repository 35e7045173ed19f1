//! kiln: a tensor-graph compiler in the line of Theano.
//!
//! Build a graph of tensor variables, take gradients, compile a function of chosen inputs and
//! outputs (with in-place updates of shared state) and call it on `ndarray` data:
//!
//! ```
//! use ndarray::array;
//! let g = kiln::Graph::new();
//! let x = g.input("x", kiln::f32, [None]);
//! let y = (x.exp() * 2.0).sum(None, false);
//! let f = kiln::function(&[&x], &[&y]).compile().unwrap();
//! let out = f.call(&[array![0.0f32, 0.0].into_dyn().view()]).unwrap();
//! assert_eq!(out[0].to_f64_vec(), vec![4.0]);
//! ```
//!
//! See README.md for a tour, docs/architecture.md for the architecture and docs/reference/ for
//! the text form, the semantics, the CLI and the environment flags.

// Every public item is documented (`cargo doc`); clippy's -D warnings makes a new one without
// docs an error in CI.
#![warn(missing_docs)]

pub mod aot;
pub mod cli;
pub mod codegen;
pub mod compile;
pub mod custom;
pub mod dump;
pub mod error;
#[cfg(target_arch = "x86_64")]
pub mod gemm;
pub mod grad;
pub mod gradcheck;
pub mod graph;
pub mod ir;
pub mod jit_cpu;
#[cfg(feature = "gpu")]
pub mod jit_ptx;
pub mod lower;
pub mod math;
pub mod nn;
pub mod npy;
pub mod perform;
pub mod random;
pub mod rewrite;
pub mod runtime;
pub mod shared;
pub mod tensor;

pub use compile::{compile_func, function, Backend, CompileOptions, FunctionBuilder};
pub use error::{Error, Result, SourceLoc};
pub use grad::grad;
pub use gradcheck::{verify_grad, VerifyOptions};
pub use graph::{
    concat, debugprint, elementwise, ifelse, scan, scan_reverse, scan_steps, scatter_add,
    scatter_set, select, Apply, Graph, Operand, Scalar, Var,
};
pub use ir::window::{Conv2d, PoolKind};
pub use ir::{DType, TensorType};
pub use runtime::function::Function;
pub use runtime::threads::threads;
pub use tensor::{Tensor, TensorRef};

/// The dtypes, spelled as in the text form: `kiln::f32`. This one is the dtype of booleans.
#[allow(non_upper_case_globals)]
pub const bool: DType = DType::Bool;
/// The dtype of 32-bit integers.
#[allow(non_upper_case_globals)]
pub const i32: DType = DType::I32;
/// The dtype of 64-bit integers.
#[allow(non_upper_case_globals)]
pub const i64: DType = DType::I64;
/// The dtype of 32-bit floats.
#[allow(non_upper_case_globals)]
pub const f32: DType = DType::F32;
/// The dtype of 64-bit floats.
#[allow(non_upper_case_globals)]
pub const f64: DType = DType::F64;
/// Storage-only halves: stored in 16 bits, computed in f32 (README "Half precision").
#[allow(non_upper_case_globals)]
pub const f16: DType = DType::F16;
/// The dtype of bfloat16 halves (storage-only, like `f16`).
#[allow(non_upper_case_globals)]
pub const bf16: DType = DType::BF16;

/// The `half` crate, whose `f16` and `bf16` are the elements of half tensors
/// (`Tensor::F16(ArrayD<kiln::half::f16>)`).
pub use half;
