//! Steps at the edges of sizes for the random programs: attributes near 2^31, 2^32, 2^62 and
//! 2^64 on the ops that size their results from them (`conv2d`, pooling, `one_hot`, `reshape`,
//! `broadcast_to`, `slice`, `topk`, `take`, `arange`), applied to values whose dims may be `?`
//! so that an extent is known only when the function runs. Such a step either gives the
//! ordinary answer or is refused: by the type check where the sizes are known (building it
//! must not panic), when the function is compiled or called where they are not. Every backend
//! must come to the same outcome, and none may panic or abort.
//!
//! The sizes a result would be built from (`conv2d`, pooling, `one_hot`, `broadcast_to`,
//! `arange`) are small or at least 2^40: a result of 2^40 elements cannot be allocated on a
//! machine that runs the tests, so its refusal is certain and nothing large is ever touched.
//! Steps that cannot grow their input (`reshape`, `slice`, `topk`, `take`) also get 2^31 and
//! 2^32 + 1, where 32-bit arithmetic would wrap, and `i64::MIN`.

use super::{array, shape_of, Bytes, Ctx, Val};
use kiln::{Conv2d, DType, Tensor, Var};
use ndarray::{ArrayD, IxDyn};

/// Sizes a result is built from.
const GROWING: [usize; 5] = [
    1 << 40,
    10_000_000_000_000,
    1 << 62,
    i64::MAX as usize,
    usize::MAX,
];

/// Sizes of views and selections (which cannot grow their input), beside `GROWING`'s.
const SELECTING: [usize; 3] = [1 << 31, (1 << 32) + 1, 1 << 63];

/// What one attribute of an edge step is: its default most of the time, now and then a small
/// size (0 included, where the op may refuse it), now and then an extreme one.
fn size(r: &mut Bytes, default: usize, growing: bool, extremes: &mut usize) -> usize {
    match r.pick(4) {
        0 | 1 => default,
        2 => r.pick(4),
        _ => {
            *extremes += 1;
            let k = r.pick(GROWING.len() + if growing { 0 } else { SELECTING.len() });
            GROWING
                .get(k)
                .copied()
                .unwrap_or_else(|| SELECTING[k - GROWING.len()])
        }
    }
}

