//! `_kiln.Function`, a compiled function called with numpy arrays, and `_kiln.function`, which
//! compiles one.

use crate::convert::{borrow, to_numpy, Borrowed};
use crate::errors::{to_py, type_error};
use crate::loc::at_caller;
use crate::var::Var;
use kiln::{Backend, CompileOptions, DType, TensorRef};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Arc;

/// A compiled function: call it with numpy arrays (or anything `numpy.asarray` takes).
#[pyclass(module = "kiln._kiln", frozen)]
pub struct Function {
    f: Arc<kiln::Function>,
    /// The dtype each explicit input is borrowed as.
    inputs: Vec<DType>,
}

impl Function {
    fn new(f: kiln::Function) -> Function {
        let func = f.func();
        let inputs = (func.params.iter().take(f.n_inputs()))
            .map(|&p| func.ty(p).dtype)
            .collect();
        Function {
            f: Arc::new(f),
            inputs,
        }
    }
}

#[pymethods]
impl Function {
    /// Runs the function on `args`, one per input: numpy arrays of the input's dtype are read
    /// in place, whatever their strides; the GIL is released for the whole call; the results
    /// are numpy arrays that own kiln's buffers.
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
        if args.len() != self.inputs.len() {
            return Err(type_error(format!(
                "the function takes {} inputs, {} were given",
                self.inputs.len(),
                args.len()
            )));
        }
        let held: Vec<Borrowed<'_>> = (args.iter().zip(&self.inputs).enumerate())
            .map(|(k, (a, &d))| borrow(py, &a, d, &format!("input {k}")))
            .collect::<PyResult<_>>()?;
        let views: Vec<TensorRef<'_>> = held.iter().map(Borrowed::view).collect();
        let f = &self.f;
        let outs = py.detach(|| f.call(&views)).map_err(to_py)?;
        outs.into_iter().map(|t| to_numpy(py, t)).collect()
    }

    /// The optimized program in kiln's text form (`.kir`).
    fn func_text(&self) -> String {
        kiln::ir::text::print_func(self.f.func())
    }

    /// Where the calls spent their time (compile with `profile=True`), or None.
    fn profile(&self) -> Option<String> {
        self.f.profile().map(|p| p.to_string())
    }

    /// Writes the function (program and state) to `path` (`kiln.load_function` reads it).
    fn save(&self, path: &str) -> PyResult<()> {
        self.f.save(path).map_err(to_py)
    }

    /// Writes the shared variables' values to an `.npz` at `path`.
    fn save_state(&self, path: &str) -> PyResult<()> {
        self.f.save_state(path).map_err(to_py)
    }

    /// Sets the shared variables from an `.npz` written by `save_state`.
    fn load_state(&self, path: &str) -> PyResult<()> {
        self.f.load_state(path).map_err(to_py)
    }

    /// Writes the profiled calls as a Chrome trace (Perfetto opens it).
    fn write_trace(&self, path: &str) -> PyResult<()> {
        self.f.write_trace(path).map_err(to_py)
    }

    /// How many inputs a call takes.
    #[getter]
    fn n_inputs(&self) -> usize {
        self.f.n_inputs()
    }

    /// How many results a call returns.
    #[getter]
    fn n_outputs(&self) -> usize {
        self.f.n_outputs()
    }
}

fn backend(name: Option<&str>) -> PyResult<Option<Backend>> {
    name.map(|n| n.parse::<Backend>().map_err(to_py))
        .transpose()
}

/// Compiles `outputs` as a function of `inputs`, with `updates` of shared variables applied
/// after each call.
#[pyfunction]
#[pyo3(signature = (inputs, outputs, updates=Vec::new(), backend=None, optimize=true, profile=false, name=None))]
#[allow(clippy::too_many_arguments)]
fn function(
    py: Python<'_>,
    inputs: Vec<Var>,
    outputs: Vec<Var>,
    updates: Vec<(Var, Var)>,
    backend: Option<&str>,
    optimize: bool,
    profile: bool,
    name: Option<&str>,
) -> PyResult<Function> {
    let defaults = CompileOptions::default();
    let options = CompileOptions {
        name: name.unwrap_or("f").to_string(),
        backend: self::backend(backend)?,
        optimize,
        profile: profile || defaults.profile,
        ..defaults
    };
    let ins: Vec<&kiln::Var> = inputs.iter().map(|v| &v.v).collect();
    let outs: Vec<&kiln::Var> = outputs.iter().map(|v| &v.v).collect();
    let builder = at_caller(py, || {
        let b = kiln::function(&ins, &outs);
        (updates.iter())
            .fold(b, |b, (s, v)| b.update(&s.v, &v.v))
            .options(options)
    });
    let f = py.detach(|| builder.compile()).map_err(to_py)?;
    Ok(Function::new(f))
}

/// Loads a function written by `Function.save`.
#[pyfunction]
#[pyo3(signature = (path, backend=None))]
fn load_function(py: Python<'_>, path: &str, backend: Option<&str>) -> PyResult<Function> {
    let options = CompileOptions {
        backend: self::backend(backend)?,
        ..CompileOptions::default()
    };
    let f = py
        .detach(|| kiln::Function::load(path, &options))
        .map_err(to_py)?;
    Ok(Function::new(f))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(function, m)?)?;
    m.add_function(wrap_pyfunction!(load_function, m)?)?;
    Ok(())
}
