//! Moving work out of `scan` loops, as Theano's `scan_pushout` optimizations did: a loop step
//! that multiplies small matrices one at a time pays a call per product, where the same work
//! done once over the whole sequence is one large product at the GEMM's full rate. Four
//! rewrites, run on every scan (inner ones first) before the e-graph pass:
//!
//! 1. **Invariants out.** A step that reads nothing the loop changes (no carry, no slice,
//!    nothing computed from them) runs once before the scan. Views and constants stay where
//!    they are (they cost nothing, and the lowering folds a transpose into the product that
//!    reads it); they are copied out only where something moved out reads them.
//! 2. **Products of the sequences.** `matmul(x_t, w)` of a slice `x_t` (`[m, k]`) by an
//!    invariant matrix becomes one product of the whole sequence before the loop,
//!    `reshape(reshape(xs, [-1, k]) @ w, [-1, m, q])`, read by the body as a new sequence: an
//!    RNN's input projection.
//! 3. **Sums over the steps.** A carry that only accumulates, `acc' = acc + e` with `acc`
//!    read by nothing else, goes: `e`'s parts are stacked and summed once after the loop. For
//!    `e = transpose(a_t) @ b_t` (`[m, p]`, `[m, q]`) the sum over the steps is one product
//!    `transpose(reshape(A, [-1, p])) @ reshape(B, [-1, q])`; for `e = sum(v_t, axes [0])` it
//!    is one sum of the stacked `v` over its two leading axes. These are the weight and bias
//!    gradients of a recurrent layer, which its reverse scan otherwise adds step by step.
//! 4. **Products of the stacked outputs.** A product `matmul(a_t, w)` (invariant `w`) that
//!    the body only yields as a stacked output is computed after the loop from the stacked
//!    `a_t` in one product: the gradient a recurrent layer sends to its inputs.
//!
//! A stacked `a_t` that is a slice of a sequence is that sequence; another value is yielded
//! as a new stacked output (once, however many rewrites read it). Stacked outputs and slices
//! are in the sequences' order in both directions, so each step's parts line up.
//!
//! Rewrites 1, 2 and 4 compute each element from the same terms in the same order (a
//! product's k order does not depend on its row count), so the results keep their bits.
//! Rewrite 3 adds the steps' terms in another order (one sum over all steps and rows rather
//! than the carry's running sum), so its results change by rounding, as any reassociation
//! does; it runs on f32, f64 and the integer types (where wrapping sums are exact in any
//! order), not on halves, whose running sum rounds at each step. docs/optimizer.md says so.
//!
//! Nothing that may fail at run time, draws random numbers, calls user code or holds regions
//! moves, so a loop of zero steps (which runs the moved steps for nothing) still gives what
//! it gave: its carries' start values (an accumulator's plus a sum of nothing, zeros) and
//! empty stacks.

use crate::ir::{BinaryOp, DType, Func, Inst, Op, ReduceOp, TensorType, Value};
use std::collections::{HashMap, HashSet};

/// Applies the four rewrites to every scan of `f` (nested ones first); returns how many
/// steps moved out of loops.
pub fn push_out_of_scans(f: &mut Func) -> usize {
    let mut body = std::mem::take(&mut f.body);
    let n = walk(f, &mut body);
    f.body = body;
    n
}

/// The rewrites on the scans of `body` and of the regions inside it.
fn walk(f: &mut Func, body: &mut Vec<Inst>) -> usize {
    let mut moved = 0;
    for inst in body.iter_mut() {
        for r in &mut inst.regions {
            let mut inner = std::mem::take(&mut r.body);
            moved += walk(f, &mut inner);
            r.body = inner;
        }
    }
    let mut out = Vec::with_capacity(body.len());
    for inst in body.drain(..) {
        if !matches!(inst.op, Op::Scan { .. }) || inst.regions.len() != 1 {
            out.push(inst);
            continue;
        }
        let mut scan = Loop::new(inst);
        let mut before = Vec::new();
        let mut after = Vec::new();
        moved += scan.hoist_invariants(f, &mut before);
        moved += scan.sequence_products(f, &mut before);
        moved += scan.accumulators(f, &mut after);
        // The sums' products are dead now: gone, they no longer count as readers.
        scan.drop_dead_steps();
        moved += scan.output_products(f, &mut before, &mut after);
        scan.drop_dead_steps();
        out.extend(before);
        out.push(scan.inst);
        out.extend(after);
    }
    *body = out;
    moved
}

