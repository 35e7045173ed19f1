//! One gradient rule per op: given the op's inputs, outputs and output gradients, the gradient
//! of each input, built from ordinary ops.

use super::Error;
use crate::custom::InputGrad;
use crate::error::Result;
use crate::graph::{scatter_add, select, Apply, Graph, Var};
use crate::ir::types::dims_of;
use crate::ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};
use crate::tensor::Tensor;

/// The gradient of one input.
pub enum InGrad {
    Grad(Var),
    /// The input does not influence the output differentiably (piecewise constant).
    Zero,
    NotDifferentiable(String),
}

fn scalar(like: &Var, v: f64) -> Var {
    like.graph().constant(Tensor::full(like.dtype(), &[], v))
}

/// `v` broadcast to the shape of `like` (same dtype). A static shape uses `broadcast_to`; an
/// unknown one broadcasts through `select(true, v, like)`, which takes `like`'s shape at run
/// time and never reads its values.
pub fn broadcast_like(v: &Var, like: &Var) -> Var {
    if v.ty().shape == like.ty().shape {
        return v.clone();
    }
    match like.ty().known_shape() {
        Some(shape) => v.broadcast_to(&dims_of(&shape)),
        None => {
            let yes = like.graph().constant(Tensor::full(DType::Bool, &[], 1.0));
            select(&yes, v, like)
        }
    }
}

/// The permutation of `rank` axes that swaps the last two.
pub fn swap_last_two(rank: usize) -> Vec<i64> {
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 2, rank - 1);
    perm
}

/// Zeros of the type of `like`.
pub fn zeros_like(like: &Var) -> Var {
    like.zeros_like()
}

/// Sums `g` (the gradient of a broadcast result) back to the shape of the operand `x`.
pub fn unbroadcast(g: &Var, x: &Var) -> Var {
    let (gt, xt) = (g.ty(), x.ty());
    if gt.shape == xt.shape {
        return g.clone();
    }
    let extra = gt.rank().saturating_sub(xt.rank());
    let mut out = g.clone();
    if extra > 0 {
        let axes: Vec<i64> = (0..extra as i64).collect();
        out = out.sum(Some(&axes), false);
    }
    let ot = out.ty();
    let stretched: Vec<i64> = (0..xt.rank())
        .filter(|&i| xt.shape[i] == Some(1) && ot.shape[i] != Some(1))
        .map(|i| i as i64)
        .collect();
    if !stretched.is_empty() {
        out = out.sum(Some(&stretched), true);
    }
    out
}

fn g1(v: Var) -> Vec<InGrad> {
    vec![InGrad::Grad(v)]
}

