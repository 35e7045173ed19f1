//! What map and reduce kernels share: declaring a kernel entry with its parameters (marked for
//! NVPTX through `nvvm.annotations`), element loads and stores (bools are bytes in memory),
//! offsets from a linear index through shapes and strides, and the grid-stride loop.

use super::gen::{bx, Gen};
use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::IntPredicate;

/// A kernel's parameters, in order: `pointers` global pointers (outputs first, then inputs),
/// then `scalars` `i64` values.
pub struct Params<'ctx> {
    pub func: FunctionValue<'ctx>,
    pub pointers: Vec<PointerValue<'ctx>>,
    pub scalars: Vec<IntValue<'ctx>>,
}

/// Declares the kernel `name` and positions the builder in its entry block. `readonly[k]`
/// marks pointer `k` as only read and not aliased by a written one (`noalias readonly`: lets
/// LLVM use the read-only cache, `ld.global.nc`); `noalias[k]` marks a written pointer that
/// aliases no other.
pub fn declare_kernel<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    readonly: &[bool],
    noalias: &[bool],
    n_scalars: usize,
) -> Result<Params<'ctx>> {
    let mut tys: Vec<BasicMetadataTypeEnum> = vec![g.global_ptr().into(); readonly.len()];
    tys.extend(std::iter::repeat_n(
        BasicMetadataTypeEnum::from(g.i64()),
        n_scalars,
    ));
    let func = g
        .module
        .add_function(name, g.ctx.void_type().fn_type(&tys, false), None);
    let attr = |n: &str| Attribute::get_named_enum_kind_id(n);
    for (k, (&ro, &na)) in readonly.iter().zip(noalias).enumerate() {
        let loc = AttributeLoc::Param(k as u32);
        if ro || na {
            func.add_attribute(loc, g.ctx.create_enum_attribute(attr("noalias"), 0));
        }
        if ro {
            func.add_attribute(loc, g.ctx.create_enum_attribute(attr("readonly"), 0));
        }
    }
    // The kernel mark NVPTX reads: `!nvvm.annotations = !{!{ptr @k, !"kernel", i32 1}}`.
    if !g.host {
        let note = g.ctx.metadata_node(&[
            func.as_global_value().as_pointer_value().into(),
            g.ctx.metadata_string("kernel").into(),
            g.c32(1).into(),
        ]);
        g.module
            .add_global_metadata("nvvm.annotations", &note)
            .map_err(|e| Error::Unsupported(format!("ptx backend: {e}")))?;
    }
    let entry = g.ctx.append_basic_block(func, "entry");
    g.b.position_at_end(entry);
    let params = func.get_params();
    let pointers = params[..readonly.len()]
        .iter()
        .map(|p| p.into_pointer_value())
        .collect();
    let scalars = params[readonly.len()..]
        .iter()
        .map(|p| p.into_int_value())
        .collect();
    Ok(Params {
        func,
        pointers,
        scalars,
    })
}

/// Element `idx` of the array of dtype `d` at `base`, in register form.
pub fn load<'ctx>(
    g: &Gen<'ctx>,
    base: PointerValue<'ctx>,
    d: DType,
    idx: IntValue<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    let ty = g.mem_type(d);
    // SAFETY (of the GEP): an in-bounds offset by the launch's contract (docs/gpu.md).
    let p = bx(unsafe { g.b.build_in_bounds_gep(ty, base, &[idx], "p") })?;
    let v = bx(g.b.build_load(ty, p, "x"))?;
    if d == DType::Bool {
        let byte = v.into_int_value();
        return Ok(bx(g
            .b
            .build_int_compare(IntPredicate::NE, byte, g.i8().const_zero(), "b"))?
        .into());
    }
    Ok(v)
}

/// Stores the register value `v` of dtype `d` as element `idx` of the array at `base`.
pub fn store<'ctx>(
    g: &Gen<'ctx>,
    base: PointerValue<'ctx>,
    d: DType,
    idx: IntValue<'ctx>,
    v: BasicValueEnum<'ctx>,
) -> Result<()> {
    let ty = g.mem_type(d);
    let p = bx(unsafe { g.b.build_in_bounds_gep(ty, base, &[idx], "q") })?;
    let v: BasicValueEnum = if d == DType::Bool {
        bx(g.b.build_int_z_extend(v.into_int_value(), g.i8(), ""))?.into()
    } else {
        v
    };
    bx(g.b.build_store(p, v))?;
    Ok(())
}

