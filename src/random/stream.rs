//! The random streams (the module docs' layout) as an expansion over the emitter, for code
//! generators: Philox4x32-10 in 64-bit integer lanes (each 32-bit word held zero-extended),
//! then the conversion to a standard value in `f64`: a 24- or 53-bit uniform, or a Box-Muller
//! normal. Object files emit it through Cranelift (`codegen::clif::random`); the Rust functions
//! of `random` are the reference, and a test runs this expansion on the Rust evaluator against
//! them, so the two cannot drift apart.
//!
//! What follows the standard value (`low + (high - low) * u`, `mean + std * z`, `u < p`, in the
//! op's dtype) is [`Transform`], read by the generators.

use crate::ir::{DType, RandomDist};
use crate::math::arith::ArithEmit;
use crate::math::MathFn;

/// Which standard value an element of a stream is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Standard {
    /// `[0, 1)` from the top 24 bits of word `i % 4` of block `i / 4` (uniform f32, bernoulli).
    Unit24,
    /// `[0, 1)` from the top 53 bits of words `2j, 2j + 1` of block `i / 2`, `j = i % 2`.
    Unit53,
    /// Box-Muller of two 24-bit uniforms, words `2j, 2j + 1` of block `i / 2` (normal f32).
    Normal24,
    /// Box-Muller of two 53-bit uniforms, all four words of block `i` (normal f64).
    Normal53,
}

/// What turns a standard value into an element of the op's dtype.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Transform {
    /// `offset + scale * v`, in `f32` (the standard value rounded to `f32` first) or `f64`.
    Affine {
        /// Added after scaling: `low` or `mean`.
        offset: f64,
        /// What the standard value is multiplied by: `high - low` or `std`.
        scale: f64,
        /// Whether it is computed in `f32` (for an f32 op) rather than `f64`.
        f32: bool,
    },
    /// `v < p`: 1 or 0 in the op's dtype.
    Below {
        /// The probability of a 1.
        p: f64,
    },
}

/// The standard value and transform of a random op (`random::perform::sample`'s cases).
pub fn plan(dist: RandomDist, dtype: DType) -> (Standard, Transform) {
    let f32 = dtype == DType::F32;
    match dist {
        RandomDist::Uniform { low, high } => (
            if f32 {
                Standard::Unit24
            } else {
                Standard::Unit53
            },
            Transform::Affine {
                offset: low.0,
                scale: high.0 - low.0,
                f32,
            },
        ),
        RandomDist::Normal { mean, std } => (
            if f32 {
                Standard::Normal24
            } else {
                Standard::Normal53
            },
            Transform::Affine {
                offset: mean.0,
                scale: std.0,
                f32,
            },
        ),
        RandomDist::Bernoulli { p } => (Standard::Unit24, Transform::Below { p: p.0 }),
    }
}

const M0: i64 = 0xD251_1F53;
const M1: i64 = 0xCD9E_8D57;
const W0: i64 = 0x9E37_79B9;
const W1: i64 = 0xBB67_AE85;
const LOW32: i64 = 0xffff_ffff;

/// The effective seed (`random::perform::effective_seed`): `seed` with a per-call counter
/// mixed in, `seed ^ counter * 0x9E3779B97F4A7C15` (wrapping), in 64-bit lanes.
pub fn mix_counter<E: ArithEmit>(e: &mut E, seed: E::I, counter: E::I) -> E::I {
    let golden = e.iconst(0x9E37_79B9_7F4A_7C15u64 as i64);
    let m = e.imul(counter, golden);
    xor(e, seed, m)
}

fn xor<E: ArithEmit>(e: &mut E, a: E::I, b: E::I) -> E::I {
    // a ^ b = (a | b) - (a & b).
    let o = e.ior(a, b);
    let n = e.iand(a, b);
    e.isub(o, n)
}

/// One Philox4x32-10 block (`random::philox4x32_10`), every word zero-extended in a lane.
pub fn philox<E: ArithEmit>(e: &mut E, counter: [E::I; 4], key: [E::I; 2]) -> [E::I; 4] {
    let low = e.iconst(LOW32);
    let (m0, m1) = (e.iconst(M0), e.iconst(M1));
    let (w0, w1) = (e.iconst(W0), e.iconst(W1));
    let (mut c, mut k) = (counter, key);
    for round in 0..10 {
        if round > 0 {
            let k0 = e.iadd(k[0], w0);
            let k1 = e.iadd(k[1], w1);
            k = [e.iand(k0, low), e.iand(k1, low)];
        }
        // Products of two 32-bit words fit 64 bits (read unsigned by the shift).
        let p0 = e.imul(m0, c[0]);
        let p1 = e.imul(m1, c[2]);
        let (hi0, lo0) = (e.ushr(p0, 32), e.iand(p0, low));
        let (hi1, lo1) = (e.ushr(p1, 32), e.iand(p1, low));
        let a = xor(e, hi1, c[1]);
        let a = xor(e, a, k[0]);
        let b = xor(e, hi0, c[3]);
        let b = xor(e, b, k[1]);
        c = [a, lo1, b, lo0];
    }
    c
}

