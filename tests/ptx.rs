//! The GPU backend's code generator on a machine without a GPU: PTX for every function of the
//! file-test corpus, for sm_80 and sm_90, checked for what can be checked without `ptxas`
//! (header, one entry per kernel step of the plan, balanced braces, no call to anything
//! undefined, and the LLVM module parsed back and verified), and the properties the backend
//! promises (no LLVM math intrinsics, guarded integer division, shuffles and shared memory in
//! reductions, the dump stages, a clean error without a CUDA driver).
#![cfg(feature = "gpu")]

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use kiln::dump::DumpOptions;
use kiln::ir::text::parse;
use kiln::ir::{Func, ReduceOp};
use kiln::jit_ptx::{compile_ptx, KernelKind, PtxModule};
use kiln::lower::Kernel;
use kiln::CompileOptions;
use std::path::{Path, PathBuf};

/// Corpus files whose functions use an op the PTX backend does not lower yet; each must fail
/// with an error naming the op, and must be taken off this list once it is lowered.
/// (Empty since f64 `pow` is lowered: every op of the corpus has a GPU lowering.)
const NOT_LOWERED_YET: &[(&str, &str)] = &[];

fn optimized(src: &str) -> Func {
    let f = parse("t.kir", src).unwrap().remove(0);
    kiln::compile::optimize(f, &CompileOptions::default())
}

fn ptx(src: &str, arch: &str) -> PtxModule {
    compile_ptx(&optimized(src), arch, &DumpOptions::default()).unwrap()
}

/// Corpus files whose row groups the GPU's row kernel does not take, so that their members
/// stay kernels of their own: why.
const ROWS_APART: &[(&str, &str)] = &[
    ("ops/reduce_empty.kir", "empty rows"),
    ("rewrite/rules_logsumexp_not_empty_axes.kir", "empty rows"),
    (
        "rewrite/rules_logsumexp_not_unknown_axes.kir",
        "a row of unknown length",
    ),
];

/// The steps of the GPU's plan that must be kernels: maps, reductions (argmax/argmin of
/// halves aside), and row groups (one kernel each, in place of their members', unless
/// `groups_apart`).
fn kernel_steps(func: &Func, groups_apart: bool) -> usize {
    let plan = kiln::jit_ptx::plan_of(func);
    let steps = plan.all_steps();
    let grouped: Vec<kiln::lower::StepId> = steps
        .iter()
        .filter_map(|s| match &s.kernel {
            Kernel::Rows { steps, .. } if !groups_apart => Some(steps.iter().map(|m| m.id)),
            _ => None,
        })
        .flatten()
        .collect();
    steps
        .iter()
        .filter(|s| !grouped.contains(&s.id))
        .filter(|s| match (&s.kernel, &s.op) {
            (Kernel::Rows { .. }, _) => !groups_apart,
            (Kernel::Map { .. }, _) => true,
            // Arg-reductions of halves run on the host.
            (Kernel::Reduce { op, program, .. }, _) => {
                let half = matches!(
                    program.insts[program.outputs[0]].dtype,
                    kiln::DType::F16 | kiln::DType::BF16
                );
                !(half && matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin))
            }
            // Uniform, normal and Bernoulli ops.
            (Kernel::Perform, kiln::ir::Op::Random { .. }) => true,
            // Gathers, scatters, one-hots, running sums and products, convolutions, concat.
            (
                Kernel::Perform,
                kiln::ir::Op::Take { .. }
                | kiln::ir::Op::TakeAlongAxis { .. }
                | kiln::ir::Op::Cumsum { .. }
                | kiln::ir::Op::Cumprod { .. }
                | kiln::ir::Op::CumprodGrad { .. }
                | kiln::ir::Op::Sort { .. }
                | kiln::ir::Op::Argsort { .. }
                | kiln::ir::Op::OneHot { .. }
                | kiln::ir::Op::ScatterAdd { .. }
                | kiln::ir::Op::ScatterSet { .. }
                | kiln::ir::Op::Conv2d(_)
                | kiln::ir::Op::Pool2d(_)
                | kiln::ir::Op::Pool2dGrad(_)
                | kiln::ir::Op::Conv2dGradImage { .. }
                | kiln::ir::Op::Conv2dGradFilter { .. }
                | kiln::ir::Op::Concat { .. },
            ) => true,
            _ => false,
        })
        .count()
}

/// PTX text without `//` comments.
fn code(ptx: &str) -> String {
    ptx.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks one module as PTX text and as LLVM IR; returns a description of the first problem.
fn check_module(m: &PtxModule, arch: &str, kernels: usize) -> Result<(), String> {
    let text = code(&m.ptx);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // Header: `.version X.Y`, `.target sm_XX`, `.address_size 64`, in that order, first.
    let version = lines.first().copied().unwrap_or("");
    let v = version.strip_prefix(".version ").unwrap_or("");
    if !(v.split('.').count() == 2 && v.split('.').all(|p| p.parse::<u32>().is_ok())) {
        return Err(format!("first line is not `.version X.Y`: {version:?}"));
    }
    if lines.get(1) != Some(&format!(".target {arch}").as_str()) {
        return Err(format!(
            "second line is not `.target {arch}`: {:?}",
            lines.get(1)
        ));
    }
    if lines.get(2) != Some(&".address_size 64") {
        return Err(format!(
            "third line is not `.address_size 64`: {:?}",
            lines.get(2)
        ));
    }
    // One entry per kernel step, with the names the module reports.
    let entries: Vec<String> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(".visible .entry "))
        .map(|l| l.split('(').next().unwrap_or("").trim().to_string())
        .collect();
    if entries.len() != kernels || m.kernels.len() != kernels {
        return Err(format!(
            "{} entries and {} kernels reported for {kernels} kernel steps",
            entries.len(),
            m.kernels.len()
        ));
    }
    for k in &m.kernels {
        if !entries.contains(&k.name) {
            return Err(format!("no .entry {}", k.name));
        }
    }
    // Balanced braces and parentheses, never closing more than was opened.
    for (open, close) in [('{', '}'), ('(', ')')] {
        let mut depth = 0i64;
        for c in text.chars() {
            if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced `{close}`"));
                }
            }
        }
        if depth != 0 {
            return Err(format!("unbalanced `{open}`: depth {depth} at the end"));
        }
    }
    // Every call names a function defined in the module (there is no linker for PTX here).
    let defined: Vec<&str> = lines
        .iter()
        .filter_map(|l| {
            l.strip_prefix(".func ")
                .or(l.strip_prefix(".visible .func "))
        })
        .map(|l| {
            // `.func (.param .b32 func_retval0) name(...)`: the name follows the return
            // parameter, where there is one.
            let l = l.trim_start();
            let l = match l.strip_prefix('(') {
                Some(r) => r.split_once(')').map_or("", |(_, rest)| rest),
                None => l,
            };
            l.trim_start().split(['(', ' ']).next().unwrap_or("")
        })
        .collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("call") {
            // A call statement may run over several lines (LLVM puts each operand on one).
            let end = (i..lines.len())
                .find(|&k| lines[k].contains(';'))
                .unwrap_or(i);
            let statement = lines[i..=end].join(" ");
            let callee = statement
                .split(',')
                .map(str::trim)
                .find(|t| !t.is_empty() && !t.starts_with('(') && !t.starts_with("call"))
                .unwrap_or(l);
            if !defined
                .iter()
                .any(|d| callee.starts_with(d) && !d.is_empty())
            {
                return Err(format!("call to an undefined function: {l}"));
            }
        }
    }
    if text.contains(".extern .func") {
        return Err("the PTX declares an external function".into());
    }
    // No generic math intrinsic reaches NVPTX (they abort it; see docs/gpu.md).
    for ir in [&m.llvm, &m.llvm_optimized] {
        for f in [
            "exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan", "pow", "tanh",
        ] {
            if ir.contains(&format!("@llvm.{f}.f")) {
                return Err(format!("LLVM IR calls llvm.{f}"));
            }
        }
    }
    // The optimized LLVM IR parses back and verifies on its own.
    let ctx = Context::create();
    let buf = MemoryBuffer::create_from_memory_range_copy(m.llvm_optimized.as_bytes(), "m");
    let module = ctx
        .create_module_from_ir(buf)
        .map_err(|e| format!("the optimized LLVM IR does not parse: {e}"))?;
    module
        .verify()
        .map_err(|e| format!("the optimized LLVM IR does not verify: {e}"))?;
    Ok(())
}

/// NVIDIA's assembler: `KILN_PTXAS`, else `ptxas` on the PATH (`.ci/run` installs it from the
/// Python package `nvidia-cuda-nvcc-cu12`). Without one the PTX is checked by the rules above
/// alone, unless `KILN_REQUIRE_PTXAS` is set, which makes its absence a failure.
fn ptxas() -> Option<PathBuf> {
    let p = std::env::var_os("KILN_PTXAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ptxas"));
    let found = std::process::Command::new(&p)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(p);
    }
    assert!(
        std::env::var_os("KILN_REQUIRE_PTXAS").is_none(),
        "KILN_REQUIRE_PTXAS is set but {} does not run",
        p.display()
    );
    eprintln!("no ptxas (set KILN_PTXAS): the PTX is not assembled");
    None
}

