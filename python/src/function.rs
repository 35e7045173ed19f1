//! `_kiln.Function`, a compiled function called with numpy arrays, and `_kiln.function`, which
//! compiles one.

use crate::convert::{borrow, to_numpy, Borrowed};
use crate::errors::{to_py, type_error};
use crate::loc::at_caller;
use crate::var::Var;
use kiln::{Backend, CompileOptions, DType, TensorRef};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;

/// A compiled function: call it with numpy arrays (or numbers, or lists), one per input.
/// Arrays of the input's dtype are read in place; the results are numpy arrays (one, or a
/// list where the function was asked for a list of outputs).
#[pyclass(module = "kiln", name = "Function", frozen)]
pub struct Function {
    f: Arc<kiln::Function>,
    /// The dtype each explicit input is borrowed as.
    inputs: Vec<DType>,
    /// Whether a call returns its one result as it is (asked for as a variable, not a list).
    single: bool,
}

impl Function {
    fn new(f: kiln::Function, single: bool) -> Function {
        let func = f.func();
        let inputs = (func.params.iter().take(f.n_inputs()))
            .map(|&p| func.ty(p).dtype)
            .collect();
        Function {
            f: Arc::new(f),
            inputs,
            single,
        }
    }
}

#[pymethods]
impl Function {
    /// Runs the function on `args`, one per input: numpy arrays of the input's dtype are read
    /// in place, whatever their strides; the GIL is released for the whole call; the results
    /// are numpy arrays that own kiln's buffers.
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        if args.len() != self.inputs.len() {
            return Err(type_error(format!(
                "the function takes {} inputs, {} were given",
                self.inputs.len(),
                args.len()
            )));
        }
        let held: Vec<Borrowed<'_>> = (args.iter().zip(&self.inputs).enumerate())
            .map(|(k, (a, &d))| borrow(py, &a, d, &|| format!("input {k}")))
            .collect::<PyResult<_>>()?;
        let views: Vec<TensorRef<'_>> = held.iter().map(Borrowed::view).collect();
        let f = &self.f;
        let mut outs = py.detach(|| f.call(&views)).map_err(to_py)?;
        match (self.single, outs.len()) {
            (true, 1) => to_numpy(py, outs.remove(0)),
            _ => {
                let arrays: Vec<Py<PyAny>> = (outs.into_iter())
                    .map(|t| to_numpy(py, t))
                    .collect::<PyResult<_>>()?;
                Ok(PyList::new(py, arrays)?.into_any().unbind())
            }
        }
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
    fn save(&self, path: PathBuf) -> PyResult<()> {
        self.f.save(path).map_err(to_py)
    }

    /// Writes the shared variables' values to an `.npz` at `path`.
    fn save_state(&self, path: PathBuf) -> PyResult<()> {
        self.f.save_state(path).map_err(to_py)
    }

    /// Sets the shared variables from an `.npz` written by `save_state`.
    fn load_state(&self, path: PathBuf) -> PyResult<()> {
        self.f.load_state(path).map_err(to_py)
    }

    /// Writes the profiled calls as a Chrome trace (Perfetto opens it).
    fn write_trace(&self, path: PathBuf) -> PyResult<()> {
        self.f.write_trace(path).map_err(to_py)
    }

    /// The function's state as its `.npz` holds it (copies): `shared/NAME` per shared
    /// variable, `calls` (how many calls have run), and ops' state where there is some.
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let state = self.f.try_state().map_err(to_py)?;
        let d = pyo3::types::PyDict::new(py);
        for (name, t) in state.entries() {
            d.set_item(name, to_numpy(py, t)?)?;
        }
        Ok(d.into_any().unbind())
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
#[pyo3(signature = (inputs, outputs, single, updates=Vec::new(), backend=None, optimize=true, profile=false, name=None))]
#[allow(clippy::too_many_arguments)]
fn function(
    py: Python<'_>,
    inputs: Vec<Var>,
    outputs: Vec<Var>,
    single: bool,
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
    Ok(Function::new(f, single))
}

/// Compiles `outputs` of `inputs` ahead of time: writes the object file `object` and, where
/// given, its C header; returns the entry point's C name.
#[pyfunction]
#[pyo3(signature = (inputs, outputs, object, header=None, symbol=None, target=None, runtime=false))]
#[allow(clippy::too_many_arguments)]
fn aot(
    py: Python<'_>,
    inputs: Vec<Var>,
    outputs: Vec<Var>,
    object: PathBuf,
    header: Option<PathBuf>,
    symbol: Option<String>,
    target: Option<String>,
    runtime: bool,
) -> PyResult<String> {
    let options = kiln::aot::AotOptions {
        symbol,
        target,
        runtime,
        ..Default::default()
    };
    let ins: Vec<&kiln::Var> = inputs.iter().map(|v| &v.v).collect();
    let outs: Vec<&kiln::Var> = outputs.iter().map(|v| &v.v).collect();
    let builder = at_caller(py, || kiln::function(&ins, &outs));
    let artifact = py.detach(|| builder.aot(&options)).map_err(to_py)?;
    (artifact.write(&object, header.as_deref())).map_err(to_py)?;
    Ok(artifact.symbol)
}

/// Loads a function written by `Function.save`.
#[pyfunction]
#[pyo3(signature = (path, backend=None))]
fn load_function(py: Python<'_>, path: PathBuf, backend: Option<&str>) -> PyResult<Function> {
    let options = CompileOptions {
        backend: self::backend(backend)?,
        ..CompileOptions::default()
    };
    let f = py
        .detach(|| kiln::Function::load(&path, &options))
        .map_err(to_py)?;
    let single = f.n_outputs() == 1;
    Ok(Function::new(f, single))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(function, m)?)?;
    m.add_function(wrap_pyfunction!(load_function, m)?)?;
    m.add_function(wrap_pyfunction!(aot, m)?)?;
    Ok(())
}
