//! `kiln::nn` against references written here in plain f64 loops, on the interpreter and the
//! CPU backend: the softmax forms (with inputs large enough to overflow a naive `exp`), the
//! loss, layer norm, GELU, attention with and without its causal mask, their gradients by
//! finite differences, and the optimizers step by step against PyTorch's formulas.

use kiln::{function, nn, verify_grad, Backend, Graph, Tensor, TensorRef, Var, VerifyOptions};
use ndarray::{ArrayD, IxDyn};

/// Values in about [-scale, scale] from a seeded stream.
fn values(shape: &[usize], seed: u64, scale: f64) -> ArrayD<f64> {
    let mut k = 0;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        k += 1;
        (kiln::random::uniform_f64(seed, k) * 2.0 - 1.0) * scale
    })
}

/// `outputs` of `inputs` called on `args`, on `backend`.
fn run(backend: Backend, inputs: &[&Var], outputs: &[&Var], args: &[Tensor]) -> Vec<Vec<f64>> {
    let f = function(inputs, outputs)
        .backend(backend)
        .compile()
        .unwrap();
    let views: Vec<TensorRef> = args.iter().map(|t| t.view()).collect();
    let out = f.call(&views).unwrap();
    out.iter().map(|t| t.to_f64_vec()).collect()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} where {w}"
        );
    }
}

/// Row-wise softmax of `x` (rows along the last axis of width `n`).
fn softmax_rows(x: &[f64], n: usize) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn softmax_forms_match_the_reference_where_a_naive_exp_overflows() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [None, Some(7)]);
    let outs = [
        nn::softmax(&x, -1),
        nn::log_softmax(&x, 1),
        nn::softmax(&x, 0),
    ];
    // Scale 800: exp(800) is infinite in f64.
    let input = values(&[5, 7], 1, 800.0);
    let flat: Vec<f64> = input.iter().copied().collect();
    let want = softmax_rows(&flat, 7);
    let t = input.t().as_standard_layout().into_owned();
    let cols = softmax_rows(&t.iter().copied().collect::<Vec<_>>(), 5);
    let want_cols: Vec<f64> = (0..35).map(|i| cols[(i % 7) * 5 + i / 7]).collect();
    for backend in [Backend::Interp, Backend::Cpu] {
        let got = run(
            backend,
            &[&x],
            &outs.iter().collect::<Vec<_>>(),
            &[input.clone().into()],
        );
        close(&got[0], &want, 1e-12, "softmax");
        let logs: Vec<f64> = want.iter().map(|p| p.ln()).collect();
        // Where the softmax underflows, log_softmax stays finite: compare those through x.
        for (i, (&l, &w)) in got[1].iter().zip(&logs).enumerate() {
            assert!(l.is_finite(), "log_softmax[{i}] = {l}");
            if w.is_finite() {
                assert!(
                    (l - w).abs() <= 1e-9 * (1.0 + w.abs()),
                    "log_softmax[{i}]: {l} vs {w}"
                );
            }
        }
        close(&got[2], &want_cols, 1e-12, "softmax along axis 0");
    }
}

#[test]
fn cross_entropy_is_the_mean_negative_log_likelihood_and_refuses_a_bad_target() {
    let g = Graph::new();
    let logits = g.input("logits", kiln::f64, [None, Some(5)]);
    let targets = g.input("targets", kiln::i64, [None]);
    let loss = nn::cross_entropy(&logits, &targets);
    let x = values(&[6, 5], 2, 4.0);
    let t: Vec<i64> = vec![0, 4, 2, 2, 1, 3];
    let flat: Vec<f64> = x.iter().copied().collect();
    let p = softmax_rows(&flat, 5);
    let want = -(0..6).map(|r| p[r * 5 + t[r] as usize].ln()).sum::<f64>() / 6.0;
    let tt = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[6]), t).unwrap());
    for backend in [Backend::Interp, Backend::Cpu] {
        let got = run(
            backend,
            &[&logits, &targets],
            &[&loss],
            &[x.clone().into(), tt.clone()],
        );
        close(&got[0], &[want], 1e-12, "cross_entropy");
        let f = function(&[&logits, &targets], &[&loss])
            .backend(backend)
            .compile()
            .unwrap();
        let bad = ArrayD::from_shape_vec(IxDyn(&[6]), vec![0i64, 5, 0, 0, 0, 0]).unwrap();
        let e = f
            .call(&[x.view().into(), bad.view().into()] as &[TensorRef])
            .unwrap_err();
        assert!(e.to_string().contains("take_along_axis"), "{e}");
    }
}

