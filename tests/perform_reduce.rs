//! `perform` of the reductions against numpy values: every axis choice, keepdims, dtypes of
//! results, NaN handling, empty axes and the accuracy of long float sums.

#[path = "perform_support/mod.rs"]
mod support;

use kiln::ir::{Op, ReduceOp};
use kiln::Tensor;
use support::*;

const NAN: f64 = f64::NAN;

fn red(op: ReduceOp, axes: Option<&[usize]>, keepdims: bool) -> Op {
    Op::Reduce {
        op,
        axes: axes.map(|a| a.to_vec()),
        keepdims,
    }
}

/// numpy: `np.array([3,-1,4,1,-5,9,2,6,-5,3,5,8.]).reshape(2,3,2)`.
fn sample() -> Tensor {
    f64s(
        &[2, 3, 2],
        &[
            3.0, -1.0, 4.0, 1.0, -5.0, 9.0, 2.0, 6.0, -5.0, 3.0, 5.0, 8.0,
        ],
    )
}

#[test]
fn float_reductions_over_each_choice_of_axes() {
    use ReduceOp::*;
    let a = sample();
    // (axes, output shape, sum, prod, max, min, mean) from numpy.
    type Case = (
        Option<&'static [usize]>,
        &'static [usize],
        [&'static [f64]; 5],
    );
    let cases: Vec<Case> = vec![
        (
            Some(&[0]),
            &[3, 2],
            [
                &[5.0, 5.0, -1.0, 4.0, 0.0, 17.0],
                &[6.0, -6.0, -20.0, 3.0, -25.0, 72.0],
                &[3.0, 6.0, 4.0, 3.0, 5.0, 9.0],
                &[2.0, -1.0, -5.0, 1.0, -5.0, 8.0],
                &[2.5, 2.5, -0.5, 2.0, 0.0, 8.5],
            ],
        ),
        (
            Some(&[1]),
            &[2, 2],
            [
                &[2.0, 9.0, 2.0, 17.0],
                &[-60.0, -9.0, -50.0, 144.0],
                &[4.0, 9.0, 5.0, 8.0],
                &[-5.0, -1.0, -5.0, 3.0],
                &[
                    0.6666666666666666,
                    3.0,
                    0.6666666666666666,
                    5.666666666666667,
                ],
            ],
        ),
        (
            Some(&[0, 2]),
            &[3],
            [
                &[10.0, 3.0, 17.0],
                &[-36.0, -60.0, -1800.0],
                &[6.0, 4.0, 9.0],
                &[-1.0, -5.0, -5.0],
                &[2.5, 0.75, 4.25],
            ],
        ),
        (
            Some(&[1, 2]),
            &[2],
            [
                &[11.0, 19.0],
                &[540.0, -7200.0],
                &[9.0, 8.0],
                &[-5.0, -5.0],
                &[1.8333333333333333, 3.1666666666666665],
            ],
        ),
        (None, &[], [&[30.0], &[-3888000.0], &[9.0], &[-5.0], &[2.5]]),
    ];
    for (axes, shape, expected) in cases {
        for (op, e) in [Sum, Prod, Max, Min, Mean].into_iter().zip(expected) {
            close(&run(&red(op, axes, false), &[&a]), shape, e, 1);
            // keepdims puts a 1 where each reduced axis was.
            let kept = run(&red(op, axes, true), &[&a]);
            let kshape: Vec<usize> = (0..3)
                .map(|i| {
                    if axes.is_none_or(|ax| ax.contains(&i)) {
                        1
                    } else {
                        a.shape()[i]
                    }
                })
                .collect();
            close(&kept, &kshape, e, 1);
        }
    }
    // An empty axis list reduces nothing.
    exact(
        &run(&red(Sum, Some(&[]), false), &[&a]),
        &[2, 3, 2],
        &a.to_f64_vec(),
    );
}

#[test]
fn argmax_and_argmin_give_i64_indices_along_the_axis_or_flattened() {
    use ReduceOp::*;
    let a = sample();
    // (axes, output shape, argmax, argmin)
    type Case<'a> = (Option<&'a [usize]>, &'a [usize], &'a [i64], &'a [i64]);
    let cases: [Case; 4] = [
        (
            Some(&[0]),
            &[3, 2],
            &[0, 1, 0, 1, 1, 0],
            &[1, 0, 1, 0, 0, 1],
        ),
        (Some(&[1]), &[2, 2], &[1, 2, 2, 2], &[2, 0, 1, 1]),
        (
            Some(&[2]),
            &[2, 3],
            &[0, 0, 1, 1, 1, 1],
            &[1, 1, 0, 0, 0, 0],
        ),
        (None, &[], &[5], &[4]),
    ];
    for (axes, shape, amax, amin) in cases {
        same(&run(&red(ArgMax, axes, false), &[&a]), &i64s(shape, amax));
        same(&run(&red(ArgMin, axes, false), &[&a]), &i64s(shape, amin));
    }
    let k = run(&red(ArgMax, Some(&[1]), true), &[&a]);
    same(&k, &i64s(&[2, 1, 2], &[1, 2, 2, 2]));
    // Ties: the first occurrence.
    let t = i32s(&[5], &[1, 7, 7, -2, -2]);
    same(&run(&red(ArgMax, None, false), &[&t]), &i64s(&[], &[1]));
    same(&run(&red(ArgMin, None, false), &[&t]), &i64s(&[], &[3]));
    let b = bools(&[3], &[false, true, true]);
    same(&run(&red(ArgMax, None, false), &[&b]), &i64s(&[], &[1]));
    // argmax takes one axis or none.
    run_err(&red(ArgMax, Some(&[0, 1]), false), &[&a]);
}

#[test]
fn nan_is_the_extreme_and_the_first_nan_wins() {
    use ReduceOp::*;
    let x = f64s(&[4], &[1.0, NAN, 5.0, NAN]);
    same(&run(&red(ArgMax, None, false), &[&x]), &i64s(&[], &[1]));
    same(&run(&red(ArgMin, None, false), &[&x]), &i64s(&[], &[1]));
    exact(&run(&red(Max, None, false), &[&x]), &[], &[NAN]);
    exact(&run(&red(Min, None, false), &[&x]), &[], &[NAN]);
    exact(&run(&red(Sum, None, false), &[&x]), &[], &[NAN]);
    // Per row: only the row with a NaN gives NaN.
    let m = f32s(&[2, 2], &[f32::NAN, 1.0, 2.0, 3.0]);
    exact(&run(&red(Max, Some(&[1]), false), &[&m]), &[2], &[NAN, 3.0]);
    same(
        &run(&red(ArgMin, Some(&[1]), false), &[&m]),
        &i64s(&[2], &[0, 0]),
    );
    // NaN is truthy.
    same(
        &run(&red(All, None, false), &[&f64s(&[2], &[NAN, 1.0])]),
        &bools(&[], &[true]),
    );
}

#[test]
fn result_dtypes_follow_numpy() {
    use ReduceOp::*;
    let b = bools(&[2, 3], &[true, false, true, true, true, false]);
    same(
        &run(&red(Sum, Some(&[1]), false), &[&b]),
        &i64s(&[2], &[2, 2]),
    );
    same(&run(&red(Sum, None, false), &[&b]), &i64s(&[], &[4]));
    same(
        &run(&red(Prod, Some(&[0]), false), &[&b]),
        &i64s(&[3], &[1, 0, 0]),
    );
    exact(&run(&red(Mean, None, false), &[&b]), &[], &[4.0 / 6.0]);
    same(
        &run(&red(Max, Some(&[0]), false), &[&b]),
        &bools(&[3], &[true, true, true]),
    );
    same(
        &run(&red(Min, Some(&[0]), false), &[&b]),
        &bools(&[3], &[true, false, false]),
    );
    same(
        &run(&red(All, Some(&[1]), false), &[&b]),
        &bools(&[2], &[false, false]),
    );
    same(
        &run(&red(Any, Some(&[0]), false), &[&b]),
        &bools(&[3], &[true, true, true]),
    );
    // Integer sums keep the dtype and wrap; integer means are f64.
    let i = i32s(&[2, 2], &[i32::MAX, 1, 3, 4]);
    same(
        &run(&red(Sum, Some(&[1]), false), &[&i]),
        &i32s(&[2], &[i32::MIN, 7]),
    );
    same(
        &run(&red(Prod, Some(&[0]), false), &[&i]),
        &i32s(&[2], &[2147483645, 4]),
    );
    exact(
        &run(&red(Mean, Some(&[0]), false), &[&i]),
        &[2],
        &[1073741825.0, 2.5],
    );
    let l = i64s(&[3], &[5, -9, 2]);
    same(&run(&red(Max, None, false), &[&l]), &i64s(&[], &[5]));
    same(&run(&red(Min, None, true), &[&l]), &i64s(&[1], &[-9]));
    exact(&run(&red(Mean, None, false), &[&l]), &[], &[-2.0 / 3.0]);
    same(&run(&red(Any, None, false), &[&l]), &bools(&[], &[true]));
    exact(
        &run(&red(Mean, None, false), &[&f32s(&[3], &[1.0, 2.0, 4.0])]),
        &[],
        &[(7.0f32 / 3.0) as f64],
    );
}

#[test]
fn empty_reductions_give_identities_or_errors() {
    use ReduceOp::*;
    let e = f64s(&[2, 0], &[]);
    exact(&run(&red(Sum, Some(&[1]), false), &[&e]), &[2], &[0.0, 0.0]);
    exact(
        &run(&red(Prod, Some(&[1]), false), &[&e]),
        &[2],
        &[1.0, 1.0],
    );
    exact(
        &run(&red(Mean, Some(&[1]), false), &[&e]),
        &[2],
        &[NAN, NAN],
    );
    same(
        &run(&red(All, Some(&[1]), false), &[&e]),
        &bools(&[2], &[true, true]),
    );
    same(
        &run(&red(Any, Some(&[1]), false), &[&e]),
        &bools(&[2], &[false, false]),
    );
    exact(&run(&red(Sum, None, true), &[&e]), &[1, 1], &[0.0]);
    same(
        &run(&red(Sum, None, false), &[&i32s(&[0], &[])]),
        &i32s(&[], &[0]),
    );
    same(
        &run(&red(Prod, None, false), &[&bools(&[0], &[])]),
        &i64s(&[], &[1]),
    );
    for op in [Max, Min, ArgMax, ArgMin] {
        let msg = run_err(&red(op, Some(&[1]), false), &[&e]);
        assert!(msg.contains("empty"), "{msg}");
        run_err(&red(op, None, false), &[&e]);
    }
    // Reducing the non-empty axis of an empty array leaves an empty result, no error.
    exact(&run(&red(Max, Some(&[0]), false), &[&e]), &[0], &[]);
    same(
        &run(&red(ArgMax, Some(&[0]), true), &[&e]),
        &i64s(&[1, 0], &[]),
    );
}

#[test]
fn bad_axes_are_errors_at_run_time() {
    let a = sample();
    run_err(&red(ReduceOp::Sum, Some(&[3]), false), &[&a]);
    run_err(&red(ReduceOp::Sum, Some(&[1, 1]), false), &[&a]);
}

#[test]
fn a_long_f32_sum_has_the_error_of_a_pairwise_sum() {
    // 10^7 copies of 0.1f32: a naive f32 loop drifts to about 1.0879e6 (9% off); numpy's
    // pairwise sum gives 1000000.125.
    let n = 10_000_000;
    let x = Tensor::F32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[n]), 0.1f32));
    let s = run(&red(ReduceOp::Sum, None, false), &[&x]).to_f64_vec()[0];
    let exact_sum = 0.1f32 as f64 * n as f64;
    assert!(((s - exact_sum) / exact_sum).abs() < 1e-6, "{s}");
    // The same along an axis that is not the last: each row of reduced elements is gathered.
    let y = Tensor::F32(ndarray::ArrayD::from_elem(
        ndarray::IxDyn(&[1 << 21, 2]),
        0.1f32,
    ));
    let s = run(&red(ReduceOp::Sum, Some(&[0]), false), &[&y]).to_f64_vec();
    let exact_sum = 0.1f32 as f64 * (1 << 21) as f64;
    for v in s {
        assert!(((v - exact_sum) / exact_sum).abs() < 1e-6, "{v}");
    }
    // The mean too.
    let m = run(&red(ReduceOp::Mean, None, false), &[&x]).to_f64_vec()[0];
    assert!((m - 0.1f32 as f64).abs() < 1e-7, "{m}");
}

