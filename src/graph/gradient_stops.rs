//! The graph's side of `Var::stop_gradient` and `Var::zero_grad` (the ops themselves are user
//! ops, `custom::gradient_stops`): their names, and `to_ssa`'s test for them. Nothing past the
//! gradient needs them, so `to_ssa` puts the input's value in their place and no backend ever
//! runs them. Also [`Var::zeros_like`], which the second needs.

use super::Var;
use crate::ir::types::dims_of;
use crate::ir::Op;
use crate::tensor::Tensor;

/// The user-op name of [`Var::stop_gradient`], in kiln's reserved `kiln.` namespace of user
/// ops.
pub const STOP_GRADIENT: &str = "kiln.stop_gradient";
/// The user-op name of [`Var::zero_grad`], in kiln's reserved `kiln.` namespace of user ops.
pub const ZERO_GRAD: &str = "kiln.zero_grad";

/// Whether `op` is a gradient stop, which `to_ssa` replaces by its input.
pub(super) fn is_gradient_stop(op: &Op) -> bool {
    matches!(op, Op::Custom(c) if c.name() == STOP_GRADIENT || c.name() == ZERO_GRAD)
}

impl Var {
    /// Zeros of this value's dtype and shape (known or not: an unknown shape is taken from the
    /// value at the call, whose elements are never read).
    #[track_caller]
    pub fn zeros_like(&self) -> Var {
        let zero = self.graph().constant(Tensor::full(self.dtype(), &[], 0.0));
        if zero.ty().shape == self.ty().shape {
            return zero;
        }
        match self.ty().known_shape() {
            Some(shape) => zero.broadcast_to(&dims_of(&shape)),
            None => {
                let yes = self
                    .graph()
                    .constant(Tensor::full(crate::ir::DType::Bool, &[], 1.0));
                super::select(&yes, &zero, self)
            }
        }
    }
}
