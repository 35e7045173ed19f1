//! kiln's GEMM (`kiln::gemm`) with the kernels of each ISA the host runs (`kiln-avx2`,
//! `kiln-avx512`) against matrixmultiply's (what kiln used before, and still uses where the
//! host lacks AVX2 or FMA), on rayon's threads (`RAYON_NUM_THREADS` sets how many):
//!
//! - `w4`: W4's product, 1024 x 1024 by 1024 x 1024, f32;
//! - `w5_products`: the eight products of one W5 training step, in the layouts its gradient
//!   graph hands them over (the weight gradients read `x^T`, the input gradients `w^T`, both
//!   through swapped strides).
//!
//! `cargo bench --bench gemm`. x86_64 with AVX2 and FMA only; elsewhere it says so.

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::gemm::Element;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};

/// `(m, n, k, a transposed, b transposed)` of W5's products (batch 256, 784-512-512-10).
const W5: [(usize, usize, usize, bool, bool); 8] = [
    (256, 512, 784, false, false),
    (256, 512, 512, false, false),
    (256, 10, 512, false, false),
    (256, 512, 10, false, true),
    (256, 512, 512, false, true),
    (512, 10, 256, true, false),
    (512, 512, 256, true, false),
    (784, 512, 256, true, false),
];

fn values(rows: usize, cols: usize, transposed: bool) -> Array2<f32> {
    let f = |(i, j): (usize, usize)| ((i * 31 + j * 17) % 101) as f32 / 50.0 - 1.0;
    if transposed {
        Array2::from_shape_fn((cols, rows), |(j, i)| f((i, j))).reversed_axes()
    } else {
        Array2::from_shape_fn((rows, cols), f)
    }
}

/// Who multiplies: kiln with one ISA's kernels, or matrixmultiply.
#[derive(Clone, Copy)]
enum By {
    Kiln(kiln::gemm::Isa),
    MatrixMultiply,
}

impl By {
    fn name(self) -> String {
        match self {
            By::Kiln(isa) => format!("kiln-{}", isa.name()),
            By::MatrixMultiply => "matrixmultiply".into(),
        }
    }
}

fn mm(a: ArrayView2<f32>, b: ArrayView2<f32>, mut c: ArrayViewMut2<f32>, by: By) {
    match by {
        By::Kiln(isa) => {
            let (rows, cols) = c.dim();
            let (rs, cs) = (c.strides()[0], c.strides()[1]);
            let cm = kiln::gemm::Mat {
                ptr: c.as_mut_ptr(),
                rows,
                cols,
                rs,
                cs,
            };
            let (am, bm) = (kiln::gemm::mat_of(&a), kiln::gemm::mat_of(&b));
            let threads = rayon::current_num_threads();
            // SAFETY: the views chain (the bench's shapes), address their elements and C is
            // a distinct, writable array; `isa` is one this host runs (`isas`).
            unsafe { kiln::gemm::gemm_on(isa, am, bm, cm, threads, f32::BLOCKING) };
        }
        By::MatrixMultiply => {
            ndarray::linalg::general_mat_mul(1.0, &a, &b, 0.0, &mut c);
        }
    }
}

fn bench(c: &mut Criterion) {
    if !kiln::gemm::available() {
        eprintln!("gemm bench: this host lacks AVX2 or FMA; kiln uses matrixmultiply here");
        return;
    }
    let mut g = c.benchmark_group("gemm");
    g.sample_size(20);
    let (a, b) = (values(1024, 1024, false), values(1024, 1024, false));
    let mut out = Array2::zeros((1024, 1024));
    let mut who: Vec<By> = kiln::gemm::isas().into_iter().map(By::Kiln).collect();
    who.push(By::MatrixMultiply);
    for &by in &who {
        g.bench_function(format!("w4/{}", by.name()), |t| {
            t.iter(|| mm(a.view(), b.view(), out.view_mut(), by))
        });
    }
    let ops: Vec<_> = W5
        .iter()
        .map(|&(m, n, k, ta, tb)| (values(m, k, ta), values(k, n, tb), Array2::zeros((m, n))))
        .collect();
    for &by in &who {
        let mut ops = ops.clone();
        g.bench_function(format!("w5_products/{}", by.name()), |t| {
            t.iter(|| {
                for (a, b, c) in &mut ops {
                    mm(a.view(), b.view(), c.view_mut(), by);
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
