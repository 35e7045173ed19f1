//! Ahead-of-time objects called in this process: many artifacts are linked by `cc` into one
//! shared library, which is loaded with `dlopen`, and each entry point is called on arrays of
//! this process. One link serves hundreds of random programs, where a C driver per program
//! would cost a compile and a link each.
#![allow(dead_code)]

use kiln::aot::AotArtifact;
use kiln::{DType, Tensor};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlclose(handle: *mut c_void) -> c_int;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;

/// Whether `cc` is there to link with.
pub fn have_cc() -> bool {
    std::process::Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A loaded library of entry points.
pub struct Library {
    handle: *mut c_void,
    _dir: PathBuf,
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and no entry point is running.
        unsafe { dlclose(self.handle) };
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a C string or null.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "unknown dl error".into()
        } else {
            std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// kiln's runtime library for objects (`crates/kiln-rt`), built once per process with the
/// cargo that builds this, into a target directory of its own (the outer build's may be
/// locked): `target/kiln-rt/release/libkiln_rt.a`.
pub fn runtime_library() -> Result<PathBuf, String> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let target = root.join("target").join("kiln-rt");
            let out = std::process::Command::new(env!("CARGO"))
                .args([
                    "build",
                    "--release",
                    "--quiet",
                    "-p",
                    "kiln-rt",
                    "--manifest-path",
                ])
                .arg(root.join("Cargo.toml"))
                .arg("--target-dir")
                .arg(&target)
                .output()
                .map_err(|e| format!("cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cargo build -p kiln-rt failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(target.join("release").join("libkiln_rt.a"))
        })
        .clone()
}

/// What a program linking `artifacts` adds to the link line: kiln's runtime library and the
/// system libraries a Rust static library needs, where an artifact calls the runtime.
pub fn runtime_args(artifacts: &[&AotArtifact]) -> Result<Vec<std::ffi::OsString>, String> {
    if artifacts.iter().all(|a| a.runtime.is_empty()) {
        return Ok(Vec::new());
    }
    Ok(vec![
        runtime_library()?.into_os_string(),
        "-lpthread".into(),
        "-ldl".into(),
    ])
}

/// Writes the objects into `dir`, links them into one shared library (with kiln's runtime
/// library where one calls it) and loads it.
pub fn link(artifacts: &[&AotArtifact], dir: &Path) -> Result<Library, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut objects = Vec::new();
    for (i, a) in artifacts.iter().enumerate() {
        let p = dir.join(format!("k{i}.o"));
        std::fs::write(&p, &a.object).map_err(|e| e.to_string())?;
        objects.push(p);
    }
    let so = dir.join("programs.so");
    let out = std::process::Command::new("cc")
        .arg("-shared")
        .args(&objects)
        .arg("-o")
        .arg(&so)
        .args(runtime_args(artifacts)?)
        .arg("-lm")
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc -shared failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let path = CString::new(so.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a path to a library this test just linked.
    let handle = unsafe { dlopen(path.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dl_error());
    }
    Ok(Library {
        handle,
        _dir: dir.to_path_buf(),
    })
}

/// The bytes of a standard-layout tensor.
fn bytes_ptr(t: &Tensor) -> *const u8 {
    t.view().as_ptr()
}

type P = *mut u8;

/// Calls `f` with `args` pointers (the entry points take only pointers).
///
/// # Safety
/// `f` must be a C function taking exactly `args.len()` pointers.
unsafe fn call_pointers(f: *mut c_void, a: &[P]) -> Result<i32, String> {
    macro_rules! arity {
        ($($i:tt)*) => {{
            let g: extern "C" fn($(arity_p!($i)),*) -> i32 = unsafe { std::mem::transmute(f) };
            g($(a[$i]),*)
        }};
    }
    macro_rules! arity_p {
        ($i:tt) => {
            P
        };
    }
    Ok(match a.len() {
        1 => arity!(0),
        2 => arity!(0 1),
        3 => arity!(0 1 2),
        4 => arity!(0 1 2 3),
        5 => arity!(0 1 2 3 4),
        6 => arity!(0 1 2 3 4 5),
        7 => arity!(0 1 2 3 4 5 6),
        8 => arity!(0 1 2 3 4 5 6 7),
        9 => arity!(0 1 2 3 4 5 6 7 8),
        10 => arity!(0 1 2 3 4 5 6 7 8 9),
        11 => arity!(0 1 2 3 4 5 6 7 8 9 10),
        12 => arity!(0 1 2 3 4 5 6 7 8 9 10 11),
        13 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12),
        14 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13),
        15 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
        16 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15),
        17 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16),
        18 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17),
        19 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18),
        20 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19),
        21 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20),
        22 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21),
        23 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22),
        24 => arity!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23),
        n => return Err(format!("an entry point of {n} arguments")),
    })
}

