//! Every op's type inference (with its errors) and reference `perform` against values computed
//! by numpy, written here by hand. Each result's type is also checked against `infer`.

use kiln::ir::{infer, BinaryOp, DType, F64Bits, Op, ReduceOp, TensorType, UnaryOp};
use kiln::perform::perform;
use kiln::Tensor;
use ndarray::{ArrayD, IxDyn};

fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::F64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::I32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::Bool(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

/// Runs `op`, checks the result against the inferred type, and returns output 0.
fn run(op: Op, inputs: &[&Tensor]) -> Tensor {
    let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
    let refs: Vec<&TensorType> = tys.iter().collect();
    let out_ty = infer(&op, &refs).unwrap_or_else(|e| panic!("infer {op:?}: {e}"));
    let out = perform(&op, inputs).unwrap_or_else(|e| panic!("perform {op:?}: {e}"));
    assert_eq!(out[0].ty(), out_ty[0], "{op:?}");
    out.into_iter().next().unwrap()
}

fn type_err(op: Op, tys: &[TensorType]) -> String {
    infer(&op, &tys.iter().collect::<Vec<_>>()).expect_err("a type error")
}

fn bits_eq(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

fn un(u: UnaryOp) -> Op {
    Op::Unary(u)
}
fn bin(b: BinaryOp) -> Op {
    Op::Binary(b)
}
fn red(op: ReduceOp, axes: Option<Vec<usize>>, keepdims: bool) -> Op {
    Op::Reduce { op, axes, keepdims }
}

#[test]
fn unary_float_ops_match_numpy() {
    let x = f64t(&[5], &[-1.5, -0.0, 0.0, 0.5, 2.0]);
    let cases: &[(UnaryOp, [f64; 5])] = &[
        (UnaryOp::Neg, [1.5, 0.0, -0.0, -0.5, -2.0]),
        (UnaryOp::Abs, [1.5, 0.0, 0.0, 0.5, 2.0]),
        (UnaryOp::Sign, [-1.0, 0.0, 0.0, 1.0, 1.0]),
        (UnaryOp::Floor, [-2.0, -0.0, 0.0, 0.0, 2.0]),
        (UnaryOp::Ceil, [-1.0, -0.0, 0.0, 1.0, 2.0]),
        (UnaryOp::Round, [-2.0, -0.0, 0.0, 0.0, 2.0]),
        (UnaryOp::Square, [2.25, 0.0, 0.0, 0.25, 4.0]),
        (UnaryOp::Relu, [0.0, 0.0, 0.0, 0.5, 2.0]),
        (
            UnaryOp::Exp,
            [
                0.22313016014842982,
                1.0,
                1.0,
                1.6487212707001282,
                7.38905609893065,
            ],
        ),
        (
            UnaryOp::Tanh,
            [
                -0.9051482536448664,
                -0.0,
                0.0,
                0.46211715726000974,
                0.9640275800758169,
            ],
        ),
        (
            UnaryOp::Sigmoid,
            [
                0.18242552380635635,
                0.5,
                0.5,
                0.6224593312018546,
                0.8807970779778823,
            ],
        ),
        (
            UnaryOp::Erf,
            [
                -0.9661051464753108,
                -0.0,
                0.0,
                0.5204998778130465,
                0.9953222650189527,
            ],
        ),
        (
            UnaryOp::Sin,
            [
                -0.9974949866040544,
                -0.0,
                0.0,
                0.479425538604203,
                0.9092974268256817,
            ],
        ),
    ];
    for (u, want) in cases {
        let got = run(un(*u), &[&x]).to_f64_vec();
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 4.0 * f64::EPSILON * w.abs().max(1e-300)
                    || g.to_bits() == w.to_bits(),
                "{u:?}: {got:?} vs {want:?}"
            );
        }
        if matches!(
            u,
            UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round
        ) {
            assert!(bits_eq(&got, want), "{u:?} signs of zero: {got:?}");
        }
    }
    let r = run(
        un(UnaryOp::Round),
        &[&f32t(&[5], &[0.5, 1.5, 2.5, -2.5, -0.5])],
    );
    assert!(bits_eq(&r.to_f64_vec(), &[0.0, 2.0, 2.0, -2.0, -0.0]));
    let s = run(
        un(UnaryOp::Log),
        &[&f64t(&[4], &[0.0, -1.0, f64::INFINITY, 1.0])],
    )
    .to_f64_vec();
    assert!(s[0] == f64::NEG_INFINITY && s[1].is_nan() && s[2] == f64::INFINITY && s[3] == 0.0);
    let n = run(un(UnaryOp::Sign), &[&f32t(&[1], &[f32::NAN])]).to_f64_vec();
    assert!(n[0].is_nan());
    // Sigmoid stays finite and exact in the tails; log1p/expm1 keep tiny values.
    let t = run(un(UnaryOp::Sigmoid), &[&f32t(&[2], &[-200.0, 200.0])]).to_f64_vec();
    assert_eq!(t, vec![0.0, 1.0]);
    assert_eq!(
        run(un(UnaryOp::Log1p), &[&f64t(&[1], &[1e-20])]).to_f64_vec(),
        vec![1e-20]
    );
    assert_eq!(
        run(un(UnaryOp::Expm1), &[&f64t(&[1], &[1e-20])]).to_f64_vec(),
        vec![1e-20]
    );
    assert_eq!(
        run(un(UnaryOp::Rsqrt), &[&f64t(&[1], &[4.0])]).to_f64_vec(),
        vec![0.5]
    );
    assert_eq!(
        run(un(UnaryOp::Reciprocal), &[&f64t(&[1], &[-0.0])]).to_f64_vec(),
        vec![f64::NEG_INFINITY]
    );
}