#[test]
fn sums_start_from_positive_zero_and_sum_small_runs_exactly() {
    // numpy: np.sum([-0.0]) is 0.0 (the identity +0.0 plus the elements); prod keeps -0.0.
    for n in [1, 8, 200] {
        let z = f64s(&[n], &vec![-0.0; n]);
        exact(&run(&red(ReduceOp::Sum, None, false), &[&z]), &[], &[0.0]);
        exact(&run(&red(ReduceOp::Mean, None, false), &[&z]), &[], &[0.0]);
    }
    exact(
        &run(&red(ReduceOp::Prod, None, false), &[&f64s(&[1], &[-0.0])]),
        &[],
        &[-0.0],
    );
    let v: Vec<f64> = (1..=300).map(|i| i as f64).collect();
    exact(
        &run(&red(ReduceOp::Sum, None, false), &[&f64s(&[300], &v)]),
        &[],
        &[45150.0],
    );
}

/// Which zero a max of zeros of both signs gives is the generated kernels' order (8 partials
/// combined as a tree, then the last `len % 8`): the CPU backend and the interpreter give the
/// same bits on a broadcast column (a random program found `-0.0` against `0.0`).
#[test]
fn max_of_signed_zeros_has_the_cpu_backends_bits() {
    let src = "func @f(%x: f32[3, 1]) -> (f32[]) {\n  %b = broadcast_to %x {shape = [3, 3]}\n  %m = max %b\n  return %m\n}";
    let func = kiln::ir::text::parse("f.kir", src).unwrap().remove(0);
    for (col, want) in [([-1.0f32, -0.0, 0.0], -0.0f32), ([-1.0, 0.0, -0.0], 0.0)] {
        let x: Tensor = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[3, 1]), col.to_vec())
            .unwrap()
            .into();
        for backend in [kiln::Backend::Interp, kiln::Backend::Cpu] {
            let options = kiln::CompileOptions {
                backend: Some(backend),
                ..Default::default()
            };
            let f = kiln::compile_func(func.clone(), &options).unwrap();
            let got = f.call(&[x.view()]).unwrap()[0].to_f64_vec()[0] as f32;
            assert_eq!(got.to_bits(), want.to_bits(), "{backend:?} on {col:?}");
        }
    }
}

