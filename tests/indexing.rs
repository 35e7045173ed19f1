//! Indexing by tensors: `take`, `scatter_add` and `one_hot` against values worked out by hand
//! from numpy's definitions (`np.take`, `np.add.at`, JAX's `one_hot`), on every backend that
//! runs them; their errors; their gradients against finite differences; their text form.

mod common;
use common::{backends_with_gpu_host, call_both_ways};
use kiln::{function, scatter_add, verify_grad, Graph, Tensor, VerifyOptions};
use ndarray::{ArrayD, IxDyn};

fn arr<T: Clone>(shape: &[usize], v: &[T]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap()
}

#[test]
fn take_gathers_along_any_axis_with_negative_indices() {
    // x[2, 3]: take along axis 1 with indices [[2, 0], [-1, 1]] gives shape [2, 2, 2]:
    // out[i, a, b] = x[i, idx[a, b]] (np.take(x, idx, axis=1)).
    let x = arr(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let idx = arr(&[2, 2], &[2i64, 0, -1, 1]);
    let want = arr(&[2, 2, 2], &[3.0f32, 1.0, 3.0, 2.0, 6.0, 4.0, 6.0, 5.0]);
    // Along axis 0 with i32 indices: rows, repeated.
    let idx0 = arr(&[3], &[1i32, 1, 0]);
    let want0 = arr(&[3, 3], &[4.0f32, 5.0, 6.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0]);
    for backend in backends_with_gpu_host() {
        let got = call_both_ways(
            backend,
            &|g| {
                let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
                let i = g.input("i", kiln::i64, [Some(2), Some(2)]);
                let j = g.input("j", kiln::i32, [None]);
                let y = x.take(&i, -1);
                let z = x.take(&j, 0);
                (vec![x, i, j], vec![y, z])
            },
            &[x.clone().into(), idx.clone().into(), idx0.clone().into()],
        );
        for r in got {
            let r = r.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            assert!(r[0].bit_eq(&want.clone().into()), "{backend:?}: {:?}", r[0]);
            assert!(
                r[1].bit_eq(&want0.clone().into()),
                "{backend:?}: {:?}",
                r[1]
            );
        }
    }
}

#[test]
fn scatter_add_accumulates_repeated_positions_in_index_order() {
    // np.add.at(x, (slice(None), idx), u) on a copy of x[2, 3] along axis 1, idx = [0, 2, 0].
    let x = arr(&[2, 3], &[1i64, 1, 1, 2, 2, 2]);
    let idx = arr(&[3], &[0i64, 2, -3]);
    let u = arr(&[2, 3], &[10i64, 20, 30, 40, 50, 60]);
    let want = arr(&[2, 3], &[41i64, 1, 21, 102, 2, 52]);
    for backend in backends_with_gpu_host() {
        let got = call_both_ways(
            backend,
            &|g| {
                let x = g.input("x", kiln::i64, [Some(2), Some(3)]);
                let i = g.input("i", kiln::i64, [Some(3)]);
                let u = g.input("u", kiln::i64, [Some(2), Some(3)]);
                let y = scatter_add(&x, &i, &u, 1);
                (vec![x, i, u], vec![y])
            },
            &[x.clone().into(), idx.clone().into(), u.clone().into()],
        );
        for r in got {
            let r = r.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            assert!(r[0].bit_eq(&want.clone().into()), "{backend:?}: {:?}", r[0]);
        }
    }
}

#[test]
fn one_hot_gives_zero_rows_outside_the_depth() {
    let idx = arr(&[2, 2], &[0i32, 2, -1, 3]);
    let want = arr(
        &[2, 2, 3],
        &[
            1.0f64, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
    );
    for backend in backends_with_gpu_host() {
        let got = call_both_ways(
            backend,
            &|g| {
                let i = g.input("i", kiln::i32, [Some(2), None]);
                (vec![i.clone()], vec![i.one_hot(3, kiln::f64)])
            },
            &[idx.clone().into()],
        );
        for r in got {
            let r = r.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            assert!(r[0].bit_eq(&want.clone().into()), "{backend:?}: {:?}", r[0]);
        }
    }
}

#[test]
fn out_of_range_indices_and_bad_types_are_errors() {
    for backend in backends_with_gpu_host() {
        let got = call_both_ways(
            backend,
            &|g| {
                let x = g.input("x", kiln::f32, [Some(4)]);
                let i = g.input("i", kiln::i64, [Some(2)]);
                (vec![x.clone(), i.clone()], vec![x.take(&i, 0)])
            },
            &[
                arr(&[4], &[0.0f32; 4]).into(),
                arr(&[2], &[1i64, -5]).into(),
            ],
        );
        for r in got {
            let e = r.expect_err("index -5 of 4").to_string();
            assert!(
                e.contains("index -5 is out of range for axis 0 of size 4"),
                "{backend:?}: {e}"
            );
        }
    }
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(4)]);
    let f = g.input("f", kiln::f32, [Some(2)]);
    let e = function(&[&x, &f], &[&x.take(&f, 0)])
        .compile()
        .err()
        .expect("a type error");
    assert!(e.to_string().contains("indices must be i32 or i64"), "{e}");
    let i = g.input("i", kiln::i64, [Some(2)]);
    let e = function(&[&x, &i], &[&x.take(&i, 1)])
        .compile()
        .err()
        .expect("a type error");
    assert!(e.to_string().contains("take: axis 1"), "{e}");
    let u = g.input("u", kiln::f32, [Some(3)]);
    let e = function(&[&x, &i, &u], &[&scatter_add(&x, &i, &u, 0)])
        .compile()
        .err()
        .expect("a type error");
    assert!(e.to_string().contains("needs f32[2]"), "{e}");
    let b = g.input("b", kiln::bool, [Some(4)]);
    let ub = g.input("ub", kiln::bool, [Some(2)]);
    let e = function(&[&b, &i, &ub], &[&scatter_add(&b, &i, &ub, 0)])
        .compile()
        .err()
        .expect("a type error");
    assert!(e.to_string().contains("adds numbers"), "{e}");
}

