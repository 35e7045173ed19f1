//! The plan's VM over a device: values live where a [`Device`] keeps them (GPU memory, host
//! memory), each step runs there with the device's own code (a kernel, a library call, a
//! view) or, where the device has none, as the op's `perform` on host copies of its
//! arguments, with its results copied back. `ifelse` reads its condition back and runs one
//! branch; `?` dims are checked before each step as in the interpreter; a value is dropped
//! after the step that reads it last.
//!
//! The GPU runtime (`jit_ptx::device::DeviceFunction`) is this VM over CUDA (or its host
//! stand-in); [`HostArrays`] is the host as such a device, every step through `perform`, which
//! tests the VM itself against the interpreter. Custom ops run on host copies with the
//! interpreter's `perform_custom` (their storage kept per step between calls, a fresh random
//! stream per call), every output requested `WriteTo`. The interpreter (`interp`) stays the VM
//! of host arrays with what only it does so far: write requests other than `WriteTo`, donated
//! and offered buffers, a buffer pool, row groups run by blocks.

use super::interp::{guarded, perform_custom};
use super::profile::Seen;
use crate::error::{Error, Result};
use crate::ir::custom::WriteRequest;
use crate::ir::{DType, Func, Op};
use crate::lower::{Kernel, Plan, Step, StepId};
use crate::tensor::{Tensor, TensorRef};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where a VM's values live and how steps run there.
pub trait Device: Send + Sync {
    /// An array on the device (cheap to clone: a handle).
    type Array: Clone;

    fn shape<'a>(&self, a: &'a Self::Array) -> &'a [usize];
    fn dtype(&self, a: &Self::Array) -> DType;
    /// A copy of a host array on the device.
    fn upload(&self, t: TensorRef<'_>) -> Result<Self::Array>;
    /// A host copy of a device array (after all work queued before).
    fn download(&self, a: &Self::Array) -> Result<Tensor>;
    /// Runs `step` (not an `ifelse` or row group) with the device's own code, or returns
    /// `Ok(None)` when it has none: the VM then runs it on host copies.
    fn run_step(&self, step: &Step, args: &[Self::Array]) -> Result<Option<Vec<Self::Array>>>;

    /// Waits for the work queued so far (the profiler times a step between two waits); a
    /// device that runs everything at once has nothing to wait for.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// What the device VM keeps between calls of one function: the call count (a custom op's
/// random stream is fresh per call, as in the interpreter) and each custom op's output
/// storage, by step.
#[derive(Default)]
pub struct VmState {
    calls: AtomicU64,
    storage: Mutex<HashMap<StepId, Vec<Option<Tensor>>>>,
    /// The function's profile, when it is being profiled (`runtime::profile`).
    profile: Option<Arc<super::profile::Profile>>,
}

/// Runs `plan`, lowered from `func`, on `device` with `inputs` (device arrays of the
/// parameters' types); the outputs stay on the device.
pub fn run_plan<D: Device>(
    device: &D,
    func: &Func,
    plan: &Plan,
    state: &VmState,
    inputs: &[&D::Array],
) -> Result<Vec<D::Array>> {
    super::check_input_count(func, inputs.len())?;
    let mut env: Vec<Option<D::Array>> = vec![None; func.values.len()];
    for (&p, &t) in func.params.iter().zip(inputs) {
        let (ty, shape, dtype) = (func.ty(p), device.shape(t), device.dtype(t));
        let fits = ty.dtype == dtype
            && ty.rank() == shape.len()
            && ty
                .shape
                .iter()
                .zip(shape)
                .all(|(a, b)| a.is_none_or(|a| a == *b));
        if !fits {
            return Err(Error::Input(format!(
                "{}: input {p} has type {ty}, got an array of {dtype} {shape:?}",
                func.name
            )));
        }
        env[p.index()] = Some(t.clone());
    }
    let calls = state.calls.fetch_add(1, Ordering::Relaxed) + 1;
    let vm = Vm {
        device,
        func,
        state,
        calls,
    };
    let started = match &state.profile {
        Some(_) => {
            device.synchronize()?;
            Some(std::time::Instant::now())
        }
        None => None,
    };
    vm.run_steps(&plan.steps, &mut env, true)?;
    if let (Some(p), Some(t0)) = (&state.profile, started) {
        device.synchronize()?;
        p.record_call(t0.elapsed());
    }
    func.outputs
        .iter()
        .map(|v| {
            env[v.index()]
                .clone()
                .ok_or_else(|| Error::Runtime(format!("{}: output {v} not computed", func.name)))
        })
        .collect()
}

struct Vm<'a, D: Device> {
    device: &'a D,
    func: &'a Func,
    state: &'a VmState,
    /// This call's number, from 1.
    calls: u64,
}

