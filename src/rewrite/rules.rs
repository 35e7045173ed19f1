//! Algebraic, stabilizing and specializing rewrites, applied as local rules on the SSA form.
//! Each rule looks at one instruction and the instructions that define its arguments, and may
//! replace it by new instructions computing the same value; the replaced value's readers then
//! read the new one (what is left unread is removed). Rules never change a finite result beyond
//! rounding, and change NaN or inf behaviour only where the result gets better (a
//! `logsumexp` that stays finite where the naive form overflows).
//!
//! | phase | rule |
//! | --- | --- |
//! | canonicalize | `x + 0`, `x - 0`, `x * 1`, `x / 1` -> `x`; `--x` -> `x`; transpose of transpose -> one transpose (or none); reshape of reshape -> one reshape; `x / c` -> `x * (1/c)` when `c` is a power of two |
//! | stabilize | `log(1 + x)` -> `log1p(x)`; `exp(x) - 1` -> `expm1(x)`; `log(sum(exp(x)))` -> max-shifted logsumexp; `log(exp(d) / sum(exp(d)))` -> `d - log(sum(exp(d)))` (log-softmax); `log(sigmoid(x))` -> `-softplus(-x)` |
//! | specialize | `pow(x, 2)` -> `square(x)`; `pow(x, -1)` -> `reciprocal(x)` |
//!
//! Only rewrites whose result has exactly the type of the value they replace are applied.

use crate::ir::{BinaryOp, DType, Func, Inst, Op, ReduceOp, TensorType, UnaryOp, Value};
use crate::tensor::Tensor;
use std::collections::HashMap;

/// How many passes over the function at most; each pass applies every rule once per
/// instruction, so the rewriting always ends.
pub const MAX_PASSES: usize = 4;

struct Ctx<'a> {
    func: &'a mut Func,
    defs: HashMap<Value, Inst>,
    /// New instructions of the current replacement.
    out: Vec<Inst>,
}

impl Ctx<'_> {
    fn def(&self, v: Value) -> Option<&Inst> {
        self.defs.get(&v)
    }
    /// The value of a 0-d (or all-equal) constant argument.
    fn scalar(&self, v: Value) -> Option<f64> {
        match &self.def(v)?.op {
            Op::Const(t) if !t.is_empty() => {
                let vals = t.to_f64_vec();
                vals.iter()
                    .all(|&x| x.to_bits() == vals[0].to_bits())
                    .then_some(vals[0])
            }
            _ => None,
        }
    }
    fn ty(&self, v: Value) -> TensorType {
        self.func.ty(v).clone()
    }
    fn emit(&mut self, op: Op, args: &[Value]) -> Option<Value> {
        let inst = self.func.make_inst(op, args).ok()?;
        let r = inst.results[0];
        self.defs.insert(r, inst.clone());
        self.out.push(inst);
        Some(r)
    }
    fn constant(&mut self, dtype: DType, v: f64) -> Option<Value> {
        self.emit(Op::Const(Tensor::full(dtype, &[], v)), &[])
    }
    fn unary(&mut self, u: UnaryOp, x: Value) -> Option<Value> {
        self.emit(Op::Unary(u), &[x])
    }
    fn binary(&mut self, b: BinaryOp, x: Value, y: Value) -> Option<Value> {
        self.emit(Op::Binary(b), &[x, y])
    }
}

fn un(inst: &Inst, u: UnaryOp) -> Option<Value> {
    (inst.op == Op::Unary(u)).then(|| inst.args[0])
}

fn bin(inst: &Inst, b: BinaryOp) -> Option<(Value, Value)> {
    (inst.op == Op::Binary(b)).then(|| (inst.args[0], inst.args[1]))
}

/// Whether `x` is `a - max(a)` (or the finite-guarded max this module's logsumexp makes).
fn max_shifted(c: &Ctx, x: Value) -> bool {
    let Some((a, m)) = c.def(x).and_then(|d| bin(d, BinaryOp::Sub)) else {
        return false;
    };
    let is_max_of_a = |v: Value| {
        c.def(v).is_some_and(|d| {
            matches!(
                d.op,
                Op::Reduce {
                    op: ReduceOp::Max,
                    ..
                }
            ) && d.args[0] == a
        })
    };
    is_max_of_a(m)
        || c.def(m)
            .is_some_and(|d| d.op == Op::Select && is_max_of_a(d.args[1]))
}

