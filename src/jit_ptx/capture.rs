//! Recording a call's device work once and replaying it (CUDA graphs): while a thread captures
//! on a device, every operation it queues there (kernel launches, copies and fills on the
//! device, cuBLAS products) is recorded instead of run, and the record becomes a [`Graph`]
//! that one call launches again, at the addresses it was recorded with. Work that needs the
//! host in the middle (a copy to or from host memory, a wait) cannot be recorded: it is refused
//! with an error, and the caller runs the call as usual.
//!
//! On a GPU the record is a CUDA stream capture on a stream of kiln's own (non-blocking, so
//! the work other threads queue meanwhile on the default stream does not join it), in relaxed
//! mode (an allocation during the capture is allowed); a graph is launched on the default
//! stream, after the work queued before it. On the host device the record is the list of
//! operations (host kernels with their parameters, copies, fills, products), run in order by
//! a launch: the same bookkeeping, tested without a GPU.
//!
//! Buffers allocated during a capture belong to the graph: the graph's work writes them at
//! every launch, so none goes back to the pool for others while the graph lives (a buffer the
//! recorded call freed is kept aside, [`GraphBuffers`]), and all go back when it is dropped.

use super::cuda::{Device, HostEntry};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// One operation recorded on the host device.
pub(super) enum HostOp {
    /// A host kernel and its parameters.
    Launch(HostEntry, Vec<u64>),
    /// `bytes` bytes from `src` to `dst` (may overlap).
    Copy {
        dst: u64,
        src: u64,
        bytes: usize,
    },
    Zero {
        dst: u64,
        bytes: usize,
    },
    /// A product (`blas.rs`), its operands' addresses inside.
    Call(Box<dyn Fn() + Send + Sync>),
}

impl HostOp {
    /// Runs the operation.
    ///
    /// # Safety
    /// The addresses must be live host-device buffers holding what the operation reads and
    /// writes (as when it was recorded).
    pub(super) unsafe fn run(&self) {
        match self {
            HostOp::Launch(f, params) => f(params.as_ptr() as *const i64),
            HostOp::Copy { dst, src, bytes } => {
                std::ptr::copy(*src as *const u8, *dst as *mut u8, *bytes)
            }
            HostOp::Zero { dst, bytes } => std::ptr::write_bytes(*dst as *mut u8, 0, *bytes),
            HostOp::Call(f) => f(),
        }
    }
}

/// The buffers a graph's work uses that were allocated while it was captured: those its
/// recorded call freed are kept here (not pooled) while the graph lives.
pub(super) struct GraphBuffers {
    /// `None` once the graph is gone: freed buffers then go back to the pool.
    freed: Mutex<Option<Vec<(sys::CUdeviceptr, usize)>>>,
}

impl GraphBuffers {
    /// Keeps a freed buffer for the graph; `false` where the graph is gone (pool it).
    pub(super) fn keep(&self, ptr: sys::CUdeviceptr, bytes: usize) -> bool {
        match self
            .freed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            Some(list) => {
                list.push((ptr, bytes));
                true
            }
            None => false,
        }
    }

    /// Gives the kept buffers back to `device`'s pool, and every later free too (the graph
    /// is gone, or was never made).
    fn release(&self, device: &Device) {
        let kept = self.freed.lock().unwrap_or_else(|e| e.into_inner()).take();
        for (ptr, bytes) in kept.unwrap_or_default() {
            device.pool_buffer(ptr, bytes);
        }
    }
}

enum Record {
    Cuda(sys::CUstream),
    Host(Vec<HostOp>),
}

/// This thread's capture in progress.
struct Active {
    device: *const Device,
    record: Record,
    buffers: Arc<GraphBuffers>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
}

/// Whether this thread is capturing on `device`.
fn on(a: &Active, device: &Device) -> bool {
    std::ptr::eq(a.device, device)
}

/// `f` of this thread's capture on `device`, if it is capturing there.
fn with_active<R>(device: &Device, f: impl FnOnce(&mut Active) -> R) -> Option<R> {
    ACTIVE.with(|a| a.borrow_mut().as_mut().filter(|x| on(x, device)).map(f))
}

/// The stream this thread queues `device`'s work on: the capture's, or the default one.
pub(super) fn stream(device: &Device) -> sys::CUstream {
    let capture = with_active(device, |a| match a.record {
        Record::Cuda(s) => s,
        Record::Host(_) => std::ptr::null_mut(),
    });
    capture.unwrap_or(std::ptr::null_mut())
}

/// The buffers of the graph this thread is capturing on `device`, if it is.
pub(super) fn buffers(device: &Device) -> Option<Arc<GraphBuffers>> {
    with_active(device, |a| a.buffers.clone())
}

/// `Err` where this thread is capturing on `device`: `what` needs the host in the middle.
pub(super) fn refuse(device: &Device, what: &str) -> Result<()> {
    match with_active(device, |_| ()) {
        Some(()) => Err(Error::Unsupported(format!(
            "{what} cannot be captured in a graph"
        ))),
        None => Ok(()),
    }
}

/// Records `op` where this thread is capturing on the host device `device` and returns
/// `None`; else gives it back to run now.
pub(super) fn record_host(device: &Device, op: HostOp) -> Option<HostOp> {
    let mut op = Some(op);
    with_active(device, |a| {
        if let Record::Host(ops) = &mut a.record {
            ops.extend(op.take());
        }
    });
    op
}

