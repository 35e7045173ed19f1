//! A GPT-style language model trained on a generated language: token and position embeddings,
//! `BLOCKS` pre-norm transformer blocks (causal self-attention over `HEADS` heads, a GELU MLP,
//! residuals), a final layer norm and a linear head, trained by Adam, all in one compiled
//! function with gradients from `kiln::grad`; the layers, the loss and the optimizer come from
//! `kiln::nn`. It is the model the issue about
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

use kiln::{function, nn, Graph, TensorRef, Var};
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

/// `[BATCH, SEQ, DIM]` to `[BATCH, HEADS, SEQ, HEAD_DIM]`.
fn split_heads(x: &Var) -> Var {
    let shape = [BATCH, SEQ, HEADS, HEAD_DIM].map(|d| d as i64);
    x.reshape(&shape).transpose(&[0, 2, 1, 3])
}

/// One pre-norm block: causal self-attention, then the MLP, each added to its input.
fn block(g: &Graph, p: &mut Params, i: usize, h: &Var) -> Var {
    let name = |s: &str| format!("block{i}.{s}");
    let (ln1_g, ln1_b) = (
        p.filled(g, &name("ln1.gain"), DIM, 1.0),
        p.filled(g, &name("ln1.bias"), DIM, 0.0),
    );
    let wq = p.weight(g, &name("wq"), &[DIM, DIM]);
    let wk = p.weight(g, &name("wk"), &[DIM, DIM]);
    let wv = p.weight(g, &name("wv"), &[DIM, DIM]);
    let wo = p.weight(g, &name("wo"), &[DIM, DIM]);
    let x = nn::layer_norm(h, &ln1_g, &ln1_b, 1e-5);
    let (q, k, v) = (
        split_heads(&x.matmul(&wq)),
        split_heads(&x.matmul(&wk)),
        split_heads(&x.matmul(&wv)),
    );
    let att = nn::attention(&q, &k, &v, true);
    let merged = att
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
    let x = nn::layer_norm(&h, &ln2_g, &ln2_b, 1e-5);
    &h + nn::gelu(&(x.matmul(&w1) + &b1)).matmul(&w2) + &b2
}

/// The logits `[BATCH * SEQ, VOCAB]` of `tokens` `[BATCH, SEQ]`.
fn forward(g: &Graph, p: &mut Params, tokens: &Var) -> Var {
    let wte = p.weight(g, "wte", &[VOCAB, DIM]);
    let wpe = p.weight(g, "wpe", &[SEQ, DIM]);
    let mut h = wte.take(tokens, 0) + &wpe;
    for i in 0..BLOCKS {
        h = block(g, p, i, &h);
    }
    let gain = p.filled(g, "ln_f.gain", DIM, 1.0);
    let bias = p.filled(g, "ln_f.bias", DIM, 0.0);
    let head = p.weight(g, "head", &[DIM, VOCAB]);
    nn::layer_norm(&h, &gain, &bias, 1e-5)
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
    let tokens = g.input("tokens", kiln::i64, [Some(BATCH as i64), Some(SEQ as i64)]);
    let targets = g.input("targets", kiln::i64, [Some(BATCH as i64), Some(SEQ as i64)]);
    let mut p = Params { all: Vec::new() };
    let logits = forward(&g, &mut p, &tokens);
    let loss = nn::cross_entropy(&logits, &targets.reshape(&[(BATCH * SEQ) as i64]));

    // Adam (PyTorch's defaults: beta1 0.9, beta2 0.999, epsilon 1e-8), its moments and step
    // count kept as shared state.
    let params: Vec<&Var> = p.all.iter().collect();
    let grads = kiln::grad(&loss, &params)?;
    let train = function(&[&tokens, &targets], &[&loss]).updates(nn::adam(&params, &grads, 3e-3)?);
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
