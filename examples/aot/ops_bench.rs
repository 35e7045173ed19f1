//! The ops that compile ahead of time since the new-ops issue (convolution, pooling, an
//! embedding lookup, a recurrent `scan`, a sort) timed in their object against the CPU
//! backend (JIT), in one process on the same inputs, both on one thread, runs alternating so
//! that a busy machine slows both alike. The objects are linked into one shared library with
//! `cc` and called through `dlopen`, into output arrays and a scratch area allocated once.
//!
//! ```sh
//! cargo run --release --example aot_ops_bench [runs]
//! ```

#[cfg(unix)]
#[path = "../../tests/support/aot_lib.rs"]
mod aot_lib;

#[cfg(unix)]
mod unix {
    use super::aot_lib;
    use kiln::aot::{AotArtifact, AotOptions};
    use kiln::{function, Backend, Conv2d, Graph, Tensor, Var};
    use std::time::Instant;

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// One workload: its name, inputs and outputs as a graph.
    struct Work {
        name: &'static str,
        inputs: Vec<Tensor>,
        build: fn(&[Var]) -> Vec<Var>,
    }

    fn workloads() -> Vec<Work> {
        let normal = |shape: &[usize], seed: u64| {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n as u64)
                .map(|i| kiln::random::normal_f32(seed, i))
                .collect();
            Tensor::from(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v).unwrap())
        };
        let ids: Vec<i32> = (0..64 * 32).map(|i: i32| i * 7919 % 10_000).collect();
        let ids =
            Tensor::from(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[64, 32]), ids).unwrap());
        vec![
            Work {
                name: "conv2d 8x16x32x32 * 32x16x3x3, padding 1",
                inputs: vec![normal(&[8, 16, 32, 32], 1), normal(&[32, 16, 3, 3], 2)],
                build: |v| {
                    let conv = Conv2d {
                        padding: [1, 1],
                        ..Conv2d::default()
                    };
                    vec![v[0].conv2d(&v[1], conv)]
                },
            },
            Work {
                name: "max_pool2d 2x2 of 8x32x32x32",
                inputs: vec![normal(&[8, 32, 32, 32], 3)],
                build: |v| vec![v[0].max_pool2d([2, 2], [2, 2], [0, 0])],
            },
            Work {
                name: "embedding: 64x32 ids into 10000x128, summed",
                inputs: vec![normal(&[10_000, 128], 4), ids],
                build: |v| vec![v[0].take(&v[1], 0).sum(Some(&[1]), false)],
            },
            Work {
                name: "RNN scan: 32 steps of tanh(x Wx + h Wh), 16x64",
                inputs: vec![
                    normal(&[16, 64], 5),
                    normal(&[32, 16, 64], 6),
                    normal(&[64, 64], 7),
                    normal(&[64, 64], 8),
                ],
                build: |v| {
                    let (wx, wh) = (v[2].clone(), v[3].clone());
                    let (last, _) = kiln::scan(&[&v[0]], &[&v[1]], |c, x| {
                        let h = (x[0].matmul(&wx) * 0.1 + c[0].matmul(&wh) * 0.1).tanh();
                        (vec![h], vec![])
                    });
                    vec![last[0].clone()]
                },
            },
            Work {
                name: "sort 256 rows of 1024 f32",
                inputs: vec![normal(&[256, 1024], 9)],
                build: |v| vec![v[0].sort(-1)],
            },
        ]
    }

    pub fn main() -> Result<(), String> {
        let runs: usize = std::env::args()
            .nth(1)
            .map_or(Ok(11), |s| s.parse())
            .map_err(|e| format!("runs: {e}"))?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global()
            .map_err(|e| e.to_string())?;
        let works = workloads();
        let mut arts: Vec<AotArtifact> = Vec::new();
        let mut jits = Vec::new();
        for (k, w) in works.iter().enumerate() {
            let g = Graph::new();
            let vars: Vec<Var> = w
                .inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let dims: Vec<Option<usize>> = t.shape().iter().map(|&d| Some(d)).collect();
                    g.input(&format!("in{i}"), t.dtype(), dims)
                })
                .collect();
            let outs = (w.build)(&vars);
            let (vr, or): (Vec<&Var>, Vec<&Var>) = (vars.iter().collect(), outs.iter().collect());
            let opts = AotOptions {
                symbol: Some(format!("work{k}")),
                ..AotOptions::default()
            };
            arts.push(function(&vr, &or).aot(&opts).map_err(|e| e.to_string())?);
            jits.push(
                function(&vr, &or)
                    .backend(Backend::Cpu)
                    .compile()
                    .map_err(|e| e.to_string())?,
            );
        }
        let dir = std::env::temp_dir().join(format!("kiln-aot-ops-bench-{}", std::process::id()));
        let refs: Vec<&AotArtifact> = arts.iter().collect();
        let lib = aot_lib::link(&refs, &dir)?;
        println!("one thread, median of {runs} alternating runs (ms):");
        println!("{:<50} {:>9} {:>9} {:>8}", "", "JIT", "AOT", "JIT/AOT");
        for ((w, art), jit) in works.iter().zip(&arts).zip(&jits) {
            let inputs: Vec<&Tensor> = w.inputs.iter().collect();
            let mut outs: Vec<Tensor> = art
                .outputs
                .iter()
                .map(|o| Tensor::zeros(o.dtype, &o.shape))
                .collect();
            let mut scratch = vec![0u8; art.scratch_bytes + 64];
            let align = scratch.as_ptr().align_offset(64);
            let mut ptrs: Vec<*mut u8> = w
                .inputs
                .iter()
                .map(|t| t.view().as_ptr() as *mut u8)
                .collect();
            for o in &mut outs {
                ptrs.push(kiln::for_each_dtype!(o, a => a.as_mut_ptr() as *mut u8));
            }
            if art.scratch_bytes > 0 {
                ptrs.push(scratch[align..].as_mut_ptr());
            }
            // SAFETY: the inputs are standard-layout arrays of the artifact's dtypes and shapes,
            // the outputs were made from its description, the scratch is large and aligned.
            let aot = || unsafe { lib.call_raw(art, &ptrs) };
            let want = jit.call(&inputs).map_err(|e| e.to_string())?;
            if aot()? != 0 {
                return Err(format!("{}: the object failed", w.name));
            }
            let same = want.iter().zip(&outs).all(|(a, b)| a.bit_eq(b));
            let (mut tj, mut ta) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let t = Instant::now();
                let r = jit.call(&inputs).map_err(|e| e.to_string())?;
                tj.push(t.elapsed().as_secs_f64() * 1e3);
                drop(r);
                let t = Instant::now();
                aot()?;
                ta.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let (j, a) = (median(&mut tj), median(&mut ta));
            println!(
                "{:<50} {j:>9.3} {a:>9.3} {:>8.2}{}",
                w.name,
                j / a,
                if same {
                    ""
                } else {
                    "  (bits differ from the JIT's)"
                }
            );
        }
        Ok(())
    }
}

#[cfg(unix)]
fn main() {
    if let Err(e) = unix::main() {
        eprintln!("aot_ops_bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(unix))]
fn main() {
    eprintln!("aot_ops_bench needs dlopen (a Unix)");
}
