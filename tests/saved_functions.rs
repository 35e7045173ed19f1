//! Saving a compiled function and loading it back without optimizing again: on the whole
//! file-test corpus the loaded function gives the bits of the one saved (both backends); a
//! training step with shared variables and a custom op's hidden state goes on where it was
//! saved; damaged files are errors.

#[allow(dead_code)]
#[path = "../examples/custom_ops/ops.rs"]
mod ops;

mod common;

use kiln::ir::text::{parse, parse_literal};
use kiln::{compile_func, function, grad, Backend, CompileOptions, Function, Graph, Tensor};
use ndarray::array;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-saved-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn options(backend: Backend) -> CompileOptions {
    CompileOptions {
        backend: Some(backend),
        ..Default::default()
    }
}

/// Same results: equal bits, or the same error.
fn same(a: &kiln::Result<Vec<Tensor>>, b: &kiln::Result<Vec<Tensor>>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    x.dtype() == y.dtype()
                        && x.shape() == y.shape()
                        && x.to_f64_vec()
                            .iter()
                            .zip(y.to_f64_vec())
                            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
                })
        }
        // The loaded function's values were built in the saved file: messages differ only
        // in where (`built at ...`).
        (Err(a), Err(b)) => without_places(&a.to_string()) == without_places(&b.to_string()),
        _ => false,
    }
}

/// `msg` without its `(built at FILE:LINE:COL)` parts.
fn without_places(msg: &str) -> String {
    let mut out = String::new();
    let mut rest = msg;
    while let Some(at) = rest.find(" (built at ") {
        out.push_str(&rest[..at]);
        rest = rest[at..].split_once(')').map_or("", |(_, r)| r);
    }
    out + rest
}

#[test]
fn loaded_functions_give_the_bits_of_the_saved_ones_on_the_whole_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    common::kir_files(&root, &mut files);
    files.sort();
    let mut ran = 0;
    for backend in [Backend::Cpu, Backend::Interp] {
        for file in &files {
            let src = std::fs::read_to_string(file).unwrap();
            let Ok(funcs) = parse("f", &src) else {
                continue;
            };
            let func = funcs.into_iter().next().unwrap();
            let runs: Vec<&str> = src
                .lines()
                .filter_map(|l| l.strip_prefix("; run:"))
                .collect();
            if runs.is_empty()
                || func
                    .body
                    .iter()
                    .any(|i| matches!(i.op, kiln::ir::Op::Custom(_)))
            {
                continue;
            }
            let Ok(f) = compile_func(func.clone(), &options(backend)) else {
                continue;
            };
            let path = tmp("corpus.kfn");
            f.save(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let g = Function::load(&path, &options(backend))
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            // Loading optimizes nothing: the function is the one saved.
            assert_eq!(
                kiln::ir::text::print_func(f.func()),
                kiln::ir::text::print_func(g.func()),
                "{}",
                file.display()
            );
            for line in runs {
                let ins = line.split_once("->").unwrap().0;
                let inputs: Vec<Tensor> = common::split_top(ins)
                    .iter()
                    .zip(&func.params)
                    .map(|(s, &p)| parse_literal(s, func.ty(p)).unwrap())
                    .collect();
                let refs: Vec<kiln::TensorRef> = inputs.iter().map(Tensor::view).collect();
                let (a, b) = (f.call(&refs), g.call(&refs));
                assert!(
                    same(&a, &b),
                    "{} ({backend}): {a:?} vs {b:?}",
                    file.display()
                );
                ran += 1;
            }
        }
    }
    assert!(ran > 200, "only {ran} runs");
}

/// An SGD step with a custom op that keeps a hidden buffer: saved after some steps, loaded
/// (in another graph, as another process would), it goes on with the same numbers.
#[test]
fn a_training_step_goes_on_where_it_was_saved() {
    let step = |g: &Graph| {
        let x = g.input("x", kiln::f32, [Some(3)]);
        let w = g.shared("w", array![0.5f32, -1.0, 2.0].into_dyn());
        // The op's hidden buffer is state; the gradient goes through the product only.
        let s = g
            .try_apply_custom(ops::AddWithBuffer::default(), &[&x, &x])
            .unwrap()
            .remove(0);
        let y = &s * &w;
        let loss = (&y * &y).sum(None, false);
        let gw = grad(&loss, &[&w]).unwrap();
        function(&[&x], &[&loss])
            .update(&w, &w - &gw[0] * 0.01)
            .compile()
            .unwrap()
    };
    let g = Graph::new();
    let f = step(&g);
    let x = array![1.0f32, 2.0, 3.0].into_dyn();
    for _ in 0..5 {
        f.call(&[x.view()]).unwrap();
    }
    let path = tmp("sgd.kfn");
    f.save(&path).unwrap();
    kiln::custom::register_custom_op("add_with_buffer", |_| {
        Ok(kiln::custom::CustomOpRef::new(ops::AddWithBuffer::default()))
    });
    let loaded = Function::load(&path, &CompileOptions::default()).unwrap();
    let (a, b) = (f.state(), loaded.state());
    assert_eq!(a.ops.calls, b.ops.calls);
    assert_eq!(a.shared[0].1, b.shared[0].1);
    assert_eq!(a.ops.hidden.len(), 1);
    assert_eq!(a.ops.hidden[0].value, b.ops.hidden[0].value);
    for _ in 0..3 {
        let (p, q) = (
            f.call(&[x.view()]).unwrap(),
            loaded.call(&[x.view()]).unwrap(),
        );
        assert_eq!(p[0], q[0]);
    }
    assert_eq!(f.state().shared[0].1, loaded.state().shared[0].1);
    let _ = std::fs::remove_file(&path);
}

