//! Running a row group (`lower::rows`): the members' compiled thunks run block after block of
//! rows, each block's intermediates kept in small per-thread buffers (reused from block to
//! block, so they stay in cache), and only the values read after the group are written whole:
//! copied from the block buffer, or, for a map member that no later member reads, written by
//! its kernel straight into the whole output's rows (`Thunk::run_into_raw`). Blocks run on
//! rayon's threads; a block is small enough that the members' own kernels stay
//! single-threaded inside it.

use super::host::Host;
use super::vm::{take_offered, Env, VmState};
use super::Thunk;
use crate::error::Error;
use crate::ir::Func;
use crate::lower::rows::Role;
use crate::lower::Step;
use crate::tensor::{Tensor, TensorRef};
use rayon::prelude::*;
use smallvec::SmallVec;
use std::sync::Arc;

/// Elements of the widest member a block holds: 128 KiB of f32, so that a softmax's block of
/// input, exponentials and output stays in a 512 KiB L2; below the kernels' threading size.
const BLOCK_ELEMS: usize = 1 << 15;

// Shifted sums prefetch the next block while they compute (see `PREFETCH_AHEAD`).
#[cfg(target_arch = "x86_64")]
const _: () = assert!(crate::math::avx2::PREFETCH_AHEAD == BLOCK_ELEMS);

/// Rows a block holds. Debug builds (the tests) use blocks of two rows, so that the small
/// arrays of the differential and random-graph tests run through several blocks, with a ragged
/// last one where the row count is odd.
fn block_rows(row_elems: usize) -> usize {
    if cfg!(debug_assertions) {
        2
    } else {
        (BLOCK_ELEMS / row_elems).max(1)
    }
}

/// A whole output a member's kernel writes straight into: its address, the bytes of one row,
/// its dtype and its shape after the first dim.
struct DirectOut {
    base: usize,
    row_bytes: usize,
    dtype: crate::ir::DType,
    inner: Vec<usize>,
}

