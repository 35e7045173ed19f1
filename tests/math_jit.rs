//! The CPU backend's transcendentals are the shared math expansions (`kiln::math`), so the
//! generated code, scalar and SIMD, must give exactly the bits of the Rust evaluators of the
//! same expansions, for ordinary inputs, specials and the rare-input fallback alike; and it
//! must stay within a few ulps of the reference interpreter (which calls the C library).

mod common;

use kiln::ir::UnaryOp;
use kiln::math::{unary, Eval32, Eval64, MathFn};
use kiln::{function, Backend, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

const FUNCS: &[(UnaryOp, MathFn)] = &[
    (UnaryOp::Exp, MathFn::Exp),
    (UnaryOp::Expm1, MathFn::Expm1),
    (UnaryOp::Log, MathFn::Log),
    (UnaryOp::Log1p, MathFn::Log1p),
    (UnaryOp::Sin, MathFn::Sin),
    (UnaryOp::Cos, MathFn::Cos),
    (UnaryOp::Tan, MathFn::Tan),
    (UnaryOp::Tanh, MathFn::Tanh),
    (UnaryOp::Sigmoid, MathFn::Sigmoid),
    (UnaryOp::Erf, MathFn::Erf),
];

/// Inputs over the whole line: a log-spaced sweep of both signs, small and huge values, the
/// specials, and values around the usual thresholds. An odd count, so the vector loop has a
/// tail.
fn inputs() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MIN_POSITIVE,
        1e-310,
        -1e-310,
        88.72,
        88.73,
        -103.9,
        -104.0,
        709.7,
        709.8,
        -745.2,
        1e5,
        -1e5,
        1e22,
        3.0e38,
        -0.999_999,
        -1.0 - 1e-7,
    ];
    let mut x = 1e-30f64;
    while x < 1e30 {
        v.push(x);
        v.push(-x);
        x *= 1.0173;
    }
    for i in 0..4000 {
        v.push((i as f64 - 2000.0) * 0.01);
    }
    if v.len() % 2 == 0 {
        v.push(0.25);
    }
    v
}

fn compiled(u: UnaryOp, dtype: kiln::DType, n: usize) -> kiln::Function {
    let g = Graph::new();
    let x = g.input("x", dtype, [Some(n as i64)]);
    function(&[&x], &[&x.unary(u)])
        .backend(Backend::Cpu)
        .compile()
        .unwrap()
}

fn ulps32(a: f32, b: f32) -> u64 {
    if a.is_nan() && b.is_nan() || a == b {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
        return u64::MAX;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        (if i < 0 { i32::MIN - i } else { i }) as i64
    };
    (key(a) - key(b)).unsigned_abs()
}

fn ulps64(a: f64, b: f64) -> u64 {
    if a.is_nan() && b.is_nan() || a == b {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
        return u64::MAX;
    }
    let key = |x: f64| {
        let i = x.to_bits() as i64;
        (if i < 0 { i64::MIN - i } else { i }) as i128
    };
    (key(a) - key(b)).unsigned_abs() as u64
}

#[test]
fn generated_f32_code_gives_the_evaluators_bits() {
    let xs: Vec<f32> = inputs().iter().map(|&x| x as f32).collect();
    let n = xs.len();
    let arr = ArrayD::from_shape_vec(IxDyn(&[n]), xs.clone()).unwrap();
    for &(u, f) in FUNCS {
        let out = compiled(u, kiln::f32, n).call(&[arr.view()]).unwrap();
        let Tensor::F32(got) = &out[0] else {
            panic!("f32 expected")
        };
        for (i, (&x, &g)) in xs.iter().zip(got.iter()).enumerate() {
            let want = unary(&mut Eval32, f, x);
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{f:?}({x:e}) at {i}: generated {g:e}, evaluator {want:e}"
            );
        }
    }
}

#[test]
fn generated_f64_code_gives_the_evaluators_bits() {
    let xs = inputs();
    let n = xs.len();
    let arr = ArrayD::from_shape_vec(IxDyn(&[n]), xs.clone()).unwrap();
    for &(u, f) in FUNCS {
        let out = compiled(u, kiln::f64, n).call(&[arr.view()]).unwrap();
        let Tensor::F64(got) = &out[0] else {
            panic!("f64 expected")
        };
        for (i, (&x, &g)) in xs.iter().zip(got.iter()).enumerate() {
            let want = unary(&mut Eval64, f, x);
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{f:?}({x:e}) at {i}: generated {g:e}, evaluator {want:e}"
            );
        }
    }
}

#[test]
fn the_cpu_backend_stays_within_a_few_ulps_of_the_interpreter() {
    let xs = inputs();
    let n = xs.len();
    let a64 = ArrayD::from_shape_vec(IxDyn(&[n]), xs.clone()).unwrap();
    let a32 = a64.mapv(|x| x as f32);
    for &(u, _) in FUNCS {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(n as i64)]);
        let y = g.input("y", kiln::f64, [Some(n as i64)]);
        let outs = [x.unary(u), y.unary(u)];
        let run = |b: Backend| {
            function(&[&x, &y], &[&outs[0], &outs[1]])
                .backend(b)
                .compile()
                .unwrap()
                .call::<kiln::TensorRef>(&[a32.view().into(), a64.view().into()])
                .unwrap()
        };
        let (cpu, interp) = (run(Backend::Cpu), run(Backend::Interp));
        let (Tensor::F32(c), Tensor::F32(r)) = (&cpu[0], &interp[0]) else {
            panic!()
        };
        let worst32 = c.iter().zip(r).map(|(&a, &b)| ulps32(a, b)).max().unwrap();
        let (Tensor::F64(c), Tensor::F64(r)) = (&cpu[1], &interp[1]) else {
            panic!()
        };
        let worst64 = c.iter().zip(r).map(|(&a, &b)| ulps64(a, b)).max().unwrap();
        // Each side is within about 1 ulp of the true value.
        assert!(worst32 <= 4, "{}: f32 differs by {worst32} ulps", u.name());
        assert!(worst64 <= 4, "{}: f64 differs by {worst64} ulps", u.name());
    }
}

/// The vector loop is taken for programs with transcendentals in both widths: a construct
/// Cranelift cannot lower for vectors would silently fall back to scalar code.
#[test]
fn transcendental_kernels_compile_to_vector_code() {
    for (dtype, lanes) in [(kiln::f32, "f32x4"), (kiln::f64, "f64x2")] {
        let g = Graph::new();
        let x = g.input("x", dtype, [None]);
        let y = g.input("y", dtype, [None]);
        let mut out = (-(&x * &x)).exp() * y.sin() + &x * &y * 0.5;
        for &(u, _) in FUNCS {
            out = out.unary(u) + &x;
        }
        let text = common::clif_of(lanes, |opts| {
            function(&[&x, &y], &[&out])
                .options(opts)
                .compile()
                .unwrap();
        });
        assert!(text.contains(lanes), "no {lanes} code in the clif dump");
    }
}
