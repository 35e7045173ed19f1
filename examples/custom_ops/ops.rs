//! Custom ops written against kiln's public op model, shared by the `custom_ops` example and
//! the tests: libnd4j's `tear`, a `permute` that may run in place, an `add` that keeps a hidden
//! buffer twice the needed size, a `scale` with a symbolic gradient, and a `repeat` whose
//! output length only its shape function knows.

use kiln::custom::{Arity, CustomOp, InputGrad, OpParams, PerformContext, WriteRequest};
use kiln::{Tensor, TensorType, Var};
use ndarray::{ArrayD, Axis, IxDyn};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn f32_input<'a>(t: &'a Tensor, op: &str) -> Result<&'a ArrayD<f32>, String> {
    t.as_f32()
        .ok_or_else(|| format!("{op} takes f32, got {}", t.dtype()))
}

/// libnd4j's `tear`: splits a tensor into the sub-tensors spanning `dims`, one output per
/// position along the other dims (so the number of outputs depends on the input's shape).
#[derive(Debug)]
pub struct Tear {
    pub dims: Vec<usize>,
}

impl CustomOp for Tear {
    fn name(&self) -> &str {
        "tear"
    }
    fn params(&self) -> OpParams {
        OpParams::new().int(
            "dims",
            self.dims.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        )
    }
    fn num_inputs(&self) -> Arity {
        Arity::Exactly(1)
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        let t = inputs[0];
        let shape = t
            .known_shape()
            .ok_or("tear needs a fully known input shape")?;
        if self.dims.is_empty() || self.dims.iter().any(|&d| d >= shape.len()) {
            return Err(format!(
                "dims {:?} do not fit rank {}",
                self.dims,
                shape.len()
            ));
        }
        let piece: Vec<usize> = self.dims.iter().map(|&d| shape[d]).collect();
        let count: usize = (0..shape.len())
            .filter(|d| !self.dims.contains(d))
            .map(|d| shape[d])
            .product();
        Ok(vec![TensorType::fixed(t.dtype, &piece); count])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        let x = f32_input(inputs[0], "tear")?;
        let rest: Vec<usize> = (0..x.ndim()).filter(|d| !self.dims.contains(d)).collect();
        let perm: Vec<usize> = rest.iter().chain(&self.dims).copied().collect();
        let piece: Vec<usize> = self.dims.iter().map(|&d| x.shape()[d]).collect();
        let flat = x
            .view()
            .permuted_axes(IxDyn(&perm))
            .as_standard_layout()
            .into_owned();
        let rows = flat
            .into_shape_with_order(IxDyn(&[outputs.len(), piece.iter().product()]))
            .map_err(|e| e.to_string())?;
        for (k, out) in outputs.iter_mut().enumerate() {
            let row = rows.index_axis(Axis(0), k).to_owned();
            *out = Some(Tensor::F32(
                row.into_shape_with_order(IxDyn(&piece))
                    .map_err(|e| e.to_string())?,
            ));
        }
        Ok(())
    }
}

/// Permutes axes. It may run in place: when its input is not read afterwards, the runtime
/// hands the input's buffer over, and the permutation only reorders strides (no copy).
#[derive(Debug)]
pub struct Permute {
    pub perm: Vec<usize>,
    /// How many calls ran in place (for the tests and the example).
    pub in_place_runs: Arc<AtomicUsize>,
}

impl CustomOp for Permute {
    fn name(&self) -> &str {
        "permute"
    }
    fn params(&self) -> OpParams {
        OpParams::new().int(
            "perm",
            self.perm.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        )
    }
    fn num_inputs(&self) -> Arity {
        Arity::Exactly(1)
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        let t = inputs[0];
        let mut sorted = self.perm.clone();
        sorted.sort_unstable();
        if sorted != (0..t.rank()).collect::<Vec<_>>() {
            return Err(format!(
                "{:?} is not a permutation of {} axes",
                self.perm,
                t.rank()
            ));
        }
        Ok(vec![TensorType::new(
            t.dtype,
            self.perm.iter().map(|&p| t.shape[p]).collect::<Vec<_>>(),
        )])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        let x = if ctx.requests[0] == WriteRequest::WriteInplace {
            self.in_place_runs.fetch_add(1, Ordering::Relaxed);
            outputs[0].take().ok_or("in-place storage is empty")?
        } else {
            inputs[0].clone()
        };
        let Tensor::F32(a) = x else {
            return Err("permute takes f32".into());
        };
        outputs[0] = Some(Tensor::F32(a.permuted_axes(IxDyn(&self.perm))));
        Ok(())
    }
    fn destroy_map(&self) -> Vec<(usize, usize)> {
        vec![(0, 0)]
    }
    fn inplace(&self) -> bool {
        true
    }
}

/// `a + b` that keeps a hidden scratch buffer twice the size it needs, growing it only when an
/// input outgrows it (the seed example of hidden outputs).
#[derive(Debug, Default)]
pub struct AddWithBuffer {
    /// How many times the buffer was (re)allocated.
    pub allocations: Arc<AtomicUsize>,
}

