//! The geometry of windowed ops (`conv2d` and pooling): their parameters and the one rule
//! for how many windows fit along an axis, read by type inference, `perform` and the
//! gradients alike.

use super::types::{Dim, TensorType};

/// A 2-D convolution's parameters, per spatial axis (height, width). Padding adds zeros on
/// both sides; dilation spaces the filter's taps; `groups` splits the channels into
/// independent convolutions (PyTorch's and JAX's `feature_group_count`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Conv2d {
    /// The step between one window and the next (at least 1).
    pub stride: [usize; 2],
    /// The zeros added before the first and after the last element.
    pub padding: [usize; 2],
    /// The distance between neighbouring taps of the filter (at least 1; 1 is a dense filter).
    pub dilation: [usize; 2],
    /// How many independent convolutions the channels split into (at least 1): the image's
    /// channels are `groups` times the filters', and the filter count is a multiple of it.
    pub groups: usize,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

impl Conv2d {
    /// The output's height and width for an image of `image` and filters of `kernel`, or why
    /// none fits.
    pub fn output(&self, image: [usize; 2], kernel: [usize; 2]) -> Result<[usize; 2], String> {
        let mut out = [0; 2];
        for a in 0..2 {
            // Checked: a dilation or padding near 2^64 must not wrap to a span or a padded
            // size that fits.
            let span = (kernel[a].max(1) - 1)
                .checked_mul(self.dilation[a])
                .and_then(|s| s.checked_add(1))
                .ok_or_else(|| {
                    format!(
                        "conv2d: dilation {} along axis {} spreads {} taps wider than an address \
                         reaches",
                        self.dilation[a],
                        a + 2,
                        kernel[a]
                    )
                })?;
            let padded = padded(image[a], self.padding[a]).ok_or_else(|| {
                format!(
                    "conv2d: padding {} along axis {} makes a padded size larger than an \
                     address reaches",
                    self.padding[a],
                    a + 2
                )
            })?;
            out[a] = windows_in(padded, span, self.stride[a]).ok_or_else(|| {
                format!(
                    "conv2d: a filter spanning {span} does not fit in {} (padded by {} on \
                     each side) along axis {}",
                    image[a],
                    self.padding[a],
                    a + 2
                )
            })?;
        }
        Ok(out)
    }

    /// Whether the channel counts agree with the groups: `C = groups * filter channels`, `O`
    /// a multiple of the groups (checked where the dims are known).
    pub fn check_channels(&self, c: Dim, o: Dim, per_group: Dim) -> Result<(), String> {
        let g = self.groups;
        if let (Some(c), Some(k)) = (c, per_group) {
            if c != g * k {
                return Err(format!(
                    "conv2d: the image has {c} channels; filters of {k} channels in {g} group(s) \
                     need {}",
                    g * k
                ));
            }
        }
        if let Some(o) = o {
            if o % g != 0 {
                return Err(format!("conv2d: {o} filters do not split into {g} groups"));
            }
        }
        Ok(())
    }

    /// Why these parameters mean nothing, if they do not.
    pub fn check(&self) -> Result<(), String> {
        if self.stride.contains(&0) || self.dilation.contains(&0) || self.groups == 0 {
            return Err(format!(
                "conv2d: strides {:?}, dilations {:?} and groups {} must be at least 1",
                self.stride, self.dilation, self.groups
            ));
        }
        Ok(())
    }
}

/// What a pooling window gives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// The greatest element; padding is never the greatest.
    Max,
    /// The mean over the whole window, padding counted as zeros (PyTorch's default
    /// `count_include_pad`, and what summing a window and dividing by its size gives).
    Avg,
}

impl PoolKind {
    /// The pooling op's name in the text form: `max_pool2d` or `avg_pool2d`.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Max => "max_pool2d",
            PoolKind::Avg => "avg_pool2d",
        }
    }

    /// The name of its gradient op: `max_pool2d_grad` or `avg_pool2d_grad`.
    pub fn grad_name(self) -> &'static str {
        match self {
            PoolKind::Max => "max_pool2d_grad",
            PoolKind::Avg => "avg_pool2d_grad",
        }
    }
}

/// A pooling window over the last two axes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pool2d {
    /// What each window gives: its greatest element or its mean.
    pub kind: PoolKind,
    /// The window's height and width (at least 1).
    pub window: [usize; 2],
    /// The step between one window and the next (at least 1).
    pub stride: [usize; 2],
    /// The padding before the first and after the last element, at most half the window.
    pub padding: [usize; 2],
}

impl Pool2d {
    /// The divisor of an average: the window's size, padding included, as a float (a window
    /// may hold more taps than a `usize` counts: one near 2^64 over a padded image). Every
    /// backend divides by this value rounded to the dtype.
    pub fn area(&self) -> f64 {
        self.window[0] as f64 * self.window[1] as f64
    }

