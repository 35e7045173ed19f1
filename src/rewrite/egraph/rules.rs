//! The rewrite rules, by phase. A rule looks at one node of a chosen op family and the nodes of
//! its argument e-classes ([`Rule::find`]); where it matches, it builds an equal term
//! ([`Rule::build`]) and the two are made one e-class, which keeps both: extraction chooses.
//!
//! | phase | rule |
//! | --- | --- |
//! | canonicalize | `x + 0` (`x + -0.0` for floats: `-0.0 + 0.0` is `+0.0`), `x - 0`, `x * 1`, `x / 1` -> `x`; `--x` -> `x`; transpose of transpose -> one transpose (or none); reshape of reshape -> one reshape (where the inner one cannot fail); a transpose, reshape, broadcast, cast, squeeze or expand_dims that changes nothing -> its input; `sum` of a broadcast over the stretched axes -> `x * n`; `x / c` -> `x * (1/c)` when `1/c` is exact (a power of two) |
//! | stabilize | `log(1 + x)` -> `log1p(x)`; `exp(x) - 1` -> `expm1(x)`; `log(sum(exp(x)))` -> max-shifted logsumexp; `log(exp(d) / sum(exp(d)))` -> `d - log(sum(exp(d)))` (log-softmax); `log(sigmoid(x))` -> `-softplus(-x)` |
//! | specialize | `pow(x, 2)` -> `square(x)`; `pow(x, -1)` -> `reciprocal(x)`; `pow(x, n)` for `n` in 1, 3, 4, -2 -> products of squares; `x * x` -> `square(x)`; `1 / sqrt(x)` and `reciprocal(sqrt(x))` -> `rsqrt(x)` |
//! | fast math (only with [`super::Options::fast_math`]) | `x * 0` -> `0`; `x - x` -> `0`; `pow(x, 0.5)` -> `sqrt(x)` |
//!
//! Only rewrites whose result has exactly the type of the matched e-class are applied (a
//! broadcasting `x + zeros` of a larger shape is not `x`). Rules never change a finite result
//! beyond rounding. A stabilizing rule changes NaN or inf behaviour only for the better, and the
//! node it replaces is marked so that extraction never goes back to it even where it looks
//! cheaper. The fast-math rules change NaN and inf results (`inf * 0` is NaN, not 0) and run
//! only when asked for. Rules that blow an e-graph up (associativity, commutativity) are left
//! out: canonical forms are reached by the rules above alone.

use super::lang::*;
use crate::ir::{BinaryOp, DType, Op, ReduceOp, TensorType, UnaryOp};
use crate::tensor::Tensor;
use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use smallvec::{smallvec, SmallVec};
use std::sync::{Arc, Mutex};

/// The phases the rules run in, each to saturation or to its limits.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Identities removed and chains of view ops merged (`x + 0`, transpose of transpose).
    Canonicalize,
    /// Numerically better forms (`log1p`, logsumexp, log-softmax); the replaced nodes are
    /// avoided by extraction.
    Stabilize,
    /// Cheaper special cases (`pow(x, 2)` -> `square(x)`, `rsqrt`).
    Specialize,
}

impl Phase {
    /// Every phase, in the order they run.
    pub const ALL: [Phase; 3] = [Phase::Canonicalize, Phase::Stabilize, Phase::Specialize];

    /// The phase's name in reports and dumps (`canonicalize`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Canonicalize => "canonicalize",
            Phase::Stabilize => "stabilize",
            Phase::Specialize => "specialize",
        }
    }
}

/// What a match captured: e-classes and ops the rewrite needs.
#[derive(Clone, Debug, Default)]
pub struct Caps {
    /// E-classes the rewrite builds on, in the order the rule's `build` expects.
    pub ids: SmallVec<[Id; 4]>,
    /// Ops of matched nodes the rewrite reads (an inner transpose's perm, a broadcast's
    /// shape, ...).
    pub ops: SmallVec<[OpId; 2]>,
}

impl Caps {
    fn ids(ids: &[Id]) -> Caps {
        Caps {
            ids: SmallVec::from_slice(ids),
            ops: SmallVec::new(),
        }
    }
}

type Find = fn(&KilnEGraph, Id, &Node) -> Option<Caps>;
type Build = fn(&mut Builder, Id, &Node, &Caps) -> Option<Id>;

