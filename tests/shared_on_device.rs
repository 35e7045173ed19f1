//! `Backend::Gpu` keeps shared variables on the device between calls: a variable is copied in
//! once, its updates stay there, and it crosses to the host only where the host reads it
//! (`value`, a state, a host backend's function). The copies are counted by the device
//! (`Device::transfers`), so these tests see what crosses as well as what is computed. Without
//! a GPU they run on the host device (the GPU runtime with host memory); the `ptx` binary
//! includes them as `gpu_shared`, so the GPU check runs them on the GPU.
#![cfg(feature = "gpu")]

use kiln::jit_ptx::cuda::{self, Transfers};
use kiln::{function, Backend, Function, Graph, Tensor, Var};
use ndarray::{array, ArrayD, IxDyn};
use std::sync::Mutex;

// The `ptx` binary loads this file and its sibling, each with these values.
#[allow(clippy::duplicate_mod)]
#[path = "support/fill.rs"]
mod values;
use values::fill;

/// The device's counters are the process's: the tests here take turns.
static TURN: Mutex<()> = Mutex::new(());

/// The turn to use the device; `None` (the test skips) where there is no GPU and these tests
/// are part of the `ptx` binary, whose tests run at the same time in CI: without a GPU they
/// run in their own binary, on the host device. (The GPU check runs `ptx` one test at a time.)
fn turn() -> Option<std::sync::MutexGuard<'static, ()>> {
    if cuda::device().is_err() {
        if module_path!() != "shared_on_device" {
            eprintln!(
                "skipped: no GPU (the shared_on_device binary runs these on the host device)"
            );
            return None;
        }
        cuda::use_host_device();
    }
    Some(TURN.lock().unwrap_or_else(|e| e.into_inner()))
}

fn transfers() -> Transfers {
    cuda::device().unwrap().transfers()
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(p, q)| (p - q).abs() <= 1e-5 * q.abs().max(1.0))
}

/// Asserts that each output in `got` is `close` to the one in `want`, naming `what` and the
/// output that is not.
fn assert_all_close(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: outputs");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(close(a, b), "{what}: output {k}");
    }
}

/// A softmax regression step: `loss` out, `w` and `b` updated by SGD.
fn training_step(backend: Backend) -> (Function, Var, Var) {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(64), Some(32)]);
    let y = g.input("y", kiln::f32, [Some(64), Some(16)]);
    let w = g.shared("w", fill(&[32, 16], 3));
    let b = g.shared("b", fill(&[16], 4));
    let logits = x.matmul(&w) + &b;
    let m = logits.max(Some(&[1]), true);
    let shifted = &logits - &m;
    let lsm = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let loss = -(lsm * &y).sum(Some(&[1]), false).mean(None, false);
    let grads = kiln::grad(&loss, &[&w, &b]).unwrap();
    let f = function(&[&x, &y], &[&loss])
        .update(&w, &w - &grads[0] * 0.5)
        .update(&b, &b - &grads[1] * 0.5)
        .backend(backend)
        .compile()
        .unwrap();
    (f, w, b)
}

