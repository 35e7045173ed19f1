//! Lazy `ifelse` built with the graph API: only the taken branch runs, nesting works, and
//! gradients flow through the taken branch (the untaken one contributes zero).

#[allow(dead_code)]
#[path = "../examples/custom_ops/ops.rs"]
mod ops;

use kiln::custom::{CustomOp, PerformContext};
use kiln::{function, grad, ifelse, Graph, Tensor, TensorType};
use ndarray::{array, ArrayD, IxDyn};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn b(v: bool) -> ArrayD<bool> {
    ArrayD::from_elem(IxDyn(&[]), v)
}

/// Counts how often it runs: the probe for laziness.
#[derive(Debug, Default)]
struct Counted(Arc<AtomicUsize>);

impl CustomOp for Counted {
    fn name(&self) -> &str {
        "counted"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::Relaxed);
        outputs[0] = Some(inputs[0].clone());
        Ok(())
    }
}

#[test]
fn only_the_taken_branch_runs() {
    let g = Graph::new();
    let c = g.input("c", kiln::bool, [] as [Option<i64>; 0]);
    let x = g.input("x", kiln::f32, [None]);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Counted(calls.clone());
    let r = ifelse(
        &c,
        || vec![&x * 2.0],
        || {
            // Fails at run time unless x has an even length, and counts its runs.
            let y = g.apply_custom(counted, &[&x]).remove(0);
            vec![y.reshape(&[2, -1]).reshape(&[-1])]
        },
    );
    let f = function(&[&c, &x], &[&r[0]]).compile().unwrap();
    let odd = array![1.0f32, 2.0, 3.0].into_dyn();
    let run = |cv: bool, xv: &ArrayD<f32>| {
        f.call(&[kiln::TensorRef::from(b(cv).view()), xv.view().into()])
    };
    assert_eq!(
        run(true, &odd).unwrap()[0].to_f64_vec(),
        vec![2.0, 4.0, 6.0]
    );
    assert_eq!(calls.load(Ordering::Relaxed), 0, "the else branch ran");
    assert!(run(false, &odd)
        .unwrap_err()
        .to_string()
        .contains("cannot reshape"));
    let even = array![1.0f32, 2.0].into_dyn();
    assert_eq!(run(false, &even).unwrap()[0].to_f64_vec(), vec![1.0, 2.0]);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    let text = kiln::ir::text::print_func(f.func());
    assert!(
        text.contains("ifelse %c {") && text.contains("} else {"),
        "{text}"
    );
}

#[test]
fn nested_ifelse() {
    let g = Graph::new();
    let p = g.input("p", kiln::bool, [] as [Option<i64>; 0]);
    let q = g.input("q", kiln::bool, [] as [Option<i64>; 0]);
    let x = g.input("x", kiln::f64, [] as [Option<i64>; 0]);
    let r = ifelse(
        &p,
        || ifelse(&q, || vec![&x * &x], || vec![-&x]),
        || vec![1.0 / &x],
    );
    let f = function(&[&p, &q, &x], &[&r[0]]).compile().unwrap();
    let xv = ArrayD::from_elem(IxDyn(&[]), 2.0f64);
    for (pv, qv, want) in [(true, true, 4.0), (true, false, -2.0), (false, true, 0.5)] {
        let out = f
            .call(&[
                kiln::TensorRef::from(b(pv).view()),
                b(qv).view().into(),
                xv.view().into(),
            ])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![want]);
    }
}

#[test]
fn gradients_flow_through_the_taken_branch_only() {
    let g = Graph::new();
    let c = g.input("c", kiln::bool, [] as [Option<i64>; 0]);
    let x = g.input("x", kiln::f64, [Some(3)]);
    let w = g.input("w", kiln::f64, [Some(3)]);
    let r = ifelse(
        &c,
        || vec![(x.exp() * &w).sum(None, false)],
        || vec![(&x * &x).sum(None, false)],
    );
    let gs = grad(&r[0], &[&x, &w]).unwrap();
    let f = function(&[&c, &x, &w], &[&r[0], &gs[0], &gs[1]])
        .compile()
        .unwrap();
    let (xv, wv) = (
        array![0.5f64, -1.0, 2.0].into_dyn(),
        array![1.0f64, 2.0, 3.0].into_dyn(),
    );
    let call = |cv: bool| {
        f.call(&[
            kiln::TensorRef::from(b(cv).view()),
            xv.view().into(),
            wv.view().into(),
        ])
        .unwrap()
    };
    let t = call(true);
    let ex: Vec<f64> = xv.iter().map(|v| v.exp()).collect();
    assert_eq!(
        t[1].to_f64_vec(),
        ex.iter()
            .zip(wv.iter())
            .map(|(e, w)| e * w)
            .collect::<Vec<_>>()
    );
    assert_eq!(t[2].to_f64_vec(), ex);
    let e = call(false);
    assert_eq!(
        e[1].to_f64_vec(),
        xv.iter().map(|v| 2.0 * v).collect::<Vec<_>>()
    );
    assert_eq!(
        e[2].to_f64_vec(),
        vec![0.0; 3],
        "w is used by the untaken branch only"
    );
    // A custom op's gradient inside a branch, and second order through the gradient ifelse.
    let s = ifelse(
        &c,
        || {
            vec![g
                .apply_custom(ops::Scale::new(3.0), &[&x])
                .remove(0)
                .sum(None, false)]
        },
        || vec![x.sum(None, false)],
    );
    let gx = grad(&s[0], &[&x]).unwrap().remove(0);
    let f2 = function(&[&c, &x], &[&gx]).compile().unwrap();
    let out = f2
        .call(&[kiln::TensorRef::from(b(true).view()), xv.view().into()])
        .unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![3.0; 3]);
}

