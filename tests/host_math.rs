//! Staged math (`kiln::jit_cpu::host_math`): where the host has AVX2 and FMA, the CPU backend's
//! vector loops hand their transcendentals to rustc-compiled 256-bit buffer functions, a chunk
//! of columns at a time. The results must be the bits of the evaluators (`kiln::math`), for
//! programs with several math ops (one reading another's result, one reading an input
//! directly), inputs broadcast along and across the rows, every row length around the vector
//! width and the chunk size, f32 and f64; and sums of such programs must be the reference's
//! pairwise sums of those bits. Without AVX2 the same tests check the inline code.

mod common;

use kiln::ir::UnaryOp;
use kiln::math::{unary, Eval32, Eval64, MathFn};
use kiln::{function, Backend, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

const LENGTHS: &[usize] = &[
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 127, 128, 129, 255, 256, 257, 1000,
];
const ROWS: usize = 3;

/// Values in `[-6, 6)`, and a few huge ones (sin's rare-input fallback).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if i % 97 == 13 {
                3.0e9 * (i as f64 + 1.0)
            } else {
                (s >> 11) as f64 / (1u64 << 53) as f64 * 12.0 - 6.0
            }
        })
        .collect()
}

/// `sin(exp(x - z) + y) * exp(x - z) + tanh(y)`, with `x` a `[ROWS, n]` matrix, `y` a row
/// (broadcast across rows, contiguous along them) and `z` a column (one value per row): three
/// stages, the second reading the first's result, the third reading `y` directly.
macro_rules! formula {
    ($e:expr, $x:expr, $y:expr, $z:expr) => {{
        let t = unary($e, MathFn::Exp, $x - $z);
        unary($e, MathFn::Sin, t + $y) * t + unary($e, MathFn::Tanh, $y)
    }};
}

/// With `n`, every shape is known (so the kernels know which inputs are contiguous along the
/// rows, and hand them to the buffer functions directly); without, only the column's width.
fn graph(dtype: kiln::DType, n: Option<usize>) -> (Graph, [kiln::Var; 3], kiln::Var) {
    let g = Graph::new();
    let n = n.map(|n| n as i64);
    let rows = n.map(|_| ROWS as i64);
    let x = g.input("x", dtype, [rows, n]);
    let y = g.input("y", dtype, [n]);
    let z = g.input("z", dtype, [rows, Some(1)]);
    let t = (&x - &z).unary(UnaryOp::Exp);
    let out = (&t + &y).unary(UnaryOp::Sin) * &t + y.unary(UnaryOp::Tanh);
    (g, [x, y, z], out)
}

#[test]
fn staged_map_kernels_give_the_evaluators_bits() {
    for (&n, known) in LENGTHS.iter().flat_map(|n| [(n, true), (n, false)]) {
        let shape = known.then_some(n);
        let (_g, [x, y, z], out) = graph(kiln::f32, shape);
        let f = function(&[&x, &y, &z], &[&out])
            .backend(Backend::Cpu)
            .compile()
            .unwrap();
        let xv: Vec<f32> = values(ROWS * n, 1).iter().map(|&v| v as f32).collect();
        let yv: Vec<f32> = values(n, 2).iter().map(|&v| v as f32).collect();
        let zv: Vec<f32> = values(ROWS, 3).iter().map(|&v| (v / 4.0) as f32).collect();
        let xa = ArrayD::from_shape_vec(IxDyn(&[ROWS, n]), xv.clone()).unwrap();
        let ya = ArrayD::from_shape_vec(IxDyn(&[n]), yv.clone()).unwrap();
        let za = ArrayD::from_shape_vec(IxDyn(&[ROWS, 1]), zv.clone()).unwrap();
        let got = f.call(&[xa.view(), ya.view(), za.view()]).unwrap();
        let Tensor::F32(got) = &got[0] else { panic!() };
        for (i, g) in got.iter().enumerate() {
            let (r, c) = (i / n, i % n);
            let want: f32 = formula!(&mut Eval32, xv[i], yv[c], zv[r]);
            assert!(
                g.to_bits() == want.to_bits() || g.is_nan() && want.is_nan(),
                "f32 n={n} at ({r}, {c}): {g:e} against {want:e}"
            );
        }

        let (_g, [x, y, z], out) = graph(kiln::f64, shape);
        let f = function(&[&x, &y, &z], &[&out])
            .backend(Backend::Cpu)
            .compile()
            .unwrap();
        let (xv, yv) = (values(ROWS * n, 4), values(n, 5));
        let zv: Vec<f64> = values(ROWS, 6).iter().map(|v| v / 4.0).collect();
        let xa = ArrayD::from_shape_vec(IxDyn(&[ROWS, n]), xv.clone()).unwrap();
        let ya = ArrayD::from_shape_vec(IxDyn(&[n]), yv.clone()).unwrap();
        let za = ArrayD::from_shape_vec(IxDyn(&[ROWS, 1]), zv.clone()).unwrap();
        let got = f.call(&[xa.view(), ya.view(), za.view()]).unwrap();
        let Tensor::F64(got) = &got[0] else { panic!() };
        for (i, g) in got.iter().enumerate() {
            let (r, c) = (i / n, i % n);
            let want: f64 = formula!(&mut Eval64, xv[i], yv[c], zv[r]);
            assert!(
                g.to_bits() == want.to_bits() || g.is_nan() && want.is_nan(),
                "f64 n={n} at ({r}, {c}): {g:e} against {want:e}"
            );
        }
    }
}