/// Ops that may move out of a loop: pure, no regions (`Func::may_fail` is asked as well).
fn movable(inst: &Inst) -> bool {
    inst.regions.is_empty()
        && !matches!(
            inst.op,
            Op::Random { .. } | Op::Custom(_) | Op::Scan { .. } | Op::IfElse
        )
}

/// Views and constants: free to leave in the loop, copied out only for a step that moved.
fn is_cheap(op: &Op) -> bool {
    matches!(
        op,
        Op::Transpose { .. }
            | Op::Reshape { .. }
            | Op::BroadcastTo { .. }
            | Op::ExpandDims { .. }
            | Op::Squeeze { .. }
            | Op::Slice { .. }
            | Op::Const(_)
            | Op::Zeros { .. }
            | Op::Ones { .. }
            | Op::Full { .. }
            | Op::Arange { .. }
    )
}

/// A scan being rewritten: its instruction, taken apart where the rewrites need it.
struct Loop {
    inst: Inst,
    /// The values computed outside the body for body values that do not change from step to
    /// step (the cheap ones copied out), by body value.
    outside: HashMap<Value, Value>,
}

impl Loop {
    fn new(inst: Inst) -> Loop {
        Loop {
            inst,
            outside: HashMap::new(),
        }
    }

    /// How many carries the scan has now (the sums' rewrite drops some).
    fn carries(&self) -> usize {
        match self.inst.op {
            Op::Scan { carries, .. } => carries,
            _ => unreachable!("only scans are walked"),
        }
    }

    fn region(&self) -> &crate::ir::Region {
        &self.inst.regions[0]
    }

    fn region_mut(&mut self) -> &mut crate::ir::Region {
        &mut self.inst.regions[0]
    }

    /// The values the loop changes: its parameters and everything computed from them (and
    /// the results of steps that cannot move).
    fn variant(&self, f: &Func) -> HashSet<Value> {
        let r = self.region();
        let mut variant: HashSet<Value> = r.params.iter().copied().collect();
        for i in &r.body {
            let reads_variant = i.args.iter().any(|a| variant.contains(a));
            if reads_variant || !movable(i) || f.may_fail(i) {
                variant.extend(i.results.iter().copied());
            }
        }
        variant
    }

    /// Where the body defines each of its values (position in the body).
    fn defs(&self) -> HashMap<Value, usize> {
        (self.region().body.iter().enumerate())
            .flat_map(|(k, i)| i.results.iter().map(move |&v| (v, k)))
            .collect()
    }

    /// How often each value is read inside the body (instructions at any depth, yields).
    fn reads(&self) -> HashMap<Value, usize> {
        let mut reads = HashMap::new();
        super::count_reads(&self.region().body, &mut reads);
        for &y in &self.region().yields {
            *reads.entry(y).or_default() += 1;
        }
        reads
    }

