//! The in-place pass end to end: updates of shared variables overwrite them where they are,
//! and adversarial graphs (inputs returned as outputs, values with several readers, views of
//! views, branches of `ifelse`, failing calls) give the values they give without it.

use kiln::graph::VarKind;
use kiln::{function, CompileOptions, Function, Graph, Tensor, TensorRef, Var};
use ndarray::{ArrayD, IxDyn};

/// The address of a shared variable's elements.
fn buffer_of(v: &Var) -> usize {
    let VarKind::Shared(cell) = v.kind() else {
        panic!("not a shared variable")
    };
    let t = cell.read().unwrap();
    t.view().as_ptr() as usize
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.as_f32().unwrap().iter().copied().collect()
}

/// Equal within a few ulps (kiln's exp is not libm's).
fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= 4.0 * f32::EPSILON * y.abs().max(1e-30),
            "{x} vs {y}"
        );
    }
}

fn options(inplace: bool) -> CompileOptions {
    CompileOptions {
        inplace,
        ..CompileOptions::default()
    }
}

fn mat(rows: usize, cols: usize, seed: u64) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |i| {
        kiln::random::normal_f32(seed, (i[0] * cols + i[1]) as u64) / (rows as f32).sqrt()
    })
}

/// A one-hidden-layer MLP training step with SGD updates of its four parameters.
struct Step {
    params: Vec<Var>,
    f: Function,
}

fn mlp_step(inplace: bool) -> Step {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(6)]);
    let t = g.input("t", kiln::f32, [None, Some(3)]);
    let w1 = g.shared("w1", mat(6, 5, 1));
    let b1 = g.shared("b1", ArrayD::<f32>::zeros(IxDyn(&[5])));
    let w2 = g.shared("w2", mat(5, 3, 2));
    let b2 = g.shared("b2", ArrayD::<f32>::zeros(IxDyn(&[3])));
    let h = (x.matmul(&w1) + &b1).tanh();
    let y = h.matmul(&w2) + &b2;
    let loss = ((&y - &t) * (&y - &t)).mean(None, false);
    let params = vec![w1, b1, w2, b2];
    let refs: Vec<&Var> = params.iter().collect();
    let grads = kiln::grad(&loss, &refs).unwrap();
    let mut b = function(&[&x, &t], &[&loss]).options(options(inplace));
    for (p, gp) in params.iter().zip(&grads) {
        b = b.update(p, p - gp * 0.1);
    }
    Step {
        params,
        f: b.compile().unwrap(),
    }
}

#[test]
fn sgd_updates_overwrite_the_weights_where_they_are() {
    let x = mat(8, 6, 3);
    let t = mat(8, 3, 4);
    let with = mlp_step(true);
    let without = mlp_step(false);
    let before: Vec<usize> = with.params.iter().map(buffer_of).collect();
    let printed = kiln::ir::text::print_func(with.f.func());
    assert!(
        printed.matches("inplace = ").count() >= 4,
        "every update is marked in place:\n{printed}"
    );
    for _ in 0..3 {
        let a = with.f.call(&[x.view(), t.view()]).unwrap();
        let b = without.f.call(&[x.view(), t.view()]).unwrap();
        assert_eq!(f32s(&a[0]), f32s(&b[0]));
    }
    let after: Vec<usize> = with.params.iter().map(buffer_of).collect();
    assert_eq!(before, after, "the parameters stay in their buffers");
    for (p, q) in with.params.iter().zip(&without.params) {
        assert_eq!(f32s(&p.value().unwrap()), f32s(&q.value().unwrap()));
    }
    let printed = kiln::ir::text::print_func(without.f.func());
    assert!(!printed.contains("inplace"), "turned off:\n{printed}");
}

/// Compiles `outputs` of `inputs` with and without the in-place pass and checks both give the
/// same values on `args`.
fn same_both_ways(inputs: &[&Var], outputs: &[&Var], args: &[ArrayD<f32>]) -> Vec<Vec<f32>> {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let run = |inplace: bool| -> Vec<Vec<f32>> {
        let f = function(inputs, outputs)
            .options(options(inplace))
            .compile()
            .unwrap();
        // Twice: the second call runs on the buffers the first one left behind.
        f.call(&views).unwrap();
        f.call(&views).unwrap().iter().map(f32s).collect()
    };
    let a = run(true);
    assert_eq!(a, run(false));
    a
}

