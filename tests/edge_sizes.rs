//! Sizes at the edges: attributes near 2^64 are type errors naming the attribute (never a
//! wrapped size that "fits"), results sized at run time that cannot be allocated are errors
//! (never an abort), and the answers at the edges are the documented ones: `topk` of a lane
//! shorter than k, an i64 cast to bf16, pooling an empty axis, a very deep graph printed.

mod common;

use kiln::{function, Backend, Conv2d, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

fn f32s(shape: &[usize]) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(shape), |i| {
        (0..shape.len()).map(|a| i[a]).sum::<usize>() as f32
    })
}

/// `f` on every backend: the call's error text (the call must fail).
fn call_fails(
    build: impl Fn(&Graph) -> (Vec<kiln::Var>, Vec<kiln::Var>),
    inputs: &[Tensor],
) -> Vec<(Backend, String)> {
    common::backends_with_gpu_host()
        .into_iter()
        .map(|backend| {
            let g = Graph::new();
            let (ins, outs) = build(&g);
            let ins: Vec<&kiln::Var> = ins.iter().collect();
            let outs: Vec<&kiln::Var> = outs.iter().collect();
            let f = function(&ins, &outs).backend(backend).compile().unwrap();
            let views: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            match f.call(&views) {
                Ok(out) => panic!("{backend:?}: the call gave {:?}", out[0].shape()),
                Err(e) => (backend, e.to_string()),
            }
        })
        .collect()
}

#[test]
fn conv2d_attributes_that_would_wrap_are_type_errors_naming_them() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(1), Some(1), Some(6), Some(6)]);
    let w = g.input("w", kiln::f32, [Some(1), Some(1), Some(5), Some(1)]);
    let dilated = Conv2d {
        dilation: [1 << 62, 1],
        ..Conv2d::default()
    };
    let e = x.conv2d(&w, dilated).check().unwrap_err().to_string();
    assert!(
        e.contains("dilation 4611686018427387904 along axis 2"),
        "{e}"
    );
    let padded = Conv2d {
        padding: [i64::MAX as usize, 0],
        ..Conv2d::default()
    };
    let e = x.conv2d(&w, padded).check().unwrap_err().to_string();
    assert!(
        e.contains("padding 9223372036854775807 along axis 2"),
        "{e}"
    );
    // With the image's dims known only at run time, the same at the call.
    for conv in [dilated, padded] {
        let errors = call_fails(
            |g| {
                let x = g.input("x", kiln::f32, [Some(1), Some(1), None, None]);
                let w = g.input("w", kiln::f32, [Some(1), Some(1), Some(5), Some(1)]);
                let y = x.conv2d(&w, conv);
                (vec![x, w], vec![y])
            },
            &[
                Tensor::F32(f32s(&[1, 1, 6, 6])),
                Tensor::F32(f32s(&[1, 1, 5, 1])),
            ],
        );
        for (backend, e) in errors {
            assert!(e.contains("along axis 2"), "{backend:?}: {e}");
        }
    }
    let e = x
        .max_pool2d([2, 2], [1, 1], [i64::MAX, 0])
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("must be at most half the window"), "{e}");
}

