//! Type inference for the built-in ops: Theano's `make_node` check. Given the input types, the
//! output types or an error that says what is wrong. It never looks at where inputs come from.
//!
//! With every input dim known, the result is the concrete output shape, so the same function
//! serves as `infer_shape` at run time (see [`infer_shape`]).

use super::op::{BinaryOp, Op, RandomDist, ReduceOp, UnaryOp};
use super::types::{broadcast_dims, Dim, ShapeDisplay, TensorType};
use super::DType;

/// The number of elements of a shape, or `None` if it overflows.
pub fn checked_numel(mut dims: impl Iterator<Item = usize>) -> Option<usize> {
    dims.try_fold(1usize, |acc, d| acc.checked_mul(d))
}

/// What the error of a result whose size overflows says (`runtime::memory` looks for it).
pub const TOO_MANY_ELEMENTS: &str = "has too many elements";

/// Output types of `op` applied to inputs of types `inputs`. Shapes whose size in bytes would
/// not fit in memory's address space are errors here, so nothing later can overflow on them.
pub fn infer(op: &Op, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
    let outs = infer_types(op, inputs)?;
    for t in &outs {
        // Zeros aside: an empty array's other extents must still be countable (arrays index
        // along them), and a `?` may be more than zero.
        let known = t.shape.iter().flatten().copied().filter(|&d| d != 0);
        let fits = checked_numel(known)
            .and_then(|n| n.checked_mul(t.dtype.size()))
            .is_some_and(|b| b <= isize::MAX as usize);
        if !fits {
            return Err(format!("{}: the result {t} {TOO_MANY_ELEMENTS}", op.name()));
        }
    }
    Ok(outs)
}

