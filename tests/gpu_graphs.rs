//! Calls replayed from recorded graphs (`jit_ptx/replay.rs`, `capture.rs`): from the second
//! call of an input signature on, a `DeviceFunction` launches one graph instead of its
//! kernels, with the same results bit for bit as the calls run step by step. Each test runs on
//! a host device of its own (the GPU runtime with host memory: a capture records the host
//! kernels, a launch runs the record), so the device's counters are the test's. The `ptx`
//! binary includes these tests as `gpu_graphs`: there they run on the GPU (one at a time, as
//! the GPU check runs it), or are skipped without one.
#![cfg(feature = "gpu")]

use kiln::jit_ptx::cuda::Device;
use kiln::jit_ptx::device::{DeviceFunction, DeviceTensor};
use kiln::{function, Backend, Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};
use std::sync::Arc;

// The `ptx` binary loads this file and its sibling, each with these values.
#[allow(clippy::duplicate_mod)]
#[path = "support/fill.rs"]
mod values;

fn fill(shape: &[usize], seed: u64) -> Tensor {
    values::fill(shape, seed).into()
}

/// A two-layer training step (products, tanh, a softmax cross-entropy, SGD updates), the
/// batch's length left open: `(x, y, w0, b0, w1, b1) -> (loss, w0', b0', w1', b1')`.
fn training_step() -> kiln::ir::Func {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(12)]);
    let y = g.input("y", kiln::f32, [None, Some(5)]);
    let shapes: [&[usize]; 4] = [&[12, 8], &[8], &[8, 5], &[5]];
    let params: Vec<Var> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| g.shared(&format!("p{k}"), fill(s, 10 + k as u64)))
        .collect();
    let h = (x.matmul(&params[0]) + &params[1]).tanh();
    let logits = h.matmul(&params[2]) + &params[3];
    let shifted = &logits - logits.max(Some(&[1]), true);
    let lsm = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let loss = -(lsm * &y).sum(Some(&[1]), false).mean(None, false);
    let refs: Vec<&Var> = params.iter().collect();
    let grads = kiln::grad(&loss, &refs).unwrap();
    let mut b = function(&[&x, &y], &[&loss]).backend(Backend::Interp);
    for (p, gp) in params.iter().zip(&grads) {
        b = b.update(p, p - gp * 0.1);
    }
    b.compile().unwrap().func().clone()
}

/// The step's inputs for a batch of `n`, on `f`'s device.
fn batch(f: &DeviceFunction, n: usize, seed: u64) -> Vec<DeviceTensor> {
    let y = ArrayD::from_shape_fn(IxDyn(&[n, 5]), |i| {
        ((i[0] + seed as usize) % 5 == i[1]) as u8 as f32
    });
    vec![
        f.upload(fill(&[n, 12], seed).view()).unwrap(),
        f.upload(Tensor::from(y).view()).unwrap(),
    ]
}

fn initial_params(f: &DeviceFunction) -> Vec<DeviceTensor> {
    let shapes: [&[usize]; 4] = [&[12, 8], &[8], &[8, 5], &[5]];
    shapes
        .iter()
        .enumerate()
        .map(|(k, s)| f.upload(fill(s, 10 + k as u64).view()).unwrap())
        .collect()
}

/// The device a test runs on: a host device of its own in this binary; in the `ptx` binary
/// the GPU, or none (the test is skipped: CI runs that binary's tests at the same time, and
/// this binary covers the host device).
fn device() -> Option<Arc<Device>> {
    if module_path!() == "gpu_graphs" {
        return Some(Device::host());
    }
    match kiln::jit_ptx::cuda::device() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: no GPU ({e})");
            None
        }
    }
}