/// Tries every rule on `inst`; returns the value that replaces its result.
fn rewrite(c: &mut Ctx, inst: &Inst) -> Option<Value> {
    if inst.results.len() != 1 || !inst.regions.is_empty() {
        return None;
    }
    let float = c.ty(inst.results[0]).dtype.is_float();
    let is = |c: &Ctx, v: Value, x: f64| c.scalar(v).is_some_and(|s| s == x);
    // canonicalize
    if let Some((a, b)) = bin(inst, BinaryOp::Add) {
        if is(c, b, 0.0) {
            return Some(a);
        }
        if is(c, a, 0.0) {
            return Some(b);
        }
    }
    if let Some((a, b)) = bin(inst, BinaryOp::Sub) {
        if is(c, b, 0.0) {
            return Some(a);
        }
    }
    if let Some((a, b)) = bin(inst, BinaryOp::Mul) {
        if is(c, b, 1.0) {
            return Some(a);
        }
        if is(c, a, 1.0) {
            return Some(b);
        }
    }
    if let Some((a, b)) = bin(inst, BinaryOp::Div) {
        if is(c, b, 1.0) {
            return Some(a);
        }
        // x / c -> x * (1/c), exact when c is a power of two.
        if let Some(s) = c.scalar(b) {
            let r = 1.0 / s;
            let exact = s != 0.0
                && s.is_finite()
                && r.is_finite()
                && (r * s == 1.0)
                && s.abs().log2().fract() == 0.0;
            if exact {
                let k = c.emit(Op::Const(Tensor::full(c.ty(b).dtype, &[], r)), &[])?;
                let k = if c.ty(b).rank() == 0 { k } else { return None };
                return c.binary(BinaryOp::Mul, a, k);
            }
        }
    }
    if let Some(x) = un(inst, UnaryOp::Neg) {
        if let Some(y) = c.def(x).and_then(|d| un(d, UnaryOp::Neg)) {
            return Some(y);
        }
    }
    if let Op::Transpose { perm } = &inst.op {
        if let Some(Op::Transpose { perm: inner }) = c.def(inst.args[0]).map(|d| d.op.clone()) {
            let x = c.def(inst.args[0])?.args[0];
            let composed: Vec<usize> = perm.iter().map(|&p| inner[p]).collect();
            if composed.iter().enumerate().all(|(i, &p)| i == p) {
                return Some(x);
            }
            return c.emit(Op::Transpose { perm: composed }, &[x]);
        }
    }
    if let Op::Reshape { shape } = &inst.op {
        if let Some(d) = c
            .def(inst.args[0])
            .filter(|d| matches!(d.op, Op::Reshape { .. }))
        {
            let x = d.args[0];
            return c.emit(
                Op::Reshape {
                    shape: shape.clone(),
                },
                &[x],
            );
        }
    }
    if !float {
        return None;
    }
    // stabilize
    if let Some(arg) = un(inst, UnaryOp::Log) {
        let d = c.def(arg)?.clone();
        // log(1 + x) -> log1p(x)
        if let Some((a, b)) = bin(&d, BinaryOp::Add) {
            if is(c, a, 1.0) {
                return c.unary(UnaryOp::Log1p, b);
            }
            if is(c, b, 1.0) {
                return c.unary(UnaryOp::Log1p, a);
            }
        }
        // log(sigmoid(x)) -> -softplus(-x) = -(max(-x, 0) + log1p(exp(-|x|)))
        if let Some(x) = un(&d, UnaryOp::Sigmoid) {
            let dt = c.ty(x).dtype;
            let nx = c.unary(UnaryOp::Neg, x)?;
            let zero = c.constant(dt, 0.0)?;
            let pos = c.binary(BinaryOp::Maximum, nx, zero)?;
            let ax = c.unary(UnaryOp::Abs, x)?;
            let nax = c.unary(UnaryOp::Neg, ax)?;
            let e = c.unary(UnaryOp::Exp, nax)?;
            let l = c.unary(UnaryOp::Log1p, e)?;
            let sp = c.binary(BinaryOp::Add, pos, l)?;
            return c.unary(UnaryOp::Neg, sp);
        }
        // log(sum(exp(x))) -> m + log(sum(exp(x - m))), with m the max where it is finite;
        // not when x already has its max subtracted (a softmax written the stable way, or
        // this rule's own result).
        if let Op::Reduce {
            op: ReduceOp::Sum,
            axes,
            keepdims,
        } = &d.op
        {
            if let Some(x) = c
                .def(d.args[0])
                .and_then(|e| un(e, UnaryOp::Exp))
                .filter(|&x| !max_shifted(c, x))
            {
                let dt = c.ty(x).dtype;
                let m = c.emit(
                    Op::Reduce {
                        op: ReduceOp::Max,
                        axes: axes.clone(),
                        keepdims: true,
                    },
                    &[x],
                )?;
                let mm = c.binary(BinaryOp::Sub, m, m)?;
                let zero = c.constant(dt, 0.0)?;
                let finite = c.binary(BinaryOp::Eq, mm, zero)?;
                let safe = c.emit(Op::Select, &[finite, m, zero])?;
                let shifted = c.binary(BinaryOp::Sub, x, safe)?;
                let e = c.unary(UnaryOp::Exp, shifted)?;
                let s = c.emit(
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        axes: axes.clone(),
                        keepdims: *keepdims,
                    },
                    &[e],
                )?;
                let l = c.unary(UnaryOp::Log, s)?;
                let shift = if *keepdims {
                    safe
                } else {
                    let all: Vec<usize> = (0..c.ty(x).rank()).collect();
                    let squeeze = axes.clone().unwrap_or(all);
                    c.emit(Op::Squeeze { axes: squeeze }, &[safe])?
                };
                return c.binary(BinaryOp::Add, l, shift);
            }
        }
        // log(exp(d) / s) with s = sum(exp(d)) -> d - log(s)  (log-softmax)
        if let Some((num, den)) = bin(&d, BinaryOp::Div) {
            let e = c.def(num).cloned()?;
            if let Some(inner) = un(&e, UnaryOp::Exp) {
                let s = c.def(den)?.clone();
                if matches!(
                    s.op,
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        keepdims: true,
                        ..
                    }
                ) && s.args[0] == num
                {
                    let l = c.unary(UnaryOp::Log, den)?;
                    return c.binary(BinaryOp::Sub, inner, l);
                }
            }
        }
    }
    // exp(x) - 1 -> expm1(x)
    if let Some((a, b)) = bin(inst, BinaryOp::Sub) {
        if is(c, b, 1.0) {
            if let Some(x) = c.def(a).and_then(|d| un(d, UnaryOp::Exp)) {
                return c.unary(UnaryOp::Expm1, x);
            }
        }
    }
    // specialize
    if let Some((a, b)) = bin(inst, BinaryOp::Pow) {
        if is(c, b, 2.0) {
            return c.unary(UnaryOp::Square, a);
        }
        if is(c, b, -1.0) {
            return c.unary(UnaryOp::Reciprocal, a);
        }
    }
    None
}