#[test]
fn weights_cross_to_the_host_only_when_the_host_reads_them() {
    let Some(_turn) = turn() else { return };
    let (gpu, gw, gb) = training_step(Backend::Gpu);
    let (reference, rw, rb) = training_step(Backend::Interp);
    let x = fill(&[64, 32], 5);
    let y = ArrayD::from_shape_fn(IxDyn(&[64, 16]), |i| (i[0] % 16 == i[1]) as u8 as f32);
    let call = |f: &Function| f.call(&[x.view(), y.view()]).unwrap();
    let (x_bytes, y_bytes) = (64 * 32 * 4, 64 * 16 * 4);
    let (w_bytes, b_bytes) = (32 * 16 * 4, 16 * 4);

    // The first call copies the weights in with the inputs; the updates stay on the device.
    let before = transfers();
    let got = call(&gpu);
    let first = transfers() - before;
    assert!(close(&got[0], &call(&reference)[0]));
    assert_eq!(first.upload_bytes, x_bytes + y_bytes + w_bytes + b_bytes);
    assert_eq!(
        (first.downloads, first.download_bytes),
        (1, 4),
        "only the loss comes back"
    );

    // Later calls copy the inputs in and the loss out, nothing else.
    for step in 1..4 {
        let before = transfers();
        let got = call(&gpu);
        let one = transfers() - before;
        assert!(close(&got[0], &call(&reference)[0]), "loss at step {step}");
        assert_eq!((one.uploads, one.upload_bytes), (2, x_bytes + y_bytes));
        assert_eq!((one.downloads, one.download_bytes), (1, 4));
    }

    // Reading a weight copies it back once; the device keeps it (the next call copies
    // nothing in for it).
    let before = transfers();
    assert!(close(&gw.value().unwrap(), &rw.value().unwrap()));
    assert!(close(&gw.value().unwrap(), &rw.value().unwrap()));
    let read = transfers() - before;
    assert_eq!((read.downloads, read.download_bytes), (1, w_bytes));
    let before = transfers();
    assert!(close(&call(&gpu)[0], &call(&reference)[0]));
    assert_eq!((transfers() - before).upload_bytes, x_bytes + y_bytes);

    // A value set on the host replaces the device's: the next call copies it in.
    let b0 = Tensor::from(fill(&[16], 9));
    gb.set_value(b0.clone()).unwrap();
    rb.set_value(b0).unwrap();
    let before = transfers();
    assert!(close(&call(&gpu)[0], &call(&reference)[0]));
    assert_eq!(
        (transfers() - before).upload_bytes,
        x_bytes + y_bytes + b_bytes
    );
    assert!(close(&gw.value().unwrap(), &rw.value().unwrap()));
    assert!(close(&gb.value().unwrap(), &rb.value().unwrap()));

    // The function's state is the device's values.
    let state = gpu.state();
    let want = reference.state();
    for ((n, t), (m, u)) in state.shared.iter().zip(&want.shared) {
        assert_eq!(n, m);
        assert!(close(t, u), "state of {n}");
    }
}

/// `c <- c + x` on the GPU, `c <- c * 2` on the CPU, `c` read on the GPU: each sees the
/// other's updates, whichever holds the newest value.
#[test]
fn functions_on_the_gpu_and_the_cpu_share_a_variable() {
    let Some(_turn) = turn() else { return };
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let c = g.shared("c", array![1.0f64, 2.0, 3.0].into_dyn());
    let add = function(&[&x], &[])
        .update(&c, &c + &x)
        .backend(Backend::Gpu)
        .compile()
        .unwrap();
    let double = function(&[], &[])
        .update(&c, &c * 2.0)
        .backend(Backend::Cpu)
        .compile()
        .unwrap();
    let read = function(&[], &[&(&c * 1.0)])
        .backend(Backend::Gpu)
        .compile()
        .unwrap();
    let mut want = [1.0f64, 2.0, 3.0];
    let xs = array![0.5f64, -1.0, 4.0].into_dyn();
    for round in 0..4 {
        add.call(&[xs.view()]).unwrap();
        for (w, d) in want.iter_mut().zip(xs.iter()) {
            *w += d;
        }
        assert_eq!(
            read.call::<ndarray::ArrayViewD<f64>>(&[]).unwrap()[0].to_f64_vec(),
            want
        );
        if round % 2 == 1 {
            double.call::<ndarray::ArrayViewD<f64>>(&[]).unwrap();
            want.iter_mut().for_each(|w| *w *= 2.0);
        }
        assert_eq!(c.value().unwrap().to_f64_vec(), want, "round {round}");
    }
}

/// A call that fails (an index out of range, found by a kernel; an update of the wrong
/// shape) changes no variable: the device keeps the value of the last call that succeeded.
#[test]
fn a_failing_call_on_the_gpu_changes_no_shared_variable() {
    let Some(_turn) = turn() else { return };
    let g = Graph::new();
    let i = g.input("i", kiln::i64, [Some(2)]);
    let v = g.input("v", kiln::f32, [None]);
    let w = g.shared("w", array![1.0f32, 2.0, 3.0].into_dyn());
    let u = g.shared("u", array![10.0f32, 20.0, 30.0].into_dyn());
    let picked = w.take(&i, 0);
    let f = function(&[&i, &v], &[&picked])
        .update(&w, &w + 1.0)
        .update(&u, &v)
        .backend(Backend::Gpu)
        .compile()
        .unwrap();
    let ok_i = array![0i64, 2].into_dyn();
    let v3 = array![7.0f32, 8.0, 9.0].into_dyn();
    let call = |i: &ArrayD<i64>, v: &ArrayD<f32>| {
        f.call(
            &[Tensor::from(i.clone()), Tensor::from(v.clone())]
                .iter()
                .map(Tensor::view)
                .collect::<Vec<_>>(),
        )
    };
    let got = call(&ok_i, &v3).unwrap();
    assert_eq!(got[0].to_f64_vec(), vec![1.0, 3.0]);
    let bad_i = array![0i64, 3].into_dyn();
    let e = call(&bad_i, &v3);
    assert!(e.is_err(), "an index out of range is an error");
    let v4 = array![1.0f32, 2.0, 3.0, 4.0].into_dyn();
    let e = call(&ok_i, &v4).unwrap_err();
    assert!(e.to_string().contains("shared variable `u`"), "{e}");
    assert_eq!(w.value().unwrap().to_f64_vec(), vec![2.0, 3.0, 4.0]);
    assert_eq!(u.value().unwrap().to_f64_vec(), vec![7.0, 8.0, 9.0]);
    let got = call(&ok_i, &v3).unwrap();
    assert_eq!(got[0].to_f64_vec(), vec![2.0, 4.0]);
    assert_eq!(w.value().unwrap().to_f64_vec(), vec![3.0, 4.0, 5.0]);
}

