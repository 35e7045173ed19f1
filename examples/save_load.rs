//! A compiled function saved and loaded back without optimizing it again: the MLP training
//! step of `examples/mlp` trained for 20 steps, saved (its optimized form, bindings and state,
//! `Function::save`), then loaded (`Function::load`) and trained further side by side with
//! the original, which it matches step for step. Prints how long compiling and loading took.
//! `cargo run --release --example save_load`.

#[allow(dead_code)]
#[path = "mlp/model.rs"]
mod model;

use kiln::{CompileOptions, Function};
use std::time::Instant;

fn main() -> Result<(), kiln::Error> {
    let p = model::make_problem(256, 64, 8, 7);
    // Compiling the step from its graph (optimizer included), median of 5.
    let mut compiles = Vec::new();
    let mut step = None;
    for _ in 0..5 {
        let (builder, _, _) = model::training_step(64, 128, 8, 0.5)?;
        let t0 = Instant::now();
        step = Some(builder.compile()?);
        compiles.push(t0.elapsed());
    }
    compiles.sort();
    let step = step.expect("compiled five times");
    for _ in 0..20 {
        step.call(&[p.x.view(), p.onehot.view()])?;
    }
    let path = std::env::temp_dir().join("kiln-mlp-step.kfn");
    step.save(&path)?;

    // Loading: parse, verify, lower and compile kernels; no optimizer. Median of 5.
    let mut loads = Vec::new();
    let mut loaded = None;
    for _ in 0..5 {
        let t0 = Instant::now();
        loaded = Some(Function::load(&path, &CompileOptions::default())?);
        loads.push(t0.elapsed());
    }
    loads.sort();
    let loaded = loaded.expect("loaded five times");
    for i in 0..5 {
        let a = step.call(&[p.x.view(), p.onehot.view()])?;
        let b = loaded.call(&[p.x.view(), p.onehot.view()])?;
        assert_eq!(a[0], b[0], "step {i}");
        println!(
            "step {}: loss {:?} (original) {:?} (loaded)",
            21 + i,
            a[0].to_f64_vec(),
            b[0].to_f64_vec()
        );
    }
    println!(
        "compiling the step from its graph took {:.1} ms, loading the saved step {:.1} ms (medians of 5; the file has {} bytes)",
        compiles[2].as_secs_f64() * 1e3,
        loads[2].as_secs_f64() * 1e3,
        std::fs::metadata(&path).map_or(0, |m| m.len())
    );
    Ok(())
}
