//! The ops whose reference implementation reads views (`TensorRef`) rather than owned
//! tensors: indexing, sorting, cumulative and windowed ops. The VM's host device runs them on
//! a call's inputs where they are, so an embedding table or an image batch is read, never
//! copied first.

use super::{index, pool, sort, window};
use crate::error::Error;
use crate::ir::{Op, ReduceOp};
use crate::tensor::{Tensor, TensorRef};

/// Whether `op` has an implementation on views ([`perform_view`]).
pub fn has_view_form(op: &Op) -> bool {
    perform_arity(op).is_some()
}

/// The ops whose reference reads views (indexing, sorting, cumulative and windowed ops) on
/// views, or `None` for any other op.
pub fn perform_view(op: &Op, args: &[TensorRef<'_>]) -> Option<Result<Vec<Tensor>, Error>> {
    let arity = perform_arity(op)?;
    if args.len() != arity {
        return Some(Err(Error::Runtime(format!(
            "{} takes {arity} inputs, got {}",
            op.name(),
            args.len()
        ))));
    }
    let out = match op {
        Op::Take { axis } => index::take(&args[0], &args[1], *axis),
        Op::ScatterAdd { .. } | Op::ScatterSet { .. } => index::scatter_copy(op, args),
        Op::OneHot { depth, dtype } => index::one_hot(&args[0], *depth, *dtype),
        Op::Cumsum { axis } => index::cumulative(&args[0], *axis, ReduceOp::Sum),
        Op::TakeAlongAxis { axis } => index::take_along_axis(&args[0], &args[1], *axis),
        Op::Cumprod { axis } => index::cumulative(&args[0], *axis, ReduceOp::Prod),
        Op::CumprodGrad { axis } => index::cumprod_grad(&args[0], &args[1], *axis),
        Op::Sort { axis, descending } => sort::sort(&args[0], *axis, *descending),
        Op::Argsort { axis, descending } => sort::argsort(&args[0], *axis, *descending),
        Op::Conv2d(c) => window::conv2d(&args[0], &args[1], c),
        Op::Conv2dGradImage { conv, image } => {
            window::conv2d_grad_image(&args[0], &args[1], conv, *image)
        }
        Op::Conv2dGradFilter { conv, kernel } => {
            window::conv2d_grad_filter(&args[0], &args[1], conv, *kernel)
        }
        Op::Pool2d(p) => pool::pool2d(&args[0], p),
        Op::Pool2dGrad(p) => pool::pool2d_grad(&args[0], &args[1], p),
        _ => return None,
    };
    Some(out.map(|t| vec![t]))
}

/// The number of inputs of an op that [`perform_view`] runs, or `None` for the others.
fn perform_arity(op: &Op) -> Option<usize> {
    match op {
        Op::OneHot { .. } | Op::Cumsum { .. } | Op::Cumprod { .. } => Some(1),
        Op::Sort { .. } | Op::Argsort { .. } | Op::Pool2d(_) => Some(1),
        Op::Take { .. } | Op::TakeAlongAxis { .. } | Op::CumprodGrad { .. } => Some(2),
        Op::Conv2d(_) | Op::Conv2dGradImage { .. } | Op::Conv2dGradFilter { .. } => Some(2),
        Op::Pool2dGrad(_) => Some(2),
        Op::ScatterAdd { .. } | Op::ScatterSet { .. } => Some(3),
        _ => None,
    }
}
