//! One product's work, split among threads: for each chunk (a `KC`-deep slice of an
//! `NC`-wide panel), a phase that packs B's slice and a phase that multiplies, each phase
//! cut into one piece per thread.
//!
//! Threads claim pieces in order from one counter and wait, before a piece, until every piece
//! of the earlier phases is done. That is one barrier per phase without a rayon job per phase
//! (whose wake-ups cost more than W5's small products take), and it cannot deadlock where
//! rayon starts a job late or never: whatever a waiting thread waits on was claimed by a
//! thread that is running it, and a thread that starts late finds the work done.
//!
//! A product split by columns (few rows) has no phase barriers: each piece packs its own
//! slivers of B, and the pieces share one packed A, whose pieces they claim the same way.

use super::kernel::{Tile, Update, MR};
use super::pack::{pack_a, pack_b, Buffer};
use super::{with_buffer, Blocking, Element, Mat, A_BLOCK};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(super) struct Job<T> {
    a: Mat<*const T>,
    b: Mat<*const T>,
    c: Mat<*mut T>,
    /// `W -= (A B) scale` in the last k chunk instead of storing into C (`gemm_update`).
    update: Option<(Mat<*mut T>, T)>,
    blocking: Blocking,
    /// Packed B of the current chunk, shared.
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
    /// Packed A of every k chunk, where the pieces split the columns and share it
    /// (`share_a`): chunk `i` at `i * rows * k_step`, `rows` being C's rows rounded up to
    /// whole tiles.
    shared_a: Option<*mut T>,
    /// Pieces of the shared A (a chunk's row tiles cut in `parts`, chunk after chunk)
    /// claimed and packed.
    a_claimed: AtomicUsize,
    a_done: AtomicUsize,
}

/// The most elements a shared A (`Job::share_a`) takes: 8 MiB of f32, which holds W5's
/// 256-row products (256 x 784) with room to spare.
const SHARED_A_MAX: usize = 1 << 21;

// SAFETY: the threads read A, B and (after the phase that packs it) the panel, and write
// disjoint pieces of the panel and of C; the `done` counter orders the phases.
unsafe impl<T: Sync> Sync for Job<T> {}

impl<T: Element> Job<T> {
    pub(super) fn new(
        a: Mat<*const T>,
        b: Mat<*const T>,
        c: Mat<*mut T>,
        update: Option<(Mat<*mut T>, T)>,
        blocking: Blocking,
        panel: *mut T,
        parts: usize,
    ) -> Self {
        // Near-equal chunks of at most `kc`: 784 is 4 x 196, not 3 x 256 + 16 (a chunk a few
        // deep spends most of its time loading and storing C).
        let k_chunks = a.cols.div_ceil(blocking.kc);
        let k_step = a.cols.div_ceil(k_chunks.max(1));
        let slivers = c.cols.min(blocking.nc).div_ceil(T::NR);
        let own_columns =
            parts > 1 && c.cols <= blocking.nc && !splits_rows(c.rows, slivers, blocking.mc, parts);
        Job {
            a,
            b,
            c,
            update,
            blocking,
            panel,
            parts,
            k_chunks,
            k_step,
            chunks: c.cols.div_ceil(blocking.nc) * k_chunks,
            own_columns,
            claimed: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            shared_a: None,
            a_claimed: AtomicUsize::new(0),
            a_done: AtomicUsize::new(0),
        }
    }