fn infer_types(op: &Op, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
    if let Some(n) = op.arity() {
        if inputs.len() != n {
            return Err(format!(
                "{} takes {n} input(s), got {}",
                op.name(),
                inputs.len()
            ));
        }
    }
    let name = op.name();
    if let Some(h) = inputs.iter().map(|t| t.dtype).find(|d| d.is_half()) {
        if !op.takes_halves() {
            return Err(half_refused(name, h));
        }
    }
    let one = |t: TensorType| Ok(vec![t]);
    match op {
        Op::Unary(u) => {
            let t = inputs[0];
            match u {
                UnaryOp::Not if t.dtype != DType::Bool => {
                    Err(format!("not takes bool, got {}", t.dtype))
                }
                UnaryOp::Not => one(t.clone()),
                _ if t.dtype == DType::Bool => {
                    Err(format!("{name} does not take bool (cast first)"))
                }
                _ if u.float_only() && !t.dtype.is_float() => Err(format!(
                    "{name} takes f32 or f64, got {} (cast first)",
                    t.dtype
                )),
                _ => one(t.clone()),
            }
        }
        Op::Binary(b) => {
            let (x, y) = (inputs[0], inputs[1]);
            if x.dtype != y.dtype {
                return Err(format!(
                    "{name}: operands have different dtypes {x} and {y} (cast one explicitly)"
                ));
            }
            let shape = broadcast_dims(&x.shape, &y.shape).map_err(|e| format!("{name}: {e}"))?;
            let dt = x.dtype;
            if b.is_logical() && dt != DType::Bool {
                return Err(format!("{name} takes bool operands, got {dt}"));
            }
            if *b == BinaryOp::Div && !dt.is_float() {
                return Err(format!(
                    "div takes f32 or f64, got {dt} (use floordiv for integers)"
                ));
            }
            if !b.is_logical() && !b.is_comparison() && dt == DType::Bool {
                return Err(format!("{name} does not take bool operands (cast first)"));
            }
            let out = if b.is_comparison() { DType::Bool } else { dt };
            one(TensorType::new(out, shape))
        }
        Op::Select => {
            let (c, a, b) = (inputs[0], inputs[1], inputs[2]);
            if c.dtype != DType::Bool {
                return Err(format!("select: the condition must be bool, got {c}"));
            }
            if a.dtype != b.dtype {
                return Err(format!(
                    "select: branches have different dtypes {a} and {b}"
                ));
            }
            let s = broadcast_dims(&c.shape, &a.shape).map_err(|e| format!("select: {e}"))?;
            let s = broadcast_dims(&s, &b.shape).map_err(|e| format!("select: {e}"))?;
            one(TensorType::new(a.dtype, s))
        }
        Op::Cast { to } => one(inputs[0].with_dtype(*to)),
        Op::Reduce {
            op: r,
            axes,
            keepdims,
        } => {
            let t = inputs[0];
            if let Some(ax) = axes {
                check_axes(name, ax, t.rank())?;
                if matches!(r, ReduceOp::ArgMax | ReduceOp::ArgMin) && ax.len() != 1 {
                    return Err(format!("{name} takes one axis or none, got {}", ax.len()));
                }
            }
            let dt = r.result_dtype(t.dtype);
            let reduced = |i: usize| axes.as_ref().is_none_or(|a| a.contains(&i));
            let mut shape = Vec::new();
            for (i, &d) in t.shape.iter().enumerate() {
                if !reduced(i) {
                    shape.push(d);
                } else if *keepdims {
                    shape.push(Some(1));
                }
            }
            one(TensorType::new(dt, shape))
        }
        Op::Transpose { perm } => {
            let t = inputs[0];
            if !is_permutation(perm, t.rank()) {
                return Err(format!(
                    "transpose: perm {perm:?} is not a permutation of {} axes",
                    t.rank()
                ));
            }
            one(TensorType::new(
                t.dtype,
                perm.iter().map(|&p| t.shape[p]).collect::<Vec<_>>(),
            ))
        }
        Op::Reshape { shape } => {
            let t = inputs[0];
            let infer_at: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] == -1).collect();
            if infer_at.len() > 1 || shape.iter().any(|&d| d < -1) {
                return Err(format!(
                    "reshape: bad target shape {shape:?} (dims >= 0, at most one -1)"
                ));
            }
            let known = checked_numel(shape.iter().filter(|&&d| d >= 0).map(|&d| d as usize))
                .ok_or_else(|| {
                    format!("reshape: the target shape {shape:?} has too many elements")
                })?;
            let total: Option<usize> = t
                .shape
                .iter()
                .copied()
                .collect::<Option<Vec<_>>>()
                .and_then(|d| checked_numel(d.into_iter()));
            let mut out: Vec<Dim> = shape
                .iter()
                .map(|&d| (d >= 0).then_some(d as usize))
                .collect();
            match (total, infer_at.first()) {
                (Some(n), None) if n != known => {
                    return Err(format!(
                        "reshape: cannot reshape {} ({n} elements) to {shape:?}",
                        ShapeDisplay(&t.shape)
                    ))
                }
                (Some(n), Some(&i)) => {
                    if known == 0 || n % known != 0 {
                        return Err(format!(
                            "reshape: cannot reshape {} ({n} elements) to {shape:?}",
                            ShapeDisplay(&t.shape)
                        ));
                    }
                    out[i] = Some(n / known);
                }
                _ => {}
            }
            one(TensorType::new(t.dtype, out))
        }
        Op::BroadcastTo { shape } => {
            let t = inputs[0];
            let target: Vec<Dim> = shape.iter().map(|&d| Some(d)).collect();
            let b = broadcast_dims(&t.shape, &target).ok();
            let ok = t.rank() <= shape.len()
                && t.shape
                    .iter()
                    .rev()
                    .zip(shape.iter().rev())
                    .all(|(d, &s)| matches!(d, Some(1)) || d.is_none_or(|d| d == s))
                && b.is_some();
            if !ok {
                return Err(format!(
                    "broadcast_to: cannot broadcast {} to {shape:?}",
                    ShapeDisplay(&t.shape)
                ));
            }
            one(TensorType::new(t.dtype, target))
        }
        Op::ExpandDims { axes } => {
            let t = inputs[0];
            let rank = t.rank() + axes.len();
            check_axes(name, axes, rank)?;
            let mut src = t.shape.iter();
            let shape = (0..rank)
                .map(|i| {
                    if axes.contains(&i) {
                        Some(1)
                    } else {
                        *src.next().unwrap()
                    }
                })
                .collect::<Vec<_>>();
            one(TensorType::new(t.dtype, shape))
        }
        Op::Squeeze { axes } => {
            let t = inputs[0];
            check_axes(name, axes, t.rank())?;
            for &a in axes {
                if let Some(d) = t.shape[a] {
                    if d != 1 {
                        return Err(format!("squeeze: axis {a} has size {d}, not 1"));
                    }
                }
            }
            let shape = (0..t.rank())
                .filter(|i| !axes.contains(i))
                .map(|i| t.shape[i])
                .collect::<Vec<_>>();
            one(TensorType::new(t.dtype, shape))
        }
        Op::Take { axis } => Ok(vec![take_type(name, inputs[0], inputs[1], *axis)?]),
        Op::ScatterAdd { axis } => {
            let (x, upd) = (inputs[0], inputs[2]);
            if !x.dtype.is_numeric() {
                return Err(format!("scatter_add: adds numbers, not {}", x.dtype));
            }
            let want = take_type(name, x, inputs[1], *axis)?;
            if !fits_type(upd, &want) {
                return Err(format!(
                    "scatter_add: the updates have type {upd}; adding them at indices {} along \
                     axis {axis} of {x} needs {want}",
                    inputs[1]
                ));
            }
            one(x.clone())
        }
        Op::Cumsum { axis } => {
            let t = inputs[0];
            check_axis(name, t, *axis)?;
            one(TensorType::new(
                ReduceOp::Sum.result_dtype(t.dtype),
                t.shape.clone(),
            ))
        }
        Op::TakeAlongAxis { axis } => {
            let (x, idx) = (inputs[0], inputs[1]);
            check_indices(name, idx)?;
            check_axis(name, x, *axis)?;
            if idx.rank() != x.rank() {
                return Err(format!(
                    "{name}: the indices {idx} must have the rank of {x} ({})",
                    x.rank()
                ));
            }
            let mut shape = Vec::with_capacity(x.rank());
            for a in 0..x.rank() {
                shape.push(if a == *axis {
                    idx.shape[a]
                } else {
                    broadcast_dims(&[x.shape[a]], &[idx.shape[a]])
                        .map_err(|e| format!("{name}: axis {a}: {e}"))?[0]
                });
            }
            one(TensorType::new(x.dtype, shape))
        }
        Op::ScatterSet { axis } => {
            let (x, upd) = (inputs[0], inputs[2]);
            let want = take_type(name, x, inputs[1], *axis)?;
            if !fits_type(upd, &want) {
                return Err(format!(
                    "{name}: the updates have type {upd}; writing them at indices {} along \
                     axis {axis} of {x} needs {want}",
                    inputs[1]
                ));
            }
            one(x.clone())
        }
        Op::Cumprod { axis } => {
            let t = inputs[0];
            check_axis(name, t, *axis)?;
            one(TensorType::new(
                ReduceOp::Prod.result_dtype(t.dtype),
                t.shape.clone(),
            ))
        }
        Op::CumprodGrad { axis } => {
            let (x, g) = (inputs[0], inputs[1]);
            check_axis(name, x, *axis)?;
            if !x.dtype.is_float() || !fits_type(g, x) {
                return Err(format!(
                    "{name}: takes a float input and a gradient of its type, got {x} and {g}"
                ));
            }
            one(x.clone())
        }
        Op::Sort { axis, .. } | Op::Argsort { axis, .. } => {
            let t = inputs[0];
            check_axis(name, t, *axis)?;
            let dtype = match op {
                Op::Sort { .. } => t.dtype,
                _ => DType::I64,
            };
            one(TensorType::new(dtype, t.shape.clone()))
        }
        Op::Conv2d(conv) => one(super::window::conv_type(conv, inputs[0], inputs[1])?),
        Op::Conv2dGradImage { conv, image } => one(super::window::conv_grad_image_type(
            conv, *image, inputs[0], inputs[1],
        )?),
        Op::Conv2dGradFilter { conv, kernel } => one(super::window::conv_grad_filter_type(
            conv, *kernel, inputs[0], inputs[1],
        )?),
        Op::Pool2d(pool) => one(super::window::pool_type(pool, inputs[0])?),
        Op::Pool2dGrad(pool) => {
            let (x, g) = (inputs[0], inputs[1]);
            let y = super::window::pool_type(pool, x)?;
            if !fits_type(g, &y) {
                return Err(format!(
                    "{name}: the gradient has type {g}, the pooled output {y}"
                ));
            }
            one(x.clone())
        }
        Op::OneHot { depth, dtype } => {
            let t = inputs[0];
            check_indices(name, t)?;
            let mut shape = t.shape.clone();
            shape.push(Some(*depth));
            one(TensorType::new(*dtype, shape))
        }
        Op::Concat { axis } => {
            let Some(first) = inputs.first() else {
                return Err("concat takes at least one input".into());
            };
            if *axis >= first.rank() {
                return Err(format!(
                    "concat: axis {axis} is out of range for rank {}",
                    first.rank()
                ));
            }
            let mut shape = first.shape.clone();
            for t in &inputs[1..] {
                if t.dtype != first.dtype || t.rank() != first.rank() {
                    return Err(format!(
                        "concat: inputs {first} and {t} differ in dtype or rank"
                    ));
                }
                for (i, (sd, &td)) in shape.iter_mut().zip(&t.shape).enumerate() {
                    if i == *axis {
                        *sd = match (*sd, td) {
                            (Some(a), Some(b)) => Some(a.checked_add(b).ok_or_else(|| {
                                format!(
                                    "concat: the inputs' extents along axis {axis} add up to \
                                     more than an address holds"
                                )
                            })?),
                            _ => None,
                        };
                    } else {
                        *sd = match (*sd, td) {
                            (Some(a), Some(b)) if a != b => {
                                return Err(format!(
                                    "concat: inputs {first} and {t} differ in dim {i}"
                                ))
                            }
                            (Some(a), _) | (_, Some(a)) => Some(a),
                            _ => None,
                        };
                    }
                }
            }
            one(TensorType::new(first.dtype, shape))
        }
        Op::Slice {
            starts,
            stops,
            steps,
        } => {
            let t = inputs[0];
            if starts.len() != stops.len() || starts.len() != steps.len() || starts.len() > t.rank()
            {
                return Err(format!("slice: starts, stops and steps must have one entry per sliced axis (at most {})", t.rank()));
            }
            if steps.contains(&0) {
                return Err("slice: step cannot be zero".into());
            }
            let mut shape = t.shape.clone();
            for i in 0..starts.len() {
                shape[i] = shape[i].map(|n| slice_len(n, starts[i], stops[i], steps[i]));
            }
            one(TensorType::new(t.dtype, shape))
        }
        Op::MatMul => {
            let (a, b) = (inputs[0], inputs[1]);
            if a.dtype != b.dtype {
                return Err(format!(
                    "matmul: operands have different dtypes {a} and {b}"
                ));
            }
            if a.dtype == DType::Bool {
                return Err("matmul does not take bool operands".into());
            }
            // Halves are read as they are stored and accumulated in f32, which is the result
            // (what GEMMs on half data give: cuBLAS's compute type, JAX's
            // `preferred_element_type`); cast it back to store it as a half.
            let out_dtype = a.dtype.compute();
            if a.rank() == 0 || b.rank() == 0 {
                return Err("matmul: operands must have at least one dim".into());
            }
            let (ka, kb) = (
                a.shape[a.rank() - 1],
                b.shape[if b.rank() == 1 { 0 } else { b.rank() - 2 }],
            );
            if let (Some(x), Some(y)) = (ka, kb) {
                if x != y {
                    return Err(format!("matmul: inner dims {x} and {y} differ ({a} @ {b})"));
                }
            }
            let batch_a = if a.rank() > 2 {
                &a.shape[..a.rank() - 2]
            } else {
                &[][..]
            };
            let batch_b = if b.rank() > 2 {
                &b.shape[..b.rank() - 2]
            } else {
                &[][..]
            };
            let mut shape =
                broadcast_dims(batch_a, batch_b).map_err(|e| format!("matmul: batch dims: {e}"))?;
            if a.rank() >= 2 {
                shape.push(a.shape[a.rank() - 2]);
            }
            if b.rank() >= 2 {
                shape.push(b.shape[b.rank() - 1]);
            }
            one(TensorType::new(out_dtype, shape))
        }
        Op::Const(t) => one(t.ty()),
        Op::Zeros { shape, dtype } | Op::Ones { shape, dtype } | Op::Full { shape, dtype, .. } => {
            one(TensorType::fixed(*dtype, shape))
        }
        Op::Random {
            dist, shape, dtype, ..
        } => {
            if dtype.is_half() {
                return Err(half_refused(name, *dtype));
            }
            if inputs.len() > 1
                || inputs
                    .first()
                    .is_some_and(|t| t.dtype != DType::I64 || t.rank() != 0)
            {
                return Err(format!("{name} takes no input or one i64[] counter"));
            }
            let ok = match dist {
                RandomDist::Bernoulli { p } => (0.0..=1.0).contains(&p.0),
                RandomDist::Uniform { low, high } => {
                    low.0.is_finite() && high.0.is_finite() && low.0 <= high.0
                }
                RandomDist::Normal { mean, std } => {
                    mean.0.is_finite() && std.0.is_finite() && std.0 >= 0.0
                }
            };
            if !ok {
                return Err(format!("{name}: parameters out of range: {dist:?}"));
            }
            let float_only = !matches!(dist, RandomDist::Bernoulli { .. });
            if float_only && !dtype.is_float() {
                return Err(format!("{name} makes f32 or f64, not {dtype}"));
            }
            one(TensorType::fixed(*dtype, shape))
        }
        Op::Composite {
            program,
            name: cname,
        } => {
            program.check().map_err(|e| format!("{cname}: {e}"))?;
            for (i, (want, t)) in program.input_dtypes().iter().zip(inputs).enumerate() {
                if *want != Some(t.dtype) {
                    let want = want
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "nothing (unused)".into());
                    return Err(format!(
                        "{cname}: input {i} is {t}, the program reads {want}"
                    ));
                }
            }
            let mut shape: Vec<Dim> = Vec::new();
            for t in inputs {
                shape = broadcast_dims(&shape, &t.shape).map_err(|e| format!("{cname}: {e}"))?;
            }
            Ok(program
                .outputs
                .iter()
                .map(|&o| TensorType::new(program.insts[o].dtype, shape.clone()))
                .collect())
        }
        Op::FusedReduce {
            op: r,
            axes,
            keepdims,
            program,
        } => {
            let prologue = Op::Composite {
                name: r.name().to_string(),
                program: program.clone(),
            };
            let t = infer_types(&prologue, inputs)?.remove(0);
            infer_types(
                &Op::Reduce {
                    op: *r,
                    axes: axes.clone(),
                    keepdims: *keepdims,
                },
                &[&t],
            )
        }
        // The result types of an ifelse are the types its regions yield; see `infer_ifelse`.
        Op::IfElse => Err("ifelse takes its result types from its regions".into()),
        Op::Scan { .. } => Err("scan takes its result types from its region".into()),
        Op::Custom(c) => {
            if !c.num_inputs().accepts(inputs.len()) {
                return Err(format!(
                    "{} takes {} input(s), got {}",
                    c.name(),
                    c.num_inputs(),
                    inputs.len()
                ));
            }
            let outs = c
                .make_node(inputs)
                .map_err(|e| format!("{}: {e}", c.name()))?;
            if outs.len() <= c.num_hidden_outputs() {
                return Err(format!(
                    "{}: make_node gave {} outputs, fewer than its hidden ones plus one",
                    c.name(),
                    outs.len()
                ));
            }
            with_inferred_shapes(c, inputs, outs)
        }
        Op::Arange {
            start,
            stop,
            step,
            dtype,
        } => {
            let n = arange_len(start.0, stop.0, step.0)?;
            if *dtype == DType::Bool {
                return Err("arange does not make bool tensors".into());
            }
            if dtype.is_half() {
                return Err(half_refused(name, *dtype));
            }
            one(TensorType::fixed(*dtype, &[n]))
        }
    }
}

