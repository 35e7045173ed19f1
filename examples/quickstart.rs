//! kiln's quickstart: build an expression and a reduction, compile them into one function, call
//! it, and print the results next to the values computed by hand.
//!
//! Run with `cargo run --release --example quickstart`.

use ndarray::{array, ArrayD};

fn main() -> Result<(), kiln::Error> {
    let g = kiln::Graph::new();
    // Inputs: a matrix with any number of rows and 3 columns, and a row vector.
    let x = g.input("x", kiln::f32, [None, Some(3)]);
    let b = g.input("b", kiln::f32, [Some(3)]);

    // An elementwise expression with broadcasting, and a reduction over the rows.
    let y = ((&x * 2.0 + &b).exp() - 1.0).named("y");
    let row_sums = y.sum(Some(&[1]), false).named("row_sums");

    println!("The graph:\n{}", kiln::debugprint(&[&y, &row_sums]));

    let f = kiln::function(&[&x, &b], &[&y, &row_sums])
        .name("quickstart")
        .compile()?;

    let xv: ArrayD<f32> = array![[0.0f32, 0.5, 1.0], [-1.0, 0.25, 2.0]].into_dyn();
    let bv: ArrayD<f32> = array![0.1f32, 0.0, -0.5].into_dyn();
    let out = f.call(&[xv.view(), bv.view()])?;

    // The same values by hand.
    let by_hand: Vec<f64> = xv
        .indexed_iter()
        .map(|(ix, &v)| ((2.0 * v + bv[[ix[1]]]) as f64).exp() - 1.0)
        .collect();
    println!("{:>28} {:>14}", "kiln", "by hand");
    for (k, h) in out[0].to_f64_vec().iter().zip(&by_hand) {
        println!("y        {k:>19.6} {h:>14.6}");
    }
    for (r, k) in out[1].to_f64_vec().iter().enumerate() {
        let h: f64 = by_hand[r * 3..r * 3 + 3].iter().sum();
        println!("row_sum  {k:>19.6} {h:>14.6}");
    }
    let worst = out[0]
        .to_f64_vec()
        .iter()
        .zip(&by_hand)
        .map(|(k, h)| ((k - h) / h.abs().max(1e-6)).abs())
        .fold(0.0, f64::max);
    println!("largest relative difference: {worst:.2e}");
    if worst > 1e-5 {
        return Err(kiln::Error::Runtime(format!(
            "quickstart disagrees with the values by hand ({worst:e})"
        )));
    }
    Ok(())
}
