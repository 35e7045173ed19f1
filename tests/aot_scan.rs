//! `scan` ahead of time: an RNN-like step with several carries and sequences, forward and
//! reversed, stacked outputs, carries that swap, integer carries, no steps at all, a scan
//! inside a scan, and the gradient through a scan (a backward scan over the forward one's
//! history): the object gives the CPU backend's bits and the interpreter's values (its own bits
//! where no matrix product is involved).

#[path = "support/aot_cases.rs"]
mod aot_cases;
#[path = "support/aot_lib.rs"]
mod aot_lib;
mod common;

use aot_cases::{as_dtype, case, case_on, check_all, check_all_close, Case};
use common::Rng;
use kiln::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Full-mantissa floats in (-1, 1) (products and sums that round).
fn fine(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        .collect();
    as_dtype(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(), dtype)
}

#[test]
fn random_scans_and_their_gradients_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_5ca9_0000_0001);
    let mut cases: Vec<Case> = Vec::new();
    for k in 0..16 {
        let dtype = if k % 2 == 0 { DType::F32 } else { DType::F64 };
        // Zero steps now and then: the initial carries come back, the stacks are empty.
        let steps = if k % 5 == 4 { 0 } else { 1 + rng.below(6) };
        let (batch, hidden, input) = (1 + rng.below(3), 1 + rng.below(4), 1 + rng.below(3));
        let reverse = k % 3 == 1;
        let inputs = vec![
            fine(&mut rng, &[batch, hidden], dtype),
            fine(&mut rng, &[steps, batch, input], dtype),
            fine(&mut rng, &[input, hidden], dtype),
            fine(&mut rng, &[hidden, hidden], dtype),
            fine(&mut rng, &[steps, batch, hidden], dtype),
        ];
        // Half the cases multiply in kiln's runtime library (both dtypes).
        let runtime = k % 4 >= 2;
        let what = format!(
            "rnn {k}: {dtype} {steps} steps of [{batch}, {input}] -> {hidden}, reverse {reverse}, runtime {runtime}"
        );
        cases.push(case_on(what, format!("rnn{k}"), runtime, inputs, |v| {
            let (h0, xs, wx, wh, target) = (&v[0], &v[1], &v[2], &v[3], &v[4]);
            let count0 = h0.sum(None, false) * 0.0;
            let body = |c: &[kiln::Var], x: &[kiln::Var]| {
                let h = (x[0].matmul(wx) + c[0].matmul(wh)).tanh();
                // A second carry that counts (through a float) and a stacked value per step.
                let n = &c[1] + 1.0;
                (vec![h.clone(), n], vec![h, c[1].clone()])
            };
            let (last, stacked) = if reverse {
                kiln::scan_reverse(&[h0, &count0], &[xs], body)
            } else {
                kiln::scan(&[h0, &count0], &[xs], body)
            };
            let loss =
                ((&stacked[0] - target).square()).sum(None, false) + last[0].sum(None, false);
            let grads = kiln::grad(&loss, &[h0, wx, wh]).unwrap();
            let mut outs = vec![last[0].clone(), last[1].clone(), stacked[0].clone()];
            outs.extend(grads);
            outs
        }));
    }
    check_all_close(&cases, "rnn");
}

#[test]
fn scans_that_swap_carries_count_in_integers_and_nest_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_5ca9_0000_0002);
    let xs = fine(&mut rng, &[4, 3], DType::F32);
    let a = fine(&mut rng, &[3], DType::F32);
    let b = fine(&mut rng, &[3], DType::F32);
    let grid = fine(&mut rng, &[3, 5, 2], DType::F64);
    let n0 = Tensor::from(ndarray::arr0(7i64).into_dyn());
    let cases = vec![
        // Carries that trade places each step: the next carries are copied in only after
        // both are computed.
        case("swap".into(), "swap".into(), vec![a, b, xs.clone()], |v| {
            let (last, stacked) = kiln::scan(&[&v[0], &v[1]], &[&v[2]], |c, x| {
                (
                    vec![c[1].clone(), c[0].clone()],
                    vec![&(&c[0] * &c[1]) + &x[0]],
                )
            });
            vec![last[0].clone(), last[1].clone(), stacked[0].clone()]
        }),
        // An i64 carry and a sequence read reversed.
        case("integer".into(), "integer".into(), vec![n0, xs], |v| {
            let (last, stacked) = kiln::scan_reverse(&[&v[0]], &[&v[1]], |c, x| {
                let k = &c[0] * 3 + 1;
                (vec![k.clone()], vec![&x[0] * k.cast(DType::F32)])
            });
            vec![last[0].clone(), stacked[0].clone()]
        }),
        // A scan over rows whose body scans over columns.
        case("nested".into(), "nested".into(), vec![grid], |v| {
            let zero = v[0].sum(None, false) * 0.0;
            let (outer, rows) = kiln::scan(&[&zero], &[&v[0]], |c, row| {
                let (inner, cols) = kiln::scan(&[&c[0]], &[&row[0]], |d, col| {
                    let s = &d[0] * 0.5 + col[0].sum(None, false);
                    (vec![s.clone()], vec![s])
                });
                (vec![inner[0].clone()], vec![cols[0].clone()])
            });
            vec![outer[0].clone(), rows[0].clone()]
        }),
    ];
    check_all(&cases, "swap");
}
