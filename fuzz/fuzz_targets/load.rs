//! Fuzzes the readers of files from elsewhere: the bytes are written to a file and read as a
//! saved function (`Function::load`, then called once on small inputs and its state saved),
//! as an `.npz` archive and as an `.npy` file. Nothing may panic, abort or read without end:
//! every bad file is an error (the readers bound each read by what a header or directory
//! declares, and the loader checks the bindings and the state before it compiles).
//!
//! Start from `seeds/load` (saved functions and archives made by `tests/hostile_files.rs`'s
//! shapes) so that mutations land inside well-formed zip entries.
#![no_main]

use kiln::{CompileOptions, DType, Function, Tensor};
use libfuzzer_sys::fuzz_target;

/// The shapes of zeros to call `f` with (each `?` dim 2).
fn input_shapes(f: &Function) -> Vec<(DType, Vec<usize>)> {
    let func = f.func();
    (func.params[..f.n_inputs()].iter())
        .map(|&p| {
            let ty = func.ty(p);
            (ty.dtype, ty.shape.iter().map(|d| d.unwrap_or(2)).collect())
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("kiln-fuzz-load-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("input.kfn");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(f) = Function::load(&path, &CompileOptions::default()) {
        let shapes = input_shapes(&f);
        let elems = (shapes.iter())
            .map(|(_, s)| s.iter().try_fold(1usize, |n, &d| n.checked_mul(d)))
            .try_fold(0usize, |n, e| n.checked_add(e?));
        if elems.is_some_and(|n| n <= 1 << 16) {
            let inputs: Vec<Tensor> = (shapes.iter())
                .map(|(dtype, shape)| Tensor::zeros(*dtype, shape))
                .collect();
            let views: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            let _ = f.call(&views);
        }
        let _ = f.save_state(dir.join("state.npz"));
        let _ = f.load_state(dir.join("state.npz"));
    }
    let _ = kiln::npy::read_npz(&path);
    for dtype in [DType::F32, DType::I64, DType::Bool] {
        let _ = kiln::npy::read(&path, dtype);
    }
});
