//! Running compiled functions: the reference interpreter and the `Function` users call.

pub mod function;
pub mod interp;

use crate::error::Result;
use crate::tensor::{Tensor, TensorRef};

/// What a backend produces: something that runs a whole compiled function. Inputs are the
/// function's parameters (explicit inputs, then shared variables), already checked against
/// their types; outputs are the function's outputs followed by the updates' new values.
pub trait Executable: Send + Sync {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>>;
}
