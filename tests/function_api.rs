//! The user-facing API end to end on the reference interpreter: building graphs, type errors
//! with source locations, compiling, calling, shared variables and updates, threads.

use kiln::{function, Backend, Error, Graph, Tensor};
use ndarray::{array, ArrayD, IxDyn};

fn f32s(t: &Tensor) -> Vec<f32> {
    t.as_f32().expect("f32 tensor").iter().copied().collect()
}

#[test]
fn compiles_and_calls_an_expression_with_broadcasting() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(2)]);
    let b = g.input("b", kiln::f32, [Some(2)]);
    let y = &x * 3.0 + &b;
    let f = function(&[&x, &b], &[&y])
        .backend(Backend::Interp)
        .compile()
        .unwrap();
    let out = f
        .call(&[
            array![[1.0f32, 2.0], [3.0, 4.0]].into_dyn().view(),
            array![10.0f32, 20.0].into_dyn().view(),
        ])
        .unwrap();
    assert_eq!(out[0].shape(), &[2, 2]);
    assert_eq!(f32s(&out[0]), vec![13.0, 26.0, 19.0, 32.0]);
}

#[test]
fn compiling_does_not_change_the_users_graph() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let y = (x.exp() + &x * 2.0).sum(None, false).named("y");
    let before = kiln::debugprint(&[&y]);
    let (nv, na) = (g.data().vars.len(), g.data().applies.len());
    let f1 = function(&[&x], &[&y]).compile().unwrap();
    let f2 = function(&[&x], &[&y]).compile().unwrap();
    assert_eq!(kiln::debugprint(&[&y]), before);
    assert_eq!((g.data().vars.len(), g.data().applies.len()), (nv, na));
    let input = array![0.0f64, 1.0, 2.0].into_dyn();
    let a = f1.call(&[input.view()]).unwrap();
    let b = f2.call(&[input.view()]).unwrap();
    assert_eq!(a[0], b[0]);
    let expected: f64 = [0.0f64, 1.0, 2.0].iter().map(|v| v.exp() + 2.0 * v).sum();
    assert!((a[0].to_f64_vec()[0] - expected).abs() < 1e-12);
}

#[test]
fn type_errors_name_the_line_that_built_the_node() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(3)]);
    let i = g.input("i", kiln::i32, [Some(3)]);
    let line = line!() + 1;
    let bad = &x + &i;
    let y = bad.exp(); // a node on top of the poisoned one
    let err = function(&[&x, &i], &[&y])
        .compile()
        .err()
        .expect("a type error");
    let msg = err.to_string();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
    assert!(msg.contains(&format!("function_api.rs:{line}")), "{msg}");
    assert!(msg.contains("f32[3]") && msg.contains("i32[3]"), "{msg}");
}

#[test]
fn try_forms_report_errors_at_once() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(3)]);
    let y = g.input("y", kiln::f32, [Some(4)]);
    let e = x.try_binary(kiln::ir::BinaryOp::Add, &y).unwrap_err();
    assert!(e.to_string().contains("do not broadcast"), "{e}");
    assert!(x.try_unary(kiln::ir::UnaryOp::Exp).is_ok());
    assert!(x.matmul(&y).check().is_err());
    let bad_axis = x.sum(Some(&[2]), false);
    assert!(bad_axis.check().unwrap_err().to_string().contains("axis 2"));
}

#[test]
fn wrong_inputs_are_errors_naming_the_input() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(3)]);
    let f = function(&[&x], &[&x.exp()]).compile().unwrap();
    let none: [ndarray::ArrayViewD<f32>; 0] = [];
    let e = f.call(&none).unwrap_err();
    assert!(e.to_string().contains("takes 1 inputs (x), got 0"), "{e}");
    let wrong_dtype = ArrayD::<f64>::zeros(IxDyn(&[2, 3]));
    let e = f.call(&[wrong_dtype.view()]).unwrap_err();
    assert!(
        e.to_string().contains("input `x`") && e.to_string().contains("f64"),
        "{e}"
    );
    let wrong_shape = ArrayD::<f32>::zeros(IxDyn(&[2, 4]));
    let e = f.call(&[wrong_shape.view()]).unwrap_err();
    assert!(
        e.to_string().contains("input `x`") && e.to_string().contains("[2, 4]"),
        "{e}"
    );
    let wrong_rank = ArrayD::<f32>::zeros(IxDyn(&[3]));
    assert!(f.call(&[wrong_rank.view()]).is_err());
}

#[test]
fn missing_inputs_and_bad_updates_are_compile_errors() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let y = g.input("y", kiln::f32, [Some(2)]);
    let e = function(&[&x], &[&(&x + &y)]).compile().err().unwrap();
    assert!(e.to_string().contains("`y` is needed"), "{e}");
    let w = g.shared("w", array![1.0f32, 2.0].into_dyn());
    let e = function(&[&x], &[&x])
        .update(&x, &x)
        .compile()
        .err()
        .unwrap();
    assert!(e.to_string().contains("not a shared variable"), "{e}");
    let e = function(&[&x], &[&x])
        .update(&w, x.sum(None, false))
        .compile()
        .err()
        .unwrap();
    assert!(e.to_string().contains("update of `w`"), "{e}");
}