/// `a` and `b` agree: bit for bit on the host device (the same kernels in the same order);
/// within 1e-5 on a GPU, where cuBLAS may choose another algorithm on a capture's stream.
fn assert_agree(a: &DeviceTensor, b: &DeviceTensor, exact: bool, what: &str) {
    let (x, y) = (bits(a), bits(b));
    if exact {
        assert_eq!(x, y, "{what}");
        return;
    }
    assert_eq!(x.len(), y.len(), "{what}");
    for (p, q) in x.iter().zip(&y) {
        let (p, q) = (f64::from_bits(*p), f64::from_bits(*q));
        assert!(
            (p - q).abs() <= 1e-5 * q.abs().max(1.0),
            "{what}: {p} vs {q}"
        );
    }
}

fn bits(t: &DeviceTensor) -> Vec<u64> {
    t.download()
        .unwrap()
        .to_f64_vec()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn run(f: &DeviceFunction, inputs: &[DeviceTensor]) -> Vec<DeviceTensor> {
    let refs: Vec<&DeviceTensor> = inputs.iter().collect();
    f.run(&refs).unwrap()
}

/// Two functions of the same step, each on a host device of its own: one replaying graphs,
/// one running every call step by step.
fn pair() -> Option<(DeviceFunction, DeviceFunction)> {
    let on = |graphs: bool| -> Option<DeviceFunction> {
        Some(
            DeviceFunction::compile_on(training_step(), device()?)
                .unwrap()
                .with_graphs(graphs),
        )
    };
    Some((on(true)?, on(false)?))
}

#[test]
fn a_training_loop_replays_one_graph_with_the_bits_of_the_steps() {
    let Some((f, plain)) = pair() else { return };
    let exact = f.device().is_host();
    let (mut params, mut plain_params) = (initial_params(&f), initial_params(&plain));
    let dev = f.device().clone();
    let mut kernels_per_call = 0;
    for call in 0..6 {
        // A new batch each call (copied into the graph's inputs), the last call's weights.
        let mut inputs = batch(&f, 16, call);
        inputs.extend(params.iter().cloned());
        let mut plain_inputs = batch(&plain, 16, call);
        plain_inputs.extend(plain_params.iter().cloned());
        let before = dev.launches();
        let outs = run(&f, &inputs);
        let (kernels, graphs) = (dev.launches().0 - before.0, dev.launches().1 - before.1);
        let want = run(&plain, &plain_inputs);
        for (o, (a, b)) in outs.iter().zip(&want).enumerate() {
            assert_agree(a, b, exact, &format!("output {o} of call {call}"));
        }
        match call {
            // The first call runs step by step; the second is recorded, then launched.
            0 => {
                assert_eq!(graphs, 0);
                assert!(kernels > 5, "{kernels} kernels");
                kernels_per_call = kernels;
            }
            1 => assert_eq!((kernels, graphs), (kernels_per_call, 1), "recorded"),
            _ => assert_eq!((kernels, graphs), (0, 1), "call {call} replays"),
        }
        params = outs[1..].to_vec();
        plain_params = want[1..].to_vec();
    }
    assert_eq!(f.graphs(), (1, 0));
    assert_eq!(plain.graphs(), (0, 0));
}

/// The results of a replay are the caller's: the next replay (which writes the graph's own
/// arrays again) leaves them as they were, and so does another function allocating and
/// writing on the same device between replays (the graph's buffers are not handed out).
#[test]
fn replayed_results_and_the_graphs_buffers_belong_to_their_owners() {
    let Some(dev) = device() else { return };
    let exact = dev.is_host();
    let f = DeviceFunction::compile_on(training_step(), dev.clone()).unwrap();
    let other = DeviceFunction::compile_on(training_step(), dev.clone())
        .unwrap()
        .with_graphs(false);
    let plain = DeviceFunction::compile_on(training_step(), device().unwrap())
        .unwrap()
        .with_graphs(false);
    let mut kept = Vec::new();
    for call in 0..5 {
        let mut inputs = batch(&f, 16, call);
        inputs.extend(initial_params(&f));
        let outs = run(&f, &inputs);
        let mut plain_inputs = batch(&plain, 16, call);
        plain_inputs.extend(initial_params(&plain));
        let want = run(&plain, &plain_inputs);
        kept.push((outs, want));
        // Another function's arrays of the same sizes, made between replays and kept.
        let mut noise = batch(&other, 16, 99 + call);
        noise.extend(initial_params(&other));
        let mut plain_noise = batch(&plain, 16, 99 + call);
        plain_noise.extend(initial_params(&plain));
        kept.push((run(&other, &noise), run(&plain, &plain_noise)));
    }
    assert_eq!(f.graphs(), (1, 0));
    for (call, (outs, want)) in kept.iter().enumerate() {
        for (o, (a, b)) in outs.iter().zip(want).enumerate() {
            let what = format!("output {o} of call {call}, read after the last");
            assert_agree(a, b, exact, &what);
        }
    }
}

/// Each input signature (dtypes and shapes) has its own graph; the calls alternate between
/// them and each replays its own.
#[test]
fn each_signature_has_its_graph() {
    let Some((f, plain)) = pair() else { return };
    let exact = f.device().is_host();
    for call in 0..8 {
        let n = [16, 3, 16, 40, 3, 40, 16, 3][call];
        let mut inputs = batch(&f, n, call as u64);
        inputs.extend(initial_params(&f));
        let mut plain_inputs = batch(&plain, n, call as u64);
        plain_inputs.extend(initial_params(&plain));
        let (a, b) = (run(&f, &inputs), run(&plain, &plain_inputs));
        assert_agree(&a[0], &b[0], exact, &format!("call {call} (batch {n})"));
    }
    assert_eq!(f.graphs(), (3, 0));
}

/// `rounds` of `x <- tanh(x @ v)`: a product and a map each, enough launches to be worth a
/// graph.
fn chain(x: &Var, v: &Var, rounds: usize) -> Var {
    (0..rounds).fold(x.clone(), |x, _| x.matmul(v).tanh())
}

/// A call that needs the host in the middle (here a gather, whose kernel flags an index out
/// of range for the host to read) is not recorded: its signature runs step by step, with the
/// right results and errors.
#[test]
fn a_call_that_reads_back_runs_step_by_step() {
    let g = Graph::new();
    let i = g.input("i", kiln::i64, [Some(3)]);
    let w = g.shared("w", fill(&[6, 4], 3));
    let v = g.shared("v", fill(&[4, 4], 4));
    let picked = chain(&w.take(&i, 0), &v, 4).sum(Some(&[1]), false);
    let reference = function(&[&i], &[&picked])
        .backend(Backend::Interp)
        .compile()
        .unwrap();
    let Some(dev) = device() else { return };
    let graphs_before = dev.launches().1;
    let f = DeviceFunction::compile_on(reference.func().clone(), dev.clone()).unwrap();
    let wv = f.upload(fill(&[6, 4], 3).view()).unwrap();
    let vv = f.upload(fill(&[4, 4], 4).view()).unwrap();
    let index = |idx: Vec<i64>| Tensor::from(ArrayD::from_shape_vec(IxDyn(&[3]), idx).unwrap());
    for call in 0..4usize {
        let idx = index((0..3).map(|k| ((k + call) % 6) as i64).collect());
        let got = f.run(&[&f.upload(idx.view()).unwrap(), &wv, &vv]).unwrap();
        let want = reference.call(&[idx.view()]).unwrap();
        let (got, want) = (
            got[0].download().unwrap().to_f64_vec(),
            want[0].to_f64_vec(),
        );
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-5, "call {call} row {k}: {a} vs {b}");
        }
    }
    let bad = f.upload(index(vec![0, 6, 1]).view()).unwrap();
    let e = f.run(&[&bad, &wv, &vv]).unwrap_err();
    assert!(e.to_string().contains("out of"), "{e}");
    assert_eq!(f.graphs(), (0, 1));
    assert_eq!(dev.launches().1, graphs_before, "no graph launched");
}