impl CustomOp for AddWithBuffer {
    fn name(&self) -> &str {
        "add_with_buffer"
    }
    fn num_inputs(&self) -> Arity {
        Arity::Exactly(2)
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        let (a, b) = (inputs[0], inputs[1]);
        if a != b || a.rank() != 1 {
            return Err(format!("takes two vectors of one type, got {a} and {b}"));
        }
        // Output 0 is the sum; output 1 is the hidden buffer, of a size known only at run time.
        Ok(vec![a.clone(), TensorType::new(a.dtype, vec![None])])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        let (a, b) = (
            f32_input(inputs[0], "add_with_buffer")?,
            f32_input(inputs[1], "add_with_buffer")?,
        );
        let n = a.len();
        let fits = matches!(&outputs[1], Some(Tensor::F32(buf)) if buf.len() >= n);
        if !fits {
            self.allocations.fetch_add(1, Ordering::Relaxed);
            outputs[1] = Some(Tensor::F32(ArrayD::zeros(IxDyn(&[2 * n]))));
        }
        let Some(Tensor::F32(buf)) = &mut outputs[1] else {
            return Err("buffer lost".into());
        };
        for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
            buf[[i]] = x + y;
        }
        let sum = buf.slice(ndarray::s![..n]).to_owned().into_dyn();
        outputs[0] = Some(Tensor::F32(sum));
        Ok(())
    }
    fn num_hidden_outputs(&self) -> usize {
        1
    }
}

/// `factor * x`, with its gradient written symbolically in terms of kiln ops; it can add its
/// result into a running sum (`supports_add_to`).
#[derive(Debug, Default)]
pub struct Scale {
    pub factor: f64,
    /// How many calls added into a running sum (`WriteRequest::AddTo`).
    pub accumulations: Arc<AtomicUsize>,
}

impl Scale {
    pub fn new(factor: f64) -> Scale {
        Scale {
            factor,
            ..Scale::default()
        }
    }
}

impl CustomOp for Scale {
    fn name(&self) -> &str {
        "scale"
    }
    fn params(&self) -> OpParams {
        OpParams::new().float("factor", vec![self.factor])
    }
    fn num_inputs(&self) -> Arity {
        Arity::Exactly(1)
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        if !inputs[0].dtype.is_float() {
            return Err(format!("takes a float tensor, got {}", inputs[0]));
        }
        Ok(vec![inputs[0].clone()])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        // Asked to accumulate (MXNet's kAddTo): add into the running sum the runtime handed
        // over, with no array of its own.
        if ctx.requests[0] == WriteRequest::AddTo {
            self.accumulations.fetch_add(1, Ordering::Relaxed);
            return match (&mut outputs[0], inputs[0]) {
                (Some(Tensor::F32(acc)), Tensor::F32(a)) => {
                    acc.zip_mut_with(a, |s, &v| *s += v * self.factor as f32);
                    Ok(())
                }
                (Some(Tensor::F64(acc)), Tensor::F64(a)) => {
                    acc.zip_mut_with(a, |s, &v| *s += v * self.factor);
                    Ok(())
                }
                _ => Err("scale: nothing to accumulate into".into()),
            };
        }
        outputs[0] = Some(match inputs[0] {
            Tensor::F32(a) => Tensor::F32(a.mapv(|v| v * self.factor as f32)),
            Tensor::F64(a) => Tensor::F64(a.mapv(|v| v * self.factor)),
            t => return Err(format!("takes floats, got {}", t.dtype())),
        });
        Ok(())
    }
    fn supports_add_to(&self) -> bool {
        true
    }
    fn grad(
        &self,
        _inputs: &[Var],
        _outputs: &[Var],
        output_grads: &[Option<Var>],
    ) -> Result<Vec<InputGrad>, kiln::Error> {
        Ok(vec![match &output_grads[0] {
            Some(g) => InputGrad::Grad(g * self.factor),
            None => InputGrad::Disconnected,
        }])
    }
}

/// `x` repeated `times` times along its only axis. `make_node` leaves the length open (`?`);
/// the shape function (`infer_shape`) says it, so where the input's length is known the
/// output's type is known too, and where it is not, the runtime sizes the output from it
/// before `perform` runs.
#[derive(Debug)]
pub struct Repeat {
    pub times: usize,
}

impl CustomOp for Repeat {
    fn name(&self) -> &str {
        "repeat"
    }
    fn params(&self) -> OpParams {
        OpParams::new().int("times", vec![self.times as i64])
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        match inputs {
            [t] if t.rank() == 1 => Ok(vec![TensorType::new(t.dtype, vec![None])]),
            _ => Err("takes one vector".into()),
        }
    }
    fn infer_shape(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        let n = inputs[0]
            .known_shape()
            .ok_or("the input's length is not known")?[0];
        Ok(vec![vec![n * self.times]])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        let x = f32_input(inputs[0], "repeat")?;
        // The runtime sized the output from `infer_shape`: fill it where it is.
        let Some(Tensor::F32(out)) = &mut outputs[0] else {
            return Err("repeat: the output was not sized".into());
        };
        for (i, o) in out.iter_mut().enumerate() {
            *o = x[[i % x.len()]];
        }
        Ok(())
    }
}
