//! Reverse-mode symbolic differentiation (Theano's `grad`). Gradients are ordinary graph nodes,
//! so they are optimized and compiled like anything else and can be differentiated again.
//!
//! # Choices where a derivative is not defined (matching JAX where JAX defines one)
//! | op | at | gradient |
//! | --- | --- | --- |
//! | `abs` | 0 | 0 (`sign(0)`) |
//! | `relu` | 0 | 0 |
//! | `sqrt` | 0 | +inf |
//! | `maximum`, `minimum` | ties | half to each operand |
//! | `max`, `min` (reductions) | ties | shared equally among the tied elements |
//! | `floor`, `ceil`, `round`, `sign`, `floordiv` | everywhere | 0 (piecewise constant) |
//! | `mod` | everywhere | `1` for the dividend, `-floordiv(a, b)` for the divisor |
//! | `pow(a, b)` w.r.t. `b` | `a <= 0` | `y * log(a)` (NaN or -inf there, as written) |
//! | `prod` | zeros in the input | `gy * y / x` (NaN where `x` is 0) |
//!
//! Integer and bool values carry no gradient. A float input the cost reaches only through a
//! non-differentiable op (a comparison, `argmax`, a cast to an integer, a custom op that says
//! so) is an error naming the op and where it was built. An input the cost does not depend on
//! is an error unless [`GradOptions::disconnected`] asks for zeros.
//!
//! Broadcasting is undone by summing: the gradient of a broadcast operand is summed over the
//! stretched dims. Only dims known to be 1 in the type broadcast for differentiation, as in
//! Theano's broadcastable pattern.

mod control;
mod rules;
mod rules_conv;
mod rules_index;
mod scan;

use crate::dump::DumpOptions;
use crate::error::{Error, Result};
use crate::graph::{to_ssa, Graph, Var, VarId};
use crate::ir::{Func, Op};
use std::collections::{HashMap, HashSet};

/// What to do with an input the cost does not depend on (Theano's `disconnected_inputs`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Disconnected {
    /// Asking for its gradient is an error naming it (the default).
    #[default]
    Error,
    /// Its gradient is zeros.
    Zero,
}

/// Options of [`grad_with`].
#[derive(Clone, Debug, Default)]
pub struct GradOptions {
    /// What to do with a `wrt` the cost does not depend on.
    pub disconnected: Disconnected,
    /// Where the `grad` dump goes (the cost and its gradients as a function in the text
    /// form); `None` reads `KILN_DUMP` and `KILN_DUMP_DIR`.
    pub dump: Option<DumpOptions>,
}

/// The gradient of the 0-d float `cost` with respect to each of `wrt`.
///
/// ```
/// use ndarray::array;
/// let g = kiln::Graph::new();
/// let x = g.input("x", kiln::f64, [Some(3)]);
/// let cost = (&x * &x).sum(None, false); // sum of squares: its gradient is 2x
/// let dx = kiln::grad(&cost, &[&x]).unwrap().remove(0);
/// let f = kiln::function(&[&x], &[&dx]).compile().unwrap();
/// let out = f.call(&[array![1.0, -2.0, 0.5].into_dyn().view()]).unwrap();
/// assert_eq!(out[0].to_f64_vec(), vec![2.0, -4.0, 1.0]);
/// ```
pub fn grad(cost: &Var, wrt: &[&Var]) -> Result<Vec<Var>> {
    grad_with(cost, wrt, GradOptions::default())
}

/// [`grad`] with options.
pub fn grad_with(cost: &Var, wrt: &[&Var], opts: GradOptions) -> Result<Vec<Var>> {
    let grads = grad_impl(cost, wrt, opts.disconnected, false)?;
    let dump = opts.dump.unwrap_or_else(DumpOptions::from_env);
    if dump.enabled("grad") {
        dump_grads(&dump, cost, &grads);
    }
    Ok(grads)
}

/// The `grad` dump: a function named `grad` of every input the cost and its gradients read
/// (shared variables after them), whose outputs are the cost followed by the gradients, as
/// `kiln grad` prints it.
fn dump_grads(dump: &DumpOptions, cost: &Var, grads: &[Var]) {
    let outputs: Vec<Var> = std::iter::once(cost).chain(grads).cloned().collect();
    let inputs = crate::graph::input_vars(&outputs);
    let text = match to_ssa("grad", &inputs, &outputs, &[]) {
        Ok(ssa) => crate::ir::text::print_func(&ssa.func),
        Err(e) => format!("; the gradient has no function form: {e}\n"),
    };
    dump.for_compile("grad").dump("grad", "grad", || text);
}

