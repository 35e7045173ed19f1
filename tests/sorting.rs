//! `take_along_axis`, `scatter_set`, `cumprod`, `sort`, `argsort` and `topk` against numpy's
//! definitions, on every backend that runs them: values worked out by hand, random arrays
//! checked against the defining properties (a sort is an ordered permutation, stable), their
//! errors, their gradients against finite differences (cumprod's at zeros), their text form.

mod common;
use common::{backends_with_gpu_host, call_both_ways, Build, Rng};
use kiln::{function, scatter_set, verify_grad, Backend, Graph, Tensor, VerifyOptions};
use ndarray::{ArrayD, IxDyn};

fn arr<T: Clone>(shape: &[usize], v: &[T]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap()
}

/// `call_both_ways`, every call expected to succeed.
fn run(backend: Backend, build: &Build, inputs: &[Tensor]) -> Vec<Vec<Tensor>> {
    call_both_ways(backend, build, inputs)
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{backend:?}: {e}")))
        .collect()
}

/// Runs on every backend and checks each result against `want`, bit for bit.
fn check_all(build: &Build, inputs: &[Tensor], want: &[Tensor]) {
    for backend in backends_with_gpu_host() {
        for got in run(backend, build, inputs) {
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(g.bit_eq(w), "{backend:?} output {k}: {g:?}, want {w:?}");
            }
        }
    }
}

