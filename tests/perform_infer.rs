//! Type inference (`make_node`) of every built-in op: output types, unknown dims, and the
//! errors for wrong dtypes, shapes, axes and permutations.
// Cases read best as `&[t.clone()]` next to multi-input cases like `&[a.clone(), b]`.
#![allow(clippy::cloned_ref_to_slice_refs)]

#[path = "perform_support/mod.rs"]
mod support;

use kiln::ir::{infer, BinaryOp, DType, F64Bits, Op, ReduceOp, TensorType, UnaryOp};
use support::*;

fn ty(dtype: DType, shape: &[Option<usize>]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}
fn fx(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::fixed(dtype, shape)
}

#[track_caller]
fn ok(op: &Op, tys: &[TensorType]) -> TensorType {
    let refs: Vec<&TensorType> = tys.iter().collect();
    let out = infer(op, &refs).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    assert_eq!(out.len(), 1);
    out.into_iter().next().unwrap()
}

#[test]
fn unary_types() {
    use DType::*;
    for u in UnaryOp::ALL {
        let op = Op::Unary(u);
        for d in DType::ALL {
            let t = fx(d, &[2, 3]);
            let accepted = match u {
                UnaryOp::Not => d == Bool,
                _ if d == Bool || d.is_half() => false,
                _ => !u.float_only() || d.is_float(),
            };
            if accepted {
                assert_eq!(ok(&op, &[t.clone()]), t, "{u:?} on {d}");
            } else {
                let e = infer_err(&op, &[t]);
                assert!(e.contains(u.name()) || e.contains(d.name()), "{e}");
            }
        }
    }
    let e = infer_err(&Op::Unary(UnaryOp::Exp), &[fx(I32, &[1])]);
    assert!(e.contains("exp") && e.contains("i32"), "{e}");
    infer_err(&Op::Unary(UnaryOp::Neg), &[]);
    // Unknown dims pass through.
    let t = ty(F32, &[None, Some(3)]);
    assert_eq!(ok(&Op::Unary(UnaryOp::Tanh), &[t.clone()]), t);
}

#[test]
fn binary_types_and_broadcasting() {
    use BinaryOp::*;
    use DType::*;
    let add = Op::Binary(Add);
    assert_eq!(
        ok(&add, &[fx(F32, &[2, 1, 3]), fx(F32, &[4, 1])]),
        fx(F32, &[2, 4, 3])
    );
    assert_eq!(
        ok(&add, &[fx(I64, &[]), fx(I64, &[0, 2])]),
        fx(I64, &[0, 2])
    );
    assert_eq!(
        ok(&add, &[ty(F64, &[None, Some(1)]), ty(F64, &[Some(5)])]),
        ty(F64, &[None, Some(5)])
    );
    let e = infer_err(&add, &[fx(F32, &[3]), fx(F32, &[4])]);
    assert!(e.contains("[3]") && e.contains("[4]"), "{e}");
    let e = infer_err(&add, &[fx(F32, &[3]), fx(F64, &[3])]);
    assert!(e.contains("f32") && e.contains("f64"), "{e}");
    infer_err(&add, &[fx(F32, &[3])]);
    // Comparisons give bool; logical ops take bool; div takes floats; arithmetic no bool.
    for b in [Lt, Le, Gt, Ge, Eq, Ne] {
        for d in DType::ALL {
            if d.is_half() {
                // Storage types: compared in f32, through the graph API's casts.
                let e = infer_err(&Op::Binary(b), &[fx(d, &[2]), fx(d, &[])]);
                assert!(e.contains("storage type"), "{e}");
                continue;
            }
            assert_eq!(
                ok(&Op::Binary(b), &[fx(d, &[2]), fx(d, &[])]),
                fx(Bool, &[2])
            );
        }
    }
    for b in [And, Or] {
        assert_eq!(
            ok(&Op::Binary(b), &[fx(Bool, &[2]), fx(Bool, &[2])]),
            fx(Bool, &[2])
        );
        infer_err(&Op::Binary(b), &[fx(I32, &[2]), fx(I32, &[2])]);
    }
    let e = infer_err(&Op::Binary(Div), &[fx(I32, &[2]), fx(I32, &[2])]);
    assert!(e.contains("floordiv"), "{e}");
    for b in [Add, Sub, Mul, Div, FloorDiv, Pow, Maximum, Minimum, Mod] {
        infer_err(&Op::Binary(b), &[fx(Bool, &[2]), fx(Bool, &[2])]);
        assert_eq!(
            ok(&Op::Binary(b), &[fx(F32, &[2]), fx(F32, &[2])]),
            fx(F32, &[2])
        );
    }
    for b in [FloorDiv, Mod, Pow, Maximum] {
        assert_eq!(
            ok(&Op::Binary(b), &[fx(I32, &[2]), fx(I32, &[2])]),
            fx(I32, &[2])
        );
    }
}

