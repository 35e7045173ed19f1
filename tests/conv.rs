//! `conv2d`, `max_pool2d` and `avg_pool2d` against their definitions written as plain loops
//! (PyTorch's cross-correlation, floor rule, zero padding; max pooling ignores padding,
//! average pooling counts it) on random shapes, strides, paddings, dilations and groups, on
//! every backend; their gradients against finite differences; errors; the text form.

mod common;
use common::{backends_with_gpu_host, Rng};
use kiln::{function, verify_grad, Conv2d, Graph, Tensor, VerifyOptions};
use ndarray::{ArrayD, IxDyn};

/// Values in [-2, 2] in steps of 1/500.
fn values(rng: &mut Rng, shape: &[usize]) -> ArrayD<f64> {
    let n = shape.iter().product();
    let v = (0..n)
        .map(|_| (rng.below(2001) as f64 - 1000.0) / 500.0)
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

/// The input element at padded position `p` (one spatial axis), if it is not padding.
fn unpad(p: isize, n: usize) -> Option<usize> {
    (p >= 0 && (p as usize) < n).then_some(p as usize)
}

/// conv2d by its definition.
fn conv_ref(x: &ArrayD<f64>, w: &ArrayD<f64>, c: &Conv2d) -> ArrayD<f64> {
    let (n, ch, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    let og = o / c.groups;
    assert_eq!(ch, cg * c.groups);
    let oh = (h + 2 * c.padding[0] - c.dilation[0] * (kh - 1) - 1) / c.stride[0] + 1;
    let ow = (wd + 2 * c.padding[1] - c.dilation[1] * (kw - 1) - 1) / c.stride[1] + 1;
    let mut out = ArrayD::zeros(IxDyn(&[n, o, oh, ow]));
    for b in 0..n {
        for f in 0..o {
            let g = f / og;
            for y in 0..oh {
                for xx in 0..ow {
                    let mut s = 0.0;
                    for k in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let py = (y * c.stride[0] + i * c.dilation[0]) as isize
                                    - c.padding[0] as isize;
                                let px = (xx * c.stride[1] + j * c.dilation[1]) as isize
                                    - c.padding[1] as isize;
                                if let (Some(iy), Some(ix)) = (unpad(py, h), unpad(px, wd)) {
                                    s += x[[b, g * cg + k, iy, ix]] * w[[f, k, i, j]];
                                }
                            }
                        }
                    }
                    out[[b, f, y, xx]] = s;
                }
            }
        }
    }
    out
}