/// A function of one kernel is not recorded: a replay would copy its input and its result,
/// and launch a graph, to save one launch.
#[test]
fn a_one_kernel_function_runs_step_by_step() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(64)]);
    let func = function(&[&x], &[&(x.exp() * 2.0 + 1.0)])
        .backend(Backend::Interp)
        .compile()
        .unwrap()
        .func()
        .clone();
    let Some(dev) = device() else { return };
    let (kernels, graphs) = dev.launches();
    let f = DeviceFunction::compile_on(func, dev.clone()).unwrap();
    let xv = f.upload(fill(&[64], 1).view()).unwrap();
    for _ in 0..4 {
        f.run(&[&xv]).unwrap();
    }
    assert_eq!(f.graphs(), (0, 0));
    assert_eq!(dev.launches(), (kernels + 4, graphs));
}

/// Threads replaying one graph at once, each with its own batch: each gets its own results
/// (a replay's input copies, launch and result copies are not interleaved with another's).
#[test]
fn concurrent_replays_keep_their_inputs_apart() {
    let Some((f, plain)) = pair() else { return };
    let exact = f.device().is_host();
    let f = Arc::new(f);
    // Record the graph first.
    for call in 0..2 {
        let mut inputs = batch(&f, 16, call);
        inputs.extend(initial_params(&f));
        run(&f, &inputs);
    }
    assert_eq!(f.graphs(), (1, 0));
    let want: Vec<DeviceTensor> = (0..4u64)
        .map(|t| {
            let mut inputs = batch(&plain, 16, 100 + t);
            inputs.extend(initial_params(&plain));
            run(&plain, &inputs).remove(0)
        })
        .collect();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (f, want) = (f.clone(), &want);
            s.spawn(move || {
                for _ in 0..10 {
                    let mut inputs = batch(&f, 16, 100 + t);
                    inputs.extend(initial_params(&f));
                    let got = &run(&f, &inputs)[0];
                    assert_agree(got, &want[t as usize], exact, &format!("thread {t}"));
                }
            });
        }
    });
}