#[test]
fn select_and_cast_types() {
    use DType::*;
    assert_eq!(
        ok(
            &Op::Select,
            &[fx(Bool, &[2, 1]), fx(I32, &[3]), fx(I32, &[])]
        ),
        fx(I32, &[2, 3])
    );
    infer_err(&Op::Select, &[fx(I32, &[2]), fx(I32, &[2]), fx(I32, &[2])]);
    infer_err(&Op::Select, &[fx(Bool, &[2]), fx(I32, &[2]), fx(I64, &[2])]);
    infer_err(&Op::Select, &[fx(Bool, &[2]), fx(I32, &[3]), fx(I32, &[3])]);
    for from in DType::ALL {
        for to in DType::ALL {
            assert_eq!(
                ok(&Op::Cast { to }, &[ty(from, &[None, Some(2)])]),
                ty(to, &[None, Some(2)])
            );
        }
    }
}

#[test]
fn reduction_types() {
    use DType::*;
    use ReduceOp::*;
    let r = |op, axes: Option<&[usize]>, keepdims| Op::Reduce {
        op,
        axes: axes.map(|a| a.to_vec()),
        keepdims,
    };
    let t = ty(I32, &[Some(2), None, Some(4)]);
    assert_eq!(
        ok(&r(Sum, Some(&[1]), false), &[t.clone()]),
        fx(I32, &[2, 4])
    );
    assert_eq!(
        ok(&r(Sum, Some(&[1]), true), &[t.clone()]),
        fx(I32, &[2, 1, 4])
    );
    assert_eq!(ok(&r(Mean, None, false), &[t.clone()]), fx(F64, &[]));
    assert_eq!(ok(&r(Mean, None, true), &[t.clone()]), fx(F64, &[1, 1, 1]));
    assert_eq!(
        ok(&r(Max, Some(&[0, 2]), false), &[t.clone()]),
        ty(I32, &[None])
    );
    assert_eq!(
        ok(&r(ArgMax, Some(&[2]), false), &[t.clone()]),
        ty(I64, &[Some(2), None])
    );
    assert_eq!(ok(&r(ArgMin, None, false), &[t.clone()]), fx(I64, &[]));
    assert_eq!(ok(&r(All, None, false), &[t.clone()]), fx(Bool, &[]));
    assert_eq!(ok(&r(Sum, None, false), &[fx(Bool, &[3])]), fx(I64, &[]));
    assert_eq!(ok(&r(Prod, None, false), &[fx(Bool, &[3])]), fx(I64, &[]));
    assert_eq!(ok(&r(Mean, None, false), &[fx(F32, &[3])]), fx(F32, &[]));
    assert_eq!(ok(&r(Sum, None, false), &[fx(F32, &[3])]), fx(F32, &[]));
    let e = infer_err(&r(Sum, Some(&[3]), false), &[t.clone()]);
    assert!(e.contains("out of range"), "{e}");
    let e = infer_err(&r(Sum, Some(&[1, 1]), false), &[t.clone()]);
    assert!(e.contains("repeated"), "{e}");
    infer_err(&r(ArgMax, Some(&[0, 1]), false), &[t.clone()]);
    infer_err(&r(Sum, None, false), &[]);
}

