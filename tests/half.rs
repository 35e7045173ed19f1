//! `f16` and `bf16`: storage types computed in f32. Casts to and from every dtype (every f16
//! bit pattern, ties, subnormals, overflow, NaN) on every backend against the host's rounding
//! (`kiln::ir::f16_of`, one rounding from f64), arithmetic on halves through the graph API
//! (computed in f32, rounded back), `matmul` reading halves, gradients of half parameters,
//! data movement, the text form, `.npy` files, and the errors of the IR's computing ops.

mod common;
use common::{backends_with_gpu_host, call_both_ways, Build};
use kiln::half::{bf16, f16};
use kiln::{function, DType, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

fn arr<T: Clone>(v: &[T]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap()
}

/// Runs `build` on every backend, optimizer off and on, and checks each result against
/// `want` bit for bit (NaNs: any NaN).
fn check_exact(build: &Build, inputs: &[Tensor], want: &[Tensor]) {
    for backend in backends_with_gpu_host() {
        for got in call_both_ways(backend, build, inputs) {
            let got = got.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert_eq!(g.dtype(), w.dtype(), "{backend:?} output {k}");
                assert_eq!(g.shape(), w.shape(), "{backend:?} output {k}");
                let (gv, wv) = (g.to_f64_vec(), w.to_f64_vec());
                for (i, (x, y)) in gv.iter().zip(&wv).enumerate() {
                    let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
                    assert!(
                        same,
                        "{backend:?} output {k} element {i}: {x:e}, want {y:e}"
                    );
                }
            }
        }
    }
}

/// Values that probe a conversion to a half: ties (to even, both ways), just past ties,
/// the overflow threshold, subnormals, underflow, signed zeros, infinities and NaN.
fn probes() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.5,
        0.1,
        1.0 / 3.0,
        65504.0,
        65519.0,
        65520.0,
        -65520.0,
        1e6,
        3.0e38,
        3.4e38,
        1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        2f64.powi(-14),
        2f64.powi(-24),
        2f64.powi(-25),
        3.0 * 2f64.powi(-26),
        2f64.powi(-126),
        2f64.powi(-133),
        2f64.powi(-149),
        1e-300,
    ];
    for (k, &ulp) in [2f64.powi(-10), 2f64.powi(-7)].iter().enumerate() {
        for base in [1.0, 1.0 + ulp, 1024.0 * (1.0 + 3.0 * ulp)] {
            let tie = base * (1.0 + ulp / 2.0);
            let nudge = base * 2f64.powi(-40 - k as i32);
            v.extend([tie, -tie, tie + nudge, tie - nudge]);
        }
    }
    v
}

fn want_half(to: DType, xs: &[f64]) -> Tensor {
    match to {
        DType::F16 => Tensor::F16(arr(&xs
            .iter()
            .map(|&x| kiln::ir::f16_of(x))
            .collect::<Vec<_>>())),
        _ => Tensor::BF16(arr(&xs
            .iter()
            .map(|&x| kiln::ir::bf16_of(x))
            .collect::<Vec<_>>())),
    }
}

