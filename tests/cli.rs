//! The `kiln` command-line tool end to end: every op file of the corpus through `kiln run` on
//! .npy files, errors as one line with exit code 1, no half-written outputs, dumps.

mod common;

#[allow(dead_code)]
#[path = "../examples/custom_ops/kiln_with_ops.rs"]
mod kiln_with_ops;

use kiln::ir::text::{parse, parse_literal};
use kiln::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kiln(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(args)
        .env_remove("KILN_DUMP")
        .env_remove("KILN_DUMP_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("kiln runs")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `dir/f.kir`: `@f` computes `exp` of an f32[2].
fn exp_file(dir: &Path) -> PathBuf {
    let f = dir.join("f.kir");
    std::fs::write(
        &f,
        "func @f(%x: f32[2]) -> (f32[2]) {\n  %y = exp %x\n  return %y\n}\n",
    )
    .unwrap();
    f
}

fn write_npy(path: &Path, t: &Tensor) {
    let f = std::fs::File::create(path).unwrap();
    match t {
        Tensor::Bool(a) => a.write_npy(f),
        Tensor::I32(a) => a.write_npy(f),
        Tensor::I64(a) => a.write_npy(f),
        Tensor::F32(a) => a.write_npy(f),
        Tensor::F64(a) => a.write_npy(f),
        // ndarray-npy has no half types: kiln's own writer (checked in tests/half.rs).
        Tensor::F16(_) | Tensor::BF16(_) => {
            kiln::npy::write_all(&[(path.to_path_buf(), t)]).unwrap();
            return;
        }
    }
    .unwrap();
}

fn read_npy(path: &Path, dtype: DType) -> Tensor {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match dtype {
        DType::Bool => Tensor::Bool(ArrayD::read_npy(f).unwrap()),
        DType::I32 => Tensor::I32(ArrayD::read_npy(f).unwrap()),
        DType::I64 => Tensor::I64(ArrayD::read_npy(f).unwrap()),
        DType::F32 => Tensor::F32(ArrayD::read_npy(f).unwrap()),
        DType::F64 => Tensor::F64(ArrayD::read_npy(f).unwrap()),
        DType::F16 | DType::BF16 => kiln::npy::read(path, dtype).unwrap(),
    }
}

fn kir_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            kir_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "kir") {
            out.push(p);
        }
    }
}

/// `kiln run` with a bf16 parameter says numpy has no bf16, naming the file; an f16 one
/// reads and writes `<f2` files.
#[test]
fn bf16_parameters_are_refused_by_name() {
    let dir = tmpdir("bf16");
    let src = dir.join("f.kir");
    std::fs::write(
        &src,
        "func @f(%x: bf16[2], %h: f16[2]) -> (f16[2]) {\n  %y = cast %x {to = f16} : f16[2]\n  return %y\n}\n",
    )
    .unwrap();
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::from_elem(IxDyn(&[2]), 1.5)));
    let h = dir.join("h.npy");
    let halves = Tensor::F16(ArrayD::from_elem(IxDyn(&[2]), kiln::half::f16::ONE));
    write_npy(&h, &halves);
    let (xs, hs) = (format!("x={}", x.display()), format!("h={}", h.display()));
    let out = kiln(
        &["run", src.to_str().unwrap(), "--input", &xs, "--input", &hs],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("numpy has no bf16") && err.contains("x.npy"),
        "{err}"
    );
}