/// Element offsets of each operand for the linear index `i` of the index space `dims`
/// (row-major): `strides[j][d]` is operand `j`'s element stride along dim `d` (0 where it is
/// broadcast). Divisions are unsigned 64-bit; the innermost dim needs none.
pub fn offsets<'ctx>(
    g: &Gen<'ctx>,
    i: IntValue<'ctx>,
    dims: &[IntValue<'ctx>],
    strides: &[Vec<IntValue<'ctx>>],
) -> Result<Vec<IntValue<'ctx>>> {
    let mut offs: Vec<IntValue> = vec![g.c64(0); strides.len()];
    let mut rem = i;
    for d in (0..dims.len()).rev() {
        let c = if d == 0 {
            rem
        } else {
            let c = bx(g.b.build_int_unsigned_rem(rem, dims[d], "c"))?;
            rem = bx(g.b.build_int_unsigned_div(rem, dims[d], "rem"))?;
            c
        };
        for (off, s) in offs.iter_mut().zip(strides) {
            let t = bx(g.b.build_int_mul(c, s[d], ""))?;
            *off = bx(g.b.build_int_add(*off, t, "off"))?;
        }
    }
    Ok(offs)
}

/// A grid-stride loop's first index and step: `ctaid * ntid + tid`, `nctaid * ntid`.
pub fn grid_stride<'ctx>(g: &Gen<'ctx>) -> Result<(IntValue<'ctx>, IntValue<'ctx>)> {
    let tid = g.sreg("tid.x")?;
    let ntid = g.sreg("ntid.x")?;
    let ctaid = g.sreg("ctaid.x")?;
    let nctaid = g.sreg("nctaid.x")?;
    let start =
        bx(g.b.build_int_add(bx(g.b.build_int_mul(ctaid, ntid, ""))?, tid, "start"))?;
    let step = bx(g.b.build_int_mul(nctaid, ntid, "step"))?;
    Ok((start, step))
}

/// `for (i = start; i < n; i += step) body(i)`, built in place; the builder ends after it.
pub fn counted_loop<'ctx>(
    g: &Gen<'ctx>,
    func: FunctionValue<'ctx>,
    start: IntValue<'ctx>,
    step: IntValue<'ctx>,
    n: IntValue<'ctx>,
    name: &str,
    mut body: impl FnMut(IntValue<'ctx>) -> Result<()>,
) -> Result<()> {
    let pre =
        g.b.get_insert_block()
            .ok_or_else(|| Error::Unsupported("ptx backend: loop outside a function".into()))?;
    let head = g.ctx.append_basic_block(func, name);
    let exit = g.ctx.append_basic_block(func, &format!("{name}_exit"));
    let any = bx(g.b.build_int_compare(IntPredicate::ULT, start, n, ""))?;
    bx(g.b.build_conditional_branch(any, head, exit))?;
    g.b.position_at_end(head);
    let phi = bx(g.b.build_phi(g.i64(), "i"))?;
    let i = phi.as_basic_value().into_int_value();
    body(i)?;
    let latch = g.b.get_insert_block().unwrap_or(head);
    let next = bx(g.b.build_int_add(i, step, "next"))?;
    let more = bx(g.b.build_int_compare(IntPredicate::ULT, next, n, ""))?;
    bx(g.b.build_conditional_branch(more, head, exit))?;
    phi.add_incoming(&[(&start, pre), (&next, latch)]);
    g.b.position_at_end(exit);
    Ok(())
}

/// The window whose tap reads an element, along one axis: `num / stride` for `num =
/// coordinate + pad - tap offset`, and whether `num` is a multiple of `stride` below
/// `bound * stride` (a window that exists). The gradients of convolution and pooling share it.
pub fn window_of<'ctx>(
    g: &Gen<'ctx>,
    num: IntValue<'ctx>,
    stride: usize,
    bound: IntValue<'ctx>,
) -> Result<(IntValue<'ctx>, IntValue<'ctx>)> {
    let st = g.c64(stride as i64);
    let o = bx(g.b.build_int_signed_div(num, st, ""))?;
    let rem = bx(g.b.build_int_signed_rem(num, st, ""))?;
    let exact = bx(g.b.build_int_compare(IntPredicate::EQ, rem, g.c64(0), ""))?;
    let limit = bx(g.b.build_int_mul(bound, st, ""))?;
    // Unsigned: a negative numerator is out of range too.
    let inside = bx(g.b.build_int_compare(IntPredicate::ULT, num, limit, ""))?;
    Ok((o, bx(g.b.build_and(exact, inside, "window"))?))
}

