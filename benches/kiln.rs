//! Criterion benchmarks: the optimizer on a training-step graph and on a 1,000-node random
//! graph, compile time, call overhead (W7), a W1-style kernel on each backend, and the W5
//! training step with its updates in place and out of place.
//! Run with `cargo bench`; the standard workloads side by side with the peers are in
//! `examples/bench.rs` and `benches/peers/compare.py`.

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::{function, Backend, CompileOptions, Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};
use std::hint::black_box;

/// The W5 training step's graph: inputs `x` and `y`, the loss, and the SGD update of each
/// weight and bias. Weights are N(0, 1/fan_in) from kiln's stream, or zeros.
fn w5_graph(random_weights: bool) -> (Var, Var, Var, Vec<(Var, Var)>) {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(256), Some(784)]);
    let y = g.input("y", kiln::f32, [Some(256), Some(10)]);
    let mut params = Vec::new();
    for (k, (i, o)) in [(784, 512), (512, 512), (512, 10)].into_iter().enumerate() {
        let w = ArrayD::from_shape_fn(IxDyn(&[i, o]), |ix| match random_weights {
            true => {
                kiln::random::normal_f32(k as u64, (ix[0] * o + ix[1]) as u64) / (i as f32).sqrt()
            }
            false => 0.0,
        });
        params.push(g.shared(&format!("w{k}"), w));
        params.push(g.shared(&format!("b{k}"), ArrayD::<f32>::zeros(IxDyn(&[o]))));
    }
    let h = (x.matmul(&params[0]) + &params[1]).tanh();
    let h = (h.matmul(&params[2]) + &params[3]).tanh();
    let lo = h.matmul(&params[4]) + &params[5];
    let s = &lo - lo.max(Some(&[1]), true);
    let loss = -((&s - s.exp().sum(Some(&[1]), true).log()) * &y)
        .sum(Some(&[1]), false)
        .mean(None, false);
    let refs: Vec<&Var> = params.iter().collect();
    let grads = kiln::grad(&loss, &refs).unwrap();
    let updates = params
        .iter()
        .zip(grads)
        .map(|(p, gp)| (p.clone(), p - gp * 0.01))
        .collect();
    (x, y, loss, updates)
}

/// The MLP training step of W5, as an SSA function (gradients included).
fn training_graph() -> kiln::ir::Func {
    let (x, y, loss, updates) = w5_graph(false);
    // Shared variables become parameters after the inputs.
    kiln::graph::to_ssa("step", &[x, y], &[loss], &updates)
        .unwrap()
        .func
}

/// A random elementwise-and-reduction graph of about `n` nodes.
fn random_graph(n: usize) -> kiln::ir::Func {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(64), Some(64)]);
    let mut pool = vec![x.clone()];
    for k in 0..n {
        let a = pool[(k * 7919) % pool.len()].clone();
        let b = pool[(k * 104729 + 3) % pool.len()].clone();
        let v = match k % 6 {
            0 => &a + &b,
            1 => &a * 0.5,
            2 => a.tanh(),
            3 => a.maximum(&b),
            4 => a.sum(Some(&[1]), true) + &b,
            _ => (&a - &b).exp(),
        };
        pool.push(v);
    }
    kiln::graph::to_ssa("random", &[x], &[pool.last().unwrap().clone()], &[])
        .unwrap()
        .func
}

fn optimizer(c: &mut Criterion) {
    let opts = CompileOptions {
        dump: Default::default(),
        ..Default::default()
    };
    let step = training_graph();
    c.bench_function("optimize/mlp_training_step", |b| {
        b.iter(|| kiln::compile::optimize(black_box(step.clone()), &opts))
    });
    let random = random_graph(1000);
    c.bench_function("optimize/random_1000_nodes", |b| {
        b.iter(|| kiln::compile::optimize(black_box(random.clone()), &opts))
    });
}

fn compile_and_call(c: &mut Criterion) {
    let step = training_graph();
    for backend in [Backend::Interp, Backend::Cpu] {
        let opts = CompileOptions {
            backend: Some(backend),
            dump: Default::default(),
            ..Default::default()
        };
        c.bench_function(&format!("compile/mlp_training_step/{backend}"), |b| {
            b.iter(|| kiln::compile_func(step.clone(), &opts).unwrap())
        });
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(10)]);
        let f = function(&[&x], &[&(&x + 1.0)])
            .backend(backend)
            .compile()
            .unwrap();
        let xv = ArrayD::<f32>::zeros(IxDyn(&[10]));
        let mut out = vec![Tensor::zeros(kiln::f32, &[10])];
        c.bench_function(&format!("call/w7_x_plus_1/{backend}"), |b| {
            b.iter(|| f.call_into(&[xv.view()], &mut out).unwrap())
        });
        let n: usize = 1 << 20;
        let y = g.input("y", kiln::f32, [Some(n as i64)]);
        let z = g.input("z", kiln::f32, [Some(n as i64)]);
        let w1 = (-(&y * &y)).exp() * z.sin() + &y * &z * 0.5;
        let f = function(&[&y, &z], &[&w1])
            .backend(backend)
            .compile()
            .unwrap();
        let (yv, zv) = (
            ArrayD::<f32>::from_elem(IxDyn(&[n]), 0.3),
            ArrayD::<f32>::from_elem(IxDyn(&[n]), -0.7),
        );
        let mut out = vec![Tensor::zeros(kiln::f32, &[n])];
        c.bench_function(&format!("run/w1_1m/{backend}"), |b| {
            b.iter(|| f.call_into(&[yv.view(), zv.view()], &mut out).unwrap())
        });
    }
}

