//! `_kiln.Var`, a handle on one variable of the process's graph, and the leaves: inputs,
//! constants and shared variables.

use crate::convert;
use crate::errors::to_py;
use crate::loc::at_caller;
use kiln::Graph;
use pyo3::prelude::*;
use std::sync::LazyLock;

/// The graph every Python variable belongs to. Theano's users never name a graph, and a
/// variable of one graph cannot meet another's; one graph for the process keeps that true.
pub static GRAPH: LazyLock<Graph> = LazyLock::new(Graph::new);

/// A variable of the graph (the Python `kiln.Variable` holds one).
#[pyclass(module = "kiln._kiln", frozen, from_py_object)]
#[derive(Clone)]
pub struct Var {
    pub v: kiln::Var,
}

impl Var {
    /// `v`, or the error that poisoned it, raised at once as Theano raises at build time.
    pub fn checked(v: kiln::Var) -> PyResult<Var> {
        v.check().map_err(|e| to_py(e.clone()))?;
        Ok(Var { v })
    }
}

#[pymethods]
impl Var {
    /// The name given to the variable, if any.
    #[getter]
    fn name(&self) -> Option<String> {
        self.v.name()
    }

    /// numpy's name of the dtype (`"float32"`).
    #[getter]
    fn dtype(&self) -> &'static str {
        convert::numpy_name(self.v.dtype())
    }

    /// The static shape: an int per known dim, `None` per dim known only at call time.
    #[getter]
    fn shape(&self) -> Vec<Option<usize>> {
        self.v.ty().shape.clone()
    }

    /// The type as kiln prints it (`f32[3, ?]`).
    #[getter]
    fn type_text(&self) -> String {
        self.v.ty().to_string()
    }

    /// Whether this is a shared variable (it holds a value).
    #[getter]
    fn is_shared(&self) -> bool {
        matches!(self.v.kind(), kiln::graph::VarKind::Shared(_))
    }

    /// A shared variable's value (a copy).
    fn get_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.v.try_value().map_err(to_py)? {
            Some(t) => convert::to_numpy(py, t),
            None => Err(crate::errors::type_error(format!(
                "{} holds no value: only shared variables and constants do",
                self.v.label()
            ))),
        }
    }

    /// Sets a shared variable's value (converted to its dtype; its shape must match).
    fn set_value(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = convert::tensor(py, value, Some(self.v.dtype()))?;
        self.v.set_value(t).map_err(to_py)
    }

    /// A copy of this handle with `name`.
    fn named(&self, name: &str) -> Var {
        Var {
            v: self.v.clone().named(name),
        }
    }
}

/// A function input of `dtype` and `shape` (`None` for a dim known only at call time).
#[pyfunction]
fn input(
    py: Python<'_>,
    name: &str,
    dtype: &Bound<'_, PyAny>,
    shape: Vec<Option<i64>>,
) -> PyResult<Var> {
    let d = convert::dtype(py, dtype)?;
    Var::checked(at_caller(py, || GRAPH.input(name, d, shape)))
}

/// A constant holding a copy of `value`, in `dtype` where given.
#[pyfunction]
#[pyo3(signature = (value, dtype=None))]
fn constant(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Var> {
    let d = dtype.map(|d| convert::dtype(py, d)).transpose()?;
    let t = convert::tensor(py, value, d)?;
    Var::checked(at_caller(py, || GRAPH.constant(t)))
}

/// A shared variable holding a copy of `value`: compiled functions read it and update it in
/// place.
#[pyfunction]
#[pyo3(signature = (name, value, dtype=None))]
fn shared(
    py: Python<'_>,
    name: &str,
    value: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Var> {
    let d = dtype.map(|d| convert::dtype(py, d)).transpose()?;
    let t = convert::tensor(py, value, d)?;
    Var::checked(at_caller(py, || GRAPH.shared(name, t)))
}

/// The graph's text (`kiln::debugprint`) for `outputs`.
#[pyfunction]
fn debugprint(outputs: Vec<Var>) -> String {
    let vs: Vec<&kiln::Var> = outputs.iter().map(|o| &o.v).collect();
    kiln::debugprint(&vs)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(input, m)?)?;
    m.add_function(wrap_pyfunction!(constant, m)?)?;
    m.add_function(wrap_pyfunction!(shared, m)?)?;
    m.add_function(wrap_pyfunction!(debugprint, m)?)?;
    Ok(())
}
