//! The `kiln` command-line tool (CONTRACTS.md §2): run, differentiate, optimize and compile
//! `.kir` files. Errors are one line on stderr and exit code 1; output files are written whole
//! or not at all.

use kiln::ir::text::{parse, print_func};
use kiln::ir::{DType, Func};
use kiln::{compile_func, Backend, CompileOptions, Error, Tensor};
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage:
  kiln run F.kir --input NAME=PATH.npy ... [--out-dir DIR] [--backend interp|cpu|gpu] [--func NAME]
  kiln grad F.kir --wrt NAME,NAME [--output K] [--func NAME]
  kiln opt F.kir [--func NAME]
  kiln aot F.kir -o F.o [--header F.h] [--target TRIPLE] [--func NAME] [--symbol NAME]
  kiln ptx F.kir [--arch sm_90] [--func NAME]";

fn main() -> ExitCode {
    // A bug must still end as one line and exit 1, not a backtrace.
    std::panic::set_hook(Box::new(|_| {}));
    let args: Vec<String> = std::env::args().skip(1).collect();
    match std::panic::catch_unwind(|| run(&args)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(msg)) => {
            eprintln!("kiln: {msg}");
            ExitCode::from(1)
        }
        Err(p) => {
            eprintln!(
                "kiln: internal error: {}",
                kiln::runtime::interp::panic_message(&*p)
            );
            ExitCode::from(2)
        }
    }
}

/// Flags of one command: `--name value` pairs, `-o value`, and positional arguments.
struct Flags {
    pos: Vec<String>,
    named: Vec<(String, String)>,
}