/// Elements per group in the vector paths: 16 bytes of f32 or i32 (the widest load a thread
/// can issue), two 16-byte loads of f64 or i64. More bytes in flight per thread is what a
/// memory-bound kernel needs to reach the memory's bandwidth.
pub const LANES: u32 = 4;

/// The alignment a group of `LANES` elements of `d` claims: its size on the GPU (buffers are
/// allocated 256-byte aligned and group offsets are multiples of `LANES`, which the launch
/// checks), one element's on the host (the oracle's arrays are only element-aligned).
fn group_align(g: &Gen, d: DType) -> u32 {
    let elem = g.mem_size(d);
    if g.host {
        elem
    } else {
        (elem * LANES).min(16)
    }
}

fn group_type<'ctx>(g: &Gen<'ctx>, d: DType) -> inkwell::types::VectorType<'ctx> {
    match g.mem_type(d) {
        inkwell::types::BasicTypeEnum::FloatType(t) => t.vec_type(LANES),
        inkwell::types::BasicTypeEnum::IntType(t) => t.vec_type(LANES),
        _ => g.i8().vec_type(LANES),
    }
}

/// Elements `idx .. idx + LANES` of the array of dtype `d` at `base`, in register form: one
/// vector load, or, where `whole` is given and false at run time (the array broadcast along
/// the innermost dim), element `idx` for every lane.
pub fn load_lanes<'ctx>(
    g: &Gen<'ctx>,
    func: FunctionValue<'ctx>,
    base: PointerValue<'ctx>,
    d: DType,
    idx: IntValue<'ctx>,
    whole: Option<IntValue<'ctx>>,
) -> Result<Vec<BasicValueEnum<'ctx>>> {
    use inkwell::values::BasicValue;
    let ty = g.mem_type(d);
    let vty = group_type(g, d);
    let vector_load = || -> Result<inkwell::values::VectorValue<'ctx>> {
        // SAFETY (of the GEP): the group lies inside the array (the launch's strides).
        let at = bx(unsafe { g.b.build_in_bounds_gep(ty, base, &[idx], "v") })?;
        let v = bx(g.b.build_load(vty, at, "xv"))?;
        if let Some(inst) = v.as_instruction_value() {
            inst.set_alignment(group_align(g, d))
                .map_err(|e| Error::Unsupported(format!("ptx backend: {e}")))?;
        }
        Ok(v.into_vector_value())
    };
    let v = match whole {
        None => vector_load()?,
        Some(is_whole) => {
            let vec_bb = g.ctx.append_basic_block(func, "whole");
            let one_bb = g.ctx.append_basic_block(func, "bcast");
            let join = g.ctx.append_basic_block(func, "loaded");
            bx(g.b.build_conditional_branch(is_whole, vec_bb, one_bb))?;
            g.b.position_at_end(vec_bb);
            let a = vector_load()?;
            let a_end = g.b.get_insert_block().unwrap_or(vec_bb);
            bx(g.b.build_unconditional_branch(join))?;
            g.b.position_at_end(one_bb);
            let at = bx(unsafe { g.b.build_in_bounds_gep(ty, base, &[idx], "e") })?;
            let x = bx(g.b.build_load(ty, at, "x"))?;
            let mut b = vty.const_zero();
            for l in 0..LANES {
                b = bx(g.b.build_insert_element(b, x, g.c32(l as i64), ""))?;
            }
            let b_end = g.b.get_insert_block().unwrap_or(one_bb);
            bx(g.b.build_unconditional_branch(join))?;
            g.b.position_at_end(join);
            let phi = bx(g.b.build_phi(vty, "xv"))?;
            phi.add_incoming(&[(&a, a_end), (&b, b_end)]);
            phi.as_basic_value().into_vector_value()
        }
    };
    (0..LANES)
        .map(|l| {
            let x = bx(g.b.build_extract_element(v, g.c32(l as i64), "x"))?;
            Ok(if d == DType::Bool {
                bx(g.b.build_int_compare(
                    IntPredicate::NE,
                    x.into_int_value(),
                    g.i8().const_zero(),
                    "b",
                ))?
                .into()
            } else {
                x
            })
        })
        .collect()
}