/// A capture in progress on this thread ([`Device::begin_capture`]); dropped without
/// [`Capture::finish`], it is discarded.
pub struct Capture {
    device: Arc<Device>,
    /// Not `Send`: the capture is this thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Device {
    /// Starts capturing this thread's work on the device. `Err` where a capture is already in
    /// progress on the device (one at a time) or the driver refuses.
    pub fn begin_capture(self: &Arc<Self>) -> Result<Capture> {
        if self.capturing.swap(true, Ordering::SeqCst) {
            return Err(Error::Unsupported(
                "another capture is in progress on the device".into(),
            ));
        }
        let record = match self.capture_stream() {
            Ok(None) => Record::Host(Vec::new()),
            Ok(Some(s)) => {
                let began = self.bind().and_then(|()| {
                    // SAFETY: kiln's own stream, live as long as the device; context bound.
                    unsafe {
                        cu::stream::begin_capture(
                            s,
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                        )
                    }
                    .map_err(|e| Error::Runtime(format!("CUDA: begin a capture: {e:?}")))
                });
                if let Err(e) = began {
                    self.capturing.store(false, Ordering::SeqCst);
                    return Err(e);
                }
                Record::Cuda(s)
            }
            Err(e) => {
                self.capturing.store(false, Ordering::SeqCst);
                return Err(e);
            }
        };
        ACTIVE.with(|a| {
            *a.borrow_mut() = Some(Active {
                device: Arc::as_ptr(self),
                record,
                buffers: Arc::new(GraphBuffers {
                    freed: Mutex::new(Some(Vec::new())),
                }),
            })
        });
        Ok(Capture {
            device: self.clone(),
            _thread: std::marker::PhantomData,
        })
    }
}

impl Capture {
    /// Ends the capture: the graph of the work recorded since it began.
    pub fn finish(self) -> Result<Graph> {
        let active = self.end()?;
        let buffers = active.buffers;
        let exec = match active.record {
            Record::Host(ops) => Ok(Exec::Host(ops)),
            Record::Cuda(s) => self.device.bind().and_then(|()| {
                // SAFETY: the stream this capture began on; the graph is ours to instantiate
                // and destroy (the executable graph keeps what it needs).
                unsafe {
                    let graph = cu::stream::end_capture(s)
                        .map_err(|e| Error::Runtime(format!("CUDA: end a capture: {e:?}")))?;
                    let exec = cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0));
                    let _ = cu::graph::destroy(graph);
                    exec.map(Exec::Cuda)
                        .map_err(|e| Error::Runtime(format!("CUDA: instantiate a graph: {e:?}")))
                }
            }),
        };
        match exec {
            Ok(exec) => Ok(Graph {
                device: self.device.clone(),
                exec,
                buffers,
            }),
            Err(e) => {
                buffers.release(&self.device);
                Err(e)
            }
        }
    }

    /// Takes this thread's capture out of the thread and frees the device for the next.
    fn end(&self) -> Result<Active> {
        let active = ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            a.take_if(|x| on(x, &self.device))
        });
        let active = active.ok_or_else(|| Error::Runtime("no capture on this thread".into()))?;
        self.device.capturing.store(false, Ordering::SeqCst);
        Ok(active)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let Ok(active) = self.end() else {
            return; // finished
        };
        if let Record::Cuda(s) = active.record {
            let _ = self.device.bind();
            // SAFETY: the capture's stream; the partial graph is destroyed unused.
            if let Ok(g) = unsafe { cu::stream::end_capture(s) } {
                let _ = unsafe { cu::graph::destroy(g) };
            }
        }
        active.buffers.release(&self.device);
    }
}

enum Exec {
    Cuda(sys::CUgraphExec),
    Host(Vec<HostOp>),
}

/// Recorded device work ([`Device::begin_capture`]), launched again with [`Graph::launch`].
pub struct Graph {
    device: Arc<Device>,
    exec: Exec,
    buffers: Arc<GraphBuffers>,
}

// SAFETY: an executable graph may be launched from any thread with the context bound; the
// host record holds addresses and `Send + Sync` closures.
unsafe impl Send for Graph {}
unsafe impl Sync for Graph {}

impl Graph {
    /// Queues the recorded work on the default stream, after the work queued before.
    ///
    /// # Safety
    /// The buffers the work was recorded with must still hold what it reads: those allocated
    /// during the capture are the graph's; the others (inputs written before it) the
    /// caller's to keep.
    pub unsafe fn launch(&self) -> Result<()> {
        self.device.count_graph_launch();
        match &self.exec {
            Exec::Host(ops) => {
                for op in ops {
                    op.run();
                }
                Ok(())
            }
            Exec::Cuda(g) => {
                self.device.bind()?;
                cu::graph::launch(*g, std::ptr::null_mut())
                    .map_err(|e| Error::Runtime(format!("CUDA: launch a graph: {e:?}")))
            }
        }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if let Exec::Cuda(g) = self.exec {
            let _ = self.device.bind();
            // SAFETY: ours; a graph still running is freed when it completes. The buffers
            // pooled below are reused only by work queued after it on the default stream.
            let _ = unsafe { cu::graph::exec_destroy(g) };
        }
        self.buffers.release(&self.device);
    }
}
