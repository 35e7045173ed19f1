//! Broadcasting is decided by types (docs/reference/semantics.md): a `?` dim never broadcasts, so one of
//! extent 1 meeting a larger extent at call time is an error naming the operand and the axis,
//! on every backend, and gradients always have their input's shape.

use kiln::{function, Backend, Graph};
use ndarray::{ArrayD, IxDyn};

const BACKENDS: [Backend; 2] = [Backend::Interp, Backend::Cpu];

fn ones(shape: &[usize]) -> ArrayD<f64> {
    ArrayD::from_elem(IxDyn(shape), 1.0)
}

#[test]
fn an_unknown_dim_of_one_does_not_stretch() {
    for backend in BACKENDS {
        let g = Graph::new();
        let x = g.input("x", kiln::f64, [None, None]);
        let b = g.input("b", kiln::f64, [None]);
        let y = (&x * &b).exp();
        let f = function(&[&x, &b], &[&y])
            .backend(backend)
            .compile()
            .unwrap();
        let err = f
            .call(&[ones(&[4, 3]).view(), ones(&[1]).view()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("input `b`") && err.contains("axis 0") && err.contains("`?`"),
            "{backend}: {err}"
        );
        // The same function where `b` has the extent it meets.
        let out = f.call(&[ones(&[4, 3]).view(), ones(&[3]).view()]).unwrap();
        assert_eq!(out[0].shape(), &[4, 3]);
        // A `?` of extent 1 against another 1 is not a stretch.
        let out = f.call(&[ones(&[4, 1]).view(), ones(&[1]).view()]).unwrap();
        assert_eq!(out[0].shape(), &[4, 1]);
    }
}

#[test]
fn a_dim_typed_one_broadcasts() {
    for backend in BACKENDS {
        let g = Graph::new();
        let x = g.input("x", kiln::f64, [None, Some(3)]);
        let b = g.input("b", kiln::f64, [Some(1)]);
        let y = &x * &b;
        let f = function(&[&x, &b], &[&y])
            .backend(backend)
            .compile()
            .unwrap();
        let out = f.call(&[ones(&[4, 3]).view(), ones(&[1]).view()]).unwrap();
        assert_eq!(out[0].shape(), &[4, 3], "{backend}");
    }
}

#[test]
fn explicit_broadcasts_and_batch_dims_follow_the_rule() {
    for backend in BACKENDS {
        let g = Graph::new();
        let b = g.input("b", kiln::f64, [None]);
        let y = b.broadcast_to(&[2, 3]);
        let f = function(&[&b], &[&y]).backend(backend).compile().unwrap();
        let err = f.call(&[ones(&[1]).view()]).unwrap_err().to_string();
        assert!(
            err.contains("input `b`") && err.contains("axis 0"),
            "{backend}: {err}"
        );
        assert!(f.call(&[ones(&[3]).view()]).is_ok());

        let g = Graph::new();
        let a = g.input("a", kiln::f64, [None, Some(2), Some(2)]);
        let m = g.input("m", kiln::f64, [Some(4), Some(2), Some(2)]);
        let p = a.matmul(&m);
        let f = function(&[&a, &m], &[&p])
            .backend(backend)
            .compile()
            .unwrap();
        let err = f
            .call(&[ones(&[1, 2, 2]).view(), ones(&[4, 2, 2]).view()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("input `a`") && err.contains("axis 0"),
            "{backend}: {err}"
        );
        assert!(f
            .call(&[ones(&[4, 2, 2]).view(), ones(&[4, 2, 2]).view()])
            .is_ok());
    }
}

#[test]
fn fused_and_grouped_steps_check_too() {
    // A softmax over rows of unknown length with a bias of unknown length: fused maps, row
    // groups and reductions read `b`.
    for backend in BACKENDS {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(64), None]);
        let b = g.input("b", kiln::f32, [None]);
        let z = &x + &b;
        let e = (&z - z.max(Some(&[1]), true)).exp();
        let y = &e / e.sum(Some(&[1]), true);
        let f = function(&[&x, &b], &[&y])
            .backend(backend)
            .compile()
            .unwrap();
        let xs = ArrayD::<f32>::zeros(IxDyn(&[64, 10]));
        let err = f
            .call(&[xs.view(), ArrayD::<f32>::zeros(IxDyn(&[1])).view()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input `b`"), "{backend}: {err}");
        let out = f
            .call(&[xs.view(), ArrayD::<f32>::zeros(IxDyn(&[10])).view()])
            .unwrap();
        assert_eq!(out[0].shape(), &[64, 10]);
    }
}

#[test]
fn gradients_have_their_inputs_shape() {
    for backend in BACKENDS {
        let g = Graph::new();
        let x = g.input("x", kiln::f64, [None, Some(3)]);
        let b = g.input("b", kiln::f64, [None]);
        let loss = (&x * &b).sum(None, false);
        let gb = kiln::grad(&loss, &[&b]).unwrap().remove(0);
        let f = function(&[&x, &b], &[&gb])
            .backend(backend)
            .compile()
            .unwrap();
        let out = f.call(&[ones(&[4, 3]).view(), ones(&[3]).view()]).unwrap();
        assert_eq!(out[0].shape(), &[3], "{backend}");
        assert_eq!(out[0].to_f64_vec(), vec![4.0; 3]);
        // Where the forward pass would have stretched `b`, the call is an error, not a
        // gradient of the wrong shape.
        assert!(f.call(&[ones(&[4, 3]).view(), ones(&[1]).view()]).is_err());
    }
}