/// The error of an op that computes given a storage-only half (halves are stored, not
/// computed on: docs/decisions.md).
pub fn half_refused(name: &str, d: DType) -> String {
    format!("{name} computes in f32: {d} is a storage type (cast to f32 first; kiln's graph API does this itself)")
}

/// Result types of `ifelse` from its condition's type and the types each region yields.
pub fn infer_ifelse(
    cond: &TensorType,
    then: &[TensorType],
    otherwise: &[TensorType],
) -> Result<Vec<TensorType>, String> {
    if cond.dtype != DType::Bool || cond.rank() != 0 {
        return Err(format!("ifelse: the condition must be bool[], got {cond}"));
    }
    if then.len() != otherwise.len() {
        return Err(format!(
            "ifelse: the branches yield {} and {} values",
            then.len(),
            otherwise.len()
        ));
    }
    for (i, (a, b)) in then.iter().zip(otherwise).enumerate() {
        if a != b {
            return Err(format!(
                "ifelse: result {i} is {a} in one branch and {b} in the other"
            ));
        }
    }
    Ok(then.to_vec())
}

/// The types of a `scan`'s region parameters: each carry typed as its initial value, then
/// one slice of each sequence (its type without the leading axis). The sequences must be at
/// least 1-d, and their leading dims agree where the types know them.
pub fn scan_param_types(carries: usize, args: &[&TensorType]) -> Result<Vec<TensorType>, String> {
    if args.len() <= carries {
        return Err(format!(
            "scan needs at least one sequence to walk (given {} values, {carries} of them carries; `kiln::scan_steps` loops a number of times)",
            args.len()
        ));
    }
    let (init, xs) = args.split_at(carries);
    scan_length(xs)?;
    let mut out: Vec<TensorType> = init.iter().map(|t| (*t).clone()).collect();
    for (i, x) in xs.iter().enumerate() {
        if x.rank() == 0 {
            return Err(format!(
                "scan: sequence {i} is {x}; a sequence needs a leading axis to walk"
            ));
        }
        out.push(TensorType::new(x.dtype, x.shape[1..].to_vec()));
    }
    Ok(out)
}