#[test]
fn casts_to_halves_round_once_to_nearest_even_on_every_backend() {
    let xs = probes();
    for to in [kiln::f16, kiln::bf16] {
        // From f64: one rounding (never through a rounded f32).
        let input = Tensor::F64(arr(&xs));
        check_exact(
            &|g| {
                let x = g.input("x", kiln::f64, [None]);
                (vec![x.clone()], vec![x.cast(to)])
            },
            &[input],
            &[want_half(to, &xs)],
        );
        // From f32: the f32 values first.
        let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
        let wide: Vec<f64> = xs32.iter().map(|&x| x as f64).collect();
        check_exact(
            &|g| {
                let x = g.input("x", kiln::f32, [None]);
                (vec![x.clone()], vec![x.cast(to)])
            },
            &[Tensor::F32(arr(&xs32))],
            &[want_half(to, &wide)],
        );
        // From integers, rounded once: an i64 beyond 2^53 is taken to f64 rounded to odd
        // (toward zero, the last bit set where inexact), which keeps the half's rounding the
        // only one; `(1 << 60) + (1 << 52) + 1` is just past a bf16 tie and rounds up.
        let ints: Vec<i64> = vec![
            0,
            1,
            -7,
            2049,
            2051,
            65519,
            65520,
            1 << 40,
            (1 << 60) + (1 << 52) + 1,
            (1 << 60) + (1 << 52),
            i64::MAX,
            i64::MIN,
        ];
        let odd = |i: i64| {
            let d = i as f64;
            let (exact, wide) = (i as i128, d as i128);
            match wide == exact {
                true => d,
                false if wide.abs() > exact.abs() => f64::from_bits((d.to_bits() - 1) | 1),
                false => f64::from_bits(d.to_bits() | 1),
            }
        };
        let wide: Vec<f64> = ints.iter().map(|&i| odd(i)).collect();
        check_exact(
            &|g| {
                let x = g.input("x", kiln::i64, [None]);
                (vec![x.clone()], vec![x.cast(to)])
            },
            &[Tensor::I64(arr(&ints))],
            &[want_half(to, &wide)],
        );
        let small: Vec<i32> = vec![0, -1, 4097, 16777217, i32::MAX, i32::MIN];
        let wide: Vec<f64> = small.iter().map(|&i| i as f64).collect();
        check_exact(
            &|g| {
                let x = g.input("x", kiln::i32, [None]);
                (vec![x.clone()], vec![x.cast(to)])
            },
            &[Tensor::I32(arr(&small))],
            &[want_half(to, &wide)],
        );
    }
}

#[test]
fn every_f16_and_bf16_widens_exactly_and_converts_to_every_dtype() {
    let bits: Vec<u16> = (0..=u16::MAX).collect();
    let h16: Vec<f16> = bits.iter().map(|&b| f16::from_bits(b)).collect();
    let hb: Vec<bf16> = bits.iter().map(|&b| bf16::from_bits(b)).collect();
    for (input, vals) in [
        (
            Tensor::F16(arr(&h16)),
            h16.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
        ),
        (
            Tensor::BF16(arr(&hb)),
            hb.iter().map(|x| x.to_f64()).collect(),
        ),
    ] {
        let from = input.dtype();
        let f32s: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
        let i32s: Vec<i32> = vals.iter().map(|&x| x as i32).collect();
        let bools: Vec<bool> = vals.iter().map(|&x| x != 0.0).collect();
        let other = if from == DType::F16 {
            kiln::bf16
        } else {
            kiln::f16
        };
        check_exact(
            &|g| {
                let x = g.input("x", from, [None]);
                let outs = vec![
                    x.cast(kiln::f32),
                    x.cast(kiln::f64),
                    x.cast(kiln::i32),
                    x.cast(kiln::bool),
                    x.cast(other),
                ];
                (vec![x], outs)
            },
            std::slice::from_ref(&input),
            &[
                Tensor::F32(arr(&f32s)),
                Tensor::F64(arr(&vals)),
                Tensor::I32(arr(&i32s)),
                Tensor::Bool(arr(&bools)),
                want_half(other, &vals),
            ],
        );
    }
}

#[test]
fn every_f32_exponent_rounds_to_halves_like_the_host() {
    // A stride through every f32 bit pattern that visits every exponent and both signs,
    // with the patterns around each half tie (low bits 0x0FFF..0x1001 and 0x7FFF..0x8001).
    let mut xs = Vec::new();
    for hi in (0..=0xFFFFu32).step_by(3) {
        for lo in [
            0x0000, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF,
        ] {
            xs.push(f32::from_bits(hi << 16 | lo));
        }
    }
    let wide: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    check_exact(
        &|g| {
            let x = g.input("x", kiln::f32, [None]);
            (vec![x.clone()], vec![x.cast(kiln::f16), x.cast(kiln::bf16)])
        },
        &[Tensor::F32(arr(&xs))],
        &[want_half(kiln::f16, &wide), want_half(kiln::bf16, &wide)],
    );
}

