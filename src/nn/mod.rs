//! What every model writes by hand, built from kiln's ops through the graph API: the stable
//! softmax forms, the loss, layer norm, GELU, attention, and optimizers as update builders
//! ([`optim`]). Each is a function of [`Var`]s returning a [`Var`], the same graph a user would
//! write, so the optimizer fuses it as it fuses theirs (a softmax's rows become one row group)
//! and `kiln::grad` differentiates it. Errors (a shape that does not fit, an unknown dim one
//! of them needs) poison the result like any op's, naming the caller's line.
//!
//! ```
//! use kiln::{function, nn, Graph};
//! use ndarray::array;
//!
//! let g = Graph::new();
//! let logits = g.input("logits", kiln::f32, [None, Some(3)]);
//! let targets = g.input("targets", kiln::i64, [None]);
//! let loss = nn::cross_entropy(&logits, &targets);
//! let f = function(&[&logits, &targets], &[&loss]).compile()?;
//! let out = f.call(&[
//!     array![[2.0f32, 0.0, 0.0], [0.0, 0.0, 0.0]].into_dyn().view().into(),
//!     array![0i64, 2].into_dyn().view().into(),
//! ] as &[kiln::TensorRef])?;
//! let want = ((1.0 + 2.0 * (-2.0f64).exp()).ln() + 3f64.ln()) / 2.0;
//! assert!((out[0].to_f64_vec()[0] - want).abs() < 1e-6);
//! # Ok::<(), kiln::Error>(())
//! ```

pub mod optim;

pub use optim::{adam, adamw, momentum, sgd, Adam};

use crate::graph::Var;

/// `x - max(x)` along `axis`: the shift that keeps `exp` from overflowing (softmax does not
/// change under it).
#[track_caller]
fn shifted(x: &Var, axis: i64) -> Var {
    x - x.max(Some(&[axis]), true)
}

/// Softmax along `axis` (negative counts from the end): `exp(x) / sum(exp(x))`, computed
/// from `x - max(x)` so that large inputs do not overflow.
#[track_caller]
pub fn softmax(x: &Var, axis: i64) -> Var {
    let e = shifted(x, axis).exp();
    &e / e.sum(Some(&[axis]), true)
}

/// `log(softmax(x))` along `axis`, as `s - log(sum(exp(s)))` with `s = x - max(x)`: finite
/// where the softmax itself would round to zero.
#[track_caller]
pub fn log_softmax(x: &Var, axis: i64) -> Var {
    let s = shifted(x, axis);
    &s - s.exp().sum(Some(&[axis]), true).log()
}

/// The mean over every row of `-log_softmax(logits)[target]`: `logits` `[..., classes]`,
/// `targets` integers (i32 or i64) of the leading shape `[...]`. A target outside
/// `0..classes` is an error when the function runs.
#[track_caller]
pub fn cross_entropy(logits: &Var, targets: &Var) -> Var {
    let picked = log_softmax(logits, -1).take_along_axis(&targets.expand_dims(&[-1]), -1);
    -picked.mean(None, false)
}

/// Layer norm over the last axis: `(x - mean) / sqrt(var + eps) * gain + bias`, the variance
/// biased (divided by the row's length), as PyTorch's `LayerNorm` and GPT-2 compute it.
/// `gain` and `bias` broadcast against the last axis (`[features]`).
#[track_caller]
pub fn layer_norm(x: &Var, gain: &Var, bias: &Var, eps: f64) -> Var {
    let centered = x - x.mean(Some(&[-1]), true);
    let var = centered.square().mean(Some(&[-1]), true);
    &centered * (var + eps).rsqrt() * gain + bias
}

/// GELU in the tanh form GPT-2 uses: `x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))`.
#[track_caller]
pub fn gelu(x: &Var) -> Var {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let inner = (x + x * x * x * 0.044715) * c;
    x * 0.5 * (inner.tanh() + 1.0)
}

/// Scaled dot-product attention: `softmax(q k^T / sqrt(d)) v` over the last two axes, the
/// leading (batch, head) axes broadcast. `q` is `[..., tq, d]`, `k` `[..., tk, d]`, `v`
/// `[..., tk, dv]`; `d` must be known when the graph is built (it sets the scale). With
/// `causal`, query `i` sees the keys up to `i + tk - tq` (the last query sees every key, as in
/// a decoder whose keys include earlier positions), which needs `tq` and `tk` known too: the
/// others get `-1e9` added to their scores (in the scores' dtype), so they weigh nothing.
#[track_caller]
pub fn attention(q: &Var, k: &Var, v: &Var, causal: bool) -> Var {
    let loc = crate::error::SourceLoc::caller();
    let (qt, kt) = (q.ty(), k.ty());
    let last_two = |t: &crate::ir::TensorType| {
        let r = t.rank();
        (r >= 2).then(|| (t.shape[r - 2], t.shape[r - 1]))
    };
    let (Some((tq, d)), Some((tk, _))) = (last_two(&qt), last_two(&kt)) else {
        return q.apply_with(loc, |_| {
            Err("attention: q and k need at least two axes".into())
        });
    };
    let Some(d) = d else {
        return q.apply_with(loc, |_| {
            Err("attention: the last axis of q must be known (it sets the scale)".into())
        });
    };
    let mut perm: Vec<i64> = (0..kt.rank() as i64).collect();
    perm.swap(kt.rank() - 2, kt.rank() - 1);
    let scores = q.matmul(&k.transpose(&perm)) * (1.0 / (d.max(1) as f64).sqrt());
    let scores = match (causal, tq, tk) {
        (false, _, _) => scores,
        (true, Some(tq), Some(tk)) => {
            let shift = tk as i64 - tq as i64;
            let mask = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[tq, tk]), |i| {
                if i[1] as i64 > i[0] as i64 + shift {
                    -1e9f64
                } else {
                    0.0
                }
            });
            let mask = q.graph().constant(mask).cast(q.dtype());
            scores + mask
        }
        (true, _, _) => {
            return q.apply_with(loc, |_| {
                Err("attention: a causal mask needs the query and key lengths known".into())
            })
        }
    };
    softmax(&scores, -1).matmul(v)
}