/// The number of steps of a scan over `xs` where the types know it: the sequences' leading
/// dims, which must agree.
fn scan_length(xs: &[&TensorType]) -> Result<Dim, String> {
    let mut len: Dim = None;
    for (i, x) in xs.iter().enumerate() {
        match (len, x.shape.first().copied().flatten()) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "scan: the sequences have different lengths ({a} and {b}, sequence {i})"
                ))
            }
            (None, Some(b)) => len = Some(b),
            _ => {}
        }
    }
    Ok(len)
}

/// A `scan`'s result types from its arguments and the types its region yields: the carries
/// as their initial values (each new carry must have its carry's dtype and rank, and dims
/// that agree where both are known: a difference the types cannot see is a run-time error),
/// then each other yield stacked along a new leading axis of the scan's length.
pub fn infer_scan(
    carries: usize,
    args: &[&TensorType],
    yields: &[TensorType],
) -> Result<Vec<TensorType>, String> {
    let params = scan_param_types(carries, args)?;
    if yields.len() < carries {
        return Err(format!(
            "scan: the body yields {} values, fewer than its {carries} carries",
            yields.len()
        ));
    }
    for (i, (c, y)) in params[..carries].iter().zip(yields).enumerate() {
        let agree = c.dtype == y.dtype
            && c.rank() == y.rank()
            && c.shape
                .iter()
                .zip(&y.shape)
                .all(|(a, b)| a.is_none() || b.is_none() || a == b);
        if !agree {
            return Err(format!(
                "scan: carry {i} is {c} but the body yields {y} for it (a carry keeps its type from step to step)"
            ));
        }
    }
    let len = scan_length(&args[carries..])?;
    let mut out = params[..carries].to_vec();
    for y in &yields[carries..] {
        let mut shape = vec![len];
        shape.extend(&y.shape);
        out.push(TensorType::new(y.dtype, shape));
    }
    Ok(out)
}

