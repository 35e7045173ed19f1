//! The VM: runs a plan (`lower::Plan`) step by step on a [`Device`]. One walk of the plan
//! serves every backend: the host (the reference interpreter, and the CPU backend with its
//! compiled kernels), the GPU, and the copying test device. It checks `?` dims before each
//! step, runs lazy `ifelse` (the condition read back), row groups (by the device, or member
//! by member), custom ops with their kept storage and MXNet's write requests (`requests`),
//! in-place steps where the device can write in place, donated and offered buffers, and keeps
//! the buffers of dead values for the next steps and calls, so that a steady state of calls
//! allocates nothing. What a step computes is the device's own code where it has some
//! (`Device::runs`), else the op's `perform` on host copies of the arguments (no copies on
//! the host).

use super::custom_step::run_custom;
use super::device::Device;
use super::interp::guarded;
use super::requests::WritePlan;
use crate::error::Error;
use crate::ir::{DType, Func, Op, TensorType, Value};
use crate::lower::{Branch, Kernel, Plan, Step, StepId};
use crate::tensor::Tensor;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the VM keeps between calls of one function: each custom op's output storage (by
/// step), the call count (a custom op's random stream is fresh per call), the write requests
/// planned for the function, the value slots and the buffers of dead values.
pub struct VmState<D: Device> {
    pub(super) storage: HashMap<StepId, Vec<Option<Tensor>>>,
    pub(super) calls: u64,
    /// Write requests planned for the custom ops of the function being run.
    pub(super) requests: Arc<WritePlan>,
    /// Which plan `requests` and `param_index` were made for (its serial number).
    planned_for: Option<u64>,
    /// For each value, its position among the parameters, if it is one.
    param_index: Vec<Option<usize>>,
    /// The value slots of a call, kept (empty) for the next one.
    slots: Vec<Option<D::Array>>,
    /// Buffers of intermediates that died, kept for the kernels of the next steps and calls,
    /// so that a steady state of calls does not allocate (or fault in) large arrays.
    pool: Vec<Pooled<D>>,
    /// The function's profile, when it is being profiled: each step of the function's own
    /// block is timed (taken while a step runs, so the steps inside it are not counted twice).
    pub(super) profile: Option<Arc<super::profile::Profile>>,
    /// The time a profiled call has spent inside kernels so far (compiled code, a row group's
    /// blocks, an op's `perform`), at any depth: `None` when the call is not profiled.
    kernel_time: Option<std::time::Duration>,
}

impl<D: Device> Default for VmState<D> {
    fn default() -> Self {
        VmState {
            storage: HashMap::new(),
            calls: 0,
            requests: Arc::default(),
            planned_for: None,
            param_index: Vec::new(),
            slots: Vec::new(),
            pool: Vec::new(),
            profile: None,
            kernel_time: None,
        }
    }
}

/// A dead buffer the pool keeps, with its dtype and shape (found without a view of it: the
/// pool is searched before most steps).
struct Pooled<D: Device> {
    dtype: DType,
    shape: smallvec::SmallVec<[usize; 6]>,
    buffer: D::Array,
}

/// How many dead buffers the pool keeps at most.
const POOL_MAX: usize = 16;

/// Buffers smaller than this are not worth keeping.
const POOL_MIN_BYTES: usize = 1 << 16;

impl<D: Device> VmState<D> {
    /// Whether the calls are being profiled (every step timed: a device then runs them step
    /// by step, not replayed).
    pub fn profiling(&self) -> bool {
        self.profile.is_some()
    }

    /// The calls counted so far (what a custom op's random stream is drawn from).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Sets the count of calls: one more for a call the device ran without the VM (a replay
    /// of a recorded one), or back to what it was before a call that did not happen (a
    /// recording that was refused, then run again).
    pub fn set_calls(&mut self, calls: u64) {
        self.calls = calls;
    }

    /// A kept buffer of exactly this dtype and shape, if there is one.
    pub(super) fn take_buffer(&mut self, _device: &D, ty: &TensorType) -> Option<D::Array> {
        self.take_pooled(|p| {
            p.dtype == ty.dtype
                && p.shape.len() == ty.shape.len()
                && p.shape.iter().zip(&ty.shape).all(|(&n, &d)| d == Some(n))
        })
    }

    /// A kept buffer of exactly this dtype and run-time shape, if there is one.
    pub(super) fn take_buffer_shaped(&mut self, dtype: DType, shape: &[usize]) -> Option<D::Array> {
        self.take_pooled(|p| p.dtype == dtype && p.shape.as_slice() == shape)
    }

