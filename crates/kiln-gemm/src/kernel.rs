//! The micro-kernels: one `MR x NR` tile of C from an `MR`-tall sliver of packed A and an
//! `NR`-wide sliver of packed B, the whole tile held in vector registers.
//!
//! The shapes are BLIS's for Haswell and Zen: 6 rows by two vectors (with AVX2 16 f32 or 8
//! f64), so the 12 accumulators, the two B vectors and one broadcast A element fill the 16
//! ymm registers, and each step of k does 12 FMAs for 8 loads. That keeps the two FMA pipes
//! busy where an 8x8 kernel (matrixmultiply's) does 8 FMAs for 9 loads and waits on the load
//! ports. The AVX-512 kernels are the same tile with vectors twice as wide (32 f32 or 16 f64
//! columns): 12 accumulators still cover the FMA latency of two pipes, and where the pipes
//! are 512 bits wide (Zen 5, Intel's server cores) each FMA does twice the work; Zen 4 splits
//! a 512-bit FMA in two, and there they run at the AVX2 kernels' rate (116 GFLOP/s each on
//! one core, tile in L1). Every kernel sums each element of C the same way (one FMA per term,
//! in order from zero, then added to what C held), so the ISAs give the same bits.

use std::arch::x86_64::*;

/// Rows of a micro-tile (every ISA's).
pub const MR: usize = 6;

/// Where a tile goes: `rows x cols` elements of C, element `(i, j)` at `c + i * rsc + j * csc`.
#[derive(Clone, Copy)]
pub struct Tile<T> {
    pub c: *mut T,
    pub rsc: isize,
    pub csc: isize,
    pub rows: usize,
    pub cols: usize,
    /// Where the tile's sums go instead of C, in the last k chunk of an update.
    pub update: Option<Update<T>>,
}

/// The last k chunk of `W -= (A B) scale`: the tile's final sum `s` (what C would have held)
/// is not stored; `w - s * scale` is, into W, element `(i, j)` at `w + i * rsw + j * csw`
/// (a multiply, then a subtract: the bits of the separate steps it replaces).
#[derive(Clone, Copy)]
pub struct Update<T> {
    pub w: *mut T,
    pub rsw: isize,
    pub csw: isize,
    pub scale: T,
}

/// One tile: `c[i, j] (+)= sum_p a[p, i] * b[p, j]` for `i < rows`, `j < cols`. The sum runs
/// over p in order, one FMA per term starting from zero; with `accumulate` it is then added to
/// what C held, else C is overwritten (and never read: it may hold anything). With an
/// `update`, that sum goes into W as [`Update`] says and C is not written.
///
/// # Safety
/// The kernel's ISA must be available. `a` holds `k * MR` elements and `b` `k * NR`, both
/// 64-byte aligned; the tile's elements are writable; `rows <= MR`, `cols <= NR`.
pub type Kernel<T> = unsafe fn(k: usize, a: *const T, b: *const T, tile: Tile<T>, accumulate: bool);

