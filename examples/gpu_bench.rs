//! kiln's side of the GPU workloads (`benches/peers/README.md`, the GPU workloads), on a machine
//! with an NVIDIA GPU (built with `--features gpu`; `tools/gpu-check.sh` runs it beside the
//! peers). Inputs and results stay in GPU memory (`DeviceFunction`); times are medians of CUDA
//! event times around one call, after a warm-up.
//!
//! cargo run --release --features gpu --example gpu_bench -- [--json OUT.json] [--only G1,G2]
//! [--host]

use kiln::ir::text::parse;
use kiln::jit_ptx::cuda::Device;
use kiln::jit_ptx::device::{DeviceFunction, DeviceTensor};
use kiln::Tensor;
use ndarray::{ArrayD, IxDyn};
use std::sync::Arc;
use std::time::Instant;

/// A fixed pseudo-random walk in [-4, 4).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), values(n, seed))
        .unwrap()
        .into()
}

/// Median milliseconds of `f` by CUDA events, after a warm-up (on a host device: one call,
/// by the wall clock).
fn time(dev: &Arc<Device>, reps: usize, mut f: impl FnMut()) -> f64 {
    if dev.is_host() {
        let t = Instant::now();
        f();
        return t.elapsed().as_secs_f64() * 1e3;
    }
    for _ in 0..5 {
        f();
    }
    dev.synchronize().unwrap();
    let mut ts: Vec<f64> = (0..reps)
        .map(|_| {
            let a = dev.record().unwrap();
            f();
            let b = dev.record().unwrap();
            a.elapsed_ms(&b).unwrap() as f64
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    ts[ts.len() / 2]
}

/// Relative error (2-norm) of `got` against `want`.
fn rel(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den.max(1e-300)).sqrt()
}

struct Report {
    id: &'static str,
    median_ms: f64,
    rel_err: Option<f64>,
    note: String,
}

fn compile(src: &str) -> DeviceFunction {
    let func = parse("bench.kir", src).unwrap().remove(0);
    DeviceFunction::compile(func).unwrap_or_else(|e| panic!("{e}"))
}

const G1: &str = "func @g1(%x: f32[67108864], %y: f32[67108864]) -> (f32[67108864]) {
  %xx = mul %x, %x
  %n = neg %xx
  %e = exp %n
  %s = sin %y
  %a = mul %e, %s
  %h = const 0.5 : f32[]
  %xy = mul %x, %y
  %b = mul %h, %xy
  %r = add %a, %b
  return %r
}";

fn g1(reps: usize) -> Report {
    let n = 1usize << 26;
    let d = compile(G1);
    let dev = d.device().clone();
    let (x, y) = (tensor(&[n], 1), tensor(&[n], 2));
    let (dx, dy) = (d.upload(x.view()).unwrap(), d.upload(y.view()).unwrap());
    let ms = time(&dev, reps, || {
        d.run(&[&dx, &dy]).unwrap();
    });
    let got = d.run(&[&dx, &dy]).unwrap()[0]
        .download()
        .unwrap()
        .to_f64_vec();
    let (xs, ys) = (x.to_f64_vec(), y.to_f64_vec());
    let m = 1 << 20;
    let want: Vec<f64> = (0..m)
        .map(|i| (-xs[i] * xs[i]).exp() * ys[i].sin() + 0.5 * xs[i] * ys[i])
        .collect();
    Report {
        id: "G1",
        median_ms: ms,
        rel_err: Some(rel(&got[..m], &want)),
        note: "W1's expression, 64M f32, one fused map kernel".into(),
    }
}

const G2: &str = "func @g2(%x: f32[8192, 8192]) -> (f32[8192, 8192]) {
  %m = max %x {axes = [1], keepdims = true}
  %d = sub %x, %m
  %e = exp %d
  %s = sum %e {axes = [1], keepdims = true}
  %y = div %e, %s
  return %y
}";

const G3: &str = "func @g3(%x: f32[8192, 8192]) -> (f32[8192, 1]) {
  %m = max %x {axes = [1], keepdims = true}
  %d = sub %x, %m
  %e = exp %d
  %s = sum %e {axes = [1], keepdims = true}
  %l = log %s
  %y = add %l, %m
  return %y
}";

