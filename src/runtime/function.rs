//! `Function`: a compiled function users call, with its shared state.

use super::state::FunctionState;
use super::Executable;
use crate::error::{Error, Result};
use crate::ir::Func;
use crate::shared::{DeviceLock, HostGuard as Guard, SharedCell};
use crate::tensor::{Tensor, TensorRef};

/// A shared variable a function reads, and the output that updates it, if any.
pub struct SharedBinding {
    /// The variable's storage, shared with the graph and other functions.
    pub cell: SharedCell,
    /// The variable's name (empty where it has none), for messages and saved states.
    pub name: String,
    /// Index among the executable's outputs of the new value.
    pub update: Option<usize>,
    /// Whether the function overwrites the old value in place (the in-place pass found a step
    /// that may): the call then hands the variable's buffer to the executable.
    pub donated: bool,
}

/// A compiled function. It is `Send + Sync`: many threads may call it at once. Calls that
/// update shared variables are serialized on those variables; calls that only read them run in
/// parallel.
pub struct Function {
    func: Func,
    n_inputs: usize,
    n_outputs: usize,
    shared: Vec<SharedBinding>,
    /// `shared` indices in the order locks are taken (by address), so that two functions
    /// sharing variables cannot deadlock.
    lock_order: Vec<usize>,
    /// The shared variables' names in a state ([`Function::state_names`]).
    state_names: Vec<String>,
    exec: Box<dyn Executable>,
    /// Whether calls go to the executable's direct path first (nothing shared, and the
    /// backend has one).
    direct: bool,
    /// The function's own threads (`CompileOptions::threads`), which its calls run on; `None`:
    /// the process's pool (`KILN_THREADS`).
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

/// With `KILN_PROFILE` set, a profiled function prints its report when it goes: most are
/// dropped when the program ends, so this is the report "at exit".
impl Drop for Function {
    fn drop(&mut self) {
        if let Some(report) = self.profile().filter(|r| r.calls > 0) {
            if super::profile::from_env() {
                eprint!("{report}");
            }
            // `KILN_PROFILE=trace.json`: the first function to go writes that file, the
            // next `trace-2.json`, and so on.
            if let Some(path) = super::profile::trace_path_from_env() {
                let path = numbered(&path);
                match self.write_trace(&path) {
                    Ok(()) => eprintln!(
                        "kiln: @{}: trace of {} calls written to {}",
                        self.func.name,
                        report.calls,
                        path.display()
                    ),
                    Err(e) => eprintln!("kiln: @{}: {e}", self.func.name),
                }
            }
        }
    }
}

/// `path` for the `n`th trace this process writes there: `trace.json`, then `trace-2.json`...
fn numbered(path: &std::path::Path) -> std::path::PathBuf {
    static WRITTEN: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    let n = written.iter().filter(|p| *p == path).count();
    written.push(path.to_path_buf());
    if n == 0 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}-{}.json", n + 1))
}

/// The first line of a saved function's `function.txt` (its format's version).
const SAVED_HEADER: &str = "kiln function 1";

/// The files of a saved function besides its state's.
pub(crate) const SAVED_FILES: [&str; 2] = ["function.kir", "function.txt"];

/// A state's shared values in the variables' order (`names`, as [`Function::state_names`]
/// makes them), each checked against its parameter's type and given at most once.
fn values_by_variable<N: AsRef<str>, T: std::borrow::Borrow<Tensor>>(
    func: &Func,
    n_inputs: usize,
    names: &[String],
    entries: impl IntoIterator<Item = (N, T)>,
) -> Result<Vec<Option<T>>> {
    let index: std::collections::HashMap<&str, usize> = (names.iter().enumerate())
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut values: Vec<Option<T>> = (0..names.len()).map(|_| None).collect();
    for (name, t) in entries {
        let name = name.as_ref();
        let bad = |why: String| Error::Input(format!("state entry `shared/{name}`: {why}"));
        let i = *index.get(name).ok_or_else(|| {
            bad(format!(
                "{} reads no shared variable of that name",
                func.name
            ))
        })?;
        let ty = func.ty(func.params[n_inputs + i]);
        let v: &Tensor = t.borrow();
        if v.dtype() != ty.dtype || !ty.accepts_shape(v.shape()) {
            return Err(bad(format!(
                "expected {ty}, got an array of {} {:?}",
                v.dtype(),
                v.shape()
            )));
        }
        if values[i].replace(t).is_some() {
            return Err(bad("given twice".into()));
        }
    }
    Ok(values)
}

