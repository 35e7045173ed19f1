//! The direct call: small functions whose plan is a chain of map kernels over shapes known at
//! compile time (W7's `x + 1` on ten floats) are called without the VM.
//!
//! For such a function everything the VM decides per call is decided once, here: each
//! kernel's `rows x cols` and operand strides, and where each value lives (an input, an
//! output buffer, a slice of scratch memory for intermediates, placed by `lower::memory`). A call then checks that the
//! inputs are contiguous and the output buffers fit, and calls the kernels one after another.
//! Anything else (a strided input, a buffer of another shape that must be replaced first, a
//! second thread calling at the same time) is still served: the first two are handled here,
//! the last by the VM, which every function keeps.
//!
//! Only kernels too small to be split across threads qualify: above `PARALLEL_MIN` elements
//! the work dwarfs the VM's bookkeeping, and the VM runs the kernel on all threads.

use super::layout::{layout, Operand};
use super::{uninit, JitCode, PARALLEL_MIN};
use crate::codegen::clif::map::KernelFn;
use crate::error::Result;
use crate::for_each_dtype;
use crate::ir::{DType, Func, Value};
use crate::lower::memory::{place, Lifetime};
use crate::lower::{Kernel, Plan, StepId};
use crate::runtime::interp::Interpreter;
use crate::runtime::Executable;
use crate::tensor::{Tensor, TensorRef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where a value lives during a direct call.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Input(usize),
    Output(usize),
    /// Byte offset into the scratch memory (while planning: the value's index among the
    /// intermediates).
    Scratch(usize),
}

/// One kernel call with everything about it fixed: operands (inputs, then results) with
/// their byte strides per row and per column.
struct Call {
    f: KernelFn,
    rows: i64,
    cols: i64,
    slots: Vec<Slot>,
    outer: Vec<i64>,
    inner: Vec<i64>,
}

/// A function's direct form (see the module docs).
pub(super) struct Direct {
    inputs: Vec<(DType, Vec<usize>)>,
    outputs: Vec<(DType, Vec<usize>)>,
    calls: Vec<Call>,
    /// Intermediates' memory, 16-byte units (the width of the kernels' vectors). Locked by a
    /// call; a call that finds it taken goes through the VM.
    scratch: Mutex<Vec<u128>>,
    _code: Arc<JitCode>,
}

impl Direct {
    /// The direct form of `func`, whose plan is `plan`, when it qualifies: every step is a map
    /// kernel of `kernels` (the compiled map kernels and their number of results, by step) over
    /// a shape
    /// known here and smaller than `PARALLEL_MIN`, reading inputs and earlier results, and
    /// every output is a distinct step result.
    pub(super) fn plan(
        func: &Func,
        plan: &Plan,
        kernels: &HashMap<StepId, (KernelFn, usize)>,
        code: Arc<JitCode>,
    ) -> Option<Direct> {
        let known = |v: Value| {
            let ty = func.ty(v);
            ty.known_shape().map(|s| (ty.dtype, s))
        };
        let inputs: Vec<(DType, Vec<usize>)> = func
            .params
            .iter()
            .map(|&p| known(p))
            .collect::<Option<_>>()?;
        let mut at: HashMap<Value, Slot> = HashMap::new();
        for (i, &p) in func.params.iter().enumerate() {
            at.insert(p, Slot::Input(i));
        }
        let mut outputs = Vec::new();
        for (i, &v) in func.outputs.iter().enumerate() {
            if at.contains_key(&v) {
                // An input returned, or an output returned twice: the VM copies those.
                return None;
            }
            at.insert(v, Slot::Output(i));
            outputs.push(known(v)?);
        }
        // Intermediates, placed once their lifetimes are known (`lower::memory`): until then
        // a `Slot::Scratch` holds an index into this list.
        let mut lives: Vec<Lifetime> = Vec::new();
        let mut calls = Vec::new();
        for (t, step) in plan.steps.iter().enumerate() {
            let (Kernel::Map { .. }, Some(r)) = (&step.kernel, step.results.first()) else {
                return None;
            };
            let &(f, n_out) = kernels.get(&step.id)?;
            if n_out != step.results.len() {
                return None;
            }
            let (_, shape) = known(*r)?;
            let n: usize = shape.iter().product();
            if n >= PARALLEL_MIN {
                return None;
            }
            let mut arg_slots = Vec::new();
            let mut arg_shapes = Vec::new();
            for &a in &step.args {
                let slot = *at.get(&a)?;
                if let Slot::Scratch(k) = slot {
                    lives[k].last = t;
                }
                arg_slots.push(slot);
                let ty = func.ty(a);
                arg_shapes.push((ty.known_shape()?, ty.dtype.size()));
            }
            let operands: Vec<Operand> = arg_shapes
                .iter()
                .map(|(s, size)| Operand::standard(s, *size))
                .collect();
            // Calls whose layout has planes (a broadcast the kernel's block cannot express
            // in one call) go through the VM, which loops over them.
            let l = layout(&shape, &operands, false);
            if l.n_planes != 1 {
                return None;
            }
            let (rows, cols) = (l.rows, l.cols);
            let mut call = Call {
                f,
                rows: rows as i64,
                cols: cols as i64,
                slots: arg_slots,
                outer: l.outer.to_vec(),
                inner: l.inner.to_vec(),
            };
            // The results, each of the step's shape (elementwise), after the arguments.
            for &r in &step.results {
                let (dtype, rs) = known(r)?;
                if rs != shape {
                    return None;
                }
                let slot = match at.get(&r) {
                    Some(&s @ Slot::Output(_)) => s,
                    Some(_) => return None,
                    None => {
                        let s = Slot::Scratch(lives.len());
                        lives.push(Lifetime {
                            bytes: n * dtype.size(),
                            first: t,
                            last: t,
                        });
                        at.insert(r, s);
                        s
                    }
                };
                call.slots.push(slot);
                call.outer.push((cols * dtype.size()) as i64);
                call.inner.push(dtype.size() as i64);
            }
            calls.push(call);
        }
        // Every output must be computed by a step (not, say, a constant the VM makes).
        let computed = |i: usize| {
            plan.steps
                .iter()
                .any(|st| st.results.contains(&func.outputs[i]))
        };
        if calls.is_empty() || !(0..outputs.len()).all(computed) {
            return None;
        }
        // 16 bytes: the width of the kernels' vectors.
        let (offsets, scratch_bytes) = place(&lives, 16);
        for slot in calls.iter_mut().flat_map(|c| c.slots.iter_mut()) {
            if let Slot::Scratch(k) = slot {
                *k = offsets[*k];
            }
        }
        Some(Direct {
            inputs,
            outputs,
            calls,
            scratch: Mutex::new(vec![0u128; scratch_bytes / 16]),
            _code: code,
        })
    }

