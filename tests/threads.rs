//! `KILN_THREADS` sizes the pool every call runs on, and a value that is not a thread count is
//! a compile error naming it. The pool is made once per process, so each case runs this test
//! binary again as a child with the variable set (the ignored `child` test).

use kiln::{function, Backend, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::process::Command;

/// Runs the `child` test in a new process with `KILN_THREADS` set to `value`; its output.
fn run_child(value: &str, expect: &str) -> std::process::Output {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["child", "--exact", "--ignored", "--nocapture"])
        .env("KILN_THREADS", value)
        .env("KILN_TEST_EXPECT", expect)
        .output()
        .expect("the test binary runs")
}

#[test]
fn kiln_threads_sizes_the_pool_calls_run_on() {
    for n in ["1", "3"] {
        let out = run_child(n, n);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "KILN_THREADS={n}: {text}");
        assert!(text.contains(&format!("threads {n}")), "{text}");
    }
}

#[test]
fn a_kiln_threads_that_is_not_a_thread_count_is_a_compile_error_naming_it() {
    for bad in ["0", "two", "-1"] {
        let out = run_child(bad, "error");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "KILN_THREADS={bad}: {text}");
        assert!(
            text.contains(&format!("KILN_THREADS=\"{bad}\": the thread count")),
            "{text}"
        );
    }
}

/// In the child: compiles a product large enough to be split among threads; with a thread
/// count expected, checks that calls use it and that the product is the interpreter's, bit
/// for bit; with "error", that compiling fails naming the variable (printing the message).
#[test]
#[ignore = "run by the tests above, in a process of its own"]
fn child() {
    let Ok(expect) = std::env::var("KILN_TEST_EXPECT") else {
        eprintln!("skipped: run by the tests above, with the variables they set");
        return;
    };
    let (m, k, n) = (96, 64, 80);
    assert!(m * k * n >= kiln::gemm::PARALLEL_MIN);
    let build = |backend: Backend| {
        let g = Graph::new();
        let a = g.input("a", kiln::f32, [Some(m as i64), Some(k as i64)]);
        let b = g.input("b", kiln::f32, [Some(k as i64), Some(n as i64)]);
        let c = a.matmul(&b);
        function(&[&a, &b], &[&c]).backend(backend).compile()
    };
    if expect == "error" {
        let e = build(Backend::Cpu)
            .err()
            .expect("compiling fails")
            .to_string();
        println!("{e}");
        return;
    }
    let f = build(Backend::Cpu).expect("compiles");
    assert_eq!(kiln::threads().to_string(), expect);
    println!("threads {}", kiln::threads());
    let values = |rows: usize, cols: usize, seed: usize| {
        Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |i| {
            ((i[0] * 31 + i[1] * 7 + seed) % 17) as f32 * 0.25 - 2.0
        }))
    };
    let (a, b) = (values(m, k, 1), values(k, n, 2));
    let got = f.call(&[a.view(), b.view()]).unwrap();
    let want = build(Backend::Interp)
        .unwrap()
        .call(&[a.view(), b.view()])
        .unwrap();
    assert_eq!(got, want);
}

/// A user op that reports how many threads the call it runs in has.
#[derive(Debug)]
struct PoolSize;

impl kiln::custom::CustomOp for PoolSize {
    fn name(&self) -> &str {
        "pool_size"
    }

    fn make_node(
        &self,
        _inputs: &[&kiln::ir::TensorType],
    ) -> Result<Vec<kiln::ir::TensorType>, String> {
        Ok(vec![kiln::ir::TensorType::fixed(kiln::ir::DType::I64, &[])])
    }

    fn perform(
        &self,
        _inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _ctx: &mut kiln::custom::PerformContext<'_>,
    ) -> Result<(), String> {
        let n = rayon::current_num_threads() as i64;
        outputs[0] = Some(Tensor::I64(ndarray::arr0(n).into_dyn()));
        Ok(())
    }
}

#[test]
fn a_function_with_threads_of_its_own_runs_its_calls_on_them() {
    let (m, k, n) = (96, 64, 80);
    let values = |rows: usize, cols: usize, seed: usize| {
        Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |i| {
            ((i[0] * 31 + i[1] * 7 + seed) % 17) as f32 * 0.25 - 2.0
        }))
    };
    let (a0, b0) = (values(m, k, 1), values(k, n, 2));
    let mut products = Vec::new();
    for threads in [1, 3] {
        let g = Graph::new();
        let a = g.input("a", kiln::f32, [Some(m as i64), Some(k as i64)]);
        let b = g.input("b", kiln::f32, [Some(k as i64), Some(n as i64)]);
        let size = g.apply_custom(PoolSize, &[&a]).remove(0);
        let f = function(&[&a, &b], &[&a.matmul(&b), &size])
            .threads(threads)
            .compile()
            .unwrap();
        assert_eq!(f.threads(), threads);
        let out = f.call(&[a0.view(), b0.view()]).unwrap();
        assert_eq!(
            out[1],
            Tensor::I64(ndarray::arr0(threads as i64).into_dyn())
        );
        products.push(out[0].clone());
    }
    // The product's bits do not depend on the thread count.
    assert_eq!(products[0], products[1]);
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let e = function(&[&x], &[&x.exp()])
        .threads(0)
        .compile()
        .err()
        .expect("0 threads is refused");
    assert!(e.to_string().contains("at least one thread"), "{e}");
}