/// The gradient of `cost` with respect to `targets` when `cost` was built from `adjoints`
/// (the output gradients of an op whose rule this is): the adjoints count as constants, so
/// nothing propagates back through them (they may themselves depend on the targets), and the
/// targets count as independent leaves. Disconnected targets get zeros.
pub(crate) fn partial_grads(cost: &Var, targets: &[&Var], adjoints: &[Var]) -> Result<Vec<Var>> {
    let mut wrt: Vec<&Var> = targets.to_vec();
    wrt.extend(adjoints.iter().filter(|a| a.dtype().is_float()));
    let mut all = grad_impl(cost, &wrt, Disconnected::Zero, true)?;
    all.truncate(targets.len());
    Ok(all)
}

/// With `leaves`, the `wrt` values are treated as independent leaves: nothing propagates
/// through the Applies that produce them (partial derivatives, for the `ifelse` rule).
pub(crate) fn grad_impl(
    cost: &Var,
    wrt: &[&Var],
    disconnected: Disconnected,
    leaves: bool,
) -> Result<Vec<Var>> {
    cost.check()?;
    let cty = cost.ty();
    if cty.rank() != 0 || !cty.dtype.is_float() {
        return Err(Error::Grad(format!(
            "the cost must be a 0-d float, {} is {cty}",
            cost.label()
        )));
    }
    let g = cost.graph().clone();
    for w in wrt {
        w.check()?;
        if !w.graph().same(&g) {
            return Err(Error::Grad(format!(
                "{} belongs to another graph than the cost",
                w.label()
            )));
        }
        if !w.dtype().is_float() {
            return Err(Error::Grad(format!(
                "{} is {}: only float values have gradients",
                w.label(),
                w.ty()
            )));
        }
    }
    let applies = g.toposort(&[cost]);
    // Values that depend on some `wrt` (forward), and values the cost depends on (the applies).
    let mut depends: HashSet<VarId> = wrt.iter().map(|w| w.id()).collect();
    for a in &applies {
        if a.inputs().iter().any(|i| depends.contains(&i.id())) {
            depends.extend(a.outputs().iter().map(|o| o.id()));
        }
    }
    let mut grads: HashMap<VarId, Var> = HashMap::new();
    let mut blocked: Vec<crate::graph::Apply> = Vec::new();
    grads.insert(
        cost.id(),
        g.constant(crate::tensor::Tensor::full(cty.dtype, &[], 1.0)),
    );
    for a in applies.iter().rev() {
        let inputs = a.inputs();
        let outputs = a.outputs();
        if leaves && outputs.iter().any(|o| wrt.iter().any(|w| w.id() == o.id())) {
            continue;
        }
        let relevant: Vec<bool> = inputs
            .iter()
            .map(|i| depends.contains(&i.id()) && i.dtype().is_float())
            .collect();
        if !relevant.iter().any(|&r| r) {
            continue;
        }
        let out_grads: Vec<Option<Var>> = outputs
            .iter()
            .map(|o| grads.get(&o.id()).cloned())
            .collect();
        if out_grads.iter().all(Option::is_none) {
            // Outputs that carry no gradient (bool or integer results) of a float input: the
            // cost is piecewise constant through them. Remembered, to name the op if an input
            // ends up with no gradient at all.
            if outputs.iter().all(|o| !o.dtype().is_float())
                && outputs.iter().any(|o| reaches(&g, o, cost))
            {
                blocked.push(a.clone());
            }
            continue;
        }
        // The gradient's nodes name the line that built the node they differentiate.
        let at = a.loc();
        let in_grads = crate::error::built_at(at, || {
            rules::input_grads(&g, a, &inputs, &outputs, &out_grads)
        })?;
        for ((inp, rel), ig) in inputs.iter().zip(&relevant).zip(in_grads) {
            if !rel {
                continue;
            }
            match ig {
                rules::InGrad::Grad(v) => {
                    v.check()?;
                    // A half's gradient is a half (a rule may give the f32 it computed in).
                    let v = if inp.dtype().is_half() && v.dtype() != inp.dtype() {
                        v.cast(inp.dtype())
                    } else {
                        v
                    };
                    let acc = match grads.remove(&inp.id()) {
                        Some(prev) => crate::error::built_at(at, || &prev + &v),
                        None => v,
                    };
                    grads.insert(inp.id(), acc);
                }
                rules::InGrad::Zero => {}
                rules::InGrad::NotDifferentiable(why) => return Err(not_differentiable(a, &why)),
            }
        }
    }
    wrt.iter()
        .map(|w| match grads.get(&w.id()) {
            Some(v) => Ok(v.clone()),
            None if disconnected == Disconnected::Error => {
                let through = blocked.iter().find(|a| a.inputs().iter().any(|i| depends_on(&g, i, w)));
                Err(match through {
                    Some(a) => not_differentiable(a, "its result is not a float"),
                    None => Error::Grad(format!(
                        "the cost does not depend on {}; use Disconnected::Zero for a zero gradient",
                        w.label()
                    )),
                })
            }
            None => Ok(rules::zeros_like(w)),
        })
        .collect()
}

