//! Running compiled functions: the reference interpreter and the `Function` users call.

pub mod function;
pub mod interp;
pub mod requests;

use crate::error::Result;
use crate::tensor::{Tensor, TensorRef};

/// The compiled form of one instruction that a backend hands the interpreter (Theano's thunk):
/// it computes the instruction's results from its arguments. Instructions without a thunk run
/// their op's `perform`. Arguments are views: a function's inputs reach a thunk without a copy.
pub trait Thunk: Send + Sync {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>>;

    /// `run`, writing result 0 into `dest` when its dtype and shape fit (a caller's output
    /// buffer), instead of into a new array. The default ignores `dest`.
    fn run_into(&self, inputs: &[TensorRef<'_>], dest: Option<Tensor>) -> Result<Vec<Tensor>> {
        let _ = dest;
        self.run(inputs)
    }
}

/// What a backend produces: something that runs a whole compiled function. Inputs are the
/// function's parameters (explicit inputs, then shared variables), already checked against
/// their types; outputs are the function's outputs followed by the updates' new values.
pub trait Executable: Send + Sync {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>>;

    /// `run`, writing output `i` into `dests[i]` where it fits (`Function::call_into`'s
    /// buffers), so a steady state of calls allocates no outputs. The default ignores `dests`.
    fn run_into(
        &self,
        inputs: &[TensorRef<'_>],
        dests: Vec<Option<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let _ = dests;
        self.run(inputs)
    }
}