/// Assembles `ptx` for `arch` with `ptxas`, failing on any error or warning.
fn assemble(ptxas: &Path, ptx: &str, arch: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("kiln-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join("m.ptx");
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(ptxas)
        .args(["--warning-as-error", "-arch", arch, "-o"])
        .arg(dir.join("m.cubin"))
        .arg(&src)
        .output()
        .map_err(|e| e.to_string())?;
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if out.status.success() && msg.is_empty() {
        Ok(())
    } else {
        Err(msg)
    }
}

#[test]
fn the_whole_corpus_gives_well_formed_ptx_for_sm_80_and_sm_90() {
    let ptxas = ptxas();
    if let Some(p) = &ptxas {
        // The assembler check can fail: a module with a register that is never declared.
        let broken = ptx(EXP, "sm_90")
            .ptx
            .replacen("ret;", "mov.u32 %undeclared, 1;\n\tret;", 1);
        assert!(assemble(p, &broken, "sm_90").is_err());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    kir_files(&root, &mut files);
    files.sort();
    assert!(files.len() >= 100, "the corpus has {} files", files.len());
    let (mut modules, mut kernels, mut failures) = (0, 0, Vec::new());
    let mut not_lowered = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let src = std::fs::read_to_string(path).unwrap();
        // Files that do not parse or verify are the error tests of the corpus.
        let Ok(funcs) = parse(&rel, &src) else {
            continue;
        };
        let func = funcs.into_iter().next().unwrap();
        if kiln::ir::verify::verify(&func).is_err() {
            continue;
        }
        let func = kiln::compile::optimize(func, &CompileOptions::default());
        let expected = kernel_steps(&func, ROWS_APART.iter().any(|(f, _)| *f == rel));
        for arch in ["sm_80", "sm_90"] {
            match compile_ptx(&func, arch, &DumpOptions::default()) {
                Ok(m) => {
                    if let Err(e) = check_module(&m, arch, expected) {
                        failures.push(format!("{rel} ({arch}): {e}"));
                    }
                    if let Some(p) = &ptxas {
                        if let Err(e) = assemble(p, &m.ptx, arch) {
                            failures.push(format!("{rel} ({arch}): ptxas: {e}"));
                        }
                    }
                    modules += 1;
                    kernels += m.kernels.len();
                }
                Err(e) => match NOT_LOWERED_YET.iter().find(|(f, _)| *f == rel) {
                    Some((_, op)) if e.to_string().contains(op) => not_lowered.push(rel.clone()),
                    _ => failures.push(format!("{rel} ({arch}): {e}")),
                },
            }
        }
    }
    for (f, _) in NOT_LOWERED_YET {
        if not_lowered.iter().filter(|n| n == f).count() != 2 {
            failures.push(format!(
                "{f} is listed as not lowered yet but compiled (update the list)"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        modules >= 200 && kernels >= 300,
        "{modules} modules, {kernels} kernels"
    );
    eprintln!(
        "ptx corpus: {modules} modules, {kernels} kernels, {} not lowered yet",
        NOT_LOWERED_YET.len()
    );
}

const EXP: &str = "func @e(%x: f32[?, 8]) -> (f32[?, 8]) {\n  %y = exp %x\n  return %y\n}\n";

#[test]
fn exp_is_the_shared_polynomial_not_an_llvm_intrinsic() {
    let m = ptx(EXP, "sm_90");
    assert!(!m.llvm.contains("llvm.exp"), "{}", m.llvm);
    assert!(m.llvm.contains("@llvm.fma.f32"), "{}", m.llvm);
    let code = code(&m.ptx);
    assert!(code.contains("fma.rn.f32"), "{}", m.ptx);
    // No hardware approximation stands in for it.
    assert!(!code.contains("ex2.approx"), "{}", m.ptx);
    // Every f32 add, sub and mul is rounded on its own (`.rn`), so ptxas cannot contract it
    // into an fma: the operation sequence is the CPU backend's.
    for l in code.lines().map(str::trim) {
        for op in ["add.f32", "sub.f32", "mul.f32"] {
            assert!(!l.starts_with(op), "unrounded `{l}` in\n{}", m.ptx);
        }
    }
    assert_eq!(m.kernels.len(), 1);
    assert_eq!(m.kernels[0].kind, KernelKind::Map);
}

#[test]
fn every_transcendental_in_both_precisions_avoids_llvm_math() {
    for f in [
        "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid", "erf",
    ] {
        for t in ["f32", "f64"] {
            let src =
                format!("func @m(%x: {t}[4]) -> ({t}[4]) {{\n  %y = {f} %x\n  return %y\n}}\n");
            let m = ptx(&src, "sm_80");
            for ir in [&m.llvm, &m.llvm_optimized] {
                assert!(!ir.contains(&format!("@llvm.{f}")), "{f} {t}");
                assert!(
                    !ir.contains("@llvm.exp") && !ir.contains("@llvm.log."),
                    "{f} {t}"
                );
            }
            assert!(code(&m.ptx).contains(&format!("fma.rn.{t}")), "{f} {t}");
        }
    }
}

#[test]
fn integer_division_checks_for_zero_and_minus_one() {
    for t in ["i32", "i64"] {
        let src = format!(
            "func @d(%a: {t}[?], %b: {t}[?]) -> ({t}[?], {t}[?]) {{\n  %q = floordiv %a, %b\n  %r = mod %a, %b\n  return %q, %r\n}}\n"
        );
        let m = ptx(&src, "sm_90");
        let ir = &m.llvm;
        // The divisor is compared with 0 and -1 and replaced by 1 before `sdiv`/`srem`, which
        // are undefined for those in LLVM.
        let compares = |with: &str| {
            ir.lines()
                .any(|l| l.contains(&format!("icmp eq {t} %")) && l.trim_end().ends_with(with))
        };
        assert!(compares(", 0") && compares(", -1"), "{ir}");
        assert!(
            ir.contains(&format!("sdiv {t}")) && ir.contains(&format!("srem {t}")),
            "{ir}"
        );
        let code = code(&m.ptx);
        assert!(code.contains(&format!("div.s{}", &t[1..])), "{}", m.ptx);
    }
}

#[test]
fn reductions_use_shared_memory_warp_shuffles_and_barriers() {
    let src = "func @s(%x: f32[?, ?]) -> (f32[?], f64[?], bool[?]) {
  %s = sum %x {axes = [1]}
  %d = cast %x {to = f64}
  %m = max %d {axes = [1]}
  %a = any %x {axes = [0]}
  return %s, %m, %a
}\n";
    let m = ptx(src, "sm_90");
    let reduces = m
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Reduce)
        .count();
    assert_eq!(reduces, 3, "{:?}", m.kernels);
    let code = code(&m.ptx);
    assert!(code.contains(".shared"), "{}", m.ptx);
    assert!(code.contains("shfl.sync.bfly.b32"), "{}", m.ptx);
    assert!(code.contains("bar.sync"), "{}", m.ptx);
    // The f64 max is shuffled as two 32-bit halves.
    assert!(m.llvm.contains("shfl.sync.bfly.i32"), "{}", m.llvm);
    // Inputs are read through the read-only path.
    assert!(code.contains("ld.global.nc"), "{}", m.ptx);
}

#[test]
fn argmax_is_a_kernel_and_gemm_is_not() {
    let src = "func @g(%a: f32[4, 3], %b: f32[3, 2]) -> (i64[4], f32[4, 2]) {
  %c = matmul %a, %b
  %i = argmax %a {axes = [1]}
  return %i, %c
}\n";
    let m = ptx(src, "sm_90");
    let kinds: Vec<KernelKind> = m.kernels.iter().map(|k| k.kind).collect();
    assert_eq!(kinds, [KernelKind::Reduce], "{:?}", m.kernels);
    assert_eq!(code(&m.ptx).matches(".entry").count(), 1, "{}", m.ptx);
}

/// argmax and argmin on every dtype they take, ties, NaN (the first one wins), both zeros,
/// one axis or all of them, strided and broadcast inputs, rows of 4 (vector groups) and
/// not: the interpreter's positions exactly, on the host oracle, the host device and the GPU.
#[test]
fn arg_reductions_give_the_interpreters_positions_on_the_gpu() {
    let src = "func @arg(%f: f32[37, 5, 64], %d: f64[300, 3], %i: i32[6, 1029], %b: bool[9, 12], %l: i64[70]) -> (i64[37, 64], i64[3], i64[6, 1], i64[9], i64[], i64[], i64[5, 64]) {
  %ft = transpose %f {perm = [0, 2, 1]}
  %a0 = argmax %ft {axes = [2]}
  %a1 = argmin %d {axes = [0]}
  %a2 = argmax %i {axes = [1], keepdims = true}
  %a3 = argmax %b {axes = [1]}
  %a4 = argmin %l
  %a5 = argmax %f
  %a6 = argmin %f {axes = [0]}
  return %a0, %a1, %a2, %a3, %a4, %a5, %a6
}";
    let func = parse("arg.kir", src)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .remove(0);
    let mut f = filled(kiln::DType::F32, &[37, 5, 64], 3).to_f64_vec();
    // Ties (a rounded walk), both zeros, NaNs: one row with two (the first wins), infinities.
    for v in f.iter_mut() {
        *v = (*v * 2.0).round() / 2.0;
    }
    f[64 * 5 * 2 + 7] = -0.0;
    f[64 * 5 * 3 + 64 * 2 + 9] = f64::NAN;
    f[64 * 5 * 3 + 64 * 4 + 9] = f64::NAN;
    f[64 * 5 * 30 + 11] = f64::INFINITY;
    f[64 * 5 * 31 + 12] = f64::NEG_INFINITY;
    let f: kiln::Tensor = ndarray::ArrayD::from_shape_vec(
        ndarray::IxDyn(&[37, 5, 64]),
        f.iter().map(|&v| v as f32).collect(),
    )
    .unwrap()
    .into();
    let mut d = filled(kiln::DType::F64, &[300, 3], 4).to_f64_vec();
    d[3 * 200 + 1] = f64::NAN;
    let d: kiln::Tensor = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[300, 3]), d)
        .unwrap()
        .into();
    let inputs = vec![
        f,
        d,
        filled(kiln::DType::I32, &[6, 1029], 5),
        filled(kiln::DType::Bool, &[9, 12], 6),
        filled(kiln::DType::I64, &[70], 7),
    ];
    let want = kiln::runtime::interp::run_func(&func, inputs.clone()).unwrap();
    let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    let (_, devices) = interp_and_devices(&func);
    let mut compilers = devices;
    compilers.push(("host oracle", kiln::jit_ptx::host::compile_func));
    for (name, compile) in compilers {
        let got = compile(func.clone(), true).unwrap().call(&refs).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.bit_eq(w), "{name}: output {k}: {g:?} != {w:?}");
        }
    }
}

