//! Calls of a compiled function replayed from a recorded graph (`capture.rs`): a call whose
//! inputs have the dtypes and shapes of an earlier call's (its *signature*) is, from the
//! second such call on, one graph launch instead of a launch per kernel and product.
//!
//! The second call of a signature is recorded: its inputs are copied into arrays of the
//! replay's own (row-major), the VM runs the plan while the device captures, and the graph
//! (the kernels with the addresses and launch parameters of that call) is kept with those
//! input arrays and the call's results. A replay copies the new inputs into the input arrays
//! (an array is not copied again when it is the one copied last time: the replay holds a
//! handle to it, so no step writes over it meanwhile; a donated one is copied every time),
//! launches the graph, and copies the results out into the donated buffers that fit, else
//! fresh arrays (the next replay writes over the recorded ones). A call that cannot be recorded (a step on the
//! host, an `ifelse` condition read back, a kernel that checks indices: anything that needs
//! the host in the middle) is refused while it is captured, and its signature runs step by
//! step from then on; so do calls with a strided input, profiled calls, signatures past
//! [`MAX_GRAPHS`] (or past 64 remembered), calls whose inputs are large
//! ([`MAX_INPUT_BYTES`]), and functions of few launches (no more than their inputs and
//! results, which a replay copies: a one-kernel function gains nothing).

