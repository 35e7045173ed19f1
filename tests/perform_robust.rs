//! `perform` never panics, and agrees with `infer`: over a sweep of ops and inputs of every
//! dtype and many shapes (scalars, size-1 and empty dims, rank mismatches), perform succeeds
//! exactly where inference accepts the inputs' fixed types (except for the emptiness errors
//! that only the values' shapes can reveal to max/min/argmax/argmin, which inference allows),
//! and its outputs then have the inferred types. Also: custom ops run through `perform`.

#[path = "perform_support/mod.rs"]
mod support;

use kiln::custom::{CustomOp, PerformContext, Resource, WriteRequest};
use kiln::ir::{BinaryOp, DType, Op, ReduceOp, TensorType, UnaryOp};
use kiln::perform::perform;
use kiln::Tensor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use support::*;

const SHAPES: [&[usize]; 8] = [
    &[],
    &[1],
    &[3],
    &[2, 3],
    &[0, 3],
    &[3, 1],
    &[2, 1, 3],
    &[1, 0],
];

fn sample(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| [-2.5, 0.0, 1.5, f64::NAN, 3.0][i % 5])
        .collect();
    let t = f64s(shape, &vals);
    perform(&Op::Cast { to: dtype }, &[&t]).unwrap().remove(0)
}

fn inputs() -> Vec<Tensor> {
    DType::ALL
        .iter()
        .flat_map(|&d| SHAPES.iter().map(move |s| sample(d, s)))
        .collect()
}

/// Checks perform against infer on one op application; returns whether perform succeeded.
fn check(op: &Op, args: &[&Tensor]) -> bool {
    let result = catch_unwind(AssertUnwindSafe(|| perform(op, args)))
        .unwrap_or_else(|_| panic!("perform panicked: {op:?} on {args:?}"));
    let tys = inferred(op, args);
    let empty_extreme = matches!(
        op,
        Op::Reduce {
            op: ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin,
            ..
        }
    ) && args[0].is_empty();
    match (&result, &tys) {
        (Ok(outs), Ok(tys)) => {
            let got: Vec<TensorType> = outs.iter().map(|t| t.ty()).collect();
            assert_eq!(&got, tys, "{op:?} on {args:?}");
        }
        (Err(_), Err(_)) => {}
        (Err(_), Ok(_)) if empty_extreme => {}
        (Ok(o), Err(e)) => panic!("{op:?} on {args:?}: infer says {e}, perform gave {o:?}"),
        (Err(e), Ok(_)) => panic!("{op:?} on {args:?}: infer accepts, perform says {e}"),
    }
    result.is_ok()
}

#[test]
fn elementwise_ops_never_panic_and_agree_with_infer() {
    let xs = inputs();
    let mut ran = 0;
    for x in &xs {
        for u in UnaryOp::ALL {
            ran += check(&Op::Unary(u), &[x]) as usize;
        }
        for to in DType::ALL {
            ran += check(&Op::Cast { to }, &[x]) as usize;
        }
        for y in &xs {
            for b in BinaryOp::ALL {
                ran += check(&Op::Binary(b), &[x, y]) as usize;
            }
        }
    }
    let conds: Vec<&Tensor> = xs.iter().filter(|t| t.dtype() == DType::Bool).collect();
    for c in &conds {
        for x in xs.iter().step_by(3) {
            for y in xs.iter().step_by(2) {
                ran += check(&Op::Select, &[c, x, y]) as usize;
            }
        }
    }
    assert!(ran > 4000, "{ran}");
}