/// One rewrite rule.
pub struct Rule {
    /// The rule's name, in reports (`fast-mul-zero`, ...).
    pub name: &'static str,
    /// The phase it runs in.
    pub phase: Phase,
    /// The families of the nodes the rule looks at.
    pub roots: Vec<u16>,
    /// Looks at a node (of one of `roots`) in an e-class: what the rewrite needs where the
    /// rule matches, else `None`.
    pub find: Find,
    /// Builds the equal term from what `find` captured: its e-class, or `None` where it
    /// cannot be built (it does not type-check).
    pub build: Build,
    /// The matched node is replaced for good: extraction avoids it (stabilizing rules).
    pub replaces: bool,
}

/// Adds type-checked nodes to the e-graph for a rule's result.
pub struct Builder<'a> {
    /// The e-graph the nodes go into.
    pub eg: &'a mut KilnEGraph,
}

impl Builder<'_> {
    /// The tensor type of e-class `id` (`None` for a tuple).
    pub fn ty(&self, id: Id) -> Option<&TensorType> {
        self.eg[id].data.ty()
    }

    /// `op(args)`, or `None` if it does not type-check or has several results.
    pub fn op(&mut self, op: Op, args: &[Id]) -> Option<Id> {
        let tys = arg_types(self.eg, args)?;
        if crate::ir::infer(&op, &tys).ok()?.len() != 1 {
            return None;
        }
        let fam = family(&op);
        let op = self.eg.analysis.ops.intern(op);
        Some(self.eg.add(Node::new(Head::Op { fam, op }, args)))
    }

    /// `u(x)`, or `None` if it does not type-check.
    pub fn unary(&mut self, u: UnaryOp, x: Id) -> Option<Id> {
        self.op(Op::Unary(u), &[x])
    }

    /// `b(x, y)`, or `None` if it does not type-check.
    pub fn binary(&mut self, b: BinaryOp, x: Id, y: Id) -> Option<Id> {
        self.op(Op::Binary(b), &[x, y])
    }

    /// A constant of `shape` filled with `v`.
    pub fn full(&mut self, dtype: DType, shape: &[usize], v: f64) -> Option<Id> {
        self.op(Op::Const(Tensor::full(dtype, shape, v)), &[])
    }

    /// A 0-d constant `v` of `dtype`.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Option<Id> {
        self.full(dtype, &[], v)
    }
}

// ---- looking at e-classes ----

fn op_of<'a>(eg: &'a KilnEGraph, n: &Node) -> &'a Op {
    eg.analysis.ops.get(n.op_id().expect("an op node"))
}

/// The nodes of e-class `c` of family `fam`.
fn with_fam(eg: &KilnEGraph, c: Id, fam: u16) -> impl Iterator<Item = &Node> {
    eg[c].nodes.iter().filter(move |n| n.fam() == Some(fam))
}

/// The argument of a unary op of kind `u` in e-class `c`.
fn unary_in(eg: &KilnEGraph, c: Id, u: UnaryOp) -> Option<Id> {
    with_fam(eg, c, fam_unary(u)).next().map(|n| n.args[0])
}

fn splat_is(eg: &KilnEGraph, c: Id, v: f64) -> bool {
    eg[c].data.splat.is_some_and(|s| s == v)
}

fn ty(eg: &KilnEGraph, c: Id) -> Option<&TensorType> {
    eg[c].data.ty()
}

fn same_ty(eg: &KilnEGraph, a: Id, b: Id) -> bool {
    ty(eg, a).is_some() && ty(eg, a) == ty(eg, b)
}

fn is_float(eg: &KilnEGraph, c: Id) -> bool {
    ty(eg, c).is_some_and(|t| t.dtype.is_float())
}

/// The first of `candidates` whose type is the matched e-class's.
fn same_ty_as(eg: &KilnEGraph, class: Id, candidates: &[Option<Id>]) -> Option<Caps> {
    candidates
        .iter()
        .flatten()
        .find(|&&x| same_ty(eg, x, class))
        .map(|&x| Caps::ids(&[x]))
}

fn keep(_: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    Some(c.ids[0])
}

fn rule(name: &'static str, phase: Phase, roots: Vec<u16>, find: Find, build: Build) -> Rule {
    Rule {
        name,
        phase,
        roots,
        find,
        build,
        replaces: false,
    }
}

// ---- canonicalize ----

/// Whether `c` is a zero that leaves every value alone when added (`sub`: subtracted). For
/// floats only one zero does: `-0.0 + 0.0` is `+0.0`, so `x + 0.0` is not `x` (the sign of a
/// zero decides `1 / x` and `x // 0`); `x + -0.0` and `x - 0.0` are.
fn neutral_zero(eg: &KilnEGraph, c: Id, sub: bool) -> bool {
    let negative = eg[c].data.splat.is_some_and(|s| s.is_sign_negative());
    splat_is(eg, c, 0.0) && (!is_float(eg, c) || negative != sub)
}

