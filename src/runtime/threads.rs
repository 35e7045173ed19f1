//! How many threads kiln's calls use. Every parallel step (products, elementwise and reduce
//! kernels, row groups, windows, a batch of products side by side) runs on rayon's global
//! pool, so one number sizes them all: `KILN_THREADS` where it is set, else rayon's own
//! default (`RAYON_NUM_THREADS`, else one thread per core).
//!
//! The pool is made once per process, the first time a function is compiled (or `threads()`
//! is asked). A program that built rayon's global pool itself before that keeps its pool, and
//! `KILN_THREADS` is then only checked, not applied: `threads()` says what calls really use.

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// The environment variable that sizes the pool.
pub const THREADS_VAR: &str = "KILN_THREADS";

/// What configuring the pool came to (kept, so that every compile reports the same).
static CONFIGURED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// The thread count `KILN_THREADS` asks for: `None` where it is unset or empty, an error
/// where it is not a positive whole number.
fn requested() -> std::result::Result<Option<usize>, String> {
    let Ok(text) = std::env::var(THREADS_VAR) else {
        return Ok(None);
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!(
            "{THREADS_VAR}={text:?}: the thread count must be a positive whole number"
        )),
    }
}

/// Makes rayon's global pool with `KILN_THREADS` threads, once; an error (every time) where
/// `KILN_THREADS` is not a thread count. Called when a function is compiled.
pub(crate) fn configure() -> Result<()> {
    // The products' ISA is the other choice made once per process from the environment.
    crate::gemm::check_isa_request()?;
    let outcome = CONFIGURED.get_or_init(|| {
        let n = requested()?;
        let mut builder = rayon::ThreadPoolBuilder::new();
        if let Some(n) = n {
            builder = builder.num_threads(n);
        }
        // An error here means the pool already exists (the program made it, or rayon did on
        // first use): that pool stays, and `threads()` reports it.
        let _ = builder.build_global();
        Ok(())
    });
    outcome.clone().map_err(Error::Input)
}

/// The number of threads kiln's calls run on (see the module docs).
pub fn threads() -> usize {
    let _ = configure();
    rayon::current_num_threads()
}