/// The gradients of `sum(conv2d(x, w) * r)` with respect to `x` and `w`, by the definition:
/// each product of the sum adds `r` times the other factor.
fn conv_grads_ref(
    x: &ArrayD<f64>,
    w: &ArrayD<f64>,
    r: &ArrayD<f64>,
    c: &Conv2d,
) -> (ArrayD<f64>, ArrayD<f64>) {
    let (mut dx, mut dw) = (ArrayD::zeros(x.raw_dim()), ArrayD::zeros(w.raw_dim()));
    let (h, wd) = (x.shape()[2], x.shape()[3]);
    let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    let og = o / c.groups;
    let s = r.shape();
    for b in 0..s[0] {
        for f in 0..o {
            for y in 0..s[2] {
                for xx in 0..s[3] {
                    let g = r[[b, f, y, xx]];
                    for k in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let py = (y * c.stride[0] + i * c.dilation[0]) as isize
                                    - c.padding[0] as isize;
                                let px = (xx * c.stride[1] + j * c.dilation[1]) as isize
                                    - c.padding[1] as isize;
                                if let (Some(iy), Some(ix)) = (unpad(py, h), unpad(px, wd)) {
                                    let ch = f / og * cg + k;
                                    dx[[b, ch, iy, ix]] += g * w[[f, k, i, j]];
                                    dw[[f, k, i, j]] += g * x[[b, ch, iy, ix]];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (dx, dw)
}

#[test]
fn random_convolution_gradients_match_the_definition() {
    let mut rng = Rng(31337);
    for case in 0..12 {
        let groups = 1 + rng.below(2);
        let conv = Conv2d {
            stride: [1 + rng.below(2), 1 + rng.below(3)],
            padding: [rng.below(3), rng.below(2)],
            dilation: [1 + rng.below(2), 1],
            groups,
        };
        let (kh, kw) = (1 + rng.below(3), 1 + rng.below(3));
        let h = conv.dilation[0] * (kh - 1) + 1 + rng.below(4);
        let w = kw + rng.below(5);
        let (n, cg, og) = (1 + rng.below(3), 1 + rng.below(3), 1 + rng.below(2));
        let x = values(&mut rng, &[n, cg * groups, h, w]);
        let f = values(&mut rng, &[og * groups, cg, kh, kw]);
        conv_and_gradients_match(&format!("case {case}"), &mut rng, &x, &f, &conv);
    }
}

/// `conv2d` of `x` by `f`, and its image and filter gradients (of the sum of the output times
/// random weights), on every backend against the definition.
fn conv_and_gradients_match(
    what: &str,
    rng: &mut Rng,
    x: &ArrayD<f64>,
    f: &ArrayD<f64>,
    conv: &Conv2d,
) {
    let want = conv_ref(x, f, conv);
    let r = values(rng, want.shape());
    let (want_dx, want_dw) = conv_grads_ref(x, f, &r, conv);
    let (xs, fs) = (x.shape(), f.shape());
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        // The gradients need the image's and filters' height and width typed.
        let xv = g.input(
            "x",
            kiln::f64,
            [None, None, Some(xs[2] as i64), Some(xs[3] as i64)],
        );
        let fv = g.input(
            "f",
            kiln::f64,
            [None, None, Some(fs[2] as i64), Some(fs[3] as i64)],
        );
        let rv = g.input("r", kiln::f64, vec![None; 4]);
        let y = xv.conv2d(&fv, *conv);
        let loss = (&y * &rv).sum(None, false);
        let grads = kiln::grad(&loss, &[&xv, &fv]).unwrap();
        let fun = function(&[&xv, &fv, &rv], &[&y, &grads[0], &grads[1]])
            .backend(backend)
            .compile()
            .unwrap();
        let out = fun
            .call(&[
                &Tensor::from(x.clone()),
                &Tensor::from(f.clone()),
                &Tensor::from(r.clone()),
            ])
            .unwrap();
        let at = format!("{what} {backend:?} {conv:?} x{xs:?} f{fs:?}");
        assert!(close(&out[0], &want), "{at}: output");
        assert!(close(&out[1], &want_dx), "{at}: image");
        assert!(close(&out[2], &want_dw), "{at}: filters");
    }
}

#[test]
fn same_convolutions_and_their_gradients_match_the_definition() {
    let mut rng = Rng(0x5a3e_c0a7);
    for case in 0..16 {
        let kw = 1 + 2 * rng.below(3);
        let groups = 1 + rng.below(2);
        let conv = Conv2d {
            stride: [1, 1],
            padding: [rng.below(2), kw / 2],
            dilation: [1 + rng.below(2), 1],
            groups,
        };
        let kh = 1 + rng.below(3);
        let span = conv.dilation[0] * (kh - 1) + 1;
        let h = span.saturating_sub(2 * conv.padding[0]).max(1) + rng.below(4);
        let w = 1 + rng.below(7);
        let (n, cg, og) = (1 + rng.below(3), 1 + rng.below(3), 1 + rng.below(2));
        let x = values(&mut rng, &[n, cg * groups, h, w]);
        let f = values(&mut rng, &[og * groups, cg, kh, kw]);
        assert_eq!(
            conv.output([h, w], [kh, kw]).unwrap()[1],
            w,
            "case {case}: a same convolution keeps the width"
        );
        conv_and_gradients_match(&format!("case {case}"), &mut rng, &x, &f, &conv);
    }
}

/// Pooling by its definition over a rank-4 input.
fn pool_ref(
    x: &ArrayD<f64>,
    max: bool,
    win: [usize; 2],
    st: [usize; 2],
    pad: [usize; 2],
) -> ArrayD<f64> {
    let s = x.shape();
    let (h, w) = (s[2], s[3]);
    let oh = (h + 2 * pad[0] - win[0]) / st[0] + 1;
    let ow = (w + 2 * pad[1] - win[1]) / st[1] + 1;
    let mut out = ArrayD::zeros(IxDyn(&[s[0], s[1], oh, ow]));
    for b in 0..s[0] {
        for c in 0..s[1] {
            for y in 0..oh {
                for xx in 0..ow {
                    let mut vals = vec![];
                    for i in 0..win[0] {
                        for j in 0..win[1] {
                            let py = (y * st[0] + i) as isize - pad[0] as isize;
                            let px = (xx * st[1] + j) as isize - pad[1] as isize;
                            if let (Some(iy), Some(ix)) = (unpad(py, h), unpad(px, w)) {
                                vals.push(x[[b, c, iy, ix]]);
                            }
                        }
                    }
                    out[[b, c, y, xx]] = if max {
                        vals.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                    } else {
                        vals.iter().sum::<f64>() / (win[0] * win[1]) as f64
                    };
                }
            }
        }
    }
    out
}

fn close(got: &Tensor, want: &ArrayD<f64>) -> bool {
    let g = got.as_f64().expect("f64");
    g.shape() == want.shape()
        && g.iter()
            .zip(want)
            .all(|(a, b)| (a - b).abs() <= 1e-12 * (1.0 + b.abs()))
}

#[test]
fn random_convolutions_match_the_definition() {
    let mut rng = Rng(0x2545f4914f6cdd1d);
    for case in 0..30 {
        let groups = 1 + rng.below(3);
        let conv = Conv2d {
            stride: [1 + rng.below(3), 1 + rng.below(2)],
            padding: [rng.below(3), rng.below(2)],
            dilation: [1 + rng.below(2), 1 + rng.below(3)],
            groups,
        };
        let (kh, kw) = (1 + rng.below(3), 1 + rng.below(3));
        let need = |k: usize, d: usize, p: usize| (d * (k - 1) + 1).saturating_sub(2 * p);
        let h = need(kh, conv.dilation[0], conv.padding[0]).max(1) + rng.below(5);
        let w = need(kw, conv.dilation[1], conv.padding[1]).max(1) + rng.below(5);
        let (n, cg, og) = (1 + rng.below(2), 1 + rng.below(3), 1 + rng.below(3));
        let x = values(&mut rng, &[n, cg * groups, h, w]);
        let f = values(&mut rng, &[og * groups, cg, kh, kw]);
        // f64, or f32 (the reference then reads the f32 values, and tolerates f32 sums).
        let single = case % 3 == 0;
        let (x, f) = if single {
            (x.mapv(|v| v as f32 as f64), f.mapv(|v| v as f32 as f64))
        } else {
            (x, f)
        };
        let as_dtype = |a: &ArrayD<f64>| match single {
            true => Tensor::from(a.mapv(|v| v as f32)),
            false => Tensor::from(a.clone()),
        };
        let (dtype, tol) = if single {
            (kiln::f32, 1e-5)
        } else {
            (kiln::f64, 1e-12)
        };
        let want = conv_ref(&x, &f, &conv);
        let xs = x.shape().to_vec();
        let fs = f.shape().to_vec();
        for backend in backends_with_gpu_host() {
            let g = Graph::new();
            let xv = g.input(
                "x",
                dtype,
                xs.iter().map(|&d| Some(d as i64)).collect::<Vec<_>>(),
            );
            // Unknown dims on the filters: the shapes are checked when the function runs.
            let fv = g.input("f", dtype, [None, Some(fs[1] as i64), None, None]);
            let y = xv.conv2d(&fv, conv);
            let fun = function(&[&xv, &fv], &[&y])
                .backend(backend)
                .compile()
                .unwrap();
            let out = fun.call(&[&as_dtype(&x), &as_dtype(&f)]).unwrap().remove(0);
            let ok = out.dtype() == dtype
                && out.shape() == want.shape()
                && out
                    .to_f64_vec()
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| (a - b).abs() <= tol * (1.0 + b.abs()));
            assert!(
                ok,
                "case {case} {backend:?} {dtype:?} {conv:?} x{xs:?} f{fs:?}: {out:?} want {want:?}"
            );
        }
    }
}

#[test]
fn random_pools_match_the_definition() {
    // Ranks 2 to 5 (the leading dims are planes), every dtype each pooling takes.
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for case in 0..40 {
        let win: [usize; 2] = [1 + rng.below(3), 1 + rng.below(3)];
        let st = [1 + rng.below(3), 1 + rng.below(3)];
        let pad = [rng.below(win[0] / 2 + 1), rng.below(win[1] / 2 + 1)];
        let h = win[0] + rng.below(4);
        let w = win[1] + rng.below(4);
        let lead: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(3)).collect();
        let mut shape = lead.clone();
        shape.extend([h, w]);
        let raw = values(&mut rng, &shape);
        let max = case % 2 == 0;
        let dtypes: &[kiln::DType] = if max {
            &[kiln::f64, kiln::f32, kiln::i32, kiln::i64]
        } else {
            &[kiln::f64, kiln::f32]
        };
        let dtype = dtypes[rng.below(dtypes.len())];
        // The values as the dtype holds them (integers: the steps of 1/500 themselves).
        let x = match dtype {
            kiln::DType::F64 => Tensor::from(raw.clone()),
            kiln::DType::F32 => Tensor::from(raw.mapv(|v| v as f32)),
            kiln::DType::I32 => Tensor::from(raw.mapv(|v| (v * 500.0).round() as i32)),
            _ => Tensor::from(raw.mapv(|v| (v * 500.0).round() as i64)),
        };
        let exact = ArrayD::from_shape_vec(IxDyn(&shape), x.to_f64_vec()).unwrap();
        let planes: usize = lead.iter().product();
        let as4 = exact
            .into_shape_with_order(IxDyn(&[1, planes, h, w]))
            .unwrap();
        let want4 = pool_ref(&as4, max, win, st, pad);
        let mut want_shape = lead.clone();
        want_shape.extend(&want4.shape()[2..]);
        let want = want4.into_shape_with_order(IxDyn(&want_shape)).unwrap();
        let tol = if dtype == kiln::f32 { 1e-6 } else { 1e-12 };
        for backend in backends_with_gpu_host() {
            let g = Graph::new();
            let xv = g.input("x", dtype, vec![None; shape.len()]);
            let y = if max {
                xv.max_pool2d(
                    win.map(|d| d as i64),
                    st.map(|d| d as i64),
                    pad.map(|d| d as i64),
                )
            } else {
                xv.avg_pool2d(
                    win.map(|d| d as i64),
                    st.map(|d| d as i64),
                    pad.map(|d| d as i64),
                )
            };
            let f = function(&[&xv], &[&y]).backend(backend).compile().unwrap();
            let out = f.call(&[&x]).unwrap().remove(0);
            let ok = out.dtype() == dtype
                && out.shape() == want.shape()
                && out
                    .to_f64_vec()
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| (a - b).abs() <= tol * (1.0 + b.abs()));
            assert!(
                ok,
                "case {case} {backend:?} {dtype:?} {shape:?} max {max} {win:?} {st:?} {pad:?}: \
                 {out:?} want {want:?}"
            );
        }
    }
}

/// The gradient of `sum(pool(x) * r)` by its definition: each output's `r` to the first
/// greatest element of its window (max) or spread over the window (average).
fn pool_grad_ref(
    x: &ArrayD<f64>,
    r: &ArrayD<f64>,
    max: bool,
    win: [usize; 2],
    st: [usize; 2],
) -> ArrayD<f64> {
    let mut dx = ArrayD::zeros(x.raw_dim());
    let s = r.shape();
    for b in 0..s[0] {
        for c in 0..s[1] {
            for y in 0..s[2] {
                for xx in 0..s[3] {
                    let taps = (0..win[0])
                        .flat_map(|i| (0..win[1]).map(move |j| (y * st[0] + i, xx * st[1] + j)));
                    let g = r[[b, c, y, xx]];
                    if max {
                        let best = taps
                            .reduce(|p, q| {
                                if x[[b, c, q.0, q.1]] > x[[b, c, p.0, p.1]] {
                                    q
                                } else {
                                    p
                                }
                            })
                            .unwrap();
                        dx[[b, c, best.0, best.1]] += g;
                    } else {
                        for (i, j) in taps {
                            dx[[b, c, i, j]] += g / (win[0] * win[1]) as f64;
                        }
                    }
                }
            }
        }
    }
    dx
}

#[test]
fn large_pools_split_over_threads_match_the_definition() {
    // 2 x 64 x 40 x 40 = 204800 elements: more than one block of planes (16 Ki elements
    // each), so the planes are pooled on several threads (and the gradients too).
    let mut rng = Rng(4242);
    let x = values(&mut rng, &[2, 64, 40, 40]);
    let (win, st) = ([3, 2], [2, 2]);
    for max in [true, false] {
        let want = pool_ref(&x, max, win, st, [0, 0]);
        let r = values(&mut rng, want.shape());
        let want_grad = pool_grad_ref(&x, &r, max, win, st);
        for backend in backends_with_gpu_host() {
            let g = Graph::new();
            let xv = g.input("x", kiln::f64, vec![None; 4]);
            let rv = g.input("r", kiln::f64, vec![None; 4]);
            let y = if max {
                xv.max_pool2d(win.map(|d| d as i64), st.map(|d| d as i64), [0, 0])
            } else {
                xv.avg_pool2d(win.map(|d| d as i64), st.map(|d| d as i64), [0, 0])
            };
            let loss = (&y * &rv).sum(None, false);
            let dx = kiln::grad(&loss, &[&xv]).unwrap().remove(0);
            let f = function(&[&xv, &rv], &[&y, &dx])
                .backend(backend)
                .compile()
                .unwrap();
            let out = f
                .call(&[&Tensor::from(x.clone()), &Tensor::from(r.clone())])
                .unwrap();
            assert!(close(&out[0], &want), "{backend:?} max {max}");
            assert!(
                close(&out[1], &want_grad),
                "{backend:?} max {max}: gradient"
            );
        }
    }
}

#[test]
fn f32_convolution_and_integer_max_pooling_run() {
    let x =
        ArrayD::from_shape_vec(IxDyn(&[1, 1, 3, 3]), (1..=9).map(|v| v as f32).collect()).unwrap();
    let w = ArrayD::from_shape_vec(IxDyn(&[1, 1, 2, 2]), vec![1.0f32, 0.0, 0.0, -1.0]).unwrap();
    let xi = ArrayD::from_shape_vec(IxDyn(&[3, 3]), vec![1i32, 5, 2, 7, 3, 9, 4, 8, 6]).unwrap();
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let xv = g.input("x", kiln::f32, [Some(1), Some(1), Some(3), Some(3)]);
        let wv = g.input("w", kiln::f32, [Some(1), Some(1), Some(2), Some(2)]);
        let iv = g.input("i", kiln::i32, [Some(3), Some(3)]);
        let f = function(
            &[&xv, &wv, &iv],
            &[
                &xv.conv2d(&wv, Conv2d::default()),
                &iv.max_pool2d([2, 2], [1, 1], [0, 0]),
            ],
        )
        .backend(backend)
        .compile()
        .unwrap();
        let out = f
            .call(&[
                &Tensor::from(x.clone()),
                &Tensor::from(w.clone()),
                &Tensor::from(xi.clone()),
            ])
            .unwrap();
        // x[i, j] - x[i + 1, j + 1] = -4 everywhere.
        let want = ArrayD::from_shape_vec(IxDyn(&[1, 1, 2, 2]), vec![-4.0f32; 4]).unwrap();
        assert!(out[0].bit_eq(&want.into()), "{backend:?}: {:?}", out[0]);
        let wanti = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![7i32, 9, 8, 9]).unwrap();
        assert!(out[1].bit_eq(&wanti.into()), "{backend:?}: {:?}", out[1]);
    }
}