#[test]
fn take_along_axis_reorders_each_lane_and_broadcasts_the_other_dims() {
    // np.take_along_axis(x, idx, axis=1) with x[2, 3], idx[2, 2]: out[i, j] = x[i, idx[i, j]].
    let x = arr(&[2, 3], &[10.0f32, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let idx = arr(&[2, 2], &[2i64, -3, 1, 1]);
    let want = arr(&[2, 2], &[30.0f32, 10.0, 50.0, 50.0]);
    // idx[1, 2] along axis 0 broadcasts over x's second axis... the indices' dim 1 must match
    // x's (2 vs 3 would not broadcast); idx0[1, 1] broadcasts against x's 3 columns.
    let idx0 = arr(&[1, 1], &[1i32]);
    let want0 = arr(&[1, 3], &[40.0f32, 50.0, 60.0]);
    check_all(
        &|g| {
            let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
            let i = g.input("i", kiln::i64, [Some(2), Some(2)]);
            let j = g.input("j", kiln::i32, [Some(1), Some(1)]);
            let y = x.take_along_axis(&i, -1);
            let z = x.take_along_axis(&j, 0);
            (vec![x, i, j], vec![y, z])
        },
        &[x.into(), idx.into(), idx0.into()],
        &[want.into(), want0.into()],
    );
}

#[test]
fn scatter_set_writes_in_index_order_and_the_last_write_stays() {
    // x[2, 3]; x[:, [0, 2, -3]] = u on a copy: position 0 is written twice, the second wins.
    let x = arr(&[2, 3], &[1i32, 1, 1, 2, 2, 2]);
    let idx = arr(&[3], &[0i64, 2, -3]);
    let u = arr(&[2, 3], &[7i32, 8, 9, 4, 5, 6]);
    let want = arr(&[2, 3], &[9i32, 1, 8, 6, 2, 5]);
    let b = arr(&[3], &[false, false, true]);
    let bi = arr(&[1], &[0i32]);
    let bu = arr(&[1], &[true]);
    let bwant = arr(&[3], &[true, false, true]);
    check_all(
        &|g| {
            let x = g.input("x", kiln::i32, [Some(2), Some(3)]);
            let i = g.input("i", kiln::i64, [Some(3)]);
            let u = g.input("u", kiln::i32, [Some(2), Some(3)]);
            let b = g.input("b", kiln::bool, [Some(3)]);
            let bi = g.input("bi", kiln::i32, [Some(1)]);
            let bu = g.input("bu", kiln::bool, [Some(1)]);
            let y = scatter_set(&x, &i, &u, 1);
            let z = scatter_set(&b, &bi, &bu, 0);
            (vec![x, i, u, b, bi, bu], vec![y, z])
        },
        &[
            x.into(),
            idx.into(),
            u.into(),
            b.into(),
            bi.into(),
            bu.into(),
        ],
        &[want.into(), bwant.into()],
    );
}

#[test]
fn cumprod_multiplies_in_order_in_the_dtype_of_prod() {
    let x = arr(&[2, 3], &[1.5f64, 2.0, -1.0, 0.5, 0.0, 4.0]);
    let want1 = arr(&[2, 3], &[1.5f64, 3.0, -3.0, 0.5, 0.0, 0.0]);
    let want0 = arr(&[2, 3], &[1.5f64, 2.0, -1.0, 0.75, 0.0, -4.0]);
    let b = arr(&[3], &[true, true, false]);
    let bwant = arr(&[3], &[1i64, 1, 0]);
    let i = arr(&[3], &[i32::MAX, 2, 3]);
    // Integers wrap, as numpy's do: MAX * 2 = -2 in i32, then * 3 = -6.
    let iwant = arr(&[3], &[i32::MAX, -2, -6]);
    check_all(
        &|g| {
            let x = g.input("x", kiln::f64, [Some(2), Some(3)]);
            let b = g.input("b", kiln::bool, [Some(3)]);
            let i = g.input("i", kiln::i32, [Some(3)]);
            (
                vec![x.clone(), b.clone(), i.clone()],
                vec![x.cumprod(-1), x.cumprod(0), b.cumprod(0), i.cumprod(0)],
            )
        },
        &[x.into(), b.into(), i.into()],
        &[want1.into(), want0.into(), bwant.into(), iwant.into()],
    );
}

#[test]
fn sort_and_argsort_are_stable_with_nan_last_and_descending_keeps_index_order() {
    let nan = f32::NAN;
    let x = arr(&[2, 4], &[3.0f32, nan, -1.0, 3.0, 0.0, -0.0, 2.0, 1.0]);
    let sorted = arr(&[2, 4], &[-1.0f32, 3.0, 3.0, nan, 0.0, -0.0, 1.0, 2.0]);
    let order = arr(&[2, 4], &[2i64, 0, 3, 1, 0, 1, 3, 2]);
    let desc = arr(&[2, 4], &[nan, 3.0f32, 3.0, -1.0, 2.0, 1.0, 0.0, -0.0]);
    let dorder = arr(&[2, 4], &[1i64, 0, 3, 2, 2, 3, 0, 1]);
    // Along axis 0 of integers.
    let k = arr(&[3, 2], &[5i64, 1, 5, 0, 2, 1]);
    let kord = arr(&[3, 2], &[2i64, 1, 0, 0, 1, 2]);
    check_all(
        &|g| {
            let x = g.input("x", kiln::f32, [Some(2), Some(4)]);
            let k = g.input("k", kiln::i64, [Some(3), Some(2)]);
            (
                vec![x.clone(), k.clone()],
                vec![
                    x.sort(-1),
                    x.argsort(1),
                    x.sort_descending(1),
                    x.argsort_descending(-1),
                    k.argsort(0),
                ],
            )
        },
        &[x.into(), k.into()],
        &[
            sorted.into(),
            order.into(),
            desc.into(),
            dorder.into(),
            kord.into(),
        ],
    );
}

#[test]
fn topk_gives_the_largest_first_and_their_positions() {
    let x = arr(
        &[2, 5],
        &[1.0f32, 9.0, 3.0, 9.0, -2.0, 0.5, 0.25, 4.0, 8.0, 8.0],
    );
    let vals = arr(&[2, 3], &[9.0f32, 9.0, 3.0, 8.0, 8.0, 4.0]);
    let pos = arr(&[2, 3], &[1i64, 3, 2, 3, 4, 2]);
    check_all(
        &|g| {
            let x = g.input("x", kiln::f32, [Some(2), Some(5)]);
            let (v, i) = x.topk(3);
            (vec![x], vec![v, i])
        },
        &[x.into()],
        &[vals.into(), pos.into()],
    );
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(5)]);
    let (v, _) = x.topk(6);
    let e = v.check().unwrap_err().to_string();
    assert!(e.contains("topk: k = 6"), "{e}");
}

