//! Cranelift code for map kernels: one loop over the elements of the output, evaluating a
//! scalar program per element.
//!
//! # Kernel ABI
//! `extern "C" fn(rows: i64, cols: i64, ptrs: *const *mut u8, outer: *const i64, inner: *const i64)`:
//! the output is seen as a `rows x cols` matrix (its last dim is `cols`); `ptrs` holds one base
//! pointer per input, then one per output; element `(i, k)` of operand `j` is at
//! `ptrs[j] + i * outer[j] + k * inner[j]` (byte strides; 0 where the operand is broadcast).
//! Bools are one byte, 0 or 1.

use super::helpers::symbols;
use super::host_math;
use super::operand_table::OperandTable;
use super::scalar_ops::{clif_type, lane_type, uses_math, vector_lanes, Lanes, OpGen};
use crate::error::{Error, Result};
use crate::ir::scalar::{ScalarOp, ScalarProgram};
use crate::ir::DType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, Block, BlockArg, Endianness, InstBuilder, MemFlagsData, StackSlotData,
    StackSlotKind, Type, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};

/// The signature of a compiled map kernel.
pub type KernelFn = unsafe extern "C" fn(i64, i64, *const *mut u8, *const i64, *const i64);

/// A JIT module with every helper registered, ready for kernels.
pub fn new_module() -> Result<JITModule> {
    let mut flags = settings::builder();
    // Cranelift's IR verifier runs in debug builds (the tests) and not in release builds, where
    // it was about a twentieth of compiling a training step.
    let verify = if cfg!(debug_assertions) {
        "true"
    } else {
        "false"
    };
    for (k, v) in [
        ("opt_level", "speed"),
        ("is_pic", "false"),
        ("use_colocated_libcalls", "false"),
        ("enable_verifier", verify),
    ] {
        flags
            .set(k, v)
            .map_err(|e| Error::Unsupported(format!("cranelift setting {k}: {e}")))?;
    }
    let isa = cranelift_native::builder()
        .map_err(|e| Error::Unsupported(format!("cranelift does not support this host: {e}")))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| Error::Unsupported(format!("cranelift: {e}")))?;
    let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    for (name, ptr) in symbols() {
        jb.symbol(name, ptr);
    }
    Ok(JITModule::new(jb))
}

/// How many vectors the main vector loop handles per iteration. Cranelift does not unroll;
/// independent chains hide the latency of the math (each vector's chain is a few dozen
/// dependent operations); and Cranelift loads
/// the math's vector constants again in every block that uses them, so an iteration of four
/// vectors loads each once for four. callgrind, the exp map of a 1024x4096 softmax: 45.2M
/// instructions with two vectors, 38.6M with four, 34.8M with eight; compiling W5 costs 5%
/// more instructions with four than with two, 13% with eight.
const UNROLL: i64 = 4;

/// Generates the kernel for `program` with `n_in` inputs into `module` and returns its id and
/// its CLIF text (for the `clif` dump).
///
/// A program that can run on 128-bit vectors gets a vector loop over each row (four vectors an
/// iteration, then one, then a scalar tail); it is taken when every input is contiguous along
/// the row or constant along it (inner stride 0: loaded once per row and splat) and every
/// output is contiguous. Otherwise, and for the tail, a scalar loop runs the same operation
/// sequence, so a value does not depend on which loop computed it.
///
/// With `host_math` (and where `host_math::enabled()`), the vector loop hands its math to the
/// buffer functions as the JIT's kernels do: objects that link kiln's runtime library, which
/// exports them.
pub fn define_map_kernel<M: Module>(
    module: &mut M,
    name: &str,
    program: &ScalarProgram,
    n_in: usize,
    host_math: bool,
) -> Result<(FuncId, String)> {
    let bcast = vec![Bcast::Unknown; n_in];
    define_map_kernel_staged(
        module,
        name,
        program,
        &bcast,
        host_math && host_math::enabled(),
    )
}

/// `define_map_kernel`, knowing from the types which inputs are broadcast along the row
/// (`bcast[j]`, one per input): the vector loop then loads those once per row and the others
/// with plain vector loads, where an unknown one costs a select per vector.
///
/// For the JIT: where the host has them, the vector loop hands its math to the buffer
/// functions (`host_math`), which live in this process.
pub fn define_map_kernel_with<M: Module>(
    module: &mut M,
    name: &str,
    program: &ScalarProgram,
    bcast: &[Bcast],
) -> Result<(FuncId, String)> {
    define_map_kernel_staged(module, name, program, bcast, host_math::enabled())
}

