//! The optimizer runs in bounded time on large graphs: every pass is linear in the function's
//! size and the rule passes are capped, so it degrades to fewer rewrites, never to a hang.

use kiln::{CompileOptions, Graph, Var};
use std::time::Instant;

#[test]
fn thousands_of_nodes_optimize_quickly_and_keep_their_values() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(8)]);
    let mut pool: Vec<Var> = vec![x.clone()];
    for k in 0..5000usize {
        let a = pool[(k * 7919) % pool.len()].clone();
        let b = pool[(k * 104_729 + 3) % pool.len()].clone();
        let v = match k % 7 {
            0 => &a + &b,
            1 => &a * 1.0 + 0.0,
            2 => (a.tanh() + 1.0).log(),
            3 => a.maximum(&b),
            4 => -(-&a),
            5 => a.sum(Some(&[0]), true) + &b,
            _ => (&a - &b).exp() - 1.0,
        };
        pool.push(v);
    }
    let outs: Vec<&Var> = pool.iter().rev().take(50).collect();
    let f = kiln::graph::to_ssa(
        "big",
        &[x],
        &outs.iter().map(|v| (*v).clone()).collect::<Vec<_>>(),
        &[],
    )
    .unwrap()
    .func;
    let n = f.inst_count();
    assert!(n > 1000, "only {n} instructions");
    let opts = CompileOptions {
        dump: Default::default(),
        ..Default::default()
    };
    let t = Instant::now();
    let o = kiln::compile::optimize(f.clone(), &opts);
    let took = t.elapsed();
    // Generous for a debug build on a loaded machine; it takes milliseconds in release.
    assert!(
        took.as_secs_f64() < 20.0,
        "optimizing {n} instructions took {took:?}"
    );
    assert!(kiln::ir::verify::verify(&o).is_ok());
    assert!(o.inst_count() < n, "nothing was simplified or fused");
    let input = vec![kiln::Tensor::F64(ndarray::ArrayD::from_shape_fn(
        ndarray::IxDyn(&[8]),
        |i| 0.1 * i[0] as f64 - 0.3,
    ))];
    let a = kiln::runtime::interp::run_func(&f, input.clone()).unwrap();
    let b = kiln::runtime::interp::run_func(&o, input).unwrap();
    for (p, q) in a.iter().zip(&b) {
        let (p, q) = (p.to_f64_vec(), q.to_f64_vec());
        for (u, v) in p.iter().zip(&q) {
            // Rewrites may change rounding (expm1 for exp - 1), never more.
            assert!(
                (u.is_nan() && v.is_nan()) || u == v || (u - v).abs() <= 1e-9 * u.abs().max(1.0),
                "{u} vs {v}"
            );
        }
    }
}