/// A float product is taken in the kernels' order too: element `n` into partial `n % 8`, the
/// partials as a tree, then the tail. Where an overflow meets a zero the order decides between
/// `0.0` and NaN (a random program found the CPU backend's NaN against a sequential fold's
/// `0.0`), and it decides the rounding of long products: both backends give the same bits.
#[test]
fn prod_has_the_cpu_backends_bits() {
    let src = "func @f(%x: f32[?]) -> (f32[]) {\n  %p = prod %x\n  return %p\n}";
    let func = kiln::ir::text::parse("f.kir", src).unwrap().remove(0);
    // Partial 0 is 0 * 1 = 0, partial 1 is 1e30 * 1e30 = inf: their product is NaN, while a
    // fold from the first element stays 0.
    let mut overflow = vec![1.0f32; 16];
    overflow[0] = 0.0;
    overflow[1] = 1e30;
    overflow[9] = 1e30;
    let mut s = 7u64;
    let mut long = || -> f32 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        0.9 + (s >> 40) as f32 / (1u64 << 24) as f32 * 0.2
    };
    let rounding: Vec<f32> = (0..203).map(|_| long()).collect();
    for (what, xs, nan) in [("overflow", overflow, true), ("rounding", rounding, false)] {
        let x: Tensor = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[xs.len()]), xs)
            .unwrap()
            .into();
        let got: Vec<u32> = [kiln::Backend::Interp, kiln::Backend::Cpu]
            .into_iter()
            .map(|backend| {
                let options = kiln::CompileOptions {
                    backend: Some(backend),
                    ..Default::default()
                };
                let f = kiln::compile_func(func.clone(), &options).unwrap();
                (f.call(&[x.view()]).unwrap()[0].to_f64_vec()[0] as f32).to_bits()
            })
            .collect();
        assert_eq!(
            got[0], got[1],
            "{what}: interpreter against the CPU backend"
        );
        assert_eq!(f32::from_bits(got[0]).is_nan(), nan, "{what}");
    }
}
