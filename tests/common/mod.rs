//! Helpers shared by the file-test harness and the CLI tests.
#![allow(dead_code)]

use kiln::Tensor;
use std::path::{Path, PathBuf};

/// The backends that take every step (CPU, interpreter) and, with the `gpu` feature, the GPU
/// backend's device VM on the host device (the GPU runtime's logic without a GPU).
pub fn backends_with_gpu_host() -> Vec<kiln::Backend> {
    #[cfg(feature = "gpu")]
    kiln::jit_ptx::cuda::use_host_device();
    let mut all = vec![kiln::Backend::Cpu, kiln::Backend::Interp];
    if cfg!(feature = "gpu") {
        all.push(kiln::Backend::Gpu);
    }
    all
}

/// Floats that sorts and arg-reductions must order as the interpreter does: NaN, the
/// infinities, and zeros of both signs often (they are equal, so their order is the stable
/// one).
pub const SORT_SPECIALS: [f64; 7] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.0,
    0.0,
    -0.0,
    0.0,
];

/// Whether two tensors are the same bits, element by element (widened to f64, which keeps
/// every bit of the narrower types), any NaN matching any NaN (payloads are not kept).
pub fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
}

/// A small deterministic generator (xorshift) for random test cases.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A function's inputs and outputs, built in a graph.
pub type Build<'a> = dyn Fn(&kiln::Graph) -> (Vec<kiln::Var>, Vec<kiln::Var>) + 'a;

/// Compiles `build` on `backend` with the optimizer off, then on, and calls each on `inputs`.
pub fn call_both_ways(
    backend: kiln::Backend,
    build: &Build<'_>,
    inputs: &[Tensor],
) -> Vec<kiln::Result<Vec<Tensor>>> {
    [false, true]
        .into_iter()
        .map(|optimize| {
            let g = kiln::Graph::new();
            let (ins, outs) = build(&g);
            let ins: Vec<&kiln::Var> = ins.iter().collect();
            let outs: Vec<&kiln::Var> = outs.iter().collect();
            let f = kiln::function(&ins, &outs)
                .backend(backend)
                .options(kiln::CompileOptions {
                    optimize,
                    backend: Some(backend),
                    ..Default::default()
                })
                .compile()?;
            let refs: Vec<&Tensor> = inputs.iter().collect();
            f.call(&refs)
        })
        .collect()
}

/// Every `.kir` file under `dir`, recursively.
pub fn kir_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            kir_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "kir") {
            out.push(p);
        }
    }
}

/// Splits `s` at commas outside brackets.
pub fn split_top(s: &str) -> Vec<String> {
    let (mut depth, mut cur, mut out) = (0i32, String::new(), Vec::new());
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// Whether `got` matches `want`: exact for integers and bools; for floats within a few units of
/// the last place the literal was written with, NaN matching NaN.
pub fn close(got: &Tensor, want: &Tensor) -> bool {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return false;
    }
    let tol = match got.dtype() {
        kiln::DType::F32 => 4e-6,
        kiln::DType::F64 => 1e-12,
        _ => 0.0,
    };
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .all(|(&g, w)| {
            (g.is_nan() && w.is_nan())
                || g == w
                || (g.is_finite() && w.is_finite() && (g - w).abs() <= tol * w.abs().max(1e-6))
        })
}

/// Compiles the first function of `src` (text form) for `backend` under the name `name`,
/// writing its `schedule` dump into `dump_dir` when one is given.
pub fn compile_text(
    src: &str,
    name: &str,
    backend: kiln::Backend,
    dump_dir: Option<&std::path::Path>,
) -> kiln::Function {
    let f = kiln::ir::text::parse("test.kir", src).unwrap().remove(0);
    let mut opts = kiln::CompileOptions {
        name: name.into(),
        backend: Some(backend),
        ..kiln::CompileOptions::default()
    };
    if let Some(dir) = dump_dir {
        opts.dump = kiln::dump::DumpOptions {
            stages: vec!["schedule".into()],
            dir: Some(dir.to_path_buf()),
            ..Default::default()
        };
    }
    kiln::compile_func(f, &opts).unwrap()
}

/// A tensor of `dtype` and `shape` from the standard normal stream `seed`, times `scale`
/// (integers rounded).
pub fn normal_values(dtype: kiln::DType, shape: &[usize], seed: u64, scale: f64) -> Tensor {
    use ndarray::{ArrayD, IxDyn};
    let n: usize = shape.iter().product();
    let xs: Vec<f64> = (0..n)
        .map(|i| kiln::random::normal_f32(seed, i as u64) as f64 * scale)
        .collect();
    let sh = IxDyn(shape);
    let ints = || xs.iter().map(|&x| x.round());
    match dtype {
        kiln::DType::F32 => {
            Tensor::F32(ArrayD::from_shape_vec(sh, xs.iter().map(|&x| x as f32).collect()).unwrap())
        }
        kiln::DType::F64 => Tensor::F64(ArrayD::from_shape_vec(sh, xs.clone()).unwrap()),
        kiln::DType::I32 => {
            Tensor::I32(ArrayD::from_shape_vec(sh, ints().map(|x| x as i32).collect()).unwrap())
        }
        kiln::DType::I64 => {
            Tensor::I64(ArrayD::from_shape_vec(sh, ints().map(|x| x as i64).collect()).unwrap())
        }
        kiln::DType::Bool => {
            Tensor::Bool(ArrayD::from_shape_vec(sh, xs.iter().map(|&x| x > 0.0).collect()).unwrap())
        }
        half => kiln::perform::cast(&Tensor::F64(ArrayD::from_shape_vec(sh, xs).unwrap()), half),
    }
}

/// The CPU backend's CLIF for what `compile` compiles with the options it is given (the
/// `clif` dump, written to a temporary folder that is removed afterwards). `tag` keeps the
/// folders of concurrent tests apart.
pub fn clif_of(tag: &str, compile: impl FnOnce(kiln::CompileOptions)) -> String {
    let dir = std::env::temp_dir().join(format!("kiln-clif-{tag}-{}", std::process::id()));
    compile(kiln::CompileOptions {
        name: tag.into(),
        dump: kiln::dump::DumpOptions {
            stages: vec!["clif".into()],
            dir: Some(dir.clone()),
            ..Default::default()
        },
        backend: Some(kiln::Backend::Cpu),
        ..Default::default()
    });
    let text = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
                .collect::<String>()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    text
}

/// The seed of this run's random programs: `KILN_RANDOM_SEED`, else the clock, so that each
/// run tries programs the last did not. Said on the process's own stderr with `what` (see
/// [`announce`]).
pub fn random_seed(what: &str) -> u64 {
    let seed = match std::env::var("KILN_RANDOM_SEED") {
        Ok(s) => s.trim().parse().expect("KILN_RANDOM_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    };
    announce(&format!(
        "{what}: seed {seed} (KILN_RANDOM_SEED={seed} replays it)"
    ));
    seed
}

/// Writes `line` to stderr past the test harness's capture of `eprintln!`: a process that
/// aborts (an allocation that fails, a stack overflow) dies before captured output is shown,
/// and a random test's seed must still reach the log to be replayed.
pub fn announce(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