#[test]
fn arithmetic_on_halves_is_computed_in_f32_and_rounded_back() {
    let xs: Vec<f32> = (0..40).map(|i| (i as f32 - 20.0) * 0.37).collect();
    let ys: Vec<f32> = (0..40).map(|i| 1.0 + (i as f32) * 0.11).collect();
    for h in [kiln::f16, kiln::bf16] {
        let round = |v: f32| kiln::ir::round_to(h, v as f64) as f32;
        let (xh, yh): (Vec<f32>, Vec<f32>) = (
            xs.iter().map(|&v| round(v)).collect(),
            ys.iter().map(|&v| round(v)).collect(),
        );
        let half_of = |v: &[f32]| kiln::perform::cast(&Tensor::F32(arr(v)), h);
        // Each op rounds its f32 result to the half: (x * y + 1) / y, and max(x, y).
        let prod: Vec<f32> = xh.iter().zip(&yh).map(|(x, y)| round(x * y)).collect();
        let sum: Vec<f32> = prod.iter().map(|p| round(p + 1.0)).collect();
        let quot: Vec<f32> = sum.iter().zip(&yh).map(|(s, y)| round(s / y)).collect();
        let max: Vec<f32> = xh.iter().zip(&yh).map(|(x, y)| x.max(*y)).collect();
        let total = xh.iter().sum::<f32>();
        check_exact(
            &|g| {
                let x = g.input("x", h, [None]);
                let y = g.input("y", h, [None]);
                let q = (&x * &y + 1.0) / &y;
                let m = x.maximum(&y);
                let s = x.sum(None, false);
                let lt = x.lt(&y);
                (vec![x, y], vec![q, m, s, lt])
            },
            &[half_of(&xh), half_of(&yh)],
            &[
                half_of(&quot),
                half_of(&max),
                kiln::perform::cast(&Tensor::F32(ArrayD::from_elem(IxDyn(&[]), total)), h),
                Tensor::Bool(arr(&xh
                    .iter()
                    .zip(&yh)
                    .map(|(x, y)| x < y)
                    .collect::<Vec<_>>())),
            ],
        );
        // Mixed with f32, a half is widened and the result stays f32.
        let g = Graph::new();
        let x = g.input("x", h, [None]);
        let z = g.input("z", kiln::f32, [None]);
        assert_eq!((&x + &z).dtype(), DType::F32);
        assert_eq!(x.exp().dtype(), h);
    }
}

#[test]
fn matmul_reads_halves_and_gives_the_f32_product() {
    let (m, k, n) = (7, 33, 5);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.125)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.25)
        .collect();
    for h in [kiln::f16, kiln::bf16] {
        let ta = kiln::perform::cast(
            &Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[m, k]), a.clone()).unwrap()),
            h,
        );
        let tb = kiln::perform::cast(
            &Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[k, n]), b.clone()).unwrap()),
            h,
        );
        // Small integers times powers of two: exact in every dtype, so any order agrees.
        let mut want = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        let want = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[m, n]), want).unwrap());
        check_exact(
            &|g| {
                let x = g.input("a", h, [Some(m as i64), Some(k as i64)]);
                let y = g.input("b", h, [Some(k as i64), Some(n as i64)]);
                let p = x.matmul(&y);
                (vec![x, y], vec![p])
            },
            &[ta, tb],
            &[want],
        );
    }
}

#[test]
fn halves_move_through_views_concat_take_and_select_unchanged() {
    let v: Vec<f16> = (0..24)
        .map(|i| f16::from_f32(i as f32 * 0.5 - 3.0))
        .collect();
    let x = Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[4, 6]), v.clone()).unwrap());
    let t: Vec<f16> = (0..6)
        .flat_map(|j| (0..4).map(move |i| (i, j)))
        .map(|(i, j)| v[i * 6 + j])
        .collect();
    let rows: Vec<f16> = [2usize, 0]
        .iter()
        .flat_map(|&r| v[r * 6..r * 6 + 6].to_vec())
        .collect();
    let mut both = v.clone();
    both.extend(&v);
    let picked: Vec<f16> = v
        .iter()
        .map(|&e| if e.to_f32() > 0.0 { e } else { f16::ZERO })
        .collect();
    check_exact(
        &|g| {
            let x = g.input("x", kiln::f16, [Some(4), Some(6)]);
            let idx = g.constant(Tensor::I64(arr(&[2i64, 0])));
            let zero = kiln::Tensor::F16(ArrayD::from_elem(IxDyn(&[]), f16::ZERO));
            let picked = kiln::select(&x.gt(0.0), &x, g.constant(zero));
            let outs = vec![
                x.transpose(&[1, 0]).reshape(&[24]),
                x.take(&idx, 0),
                kiln::concat(&[&x, &x], 0).reshape(&[48]),
                picked.reshape(&[24]),
            ];
            (vec![x], outs)
        },
        &[x],
        &[
            Tensor::F16(arr(&t)),
            Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[2, 6]), rows).unwrap()),
            Tensor::F16(arr(&both)),
            Tensor::F16(arr(&picked)),
        ],
    );
}

