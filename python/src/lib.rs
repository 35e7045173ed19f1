//! `kiln._kiln`, the extension module behind the `kiln` Python package (python/kiln).
//!
//! A front door, no more: every function here builds through kiln's public Rust API (one
//! graph builder call each) and adds no semantics of its own. The Python layer
//! (`kiln/__init__.py`) gives the graph Theano's and numpy's spelling on top of these calls.

mod control;
mod convert;
mod custom;
mod errors;
mod function;
mod loc;
mod ops;
mod var;

use pyo3::prelude::*;

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<var::Var>()?;
    m.add_class::<function::Function>()?;
    var::register(m)?;
    ops::register(m)?;
    function::register(m)?;
    control::register(m)?;
    custom::register(m)?;
    Ok(())
}
