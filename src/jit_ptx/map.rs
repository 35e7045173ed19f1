//! Map kernels: each output element from the same-index elements of the (broadcast) inputs.
//!
//! Parameters (docs/gpu.md): `out_0 .. out_{m-1}, in_0 .. in_{k-1}` (global pointers), then
//! `i64`s: `n` (elements of the output), `flat`, `dims[r]` (the output's shape), and
//! `strides[k][r]` (each input's element strides, 0 along broadcast dims). Outputs are
//! contiguous, indexed by the linear index. When `flat` is nonzero the launcher promises that
//! every input is either contiguous over the whole output or a single broadcast element, and
//! input `j` is read at `i * strides[j][r - 1]`: no division per element.
//!
//! A grid-stride loop covers the `n` elements with 64-bit indices, so any grid works.

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, load, offsets, store};
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

    let tid = g.sreg("tid.x")?;
    let ntid = g.sreg("ntid.x")?;
    let ctaid = g.sreg("ctaid.x")?;
    let nctaid = g.sreg("nctaid.x")?;
    let start =
        bx(g.b.build_int_add(bx(g.b.build_int_mul(ctaid, ntid, ""))?, tid, "start"))?;
    let step = bx(g.b.build_int_mul(nctaid, ntid, "step"))?;
    let reads = p.input_dtypes();
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
    bx(g.b.build_return(None))?;
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