fn add_zero(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let (a, b) = (n.args[0], n.args[1]);
    same_ty_as(
        eg,
        c,
        &[
            neutral_zero(eg, b, false).then_some(a),
            neutral_zero(eg, a, false).then_some(b),
        ],
    )
}

fn sub_zero(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let (a, b) = (n.args[0], n.args[1]);
    same_ty_as(eg, c, &[neutral_zero(eg, b, true).then_some(a)])
}

fn mul_one(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let (a, b) = (n.args[0], n.args[1]);
    same_ty_as(
        eg,
        c,
        &[
            splat_is(eg, b, 1.0).then_some(a),
            splat_is(eg, a, 1.0).then_some(b),
        ],
    )
}

fn div_one(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let (a, b) = (n.args[0], n.args[1]);
    same_ty_as(eg, c, &[splat_is(eg, b, 1.0).then_some(a)])
}

fn neg_neg(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let x = unary_in(eg, n.args[0], UnaryOp::Neg)?;
    same_ty_as(eg, c, &[Some(x)])
}

fn transpose_transpose(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    let inner = with_fam(eg, n.args[0], FAM_TRANSPOSE).next()?;
    Some(Caps {
        ids: smallvec![inner.args[0]],
        ops: smallvec![inner.op_id()?],
    })
}

fn build_transpose_transpose(b: &mut Builder, _: Id, n: &Node, c: &Caps) -> Option<Id> {
    let (Op::Transpose { perm }, Op::Transpose { perm: inner }) = (
        b.eg.analysis.ops.get(n.op_id()?),
        b.eg.analysis.ops.get(c.ops[0]),
    ) else {
        return None;
    };
    let composed: Vec<usize> = perm.iter().map(|&p| inner[p]).collect();
    if composed.iter().enumerate().all(|(i, &p)| i == p) {
        return Some(c.ids[0]);
    }
    b.op(Op::Transpose { perm: composed }, &[c.ids[0]])
}

/// `reshape(reshape(x))` -> `reshape(x)`, where the inner reshape cannot fail at run time
/// (`x`'s shape is known, so inference checked it, or it flattens): dropping it must not drop
/// an error.
fn reshape_reshape(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    with_fam(eg, n.args[0], FAM_RESHAPE).find_map(|inner| {
        let x = inner.args[0];
        let flattens = matches!(op_of(eg, inner), Op::Reshape { shape } if shape[..] == [-1]);
        (flattens || ty(eg, x)?.known_shape().is_some()).then(|| Caps::ids(&[x]))
    })
}

fn build_reshape_reshape(b: &mut Builder, _: Id, n: &Node, c: &Caps) -> Option<Id> {
    let op = b.eg.analysis.ops.get(n.op_id()?).clone();
    b.op(op, &[c.ids[0]])
}

/// A shape op or cast whose result is its input: a transpose by the identity, a reshape or
/// broadcast to the input's own type (equal types mean equal shapes here), a cast to the
/// input's dtype, a squeeze or expand_dims of no axes.
fn no_op(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let x = n.args[0];
    let identity = match op_of(eg, n) {
        Op::Transpose { perm } => perm.iter().enumerate().all(|(i, &p)| i == p),
        Op::Reshape { .. } | Op::BroadcastTo { .. } | Op::Cast { .. } => true,
        Op::Squeeze { axes } | Op::ExpandDims { axes } => axes.is_empty(),
        _ => false,
    };
    (identity && same_ty(eg, x, c)).then(|| Caps::ids(&[x]))
}

/// `sum(broadcast_to(x, shape), axes)` where every summed axis is one the broadcast stretched
/// (new, or of size 1 in `x`): each sum adds `n` copies of one element, which is `x * n`
/// (within rounding; exactly, with wrapping, for integers), plus `+0.0` for floats (the sum's
/// start: -0.0 copies sum to +0.0). Not for an empty axis (`n` = 0: `inf * 0` would be NaN
/// where the sum is 0).
fn sum_of_broadcast(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let Op::Reduce {
        op: ReduceOp::Sum,
        axes,
        ..
    } = op_of(eg, n)
    else {
        return None;
    };
    let b = with_fam(eg, n.args[0], FAM_BROADCAST_TO).next()?;
    let Op::BroadcastTo { shape } = op_of(eg, b) else {
        return None;
    };
    let x = b.args[0];
    let xt = ty(eg, x)?;
    if xt.dtype == DType::Bool || ty(eg, c)?.known_shape().is_none() {
        return None;
    }
    let k = shape.len().checked_sub(xt.rank())?;
    let all: Vec<usize> = (0..shape.len()).collect();
    let axes = axes.as_ref().unwrap_or(&all);
    let mut count: u64 = 1;
    for &a in axes {
        if a >= k && xt.shape[a - k] != Some(1) {
            return None;
        }
        count = count.checked_mul(shape[a] as u64)?;
    }
    let bop = b.op_id()?;
    (1..=1 << 24).contains(&count).then(|| Caps {
        ids: smallvec![x],
        ops: smallvec![bop],
    })
}