    fn take_pooled(&mut self, fits: impl Fn(&Pooled<D>) -> bool) -> Option<D::Array> {
        let i = self.pool.iter().position(fits)?;
        Some(self.pool.swap_remove(i).buffer)
    }

    pub(super) fn keep_buffer(&mut self, device: &D, t: D::Array) {
        if device.pooled_bytes(&t).is_none_or(|b| b < POOL_MIN_BYTES) {
            return;
        }
        let v = device.view(&t);
        // A restrided buffer (a moved view's) is not one a step could write row-major into.
        if !device.is_dense(&v) {
            return;
        }
        let (dtype, shape) = (device.dtype(&v), device.shape(&v).into());
        drop(v);
        if self.pool.len() == POOL_MAX {
            self.pool.remove(0);
        }
        self.pool.push(Pooled {
            dtype,
            shape,
            buffer: t,
        });
    }
}

/// What an executable keeps for the VM between calls of one function: its state (a call that
/// finds it busy, from another thread, runs with a fresh one: ops' storage reuse is an
/// optimization, never required) and its profile once profiling started.
pub struct Kept<D: Device> {
    state: Mutex<VmState<D>>,
    profile: Option<Arc<super::profile::Profile>>,
}

impl<D: Device> Default for Kept<D> {
    fn default() -> Self {
        Kept {
            state: Mutex::new(VmState::default()),
            profile: None,
        }
    }
}

impl<D: Device> Kept<D> {
    /// Runs `f` with the kept state, or a fresh one (with the same profile) when it is busy.
    pub fn with<R>(&self, f: impl FnOnce(&mut VmState<D>) -> R) -> R {
        match self.state.try_lock() {
            Ok(mut st) => f(&mut st),
            Err(std::sync::TryLockError::Poisoned(p)) => f(&mut p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => f(&mut VmState {
                profile: self.profile.clone(),
                ..VmState::default()
            }),
        }
    }

    /// Times every step of every call from now on (`Executable::start_profile`).
    pub fn start_profile(&mut self, func: &Func, plan: &Plan) {
        let p = Arc::new(super::profile::Profile::new(func, plan));
        self.state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .profile = Some(p.clone());
        self.profile = Some(p);
    }

    /// The profile the calls record into, once profiling has started.
    pub fn profile(&self) -> Option<&super::profile::Profile> {
        self.profile.as_deref()
    }

    /// The custom ops' hidden outputs and the call count (`runtime::state`).
    pub fn op_state(&self, plan: &Plan) -> super::state::OpState {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        super::state::collect(plan, st.calls, &st.storage)
    }

    /// Replaces the custom ops' storage and the call count with `state`, checked against the
    /// plan first (`state::restore`: an error changes nothing).
    pub fn set_op_state(
        &self,
        func: &Func,
        plan: &Plan,
        state: &super::state::OpState,
    ) -> Result<(), Error> {
        let storage = super::state::restore(func, plan, state)?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.storage = storage;
        st.calls = state.calls;
        Ok(())
    }
}

/// Buffers offered for outputs, by value.
pub(super) type Offered<D> = smallvec::SmallVec<[(Value, <D as Device>::Array); 2]>;

pub(super) fn take_offered<D: Device>(offered: &mut Offered<D>, v: Value) -> Option<D::Array> {
    let i = offered.iter().position(|(o, _)| *o == v)?;
    Some(offered.swap_remove(i).1)
}

/// The values of one call: what steps computed (owned), and the caller's inputs (borrowed).
/// An input is copied into `values` only when something needs it owned (an op's `perform`,
/// an output); the device's own code reads it where it is.
pub struct Env<'e, 'p, D: Device + 'p> {
    pub(super) values: Vec<Option<D::Array>>,
    /// Caller's buffers offered for outputs, by the value they would hold (a few: searched).
    pub(super) dests: Offered<D>,
    params: &'e [D::Ref<'p>],
    param_index: &'e [Option<usize>],
}

impl<'e, 'p, D: Device> Env<'e, 'p, D> {
    /// An environment of `values` and `dests` where the values that `param_index` places are
    /// read, borrowed, from `params` (a call's inputs; in a scan's body, also the slices of its
    /// sequences).
    pub(super) fn with_params(
        values: Vec<Option<D::Array>>,
        dests: Offered<D>,
        params: &'e [D::Ref<'p>],
        param_index: &'e [Option<usize>],
    ) -> Self {
        Env {
            values,
            dests,
            params,
            param_index,
        }
    }

    /// The borrowed values and each value's place among them, if it is one.
    pub(super) fn params(&self) -> (&'e [D::Ref<'p>], &'e [Option<usize>]) {
        (self.params, self.param_index)
    }
}

