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
use super::kernel::{counted_loop, declare_kernel, load, offsets, store};
use super::scalar::emit_program;
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use crate::ir::DType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue};
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

    let tid = g.sreg("tid.x")?;
    let ntid = g.sreg("ntid.x")?;
    let ctaid = g.sreg("ctaid.x")?;
    let nctaid = g.sreg("nctaid.x")?;
    let start =
        bx(g.b.build_int_add(bx(g.b.build_int_mul(ctaid, ntid, ""))?, tid, "start"))?;
    let step = bx(g.b.build_int_mul(nctaid, ntid, "step"))?;
    let reads = p.input_dtypes();
    let read: Vec<bool> = (0..n_in)
        .map(|j| reads.get(j).copied().flatten().is_some())
        .collect();
    // The flat case with every input read whole (last stride 1): `LANES` elements per thread
    // and iteration, loaded and stored as vectors (see `vector_body`), then the tail.
    let vectors = g.ctx.append_basic_block(k.func, "vectors");
    let scalars = g.ctx.append_basic_block(k.func, "scalars");
    let done = g.ctx.append_basic_block(k.func, "done");
    let mut whole =
        bx(g.b.build_int_compare(IntPredicate::NE, flat, g.c64(0), "flat"))?;
    for (j, s) in strides.iter().enumerate() {
        if let (true, Some(&last)) = (read[j], s.last()) {
            let one = bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(1), ""))?;
            whole = bx(g.b.build_and(whole, one, "whole"))?;
        }
    }
    if r == 0 {
        whole = g.ctx.bool_type().const_zero();
    }
    bx(g.b.build_conditional_branch(whole, vectors, scalars))?;
    g.b.position_at_end(vectors);
    let groups = bx(g.b.build_int_unsigned_div(n, g.c64(LANES as i64), "groups"))?;
    counted_loop(g, k.func, start, step, groups, "groups", |q| {
        vector_body(g, spec, &out_dtypes, outs, ins, &read, q)
    })?;
    let tail = bx(g.b.build_int_mul(groups, g.c64(LANES as i64), "tail"))?;
    let tail_start = bx(g.b.build_int_add(tail, start, ""))?;
    counted_loop(g, k.func, tail_start, step, n, "tail", |i| {
        let mut vals: Vec<Option<BasicValueEnum>> = Vec::with_capacity(n_in);
        for j in 0..n_in {
            vals.push(match read[j] {
                true => Some(load(g, ins[j], spec.in_dtypes[j], i)?),
                false => None,
            });
        }
        let results = emit_program(g, p, &vals)?;
        for ((&out, &d), v) in outs.iter().zip(&out_dtypes).zip(results) {
            store(g, out, d, i, v)?;
        }
        Ok(())
    })?;
    bx(g.b.build_unconditional_branch(done))?;
    g.b.position_at_end(scalars);
    counted_loop(g, k.func, start, step, n, "elems", |i| {
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
    bx(g.b.build_unconditional_branch(done))?;
    g.b.position_at_end(done);
    bx(g.b.build_return(None))?;
    Ok(())
}

/// Elements per vector in the flat path: 16 bytes of f32 or i32 (the widest load a thread can
/// issue), two 16-byte loads of f64 or i64. More bytes in flight per thread is what a
/// memory-bound map needs to reach the memory's bandwidth.
const LANES: u32 = 4;

/// Group `q` of the flat path: elements `LANES * q ..` of every input loaded as one vector
/// each, the scalar program once per lane, each output stored as one vector. Buffers are
/// allocated aligned (256 bytes by the driver), so on the GPU a group is aligned to its size;
/// on the host (the oracle's arrays) loads and stores claim only the element's alignment.
fn vector_body<'ctx>(
    g: &Gen<'ctx>,
    spec: &MapSpec,
    out_dtypes: &[DType],
    outs: &[inkwell::values::PointerValue<'ctx>],
    ins: &[inkwell::values::PointerValue<'ctx>],
    read: &[bool],
    q: IntValue<'ctx>,
) -> Result<()> {
    let base = bx(g.b.build_int_mul(q, g.c64(LANES as i64), "base"))?;
    let align = |d: DType| -> u32 {
        let elem = g.mem_size(d);
        if g.host {
            elem
        } else {
            (elem * LANES).min(16)
        }
    };
    let vec_type = |d: DType| -> inkwell::types::BasicTypeEnum<'ctx> {
        match g.mem_type(d) {
            inkwell::types::BasicTypeEnum::FloatType(t) => t.vec_type(LANES).into(),
            inkwell::types::BasicTypeEnum::IntType(t) => t.vec_type(LANES).into(),
            other => other,
        }
    };
    let mut lanes: Vec<Vec<Option<BasicValueEnum<'ctx>>>> =
        vec![vec![None; ins.len()]; LANES as usize];
    for (j, &d) in spec.in_dtypes.iter().enumerate() {
        if !read[j] {
            continue;
        }
        let ty = g.mem_type(d);
        // SAFETY (of the GEP): the group lies inside the input by the flat promise.
        let at = bx(unsafe { g.b.build_in_bounds_gep(ty, ins[j], &[base], "v") })?;
        let v = bx(g.b.build_load(vec_type(d), at, "xv"))?;
        if let Some(inst) = v.as_instruction_value() {
            inst.set_alignment(align(d))
                .map_err(|e| Error::Unsupported(format!("ptx backend: {e}")))?;
        }
        let v = v.into_vector_value();
        for (l, lane) in lanes.iter_mut().enumerate() {
            let x = bx(g.b.build_extract_element(v, g.c32(l as i64), "x"))?;
            lane[j] = Some(if d == DType::Bool {
                bx(g.b.build_int_compare(
                    IntPredicate::NE,
                    x.into_int_value(),
                    g.i8().const_zero(),
                    "b",
                ))?
                .into()
            } else {
                x
            });
        }
    }
    let results = lanes
        .iter()
        .map(|vals| emit_program(g, spec.program, vals))
        .collect::<Result<Vec<_>>>()?;
    for (o, (&out, &d)) in outs.iter().zip(out_dtypes).enumerate() {
        let mut v = vec_type(d).const_zero().into_vector_value();
        for (l, r) in results.iter().enumerate() {
            let x = if d == DType::Bool {
                bx(g.b.build_int_z_extend(r[o].into_int_value(), g.i8(), ""))?.into()
            } else {
                r[o]
            };
            v = bx(g.b.build_insert_element(v, x, g.c32(l as i64), "y"))?;
        }
        let ty = g.mem_type(d);
        let at = bx(unsafe { g.b.build_in_bounds_gep(ty, out, &[base], "w") })?;
        let st = bx(g.b.build_store(at, v))?;
        st.set_alignment(align(d))
            .map_err(|e| Error::Unsupported(format!("ptx backend: {e}")))?;
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
    let fast = g.ctx.append_basic_block(func, "flat");
    let slow = g.ctx.append_basic_block(func, "strided");
    let join = g.ctx.append_basic_block(func, "offsets");
    let is_flat = bx(g.b.build_int_compare(IntPredicate::NE, flat, g.c64(0), ""))?;
    bx(g.b.build_conditional_branch(is_flat, fast, slow))?;
    g.b.position_at_end(fast);
    let a = flat_offs(g)?;
    bx(g.b.build_unconditional_branch(join))?;
    g.b.position_at_end(slow);
    let b = offsets(g, i, dims, strides)?;
    let slow_end = g.b.get_insert_block().unwrap_or(slow);
    bx(g.b.build_unconditional_branch(join))?;
    g.b.position_at_end(join);
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| {
            let phi = bx(g.b.build_phi(g.i64(), "off"))?;
            phi.add_incoming(&[(&x, fast), (&y, slow_end)]);
            Ok(phi.as_basic_value().into_int_value())
        })
        .collect()
}