    /// Rewrite 1: the steps that change nothing from step to step move before the loop.
    fn hoist_invariants(&mut self, f: &mut Func, before: &mut Vec<Inst>) -> usize {
        let variant = self.variant(f);
        let body = &self.region().body;
        let invariant = |i: &Inst| !i.results.iter().any(|r| variant.contains(r));
        // Cheap steps move only when a step that moves reads them (walking back, so that a
        // reader is decided before what it reads).
        let mut moves = vec![false; body.len()];
        let mut needed: HashSet<Value> = HashSet::new();
        for (k, i) in body.iter().enumerate().rev() {
            if !invariant(i) {
                continue;
            }
            if !is_cheap(&i.op) || i.results.iter().any(|r| needed.contains(r)) {
                moves[k] = true;
                needed.extend(i.args.iter().copied());
            }
        }
        if !moves.contains(&true) {
            return 0;
        }
        // What the steps that stay read: a cheap step that one of them reads is copied out
        // under new names rather than moved.
        let mut stay_reads = self.reads();
        for (i, _) in body.iter().zip(&moves).filter(|(_, &m)| m) {
            for a in &i.args {
                if let Some(n) = stay_reads.get_mut(a) {
                    *n -= 1;
                }
            }
        }
        let stays = |v: &Value| stay_reads.get(v).is_some_and(|&n| n > 0);
        let body = std::mem::take(&mut self.region_mut().body);
        let mut kept = Vec::with_capacity(body.len());
        let mut renamed: HashMap<Value, Value> = HashMap::new();
        let mut count = 0;
        for (i, m) in body.into_iter().zip(moves) {
            if !m {
                kept.push(i);
                continue;
            }
            count += 1;
            let mut out = i.clone();
            for a in &mut out.args {
                if let Some(&r) = renamed.get(a) {
                    *a = r;
                }
            }
            if is_cheap(&i.op) && i.results.iter().any(stays) {
                out.results = (i.results.iter())
                    .map(|&r| {
                        let fresh = fresh_like(f, r);
                        renamed.insert(r, fresh);
                        fresh
                    })
                    .collect();
                kept.push(i);
            }
            before.push(out);
        }
        self.region_mut().body = kept;
        count
    }

    /// `v` as a value computed outside the loop, when it does not change from step to step:
    /// `v` itself when defined outside, else a copy of the cheap steps that make it, pushed to
    /// `before` (once) under new names. `None` for a value the loop changes.
    fn invariant_outside(
        &mut self,
        f: &mut Func,
        v: Value,
        before: &mut Vec<Inst>,
    ) -> Option<Value> {
        if let Some(&o) = self.outside.get(&v) {
            return Some(o);
        }
        if self.region().params.contains(&v) {
            return None;
        }
        let Some(&k) = self.defs().get(&v) else {
            return Some(v);
        };
        let inst = self.region().body[k].clone();
        if !is_cheap(&inst.op) || !movable(&inst) || f.may_fail(&inst) || inst.results.len() != 1 {
            return None;
        }
        let mut args = Vec::with_capacity(inst.args.len());
        for &a in &inst.args {
            args.push(self.invariant_outside(f, a, before)?);
        }
        let fresh = fresh_like(f, v);
        before.push(Inst {
            args,
            results: vec![fresh],
            ..inst
        });
        self.outside.insert(v, fresh);
        Some(fresh)
    }

    /// The scan's length as the types know it.
    fn length(&self, f: &Func) -> Option<usize> {
        self.inst.args[self.carries()..]
            .iter()
            .find_map(|&x| f.ty(x).shape[0])
    }

    /// The stacked history of the per-step value `v`: the sequence whose slice it is, a
    /// stacked output that already yields it, or a new one.
    fn stacked(&mut self, f: &mut Func, v: Value) -> Value {
        let n_c = self.carries();
        if let Some(j) = self.region().params.iter().position(|&p| p == v) {
            if j >= n_c {
                return self.inst.args[j];
            }
        }
        if let Some(j) =
            (self.region().yields.iter().enumerate()).position(|(j, &y)| j >= n_c && y == v)
        {
            return self.inst.results[j];
        }
        let mut shape = vec![self.length(f)];
        shape.extend(&f.ty(v).shape);
        let ty = TensorType::new(f.ty(v).dtype, shape);
        let r = value_at(f, ty, v);
        self.region_mut().yields.push(v);
        self.inst.results.push(r);
        r
    }

