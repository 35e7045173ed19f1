//! A function's state saved and loaded: a few SGD steps of a linear model, its state (the
//! weights, and what its ops keep between calls) saved as `.npz`, then loaded into a function
//! compiled afresh in another graph, which goes on from there.
//! `cargo run --release --example state [PATH.npz]`; `np.load(PATH)` reads the file.

use kiln::{function, grad, Graph};
use ndarray::{array, Array, IxDyn};

/// One SGD step of least squares, `w <- w - 0.1 * grad`, returning the loss.
fn sgd_step() -> Result<(kiln::Function, kiln::Var), kiln::Error> {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(4), Some(2)]);
    let y = g.input("y", kiln::f64, [Some(4)]);
    let w = g.shared("w", Array::<f64, _>::zeros(IxDyn(&[2])));
    let err = &x.matmul(&w) - &y;
    let loss = (&err * &err).mean(None, false);
    let gw = grad(&loss, &[&w])?;
    let f = function(&[&x, &y], &[&loss])
        .update(&w, &w - &gw[0] * 0.1)
        .compile()?;
    Ok((f, w))
}

fn main() -> Result<(), kiln::Error> {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        std::env::temp_dir()
            .join("kiln-state.npz")
            .display()
            .to_string()
    });
    let x = array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 1.0]].into_dyn();
    let y = array![1.0, -1.0, 0.0, 1.0].into_dyn();
    let (step, w) = sgd_step()?;
    for _ in 0..20 {
        step.call(&[x.view(), y.view()])?;
    }
    step.save_state(&path)?;
    println!(
        "after 20 steps w = {:?}, saved to {path}",
        w.value().unwrap().to_f64_vec()
    );

    let (resumed, w2) = sgd_step()?;
    resumed.load_state(&path)?;
    let a = step.call(&[x.view(), y.view()])?[0].to_f64_vec();
    let b = resumed.call(&[x.view(), y.view()])?[0].to_f64_vec();
    println!(
        "step 21: loss {a:?} (original) and {b:?} (loaded), w = {:?}",
        w2.value().unwrap().to_f64_vec()
    );
    assert_eq!(a, b);
    Ok(())
}
