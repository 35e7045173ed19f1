//! `perform` of the shape ops, matmul and the creation ops against numpy values, and their
//! run-time errors.

#[path = "perform_support/mod.rs"]
mod support;

use kiln::ir::{DType, F64Bits, Op};
use kiln::Tensor;
use support::*;

fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    i64s(shape, &(0..n as i64).collect::<Vec<_>>())
}

#[test]
fn transpose_permutes_axes() {
    let a = iota(&[2, 3, 4]);
    let y = run(
        &Op::Transpose {
            perm: vec![2, 0, 1],
        },
        &[&a],
    );
    let expect = [
        0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23,
    ];
    same(&y, &i64s(&[4, 2, 3], &expect));
    // The result is laid out row-major, whatever the permutation.
    assert!(y.as_i64().unwrap().is_standard_layout());
    same(
        &run(&Op::Transpose { perm: vec![] }, &[&i64s(&[], &[7])]),
        &i64s(&[], &[7]),
    );
    for perm in [vec![0, 1], vec![0, 0, 1], vec![0, 1, 3], vec![]] {
        run_err(&Op::Transpose { perm }, &[&a]);
    }
}

#[test]
fn reshape_infers_one_dim_and_checks_the_count() {
    let a = iota(&[2, 3, 4]);
    let y = run(&Op::Reshape { shape: vec![4, -1] }, &[&a]);
    same(&y, &iota(&[4, 6]));
    same(&run(&Op::Reshape { shape: vec![24] }, &[&a]), &iota(&[24]));
    same(
        &run(&Op::Reshape { shape: vec![] }, &[&iota(&[1, 1])]),
        &iota(&[]),
    );
    same(
        &run(&Op::Reshape { shape: vec![0, 5] }, &[&iota(&[0])]),
        &iota(&[0, 5]),
    );
    // Reshaping a transposed tensor follows its logical (row-major) order.
    let t = run(&Op::Transpose { perm: vec![1, 0] }, &[&iota(&[2, 3])]);
    same(
        &run(&Op::Reshape { shape: vec![-1] }, &[&t]),
        &i64s(&[6], &[0, 3, 1, 4, 2, 5]),
    );
    for shape in [
        vec![5, -1],
        vec![25],
        vec![-1, -1],
        vec![-2, 12],
        vec![0, -1],
    ] {
        let e = run_err(&Op::Reshape { shape }, &[&a]);
        assert!(e.contains("reshape"), "{e}");
    }
    run_err(&Op::Reshape { shape: vec![-1, 0] }, &[&iota(&[0])]);
}

#[test]
fn broadcast_to_stretches_size_one_dims_and_adds_leading_ones() {
    let a = i32s(&[3, 1], &[1, 2, 3]);
    same(
        &run(
            &Op::BroadcastTo {
                shape: vec![2, 3, 2],
            },
            &[&a],
        ),
        &i32s(&[2, 3, 2], &[1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3]),
    );
    same(
        &run(&Op::BroadcastTo { shape: vec![3, 0] }, &[&a]),
        &i32s(&[3, 0], &[]),
    );
    same(
        &run(&Op::BroadcastTo { shape: vec![2] }, &[&i32s(&[], &[4])]),
        &i32s(&[2], &[4, 4]),
    );
    for shape in [vec![3], vec![2, 2], vec![4, 1]] {
        run_err(&Op::BroadcastTo { shape }, &[&a]);
    }
}

#[test]
fn expand_dims_and_squeeze() {
    let a = iota(&[2, 3]);
    same(
        &run(&Op::ExpandDims { axes: vec![0, 3] }, &[&a]),
        &iota(&[1, 2, 3, 1]),
    );
    same(
        &run(&Op::ExpandDims { axes: vec![1] }, &[&a]),
        &iota(&[2, 1, 3]),
    );
    same(
        &run(&Op::ExpandDims { axes: vec![0] }, &[&iota(&[])]),
        &iota(&[1]),
    );
    run_err(&Op::ExpandDims { axes: vec![3] }, &[&a]);
    run_err(&Op::ExpandDims { axes: vec![1, 1] }, &[&a]);
    let b = iota(&[1, 3, 1]);
    same(&run(&Op::Squeeze { axes: vec![0, 2] }, &[&b]), &iota(&[3]));
    same(&run(&Op::Squeeze { axes: vec![2] }, &[&b]), &iota(&[1, 3]));
    let e = run_err(&Op::Squeeze { axes: vec![1] }, &[&b]);
    assert!(e.contains("size 3"), "{e}");
    run_err(&Op::Squeeze { axes: vec![3] }, &[&b]);
}

