//! Trains a two-layer perceptron (tanh, softmax cross-entropy) by SGD on a synthetic
//! classification problem, with one compiled training-step function that updates the shared
//! weights in place. Run with `cargo run --release --example mlp`.

mod model;

fn main() -> Result<(), kiln::Error> {
    let (dim, hidden, classes) = (20, 64, 4);
    let problem = model::make_problem(1024, dim, classes, 7);
    let mlp = model::build(dim, hidden, classes, 0.5)?;
    let (first, last, accuracy) = model::train(&problem, &mlp, 200, |s, loss| {
        if s % 20 == 0 {
            println!("step {s:>4}  loss {loss:.4}");
        }
    })?;
    println!(
        "loss {first:.4} -> {last:.4}; training accuracy {:.1}%",
        100.0 * accuracy
    );
    Ok(())
}
