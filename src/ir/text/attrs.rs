//! Attribute values of the text form, and how each op's parameters are written as attributes.

use crate::ir::custom::{lookup_custom_op, OpParams};
use crate::ir::types::{normalize_axes, normalize_axis};
use crate::ir::window::{Conv2d, Pool2d, PoolKind};
use crate::ir::{BinaryOp, DType, F64Bits, Op, RandomDist, ReduceOp, TensorType, UnaryOp};
use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(i64),
    /// A float as written (parsed for its dtype where used).
    Float(String),
    Bool(bool),
    Ident(String),
    List(Vec<Attr>),
    Str(String),
    Null,
}

impl Attr {
    fn as_i64(&self) -> Option<i64> {
        match self {
            Attr::Int(i) => Some(*i),
            _ => None,
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match self {
            Attr::Int(i) => Some(*i as f64),
            Attr::Float(s) => parse_float(s),
            Attr::Ident(s) => parse_float(s),
            _ => None,
        }
    }
}

/// A float literal, with `nan`, `inf`, `-inf` spelled out.
pub fn parse_float(s: &str) -> Option<f64> {
    match s {
        "nan" | "NaN" | "+nan" => Some(f64::NAN),
        "-nan" => Some(-f64::NAN),
        "inf" | "+inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// The text of a float that parses back to the same bits.
pub fn float_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else {
        format!("{v:?}")
    }
}

pub fn f32_text(v: f32) -> String {
    if v.is_nan() || v.is_infinite() {
        float_text(v as f64)
    } else {
        format!("{v:?}")
    }
}

/// The attribute that holds an instruction's in-place mark (`Inst::inplace`), whatever its op.
/// It is reserved: a custom op's parameters cannot use the name.
pub const INPLACE_ATTR: &str = "inplace";

/// Named attributes of one instruction, consumed as the op is built so that leftovers can be
/// reported as unknown.
pub struct Attrs {
    pub items: Vec<(String, Attr)>,
}

impl Attrs {
    /// The in-place mark, taken out before the op is built from the rest.
    pub fn take_inplace(&mut self) -> Result<Option<usize>, String> {
        match self.int(INPLACE_ATTR)? {
            Some(k) if k < 0 => Err(format!("`{INPLACE_ATTR}` must not be negative")),
            k => Ok(k.map(|k| k as usize)),
        }
    }
    fn take(&mut self, name: &str) -> Option<Attr> {
        let i = self.items.iter().position(|(n, _)| n == name)?;
        Some(self.items.remove(i).1)
    }
    fn int(&mut self, name: &str) -> Result<Option<i64>, String> {
        self.take(name)
            .map(|a| {
                a.as_i64()
                    .ok_or_else(|| format!("`{name}` must be an integer"))
            })
            .transpose()
    }
    fn float(&mut self, name: &str) -> Result<Option<f64>, String> {
        self.take(name)
            .map(|a| {
                a.as_f64()
                    .ok_or_else(|| format!("`{name}` must be a number"))
            })
            .transpose()
    }
    fn bool(&mut self, name: &str) -> Result<Option<bool>, String> {
        self.take(name)
            .map(|a| match a {
                Attr::Bool(b) => Ok(b),
                _ => Err(format!("`{name}` must be true or false")),
            })
            .transpose()
    }
    fn dtype(&mut self, name: &str) -> Result<Option<DType>, String> {
        self.take(name)
            .map(|a| match a {
                Attr::Ident(s) => s.parse::<DType>(),
                _ => Err(format!("`{name}` must be a dtype")),
            })
            .transpose()
    }
    fn ints(&mut self, name: &str) -> Result<Option<Vec<i64>>, String> {
        self.take(name)
            .map(|a| match a {
                Attr::List(v) => v
                    .iter()
                    .map(|x| {
                        x.as_i64()
                            .ok_or_else(|| format!("`{name}` must be a list of integers"))
                    })
                    .collect(),
                Attr::Int(i) => Ok(vec![i]),
                _ => Err(format!("`{name}` must be a list of integers")),
            })
            .transpose()
    }
    fn opt_ints(&mut self, name: &str) -> Result<Option<Vec<Option<i64>>>, String> {
        self.take(name)
            .map(|a| match a {
                Attr::List(v) => v
                    .iter()
                    .map(|x| match x {
                        Attr::Null => Ok(None),
                        x => x
                            .as_i64()
                            .map(Some)
                            .ok_or_else(|| format!("`{name}` must list integers or null")),
                    })
                    .collect(),
                _ => Err(format!("`{name}` must be a list")),
            })
            .transpose()
    }
    fn sizes(&mut self, name: &str) -> Result<Option<Vec<usize>>, String> {
        match self.ints(name)? {
            Some(v) if v.iter().any(|&d| d < 0) => Err(format!("`{name}` must not be negative")),
            Some(v) => Ok(Some(v.into_iter().map(|d| d as usize).collect())),
            None => Ok(None),
        }
    }
    fn finish(self, op: &str) -> Result<(), String> {
        match self.items.first() {
            Some((n, _)) => Err(format!("unknown attribute `{n}` for {op}")),
            None => Ok(()),
        }
    }
}

/// A `scan`'s attributes: `carries` (required) and `reverse` (default false).
pub fn scan_attrs(items: Vec<(String, Attr)>) -> Result<(usize, bool), String> {
    let mut a = Attrs { items };
    let carries = match need(a.int("carries")?, "scan", "carries")? {
        k if k < 0 => return Err("`carries` must not be negative".into()),
        k => k as usize,
    };
    let reverse = a.bool("reverse")?.unwrap_or(false);
    a.finish("scan")?;
    Ok((carries, reverse))
}

fn need<T>(v: Option<T>, op: &str, name: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("{op} needs the attribute `{name}`"))
}

/// A two-element size list (height, width), or `None` when absent.
fn opt_pair(a: &mut Attrs, name: &str) -> Result<Option<[usize; 2]>, String> {
    a.sizes(name)?
        .map(|v| {
            <[usize; 2]>::try_from(v.as_slice())
                .map_err(|_| format!("`{name}` must list two sizes (height, width)"))
        })
        .transpose()
}

fn pair(a: &mut Attrs, name: &str, default: [usize; 2]) -> Result<[usize; 2], String> {
    Ok(opt_pair(a, name)?.unwrap_or(default))
}

fn need_pair(a: &mut Attrs, op: &str, name: &str) -> Result<[usize; 2], String> {
    need(opt_pair(a, name)?, op, name)
}

/// Builds the op named `name` (with the string of `custom`) from its attributes and the types
/// of its arguments.
pub fn build_op(
    name: &str,
    custom: Option<&str>,
    args: &[TensorType],
    mut a: Attrs,
) -> Result<Op, String> {
    let rank = args.first().map(|t| t.rank()).unwrap_or(0);
    if let Some(u) = UnaryOp::ALL.iter().find(|u| u.name() == name) {
        a.finish(name)?;
        return Ok(Op::Unary(*u));
    }
    if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == name) {
        a.finish(name)?;
        return Ok(Op::Binary(*b));
    }
    if let Some(r) = ReduceOp::ALL.iter().find(|r| r.name() == name) {
        let axes = a
            .ints("axes")?
            .map(|ax| normalize_axes(&ax, rank))
            .transpose()
            .map_err(|e| format!("{name}: {e}"))?;
        let keepdims = a.bool("keepdims")?.unwrap_or(false);
        a.finish(name)?;
        return Ok(Op::Reduce {
            op: *r,
            axes,
            keepdims,
        });
    }
    let op = match name {
        "select" => Op::Select,
        "matmul" => Op::MatMul,
        "cast" => Op::Cast {
            to: need(a.dtype("to")?, name, "to")?,
        },
        "transpose" => {
            let perm = match a.ints("perm")? {
                Some(p) => p
                    .iter()
                    .map(|&x| {
                        usize::try_from(x).map_err(|_| "transpose: negative perm entry".to_string())
                    })
                    .collect::<Result<_, _>>()?,
                None => (0..rank).rev().collect(),
            };
            Op::Transpose { perm }
        }
        "reshape" => Op::Reshape {
            shape: need(a.ints("shape")?, name, "shape")?,
        },
        "broadcast_to" => Op::BroadcastTo {
            shape: need(a.sizes("shape")?, name, "shape")?,
        },
        "expand_dims" => {
            let ax = need(a.ints("axes")?, name, "axes")?;
            Op::ExpandDims {
                axes: normalize_axes(&ax, rank + ax.len())
                    .map_err(|e| format!("expand_dims: {e}"))?,
            }
        }
        "squeeze" => {
            let axes = match a.ints("axes")? {
                Some(ax) => normalize_axes(&ax, rank).map_err(|e| format!("squeeze: {e}"))?,
                None => args
                    .first()
                    .map(|t| (0..rank).filter(|&i| t.shape[i] == Some(1)).collect())
                    .unwrap_or_default(),
            };
            Op::Squeeze { axes }
        }
        "concat" => Op::Concat {
            axis: normalize_axis(a.int("axis")?.unwrap_or(0), rank)
                .map_err(|e| format!("concat: {e}"))?,
        },
        "take" | "scatter_add" => {
            let axis = normalize_axis(a.int("axis")?.unwrap_or(0), rank)
                .map_err(|e| format!("{name}: {e}"))?;
            match name {
                "take" => Op::Take { axis },
                _ => Op::ScatterAdd { axis },
            }
        }
        "cumsum" | "cumprod" | "cumprod_grad" | "take_along_axis" | "scatter_set" => {
            let axis = normalize_axis(need(a.int("axis")?, name, "axis")?, rank)
                .map_err(|e| format!("{name}: {e}"))?;
            match name {
                "cumsum" => Op::Cumsum { axis },
                "cumprod" => Op::Cumprod { axis },
                "cumprod_grad" => Op::CumprodGrad { axis },
                "take_along_axis" => Op::TakeAlongAxis { axis },
                _ => Op::ScatterSet { axis },
            }
        }
        "sort" | "argsort" => {
            let axis = normalize_axis(need(a.int("axis")?, name, "axis")?, rank)
                .map_err(|e| format!("{name}: {e}"))?;
            let descending = a.bool("descending")?.unwrap_or(false);
            match name {
                "sort" => Op::Sort { axis, descending },
                _ => Op::Argsort { axis, descending },
            }
        }
        "conv2d" | "conv2d_grad_image" | "conv2d_grad_filter" => {
            let d = Conv2d::default();
            let conv = Conv2d {
                stride: pair(&mut a, "strides", d.stride)?,
                padding: pair(&mut a, "padding", d.padding)?,
                dilation: pair(&mut a, "dilation", d.dilation)?,
                groups: usize::try_from(a.int("groups")?.unwrap_or(1))
                    .map_err(|_| format!("{name}: groups must not be negative"))?,
            };
            match name {
                "conv2d" => Op::Conv2d(conv),
                "conv2d_grad_image" => Op::Conv2dGradImage {
                    conv,
                    image: need_pair(&mut a, name, "image")?,
                },
                _ => Op::Conv2dGradFilter {
                    conv,
                    kernel: need_pair(&mut a, name, "kernel")?,
                },
            }
        }
        "max_pool2d" | "avg_pool2d" | "max_pool2d_grad" | "avg_pool2d_grad" => {
            let window = need_pair(&mut a, name, "window")?;
            let pool = Pool2d {
                kind: if name.starts_with("max") {
                    PoolKind::Max
                } else {
                    PoolKind::Avg
                },
                window,
                stride: pair(&mut a, "strides", window)?,
                padding: pair(&mut a, "padding", [0, 0])?,
            };
            if name.ends_with("_grad") {
                Op::Pool2dGrad(pool)
            } else {
                Op::Pool2d(pool)
            }
        }
        "one_hot" => {
            let depth = need(a.int("depth")?, name, "depth")?;
            Op::OneHot {
                depth: usize::try_from(depth)
                    .map_err(|_| format!("one_hot: depth {depth} is negative"))?,
                dtype: a.dtype("dtype")?.unwrap_or(DType::F32),
            }
        }
        "slice" => {
            let steps = a.ints("steps")?;
            let starts = a.opt_ints("starts")?;
            let stops = a.opt_ints("stops")?;
            let n = [
                steps.as_ref().map(Vec::len),
                starts.as_ref().map(Vec::len),
                stops.as_ref().map(Vec::len),
            ]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(0);
            let steps = steps.unwrap_or_else(|| vec![1; n]);
            let starts = starts.unwrap_or_else(|| vec![None; n]);
            let stops = stops.unwrap_or_else(|| vec![None; n]);
            if starts.len() != n || stops.len() != n || steps.len() != n {
                return Err("slice: starts, stops and steps must have the same length".into());
            }
            // Omitted bounds: the infinity where numpy's slice starts or stops.
            let (lo, hi) = (i64::MIN, i64::MAX);
            Op::Slice {
                starts: starts
                    .iter()
                    .zip(&steps)
                    .map(|(s, &st)| s.unwrap_or(if st > 0 { lo } else { hi }))
                    .collect(),
                stops: stops
                    .iter()
                    .zip(&steps)
                    .map(|(s, &st)| s.unwrap_or(if st > 0 { hi } else { lo }))
                    .collect(),
                steps,
            }
        }
        "zeros" | "ones" | "full" => {
            let shape = need(a.sizes("shape")?, name, "shape")?;
            let dtype = need(a.dtype("dtype")?, name, "dtype")?;
            match name {
                "zeros" => Op::Zeros { shape, dtype },
                "ones" => Op::Ones { shape, dtype },
                _ => Op::Full {
                    shape,
                    dtype,
                    value: F64Bits(need(a.float("value")?, name, "value")?),
                },
            }
        }
        "arange" => Op::Arange {
            start: F64Bits(a.float("start")?.unwrap_or(0.0)),
            stop: F64Bits(need(a.float("stop")?, name, "stop")?),
            step: F64Bits(a.float("step")?.unwrap_or(1.0)),
            dtype: need(a.dtype("dtype")?, name, "dtype")?,
        },
        "uniform" | "normal" | "bernoulli" => {
            let seed = need(a.int("seed")?, name, "seed")? as u64;
            let shape = need(a.sizes("shape")?, name, "shape")?;
            let f = |a: &mut Attrs, n: &str, d: f64| a.float(n).map(|v| F64Bits(v.unwrap_or(d)));
            let (dist, default_dtype) = match name {
                "uniform" => (
                    RandomDist::Uniform {
                        low: f(&mut a, "low", 0.0)?,
                        high: f(&mut a, "high", 1.0)?,
                    },
                    DType::F32,
                ),
                "normal" => (
                    RandomDist::Normal {
                        mean: f(&mut a, "mean", 0.0)?,
                        std: f(&mut a, "std", 1.0)?,
                    },
                    DType::F32,
                ),
                _ => (
                    RandomDist::Bernoulli {
                        p: f(&mut a, "p", 0.5)?,
                    },
                    DType::Bool,
                ),
            };
            let dtype = a.dtype("dtype")?.unwrap_or(default_dtype);
            Op::Random {
                dist,
                seed,
                shape,
                dtype,
            }
        }
        "fused_reduce" => {
            let rname = custom
                .ok_or("fused_reduce needs its reduction as a string: fused_reduce \"sum\"")?;
            let r = *ReduceOp::ALL
                .iter()
                .find(|r| r.name() == rname)
                .ok_or_else(|| format!("fused_reduce: unknown reduction `{rname}`"))?;
            // Axes count in the prologue's result, whose rank is the largest argument rank.
            let prank = args.iter().map(|t| t.rank()).max().unwrap_or(0);
            let axes = a
                .ints("axes")?
                .map(|ax| normalize_axes(&ax, prank))
                .transpose()
                .map_err(|e| format!("fused_reduce: {e}"))?;
            let keepdims = a.bool("keepdims")?.unwrap_or(false);
            let program = match a.take("program") {
                Some(Attr::Str(p)) => crate::ir::scalar::parse_program(&p)
                    .map_err(|e| format!("fused_reduce program: {e}"))?,
                _ => return Err("fused_reduce needs `program = \"...\"`".into()),
            };
            Op::FusedReduce {
                op: r,
                axes,
                keepdims,
                program: std::sync::Arc::new(program),
            }
        }
        "composite" => {
            let name = custom.ok_or("composite needs its name as a string: composite \"NAME\"")?;
            let program = match a.take("program") {
                Some(Attr::Str(p)) => crate::ir::scalar::parse_program(&p)
                    .map_err(|e| format!("composite program: {e}"))?,
                _ => return Err("composite needs `program = \"...\"`".into()),
            };
            Op::Composite {
                name: name.to_string(),
                program: std::sync::Arc::new(program),
            }
        }
        "custom" => {
            let cname = custom.ok_or("custom needs the op's name as a string: custom \"NAME\"")?;
            let mut params = OpParams::new();
            for (n, v) in std::mem::take(&mut a.items) {
                let list = match v {
                    Attr::List(l) => l,
                    one => vec![one],
                };
                if list.iter().all(|x| matches!(x, Attr::Int(_))) {
                    params =
                        params.int(&n, list.iter().filter_map(Attr::as_i64).collect::<Vec<_>>());
                } else {
                    let fl: Option<Vec<f64>> = list.iter().map(Attr::as_f64).collect();
                    params = params.float(
                        &n,
                        fl.ok_or_else(|| format!("custom attribute `{n}` must be numbers"))?,
                    );
                }
            }
            Op::Custom(lookup_custom_op(cname, &params)?)
        }
        _ => return Err(format!("unknown op `{name}`")),
    };
    a.finish(name)?;
    Ok(op)
}