#[test]
fn random_sorts_are_ordered_stable_permutations_on_every_rank() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for case in 0..40 {
        let rank = 1 + case % 4;
        let shape: Vec<usize> = (0..rank).map(|_| rng.below(4)).collect();
        let axis = rng.below(rank);
        let n: usize = shape.iter().product();
        // Few distinct values, so ties are common; some NaN.
        let vals: Vec<f64> = (0..n)
            .map(|_| match rng.below(7) {
                0 => f64::NAN,
                v => v as f64 - 3.0,
            })
            .collect();
        let x = arr(&shape, &vals);
        let descending = case % 2 == 1;
        for backend in backends_with_gpu_host() {
            let got = run(
                backend,
                &|g| {
                    let xv = g.input("x", kiln::f64, vec![None; rank]);
                    let (s, o) = if descending {
                        (
                            xv.sort_descending(axis as i64),
                            xv.argsort_descending(axis as i64),
                        )
                    } else {
                        (xv.sort(axis as i64), xv.argsort(axis as i64))
                    };
                    (vec![xv], vec![s, o])
                },
                &[x.clone().into()],
            );
            for r in got {
                let s = r[0].as_f64().unwrap();
                let o = r[1].as_i64().unwrap();
                check_sorted(&x, s, o, axis, descending);
            }
        }
    }
}

/// `s` holds each lane of `x` along `axis` in order and `o` the positions it came from: a
/// permutation, non-decreasing (non-increasing when descending) with NaN greatest, equal
/// values in increasing position.
fn check_sorted(x: &ArrayD<f64>, s: &ArrayD<f64>, o: &ArrayD<i64>, axis: usize, desc: bool) {
    let ax = ndarray::Axis(axis);
    let key = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
    for ((xl, sl), ol) in x.lanes(ax).into_iter().zip(s.lanes(ax)).zip(o.lanes(ax)) {
        let n = xl.len();
        let mut seen = vec![false; n];
        for k in 0..n {
            let p = ol[k] as usize;
            assert!(!seen[p], "{ol:?} repeats {p}");
            seen[p] = true;
            assert!(
                xl[p].to_bits() == sl[k].to_bits(),
                "sorted {sl:?} is not the input {xl:?} at {ol:?}"
            );
            if k > 0 {
                let (a, b) = (key(sl[k - 1]), key(sl[k]));
                let ordered = if desc { a >= b } else { a <= b };
                assert!(ordered, "{sl:?} is out of order");
                if a == b {
                    assert!(ol[k - 1] < ol[k], "{ol:?} is not stable for {xl:?}");
                }
            }
        }
    }
}

#[test]
fn errors_name_the_problem() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
    let i1 = g.input("i", kiln::i64, [Some(3)]);
    let e = x.take_along_axis(&i1, 1).check().unwrap_err().to_string();
    assert!(e.contains("must have the rank"), "{e}");
    let f = g.input("f", kiln::f32, [Some(2), Some(2)]);
    let e = x.take_along_axis(&f, 1).check().unwrap_err().to_string();
    assert!(e.contains("must be i32 or i64"), "{e}");
    let u = g.input("u", kiln::f32, [Some(2), Some(2)]);
    let e = scatter_set(&x, &i1, &u, 1).check().unwrap_err().to_string();
    assert!(e.contains("scatter_set: the updates have type"), "{e}");
    assert!(x.sort(2).check().is_err());
    // An index out of range is an error when the function runs, on every backend.
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
        let i = g.input("i", kiln::i64, [Some(2), Some(1)]);
        let f = function(&[&x, &i], &[&x.take_along_axis(&i, 1)])
            .backend(backend)
            .compile()
            .unwrap();
        let xs = Tensor::from(arr(&[2, 3], &[0.0f32; 6]));
        let is = Tensor::from(arr(&[2, 1], &[0i64, 3]));
        let e = f.call(&[&xs, &is]).unwrap_err().to_string();
        assert!(
            e.contains("index 3 is out of range for axis 1 of size 3"),
            "{backend:?}: {e}"
        );
    }
}

