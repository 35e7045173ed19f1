//! The reference implementation of Composite ops: the scalar program interpreted one
//! instruction at a time over whole (broadcast) tensors, with the same elementwise functions
//! as the ops it is made of, so a Composite computes exactly what its unfused ops compute.

use super::elementwise::{binary, cast, select, unary};
use super::shape::broadcast_to;
use crate::error::Error;
use crate::ir::scalar::{ScalarOp, ScalarProgram};
use crate::ir::types::broadcast_shapes;
use crate::tensor::Tensor;

pub fn composite(program: &ScalarProgram, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
    let mut shape: Vec<usize> = Vec::new();
    for t in inputs {
        shape = broadcast_shapes(&shape, t.shape()).map_err(Error::Shape)?;
    }
    let mut regs: Vec<Tensor> = Vec::with_capacity(program.insts.len());
    for inst in &program.insts {
        let a = |k: usize| &regs[inst.args[k]];
        let v = match &inst.op {
            ScalarOp::Input(i) => (*inputs.get(*i).ok_or_else(|| {
                Error::Runtime(format!("composite reads input {i}, which is missing"))
            })?)
            .clone(),
            ScalarOp::Const(c) => Tensor::full(inst.dtype, &[], c.0),
            ScalarOp::Unary(u) => unary(*u, a(0))?,
            ScalarOp::Binary(b) => binary(*b, a(0), a(1))?,
            ScalarOp::Select => select(a(0), a(1), a(2))?,
            ScalarOp::Cast(t) => cast(a(0), *t),
        };
        regs.push(v);
    }
    program
        .outputs
        .iter()
        .map(|&o| {
            if regs[o].shape() == shape.as_slice() {
                Ok(regs[o].clone())
            } else {
                broadcast_to(&regs[o], &shape)
            }
        })
        .collect()
}