#[test]
fn concat_joins_along_an_axis() {
    let a = i64s(&[1, 2], &[1, 2]);
    let b = i64s(&[2, 2], &[3, 4, 5, 6]);
    same(
        &run(&Op::Concat { axis: 0 }, &[&a, &b]),
        &i64s(&[3, 2], &[1, 2, 3, 4, 5, 6]),
    );
    let c = f32s(&[2, 1], &[9.0, 8.0]);
    let d = f32s(&[2, 0], &[]);
    let e = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    exact(
        &run(&Op::Concat { axis: 1 }, &[&c, &d, &e]),
        &[2, 3],
        &[9.0, 1.0, 2.0, 8.0, 3.0, 4.0],
    );
    same(&run(&Op::Concat { axis: 0 }, &[&a]), &a);
    run_err(&Op::Concat { axis: 1 }, &[&a, &b]);
    run_err(&Op::Concat { axis: 2 }, &[&a, &a]);
    run_err(&Op::Concat { axis: 0 }, &[&a, &c]);
    run_err(&Op::Concat { axis: 0 }, &[&a, &i64s(&[2], &[1, 2])]);
    run_err(&Op::Concat { axis: 0 }, &[]);
}

fn slice(starts: &[i64], stops: &[i64], steps: &[i64]) -> Op {
    Op::Slice {
        starts: starts.to_vec(),
        stops: stops.to_vec(),
        steps: steps.to_vec(),
    }
}

#[test]
fn slices_follow_numpy() {
    const MIN: i64 = i64::MIN;
    const MAX: i64 = i64::MAX;
    let a = iota(&[2, 3, 4]);
    // a[::-1, 1:, ::-2]
    same(
        &run(
            &slice(&[MAX, 1, MAX], &[MIN, MAX, MIN], &[-1, 1, -2]),
            &[&a],
        ),
        &i64s(&[2, 2, 2], &[19, 17, 23, 21, 7, 5, 11, 9]),
    );
    // a[:, -2:-1, 3:0:-1]
    same(
        &run(&slice(&[MIN, -2, 3], &[MAX, -1, 0], &[1, 1, -1]), &[&a]),
        &i64s(&[2, 1, 3], &[7, 6, 5, 19, 18, 17]),
    );
    // a[-1:, -100:2, 5:] is empty on the last axis; a[1:0] empty on the first.
    same(
        &run(&slice(&[-1, -100, 5], &[MAX, 2, MAX], &[1, 1, 1]), &[&a]),
        &i64s(&[1, 2, 0], &[]),
    );
    same(
        &run(&slice(&[1], &[0], &[1]), &[&a]),
        &i64s(&[0, 3, 4], &[]),
    );
    // Only the leading axes are sliced; a[1] as a[1:2].
    same(
        &run(&slice(&[1], &[2], &[1]), &[&a]),
        &i64s(&[1, 3, 4], &(12..24).collect::<Vec<_>>()),
    );
    // Steps larger than the axis, including the most extreme ones.
    same(
        &run(&slice(&[0], &[MAX], &[MAX]), &[&iota(&[5])]),
        &i64s(&[1], &[0]),
    );
    same(
        &run(&slice(&[MAX], &[MIN], &[MIN]), &[&iota(&[5])]),
        &i64s(&[1], &[4]),
    );
    same(
        &run(&slice(&[MAX], &[MIN], &[-2]), &[&iota(&[0])]),
        &i64s(&[0], &[]),
    );
    run_err(&slice(&[0], &[1], &[0]), &[&a]);
    run_err(&slice(&[0, 0], &[1], &[1]), &[&a]);
    run_err(&slice(&[0; 4], &[1; 4], &[1; 4]), &[&a]);
}