#[test]
fn shape_op_types() {
    use DType::*;
    let t = ty(F32, &[Some(2), None, Some(4)]);
    assert_eq!(
        ok(
            &Op::Transpose {
                perm: vec![2, 0, 1]
            },
            &[t.clone()]
        ),
        ty(F32, &[Some(4), Some(2), None])
    );
    for perm in [vec![0, 1], vec![0, 0, 1], vec![0, 1, 3]] {
        let e = infer_err(&Op::Transpose { perm }, &[t.clone()]);
        assert!(e.contains("perm"), "{e}");
    }
    let a = fx(I64, &[2, 3, 4]);
    assert_eq!(
        ok(&Op::Reshape { shape: vec![4, -1] }, &[a.clone()]),
        fx(I64, &[4, 6])
    );
    assert_eq!(
        ok(&Op::Reshape { shape: vec![-1, 2] }, &[t.clone()]),
        ty(F32, &[None, Some(2)])
    );
    for shape in [vec![5, -1], vec![25], vec![-1, -1], vec![-3]] {
        infer_err(&Op::Reshape { shape }, &[a.clone()]);
    }
    assert_eq!(
        ok(
            &Op::BroadcastTo {
                shape: vec![5, 2, 3, 4]
            },
            &[a.clone()]
        ),
        fx(I64, &[5, 2, 3, 4])
    );
    infer_err(&Op::BroadcastTo { shape: vec![3, 4] }, &[a.clone()]);
    infer_err(
        &Op::BroadcastTo {
            shape: vec![2, 5, 4],
        },
        &[a.clone()],
    );
    assert_eq!(
        ok(&Op::ExpandDims { axes: vec![0, 4] }, &[a.clone()]),
        fx(I64, &[1, 2, 3, 4, 1])
    );
    infer_err(&Op::ExpandDims { axes: vec![5] }, &[a.clone()]);
    let s = ty(I64, &[Some(1), None, Some(1)]);
    assert_eq!(
        ok(&Op::Squeeze { axes: vec![0, 2] }, &[s.clone()]),
        ty(I64, &[None])
    );
    // An unknown dim may be squeezed: the run time checks it is 1.
    assert_eq!(
        ok(&Op::Squeeze { axes: vec![1] }, &[s.clone()]),
        fx(I64, &[1, 1])
    );
    let e = infer_err(&Op::Squeeze { axes: vec![1] }, &[a.clone()]);
    assert!(e.contains("size 3"), "{e}");
    infer_err(&Op::Squeeze { axes: vec![3] }, &[a.clone()]);
    assert_eq!(
        ok(
            &Op::Concat { axis: 1 },
            &[a.clone(), ty(I64, &[None, Some(2), Some(4)])]
        ),
        fx(I64, &[2, 5, 4])
    );
    assert_eq!(
        ok(
            &Op::Concat { axis: 1 },
            &[a.clone(), ty(I64, &[Some(2), None, Some(4)])]
        ),
        ty(I64, &[Some(2), None, Some(4)])
    );
    infer_err(&Op::Concat { axis: 1 }, &[a.clone(), fx(I64, &[2, 3, 5])]);
    infer_err(&Op::Concat { axis: 3 }, &[a.clone(), a.clone()]);
    infer_err(&Op::Concat { axis: 0 }, &[a.clone(), fx(F32, &[2, 3, 4])]);
    infer_err(&Op::Concat { axis: 0 }, &[a.clone(), fx(I64, &[2, 3])]);
    infer_err(&Op::Concat { axis: 0 }, &[]);
    let sl = |starts: &[i64], stops: &[i64], steps: &[i64]| Op::Slice {
        starts: starts.to_vec(),
        stops: stops.to_vec(),
        steps: steps.to_vec(),
    };
    assert_eq!(
        ok(
            &sl(&[i64::MAX, 1], &[i64::MIN, i64::MAX], &[-2, 1]),
            &[t.clone()]
        ),
        ty(F32, &[Some(1), None, Some(4)])
    );
    infer_err(&sl(&[0], &[1], &[0]), &[t.clone()]);
    infer_err(&sl(&[0, 0], &[1], &[1, 1]), &[t.clone()]);
    infer_err(&sl(&[0; 4], &[1; 4], &[1; 4]), &[t.clone()]);
}

#[test]
fn matmul_types() {
    use DType::*;
    let mm = Op::MatMul;
    assert_eq!(
        ok(&mm, &[fx(F32, &[2, 3]), fx(F32, &[3, 5])]),
        fx(F32, &[2, 5])
    );
    assert_eq!(ok(&mm, &[fx(F32, &[3]), fx(F32, &[3, 5])]), fx(F32, &[5]));
    assert_eq!(ok(&mm, &[fx(F32, &[2, 3]), fx(F32, &[3])]), fx(F32, &[2]));
    assert_eq!(ok(&mm, &[fx(I64, &[3]), fx(I64, &[3])]), fx(I64, &[]));
    assert_eq!(
        ok(&mm, &[fx(F64, &[2, 1, 2, 3]), fx(F64, &[4, 3, 5])]),
        fx(F64, &[2, 4, 2, 5])
    );
    assert_eq!(
        ok(&mm, &[ty(F64, &[None, Some(3)]), ty(F64, &[None, None])]),
        ty(F64, &[None, None])
    );
    let e = infer_err(&mm, &[fx(F32, &[2, 3]), fx(F32, &[4, 5])]);
    assert!(e.contains('3') && e.contains('4'), "{e}");
    infer_err(&mm, &[fx(F32, &[]), fx(F32, &[3])]);
    infer_err(&mm, &[fx(F32, &[3]), fx(F64, &[3])]);
    infer_err(&mm, &[fx(Bool, &[1, 1]), fx(Bool, &[1, 1])]);
    infer_err(&mm, &[fx(F32, &[2, 2, 3]), fx(F32, &[3, 3, 5])]);
}

#[test]
fn creation_types() {
    use DType::*;
    let full = Op::Full {
        shape: vec![2, 0],
        dtype: I32,
        value: F64Bits(1.0),
    };
    assert_eq!(ok(&full, &[]), fx(I32, &[2, 0]));
    infer_err(&full, &[fx(I32, &[1])]);
    let ar = |start, stop, step, dtype| Op::Arange {
        start: F64Bits(start),
        stop: F64Bits(stop),
        step: F64Bits(step),
        dtype,
    };
    assert_eq!(ok(&ar(0.0, 1.0, 0.3, F32), &[]), fx(F32, &[4]));
    assert_eq!(ok(&ar(5.0, 0.0, 1.0, I64), &[]), fx(I64, &[0]));
    infer_err(&ar(0.0, 1.0, 0.0, F32), &[]);
    infer_err(&ar(0.0, f64::INFINITY, 1.0, F32), &[]);
    infer_err(&ar(0.0, 3.0, 1.0, Bool), &[]);
    let z = Op::Zeros {
        shape: vec![3],
        dtype: Bool,
    };
    assert_eq!(ok(&z, &[]), fx(Bool, &[3]));
}
