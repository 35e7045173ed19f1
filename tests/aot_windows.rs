//! `conv2d`, max and average pooling and their gradients ahead of time, on random shapes,
//! strides, paddings, dilations, groups, ranks and dtypes, with inputs read through
//! transposes (non-contiguous) and values that tie, NaN, infinities and signed zeros: the
//! object's outputs must be the interpreter's bits (the plan walks windows in `perform`'s
//! order). All objects are linked into one library and called in this process.

#[path = "support/aot_lib.rs"]
mod aot_lib;
mod common;

use common::Rng;
use kiln::aot::{AotArtifact, AotOptions};
use kiln::{function, Backend, Conv2d, DType, Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};

/// One random function: its inputs and what the interpreter gives for them.
struct Case {
    what: String,
    art: AotArtifact,
    inputs: Vec<Tensor>,
    want: Vec<Tensor>,
}

/// Builds `outputs(inputs)` for inputs of `shapes` (all dims known), compiles it ahead of time
/// as `symbol` and runs it on the interpreter.
fn case(
    what: String,
    symbol: String,
    inputs: Vec<Tensor>,
    outputs: impl FnOnce(&[Var]) -> Vec<Var>,
) -> Case {
    let g = Graph::new();
    let vars: Vec<Var> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let dims: Vec<Option<usize>> = t.shape().iter().map(|&d| Some(d)).collect();
            g.input(&format!("in{i}"), t.dtype(), dims)
        })
        .collect();
    let outs = outputs(&vars);
    let var_refs: Vec<&Var> = vars.iter().collect();
    let out_refs: Vec<&Var> = outs.iter().collect();
    let opts = AotOptions {
        symbol: Some(symbol),
        ..AotOptions::default()
    };
    let art = function(&var_refs, &out_refs)
        .aot(&opts)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let interp = function(&var_refs, &out_refs)
        .backend(Backend::Interp)
        .compile()
        .unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = interp.call(&refs).unwrap_or_else(|e| panic!("{what}: {e}"));
    Case {
        what,
        art,
        inputs,
        want,
    }
}

/// The same bits (any NaN matches any NaN).
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && x.iter()
            .zip(&y)
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
}