/// `kiln run --backend cpu` on every run directive of the whole file-test corpus (files that
/// must fail to parse excepted): the command-line path of the CPU backend gives the expected
/// values, and the expected errors as one line.
#[test]
fn kiln_run_on_the_cpu_backend_gives_the_expected_values_on_the_whole_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    kir_files(&root, &mut files);
    files.sort();
    let mut ran = 0;
    for file in &files {
        let src = std::fs::read_to_string(file).unwrap();
        let Ok(mut funcs) = parse("f", &src) else {
            continue;
        };
        let func = funcs.remove(0);
        // numpy has no bf16: such a function cannot be run from .npy files (the error is
        // checked in `bf16_parameters_are_refused_by_name`).
        let types = func
            .params
            .iter()
            .chain(&func.outputs)
            .map(|&v| func.ty(v).dtype);
        if types.clone().any(|d| d == DType::BF16) {
            continue;
        }
        for line in src.lines().filter_map(|l| l.strip_prefix("; run:")) {
            let (ins, outs) = line.split_once("->").unwrap();
            let dir = tmpdir(&format!("run{ran}"));
            let mut args: Vec<String> = vec![
                "run".into(),
                file.display().to_string(),
                "--out-dir".into(),
                dir.display().to_string(),
                "--backend".into(),
                "cpu".into(),
            ];
            for (i, (s, &p)) in common::split_top(ins).iter().zip(&func.params).enumerate() {
                let path = dir.join(format!("in{i}.npy"));
                write_npy(&path, &parse_literal(s, func.ty(p)).unwrap());
                args.push("--input".into());
                args.push(format!("{}={}", func.name_of(p).unwrap(), path.display()));
            }
            let out = kiln(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
            let outs = outs.trim();
            if let Some(pat) = outs.strip_prefix("error:") {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(1), "{}: {err}", file.display());
                assert!(
                    err.contains(pat.trim()) && err.lines().count() == 1,
                    "{}: {err}",
                    file.display()
                );
                assert!(
                    !dir.join("out0.npy").exists(),
                    "an output was written for a failed run"
                );
            } else {
                assert!(
                    out.status.success(),
                    "{}: {}",
                    file.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                for (k, w) in common::split_top(outs).iter().enumerate() {
                    let ty = func.ty(func.outputs[k]);
                    let got = read_npy(&dir.join(format!("out{k}.npy")), ty.dtype);
                    let want = parse_literal(w, ty).unwrap();
                    assert!(
                        common::close(&got, &want),
                        "{} output {k}: {got:?} vs {want:?}",
                        file.display()
                    );
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
            ran += 1;
        }
    }
    assert!(ran >= 150, "only {ran} runs");
}

#[test]
fn user_errors_are_one_line_and_exit_1() {
    let dir = tmpdir("errors");
    let bad = dir.join("bad.kir");
    std::fs::write(
        &bad,
        "func @f(%x: f32[2]) -> (f32[2]) {\n  %y = add %x, %nope\n  return %y\n}\n",
    )
    .unwrap();
    for args in [
        vec!["run", bad.to_str().unwrap()],
        vec!["opt", bad.to_str().unwrap()],
        vec!["run", "/no/such/file.kir"],
        vec!["frobnicate"],
        vec!["run"],
        vec!["run", bad.to_str().unwrap(), "--bogus", "1"],
    ] {
        let out = kiln(&args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("kiln: ") && !err.contains("panicked") && !err.contains("backtrace"),
            "{args:?}: {err}"
        );
    }
    let out = kiln(&["opt", bad.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.kir:2:16: %nope is used before it is defined")
            && err.lines().count() == 1,
        "{err}"
    );
    let good = dir.join("good.kir");
    std::fs::write(
        &good,
        "func @f(%x: f32[2]) -> (f32[2]) {\n  %y = exp %x\n  return %y\n}\n",
    )
    .unwrap();
    let out = kiln(
        &[
            "run",
            good.to_str().unwrap(),
            "--out-dir",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs the input `x`"));
    let wrong = dir.join("wrong.npy");
    write_npy(&wrong, &Tensor::F64(ArrayD::zeros(ndarray::IxDyn(&[2]))));
    let out = kiln(
        &[
            "run",
            good.to_str().unwrap(),
            "--input",
            &format!("x={}", wrong.display()),
        ],
        &[],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("where f32"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let short = dir.join("short.npy");
    write_npy(&short, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[3]))));
    let out = kiln(
        &[
            "run",
            good.to_str().unwrap(),
            "--input",
            &format!("x={}", short.display()),
            "--out-dir",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("input `x`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.join("out0.npy").exists());
    // One parameter given twice, once spelled with its `%`: refused, not one file ignored.
    let out = kiln(
        &[
            "run",
            good.to_str().unwrap(),
            "--input",
            &format!("x={}", short.display()),
            "--input",
            &format!("%x={}", wrong.display()),
        ],
        &[],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`x` is given twice"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ptx: PTX with the `gpu` feature, one line naming the feature without it.
    let out = kiln(&["ptx", good.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "gpu") {
        assert!(out.status.success(), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(1));
        assert!(
            err.contains("--features gpu") && err.lines().count() == 1,
            "{err}"
        );
    }
    // aot without -o names what is missing and writes nothing.
    let out = kiln(&["aot", good.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o"), "aot");
}

/// `kiln opt` dumps the function it reads (`input`), and the interpreter its plan
/// (`schedule`): every stage appears wherever it applies.
#[test]
fn opt_dumps_its_input_and_the_interpreter_its_schedule() {
    let dir = tmpdir("dump-opt");
    let f = exp_file(&dir);
    let out = kiln(&["opt", f.to_str().unwrap()], &[("KILN_DUMP", "input")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains(";; ---- @f: input ----") && err.contains("exp %x"),
        "{err}"
    );
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2]))));
    let input = format!("x={}", x.display());
    let args = [
        "run",
        f.to_str().unwrap(),
        "--input",
        &input,
        "--out-dir",
        dir.to_str().unwrap(),
        "--backend",
        "interp",
    ];
    let out = kiln(&args, &[("KILN_DUMP", "schedule")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && err.contains(";; ---- @f: schedule ----")
            && err.contains("= map exp %0"),
        "{err}"
    );
}

/// `kiln aot` dumps the machine code it writes into the object (`asm`): its kernels and the
/// entry point, as Cranelift emitted them.
#[test]
fn aot_dumps_the_machine_code_of_its_object() {
    let dir = tmpdir("dump-aot");
    let f = exp_file(&dir);
    let obj = dir.join("f.o");
    let args = ["aot", f.to_str().unwrap(), "-o", obj.to_str().unwrap()];
    let out = kiln(&args, &[("KILN_DUMP", "asm,clif")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && obj.exists(), "{err}");
    let asm = &err[err.find(";; ---- @f: asm ----").expect("an asm dump")..];
    for function in ["function f_k0:", "function f:"] {
        assert!(asm.contains(function) && asm.contains("ret"), "{asm}");
    }
    // The CLIF dump names the functions it calls, as the JIT's does.
    let clif = &err[err.find(";; ---- @f: clif ----").expect("a clif dump")..];
    assert!(clif.contains("%f_k0"), "{clif}");
}

#[test]
fn dumps_show_each_stage_on_stderr_or_in_files() {
    let dir = tmpdir("dump");
    let f = exp_file(&dir);
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2]))));
    let args = [
        "run",
        f.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--out-dir",
        dir.to_str().unwrap(),
        // The CPU backend's stages (kernels, clif, asm) exist only there.
        "--backend",
        "cpu",
    ];
    let out = kiln(&args, &[("KILN_DUMP", "all")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && err.contains(";; ---- @f: input ----")
            && err.contains("%y = exp %x : f32[2]"),
        "{err}"
    );
    for stage in [
        "egraph", "fused", "inplace", "schedule", "kernels", "clif", "asm", "dot",
    ] {
        assert!(
            err.contains(&format!(";; ---- @f: {stage} ----")),
            "no {stage} dump in:\n{err}"
        );
    }
    // The machine code of the kernel, as Cranelift emitted it.
    let asm = &err[err.find(";; ---- @f: asm ----").unwrap()..];
    assert!(
        asm.contains("function f_k0:") && asm.contains("ret"),
        "{asm}"
    );
    // The plan in kernel IR: the exp is a map kernel.
    let plan = &err[err.find(";; ---- @f: schedule ----").unwrap()..];
    assert!(
        plan.contains("plan @f(%0) {") && plan.contains("= map exp %0 {"),
        "{plan}"
    );
    let dumps = dir.join("dumps");
    let out = kiln(
        &args,
        &[
            ("KILN_DUMP", "input"),
            ("KILN_DUMP_DIR", dumps.to_str().unwrap()),
        ],
    );
    assert!(out.status.success() && out.stderr.is_empty());
    let text = std::fs::read_to_string(dumps.join("f.00.input.txt")).unwrap();
    assert!(text.starts_with("func @f(%x: f32[2])"), "{text}");
    let out = kiln(&["grad", f.to_str().unwrap(), "--wrt", "x"], &[]);
    assert_eq!(out.status.code(), Some(1), "the output is not a scalar");
    let g = dir.join("g.kir");
    std::fs::write(
        &g,
        "func @g(%x: f64[2]) -> (f64[]) {\n  %s = mul %x, %x\n  %c = sum %s\n  return %c\n}\n",
    )
    .unwrap();
    let out = kiln(&["grad", g.to_str().unwrap(), "--wrt", "x"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("func @g_grad(%x: f64[2]) -> (f64[], f64[2])"),
        "{text}"
    );
    assert!(parse("printed", &text).is_ok());
}

#[cfg(feature = "gpu")]
#[test]
fn ptx_prints_the_kernels_for_the_chosen_arch_and_dumps_llvm_and_ptx() {
    let dir = tmpdir("ptx");
    let f = dir.join("f.kir");
    std::fs::write(
        &f,
        "func @f(%x: f32[?, 4]) -> (f32[?, 1]) {\n  %e = exp %x\n  %s = sum %e {axes = [1], keepdims = true}\n  return %s\n}\n",
    )
    .unwrap();
    let path = f.to_str().unwrap();
    for (args, arch) in [
        (vec!["ptx", path], "sm_90"),
        (vec!["ptx", path, "--arch", "sm_80"], "sm_80"),
    ] {
        let out = kiln(&args, &[]);
        let ptx = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(ptx.contains(&format!(".target {arch}\n")), "{ptx}");
        assert!(ptx.contains(".address_size 64"), "{ptx}");
        // exp fused into the sum: one reduce kernel.
        assert_eq!(ptx.matches(".entry ").count(), 1, "{ptx}");
        assert!(ptx.contains("shfl.sync.bfly"), "{ptx}");
    }
    let out = kiln(&["ptx", path, "--arch", "sm_52"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("sm_52") && err.lines().count() == 1, "{err}");
    // Dump stages: on stderr, and as files.
    let out = kiln(&["ptx", path], &[("KILN_DUMP", "llvm,ptx")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(";; ---- @f: llvm ----") && err.contains("define void @f_0_reduce("),
        "{err}"
    );
    assert!(
        err.contains(";; ---- @f: ptx ----") && err.contains(".visible .entry f_0_reduce("),
        "{err}"
    );
    let dumps = dir.join("dumps");
    let out = kiln(
        &["ptx", path],
        &[
            ("KILN_DUMP", "all"),
            ("KILN_DUMP_DIR", dumps.to_str().unwrap()),
        ],
    );
    assert!(out.status.success());
    for stage in ["00.input", "05.schedule", "08.llvm", "09.ptx"] {
        assert!(dumps.join(format!("f.{stage}.txt")).exists(), "{stage}");
    }
    // Running on the GPU: a clean one-line error on a machine without a CUDA driver.
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2, 4]))));
    let out = kiln(
        &[
            "run",
            path,
            "--input",
            &format!("x={}", x.display()),
            "--backend",
            "gpu",
            "--out-dir",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    if kiln::jit_ptx::cuda::device().is_ok() {
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(dir.join("out0.npy").exists());
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    if !kiln::jit_ptx::runtime::driver_present() {
        assert!(err.contains("no CUDA driver found"), "{err}");
    }
    assert!(!dir.join("out0.npy").exists());
}

#[cfg(not(feature = "gpu"))]
#[test]
fn the_gpu_backend_names_the_missing_feature() {
    let dir = tmpdir("nogpu");
    let f = exp_file(&dir);
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2]))));
    let out = kiln(
        &[
            "run",
            f.to_str().unwrap(),
            "--input",
            &format!("x={}", x.display()),
            "--backend",
            "gpu",
            "--out-dir",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--features gpu") && err.lines().count() == 1,
        "{err}"
    );
}

/// Runs `kiln` and returns (exit code, stderr), asserting the error is one line, no backtrace.
fn one_line_error(args: &[&str]) -> String {
    let out = kiln(args, &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.starts_with("kiln: ") && err.trim_end().lines().count() == 1,
        "{args:?}: {err}"
    );
    err
}

#[test]
fn hostile_inputs_end_in_one_line() {
    let dir = tmpdir("hostile");
    let d = dir.to_str().unwrap();
    // A result larger than memory.
    let zeros = dir.join("zeros.kir");
    std::fs::write(
        &zeros,
        "func @f() -> (f32[100000000000]) {\n  %z = zeros {shape = [100000000000], dtype = f32}\n  return %z\n}\n",
    )
    .unwrap();
    let e = one_line_error(&["run", zeros.to_str().unwrap(), "--out-dir", d]);
    assert!(e.contains("`z`") && e.contains("400.0 GB"), "{e}");
    // An .npy whose header claims 1e11 elements, and one whose header is garbage.
    let g = dir.join("g.kir");
    std::fs::write(
        &g,
        "func @f(%x: f32[?]) -> (f32[]) {\n  %s = sum %x\n  return %s\n}\n",
    )
    .unwrap();
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000,), }";
    let mut huge = b"\x93NUMPY\x01\x00".to_vec();
    huge.extend_from_slice(&(header.len() as u16).to_le_bytes());
    huge.extend_from_slice(header.as_bytes());
    huge.extend_from_slice(&[0; 16]);
    std::fs::write(dir.join("huge.npy"), &huge).unwrap();
    let input = format!("x={}", dir.join("huge.npy").display());
    let e = one_line_error(&[
        "run",
        g.to_str().unwrap(),
        "--input",
        &input,
        "--out-dir",
        d,
    ]);
    assert!(e.contains("100000000000") && e.contains("16"), "{e}");
    std::fs::write(
        dir.join("bad.npy"),
        b"\x93NUMPY\x01\x00\x08\x00{oops}  garbage",
    )
    .unwrap();
    let input = format!("x={}", dir.join("bad.npy").display());
    one_line_error(&[
        "run",
        g.to_str().unwrap(),
        "--input",
        &input,
        "--out-dir",
        d,
    ]);
    // Deep nesting in the text form.
    let deep = dir.join("deep.kir");
    std::fs::write(
        &deep,
        format!(
            "func @f() -> (f32[]) {{\n  %c = const {}1.0{} : f32[]\n  return %c\n}}\n",
            "[".repeat(50_000),
            "]".repeat(50_000)
        ),
    )
    .unwrap();
    one_line_error(&["opt", deep.to_str().unwrap()]);
    // One wrong annotation is one error.
    let ann = dir.join("ann.kir");
    std::fs::write(
        &ann,
        "func @f(%x: f32[3]) -> (f32[3]) {\n  %y = exp %x : f32[4]\n  return %y\n}\n",
    )
    .unwrap();
    let e = one_line_error(&["opt", ann.to_str().unwrap()]);
    assert!(e.contains("ann.kir:2:"), "{e}");
    // A negative or missing output index names the valid ones.
    let e = one_line_error(&["grad", g.to_str().unwrap(), "--wrt", "x", "--output", "-1"]);
    assert!(e.contains("index 0"), "{e}");
}