#[test]
fn gradients_match_finite_differences() {
    // cumprod with zeros, one of them repeated: the gradient must not divide by them.
    let x = arr(&[2, 4], &[0.5, 0.0, 1.5, -2.0, 0.0, 0.0, 0.7, 1.2]);
    verify_grad(
        |_, v| {
            let y = v[0].cumprod(1);
            (&y * &y).sum(None, false) + y.sin().sum(None, false)
        },
        std::slice::from_ref(&x),
        VerifyOptions::default(),
    )
    .unwrap();
    let x = arr(&[3, 2], &[0.5, 0.9, 0.0, 1.5, -2.0, 0.3]);
    verify_grad(
        |_, v| (&v[0].cumprod(0) * &v[0]).sum(None, false),
        std::slice::from_ref(&x),
        VerifyOptions::default(),
    )
    .unwrap();
    // sort, descending too, and topk (distinct values: the sort is differentiable there).
    let x = arr(&[2, 4], &[0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 0.05, -2.2]);
    verify_grad(
        |g, v| {
            let w = g.constant(Tensor::from(arr(&[4], &[1.0, -2.0, 3.0, 0.5])));
            let a = &v[0].sort(1) * &w;
            let b = &v[0].sort_descending(0) * &v[0].sort_descending(0);
            let (t, _) = v[0].topk(2);
            a.sum(None, false) + b.sum(None, false) + t.exp().sum(None, false)
        },
        std::slice::from_ref(&x),
        VerifyOptions::default(),
    )
    .unwrap();
    // take_along_axis with a repeated and a negative position (they add up) and broadcasting.
    verify_grad(
        |g, v| {
            let i = g.constant(Tensor::from(arr(&[1, 3], &[1i64, -3, 3])));
            let y = v[0].take_along_axis(&i, 1);
            (&y * &y * &y).sum(None, false)
        },
        std::slice::from_ref(&x),
        VerifyOptions::default(),
    )
    .unwrap();
    // scatter_set: position 1 written twice (the first write gets no gradient).
    let upd = arr(&[2, 3], &[0.2, -0.6, 1.4, 0.8, -1.1, 0.3]);
    verify_grad(
        |g, v| {
            let i = g.constant(Tensor::from(arr(&[3], &[1i64, 3, -3])));
            let y = scatter_set(&v[0], &i, &v[1], 1);
            (&y * &y * &y).sum(None, false)
        },
        &[x.clone(), upd],
        VerifyOptions::default(),
    )
    .unwrap();
}

#[test]
fn the_text_form_spells_the_attributes_and_parses_back() {
    let src = "func @f(%x: f32[5, 3], %i: i64[5, 2], %j: i32[2], %u: f32[5, 2]) -> (f32[5, 2], f32[5, 3], f32[5, 3], i64[5, 3], f32[5, 3], f32[5, 3]) {
  %a = take_along_axis %x, %i {axis = -1}
  %b = scatter_set %x, %j, %u {axis = 1}
  %c = cumprod %x {axis = 0}
  %d = argsort %x {axis = 1, descending = true}
  %e = sort %x {axis = 0}
  %g = cumprod_grad %x, %c {axis = 0}
  return %a, %b, %c, %d, %e, %g
}
";
    let f = kiln::ir::text::parse_one("f.kir", src).unwrap();
    let printed = kiln::ir::text::print_func(&f);
    for want in [
        "take_along_axis %x, %i {axis = 1}",
        "scatter_set %x, %j, %u {axis = 1}",
        "cumprod %x {axis = 0}",
        "argsort %x {axis = 1, descending = true}",
        "sort %x {axis = 0}",
    ] {
        assert!(printed.contains(want), "{want}: {printed}");
    }
    let again = kiln::ir::text::parse_one("f.kir", &printed).unwrap();
    assert_eq!(kiln::ir::text::print_func(&again), printed);
    // Ahead of time they compile (tests/aot_index.rs runs them); only the gather and the
    // scatter can fail.
    let art = kiln::aot::compile_func(&f, &kiln::aot::AotOptions::default()).unwrap();
    assert_eq!(art.errors.len(), 2, "{:?}", art.errors);
}

