//! kiln's blocked GEMM (`kiln::gemm`) against an oracle that sums in the order it documents:
//! k in near-equal chunks of at most `kc`, each chunk by FMAs in order from zero, the chunks
//! added to C in order. The results must match bit for bit, for every shape around the tile and block edges, any
//! operand strides (transposed, negative, gapped), on one thread or several, and with the
//! kernels of every ISA this host runs (AVX2; AVX-512 where present), which must agree.

#![cfg(target_arch = "x86_64")]

use kiln::gemm::{
    gemm_on, gemm_update_on, isas, mat_of, product, update, Blocking, Element, Isa, Mat,
};
use ndarray::{s, Array2, ArrayView2, ArrayViewMut2, Axis, ShapeBuilder};

/// What the float types need for the oracle.
trait Num: Element + std::fmt::Debug + PartialEq {
    fn fma(a: Self, b: Self, c: Self) -> Self;
    fn from_i(i: u64) -> Self;
    fn nan() -> Self;
    fn bits(self) -> u64;
}
impl Num for f32 {
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    fn from_i(i: u64) -> f32 {
        (i % 2001) as f32 / 1000.0 - 1.0
    }
    fn nan() -> f32 {
        f32::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
}
impl Num for f64 {
    fn fma(a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }
    fn from_i(i: u64) -> f64 {
        (i % 20001) as f64 / 7000.0 - 1.3
    }
    fn nan() -> f64 {
        f64::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

fn values<T: Num>(rows: usize, cols: usize, seed: u64) -> Array2<T> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array2::from_shape_fn((rows, cols), |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        T::from_i(x >> 11)
    })
}

/// The documented order of summation.
fn oracle<T: Num>(a: ArrayView2<T>, b: ArrayView2<T>, kc: usize) -> Array2<T> {
    let ((m, k), n) = (a.dim(), b.ncols());
    // Near-equal chunks of at most `kc`.
    let kc = k.div_ceil(k.div_ceil(kc).max(1)).max(1);
    Array2::from_shape_fn((m, n), |(i, j)| {
        let mut c = T::ZERO;
        for (chunk, p0) in (0..k).step_by(kc).enumerate() {
            let mut acc = T::ZERO;
            for p in p0..k.min(p0 + kc) {
                acc = T::fma(a[[i, p]], b[[p, j]], acc);
            }
            c = if chunk == 0 { acc } else { c + acc };
        }
        c
    })
}

/// Runs the GEMM into a NaN-filled C (it must be written, never read) with C's layout chosen
/// by `c_layout`: 0 row-major, 1 column-major, 2 every other column of a wider array.
fn run<T: Num>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    c_layout: u8,
    threads: usize,
    blocking: Blocking,
) -> Array2<T> {
    on_every_isa(|isa| {
        let mut store = nan_store::<T>(a.nrows(), b.ncols(), c_layout);
        let mut c = view_of(&mut store, c_layout);
        // SAFETY: the views address their elements, C is a distinct, writable array, and
        // `isa` runs here.
        unsafe {
            gemm_on(
                isa,
                mat_of(&a),
                mat_of(&b),
                mat_mut(&mut c),
                threads,
                blocking,
            )
        };
        c.to_owned()
    })
}

/// `f`'s result with each ISA's kernels this host runs, which must all be the same bits (NaN
/// included: `assert_eq!` calls two NaNs different, so the bits are compared).
fn on_every_isa<T: Num>(f: impl Fn(Isa) -> Array2<T>) -> Array2<T> {
    let mut first: Option<(Isa, Array2<T>)> = None;
    for isa in isas() {
        let got = f(isa);
        match &first {
            None => first = Some((isa, got)),
            Some((isa0, want)) => assert!(
                want.dim() == got.dim() && want.iter().zip(&got).all(|(p, q)| p.bits() == q.bits()),
                "{} and {} kernels differ",
                isa0.name(),
                isa.name()
            ),
        }
    }
    first.expect("the host runs some ISA's kernels").1
}