fn build_sum_of_broadcast(b: &mut Builder, c: Id, n: &Node, caps: &Caps) -> Option<Id> {
    let x = caps.ids[0];
    let (axes, keepdims) = match b.eg.analysis.ops.get(n.op_id()?) {
        Op::Reduce { axes, keepdims, .. } => (axes.clone(), *keepdims),
        _ => return None,
    };
    let Op::BroadcastTo { shape } = b.eg.analysis.ops.get(caps.ops[0]).clone() else {
        return None;
    };
    let xt = b.ty(x)?.clone();
    let k = shape.len() - xt.rank();
    let axes = axes.unwrap_or_else(|| (0..shape.len()).collect());
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let mut v = x;
    if keepdims {
        // x with the broadcast's new leading axes: 1 on every summed axis.
        if k > 0 {
            let axes = (0..k).collect();
            v = b.op(Op::ExpandDims { axes }, &[v])?;
        }
    } else {
        // x without its summed axes (all of size 1), with the new leading axes that are kept.
        let own: Vec<usize> = axes.iter().filter(|&&a| a >= k).map(|&a| a - k).collect();
        if !own.is_empty() {
            v = b.op(Op::Squeeze { axes: own }, &[v])?;
        }
        let kept_new = k - axes.iter().filter(|&&a| a < k).count();
        if kept_new > 0 {
            let axes = (0..kept_new).collect();
            v = b.op(Op::ExpandDims { axes }, &[v])?;
        }
    }
    if count != 1 {
        let n = b.scalar(xt.dtype, count as f64)?;
        v = b.binary(BinaryOp::Mul, v, n)?;
    }
    if xt.dtype.is_float() {
        // A float sum starts from +0.0, so copies of -0.0 sum to +0.0 (and `x * n` keeps
        // -0.0): adding +0.0 gives that sign and changes no other value.
        let zero = b.scalar(xt.dtype, 0.0)?;
        v = b.binary(BinaryOp::Add, v, zero)?;
    }
    let want = b.ty(c)?.clone();
    if b.ty(v)? == &want {
        return Some(v);
    }
    b.op(
        Op::BroadcastTo {
            shape: want.known_shape()?,
        },
        &[v],
    )
}

/// `x / c` -> `x * (1/c)` where `c` is a constant power of two, so that `1/c` is exact in the
/// dtype and the product equals the quotient.
fn div_exact_reciprocal(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    let b = n.args[1];
    let s = eg[b].data.splat?;
    eg[b].data.constant?;
    let dt = ty(eg, b)?.dtype;
    let r = 1.0 / s;
    let power_of_two = s != 0.0 && s.is_finite() && s.abs().log2().fract() == 0.0;
    let exact = power_of_two
        && r.is_finite()
        && r * s == 1.0
        && Tensor::full(dt, &[], r).to_f64_vec()[0] == r;
    exact.then(|| Caps::ids(&[n.args[0], b]))
}

fn build_div_exact_reciprocal(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    let (x, d) = (c.ids[0], c.ids[1]);
    let t = b.ty(d)?.clone();
    let s = b.eg[d].data.splat?;
    let k = b.full(t.dtype, &t.known_shape()?, 1.0 / s)?;
    b.binary(BinaryOp::Mul, x, k)
}

// ---- stabilize ----

/// `log(1 + x)` -> `log1p(x)`.
fn log1p(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    with_fam(eg, n.args[0], fam_binary(BinaryOp::Add)).find_map(|add| {
        let (a, b) = (add.args[0], add.args[1]);
        same_ty_as(
            eg,
            c,
            &[
                splat_is(eg, a, 1.0).then_some(b),
                splat_is(eg, b, 1.0).then_some(a),
            ],
        )
    })
}

fn build_log1p(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    b.unary(UnaryOp::Log1p, c.ids[0])
}

