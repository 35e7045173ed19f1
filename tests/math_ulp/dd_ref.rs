//! Double-double (~106-bit) reference implementations for the f64 ulp tests.
//!
//! Each function returns a [`Ref`]: the value `(hi + lo) * 2^e2` (e2 != 0 only where the result
//! may be subnormal, so the reference keeps full relative precision there). Accuracy is about
//! 2^-95 relative or better, i.e. below 2^-40 ulp of f64; `reference_self_check` in ulp.rs
//! compares it with mpmath values committed in tests/data/ref_check.txt.
//!
//! Methods: exp by reduction with a three-part ln2, `2^-10` scaling, Taylor series and 10
//! squarings; expm1 by its Taylor series near 0; log1p by `2 atanh(x / (2 + x))` near 0 and one
//! Newton step on exp elsewhere; sin/cos by reduction with a four-part pi/2 and Taylor series;
//! erf by the all-positive series `2/sqrt(pi) e^-x^2 sum (2x^2)^n x / (2n+1)!!`.

#![allow(dead_code, clippy::approx_constant, clippy::excessive_precision)]

#[derive(Clone, Copy, Debug)]
pub struct DD {
    pub hi: f64,
    pub lo: f64,
}

/// `(hi + lo) * 2^e2`.
#[derive(Clone, Copy, Debug)]
pub struct Ref {
    pub v: DD,
    pub e2: i32,
}

impl Ref {
    pub fn plain(v: DD) -> Ref {
        Ref { v, e2: 0 }
    }
}

fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

fn quick_two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    (s, b - (s - a))
}

fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    (p, a.mul_add(b, -p))
}

pub fn dd(hi: f64) -> DD {
    DD { hi, lo: 0.0 }
}

fn norm(hi: f64, lo: f64) -> DD {
    let (h, l) = quick_two_sum(hi, lo);
    DD { hi: h, lo: l }
}

impl DD {
    pub fn add(self, o: DD) -> DD {
        let (s, e) = two_sum(self.hi, o.hi);
        let (t, f) = two_sum(self.lo, o.lo);
        let (s, e) = quick_two_sum(s, e + t);
        norm(s, e + f)
    }
    pub fn neg(self) -> DD {
        DD {
            hi: -self.hi,
            lo: -self.lo,
        }
    }
    pub fn sub(self, o: DD) -> DD {
        self.add(o.neg())
    }
    pub fn mul(self, o: DD) -> DD {
        let (p, e) = two_prod(self.hi, o.hi);
        norm(p, e + (self.hi * o.lo + self.lo * o.hi))
    }
    pub fn mulf(self, b: f64) -> DD {
        let (p, e) = two_prod(self.hi, b);
        norm(p, e + self.lo * b)
    }
    pub fn div(self, o: DD) -> DD {
        let q1 = self.hi / o.hi;
        let r = self.sub(o.mulf(q1));
        let q2 = r.hi / o.hi;
        let r = r.sub(o.mulf(q2));
        let q3 = r.hi / o.hi;
        let (a, b) = quick_two_sum(q1, q2);
        DD { hi: a, lo: b }.add(dd(q3))
    }
    /// Times 2^n (exact unless it leaves the normal range).
    pub fn ldexp(self, n: i32) -> DD {
        let h = n / 2;
        let s1 = pow2(h);
        let s2 = pow2(n - h);
        DD {
            hi: self.hi * s1 * s2,
            lo: self.lo * s1 * s2,
        }
    }
}

pub fn pow2(n: i32) -> f64 {
    assert!((-1022..=1023).contains(&n));
    f64::from_bits(((n + 1023) as u64) << 52)
}

const LN2: [f64; 3] = [
    0.6931471805599453,
    2.3190468138462996e-17,
    5.707708438416212e-34,
];
const PIO2: [f64; 4] = [
    1.5707963267948966,
    6.123233995736766e-17,
    -1.4973849048591698e-33,
    5.562271104316826e-50,
];
const TWO_OVER_SQRTPI: DD = DD {
    hi: 1.1283791670955126,
    lo: 1.533545961316588e-17,
};

/// e^x as (m, n) with e^x = m 2^n, m in about [0.7, 1.42]. |x| < ~1e5.
pub fn exp_dd(x: DD) -> (DD, i32) {
    let n = (x.hi / LN2[0]).round();
    // r = x - n ln2, every product exact.
    let mut r = x;
    for c in LN2 {
        let (p, e) = two_prod(n, c);
        r = r.sub(DD { hi: p, lo: e });
    }
    let r = r.ldexp(-10);
    // Taylor: sum r^k / k!, k < 12 (|r| < 2^-10 * 0.35: r^12/12! < 2^-150).
    let mut term = dd(1.0);
    let mut sum = dd(1.0);
    for k in 1..12 {
        term = term.mul(r).div(dd(k as f64));
        sum = sum.add(term);
    }
    for _ in 0..10 {
        sum = sum.mul(sum);
    }
    (sum, n as i32)
}

