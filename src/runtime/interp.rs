//! The reference interpreter: runs an SSA function op by op with each op's `perform`.

use crate::error::Error;
use crate::ir::{Func, Inst, Value};
use crate::perform::perform;
use crate::tensor::Tensor;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `func` on `inputs` (one per parameter, already checked against the parameter types)
/// and returns its outputs.
pub fn run_func(func: &Func, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, Error> {
    if inputs.len() != func.params.len() {
        return Err(Error::Input(format!(
            "{} takes {} inputs, got {}",
            func.name,
            func.params.len(),
            inputs.len()
        )));
    }
    let mut env: Vec<Option<Tensor>> = vec![None; func.values.len()];
    for (&p, t) in func.params.iter().zip(inputs) {
        env[p.index()] = Some(t);
    }
    run_block(func, &func.body, &mut env)?;
    func.outputs
        .iter()
        .map(|&v| fetch(func, &env, v).cloned())
        .collect()
}

fn fetch<'a>(func: &Func, env: &'a [Option<Tensor>], v: Value) -> Result<&'a Tensor, Error> {
    env[v.index()].as_ref().ok_or_else(|| {
        Error::Runtime(format!(
            "{}: value {v} is used before it is defined",
            func.name
        ))
    })
}

fn run_block(func: &Func, body: &[Inst], env: &mut [Option<Tensor>]) -> Result<(), Error> {
    for inst in body {
        let args = inst
            .args
            .iter()
            .map(|&a| fetch(func, env, a))
            .collect::<Result<Vec<_>, _>>()?;
        // perform is the oracle and must not panic, but a panic is turned into an error rather
        // than taking the caller's process down.
        let outs = catch_unwind(AssertUnwindSafe(|| perform(&inst.op, &args))).map_err(|p| {
            Error::Runtime(format!(
                "{} panicked: {}",
                inst.op.name(),
                panic_message(&p)
            ))
        })??;
        if outs.len() != inst.results.len() {
            return Err(Error::Runtime(format!(
                "{} produced {} outputs, expected {}",
                inst.op.name(),
                outs.len(),
                inst.results.len()
            )));
        }
        for (&r, t) in inst.results.iter().zip(outs) {
            let ty = func.ty(r);
            if t.dtype() != ty.dtype || !ty.accepts_shape(t.shape()) {
                return Err(Error::Shape(format!(
                    "{} produced {}{:?} where its type says {ty}",
                    inst.op.name(),
                    t.dtype(),
                    t.shape()
                )));
            }
            env[r.index()] = Some(t);
        }
    }
    Ok(())
}

/// The message of a caught panic payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// The interpreter as a backend.
pub struct Interpreter {
    func: Func,
}

impl Interpreter {
    pub fn new(func: Func) -> Interpreter {
        Interpreter { func }
    }
}

impl super::Executable for Interpreter {
    fn run(&self, inputs: &[crate::tensor::TensorRef<'_>]) -> Result<Vec<Tensor>, Error> {
        run_func(&self.func, inputs.iter().map(|t| t.to_owned()).collect())
    }
}