/// `exp(x) - 1` -> `expm1(x)`.
fn expm1(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    if !splat_is(eg, n.args[1], 1.0) || !is_float(eg, c) {
        return None;
    }
    let x = unary_in(eg, n.args[0], UnaryOp::Exp)?;
    same_ty_as(eg, c, &[Some(x)])
}

fn build_expm1(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    b.unary(UnaryOp::Expm1, c.ids[0])
}

/// Whether `x` is `a - max(a)`, or `a` minus the finite-guarded max this module's logsumexp
/// makes (a softmax written the stable way, or this rule's own result).
fn max_shifted(eg: &KilnEGraph, x: Id) -> bool {
    let is_max_of = |m: Id, a: Id| {
        with_fam(eg, m, fam_reduce(ReduceOp::Max)).any(|r| eg.find(r.args[0]) == eg.find(a))
    };
    with_fam(eg, x, fam_binary(BinaryOp::Sub)).any(|sub| {
        let (a, m) = (sub.args[0], sub.args[1]);
        is_max_of(m, a) || with_fam(eg, m, FAM_SELECT).any(|s| is_max_of(s.args[1], a))
    })
}

/// `log(sum(exp(x)))` where `x` is not already max-shifted, over axes the types know are not
/// empty: the shifted form takes a `max`, which has no value over an empty axis, where the
/// naive form gives `-inf` (a rewrite must never turn a defined result into an error). Over a
/// `?` axis the naive form stays.
fn logsumexp(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    if !is_float(eg, c) {
        return None;
    }
    with_fam(eg, n.args[0], fam_reduce(ReduceOp::Sum)).find_map(|s| {
        let x = unary_in(eg, s.args[0], UnaryOp::Exp)?;
        let sop = s.op_id()?;
        let Op::Reduce { axes, .. } = eg.analysis.ops.get(sop) else {
            return None;
        };
        let xt = ty(eg, x)?;
        let nonempty = (0..xt.rank())
            .filter(|a| axes.as_ref().is_none_or(|ax| ax.contains(a)))
            .all(|a| xt.shape[a].is_some_and(|d| d > 0));
        (nonempty && !max_shifted(eg, x)).then(|| Caps {
            ids: smallvec![x],
            ops: smallvec![sop],
        })
    })
}

/// `m + log(sum(exp(x - m)))`, with `m` the max where it is finite and 0 elsewhere (so a row
/// of `-inf` still gives `-inf`, and one with `+inf` gives `+inf`).
fn build_logsumexp(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    let x = c.ids[0];
    let Op::Reduce { axes, keepdims, .. } = b.eg.analysis.ops.get(c.ops[0]).clone() else {
        return None;
    };
    let xt = b.ty(x)?.clone();
    let m = b.op(
        Op::Reduce {
            op: ReduceOp::Max,
            axes: axes.clone(),
            keepdims: true,
        },
        &[x],
    )?;
    let mm = b.binary(BinaryOp::Sub, m, m)?;
    let zero = b.scalar(xt.dtype, 0.0)?;
    let finite = b.binary(BinaryOp::Eq, mm, zero)?;
    let safe = b.op(Op::Select, &[finite, m, zero])?;
    let shifted = b.binary(BinaryOp::Sub, x, safe)?;
    let e = b.unary(UnaryOp::Exp, shifted)?;
    let s = b.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: axes.clone(),
            keepdims,
        },
        &[e],
    )?;
    let l = b.unary(UnaryOp::Log, s)?;
    let shift = if keepdims {
        safe
    } else {
        let squeeze = axes.unwrap_or_else(|| (0..xt.rank()).collect());
        b.op(Op::Squeeze { axes: squeeze }, &[safe])?
    };
    b.binary(BinaryOp::Add, l, shift)
}

/// `log(exp(d) / s)` with `s = sum(exp(d))` (keepdims) -> `d - log(s)`.
fn log_softmax(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    with_fam(eg, n.args[0], fam_binary(BinaryOp::Div)).find_map(|div| {
        let (num, den) = (div.args[0], div.args[1]);
        let d = unary_in(eg, num, UnaryOp::Exp)?;
        let sums_num = with_fam(eg, den, fam_reduce(ReduceOp::Sum)).any(|s| {
            matches!(op_of(eg, s), Op::Reduce { keepdims: true, .. })
                && eg.find(s.args[0]) == eg.find(num)
        });
        sums_num.then(|| Caps::ids(&[d, den]))
    })
}

fn build_log_softmax(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    let l = b.unary(UnaryOp::Log, c.ids[1])?;
    b.binary(BinaryOp::Sub, c.ids[0], l)
}

