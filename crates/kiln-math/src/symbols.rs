//! The names under which generated code calls the buffer functions of [`crate::avx2`]: the
//! JIT resolves them in its own process, and kiln's runtime library (`crates/kiln-rt`)
//! exports them to objects under the same names.

use crate::{MathFn, Prec};

/// The name generated code imports the buffer function of `f` in `p` under: `f(src[i])`,
/// or with `shifted` `f(src[i] - shift)`.
pub fn map(f: MathFn, p: Prec, shifted: bool) -> &'static str {
    let table = if shifted { &SHIFTED_NAMES } else { &NAMES };
    table[index(f)][(p == Prec::F64) as usize]
}

/// The name generated code imports the biased buffer function of `f` in `p` under:
/// `f(src[i] + bias[i])` (`Stage::biased`).
pub fn biased(f: MathFn, p: Prec) -> &'static str {
    BIASED_NAMES[index(f)][(p == Prec::F64) as usize]
}

/// The name generated code imports the summing buffer function of `f` in `p` under (the sum
/// of `f` over a buffer, in a float sum's leaf order; less `shift` with `shifted`).
pub fn sum(f: MathFn, p: Prec, shifted: bool) -> &'static str {
    let table = if shifted {
        &SUM_SHIFTED_NAMES
    } else {
        &SUM_NAMES
    };
    table[index(f)][(p == Prec::F64) as usize]
}

fn index(f: MathFn) -> usize {
    MathFn::ALL.iter().position(|&g| g == f).unwrap_or(0)
}

/// The import names of every function in both dtypes, in `MathFn::ALL`'s order.
macro_rules! names {
    ($prefix:literal) => {
        names!($prefix; exp expm1 log log1p sin cos tan tanh sigmoid erf)
    };
    ($prefix:literal; $($f:ident)*) => {
        [$([
            concat!($prefix, stringify!($f), "_f32"),
            concat!($prefix, stringify!($f), "_f64"),
        ]),*]
    };
}

type Names = [[&'static str; 2]; 10];
const NAMES: Names = names!("kiln_rt_vmath_");
const SHIFTED_NAMES: Names = names!("kiln_rt_vmath_shifted_");
const SUM_NAMES: Names = names!("kiln_rt_vmath_sum_");
const SUM_SHIFTED_NAMES: Names = names!("kiln_rt_vmath_sum_shifted_");
const BIASED_NAMES: Names = names!("kiln_rt_vmath_biased_");

/// Every name, each once: the buffer, shifted, summing, shifted summing and biased functions
/// of every function in both precisions.
pub fn all() -> Vec<&'static str> {
    let mut v = Vec::new();
    for t in [
        &NAMES,
        &SHIFTED_NAMES,
        &SUM_NAMES,
        &SUM_SHIFTED_NAMES,
        &BIASED_NAMES,
    ] {
        for pair in t.iter() {
            v.extend(pair.iter().copied());
        }
    }
    v
}