#[test]
fn unary_int_and_bool_ops() {
    let x = i32t(&[4], &[-3, 0, 5, i32::MIN]);
    assert_eq!(
        run(un(UnaryOp::Neg), &[&x]),
        i32t(&[4], &[3, 0, -5, i32::MIN])
    );
    assert_eq!(
        run(un(UnaryOp::Abs), &[&x]),
        i32t(&[4], &[3, 0, 5, i32::MIN])
    );
    assert_eq!(run(un(UnaryOp::Sign), &[&x]), i32t(&[4], &[-1, 0, 1, -1]));
    assert_eq!(run(un(UnaryOp::Relu), &[&x]), i32t(&[4], &[0, 0, 5, 0]));
    assert_eq!(run(un(UnaryOp::Floor), &[&x]), x);
    assert_eq!(
        run(un(UnaryOp::Not), &[&boolt(&[2], &[true, false])]),
        boolt(&[2], &[false, true])
    );
    assert!(
        type_err(un(UnaryOp::Exp), &[TensorType::fixed(DType::I32, &[2])]).contains("f32 or f64")
    );
    assert!(type_err(un(UnaryOp::Not), &[TensorType::fixed(DType::F32, &[2])]).contains("bool"));
    assert!(type_err(un(UnaryOp::Neg), &[TensorType::fixed(DType::Bool, &[2])]).contains("bool"));
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    let a = f64t(&[2, 1], &[1.0, 2.0]);
    let b = f64t(&[3], &[10.0, 20.0, 30.0]);
    assert_eq!(
        run(bin(BinaryOp::Add), &[&a, &b]),
        f64t(&[2, 3], &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0])
    );
    let s = f64t(&[], &[2.0]);
    assert_eq!(
        run(bin(BinaryOp::Mul), &[&s, &b]),
        f64t(&[3], &[20.0, 40.0, 60.0])
    );
    assert_eq!(run(bin(BinaryOp::Sub), &[&s, &s]), f64t(&[], &[0.0]));
    let e = f64t(&[0, 3], &[]);
    assert_eq!(run(bin(BinaryOp::Add), &[&e, &b]).shape(), &[0, 3]);
    assert_eq!(
        run(bin(BinaryOp::Add), &[&f64t(&[1], &[1.0]), &e]).shape(),
        &[0, 3]
    );
    let err = type_err(
        bin(BinaryOp::Add),
        &[
            TensorType::fixed(DType::F32, &[3]),
            TensorType::fixed(DType::F32, &[4]),
        ],
    );
    assert!(err.contains("[3]") && err.contains("[4]"), "{err}");
    let err = type_err(
        bin(BinaryOp::Add),
        &[
            TensorType::fixed(DType::F32, &[3]),
            TensorType::fixed(DType::F64, &[3]),
        ],
    );
    assert!(err.contains("f32[3]") && err.contains("f64[3]"), "{err}");
    assert!(type_err(
        bin(BinaryOp::Div),
        &[
            TensorType::scalar(DType::I32),
            TensorType::scalar(DType::I32)
        ]
    )
    .contains("floordiv"));
    assert!(type_err(
        bin(BinaryOp::And),
        &[
            TensorType::scalar(DType::I32),
            TensorType::scalar(DType::I32)
        ]
    )
    .contains("bool"));
    // Unknown dims pass type checking and fail at run time with an Err, not a panic.
    let ty = infer(
        &bin(BinaryOp::Add),
        &[
            &TensorType::new(DType::F64, vec![None]),
            &TensorType::fixed(DType::F64, &[3]),
        ],
    )
    .unwrap();
    assert_eq!(ty[0].shape, vec![Some(3)]);
    assert!(perform(&bin(BinaryOp::Add), &[&f64t(&[2], &[1.0, 2.0]), &b]).is_err());
}