fn define_map_kernel_staged<M: Module>(
    module: &mut M,
    name: &str,
    program: &ScalarProgram,
    bcast: &[Bcast],
    host: bool,
) -> Result<(FuncId, String)> {
    if let Some(lanes) = vector_lanes(program, true) {
        let staged = host
            .then(|| host_math::split(program, bcast.len()))
            .flatten();
        // A construct Cranelift cannot lower for vectors (some 64-bit lane operations on x86)
        // falls back to scalar code rather than failing.
        if let Ok(r) = define(module, name, program, bcast, Some(lanes), staged.as_ref()) {
            return Ok(r);
        }
    }
    define(module, name, program, bcast, None, None)
}

/// Whether an input is broadcast along the vector axis (stride 0), as the plan's access says
/// (`lower::access`); `Unknown` where the caller has no plan to say it (AOT's maps).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Bcast {
    /// Not known before the call: the kernel checks.
    Unknown,
    /// Never: it has the output's extent there (a known size above 1).
    Never,
    /// Always: its extent there is 1 (or it has no such axis).
    Always,
}

fn define<M: Module>(
    module: &mut M,
    name: &str,
    program: &ScalarProgram,
    bcast: &[Bcast],
    lanes: Option<Lanes>,
    staged: Option<&host_math::Staged>,
) -> Result<(FuncId, String)> {
    let n_in = bcast.len();
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend([
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
    ]);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let n_out = program.outputs.len();
    let in_dtypes: Vec<DType> = {
        let d = program.input_dtypes();
        (0..n_in)
            .map(|j| d.get(j).copied().flatten().unwrap_or(DType::F32))
            .collect()
    };
    let out_dtypes: Vec<DType> = program
        .outputs
        .iter()
        .map(|&o| program.insts[o].dtype)
        .collect();
    let esize = |j: usize| -> i64 {
        if j < n_in {
            in_dtypes[j].size() as i64
        } else {
            out_dtypes[j - n_in].size() as i64
        }
    };
    let mut table = OperandTable::new(module, uses_math(program));
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        let row_header = b.create_block();
        let row_body = b.create_block();
        let scalar_setup = b.create_block();
        let scalar_header = b.create_block();
        let scalar_body = b.create_block();
        let row_next = b.create_block();
        let exit = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.append_block_param(row_header, types::I64);
        b.append_block_param(scalar_setup, types::I64);
        b.append_block_param(scalar_header, types::I64);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let (rows, cols, ptrs, outer, inner) = (p[0], p[1], p[2], p[3], p[4]);
        let flags = MemFlagsData::trusted();
        let n_ops = n_in + n_out;
        // Each operand's address of element (i, 0), and its step along the row. They are
        // loaded again for each row, and again before the scalar loop, rather than loaded
        // once and held across the loops: held, they (two or three per operand) outnumbered
        // the registers, and Cranelift's allocator put the reloads inside the vector loop.
        let operands = |b: &mut FunctionBuilder, i: Value| {
            let load = |b: &mut FunctionBuilder, ty: Type, at: Value, j: usize| {
                b.ins()
                    .load(ty, flags, at, (j * ty.bytes() as usize) as i32)
            };
            let mut row_bases = Vec::with_capacity(n_ops);
            let mut inner_steps = Vec::with_capacity(n_ops);
            for j in 0..n_ops {
                let base = load(b, ptr, ptrs, j);
                let step = load(b, types::I64, outer, j);
                let off = b.ins().imul(i, step);
                row_bases.push(b.ins().iadd(base, off));
                inner_steps.push(load(b, types::I64, inner, j));
            }
            (row_bases, inner_steps)
        };
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(row_header, &[zero.into()]);

        b.switch_to_block(row_header);
        let i = b.block_params(row_header)[0];
        let more_rows = b.ins().icmp(IntCC::SignedLessThan, i, rows);
        b.ins().brif(more_rows, row_body, &[], exit, &[]);

        b.switch_to_block(row_body);
        let zero_col = b.ins().iconst(types::I64, 0);
        match lanes {
            Some(l) => {
                let (row_bases, inner_steps) = operands(&mut b, i);
                let v = VectorEntry::new(&mut b, l, bcast, n_out, &inner_steps, &esize);
                let k = match staged {
                    Some(st) => v.emit_row_staged(
                        &mut b, module, program, st, n_in, &row_bases, cols, &esize,
                    )?,
                    None => v.emit_row(
                        &mut b, module, program, n_in, &row_bases, cols, &esize, &mut table,
                    )?,
                };
                b.ins().jump(scalar_setup, &[k.into()]);
            }
            None => {
                b.ins().jump(scalar_setup, &[zero_col.into()]);
            }
        }

        b.switch_to_block(scalar_setup);
        let k0 = b.block_params(scalar_setup)[0];
        let (row_bases, inner_steps) = operands(&mut b, i);
        b.ins().jump(scalar_header, &[k0.into()]);

        b.switch_to_block(scalar_header);
        let k = b.block_params(scalar_header)[0];
        let more = b.ins().icmp(IntCC::SignedLessThan, k, cols);
        b.ins().brif(more, scalar_body, &[], row_next, &[]);

        b.switch_to_block(row_next);
        let next_row = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(row_header, &[next_row.into()]);

        b.switch_to_block(scalar_body);
        let addrs = offsets(&mut b, &row_bases, k, &inner_steps);
        let mut g = OpGen {
            b: &mut b,
            module,
            lanes: None,
            table: None,
        };
        let outs = body(&mut g, program, |g, j, d| {
            let ty = clif_type(d);
            g.b.ins().load(ty, flags, addrs[j], 0)
        })?;
        for (o, v) in outs.into_iter().enumerate() {
            b.ins().store(flags, v, addrs[n_in + o], 0);
        }
        let next = b.ins().iadd_imm_s(k, 1);
        b.ins().jump(scalar_header, &[next.into()]);

        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    table.define(module)?;
    let text = define_in(module, id, name, &mut ctx)?;
    Ok((id, text))
}