/// How a saved function's parameters and results bind to shared variables (its
/// `function.txt`), checked against the function it belongs to.
pub(crate) struct SavedBindings {
    n_inputs: usize,
    n_outputs: usize,
    /// For each shared variable (the parameters after the inputs): the result that updates
    /// it, if any, and whether the function overwrites its old value (`SharedBinding`).
    shared: Vec<(Option<usize>, bool)>,
    /// Each shared variable's own name, where the file gives it (files written before names
    /// were saved do not: their parameters' names in the text form stand in).
    names: Vec<Option<String>>,
}

/// A shared variable's name on its `function.txt` line: anything but a backslash, a carriage
/// return or a newline as it is, those three escaped (`\\`, `\r`, `\n`), so that the name
/// is the rest of one line. The text form cannot keep every name (a repeated one, an
/// input's, one with a `/` or a space prints as a number), so the names travel here.
fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// The name [`escape_name`] wrote, or `None` where an escape is not one of its three.
fn unescape_name(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        out.push(match c {
            '\\' => match chars.next()? {
                '\\' => '\\',
                'n' => '\n',
                'r' => '\r',
                _ => return None,
            },
            c => c,
        });
    }
    Some(out)
}

impl SavedBindings {
    /// Reads `manifest` (`function.txt` of [`Function::save`]) and checks it against `func`
    /// as the compiler would have built it: the counts fit the parameters and results, each
    /// update result updates one variable and has its type, and a variable is overwritten in
    /// place only where the compiler would have let it be (every update's shape known, the
    /// same as the variable's). An error names the line.
    pub(crate) fn read(func: &Func, manifest: &str) -> std::result::Result<Self, String> {
        let mut lines = manifest.lines();
        if lines.next() != Some(SAVED_HEADER) {
            return Err(format!("function.txt does not start with `{SAVED_HEADER}`"));
        }
        let mut count = |key: &str| -> std::result::Result<usize, String> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
                .ok_or_else(|| format!("function.txt: expected `{key} N`"))
        };
        let (n_inputs, n_outputs) = (count("inputs")?, count("outputs")?);
        let (mut shared, mut names) = (Vec::new(), Vec::new());
        for line in lines {
            let bad = || format!("function.txt: `{line}` is not `shared UPDATE|- 0|1 [NAME]`");
            let fields: Vec<&str> = line.splitn(4, ' ').collect();
            let (update, donated, name) = match fields.as_slice() {
                ["shared", update, donated] => (*update, *donated, None),
                ["shared", update, donated, name] => (
                    *update,
                    *donated,
                    Some(unescape_name(name).ok_or_else(bad)?),
                ),
                _ => return Err(bad()),
            };
            let update = match update {
                "-" => None,
                k => Some(k.parse::<usize>().map_err(|_| bad())?),
            };
            let donated = match donated {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            };
            shared.push((update, donated));
            names.push(name);
        }
        let updates = shared.iter().filter(|b| b.0.is_some()).count();
        let fits = (n_inputs.checked_add(shared.len())) == Some(func.params.len())
            && n_outputs.checked_add(updates) == Some(func.outputs.len());
        if !fits {
            return Err(format!(
                "function.txt ({n_inputs} inputs, {} shared, {n_outputs} outputs, {updates} \
                 updates) does not fit @{} ({} parameters, {} results)",
                shared.len(),
                func.name,
                func.params.len(),
                func.outputs.len()
            ));
        }
        let any_unknown = (shared.iter().filter_map(|b| b.0))
            .any(|k| k < func.outputs.len() && func.ty(func.outputs[k]).known_shape().is_none());
        for (i, &(update, donated)) in shared.iter().enumerate() {
            let line = format!("function.txt, shared variable #{i} (line {})", i + 4);
            let var = func.ty(func.params[n_inputs + i]);
            let Some(k) = update else {
                if donated {
                    return Err(format!("{line}: overwritten in place but never updated"));
                }
                continue;
            };
            if !(n_outputs..func.outputs.len()).contains(&k) {
                return Err(format!(
                    "{line}: updated by result {k}, not one of the update results {n_outputs}..{}",
                    func.outputs.len()
                ));
            }
            if let Some(j) = shared[..i].iter().position(|b| b.0 == Some(k)) {
                return Err(format!(
                    "{line}: result {k} already updates shared variable #{j}"
                ));
            }
            let new = func.ty(func.outputs[k]);
            if !var.may_hold(new) {
                return Err(format!(
                    "{line}: updated by result {k} of type {new}, expected {var}"
                ));
            }
            if donated && (any_unknown || var.known_shape() != new.known_shape()) {
                return Err(format!(
                    "{line}: overwritten in place, which needs every update's shape known and \
                     this one the variable's ({var}, updated by {new})"
                ));
            }
        }
        Ok(SavedBindings {
            n_inputs,
            n_outputs,
            shared,
            names,
        })
    }
}

