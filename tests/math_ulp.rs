//! Accuracy tests: every function in f32 and f64 against a more precise reference, max error in
//! ulps (fractional, of the correctly rounded result's format) must be <= MAX_ULP; special
//! values must match exactly (NaN for NaN, infinities, signed zeros).
//!
//! f32: the reference is the f64 libm function (errors below 2^-28 f32 ulp), on a sweep of the
//! whole f32 line at an even stride of bit patterns, plus special values, the thresholds, and
//! hard arguments (near multiples of pi/2 for sin/cos/tan).
//! f64: the reference is double-double arithmetic (tests/math_ulp/dd_ref.rs), checked against mpmath values
//! in tests/math_data/ref_check.txt; points are log-spaced over the domain, uniform in the core
//! range, random bit patterns, plus the same kinds of special and hard arguments.
//!
//! The point counts are the constants below (lower them for opt-level 0 runs if needed).

#[path = "math_ulp/dd_ref.rs"]
mod dd_ref;

use dd_ref::{Ref, DD};
use kiln::math::{unary, Eval32, Eval64, MathFn};

/// f32 bit patterns checked per function in the sweep of the whole line (positive and negative).
const F32_SWEEP_POINTS: u64 = 1 << 20;
/// f64 points per function (spread over log-spaced, uniform and random-bits kinds).
const F64_POINTS: u64 = 60_000;
/// Hard arguments near multiples of pi/2 per precision for sin/cos/tan.
const TRIG_HARD_POINTS: u64 = 20_000;
/// The accuracy bound asserted.
const MAX_ULP: f64 = 2.0;

/// Marker error for a wrong special value (NaN / inf / sign of zero).
const WRONG_SPECIAL: f64 = 1e9;

// ---------------------------------------------------------------------------------------------
// Error measurement

/// Spacing of f32 at magnitude `v` (v finite): from the f64 exponent bits.
fn ulp32_at(v: f64) -> f64 {
    let a = v.abs();
    if a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    // 2^(e - 23) where 2^e <= a < 2^(e+1): keep a's exponent, clear its mantissa
    let e = ((a.to_bits() >> 52) as i64) - 1023;
    f64::from_bits(((e - 23 + 1023) as u64) << 52)
}

/// Error of `y` in f32 ulps against the (f64) exact value `r`.
fn err32(y: f32, r: f64) -> f64 {
    if r.is_nan() {
        return if y.is_nan() { 0.0 } else { WRONG_SPECIAL };
    }
    if y.is_nan() {
        return WRONG_SPECIAL;
    }
    let max = f32::MAX as f64;
    let inf_edge = max + ulp32_at(max) / 2.0; // values from here on round to inf
    if r.is_infinite() || r.abs() >= inf_edge {
        if y as f64 == r.signum() * f64::INFINITY {
            return 0.0;
        }
        if r.is_infinite() {
            return WRONG_SPECIAL;
        }
        return (r.abs() - (y as f64).abs()) / ulp32_at(max);
    }
    if y.is_infinite() {
        // treat inf as MAX + 1 ulp
        return ((max + ulp32_at(max)) - r.abs()) / ulp32_at(max);
    }
    if r == 0.0 {
        return if y == 0.0 && y.is_sign_negative() == r.is_sign_negative() {
            0.0
        } else if y == 0.0 {
            WRONG_SPECIAL
        } else {
            (y as f64).abs() / ulp32_at(0.0)
        };
    }
    ((y as f64) - r).abs() / ulp32_at(r)
}

/// `x * 2^n` for any n, in steps that keep the factors representable.
fn scale2(mut x: f64, mut n: i32) -> f64 {
    while n != 0 {
        let k = n.clamp(-1000, 1000);
        x *= 2f64.powi(k);
        n -= k;
    }
    x
}

/// Binade of `v` (finite, nonzero): 2^e <= |v| < 2^(e+1).
fn binade(v: f64) -> i32 {
    let a = v.abs();
    let mut e = a.log2().floor() as i32;
    if scale2(1.0, e) > a {
        e -= 1;
    } else if scale2(1.0, e + 1) <= a {
        e += 1;
    }
    e
}