/// NaN-filled room for an `m x n` output of the given layout: 0 row-major, 1 column-major,
/// 2 every other column of a wider array (see `view_of`).
fn nan_store<T: Num>(m: usize, n: usize, layout: u8) -> Array2<T> {
    match layout {
        0 => Array2::from_elem((m, n), T::nan()),
        1 => Array2::from_elem((m, n).f(), T::nan()),
        _ => Array2::from_elem((m, 2 * n), T::nan()),
    }
}

/// The output view of a `nan_store` of `layout`.
fn view_of<T>(store: &mut Array2<T>, layout: u8) -> ArrayViewMut2<'_, T> {
    if layout == 2 {
        store.slice_mut(s![.., ..;2])
    } else {
        store.view_mut()
    }
}

fn mat_mut<T>(v: &mut ArrayViewMut2<T>) -> Mat<*mut T> {
    let (rs, cs) = (v.strides()[0], v.strides()[1]);
    let (rows, cols) = v.dim();
    Mat {
        ptr: v.as_mut_ptr(),
        rows,
        cols,
        rs,
        cs,
    }
}

/// Operand layouts: row-major, transposed (column-major), reversed rows (a negative row
/// stride), every other column of a wider array.
fn operand<T: Num>(rows: usize, cols: usize, layout: u64, seed: u64) -> Array2<T> {
    match layout % 4 {
        0 => values(rows, cols, seed),
        1 => values::<T>(cols, rows, seed).reversed_axes(),
        2 => {
            let mut x = values::<T>(rows, cols, seed);
            x.invert_axis(Axis(0));
            x
        }
        _ => values::<T>(rows, 2 * cols, seed).slice_move(s![.., ..;2]),
    }
}

/// Every `(m, n, k)` on 1, 2 and 3 threads, against the oracle, with the layouts of A, B and C
/// varying from one shape to the next.
/// Whether the host runs kiln's kernels; where not (no AVX2 or FMA) the tests say so and
/// pass, as kiln then uses matrixmultiply's GEMM.
fn host_runs_kernels() -> bool {
    let ok = kiln::gemm::available();
    if !ok {
        eprintln!("skipped: this host lacks AVX2 or FMA, so kiln's GEMM kernels do not run here");
    }
    ok
}

fn check<T: Num>(blocking: Blocking, shapes: impl IntoIterator<Item = (usize, usize, usize)>) {
    if !host_runs_kernels() {
        return;
    }
    for (seed, (m, n, k)) in shapes.into_iter().enumerate() {
        let seed = seed as u64;
        let a = operand::<T>(m, k, seed, seed);
        let b = operand::<T>(k, n, seed / 4 + 1, seed + 1000);
        let want = oracle(a.view(), b.view(), blocking.kc);
        for threads in [1, 2, 3] {
            let c_layout = ((seed / 3 + threads as u64) % 3) as u8;
            let got = run(a.view(), b.view(), c_layout, threads, blocking);
            let layouts = (seed % 4, (seed / 4 + 1) % 4, c_layout);
            assert_eq!(
                got, want,
                "{m}x{n}x{k}, {threads} threads, layouts {layouts:?}"
            );
        }
    }
}

fn cube(sizes: &[usize]) -> Vec<(usize, usize, usize)> {
    let mut v = vec![];
    for &m in sizes {
        for &n in sizes {
            for &k in sizes {
                v.push((m, n, k));
            }
        }
    }
    v
}

/// Small blocks, so a small product crosses every block edge: several A blocks, k chunks and
/// B panels, partial tiles at each.
const SMALL: Blocking = Blocking {
    mc: 12,
    kc: 5,
    nc: 32,
};

#[test]
fn small_blocks_every_edge_f32() {
    check::<f32>(SMALL, cube(&[0, 1, 5, 6, 7, 13, 16, 17, 33]));
}

#[test]
fn small_blocks_every_edge_f64() {
    check::<f64>(SMALL, cube(&[0, 1, 5, 6, 7, 8, 9, 13, 33]));
}