#[test]
fn reductions_and_shape_ops_never_panic_and_agree_with_infer() {
    let xs = inputs();
    let axes_choices: [Option<Vec<usize>>; 6] = [
        None,
        Some(vec![]),
        Some(vec![0]),
        Some(vec![1]),
        Some(vec![0, 1]),
        Some(vec![2]),
    ];
    let mut ops = vec![];
    for op in ReduceOp::ALL {
        for axes in &axes_choices {
            for keepdims in [false, true] {
                ops.push(Op::Reduce {
                    op,
                    axes: axes.clone(),
                    keepdims,
                });
            }
        }
    }
    for perm in [vec![], vec![0], vec![1, 0], vec![2, 0, 1], vec![0, 0]] {
        ops.push(Op::Transpose { perm });
    }
    for shape in [
        vec![],
        vec![-1],
        vec![3, -1],
        vec![-1, 0],
        vec![0, -1],
        vec![6],
        vec![1, 1, 3],
    ] {
        ops.push(Op::Reshape { shape });
    }
    for shape in [
        vec![],
        vec![3],
        vec![2, 3],
        vec![4, 2, 3],
        vec![0, 3],
        vec![3, 3],
    ] {
        ops.push(Op::BroadcastTo { shape });
    }
    for axes in [vec![], vec![0], vec![1], vec![0, 2], vec![3]] {
        ops.push(Op::ExpandDims { axes: axes.clone() });
        ops.push(Op::Squeeze { axes });
    }
    for (starts, stops, steps) in [
        (vec![], vec![], vec![]),
        (vec![1], vec![i64::MAX], vec![1]),
        (vec![i64::MAX], vec![i64::MIN], vec![-2]),
        (vec![-1, 0], vec![-3, 2], vec![-1, 2]),
        (vec![0], vec![1], vec![0]),
    ] {
        ops.push(Op::Slice {
            starts,
            stops,
            steps,
        });
    }
    let mut ran = 0;
    for x in &xs {
        for op in &ops {
            ran += check(op, &[x]) as usize;
        }
        for y in &xs {
            ran += check(&Op::MatMul, &[x, y]) as usize;
            for axis in 0..3 {
                ran += check(&Op::Concat { axis }, &[x, y]) as usize;
            }
        }
    }
    assert!(ran > 2000, "{ran}");
}

/// Doubles its f64 input; a second, hidden output counts the elements. Asks for scratch space
/// and checks it got it.
#[derive(Debug)]
struct Double;

impl CustomOp for Double {
    fn name(&self) -> &str {
        "double"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        match inputs {
            [t] if t.dtype == DType::F64 => Ok(vec![(*t).clone(), TensorType::scalar(DType::I64)]),
            _ => Err("takes one f64 tensor".into()),
        }
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        if ctx.temp.len() != 16 || ctx.requests != [WriteRequest::WriteTo; 2] {
            return Err("bad context".into());
        }
        let a = inputs[0].as_f64().ok_or("not f64")?;
        if a.iter().any(|v| v.is_nan()) {
            // Leaves output 1 empty: perform must report it.
            outputs[0] = Some(Tensor::F64(a * 2.0));
            return Ok(());
        }
        outputs[0] = Some(Tensor::F64(a * 2.0));
        outputs[1] = Some(Tensor::scalar(a.len() as i64));
        Ok(())
    }
    fn num_hidden_outputs(&self) -> usize {
        1
    }
    fn resources(&self) -> Vec<Resource> {
        vec![Resource::TempSpace(16)]
    }
}

#[test]
fn custom_ops_run_through_perform_with_all_their_outputs() {
    let op = Op::Custom(Double.into());
    let x = f64s(&[2], &[1.5, -2.0]);
    let outs = perform(&op, &[&x]).unwrap();
    assert_eq!(outs.len(), 2);
    same(&outs[0], &f64s(&[2], &[3.0, -4.0]));
    same(&outs[1], &i64s(&[], &[2]));
    let e = perform(&op, &[&f64s(&[1], &[f64::NAN])]).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = perform(&op, &[&i32s(&[1], &[1])]).unwrap_err();
    assert!(e.to_string().contains("double"), "{e}");
    assert!(perform(&op, &[&x, &x]).is_err());
}
