//! `conv2d`, pooling and their gradients ahead of time, planned from the steps the plan
//! already has (views, map kernels and matrix products), so that no new code generator is
//! needed and the object computes `perform`'s bits:
//!
//! - `conv2d` and its filter gradient unroll the (zero-padded) image by a strided view that a
//!   copy makes dense (im2col), then multiply with the plan's matrix product, which sums over
//!   the unrolled rows in `perform`'s order with the same blocking as kiln's GEMM.
//! - Pooling, the pooling gradients and the image gradient go over the window tap by tap:
//!   one map step per tap over the outputs whose tap lands in the input (`tap_outputs`, the
//!   runs `perform` walks), accumulating in place. Taps run in `perform`'s order, so every
//!   element is added up (or compared) in the same order as there. Where every tap lands in
//!   the input for every output (no padding reached, no ragged edge: the common 2x2 window of
//!   stride 2), pooling is one map step reading each tap's view once, with the same
//!   operations in the same order.
//!
//! The geometry is `ir::window`'s.

use super::{contiguous_strides, copy_program, program, Builder, Step, View};
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use crate::ir::text::float_text;
use crate::ir::window::{tap_outputs, taps_reaching, Conv2d, Pool2d, PoolKind};
use crate::ir::DType;
use crate::tensor::Tensor;

/// The largest zero-padded copy of a convolution's input an object makes (4 GiB).
const MAX_PADDED_BYTES: usize = 1 << 32;

/// One tap of a window: its index in the window's row-major order, and per spatial axis the
/// outputs `lo..hi` it lands inside the input for and the input position of output `lo`'s.
struct Tap {
    index: usize,
    outputs: [(usize, usize); 2],
    first: [usize; 2],
}

/// The taps of a window of `kernel` (dilated by `dilation`) that land in the input for at
/// least one output, in row-major order.
fn taps(
    kernel: [usize; 2],
    dilation: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    input: [usize; 2],
    out: [usize; 2],
) -> Vec<Tap> {
    let mut all = Vec::new();
    let rows = taps_reaching(
        kernel[0],
        dilation[0],
        stride[0],
        padding[0],
        input[0],
        out[0],
    );
    for i in rows {
        for j in taps_reaching(
            kernel[1],
            dilation[1],
            stride[1],
            padding[1],
            input[1],
            out[1],
        ) {
            let offset = [i * dilation[0], j * dilation[1]];
            let outputs: [(usize, usize); 2] = std::array::from_fn(|a| {
                tap_outputs(offset[a], padding[a], stride[a], input[a], out[a])
            });
            if outputs.iter().any(|&(lo, hi)| lo == hi) {
                continue;
            }
            let first = std::array::from_fn(|a| outputs[a].0 * stride[a] + offset[a] - padding[a]);
            all.push(Tap {
                index: i * kernel[1] + j,
                outputs,
                first,
            });
        }
    }
    all
}

/// The last two dims of `v`: their sizes and strides.
fn spatial(v: &View) -> ([usize; 2], [i64; 2]) {
    let r = v.shape.len();
    (
        [v.shape[r - 2], v.shape[r - 1]],
        [v.strides[r - 2], v.strides[r - 1]],
    )
}

/// `v` with its last two dims replaced: `sizes` elements from `start`, `step` apart.
fn window_view(v: &View, start: [usize; 2], sizes: [usize; 2], step: [usize; 2]) -> View {
    let r = v.shape.len();
    let (_, st) = spatial(v);
    let mut shape = v.shape[..r - 2].to_vec();
    shape.extend(sizes);
    let mut strides = v.strides[..r - 2].to_vec();
    // A dim of one element never steps (a step near 2^64 would overflow the stride); a longer
    // one steps within the array.
    let stride = |d: usize| match sizes[d] {
        0 | 1 => 0,
        _ => st[d] * step[d] as i64,
    };
    strides.extend([stride(0), stride(1)]);
    let offset = v.offset + start[0] as i64 * st[0] + start[1] as i64 * st[1];
    v.with(shape, strides, offset)
}

impl Tap {
    fn count(&self) -> [usize; 2] {
        self.outputs.map(|(lo, hi)| hi - lo)
    }

