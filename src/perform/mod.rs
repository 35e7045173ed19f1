//! The reference implementation of every built-in op on concrete tensors (Theano's `perform`).
//! This is the oracle that every compiled backend is tested against, so it favours being
//! obviously right (numpy semantics, CONTRACTS.md §1b) over being fast.

use crate::error::Error;
use crate::ir::Op;
use crate::tensor::Tensor;

/// Runs `op` on `inputs` and returns its outputs.
pub fn perform(op: &Op, _inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
    match op {
        Op::Const(t) => Ok(vec![t.clone()]),
        Op::Random {
            dist,
            seed,
            shape,
            dtype,
        } => {
            let counter = _inputs
                .first()
                .and_then(|t| t.as_i64())
                .and_then(|a| a.iter().next().copied());
            let seed = crate::random::perform::effective_seed(*seed, counter);
            Ok(vec![crate::random::perform::sample(
                *dist, seed, shape, *dtype,
            )])
        }
        _ => Err(Error::Unsupported(format!(
            "perform: {} is not implemented yet",
            op.name()
        ))),
    }
}
