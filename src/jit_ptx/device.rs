//! Running the plan's kernels on the GPU: arrays in device memory (`DeviceTensor`), one
//! launcher for map and reduce kernels over them (`GpuKernel::run`, parameters from
//! `launch.rs` exactly as the host oracle gets them), and `DeviceFunction`: a whole plan on the
//! device, values kept there between steps and between calls (inputs and outputs are
//! `DeviceTensor`s). It is the VM (`runtime::vm`) over this function's map and
//! reduce kernels, f32 and f64 products (cuBLAS, `blas.rs`) and the plan's views; the VM reads
//! `ifelse` conditions back and runs every other step (other shape ops, random ops, custom
//! ops) on the host with explicit copies each way. This is `Backend::Gpu`.

use super::cuda::{Device, DeviceBuffer, Kernel, Module};
use super::launch::{kernel_launch, Launch, Operand};
use super::replay::{self, Action, Replay, Replays};
use super::{KernelInfo, KernelKind};
use crate::error::{Error, Result};
use crate::for_each_dtype;
use crate::ir::{DType, Func};
use crate::lower::view::{Layout, View};
use crate::lower::{Plan, Step};
use crate::runtime::device::Device as VmDevice;
use crate::runtime::vm::{Kept, VmState};
use crate::shared::DeviceValue;
use crate::tensor::{Tensor, TensorRef};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Threads per block (a multiple of 32, as the reduce kernel requires).
const BLOCK: u32 = 256;

/// An array in device memory: a buffer, a dtype, a shape and element strides over the buffer.
#[derive(Clone)]
pub struct DeviceTensor {
    buf: Arc<DeviceBuffer>,
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    /// Where element 0 is in the buffer, in elements (a view's offset: a slice).
    offset: isize,
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

fn row_major(shape: &[usize]) -> Vec<isize> {
    Layout::row_major(shape).strides
}

impl DeviceTensor {
    /// A row-major array of `dtype` and `shape` whose elements are not set yet.
    /// An error, not an overflow, where its size in bytes does not fit in an address (a
    /// result sized at run time from a huge attribute: a convolution's padding of 2^62).
    pub fn uninit(dev: &Arc<Device>, dtype: DType, shape: &[usize]) -> Result<DeviceTensor> {
        let bytes = crate::runtime::memory::array_bytes(dtype, shape).ok_or_else(|| {
                Error::Runtime(format!(
                    "an array of shape {shape:?} ({dtype}) needs more bytes than an address holds, more than can be allocated"
                ))
            })?;
        Ok(DeviceTensor {
            buf: Arc::new(dev.alloc(bytes)?),
            dtype,
            shape: shape.to_vec(),
            strides: row_major(shape),
            offset: 0,
        })
    }

    /// A copy of `t` on the device, row-major.
    pub fn upload(dev: &Arc<Device>, t: TensorRef<'_>) -> Result<DeviceTensor> {
        if !t.is_standard_layout() {
            return DeviceTensor::upload(dev, t.to_standard_owned().view());
        }
        let d = DeviceTensor::uninit(dev, t.dtype(), t.shape())?;
        // SAFETY: `t` is standard layout: its `len` elements are contiguous from `as_ptr`.
        unsafe { dev.upload(&d.buf, t.as_ptr(), t.len() * t.dtype().size())? };
        Ok(d)
    }

    /// A host copy, row-major (after all queued work).
    pub fn download(&self) -> Result<Tensor> {
        crate::runtime::memory::check_host_array(self.dtype, &self.shape, "a copy to the host")?;
        if !self.is_row_major() {
            return self.download_view();
        }
        let mut t = Tensor::zeros(self.dtype, &self.shape);
        let bytes = t.len() * self.dtype.size();
        let dst = for_each_dtype!(&mut t, a => a.as_mut_ptr() as *mut u8);
        let at = self.offset as usize * self.dtype.size();
        // SAFETY: `t` is a fresh row-major array of the same dtype and shape; the view's
        // elements are the `t.len()` from its offset, inside the buffer.
        unsafe { self.buf.device().download(dst, &self.buf, at, bytes)? };
        Ok(t)
    }