fn scaled_value(m: DD, n: i32) -> DD {
    if n > 1000 {
        m.ldexp(1000).ldexp(n - 1000)
    } else if n < -1000 {
        m.ldexp(-1000).ldexp(n + 1000)
    } else {
        m.ldexp(n)
    }
}

pub fn exp(x: f64) -> Ref {
    if x > 710.0 {
        return Ref::plain(dd(f64::INFINITY));
    }
    if x < -800.0 {
        return Ref::plain(dd(0.0));
    }
    let (m, n) = exp_dd(dd(x));
    Ref { v: m, e2: n }
}

/// expm1 for a double-double argument, relative accuracy also near 0.
fn expm1_dd(x: DD) -> DD {
    if x.hi.abs() < 0.5 {
        let mut term = x;
        let mut sum = x;
        for k in 2..40 {
            term = term.mul(x).div(dd(k as f64));
            sum = sum.add(term);
            if term.hi.abs() <= 1e-40 * sum.hi.abs() {
                break;
            }
        }
        sum
    } else {
        let (m, n) = exp_dd(x);
        scaled_value(m, n).sub(dd(1.0))
    }
}

pub fn expm1(x: f64) -> Ref {
    if x == 0.0 {
        return Ref::plain(dd(x));
    }
    if x > 710.0 {
        return Ref::plain(dd(f64::INFINITY));
    }
    if x > 700.0 {
        // e^x - 1 = e^x to far beyond double-double precision
        let (m, n) = exp_dd(dd(x));
        return Ref { v: m, e2: n };
    }
    if x < -60.0 {
        return Ref::plain(DD {
            hi: -1.0,
            lo: x.exp(),
        });
    }
    Ref::plain(expm1_dd(dd(x)))
}

/// log(1 + x) for a double-double x > -1 (relative accuracy near 0).
fn log1p_dd(x: DD) -> DD {
    if x.hi.abs() < 0.5 {
        // 2 atanh(s), s = x / (2 + x), |s| < 0.2
        let s = x.div(dd(2.0).add(x));
        let s2 = s.mul(s);
        let mut term = s;
        let mut sum = s;
        let mut k = 1.0;
        for _ in 0..60 {
            term = term.mul(s2);
            k += 2.0;
            let t = term.div(dd(k));
            sum = sum.add(t);
            if t.hi.abs() <= 1e-40 * sum.hi.abs() {
                break;
            }
        }
        sum.mulf(2.0)
    } else {
        log_dd(dd(1.0).add(x))
    }
}

/// log of a positive double-double u with |log u| not small (one Newton step on exp).
fn log_dd(u: DD) -> DD {
    let y0 = u.hi.ln();
    let (m, n) = exp_dd(dd(-y0));
    // u e^-y0 = 1 + d
    let t = u.ldexp(n).mul(m);
    let d = t.sub(dd(1.0));
    // log(1 + d) ~ d - d^2/2 + d^3/3 (|d| < 2^-50)
    let d2 = d.mul(d);
    let corr = d.sub(d2.mulf(0.5)).add(d2.mul(d).div(dd(3.0)));
    dd(y0).add(corr)
}

pub fn log(x: f64) -> Ref {
    if x.is_nan() || x < 0.0 {
        return Ref::plain(dd(f64::NAN));
    }
    if x == 0.0 {
        return Ref::plain(dd(f64::NEG_INFINITY));
    }
    if x == f64::INFINITY {
        return Ref::plain(dd(f64::INFINITY));
    }
    if (0.5..1.5).contains(&x) {
        return Ref::plain(log1p_dd(dd(x - 1.0)));
    }
    // Subnormals: scale (log of a subnormal through hi.ln() is fine, but keep it simple).
    if x < 1e-300 {
        let s = log_dd(dd(x * pow2(600)));
        return Ref::plain(
            s.sub(
                DD {
                    hi: LN2[0],
                    lo: LN2[1],
                }
                .mulf(600.0),
            ),
        );
    }
    Ref::plain(log_dd(dd(x)))
}

pub fn log1p(x: f64) -> Ref {
    if x == 0.0 {
        return Ref::plain(dd(x));
    }
    if x.is_nan() || x < -1.0 {
        return Ref::plain(dd(f64::NAN));
    }
    if x == -1.0 {
        return Ref::plain(dd(f64::NEG_INFINITY));
    }
    if x == f64::INFINITY {
        return Ref::plain(dd(f64::INFINITY));
    }
    if x > 1e300 {
        return Ref::plain(log_dd(dd(x)));
    }
    if x.abs() < 1e-200 {
        // x - x^2/2: the square is far below the last bit of x
        return Ref::plain(dd(x));
    }
    Ref::plain(log1p_dd(dd(x)))
}

/// x = k pi/2 + r, |r| <= ~pi/4, for |x| <= 2^40; r as a double-double.
fn reduce_pio2(x: f64) -> (DD, i64) {
    let k = (x / PIO2[0]).round();
    let mut r = dd(x);
    for c in PIO2 {
        let (p, e) = two_prod(k, c);
        r = r.sub(dd(p)).sub(dd(e));
    }
    (r, k as i64)
}