/// Blocking that is not whole tiles and slivers, or is zero, is rounded to what works: the
/// results are the oracle's with the rounded `kc`, on one thread and several (70x70x60 is
/// large enough to be split).
#[test]
fn odd_and_zero_blocking_is_rounded() {
    let odd = Blocking {
        mc: 7,
        kc: 3,
        nc: 17,
    };
    let zero = Blocking {
        mc: 0,
        kc: 0,
        nc: 0,
    };
    for blocking in [odd, zero] {
        let kc = blocking.kc.max(1);
        let mut shapes = cube(&[1, 7, 19]);
        shapes.push((70, 70, 60));
        check::<f32>(Blocking { kc, ..blocking }, shapes);
    }
}

/// The blocking the library uses (mc 144, kc 256, nc 4080 for f32; 72, 256, 4080 for f64),
/// each shape crossing one of its edges.
#[test]
fn default_blocks_f32() {
    let shapes = [
        (150, 20, 270),
        (1, 33, 257),
        (145, 17, 3),
        (7, 4100, 2),
        (200, 40, 1),
        // Fewer columns than a sliver, deep k: computed as `C^T = B^T A^T`.
        (256, 10, 512),
        (100, 3, 64),
        (7, 5, 300),
    ];
    check::<f32>(f32::BLOCKING, shapes);
    check::<f32>(SMALL, [(40, 7, 70), (13, 1, 65)]);
}

#[test]
fn default_blocks_f64() {
    check::<f64>(
        f64::BLOCKING,
        [(75, 9, 260), (2, 4090, 3), (73, 100, 12), (75, 5, 100)],
    );
}

/// Large enough to be split among threads, both ways: by rows (tall C) and by columns (a
/// short C with many column slivers), with one k chunk and several. Each element is summed by
/// one thread in one order, so the bits do not depend on the split.
#[test]
fn threads_split_rows_and_columns_with_the_same_bits() {
    if !host_runs_kernels() {
        return;
    }
    // Small blocks with four slivers a panel: the short products are split by columns, in one
    // panel (each thread packing its own slivers of B, chunk after chunk) or in two (the
    // threads packing each panel together), with many k chunks.
    let small = Blocking {
        mc: 12,
        kc: 5,
        nc: 64,
    };
    let cases = [
        (300, 64, 40, f32::BLOCKING),
        (7, 700, 60, f32::BLOCKING),
        (1, 2000, 140, f32::BLOCKING),
        (7, 700, 600, f32::BLOCKING),
        (20, 64, 210, small),
        (20, 100, 140, small),
        (30, 64, 140, small),
        // Split by columns, each thread packing its own slivers chunk after chunk: a last k
        // chunk shallower than the others (183 = 36 x 5 + 3), and a last tile of 5 rows.
        (23, 64, 183, small),
    ];
    for (m, n, k, blocking) in cases {
        assert!(
            m * n * k >= kiln::gemm::PARALLEL_MIN,
            "{m}x{n}x{k} is too small to be split"
        );
        let a = values::<f32>(m, k, 3);
        let b = values::<f32>(k, n, 4);
        let want = oracle(a.view(), b.view(), blocking.kc);
        for threads in [1, 2, 3, 4] {
            let got = run(a.view(), b.view(), 0, threads, blocking);
            assert_eq!(got, want, "{m}x{n}x{k} on {threads} threads, {blocking:?}");
        }
    }
}

#[test]
fn product_checks_shapes_and_writes_c() {
    if !host_runs_kernels() {
        return;
    }
    let a = values::<f64>(20, 30, 5);
    let b = values::<f64>(30, 10, 6);
    let mut c = Array2::from_elem((20, 10), f64::NAN);
    assert_eq!(product(a.view(), b.view(), c.view_mut()), Some(()));
    assert_eq!(c, oracle(a.view(), b.view(), f64::BLOCKING.kc));
    let mut wrong = Array2::from_elem((20, 11), f64::NAN);
    assert_eq!(product(a.view(), b.view(), wrong.view_mut()), None);
    assert!(
        wrong.iter().all(|x| x.is_nan()),
        "C is untouched on a shape error"
    );
    // k = 0: the empty sum.
    let (a0, b0) = (Array2::<f64>::zeros((3, 0)), Array2::<f64>::zeros((0, 4)));
    let mut c0 = Array2::from_elem((3, 4), f64::NAN);
    product(a0.view(), b0.view(), c0.view_mut()).unwrap();
    assert!(c0.iter().all(|&x| x == 0.0));
}

