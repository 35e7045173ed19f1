//! Map kernels: each output element from the same-index elements of the (broadcast) inputs.
//!
//! Parameters (docs/gpu.md): `out_0 .. out_{m-1}, in_0 .. in_{k-1}` (global pointers), then
//! `i64`s: `n` (elements of the output), `flat`, `dims[r]` (the output's shape), and
//! `strides[k][r]` (each input's element strides, 0 along broadcast dims). Outputs are
//! contiguous, indexed by the linear index. When `flat` is nonzero the launcher promises that
//! every input is either contiguous over the whole output or a single broadcast element, and
//! input `j` is read at `i * strides[j][r - 1]`: no division per element.
//!
//! A grid-stride loop covers the `n` elements with 64-bit indices, so any grid works. In the
//! flat case with every read input whole (its last stride 1), each iteration covers four
//! consecutive elements with vector loads and stores, then a scalar loop the last `n % 4`.

use super::gen::{bx, Gen};
use super::kernel::{
    counted_loop, declare_kernel, grid_stride, groups_aligned, load, load_lanes, offsets,
    rows_in_groups, store, store_lanes, Inputs, LANES,
};
use super::scalar::emit_program;
use crate::error::Result;
use crate::ir::scalar::ScalarProgram;
use crate::ir::DType;
use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

/// What the map kernel for one step needs to know.
pub struct MapSpec<'p> {
    pub program: &'p ScalarProgram,
    /// The dtype of each argument (each input pointer).
    pub in_dtypes: Vec<DType>,
    /// The rank of the output's index space.
    pub rank: usize,
    /// The argument whose buffer the output may overwrite (the step's in-place mark).
    pub inplace: Option<usize>,
}

