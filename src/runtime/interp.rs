//! The reference interpreter: runs an SSA function op by op with each op's `perform`.

use crate::error::Error;
use crate::ir::custom::{CustomOpRef, PerformContext, Resource, WriteRequest};
use crate::ir::{Func, Op, Value};
use crate::lower::{lower, Branch, Kernel, Plan, Step, StepId};
use crate::perform::perform;
use crate::tensor::{Tensor, TensorRef};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// What the interpreter keeps between calls: the output storage of ops that may reuse it
/// (custom ops, hidden outputs), keyed by their step, and a call counter that seeds
/// the random resource.
#[derive(Default)]
pub struct InterpState {
    /// Compiled thunks by step (indexed by the step's id: a lookup per step and call, so no
    /// hashing).
    pub(super) thunks: std::sync::Arc<ThunkTable>,
    storage: HashMap<StepId, Vec<Option<Tensor>>>,
    calls: u64,
    /// Write requests planned for the custom ops of the function being run.
    requests: std::sync::Arc<super::requests::WritePlan>,
    /// Which plan `requests` and `param_index` were made for (its serial number).
    planned_for: Option<u64>,
    /// For each value, its position among the parameters, if it is one.
    param_index: Vec<Option<usize>>,
    /// The value slots of a call, kept (empty) for the next one.
    slots: Vec<Option<Tensor>>,
    /// Buffers of intermediates that died, kept for the kernels of the next instructions and
    /// calls, so that a steady state of calls does not allocate (or fault in) large arrays.
    pool: Vec<Tensor>,
    /// The function's profile, when it is being profiled: each step of the function's own
    /// block is timed (taken while a step runs, so the steps inside it are not counted twice).
    profile: Option<std::sync::Arc<super::profile::Profile>>,
}

/// How many dead buffers the pool keeps at most.
const POOL_MAX: usize = 16;

/// Buffers smaller than this are not worth keeping.
const POOL_MIN_BYTES: usize = 1 << 16;

impl InterpState {
    /// A kept buffer of exactly this dtype and shape, if there is one.
    pub(super) fn take_buffer(&mut self, ty: &crate::ir::TensorType) -> Option<Tensor> {
        let shape = ty.known_shape()?;
        let i = self
            .pool
            .iter()
            .position(|t| t.dtype() == ty.dtype && t.shape() == shape.as_slice())?;
        Some(self.pool.swap_remove(i))
    }

    pub(super) fn keep_buffer(&mut self, t: Tensor) {
        if t.len() * t.dtype().size() >= POOL_MIN_BYTES {
            if self.pool.len() == POOL_MAX {
                self.pool.remove(0);
            }
            self.pool.push(t);
        }
    }
}

/// The values of one call: what instructions computed (owned), and the caller's inputs
/// (borrowed). An input is copied into `env` only when something needs it owned (an op's
/// `perform`, an output); compiled thunks read it where it is.
pub(super) struct Env<'e, 'p> {
    pub(super) values: Vec<Option<Tensor>>,
    /// Caller's buffers offered for outputs, by the value they would hold (a few: searched).
    pub(super) dests: Offered,
    params: &'e [TensorRef<'p>],
    param_index: &'e [Option<usize>],
}

impl Env<'_, '_> {
    /// Makes `v` available to `fetch`: copies a parameter the first time it is asked for.
    fn own(&mut self, v: Value) {
        if self.values[v.index()].is_none() {
            if let Some(i) = self.param_index[v.index()] {
                self.values[v.index()] = Some(self.params[i].to_owned());
            }
        }
    }

    /// A view of `v`, without copying a parameter.
    pub(super) fn view(&self, func: &Func, v: Value) -> Result<TensorRef<'_>, Error> {
        match (&self.values[v.index()], self.param_index[v.index()]) {
            (Some(t), _) => Ok(t.view()),
            (None, Some(i)) => Ok(self.params[i].reborrow()),
            (None, None) => fetch(func, &self.values, v).map(|t| t.view()),
        }
    }
}

