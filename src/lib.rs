//! kiln: a tensor-graph compiler in the line of Theano.
//!
//! Build a graph of tensor variables, take gradients, compile a function of chosen inputs and
//! outputs (with in-place updates of shared state) and call it on `ndarray` data. See README.md
//! for a tour and `../shared/DESIGN.md` for the architecture.

pub mod error;
pub mod ir;
pub mod perform;
pub mod runtime;
pub mod tensor;

pub use error::{Error, Result, SourceLoc};
pub use ir::{DType, TensorType};
pub use tensor::{Tensor, TensorRef};