impl<D: Device> Env<'_, '_, D> {
    /// Makes `v` available to `fetch`: copies a parameter the first time it is asked for.
    pub(super) fn own(&mut self, device: &D, v: Value) -> Result<(), Error> {
        if self.values[v.index()].is_none() {
            if let Some(i) = self.param_index[v.index()] {
                let r = device.reborrow(&self.params[i]);
                self.values[v.index()] = Some(device.to_owned(r)?);
            }
        }
        Ok(())
    }

    /// A view of `v`, without copying a parameter.
    pub(super) fn view(&self, device: &D, func: &Func, v: Value) -> Result<D::Ref<'_>, Error> {
        match (&self.values[v.index()], self.param_index[v.index()]) {
            (Some(t), _) => Ok(device.view(t)),
            (None, Some(i)) => Ok(device.reborrow(&self.params[i])),
            (None, None) => fetch(func, &self.values, v).map(|t| device.view(t)),
        }
    }

    /// The run-time shape of `v`.
    pub(super) fn shape(
        &self,
        device: &D,
        func: &Func,
        v: Value,
    ) -> Result<smallvec::SmallVec<[usize; 6]>, Error> {
        self.view(device, func, v).map(|t| device.shape(&t).into())
    }
}

/// Runs `plan`, the lowered form of `func` (whose value types it reads), on `device` step by
/// step: the device's own code where it has some, the op's `perform` otherwise, and each
/// step's `frees` handed to the buffer pool after it. `dests[i]` is offered as the storage of
/// output `i`; `donated[i]`, where `Some`, is parameter `i`'s own buffer, which the function
/// may overwrite (see `Executable::run_into`; `donated` may be shorter than the parameters).
pub fn run_plan_into<D: Device>(
    device: &D,
    func: &Func,
    plan: &Plan,
    inputs: &[D::Ref<'_>],
    dests: Vec<Option<D::Array>>,
    donated: &mut [Option<D::Array>],
    state: &mut VmState<D>,
) -> Result<Vec<D::Array>, Error> {
    super::check_input_count(func, inputs.len())?;
    state.calls += 1;
    if state.planned_for != Some(plan.serial) {
        state.param_index = vec![None; func.values.len()];
        for (i, &p) in func.params.iter().enumerate() {
            state.param_index[p.index()] = Some(i);
        }
        state.requests = Arc::new(super::requests::plan(func));
        state.planned_for = Some(plan.serial);
    }
    let param_index = std::mem::take(&mut state.param_index);
    let mut offered = Offered::<D>::new();
    for (&v, d) in func.outputs.iter().zip(dests) {
        if let Some(d) = d {
            if param_index[v.index()].is_none() && !offered.iter().any(|(o, _)| *o == v) {
                offered.push((v, d));
            }
        }
    }
    // The value slots of the previous call, all empty again: no allocation per call.
    let mut values = std::mem::take(&mut state.slots);
    values.resize_with(func.values.len(), || None);
    let mut env = Env {
        values,
        dests: offered,
        params: inputs,
        param_index: &param_index,
    };
    // Donated parameters are values the function owns from the start.
    let mut donated_at: smallvec::SmallVec<[(usize, usize); 4]> = Default::default();
    for (i, d) in donated.iter_mut().enumerate() {
        if let (Some(t), Some(&p)) = (d.take(), func.params.get(i)) {
            if let Some(at) = device.address(&t) {
                donated_at.push((i, at));
            }
            env.values[p.index()] = Some(t);
        }
    }
    let started = match &state.profile {
        Some(_) => {
            device.synchronize()?;
            state.kernel_time = Some(std::time::Duration::ZERO);
            Some(std::time::Instant::now())
        }
        None => None,
    };
    let ran = run_steps(device, func, &plan.steps, true, &mut env, state);
    if ran.is_err() {
        give_back_donated(device, &donated_at, donated, &mut env.values, state);
    }
    // Offered buffers nothing wrote into: the result is copied there, so the caller keeps
    // its buffer whatever computed the output.
    let mut leftover = std::mem::take(&mut env.dests);
    let mut values = std::mem::take(&mut env.values);
    let outs = ran.and_then(|()| {
        collect_outputs(
            device,
            func,
            inputs,
            &param_index,
            &mut values,
            &mut leftover,
            state,
        )
    });
    state.param_index = param_index;
    values.clear();
    state.slots = values;
    if let (Some(p), Some(t0)) = (&state.profile, started) {
        device.synchronize()?;
        let in_kernels = state.kernel_time.take().unwrap_or_default();
        p.record_call(t0, t0.elapsed(), in_kernels);
    }
    outs
}

/// After a failed call, puts each donated buffer back where it came from, found by its address
/// among the values and the pool (an in-place step may have moved it to another value).
fn give_back_donated<D: Device>(
    device: &D,
    donated_at: &[(usize, usize)],
    donated: &mut [Option<D::Array>],
    values: &mut [Option<D::Array>],
    state: &mut VmState<D>,
) {
    for &(i, at) in donated_at {
        let here = |t: &D::Array| device.address(t) == Some(at);
        donated[i] = match values.iter().position(|v| v.as_ref().is_some_and(here)) {
            Some(k) => values[k].take(),
            None => (state.pool.iter())
                .position(|p| here(&p.buffer))
                .map(|k| state.pool.swap_remove(k).buffer),
        };
    }
}

/// The function's outputs, moved out of the values (one returned twice is copied for its
/// earlier places), each in its offered buffer where there is one.
fn collect_outputs<D: Device>(
    device: &D,
    func: &Func,
    inputs: &[D::Ref<'_>],
    param_index: &[Option<usize>],
    env: &mut [Option<D::Array>],
    leftover: &mut Offered<D>,
    state: &mut VmState<D>,
) -> Result<Vec<D::Array>, Error> {
    let outs = &func.outputs;
    (0..outs.len())
        .map(|i| {
            let v = outs[i];
            let t = if let (None, Some(k)) = (&env[v.index()], param_index[v.index()]) {
                device.to_owned(device.reborrow(&inputs[k]))?
            } else if outs[i + 1..].contains(&v) {
                device.to_owned(device.view(fetch(func, env, v)?))?
            } else {
                env[v.index()].take().ok_or_else(|| {
                    Error::Runtime(format!("{}: output {v} is not defined", func.name))
                })?
            };
            Ok(match take_offered::<D>(leftover, v) {
                Some(mut d) => {
                    // The computed buffer, copied into the caller's, serves the next call.
                    if let Some(spare) = device.assign(&mut d, t) {
                        state.keep_buffer(device, spare);
                    }
                    d
                }
                None => device.row_major(t),
            })
        })
        .collect()
}

pub(super) fn fetch<'a, A>(func: &Func, env: &'a [Option<A>], v: Value) -> Result<&'a A, Error> {
    env[v.index()].as_ref().ok_or_else(|| {
        Error::Runtime(format!(
            "{}: value {v} is used before it is defined",
            func.name
        ))
    })
}

