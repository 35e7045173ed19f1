//! The CPU backend against the interpreter on inputs large enough to run in parallel chunks,
//! with broadcast and non-contiguous operands and every dtype. Integers and bools agree
//! exactly; floats too, except that transcendentals (inline polynomial code in the backend, the
//! C library in the interpreter) may differ in the last few ulps.

use kiln::{function, Backend, Graph, Tensor, TensorRef, Var};
use ndarray::{ArrayD, IxDyn};

fn both(inputs: &[&Var], outputs: &[&Var], args: &[TensorRef]) -> (Vec<Tensor>, Vec<Tensor>) {
    let run = |b: Backend| {
        function(inputs, outputs)
            .backend(b)
            .compile()
            .unwrap()
            .call(args)
            .unwrap()
    };
    (run(Backend::Interp), run(Backend::Cpu))
}

/// Within `ulps` units in the last place of the larger of the values and 1, element by element
/// (exact for integers and bools): the terms these tests add are of order 1, so a result that
/// cancels to near zero keeps their absolute error.
fn close(a: &Tensor, b: &Tensor, ulps: u32) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    let eps = match a.dtype() {
        kiln::DType::F32 => f32::EPSILON as f64,
        kiln::DType::F64 => f64::EPSILON,
        _ => return a.bit_eq(b),
    };
    a.to_f64_vec().iter().zip(b.to_f64_vec()).all(|(&x, y)| {
        (x.is_nan() && y.is_nan())
            || x == y
            || (x - y).abs() <= ulps as f64 * eps * x.abs().max(y.abs()).max(1.0)
    })
}

#[test]
fn large_fused_kernels_match_the_interpreter() {
    let n = 300_001;
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None]);
    let y = g.input("y", kiln::f32, [None]);
    let w1 = (-(&x * &x)).exp() * y.sin() + &x * &y * 0.5;
    let xv = ArrayD::from_shape_fn(IxDyn(&[n]), |i| kiln::random::normal_f32(1, i[0] as u64));
    let yv = ArrayD::from_shape_fn(IxDyn(&[n]), |i| kiln::random::normal_f32(2, i[0] as u64));
    let (a, b) = both(&[&x, &y], &[&w1], &[xv.view().into(), yv.view().into()]);
    assert!(close(&a[0], &b[0], 4));
}

#[test]
fn broadcast_and_transposed_operands() {
    let g = Graph::new();
    let m = g.input("m", kiln::f64, [Some(400), Some(300)]);
    let row = g.input("row", kiln::f64, [Some(400), Some(1)]);
    // A transposed view feeds the kernel: it is read through a contiguous copy.
    let t = m.t().t();
    let out = (&t * &row + 1.0).tanh().maximum(&row);
    let mv = ArrayD::from_shape_fn(IxDyn(&[400, 300]), |i| {
        (i[0] as f64 - 200.0) * 0.01 + i[1] as f64 * 0.001
    });
    let rv = ArrayD::from_shape_fn(IxDyn(&[400, 1]), |i| (i[0] % 7) as f64 * 0.1 - 0.3);
    let (a, b) = both(&[&m, &row], &[&out], &[mv.view().into(), rv.view().into()]);
    assert!(close(&a[0], &b[0], 4));
}

#[test]
fn integer_and_bool_kernels() {
    let n: usize = 100_000;
    let g = Graph::new();
    let i = g.input("i", kiln::i32, [Some(n as i64)]);
    let j = g.input("j", kiln::i32, [Some(n as i64)]);
    let q = i.floordiv(&j) + i.modulo(&j) * 3 - i.pow(2);
    let flag = i.gt(&j).and(j.ne(0)).logical_not();
    let as_f = kiln::select(&flag, i.cast(kiln::f64), j.cast(kiln::f64) * 0.5);
    let iv = ArrayD::from_shape_fn(IxDyn(&[n]), |k| (k[0] as i32 % 201) - 100);
    let jv = ArrayD::from_shape_fn(IxDyn(&[n]), |k| (k[0] as i32 % 13) - 6);
    let (a, b) = both(
        &[&i, &j],
        &[&q, &flag, &as_f],
        &[iv.view().into(), jv.view().into()],
    );
    for (x, y) in a.iter().zip(&b) {
        assert!(x.bit_eq(y));
    }
}

#[test]
fn rows_columns_and_mixed_broadcasts_read_in_place_or_through_copies() {
    let g = Graph::new();
    let m = g.input("m", kiln::f32, [Some(3), Some(200), Some(150)]);
    let col = g.input("col", kiln::f32, [Some(3), Some(200), Some(1)]);
    let row = g.input("row", kiln::f32, [Some(150)]);
    let mid = g.input("mid", kiln::f32, [Some(1), Some(200), Some(150)]);
    let odd = g.input("odd", kiln::f32, [Some(3), Some(1), Some(150)]);
    let out = ((&m - &col) * &row + &mid).maximum(&odd).exp();
    let f = |shape: &[usize], seed: u64| {
        let mut k = 0u64;
        ArrayD::from_shape_simple_fn(IxDyn(shape), || {
            k += 1;
            kiln::random::normal_f32(seed, k)
        })
    };
    let vals = [
        f(&[3, 200, 150], 1),
        f(&[3, 200, 1], 2),
        f(&[150], 3),
        f(&[1, 200, 150], 4),
        f(&[3, 1, 150], 5),
    ];
    let args: Vec<TensorRef> = vals.iter().map(|v| v.view().into()).collect();
    let (a, b) = both(&[&m, &col, &row, &mid, &odd], &[&out], &args);
    assert!(close(&a[0], &b[0], 4));
}