/// `make_node`'s output types with their `?` dims resolved by the op's shape function
/// (`infer_shape`, Theano's) where every input shape is known. A shape function that cannot
/// say (the default, for an output whose size only `perform` knows) leaves the types as they
/// are; one that contradicts `make_node` is an error.
fn with_inferred_shapes(
    c: &crate::ir::custom::CustomOpRef,
    inputs: &[&TensorType],
    outs: Vec<TensorType>,
) -> Result<Vec<TensorType>, String> {
    let open = outs.iter().any(|t| t.known_shape().is_none());
    if !open || inputs.iter().any(|t| t.known_shape().is_none()) {
        return Ok(outs);
    }
    let Ok(shapes) = c.infer_shape(inputs) else {
        return Ok(outs);
    };
    if shapes.len() != outs.len() {
        return Err(format!(
            "{}: infer_shape gave {} shapes for {} outputs",
            c.name(),
            shapes.len(),
            outs.len()
        ));
    }
    outs.into_iter()
        .zip(shapes)
        .map(|(t, s)| {
            let fits = t.rank() == s.len()
                && t.shape
                    .iter()
                    .zip(&s)
                    .all(|(d, &n)| d.is_none_or(|d| d == n));
            match fits {
                true => Ok(TensorType::fixed(t.dtype, &s)),
                false => Err(format!(
                    "{}: infer_shape says {s:?} where make_node says {t}",
                    c.name()
                )),
            }
        })
        .collect()
}