    /// `(a, w, a @ w)` where the body's step `k` is a product.
    fn product_at(&self, k: usize) -> Option<(Value, Value, Value)> {
        let inst = &self.region().body[k];
        match (&inst.op, inst.args.as_slice()) {
            (Op::MatMul, &[a, w]) => Some((a, w, inst.results[0])),
            _ => None,
        }
    }

    /// Rewrite 2: products of a slice by an invariant matrix become one product of the
    /// sequence, read as a new sequence.
    fn sequence_products(&mut self, f: &mut Func, before: &mut Vec<Inst>) -> usize {
        let mut moved = 0;
        let mut k = 0;
        while k < self.region().body.len() {
            let Some((a, w, v)) = self.product_at(k) else {
                k += 1;
                continue;
            };
            let params = &self.region().params;
            let Some(j) = params
                .iter()
                .position(|&p| p == a)
                .filter(|&j| j >= self.carries())
            else {
                k += 1;
                continue;
            };
            let xs = self.inst.args[j];
            let Some(w_out) = self.invariant_outside(f, w, before) else {
                k += 1;
                continue;
            };
            let mut emitted = Vec::new();
            let Some(ys) = stacked_product(f, xs, a, w_out, v, &mut emitted) else {
                k += 1;
                continue;
            };
            before.extend(emitted);
            // The product's value becomes the slice of the new sequence.
            let region = self.region_mut();
            region.body.remove(k);
            region.params.push(v);
            self.inst.args.push(ys);
            moved += 1;
        }
        moved
    }

    /// Rewrite 4: products the body only yields as stacked outputs are made after the loop.
    fn output_products(
        &mut self,
        f: &mut Func,
        before: &mut Vec<Inst>,
        after: &mut Vec<Inst>,
    ) -> usize {
        let n_c = self.carries();
        let mut moved = 0;
        let mut k = 0;
        while k < self.region().body.len() {
            let Some((a, w, v)) = self.product_at(k) else {
                k += 1;
                continue;
            };
            let yields = &self.region().yields;
            let at: Vec<usize> = (0..yields.len()).filter(|&j| yields[j] == v).collect();
            let only_stacked = at.len() == 1 && at[0] >= n_c;
            if !only_stacked || self.reads().get(&v) != Some(&1) || a == v {
                k += 1;
                continue;
            }
            let Some(w_out) = self.invariant_outside(f, w, before) else {
                k += 1;
                continue;
            };
            if !self.per_step(f, a) {
                k += 1;
                continue;
            }
            let stacked_a = self.stacked(f, a);
            let mut emitted = Vec::new();
            let target = self.inst.results[at[0]];
            let Some(made) = stacked_product(f, stacked_a, a, w_out, v, &mut emitted) else {
                k += 1;
                continue;
            };
            if !retarget(f, &mut emitted, made, target) {
                k += 1;
                continue;
            }
            after.extend(emitted);
            self.region_mut().yields.remove(at[0]);
            self.inst.results.remove(at[0]);
            self.region_mut().body.remove(k);
            moved += 1;
        }
        moved
    }

    /// Rewrite 3: carries that only accumulate are summed once after the loop.
    fn accumulators(&mut self, f: &mut Func, after: &mut Vec<Inst>) -> usize {
        let mut gone = Vec::new();
        for j in 0..self.carries() {
            if self.accumulator(f, j, after) {
                gone.push(j);
            }
        }
        for &j in gone.iter().rev() {
            let region = self.region_mut();
            region.params.remove(j);
            region.yields.remove(j);
            self.inst.args.remove(j);
            self.inst.results.remove(j);
        }
        if let Op::Scan { carries, .. } = &mut self.inst.op {
            *carries -= gone.len();
        }
        gone.len()
    }