    /// Runs the kernels on `inputs` into `outputs` (buffers that do not fit are replaced), or
    /// returns `false`, having changed nothing, when the call must go through the VM.
    fn call(&self, inputs: &[TensorRef<'_>], outputs: &mut [Tensor]) -> bool {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return false;
        }
        let fits = inputs.iter().zip(&self.inputs).all(|(t, (d, s))| {
            t.dtype() == *d && t.shape() == s.as_slice() && (t.len() <= 1 || t.is_standard_layout())
        });
        if !fits {
            return false;
        }
        let Ok(mut scratch) = self.scratch.try_lock() else {
            return false;
        };
        for (o, (d, s)) in outputs.iter_mut().zip(&self.outputs) {
            let ok = o.dtype() == *d
                && o.shape() == s.as_slice()
                && for_each_dtype!(o, a => a.is_standard_layout());
            if !ok {
                *o = uninit(*d, s);
            }
        }
        let scratch = scratch.as_mut_ptr() as *mut u8;
        let outs: smallvec::SmallVec<[*mut u8; 4]> = outputs
            .iter_mut()
            .map(|o| for_each_dtype!(o, a => a.as_mut_ptr() as *mut u8))
            .collect();
        for c in &self.calls {
            let ptrs: smallvec::SmallVec<[*mut u8; 8]> = c
                .slots
                .iter()
                .map(|s| match *s {
                    Slot::Input(i) => inputs[i].as_ptr() as *mut u8,
                    Slot::Output(i) => outs[i],
                    // SAFETY: offsets were laid out within the scratch memory.
                    Slot::Scratch(off) => unsafe { scratch.add(off) },
                })
                .collect();
            // SAFETY: every operand is contiguous with the shape `plan` derived the strides
            // from (inputs were checked above, outputs fit or were replaced, scratch slices
            // are sized for their values); results go to outputs or scratch, distinct from
            // the inputs the caller lent and from each other; the code is alive.
            unsafe {
                (c.f)(
                    c.rows,
                    c.cols,
                    ptrs.as_ptr(),
                    c.outer.as_ptr(),
                    c.inner.as_ptr(),
                )
            };
        }
        true
    }
}

/// The CPU backend's executable: the VM with its compiled thunks, and the direct form when
/// the function has one.
pub(super) struct CpuExecutable {
    pub(super) vm: Interpreter,
    pub(super) direct: Option<Direct>,
}

impl Executable for CpuExecutable {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        self.vm.run(inputs)
    }

    fn run_into(
        &self,
        inputs: &[TensorRef<'_>],
        dests: Vec<Option<Tensor>>,
        donated: &mut [Option<Tensor>],
    ) -> Result<Vec<Tensor>> {
        self.vm.run_into(inputs, dests, donated)
    }

    fn has_direct_call(&self) -> bool {
        self.direct.is_some()
    }

    fn call_direct(&self, inputs: &[TensorRef<'_>], outputs: &mut [Tensor]) -> bool {
        self.direct
            .as_ref()
            .is_some_and(|d| d.call(inputs, outputs))
    }

    fn start_profile(&mut self) -> bool {
        // The direct form runs the whole call as one: the VM times the steps.
        self.direct = None;
        self.vm.start_profile()
    }

    fn profile(&self) -> Option<&crate::runtime::profile::Profile> {
        self.vm.profile()
    }

    fn op_state(&self) -> crate::runtime::state::OpState {
        self.vm.op_state()
    }

    fn set_op_state(&self, state: &crate::runtime::state::OpState) -> Result<()> {
        self.vm.set_op_state(state)
    }
}
