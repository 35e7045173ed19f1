//! Fuzzes the backends against each other: the bytes drive a random program (the generator of
//! `tests/support/random_graph.rs`: ranks 0 to 5, every broadcast pattern, views that are not
//! contiguous, every dtype), run by the reference interpreter and by the CPU backend with the
//! optimizer off and on. Neither may panic or fail, and the results must agree (bit for bit
//! where the unoptimized CPU backend runs only exact ops, within a few ulps otherwise).
#![no_main]
#![allow(dead_code)]

#[path = "../../tests/support/random_graph.rs"]
mod random_graph;

use kiln::Backend;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let case = random_graph::build(data);
    let run = |backend, optimize| {
        random_graph::run(&case, backend, optimize).unwrap_or_else(|e| {
            panic!("{e}\n{}\n{}", random_graph::layouts(&case), random_graph::text(&case))
        })
    };
    let reference = run(Backend::Interp, false);
    for optimize in [false, true] {
        let got = run(Backend::Cpu, optimize);
        if let Err(e) = random_graph::compare(&case, &reference, &got, !optimize) {
            panic!(
                "the backends disagree (optimize {optimize}): {e}\n{}\n{}",
                random_graph::layouts(&case),
                random_graph::text(&case)
            );
        }
    }
});
