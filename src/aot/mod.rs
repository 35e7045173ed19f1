//! Ahead-of-time compilation: a function becomes an object file with a C entry point, and a C
//! header that declares it (like XLA's tfcompile). Nothing of kiln is needed at run time; the
//! object links with a C, C++ or Rust program and the C math library:
//!
//! ```sh
//! kiln aot f.kir -o f.o --header f.h        # or kiln::aot::compile_func / FunctionBuilder::aot
//! cc main.c f.o -lm -o main
//! ```
//!
//! # The entry point
//!
//! `int32_t NAME(const T0 *in0, ..., U0 *out0, ..., void *scratch)`: one typed pointer per
//! input, then one per output (updates of shared variables are extra outputs, after the
//! function's own), then, only when the plan needs one, a caller-provided scratch area of
//! `NAME_scratch_bytes` bytes aligned to 64. It returns 0, or, when an index is out of range
//! (`take`, a scatter), the failure code of the step that found it: each such step has its own,
//! listed in the header with its message, which `NAME_error(code)` returns (and
//! [`AotArtifact::errors`] holds); the outputs then hold nothing meaningful. Arrays are dense and row-major; outputs must not
//! overlap inputs, each other or the scratch area. The function allocates nothing, keeps no
//! global state and runs on the calling thread, so concurrent calls with their own outputs
//! and scratch are safe.
//!
//! # How it is compiled
//!
//! The function is optimized as for the JIT (`rewrite::optimize`: folding, rewrites, fusion
//! into Composite and FusedReduce ops), lowered to the kernel plan every backend reads
//! (`lower::lower`, every instruction a step of its own), then planned statically (`plan`):
//! every shape must be known (an unknown dim is an error naming the value), so view ops (`transpose`, `reshape` of
//! contiguous data, `broadcast_to`, `expand_dims`, `squeeze`, `slice`) only change offsets and
//! strides, and the rest becomes steps: map kernels (the JIT's own `define_map_kernel`, one per
//! distinct scalar program, called on `rows x cols` blocks with loops over any further dims),
//! reductions over any axes (the JIT's own reduction kernels, `define_reduce_kernel`, called
//! as `codegen::clif::reduce_call` lays the call out for the static strides, so that the
//! object computes the JIT's bits), and matrix products (a cache-blocked loop
//! nest generated into the object, not a tuned GEMM). Intermediate buffers live in the scratch
//! area at 64-byte-aligned offsets, reused once their last reader has run; a buffer that is an
//! output whole is computed straight into the caller's array.
//!
//! Everything the code calls is in the object (the `kiln_*` helpers that map kernels import
//! are generated as small functions; the float ones call libm's `expf`, `sin`, ...), so the
//! only library to link is libm. An `ifelse` becomes a branch in the entry point: only the
//! chosen branch's steps run, as on the JIT, and each copies what it yields into the same
//! result buffers. Random ops run the interpreter's Philox stream (`random::stream`, generated
//! by `codegen::clif::random`), so an object draws the same numbers as every other backend;
//! a per-call counter is an input like any other (its update an output). Convolution and
//! pooling (and their gradients) are planned from the same steps: an unrolling copy through a
//! strided view and a product, or one map step per window tap (`plan/window.rs`). `take`,
//! `take_along_axis` and the scatters are gather and scatter loops written into the entry point
//! (`gather.rs`), `one_hot` a map step, `cumsum`, `cumprod` and `cumprod`'s gradient map steps
//! swept along their axis (`plan/index.rs`), `sort` and `argsort` a stable merge sort of each
//! lane (`sort.rs`), and `scan` a loop over its body's steps (`plan/scan.rs`). Not supported
//! ahead of time: custom ops (an error that names the op). The code runs on one thread.

mod clif;
mod emit;
mod gather;
mod header;
mod kernels;
pub mod plan;
mod sort;
mod target;

pub use header::{c_ident, c_type};

use crate::error::{Error, Result};
use crate::ir::{DType, Func};
use crate::rewrite::{optimize, OptimizeOptions};
use std::path::Path;