thread_local! {
    /// Machine-code listings of the functions defined on this thread while a
    /// [`with_listing`] asks for them (the `asm` dump).
    static LISTING: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`, collecting a listing of the machine code of every kernel it defines when `on`
/// (Cranelift's own listing of the instructions it emitted, register-allocated). Off, nothing
/// is collected and compiling costs nothing more.
pub(crate) fn with_listing<T>(on: bool, f: impl FnOnce() -> T) -> (T, String) {
    if !on {
        return (f(), String::new());
    }
    let outer = LISTING.with(|l| l.borrow_mut().replace(String::new()));
    let out = f();
    let text = LISTING.with(|l| std::mem::replace(&mut *l.borrow_mut(), outer));
    (out, text.unwrap_or_default())
}

thread_local! {
    /// Whether `define_in` formats the CLIF it defines (see `with_clif_text`).
    static CLIF_TEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Runs `f` with `define_in` giving the CLIF text of each function (`on`) or an empty string:
/// formatting every function costs a few percent of a compile, and only the `clif` dump reads
/// it.
pub(crate) fn with_clif_text<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let old = CLIF_TEXT.replace(on);
    let r = f();
    CLIF_TEXT.set(old);
    r
}

/// Defines the function built in `ctx` as `id` and clears `ctx`; returns its CLIF text (the
/// `clif` dump) and adds its machine code to the listing when one is being collected.
pub(crate) fn define_in<M: Module>(
    module: &mut M,
    id: FuncId,
    name: &str,
    ctx: &mut cranelift_codegen::Context,
) -> Result<String> {
    let text = match CLIF_TEXT.get() {
        true => {
            ctx.func.name = cranelift_codegen::ir::UserFuncName::user(0, id.as_u32());
            with_names(&ctx.func.display().to_string(), module)
        }
        false => String::new(),
    };
    let listing = LISTING.with(|l| l.borrow().is_some());
    ctx.set_disasm(listing);
    let defined = module
        .define_function(id, ctx)
        .map_err(|e| Error::Unsupported(format!("{name}: cranelift: {e:?}")));
    if listing {
        let code = ctx.compiled_code().and_then(|c| c.vcode.clone());
        LISTING.with(|l| {
            if let Some(out) = l.borrow_mut().as_mut() {
                out.push_str(&format!("function {name}:\n{}\n", code.unwrap_or_default()));
            }
        });
    }
    module.clear_context(ctx);
    defined?;
    Ok(text)
}

/// `text` with each function id (`u0:N`, numbered per module) replaced by `%` and the
/// function's name, so that a dump reads the same however the kernels were spread over
/// modules.
fn with_names<M: Module>(text: &str, module: &M) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("u0:") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let name = after[..digits].parse::<u32>().ok().and_then(|n| {
            let decls = module.declarations();
            let id = FuncId::from_u32(n);
            decls
                .get_functions()
                .any(|(f, _)| f == id)
                .then(|| decls.get_function_decl(id).name.clone())
                .flatten()
        });
        match name {
            Some(name) => {
                out.push('%');
                out.push_str(&name);
            }
            None => out.push_str(&rest[at..at + 3 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// Ends a loop header: on to `body` where `more` holds, else to the loop `next` with `k`,
/// through a block of its own. Entered straight from this header, the next loop had the
/// header as the block Cranelift hoists its invariants to, so the math's vector constants
/// (and the spills they caused) were loaded there on every iteration of this loop.
pub(super) fn loop_branch(
    b: &mut FunctionBuilder,
    more: Value,
    body: Block,
    next: Block,
    k: Value,
) {
    let exit = b.create_block();
    b.append_block_param(exit, types::I64);
    b.ins().brif(more, body, &[], exit, &[k.into()]);
    b.switch_to_block(exit);
    let k = b.block_params(exit)[0];
    b.ins().jump(next, &[k.into()]);
}

/// `bases[j] + index * steps[j]` for every operand `j`: the addresses of one row or element.
fn offsets(b: &mut FunctionBuilder, bases: &[Value], index: Value, steps: &[Value]) -> Vec<Value> {
    bases
        .iter()
        .zip(steps)
        .map(|(&base, &step)| {
            let off = b.ins().imul(index, step);
            b.ins().iadd(base, off)
        })
        .collect()
}

/// Evaluates `program` once (on scalars or on vectors, as `g` says), loading input `j` of
/// dtype `d` with `load(g, j, d)`; returns the outputs' values.
pub(crate) fn body<M: Module>(
    g: &mut OpGen<'_, '_, M>,
    program: &ScalarProgram,
    mut load: impl FnMut(&mut OpGen<'_, '_, M>, usize, DType) -> Value,
) -> Result<Vec<Value>> {
    let mut regs: Vec<Value> = Vec::with_capacity(program.insts.len());
    for (r, inst) in program.insts.iter().enumerate() {
        let v = match inst.op {
            ScalarOp::Input(j) => load(g, j, inst.dtype),
            _ => g.inst(program, r, &regs)?,
        };
        regs.push(v);
    }
    Ok(program.outputs.iter().map(|&o| regs[o]).collect())
}

/// How a staged map passes a stage's argument to its buffer function (`arg_of`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArgOf {
    /// Input `a` itself, less input `sub`'s value (constant along the row) where there is one.
    Direct(usize, Option<usize>),
    /// Input `x` plus input `bias`, both contiguous along the row.
    Biased(usize, usize),
    /// Computed into the stage's buffer by a loop first.
    Loop,
}

/// What the vector loop computes once per call: whether it may run, and for each input
/// whether it is broadcast along the row.
struct VectorEntry {
    lanes: Lanes,
    /// Every input contiguous or broadcast along the row, every output contiguous.
    ok: Value,
    /// Per input: a lane mask, all ones where the input is broadcast along the row.
    bcast_mask: Vec<Value>,
    /// Per input: the byte step per element in the vector loop (0 when broadcast).
    vstep: Vec<Value>,
    /// Per input: 1 when broadcast (as i8).
    is_bcast: Vec<Value>,
    /// A small stack buffer that broadcast inputs' vector loads read instead of running past
    /// their row.
    dummy: Value,
    /// Per input: what the types say about its broadcasting along the row.
    known: Vec<Bcast>,
}

impl VectorEntry {
    fn new(
        b: &mut FunctionBuilder,
        lanes: Lanes,
        known: &[Bcast],
        n_out: usize,
        inner: &[Value],
        esize: &dyn Fn(usize) -> i64,
    ) -> Self {
        let n_in = known.len();
        let mut ok = b.ins().iconst(types::I8, 1);
        let (mut bcast_mask, mut vstep, mut is_bcast) = (vec![], vec![], vec![]);
        let mask_ty = match lanes {
            Lanes::X32 => types::I32X4,
            Lanes::X64 => types::I64X2,
        };
        for (j, &step_j) in inner.iter().enumerate().take(n_in + n_out) {
            let contiguous = b.ins().icmp_imm_s(IntCC::Equal, step_j, esize(j));
            if j >= n_in {
                ok = b.ins().band(ok, contiguous);
                continue;
            }
            let bc = b.ins().icmp_imm_s(IntCC::Equal, step_j, 0);
            // The vector code reads an input as its type class says (a splat where it is
            // broadcast along the row, plain vector loads where it never is), so the strides
            // of the call must agree with that class, not merely allow a vector loop: a
            // layout that surprises the types runs the scalar loop, never wrong code.
            let fits = match known[j] {
                Bcast::Always => bc,
                Bcast::Never => contiguous,
                Bcast::Unknown => b.ins().bor(contiguous, bc),
            };
            ok = b.ins().band(ok, fits);
            let wide = b.ins().uextend(mask_ty.lane_type(), bc);
            let all = b.ins().ineg(wide);
            bcast_mask.push(b.ins().splat(mask_ty, all));
            let step = b.ins().iconst(types::I64, esize(j));
            let zero = b.ins().iconst(types::I64, 0);
            vstep.push(b.ins().select(bc, zero, step));
            is_bcast.push(bc);
        }
        let slot =
            b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 64, 4));
        let dummy = b.ins().stack_addr(types::I64, slot, 0);
        VectorEntry {
            lanes,
            ok,
            bcast_mask,
            vstep,
            is_bcast,
            dummy,
            known: known.to_vec(),
        }
    }

    /// Emits the vector loops over one row (the current block ends in them); returns, in the
    /// block where they finish, the first column left for the scalar loop.
    #[allow(clippy::too_many_arguments)]
    fn emit_row<M: Module>(
        &self,
        b: &mut FunctionBuilder,
        module: &mut M,
        program: &ScalarProgram,
        n_in: usize,
        row_bases: &[Value],
        cols: Value,
        esize: &dyn Fn(usize) -> i64,
        table: &mut OperandTable,
    ) -> Result<Value> {
        let l = self.lanes.count();
        let setup = b.create_block();
        let head2 = b.create_block();
        let body2 = b.create_block();
        let head1 = b.create_block();
        let body1 = b.create_block();
        let done = b.create_block();
        b.append_block_param(head2, types::I64);
        b.append_block_param(head1, types::I64);
        b.append_block_param(done, types::I64);
        // The vector loop runs when the strides allow it and the row holds a whole vector
        // (so that reading element 0 of a broadcast input is in bounds).
        let wide = b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, cols, l);
        let go = b.ins().band(self.ok, wide);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().brif(go, setup, &[], done, &[zero.into()]);

        b.switch_to_block(setup);
        let (splats, vptrs) = self.row_inputs(b, program, n_in, row_bases);
        // The main loop carries a pointer for each operand that steps by its element size (an
        // input the types say is not broadcast, and every output), moved on by the bytes of
        // the vectors an iteration: the loads and stores then address `pointer + constant`,
        // and nothing row-invariant is recomputed inside the loop (Cranelift left the row's
        // base address arithmetic in the loop header, and with it a handful of spills).
        let stepped: Vec<usize> = (0..row_bases.len())
            .filter(|&j| j >= n_in || self.known[j] == Bcast::Never)
            .collect();
        for _ in &stepped {
            b.append_block_param(head2, types::I64);
        }
        let args: Vec<BlockArg> = std::iter::once(zero)
            .chain(stepped.iter().map(|&j| row_bases[j]))
            .map(BlockArg::from)
            .collect();
        b.ins().jump(head2, &args);

        // The main loop: UNROLL vectors an iteration.
        b.switch_to_block(head2);
        let k = b.block_params(head2)[0];
        let ptrs = b.block_params(head2)[1..].to_vec();
        let end = b.ins().iadd_imm_s(k, l * UNROLL);
        let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, end, cols);
        loop_branch(b, fits, body2, head1, k);
        b.switch_to_block(body2);
        table.enter(b, module)?;
        let mut at: Vec<Option<Value>> = vec![None; row_bases.len()];
        for (&j, &p) in stepped.iter().zip(&ptrs) {
            at[j] = Some(p);
        }
        for u in 0..UNROLL {
            let ku = b.ins().iadd_imm_s(k, u * l);
            let here = Here { k: ku, at: &at, u };
            self.step(
                b, module, program, n_in, row_bases, &splats, &vptrs, &here, esize, table,
            )?;
        }
        table.leave();
        let mut args: Vec<BlockArg> = vec![end.into()];
        for (&j, &p) in stepped.iter().zip(&ptrs) {
            args.push(b.ins().iadd_imm_s(p, UNROLL * l * esize(j)).into());
        }
        b.ins().jump(head2, &args);

        // One vector at a time for what is left.
        b.switch_to_block(head1);
        let k = b.block_params(head1)[0];
        let end = b.ins().iadd_imm_s(k, l);
        let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, end, cols);
        b.ins().brif(fits, body1, &[], done, &[k.into()]);
        b.switch_to_block(body1);
        table.enter(b, module)?;
        let none = vec![None; row_bases.len()];
        let here = Here { k, at: &none, u: 0 };
        self.step(
            b, module, program, n_in, row_bases, &splats, &vptrs, &here, esize, table,
        )?;
        table.leave();
        b.ins().jump(head1, &[end.into()]);

        b.switch_to_block(done);
        Ok(b.block_params(done)[0])
    }

    /// Per input: its element 0 of the row splat into a vector (what a broadcast input
    /// reads), and the address its vector loads start from (a stack buffer when broadcast).
    fn row_inputs(
        &self,
        b: &mut FunctionBuilder,
        program: &ScalarProgram,
        n_in: usize,
        row_bases: &[Value],
    ) -> (Vec<Value>, Vec<Value>) {
        let in_dtypes = program.input_dtypes();
        let mut splats = Vec::new();
        let mut vptrs = Vec::new();
        for (j, &row_base) in row_bases.iter().enumerate().take(n_in) {
            let d = in_dtypes.get(j).copied().flatten().unwrap_or(DType::F32);
            let vty = lane_type(Some(self.lanes), d);
            let flags = MemFlagsData::trusted();
            let s = if d.is_half() {
                b.ins().uload16(vty.lane_type(), flags, row_base, 0)
            } else {
                b.ins().load(vty.lane_type(), flags, row_base, 0)
            };
            splats.push(b.ins().splat(vty, s));
            vptrs.push(b.ins().select(self.is_bcast[j], self.dummy, row_base));
        }
        (splats, vptrs)
    }

    /// `emit_row` for a program whose math runs staged (`host_math`): the row's whole
    /// vectors in chunks of up to `host_math::BLOCK` columns; per chunk, each stage's
    /// argument into its buffer and the buffer function over it, then the last stage into
    /// the outputs. Returns the first column left for the scalar loop (which computes the
    /// same bits inline).
    ///
    /// Where the program's one output is its last math op's result (`tanh(x W + b)`), that
    /// op's buffer function writes the output row itself and there is no last stage; a
    /// single such op whose argument needs no stage loop (`ArgOf::Direct`, `ArgOf::Biased`)
    /// uses no buffer at all and takes the row in one call.
    #[allow(clippy::too_many_arguments)]
    fn emit_row_staged<M: Module>(
        &self,
        b: &mut FunctionBuilder,
        module: &mut M,
        program: &ScalarProgram,
        staged: &host_math::Staged,
        n_in: usize,
        row_bases: &[Value],
        cols: Value,
        esize: &dyn Fn(usize) -> i64,
    ) -> Result<Value> {
        let l = self.lanes.count();
        let ptr = module.target_config().pointer_type();
        let (setup, head, chunk, done) = (
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
        );
        b.append_block_param(head, types::I64);
        b.append_block_param(done, types::I64);
        let wide = b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, cols, l);
        let go = b.ins().band(self.ok, wide);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().brif(go, setup, &[], done, &[zero.into()]);

        b.switch_to_block(setup);
        let (splats, vptrs) = self.row_inputs(b, program, n_in, row_bases);
        let vend = b.ins().band_imm_s(cols, -l);
        let to_output = staged.last_is_math && program.outputs.len() == 1;
        let mut stages = Vec::new();
        for (k, stage) in staged.stages.iter().enumerate() {
            let arg = self.arg_of(stage, n_in);
            let entry = match arg {
                ArgOf::Biased(..) => host_math::Entry::Biased,
                ArgOf::Direct(_, sub) => host_math::Entry::Map {
                    shifted: sub.is_some(),
                },
                ArgOf::Loop => host_math::Entry::Map { shifted: false },
            };
            let callee = host_math::import(module, b, stage, entry)?;
            // A buffer for the argument's stage loop, or for the result where no output takes
            // it.
            let into_output = to_output && k + 1 == staged.stages.len();
            let slot = (arg == ArgOf::Loop || !into_output)
                .then(|| host_math::buffer_slot(b, stage.dtype));
            // The shift when there is none (the unshifted function ignores it).
            let zero = zero_of(b, clif_type(stage.dtype));
            stages.push((callee, slot, arg, zero));
        }
        let one_call = to_output && stages.len() == 1 && stages[0].1.is_none();
        b.ins().jump(head, &[zero.into()]);

        b.switch_to_block(head);
        let c = b.block_params(head)[0];
        let more = b.ins().icmp(IntCC::SignedLessThan, c, vend);
        b.ins().brif(more, chunk, &[], done, &[vend.into()]);

        b.switch_to_block(chunk);
        let left = b.ins().isub(vend, c);
        let len = if one_call {
            left
        } else {
            let block = b.ins().iconst(types::I64, host_math::BLOCK);
            let short = b.ins().icmp(IntCC::SignedLessThan, left, block);
            b.ins().select(short, left, block)
        };
        let cend = b.ins().iadd(c, len);
        // Per stage: the chunk's first column in bytes, and its buffer where it has one.
        // Every stage but an output-writing last one has a buffer, so buffer `j` is stage
        // `j`'s: its address less the skip, as column `k` of a buffer is at
        // `shifted + k * size` and the operands' are at `row_base + k * size`.
        let skips: Vec<Value> = (staged.stages.iter())
            .map(|st| b.ins().imul_imm_s(c, st.dtype.size() as i64))
            .collect();
        let bufs: Vec<Option<Value>> = (stages.iter())
            .map(|&(_, slot, _, _)| slot.map(|slot| b.ins().stack_addr(ptr, slot, 0)))
            .collect();
        let buffers: Vec<(Value, DType)> = (staged.stages.iter().zip(&bufs).zip(&skips))
            .filter_map(|((st, buf), &skip)| Some((b.ins().isub((*buf)?, skip), st.dtype)))
            .collect();
        let ops = RowOperands {
            n_in,
            row_bases,
            splats: &splats,
            vptrs: &vptrs,
            buffers: &buffers,
        };
        let none = vec![None; row_bases.len()];
        for (k, (stage, &(callee, _, arg, zero))) in staged.stages.iter().zip(&stages).enumerate() {
            let (skip, buf) = (skips[k], bufs[k]);
            let into_output = to_output && k + 1 == staged.stages.len();
            let dst = match (into_output, buf) {
                (false, Some(buf)) => buf,
                _ => b.ins().iadd(row_bases[n_in], skip),
            };
            let at = |b: &mut FunctionBuilder, j: usize| b.ins().iadd(row_bases[j], skip);
            match arg {
                ArgOf::Direct(a, sub) => {
                    let shift = match sub {
                        Some(s) => {
                            let fty = clif_type(stage.dtype);
                            b.ins().load(fty, MemFlagsData::trusted(), row_bases[s], 0)
                        }
                        None => zero,
                    };
                    let src = at(b, a);
                    b.ins().call(callee, &[src, dst, len, shift]);
                }
                ArgOf::Biased(x, bias) => {
                    let (src, bias) = (at(b, x), at(b, bias));
                    b.ins().call(callee, &[src, bias, dst, len]);
                }
                ArgOf::Loop => {
                    let buf = bufs[k].expect("a stage loop has a buffer");
                    let shifted = buffers[k].0;
                    let size = stage.dtype.size() as i64;
                    self.vector_loop(b, c, cend, |b, k| {
                        let here = Here { k, at: &none, u: 0 };
                        let v = self.eval(b, module, &stage.program, &ops, &here, esize, None)?;
                        let off = b.ins().imul_imm_s(k, size);
                        let at = b.ins().iadd(shifted, off);
                        b.ins().store(MemFlagsData::trusted(), v[0], at, 0);
                        Ok(())
                    })?;
                    b.ins().call(callee, &[buf, dst, len, zero]);
                }
            }
        }
        if !to_output {
            self.vector_loop(b, c, cend, |b, k| {
                let here = Here { k, at: &none, u: 0 };
                let outs = self.eval(b, module, &staged.last, &ops, &here, esize, None)?;
                self.store_outputs(b, row_bases, &here, esize, n_in, outs);
                Ok(())
            })?;
        }
        b.ins().jump(head, &[cend.into()]);

        b.switch_to_block(done);
        Ok(b.block_params(done)[0])
    }

    /// How a stage's argument reaches its buffer function: an input contiguous along the row
    /// (less one constant along it, a softmax's `x - max`), or two such inputs added (a
    /// bias), go to it as they are; anything else is computed into a buffer first.
    fn arg_of(&self, stage: &host_math::Stage, n_in: usize) -> ArgOf {
        let along = |j: usize| self.known[j] == Bcast::Never;
        if let Some((a, sub)) = stage.direct(n_in) {
            if along(a) && sub.is_none_or(|s| self.known[s] == Bcast::Always) {
                return ArgOf::Direct(a, sub);
            }
        }
        match stage.biased(n_in) {
            Some((x, bias)) if along(x) && along(bias) => ArgOf::Biased(x, bias),
            _ => ArgOf::Loop,
        }
    }

    /// A loop over the columns `from..to` a vector at a time (`to - from` a multiple of the
    /// lanes), `each` emitting one vector's code at column `k`; the builder ends after it.
    fn vector_loop(
        &self,
        b: &mut FunctionBuilder,
        from: Value,
        to: Value,
        each: impl FnMut(&mut FunctionBuilder, Value) -> Result<()>,
    ) -> Result<()> {
        counted_loop(b, from, to, self.lanes.count(), each)
    }

    /// One vector of the program, at the column `here` says, stored to the outputs.
    #[allow(clippy::too_many_arguments)]
    fn step<M: Module>(
        &self,
        b: &mut FunctionBuilder,
        module: &mut M,
        program: &ScalarProgram,
        n_in: usize,
        row_bases: &[Value],
        splats: &[Value],
        vptrs: &[Value],
        here: &Here,
        esize: &dyn Fn(usize) -> i64,
        table: &mut OperandTable,
    ) -> Result<()> {
        let ops = RowOperands {
            n_in,
            row_bases,
            splats,
            vptrs,
            buffers: &[],
        };
        let outs = self.eval(b, module, program, &ops, here, esize, Some(table))?;
        self.store_outputs(b, row_bases, here, esize, n_in, outs);
        Ok(())
    }

    /// Stores a vector step's outputs (operands `n_in..`) at `here`.
    fn store_outputs(
        &self,
        b: &mut FunctionBuilder,
        row_bases: &[Value],
        here: &Here,
        esize: &dyn Fn(usize) -> i64,
        n_in: usize,
        outs: Vec<Value>,
    ) {
        for (o, v) in outs.into_iter().enumerate() {
            let (addr, off) = self.address(b, row_bases, here, esize, n_in + o);
            let flags = MemFlagsData::new().with_notrap();
            // Two-byte elements are halves (`vector_lanes`): narrowed as they are stored.
            if esize(n_in + o) == 2 {
                super::half::store_x4(b, flags, v, addr, off);
            } else {
                b.ins().store(flags, v, addr, off);
            }
        }
    }

    /// Operand `j`'s vector at `here`: at the loop's pointer, or at its row base plus `k`
    /// elements.
    fn address(
        &self,
        b: &mut FunctionBuilder,
        row_bases: &[Value],
        here: &Here,
        esize: &dyn Fn(usize) -> i64,
        j: usize,
    ) -> (Value, i32) {
        match here.at.get(j).copied().flatten() {
            Some(p) => (p, (here.u * self.lanes.count() * esize(j)) as i32),
            None => {
                let off = b.ins().imul_imm_s(here.k, esize(j));
                (b.ins().iadd(row_bases[j], off), 0)
            }
        }
    }

    /// One vector of `program` at the column `here` says; returns its outputs. Inputs past
    /// `n_in` are staged math's buffers (`ops.buffers`).
    #[allow(clippy::too_many_arguments)]
    fn eval<M: Module>(
        &self,
        b: &mut FunctionBuilder,
        module: &mut M,
        program: &ScalarProgram,
        ops: &RowOperands,
        here: &Here,
        esize: &dyn Fn(usize) -> i64,
        table: Option<&mut OperandTable>,
    ) -> Result<Vec<Value>> {
        let k = here.k;
        let mut g = OpGen {
            b: &mut *b,
            module: &mut *module,
            lanes: Some(self.lanes),
            table,
        };
        // Unaligned, non-trapping accesses.
        let flags = MemFlagsData::new().with_notrap();
        body(&mut g, program, |g, j, d| {
            let vty = g.ty(d);
            if j >= ops.n_in {
                // Staged math's result, from its buffer (shifted: see `emit_row_staged`).
                let (shifted, bd) = ops.buffers[j - ops.n_in];
                let off = g.b.ins().imul_imm_s(k, bd.size() as i64);
                let at = g.b.ins().iadd(shifted, off);
                return g.b.ins().load(vty, MemFlagsData::trusted(), at, 0);
            }
            match self.known[j] {
                // Loaded and splat once per row.
                Bcast::Always => return ops.splats[j],
                // Contiguous along the row (the entry checked it).
                Bcast::Never => {
                    let (addr, off) = self.address(g.b, ops.row_bases, here, esize, j);
                    if d.is_half() {
                        return super::half::load_x4(g.b, flags, addr, off);
                    }
                    return g.b.ins().load(vty, flags, addr, off);
                }
                Bcast::Unknown => {}
            }
            let off = g.b.ins().imul(k, self.vstep[j]);
            let addr = g.b.ins().iadd(ops.vptrs[j], off);
            let v = if d.is_half() {
                super::half::load_x4(g.b, flags, addr, 0)
            } else {
                g.b.ins().load(vty, flags, addr, 0)
            };
            let m = if vty.lane_type().is_float() {
                let f = MemFlagsData::new().with_endianness(Endianness::Little);
                g.b.ins().bitcast(vty, f, self.bcast_mask[j])
            } else {
                self.bcast_mask[j]
            };
            g.b.ins().bitselect(m, ops.splats[j], v)
        })
    }
}

/// What a row's vector code reads: the operands' row bases (inputs, then outputs), the
/// inputs' row splats and vector pointers, and staged math's buffers.
struct RowOperands<'a> {
    n_in: usize,
    row_bases: &'a [Value],
    splats: &'a [Value],
    vptrs: &'a [Value],
    /// Per staged math op: its buffer's address less the chunk's first column's elements,
    /// and its dtype.
    buffers: &'a [(Value, DType)],
}

/// `0.0` of the float type `ty` (a buffer function's shift when there is none).
pub(super) fn zero_of(b: &mut FunctionBuilder, ty: Type) -> Value {
    if ty == types::F32 {
        b.ins().f32const(0.0)
    } else {
        b.ins().f64const(0.0)
    }
}

/// A loop of `k` over `from..to` by `step` (`to - from` a multiple of it), `each` emitting the
/// body at `k`; the builder ends in the block after the loop.
pub(super) fn counted_loop(
    b: &mut FunctionBuilder,
    from: Value,
    to: Value,
    step: i64,
    mut each: impl FnMut(&mut FunctionBuilder, Value) -> Result<()>,
) -> Result<()> {
    let (head, body, done) = (b.create_block(), b.create_block(), b.create_block());
    b.append_block_param(head, types::I64);
    b.ins().jump(head, &[from.into()]);
    b.switch_to_block(head);
    let k = b.block_params(head)[0];
    let more = b.ins().icmp(IntCC::SignedLessThan, k, to);
    b.ins().brif(more, body, &[], done, &[]);
    b.switch_to_block(body);
    each(b, k)?;
    let next = b.ins().iadd_imm_s(k, step);
    b.ins().jump(head, &[next.into()]);
    b.switch_to_block(done);
    Ok(())
}

/// Where a vector step is: its column `k`, and for the operands the main loop carries a
/// pointer for, that pointer (`at[j]`), which this step reads `u` vectors past.
struct Here<'a> {
    k: Value,
    at: &'a [Option<Value>],
    u: i64,
}
