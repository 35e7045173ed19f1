//! Builders for the windowed ops: `conv2d` and max and average pooling.

use super::Var;
use crate::error::SourceLoc;
use crate::ir::types::sizes;
use crate::ir::window::{Conv2d, Pool2d, PoolKind};
use crate::ir::Op;

impl Var {
    /// A 2-D convolution (cross-correlation, as in PyTorch and JAX) of this `[N, C, H, W]`
    /// image with `filters` of `[O, C / groups, KH, KW]`, giving `[N, O, OH, OW]`; `conv`
    /// holds strides, zero padding, dilation and groups (`Conv2d::default()` is 1, 0, 1, 1).
    /// f32 or f64. Its gradients are convolutions too (`conv2d_grad_image`,
    /// `conv2d_grad_filter`).
    #[track_caller]
    pub fn conv2d(&self, filters: &Var, conv: Conv2d) -> Var {
        self.apply1(Op::Conv2d(conv), &[filters], SourceLoc::caller())
    }

    /// Max pooling of the last two axes: windows of `window`, `stride` apart, over the input
    /// padded by `padding` on each side (padding is never the max).
    #[track_caller]
    pub fn max_pool2d(&self, window: [i64; 2], stride: [i64; 2], padding: [i64; 2]) -> Var {
        self.pool(PoolKind::Max, window, stride, padding, SourceLoc::caller())
    }

    /// Average pooling of the last two axes; padding counts as zeros in the mean (PyTorch's
    /// default `count_include_pad`). Floats only.
    #[track_caller]
    pub fn avg_pool2d(&self, window: [i64; 2], stride: [i64; 2], padding: [i64; 2]) -> Var {
        self.pool(PoolKind::Avg, window, stride, padding, SourceLoc::caller())
    }

    fn pool(
        &self,
        kind: PoolKind,
        window: [i64; 2],
        stride: [i64; 2],
        padding: [i64; 2],
        loc: SourceLoc,
    ) -> Var {
        let what = kind.name();
        self.apply_with(loc, |_| {
            let pair = |arg: &str, v: [i64; 2]| -> Result<[usize; 2], String> {
                let s = sizes(&format!("{what}: {arg}"), &v)?;
                Ok([s[0], s[1]])
            };
            Ok(Op::Pool2d(Pool2d {
                kind,
                window: pair("window", window)?,
                stride: pair("stride", stride)?,
                padding: pair("padding", padding)?,
            }))
        })
    }
}
