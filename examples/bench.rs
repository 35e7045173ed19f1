//! kiln's side of the standard workloads (benches/peers/README.md), one JSON line each:
//!
//! ```text
//! cargo run --release --example bench -- --json [--only W1,W2] [--threads N] [--backend B]
//! ```
//!
//! Inputs are standard normal f32 from kiln's own Philox stream (the peers use numpy's
//! generator; the distribution is the same). Each workload checks its result against an f64
//! reference computed here and reports the relative L2 error.

use kiln::{function, Backend, Function, Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};
use std::time::Instant;

struct Args {
    json: bool,
    only: Vec<String>,
    threads: usize,
    backend: Option<Backend>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        json: false,
        only: vec![],
        threads: 2,
        backend: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => a.json = true,
            "--only" => {
                a.only = it
                    .next()
                    .ok_or("--only needs a list")?
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            "--threads" => {
                a.threads = it
                    .next()
                    .ok_or("--threads needs a number")?
                    .parse()
                    .map_err(|e| format!("--threads: {e}"))?
            }
            "--backend" => {
                a.backend = Some(
                    it.next()
                        .ok_or("--backend needs a name")?
                        .parse()
                        .map_err(|e: kiln::Error| e.to_string())?,
                )
            }
            "--bench" => {} // passed by `cargo bench`
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(a)
}

fn normal(seed: u64, shape: &[usize]) -> ArrayD<f32> {
    // The stream is counter-based, so generating it on every thread gives the same numbers.
    use rayon::prelude::*;
    let n: usize = shape.iter().product();
    let mut v = vec![0.0f32; n];
    const CHUNK: usize = 1 << 14;
    v.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(k, c)| kiln::random::fill_normal_f32(seed, (k * CHUNK) as u64, c));
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap_or_else(|e| fail(&e.to_string()))
}

struct Timing {
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    runs: usize,
}

fn time(runs: usize, warm: usize, mut f: impl FnMut()) -> Timing {
    for _ in 0..warm {
        f();
    }
    let mut ts: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Timing {
        median_ms: ts[ts.len() / 2],
        min_ms: ts[0],
        max_ms: ts[ts.len() - 1],
        runs,
    }
}

fn rel_err(out: &[f64], reference: &[f64]) -> f64 {
    let num: f64 = out
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).powi(2))
        .sum();
    let den: f64 = reference.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

struct Report {
    workload: &'static str,
    timing: Timing,
    /// `None` where there is no reference to compare with (W5, W6).
    rel_err: Option<f64>,
    extra: String,
}

fn compile(b: kiln::FunctionBuilder, backend: Option<Backend>) -> Function {
    let b = match backend {
        Some(k) => b.backend(k),
        None => b,
    };
    b.compile()
        .unwrap_or_else(|e| fail(&format!("compile: {e}")))
}

fn fail(msg: &str) -> ! {
    eprintln!("bench: {msg}");
    std::process::exit(1)
}

fn f32_out(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec()
}

/// A line of /proc/self/status in kB (`VmRSS`, `VmHWM`), where there is one (Linux).
fn status_kb(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn w1(backend: Option<Backend>) -> Report {
    // Peak memory above the process's baseline: the kernel's resident-set high-water mark is
    // reset here (writing 5 to clear_refs), so it counts from this point.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let baseline_kb = status_kb("VmRSS:");
    let n: usize = 16_000_000;
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(n as i64)]);
    let y = g.input("y", kiln::f32, [Some(n as i64)]);
    let out = (-(&x * &x)).exp() * y.sin() + &x * &y * 0.5;
    let f = compile(function(&[&x, &y], &[&out]), backend);
    let (xv, yv) = (normal(0, &[n]), normal(1, &[n]));
    let mut outs = vec![Tensor::zeros(kiln::f32, &[n])];
    let timing = time(15, 3, || {
        f.call_into(&[xv.view(), yv.view()], &mut outs)
            .unwrap_or_else(|e| fail(&e.to_string()))
    });
    let memory = match (baseline_kb, status_kb("VmHWM:")) {
        (Some(base), Some(peak)) => {
            // Inputs and output: three arrays of n f32.
            let data_mb = 3.0 * n as f64 * 4.0 / 1e6;
            let peak_mb = (peak - base) * 1024.0 / 1e6;
            format!(
                ", \"peak_mb\": {peak_mb:.1}, \"data_mb\": {data_mb:.1}, \"peak_ratio\": {:.3}",
                peak_mb / data_mb
            )
        }
        _ => String::new(),
    };
    let m = 1_000_000;
    let reference: Vec<f64> = (0..m)
        .map(|i| {
            let (a, b) = (xv[[i]] as f64, yv[[i]] as f64);
            (-a * a).exp() * b.sin() + 0.5 * a * b
        })
        .collect();
    let got = f32_out(&outs[0]);
    Report {
        workload: "W1",
        timing,
        rel_err: Some(rel_err(&got[..m], &reference)),
        extra: memory,
    }
}

