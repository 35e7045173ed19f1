//! Asking for a compiled function: `kiln::function(inputs, outputs).update(..).compile()`.
//! This runs the stages in order (graph -> SSA -> backend) and wraps the result in a
//! [`Function`].

use crate::dump::DumpOptions;
use crate::error::{Error, Result};
use crate::graph::{to_ssa, Operand, Var, VarKind};
use crate::ir::Func;
use crate::runtime::function::{Function, SharedBinding};
use crate::runtime::interp::Interpreter;
use std::fmt;
use std::str::FromStr;

/// Which backend runs a compiled function.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// The reference interpreter: every op's `perform`.
    Interp,
    /// Native code through Cranelift (the default, docs/reference/environment.md): elementwise work is
    /// compiled, the other ops run their reference implementation.
    #[default]
    Cpu,
    /// PTX through LLVM NVPTX, run with the CUDA driver.
    Gpu,
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Backend> {
        match s {
            "interp" => Ok(Backend::Interp),
            "cpu" => Ok(Backend::Cpu),
            "gpu" => Ok(Backend::Gpu),
            _ => Err(Error::Input(format!(
                "unknown backend `{s}` (expected interp, cpu or gpu)"
            ))),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Interp => "interp",
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
        })
    }
}

impl Backend {
    /// The backend named by `KILN_BACKEND`, or the default. An unknown name is an error rather
    /// than a silent fallback.
    pub fn from_env() -> Result<Backend> {
        match std::env::var("KILN_BACKEND") {
            Ok(s) if !s.is_empty() => s.parse(),
            _ => Ok(Backend::default()),
        }
    }
}

/// Options of a compilation. The environment supplies defaults (docs/reference/environment.md).
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// The compiled function's name (`@f` in dumps and messages, its dump files' names, the
    /// default AOT symbol); `f` by default.
    pub name: String,
    /// `None`: take `KILN_BACKEND`, else the default backend.
    pub backend: Option<Backend>,
    /// Which stages to dump (defaults from `KILN_DUMP` and `KILN_DUMP_DIR`).
    pub dump: DumpOptions,
    /// Run the optimizer (on by default).
    pub optimize: bool,
    /// Let the optimizer also apply rewrites that change NaN or inf results (`x * 0 -> 0`,
    /// `x - x -> 0`, `pow(x, 0.5) -> sqrt(x)`); off by default (docs/reference/semantics.md).
    pub fast_math: bool,
    /// Let the optimizer mark steps that may overwrite a dead argument's buffer, the old values
    /// of updated shared variables included (on by default; see `rewrite::inplace`).
    pub inplace: bool,
    /// Time each step of every call (`Function::profile`); defaults from `KILN_PROFILE`, with
    /// which a function also prints its report when dropped (see `runtime::profile`).
    pub profile: bool,
    /// Threads of the function's own for its calls (`Some(n)`, at least 1): every parallel
    /// step of a call splits among them. `None` (the default): the process's pool, sized by
    /// `KILN_THREADS`. `Function::threads` says how many a function's calls use.
    pub threads: Option<usize>,
}

impl CompileOptions {
    /// These options for one compile of the function `name` (its dump files' names), and the
    /// backend they choose (`KILN_BACKEND` or the default where they name none).
    fn for_func(&self, name: &str) -> Result<(CompileOptions, Backend)> {
        let backend = match self.backend {
            Some(b) => b,
            None => Backend::from_env()?,
        };
        let options = CompileOptions {
            dump: self.dump.for_compile(name),
            ..self.clone()
        };
        Ok((options, backend))
    }

    /// The optimizer's part of these options.
    pub fn optimizer(&self) -> crate::rewrite::OptimizeOptions {
        crate::rewrite::OptimizeOptions {
            dump: self.dump.clone(),
            optimize: self.optimize,
            fast_math: self.fast_math,
            inplace: self.inplace,
        }
    }
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            name: "f".into(),
            backend: None,
            dump: DumpOptions::from_env(),
            optimize: true,
            fast_math: false,
            inplace: true,
            profile: crate::runtime::profile::from_env(),
            threads: None,
        }
    }
}

/// A function being asked for: inputs, outputs, updates of shared variables and options.
#[must_use = "call .compile() to get a Function"]
pub struct FunctionBuilder {
    inputs: Vec<Var>,
    outputs: Vec<Var>,
    updates: Vec<(Var, Var)>,
    options: CompileOptions,
}