/// Defines the map kernel `name` in `g`'s module.
pub fn define_map<'ctx>(g: &Gen<'ctx>, name: &str, spec: &MapSpec) -> Result<()> {
    let p = spec.program;
    let n_out = p.outputs.len();
    let n_in = spec.in_dtypes.len();
    let r = spec.rank;
    let out_dtypes: Vec<DType> = p.outputs.iter().map(|&o| p.insts[o].dtype).collect();
    let readonly: Vec<bool> = (0..n_out)
        .map(|_| false)
        .chain((0..n_in).map(|j| spec.inplace != Some(j)))
        .collect();
    let noalias: Vec<bool> = (0..n_out)
        .map(|_| spec.inplace.is_none())
        .chain(readonly[n_out..].iter().copied())
        .collect();
    let k = declare_kernel(g, name, &readonly, &noalias, 2 + r + n_in * r)?;
    let (outs, ins) = k.pointers.split_at(n_out);
    let n = k.scalars[0];
    let flat = k.scalars[1];
    let dims = &k.scalars[2..2 + r];
    let strides: Vec<Vec<IntValue>> = (0..n_in)
        .map(|j| k.scalars[2 + r + j * r..2 + r + (j + 1) * r].to_vec())
        .collect();

    let (start, step) = grid_stride(g)?;
    let reads = p.input_dtypes();
    let read: Vec<bool> = (0..n_in)
        .map(|j| reads.get(j).copied().flatten().is_some())
        .collect();
    // Groups of `LANES` consecutive elements (see `vector_body`) when the strides allow: flat
    // with every read input whole (last stride 1; the offsets are the group's index), or the
    // innermost dim in whole groups with every read input either whole along it and aligned
    // to a group (its other strides multiples of `LANES`) or broadcast along it (last stride
    // 0; the offsets are found once per group). Then the scalar loop takes what is left: the
    // flat case's last `n % LANES` elements, or everything when there are no groups. One
    // group body and one scalar body keep the kernel small (compile time grows with it).
    let lanes = g.c64(LANES as i64);
    let no = g.ctx.bool_type().const_zero();
    let inputs = Inputs {
        ptrs: ins,
        dtypes: &spec.in_dtypes,
    };
    let rows_ok = rows_in_groups(g, dims, &strides, &read, &inputs)?.unwrap_or(no);
    let mut flat_ok = if r > 0 {
        bx(g.b.build_int_compare(IntPredicate::NE, flat, g.c64(0), "flat"))?
    } else {
        no
    };
    for (j, st) in strides.iter().enumerate() {
        if let (true, Some(&last)) = (read[j], st.last()) {
            let whole = bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(1), ""))?;
            flat_ok = bx(g.b.build_and(flat_ok, whole, "flat"))?;
        }
    }
    let aligned = groups_aligned(g, &inputs, &read)?;
    flat_ok = bx(g.b.build_and(flat_ok, aligned, "flat"))?;
    let grouped = bx(g.b.build_or(flat_ok, rows_ok, "grouped"))?;
    let all_groups = bx(g.b.build_int_unsigned_div(n, lanes, ""))?;
    let groups = bx(g.b.build_select(grouped, all_groups, g.c64(0), "groups"))?.into_int_value();
    counted_loop(g, k.func, start, step, groups, "groups", |q| {
        let base = bx(g.b.build_int_mul(q, lanes, "base"))?;
        let offs = group_offsets(g, k.func, base, flat_ok, dims, &strides)?;
        let whole: Vec<Option<IntValue>> = strides
            .iter()
            .map(|st| match st.last() {
                Some(&last) => {
                    bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(1), "")).map(Some)
                }
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let group = Group {
            base,
            offs: &offs,
            whole: &whole,
        };
        vector_body(g, k.func, spec, &out_dtypes, outs, ins, &read, &group)
    })?;
    let grouped_elems = bx(g.b.build_int_mul(groups, lanes, ""))?;
    let rest = bx(g.b.build_int_add(grouped_elems, start, "rest"))?;
    counted_loop(g, k.func, rest, step, n, "elems", |i| {
        let offs = input_offsets(g, k.func, i, flat, dims, &strides)?;
        let mut vals: Vec<Option<BasicValueEnum>> = Vec::with_capacity(n_in);
        for j in 0..n_in {
            vals.push(match reads.get(j).copied().flatten() {
                Some(_) => Some(load(g, ins[j], spec.in_dtypes[j], offs[j])?),
                None => None,
            });
        }
        let results = emit_program(g, p, &vals)?;
        for ((&out, &d), v) in outs.iter().zip(&out_dtypes).zip(results) {
            store(g, out, d, i, v)?;
        }
        Ok(())
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// A group's input offsets: its first element's index when `flat_ok` (every input whole and
/// contiguous), else the offsets of its coordinates.
fn group_offsets<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    base: IntValue<'ctx>,
    flat_ok: IntValue<'ctx>,
    dims: &[IntValue<'ctx>],
    strides: &[Vec<IntValue<'ctx>>],
) -> Result<Vec<IntValue<'ctx>>> {
    let flat_offs = |_: &Gen<'ctx>| Ok(vec![base; strides.len()]);
    offsets_if(g, func, flat_ok, flat_offs, |g| {
        offsets(g, base, dims, strides)
    })
}

/// Per input, `fast`'s offsets where `cond` holds at run time, else `slow`'s (each built in a
/// block of its own, joined by phis).
fn offsets_if<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    cond: IntValue<'ctx>,
    fast: impl FnOnce(&Gen<'ctx>) -> Result<Vec<IntValue<'ctx>>>,
    slow: impl FnOnce(&Gen<'ctx>) -> Result<Vec<IntValue<'ctx>>>,
) -> Result<Vec<IntValue<'ctx>>> {
    let fast_bb = g.ctx.append_basic_block(func, "flat");
    let slow_bb = g.ctx.append_basic_block(func, "strided");
    let join = g.ctx.append_basic_block(func, "offsets");
    bx(g.b.build_conditional_branch(cond, fast_bb, slow_bb))?;
    g.b.position_at_end(fast_bb);
    let a = fast(g)?;
    let fast_end = g.b.get_insert_block().unwrap_or(fast_bb);
    bx(g.b.build_unconditional_branch(join))?;
    g.b.position_at_end(slow_bb);
    let b = slow(g)?;
    let slow_end = g.b.get_insert_block().unwrap_or(slow_bb);
    bx(g.b.build_unconditional_branch(join))?;
    g.b.position_at_end(join);
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| {
            let phi = bx(g.b.build_phi(g.i64(), "off"))?;
            phi.add_incoming(&[(&x, fast_end), (&y, slow_end)]);
            Ok(phi.as_basic_value().into_int_value())
        })
        .collect()
}

/// Where a group of `LANES` consecutive output elements reads: the output's first element
/// `base`, each input's element offset of it, and, per input, whether it is read whole along
/// the innermost dim (a vector) or broadcast along it (one element for the group); `None`:
/// whole, known when the kernel is built.
struct Group<'a, 'ctx> {
    base: IntValue<'ctx>,
    offs: &'a [IntValue<'ctx>],
    whole: &'a [Option<IntValue<'ctx>>],
}

