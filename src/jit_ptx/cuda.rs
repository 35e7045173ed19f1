//! The CUDA driver, as much of it as the GPU backend uses: one device (the primary context of
//! GPU 0), device memory from a pool, PTX modules, kernel launches and events, all on the
//! legacy default stream so that every operation is ordered after the previous one.
//!
//! The same `Device` also comes as a **host device** (`Device::host`): memory is host memory,
//! copies are `memcpy`s, and a launch calls the same kernel compiled for the CPU (`host.rs`).
//! Everything above this file (the device arrays, the launcher, the pool, the products, the
//! host steps of `DeviceFunction`) then runs and is tested on machines without a GPU; only
//! the CUDA calls in this file are left for a GPU to check.
//!
//! This is written over cudarc's `result` layer (thin, checked wrappers of the driver API)
//! rather than its safe `CudaSlice<T>`: kiln's buffers are untyped (one buffer type for every
//! dtype) and its kernels take raw device addresses (docs/gpu.md, "Kernel ABI").

use super::capture::{self, GraphBuffers, HostOp};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A driver error as kiln's.
fn driver(what: &str, e: cu::DriverError) -> Error {
    Error::Runtime(format!("CUDA: {what}: {e:?}"))
}

/// What carries out a device's operations.
enum Driver {
    Cuda(Arc<cudarc::driver::CudaContext>),
    /// Host memory and host-compiled kernels (see the module doc).
    Host,
}

/// Byte alignment of host-device buffers (a kernel may load 16-byte vectors).
const HOST_ALIGN: usize = 64;

/// The GPU: its context, its multiprocessors, and the pool of freed device buffers.
pub struct Device {
    driver: Driver,
    /// The device's name as the driver gives it (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Streaming multiprocessors, for sizing grids.
    pub sms: u32,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    /// Freed buffers by size in bytes, handed out again before the driver is asked.
    pool: Mutex<HashMap<usize, Vec<sys::CUdeviceptr>>>,
    /// Copies between host and device memory so far (`transfers`).
    uploads: Counter,
    downloads: Counter,
    /// Kernels launched one by one, and graphs launched (`launches`).
    kernel_launches: AtomicU64,
    graph_launches: AtomicU64,
    /// Whether a thread is capturing a graph (`capture.rs`: one at a time).
    pub(super) capturing: AtomicBool,
    /// The stream captures record on, made at the first (a GPU's; `None` for the host).
    capture_stream: OnceLock<std::result::Result<usize, String>>,
    /// Bytes of the buffers handed out and not back in the pool, and their most (`memory`).
    in_use: AtomicU64,
    peak: AtomicU64,
}

/// The device memory a device's arrays take (`Device::memory`): what keeping values on the
/// device and updating them in place costs and saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Bytes of the buffers in use: arrays, and the buffers recorded graphs keep.
    pub in_use: u64,
    /// The most `in_use` has been since the device was opened or `reset_peak`.
    pub peak: u64,
    /// Bytes of freed buffers kept for reuse (`Device::trim` frees them).
    pub pooled: u64,
}

/// Copies and their bytes, counted.
#[derive(Default)]
struct Counter {
    copies: AtomicU64,
    bytes: AtomicU64,
}