#[test]
fn runtime_errors_name_the_op_once_the_value_and_its_line() {
    let dir = tmpdir("rterr");
    let f = dir.join("r.kir");
    std::fs::write(
        &f,
        "func @f(%x: f32[?, ?]) -> (f32[5]) {\n  %r = reshape %x {shape = [5]}\n  return %r\n}\n",
    )
    .unwrap();
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2, 3]))));
    let input = format!("x={}", x.display());
    for backend in ["interp", "cpu"] {
        let e = one_line_error(&[
            "run",
            f.to_str().unwrap(),
            "--input",
            &input,
            "--backend",
            backend,
            "--out-dir",
            dir.to_str().unwrap(),
        ]);
        assert!(
            !e.contains("reshape: reshape") && e.contains("reshape computing"),
            "{e}"
        );
        assert!(e.contains("`r`") && e.contains("r.kir:2:"), "{e}");
    }
}

#[test]
fn outputs_are_all_written_or_none() {
    let dir = tmpdir("allornone");
    let f = dir.join("two.kir");
    std::fs::write(
        &f,
        "func @f(%x: f32[2]) -> (f32[2], f32[2]) {\n  %a = exp %x\n  %b = neg %x\n  return %a, %b\n}\n",
    )
    .unwrap();
    let x = dir.join("x.npy");
    write_npy(&x, &Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[2]))));
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("out1.npy")).unwrap();
    let input = format!("x={}", x.display());
    one_line_error(&[
        "run",
        f.to_str().unwrap(),
        "--input",
        &input,
        "--out-dir",
        out.to_str().unwrap(),
    ]);
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        vec!["out1.npy".to_string()],
        "only the directory in the way stays"
    );
}

