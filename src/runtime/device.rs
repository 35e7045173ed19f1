//! Where the VM's values live and how a step runs there: the [`Device`] trait. The VM
//! (`runtime::vm`) is one walk of the plan over any device; a device says what an array is,
//! how it is copied to and from host memory, and which steps it runs with code of its own (a
//! compiled kernel, a library call, a view). Every other step runs as the op's `perform` on
//! host copies of its arguments, which for the host itself are no copies at all.
//!
//! The devices: the host (`runtime::host::Host`: host arrays, the CPU backend's compiled
//! kernels, the GEMM library, row groups by blocks; with no kernels it is the reference
//! interpreter), [`HostArrays`] (host arrays that are copied at every crossing and every step
//! through `perform`: it tests the VM's copying paths, the ones a GPU takes, against the
//! interpreter), and the GPU (`jit_ptx::device`: CUDA memory, PTX kernels, cuBLAS).

use super::vm::{Env, Kept, VmState};
use crate::error::{Error, Result};
use crate::ir::{DType, Func};
use crate::lower::rows::Role;
use crate::lower::{Kernel, Plan, Step};
use crate::shared::{DeviceLock, DeviceValue};
use crate::tensor::{Tensor, TensorRef};
use std::borrow::Cow;
use std::sync::Arc;

/// Where a VM's values live and how steps run there.
pub trait Device: Send + Sync + Sized {
    /// An array the VM owns: moving it moves the ownership (the VM writes in place only into
    /// arrays it owns, and only on a device that says it can: [`Device::in_place`]).
    type Array: Send;
    /// A borrowed array: a call's input, a step's argument.
    type Ref<'a>
    where
        Self: 'a;