/// Threads calling one GPU function that updates a counter: every update applies once (the
/// calls are serialized on the variable, wherever its value is).
#[test]
fn concurrent_updates_on_the_device_all_apply() {
    let Some(_turn) = turn() else { return };
    let g = Graph::new();
    let n = g.shared("n", array![0i64, 0].into_dyn());
    let f = function(&[], &[])
        .update(&n, &n + 1i64)
        .backend(Backend::Gpu)
        .compile()
        .unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for k in 0..25 {
                    f.call::<ndarray::ArrayViewD<f64>>(&[]).unwrap();
                    if k % 10 == 0 {
                        // A host read between the updates copies the value back.
                        let seen = n.value().unwrap().to_f64_vec();
                        assert_eq!(seen[0], seen[1]);
                    }
                }
            });
        }
    });
    assert_eq!(n.value().unwrap().to_f64_vec(), vec![100.0, 100.0]);
}

/// An RNN's loop (`scan` over a sequence, its weights shared) on `Backend::Gpu`: the steps
/// read views of the sequence and the outputs are stacked on the device, so a call copies its
/// inputs in and its outputs back and nothing else, whatever the sequence's length.
#[test]
fn a_scan_keeps_its_sequence_and_its_steps_on_the_device() {
    let Some(_turn) = turn() else { return };
    let rnn = |backend: Backend| {
        let g = Graph::new();
        let xs = g.input("xs", kiln::f32, [None, Some(4), Some(6)]);
        let h0 = g.input("h0", kiln::f32, [Some(4), Some(8)]);
        let w = g.shared("w", fill(&[6, 8], 21));
        let u = g.shared("u", fill(&[8, 8], 22));
        let (last, hs) = kiln::scan(&[&h0], &[&xs], |c, x| {
            let h = (x[0].matmul(&w) + c[0].matmul(&u)).tanh();
            (vec![h.clone()], vec![h * 2.0])
        });
        function(&[&xs, &h0], &[&last[0], &hs[0]])
            .backend(backend)
            .compile()
            .unwrap()
    };
    let (gpu, reference) = (rnn(Backend::Gpu), rnn(Backend::Interp));
    // The first call copies the weights in.
    let (xs, h0) = (fill(&[3, 4, 6], 29), fill(&[4, 8], 40));
    gpu.call(&[xs.view(), h0.view()]).unwrap();
    for steps in [5usize, 5, 9, 1] {
        let xs = fill(&[steps, 4, 6], 30 + steps as u64);
        let h0 = fill(&[4, 8], 40);
        let before = transfers();
        let got = gpu.call(&[xs.view(), h0.view()]).unwrap();
        let moved = transfers() - before;
        let want = reference.call(&[xs.view(), h0.view()]).unwrap();
        assert_all_close(&got, &want, &format!("after {steps} steps"));
        let bytes = |n: usize| 4 * n as u64;
        assert_eq!(
            (moved.uploads, moved.upload_bytes),
            (2, bytes(steps * 24 + 32)),
            "{steps} steps: the sequence and h0 in (the weights were copied in before)"
        );
        assert_eq!(
            (moved.downloads, moved.download_bytes),
            (2, bytes(32 + steps * 32)),
            "{steps} steps: the last state and the stacked states back"
        );
    }
}