    /// Where the pieces split C's columns, has them pack A once between them, in `buffer`,
    /// rather than each packing all of it: each thread packs its share of a chunk's row tiles
    /// and then reads the others' (W5's 256-row products packed their 256 x 784 A twice).
    /// Left as it is where A would take more than `SHARED_A_MAX` elements.
    pub(super) fn share_a(&mut self, buffer: &mut Buffer) {
        let len = self.c.rows.div_ceil(MR) * MR * self.k_step * self.k_chunks;
        if self.own_columns && len <= SHARED_A_MAX {
            self.shared_a = Some(buffer.get::<T>(len));
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
                // packing them; a shared A's chunk is read only once every piece of it is
                // packed.
                unsafe {
                    self.run(2 * chunk, piece);
                    if self.shared_a.is_some() {
                        self.pack_shared_a_through(chunk);
                    }
                    self.run(2 * chunk + 1, piece);
                }
            }
        }
    }

    /// Packs pieces of the shared A until every piece of chunks `0..=chunk` is claimed, then
    /// waits until they are packed. Pieces are claimed in order, so those waited on were
    /// claimed by running threads (a thread that starts late, or never, holds none).
    unsafe fn pack_shared_a_through(&self, chunk: usize) {
        let (Some(shared), parts) = (self.shared_a, self.parts) else {
            return;
        };
        let need = (chunk + 1) * parts;
        while self.a_claimed.load(Ordering::Relaxed) < need {
            let g = self.a_claimed.fetch_add(1, Ordering::Relaxed);
            if g >= self.chunks * parts {
                break;
            }
            let (chunk, piece) = (g / parts, g % parts);
            let m = self.c.rows;
            let pc = chunk * self.k_step;
            let kcur = self.k_step.min(self.a.cols - pc);
            let tiles = m.div_ceil(MR);
            let rows = piece * tiles / parts * MR..((piece + 1) * tiles / parts * MR).min(m);
            if !rows.is_empty() {
                let at = self.shared_chunk(shared, chunk).add(rows.start * kcur);
                pack_a(self.a.at(rows.start, pc), rows.len(), kcur, at);
            }
            self.a_done.fetch_add(1, Ordering::Release);
        }
        wait_until(&self.a_done, need);
    }

    /// Where k chunk `chunk` of the shared A starts: its slivers follow one another, `MR x
    /// kcur` each.
    unsafe fn shared_chunk(&self, shared: *mut T, chunk: usize) -> *mut T {
        shared.add(chunk * self.c.rows.div_ceil(MR) * MR * self.k_step)
    }

    /// Spins (then yields, on a busy machine) until `pieces` pieces are done.
    fn wait_for(&self, pieces: usize) {
        wait_until(&self.done, pieces);
    }

    /// Piece `piece` of phase `phase`: even phases pack, odd ones multiply.
    unsafe fn run(&self, phase: usize, piece: usize) {
        let (nc, kc) = (self.blocking.nc, self.k_step);
        let chunk = phase / 2;
        let (jc, pc) = ((chunk / self.k_chunks) * nc, (chunk % self.k_chunks) * kc);
        let (ncur, kcur) = (nc.min(self.c.cols - jc), kc.min(self.a.cols - pc));
        let slivers = ncur.div_ceil(T::NR);
        let part = |len: usize| piece * len / self.parts..(piece + 1) * len / self.parts;
        if phase % 2 == 0 {
            pack_b(self.b.at(pc, jc), kcur, ncur, part(slivers), self.panel);
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
        let (nr, mc) = (T::NR, self.blocking.mc);
        let kernel = T::kernel();
        let c = &self.c;
        // The update goes with the last chunk along k; the earlier ones add up in C.
        let update = self.update.filter(|_| pc + kcur == self.a.cols);
        // A shared by the pieces holds this chunk packed (`pack_shared_a_through`).
        let shared = self
            .shared_a
            .map(|a| self.shared_chunk(a, pc / self.k_step));
        with_buffer(&A_BLOCK, |block| {
            for ic in rows.clone().step_by(mc) {
                let mcur = mc.min(rows.end - ic);
                let ap = match shared {
                    Some(chunk) => chunk.add(ic * kcur),
                    None => {
                        let ap = block.get::<T>(mcur.div_ceil(MR) * MR * kcur);
                        pack_a(self.a.at(ic, pc), mcur, kcur, ap);
                        ap
                    }
                };
                for s in slivers.clone() {
                    let col = jc + s * nr;
                    let b = self.panel.add(s * nr * kcur);
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

/// Spins (then yields, on a busy machine) until `counter` reaches `pieces`.
fn wait_until(counter: &AtomicUsize, pieces: usize) {
    let mut spins = 0u32;
    while counter.load(Ordering::Acquire) < pieces {
        if spins < 1 << 12 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// Whether a chunk of `slivers` slivers and `m` rows is split among `parts` pieces by rows.
/// Rows where there are many (each thread then packs only its own A), else columns: the
/// threads share A (each packing part of it, `Job::share_a`), and each reads only its part of
/// B's panel, which with one A block fits its L2 (W5's 256-row products: 4-8% faster than by
/// rows).
fn splits_rows(m: usize, slivers: usize, mc: usize, parts: usize) -> bool {
    let many_rows = m > 2 * mc || slivers < 2 * parts;
    slivers < parts || (m.div_ceil(MR) >= 2 * parts && many_rows)
}
