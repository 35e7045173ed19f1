//! `Function::write_trace`: a profiled function's calls and steps as a Chrome trace, the
//! trace-event JSON that Perfetto and `chrome://tracing` open. The file is checked against
//! the format's schema by Python's `json` module (skipped where there is no `python3`): a
//! `traceEvents` list of complete events (`ph` "X" with `name`, `ts`, `dur`, `pid`, `tid`) and
//! metadata events naming the process and each thread's track.

use kiln::{function, CompileOptions, Graph};
use ndarray::{ArrayD, IxDyn};
use std::process::Command;

const CHECK: &str = r#"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert isinstance(ev, list) and ev, "no events"
spans = [e for e in ev if e["ph"] == "X"]
meta = [e for e in ev if e["ph"] == "M"]
for e in spans:
    assert isinstance(e["name"], str) and e["name"], e
    assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
    assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    assert e["cat"] in ("call", "step"), e
for e in meta:
    assert e["name"] in ("process_name", "thread_name") and isinstance(e["args"]["name"], str), e
calls = [e for e in spans if e["cat"] == "call"]
steps = [e for e in spans if e["cat"] == "step"]
tracks = {e["tid"] for e in calls}
named = {e["tid"] for e in meta if e["name"] == "thread_name"}
assert tracks <= named, (tracks, named)
print("calls", len(calls), "steps", len(steps), "tracks", len(tracks))
print("names", sorted({e["name"] for e in steps}))
print("at", sorted({e["args"]["at"] for e in steps}))
"#;

#[test]
fn a_profiled_functions_trace_has_its_calls_and_steps_on_each_threads_track() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [None, Some(64)]);
    let w = g.input("w", kiln::f32, [Some(64), Some(32)]);
    let y = x.matmul(&w).tanh().sum(Some(&[1]), false);
    let options = CompileOptions {
        profile: true,
        ..Default::default()
    };
    let f = function(&[&x, &w], &[&y])
        .options(options)
        .compile()
        .unwrap();
    let xv = ArrayD::from_shape_fn(IxDyn(&[16, 64]), |i| (i[0] + i[1]) as f32 * 0.01);
    let wv = ArrayD::from_shape_fn(IxDyn(&[64, 32]), |i| (i[0] * 3 + i[1]) as f32 * 0.001);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..3 {
                    f.call(&[xv.view(), wv.view()]).unwrap();
                }
            });
        }
    });
    let dir = std::env::temp_dir().join(format!("kiln-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    f.write_trace(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\"traceEvents\": ["), "{text}");
    assert_eq!(text.matches("\"cat\": \"call\"").count(), 6, "{text}");
    let script = dir.join("check.py");
    std::fs::write(&script, CHECK).unwrap();
    let checked = Command::new("python3").arg(&script).arg(&path).output();
    let svg = dir.join("trace.svg");
    let drawn = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/trace_svg.py"))
        .arg(&path)
        .arg(&svg)
        .output();
    let picture = std::fs::read_to_string(&svg).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let Ok(out) = checked else {
        eprintln!("skipped the schema check: no python3");
        return;
    };
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{report}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("calls 6"), "{report}");
    assert!(report.contains("tracks 2"), "{report}");
    assert!(report.contains("gemm matmul"), "{report}");
    assert!(report.contains("tests/trace.rs:"), "{report}");
    // tools/trace_svg.py draws one call: a bar per step, with its name and time as a tooltip,
    // coloured and summed by kind.
    let drawn = drawn.unwrap();
    assert!(
        drawn.status.success(),
        "trace_svg.py: {}",
        String::from_utf8_lossy(&drawn.stderr)
    );
    assert!(picture.starts_with("<svg "), "{picture}");
    assert!(picture.trim_end().ends_with("</svg>"), "{picture}");
    assert!(picture.contains("<title>gemm matmul"), "{picture}");
    assert!(picture.contains("products "), "{picture}");
    assert_eq!(
        picture.matches("<title>").count(),
        text.matches("\"cat\": \"step\"").count() / 6,
        "one bar per step of one call:\n{picture}"
    );
}

#[test]
fn tracing_a_function_that_is_not_profiled_is_an_error_that_says_how() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let options = CompileOptions {
        profile: false,
        ..Default::default()
    };
    let f = function(&[&x], &[&x.exp()])
        .options(options)
        .compile()
        .unwrap();
    let path = std::env::temp_dir().join(format!("kiln-trace-none-{}.json", std::process::id()));
    let e = f.write_trace(&path).unwrap_err().to_string();
    assert!(
        e.contains("not profiled") && e.contains("CompileOptions::profile"),
        "{e}"
    );
    assert!(!path.exists());
}
