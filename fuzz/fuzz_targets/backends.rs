//! Fuzzes the backends against each other: the bytes drive a random program (the generator of
//! `tests/support/random_graph.rs`: ranks 0 to 5, every broadcast pattern, views that are not
//! contiguous, every dtype, and steps at the edges of sizes: attributes near 2^64, `?` dims
//! whose extents make a result too large), run by the reference interpreter and by the CPU
//! backend with the optimizer off and on. None may panic or abort; all must give the same
//! results (bit for bit where the unoptimized CPU backend runs only exact ops, within a few
//! ulps otherwise) or all refuse the program. A program with a shared variable is also called
//! from threads while its state is read: every state read must be one some calls left.
#![no_main]
#![allow(dead_code)]

#[path = "../../tests/support/random_graph.rs"]
mod random_graph;

use kiln::Backend;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let case = random_graph::build(data);
    let fail = |what: String| -> ! {
        panic!("{what}\n{}\n{}", random_graph::layouts(&case), random_graph::text(&case))
    };
    let reference = random_graph::run(&case, Backend::Interp, false);
    for optimize in [false, true] {
        let got = random_graph::run(&case, Backend::Cpu, optimize);
        if let Err(e) = random_graph::same_outcome(&case, &reference, &got, !optimize) {
            fail(format!("the backends disagree (optimize {optimize}): {e}"));
        }
    }
    if case.shared.is_some() && reference.is_ok() {
        if let Err(e) = random_graph::whole_state_under_threads(&case, Backend::Cpu, 2, 3) {
            fail(e);
        }
    }
});