#[test]
fn integer_division_and_mod_follow_numpy_and_never_trap() {
    let a = i32t(&[6], &[7, -7, 7, -7, 5, i32::MIN]);
    let b = i32t(&[6], &[2, 2, -2, -2, 0, -1]);
    assert_eq!(
        run(bin(BinaryOp::FloorDiv), &[&a, &b]),
        i32t(&[6], &[3, -4, -4, 3, 0, i32::MIN])
    );
    assert_eq!(
        run(bin(BinaryOp::Mod), &[&a, &b]),
        i32t(&[6], &[1, 1, -1, -1, 0, 0])
    );
    let z = i64t(&[2], &[0, 0]);
    assert_eq!(
        run(bin(BinaryOp::FloorDiv), &[&i64t(&[2], &[5, -5]), &z]),
        z
    );
    assert_eq!(
        run(
            bin(BinaryOp::Pow),
            &[
                &i64t(&[5], &[2, -1, 3, 1, 0]),
                &i64t(&[5], &[10, -3, -1, -5, 0])
            ]
        ),
        i64t(&[5], &[1024, -1, 0, 1, 1])
    );
    assert_eq!(
        run(
            bin(BinaryOp::Maximum),
            &[&i32t(&[2], &[1, 5]), &i32t(&[2], &[3, 2])]
        ),
        i32t(&[2], &[3, 5])
    );
}

