//! Fuzzes everything after the parser: whatever parses is compiled and run on small inputs
//! (each `?` dim 2, values from the input bytes) by the reference interpreter and the CPU
//! backend with the optimizer on. Nothing may panic or abort (results larger than memory,
//! shapes that do not fit at run time and the like are errors), both backends must succeed or
//! fail together, and integer and bool results must be equal.
#![no_main]

use kiln::{Backend, CompileOptions, DType, Tensor};
use libfuzzer_sys::fuzz_target;
use ndarray::{ArrayD, IxDyn};

fn inputs(func: &kiln::ir::Func, seed: &[u8]) -> Vec<Tensor> {
    let mut k = 0usize;
    let mut next = || {
        let b = seed.get(k % seed.len().max(1)).copied().unwrap_or(1);
        k += 1;
        b
    };
    func.params
        .iter()
        .map(|&p| {
            let ty = func.ty(p);
            let shape: Vec<usize> = ty.shape.iter().map(|d| d.unwrap_or(2)).collect();
            let sh = IxDyn(&shape);
            match ty.dtype {
                DType::Bool => Tensor::Bool(ArrayD::from_shape_simple_fn(sh, || next() % 2 == 0)),
                DType::I32 => Tensor::I32(ArrayD::from_shape_simple_fn(sh, || next() as i32 - 128)),
                DType::I64 => Tensor::I64(ArrayD::from_shape_simple_fn(sh, || next() as i64 - 128)),
                DType::F32 => Tensor::F32(ArrayD::from_shape_simple_fn(sh, || {
                    (next() as f32 - 128.0) / 16.0
                })),
                DType::F64 => Tensor::F64(ArrayD::from_shape_simple_fn(sh, || {
                    (next() as f64 - 128.0) / 16.0
                })),
                DType::F16 => Tensor::F16(ArrayD::from_shape_simple_fn(sh, || {
                    kiln::half::f16::from_f32((next() as f32 - 128.0) / 16.0)
                })),
                DType::BF16 => Tensor::BF16(ArrayD::from_shape_simple_fn(sh, || {
                    kiln::half::bf16::from_f32((next() as f32 - 128.0) / 16.0)
                })),
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let Ok(funcs) = kiln::ir::text::parse("fuzz", &src) else {
        return;
    };
    let func = &funcs[0];
    // Inputs far beyond small are not what this target is about.
    let elems: usize = func
        .params
        .iter()
        .map(|&p| func.ty(p).shape.iter().map(|d| d.unwrap_or(2)).product::<usize>())
        .sum();
    if elems > 1 << 16 {
        return;
    }
    let args = inputs(func, data);
    let views: Vec<kiln::TensorRef> = args.iter().map(|t| t.view()).collect();
    let run = |backend, optimize| {
        let opts = CompileOptions {
            backend: Some(backend),
            optimize,
            dump: Default::default(),
            ..Default::default()
        };
        let f = kiln::compile_func(func.clone(), &opts)?;
        f.call(&views)
    };
    let want = run(Backend::Interp, false);
    let got = run(Backend::Cpu, true);
    match (&want, &got) {
        (Ok(a), Ok(b)) => {
            for (x, y) in a.iter().zip(b) {
                if !x.dtype().is_float() {
                    assert_eq!(x, y, "integer results differ\n{src}");
                }
            }
        }
        (Err(_), Err(_)) => {}
        _ => panic!("one backend fails, the other not: {want:?} vs {got:?}\n{src}"),
    }
});
