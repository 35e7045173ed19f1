//! A custom op's step: its kept output storage, its resources (scratch space, a random
//! stream fresh per call and per step), MXNet's write requests, and its outputs sized by its
//! shape function before `perform`.

use super::requests::WritePlan;
use crate::error::Error;
use crate::ir::custom::{CustomOpRef, PerformContext, Resource, WriteRequest};
use crate::ir::{Func, Op};
use crate::lower::Step;
use crate::tensor::Tensor;

/// Runs a custom op with its kept output storage, its resources and write requests.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_custom(
    c: &CustomOpRef,
    func: &Func,
    inst: &Step,
    calls: u64,
    plan: &WritePlan,
    args: &[&Tensor],
    slot: &mut [Option<Tensor>],
    donated: Option<Tensor>,
    accumulators: Vec<(usize, Tensor)>,
) -> Result<Vec<Tensor>, Error> {
    let mut requests = vec![WriteRequest::WriteTo; inst.results.len()];
    if let Some(t) = donated {
        slot[0] = Some(t);
        requests[0] = WriteRequest::WriteInplace;
    }
    for (i, r) in inst.results.iter().enumerate() {
        if plan.null.contains(r) {
            requests[i] = WriteRequest::Null;
        }
    }
    for (i, t) in accumulators {
        slot[i] = Some(t);
        requests[i] = WriteRequest::AddTo;
    }
    perform_custom(c, func, inst, calls, args, slot, &requests)
}

/// A custom op's `perform` at `step` of `func` in call number `calls`: its scratch
/// space and random stream (fresh per call and per step), `slot` the storage kept for its
/// outputs between calls (holding, where `requests` say so, a buffer to write in place or add
/// to). Returns the outputs: those written in place or added to move on, the others are
/// copies of what stays in `slot` for the next call to reuse.
fn perform_custom(
    c: &CustomOpRef,
    func: &Func,
    step: &Step,
    calls: u64,
    args: &[&Tensor],
    slot: &mut [Option<Tensor>],
    requests: &[WriteRequest],
) -> Result<Vec<Tensor>, Error> {
    let mut temp = Vec::new();
    let mut seed = 0;
    for r in c.resources() {
        match r {
            Resource::TempSpace(n) => temp = vec![0u8; n],
            // A fresh stream per call and per op: the call count and the op's position.
            Resource::Random => seed = (calls << 32) ^ step.id.0 as u64,
        }
    }
    presize_outputs(c, func, step, args, slot, requests);
    let mut ctx = PerformContext {
        requests,
        temp: &mut temp,
        seed,
    };
    c.perform(args, slot, &mut ctx)
        .map_err(|e| Error::Runtime(format!("{}: {e}", c.name())))?;
    // An output written in place moves on (its buffer was the input's); other outputs stay in
    // the kept storage for the next call to reuse, and the caller gets a copy.
    slot.iter_mut()
        .zip(requests)
        .map(|(o, r)| {
            let t = match r {
                // The buffer came from elsewhere (an input, an accumulator): it moves on.
                WriteRequest::WriteInplace | WriteRequest::AddTo => o.take(),
                // Nobody reads it: whatever the op left, or an empty stand-in.
                WriteRequest::Null => Some(
                    o.clone()
                        .unwrap_or_else(|| Tensor::empty(crate::ir::DType::Bool)),
                ),
                WriteRequest::WriteTo => o.clone(),
            };
            t.ok_or_else(|| Error::Runtime(format!("{}: perform left an output empty", c.name())))
        })
        .collect()
}

/// Gives each visible `WriteTo` output whose kept storage does not have the type the op's
/// shape function (`infer_shape`, through `make_node`) gives for these inputs (none yet on
/// the first call; another shape when the inputs changed) a zeroed buffer of that type, so
/// `perform` finds its outputs sized (MXNet's and Theano's allocated outputs). Where the shape
/// function cannot say, the op allocates them itself, as before. Outputs whose types in
/// `func` know their shapes are checked against those: the shape function runs per call only
/// for an op with an output of open shape, or before a kept buffer exists.
fn presize_outputs(
    c: &CustomOpRef,
    func: &Func,
    step: &Step,
    args: &[&Tensor],
    slot: &mut [Option<Tensor>],
    requests: &[WriteRequest],
) {
    let visible = slot.len().saturating_sub(c.num_hidden_outputs());
    let written = |i: usize| requests.get(i) == Some(&WriteRequest::WriteTo);
    let kept = |slot: &[Option<Tensor>], i: usize| {
        let ty = func.ty(step.results[i]);
        slot[i].as_ref().is_some_and(|t| {
            ty.known_shape().is_some() && t.dtype() == ty.dtype && ty.accepts_shape(t.shape())
        })
    };
    if (0..visible).all(|i| !written(i) || kept(slot, i)) {
        return;
    }
    let tys: Vec<crate::ir::TensorType> = args
        .iter()
        .map(|t| crate::ir::TensorType::fixed(t.dtype(), t.shape()))
        .collect();
    let refs: Vec<&crate::ir::TensorType> = tys.iter().collect();
    let Ok(outs) = crate::ir::infer(&Op::Custom(c.clone()), &refs) else {
        return;
    };
    for (i, ty) in outs.iter().enumerate().take(visible) {
        let Some(shape) = ty.known_shape().filter(|_| written(i)) else {
            continue;
        };
        let sized = |t: &Tensor| t.dtype() == ty.dtype && t.shape() == shape.as_slice();
        // Buffers large enough that allocating them might fail are left to the op (the VM
        // checks such results before the step, `memory::check_fits`, where it runs).
        let bytes = shape
            .iter()
            .try_fold(ty.dtype.size(), |n, &d| n.checked_mul(d));
        if !slot[i].as_ref().is_some_and(sized)
            && bytes.is_some_and(|b| b < super::memory::PROBE_BYTES)
        {
            slot[i] = Some(Tensor::zeros(ty.dtype, &shape));
        }
    }
}
