//! The graph builders take every shape, size, axis and count as an i64 (numpy's int): a
//! negative size is an error naming the builder and the line that built it, never a wrapped
//! huge size; negative axes count from the end.

use kiln::{function, Error, Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};

/// Compiles `out` (with `inputs`) and returns the error it must give.
fn compile_error(inputs: &[&Var], out: &Var) -> Error {
    function(inputs, &[out])
        .compile()
        .err()
        .expect("a negative size is refused")
}

/// Checks that `err` is a type error naming `what`, a negative size, and this file's `line`.
fn assert_names(err: &Error, what: &str, line: u32) {
    let msg = err.to_string();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
    assert!(msg.contains(what), "{msg} should name {what}");
    assert!(msg.contains("negative"), "{msg}");
    assert!(
        msg.contains(&format!("integer_arguments.rs:{line}")),
        "{msg} should name line {line}"
    );
}

#[test]
fn negative_sizes_of_made_arrays_are_errors_at_the_line_that_built_them() {
    let g = Graph::new();
    // One line per case: the error must name the line of the builder's call.
    #[rustfmt::skip]
    let cases: Vec<(&str, Var, u32)> = vec![
        ("zeros", g.zeros(kiln::f32, &[3, -2]), line!()),
        ("ones", g.ones(kiln::i32, &[-1]), line!()),
        ("full", g.full(kiln::f64, &[2, -7], 1.5), line!()),
        ("uniform", g.uniform(1, &[-4], kiln::f32, 0.0, 1.0), line!()),
        ("normal", g.normal(1, &[2, -4], kiln::f64, 0.0, 1.0), line!()),
        ("bernoulli", g.bernoulli(1, &[-1, 2], kiln::bool, 0.5), line!()),
    ];
    for (what, v, line) in cases {
        assert_names(&compile_error(&[], &v), what, line);
        assert_names(&v.check().unwrap_err(), what, line);
    }
}

#[test]
fn negative_sizes_of_views_windows_and_counts_are_errors() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3), Some(4), Some(4)]);
    let i = g.input("i", kiln::i64, [Some(5)]);
    #[rustfmt::skip]
    let cases: Vec<(&str, Var, u32)> = vec![
        ("broadcast_to", x.broadcast_to(&[-1, 2, 3, 4, 4]), line!()),
        ("one_hot: depth", i.one_hot(-3, kiln::f32), line!()),
        ("topk", x.topk(-1).0, line!()),
        ("max_pool2d: window", x.max_pool2d([-2, 2], [1, 1], [0, 0]), line!()),
        ("max_pool2d: stride", x.max_pool2d([2, 2], [1, -1], [0, 0]), line!()),
        ("avg_pool2d: padding", x.avg_pool2d([2, 2], [1, 1], [0, -1]), line!()),
    ];
    for (what, v, line) in cases {
        assert_names(&compile_error(&[&x, &i], &v), what, line);
    }
}

#[test]
fn a_negative_number_of_scan_steps_is_an_error() {
    let g = Graph::new();
    let x0 = g.input("x0", kiln::f64, [Some(2)]);
    let line = line!() + 1;
    let (last, _) = kiln::scan_steps(&g, &[&x0], -3, |c, _t| (vec![&c[0] * 2.0], vec![]));
    assert_names(&compile_error(&[&x0], &last[0]), "scan_steps", line);
}

#[test]
fn an_input_of_negative_size_is_refused_where_the_function_is_built() {
    let g = Graph::new();
    let line = line!() + 1;
    let x = g.input("x", kiln::f32, [None, Some(-3)]);
    let y = x.exp();
    assert_names(&compile_error(&[&x], &y), "input \"x\"", line);
}

#[test]
fn sizes_past_what_memory_holds_are_errors_not_wrapped_sizes() {
    // i64::MAX elements: no backend can allocate them, and none may wrap the size to a small
    // one and run.
    let g = Graph::new();
    let z = g.zeros(kiln::f32, &[i64::MAX]);
    let e = match function(&[], &[&z]).compile() {
        Err(e) => e,
        Ok(f) => f
            .call::<&Tensor>(&[])
            .expect_err("i64::MAX floats cannot be made"),
    };
    let msg = e.to_string();
    assert!(
        msg.contains("too many elements") || msg.contains("allocat"),
        "{msg}"
    );
}

#[test]
fn negative_axes_and_i64_shapes_build_a_program_numpy_would() {
    // numpy: np.broadcast_to(x, (2, 3)).transpose(-1, -2).reshape(-1).sum(-1) of x = [1, 2, 3].
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let y = x
        .broadcast_to(&[2, 3])
        .transpose(&[-1, -2])
        .reshape(&[-1])
        .sum(Some(&[-1]), false);
    let ones = g.ones(kiln::f64, &[2, 3]).sum(None, false);
    let f = function(&[&x], &[&y, &ones]).compile().unwrap();
    let xv = Tensor::F64(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1.0, 2.0, 3.0]).unwrap());
    let out = f.call(&[xv.view()]).unwrap();
    let scalar = |t: &Tensor| match t {
        Tensor::F64(a) => a.iter().copied().collect::<Vec<f64>>(),
        other => panic!("f64 expected, got {other:?}"),
    };
    assert_eq!(scalar(&out[0]), vec![12.0]);
    assert_eq!(scalar(&out[1]), vec![6.0]);
}
