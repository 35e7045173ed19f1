//! The gradient's nodes are attributed to the line of the user's code that built the node they
//! differentiate (not to kiln's gradient rules), so errors and profiles of a training step
//! point at the model.

use kiln::{function, Graph};

#[test]
fn gradient_nodes_name_the_users_lines() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(8)]);
    let w = g.input("w", kiln::f32, [Some(8), Some(4)]);
    let h = x.matmul(&w).tanh();
    let cost = (&h * &h).mean(None, false);
    let dw = kiln::grad(&cost, &[&w]).unwrap().remove(0);
    let ssa = kiln::graph::to_ssa(
        "step",
        &[x.clone(), w.clone()],
        std::slice::from_ref(&dw),
        &[],
    )
    .unwrap();
    let locs: Vec<&str> = (ssa.func.values.iter())
        .filter_map(|v| v.loc.as_deref())
        .collect();
    assert!(locs.len() > 4, "{locs:?}");
    for l in &locs {
        assert!(l.starts_with("tests/grad_locations.rs:"), "{l} in {locs:?}");
    }
    // And what the compiled step reports.
    let f = function(&[&x, &w], &[&dw]).compile().unwrap();
    for v in &f.func().values {
        if let Some(l) = &v.loc {
            assert!(!l.contains("src/grad"), "{l}");
        }
    }
}