/// Links every case's object into one library and checks each against the interpreter.
fn check_all(cases: &[Case], name: &str) {
    let dir = std::env::temp_dir().join(format!("kiln-aot-windows-{}-{name}", std::process::id()));
    let arts: Vec<&AotArtifact> = cases.iter().map(|c| &c.art).collect();
    let lib = aot_lib::link(&arts, &dir).unwrap_or_else(|e| panic!("linking: {e}"));
    for c in cases {
        let got = lib
            .call(&c.art, &c.inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        for (i, (g, w)) in got.iter().zip(&c.want).enumerate() {
            assert!(
                same_bits(g, w),
                "{}: output {i}: ahead of time {g:?}, the interpreter {w:?}",
                c.what
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn as_dtype(a: ArrayD<f64>, dtype: DType) -> Tensor {
    match dtype {
        DType::F32 => Tensor::from(a.mapv(|v| v as f32)),
        DType::I32 => Tensor::from(a.mapv(|v| v as i32)),
        DType::I64 => Tensor::from(a.mapv(|v| v as i64)),
        _ => Tensor::from(a),
    }
}

/// Values in [-2, 2] in steps of 1/500 (sums of their products round in f32 and f64, so an
/// order that differs from the interpreter's shows), with some exact zeros.
fn values(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| match rng.below(10) {
            0 => 0.0,
            _ => (rng.below(2001) as f64 - 1000.0) / 500.0,
        })
        .collect();
    as_dtype(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(), dtype)
}

/// Values with a full mantissa in (-1.5, 1.5): output gradients whose sums round, so that
/// adding them up in another order than the interpreter's shows.
fn fine_values(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 3.0 - 1.5)
        .collect();
    as_dtype(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(), dtype)
}

/// Values for pooling: few distinct ones (ties in every window), and for floats NaN, both
/// infinities and both zeros now and then.
fn pool_values(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
    let v: Vec<f64> = (0..n)
        .map(|_| match rng.below(12) {
            0 if dtype.is_float() => special[rng.below(special.len())],
            _ => rng.below(7) as f64 - 3.0 + if dtype.is_float() { 0.25 } else { 0.0 },
        })
        .collect();
    as_dtype(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(), dtype)
}

/// `t` stored with its last two axes swapped: the function transposes it back, so the op
/// reads it through strides.
fn stored_transposed(t: &Tensor) -> Tensor {
    t.view().swap_last_two().to_standard_owned()
}

fn swap_last(v: &Var) -> Var {
    let r = v.ty().rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    v.transpose(&perm)
}

#[test]
fn random_convolutions_and_their_gradients_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_c0de_0000_0001);
    let mut cases = Vec::new();
    for k in 0..24 {
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
        let (n, cg, og) = (rng.below(3), 1 + rng.below(3), 1 + rng.below(3));
        let dtype = if k % 2 == 0 { kiln::f32 } else { kiln::f64 };
        let x = values(&mut rng, &[n, cg * groups, h, w], dtype);
        let f = values(&mut rng, &[og * groups, cg, kh, kw], dtype);
        let transposed = k % 3 == 1;
        let x_in = if transposed {
            stored_transposed(&x)
        } else {
            x.clone()
        };
        let out = (0..2).map(|a| {
            let span = conv.dilation[a] * ([kh, kw][a] - 1) + 1;
            ([h, w][a] + 2 * conv.padding[a] - span) / conv.stride[a] + 1
        });
        let mut out_shape = vec![n, og * groups];
        out_shape.extend(out);
        let probe = fine_values(&mut rng, &out_shape, dtype);
        let what = format!(
            "conv case {k}: {dtype} x{:?} f{:?} {conv:?}",
            x.shape(),
            f.shape()
        );
        cases.push(case(what, format!("conv{k}"), vec![x_in, f, probe], |v| {
            let x = if transposed {
                swap_last(&v[0])
            } else {
                v[0].clone()
            };
            let y = x.conv2d(&v[1], conv);
            // Output gradients of full mantissas.
            let loss = (&y * &v[2]).sum(None, false);
            let grads = kiln::grad(&loss, &[&x, &v[1]]).unwrap();
            vec![y, grads[0].clone(), grads[1].clone()]
        }));
    }
    check_all(&cases, "conv");
}

#[test]
fn random_pools_and_their_gradients_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_c0de_0000_0002);
    let mut cases = Vec::new();
    for k in 0..48 {
        let win = [1 + rng.below(3), 1 + rng.below(3)];
        // Mostly overlapping windows: an element that wins several adds up their gradients.
        let st = [1 + rng.below(3) / 2, 1 + rng.below(3) / 2];
        let pad = [rng.below(win[0] / 2 + 1), rng.below(win[1] / 2 + 1)];
        let h = win[0] + rng.below(4);
        let w = win[1] + rng.below(4);
        // Ranks 2 to 5; a lead dim may be 0.
        let mut shape: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(3)).collect();
        shape.extend([h, w]);
        let dtypes = [kiln::f64, kiln::f32, kiln::i32, kiln::i64];
        let dtype = dtypes[k % 4];
        let x = pool_values(&mut rng, &shape, dtype);
        let transposed = k % 5 == 2;
        let x_in = if transposed {
            stored_transposed(&x)
        } else {
            x.clone()
        };
        let what = format!(
            "pool case {k}: {dtype}{shape:?} window {win:?} strides {st:?} padding {pad:?}"
        );
        let float = dtype.is_float();
        let out: Vec<usize> = (0..2)
            .map(|a| (shape[shape.len() - 2 + a] + 2 * pad[a] - win[a]) / st[a] + 1)
            .collect();
        let mut out_shape = shape[..shape.len() - 2].to_vec();
        out_shape.extend(out);
        let r = fine_values(&mut rng, &out_shape, if float { dtype } else { kiln::f64 });
        cases.push(case(what, format!("pool{k}"), vec![x_in, r], |v| {
            let x = if transposed {
                swap_last(&v[0])
            } else {
                v[0].clone()
            };
            let m = x.max_pool2d(win, st, pad);
            if !float {
                return vec![m];
            }
            let a = x.avg_pool2d(win, st, pad);
            // Output gradients of full mantissas: `r` and `2 a r`.
            let loss = (&(&m + &(&a * &a)) * &v[1]).sum(None, false);
            let dx = kiln::grad(&loss, &[&x]).unwrap().remove(0);
            vec![m, a, dx]
        }));
    }
    check_all(&cases, "pool");
}
