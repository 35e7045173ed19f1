//! Random ops through compiled functions: determinism by seed, fresh numbers per call through a
//! counter, parameters honoured, type errors for bad parameters.

use kiln::ir::{F64Bits, RandomDist};
use kiln::{function, Graph};
use ndarray::{ArrayD, IxDyn};

fn none() -> [ndarray::ArrayViewD<'static, f32>; 0] {
    []
}

#[test]
fn same_seed_same_numbers_and_parameters_are_honoured() {
    let g = Graph::new();
    let u = g.uniform(3, &[200, 50], kiln::f64, -2.0, 6.0);
    let u2 = g.uniform(3, &[200, 50], kiln::f64, -2.0, 6.0);
    let n = g.normal(4, &[10_000], kiln::f32, 1.5, 0.5);
    let b = g.bernoulli(5, &[10_000], kiln::bool, 0.25);
    let f = function(&[], &[&u, &u2, &n, &b]).compile().unwrap();
    let out = f.call(&none()).unwrap();
    let again = f.call(&none()).unwrap();
    assert_eq!(
        out, again,
        "a function without a counter gives the same numbers every call"
    );
    assert_eq!(out[0], out[1]);
    let uv = out[0].to_f64_vec();
    assert!(uv.iter().all(|&v| (-2.0..6.0).contains(&v)));
    let mean = uv.iter().sum::<f64>() / uv.len() as f64;
    assert!((mean - 2.0).abs() < 0.1, "{mean}");
    let nv = out[2].to_f64_vec();
    let m = nv.iter().sum::<f64>() / nv.len() as f64;
    let sd = (nv.iter().map(|v| (v - m).powi(2)).sum::<f64>() / nv.len() as f64).sqrt();
    assert!(
        (m - 1.5).abs() < 0.02 && (sd - 0.5).abs() < 0.02,
        "{m} {sd}"
    );
    let hits = out[3].to_f64_vec().iter().sum::<f64>() / 10_000.0;
    assert!((hits - 0.25).abs() < 0.02, "{hits}");
    // The stream is the documented one.
    assert_eq!(nv[7] as f32, 1.5 + 0.5 * kiln::random::normal_f32(4, 7));
}

#[test]
fn a_shared_counter_gives_fresh_numbers_per_call() {
    let g = Graph::new();
    let ctr = g.shared("ctr", ArrayD::from_elem(IxDyn(&[]), 0i64));
    let dist = RandomDist::Uniform {
        low: F64Bits(0.0),
        high: F64Bits(1.0),
    };
    let r = g.random(dist, 9, &[4], kiln::f32, Some(&ctr));
    let f = function(&[], &[&r])
        .update(&ctr, &ctr + 1)
        .compile()
        .unwrap();
    let a = f.call(&none()).unwrap();
    let b = f.call(&none()).unwrap();
    assert_ne!(a[0], b[0]);
    ctr.set_value(ArrayD::from_elem(IxDyn(&[]), 0i64)).unwrap();
    assert_eq!(
        f.call(&none()).unwrap()[0],
        a[0],
        "resetting the counter replays the stream"
    );
}

#[test]
fn bad_parameters_are_type_errors() {
    let g = Graph::new();
    assert!(g.bernoulli(1, &[2], kiln::f32, 1.5).check().is_err());
    assert!(g.uniform(1, &[2], kiln::f32, 1.0, 0.0).check().is_err());
    assert!(g.normal(1, &[2], kiln::i32, 0.0, 1.0).check().is_err());
    let x = g.input("x", kiln::f32, [None]);
    let dist = RandomDist::Normal {
        mean: F64Bits(0.0),
        std: F64Bits(1.0),
    };
    assert!(g
        .random(dist, 1, &[2], kiln::f32, Some(&x))
        .check()
        .is_err());
}