#[test]
fn results_sized_at_run_time_too_large_for_memory_are_errors() {
    let dyn4 = [None, None, None, None];
    // conv2d padded to a 160 GB output.
    let conv = Conv2d {
        padding: [100_000, 100_000],
        ..Conv2d::default()
    };
    let errors = call_fails(
        |g| {
            let x = g.input("x", kiln::f32, dyn4);
            let w = g.input("w", kiln::f32, [Some(1), Some(1), Some(1), Some(1)]);
            (vec![x.clone(), w.clone()], vec![x.conv2d(&w, conv)])
        },
        &[
            Tensor::F32(f32s(&[1, 1, 1, 1])),
            Tensor::F32(f32s(&[1, 1, 1, 1])),
        ],
    );
    // one_hot of depth 10^10 (400 GB).
    let errors = errors.into_iter().chain(call_fails(
        |g| {
            let i = g.input("i", kiln::i64, [None]);
            (vec![i.clone()], vec![i.one_hot(10_000_000_000, kiln::f32)])
        },
        &[Tensor::I64(ArrayD::zeros(IxDyn(&[10])))],
    ));
    // take of many rows (400 GB).
    let errors = errors.into_iter().chain(call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [None, None]);
            let i = g.input("i", kiln::i64, [None]);
            (vec![x.clone(), i.clone()], vec![x.take(&i, 0)])
        },
        &[
            Tensor::F32(f32s(&[2, 100_000])),
            Tensor::I64(ArrayD::zeros(IxDyn(&[1_000_000]))),
        ],
    ));
    // take_along_axis broadcasting a column against a long row (400 GB).
    let errors = errors.into_iter().chain(call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [Some(200_000), Some(1)]);
            let i = g.input("i", kiln::i64, [Some(1), None]);
            (vec![x.clone(), i.clone()], vec![x.take_along_axis(&i, 1)])
        },
        &[
            Tensor::F32(f32s(&[200_000, 1])),
            Tensor::I64(ArrayD::zeros(IxDyn(&[1, 500_000]))),
        ],
    ));
    // A broadcast too large to copy out: a view on a device that makes it one (the GPU's)
    // costs nothing until the result is brought to the host, where it must be refused, not
    // aborted (2^40 halves are 2 TiB).
    let errors = errors.into_iter().chain(call_fails(
        |g| {
            let x = g.input("x", kiln::f16, [Some(1)]);
            (vec![x.clone()], vec![x.broadcast_to(&[1 << 40])])
        },
        &[Tensor::F16(ArrayD::zeros(IxDyn(&[1])))],
    ));
    // arange of 10^12 (4 TB): a step the GPU's device hands to the host is checked there.
    let errors = errors.into_iter().chain(call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [Some(1)]);
            let r = g.arange(0.0, 1e12, 1.0, kiln::f32);
            (vec![x.clone()], vec![r, x])
        },
        &[Tensor::F32(f32s(&[1]))],
    ));
    for (backend, e) in errors {
        // The GPU backend's device allocates results itself and refuses them there.
        let refused = e.contains("more than can be allocated")
            || (backend == Backend::Gpu && e.contains("out of memory"));
        assert!(refused, "{backend:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// Bytes of `/proc/meminfo`'s `key` line, where the system has one.
fn meminfo(key: &str) -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: usize = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[test]
fn a_result_the_allocator_would_promise_but_memory_cannot_hold_is_an_error() {
    // Linux overcommits: a map larger than the memory left, but not larger than the machine,
    // succeeds, and the process is killed when the result is filled. Ask for halfway between
    // what is left and what the machine has (nothing to test where the system does not say).
    let (Some(total), Some(left)) = (meminfo("MemTotal:"), meminfo("MemAvailable:")) else {
        return;
    };
    let swap = meminfo("SwapFree:").unwrap_or(0);
    let want = left + swap + (total - left) / 2;
    let depth = want / 4 / 2;
    let errors = call_fails(
        |g| {
            let i = g.input("i", kiln::i64, [None]);
            (vec![i.clone()], vec![i.one_hot(depth as i64, kiln::f32)])
        },
        &[Tensor::I64(ArrayD::zeros(IxDyn(&[2])))],
    );
    for (backend, e) in errors {
        // The GPU backend's device allocates results itself and refuses them there.
        let refused = e.contains("more than can be allocated")
            || (backend == Backend::Gpu && e.contains("out of memory"));
        assert!(refused, "{backend:?}: {e}");
    }
}

#[test]
fn topk_of_a_lane_shorter_than_k_is_an_error() {
    let errors = call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [Some(2), None]);
            let (values, positions) = x.topk(5);
            (vec![x], vec![values, positions])
        },
        &[Tensor::F32(f32s(&[2, 3]))],
    );
    // k = 2^31 on a lane of 3: refused before anything of k elements is made (its positions
    // alone would be 16 GB).
    let errors = errors.into_iter().chain(call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [None]);
            (vec![x.clone()], vec![x.topk(1 << 31).0])
        },
        &[Tensor::F32(f32s(&[3]))],
    ));
    for (backend, e) in errors {
        assert!(
            e.contains("topk") && e.contains("edge_sizes.rs"),
            "{backend:?}: {e}"
        );
    }
    // Long enough: the k largest, largest first, k long in the type where the other dims allow.
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(3), None]);
    assert_eq!(x.topk(2).0.ty().shape, [None, Some(3), Some(2)]);
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [None]);
        let (v, p) = x.topk(2);
        assert_eq!(v.ty().shape, [Some(2)]);
        let f = function(&[&x], &[&v, &p])
            .backend(backend)
            .compile()
            .unwrap();
        let out = f
            .call(&[ndarray::arr1(&[3.0f32, 9.0, 1.0, 7.0]).into_dyn().view()])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), [9.0, 7.0], "{backend:?}");
        assert_eq!(out[1].to_f64_vec(), [1.0, 3.0], "{backend:?}");
    }
}

