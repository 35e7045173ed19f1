//! Lazy `ifelse` and `scan` with bodies written in Python: kiln calls the Python functions once,
//! while it builds the branches or the loop's body, with the GIL held.

use crate::errors::type_error;
use crate::loc::at_caller;
use crate::var::Var;
use pyo3::prelude::*;
use std::cell::RefCell;

/// The variables a Python branch or body returned (a list of `_kiln.Var`), or the error it
/// raised, kept to raise once kiln has finished building.
fn call_back(
    err: &RefCell<Option<PyErr>>,
    f: impl FnOnce() -> PyResult<Vec<Var>>,
) -> Vec<kiln::Var> {
    match f() {
        Ok(vs) => vs.into_iter().map(|v| v.v).collect(),
        Err(e) => {
            err.borrow_mut().get_or_insert(e);
            Vec::new()
        }
    }
}

/// The first error a callback raised, or `outs` checked.
fn finish(err: RefCell<Option<PyErr>>, outs: Vec<kiln::Var>) -> PyResult<Vec<Var>> {
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    outs.into_iter().map(Var::checked).collect()
}

/// Theano's lazy `ifelse`: `then()` where the 0-d bool `cond` is true, else `otherwise()`;
/// only the branch taken runs. Each callable returns a list of variables.
#[pyfunction]
fn ifelse(
    py: Python<'_>,
    cond: Var,
    then: &Bound<'_, PyAny>,
    otherwise: &Bound<'_, PyAny>,
) -> PyResult<Vec<Var>> {
    let err = RefCell::new(None);
    let branch = |f: &Bound<'_, PyAny>| call_back(&err, || f.call0()?.extract());
    let outs = at_caller(py, || {
        kiln::ifelse(&cond.v, || branch(then), || branch(otherwise))
    });
    finish(err, outs)
}

/// `lax.scan`: `body(carries, slices)` (lists of variables) returns `(new_carries, ys)`; the
/// result is `(last_carries, stacked_ys)`. `reverse` walks the sequences from the end.
#[pyfunction]
#[pyo3(signature = (body, init, xs, reverse=false))]
fn scan(
    py: Python<'_>,
    body: &Bound<'_, PyAny>,
    init: Vec<Var>,
    xs: Vec<Var>,
    reverse: bool,
) -> PyResult<(Vec<Var>, Vec<Var>)> {
    if xs.is_empty() {
        return Err(type_error(
            "scan needs at least one sequence (kiln.arange(n) loops n times)",
        ));
    }
    let (init, xs): (Vec<&kiln::Var>, Vec<&kiln::Var>) = (
        init.iter().map(|v| &v.v).collect(),
        xs.iter().map(|v| &v.v).collect(),
    );
    let err = RefCell::new(None);
    let step = |c: &[kiln::Var], x: &[kiln::Var]| -> kiln::graph::ScanStep {
        let wrap =
            |vs: &[kiln::Var]| -> Vec<Var> { vs.iter().map(|v| Var { v: v.clone() }).collect() };
        let mut stacked = Vec::new();
        let carries = call_back(&err, || {
            let (c, y): (Vec<Var>, Vec<Var>) = body.call1((wrap(c), wrap(x)))?.extract()?;
            stacked = y.into_iter().map(|v| v.v).collect();
            Ok(c)
        });
        (carries, stacked)
    };
    let (last, ys) = at_caller(py, || match reverse {
        false => kiln::scan(&init, &xs, step),
        true => kiln::scan_reverse(&init, &xs, step),
    });
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    Ok((
        finish(RefCell::new(None), last)?,
        finish(RefCell::new(None), ys)?,
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ifelse, m)?)?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    Ok(())
}