    /// The output's last two dims for an input whose last two are `input`, or why none fits.
    /// An axis of extent 0 has no window that is not padding alone (which has no greatest
    /// element and no mean over elements): an error, as numpy's reductions of nothing are.
    pub fn output(&self, input: [usize; 2]) -> Result<[usize; 2], String> {
        let name = self.kind.name();
        let mut out = [0; 2];
        for a in 0..2 {
            let axis = a as isize - 2;
            if input[a] == 0 {
                return Err(format!(
                    "{name}: axis {axis} is empty, so every window would be padding alone"
                ));
            }
            let padded = padded(input[a], self.padding[a]).ok_or_else(|| {
                format!(
                    "{name}: padding {} along axis {axis} makes a padded size larger than an \
                     address reaches",
                    self.padding[a]
                )
            })?;
            out[a] = windows_in(padded, self.window[a], self.stride[a]).ok_or_else(|| {
                format!(
                    "{name}: a window of {} does not fit in {} (padded by {} on each side)",
                    self.window[a], input[a], self.padding[a]
                )
            })?;
        }
        Ok(out)
    }

    /// Why these parameters mean nothing, if they do not. Padding of half a window or more
    /// would make windows of padding alone.
    pub fn check(&self) -> Result<(), String> {
        let name = self.kind.name();
        if self.window.contains(&0) || self.stride.contains(&0) {
            return Err(format!(
                "{name}: window {:?} and strides {:?} must be at least 1",
                self.window, self.stride
            ));
        }
        // (`padding > window / 2`, not `2 * padding > window`, which could wrap.)
        if (0..2).any(|a| self.padding[a] > self.window[a] / 2) {
            return Err(format!(
                "{name}: padding {:?} must be at most half the window {:?}",
                self.padding, self.window
            ));
        }
        Ok(())
    }
}

/// The outputs `lo..hi` (of `out`) whose tap at `offset` (the tap's dilated position in the
/// window) lands inside an axis of `n` padded by `pad`: `0 <= o * stride + offset - pad < n`.
/// `perform` and the ahead-of-time plan walk windows tap by tap over these runs.
pub fn tap_outputs(
    offset: usize,
    pad: usize,
    stride: usize,
    n: usize,
    out: usize,
) -> (usize, usize) {
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = (n + pad).saturating_sub(offset).div_ceil(stride);
    let hi = hi.min(out);
    (lo.min(hi), hi)
}

/// The taps along one axis that can land in the input for some output: those whose offset
/// `i * dilation` is in `[padding - (out - 1) * stride, padding + n)`. Only these are visited,
/// so a window far wider than its padded input (up to 2^64 taps) costs the taps that read it.
pub fn taps_reaching(
    kernel: usize,
    dilation: usize,
    stride: usize,
    padding: usize,
    n: usize,
    out: usize,
) -> std::ops::Range<usize> {
    if out == 0 {
        return 0..0;
    }
    let last_start = (out - 1).saturating_mul(stride);
    let lo = padding.saturating_sub(last_start).div_ceil(dilation);
    // `i < hi` means `i * dilation < padding + n`: no product below overflows.
    let hi = padding.saturating_add(n).div_ceil(dilation).min(kernel);
    lo.min(hi)..hi
}

/// The dims of `t` at axes `first` and `first + 1`.
fn dims2(t: &TensorType, first: usize) -> [Dim; 2] {
    [t.shape[first], t.shape[first + 1]]
}

/// The output dims of `f` on known `input` dims, unknown where any is.
fn spatial(
    input: [Dim; 2],
    f: impl FnOnce([usize; 2]) -> Result<[usize; 2], String>,
) -> Result<[Dim; 2], String> {
    match input {
        [Some(h), Some(w)] => f([h, w]).map(|o| o.map(Some)),
        _ => Ok([None, None]),
    }
}

fn float_rank4(name: &str, what: &str, t: &TensorType) -> Result<(), String> {
    if t.rank() != 4 || !t.dtype.is_float() {
        return Err(format!(
            "{name}: the {what} must be a rank-4 f32 or f64 tensor, got {t}"
        ));
    }
    Ok(())
}

/// `a` and `b` agree where both are known.
fn agree(a: Dim, b: Dim) -> bool {
    a.is_none() || b.is_none() || a == b
}