pub fn input_grads(
    g: &Graph,
    a: &Apply,
    x: &[Var],
    y: &[Var],
    gy: &[Option<Var>],
) -> Result<Vec<InGrad>> {
    let op = a.op();
    if let Op::Custom(c) = &op {
        let visible = y.len() - c.num_hidden_outputs();
        let user = crate::custom::user_op(c).ok_or_else(|| {
            Error::Grad(format!(
                "{}: the op has no gradient (not a CustomOp)",
                c.name()
            ))
        })?;
        let grads = user.grad(x, &y[..visible], &gy[..visible])?;
        if grads.len() != x.len() {
            return Err(Error::Grad(format!(
                "{}: grad gave {} gradients for {} inputs",
                c.name(),
                grads.len(),
                x.len()
            )));
        }
        return Ok(grads
            .into_iter()
            .map(|ig| match ig {
                InputGrad::Grad(v) => InGrad::Grad(v),
                InputGrad::Disconnected => InGrad::Zero,
                InputGrad::NotDifferentiable => {
                    InGrad::NotDifferentiable("the op says it is not differentiable".into())
                }
            })
            .collect());
    }
    if op == Op::IfElse {
        return super::control::ifelse_grads(a, x, y, gy);
    }
    if let Op::Scan { carries, reverse } = op {
        return super::scan::scan_grads(a, carries, reverse, x, y, gy);
    }
    if let Op::Composite { program, .. } = &op {
        return composite_grads(program, None, x, y, gy);
    }
    if let Op::FusedReduce {
        op: r,
        axes,
        keepdims,
        program,
    } = &op
    {
        return composite_grads(program, Some((*r, axes.clone(), *keepdims)), x, y, gy);
    }
    let Some(gy) = gy[0].clone() else {
        return Ok(x.iter().map(|_| InGrad::Zero).collect());
    };
    let y = &y[0];
    Ok(match op {
        Op::Unary(u) => g1(unary(u, &x[0], y, &gy)?),
        Op::Binary(b) => binary(b, &x[0], &x[1], y, &gy),
        Op::Select => {
            let zero = scalar(&gy, 0.0);
            vec![
                InGrad::Zero,
                InGrad::Grad(unbroadcast(&select(&x[0], &gy, &zero), &x[1])),
                InGrad::Grad(unbroadcast(&select(&x[0], &zero, &gy), &x[2])),
            ]
        }
        Op::Cast { .. } if x[0].dtype().is_float() => g1(gy.cast(x[0].dtype())),
        Op::Cast { .. } => vec![InGrad::Zero],
        Op::Reduce {
            op: r,
            axes,
            keepdims,
        } => vec![reduce(r, axes.as_deref(), keepdims, &x[0], y, &gy)?],
        Op::Transpose { perm } => {
            let mut inv = vec![0i64; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i as i64;
            }
            g1(gy.transpose(&inv))
        }
        Op::Reshape { .. } => g1(reshape_to(&gy, &x[0])?),
        Op::BroadcastTo { .. } => g1(unbroadcast(&gy, &x[0])),
        Op::ExpandDims { axes } => {
            g1(gy.squeeze(Some(&axes.iter().map(|&a| a as i64).collect::<Vec<_>>())))
        }
        Op::Squeeze { axes } => {
            g1(gy.expand_dims(&axes.iter().map(|&a| a as i64).collect::<Vec<_>>()))
        }
        Op::Concat { axis } => concat_grads(&gy, x, axis)?,
        // `take` and `scatter_add` are each other's gradients; indices have none.
        Op::Take { axis } => vec![
            InGrad::Grad(scatter_add(&zeros_like(&x[0]), &x[1], &gy, axis as i64)),
            InGrad::Zero,
        ],
        Op::ScatterAdd { axis } => vec![
            InGrad::Grad(gy.clone()),
            InGrad::Zero,
            InGrad::Grad(gy.take(&x[1], axis as i64)),
        ],
        Op::OneHot { .. } => vec![InGrad::Zero],
        // Each input element adds into every later output: the gradient sums the output
        // gradient from the end (cumsum of the reversed gradient, reversed back).
        Op::Cumsum { .. } if !x[0].dtype().is_float() => vec![InGrad::Zero],
        Op::Cumsum { axis } => {
            let mut ranges = vec![(None, None, 1); axis + 1];
            ranges[axis] = (None, None, -1);
            g1(gy.slice(&ranges).cumsum(axis as i64).slice(&ranges))
        }
        Op::TakeAlongAxis { axis } => vec![
            InGrad::Grad(super::rules_index::take_along_axis(
                &x[0], &x[1], &gy, axis,
            )?),
            InGrad::Zero,
        ],
        Op::ScatterSet { axis } => super::rules_index::scatter_set(&x[0], &x[1], &x[2], &gy, axis)?,
        Op::Cumprod { .. } if !x[0].dtype().is_float() => vec![InGrad::Zero],
        Op::Cumprod { axis } => g1(g
            .apply(Op::CumprodGrad { axis }, &[&x[0], &gy])
            .swap_remove(0)),
        Op::Sort { .. } if !x[0].dtype().is_float() => vec![InGrad::Zero],
        Op::Sort { axis, descending } => g1(super::rules_index::sort(&x[0], &gy, axis, descending)),
        Op::Argsort { .. } => vec![InGrad::Zero],
        Op::Conv2d(conv) => super::rules_conv::conv2d(g, &x[0], &x[1], &gy, conv)?,
        Op::Conv2dGradImage { conv, .. } => vec![
            InGrad::Grad(g.apply(Op::Conv2d(conv), &[&gy, &x[1]]).swap_remove(0)),
            InGrad::Grad(super::rules_conv::conv_filter_grad(
                g, &gy, &x[0], conv, &x[1],
            )?),
        ],
        Op::Conv2dGradFilter { conv, .. } => vec![
            InGrad::Grad(super::rules_conv::conv_image_grad(
                g, &x[1], &gy, conv, &x[0],
            )?),
            InGrad::Grad(g.apply(Op::Conv2d(conv), &[&x[0], &gy]).swap_remove(0)),
        ],
        Op::Pool2d(_) if !x[0].dtype().is_float() => vec![InGrad::Zero],
        Op::Pool2d(pool) => g1(g.apply(Op::Pool2dGrad(pool), &[&x[0], &gy]).swap_remove(0)),
        // Average pooling's gradient is linear in the output's gradient: its own is pooling.
        Op::Pool2dGrad(pool) if pool.kind == crate::ir::window::PoolKind::Avg => vec![
            InGrad::Zero,
            InGrad::Grad(g.apply(Op::Pool2d(pool), &[&gy]).swap_remove(0)),
        ],
        Op::Pool2dGrad(_) | Op::CumprodGrad { .. } => x
            .iter()
            .map(|_| {
                InGrad::NotDifferentiable(format!(
                    "{} has no gradient of its own (a second derivative)",
                    op.name()
                ))
            })
            .collect(),
        Op::Slice {
            starts,
            stops,
            steps,
        } => g1(slice_grad(g, &gy, &x[0], &starts, &stops, &steps)?),
        Op::MatMul => matmul(&x[0], &x[1], &gy),
        Op::Const(_) | Op::Zeros { .. } | Op::Ones { .. } | Op::Full { .. } | Op::Arange { .. } => {
            vec![]
        }
        Op::Random { .. } => x.iter().map(|_| InGrad::Zero).collect(),
        Op::IfElse | Op::Scan { .. } | Op::Composite { .. } | Op::FusedReduce { .. } => {
            unreachable!("handled above")
        }
        Op::Custom(_) => unreachable!("handled above"),
    })
}