/// Runs the group `group` of `members`, or returns `Ok(false)` without running anything when
/// it cannot (a member without a compiled kernel, a value whose run-time first dim is not the
/// row count, too little work to split): the caller then runs the members one by one.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_rows(
    host: &Host,
    func: &Func,
    group: &Step,
    rows: usize,
    members: &[Step],
    roles: &[Vec<Role>],
    env: &mut Env<'_, '_, Host>,
    state: &mut VmState<Host>,
) -> Result<bool, Error> {
    let thunks: Option<SmallVec<[Arc<dyn Thunk>; 8]>> =
        members.iter().map(|m| host.thunk(m).cloned()).collect();
    let Some(thunks) = thunks else {
        return Ok(false);
    };
    // The widest member's elements per row sets the block size.
    let row_elems = members
        .iter()
        .flat_map(|m| m.args.iter().chain(&m.results))
        .filter_map(|&v| {
            let s = func.ty(v).known_shape()?;
            (s.first() == Some(&rows)).then(|| s[1..].iter().product::<usize>())
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let per = block_rows(row_elems);
    if rows <= per {
        return Ok(false);
    }
    // Outside values read by rows must have the row count at run time.
    for (m, rs) in members.iter().zip(roles) {
        for (&a, r) in m.args.iter().zip(rs) {
            if *r == Role::Rows && env.view(host, func, a)?.shape().first() != Some(&rows) {
                return Ok(false);
            }
        }
    }
    // The values read after the group, whole: the caller's buffer, a dead one, or a new one.
    let mut outs: SmallVec<[(usize, Tensor); 4]> = SmallVec::new();
    for &v in &group.results {
        let Some(i) = members.iter().position(|m| m.results[0] == v) else {
            return Err(Error::Runtime(format!(
                "row group: {v} is not a member's result"
            )));
        };
        let ty = func.ty(v);
        let shape = ty.known_shape().unwrap_or_default();
        let fits = |t: &Tensor| {
            t.dtype() == ty.dtype && t.shape() == shape.as_slice() && t.view().is_standard_layout()
        };
        let full = take_offered::<Host>(&mut env.dests, v)
            .filter(fits)
            .or_else(|| state.take_buffer(host, ty))
            .unwrap_or_else(|| Tensor::zeros(ty.dtype, &shape));
        outs.push((i, full));
    }
    // Where each whole output's rows start, and the bytes of one row.
    let targets: SmallVec<[(usize, usize, usize); 4]> = outs
        .iter()
        .map(|(i, t)| {
            let row_bytes = t.len() / rows * t.dtype().size();
            (*i, t.view().as_ptr() as usize, row_bytes)
        })
        .collect();
    // Whole outputs that no later member reads are offered to their kernel to write in place,
    // a block's rows at a time (a softmax's division writes the result straight into it).
    let direct: SmallVec<[Option<DirectOut>; 8]> = (0..members.len())
        .map(|i| {
            let &(_, base, row_bytes) = targets.iter().find(|t| t.0 == i)?;
            let read_later = roles.iter().flatten().any(|r| *r == Role::Inner(i));
            let ty = func.ty(members[i].results[0]);
            let shape = ty.known_shape()?;
            (!read_later).then(|| DirectOut {
                base,
                row_bytes,
                dtype: ty.dtype,
                inner: shape[1..].to_vec(),
            })
        })
        .collect();
    let view_env = &*env;
    let starts: Vec<usize> = (0..rows).step_by(per).collect();
    let tasks = rayon::current_num_threads() * 4;
    let chunk = starts.len().div_ceil(tasks).max(1);
    starts.par_chunks(chunk).try_for_each(|chunk| {
        // This thread's block buffers, one per member, reused from block to block.
        let mut temps: SmallVec<[Option<Tensor>; 8]> = SmallVec::from_elem(None, members.len());
        // Whether a member wrote this block straight into its whole output.
        let mut written: SmallVec<[bool; 8]> = SmallVec::from_elem(false, members.len());
        for &r0 in chunk {
            let r1 = (r0 + per).min(rows);
            for (i, m) in members.iter().enumerate() {
                let dest = temps[i].take();
                let args = m
                    .args
                    .iter()
                    .zip(&roles[i])
                    .map(|(&a, role)| match *role {
                        Role::Rows => Ok(view_env.view(host, func, a)?.slice_rows(r0, r1)),
                        Role::Whole => view_env.view(host, func, a),
                        Role::Inner(j) => temps[j]
                            .as_ref()
                            .map(Tensor::view)
                            .ok_or_else(|| Error::Runtime("row group: member order".into())),
                    })
                    .collect::<Result<SmallVec<[TensorRef<'_>; 4]>, Error>>()?;
                if let Some(d) = &direct[i] {
                    let shape: SmallVec<[usize; 4]> = std::iter::once(r1 - r0)
                        .chain(d.inner.iter().copied())
                        .collect();
                    let at = (d.base + r0 * d.row_bytes) as *mut u8;
                    // SAFETY: rows r0..r1 of the whole output (a standard-layout buffer of
                    // `rows` rows of `row_bytes`, owned by this call), written by this block
                    // only and read by no member (no later member reads it) nor overlapping an
                    // input (the buffer was offered, dead or new).
                    let wrote = super::interp::guarded(&m.op, || unsafe {
                        thunks[i].run_into_raw(&args, at, d.dtype, &shape)
                    })?;
                    if wrote {
                        drop(args);
                        temps[i] = dest;
                        written[i] = true;
                        continue;
                    }
                }
                let result = super::interp::guarded(&m.op, || thunks[i].run_into(&args, dest))?;
                drop(args);
                temps[i] = result.into_iter().next();
                written[i] = false;
            }
            for &(i, base, row_bytes) in &targets {
                if written[i] {
                    continue;
                }
                let t = temps[i]
                    .as_ref()
                    .ok_or_else(|| Error::Runtime("row group: a member gave no result".into()))?;
                let v = t.view();
                if !v.is_standard_layout() || t.len() * t.dtype().size() != (r1 - r0) * row_bytes {
                    return Err(Error::Runtime(format!(
                        "row group: a block of {} has shape {:?}",
                        members[i].results[0],
                        t.shape()
                    )));
                }
                // SAFETY: the whole output is a standard-layout buffer of `rows` rows of
                // `row_bytes` owned by this call and read by no one during the loop; blocks
                // write disjoint row ranges of it; the block is contiguous with exactly
                // `r1 - r0` rows (checked above).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        v.as_ptr(),
                        (base + r0 * row_bytes) as *mut u8,
                        (r1 - r0) * row_bytes,
                    );
                }
            }
        }
        Ok::<(), Error>(())
    })?;
    for (i, t) in outs {
        env.values[members[i].results[0].index()] = Some(t);
    }
    Ok(true)
}