#[test]
fn matmul_follows_numpy_for_1d_2d_and_batched_operands() {
    let a = f64s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f64s(&[3, 2], &[1.0, 0.0, 2.0, 1.0, -1.0, 3.0]);
    let mm = |x: &Tensor, y: &Tensor| run(&Op::MatMul, &[x, y]);
    exact(&mm(&a, &b), &[2, 2], &[2.0, 11.0, 8.0, 23.0]);
    let v = f64s(&[3], &[1.0, 2.0, 3.0]);
    exact(&mm(&v, &b), &[2], &[2.0, 11.0]);
    exact(&mm(&a, &f64s(&[3], &[1.0, 0.0, -1.0])), &[2], &[-2.0, -2.0]);
    exact(&mm(&v, &f64s(&[3], &[4.0, 5.0, 6.0])), &[], &[32.0]);
    // Batch dims broadcast: [2,1,2,3] @ [3,3,2] -> [2,3,2,2].
    let x = f64s(
        &[2, 1, 2, 3],
        &(0..12).map(|i| i as f64).collect::<Vec<_>>(),
    );
    let y = f64s(&[3, 3, 2], &(0..18).map(|i| i as f64).collect::<Vec<_>>());
    exact(
        &mm(&x, &y),
        &[2, 3, 2, 2],
        &[
            10.0, 13.0, 28.0, 40.0, 28.0, 31.0, 100.0, 112.0, 46.0, 49.0, 172.0, 184.0, 46.0, 67.0,
            64.0, 94.0, 172.0, 193.0, 244.0, 274.0, 298.0, 319.0, 424.0, 454.0,
        ],
    );
    // The same in f32 and in integers (which wrap).
    let x32 = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y32 = f32s(&[3, 2], &[1.0, 0.0, 2.0, 1.0, -1.0, 3.0]);
    exact(&mm(&x32, &y32), &[2, 2], &[2.0, 11.0, 8.0, 23.0]);
    let xi = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let yi = i32s(&[3, 2], &[1, 0, 2, 1, -1, 3]);
    same(&mm(&xi, &yi), &i32s(&[2, 2], &[2, 11, 8, 23]));
    same(
        &mm(&i64s(&[1, 2], &[i64::MAX, 1]), &i64s(&[2], &[2, 2])),
        &i64s(&[1], &[0]),
    );
    // A 1-D operand against a batch: [3] @ [2,3,2] -> [2,2].
    let yb = i32s(&[2, 3, 2], &[1, 0, 2, 1, -1, 3, 0, 1, 1, 0, 1, 1]);
    same(
        &mm(&i32s(&[3], &[1, 2, 3]), &yb),
        &i32s(&[2, 2], &[2, 11, 5, 4]),
    );
    // An empty inner dim gives zeros; empty outer dims an empty result.
    exact(
        &mm(&f32s(&[2, 0], &[]), &f32s(&[0, 2], &[])),
        &[2, 2],
        &[0.0; 4],
    );
    exact(&mm(&f64s(&[0, 3], &[]), &b), &[0, 2], &[]);
    // Run-time shape errors.
    run_err(&Op::MatMul, &[&a, &a]);
    run_err(&Op::MatMul, &[&f64s(&[], &[1.0]), &a]);
    run_err(
        &Op::MatMul,
        &[&f64s(&[2, 2, 3], &[0.0; 12]), &f64s(&[3, 3, 2], &[0.0; 18])],
    );
    run_err(&Op::MatMul, &[&a, &f32s(&[3], &[0.0; 3])]);
    run_err(
        &Op::MatMul,
        &[&bools(&[1, 1], &[true]), &bools(&[1, 1], &[true])],
    );
}

