//! Fuzzes the backends against each other: the bytes drive a random graph (the generator of
//! `tests/support/random_graph.rs`), compiled for the reference interpreter and for the CPU
//! backend with the optimizer on. Neither may panic or fail, and the results must agree
//! (exactly for integers, within a few ulps for floats).
#![no_main]

#[path = "../../tests/support/random_graph.rs"]
mod random_graph;

use kiln::{function, Backend, CompileOptions, TensorRef};
use libfuzzer_sys::fuzz_target;

fn run(case: &random_graph::Case, backend: Backend, optimize: bool) -> Vec<kiln::Tensor> {
    let ins: Vec<&kiln::Var> = case.inputs.iter().collect();
    let outs: Vec<&kiln::Var> = case.outputs.iter().collect();
    let f = function(&ins, &outs)
        .options(CompileOptions {
            backend: Some(backend),
            optimize,
            dump: Default::default(),
            ..Default::default()
        })
        .compile()
        .expect("a random graph compiles");
    let args: Vec<TensorRef> = case.args.iter().map(|t| t.view()).collect();
    f.call(&args).expect("a random graph runs")
}

fuzz_target!(|data: &[u8]| {
    let case = random_graph::build(data);
    let reference = run(&case, Backend::Interp, false);
    let got = run(&case, Backend::Cpu, true);
    for (a, b) in reference.iter().zip(&got) {
        if let Err(e) = random_graph::agree(a, b, case.has_f32) {
            panic!("the backends disagree: {e}");
        }
    }
});