/// Concrete output shapes for concrete input shapes (Theano's `infer_shape`), for memory
/// planning before running.
pub fn infer_shape(
    op: &Op,
    dtypes: &[DType],
    shapes: &[&[usize]],
) -> Result<Vec<Vec<usize>>, String> {
    let tys: Vec<TensorType> = dtypes
        .iter()
        .zip(shapes)
        .map(|(&d, s)| TensorType::fixed(d, s))
        .collect();
    let refs: Vec<&TensorType> = tys.iter().collect();
    infer(op, &refs)?
        .into_iter()
        .map(|t| {
            t.known_shape().ok_or_else(|| {
                format!(
                    "{}: output shape is not determined by input shapes",
                    op.name()
                )
            })
        })
        .collect()
}

fn check_axes(name: &str, axes: &[usize], rank: usize) -> Result<(), String> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= rank {
            return Err(format!("{name}: axis {a} is out of range for rank {rank}"));
        }
        if axes[..i].contains(&a) {
            return Err(format!("{name}: axis {a} is repeated"));
        }
    }
    Ok(())
}

/// numpy's `PySlice_AdjustIndices`: the clamped start and the length of `start:stop:step` on a
/// dim of size `n`. `i64::MIN` and `i64::MAX` act as minus and plus infinity, which is how an
/// omitted bound is written (start: MIN for a positive step, MAX for a negative one; stop: the
/// other way round).
pub fn slice_bounds(n: usize, start: i64, stop: i64, step: i64) -> (i64, usize) {
    let n = n as i64;
    let adjust = |v: i64| -> i64 {
        let v = if v < 0 { v.saturating_add(n) } else { v };
        if step < 0 {
            v.clamp(-1, n - 1)
        } else {
            v.clamp(0, n)
        }
    };
    let (start, stop) = (adjust(start), adjust(stop));
    // In i128: a step near i64::MIN or i64::MAX would overflow the rounding-up division.
    let (lo, hi, step) = (start as i128, stop as i128, step as i128);
    let len = if step > 0 {
        if hi > lo {
            (hi - lo + step - 1) / step
        } else {
            0
        }
    } else if lo > hi {
        (lo - hi - step - 1) / (-step)
    } else {
        0
    };
    (start, len as usize)
}