#[test]
fn gradients_match_finite_differences() {
    let mut rng = Rng(77);
    let conv = Conv2d {
        stride: [2, 1],
        padding: [1, 1],
        dilation: [1, 2],
        groups: 2,
    };
    let x = values(&mut rng, &[2, 4, 5, 6]);
    let w = values(&mut rng, &[4, 2, 2, 2]);
    verify_grad(
        |_, v| {
            let y = v[0].conv2d(&v[1], conv);
            (&y * &y).sum(None, false) + y.sin().sum(None, false)
        },
        &[x.clone(), w],
        VerifyOptions::default(),
    )
    .unwrap();
    // Pooling with overlapping windows and padding (distinct values: max is differentiable).
    let p = values(&mut rng, &[1, 2, 5, 5]);
    verify_grad(
        |_, v| {
            let m = v[0].max_pool2d([3, 3], [2, 2], [1, 1]);
            let a = v[0].avg_pool2d([2, 3], [1, 2], [1, 1]);
            (&m * &m).sum(None, false) + a.exp().sum(None, false)
        },
        std::slice::from_ref(&p),
        VerifyOptions::default(),
    )
    .unwrap();
}

#[test]
fn second_derivatives_of_convolution_and_average_pooling() {
    // The gradient ops are linear maps with gradients of their own: a gradient-norm penalty
    // differentiates through them.
    let mut rng = Rng(99);
    let x = values(&mut rng, &[1, 2, 4, 4]);
    let w = values(&mut rng, &[3, 2, 3, 3]);
    let conv = Conv2d {
        padding: [1, 1],
        ..Conv2d::default()
    };
    verify_grad(
        |_, v| {
            let y = v[0].conv2d(&v[1], conv).avg_pool2d([2, 2], [2, 2], [0, 0]);
            let loss = (&y * &y).sum(None, false);
            let gs = kiln::grad(&loss, &[&v[0], &v[1]]).unwrap();
            (&gs[0] * &gs[0]).sum(None, false) + (&gs[1] * &gs[1]).sum(None, false)
        },
        &[x, w],
        VerifyOptions::default(),
    )
    .unwrap();
}