/// `log(sigmoid(x))`.
fn log_sigmoid(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    unary_in(eg, n.args[0], UnaryOp::Sigmoid).map(|x| Caps::ids(&[x]))
}

/// `-softplus(-x) = -(max(-x, 0) + log1p(exp(-|x|)))`.
fn build_log_sigmoid(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    let x = c.ids[0];
    let dt = b.ty(x)?.dtype;
    let nx = b.unary(UnaryOp::Neg, x)?;
    let zero = b.scalar(dt, 0.0)?;
    let pos = b.binary(BinaryOp::Maximum, nx, zero)?;
    let ax = b.unary(UnaryOp::Abs, x)?;
    let nax = b.unary(UnaryOp::Neg, ax)?;
    let e = b.unary(UnaryOp::Exp, nax)?;
    let l = b.unary(UnaryOp::Log1p, e)?;
    let sp = b.binary(BinaryOp::Add, pos, l)?;
    b.unary(UnaryOp::Neg, sp)
}

// ---- specialize ----

/// `pow(x, c)` with `c` a constant exponent among `exps`; the exponent goes in `ops` as an
/// interned 0-d constant so the builder knows which.
fn pow_by(eg: &KilnEGraph, c: Id, n: &Node, exps: &[f64]) -> Option<Caps> {
    let (x, e) = (n.args[0], n.args[1]);
    let s = eg[e].data.splat?;
    (is_float(eg, c) && exps.contains(&s) && same_ty(eg, x, c)).then(|| Caps::ids(&[x, e]))
}

fn pow_two(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    pow_by(eg, c, n, &[2.0])
}

fn pow_minus_one(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    pow_by(eg, c, n, &[-1.0])
}

fn pow_small_int(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    pow_by(eg, c, n, &[1.0, 3.0, 4.0, -2.0])
}

/// `x ** n` as squares and products: one rounding per multiplication, and no `pow` call.
fn build_pow(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    let x = c.ids[0];
    let s = b.eg[c.ids[1]].data.splat?;
    match s {
        1.0 => Some(x),
        2.0 => b.unary(UnaryOp::Square, x),
        3.0 => {
            let sq = b.unary(UnaryOp::Square, x)?;
            b.binary(BinaryOp::Mul, sq, x)
        }
        4.0 => {
            let sq = b.unary(UnaryOp::Square, x)?;
            b.unary(UnaryOp::Square, sq)
        }
        -1.0 => b.unary(UnaryOp::Reciprocal, x),
        -2.0 => {
            let sq = b.unary(UnaryOp::Square, x)?;
            b.unary(UnaryOp::Reciprocal, sq)
        }
        _ => None,
    }
}

/// `x * x` -> `square(x)`.
fn mul_self(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    (eg.find(n.args[0]) == eg.find(n.args[1])).then(|| Caps::ids(&[n.args[0]]))
}

fn build_square(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    b.unary(UnaryOp::Square, c.ids[0])
}

/// `1 / sqrt(x)` or `reciprocal(sqrt(x))` -> `rsqrt(x)` (which `perform` computes as
/// `1 / sqrt(x)`: the same value).
fn rsqrt(eg: &KilnEGraph, _: Id, n: &Node) -> Option<Caps> {
    let s = match op_of(eg, n) {
        Op::Binary(BinaryOp::Div) if splat_is(eg, n.args[0], 1.0) => n.args[1],
        Op::Unary(UnaryOp::Reciprocal) => n.args[0],
        _ => return None,
    };
    unary_in(eg, s, UnaryOp::Sqrt).map(|x| Caps::ids(&[x]))
}

fn build_rsqrt(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    b.unary(UnaryOp::Rsqrt, c.ids[0])
}

// ---- fast math ----

/// `x * 0` (NaN and inf times 0 are NaN, not 0).
fn mul_zero(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    let zero = |v: Id| splat_is(eg, v, 0.0) && eg[v].data.constant.is_some();
    if !(zero(n.args[0]) || zero(n.args[1])) {
        return None;
    }
    ty(eg, c)?.known_shape()?;
    Some(Caps::default())
}

/// `x - x` (inf - inf and NaN - NaN are NaN, not 0).
fn sub_self(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    (eg.find(n.args[0]) == eg.find(n.args[1]) && ty(eg, c)?.known_shape().is_some())
        .then(Caps::default)
}