#[test]
fn staged_row_sums_are_the_pairwise_sums_of_the_evaluators_bits() {
    for (&n, known) in LENGTHS.iter().flat_map(|n| [(n, true), (n, false)]) {
        let (_g, [x, y, z], out) = graph(kiln::f32, known.then_some(n));
        let s = out.sum(Some(&[1]), false);
        let f = function(&[&x, &y, &z], &[&s])
            .backend(Backend::Cpu)
            .compile()
            .unwrap();
        let xv: Vec<f32> = values(ROWS * n, 7).iter().map(|&v| v as f32).collect();
        let yv: Vec<f32> = values(n, 8).iter().map(|&v| v as f32).collect();
        let zv: Vec<f32> = values(ROWS, 9).iter().map(|&v| (v / 4.0) as f32).collect();
        let xa = ArrayD::from_shape_vec(IxDyn(&[ROWS, n]), xv.clone()).unwrap();
        let ya = ArrayD::from_shape_vec(IxDyn(&[n]), yv.clone()).unwrap();
        let za = ArrayD::from_shape_vec(IxDyn(&[ROWS, 1]), zv.clone()).unwrap();
        let got = f.call(&[xa.view(), ya.view(), za.view()]).unwrap();

        // The same values from the evaluators, summed by the reference interpreter.
        let terms: Vec<f32> = (0..ROWS * n)
            .map(|i| formula!(&mut Eval32, xv[i], yv[i % n], zv[i / n]))
            .collect();
        let g2 = Graph::new();
        let t = g2.input("t", kiln::f32, [None, None]);
        let reference = function(&[&t], &[&t.sum(Some(&[1]), false)])
            .backend(Backend::Interp)
            .compile()
            .unwrap();
        let ta = ArrayD::from_shape_vec(IxDyn(&[ROWS, n]), terms).unwrap();
        let want = reference.call(&[ta.view()]).unwrap();
        let (Tensor::F32(got), Tensor::F32(want)) = (&got[0], &want[0]) else {
            panic!()
        };
        for (r, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(),
                "n={n} row {r}: {g:e} against {w:e}"
            );
        }
    }
}

/// Where the host has AVX2 and FMA (and `KILN_CPU_HOST_MATH` does not turn it off), the
/// kernels do call the buffer functions: the tests above then check the staged code, not the
/// inline code by accident.
#[test]
fn kernels_call_the_buffer_functions_where_the_host_has_them() {
    let (_g, [x, y, z], out) = graph(kiln::f32, None);
    let s = out.sum(Some(&[1]), false);
    let lse_sum = (&x - &z).unary(UnaryOp::Exp).sum(Some(&[1]), false);
    let text = common::clif_of("host-math", |opts| {
        function(&[&x, &y, &z], &[&out, &s, &lse_sum])
            .options(opts)
            .compile()
            .unwrap();
    });
    // The plan reads `x` and `y` along their `?` dims (never broadcast) and `z` broadcast
    // along the rows, so `exp(x - z)` may call the shifted exponential's buffer function and
    // `sin(t + y)` the biased sine's.
    let calls: [&[&str]; 3] = [
        &["kiln_rt_vmath_exp_f32", "kiln_rt_vmath_shifted_exp_f32"],
        &["kiln_rt_vmath_sin_f32", "kiln_rt_vmath_biased_sin_f32"],
        &["kiln_rt_vmath_tanh_f32", "kiln_rt_vmath_biased_tanh_f32"],
    ];
    if kiln::jit_cpu::host_math::enabled() {
        for c in calls {
            assert!(
                c.iter().any(|name| text.contains(name)),
                "no call of {c:?} in the clif dump"
            );
        }
    } else {
        eprintln!("host math is off here (no AVX2 + FMA, or KILN_CPU_HOST_MATH=0)");
        assert!(!text.contains("kiln_vmath"));
    }
}