/// Starts building a function of `inputs` computing `outputs`.
pub fn function(inputs: &[&Var], outputs: &[&Var]) -> FunctionBuilder {
    FunctionBuilder {
        inputs: inputs.iter().map(|&v| v.clone()).collect(),
        outputs: outputs.iter().map(|&v| v.clone()).collect(),
        updates: Vec::new(),
        options: CompileOptions::default(),
    }
}

impl FunctionBuilder {
    /// After each call, `shared` takes the value of `value`. All updates are computed from the
    /// old values first, then applied together.
    ///
    /// The old value is dropped after the call, so the optimizer may compute the new one in the
    /// variable's own buffer (`w - lr * g` overwrites `w` where it is, as Theano's in-place
    /// updates do; `CompileOptions::inplace = false` turns this off). Updates are all or
    /// nothing: a call that returns an error leaves every shared variable exactly as it was
    /// (the steps that overwrite a variable run after every step that may fail; where that
    /// order is impossible, the variable is not overwritten in place).
    ///
    /// ```
    /// use ndarray::array;
    /// let g = kiln::Graph::new();
    /// let total = g.shared("total", array![0.0f32, 0.0].into_dyn());
    /// let x = g.input("x", kiln::f32, [Some(2)]);
    /// let f = kiln::function(&[&x], &[])
    ///     .update(&total, &(&total + &x)) // a running sum kept between calls
    ///     .compile()
    ///     .unwrap();
    /// for _ in 0..3 {
    ///     f.call(&[array![1.0f32, 2.5].into_dyn().view()]).unwrap();
    /// }
    /// assert_eq!(total.value().unwrap().to_f64_vec(), vec![3.0, 7.5]);
    /// ```
    pub fn update(mut self, shared: &Var, value: impl Operand) -> Self {
        let value = value.into_var(shared);
        self.updates.push((shared.clone(), value));
        self
    }

    /// Every `(shared variable, new value)` pair of `pairs`, as [`FunctionBuilder::update`]
    /// adds one (an optimizer's from [`crate::nn::optim`]).
    pub fn updates(mut self, pairs: impl IntoIterator<Item = (Var, Var)>) -> Self {
        self.updates.extend(pairs);
        self
    }

    /// Names the function (`CompileOptions::name`).
    pub fn name(mut self, name: &str) -> Self {
        self.options.name = name.to_string();
        self
    }