/// Checks a step's `?`-typed argument axes against the run-time shapes (`lower::stretch`):
/// such a dim never broadcasts, so one of extent 1 meeting a larger extent is an error that
/// names the operand and the axis. `shape_of` gives an argument's run-time shape.
pub(crate) fn check_stretch(
    func: &Func,
    step: &Step,
    shape_of: impl Fn(Value) -> Result<smallvec::SmallVec<[usize; 6]>, Error>,
) -> Result<(), Error> {
    let Some(check) = &step.stretch else {
        return Ok(());
    };
    let shapes = step
        .args
        .iter()
        .map(|&a| shape_of(a))
        .collect::<Result<smallvec::SmallVec<[_; 4]>, Error>>()?;
    let refs: smallvec::SmallVec<[&[usize]; 4]> = shapes.iter().map(|s| s.as_slice()).collect();
    check.check(&refs).map_err(|s| {
        let operand = func.describe(step.args[s.arg]);
        let what = match check.frame {
            crate::lower::stretch::Frame::To(_) => "the target shape has",
            _ => "the other operands have",
        };
        let why = if s.extent == 1 {
            "; its type says `?` there, and a `?` dim never broadcasts (give it the type 1 to \
             broadcast it)"
        } else {
            ""
        };
        Error::Shape(format!(
            "{}: {operand} has extent {} on axis {} where {what} {}{why}",
            step.op.display_name(),
            s.extent,
            s.axis,
            s.target
        ))
    })
}

/// Runs the steps of one block (`top_level`: the function's own, where the custom ops' write
/// requests apply and the profile times each step).
pub(super) fn run_steps<D: Device>(
    device: &D,
    func: &Func,
    steps: &[Step],
    top_level: bool,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) -> Result<(), Error> {
    for inst in steps {
        match state.profile.take() {
            None => run_step(device, func, inst, top_level, env, state),
            Some(p) => {
                let ran = profiled_step(device, &p, func, inst, top_level, env, state);
                state.profile = Some(p);
                ran
            }
        }
        .map_err(|e| step_error(func, inst, e))?;
    }
    Ok(())
}