    /// The outputs of `out` this tap lands in the input for.
    fn outputs_of(&self, out: &View) -> View {
        window_view(out, self.outputs.map(|(lo, _)| lo), self.count(), [1, 1])
    }

    /// The input elements under this tap, one per output of [`Tap::outputs_of`].
    fn inputs_of(&self, input: &View, stride: [usize; 2]) -> View {
        window_view(input, self.first, self.count(), stride)
    }
}

/// `out = a + b`.
fn add(t: DType) -> Result<ScalarProgram> {
    program(&format!(
        "%0 = input 0 : {t}; %1 = input 1 : {t}; %2 = add %0, %1 : {t}; return %2"
    ))
}

/// `out = a / value`.
fn divide_by(t: DType, value: f64) -> Result<ScalarProgram> {
    let v = float_text(value);
    program(&format!(
        "%0 = input 0 : {t}; %1 = const {v} : {t}; %2 = div %0, %1 : {t}; return %2"
    ))
}

/// Max pooling's step for one tap (inputs: the maximum so far `o`, the element `e`, and with
/// `arg`, the winning tap so far `a`, -1 before any): `e` wins where it is greater, or a NaN
/// where `o` is not (NaN wins, the first NaN stays), or where nothing has won yet. Outputs
/// the new maximum (and winning tap): `perform::pool`'s rule, written as a scalar program.
fn max_step(t: DType, tap: Option<usize>) -> Result<ScalarProgram> {
    let mut p = ProgramText { src: vec![] };
    let o = p.push("input 0".into(), t);
    let e = p.push("input 1".into(), t);
    let mut wins = e_wins(&mut p, o, e);
    let Some(k) = tap else {
        let max = p.push(format!("select %{wins}, %{e}, %{o}"), t);
        return p.finish(&[max]);
    };
    let a = p.push("input 2".into(), "i32");
    let none = p.push("const -1.0".into(), "i32");
    let first = p.push(format!("eq %{a}, %{none}"), "bool");
    wins = p.push(format!("or %{wins}, %{first}"), "bool");
    let max = p.push(format!("select %{wins}, %{e}, %{o}"), t);
    let here = p.push(format!("const {k}.0"), "i32");
    let winner = p.push(format!("select %{wins}, %{here}, %{a}"), "i32");
    p.finish(&[max, winner])
}

/// Whether element `e` beats the maximum so far `o` (registers of `p`): greater, or a NaN
/// where `o` is not. The rule of [`max_step`] and [`max_of_taps`], written once.
fn e_wins(p: &mut ProgramText, o: usize, e: usize) -> usize {
    let greater = p.push(format!("gt %{e}, %{o}"), "bool");
    let e_nan = p.push(format!("ne %{e}, %{e}"), "bool");
    let o_nan = p.push(format!("ne %{o}, %{o}"), "bool");
    let o_number = p.push(format!("not %{o_nan}"), "bool");
    let nan_wins = p.push(format!("and %{e_nan}, %{o_number}"), "bool");
    p.push(format!("or %{greater}, %{nan_wins}"), "bool")
}

/// The most taps one pooling step reads (a 4x4 window), each tap an input of its map kernel.
const MAX_FUSED_TAPS: usize = 16;

/// Whether every tap of the window lands in the input for every output (no padding reached,
/// no ragged edge), few enough to read in one step: pooling is then one map step whose inputs
/// are the taps' strided views, read once, rather than a step per tap that reads and writes
/// the output each time.
fn one_step_reads_every_tap(taps: &[Tap], pool: &Pool2d, out: [usize; 2]) -> bool {
    taps.len() == pool.window[0] * pool.window[1]
        && taps.len() <= MAX_FUSED_TAPS
        && taps.iter().all(|tap| tap.count() == out)
}

/// Registers of a scalar program written one statement at a time.
struct ProgramText {
    src: Vec<String>,
}

impl ProgramText {
    /// Appends `op : dtype` as the next register and returns its number.
    fn push(&mut self, op: String, dtype: impl std::fmt::Display) -> usize {
        self.src
            .push(format!("%{} = {op} : {dtype}", self.src.len()));
        self.src.len() - 1
    }

    fn finish(mut self, results: &[usize]) -> Result<ScalarProgram> {
        let results: Vec<String> = results.iter().map(|r| format!("%{r}")).collect();
        self.src.push(format!("return {}", results.join(", ")));
        program(&self.src.join("; "))
    }
}

