//! Statistical checks of kiln's counter-based random streams: determinism, independence of
//! seeds, moments and a Kolmogorov-Smirnov bound, at sizes that run fast.

use kiln::random::{normal_f32, normal_f64, uniform_f32, uniform_f64};

const N: u64 = 100_000;

/// Kolmogorov-Smirnov statistic of `xs` against the distribution function `cdf`.
fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

/// The 1% critical value of the KS statistic for large n.
fn ks_critical(n: usize) -> f64 {
    1.63 / (n as f64).sqrt()
}

/// The standard normal distribution function, from erfc by Abramowitz-Stegun 7.1.26
/// (absolute error below 1.5e-7, far below the KS bound used here).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * z);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

fn moments(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

#[test]
fn streams_are_deterministic_and_seeds_differ() {
    for i in [0, 1, 7, 1 << 40] {
        assert_eq!(uniform_f32(42, i), uniform_f32(42, i));
        assert_eq!(normal_f64(42, i).to_bits(), normal_f64(42, i).to_bits());
    }
    let a: Vec<f64> = (0..1000).map(|i| uniform_f64(1, i)).collect();
    let b: Vec<f64> = (0..1000).map(|i| uniform_f64(2, i)).collect();
    assert!(a.iter().zip(&b).filter(|(x, y)| x == y).count() < 2);
}

#[test]
fn uniform_streams_pass_ks_and_moments() {
    let xs: Vec<f64> = (0..N).map(|i| uniform_f32(7, i) as f64).collect();
    assert!(xs.iter().all(|&x| (0.0..1.0).contains(&x)));
    let d = ks(xs.clone(), |x| x.clamp(0.0, 1.0));
    assert!(d < ks_critical(xs.len()), "KS {d}");
    let (m, v) = moments(&xs);
    assert!(
        (m - 0.5).abs() < 0.005 && (v - 1.0 / 12.0).abs() < 0.002,
        "{m} {v}"
    );

    let xs: Vec<f64> = (0..N).map(|i| uniform_f64(8, i)).collect();
    let d = ks(xs.clone(), |x| x.clamp(0.0, 1.0));
    assert!(d < ks_critical(xs.len()), "KS {d}");
}

#[test]
fn normal_streams_pass_ks_and_moments() {
    for (name, xs) in [
        (
            "f32",
            (0..N).map(|i| normal_f32(11, i) as f64).collect::<Vec<_>>(),
        ),
        ("f64", (0..N).map(|i| normal_f64(12, i)).collect::<Vec<_>>()),
    ] {
        assert!(xs.iter().all(|x| x.is_finite()));
        let d = ks(xs.clone(), phi);
        assert!(d < ks_critical(xs.len()), "{name}: KS {d}");
        let (m, v) = moments(&xs);
        assert!(
            m.abs() < 0.015 && (v - 1.0).abs() < 0.02,
            "{name}: mean {m} var {v}"
        );
    }
}

#[test]
fn different_seeds_are_uncorrelated() {
    let a: Vec<f64> = (0..N).map(|i| normal_f64(100, i)).collect();
    let b: Vec<f64> = (0..N).map(|i| normal_f64(101, i)).collect();
    let r = a.iter().zip(&b).map(|(x, y)| x * y).sum::<f64>() / N as f64;
    assert!(r.abs() < 4.0 / (N as f64).sqrt(), "correlation {r}");
    // Neighbouring elements of one stream are uncorrelated too.
    let lag = a.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / N as f64;
    assert!(
        lag.abs() < 4.0 / (N as f64).sqrt(),
        "lag-1 correlation {lag}"
    );
}
