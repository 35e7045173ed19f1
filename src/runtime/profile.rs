//! Where a compiled function's time goes (PyTensor's `ProfileStats`): per step of its plan,
//! how often it ran, its time, the bytes it read and wrote, its share of the calls' time and
//! the bandwidth (or, for a matrix product, the FLOP rate) it reached.
//!
//! The VM (on any device: it waits for the device before and after each step) times each
//! step of the function's own block (a row group or an `ifelse` counts as one step, its
//! members inside it) when the function was compiled with profiling on
//! (`CompileOptions::profile`, default from `KILN_PROFILE`); nothing is timed otherwise. With
//! `KILN_PROFILE` set, a function prints its report to stderr when it is dropped; any profiled
//! function gives it on demand (`Function::profile`).

use crate::ir::{DType, Func, TensorType};
use crate::lower::{Kernel, Plan, Step};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// Whether `KILN_PROFILE` asks for profiling (set, and not empty or `0`).
pub fn from_env() -> bool {
    std::env::var("KILN_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Where `KILN_PROFILE` asks for a Chrome trace: a value ending in `.json`
/// (`KILN_PROFILE=trace.json`).
pub fn trace_path_from_env() -> Option<std::path::PathBuf> {
    let v = std::env::var("KILN_PROFILE").ok()?;
    v.ends_with(".json").then(|| v.into())
}

/// The counters of one profiled function, shared by its calls (on any thread).
pub struct Profile {
    func: String,
    /// What each step is, by step index: its kind and op, for the report.
    labels: Vec<String>,
    /// Where the user's code built each step's result (`file:line:col`, or empty).
    places: Vec<String>,
    /// What kind of step each is, for the report's summary (`kind_of`).
    kinds: Vec<&'static str>,
    stats: Mutex<Stats>,
    /// Every timed step and call, for `Function::write_trace`.
    trace: super::trace::Trace,
}

#[derive(Clone, Default)]
struct Stats {
    calls: u64,
    call_time: Duration,
    kernel_time: Duration,
    steps: Vec<StepStats>,
}

#[derive(Clone, Default)]
struct StepStats {
    runs: u64,
    time: Duration,
    bytes: u64,
    flops: u64,
    /// The shapes of the last run: arguments, then results.
    shapes: String,
}

/// What one run of a step moved and computed, measured by the VM.
pub struct StepRun {
    /// How long the run took.
    pub time: Duration,
    /// Bytes of the arguments read and the results written.
    pub bytes: u64,
    /// Floating-point operations (matrix products only; 0 otherwise).
    pub flops: u64,
    /// The argument and result shapes (`f32[2, 3] -> f32[2]`).
    pub shapes: String,
}

impl Profile {
    /// Counters for every step of `plan` (lowered from `func`).
    pub fn new(func: &Func, plan: &Plan) -> Profile {
        let mut labels = vec![String::new(); plan.n_steps];
        let mut places = vec![String::new(); plan.n_steps];
        let mut kinds = vec![""; plan.n_steps];
        for s in plan.all_steps() {
            if let Some(l) = labels.get_mut(s.id.index()) {
                *l = label(func, s);
            }
            if let Some(k) = kinds.get_mut(s.id.index()) {
                *k = kind_of(&s.kernel);
            }
            let loc = s
                .results
                .first()
                .and_then(|&r| func.values[r.index()].loc.clone());
            if let (Some(p), Some(loc)) = (places.get_mut(s.id.index()), loc) {
                *p = loc;
            }
        }
        Profile {
            func: func.name.clone(),
            stats: Mutex::new(Stats {
                steps: vec![StepStats::default(); labels.len()],
                ..Stats::default()
            }),
            labels,
            places,
            kinds,
            trace: super::trace::Trace::default(),
        }
    }

    /// The calls and steps so far as a Chrome trace (trace-event JSON, `runtime::trace`).
    pub fn trace_json(&self) -> String {
        self.trace.json(&self.func, &self.labels, &self.places)
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One run of `step`, which started at `started`.
    pub fn record_step(&self, step: &Step, run: StepRun, started: std::time::Instant) {
        self.trace
            .step(step.id.index(), started, run.time, &run.shapes);
        let mut st = self.stats();
        if let Some(s) = st.steps.get_mut(step.id.index()) {
            s.runs += 1;
            s.time += run.time;
            s.bytes += run.bytes;
            s.flops += run.flops;
            s.shapes = run.shapes;
        }
    }

    /// One call's time, and the part of it spent inside kernels (at any depth: the steps
    /// of a `scan`'s body and of an `ifelse`'s branch count too).
    pub fn record_call(&self, started: std::time::Instant, time: Duration, in_kernels: Duration) {
        self.trace.call(started, time);
        let mut st = self.stats();
        st.calls += 1;
        st.call_time += time;
        st.kernel_time += in_kernels;
    }

    /// Forgets every call so far.
    pub fn reset(&self) {
        self.trace.reset();
        let mut st = self.stats();
        let n = st.steps.len();
        *st = Stats {
            steps: vec![StepStats::default(); n],
            ..Stats::default()
        };
    }

    /// The report of the calls so far.
    pub fn report(&self) -> ProfileReport {
        let st = self.stats().clone();
        let mut steps: Vec<StepReport> = st
            .steps
            .iter()
            .zip(&self.labels)
            .enumerate()
            .filter(|(_, (s, _))| s.runs > 0)
            .map(|(i, (s, label))| StepReport {
                what: label.clone(),
                kind: self.kinds.get(i).copied().unwrap_or(""),
                at: self.places.get(i).cloned().unwrap_or_default(),
                shapes: s.shapes.clone(),
                runs: s.runs,
                time: s.time,
                bytes: s.bytes,
                flops: s.flops,
            })
            .collect();
        steps.sort_by_key(|s| std::cmp::Reverse(s.time));
        ProfileReport {
            func: self.func.clone(),
            calls: st.calls,
            call_time: st.call_time,
            kernel_time: st.kernel_time,
            steps,
        }
    }
}

/// The kinds of step the report's summary adds up, in its order.
pub const KINDS: [&str; 7] = [
    "products",
    "row groups",
    "maps",
    "reductions",
    "views",
    "host steps",
    "control",
];

/// Which of [`KINDS`] a step is: kiln's GEMM, a row group's fused block, a map or reduction
/// kernel, a view, an op's `perform` on the host, or a branch or loop (whose own steps are
/// inside it).
fn kind_of(k: &Kernel) -> &'static str {
    match k {
        Kernel::Gemm { .. } => "products",
        Kernel::Rows { .. } => "row groups",
        Kernel::Map { .. } => "maps",
        Kernel::Reduce { .. } => "reductions",
        Kernel::View(_) => "views",
        Kernel::Perform => "host steps",
        Kernel::IfElse { .. } | Kernel::Scan { .. } => "control",
    }
}

/// A step's kind and op as the report names it: `map exp`, `gemm matmul`, `rows (exp, sum)`.
fn label(func: &Func, s: &Step) -> String {
    let result = s
        .results
        .first()
        .map(|&r| format!(" -> {}", func.describe(r)))
        .unwrap_or_default();
    let kind = match &s.kernel {
        Kernel::Map { .. } => "map",
        Kernel::Reduce { .. } => "reduce",
        Kernel::Gemm { .. } => "gemm",
        Kernel::View(_) => "view",
        Kernel::IfElse { .. } => "ifelse",
        Kernel::Scan { .. } => "scan",
        Kernel::Perform => "perform",
        Kernel::Rows { steps, .. } => {
            let ops: Vec<&str> = steps.iter().map(|m| m.op.display_name()).collect();
            return format!("rows ({}){result}", ops.join(", "));
        }
    };
    format!("{kind} {}{result}", s.op.display_name())
}

/// An array a step read or wrote, as the profile keeps it.
pub struct Seen {
    /// The array's element type.
    pub dtype: DType,
    /// The array's run-time shape.
    pub shape: smallvec::SmallVec<[usize; 6]>,
}

impl Seen {
    /// An array of `dtype` and `shape`.
    pub fn new(dtype: DType, shape: &[usize]) -> Seen {
        Seen {
            dtype,
            shape: shape.into(),
        }
    }

    /// From a type that knows every dim (`None` where a dim is unknown).
    pub fn of_type(ty: &TensorType) -> Option<Seen> {
        Some(Seen {
            dtype: ty.dtype,
            shape: ty.known_shape()?.into(),
        })
    }

    fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One run of `step` as the VM saw it: `args` before it ran, `results` after; a matrix
/// product also counts its multiply-adds (two FLOPs each).
pub fn measure(step: &Step, args: &[Seen], results: &[Seen], time: Duration) -> StepRun {
    let bytes = |ts: &[Seen]| -> u64 { ts.iter().map(|t| (t.len() * t.dtype.size()) as u64).sum() };
    let shape = |t: &Seen| format!("{}{:?}", t.dtype, t.shape.as_slice());
    let list = |ts: &[Seen]| ts.iter().map(shape).collect::<Vec<_>>().join(" ");
    let flops = match (&step.kernel, args, results) {
        (Kernel::Gemm { transposed, .. }, [a, ..], [c, ..]) => {
            // The contraction length: a's last axis, or the one before when it was folded
            // from a transpose (a 1-d operand has only one).
            let r = a.shape.len();
            let k = match (transposed[0], r) {
                (true, 2..) => a.shape[r - 2],
                _ => a.shape.last().copied().unwrap_or(1),
            };
            2 * (c.len() * k) as u64
        }
        _ => 0,
    };
    StepRun {
        time,
        bytes: bytes(args) + bytes(results),
        flops,
        shapes: format!("{} -> {}", list(args), list(results)),
    }
}

/// The report of a profiled function: its steps, the slowest first.
#[derive(Clone, Debug)]
pub struct ProfileReport {
    /// The function's name.
    pub func: String,
    /// How many calls were profiled.
    pub calls: u64,
    /// The time of all calls, from the first step to the outputs.
    pub call_time: Duration,
    /// The part of `call_time` spent inside kernels: compiled code, row groups' blocks and
    /// ops' `perform`, at any depth (a `scan`'s body steps too). The rest is the VM's own
    /// work: dispatching steps, checking shapes, allocating, slicing and stacking a scan's
    /// sequences, collecting outputs.
    pub kernel_time: Duration,
    /// The steps that ran, the slowest (by total time) first.
    pub steps: Vec<StepReport>,
}

/// One step's share of the calls.
#[derive(Clone, Debug)]
pub struct StepReport {
    /// Its kind and op (`map exp -> %3`, `gemm matmul -> %5`, `rows (exp, sum) -> %7`).
    pub what: String,
    /// Which of [`KINDS`] it is.
    pub kind: &'static str,
    /// Where the user's code built it (`src/model.rs:12:5`), or empty.
    pub at: String,
    /// The argument and result shapes of its last run.
    pub shapes: String,
    /// How often it ran, over all calls.
    pub runs: u64,
    /// Its time, over all runs.
    pub time: Duration,
    /// Bytes read and written, over all runs.
    pub bytes: u64,
    /// Floating-point operations, over all runs (matrix products).
    pub flops: u64,
}

impl ProfileReport {
    /// The share of the calls' time spent in `step`, in percent.
    pub fn share(&self, step: &StepReport) -> f64 {
        self.percent(step.time)
    }

    /// The share of the calls' time spent inside kernels, in percent.
    pub fn kernel_share(&self) -> f64 {
        self.percent(self.kernel_time)
    }

    fn percent(&self, d: Duration) -> f64 {
        match self.call_time.as_secs_f64() {
            t if t > 0.0 => 100.0 * d.as_secs_f64() / t,
            _ => 0.0,
        }
    }
}

/// `1.23 ms`, `45.6 µs`: a time in the unit that reads best.
fn time(d: Duration) -> String {
    let s = d.as_secs_f64();
    match s {
        s if s >= 1.0 => format!("{s:.3} s"),
        s if s >= 1e-3 => format!("{:.3} ms", s * 1e3),
        s => format!("{:.1} µs", s * 1e6),
    }
}

impl StepReport {
    /// The achieved rate: GFLOP/s for products, GB/s for the rest.
    pub fn rate(&self) -> String {
        let t = self.time.as_secs_f64();
        match (self.flops, t > 0.0) {
            (_, false) => "-".into(),
            (0, true) => format!("{:.2} GB/s", self.bytes as f64 / t / 1e9),
            (f, true) => format!("{:.2} GFLOP/s", f as f64 / t / 1e9),
        }
    }
}

impl fmt::Display for ProfileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_call = |d: Duration| match self.calls {
            0 => Duration::ZERO,
            n => d / n as u32,
        };
        writeln!(
            f,
            "kiln profile of @{}: {} call{}, {} in all, {} per call",
            self.func,
            self.calls,
            if self.calls == 1 { "" } else { "s" },
            time(self.call_time),
            time(per_call(self.call_time))
        )?;
        writeln!(
            f,
            "{:>7}  {:>11}  {:>7}  {:>12}  {:>16}  step  [shapes of the last run]",
            "share", "per call", "runs", "bytes/run", "rate"
        )?;
        for s in &self.steps {
            // `file:line` of `file:line:col`: enough to find it.
            let at = match s.at.rsplit_once(':') {
                Some((line, _)) => format!(" at {line}"),
                None => String::new(),
            };
            writeln!(
                f,
                "{:>6.1}%  {:>11}  {:>7}  {:>12}  {:>16}  {}{at}  [{}]",
                self.share(s),
                time(per_call(s.time)),
                s.runs,
                s.bytes / s.runs.max(1),
                s.rate(),
                s.what,
                s.shapes
            )?;
        }
        writeln!(f, "by kind:")?;
        for kind in KINDS {
            let of: Vec<&StepReport> = self.steps.iter().filter(|s| s.kind == kind).collect();
            if of.is_empty() {
                continue;
            }
            let t: Duration = of.iter().map(|s| s.time).sum();
            writeln!(
                f,
                "{:>6.1}%  {:>11}  {kind} ({} step{})",
                self.percent(t),
                time(per_call(t)),
                of.len(),
                if of.len() == 1 { "" } else { "s" }
            )?;
        }
        let stepped: Duration = self.steps.iter().map(|s| s.time).sum();
        let rest = self.call_time.saturating_sub(stepped);
        writeln!(
            f,
            "{:>6.1}%  {:>11}  between steps (checks, frees, outputs)",
            self.percent(rest),
            time(per_call(rest))
        )?;
        writeln!(
            f,
            "{:>6.1}%  {:>11}  inside kernels, at any depth (the rest is the VM's own work)",
            self.kernel_share(),
            time(per_call(self.kernel_time))
        )
    }
}