#[test]
fn layer_norm_and_gelu_match_their_formulas() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3), Some(4), Some(6)]);
    let gain = g.input("gain", kiln::f64, [Some(6)]);
    let bias = g.input("bias", kiln::f64, [Some(6)]);
    let outs = [nn::layer_norm(&x, &gain, &bias, 1e-5), nn::gelu(&x)];
    let (xv, gv, bv) = (
        values(&[3, 4, 6], 3, 3.0),
        values(&[6], 4, 2.0),
        values(&[6], 5, 1.0),
    );
    let flat: Vec<f64> = xv.iter().copied().collect();
    let mut norm = Vec::new();
    for row in flat.chunks(6) {
        let mean = row.iter().sum::<f64>() / 6.0;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 6.0;
        for (j, v) in row.iter().enumerate() {
            norm.push((v - mean) / (var + 1e-5).sqrt() * gv[j] + bv[j]);
        }
    }
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let gelu: Vec<f64> = flat
        .iter()
        .map(|&v| 0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh()))
        .collect();
    for backend in [Backend::Interp, Backend::Cpu] {
        let args = [xv.clone().into(), gv.clone().into(), bv.clone().into()];
        let got = run(
            backend,
            &[&x, &gain, &bias],
            &outs.iter().collect::<Vec<_>>(),
            &args,
        );
        close(&got[0], &norm, 1e-12, "layer_norm");
        close(&got[1], &gelu, 1e-12, "gelu");
    }
}

/// Attention of `[b, tq, d]` queries over `[b, tk, d]` keys and `[b, tk, dv]` values.
fn attention_reference(
    q: &ArrayD<f64>,
    k: &ArrayD<f64>,
    v: &ArrayD<f64>,
    causal: bool,
) -> Vec<f64> {
    let (b, tq, d) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (tk, dv) = (k.shape()[1], v.shape()[2]);
    let mut out = Vec::new();
    for n in 0..b {
        for i in 0..tq {
            let scores: Vec<f64> = (0..tk)
                .map(|j| {
                    let s: f64 = (0..d).map(|c| q[[n, i, c]] * k[[n, j, c]]).sum();
                    let hidden = causal && j + tq > i + tk;
                    s / (d as f64).sqrt() + if hidden { -1e9 } else { 0.0 }
                })
                .collect();
            let p = softmax_rows(&scores, tk);
            for c in 0..dv {
                out.push((0..tk).map(|j| p[j] * v[[n, j, c]]).sum());
            }
        }
    }
    out
}

#[test]
fn attention_with_and_without_its_causal_mask_matches_the_reference() {
    let g = Graph::new();
    let (tq, tk): (usize, usize) = (3, 5);
    let q = g.input("q", kiln::f64, [Some(2), Some(tq as i64), Some(4)]);
    let k = g.input("k", kiln::f64, [Some(2), Some(tk as i64), Some(4)]);
    let v = g.input("v", kiln::f64, [Some(2), Some(tk as i64), Some(3)]);
    let outs = [
        nn::attention(&q, &k, &v, false),
        nn::attention(&q, &k, &v, true),
    ];
    let (qv, kv, vv) = (
        values(&[2, tq, 4], 6, 2.0),
        values(&[2, tk, 4], 7, 2.0),
        values(&[2, tk, 3], 8, 1.0),
    );
    let args = [qv.clone().into(), kv.clone().into(), vv.clone().into()];
    for backend in [Backend::Interp, Backend::Cpu] {
        let got = run(
            backend,
            &[&q, &k, &v],
            &outs.iter().collect::<Vec<_>>(),
            &args,
        );
        close(
            &got[0],
            &attention_reference(&qv, &kv, &vv, false),
            1e-12,
            "attention",
        );
        close(
            &got[1],
            &attention_reference(&qv, &kv, &vv, true),
            1e-12,
            "causal",
        );
    }
}

