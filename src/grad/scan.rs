//! The gradient of `scan` (reverse mode through a loop): another scan, walking the steps in
//! the other direction, whose body recomputes one forward step from that step's carries (the
//! forward scan's hidden history output) and slices, and differentiates it. Where the
//! gradient reads a value the forward scan stacked (an RNN's hidden state, which `tanh`'s
//! gradient reads), it reads the stacked value instead, and the recomputation that only fed
//! it drops out of the function (`reuse_kept`).
//!
//! Forward, step `t` maps `(c[t], x[t])` to `(c[t+1], y[t])` reading free values `w`. Given
//! the gradients of the last carries (`gc`) and of the stacked values (`gy`), the backward
//! scan carries `gc` (starting from the last carries' gradients) and one accumulator per
//! float free value (starting at zero); at step `t` it computes, from the cost
//! `sum(c[t+1] * gc) + sum(y[t] * gy[t])`, the gradients of `c[t]` (the next `gc`, plus the
//! history's own gradient where something reads it), of `x[t]` (stacked: the sequences'
//! gradients) and of `w` (added to the accumulators). Integer carries and sequences get no
//! gradient but are still fed to the recomputation.

use super::partial_grads;
use super::rules::{zeros_like, InGrad};
use crate::error::{Error, Result};
use crate::graph::{scan_with, Apply, Var};
use std::cell::RefCell;
use std::collections::HashMap;

pub fn scan_grads(
    a: &Apply,
    n_c: usize,
    reverse: bool,
    x: &[Var],
    y: &[Var],
    gy: &[Option<Var>],
) -> Result<Vec<InGrad>> {
    let params = a.params();
    let n_args = params.len();
    let n_out = y.len();
    // The last `n_c` outputs must be the carries as each step saw them (the parameters
    // yielded as they are), which every scan `kiln::scan` builds has.
    let has_history = n_out >= 2 * n_c
        && x.len() >= n_args + n_out
        && (0..n_c).all(|i| x[n_args + n_out - n_c + i].id() == params[i].id());
    if !has_history {
        return Err(Error::Grad(
            "scan: this scan has no history of its carries (build scans with kiln::scan)".into(),
        ));
    }
    let n_y = n_out - 2 * n_c;
    let (args, rest) = x.split_at(n_args);
    let (yields, frees) = rest.split_at(n_out);
    let xs = &args[n_c..];
    let float = |v: &Var| v.dtype().is_float();
    let fc: Vec<usize> = (0..n_c).filter(|&i| float(&y[i])).collect();
    let fx: Vec<usize> = (0..xs.len()).filter(|&i| float(&xs[i])).collect();
    let ff: Vec<usize> = (0..frees.len()).filter(|&i| float(&frees[i])).collect();
    // Stacked values (and history entries) whose gradient something asks for.
    let gys: Vec<usize> = (n_c..n_out)
        .filter(|&k| float(&y[k]) && gy[k].is_some())
        .collect();
    let nothing_asked = fc.iter().all(|&i| gy[i].is_none()) && gys.is_empty();
    let nothing_to_give = fc.is_empty() && fx.is_empty() && ff.is_empty();
    if nothing_asked || nothing_to_give {
        return Ok(x.iter().map(|_| InGrad::Zero).collect());
    }

    // Backward carries: the carries' gradients, then the free values' accumulators.
    let mut init: Vec<Var> = fc
        .iter()
        .map(|&i| gy[i].clone().unwrap_or_else(|| zeros_like(&y[i])))
        .collect();
    init.extend(ff.iter().map(|&k| zeros_like(&frees[k])));
    // Stacked values the backward body reads where the forward scan kept them (see
    // `reuse_kept`): the float ones that a step computes (not a parameter or a free value
    // yielded as it is).
    let kept: Vec<usize> = (n_c..n_c + n_y)
        .filter(|&k| float(&y[k]) && made_in(a, &yields[k]))
        .collect();
    // Backward sequences: the history, the sequences, the requested gradients, then the kept
    // stacked values.
    let mut seqs: Vec<Var> = (0..n_c).map(|i| y[n_c + n_y + i].clone()).collect();
    seqs.extend(xs.iter().cloned());
    seqs.extend(gys.iter().map(|&k| gy[k].clone().expect("filtered")));
    seqs.extend(kept.iter().map(|&k| y[k].clone()));

    let g = a.inputs()[0].graph().clone();
    let range = a.regions()[0].clone();
    let failure: RefCell<Option<Error>> = RefCell::new(None);
    let body = |bc: &[Var], bs: &[Var]| -> (Vec<Var>, Vec<Var>) {
        let (gc, acc) = bc.split_at(fc.len());
        let (cs, rest) = bs.split_at(n_c);
        let (xts, rest) = rest.split_at(xs.len());
        let (gyt, kept_t) = rest.split_at(gys.len());
        // One forward step, recomputed from this step's carries and slices.
        let mut map: HashMap<_, Var> = HashMap::new();
        for (p, v) in params.iter().zip(cs.iter().chain(xts)) {
            map.insert(p.id(), v.clone());
        }
        g.clone_range(range.clone(), &mut map);
        let out = |k: usize| {
            let v = &yields[k];
            map.get(&v.id()).cloned().unwrap_or_else(|| v.clone())
        };
        // The gradient's own applies start here (after the recomputed step).
        let gradient_start = g.data().applies.len() as u32;
        let mut cost: Option<Var> = None;
        let mut add = |t: Var| {
            cost = Some(match cost.take() {
                Some(c) => c + t,
                None => t,
            })
        };
        for (j, &i) in fc.iter().enumerate() {
            add((&out(i) * &gc[j]).sum(None, false));
        }
        let mut history_grads: HashMap<usize, Var> = HashMap::new();
        for (j, &k) in gys.iter().enumerate() {
            if k >= n_c + n_y {
                // The history's value at step t is c[t] itself.
                history_grads.insert(k - n_c - n_y, gyt[j].clone());
            } else {
                add((&out(k) * &gyt[j]).sum(None, false));
            }
        }
        let mut targets: Vec<&Var> = fc.iter().map(|&i| &cs[i]).collect();
        targets.extend(fx.iter().map(|&i| &xts[i]));
        targets.extend(ff.iter().map(|&k| &frees[k]));
        let adjoints: Vec<Var> = bc.iter().chain(gyt).cloned().collect();
        let grads = match cost.map(|c| partial_grads(&c, &targets, &adjoints)) {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                failure.borrow_mut().get_or_insert(e);
                targets.iter().map(|t| zeros_like(t)).collect()
            }
            None => targets.iter().map(|t| zeros_like(t)).collect(),
        };
        let recomputed: Vec<(Var, Var)> = kept
            .iter()
            .zip(kept_t)
            .map(|(&k, t)| (out(k), t.clone()))
            .collect();
        let grads = reuse_kept(&g, gradient_start, &recomputed, grads);
        let (g_c, rest) = grads.split_at(fc.len());
        let (g_x, g_f) = rest.split_at(fx.len());
        let mut new_c: Vec<Var> = fc
            .iter()
            .zip(g_c)
            .map(|(&i, gci)| match history_grads.get(&i) {
                Some(h) => gci + h,
                None => gci.clone(),
            })
            .collect();
        new_c.extend(acc.iter().zip(g_f).map(|(s, d)| s + d));
        (new_c, g_x.to_vec())
    };
    let loc = a.loc();
    let (carried, stacked) = scan_with(
        !reverse,
        loc,
        &init.iter().collect::<Vec<_>>(),
        &seqs.iter().collect::<Vec<_>>(),
        body,
    );
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    for v in carried.iter().chain(&stacked) {
        v.check()?;
    }
    let mut out: Vec<InGrad> = x.iter().map(|_| InGrad::Zero).collect();
    for (j, &i) in fc.iter().enumerate() {
        out[i] = InGrad::Grad(carried[j].clone());
    }
    for (j, &k) in ff.iter().enumerate() {
        out[n_args + n_out + k] = InGrad::Grad(carried[fc.len() + j].clone());
    }
    for (j, &i) in fx.iter().enumerate() {
        out[n_c + i] = InGrad::Grad(stacked[j].clone());
    }
    Ok(out)
}