#[test]
fn an_input_returned_as_an_output_is_not_overwritten() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
    let e = x.exp();
    let xv = mat(2, 3, 5);
    let out = same_both_ways(&[&x], &[&x, &e, &(&e + 1.0)], std::slice::from_ref(&xv));
    assert_eq!(out[0], xv.iter().copied().collect::<Vec<_>>());
    let want: Vec<f32> = xv.iter().map(|v| v.exp()).collect();
    close(&out[1], &want);
}

#[test]
fn a_value_with_two_readers_survives_the_first() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(4), Some(4)]);
    let t = x.matmul(&x);
    let a = t.tanh();
    let b = t.exp() * &a;
    let xv = mat(4, 4, 6);
    let out = same_both_ways(&[&x], &[&b], std::slice::from_ref(&xv));
    let tv = xv.dot_2d();
    let want: Vec<f32> = tv.iter().map(|&v| v.exp() * v.tanh()).collect();
    close(&out[0], &want);
}

trait Dot2d {
    fn dot_2d(&self) -> ndarray::Array2<f32>;
}

impl Dot2d for ArrayD<f32> {
    fn dot_2d(&self) -> ndarray::Array2<f32> {
        let m = self.view().into_dimensionality::<ndarray::Ix2>().unwrap();
        m.dot(&m)
    }
}

#[test]
fn views_of_views_keep_their_buffer_alive() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(3), Some(4)]);
    let t = x.exp();
    let v = t.transpose(&[1, 0]).reshape(&[12]);
    let s = t.sin() + 1.0;
    let tt = s.transpose(&[1, 0]);
    let z = &s * &tt.transpose(&[1, 0]);
    let xv = mat(3, 4, 7);
    let out = same_both_ways(&[&x], &[&v, &z], std::slice::from_ref(&xv));
    let e: Vec<f32> = xv.iter().map(|v| v.exp()).collect();
    let vt: Vec<f32> = (0..4)
        .flat_map(|c| (0..3).map(move |r| (r, c)))
        .map(|(r, c)| e[r * 4 + c])
        .collect();
    close(&out[0], &vt);
}

#[test]
fn branches_of_ifelse_overwrite_only_their_own_values() {
    let g = Graph::new();
    let c = g.input("c", kiln::bool, [] as [Option<i64>; 0]);
    let x = g.input("x", kiln::f32, [Some(3), Some(3)]);
    let t = x.matmul(&x);
    let y = kiln::ifelse(&c, || vec![t.matmul(&x).exp() + 1.0], || vec![-&t]);
    let y = &y[0];
    let z = &t + y;
    for cond in [true, false] {
        let f = |inplace: bool| {
            function(&[&c, &x], &[y, &z])
                .options(options(inplace))
                .compile()
                .unwrap()
        };
        let xv = mat(3, 3, 8);
        let cv = ndarray::arr0(cond).into_dyn();
        let run = |f: &Function| -> Vec<Vec<f32>> {
            let (cv, xv): (Tensor, Tensor) = (cv.clone().into(), xv.clone().into());
            f.call(&[&cv, &xv]).unwrap();
            f.call(&[&cv, &xv]).unwrap().iter().map(f32s).collect()
        };
        let (a, b) = (run(&f(true)), run(&f(false)));
        assert_eq!(a, b, "cond {cond}");
        if !cond {
            assert!(
                a[1].iter().all(|&v| v == 0.0),
                "t + (-t) is zero: {:?}",
                a[1]
            );
        }
    }
}

#[test]
fn a_shared_variable_read_elsewhere_sees_its_new_value() {
    let g = Graph::new();
    let w = g.shared("w", ArrayD::from_elem(IxDyn(&[4]), 2.0f32));
    let s = w.sum(None, false);
    let step = function(&[], &[&s]).update(&w, &w * 0.5).compile().unwrap();
    let read = function(&[], &[&(&w + 0.0)]).compile().unwrap();
    let at = buffer_of(&w);
    let none: [TensorRef; 0] = [];
    assert_eq!(f32s(&step.call(&none).unwrap()[0]), vec![8.0]);
    assert_eq!(f32s(&read.call(&none).unwrap()[0]), vec![1.0; 4]);
    assert_eq!(f32s(&step.call(&none).unwrap()[0]), vec![4.0]);
    assert_eq!(f32s(&w.value().unwrap()), vec![0.5; 4]);
    assert_eq!(buffer_of(&w), at, "updated where it is");
}

