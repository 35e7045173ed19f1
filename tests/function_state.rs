//! A compiled function's state from outside: its shared variables and what its ops keep
//! between calls (a custom op's hidden outputs, the call count) read, reset, saved as `.npz`
//! and loaded back, on every backend that keeps it; bad states are errors that change nothing.

#[allow(dead_code)]
#[path = "../examples/custom_ops/ops.rs"]
mod ops;

mod common;

use kiln::runtime::state::FunctionState;
use kiln::{function, Backend, CompileOptions, Function, Graph, Tensor};
use ndarray::{array, ArrayD, IxDyn};
use ops::AddWithBuffer;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-state-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// `s = add_with_buffer(x, w)` (a hidden buffer kept between calls) with `w <- w + s`;
/// returns the function, the variable and the op's allocation counter.
fn accumulator(g: &Graph, backend: Backend) -> (Function, kiln::Var, Arc<AtomicUsize>) {
    let x = g.input("x", kiln::f32, [Some(3)]);
    let w = g.shared("w", array![1.0f32, 2.0, 3.0].into_dyn());
    let op = AddWithBuffer::default();
    let allocations = op.allocations.clone();
    let s = g.try_apply_custom(op, &[&x, &w]).unwrap().remove(0);
    let f = function(&[&x], &[&s])
        .update(&w, &w + &s)
        .backend(backend)
        .options(CompileOptions {
            profile: false,
            ..Default::default()
        })
        .compile()
        .unwrap();
    (f, w, allocations)
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_f64_vec().iter().map(|&v| v as f32).collect()
}

#[test]
fn state_is_read_saved_loaded_and_reset_also_on_the_gpu_backend() {
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let (f, w, allocations) = accumulator(&g, backend);
        let x = array![0.5f32, 0.5, 0.5].into_dyn();
        for _ in 0..3 {
            f.call(&[x.view()]).unwrap();
        }
        // w: 1,2,3 -> w + (x + w) three times; the buffer holds the last sum, twice its
        // length.
        let st = f.state();
        assert_eq!(st.ops.calls, 3, "{backend}");
        assert_eq!(st.shared.len(), 1);
        assert_eq!(st.shared[0].0, "w");
        assert_eq!(f32s(&st.shared[0].1), vec![11.5, 19.5, 27.5]);
        assert_eq!(st.ops.hidden.len(), 1, "{st:?}");
        let h = &st.ops.hidden[0];
        assert!(
            h.key().starts_with("ops/") && h.key().ends_with(".add_with_buffer/1"),
            "{}",
            h.key()
        );
        assert_eq!(f32s(&h.value), vec![6.0, 10.0, 14.0, 0.0, 0.0, 0.0]);
        assert_eq!(allocations.load(Ordering::Relaxed), 1);

        let path = tmp(&format!("acc-{backend}.npz"));
        f.save_state(&path).unwrap();

        // A function compiled the same way in another graph takes the state: its first call
        // finds the buffer (no allocation) and continues from the saved w.
        let g2 = Graph::new();
        let (f2, w2, allocations2) = accumulator(&g2, backend);
        f2.load_state(&path).unwrap();
        assert_eq!(f32s(&w2.value().unwrap()), vec![11.5, 19.5, 27.5]);
        assert_eq!(f2.state().ops.calls, 3);
        let a = f.call(&[x.view()]).unwrap();
        let b = f2.call(&[x.view()]).unwrap();
        assert_eq!(f32s(&a[0]), f32s(&b[0]));
        assert_eq!(f32s(&w.value().unwrap()), f32s(&w2.value().unwrap()));
        assert_eq!(
            allocations2.load(Ordering::Relaxed),
            0,
            "{backend}: the loaded buffer is used"
        );

        // Reset: the ops' state of a fresh function; the variables keep their values.
        f2.reset_state().unwrap();
        let st = f2.state();
        assert_eq!((st.ops.calls, st.ops.hidden.len()), (0, 0));
        assert_eq!(st.shared.len(), 1);
        f2.call(&[x.view()]).unwrap();
        assert_eq!(allocations2.load(Ordering::Relaxed), 1);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn bad_states_are_errors_that_change_nothing() {
    let g = Graph::new();
    let (f, w, _) = accumulator(&g, Backend::Cpu);
    let x = array![1.0f32, 1.0, 1.0].into_dyn();
    f.call(&[x.view()]).unwrap();
    let before = f.state();
    let good = before.clone();
    let err = |st: FunctionState| f.set_state(&st).unwrap_err().to_string();

    let mut st = good.clone();
    st.shared[0].1 = Tensor::F32(ArrayD::zeros(IxDyn(&[4])));
    let e = err(st);
    assert!(e.contains("shared/w") && e.contains("f32[3]"), "{e}");
    let mut st = good.clone();
    st.shared[0].0 = "v".into();
    assert!(err(st).contains("no shared variable of that name"));
    let mut st = good.clone();
    st.ops.hidden[0].op = "tear".into();
    assert!(err(st).contains("is `add_with_buffer`"));
    let mut st = good.clone();
    st.ops.hidden[0].output = 0;
    assert!(err(st).contains("keeps outputs 1..2"));
    let mut st = good.clone();
    st.ops.hidden[0].value = Tensor::F64(ArrayD::zeros(IxDyn(&[6])));
    assert!(err(st).contains("expected f32[?]"));
    // Nothing changed.
    let after = f.state();
    assert_eq!(f32s(&after.shared[0].1), f32s(&before.shared[0].1));
    assert_eq!(f32s(&w.value().unwrap()), f32s(&before.shared[0].1));
    assert_eq!(after.ops.calls, 1);
    assert_eq!(
        f32s(&after.ops.hidden[0].value),
        f32s(&before.ops.hidden[0].value)
    );

    // Files: not an archive, an entry that is no state, and a missing file.
    let path = tmp("bad.npz");
    std::fs::write(&path, b"not a zip").unwrap();
    assert!(f.load_state(&path).is_err());
    kiln::npy::write_npz(&path, &[("weights".into(), &before.shared[0].1)]).unwrap();
    let e = f.load_state(&path).unwrap_err().to_string();
    assert!(e.contains("bad.npz") && e.contains("`weights`"), "{e}");
    assert!(f.load_state(tmp("missing.npz")).is_err());
    let _ = std::fs::remove_file(&path);
}

/// `.npz` files as numpy writes them: `np.savez` stores entries, `np.savez_compressed`
/// deflates them; both load.
#[test]
fn npz_files_round_trip_stored_and_deflated() {
    use std::io::Write;
    let a = Tensor::F64(array![[1.0, -2.5], [3.0, 4.0]].into_dyn());
    let b = Tensor::I32(array![7, 8, 9].into_dyn());
    let c = Tensor::Bool(array![true, false].into_dyn());
    let path = tmp("plain.npz");
    kiln::npy::write_npz(
        &path,
        &[("a".into(), &a), ("dir/b".into(), &b), ("c".into(), &c)],
    )
    .unwrap();
    let back = kiln::npy::read_npz(&path).unwrap();
    let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "dir/b", "c"]);
    assert_eq!(back[0].1, a);
    assert_eq!(back[1].1, b);
    assert_eq!(back[2].1, c);

    let deflated = tmp("deflated.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&deflated).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("a.npy", options).unwrap();
    zip.write_all(&kiln::npy::to_bytes(&a).unwrap()).unwrap();
    zip.finish().unwrap();
    assert_eq!(kiln::npy::read_npz(&deflated).unwrap()[0].1, a);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&deflated);
}
