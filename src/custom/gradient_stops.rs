//! `Var::stop_gradient` and `Var::zero_grad` (Theano's `disconnected_grad` and `zero_grad`,
//! JAX's `stop_gradient`): the value passes unchanged, only `kiln::grad` sees a difference.
//!
//! Each is an op of its own in the graph, so that the gradient finds it: a user op (the open op
//! model's `grad`) named in kiln's reserved `kiln.` namespace. `to_ssa` replaces it by its
//! input (`graph::gradient_stops`), so compiled functions compute nothing for it.

use super::{Arity, CustomOp, InputGrad, PerformContext};
use crate::error::Error;
use crate::graph::{Var, STOP_GRADIENT, ZERO_GRAD};
use crate::ir::TensorType;
use crate::tensor::Tensor;

/// The identity, with a gradient that stops (`disconnected`) or is zero.
#[derive(Debug)]
struct GradientStop {
    disconnected: bool,
}

impl CustomOp for GradientStop {
    fn name(&self) -> &str {
        if self.disconnected {
            STOP_GRADIENT
        } else {
            ZERO_GRAD
        }
    }

    fn num_inputs(&self) -> Arity {
        Arity::Exactly(1)
    }

    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }

    fn infer_shape(&self, input_types: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        (input_types[0].known_shape().map(|s| vec![s])).ok_or_else(|| {
            format!(
                "{}: the input's shape is known only at the call",
                self.name()
            )
        })
    }

    /// Only where the optimizer and `to_ssa` are bypassed (a plan parsed by hand).
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        outputs[0] = Some(inputs[0].clone());
        Ok(())
    }

    fn grad(
        &self,
        inputs: &[Var],
        _outputs: &[Var],
        _output_grads: &[Option<Var>],
    ) -> Result<Vec<InputGrad>, Error> {
        Ok(vec![match self.disconnected {
            true => InputGrad::Disconnected,
            false => InputGrad::Grad(inputs[0].zeros_like()),
        }])
    }
}

impl Var {
    /// The same value, through which `kiln::grad` does not go (Theano's `disconnected_grad`,
    /// JAX's `stop_gradient`): whatever depends on the cost only through it gets no gradient
    /// from it, and a `wrt` the cost reaches only through it is disconnected (an error, or
    /// zeros with `Disconnected::Zero`). Compiled functions compute nothing for it.
    ///
    /// ```
    /// let g = kiln::Graph::new();
    /// let x = g.input("x", kiln::f64, [Some(3)]);
    /// // d/dx of x * stop(x) is stop(x) = x, not 2x.
    /// let cost = (&x * &x.stop_gradient()).sum(None, false);
    /// let dx = kiln::grad(&cost, &[&x]).unwrap();
    /// let f = kiln::function(&[&x], &[&dx[0]]).compile().unwrap();
    /// let v = ndarray::arr1(&[1.0f64, 2.0, 3.0]).into_dyn();
    /// let out = f.call(&[v.view()]).unwrap();
    /// assert_eq!(out[0], kiln::Tensor::F64(v));
    /// ```
    #[track_caller]
    pub fn stop_gradient(&self) -> Var {
        self.gradient_stop(true)
    }

    /// The same value, whose gradient is zero (Theano's `zero_grad`): unlike
    /// [`Var::stop_gradient`], a `wrt` the cost reaches only through it is connected, with a
    /// zero gradient.
    #[track_caller]
    pub fn zero_grad(&self) -> Var {
        self.gradient_stop(false)
    }

    #[track_caller]
    fn gradient_stop(&self, disconnected: bool) -> Var {
        (self.graph())
            .apply_custom(GradientStop { disconnected }, &[self])
            .swap_remove(0)
    }
}
