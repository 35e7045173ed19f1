//! W1 ahead of time against the JIT, in one process on the same inputs: the object from
//! `kiln aot w1.kir` (built into a shared library by `make libw1.so`) is loaded with `dlopen`
//! and timed on one thread next to the CPU backend (JIT) with rayon's pool at one thread.
//! Runs alternate between the two so that a busy machine slows both alike.
//!
//! ```sh
//! make -C examples/aot libw1.so
//! cargo run --release --example aot_bench -- examples/aot/libw1.so [runs]
//! ```

#[cfg(unix)]
mod unix {
    use kiln::{function, Backend, Graph, Tensor};
    use ndarray::{ArrayD, IxDyn};
    use std::ffi::{c_char, c_int, c_void, CString};
    use std::time::Instant;

    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    const RTLD_NOW: c_int = 2;

    /// The entry point: 0, or a failure code (W1 has none).
    type W1 = unsafe extern "C" fn(*const f32, *const f32, *mut f32) -> i32;

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    pub fn main() -> Result<(), String> {
        let mut args = std::env::args().skip(1);
        let lib = args.next().ok_or("usage: aot_bench PATH/libw1.so [runs]")?;
        let runs: usize = args
            .next()
            .map_or(Ok(15), |s| s.parse())
            .map_err(|e| format!("runs: {e}"))?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global()
            .map_err(|e| e.to_string())?;
        // An absolute path: dlopen searches the library path for a bare name.
        let abs = std::fs::canonicalize(&lib).map_err(|e| format!("{lib}: {e}"))?;
        let path = CString::new(abs.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: loading a library kiln generated; its entry point has W1's signature, which
        // the header of the same build declares.
        let w1: W1 = unsafe {
            let h = dlopen(path.as_ptr(), RTLD_NOW);
            if h.is_null() {
                return Err(format!("cannot load {lib}"));
            }
            let f = dlsym(h, c"w1".as_ptr());
            if f.is_null() {
                return Err(format!("{lib} has no symbol w1"));
            }
            std::mem::transmute::<*mut c_void, W1>(f)
        };

        let n = 16_000_000;
        let normal = |seed| {
            ArrayD::from_shape_vec(
                IxDyn(&[n]),
                (0..n as u64)
                    .map(|i| kiln::random::normal_f32(seed, i))
                    .collect(),
            )
            .expect("n elements")
        };
        let (x, y) = (normal(0), normal(1));
        let g = Graph::new();
        let xv = g.input("x", kiln::f32, [Some(n as i64)]);
        let yv = g.input("y", kiln::f32, [Some(n as i64)]);
        let out = (-(&xv * &xv)).exp() * yv.sin() + &xv * &yv * 0.5;
        let f = function(&[&xv, &yv], &[&out])
            .backend(Backend::Cpu)
            .compile()
            .map_err(|e| e.to_string())?;

        let mut reused = vec![0f32; n];
        let jit = || f.call(&[x.view(), y.view()]).map_err(|e| e.to_string());
        // SAFETY: x and y hold n elements each and `o` has room for n; w1 writes exactly those.
        let aot = |o: *mut f32| unsafe { w1(x.as_ptr(), y.as_ptr(), o) };
        // Warm up, and check that both compute the same.
        let want = jit()?;
        aot(reused.as_mut_ptr());
        let want = match &want[0] {
            Tensor::F32(a) => a.clone(),
            _ => return Err("W1 gives f32".into()),
        };
        let differ = want
            .iter()
            .zip(&reused)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let (mut t_jit, mut t_aot, mut t_fresh) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            let r = jit()?;
            t_jit.push(t.elapsed().as_secs_f64() * 1e3);
            drop(r);
            let t = Instant::now();
            aot(reused.as_mut_ptr());
            t_aot.push(t.elapsed().as_secs_f64() * 1e3);
            // With a fresh output each call, as the JIT allocates one.
            let t = Instant::now();
            let mut fresh: Vec<f32> = Vec::with_capacity(n);
            aot(fresh.as_mut_ptr());
            // SAFETY: w1 wrote all n elements.
            unsafe { fresh.set_len(n) };
            t_fresh.push(t.elapsed().as_secs_f64() * 1e3);
            drop(fresh);
        }
        let (j, a, fr) = (median(&mut t_jit), median(&mut t_aot), median(&mut t_fresh));
        println!(
            "W1, 16M f32, one thread, median of {runs} alternating runs:\n  \
             JIT (Function::call, allocates its output)   {j:8.3} ms\n  \
             AOT into a reused output buffer               {a:8.3} ms   JIT/AOT = {:.2}\n  \
             AOT into a freshly allocated output           {fr:8.3} ms   JIT/AOT = {:.2}\n  \
             elements that differ from the JIT's: {differ} of {n}",
            j / a,
            j / fr
        );
        Ok(())
    }
}

#[cfg(unix)]
fn main() {
    if let Err(e) = unix::main() {
        eprintln!("aot_bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(unix))]
fn main() {
    eprintln!("aot_bench needs dlopen (a Unix)");
}