#[test]
fn fused_reductions_over_the_last_axis_match_the_interpreter() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(300), Some(700)]);
    let m = x.max(Some(&[1]), true);
    let lse = (&x - &m).exp().sum(Some(&[1]), false).log() + m.reshape(&[300]);
    let amax = (&x * &x).argmax(Some(1), true);
    let mean = x.abs().mean(Some(&[-1]), false);
    let xv = ArrayD::from_shape_fn(IxDyn(&[300, 700]), |i| {
        kiln::random::normal_f32(9, (i[0] * 700 + i[1]) as u64) * 3.0
    });
    let (a, b) = both(&[&x], &[&lse, &amax, &mean], &[xv.view().into()]);
    for (p, q) in a.iter().zip(&b) {
        assert!(close(p, q, 8), "{:?} vs {:?}", p.shape(), q.shape());
    }
    // The reduction runs as generated code: the kernels dump lists it.
    let dir = std::env::temp_dir().join(format!("kiln-jit-dump-{}", std::process::id()));
    let dump = kiln::dump::DumpOptions {
        stages: vec!["kernels".into()],
        dir: Some(dir.clone()),
        ..Default::default()
    };
    let opts = kiln::CompileOptions {
        name: "lse".into(),
        dump,
        backend: Some(Backend::Cpu),
        ..Default::default()
    };
    let f = function(&[&x], &[&lse]).options(opts).compile().unwrap();
    assert!(kiln::ir::text::print_func(f.func()).contains("fused_reduce \"sum\""));
    let text = std::fs::read_to_string(dir.join("lse.06.kernels.txt")).unwrap();
    assert!(
        text.contains("reduce sum over axes [1] (generated"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn call_into_writes_compiled_outputs_into_the_callers_buffers() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None]);
    let y = (&x * 2.0).exp() + 1.0;
    let s = x.sum(None, false);
    let f = function(&[&x], &[&y, &s])
        .backend(Backend::Cpu)
        .compile()
        .unwrap();
    let xv = ArrayD::from_shape_fn(IxDyn(&[1000]), |i| i[0] as f32 * 1e-3);
    let mut outs = vec![
        Tensor::zeros(kiln::f32, &[1000]),
        Tensor::zeros(kiln::f32, &[]),
    ];
    let addr = |t: &Tensor| match t {
        Tensor::F32(a) => a.as_ptr() as usize,
        _ => 0,
    };
    let before = addr(&outs[0]);
    for _ in 0..3 {
        f.call_into(&[xv.view()], &mut outs).unwrap();
        assert_eq!(addr(&outs[0]), before, "the kernel wrote into a new buffer");
    }
    let want = f.call(&[xv.view()]).unwrap();
    assert!(outs[0].bit_eq(&want[0]) && outs[1].bit_eq(&want[1]));
    // A buffer of the wrong shape is replaced, not written out of bounds.
    let mut small = vec![
        Tensor::zeros(kiln::f32, &[3]),
        Tensor::zeros(kiln::f32, &[]),
    ];
    f.call_into(&[xv.view()], &mut small).unwrap();
    assert_eq!(small[0].shape(), &[1000]);
}

/// Rows of every length from 1 to 40 (no vector, a part of the main loop's four vectors,
/// several iterations of it, and every tail of single vectors and scalars), f32 and f64, with
/// inputs that vary along the row, are constant along it, and are one element: exact
/// arithmetic, so the generated loops must give the interpreter's bits, and known shapes,
/// so the types tell the kernel which input is which.
#[test]
fn vector_loops_of_every_row_length_match_the_interpreter() {
    for cols in 1..=40usize {
        for f64_ in [false, true] {
            let dt = if f64_ { kiln::f64 } else { kiln::f32 };
            let g = Graph::new();
            let x = g.input("x", dt, [Some(3), Some(cols as i64)]);
            let r = g.input("r", dt, [Some(cols as i64)]);
            let c = g.input("c", dt, [Some(3), Some(1)]);
            let out = &x * &r + &c - &x;
            let xv = ArrayD::from_shape_fn(IxDyn(&[3, cols]), |i| {
                (i[0] * 41 + i[1]) as f64 * 0.37 - 5.0
            });
            let rv = ArrayD::from_shape_fn(IxDyn(&[cols]), |i| i[0] as f64 * 0.11 + 0.5);
            let cv = ArrayD::from_shape_fn(IxDyn(&[3, 1]), |i| i[0] as f64 - 1.25);
            let t = |a: &ArrayD<f64>| -> Tensor {
                if f64_ {
                    Tensor::F64(a.clone())
                } else {
                    Tensor::F32(a.mapv(|v| v as f32))
                }
            };
            let (xt, rt, ct) = (t(&xv), t(&rv), t(&cv));
            let (a, b) = both(&[&x, &r, &c], &[&out], &[xt.view(), rt.view(), ct.view()]);
            assert!(
                a[0].bit_eq(&b[0]),
                "cols {cols}, f64 {f64_}: {:?} vs {:?}",
                a[0],
                b[0]
            );
        }
    }
}