    /// `download` of a view (a transpose, a broadcast, a slice): the span of the buffer the
    /// view reaches is copied back as one piece, then gathered in row-major order.
    fn download_view(&self) -> Result<Tensor> {
        let n: usize = self.shape.iter().product();
        let esize = self.dtype.size();
        if n == 0 {
            return Ok(Tensor::zeros(self.dtype, &self.shape));
        }
        // The lowest and highest elements the view reaches (strides may be negative).
        let (mut lo, mut hi) = (self.offset, self.offset);
        for (&d, &st) in self.shape.iter().zip(&self.strides) {
            let reach = (d as isize - 1) * st;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        let span = (hi - lo) as usize + 1;
        let mut raw = vec![0u8; span * esize];
        // SAFETY: the view reaches elements `lo ..= hi` of its buffer, which holds them.
        unsafe {
            self.buf.device().download(
                raw.as_mut_ptr(),
                &self.buf,
                lo as usize * esize,
                span * esize,
            )?
        };
        let mut flat = Tensor::zeros(self.dtype, &self.shape);
        let mut index = vec![0usize; self.shape.len()];
        let dst = for_each_dtype!(&mut flat, a => a.as_mut_ptr() as *mut u8);
        for k in 0..n {
            let off = self.offset - lo
                + index
                    .iter()
                    .zip(&self.strides)
                    .map(|(&i, &st)| i as isize * st)
                    .sum::<isize>();
            // SAFETY: `0 <= off < span`, `k < n`; both arrays hold elements of `esize` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    raw.as_ptr().add(off as usize * esize),
                    dst.add(k * esize),
                    esize,
                )
            };
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(flat)
    }

    /// Whether the elements are laid out row-major and dense from the view's offset.
    pub fn is_row_major(&self) -> bool {
        self.layout().is_row_major()
    }

    /// The view `v` of this array (`lower::view`) over the same buffer, no copy, or `None`
    /// when it does not apply (a reshape of an array that is not row-major, a shape that does
    /// not fit) and the step runs on the host.
    pub fn view(&self, v: &View) -> Option<DeviceTensor> {
        let l = v.apply(&self.layout())?;
        Some(DeviceTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape: l.shape,
            strides: l.strides,
            offset: l.offset,
        })
    }

    fn layout(&self) -> Layout {
        Layout {
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            offset: self.offset,
        }
    }

    /// The element type of the array.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The array's shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The address of element 0 (the view's offset into its buffer).
    pub(super) fn address(&self) -> u64 {
        let at = self.offset as i64 * self.dtype.size() as i64;
        self.buf.address().wrapping_add_signed(at)
    }

    pub(super) fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }

    /// Element `i` along the leading axis, a view (`None` for a scalar or `i` out of range).
    pub(super) fn index_leading(&self, i: usize) -> Option<DeviceTensor> {
        if self.shape.first().is_none_or(|&n| i >= n) {
            return None;
        }
        Some(DeviceTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape: self.shape[1..].to_vec(),
            strides: self.strides[1..].to_vec(),
            offset: self.offset + i as isize * self.strides[0],
        })
    }

    /// Whether `other` reads this array's buffer (any view of it).
    pub(super) fn buffer_of(&self, other: &DeviceTensor) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }

    /// Whether `other` is this same array: the same buffer, viewed the same way.
    pub(super) fn same_elements(&self, other: &DeviceTensor) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
            && self.offset == other.offset
            && self.shape == other.shape
            && self.strides == other.strides
            && self.dtype == other.dtype
    }

    /// The same view of a copy of the whole buffer (queued).
    pub(super) fn copy_buffer(&self, dev: &Arc<Device>) -> Result<DeviceTensor> {
        let bytes = self.buf.bytes();
        let buf = Arc::new(dev.alloc(bytes)?);
        dev.copy(&buf, &self.buf, 0, bytes)?;
        Ok(DeviceTensor {
            buf,
            ..self.clone()
        })
    }

    /// Where element 0 is in the buffer, in bytes (for a row-major view, which starts there).
    pub(super) fn byte_offset(&self) -> usize {
        self.offset.max(0) as usize * self.dtype.size()
    }
}

