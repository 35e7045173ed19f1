//! Axes are `i64` throughout the graph API and count from the end when negative, as numpy's
//! do: `transpose` among them (it took `usize` before), and an axis out of range is an error
//! naming the op and the axis.

use kiln::{function, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

#[test]
fn transpose_takes_axes_counted_from_the_end() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3), Some(4)]);
    let a = x.transpose(&[0, -1, -2]);
    let b = x.transpose(&[0, 2, 1]);
    let f = function(&[&x], &[&a, &b]).compile().unwrap();
    let v = ArrayD::from_shape_fn(IxDyn(&[2, 3, 4]), |i| (i[0] * 12 + i[1] * 4 + i[2]) as f32);
    let out = f.call(&[v.view()]).unwrap();
    assert_eq!(out[0], out[1]);
    assert_eq!(out[0].shape(), &[2, 4, 3]);
    let Tensor::F32(t) = &out[0] else { panic!() };
    assert_eq!(t[[1, 3, 2]], v[[1, 2, 3]]);
}

#[test]
fn a_transpose_axis_out_of_range_is_an_error_naming_it() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
    for (perm, want) in [(vec![0i64, 2], "axis 2"), (vec![-3, 0], "axis -3")] {
        let y = x.transpose(&perm);
        let e = function(&[&x], &[&y])
            .compile()
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("transpose") && e.contains(want), "{e}");
        assert!(e.contains("tests/api_axes.rs"), "{e}");
    }
}