    /// Rewrite 3 for carry `j`, if it only accumulates a form summed at once; the carry's
    /// result is then defined after the loop (the caller drops the carry).
    fn accumulator(&mut self, f: &mut Func, j: usize, after: &mut Vec<Inst>) -> bool {
        let (p, y) = (self.region().params[j], self.region().yields[j]);
        let reads = self.reads();
        let dtype = f.ty(p).dtype;
        let exact_or_wide = dtype.is_int() || matches!(dtype, DType::F32 | DType::F64);
        if !exact_or_wide || reads.get(&p) != Some(&1) || reads.get(&y) != Some(&1) {
            return false;
        }
        let defs = self.defs();
        let Some(&d) = defs.get(&y) else {
            return false;
        };
        let add = &self.region().body[d];
        let e = match (&add.op, add.args.as_slice()) {
            (Op::Binary(BinaryOp::Add), &[x, e]) if x == p => e,
            (Op::Binary(BinaryOp::Add), &[e, x]) if x == p => e,
            _ => return false,
        };
        if f.ty(e) != f.ty(p) || e == p || self.region().yields[..self.carries()].contains(&e) {
            return false;
        }
        let Some(&de) = defs.get(&e) else {
            return false;
        };
        let made = self.region().body[de].clone();
        let init = self.inst.args[j];
        let target = self.inst.results[j];
        let mut emitted = Vec::new();
        let total = match (&made.op, made.args.as_slice()) {
            (Op::MatMul, &[t, b]) => {
                let Some(&dt) = defs.get(&t) else {
                    return false;
                };
                let tr = &self.region().body[dt];
                let a = match (&tr.op, tr.args.as_slice()) {
                    (Op::Transpose { perm }, &[a]) if perm == &[1, 0] => a,
                    _ => return false,
                };
                if self.per_step(f, a) && self.per_step(f, b) {
                    let (sa, sb) = (self.stacked(f, a), self.stacked(f, b));
                    sum_of_products(f, sa, sb, a, b, e, &mut emitted)
                } else {
                    None
                }
            }
            (
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: Some(axes),
                    keepdims: false,
                },
                &[v],
            ) if axes == &[0] && self.per_step(f, v) => {
                let sv = self.stacked(f, v);
                emit(
                    f,
                    &mut emitted,
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        axes: Some(vec![0, 1]),
                        keepdims: false,
                    },
                    &[sv],
                    e,
                )
            }
            _ => None,
        };
        let Some(total) = total else {
            return false;
        };
        let Some(sum) = emit(
            f,
            &mut emitted,
            Op::Binary(BinaryOp::Add),
            &[init, total],
            y,
        ) else {
            return false;
        };
        if !retarget(f, &mut emitted, sum, target) {
            return false;
        }
        after.extend(emitted);
        self.region_mut().body.remove(d);
        true
    }

    /// Whether `v` changes from step to step (a parameter, or computed from one), so that its
    /// stacked history is worth building.
    fn per_step(&mut self, f: &Func, v: Value) -> bool {
        self.variant(f).contains(&v)
    }

    /// Drops the body's steps whose results nothing reads (what the rewrites left behind),
    /// until none is left. Nothing with effects is dropped: user ops stay.
    fn drop_dead_steps(&mut self) {
        loop {
            let reads = self.reads();
            let region = self.region_mut();
            let before = region.body.len();
            region.body.retain(|i| {
                matches!(i.op, Op::Custom(_))
                    || i.results
                        .iter()
                        .any(|r| reads.get(r).copied().unwrap_or(0) > 0)
            });
            if region.body.len() == before {
                return;
            }
        }
    }
}

/// A new value of `v`'s type and source line.
fn fresh_like(f: &mut Func, v: Value) -> Value {
    let ty = f.ty(v).clone();
    value_at(f, ty, v)
}

