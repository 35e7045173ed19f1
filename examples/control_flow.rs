//! Lazy `ifelse`, elementwise lambdas and random numbers, together: a noisy "leaky" activation
//! whose branch is chosen at run time, its gradient, and a dropout mask that changes per call.
//!
//! Run with `cargo run --release --example control_flow`.

use kiln::{elementwise, function, ifelse, Graph, Scalar};
use ndarray::{array, ArrayD, IxDyn};

fn main() -> Result<(), kiln::Error> {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(4)]);
    let train = g.input("train", kiln::bool, [] as [Option<i64>; 0]);

    // A new elementwise op from a closure: it broadcasts and differentiates like a built-in one.
    let leaky = elementwise("leaky", |v: Scalar| v.gt(0.0).select(v.clone(), v * 0.1));

    // Dropout only when training; the branch not taken is never computed.
    let step = g.shared("step", ArrayD::from_elem(IxDyn(&[]), 0i64));
    let dist = kiln::ir::RandomDist::Bernoulli {
        p: kiln::ir::F64Bits(0.75),
    };
    let y = ifelse(
        &train,
        || {
            let keep = g.random(dist, 42, &[4], kiln::f64, Some(&step));
            vec![leaky.apply(&[&x]) * keep / 0.75]
        },
        || vec![leaky.apply(&[&x])],
    )
    .remove(0);
    let loss = (&y * &y).sum(None, false);
    let dx = kiln::grad(&loss, &[&x])?.remove(0);
    let f = function(&[&x, &train], &[&y, &dx])
        .update(&step, &step + 1)
        .compile()?;

    let xv = array![-2.0f64, -0.5, 0.5, 2.0].into_dyn();
    for (label, t) in [("inference", false), ("training", true), ("training", true)] {
        let tv = ArrayD::from_elem(IxDyn(&[]), t);
        let out = f.call(&[kiln::TensorRef::from(xv.view()), tv.view().into()])?;
        println!("{label:>9}: y = {}   dloss/dx = {}", out[0], out[1]);
    }
    println!(
        "\nThe compiled function:\n{}",
        kiln::ir::text::print_func(f.func())
    );
    Ok(())
}