/// Error of `y` in f64 ulps against the double-double reference `(hi + lo) 2^e2`.
fn err64(y: f64, r: Ref) -> f64 {
    let DD { hi, lo } = r.v;
    if hi.is_nan() {
        return if y.is_nan() { 0.0 } else { WRONG_SPECIAL };
    }
    if y.is_nan() {
        return WRONG_SPECIAL;
    }
    if hi.is_infinite() {
        return if y == hi { 0.0 } else { WRONG_SPECIAL };
    }
    if hi == 0.0 {
        return if y == 0.0 && y.is_sign_negative() == hi.is_sign_negative() {
            0.0
        } else if y == 0.0 {
            WRONG_SPECIAL
        } else {
            y.abs() / f64::from_bits(1)
        };
    }
    let mut ex = binade(hi);
    if hi.abs() == scale2(1.0, ex) && lo != 0.0 && lo.is_sign_negative() != hi.is_sign_negative() {
        ex -= 1; // just below a power of two
    }
    let e = ex + r.e2; // binade of the exact value
                       // Exact value rounds to inf?
    let m = scale2(hi, -ex) + scale2(lo, -ex); // in [1, 2)
    if e >= 1024 || (e == 1023 && m.abs() >= 2.0 - 2f64.powi(-53)) {
        if y.is_infinite() && y.is_sign_negative() == hi.is_sign_negative() {
            return 0.0;
        }
        return (scale2(hi, r.e2 - 971).abs() - scale2(y, -971).abs()).abs();
    }
    let u = (e - 52).max(-1074); // ulp of the exact value is 2^u
    if y.is_infinite() {
        return (2f64.powi(53) - scale2(hi, r.e2 - 971).abs()).abs();
    }
    let ys = scale2(y, -r.e2);
    let diff = (ys - hi) - lo;
    scale2(diff, r.e2 - u).abs()
}

// ---------------------------------------------------------------------------------------------
// References

fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::exp(-x))
    } else {
        let e = libm::exp(x);
        e / (1.0 + e)
    }
}

fn ref32(f: MathFn, x: f32) -> f64 {
    let x = x as f64;
    match f {
        MathFn::Exp => libm::exp(x),
        MathFn::Expm1 => libm::expm1(x),
        MathFn::Log => libm::log(x),
        MathFn::Log1p => libm::log1p(x),
        MathFn::Sin => libm::sin(x),
        MathFn::Cos => libm::cos(x),
        MathFn::Tan => libm::tan(x),
        MathFn::Tanh => libm::tanh(x),
        MathFn::Sigmoid => sigmoid64(x),
        MathFn::Erf => libm::erf(x),
    }
}

/// |x| up to which the double-double trig reduction is exact enough.
const DD_TRIG_LIMIT: f64 = 1099511627776.0; // 2^40

fn ref64(f: MathFn, x: f64) -> Ref {
    let trig_libm = |v: f64| Ref::plain(dd_ref::dd(v));
    match f {
        MathFn::Exp => dd_ref::exp(x),
        MathFn::Expm1 => dd_ref::expm1(x),
        MathFn::Log => dd_ref::log(x),
        MathFn::Log1p => dd_ref::log1p(x),
        // Beyond 2^40 (where kiln's expansion uses the libm fallback anyway) compare to libm.
        MathFn::Sin if x.abs() > DD_TRIG_LIMIT => trig_libm(libm::sin(x)),
        MathFn::Cos if x.abs() > DD_TRIG_LIMIT => trig_libm(libm::cos(x)),
        MathFn::Tan if x.abs() > DD_TRIG_LIMIT => trig_libm(libm::tan(x)),
        MathFn::Sin => dd_ref::sin(x),
        MathFn::Cos => dd_ref::cos(x),
        MathFn::Tan => dd_ref::tan(x),
        MathFn::Tanh => dd_ref::tanh(x),
        MathFn::Sigmoid => dd_ref::sigmoid(x),
        MathFn::Erf => dd_ref::erf(x),
    }
}

// ---------------------------------------------------------------------------------------------
// Point sets

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * 2f64.powi(-53)
    }
}

