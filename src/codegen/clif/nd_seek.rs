//! The cursor leaves' seek (`reduce_operands`): where each input is at flat position `pos` over
//! reduced dims that do not merge. Generated into every module that has cursor leaves (a
//! local function, defined once per module by the caller of the kernel generators), so the
//! JIT and object files run the same code and an object needs nothing from kiln.
//!
//! `kiln_nd_seek(desc, bases, pos, state)`: from the N-d descriptor `desc` (`[k, m, inner[0..m],
//! sizes[0..k], strides[0..k * m]]`) and the inputs' `bases`, writes `state = [left,
//! addrs[0..m]]`: how many positions are left in the innermost dim from `pos`, and each input's
//! address there. A position past the end gives addresses that are never read.

use super::map::{counted_loop, define_in};
use crate::error::{Error, Result};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};

/// The seek function's name in a module.
pub const SEEK: &str = "kiln_nd_seek";

fn signature<M: Module>(module: &M) -> Signature {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend([
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(types::I64),
        AbiParam::new(ptr),
    ]);
    sig
}

/// The seek function's id in `module` (declared; [`define_nd_seek_if_used`] gives it its body).
pub fn declare_nd_seek<M: Module>(module: &mut M) -> Result<FuncId> {
    let sig = signature(module);
    module
        .declare_function(SEEK, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{SEEK}: {e}")))
}

/// Defines the seek function in `module` when generated code there declared it (cursor
/// leaves); returns its CLIF text then. The caller runs this once per module, after its
/// kernels.
pub fn define_nd_seek_if_used<M: Module>(module: &mut M) -> Result<Option<String>> {
    match module.declarations().get_name(SEEK) {
        Some(_) => define_nd_seek(module).map(Some),
        None => Ok(None),
    }
}

fn define_nd_seek<M: Module>(module: &mut M) -> Result<String> {
    let id = declare_nd_seek(module)?;
    let mut ctx = module.make_context();
    ctx.func.signature = signature(module);
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        body(&mut b, &p)?;
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    define_in(module, id, SEEK, &mut ctx)
}

fn mem() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// `base + 8 * i`.
fn word(b: &mut FunctionBuilder, base: Value, i: Value) -> Value {
    let off = b.ins().imul_imm_s(i, 8);
    b.ins().iadd(base, off)
}

fn body(b: &mut FunctionBuilder, p: &[Value]) -> Result<()> {
    let (desc, bases, pos, state) = (p[0], p[1], p[2], p[3]);
    let k = b.ins().load(types::I64, mem(), desc, 0);
    let m = b.ins().load(types::I64, mem(), desc, 8);
    // sizes at desc + 8 * (2 + m), strides right after them (k words).
    let two_m = b.ins().iadd_imm_s(m, 2);
    let sizes = word(b, desc, two_m);
    let strides = word(b, sizes, k);
    let zero = b.ins().iconst(types::I64, 0);
    counted_loop(b, zero, m, 1, |b, j| {
        let from = word(b, bases, j);
        let base = b.ins().load(types::I64, mem(), from, 0);
        let to = word(b, state, j);
        b.ins().store(mem(), base, to, 8);
        Ok(())
    })?;
    let rest = b.declare_var(types::I64);
    b.def_var(rest, pos);
    counted_loop(b, zero, k, 1, |b, t| {
        // d = k - 1 - t: the innermost dim first.
        let km1 = b.ins().iadd_imm_s(k, -1);
        let d = b.ins().isub(km1, t);
        let at = word(b, sizes, d);
        let size = b.ins().load(types::I64, mem(), at, 0);
        let r = b.use_var(rest);
        let i = b.ins().srem(r, size);
        let q = b.ins().sdiv(r, size);
        b.def_var(rest, q);
        let innermost = b.ins().icmp_imm_s(IntCC::Equal, t, 0);
        let (yes, join) = (b.create_block(), b.create_block());
        b.ins().brif(innermost, yes, &[], join, &[]);
        b.switch_to_block(yes);
        let left = b.ins().isub(size, i);
        b.ins().store(mem(), left, state, 0);
        b.ins().jump(join, &[]);
        b.switch_to_block(join);
        let row = b.ins().imul(d, m);
        let row = word(b, strides, row);
        counted_loop(b, zero, m, 1, |b, j| {
            let at = word(b, row, j);
            let st = b.ins().load(types::I64, mem(), at, 0);
            let slot = word(b, state, j);
            let cur = b.ins().load(types::I64, mem(), slot, 8);
            let step = b.ins().imul(i, st);
            let next = b.ins().iadd(cur, step);
            b.ins().store(mem(), next, slot, 8);
            Ok(())
        })
    })?;
    b.ins().return_(&[]);
    Ok(())
}
