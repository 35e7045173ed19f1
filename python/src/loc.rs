//! The Python line that builds a node: kiln names it in errors and profiles, as the Rust API
//! names the Rust line (`kiln::error::built_at`).

use kiln::SourceLoc;
use pyo3::prelude::*;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// Python file names, kept for the life of the process: a `SourceLoc` names its file with a
/// `&'static str`, and a program builds from a handful of files.
static FILES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// The folder of the `kiln` package: frames inside it are the binding's, not the user's.
static PACKAGE: OnceLock<String> = OnceLock::new();

fn intern(file: String) -> &'static str {
    let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let files = files.get_or_insert_with(HashSet::new);
    match files.get(file.as_str()) {
        Some(f) => f,
        None => {
            let f: &'static str = Box::leak(file.into_boxed_str());
            files.insert(f);
            f
        }
    }
}

fn package_dir(py: Python<'_>) -> PyResult<&'static str> {
    if let Some(p) = PACKAGE.get() {
        return Ok(p);
    }
    let file: String = py.import("kiln")?.getattr("__file__")?.extract()?;
    let dir = std::path::Path::new(&file)
        .parent()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(PACKAGE.get_or_init(|| dir))
}

/// The innermost Python frame outside the `kiln` package: the user's line (for a graph
/// kiln.pytensor converts, the line of the converter that built the node).
fn caller(py: Python<'_>) -> PyResult<Option<SourceLoc>> {
    let package = package_dir(py)?;
    let mut frame = py.import("sys")?.call_method1("_getframe", (0,))?;
    while !frame.is_none() {
        let file: String = frame.getattr("f_code")?.getattr("co_filename")?.extract()?;
        // The binding's frames, and `functools`' dispatch wrappers (kiln.pytensor's
        // converters are singledispatch functions), are not the user's.
        let binding =
            (!package.is_empty() && file.starts_with(package)) || file.ends_with("/functools.py");
        if !binding {
            let line: u32 = frame.getattr("f_lineno")?.extract()?;
            return Ok(Some(SourceLoc {
                file: intern(file),
                line,
                column: 1,
            }));
        }
        frame = frame.getattr("f_back")?;
    }
    Ok(None)
}

/// Runs `f` with every node it builds attributed to the user's Python line.
pub fn at_caller<R>(py: Python<'_>, f: impl FnOnce() -> R) -> R {
    match caller(py) {
        Ok(Some(loc)) => kiln::error::built_at(loc, f),
        _ => f(),
    }
}
