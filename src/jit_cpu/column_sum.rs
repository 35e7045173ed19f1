//! Float sums down a strided axis into a contiguous run of outputs (a bias gradient's sum over
//! the batch), in the reference's pairwise order, reading the input row by row.
//!
//! The generated column leaves (`codegen::clif::reduce`, `Leaf::Col`) keep one vector of outputs in
//! registers and walk the whole column for it: every row's cache line is fetched again for
//! each vector of four outputs, at a stride the prefetcher follows badly. Here the eight
//! partial sums of each output live in a small block in L1 instead, and each row is read
//! once, in order: a bias gradient of W5 (a 256 x 512 f32 sum over axis 0) went from 41-53 us
//! to 15.5-17.7 us (`cargo bench --bench kiln -- sum_axis_0`; on one thread, as it now runs).
//! The additions are those of
//! `perform::reduce::pairwise_sum` for every output, element by element, so the bits are the
//! interpreter's; only the loop order differs.

use num_traits::Float;

/// Outputs summed together: the partial sums take 8 x this many elements (16 KiB of f64).
const BLOCK: usize = 256;

use crate::ir::PAIRWISE;

/// A float sum's leaf length and split point ([`PAIRWISE`], the reference's order): longer
/// runs of rows are split in two, as the reference splits its sums.
const PAIRWISE_BLOCK: usize = PAIRWISE.block;
fn pairwise_mid(n: usize) -> usize {
    PAIRWISE.mid(n)
}

/// `column_sum` on two of rayon's threads: each sums half of the rows (read contiguously,
/// where blocks of columns would read a strided piece of every row), split where the
/// reference first splits, and the halves are added as the reference adds them, so the bits
/// are the same. With too few rows to split, `column_sum` on this thread.
///
/// # Safety
/// As `column_sum`.
pub(super) unsafe fn column_sum_in_halves<T: Float + Send>(
    x: *const T,
    rs: isize,
    n: usize,
    out: *mut T,
    len: usize,
) {
    if n <= PAIRWISE_BLOCK {
        // SAFETY: the caller vouches for the pointers.
        return unsafe { column_sum(x, rs, n, out, len) };
    }
    let mid = pairwise_mid(n);
    let mut right = vec![T::zero(); len];
    let (x, out, r) = (x as usize, out as usize, right.as_mut_ptr() as usize);
    // SAFETY: rows `0..mid` into the outputs, rows `mid..n` into `right`: disjoint writes,
    // reads of the caller's rows only.
    rayon::join(
        || unsafe { column_sum(x as *const T, rs, mid, out as *mut T, len) },
        || unsafe {
            let x = (x as *const T).offset(mid as isize * rs);
            column_sum(x, rs, n - mid, r as *mut T, len)
        },
    );
    for (j, &v) in right.iter().enumerate() {
        // SAFETY: `out` holds `len` elements.
        unsafe {
            let o = (out as *mut T).add(j);
            *o = *o + v;
        }
    }
}

/// `out[j] = sum over r < n of x[r * rs + j]` for `j < len`, in the reference's pairwise order.
///
/// # Safety
/// `x` must address `n` rows of `len` elements `rs` elements apart, `out` must hold `len`
/// elements and overlap none of them.
pub(super) unsafe fn column_sum<T: Float>(
    x: *const T,
    rs: isize,
    n: usize,
    out: *mut T,
    len: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the feature was checked; the caller vouches for the pointers.
        return unsafe { column_sum_avx2(x, rs, n, out, len) };
    }
    // SAFETY: as above.
    unsafe { column_sum_any(x, rs, n, out, len) }
}

