//! The file-test harness (in the manner of Cranelift's filetests): every `.kir` file under
//! `tests/filetests/` is a test, driven by directives in its comments. See
//! `tests/filetests/README.md` for the directives. A new test is a new file.

use kiln::ir::text::{parse, parse_literal, print_func};
use kiln::ir::Func;
use kiln::{compile_func, Backend, CompileOptions};

mod common;
use common::{close, kir_files, split_top};
use std::path::Path;

fn run_directive(func: &Func, spec: &str, backend: Backend, optimize: bool) -> Result<(), String> {
    let (ins, outs) = spec.split_once("->").ok_or("a run directive needs `->`")?;
    let inputs = split_top(ins);
    if inputs.len() != func.params.len() {
        return Err(format!(
            "@{} takes {} inputs, the directive gives {}",
            func.name,
            func.params.len(),
            inputs.len()
        ));
    }
    let tensors = inputs
        .iter()
        .zip(&func.params)
        .map(|(s, &p)| parse_literal(s, func.ty(p)).map_err(|e| format!("input `{s}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let options = CompileOptions {
        backend: Some(backend),
        optimize,
        ..CompileOptions::default()
    };
    let f = compile_func(func.clone(), &options).map_err(|e| e.to_string())?;
    let refs: Vec<kiln::TensorRef> = tensors.iter().map(|t| t.view()).collect();
    let result = f.call(&refs);
    let outs = outs.trim();
    if let Some(pat) = outs.strip_prefix("error:") {
        return match result {
            Err(e) if e.to_string().contains(pat.trim()) => Ok(()),
            Err(e) => Err(format!(
                "expected an error containing `{}`, got `{e}`",
                pat.trim()
            )),
            Ok(v) => Err(format!(
                "expected an error containing `{}`, got {v:?}",
                pat.trim()
            )),
        };
    }
    let got = result.map_err(|e| e.to_string())?;
    let wants = split_top(outs);
    if wants.len() != got.len() {
        return Err(format!(
            "{} outputs, the directive expects {}",
            got.len(),
            wants.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(&wants).enumerate() {
        let want = parse_literal(w, func.ty(func.outputs[i]))
            .map_err(|e| format!("expected output `{w}`: {e}"))?;
        if !close(g, &want) {
            return Err(format!(
                "output {i}:\n  expected {}\n  got      {}",
                kiln::ir::text::literal(&want),
                kiln::ir::text::literal(g)
            ));
        }
    }
    Ok(())
}

/// `; check:` / `; nextln:` patterns against `text`, in order.
fn check_patterns(text: &str, checks: &[(String, String)]) -> Result<(), String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut at = 0usize;
    let mut last: Option<usize> = None;
    for (kind, pat) in checks {
        let found = if kind == "nextln" {
            let next = last.map(|l| l + 1).unwrap_or(0);
            lines
                .get(next)
                .filter(|l| l.contains(pat.as_str()))
                .map(|_| next)
        } else {
            (at..lines.len()).find(|&i| lines[i].contains(pat.as_str()))
        };
        match found {
            Some(i) => {
                last = Some(i);
                at = i + 1;
            }
            None => return Err(format!("`; {kind}: {pat}` not found in:\n{text}")),
        }
    }
    Ok(())
}

fn run_file(path: &Path, backend: Backend) -> Result<usize, String> {
    let src = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    let mut checks = Vec::new();
    let mut error = None;
    let mut pass = None;
    for line in src.lines() {
        let Some(d) = line.trim().strip_prefix(';') else {
            continue;
        };
        let d = d.trim();
        if let Some(r) = d.strip_prefix("run:") {
            runs.push((false, r.trim().to_string()));
        } else if let Some(r) = d.strip_prefix("run(opt):") {
            runs.push((true, r.trim().to_string()));
        } else if let Some(c) = d.strip_prefix("check:") {
            checks.push(("check".to_string(), c.trim().to_string()));
        } else if let Some(c) = d.strip_prefix("nextln:") {
            checks.push(("nextln".to_string(), c.trim().to_string()));
        } else if let Some(e) = d.strip_prefix("error:") {
            error = Some(e.trim().to_string());
        } else if let Some(p) = d.strip_prefix("pass:") {
            pass = Some(p.trim().to_string());
        }
    }
    let parsed = parse(&path.display().to_string(), &src);
    if let Some(pat) = error {
        return match parsed {
            Err(es) if es.iter().any(|e| e.to_string().contains(&pat)) => Ok(1),
            Err(es) => Err(format!(
                "expected an error containing `{pat}`, got: {}",
                es.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(" | ")
            )),
            Ok(_) => Err(format!(
                "expected an error containing `{pat}`, but the file parsed"
            )),
        };
    }
    let funcs = parsed.map_err(|es| {
        es.iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    let func = &funcs[0];
    let text = print_func(func);
    // The printed form is a fixed point of parse and print.
    let again = parse("reprinted", &text)
        .map_err(|es| format!("the printed form does not parse: {}", es[0]))?;
    if print_func(&again[0]) != text {
        return Err(format!(
            "print(parse(print(f))) differs from print(f):\n{text}\n---\n{}",
            print_func(&again[0])
        ));
    }
    check_plan_text(func)?;
    if !checks.is_empty() {
        let target = match pass.as_deref() {
            None | Some("print") => text.clone(),
            Some(p) if p.starts_with("grad") => {
                let wrt: Vec<&str> = p["grad".len()..]
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                print_func(&kiln::grad::grad_func(func, 0, &wrt).map_err(|e| e.to_string())?)
            }
            // The e-graph pass alone: merging, folding, the rules, extraction.
            Some("rules") | Some("egraph") => print_func(&kiln::rewrite::simplify(func)),
            Some("egraph fast-math") => {
                let options = kiln::rewrite::egraph::Options {
                    fast_math: true,
                    ..Default::default()
                };
                print_func(&kiln::rewrite::egraph::run(func, &options).0)
            }
            Some("opt") => print_func(&kiln::compile::optimize(
                func.clone(),
                &CompileOptions::default(),
            )),
            // The plan of the optimized function: plain (the reference backend's), or with
            // every lowering choice the CPU backend makes (`schedule all`).
            Some(p @ ("schedule" | "schedule all")) => {
                let opt = kiln::compile::optimize(func.clone(), &CompileOptions::default());
                let opts = if p == "schedule all" {
                    kiln::lower::LowerOptions::all()
                } else {
                    kiln::lower::LowerOptions::default()
                };
                kiln::lower::lower_with(&opt, opts).to_string()
            }
            // The whole optimizer, with the named parameters donated to the in-place pass.
            Some(p) if p.starts_with("inplace") => {
                let names: Vec<&str> = p["inplace".len()..]
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                let donated: Vec<kiln::ir::Value> = func
                    .params
                    .iter()
                    .copied()
                    .filter(|&v| func.name_of(v).is_some_and(|n| names.contains(&n)))
                    .collect();
                if donated.len() != names.len() {
                    return Err(format!("`pass: {p}` names a parameter the function lacks"));
                }
                let options = CompileOptions::default();
                print_func(&kiln::compile::optimize_donating(func.clone(), &options, &donated).0)
            }
            Some(other) => return Err(format!("unknown pass `{other}`")),
        };
        check_patterns(&target, &checks)?;
    }
    // Every run gives the same values with the optimizer on and off.
    // ... and on the CPU backend, which must agree with the interpreter (the oracle).
    // `run(opt):` runs only with the optimizer, for rules that make a result better.
    for (only_opt, r) in &runs {
        for (b, optimize) in [
            (backend, false),
            (backend, true),
            (Backend::Cpu, false),
            (Backend::Cpu, true),
        ] {
            if *only_opt && !optimize {
                continue;
            }
            run_directive(func, r, b, optimize)
                .map_err(|e| format!("run `{r}` ({b}, optimize: {optimize}): {e}"))?;
        }
    }
    Ok(runs.len() + checks.len() + 1)
}

/// The plan's text (the `schedule` dump) parses back to the plan it was printed from, with and
/// without the CPU backend's lowering choices.
fn check_plan_text(func: &kiln::ir::Func) -> Result<(), String> {
    let opt = kiln::compile::optimize(func.clone(), &CompileOptions::default());
    for opts in [
        kiln::lower::LowerOptions::default(),
        kiln::lower::LowerOptions::all(),
    ] {
        let plan = kiln::lower::lower_with(&opt, opts);
        let text = plan.to_string();
        let mut back = kiln::lower::parse_plan("schedule", &text, &opt)
            .map_err(|e| format!("the schedule does not parse back: {e}\n{text}"))?;
        back.serial = plan.serial;
        if format!("{back:?}") != format!("{plan:?}") {
            return Err(format!(
                "the schedule parses back to another plan:\n{text}\n---\n{back}"
            ));
        }
    }
    Ok(())
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    kir_files(&root, &mut files);
    files.sort();
    assert!(files.len() >= 60, "the corpus has {} files", files.len());
    let mut failures = Vec::new();
    let mut checks = 0;
    for f in &files {
        match run_file(f, Backend::Interp) {
            Ok(n) => checks += n,
            Err(e) => failures.push(format!(
                "FAIL {}: {e}",
                f.strip_prefix(&root).unwrap_or(f).display()
            )),
        }
    }
    for f in &failures {
        eprintln!("{f}\n");
    }
    println!(
        "{} file tests, {checks} directives, {} failed",
        files.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed",
        failures.len(),
        files.len()
    );
}