fn softmax_like(name: &'static str, backend: Option<Backend>) -> Report {
    let (r, c): (usize, usize) = (4096, 4096);
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(r as i64), Some(c as i64)]);
    let m = x.max(Some(&[1]), true);
    let out: Var = if name == "W2" {
        let e = (&x - &m).exp();
        &e / e.sum(Some(&[1]), true)
    } else {
        (&x - &m).exp().sum(Some(&[1]), false).log() + m.reshape(&[r as i64])
    };
    let f = compile(function(&[&x], &[&out]), backend);
    let xv = normal(0, &[r, c]);
    let out_shape: Vec<usize> = if name == "W2" { vec![r, c] } else { vec![r] };
    let mut outs = vec![Tensor::zeros(kiln::f32, &out_shape)];
    let timing = time(15, 3, || {
        f.call_into(&[xv.view()], &mut outs)
            .unwrap_or_else(|e| fail(&e.to_string()))
    });
    let rows = 256;
    let mut reference = Vec::new();
    for i in 0..rows {
        let row: Vec<f64> = (0..c).map(|j| xv[[i, j]] as f64).collect();
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        if name == "W2" {
            reference.extend(row.iter().map(|v| (v - mx).exp() / s));
        } else {
            reference.push(s.ln() + mx);
        }
    }
    let got = f32_out(&outs[0]);
    Report {
        workload: name,
        timing,
        rel_err: Some(rel_err(&got[..reference.len()], &reference)),
        extra: String::new(),
    }
}

fn w4(backend: Option<Backend>) -> Report {
    let n: usize = 1024;
    let g = Graph::new();
    let a = g.input("a", kiln::f32, [Some(n as i64), Some(n as i64)]);
    let b = g.input("b", kiln::f32, [Some(n as i64), Some(n as i64)]);
    let f = compile(function(&[&a, &b], &[&a.matmul(&b)]), backend);
    let (av, bv) = (normal(0, &[n, n]), normal(1, &[n, n]));
    let mut outs = vec![Tensor::zeros(kiln::f32, &[n, n])];
    let timing = time(15, 3, || {
        f.call_into(&[av.view(), bv.view()], &mut outs)
            .unwrap_or_else(|e| fail(&e.to_string()))
    });
    let rows = 16;
    let mut reference = Vec::new();
    for i in 0..rows {
        for j in 0..n {
            reference.push(
                (0..n)
                    .map(|k| av[[i, k]] as f64 * bv[[k, j]] as f64)
                    .sum::<f64>(),
            );
        }
    }
    let got = f32_out(&outs[0]);
    let gflops = 2.0 * (n as f64).powi(3) / (timing.median_ms * 1e6);
    Report {
        workload: "W4",
        timing,
        rel_err: Some(rel_err(&got[..reference.len()], &reference)),
        extra: format!(", \"gflops\": {gflops:.1}"),
    }
}

fn w7(backend: Option<Backend>) -> Report {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(10)]);
    let f = compile(function(&[&x], &[&(&x + 1.0)]), backend);
    let xv = normal(0, &[10]);
    let mut outs = vec![Tensor::zeros(kiln::f32, &[10])];
    let calls = 10_000;
    // One timing per call; the median is robust to the machine's noise.
    let timing = time(calls, 100, || {
        f.call_into(&[xv.view()], &mut outs)
            .unwrap_or_else(|e| fail(&e.to_string()))
    });
    let reference: Vec<f64> = xv.iter().map(|&v| v as f64 + 1.0).collect();
    let us = timing.median_ms * 1e3;
    // What timing a call that does nothing costs here (reading the clock twice): part of
    // every per-call figure, kiln's and the peers' alike.
    let floor = time(calls, 100, || {
        std::hint::black_box(&outs);
    });
    let floor_us = floor.median_ms * 1e3;
    Report {
        workload: "W7",
        rel_err: Some(rel_err(&f32_out(&outs[0]), &reference)),
        timing,
        extra: format!(", \"median_us\": {us:.3}, \"timer_floor_us\": {floor_us:.3}"),
    }
}