fn rows(id: &'static str, src: &str, reps: usize) -> Report {
    let m = 8192;
    let d = compile(src);
    let dev = d.device().clone();
    let x = tensor(&[m, m], 3);
    let dx = d.upload(x.view()).unwrap();
    let ms = time(&dev, reps, || {
        d.run(&[&dx]).unwrap();
    });
    let got = d.run(&[&dx]).unwrap()[0].download().unwrap().to_f64_vec();
    let xs = x.to_f64_vec();
    let (mut g, mut w) = (Vec::new(), Vec::new());
    for r in 0..64 {
        let row = &xs[r * m..(r + 1) * m];
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        if id == "G2" {
            w.extend(row.iter().map(|v| (v - mx).exp() / s));
            g.extend_from_slice(&got[r * m..(r + 1) * m]);
        } else {
            w.push(s.ln() + mx);
            g.push(got[r]);
        }
    }
    Report {
        id,
        median_ms: ms,
        rel_err: Some(rel(&g, &w)),
        note: format!("8192^2 f32, {} kernels", d_kernels(src)),
    }
}

fn d_kernels(src: &str) -> usize {
    let func = parse("bench.kir", src).unwrap().remove(0);
    let func = kiln::compile::optimize(func, &Default::default());
    kiln::jit_ptx::compile_ptx(&func, kiln::jit_ptx::DEFAULT_ARCH, &Default::default())
        .map(|m| m.kernels.len())
        .unwrap_or(0)
}

/// G4: a 4096^3 f32 product (true f32) through cuBLAS.
fn g4(reps: usize) -> Report {
    let n = 4096;
    let d = compile(&format!(
        "func @g4(%a: f32[{n}, {n}], %b: f32[{n}, {n}]) -> (f32[{n}, {n}]) {{\n  %c = matmul %a, %b\n  return %c\n}}"
    ));
    let dev = d.device().clone();
    let (a, b) = (tensor(&[n, n], 11), tensor(&[n, n], 12));
    let (da, db) = (d.upload(a.view()).unwrap(), d.upload(b.view()).unwrap());
    let ms = time(&dev, reps, || {
        d.run(&[&da, &db]).unwrap();
    });
    let got = d.run(&[&da, &db]).unwrap()[0]
        .download()
        .unwrap()
        .to_f64_vec();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let (mut g, mut w) = (Vec::new(), Vec::new());
    for i in 0..8 {
        for j in 0..8 {
            let (r, c) = (i * 511, j * 509);
            w.push((0..n).map(|k| av[r * n + k] * bv[k * n + c]).sum::<f64>());
            g.push(got[r * n + c]);
        }
    }
    Report {
        id: "G4",
        median_ms: ms,
        rel_err: Some(rel(&g, &w)),
        note: format!(
            "{:.1} TFLOP/s, cuBLAS sgemm",
            2.0 * (n as f64).powi(3) / ms / 1e9
        ),
    }
}

