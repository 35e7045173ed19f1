//! Indexing by tensors and running sums ahead of time: `take` and `take_along_axis` become a
//! gather step, `scatter_add` and `scatter_set` a copy and a scatter step (both check each
//! index and end the call with an error code when one is out of range), `one_hot` a map step
//! against the positions `0..depth`, and `cumsum`, `cumprod` and `cumprod`'s gradient map
//! steps swept along their axis in `perform::index`'s order (so their bits are its bits).

use super::{program, Builder, Step, View};
use crate::error::Result;
use crate::ir::DType;
use crate::tensor::Tensor;

/// The most positions a `one_hot` embeds in an object (1 GiB of i64).
const MAX_EMBEDDED_POSITIONS: usize = 1 << 27;

/// `v` without its dim `axis`, at position `at` along it.
fn lane_slice(v: &View, axis: usize, at: usize) -> View {
    let mut shape = v.shape.clone();
    let mut strides = v.strides.clone();
    shape.remove(axis);
    let st = strides.remove(axis);
    v.with(shape, strides, v.offset + at as i64 * st)
}

/// `v`'s strides with `picked` dims of stride 0 in place of dim `axis` (a value read the same
/// for every index of a gather).
fn around(v: &View, axis: usize, picked: usize) -> Vec<i64> {
    let mut st = v.strides[..axis].to_vec();
    st.extend(std::iter::repeat_n(0, picked));
    st.extend(&v.strides[axis + 1..]);
    st
}

/// The strides of index tensor `idx` read over a gather or scatter of `rank` dims whose
/// index dims start at `axis`: 0 elsewhere.
fn index_strides(idx: &View, axis: usize, rank: usize) -> Vec<i64> {
    let mut st = vec![0; axis];
    st.extend(&idx.strides);
    st.resize(rank, 0);
    st
}