/// An SGD step on a large weight matrix writes the update over the weights where they are
/// (the fused product update and the bias's map kernel take the donated buffers): no call
/// takes memory for a second copy of the weights, step by step or replayed from its graph
/// (a replay copies its results into the old values' buffers), nothing is left behind from
/// one call to the next, and the values are the interpreter's.
#[test]
fn sgd_updates_the_weights_where_they_are() {
    let Some(_turn) = turn() else { return };
    let step = |backend: Backend| {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(8), Some(256)]);
        let w = g.shared("w", fill(&[256, 256], 51));
        let b = g.shared("b", fill(&[256], 52));
        let h = (x.matmul(&w) + &b).tanh();
        let loss = (&h * &h).sum(None, false);
        let grads = kiln::grad(&loss, &[&w, &b]).unwrap();
        let f = function(&[&x], &[&loss])
            .update(&w, &w - &grads[0] * 0.01)
            .update(&b, &b - &grads[1] * 0.01)
            .backend(backend)
            .compile()
            .unwrap();
        (f, w, b)
    };
    let (gpu, gw, gb) = step(Backend::Gpu);
    let (reference, rw, rb) = step(Backend::Interp);
    let dev = cuda::device().unwrap();
    let w_bytes = 256 * 256 * 4;
    let mut settled = None;
    for call in 0..6u64 {
        let x = fill(&[8, 256], 60 + call);
        let before = dev.memory();
        dev.reset_peak();
        let got = gpu.call(&[x.view()]).unwrap();
        let after = dev.memory();
        assert!(
            close(&got[0], &reference.call(&[x.view()]).unwrap()[0]),
            "loss at call {call}"
        );
        let extra = after.peak - before.in_use;
        match call {
            // The weights are copied in: one copy of them, no second.
            0 => assert!(extra < 2 * w_bytes, "call 0 took {extra} bytes more"),
            // Recorded: the graph keeps arrays of its own.
            1 => {}
            _ => {
                assert!(
                    extra < w_bytes,
                    "replay {call} took {extra} bytes more (the weights are {w_bytes})"
                );
                let now = after.in_use;
                assert_eq!(
                    *settled.get_or_insert(now),
                    now,
                    "memory left by call {call}"
                );
            }
        }
    }
    assert!(close(&gw.value().unwrap(), &rw.value().unwrap()));
    assert!(close(&gb.value().unwrap(), &rb.value().unwrap()));
}

/// A variable that another function reads (its device copy held by that function's replays,
/// which compare their inputs by buffer) is never written over in place: each function sees
/// the other's values.
#[test]
fn a_variable_another_function_holds_is_not_written_over() {
    let Some(_turn) = turn() else { return };
    let pair = |backend: Backend| {
        let g = Graph::new();
        let w = g.shared("w", fill(&[32, 32], 71));
        let update = function(&[], &[])
            .update(&w, &w * 0.5 + 1.0)
            .backend(backend)
            .compile()
            .unwrap();
        // Two products and a sum: more launches than inputs and outputs, so it is replayed.
        let p = w.matmul(&w).matmul(&w);
        let read = function(&[], &[&(p * 1e-3).sum(None, false)])
            .backend(backend)
            .compile()
            .unwrap();
        (update, read)
    };
    let (gpu_update, gpu_read) = pair(Backend::Gpu);
    let (ref_update, ref_read) = pair(Backend::Interp);
    let none: &[ndarray::ArrayViewD<f32>] = &[];
    for round in 0..6 {
        let (got, want) = (gpu_read.call(none).unwrap(), ref_read.call(none).unwrap());
        assert_all_close(&got, &want, &format!("round {round}"));
        gpu_update.call(none).unwrap();
        ref_update.call(none).unwrap();
    }
}

/// A call that fails after its variables were handed over to be written in place (an index
/// out of range, found by a kernel; such a call is never recorded) gives them back as they
/// were, whether the device's value was newer than the host's or not.
#[test]
fn a_failing_call_gives_the_donated_variables_back() {
    let Some(_turn) = turn() else { return };
    let g = Graph::new();
    let i = g.input("i", kiln::i64, [Some(2)]);
    let w = g.shared("w", array![1.0f32, 2.0, 3.0].into_dyn());
    let f = function(&[&i], &[&(w.take(&i, 0) * 2.0)])
        .update(&w, &w * 0.5 + 1.0)
        .backend(Backend::Gpu)
        .compile()
        .unwrap();
    let call = |i: [i64; 2]| f.call(&[ndarray::arr1(&i).into_dyn().view()]);
    let mut want = vec![1.0f64, 2.0, 3.0];
    for round in 0..4 {
        // A failure first (the host value is current in round 0, the device's after).
        assert!(
            call([0, 3]).is_err(),
            "round {round}: an index out of range"
        );
        if round % 2 == 1 {
            assert_eq!(w.value().unwrap().to_f64_vec(), want, "round {round}");
        }
        let got = call([2, 0]).unwrap();
        assert_eq!(got[0].to_f64_vec(), vec![2.0 * want[2], 2.0 * want[0]]);
        want.iter_mut().for_each(|v| *v = *v * 0.5 + 1.0);
    }
    assert_eq!(w.value().unwrap().to_f64_vec(), want);
}