impl Counter {
    fn add(&self, bytes: usize) {
        self.copies.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// The copies between host and device memory a device has made (`Device::transfers`): what
/// a call costs beyond its kernels, and what keeping arrays on the device saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Copies from host to device memory, and their bytes.
    pub uploads: u64,
    /// The bytes of those uploads.
    pub upload_bytes: u64,
    /// Copies from device to host memory, and their bytes.
    pub downloads: u64,
    /// The bytes of those downloads.
    pub download_bytes: u64,
}

impl std::ops::Sub for Transfers {
    type Output = Transfers;
    fn sub(self, o: Transfers) -> Transfers {
        Transfers {
            uploads: self.uploads - o.uploads,
            upload_bytes: self.upload_bytes - o.upload_bytes,
            downloads: self.downloads - o.downloads,
            download_bytes: self.download_bytes - o.download_bytes,
        }
    }
}

// SAFETY: the driver's context and device addresses may be used from any thread once the
// context is bound to it (`bind`, called before every driver call here).
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

/// Whether the CUDA driver library (`libcuda`) can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to load the library; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// Whether `device` hands out the host device (`use_host_device`).
static HOST_INSTEAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes `device` (and so `Backend::Gpu`) use one host device in this process: the GPU
/// runtime with host memory and host-compiled kernels, for tests on machines without a GPU.
pub fn use_host_device() {
    HOST_INSTEAD.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The process's device (GPU 0), opened on first use; an `Err` saying why there is none.
pub fn device() -> Result<Arc<Device>> {
    if HOST_INSTEAD.load(std::sync::atomic::Ordering::SeqCst) {
        static HOST: OnceLock<Arc<Device>> = OnceLock::new();
        return Ok(HOST.get_or_init(Device::host).clone());
    }
    static DEVICE: OnceLock<std::result::Result<Arc<Device>, String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| open().map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::Unsupported)
}

fn open() -> Result<Arc<Device>> {
    if !driver_present() {
        return Err(Error::Unsupported("no CUDA driver found".into()));
    }
    let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| driver("no usable GPU", e))?;
    let attr = |a| ctx.attribute(a).map_err(|e| driver("device attribute", e));
    let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let capability = ctx
        .compute_capability()
        .map_err(|e| driver("compute capability", e))?;
    let name = ctx.name().map_err(|e| driver("device name", e))?;
    Ok(Device::new(
        Driver::Cuda(ctx),
        name,
        sms.max(1) as u32,
        capability,
    ))
}

