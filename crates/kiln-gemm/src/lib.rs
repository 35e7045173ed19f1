//! kiln's float GEMM: `C = A B` for f32 and f64 on hosts with AVX2 and FMA, with AVX-512
//! kernels where the host has them (`isa.rs`: chosen at run time, the same bits).
//!
//! A crate of its own so that one GEMM serves both the JIT (kiln's `gemm` module wraps it for
//! ndarray views) and ahead-of-time objects, which call it from kiln's runtime library
//! (`crates/kiln-rt`, a static library built from this crate without threads). Objects then
//! give the JIT's bits at the JIT's speed (docs/decisions.md, "One GEMM for the JIT and
//! objects").
//!
//! Written here, not taken from a crate, because the crates measured slower than OpenBLAS on
//! W4 (matrixmultiply 1.16x numpy's time; `gemm` 0.18 no faster, see docs/decisions.md), and
//! what closes the gap is small: a 6x16 register tile (`kernel.rs`) in place of 8x8, and both
//! threads packing B. The structure is BLIS's (Goto's): for each `NC`-wide panel of B and each
//! `KC`-deep slice of k, B's slice is packed once into `NR`-wide slivers (shared by the
//! threads, held in L3), then `MC x KC` blocks of A are packed (held in L2) and the
//! micro-kernel runs over every sliver pair (B's sliver held in L1). The threads split C's
//! rows, or its columns where it has few rows (`job.rs`).
//!
//! Each element of C is summed by one thread in one order (k in chunks of
//! `ceil(k / ceil(k / KC))` terms, [`k_step`], each chunk by FMAs in order from zero, the
//! chunks added to C in order), so results do not depend on the number of threads, and the
//! interpreter and the compiled backends, which both call this, agree bit for bit.

#![warn(missing_docs)]

mod isa;
mod job;
mod kernel;
mod pack;
mod transpose;

pub use isa::{isa, requested_isa, Isa, ISA_VAR};

use job::Job;
use kernel::Kernel;
pub use kernel::MR;
use pack::Buffer;

/// Cache blocking: `mc` rows of A and `kc` of k per packed block, `nc` columns of B per
/// packed panel. `gemm` rounds `mc` up to whole tiles (6 rows) and `nc` to whole slivers (the
/// element's `NR` columns), and takes at least 1 of each.
#[derive(Clone, Copy, Debug)]
pub struct Blocking {
    /// Rows of A per packed block (held in L2).
    pub mc: usize,
    /// Depth along k of a packed block and of a chunk of each element's sum: it fixes the
    /// order of the sums, so it decides the bits (see [`k_step`]).
    pub kc: usize,
    /// Columns of B per packed panel (held in L3).
    pub nc: usize,
}

/// How many terms each k chunk of a product of `k` terms sums (the last may have fewer):
/// near-equal chunks of at most `kc`. Every element of C is the chunks' sums, each by FMAs in
/// order from zero, added to C in chunk order; AOT's product follows the same order
/// (`aot::kernels`), so objects give the JIT's bits.
pub fn k_step(k: usize, kc: usize) -> usize {
    // 784 is 4 x 196, not 3 x 256 + 16 (a chunk a few deep spends most of its time loading and
    // storing C).
    let chunks = k.div_ceil(kc.max(1));
    k.div_ceil(chunks.max(1))
}