/// Defines one kernel for the target features `$features`: `$t` elements, `$w` lanes per
/// vector, two vectors per row.
macro_rules! kernel {
    ($name:ident, $features:literal, $t:ty, $v:ty, $w:expr, $zero:ident, $load:ident,
     $loadu:ident, $storeu:ident, $fma:ident, $add:ident, $mul:ident, $sub:ident,
     $set1:ident) => {
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $name(
            k: usize,
            a: *const $t,
            b: *const $t,
            tile: Tile<$t>,
            accumulate: bool,
        ) {
            let Tile {
                c,
                rsc,
                csc,
                rows,
                cols,
                update,
            } = tile;
            const NR: usize = 2 * $w;
            // An update reads W's tile, which is not in cache (a weight matrix last read in
            // the forward pass): fetch it while the k loop runs, rather than stall on it after.
            if let Some(u) = update {
                for i in 0..rows {
                    let row = u.w.offset(i as isize * u.rsw);
                    _mm_prefetch::<_MM_HINT_T0>(row.cast());
                    _mm_prefetch::<_MM_HINT_T0>(row.offset((cols as isize - 1) * u.csw).cast());
                }
            }
            let mut acc: [[$v; 2]; MR] = [[$zero(); 2]; MR];
            let (mut a, mut b) = (a, b);
            for _ in 0..k {
                let b0 = $load(b);
                let b1 = $load(b.add($w));
                // Unrolled by the compiler (constant trip count); `acc` stays in registers.
                for (i, row) in acc.iter_mut().enumerate() {
                    let ai = $set1(*a.add(i));
                    row[0] = $fma(ai, b0, row[0]);
                    row[1] = $fma(ai, b1, row[1]);
                }
                a = a.add(MR);
                b = b.add(NR);
            }
            let whole = rows == MR && cols == NR && csc == 1;
            match update {
                None if whole => {
                    for (i, row) in acc.iter().enumerate() {
                        let p = c.offset(i as isize * rsc);
                        for (h, &v) in row.iter().enumerate() {
                            let q = p.add(h * $w);
                            let v = if accumulate { $add($loadu(q), v) } else { v };
                            $storeu(q, v);
                        }
                    }
                }
                Some(u) if whole && u.csw == 1 => {
                    let scale = $set1(u.scale);
                    for (i, row) in acc.iter().enumerate() {
                        let (p, w) = (c.offset(i as isize * rsc), u.w.offset(i as isize * u.rsw));
                        for (h, &v) in row.iter().enumerate() {
                            let v = if accumulate {
                                $add($loadu(p.add(h * $w)), v)
                            } else {
                                v
                            };
                            let q = w.add(h * $w);
                            $storeu(q, $sub($loadu(q), $mul(v, scale)));
                        }
                    }
                }
                _ => {
                    // An edge tile, or C or W not contiguous along rows: through a buffer,
                    // element by element, touching only the `rows x cols` that exist.
                    let mut buf = [[0.0 as $t; NR]; MR];
                    for (dst, row) in buf.iter_mut().zip(&acc) {
                        $storeu(dst.as_mut_ptr(), row[0]);
                        $storeu(dst.as_mut_ptr().add($w), row[1]);
                    }
                    for (i, src) in buf.iter().enumerate().take(rows) {
                        for (j, &v) in src.iter().enumerate().take(cols) {
                            let q = c.offset(i as isize * rsc + j as isize * csc);
                            let v = if accumulate { *q + v } else { v };
                            match update {
                                None => *q = v,
                                Some(u) => {
                                    let w = u.w.offset(i as isize * u.rsw + j as isize * u.csw);
                                    *w -= v * u.scale;
                                }
                            }
                        }
                    }
                }
            }
        }
    };
}

kernel!(
    f32_6x16,
    "avx2,fma",
    f32,
    __m256,
    8,
    _mm256_setzero_ps,
    _mm256_load_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps,
    _mm256_add_ps,
    _mm256_mul_ps,
    _mm256_sub_ps,
    _mm256_set1_ps
);
kernel!(
    f64_6x8,
    "avx2,fma",
    f64,
    __m256d,
    4,
    _mm256_setzero_pd,
    _mm256_load_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_fmadd_pd,
    _mm256_add_pd,
    _mm256_mul_pd,
    _mm256_sub_pd,
    _mm256_set1_pd
);
kernel!(
    f32_6x32,
    "avx512f",
    f32,
    __m512,
    16,
    _mm512_setzero_ps,
    _mm512_load_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps,
    _mm512_add_ps,
    _mm512_mul_ps,
    _mm512_sub_ps,
    _mm512_set1_ps
);
kernel!(
    f64_6x16,
    "avx512f",
    f64,
    __m512d,
    8,
    _mm512_setzero_pd,
    _mm512_load_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    _mm512_fmadd_pd,
    _mm512_add_pd,
    _mm512_mul_pd,
    _mm512_sub_pd,
    _mm512_set1_pd
);
