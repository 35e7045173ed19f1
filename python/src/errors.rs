//! kiln's errors as the Python exceptions of `kiln.errors`: one line, the user's file and line
//! in it where a node was built wrong.

use pyo3::prelude::*;
use pyo3::types::PyType;

/// The exception class of `kiln.errors` for `e`.
fn class_name(e: &kiln::Error) -> &'static str {
    match e {
        kiln::Error::Type { .. } => "TypeError",
        kiln::Error::Shape(_) | kiln::Error::Input(_) => "ShapeError",
        _ => "KilnError",
    }
}

/// `e` as a Python exception.
pub fn to_py(e: kiln::Error) -> PyErr {
    raise(class_name(&e), e.to_string())
}

/// The exception `kiln.errors.<class>` with `msg`.
pub fn raise(class: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("kiln.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| Ok(c.cast_into::<PyType>()?));
        match class {
            Ok(class) => PyErr::from_type(class, msg),
            Err(e) => e,
        }
    })
}

/// A type error of the binding itself (an argument of the wrong kind).
pub fn type_error(msg: impl Into<String>) -> PyErr {
    raise("TypeError", msg.into())
}
