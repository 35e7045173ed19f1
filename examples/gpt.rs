//! A GPT-style language model trained on a generated language: token and position embeddings,
//! `BLOCKS` pre-norm transformer blocks (causal self-attention over `HEADS` heads, a GELU MLP,
//! residuals), a final layer norm and a linear head, trained by Adam written out by hand, all
//! in one compiled function with gradients from `kiln::grad`. It is the model the issue about
//! real-model speed measures: products of many shapes, head reshapes and transposes, batched
//! products of attention, masked softmax and layer-norm rows.
//!
//! The language: each sequence counts through the vocabulary modulo its size with a stride of
//! its own (1, 3, 5 or 7) from a random start, so after two tokens the next is certain to a
//! model that attends back to find the stride.
//!
//! Run with `cargo run --release --example gpt`. With `--time N` it then times N training
//! steps and N inference calls (the forward pass alone, a fresh batch each) and prints their
//! medians; `KILN_PROFILE=1` adds the per-step profile.

use kiln::{function, Graph, TensorRef, Var};
use ndarray::{ArrayD, IxDyn};
use std::time::Instant;

const VOCAB: usize = 256;
const DIM: usize = 128;
const HEADS: usize = 4;
const BLOCKS: usize = 2;
const SEQ: usize = 64;
const BATCH: usize = 16;
const HEAD_DIM: usize = DIM / HEADS;

/// A small deterministic generator for the sequences.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// `BATCH` sequences of `SEQ + 1` tokens, as inputs (the first `SEQ`) and targets (the last
/// `SEQ`), each `[BATCH, SEQ]`.
fn batch(rng: &mut Lcg) -> (ArrayD<i64>, ArrayD<i64>) {
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for _ in 0..BATCH {
        let stride = [1, 3, 5, 7][rng.below(4)];
        let start = rng.below(VOCAB);
        let tok = |t: usize| ((start + stride * t) % VOCAB) as i64;
        inputs.extend((0..SEQ).map(tok));
        targets.extend((1..=SEQ).map(tok));
    }
    let shape = IxDyn(&[BATCH, SEQ]);
    (
        ArrayD::from_shape_vec(shape.clone(), inputs).expect("BATCH x SEQ tokens"),
        ArrayD::from_shape_vec(shape, targets).expect("BATCH x SEQ tokens"),
    )
}

/// Weights of `shape` drawn from a normal distribution with standard deviation `scale`.
fn init(seed: u64, shape: &[usize], scale: f64) -> ArrayD<f32> {
    let mut k = 0u64;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        k += 1;
        (scale * kiln::random::normal_f64(seed, k)) as f32
    })
}

/// The model's parameters, created as shared variables in the order Adam walks them.
struct Params {
    all: Vec<Var>,
}

impl Params {
    fn add(&mut self, g: &Graph, name: &str, value: ArrayD<f32>) -> Var {
        let v = g.shared(name, value);
        self.all.push(v.clone());
        v
    }

    fn weight(&mut self, g: &Graph, name: &str, shape: &[usize]) -> Var {
        let seed = self.all.len() as u64 + 1;
        self.add(g, name, init(seed, shape, 0.02))
    }

    fn filled(&mut self, g: &Graph, name: &str, n: usize, value: f32) -> Var {
        self.add(g, name, ArrayD::from_elem(IxDyn(&[n]), value))
    }
}

/// Layer norm over the last axis (biased variance, epsilon 1e-5), then a gain and a bias.
fn layer_norm(x: &Var, gain: &Var, bias: &Var) -> Var {
    let mean = x.mean(Some(&[-1]), true);
    let centered = x - &mean;
    let var = centered.square().mean(Some(&[-1]), true);
    &centered * (&var + 1e-5).rsqrt() * gain + bias
}

/// GELU, the tanh form GPT-2 uses.
fn gelu(x: &Var) -> Var {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let inner = (x + x * x * x * 0.044715) * c;
    x * 0.5 * (inner.tanh() + 1.0)
}

