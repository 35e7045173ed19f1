//! The reference implementation of the random ops.

use super::{fill_normal_f32, normal_f64, uniform_f32, uniform_f64};
use crate::ir::{DType, RandomDist};
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};

/// The seed actually used: the op's seed, with the optional per-call counter mixed in.
pub fn effective_seed(seed: u64, counter: Option<i64>) -> u64 {
    match counter {
        // The golden-ratio multiplier spreads consecutive counters over the whole key space.
        Some(c) => seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        None => seed,
    }
}

/// Fills a tensor of `shape` and `dtype` from the stream of `seed`.
pub fn sample(dist: RandomDist, seed: u64, shape: &[usize], dtype: DType) -> Tensor {
    let n = shape.iter().product::<usize>() as u64;
    let sh = IxDyn(shape);
    let f64s = |f: &dyn Fn(u64) -> f64| {
        ArrayD::from_shape_vec(sh.clone(), (0..n).map(f).collect()).expect("length matches")
    };
    match (dist, dtype) {
        (RandomDist::Uniform { low, high }, DType::F32) => {
            let (lo, w) = (low.0 as f32, (high.0 - low.0) as f32);
            Tensor::F32(
                ArrayD::from_shape_vec(sh, (0..n).map(|i| lo + w * uniform_f32(seed, i)).collect())
                    .expect("length"),
            )
        }
        (RandomDist::Uniform { low, high }, _) => {
            Tensor::F64(f64s(&|i| low.0 + (high.0 - low.0) * uniform_f64(seed, i)))
        }
        (RandomDist::Normal { mean, std }, DType::F32) => {
            let (m, s) = (mean.0 as f32, std.0 as f32);
            let mut z = vec![0.0f32; n as usize];
            fill_normal_f32(seed, 0, &mut z);
            z.iter_mut().for_each(|v| *v = m + s * *v);
            Tensor::F32(ArrayD::from_shape_vec(sh, z).expect("length"))
        }
        (RandomDist::Normal { mean, std }, _) => {
            Tensor::F64(f64s(&|i| mean.0 + std.0 * normal_f64(seed, i)))
        }
        (RandomDist::Bernoulli { p }, dt) => {
            let hits = f64s(&|i| {
                if (uniform_f32(seed, i) as f64) < p.0 {
                    1.0
                } else {
                    0.0
                }
            });
            match dt {
                DType::Bool => Tensor::Bool(hits.mapv(|v| v != 0.0)),
                DType::I32 => Tensor::I32(hits.mapv(|v| v as i32)),
                DType::I64 => Tensor::I64(hits.mapv(|v| v as i64)),
                DType::F32 => Tensor::F32(hits.mapv(|v| v as f32)),
                DType::F64 => Tensor::F64(hits),
                DType::F16 => Tensor::F16(hits.mapv(crate::ir::f16_of)),
                DType::BF16 => Tensor::BF16(hits.mapv(crate::ir::bf16_of)),
            }
        }
    }
}
