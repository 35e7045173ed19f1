//! The kernels of the ops that are `perform` steps in the plan but have code of their own on
//! the GPU (gathers, scatters, `one_hot`, running sums, sorts, convolution and pooling with
//! their gradients, `concat`): which kernel a step gets, defined under its entry name.

use super::gen::Gen;
use super::{concat, conv, gather, one_hot, pool, running, scatter, sort, KernelKind};
use crate::error::Result;
use crate::ir::{DType, Func, Op};
use crate::lower::Step;

/// A defined kernel: what it computes, its entry name, its rank and its output's dtype.
pub struct Defined {
    pub kind: KernelKind,
    pub name: String,
    pub rank: usize,
    pub out: DType,
}

/// Defines the kernel of the `perform` step `step` under a name starting with `base`, if
/// its op has one.
pub fn define_op(g: &Gen, func: &Func, step: &Step, base: &str) -> Result<Option<Defined>> {
    let arg = |i: usize| func.ty(step.args[i]);
    let result = func.ty(step.results[0]);
    let (rank, out) = (result.rank(), result.dtype);
    let named = |suffix: &str| format!("{base}_{suffix}");
    let (kind, name) = match &step.op {
        Op::Take { axis } | Op::TakeAlongAxis { axis } => {
            let along = matches!(step.op, Op::TakeAlongAxis { .. });
            let name = named("gather");
            gather::define_gather(g, &name, arg(0).dtype, arg(1).dtype, rank)?;
            (
                KernelKind::Gather(gather::Gather { axis: *axis, along }),
                name,
            )
        }
        Op::ScatterAdd { axis } | Op::ScatterSet { axis } => {
            let add = matches!(step.op, Op::ScatterAdd { .. });
            let name = named("scatter");
            let ranks = (arg(0).rank(), arg(1).rank());
            scatter::define_scatter(g, &name, arg(0).dtype, arg(1).dtype, ranks, add)?;
            (
                KernelKind::Scatter(scatter::Scatter { axis: *axis, add }),
                name,
            )
        }
        Op::OneHot { depth, dtype } => {
            let name = named("one_hot");
            one_hot::define_one_hot(g, &name, arg(0).dtype, *dtype, arg(0).rank())?;
            (KernelKind::OneHot(*depth), name)
        }
        Op::Cumsum { axis } | Op::Cumprod { axis } => {
            let sum = matches!(step.op, Op::Cumsum { .. });
            let name = named("running");
            running::define_running(g, &name, arg(0).dtype, out, rank, sum)?;
            let r = running::Running {
                axis: *axis,
                sum,
                grad: false,
            };
            (KernelKind::Running(r), name)
        }
        Op::CumprodGrad { axis } => {
            let name = named("running");
            running::define_cumprod_grad(g, &name, out, rank)?;
            let r = running::Running {
                axis: *axis,
                sum: false,
                grad: true,
            };
            (KernelKind::Running(r), name)
        }
        Op::Sort { axis, descending } | Op::Argsort { axis, descending } => {
            let s = sort::Sort {
                axis: *axis,
                descending: *descending,
                values: matches!(step.op, Op::Sort { .. }),
            };
            let name = named("sort");
            sort::define_sort(g, &name, s, arg(0).dtype, arg(0).rank())?;
            (KernelKind::Sort(s), name)
        }
        Op::Conv2d(c) => {
            let name = named("conv");
            conv::define_conv(g, &name, c, out)?;
            (KernelKind::Conv(*c), name)
        }
        Op::Conv2dGradImage {
            conv: c,
            image: dims,
        }
        | Op::Conv2dGradFilter {
            conv: c,
            kernel: dims,
        } => {
            let filter = matches!(step.op, Op::Conv2dGradFilter { .. });
            let name = named("conv_grad");
            conv::define_conv_grad(g, &name, c, out, filter)?;
            (KernelKind::ConvGrad(*c, filter, *dims), name)
        }
        Op::Pool2d(p) | Op::Pool2dGrad(p) => {
            let grad = matches!(step.op, Op::Pool2dGrad(_));
            // A window too large to unroll runs on the host (`perform`), as steps without a
            // kernel do.
            if !pool::unrolls(p, grad) {
                return Ok(None);
            }
            let name = named("pool");
            pool::define_pool(g, &name, p, out, rank, grad)?;
            (KernelKind::Pool(*p, grad), name)
        }
        Op::Concat { axis } => {
            let name = named("concat");
            concat::define_concat(g, &name, out, rank, *axis, step.args.len())?;
            (KernelKind::Concat(*axis), name)
        }
        _ => return Ok(None),
    };
    Ok(Some(Defined {
        kind,
        name,
        rank,
        out,
    }))
}