/// Shared variables whose names the text form cannot keep (no name, a name two variables
/// share, an input's name, a name with a `/`, a space, a backslash or a line break) save and
/// load back: the loaded
/// function reads each saved value into the variable it belongs to.
#[test]
fn shared_variables_with_names_the_text_form_renames_load_back() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let names = [
        "",
        "w",
        "w",
        "x",
        "layer/w",
        "a b",
        "b",
        "new\nline\\",
        "r\r",
    ];
    let vars: Vec<_> = (names.iter().enumerate())
        .map(|(i, n)| g.shared(n, array![i as f32, 10.0 * i as f32].into_dyn()))
        .collect();
    let mut sum = x.clone();
    for (i, v) in vars.iter().enumerate() {
        sum = &sum + &(v * (i + 1) as f32);
    }
    let mut f = function(&[&x], &[&sum]);
    for v in &vars[..3] {
        f = f.update(v, v + 1.0f32);
    }
    let f = f.compile().unwrap();
    let xv = array![1.0f32, 2.0].into_dyn();
    f.call(&[xv.view()]).unwrap();
    let path = tmp("renamed.kfn");
    f.save(&path).unwrap();
    let loaded = Function::load(&path, &CompileOptions::default()).unwrap();
    assert_eq!(f.state().shared, loaded.state().shared);
    for _ in 0..2 {
        assert_eq!(
            f.call(&[xv.view()]).unwrap(),
            loaded.call(&[xv.view()]).unwrap()
        );
    }
    let _ = std::fs::remove_file(&path);
}

/// Threads saving one function to one path at once each write a temporary file of their
/// own: every save succeeds, the file left is one of them whole, and no temporary is left.
#[test]
fn threads_saving_to_one_path_at_once_leave_one_whole_file() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(256)]);
    let w = g.shared("w", ndarray::Array1::<f32>::zeros(256).into_dyn());
    let f = function(&[&x], &[&(&x + &w)])
        .update(&w, &w + &x)
        .compile()
        .unwrap();
    f.call(&[ndarray::Array1::<f32>::ones(256).into_dyn().view()])
        .unwrap();
    let dir = tmp("concurrent");
    std::fs::create_dir_all(&dir).unwrap();
    let (kfn, npz) = (dir.join("f.kfn"), dir.join("f.npz"));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    f.save(&kfn).unwrap();
                    f.save_state(&npz).unwrap();
                }
            });
        }
    });
    let loaded = Function::load(&kfn, &CompileOptions::default()).unwrap();
    assert_eq!(loaded.state().shared, f.state().shared);
    f.load_state(&npz).unwrap();
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut want = vec!["f.kfn".to_string(), "f.npz".to_string()];
    let mut left = left;
    left.sort();
    want.sort();
    assert_eq!(left, want, "only the two files stay");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The files of an archive: (name, contents).
type Files = Vec<(String, Vec<u8>)>;

#[test]
fn damaged_saved_functions_are_errors() {
    let f = kiln::compile_func(
        parse(
            "f",
            "func @f(%x: f32[2]) -> (f32[2]) {\n  %y = exp %x\n  return %y\n}\n",
        )
        .unwrap()
        .remove(0),
        &CompileOptions::default(),
    )
    .unwrap();
    let path = tmp("good.kfn");
    f.save(&path).unwrap();
    let files = kiln::npy::read_archive(&path).unwrap();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["function.kir", "function.txt", "calls.npy"]);
    let damaged = tmp("damaged.kfn");
    let with = |edit: &dyn Fn(&mut Files)| {
        let mut fs = files.clone();
        edit(&mut fs);
        kiln::npy::write_archive(&damaged, &fs).unwrap();
        Function::load(&damaged, &CompileOptions::default())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = with(&|fs| fs.retain(|(n, _)| n != "function.kir"));
    assert!(
        e.contains("damaged.kfn") && e.contains("no function.kir"),
        "{e}"
    );
    let e =
        with(&|fs| fs[0].1 = b"func @f(%x: f32[2]) -> (f32[2]) {\n  %y = nope %x\n}\n".to_vec());
    assert!(e.contains("function.kir:2"), "{e}");
    let e = with(&|fs| fs[1].1 = b"kiln function 9\n".to_vec());
    assert!(e.contains("kiln function 1"), "{e}");
    let e = with(&|fs| fs[1].1 = b"kiln function 1\ninputs 1\noutputs 2\n".to_vec());
    assert!(e.contains("does not fit"), "{e}");
    assert!(Function::load(tmp("missing.kfn"), &CompileOptions::default()).is_err());
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&damaged);
}
