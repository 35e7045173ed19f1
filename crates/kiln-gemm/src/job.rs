//! One product's work, split among threads: for each chunk (a `KC`-deep slice of an
//! `NC`-wide panel), a phase that packs B's slice and a phase that multiplies, each phase
//! cut into one piece per thread.
//!
//! Threads claim pieces in order from one counter and wait, before a piece, until every piece
//! of the earlier phases is done. That is one barrier per phase without a rayon job per phase
//! (whose wake-ups cost more than W5's small products take), and it cannot deadlock where
//! rayon starts a job late or never: whatever a waiting thread waits on was claimed by a
//! thread that is running it, and a thread that starts late finds the work done.

use super::kernel::{Tile, Update, MR};
use super::pack::{pack_a, pack_b};
use super::{with_buffer, Blocking, Element, Isa, Mat, A_BLOCK};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(super) struct Job<T> {
    a: Mat<*const T>,
    b: Mat<*const T>,
    c: Mat<*mut T>,
    /// `W -= (A B) scale` in the last k chunk instead of storing into C (`gemm_update`).
    update: Option<(Mat<*mut T>, T)>,
    blocking: Blocking,
    /// The kernels' ISA, and the columns of their tiles (`Element::nr`).
    isa: Isa,
    nr: usize,
    /// Packed B of the current chunk, shared: sliver `s` at `s * NR * k_step`, whatever the
    /// chunk's depth. Pieces that pack their own slivers (`own_columns`) run through the
    /// chunks at their own pace, so one may pack the shallower last chunk while another
    /// still multiplies an earlier one: at `s * NR * kcur` their slivers overlapped.
    panel: *mut T,
    /// Pieces per phase.
    parts: usize,
    /// Chunks along k per panel, the depth of each (the last may be shallower), and chunks
    /// in all.
    k_chunks: usize,
    k_step: usize,
    chunks: usize,
    /// Whether each piece packs its own columns of B (`work_own_columns`).
    own_columns: bool,
    /// Pieces claimed and pieces done, counted over all phases in order.
    claimed: AtomicUsize,
    done: AtomicUsize,
}

// SAFETY: the threads read A, B and (after the phase that packs it) the panel, and write
// disjoint pieces of the panel and of C; the `done` counter orders the phases.
unsafe impl<T: Sync> Sync for Job<T> {}

