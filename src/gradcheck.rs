//! Theano's `verify_grad`: the symbolic gradient against central finite differences in f64.
//! It compiles functions, so it sits above the compiler driver, not in `grad`.

use crate::compile::{function, Backend};
use crate::error::{Error, Result};
use crate::graph::{Graph, Var};
use crate::tensor::Tensor;
use ndarray::ArrayD;

/// Options of [`verify_grad`].
#[derive(Copy, Clone, Debug)]
pub struct VerifyOptions {
    /// Finite-difference step.
    pub eps: f64,
    /// Allowed error: `|sym - num| <= abs_tol + rel_tol * |num|`.
    pub abs_tol: f64,
    /// Allowed error relative to the finite difference's size (see `abs_tol`).
    pub rel_tol: f64,
    /// The backend the cost and its gradients are compiled for.
    pub backend: Backend,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            eps: 1e-6,
            abs_tol: 1e-6,
            rel_tol: 1e-5,
            backend: Backend::Interp,
        }
    }
}

/// Checks the gradient of the cost built by `build` (from one f64 input per point, reduced to
/// a scalar by summing if it is not one) at `points`.
///
/// # Errors
///
/// [`Error::Grad`] naming the first element whose symbolic and finite-difference gradients
/// differ by more than the tolerance (or either is NaN), and any error of building the
/// gradient, compiling or calling the function.
pub fn verify_grad(
    build: impl Fn(&Graph, &[Var]) -> Var,
    points: &[ArrayD<f64>],
    opts: VerifyOptions,
) -> Result<()> {
    let g = Graph::new();
    let inputs: Vec<Var> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let shape: Vec<_> = p.shape().iter().map(|&d| Some(d)).collect();
            g.input_of(
                &format!("x{i}"),
                crate::ir::TensorType::new(crate::ir::DType::F64, shape),
            )
        })
        .collect();
    let out = build(&g, &inputs);
    let cost = if out.rank() == 0 {
        out
    } else {
        out.sum(None, false)
    };
    let refs: Vec<&Var> = inputs.iter().collect();
    let grads = super::grad(&cost, &refs)?;
    let mut outs = vec![&cost];
    outs.extend(grads.iter());
    let f = function(&refs, &outs).backend(opts.backend).compile()?;
    let eval = |pts: &[ArrayD<f64>]| -> Result<Vec<Tensor>> {
        f.call(&pts.iter().map(|p| p.view()).collect::<Vec<_>>())
    };
    let sym = eval(points)?;
    // Row-major copies, so that element `j` of a point's memory is element `j` of its
    // gradient (`to_f64_vec` is in logical order), whatever layout the caller's points have.
    let mut pts: Vec<ArrayD<f64>> = points
        .iter()
        .map(|p| p.as_standard_layout().into_owned())
        .collect();
    for i in 0..pts.len() {
        let sg = sym[i + 1].to_f64_vec();
        for (j, &s) in sg.iter().enumerate() {
            let orig = pts[i].as_slice().expect("a row-major copy")[j];
            let set = |pts: &mut Vec<ArrayD<f64>>, v: f64| {
                pts[i].as_slice_mut().expect("a row-major copy")[j] = v;
            };
            set(&mut pts, orig + opts.eps);
            let up = eval(&pts)?[0].to_f64_vec()[0];
            set(&mut pts, orig - opts.eps);
            let down = eval(&pts)?[0].to_f64_vec()[0];
            set(&mut pts, orig);
            let num = (up - down) / (2.0 * opts.eps);
            // Written so that a NaN on either side fails the check.
            let close = (s - num).abs() <= opts.abs_tol + opts.rel_tol * num.abs();
            if !close {
                return Err(Error::Grad(format!(
                    "gradient of input {i} element {j}: symbolic {s}, finite differences {num} (at {orig})"
                )));
            }
        }
    }
    Ok(())
}
