//! Differential testing of the backends on random programs (`support/random_graph.rs`: ranks 0
//! to 5, every broadcast pattern, views that are not contiguous, every dtype, elementwise,
//! reduce, shape, matmul, select, cast and ifelse ops), run by the reference interpreter
//! unoptimized (the oracle) and compared with the interpreter optimized, the CPU backend
//! unoptimized (bit for bit where no inexact op is involved, signed zeros included) and
//! optimized, and ahead-of-time objects (where every shape is known and there is no `ifelse`),
//! loaded into this process.
//!
//! The programs come from a seed that changes from run to run; a failure prints it, and
//! `KILN_RANDOM_SEED=<seed>` replays the same programs (`KILN_RANDOM_CASES` sets how many,
//! `KILN_RANDOM_PROGRAM=<i>` runs only program `i`, `KILN_RANDOM_EDGES=0` leaves out the steps
//! at the edges of sizes, which every backend must either run alike or refuse alike).

#[path = "support/aot_lib.rs"]
mod aot_lib;
mod common;
#[path = "support/random_graph.rs"]
mod random_graph;

use kiln::Backend;
use random_graph::Case;

/// Shards of the random programs, one test each, so that the test threads share them.
const SHARDS: u64 = 4;

/// Programs per shard: `KILN_RANDOM_CASES` in all, else a default that keeps CI short.
fn cases_per_shard(default_total: u64) -> u64 {
    let total = std::env::var("KILN_RANDOM_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default_total);
    total.div_ceil(SHARDS)
}

/// Whether this run is the interpreter-only one (`KILN_BACKEND=interp`): the random programs
/// choose their backends, and the default run has them.
fn skipped_under_interp() -> bool {
    let skip = std::env::var("KILN_BACKEND").is_ok_and(|b| b == "interp");
    if skip {
        eprintln!("skipped: the random programs choose their backends; the default run has them");
    }
    skip
}

/// The bytes of program `i` of `seed` (splitmix64 over the pair).
fn program_bytes(seed: u64, i: u64) -> Vec<u8> {
    let mut x = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let len = 8 + (next() % 120) as usize;
    (0..len).map(|_| next() as u8).collect()
}

fn describe(case: &Case, seed: u64, i: u64, what: &str) -> String {
    format!(
        "{what}\nseed {seed}, program {i} (KILN_RANDOM_SEED={seed} KILN_RANDOM_PROGRAM={i} replays it)\narguments: {}\n{}",
        random_graph::layouts(case),
        random_graph::text(case)
    )
}

/// `KILN_RANDOM_PROGRAM`: the one program to run, where set.
fn only_program() -> Option<u64> {
    std::env::var("KILN_RANDOM_PROGRAM")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// While alive, says which program is running if the thread panics: a panic inside kiln (an
/// overflow in a debug build, an index out of bounds) is not a failure `describe` reports, and
/// without the program's number its seed alone does not replay it.
/// Once the program is built, its text too: a panic while compiling it then shows what
/// was compiled, with no replay needed to see it.
struct Running {
    seed: u64,
    program: u64,
    text: String,
}

impl Running {
    fn new(seed: u64, program: u64) -> Running {
        Running {
            seed,
            program,
            text: String::new(),
        }
    }

    /// Records the program being run, for the message a panic prints.
    fn of(&mut self, case: &Case) {
        self.text = random_graph::text(case);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let (seed, i) = (self.seed, self.program);
            eprintln!(
                "the panic came in seed {seed}, program {i} (KILN_RANDOM_SEED={seed} KILN_RANDOM_PROGRAM={i} replays it)\n{}",
                self.text
            );
        }
    }
}

/// Runs shard `shard` of this run's programs through the in-process backends.
fn run_shard(shard: u64) {
    if skipped_under_interp() {
        return;
    }
    let seed = common::random_seed(&format!("random programs, shard {shard}"));
    let n = cases_per_shard(2000);
    eprintln!("random programs, shard {shard}: {n} programs");
    let only = only_program();
    for k in 0..n {
        let i = k * SHARDS + shard;
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut running = Running::new(seed, i);
        let data = program_bytes(seed, i);
        let case = random_graph::build(&data);
        running.of(&case);
        let reference = random_graph::run(&case, Backend::Interp, false);
        for (backend, optimize) in [
            (Backend::Cpu, false),
            (Backend::Cpu, true),
            (Backend::Interp, true),
        ] {
            let got = random_graph::run(&case, backend, optimize);
            if let Err(e) = random_graph::same_outcome(&case, &reference, &got, !optimize) {
                let first = random_graph::first_difference(&case, backend);
                panic!(
                    "{}\n{first}",
                    describe(
                        &case,
                        seed,
                        i,
                        &format!("{backend} (optimize {optimize}): {e}")
                    )
                );
            }
        }
    }
}

#[test]
fn random_programs_agree_0() {
    run_shard(0)
}

#[test]
fn random_programs_agree_1() {
    run_shard(1)
}

#[test]
fn random_programs_agree_2() {
    run_shard(2)
}

#[test]
fn random_programs_agree_3() {
    run_shard(3)
}

/// The random programs with a shared variable, called from 4 threads while the state is read
/// again and again, on the CPU backend (optimized: in-place updates, fused GEMM steps) and the
/// interpreter: every state read is one that calls made one at a time leave, in order, and
/// the last is the state after all the calls.
#[test]
fn random_programs_keep_their_state_whole_under_threads() {
    if skipped_under_interp() {
        return;
    }
    let base = common::random_seed("random programs under threads");
    let seed = base ^ 0x7ead;
    let n = cases_per_shard(600) * SHARDS;
    eprintln!("random programs under threads: up to {n} programs");
    let (mut ran, mut read) = (0, 0);
    let only = only_program();
    for i in (0..n).filter(|&i| only.is_none_or(|o| o == i)) {
        let case = random_graph::build(&program_bytes(seed, i));
        if case.shared.is_none() || case.edges > 0 {
            continue;
        }
        for backend in [Backend::Cpu, Backend::Interp] {
            match random_graph::whole_state_under_threads(&case, backend, 4, 6) {
                Ok(k) => read += k,
                Err(e) => panic!("{}", describe(&case, base, i, &e)),
            }
        }
        ran += 1;
    }
    eprintln!("{ran} programs under threads, {read} states read, none torn");
    assert!(ran > 0 || n < 20, "no random program had a shared variable");
}

/// The random programs through `Backend::Gpu`, optimized and not, against the interpreter: on
/// a real GPU, or on a host device without one (skipped without the `gpu` feature; this test
/// binary's other tests do not use `Backend::Gpu`, so the host device changes nothing else). Reductions combine in a
/// tree on the GPU, so results are compared within the tolerances, not bit for bit.
#[test]
fn random_programs_agree_on_the_gpu() {
    // Without a GPU, the GPU runtime on a host device (the kernels compiled for the CPU):
    // everything but the CUDA calls.
    #[cfg(feature = "gpu")]
    if let Err(e) = kiln::jit_ptx::cuda::device() {
        eprintln!("no GPU ({e}): the GPU runtime on a host device");
        kiln::jit_ptx::cuda::use_host_device();
    }
    #[cfg(not(feature = "gpu"))]
    {
        eprintln!("skipped: built without the gpu feature");
        return;
    }
    #[allow(unreachable_code)]
    {
        let seed = common::random_seed("random programs on the GPU");
        let n = cases_per_shard(40) * SHARDS;
        eprintln!("random programs on the GPU: {n} programs");
        let only = only_program();
        let mut ran = 0;
        for i in (0..n).filter(|&i| only.is_none_or(|o| o == i)) {
            let mut running = Running::new(seed, i);
            let case = random_graph::build(&program_bytes(seed, i));
            running.of(&case);
            let reference = random_graph::run(&case, Backend::Interp, false);
            for optimize in [false, true] {
                // Every program compiles for the GPU (f64 `pow` included), and refuses only
                // what the interpreter refuses.
                let got = random_graph::run(&case, Backend::Gpu, optimize);
                ran += 1;
                if ran % 20 == 0 {
                    eprintln!("{ran} runs agree");
                }
                if let Err(e) = random_graph::same_outcome(&case, &reference, &got, false) {
                    panic!(
                        "{}",
                        describe(&case, seed, i, &format!("gpu (optimize {optimize}): {e}"))
                    );
                }
            }
        }
        eprintln!("random programs on the GPU: {ran} runs agree");
        assert!(ran > 0);
    }
}

/// Ahead-of-time objects of the random programs whose shapes are all known, linked into one
/// library per batch and called in this process, against the interpreter, and bit for bit
/// against the CPU backend (the same optimized function, the same generated kernels).
#[test]
fn random_programs_agree_ahead_of_time() {
    if skipped_under_interp() {
        return;
    }
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    // Programs of their own (`KILN_RANDOM_SEED` replays them: `base` is what failures print).
    let base = common::random_seed("random programs ahead of time");
    let seed = base ^ 0xa07;
    let n = cases_per_shard(400) * SHARDS;
    eprintln!("random programs ahead of time: up to {n} programs");
    type Item = (
        u64,
        Case,
        kiln::aot::AotArtifact,
        Vec<kiln::Tensor>,
        Vec<kiln::Tensor>,
    );
    let mut batch: Vec<Item> = Vec::new();
    let (mut compiled, mut with_ifelse, mut with_runtime) = (0, 0, 0);
    let flush = |batch: &mut Vec<Item>| {
        if batch.is_empty() {
            return;
        }
        let dir = std::env::temp_dir().join(format!(
            "kiln-aot-random-{}-{}",
            std::process::id(),
            batch[0].0
        ));
        let arts: Vec<&kiln::aot::AotArtifact> = batch.iter().map(|b| &b.2).collect();
        let lib = aot_lib::link(&arts, &dir).unwrap_or_else(|e| panic!("linking: {e}"));
        for (i, case, art, want, jit) in batch.drain(..) {
            let mut running = Running::new(base, i);
            running.of(&case);
            let mut inputs: Vec<kiln::Tensor> = case.views().iter().map(|v| v.to_owned()).collect();
            // The entry point takes a shared variable's value and returns its new one, the
            // caller keeping the state: two calls, as the other backends run.
            let call = |inputs: &[kiln::Tensor]| {
                lib.call(&art, inputs)
                    .unwrap_or_else(|e| panic!("{}", describe(&case, base, i, &e)))
            };
            let shared = case
                .shared
                .as_ref()
                .filter(|_| art.inputs.len() > inputs.len());
            if let Some(s) = shared {
                inputs.push(s.initial.clone());
                let first = call(&inputs);
                *inputs.last_mut().unwrap() = first.last().unwrap().clone();
            }
            let got = call(&inputs);
            if let Err(e) = random_graph::compare(&case, &want, &got, false) {
                panic!("{}", describe(&case, base, i, &format!("aot: {e}")));
            }
            // The JIT runs the same optimized function through the same kernels: every
            // output, exact or not, has the same bits.
            for (o, (a, j)) in got.iter().zip(&jit).enumerate() {
                // Compared as exact values, bit for bit (signed zeros too; NaN matches NaN).
                if let Err(e) = random_graph::agree(a, j, true, true, case.coarsest, 0.0) {
                    panic!(
                        "{}",
                        describe(&case, base, i, &format!("aot vs cpu, output {o}: {e}"))
                    );
                }
            }
        }
    };
    let only = only_program();
    for i in (0..n).filter(|&i| only.is_none_or(|o| o == i)) {
        let mut running = Running::new(base, i);
        let data = program_bytes(seed, i);
        let case = random_graph::build(&data);
        running.of(&case);
        // Ahead of time a scan is refused by name (tested in tests/scan.rs).
        if !case.static_shapes || case.has_scan {
            continue;
        }
        // A program at the edges of sizes that the interpreter refuses: the in-process
        // backends are checked to refuse it too; ahead of time it is not run.
        let want = match random_graph::run(&case, Backend::Interp, false) {
            Ok(want) => want,
            Err(_) if case.edges > 0 => continue,
            Err(e) => panic!("{}", describe(&case, base, i, &e)),
        };
        let ins: Vec<&kiln::Var> = case.inputs.iter().collect();
        let outs: Vec<&kiln::Var> = case.outputs.iter().collect();
        // Every other program calls kiln's runtime library (products, math): the JIT's GEMM
        // and host math, so the same bits.
        let options = kiln::aot::AotOptions {
            symbol: Some(format!("random_{i}")),
            runtime: i % 2 == 1,
            optimizer: kiln::rewrite::OptimizeOptions {
                dump: Default::default(),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut builder = kiln::function(&ins, &outs);
        if let Some(s) = &case.shared {
            builder = builder.update(&s.var, &s.update);
        }
        let art = match builder.aot(&options) {
            Ok(a) => a,
            // An object has no scratch for some results at the edges (a padded copy near
            // 2^62): a refusal of one line.
            Err(e) if case.edges > 0 && e.to_string().lines().count() == 1 => continue,
            Err(e) => panic!("{}", describe(&case, base, i, &format!("aot compile: {e}"))),
        };
        let jit = random_graph::run(&case, Backend::Cpu, true)
            .unwrap_or_else(|e| panic!("{}", describe(&case, base, i, &e)));
        with_ifelse += case.has_ifelse as usize;
        with_runtime += !art.runtime.is_empty() as usize;
        batch.push((i, case, art, want, jit));
        compiled += 1;
        if batch.len() == 100 {
            flush(&mut batch);
        }
    }
    flush(&mut batch);
    eprintln!(
        "{compiled} programs ran ahead of time, {with_ifelse} of them with an ifelse, \
         {with_runtime} calling kiln's runtime library"
    );
    assert!(
        compiled > 0 || n < 20 || only.is_some(),
        "no random program was compiled ahead of time"
    );
    assert!(
        with_runtime > 0 || n < 200 || only.is_some(),
        "no random program called kiln's runtime library"
    );
}

/// The generator produces what its docs promise: a generator that cannot produce a case cannot
/// find its bug.
#[test]
fn the_generator_covers_ranks_broadcasts_layouts_dtypes_and_ops() {
    use std::collections::BTreeSet;
    let mut ranks = BTreeSet::new();
    let mut dtypes = BTreeSet::new();
    let mut layouts = BTreeSet::new();
    let mut ops = BTreeSet::new();
    let (mut unknown_dims, mut missing_axes, mut ones, mut shared) = (0, 0, 0, 0);
    let (mut edges, mut extremes, mut unknown_edges, mut refused) = (0, 0, 0, 0);
    for i in 0..2000 {
        let case = random_graph::build(&program_bytes(7, i));
        ranks.insert(case.inputs[0].rank());
        for (v, a) in case.inputs.iter().zip(&case.args) {
            dtypes.insert(format!("{}", v.dtype()));
            let kind = format!("{:?}", a.layout);
            layouts.insert(kind.split('(').next().unwrap_or("").to_string());
            unknown_dims += v.ty().shape.iter().filter(|d| d.is_none()).count();
            missing_axes += (v.rank() < case.inputs[0].rank()) as usize;
            ones += a.shape.contains(&1) as usize;
        }
        shared += case.shared.is_some() as usize;
        edges += case.edges;
        extremes += case.extremes;
        refused += case.refused;
        let edge_outputs = &case.outputs[case.outputs.len() - case.edges..];
        unknown_edges += (edge_outputs.iter())
            .filter(|v| v.ty().shape.iter().any(|d| d.is_none()))
            .count();
        let text = random_graph::text(&case);
        for line in text.lines() {
            if let Some((_, rhs)) = line.split_once(" = ") {
                if let Some(op) = rhs.split_whitespace().next() {
                    ops.insert(op.to_string());
                }
            }
        }
    }
    assert_eq!(ranks, (0..=5).collect(), "ranks");
    assert_eq!(dtypes.len(), 7, "dtypes: {dtypes:?}");
    for l in [
        "Plain",
        "Permuted",
        "Reversed",
        "Stepped",
        "Window",
        "Broadcast",
    ] {
        assert!(layouts.contains(l), "layout {l}: {layouts:?}");
    }
    for op in [
        "add",
        "sub",
        "mul",
        "div",
        "maximum",
        "minimum",
        "floordiv",
        "mod",
        "pow",
        "exp",
        "tanh",
        "neg",
        "abs",
        "not",
        "and",
        "or",
        "gt",
        "eq",
        "select",
        "cast",
        "sum",
        "prod",
        "max",
        "min",
        "mean",
        "argmax",
        "argmin",
        "all",
        "any",
        "transpose",
        "reshape",
        "broadcast_to",
        "expand_dims",
        "squeeze",
        "slice",
        "concat",
        "matmul",
        "ifelse",
        "scan",
        "const",
        "uniform",
        "normal",
        "bernoulli",
    ] {
        assert!(ops.contains(op), "op {op}: {ops:?}");
    }
    // The ops only the steps at the edges of sizes make.
    let edge_ops = [
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "one_hot",
        "take",
        "arange",
    ];
    for &op in edge_ops.iter().filter(|_| random_graph::edges_enabled()) {
        assert!(ops.contains(op), "op {op}: {ops:?}");
    }
    assert!(unknown_dims > 100 && missing_axes > 100 && ones > 100);
    assert!(shared > 100, "programs with a shared variable: {shared}");
    // Steps at the edges of sizes: with extreme attributes, sized only at run time, and
    // refused by the type check.
    assert!(
        !random_graph::edges_enabled()
            || edges > 200 && extremes > 50 && unknown_edges > 20 && refused > 100,
        "edge steps {edges}, extreme attributes {extremes}, with `?` dims {unknown_edges}, \
         refused by the type check {refused}"
    );
}