#[test]
fn ops_read_strided_inputs_in_logical_order() {
    // x is a transposed view: sort and take_along_axis must read it by logical index.
    let xt = arr(&[3, 2], &[3.0f64, 1.0, 1.0, 2.0, 2.0, 0.5]);
    let x = xt.t(); // [[3, 1, 2], [1, 2, 0.5]]
    let idx = arr(&[2, 1], &[2i64, 0]);
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let xv = g.input("x", kiln::f64, [Some(2), Some(3)]);
        let iv = g.input("i", kiln::i64, [Some(2), Some(1)]);
        let f = function(
            &[&xv, &iv],
            &[&xv.sort(1), &xv.take_along_axis(&iv, 1), &xv.cumprod(1)],
        )
        .backend(backend)
        .compile()
        .unwrap();
        let out = f
            .call(&[x.view().into(), idx.view().into()] as &[kiln::TensorRef])
            .unwrap();
        let want = [
            arr(&[2, 3], &[1.0f64, 2.0, 3.0, 0.5, 1.0, 2.0]),
            arr(&[2, 1], &[2.0f64, 1.0]),
            arr(&[2, 3], &[3.0f64, 3.0, 6.0, 1.0, 2.0, 1.0]),
        ];
        for (o, w) in out.iter().zip(want) {
            assert!(o.bit_eq(&w.into()), "{backend:?}: {o:?}");
        }
    }
}

/// `cumprod`'s gradient on every backend (the GPU backend's lane kernel on the host device
/// included) has the interpreter's bits: zeros in the input, full-mantissa output gradients,
/// every axis of ranks 1 to 3, inputs read through a transpose.
#[test]
fn cumprod_gradients_have_the_interpreters_bits_on_every_backend() {
    let mut rng = Rng(0x5eed_c0de_0000_0007);
    let unit = |rng: &mut Rng| (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    for case in 0..12 {
        let rank = 1 + case % 3;
        let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(5)).collect();
        let axis = rng.below(rank);
        let n: usize = shape.iter().product();
        let xv: Vec<f64> = (0..n)
            .map(|_| match rng.below(6) {
                0 => 0.0,
                _ => 0.5 + unit(&mut rng),
            })
            .collect();
        let rv: Vec<f64> = (0..n).map(|_| unit(&mut rng) * 2.0 - 1.0).collect();
        let x = ArrayD::from_shape_vec(IxDyn(&shape), xv).unwrap();
        let r = Tensor::from(ArrayD::from_shape_vec(IxDyn(&shape), rv).unwrap());
        // The input stored transposed (all axes reversed): the op reads it through strides.
        let xt_in = Tensor::from(x.reversed_axes().as_standard_layout().to_owned());
        let mut want: Option<Tensor> = None;
        for backend in [Backend::Interp]
            .into_iter()
            .chain(backends_with_gpu_host())
        {
            let g = Graph::new();
            let dims: Vec<Option<i64>> = shape.iter().rev().map(|&d| Some(d as i64)).collect();
            let xs = g.input("x", kiln::f64, dims);
            let rs = g.input(
                "r",
                kiln::f64,
                shape.iter().map(|&d| Some(d as i64)).collect::<Vec<_>>(),
            );
            let perm: Vec<i64> = (0..rank as i64).rev().collect();
            let xt = xs.transpose(&perm);
            let loss = (&xt.cumprod(axis as i64) * &rs).sum(None, false);
            let dx = kiln::grad(&loss, &[&xt]).unwrap().remove(0);
            let f = function(&[&xs, &rs], &[&dx])
                .backend(backend)
                .compile()
                .unwrap();
            let out = f.call(&[&xt_in, &r]).unwrap().remove(0);
            match &want {
                None => want = Some(out),
                Some(w) => assert!(out.bit_eq(w), "case {case} {backend:?}: {out:?} want {w:?}"),
            }
        }
    }
}

