//! `scan` (a loop over the leading axis of sequences with carried state) against loops
//! written out by hand, on every backend: carries and stacked outputs, reverse walks, empty
//! sequences, nesting, scans inside `ifelse`, integer carries, errors at build and run time,
//! gradients (first and second order) against finite differences, the text form, and that a
//! function taking no gradient stores no history.

mod common;
use common::{backends_with_gpu_host, call_both_ways, Build, Rng};
use kiln::{function, scan, scan_reverse, scan_steps, verify_grad, Graph, Tensor, VerifyOptions};
use ndarray::{ArrayD, IxDyn};

fn arr<T: Clone>(shape: &[usize], v: &[T]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap()
}

/// Runs on every backend, optimizer off and on, and checks each result against `want`
/// (closely for floats: the optimizer may reassociate).
fn check_all(build: &Build, inputs: &[Tensor], want: &[Tensor]) {
    for backend in backends_with_gpu_host() {
        for got in call_both_ways(backend, build, inputs) {
            let got = got.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            assert_eq!(got.len(), want.len(), "{backend:?}");
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    common::close(g, w),
                    "{backend:?} output {k}: {g:?}, want {w:?}"
                );
            }
        }
    }
}

/// The running sum of the rows of `xs` from `h0`, and each step's partial sum.
fn running_sum(h0: &[f64], xs: &[f64], n: usize, reverse: bool) -> (Vec<f64>, Vec<f64>) {
    let d = h0.len();
    let mut h = h0.to_vec();
    let mut out = vec![0.0; n * d];
    let order: Vec<usize> = if reverse {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    for t in order {
        for j in 0..d {
            h[j] = 0.5 * h[j] + xs[t * d + j];
            out[t * d + j] = h[j];
        }
    }
    (h, out)
}

#[test]
fn carries_and_stacked_outputs_match_a_loop_both_directions() {
    let xs: Vec<f64> = (0..12).map(|i| (i as f64) * 0.25 - 1.0).collect();
    let h0 = vec![1.0, -2.0, 0.5];
    for reverse in [false, true] {
        let (h, ys) = running_sum(&h0, &xs, 4, reverse);
        check_all(
            &|g| {
                let xs = g.input("xs", kiln::f64, [None, Some(3)]);
                let h0 = g.input("h0", kiln::f64, [Some(3)]);
                let body = |c: &[kiln::Var], x: &[kiln::Var]| {
                    let h = &c[0] * 0.5 + &x[0];
                    (vec![h.clone()], vec![h])
                };
                let (c, s) = if reverse {
                    scan_reverse(&[&h0], &[&xs], body)
                } else {
                    scan(&[&h0], &[&xs], body)
                };
                (vec![xs, h0], vec![c[0].clone(), s[0].clone()])
            },
            &[arr(&[4, 3], &xs).into(), arr(&[3], &h0).into()],
            &[arr(&[3], &h).into(), arr(&[4, 3], &ys).into()],
        );
    }
}

/// The host reads each step's slices where the sequences are and fills the stacked outputs
/// in place: a body that reads whole sequences beside their slices (one computed in the
/// function, which the VM holds, and one that is an input), takes one sequence twice, and
/// yields a slice itself and one value both as its carry and as a stacked output, against a
/// loop, both directions.
#[test]
fn steps_read_where_the_sequences_are_and_stacked_in_place_match_a_loop() {
    let (n, w) = (5, 3);
    let xs: Vec<f64> = (0..n * w).map(|i| (i as f64) * 0.2 - 1.0).collect();
    let h0 = vec![0.5, -1.0, 2.0];
    for reverse in [false, true] {
        let total: f64 = xs.iter().map(|x| x.exp()).sum();
        let mut h = h0.clone();
        let mut hs = vec![0.0; n * w];
        for k in 0..n {
            let t = if reverse { n - 1 - k } else { k };
            let x = &xs[t * w..(t + 1) * w];
            for i in 0..w {
                let column: f64 = (0..n).map(|r| xs[r * w + i]).sum();
                h[i] = 0.5 * h[i] + x[i] * x[i].exp() - x[i] + 0.01 * total + column;
                hs[t * w + i] = h[i];
            }
        }
        check_all(
            &|g| {
                let xs = g.input("xs", kiln::f64, [Some(n as i64), Some(w as i64)]);
                let h0 = g.input("h0", kiln::f64, [Some(w as i64)]);
                let ys = xs.exp();
                let (xs2, ys2) = (xs.clone(), ys.clone());
                let body = move |c: &[kiln::Var], x: &[kiln::Var]| {
                    let whole = ys2.sum(None, false) * 0.01;
                    let columns = xs2.sum(Some(&[0]), false);
                    let h = &c[0] * 0.5 + &x[0] * &x[1] - &x[2] + whole + columns;
                    (vec![h.clone()], vec![h, x[0].clone()])
                };
                let seqs = [&xs, &ys, &xs];
                let (c, s) = if reverse {
                    scan_reverse(&[&h0], &seqs, body)
                } else {
                    scan(&[&h0], &seqs, body)
                };
                (vec![xs, h0], vec![c[0].clone(), s[0].clone(), s[1].clone()])
            },
            &[arr(&[n, w], &xs).into(), arr(&[w], &h0).into()],
            &[
                arr(&[w], &h).into(),
                arr(&[n, w], &hs).into(),
                arr(&[n, w], &xs).into(),
            ],
        );
    }
}

#[test]
fn grads_match_finite_differences() {
    let points = [
        arr(
            &[4, 3],
            &(0..12).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>(),
        ),
        arr(&[3], &[0.1, -0.3, 0.2]),
        arr(
            &[3, 3],
            &(0..9)
                .map(|i| (i as f64 * 0.71).cos() * 0.5)
                .collect::<Vec<_>>(),
        ),
    ];
    for reverse in [false, true] {
        verify_grad(
            |_, v| {
                let body = |c: &[kiln::Var], x: &[kiln::Var]| {
                    let h = (c[0].matmul(&v[2]) + &x[0]).tanh();
                    (vec![h.clone()], vec![h.square()])
                };
                let (c, s) = if reverse {
                    scan_reverse(&[&v[1]], &[&v[0]], body)
                } else {
                    scan(&[&v[1]], &[&v[0]], body)
                };
                c[0].sum(None, false) + s[0].sum(None, false) * 0.5
            },
            &points,
            VerifyOptions::default(),
        )
        .unwrap_or_else(|e| panic!("reverse={reverse}: {e}"));
    }
}

#[test]
fn integer_carries_several_sequences_and_every_dtype() {
    // A step counter (i64), a float accumulator, a bool sequence choosing the sign, an i32
    // sequence stacked as it is and a bool stacked negated.
    let xs = [1.0f32, 2.0, -1.0, 0.5, 3.0, -2.0];
    let mask = [true, false, true];
    let ks = [7i32, -3, 9];
    let (mut n, mut acc) = (0i64, [0.0f32, 1.0]);
    let (mut ns, mut signed) = (vec![], vec![]);
    for t in 0..3 {
        n += 1;
        for j in 0..2 {
            let x = xs[t * 2 + j];
            let s = if mask[t] { x } else { -x };
            acc[j] += s;
            signed.push(s);
        }
        ns.push(n);
    }
    let not_mask: Vec<bool> = mask.iter().map(|m| !m).collect();
    check_all(
        &|g| {
            let xs = g.input("xs", kiln::f32, [Some(3), Some(2)]);
            let m = g.input("m", kiln::bool, [Some(3)]);
            let k = g.input("k", kiln::i32, [None]);
            let n0 = g.constant(Tensor::scalar(0i64));
            let a0 = g.input("a0", kiln::f32, [Some(2)]);
            let (c, s) = scan(&[&n0, &a0], &[&xs, &m, &k], |c, x| {
                let s = kiln::select(&x[1], &x[0], &-&x[0]);
                let n = &c[0] + 1;
                (
                    vec![n.clone(), &c[1] + &s],
                    vec![n, s, x[2].clone(), !&x[1]],
                )
            });
            let mut outs = c;
            outs.extend(s);
            (vec![xs, m, k, a0], outs)
        },
        &[
            arr(&[3, 2], &xs).into(),
            arr(&[3], &mask).into(),
            arr(&[3], &ks).into(),
            arr(&[2], &[0.0f32, 1.0]).into(),
        ],
        &[
            Tensor::scalar(3i64),
            arr(&[2], &acc).into(),
            arr(&[3], &ns).into(),
            arr(&[3, 2], &signed).into(),
            arr(&[3], &ks).into(),
            arr(&[3], &not_mask).into(),
        ],
    );
}

#[test]
fn empty_sequences_of_unknown_dims_stack_to_the_shapes_their_steps_would_have() {
    // The stacked value's type is f64[?, ?, ?]: with no steps its element shape comes from the
    // run-time shapes of the carry and the (empty) sequence: [3] with slices of [2, 3].
    check_all(
        &|g| {
            let xs = g.input("xs", kiln::f64, [None, None, None]);
            let h0 = g.input("h0", kiln::f64, [None]);
            let (c, s) = scan(&[&h0], &[&xs], |c, x| {
                let y = &c[0] + &x[0];
                (vec![c[0].clone()], vec![y])
            });
            (vec![xs, h0], vec![c[0].clone(), s[0].clone()])
        },
        &[
            ArrayD::<f64>::zeros(IxDyn(&[0, 2, 3])).into(),
            arr(&[3], &[1.0, 2.0, 3.0]).into(),
        ],
        &[
            arr(&[3], &[1.0, 2.0, 3.0]).into(),
            ArrayD::<f64>::zeros(IxDyn(&[0, 2, 3])).into(),
        ],
    );
}

#[test]
fn empty_sequences_give_the_initial_carries_and_empty_stacks() {
    check_all(
        &|g| {
            let xs = g.input("xs", kiln::f64, [None, Some(3)]);
            let h0 = g.input("h0", kiln::f64, [Some(3)]);
            let (c, s) = scan(&[&h0], &[&xs], |c, x| {
                let h = &c[0] + &x[0];
                (vec![h.clone()], vec![h.sum(None, false), h])
            });
            (vec![xs, h0], vec![c[0].clone(), s[0].clone(), s[1].clone()])
        },
        &[
            ArrayD::<f64>::zeros(IxDyn(&[0, 3])).into(),
            arr(&[3], &[1.0, 2.0, 3.0]).into(),
        ],
        &[
            arr(&[3], &[1.0, 2.0, 3.0]).into(),
            ArrayD::<f64>::zeros(IxDyn(&[0])).into(),
            ArrayD::<f64>::zeros(IxDyn(&[0, 3])).into(),
        ],
    );
}

/// The loop that `nested` builds, by hand: each row of `m` is scanned element by element
/// (a running `a * 0.5 + e`, from the outer carry), and the outer carry moves to the inner
/// scan's last value, or to its negation when that value is above 1.
fn nested_by_hand(m: &[f64], rows: usize, cols: usize, h0: f64) -> (f64, Vec<f64>) {
    let mut h = h0;
    let mut out = vec![];
    for r in 0..rows {
        let mut a = h;
        for c in 0..cols {
            a = a * 0.5 + m[r * cols + c];
        }
        h = if a > 1.0 { -a } else { a };
        out.push(h);
    }
    (h, out)
}

fn nested(m: &kiln::Var, h0: &kiln::Var) -> (kiln::Var, kiln::Var) {
    let (c, s) = scan(&[h0], &[m], |c, row| {
        let (inner, _) = scan(&[&c[0]], &[&row[0]], |a, e| {
            (vec![&a[0] * 0.5 + &e[0]], vec![])
        });
        let a = inner[0].clone();
        let h = kiln::ifelse(&a.gt(1.0), || vec![-&a], || vec![a.clone()]).remove(0);
        (vec![h.clone()], vec![h])
    });
    (c[0].clone(), s[0].clone())
}

#[test]
fn nested_scans_with_ifelse_inside_and_a_scan_inside_ifelse() {
    let m: Vec<f64> = (0..12).map(|i| ((i * 7 % 5) as f64) * 0.3 - 0.4).collect();
    let (h, hs) = nested_by_hand(&m, 4, 3, 0.25);
    check_all(
        &|g| {
            let m = g.input("m", kiln::f64, [Some(4), Some(3)]);
            let h0 = g.input("h0", kiln::f64, []);
            let flag = g.input("flag", kiln::bool, []);
            let (h, hs) = nested(&m, &h0);
            // A scan in a branch runs only when that branch is taken.
            let z = kiln::ifelse(&flag, || vec![nested(&m, &h0).0 * 2.0], || vec![h0.clone()]);
            (vec![m, h0, flag], vec![h, hs, z[0].clone()])
        },
        &[
            arr(&[4, 3], &m).into(),
            Tensor::scalar(0.25f64),
            Tensor::scalar(true),
        ],
        &[
            Tensor::scalar(h),
            arr(&[4], &hs).into(),
            Tensor::scalar(2.0 * h),
        ],
    );
    // The gradient flows through both levels and the branch taken at each step.
    verify_grad(
        |_, v| {
            let (h, hs) = nested(&v[0], &v[1]);
            h * 3.0 + hs.square().sum(None, false)
        },
        &[arr(&[4, 3], &m), arr(&[], &[0.25])],
        VerifyOptions::default(),
    )
    .unwrap();
}

#[test]
fn second_derivatives_through_a_scan() {
    // The gradient of the squared norm of a gradient: the backward scan is differentiated
    // in turn (through its own hidden history).
    let points = [
        arr(&[3, 2], &[0.3, -0.2, 0.5, 0.1, -0.4, 0.25]),
        arr(&[2, 2], &[0.6, -0.3, 0.2, 0.4]),
    ];
    verify_grad(
        |g, v| {
            let h0 = g.constant(Tensor::from(arr(&[2], &[0.1f64, -0.1])));
            let (c, _) = scan(&[&h0], &[&v[0]], |c, x| {
                (vec![(c[0].matmul(&v[1]) + &x[0]).tanh()], vec![])
            });
            let loss = c[0].square().sum(None, false);
            let gw = kiln::grad(&loss, &[&v[1]]).unwrap().remove(0);
            gw.square().sum(None, false)
        },
        &points,
        VerifyOptions {
            eps: 1e-5,
            abs_tol: 1e-6,
            rel_tol: 1e-4,
            ..VerifyOptions::default()
        },
    )
    .unwrap();
}

/// The tanh RNN cell of a language model, its hidden states stacked: the backward scan reads
/// them where the forward scan kept them instead of recomputing the step (its products and
/// its `tanh`), and the gradients, first and second, are still the finite differences'.
#[test]
fn the_backward_scan_reads_the_stacked_values_the_forward_scan_kept() {
    let cell = |v: &[kiln::Var]| {
        let wh = v[2].clone();
        move |c: &[kiln::Var], x: &[kiln::Var]| {
            let h = (c[0].matmul(&wh) + &x[0]).tanh();
            (vec![h.clone()], vec![h])
        }
    };
    let points = [
        arr(
            &[4, 3],
            &(0..12).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>(),
        ),
        arr(&[3], &[0.1, -0.3, 0.2]),
        arr(
            &[3, 3],
            &(0..9)
                .map(|i| (i as f64 * 0.71).cos() * 0.5)
                .collect::<Vec<_>>(),
        ),
    ];
    let loss = |v: &[kiln::Var], reverse: bool| {
        let (c, s) = match reverse {
            true => scan_reverse(&[&v[1]], &[&v[0]], cell(v)),
            false => scan(&[&v[1]], &[&v[0]], cell(v)),
        };
        c[0].sum(None, false) + (&s[0] * &s[0]).sum(None, false) * 0.5
    };
    for reverse in [false, true] {
        verify_grad(|_, v| loss(v, reverse), &points, VerifyOptions::default())
            .unwrap_or_else(|e| panic!("reverse={reverse}: {e}"));
        verify_grad(
            |_, v| {
                let l = loss(v, reverse);
                let gw = kiln::grad(&l, &[&v[2]]).unwrap().remove(0);
                gw.square().sum(None, false)
            },
            &points,
            VerifyOptions {
                eps: 1e-5,
                abs_tol: 1e-6,
                rel_tol: 1e-4,
                ..VerifyOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("second derivatives, reverse={reverse}: {e}"));
    }
    // The compiled gradient: one `tanh` in all (the forward step's), none recomputed.
    let g = Graph::new();
    let v = [
        g.input("xs", kiln::f64, [Some(4), Some(3)]),
        g.input("h0", kiln::f64, [Some(3)]),
        g.input("wh", kiln::f64, [Some(3), Some(3)]),
    ];
    let grads = kiln::grad(&loss(&v, false), &[&v[1], &v[2]]).unwrap();
    let f = function(&[&v[0], &v[1], &v[2]], &grads.iter().collect::<Vec<_>>())
        .compile()
        .unwrap();
    let text = kiln::ir::text::print_func(f.func());
    assert_eq!(text.matches("tanh").count(), 1, "{text}");
}

#[test]
fn a_function_without_gradients_stores_no_history() {
    let stacked = |with_grad: bool| {
        let g = Graph::new();
        let xs = g.input("xs", kiln::f64, [None, Some(3)]);
        let h0 = g.input("h0", kiln::f64, [Some(3)]);
        let (c, _) = scan(&[&h0], &[&xs], |c, x| (vec![(&c[0] * &x[0]).sin()], vec![]));
        let mut outs = vec![c[0].sum(None, false)];
        if with_grad {
            outs.extend(kiln::grad(&outs[0], &[&h0]).unwrap());
        }
        let f = function(&[&xs, &h0], &outs.iter().collect::<Vec<_>>())
            .compile()
            .unwrap();
        fn count(body: &[kiln::ir::Inst]) -> Vec<usize> {
            let mut out = vec![];
            for i in body {
                if let kiln::ir::Op::Scan { carries, .. } = i.op {
                    out.push(i.results.len() - carries);
                }
                for r in &i.regions {
                    out.extend(count(&r.body));
                }
            }
            out
        }
        count(&f.func().body)
    };
    // Forward only: one scan, nothing stacked. With the gradient: the forward scan stacks its
    // history for the backward one, which stacks nothing (its only sequence gradient is
    // not asked for).
    assert_eq!(stacked(false), vec![0]);
    let with = stacked(true);
    assert_eq!(with.len(), 2, "{with:?}");
    assert!(with.contains(&1), "{with:?}");
}

#[test]
fn errors_name_the_problem() {
    let compile = |build: &Build| {
        let g = Graph::new();
        let (ins, outs) = build(&g);
        function(
            &ins.iter().collect::<Vec<_>>(),
            &outs.iter().collect::<Vec<_>>(),
        )
        .compile()
        .map(|_| ())
    };
    let err = |build: &Build, want: &str| {
        let e = compile(build).expect_err(want).to_string();
        assert!(e.contains(want), "want `{want}` in: {e}");
    };
    err(
        &|g| {
            let xs = g.input("xs", kiln::f64, [Some(4), Some(3)]);
            let h0 = g.input("h0", kiln::f64, [Some(3)]);
            let (c, _) = scan(&[&h0], &[&xs], |c, _| (vec![c[0].sum(None, false)], vec![]));
            (vec![xs, h0], c)
        },
        "carry 0 is f64[3] but the body yields f64[]",
    );
    err(
        &|g| {
            let h0 = g.input("h0", kiln::f64, [Some(3)]);
            let (c, _) = scan(&[&h0], &[], |c, _| (vec![c[0].clone()], vec![]));
            (vec![h0], c)
        },
        "at least one sequence",
    );
    err(
        &|g| {
            let a = g.input("a", kiln::f64, [Some(4)]);
            let b = g.input("b", kiln::f64, [Some(5)]);
            let (_, s) = scan(&[], &[&a, &b], |_, x| (vec![], vec![&x[0] + &x[1]]));
            (vec![a, b], s)
        },
        "different lengths (4 and 5",
    );
    err(
        &|g| {
            let a = g.input("a", kiln::f64, [Some(4)]);
            let (_, s) = scan(&[&a], &[&a], |c, _| (vec![], vec![c[0].clone()]));
            (vec![a], s)
        },
        "returns 0 new carries for 1 carries",
    );
    err(
        &|g| {
            let a = g.input("a", kiln::f64, [Some(4)]);
            let leaked = std::cell::RefCell::new(None);
            let (_, s) = scan(&[], &[&a], |_, x| {
                let y = x[0].exp();
                *leaked.borrow_mut() = Some(y.clone());
                (vec![], vec![y])
            });
            let out = &s[0] + leaked.into_inner().unwrap();
            (vec![a], vec![out])
        },
        "is used outside it",
    );
    // At run time: lengths the types do not know, and a carry whose shape changes.
    for backend in backends_with_gpu_host() {
        let lengths: &Build = &|g| {
            let a = g.input("a", kiln::f64, [None]);
            let b = g.input("b", kiln::f64, [None]);
            let (_, s) = scan(&[], &[&a, &b], |_, x| (vec![], vec![&x[0] + &x[1]]));
            (vec![a, b], s)
        };
        for r in call_both_ways(
            backend,
            lengths,
            &[arr(&[4], &[0.0; 4]).into(), arr(&[3], &[0.0; 3]).into()],
        ) {
            let e = r.expect_err("lengths differ").to_string();
            assert!(
                e.contains("different lengths (4 steps, and 3"),
                "{backend:?}: {e}"
            );
        }
        let grows: &Build = &|g| {
            let a = g.input("a", kiln::f64, [None]);
            let xs = g.input("xs", kiln::f64, [Some(2)]);
            let (c, _) = scan(&[&a], &[&xs], |c, _| {
                (vec![kiln::concat(&[&c[0], &c[0]], 0)], vec![])
            });
            (vec![a, xs], c)
        };
        for r in call_both_ways(
            backend,
            grows,
            &[arr(&[1], &[1.0]).into(), arr(&[2], &[0.0; 2]).into()],
        ) {
            // The carry's type is f64[?], but a carry keeps the shape it starts with.
            let e = r.expect_err("the carry grows").to_string();
            assert!(
                e.contains("step 0 yields carry 0 of shape [2], but it started as [1]"),
                "{backend:?}: {e}"
            );
        }
    }
}

#[test]
fn the_text_form_round_trips_runs_and_compiles_ahead_of_time() {
    let src = "func @f(%h0: f32[2], %xs: f32[3, 2]) -> (f32[2], f32[3, 2]) {
  %h, %ys = scan %h0, %xs {carries = 1, reverse = true} (%c: f32[2], %x: f32[2]) {
    %half = const 0.5 : f32[]
    %m = mul %c, %half
    %n = add %m, %x
    yield %n, %n
  } : (f32[2], f32[3, 2])
  return %h, %ys
}
";
    let f = kiln::ir::text::parse_one("f.kir", src).unwrap();
    let printed = kiln::ir::text::print_func(&f);
    assert!(
        printed.contains("scan %h0, %xs {carries = 1, reverse = true} (%c: f32[2], %x: f32[2]) {"),
        "{printed}"
    );
    let again = kiln::ir::text::parse_one("f.kir", &printed).unwrap();
    assert_eq!(kiln::ir::text::print_func(&again), printed);
    let xs = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let (h, ys) = running_sum(&[0.0, 1.0], &xs.map(f64::from), 3, true);
    let h: Vec<f32> = h.iter().map(|&v| v as f32).collect();
    let ys: Vec<f32> = ys.iter().map(|&v| v as f32).collect();
    for backend in backends_with_gpu_host() {
        let func = common::compile_text(src, "f", backend, None);
        let out = func
            .call(&[
                &Tensor::from(arr(&[2], &[0.0f32, 1.0])),
                &Tensor::from(arr(&[3, 2], &xs)),
            ])
            .unwrap();
        assert!(common::close(&out[0], &arr(&[2], &h).into()), "{backend:?}");
        assert!(
            common::close(&out[1], &arr(&[3, 2], &ys).into()),
            "{backend:?}"
        );
    }
    // Ahead of time it is a loop (tests/aot_scan.rs runs scans in objects); nothing fails.
    let art = kiln::aot::compile_func(&f, &kiln::aot::AotOptions::default()).unwrap();
    assert!(art.errors.is_empty());
    // A parameter typed unlike its argument is an error that names it.
    let bad = src.replace("(%c: f32[2], %x: f32[2])", "(%c: f32[2], %x: f32[3])");
    let e = kiln::ir::text::parse("f.kir", &bad).unwrap_err();
    assert!(
        format!("{e:?}").contains("scan parameter %x is typed f32[3]"),
        "{e:?}"
    );
}

/// A random scan: carry of rank 0-3 and a random dtype, a sequence whose slices broadcast
/// against the carry in a random pattern, walked either way, the sequence sometimes a
/// transposed (non-contiguous) view; checked against the loop by hand.
#[test]
fn random_scans_match_a_hand_loop() {
    let mut rng = Rng(0x5eed_5ca7);
    for case in 0..40 {
        let dtype = [kiln::i32, kiln::i64, kiln::f32, kiln::f64][rng.below(4)];
        let rank = rng.below(4);
        let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(3)).collect();
        // The slice's shape: a suffix of the carry's, some dims 1 (broadcast).
        let drop = rng.below(rank + 1);
        let slice: Vec<usize> = shape[drop..]
            .iter()
            .map(|&d| if rng.below(3) == 0 { 1 } else { d })
            .collect();
        let steps = rng.below(5);
        let reverse = rng.below(2) == 1;
        let mut seq_shape = vec![steps];
        seq_shape.extend(&slice);
        let n0: usize = shape.iter().product();
        let ns: usize = seq_shape.iter().product();
        let h0: Vec<f64> = (0..n0).map(|_| rng.below(7) as f64 - 3.0).collect();
        let xs: Vec<f64> = (0..ns).map(|_| rng.below(9) as f64 - 4.0).collect();
        // By hand: h = h * 2 + x (broadcast), stacked y = h - x.
        let per: usize = slice.iter().product();
        let strides = |s: &[usize]| {
            let mut st = vec![0; s.len()];
            let mut acc = 1;
            for i in (0..s.len()).rev() {
                st[i] = if s[i] == 1 { 0 } else { acc };
                acc *= s[i];
            }
            st
        };
        let sst = strides(&slice);
        let index_in_slice = |flat: usize| {
            let mut rem = flat;
            let mut idx = vec![0; rank];
            for i in (0..rank).rev() {
                idx[i] = rem % shape[i];
                rem /= shape[i];
            }
            idx[drop..]
                .iter()
                .zip(&sst)
                .map(|(a, b)| a * b)
                .sum::<usize>()
        };
        let mut h = h0.clone();
        let mut ys = vec![0.0; steps * n0];
        let order: Vec<usize> = if reverse {
            (0..steps).rev().collect()
        } else {
            (0..steps).collect()
        };
        for t in order {
            for (k, hk) in h.iter_mut().enumerate() {
                let x = xs[t * per + index_in_slice(k)];
                *hk = *hk * 2.0 + x;
                ys[t * n0 + k] = *hk - x;
            }
        }
        let tensor = |v: &[f64], s: &[usize]| -> Tensor {
            let a = arr(s, v);
            match dtype {
                kiln::DType::I32 => a.mapv(|x| x as i32).into(),
                kiln::DType::I64 => a.mapv(|x| x as i64).into(),
                kiln::DType::F32 => a.mapv(|x| x as f32).into(),
                _ => a.into(),
            }
        };
        let mut ys_shape = vec![steps];
        ys_shape.extend(&shape);
        let want = [tensor(&h, &shape), tensor(&ys, &ys_shape)];
        let seq_ty: Vec<Option<i64>> = std::iter::once(None)
            .chain(slice.iter().map(|&d| Some(d as i64)))
            .collect();
        let carry_ty: Vec<Option<i64>> = shape.iter().map(|&d| Some(d as i64)).collect();
        let build = |g: &Graph| {
            let h0 = g.input("h0", dtype, carry_ty.clone());
            let xs = g.input("xs", dtype, seq_ty.clone());
            let body = |c: &[kiln::Var], x: &[kiln::Var]| {
                let h = &c[0] * 2 + &x[0];
                (vec![h.clone()], vec![&h - &x[0]])
            };
            let (c, s) = if reverse {
                scan_reverse(&[&h0], &[&xs], body)
            } else {
                scan(&[&h0], &[&xs], body)
            };
            (vec![h0, xs], vec![c[0].clone(), s[0].clone()])
        };
        // A 2-d sequence sometimes arrives as a transposed view of its transpose.
        let xs_t = tensor(&xs, &seq_shape);
        let transposed = seq_shape.len() == 2 && rng.below(2) == 0;
        for backend in backends_with_gpu_host() {
            for optimize in [false, true] {
                let g = Graph::new();
                let (ins, outs) = build(&g);
                let f = function(
                    &ins.iter().collect::<Vec<_>>(),
                    &outs.iter().collect::<Vec<_>>(),
                )
                .options(kiln::CompileOptions {
                    optimize,
                    backend: Some(backend),
                    ..Default::default()
                })
                .compile()
                .unwrap_or_else(|e| panic!("case {case}: {e}"));
                let h0t = tensor(&h0, &shape);
                let got = if transposed {
                    let owned = match &xs_t {
                        Tensor::F64(a) => Tensor::F64(a.t().as_standard_layout().into_owned()),
                        Tensor::F32(a) => Tensor::F32(a.t().as_standard_layout().into_owned()),
                        Tensor::I32(a) => Tensor::I32(a.t().as_standard_layout().into_owned()),
                        Tensor::I64(a) => Tensor::I64(a.t().as_standard_layout().into_owned()),
                        Tensor::Bool(a) => Tensor::Bool(a.t().as_standard_layout().into_owned()),
                        other => unreachable!("no {} cases", other.dtype()),
                    };
                    let view = match &owned {
                        Tensor::F64(a) => kiln::TensorRef::F64(a.t().into_dyn()),
                        Tensor::F32(a) => kiln::TensorRef::F32(a.t().into_dyn()),
                        Tensor::I32(a) => kiln::TensorRef::I32(a.t().into_dyn()),
                        Tensor::I64(a) => kiln::TensorRef::I64(a.t().into_dyn()),
                        Tensor::Bool(a) => kiln::TensorRef::Bool(a.t().into_dyn()),
                        other => unreachable!("no {} cases", other.dtype()),
                    };
                    f.call(&[h0t.view(), view])
                } else {
                    f.call(&[&h0t, &xs_t])
                }
                .unwrap_or_else(|e| panic!("case {case} {backend:?}: {e}"));
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        common::close(g, w),
                        "case {case} {backend:?} optimize={optimize} output {k} (carry {shape:?}, slice {slice:?}, {steps} steps, reverse {reverse}, transposed {transposed}): {g:?}, want {w:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn scan_steps_loops_a_number_of_times_with_the_step_index() {
    // x <- x / 2 + t for t = 0..5, every x kept; and no steps at all.
    let (mut x, mut xs) = ([1.0f64, -2.0], vec![]);
    for t in 0..5 {
        for v in x.iter_mut() {
            *v = *v * 0.5 + t as f64;
        }
        xs.extend(x);
    }
    for (steps, last, stacked) in [(5, x.to_vec(), xs), (0, vec![1.0, -2.0], vec![])] {
        check_all(
            &|g| {
                let x0 = g.input("x0", kiln::f64, [Some(2)]);
                let (c, s) = scan_steps(g, &[&x0], steps, |c, t| {
                    let x = &c[0] * 0.5 + t.cast(kiln::f64);
                    (vec![x.clone()], vec![x])
                });
                (vec![x0], vec![c[0].clone(), s[0].clone()])
            },
            &[arr(&[2], &[1.0, -2.0]).into()],
            &[
                arr(&[2], &last).into(),
                arr(&[steps as usize, 2], &stacked).into(),
            ],
        );
    }
    verify_grad(
        |g, v| {
            let (c, _) = scan_steps(g, &[&v[0]], 4, |c, t| {
                (vec![(&c[0] * t.cast(kiln::f64).exp()).sin()], vec![])
            });
            c[0].sum(None, false)
        },
        &[arr(&[2], &[0.3, -0.2])],
        VerifyOptions::default(),
    )
    .unwrap();
}