#[test]
fn creation_ops_make_what_numpy_makes() {
    let zeros = Op::Zeros {
        shape: vec![2, 0],
        dtype: DType::F32,
    };
    same(&run(&zeros, &[]), &f32s(&[2, 0], &[]));
    let ones = Op::Ones {
        shape: vec![2],
        dtype: DType::Bool,
    };
    same(&run(&ones, &[]), &bools(&[2], &[true, true]));
    let full = |dtype, value| Op::Full {
        shape: vec![1, 2],
        dtype,
        value: F64Bits(value),
    };
    same(
        &run(&full(DType::I32, -2.7), &[]),
        &i32s(&[1, 2], &[-2, -2]),
    );
    same(
        &run(&full(DType::I64, f64::NAN), &[]),
        &i64s(&[1, 2], &[0, 0]),
    );
    exact(&run(&full(DType::F64, -0.0), &[]), &[1, 2], &[-0.0, -0.0]);
    same(
        &run(&full(DType::Bool, 0.5), &[]),
        &bools(&[1, 2], &[true, true]),
    );
    let arange = |start, stop, step, dtype| Op::Arange {
        start: F64Bits(start),
        stop: F64Bits(stop),
        step: F64Bits(step),
        dtype,
    };
    exact(
        &run(&arange(-1.0, 1.0, 0.5, DType::F64), &[]),
        &[4],
        &[-1.0, -0.5, 0.0, 0.5],
    );
    same(
        &run(&arange(5.0, 0.0, -2.0, DType::I32), &[]),
        &i32s(&[3], &[5, 3, 1]),
    );
    exact(
        &run(&arange(0.1, 1.0, 0.3, DType::F32), &[]),
        &[3],
        &[0.10000000149011612, 0.4000000059604645, 0.7000000476837158],
    );
    // numpy fills integer ranges from the first two values converted: [0, 2, 4].
    same(
        &run(&arange(0.5, 5.0, 1.5, DType::I64), &[]),
        &i64s(&[3], &[0, 2, 4]),
    );
    same(
        &run(&arange(3.0, 3.0, 1.0, DType::I64), &[]),
        &i64s(&[0], &[]),
    );
    run_err(&arange(0.0, 1.0, 0.0, DType::F64), &[]);
    run_err(&arange(0.0, 3.0, 1.0, DType::Bool), &[]);
    // Too large to exist: an error, not a crash.
    let huge = Op::Zeros {
        shape: vec![usize::MAX / 2, 4],
        dtype: DType::F64,
    };
    run_err(&huge, &[]);
    run_err(&arange(-1e308, 1e308, 1e-300, DType::F64), &[]);
    run_err(&zeros, &[&f32s(&[1], &[0.0])]);
}

#[test]
fn const_returns_its_tensor() {
    let t = f64s(&[2], &[1.5, f64::NAN]);
    same(&run(&Op::Const(t.clone()), &[]), &t);
}

#[test]
fn inputs_in_column_major_layout_give_the_same_results() {
    // A transposed owned array keeps column-major memory; every op reads logical order.
    let rows = ndarray::ArrayD::from_shape_vec(
        ndarray::IxDyn(&[3, 2]),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0],
    )
    .unwrap();
    let t = Tensor::F64(rows.reversed_axes()); // logically [[1,2,3],[4,5,6]]
    assert!(!t.as_f64().unwrap().is_standard_layout());
    let c = f64s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    same(
        &run(&Op::Reshape { shape: vec![-1] }, &[&t]),
        &f64s(&[6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    );
    same(
        &run(&Op::Transpose { perm: vec![1, 0] }, &[&t]),
        &run(&Op::Transpose { perm: vec![1, 0] }, &[&c]),
    );
    let add = Op::Binary(kiln::ir::BinaryOp::Add);
    exact(
        &run(&add, &[&t, &f64s(&[3], &[0.0, 10.0, 20.0])]),
        &[2, 3],
        &[1.0, 12.0, 23.0, 4.0, 15.0, 26.0],
    );
    let sum = Op::Reduce {
        op: kiln::ir::ReduceOp::Sum,
        axes: Some(vec![1]),
        keepdims: false,
    };
    exact(&run(&sum, &[&t]), &[2], &[6.0, 15.0]);
    let argmax = Op::Reduce {
        op: kiln::ir::ReduceOp::ArgMax,
        axes: None,
        keepdims: false,
    };
    same(&run(&argmax, &[&t]), &i64s(&[], &[5]));
    exact(
        &run(&Op::MatMul, &[&t, &f64s(&[3], &[1.0, 0.0, -1.0])]),
        &[2],
        &[-2.0, -2.0],
    );
    same(
        &run(&slice(&[1], &[i64::MIN], &[-1]), &[&t]),
        &f64s(&[2, 3], &[4.0, 5.0, 6.0, 1.0, 2.0, 3.0]),
    );
    same(
        &run(&Op::Concat { axis: 0 }, &[&t, &c]),
        &run(&Op::Concat { axis: 0 }, &[&c, &c]),
    );
}

#[test]
fn matrix_transposes_match_the_permuted_view_at_tile_edges() {
    for (m, n) in [(1, 1), (3, 70), (67, 45), (64, 32), (33, 1)] {
        let a = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[m, n]), |i| {
            (i[0] * 1000 + i[1]) as i64
        });
        let t = kiln::perform::perform(
            &kiln::ir::Op::Transpose { perm: vec![1, 0] },
            &[&kiln::Tensor::I64(a.clone())],
        )
        .unwrap()
        .remove(0);
        let want = a.t().as_standard_layout().into_owned();
        assert!(t.bit_eq(&kiln::Tensor::I64(want)), "{m} x {n}");
    }
}