fn unary(u: UnaryOp, x: &Var, y: &Var, gy: &Var) -> Result<Var> {
    let c = |v: f64| scalar(x, v);
    Ok(match u {
        UnaryOp::Neg => -gy,
        UnaryOp::Abs => gy * x.sign(),
        UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => zeros_like(x),
        UnaryOp::Exp => gy * y,
        UnaryOp::Log => gy / x,
        UnaryOp::Log1p => gy / (x + 1.0),
        UnaryOp::Expm1 => gy * (y + 1.0),
        UnaryOp::Sqrt => gy * 0.5 / y,
        UnaryOp::Rsqrt => gy * (y * y * y) * -0.5,
        UnaryOp::Sin => gy * x.cos(),
        UnaryOp::Cos => -(gy * x.sin()),
        UnaryOp::Tan => gy * (y * y + 1.0),
        UnaryOp::Tanh => gy * (1.0 - y * y),
        UnaryOp::Sigmoid => gy * y * (1.0 - y),
        UnaryOp::Erf => gy * (-(x * x)).exp() * (2.0 / std::f64::consts::PI.sqrt()),
        UnaryOp::Square => gy * x * 2.0,
        UnaryOp::Reciprocal => -(gy * y * y),
        UnaryOp::Relu => select(&x.gt(c(0.0)), gy, c(0.0)),
        UnaryOp::Not => return Err(Error::Grad("not takes bool, which has no gradient".into())),
    })
}

fn binary(b: BinaryOp, a: &Var, bb: &Var, y: &Var, gy: &Var) -> Vec<InGrad> {
    let pair = |ga: Var, gb: Var| {
        vec![
            InGrad::Grad(unbroadcast(&ga, a)),
            InGrad::Grad(unbroadcast(&gb, bb)),
        ]
    };
    match b {
        BinaryOp::Add => pair(gy.clone(), gy.clone()),
        BinaryOp::Sub => pair(gy.clone(), -gy),
        BinaryOp::Mul => pair(gy * bb, gy * a),
        BinaryOp::Div => pair(gy / bb, -(gy * y / bb)),
        BinaryOp::Pow => pair(gy * bb * a.pow(bb - 1.0), gy * y * a.log()),
        BinaryOp::Maximum | BinaryOp::Minimum => {
            // Ties split the gradient in half, as JAX does.
            let wins = if b == BinaryOp::Maximum {
                a.gt(bb)
            } else {
                a.lt(bb)
            };
            let one = scalar(gy, 1.0);
            let zero = scalar(gy, 0.0);
            let half = scalar(gy, 0.5);
            let wa = select(&a.eq(bb), &half, select(&wins, &one, &zero));
            pair(gy * &wa, gy * (1.0 - &wa))
        }
        BinaryOp::FloorDiv => vec![InGrad::Zero, InGrad::Zero],
        BinaryOp::Mod => pair(gy.clone(), -(gy * a.floordiv(bb))),
        _ => vec![InGrad::Zero, InGrad::Zero], // comparisons and logic give bool
    }
}