#[test]
fn branches_of_ifelse_get_their_kernels() {
    let src = "func @b(%c: bool[], %x: f32[4]) -> (f32[4]) {
  %y = ifelse %c {
    %s = sin %x
    yield %s
  } else {
    %t = sum %x {axes = [0], keepdims = true}
    %u = sub %x, %t
    yield %u
  }
  return %y
}\n";
    let m = ptx(src, "sm_80");
    let kinds: Vec<KernelKind> = m.kernels.iter().map(|k| k.kind).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == KernelKind::Map).count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == KernelKind::Reduce).count(),
        1,
        "{kinds:?}"
    );
}

#[test]
fn unsupported_arches_are_errors_that_name_them() {
    let f = optimized(
        "func @p(%x: f64[3], %y: f64[3]) -> (f64[3]) {\n  %z = pow %x, %y\n  return %z\n}\n",
    );
    let m = compile_ptx(&f, "sm_90", &DumpOptions::default()).unwrap();
    assert_eq!(m.kernels.len(), 1, "f64 pow is a kernel");
    let e = compile_ptx(&f, "sm_100", &DumpOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("sm_100") && e.contains("sm_90"), "{e}");
}

#[test]
fn the_llvm_and_ptx_dump_stages_write_their_text() {
    let dir = std::env::temp_dir().join(format!("kiln-ptx-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dump = DumpOptions {
        stages: vec!["llvm".into(), "ptx".into()],
        dir: Some(dir.clone()),
        ..Default::default()
    };
    let m = compile_ptx(&optimized(EXP), "sm_90", &dump).unwrap();
    let llvm = std::fs::read_to_string(dir.join("e.08.llvm.txt")).unwrap();
    let ptx = std::fs::read_to_string(dir.join("e.09.ptx.txt")).unwrap();
    assert_eq!(llvm, m.llvm);
    assert!(llvm.contains("define void @e_0_map("), "{llvm}");
    assert!(llvm.contains("!nvvm.annotations"), "{llvm}");
    assert_eq!(ptx, m.ptx);
    assert!(!dir.join("e.05.schedule.txt").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_gpu_backend_runs_or_is_a_clean_error() {
    let f = parse("t.kir", EXP).unwrap().remove(0);
    let options = CompileOptions {
        backend: Some(kiln::Backend::Gpu),
        ..CompileOptions::default()
    };
    let compiled = kiln::compile_func(f.clone(), &options);
    match kiln::jit_ptx::cuda::device() {
        Ok(_) => {
            let g = compiled.unwrap();
            let x = filled(kiln::ir::DType::F32, &[2, 8], 3);
            let want = kiln::runtime::interp::run_func(&f, vec![x.clone()]).unwrap();
            let got = g.call(&[x.view()]).unwrap();
            // Within rounding of the interpreter's exp (`perform` evaluates it its own way);
            // the CPU backend's bits are `elementwise_kernels_on_the_gpu_give_the_cpu_backends_bits`'s.
            assert!(
                near(&got[0], &want[0]),
                "exp on the GPU: {got:?} vs {want:?}"
            );
        }
        Err(device_error) => {
            let e = compiled.err().expect("compiled without a GPU").to_string();
            assert_eq!(e, device_error.to_string());
            if !kiln::jit_ptx::runtime::driver_present() {
                assert_eq!(e, "no CUDA driver found");
            }
        }
    }
}

#[test]
fn the_module_checks_reject_broken_ptx() {
    let good = ptx(EXP, "sm_90");
    assert_eq!(check_module(&good, "sm_90", 1), Ok(()));
    let with = |f: &dyn Fn(&str) -> String| {
        let mut m = good.clone();
        m.ptx = f(&m.ptx);
        m
    };
    let cases: Vec<(PtxModule, &str, usize)> = vec![
        (good.clone(), "sm_80", 1),
        (good.clone(), "sm_90", 2),
        (with(&|p| p.replacen('}', "", 1)), "sm_90", 1),
        (
            with(&|p| p.replacen(".address_size 64", ".address_size 32", 1)),
            "sm_90",
            1,
        ),
        (
            with(&|p| {
                p.replacen(
                    "ret;",
                    "call.uni (retval0), __nv_expf, (param0);\n\tret;",
                    1,
                )
            }),
            "sm_90",
            1,
        ),
    ];
    for (m, arch, n) in cases {
        assert!(check_module(&m, arch, n).is_err(), "accepted:\n{}", m.ptx);
    }
    let mut m = good.clone();
    m.llvm_optimized = m.llvm_optimized.replacen("ret void", "", 1);
    assert!(check_module(&m, "sm_90", 1).is_err());
}

mod common;

/// `Backend::Gpu`'s shared variables kept on the device, on a GPU (see the module).
#[path = "shared_on_device.rs"]
mod gpu_shared;

/// Calls replayed from recorded graphs, on a GPU (see the module).
#[path = "gpu_graphs.rs"]
mod gpu_graphs;
use common::kir_files;

/// Compiles a function for one way of running the kernels (optimized first when asked).
type Compiler = fn(Func, bool) -> kiln::Result<kiln::Function>;

/// One step of the xorshift walk the tests' values come from.
fn xorshift(s: &mut u64) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
}

/// A vector of `vals` in the float type `ty` (`"f32"`, else f64).
fn vector(ty: &str, vals: &[f64]) -> kiln::Tensor {
    let shape = ndarray::IxDyn(&[vals.len()]);
    match ty {
        "f32" => {
            let v = vals.iter().map(|&v| v as f32).collect();
            ndarray::ArrayD::from_shape_vec(shape, v).unwrap().into()
        }
        _ => ndarray::ArrayD::from_shape_vec(shape, vals.to_vec())
            .unwrap()
            .into(),
    }
}

/// Output 0 of the function `src` on `inputs`, as f64s (exact for f32): through the GPU's
/// kernels that `compile` makes, and through `backend` (both with the optimizer off).
fn output_both_ways(
    src: &str,
    compile: Compiler,
    backend: kiln::Backend,
    inputs: &[kiln::TensorRef<'_>],
) -> (Vec<f64>, Vec<f64>) {
    let func = parse("t.kir", src).unwrap().remove(0);
    let gpu = compile(func.clone(), false).unwrap();
    let options = CompileOptions {
        backend: Some(backend),
        optimize: false,
        ..CompileOptions::default()
    };
    let other = kiln::compile_func(func, &options).unwrap();
    (
        gpu.call(inputs).unwrap()[0].to_f64_vec(),
        other.call(inputs).unwrap()[0].to_f64_vec(),
    )
}

/// Runs one `run:` directive of a corpus file on the kernels `compile` makes.
fn run_directive(func: &Func, spec: &str, optimize: bool, compile: Compiler) -> Result<(), String> {
    use kiln::ir::text::{literal, parse_literal};
    let (ins, outs) = spec.split_once("->").ok_or("a run directive needs `->`")?;
    let inputs: Vec<kiln::Tensor> = common::split_top(ins)
        .iter()
        .zip(&func.params)
        .map(|(s, &p)| parse_literal(s, func.ty(p)).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let f = compile(func.clone(), optimize).map_err(|e| e.to_string())?;
    let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    let result = f.call(&refs);
    if let Some(pat) = outs.trim().strip_prefix("error:") {
        return match result {
            Err(e) if e.to_string().contains(pat.trim()) => Ok(()),
            other => Err(format!(
                "expected an error with `{}`, got {other:?}",
                pat.trim()
            )),
        };
    }
    let got = result.map_err(|e| e.to_string())?;
    for (i, (g, w)) in got.iter().zip(common::split_top(outs)).enumerate() {
        let want = parse_literal(&w, func.ty(func.outputs[i])).map_err(|e| e.to_string())?;
        if !common::close(g, &want) {
            return Err(format!("output {i}: expected {w}, got {}", literal(g)));
        }
    }
    Ok(())
}

/// Runs whose expected values the GPU kernels do not give (none since float products take
/// the interpreter's order on the GPU too). Each must still fail, so the list is emptied when
/// a gap is closed.
const KNOWN_GAPS: &[(&str, &str)] = &[];

/// The corpus: `KILN_FILETESTS` (a copy of `tests/filetests`, where the test binary runs on
/// another machine), else this checkout's.
fn corpus_root() -> PathBuf {
    match std::env::var_os("KILN_FILETESTS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests"),
    }
}

/// Every `run:` directive of the corpus, with the optimizer off and on, through `compile`:
/// returns the number of runs, or the failures.
fn run_corpus(compile: Compiler) -> Result<usize, String> {
    let root = corpus_root();
    let mut files = Vec::new();
    kir_files(&root, &mut files);
    files.sort();
    let (mut runs, mut failures) = (0, Vec::new());
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if NOT_LOWERED_YET.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        let src = std::fs::read_to_string(path).unwrap();
        let directives: Vec<(bool, String)> = src
            .lines()
            .filter_map(|l| {
                let d = l.trim().strip_prefix(';')?.trim();
                if let Some(r) = d.strip_prefix("run:") {
                    Some((false, r.trim().to_string()))
                } else {
                    d.strip_prefix("run(opt):")
                        .map(|r| (true, r.trim().to_string()))
                }
            })
            .collect();
        if directives.is_empty() {
            continue;
        }
        let func = parse(&rel, &src).unwrap().remove(0);
        for (only_opt, spec) in &directives {
            for optimize in [false, true] {
                if *only_opt && !optimize {
                    continue;
                }
                runs += 1;
                let gap = KNOWN_GAPS
                    .iter()
                    .any(|(f, arg)| *f == rel && spec.contains(arg));
                match run_directive(&func, spec, optimize, compile) {
                    Err(e) if gap && e.contains("nan") => {}
                    Err(e) => failures.push(format!("{rel} (optimize: {optimize}) `{spec}`: {e}")),
                    Ok(()) if gap => failures.push(format!(
                        "{rel} `{spec}` is listed as a known gap but passes (update KNOWN_GAPS)"
                    )),
                    Ok(()) => {}
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(runs)
    } else {
        Err(format!(
            "{} of {runs} runs failed:\n{}",
            failures.len(),
            failures.join("\n")
        ))
    }
}

/// The oracle without a GPU: the corpus's `run:` directives on the same kernels compiled for the
/// host CPU (one thread), with the optimizer off and on.
#[test]
fn the_corpus_kernels_compiled_for_the_host_give_the_expected_values() {
    let runs = run_corpus(kiln::jit_ptx::host::compile_func).unwrap_or_else(|e| panic!("{e}"));
    assert!(runs >= 100, "{runs} runs");
    eprintln!("host oracle: {runs} runs agree");
}

/// The GPU runtime without a GPU: the corpus through `DeviceFunction` on a host device (device
/// arrays in host memory, the kernels compiled for the CPU, products through the column-major
/// GEMM cuBLAS is given, host steps with explicit copies), with the optimizer off and on.
#[test]
fn the_corpus_runs_through_the_device_runtime_on_a_host_device() {
    let runs = run_corpus(kiln::jit_ptx::runtime::compile_func_on_host_device)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(runs >= 100, "{runs} runs");
    eprintln!("host device: {runs} runs agree");
}

/// A check (`$check(compile)`: the cases that go wrong through the kernels `compile` makes) as
/// two tests: through the kernels compiled for the host, and on a real GPU (skipped without
/// one; the GPU check runs the tests whose names say `gpu`).
macro_rules! host_and_gpu {
    ($host:ident, $gpu:ident, $check:expr) => {
        #[test]
        fn $host() {
            assert_none("mismatches", &$check(kiln::jit_ptx::host::compile_func));
        }

        #[test]
        fn $gpu() {
            if gpu_or_skip() {
                assert_none("mismatches", &$check(kiln::jit_ptx::runtime::compile_func));
            }
        }
    };
}

/// Fails listing `bad`, the cases that went wrong, where there is one.
fn assert_none(what: &str, bad: &[String]) {
    assert!(bad.is_empty(), "{} {what}:\n{}", bad.len(), bad.join("\n"));
}

/// Whether this machine has a GPU the backend can use; says why not otherwise.
fn gpu_or_skip() -> bool {
    match kiln::jit_ptx::cuda::device() {
        Ok(d) => {
            eprintln!("GPU: {} ({} SMs, {})", d.name, d.sms, d.arch());
            true
        }
        Err(e) => {
            eprintln!("skipped: no GPU ({e})");
            false
        }
    }
}

/// The corpus's `run:` directives through `Backend::Gpu` on a real GPU (skipped without one).
#[test]
fn the_corpus_runs_on_the_gpu() {
    if !gpu_or_skip() {
        return;
    }
    let runs = run_corpus(kiln::jit_ptx::runtime::compile_func).unwrap_or_else(|e| panic!("{e}"));
    assert!(runs >= 100, "{runs} runs");
    eprintln!("GPU: {runs} runs agree");
}

/// The "same bits" promise: elementwise programs on the host-compiled GPU kernels give the CPU
/// backend's bits exactly (the same operation sequence), over ordinary values and specials.
fn elementwise_bit_mismatches(compile: Compiler) -> Vec<String> {
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        3.5,
        1e-3,
        7.25,
        -30.0,
        88.0,
        -100.0,
        700.0,
        1e5,
        -1e6,
        1e-30,
        1e-310,
        1e-40,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    // A spread of values besides: a fixed pseudo-random walk over many binades.
    let mut vals: Vec<f64> = specials.to_vec();
    let mut s: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..300 {
        xorshift(&mut s);
        let mant = (s >> 11) as f64 / (1u64 << 53) as f64;
        let exp = ((s >> 3) % 40) as i32 - 20;
        let sign = if s & 1 == 1 { -1.0 } else { 1.0 };
        vals.push(sign * mant * 2f64.powi(exp));
    }
    let ops = [
        "exp",
        "expm1",
        "log",
        "log1p",
        "sin",
        "cos",
        "tan",
        "tanh",
        "sigmoid",
        "erf",
        "sqrt",
        "rsqrt",
        "round",
        "floor",
        "ceil",
        "sign",
        "relu",
        "reciprocal",
        "abs",
        "neg",
        "square",
    ];
    let bits = |t: &kiln::Tensor| -> Vec<u64> {
        match t {
            kiln::Tensor::F32(a) => a.iter().map(|x| x.to_bits() as u64).collect(),
            kiln::Tensor::F64(a) => a.iter().map(|x| x.to_bits()).collect(),
            _ => unreachable!(),
        }
    };
    let mut mismatches = Vec::new();
    for ty in ["f32", "f64"] {
        let n = vals.len();
        let x = vector(ty, &vals);
        for op in ops {
            let src = format!(
                "func @u(%x: {ty}[{n}]) -> ({ty}[{n}]) {{\n  %y = {op} %x\n  %z = mul %y, %x\n  %w = maximum %z, %y\n  return %w\n}}\n"
            );
            let func = parse("t.kir", &src).unwrap().remove(0);
            let host = compile(func.clone(), true).unwrap();
            let cpu = kiln::compile_func(
                func,
                &CompileOptions {
                    backend: Some(kiln::Backend::Cpu),
                    ..CompileOptions::default()
                },
            )
            .unwrap();
            let h = host.call(&[x.view()]).unwrap();
            let c = cpu.call(&[x.view()]).unwrap();
            let (hb, cb) = (bits(&h[0]), bits(&c[0]));
            for (i, (a, b)) in hb.iter().zip(&cb).enumerate() {
                // NaNs may differ in payload only.
                let nan = |v: u64| {
                    if ty == "f32" {
                        f32::from_bits(v as u32).is_nan()
                    } else {
                        f64::from_bits(v).is_nan()
                    }
                };
                if a != b && !(nan(*a) && nan(*b)) {
                    mismatches.push(format!(
                        "{op} {ty} at x = {:e}: gpu {a:#x}, cpu {b:#x}",
                        vals[i]
                    ));
                }
            }
        }
    }
    mismatches
}

host_and_gpu!(
    elementwise_kernels_give_the_cpu_backends_bits,
    elementwise_kernels_on_the_gpu_give_the_cpu_backends_bits,
    elementwise_bit_mismatches
);

/// `sin`, `cos` and `tan` of huge arguments (where the CPU calls libm: `|x| > 2^20` in f32,
/// `2^30` in f64) through the GPU's kernels compiled by `compile`, against the CPU backend:
/// the values more than 2 ulps apart in f64 (the kernels' own error is up to 1.45 ulp, libm's
/// about 0.5) or 1 in f32, or not both NaN for infinities.
fn huge_trig_mismatches(compile: Compiler) -> Vec<String> {
    let mut vals: Vec<f64> = vec![
        1e10,
        -1e10,
        1e22,
        1e300,
        -1e300,
        f64::MAX,
        -f64::MAX,
        // The double closest to a multiple of pi/2 (r ~ 2^-61 of it).
        6381956970095103.0 * 2f64.powi(797),
        2f64.powi(30) * 1.0000001,
        2f64.powi(1000) * 1.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let mut s: u64 = 0x6a09e667f3bcc909;
    for _ in 0..400 {
        xorshift(&mut s);
        let mant = 1.0 + (s >> 12) as f64 / (1u64 << 52) as f64;
        let exp = 31 + ((s >> 2) % 990) as i32;
        let sign = if s & 1 == 1 { -1.0 } else { 1.0 };
        vals.push(sign * mant * 2f64.powi(exp));
    }
    let mut bad = Vec::new();
    for ty in ["f32", "f64"] {
        // f32: the finite values above 2^20 that fit, and a spread of f32 magnitudes.
        let xs: Vec<f64> = match ty {
            "f32" => (vals.iter().copied())
                .filter(|v| !v.is_finite() || v.abs() < f32::MAX as f64)
                .chain((0..200).map(|k| {
                    (1.37e6f64 * 1.5f64.powi(k % 110)) * if k % 2 == 0 { 1.0 } else { -1.0 }
                }))
                .filter(|v| !v.is_finite() || (v.abs() > 1048576.0 && v.abs() < f32::MAX as f64))
                .collect(),
            _ => vals.clone(),
        };
        let n = xs.len();
        let x = vector(ty, &xs);
        for op in ["sin", "cos", "tan"] {
            let src = format!(
                "func @u(%x: {ty}[{n}]) -> ({ty}[{n}]) {{\n  %y = {op} %x\n  return %y\n}}\n"
            );
            let (g, c) = output_both_ways(&src, compile, kiln::Backend::Cpu, &[x.view()]);
            for i in 0..n {
                let (a, b) = (g[i], c[i]);
                let ulps = match ty {
                    "f32" => (a as f32).to_bits().abs_diff((b as f32).to_bits()) as u64,
                    _ => a.to_bits().abs_diff(b.to_bits()),
                };
                let limit = if ty == "f32" { 1 } else { 2 };
                let ok = (a.is_nan() && b.is_nan())
                    || (a.is_sign_negative() == b.is_sign_negative() && ulps <= limit);
                if !ok {
                    bad.push(format!("{op} {ty} of {:e}: gpu {a:e}, cpu {b:e}", xs[i]));
                }
            }
        }
    }
    bad
}

host_and_gpu!(
    huge_trig_arguments_are_reduced_as_libm_does,
    huge_trig_arguments_are_reduced_on_the_gpu,
    huge_trig_mismatches
);

/// Float floor division and mod: exact long division on the GPU, libm's `fmod` on the CPU;
/// the same bits over pairs of ordinary values, exact multiples, subnormals and specials.
#[test]
fn float_floordiv_and_mod_give_the_cpu_backends_bits() {
    let mut avals: Vec<f64> = (-6..=6).map(|i| i as f64).collect();
    avals.extend([
        0.3,
        -0.7,
        7.25,
        1e5,
        -1e6,
        123456.789,
        1e300,
        -1e-300,
        5e-324,
        1e-310,
        1e-40,
        3e38,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ]);
    let mut s: u64 = 0x2545f4914f6cdd1d;
    for _ in 0..40 {
        xorshift(&mut s);
        let mant = (s >> 11) as f64 / (1u64 << 53) as f64;
        let sign = if s & 1 == 1 { -1.0 } else { 1.0 };
        avals.push(sign * mant * 2f64.powi(((s >> 3) % 60) as i32 - 30));
    }
    let bvals: Vec<f64> = vec![
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        3.0,
        -3.0,
        0.1,
        7.25,
        -1e-3,
        1e-310,
        1e-40,
        1e300,
        2.5e-7,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.0,
        -0.0,
    ];
    let (a, b): (Vec<f64>, Vec<f64>) = avals
        .iter()
        .flat_map(|&x| bvals.iter().map(move |&y| (x, y)))
        .unzip();
    let n = a.len();
    let mut mismatches = Vec::new();
    for ty in ["f32", "f64"] {
        let tensor = |v: &[f64]| match ty {
            "f32" => kiln::Tensor::F32(
                ndarray::ArrayD::from_shape_vec(
                    ndarray::IxDyn(&[n]),
                    v.iter().map(|&x| x as f32).collect(),
                )
                .unwrap(),
            ),
            _ => kiln::Tensor::F64(
                ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[n]), v.to_vec()).unwrap(),
            ),
        };
        let (ta, tb) = (tensor(&a), tensor(&b));
        let as_f64 = |t: &kiln::Tensor| -> Vec<f64> {
            match t {
                kiln::Tensor::F32(x) => x.iter().map(|&v| v as f64).collect(),
                kiln::Tensor::F64(x) => x.iter().copied().collect(),
                _ => unreachable!(),
            }
        };
        for op in ["floordiv", "mod"] {
            let src = format!(
                "func @d(%a: {ty}[{n}], %b: {ty}[{n}]) -> ({ty}[{n}]) {{\n  %y = {op} %a, %b\n  return %y\n}}\n"
            );
            let func = parse("t.kir", &src).unwrap().remove(0);
            let host = kiln::jit_ptx::host::compile_func(func.clone(), true).unwrap();
            let options = CompileOptions {
                backend: Some(kiln::Backend::Cpu),
                ..CompileOptions::default()
            };
            let cpu = kiln::compile_func(func, &options).unwrap();
            let h = as_f64(&host.call(&[ta.view(), tb.view()]).unwrap()[0]);
            let c = as_f64(&cpu.call(&[ta.view(), tb.view()]).unwrap()[0]);
            for i in 0..n {
                // f32 -> f64 is exact, so equal bits in f64 are equal bits in the dtype.
                let same = h[i].to_bits() == c[i].to_bits() || (h[i].is_nan() && c[i].is_nan());
                if !same {
                    mismatches.push(format!(
                        "{op} {ty} ({:e}, {:e}): gpu {:e}, cpu {:e}",
                        a[i], b[i], h[i], c[i]
                    ));
                }
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// f32 `pow` through the f64 expansions: within 1 ulp of the CPU backend (libm's `powf`), and
/// exactly its special values (zeros, infinities, NaN, signs), over pairs of ordinary values,
/// integers (odd and even exponents of negative bases) and specials.
#[test]
fn f32_pow_is_within_one_ulp_of_libm() {
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        10.0,
        1e-3,
        1e-40,
        3e38,
        0.999,
        1.001,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        7.5,
        -7.5,
        1e10,
        -3.0,
    ];
    let mut ys: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1.5,
        0.1,
        10.0,
        100.0,
        -100.0,
        1e9,
        16777217.0,
        33.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-3,
        127.5,
    ];
    let mut s: u64 = 0x853c49e6748fea9b;
    for _ in 0..60 {
        xorshift(&mut s);
        xs.push(((s >> 40) as f32 / 16777216.0) * 2f32.powi(((s >> 8) % 40) as i32 - 20));
        ys.push(((s >> 16) % 4000) as f32 / 100.0 - 20.0);
    }
    let widen = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
    let host = kiln::jit_ptx::host::compile_func;
    let bad = pow_kernel_against_the_cpu(host, kiln::ir::DType::F32, &widen(xs), &widen(ys));
    assert_none("mismatches", &bad);
}

/// f64 `pow` (the double-word expansion, `math::pow_f64`) as the GPU's kernel computes it,
/// compiled for the host: within 1 ulp of the CPU backend (libm's `pow`), its special values
/// exactly, over the same kinds of operands as f32's and results from subnormal to overflow.
#[test]
fn f64_pow_is_within_one_ulp_of_libm() {
    let (xs, ys) = f64_pow_operands();
    let host = kiln::jit_ptx::host::compile_func;
    let bad = pow_kernel_against_the_cpu(host, kiln::ir::DType::F64, &xs, &ys);
    assert_none("mismatches", &bad);
}

/// The same on a real GPU (skipped without one).
#[test]
fn f64_pow_on_the_gpu_is_within_one_ulp_of_libm() {
    if !gpu_or_skip() {
        return;
    }
    let (xs, ys) = f64_pow_operands();
    let gpu = kiln::jit_ptx::runtime::compile_func;
    let bad = pow_kernel_against_the_cpu(gpu, kiln::ir::DType::F64, &xs, &ys);
    assert_none("mismatches", &bad);
}

/// Specials, integers, and a spread of bases and exponents whose results run from
/// subnormal to overflow.
fn f64_pow_operands() -> (Vec<f64>, Vec<f64>) {
    let mut xs: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -3.0,
        1e-310,
        1e-300,
        1e300,
        0.999999,
        1.000001,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -7.5,
    ];
    let mut ys: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        3.0,
        -3.0,
        0.5,
        1.5,
        0.1,
        100.0,
        -100.0,
        1e15,
        9007199254740993.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        700.5,
    ];
    let mut s: u64 = 0x2545f4914f6cdd1d;
    for _ in 0..60 {
        xorshift(&mut s);
        xs.push(((s >> 11) as f64 / 9007199254740992.0) * 2f64.powi(((s >> 3) % 200) as i32 - 100));
        ys.push(((s >> 20) % 100_000) as f64 / 100.0 - 500.0);
    }
    (xs, ys)
}

/// `pow` of every pair of `xs` and `ys` in `dtype` through the GPU's kernel compiled by
/// `compile` (for the host, or the GPU), against the CPU backend: the pairs whose results differ by more than 1 ulp, or at
/// all where the CPU's is zero, infinite or NaN.
fn pow_kernel_against_the_cpu(
    compile: Compiler,
    dtype: kiln::ir::DType,
    xs: &[f64],
    ys: &[f64],
) -> Vec<String> {
    let (a, b): (Vec<f64>, Vec<f64>) = xs
        .iter()
        .flat_map(|&x| ys.iter().map(move |&y| (x, y)))
        .unzip();
    let n = a.len();
    let ty = if dtype == kiln::ir::DType::F32 {
        "f32"
    } else {
        "f64"
    };
    let (ta, tb) = (vector(ty, &a), vector(ty, &b));
    let src = format!(
        "func @p(%x: {dtype}[{n}], %y: {dtype}[{n}]) -> ({dtype}[{n}]) {{\n  %z = pow %x, %y\n  return %z\n}}\n"
    );
    let (h, c) = output_both_ways(&src, compile, kiln::Backend::Cpu, &[ta.view(), tb.view()]);
    // The distance in ulps of the dtype, for two values of the same sign.
    let ulps = |g: f64, w: f64| match dtype {
        kiln::ir::DType::F32 => (g as f32).to_bits().abs_diff((w as f32).to_bits()) as u64,
        _ => g.to_bits().abs_diff(w.to_bits()),
    };
    let mut bad = Vec::new();
    for i in 0..n {
        let (g, w) = (h[i], c[i]);
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w == 0.0 || w.is_infinite() || g == 0.0 || g.is_infinite() {
            g.to_bits() == w.to_bits()
        } else {
            g.is_sign_negative() == w.is_sign_negative() && ulps(g, w) <= 1
        };
        if !ok {
            bad.push(format!("pow({:e}, {:e}): gpu {g:e}, cpu {w:e}", a[i], b[i]));
        }
    }
    let shown = bad.len().min(30);
    match bad.is_empty() {
        true => bad,
        false => {
            let mut head = vec![format!("{} of {n} pairs", bad.len())];
            head.extend(bad.into_iter().take(shown));
            head
        }
    }
}

/// Float products over rows, columns, several axes and a whole array, through the GPU's
/// kernels compiled by `compile`, against the interpreter: the same bits (the kernels take
/// the interpreter's order, `reduce::in_interpreters_order`), overflows to infinity and
/// their NaNs included (values in [-4, 4]: long products overflow).
fn product_mismatches(compile: Compiler) -> Vec<String> {
    // The operand's shape, the attributes, the result's dims.
    let cases: [(&[usize], &str, &str); 5] = [
        (&[48, 37], "{axes = [1]}", "48"),
        (&[300, 5], "{axes = [0]}", "5"),
        (&[6, 7, 9], "{axes = [0, 2]}", "7"),
        (&[1000], "", ""),
        (&[4, 13], "{axes = [1], keepdims = true}", "4, 1"),
    ];
    let mut bad = Vec::new();
    for dtype in [kiln::ir::DType::F32, kiln::ir::DType::F64] {
        for (k, (shape, attrs, out)) in cases.iter().enumerate() {
            let dims = shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let src = format!(
                "func @p(%x: {dtype}[{dims}]) -> ({dtype}[{out}]) {{\n  %p = prod %x {attrs}\n  return %p\n}}\n"
            );
            let x = filled(dtype, shape, 17 + k as u64);
            let (g, w) = output_both_ways(&src, compile, kiln::Backend::Interp, &[x.view()]);
            let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
            if g.len() != w.len() || g.iter().zip(&w).any(|(&a, &b)| !same(a, b)) {
                bad.push(format!(
                    "prod {dtype} {shape:?} {attrs}: gpu {g:?}, interpreter {w:?}"
                ));
            }
        }
    }
    bad
}

host_and_gpu!(
    float_products_give_the_interpreters_bits,
    float_products_give_the_interpreters_bits_on_the_gpu,
    product_mismatches
);

/// Pseudo-random values of `dtype` and `shape` (a fixed xorshift walk), for the GPU tests.
fn filled(dtype: kiln::ir::DType, shape: &[usize], seed: u64) -> kiln::Tensor {
    use kiln::ir::DType;
    let n: usize = shape.iter().product();
    let mut s = seed | 1;
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            xorshift(&mut s);
            (s >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
        })
        .collect();
    let sh = ndarray::IxDyn(shape);
    match dtype {
        DType::F32 => ndarray::ArrayD::from_shape_vec(sh, vals.iter().map(|&v| v as f32).collect())
            .unwrap()
            .into(),
        DType::F64 => ndarray::ArrayD::from_shape_vec(sh, vals).unwrap().into(),
        DType::I32 => ndarray::ArrayD::from_shape_vec(sh, vals.iter().map(|&v| v as i32).collect())
            .unwrap()
            .into(),
        DType::I64 => ndarray::ArrayD::from_shape_vec(sh, vals.iter().map(|&v| v as i64).collect())
            .unwrap()
            .into(),
        DType::Bool => ndarray::ArrayD::from_shape_vec(sh, vals.iter().map(|&v| v > 3.0).collect())
            .unwrap()
            .into(),
        half => kiln::perform::cast(
            &ndarray::ArrayD::from_shape_vec(sh, vals).unwrap().into(),
            half,
        ),
    }
}

/// Whether `got` is `want` within a relative tolerance for floats (summation orders differ),
/// exactly otherwise.
fn near(got: &kiln::Tensor, want: &kiln::Tensor) -> bool {
    let tol = match want.dtype() {
        kiln::DType::F32 => 1e-4,
        kiln::DType::F64 => 1e-10,
        _ => 0.0,
    };
    got.dtype() == want.dtype()
        && got.shape() == want.shape()
        && got
            .to_f64_vec()
            .iter()
            .zip(want.to_f64_vec())
            .all(|(&g, w)| g == w || (g - w).abs() <= tol * w.abs().max(1.0))
}

/// Functions large enough for many blocks, many warps per block and partial warps, through
/// `Backend::Gpu` and `DeviceFunction` (values kept on the device), against the interpreter.
/// Without a GPU the same functions run on the host oracle and on a host device.
#[test]
fn kernels_at_scale_agree_with_the_interpreter_on_the_gpu() {
    use kiln::ir::DType::*;
    let gpu = gpu_or_skip();
    let compile: Compiler = if gpu {
        kiln::jit_ptx::runtime::compile_func
    } else {
        kiln::jit_ptx::host::compile_func
    };
    let cases: &[(&str, ScaleArgs)] = &[
        (
            "func @softmax(%x: f32[300, 5000]) -> (f32[300, 5000]) {
               %m = max %x {axes = [1], keepdims = true}
               %d = sub %x, %m
               %e = exp %d
               %s = sum %e {axes = [1], keepdims = true}
               %y = div %e, %s
               return %y
             }",
            &[(F32, &[300, 5000])],
        ),
        (
            "func @cols(%x: f64[1000, 777]) -> (f64[777], f64[]) {
               %y = sum %x {axes = [0]}
               %z = mean %x
               return %y, %z
             }",
            &[(F64, &[1000, 777])],
        ),
        (
            "func @mixed(%a: i32[33, 70, 5], %b: bool[70, 1]) -> (i32[70], bool[33], f64[33, 5]) {
               %m = max %a {axes = [0, 2]}
               %q = any %b
               %c = cast %a {to = f64}
               %r = mean %c {axes = [1]}
               %w = all %b {axes = [0, 1]}
               %ww = broadcast_to %w {shape = [33]}
               return %m, %ww, %r
             }",
            &[(I32, &[33, 70, 5]), (Bool, &[70, 1])],
        ),
        (
            "func @bcast(%x: f32[4097, 1], %y: f32[1, 3001], %z: i64[3001]) -> (f32[4097, 3001], i64[]) {
               %a = mul %x, %y
               %b = tanh %a
               %s = sum %z
               return %b, %s
             }",
            &[(F32, &[4097, 1]), (F32, &[1, 3001]), (I64, &[3001])],
        ),
        (
            "func @products(%a: f32[300, 200], %b: f32[200, 129], %w: f32[300, 129]) -> (f32[300, 129], f32[300, 129]) {
               %p = matmul %a, %b
               %h = const 0.01 : f32[]
               %s = mul %p, %h
               %u = sub %w, %s
               return %p, %u
             }",
            &[(F32, &[300, 200]), (F32, &[200, 129]), (F32, &[300, 129])],
        ),
        (
            "func @batched(%a: f64[7, 30, 20], %c: f64[7, 50, 20], %v: f64[20], %m: f64[20, 30]) -> (f64[7, 30, 50], f64[7, 30], f64[7, 20, 20]) {
               %ct = transpose %c {perm = [0, 2, 1]}
               %p = matmul %a, %ct
               %q = matmul %a, %v
               %mt = transpose %m {perm = [1, 0]}
               %at = transpose %a {perm = [0, 2, 1]}
               %r = matmul %at, %mt
               return %p, %q, %r
             }",
            &[(F64, &[7, 30, 20]), (F64, &[7, 50, 20]), (F64, &[20]), (F64, &[20, 30])],
        ),
        (
            "func @views(%x: f32[70, 40], %y: f32[70, 33], %v: f32[40], %i: i32[3, 1, 5]) -> (f32[40, 70], f32[40, 33], f32[40, 70], i32[2, 3, 4, 5], i32[5, 3, 1]) {
               %t = transpose %x {perm = [1, 0]}
               %p = matmul %t, %y
               %b = broadcast_to %v {shape = [70, 40]}
               %bt = transpose %b {perm = [1, 0]}
               %e = exp %t
               %m = mul %e, %bt
               %ib = broadcast_to %i {shape = [2, 3, 4, 5]}
               %it = transpose %i {perm = [2, 0, 1]}
               return %t, %p, %m, %ib, %it
             }",
            &[(F32, &[70, 40]), (F32, &[70, 33]), (F32, &[40]), (I32, &[3, 1, 5])],
        ),
        (
            "func @reshapes(%x: f32[60, 40], %z: f64[6, 1, 8]) -> (f32[40, 60], f32[2400], f64[6, 8, 1], f32[1, 60, 40]) {
               %t = transpose %x {perm = [1, 0]}
               %r = reshape %x {shape = [40, -1]}
               %s = add %r, %t
               %f = reshape %t {shape = [-1]}
               %q = squeeze %z {axes = [1]}
               %e = expand_dims %q {axes = [2]}
               %ee = exp %e
               %x1 = expand_dims %x {axes = [0]}
               return %s, %f, %ee, %x1
             }",
            &[(F32, &[60, 40]), (F64, &[6, 1, 8])],
        ),
    ];
    for (src, args) in cases {
        agrees_at_scale(src, args, gpu, compile);
    }
}