fn build_zeros(b: &mut Builder, c: Id, _: &Node, _: &Caps) -> Option<Id> {
    let t = b.ty(c)?.clone();
    let shape = t.known_shape()?;
    if shape.iter().product::<usize>() <= MAX_FOLDED {
        b.full(t.dtype, &shape, 0.0)
    } else {
        b.op(
            Op::Zeros {
                shape,
                dtype: t.dtype,
            },
            &[],
        )
    }
}

/// `pow(x, 0.5)` -> `sqrt(x)` (they differ at -0.0 and -inf).
fn pow_half(eg: &KilnEGraph, c: Id, n: &Node) -> Option<Caps> {
    pow_by(eg, c, n, &[0.5])
}

fn build_sqrt(b: &mut Builder, _: Id, _: &Node, c: &Caps) -> Option<Id> {
    b.unary(UnaryOp::Sqrt, c.ids[0])
}

/// Every rule, in phase order; the fast-math ones only when asked for.
pub fn all_rules(fast_math: bool) -> Vec<Rule> {
    use Phase::*;
    let b = fam_binary;
    let u = fam_unary;
    let mut rules = vec![
        rule(
            "add-zero",
            Canonicalize,
            vec![b(BinaryOp::Add)],
            add_zero,
            keep,
        ),
        rule(
            "sub-zero",
            Canonicalize,
            vec![b(BinaryOp::Sub)],
            sub_zero,
            keep,
        ),
        rule(
            "mul-one",
            Canonicalize,
            vec![b(BinaryOp::Mul)],
            mul_one,
            keep,
        ),
        rule(
            "div-one",
            Canonicalize,
            vec![b(BinaryOp::Div)],
            div_one,
            keep,
        ),
        rule(
            "neg-neg",
            Canonicalize,
            vec![u(UnaryOp::Neg)],
            neg_neg,
            keep,
        ),
        rule(
            "transpose-transpose",
            Canonicalize,
            vec![FAM_TRANSPOSE],
            transpose_transpose,
            build_transpose_transpose,
        ),
        rule(
            "reshape-reshape",
            Canonicalize,
            vec![FAM_RESHAPE],
            reshape_reshape,
            build_reshape_reshape,
        ),
        rule(
            "no-op",
            Canonicalize,
            vec![
                FAM_TRANSPOSE,
                FAM_RESHAPE,
                FAM_BROADCAST_TO,
                FAM_CAST,
                FAM_SQUEEZE,
                FAM_EXPAND_DIMS,
            ],
            no_op,
            keep,
        ),
        rule(
            "sum-of-broadcast",
            Canonicalize,
            vec![fam_reduce(ReduceOp::Sum)],
            sum_of_broadcast,
            build_sum_of_broadcast,
        ),
        rule(
            "div-exact-reciprocal",
            Canonicalize,
            vec![b(BinaryOp::Div)],
            div_exact_reciprocal,
            build_div_exact_reciprocal,
        ),
        rule(
            "log1p",
            Stabilize,
            vec![u(UnaryOp::Log)],
            log1p,
            build_log1p,
        ),
        rule(
            "expm1",
            Stabilize,
            vec![b(BinaryOp::Sub)],
            expm1,
            build_expm1,
        ),
        rule(
            "logsumexp",
            Stabilize,
            vec![u(UnaryOp::Log)],
            logsumexp,
            build_logsumexp,
        ),
        rule(
            "log-softmax",
            Stabilize,
            vec![u(UnaryOp::Log)],
            log_softmax,
            build_log_softmax,
        ),
        rule(
            "log-sigmoid",
            Stabilize,
            vec![u(UnaryOp::Log)],
            log_sigmoid,
            build_log_sigmoid,
        ),
        rule(
            "pow-2-square",
            Specialize,
            vec![b(BinaryOp::Pow)],
            pow_two,
            build_pow,
        ),
        rule(
            "pow-minus-1-reciprocal",
            Specialize,
            vec![b(BinaryOp::Pow)],
            pow_minus_one,
            build_pow,
        ),
        rule(
            "pow-small-int",
            Specialize,
            vec![b(BinaryOp::Pow)],
            pow_small_int,
            build_pow,
        ),
        rule(
            "mul-self-square",
            Specialize,
            vec![b(BinaryOp::Mul)],
            mul_self,
            build_square,
        ),
        rule(
            "rsqrt",
            Specialize,
            vec![b(BinaryOp::Div), u(UnaryOp::Reciprocal)],
            rsqrt,
            build_rsqrt,
        ),
    ];
    for r in rules.iter_mut().filter(|r| r.phase == Stabilize) {
        r.replaces = true;
    }
    if fast_math {
        rules.extend([
            rule(
                "fast-mul-zero",
                Canonicalize,
                vec![b(BinaryOp::Mul)],
                mul_zero,
                build_zeros,
            ),
            rule(
                "fast-sub-self",
                Canonicalize,
                vec![b(BinaryOp::Sub)],
                sub_self,
                build_zeros,
            ),
            rule(
                "fast-pow-half-sqrt",
                Specialize,
                vec![b(BinaryOp::Pow)],
                pow_half,
                build_sqrt,
            ),
        ]);
    }
    rules
}