    /// Compiles for `backend` instead of `KILN_BACKEND`'s or the default one.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.options.backend = Some(backend);
        self
    }

    /// Gives the function `n` threads of its own (`CompileOptions::threads`).
    pub fn threads(mut self, n: usize) -> Self {
        self.options.threads = Some(n);
        self
    }

    /// Replaces every compile option with `options` (a name, backend or thread count set
    /// before is replaced too).
    pub fn options(mut self, options: CompileOptions) -> Self {
        self.options = options;
        self
    }

    /// The checked updates and the SSA function of the graph, which both ways of compiling
    /// start from.
    fn ssa(&self) -> Result<crate::graph::SsaFunction> {
        self.check_updates()?;
        to_ssa(
            &self.options.name,
            &self.inputs,
            &self.outputs,
            &self.updates,
        )
    }

    /// Compiles the function. The user's graph is not changed.
    pub fn compile(mut self) -> Result<Function> {
        crate::runtime::threads::configure()?;
        let backend = match self.options.backend {
            Some(b) => b,
            None => Backend::from_env()?,
        };
        let ssa = self.ssa()?;
        self.options.dump = self.options.dump.for_compile(&ssa.func.name);
        self.options.dump.dump(&ssa.func.name, "input", || {
            crate::ir::text::print_func(&ssa.func)
        });
        crate::ir::verify::verify(&ssa.func).map_err(|es| Error::Input(es.join("; ")))?;
        let n_inputs = self.inputs.len();
        let mut shared: Vec<SharedBinding> = ssa
            .shared
            .iter()
            .map(|v| {
                let VarKind::Shared(cell) = v.kind() else {
                    unreachable!("to_ssa returns shared variables only")
                };
                let update = self
                    .updates
                    .iter()
                    .position(|(s, _)| s.id() == v.id())
                    .map(|i| self.outputs.len() + i);
                SharedBinding {
                    cell,
                    name: v.name().unwrap_or_default(),
                    update,
                    donated: false,
                }
            })
            .collect();
        // The old value of a shared variable the function updates is dropped after the call:
        // the in-place pass may overwrite it (an SGD step updates the weights where they are).
        //
        // A call that fails applies no update (all or nothing): the in-place pass moves the
        // overwriting steps after everything that may fail. An update whose type leaves a dim
        // unknown is only checked against its variable after the run, so then no variable is
        // overwritten in place.
        let unchecked_update = self
            .updates
            .iter()
            .any(|(_, v)| v.ty().known_shape().is_none());
        let updated: Vec<crate::ir::Value> = shared
            .iter()
            .enumerate()
            .filter(|(_, b)| b.update.is_some() && !unchecked_update)
            .map(|(i, _)| ssa.func.params[n_inputs + i])
            .collect();
        let (func, destroyed) = optimize_donating(ssa.func, &self.options, &updated);
        for (i, b) in shared.iter_mut().enumerate() {
            b.donated = destroyed.contains(&func.params[n_inputs + i]);
        }
        let exec = backend_executable(backend, &func, &self.options)?;
        Function::new(func, n_inputs, self.outputs.len(), shared, exec)
            .on_threads(self.options.threads)
    }

    /// Compiles the function ahead of time into an object file and a C header instead of a
    /// callable (see [`crate::aot`]). The entry point takes the inputs, then the shared
    /// variables the function reads (the caller keeps the state), and writes the outputs, then
    /// one output per update: the shared variable's new value (`w_new` for `w`).
    pub fn aot(self, options: &crate::aot::AotOptions) -> Result<crate::aot::AotArtifact> {
        let ssa = self.ssa()?;
        let func = &ssa.func;
        let n_in = self.inputs.len();
        let mut names = crate::aot::AotNames::default();
        for (i, &p) in func.params.iter().enumerate() {
            let name = func
                .name_of(p)
                .map(str::to_string)
                .unwrap_or_else(|| format!("in{i}"));
            names.input_notes.push(if i >= n_in {
                format!("the current value of the shared variable {name}")
            } else {
                String::new()
            });
            names.inputs.push(name);
        }
        for (i, v) in self.outputs.iter().enumerate() {
            names
                .outputs
                .push(v.name().unwrap_or_else(|| format!("out{i}")));
            names.output_notes.push(String::new());
        }
        for (s, _) in &self.updates {
            let n = s.name().unwrap_or_else(|| "shared".into());
            names.outputs.push(format!("{n}_new"));
            names
                .output_notes
                .push(format!("the new value of the shared variable {n}"));
        }
        crate::aot::compile_named(func, &names, options)
    }

    fn check_updates(&self) -> Result<()> {
        for (i, (s, v)) in self.updates.iter().enumerate() {
            if !matches!(s.kind(), VarKind::Shared(_)) {
                return Err(Error::Input(format!(
                    "update #{i}: {} is not a shared variable",
                    s.label()
                )));
            }
            v.check()?;
            if self.updates[..i].iter().any(|(o, _)| o.id() == s.id()) {
                return Err(Error::Input(format!("{} is updated twice", s.label())));
            }
            let (st, vt) = (s.ty(), v.ty());
            if !st.may_hold(&vt) {
                return Err(Error::Input(format!(
                    "the update of {} has type {vt}, expected {st}",
                    s.label()
                )));
            }
        }
        Ok(())
    }
}

/// Why this build cannot do GPU work.
pub const NO_GPU_FEATURE: &str =
    "built without the `gpu` feature (GPU backend, kiln ptx); rebuild with --features gpu";

/// The executable a backend makes of an SSA function.
fn backend_executable(
    backend: Backend,
    func: &Func,
    options: &CompileOptions,
) -> Result<Box<dyn crate::runtime::Executable>> {
    // The pool the calls will run on, sized by `KILN_THREADS` before anything uses it.
    crate::runtime::threads::configure()?;
    let mut exec = plain_executable(backend, func, options)?;
    // Profiling is a diagnostic: where a backend has no profiler the function still compiles.
    if options.profile && !exec.start_profile() {
        eprintln!(
            "kiln: @{}: the {backend} backend has no profiler yet; not profiled",
            func.name
        );
    }
    Ok(exec)
}

