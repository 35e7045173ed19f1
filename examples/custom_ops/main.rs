//! Writing your own ops: see `ops.rs` for the ops, and this file for how they are used.
//!
//! Run with `cargo run --release --example custom_ops`.

mod ops;

use kiln::{function, Graph};
use ndarray::{array, ArrayD};
use ops::{AddWithBuffer, Permute, Repeat, Scale, Tear};
use std::sync::atomic::Ordering;

fn main() -> Result<(), kiln::Error> {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3)]);

    // tear: one output per row when tearing along dim 1.
    let rows = g.try_apply_custom(Tear { dims: vec![1] }, &[&x])?;
    println!(
        "tear along dim 1 gives {} outputs of type {}",
        rows.len(),
        rows[0].ty()
    );

    // add_with_buffer keeps a hidden scratch buffer between calls.
    let add = AddWithBuffer::default();
    let allocations = add.allocations.clone();
    let s = g.try_apply_custom(add, &[&rows[0], &rows[1]])?;

    // permute may run in place: the torn-off first row is not read after it, so the runtime
    // hands its buffer over instead of copying.
    let permute = Permute {
        perm: vec![0],
        in_place_runs: Default::default(),
    };
    let runs = permute.in_place_runs.clone();
    let p = g.try_apply_custom(permute, &[&rows[0]])?;

    let f = function(&[&x], &[&p[0], &s[0]]).compile()?;
    let xv: ArrayD<f32> = array![[1.0f32, 2.0, 3.0], [10.0, 20.0, 30.0]].into_dyn();
    for _ in 0..3 {
        let out = f.call(&[xv.view()])?;
        println!("row 0: {}   row 0 + row 1: {}", out[0], out[1]);
    }
    println!(
        "permute ran in place {} times; add_with_buffer allocated its buffer {} time(s)",
        runs.load(Ordering::Relaxed),
        allocations.load(Ordering::Relaxed)
    );

    // Gradient-style accumulation (MXNet's kAddTo): a sum of contributions of an op that can
    // add into its output storage. The optimizer keeps the adds and runs each op right before
    // its add; the runtime hands it the running sum, so the sum takes no array per term.
    let added = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let scaled = |t: &kiln::Var| {
        let op = Scale {
            accumulations: added.clone(),
            ..Scale::new(0.5)
        };
        g.apply_custom(op, &[t]).remove(0)
    };
    let terms = [x.tanh(), x.exp(), x.sin(), x.cos()].map(|t| scaled(&t));
    let sum = &(&(&terms[0] + &terms[1]) + &terms[2]) + &terms[3];
    let f = function(&[&x], &[&sum]).compile()?;
    println!(
        "0.5 * (tanh x + exp x + sin x + cos x) = {}",
        f.call(&[xv.view()])?[0]
    );
    println!(
        "of the four scale ops, {} added into the running sum (AddTo)",
        added.load(Ordering::Relaxed)
    );

    // A shape function: `repeat`'s make_node says f32[?], its infer_shape says 3n. On a known
    // length the output's type is known when the graph is built; on an open one the runtime
    // sizes the output from it before perform runs (perform fills what it is given).
    let v = g.input("v", kiln::f32, [Some(2)]);
    let known = g.apply_custom_default(Repeat { times: 3 }, &[&v]);
    let w = g.input("w", kiln::f32, [None]);
    let open = g.apply_custom_default(Repeat { times: 3 }, &[&w]);
    println!(
        "repeat of f32[2] has type {}, of f32[?] {}",
        known.ty(),
        open.ty()
    );
    let f = function(&[&w], &[&open]).compile()?;
    for w in [array![1.0f32, 2.0], array![7.0f32, 8.0, 9.0]] {
        println!(
            "repeat 3 times {w} = {}",
            f.call(&[w.view().into_dyn()])?[0]
        );
    }
    Ok(())
}