use super::capture::Graph;
use super::cuda::Device;
use super::device::{DeviceTensor, GpuKernel};
use crate::error::Result;
use crate::ir::{DType, Func};
use crate::lower::{Kernel, Plan as LoweredPlan, Step, StepId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Graphs kept per function at most (each keeps every buffer of its call).
pub const MAX_GRAPHS: usize = 8;

/// Signatures remembered per function at most (a function called with ever new shapes keeps
/// running step by step, without its map growing).
const MAX_SIGNATURES: usize = 64;

/// The inputs' bytes past which a call is not recorded: its kernels run long enough for the
/// launches to be queued ahead of them, and a replay's copies of inputs and results would
/// cost more memory traffic than the launches cost time.
pub const MAX_INPUT_BYTES: usize = 16 << 20;

/// The kernel launches and products a call of `steps` makes (a row group without a kernel
/// of its own: its members'), or `None` where it cannot be recorded. It can where every step
/// is a kernel of the device, a product or a view (whose fallbacks to the host copy their
/// arguments back first, which a capture refuses before anything runs), or a row group of
/// such steps. A step on the host (a custom op, `ifelse`, `scan`'s loop, other shape ops)
/// would run its `perform` before the capture could refuse its results.
fn launches(steps: &[Step], kernels: &HashMap<StepId, GpuKernel>) -> Option<usize> {
    steps
        .iter()
        .map(|s| match &s.kernel {
            _ if kernels.contains_key(&s.id) => Some(1),
            Kernel::Gemm { .. } => Some(1),
            Kernel::View(_) => Some(0),
            Kernel::Rows { steps, .. } => launches(steps, kernels),
            _ => None,
        })
        .sum()
}

/// The dtypes and shapes of a call's inputs.
type Signature = Vec<(DType, Vec<usize>)>;

#[derive(Clone)]
enum Entry {
    /// Called once: the next call is recorded.
    Seen,
    /// Not recorded (it needs the host in the middle, or too many graphs): run step by step.
    Refused,
    Ready(Arc<Replay>),
}

/// What to do with a call.
pub(super) enum Action {
    /// Run it step by step.
    Steps,
    /// Run it step by step while recording it, for its signature.
    Record(Signature),
    Replay(Arc<Replay>),
}

/// The replays of one function, by signature.
pub(super) struct Replays {
    /// Whether the function's calls may be recorded and are worth it ([`Replays::of`]).
    recordable: bool,
    /// Whether they are (on unless `KILN_GPU_GRAPHS=0`, or the user turned them off).
    enabled: bool,
    entries: Mutex<HashMap<Signature, Entry>>,
}

impl Replays {
    /// The replays of `func`, lowered to `plan` with `kernels`: none where a call cannot be
    /// recorded ([`launches`]) or would not gain, making no more launches than a replay's
    /// copies of inputs and results.
    pub(super) fn of(
        func: &Func,
        plan: &LoweredPlan,
        kernels: &HashMap<StepId, GpuKernel>,
    ) -> Replays {
        let copies = func.params.len() + func.outputs.len();
        Replays {
            recordable: launches(&plan.steps, kernels).is_some_and(|n| n > copies),
            enabled: std::env::var("KILN_GPU_GRAPHS").map_or(true, |v| v != "0"),
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Signature, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What to do with a call on `inputs` (`profiling`: every step is being timed).
    pub(super) fn action(&self, inputs: &[DeviceTensor], profiling: bool) -> Action {
        let row_major = inputs.iter().all(DeviceTensor::is_row_major);
        let bytes: usize = inputs
            .iter()
            .map(|t| t.shape().iter().product::<usize>() * t.dtype().size())
            .sum();
        if !self.recordable || !self.enabled || profiling || !row_major || bytes > MAX_INPUT_BYTES {
            return Action::Steps;
        }
        let sig: Signature = inputs
            .iter()
            .map(|t| (t.dtype(), t.shape().to_vec()))
            .collect();
        let mut entries = self.entries();
        let graphs = |entries: &HashMap<Signature, Entry>| {
            (entries.values())
                .filter(|e| matches!(e, Entry::Ready(_)))
                .count()
        };
        match entries.get(&sig) {
            None if entries.len() >= MAX_SIGNATURES => Action::Steps,
            None => {
                entries.insert(sig, Entry::Seen);
                Action::Steps
            }
            Some(Entry::Refused) => Action::Steps,
            Some(Entry::Seen) if graphs(&entries) >= MAX_GRAPHS => {
                entries.insert(sig, Entry::Refused);
                Action::Steps
            }
            Some(Entry::Seen) => Action::Record(sig),
            Some(Entry::Ready(r)) => Action::Replay(r.clone()),
        }
    }

    /// Keeps the outcome of recording `sig`: its replay, or `None` where it was refused.
    pub(super) fn recorded(&self, sig: Signature, replay: Option<Arc<Replay>>) {
        let entry = match replay {
            Some(r) => Entry::Ready(r),
            None => Entry::Refused,
        };
        self.entries().insert(sig, entry);
    }

    /// How many signatures have a graph, and how many were refused one.
    pub(super) fn counts(&self) -> (usize, usize) {
        let entries = self.entries();
        let count = |f: fn(&Entry) -> bool| entries.values().filter(|e| f(e)).count();
        (
            count(|e| matches!(e, Entry::Ready(_))),
            count(|e| matches!(e, Entry::Refused)),
        )
    }
}

/// A recorded call: its graph, the input arrays it reads and the results it writes.
pub(super) struct Replay {
    graph: Graph,
    inputs: Vec<DeviceTensor>,
    /// The arrays last copied into `inputs` (held, so that their buffers cannot be reused
    /// for other values while compared; `None` where that array was donated, and may have
    /// been written over since), locked for a whole replay so that two threads' replays do
    /// not interleave.
    sources: Mutex<Vec<Option<DeviceTensor>>>,
    outputs: Vec<DeviceTensor>,
}

/// Arrays of the replay's own for `inputs` (row-major), with their elements copied in.
pub(super) fn own_inputs(dev: &Arc<Device>, inputs: &[DeviceTensor]) -> Result<Vec<DeviceTensor>> {
    inputs
        .iter()
        .map(|t| {
            let own = DeviceTensor::uninit(dev, t.dtype(), t.shape())?;
            copy_into(dev, &own, t)?;
            Ok(own)
        })
        .collect()
}

/// Copies the elements of `src` (row-major) into `dst` (row-major, the same dtype and shape).
fn copy_into(dev: &Device, dst: &DeviceTensor, src: &DeviceTensor) -> Result<()> {
    let bytes = src.shape().iter().product::<usize>() * src.dtype().size();
    let (to, from) = (dst.byte_offset(), src.byte_offset());
    dev.copy_at(dst.buffer(), to, src.buffer(), from, bytes)
}

impl Replay {
    /// The replay of a recorded call: `graph`, which reads `inputs` (the replay's own, last
    /// filled from `sources`) and writes `outputs`.
    pub(super) fn new(
        graph: Graph,
        inputs: Vec<DeviceTensor>,
        sources: Vec<DeviceTensor>,
        outputs: Vec<DeviceTensor>,
    ) -> Replay {
        Replay {
            graph,
            inputs,
            sources: Mutex::new(sources.into_iter().map(Some).collect()),
            outputs,
        }
    }

    /// The call on `inputs` (of the recorded signature): the results copied into donated
    /// buffers (`donated[i]`, where `Some`: `inputs[i]`'s buffer, which the caller gives up)
    /// where one of the result's dtype and shape is left, else into fresh arrays. A donated
    /// buffer is taken out of `donated` only once the graph is queued (before that, an error
    /// leaves it with the caller).
    pub(super) fn run(
        &self,
        dev: &Arc<Device>,
        inputs: &[DeviceTensor],
        donated: &mut [Option<DeviceTensor>],
    ) -> Result<Vec<DeviceTensor>> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for (i, ((own, last), new)) in self
            .inputs
            .iter()
            .zip(sources.iter_mut())
            .zip(inputs)
            .enumerate()
        {
            let given_up = donated.get(i).is_some_and(Option::is_some);
            if !last.as_ref().is_some_and(|l| new.same_elements(l)) || given_up {
                copy_into(dev, own, new)?;
                *last = (!given_up).then(|| new.clone());
            }
        }
        // SAFETY: the graph's buffers are its own (allocated while it was captured) or
        // `self.inputs`, just filled; all live as long as `self`.
        unsafe { self.graph.launch()? };
        // Queued after the graph on the one stream, before any later replay's work.
        let mut spare: Vec<DeviceTensor> = donated.iter_mut().filter_map(Option::take).collect();
        self.outputs
            .iter()
            .map(|o| {
                let fits = |d: &DeviceTensor| {
                    d.dtype() == o.dtype()
                        && d.shape() == o.shape()
                        && d.is_row_major()
                        && o.is_row_major()
                };
                match spare.iter().position(fits) {
                    Some(k) => {
                        let d = spare.swap_remove(k);
                        copy_into(dev, &d, o)?;
                        Ok(d)
                    }
                    None => o.copy_buffer(dev),
                }
            })
            .collect()
    }
}
