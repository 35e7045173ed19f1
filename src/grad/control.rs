//! The gradient of `ifelse`: another `ifelse` on the same condition whose branches recompute
//! the taken branch's forward values (a clone of its nodes) and differentiate them with respect
//! to the values the branches read from outside. The untaken branch contributes zero, and
//! neither branch of the gradient runs unless taken.

use super::partial_grads;
use super::rules::{zeros_like, InGrad};
use crate::error::{Error, Result};
use crate::graph::{ifelse, Apply, Var};
use std::cell::RefCell;
use std::collections::HashMap;

pub fn ifelse_grads(a: &Apply, x: &[Var], y: &[Var], gy: &[Option<Var>]) -> Result<Vec<InGrad>> {
    let n = y.len();
    let (cond, outs, frees) = (&x[0], &x[1..1 + 2 * n], &x[1 + 2 * n..]);
    let regions = a.regions();
    let g = cond.graph().clone();
    let gys: Vec<Var> = gy
        .iter()
        .zip(y)
        .map(|(d, yv)| d.clone().unwrap_or_else(|| zeros_like(yv)))
        .collect();
    let targets: Vec<&Var> = frees.iter().filter(|f| f.dtype().is_float()).collect();
    if targets.is_empty() {
        return Ok(x.iter().map(|_| InGrad::Zero).collect());
    }
    let failure: RefCell<Option<Error>> = RefCell::new(None);
    let branch = |k: usize| -> Vec<Var> {
        let mut map = HashMap::new();
        g.clone_range(regions[k].clone(), &mut map);
        let yielded = &outs[k * n..(k + 1) * n];
        let mut cost: Option<Var> = None;
        for (o, d) in yielded.iter().zip(&gys) {
            let o = map.get(&o.id()).cloned().unwrap_or_else(|| o.clone());
            if !o.dtype().is_float() {
                continue;
            }
            let term = (&o * d).sum(None, false);
            cost = Some(match cost {
                Some(c) => c + term,
                None => term,
            });
        }
        match cost.map(|c| partial_grads(&c, &targets, &gys)) {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                failure.borrow_mut().get_or_insert(e);
                targets.iter().map(|t| zeros_like(t)).collect()
            }
            None => targets.iter().map(|t| zeros_like(t)).collect(),
        }
    };
    let grads = ifelse(cond, || branch(0), || branch(1));
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    let mut it = grads.into_iter();
    let mut out: Vec<InGrad> = (0..1 + 2 * n).map(|_| InGrad::Zero).collect();
    for f in frees {
        out.push(if f.dtype().is_float() {
            it.next().map(InGrad::Grad).unwrap_or(InGrad::Zero)
        } else {
            InGrad::Zero
        });
    }
    Ok(out)
}
