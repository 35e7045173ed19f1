//! Where a training step's time goes: a one-layer tanh network's SGD step compiled with
//! profiling on, warmed up, then 100 calls profiled and the report printed (the slowest step
//! first). `cargo run --release --example profile`; `KILN_PROFILE=1` does the same for any
//! program, printing each function's report when it is dropped.

use kiln::{function, grad, CompileOptions, Graph};
use ndarray::{Array, IxDyn};

fn main() -> Result<(), kiln::Error> {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(256), Some(512)]);
    let w0 = Array::from_shape_fn(IxDyn(&[512, 256]), |i| {
        ((i[0] * 7 + i[1] * 3) % 11) as f32 * 1e-3
    });
    let w = g.shared("w", w0);
    let h = x.matmul(&w).tanh().named("h");
    let loss = (&h * &h).mean(None, false).named("loss");
    let gw = grad(&loss, &[&w])?;
    let step = function(&[&x], &[&loss])
        .options(CompileOptions {
            profile: true,
            ..Default::default()
        })
        .name("sgd_step")
        .update(&w, &w - &gw[0] * 0.1)
        .compile()?;
    let xb = Array::from_shape_fn(IxDyn(&[256, 512]), |i| ((i[0] + i[1]) % 5) as f32 * 0.1);
    for _ in 0..10 {
        step.call(&[xb.view()])?;
    }
    step.reset_profile();
    for _ in 0..100 {
        step.call(&[xb.view()])?;
    }
    print!("{}", step.profile().expect("compiled with profiling on"));
    Ok(())
}