/// The calls a function counts (its state's `calls`, what custom ops' random streams are
/// drawn from) are its calls: a replay counts one, a recording that was refused and run again
/// step by step counts one. Through `Backend::Gpu` (in this binary the process's host
/// device, which no other test here uses).
#[test]
fn replays_and_refused_recordings_count_one_call_each() {
    if module_path!() == "gpu_graphs" {
        kiln::jit_ptx::cuda::use_host_device();
    }
    let Ok(dev) = kiln::jit_ptx::cuda::device() else {
        return eprintln!("skipped: no GPU");
    };
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(4)]);
    let i = g.input("i", kiln::i64, [Some(2)]);
    let v = g.shared("v", fill(&[4, 4], 4));
    let outs = [
        chain(&x, &v, 4).sum(None, false),
        chain(&x.take(&i, 0), &v, 4).sum(None, false),
    ];
    let reference: Vec<kiln::Function> = outs
        .iter()
        .map(|o| {
            function(&[&x, &i], &[o])
                .backend(Backend::Interp)
                .compile()
                .unwrap()
        })
        .collect();
    let gpu: Vec<kiln::Function> = outs
        .iter()
        .map(|o| {
            function(&[&x, &i], &[o])
                .backend(Backend::Gpu)
                .compile()
                .unwrap()
        })
        .collect();
    let xs = fill(&[2, 4], 8);
    let is = Tensor::from(ArrayD::from_shape_vec(IxDyn(&[2]), vec![1i64, 0]).unwrap());
    let before = dev.launches().1;
    for _ in 0..5 {
        for (f, r) in gpu.iter().zip(&reference) {
            let got = f.call(&[xs.view(), is.view()]).unwrap()[0].to_f64_vec()[0];
            let want = r.call(&[xs.view(), is.view()]).unwrap()[0].to_f64_vec()[0];
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }
    assert_eq!(
        dev.launches().1 - before,
        4,
        "the second call recorded, 4 launched"
    );
    assert_eq!(gpu[0].state().ops.calls, 5, "replayed");
    assert_eq!(gpu[1].state().ops.calls, 5, "refused");
}