/// A call's inputs: a few, on the stack.
type Inputs<'a> = smallvec::SmallVec<[TensorRef<'a>; 4]>;

impl Function {
    pub(crate) fn new(
        func: Func,
        n_inputs: usize,
        n_outputs: usize,
        shared: Vec<SharedBinding>,
        exec: Box<dyn Executable>,
    ) -> Function {
        let mut lock_order: Vec<usize> = (0..shared.len()).collect();
        lock_order.sort_by_key(|&i| std::sync::Arc::as_ptr(&shared[i].cell) as usize);
        let direct = shared.is_empty() && exec.has_direct_call();
        let state_names = Function::state_names(&shared);
        Function {
            state_names,
            func,
            n_inputs,
            n_outputs,
            shared,
            lock_order,
            exec,
            direct,
            pool: None,
        }
    }

    /// Gives the function `threads` threads of its own, which every call runs on (products,
    /// kernels and row groups split among them), where it is `Some`; with `None` calls use the
    /// process's pool. An error where it is 0 or the threads cannot be started.
    pub(crate) fn on_threads(mut self, threads: Option<usize>) -> Result<Function> {
        let Some(n) = threads else {
            return Ok(self);
        };
        if n == 0 {
            return Err(Error::Input(
                "CompileOptions::threads is 0: a function needs at least one thread".into(),
            ));
        }
        let pool = (rayon::ThreadPoolBuilder::new().num_threads(n))
            .thread_name(|i| format!("kiln-fn-{i}"))
            .build()
            .map_err(|e| {
                Error::Runtime(format!("cannot start {n} threads for the function: {e}"))
            })?;
        self.pool = Some(std::sync::Arc::new(pool));
        Ok(self)
    }

    /// How many threads this function's calls run on.
    pub fn threads(&self) -> usize {
        match &self.pool {
            Some(p) => p.current_num_threads(),
            None => super::threads::threads(),
        }
    }