/// The W5 training step as a compiled function with SGD updates, in place or not.
fn mlp_step(inplace: bool) -> kiln::Function {
    let (x, y, loss, updates) = w5_graph(true);
    let mut b = function(&[&x, &y], &[&loss]).options(CompileOptions {
        backend: Some(Backend::Cpu),
        dump: Default::default(),
        inplace,
        ..Default::default()
    });
    for (p, v) in &updates {
        b = b.update(p, v);
    }
    b.compile().unwrap()
}

/// The W5 step with its SGD updates in place and out of place.
fn training_step(c: &mut Criterion) {
    let xv = ArrayD::from_shape_fn(IxDyn(&[256, 784]), |i| {
        kiln::random::normal_f32(20, (i[0] * 784 + i[1]) as u64)
    });
    let yv = ArrayD::from_shape_fn(IxDyn(&[256, 10]), |i| (i[0] % 10 == i[1]) as u8 as f32);
    let mut group = c.benchmark_group("step");
    group.sample_size(30);
    for inplace in [true, false] {
        let f = mlp_step(inplace);
        let name = if inplace { "in_place" } else { "out_of_place" };
        group.bench_function(format!("w5_mlp/{name}"), |b| {
            b.iter(|| f.call(&[xv.view(), yv.view()]).unwrap())
        });
    }
    group.finish();
}

/// Generated reductions against the interpreter: argmax along the rows and down the columns of
/// a 4096 x 4096 f32 matrix, and a sum over axes that do not merge (`[0, 2]` of a 64 x 512 x
/// 512 array, which the interpreter copies into rows first), and a bias gradient's column sum.
fn reductions(c: &mut Criterion) {
    let mut group = c.benchmark_group("reduce");
    group.sample_size(10);
    let (n, m) = (4096, 4096);
    let xv = ArrayD::from_shape_fn(IxDyn(&[n, m]), |i| {
        kiln::random::uniform_f32(3, (i[0] * m + i[1]) as u64)
    });
    let shape3 = [64, 512, 512];
    let zv = ArrayD::from_shape_fn(IxDyn(&shape3), |i| {
        kiln::random::uniform_f32(4, ((i[0] * 512 + i[1]) * 512 + i[2]) as u64)
    });
    for backend in [Backend::Interp, Backend::Cpu] {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(n as i64), Some(m as i64)]);
        for (name, axis) in [("argmax_rows", 1), ("argmax_cols", 0)] {
            let f = function(&[&x], &[&x.argmax(Some(axis), false)])
                .backend(backend)
                .compile()
                .unwrap();
            group.bench_function(format!("{name}_4096x4096_f32/{backend}"), |b| {
                b.iter(|| f.call(&[xv.view()]).unwrap())
            });
        }
        let z = g.input("z", kiln::f32, shape3.map(|d| Some(d as i64)));
        let f = function(&[&z], &[&z.sum(Some(&[0, 2]), false)])
            .backend(backend)
            .compile()
            .unwrap();
        group.bench_function(format!("sum_axes_0_2_64x512x512_f32/{backend}"), |b| {
            b.iter(|| f.call(&[zv.view()]).unwrap())
        });
        // A bias gradient: W5's sum over a batch of 256 (the host column sum).
        let h = g.input("h", kiln::f32, [Some(256), Some(512)]);
        let f = function(&[&h], &[&h.sum(Some(&[0]), false)])
            .backend(backend)
            .compile()
            .unwrap();
        let hv = xv.slice(ndarray::s![..256, ..512]).to_owned().into_dyn();
        let mut out = f.call(&[hv.view()]).unwrap();
        group.bench_function(format!("sum_axis_0_256x512_f32/{backend}"), |b| {
            b.iter(|| f.call_into(&[hv.view()], &mut out).unwrap())
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    optimizer,
    compile_and_call,
    training_step,
    reductions
);
criterion_main!(benches);
