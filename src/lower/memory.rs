//! The static memory plan: where buffers whose sizes and lifetimes are known before a call go
//! in one scratch area. A buffer is alive from the first step that touches it to the last
//! (both included, so a step never writes its result over an argument it reads); two buffers
//! alive at the same step never overlap, and a buffer's place is reused once nothing reads it
//! any more. Ahead-of-time functions (`aot`) place their intermediates this way in the
//! caller's scratch area, and the CPU backend's direct calls (`jit_cpu`) in theirs.

/// A buffer to place: its size and the first and last steps (positions in any one order of
/// the steps) that touch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// The buffer's size in bytes.
    pub bytes: usize,
    /// The first step that touches it.
    pub first: usize,
    /// The last step that touches it (its place is free after it).
    pub last: usize,
}

/// Places each buffer at the lowest offset, a multiple of `align`, that overlaps no buffer
/// alive at the same time (larger buffers first among those born at the same step, which
/// packs a little better). Returns each buffer's offset, in the order of `buffers`, and the
/// size of the area (a multiple of `align`).
pub fn place(buffers: &[Lifetime], align: usize) -> (Vec<usize>, usize) {
    let up = |x: usize| x.div_ceil(align) * align;
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (buffers[i].first, std::cmp::Reverse(buffers[i].bytes)));
    let mut offsets = vec![0; buffers.len()];
    // (start, end, first, last) of the buffers placed so far.
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut total = 0;
    for i in order {
        let Lifetime { bytes, first, last } = buffers[i];
        if bytes == 0 {
            continue;
        }
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 <= last && first <= p.3)
            .map(|p| (p.0, p.1))
            .collect();
        busy.sort_unstable();
        let mut off = 0;
        for (s, e) in busy {
            if off + bytes <= s {
                break;
            }
            off = off.max(up(e));
        }
        placed.push((off, off + bytes, first, last));
        offsets[i] = off;
        total = total.max(up(off + bytes));
    }
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(bytes: usize, first: usize, last: usize) -> Lifetime {
        Lifetime { bytes, first, last }
    }

    #[test]
    fn dead_buffers_are_reused_and_live_ones_never_overlap() {
        // Three buffers in a chain: the third reuses the first's place.
        let (at, total) = place(&[live(100, 0, 1), live(100, 1, 2), live(100, 2, 3)], 64);
        assert_eq!((at, total), (vec![0, 128, 0], 256));
        // A step's result never lands on the argument it reads at that step.
        let (at, _) = place(&[live(64, 0, 1), live(64, 1, 1)], 16);
        assert_ne!(at[0], at[1]);
        // Empty buffers take no room.
        assert_eq!(place(&[live(0, 0, 5)], 16), (vec![0], 0));
    }

    #[test]
    fn random_lifetimes_never_share_bytes_while_both_are_alive() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        for _ in 0..200 {
            let bufs: Vec<Lifetime> = (0..12)
                .map(|_| {
                    let first = next(10);
                    live(next(300), first, first + next(5))
                })
                .collect();
            let (at, total) = place(&bufs, 16);
            for i in 0..bufs.len() {
                assert_eq!(at[i] % 16, 0);
                assert!(at[i] + bufs[i].bytes <= total);
                for j in 0..i {
                    let (a, b) = (bufs[i], bufs[j]);
                    let together = a.first <= b.last && b.first <= a.last;
                    let apart = at[i] + a.bytes <= at[j] || at[j] + b.bytes <= at[i];
                    assert!(!together || apart || a.bytes == 0 || b.bytes == 0);
                }
            }
        }
    }
}