/// Updates of every kind a function writes over its variables (a product's fused update, maps
/// of f32, f64 and i64 variables, a scatter into the old value, a new value that does not read
/// the old), called step by step, recorded and replayed: the variables and outputs are the
/// interpreter's after every call.
#[test]
fn updates_of_every_kind_on_the_device_are_the_interpreters() {
    let Some(_turn) = turn() else { return };
    let build = |backend: Backend| {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(4), Some(16)]);
        let i = g.input("i", kiln::i64, [Some(3)]);
        let w = g.shared("w", fill(&[16, 8], 81));
        let b = g.shared("b", array![0.5f64, -1.0, 2.0, 0.25].into_dyn());
        let n = g.shared("n", array![1i64, -2, 3].into_dyn());
        let e = g.shared("e", fill(&[5, 8], 82));
        let s = g.shared("s", fill(&[16], 83));
        let h = x.matmul(&w).tanh();
        let loss = (&h * &h).sum(None, false);
        let gw = kiln::grad(&loss, &[&w]).unwrap().remove(0);
        let rows = h.sum(Some(&[0]), true).broadcast_to(&[3, 8]);
        let f = function(&[&x, &i], &[&loss, &(&n * 2i64)])
            .update(&w, &w - &gw * 0.05)
            .update(&b, &b * 0.5 + 1.0)
            .update(&n, &n + 1i64)
            .update(&e, kiln::scatter_add(&e, &i, &rows, 0))
            .update(&s, x.sum(Some(&[0]), false))
            .backend(backend)
            .compile()
            .unwrap();
        (f, [w, b, n, e, s])
    };
    let (gpu, gvars) = build(Backend::Gpu);
    let (reference, rvars) = build(Backend::Interp);
    for call in 0..6u64 {
        let x = Tensor::from(fill(&[4, 16], 90 + call));
        let i = Tensor::from(array![call as i64 % 5, 4, 0].into_dyn());
        let inputs = [x.view(), i.view()];
        let (got, want) = (gpu.call(&inputs).unwrap(), reference.call(&inputs).unwrap());
        assert_all_close(&got, &want, &format!("call {call}"));
        // Reading the values copies them back; the next call copies them in again.
        if call % 2 == 1 {
            for (gv, rv) in gvars.iter().zip(&rvars) {
                let (a, b) = (gv.value().unwrap(), rv.value().unwrap());
                assert!(
                    close(&a, &b),
                    "call {call}: {}",
                    gv.name().unwrap_or_default()
                );
            }
        }
    }
}

/// A function that returns a variable's old value, or its new one, besides updating it: the
/// old value is not written over before it is returned, and the new one is returned as the
/// variable keeps it (a copy each way), over steps, recording and replays.
#[test]
fn returning_a_variable_it_updates_gives_the_interpreters_values() {
    let Some(_turn) = turn() else { return };
    let build = |backend: Backend| {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(64)]);
        let w = g.shared("w", fill(&[64], 61));
        let v = g.shared("v", fill(&[64], 62));
        let new_v = (&v * 0.5 + &x).tanh();
        let f = function(&[&x], &[&w, &new_v, &(&w * &x).sum(None, false)])
            .update(&w, &w * 0.9 + &x)
            .update(&v, &new_v)
            .backend(backend)
            .compile()
            .unwrap();
        (f, w, v)
    };
    let (gpu, gw, gv) = build(Backend::Gpu);
    let (reference, rw, rv) = build(Backend::Interp);
    for call in 0..6u64 {
        let x = fill(&[64], 70 + call);
        let (got, want) = (
            gpu.call(&[x.view()]).unwrap(),
            reference.call(&[x.view()]).unwrap(),
        );
        assert_all_close(&got, &want, &format!("call {call}"));
    }
    assert!(close(&gw.value().unwrap(), &rw.value().unwrap()));
    assert!(close(&gv.value().unwrap(), &rv.value().unwrap()));
}