impl Operand for DeviceTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn strides(&self) -> Vec<isize> {
        self.strides.clone()
    }
}

/// One loaded kernel and what it computes.
pub struct GpuKernel {
    /// The kernel's entry name, kind and step.
    pub info: KernelInfo,
    kernel: Kernel,
    /// Keeps the module (and so `kernel`) loaded.
    _module: Arc<Module>,
}

impl GpuKernel {
    /// The kernels of `infos` from the loaded `module`.
    pub fn load_all(module: &Arc<Module>, infos: &[KernelInfo]) -> Result<Vec<GpuKernel>> {
        infos
            .iter()
            .map(|info| {
                Ok(GpuKernel {
                    kernel: module.function(&info.name)?,
                    info: info.clone(),
                    _module: module.clone(),
                })
            })
            .collect()
    }

    /// Queues the kernel on `inputs` (the step's arguments) and returns its results, fresh
    /// row-major arrays; result 0 in `dest` instead where it may go there
    /// ([`GpuKernel::may_write`]).
    pub fn run(
        &self,
        dev: &Arc<Device>,
        inputs: &[&DeviceTensor],
        dest: Option<DeviceTensor>,
    ) -> Result<Vec<DeviceTensor>> {
        let info = &self.info;
        // Inputs may be views: an offset into their buffer (`address`), negative strides along
        // reversed axes; the kernels index them with signed 64-bit offsets.
        let launch: Launch = kernel_launch(info, inputs)?;
        let mut dest = dest.filter(|d| {
            d.dtype == info.out_dtypes[0]
                && d.shape == info.result_shape(0, &launch)
                && self.may_write(d, inputs)
        });
        let outs = info
            .out_dtypes
            .iter()
            .enumerate()
            .map(|(o, &d)| match dest.take() {
                Some(t) => Ok(t),
                None => DeviceTensor::uninit(dev, d, info.result_shape(o, &launch)),
            })
            .collect::<Result<Vec<_>>>()?;
        let host_copies =
            || -> Result<Vec<Tensor>> { inputs.iter().map(|t| t.download()).collect() };
        if !launch.work {
            if info.checks_indices() && inputs.get(1).is_some_and(|i| i.len() > 0) {
                // Nothing to compute, but indices to check: `perform`'s check (and its
                // result) on the host.
                let host = host_copies()?;
                let refs: Vec<TensorRef> = host.iter().map(|t| t.view()).collect();
                let t = info.on_host(&refs)?;
                return Ok(vec![DeviceTensor::upload(dev, t.view())?]);
            }
            return Ok(outs);
        }
        let mut params: Vec<u64> = outs.iter().map(|o| o.address()).collect();
        params.extend(inputs.iter().map(|t| t.address()));
        // The flag of an index out of range, after the inputs: zeroed on the stream (an
        // upload from host memory would wait for the work queued before it).
        let flag = match info.checks_indices() {
            true => {
                let f = DeviceTensor::uninit(dev, DType::I32, &[1])?;
                dev.zero(f.buffer(), DType::I32.size())?;
                params.push(f.address());
                Some(f)
            }
            false => None,
        };
        // A sort's scratch arrays, after the inputs.
        let n_out: usize = launch.out_shape.iter().product();
        let scratch = (0..info.scratch_arrays())
            .map(|_| DeviceTensor::uninit(dev, DType::I64, &[n_out]))
            .collect::<Result<Vec<_>>>()?;
        params.extend(scratch.iter().map(|t| t.address()));
        params.extend(launch.scalars.iter().map(|&s| s as u64));
        // Enough blocks to fill the GPU, no more than the work needs (both kernels stride).
        let fill = 32 * dev.sms as usize;
        let grid = match info.kind {
            KernelKind::Map
            | KernelKind::Random
            | KernelKind::Gather(_)
            | KernelKind::Running(_)
            | KernelKind::Scatter(_)
            | KernelKind::Conv(_)
            | KernelKind::Pool(..)
            | KernelKind::ConvGrad(..)
            | KernelKind::Sort(_)
            | KernelKind::Concat(_)
            | KernelKind::OneHot(_) => launch.scalars[0].max(0) as usize / BLOCK as usize + 1,
            KernelKind::Reduce => launch.scalars[0].max(0) as usize,
            // One block per row.
            KernelKind::Rows(kept) => launch.out_shape[..kept].iter().product(),
        }
        .min(fill.max(1) * 8)
        .min(i32::MAX as usize) as u32;
        // SAFETY: the parameters are the kernel's (docs/gpu.md): the outputs just allocated for
        // the launch's output shape, the inputs' buffers, which hold every element their shape
        // and strides reach, and the launch's scalars for those shapes and strides.
        unsafe { dev.launch(self.kernel, grid, BLOCK, &params)? };
        if let Some(f) = flag {
            // Reading the flag waits for the kernel: the price of an error that names the
            // index, found where it is (a deferred check is left for later).
            if f.download()?.to_f64_vec()[0] != 0.0 {
                let host = host_copies()?;
                let refs: Vec<TensorRef> = host.iter().map(|t| t.view()).collect();
                return Err(info.index_error(&refs));
            }
        }
        Ok(outs)
    }
}