/// `sum(exp(x - z))` over rows (logsumexp's sum): the leaf's whole sum comes from the summing
/// buffer function, in the reference's pairwise order; f32 and f64, every length.
#[test]
fn sums_of_a_math_op_itself_are_the_pairwise_sums_of_the_evaluators_bits() {
    fn run<T: Copy>(
        dtype: kiln::DType,
        cast: fn(f64) -> T,
        eval: fn(T, T) -> T,
        tensor: fn(ArrayD<T>) -> Tensor,
    ) {
        for (&n, known) in LENGTHS.iter().flat_map(|n| [(n, true), (n, false)]) {
            let g = Graph::new();
            let (rows, cols) = if known {
                (Some(ROWS as i64), Some(n as i64))
            } else {
                (None, None)
            };
            let x = g.input("x", dtype, [rows, cols]);
            let z = g.input("z", dtype, [rows, Some(1)]);
            let s = (&x - &z).unary(UnaryOp::Exp).sum(Some(&[1]), false);
            let f = function(&[&x, &z], &[&s])
                .backend(Backend::Cpu)
                .compile()
                .unwrap();
            let xv: Vec<T> = values(ROWS * n, 11).into_iter().map(cast).collect();
            let zv: Vec<T> = values(ROWS, 12)
                .into_iter()
                .map(|v| cast(v / 4.0))
                .collect();
            let xa = tensor(ArrayD::from_shape_vec(IxDyn(&[ROWS, n]), xv.clone()).unwrap());
            let za = tensor(ArrayD::from_shape_vec(IxDyn(&[ROWS, 1]), zv.clone()).unwrap());
            let got = f.call(&[xa.view(), za.view()]).unwrap();

            let terms: Vec<T> = (0..ROWS * n).map(|i| eval(xv[i], zv[i / n])).collect();
            let g2 = Graph::new();
            let t = g2.input("t", dtype, [None, None]);
            let reference = function(&[&t], &[&t.sum(Some(&[1]), false)])
                .backend(Backend::Interp)
                .compile()
                .unwrap();
            let ta = tensor(ArrayD::from_shape_vec(IxDyn(&[ROWS, n]), terms).unwrap());
            let want = reference.call(&[ta.view()]).unwrap();
            let (got, want) = (got[0].to_f64_vec(), want[0].to_f64_vec());
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(),
                    "{dtype:?} n={n} row {r}: {g:e} against {w:e}"
                );
            }
        }
    }
    run::<f32>(
        kiln::f32,
        |v| v as f32,
        |x, z| unary(&mut Eval32, MathFn::Exp, x - z),
        Tensor::F32,
    );
    run::<f64>(
        kiln::f64,
        |v| v,
        |x, z| unary(&mut Eval64, MathFn::Exp, x - z),
        Tensor::F64,
    );
}