fn sin_taylor(r: DD) -> DD {
    let r2 = r.mul(r);
    let mut term = r;
    let mut sum = r;
    let mut k = 1.0;
    for _ in 0..20 {
        term = term.mul(r2).div(dd(-(k + 1.0) * (k + 2.0)));
        k += 2.0;
        sum = sum.add(term);
    }
    sum
}

fn cos_taylor(r: DD) -> DD {
    let r2 = r.mul(r);
    let mut term = dd(1.0);
    let mut sum = dd(1.0);
    let mut k = 0.0;
    for _ in 0..20 {
        term = term.mul(r2).div(dd(-(k + 1.0) * (k + 2.0)));
        k += 2.0;
        sum = sum.add(term);
    }
    sum
}

/// Reference sin, cos, tan for |x| <= 2^40 (finite).
pub fn sin(x: f64) -> Ref {
    if !x.is_finite() {
        return Ref::plain(dd(f64::NAN));
    }
    if x == 0.0 {
        return Ref::plain(dd(x));
    }
    let (r, k) = reduce_pio2(x);
    let v = match k.rem_euclid(4) {
        0 => sin_taylor(r),
        1 => cos_taylor(r),
        2 => sin_taylor(r).neg(),
        _ => cos_taylor(r).neg(),
    };
    Ref::plain(v)
}

pub fn cos(x: f64) -> Ref {
    if !x.is_finite() {
        return Ref::plain(dd(f64::NAN));
    }
    let (r, k) = reduce_pio2(x);
    let v = match k.rem_euclid(4) {
        0 => cos_taylor(r),
        1 => sin_taylor(r).neg(),
        2 => cos_taylor(r).neg(),
        _ => sin_taylor(r),
    };
    Ref::plain(v)
}

pub fn tan(x: f64) -> Ref {
    if !x.is_finite() {
        return Ref::plain(dd(f64::NAN));
    }
    if x == 0.0 {
        return Ref::plain(dd(x));
    }
    let (r, k) = reduce_pio2(x);
    let (s, c) = (sin_taylor(r), cos_taylor(r));
    let v = if k.rem_euclid(2) == 0 {
        s.div(c)
    } else {
        c.div(s).neg()
    };
    Ref::plain(v)
}

pub fn tanh(x: f64) -> Ref {
    if x.is_nan() {
        return Ref::plain(dd(f64::NAN));
    }
    if x == 0.0 {
        return Ref::plain(dd(x));
    }
    let a = x.abs();
    let v = if a < 1e-200 {
        dd(a) // a - a^3/3
    } else if a > 40.0 {
        DD {
            hi: 1.0,
            lo: -2.0 * (-2.0 * a).exp(),
        }
    } else {
        let q = expm1_dd(dd(2.0 * a));
        q.div(q.add(dd(2.0)))
    };
    Ref::plain(if x < 0.0 { v.neg() } else { v })
}

pub fn sigmoid(x: f64) -> Ref {
    if x.is_nan() {
        return Ref::plain(dd(f64::NAN));
    }
    if x >= 0.0 {
        if x > 800.0 {
            return Ref::plain(dd(1.0));
        }
        let (m, n) = exp_dd(dd(-x));
        let e = scaled_value(m, n);
        Ref::plain(dd(1.0).div(dd(1.0).add(e)))
    } else {
        if x < -1200.0 {
            return Ref::plain(dd(0.0));
        }
        // e / (1 + e) = m 2^n / (1 + m 2^n)
        let (m, n) = exp_dd(dd(x));
        let e = if n < -1000 {
            dd(0.0)
        } else {
            scaled_value(m, n)
        };
        Ref {
            v: m.div(dd(1.0).add(e)),
            e2: n,
        }
    }
}

pub fn erf(x: f64) -> Ref {
    if x.is_nan() {
        return Ref::plain(dd(f64::NAN));
    }
    if x == 0.0 {
        return Ref::plain(dd(x));
    }
    let a = x.abs();
    if a < 1e-200 {
        // 2/sqrt(pi) a (1 - a^2/3): scaled so that subnormal results keep their precision
        let v = TWO_OVER_SQRTPI.mulf(a * pow2(600));
        return Ref {
            v: if x < 0.0 { v.neg() } else { v },
            e2: -600,
        };
    }
    let v = if a > 6.5 {
        DD {
            hi: 1.0,
            lo: -libm::erfc(a),
        }
    } else {
        // 2/sqrt(pi) e^-a^2 sum_n (2a^2)^n a / (2n+1)!!
        let (p, e) = two_prod(a, a);
        let a2 = DD { hi: p, lo: e };
        let two_a2 = a2.mulf(2.0);
        let mut term = dd(a);
        let mut sum = term;
        let mut n = 0.0;
        for _ in 0..400 {
            n += 1.0;
            term = term.mul(two_a2).div(dd(2.0 * n + 1.0));
            sum = sum.add(term);
            if term.hi <= 1e-40 * sum.hi {
                break;
            }
        }
        let (m, k) = exp_dd(a2.neg());
        TWO_OVER_SQRTPI.mul(scaled_value(m, k)).mul(sum)
    };
    Ref::plain(if x < 0.0 { v.neg() } else { v })
}