impl GpuKernel {
    /// Whether result 0 may be written into `dest` (of its dtype and shape): a map kernel
    /// (each element written after its thread read the elements it needs there) into a dense
    /// buffer that is either no input's or the marked argument's alone, read the same way
    /// (the kernel was compiled for that aliasing: `MapSpec::inplace`). Other kernels write
    /// fresh arrays.
    fn may_write(&self, dest: &DeviceTensor, inputs: &[&DeviceTensor]) -> bool {
        if self.info.kind != KernelKind::Map || !dest.is_row_major() {
            return false;
        }
        inputs.iter().enumerate().all(|(j, t)| {
            !dest.buffer_of(t) || (self.info.inplace == Some(j) && t.same_elements(dest))
        })
    }
}

/// The map and reduce kernels of `plan` (lowered from `func`), loaded on `device`: PTX for a
/// GPU (dumping the `llvm` and `ptx` stages `dump` asks for), host code for a host device.
pub fn load_kernels(
    func: &Func,
    plan: &Plan,
    device: &Arc<Device>,
    dump: &crate::dump::DumpOptions,
) -> Result<Vec<GpuKernel>> {
    let (module, infos) = if device.is_host() {
        let kernels = super::host::host_kernels(func, plan)?;
        let entries = kernels.iter().map(|(i, f)| (i.name.clone(), *f)).collect();
        let infos: Vec<KernelInfo> = kernels.into_iter().map(|(i, _)| i).collect();
        (device.host_module(entries), infos)
    } else {
        let m = super::ptx_for_plan(func, plan, device.arch())?;
        dump.dump(&func.name, "llvm", || m.llvm.clone());
        dump.dump(&func.name, "ptx", || m.ptx.clone());
        (device.load(&m.ptx)?, m.kernels)
    };
    GpuKernel::load_all(&Arc::new(module), &infos)
}

/// A compiled function's device for the VM (`runtime::vm`): its kernels by step, its
/// products through cuBLAS, the plan's views of device arrays. What it has no code for (other
/// shape ops, random ops, custom ops) the VM runs on host copies; a product cuBLAS does not
/// take runs on host copies here. Arrays are handles to device buffers, so an input the VM
/// wants to own is shared, not copied; a step writes over an argument's buffer (its in-place
/// mark: map kernels, cuBLAS's updates) only where the VM holds the buffer's one handle
/// (`owns`), which no caller, view, recorded graph or shared variable then shares.
struct GpuSteps {
    device: Arc<Device>,
    kernels: HashMap<crate::lower::StepId, GpuKernel>,
    /// Calls recorded as graphs, by their inputs' dtypes and shapes (`replay.rs`).
    replays: Replays,
}

impl GpuSteps {
    /// `step` on host copies of `args`, its results copied back.
    fn on_host(&self, step: &Step, args: &[DeviceTensor]) -> Result<Vec<DeviceTensor>> {
        let host = args
            .iter()
            .map(DeviceTensor::download)
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = host.iter().collect();
        crate::runtime::device::host_step(step, &refs)?
            .iter()
            .map(|t| self.upload(t.view()))
            .collect()
    }
}