/// One group: every input loaded as one vector (or one element for all lanes), the scalar
/// program once per lane, each output stored as one vector. Buffers are allocated aligned
/// (256 bytes by the driver) and a group's offsets are multiples of its size, so on the GPU a
/// group is aligned to its size; on the host (the oracle's arrays) loads and stores claim only
/// the element's alignment.
#[allow(clippy::too_many_arguments)]
fn vector_body<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    spec: &MapSpec,
    out_dtypes: &[DType],
    outs: &[inkwell::values::PointerValue<'ctx>],
    ins: &[inkwell::values::PointerValue<'ctx>],
    read: &[bool],
    group: &Group<'_, 'ctx>,
) -> Result<()> {
    let base = group.base;
    let mut lanes: Vec<Vec<Option<BasicValueEnum<'ctx>>>> =
        vec![vec![None; ins.len()]; LANES as usize];
    for (j, &d) in spec.in_dtypes.iter().enumerate() {
        if !read[j] {
            continue;
        }
        let xs = load_lanes(g, func, ins[j], d, group.offs[j], group.whole[j])?;
        for (lane, x) in lanes.iter_mut().zip(xs) {
            lane[j] = Some(x);
        }
    }
    let results = lanes
        .iter()
        .map(|vals| emit_program(g, spec.program, vals))
        .collect::<Result<Vec<_>>>()?;
    for (o, (&out, &d)) in outs.iter().zip(out_dtypes).enumerate() {
        let xs: Vec<BasicValueEnum> = results.iter().map(|r| r[o]).collect();
        store_lanes(g, out, d, base, &xs)?;
    }
    Ok(())
}

/// Each input's element offset for the output's linear index `i`: by the flat promise, or by
/// dividing `i` into coordinates (rank 2 and up; rank 1 is always flat).
fn input_offsets<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    i: IntValue<'ctx>,
    flat: IntValue<'ctx>,
    dims: &[IntValue<'ctx>],
    strides: &[Vec<IntValue<'ctx>>],
) -> Result<Vec<IntValue<'ctx>>> {
    let r = dims.len();
    let flat_offs = |g: &Gen<'ctx>| -> Result<Vec<IntValue<'ctx>>> {
        strides
            .iter()
            .map(|s| match s.last() {
                Some(&last) => bx(g.b.build_int_mul(i, last, "off")),
                None => Ok(g.c64(0)),
            })
            .collect()
    };
    if r <= 1 {
        return flat_offs(g);
    }
    let is_flat = bx(g.b.build_int_compare(IntPredicate::NE, flat, g.c64(0), ""))?;
    offsets_if(g, func, is_flat, flat_offs, |g| {
        offsets(g, i, dims, strides)
    })
}