/// Max pooling over `n` taps in one program (inputs `0..n`, the taps in `perform`'s order):
/// the first tap's element, which wins against any starting value, then [`max_step`]'s
/// comparisons for each next tap, in the same order, so the same bits.
fn max_of_taps(t: DType, n: usize) -> Result<ScalarProgram> {
    let mut p = ProgramText { src: vec![] };
    let mut o = p.push("input 0".into(), t);
    for k in 1..n {
        let e = p.push(format!("input {k}"), t);
        let wins = e_wins(&mut p, o, e);
        o = p.push(format!("select %{wins}, %{e}, %{o}"), t);
    }
    p.finish(&[o])
}

/// Average pooling over `n` taps in one program: `0 + e0 + e1 + ...` in tap order, as the
/// step per tap adds them into a zeroed sum, then divided by the window's `area`.
fn mean_of_taps(t: DType, n: usize, area: f64) -> Result<ScalarProgram> {
    let mut p = ProgramText { src: vec![] };
    let mut sum = p.push("const 0.0".into(), t);
    for k in 0..n {
        let e = p.push(format!("input {k}"), t);
        sum = p.push(format!("add %{sum}, %{e}"), t);
    }
    let area = p.push(format!("const {}", float_text(area)), t);
    let mean = p.push(format!("div %{sum}, %{area}"), t);
    p.finish(&[mean])
}

/// Max pooling's gradient for one tap: `dx + (a == tap ? g : 0)`.
fn max_grad_step(t: DType, tap: usize) -> Result<ScalarProgram> {
    program(&format!(
        "%0 = input 0 : {t}; %1 = input 1 : i32; %2 = input 2 : {t}; %3 = const {tap}.0 : i32; \
         %4 = eq %1, %3 : bool; %5 = const 0.0 : {t}; %6 = select %4, %2, %5 : {t}; \
         %7 = add %0, %6 : {t}; return %7"
    ))
}