#[test]
fn an_interrupted_write_leaves_no_file_behind() {
    let dir = tmpdir("sigterm");
    let f = dir.join("big.kir");
    // 200M f32 (800 MB) to write: long enough to be interrupted in the middle.
    std::fs::write(
        &f,
        "func @f() -> (f32[200000000], f32[2]) {\n  %z = ones {shape = [200000000], dtype = f32}\n  %s = zeros {shape = [2], dtype = f32}\n  return %z, %s\n}\n",
    )
    .unwrap();
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            f.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    // Wait for the temporary file to appear (the write has started), then interrupt.
    let started = std::time::Instant::now();
    let mut seen = false;
    while started.elapsed() < std::time::Duration::from_secs(60) {
        let any = std::fs::read_dir(&out)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().contains(".tmp"))
            })
            .unwrap_or(false);
        if any {
            seen = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = child.wait().unwrap();
    let left: Vec<String> = std::fs::read_dir(&out)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if seen && !status.success() {
        assert!(left.is_empty(), "left behind: {left:?}");
    } else {
        // The run finished before the signal: then every output is complete.
        assert!(left.iter().all(|n| !n.contains(".tmp")), "{left:?}");
    }
}

/// A `kiln` built with custom ops (`kiln::cli::main_with`, the `kiln_with_ops` example) runs
/// files that name them; without them registered, the file's error names the op.
#[test]
fn a_kiln_built_with_custom_ops_runs_files_that_use_them() {
    let dir = tmpdir("with-ops");
    let f = dir.join("t.kir");
    std::fs::write(
        &f,
        "func @f(%x: f32[2, 3]) -> (f32[3], f32[3]) {\n  %a, %b = custom \"tear\" %x {dims = [1]}\n  \
         %c = custom \"scale\" %b {factor = [2.0]}\n  return %a, %c\n}\n",
    )
    .unwrap();
    let x = dir.join("x.npy");
    let xs = ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 3]), (0..6).map(|i| i as f32).collect());
    write_npy(&x, &Tensor::F32(xs.unwrap()));
    let args: Vec<String> = [
        "run",
        f.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--out-dir",
        dir.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let e = kiln::cli::run(&args).unwrap_err();
    assert!(
        e.contains("t.kir:2:") && e.contains("no custom op named \"tear\""),
        "{e}"
    );
    kiln_with_ops::registry().install();
    kiln::cli::run(&args).unwrap();
    let read = |name: &str| {
        let f = std::fs::File::open(dir.join(name)).unwrap();
        ArrayD::<f32>::read_npy(f)
            .unwrap()
            .into_raw_vec_and_offset()
            .0
    };
    assert_eq!(read("out0.npy"), vec![0.0, 1.0, 2.0]);
    assert_eq!(read("out1.npy"), vec![6.0, 8.0, 10.0]);
    // A factory's refusal is the file's error.
    std::fs::write(
        &f,
        "func @f(%x: f32[2, 3]) -> (f32[3]) {\n  %c = custom \"scale\" %x {factor = [1.0, 2.0]}\n  return %c\n}\n",
    )
    .unwrap();
    let e = kiln::cli::run(&args).unwrap_err();
    assert!(
        e.contains("t.kir:2:") && e.contains("scale needs `factor = [x]`"),
        "{e}"
    );
}