fn block<E: ArithEmit>(e: &mut E, seed: E::I, b: E::I) -> [E::I; 4] {
    let low = e.iconst(LOW32);
    let zero = e.iconst(0);
    let key = [e.iand(seed, low), e.ushr(seed, 32)];
    let counter = [e.iand(b, low), e.ushr(b, 32), zero, zero];
    philox(e, counter, key)
}

/// Word `j` (0 to 3, a lane value) of `w`.
fn pick<E: ArithEmit>(e: &mut E, w: [E::I; 4], j: E::I) -> E::I {
    let (one, two) = (e.iconst(1), e.iconst(2));
    let is1 = e.ieq(j, one);
    let is2 = e.ieq(j, two);
    let zero = e.iconst(0);
    let is0 = e.ieq(j, zero);
    let r = e.iselect(is2, w[2], w[3]);
    let r = e.iselect(is1, w[1], r);
    e.iselect(is0, w[0], r)
}

fn unit24<E: ArithEmit>(e: &mut E, w: E::I) -> E::F {
    let top = e.ushr(w, 8);
    let f = e.to_float(top);
    let s = e.fconst(1.0 / (1u64 << 24) as f64);
    e.mul(f, s)
}

fn unit53<E: ArithEmit>(e: &mut E, hi: E::I, lo: E::I) -> E::F {
    let h = e.shl(hi, 32);
    let x = e.ior(h, lo);
    let top = e.ushr(x, 11);
    let f = e.to_float(top);
    let s = e.fconst(1.0 / (1u64 << 53) as f64);
    e.mul(f, s)
}

/// Box-Muller's `log` and `cos` are kiln's own expansions (`math`), not the C library's: every
/// code generator emits the same ones (the GPU has no copy of the C library's bits), so a
/// normal sample has the same bits on every backend.
fn box_muller<E: ArithEmit>(e: &mut E, u1: E::F, u2: E::F) -> E::F {
    let one = e.fconst(1.0);
    let m2 = e.fconst(-2.0);
    let tau = e.fconst(std::f64::consts::TAU);
    let d = e.sub(one, u1);
    let l = crate::math::unary(e, MathFn::Log, d);
    let r2 = e.mul(m2, l);
    let r = e.sqrt(r2);
    let t = e.mul(tau, u2);
    let c = crate::math::unary(e, MathFn::Cos, t);
    e.mul(r, c)
}

/// Element `i` (a non-negative lane value) of the stream of `seed`, as the standard value
/// `kind` says, in `f64` (an `f64` emitter: 64-bit integer lanes).
pub fn standard<E: ArithEmit>(e: &mut E, kind: Standard, seed: E::I, i: E::I) -> E::F {
    let (one, three) = (e.iconst(1), e.iconst(3));
    match kind {
        Standard::Unit24 => {
            let b = e.ushr(i, 2);
            let w = block(e, seed, b);
            let j = e.iand(i, three);
            let word = pick(e, w, j);
            unit24(e, word)
        }
        Standard::Unit53 | Standard::Normal24 => {
            let b = e.ushr(i, 1);
            let w = block(e, seed, b);
            let odd = e.iand(i, one);
            let zero = e.iconst(0);
            let first = e.ieq(odd, zero);
            let hi = e.iselect(first, w[0], w[2]);
            let lo = e.iselect(first, w[1], w[3]);
            if kind == Standard::Unit53 {
                unit53(e, hi, lo)
            } else {
                let (u1, u2) = (unit24(e, hi), unit24(e, lo));
                box_muller(e, u1, u2)
            }
        }
        Standard::Normal53 => {
            let w = block(e, seed, i);
            let u1 = unit53(e, w[0], w[1]);
            let u2 = unit53(e, w[2], w[3]);
            box_muller(e, u1, u2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::Eval64;

    /// The expansion on the Rust evaluator gives the reference functions' values, bit for bit.
    #[test]
    fn the_expansion_is_the_reference_stream() {
        for seed in [0u64, 1, 42, 0xdead_beef_0123_4567, u64::MAX] {
            for i in (0u64..64).chain([1 << 20, (1 << 33) + 5, u64::MAX >> 2]) {
                let e = &mut Eval64;
                let (s, x) = (seed as i64, i as i64);
                let u24 = standard(e, Standard::Unit24, s, x);
                assert_eq!(u24 as f32, super::super::uniform_f32(seed, i), "{seed} {i}");
                let u53 = standard(e, Standard::Unit53, s, x);
                assert_eq!(u53, super::super::uniform_f64(seed, i), "{seed} {i}");
                let n24 = standard(e, Standard::Normal24, s, x);
                assert_eq!(n24 as f32, super::super::normal_f32(seed, i), "{seed} {i}");
                let n53 = standard(e, Standard::Normal53, s, x);
                assert_eq!(n53, super::super::normal_f64(seed, i), "{seed} {i}");
            }
            for c in [0i64, 1, -5, 1 << 40, i64::MIN, i64::MAX] {
                let want = super::super::perform::effective_seed(seed, Some(c));
                assert_eq!(
                    mix_counter(&mut Eval64, seed as i64, c) as u64,
                    want,
                    "{seed} {c}"
                );
            }
        }
    }
}
