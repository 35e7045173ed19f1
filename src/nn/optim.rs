//! Optimizers as update builders: each takes the parameters (shared variables) and their
//! gradients (from `kiln::grad`) and returns `(shared variable, new value)` pairs, the
//! parameters' and the optimizer's own state's (created here as shared variables of zeros),
//! ready for [`crate::FunctionBuilder::updates`]. The formulas are PyTorch's, so a model
//! trained elsewhere moves the same way here.
//!
//! ```
//! use kiln::{function, nn, Graph};
//! use ndarray::array;
//!
//! let g = Graph::new();
//! let w = g.shared("w", array![1.0f32, -2.0].into_dyn());
//! let loss = (&w * &w).sum(None, false);
//! let grads = kiln::grad(&loss, &[&w])?;
//! let step = function(&[], &[&loss])
//!     .updates(nn::adam(&[&w], &grads, 0.1)?)
//!     .compile()?;
//! for _ in 0..100 {
//!     step.call(&[] as &[kiln::TensorRef])?;
//! }
//! assert!(step.call(&[] as &[kiln::TensorRef])?[0].to_f64_vec()[0] < 1e-2);
//! # Ok::<(), kiln::Error>(())
//! ```

use crate::error::Error;
use crate::graph::Var;

/// The parameters and gradients paired, each parameter a shared variable with a known shape
/// and its gradient of that type.
fn pairs<'a>(params: &[&'a Var], grads: &'a [Var]) -> Result<Vec<(&'a Var, &'a Var)>, Error> {
    if params.len() != grads.len() {
        return Err(Error::ty(format!(
            "optimizer: {} parameters but {} gradients",
            params.len(),
            grads.len()
        )));
    }
    for (i, (w, g)) in params.iter().zip(grads).enumerate() {
        let what = || w.name().unwrap_or_else(|| format!("parameter {i}"));
        if !matches!(w.kind(), crate::graph::VarKind::Shared(_)) {
            return Err(Error::ty(format!(
                "optimizer: {} is not a shared variable (only shared state can be updated)",
                what()
            )));
        }
        if g.ty() != w.ty() {
            return Err(Error::ty(format!(
                "optimizer: the gradient of {} is {} where the parameter is {}",
                what(),
                g.ty(),
                w.ty()
            )));
        }
    }
    Ok(params.iter().copied().zip(grads).collect())
}

/// A shared variable of zeros of `like`'s type, named `name` (an optimizer's state).
fn zeros_like(name: String, like: &Var) -> Result<Var, Error> {
    like.graph().shared_like(&name, like, 0.0)
}

/// The name an optimizer's state for parameter `i` takes: `PREFIX.KIND.PARAM`.
fn state_name(prefix: &str, kind: &str, w: &Var, i: usize) -> String {
    let param = w.name().unwrap_or_else(|| i.to_string());
    format!("{prefix}.{kind}.{param}")
}

/// Plain gradient descent: `w -= lr * g`.
pub fn sgd(params: &[&Var], grads: &[Var], lr: f64) -> Result<Vec<(Var, Var)>, Error> {
    Ok(pairs(params, grads)?
        .into_iter()
        .map(|(w, g)| (w.clone(), w - g * lr))
        .collect())
}

/// Gradient descent with momentum, PyTorch's form: `b = mu * b + g`, `w -= lr * b`, the
/// velocity `b` kept as shared state (`momentum.b.PARAM`, zeros at first).
pub fn momentum(
    params: &[&Var],
    grads: &[Var],
    lr: f64,
    mu: f64,
) -> Result<Vec<(Var, Var)>, Error> {
    let mut out = Vec::new();
    for (i, (w, g)) in pairs(params, grads)?.into_iter().enumerate() {
        let b = zeros_like(state_name("momentum", "b", w, i), w)?;
        let b_new = &b * mu + g;
        out.push((w.clone(), w - &b_new * lr));
        out.push((b, b_new));
    }
    Ok(out)
}

