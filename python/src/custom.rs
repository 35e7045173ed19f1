//! Ops written in Python (`kiln.Op`, `kiln.as_op`): a kiln custom op whose `perform` calls the
//! Python function back with numpy arrays, the GIL held for that call alone.

use crate::convert::{tensor, to_numpy};
use crate::errors::{to_py, type_error};
use crate::loc::at_caller;
use crate::var::Var;
use kiln::custom::{CustomOp, InputGrad, OpParams, PerformContext};
use kiln::{Tensor, TensorType};
use pyo3::prelude::*;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

/// Tells one Python op from another of the same name: ops compare by their parameters, and
/// two different Python functions must never be merged as one.
static NEXT_ID: AtomicI64 = AtomicI64::new(0);

struct PyOp {
    name: String,
    id: i64,
    inputs: usize,
    outputs: Vec<TensorType>,
    perform: Py<PyAny>,
    grad: Option<Py<PyAny>>,
}

impl fmt::Debug for PyOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PyOp({:?} #{})", self.name, self.id)
    }
}

impl PyOp {
    /// Calls `perform` with the inputs as numpy arrays; its results, converted to the
    /// outputs' dtypes and checked against their types.
    fn run(&self, py: Python<'_>, inputs: &[&Tensor]) -> PyResult<Vec<Tensor>> {
        let args: Vec<Py<PyAny>> = (inputs.iter())
            .map(|t| to_numpy(py, (*t).clone()))
            .collect::<PyResult<_>>()?;
        let out = self.perform.bind(py).call1((args,))?;
        let outs: Vec<Bound<'_, PyAny>> = out.extract()?;
        if outs.len() != self.outputs.len() {
            return Err(type_error(format!(
                "{}: perform returned {} arrays for {} outputs",
                self.name,
                outs.len(),
                self.outputs.len()
            )));
        }
        (outs.iter().zip(&self.outputs))
            .map(|(o, ty)| {
                let t = tensor(py, o, Some(ty.dtype))?;
                let fits = t.shape().len() == ty.shape.len()
                    && (t.shape().iter().zip(&ty.shape)).all(|(&n, d)| d.is_none_or(|d| d == n));
                if !fits {
                    return Err(type_error(format!(
                        "{}: perform returned an array of shape {:?} for an output of type {ty}",
                        self.name,
                        t.shape()
                    )));
                }
                Ok(t)
            })
            .collect()
    }
}

impl CustomOp for PyOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn params(&self) -> OpParams {
        OpParams::new().int("python_op", vec![self.id])
    }

    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        if inputs.len() != self.inputs {
            return Err(format!(
                "{} takes {} inputs, {} were given",
                self.name,
                self.inputs,
                inputs.len()
            ));
        }
        Ok(self.outputs.clone())
    }

    fn infer_shape(&self, _: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        // The outputs' shapes are what `perform` returns.
        (self.outputs.iter())
            .map(|t| {
                t.known_shape()
                    .ok_or_else(|| "known once perform runs".to_string())
            })
            .collect()
    }

    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        let results = Python::attach(|py| self.run(py, inputs).map_err(|e| e.to_string()))?;
        for (slot, t) in outputs.iter_mut().zip(results) {
            *slot = Some(t);
        }
        Ok(())
    }

    fn grad(
        &self,
        inputs: &[kiln::Var],
        outputs: &[kiln::Var],
        output_grads: &[Option<kiln::Var>],
    ) -> Result<Vec<InputGrad>, kiln::Error> {
        let Some(grad) = &self.grad else {
            return Ok(inputs
                .iter()
                .map(|_| InputGrad::NotDifferentiable)
                .collect());
        };
        Python::attach(|py| {
            let wrap = |vs: &[kiln::Var]| -> Vec<Var> {
                vs.iter().map(|v| Var { v: v.clone() }).collect()
            };
            let gs: Vec<Option<Var>> = (output_grads.iter())
                .map(|g| g.clone().map(|v| Var { v }))
                .collect();
            let got: Vec<Option<Var>> = grad
                .bind(py)
                .call1((wrap(inputs), wrap(outputs), gs))
                .and_then(|r| r.extract())
                .map_err(|e| kiln::Error::Grad(format!("{}: grad raised {e}", self.name)))?;
            if got.len() != inputs.len() {
                return Err(kiln::Error::Grad(format!(
                    "{}: grad returned {} gradients for {} inputs",
                    self.name,
                    got.len(),
                    inputs.len()
                )));
            }
            Ok((got.into_iter())
                .map(|g| g.map_or(InputGrad::Disconnected, |g| InputGrad::Grad(g.v)))
                .collect())
        })
    }
}

/// Applies a Python op: `perform(arrays) -> arrays` computes `outputs` (their dtypes and
/// shapes, `None` for a dim `perform` decides) from `inputs`; `grad(inputs, outputs,
/// output_grads) -> gradients` (variables, None where disconnected) where given.
#[pyfunction]
#[pyo3(signature = (name, inputs, outputs, perform, grad=None))]
fn python_op(
    py: Python<'_>,
    name: &str,
    inputs: Vec<Var>,
    outputs: Vec<(Bound<'_, PyAny>, Vec<Option<usize>>)>,
    perform: Py<PyAny>,
    grad: Option<Py<PyAny>>,
) -> PyResult<Vec<Var>> {
    let outputs = (outputs.iter())
        .map(|(d, shape)| {
            Ok(TensorType::new(
                crate::convert::dtype(py, d)?,
                shape.clone(),
            ))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let op = PyOp {
        name: name.to_string(),
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        inputs: inputs.len(),
        outputs,
        perform,
        grad,
    };
    let refs: Vec<&kiln::Var> = inputs.iter().map(|v| &v.v).collect();
    let Some(first) = refs.first() else {
        return Err(type_error(format!(
            "{name}: a Python op needs at least one input"
        )));
    };
    let g = first.graph().clone();
    let outs = at_caller(py, || g.apply_custom(op, &refs));
    outs.into_iter()
        .map(|v| {
            v.check()
                .map(|_| Var { v: v.clone() })
                .map_err(|e| to_py(e.clone()))
        })
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(python_op, m)?)?;
    Ok(())
}