type ScaleArgs = &'static [(kiln::ir::DType, &'static [usize])];

/// `src` on inputs of `args` through `compile` (`Backend::Gpu`, or the host oracle) and
/// through a `DeviceFunction` (on the GPU, or a host device), against the interpreter.
fn agrees_at_scale(src: &str, args: ScaleArgs, gpu: bool, compile: Compiler) {
    {
        let func = match parse("scale.kir", src) {
            Ok(mut fs) => fs.remove(0),
            Err(e) => panic!("{e:?}"),
        };
        let inputs: Vec<kiln::Tensor> = args
            .iter()
            .enumerate()
            .map(|(k, (d, s))| filled(*d, s, 7 + k as u64))
            .collect();
        let want = kiln::runtime::interp::run_func(&func, inputs.clone()).unwrap();
        let f = compile(func.clone(), true).unwrap();
        let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
        let got = f
            .call(&refs)
            .unwrap_or_else(|e| panic!("{}: {e}", func.name));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(near(g, w), "{} output {i} (gpu: {gpu})", func.name);
        }
        // The device runtime: on the GPU, or on a host device without one.
        let device = if gpu {
            kiln::jit_ptx::cuda::device().unwrap()
        } else {
            kiln::jit_ptx::cuda::Device::host()
        };
        match kiln::jit_ptx::device::DeviceFunction::compile_on(func.clone(), device) {
            Ok(d) => {
                let on: Vec<_> = inputs.iter().map(|t| d.upload(t.view()).unwrap()).collect();
                let on_refs: Vec<_> = on.iter().collect();
                for _ in 0..2 {
                    let outs = d.run(&on_refs).unwrap();
                    for (i, (g, w)) in outs.iter().zip(&want).enumerate() {
                        let g = g.download().unwrap();
                        assert!(near(&g, w), "{} output {i} (DeviceFunction)", func.name);
                    }
                }
            }
            Err(e) => panic!("{}: DeviceFunction: {e}", func.name),
        }
    }
}