impl Builder<'_> {
    /// A new failure code of the entry point, meaning `message`.
    fn error(&mut self, message: String) -> u32 {
        self.errors.push(message);
        self.errors.len() as u32
    }

    /// A step that checks every index of `idx` against an axis of `n` and nothing else: where
    /// a gather or scatter has no element to move, its indices are still checked (as
    /// `perform` checks them).
    fn check_indices(&mut self, what: &str, idx: &View, n: usize, code: u32) {
        self.steps.push(Step::CheckIndices {
            what: what.to_string(),
            index: idx.clone(),
            axis_len: n,
            code,
        });
    }

    fn out_of_range(&mut self, what: &str, axis: usize, n: usize) -> u32 {
        self.error(format!(
            "{what}: an index is out of range for axis {axis} of size {n}"
        ))
    }

    /// numpy `take(x, idx, axis)`.
    pub(super) fn take(
        &mut self,
        what: &str,
        x: &View,
        idx: &View,
        axis: usize,
        out_shape: &[usize],
    ) -> View {
        let out = self.buffer(x.dtype, out_shape);
        let rank = out_shape.len();
        let data = x.with(
            out_shape.to_vec(),
            around(x, axis, idx.shape.len()),
            x.offset,
        );
        let index = idx.with(
            out_shape.to_vec(),
            index_strides(idx, axis, rank),
            idx.offset,
        );
        self.gather(what, (x, idx, axis), out_shape, data, index, out)
    }

    /// numpy `take_along_axis(x, idx, axis)`: the other dims broadcast.
    pub(super) fn take_along_axis(
        &mut self,
        what: &str,
        x: &View,
        idx: &View,
        axis: usize,
        out_shape: &[usize],
    ) -> View {
        let out = self.buffer(x.dtype, out_shape);
        // Stride 0 where a dim of 1 stretches, and for the data along the axis (the index
        // picks there).
        let stretched = |v: &View, picked: Option<usize>| -> Vec<i64> {
            (0..out_shape.len())
                .map(|d| match v.shape[d] {
                    _ if Some(d) == picked => 0,
                    1 => 0,
                    _ => v.strides[d],
                })
                .collect()
        };
        let data = x.with(out_shape.to_vec(), stretched(x, Some(axis)), x.offset);
        let index = idx.with(out_shape.to_vec(), stretched(idx, None), idx.offset);
        self.gather(what, (x, idx, axis), out_shape, data, index, out)
    }

    /// The gather step (or, where it has no element, the check of its indices alone).
    fn gather(
        &mut self,
        what: &str,
        (x, idx, axis): (&View, &View, usize),
        out_shape: &[usize],
        data: View,
        index: View,
        out: View,
    ) -> View {
        let n = x.shape[axis];
        let code = self.out_of_range(what, axis, n);
        if out.numel() == 0 {
            self.check_indices(what, idx, n, code);
            return out;
        }
        self.steps.push(Step::Gather {
            what: what.to_string(),
            shape: out_shape.to_vec(),
            data,
            index,
            axis_len: n,
            axis_stride: x.strides[axis],
            out: out.clone(),
            code,
        });
        out
    }

    /// `scatter_add` (`add`) or `scatter_set` of `[x, idx, updates]`: `x` copied, then the
    /// updates written or added in index order.
    pub(super) fn scatter(&mut self, what: &str, args: &[View], axis: usize, add: bool) -> View {
        let (x, idx, updates) = (&args[0], &args[1], &args[2]);
        let out = self.materialize(x, what);
        let rank = updates.shape.len();
        let target = out.with(
            updates.shape.clone(),
            around(&out, axis, idx.shape.len()),
            out.offset,
        );
        let index = idx.with(
            updates.shape.clone(),
            index_strides(idx, axis, rank),
            idx.offset,
        );
        let n = x.shape[axis];
        let code = self.out_of_range(what, axis, n);
        if updates.numel() == 0 {
            self.check_indices(what, idx, n, code);
            return out;
        }
        self.steps.push(Step::Scatter {
            what: what.to_string(),
            shape: updates.shape.clone(),
            updates: updates.clone(),
            index,
            target,
            axis_len: n,
            axis_stride: out.strides[axis],
            add,
            code,
        });
        out
    }

    /// `one_hot(idx, depth)` of `dtype`: each index compared with the positions `0..depth`
    /// (a constant), so that an index outside them gives a row of zeros.
    pub(super) fn one_hot(
        &mut self,
        what: &str,
        idx: &View,
        depth: usize,
        dtype: DType,
    ) -> Result<View> {
        let mut shape = idx.shape.clone();
        shape.push(depth);
        // The positions are data in the object: refused where they would make it huge (and
        // never allocated on the way to an abort).
        if depth > MAX_EMBEDDED_POSITIONS {
            return Err(crate::error::Error::Unsupported(format!(
                "{what}: one_hot of depth {depth} would embed {:.1} GB of positions in the \
                 object (at most {MAX_EMBEDDED_POSITIONS} positions)",
                depth as f64 * 8.0 / 1e9
            )));
        }
        let positions: Vec<i64> = (0..depth as i64).collect();
        let iota = self.constant(&Tensor::from(ndarray::arr1(&positions).into_dyn()));
        let mut iota_st = vec![0; idx.shape.len()];
        iota_st.push(8);
        let mut idx_st = idx.strides.clone();
        idx_st.push(0);
        let it = idx.dtype;
        let wide = match it {
            DType::I64 => "%1 = input 0 : i64".to_string(),
            _ => "%1 = cast %0 to i64 : i64".to_string(),
        };
        let tail = match dtype {
            DType::Bool => "return %3".to_string(),
            t => format!("%4 = cast %3 to {t} : {t}; return %4"),
        };
        let src = format!(
            "%0 = input 0 : {it}; {wide}; %2 = input 1 : i64; %3 = eq %1, %2 : bool; {tail}"
        );
        let out = self.buffer(dtype, &shape);
        self.steps.push(Step::Map {
            what: what.to_string(),
            program: program(&src)?,
            shape: shape.clone(),
            inputs: vec![
                idx.with(shape.clone(), idx_st, idx.offset),
                iota.with(shape.clone(), iota_st, iota.offset),
            ],
            outputs: vec![out.clone()],
        });
        Ok(out)
    }

    /// `cumsum` (`sum`) or `cumprod` of `x` along `axis` in `dtype`: `x` converted, then each
    /// position combined with the one before it, in order.
    pub(super) fn cumulative(
        &mut self,
        what: &str,
        x: &View,
        axis: usize,
        sum: bool,
        dtype: DType,
    ) -> Result<View> {
        let out = self.converted(x, dtype, what);
        let n = x.shape[axis];
        if n < 2 {
            return Ok(out);
        }
        let op = if sum { "add" } else { "mul" };
        let body = Step::Map {
            what: what.to_string(),
            program: program(&format!(
                "%0 = input 0 : {dtype}; %1 = input 1 : {dtype}; %2 = {op} %0, %1 : {dtype}; \
                 return %2"
            ))?,
            shape: lane_slice(&out, axis, 0).shape,
            inputs: vec![lane_slice(&out, axis, 0), lane_slice(&out, axis, 1)],
            outputs: vec![lane_slice(&out, axis, 1)],
        };
        let st = out.strides[axis];
        self.steps.push(Step::Sweep {
            what: what.to_string(),
            count: n - 1,
            body: Box::new(body),
            advance: vec![st; 3],
        });
        Ok(out)
    }

    /// `cumprod`'s gradient from `x` and the output's gradient `g` along `axis`, as
    /// `perform::index::cumprod_grad` computes it: `s[j] = g[j] + x[j + 1] * s[j + 1]` from the
    /// end, then `dx[j] = prod(x[..j]) * s[j]` from the start.
    pub(super) fn cumprod_grad(
        &mut self,
        what: &str,
        x: &View,
        g: &View,
        axis: usize,
    ) -> Result<View> {
        let t = x.dtype;
        let dx = self.buffer(t, &x.shape);
        let n = x.shape[axis];
        if n == 0 {
            return Ok(dx);
        }
        let lane = lane_slice(&dx, axis, 0).shape;
        // s[n - 1] = g[n - 1]
        self.steps.push(Step::Map {
            what: what.to_string(),
            program: program(&format!("%0 = input 0 : {t}; return %0"))?,
            shape: lane.clone(),
            inputs: vec![lane_slice(g, axis, n - 1)],
            outputs: vec![lane_slice(&dx, axis, n - 1)],
        });
        let (sg, sx, sd) = (g.strides[axis], x.strides[axis], dx.strides[axis]);
        if n >= 2 {
            self.steps.push(Step::Sweep {
                what: what.to_string(),
                count: n - 1,
                body: Box::new(Step::Map {
                    what: what.to_string(),
                    program: program(&format!(
                        "%0 = input 0 : {t}; %1 = input 1 : {t}; %2 = input 2 : {t}; \
                         %3 = mul %1, %2 : {t}; %4 = add %0, %3 : {t}; return %4"
                    ))?,
                    shape: lane.clone(),
                    inputs: vec![
                        lane_slice(g, axis, n - 2),
                        lane_slice(x, axis, n - 1),
                        lane_slice(&dx, axis, n - 1),
                    ],
                    outputs: vec![lane_slice(&dx, axis, n - 2)],
                }),
                advance: vec![-sg, -sx, -sd, -sd],
            });
        }
        // The product of the elements before, starting from 1.
        let one = self.constant(&Tensor::full(t, &[], 1.0));
        let before = self.buffer(t, &lane);
        self.steps.push(Step::Map {
            what: what.to_string(),
            program: program(&format!("%0 = input 0 : {t}; return %0"))?,
            shape: lane.clone(),
            inputs: vec![one],
            outputs: vec![before.clone()],
        });
        self.steps.push(Step::Sweep {
            what: what.to_string(),
            count: n,
            body: Box::new(Step::Map {
                what: what.to_string(),
                program: program(&format!(
                    "%0 = input 0 : {t}; %1 = input 1 : {t}; %2 = input 2 : {t}; \
                     %3 = mul %0, %1 : {t}; %4 = mul %0, %2 : {t}; return %3, %4"
                ))?,
                shape: lane,
                inputs: vec![
                    before.clone(),
                    lane_slice(&dx, axis, 0),
                    lane_slice(x, axis, 0),
                ],
                outputs: vec![lane_slice(&dx, axis, 0), before],
            }),
            advance: vec![0, sd, sx, sd, 0],
        });
        Ok(dx)
    }

    /// `sort` (`values`) or `argsort` of `x` along `axis`: each lane's positions sorted by the
    /// object's merge sort (`aot::sort`), then the elements or the positions written out.
    pub(super) fn sort(
        &mut self,
        what: &str,
        x: &View,
        axis: usize,
        descending: bool,
        values: bool,
    ) -> View {
        let dtype = if values { x.dtype } else { DType::I64 };
        let out = self.buffer(dtype, &x.shape);
        let last = |v: &View| {
            let (mut shape, mut strides) = (v.shape.clone(), v.strides.clone());
            let (n, st) = (shape.remove(axis), strides.remove(axis));
            shape.push(n);
            strides.push(st);
            v.with(shape, strides, v.offset)
        };
        let n = x.shape[axis];
        let perm = self.buffer(DType::I64, &[n]);
        let tmp = self.buffer(DType::I64, &[n]);
        self.steps.push(Step::Sort {
            what: what.to_string(),
            data: last(x),
            descending,
            values: values.then(|| last(&out)),
            positions: (!values).then(|| last(&out)),
            perm,
            tmp,
        });
        out
    }
}