#[test]
fn half_parameters_get_half_gradients_and_train() {
    // Least squares with bf16 weights, gradients taken through the f32 arithmetic: the
    // gradient is a bf16 and a few steps reduce the loss.
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(8), Some(3)]);
    let w = g.input("w", kiln::bf16, [Some(3)]);
    let target = g.input("t", kiln::f32, [Some(8)]);
    let pred = x.matmul(&w.cast(kiln::f32));
    let loss = ((&pred - &target) * (&pred - &target)).mean(None, false);
    let gw = kiln::grad(&loss, &[&w]).unwrap().remove(0);
    assert_eq!(gw.dtype(), DType::BF16);
    let step = (&w.cast(kiln::f32) - &gw.cast(kiln::f32) * 0.05).cast(kiln::bf16);
    let f = function(&[&x, &w, &target], &[&loss, &step])
        .compile()
        .unwrap();
    let xs: Vec<f32> = (0..24).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.5).collect();
    let true_w = [0.5f32, -1.0, 2.0];
    let ts: Vec<f32> = (0..8)
        .map(|r| (0..3).map(|c| xs[r * 3 + c] * true_w[c]).sum())
        .collect();
    let xs = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[8, 3]), xs).unwrap());
    let ts = Tensor::F32(arr(&ts));
    let mut wv = Tensor::BF16(arr(&[bf16::ZERO; 3]));
    let mut losses = Vec::new();
    for _ in 0..60 {
        let out = f.call(&[&xs, &wv, &ts]).unwrap();
        losses.push(out[0].to_f64_vec()[0]);
        wv = out[1].clone();
    }
    assert_eq!(wv.dtype(), DType::BF16);
    assert!(losses[59] < losses[0] * 0.01, "losses {losses:?}");
    // The same gradient as f32 weights holding the same values, rounded once.
    let g2 = Graph::new();
    let x2 = g2.input("x", kiln::f32, [Some(8), Some(3)]);
    let w2 = g2.input("w", kiln::f32, [Some(3)]);
    let t2 = g2.input("t", kiln::f32, [Some(8)]);
    let p2 = x2.matmul(&w2);
    let l2 = ((&p2 - &t2) * (&p2 - &t2)).mean(None, false);
    let gw2 = kiln::grad(&l2, &[&w2]).unwrap().remove(0);
    let f2 = function(&[&x2, &w2, &t2], &[&gw2]).compile().unwrap();
    let fg = function(&[&x, &w, &target], &[&gw]).compile().unwrap();
    let w32 = kiln::perform::cast(&wv, kiln::f32);
    let want = kiln::perform::cast(&f2.call(&[&xs, &w32, &ts]).unwrap()[0], kiln::bf16);
    assert_eq!(fg.call(&[&xs, &wv, &ts]).unwrap()[0], want);
}

