//! Running compiled functions: the VM over a plan on a device (the host, the GPU), the
//! reference interpreter (the VM on the host), and the `Function` users call.

mod custom_step;
pub mod device;
pub mod function;
pub mod host;
pub mod interp;
pub mod memory;
pub mod profile;
pub mod requests;
mod rows;
mod scan;
pub mod state;
pub mod threads;
pub mod trace;
pub mod vm;
mod warm;

use crate::error::Result;
use crate::tensor::{Tensor, TensorRef};

/// A call of `func` with `n` inputs: one per parameter, or an error that says so.
pub(crate) fn check_input_count(func: &crate::ir::Func, n: usize) -> Result<()> {
    match n == func.params.len() {
        true => Ok(()),
        false => Err(crate::error::Error::Input(format!(
            "{} takes {} inputs, got {n}",
            func.name,
            func.params.len()
        ))),
    }
}

/// What [`Executable::run_keeping_shared`] returns.
pub struct KeptCall {
    /// The function's outputs (not its updates), on the host.
    pub outputs: Vec<Tensor>,
    /// The updates' new values, on the device, in the order of the function's update results.
    pub updates: Vec<std::sync::Arc<dyn crate::shared::DeviceValue>>,
    /// For each shared variable, the device copy of its value this call made, if it made one.
    pub copies: Vec<Option<std::sync::Arc<dyn crate::shared::DeviceValue>>>,
}

/// The compiled form of one instruction that a backend hands the interpreter (Theano's thunk):
/// it computes the instruction's results from its arguments. Instructions without a thunk run
/// their op's `perform`. Arguments are views: a function's inputs reach a thunk without a copy.
pub trait Thunk: Send + Sync {
    /// Computes the instruction's results from `inputs` (its arguments, in order), each a new
    /// array; an error is the instruction's run-time failure.
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>>;

    /// `run`, writing result 0 into `dest` when its dtype and shape fit (a caller's output
    /// buffer, a dead intermediate), instead of into a new array. The default ignores `dest`.
    ///
    /// For an instruction the in-place pass marked, `dest` is the buffer of one of `inputs`
    /// (which views it): an elementwise step that reads each element before writing the same
    /// element. Implementations must therefore keep `dest` alive until they have finished
    /// reading `inputs`, even when they do not use it.
    fn run_into(&self, inputs: &[TensorRef<'_>], dest: Option<Tensor>) -> Result<Vec<Tensor>> {
        let outs = self.run(inputs);
        drop(dest);
        outs
    }

    /// Writes the instruction's only result straight into `out`, a standard-layout buffer of
    /// `dtype` and `shape` that the caller owns (rows of a larger array, say), and returns
    /// `true`; or returns `false` having written nothing, and the caller uses `run_into`. The
    /// default declines.
    ///
    /// # Safety
    /// `out` must be valid for writes of `shape`'s elements of `dtype`, read by no one while
    /// this runs, and overlap none of `inputs`.
    unsafe fn run_into_raw(
        &self,
        _inputs: &[TensorRef<'_>],
        _out: *mut u8,
        _dtype: crate::ir::DType,
        _shape: &[usize],
    ) -> Result<bool> {
        Ok(false)
    }
}

/// What a backend produces: something that runs a whole compiled function. Inputs are the
/// function's parameters (explicit inputs, then shared variables), already checked against
/// their types; outputs are the function's outputs followed by the updates' new values.
pub trait Executable: Send + Sync {
    /// Runs the function on `inputs` (one per parameter) and returns its outputs, then the
    /// updates' new values; an error is the call's run-time failure.
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>>;

    /// `run`, writing output `i` into `dests[i]` where it fits (`Function::call_into`'s
    /// buffers), so a steady state of calls allocates no outputs.
    ///
    /// `donated[i]`, where it is `Some`, is parameter `i`'s own buffer, which the function may
    /// overwrite (the old value of a shared variable it updates; the in-place pass was told so),
    /// and `inputs[i]` is then an empty stand-in. After an error, the donated buffers that still
    /// exist are put back into `donated`, whatever they hold by then.
    fn run_into(
        &self,
        inputs: &[TensorRef<'_>],
        dests: Vec<Option<Tensor>>,
        donated: &mut [Option<Tensor>],
    ) -> Result<Vec<Tensor>>;

    /// Whether the executable keeps shared variables on its device between calls: `Function`
    /// then calls [`Executable::run_keeping_shared`] instead of `run_into`.
    fn keeps_shared(&self) -> bool {
        false
    }

    /// `run` with the explicit `inputs` and the shared variables (`shared`, in parameter
    /// order, locked for the call): each is read from its device copy where it has one on
    /// this executable's device, else from its value, copied in. Returns the `n_outputs`
    /// outputs on the host, the updates' new values on the device, and the copies made of
    /// variables' values (for the variables to keep). A donated variable's device copy
    /// ([`crate::shared::DeviceLock::donated`]) is taken out for the call to write its
    /// update over; the caller then sets every update (`DeviceLock::update`). After an error
    /// every variable has its value back, as before the call.
    fn run_keeping_shared(
        &self,
        _inputs: &[TensorRef<'_>],
        _shared: &mut [crate::shared::DeviceLock<'_>],
        _n_outputs: usize,
    ) -> Result<KeptCall> {
        Err(crate::error::Error::Unsupported(
            "this backend keeps no shared variables on a device".into(),
        ))
    }

    /// Whether `call_direct` may take calls (then worth offering them).
    fn has_direct_call(&self) -> bool {
        false
    }

    /// A fast path for functions with no shared variables (a backend that knows the whole
    /// call in advance: see `jit_cpu`'s direct calls). Computes the outputs into `outputs`
    /// (`inputs` checked, one buffer per output; buffers that do not fit are replaced) and
    /// returns `true`; or returns `false` having changed nothing, and the caller goes through
    /// `run_into`. The default declines.
    fn call_direct(&self, _inputs: &[TensorRef<'_>], _outputs: &mut [Tensor]) -> bool {
        false
    }

    /// Starts timing every step of every call from now on ([`profile`]); `false` where the
    /// backend cannot. Calls then go through the plan's VM (no direct path).
    fn start_profile(&mut self) -> bool {
        false
    }

    /// The profile being collected, once `start_profile` started one.
    fn profile(&self) -> Option<&profile::Profile> {
        None
    }

    /// What the function's ops keep between calls (`state::OpState`): none by default.
    fn op_state(&self) -> state::OpState {
        state::OpState::default()
    }

    /// Replaces what the ops keep between calls (checked against the plan first: an error
    /// changes nothing); the default state of a fresh function resets it.
    fn set_op_state(&self, state: &state::OpState) -> Result<()> {
        match state.hidden.first() {
            None => Ok(()),
            Some(h) => Err(crate::error::Error::Unsupported(format!(
                "this backend keeps no op state (`{}`)",
                h.key()
            ))),
        }
    }
}