/// Maps whose one output is their last math op's result: the buffer function writes the
/// output row itself (no last stage), and an argument that is one input plus another
/// (`tanh(x W + b)`) goes to the biased buffer function, the row in one call. Bits against the
/// interpreter for a bias along the row, a whole-matrix addend, a shifted argument, two
/// stages, an argument computed by a loop, and a product's result overwritten in place; every
/// row length around the vector width and the chunk size; known and unknown shapes; f32 and
/// f64.
#[test]
fn maps_ending_in_a_math_op_give_the_evaluators_bits() {
    use MathFn::{Exp, Log1p, Sin, Tanh};
    // Inputs: x and w `[ROWS, n]`, b `[n]`, z `[ROWS, 1]`, c `[ROWS]`. Each case is an
    // argument (its bits from the interpreter: arithmetic only, or a product whose bits both
    // backends share) and the math ops applied to it in turn.
    type Arg = fn(&[kiln::Var; 5]) -> kiln::Var;
    let cases: [(&str, &[usize], Arg, &[MathFn]); 6] = [
        ("tanh(x + b)", &[0, 1], |[x, b, ..]| x + b, &[Tanh]),
        ("exp(w + x)", &[0, 2], |[x, _, w, ..]| w + x, &[Exp]),
        ("sin(x - z)", &[0, 3], |[x, _, _, z, _]| x - z, &[Sin]),
        (
            "log1p(exp(x + b))",
            &[0, 1],
            |[x, b, ..]| x + b,
            &[Exp, Log1p],
        ),
        ("tanh(x * b)", &[0, 1], |[x, b, ..]| x * b, &[Tanh]),
        // The product's result is overwritten in place; its rows are ROWS long.
        (
            "tanh(x w^T + c)",
            &[0, 2, 4],
            |[x, _, w, _, c]| x.matmul(&w.t()) + c,
            &[Tanh],
        ),
    ];
    let math_op = |f: MathFn| match f {
        Exp => UnaryOp::Exp,
        Log1p => UnaryOp::Log1p,
        Sin => UnaryOp::Sin,
        _ => UnaryOp::Tanh,
    };
    for dtype in [kiln::f32, kiln::f64] {
        let eval = |fs: &[MathFn], v: f64| match dtype {
            kiln::DType::F32 => fs.iter().fold(v as f32, |v, &f| unary(&mut Eval32, f, v)) as f64,
            _ => fs.iter().fold(v, |v, &f| unary(&mut Eval64, f, v)),
        };
        for (&n, known) in LENGTHS.iter().flat_map(|n| [(n, true), (n, false)]) {
            let g = Graph::new();
            let (rows, cols) = (known.then_some(ROWS as i64), known.then_some(n as i64));
            let vars = [
                g.input("x", dtype, [rows, cols]),
                g.input("b", dtype, [cols]),
                g.input("w", dtype, [rows, cols]),
                g.input("z", dtype, [rows, Some(1)]),
                g.input("c", dtype, [rows]),
            ];
            let args = [
                common::normal_values(dtype, &[ROWS, n], 21, 2.0),
                common::normal_values(dtype, &[n], 22, 1.0),
                common::normal_values(dtype, &[ROWS, n], 23, 1.0),
                common::normal_values(dtype, &[ROWS, 1], 24, 1.0),
                common::normal_values(dtype, &[ROWS], 25, 1.0),
            ];
            for (name, used, arg, fs) in cases {
                let a = arg(&vars);
                let out = fs.iter().fold(a.clone(), |v, &f| v.unary(math_op(f)));
                let inputs: Vec<&kiln::Var> = used.iter().map(|&k| &vars[k]).collect();
                let views: Vec<_> = used.iter().map(|&k| args[k].view()).collect();
                let run = |v: &kiln::Var, backend| {
                    let f = function(&inputs, &[v]).backend(backend).compile().unwrap();
                    f.call(&views).unwrap().remove(0).to_f64_vec()
                };
                let got = run(&out, Backend::Cpu);
                let want: Vec<f64> = run(&a, Backend::Interp)
                    .into_iter()
                    .map(|v| eval(fs, v))
                    .collect();
                assert_eq!(got.len(), want.len(), "{name}");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(),
                        "{name} {dtype:?} n={n} known={known} at {i}: {g:e} against {w:e}"
                    );
                }
            }
        }
    }
    // The kernels do take the new paths where the host has the buffer functions.
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(ROWS as i64), Some(64)]);
    let b = g.input("b", kiln::f32, [Some(64)]);
    let text = common::clif_of("host-math-biased", |opts| {
        function(&[&x, &b], &[&(&x + &b).tanh()])
            .options(opts)
            .compile()
            .unwrap();
    });
    if kiln::jit_cpu::host_math::enabled() {
        assert!(text.contains("kiln_rt_vmath_biased_tanh_f32"), "{text}");
    } else {
        eprintln!("host math is off here (no AVX2 + FMA, or KILN_CPU_HOST_MATH=0)");
    }
}
