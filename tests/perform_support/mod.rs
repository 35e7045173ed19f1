//! Helpers shared by the `perform_*` tests: tensor constructors, running an op while checking
//! its output types against `infer`, and comparisons that treat NaN and -0.0 exactly.
#![allow(dead_code)]

use kiln::ir::{infer, Op, TensorType};
use kiln::perform::perform;
use kiln::Tensor;
use ndarray::{ArrayD, IxDyn};

pub fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::F64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
pub fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
pub fn i32s(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::I32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
pub fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
pub fn bools(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::Bool(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

/// Output types of `op` on the inputs' concrete types.
pub fn inferred(op: &Op, inputs: &[&Tensor]) -> Result<Vec<TensorType>, String> {
    let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
    let refs: Vec<&TensorType> = tys.iter().collect();
    infer(op, &refs)
}

/// Runs a one-output op, checking that it succeeds and that its output has exactly the type
/// `infer` gives for the inputs' fixed types.
#[track_caller]
pub fn run(op: &Op, inputs: &[&Tensor]) -> Tensor {
    let outs = perform(op, inputs).unwrap_or_else(|e| panic!("{op:?} failed: {e}"));
    let tys = inferred(op, inputs).unwrap_or_else(|e| panic!("infer {op:?} failed: {e}"));
    assert_eq!(outs.len(), 1, "{op:?}");
    assert_eq!(tys.len(), 1, "{op:?}");
    assert_eq!(
        outs[0].ty(),
        tys[0],
        "{op:?}: output type differs from infer"
    );
    outs.into_iter().next().unwrap()
}

/// Runs an op that must fail at run time (with an `Err`, not a panic).
#[track_caller]
pub fn run_err(op: &Op, inputs: &[&Tensor]) -> String {
    match perform(op, inputs) {
        Ok(outs) => panic!("{op:?} should fail, gave {outs:?}"),
        Err(e) => e.to_string(),
    }
}

/// The error `infer` gives (it must give one).
#[track_caller]
pub fn infer_err(op: &Op, tys: &[TensorType]) -> String {
    let refs: Vec<&TensorType> = tys.iter().collect();
    match infer(op, &refs) {
        Ok(t) => panic!("infer {op:?} on {tys:?} should fail, gave {t:?}"),
        Err(e) => e,
    }
}

/// Distance in units of the last place between two f64s of the same sign.
pub fn ulps64(a: f64, b: f64) -> u64 {
    let key = |x: f64| {
        let b = x.to_bits() as i64;
        if b < 0 {
            i64::MIN - b
        } else {
            b
        }
    };
    key(a).abs_diff(key(b))
}

pub fn ulps32(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let b = x.to_bits() as i32;
        if b < 0 {
            (i32::MIN - b) as i64
        } else {
            b as i64
        }
    };
    key(a).abs_diff(key(b))
}

/// Checks a float tensor's shape and values within `ulps` (in its own precision; NaN matches
/// NaN, infinities and zeros must match exactly, sign included).
#[track_caller]
pub fn close(t: &Tensor, shape: &[usize], expected: &[f64], ulps: u64) {
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    let got = t.to_f64_vec();
    assert_eq!(got.len(), expected.len());
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            g.is_nan()
        } else if e == 0.0 || e.is_infinite() {
            g.to_bits() == e.to_bits()
        } else {
            match t {
                Tensor::F32(_) => ulps32(g as f32, e as f32) <= ulps,
                _ => ulps64(g, e) <= ulps,
            }
        };
        assert!(
            ok,
            "element {i}: got {g:e}, expected {e:e} (within {ulps} ulps) in {t:?}"
        );
    }
}

/// Checks exact values (NaN matches NaN; -0.0 differs from 0.0).
#[track_caller]
pub fn exact(t: &Tensor, shape: &[usize], expected: &[f64]) {
    close(t, shape, expected, 0)
}

/// Checks a tensor equals `expected` bit for bit: dtype, shape and values.
#[track_caller]
pub fn same(t: &Tensor, expected: &Tensor) {
    assert!(t.bit_eq(expected), "got {t:?}, expected {expected:?}");
}
