//! The profiler: per step of a compiled function, its runs, time, bytes and rate; on demand
//! through `Function::profile`, and printed when the function goes with `KILN_PROFILE` set.

mod common;

use kiln::{function, Backend, CompileOptions, Graph};
use ndarray::{Array, IxDyn};

fn profiled(backend: Backend) -> kiln::Function {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(64), Some(128)]);
    let w = g.input("w", kiln::f32, [Some(128), Some(32)]);
    let h = x.matmul(&w).tanh();
    let loss = (&h * &h).sum(None, false);
    function(&[&x, &w], &[&loss, &h])
        .backend(backend)
        .options(CompileOptions {
            profile: true,
            ..Default::default()
        })
        .compile()
        .unwrap()
}

/// Every backend, the device VM of the GPU backend included with the `gpu` feature.
#[test]
fn a_profiled_function_reports_every_step_of_its_calls_also_on_the_gpu_backend() {
    for backend in common::backends_with_gpu_host() {
        let f = profiled(backend);
        let x = Array::from_elem(IxDyn(&[64, 128]), 0.01f32);
        let w = Array::from_elem(IxDyn(&[128, 32]), 0.02f32);
        for _ in 0..5 {
            f.call(&[x.view(), w.view()]).unwrap();
        }
        let r = f.profile().expect("a profile");
        assert_eq!(r.calls, 5, "{backend}");
        assert!(!r.steps.is_empty());
        // Every step of the function's block ran in every call, and their times add up to
        // no more than the calls'.
        assert!(r.steps.iter().all(|s| s.runs == 5), "{r}");
        let share: f64 = r.steps.iter().map(|s| r.share(s)).sum();
        assert!(share > 0.0 && share <= 100.0 + 1e-9, "{share} {r}");
        // The product: 2 * 64 * 32 * 128 FLOPs a run, and the bytes of a, b and c.
        let gemm = r
            .steps
            .iter()
            .find(|s| s.what.starts_with("gemm"))
            .expect("a product");
        assert_eq!(gemm.flops, 5 * 2 * 64 * 32 * 128, "{r}");
        assert_eq!(gemm.bytes, 5 * 4 * (64 * 128 + 128 * 32 + 64 * 32), "{r}");
        assert!(
            gemm.shapes
                .contains("f32[64, 128] f32[128, 32] -> f32[64, 32]"),
            "{r}"
        );
        assert!(gemm.rate().ends_with("GFLOP/s"), "{r}");
        // It is a product, built on a line of this file, which its report line names.
        assert_eq!(gemm.kind, "products", "{r}");
        assert!(gemm.at.starts_with("tests/profile.rs:"), "{r}");
        // The slowest first.
        assert!(r.steps.windows(2).all(|p| p[0].time >= p[1].time), "{r}");
        let text = r.to_string();
        assert!(text.starts_with("kiln profile of @f: 5 calls"), "{text}");
        assert!(text.contains("between steps"), "{text}");
        assert!(text.contains(" at tests/profile.rs:"), "{text}");
        // The summary by kind adds up the steps of each kind.
        let kinds = &text[text.find("by kind:\n").expect("a summary by kind")..];
        assert!(kinds.contains("products (1 step)"), "{text}");
        let in_kinds: usize = (kiln::runtime::profile::KINDS.iter())
            .map(|k| r.steps.iter().filter(|s| s.kind == *k).count())
            .sum();
        assert_eq!(in_kinds, r.steps.len(), "{r}");
        // The kernels' time lies inside the steps' (the VM's work between them does not).
        let stepped: std::time::Duration = r.steps.iter().map(|s| s.time).sum();
        assert!(r.kernel_time > std::time::Duration::ZERO, "{r}");
        assert!(r.kernel_time <= stepped, "{r}");
        assert!(text.contains("inside kernels"), "{text}");
        f.reset_profile();
        let r = f.profile().unwrap();
        assert_eq!((r.calls, r.steps.len()), (0, 0), "{r}");
        assert_eq!(r.kernel_time, std::time::Duration::ZERO, "{r}");
    }
}

/// A `scan` is one step of the function's block, but the kernels of its body's steps count
/// in the call's in-kernel time: here they are all of it (nothing else runs a kernel), and
/// the VM's own work per iteration (the slices, the yields) is the scan step's time beyond it.
#[test]
fn the_kernels_inside_a_scan_count_in_the_in_kernel_time() {
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let xs = g.input("xs", kiln::f32, [Some(40), Some(16), Some(32)]);
        let h0 = g.input("h0", kiln::f32, [Some(16), Some(32)]);
        let w = g.input("w", kiln::f32, [Some(32), Some(32)]);
        let (c, _) = kiln::scan(&[&h0], &[&xs], |c, x| {
            let h = (c[0].matmul(&w) + &x[0]).tanh();
            (vec![h], vec![])
        });
        let f = function(&[&xs, &h0, &w], &[&c[0]])
            .backend(backend)
            .options(CompileOptions {
                profile: true,
                ..Default::default()
            })
            .compile()
            .unwrap();
        let xs = Array::from_elem(IxDyn(&[40, 16, 32]), 0.01f32);
        let h0 = Array::from_elem(IxDyn(&[16, 32]), 0.1f32);
        let w = Array::from_elem(IxDyn(&[32, 32]), 0.02f32);
        for _ in 0..3 {
            f.call(&[xs.view(), h0.view(), w.view()]).unwrap();
        }
        let r = f.profile().expect("a profile");
        let scan = (r.steps.iter())
            .find(|s| s.what.starts_with("scan"))
            .unwrap_or_else(|| panic!("{backend}: a scan step\n{r}"));
        assert_eq!(scan.runs, 3, "{backend}\n{r}");
        // Only the body's steps run kernels, and they run inside the scan step.
        assert!(r.kernel_time > std::time::Duration::ZERO, "{backend}\n{r}");
        assert!(r.kernel_time <= scan.time, "{backend}\n{r}");
        assert!(
            r.kernel_share() > 0.0 && r.kernel_share() <= 100.0,
            "{backend}\n{r}"
        );
    }
}

#[test]
fn functions_are_not_profiled_unless_asked() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(3)]);
    let f = function(&[&x], &[&x.exp()])
        .options(CompileOptions {
            profile: false,
            ..Default::default()
        })
        .compile()
        .unwrap();
    assert!(f.profile().is_none());
}

/// With `KILN_PROFILE=1`, `kiln run` prints the function's report when it is done.
#[test]
fn kiln_profile_prints_the_report_when_the_function_goes() {
    let dir = std::env::temp_dir().join(format!("kiln-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("f.kir");
    std::fs::write(
        &f,
        "func @f(%x: f32[4]) -> (f32[]) {\n  %y = exp %x\n  %s = sum %y\n  return %s\n}\n",
    )
    .unwrap();
    let x = dir.join("x.npy");
    ndarray_npy::write_npy(&x, &Array::from_elem(IxDyn(&[4]), 1.0f32)).unwrap();
    for (profile, printed) in [("1", true), ("0", false)] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["run", f.to_str().unwrap(), "--input"])
            .arg(format!("x={}", x.display()))
            .args(["--out-dir", dir.to_str().unwrap()])
            .env("KILN_PROFILE", profile)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_eq!(
            err.contains("kiln profile of @f: 1 call,"),
            printed,
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