/// Options of an ahead-of-time compilation.
#[derive(Clone, Debug, Default)]
pub struct AotOptions {
    /// Target triple (`x86_64-unknown-linux-gnu`, `aarch64-unknown-linux-gnu`); the host's
    /// when `None`.
    pub target: Option<String>,
    /// The entry point's C name; the function's name (made a C identifier) when `None`.
    pub symbol: Option<String>,
    /// Optimizer switches and dumps, as for the JIT.
    pub optimizer: OptimizeOptions,
    /// Float matrix products (and so convolutions) call kiln's GEMM, and kernels hand their
    /// transcendentals to the 256-bit math functions the JIT's kernels call, both in kiln's
    /// runtime library, `libkiln_rt.a` (`cargo build --release -p kiln-rt`), which the program
    /// then links: the JIT's speed and bits, where the object's own loop nest and inline math
    /// are about half as fast. Off, the object needs nothing but libm. x86_64 only
    /// (`kiln aot --runtime`).
    pub runtime: bool,
}

/// One argument of the entry point.
#[derive(Clone, Debug, PartialEq)]
pub struct AotArg {
    /// The C parameter name.
    pub name: String,
    /// The element type of the array.
    pub dtype: DType,
    /// The array's shape (every dim known; empty for a 0-d array).
    pub shape: Vec<usize>,
}

/// An object file and its header, in memory.
#[derive(Clone, Debug)]
pub struct AotArtifact {
    /// The entry point's symbol.
    pub symbol: String,
    /// The ELF object file's bytes.
    pub object: Vec<u8>,
    /// The C header's text.
    pub header: String,
    /// The entry point's input arrays, in parameter order.
    pub inputs: Vec<AotArg>,
    /// The entry point's output arrays, in result order (updates of shared variables last).
    pub outputs: Vec<AotArg>,
    /// Bytes of scratch the entry point needs (0: it takes no scratch argument).
    pub scratch_bytes: usize,
    /// Symbols the object leaves to the C math library.
    pub imports: Vec<String>,
    /// Symbols the object takes from kiln's runtime library, `libkiln_rt.a` (empty unless
    /// [`AotOptions::runtime`]; then the program must link that library).
    pub runtime: Vec<String>,
    /// The target triple.
    pub target: String,
    /// What the entry point's failure codes mean: code `i + 1` is `errors[i]` (0 is success).
    pub errors: Vec<String>,
}

/// Names of the entry point's arguments and notes for the header; from the function when not
/// given.
#[derive(Clone, Debug, Default)]
pub struct AotNames {
    /// Wanted names of the inputs, by position; a missing one is the parameter's name, else
    /// `inI`. Each is made a unique C identifier.
    pub inputs: Vec<String>,
    /// A note per input for the header's argument list (empty or missing: none).
    pub input_notes: Vec<String>,
    /// Wanted names of the outputs, by position; a missing one is `outI`. Each is made a
    /// unique C identifier.
    pub outputs: Vec<String>,
    /// A note per output for the header's argument list (empty or missing: none).
    pub output_notes: Vec<String>,
}

/// C parameter names for `wanted`, made identifiers and unique (case-insensitively, as the
/// header's macros upper-case them), avoiding `taken`.
fn unique_names(wanted: &[String], taken: &mut Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    for w in wanted {
        let base = c_ident(w);
        let mut name = base.clone();
        let mut k = 2;
        while taken.iter().any(|t| t.eq_ignore_ascii_case(&name)) {
            name = format!("{base}_{k}");
            k += 1;
        }
        taken.push(name.clone());
        out.push(name);
    }
    out
}

/// Compiles `func` ahead of time (it is verified and optimized first).
pub fn compile_func(func: &Func, options: &AotOptions) -> Result<AotArtifact> {
    compile_named(func, &AotNames::default(), options)
}