#[test]
fn attention_that_needs_an_unknown_dim_is_an_error_naming_the_line() {
    let g = Graph::new();
    let q = g.input("q", kiln::f32, [Some(2), None, None]);
    let k = g.input("k", kiln::f32, [Some(2), None, Some(4)]);
    let line = line!() + 1;
    let a = nn::attention(&q, &k, &k, false);
    let e = function(&[&q, &k], &[&a])
        .compile()
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("sets the scale") && e.contains(&format!("nn.rs:{line}")),
        "{e}"
    );
    let q = g.input("q2", kiln::f32, [Some(2), None, Some(4)]);
    let line = line!() + 1;
    let a = nn::attention(&q, &k, &k, true);
    let e = function(&[&q, &k], &[&a])
        .compile()
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("lengths known") && e.contains(&format!("nn.rs:{line}")),
        "{e}"
    );
}

#[test]
fn the_gradients_match_finite_differences() {
    let opts = VerifyOptions::default;
    let check = |build: &dyn Fn(&Graph, &[Var]) -> Var, points: &[ArrayD<f64>]| {
        for backend in [Backend::Interp, Backend::Cpu] {
            verify_grad(build, points, VerifyOptions { backend, ..opts() }).unwrap();
        }
    };
    let x = values(&[3, 5], 9, 2.0);
    check(
        &|_, v| nn::softmax(&v[0], -1) * &v[0],
        std::slice::from_ref(&x),
    );
    check(
        &|_, v| nn::log_softmax(&v[0], 0) * &v[0],
        std::slice::from_ref(&x),
    );
    check(
        &|g, v| {
            let t = g.constant(ArrayD::from_shape_vec(IxDyn(&[3]), vec![4i64, 0, 2]).unwrap());
            nn::cross_entropy(&v[0], &t)
        },
        std::slice::from_ref(&x),
    );
    check(
        &|_, v| nn::layer_norm(&v[0], &v[1], &v[2], 1e-5) * &v[0],
        &[x.clone(), values(&[5], 10, 1.0), values(&[5], 11, 1.0)],
    );
    check(&|_, v| nn::gelu(&v[0]), std::slice::from_ref(&x));
    check(
        &|_, v| nn::attention(&v[0], &v[1], &v[2], true).square(),
        &[
            values(&[2, 3, 4], 12, 1.0),
            values(&[2, 3, 4], 13, 1.0),
            values(&[2, 3, 2], 14, 1.0),
        ],
    );
}

/// A loss with gradients that differ from parameter to parameter and step to step:
/// `sum(w^4 / 4 - w)`, gradient `w^3 - 1`.
fn quartic(w: &Var) -> Var {
    (w.square().square() * 0.25 - w).sum(None, false)
}

/// What builds an optimizer's updates from parameters and gradients.
type Optimizer<'a> = dyn Fn(&[&Var], &[Var]) -> kiln::Result<Vec<(Var, Var)>> + 'a;