/// The type of `conv2d` of image `x` (`[N, C, H, W]`) with filters `w` (`[O, C / groups, KH,
/// KW]`).
pub fn conv_type(conv: &Conv2d, x: &TensorType, w: &TensorType) -> Result<TensorType, String> {
    conv.check()?;
    float_rank4("conv2d", "image", x)?;
    float_rank4("conv2d", "filters", w)?;
    if x.dtype != w.dtype {
        return Err(format!("conv2d: the image is {x} and the filters {w}"));
    }
    conv.check_channels(x.shape[1], w.shape[0], w.shape[1])?;
    let kernel = dims2(w, 2);
    let out = match kernel {
        [Some(kh), Some(kw)] => spatial(dims2(x, 2), |hw| conv.output(hw, [kh, kw]))?,
        _ => [None, None],
    };
    Ok(TensorType::new(
        x.dtype,
        vec![x.shape[0], w.shape[0], out[0], out[1]],
    ))
}

/// The type of the image gradient of `conv2d` from the output's gradient `g` and filters `w`,
/// for an image of `image` (height, width).
pub fn conv_grad_image_type(
    conv: &Conv2d,
    image: [usize; 2],
    g: &TensorType,
    w: &TensorType,
) -> Result<TensorType, String> {
    let name = "conv2d_grad_image";
    conv.check()?;
    float_rank4(name, "gradient", g)?;
    float_rank4(name, "filters", w)?;
    let c = w.shape[1].map(|k| k * conv.groups);
    let image_ty = TensorType::new(w.dtype, vec![g.shape[0], c, Some(image[0]), Some(image[1])]);
    let y = conv_type(conv, &image_ty, w)?;
    if !super::infer::fits_type(g, &y) {
        return Err(format!(
            "{name}: the gradient has type {g}, the convolution's output {y}"
        ));
    }
    Ok(image_ty)
}

/// The type of the filter gradient of `conv2d` from the image `x` and the output's gradient
/// `g`, for filters of `kernel` (height, width).
pub fn conv_grad_filter_type(
    conv: &Conv2d,
    kernel: [usize; 2],
    x: &TensorType,
    g: &TensorType,
) -> Result<TensorType, String> {
    let name = "conv2d_grad_filter";
    conv.check()?;
    float_rank4(name, "image", x)?;
    float_rank4(name, "gradient", g)?;
    let per_group = x.shape[1].map(|c| c / conv.groups);
    let w = TensorType::new(
        x.dtype,
        vec![g.shape[1], per_group, Some(kernel[0]), Some(kernel[1])],
    );
    let y = conv_type(conv, x, &w)?;
    if !super::infer::fits_type(g, &y) || !agree(x.shape[0], g.shape[0]) {
        return Err(format!(
            "{name}: the gradient has type {g}, the convolution's output {y}"
        ));
    }
    Ok(w)
}

/// The type of pooling `x` (rank 2 or more; the last two axes are pooled).
pub fn pool_type(pool: &Pool2d, x: &TensorType) -> Result<TensorType, String> {
    pool.check()?;
    let name = pool.kind.name();
    let numeric = match pool.kind {
        PoolKind::Max => x.dtype.is_numeric(),
        PoolKind::Avg => x.dtype.is_float(),
    };
    if x.rank() < 2 || !numeric {
        return Err(format!(
            "{name}: takes a tensor of rank 2 or more of {}, got {x}",
            match pool.kind {
                PoolKind::Max => "numbers",
                PoolKind::Avg => "floats",
            }
        ));
    }
    let r = x.rank();
    let out = spatial(dims2(x, r - 2), |hw| pool.output(hw))?;
    let mut shape = x.shape.clone();
    shape[r - 2] = out[0];
    shape[r - 1] = out[1];
    Ok(TensorType::new(x.dtype, shape))
}

/// How many windows spanning `span` fit, `stride` apart, in `n` padded by `pad` on both sides
/// (the floor rule of PyTorch, JAX and cuDNN); `None` when not even one does, or when the
/// padded size overflows.
pub fn windows(n: usize, span: usize, stride: usize, pad: usize) -> Option<usize> {
    windows_in(padded(n, pad)?, span, stride)
}

/// `n` padded by `pad` on both sides, `None` where that overflows.
fn padded(n: usize, pad: usize) -> Option<usize> {
    pad.checked_mul(2)?.checked_add(n)
}

/// How many windows spanning `span` fit, `stride` apart, in `padded` elements.
fn windows_in(padded: usize, span: usize, stride: usize) -> Option<usize> {
    (padded >= span && stride > 0).then(|| (padded - span) / stride + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_follow_the_floor_rule() {
        assert_eq!(windows(5, 3, 1, 0), Some(3));
        assert_eq!(windows(5, 3, 2, 1), Some(3));
        assert_eq!(windows(4, 2, 2, 0), Some(2));
        assert_eq!(windows(2, 3, 1, 0), None);
        let c = Conv2d {
            dilation: [2, 1],
            ..Conv2d::default()
        };
        assert_eq!(c.output([7, 7], [3, 3]), Ok([3, 5]));
        assert!(c.output([4, 7], [3, 3]).is_err());
    }
}