impl<D: Device> Vm<'_, D> {
    fn get(&self, env: &[Option<D::Array>], v: crate::ir::Value) -> Result<D::Array> {
        env[v.index()].clone().ok_or_else(|| {
            Error::Runtime(format!("{}: {v} used before it is defined", self.func.name))
        })
    }

    /// Runs `steps`, dropping values after their last use when `top_level` (inside a branch
    /// they are kept: its yields are read after its steps).
    fn run_steps(
        &self,
        steps: &[Step],
        env: &mut [Option<D::Array>],
        top_level: bool,
    ) -> Result<()> {
        for step in steps {
            // The profile times the function's own steps, each between two waits for the
            // device; what runs inside a branch or group counts in its step.
            let profiled = self.state.profile.as_ref().filter(|_| top_level);
            let before = match profiled {
                Some(_) => {
                    self.device.synchronize()?;
                    Some((self.seen(env, &step.args), std::time::Instant::now()))
                }
                None => None,
            };
            let results = match &step.kernel {
                Kernel::IfElse { then, otherwise } => {
                    let cond = self.device.download(&self.get(env, step.args[0])?)?;
                    let taken = cond.to_f64_vec().first().is_some_and(|&c| c != 0.0);
                    let branch = if taken { then } else { otherwise };
                    self.run_steps(&branch.steps, env, false)?;
                    branch
                        .yields
                        .iter()
                        .map(|&y| self.get(env, y))
                        .collect::<Result<Vec<_>>>()?
                }
                // A row group is a CPU schedule: its members run one after the other.
                Kernel::Rows { steps, .. } => {
                    self.run_steps(steps, env, false)?;
                    step.results
                        .iter()
                        .map(|&r| self.get(env, r))
                        .collect::<Result<Vec<_>>>()?
                }
                _ => {
                    let args = step
                        .args
                        .iter()
                        .map(|&a| self.get(env, a))
                        .collect::<Result<Vec<_>>>()?;
                    // `?` dims never broadcast: the interpreter's check, on the device shapes.
                    super::interp::check_stretch(self.func, step, |v| {
                        Ok(self.device.shape(&self.get(env, v)?).into())
                    })?;
                    self.run_step(step, &args)
                        .map_err(|e| step_error(self.func, step, e))?
                }
            };
            for (&r, t) in step.results.iter().zip(results) {
                env[r.index()] = Some(t);
            }
            if let (Some(p), Some((args, t0))) = (profiled, before) {
                self.device.synchronize()?;
                let time = t0.elapsed();
                let results = self.seen(env, &step.results);
                p.record_step(step, super::profile::measure(step, &args, &results, time));
            }
            if top_level {
                for v in &step.frees {
                    if !self.func.outputs.contains(v) {
                        env[v.index()] = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// The shapes of `values` where they are on the device, for the profile.
    fn seen(&self, env: &[Option<D::Array>], values: &[crate::ir::Value]) -> Vec<Seen> {
        values
            .iter()
            .filter_map(|&v| env[v.index()].as_ref())
            .map(|a| Seen::new(self.device.dtype(a), self.device.shape(a)))
            .collect()
    }

    /// One step: the device's code, else on host copies (`host_step`).
    fn run_step(&self, step: &Step, args: &[D::Array]) -> Result<Vec<D::Array>> {
        if let Some(outs) = self.device.run_step(step, args)? {
            return Ok(outs);
        }
        let host = args
            .iter()
            .map(|a| self.device.download(a))
            .collect::<Result<Vec<_>>>()?;
        let outs = match (&step.kernel, &step.op) {
            (Kernel::Perform, Op::Custom(c)) => {
                let refs: Vec<&Tensor> = host.iter().collect();
                let mut storage = self.state.storage.lock().unwrap_or_else(|e| e.into_inner());
                let slot = storage
                    .entry(step.id)
                    .or_insert_with(|| vec![None; step.results.len()]);
                let requests = vec![WriteRequest::WriteTo; step.results.len()];
                guarded(&step.op, || {
                    perform_custom(c, self.func, step, self.calls, &refs, slot, &requests)
                })?
            }
            _ => guarded(&step.op, || host_step(step, &host))?,
        };
        outs.iter().map(|t| self.device.upload(t.view())).collect()
    }
}

/// What a step (not an `ifelse` or row group) computes, on host arrays: the op's `perform`,
/// and for a product the plan's folded transposes and fused update.
pub fn host_step(step: &Step, args: &[Tensor]) -> Result<Vec<Tensor>> {
    if let Kernel::Gemm { transposed, update } = &step.kernel {
        let view = |k: usize| {
            let t = args[k].view();
            if transposed[k] {
                t.swap_last_two()
            } else {
                t
            }
        };
        if args.len() != 2 + usize::from(update.is_some()) {
            return Err(Error::Runtime(format!(
                "a gemm step with {} arguments",
                args.len()
            )));
        }
        let out = match update {
            None => crate::perform::matmul_into(&view(0), &view(1), None)?,
            Some(u) => {
                let mut w = args[2].clone();
                crate::perform::matmul_update(&view(0), &view(1), &mut w, u.scale)?;
                w
            }
        };
        return Ok(vec![out]);
    }
    let refs: Vec<&Tensor> = args.iter().collect();
    crate::perform::perform(&step.op, &refs)
}

/// A step's error with the op and the value it computes.
fn step_error(func: &Func, step: &Step, e: Error) -> Error {
    let at = format!("{} (%{})", step.op.display_name(), step.results[0].0);
    match e {
        Error::Runtime(m) => Error::Runtime(format!("{}: {at}: {m}", func.name)),
        Error::Shape(m) => Error::Shape(format!("{}: {at}: {m}", func.name)),
        other => other,
    }
}

/// The host as a device of this VM: arrays in host memory, every step through `perform`. It
/// is the reference the device VM is tested against the interpreter with.
pub struct HostArrays;

impl Device for HostArrays {
    type Array = Arc<Tensor>;

    fn shape<'a>(&self, a: &'a Arc<Tensor>) -> &'a [usize] {
        a.shape()
    }
    fn dtype(&self, a: &Arc<Tensor>) -> DType {
        a.dtype()
    }
    fn upload(&self, t: TensorRef<'_>) -> Result<Arc<Tensor>> {
        Ok(Arc::new(t.to_owned()))
    }
    fn download(&self, a: &Arc<Tensor>) -> Result<Tensor> {
        Ok((**a).clone())
    }
    fn run_step(&self, _: &Step, _: &[Arc<Tensor>]) -> Result<Option<Vec<Arc<Tensor>>>> {
        Ok(None)
    }
}

/// A plan on a device, called with host arrays (copied in and out): an `Executable` for
/// `Function`.
pub struct HostCalls<D: Device> {
    pub device: D,
    pub func: Func,
    pub plan: Plan,
    pub state: VmState,
}

impl<D: Device> super::Executable for HostCalls<D> {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let on = inputs
            .iter()
            .map(|t| self.device.upload(t.reborrow()))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&D::Array> = on.iter().collect();
        run_plan(&self.device, &self.func, &self.plan, &self.state, &refs)?
            .iter()
            .map(|a| self.device.download(a))
            .collect()
    }

    fn run_into(
        &self,
        inputs: &[TensorRef<'_>],
        _dests: Vec<Option<Tensor>>,
        donated: &mut [Option<Tensor>],
    ) -> Result<Vec<Tensor>> {
        // A donated parameter's buffer stands in for its (empty) input; it is read, not kept.
        let views: Vec<TensorRef<'_>> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match donated.get(i) {
                Some(Some(d)) => d.view(),
                _ => t.reborrow(),
            })
            .collect();
        self.run(&views)
    }

    fn start_profile(&mut self) -> bool {
        let p = super::profile::Profile::new(&self.func, &self.plan);
        self.state.profile = Some(Arc::new(p));
        true
    }

    fn profile(&self) -> Option<&super::profile::Profile> {
        self.state.profile.as_deref()
    }

    fn op_state(&self) -> super::state::OpState {
        let storage = self.state.storage.lock().unwrap_or_else(|e| e.into_inner());
        let calls = self.state.calls.load(Ordering::Relaxed);
        super::state::collect(&self.plan, calls, &storage)
    }

    fn set_op_state(&self, state: &super::state::OpState) -> Result<()> {
        let restored = super::state::restore(&self.func, &self.plan, state)?;
        let mut storage = self.state.storage.lock().unwrap_or_else(|e| e.into_inner());
        *storage = restored;
        self.state.calls.store(state.calls, Ordering::Relaxed);
        Ok(())
    }
}