impl Device {
    /// A device of `driver` with an empty pool and counters at zero.
    fn new(driver: Driver, name: String, sms: u32, capability: (i32, i32)) -> Arc<Device> {
        Arc::new(Device {
            driver,
            name,
            sms,
            capability,
            pool: Mutex::new(HashMap::new()),
            uploads: Counter::default(),
            downloads: Counter::default(),
            kernel_launches: AtomicU64::new(0),
            graph_launches: AtomicU64::new(0),
            capturing: AtomicBool::new(false),
            capture_stream: OnceLock::new(),
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }

    /// A host device (see the module doc): a new one with its own pool.
    pub fn host() -> Arc<Device> {
        let name = "host (the GPU kernels compiled for the CPU)";
        Device::new(Driver::Host, name.into(), 1, (0, 0))
    }

    /// The copies between host and device memory made so far (of non-empty arrays).
    pub fn transfers(&self) -> Transfers {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Transfers {
            uploads: get(&self.uploads.copies),
            upload_bytes: get(&self.uploads.bytes),
            downloads: get(&self.downloads.copies),
            download_bytes: get(&self.downloads.bytes),
        }
    }

    /// The memory in use, its peak and the pool's (see [`Memory`]).
    pub fn memory(&self) -> Memory {
        let pooled = match self.pool.lock() {
            Ok(pool) => pool.iter().map(|(&b, ptrs)| (b * ptrs.len()) as u64).sum(),
            Err(_) => 0,
        };
        Memory {
            in_use: self.in_use.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
            pooled,
        }
    }

    /// Starts the peak of [`Device::memory`] again from the memory in use now.
    pub fn reset_peak(&self) {
        self.peak
            .store(self.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Kernels launched one at a time so far, and graphs launched (`capture.rs`): a replayed
    /// call launches one graph and no kernel.
    pub fn launches(&self) -> (u64, u64) {
        (
            self.kernel_launches.load(Ordering::Relaxed),
            self.graph_launches.load(Ordering::Relaxed),
        )
    }

    pub(super) fn count_graph_launch(&self) {
        self.graph_launches.fetch_add(1, Ordering::Relaxed);
    }

    /// The stream captures record on (made at the first), or `None` on the host device.
    pub(super) fn capture_stream(&self) -> Result<Option<sys::CUstream>> {
        if self.is_host() {
            return Ok(None);
        }
        let s = self.capture_stream.get_or_init(|| {
            self.bind().map_err(|e| e.to_string())?;
            cu::stream::create(cu::stream::StreamKind::NonBlocking)
                .map(|s| s as usize)
                .map_err(|e| format!("CUDA: create a stream: {e:?}"))
        });
        s.clone()
            .map(|s| Some(s as sys::CUstream))
            .map_err(Error::Runtime)
    }

    /// Puts a buffer no one owns back into the pool.
    pub(super) fn pool_buffer(&self, ptr: sys::CUdeviceptr, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.in_use.fetch_sub(bytes as u64, Ordering::Relaxed);
        if let Ok(mut pool) = self.pool.lock() {
            pool.entry(bytes).or_default().push(ptr);
        }
    }

    /// Whether this is a host device.
    pub fn is_host(&self) -> bool {
        matches!(self.driver, Driver::Host)
    }

    /// Makes the context current on this thread (driver calls act on the current context).
    pub fn bind(&self) -> Result<()> {
        match &self.driver {
            Driver::Cuda(ctx) => ctx.bind_to_thread().map_err(|e| driver("bind context", e)),
            Driver::Host => Ok(()),
        }
    }

    /// A fresh allocation of `bytes` (> 0) bytes.
    fn allocate(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        match &self.driver {
            Driver::Host => {
                let layout = std::alloc::Layout::from_size_align(bytes, HOST_ALIGN)
                    .map_err(|e| Error::Runtime(format!("allocate {bytes} bytes: {e}")))?;
                // Asked first: the allocator alone would promise more than memory holds
                // (see `runtime::memory::can_allocate`).
                let fits = crate::runtime::memory::can_allocate(Some(bytes));
                // SAFETY: a non-zero size; freed by `release` with the same layout.
                let p = match fits {
                    true => unsafe { std::alloc::alloc(layout) },
                    false => std::ptr::null_mut(),
                };
                if p.is_null() {
                    return Err(Error::Runtime(format!(
                        "allocate {bytes} bytes: out of memory"
                    )));
                }
                Ok(p as u64)
            }
            Driver::Cuda(_) => {
                self.bind()?;
                // SAFETY: a plain allocation; the buffer owns it until `Drop` pools it.
                unsafe { cu::malloc_sync(bytes) }
                    .map_err(|e| driver(&format!("allocate {bytes} bytes"), e))
            }
        }
    }

    /// Frees an allocation of `bytes` bytes that no buffer owns any more.
    fn release(&self, ptr: sys::CUdeviceptr, bytes: usize) {
        match &self.driver {
            Driver::Host => {
                if let Ok(layout) = std::alloc::Layout::from_size_align(bytes, HOST_ALIGN) {
                    // SAFETY: allocated by `allocate` with this layout.
                    unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
                }
            }
            Driver::Cuda(_) => {
                // SAFETY: as the doc says.
                let _ = unsafe { cu::free_sync(ptr) };
            }
        }
    }

    /// The newest PTX target kiln has that this device runs (`sm_80` .. `sm_90`).
    pub fn arch(&self) -> &'static str {
        match self.capability {
            (9, _) | (10.., _) => "sm_90",
            (8, 9) => "sm_89",
            (8, 6..) => "sm_86",
            _ => "sm_80",
        }
    }

    /// Whether `bytes` more can be allocated: what the driver says is free plus what the pool
    /// holds (freed for a request that needs it), or the host allocator's answer on the host
    /// device.
    pub fn can_allocate(&self, bytes: Option<usize>) -> bool {
        let Some(bytes) = bytes else { return false };
        match &self.driver {
            Driver::Host => crate::runtime::memory::can_allocate(Some(bytes)),
            Driver::Cuda(_) => {
                let pooled = self.memory().pooled as usize;
                let free =
                    (self.bind().ok()).and_then(|_| cudarc::driver::result::mem_get_info().ok());
                // Where the driver cannot say, the allocation itself will.
                free.is_none_or(|(free, _)| bytes <= free.saturating_add(pooled))
            }
        }
    }

    /// A buffer of `bytes` bytes (uninitialized), from the pool when one of that size is free.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer> {
        let reused = self
            .pool
            .lock()
            .ok()
            .and_then(|mut p| p.get_mut(&bytes).and_then(Vec::pop));
        let ptr = match reused {
            Some(p) => p,
            None if bytes == 0 => 0,
            None => match self.allocate(bytes) {
                Ok(p) => p,
                Err(_) => {
                    // Out of memory, perhaps because of what the pool holds: free it, retry.
                    self.trim();
                    self.allocate(bytes)?
                }
            },
        };
        let now = self.in_use.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Ok(DeviceBuffer {
            ptr,
            bytes,
            device: self.clone(),
            graph: capture::buffers(self),
        })
    }

    /// Frees every pooled buffer.
    pub fn trim(&self) {
        let Ok(mut pool) = self.pool.lock() else {
            return;
        };
        let _ = self.bind();
        for (bytes, ptrs) in pool.drain() {
            for p in ptrs {
                self.release(p, bytes);
            }
        }
    }

    /// Copies `bytes` bytes from host memory at `src` into `dst`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `bytes` bytes, `dst` at least that long.
    pub unsafe fn upload(&self, dst: &DeviceBuffer, src: *const u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        capture::refuse(self, "a copy from host memory")?;
        self.uploads.add(bytes);
        if self.is_host() {
            std::ptr::copy_nonoverlapping(src, dst.ptr as *mut u8, bytes);
            return Ok(());
        }
        self.bind()?;
        let host = std::slice::from_raw_parts(src, bytes);
        cu::memcpy_htod_sync(dst.ptr, host).map_err(|e| driver("copy to the device", e))
    }

    /// Copies `bytes` bytes of `src` from byte `at` on to host memory at `dst`, after all
    /// queued work.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `bytes` bytes, `src` at least `at + bytes` long.
    pub unsafe fn download(
        &self,
        dst: *mut u8,
        src: &DeviceBuffer,
        at: usize,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        capture::refuse(self, "a copy to host memory")?;
        self.downloads.add(bytes);
        if self.is_host() {
            std::ptr::copy_nonoverlapping((src.ptr as *const u8).add(at), dst, bytes);
            return Ok(());
        }
        self.bind()?;
        let host = std::slice::from_raw_parts_mut(dst, bytes);
        cu::memcpy_dtoh_sync(host, src.ptr + at as u64)
            .map_err(|e| driver("copy from the device", e))
    }

    /// Copies `bytes` bytes of `src` from byte `at` on to the start of `dst` (queued).
    pub fn copy(
        &self,
        dst: &DeviceBuffer,
        src: &DeviceBuffer,
        at: usize,
        bytes: usize,
    ) -> Result<()> {
        self.copy_at(dst, 0, src, at, bytes)
    }

    /// Copies `bytes` bytes of `src` from byte `src_at` on to `dst` from byte `dst_at` on
    /// (queued).
    pub fn copy_at(
        &self,
        dst: &DeviceBuffer,
        dst_at: usize,
        src: &DeviceBuffer,
        src_at: usize,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let fits =
            |at: usize, buf: &DeviceBuffer| at.checked_add(bytes).is_some_and(|e| e <= buf.bytes);
        if !fits(src_at, src) || !fits(dst_at, dst) {
            return Err(Error::Runtime(format!(
                "a device copy of {bytes} bytes from byte {src_at} of {} to byte {dst_at} of {}",
                src.bytes, dst.bytes
            )));
        }
        let (to, from) = (dst.ptr + dst_at as u64, src.ptr + src_at as u64);
        if self.is_host() {
            let op = HostOp::Copy {
                dst: to,
                src: from,
                bytes,
            };
            if let Some(op) = capture::record_host(self, op) {
                // SAFETY: checked above: both ranges lie in their buffers.
                unsafe { op.run() };
            }
            return Ok(());
        }
        self.bind()?;
        // SAFETY: checked above: both ranges lie in their buffers.
        unsafe { cu::memcpy_dtod_async(to, from, bytes, capture::stream(self)) }
            .map_err(|e| driver("copy on the device", e))
    }

    /// Sets the first `bytes` bytes of `dst` to zero (queued).
    pub fn zero(&self, dst: &DeviceBuffer, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        if bytes > dst.bytes {
            return Err(Error::Runtime(format!(
                "zero {bytes} bytes of a buffer of {}",
                dst.bytes
            )));
        }
        if self.is_host() {
            let op = HostOp::Zero {
                dst: dst.ptr,
                bytes,
            };
            if let Some(op) = capture::record_host(self, op) {
                // SAFETY: `dst` holds at least `bytes` bytes (checked).
                unsafe { op.run() };
            }
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst` holds at least `bytes` bytes (checked).
        unsafe { cu::memset_d8_async(dst.ptr, 0, bytes, capture::stream(self)) }
            .map_err(|e| driver("set to zero", e))
    }

    /// Waits for all queued work; reports a kernel's failure (a fault, say).
    pub fn synchronize(&self) -> Result<()> {
        capture::refuse(self, "a wait for the device")?;
        match &self.driver {
            Driver::Cuda(ctx) => {
                self.bind()?;
                ctx.synchronize().map_err(|e| driver("synchronize", e))
            }
            Driver::Host => Ok(()),
        }
    }

    /// Loads a PTX module (the driver compiles it for this device).
    pub fn load(self: &Arc<Self>, ptx: &str) -> Result<Module> {
        if self.is_host() {
            return Err(Error::Runtime("PTX on the host device".into()));
        }
        self.bind()?;
        let src = CString::new(ptx).map_err(|_| Error::Runtime("PTX with a NUL byte".into()))?;
        // SAFETY: a NUL-terminated PTX text; the module is unloaded by `Module`'s drop.
        let module = unsafe { cu::module::load_data(src.as_ptr() as *const c_void) }
            .map_err(|e| driver("load the PTX module", e))?;
        Ok(Module {
            module: Loaded::Cuda(module),
            device: self.clone(),
        })
    }

    /// A module of kernels compiled for the host (`host.rs`), by name.
    pub fn host_module(self: &Arc<Self>, entries: HashMap<String, HostEntry>) -> Module {
        Module {
            module: Loaded::Host(entries),
            device: self.clone(),
        }
    }

    /// Records an event on the stream (for timing queued work).
    pub fn record(&self) -> Result<Event> {
        if self.is_host() {
            return Err(Error::Unsupported("no events on the host device".into()));
        }
        capture::refuse(self, "an event")?;
        self.bind()?;
        let e = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| driver("create an event", e))?;
        // SAFETY: a fresh event recorded on the default stream.
        unsafe { cu::event::record(e, std::ptr::null_mut()) }
            .map_err(|e| driver("record an event", e))?;
        Ok(Event(e))
    }
}

/// A recorded event.
pub struct Event(sys::CUevent);

// SAFETY: an event handle may be used from any thread.
unsafe impl Send for Event {}

impl Event {
    /// Milliseconds from `self` to `end`, once `end` has happened.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: both are live events, recorded.
        unsafe {
            cu::event::synchronize(end.0).map_err(|e| driver("wait for an event", e))?;
            cu::event::elapsed(self.0, end.0).map_err(|e| driver("event time", e))
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is ours.
        let _ = unsafe { cu::event::destroy(self.0) };
    }
}

/// Device memory; back to the device's pool when dropped.
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device: Arc<Device>,
    /// The graph whose capture allocated it, which keeps it when it is freed.
    graph: Option<Arc<GraphBuffers>>,
}

impl DeviceBuffer {
    /// The device address (what kernels take).
    pub fn address(&self) -> u64 {
        self.ptr
    }

    /// The buffer's size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The device the buffer lives on (kept alive while the buffer is).
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        // Work queued on the one stream that still reads the buffer runs before any later
        // work that reuses it, so pooling needs no wait. A graph's buffer is its graph's.
        if self
            .graph
            .as_ref()
            .is_some_and(|g| g.keep(self.ptr, self.bytes))
        {
            return;
        }
        self.device.pool_buffer(self.ptr, self.bytes);
    }
}

/// A host kernel's entry: `fn(args)`, its parameters as 64-bit words (`host.rs`).
pub type HostEntry = unsafe extern "C" fn(*const i64);

enum Loaded {
    Cuda(sys::CUmodule),
    Host(HashMap<String, HostEntry>),
}

/// A loaded module.
pub struct Module {
    module: Loaded,
    device: Arc<Device>,
}

// SAFETY: module and function handles may be used from any thread with the context bound.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// The kernel `name` of the module.
    pub fn function(&self, name: &str) -> Result<Kernel> {
        let module = match &self.module {
            Loaded::Host(entries) => {
                return entries
                    .get(name)
                    .map(|&f| Kernel::Host(f))
                    .ok_or_else(|| Error::Runtime(format!("no host kernel {name}")))
            }
            Loaded::Cuda(m) => *m,
        };
        self.device.bind()?;
        let c = CString::new(name).map_err(|_| Error::Runtime("kernel name with NUL".into()))?;
        // SAFETY: a live module; the function lives as long as it (`Kernel` is held with it).
        let f = unsafe { cu::module::get_function(module, c) }
            .map_err(|e| driver(&format!("kernel {name}"), e))?;
        Ok(Kernel::Cuda(f))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if let Loaded::Cuda(m) = self.module {
            let _ = self.device.bind();
            // SAFETY: the module is ours; its kernels are not launched after this.
            let _ = unsafe { cu::module::unload(m) };
        }
    }
}

/// One kernel of a loaded module.
#[derive(Clone, Copy)]
pub enum Kernel {
    /// A kernel of the PTX module, launched through the driver.
    Cuda(sys::CUfunction),
    /// The same kernel compiled for the host CPU (`host.rs`), where tests have no GPU.
    Host(HostEntry),
}

// SAFETY: as `Module`.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

impl Device {
    /// Queues `kernel` on `grid` blocks of `block` threads with parameters `params` (each a
    /// 64-bit word: device addresses and `i64`s, docs/gpu.md).
    ///
    /// # Safety
    /// `params` must match the kernel's parameters, and the buffers they address must hold
    /// what the kernel reads and writes (the launch parameters' shapes and strides).
    pub unsafe fn launch(
        &self,
        kernel: Kernel,
        grid: u32,
        block: u32,
        params: &[u64],
    ) -> Result<()> {
        self.kernel_launches.fetch_add(1, Ordering::Relaxed);
        let kernel = match kernel {
            Kernel::Host(f) => {
                // One thread covers the whole grid (the kernels stride over their work).
                if let Some(op) = capture::record_host(self, HostOp::Launch(f, params.to_vec())) {
                    op.run();
                }
                return Ok(());
            }
            Kernel::Cuda(k) => k,
        };
        self.bind()?;
        let mut words: Vec<u64> = params.to_vec();
        let mut ptrs: Vec<*mut c_void> = words
            .iter_mut()
            .map(|w| w as *mut u64 as *mut c_void)
            .collect();
        cu::launch_kernel(
            kernel,
            (grid.max(1), 1, 1),
            (block, 1, 1),
            0,
            capture::stream(self),
            &mut ptrs,
        )
        .map_err(|e| driver("launch", e))
    }
}