/// The length of `start:stop:step` on a dim of size `n` (see [`slice_bounds`]).
pub fn slice_len(n: usize, start: i64, stop: i64, step: i64) -> usize {
    slice_bounds(n, start, stop, step).1
}

/// Number of elements of `arange(start, stop, step)`.
pub fn arange_len(start: f64, stop: f64, step: f64) -> Result<usize, String> {
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
        return Err("arange: start, stop and step must be finite and step nonzero".into());
    }
    let n = ((stop - start) / step).ceil();
    Ok(if n > 0.0 { n as usize } else { 0 })
}

/// Whether a value of type `t` can stand where `want` is expected: the same dtype and rank,
/// and no two known dims that differ.
pub(super) fn fits_type(t: &TensorType, want: &TensorType) -> bool {
    t.dtype == want.dtype
        && t.rank() == want.rank()
        && t.shape
            .iter()
            .zip(&want.shape)
            .all(|(a, b)| a.is_none() || b.is_none() || a == b)
}

fn check_axis(name: &str, t: &TensorType, axis: usize) -> Result<(), String> {
    if axis >= t.rank() {
        return Err(format!(
            "{name}: axis {axis} is out of range for {t} (rank {})",
            t.rank()
        ));
    }
    Ok(())
}

/// Indices are i32 or i64.
fn check_indices(name: &str, indices: &TensorType) -> Result<(), String> {
    match indices.dtype {
        DType::I32 | DType::I64 => Ok(()),
        d => Err(format!("{name}: the indices must be i32 or i64, not {d}")),
    }
}

