//! Small helpers for writing Cranelift functions by hand: defining a function in a module, and
//! counted loops.

use crate::error::{Error, Result};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Signature, Type, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};

/// The Cranelift type of one element of a dtype (bools are a byte), as the JIT has it.
pub use crate::codegen::clif::scalar_ops::clif_type;

/// Loads and stores that trap on nothing and assume no alignment beyond the element's.
pub fn mem() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// A signature with the module's calling convention.
pub fn signature<M: Module>(module: &M, params: &[Type], returns: &[Type]) -> Signature {
    let mut sig = module.make_signature();
    sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    sig.returns
        .extend(returns.iter().map(|&t| AbiParam::new(t)));
    sig
}

/// Declares `name` with `linkage` and `sig`, and defines it with `body`, which gets the
/// module, the function's own id (for recursion), a builder positioned in the entry block and
/// the parameters, and must end the function with `return`. Returns the id and the CLIF text.
pub fn define<M: Module>(
    module: &mut M,
    name: &str,
    linkage: Linkage,
    sig: Signature,
    body: impl FnOnce(&mut M, FuncId, &mut FunctionBuilder, &[Value]) -> Result<()>,
) -> Result<(FuncId, String)> {
    let id = module
        .declare_function(name, linkage, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let params = b.block_params(entry).to_vec();
        body(module, id, &mut b, &params)?;
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    // The JIT's definer: the same CLIF text, and the machine code in the `asm` listing.
    let text = crate::codegen::clif::map::define_in(module, id, name, &mut ctx)?;
    Ok((id, text))
}

/// `for (i = start; i < end; i += step) body(i)`.
pub fn for_lt(
    b: &mut FunctionBuilder,
    start: Value,
    end: Value,
    step: i64,
    body: impl FnOnce(&mut FunctionBuilder, Value) -> Result<()>,
) -> Result<()> {
    looped(b, start, end, step, false, body).map(|_| ())
}

/// `for (i = start; i < end; i += step) body(i)` with a step known only at run time (positive).
pub fn for_lt_by(
    b: &mut FunctionBuilder,
    start: Value,
    end: Value,
    step: Value,
    body: impl FnOnce(&mut FunctionBuilder, Value) -> Result<()>,
) -> Result<()> {
    let header = b.create_block();
    let body_block = b.create_block();
    let exit = b.create_block();
    b.append_block_param(header, types::I64);
    b.ins().jump(header, &[start.into()]);
    b.switch_to_block(header);
    let i = b.block_params(header)[0];
    let more = b.ins().icmp(IntCC::SignedLessThan, i, end);
    b.ins().brif(more, body_block, &[], exit, &[]);
    b.switch_to_block(body_block);
    body(b, i)?;
    let next = b.ins().iadd(i, step);
    b.ins().jump(header, &[next.into()]);
    b.switch_to_block(exit);
    Ok(())
}

/// `for (i = start; i + step <= end; i += step) body(i)`; returns the first `i` not run (where
/// a remainder loop starts).
pub fn for_fits(
    b: &mut FunctionBuilder,
    start: Value,
    end: Value,
    step: i64,
    body: impl FnOnce(&mut FunctionBuilder, Value) -> Result<()>,
) -> Result<Value> {
    looped(b, start, end, step, true, body)
}

fn looped(
    b: &mut FunctionBuilder,
    start: Value,
    end: Value,
    step: i64,
    fits: bool,
    body: impl FnOnce(&mut FunctionBuilder, Value) -> Result<()>,
) -> Result<Value> {
    let header = b.create_block();
    let body_block = b.create_block();
    let exit = b.create_block();
    b.append_block_param(header, types::I64);
    b.append_block_param(exit, types::I64);
    b.ins().jump(header, &[start.into()]);
    b.switch_to_block(header);
    let i = b.block_params(header)[0];
    let more = if fits {
        let last = b.ins().iadd_imm_s(i, step);
        b.ins().icmp(IntCC::SignedLessThanOrEqual, last, end)
    } else {
        b.ins().icmp(IntCC::SignedLessThan, i, end)
    };
    b.ins().brif(more, body_block, &[], exit, &[i.into()]);
    b.switch_to_block(body_block);
    body(b, i)?;
    let next = b.ins().iadd_imm_s(i, step);
    b.ins().jump(header, &[next.into()]);
    b.switch_to_block(exit);
    Ok(b.block_params(exit)[0])
}

/// `base + i * stride` (just `base` when the stride is 0).
pub fn offset(b: &mut FunctionBuilder, base: Value, i: Value, stride: i64) -> Value {
    match stride {
        0 => base,
        1 => b.ins().iadd(base, i),
        s => {
            let o = b.ins().imul_imm_s(i, s);
            b.ins().iadd(base, o)
        }
    }
}