/// `[BATCH, SEQ, DIM]` to `[BATCH, HEADS, SEQ, HEAD_DIM]`.
fn split_heads(x: &Var) -> Var {
    let shape = [BATCH, SEQ, HEADS, HEAD_DIM].map(|d| d as i64);
    x.reshape(&shape).transpose(&[0, 2, 1, 3])
}

/// One pre-norm block: causal self-attention, then the MLP, each added to its input.
fn block(g: &Graph, p: &mut Params, i: usize, h: &Var, mask: &Var) -> Var {
    let name = |s: &str| format!("block{i}.{s}");
    let (ln1_g, ln1_b) = (
        p.filled(g, &name("ln1.gain"), DIM, 1.0),
        p.filled(g, &name("ln1.bias"), DIM, 0.0),
    );
    let wq = p.weight(g, &name("wq"), &[DIM, DIM]);
    let wk = p.weight(g, &name("wk"), &[DIM, DIM]);
    let wv = p.weight(g, &name("wv"), &[DIM, DIM]);
    let wo = p.weight(g, &name("wo"), &[DIM, DIM]);
    let x = layer_norm(h, &ln1_g, &ln1_b);
    let (q, k, v) = (
        split_heads(&x.matmul(&wq)),
        split_heads(&x.matmul(&wk)),
        split_heads(&x.matmul(&wv)),
    );
    let scores = q.matmul(&k.transpose(&[0, 1, 3, 2])) * (1.0 / (HEAD_DIM as f64).sqrt()) + mask;
    let shifted = &scores - scores.max(Some(&[-1]), true);
    let e = shifted.exp();
    let att = &e / e.sum(Some(&[-1]), true);
    let merged =
        att.matmul(&v)
            .transpose(&[0, 2, 1, 3])
            .reshape(&[BATCH as i64, SEQ as i64, DIM as i64]);
    let h = h + merged.matmul(&wo);

    let (ln2_g, ln2_b) = (
        p.filled(g, &name("ln2.gain"), DIM, 1.0),
        p.filled(g, &name("ln2.bias"), DIM, 0.0),
    );
    let w1 = p.weight(g, &name("w1"), &[DIM, 4 * DIM]);
    let b1 = p.filled(g, &name("b1"), 4 * DIM, 0.0);
    let w2 = p.weight(g, &name("w2"), &[4 * DIM, DIM]);
    let b2 = p.filled(g, &name("b2"), DIM, 0.0);
    let x = layer_norm(&h, &ln2_g, &ln2_b);
    &h + gelu(&(x.matmul(&w1) + &b1)).matmul(&w2) + &b2
}

/// The logits `[BATCH * SEQ, VOCAB]` of `tokens` `[BATCH, SEQ]`.
fn forward(g: &Graph, p: &mut Params, tokens: &Var) -> Var {
    let wte = p.weight(g, "wte", &[VOCAB, DIM]);
    let wpe = p.weight(g, "wpe", &[SEQ, DIM]);
    // 0 where a position may look (itself and before), a large negative number after it.
    let mask = ArrayD::from_shape_fn(
        IxDyn(&[SEQ, SEQ]),
        |i| {
            if i[1] > i[0] {
                -1e9f32
            } else {
                0.0
            }
        },
    );
    let mask = g.constant(mask);
    let mut h = wte.take(tokens, 0) + &wpe;
    for i in 0..BLOCKS {
        h = block(g, p, i, &h, &mask);
    }
    let gain = p.filled(g, "ln_f.gain", DIM, 1.0);
    let bias = p.filled(g, "ln_f.bias", DIM, 0.0);
    let head = p.weight(g, "head", &[DIM, VOCAB]);
    layer_norm(&h, &gain, &bias)
        .reshape(&[(BATCH * SEQ) as i64, DIM as i64])
        .matmul(&head)
}