mod sealed {
    /// Only kiln's element types (f32, f64) have kernels.
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// An element type the kernels handle: f32 or f64.
pub trait Element:
    sealed::Sealed
    + Copy
    + Send
    + Sync
    + 'static
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
{
    /// Blocking for a 512 KiB L2 and 32 KiB L1 per core (Zen 3, the benchmark machine; BLIS's
    /// Zen values). Its `kc` fixes the order of each element's sum, so it is the same for
    /// every ISA; `mc` and `nc` are rounded to each ISA's tiles.
    const BLOCKING: Blocking;
    /// The type's zero: the padding of packed slivers and the empty product's elements.
    const ZERO: Self;

    /// Columns of a micro-tile on `isa`: two of its vectors.
    fn nr(isa: Isa) -> usize {
        2 * isa.vector_bytes() / std::mem::size_of::<Self>()
    }

    #[doc(hidden)]
    fn kernel(isa: Isa) -> Kernel<Self>;

    /// Packs `p < kc / 8 * 8` of a whole sliver of A stored by rows (`transpose.rs`) and
    /// returns how many it packed; `0` where the type has no such path.
    #[doc(hidden)]
    unsafe fn pack_a_rows(_a: *const Self, _rs: isize, _kc: usize, _dst: *mut Self) -> usize {
        0
    }

    /// The same for a whole sliver of `nr` columns of B stored by columns.
    #[doc(hidden)]
    unsafe fn pack_b_columns(
        _b: *const Self,
        _cs: isize,
        _kc: usize,
        _nr: usize,
        _dst: *mut Self,
    ) -> usize {
        0
    }
}

impl Element for f32 {
    const BLOCKING: Blocking = Blocking {
        mc: 144,
        kc: 256,
        nc: 4080,
    };
    const ZERO: f32 = 0.0;
    fn kernel(isa: Isa) -> Kernel<f32> {
        match isa {
            Isa::Avx2 => kernel::f32_6x16,
            Isa::Avx512 => kernel::f32_6x32,
        }
    }

    unsafe fn pack_a_rows(a: *const f32, rs: isize, kc: usize, dst: *mut f32) -> usize {
        // SAFETY: the kernels run only where AVX2 is (`available`); the caller vouches for
        // the rest.
        unsafe { transpose::pack_a_rows(a, rs, kc, dst) }
    }

    unsafe fn pack_b_columns(
        b: *const f32,
        cs: isize,
        kc: usize,
        nr: usize,
        dst: *mut f32,
    ) -> usize {
        // SAFETY: as above.
        unsafe { transpose::pack_b_columns(b, cs, kc, nr, dst) }
    }
}

impl Element for f64 {
    const BLOCKING: Blocking = Blocking {
        mc: 72,
        kc: 256,
        nc: 4080,
    };
    const ZERO: f64 = 0.0;
    fn kernel(isa: Isa) -> Kernel<f64> {
        match isa {
            Isa::Avx2 => kernel::f64_6x8,
            Isa::Avx512 => kernel::f64_6x16,
        }
    }
}

/// Whether the host runs these kernels (AVX2 and FMA at least); where not, kiln's `perform`
/// uses matrixmultiply's and objects their own loop.
pub fn available() -> bool {
    Isa::Avx2.available()
}

/// A strided matrix: `rows x cols`, element `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<P> {
    /// The address of element `(0, 0)`.
    pub ptr: P,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Row stride, in elements: from `(i, j)` to `(i + 1, j)`.
    pub rs: isize,
    /// Column stride, in elements: from `(i, j)` to `(i, j + 1)`.
    pub cs: isize,
}