#[test]
fn branch_values_stay_in_their_branch_and_types_must_agree() {
    let g = Graph::new();
    let c = g.input("c", kiln::bool, [] as [Option<i64>; 0]);
    let x = g.input("x", kiln::f32, [Some(2)]);
    let mut inner = None;
    let r = ifelse(
        &c,
        || {
            let e = x.exp();
            inner = Some(e.clone());
            vec![e]
        },
        || vec![x.clone()],
    );
    let leak = &r[0] + &inner.unwrap();
    let e = function(&[&c, &x], &[&leak])
        .compile()
        .err()
        .expect("an error");
    assert!(
        e.to_string().contains("inside a region (an ifelse branch"),
        "{e}"
    );
    let bad = ifelse(&c, || vec![x.clone()], || vec![x.cast(kiln::f64)]);
    assert!(bad[0]
        .check()
        .unwrap_err()
        .to_string()
        .contains("in one branch"));
    let not_bool = ifelse(&x, || vec![x.clone()], || vec![x.clone()]);
    assert!(not_bool[0]
        .check()
        .unwrap_err()
        .to_string()
        .contains("bool[]"));
}

#[test]
fn gradients_through_ifelse_match_finite_differences_when_the_adjoint_depends_on_the_input() {
    use kiln::{verify_grad, VerifyOptions};
    for taken in [true, false] {
        let pts = [
            ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.3, -0.8, 1.1]).unwrap(),
            ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.5, 2.0, -1.5]).unwrap(),
        ];
        verify_grad(
            |g, v| {
                let c = g.constant(ArrayD::from_elem(IxDyn(&[]), taken));
                let y =
                    ifelse(&c, || vec![v[0].exp() * &v[1]], || vec![v[0].sin() + &v[1]]).remove(0);
                // The loss reads y twice, so the output gradient (2y) depends on the inputs.
                (&y * &y).sum(None, false) + y.sum(None, false)
            },
            &pts,
            VerifyOptions::default(),
        )
        .unwrap_or_else(|e| panic!("taken = {taken}: {e}"));
    }
}

#[test]
fn lambda_gradients_match_finite_differences_with_a_non_constant_adjoint() {
    use kiln::{verify_grad, VerifyOptions};
    let f = kiln::elementwise("f", |a: kiln::Scalar, b: kiln::Scalar| {
        (a.clone() * b).tanh() + a
    });
    let pts = [
        ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.3, -0.8, 1.1]).unwrap(),
        ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.5, 2.0, -1.5]).unwrap(),
    ];
    verify_grad(
        |_, v| f.apply(&[&v[0], &v[1]]).square().sum(None, false),
        &pts,
        VerifyOptions::default(),
    )
    .unwrap();
}

/// A region reuses an equal value computed before its `ifelse` (the optimizer merges across the
/// region boundary), and never the other way round: a value computed after the `ifelse` still
/// runs when the branch that also computes it is not taken. Counted runs count the merging;
/// values agree on both backends with the optimizer on and off.
#[test]
fn regions_reuse_values_computed_before_them_and_stay_lazy() {
    let g = Graph::new();
    let c = g.input("c", kiln::bool, [] as [Option<i64>; 0]);
    let x = g.input("x", kiln::f64, [Some(2)]);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = || Counted(calls.clone());
    // Before the ifelse: counted(x) and exp(x); the then branch computes both again.
    let a = g.apply_custom(counted(), &[&x]).remove(0);
    let e = x.exp();
    let r = ifelse(
        &c,
        || {
            let b = g.apply_custom(counted(), &[&x]).remove(0);
            vec![&(&b * &x.exp()) + &e]
        },
        || vec![-&x],
    );
    // After the ifelse: the else branch's value again, which must not read a region value.
    let s = ifelse(&c, || vec![x.clone()], || vec![(&x * 3.0).sqrt()]);
    let after = (&x * 3.0).sqrt();
    let outs = [&r[0], &s[0], &a, &after];
    let xv = array![1.0f64, 4.0].into_dyn();
    let mut results = Vec::new();
    for backend in [kiln::Backend::Interp, kiln::Backend::Cpu] {
        for optimize in [false, true] {
            let options = kiln::CompileOptions {
                backend: Some(backend),
                optimize,
                ..Default::default()
            };
            let f = function(&[&c, &x], &outs)
                .options(options)
                .compile()
                .unwrap();
            for taken in [true, false] {
                calls.store(0, Ordering::Relaxed);
                let got = f
                    .call(&[kiln::TensorRef::from(b(taken).view()), xv.view().into()])
                    .unwrap();
                let n = calls.load(Ordering::Relaxed);
                // Merged, the branch reuses the counted value from before the ifelse.
                let want_calls = if taken && !optimize { 2 } else { 1 };
                assert_eq!(
                    n, want_calls,
                    "{backend}, optimize {optimize}, taken {taken}"
                );
                let got: Vec<Vec<f64>> = got.iter().map(|t| t.to_f64_vec()).collect();
                results.push((taken, got));
            }
            if optimize {
                let text = kiln::ir::text::print_func(f.func());
                assert_eq!(text.matches("custom \"counted\"").count(), 1, "{text}");
            }
        }
    }
    for (taken, got) in &results {
        let want = &results[usize::from(!taken)].1;
        for (g, w) in got.iter().zip(want) {
            for (g, w) in g.iter().zip(w) {
                assert!((g - w).abs() <= 1e-12 * w.abs(), "{results:?}");
            }
        }
    }
    let e4 = 4f64.exp();
    let then = &results[0].1;
    assert!((then[0][1] - (e4 * 4.0 + e4)).abs() < 1e-9, "{then:?}");
    assert_eq!(results[1].1[0], vec![-1.0, -4.0]);
}