/// `run_step`, timed between two waits for the device, with the shapes of what it read and
/// wrote recorded in `profile`.
fn profiled_step<D: Device>(
    device: &D,
    profile: &super::profile::Profile,
    func: &Func,
    inst: &Step,
    top_level: bool,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) -> Result<(), Error> {
    use super::profile::Seen;
    let seen = |env: &Env<'_, '_, D>, vs: &[Value]| -> Vec<Seen> {
        vs.iter()
            .filter_map(|&v| match env.view(device, func, v) {
                Ok(t) => Some(Seen::new(device.dtype(&t), device.shape(&t))),
                // A result no one reads may be gone already: its type may still know it.
                Err(_) => Seen::of_type(func.ty(v)),
            })
            .collect()
    };
    let args = seen(env, &inst.args);
    device.synchronize()?;
    let t0 = std::time::Instant::now();
    run_step(device, func, inst, top_level, env, state)?;
    device.synchronize()?;
    let time = t0.elapsed();
    let results = seen(env, &inst.results);
    profile.record_step(
        inst,
        super::profile::measure(inst, &args, &results, time),
        t0,
    );
    Ok(())
}

/// A step's error as a user reads it: the op once (messages from `perform` and from type
/// inference may already start with it), then the value the step computes and the line that
/// built it. Branches and row groups leave their members' messages as they are.
fn step_error(func: &Func, step: &Step, e: Error) -> Error {
    if matches!(
        step.kernel,
        Kernel::IfElse { .. } | Kernel::Scan { .. } | Kernel::Rows { .. }
    ) {
        return e;
    }
    let (msg, shape) = match e {
        Error::Shape(m) => (m, true),
        Error::Runtime(m) => (m, false),
        other => return other,
    };
    let name = step.op.display_name();
    let prefix = format!("{name}: ");
    let mut rest = msg.as_str();
    while let Some(r) = rest.strip_prefix(&prefix) {
        rest = r;
    }
    let what = step
        .results
        .first()
        .map(|&r| format!(" computing {}", func.describe_at(r)))
        .unwrap_or_default();
    let msg = format!("{name}{what}: {rest}");
    if shape {
        Error::Shape(msg)
    } else {
        Error::Runtime(msg)
    }
}

/// Runs one step of a block.
fn run_step<D: Device>(
    device: &D,
    func: &Func,
    inst: &Step,
    top_level: bool,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) -> Result<(), Error> {
    check_stretch(func, inst, |v| env.shape(device, func, v))?;
    // Host memory holds the results of a host device's steps, and of the steps another
    // device hands to `perform` (a GPU's `arange`, `one_hot`, ...): those are checked before
    // they are made. A device's own steps allocate where it says (and refuse there).
    if device.host_memory() || !device.runs(inst) {
        super::memory::check_fits(func, inst, &|v| env.shape(device, func, v).ok())?;
    }
    if let Kernel::Rows { steps: members, .. } = &inst.kernel {
        // Members' arguments from outside the group are whole values here; results of
        // earlier members have shapes their types know.
        for m in members {
            check_stretch(func, m, |v| match env.shape(device, func, v) {
                Ok(s) => Ok(s),
                Err(e) => func.ty(v).known_shape().map(Into::into).ok_or(e),
            })?;
        }
    }
    if let Kernel::IfElse { then, otherwise } = &inst.kernel {
        run_ifelse(device, func, inst, then, otherwise, env, state)?;
        release_dead(device, inst, env, state);
        return Ok(());
    }
    if let Kernel::Scan {
        body,
        params,
        carries,
        reverse,
    } = &inst.kernel
    {
        let walk = super::scan::ScanWalk {
            body,
            params,
            carries: *carries,
            reverse: *reverse,
        };
        walk.run(device, func, inst, env, state)?;
        release_dead(device, inst, env, state);
        return Ok(());
    }
    if let Kernel::Rows { rows, steps, roles } = &inst.kernel {
        if device.runs(inst) {
            // The device has one kernel for the whole group (the GPU's).
            run_own(device, func, inst, env, state)?;
            release_dead(device, inst, env, state);
            return Ok(());
        }
        let t0 = kernel_start(device, state)?;
        let ran = device.run_rows(func, inst, *rows, steps, roles, env, state);
        kernel_end(device, state, t0)?;
        match ran? {
            true => release_dead(device, inst, env, state),
            false => run_steps(device, func, steps, top_level, env, state)?,
        }
        return Ok(());
    }
    // An `add` that a custom op already computed with AddTo.
    if let Some(&r) = top_level
        .then(|| state.requests.skipped_adds.get(&inst.results[0]))
        .flatten()
    {
        env.values[inst.results[0].index()] = env.values[r.index()].take();
        return Ok(());
    }
    if let Some(a) = dying_view_argument(inst, env) {
        let t = env.values[a.index()].take().expect("the argument is held");
        match device.view_moving(inst, t) {
            Ok(view) => {
                return store_results(device, func, inst, vec![view], &mut env.values, state)
            }
            Err(t) => env.values[a.index()] = Some(t),
        }
    }
    if device.runs(inst) {
        run_own(device, func, inst, env, state)?;
    } else {
        run_perform(device, func, inst, top_level, env, state)?;
    }
    release_dead(device, inst, env, state);
    Ok(())
}