/// Softmax-like row groups, each one kernel with one block per row (`jit_ptx/rows.rs`): row
/// lengths in vector groups of 4 and not, rows of rank 1 to 3 indexed by one to three axes
/// (an attention softmax over the last of four), per-row maps, intermediates
/// that are results, broadcast and transposed inputs, integer, bool and f64 reductions, mean.
const ROW_GROUPS: &[(&str, ScaleArgs)] = &[
    (
        "func @lse(%x: f32[257, 1001]) -> (f32[257, 1], f32[257, 1001], f32[257, 1]) {
           %m = max %x {axes = [1], keepdims = true}
           %d = sub %x, %m
           %e = exp %d
           %s = sum %e {axes = [1], keepdims = true}
           %l = log %s
           %y = add %l, %m
           return %y, %e, %s
         }",
        &[(kiln::ir::DType::F32, &[257, 1001])],
    ),
    (
        "func @norm(%x: f64[130, 6, 68], %g: f64[68], %b: f64[6, 1]) -> (f64[130, 6, 68]) {
           %mu = mean %x {axes = [1, 2], keepdims = true}
           %c = sub %x, %mu
           %q = mul %c, %c
           %v = mean %q {axes = [1, 2], keepdims = true}
           %eps = const 0.00001 : f64[]
           %ve = add %v, %eps
           %r = rsqrt %ve
           %n = mul %c, %r
           %s = mul %n, %g
           %y = add %s, %b
           return %y
         }",
        &[
            (kiln::ir::DType::F64, &[130, 6, 68]),
            (kiln::ir::DType::F64, &[68]),
            (kiln::ir::DType::F64, &[6, 1]),
        ],
    ),
    (
        "func @attention(%x: f32[3, 4, 50, 64], %mask: f32[50, 64]) -> (f32[3, 4, 50, 64]) {
           %y = add %x, %mask
           %m = max %y {axes = [3], keepdims = true}
           %d = sub %y, %m
           %e = exp %d
           %s = sum %e {axes = [3], keepdims = true}
           %p = div %e, %s
           return %p
         }",
        &[
            (kiln::ir::DType::F32, &[3, 4, 50, 64]),
            (kiln::ir::DType::F32, &[50, 64]),
        ],
    ),
    (
        "func @range(%x: f64[5, 7, 9]) -> (f64[5, 7]) {
           %m = max %x {axes = [2]}
           %n = min %x {axes = [2]}
           %r = sub %m, %n
           return %r
         }",
        &[(kiln::ir::DType::F64, &[5, 7, 9])],
    ),
    (
        "func @transposed(%x: f32[600, 300]) -> (f32[300, 600]) {
           %t = transpose %x {perm = [1, 0]}
           %m = max %t {axes = [1], keepdims = true}
           %d = sub %t, %m
           %e = exp %d
           %s = sum %e {axes = [1], keepdims = true}
           %y = div %e, %s
           return %y
         }",
        &[(kiln::ir::DType::F32, &[600, 300])],
    ),
    (
        "func @ints(%a: i32[90, 2052], %k: bool[90, 2052]) -> (i64[90, 1], i32[90], bool[90, 1]) {
           %m = max %a {axes = [1], keepdims = true}
           %n = min %a {axes = [1]}
           %d = sub %a, %m
           %s = sum %d {axes = [1], keepdims = true}
           %z = cast %s {to = i64}
           %w = any %k {axes = [1], keepdims = true}
           %i = max %a {axes = [1]}
           %r = sub %i, %n
           return %z, %r, %w
         }",
        &[
            (kiln::ir::DType::I32, &[90, 2052]),
            (kiln::ir::DType::Bool, &[90, 2052]),
        ],
    ),
];

