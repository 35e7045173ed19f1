//! Fuzzes the backends against each other: the bytes drive a random graph (the generator of
//! `tests/support/random_graph.rs`), compiled for the reference interpreter and for the CPU
//! backend with the optimizer on. Neither may panic or fail, and the results must agree
//! (exactly for integers, within a few ulps for floats).
#![no_main]

#[path = "../../tests/support/random_graph.rs"]
mod random_graph;

use kiln::Backend;
use libfuzzer_sys::fuzz_target;

fn run(case: &random_graph::Case, backend: Backend, optimize: bool) -> Vec<kiln::Tensor> {
    random_graph::run(case, backend, optimize).expect("a random graph compiles and runs")
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