fn list<T: std::fmt::Display>(v: &[T]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A convolution's parameters that differ from the defaults.
fn conv_attrs(conv: &Conv2d, items: &mut Vec<String>) {
    let d = Conv2d::default();
    if conv.stride != d.stride {
        items.push(format!("strides = {}", list(&conv.stride)));
    }
    if conv.padding != d.padding {
        items.push(format!("padding = {}", list(&conv.padding)));
    }
    if conv.dilation != d.dilation {
        items.push(format!("dilation = {}", list(&conv.dilation)));
    }
    if conv.groups != d.groups {
        items.push(format!("groups = {}", conv.groups));
    }
}

/// The attributes of an instruction as text (`{axes = [1], keepdims = true}`): its op's, then
/// its in-place mark (`inplace = 0`); empty when it has none.
pub fn inst_attrs(op: &Op, inplace: Option<usize>) -> String {
    let mut items: Vec<String> = Vec::new();
    match op {
        Op::Reduce { axes, keepdims, .. } => {
            if let Some(ax) = axes {
                items.push(format!("axes = {}", list(ax)));
            }
            if *keepdims {
                items.push("keepdims = true".into());
            }
        }
        Op::Cast { to } => items.push(format!("to = {to}")),
        Op::Transpose { perm } => items.push(format!("perm = {}", list(perm))),
        Op::Reshape { shape } => items.push(format!("shape = {}", list(shape))),
        Op::BroadcastTo { shape } => items.push(format!("shape = {}", list(shape))),
        Op::ExpandDims { axes } | Op::Squeeze { axes } => {
            items.push(format!("axes = {}", list(axes)))
        }
        Op::Concat { axis } | Op::Take { axis } | Op::ScatterAdd { axis } | Op::Cumsum { axis } => {
            items.push(format!("axis = {axis}"))
        }
        Op::TakeAlongAxis { axis }
        | Op::ScatterSet { axis }
        | Op::Cumprod { axis }
        | Op::CumprodGrad { axis } => items.push(format!("axis = {axis}")),
        Op::Sort { axis, descending } | Op::Argsort { axis, descending } => {
            items.push(format!("axis = {axis}"));
            if *descending {
                items.push("descending = true".into());
            }
        }
        Op::Conv2d(conv) => conv_attrs(conv, &mut items),
        Op::Conv2dGradImage { conv, image } => {
            conv_attrs(conv, &mut items);
            items.push(format!("image = {}", list(image)));
        }
        Op::Conv2dGradFilter { conv, kernel } => {
            conv_attrs(conv, &mut items);
            items.push(format!("kernel = {}", list(kernel)));
        }
        Op::Pool2d(p) | Op::Pool2dGrad(p) => {
            items.push(format!("window = {}", list(&p.window)));
            items.push(format!("strides = {}", list(&p.stride)));
            if p.padding != [0, 0] {
                items.push(format!("padding = {}", list(&p.padding)));
            }
        }
        Op::OneHot { depth, dtype } => {
            items.push(format!("depth = {depth}"));
            items.push(format!("dtype = {dtype}"));
        }
        Op::Slice {
            starts,
            stops,
            steps,
        } => {
            let bound = |v: i64, omitted: i64| {
                if v == omitted {
                    "null".to_string()
                } else {
                    v.to_string()
                }
            };
            let s: Vec<String> = starts
                .iter()
                .zip(steps)
                .map(|(&v, &st)| bound(v, if st > 0 { i64::MIN } else { i64::MAX }))
                .collect();
            let e: Vec<String> = stops
                .iter()
                .zip(steps)
                .map(|(&v, &st)| bound(v, if st > 0 { i64::MAX } else { i64::MIN }))
                .collect();
            items.push(format!("starts = [{}]", s.join(", ")));
            items.push(format!("stops = [{}]", e.join(", ")));
            items.push(format!("steps = {}", list(steps)));
        }
        Op::Zeros { shape, dtype } | Op::Ones { shape, dtype } => {
            items.push(format!("shape = {}", list(shape)));
            items.push(format!("dtype = {dtype}"));
        }
        Op::Full {
            shape,
            dtype,
            value,
        } => {
            items.push(format!("shape = {}", list(shape)));
            items.push(format!("dtype = {dtype}"));
            items.push(format!("value = {}", float_text(value.0)));
        }
        Op::Arange {
            start,
            stop,
            step,
            dtype,
        } => {
            items.push(format!("start = {}", float_text(start.0)));
            items.push(format!("stop = {}", float_text(stop.0)));
            items.push(format!("step = {}", float_text(step.0)));
            items.push(format!("dtype = {dtype}"));
        }
        Op::Random {
            dist,
            seed,
            shape,
            dtype,
        } => {
            items.push(format!("seed = {seed}"));
            items.push(format!("shape = {}", list(shape)));
            items.push(format!("dtype = {dtype}"));
            let (a, b) = match dist {
                RandomDist::Uniform { low, high } => (("low", low.0), Some(("high", high.0))),
                RandomDist::Normal { mean, std } => (("mean", mean.0), Some(("std", std.0))),
                RandomDist::Bernoulli { p } => (("p", p.0), None),
            };
            for (n, v) in std::iter::once(a).chain(b) {
                items.push(format!("{n} = {}", float_text(v)));
            }
        }
        Op::Composite { program, .. } => items.push(format!("program = \"{program}\"")),
        Op::FusedReduce {
            axes,
            keepdims,
            program,
            ..
        } => {
            if let Some(ax) = axes {
                items.push(format!("axes = {}", list(ax)));
            }
            if *keepdims {
                items.push("keepdims = true".into());
            }
            items.push(format!("program = \"{program}\""));
        }
        Op::Custom(c) => {
            let p = c.params();
            for (n, v) in &p.ints {
                items.push(format!("{n} = {}", list(v)));
            }
            for (n, v) in &p.floats {
                let mut s = String::from("[");
                for (i, x) in v.iter().enumerate() {
                    let _ = write!(s, "{}{}", if i > 0 { ", " } else { "" }, float_text(*x));
                }
                items.push(format!("{n} = {s}]"));
            }
        }
        _ => {}
    }
    if let Some(k) = inplace {
        items.push(format!("{INPLACE_ATTR} = {k}"));
    }
    if items.is_empty() {
        String::new()
    } else {
        format!(" {{{}}}", items.join(", "))
    }
}
