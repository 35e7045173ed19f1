//! Counter-based random numbers (Philox4x32-10, Salmon et al., "Parallel random numbers: as
//! easy as 1, 2, 3", SC'11). Every element of a random tensor is a pure function of the seed
//! and the element's flat index, so results do not depend on thread count, chunking or backend:
//! the same seed gives the same numbers on every backend, the GPU included.
//!
//! # Stream layout
//! The key is the 64-bit seed split into two 32-bit words (low word first). Counter words are
//! `[block_lo, block_hi, 0, 0]`, where `block` is a 64-bit block number; one block gives four
//! 32-bit words `w[0..4]`. For a tensor of `n` elements, element `i` (row-major flat index)
//! takes:
//!
//! | distribution, dtype | block | words |
//! | --- | --- | --- |
//! | uniform f32, bernoulli | `i / 4` | `w[i % 4]`, top 24 bits -> `[0, 1)` |
//! | uniform f64 | `i / 2` | `w[2j], w[2j+1]` with `j = i % 2`, top 53 bits of `(w[2j] << 32) \| w[2j+1]` -> `[0, 1)` |
//! | normal f32 | `i / 2` | `u1, u2` from `w[2j], w[2j+1]` (24-bit each); Box-Muller `sqrt(-2 ln(1-u1)) cos(2 pi u2)` in f64, rounded |
//! | normal f64 | `i` | `u1` from `w[0], w[1]`, `u2` from `w[2], w[3]` (53-bit each); Box-Muller as above |
//!
//! Box-Muller's `ln` and `cos` are kiln's own (`math::unary`), not the C library's, so that
//! every code generator, the GPU's included, gives the same bits.
//!
//! `uniform(low, high)` is `low + (high - low) * u`; `normal(mean, std)` is `mean + std * z`;
//! `bernoulli(p)` is `u < p`. Different random ops in one function should use different seeds
//! (the graph builder derives them from a user seed and a per-op counter).

pub mod perform;
pub mod stream;

/// One Philox4x32-10 block.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    const M0: u32 = 0xD251_1F53;
    const M1: u32 = 0xCD9E_8D57;
    const W0: u32 = 0x9E37_79B9;
    const W1: u32 = 0xBB67_AE85;
    let mulhilo = |a: u32, b: u32| {
        let p = a as u64 * b as u64;
        ((p >> 32) as u32, p as u32)
    };
    let (mut c, mut k) = (counter, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let (hi0, lo0) = mulhilo(M0, c[0]);
        let (hi1, lo1) = mulhilo(M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

fn block(seed: u64, b: u64) -> [u32; 4] {
    philox4x32_10(
        [b as u32, (b >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

fn unit24(w: u32) -> f64 {
    (w >> 8) as f64 * (1.0 / (1u64 << 24) as f64)
}

fn unit53(hi: u32, lo: u32) -> f64 {
    ((((hi as u64) << 32) | lo as u64) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Element `i` of a uniform `[0, 1)` f32 stream.
pub fn uniform_f32(seed: u64, i: u64) -> f32 {
    unit24(block(seed, i / 4)[(i % 4) as usize]) as f32
}

/// Element `i` of a uniform `[0, 1)` f64 stream.
pub fn uniform_f64(seed: u64, i: u64) -> f64 {
    let w = block(seed, i / 2);
    let j = (i % 2) as usize * 2;
    unit53(w[j], w[j + 1])
}

/// `sqrt(-2 log(1 - u1)) cos(2 pi u2)` with kiln's `log` and `cos` (`math`, evaluated in Rust:
/// the bits every backend's code gives, the GPU's included), not the C library's.
fn box_muller(u1: f64, u2: f64) -> f64 {
    use crate::math::{unary, Eval64, MathFn};
    // 1 - u1 is in (0, 1], so the log is finite.
    let r = (-2.0 * unary(&mut Eval64, MathFn::Log, 1.0 - u1)).sqrt();
    r * unary(&mut Eval64, MathFn::Cos, std::f64::consts::TAU * u2)
}

/// Element `i` of a standard normal f32 stream.
pub fn normal_f32(seed: u64, i: u64) -> f32 {
    let w = block(seed, i / 2);
    let j = (i % 2) as usize * 2;
    box_muller(unit24(w[j]), unit24(w[j + 1])) as f32
}

/// Elements `first..first + out.len()` of the standard normal f32 stream of `seed`, exactly
/// as `normal_f32` gives them, written into `out`. Each Philox block serves the two elements
/// it holds (element by element, every block is computed twice), which makes a bulk fill
/// about twice as fast; callers split large fills into chunks across threads.
pub fn fill_normal_f32(seed: u64, first: u64, out: &mut [f32]) {
    let mut i = first;
    // An odd start takes the second half of its block alone.
    let skip = (first % 2) as usize;
    let (head, rest) = out.split_at_mut(skip.min(out.len()));
    for o in head {
        *o = normal_f32(seed, i);
        i += 1;
    }
    let mut pairs = rest.chunks_exact_mut(2);
    for pair in &mut pairs {
        let w = block(seed, i / 2);
        pair[0] = box_muller(unit24(w[0]), unit24(w[1])) as f32;
        pair[1] = box_muller(unit24(w[2]), unit24(w[3])) as f32;
        i += 2;
    }
    if let [o] = pairs.into_remainder() {
        *o = normal_f32(seed, i);
    }
}

/// Element `i` of a standard normal f64 stream.
pub fn normal_f64(seed: u64, i: u64) -> f64 {
    let w = block(seed, i);
    box_muller(unit53(w[0], w[1]), unit53(w[2], w[3]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_normal_fill_is_the_stream() {
        for first in [0u64, 1, 6, 7] {
            for len in [0usize, 1, 2, 3, 10] {
                let mut out = vec![0.0f32; len];
                fill_normal_f32(42, first, &mut out);
                let each: Vec<f32> = (0..len as u64).map(|k| normal_f32(42, first + k)).collect();
                assert_eq!(out, each, "first {first}, len {len}");
            }
        }
    }

    #[test]
    fn philox_known_answers() {
        // Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10).
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }
}