#[test]
fn row_groups_are_one_kernel_each_and_agree_with_the_interpreter_on_the_gpu() {
    let gpu = gpu_or_skip();
    let compile: Compiler = if gpu {
        kiln::jit_ptx::runtime::compile_func
    } else {
        kiln::jit_ptx::host::compile_func
    };
    for (src, args) in ROW_GROUPS {
        let m = ptx(src, "sm_90");
        let kinds: Vec<KernelKind> = m.kernels.iter().map(|k| k.kind).collect();
        assert!(
            matches!(kinds.as_slice(), [KernelKind::Rows(_)]),
            "{kinds:?}: {src}"
        );
        agrees_at_scale(src, args, gpu, compile);
    }
}

/// The interpreter's function of `func` (the reference), and the device runtimes to compare
/// with it: the host device, and the GPU when there is one.
fn interp_and_devices(func: &Func) -> (kiln::Function, Vec<(&'static str, Compiler)>) {
    let reference = kiln::compile_func(
        func.clone(),
        &CompileOptions {
            backend: Some(kiln::Backend::Interp),
            ..CompileOptions::default()
        },
    )
    .unwrap();
    let mut compilers: Vec<(&str, Compiler)> = vec![(
        "host device",
        kiln::jit_ptx::runtime::compile_func_on_host_device,
    )];
    if gpu_or_skip() {
        compilers.push(("GPU", kiln::jit_ptx::runtime::compile_func));
    }
    (reference, compilers)
}

/// Uniform, normal and Bernoulli ops are GPU kernels (the stream expanded over the emitter,
/// Box-Muller with kiln's `log` and `cos`, the counter mixed in on the device) with the
/// interpreter's bits, over enough elements to cross blocks. On the host device, and on the
/// GPU when there is one.
#[test]
fn random_ops_give_the_interpreters_bits_on_the_gpu_and_the_host_device() {
    let src = "func @draw(%k: i64[], %x: f32[37, 5]) -> (f32[37, 5], f64[9, 4], f32[101], bool[50], i32[50], f64[7], f32[37, 5], f64[1000], f64[333], f32[2048]) {
  %u = uniform {seed = 7, shape = [37, 5], dtype = f32, low = -2.0, high = 3.0}
  %ux = add %u, %x
  %u64 = uniform %k {seed = 8, shape = [9, 4], dtype = f64, low = 0.5, high = 1.5}
  %n = normal %k {seed = 9, shape = [101], dtype = f32, mean = 1.0, std = 0.5}
  %b = bernoulli %k {seed = 11, shape = [50], dtype = bool, p = 0.3}
  %bi = bernoulli {seed = 12, shape = [50], dtype = i32, p = 0.7}
  %bf = bernoulli {seed = 13, shape = [7], dtype = f64, p = 0.5}
  %big = uniform %k {seed = 14, shape = [1000], dtype = f64, low = 0.0, high = 1.0}
  %n64 = normal %k {seed = 15, shape = [333], dtype = f64, mean = -1.0, std = 2.0}
  %nb = normal {seed = 16, shape = [2048], dtype = f32, mean = 0.0, std = 1.0}
  return %ux, %u64, %n, %b, %bi, %bf, %u, %big, %n64, %nb
}";
    let func = parse("draw.kir", src).unwrap().remove(0);
    let m = compile_ptx(&func, "sm_90", &DumpOptions::default()).unwrap();
    let randoms = m
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Random)
        .count();
    assert_eq!(randoms, 9, "every random op is a kernel");
    let (reference, compilers) = interp_and_devices(&func);
    for (place, compile) in compilers {
        let f = compile(func.clone(), true).unwrap();
        for k in [0i64, 1, -5, 1 << 40] {
            let inputs = [
                kiln::Tensor::I64(ndarray::arr0(k).into_dyn()),
                common::normal_values(kiln::DType::F32, &[37, 5], 3, 1.0),
            ];
            let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            let got = f.call(&refs).unwrap();
            let want = reference.call(&refs).unwrap();
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.bit_eq(w),
                    "{place}, counter {k}, output {o}: {g:?} != {w:?}"
                );
            }
        }
    }
}