/// The type of `take` of `x` at `indices` along `axis`: `x`'s dims before `axis`, the indices'
/// dims, `x`'s dims after it.
fn take_type(
    name: &str,
    x: &TensorType,
    indices: &TensorType,
    axis: usize,
) -> Result<TensorType, String> {
    check_indices(name, indices)?;
    if axis >= x.rank() {
        return Err(format!(
            "{name}: axis {axis} is out of range for {x} (rank {})",
            x.rank()
        ));
    }
    let mut shape = x.shape[..axis].to_vec();
    shape.extend(&indices.shape);
    shape.extend(&x.shape[axis + 1..]);
    Ok(TensorType::new(x.dtype, shape))
}

/// Whether `perm` orders the axes `0..rank`, each once (what `transpose` takes).
pub fn is_permutation(perm: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_follow_numpy() {
        // a[1:4], a[::-1], a[-2:], a[5::-2] on a 6-element axis
        assert_eq!(slice_bounds(6, 1, 4, 1), (1, 3));
        assert_eq!(slice_bounds(6, i64::MAX, i64::MIN, -1), (5, 6));
        assert_eq!(slice_bounds(6, i64::MIN, i64::MIN, -1).1, 0);
        assert_eq!(slice_bounds(6, -2, i64::MAX, 1), (4, 2));
        assert_eq!(slice_bounds(6, 5, i64::MIN, -2), (5, 3));
        assert_eq!(slice_bounds(6, 10, 20, 1).1, 0);
        assert_eq!(slice_bounds(6, -100, 100, 1), (0, 6));
        assert_eq!(slice_bounds(0, 0, 5, 1).1, 0);
    }

    #[test]
    fn arange_lengths() {
        assert_eq!(arange_len(0.0, 5.0, 1.0).unwrap(), 5);
        assert_eq!(arange_len(0.0, 1.0, 0.3).unwrap(), 4);
        assert_eq!(arange_len(5.0, 0.0, 1.0).unwrap(), 0);
        assert!(arange_len(0.0, 1.0, 0.0).is_err());
    }
}