#[test]
fn gradients_of_take_and_scatter_add_match_finite_differences() {
    let table = arr(
        &[4, 3],
        &[
            0.3, -0.8, 1.1, 0.5, 2.0, -1.5, 0.7, 0.1, -0.4, 1.3, -0.2, 0.9,
        ],
    );
    let upd = arr(&[4, 2], &[0.2, -0.6, 1.4, 0.8, -1.1, 0.3, 0.05, 0.9]);
    // Repeated and negative indices: the gradient of take adds up at row 1.
    let ids = || Tensor::from(arr(&[2], &[1i64, -3]));
    verify_grad(
        |g, v| {
            let i = g.constant(ids());
            let y = v[0].take(&i, 0);
            (&y * &y).sum(None, false) + y.sin().sum(None, false)
        },
        std::slice::from_ref(&table),
        VerifyOptions::default(),
    )
    .unwrap();
    // scatter_add along axis 1 of x[4, 3] with updates[4, 2]: both differentiable inputs.
    verify_grad(
        |g, v| {
            let i = g.constant(Tensor::from(arr(&[2], &[2i64, 2])));
            let y = scatter_add(&v[0], &i, &v[1], 1);
            (&y * &y * &y).sum(None, false)
        },
        &[table.clone(), upd],
        VerifyOptions::default(),
    )
    .unwrap();
}

#[test]
fn the_text_form_spells_the_attributes_and_parses_back() {
    let src =
        "func @f(%x: f32[5, 3], %i: i32[2], %c: i64[4]) -> (f32[5, 2], f32[5, 3], f32[4, 6]) {
  %y = take %x, %i {axis = -1}
  %z = scatter_add %x, %i, %y {axis = 1}
  %o = one_hot %c {depth = 6}
  return %y, %z, %o
}
";
    let f = kiln::ir::text::parse_one("f.kir", src).unwrap();
    let printed = kiln::ir::text::print_func(&f);
    assert!(printed.contains("take %x, %i {axis = 1}"), "{printed}");
    assert!(
        printed.contains("scatter_add %x, %i, %y {axis = 1}"),
        "{printed}"
    );
    assert!(
        printed.contains("one_hot %c {depth = 6, dtype = f32}"),
        "{printed}"
    );
    let again = kiln::ir::text::parse_one("f.kir", &printed).unwrap();
    assert_eq!(kiln::ir::text::print_func(&again), printed);
    // Ahead of time the two that index have a failure code each (tests/aot_index.rs runs them).
    let art = kiln::aot::compile_func(&f, &kiln::aot::AotOptions::default()).unwrap();
    assert_eq!(art.errors.len(), 2, "{:?}", art.errors);
    assert!(art.errors[0].contains("take") && art.errors[1].contains("scatter_add"));
}