/// Stores the register values `xs` (`LANES` of them, dtype `d`) as elements `idx ..` of the
/// array at `base`, with one vector store.
pub fn store_lanes<'ctx>(
    g: &Gen<'ctx>,
    base: PointerValue<'ctx>,
    d: DType,
    idx: IntValue<'ctx>,
    xs: &[BasicValueEnum<'ctx>],
) -> Result<()> {
    let mut v = group_type(g, d).const_zero();
    for (l, &x) in xs.iter().enumerate() {
        let x = if d == DType::Bool {
            bx(g.b.build_int_z_extend(x.into_int_value(), g.i8(), ""))?.into()
        } else {
            x
        };
        v = bx(g.b.build_insert_element(v, x, g.c32(l as i64), "y"))?;
    }
    let ty = g.mem_type(d);
    // SAFETY (of the GEP): the group lies inside the output.
    let at = bx(unsafe { g.b.build_in_bounds_gep(ty, base, &[idx], "w") })?;
    let st = bx(g.b.build_store(at, v))?;
    st.set_alignment(group_align(g, d))
        .map_err(|e| Error::Unsupported(format!("ptx backend: {e}")))?;
    Ok(())
}

/// Whether, at run time, groups of `LANES` consecutive elements along the innermost of `dims`
/// may be read as vectors: that dim comes in whole groups, and every read operand (`read[j]`)
/// either is whole along it (last stride 1) with its other strides multiples of `LANES` (so a
/// group is aligned to its size), or is broadcast along it (last stride 0). `None` for rank 0.
pub fn rows_in_groups<'ctx>(
    g: &Gen<'ctx>,
    dims: &[IntValue<'ctx>],
    strides: &[Vec<IntValue<'ctx>>],
    read: &[bool],
    inputs: &Inputs<'_, 'ctx>,
) -> Result<Option<IntValue<'ctx>>> {
    let Some(&inner) = dims.last() else {
        return Ok(None);
    };
    let lanes = g.c64(LANES as i64);
    let rem = bx(g.b.build_int_unsigned_rem(inner, lanes, ""))?;
    let mut ok =
        bx(g.b.build_int_compare(IntPredicate::EQ, rem, g.c64(0), "rows"))?;
    for (j, st) in strides.iter().enumerate() {
        let Some((&last, outer)) = st.split_last().filter(|_| read[j]) else {
            continue;
        };
        let mut aligned = bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(1), ""))?;
        for &o in outer {
            let m = bx(g.b.build_int_unsigned_rem(o, lanes, ""))?;
            let z = bx(g.b.build_int_compare(IntPredicate::EQ, m, g.c64(0), ""))?;
            aligned = bx(g.b.build_and(aligned, z, ""))?;
        }
        let bcast = bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(0), ""))?;
        let fits = bx(g.b.build_or(aligned, bcast, ""))?;
        ok = bx(g.b.build_and(ok, fits, "rows"))?;
    }
    let at = groups_aligned(g, inputs, read)?;
    Ok(Some(bx(g.b.build_and(ok, at, "rows"))?))
}

/// The kernel's input pointers and their dtypes.
pub struct Inputs<'a, 'ctx> {
    pub ptrs: &'a [PointerValue<'ctx>],
    pub dtypes: &'a [DType],
}

/// Whether every read input starts at an address aligned to a group of its elements: the
/// vector loads claim that alignment on the GPU, and a view (a slice) may start anywhere in
/// its buffer. Always true on the host, where loads claim only an element's alignment.
pub fn groups_aligned<'ctx>(
    g: &Gen<'ctx>,
    inputs: &Inputs<'_, 'ctx>,
    read: &[bool],
) -> Result<IntValue<'ctx>> {
    let mut ok = g.ctx.bool_type().const_all_ones();
    if g.host {
        return Ok(ok);
    }
    for ((&p, &d), _) in inputs
        .ptrs
        .iter()
        .zip(inputs.dtypes)
        .zip(read)
        .filter(|(_, &r)| r)
    {
        let mask = g.c64(i64::from(group_align(g, d)) - 1);
        let addr = bx(g.b.build_ptr_to_int(p, g.i64(), ""))?;
        let low = bx(g.b.build_and(addr, mask, ""))?;
        let zero = bx(g.b.build_int_compare(IntPredicate::EQ, low, g.c64(0), ""))?;
        ok = bx(g.b.build_and(ok, zero, "aligned"))?;
    }
    Ok(ok)
}