/// `W -= (A B) scale` into W of the given layout (0 row-major, 1 column-major, 2 every other
/// column of a wider array) holding `values(m, n, 77)`: W before and after.
fn run_update<T: Num>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    w_layout: u8,
    threads: usize,
    blocking: Blocking,
    scale: T,
) -> (Array2<T>, Array2<T>) {
    let (m, n) = (a.nrows(), b.ncols());
    let w0 = values::<T>(m, n, 77);
    let w = on_every_isa(|isa| {
        let mut store = nan_store::<T>(m, n, w_layout);
        let mut w = view_of(&mut store, w_layout);
        w.assign(&w0);
        // SAFETY: the views address their elements, W is a distinct, writable array, and
        // `isa` runs here.
        unsafe {
            gemm_update_on(
                isa,
                mat_of(&a),
                mat_of(&b),
                mat_mut(&mut w),
                scale,
                threads,
                blocking,
            )
        };
        w.to_owned()
    });
    (w0, w)
}

fn check_update<T: Num>(
    blocking: Blocking,
    scale: T,
    shapes: impl IntoIterator<Item = (usize, usize, usize)>,
) {
    if !host_runs_kernels() {
        return;
    }
    for (seed, (m, n, k)) in shapes.into_iter().enumerate() {
        let seed = seed as u64;
        let a = operand::<T>(m, k, seed, seed);
        let b = operand::<T>(k, n, seed / 4 + 1, seed + 1000);
        let product = oracle(a.view(), b.view(), blocking.kc);
        for threads in [1, 2, 3] {
            let w_layout = ((seed + threads as u64) % 3) as u8;
            let (w0, got) = run_update(a.view(), b.view(), w_layout, threads, blocking, scale);
            // The two steps the update stands for: the product, then `w - p * scale`.
            let want = Array2::from_shape_fn((m, n), |(i, j)| w0[[i, j]] - product[[i, j]] * scale);
            assert_eq!(
                got, want,
                "{m}x{n}x{k}, {threads} threads, W layout {w_layout}, {blocking:?}"
            );
        }
    }
}

/// Updates (`W -= (A B) scale`) have the bits of the product followed by the elementwise
/// step: with one k chunk (straight into W) and several (the earlier ones in the scratch
/// buffer), at every tile edge, split among threads by rows and by columns, W in any layout;
/// `k = 0` subtracts zeros.
#[test]
fn updates_have_the_bits_of_the_product_then_the_step() {
    check_update::<f32>(SMALL, 0.01, cube(&[0, 1, 6, 7, 17, 33]));
    check_update::<f64>(SMALL, -0.3, cube(&[1, 5, 9, 33]));
    let small = Blocking {
        mc: 12,
        kc: 5,
        nc: 64,
    };
    check_update::<f32>(small, 0.01, [(20, 64, 210), (20, 100, 140), (30, 64, 140)]);
    check_update::<f32>(SMALL, 0.01, [(40, 7, 70)]);
    let big = [
        (300, 64, 40),
        (7, 700, 600),
        (145, 17, 300),
        (256, 512, 256),
        // Transposed (few columns, deep k), W too.
        (512, 10, 256),
        (300, 7, 80),
    ];
    check_update::<f32>(f32::BLOCKING, 0.01, big);
    // The safe form, and its shape check.
    let (a, b) = (values::<f64>(20, 30, 5), values::<f64>(30, 10, 6));
    let mut w = values::<f64>(20, 10, 7);
    let want = &w - &(oracle(a.view(), b.view(), f64::BLOCKING.kc) * 0.5);
    assert_eq!(update(a.view(), b.view(), w.view_mut(), 0.5), Some(()));
    assert_eq!(w, want);
    let mut wrong = Array2::from_elem((20, 11), f64::NAN);
    assert_eq!(update(a.view(), b.view(), wrong.view_mut(), 0.5), None);
    assert!(
        wrong.iter().all(|x| x.is_nan()),
        "W is untouched on a shape error"
    );
}
