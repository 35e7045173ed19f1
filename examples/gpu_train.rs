//! A training loop on the GPU backend whose weights stay on the device: each step copies its
//! batch in and its loss back, nothing else; the weights cross to the host once, when the
//! program reads them at the end. From the second step on, each step is one launch of the
//! graph recorded while the second ran. Run with
//! `cargo run --release --features gpu --example gpu_train`; without a GPU it says why and
//! runs on the host device (the GPU runtime with host memory and the kernels compiled for the
//! CPU), which moves the same bytes.

use kiln::jit_ptx::cuda;
use kiln::{function, Backend, Graph};
use ndarray::{ArrayD, IxDyn};

fn main() -> Result<(), kiln::Error> {
    if let Err(e) = cuda::device() {
        println!("no GPU ({e}): running on the host device");
        cuda::use_host_device();
    }
    let device = cuda::device()?;
    println!("device: {}", device.name);

    let (n, feats, classes) = (256, 64, 10);
    let x_data = ArrayD::from_shape_fn(IxDyn(&[n, feats]), |i| {
        kiln::random::normal_f64(1, (i[0] * feats + i[1]) as u64) as f32
    });
    // Labels from a hidden linear rule, one-hot, so the problem is learnable.
    let truth = ArrayD::from_shape_fn(IxDyn(&[feats, classes]), |i| {
        kiln::random::normal_f64(2, (i[0] * classes + i[1]) as u64) as f32
    });
    let scores = x_data
        .view()
        .into_dimensionality::<ndarray::Ix2>()
        .unwrap()
        .dot(&truth.view().into_dimensionality::<ndarray::Ix2>().unwrap());
    let y_data = ArrayD::from_shape_fn(IxDyn(&[n, classes]), |i| {
        let row = scores.row(i[0]);
        let best = (0..classes).fold(0, |b, c| if row[c] > row[b] { c } else { b });
        (best == i[1]) as u8 as f32
    });

    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(feats as i64)]);
    let y = g.input("y", kiln::f32, [None, Some(classes as i64)]);
    let w = g.shared("w", ArrayD::<f32>::zeros(IxDyn(&[feats, classes])));
    let b = g.shared("b", ArrayD::<f32>::zeros(IxDyn(&[classes])));
    let logits = x.matmul(&w) + &b;
    let shifted = &logits - logits.max(Some(&[1]), true);
    let log_softmax = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let loss = -(log_softmax * &y).sum(Some(&[1]), false).mean(None, false);
    let grads = kiln::grad(&loss, &[&w, &b])?;
    let train = function(&[&x, &y], &[&loss])
        .update(&w, &w - &grads[0] * 0.5)
        .update(&b, &b - &grads[1] * 0.5)
        .backend(Backend::Gpu)
        .compile()?;

    let before = device.transfers();
    let launches = device.launches();
    let mut steady = None;
    for step in 0..100 {
        if step == 2 {
            // From the third step on the call is a replay: its memory should stay flat.
            device.reset_peak();
            steady = Some(device.memory().in_use);
        }
        let out = train.call(&[x_data.view(), y_data.view()])?;
        if step % 20 == 0 {
            println!("step {step:>3}  loss {:.4}", out[0].to_f64_vec()[0]);
        }
    }
    let memory = device.memory();
    println!(
        "device memory: {} bytes in use before step 2, {} after step 99, at most {} in \
         between (the weights are {} bytes, updated where they are)",
        steady.unwrap_or(0),
        memory.in_use,
        memory.peak,
        (feats * classes + classes) * 4
    );
    let moved = device.transfers() - before;
    let (kernels, graphs) = device.launches();
    println!(
        "100 steps launched {} kernels one by one (the first step's, and the second's while it \
         was recorded) and {} graphs (one per step after the first)",
        kernels - launches.0,
        graphs - launches.1
    );
    println!(
        "100 steps moved {} bytes in ({} copies: the batches, and the weights once) and {} bytes \
         back (the losses)",
        moved.upload_bytes, moved.uploads, moved.download_bytes
    );

    let before = device.transfers();
    let w_now = w.value().expect("a shared variable has a value");
    let read = device.transfers() - before;
    println!(
        "reading w copied {} bytes back; |w| = {:.3}",
        read.download_bytes,
        w_now.to_f64_vec().iter().map(|v| v * v).sum::<f64>().sqrt()
    );
    Ok(())
}
