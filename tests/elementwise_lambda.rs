//! User lambdas become Composite ops: they broadcast, adopt dtypes, differentiate through their
//! scalar ops, print and parse in the text form, and report type errors with the caller's line.

use kiln::ir::text::{parse, print_func};
use kiln::{elementwise, function, Graph, Scalar};
use kiln::{verify_grad, VerifyOptions};
use ndarray::{array, ArrayD, IxDyn};

#[test]
fn a_lambda_broadcasts_like_a_built_in_op() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(3)]);
    let y = g.input("y", kiln::f32, [Some(3)]);
    let scaled_sum = elementwise("scaled_sum", |a: Scalar, b: Scalar| (a + b) * 2.0);
    let z = scaled_sum.apply(&[&x, &y]);
    assert_eq!(z.ty().to_string(), "f32[?, 3]");
    let f = function(&[&x, &y], &[&z]).compile().unwrap();
    let out = f
        .call(&[
            array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]
                .into_dyn()
                .view(),
            array![10.0f32, 20.0, 30.0].into_dyn().view(),
        ])
        .unwrap();
    assert_eq!(
        out[0].to_f64_vec(),
        vec![22.0, 44.0, 66.0, 28.0, 50.0, 72.0]
    );
    // One Composite op in the compiled function.
    let text = print_func(f.func());
    assert!(
        text.contains("composite \"scaled_sum\" %x, %y {program = \""),
        "{text}"
    );
}

#[test]
fn lambdas_adopt_dtypes_and_report_type_errors_at_the_callers_line() {
    let g = Graph::new();
    let i = g.input("i", kiln::i64, [Some(3)]);
    let clamp = elementwise("clamp", |a: Scalar| a.maximum(0.0).minimum(10.0));
    let c = clamp.apply(&[&i]);
    assert_eq!(c.dtype(), kiln::i64);
    let f = function(&[&i], &[&c]).compile().unwrap();
    assert_eq!(
        f.call(&[array![-5i64, 3, 99].into_dyn().view()]).unwrap()[0].to_f64_vec(),
        vec![0.0, 3.0, 10.0]
    );
    let soft = elementwise("soft", |a: Scalar| a.exp());
    let line = line!() + 1;
    let bad = soft.apply(&[&i]);
    let e = bad.check().unwrap_err().to_string();
    assert!(
        e.contains("soft")
            && e.contains("f32 or f64")
            && e.contains(&format!("elementwise_lambda.rs:{line}")),
        "{e}"
    );
    let two = elementwise("two", |a: Scalar, b: Scalar| a + b);
    assert!(two
        .apply(&[&i])
        .check()
        .unwrap_err()
        .to_string()
        .contains("takes 2 inputs"));
}

#[test]
fn gradients_go_through_the_scalar_ops() {
    let f = elementwise("f", |a: Scalar, b: Scalar| {
        (a.clone() * b.clone()).tanh() + a.exp() / 2.0 - b.gt(0.0).select(b.clone(), b.square())
    });
    let pts = [
        ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| 0.3 * i[0] as f64 - 0.2 * i[1] as f64),
        ArrayD::from_shape_fn(IxDyn(&[3]), |i| 0.7 - 0.45 * i[0] as f64),
    ];
    verify_grad(
        |_, v| f.apply(&[&v[0], &v[1]]),
        &pts,
        VerifyOptions::default(),
    )
    .unwrap();
}

#[test]
fn composites_print_parse_and_run() {
    let src = "func @c(%x: f64[3], %y: f64[]) -> (f64[3]) {\n  %z = composite \"axpy\" %x, %y {program = \"%0 = input 0 : f64; %1 = input 1 : f64; %2 = const 2.0 : f64; %3 = mul %0, %2 : f64; %4 = add %3, %1 : f64; return %4\"} : f64[3]\n  return %z\n}\n";
    let fs = parse("c.kir", src).unwrap_or_else(|e| panic!("{}", e[0]));
    assert_eq!(print_func(&fs[0]), src);
    let out = kiln::runtime::interp::run_func(
        &fs[0],
        vec![
            kiln::Tensor::F64(array![1.0, 2.0, 3.0].into_dyn()),
            kiln::Tensor::F64(ArrayD::from_elem(IxDyn(&[]), 0.5)),
        ],
    )
    .unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![2.5, 4.5, 6.5]);
    let bad = src.replace("%4 = add %3, %1 : f64", "%4 = add %3, %9 : f64");
    assert!(parse("c.kir", &bad).unwrap_err()[0]
        .to_string()
        .contains("%9"));
    let wrong_type = src.replace("%3 = mul %0, %2 : f64", "%3 = mul %0, %2 : f32");
    assert!(parse("c.kir", &wrong_type).is_err());
}