fn plain_executable(
    backend: Backend,
    func: &Func,
    options: &CompileOptions,
) -> Result<Box<dyn crate::runtime::Executable>> {
    match backend {
        Backend::Interp => {
            // The interpreter runs the plain plan: every step's `perform`, no kernels.
            let plan = crate::lower::lower(func);
            options
                .dump
                .dump(&func.name, "schedule", || plan.to_string());
            Ok(Box::new(Interpreter::with_thunks(
                func.clone(),
                plan,
                Default::default(),
            )))
        }
        Backend::Cpu => crate::jit_cpu::compile(func, &options.dump),
        #[cfg(feature = "gpu")]
        Backend::Gpu => crate::jit_ptx::runtime::executable(func, &options.dump),
        #[cfg(not(feature = "gpu"))]
        Backend::Gpu => Err(Error::Unsupported(NO_GPU_FEATURE.into())),
    }
}

impl Function {
    /// Loads a function saved by [`Function::save`]: its optimized form is verified and
    /// compiled for `options`' backend without optimizing it again (`options.optimize` and the
    /// other optimizer switches do not apply), its shared variables are its own (fresh, set
    /// from the saved state), and its ops' state is restored.
    pub fn load(path: impl AsRef<std::path::Path>, options: &CompileOptions) -> Result<Function> {
        let path = path.as_ref();
        let at = |e: String| Error::Input(format!("{}: {e}", path.display()));
        let mut files = crate::npy::read_archive(path)?;
        let mut take = |name: &str| -> Result<String> {
            let i = files.iter().position(|(n, _)| n == name);
            let (_, bytes) = files.swap_remove(i.ok_or_else(|| at(format!("no {name}")))?);
            String::from_utf8(bytes).map_err(|_| at(format!("{name} is not UTF-8 text")))
        };
        let text = take("function.kir")?;
        let manifest = take("function.txt")?;
        let file = format!("{}/function.kir", path.display());
        let func = crate::ir::text::parse(&file, &text)
            .map_err(|es| {
                Error::Input(
                    es.iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?
            .into_iter()
            .next()
            .ok_or_else(|| at("function.kir holds no function".into()))?;
        crate::ir::verify::verify(&func).map_err(|es| at(es.join("; ")))?;
        // The bindings are checked against the function and the state entries read before
        // anything is compiled; the state's values are checked against the variables' types
        // (and the op state against the plan's steps) once the plan exists, in `from_saved`.
        let saved = crate::runtime::function::SavedBindings::read(&func, &manifest).map_err(at)?;
        let entries = crate::npy::arrays_of(path, files)?;
        let state = crate::runtime::state::FunctionState::from_entries(entries)
            .map_err(|e| at(e.to_string()))?;
        let (options, backend) = &options.for_func(&func.name)?;
        let exec = backend_executable(*backend, &func, options)?;
        let f = Function::from_saved(func, saved, state, exec).map_err(|e| at(e.to_string()))?;
        f.on_threads(options.threads)
    }
}

/// Compiles an SSA function (from the text form, say) into a `Function` of its parameters.
/// The function is verified first.
pub fn compile_func(func: Func, options: &CompileOptions) -> Result<Function> {
    crate::runtime::threads::configure()?;
    crate::ir::verify::verify(&func).map_err(|es| Error::Input(es.join("; ")))?;
    let (options, backend) = &options.for_func(&func.name)?;
    let backend = *backend;
    options
        .dump
        .dump(&func.name, "input", || crate::ir::text::print_func(&func));
    let func = optimize(func, options);
    let exec = backend_executable(backend, &func, options)?;
    let (n_in, n_out) = (func.params.len(), func.outputs.len());
    Function::new(func, n_in, n_out, Vec::new(), exec).on_threads(options.threads)
}

/// The optimizer's stages with `options`' switches (`rewrite::optimize`).
pub fn optimize(func: Func, options: &CompileOptions) -> Func {
    crate::rewrite::optimize(func, &options.optimizer())
}

/// `optimize`, letting the in-place pass overwrite the `donated` parameters; also returns the
/// donated parameters it does overwrite (`rewrite::optimize_donating`).
pub fn optimize_donating(
    func: Func,
    options: &CompileOptions,
    donated: &[crate::ir::Value],
) -> (Func, Vec<crate::ir::Value>) {
    crate::rewrite::optimize_donating(func, &options.optimizer(), donated)
}