#[test]
fn take_and_scatter_add_read_strided_inputs() {
    // x is given as a transposed view (column-major elements): take must read it logically.
    let xt = arr(&[3, 2], &[1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let x = xt.t(); // [[1, 2, 3], [4, 5, 6]]
    let idx = arr(&[2], &[2i64, 0]);
    let u = arr(&[2, 2], &[10.0f64, 20.0, 30.0, 40.0]);
    let ut = u.t(); // [[10, 30], [20, 40]]
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let xv = g.input("x", kiln::f64, [Some(2), Some(3)]);
        let iv = g.input("i", kiln::i64, [Some(2)]);
        let uv = g.input("u", kiln::f64, [Some(2), Some(2)]);
        let f = function(
            &[&xv, &iv, &uv],
            &[&xv.take(&iv, 1), &scatter_add(&xv, &iv, &uv, 1)],
        )
        .backend(backend)
        .compile()
        .unwrap();
        let out = f
            .call(&[x.view().into(), idx.view().into(), ut.view().into()] as &[kiln::TensorRef])
            .unwrap();
        let want_take = arr(&[2, 2], &[3.0f64, 1.0, 6.0, 4.0]);
        let want_add = arr(&[2, 3], &[31.0f64, 2.0, 13.0, 44.0, 5.0, 26.0]);
        assert!(
            out[0].bit_eq(&want_take.into()),
            "{backend:?}: {:?}",
            out[0]
        );
        assert!(out[1].bit_eq(&want_add.into()), "{backend:?}: {:?}", out[1]);
    }
}

#[test]
fn cumsum_runs_in_order_in_the_dtype_of_sum() {
    // Along axis 0 of a [3, 2] array, and along the last axis; bool counts as i64; i32 wraps.
    let x = arr(&[3, 2], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = arr(&[4], &[true, false, true, true]);
    let w = arr(&[2], &[i32::MAX, 1]);
    for backend in backends_with_gpu_host() {
        let got = call_both_ways(
            backend,
            &|g| {
                let x = g.input("x", kiln::f32, [Some(3), Some(2)]);
                let b = g.input("b", kiln::bool, [None]);
                let w = g.input("w", kiln::i32, [Some(2)]);
                let outs = vec![x.cumsum(0), x.cumsum(-1), b.cumsum(0), w.cumsum(0)];
                (vec![x, b, w], outs)
            },
            &[x.clone().into(), b.clone().into(), w.clone().into()],
        );
        for r in got {
            let r = r.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            let want: [Tensor; 4] = [
                arr(&[3, 2], &[1.0f32, 2.0, 4.0, 6.0, 9.0, 12.0]).into(),
                arr(&[3, 2], &[1.0f32, 3.0, 3.0, 7.0, 5.0, 11.0]).into(),
                arr(&[4], &[1i64, 1, 2, 3]).into(),
                arr(&[2], &[i32::MAX, i32::MIN]).into(),
            ];
            for (k, w) in want.iter().enumerate() {
                assert!(r[k].bit_eq(w), "{backend:?} output {k}: {:?}", r[k]);
            }
        }
    }
    // Its gradient sums the output gradient from the end.
    verify_grad(
        |_, v| {
            let y = v[0].cumsum(1);
            (&y * &y).sum(None, false) + y.sin().sum(None, false)
        },
        &[arr(&[2, 4], &[0.3, -0.8, 1.1, 0.5, 2.0, -1.5, 0.7, 0.1])],
        VerifyOptions::default(),
    )
    .unwrap();
}