/// The W5 training step: batch 256, 784-512-512-10, tanh, softmax cross-entropy, SGD 0.01.
fn mlp_step(backend: Option<Backend>) -> (Function, ArrayD<f32>, ArrayD<f32>) {
    let sizes = [(784usize, 512usize), (512, 512), (512, 10)];
    let g = Graph::new();
    let mut params = Vec::new();
    for (k, &(i, o)) in sizes.iter().enumerate() {
        let s = 1.0 / (i as f32).sqrt();
        let w = normal(10 + k as u64, &[i, o]).mapv(|v| v * s);
        params.push(g.shared(&format!("w{k}"), w));
        params.push(g.shared(&format!("b{k}"), ArrayD::<f32>::zeros(IxDyn(&[o]))));
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
    let grads = kiln::grad(&loss, &refs).unwrap_or_else(|e| fail(&format!("grad: {e}")));
    let mut b = function(&[&x, &y], &[&loss]);
    for (p, gp) in params.iter().zip(&grads) {
        b = b.update(p, p - gp * 0.01);
    }
    let f = compile(b, backend);
    let xb = normal(20, &[256, 784]);
    let yb = ArrayD::from_shape_fn(IxDyn(&[256, 10]), |i| {
        let label = (kiln::random::uniform_f32(21, i[0] as u64) * 10.0) as usize % 10;
        (label == i[1]) as u8 as f32
    });
    (f, xb, yb)
}

fn w5(backend: Option<Backend>) -> Report {
    let (f, xb, yb) = mlp_step(backend);
    let timing = time(31, 5, || {
        f.call(&[xb.view(), yb.view()])
            .unwrap_or_else(|e| fail(&e.to_string()));
    });
    // The loss of a fresh model on one-hot targets over 10 classes starts near ln(10).
    let (f2, _, _) = mlp_step(backend);
    let loss = f2
        .call(&[xb.view(), yb.view()])
        .unwrap_or_else(|e| fail(&e.to_string()))[0]
        .to_f64_vec()[0];
    Report {
        workload: "W5",
        timing,
        rel_err: None,
        extra: format!(", \"first_loss\": {loss:.4}"),
    }
}

fn w6(backend: Option<Backend>) -> Report {
    // Building the graph, differentiating, compiling and the first call, from scratch each time.
    let timing = time(5, 1, || {
        let (f, xb, yb) = mlp_step(backend);
        f.call(&[xb.view(), yb.view()])
            .unwrap_or_else(|e| fail(&e.to_string()));
    });
    Report {
        workload: "W6",
        timing,
        rel_err: None,
        extra: String::new(),
    }
}

fn main() {
    let mut args = parse_args().unwrap_or_else(|e| fail(&e));
    // The fastest backend there is, unless asked otherwise.
    if args.backend.is_none() && std::env::var("KILN_BACKEND").is_err() {
        args.backend = Some(Backend::Cpu);
    }
    // The kernels run on rayon's pool; its size is fixed when it is first used.
    let _ = rayon_threads(args.threads);
    let all = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];
    let wanted: Vec<&str> = if args.only.is_empty() {
        all.to_vec()
    } else {
        all.iter()
            .copied()
            .filter(|w| args.only.iter().any(|o| o == w))
            .collect()
    };
    for w in wanted {
        let r = match w {
            "W1" => w1(args.backend),
            "W2" | "W3" => softmax_like(if w == "W2" { "W2" } else { "W3" }, args.backend),
            "W4" => w4(args.backend),
            "W5" => w5(args.backend),
            "W6" => w6(args.backend),
            _ => w7(args.backend),
        };
        if args.json {
            println!(
                "{{\"workload\": \"{}\", \"median_ms\": {:.4}, \"min_ms\": {:.4}, \"max_ms\": {:.4}, \"runs\": {}, \"rel_err\": {}, \"threads\": {}{}}}",
                r.workload, r.timing.median_ms, r.timing.min_ms, r.timing.max_ms, r.timing.runs,
                r.rel_err.map(|e| format!("{e:.3e}")).unwrap_or_else(|| "null".into()), args.threads, r.extra
            );
        } else {
            let err = r
                .rel_err
                .map(|e| format!("{e:.2e}"))
                .unwrap_or_else(|| "-".into());
            println!(
                "{}: median {:.3} ms (min {:.3}, max {:.3}), rel_err {err}",
                r.workload, r.timing.median_ms, r.timing.min_ms, r.timing.max_ms
            );
        }
    }
}

fn rayon_threads(n: usize) -> Result<(), String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| e.to_string())
}