/// Like [`compile_func`], with the arguments' names and notes given.
pub fn compile_named(func: &Func, names: &AotNames, options: &AotOptions) -> Result<AotArtifact> {
    crate::ir::verify::verify(func).map_err(|es| Error::Input(es.join("; ")))?;
    let dump = &options.optimizer.dump;
    dump.dump(&func.name, "input", || crate::ir::text::print_func(func));
    let symbol = c_ident(options.symbol.as_deref().unwrap_or(&func.name));
    // The object defines local helpers and calls libm by these names.
    if symbol.starts_with("kiln_") || kernels::LIBM_NAMES.contains(&symbol.as_str()) {
        return Err(Error::Input(format!(
            "the entry point cannot be named `{symbol}`: the object uses that name itself"
        )));
    }
    let target = target::target(options.target.as_deref())?;
    if options.runtime && target.triple.architecture != target_lexicon::Architecture::X86_64 {
        return Err(Error::Unsupported(format!(
            "target `{}`: kiln's runtime library (AotOptions::runtime, --runtime) is for x86_64 only",
            target.triple
        )));
    }

    let mut taken = vec!["scratch".to_string(), symbol.clone()];
    let in_wanted: Vec<String> = (0..func.params.len())
        .map(|i| match names.inputs.get(i) {
            Some(n) => n.clone(),
            None => func
                .name_of(func.params[i])
                .map(str::to_string)
                .unwrap_or_else(|| format!("in{i}")),
        })
        .collect();
    let in_names = unique_names(&in_wanted, &mut taken);
    let out_wanted: Vec<String> = (0..func.outputs.len())
        .map(|o| {
            names
                .outputs
                .get(o)
                .cloned()
                .unwrap_or_else(|| format!("out{o}"))
        })
        .collect();
    let out_names = unique_names(&out_wanted, &mut taken);

    let optimized = optimize(func.clone(), &options.optimizer);
    let plan = plan::build(&optimized, &in_names, &out_names)?;
    dump.dump(&func.name, "schedule", || plan.text());
    let (emitted, asm) = crate::codegen::clif::map::with_listing(dump.enabled("asm"), || {
        emit::emit(&plan, &symbol, target.isa, options.runtime)
    });
    let emitted = emitted?;
    dump.dump(&func.name, "asm", || asm);
    dump.dump(&func.name, "kernels", || emitted.kernels.clone());
    dump.dump(&func.name, "clif", || emitted.clif.clone());

    let triple = target.triple.to_string();
    let note = |v: &[String], i: usize| v.get(i).cloned().unwrap_or_default();
    let in_notes: Vec<String> = (0..func.params.len())
        .map(|i| note(&names.input_notes, i))
        .collect();
    let notes: Vec<String> = (0..func.outputs.len())
        .map(|o| note(&names.output_notes, o))
        .collect();
    let header = header::header(&header::HeaderInfo {
        symbol: &symbol,
        func_name: &func.name,
        triple: &triple,
        cpu: target.cpu,
        inputs: &plan.inputs,
        outputs: &plan.outputs,
        input_notes: &in_notes,
        output_notes: &notes,
        scratch_bytes: plan.scratch_bytes,
        imports: &emitted.imports,
        runtime: &emitted.runtime,
        errors: &plan.errors,
    });
    let arg = |a: &plan::Arg| AotArg {
        name: a.name.clone(),
        dtype: a.dtype,
        shape: a.shape.clone(),
    };
    Ok(AotArtifact {
        symbol,
        object: emitted.object,
        header,
        inputs: plan.inputs.iter().map(arg).collect(),
        outputs: plan.outputs.iter().map(arg).collect(),
        scratch_bytes: plan.scratch_bytes,
        imports: emitted.imports,
        runtime: emitted.runtime,
        target: triple,
        errors: plan.errors,
    })
}

impl AotArtifact {
    /// Writes the object file and, when a path is given, the header. Each is written whole to a
    /// temporary file next to it and renamed into place once all are written, so that no file
    /// exists half-written; after a failure neither is there.
    pub fn write(&self, object: &Path, header: Option<&Path>) -> Result<()> {
        // Neither file stays after a failure: a header without its object (or the reverse)
        // would mislead. `npy::write_whole` also lists the temporary files for
        // `npy::remove_unfinished`, which the `kiln` tool calls when interrupted.
        let mut files: Vec<(std::path::PathBuf, &[u8])> =
            vec![(object.to_path_buf(), &self.object)];
        if let Some(h) = header {
            files.push((h.to_path_buf(), self.header.as_bytes()));
        }
        let paths: Vec<std::path::PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
        crate::npy::write_whole(&paths, |i, mut f| {
            use std::io::Write;
            f.write_all(files[i].1)
        })
    }
}
