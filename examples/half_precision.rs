//! Half precision: a dataset stored as `f16` (half the memory of `f32`), a two-layer network
//! whose first layer's weights are stored as `bf16`, trained with f32 arithmetic. kiln's
//! halves are storage types: every op computes in f32 and rounds its result back (the graph
//! API inserts the casts), `matmul` reads halves and gives the f32 product, and a half
//! parameter's gradient is a half. The first layer keeps an f32 master copy of its weights
//! (small SGD steps would round away in bf16's 8 bits) and hands the network its bf16 copy,
//! rounded once per step: mixed-precision training as GPUs do it.
//!
//! `cargo run --release --example half_precision` trains it and fails unless the loss falls
//! below 0.02; `-- --time N` also times a training step with the data in f16 and in f32.

use kiln::half::{bf16, f16};
use kiln::{function, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

const N: usize = 512;
const FEATS: usize = 64;
const HIDDEN: usize = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let time_steps = args
        .iter()
        .position(|a| a == "--time")
        .map(|i| args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(200));
    // Two classes from a hidden linear rule over f16 features.
    let x32 = ArrayD::from_shape_fn(IxDyn(&[N, FEATS]), |i| {
        kiln::random::normal_f32(1, (i[0] * FEATS + i[1]) as u64)
    });
    let x16 = x32.mapv(f16::from_f32);
    let truth: Vec<f32> = (0..FEATS)
        .map(|j| kiln::random::normal_f32(2, j as u64))
        .collect();
    let y = ArrayD::from_shape_fn(IxDyn(&[N]), |i| {
        let s: f32 = (0..FEATS).map(|j| x16[[i[0], j]].to_f32() * truth[j]).sum();
        (s > 0.0) as u8 as f32
    });

    let (train, master) = build(kiln::f16)?;
    let x16t = Tensor::F16(x16.clone());
    let yt = Tensor::F32(y.clone());
    let mut loss = f64::NAN;
    for step in 0..300 {
        let out = train.call(&[&x16t, &yt])?;
        loss = out[0].to_f64_vec()[0];
        if step % 50 == 0 {
            println!("step {step:>3}  cross-entropy {loss:.4}");
        }
    }
    let w1 = master.value().expect("a shared variable's value");
    println!(
        "final cross-entropy {loss:.4}; data {} KiB as f16 ({} KiB as f32); first-layer master weights {:?}",
        N * FEATS * 2 / 1024,
        N * FEATS * 4 / 1024,
        w1.dtype()
    );
    if loss.is_nan() || loss >= 0.02 {
        return Err(format!("the loss stayed at {loss} (want below 0.02)").into());
    }

    if let Some(steps) = time_steps {
        let (train32, _) = build(kiln::f32)?;
        let x32t = Tensor::F32(x32);
        let median = |f: &kiln::Function, x: &Tensor| -> Result<f64, kiln::Error> {
            let mut ts = Vec::with_capacity(steps);
            for _ in 0..steps {
                let t = std::time::Instant::now();
                f.call(&[x, &yt])?;
                ts.push(t.elapsed().as_secs_f64() * 1e3);
            }
            ts.sort_by(f64::total_cmp);
            Ok(ts[steps / 2])
        };
        // Alternated rounds: the machine is noisy.
        for round in 0..3 {
            let a = median(&train, &x16t)?;
            let b = median(&train32, &x32t)?;
            println!("round {round}: train step {a:.3} ms with f16 data, {b:.3} ms with f32 data");
        }
    }
    Ok(())
}

/// The training step for data of dtype `data`, and the first layer's f32 master weights.
fn build(data: kiln::DType) -> Result<(kiln::Function, kiln::Var), kiln::Error> {
    let g = Graph::new();
    let x = g.input("x", data, [None, Some(FEATS as i64)]);
    let y = g.input("y", kiln::f32, [None]);
    let w1_init = ArrayD::from_shape_fn(IxDyn(&[FEATS, HIDDEN]), |i| {
        0.1 * kiln::random::normal_f32(3, (i[0] * HIDDEN + i[1]) as u64)
    });
    let w1_master = g.shared("w1_master", w1_init.clone());
    let w1 = g.shared("w1", w1_init.mapv(bf16::from_f32));
    let w2 = g.shared("w2", ArrayD::<f32>::zeros(IxDyn(&[HIDDEN])));
    // matmul reads the f16 data and bf16 weights alike (one converted to f32 where they
    // differ) and gives f32; the rest computes in f32.
    let h = x.matmul(&w1.cast(data)).tanh();
    let p = h.matmul(&w2).sigmoid();
    let eps = 1e-6;
    let xent = -(&y * (&p + eps).log()) - (1.0 - &y) * (1.0 - &p + eps).log();
    let cost = xent.mean(None, false);
    let grads = kiln::grad(&cost, &[&w1, &w2])?;
    // The bf16 gradient applied to the f32 master, and the bf16 copy rounded from it.
    let new_master = &w1_master - grads[0].cast(kiln::f32) * 0.5;
    let f = function(&[&x, &y], &[&cost])
        .update(&w1_master, new_master.clone())
        .update(&w1, new_master.cast(kiln::bf16))
        .update(&w2, &w2 - &grads[1] * 0.5)
        .compile()?;
    Ok((f, w1_master))
}
