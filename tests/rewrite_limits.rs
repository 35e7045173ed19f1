//! The optimizer runs in bounded time on large graphs: every pass is linear in the function's
//! size and the rule passes are capped, so it degrades to fewer rewrites, never to a hang.

use kiln::{CompileOptions, Graph, Var};
use std::time::{Duration, Instant};

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

/// A graph of thousands of instructions, every one read: the rules run to saturation within
/// the default limits, and with no time at all the pass still returns a correct function,
/// merged and folded but with fewer rewrites.
#[test]
fn the_egraph_degrades_to_fewer_rewrites_never_to_a_hang() {
    use kiln::rewrite::egraph::{run, Limits, Options};
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(4)]);
    let y = g.input("y", kiln::f64, [Some(4)]);
    let mut pool: Vec<Var> = vec![x.clone(), y.clone()];
    for k in 0..3000usize {
        let a = pool[(k * 7919 + 1) % pool.len()].clone();
        let b = pool[(k * 104_729 + 3) % pool.len()].clone();
        let v = match k % 6 {
            0 => (&a * 1.0 + 0.0).tanh(),
            1 => ((&a - &b).exp() - 1.0).tanh(),
            2 => (a.sigmoid() + 1.0).log(),
            3 => a.pow(2.0).tanh(),
            4 => -(-&b) * &a,
            _ => a.maximum(&b).sin(),
        };
        pool.push(v);
    }
    let outs: Vec<Var> = pool[2..].to_vec();
    let f = kiln::graph::to_ssa("wide", &[x, y], &outs, &[])
        .unwrap()
        .func;
    let n = f.inst_count();
    assert!(n > 5000, "only {n} instructions");
    let input = vec![
        kiln::Tensor::F64(ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[4]), |i| {
            0.3 * i[0] as f64 - 0.5
        })),
        kiln::Tensor::F64(ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[4]), |i| {
            0.2 - 0.1 * i[0] as f64
        })),
    ];
    let want = kiln::runtime::interp::run_func(&f, input.clone()).unwrap();
    let check = |o: &kiln::ir::Func| {
        assert!(kiln::ir::verify::verify(o).is_ok());
        let got = kiln::runtime::interp::run_func(o, input.clone()).unwrap();
        for (p, q) in want.iter().zip(&got) {
            for (u, v) in p.to_f64_vec().iter().zip(&q.to_f64_vec()) {
                assert!(
                    (u.is_nan() && v.is_nan()) || (u - v).abs() <= 1e-9 * u.abs().max(1.0),
                    "{u} vs {v}"
                );
            }
        }
    };
    let applied = |r: &kiln::rewrite::egraph::Report| -> usize {
        r.phases
            .iter()
            .flat_map(|p| p.applied.iter().map(|a| a.1))
            .sum()
    };
    // The default limits (500 ms in all, which a debug build may reach).
    let t = Instant::now();
    let (o, _) = run(&f, &Options::default());
    let took = t.elapsed();
    assert!(took.as_secs_f64() < 20.0, "{n} instructions took {took:?}");
    check(&o);
    // With time enough, the rules saturate.
    let unhurried = Options {
        limits: Limits {
            time: Duration::from_secs(120),
            ..Default::default()
        },
        ..Default::default()
    };
    let (full, report) = run(&f, &unhurried);
    check(&full);
    assert!(applied(&report) > 1000, "{report}");
    assert!(
        report.phases.iter().all(|p| p.stop == "saturated"),
        "{report}"
    );
    let all = applied(&report);

    // No time: every phase stops at once.
    let hurried = Options {
        limits: Limits {
            time: Duration::ZERO,
            ..Default::default()
        },
        ..Default::default()
    };
    let t = Instant::now();
    let (quick, report) = run(&f, &hurried);
    assert!(t.elapsed() < took * 2 + Duration::from_secs(1));
    check(&quick);
    assert_eq!(applied(&report), 0, "{report}");
    assert!(report.to_string().contains("time limit"), "{report}");

    // Few e-nodes: the phases stop when the e-graph outgrows them.
    let small = Options {
        limits: Limits {
            nodes_per_inst: 0,
            min_nodes: 8000,
            time: Duration::from_secs(120),
            ..Default::default()
        },
        ..Default::default()
    };
    let (o, report) = run(&f, &small);
    check(&o);
    assert!(report.to_string().contains("node limit"), "{report}");
    assert!(applied(&report) < all, "{report}");
}

/// Tree costs double with each level of sharing: a chain of 2,000 doublings has a tree cost
/// far beyond f64. Extraction saturates them and still chooses well, with no recursion.
#[test]
fn deep_sharing_extracts() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(2)]);
    let mut v = x.clone();
    for _ in 0..2000 {
        v = (&v * 1.0 + &v) * 0.5;
    }
    let f = kiln::graph::to_ssa("deep", &[x], &[v], &[]).unwrap().func;
    let o = kiln::rewrite::simplify(&f);
    assert!(kiln::ir::verify::verify(&o).is_ok());
    assert!(o.inst_count() < f.inst_count(), "the * 1.0 are gone");
    let input = vec![kiln::Tensor::F64(ndarray::arr1(&[1.5, -2.0]).into_dyn())];
    let a = kiln::runtime::interp::run_func(&f, input.clone()).unwrap();
    let b = kiln::runtime::interp::run_func(&o, input).unwrap();
    assert_eq!(a[0].to_f64_vec(), b[0].to_f64_vec());
}