/// Adam, and AdamW with `weight_decay` (decoupled: `w` shrinks by `lr * weight_decay * w`
/// before the step, `w * (1 - lr * weight_decay)`, as PyTorch's `AdamW`). Per parameter, with `t` the step count from 1:
/// `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
/// `w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`. Its state (`NAME.step`, and
/// `NAME.m.PARAM`, `NAME.v.PARAM` per parameter, zeros at first) is shared, so it is saved
/// with the function's state.
#[derive(Clone, Debug)]
pub struct Adam {
    /// The learning rate (`lr`).
    pub lr: f64,
    /// The first moment's decay rate (`b1`).
    pub beta1: f64,
    /// The second moment's decay rate (`b2`).
    pub beta2: f64,
    /// Added to the corrected `sqrt(v)` so that the step never divides by zero.
    pub eps: f64,
    /// The decoupled weight decay (AdamW); 0 for plain Adam.
    pub weight_decay: f64,
    /// The prefix of its state's names.
    pub name: String,
}

impl Adam {
    /// PyTorch's defaults: betas 0.9 and 0.999, eps 1e-8, no weight decay.
    pub fn new(lr: f64) -> Adam {
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            name: "adam".into(),
        }
    }

    /// The updates of one step: the parameters', their moments' and the step count's.
    pub fn updates(&self, params: &[&Var], grads: &[Var]) -> Result<Vec<(Var, Var)>, Error> {
        let pairs = pairs(params, grads)?;
        let Some(&(first, _)) = pairs.first() else {
            return Ok(Vec::new());
        };
        let g0 = first.graph();
        // The step count in f64 whatever the parameters' dtype: f32 counts exactly only to
        // 2^24, and the corrections are then cast to each parameter's dtype.
        let step = g0.shared(
            &format!("{}.step", self.name),
            ndarray::arr0(0.0f64).into_dyn(),
        );
        let t = &step + 1.0;
        let correction1 = -(&t * self.beta1.ln()).exp() + 1.0;
        let correction2 = -(&t * self.beta2.ln()).exp() + 1.0;
        let mut out = Vec::new();
        for (i, (w, g)) in pairs.into_iter().enumerate() {
            let dtype = w.dtype();
            let m = zeros_like(state_name(&self.name, "m", w, i), w)?;
            let v = zeros_like(state_name(&self.name, "v", w, i), w)?;
            let m_new = &m * self.beta1 + g * (1.0 - self.beta1);
            let v_new = &v * self.beta2 + g.square() * (1.0 - self.beta2);
            // PyTorch's order: denom = sqrt(v) / sqrt(1 - b2^t) + eps, then
            // w - (m / denom) * (lr / (1 - b1^t)).
            let denom = v_new.sqrt() / correction2.sqrt().cast(dtype) + self.eps;
            let step_size = (correction1.reciprocal() * self.lr).cast(dtype);
            let decayed = match self.weight_decay {
                0.0 => w.clone(),
                wd => w * (1.0 - self.lr * wd),
            };
            let w_new = decayed - (&m_new / denom) * step_size;
            out.push((w.clone(), w_new));
            out.push((m, m_new));
            out.push((v, v_new));
        }
        out.push((step, t));
        Ok(out)
    }
}

/// [`Adam`] with PyTorch's defaults and learning rate `lr`.
pub fn adam(params: &[&Var], grads: &[Var], lr: f64) -> Result<Vec<(Var, Var)>, Error> {
    Adam::new(lr).updates(params, grads)
}

/// AdamW: [`Adam`] with PyTorch's defaults and decoupled `weight_decay` (PyTorch's default
/// for `AdamW` is 0.01).
pub fn adamw(
    params: &[&Var],
    grads: &[Var],
    lr: f64,
    weight_decay: f64,
) -> Result<Vec<(Var, Var)>, Error> {
    Adam {
        weight_decay,
        ..Adam::new(lr)
    }
    .updates(params, grads)
}