/// Whether `v` is computed by an apply inside `a`'s region (not a parameter or a free value).
fn made_in(a: &Apply, v: &Var) -> bool {
    let g = v.graph().data();
    let range = &a.regions()[0];
    match g.vars[v.id().0 as usize].kind {
        crate::graph::VarKind::Result { apply, .. } => range.contains(&apply.0),
        _ => false,
    }
}

/// `grads` with the stacked values the forward scan kept read from there: the gradient's
/// applies (from `start` on) are built again with each recomputed value (`recomputed`: the
/// value, its slice of the kept output) replaced by the slice. The recomputation is still what
/// was differentiated, so the gradient is the same; but where the rules read only values the
/// forward step kept (`tanh`'s gradient reads its result), nothing reads the recomputed step
/// any more, and it is left out of the function (only what its outputs reach is compiled).
/// An RNN cell's backward step recomputed its two products and its `tanh` this way.
fn reuse_kept(
    g: &crate::graph::Graph,
    start: u32,
    recomputed: &[(Var, Var)],
    grads: Vec<Var>,
) -> Vec<Var> {
    if recomputed.is_empty() {
        return grads;
    }
    let end = g.data().applies.len() as u32;
    let mut map: HashMap<_, Var> = recomputed
        .iter()
        .map(|(v, t)| (v.id(), t.clone()))
        .collect();
    g.clone_range(start..end, &mut map);
    grads
        .into_iter()
        .map(|v| map.get(&v.id()).cloned().unwrap_or(v))
        .collect()
}