/// Applies the rules to the top-level body until nothing changes (at most [`MAX_PASSES`]).
pub fn simplify(func: &Func) -> Func {
    let mut f = func.clone();
    for _ in 0..MAX_PASSES {
        if !pass(&mut f) {
            break;
        }
    }
    remove_unread(&mut f);
    f
}

fn pass(f: &mut Func) -> bool {
    let body = std::mem::take(&mut f.body);
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let mut out = Vec::with_capacity(body.len());
    let mut changed = false;
    let mut defs: HashMap<Value, Inst> = HashMap::new();
    for mut inst in body {
        for a in inst.args.iter_mut() {
            if let Some(&s) = subst.get(a) {
                *a = s;
            }
        }
        let mut c = Ctx {
            func: f,
            defs: std::mem::take(&mut defs),
            out: Vec::new(),
        };
        let replaced = rewrite(&mut c, &inst);
        let (new_insts, d) = (std::mem::take(&mut c.out), std::mem::take(&mut c.defs));
        defs = d;
        match replaced {
            Some(v) if f.ty(v) == f.ty(inst.results[0]) && v != inst.results[0] => {
                // A value the rule made takes the replaced value's name, for readable dumps.
                if new_insts.iter().any(|i| i.results.contains(&v))
                    && f.values[v.index()].name.is_none()
                {
                    f.values[v.index()].name = f.values[inst.results[0].index()].name.clone();
                }
                subst.insert(inst.results[0], v);
                out.extend(new_insts);
                changed = true;
            }
            _ => {
                for r in &inst.results {
                    defs.insert(*r, inst.clone());
                }
                out.push(inst);
            }
        }
    }
    for o in f.outputs.iter_mut() {
        if let Some(&s) = subst.get(o) {
            *o = s;
        }
    }
    for inst in out.iter_mut() {
        for r in inst.regions.iter_mut() {
            substitute(&mut r.body, &mut r.yields, &subst);
        }
    }
    f.body = out;
    changed
}

fn substitute(body: &mut [Inst], yields: &mut [Value], subst: &HashMap<Value, Value>) {
    for inst in body.iter_mut() {
        for a in inst.args.iter_mut() {
            if let Some(&s) = subst.get(a) {
                *a = s;
            }
        }
        for r in inst.regions.iter_mut() {
            substitute(&mut r.body, &mut r.yields, subst);
        }
    }
    for y in yields.iter_mut() {
        if let Some(&s) = subst.get(y) {
            *y = s;
        }
    }
}

/// Drops top-level instructions whose results nobody reads, except those that must run for
/// their effects (custom ops may keep state).
fn remove_unread(f: &mut Func) {
    loop {
        let read = super::read_values(f);
        let before = f.body.len();
        f.body.retain(|i| {
            matches!(i.op, Op::Custom(_)) || i.results.iter().any(|r| read.contains(r))
        });
        if f.body.len() == before {
            return;
        }
    }
}