/// A size as the builders take it (i64): one beyond i64::MAX stays the most extreme there is.
fn arg(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A pair of sizes as the pooling builders take them.
fn arg2(p: [usize; 2]) -> [i64; 2] {
    p.map(arg)
}

/// A signed bound or step: small, or extreme (`i64::MIN`, `i64::MAX`, +-2^62, +-2^32 + 1).
fn signed(r: &mut Bytes, extremes: &mut usize) -> i64 {
    match r.pick(3) {
        0 | 1 => r.pick(7) as i64 - 3,
        _ => {
            *extremes += 1;
            [
                i64::MIN,
                i64::MAX,
                1 << 62,
                -(1 << 62),
                (1 << 32) + 1,
                -(1 << 31),
            ][r.pick(6)]
        }
    }
}

impl Ctx<'_> {
    /// One step at the edges of sizes on `p`, or `None` where `p` does not suit it. The result
    /// becomes an output of the program, never an operand of later steps (its shape is not
    /// the base's, and it may be refused).
    pub(super) fn edge(&mut self, r: &mut Bytes, p: &Val) -> Option<Val> {
        let ty = p.v.ty();
        let (dt, rank) = (ty.dtype, ty.rank());
        let shape = shape_of(&p.v, self.base);
        let ex = &mut self.extremes;
        let out = |v: Var, exact: bool| Some(Val { v, exact });
        match r.pick(9) {
            // Windows over an image of rank 4 (leading axes of 1 added), in a float dtype.
            kind @ (0 | 1) if rank <= 4 => {
                let fdt = if dt == DType::F64 { dt } else { DType::F32 };
                let mut x = if dt == fdt {
                    p.v.clone()
                } else {
                    p.v.cast(fdt)
                };
                if rank < 4 {
                    let lead: Vec<i64> = (0..(4 - rank) as i64).collect();
                    x = x.expand_dims(&lead);
                }
                // Axis 1 of the image.
                let channels = if rank >= 3 { shape[rank - 3] } else { 1 };
                let mut pair = |r: &mut Bytes, default| {
                    [size(r, default, true, ex), size(r, default, true, ex)]
                };
                if kind == 0 {
                    let (kh, kw, o) = (1 + r.pick(3), 1 + r.pick(3), 1 + r.pick(2));
                    let conv = Conv2d {
                        stride: pair(r, 1),
                        padding: pair(r, 0),
                        dilation: pair(r, 1),
                        groups: 1,
                    };
                    let w = self
                        .g
                        .constant(array(fdt, &[o, channels, kh, kw], self.fill));
                    out(x.conv2d(&w, conv), false)
                } else {
                    let (window, stride, padding) = (pair(r, 2), pair(r, 1), pair(r, 0));
                    match r.pick(2) {
                        0 => out(
                            x.max_pool2d(arg2(window), arg2(stride), arg2(padding)),
                            p.exact,
                        ),
                        _ => out(
                            x.avg_pool2d(arg2(window), arg2(stride), arg2(padding)),
                            false,
                        ),
                    }
                }
            }
            // One-hot rows of exact integer indices.
            2 if p.exact || !dt.is_float() => {
                let index = match dt {
                    DType::I32 | DType::I64 => p.v.clone(),
                    _ => p.v.cast(DType::I64),
                };
                let depth = size(r, 3, true, ex);
                let odt = [DType::F32, DType::I32, DType::Bool][r.pick(3)];
                out(index.one_hot(arg(depth), odt), true)
            }
            // A reshape to sizes whose product wraps, or to a huge extent of an empty array.
            3 => {
                let a = size(r, 1, false, ex) as i64;
                let b = match r.pick(3) {
                    0 => -1,
                    1 => shape.iter().product::<usize>() as i64,
                    _ => size(r, 2, false, ex) as i64,
                };
                let dims = if r.chance(2) { [a, b] } else { [b, a] };
                out(p.v.reshape(&dims), p.exact)
            }
            // A broadcast to a huge leading extent, materialized as an output.
            4 => {
                let mut to = vec![size(r, 2, true, ex)];
                to.extend(&shape);
                let to: Vec<i64> = to.into_iter().map(arg).collect();
                out(p.v.broadcast_to(&to), p.exact)
            }
            // Slicing with bounds and steps near i64's ends.
            5 if rank >= 1 => {
                let ranges: Vec<(Option<i64>, Option<i64>, i64)> = (0..1 + r.pick(rank))
                    .map(|_| {
                        let start = r.chance(3).then(|| signed(r, ex));
                        let stop = r.chance(3).then(|| signed(r, ex));
                        let step = match signed(r, ex) {
                            0 => 1,
                            s => s,
                        };
                        (start, stop, step)
                    })
                    .collect();
                out(p.v.slice(&ranges), p.exact)
            }
            // The k largest of the last axis, k past its extent now and then.
            6 if rank >= 1 && dt != DType::Bool && p.exact => {
                let k = size(r, 1, false, ex);
                out(p.v.topk(arg(k)).0, true)
            }
            // Positions near i64's ends along one axis: refused when the function runs.
            7 if rank >= 1 => {
                let n = 1 + r.pick(2);
                let idx: Vec<i64> = (0..n).map(|_| signed(r, ex)).collect();
                let idx = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[n]), idx).ok()?);
                let axis = r.pick(rank) as i64;
                out(p.v.take(&self.g.constant(idx), axis), p.exact)
            }
            // A range of a huge length, or of a length a float cannot count.
            _ => {
                let stop = match r.pick(3) {
                    0 => 3.0,
                    1 => {
                        *ex += 1;
                        [1e12, 1e19, 1e300, f64::INFINITY, f64::NAN][r.pick(5)]
                    }
                    _ => size(r, 3, true, ex) as f64,
                };
                let step = [1.0, 1.0, 0.5, 1e-300, -1.0][r.pick(5)];
                let odt = [DType::F32, DType::I64][r.pick(2)];
                out(self.g.arange(0.0, stop, step, odt), true)
            }
        }
    }
}
