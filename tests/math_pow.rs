//! f64 `pow` in double-word arithmetic (`kiln::math::pow_f64`, the GPU's `pow`) against libm's
//! `pow`, which the CPU backend and the interpreter call (glibc's is within 0.52 ulp of the
//! exact result): within 1 ulp of it on random operands over the whole range of results
//! (subnormal, overflowing, near 1 with huge exponents, negative bases, integer powers), and
//! bit for bit on special operands.

use kiln::math::{pow_f64, Eval64};

/// A deterministic stream of 64-bit values (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn pow(x: f64, y: f64) -> f64 {
    pow_f64(&mut Eval64, x, y)
}

/// The distance in ulps between two f64 values (0 for two NaNs; large across signs).
fn ulps(a: f64, b: f64) -> u64 {
    if a.is_nan() && b.is_nan() || a == b {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    // Bits as a line of ordered integers: negatives below zero.
    let ordered = |v: f64| {
        let bits = v.to_bits() as i64;
        if bits < 0 {
            i64::MIN - bits
        } else {
            bits
        }
    };
    ordered(a).abs_diff(ordered(b))
}

/// The worst distance to libm over `cases`, and the case.
fn worst(cases: impl Iterator<Item = (f64, f64)>) -> (u64, f64, f64, usize) {
    let mut w = (0, 0.0, 0.0, 0);
    for (x, y) in cases {
        w.3 += 1;
        let d = ulps(pow(x, y), x.powf(y));
        if d > w.0 {
            (w.0, w.1, w.2) = (d, x, y);
        }
    }
    w
}

fn check(what: &str, cases: impl Iterator<Item = (f64, f64)>) {
    let (d, x, y, n) = worst(cases);
    assert!(
        d <= 1,
        "{what}: pow({x:e}, {y:e}) = {:e}, libm {:e}: {d} ulps ({n} cases)",
        pow(x, y),
        x.powf(y)
    );
}

#[test]
fn results_over_the_whole_range_are_within_one_ulp() {
    let mut r = Rng(1);
    // x of every exponent, y chosen so that log2 of the result covers subnormals to overflow.
    check(
        "whole range",
        (0..400_000).map(|_| {
            let x = f64::from_bits(r.next() >> 1);
            let x = if x.is_finite() && x > 0.0 { x } else { 1.5 };
            let t = r.uniform(-1080.0, 1030.0);
            (x, t / x.log2())
        }),
    );
}

#[test]
fn bases_near_one_with_huge_exponents_are_within_one_ulp() {
    let mut r = Rng(2);
    check(
        "near one",
        (0..200_000).map(|_| {
            let d = r.uniform(-1.0, 1.0) * 2f64.powi(-((r.next() % 50) as i32));
            let x = 1.0 + d;
            let t = r.uniform(-700.0, 700.0);
            (x, t / x.ln())
        }),
    );
}

#[test]
fn moderate_operands_are_within_one_ulp() {
    let mut r = Rng(3);
    check(
        "moderate",
        (0..300_000).map(|_| (r.uniform(0.0, 100.0), r.uniform(-40.0, 40.0))),
    );
    // Subnormal bases.
    check(
        "subnormal bases",
        (0..100_000).map(|_| {
            let x = f64::from_bits(1 + r.next() % (1u64 << 52));
            (x, r.uniform(-1.05, 1.1))
        }),
    );
}

#[test]
fn integer_powers_and_negative_bases_match_libm() {
    let mut r = Rng(4);
    // Exactly representable integer powers come out exact.
    for base in 2..40i64 {
        let mut want = 1i128;
        for k in 0..60 {
            if want >= 1i128 << 53 {
                break;
            }
            for s in [1.0, -1.0] {
                let got = pow(s * base as f64, k as f64);
                let w = if s < 0.0 && k % 2 == 1 { -want } else { want };
                assert_eq!(got, w as f64, "pow({}, {k})", s * base as f64);
            }
            want *= base as i128;
        }
    }
    check(
        "negative bases",
        (0..200_000).map(|_| {
            let x = -r.uniform(0.0, 50.0);
            let y = (r.uniform(-200.0, 200.0)).round();
            (x, y)
        }),
    );
}

#[test]
fn special_operands_give_libm_bits() {
    let tiny = f64::from_bits(1);
    let values = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        1.5,
        -1.5,
        tiny,
        -tiny,
        f64::MIN_POSITIVE,
        f64::MAX,
        -f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        9007199254740993.0,
        -9007199254740992.0,
        1e300,
        -1e-300,
    ];
    let special = |v: f64| v == 0.0 || !v.is_finite();
    for &x in &values {
        for &y in &values {
            let (got, want) = (pow(x, y), x.powf(y));
            // Zeros, infinities, NaN, a base of +-1 or an exponent of 0: C99's results, to
            // the bit; other operands within 1 ulp.
            let exact = special(x) || special(y) || x.abs() == 1.0 || !want.is_normal();
            let ok = match exact {
                true => (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits(),
                false => ulps(got, want) <= 1,
            };
            assert!(ok, "pow({x:e}, {y:e}) = {got:e}, libm {want:e}");
        }
    }
}