/// Runs `steps` steps of the updates `make` builds and returns the parameter after each.
fn train(make: &Optimizer<'_>, start: &[f64], steps: usize) -> Vec<Vec<f64>> {
    let g = Graph::new();
    let w = g.shared(
        "w",
        ArrayD::from_shape_vec(IxDyn(&[start.len()]), start.to_vec()).unwrap(),
    );
    let loss = quartic(&w);
    let grads = kiln::grad(&loss, &[&w]).unwrap();
    let f = function(&[], &[&loss])
        .updates(make(&[&w], &grads).unwrap())
        .compile()
        .unwrap();
    (0..steps)
        .map(|_| {
            f.call(&[] as &[TensorRef]).unwrap();
            w.value().unwrap().to_f64_vec()
        })
        .collect()
}

#[test]
fn the_optimizers_follow_pytorchs_formulas() {
    let start = [0.5, -1.5, 2.0];
    let grad = |w: f64| w * w * w - 1.0;
    let steps = 5;
    let reference = |update: &mut dyn FnMut(usize, usize, f64, f64) -> f64| {
        let mut w = start.to_vec();
        (1..=steps)
            .map(|t| {
                for (i, wi) in w.iter_mut().enumerate() {
                    *wi = update(t, i, *wi, grad(*wi));
                }
                w.clone()
            })
            .collect::<Vec<_>>()
    };
    let compare = |got: Vec<Vec<f64>>, want: Vec<Vec<f64>>, what: &str| {
        for (t, (g, w)) in got.iter().zip(&want).enumerate() {
            close(g, w, 1e-12, &format!("{what} step {}", t + 1));
        }
        // The steps moved the parameters: a no-op optimizer fails above.
        assert!(want[0].iter().zip(&start).all(|(a, b)| a != b));
    };
    compare(
        train(&|p, g| nn::sgd(p, g, 0.1), &start, steps),
        reference(&mut |_, _, w, g| w - 0.1 * g),
        "sgd",
    );
    let mut b = [0.0; 3];
    compare(
        train(&|p, g| nn::momentum(p, g, 0.05, 0.9), &start, steps),
        reference(&mut |_, i, w, g| {
            b[i] = 0.9 * b[i] + g;
            w - 0.05 * b[i]
        }),
        "momentum",
    );
    for wd in [0.0, 0.1] {
        let (mut m, mut v) = ([0.0; 3], [0.0; 3]);
        let (lr, b1, b2, eps) = (0.05, 0.9, 0.999, 1e-8);
        compare(
            train(&|p, g| nn::adamw(p, g, lr, wd), &start, steps),
            reference(&mut |t, i, w, g| {
                let w = w * (1.0 - lr * wd);
                m[i] = b1 * m[i] + (1.0 - b1) * g;
                v[i] = b2 * v[i] + (1.0 - b2) * g * g;
                let (c1, c2) = (1.0 - b1.powi(t as i32), 1.0 - b2.powi(t as i32));
                w - (lr / c1) * m[i] / (v[i].sqrt() / c2.sqrt() + eps)
            }),
            &format!("adamw (weight decay {wd})"),
        );
    }
}

#[test]
fn an_optimizer_refuses_what_it_cannot_update() {
    let g = Graph::new();
    let w = g.shared("w", ArrayD::<f32>::zeros(IxDyn(&[2])));
    let x = g.input("x", kiln::f32, [Some(2)]);
    let grads = kiln::grad(&(&w * &x).sum(None, false), &[&w, &x]).unwrap();
    let e = nn::adam(&[&w], &grads, 0.1).unwrap_err().to_string();
    assert!(e.contains("1 parameters but 2 gradients"), "{e}");
    let e = nn::sgd(&[&w, &x], &grads, 0.1).unwrap_err().to_string();
    assert!(e.contains("x is not a shared variable"), "{e}");
    let e = nn::momentum(&[&w], &grads[1..], 0.1, 0.9).err();
    assert!(
        e.is_none(),
        "a gradient of the parameter's type is accepted"
    );
    let wrong = [grads[0].sum(None, false)];
    let e = nn::adam(&[&w], &wrong, 0.1).unwrap_err().to_string();
    assert!(e.contains("the gradient of w is"), "{e}");
}