impl<T: Element> Job<T> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        a: Mat<*const T>,
        b: Mat<*const T>,
        c: Mat<*mut T>,
        update: Option<(Mat<*mut T>, T)>,
        blocking: Blocking,
        panel: *mut T,
        parts: usize,
        isa: Isa,
    ) -> Self {
        let nr = T::nr(isa);
        let k_chunks = a.cols.div_ceil(blocking.kc);
        let k_step = super::k_step(a.cols, blocking.kc);
        let slivers = c.cols.min(blocking.nc).div_ceil(nr);
        let own_columns =
            parts > 1 && c.cols <= blocking.nc && !splits_rows(c.rows, slivers, blocking.mc, parts);
        Job {
            a,
            b,
            c,
            update,
            blocking,
            isa,
            nr,
            panel,
            parts,
            k_chunks,
            k_step,
            chunks: c.cols.div_ceil(blocking.nc) * k_chunks,
            own_columns,
            claimed: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }

    /// Claims and runs pieces until none is left.
    pub(super) fn work(&self) {
        if self.own_columns {
            return self.work_own_columns();
        }
        let total = 2 * self.chunks * self.parts;
        loop {
            let g = self.claimed.fetch_add(1, Ordering::Relaxed);
            if g >= total {
                return;
            }
            let (phase, piece) = (g / self.parts, g % self.parts);
            self.wait_for(phase * self.parts);
            // SAFETY: the caller of `gemm` vouched for the matrices; the phases before this
            // one are done, so the panel holds this chunk's B (or is free to pack).
            unsafe { self.run(phase, piece) };
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    /// A product split by columns within one panel: each piece packs the slivers of B it
    /// multiplies, chunk after chunk, so no thread waits on another (W5's 256-row products
    /// had eight phase barriers a product).
    fn work_own_columns(&self) {
        loop {
            let piece = self.claimed.fetch_add(1, Ordering::Relaxed);
            if piece >= self.parts {
                return;
            }
            for chunk in 0..self.chunks {
                // SAFETY: as in `work`; the slivers this piece packs are its own (the pieces
                // cut the panel's slivers alike in both phases), and it reads them only after
                // packing them.
                unsafe {
                    self.run(2 * chunk, piece);
                    self.run(2 * chunk + 1, piece);
                }
            }
        }
    }

    /// Spins (then yields, on a busy machine) until `pieces` pieces are done.
    fn wait_for(&self, pieces: usize) {
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < pieces {
            if spins < 1 << 12 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Elements from one sliver of the panel to the next (see `panel`).
    fn sliver_stride(&self) -> usize {
        self.nr * self.k_step
    }

    /// Piece `piece` of phase `phase`: even phases pack, odd ones multiply.
    unsafe fn run(&self, phase: usize, piece: usize) {
        let (nc, kc) = (self.blocking.nc, self.k_step);
        let chunk = phase / 2;
        let (jc, pc) = ((chunk / self.k_chunks) * nc, (chunk % self.k_chunks) * kc);
        let (ncur, kcur) = (nc.min(self.c.cols - jc), kc.min(self.a.cols - pc));
        let slivers = ncur.div_ceil(self.nr);
        let part = |len: usize| piece * len / self.parts..(piece + 1) * len / self.parts;
        if phase.is_multiple_of(2) {
            let stride = self.sliver_stride();
            pack_b(
                self.b.at(pc, jc),
                kcur,
                ncur,
                self.nr,
                part(slivers),
                self.panel,
                stride,
            );
            return;
        }
        let m = self.c.rows;
        let (rows, cols) = if splits_rows(m, slivers, self.blocking.mc, self.parts) {
            let t = part(m.div_ceil(MR));
            (t.start * MR..(t.end * MR).min(m), 0..slivers)
        } else {
            (0..m, part(slivers))
        };
        self.multiply(jc, pc, ncur, kcur, rows, cols);
    }

    /// Rows `rows` (starting at a multiple of `MR`) of the chunk's slivers `slivers`.
    unsafe fn multiply(
        &self,
        jc: usize,
        pc: usize,
        ncur: usize,
        kcur: usize,
        rows: Range<usize>,
        slivers: Range<usize>,
    ) {
        let (nr, mc) = (self.nr, self.blocking.mc);
        let kernel = T::kernel(self.isa);
        let c = &self.c;
        // The update goes with the last chunk along k; the earlier ones add up in C.
        let update = self.update.filter(|_| pc + kcur == self.a.cols);
        with_buffer(&A_BLOCK, |block| {
            for ic in rows.clone().step_by(mc) {
                let mcur = mc.min(rows.end - ic);
                let ap = block.get::<T>(mcur.div_ceil(MR) * MR * kcur);
                pack_a(self.a.at(ic, pc), mcur, kcur, ap);
                for s in slivers.clone() {
                    let col = jc + s * nr;
                    let b = self.panel.add(s * self.sliver_stride());
                    for r in 0..mcur.div_ceil(MR) {
                        let row = ic + r * MR;
                        let tile = Tile {
                            c: c.ptr.offset(row as isize * c.rs + col as isize * c.cs),
                            rsc: c.rs,
                            csc: c.cs,
                            rows: MR.min(c.rows - row),
                            cols: nr.min(jc + ncur - col),
                            update: update.map(|(w, scale)| Update {
                                w: w.ptr.offset(row as isize * w.rs + col as isize * w.cs),
                                rsw: w.rs,
                                csw: w.cs,
                                scale,
                            }),
                        };
                        kernel(kcur, ap.add(r * MR * kcur), b, tile, pc > 0);
                    }
                }
            }
        });
    }
}

/// Whether a chunk of `slivers` slivers and `m` rows is split among `parts` pieces by rows.
/// Rows where there are many (each thread then packs only its own A), else columns: each
/// thread packs all of A, but reads only its part of B's panel, which with one A block fits
/// its L2 (W5's 256-row products: 4-8% faster than by rows).
fn splits_rows(m: usize, slivers: usize, mc: usize, parts: usize) -> bool {
    let many_rows = m > 2 * mc || slivers < 2 * parts;
    slivers < parts || (m.div_ceil(MR) >= 2 * parts && many_rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `rows x cols` matrix of small distinct values, row-major.
    fn values(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| ((i * 37 + seed * 11) % 101) as f32 / 25.0 - 2.0)
            .collect()
    }

    fn mat<P>(ptr: P, rows: usize, cols: usize) -> Mat<P> {
        Mat {
            ptr,
            rows,
            cols,
            rs: cols as isize,
            cs: 1,
        }
    }

    /// Pieces that pack their own slivers may be at different chunks: one packing the
    /// shallower last chunk while another has packed, but not yet multiplied, an earlier one.
    /// Run in that order on one thread, the product is still the one run in order.
    #[test]
    fn own_column_pieces_at_different_chunks_keep_their_slivers() {
        if !crate::available() {
            eprintln!("skipped: this host lacks AVX2 or FMA");
            return;
        }
        // 103 = 20 x 5 + 3: the last chunk is shallower. Four pieces of one sliver each.
        let (m, n, k) = (23, 64, 103);
        let blocking = Blocking {
            mc: 12,
            kc: 5,
            nc: 64,
        };
        let (a, b) = (values(m, k, 1), values(k, n, 2));
        let run = |interleave: bool| -> Vec<f32> {
            let mut c = vec![f32::NAN; m * n];
            // Aligned as `gemm`'s panels are: the kernels load B's slivers with aligned
            // loads (a `Vec<f32>` is only 16-byte aligned, and crashed now and then).
            let mut panel = super::super::pack::Buffer::default();
            let job = Job::new(
                mat(a.as_ptr(), m, k),
                mat(b.as_ptr(), k, n),
                mat(c.as_mut_ptr(), m, n),
                None,
                blocking,
                panel.get::<f32>(n * blocking.kc),
                4,
                Isa::Avx2,
            );
            assert!(job.own_columns);
            let last = job.chunks - 1;
            // SAFETY: one thread runs every phase, each piece's phases in order; the
            // buffers are the sizes `gemm` gives them.
            unsafe {
                let chunks = |piece: usize, range: std::ops::Range<usize>| {
                    for chunk in range {
                        job.run(2 * chunk, piece);
                        job.run(2 * chunk + 1, piece);
                    }
                };
                if interleave {
                    // Piece 3 reaches the last chunk while piece 1 is at the first.
                    chunks(3, 0..last);
                    job.run(0, 1);
                    job.run(2 * last, 3);
                    job.run(1, 1);
                    job.run(2 * last + 1, 3);
                    chunks(1, 1..job.chunks);
                    chunks(0, 0..job.chunks);
                    chunks(2, 0..job.chunks);
                } else {
                    for piece in 0..4 {
                        chunks(piece, 0..job.chunks);
                    }
                }
            }
            c
        };
        let (want, got) = (run(false), run(true));
        assert!(want.iter().all(|v| v.is_finite()));
        assert_eq!(got, want);
    }
}