fn reduce(
    r: ReduceOp,
    axes: Option<&[usize]>,
    keepdims: bool,
    x: &Var,
    y: &Var,
    gy: &Var,
) -> Result<InGrad> {
    let rank = x.rank();
    let all: Vec<usize> = (0..rank).collect();
    let axes = axes.unwrap_or(&all);
    let axes_i: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    // The output gradient (and output) with the reduced dims kept as 1s.
    let keep = |v: &Var| {
        if keepdims || axes.is_empty() {
            v.clone()
        } else {
            v.expand_dims(&axes_i)
        }
    };
    let (gk, yk) = (keep(gy), keep(y));
    Ok(match r {
        ReduceOp::Sum => InGrad::Grad(broadcast_like(&gk, x)),
        ReduceOp::Mean => {
            let count = match axes
                .iter()
                .map(|&a| x.ty().shape[a])
                .collect::<Option<Vec<_>>>()
            {
                Some(dims) => scalar(x, dims.iter().product::<usize>() as f64),
                None => broadcast_like(&scalar(x, 1.0), x).sum(Some(&axes_i), true),
            };
            InGrad::Grad(broadcast_like(&(gk / count), x))
        }
        ReduceOp::Prod => InGrad::Grad(broadcast_like(&(gk * yk), x) / x),
        ReduceOp::Max | ReduceOp::Min => {
            let hit = x.eq(broadcast_like(&yk, x)).cast(x.dtype());
            let ties = hit.sum(Some(&axes_i), true);
            InGrad::Grad(hit * (gk / ties))
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin | ReduceOp::All | ReduceOp::Any => {
            InGrad::NotDifferentiable(format!("{} has no gradient", r.name()))
        }
    })
}

/// `g` reshaped to `x`'s shape; at most one unknown dim (filled in with -1).
fn reshape_to(g: &Var, x: &Var) -> Result<Var> {
    let shape = x.ty().shape;
    if shape.iter().filter(|d| d.is_none()).count() > 1 {
        return Err(Error::Grad(format!(
            "the gradient of a reshape of {} needs at most one unknown dim",
            x.ty()
        )));
    }
    Ok(g.reshape(
        &shape
            .iter()
            .map(|d| d.map(|n| n as i64).unwrap_or(-1))
            .collect::<Vec<_>>(),
    ))
}

fn concat_grads(gy: &Var, x: &[Var], axis: usize) -> Result<Vec<InGrad>> {
    let mut start = 0i64;
    let mut out = Vec::new();
    for xi in x {
        let n = xi.ty().shape[axis].ok_or_else(|| {
            Error::Grad(format!(
                "the gradient of concat needs the sizes along axis {axis}; {} has ?",
                xi.ty()
            ))
        })? as i64;
        let mut ranges = vec![(None, None, 1); axis + 1];
        ranges[axis] = (Some(start), Some(start + n), 1);
        out.push(InGrad::Grad(gy.slice(&ranges)));
        start += n;
    }
    Ok(out)
}

/// The gradient of a slice: `g` scattered back into zeros of `x`'s shape. Built from concat
/// and reshape: for a step k > 1, `g` is interleaved with k - 1 zeros first.
fn slice_grad(
    g: &Graph,
    gy: &Var,
    x: &Var,
    starts: &[i64],
    stops: &[i64],
    steps: &[i64],
) -> Result<Var> {
    let shape = x.ty().known_shape().ok_or_else(|| {
        Error::Grad(format!(
            "the gradient of a slice of {} needs a known shape",
            x.ty()
        ))
    })?;
    let mut out = gy.clone();
    for ax in 0..starts.len() {
        let n = shape[ax];
        let (start, len) = crate::ir::infer::slice_bounds(n, starts[ax], stops[ax], steps[ax]);
        let step = steps[ax];
        // A negative step is the reverse of a positive one starting at its last element.
        // With one element (or none) the step does not matter; it may be as large as an i64.
        let k = if len <= 1 {
            1
        } else {
            step.unsigned_abs() as usize
        };
        let first = if step > 0 || len == 0 {
            start
        } else {
            start + (len as i64 - 1) * step
        };
        if step < 0 {
            let mut rev = vec![(None, None, 1); ax + 1];
            rev[ax] = (None, None, -1);
            out = out.slice(&rev);
        }
        let mut cur = out.ty().known_shape().unwrap_or_default();
        let zeros = |len: usize, cur: &[usize]| {
            let mut s = cur.to_vec();
            s[ax] = len;
            g.zeros(x.dtype(), &dims_of(&s))
        };
        if len == 0 {
            // Nothing was selected along this axis: the gradient is all zeros.
            out = zeros(n, &cur);
            continue;
        }
        if k > 1 {
            // [.., len, ..] -> [.., len, k, ..] with zeros after each element -> [.., len * k, ..]
            let e = out.expand_dims(&[ax as i64 + 1]);
            let mut zshape = e.ty().known_shape().unwrap_or_default();
            zshape[ax + 1] = k - 1;
            let z = g.zeros(x.dtype(), &dims_of(&zshape));
            let inter = crate::graph::concat(&[&e, &z], ax as i64 + 1);
            let mut flat: Vec<i64> = cur.iter().map(|&d| d as i64).collect();
            flat[ax] = (len * k) as i64;
            out = inter.reshape(&flat);
            let keep = (n - first as usize).min(len * k);
            let mut r = vec![(None, None, 1); ax + 1];
            r[ax] = (Some(0), Some(keep as i64), 1);
            out = out.slice(&r);
            cur = out.ty().known_shape().unwrap_or_default();
        }
        let before = first as usize;
        let after = n - before - cur[ax];
        let mut parts = Vec::new();
        let zb = zeros(before, &cur);
        let za = zeros(after, &cur);
        if before > 0 {
            parts.push(&zb);
        }
        parts.push(&out);
        if after > 0 {
            parts.push(&za);
        }
        out = crate::graph::concat(&parts, ax as i64);
    }
    Ok(out)
}

fn matmul(a: &Var, b: &Var, gy: &Var) -> Vec<InGrad> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra == 1 && rb == 1 {
        return vec![InGrad::Grad(gy * b), InGrad::Grad(gy * a)];
    }
    // Promote 1-D operands as matmul does, and the output gradient with them.
    let a2 = if ra == 1 {
        a.expand_dims(&[0])
    } else {
        a.clone()
    };
    let b2 = if rb == 1 {
        b.expand_dims(&[1])
    } else {
        b.clone()
    };
    let mut g2 = gy.clone();
    if ra == 1 {
        g2 = g2.expand_dims(&[g2.rank() as i64 - if rb == 1 { 0 } else { 1 }]);
    }
    if rb == 1 {
        g2 = g2.expand_dims(&[g2.rank() as i64]);
    }
    let swap = |v: &Var| v.transpose(&swap_last_two(v.rank()));
    let mut ga = unbroadcast(&g2.matmul(&swap(&b2)), &a2);
    let (k, n) = (a2.ty().shape[a2.rank() - 1], g2.ty().shape[g2.rank() - 1]);
    let mut gb = match (k, n) {
        // One matrix `b` for a batch of `a`: its gradient sums over every row of the batch,
        // one product with k = all those rows, where a product per batch would make a
        // matrix per batch and then add them up.
        (Some(k), Some(n)) if k > 0 && n > 0 && b2.rank() == 2 && a2.rank() > 2 => {
            let rows = |v: &Var, width: usize| v.reshape(&[-1, width as i64]);
            rows(&a2, k).t().matmul(&rows(&g2, n))
        }
        _ => unbroadcast(&swap(&a2).matmul(&g2), &b2),
    };
    if ra == 1 {
        ga = ga.squeeze(Some(&[0]));
    }
    if rb == 1 {
        gb = gb.squeeze(Some(&[-1]));
    }
    vec![InGrad::Grad(ga), InGrad::Grad(gb)]
}