/// Slices are views of device arrays (an offset, negative strides for a reversed axis) that
/// kernels, products and downloads read where they are: on the host device, and on the GPU
/// when there is one, against the interpreter.
#[test]
fn slices_are_views_that_kernels_and_products_read_on_the_gpu_and_the_host_device() {
    let src = "func @s(%x: f32[6, 40], %w: f32[40, 8]) -> (f32[5, 40], f32[5, 40], f32[5], f32[2, 8], f32[3, 20], f32[6, 40]) {
  %a = slice %x {starts = [1, null], stops = [null, null], steps = [1, -1]}
  %e = exp %a
  %m = sum %a {axes = [1]}
  %r = slice %x {starts = [1], stops = [3], steps = [1]}
  %p = matmul %r, %w
  %q = slice %x {starts = [5, 1], stops = [null, null], steps = [-2, 2]}
  %t = slice %x {starts = [null], stops = [null], steps = [-1]}
  %u = add %t, %x
  return %a, %e, %m, %p, %q, %u
}";
    let func = parse("s.kir", src).unwrap().remove(0);
    // A view may start anywhere in its buffer: the vector groups test the inputs' addresses.
    let m = compile_ptx(&func, "sm_90", &DumpOptions::default()).unwrap();
    assert!(
        m.llvm.contains("ptrtoint") && m.llvm.contains("aligned"),
        "{}",
        m.llvm
    );
    let (reference, compilers) = interp_and_devices(&func);
    let inputs = [
        common::normal_values(kiln::DType::F32, &[6, 40], 5, 1.0),
        common::normal_values(kiln::DType::F32, &[40, 8], 6, 1.0),
    ];
    let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    let want = reference.call(&refs).unwrap();
    for (place, compile) in compilers {
        for optimize in [false, true] {
            let got = compile(func.clone(), optimize)
                .unwrap()
                .call(&refs)
                .unwrap();
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(common::close(g, w), "{place}, output {o}: {g:?} != {w:?}");
            }
        }
    }
}

