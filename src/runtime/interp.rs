//! The interpreter: the VM (`runtime::vm`) on the host (`runtime::host::Host`). Without
//! compiled thunks it is the reference, every op's `perform`; the CPU backend plugs its
//! compiled kernels in as thunks (`Interpreter::with_thunks`).

use super::host::Host;
use super::vm::{run_plan_into as run_on, Kept, VmState};
use crate::error::Error;
use crate::ir::{Func, Op, Value};
use crate::lower::{lower, Kernel, Plan, Step};
use crate::tensor::{Tensor, TensorRef};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use super::host::Thunks;

/// What the interpreter keeps between calls (`VmState` on the host).
pub type InterpState = VmState<Host>;

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

/// `run_func_with`, offering `dests[i]` as the storage of output `i`, and running on the
/// `donated` buffers of parameters (see `Executable::run_into`; `donated` may be shorter than
/// the parameters). The function is lowered on every call: this is the reference path for a
/// bare function (an `Interpreter` lowers once and keeps its plan).
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

/// Runs `plan`, the lowered form of `func`, with every step's `perform` (the reference).
pub fn run_plan_into(
    func: &Func,
    plan: &Plan,
    inputs: &[TensorRef<'_>],
    dests: Vec<Option<Tensor>>,
    donated: &mut [Option<Tensor>],
    state: &mut InterpState,
) -> Result<Vec<Tensor>, Error> {
    run_on(&Host::default(), func, plan, inputs, dests, donated, state)
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

/// The interpreter as a backend (the VM on the host, with the thunks it was given).
pub struct Interpreter {
    func: Func,
    plan: Plan,
    host: Host,
    kept: Kept<Host>,
    /// Steps that may run on several threads (`warm.rs`).
    parallel_steps: usize,
}

impl Interpreter {
    /// The reference interpreter of `func`: its plan, every step run by the op's `perform`.
    pub fn new(func: Func) -> Interpreter {
        let plan = lower(&func);
        Interpreter::with_thunks(func, plan, Thunks::new())
    }

    /// An interpreter that runs `plan` (the lowered `func`) with the given compiled thunks
    /// instead of `perform` for their steps.
    pub fn with_thunks(func: Func, plan: Plan, thunks: Thunks) -> Interpreter {
        let host = Host::with_thunks(&plan, thunks);
        let parallel_steps = plan
            .all_steps()
            .into_iter()
            .filter(|s| may_run_in_parallel(&func, s))
            .count();
        Interpreter {
            func,
            plan,
            host,
            kept: Kept::default(),
            parallel_steps,
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
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>, Error> {
        self.run_into(inputs, Vec::new(), &mut [])
    }

    fn run_into(
        &self,
        inputs: &[TensorRef<'_>],
        dests: Vec<Option<Tensor>>,
        donated: &mut [Option<Tensor>],
    ) -> Result<Vec<Tensor>, Error> {
        let (func, plan, host) = (&self.func, &self.plan, &self.host);
        self.kept.with(|st| {
            if super::warm::worthwhile(self.parallel_steps) {
                super::warm::run(|| run_on(host, func, plan, inputs, dests, donated, st))
            } else {
                run_on(host, func, plan, inputs, dests, donated, st)
            }
        })
    }

    fn start_profile(&mut self) -> bool {
        self.kept.start_profile(&self.func, &self.plan);
        true
    }

    fn profile(&self) -> Option<&super::profile::Profile> {
        self.kept.profile()
    }

    fn op_state(&self) -> super::state::OpState {
        self.kept.op_state(&self.plan)
    }

    fn set_op_state(&self, state: &super::state::OpState) -> Result<(), Error> {
        self.kept.set_op_state(&self.func, &self.plan, state)
    }
}
