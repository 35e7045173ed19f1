//! Halves against f32 on kiln's CPU backend, each pair side by side in one run:
//!
//! - `map`: `y = tanh(x * 0.5 + 1)` over 4M elements stored as f16, bf16 and f32 (a half
//!   program computes in f32 and rounds after each op, as the graph API defines it: three
//!   round trips through the half, in 128-bit vectors);
//! - `store`: 4M f32 values rounded to f16 and to bf16, against an f32 copy;
//! - `matmul`: W4's 1024^3 product of f16 operands (read into f32, then kiln's GEMM) against f32.
//!
//! `cargo bench --bench half`.

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::{function, DType, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};

fn values(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i * 31) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let t = Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), xs).expect("the shape"));
    kiln::perform::cast(&t, dtype)
}

fn compiled(build: impl Fn(&Graph) -> (Vec<kiln::Var>, kiln::Var)) -> kiln::Function {
    let g = Graph::new();
    let (ins, out) = build(&g);
    let ins: Vec<&kiln::Var> = ins.iter().collect();
    function(&ins, &[&out]).compile().expect("compiles")
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("half");
    g.sample_size(20);
    let n: usize = 1 << 22;
    for dtype in [kiln::f16, kiln::bf16, kiln::f32] {
        let f = compiled(|g| {
            let x = g.input("x", dtype, [Some(n as i64)]);
            let y = (&x * 0.5 + 1.0).tanh();
            (vec![x], y)
        });
        let x = values(dtype, &[n]);
        g.bench_function(format!("map/{dtype}"), |t| {
            t.iter(|| f.call(&[&x]).expect("runs"))
        });
    }
    let x = values(kiln::f32, &[n]);
    for to in [kiln::f16, kiln::bf16, kiln::f32] {
        let f = compiled(|g| {
            let x = g.input("x", kiln::f32, [Some(n as i64)]);
            // `* 1` keeps the f32 "cast" a kernel (a cast to its own dtype is no op).
            let y = if to == kiln::f32 {
                &x * 1.0
            } else {
                x.cast(to)
            };
            (vec![x], y)
        });
        g.bench_function(format!("store/{to}"), |t| {
            t.iter(|| f.call(&[&x]).expect("runs"))
        });
    }
    let m: usize = 1024;
    for dtype in [kiln::f16, kiln::f32] {
        let f = compiled(|g| {
            let a = g.input("a", dtype, [Some(m as i64), Some(m as i64)]);
            let b = g.input("b", dtype, [Some(m as i64), Some(m as i64)]);
            let p = a.matmul(&b);
            (vec![a, b], p)
        });
        let (a, b) = (values(dtype, &[m, m]), values(dtype, &[m, m]));
        g.bench_function(format!("matmul/{dtype}"), |t| {
            t.iter(|| f.call(&[&a, &b]).expect("runs"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