/// One body, compiled twice: for AVX2 (8 f32 a vector) and for the baseline (SSE2's 4).
macro_rules! column_sum_fn {
    ($name:ident $(, $feature:literal)?) => {
        $(#[target_feature(enable = $feature)])?
        unsafe fn $name<T: Float>(x: *const T, rs: isize, n: usize, out: *mut T, len: usize) {
            for j0 in (0..len).step_by(BLOCK) {
                let w = BLOCK.min(len - j0);
                // SAFETY: the block's columns lie inside the caller's rows and outputs.
                let out = unsafe { std::slice::from_raw_parts_mut(out.add(j0), w) };
                unsafe { $name::rows(x.add(j0), rs, n, out) };
            }
        }

        mod $name {
            use super::{pairwise_mid, Float, BLOCK, PAIRWISE_BLOCK};

            /// `x[r][j]` for `j < w`.
            #[inline(always)]
            unsafe fn row<'a, T>(x: *const T, rs: isize, r: usize, w: usize) -> &'a [T] {
                unsafe { std::slice::from_raw_parts(x.offset(r as isize * rs), w) }
            }

            #[inline(always)]
            fn add_into<T: Float>(acc: &mut [T], xs: &[T]) {
                for (a, &v) in acc.iter_mut().zip(xs) {
                    *a = *a + v;
                }
            }

            /// `pairwise_sum` of rows `0..n`, for all `out.len()` columns at once.
            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn rows<T: Float>(x: *const T, rs: isize, n: usize, out: &mut [T]) {
                let w = out.len();
                if n < 8 {
                    out.fill(T::zero());
                    for r in 0..n {
                        add_into(out, unsafe { row(x, rs, r, w) });
                    }
                } else if n <= PAIRWISE_BLOCK {
                    let mut acc = [[T::zero(); BLOCK]; 8];
                    let full = n / 8 * 8;
                    for r0 in (0..full).step_by(8) {
                        for (k, a) in acc.iter_mut().enumerate() {
                            add_into(&mut a[..w], unsafe { row(x, rs, r0 + k, w) });
                        }
                    }
                    for (j, o) in out.iter_mut().enumerate() {
                        let a = |k: usize| acc[k][j];
                        *o = ((a(0) + a(1)) + (a(2) + a(3))) + ((a(4) + a(5)) + (a(6) + a(7)));
                    }
                    for r in full..n {
                        add_into(out, unsafe { row(x, rs, r, w) });
                    }
                } else {
                    // Split at a multiple of 8, as the reference does.
                    let mid = pairwise_mid(n);
                    unsafe { rows(x, rs, mid, out) };
                    let mut right = [T::zero(); BLOCK];
                    let right = &mut right[..w];
                    unsafe { rows(x.offset(mid as isize * rs), rs, n - mid, right) };
                    add_into(out, right);
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
column_sum_fn!(column_sum_avx2, "avx2");
column_sum_fn!(column_sum_any);

#[cfg(test)]
mod tests {
    use super::column_sum;
    use crate::perform::reduce::pairwise_sum;
    use num_traits::Float;

    /// Values over many magnitudes and both signs, so that another order of the additions
    /// gives other bits.
    fn values<T: Float>(count: usize, seed: u64) -> Vec<T> {
        let mut s = seed;
        (0..count)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (s >> 11) as f64 / (1u64 << 53) as f64;
                let scale = 2f64.powi(((s >> 3) % 40) as i32 - 20);
                T::from((u - 0.5) * scale).unwrap()
            })
            .collect()
    }

    fn check<T: Float + std::fmt::Debug>(bits: impl Fn(T) -> u64) {
        let lens = (0..=40).chain([127, 128, 129, 136, 200, 256, 257, 300, 1000]);
        for n in lens {
            for width in [1, 7, 33, 300] {
                let rs = width + 3;
                let x = values::<T>(n * rs, (n * 1000 + width) as u64);
                let mut out = vec![T::nan(); width];
                // SAFETY: `x` holds `n` rows of `rs >= width` elements; `out` is distinct.
                unsafe { column_sum(x.as_ptr(), rs as isize, n, out.as_mut_ptr(), width) };
                for (j, &got) in out.iter().enumerate() {
                    let column: Vec<T> = (0..n).map(|r| x[r * rs + j]).collect();
                    let want = pairwise_sum(&column);
                    assert_eq!(bits(got), bits(want), "{n} rows, column {j} of {width}");
                }
            }
        }
    }

    #[test]
    fn column_sums_are_the_reference_pairwise_sums_bit_for_bit() {
        check::<f32>(|v| v.to_bits() as u64);
        check::<f64>(f64::to_bits);
    }

    #[test]
    fn negative_zero_columns_sum_to_positive_zero_as_in_the_reference() {
        for n in [1, 5, 8, 130] {
            let x = vec![-0.0f32; n * 4];
            let mut out = [f32::NAN; 4];
            unsafe { column_sum(x.as_ptr(), 4, n, out.as_mut_ptr(), 4) };
            let want = pairwise_sum(&x[..n]);
            assert!(
                out.iter().all(|v| v.to_bits() == want.to_bits()),
                "{n}: {out:?}"
            );
        }
    }
}