impl<P> Mat<P> {
    /// The transpose: the same elements, rows and columns swapped.
    fn t(self) -> Self {
        Mat {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

impl<T> Mat<*const T> {
    /// The submatrix from `(i, j)` on (its shape left as it was: only the origin moves).
    unsafe fn at(self, i: usize, j: usize) -> Self {
        let ptr = self.ptr.offset(i as isize * self.rs + j as isize * self.cs);
        Mat { ptr, ..self }
    }
}

// SAFETY: the operands are only read, and `T: Sync`.
unsafe impl<T: Sync> Send for Mat<*const T> {}
unsafe impl<T: Sync> Sync for Mat<*const T> {}

/// Below this many multiply-adds a product runs on the calling thread: the split costs more
/// than it saves. At 2^17 a recurrent cell's `[32, 64] @ [64, 64]` (8.6 us on one thread)
/// was split in two, and the RNN LM step (`examples/rnn_lm.rs`, 24 such products a pass)
/// took 3.3-3.4 ms against 2.9-3.0 at 2^18; W4, W5 and the GPT step did not move.
pub const PARALLEL_MIN: usize = 1 << 18;

/// The fewest tiles of C a product gives each of its threads.
const MIN_TILES_PER_THREAD: usize = 2;

/// `C = A B` on up to `threads` of rayon's threads (one without the `threads` feature), with
/// the kernels of [`isa`]. C is only written (it may hold anything before); with `k = 0` it is
/// zeroed.
///
/// # Safety
/// [`available`] must be true, and the shapes must chain (`A: m x k`, `B: k x n`, `C: m x n`;
/// checked in debug builds). The matrices must address their elements; C's must be writable,
/// distinct from each other, and overlap neither A nor B.
pub unsafe fn gemm<T: Element>(
    a: Mat<*const T>,
    b: Mat<*const T>,
    c: Mat<*mut T>,
    threads: usize,
    blocking: Blocking,
) {
    start(a, b, c, None, threads, blocking, isa())
}

/// [`gemm`] with the kernels of `isa` (the same bits on every ISA; tests compare them).
///
/// # Safety
/// As [`gemm`], and `isa` must be available ([`Isa::available`]).
pub unsafe fn gemm_on<T: Element>(
    isa: Isa,
    a: Mat<*const T>,
    b: Mat<*const T>,
    c: Mat<*mut T>,
    threads: usize,
    blocking: Blocking,
) {
    start(a, b, c, None, threads, blocking, isa)
}

/// `W = W - (A B) scale`, element by element a multiply and a subtract of the product's
/// elements, which are summed as [`gemm`] sums them: the bits of a product followed by that
/// elementwise step, without writing the product out (Theano's `gemm_inplace` for a gradient
/// step). The last chunk along k goes straight into W; earlier ones, where k needs several,
/// add up in a scratch buffer the thread keeps.
///
/// # Safety
/// As [`gemm`], with W in place of C: W is read and written, and overlaps neither A nor B.
pub unsafe fn gemm_update<T: Element>(
    a: Mat<*const T>,
    b: Mat<*const T>,
    w: Mat<*mut T>,
    scale: T,
    threads: usize,
    blocking: Blocking,
) {
    start(a, b, w, Some(scale), threads, blocking, isa())
}

/// [`gemm_update`] with the kernels of `isa`.
///
/// # Safety
/// As [`gemm_update`], and `isa` must be available.
pub unsafe fn gemm_update_on<T: Element>(
    isa: Isa,
    a: Mat<*const T>,
    b: Mat<*const T>,
    w: Mat<*mut T>,
    scale: T,
    threads: usize,
    blocking: Blocking,
) {
    start(a, b, w, Some(scale), threads, blocking, isa)
}

/// `gemm` (`scale` none) or `gemm_update` into `out`: the empty cases here, the rest by `run`.
unsafe fn start<T: Element>(
    a: Mat<*const T>,
    b: Mat<*const T>,
    out: Mat<*mut T>,
    scale: Option<T>,
    threads: usize,
    blocking: Blocking,
    isa: Isa,
) {
    let (m, n, k) = (out.rows, out.cols, a.cols);
    debug_assert!(a.rows == m && b.rows == k && b.cols == n);
    if m == 0 || n == 0 {
        return;
    }
    match scale {
        // The empty sum: zeros, or W less zeros.
        _ if k == 0 => each(out, |p| *p = scale.map_or(T::ZERO, |s| *p - T::ZERO * s)),
        None => run(a, b, out, None, threads, blocking, isa),
        // One chunk: C is never read or written.
        Some(s) if k <= blocking.kc.max(1) => {
            run(a, b, out, Some((out, s)), threads, blocking, isa)
        }
        Some(s) => with_buffer(&C_SCRATCH, |scratch| {
            let c = Mat {
                ptr: scratch.get::<T>(m * n),
                rows: m,
                cols: n,
                rs: n as isize,
                cs: 1,
            };
            run(a, b, c, Some((out, s)), threads, blocking, isa);
        }),
    }
}

/// `f` on the address of every element of `c` (the empty product's results).
unsafe fn each<T>(c: Mat<*mut T>, f: impl Fn(*mut T)) {
    for i in 0..c.rows {
        for j in 0..c.cols {
            f(c.ptr.offset(i as isize * c.rs + j as isize * c.cs));
        }
    }
}

/// `gemm` (or `gemm_update`) past its trivial cases.
unsafe fn run<T: Element>(
    a: Mat<*const T>,
    b: Mat<*const T>,
    c: Mat<*mut T>,
    update: Option<(Mat<*mut T>, T)>,
    threads: usize,
    blocking: Blocking,
    isa: Isa,
) {
    let (m, n, k) = (c.rows, c.cols, a.cols);
    let nr = T::nr(isa);
    // Fewer columns than a sliver (a 10-class layer): `C^T = B^T A^T` fills more of each
    // tile (10 of 12 rows instead of 10 of 16 columns). Its terms are the same, summed in the
    // same order (an FMA's two factors commute), so the bits are too; C is then written
    // element by element, which a deep enough k pays for.
    let filled = |rows: usize, cols: usize| {
        (rows as f64 / rows.next_multiple_of(MR) as f64)
            * (cols as f64 / cols.next_multiple_of(nr) as f64)
    };
    if n < nr && k >= 64 && filled(n, m) > filled(m, n) {
        let update = update.map(|(w, scale)| (w.t(), scale));
        return run(b.t(), a.t(), c.t(), update, threads, blocking, isa);
    }
    // Blocks of whole tiles and slivers (a block edge inside a tile would have two threads
    // write one tile), none empty.
    let mc = blocking.mc.div_ceil(MR).max(1) * MR;
    let nc = blocking.nc.div_ceil(nr).max(1) * nr;
    let kc = blocking.kc.max(1);
    let blocking = Blocking { mc, kc, nc };
    // At least two tiles of C per thread: a product whose C is a tile or two (a
    // convolution's filter gradient, 9x8 with k = 9216) cannot be shared, and a second thread
    // only doubled its phase barriers (one per k chunk) for nothing.
    let tiles = m.div_ceil(MR).saturating_mul(n.div_ceil(nr));
    let threads =
        if !cfg!(feature = "threads") || m.saturating_mul(n).saturating_mul(k) < PARALLEL_MIN {
            1
        } else {
            threads.min(tiles / MIN_TILES_PER_THREAD).max(1)
        };
    with_buffer(&B_PANEL, |panel| {
        let panel = panel.get::<T>(nc.min(n).div_ceil(nr) * nr * kc.min(k));
        let job = Job::new(a, b, c, update, blocking, panel, threads, isa);
        if threads == 1 {
            job.work();
        } else {
            on_threads(&job, threads);
        }
    });
}

/// Runs `job` on `threads` of rayon's threads, this one among them.
#[cfg(feature = "threads")]
fn on_threads<T: Element>(job: &Job<T>, threads: usize) {
    rayon::scope(|s| {
        for _ in 1..threads {
            s.spawn(move |_| job.work());
        }
        job.work();
    });
}

/// Without the `threads` feature (kiln's runtime library for objects) every product runs on
/// the calling thread: the job's pieces, one after another, are the same sums.
#[cfg(not(feature = "threads"))]
fn on_threads<T: Element>(job: &Job<T>, _threads: usize) {
    job.work();
}

/// Scratch buffers kept between products, taken by whichever thread needs one: packed B
/// (one per product), packed A (one per thread that runs a part), and the sums of an update's
/// earlier k chunks (`gemm_update`). A pool rather than one buffer per thread: which of
/// rayon's threads runs a product varies from call to call, and a buffer per thread made a
/// thread's first product allocate in what should be a steady state of calls (the flaky
/// `tests/steady_state.rs`).
struct Pool(std::sync::Mutex<Vec<Buffer>>);

static B_PANEL: Pool = Pool::new();
static A_BLOCK: Pool = Pool::new();
static C_SCRATCH: Pool = Pool::new();

impl Pool {
    const fn new() -> Pool {
        Pool(std::sync::Mutex::new(Vec::new()))
    }
}

/// Buffers a pool keeps at most: more than the threads that take one at a time.
const POOL_KEEP: usize = 64;

/// Runs `f` on a buffer from `pool` (a new one when none is free) and gives it back.
fn with_buffer<R>(pool: &'static Pool, f: impl FnOnce(&mut Buffer) -> R) -> R {
    let lock = || pool.0.lock().unwrap_or_else(|e| e.into_inner());
    let mut buf = lock().pop().unwrap_or_default();
    let r = f(&mut buf);
    let mut kept = lock();
    if kept.len() < POOL_KEEP {
        kept.push(buf);
    }
    r
}
