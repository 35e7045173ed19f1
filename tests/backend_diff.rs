//! Differential testing of the backends on random graphs: random ops, dtypes, shapes with
//! broadcasting, views and reductions (`support/random_graph.rs`), compiled for the reference
//! interpreter and for the CPU backend, with the optimizer on and off. The results must agree:
//! exactly for integers and bools, within a few ulps (grown along a chain) for floats.

#[path = "support/random_graph.rs"]
mod random_graph;

use kiln::Backend;
use proptest::prelude::*;

fn run(case: &random_graph::Case, backend: Backend, optimize: bool) -> Vec<kiln::Tensor> {
    random_graph::run(case, backend, optimize).unwrap_or_else(|e| panic!("{e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_backends_agree_on_random_graphs(data in proptest::collection::vec(any::<u8>(), 4..80)) {
        let case = random_graph::build(&data);
        let reference = run(&case, Backend::Interp, false);
        for (backend, optimize) in [(Backend::Interp, true), (Backend::Cpu, false), (Backend::Cpu, true)] {
            let got = run(&case, backend, optimize);
            for (i, (a, b)) in reference.iter().zip(&got).enumerate() {
                let text = kiln::ir::text::print_func(
                    &kiln::graph::to_ssa("case", &case.inputs, &case.outputs, &[]).unwrap().func,
                );
                prop_assert!(
                    random_graph::agree(a, b, case.has_f32).is_ok(),
                    "output {i} on {backend} (optimize {optimize}): {}\n{text}",
                    random_graph::agree(a, b, case.has_f32).unwrap_err()
                );
            }
        }
    }
}