#[test]
fn an_i64_cast_to_a_half_rounds_once() {
    let p = |e: i32| 2f64.powi(e);
    // (value, its bf16, its f16): just past a tie, at a tie, below one, and the extremes.
    let cases: [(i64, f64, f64); 6] = [
        ((1 << 62) + (1 << 54) + 1, p(62) + p(55), f64::INFINITY),
        ((1 << 62) + (1 << 54), p(62), f64::INFINITY),
        (
            -((1 << 62) + (1 << 54) + 1),
            -(p(62) + p(55)),
            f64::NEG_INFINITY,
        ),
        ((1 << 55) + (1 << 47) + 1, p(55) + p(48), f64::INFINITY),
        (i64::MAX, p(63), f64::INFINITY),
        (2049, 2048.0, 2048.0),
    ];
    let xs: Vec<i64> = cases.iter().map(|c| c.0).collect();
    let x = Tensor::I64(ndarray::arr1(&xs).into_dyn());
    for backend in common::backends_with_gpu_host() {
        for (dtype, k) in [(kiln::bf16, 1), (kiln::f16, 2)] {
            let g = Graph::new();
            let v = g.input("x", kiln::i64, [None]);
            let f = function(&[&v], &[&v.cast(dtype)])
                .backend(backend)
                .compile()
                .unwrap();
            let got = f.call(&[x.view()]).unwrap().remove(0).to_f64_vec();
            for (c, got) in cases.iter().zip(got) {
                let want = if k == 1 { c.1 } else { c.2 };
                assert_eq!(got, want, "{backend:?}: {} as {dtype}", c.0);
            }
        }
    }
}

#[test]
fn pooling_an_empty_axis_is_an_error_not_padding() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(1), Some(0), Some(4)]);
    for y in [
        x.max_pool2d([2, 2], [1, 1], [1, 1]),
        x.avg_pool2d([2, 2], [1, 1], [1, 1]),
    ] {
        let e = y.check().unwrap_err().to_string();
        assert!(e.contains("axis -2 is empty"), "{e}");
    }
    let errors = call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [None, None, None]);
            (vec![x.clone()], vec![x.max_pool2d([2, 2], [1, 1], [1, 1])])
        },
        &[Tensor::F32(f32s(&[1, 0, 4]))],
    );
    for (backend, e) in errors {
        assert!(e.contains("is empty"), "{backend:?}: {e}");
    }
}

#[test]
fn debugprint_of_a_chain_a_million_deep_returns() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let mut y = x.clone();
    for _ in 0..1_000_000 {
        y = y.exp();
    }
    let text = kiln::debugprint(&[&y]);
    assert_eq!(text.lines().count(), 1_000_001);
    let last = text.lines().last().unwrap();
    assert!(last.contains("(depth 1000000) x [id"), "{last}");
    assert!(text.len() < 200 * 1_000_001, "{} bytes", text.len());
}

#[test]
fn a_scan_whose_stacked_outputs_cannot_fit_fails_at_its_first_step() {
    // A million steps each stacking 4 MB: 4 TB, refused before the entries pile up.
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let x0 = g.input("x0", kiln::f32, [Some(1_000_000)]);
        let (last, stacked) = kiln::scan_steps(&g, &[&x0], 1_000_000, |c, _t| {
            let next = &c[0] + 1.0;
            (vec![next.clone()], vec![next])
        });
        let f = function(&[&x0], &[&last[0], &stacked[0]])
            .backend(backend)
            .compile()
            .unwrap();
        let x = ndarray::Array1::<f32>::zeros(1_000_000).into_dyn();
        let e = f.call(&[x.view()]).expect_err("the call fails").to_string();
        assert!(
            e.contains("scan: stacked output 0") && e.contains("more than can be allocated"),
            "{backend:?}: {e}"
        );
    }
}

#[test]
fn an_object_of_a_huge_one_hot_is_refused_not_aborted() {
    let f = kiln::ir::text::parse(
        "huge.kir",
        "func @f(%i: i64[2]) -> (f32[]) {\n  %y = one_hot %i {depth = 10000000000, dtype = f32}\n  \
         %s = sum %y {axes = [0, 1], keepdims = false}\n  return %s\n}\n",
    )
    .map_err(|e| format!("{e:?}"))
    .unwrap()
    .remove(0);
    let e = kiln::aot::compile_func(&f, &kiln::aot::AotOptions::default())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("one_hot of depth 10000000000 would embed 80.0 GB"),
        "{e}"
    );
}

/// A product whose broadcast batch, known only at the call, has more entries than a `usize`
/// counts (2^33 by 2^33, of `[2, 0] @ [0, 2]` matrices: the inputs hold no element) is a
/// one-line error on every backend, never an overflow.
#[test]
fn a_product_batch_too_large_to_count_is_an_error() {
    let errors = call_fails(
        |g| {
            let x = g.input("x", kiln::f32, [None, Some(1), Some(2), Some(0)]);
            let y = g.input("y", kiln::f32, [Some(1), None, Some(0), Some(2)]);
            (vec![x.clone(), y.clone()], vec![x.matmul(&y)])
        },
        &[
            Tensor::F32(ArrayD::zeros(IxDyn(&[1 << 33, 1, 2, 0]))),
            Tensor::F32(ArrayD::zeros(IxDyn(&[1, 1 << 33, 0, 2]))),
        ],
    );
    for (backend, e) in errors {
        assert!(
            !e.contains('\n') && !e.contains("panicked"),
            "{backend:?}: {e}"
        );
    }
}