#[test]
fn errors_name_the_problem() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(1), Some(3), Some(5), Some(5)]);
    let w = g.input("w", kiln::f32, [Some(4), Some(2), Some(3), Some(3)]);
    let e = x
        .conv2d(&w, Conv2d::default())
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("the image has 3 channels"), "{e}");
    let w = g.input("w", kiln::f32, [Some(4), Some(3), Some(7), Some(3)]);
    let e = x
        .conv2d(&w, Conv2d::default())
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not fit"), "{e}");
    let e = x
        .conv2d(
            &w,
            Conv2d {
                stride: [0, 1],
                ..Conv2d::default()
            },
        )
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least 1"), "{e}");
    let i = g.input("i", kiln::i32, [Some(1), Some(3), Some(5), Some(5)]);
    let e = i
        .avg_pool2d([2, 2], [2, 2], [0, 0])
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("floats"), "{e}");
    let e = x
        .max_pool2d([2, 2], [2, 2], [2, 0])
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most half the window"), "{e}");
    // Shapes unknown until the call are checked then, on every backend.
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, vec![None; 4]);
        let w = g.input("w", kiln::f32, vec![None; 4]);
        let f = function(&[&x, &w], &[&x.conv2d(&w, Conv2d::default())])
            .backend(backend)
            .compile()
            .unwrap();
        let xs = Tensor::zeros(kiln::f32, &[1, 2, 4, 4]);
        let ws = Tensor::zeros(kiln::f32, &[1, 2, 5, 1]);
        let e = f.call(&[&xs, &ws]).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{backend:?}: {e}");
    }
}