impl Builder<'_> {
    /// A map step of `program` over `out`'s shape that reads `out` itself first (an
    /// accumulation in place: each element is read and written by the same lane).
    fn accumulate(&mut self, what: &str, program: ScalarProgram, outs: &[&View], reads: &[View]) {
        let mut inputs: Vec<View> = outs.iter().map(|v| (*v).clone()).collect();
        inputs.extend(reads.iter().cloned());
        self.steps.push(Step::Map {
            what: what.to_string(),
            program,
            shape: outs[0].shape.clone(),
            inputs,
            outputs: outs.iter().map(|v| (*v).clone()).collect(),
        });
    }

    /// A new buffer of `shape` holding `value` everywhere.
    fn filled(&mut self, what: &str, dtype: DType, shape: &[usize], value: f64) -> View {
        let one = self.constant(&Tensor::full(dtype, &[], value));
        let out = self.buffer(dtype, shape);
        self.steps.push(Step::Map {
            what: format!("{what}: fill"),
            program: copy_program(dtype, dtype),
            shape: shape.to_vec(),
            inputs: vec![one],
            outputs: vec![out.clone()],
        });
        out
    }

    /// `x` in the middle of a new zero buffer with `pad` more on each side of its last two
    /// axes; `x` itself when there is no padding.
    fn zero_padded(&mut self, what: &str, x: &View, pad: [usize; 2]) -> Result<View> {
        if pad == [0, 0] {
            return Ok(x.clone());
        }
        let ([h, w], _) = spatial(x);
        let r = x.shape.len();
        let mut shape = x.shape[..r - 2].to_vec();
        shape.extend([h + 2 * pad[0], w + 2 * pad[1]]);
        // The padded copy is scratch memory the object asks for at each call: a padding far
        // larger than the image (with a stride as large, the result stays small) would ask
        // for terabytes, so objects refuse it when they are made.
        let bytes = (shape.iter()).try_fold(x.dtype.size(), |b, &d| b.checked_mul(d));
        if bytes.is_none_or(|b| b > MAX_PADDED_BYTES) {
            return Err(Error::Unsupported(format!(
                "aot: {what}: the input padded by {pad:?} is {shape:?}, more than an object \
                 pads in scratch memory ({} GiB at most)",
                MAX_PADDED_BYTES >> 30
            )));
        }
        let padded = self.filled(what, x.dtype, &shape, 0.0);
        let inside = window_view(&padded, pad, [h, w], [1, 1]);
        self.steps.push(Step::Map {
            what: format!("{what}: pad"),
            program: copy_program(x.dtype, x.dtype),
            shape: x.shape.clone(),
            inputs: vec![x.clone()],
            outputs: vec![inside],
        });
        Ok(padded)
    }

    /// `v` as a dense row-major view of `shape` (copied first when it is not dense).
    fn dense_as(&mut self, what: &str, v: &View, shape: &[usize]) -> View {
        let d = if v.is_contiguous() {
            v.clone()
        } else {
            self.materialize(v, what)
        };
        d.with(
            shape.to_vec(),
            contiguous_strides(shape, d.dtype.size()),
            d.offset,
        )
    }

    /// The zero-padded images of `x` (`[N, C, H, W]`) unrolled for the taps of `kernel`:
    /// a strided view `[N, G, C / G, KH, KW, OH, OW]` of them, with its dims in `order`.
    fn unrolled_view(
        &mut self,
        what: &str,
        x: &View,
        conv: &Conv2d,
        kernel: [usize; 2],
        out: [usize; 2],
        order: [usize; 7],
    ) -> Result<View> {
        let xp = self.zero_padded(what, x, conv.padding)?;
        let (n, c, g) = (x.shape[0], x.shape[1], conv.groups);
        let cg = c / g;
        let (sn, sc, sh, sw) = (xp.strides[0], xp.strides[1], xp.strides[2], xp.strides[3]);
        let [d0, d1] = conv.dilation.map(|d| d as i64);
        let [s0, s1] = conv.stride.map(|s| s as i64);
        let shape = [n, g, cg, kernel[0], kernel[1], out[0], out[1]];
        // A dilation or stride may be as large as an address (one tap, one output row): its
        // stride is then never stepped, and is 0 rather than a product that overflows.
        let step = |extent: usize, by: i64, stride: i64| if extent > 1 { by * stride } else { 0 };
        let strides = [
            sn,
            cg as i64 * sc,
            sc,
            step(kernel[0], d0, sh),
            step(kernel[1], d1, sw),
            step(out[0], s0, sh),
            step(out[1], s1, sw),
        ];
        Ok(xp.with(
            order.iter().map(|&d| shape[d]).collect(),
            order.iter().map(|&d| strides[d]).collect(),
            xp.offset,
        ))
    }

    /// `conv2d` of `x` (`[N, C, H, W]`) with `w` (`[O, C / G, KH, KW]`): per image and group,
    /// `w_g[O / G, K] @ cols[K, OH * OW]`, which is `[N, O, OH, OW]` as it comes out.
    pub(super) fn conv2d(
        &mut self,
        what: &str,
        x: &View,
        w: &View,
        conv: &Conv2d,
        out_shape: &[usize],
    ) -> Result<View> {
        let g = conv.groups;
        let (o, kernel) = (w.shape[0], [w.shape[2], w.shape[3]]);
        let out = [out_shape[2], out_shape[3]];
        let k = w.shape[1] * kernel[0] * kernel[1];
        let unrolled = self.unrolled_view(what, x, conv, kernel, out, [0, 1, 2, 3, 4, 5, 6])?;
        let cols = self.materialize(&unrolled, what);
        let cols = self.dense_as(what, &cols, &[x.shape[0], g, k, out[0] * out[1]]);
        let filters = self.dense_as(what, w, &[g, o / g, k]);
        self.matmul(what, &filters, &cols, x.dtype, out_shape)
    }

    /// `conv2d`'s filter gradient from the image `x` and the output's gradient `gy`: per
    /// group, `gy_g[O / G, N * OH * OW] @ cols^T[N * OH * OW, K]`.
    pub(super) fn conv2d_grad_filter(
        &mut self,
        what: &str,
        x: &View,
        gy: &View,
        conv: &Conv2d,
        kernel: [usize; 2],
    ) -> Result<View> {
        let (n, g) = (x.shape[0], conv.groups);
        let (o, out) = (gy.shape[1], [gy.shape[2], gy.shape[3]]);
        let (og, p) = (o / g, out[0] * out[1]);
        let k = x.shape[1] / g * kernel[0] * kernel[1];
        // [G, N, OH, OW, C / G, KH, KW]: the rows of cols^T.
        let unrolled = self.unrolled_view(what, x, conv, kernel, out, [1, 0, 5, 6, 2, 3, 4])?;
        let cols_t = self.materialize(&unrolled, what);
        let cols_t = self.dense_as(what, &cols_t, &[g, n * p, k]);
        // gy as [G, O / G, N, OH * OW], made dense.
        let gy = self.dense_as(what, gy, &[n, g, og, p]);
        let es = gy.dtype.size() as i64;
        let by_group = gy.with(
            vec![g, og, n, p],
            vec![
                og as i64 * p as i64 * es,
                p as i64 * es,
                o as i64 * p as i64 * es,
                es,
            ],
            gy.offset,
        );
        let gmat = self.materialize(&by_group, what);
        let gmat = self.dense_as(what, &gmat, &[g, og, n * p]);
        let w_shape = [o, k / (kernel[0] * kernel[1]).max(1), kernel[0], kernel[1]];
        self.matmul(what, &gmat, &cols_t, x.dtype, &w_shape)
    }

    /// `conv2d`'s image gradient from the output's gradient `gy` and the filters `w`:
    /// `cols[K, OH * OW] = w_g^T @ gy_g` per image and group, each tap's rows then added into
    /// the image where the tap reads it (col2im), taps in order.
    pub(super) fn conv2d_grad_image(
        &mut self,
        what: &str,
        gy: &View,
        w: &View,
        conv: &Conv2d,
        image: [usize; 2],
    ) -> Result<View> {
        let (n, g) = (gy.shape[0], conv.groups);
        let (o, out) = (gy.shape[1], [gy.shape[2], gy.shape[3]]);
        let (cg, kernel) = (w.shape[1], [w.shape[2], w.shape[3]]);
        let (og, k, p) = (o / g, cg * kernel[0] * kernel[1], out[0] * out[1]);
        let filters = self.dense_as(what, w, &[g, og, k]);
        let es = filters.dtype.size() as i64;
        let filters_t = filters.with(
            vec![g, k, og],
            vec![og as i64 * k as i64 * es, es, k as i64 * es],
            filters.offset,
        );
        let gy = self.dense_as(what, gy, &[n, g, og, p]);
        let x_shape = [n, g * cg, image[0], image[1]];
        let cols = self.matmul(what, &filters_t, &gy, gy.dtype, &[n, g * k, p])?;
        // [N, C, KH * KW, OH, OW]
        let cols = self.dense_as(
            what,
            &cols,
            &[n, g * cg, kernel[0] * kernel[1], out[0], out[1]],
        );
        let dx = self.filled(what, gy.dtype, &x_shape, 0.0);
        let add = add(gy.dtype)?;
        for tap in taps(kernel, conv.dilation, conv.stride, conv.padding, image, out) {
            let target = tap.inputs_of(&dx, conv.stride);
            let mut rows = cols.clone();
            rows.offset += tap.index as i64 * rows.strides[2];
            rows.shape.remove(2);
            rows.strides.remove(2);
            let rows = tap.outputs_of(&rows);
            self.accumulate(what, add.clone(), &[&target], &[rows]);
        }
        Ok(dx)
    }

    /// Max or average pooling of the last two axes of `x`, tap by tap.
    pub(super) fn pool2d(
        &mut self,
        what: &str,
        x: &View,
        pool: &Pool2d,
        out_shape: &[usize],
    ) -> Result<View> {
        let (input, _) = spatial(x);
        let r = out_shape.len();
        let out = [out_shape[r - 2], out_shape[r - 1]];
        let t = x.dtype;
        let taps = taps(pool.window, [1, 1], pool.stride, pool.padding, input, out);
        if one_step_reads_every_tap(&taps, pool, out) {
            let reads: Vec<View> = taps
                .iter()
                .map(|tap| tap.inputs_of(x, pool.stride))
                .collect();
            let program = match pool.kind {
                PoolKind::Avg => mean_of_taps(t, taps.len(), pool.area())?,
                PoolKind::Max => max_of_taps(t, taps.len())?,
            };
            let y = self.buffer(t, out_shape);
            self.steps.push(Step::Map {
                what: format!("{what}: every tap at once"),
                program,
                shape: out_shape.to_vec(),
                inputs: reads,
                outputs: vec![y.clone()],
            });
            return Ok(y);
        }
        match pool.kind {
            PoolKind::Avg => {
                let sum = self.filled(what, t, out_shape, 0.0);
                let add = add(t)?;
                for tap in &taps {
                    let e = tap.inputs_of(x, pool.stride);
                    self.accumulate(what, add.clone(), &[&tap.outputs_of(&sum)], &[e]);
                }
                let area = pool.area();
                self.accumulate(what, divide_by(t, area)?, &[&sum], &[]);
                Ok(sum)
            }
            PoolKind::Max => {
                let (max, _) = self.max_taps(what, x, pool, &taps, out_shape, false)?;
                Ok(max)
            }
        }
    }

    /// The maximum of each window (and with `arg`, the tap that gave it, as i32).
    fn max_taps(
        &mut self,
        what: &str,
        x: &View,
        pool: &Pool2d,
        taps: &[Tap],
        out_shape: &[usize],
        arg: bool,
    ) -> Result<(View, Option<View>)> {
        let t = x.dtype;
        // Every window has an element that is not padding (`Pool2d::check`); the first one
        // wins against the starting value: the smallest value (NaN wins anyway), or, with
        // `arg`, "no tap yet".
        let lowest = if t.is_float() {
            f64::NEG_INFINITY
        } else if t == DType::I32 {
            i32::MIN as f64
        } else {
            i64::MIN as f64
        };
        let max = self.filled(what, t, out_shape, lowest);
        let winner = if arg {
            Some(self.filled(what, DType::I32, out_shape, -1.0))
        } else {
            None
        };
        for tap in taps {
            let e = tap.inputs_of(x, pool.stride);
            let m = tap.outputs_of(&max);
            match &winner {
                None => self.accumulate(what, max_step(t, None)?, &[&m], &[e]),
                Some(a) => {
                    let a = tap.outputs_of(a);
                    // Inputs in the program's order: maximum, element, winning tap.
                    self.steps.push(Step::Map {
                        what: what.to_string(),
                        program: max_step(t, Some(tap.index))?,
                        shape: m.shape.clone(),
                        inputs: vec![m.clone(), e, a.clone()],
                        outputs: vec![m, a],
                    });
                }
            }
        }
        Ok((max, winner))
    }

    /// The gradient of pooling with respect to its input `x`, from the output's gradient `gy`.
    /// Average: each tap adds `gy / area` where it reads. Max: the winning tap of each window
    /// found as the forward pass finds it, then each tap adds the gradient where it won, taps
    /// in reverse order, so that an element that wins several windows adds their gradients
    /// in the windows' row-major order, as `perform` does.
    pub(super) fn pool2d_grad(
        &mut self,
        what: &str,
        x: &View,
        gy: &View,
        pool: &Pool2d,
    ) -> Result<View> {
        let (input, _) = spatial(x);
        let (out, _) = spatial(gy);
        let t = x.dtype;
        let taps = taps(pool.window, [1, 1], pool.stride, pool.padding, input, out);
        let dx = self.filled(what, t, &x.shape, 0.0);
        match pool.kind {
            PoolKind::Avg => {
                let area = pool.area();
                let share = self.buffer(t, &gy.shape);
                self.steps.push(Step::Map {
                    what: what.to_string(),
                    program: divide_by(t, area)?,
                    shape: gy.shape.clone(),
                    inputs: vec![gy.clone()],
                    outputs: vec![share.clone()],
                });
                let add = add(t)?;
                for tap in &taps {
                    let target = tap.inputs_of(&dx, pool.stride);
                    self.accumulate(what, add.clone(), &[&target], &[tap.outputs_of(&share)]);
                }
            }
            PoolKind::Max => {
                let (_, winner) = self.max_taps(what, x, pool, &taps, &gy.shape, true)?;
                let winner = winner.expect("asked for the winning taps");
                for tap in taps.iter().rev() {
                    let target = tap.inputs_of(&dx, pool.stride);
                    let reads = [tap.outputs_of(&winner), tap.outputs_of(gy)];
                    self.accumulate(what, max_grad_step(t, tap.index)?, &[&target], &reads);
                }
            }
        }
        Ok(dx)
    }
}