impl VmDevice for GpuSteps {
    type Array = DeviceTensor;
    type Ref<'a> = DeviceTensor;

    fn view(&self, a: &DeviceTensor) -> DeviceTensor {
        a.clone()
    }
    fn reborrow(&self, r: &DeviceTensor) -> DeviceTensor {
        r.clone()
    }
    fn shape<'r>(&self, r: &'r DeviceTensor) -> &'r [usize] {
        &r.shape
    }
    fn dtype(&self, r: &DeviceTensor) -> DType {
        r.dtype
    }
    fn is_dense(&self, r: &DeviceTensor) -> bool {
        r.is_row_major()
    }
    fn to_owned(&self, r: DeviceTensor) -> Result<DeviceTensor> {
        Ok(r)
    }
    fn upload(&self, t: TensorRef<'_>) -> Result<DeviceTensor> {
        DeviceTensor::upload(&self.device, t)
    }
    fn download<'a>(&self, a: &'a DeviceTensor) -> Result<Cow<'a, Tensor>> {
        a.download().map(Cow::Owned)
    }
    fn download_owned(&self, a: DeviceTensor) -> Result<Tensor> {
        a.download()
    }
    fn upload_owned(&self, t: Tensor) -> Result<DeviceTensor> {
        DeviceTensor::upload(&self.device, t.view())
    }

    fn runs(&self, step: &Step) -> bool {
        self.kernels.contains_key(&step.id)
            || matches!(
                step.kernel,
                crate::lower::Kernel::Gemm { .. } | crate::lower::Kernel::View(_)
            )
    }

    fn run(
        &self,
        step: &Step,
        args: &[DeviceTensor],
        dest: Option<DeviceTensor>,
    ) -> Result<Vec<DeviceTensor>> {
        if let Some(kernel) = self.kernels.get(&step.id) {
            let refs: Vec<&DeviceTensor> = args.iter().collect();
            return kernel.run(&self.device, &refs, dest);
        }
        match &step.kernel {
            crate::lower::Kernel::Gemm { transposed, update } => {
                let update = match (update, args.get(2)) {
                    (Some(u), Some(w)) => Some((w, u.scale)),
                    (None, _) => None,
                    (Some(_), None) => {
                        return Err(Error::Runtime("a gemm update without its matrix".into()))
                    }
                };
                if !super::blas::supports(args[0].dtype()) {
                    return self.on_host(step, args);
                }
                let (a, b) = (&args[0], &args[1]);
                match super::blas::matmul(&self.device, a, b, *transposed, update, dest) {
                    Ok(c) => Ok(vec![c]),
                    // No cuBLAS, or a batch broadcast it does not take: on the host.
                    Err(Error::Unsupported(_)) => self.on_host(step, args),
                    Err(e) => Err(e),
                }
            }
            // Views of device arrays: no copy, no host step.
            crate::lower::Kernel::View(v) => match args[0].view(v) {
                Some(v) => Ok(vec![v]),
                None => self.on_host(step, args),
            },
            _ => self.on_host(step, args),
        }
    }

    /// The kernels write each element after reading it (a map kernel compiled for its step's
    /// in-place mark), and cuBLAS updates its matrix where it is.
    fn in_place(&self) -> bool {
        true
    }
    fn can_allocate(&self, bytes: Option<usize>) -> bool {
        self.device.can_allocate(bytes)
    }
    fn owns(&self, a: &DeviceTensor) -> bool {
        Arc::strong_count(&a.buf) == 1
    }
    unsafe fn alias<'a>(&self, a: &DeviceTensor) -> Self::Ref<'a> {
        a.clone()
    }
    fn address(&self, a: &DeviceTensor) -> Option<usize> {
        (!a.shape.contains(&0)).then(|| Arc::as_ptr(&a.buf) as usize + a.offset as usize)
    }

    /// A call replayed from its graph where its signature has one, recorded where it is the
    /// signature's second, step by step otherwise (`replay.rs`). Donated buffers are written
    /// over in place by the steps; a replay copies results into them.
    fn run_call(
        &self,
        func: &Func,
        plan: &Plan,
        inputs: &[DeviceTensor],
        donated: &mut [Option<DeviceTensor>],
        state: &mut VmState<Self>,
    ) -> Result<Vec<DeviceTensor>> {
        let steps = |inputs: &[DeviceTensor],
                     donated: &mut [Option<DeviceTensor>],
                     state: &mut VmState<Self>| {
            crate::runtime::vm::run_plan_into(self, func, plan, inputs, Vec::new(), donated, state)
        };
        // The arrays the call reads: a donated parameter's buffer stands for its stand-in.
        let reads: Vec<DeviceTensor> = (inputs.iter().enumerate())
            .map(|(i, t)| donated.get(i).and_then(Option::as_ref).unwrap_or(t).clone())
            .collect();
        match self.replays.action(&reads, state.profiling()) {
            Action::Steps => {
                // No other handle of a donated buffer may be left: the steps may write over it.
                drop(reads);
                steps(inputs, donated, state)
            }
            Action::Replay(r) => {
                state.set_calls(state.calls() + 1);
                r.run(&self.device, &reads, donated)
            }
            Action::Record(sig) => {
                let calls = state.calls();
                let own = replay::own_inputs(&self.device, &reads)?;
                // One capture at a time on a device: a call that finds another in progress
                // runs step by step and leaves its signature to be recorded later.
                let Ok(capture) = self.device.begin_capture() else {
                    drop(reads);
                    return steps(inputs, donated, state);
                };
                // Recorded on the replay's own arrays, none donated (a replay copies its
                // inputs in, and may copy its results into donated buffers: `Replay::run`).
                let recorded =
                    steps(&own, &mut [], state).and_then(|outs| Ok((capture.finish()?, outs)));
                match recorded {
                    Ok((graph, outs)) => {
                        let r = Arc::new(Replay::new(graph, own, reads.clone(), outs));
                        self.replays.recorded(sig, Some(r.clone()));
                        r.run(&self.device, &reads, donated)
                    }
                    // Nothing ran (no step of the plan runs on the host: `Replays::of`): run
                    // it step by step, with the error it then gives, counted once.
                    Err(_) => {
                        self.replays.recorded(sig, None);
                        state.set_calls(calls);
                        drop(reads);
                        steps(inputs, donated, state)
                    }
                }
            }
        }
    }

    fn index_leading(&self, a: &DeviceTensor, i: usize) -> Option<DeviceTensor> {
        a.index_leading(i)
    }

    /// One copy per part into a fresh array, on the device; `None` (stacked on the host)
    /// where a part is a strided view.
    fn stack(
        &self,
        dtype: DType,
        elem: &[usize],
        parts: &[DeviceTensor],
    ) -> Option<Result<DeviceTensor>> {
        let kinds = parts.iter().map(|p| (p.dtype(), p.shape()));
        if let Err(e) = crate::tensor::check_stack_parts(dtype, elem, kinds) {
            return Some(Err(Error::Shape(e)));
        }
        if !parts.iter().all(DeviceTensor::is_row_major) {
            return None;
        }
        let stack = || {
            let shape: Vec<usize> = std::iter::once(parts.len())
                .chain(elem.iter().copied())
                .collect();
            let out = DeviceTensor::uninit(&self.device, dtype, &shape)?;
            let bytes = elem.iter().product::<usize>() * dtype.size();
            for (k, p) in parts.iter().enumerate() {
                self.device
                    .copy_at(out.buffer(), k * bytes, p.buffer(), p.byte_offset(), bytes)?;
            }
            Ok(out)
        };
        Some(stack())
    }

    fn share(&self, a: &DeviceTensor) -> Option<Arc<dyn DeviceValue>> {
        Some(Arc::new(a.clone()))
    }
    fn shared_array(&self, v: &dyn DeviceValue) -> Option<DeviceTensor> {
        let t = v.as_any().downcast_ref::<DeviceTensor>()?;
        Arc::ptr_eq(t.buf.device(), &self.device).then(|| t.clone())
    }
    fn keeps_shared(&self) -> bool {
        true
    }

    fn synchronize(&self) -> Result<()> {
        self.device.synchronize()
    }
}

