//! The `kiln` command-line tool (docs/reference/cli.md): run, differentiate, optimize and compile
//! `.kir` files. Errors are one line on stderr and exit code 1; output files are written whole
//! or not at all.
//!
//! It is a library entry point so that a crate with custom ops can build its own `kiln` that
//! knows them by name in the text form (as `mlir-opt` is built with a user's dialects):
//! `kiln::cli::main_with(Registry::new().op("tear", tear_from_attrs))`, where each factory
//! builds the op from the attributes written in the file. `examples/custom_ops/kiln_with_ops.rs`
//! is a complete one (with `tear` and `scale`), run by `tests/cli.rs`.

use crate::custom::{register_custom_op, CustomOpRef, OpParams};
use crate::ir::text::{parse, print_func};
use crate::ir::{DType, Func};
use crate::{compile_func, Backend, CompileOptions, Error, Tensor};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage:
  kiln run F.kir --input NAME=PATH.npy ... [--out-dir DIR] [--backend interp|cpu|gpu] [--func NAME]
  kiln grad F.kir --wrt NAME,NAME [--output K] [--func NAME]
  kiln opt F.kir [--dot] [--func NAME]
  kiln aot F.kir -o F.o [--header F.h] [--target TRIPLE] [--func NAME] [--symbol NAME] [--runtime]
  kiln ptx F.kir [--arch sm_90] [--func NAME]";

/// A custom op's factory: builds the op from the attributes written in the text form.
type Factory = Box<dyn Fn(&OpParams) -> Result<CustomOpRef, String> + Send + Sync>;

/// The custom ops a `kiln` command knows by name (`%y = custom "NAME" %x {attrs}`).
#[derive(Default)]
pub struct Registry {
    ops: Vec<(String, Factory)>,
}

impl Registry {
    /// A registry that knows no custom op.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds the op `name`, built by `factory` from its attributes (an `Err` is reported as
    /// the file's error).
    pub fn op(
        mut self,
        name: &str,
        factory: impl Fn(&OpParams) -> Result<CustomOpRef, String> + Send + Sync + 'static,
    ) -> Registry {
        self.ops.push((name.to_string(), Box::new(factory)));
        self
    }

    /// Registers every op for the text form of this process (`custom::register_custom_op`).
    pub fn install(self) {
        for (name, f) in self.ops {
            register_custom_op(&name, f);
        }
    }
}

/// The `kiln` tool: the command line of this process, run; errors as one line on stderr and
/// exit code 1, an internal error (a bug) as one line and exit code 2.
pub fn main() -> ExitCode {
    main_with(Registry::new())
}