    /// `f` on the function's own threads where it has them (calling from one of them, or
    /// from outside), else here.
    fn on_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }

    /// The SSA function this was compiled from (after optimization).
    pub fn func(&self) -> &Func {
        &self.func
    }

    /// How many explicit inputs a call takes (shared variables are not among them).
    pub fn n_inputs(&self) -> usize {
        self.n_inputs
    }

    /// How many outputs a call returns (updates of shared variables are not among them).
    pub fn n_outputs(&self) -> usize {
        self.n_outputs
    }

    /// Where the calls so far spent their time, step by step, the slowest first (print it:
    /// it is a table); `None` unless the function was compiled with profiling on
    /// (`CompileOptions::profile`, or `KILN_PROFILE=1`).
    pub fn profile(&self) -> Option<super::profile::ProfileReport> {
        self.exec.profile().map(|p| p.report())
    }

    /// Writes the profiled calls so far as a Chrome trace to `path` (the trace-event JSON
    /// that Perfetto and `chrome://tracing` open): each call and each of its steps a span on
    /// the track of the thread that ran it, named by the step's kind, op and result, with the
    /// line of the code that built it and the shapes it read and wrote. An error where the
    /// function is not profiled (`CompileOptions::profile`, `KILN_PROFILE`) or the file cannot
    /// be written; nothing is left half-written.
    pub fn write_trace(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        let Some(p) = self.exec.profile() else {
            return Err(Error::Input(format!(
                "@{} is not profiled: compile it with CompileOptions::profile (or KILN_PROFILE=1) to trace it",
                self.func.name
            )));
        };
        let tmp = path.with_extension("json.partial");
        let written =
            std::fs::write(&tmp, p.trace_json()).and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::Runtime(format!("cannot write the trace to {}: {e}", path.display()))
        })
    }

    /// The function's state: the values of the shared variables it reads or updates (by
    /// name; one without a name is `#i`, its place among them), and what its ops keep
    /// between calls (custom ops' hidden outputs, the call count).
    ///
    /// # Panics
    /// Where a variable's newest value is on the GPU (`Backend::Gpu` keeps it there) and
    /// cannot be copied back because the device failed; [`Function::try_state`] returns that
    /// error instead.
    pub fn state(&self) -> FunctionState {
        self.try_state().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Function::state`], with the error of a value that could not be copied back from the
    /// GPU.
    ///
    /// The state is one moment's: every variable is held while all are read (in the lock
    /// order the calls take), so no call that updates them runs halfway through the reading,
    /// and the ops' state is read under the same locks.
    pub fn try_state(&self) -> Result<FunctionState> {
        let held = self.lock_all(|b| b.cell.hold())?;
        let shared = (self.state_names.iter().cloned())
            .zip(held.iter().map(|g| (**g).clone()))
            .collect();
        let ops = self.exec.op_state();
        drop(held);
        Ok(FunctionState { shared, ops })
    }

    /// The names of the shared variables in a state: each one's own, or `#i` (its place
    /// among them) where it has none or shares it with another.
    fn state_names(shared: &[SharedBinding]) -> Vec<String> {
        let mut count: std::collections::HashMap<&str, usize> = Default::default();
        for b in shared {
            *count.entry(b.name.as_str()).or_default() += 1;
        }
        (shared.iter().enumerate())
            .map(
                |(i, b)| match b.name.is_empty() || count[b.name.as_str()] > 1 {
                    true => format!("#{i}"),
                    false => b.name.clone(),
                },
            )
            .collect()
    }

    /// Sets the state: the shared variables it names, and the ops' state (all of it: what
    /// `state` omits, a fresh function's). Everything is checked first (names, dtypes,
    /// shapes, the steps that keep op state); an error changes nothing. The new state is seen
    /// whole or not at all: every variable is held while all are set, so no call runs on a
    /// mix of old and new values.
    pub fn set_state(&self, state: &FunctionState) -> Result<()> {
        let values = values_by_variable(
            &self.func,
            self.n_inputs,
            &self.state_names,
            state.shared.iter().map(|(n, t)| (n.as_str(), t)),
        )?;
        let mut held = self.lock_all(|b| b.cell.write())?;
        self.exec.set_op_state(&state.ops)?;
        for (g, t) in held.iter_mut().zip(values) {
            if let Some(t) = t {
                **g = t.clone();
            }
        }
        Ok(())
    }

    /// Forgets what the ops keep between calls, as if the function were compiled afresh
    /// (custom ops' hidden outputs empty, the call count 0); shared variables keep their
    /// values (set them with `Var::set_value` or [`Function::set_state`]).
    pub fn reset_state(&self) -> Result<()> {
        self.exec.set_op_state(&Default::default())
    }

    /// Saves [`Function::state`] as an `.npz` file (numpy's `savez`: `np.load(path)` reads
    /// it), whole or not at all.
    pub fn save_state(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let entries = self.try_state()?.entries();
        let refs: Vec<(String, &Tensor)> = entries.iter().map(|(n, t)| (n.clone(), t)).collect();
        crate::npy::write_npz(path.as_ref(), &refs)
    }

    /// Loads a state saved by [`Function::save_state`] (of this function, or of one compiled
    /// the same way), or the state in a function saved by [`Function::save`], and sets it
    /// ([`Function::set_state`]).
    pub fn load_state(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let mut files = crate::npy::read_archive(path.as_ref())?;
        files.retain(|(name, _)| !SAVED_FILES.contains(&name.as_str()));
        let entries = crate::npy::arrays_of(path.as_ref(), files)?;
        let state = FunctionState::from_entries(entries).map_err(|e| match e {
            Error::Input(m) => Error::Input(format!("{}: {m}", path.as_ref().display())),
            e => e,
        })?;
        self.set_state(&state)
    }

    /// Saves the compiled function as one file (a zip archive): its optimized form in the text
    /// form (`function.kir`), how its parameters and outputs bind to shared variables
    /// (`function.txt`), and its state (the `.npy` entries of [`Function::save_state`]).
    /// `Function::load` compiles it back without optimizing it again, in any process (custom
    /// ops it uses must be registered by name there, `custom::register_custom_op`).
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let mut manifest = format!(
            "{}\ninputs {}\noutputs {}\n",
            SAVED_HEADER, self.n_inputs, self.n_outputs
        );
        for b in &self.shared {
            let update = b.update.map_or("-".to_string(), |k| k.to_string());
            manifest.push_str(&format!(
                "shared {update} {} {}\n",
                u8::from(b.donated),
                escape_name(&b.name)
            ));
        }
        let mut files = vec![
            (
                "function.kir".to_string(),
                crate::ir::text::print_func(&self.func).into_bytes(),
            ),
            ("function.txt".to_string(), manifest.into_bytes()),
        ];
        for (name, t) in self.try_state()?.entries() {
            let bytes = crate::npy::entry_bytes(path.as_ref(), &name, &t)?;
            files.push((format!("{name}.npy"), bytes));
        }
        crate::npy::write_archive(path.as_ref(), &files)
    }

    /// A function of the optimized `func` run by `exec`, bound as `saved` (checked against
    /// `func` by [`SavedBindings::read`]), with shared variables of its own: fresh cells
    /// named after their parameters, holding the values of `state` (one for each, checked
    /// against its type), and its ops' state restored. The loaded half of a saved function.
    pub(crate) fn from_saved(
        func: Func,
        saved: SavedBindings,
        state: FunctionState,
        exec: Box<dyn Executable>,
    ) -> Result<Function> {
        let n_inputs = saved.n_inputs;
        let mut shared: Vec<SharedBinding> = (saved.shared.iter().enumerate())
            .map(|(i, &(update, donated))| {
                let param = func.params[n_inputs + i];
                let ty = func.ty(param);
                let name = match &saved.names[i] {
                    Some(n) => n.clone(),
                    None => func.name_of(param).unwrap_or_default().to_string(),
                };
                SharedBinding {
                    cell: crate::shared::SharedValue::new(Tensor::empty(ty.dtype)),
                    name,
                    update,
                    donated,
                }
            })
            .collect();
        let names = Function::state_names(&shared);
        let values = values_by_variable(&func, n_inputs, &names, state.shared)?;
        for ((b, v), name) in shared.iter_mut().zip(values).zip(&names) {
            let v = v.ok_or_else(|| {
                Error::Input(format!(
                    "no state entry `shared/{name}` (the variable's value)"
                ))
            })?;
            b.cell = crate::shared::SharedValue::new(v);
        }
        let f = Function::new(func, n_inputs, saved.n_outputs, shared, exec);
        f.exec.set_op_state(&state.ops)?;
        Ok(f)
    }

    /// Forgets the calls profiled so far (after a warm-up, say).
    pub fn reset_profile(&self) {
        if let Some(p) = self.exec.profile() {
            p.reset();
        }
    }

    /// Calls the function on `inputs` and returns its outputs as new arrays.
    pub fn call<'a, T: Into<TensorRef<'a>> + Clone>(&self, inputs: &[T]) -> Result<Vec<Tensor>> {
        let inputs: Inputs<'a> = inputs.iter().cloned().map(Into::into).collect();
        self.on_pool(|| self.call_refs(inputs))
    }

    /// `call` on inputs already converted.
    fn call_refs(&self, inputs: Inputs<'_>) -> Result<Vec<Tensor>> {
        if self.direct {
            self.check_inputs(&inputs)?;
            let mut outs: Vec<Tensor> = (self.func.outputs.iter())
                .map(|&v| Tensor::empty(self.func.ty(v).dtype))
                .collect();
            if self.exec.call_direct(&inputs, &mut outs) {
                return Ok(outs);
            }
        }
        self.run(&inputs, Vec::new())
    }

    /// Like `call`, but writes into `outputs`, reusing each buffer whose dtype and shape already
    /// fit (so a steady state of calls allocates no output arrays); a buffer that does not fit
    /// is replaced. Compiled kernels write straight into the buffers. After an error the
    /// buffers' contents are unspecified (a buffer may have been replaced by an empty one).
    pub fn call_into<'a, T: Into<TensorRef<'a>> + Clone>(
        &self,
        inputs: &[T],
        outputs: &mut [Tensor],
    ) -> Result<()> {
        if outputs.len() != self.n_outputs {
            return Err(Error::Input(format!(
                "{} has {} outputs, {} buffers were given",
                self.func.name,
                self.n_outputs,
                outputs.len()
            )));
        }
        let inputs: Inputs<'a> = inputs.iter().cloned().map(Into::into).collect();
        self.on_pool(|| self.call_into_refs(inputs, outputs))
    }

    /// `call_into` on inputs already converted and a count of buffers already checked.
    fn call_into_refs(&self, inputs: Inputs<'_>, outputs: &mut [Tensor]) -> Result<()> {
        // Checked before the buffers are taken, so a bad call leaves them as they were.
        self.check_inputs(&inputs)?;
        if self.direct && self.exec.call_direct(&inputs, outputs) {
            return Ok(());
        }
        // Offered to the kernels that compute the outputs; an empty stand-in meanwhile.
        let dests: Vec<Option<Tensor>> = outputs
            .iter_mut()
            .map(|o| {
                let dtype = o.dtype();
                Some(std::mem::replace(o, Tensor::empty(dtype)))
            })
            .collect();
        let results = self.run_checked(&inputs, dests)?;
        for (dst, src) in outputs.iter_mut().zip(results) {
            let _ = assign_or_replace(dst, src);
        }
        Ok(())
    }

    fn run(&self, inputs: &[TensorRef<'_>], dests: Vec<Option<Tensor>>) -> Result<Vec<Tensor>> {
        self.check_inputs(inputs)?;
        self.run_checked(inputs, dests)
    }

    /// `run` on inputs already checked.
    fn run_checked(
        &self,
        inputs: &[TensorRef<'_>],
        dests: Vec<Option<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        if self.exec.keeps_shared() {
            return self.run_keeping_shared(inputs);
        }
        let mut guards: Vec<Option<Guard>> = self.lock_all(|b| {
            Ok(Some(match b.update {
                Some(_) => Guard::Write(b.cell.write()?),
                None => Guard::Read(b.cell.read()?),
            }))
        })?;
        // The buffers of donated variables move into the call (an empty stand-in in the
        // variable meanwhile) and come back as their updates.
        let n_in = inputs.len();
        let mut donated: Vec<Option<Tensor>> = Vec::new();
        let mut old_shapes: Vec<Option<Vec<usize>>> = vec![None; self.shared.len()];
        for (i, (b, g)) in self.shared.iter().zip(guards.iter_mut()).enumerate() {
            if let (true, Some(Guard::Write(w))) = (b.donated, g.as_mut()) {
                donated.resize(n_in + i + 1, None);
                old_shapes[i] = Some(w.shape().to_vec());
                let stub = Tensor::empty(w.dtype());
                donated[n_in + i] = Some(std::mem::replace(&mut **w, stub));
            }
        }
        let ran = {
            let mut all: Inputs<'_> = Inputs::with_capacity(n_in + guards.len());
            all.extend(inputs.iter().map(TensorRef::reborrow));
            all.extend(guards.iter().flatten().map(|g| g.tensor().view()));
            self.exec.run_into(&all, dests, &mut donated)
        };
        let mut outs = match ran {
            Ok(outs) => outs,
            Err(e) => {
                // Every donated buffer comes back untouched: the steps that overwrite one run
                // after every step that may fail (`rewrite::inplace::commit_last`). A buffer not
                // found again would be a bug; the variable then keeps its shape, with zeros, and
                // the error says so rather than leave the state silently wrong.
                let mut lost = Vec::new();
                for (i, g) in guards.iter_mut().enumerate() {
                    if let (Some(shape), Some(Guard::Write(w))) = (&old_shapes[i], g.as_mut()) {
                        match donated.get_mut(n_in + i).and_then(Option::take) {
                            Some(back) => **w = back,
                            None => {
                                **w = Tensor::zeros(w.dtype(), shape);
                                lost.push(self.shared[i].name.clone());
                            }
                        }
                    }
                }
                if !lost.is_empty() {
                    return Err(Error::Runtime(format!(
                        "{e} (internal error: the failed call lost the value of shared variable(s) {}, now zeros)",
                        lost.join(", ")
                    )));
                }
                return Err(e);
            }
        };
        // Every update was computed from the old values; check them all, then apply them all.
        let updates: Vec<Tensor> = outs.drain(self.n_outputs..).collect();
        let mut mismatch = None;
        for (i, (b, g)) in self.shared.iter().zip(&guards).enumerate() {
            if let (Some(k), Some(g)) = (b.update, g) {
                let new = &updates[k - self.n_outputs];
                let shape = old_shapes[i].as_deref().unwrap_or(g.tensor().shape());
                if mismatch.is_none() && new.dtype() != g.tensor().dtype() {
                    // The compiler and the loader refuse such a binding: never applied.
                    mismatch = Some(Error::Runtime(format!(
                        "internal error: the update of shared variable `{}` is {}, expected {}",
                        b.name,
                        new.dtype(),
                        g.tensor().dtype()
                    )));
                }
                if mismatch.is_none() && new.shape() != shape {
                    mismatch = Some(Error::Shape(format!(
                        "the update of shared variable `{}` has shape {:?}, expected {:?}",
                        b.name,
                        new.shape(),
                        shape
                    )));
                }
            }
        }
        let mut updates: Vec<Option<Tensor>> = updates.into_iter().map(Some).collect();
        for (i, (b, g)) in self.shared.iter().zip(guards.iter_mut()).enumerate() {
            if let (Some(k), Some(Guard::Write(w))) = (b.update, g.as_mut()) {
                // Each update is read once (a variable has at most one), so it moves.
                let new = updates[k - self.n_outputs].take();
                match (&mismatch, new, &old_shapes[i]) {
                    (None, Some(new), _) => **w = new,
                    // After a bad update no update applies, except to donated variables: their
                    // old buffers may be overwritten already, so they take a new value that
                    // fits, or zeros of their shape (see `FunctionBuilder::update`).
                    (Some(_), Some(new), Some(shape))
                        if new.shape() == shape.as_slice() && new.dtype() == w.dtype() =>
                    {
                        **w = new
                    }
                    (Some(_), _, Some(shape)) => **w = Tensor::zeros(w.dtype(), shape),
                    (Some(_), _, None) => {}
                    (None, None, _) => {
                        return Err(Error::Runtime(format!("update of `{}` used twice", b.name)))
                    }
                }
            }
        }
        match mismatch {
            Some(e) => Err(e),
            None => Ok(outs),
        }
    }

    /// `lock` of each shared variable, taken in the lock order (by address, so that two
    /// functions sharing variables cannot deadlock), returned in the variables' order.
    fn lock_all<'s, T>(
        &'s self,
        mut lock: impl FnMut(&'s SharedBinding) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut held: Vec<Option<T>> = (0..self.shared.len()).map(|_| None).collect();
        for &i in &self.lock_order {
            held[i] = Some(lock(&self.shared[i])?);
        }
        Ok(held.into_iter().flatten().collect())
    }

    /// `run_checked` on an executable that keeps shared variables on its device: each
    /// variable is read where its newest value is (its device copy, or the host value copied
    /// in once and kept), and each update stays on the device as the variable's new value;
    /// only the outputs come back. All updates apply, or none.
    fn run_keeping_shared(&self, inputs: &[TensorRef<'_>]) -> Result<Vec<Tensor>> {
        let mut locks: Vec<DeviceLock> =
            self.lock_all(|b| Ok(b.cell.lock_device(b.update.is_some(), b.donated)))?;
        let run = self
            .exec
            .run_keeping_shared(inputs, &mut locks, self.n_outputs)?;
        let mut mismatch = None;
        for (b, lock) in self.shared.iter().zip(&locks) {
            let Some(k) = b.update else { continue };
            let new = run.updates[k - self.n_outputs].shape();
            if mismatch.is_none() && new != lock.shape() {
                mismatch = Some(Error::Shape(format!(
                    "the update of shared variable `{}` has shape {new:?}, expected {:?}",
                    b.name,
                    lock.shape()
                )));
            }
        }
        for ((b, lock), copy) in self.shared.iter().zip(&mut locks).zip(run.copies) {
            match (b.update, &mismatch) {
                (Some(k), None) => lock.update(run.updates[k - self.n_outputs].clone())?,
                // After a bad update no update applies, except to donated variables: the call
                // took their device copies to overwrite, so they take a new value that fits,
                // or zeros where their value is lost (as `run_checked` does).
                (Some(k), Some(_)) if lock.donated() => {
                    let new = &run.updates[k - self.n_outputs];
                    if new.shape() == lock.shape() {
                        lock.update(new.clone())?;
                    } else {
                        lock.lose();
                    }
                }
                (Some(_), Some(_)) => {}
                (None, _) => {
                    if let Some(copy) = copy {
                        lock.cache(copy)
                    }
                }
            }
        }
        match mismatch {
            Some(e) => Err(e),
            None => Ok(run.outputs),
        }
    }

    fn check_inputs(&self, inputs: &[TensorRef<'_>]) -> Result<()> {
        let names = |i: usize| {
            self.func
                .name_of(self.func.params[i])
                .map(|n| format!("input `{n}` (#{i})"))
                .unwrap_or(format!("input #{i}"))
        };
        if inputs.len() != self.n_inputs {
            let list: Vec<String> = (0..self.n_inputs)
                .map(|i| {
                    self.func
                        .name_of(self.func.params[i])
                        .unwrap_or("?")
                        .to_string()
                })
                .collect();
            return Err(Error::Input(format!(
                "{} takes {} inputs ({}), got {}",
                self.func.name,
                self.n_inputs,
                list.join(", "),
                inputs.len()
            )));
        }
        for (i, t) in inputs.iter().enumerate() {
            let ty = self.func.ty(self.func.params[i]);
            if t.dtype() != ty.dtype {
                return Err(Error::Input(format!(
                    "{}: expected {ty}, got an array of {}",
                    names(i),
                    t.dtype()
                )));
            }
            if !ty.accepts_shape(t.shape()) {
                return Err(Error::Input(format!(
                    "{}: expected shape {ty}, got {:?}",
                    names(i),
                    t.shape()
                )));
            }
        }
        Ok(())
    }
}

/// Writes `src` into `dst` in place when they have the same dtype and shape, and gives `src`
/// back (its buffer is then free for reuse); otherwise `dst` becomes `src`.
pub(crate) fn assign_or_replace(dst: &mut Tensor, src: Tensor) -> Option<Tensor> {
    if dst.dtype() != src.dtype() || dst.shape() != src.shape() {
        *dst = src;
        return None;
    }
    match (&mut *dst, &src) {
        (Tensor::F32(d), Tensor::F32(s)) => d.assign(s),
        (Tensor::F64(d), Tensor::F64(s)) => d.assign(s),
        (Tensor::I32(d), Tensor::I32(s)) => d.assign(s),
        (Tensor::I64(d), Tensor::I64(s)) => d.assign(s),
        (Tensor::Bool(d), Tensor::Bool(s)) => d.assign(s),
        (Tensor::F16(d), Tensor::F16(s)) => d.assign(s),
        (Tensor::BF16(d), Tensor::BF16(s)) => d.assign(s),
        _ => unreachable!("the dtypes were compared above"),
    }
    Some(src)
}
