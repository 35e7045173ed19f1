//! A two-layer perceptron (tanh hidden layer, softmax cross-entropy) trained by SGD as one
//! compiled training-step function; shared by the `mlp` example and the training test.

use kiln::{function, Function, Graph, Tensor, Var};
use ndarray::{Array2, ArrayD, IxDyn};

pub struct Problem {
    pub x: ArrayD<f32>,
    pub onehot: ArrayD<f32>,
    pub labels: Vec<usize>,
}

/// `n` points in `dim` dimensions around `classes` random centers: learnable, not trivially.
pub fn make_problem(n: usize, dim: usize, classes: usize, seed: u64) -> Problem {
    let centers = Array2::from_shape_fn((classes, dim), |(c, d)| {
        2.0 * kiln::random::normal_f32(seed, (c * dim + d) as u64)
    });
    let labels: Vec<usize> = (0..n)
        .map(|i| {
            (kiln::random::uniform_f32(seed + 1, i as u64) * classes as f32) as usize % classes
        })
        .collect();
    let x = ArrayD::from_shape_fn(IxDyn(&[n, dim]), |i| {
        centers[[labels[i[0]], i[1]]]
            + kiln::random::normal_f32(seed + 2, (i[0] * dim + i[1]) as u64)
    });
    let onehot = ArrayD::from_shape_fn(IxDyn(&[n, classes]), |i| {
        (labels[i[0]] == i[1]) as u8 as f32
    });
    Problem { x, onehot, labels }
}

pub struct Mlp {
    pub step: Function,
    pub predict: Function,
}

fn init(seed: u64, rows: usize, cols: usize) -> ArrayD<f32> {
    // N(0, 1/fan_in)
    let s = 1.0 / (rows as f32).sqrt();
    ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |i| {
        s * kiln::random::normal_f32(seed, (i[0] * cols + i[1]) as u64)
    })
}

/// Mean softmax cross-entropy of `logits` against one-hot `targets`, through a stable
/// log-softmax (the row max is subtracted before exp).
pub fn cross_entropy(logits: &Var, targets: &Var) -> Var {
    let m = logits.max(Some(&[1]), true);
    let shifted = logits - &m;
    let log_softmax = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    -(log_softmax * targets)
        .sum(Some(&[1]), false)
        .mean(None, false)
}

pub fn build(dim: usize, hidden: usize, classes: usize, lr: f64) -> Result<Mlp, kiln::Error> {
    let (step, x, logits) = training_step(dim, hidden, classes, lr)?;
    let predict = function(&[&x], &[&logits.argmax(Some(1), false)])
        .name("predict")
        .compile()?;
    Ok(Mlp {
        step: step.compile()?,
        predict,
    })
}

/// The training step, not compiled yet, with its input `x` and the logits (for `predict`).
pub fn training_step(
    dim: usize,
    hidden: usize,
    classes: usize,
    lr: f64,
) -> Result<(kiln::FunctionBuilder, Var, Var), kiln::Error> {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(dim as i64)]);
    let t = g.input("targets", kiln::f32, [None, Some(classes as i64)]);
    let w1 = g.shared("w1", init(10, dim, hidden));
    let b1 = g.shared("b1", ArrayD::<f32>::zeros(IxDyn(&[hidden])));
    let w2 = g.shared("w2", init(11, hidden, classes));
    let b2 = g.shared("b2", ArrayD::<f32>::zeros(IxDyn(&[classes])));
    let h = (x.matmul(&w1) + &b1).tanh();
    let logits = h.matmul(&w2) + &b2;
    let loss = cross_entropy(&logits, &t).named("loss");
    let params = [&w1, &b1, &w2, &b2];
    let grads = kiln::grad(&loss, &params)?;
    let mut step = function(&[&x, &t], &[&loss]).name("train_step");
    for (p, gp) in params.iter().zip(&grads) {
        step = step.update(p, *p - gp * lr);
    }
    Ok((step, x, logits))
}

/// Trains for `steps` full-batch steps; returns the loss before and after, and the accuracy.
pub fn train(
    p: &Problem,
    mlp: &Mlp,
    steps: usize,
    mut report: impl FnMut(usize, f32),
) -> Result<(f32, f32, f64), kiln::Error> {
    let loss_of = |t: &Tensor| {
        t.as_f32()
            .map(|a| a.iter().copied().next().unwrap_or(f32::NAN))
            .unwrap_or(f32::NAN)
    };
    let mut first = f32::NAN;
    let mut last = f32::NAN;
    for s in 0..steps {
        let out = mlp.step.call(&[p.x.view(), p.onehot.view()])?;
        last = loss_of(&out[0]);
        if s == 0 {
            first = last;
        }
        report(s, last);
    }
    let pred = mlp.predict.call(&[p.x.view()])?;
    let pred = pred[0]
        .as_i64()
        .ok_or_else(|| kiln::Error::Runtime("predictions are not i64".into()))?;
    let correct = pred
        .iter()
        .zip(&p.labels)
        .filter(|(&a, &b)| a as usize == b)
        .count();
    Ok((first, last, correct as f64 / p.labels.len() as f64))
}