#[test]
fn an_update_also_returned_is_a_copy_for_the_caller() {
    let g = Graph::new();
    let w = g.shared("w", ArrayD::from_elem(IxDyn(&[3]), 1.0f32));
    let n = &w * 3.0;
    let f = function(&[], &[&n]).update(&w, &n).compile().unwrap();
    let none: [TensorRef; 0] = [];
    let out = f.call(&none).unwrap();
    assert_eq!(f32s(&out[0]), vec![3.0; 3]);
    let out2 = f.call(&none).unwrap();
    assert_eq!(f32s(&out2[0]), vec![9.0; 3]);
    assert_eq!(
        f32s(&out[0]),
        vec![3.0; 3],
        "the first result is the caller's"
    );
    assert_eq!(f32s(&w.value().unwrap()), vec![9.0; 3]);
}

#[test]
fn a_failed_call_leaves_the_variable_with_its_shape_and_old_or_new_value() {
    let g = Graph::new();
    let w = g.shared("w", ArrayD::from_elem(IxDyn(&[5]), 1.0f32));
    let c = g.input("c", kiln::bool, [None]);
    let n = &w * 2.0;
    // The condition is `c` as one bool: a longer `c` fails at run time, after `n` may have
    // overwritten `w`.
    let cond = c.reshape(&[]);
    let y = kiln::ifelse(&cond, || vec![n.sin()], || vec![n.cos()]);
    let f = function(&[&c], &[&y[0]]).update(&w, &n).compile().unwrap();
    let ok = ndarray::arr1(&[true]).into_dyn();
    f.call(&[ok.view()]).unwrap();
    assert_eq!(f32s(&w.value().unwrap()), vec![2.0; 5]);
    let bad = ndarray::arr1(&[true, false]).into_dyn();
    assert!(f.call(&[bad.view()]).is_err());
    let v = f32s(&w.value().unwrap());
    assert!(
        v == vec![2.0; 5] || v == vec![4.0; 5],
        "old or new value, not {v:?}"
    );
    f.call(&[ok.view()]).unwrap();
}

#[test]
fn a_scatter_update_writes_its_rows_into_the_table_where_it_is() {
    // table[ids] += rows: the scatter overwrites the shared table (donated), touching only its
    // rows; without the pass the values are the same.
    let run = |inplace: bool| {
        let g = Graph::new();
        let table = g.shared("table", mat(6, 4, 9));
        let ids = g.input("ids", kiln::i64, [None]);
        let rows = g.input("rows", kiln::f32, [None, Some(4)]);
        let f = function(&[&ids, &rows], &[])
            .update(&table, kiln::scatter_add(&table, &ids, &rows, 0))
            .options(options(inplace))
            .compile()
            .unwrap();
        (table, f)
    };
    let (with_t, with_f) = run(true);
    let (without_t, without_f) = run(false);
    let printed = kiln::ir::text::print_func(with_f.func());
    assert!(printed.contains("inplace = 0"), "{printed}");
    let before = buffer_of(&with_t);
    let ids = ndarray::arr1(&[3i64, -1, 3]).into_dyn();
    let rows = mat(3, 4, 10);
    let call = |f: &Function, ids: &ArrayD<i64>| {
        f.call(&[ids.view().into(), rows.view().into()] as &[TensorRef])
    };
    for _ in 0..3 {
        call(&with_f, &ids).unwrap();
        call(&without_f, &ids).unwrap();
    }
    assert_eq!(buffer_of(&with_t), before, "the table stays in its buffer");
    let (a, b) = (
        f32s(&with_t.value().unwrap()),
        f32s(&without_t.value().unwrap()),
    );
    assert_eq!(a, b);
    // An index out of range fails before anything is written: the table keeps its value.
    let bad = ndarray::arr1(&[2i64, 6, 1]).into_dyn();
    assert!(call(&with_f, &bad).is_err());
    assert_eq!(f32s(&with_t.value().unwrap()), a);
    call(&with_f, &ids).unwrap();
}