#[test]
fn the_text_form_spells_the_attributes_and_parses_back() {
    let src = "func @f(%x: f32[2, 4, 8, 8], %w: f32[6, 2, 3, 3]) -> (f32[2, 6, 4, 8], f32[2, 6, 2, 4], f32[2, 6, 2, 4]) {
  %y = conv2d %x, %w {strides = [2, 1], padding = [1, 1], groups = 2}
  %m = max_pool2d %y {window = [2, 2]}
  %a = avg_pool2d %y {window = [3, 2], strides = [2, 2], padding = [1, 0]}
  return %y, %m, %a
}
";
    let f = kiln::ir::text::parse_one("f.kir", src).unwrap();
    let printed = kiln::ir::text::print_func(&f);
    for want in [
        "conv2d %x, %w {strides = [2, 1], padding = [1, 1], groups = 2}",
        "max_pool2d %y {window = [2, 2], strides = [2, 2]}",
        "avg_pool2d %y {window = [3, 2], strides = [2, 2], padding = [1, 0]}",
    ] {
        assert!(printed.contains(want), "{want}: {printed}");
    }
    let again = kiln::ir::text::parse_one("f.kir", &printed).unwrap();
    assert_eq!(kiln::ir::text::print_func(&again), printed);
    let e = kiln::ir::text::parse_one(
        "f.kir",
        "func @f(%x: f32[1, 1, 4, 4]) -> (f32[1, 1, 2, 2]) {\n  %m = max_pool2d %x {strides = [2, 2]}\n  return %m\n}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("needs the attribute `window`"), "{e}");
}