fn parse(src: &str) -> kiln::ir::Func {
    let mut fs = kiln::ir::text::parse_funcs(src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    fs.remove(0)
}

#[test]
fn the_ir_refuses_arithmetic_on_halves_by_name() {
    let src = "func @f(%x: f16[3]) -> (f16[3]) {\n  %y = exp %x : f16[3]\n  return %y\n}\n";
    let err = format!("{:?}", kiln::ir::text::parse_funcs(src).unwrap_err());
    assert!(
        err.contains("exp computes in f32") && err.contains("storage type"),
        "{err}"
    );
    // Casts, data movement and matmul (to f32) parse, print and parse back.
    let src = "func @f(%x: f16[2, 3], %w: bf16[3]) -> (f32[2], bf16[3, 2], f16[3]) {\n  %a = cast %x {to = f32} : f32[2, 3]\n  %b = cast %w {to = f16} : f16[3]\n  %c = transpose %x {perm = [1, 0]} : f16[3, 2]\n  %d = cast %c {to = bf16} : bf16[3, 2]\n  %e = cast %a {to = bf16} : bf16[2, 3]\n  %m = matmul %e, %w : f32[2]\n  return %m, %d, %b\n}\n";
    let f = parse(src);
    let printed = kiln::ir::text::print_func(&f);
    let again = parse(&printed);
    assert_eq!(kiln::ir::text::print_func(&again), printed);
}

#[test]
fn half_constants_print_and_parse_back_exactly() {
    let vals: Vec<f16> = [0.1f32, -65504.0, 6.1e-5, 5.96e-8, 1.0 / 3.0]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let t = Tensor::F16(arr(&vals));
    let text = kiln::ir::text::literal(&t);
    let src = format!("func @f() -> (f16[5]) {{\n  %c = const {text} : f16[5]\n  return %c\n}}\n");
    let f = parse(&src);
    let out = kiln::compile_func(f, &Default::default())
        .unwrap()
        .call::<&Tensor>(&[])
        .unwrap();
    assert_eq!(out[0], t);
}

#[test]
fn npy_files_hold_f16_and_refuse_bf16() {
    let dir = std::env::temp_dir().join(format!("kiln-half-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = Tensor::F16(arr(&[f16::from_f32(1.5), f16::NAN, f16::from_f32(-0.0)]));
    let path = dir.join("h.npy");
    kiln::npy::write_all(&[(path.clone(), &t)]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(String::from_utf8_lossy(&bytes[..80]).contains("'descr': '<f2'"));
    assert_eq!(kiln::npy::read(&path, kiln::f16).unwrap(), t);
    let b = Tensor::BF16(arr(&[bf16::ONE]));
    let err = kiln::npy::write_all(&[(dir.join("b.npy"), &b)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("numpy has no bf16"), "{err}");
    assert!(!dir.join("b.npy").exists());
    // A function's state with a bf16 variable: the error names the archive and the entry.
    let g = kiln::Graph::new();
    let w = g.shared(
        "w",
        ndarray::ArrayD::from_elem(ndarray::IxDyn(&[2]), bf16::ONE),
    );
    let f = kiln::function(&[], &[&(&w + &w)]).compile().unwrap();
    for (what, saved) in [
        ("save_state", f.save_state(dir.join("s.npz"))),
        ("save", f.save(dir.join("s.kfn"))),
    ] {
        let err = saved.unwrap_err().to_string();
        assert!(
            err.contains("numpy has no bf16") && err.contains("shared/w.npy"),
            "{what}: {err}"
        );
    }
    assert!(!dir.join("s.npz").exists() && !dir.join("s.kfn").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn halves_carry_through_scan_and_ifelse_and_take_gradients() {
    // A running sum stored in f16 at every step: h = h * 0.5 + x[t], each step rounded.
    let xs: Vec<f32> = (0..12).map(|i| i as f32 * 0.3 - 1.7).collect();
    let round = |v: f32| kiln::ir::round_to(kiln::f16, v as f64) as f32;
    let xh: Vec<f32> = xs.iter().map(|&v| round(v)).collect();
    let mut h = [round(1.0), round(-2.0), round(0.5)];
    let mut ys = Vec::new();
    for t in 0..4 {
        for j in 0..3 {
            h[j] = round(round(h[j] * 0.5) + xh[t * 3 + j]);
            ys.push(h[j]);
        }
    }
    let half_of = |v: &[f32], shape: &[usize]| {
        kiln::perform::cast(
            &Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap()),
            kiln::f16,
        )
    };
    check_exact(
        &|g| {
            let xs = g.input("xs", kiln::f16, [None, Some(3)]);
            let h0 = g.input("h0", kiln::f16, [Some(3)]);
            let (c, s) = kiln::scan(&[&h0], &[&xs], |c, x| {
                let h = &c[0] * 0.5 + &x[0];
                (vec![h.clone()], vec![h])
            });
            // The branch taken by the carry's sign, on halves.
            let flag = c[0].sum(None, false).gt(0.0);
            let pick = kiln::ifelse(&flag, || vec![c[0].clone()], || vec![-&c[0]]);
            (
                vec![xs, h0],
                vec![c[0].clone(), s[0].clone(), pick[0].clone()],
            )
        },
        &[half_of(&xh, &[4, 3]), half_of(&[1.0, -2.0, 0.5], &[3])],
        &[
            half_of(&h, &[3]),
            half_of(&ys, &[4, 3]),
            half_of(
                &(if round(h.iter().sum::<f32>()) > 0.0 {
                    h
                } else {
                    h.map(|v| -v)
                }),
                &[3],
            ),
        ],
    );
    // The gradient of a gather from an f16 table is a scatter-add, computed in f32 and
    // stored as f16: rows picked twice get twice the gradient.
    let g = Graph::new();
    let table = g.input("t", kiln::f16, [Some(4), Some(2)]);
    let ids = g.constant(Tensor::I64(arr(&[1i64, 3, 1])));
    let cost = table.take(&ids, 0).cast(kiln::f32).sum(None, false);
    let gt = kiln::grad(&cost, &[&table]).unwrap().remove(0);
    assert_eq!(gt.dtype(), DType::F16);
    let f = function(&[&table], &[&gt]).compile().unwrap();
    let out = f.call(&[&half_of(&[0.0; 8], &[4, 2])]).unwrap();
    assert_eq!(
        out[0].to_f64_vec(),
        vec![0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0]
    );
}

#[test]
fn shared_half_state_updates_in_place() {
    // An f16 counter kept in a shared variable and bumped by each call, as a training loop
    // keeps bf16 weights: the update computes in f32 and stores the half.
    let g = Graph::new();
    let s = g.shared("s", ArrayD::from_elem(IxDyn(&[3]), f16::from_f32(0.5)));
    let step = g.input("step", kiln::f16, [Some(3)]);
    let f = function(&[&step], &[&s])
        .update(&s, &s + &step)
        .compile()
        .unwrap();
    let one = Tensor::F16(ArrayD::from_elem(IxDyn(&[3]), f16::from_f32(0.25)));
    for _ in 0..3 {
        f.call(&[&one]).unwrap();
    }
    assert_eq!(s.value().unwrap().to_f64_vec(), vec![1.25; 3]);
    assert_eq!(s.value().unwrap().dtype(), DType::F16);
}

#[test]
fn a_transposed_half_is_widened_before_its_transpose() {
    // `x^T @ g` with f16 `x` (a weight gradient): the cast goes under the transpose, so the
    // transpose stays next to the product, which reads it through strides.
    let g = Graph::new();
    let x = g.input("x", kiln::f16, [Some(8), Some(4)]);
    let gy = g.input("g", kiln::f32, [Some(8), Some(3)]);
    let p = x.transpose(&[1, 0]).matmul(&gy);
    let mm = p.owner().expect("a product");
    let t = mm.inputs()[0].owner().expect("a transpose");
    assert!(
        matches!(t.op(), kiln::ir::Op::Transpose { .. }),
        "{:?}",
        t.op()
    );
    let c = t.inputs()[0].owner().expect("a cast");
    assert_eq!(c.op(), kiln::ir::Op::Cast { to: kiln::f32 });
    // And the values are those of the f32 product.
    let f = function(&[&x, &gy], &[&p]).compile().unwrap();
    let xs: Vec<f16> = (0..32)
        .map(|i| f16::from_f32(i as f32 * 0.25 - 4.0))
        .collect();
    let gs: Vec<f32> = (0..24).map(|i| (i % 5) as f32 - 2.0).collect();
    let out = f
        .call(&[
            &Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[8, 4]), xs.clone()).unwrap()),
            &Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[8, 3]), gs.clone()).unwrap()),
        ])
        .unwrap();
    let want: Vec<f64> = (0..4)
        .flat_map(|i| {
            let (xs, gs) = (&xs, &gs);
            (0..3).map(move |j| {
                (0..8)
                    .map(|k| xs[k * 4 + i].to_f64() * gs[k * 3 + j] as f64)
                    .sum()
            })
        })
        .collect();
    assert_eq!(out[0].to_f64_vec(), want);
}

#[test]
fn an_error_on_a_half_goes_on_as_an_error() {
    // A bad reshape poisons its result, which keeps the half type; computing on it must give
    // that error, not widen it again and again.
    let g = Graph::new();
    let x = g.input("x", kiln::f16, [Some(6)]);
    let bad = x.reshape(&[7]);
    let y = (bad.exp() + &x).sum(None, false);
    let err = y.check().unwrap_err().to_string();
    assert!(err.contains("reshape"), "{err}");
}
