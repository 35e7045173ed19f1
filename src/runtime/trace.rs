//! A profiled function's calls and steps as a Chrome trace (the trace-event format that
//! Perfetto and `chrome://tracing` open): `Function::write_trace`, or `KILN_PROFILE=trace.json`
//! at exit. Each event is a complete event (`"ph": "X"`) on the track of the thread that ran
//! it, named by the step's kind, op and result, with the line of the user's code that built
//! it and the shapes it read and wrote.
//!
//! Written by hand rather than through serde: the format is five fields per event, and kiln
//! has no JSON dependency to reuse.

use std::fmt::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The most events one function keeps (about 40 MB); later ones are counted, not kept.
pub const MAX_EVENTS: usize = 1 << 20;

/// One timed span: a step (its index among the plan's steps) or a whole call.
#[derive(Clone)]
struct Event {
    /// `None`: a call.
    step: Option<u32>,
    start_ns: u64,
    dur_ns: u64,
    thread: u32,
    shapes: String,
}

/// The events of one function's calls, kept since it was compiled (or last reset).
pub struct Trace {
    origin: Instant,
    events: Mutex<(Vec<Event>, u64)>,
}

/// A small number per thread, for its track; the first call on a thread also records the
/// thread's name (`thread_names`), so later events take no lock for it.
fn this_thread() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! {
        static ID: u32 = {
            let id = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = std::thread::current()
                .name()
                .map_or_else(|| format!("thread {id}"), str::to_string);
            let mut names = thread_names().lock().unwrap_or_else(|e| e.into_inner());
            names.push((id, name));
            id
        };
    }
    ID.with(|id| *id)
}

/// The names of the threads that recorded events, by track.
fn thread_names() -> &'static Mutex<Vec<(u32, String)>> {
    static NAMES: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());
    &NAMES
}

impl Default for Trace {
    fn default() -> Trace {
        Trace {
            origin: Instant::now(),
            events: Mutex::new((Vec::new(), 0)),
        }
    }
}

impl Trace {
    fn push(&self, step: Option<u32>, started: Instant, dur: std::time::Duration, shapes: &str) {
        let thread = this_thread();
        let start_ns = started.saturating_duration_since(self.origin).as_nanos() as u64;
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if ev.0.len() >= MAX_EVENTS {
            ev.1 += 1;
            return;
        }
        ev.0.push(Event {
            step,
            start_ns,
            dur_ns: dur.as_nanos() as u64,
            thread,
            shapes: shapes.to_string(),
        });
    }

    /// Step `step` (its index among the plan's steps) ran from `started` for `dur`.
    pub fn step(&self, step: usize, started: Instant, dur: std::time::Duration, shapes: &str) {
        self.push(Some(step as u32), started, dur, shapes);
    }

    /// A call ran from `started` for `dur`.
    pub fn call(&self, started: Instant, dur: std::time::Duration) {
        self.push(None, started, dur, "");
    }

    /// Forgets every event so far.
    pub fn reset(&self) {
        *self.events.lock().unwrap_or_else(|e| e.into_inner()) = (Vec::new(), 0);
    }

    /// The trace as trace-event JSON: `func` names the calls, `labels[i]` and `places[i]`
    /// step `i` and where the user's code built it.
    pub fn json(&self, func: &str, labels: &[String], places: &[String]) -> String {
        let (events, dropped) = self
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut out = String::from("{\"traceEvents\": [\n");
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
        };
        sep(&mut out);
        let _ = write!(
            out,
            "{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {{\"name\": {}}}}}",
            string(&format!("kiln @{func}"))
        );
        let names = thread_names()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (t, name) in names
            .iter()
            .filter(|(t, _)| events.iter().any(|e| e.thread == *t))
        {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": {t}, \"args\": {{\"name\": {}}}}}",
                string(name)
            );
        }
        for e in &events {
            let (name, cat, at) = match e.step {
                None => (format!("call @{func}"), "call", ""),
                Some(s) => {
                    let at = places.get(s as usize).map_or("", String::as_str);
                    let label = labels.get(s as usize).cloned().unwrap_or_default();
                    let name = match at.rsplit_once(':') {
                        // `file:line` of `file:line:col`, short enough for a span.
                        Some((line, _)) => format!("{label} at {line}"),
                        None => label,
                    };
                    (name, "step", at)
                }
            };
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"name\": {}, \"cat\": \"{cat}\", \"ph\": \"X\", \"ts\": {}, \"dur\": {}, \"pid\": 1, \"tid\": {}, \"args\": {{\"at\": {}, \"shapes\": {}}}}}",
                string(&name),
                micros(e.start_ns),
                micros(e.dur_ns),
                e.thread,
                string(at),
                string(&e.shapes),
            );
        }
        let _ = write!(
            out,
            "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {{\"function\": {}, \"events dropped\": {dropped}}}}}\n",
            string(func)
        );
        out
    }
}

/// Nanoseconds as the format's microseconds, with three decimals.
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// `s` as a JSON string.
fn string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