/// `concat` as one kernel: every dtype, ranks 1 to 5, along every axis, 1 to 4 inputs of
/// different lengths (an empty one among them), transposed and reversed inputs (views), the
/// result joined again: the interpreter's bits on the host oracle, the host device and the
/// GPU.
#[test]
fn concat_is_one_kernel_giving_the_interpreters_bits_on_the_gpu() {
    let mut cases = 0;
    for (c, dtype) in kiln::DType::ALL.iter().enumerate() {
        let rank = 1 + c % 5;
        for axis in 0..rank {
            let parts = 1 + (c + axis) % 4;
            let ty = |len: usize| {
                let dims: Vec<String> = (0..rank)
                    .map(|d| if d == axis { len } else { 2 + d }.to_string())
                    .collect();
                format!("{dtype}[{}]", dims.join(", "))
            };
            let lens: Vec<usize> = (0..parts).map(|p| [3, 1, 0, 2][p]).collect();
            let total: usize = lens.iter().sum();
            let params: Vec<String> = lens
                .iter()
                .enumerate()
                .map(|(p, &l)| format!("%p{p}: {}", ty(l)))
                .collect();
            // The first input reversed along the axis (a view with a negative stride).
            let args: Vec<String> = (0..parts)
                .map(|p| {
                    if p == 0 {
                        "%r".into()
                    } else {
                        format!("%p{p}")
                    }
                })
                .collect();
            let steps: Vec<String> = (0..rank)
                .map(|d| if d == axis { "-1" } else { "1" }.to_string())
                .collect();
            let nulls = vec!["null"; rank].join(", ");
            let src = format!(
                "func @cat({}) -> ({}, {}) {{
  %r = slice %p0 {{starts = [{nulls}], stops = [{nulls}], steps = [{}]}}
  %y = concat {} {{axis = {axis}}}
  %z = concat %y, %y {{axis = 0}}
  return %y, %z
}}",
                params.join(", "),
                ty(total),
                {
                    let dims: Vec<String> = (0..rank)
                        .map(|d| match (d == axis, d == 0) {
                            (true, true) => (2 * total).to_string(),
                            (true, false) => total.to_string(),
                            (false, true) => (2 * (2 + d)).to_string(),
                            (false, false) => (2 + d).to_string(),
                        })
                        .collect();
                    format!("{dtype}[{}]", dims.join(", "))
                },
                steps.join(", "),
                args.join(", "),
            );
            let func = parse("cat.kir", &src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
            let func = func.into_iter().next().unwrap();
            let m = ptx(&src, "sm_90");
            let concats = m
                .kernels
                .iter()
                .filter(|k| matches!(k.kind, KernelKind::Concat(_)))
                .count();
            assert_eq!(concats, 2, "{src}");
            let inputs: Vec<kiln::Tensor> = func
                .params
                .iter()
                .enumerate()
                .map(|(k, &p)| {
                    let shape = func.ty(p).known_shape().unwrap();
                    filled(*dtype, &shape, 11 + k as u64)
                })
                .collect();
            let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            let (reference, mut compilers) = interp_and_devices(&func);
            compilers.push(("host oracle", kiln::jit_ptx::host::compile_func));
            let want = reference.call(&refs).unwrap();
            for (place, compile) in compilers {
                let got = compile(func.clone(), true).unwrap().call(&refs).unwrap();
                for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(g.bit_eq(w), "{place}, output {o}: {g:?} != {w:?}\n{src}");
                }
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 18, "every dtype, every axis");
}
