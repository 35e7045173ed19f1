//! `Var::stop_gradient` and `Var::zero_grad` (Theano's `disconnected_grad` and `zero_grad`):
//! the value passes unchanged on every backend, the gradient stops there, and compiled
//! functions hold no trace of them. `Var::zeros_like` gives zeros of a value's shape, known
//! or not, whatever its elements hold.

use kiln::grad::{grad_with, Disconnected, GradOptions};
use kiln::{function, Backend, Graph, Tensor};
use ndarray::{arr1, arr2, ArrayD};

fn backends() -> [Backend; 2] {
    [Backend::Cpu, Backend::Interp]
}

fn f64s(v: &[f64]) -> ArrayD<f64> {
    arr1(v).into_dyn()
}

#[test]
fn the_gradient_does_not_go_through_a_stop() {
    let x0 = f64s(&[1.0, -2.0, 3.5]);
    for backend in backends() {
        let g = Graph::new();
        let x = g.input("x", kiln::f64, [None]);
        // d/dx sum(x * stop(x)) is stop(x), and sum(x^3 * stop(x)) gives 3 x^2 * x.
        let a = (&x * &x.stop_gradient()).sum(None, false);
        let b = (&(&x * &x) * &x * &x.stop_gradient()).sum(None, false);
        let da = kiln::grad(&a, &[&x]).unwrap().remove(0);
        let db = kiln::grad(&b, &[&x]).unwrap().remove(0);
        let f = function(&[&x], &[&a, &da, &db])
            .backend(backend)
            .compile()
            .unwrap();
        let text = kiln::ir::text::print_func(f.func());
        assert!(!text.contains("kiln.stop_gradient"), "{text}");
        let out = f.call(&[x0.view()]).unwrap();
        let want_a: f64 = x0.iter().map(|v| v * v).sum();
        assert_eq!(
            out[0],
            Tensor::F64(ndarray::arr0(want_a).into_dyn()),
            "{backend:?}"
        );
        assert_eq!(out[1], Tensor::F64(x0.clone()), "{backend:?}");
        let want_b = x0.mapv(|v| 3.0 * v * v * v);
        assert_eq!(out[2], Tensor::F64(want_b), "{backend:?}");
    }
}

#[test]
fn a_wrt_reached_only_through_a_stop_is_disconnected_and_through_zero_grad_is_zero() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(2)]);
    let stopped = x.stop_gradient().sum(None, false);
    let e = kiln::grad(&stopped, &[&x]).unwrap_err().to_string();
    assert!(e.contains("does not depend on"), "{e}");
    let zeros = GradOptions {
        disconnected: Disconnected::Zero,
        ..Default::default()
    };
    let dz = grad_with(&stopped, &[&x], zeros).unwrap().remove(0);
    let zeroed = x.zero_grad().exp().sum(None, false);
    let dzero = kiln::grad(&zeroed, &[&x]).unwrap().remove(0);
    for backend in backends() {
        let f = function(&[&x], &[&zeroed, &dz, &dzero])
            .backend(backend)
            .compile()
            .unwrap();
        let x0 = f64s(&[0.5, -1.0]);
        let out = f.call(&[x0.view()]).unwrap();
        let want: f64 = x0.iter().map(|v| v.exp()).sum();
        assert_eq!(out[0], Tensor::F64(ndarray::arr0(want).into_dyn()));
        assert_eq!(out[1], Tensor::F64(f64s(&[0.0, 0.0])), "{backend:?}");
        assert_eq!(out[2], Tensor::F64(f64s(&[0.0, 0.0])), "{backend:?}");
    }
}

#[test]
fn zeros_like_takes_the_shape_at_the_call_and_never_the_values() {
    for backend in backends() {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [None, Some(3)]);
        let y = g.input("y", kiln::i64, [Some(2)]);
        let f = function(&[&x, &y], &[&x.zeros_like(), &y.zeros_like()])
            .backend(backend)
            .compile()
            .unwrap();
        let x0 = arr2(&[[f32::NAN, f32::INFINITY, 1.0], [2.0, 3.0, -0.0]]).into_dyn();
        let y0 = arr1(&[5i64, -7]).into_dyn();
        let out = f
            .call(&[kiln::TensorRef::from(x0.view()), y0.view().into()])
            .unwrap();
        assert_eq!(
            out[0],
            Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2, 3]))),
            "{backend:?}"
        );
        assert_eq!(
            out[1],
            Tensor::I64(ArrayD::zeros(ndarray::IxDyn(&[2]))),
            "{backend:?}"
        );
    }
}