#[test]
fn float_floordiv_mod_and_nan_rules() {
    let q = run(
        bin(BinaryOp::FloorDiv),
        &[
            &f64t(&[4], &[7.5, -7.5, 1.0, -0.0]),
            &f64t(&[4], &[2.0, 2.0, 0.0, 3.0]),
        ],
    )
    .to_f64_vec();
    assert!(bits_eq(&q, &[3.0, -4.0, f64::INFINITY, -0.0]), "{q:?}");
    let m = run(
        bin(BinaryOp::Mod),
        &[
            &f64t(&[4], &[-1.0, 1.0, 5.5, -0.0]),
            &f64t(&[4], &[3.0, -3.0, 0.0, 2.0]),
        ],
    )
    .to_f64_vec();
    assert!(bits_eq(&m, &[2.0, -2.0, f64::NAN, 0.0]), "{m:?}");
    let nan = f64::NAN;
    for op in [BinaryOp::Maximum, BinaryOp::Minimum] {
        let r = run(
            bin(op),
            &[&f64t(&[3], &[1.0, nan, 2.0]), &f64t(&[3], &[nan, 2.0, 1.0])],
        )
        .to_f64_vec();
        assert!(
            r[0].is_nan()
                && r[1].is_nan()
                && r[2] == if op == BinaryOp::Maximum { 2.0 } else { 1.0 }
        );
    }
    let c = run(
        bin(BinaryOp::Lt),
        &[
            &f64t(&[3], &[1.0, nan, -0.0]),
            &f64t(&[3], &[2.0, 1.0, 0.0]),
        ],
    );
    assert_eq!(c, boolt(&[3], &[true, false, false]));
    let e = run(
        bin(BinaryOp::Eq),
        &[&f64t(&[2], &[nan, -0.0]), &f64t(&[2], &[nan, 0.0])],
    );
    assert_eq!(e, boolt(&[2], &[false, true]));
    assert_eq!(
        run(
            bin(BinaryOp::Pow),
            &[&f64t(&[2], &[2.0, 4.0]), &f64t(&[2], &[-1.0, 0.5])]
        ),
        f64t(&[2], &[0.5, 2.0])
    );
    assert_eq!(
        run(
            bin(BinaryOp::Or),
            &[&boolt(&[2], &[true, false]), &boolt(&[1], &[false])]
        ),
        boolt(&[2], &[true, false])
    );
}

#[test]
fn select_and_cast() {
    let c = boolt(&[2, 1], &[true, false]);
    let r = run(
        Op::Select,
        &[&c, &f64t(&[3], &[1.0, 2.0, 3.0]), &f64t(&[], &[0.0])],
    );
    assert_eq!(r, f64t(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]));
    assert!(type_err(
        Op::Select,
        &[
            TensorType::scalar(DType::F32),
            TensorType::scalar(DType::F32),
            TensorType::scalar(DType::F32)
        ]
    )
    .contains("bool"));
    let x = f32t(&[6], &[1e10, -1e10, f32::NAN, 3.9, -3.9, 0.0]);
    assert_eq!(
        run(Op::Cast { to: DType::I32 }, &[&x]),
        i32t(&[6], &[i32::MAX, i32::MIN, 0, 3, -3, 0])
    );
    assert_eq!(
        run(Op::Cast { to: DType::Bool }, &[&x]),
        boolt(&[6], &[true, true, true, true, true, false])
    );
    assert_eq!(
        run(Op::Cast { to: DType::F64 }, &[&boolt(&[2], &[true, false])]),
        f64t(&[2], &[1.0, 0.0])
    );
    assert_eq!(
        run(
            Op::Cast { to: DType::I64 },
            &[&i64t(&[1], &[(1 << 60) + 1])]
        ),
        i64t(&[1], &[(1 << 60) + 1])
    );
}