/// Median of `times` (milliseconds).
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() -> Result<(), kiln::Error> {
    let time_steps: Option<usize> = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, n] if flag == "--time" => n.parse().ok(),
        _ => {
            eprintln!("usage: gpt [--time STEPS]");
            std::process::exit(2);
        }
    };
    let g = Graph::new();
    let tokens = g.input("tokens", kiln::i64, [Some(BATCH), Some(SEQ)]);
    let targets = g.input("targets", kiln::i64, [Some(BATCH), Some(SEQ)]);
    let mut p = Params { all: Vec::new() };
    let logits = forward(&g, &mut p, &tokens);
    let shifted = &logits - logits.max(Some(&[1]), true);
    let log_p = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let target = targets
        .reshape(&[(BATCH * SEQ) as i64])
        .one_hot(VOCAB, kiln::f32);
    let loss = -(&target * &log_p).sum(Some(&[1]), false).mean(None, false);

    // Adam (beta1 0.9, beta2 0.999, epsilon 1e-8), with its bias corrections from a step
    // count kept as shared state.
    let params: Vec<&Var> = p.all.iter().collect();
    let grads = kiln::grad(&loss, &params)?;
    let (lr, b1, b2) = (3e-3, 0.9, 0.999);
    let step = g.shared("adam.step", ArrayD::<f32>::zeros(IxDyn(&[])));
    let t = &step + 1.0;
    let correction1 = -((&t * f64::ln(b1)).exp()) + 1.0;
    let correction2 = -((&t * f64::ln(b2)).exp()) + 1.0;
    let rate = correction2.sqrt() / correction1 * lr;
    let mut train = function(&[&tokens, &targets], &[&loss]).update(&step, &t);
    for (w, gw) in params.iter().zip(&grads) {
        let shape = w.ty().known_shape().expect("parameters have static shapes");
        let zeros = || ArrayD::<f32>::zeros(IxDyn(&shape));
        let m = g.shared(&format!("adam.m.{}", w.name().unwrap_or_default()), zeros());
        let v = g.shared(&format!("adam.v.{}", w.name().unwrap_or_default()), zeros());
        let m_new = &m * b1 + gw * (1.0 - b1);
        let v_new = &v * b2 + gw.square() * (1.0 - b2);
        let w_new = *w - &m_new * &rate / (v_new.sqrt() + 1e-8);
        train = train.update(&m, m_new).update(&v, v_new).update(w, w_new);
    }
    let t0 = Instant::now();
    let train = train.compile()?;
    let infer = function(&[&tokens], &[&logits]).compile()?;
    println!(
        "compiled the training step and inference in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );

    let mut rng = Lcg(7);
    let steps = 150;
    let (mut first, mut last) = (f64::NAN, f64::NAN);
    for i in 0..steps {
        let (x, y) = batch(&mut rng);
        let out = train.call(&[x.view().into(), y.view().into()] as &[TensorRef])?;
        let l = out[0].to_f64_vec()[0];
        if i == 0 {
            first = l;
        }
        if i % 25 == 0 || i == steps - 1 {
            println!("step {i:>3}  loss {l:.4}");
        }
        last = l;
    }
    // A fresh model guesses among 256 tokens: ln(256) = 5.55. One that has found the stride
    // after the first two tokens is left with the first two guesses' share.
    println!("loss {first:.4} -> {last:.4}");
    if last.is_nan() || last >= first / 2.0 {
        return Err(kiln::Error::Runtime(format!(
            "the model did not learn: loss {first} -> {last}"
        )));
    }
    if let Some(n) = time_steps {
        let data: Vec<_> = (0..n).map(|_| batch(&mut rng)).collect();
        let mut times = Vec::with_capacity(n);
        for (x, y) in &data {
            let t = Instant::now();
            train.call(&[x.view().into(), y.view().into()] as &[TensorRef])?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!("train step median {:.3} ms over {n} steps", median(times));
        let mut times = Vec::with_capacity(n);
        for (x, _) in &data {
            let t = Instant::now();
            infer.call(&[x.view().into()] as &[TensorRef])?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!("inference median {:.3} ms over {n} calls", median(times));
    }
    Ok(())
}
