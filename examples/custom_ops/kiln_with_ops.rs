//! A `kiln` command of your own that knows your custom ops by name in the text form, as
//! `mlir-opt` is built with a user's dialects: everything `kiln` does (run, grad, opt, aot,
//! ptx), with `tear` and `scale` from `ops.rs` registered.
//!
//! ```sh
//! cat > /tmp/t.kir <<'KIR'
//! func @f(%x: f32[2, 3]) -> (f32[3], f32[3]) {
//!   %a, %b = custom "tear" %x {dims = [1]}
//!   %c = custom "scale" %b {factor = [2.0]}
//!   return %a, %c
//! }
//! KIR
//! cargo run --release --example kiln_with_ops -- run /tmp/t.kir --input x=x.npy
//! ```

#[allow(dead_code)]
#[path = "ops.rs"]
mod ops;

use kiln::cli::{main_with, Registry};
use kiln::custom::{CustomOpRef, OpParams};
use ops::{Scale, Tear};

fn tear(p: &OpParams) -> Result<CustomOpRef, String> {
    let dims = p.get_ints("dims").ok_or("tear needs `dims = [..]`")?;
    let dims = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("tear: dim {d} is negative")))
        .collect::<Result<_, _>>()?;
    Ok(CustomOpRef::new(Tear { dims }))
}

fn scale(p: &OpParams) -> Result<CustomOpRef, String> {
    match p.get_floats("factor") {
        Some(&[factor]) => Ok(CustomOpRef::new(Scale::new(factor))),
        _ => Err("scale needs `factor = [x]`".into()),
    }
}

/// The registry of this command: also what the tests register.
pub fn registry() -> Registry {
    Registry::new().op("tear", tear).op("scale", scale)
}

fn main() -> std::process::ExitCode {
    main_with(registry())
}