#[test]
fn reductions_with_axes_keepdims_and_dtypes() {
    let x = f64t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(
        run(red(ReduceOp::Sum, Some(vec![1]), false), &[&x]),
        f64t(&[2], &[6.0, 15.0])
    );
    assert_eq!(
        run(red(ReduceOp::Sum, Some(vec![0]), true), &[&x]),
        f64t(&[1, 3], &[5.0, 7.0, 9.0])
    );
    assert_eq!(
        run(red(ReduceOp::Sum, None, false), &[&x]),
        f64t(&[], &[21.0])
    );
    assert_eq!(
        run(red(ReduceOp::Prod, Some(vec![1]), false), &[&x]),
        f64t(&[2], &[6.0, 120.0])
    );
    assert_eq!(
        run(red(ReduceOp::Mean, None, true), &[&x]),
        f64t(&[1, 1], &[3.5])
    );
    assert_eq!(
        run(red(ReduceOp::Max, Some(vec![0]), false), &[&x]),
        f64t(&[3], &[4.0, 5.0, 6.0])
    );
    assert_eq!(
        run(red(ReduceOp::Min, Some(vec![0, 1]), false), &[&x]),
        f64t(&[], &[1.0])
    );
    assert_eq!(
        run(red(ReduceOp::ArgMax, Some(vec![1]), false), &[&x]),
        i64t(&[2], &[2, 2])
    );
    assert_eq!(
        run(red(ReduceOp::ArgMin, None, false), &[&x]),
        i64t(&[], &[0])
    );
    let i = i32t(&[3], &[1, 2, 4]);
    assert_eq!(
        run(red(ReduceOp::Mean, None, false), &[&i]),
        f64t(&[], &[7.0 / 3.0])
    );
    assert_eq!(run(red(ReduceOp::Sum, None, false), &[&i]), i32t(&[], &[7]));
    let b = boolt(&[2, 2], &[true, false, true, true]);
    assert_eq!(
        run(red(ReduceOp::Sum, Some(vec![1]), false), &[&b]),
        i64t(&[2], &[1, 2])
    );
    assert_eq!(
        run(red(ReduceOp::All, Some(vec![1]), false), &[&b]),
        boolt(&[2], &[false, true])
    );
    assert_eq!(
        run(red(ReduceOp::Any, None, false), &[&i]),
        boolt(&[], &[true])
    );
    // The first NaN is the extreme, for argmax and argmin alike; max propagates it.
    let n = f64t(&[4], &[1.0, f64::NAN, 5.0, f64::NAN]);
    assert_eq!(
        run(red(ReduceOp::ArgMax, None, false), &[&n]),
        i64t(&[], &[1])
    );
    assert_eq!(
        run(red(ReduceOp::ArgMin, None, false), &[&n]),
        i64t(&[], &[1])
    );
    assert!(run(red(ReduceOp::Max, None, false), &[&n]).to_f64_vec()[0].is_nan());
    assert_eq!(
        run(
            red(ReduceOp::ArgMin, None, false),
            &[&i32t(&[3], &[3, 1, 1])]
        ),
        i64t(&[], &[1])
    );
    // Type errors.
    assert!(type_err(
        red(ReduceOp::Sum, Some(vec![2]), false),
        &[TensorType::fixed(DType::F32, &[2, 2])]
    )
    .contains("axis 2"));
    assert!(type_err(
        red(ReduceOp::ArgMax, Some(vec![0, 1]), false),
        &[TensorType::fixed(DType::F32, &[2, 2])]
    )
    .contains("one axis"));
}