/// G5: W5's MLP training step (batch 256, 784-512-512-10, tanh, softmax cross-entropy, SGD),
/// the gradient graph built by kiln, everything on the device: weights in, loss and new
/// weights out.
fn g5(reps: usize) -> Report {
    use kiln::{function, Graph, Var};
    let sizes = [(784usize, 512usize), (512, 512), (512, 10)];
    let g = Graph::new();
    let mut params = Vec::new();
    let mut initial: Vec<(String, Tensor)> = Vec::new();
    for (k, &(i, o)) in sizes.iter().enumerate() {
        let s = 1.0 / (i as f32).sqrt();
        let w = ArrayD::from_shape_vec(IxDyn(&[i, o]), values(i * o, 30 + k as u64))
            .unwrap()
            .mapv(|v| v * s / 4.0);
        let b = ArrayD::<f32>::zeros(IxDyn(&[o]));
        params.push(g.shared(&format!("w{k}"), w.clone()));
        params.push(g.shared(&format!("b{k}"), b.clone()));
        initial.push((format!("w{k}"), w.into()));
        initial.push((format!("b{k}"), b.into()));
    }
    let x = g.input("x", kiln::f32, [Some(256), Some(784)]);
    let y = g.input("y", kiln::f32, [Some(256), Some(10)]);
    let h = (x.matmul(&params[0]) + &params[1]).tanh();
    let h = (h.matmul(&params[2]) + &params[3]).tanh();
    let logits = h.matmul(&params[4]) + &params[5];
    let m = logits.max(Some(&[1]), true);
    let shifted = &logits - &m;
    let lsm = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let loss = -(lsm * &y).sum(Some(&[1]), false).mean(None, false);
    let refs: Vec<&Var> = params.iter().collect();
    let grads = kiln::grad(&loss, &refs).unwrap();
    let mut b = function(&[&x, &y], &[&loss]).options(kiln::CompileOptions {
        backend: Some(kiln::Backend::Interp),
        ..Default::default()
    });
    for (p, gp) in params.iter().zip(&grads) {
        b = b.update(p, p - gp * 0.01);
    }
    let host = b.compile().unwrap();
    let d = DeviceFunction::compile(host.func().clone()).unwrap_or_else(|e| panic!("{e}"));
    let dev = d.device().clone();
    let xb = tensor(&[256, 784], 40);
    let yb: Tensor =
        ArrayD::from_shape_fn(IxDyn(&[256, 10]), |i| (i[0] % 10 == i[1]) as u8 as f32).into();
    let func = d.func().clone();
    let mut inputs = vec![d.upload(xb.view()).unwrap(), d.upload(yb.view()).unwrap()];
    for &p in &func.params[2..] {
        let name = func.name_of(p).unwrap_or("?");
        let t = &initial
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no shared variable {name}"))
            .1;
        inputs.push(d.upload(t.view()).unwrap());
    }
    // The loss against the interpreter's on the same step (the first call, step by step).
    let refs: Vec<&DeviceTensor> = inputs.iter().collect();
    let got = d.run(&refs).unwrap()[0].download().unwrap().to_f64_vec()[0];
    let want = host.call(&[xb.view(), yb.view()]).unwrap()[0].to_f64_vec()[0];
    // A training loop: each step's new weights are the next step's (copied into the graph's
    // inputs at each replay; the batch stays).
    let train = |d: &DeviceFunction| {
        let mut state = inputs.clone();
        time(&dev, reps, || {
            let refs: Vec<&DeviceTensor> = state.iter().collect();
            let outs = d.run(&refs).unwrap();
            state.truncate(2);
            state.extend(outs.into_iter().skip(1));
        })
    };
    let ms = train(&d);
    let plain = DeviceFunction::compile(host.func().clone())
        .unwrap_or_else(|e| panic!("{e}"))
        .with_graphs(false);
    let steps_ms = train(&plain);
    // The same step as users write it: a `Function` on `Backend::Gpu`, the weights shared
    // variables kept on the device and updated in place, the batch copied in and the loss
    // back at each call (wall time: it includes those copies and the waits).
    let mut fb = function(&[&x, &y], &[&loss]).backend(kiln::Backend::Gpu);
    for (p, gp) in params.iter().zip(&grads) {
        fb = fb.update(p, p - gp * 0.01);
    }
    let f = fb.compile().unwrap_or_else(|e| panic!("{e}"));
    let call = || {
        f.call(&[xb.view(), yb.view()]).unwrap();
    };
    for _ in 0..5 {
        call();
    }
    let in_use = dev.memory().in_use;
    dev.reset_peak();
    let mut ts: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            call();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    let function_ms = ts[ts.len() / 2];
    let peak = dev.memory().peak - in_use;
    Report {
        id: "G5",
        median_ms: ms,
        rel_err: Some(((got - want) / want).abs()),
        note: format!(
            "loss {got:.5} (interpreter {want:.5}); a replayed graph ({:?}); step by step \
             {steps_ms:.4} ms; as a Function on Backend::Gpu (weights on the device, updated in \
             place; the batch in, the loss out) {function_ms:.4} ms wall, peak {peak} B above \
             the {in_use} B in use",
            d.graphs()
        ),
    }
}