/// [`main`], with the custom ops of `registry` known by name.
pub fn main_with(registry: Registry) -> ExitCode {
    registry.install();
    // A bug must still end as one line and exit 1, not a backtrace.
    std::panic::set_hook(Box::new(|_| {}));
    // Interrupted (SIGINT, SIGTERM, SIGHUP) while writing outputs: no temporary file and no
    // incomplete set of outputs stays behind.
    let _ = ctrlc::set_handler(|| {
        crate::npy::remove_unfinished();
        std::process::exit(130);
    });
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
                crate::runtime::interp::panic_message(&*p)
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
        Flags::parse_with(args, known, &[])
    }
    /// As `parse`, with `switches`: options that take no value.
    fn parse_with(args: &[String], known: &[&str], switches: &[&str]) -> Result<Flags, String> {
        let (mut pos, mut named) = (Vec::new(), Vec::new());
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if switches.contains(&a.as_str()) {
                named.push((a.clone(), String::new()));
            } else if a.starts_with('-') && a.len() > 1 {
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
    fn has(&self, name: &str) -> bool {
        self.named.iter().any(|(n, _)| n == name)
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

/// Runs one command (`args` without the program name) in this process: what `main` does,
/// with the error returned as the one line it would print.
pub fn run(args: &[String]) -> Result<(), String> {
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
            let f = Flags::parse_with(rest, &["--func"], &["--dot"])?;
            let func = load(f.file()?, f.get("--func"))?;
            let mut options = CompileOptions::default();
            options.dump = options.dump.for_compile(&func.name);
            options.dump.dump(&func.name, "input", || print_func(&func));
            let optimized = crate::compile::optimize(func, &options);
            match f.has("--dot") {
                true => print!("{}", crate::ir::dot::func_to_dot(&optimized)),
                false => print!("{}", print_func(&optimized)),
            }
            Ok(())
        }
        "aot" => cmd_aot(&Flags::parse_with(
            rest,
            &["-o", "--header", "--target", "--func", "--symbol"],
            &["--runtime"],
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
    crate::npy::read(path, dtype).map_err(|e| e.to_string())
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
        // `%x=...` and `x=...` name the same parameter.
        let name = name.trim_start_matches('%');
        if given.iter().any(|(n, _)| n == name) {
            return Err(format!("--input: `{name}` is given twice"));
        }
        given.push((name.to_string(), PathBuf::from(p)));
    }
    // Each parameter's name as `--input` gives it: its own, or its place where it has none.
    let names: Vec<String> = (func.params.iter().enumerate())
        .map(|(i, &p)| {
            func.name_of(p)
                .map_or_else(|| i.to_string(), str::to_string)
        })
        .collect();
    let mut inputs = Vec::new();
    for (&p, name) in func.params.iter().zip(&names) {
        let (_, file) = given.iter().find(|(n, _)| n == name).ok_or_else(|| {
            format!(
                "{path}: @{} needs the input `{name}` (--input {name}=PATH.npy)",
                func.name
            )
        })?;
        inputs.push(read_npy(file, func.ty(p).dtype)?);
    }
    for (n, _) in &given {
        if !names.contains(n) {
            return Err(format!("{path}: @{} has no parameter `{n}`", func.name));
        }
    }
    let options = CompileOptions {
        backend,
        ..CompileOptions::default()
    };
    let compiled = compile_func(func, &options).map_err(|e| format!("{path}: {e}"))?;
    let refs: Vec<crate::tensor::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    let outs = compiled.call(&refs).map_err(|e| format!("{path}: {e}"))?;
    let dir = PathBuf::from(f.get("--out-dir").unwrap_or("."));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Every output, or none.
    let files: Vec<(PathBuf, &Tensor)> = outs
        .iter()
        .enumerate()
        .map(|(i, t)| (dir.join(format!("out{i}.npy")), t))
        .collect();
    crate::npy::write_all(&files).map_err(|e| e.to_string())
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
    let n_out = func.outputs.len();
    let k: usize = f
        .get("--output")
        .map(|s| match s.trim().parse::<i64>() {
            Ok(k) if k >= 0 && (k as usize) < n_out => Ok(k as usize),
            _ => Err(match n_out {
                1 => format!("--output {s}: @{} has one output, index 0", func.name),
                n => format!(
                    "--output {s}: @{} has {n} outputs, indices 0 to {}",
                    func.name,
                    n - 1
                ),
            }),
        })
        .transpose()?
        .unwrap_or(0);
    let g = crate::grad::grad_func(&func, k, &wrt).map_err(|e| format!("{path}: {e}"))?;
    crate::dump::DumpOptions::from_env().dump(&g.name, "grad", || print_func(&g));
    print!("{}", print_func(&g));
    Ok(())
}

fn cmd_aot(f: &Flags) -> Result<(), String> {
    let path = f.file()?;
    let object = f.get("-o").ok_or("aot needs -o F.o")?;
    let func = load(path, f.get("--func"))?;
    let options = crate::aot::AotOptions {
        target: f.get("--target").map(str::to_string),
        symbol: f.get("--symbol").map(str::to_string),
        runtime: f.has("--runtime"),
        ..Default::default()
    };
    let art = crate::aot::compile_func(&func, &options).map_err(|e| format!("{path}: {e}"))?;
    art.write(Path::new(object), f.get("--header").map(Path::new))
        .map_err(|e| e.to_string())
}

/// Prints the PTX of the optimized function (feature `gpu`).
#[cfg(feature = "gpu")]
fn cmd_ptx(f: &Flags) -> Result<(), String> {
    let path = f.file()?;
    let func = load(path, f.get("--func"))?;
    crate::ir::verify::verify(&func).map_err(|es| format!("{path}: {}", es.join("; ")))?;
    let options = CompileOptions::default();
    options.dump.dump(&func.name, "input", || print_func(&func));
    let func = crate::compile::optimize(func, &options);
    let arch = f.get("--arch").unwrap_or(crate::jit_ptx::DEFAULT_ARCH);
    let m = crate::jit_ptx::compile_ptx(&func, arch, &options.dump)
        .map_err(|e| format!("{path}: {e}"))?;
    print!("{}", m.ptx);
    Ok(())
}

/// Without the feature: one clear line (and exit 1) rather than PTX.
#[cfg(not(feature = "gpu"))]
fn cmd_ptx(f: &Flags) -> Result<(), String> {
    load(f.file()?, f.get("--func"))?;
    Err(crate::compile::NO_GPU_FEATURE.into())
}