/// The argument of a view step (`transpose`, `reshape`) that the VM holds and frees after it:
/// its buffer may become the result without a copy (`Device::view_moving`).
fn dying_view_argument<D: Device>(inst: &Step, env: &Env<'_, '_, D>) -> Option<Value> {
    let movable = matches!(inst.op, Op::Transpose { .. } | Op::Reshape { .. });
    let &[a] = inst.args.as_slice() else {
        return None;
    };
    (movable && inst.frees.contains(&a) && env.values[a.index()].is_some()).then_some(a)
}

/// When the call is profiled, the instant a kernel starts, the device idle before it (so
/// that the kernel's time is its own): the VM's work between kernels is what the profile's
/// in-kernel share leaves out.
fn kernel_start<D: Device>(
    device: &D,
    state: &VmState<D>,
) -> Result<Option<std::time::Instant>, Error> {
    match state.kernel_time {
        Some(_) => {
            device.synchronize()?;
            Ok(Some(std::time::Instant::now()))
        }
        None => Ok(None),
    }
}

/// Adds the time since `kernel_start` to the call's in-kernel time, once the device is done.
fn kernel_end<D: Device>(
    device: &D,
    state: &mut VmState<D>,
    started: Option<std::time::Instant>,
) -> Result<(), Error> {
    if let (Some(t0), Some(sum)) = (started, state.kernel_time.as_mut()) {
        device.synchronize()?;
        *sum += t0.elapsed();
    }
    Ok(())
}

/// A step the device runs with its own code: arguments read where they are, result 0 written
/// into a buffer the VM hands over where it has one (see `Device::run`).
fn run_own<D: Device>(
    device: &D,
    func: &Func,
    inst: &Step,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) -> Result<(), Error> {
    let r0 = inst.results[0];
    // The buffer result 0 goes into, and the argument whose buffer it is (in place).
    let (dest, overwritten): (Option<D::Array>, Option<Value>) = match &inst.kernel {
        // A fused update writes over its matrix (argument 2) where this call owns it in a
        // fitting layout; the device copies it otherwise.
        Kernel::Gemm {
            update: Some(_), ..
        } => match inst.args.get(2) {
            Some(&w) if device.in_place() => {
                let fits = env.values[w.index()]
                    .as_ref()
                    .is_some_and(|t| overwritable(device, t, func.ty(r0).dtype));
                match fits {
                    true => (env.values[w.index()].take(), Some(w)),
                    false => (None, None),
                }
            }
            _ => (None, None),
        },
        _ => match take_offered::<D>(&mut env.dests, r0) {
            Some(d) => (Some(d), None),
            None => match take_overwritten(device, func, inst, env)? {
                Some((v, b)) => (Some(b), Some(v)),
                None if inst.results.len() == 1 => (state.take_buffer(device, func.ty(r0)), None),
                None => (None, None),
            },
        },
    };
    let args = inst
        .args
        .iter()
        .map(|&a| match (&dest, overwritten) {
            // SAFETY: the buffer moves into the step as `dest`, which keeps it alive while it
            // reads its arguments (the `Device::run` contract); the steps marked in place
            // (elementwise) write each element after reading it, and a fused update reads its
            // matrix only as the buffer it updates.
            (Some(b), Some(v)) if a == v => Ok(unsafe { device.alias(b) }),
            _ => env.view(device, func, a),
        })
        .collect::<Result<smallvec::SmallVec<[_; 4]>, _>>()?;
    let mut dest = dest;
    if let (Some(v), Some(buf)) = (overwritten, dest.as_mut()) {
        let t0 = kernel_start(device, state)?;
        let updated = device.update_in_place(inst, &args, buf);
        kernel_end(device, state, t0)?;
        if let Some(done) = updated {
            drop(args);
            let buf = dest.take().expect("the buffer just updated");
            return match done {
                Ok(()) => store_results(device, func, inst, vec![buf], &mut env.values, state),
                Err(e) => {
                    // Nothing was written: the buffer goes back to its value, so a donated
                    // variable's is found and returned to the caller.
                    env.values[v.index()] = Some(buf);
                    Err(e)
                }
            };
        }
    }
    let t0 = kernel_start(device, state)?;
    let outs = guarded(&inst.op, || device.run(inst, &args, dest));
    kernel_end(device, state, t0)?;
    let outs = outs?;
    drop(args);
    store_results(device, func, inst, outs, &mut env.values, state)
}