fn not_differentiable(a: &crate::graph::Apply, why: &str) -> Error {
    Error::Grad(format!(
        "cannot differentiate through {} built at {}: {why}",
        a.op().display_name(),
        a.loc()
    ))
}

/// Whether `v` depends on `w`.
fn depends_on(g: &Graph, v: &Var, w: &Var) -> bool {
    let data = g.data();
    v.id() == w.id()
        || crate::graph::reachable_applies(&data, [v.id()])
            .iter()
            .any(|&a| data.applies[a.0 as usize].inputs.contains(&w.id()))
}

/// Whether `cost` depends on `v`.
fn reaches(g: &Graph, v: &Var, cost: &Var) -> bool {
    let data = g.data();
    crate::graph::reachable_applies(&data, [cost.id()])
        .iter()
        .any(|&a| data.applies[a.0 as usize].inputs.contains(&v.id()))
        || v.id() == cost.id()
}

/// A new function whose outputs are output `output` of `func` (a 0-d float) followed by its
/// gradient with respect to each parameter named in `wrt` (what `kiln grad` prints).
pub fn grad_func(func: &Func, output: usize, wrt: &[&str]) -> Result<Func> {
    let g = Graph::new();
    let mut vals: HashMap<crate::ir::Value, Var> = HashMap::new();
    let mut inputs = Vec::new();
    for (i, &p) in func.params.iter().enumerate() {
        let name = func
            .name_of(p)
            .map(str::to_string)
            .unwrap_or_else(|| format!("arg{i}"));
        let v = g.input_of(&name, func.ty(p).clone());
        vals.insert(p, v.clone());
        inputs.push(v);
    }
    for inst in &func.body {
        if !inst.regions.is_empty() {
            return Err(Error::Unsupported(format!(
                "grad of a function with {} regions is not supported",
                inst.op.name()
            )));
        }
        let args: Vec<&Var> = inst.args.iter().map(|a| &vals[a]).collect();
        let outs = match &inst.op {
            Op::Const(t) => vec![g.constant(t.clone())],
            op => g.try_apply(op.clone(), &args)?,
        };
        for (r, o) in inst.results.iter().zip(outs) {
            let o = match func.name_of(*r) {
                Some(n) => o.named(n),
                None => o,
            };
            vals.insert(*r, o);
        }
    }
    let out = func.outputs.get(output).ok_or_else(|| {
        Error::Grad(format!(
            "{} has {} outputs, there is no output {output}",
            func.name,
            func.outputs.len()
        ))
    })?;
    let cost = vals[out].clone();
    let mut targets = Vec::new();
    for name in wrt {
        let i = func
            .params
            .iter()
            .position(|&p| func.name_of(p) == Some(name))
            .ok_or_else(|| Error::Grad(format!("{} has no parameter named `{name}`", func.name)))?;
        targets.push(&inputs[i]);
    }
    // Not `grad`: its caller dumps the whole function (`kiln grad`), under its own name.
    let grads = grad_impl(&cost, &targets, Disconnected::Error, false)?;
    let mut outs = vec![cost];
    outs.extend(
        grads
            .into_iter()
            .zip(wrt)
            .map(|(v, n)| v.named(&format!("d_{n}"))),
    );
    Ok(to_ssa(&format!("{}_grad", func.name), &inputs, &outs, &[])?.func)
}