/// `sort` and `argsort`, ascending and descending, on every backend (the GPU backend's merge
/// sort kernel on the host device included) have the interpreter's bits: every dtype, ranks 1
/// to 5 with the axis anywhere, ties, NaN, infinities and both zeros, lanes of odd lengths up
/// to 70, inputs read through a transpose.
#[test]
fn sorts_have_the_interpreters_bits_on_every_backend() {
    let mut rng = Rng(0x5eed_c0de_0000_0008);
    let special = common::SORT_SPECIALS;
    for case in 0..35 {
        let dtype = kiln::DType::ALL[case % 7];
        // Ranks 1 to 5, the sorted axis anywhere, long lanes now and then.
        let rank = 1 + case % 5;
        let axis = rng.below(rank);
        let mut shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(3)).collect();
        shape[axis] = [1, 3, 17, 70][rng.below(4)];
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| match rng.below(4) {
                0 if dtype.is_float() => special[rng.below(special.len())],
                _ => rng.below(7) as f64 - 3.0,
            })
            .collect();
        let x = ArrayD::from_shape_vec(IxDyn(&shape), v).unwrap();
        // Stored with its axes reversed: the sort reads its lanes through strides.
        let xt = x.reversed_axes().as_standard_layout().to_owned();
        let input = match dtype {
            kiln::DType::Bool => Tensor::Bool(xt.mapv(|v| v != 0.0)),
            kiln::DType::I32 => Tensor::from(xt.mapv(|v| v as i32)),
            kiln::DType::I64 => Tensor::from(xt.mapv(|v| v as i64)),
            kiln::DType::F32 => Tensor::from(xt.mapv(|v| v as f32)),
            kiln::DType::F16 => Tensor::F16(xt.mapv(kiln::half::f16::from_f64)),
            kiln::DType::BF16 => Tensor::BF16(xt.mapv(kiln::half::bf16::from_f64)),
            _ => Tensor::from(xt),
        };
        let descending = case % 2 == 1;
        let ax = axis as i64;
        let mut want: Option<Vec<Tensor>> = None;
        for backend in [Backend::Interp]
            .into_iter()
            .chain(backends_with_gpu_host())
        {
            let g = Graph::new();
            let stored: Vec<Option<i64>> = shape.iter().rev().map(|&d| Some(d as i64)).collect();
            let xs = g.input("x", dtype, stored);
            let x = xs.transpose(&(0..rank as i64).rev().collect::<Vec<_>>());
            let outs = if descending {
                vec![
                    x.sort_descending(ax),
                    x.argsort_descending(ax),
                    x.argsort(0),
                ]
            } else {
                vec![x.sort(ax), x.argsort(ax), x.sort(0)]
            };
            let refs: Vec<&kiln::Var> = outs.iter().collect();
            let f = function(&[&xs], &refs).backend(backend).compile().unwrap();
            let out = f.call(&[&input]).unwrap();
            match &want {
                None => want = Some(out),
                Some(w) => {
                    for (k, (o, w)) in out.iter().zip(w).enumerate() {
                        assert!(
                            common::same_bits(o, w),
                            "case {case} {dtype} {backend:?} output {k}: {o:?} want {w:?}"
                        );
                    }
                }
            }
        }
    }
}
