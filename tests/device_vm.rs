//! The VM's copying paths (the ones the GPU runtime's values take) against the interpreter:
//! every `run:` directive of the file-test corpus, with the optimizer off and on, each plan
//! lowered plainly and with the CPU's lowering choices (row groups, fused updates, folded
//! transposes and broadcasts), run on `HostArrays` (a device whose arrays are copied at every
//! crossing, every step through `perform` on copies, nothing in place) must give the
//! interpreter's outputs (the host device: arrays where they are, steps in place, buffers
//! reused) bit for bit, or fail where it fails.

mod common;
use common::{kir_files, split_top};
use kiln::ir::text::{parse, parse_literal};
use kiln::lower::{lower_with, LowerOptions};
use kiln::runtime::device::{run_plan, HostArrays};
use kiln::runtime::vm::VmState;
use kiln::{CompileOptions, Tensor};
use std::path::Path;
use std::sync::Arc;

#[test]
fn the_device_vm_runs_the_corpus_as_the_interpreter_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    kir_files(&root, &mut files);
    files.sort();
    let (mut runs, mut errors, mut failures) = (0, 0, Vec::new());
    for path in &files {
        let src = std::fs::read_to_string(path).unwrap();
        let Ok(mut funcs) = parse("corpus.kir", &src) else {
            continue;
        };
        let func = funcs.remove(0);
        let specs = src
            .lines()
            .filter_map(|l| l.trim().strip_prefix(';')?.trim().strip_prefix("run"))
            .filter_map(|r| r.split_once(':').map(|(_, r)| r.trim().to_string()));
        for spec in specs {
            let Some((ins, _)) = spec.split_once("->") else {
                continue;
            };
            let inputs: Option<Vec<Tensor>> = split_top(ins)
                .iter()
                .zip(&func.params)
                .map(|(s, &p)| parse_literal(s, func.ty(p)).ok())
                .collect();
            let Some(inputs) = inputs.filter(|i| i.len() == func.params.len()) else {
                continue;
            };
            for optimize in [false, true] {
                let options = CompileOptions {
                    optimize,
                    ..CompileOptions::default()
                };
                let opt = kiln::compile::optimize(func.clone(), &options);
                let want = kiln::runtime::interp::run_func(&opt, inputs.clone());
                for lowering in [LowerOptions::default(), LowerOptions::all()] {
                    let plan = lower_with(&opt, lowering);
                    runs += 1;
                    let on: Vec<Arc<Tensor>> = inputs.iter().cloned().map(Arc::new).collect();
                    let mut state = VmState::default();
                    let got = run_plan(&HostArrays, &opt, &plan, &mut state, &on);
                    let what = format!("{} `{spec}` (optimize {optimize})", path.display());
                    match (&want, got) {
                        (Ok(w), Ok(g)) => {
                            let same =
                                w.len() == g.len() && w.iter().zip(&g).all(|(w, g)| w.bit_eq(g));
                            if !same {
                                failures.push(format!("{what}: {w:?} != {g:?}"));
                            }
                        }
                        (Err(_), Err(_)) => errors += 1,
                        (w, g) => failures.push(format!("{what}: {w:?} vs {:?}", g.map(|_| ()))),
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The corpus reaches the VM: hundreds of runs, errors among them.
    eprintln!("{runs} runs, {errors} errors");
    assert!(runs > 400 && errors > 10, "{runs} runs, {errors} errors");
}
