//! Gradient rules of `conv2d`: both gradients are convolutions again (`conv2d_grad_image`,
//! `conv2d_grad_filter`), which need the image's and the filters' spatial dims known.

use super::rules::InGrad;
use crate::error::{Error, Result};
use crate::graph::{Graph, Var};
use crate::ir::window::Conv2d;
use crate::ir::Op;

/// The last two dims of `v`, which the gradient ops carry as parameters.
fn spatial(v: &Var, what: &str) -> Result<[usize; 2]> {
    let s = v.ty().shape;
    match s.as_slice() {
        [.., Some(h), Some(w)] => Ok([*h, *w]),
        _ => Err(Error::Grad(format!(
            "conv2d: the gradient needs the {what}'s height and width known, got {}",
            v.ty()
        ))),
    }
}

/// `conv2d(x, w)` with output gradient `gy`.
pub fn conv2d(g: &Graph, x: &Var, w: &Var, gy: &Var, conv: Conv2d) -> Result<Vec<InGrad>> {
    Ok(vec![
        InGrad::Grad(conv_image_grad(g, gy, w, conv, x)?),
        InGrad::Grad(conv_filter_grad(g, x, gy, conv, w)?),
    ])
}

/// The gradient with respect to an image shaped like `like_image`, from output gradient `gy`.
pub fn conv_image_grad(
    g: &Graph,
    gy: &Var,
    w: &Var,
    conv: Conv2d,
    like_image: &Var,
) -> Result<Var> {
    let image = spatial(like_image, "image")?;
    Ok(g.apply(Op::Conv2dGradImage { conv, image }, &[gy, w])
        .swap_remove(0))
}

/// The gradient with respect to filters shaped like `like_filters`, from image `x` and output
/// gradient `gy`.
pub fn conv_filter_grad(
    g: &Graph,
    x: &Var,
    gy: &Var,
    conv: Conv2d,
    like_filters: &Var,
) -> Result<Var> {
    let kernel = spatial(like_filters, "filters")?;
    Ok(g.apply(Op::Conv2dGradFilter { conv, kernel }, &[x, gy])
        .swap_remove(0))
}
