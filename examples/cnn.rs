//! A small convolutional network trained on generated images: two `conv2d` + `relu` +
//! `max_pool2d` blocks and a dense layer tell apart four kinds of 12x12 pictures (a
//! horizontal bar, a vertical bar, and the two diagonals, at random places, over noise).
//! The gradients of the convolutions and pools come from `kiln::grad`.
//!
//! Run with `cargo run --release --example cnn`. With `--time N` it trains N steps more and
//! prints the median time of one training step (`benches/cnn_vs_jax.py` runs this
//! beside the same model in JAX).

use kiln::{function, Conv2d, Graph, TensorRef};
use ndarray::{ArrayD, IxDyn};
use std::time::Instant;

const SIDE: usize = 12;
const CLASSES: usize = 4;
const BATCH: usize = 64;
const C1: usize = 8;
const C2: usize = 16;

/// A small deterministic generator for the pictures.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() % 1_000_000) as f32 / 1_000_000.0
    }
}

/// `BATCH` pictures (`[BATCH, 1, SIDE, SIDE]`) and their classes: a line of 6 pixels of 1.0
/// over noise in `[0, 0.3)`, horizontal, vertical, down-right or up-right.
fn batch(rng: &mut Lcg) -> (ArrayD<f32>, ArrayD<i64>) {
    let mut img = ArrayD::<f32>::zeros(IxDyn(&[BATCH, 1, SIDE, SIDE]));
    let mut labels = Vec::with_capacity(BATCH);
    for b in 0..BATCH {
        for v in img.slice_mut(ndarray::s![b, 0, .., ..]).iter_mut() {
            *v = 0.3 * rng.unit();
        }
        let class = rng.below(CLASSES);
        let (r, c) = (rng.below(SIDE - 6), rng.below(SIDE - 6));
        for k in 0..6 {
            let (y, x) = match class {
                0 => (r + 3, c + k),
                1 => (r + k, c + 3),
                2 => (r + k, c + k),
                _ => (r + 5 - k, c + k),
            };
            img[[b, 0, y, x]] = 1.0;
        }
        labels.push(class as i64);
    }
    (
        img,
        ArrayD::from_shape_vec(IxDyn(&[BATCH]), labels).expect("one label per picture"),
    )
}

/// He-initialized weights of `shape` with `fan_in` inputs per output.
fn init(seed: u64, shape: &[usize], fan_in: usize) -> ArrayD<f32> {
    let scale = (2.0 / fan_in as f64).sqrt();
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
            eprintln!("usage: cnn [--time STEPS]");
            std::process::exit(2);
        }
    };
    let g = Graph::new();
    let images = g.input(
        "images",
        kiln::f32,
        [
            Some(BATCH as i64),
            Some(1),
            Some(SIDE as i64),
            Some(SIDE as i64),
        ],
    );
    let labels = g.input("labels", kiln::i64, [Some(BATCH as i64)]);
    let w1 = g.shared("w1", init(1, &[C1, 1, 3, 3], 9));
    let b1 = g.shared("b1", ArrayD::<f32>::zeros(IxDyn(&[C1, 1, 1])));
    let w2 = g.shared("w2", init(2, &[C2, C1, 3, 3], C1 * 9));
    let b2 = g.shared("b2", ArrayD::<f32>::zeros(IxDyn(&[C2, 1, 1])));
    let flat = C2 * (SIDE / 4) * (SIDE / 4);
    let w3 = g.shared("w3", init(3, &[flat, CLASSES], flat));
    let b3 = g.shared("b3", ArrayD::<f32>::zeros(IxDyn(&[CLASSES])));

    let same = Conv2d {
        padding: [1, 1],
        ..Conv2d::default()
    };
    // [B, 1, 12, 12] -> [B, 8, 6, 6] -> [B, 16, 3, 3] -> [B, 144] -> [B, 4]
    let h1 = (images.conv2d(&w1, same) + &b1)
        .relu()
        .max_pool2d([2, 2], [2, 2], [0, 0]);
    let h2 = (h1.conv2d(&w2, same) + &b2)
        .relu()
        .max_pool2d([2, 2], [2, 2], [0, 0]);
    let logits = h2.reshape(&[BATCH as i64, flat as i64]).matmul(&w3) + &b3;
    let shifted = &logits - logits.max(Some(&[1]), true);
    let log_p = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let target = labels.one_hot(CLASSES as i64, kiln::f32);
    let loss = -(&target * &log_p).sum(Some(&[1]), false).mean(None, false);
    let right = log_p
        .argmax(Some(1), false)
        .eq(&labels)
        .cast(kiln::f32)
        .mean(None, false);

    let params = [&w1, &b1, &w2, &b2, &w3, &b3];
    let grads = kiln::grad(&loss, &params)?;
    let lr = 0.05;
    let mut train = function(&[&images, &labels], &[&loss, &right]);
    for (p, gp) in params.iter().zip(&grads) {
        train = train.update(p, *p - gp * lr);
    }
    let train = train.compile()?;

    let mut rng = Lcg(5);
    let steps = 300;
    let (mut first, mut last) = (f64::NAN, (f64::NAN, f64::NAN));
    for step in 0..steps {
        let (x, y) = batch(&mut rng);
        let out = train.call(&[x.view().into(), y.view().into()] as &[TensorRef])?;
        let (l, acc) = (out[0].to_f64_vec()[0], out[1].to_f64_vec()[0]);
        if step == 0 {
            first = l;
        }
        if step % 50 == 0 || step == steps - 1 {
            println!("step {step:>3}  loss {l:.4}  accuracy {:.1}%", 100.0 * acc);
        }
        last = (l, acc);
    }
    // A fresh model guesses: ln(4) = 1.386.
    println!("loss {first:.4} -> {:.4}", last.0);
    if !(last.0 < 0.3 && last.1 > 0.9) {
        return Err(kiln::Error::Runtime(format!(
            "the network did not learn: loss {first} -> {}, accuracy {}",
            last.0, last.1
        )));
    }
    if let Some(n) = time_steps {
        // Batches made beforehand, so only the training step is timed.
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
