//! A compiled training step with shared-weight updates learns: the MLP example, smaller.

#[path = "../examples/mlp/model.rs"]
mod model;

#[test]
fn the_mlp_learns_a_synthetic_problem() {
    let problem = model::make_problem(256, 8, 3, 3);
    let mlp = model::build(8, 16, 3, 0.5).unwrap();
    let (first, last, accuracy) =
        model::train(&problem, &mlp, 60, |_, l| assert!(l.is_finite())).unwrap();
    assert!(last < 0.3 * first, "loss {first} -> {last}");
    assert!(accuracy > 0.9, "accuracy {accuracy}");
}
