//! `Graph::shared_like`: a shared variable of another value's dtype and shape, filled with
//! one value (an optimizer's moments), and an error where that shape is not known.

use kiln::{function, Graph, Tensor};
use ndarray::{arr2, ArrayD, IxDyn};

#[test]
fn shared_like_takes_the_dtype_and_shape_and_fills_them() {
    let g = Graph::new();
    let w = g.shared("w", arr2(&[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]).into_dyn());
    let m = g.shared_like("m.w", &w, 0.5).unwrap();
    assert_eq!(m.ty(), w.ty());
    assert_eq!(
        m.value().unwrap(),
        Tensor::F32(ArrayD::from_elem(IxDyn(&[2, 3]), 0.5))
    );
    // It is state like any other: a step updates it.
    let step = function(&[], &[]).update(&m, &(&m + &w)).compile().unwrap();
    step.call::<kiln::TensorRef>(&[]).unwrap();
    let want = arr2(&[[1.5f32, 2.5, 3.5], [4.5, 5.5, 6.5]]).into_dyn();
    assert_eq!(m.value().unwrap(), Tensor::F32(want));
}

#[test]
fn shared_like_of_an_unknown_shape_is_an_error_naming_it() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [None, Some(2)]);
    let e = g.shared_like("m", &x, 0.0).unwrap_err().to_string();
    assert!(
        e.contains("shared_like") && e.contains("every dim known"),
        "{e}"
    );
}