impl Library {
    /// Calls the entry point of `art` on `pointers` (inputs, outputs, then the scratch when it
    /// takes one) and returns its code: for callers that keep their own arrays (benchmarks).
    ///
    /// # Safety
    /// Each pointer must point to memory of the dtype and shape the artifact lists (the
    /// scratch: `scratch_bytes` bytes aligned to 64).
    pub unsafe fn call_raw(&self, art: &AotArtifact, pointers: &[*mut u8]) -> Result<i32, String> {
        let sym = CString::new(art.symbol.as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a symbol name of the loaded library.
        let f = unsafe { dlsym(self.handle, sym.as_ptr()) };
        if f.is_null() {
            return Err(dl_error());
        }
        // SAFETY: the caller's promise.
        unsafe { call_pointers(f, pointers) }
    }

    /// Calls the entry point of `art` on `inputs` (converted to standard layout) and returns
    /// its outputs. Outputs and scratch start poisoned (NaN-like bytes), so an element left
    /// unwritten shows.
    pub fn call(&self, art: &AotArtifact, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        let sym = CString::new(art.symbol.as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a symbol name of the loaded library.
        let f = unsafe { dlsym(self.handle, sym.as_ptr()) };
        if f.is_null() {
            return Err(dl_error());
        }
        if inputs.len() != art.inputs.len() {
            return Err(format!(
                "{} inputs for {} parameters",
                inputs.len(),
                art.inputs.len()
            ));
        }
        let owned: Vec<Tensor> = inputs
            .iter()
            .map(|t| t.view().to_standard_owned())
            .collect();
        for (t, a) in owned.iter().zip(&art.inputs) {
            if t.dtype() != a.dtype || t.shape() != a.shape.as_slice() {
                return Err(format!(
                    "input {}: {}{:?} for {}{:?}",
                    a.name,
                    t.dtype(),
                    t.shape(),
                    a.dtype,
                    a.shape
                ));
            }
        }
        let mut outs: Vec<Tensor> = art
            .outputs
            .iter()
            .map(|o| poisoned(o.dtype, &o.shape))
            .collect();
        let mut scratch = vec![0xA5u8; art.scratch_bytes + 64];
        let align = scratch.as_ptr().align_offset(64);
        let mut ptrs: Vec<P> = owned.iter().map(|t| bytes_ptr(t) as P).collect();
        for o in &mut outs {
            ptrs.push(kiln::for_each_dtype!(o, a => a.as_mut_ptr() as P));
        }
        if art.scratch_bytes > 0 {
            // SAFETY: `align` is within the 64 spare bytes.
            ptrs.push(unsafe { scratch.as_mut_ptr().add(align) });
        }
        // SAFETY: the entry point takes one pointer per input, per output, and the scratch
        // when it needs one (the artifact's own description); each points to memory of the
        // dtype and shape it expects.
        let code = unsafe { call_pointers(f, &ptrs)? };
        if code != 0 {
            let said = usize::try_from(code - 1)
                .ok()
                .and_then(|i| art.errors.get(i))
                .map_or("not one of its codes", |e| e.as_str());
            return Err(format!("{} returned {code}: {said}", art.symbol));
        }
        Ok(outs)
    }
}

/// An array of `shape` filled with a pattern no computation is likely to produce.
fn poisoned(dtype: DType, shape: &[usize]) -> Tensor {
    match dtype {
        DType::Bool => Tensor::zeros(DType::Bool, shape),
        DType::I32 => Tensor::full(DType::I32, shape, -123_456_789.0),
        DType::I64 => Tensor::full(DType::I64, shape, -123_456_789.0),
        DType::F32 => Tensor::full(DType::F32, shape, 1.234_5e30),
        DType::F64 => Tensor::full(DType::F64, shape, 1.234_5e300),
        DType::F16 | DType::BF16 => Tensor::full(dtype, shape, 12_345.0),
    }
}
