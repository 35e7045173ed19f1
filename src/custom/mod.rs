//! User-defined ops: the open op model of Theano ("how to make an op"), libnd4j's custom ops
//! and MXNet's unified operator API. A user implements [`CustomOp`] and applies it with
//! [`Graph::apply_custom`](crate::Graph::apply_custom); the op then takes part in everything
//! built-in ops do: type checking (`make_node`), interpretation (`perform`), gradients,
//! shape inference, in-place planning (`destroy_map`/`view_map`) and merging of duplicates
//! (equality and hashing through [`CustomOp::params`]).
//!
//! This is the graph's half. The IR holds ops as [`CustomOpRef`]s over
//! [`CustomKernel`], the same trait without the gradient
//! (which builds graph variables, a layer above the IR); every `CustomOp` is a `CustomKernel`
//! through the forwarding impl below, so users implement one trait.

mod gradient_stops;

pub use crate::ir::custom::{
    lookup_custom_op, register_custom_op, Arity, CustomOpFactory, CustomOpRef, OpParams,
    PerformContext, Resource, WriteRequest,
};

use crate::error::Error;
use crate::graph::Var;
use crate::ir::custom::CustomKernel;
use crate::ir::TensorType;
use crate::tensor::Tensor;
use std::fmt;
use std::sync::Arc;

/// The gradient of one input.
#[derive(Clone, Debug)]
pub enum InputGrad {
    /// The gradient of the cost with respect to the input, of the input's type.
    Grad(Var),
    /// The input has no gradient through this op; asking for one is an error naming the op.
    NotDifferentiable,
    /// The output does not depend on this input (zero gradient).
    Disconnected,
}

/// A user-defined op. Only `name`, `make_node` and `perform` are required.
pub trait CustomOp: Send + Sync + fmt::Debug + 'static {
    /// The op's name (also its name in the text form: `custom "NAME"`).
    fn name(&self) -> &str;

    /// Parameters defining equality, hashing and the text-form attributes.
    fn params(&self) -> OpParams {
        OpParams::new()
    }

    /// How many inputs the op takes.
    fn num_inputs(&self) -> Arity {
        Arity::Any
    }

    /// The type check: given input types, output types (hidden outputs last) or a clear error.
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String>;

    /// Computes the outputs. `outputs[i]` holds what that output held after the previous call
    /// (or `None` the first time): the op may reuse it or replace it, and must leave `Some`.
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String>;

    /// Symbolic gradient: one entry per input, given the gradient of each visible output
    /// (`None` where the cost does not depend on that output).
    fn grad(
        &self,
        inputs: &[Var],
        _outputs: &[Var],
        _output_grads: &[Option<Var>],
    ) -> Result<Vec<InputGrad>, Error> {
        Ok(inputs
            .iter()
            .map(|_| InputGrad::NotDifferentiable)
            .collect())
    }

    /// Output shapes from input shapes (Theano's shape function); by default `make_node` on
    /// fully known types. It resolves the `?` dims `make_node` leaves where the input shapes
    /// are known (the output types get these shapes), sizes the outputs `perform` finds (made
    /// on the first call, remade when their shape changes), and sizes results for the check
    /// that they fit in memory. An `Err` means "not known before `perform`"; shapes that
    /// contradict `make_node` are an error.
    fn infer_shape(&self, input_types: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        self.make_node(input_types)?
            .into_iter()
            .map(|t| {
                t.known_shape().ok_or_else(|| {
                    format!(
                        "{}: output shape is not determined by input shapes",
                        self.name()
                    )
                })
            })
            .collect()
    }

    /// `(output, input)` pairs: the output overwrites that input's buffer.
    fn destroy_map(&self) -> Vec<(usize, usize)> {
        vec![]
    }

    /// `(output, input)` pairs: the output aliases that input.
    fn view_map(&self) -> Vec<(usize, usize)> {
        vec![]
    }

    /// How many trailing outputs are hidden: kept by the op (a growing buffer, a cached plan)
    /// and not shown to callers.
    fn num_hidden_outputs(&self) -> usize {
        0
    }

    /// Theano's `default_output`: the visible output that `Graph::apply_custom_default` returns,
    /// for ops with one main result and auxiliary ones.
    fn default_output(&self) -> usize {
        0
    }

    /// Whether the op may run in place when its input is free (libnd4j's in-place flag): the
    /// runtime then hands the input's buffer as output 0 storage with `WriteInplace`.
    fn inplace(&self) -> bool {
        false
    }

    /// Whether the op can add its output to what the output storage holds
    /// (`WriteRequest::AddTo`). The runtime then accumulates `t + op(..)` (or `op(..) + t`) in
    /// `t`'s buffer when `t` is a temporary that dies there, and skips the `add`; the optimizer
    /// keeps such an add out of fusion and runs the op right before it (`add_to_operand`).
    fn supports_add_to(&self) -> bool {
        false
    }

    /// Resources the op needs.
    fn resources(&self) -> Vec<Resource> {
        vec![]
    }
}

/// Every user op is a kernel for the IR: the methods forward (the gradient stays here).
impl<T: CustomOp> CustomKernel for T {
    fn name(&self) -> &str {
        CustomOp::name(self)
    }
    fn params(&self) -> OpParams {
        CustomOp::params(self)
    }
    fn num_inputs(&self) -> Arity {
        CustomOp::num_inputs(self)
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        CustomOp::make_node(self, inputs)
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        CustomOp::perform(self, inputs, outputs, ctx)
    }
    fn infer_shape(&self, input_types: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        CustomOp::infer_shape(self, input_types)
    }
    fn destroy_map(&self) -> Vec<(usize, usize)> {
        CustomOp::destroy_map(self)
    }
    fn view_map(&self) -> Vec<(usize, usize)> {
        CustomOp::view_map(self)
    }
    fn num_hidden_outputs(&self) -> usize {
        CustomOp::num_hidden_outputs(self)
    }
    fn default_output(&self) -> usize {
        CustomOp::default_output(self)
    }
    fn inplace(&self) -> bool {
        CustomOp::inplace(self)
    }
    fn supports_add_to(&self) -> bool {
        CustomOp::supports_add_to(self)
    }
    fn resources(&self) -> Vec<Resource> {
        CustomOp::resources(self)
    }
}

/// The user's op behind `r`, when `r` was made from a [`CustomOp`] (as every handle that the
/// public API makes is).
pub fn user_op(r: &CustomOpRef) -> Option<&dyn CustomOp> {
    r.user().downcast_ref::<Arc<dyn CustomOp>>().map(|op| &**op)
}

/// The handle of a user's op.
pub fn custom_op_ref<T: CustomOp>(op: T) -> CustomOpRef {
    let op = Arc::new(op);
    let user: Arc<dyn CustomOp> = op.clone();
    CustomOpRef::from_parts(op, Arc::new(user))
}

impl CustomOpRef {
    /// The handle of the user's op `op` (as [`custom_op_ref`] makes it).
    pub fn new(op: impl CustomOp) -> CustomOpRef {
        custom_op_ref(op)
    }
}

impl<T: CustomOp> From<T> for CustomOpRef {
    fn from(op: T) -> CustomOpRef {
        custom_op_ref(op)
    }
}
