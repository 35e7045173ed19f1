//! Counts the operations each expansion emits (an emitter that only counts), prints them, and
//! checks they stay within a budget (so a change that bloats a hot function is noticed).
//! Constants and bit casts are listed apart: they are free or hoisted in generated code.

use kiln::math::{unary, Emit, MathFn, Prec};

#[derive(Default, Debug)]
struct Count {
    prec: Option<Prec>,
    /// add, sub, mul, fma, neg, abs, copysign, floor, round
    float: usize,
    /// div, sqrt
    div: usize,
    /// integer add/sub/and/or/shifts, conversions
    int: usize,
    /// comparisons, mask logic, selects
    mask: usize,
    /// fconst / iconst
    consts: usize,
    /// to_bits / from_bits
    casts: usize,
    fallbacks: usize,
}

impl Count {
    fn total(&self) -> usize {
        self.float + self.div + self.int + self.mask
    }
}

impl Emit for Count {
    type F = ();
    type I = ();
    type M = ();
    fn prec(&self) -> Prec {
        self.prec.unwrap()
    }
    fn fconst(&mut self, _: f64) {
        self.consts += 1
    }
    fn iconst(&mut self, _: i64) {
        self.consts += 1
    }
    fn add(&mut self, _: (), _: ()) {
        self.float += 1
    }
    fn sub(&mut self, _: (), _: ()) {
        self.float += 1
    }
    fn mul(&mut self, _: (), _: ()) {
        self.float += 1
    }
    fn div(&mut self, _: (), _: ()) {
        self.div += 1
    }
    fn fma(&mut self, _: (), _: (), _: ()) {
        self.float += 1
    }
    fn neg(&mut self, _: ()) {
        self.float += 1
    }
    fn abs(&mut self, _: ()) {
        self.float += 1
    }
    fn sqrt(&mut self, _: ()) {
        self.div += 1
    }
    fn floor(&mut self, _: ()) {
        self.float += 1
    }
    fn round(&mut self, _: ()) {
        self.float += 1
    }
    fn copysign(&mut self, _: (), _: ()) {
        self.float += 1
    }
    fn lt(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn le(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn eq(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn is_nan(&mut self, _: ()) {
        self.mask += 1
    }
    fn mand(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn mor(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn mnot(&mut self, _: ()) {
        self.mask += 1
    }
    fn select(&mut self, _: (), _: (), _: ()) {
        self.mask += 1
    }
    fn iselect(&mut self, _: (), _: (), _: ()) {
        self.mask += 1
    }
    fn to_bits(&mut self, _: ()) {
        self.casts += 1
    }
    fn from_bits(&mut self, _: ()) {
        self.casts += 1
    }
    fn to_int(&mut self, _: ()) {
        self.int += 1
    }
    fn to_float(&mut self, _: ()) {
        self.int += 1
    }
    fn iadd(&mut self, _: (), _: ()) {
        self.int += 1
    }
    fn isub(&mut self, _: (), _: ()) {
        self.int += 1
    }
    fn iand(&mut self, _: (), _: ()) {
        self.int += 1
    }
    fn ior(&mut self, _: (), _: ()) {
        self.int += 1
    }
    fn shl(&mut self, _: (), _: u32) {
        self.int += 1
    }
    fn sshr(&mut self, _: (), _: u32) {
        self.int += 1
    }
    fn ushr(&mut self, _: (), _: u32) {
        self.int += 1
    }
    fn ieq(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn ilt(&mut self, _: (), _: ()) {
        self.mask += 1
    }
    fn fallback(&mut self, _: &'static str, _: (), _: (), _: ()) {
        self.fallbacks += 1
    }
}

/// Op budget per function (f32, f64): generous bounds over the current counts.
fn budget(f: MathFn) -> (usize, usize) {
    match f {
        MathFn::Exp => (26, 32),
        MathFn::Expm1 => (42, 50),
        MathFn::Log => (34, 36),
        MathFn::Log1p => (36, 40),
        MathFn::Sin | MathFn::Cos => (30, 34),
        MathFn::Tan => (44, 54),
        MathFn::Tanh => (40, 50),
        MathFn::Sigmoid => (36, 42),
        MathFn::Erf => (52, 78),
    }
}

#[test]
fn op_counts() {
    println!(
        "{:8} {:>4} {:>6} {:>4} {:>4} {:>5} {:>6} {:>6} {:>5}",
        "fn", "prec", "float", "div", "int", "mask", "TOTAL", "consts", "casts"
    );
    for f in MathFn::ALL {
        for (prec, name, limit) in [
            (Prec::F32, "f32", budget(f).0),
            (Prec::F64, "f64", budget(f).1),
        ] {
            let mut c = Count {
                prec: Some(prec),
                ..Default::default()
            };
            unary(&mut c, f, ());
            println!(
                "{:8} {:>4} {:>6} {:>4} {:>4} {:>5} {:>6} {:>6} {:>5}{}",
                f.name(),
                name,
                c.float,
                c.div,
                c.int,
                c.mask,
                c.total(),
                c.consts,
                c.casts,
                if c.fallbacks > 0 { "  + fallback" } else { "" }
            );
            assert!(
                c.total() <= limit,
                "{} {name}: {} ops > budget {limit}",
                f.name(),
                c.total()
            );
        }
    }
}
