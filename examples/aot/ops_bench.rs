//! Ahead-of-time objects timed against the CPU backend (JIT): the ops that compile ahead of
//! time since the new-ops issue (convolution, pooling, an embedding lookup, a recurrent
//! `scan`, a sort), an MLP's forward pass and the GPT inference of `examples/gpt.rs` (its
//! weights inputs here). Each workload is compiled twice, self-contained and with kiln's
//! runtime library (`AotOptions::runtime`: the JIT's GEMM and host math), and timed in one
//! process on the same inputs, all on one thread, runs alternating so that a busy machine
//! slows them alike. The objects are linked into one shared library with `cc` and called
//! through `dlopen`, into output arrays and a scratch area allocated once.
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
            Work {
                name: "MLP forward: 1024x128 -> 512 (gelu) -> 128",
                inputs: vec![
                    normal(&[1024, 128], 10),
                    normal(&[128, 512], 11),
                    normal(&[512], 12),
                    normal(&[512, 128], 13),
                ],
                build: |v| vec![kiln::nn::gelu(&(v[0].matmul(&v[1]) + &v[2])).matmul(&v[3])],
            },
            Work {
                name: "GPT inference (examples/gpt.rs): 2 blocks, B 16, T 64",
                inputs: {
                    let tokens: Vec<i64> = (0..16 * 64).map(|i: i64| i * 7919 % 256).collect();
                    let tokens = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[16, 64]), tokens);
                    let mut w = vec![Tensor::from(tokens.unwrap())];
                    w.push(normal(&[256, 128], 14));
                    w.push(normal(&[64, 128], 15));
                    for b in 0..2u64 {
                        for (i, shape) in [[128, 128], [128, 128], [128, 128], [128, 128]]
                            .iter()
                            .chain(&[[128, 512], [512, 128]])
                            .enumerate()
                        {
                            w.push(normal(shape, 16 + 6 * b + i as u64));
                        }
                    }
                    w.push(normal(&[128, 256], 30));
                    w
                },
                build: |v| {
                    let mut h = v[1].take(&v[0], 0) + &v[2];
                    for b in 0..2 {
                        h = gpt_block(&h, &v[3 + 6 * b..9 + 6 * b]);
                    }
                    vec![norm(&h).reshape(&[16 * 64, 128]).matmul(&v[15])]
                },
            },
        ]
    }

    /// Layer norm over the last axis (of 128), without gain or bias.
    fn norm(x: &Var) -> Var {
        let g = x.graph();
        let filled = |v: f32| g.constant(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[128]), v));
        kiln::nn::layer_norm(x, &filled(1.0), &filled(0.0), 1e-5)
    }

    /// A pre-norm transformer block (`examples/gpt.rs`'s, its weights `w` inputs here: q, k, v,
    /// the output projection, the MLP's two): causal self-attention, then the MLP, each added
    /// to its input; layer norms without gain.
    fn gpt_block(h: &Var, w: &[Var]) -> Var {
        let (wq, wk, wv, wo, w1, w2) = (&w[0], &w[1], &w[2], &w[3], &w[4], &w[5]);
        let heads = |x: &Var| x.reshape(&[16, 64, 4, 32]).transpose(&[0, 2, 1, 3]);
        let x = norm(h);
        let att = kiln::nn::attention(
            &heads(&x.matmul(wq)),
            &heads(&x.matmul(wk)),
            &heads(&x.matmul(wv)),
            true,
        );
        let merged = att.transpose(&[0, 2, 1, 3]).reshape(&[16, 64, 128]);
        let h = h + merged.matmul(wo);
        &h + kiln::nn::gelu(&norm(&h).matmul(w1)).matmul(w2)
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
        // Each workload twice: self-contained, and calling kiln's runtime library.
        let mut arts: Vec<[AotArtifact; 2]> = Vec::new();
        let mut jits = Vec::new();
        for (k, w) in works.iter().enumerate() {
            let g = Graph::new();
            let vars: Vec<Var> = w
                .inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let dims: Vec<Option<i64>> =
                        t.shape().iter().map(|&d| Some(d as i64)).collect();
                    g.input(&format!("in{i}"), t.dtype(), dims)
                })
                .collect();
            let outs = (w.build)(&vars);
            let (vr, or): (Vec<&Var>, Vec<&Var>) = (vars.iter().collect(), outs.iter().collect());
            let aot = |runtime: bool| {
                let opts = AotOptions {
                    symbol: Some(format!("work{k}{}", if runtime { "_rt" } else { "" })),
                    runtime,
                    ..AotOptions::default()
                };
                function(&vr, &or).aot(&opts).map_err(|e| e.to_string())
            };
            arts.push([aot(false)?, aot(true)?]);
            jits.push(
                function(&vr, &or)
                    .backend(Backend::Cpu)
                    .compile()
                    .map_err(|e| e.to_string())?,
            );
        }
        let dir = std::env::temp_dir().join(format!("kiln-aot-ops-bench-{}", std::process::id()));
        let refs: Vec<&AotArtifact> = arts.iter().flatten().collect();
        let lib = aot_lib::link(&refs, &dir)?;
        println!("one thread, median of {runs} alternating runs (ms); AOT+rt calls kiln's runtime library:");
        println!(
            "{:<50} {:>9} {:>9} {:>8} {:>9} {:>8}",
            "", "JIT", "AOT", "JIT/AOT", "AOT+rt", "JIT/rt"
        );
        for ((w, pair), jit) in works.iter().zip(&arts).zip(&jits) {
            let inputs: Vec<&Tensor> = w.inputs.iter().collect();
            let want = jit.call(&inputs).map_err(|e| e.to_string())?;
            let mut timed = Vec::new();
            for art in pair {
                timed.push(Timed::new(&lib, art, w, &want)?);
            }
            let (mut tj, mut ta, mut tr) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..runs {
                let t = Instant::now();
                let r = jit.call(&inputs).map_err(|e| e.to_string())?;
                tj.push(t.elapsed().as_secs_f64() * 1e3);
                drop(r);
                ta.push(timed[0].run()?);
                tr.push(timed[1].run()?);
            }
            let (j, a, r) = (median(&mut tj), median(&mut ta), median(&mut tr));
            let differ = timed.iter().any(|t| !t.same);
            println!(
                "{:<50} {j:>9.3} {a:>9.3} {:>8.2} {r:>9.3} {:>8.2}{}",
                w.name,
                j / a,
                j / r,
                if differ {
                    "  (bits differ from the JIT's)"
                } else {
                    ""
                }
            );
        }
        Ok(())
    }

    /// One object ready to call: its outputs and scratch allocated once, the pointers laid out.
    struct Timed<'a> {
        lib: &'a aot_lib::Library,
        art: &'a AotArtifact,
        _outs: Vec<Tensor>,
        _scratch: Vec<u8>,
        ptrs: Vec<*mut u8>,
        /// Whether its first call gave the JIT's bits.
        same: bool,
    }

    impl<'a> Timed<'a> {
        fn new(
            lib: &'a aot_lib::Library,
            art: &'a AotArtifact,
            w: &Work,
            want: &[Tensor],
        ) -> Result<Timed<'a>, String> {
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
            let mut timed = Timed {
                lib,
                art,
                _outs: outs,
                _scratch: scratch,
                ptrs,
                same: false,
            };
            if timed.call()? != 0 {
                return Err(format!("{}: the object failed", w.name));
            }
            timed.same = want.iter().zip(&timed._outs).all(|(a, b)| a.bit_eq(b));
            Ok(timed)
        }

        fn call(&self) -> Result<i32, String> {
            // SAFETY: the inputs are standard-layout arrays of the artifact's dtypes and
            // shapes, the outputs were made from its description, the scratch is large and
            // aligned, and all of them live as long as `self`.
            unsafe { self.lib.call_raw(self.art, &self.ptrs) }
        }

        /// One call's time in milliseconds.
        fn run(&self) -> Result<f64, String> {
            let t = Instant::now();
            self.call()?;
            Ok(t.elapsed().as_secs_f64() * 1e3)
        }
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