#[test]
fn empty_reductions() {
    let e = f64t(&[2, 0], &[]);
    assert_eq!(
        run(red(ReduceOp::Sum, Some(vec![1]), false), &[&e]),
        f64t(&[2], &[0.0, 0.0])
    );
    assert_eq!(
        run(red(ReduceOp::Prod, Some(vec![1]), false), &[&e]),
        f64t(&[2], &[1.0, 1.0])
    );
    assert_eq!(
        run(red(ReduceOp::All, Some(vec![1]), false), &[&e]),
        boolt(&[2], &[true, true])
    );
    assert_eq!(
        run(red(ReduceOp::Any, Some(vec![1]), false), &[&e]),
        boolt(&[2], &[false, false])
    );
    for op in [
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
    ] {
        let err = perform(&red(op, Some(vec![1]), false), &[&e]).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
    // Reducing the non-empty axis of an empty tensor gives an empty result, not an error.
    assert_eq!(
        run(red(ReduceOp::Max, Some(vec![0]), false), &[&e]).shape(),
        &[0]
    );
}

#[test]
fn float_sums_are_pairwise() {
    let n = 10_000_000;
    let x = Tensor::F32(ArrayD::from_elem(IxDyn(&[n]), 0.1f32));
    let s = run(red(ReduceOp::Sum, None, false), &[&x]).to_f64_vec()[0];
    let exact = n as f64 * 0.1f32 as f64;
    assert!(((s - exact) / exact).abs() < 1e-6, "{s} vs {exact}");
    let naive = (0..n).fold(0.0f32, |a, _| a + 0.1f32) as f64;
    assert!(
        ((naive - exact) / exact).abs() > 1e-3,
        "the naive loop would pass too: the test is not sharp"
    );
}

#[test]
fn shape_ops() {
    let x = f64t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(
        run(Op::Transpose { perm: vec![1, 0] }, &[&x]).to_f64_vec(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    assert!(type_err(Op::Transpose { perm: vec![0, 0] }, &[x.ty()]).contains("permutation"));
    let t = run(Op::Transpose { perm: vec![1, 0] }, &[&x]);
    assert_eq!(
        run(Op::Reshape { shape: vec![-1] }, &[&t]).to_f64_vec(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    assert_eq!(
        run(Op::Reshape { shape: vec![3, -1] }, &[&x]).shape(),
        &[3, 2]
    );
    assert!(type_err(Op::Reshape { shape: vec![4, -1] }, &[x.ty()]).contains("cannot reshape"));
    assert!(type_err(
        Op::Reshape {
            shape: vec![-1, -1]
        },
        &[x.ty()]
    )
    .contains("at most one"));
    assert!(perform(&Op::Reshape { shape: vec![5] }, &[&x]).is_err());
    assert_eq!(
        run(
            Op::BroadcastTo {
                shape: vec![2, 2, 3]
            },
            &[&x]
        )
        .to_f64_vec()[6..],
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    assert!(type_err(Op::BroadcastTo { shape: vec![3, 3] }, &[x.ty()]).contains("cannot broadcast"));
    assert_eq!(
        run(Op::ExpandDims { axes: vec![0, 3] }, &[&x]).shape(),
        &[1, 2, 3, 1]
    );
    let y = f64t(&[1, 3, 1], &[1.0, 2.0, 3.0]);
    assert_eq!(
        run(Op::Squeeze { axes: vec![0, 2] }, &[&y]),
        f64t(&[3], &[1.0, 2.0, 3.0])
    );
    assert!(type_err(Op::Squeeze { axes: vec![1] }, &[y.ty()]).contains("not 1"));
    assert!(perform(&Op::Squeeze { axes: vec![1] }, &[&y]).is_err());
    let c = run(Op::Concat { axis: 1 }, &[&x, &f64t(&[2, 1], &[7.0, 8.0])]);
    assert_eq!(c, f64t(&[2, 4], &[1.0, 2.0, 3.0, 7.0, 4.0, 5.0, 6.0, 8.0]));
    assert!(type_err(
        Op::Concat { axis: 0 },
        &[x.ty(), TensorType::fixed(DType::F64, &[2, 2])]
    )
    .contains("dim 1"));
    assert_eq!(
        run(
            Op::Concat { axis: 0 },
            &[&f64t(&[0], &[]), &f64t(&[2], &[1.0, 2.0])]
        ),
        f64t(&[2], &[1.0, 2.0])
    );
}

#[test]
fn slices_follow_numpy() {
    let a = i64t(&[6], &[0, 1, 2, 3, 4, 5]);
    let sl = |start: i64, stop: i64, step: i64| {
        run(
            Op::Slice {
                starts: vec![start],
                stops: vec![stop],
                steps: vec![step],
            },
            &[&a],
        )
    };
    let (lo, hi) = (i64::MIN, i64::MAX);
    assert_eq!(sl(5, lo, -2), i64t(&[3], &[5, 3, 1]));
    assert_eq!(sl(hi, lo, -1), i64t(&[6], &[5, 4, 3, 2, 1, 0]));
    assert_eq!(sl(-2, hi, 1), i64t(&[2], &[4, 5]));
    assert_eq!(sl(1, 100, 2), i64t(&[3], &[1, 3, 5]));
    assert_eq!(sl(-100, 2, 1), i64t(&[2], &[0, 1]));
    assert_eq!(sl(4, 2, 1), i64t(&[0], &[]));
    let m = f64t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = run(
        Op::Slice {
            starts: vec![hi, 1],
            stops: vec![lo, hi],
            steps: vec![-1, 1],
        },
        &[&m],
    );
    assert_eq!(r, f64t(&[2, 2], &[5.0, 6.0, 2.0, 3.0]));
    assert!(type_err(
        Op::Slice {
            starts: vec![0],
            stops: vec![1],
            steps: vec![0]
        },
        &[a.ty()]
    )
    .contains("zero"));
}

#[test]
fn matmul_follows_numpy() {
    let a = i64t(&[2, 3], &[0, 1, 2, 3, 4, 5]);
    assert_eq!(
        run(Op::MatMul, &[&a, &i64t(&[3], &[0, 1, 2])]),
        i64t(&[2], &[5, 14])
    );
    let b = i64t(&[3, 2], &[0, 1, 2, 3, 4, 5]);
    assert_eq!(
        run(Op::MatMul, &[&i64t(&[3], &[0, 1, 2]), &b]),
        i64t(&[2], &[10, 13])
    );
    assert_eq!(run(Op::MatMul, &[&a, &b]), i64t(&[2, 2], &[10, 13, 28, 40]));
    // Batched, with the batch dim of the second operand broadcast.
    let batch = f64t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let m = f64t(&[2, 2], &[1.0, 0.0, 0.0, 10.0]);
    assert_eq!(
        run(Op::MatMul, &[&batch, &m]),
        f64t(&[2, 1, 2], &[1.0, 20.0, 3.0, 40.0])
    );
    let err = type_err(
        Op::MatMul,
        &[
            TensorType::fixed(DType::F32, &[2, 3]),
            TensorType::fixed(DType::F32, &[4, 2]),
        ],
    );
    assert!(err.contains("inner dims 3 and 4"), "{err}");
    assert!(type_err(
        Op::MatMul,
        &[
            TensorType::scalar(DType::F32),
            TensorType::fixed(DType::F32, &[2])
        ]
    )
    .contains("at least one"));
    let f = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        run(Op::MatMul, &[&f, &f]),
        f32t(&[2, 2], &[7.0, 10.0, 15.0, 22.0])
    );
}

#[test]
fn creation_ops() {
    assert_eq!(
        run(
            Op::Zeros {
                shape: vec![2],
                dtype: DType::I32
            },
            &[]
        ),
        i32t(&[2], &[0, 0])
    );
    assert_eq!(
        run(
            Op::Ones {
                shape: vec![],
                dtype: DType::Bool
            },
            &[]
        ),
        boolt(&[], &[true])
    );
    assert_eq!(
        run(
            Op::Full {
                shape: vec![2],
                dtype: DType::F32,
                value: F64Bits(2.5)
            },
            &[]
        ),
        f32t(&[2], &[2.5, 2.5])
    );
    let ar = |a: f64, b: f64, s: f64, d: DType| {
        run(
            Op::Arange {
                start: F64Bits(a),
                stop: F64Bits(b),
                step: F64Bits(s),
                dtype: d,
            },
            &[],
        )
    };
    assert_eq!(ar(0.0, 5.0, 2.0, DType::I64), i64t(&[3], &[0, 2, 4]));
    assert_eq!(
        ar(1.0, 0.0, -0.25, DType::F64),
        f64t(&[4], &[1.0, 0.75, 0.5, 0.25])
    );
    assert_eq!(ar(5.0, 0.0, 1.0, DType::F32).shape(), &[0]);
    assert!(type_err(
        Op::Arange {
            start: F64Bits(0.0),
            stop: F64Bits(1.0),
            step: F64Bits(0.0),
            dtype: DType::F32
        },
        &[]
    )
    .contains("nonzero"));
    assert!(type_err(
        Op::Zeros {
            shape: vec![1],
            dtype: DType::F32
        },
        &[TensorType::scalar(DType::F32)]
    )
    .contains("takes 0"));
}
