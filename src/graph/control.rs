//! `ifelse`: lazy conditionals. Each branch is a closure; the nodes it builds form that
//! branch's region, computed only when the branch is taken (as with JAX's `lax.cond`). Values
//! built before the `ifelse` are computed eagerly; values built inside a branch may be used
//! only by that branch.
//!
//! In the graph an `ifelse` Apply takes `[cond, then outputs.., else outputs.., free values..]`
//! as inputs, where the free values are what the branches read from outside: that keeps
//! dependencies (topological order, gradients) visible, while the SSA form holds the branches
//! as regions and only `cond` as an argument.

use super::{Graph, Var, VarData, VarId, VarKind};
use crate::error::{Error, SourceLoc};
use crate::ir::infer::infer_ifelse;
use crate::ir::{DType, Op, TensorType};
use std::ops::Range;

/// `cond ? then() : otherwise()` for a 0-d bool `cond`; both branches return values of the
/// same types. Only the taken branch runs.
///
/// ```
/// use ndarray::array;
/// let g = kiln::Graph::new();
/// let x = g.input("x", kiln::f64, [Some(2)]);
/// let positive = x.sum(None, false).gt(0.0);
/// // The logarithm is computed only where the sum is positive.
/// let y = kiln::ifelse(&positive, || vec![x.log()], || vec![x.zeros_like()]).remove(0);
/// let f = kiln::function(&[&x], &[&y]).compile().unwrap();
/// let out = f.call(&[array![1.0, -3.0].into_dyn().view()]).unwrap();
/// assert_eq!(out[0].to_f64_vec(), vec![0.0, 0.0]);
/// ```
#[track_caller]
pub fn ifelse(
    cond: &Var,
    then: impl FnOnce() -> Vec<Var>,
    otherwise: impl FnOnce() -> Vec<Var>,
) -> Vec<Var> {
    let loc = SourceLoc::caller();
    let g = cond.graph().clone();
    let count = |g: &Graph| g.data().applies.len() as u32;
    let a0 = count(&g);
    let v0 = g.data().vars.len() as u32;
    let t = then();
    let a1 = count(&g);
    let e = otherwise();
    let a2 = count(&g);
    match check(&g, cond, &t, &e, a0..a1, a1..a2, v0) {
        Ok((types, free)) => {
            let mut inputs: Vec<&Var> = vec![cond];
            inputs.extend(t.iter());
            inputs.extend(e.iter());
            inputs.extend(free.iter());
            g.push_apply(
                Op::IfElse,
                &inputs,
                types,
                loc,
                vec![a0..a1, a1..a2],
                vec![],
            )
        }
        Err(err) => {
            let n = t.len().max(1);
            (0..n)
                .map(|i| {
                    let ty = t
                        .get(i)
                        .map(|v| v.ty())
                        .unwrap_or(TensorType::scalar(DType::F32));
                    g.add_var(VarData {
                        ty,
                        name: None,
                        kind: VarKind::Poisoned(err.clone().at(loc)),
                    })
                })
                .collect()
        }
    }
}

type Checked = (Vec<TensorType>, Vec<Var>);

/// What a region reads from outside itself: the variables that the Applies `inside` read, and
/// then `yields`, that neither an Applies `inside` made nor are region parameters made from
/// variable `v0` on (its own scan's, or those of scans nested in it), each once, in order.
pub(super) fn free_vars(g: &Graph, inside: Range<u32>, v0: u32, yields: &[&Var]) -> Vec<Var> {
    let data = g.data();
    let own = |v: VarId| match data.vars[v.0 as usize].kind {
        VarKind::Result { apply, .. } => inside.contains(&apply.0),
        VarKind::RegionParam => v.0 >= v0,
        _ => false,
    };
    let reads = (inside.clone())
        .flat_map(|a| data.applies[a as usize].inputs.iter().copied())
        .chain(yields.iter().map(|v| v.id()));
    let mut free: Vec<VarId> = Vec::new();
    for v in reads {
        if !own(v) && !free.contains(&v) {
            free.push(v);
        }
    }
    drop(data);
    free.into_iter().map(|v| g.var(v)).collect()
}

fn check(
    g: &Graph,
    cond: &Var,
    t: &[Var],
    e: &[Var],
    rt: Range<u32>,
    re: Range<u32>,
    v0: u32,
) -> Result<Checked, Error> {
    for v in std::iter::once(cond).chain(t).chain(e) {
        v.check()?;
        if !v.graph().same(g) {
            return Err(Error::ty("ifelse: a branch value belongs to another graph"));
        }
    }
    let tt: Vec<TensorType> = t.iter().map(Var::ty).collect();
    let et: Vec<TensorType> = e.iter().map(Var::ty).collect();
    let types = infer_ifelse(&cond.ty(), &tt, &et).map_err(Error::ty)?;
    let data = g.data();
    let producer = |v: VarId| match data.vars[v.0 as usize].kind {
        VarKind::Result { apply, .. } => Some(apply.0),
        _ => None,
    };
    for (vals, other, name) in [(t, &re, "then"), (e, &rt, "else")] {
        if vals
            .iter()
            .any(|v| producer(v.id()).is_some_and(|a| other.contains(&a)))
        {
            return Err(Error::ty(format!(
                "ifelse: the {name} branch returns a value built in the other branch"
            )));
        }
    }
    drop(data);
    // What the branches read from outside their own nodes.
    let yields: Vec<&Var> = t.iter().chain(e).collect();
    Ok((types, free_vars(g, rt.start..re.end, v0, &yields)))
}
