//! Packing through 8 x 8 transposes in AVX registers (f32), where the packed order runs across
//! the operand's contiguous rows: A stored by rows (a forward pass's activations) and B stored
//! by columns (a backward pass's `w^T`). Element by element these cost a load and a store
//! each, at a stride; packing was 9% of W5's GEMM time, most of it these two.
//!
//! Both copy exactly the elements the scalar loops in `pack.rs` copy, to the same places.

use super::kernel::MR;
use std::arch::x86_64::*;

/// `out[p] = [r0[p], ..., r7[p]]` for `p < 8`: the 8 x 8 transpose of rows `r`.
#[inline(always)]
unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// One whole sliver of A (`MR` rows `rs` apart, each contiguous along k) for `p` in
/// `0..kc / 8 * 8`: `dst[p * MR + i] = a[i * rs + p]`. Returns how many `p` it packed; the
/// caller packs the rest.
///
/// # Safety
/// AVX2 must be available; `a` addresses `MR` rows of `kc` elements, `dst` has room for
/// `kc * MR`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pack_a_rows(a: *const f32, rs: isize, kc: usize, dst: *mut f32) -> usize {
    let done = kc / 8 * 8;
    let zero = _mm256_setzero_ps();
    for p0 in (0..done).step_by(8) {
        let mut r = [zero; 8];
        for (i, v) in r.iter_mut().enumerate().take(MR) {
            *v = _mm256_loadu_ps(a.offset(i as isize * rs).add(p0));
        }
        let cols = transpose8(r);
        let d = dst.add(p0 * MR);
        // Each column's first 6 lanes: 8 stored, the 2 extra overwritten by the next column;
        // the last column's 6 as 4 + 2, so nothing is written past this block.
        for (p, &c) in cols.iter().enumerate().take(7) {
            _mm256_storeu_ps(d.add(p * MR), c);
        }
        let last = d.add(7 * MR);
        _mm_storeu_ps(last, _mm256_castps256_ps128(cols[7]));
        let hi = _mm256_extractf128_ps::<1>(cols[7]);
        _mm_storel_epi64(last.add(4).cast(), _mm_castps_si128(hi));
    }
    done
}

/// One whole sliver of B (`nr` columns `cs` apart, each contiguous along k, `nr` a multiple
/// of 8) for `p` in `0..kc / 8 * 8`: `dst[p * nr + j] = b[j * cs + p]`. Returns how many `p`
/// it packed.
///
/// # Safety
/// AVX2 must be available; `b` addresses `nr` columns of `kc` elements, `dst` has room for
/// `kc * nr`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pack_b_columns(
    b: *const f32,
    cs: isize,
    kc: usize,
    nr: usize,
    dst: *mut f32,
) -> usize {
    debug_assert!(nr.is_multiple_of(8));
    let done = kc / 8 * 8;
    for p0 in (0..done).step_by(8) {
        for eighth in 0..nr / 8 {
            let mut r = [_mm256_setzero_ps(); 8];
            for (j, v) in r.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(b.offset((eighth * 8 + j) as isize * cs).add(p0));
            }
            for (p, &c) in transpose8(r).iter().enumerate() {
                _mm256_storeu_ps(dst.add((p0 + p) * nr + eighth * 8), c);
            }
        }
    }
    done
}
