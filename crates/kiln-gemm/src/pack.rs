//! Packing: copying a block of A or B into the order the micro-kernel reads, zero-padded to
//! whole slivers, into a reused 64-byte aligned buffer.

use super::kernel::MR;
use super::{Element, Mat};

/// A growable, 64-byte aligned scratch buffer, kept for reuse.
#[derive(Default)]
pub(super) struct Buffer {
    lines: Vec<Line>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl Buffer {
    /// Room for `len` elements of `T`, aligned to 64 bytes (contents unspecified).
    pub(super) fn get<T: Element>(&mut self, len: usize) -> *mut T {
        let lines = (len * std::mem::size_of::<T>()).div_ceil(64);
        if self.lines.len() < lines {
            self.lines = vec![Line([0; 64]); lines];
        }
        self.lines.as_mut_ptr().cast()
    }
}

/// Packs rows `0..mc` and k `0..kc` of `a` into `MR`-tall slivers at `dst`: sliver `r` holds,
/// for each p, rows `r * MR ..` of column p (zero past `mc`).
///
/// # Safety
/// `a` addresses `mc x kc` elements; `dst` has room for `mc.div_ceil(MR) * MR * kc`.
#[inline(never)] // as `pack_b`
pub(super) unsafe fn pack_a<T: Element>(a: Mat<*const T>, mc: usize, kc: usize, dst: *mut T) {
    let mut d = dst;
    for r0 in (0..mc).step_by(MR) {
        let rows = MR.min(mc - r0);
        let base = a.ptr.offset(r0 as isize * a.rs);
        // A stored by rows: eight columns at a time through a transpose, where the type
        // has one (f32).
        let start = if rows == MR && a.cs == 1 && a.rs != 1 {
            T::pack_a_rows(base, a.rs, kc, d)
        } else {
            0
        };
        d = d.add(start * MR);
        // Whole slivers (all but the last) without the padding test, and with a plain copy
        // where A's columns are contiguous (A transposed: a weight gradient's `x^T`).
        for p in start..kc {
            let col = base.offset(p as isize * a.cs);
            if rows == MR && a.rs == 1 {
                std::ptr::copy_nonoverlapping(col, d, MR);
            } else if rows == MR {
                for i in 0..MR {
                    *d.add(i) = *col.offset(i as isize * a.rs);
                }
            } else {
                for i in 0..MR {
                    *d.add(i) = if i < rows {
                        *col.offset(i as isize * a.rs)
                    } else {
                        T::ZERO
                    };
                }
            }
            d = d.add(MR);
        }
    }
}

/// Packs `nr`-wide slivers `slivers` of `b` (k `0..kc`, columns `0..nc`) into `dst`, sliver `s` at
/// `dst + s * stride`: for each p, columns `s * NR ..` of row p (zero past `nc`).
///
/// # Safety
/// `b` addresses `kc x nc` elements; `stride >= NR * kc`, and `dst` has room for
/// `nc.div_ceil(NR)` slivers at that stride.
// Kept out of line: where the compiler inlined it into its caller (which it did or not
// depending on unrelated code elsewhere in the crate), the packing ran slower and W4's 1024^3
// product took ~7% longer (perf: `pack_b`'s time moved into `with_buffer` and grew).
#[inline(never)]
pub(super) unsafe fn pack_b<T: Element>(
    b: Mat<*const T>,
    kc: usize,
    nc: usize,
    nr: usize,
    slivers: std::ops::Range<usize>,
    dst: *mut T,
    stride: usize,
) {
    debug_assert!(stride >= nr * kc);
    for s in slivers {
        let c0 = s * nr;
        let cols = nr.min(nc - c0);
        let mut d = dst.add(s * stride);
        let base = b.ptr.offset(c0 as isize * b.cs);
        if b.rs == 1 && b.cs != 1 {
            // B transposed (a backward pass's `w^T`): eight rows at a time through a
            // transpose where the type has one (f32), then read each column contiguously
            // and write it with a stride of NR into the sliver (which stays in L1).
            let start = if cols == nr {
                T::pack_b_columns(base, b.cs, kc, nr, d)
            } else {
                0
            };
            // The columns there are, then zeros in the rest of the sliver's rows: a sliver
            // of a few columns (a convolution's filter gradient: 8 of 32) writes its zeros
            // without a test per element (that loop was half of such a product's time).
            for j in 0..cols {
                let col = base.offset(j as isize * b.cs);
                for p in start..kc {
                    *d.add(p * nr + j) = *col.add(p);
                }
            }
            if cols < nr {
                for p in start..kc {
                    std::slice::from_raw_parts_mut(d.add(p * nr + cols), nr - cols).fill(T::ZERO);
                }
            }
            continue;
        }
        for p in 0..kc {
            let row = base.offset(p as isize * b.rs);
            if cols == nr && b.cs == 1 {
                std::ptr::copy_nonoverlapping(row, d, nr);
            } else {
                for j in 0..cols {
                    *d.add(j) = *row.offset(j as isize * b.cs);
                }
                std::slice::from_raw_parts_mut(d.add(cols), nr - cols).fill(T::ZERO);
            }
            d = d.add(nr);
        }
    }
}