/// A shared variable's value kept on the device between calls (`Backend::Gpu`).
impl DeviceValue for DeviceTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn download(&self) -> Result<Tensor> {
        DeviceTensor::download(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A whole function on the device (see the module doc for what it takes): the VM
/// (`runtime::vm`) over this function's kernels.
pub struct DeviceFunction {
    func: Func,
    plan: Plan,
    steps: GpuSteps,
    kept: Kept<GpuSteps>,
}

impl DeviceFunction {
    /// Compiles the verified SSA function `func` (optimized first) for the device.
    pub fn compile(func: Func) -> Result<DeviceFunction> {
        DeviceFunction::compile_on(func, super::cuda::device()?)
    }

    /// `compile` for `device`: the GPU, or a host device (`Device::host`), where the same
    /// runtime runs the kernels compiled for the CPU.
    pub fn compile_on(func: Func, device: Arc<Device>) -> Result<DeviceFunction> {
        crate::ir::verify::verify(&func).map_err(|es| Error::Input(es.join("; ")))?;
        let func = crate::rewrite::optimize(func, &crate::rewrite::OptimizeOptions::default());
        DeviceFunction::from_optimized(func, device)
    }

    /// `compile_on` for a function already verified and optimized.
    pub fn from_optimized(func: Func, device: Arc<Device>) -> Result<DeviceFunction> {
        let plan = super::plan_of(&func);
        DeviceFunction::from_plan(func, plan, device, &crate::dump::DumpOptions::default())
    }

    /// `from_optimized` for `plan`, lowered from `func`, dumping the `llvm` and `ptx` stages
    /// `dump` asks for.
    pub(crate) fn from_plan(
        func: Func,
        plan: Plan,
        device: Arc<Device>,
        dump: &crate::dump::DumpOptions,
    ) -> Result<DeviceFunction> {
        let kernels: HashMap<_, _> = load_kernels(&func, &plan, &device, dump)?
            .into_iter()
            .map(|k| (k.info.step, k))
            .collect();
        let replays = Replays::of(&func, &plan, &kernels);
        Ok(DeviceFunction {
            func,
            plan,
            steps: GpuSteps {
                device,
                kernels,
                replays,
            },
            kept: Kept::default(),
        })
    }

    /// Whether calls whose inputs' dtypes and shapes repeat are recorded once as a graph
    /// and replayed (`replay.rs`; on unless `KILN_GPU_GRAPHS=0`).
    pub fn with_graphs(mut self, on: bool) -> DeviceFunction {
        self.steps.replays.set_enabled(on);
        self
    }

    /// How many input signatures have a recorded graph, and how many could not be recorded
    /// (they run step by step).
    pub fn graphs(&self) -> (usize, usize) {
        self.steps.replays.counts()
    }

    /// The GPU this function runs on.
    pub fn device(&self) -> &Arc<Device> {
        &self.steps.device
    }

    /// The optimized function.
    pub fn func(&self) -> &Func {
        &self.func
    }

    /// As an `Executable` of host arrays (copied in and out at each call), for `Function`.
    pub fn into_executable(self) -> Box<dyn crate::runtime::Executable> {
        Box::new(crate::runtime::device::HostCalls::new(
            self.steps, self.func, self.plan,
        ))
    }

    /// Copies `t` to the device.
    pub fn upload(&self, t: TensorRef<'_>) -> Result<DeviceTensor> {
        DeviceTensor::upload(&self.steps.device, t)
    }

    /// Runs the function on device arrays; the results stay on the device (queued: read them
    /// with `download`, or `synchronize` the device).
    pub fn run(&self, inputs: &[&DeviceTensor]) -> Result<Vec<DeviceTensor>> {
        let inputs: Vec<DeviceTensor> = inputs.iter().map(|&t| t.clone()).collect();
        self.kept.with(|st| {
            crate::runtime::device::run_plan(&self.steps, &self.func, &self.plan, st, &inputs)
        })
    }
}
