//! Deterministic test values: a fixed xorshift walk in [-0.5, 0.5).

use ndarray::{ArrayD, IxDyn};

/// An f32 array of `shape` from the walk seeded by `seed`.
pub fn fill(shape: &[usize], seed: u64) -> ArrayD<f32> {
    let mut s = seed | 1;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    })
}
