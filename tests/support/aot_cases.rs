//! Random functions compiled ahead of time and checked against the interpreter: each case
//! is built with the graph API (every dim known), its object linked with the others into one
//! library (`aot_lib`) and called in this process; outputs must be the interpreter's bits.
#![allow(dead_code)]

use super::aot_lib;
use super::common::same_bits;
use kiln::aot::{AotArtifact, AotOptions};
use kiln::{function, Backend, DType, Graph, Tensor, Var};
use ndarray::ArrayD;

/// One random function: its inputs and what the interpreter and the CPU backend give for
/// them.
pub struct Case {
    pub what: String,
    pub art: AotArtifact,
    pub inputs: Vec<Tensor>,
    pub want: Vec<Tensor>,
    pub jit: Vec<Tensor>,
}

/// Builds `outputs(inputs)` for inputs of `shapes` (all dims known), compiles it ahead of time
/// as `symbol` and runs it on the interpreter and the CPU backend.
pub fn case(
    what: String,
    symbol: String,
    inputs: Vec<Tensor>,
    outputs: impl FnOnce(&[Var]) -> Vec<Var>,
) -> Case {
    case_on(what, symbol, false, inputs, outputs)
}

/// [`case`], its float products calling kiln's runtime library where `runtime`
/// (`AotOptions::runtime`; the library is then linked in).
pub fn case_on(
    what: String,
    symbol: String,
    runtime: bool,
    inputs: Vec<Tensor>,
    outputs: impl FnOnce(&[Var]) -> Vec<Var>,
) -> Case {
    let g = Graph::new();
    let vars: Vec<Var> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let dims: Vec<Option<i64>> = t.shape().iter().map(|&d| Some(d as i64)).collect();
            g.input(&format!("in{i}"), t.dtype(), dims)
        })
        .collect();
    let outs = outputs(&vars);
    let var_refs: Vec<&Var> = vars.iter().collect();
    let out_refs: Vec<&Var> = outs.iter().collect();
    let opts = AotOptions {
        symbol: Some(symbol),
        runtime,
        ..AotOptions::default()
    };
    let art = function(&var_refs, &out_refs)
        .aot(&opts)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let interp = function(&var_refs, &out_refs)
        .backend(Backend::Interp)
        .compile()
        .unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = interp.call(&refs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let cpu = function(&var_refs, &out_refs)
        .backend(Backend::Cpu)
        .compile()
        .unwrap();
    let jit = cpu.call(&refs).unwrap_or_else(|e| panic!("{what}: {e}"));
    Case {
        what,
        art,
        inputs,
        want,
        jit,
    }
}

/// Links every case's object into one library and checks that each gives the interpreter's
/// bits (and so the CPU backend's).
pub fn check_all(cases: &[Case], name: &str) {
    check(cases, name, true)
}

/// Like [`check_all`] for functions with matrix products, which the interpreter multiplies
/// in another order than kiln's GEMM: the CPU backend's bits (the object runs the same plan
/// with the same blocking), and the interpreter's values within rounding.
pub fn check_all_close(cases: &[Case], name: &str) {
    check(cases, name, false)
}

fn check(cases: &[Case], name: &str, interpreter_bits: bool) {
    let dir = std::env::temp_dir().join(format!("kiln-aot-cases-{}-{name}", std::process::id()));
    let arts: Vec<&AotArtifact> = cases.iter().map(|c| &c.art).collect();
    let lib = aot_lib::link(&arts, &dir).unwrap_or_else(|e| panic!("linking: {e}"));
    for c in cases {
        let got = lib
            .call(&c.art, &c.inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        for (i, ((g, w), j)) in got.iter().zip(&c.want).zip(&c.jit).enumerate() {
            let ok = if interpreter_bits {
                same_bits(g, w)
            } else {
                within_rounding(g, w)
            };
            assert!(
                ok,
                "{}: output {i}: ahead of time {g:?}, the interpreter {w:?}",
                c.what
            );
            assert!(
                same_bits(g, j),
                "{}: output {i}: ahead of time {g:?}, the CPU backend {j:?}",
                c.what
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `got` is `want` within a few roundings of a long computation (a gradient summed over many
/// steps): `1e-5 (1 + |want|)` in f32, `1e-12 (1 + |want|)` in f64, exact otherwise.
fn within_rounding(got: &Tensor, want: &Tensor) -> bool {
    let tol = match got.dtype() {
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
        _ => 0.0,
    };
    got.dtype() == want.dtype()
        && got.shape() == want.shape()
        && got
            .to_f64_vec()
            .iter()
            .zip(want.to_f64_vec())
            .all(|(&g, w)| (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs()))
}

/// `a` converted to `dtype` (bool: nonzero; halves: rounded to nearest).
pub fn as_dtype(a: ArrayD<f64>, dtype: DType) -> Tensor {
    match dtype {
        DType::Bool => Tensor::Bool(a.mapv(|v| v != 0.0)),
        DType::F32 => Tensor::from(a.mapv(|v| v as f32)),
        DType::I32 => Tensor::from(a.mapv(|v| v as i32)),
        DType::I64 => Tensor::from(a.mapv(|v| v as i64)),
        DType::F16 => Tensor::F16(a.mapv(kiln::half::f16::from_f64)),
        DType::BF16 => Tensor::BF16(a.mapv(kiln::half::bf16::from_f64)),
        DType::F64 => Tensor::from(a),
    }
}

/// `t` stored with its last two axes swapped: the function transposes it back, so the op
/// reads it through strides.
pub fn stored_transposed(t: &Tensor) -> Tensor {
    t.view().swap_last_two().to_standard_owned()
}

pub fn swap_last(v: &Var) -> Var {
    let r = v.ty().rank() as i64;
    let mut perm: Vec<i64> = (0..r).collect();
    perm.swap(r as usize - 2, r as usize - 1);
    v.transpose(&perm)
}