/// A new value of type `ty` with `like`'s source line.
fn value_at(f: &mut Func, ty: TensorType, like: Value) -> Value {
    let fresh = f.new_value(ty, None);
    f.values[fresh.index()].loc = f.values[like.index()].loc.clone();
    fresh
}

/// Appends `op(args)` to `out` with its result named after `like` (its source line), and
/// returns the result; `None` if the types do not fit.
fn emit(f: &mut Func, out: &mut Vec<Inst>, op: Op, args: &[Value], like: Value) -> Option<Value> {
    let inst = f.make_inst(op, args).ok()?;
    let r = *inst.results.first()?;
    f.values[r.index()].loc = f.values[like.index()].loc.clone();
    out.push(inst);
    Some(r)
}

/// Makes the last instruction of `emitted`, which defines `made`, define `target` instead
/// (the scan result it replaces, so that its readers need no renaming), if the types agree.
fn retarget(f: &Func, emitted: &mut [Inst], made: Value, target: Value) -> bool {
    let (m, t) = (f.ty(made), f.ty(target));
    let agree = m.dtype == t.dtype
        && m.rank() == t.rank()
        && (m.shape.iter().zip(&t.shape)).all(|(a, b)| a.is_none() || b.is_none() || a == b);
    let Some(last) = emitted.last_mut() else {
        return false;
    };
    if !agree || last.results != [made] {
        return false;
    }
    last.results[0] = target;
    true
}

/// `reshape(reshape(xs, [-1, k]) @ w, [-1, m, q])`: the product of each slice `[m, k]` of the
/// stacked `xs` by `w`, in one product. `slice` and `v` are a slice and a product of the
/// body, for their types. `None` where the dims are not known or the types do not fit.
fn stacked_product(
    f: &mut Func,
    xs: Value,
    slice: Value,
    w: Value,
    v: Value,
    out: &mut Vec<Inst>,
) -> Option<Value> {
    let (st, vt, wt) = (f.ty(slice), f.ty(v), f.ty(w));
    if st.rank() != 2 || wt.rank() != 2 || vt.rank() != 2 {
        return None;
    }
    let [Some(m), Some(k)] = [st.shape[0], st.shape[1]] else {
        return None;
    };
    let q = vt.shape[1]?;
    // A `-1` among zero dims says nothing (and the rewrite gains nothing there).
    if m == 0 || k == 0 || q == 0 {
        return None;
    }
    let flat = emit(f, out, reshape(&[-1, k as i64]), &[xs], xs)?;
    let prod = emit(f, out, Op::MatMul, &[flat, w], v)?;
    emit(f, out, reshape(&[-1, m as i64, q as i64]), &[prod], v)
}

/// `transpose(reshape(sa, [-1, p])) @ reshape(sb, [-1, q])`: the sum over the steps of
/// `transpose(a_t) @ b_t` for the stacked `a` (`[m, p]` per step) and `b` (`[m, q]`).
fn sum_of_products(
    f: &mut Func,
    sa: Value,
    sb: Value,
    a: Value,
    b: Value,
    e: Value,
    out: &mut Vec<Inst>,
) -> Option<Value> {
    let (at, bt) = (f.ty(a), f.ty(b));
    if at.rank() != 2 || bt.rank() != 2 || at.shape[0]? != bt.shape[0]? {
        return None;
    }
    let (p, q) = (at.shape[1]?, bt.shape[1]?);
    if at.shape[0] == Some(0) || p == 0 || q == 0 {
        return None;
    }
    let fa = emit(f, out, reshape(&[-1, p as i64]), &[sa], a)?;
    let fb = emit(f, out, reshape(&[-1, q as i64]), &[sb], b)?;
    let ta = emit(f, out, Op::Transpose { perm: vec![1, 0] }, &[fa], a)?;
    emit(f, out, Op::MatMul, &[ta, fb], e)
}

fn reshape(shape: &[i64]) -> Op {
    Op::Reshape {
        shape: shape.to_vec(),
    }
}
