//! `conv2d`, max and average pooling and their gradients ahead of time, on random shapes,
//! strides, paddings, dilations, groups, ranks and dtypes, with inputs read through
//! transposes (non-contiguous) and values that tie, NaN, infinities and signed zeros: the
//! object's outputs must be the interpreter's bits (the plan walks windows in `perform`'s
//! order). All objects are linked into one library and called in this process.

#[path = "support/aot_cases.rs"]
mod aot_cases;
#[path = "support/aot_lib.rs"]
mod aot_lib;
mod common;

use aot_cases::{as_dtype, case, case_on, check_all, stored_transposed, swap_last};
use common::Rng;
use kiln::{Conv2d, DType, Tensor};
use ndarray::{ArrayD, IxDyn};

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
        // Every other case multiplies in kiln's runtime library.
        let runtime = k % 2 == 1;
        let what = format!(
            "conv case {k}: {dtype} x{:?} f{:?} {conv:?}, runtime {runtime}",
            x.shape(),
            f.shape()
        );
        cases.push(case_on(
            what,
            format!("conv{k}"),
            runtime,
            vec![x_in, f, probe],
            |v| {
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
            },
        ));
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
        let win: [usize; 2] = [1 + rng.below(3), 1 + rng.below(3)];
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
            let m = x.max_pool2d(
                win.map(|d| d as i64),
                st.map(|d| d as i64),
                pad.map(|d| d as i64),
            );
            if !float {
                return vec![m];
            }
            let a = x.avg_pool2d(
                win.map(|d| d as i64),
                st.map(|d| d as i64),
                pad.map(|d| d as i64),
            );
            // Output gradients of full mantissas: `r` and `2 a r`.
            let loss = (&(&m + &(&a * &a)) * &v[1]).sum(None, false);
            let dx = kiln::grad(&loss, &[&x]).unwrap().remove(0);
            vec![m, a, dx]
        }));
    }
    check_all(&cases, "pool");
}
