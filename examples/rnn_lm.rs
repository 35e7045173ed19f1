//! A recurrent language model trained on a generated language: an embedding, a tanh RNN
//! cell run over the sequence by `kiln::scan`, and a softmax over the vocabulary at each
//! step, trained by SGD with gradients from `kiln::grad` (through the scan: a reverse scan
//! over the hidden states the forward one kept).
//!
//! The language: each sequence counts through the vocabulary modulo its size with a stride of
//! its own (1 or 3) from a random start, so after one token the next is certain only to a
//! model that has inferred the stride from what it has read: the carried state must remember.
//!
//! Run with `cargo run --release --example rnn_lm`. With `--time N` it trains N steps more and
//! prints the median time of one training step (`benches/rnn_vs_jax.py` runs this beside the
//! same model in JAX).

use kiln::{function, Graph, TensorRef};
use ndarray::{ArrayD, IxDyn};
use std::time::Instant;

const VOCAB: usize = 32;
const EMBED: usize = 16;
const HIDDEN: usize = 64;
const BATCH: usize = 32;
const STEPS: usize = 24;

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

/// `BATCH` sequences of `STEPS + 1` tokens, as inputs (the first `STEPS`) and targets (the
/// last `STEPS`), each `[STEPS, BATCH]`.
fn batch(rng: &mut Lcg) -> (ArrayD<i64>, ArrayD<i64>) {
    let mut tokens = vec![0i64; (STEPS + 1) * BATCH];
    for b in 0..BATCH {
        let stride = [1, 3][rng.below(2)];
        let mut tok = rng.below(VOCAB);
        for t in 0..=STEPS {
            tokens[t * BATCH + b] = tok as i64;
            tok = (tok + stride) % VOCAB;
        }
    }
    let shape = IxDyn(&[STEPS, BATCH]);
    let inputs = ArrayD::from_shape_vec(shape.clone(), tokens[..STEPS * BATCH].to_vec());
    let targets = ArrayD::from_shape_vec(shape, tokens[BATCH..].to_vec());
    (
        inputs.expect("STEPS x BATCH tokens"),
        targets.expect("STEPS x BATCH tokens"),
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

fn main() -> Result<(), kiln::Error> {
    let time_steps: Option<usize> = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, n] if flag == "--time" => n.parse().ok(),
        _ => {
            eprintln!("usage: rnn_lm [--time STEPS]");
            std::process::exit(2);
        }
    };
    let g = Graph::new();
    let inputs = g.input(
        "inputs",
        kiln::i64,
        [Some(STEPS as i64), Some(BATCH as i64)],
    );
    let targets = g.input(
        "targets",
        kiln::i64,
        [Some(STEPS as i64), Some(BATCH as i64)],
    );
    let embed = g.shared("embed", init(1, &[VOCAB, EMBED], 1.0));
    let wx = g.shared("wx", init(2, &[EMBED, HIDDEN], (1.0 / EMBED as f64).sqrt()));
    let wh = g.shared(
        "wh",
        init(3, &[HIDDEN, HIDDEN], (1.0 / HIDDEN as f64).sqrt()),
    );
    let bh = g.shared("bh", ArrayD::<f32>::zeros(IxDyn(&[HIDDEN])));
    let wo = g.shared(
        "wo",
        init(4, &[HIDDEN, VOCAB], (1.0 / HIDDEN as f64).sqrt()),
    );
    let bo = g.shared("bo", ArrayD::<f32>::zeros(IxDyn(&[VOCAB])));

    // [STEPS, BATCH] tokens -> [STEPS, BATCH, EMBED] -> hidden states [STEPS, BATCH, HIDDEN].
    let x = embed.take(&inputs, 0);
    let h0 = g.constant(ArrayD::<f32>::zeros(IxDyn(&[BATCH, HIDDEN])));
    let (_, hs) = kiln::scan(&[&h0], &[&x], |h, x| {
        let h = (x[0].matmul(&wx) + h[0].matmul(&wh) + &bh).tanh();
        (vec![h.clone()], vec![h])
    });
    let rows = (STEPS * BATCH) as i64;
    let logits = hs[0].reshape(&[rows, HIDDEN as i64]).matmul(&wo) + &bo;
    let shifted = &logits - logits.max(Some(&[1]), true);
    let log_p = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let target = targets.reshape(&[rows]).one_hot(VOCAB as i64, kiln::f32);
    let loss = -(&target * &log_p).sum(Some(&[1]), false).mean(None, false);

    let params = [&embed, &wx, &wh, &bh, &wo, &bo];
    let grads = kiln::grad(&loss, &params)?;
    let lr = 0.5;
    let mut train = function(&[&inputs, &targets], &[&loss]);
    for (p, gp) in params.iter().zip(&grads) {
        train = train.update(p, *p - gp * lr);
    }
    let train = train.compile()?;

    let mut rng = Lcg(11);
    let steps = 400;
    let (mut first, mut last) = (f64::NAN, f64::NAN);
    for step in 0..steps {
        let (x, y) = batch(&mut rng);
        let out = train.call(&[x.view().into(), y.view().into()] as &[TensorRef])?;
        let l = out[0].to_f64_vec()[0];
        if step == 0 {
            first = l;
        }
        if step % 50 == 0 || step == steps - 1 {
            println!("step {step:>3}  loss {l:.4}");
        }
        last = l;
    }
    // A fresh model guesses among 32 tokens: ln(32) = 3.47. A model that reads the stride off
    // the first two tokens is left with the first guess's ln(2) / 24 = 0.03 at best.
    println!("loss {first:.4} -> {last:.4}");
    // NaN fails too.
    if last.is_nan() || last >= 0.1 {
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
        times.sort_by(f64::total_cmp);
        println!("train step median {:.3} ms over {n} steps", times[n / 2]);
    }
    Ok(())
}