/// Values every function is checked at, in both precisions.
fn common_specials() -> Vec<f64> {
    let mut v = vec![
        0.0,
        f64::INFINITY,
        f64::NAN,
        1.0,
        0.5,
        2.0,
        1e-30,
        1e-10,
        1e-5,
        0.1,
        10.0,
        100.0,
        1e10,
        1e30,
    ];
    for s in [
        f64::MIN_POSITIVE,
        f64::MAX,
        f32::MIN_POSITIVE as f64,
        f32::MAX as f64,
    ] {
        v.push(s);
    }
    v.push(f64::from_bits(1)); // smallest f64 subnormal
    v.push(2f64.powi(-149)); // smallest f32 subnormal
    let neg: Vec<f64> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

/// Function-specific thresholds and interesting arguments (both signs added by the caller
/// where it matters; these are given as they are).
fn boundaries(f: MathFn, f64_prec: bool) -> Vec<f64> {
    let ln2 = std::f64::consts::LN_2;
    let mut v: Vec<f64> = match f {
        MathFn::Exp => vec![
            88.72283,
            88.72284,
            88.7,
            88.38,
            88.37,
            89.0,
            100.0,
            101.0,
            -87.33,
            -87.34,
            -103.97,
            -103.98,
            -104.0,
            -110.0,
            -119.0,
            -120.0,
            -121.0,
            709.78,
            709.79,
            709.4,
            709.5,
            -708.39,
            -708.4,
            -745.13,
            -745.14,
            -744.0,
            -750.0,
            -759.0,
            -761.0,
            719.0,
            721.0,
            0.5 * ln2,
            -0.5 * ln2,
            ln2,
            1e-8,
            -1e-8,
        ],
        MathFn::Expm1 => vec![
            ln2,
            -ln2,
            0.5 * ln2,
            -0.5 * ln2,
            1.0,
            -1.0,
            16.0,
            16.6,
            17.0,
            17.4,
            18.0,
            36.0,
            37.0,
            38.0,
            40.0,
            -17.3,
            -17.4,
            -38.0,
            -39.0,
            -40.0,
            -41.0,
            -99.0,
            -101.0,
            88.0,
            88.72,
            88.73,
            89.1,
            709.78,
            709.79,
            710.1,
            1e-9,
            -1e-9,
        ],
        MathFn::Log | MathFn::Log1p => vec![
            2.0 / 3.0,
            4.0 / 3.0,
            1.0 - 1e-7,
            1.0 + 1e-7,
            1.0 - 1e-15,
            1.0 + 1e-15,
            0.999,
            1.001,
            -0.5,
            -0.9999999,
            -0.99999999999,
            -1.0,
            -1.5,
            3.0,
            1e-300,
            1e-40,
            1e-320,
        ],
        MathFn::Tanh => vec![
            0.55, 0.5499999, 0.5500001, 8.0, 8.3, 8.5, 9.0, 9.01, 9.1, 9.2, 18.0, 18.7, 19.06,
            19.1, 19.2, 1e-8,
        ],
        MathFn::Sigmoid => vec![
            -87.3, -88.0, -103.0, -104.0, -149.0, -151.0, -700.0, -745.0, -746.0, -1099.0, -1101.0,
            16.0, 17.0, 36.0, 37.0, 40.0, 1e-8,
        ],
        MathFn::Erf => vec![
            1.0, 0.9999999, 1.0000001, 3.92, 3.93, 3.94, 5.9, 5.93, 5.94, 6.0, 1e-8, 2.0, 0.5,
        ],
        MathFn::Sin | MathFn::Cos | MathFn::Tan => {
            let pi = std::f64::consts::PI;
            let mut v = vec![
                pi,
                pi / 2.0,
                pi / 4.0,
                1e-8,
                3.0 * pi / 4.0,
                1e5,
                1e6,
                1048576.0,
                1048577.0,
                1073741824.0,
                1073741825.0,
                1e12,
                1e20,
                1e300,
            ];
            for k in [1.0, 2.0, 3.0, 10.0, 100.0, 1000.0, 1e4, 1e5, 3e5, 6e5] {
                v.push(k * pi / 2.0);
            }
            v
        }
    };
    if !f64_prec {
        v.retain(|x| x.abs() < 1e39);
    }
    v
}

/// Points near multiples of pi/2 (the hardest arguments for the reduction), `n` of them, up to
/// `limit` in magnitude: the nearest float to k pi/2 and its neighbours.
fn near_pio2_f64(n: u64, limit: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let kmax = (limit / std::f64::consts::FRAC_PI_2) as u64;
    let mut rng = Rng(7);
    for i in 0..n / 3 {
        let k = if i < 2000 {
            i + 1
        } else {
            1 + rng.next() % kmax.max(1)
        };
        // k pi/2 to double-double precision, rounded
        let (h, l) = (std::f64::consts::FRAC_PI_2, 6.123233995736766e-17);
        let x = (k as f64).mul_add(h, k as f64 * l);
        for d in [-1i64, 0, 1] {
            v.push(f64::from_bits((x.to_bits() as i64).wrapping_add(d) as u64));
        }
    }
    v
}

fn near_pio2_f32(n: u64, limit: f64) -> Vec<f32> {
    let mut v = Vec::new();
    let kmax = (limit / std::f64::consts::FRAC_PI_2) as u64;
    let mut rng = Rng(11);
    for i in 0..n / 3 {
        let k = if i < 2000 {
            i + 1
        } else {
            1 + rng.next() % kmax.max(1)
        };
        let x = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
        for d in [-1i32, 0, 1] {
            v.push(f32::from_bits((x.to_bits() as i32).wrapping_add(d) as u32));
        }
    }
    v
}

/// The f64 domain of interest per function: (uniform range, log-spaced exponent range).
fn domain64(f: MathFn) -> ((f64, f64), (i32, i32)) {
    match f {
        MathFn::Exp => ((-750.0, 712.0), (-60, 10)),
        MathFn::Expm1 => ((-50.0, 712.0), (-60, 10)),
        MathFn::Log => ((0.0, 10.0), (-1074, 1023)),
        MathFn::Log1p => ((-1.0, 10.0), (-60, 1023)),
        MathFn::Sin | MathFn::Cos | MathFn::Tan => ((-20.0, 20.0), (-40, 34)),
        MathFn::Tanh => ((-20.0, 20.0), (-60, 6)),
        MathFn::Sigmoid => ((-800.0, 50.0), (-60, 11)),
        MathFn::Erf => ((-7.0, 7.0), (-60, 4)),
    }
}

fn points64(f: MathFn) -> Vec<f64> {
    let mut rng = Rng(0x5eed ^ f as u64);
    let ((a, b), (e0, e1)) = domain64(f);
    let mut v = common_specials();
    for &x in &boundaries(f, true) {
        v.push(x);
        v.push(-x);
        for d in [-2i64, -1, 1, 2] {
            v.push(f64::from_bits((x.to_bits() as i64).wrapping_add(d) as u64));
        }
    }
    let n = F64_POINTS;
    for i in 0..n {
        let x = match i % 8 {
            // uniform in the core range
            0..=3 => a + (b - a) * rng.unit(),
            // log-spaced magnitude, both signs
            4..=6 => {
                let e = e0 as f64 + (e1 - e0) as f64 * rng.unit();
                let s = if rng.next() & 1 == 0 { 1.0 } else { -1.0 };
                s * e.exp2()
            }
            // any bit pattern
            _ => f64::from_bits(rng.next()),
        };
        v.push(x);
    }
    if matches!(f, MathFn::Sin | MathFn::Cos | MathFn::Tan) {
        v.extend(near_pio2_f64(TRIG_HARD_POINTS, 1073741824.0));
    }
    v
}

fn points32(f: MathFn) -> Vec<f32> {
    let mut v: Vec<f32> = Vec::new();
    let stride = (1u64 << 32) / F32_SWEEP_POINTS;
    // odd offset so that the low mantissa bits vary
    let mut b: u64 = 12345 % stride;
    while b < 1u64 << 32 {
        v.push(f32::from_bits(b as u32));
        b += stride;
    }
    for x in common_specials() {
        v.push(x as f32);
    }
    for &x in &boundaries(f, false) {
        for s in [x as f32, -(x as f32)] {
            v.push(s);
            for d in [-2i32, -1, 1, 2] {
                v.push(f32::from_bits((s.to_bits() as i32).wrapping_add(d) as u32));
            }
        }
    }
    match f {
        MathFn::Sin | MathFn::Cos | MathFn::Tan => {
            v.extend(near_pio2_f32(TRIG_HARD_POINTS, 1048576.0));
        }
        MathFn::Log | MathFn::Log1p => {
            // every 97th subnormal, and the neighbourhood of 1
            let mut b = 1u32;
            while b < 0x0080_0000 {
                v.push(f32::from_bits(b));
                b += 97;
            }
            for d in -3000i32..3000 {
                v.push(f32::from_bits(
                    (1f32.to_bits() as i32).wrapping_add(d) as u32
                ));
                v.push(f32::from_bits(
                    ((-0.5f32).to_bits() as i32).wrapping_add(d) as u32
                ));
            }
        }
        _ => {}
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Drivers

struct Worst {
    err: f64,
    x: f64,
    y: f64,
    n: usize,
}

fn check32(f: MathFn) -> Worst {
    let mut w = Worst {
        err: 0.0,
        x: 0.0,
        y: 0.0,
        n: 0,
    };
    for x in points32(f) {
        let y = unary(&mut Eval32, f, x);
        let err = err32(y, ref32(f, x));
        w.n += 1;
        if err > w.err || err.is_nan() {
            w = Worst {
                err,
                x: x as f64,
                y: y as f64,
                n: w.n,
            };
        }
    }
    w
}

fn check64(f: MathFn) -> Worst {
    let mut w = Worst {
        err: 0.0,
        x: 0.0,
        y: 0.0,
        n: 0,
    };
    for x in points64(f) {
        let y = unary(&mut Eval64, f, x);
        let err = err64(y, ref64(f, x));
        w.n += 1;
        if err > w.err || err.is_nan() {
            w = Worst { err, x, y, n: w.n };
        }
    }
    w
}

fn report(f: MathFn, prec: &str, w: &Worst) {
    println!(
        "{:8} {}: max error {:.3} ulp over {} points (worst at x = {:e} [bits {:#x}], got {:e})",
        f.name(),
        prec,
        w.err,
        w.n,
        w.x,
        if prec == "f32" {
            (w.x as f32).to_bits() as u64
        } else {
            w.x.to_bits()
        },
        w.y
    );
    assert!(
        w.err <= MAX_ULP,
        "{} {}: max error {} ulp > {}",
        f.name(),
        prec,
        w.err,
        MAX_ULP
    );
}

macro_rules! ulp_tests {
    ($($name32:ident, $name64:ident => $f:expr;)*) => {$(
        #[test]
        fn $name32() {
            let w = check32($f);
            report($f, "f32", &w);
        }
        #[test]
        fn $name64() {
            let w = check64($f);
            report($f, "f64", &w);
        }
    )*};
}

ulp_tests! {
    exp_f32, exp_f64 => MathFn::Exp;
    expm1_f32, expm1_f64 => MathFn::Expm1;
    log_f32, log_f64 => MathFn::Log;
    log1p_f32, log1p_f64 => MathFn::Log1p;
    sin_f32, sin_f64 => MathFn::Sin;
    cos_f32, cos_f64 => MathFn::Cos;
    tan_f32, tan_f64 => MathFn::Tan;
    tanh_f32, tanh_f64 => MathFn::Tanh;
    sigmoid_f32, sigmoid_f64 => MathFn::Sigmoid;
    erf_f32, erf_f64 => MathFn::Erf;
}

/// Exact special values (numpy / IEEE semantics), both precisions.
#[test]
fn special_values() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    #[rustfmt::skip]
    let cases: &[(MathFn, f64, f64)] = &[
        (MathFn::Exp, -inf, 0.0), (MathFn::Exp, inf, inf), (MathFn::Exp, 1e5, inf),
        (MathFn::Exp, -1e5, 0.0), (MathFn::Exp, 0.0, 1.0), (MathFn::Exp, -0.0, 1.0),
        (MathFn::Log, 0.0, -inf), (MathFn::Log, -0.0, -inf), (MathFn::Log, -1.0, nan),
        (MathFn::Log, -inf, nan), (MathFn::Log, inf, inf), (MathFn::Log, 1.0, 0.0),
        (MathFn::Log1p, -1.0, -inf), (MathFn::Log1p, -2.0, nan), (MathFn::Log1p, inf, inf),
        (MathFn::Log1p, -0.0, -0.0), (MathFn::Log1p, 0.0, 0.0), (MathFn::Log1p, -inf, nan),
        (MathFn::Expm1, -inf, -1.0), (MathFn::Expm1, inf, inf), (MathFn::Expm1, -0.0, -0.0),
        (MathFn::Expm1, 0.0, 0.0), (MathFn::Expm1, 1e5, inf),
        (MathFn::Sin, inf, nan), (MathFn::Sin, -inf, nan), (MathFn::Sin, -0.0, -0.0),
        (MathFn::Sin, 0.0, 0.0),
        (MathFn::Cos, inf, nan), (MathFn::Cos, -inf, nan), (MathFn::Cos, -0.0, 1.0),
        (MathFn::Tan, inf, nan), (MathFn::Tan, -inf, nan), (MathFn::Tan, -0.0, -0.0),
        (MathFn::Tanh, inf, 1.0), (MathFn::Tanh, -inf, -1.0), (MathFn::Tanh, -0.0, -0.0),
        (MathFn::Tanh, 0.0, 0.0),
        (MathFn::Sigmoid, -inf, 0.0), (MathFn::Sigmoid, inf, 1.0), (MathFn::Sigmoid, 0.0, 0.5),
        (MathFn::Erf, inf, 1.0), (MathFn::Erf, -inf, -1.0), (MathFn::Erf, -0.0, -0.0),
        (MathFn::Erf, 0.0, 0.0),
    ];
    let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
    for &(f, x, want) in cases {
        let y = unary(&mut Eval64, f, x);
        assert!(same(y, want), "{}({x}) f64 = {y}, want {want}", f.name());
        let y = unary(&mut Eval32, f, x as f32) as f64;
        assert!(same(y, want), "{}({x}) f32 = {y}, want {want}", f.name());
    }
    for f in MathFn::ALL {
        assert!(unary(&mut Eval64, f, nan).is_nan(), "{} f64 NaN", f.name());
        assert!(
            unary(&mut Eval32, f, f32::NAN).is_nan(),
            "{} f32 NaN",
            f.name()
        );
        assert!(
            unary(&mut Eval32, f, -f32::NAN).is_nan(),
            "{} f32 -NaN",
            f.name()
        );
    }
}

/// The double-double reference against mpmath (tests/math_data/ref_check.txt, written by
/// tools/gen_ref_check.py): it must agree to 2^-90 relative, far below f64's 2^-53.
#[test]
fn reference_self_check() {
    let text = include_str!("math_data/ref_check.txt");
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut it = line.split_whitespace();
        let name = it.next().unwrap();
        let hex = |s: &str| f64::from_bits(u64::from_str_radix(s, 16).unwrap());
        let x = hex(it.next().unwrap());
        let hi = hex(it.next().unwrap());
        let lo = hex(it.next().unwrap());
        let f = MathFn::ALL
            .iter()
            .copied()
            .find(|f| f.name() == name)
            .expect(name);
        let r = ref64(f, x);
        let v = dd_ref::DD {
            hi: r.v.hi,
            lo: r.v.lo,
        }
        .ldexp(r.e2);
        let d = ((v.hi - hi) + (v.lo - lo)).abs();
        assert!(
            d <= hi.abs() * 2f64.powi(-90),
            "reference {name}({x:e}) = {:e} + {:e}, mpmath {hi:e} + {lo:e}",
            v.hi,
            v.lo
        );
        n += 1;
    }
    assert!(n > 100, "too few check values: {n}");
}

/// Every f32 input, for the functions named in `EXHAUSTIVE` (comma-separated, default all):
/// `EXHAUSTIVE=exp,sin cargo test --release -- --ignored exhaustive_f32 --nocapture`.
/// Minutes per function on a few cores; not part of the normal run.
#[test]
#[ignore]
fn exhaustive_f32() {
    let names = std::env::var("EXHAUSTIVE").unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    for f in MathFn::ALL {
        if !names.is_empty() && !names.split(',').any(|n| n == f.name()) {
            continue;
        }
        let chunk = (1u64 << 32) / threads;
        let worst = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|i| {
                    sc.spawn(move || {
                        let mut w = Worst {
                            err: 0.0,
                            x: 0.0,
                            y: 0.0,
                            n: 0,
                        };
                        for b in i * chunk..(i + 1) * chunk {
                            let x = f32::from_bits(b as u32);
                            let y = unary(&mut Eval32, f, x);
                            let err = err32(y, ref32(f, x));
                            if err > w.err || err.is_nan() {
                                w = Worst {
                                    err,
                                    x: x as f64,
                                    y: y as f64,
                                    n: 0,
                                };
                            }
                        }
                        w
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).fold(
                Worst {
                    err: 0.0,
                    x: 0.0,
                    y: 0.0,
                    n: 0,
                },
                |a, b| if b.err > a.err { b } else { a },
            )
        });
        let w = Worst {
            n: 1usize << 32,
            ..worst
        };
        report(f, "f32", &w);
    }
}