// ---- egg's Searcher and Applier for a Rule ----

struct Match {
    node: Node,
    caps: Caps,
}

/// A rule and the matches of its last search, which the applier takes (a match is passed to
/// egg as a substitution holding its index here).
struct Shared {
    rule: Rule,
    matches: Mutex<Vec<Match>>,
}

struct RuleSearcher(Arc<Shared>);
struct RuleApplier(Arc<Shared>);

/// The one substitution variable: the index of the match in [`Shared::matches`].
fn match_var() -> Var {
    Var::from_u32(0)
}

impl RuleSearcher {
    fn search_class(&self, eg: &KilnEGraph, class: Id, out: &mut Vec<Match>) -> Vec<Subst> {
        let rule = &self.0.rule;
        let mut substs = Vec::new();
        for n in &eg[class].nodes {
            if !n.fam().is_some_and(|f| rule.roots.contains(&f)) {
                continue;
            }
            if let Some(caps) = (rule.find)(eg, class, n) {
                let mut s = Subst::with_capacity(1);
                s.insert(match_var(), Id::from(out.len()));
                out.push(Match {
                    node: n.clone(),
                    caps,
                });
                substs.push(s);
            }
        }
        substs
    }
}

impl Searcher<Node, KilnAnalysis> for RuleSearcher {
    fn search_eclass_with_limit(
        &self,
        eg: &KilnEGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Node>> {
        let mut table = self.0.matches.lock().unwrap_or_else(|e| e.into_inner());
        let mut substs = self.search_class(eg, eclass, &mut table);
        substs.truncate(limit);
        (!substs.is_empty()).then_some(SearchMatches {
            eclass,
            substs,
            ast: None,
        })
    }

    fn search_with_limit(&self, eg: &KilnEGraph, mut limit: usize) -> Vec<SearchMatches<'_, Node>> {
        let mut table = self.0.matches.lock().unwrap_or_else(|e| e.into_inner());
        table.clear();
        let mut out = Vec::new();
        let mut seen = rustc_hash::FxHashSet::default();
        for &fam in &self.0.rule.roots {
            let Some(classes) = eg.classes_for_op(&Disc::Op(fam)) else {
                continue;
            };
            for class in classes {
                if limit == 0 {
                    return out;
                }
                if !seen.insert(class) {
                    continue;
                }
                let mut substs = self.search_class(eg, class, &mut table);
                substs.truncate(limit);
                limit -= substs.len();
                if !substs.is_empty() {
                    out.push(SearchMatches {
                        eclass: class,
                        substs,
                        ast: None,
                    });
                }
            }
        }
        out
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<Node, KilnAnalysis> for RuleApplier {
    fn apply_one(
        &self,
        eg: &mut KilnEGraph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        _: Symbol,
    ) -> Vec<Id> {
        let rule = &self.0.rule;
        let (node, caps) = {
            let table = self.0.matches.lock().unwrap_or_else(|e| e.into_inner());
            let Some(m) = subst
                .get(match_var())
                .and_then(|&i| table.get(usize::from(i)))
            else {
                return vec![];
            };
            (m.node.clone(), m.caps.clone())
        };
        let Some(new) = (rule.build)(&mut Builder { eg }, eclass, &node, &caps) else {
            return vec![];
        };
        // Only a term of exactly the matched value's type may replace it.
        if eg[new].data.ty != eg[eclass].data.ty {
            return vec![];
        }
        if rule.replaces {
            eg.analysis.avoid.push(node);
        }
        if eg.union(eclass, new) {
            vec![eg.find(eclass)]
        } else {
            vec![]
        }
    }
}

/// A rule as egg's `Rewrite`.
pub fn rewrite(rule: Rule) -> (Phase, Rewrite<Node, KilnAnalysis>) {
    let phase = rule.phase;
    let name = rule.name;
    let shared = Arc::new(Shared {
        rule,
        matches: Mutex::new(Vec::new()),
    });
    let rw = Rewrite::new(name, RuleSearcher(shared.clone()), RuleApplier(shared))
        .expect("rules bind no pattern variables");
    (phase, rw)
}
