//! A function's state read, saved and loaded while 8 threads call it: every snapshot is a
//! state some call left (never a mix of two calls), and a loaded state is seen whole or not
//! at all by the calls beside it. On every backend that keeps shared variables.

mod common;

use kiln::{function, Backend, Function, Graph, Tensor};
use ndarray::arr0;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

const CALLERS: usize = 8;

/// `a`, `b`, `c` (i64 counters, equal at the start) each take `+ x` at every call; the
/// outputs are `a - b` and `b - c` of the values the call read (both 0 while the state is
/// whole).
fn counters(g: &Graph, backend: Backend) -> Function {
    let x = g.input("x", kiln::i64, []);
    let [a, b, c] = ["a", "b", "c"].map(|n| g.shared(n, arr0(0i64).into_dyn()));
    function(&[&x], &[&(&a - &b), &(&b - &c)])
        .update(&a, &a + &x)
        .update(&b, &b + &x)
        .update(&c, &c + &x)
        .backend(backend)
        .compile()
        .unwrap()
}

fn scalar(t: &Tensor) -> i64 {
    t.to_f64_vec()[0] as i64
}

/// The values of `a`, `b`, `c` in a state's entries.
fn abc(shared: &[(String, Tensor)]) -> [i64; 3] {
    ["a", "b", "c"].map(|n| {
        let (_, t) = shared.iter().find(|(k, _)| k == n).expect("the variable");
        scalar(t)
    })
}

/// Runs `observe` (returning whether it saw a torn state) on this thread until it has run
/// `rounds` times, while `CALLERS` threads call `f` with `x = 1`; returns how many of the
/// observations were torn and how many calls the callers saw a torn state in.
fn while_called(f: &Function, rounds: usize, mut observe: impl FnMut() -> bool) -> (usize, usize) {
    let done = AtomicBool::new(false);
    let torn_calls = AtomicUsize::new(0);
    let calls = AtomicUsize::new(0);
    let mut torn = 0;
    thread::scope(|s| {
        for _ in 0..CALLERS {
            s.spawn(|| {
                let x = arr0(1i64).into_dyn();
                while !done.load(Ordering::Relaxed) {
                    let out = f.call(&[x.view()]).unwrap();
                    if scalar(&out[0]) != 0 || scalar(&out[1]) != 0 {
                        torn_calls.fetch_add(1, Ordering::Relaxed);
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Observe only once the calls run.
        while calls.load(Ordering::Relaxed) < CALLERS {
            thread::yield_now();
        }
        // At least `rounds` observations, and on until the callers have made a tenth as many
        // calls: an observer that takes every lock back to back can leave the callers few
        // turns on a loaded machine (the locks are not fair), and then it would observe
        // nothing happening.
        let mut observed = 0;
        while observed < rounds || calls.load(Ordering::Relaxed) <= rounds / 10 {
            torn += usize::from(observe());
            observed += 1;
            assert!(observed < 1000 * rounds, "the callers made almost no calls");
        }
        done.store(true, Ordering::Relaxed);
    });
    assert!(calls.load(Ordering::Relaxed) > rounds / 10, "the calls ran");
    (torn, torn_calls.load(Ordering::Relaxed))
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-races-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn snapshots_taken_while_threads_call_are_never_torn() {
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let f = counters(&g, backend);
        let (torn, torn_calls) = while_called(&f, 3000, || {
            let [a, b, c] = abc(&f.state().shared);
            a != b || b != c
        });
        assert_eq!(
            (torn, torn_calls),
            (0, 0),
            "{backend:?}: torn snapshots, torn calls"
        );
        let [a, b, c] = abc(&f.state().shared);
        assert!(a == b && b == c && a > 0, "{backend:?}: {a} {b} {c}");
    }
}

#[test]
fn saved_states_are_never_torn() {
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let f = counters(&g, backend);
        let path = tmp(&format!("saved-{backend:?}.npz"));
        let (torn, _) = while_called(&f, 600, || {
            f.save_state(&path).unwrap();
            let entries = kiln::npy::read_npz(&path).unwrap();
            let shared: Vec<(String, Tensor)> = (entries.into_iter())
                .filter_map(|(k, t)| Some((k.strip_prefix("shared/")?.to_string(), t)))
                .collect();
            let [a, b, c] = abc(&shared);
            a != b || b != c
        });
        assert_eq!(torn, 0, "{backend:?}: torn files");
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn a_state_loaded_while_threads_call_is_seen_whole() {
    for backend in common::backends_with_gpu_host() {
        let g = Graph::new();
        let f = counters(&g, backend);
        // Two states far apart: a call that saw half of one and half of the other would see
        // `a - b` near 2000.
        let paths = [1000i64, -1000].map(|v| {
            let (g2, p) = (Graph::new(), tmp(&format!("load-{backend:?}-{v}.npz")));
            let src = counters(&g2, backend);
            let st = src.state();
            let set: Vec<(String, Tensor)> = (st.shared.iter())
                .map(|(n, _)| (n.clone(), Tensor::I64(arr0(v).into_dyn())))
                .collect();
            src.set_state(&kiln::runtime::state::FunctionState {
                shared: set,
                ops: st.ops,
            })
            .unwrap();
            src.save_state(&p).unwrap();
            p
        });
        let mut k = 0;
        let (_, torn_calls) = while_called(&f, 2000, || {
            k += 1;
            f.load_state(&paths[k % 2]).unwrap();
            false
        });
        assert_eq!(
            torn_calls, 0,
            "{backend:?}: calls that saw a half-loaded state"
        );
        let [a, b, c] = abc(&f.state().shared);
        assert!(a == b && b == c, "{backend:?}: {a} {b} {c}");
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    }
}