/// The gradient of a Composite through its scalar ops: the program is written out again as
/// graph ops on the inputs, and that expression is differentiated.
fn composite_grads(
    program: &crate::ir::scalar::ScalarProgram,
    reduce: Option<(ReduceOp, Option<Vec<usize>>, bool)>,
    x: &[Var],
    y: &[Var],
    gy: &[Option<Var>],
) -> Result<Vec<InGrad>> {
    let mut outs = crate::graph::unfold_program(program, x)?;
    // A fused reduction: the same reduction of the prologue's value, as graph ops.
    if let Some((r, axes, keepdims)) = reduce {
        let axes: Option<Vec<i64>> = axes.map(|a| a.iter().map(|&i| i as i64).collect());
        outs = vec![outs[0].reduce(r, axes.as_deref(), keepdims)];
    }
    let mut cost: Option<Var> = None;
    for ((o, d), yv) in outs.iter().zip(gy).zip(y) {
        let (Some(d), true) = (d, yv.dtype().is_float()) else {
            continue;
        };
        let term = (o * d).sum(None, false);
        cost = Some(match cost {
            Some(c) => c + term,
            None => term,
        });
    }
    let Some(cost) = cost else {
        return Ok(x.iter().map(|_| InGrad::Zero).collect());
    };
    let floats: Vec<&Var> = x.iter().filter(|v| v.dtype().is_float()).collect();
    let adjoints: Vec<Var> = gy.iter().flatten().cloned().collect();
    let mut grads = super::partial_grads(&cost, &floats, &adjoints)?.into_iter();
    Ok(x.iter()
        .map(|v| {
            if v.dtype().is_float() {
                grads
                    .next()
                    .map(|g| InGrad::Grad(unbroadcast(&g, v)))
                    .unwrap_or(InGrad::Zero)
            } else {
                InGrad::Zero
            }
        })
        .collect())
}
