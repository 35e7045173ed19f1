//! The reference implementation of every built-in op on concrete tensors (Theano's `perform`).
//! This is the oracle that every compiled backend is tested against, so it favours being
//! obviously right (numpy semantics, docs/reference/semantics.md) over being fast. It never panics on
//! any input: shapes that do not fit at run time are an `Err`.

mod composite;
mod elementwise;
mod index;
mod linalg;
mod pool;
pub(crate) mod reduce;
pub(crate) mod shape;
mod sort;
mod views;
mod window;

pub use elementwise::{cast, float_divmod, sigmoid, IntArith};
pub use index::scatter_into;
pub use linalg::{matmul_into, matmul_update};
pub use reduce::pairwise_sum;
pub use shape::{resolve_reshape, view_moving};
pub use views::{has_view_form, perform_view};

use crate::error::Error;
use crate::ir::custom::{PerformContext, WriteRequest};
use crate::ir::infer::arange_len;
use crate::ir::{DType, Op, TensorType};
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};

/// Runs `op` on `inputs` and returns its outputs.
pub fn perform(op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
    // The same check as make_node, on the concrete inputs: perform runs only what type-checks,
    // so it never computes something for inputs its op does not take.
    let n_outputs = if matches!(op, Op::IfElse | Op::Scan { .. }) {
        0
    } else {
        let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
        crate::ir::infer(op, &tys.iter().collect::<Vec<_>>())
            .map_err(|e| Error::Runtime(format!("{}: {e}", op.display_name())))?
            .len()
    };
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        Op::Unary(u) => one(elementwise::unary(*u, inputs[0])?),
        Op::Binary(b) => one(elementwise::binary(*b, inputs[0], inputs[1])?),
        Op::Select => one(elementwise::select(inputs[0], inputs[1], inputs[2])?),
        Op::Cast { to } => one(elementwise::cast(inputs[0], *to)),
        Op::Reduce {
            op: r,
            axes,
            keepdims,
        } => one(reduce::reduce(inputs[0], *r, axes, *keepdims)?),
        Op::Transpose { perm } => one(shape::transpose(inputs[0], perm)?),
        Op::Reshape { shape: s } => one(shape::reshape(inputs[0], s)?),
        Op::BroadcastTo { shape: s } => one(shape::broadcast_to(inputs[0], s)?),
        Op::ExpandDims { axes } => one(shape::expand_dims(inputs[0], axes)?),
        Op::Squeeze { axes } => one(shape::squeeze(inputs[0], axes)?),
        Op::Concat { axis } => one(shape::concat(inputs, *axis)?),
        Op::Take { .. }
        | Op::ScatterAdd { .. }
        | Op::OneHot { .. }
        | Op::Cumsum { .. }
        | Op::TakeAlongAxis { .. }
        | Op::ScatterSet { .. }
        | Op::Cumprod { .. }
        | Op::CumprodGrad { .. }
        | Op::Sort { .. }
        | Op::Argsort { .. }
        | Op::Conv2d(_)
        | Op::Conv2dGradImage { .. }
        | Op::Conv2dGradFilter { .. }
        | Op::Pool2d(_)
        | Op::Pool2dGrad(_) => {
            let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
            views::perform_view(op, &views)
                .unwrap_or_else(|| Err(Error::Runtime(format!("{}: not an index op", op.name()))))
        }
        Op::Slice {
            starts,
            stops,
            steps,
        } => one(shape::slice(inputs[0], starts, stops, steps)?),
        Op::MatMul => one(linalg::matmul(inputs[0], inputs[1])?),
        Op::Const(t) => one(t.clone()),
        Op::Zeros { shape: s, dtype } => one(Tensor::full(*dtype, s, 0.0)),
        Op::Ones { shape: s, dtype } => one(Tensor::full(*dtype, s, 1.0)),
        Op::Full {
            shape: s,
            dtype,
            value,
        } => one(Tensor::full(*dtype, s, value.0)),
        Op::Arange {
            start,
            stop,
            step,
            dtype,
        } => one(arange(start.0, stop.0, step.0, *dtype)?),
        Op::Random {
            dist,
            seed,
            shape: s,
            dtype,
        } => {
            let counter = inputs
                .first()
                .and_then(|t| t.as_i64())
                .and_then(|a| a.iter().next().copied());
            let seed = crate::random::perform::effective_seed(*seed, counter);
            one(crate::random::perform::sample(*dist, seed, s, *dtype))
        }
        Op::Composite { program, .. } => composite::composite(program, inputs),
        Op::FusedReduce {
            op: r,
            axes,
            keepdims,
            program,
        } => {
            let x = composite::composite(program, inputs)?.remove(0);
            one(reduce::reduce(&x, *r, axes, *keepdims)?)
        }
        Op::IfElse | Op::Scan { .. } => Err(Error::Runtime(format!(
            "{} runs its regions in the VM, not in perform",
            op.name()
        ))),
        Op::Custom(c) => {
            // Without a runtime keeping storage between calls: fresh storage, write-to, and the
            // resources the op asks for.
            let n = n_outputs;
            let mut outs = vec![None; n];
            let requests = vec![WriteRequest::WriteTo; n];
            let mut temp = Vec::new();
            for r in c.resources() {
                if let crate::ir::custom::Resource::TempSpace(bytes) = r {
                    temp = vec![0u8; bytes];
                }
            }
            let mut ctx = PerformContext {
                requests: &requests,
                temp: &mut temp,
                seed: 0,
            };
            c.perform(inputs, &mut outs, &mut ctx)
                .map_err(|e| Error::Runtime(format!("{}: {e}", c.name())))?;
            outs.into_iter()
                .map(|o| {
                    o.ok_or_else(|| {
                        Error::Runtime(format!("{}: perform left an output empty", c.name()))
                    })
                })
                .collect()
        }
    }
}

/// numpy's `arange`: the first two values are computed in f64 and converted, then the rest are
/// filled as `first + i * (second - first)` in the output dtype (so an f32 arange is computed
/// in f32, as numpy's is).
fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Tensor, Error> {
    let n = arange_len(start, stop, step).map_err(Error::Runtime)?;
    let sh = IxDyn(&[n]);
    let bad = |e: ndarray::ShapeError| Error::Runtime(e.to_string());
    Ok(match dtype {
        DType::F32 => {
            let (a, b) = (start as f32, (start + step) as f32);
            Tensor::F32(
                ArrayD::from_shape_vec(sh, (0..n).map(|i| a + i as f32 * (b - a)).collect())
                    .map_err(bad)?,
            )
        }
        DType::F64 => {
            let (a, b) = (start, start + step);
            Tensor::F64(
                ArrayD::from_shape_vec(sh, (0..n).map(|i| a + i as f64 * (b - a)).collect())
                    .map_err(bad)?,
            )
        }
        // The type rule refuses a half arange (the graph API makes it in f32 and casts); made
        // the same way here.
        DType::F16 | DType::BF16 => {
            elementwise::cast(&arange(start, stop, step, DType::F32)?, dtype)
        }
        // Integers the numpy way too: arange(0.5, 5, 1.5) as integers is [0, 2, 4].
        _ => {
            let (a, b) = (start as i64, (start + step) as i64);
            let vals: Vec<i64> = (0..n)
                .map(|i| a.wrapping_add((i as i64).wrapping_mul(b.wrapping_sub(a))))
                .collect();
            elementwise::cast(
                &Tensor::I64(ArrayD::from_shape_vec(sh, vals).map_err(bad)?),
                dtype,
            )
        }
    })
}