impl Flags {
    fn parse(args: &[String], known: &[&str]) -> Result<Flags, String> {
        let (mut pos, mut named) = (Vec::new(), Vec::new());
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a.starts_with('-') && a.len() > 1 {
                if !known.contains(&a.as_str()) {
                    return Err(format!("unknown option `{a}`\n{USAGE}"));
                }
                let v = it.next().ok_or_else(|| format!("`{a}` needs a value"))?;
                named.push((a.clone(), v.clone()));
            } else {
                pos.push(a.clone());
            }
        }
        Ok(Flags { pos, named })
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.named
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn all(&self, name: &str) -> Vec<&str> {
        self.named
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn file(&self) -> Result<&str, String> {
        match self.pos.as_slice() {
            [f] => Ok(f),
            [] => Err(format!("missing the .kir file\n{USAGE}")),
            more => Err(format!("one .kir file expected, got {}", more.len())),
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err(USAGE.into());
    };
    match cmd.as_str() {
        "run" => cmd_run(&Flags::parse(
            rest,
            &["--input", "--out-dir", "--backend", "--func"],
        )?),
        "grad" => cmd_grad(&Flags::parse(rest, &["--wrt", "--output", "--func"])?),
        "opt" => {
            let f = Flags::parse(rest, &["--func"])?;
            let func = load(f.file()?, f.get("--func"))?;
            print!(
                "{}",
                print_func(&kiln::compile::optimize(func, &CompileOptions::default()))
            );
            Ok(())
        }
        "aot" => cmd_aot(&Flags::parse(
            rest,
            &["-o", "--header", "--target", "--func", "--symbol"],
        )?),
        "ptx" => cmd_ptx(&Flags::parse(rest, &["--arch", "--func"])?),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    }
}

/// Parses and verifies `path` and returns the function named `func` (or the first).
fn load(path: &str, func: Option<&str>) -> Result<Func, String> {
    let src = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let funcs = parse(path, &src).map_err(|es| {
        es.iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\nkiln: ")
    })?;
    let f = match func {
        None => funcs
            .into_iter()
            .next()
            .ok_or_else(|| format!("{path}: no function"))?,
        Some(name) => funcs
            .into_iter()
            .find(|f| f.name == name)
            .ok_or_else(|| format!("{path}: no function named @{name}"))?,
    };
    Ok(f)
}

fn read_npy(path: &Path, dtype: DType) -> Result<Tensor, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |e: ndarray_npy::ReadNpyError| {
        format!("{}: not an .npy array of {dtype}: {e}", path.display())
    };
    Ok(match dtype {
        DType::Bool => Tensor::Bool(ArrayD::<bool>::read_npy(file).map_err(bad)?),
        DType::I32 => Tensor::I32(ArrayD::<i32>::read_npy(file).map_err(bad)?),
        DType::I64 => Tensor::I64(ArrayD::<i64>::read_npy(file).map_err(bad)?),
        DType::F32 => Tensor::F32(ArrayD::<f32>::read_npy(file).map_err(bad)?),
        DType::F64 => Tensor::F64(ArrayD::<f64>::read_npy(file).map_err(bad)?),
    })
}

/// Writes `t` to `path` through a temporary file, so that `path` exists only when complete.
fn write_npy(path: &Path, t: &Tensor) -> Result<(), String> {
    let tmp = path.with_extension(format!("npy.tmp{}", std::process::id()));
    let res = (|| -> Result<(), String> {
        let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let w = std::io::BufWriter::new(file);
        let r = match t {
            Tensor::Bool(a) => a.write_npy(w),
            Tensor::I32(a) => a.write_npy(w),
            Tensor::I64(a) => a.write_npy(w),
            Tensor::F32(a) => a.write_npy(w),
            Tensor::F64(a) => a.write_npy(w),
        };
        r.map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

fn cmd_run(f: &Flags) -> Result<(), String> {
    let path = f.file()?;
    let func = load(path, f.get("--func"))?;
    // Without --backend, KILN_BACKEND or the default decides.
    let backend: Option<Backend> = f
        .get("--backend")
        .map(str::parse)
        .transpose()
        .map_err(|e: Error| e.to_string())?;
    let mut given: Vec<(String, PathBuf)> = Vec::new();
    for spec in f.all("--input") {
        let (name, p) = spec
            .split_once('=')
            .ok_or_else(|| format!("--input `{spec}`: expected NAME=PATH.npy"))?;
        if given.iter().any(|(n, _)| n == name) {
            return Err(format!("--input: `{name}` is given twice"));
        }
        given.push((name.trim_start_matches('%').to_string(), PathBuf::from(p)));
    }
    let mut inputs = Vec::new();
    for (i, &p) in func.params.iter().enumerate() {
        let name = func
            .name_of(p)
            .map(str::to_string)
            .unwrap_or_else(|| i.to_string());
        let (_, file) = given.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            format!(
                "{path}: @{} needs the input `{name}` (--input {name}=PATH.npy)",
                func.name
            )
        })?;
        inputs.push(read_npy(file, func.ty(p).dtype)?);
    }
    for (n, _) in &given {
        if !func.params.iter().any(|&p| func.name_of(p) == Some(n)) {
            return Err(format!("{path}: @{} has no parameter `{n}`", func.name));
        }
    }
    let options = CompileOptions {
        backend,
        ..CompileOptions::default()
    };
    let compiled = compile_func(func, &options).map_err(|e| format!("{path}: {e}"))?;
    let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    let outs = compiled.call(&refs).map_err(|e| format!("{path}: {e}"))?;
    let dir = PathBuf::from(f.get("--out-dir").unwrap_or("."));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (i, t) in outs.iter().enumerate() {
        write_npy(&dir.join(format!("out{i}.npy")), t)?;
    }
    Ok(())
}

fn cmd_grad(f: &Flags) -> Result<(), String> {
    let path = f.file()?;
    let func = load(path, f.get("--func"))?;
    let wrt: Vec<&str> = f
        .get("--wrt")
        .ok_or("grad needs --wrt NAME,NAME")?
        .split(',')
        .map(|s| s.trim().trim_start_matches('%'))
        .collect();
    let k: usize = f
        .get("--output")
        .map(|s| {
            s.parse()
                .map_err(|_| format!("--output `{s}` is not a number"))
        })
        .transpose()?
        .unwrap_or(0);
    let g = kiln::grad::grad_func(&func, k, &wrt).map_err(|e| format!("{path}: {e}"))?;
    kiln::dump::DumpOptions::from_env().dump(&g.name, "grad", || print_func(&g));
    print!("{}", print_func(&g));
    Ok(())
}

fn cmd_aot(f: &Flags) -> Result<(), String> {
    let path = f.file()?;
    let object = f.get("-o").ok_or("aot needs -o F.o")?;
    let func = load(path, f.get("--func"))?;
    let options = kiln::aot::AotOptions {
        target: f.get("--target").map(str::to_string),
        symbol: f.get("--symbol").map(str::to_string),
        ..Default::default()
    };
    let art = kiln::aot::compile_func(&func, &options).map_err(|e| format!("{path}: {e}"))?;
    art.write(Path::new(object), f.get("--header").map(Path::new))
        .map_err(|e| e.to_string())
}

/// Prints the PTX of the optimized function (feature `gpu`).
#[cfg(feature = "gpu")]
fn cmd_ptx(f: &Flags) -> Result<(), String> {
    let path = f.file()?;
    let func = load(path, f.get("--func"))?;
    kiln::ir::verify::verify(&func).map_err(|es| format!("{path}: {}", es.join("; ")))?;
    let options = CompileOptions::default();
    options.dump.dump(&func.name, "input", || print_func(&func));
    let func = kiln::compile::optimize(func, &options);
    let arch = f.get("--arch").unwrap_or(kiln::jit_ptx::DEFAULT_ARCH);
    let m = kiln::jit_ptx::compile_ptx(&func, arch, &options.dump)
        .map_err(|e| format!("{path}: {e}"))?;
    print!("{}", m.ptx);
    Ok(())
}

/// Without the feature: one clear line (and exit 1) rather than PTX.
#[cfg(not(feature = "gpu"))]
fn cmd_ptx(f: &Flags) -> Result<(), String> {
    load(f.file()?, f.get("--func"))?;
    Err(kiln::compile::NO_GPU_FEATURE.into())
}
