//! Logistic regression in the style of the classic Theano tutorial: a shared weight vector and
//! bias, a cross-entropy cost with L2 regularization, and two compiled functions, `train` (which
//! updates the parameters) and `predict`. Run with `cargo run --release --example logreg`.

use kiln::{function, Graph};
use ndarray::{ArrayD, IxDyn};

fn main() -> Result<(), kiln::Error> {
    let (n, feats, steps) = (400, 100, 300);
    // Labels from a hidden linear rule, so the problem is learnable.
    let x_data = ArrayD::from_shape_fn(IxDyn(&[n, feats]), |i| {
        kiln::random::normal_f64(1, (i[0] * feats + i[1]) as u64)
    });
    let truth: Vec<f64> = (0..feats)
        .map(|i| kiln::random::normal_f64(2, i as u64))
        .collect();
    let y_data = ArrayD::from_shape_fn(IxDyn(&[n]), |i| {
        let s: f64 = (0..feats).map(|j| x_data[[i[0], j]] * truth[j]).sum();
        (s > 0.0) as u8 as f64
    });

    let g = Graph::new();
    let x = g.input("x", kiln::f64, [None, Some(feats as i64)]);
    let y = g.input("y", kiln::f64, [None]);
    let w = g.shared("w", ArrayD::<f64>::zeros(IxDyn(&[feats])));
    let b = g.shared("b", ArrayD::from_elem(IxDyn(&[]), 0.0f64));

    let p_1 = (x.matmul(&w) + &b).sigmoid(); // probability that the target is 1
    let prediction = p_1.gt(0.5);
    let xent = -(&y * p_1.log()) - (1.0 - &y) * (1.0 - &p_1).log();
    let cost = xent.mean(None, false) + (&w * &w).sum(None, false) * 0.01;
    let gw = kiln::grad(&cost, &[&w, &b])?;

    let train = function(&[&x, &y], &[&prediction, &xent.mean(None, false)])
        .update(&w, &w - &gw[0] * 0.1)
        .update(&b, &b - &gw[1] * 0.1)
        .compile()?;
    let predict = function(&[&x], &[&prediction]).compile()?;

    for step in 0..steps {
        let out = train.call(&[x_data.view().into(), y_data.view().into()] as &[kiln::TensorRef])?;
        if step % 50 == 0 {
            println!(
                "step {step:>3}  cross-entropy {:.4}",
                out[1].to_f64_vec()[0]
            );
        }
    }
    let pred = predict.call(&[x_data.view()])?;
    let right = pred[0]
        .to_f64_vec()
        .iter()
        .zip(y_data.iter())
        .filter(|(p, y)| p == y)
        .count();
    println!("training accuracy: {:.1}%", 100.0 * right as f64 / n as f64);
    Ok(())
}