/// A step without code of the device's own: the op's `perform` (a custom op's with its kept
/// storage and write requests) on host copies of the arguments. A step marked in place
/// computes, then writes result 0 into the overwritten buffer (the reference runs every op
/// out of place, but the buffer is the same).
fn run_perform<D: Device>(
    device: &D,
    func: &Func,
    inst: &Step,
    top_level: bool,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) -> Result<(), Error> {
    for &a in &inst.args {
        env.own(device, a)?;
    }
    let overwritten = match &inst.op {
        Op::Custom(_) => None,
        _ => take_overwritten(device, func, inst, env)?,
    };
    let env_values = &mut env.values;
    // A custom op the in-place pass marked gets input 0's buffer as output 0's storage.
    let donated = match &inst.op {
        Op::Custom(_) if inst.inplace == Some(0) && !inst.args[1..].contains(&inst.args[0]) => {
            env_values[inst.args[0].index()].take()
        }
        _ => None,
    };
    let donated = donated.map(|t| device.download_owned(t)).transpose()?;
    // Buffers that custom-op outputs accumulate into (AddTo), taken before the arguments
    // are borrowed; none of them is an argument of the op.
    let mut accumulators = Vec::new();
    if top_level && matches!(inst.op, Op::Custom(_)) {
        for (i, r) in inst.results.iter().enumerate() {
            if let Some((acc, _)) = state.requests.add_to.get(r) {
                if let Some(t) = env_values[acc.index()].take() {
                    accumulators.push((i, device.download_owned(t)?));
                }
            }
        }
    }
    let placeholder = donated.as_ref().map(|t| Tensor::empty(t.dtype()));
    let host = inst
        .args
        .iter()
        .enumerate()
        .map(|(i, &a)| match (&placeholder, i, &overwritten) {
            (Some(p), 0, _) => Ok(Cow::Borrowed(p)),
            (_, _, Some((v, b))) if *v == a => device.download(b),
            _ => device.download(fetch(func, env_values, a)?),
        })
        .collect::<Result<Vec<Cow<'_, Tensor>>, _>>()?;
    // A user's op gets its arguments row-major, whatever the steps before left them.
    let host = match &inst.op {
        Op::Custom(_) => host
            .into_iter()
            .map(|t| match t.view().is_standard_layout() {
                true => t,
                false => Cow::Owned(t.view().to_standard_owned()),
            })
            .collect(),
        _ => host,
    };
    let args: Vec<&Tensor> = host.iter().map(|t| &**t).collect();
    // perform is the oracle and must not panic, but a panic (a user's op, say) is turned
    // into an error rather than taking the caller's process down.
    let t0 = kernel_start(device, state)?;
    let outs = guarded(&inst.op, || match &inst.op {
        Op::Custom(c) => {
            let calls = state.calls;
            let requests = state.requests.clone();
            let slot = state
                .storage
                .entry(inst.id)
                .or_insert_with(|| vec![None; inst.results.len()]);
            run_custom(
                c,
                func,
                inst,
                calls,
                &requests,
                &args,
                slot,
                donated,
                accumulators,
            )
        }
        _ => super::device::host_step(inst, &args),
    });
    kernel_end(device, state, t0)?;
    let outs = outs?;
    drop(args);
    drop(host);
    let mut outs = outs
        .into_iter()
        .map(|t| device.upload_owned(t))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some((_, mut buf)), false) = (overwritten, outs.is_empty()) {
        let result = outs.remove(0);
        if let Some(spare) = device.assign(&mut buf, result) {
            state.keep_buffer(device, spare);
        }
        outs.insert(0, buf);
    }
    store_results(device, func, inst, outs, env_values, state)
}

/// Whether a step may write a result of `dtype` over `t`, a value the VM holds: the only
/// handle to its elements (`Device::owns`, asked before a view makes another), of that dtype,
/// dense.
fn overwritable<D: Device>(device: &D, t: &D::Array, dtype: crate::ir::DType) -> bool {
    device.owns(t) && {
        let v = device.view(t);
        device.dtype(&v) == dtype && device.is_dense(&v)
    }
}

