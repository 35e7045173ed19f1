//! `scan`: a loop over the leading axis of sequences with carried state (JAX's `lax.scan`,
//! Theano's `scan`). The body is a closure called once, with placeholder variables for the
//! carries and for one slice of each sequence; the nodes it builds form the scan's region,
//! run once per step.
//!
//! In the graph a `scan` Apply takes `[init.., xs.., yields.., free values..]` as inputs (the
//! yields being the new carries, the stacked values, then the carries as they were at each
//! step) and gives `[last carries.., stacked values.., carries at each step..]`. The last
//! group, the carries' history, is hidden from the user: the gradient reads it (reverse mode
//! needs every step's carry), and the optimizer drops it (`rewrite::prune_scans`) when nothing
//! does. The free values (what the body reads from outside) keep dependencies visible, as for
//! `ifelse`.

use super::{Graph, Var, VarData, VarKind};
use crate::error::{Error, SourceLoc};
use crate::ir::infer::{infer_scan, scan_param_types};
use crate::ir::{DType, Op, TensorType};
use std::ops::Range;

/// What a scan's body returns: the new carries (one per carry, of the carry's type), then the
/// values to stack (any number, of any types).
pub type ScanStep = (Vec<Var>, Vec<Var>);

/// Runs `body` once per index `t` of the leading axis of the sequences `xs` (at least one;
/// all of one length), with the carries (starting from `init`) and `xs[i][t]` for each
/// sequence; `body` returns the new carries and values to stack. Returns the last carries
/// and, per stacked value, the values of every step stacked along a new leading axis.
///
/// ```
/// use kiln::{Graph, f32};
/// let g = Graph::new();
/// let xs = g.input("xs", f32, [None, Some(3)]);
/// let h0 = g.input("h0", f32, [Some(3)]);
/// // A running sum, and each step's partial sum.
/// let (last, stacked) = kiln::scan(&[&h0], &[&xs], |c, x| {
///     let s = &c[0] + &x[0];
///     (vec![s.clone()], vec![s])
/// });
/// # let _ = (last, stacked);
/// ```
#[track_caller]
pub fn scan(init: &[&Var], xs: &[&Var], body: impl FnOnce(&[Var], &[Var]) -> ScanStep) -> ScanStep {
    scan_with(false, SourceLoc::caller(), init, xs, body)
}

/// [`scan`] walking the sequences from their last index to their first (`lax.scan`'s
/// `reverse=True`). Stacked values keep the sequences' order: index `t` holds step `t`'s.
#[track_caller]
pub fn scan_reverse(
    init: &[&Var],
    xs: &[&Var],
    body: impl FnOnce(&[Var], &[Var]) -> ScanStep,
) -> ScanStep {
    scan_with(true, SourceLoc::caller(), init, xs, body)
}

/// [`scan`] for `steps` steps without sequences (JAX's `lax.scan` with `length` and no `xs`,
/// Theano's `n_steps`): `body` gets the carries and the step's index (a 0-d `i64`, counting
/// from 0), and returns the new carries and the values to stack. The steps' indices are the
/// scan's sequence (`arange(steps)`), so the loop is an ordinary scan everywhere after this.
///
/// ```
/// use kiln::{Graph, f64};
/// let g = Graph::new();
/// let x0 = g.input("x0", f64, [Some(2)]);
/// // Five steps of x <- x / 2 + t, keeping every x.
/// let (last, xs) = kiln::scan_steps(&g, &[&x0], 5, |c, t| {
///     let x = &c[0] * 0.5 + t.cast(f64);
///     (vec![x.clone()], vec![x])
/// });
/// # let _ = (last, xs);
/// ```
#[track_caller]
pub fn scan_steps(
    g: &Graph,
    init: &[&Var],
    steps: i64,
    body: impl FnOnce(&[Var], &Var) -> ScanStep,
) -> ScanStep {
    let loc = SourceLoc::caller();
    if steps < 0 {
        let e = Error::ty(format!("scan_steps: {steps} steps is negative")).at(loc);
        return poisoned_step(g, e, init, &[]);
    }
    let t = g.arange(0.0, steps as f64, 1.0, DType::I64);
    scan_with(false, loc, init, &[&t], |c, x| body(c, &x[0]))
}