    /// A borrow of the owned array `a`.
    fn view<'a>(&self, a: &'a Self::Array) -> Self::Ref<'a>;
    /// `r` for a shorter time (what a covariant reference does by itself; the compiler cannot
    /// see through an associated type).
    fn reborrow<'a>(&self, r: &'a Self::Ref<'_>) -> Self::Ref<'a>;
    /// The shape of `r`.
    fn shape<'r>(&self, r: &'r Self::Ref<'_>) -> &'r [usize];
    /// The element type of `r`.
    fn dtype(&self, r: &Self::Ref<'_>) -> DType;
    /// Whether `r` is dense and row-major.
    fn is_dense(&self, r: &Self::Ref<'_>) -> bool;
    /// An array with `r`'s elements that the VM owns.
    fn to_owned(&self, r: Self::Ref<'_>) -> Result<Self::Array>;
    /// A device array with the elements of a host array.
    fn upload(&self, t: TensorRef<'_>) -> Result<Self::Array>;
    /// The host array of `a` (the host's own: borrowed; a device's: copied back after the
    /// work queued before).
    fn download<'a>(&self, a: &'a Self::Array) -> Result<Cow<'a, Tensor>>;
    /// `download` of an array the VM gives up.
    fn download_owned(&self, a: Self::Array) -> Result<Tensor>;
    /// `upload` of a host array the VM gives up.
    fn upload_owned(&self, t: Tensor) -> Result<Self::Array>;

    /// Whether the device runs `step` (not an `ifelse` or row group) with code of its own.
    fn runs(&self, step: &Step) -> bool;
    /// Runs `step`, which [`Device::runs`], on `args`. `dest`, where given, is a buffer the
    /// device may write result 0 into (an output the caller offered, a dead intermediate of
    /// the result's type, or, for a step marked in place, the marked argument's own buffer,
    /// which `args` then view: see [`Device::alias`]); it may also drop it.
    fn run(
        &self,
        step: &Step,
        args: &[Self::Ref<'_>],
        dest: Option<Self::Array>,
    ) -> Result<Vec<Self::Array>>;

    /// Runs `step`, marked in place, by updating `buf` where it is: `buf` is the marked
    /// argument's own buffer, which `args` view (see [`Device::alias`]). `None` where the
    /// device has no such form for the step (the VM then calls [`Device::run`]). On an error,
    /// `buf` must hold what it held before: the VM gives it back to its owner (a donated
    /// variable keeps its value).
    fn update_in_place(
        &self,
        _step: &Step,
        _args: &[Self::Ref<'_>],
        _buf: &mut Self::Array,
    ) -> Option<Result<()>> {
        None
    }

    /// Whether the VM may hand a step the buffer of an argument it overwrites (the in-place
    /// pass's marks): only a device whose kernels read each element before writing it there.
    fn in_place(&self) -> bool {
        false
    }
    /// Whether `a`, a value the VM holds, is the only handle to its elements, so that a step
    /// may write over them: always on a device whose arrays own their memory; on one whose
    /// arrays are shared handles (the GPU's), not while a caller, a view, a recorded graph or
    /// a shared variable holds another.
    fn owns(&self, _a: &Self::Array) -> bool {
        true
    }
    /// A view of `a`'s elements that stays valid while `a` moves into [`Device::run`] as its
    /// `dest` (only called where [`Device::in_place`]).
    ///
    /// # Safety
    /// The caller keeps the view no longer than the step that writes into `a`.
    unsafe fn alias<'a>(&self, a: &Self::Array) -> Self::Ref<'a>;

    /// The result of the view step `step` made from its argument's buffer, which the VM gives
    /// up (this step is its last use): no copy where the device can. `Err` hands the argument
    /// back, and the step runs as any other.
    fn view_moving(
        &self,
        _step: &Step,
        a: Self::Array,
    ) -> std::result::Result<Self::Array, Self::Array> {
        Err(a)
    }
    /// `a` as the caller of a function or a user's op receives it: row-major where the device's
    /// steps may leave it otherwise ([`Device::view_moving`]).
    fn row_major(&self, a: Self::Array) -> Self::Array {
        a
    }
    /// Writes `src` into `dst`'s buffer where it fits and gives back the buffer left over
    /// (`src`'s, or `dst`'s old one when `dst` becomes `src`).
    fn assign(&self, dst: &mut Self::Array, src: Self::Array) -> Option<Self::Array> {
        Some(std::mem::replace(dst, src))
    }
    /// The bytes of a dead buffer the VM keeps for the next steps and calls, or `None` where
    /// the device does not reuse buffers (its code makes its own).
    fn pooled_bytes(&self, _a: &Self::Array) -> Option<usize> {
        None
    }
    /// Where `a`'s elements are (to find a donated buffer again after a failed call), or
    /// `None` for an array without elements.
    fn address(&self, a: &Self::Array) -> Option<usize>;
    /// Whether results live in host memory, so the VM checks before a step that a large one
    /// can be allocated (`runtime::memory`).
    fn host_memory(&self) -> bool {
        false
    }
    /// Whether `bytes` (`None`: more than a `usize` counts) more can be allocated for results
    /// (asked where a result would grow step by step until it fails: a `scan`'s stacked
    /// outputs). Host memory asks the allocator; a device of its own says, or says yes.
    fn can_allocate(&self, bytes: Option<usize>) -> bool {
        !self.host_memory() || super::memory::can_allocate(bytes)
    }

    /// Runs the row group `group` of `members` with code of the device's own, or returns
    /// `Ok(false)` having run nothing: the VM then runs the members one by one.
    #[allow(clippy::too_many_arguments)]
    fn run_rows(
        &self,
        _func: &Func,
        _group: &Step,
        _rows: usize,
        _members: &[Step],
        _roles: &[Vec<Role>],
        _env: &mut Env<'_, '_, Self>,
        _state: &mut VmState<Self>,
    ) -> Result<bool> {
        Ok(false)
    }

    /// Element `i` along the leading axis of `a` (a scan's slice of a sequence) as a view of
    /// the device's own, no copy; `None` where the device has none (the VM then cuts the
    /// sequence on the host).
    fn index_leading(&self, _a: &Self::Ref<'_>, _i: usize) -> Option<Self::Array> {
        None
    }

    /// Element `i` along the leading axis of `r` as a borrowed view of its elements (a scan's
    /// slice of a sequence, read where the sequence is), or `None` where the device has no
    /// such view (then [`Device::index_leading`] or host copies). `i` is in range.
    fn slice_leading<'a>(&self, _r: &Self::Ref<'a>, _i: usize) -> Option<Self::Ref<'a>>
    where
        Self: 'a,
    {
        None
    }
    /// Writes `src` over element `i` along the leading axis of `dst` (a scan's stacked output,
    /// filled step by step), or `None` where the device does not (the VM then stacks each
    /// step's array at the end: [`Device::stack`]). An error where `src`'s dtype or shape is
    /// not that of one element; `i` is in range.
    fn write_leading(
        &self,
        _dst: &mut Self::Array,
        _i: usize,
        _src: &Self::Ref<'_>,
    ) -> Option<Result<()>> {
        None
    }
    /// Whether a scan runs its steps in place here: [`Device::slice_leading`] views each
    /// step of a sequence and [`Device::write_leading`] writes each step of a stacked output,
    /// for any array.
    fn in_place_steps(&self) -> bool {
        false
    }

    /// `parts` stacked along a new leading axis on the device (a scan's stacked output), or
    /// `None` where the device does not (the VM then stacks host copies). Each part must be of
    /// dtype `dtype` and shape `elem`: an error names the first that is not.
    fn stack(
        &self,
        _dtype: DType,
        _elem: &[usize],
        _parts: &[Self::Array],
    ) -> Option<Result<Self::Array>> {
        None
    }

    /// Runs a whole call of `plan` on `inputs`: the VM's walk of its steps by default; a
    /// device may replay the work it recorded for an earlier call instead (the GPU's graphs).
    /// `donated[i]`, where `Some`, is parameter `i`'s own buffer (`inputs[i]` is then an empty
    /// stand-in), which the call may overwrite; after an error, the donated buffers still
    /// found are back in `donated` (see `run_plan_into`).
    fn run_call(
        &self,
        func: &Func,
        plan: &Plan,
        inputs: &[Self::Ref<'_>],
        donated: &mut [Option<Self::Array>],
        state: &mut VmState<Self>,
    ) -> Result<Vec<Self::Array>> {
        super::vm::run_plan_into(self, func, plan, inputs, Vec::new(), donated, state)
    }

    /// `a` as a shared variable's value kept on the device between calls, or `None` where
    /// the device keeps none there (its arrays are host memory).
    fn share(&self, _a: &Self::Array) -> Option<Arc<dyn DeviceValue>> {
        None
    }
    /// This device's array of a kept value ([`Device::share`]), or `None` where it is
    /// another device's.
    fn shared_array(&self, _v: &dyn DeviceValue) -> Option<Self::Array> {
        None
    }
    /// Whether [`Device::share`] keeps values.
    fn keeps_shared(&self) -> bool {
        false
    }

    /// Waits for the work queued so far (the profiler times a step between two waits); a
    /// device that runs everything at once has nothing to wait for.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// What a step (not an `ifelse` or row group) computes, on host arrays: the op's `perform`,
/// and for a product the plan's folded transposes and fused update. A device runs the steps
/// it has no code for through this, on copies.
pub fn host_step(step: &Step, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    if let Kernel::Gemm { .. } = step.kernel {
        let views: Vec<TensorRef<'_>> = args.iter().map(|t| t.view()).collect();
        return host_gemm(step, &views, None).map(|t| vec![t]);
    }
    crate::perform::perform(&step.op, args)
}

/// A `gemm` step on host arrays through the GEMM library: the product of arguments 0 and 1
/// (each read transposed where the plan folded a transpose), into `dest` where it fits; with
/// a fused update, argument 2 minus the product times the scale, written over `dest` when
/// the caller hands over argument 2's own buffer there, else over a copy of it.
pub(super) fn host_gemm(
    step: &Step,
    args: &[TensorRef<'_>],
    dest: Option<Tensor>,
) -> Result<Tensor> {
    let Kernel::Gemm { transposed, update } = step.kernel else {
        return Err(Error::Runtime(format!(
            "{}: not a gemm step",
            step.op.display_name()
        )));
    };
    let operands = 2 + update.is_some() as usize;
    if args.len() != operands {
        return Err(Error::Runtime(format!(
            "{} takes {operands} operands, got {}",
            if update.is_some() {
                "a gemm update"
            } else {
                "matmul"
            },
            args.len()
        )));
    }
    let operand = |k: usize| {
        let t = args[k].reborrow();
        if transposed[k] {
            t.swap_last_two()
        } else {
            t
        }
    };
    let (a, b) = (operand(0), operand(1));
    match update {
        None => crate::perform::matmul_into(&a, &b, dest),
        Some(u) => {
            let mut w = match dest {
                Some(w) => w,
                None => args[2].to_owned(),
            };
            crate::perform::matmul_update(&a, &b, &mut w, u.scale)?;
            Ok(w)
        }
    }
}

/// Runs `plan`, lowered from `func`, on `device` with `inputs` (device arrays, checked
/// against the parameters' types); the outputs stay on the device.
pub fn run_plan<D: Device>(
    device: &D,
    func: &Func,
    plan: &Plan,
    state: &mut VmState<D>,
    inputs: &[D::Ref<'_>],
) -> Result<Vec<D::Array>> {
    super::check_input_count(func, inputs.len())?;
    for (&p, t) in func.params.iter().zip(inputs) {
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
    }
    device.run_call(func, plan, inputs, &mut [], state)
}

/// The host as a device whose arrays are copied at every crossing, every step through
/// `perform` on those copies, nothing in place: the paths a GPU's values take, tested
/// against the interpreter without a GPU.
pub struct HostArrays;

impl Device for HostArrays {
    type Array = Arc<Tensor>;
    type Ref<'a> = Arc<Tensor>;

    fn view(&self, a: &Arc<Tensor>) -> Arc<Tensor> {
        a.clone()
    }
    fn reborrow(&self, r: &Arc<Tensor>) -> Arc<Tensor> {
        r.clone()
    }
    fn shape<'r>(&self, r: &'r Arc<Tensor>) -> &'r [usize] {
        r.shape()
    }
    fn dtype(&self, r: &Arc<Tensor>) -> DType {
        r.dtype()
    }
    fn is_dense(&self, r: &Arc<Tensor>) -> bool {
        r.view().is_standard_layout()
    }
    fn to_owned(&self, r: Arc<Tensor>) -> Result<Arc<Tensor>> {
        Ok(Arc::new((*r).clone()))
    }
    fn upload(&self, t: TensorRef<'_>) -> Result<Arc<Tensor>> {
        Ok(Arc::new(t.to_owned()))
    }
    fn download<'a>(&self, a: &'a Arc<Tensor>) -> Result<Cow<'a, Tensor>> {
        Ok(Cow::Owned((**a).clone()))
    }
    fn download_owned(&self, a: Arc<Tensor>) -> Result<Tensor> {
        Ok((*a).clone())
    }
    fn upload_owned(&self, t: Tensor) -> Result<Arc<Tensor>> {
        Ok(Arc::new(t))
    }
    fn runs(&self, _: &Step) -> bool {
        false
    }
    fn run(
        &self,
        step: &Step,
        _: &[Arc<Tensor>],
        _: Option<Arc<Tensor>>,
    ) -> Result<Vec<Self::Array>> {
        Err(Error::Runtime(format!(
            "{}: host arrays have no code of their own",
            step.op.display_name()
        )))
    }
    unsafe fn alias<'a>(&self, a: &Arc<Tensor>) -> Self::Ref<'a> {
        a.clone()
    }
    fn address(&self, a: &Arc<Tensor>) -> Option<usize> {
        (!a.is_empty()).then_some(Arc::as_ptr(a) as usize)
    }
}

/// A plan on a device, called with host arrays (copied in and out): an `Executable` for
/// `Function`.
pub struct HostCalls<D: Device> {
    /// The device the plan runs on.
    pub device: D,
    /// The function the plan was lowered from (for types and messages).
    pub func: Func,
    /// The plan run at each call.
    pub plan: Plan,
    kept: Kept<D>,
}

impl<D: Device> HostCalls<D> {
    /// Calls of `plan` (lowered from `func`) on `device`.
    pub fn new(device: D, func: Func, plan: Plan) -> HostCalls<D> {
        HostCalls {
            device,
            func,
            plan,
            kept: Kept::default(),
        }
    }
}

impl<D: Device> HostCalls<D> {
    /// Copies of `inputs` on the device.
    fn upload_all(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<D::Array>> {
        inputs
            .iter()
            .map(|t| self.device.upload(t.reborrow()))
            .collect()
    }

    /// A call on device arrays (the parameters', or the empty stand-ins of `donated` ones),
    /// its results left there.
    fn call(&self, on: &[D::Array], donated: &mut [Option<D::Array>]) -> Result<Vec<D::Array>> {
        let refs: Vec<D::Ref<'_>> = on.iter().map(|a| self.device.view(a)).collect();
        self.kept.with(|st| {
            self.device
                .run_call(&self.func, &self.plan, &refs, donated, st)
        })
    }

    /// The device array of a shared variable's value for a call: its device copy where it
    /// is this device's, else the value copied in (kept for the next calls where the call
    /// only reads it). A donated variable's copy is taken out of the variable, so that the
    /// call holds the only handle to it and may write the update over it.
    fn shared_input(&self, lock: &mut DeviceLock<'_>) -> Result<SharedInput<D>> {
        let kept = lock
            .device()
            .and_then(|c| self.device.shared_array(&*c.value));
        if let Some(a) = kept {
            if lock.donated() {
                lock.take_device()?;
                return Ok(SharedInput::Donated(a));
            }
            return Ok(SharedInput::Read(a, None));
        }
        let a = self.device.upload(lock.value()?.view())?;
        if lock.donated() {
            return Ok(SharedInput::Donated(a));
        }
        let copy = self.device.share(&a);
        Ok(SharedInput::Read(a, copy))
    }

    /// After a failed call, gives each donated variable its device copy back where the call
    /// did not use it up (`give_back_donated` found it); a variable whose newer value is gone
    /// with it (the call overwrote the buffer before failing, which
    /// `rewrite::inplace::commit_last` rules out) becomes zeros, and the error says so rather
    /// than leave the state silently wrong. Returns the error to report.
    fn give_back(
        &self,
        e: Error,
        shared: &mut [DeviceLock<'_>],
        donated: &mut [Option<D::Array>],
        n_in: usize,
    ) -> Error {
        let mut lost = Vec::new();
        for (i, lock) in shared.iter_mut().enumerate() {
            let back = donated.get_mut(n_in + i).and_then(Option::take);
            if let Some(value) = back.and_then(|a| self.device.share(&a)) {
                lock.put_back(value);
            } else if lock.lose() {
                lost.push(format!("#{i}"));
            }
        }
        if lost.is_empty() {
            return e;
        }
        Error::Runtime(format!(
            "{e} (internal error: the failed call lost the value of shared variable(s) {} on \
             the device, now zeros)",
            lost.join(", ")
        ))
    }
}

/// A shared variable's value as a call takes it (`HostCalls::shared_input`).
enum SharedInput<D: Device> {
    /// Read where it is; the device copy this call made, if it made one.
    Read(D::Array, Option<Arc<dyn DeviceValue>>),
    /// Handed to the call to overwrite (the variable's device copy, taken out, or a copy of
    /// its host value).
    Donated(D::Array),
}

impl<D: Device> super::Executable for HostCalls<D> {
    fn run(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let outs = self.call(&self.upload_all(inputs)?, &mut [])?;
        outs.into_iter()
            .map(|a| self.device.download_owned(a))
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

    fn keeps_shared(&self) -> bool {
        self.device.keeps_shared()
    }

    fn run_keeping_shared(
        &self,
        inputs: &[TensorRef<'_>],
        shared: &mut [DeviceLock<'_>],
        n_outputs: usize,
    ) -> Result<super::KeptCall> {
        let mut on = self.upload_all(inputs)?;
        let n_in = on.len();
        let mut copies = Vec::with_capacity(shared.len());
        let mut donated: Vec<Option<D::Array>> = Vec::new();
        for i in 0..shared.len() {
            let lock = &mut shared[i];
            let input = match self.shared_input(lock) {
                Ok(input) => input,
                Err(e) => return Err(self.give_back(e, shared, &mut donated, n_in)),
            };
            match input {
                SharedInput::Read(a, copy) => {
                    on.push(a);
                    copies.push(copy);
                }
                SharedInput::Donated(a) => {
                    let stand_in = Tensor::empty(shared[i].dtype());
                    donated.resize_with(n_in + i + 1, || None);
                    donated[n_in + i] = Some(a);
                    match self.device.upload(stand_in.view()) {
                        Ok(s) => on.push(s),
                        Err(e) => return Err(self.give_back(e, shared, &mut donated, n_in)),
                    }
                    copies.push(None);
                }
            }
        }
        let mut outs = match self.call(&on, &mut donated) {
            Ok(outs) => outs,
            Err(e) => return Err(self.give_back(e, shared, &mut donated, n_in)),
        };
        let updates = outs
            .drain(n_outputs.min(outs.len())..)
            .map(|a| {
                self.device
                    .share(&a)
                    .ok_or_else(|| Error::Runtime("the device keeps no shared values".into()))
            })
            .collect::<Result<Vec<_>>>();
        let outputs = outs
            .into_iter()
            .map(|a| self.device.download_owned(a))
            .collect::<Result<Vec<_>>>();
        // The donated buffers are the call's now (`donated` is empty): after a failure here
        // (a failed device) the updates are lost with them.
        let (updates, outputs) = match (updates, outputs) {
            (Ok(u), Ok(o)) => (u, o),
            (Err(e), _) | (_, Err(e)) => return Err(self.give_back(e, shared, &mut donated, n_in)),
        };
        Ok(super::KeptCall {
            outputs,
            updates,
            copies,
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

    fn set_op_state(&self, state: &super::state::OpState) -> Result<()> {
        self.kept.set_op_state(&self.func, &self.plan, state)
    }
}