#[test]
fn updates_are_computed_from_old_values_then_applied() {
    let g = Graph::new();
    let a = g.shared("a", array![1.0f64, 2.0].into_dyn());
    let b = g.shared("b", array![10.0f64, 20.0].into_dyn());
    let total = (&a + &b).sum(None, false);
    // Swap a and b, and add one to a's new value: every update must see the old values.
    let step = function(&[], &[&total])
        .update(&a, &b + 1.0)
        .update(&b, &a)
        .compile()
        .unwrap();
    let none: [ndarray::ArrayViewD<f64>; 0] = [];
    let out = step.call(&none).unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![33.0]);
    assert_eq!(a.value().unwrap().to_f64_vec(), vec![11.0, 21.0]);
    assert_eq!(b.value().unwrap().to_f64_vec(), vec![1.0, 2.0]);
    let out = step.call(&none).unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![35.0]);
    assert_eq!(a.value().unwrap().to_f64_vec(), vec![2.0, 3.0]);
    a.set_value(array![0.0f64, 0.0].into_dyn()).unwrap();
    assert!(a.set_value(array![0.0f64].into_dyn()).is_err());
    assert_eq!(step.call(&none).unwrap()[0].to_f64_vec(), vec![11.0 + 21.0]);
}

#[test]
fn numbers_adopt_the_dtype_of_the_other_operand() {
    let g = Graph::new();
    let i = g.input("i", kiln::i32, [Some(3)]);
    let y = &i * 2 + 1;
    assert_eq!(y.dtype(), kiln::i32);
    let z = 1.5 - &g.input("z", kiln::f64, [None]);
    assert_eq!(z.dtype(), kiln::f64);
    let f = function(&[&i], &[&y]).compile().unwrap();
    let out = f.call(&[array![1i32, -2, 7].into_dyn().view()]).unwrap();
    assert_eq!(
        out[0].as_i32().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![3, -3, 15]
    );
}

#[test]
fn call_into_reuses_the_callers_buffers() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(4)]);
    let f = function(&[&x], &[&(&x + 1.0)]).compile().unwrap();
    let input = array![1.0f32, 2.0, 3.0, 4.0].into_dyn();
    let mut outs = vec![Tensor::zeros(kiln::f32, &[4])];
    let ptr = outs[0].as_f32().unwrap().as_ptr();
    for _ in 0..3 {
        f.call_into(&[input.view()], &mut outs).unwrap();
    }
    assert_eq!(
        outs[0].as_f32().unwrap().as_ptr(),
        ptr,
        "the buffer was replaced"
    );
    assert_eq!(f32s(&outs[0]), vec![2.0, 3.0, 4.0, 5.0]);
    assert!(f.call_into(&[input.view()], &mut []).is_err());
}

#[test]
fn a_function_is_called_from_eight_threads_at_once() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [None]);
    let w = g.shared("w", array![2.0f64].into_dyn());
    let y = (&x * &w).sum(None, false);
    let f = function(&[&x], &[&y]).compile().unwrap();
    assert_send_sync(&f);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    for k in 0..50 {
                        let n = 1 + t * 10 + k;
                        let v = ArrayD::from_shape_fn(IxDyn(&[n]), |i| i[0] as f64);
                        let out = f.call(&[v.view()]).unwrap();
                        let expected = (n * (n - 1)) as f64; // 2 * sum(0..n)
                        assert_eq!(out[0].to_f64_vec(), vec![expected]);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn shared_updates_from_many_threads_are_not_lost() {
    let g = Graph::new();
    let count = g.shared("count", ArrayD::from_elem(IxDyn(&[]), 0i64));
    let step = function(&[], &[])
        .update(&count, &count + 1)
        .compile()
        .unwrap();
    let none: [ndarray::ArrayViewD<f64>; 0] = [];
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..100 {
                    step.call(&none).unwrap();
                }
            });
        }
    });
    assert_eq!(count.value().unwrap().to_f64_vec(), vec![800.0]);
}

#[test]
fn debugprint_shows_shared_nodes_once() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(3)]);
    let e = x.exp();
    let y = (&e + &e).named("y");
    let text = kiln::debugprint(&[&y]);
    let expected = "add [id A] 'y' : f32[?, 3]\n |exp [id B] : f32[?, 3]\n | |x [id C] : f32[?, 3]\n |[id B] (printed above)\n";
    assert_eq!(text, expected);
}

#[test]
fn unknown_backends_are_errors() {
    assert!("tpu".parse::<Backend>().is_err());
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(1)]);
    let e = function(&[&x], &[&x])
        .backend(Backend::Gpu)
        .compile()
        .err()
        .unwrap();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
}

/// Two functions with the default name `f`, dumped into one folder, keep their own files
/// (`f.NN.STAGE.txt`, then `f-2.NN.STAGE.txt`) instead of the second overwriting the first.
#[test]
fn functions_that_share_a_name_keep_their_own_dump_files() {
    let dir = std::env::temp_dir().join(format!("kiln-dump-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let g = kiln::Graph::new();
    let x = g.input("x", kiln::f32, [Some(3)]);
    let opts = || kiln::CompileOptions {
        dump: kiln::dump::DumpOptions {
            dir: Some(dir.clone()),
            ..kiln::dump::DumpOptions::parse("input,schedule")
        },
        backend: Some(Backend::Cpu),
        ..Default::default()
    };
    let exp = x.unary(kiln::ir::UnaryOp::Exp);
    let neg = -&x;
    kiln::function(&[&x], &[&exp])
        .options(opts())
        .compile()
        .unwrap();
    kiln::function(&[&x], &[&neg])
        .options(opts())
        .compile()
        .unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert!(read("f.00.input.txt").contains("exp"));
    assert!(read("f-2.00.input.txt").contains("neg"));
    assert!(read("f.05.schedule.txt").contains("map exp"));
    assert!(read("f-2.05.schedule.txt").contains("map neg"));
    let _ = std::fs::remove_dir_all(&dir);
}