pub(crate) fn scan_with(
    reverse: bool,
    loc: SourceLoc,
    init: &[&Var],
    xs: &[&Var],
    body: impl FnOnce(&[Var], &[Var]) -> ScanStep,
) -> ScanStep {
    let Some(g) = init.iter().chain(xs).next().map(|v| v.graph().clone()) else {
        let e = Error::ty("scan needs at least one sequence to walk").at(loc);
        return (Vec::new(), vec![poisoned(&Graph::new(), e, None)]);
    };
    let n_c = init.len();
    // Variables from here on are the body's (its parameters first).
    let v0 = g.data().vars.len() as u32;
    let params = match checked_params(&g, n_c, init, xs) {
        Ok(p) => p,
        Err(e) => return poisoned_step(&g, e.at(loc), init, &[]),
    };
    let count = |g: &Graph| g.data().applies.len() as u32;
    let a0 = count(&g);
    let (new_c, ys) = body(&params[..n_c], &params[n_c..]);
    let range = a0..count(&g);
    let mut yields: Vec<&Var> = new_c.iter().chain(&ys).collect();
    yields.extend(&params[..n_c]);
    let args: Vec<&Var> = init.iter().chain(xs).copied().collect();
    let checked = if new_c.len() != n_c {
        Err(Error::ty(format!(
            "scan: the body returns {} new carries for {n_c} carries",
            new_c.len()
        )))
    } else {
        check_body(&g, n_c, &args, &yields, range.clone(), v0)
    };
    match checked {
        Ok((types, free)) => {
            let mut inputs = args.clone();
            inputs.extend(&yields);
            inputs.extend(&free);
            let ids = params.iter().map(Var::id).collect();
            let op = Op::Scan {
                carries: n_c,
                reverse,
            };
            let mut outs = g.push_apply(op, &inputs, types, loc, vec![range], ids);
            outs.truncate(n_c + ys.len());
            let stacked = outs.split_off(n_c);
            (outs, stacked)
        }
        Err(e) => poisoned_step(&g, e.at(loc), init, &ys),
    }
}

/// What a scan that failed its checks returns: one variable carrying `e` per carry and per
/// stacked value (at least one, so that the error surfaces wherever the result is used).
fn poisoned_step(g: &Graph, e: Error, init: &[&Var], ys: &[Var]) -> ScanStep {
    let carries = init
        .iter()
        .map(|v| poisoned(g, e.clone(), Some(v)))
        .collect();
    let stacked = match ys {
        [] => vec![poisoned(g, e, None)],
        ys => ys.iter().map(|v| poisoned(g, e.clone(), Some(v))).collect(),
    };
    (carries, stacked)
}

/// A variable that carries `e` (typed as `like`, or f32[] without it).
fn poisoned(g: &Graph, e: Error, like: Option<&Var>) -> Var {
    g.add_var(VarData {
        ty: like.map(Var::ty).unwrap_or(TensorType::scalar(DType::F32)),
        name: None,
        kind: VarKind::Poisoned(e),
    })
}

/// The body's parameters, after checking the arguments.
fn checked_params(g: &Graph, n_c: usize, init: &[&Var], xs: &[&Var]) -> Result<Vec<Var>, Error> {
    for v in init.iter().chain(xs) {
        v.check()?;
        if !v.graph().same(g) {
            return Err(Error::ty("scan: an argument belongs to another graph"));
        }
    }
    let tys: Vec<TensorType> = init.iter().chain(xs).map(|v| v.ty()).collect();
    let refs: Vec<&TensorType> = tys.iter().collect();
    let ptys = scan_param_types(n_c, &refs).map_err(Error::ty)?;
    Ok(ptys.into_iter().map(|t| g.region_param(t)).collect())
}

type Checked = (Vec<TensorType>, Vec<Var>);

/// The scan's result types and free values, after checking what the body returned.
fn check_body(
    g: &Graph,
    n_c: usize,
    args: &[&Var],
    yields: &[&Var],
    inside: Range<u32>,
    v0: u32,
) -> Result<Checked, Error> {
    for v in yields {
        v.check()?;
        if !v.graph().same(g) {
            return Err(Error::ty("scan: the body returns a value of another graph"));
        }
    }
    let arg_tys: Vec<TensorType> = args.iter().map(|v| v.ty()).collect();
    let refs: Vec<&TensorType> = arg_tys.iter().collect();
    let ytys: Vec<TensorType> = yields.iter().map(|v| v.ty()).collect();
    let types = infer_scan(n_c, &refs, &ytys).map_err(Error::ty)?;
    // What the body reads from outside its own nodes and parameters.
    Ok((types, super::control::free_vars(g, inside, v0, yields)))
}