/// For a step marked in place, the marked argument and its buffer, taken out of the values
/// when it is owned here, the device writes in place and the buffer fits result 0 at run
/// time: same dtype, dense and, for an elementwise step, the shape every argument broadcasts
/// to (no argument stretches it). Otherwise `None`, and the step writes a fresh buffer (the mark is a permission,
/// never needed for correctness).
fn take_overwritten<D: Device>(
    device: &D,
    func: &Func,
    inst: &Step,
    env: &mut Env<'_, '_, D>,
) -> Result<Option<(Value, D::Array)>, Error> {
    let Some(a) = inst.inplace.and_then(|k| inst.args.get(k).copied()) else {
        return Ok(None);
    };
    if !device.in_place() {
        return Ok(None);
    }
    let fit = {
        let Some(owned) = env.values[a.index()].as_ref() else {
            return Ok(None);
        };
        if !overwritable(device, owned, func.ty(inst.results[0]).dtype) {
            return Ok(None);
        }
        let buf = device.view(owned);
        let target = device.shape(&buf);
        let mut fit = true;
        // An elementwise step's other arguments must broadcast to exactly the buffer's shape
        // (a scatter's indices and updates have shapes of their own).
        if inst.op.is_elementwise() {
            for &b in inst.args.iter().filter(|&&b| b != a) {
                fit &= stretches_into(&env.shape(device, func, b)?, target);
            }
        }
        fit
    };
    Ok(if fit {
        env.values[a.index()].take().map(|t| (a, t))
    } else {
        None
    })
}

/// Whether `shape` broadcasts to exactly `target` (numpy's rules, aligned on the right).
fn stretches_into(shape: &[usize], target: &[usize]) -> bool {
    shape.len() <= target.len()
        && shape
            .iter()
            .rev()
            .zip(target.iter().rev())
            .all(|(&s, &t)| s == t || s == 1)
}

/// Moves the buffers of the values `step` reads for the last time (its `frees`) into the pool.
fn release_dead<D: Device>(
    device: &D,
    step: &Step,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) {
    for &a in &step.frees {
        if let Some(t) = env.values[a.index()].take() {
            state.keep_buffer(device, t);
        }
    }
}

/// Checks a step's results against their types and puts them in the values.
fn store_results<D: Device>(
    device: &D,
    func: &Func,
    inst: &Step,
    outs: Vec<D::Array>,
    env: &mut [Option<D::Array>],
    state: &VmState<D>,
) -> Result<(), Error> {
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
        // A `Null` output is never read, so it is not checked either.
        let unread = state.requests.null.contains(&r);
        if !unread {
            let v = device.view(&t);
            let (dtype, shape) = (device.dtype(&v), device.shape(&v));
            if dtype != ty.dtype || !ty.accepts_shape(shape) {
                return Err(Error::Shape(format!(
                    "{} produced {dtype}{shape:?} where its type says {ty}",
                    inst.op.name(),
                )));
            }
        }
        env[r.index()] = Some(t);
    }
    Ok(())
}

/// The lazy thunk of `ifelse`: it needs its condition first (read back from the device),
/// then asks for exactly one of its regions; the other region's steps never run.
fn run_ifelse<D: Device>(
    device: &D,
    func: &Func,
    inst: &Step,
    then: &Branch,
    otherwise: &Branch,
    env: &mut Env<'_, '_, D>,
    state: &mut VmState<D>,
) -> Result<(), Error> {
    env.own(device, inst.args[0])?;
    let cond = device.download(fetch(func, &env.values, inst.args[0])?)?;
    let taken = match &*cond {
        Tensor::Bool(a) if a.len() == 1 => a.iter().next().copied().unwrap_or(false),
        t => {
            return Err(Error::Runtime(format!(
                "ifelse: the condition must be one bool, got {}{:?}",
                t.dtype(),
                t.shape()
            )))
        }
    };
    drop(cond);
    let branch = if taken { then } else { otherwise };
    run_steps(device, func, &branch.steps, false, env, state)?;
    for (i, (&r, &y)) in inst.results.iter().zip(&branch.yields).enumerate() {
        // Made in the branch, or read last by this step.
        let dies = branch.steps.iter().any(|s| s.results.contains(&y)) || inst.frees.contains(&y);
        env.values[r.index()] = Some(take_yield(device, func, env, &branch.yields, i, dies)?);
    }
    Ok(())
}

/// Yield `i` of a block as an array the VM owns: a value that `dies` there moves out (unless
/// the block yields it again later); one still read afterwards is copied.
pub(super) fn take_yield<D: Device>(
    device: &D,
    func: &Func,
    env: &mut Env<'_, '_, D>,
    yields: &[Value],
    i: usize,
    dies: bool,
) -> Result<D::Array, Error> {
    let y = yields[i];
    if dies && !yields[i + 1..].contains(&y) {
        if let Some(v) = env.values[y.index()].take() {
            return Ok(v);
        }
    }
    // A borrowed value (a parameter, a scan's slice) is copied once, from where it is.
    device.to_owned(env.view(device, func, y)?)
}