#[test]
fn strided_inputs_are_read_in_logical_order() {
    // The image arrives as an NHWC array viewed as NCHW (permuted axes), the filters reversed
    // along their width (a negative stride): conv2d and pooling must read them by logical
    // index, as the definition does.
    let mut rng = Rng(555);
    let nhwc = values(&mut rng, &[2, 5, 6, 3]);
    let x = nhwc.view().permuted_axes(vec![0, 3, 1, 2]);
    let stored_w = values(&mut rng, &[4, 3, 2, 3]);
    let mut w = stored_w.view();
    w.invert_axis(ndarray::Axis(3));
    let conv = Conv2d {
        padding: [1, 0],
        ..Conv2d::default()
    };
    let want = conv_ref(&x.to_owned(), &w.to_owned(), &conv);
    let want_pool = pool_ref(&x.to_owned(), true, [2, 2], [2, 1], [0, 1]);
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let xv = g.input("x", kiln::f64, [Some(2), Some(3), Some(5), Some(6)]);
        let wv = g.input("w", kiln::f64, [Some(4), Some(3), Some(2), Some(3)]);
        let f = function(
            &[&xv, &wv],
            &[
                &xv.conv2d(&wv, conv),
                &xv.max_pool2d([2, 2], [2, 1], [0, 1]),
            ],
        )
        .backend(backend)
        .compile()
        .unwrap();
        let out = f
            .call(&[x.view().into(), w.view().into()] as &[kiln::TensorRef])
            .unwrap();
        assert!(close(&out[0], &want), "{backend:?}: conv2d");
        assert!(close(&out[1], &want_pool), "{backend:?}: max_pool2d");
    }
}