/// Runs `func` on `inputs` (one per parameter, already checked against the parameter types)
/// and returns its outputs.
pub fn run_func(func: &Func, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, Error> {
    let views: Vec<TensorRef> = inputs.iter().map(Tensor::view).collect();
    run_func_with(func, &views, &mut InterpState::default())
}

/// `run_func` with state kept between calls, on borrowed inputs.
pub fn run_func_with(
    func: &Func,
    inputs: &[TensorRef<'_>],
    state: &mut InterpState,
) -> Result<Vec<Tensor>, Error> {
    run_func_into(func, inputs, Vec::new(), &mut [], state)
}

/// `run_func_with`, offering `dests[i]` as the storage of output `i` to compiled thunks that
/// can write into it, and running on the `donated` buffers of parameters (see
/// `Executable::run_into`; `donated` may be shorter than the parameters). The function is
/// lowered on every call: this is the reference path for a bare function (an `Interpreter`
/// lowers once and keeps its plan).
pub fn run_func_into(
    func: &Func,
    inputs: &[TensorRef<'_>],
    dests: Vec<Option<Tensor>>,
    donated: &mut [Option<Tensor>],
    state: &mut InterpState,
) -> Result<Vec<Tensor>, Error> {
    let plan = lower(func);
    run_plan_into(func, &plan, inputs, dests, donated, state)
}

/// Runs `plan`, the lowered form of `func` (whose value types it reads), step by step: a
/// compiled thunk where there is one, the op's `perform` otherwise, and each step's `frees`
/// handed to the buffer pool after it.
pub fn run_plan_into(
    func: &Func,
    plan: &Plan,
    inputs: &[TensorRef<'_>],
    dests: Vec<Option<Tensor>>,
    donated: &mut [Option<Tensor>],
    state: &mut InterpState,
) -> Result<Vec<Tensor>, Error> {
    super::check_input_count(func, inputs.len())?;
    state.calls += 1;
    if state.planned_for != Some(plan.serial) {
        state.param_index = vec![None; func.values.len()];
        for (i, &p) in func.params.iter().enumerate() {
            state.param_index[p.index()] = Some(i);
        }
        state.requests = std::sync::Arc::new(super::requests::plan(func));
        state.planned_for = Some(plan.serial);
    }
    let param_index = std::mem::take(&mut state.param_index);
    let mut offered = Offered::new();
    for (&v, d) in func.outputs.iter().zip(dests) {
        if let Some(d) = d {
            if param_index[v.index()].is_none() && !offered.iter().any(|(o, _)| *o == v) {
                offered.push((v, d));
            }
        }
    }
    // The value slots of the previous call, all empty again: no allocation per call.
    let mut values = std::mem::take(&mut state.slots);
    values.resize(func.values.len(), None);
    let mut env = Env {
        values,
        dests: offered,
        params: inputs,
        param_index: &param_index,
    };
    // Donated parameters are values the function owns from the start.
    let mut donated_at: smallvec::SmallVec<[(usize, *const u8); 4]> = Default::default();
    for (i, d) in donated.iter_mut().enumerate() {
        if let (Some(t), Some(&p)) = (d.take(), func.params.get(i)) {
            donated_at.push((i, t.view().as_ptr()));
            env.values[p.index()] = Some(t);
        }
    }
    let started = state.profile.as_ref().map(|_| std::time::Instant::now());
    let ran = run_steps(func, &plan.steps, true, &mut env, state);
    if ran.is_err() {
        give_back_donated(&donated_at, donated, &mut env.values, state);
    }
    // Offered buffers no kernel wrote into: the result is copied there, so the caller keeps
    // its buffer whatever computed the output.
    let mut leftover = std::mem::take(&mut env.dests);
    let mut values = std::mem::take(&mut env.values);
    let outs = ran.and_then(|()| {
        collect_outputs(
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
        p.record_call(t0.elapsed());
    }
    outs
}

/// After a failed call, puts each donated buffer back where it came from, found by its address
/// among the values and the pool (an in-place step may have moved it to another value).
fn give_back_donated(
    donated_at: &[(usize, *const u8)],
    donated: &mut [Option<Tensor>],
    values: &mut [Option<Tensor>],
    state: &mut InterpState,
) {
    for &(i, ptr) in donated_at {
        let at = |t: &Tensor| t.view().as_ptr() == ptr && !t.is_empty();
        donated[i] = match values.iter().position(|v| v.as_ref().is_some_and(at)) {
            Some(k) => values[k].take(),
            None => state
                .pool
                .iter()
                .position(at)
                .map(|k| state.pool.swap_remove(k)),
        };
    }
}

/// The function's outputs, moved out of `env` (one returned twice is copied for its earlier
/// places), each in its offered buffer where there is one.
fn collect_outputs(
    func: &Func,
    inputs: &[TensorRef<'_>],
    param_index: &[Option<usize>],
    env: &mut [Option<Tensor>],
    leftover: &mut Offered,
    state: &mut InterpState,
) -> Result<Vec<Tensor>, Error> {
    let outs = &func.outputs;
    (0..outs.len())
        .map(|i| {
            let v = outs[i];
            let t = if let (None, Some(k)) = (&env[v.index()], param_index[v.index()]) {
                inputs[k].to_owned()
            } else if outs[i + 1..].contains(&v) {
                fetch(func, env, v)?.clone()
            } else {
                env[v.index()].take().ok_or_else(|| {
                    Error::Runtime(format!("{}: output {v} is not defined", func.name))
                })?
            };
            Ok(match take_offered(leftover, v) {
                Some(mut d) => {
                    // The computed buffer, copied into the caller's, serves the next call.
                    if let Some(spare) = super::function::assign_or_replace(&mut d, t) {
                        state.keep_buffer(spare);
                    }
                    d
                }
                None => t,
            })
        })
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
/// requests apply).
fn run_steps(
    func: &Func,
    steps: &[Step],
    top_level: bool,
    env: &mut Env<'_, '_>,
    state: &mut InterpState,
) -> Result<(), Error> {
    for inst in steps {
        match state.profile.take() {
            None => run_step(func, inst, top_level, env, state),
            Some(p) => {
                let ran = profiled_step(&p, func, inst, top_level, env, state);
                state.profile = Some(p);
                ran
            }
        }
        .map_err(|e| step_error(func, inst, e))?;
    }
    Ok(())
}

/// `run_step`, timed, with the shapes of what it read and wrote recorded in `profile`.
fn profiled_step(
    profile: &super::profile::Profile,
    func: &Func,
    inst: &Step,
    top_level: bool,
    env: &mut Env<'_, '_>,
    state: &mut InterpState,
) -> Result<(), Error> {
    use super::profile::Seen;
    let seen = |env: &Env<'_, '_>, vs: &[Value]| -> Vec<Seen> {
        vs.iter()
            .filter_map(|&v| match env.view(func, v) {
                Ok(t) => Some(Seen::of(&t)),
                // A result no one reads may be gone already: its type may still know it.
                Err(_) => Seen::of_type(func.ty(v)),
            })
            .collect()
    };
    let args = seen(env, &inst.args);
    let t0 = std::time::Instant::now();
    run_step(func, inst, top_level, env, state)?;
    let time = t0.elapsed();
    let results = seen(env, &inst.results);
    profile.record_step(inst, super::profile::measure(inst, &args, &results, time));
    Ok(())
}

/// A step's error as a user reads it: the op once (messages from `perform` and from type
/// inference may already start with it), then the value the step computes and the line that
/// built it. Branches and row groups leave their members' messages as they are.
fn step_error(func: &Func, step: &Step, e: Error) -> Error {
    if matches!(step.kernel, Kernel::IfElse { .. } | Kernel::Rows { .. }) {
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
fn run_step(
    func: &Func,
    inst: &Step,
    top_level: bool,
    env: &mut Env<'_, '_>,
    state: &mut InterpState,
) -> Result<(), Error> {
    let env_shape = |v: Value| env.view(func, v).map(|t| t.shape().into());
    check_stretch(func, inst, env_shape)?;
    super::memory::check_fits(func, inst, &|v| {
        env.view(func, v).ok().map(|t| t.shape().into())
    })?;
    if let Kernel::Rows { steps: members, .. } = &inst.kernel {
        // Members' arguments from outside the group are whole values here; results of
        // earlier members have shapes their types know.
        for m in members {
            check_stretch(func, m, |v| match env.view(func, v) {
                Ok(t) => Ok(t.shape().into()),
                Err(e) => func.ty(v).known_shape().map(Into::into).ok_or(e),
            })?;
        }
    }
    if let Kernel::IfElse { then, otherwise } = &inst.kernel {
        run_ifelse(func, inst, then, otherwise, env, state)?;
        release_dead(inst, env, state);
        return Ok(());
    }
    if let Kernel::Rows { rows, steps, roles } = &inst.kernel {
        if super::rows::run_rows(func, inst, *rows, steps, roles, env, state)? {
            release_dead(inst, env, state);
        } else {
            run_steps(func, steps, top_level, env, state)?;
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
    // Matrix products read their operands where they are (transposed through strides
    // where the plan folded a transpose) and write into a recycled buffer.
    if let Kernel::Gemm { transposed, update } = inst.kernel {
        run_gemm(func, inst, transposed, update, env, state)?;
        release_dead(inst, env, state);
        return Ok(());
    }
    // A compiled thunk reads its arguments where they are.
    if let Some(t) = state.thunks.get(inst.id.index()).cloned().flatten() {
        let offered = take_offered(&mut env.dests, inst.results[0]);
        let overwritten = match offered {
            None => take_overwritten(func, inst, env)?,
            Some(_) => None,
        };
        // SAFETY: the buffer moves into the thunk as `dest`, which keeps it alive while it
        // reads its inputs (the `Thunk::run_into` contract), and the map kernels that run
        // marked (elementwise) instructions write each element after reading it.
        let alias = overwritten.as_ref().map(|(_, b)| unsafe { b.alias_view() });
        let dest = match (overwritten, inst.results.len()) {
            (Some((_, b)), _) => Some(b),
            (None, 1) => offered.or_else(|| state.take_buffer(func.ty(inst.results[0]))),
            (None, _) => None,
        };
        let args = inst
            .args
            .iter()
            .map(|&a| match (&alias, inst.inplace) {
                (Some(v), Some(k)) if a == inst.args[k] => Ok(v.reborrow()),
                _ => env.view(func, a),
            })
            .collect::<Result<smallvec::SmallVec<[_; 4]>, _>>()?;
        let outs = guarded(&inst.op, || t.run_into(&args, dest))?;
        drop(args);
        store_results(func, inst, outs, &mut env.values, state)?;
        release_dead(inst, env, state);
        return Ok(());
    }
    for &a in &inst.args {
        env.own(a);
    }
    // A marked instruction other than a custom op computes, then writes result 0 into the
    // overwritten buffer (the reference runs every op out of place, but the buffer is the
    // same).
    let overwritten = match &inst.op {
        Op::Custom(_) => None,
        _ => take_overwritten(func, inst, env)?,
    };
    let env_values = &mut env.values;
    // A custom op the in-place pass marked gets input 0's buffer as output 0's storage.
    let donated = match &inst.op {
        Op::Custom(_) if inst.inplace == Some(0) && !inst.args[1..].contains(&inst.args[0]) => {
            env_values[inst.args[0].index()].take()
        }
        _ => None,
    };

    // Buffers that custom-op outputs accumulate into (AddTo), taken before the arguments
    // are borrowed; none of them is an argument of the op.
    let mut accumulators = Vec::new();
    if top_level && matches!(inst.op, Op::Custom(_)) {
        for (i, r) in inst.results.iter().enumerate() {
            if let Some((acc, _)) = state.requests.add_to.get(r) {
                if let Some(t) = env_values[acc.index()].take() {
                    accumulators.push((i, t));
                }
            }
        }
    }
    let placeholder = donated.as_ref().map(|t| Tensor::empty(t.dtype()));
    let args = inst
        .args
        .iter()
        .enumerate()
        .map(|(i, &a)| match (&placeholder, i, &overwritten) {
            (Some(p), 0, _) => Ok(p),
            (_, _, Some((v, b))) if *v == a => Ok(b),
            _ => fetch(func, env_values, a),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // perform is the oracle and must not panic, but a panic (a user's op, say) is turned
    // into an error rather than taking the caller's process down.
    let outs = guarded(&inst.op, || match &inst.op {
        Op::Custom(c) => run_custom(c, func, inst, &args, donated, accumulators, state),
        op => perform(op, &args),
    })?;
    let outs = match overwritten {
        Some((_, mut buf)) => {
            let mut outs = outs;
            if let Some(o) = outs.first_mut() {
                let result = std::mem::replace(o, Tensor::empty(crate::ir::DType::Bool));
                if let Some(spare) = super::function::assign_or_replace(&mut buf, result) {
                    state.keep_buffer(spare);
                }
                *o = buf;
            }
            outs
        }
        None => outs,
    };
    store_results(func, inst, outs, env_values, state)?;
    release_dead(inst, env, state);
    Ok(())
}

/// A `gemm` step: the reference's matmul on views of the arguments, into the buffer offered
/// for its result or a dead one of the same type. With an update (`lower::gemm_update`),
/// argument 2 minus the product times the scale, written over argument 2's buffer where this
/// call owns it (the step is marked in place), else into a copy.
fn run_gemm(
    func: &Func,
    inst: &Step,
    transposed: [bool; 2],
    update: Option<crate::lower::gemm_update::GemmUpdate>,
    env: &mut Env<'_, '_>,
    state: &mut InterpState,
) -> Result<(), Error> {
    let r = inst.results[0];
    let operands = 2 + update.is_some() as usize;
    if inst.args.len() != operands {
        return Err(Error::Runtime(format!(
            "{} takes {operands} operands, got {}",
            if update.is_some() {
                "a gemm update"
            } else {
                "matmul"
            },
            inst.args.len()
        )));
    }
    let (a, b) = (inst.args[0], inst.args[1]);
    let (dest, w) = match update {
        None => {
            let dest = take_offered(&mut env.dests, r).or_else(|| state.take_buffer(func.ty(r)));
            (dest, None)
        }
        Some(u) => {
            let w = inst.args[2];
            let owned = env.values[w.index()]
                .take_if(|t| t.dtype() == func.ty(r).dtype && t.view().is_standard_layout());
            let w = match owned {
                Some(t) => t,
                None => env.view(func, w)?.to_owned(),
            };
            (None, Some((w, u.scale)))
        }
    };
    let operand = |k: usize, v: Value| -> Result<TensorRef<'_>, Error> {
        let t = env.view(func, v)?;
        Ok(if transposed[k] { t.swap_last_two() } else { t })
    };
    let (a, b) = (operand(0, a)?, operand(1, b)?);
    let out = guarded(&inst.op, || match w {
        None => crate::perform::matmul_into(&a, &b, dest),
        Some((mut w, scale)) => crate::perform::matmul_update(&a, &b, &mut w, scale).map(|()| w),
    })?;
    store_results(func, inst, vec![out], &mut env.values, state)
}

/// For an instruction marked in place, the marked argument and its buffer, taken out of the
/// values when it is owned here and fits result 0 at run time: same dtype, the shape every
/// argument broadcasts to (no argument stretches it), standard layout. Otherwise `None`, and the
/// step writes a fresh buffer (the mark is a permission, never needed for correctness).
fn take_overwritten(
    func: &Func,
    inst: &Step,
    env: &mut Env<'_, '_>,
) -> Result<Option<(Value, Tensor)>, Error> {
    let Some(a) = inst.inplace.and_then(|k| inst.args.get(k).copied()) else {
        return Ok(None);
    };
    let Some(buf) = env.values[a.index()].as_ref() else {
        return Ok(None);
    };
    let target = buf.shape();
    let mut fit = buf.dtype() == func.ty(inst.results[0]).dtype && buf.view().is_standard_layout();
    for &b in inst.args.iter().filter(|&&b| b != a) {
        fit &= stretches_into(env.view(func, b)?.shape(), target);
    }
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
fn release_dead(step: &Step, env: &mut Env<'_, '_>, state: &mut InterpState) {
    for &a in &step.frees {
        if let Some(t) = env.values[a.index()].take() {
            state.keep_buffer(t);
        }
    }
}

/// Checks an instruction's results against their types and puts them in `env`.
fn store_results(
    func: &Func,
    inst: &Step,
    outs: Vec<Tensor>,
    env: &mut [Option<Tensor>],
    state: &InterpState,
) -> Result<(), Error> {
    {
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
            if !unread && (t.dtype() != ty.dtype || !ty.accepts_shape(t.shape())) {
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

/// The lazy thunk of `ifelse`: it needs its condition first, then asks for exactly one of its
/// regions; the other region's instructions never run.
fn run_ifelse(
    func: &Func,
    inst: &Step,
    then: &Branch,
    otherwise: &Branch,
    env: &mut Env<'_, '_>,
    state: &mut InterpState,
) -> Result<(), Error> {
    env.own(inst.args[0]);
    let taken = match fetch(func, &env.values, inst.args[0])? {
        Tensor::Bool(a) if a.len() == 1 => a.iter().next().copied().unwrap_or(false),
        t => {
            return Err(Error::Runtime(format!(
                "ifelse: the condition must be one bool, got {}{:?}",
                t.dtype(),
                t.shape()
            )))
        }
    };
    let branch = if taken { then } else { otherwise };
    run_steps(func, &branch.steps, false, env, state)?;
    for (i, (&r, &y)) in inst.results.iter().zip(&branch.yields).enumerate() {
        env.own(y);
        // A value that dies here (made in the branch, or read last by this step) moves to the
        // result; one still read later is copied.
        let dies = branch.steps.iter().any(|s| s.results.contains(&y)) || inst.frees.contains(&y);
        let v = if dies && !branch.yields[i + 1..].contains(&y) {
            env.values[y.index()].take()
        } else {
            None
        };
        let v = match v {
            Some(v) => v,
            None => fetch(func, &env.values, y)?.clone(),
        };
        env.values[r.index()] = Some(v);
    }
    Ok(())
}

/// Runs a custom op with its kept output storage, its resources and write requests.
fn run_custom(
    c: &CustomOpRef,
    func: &Func,
    inst: &Step,
    args: &[&Tensor],
    donated: Option<Tensor>,
    accumulators: Vec<(usize, Tensor)>,
    state: &mut InterpState,
) -> Result<Vec<Tensor>, Error> {
    let key = inst.id;
    let calls = state.calls;
    let slot = state
        .storage
        .entry(key)
        .or_insert_with(|| vec![None; inst.results.len()]);
    let mut requests = vec![WriteRequest::WriteTo; inst.results.len()];
    if let Some(t) = donated {
        slot[0] = Some(t);
        requests[0] = WriteRequest::WriteInplace;
    }
    let plan = state.requests.clone();
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
/// copies of what stays in `slot` for the next call to reuse. The interpreter and the device
/// VM (`device.rs`) both run custom ops through this.
pub(super) fn perform_custom(
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

/// Runs one step's kernel or `perform`, turning a panic (a user's op, say) into an error that
/// names the op rather than taking the caller's process down.
pub(crate) fn guarded<T>(op: &Op, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        Error::Runtime(format!(
            "{} panicked: {}",
            op.display_name(),
            panic_message(&*p)
        ))
    })?
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

/// The interpreter as a backend. Calls from several threads at once each get their own
/// state when the kept one is busy: ops' storage reuse is an optimization, never required.
pub struct Interpreter {
    func: Func,
    plan: Plan,
    thunks: std::sync::Arc<ThunkTable>,
    state: Mutex<InterpState>,
    /// Steps that may run on several threads (`warm.rs`).
    parallel_steps: usize,
    /// Set by `start_profile`.
    profile: Option<std::sync::Arc<super::profile::Profile>>,
}

/// Compiled thunks by the step they run.
pub type Thunks = HashMap<StepId, std::sync::Arc<dyn super::Thunk>>;

/// `Thunks` indexed by step id.
type ThunkTable = Vec<Option<std::sync::Arc<dyn super::Thunk>>>;

/// Buffers offered for outputs, by value.
pub(super) type Offered = smallvec::SmallVec<[(Value, Tensor); 2]>;

pub(super) fn take_offered(offered: &mut Offered, v: Value) -> Option<Tensor> {
    let i = offered.iter().position(|(o, _)| *o == v)?;
    Some(offered.swap_remove(i).1)
}

impl Interpreter {
    pub fn new(func: Func) -> Interpreter {
        let plan = lower(&func);
        Interpreter::with_thunks(func, plan, HashMap::new())
    }

    /// An interpreter that runs `plan` (the lowered `func`) with the given compiled thunks
    /// instead of `perform` for their steps.
    pub fn with_thunks(func: Func, plan: Plan, thunks: Thunks) -> Interpreter {
        let mut table: ThunkTable = vec![None; plan.n_steps];
        for (id, t) in thunks {
            if let Some(slot) = table.get_mut(id.index()) {
                *slot = Some(t);
            }
        }
        let thunks = std::sync::Arc::new(table);
        let state = InterpState {
            thunks: thunks.clone(),
            ..InterpState::default()
        };
        let parallel_steps = plan
            .all_steps()
            .into_iter()
            .filter(|s| may_run_in_parallel(&func, s))
            .count();
        Interpreter {
            func,
            plan,
            thunks,
            state: Mutex::new(state),
            parallel_steps,
            profile: None,
        }
    }
}

/// Whether a step is large enough that its kernel may split it among threads: a matrix
/// product of at least 2^17 multiply-adds, or a kernel over at least 2^16 elements (the
/// kernels' own thresholds), where the shapes are known.
fn may_run_in_parallel(func: &Func, s: &Step) -> bool {
    let elems = |v: Value| -> usize {
        func.ty(v)
            .known_shape()
            .map_or(0, |s| s.iter().product::<usize>())
    };
    match &s.kernel {
        Kernel::Gemm { .. } => {
            let k = s.args.first().map_or(0, |&a| {
                func.ty(a)
                    .known_shape()
                    .and_then(|s| s.last().copied())
                    .unwrap_or(0)
            });
            elems(s.results[0]).saturating_mul(k) >= 1 << 17
        }
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::Rows { .. } => s
            .args
            .iter()
            .chain(&s.results)
            .any(|&v| elems(v) >= 1 << 16),
        _ => false,
    }
}

impl super::Executable for Interpreter {
    fn run(&self, inputs: &[crate::tensor::TensorRef<'_>]) -> Result<Vec<Tensor>, Error> {
        self.run_into(inputs, Vec::new(), &mut [])
    }

    fn run_into(
        &self,
        inputs: &[crate::tensor::TensorRef<'_>],
        dests: Vec<Option<Tensor>>,
        donated: &mut [Option<Tensor>],
    ) -> Result<Vec<Tensor>, Error> {
        let run = |st: &mut InterpState| {
            if super::warm::worthwhile(self.parallel_steps) {
                super::warm::run(|| {
                    run_plan_into(&self.func, &self.plan, inputs, dests, donated, st)
                })
            } else {
                run_plan_into(&self.func, &self.plan, inputs, dests, donated, st)
            }
        };
        match self.state.try_lock() {
            Ok(mut st) => run(&mut st),
            Err(_) => run(&mut InterpState {
                thunks: self.thunks.clone(),
                profile: self.profile.clone(),
                ..InterpState::default()
            }),
        }
    }

    fn start_profile(&mut self) -> bool {
        let p = std::sync::Arc::new(super::profile::Profile::new(&self.func, &self.plan));
        self.state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .profile = Some(p.clone());
        self.profile = Some(p);
        true
    }

    fn profile(&self) -> Option<&super::profile::Profile> {
        self.profile.as_deref()
    }

    fn op_state(&self) -> super::state::OpState {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        super::state::collect(&self.plan, st.calls, &st.storage)
    }

    fn set_op_state(&self, state: &super::state::OpState) -> Result<(), Error> {
        let storage = super::state::restore(&self.func, &self.plan, state)?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.storage = storage;
        st.calls = state.calls;
        Ok(())
    }
}
