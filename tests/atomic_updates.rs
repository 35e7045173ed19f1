//! Updates of shared variables are all or nothing: a call that returns an error leaves every
//! shared variable exactly as it was, those updated in place included, on every backend; the
//! same function then runs normally.

use kiln::custom::{CustomOp, PerformContext};
use kiln::{function, Backend, Graph, Tensor, TensorType};
use ndarray::{array, ArrayD, IxDyn};

const BACKENDS: [Backend; 2] = [Backend::Interp, Backend::Cpu];

/// Returns its input, or fails when the input holds a negative value: an error that only the
/// data decides, after the updates would have been computed.
#[derive(Debug)]
struct FailsOnNegative;

impl CustomOp for FailsOnNegative {
    fn name(&self) -> &str {
        "fails_on_negative"
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
        if inputs[0].to_f64_vec().iter().any(|&v| v < 0.0) {
            return Err("a negative value".into());
        }
        outputs[0] = Some(inputs[0].clone());
        Ok(())
    }
}

fn w0() -> ArrayD<f32> {
    array![[1.0f32, 2.0], [3.0, 4.0]].into_dyn()
}

#[test]
fn a_failing_call_leaves_variables_updated_in_place_as_they_were() {
    for backend in BACKENDS {
        let g = Graph::new();
        let w = g.shared("w", w0());
        let v = g.shared("v", array![0.5f32, 0.25].into_dyn());
        let x = g.input("x", kiln::f32, [Some(2)]);
        // Built first, so that the update's step comes early in the program.
        let w_new = &w - &w * 0.5;
        let v_new = &v + 1.0;
        let checked = g.apply_custom(FailsOnNegative, &[&x]).remove(0);
        let out = (&checked * &v).sum(None, false);
        let f = function(&[&x], &[&out])
            .update(&w, &w_new)
            .update(&v, &v_new)
            .backend(backend)
            .compile()
            .unwrap();
        let bad = array![1.0f32, -1.0].into_dyn();
        let err = f.call(&[bad.view()]).unwrap_err().to_string();
        assert!(err.contains("a negative value"), "{backend}: {err}");
        assert_eq!(
            w.value().unwrap(),
            Tensor::from(w0()),
            "{backend}: w changed"
        );
        assert_eq!(
            v.value().unwrap(),
            Tensor::from(array![0.5f32, 0.25].into_dyn()),
            "{backend}: v changed"
        );
        // The next call runs and updates both.
        let good = array![1.0f32, 2.0].into_dyn();
        f.call(&[good.view()]).unwrap();
        assert_eq!(
            w.value().unwrap(),
            Tensor::from(array![[0.5f32, 1.0], [1.5, 2.0]].into_dyn())
        );
        assert_eq!(
            v.value().unwrap(),
            Tensor::from(array![1.5f32, 1.25].into_dyn())
        );
    }
}

#[test]
fn a_shape_error_after_the_update_changes_nothing() {
    for backend in BACKENDS {
        let g = Graph::new();
        let w = g.shared("w", w0());
        let a = g.input("a", kiln::f32, [None]);
        let b = g.input("b", kiln::f32, [None]);
        let w_new = &w * 2.0 - 1.0;
        let bad = (&a + &b).sum(None, false);
        let f = function(&[&a, &b], &[&bad])
            .update(&w, &w_new)
            .backend(backend)
            .compile()
            .unwrap();
        let (a3, b4) = (
            ArrayD::<f32>::zeros(IxDyn(&[3])),
            ArrayD::<f32>::zeros(IxDyn(&[4])),
        );
        assert!(f.call(&[a3.view(), b4.view()]).is_err());
        assert_eq!(w.value().unwrap(), Tensor::from(w0()), "{backend}");
        f.call(&[a3.view(), a3.view()]).unwrap();
        assert_eq!(
            w.value().unwrap(),
            Tensor::from(array![[1.0f32, 3.0], [5.0, 7.0]].into_dyn())
        );
    }
}

#[test]
fn an_update_that_a_failing_step_reads_is_not_done_in_place() {
    // The output reads the new value through a step that may fail, so the new value cannot be
    // computed last: the variable is updated out of place, and still all or nothing.
    for backend in BACKENDS {
        let g = Graph::new();
        let w = g.shared("w", w0());
        let w_new = &w - 10.0;
        let checked = g.apply_custom(FailsOnNegative, &[&w_new]).remove(0);
        let f = function(&[], &[&checked])
            .update(&w, &w_new)
            .backend(backend)
            .compile()
            .unwrap();
        let none: [kiln::TensorRef; 0] = [];
        assert!(f.call(&none).is_err());
        assert_eq!(w.value().unwrap(), Tensor::from(w0()), "{backend}");
    }
}

#[test]
fn a_training_step_of_unknown_batch_stays_atomic_with_its_fused_gradient_update() {
    // The gradient of `w` is a product that the CPU backend fuses with the SGD update into
    // one step; with a step that may fail in between, that step comes last.
    let mut results = Vec::new();
    for backend in BACKENDS {
        let g = Graph::new();
        let w = g.shared(
            "w",
            ArrayD::from_shape_fn(IxDyn(&[4, 3]), |i| (i[0] * 3 + i[1]) as f32 * 0.1),
        );
        let x = g.input("x", kiln::f32, [None, Some(4)]);
        let t = g.input("t", kiln::f32, [None, Some(3)]);
        let y = x.matmul(&w);
        let loss = (&y - &t).square().sum(None, false);
        let gw = kiln::grad(&loss, &[&w]).unwrap().remove(0);
        let checked = g.apply_custom(FailsOnNegative, &[&t]).remove(0);
        let out = &loss + &checked.sum(None, false);
        let f = function(&[&x, &t], &[&out])
            .update(&w, &w - &gw * 0.01)
            .backend(backend)
            .compile()
            .unwrap();
        let before = w.value().unwrap();
        let xs = ArrayD::from_shape_fn(IxDyn(&[5, 4]), |i| (i[0] + i[1]) as f32 * 0.25);
        let bad = ArrayD::from_elem(IxDyn(&[5, 3]), -1.0f32);
        assert!(f.call(&[xs.view(), bad.view()]).is_err());
        assert_eq!(w.value().unwrap(), before, "{backend}");
        let good = ArrayD::from_elem(IxDyn(&[5, 3]), 1.0f32);
        f.call(&[xs.view(), good.view()]).unwrap();
        assert_ne!(w.value().unwrap(), before, "{backend}");
        results.push(w.value().unwrap());
    }
    let (a, b) = (results[0].to_f64_vec(), results[1].to_f64_vec());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
}