/// Every backend (the GPU backend's convolution kernels on the host device included) gives the
/// interpreter's bits for `conv2d` and both its gradients: the kernels sum in the GEMM's order,
/// chunks included (channel counts past one chunk of k), on transposed (strided) images too.
#[test]
fn convolutions_and_their_gradients_have_the_interpreters_bits_on_every_backend() {
    let mut rng = Rng(0x0c0f_fee0_0000_0001);
    for case in 0..10 {
        let groups = 1 + rng.below(2);
        let conv = Conv2d {
            stride: [1 + rng.below(2), 1 + rng.below(2)],
            padding: [rng.below(2), rng.below(2)],
            dilation: [1 + rng.below(2), 1],
            groups,
        };
        // More terms than one GEMM chunk (256) for each product: 60 channels of 3x3 taps
        // (the convolution), 270 filters (the image gradient), two 16x16 images (the filter
        // gradient's 2 x 256 output positions).
        let cg = [1, 7, 60][case % 3];
        let (n, og, h, w) = match case {
            4 => (2, 1, 16, 16),
            5 => (1, 270, 5, 5),
            _ => (
                1 + rng.below(2),
                1 + rng.below(3),
                6 + rng.below(3),
                5 + rng.below(3),
            ),
        };
        let x = values(&mut rng, &[n, cg * groups, w, h]).mapv(|v| v as f32 * 0.37);
        let f = values(&mut rng, &[og * groups, cg, 3, 3]).mapv(|v| v as f32 * 1.3);
        let mut want: Option<Vec<Tensor>> = None;
        for backend in [kiln::Backend::Interp]
            .into_iter()
            .chain(backends_with_gpu_host())
        {
            let g = Graph::new();
            let xv = g.input("x", kiln::f32, [None, None, Some(w as i64), Some(h as i64)]);
            let fv = g.input("f", kiln::f32, [None, None, Some(3), Some(3)]);
            // The image is stored with its last two axes swapped: read through strides.
            let xt = xv.transpose(&[0, 1, 3, 2]);
            let y = xt.conv2d(&fv, conv);
            // Both gradients, from an output gradient of full mantissas (y itself).
            let loss = (&y * &y).sum(None, false);
            let grads = kiln::grad(&loss, &[&xv, &fv]).unwrap();
            let fun = function(&[&xv, &fv], &[&y, &grads[0], &grads[1]])
                .backend(backend)
                .compile()
                .unwrap();
            let out = fun
                .call(&[&Tensor::from(x.clone()), &Tensor::from(f.clone())])
                .unwrap();
            match &want {
                None => want = Some(out),
                Some(wt) => {
                    for (k, (o, w)) in out.iter().zip(wt).enumerate() {
                        assert!(
                            o.bit_eq(w),
                            "case {case} {backend:?} output {k} {conv:?} cg {cg}: {o:?} want {w:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Every backend (the GPU backend's pooling kernels on the host device included) gives the
/// interpreter's bits for max and average pooling and their gradients, on ranks 2 to 4,
/// strided inputs, ties, NaN and infinities.
#[test]
fn pools_and_their_gradients_have_the_interpreters_bits_on_every_backend() {
    let mut rng = Rng(0x0c0f_fee0_0000_0002);
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
    for case in 0..24 {
        let win: [usize; 2] = [1 + rng.below(3), 1 + rng.below(3)];
        let st = [1 + rng.below(2), 1 + rng.below(3)];
        let pad = [rng.below(win[0] / 2 + 1), rng.below(win[1] / 2 + 1)];
        let (h, w) = (win[0] + rng.below(4), win[1] + rng.below(4));
        let mut shape: Vec<usize> = (0..rng.below(3)).map(|_| 1 + rng.below(2)).collect();
        shape.extend([w, h]);
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| match rng.below(8) {
                0 => special[rng.below(special.len())],
                _ => rng.below(5) as f64 * 0.37 - 0.5,
            })
            .collect();
        let x = ArrayD::from_shape_vec(IxDyn(&shape), v).unwrap();
        let f32s = case % 2 == 0;
        let input = if f32s {
            Tensor::from(x.mapv(|v| v as f32))
        } else {
            Tensor::from(x.clone())
        };
        let dtype = input.dtype();
        // Output gradients of full mantissas, so that sums in another order round differently.
        let mut out_shape = shape[..shape.len() - 2].to_vec();
        out_shape.extend([
            (h + 2 * pad[0] - win[0]) / st[0] + 1,
            (w + 2 * pad[1] - win[1]) / st[1] + 1,
        ]);
        let m: usize = out_shape.iter().product();
        let rv: Vec<f64> = (0..m)
            .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 3.0 - 1.5)
            .collect();
        let rt = ArrayD::from_shape_vec(IxDyn(&out_shape), rv).unwrap();
        let r_in = if f32s {
            Tensor::from(rt.mapv(|v| v as f32))
        } else {
            Tensor::from(rt)
        };
        let mut want: Option<Vec<Tensor>> = None;
        for backend in [kiln::Backend::Interp]
            .into_iter()
            .chain(backends_with_gpu_host())
        {
            let g = Graph::new();
            let dims: Vec<Option<i64>> = shape.iter().map(|&d| Some(d as i64)).collect();
            let xv = g.input("x", dtype, dims);
            let rdims: Vec<Option<i64>> = out_shape.iter().map(|&d| Some(d as i64)).collect();
            let scale = g.input("r", dtype, rdims);
            // Stored with the last two axes swapped: read through strides.
            let mut perm: Vec<i64> = (0..shape.len() as i64).collect();
            perm.swap(shape.len() - 2, shape.len() - 1);
            let xt = xv.transpose(&perm);
            let (m, a) = (
                xt.max_pool2d(
                    win.map(|d| d as i64),
                    st.map(|d| d as i64),
                    pad.map(|d| d as i64),
                ),
                xt.avg_pool2d(
                    win.map(|d| d as i64),
                    st.map(|d| d as i64),
                    pad.map(|d| d as i64),
                ),
            );
            let loss = (&m * &scale).sum(None, false) + (&a * &scale).sum(None, false);
            let dx = kiln::grad(&loss, &[&xv]).unwrap().remove(0);
            let fun = function(&[&xv, &scale], &[&m, &a, &dx])
                .backend(backend)
                .compile()
                .unwrap();
            let out = fun.call(&[&input, &r_in]).unwrap();
            match &want {
                None => want = Some(out),
                Some(wt) => {
                    for (k, (o, w)) in out.iter().zip(wt).enumerate() {
                        assert!(
                            common::same_bits(o, w),
                            "case {case} {backend:?} output {k} {shape:?} {win:?} {st:?} {pad:?}: \
                             {o:?} want {w:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Convolutions whose output is empty (no images, or no filters) but whose padding would make
/// every image's output huge: the result is empty and the gradients are zero, on every backend,
/// with no scratch sized from the output positions of images that are not there.
#[test]
fn empty_convolutions_with_huge_padding_run_without_scratch() {
    let pad = 1usize << 40;
    let conv = Conv2d {
        padding: [pad, 3],
        ..Conv2d::default()
    };
    // (image shape, filter shape): no images; no filters.
    for (xs, fs) in [([0, 2, 3, 3], [2, 2, 2, 2]), ([2, 2, 3, 3], [0, 2, 2, 2])] {
        let x = ArrayD::<f64>::ones(IxDyn(&xs));
        let f = ArrayD::<f64>::ones(IxDyn(&fs));
        let oh = 3 + 2 * pad - 1;
        let out_shape = [xs[0], fs[0], oh, 3 + 2 * 3 - 1];
        for backend in backends_with_gpu_host() {
            let g = Graph::new();
            let xv = g.input("x", kiln::f64, [None, None, Some(3), Some(3)]);
            let fv = g.input("f", kiln::f64, [None, None, Some(2), Some(2)]);
            let y = xv.conv2d(&fv, conv);
            let grads = kiln::grad(&y.sum(None, false), &[&xv, &fv]).unwrap();
            let fun = function(&[&xv, &fv], &[&y, &grads[0], &grads[1]])
                .backend(backend)
                .compile()
                .unwrap();
            let out = fun
                .call(&[&Tensor::from(x.clone()), &Tensor::from(f.clone())])
                .unwrap();
            let at = format!("{backend:?} x{xs:?} f{fs:?}");
            assert_eq!(out[0].shape(), out_shape, "{at}: output");
            assert!(
                out[1].bit_eq(&ArrayD::<f64>::zeros(IxDyn(&xs)).into()),
                "{at}: image"
            );
            assert!(
                out[2].bit_eq(&ArrayD::<f64>::zeros(IxDyn(&fs)).into()),
                "{at}: filters"
            );
        }
    }
}