/// G6: compile G1 to its first result, in this process (the device already open: the first
/// workload opened it; `device_open_ms` says what that took).
fn g6() -> Report {
    let t = Instant::now();
    let d = compile(&G1.replace("67108864", "1024"));
    let x = tensor(&[1024], 5);
    let dx = d.upload(x.view()).unwrap();
    let _ = d.run(&[&dx, &dx]).unwrap()[0].download().unwrap();
    Report {
        id: "G6",
        median_ms: t.elapsed().as_secs_f64() * 1e3,
        rel_err: None,
        note: "compile G1's function (optimize, lower, LLVM, PTX, load) to its first result".into(),
    }
}

/// G7: `x + 1` on 10 f32, launch to result: through `Backend::Gpu` with host arrays (copies
/// each way) and on the device.
fn g7(reps: usize) -> Vec<Report> {
    let src = "func @g7(%x: f32[10]) -> (f32[10]) {
  %one = const 1.0 : f32[]
  %y = add %x, %one
  return %y
}";
    let func = parse("g7.kir", src).unwrap().remove(0);
    let f = kiln::jit_ptx::runtime::compile_func(func.clone(), true).unwrap();
    let x = tensor(&[10], 9);
    let wall = |mut g: Box<dyn FnMut() + '_>| {
        for _ in 0..10 {
            g();
        }
        let mut ts: Vec<f64> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                g();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ts.sort_by(f64::total_cmp);
        ts[ts.len() / 2]
    };
    let host = wall(Box::new(|| {
        f.call(&[x.view()]).unwrap();
    }));
    let d = DeviceFunction::compile(func).unwrap();
    let dx: DeviceTensor = d.upload(x.view()).unwrap();
    let dev = d.device().clone();
    let on = wall(Box::new(|| {
        d.run(&[&dx]).unwrap();
        dev.synchronize().unwrap();
    }));
    vec![
        Report {
            id: "G7",
            median_ms: on,
            rel_err: None,
            note: "device arrays, launch to synchronize (wall clock)".into(),
        },
        Report {
            id: "G7-host",
            median_ms: host,
            rel_err: None,
            note: "Backend::Gpu with host arrays: copy in, launch, copy out (wall clock)".into(),
        },
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let only: Vec<String> = arg("--only")
        .unwrap_or_else(|| "G1,G2,G3,G4,G5,G6,G7".into())
        .split(',')
        .map(String::from)
        .collect();
    // `--host`: the same program on a host device (no GPU; a check of the program, not a
    // measurement).
    if args.iter().any(|a| a == "--host") {
        kiln::jit_ptx::cuda::use_host_device();
    }
    let t = Instant::now();
    let dev = kiln::jit_ptx::cuda::device().unwrap_or_else(|e| {
        eprintln!("gpu_bench: {e}");
        std::process::exit(2)
    });
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "device: {} ({} SMs, {}), opened in {open_ms:.1} ms",
        dev.name,
        dev.sms,
        dev.arch()
    );
    let reps = 50;
    let mut out: Vec<Report> = Vec::new();
    for id in &only {
        let rs = match id.as_str() {
            "G1" => vec![g1(reps)],
            "G2" => vec![rows("G2", G2, reps)],
            "G3" => vec![rows("G3", G3, reps)],
            "G4" => vec![g4(20)],
            "G5" => vec![g5(reps)],
            "G6" => vec![g6()],
            "G7" => g7(200),
            other => {
                eprintln!("gpu_bench: {other} is not run by kiln yet (no GEMM on the device)");
                continue;
            }
        };
        for r in rs {
            println!(
                "{:8} kiln {:10.4} ms{}  {}",
                r.id,
                r.median_ms,
                r.rel_err
                    .map(|e| format!("  rel err {e:.2e}"))
                    .unwrap_or_default(),
                r.note
            );
            out.push(r);
        }
        dev.trim();
    }
    if let Some(path) = arg("--json") {
        let body: Vec<String> = out
            .iter()
            .map(|r| {
                format!(
                    "  \"{}:kiln\": {{\"median_ms\": {}, \"rel_err\": {}, \"note\": \"{}\"}}",
                    r.id,
                    r.median_ms,
                    r.rel_err.map(|e| e.to_string()).unwrap_or("null".into()),
                    r.note
                )
            })
            .collect();
        let json = format!(
            "{{\n  \"device\": \"{}\",\n  \"device_open_ms\": {open_ms},\n{}\n}}\n",
            dev.name,
            body.join(",\n")
        );
        std::fs::write(&path, json).unwrap();
    }
}
