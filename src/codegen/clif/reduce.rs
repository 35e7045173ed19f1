//! Cranelift code for reductions: a loop nest over a `[O, N, I]` view of the (prologue's) input,
//! reducing the middle axis `N` into a contiguous `[O, I]` output, for shapes and strides known
//! only at call time.
//!
//! # Kernel ABI
//! `extern "C" fn(o: i64, n: i64, i: i64, ptrs: *const *mut u8, so: *const i64, sn: *const i64,
//! si: *const i64, mode: i64)`: `ptrs` holds one base pointer per input, then the output's;
//! element `(o, n, i)` of input `j` is at `ptrs[j] + o * so[j] + n * sn[j] + i * si[j]` (byte
//! strides, 0 where broadcast), output element `(o, i)` at `ptrs[m] + o * so[m] + i * si[m]`
//! (`m` the number of inputs). `mode & 2` says the leaves run along `I` (one output, or one
//! vector of outputs, at a time: "columns"), else along `N` with `i == 1` ("rows"); `mode & 1`
//! asks for the vector leaves: the caller checked that every operand is contiguous or broadcast
//! (stride 0) along the vector axis, `N` for rows (lanes along the reduced axis) and `I` for
//! columns (and that the output is contiguous along `I`). `mode & 4` says the reduced dims did
//! not merge into one: `N` is then the flat (row-major) index over them, `sn` points to the
//! N-d descriptor of `reduce_operands` instead of strides, and the cursor leaves run (scalar and
//! columns; never lanes along `N`). Kernels of one reduced axis have no cursor leaves: one axis
//! always merges.
//!
//! Argmax and argmin (`argreduce_codegen`) use the same entry and leaf signature; their leaves
//! store the `i64` index at the output themselves.
//!
//! # Order of operations
//! Every element of the output is reduced in eight interleaved partial results (element `n`
//! goes to partial `n % 8`), combined as `((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))`,
//! then the `len % 8` last elements one by one; float sums (and means) split ranges longer than
//! 128 at `(len / 2) & !7` and add the halves (a recursive function). This is
//! `perform::reduce::pairwise_sum` step for step, so a generated float sum has the reference's
//! bits whichever leaf computes it: scalar, lanes along `N`, or vectors of outputs along `I`,
//! strided or through the cursor (which visits `N` in the same flat order).

use super::host_math;
use super::map::{counted_loop, zero_of, Bcast};
use super::reduce_operands::{passes_directly, Leaf, LeafInputs};
use super::scalar_ops::{clif_type, vector_lanes, Lanes};
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use crate::ir::{DType, ReduceOp, Reduction, Scalar};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, Block, Endianness, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind,
    Type, Value,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{FuncId, Linkage, Module};

/// The signature of a compiled reduction's entry point.
pub type ReduceFn =
    unsafe extern "C" fn(i64, i64, i64, *const *mut u8, *const i64, *const i64, *const i64, i64);

/// Ranges longer than this are split in two (the reference's, read from there).
const PAIRWISE_BLOCK: i64 = crate::ir::PAIRWISE.block as i64;

/// The dtype a reduction returns, for a value of dtype `vd` (`Reduction::result`): what it
/// accumulates in, or for argmax and argmin the index's (`i64`, the value compared in its own
/// dtype).
pub fn acc_dtype(op: ReduceOp, vd: DType) -> DType {
    Reduction::of(op, vd).result
}

/// Whether `op` is argmax or argmin (`argreduce_codegen`).
pub fn is_arg(op: ReduceOp) -> bool {
    Reduction::of(op, DType::F64).is_arg()
}

/// What was generated for one reduction.
#[derive(Clone)]
pub struct ReduceKernelInfo {
    /// The kernel's entry point (see the module's kernel ABI).
    pub entry: FuncId,
    /// The lane count of the vector leaves, when there are any.
    pub lanes: Option<i64>,
    /// Whether the kernel has the cursor leaves for reduced dims that do not merge (mode 4).
    pub nd: bool,
    /// The CLIF text of the kernel's functions, for the `clif` dump.
    pub clif: String,
}

pub(super) struct Spec<'p> {
    pub op: ReduceOp,
    pub program: &'p ScalarProgram,
    pub n_in: usize,
    /// The prologue's value dtype and the accumulator's.
    pub vd: DType,
    pub ad: DType,
    pub pairwise: bool,
    /// Per input: whether it is broadcast along the reduced axes, as its type tells (the row
    /// leaves then skip the run-time select).
    pub along_n: &'p [Bcast],
    /// The program split at its math ops, for row leaves of sums (`host_math`).
    pub staged: Option<host_math::Staged>,
}

/// One set of leaves: scalar, and the vector ones (rows, columns) where there are.
#[derive(Clone, Copy)]
struct Leaves {
    scalar: FuncId,
    row: Option<FuncId>,
    col: Option<(FuncId, Lanes)>,
}

/// Generates the reduction `op` of the value `program` computes (output 0) from `n_in` inputs.
///
/// `along_n[j]` says what input `j`'s type tells about its broadcasting along the reduced axes
/// (one entry per input; `Bcast::Unknown` where nothing is known). With `nd`, the kernel also
/// gets cursor leaves for reduced dims that do not merge into one (worth it only when several
/// axes are reduced: one axis always merges). `vectors` says which vector leaves to generate
/// for merged axes, `Both` unless the caller knows the operands' layout (see `VectorLeaves`).
/// With `host`, row leaves of float sums hand their math to the buffer functions
/// (`host_math`), which live in this process: the JIT's choice; objects are generated
/// without.
#[allow(clippy::too_many_arguments)]
pub fn define_reduce_kernel<M: Module>(
    module: &mut M,
    name: &str,
    op: ReduceOp,
    program: &ScalarProgram,
    along_n: &[Bcast],
    nd: bool,
    vectors: VectorLeaves,
    host: bool,
) -> Result<ReduceKernelInfo> {
    let n_in = along_n.len();
    let unsupported = |what: &str| Error::Unsupported(format!("{name}: {what}"));
    if program.outputs.len() != 1 {
        return Err(unsupported("a reduction of several values"));
    }
    let vd = program.insts[program.outputs[0]].dtype;
    let ad = acc_dtype(op, vd);
    let pairwise = Reduction::of(op, vd).is_pairwise();
    let spec = Spec {
        op,
        program,
        n_in,
        vd,
        ad,
        pairwise,
        along_n,
        // Row leaves of sums cover at most `PAIRWISE_BLOCK` positions: one block of stages.
        staged: (pairwise && host && host_math::enabled())
            .then(|| host_math::split(program, n_in))
            .flatten(),
    };
    let mut clif = String::new();
    let mut leaf = |module: &mut M, suffix: &str, kind: Leaf, lanes: Option<Lanes>, cursor| {
        let name = format!("{name}_{suffix}");
        let define = |module: &mut M, kind, lanes| {
            if is_arg(op) {
                super::argreduce::define_arg_leaf(module, &name, &spec, kind, lanes, cursor)
            } else {
                define_leaf(module, &name, &spec, kind, lanes, cursor)
            }
        };
        let r = define(module, kind, lanes);
        if r.is_err() && lanes.is_some() {
            // The vector leaf was declared before Cranelift failed to lower it (a cast of
            // 64-bit lanes on x86): an object must define every function it declares, so
            // the name gets the scalar leaf's body, which nothing calls.
            define(module, Leaf::Scalar, None)?;
        }
        r.map(|(id, text)| {
            clif.push_str(&text);
            id
        })
    };
    // Vector leaves where the program runs on vectors and nothing converts the value (argmax
    // compares values in their own dtype); a construct Cranelift cannot lower for vectors
    // leaves the scalar leaf alone.
    let lanes = vector_lanes(program, false).filter(|_| {
        vd != DType::Bool
            && (is_arg(op)
                || vd == ad
                    && matches!(
                        op,
                        ReduceOp::Sum
                            | ReduceOp::Mean
                            | ReduceOp::Prod
                            | ReduceOp::Max
                            | ReduceOp::Min
                    ))
    });
    let mut sets = Vec::new();
    for cursor in [false, true].into_iter().filter(|&c| !c || nd) {
        let tag = if cursor { "nd_" } else { "" };
        let scalar = leaf(module, &format!("{tag}leaf"), Leaf::Scalar, None, cursor)?;
        let mut set = Leaves {
            scalar,
            row: None,
            col: None,
        };
        if let Some(l) = lanes {
            // Lanes along `N` need it merged into one strided dim.
            let row = match cursor || vectors == VectorLeaves::Col {
                false => leaf(module, &format!("{tag}row"), Leaf::Row, Some(l), cursor).map(Some),
                true => Ok(None),
            };
            let col = match !cursor && vectors == VectorLeaves::Row {
                false => leaf(module, &format!("{tag}col"), Leaf::Col, Some(l), cursor).map(Some),
                true => Ok(None),
            };
            if let (Ok(r), Ok(c)) = (row, col) {
                set.row = r;
                set.col = c.map(|c| (c, l));
            }
        }
        sets.push(set);
    }
    let (entry, text) = define_entry(module, name, &spec, sets[0], sets.get(1).copied())?;
    clif.push_str(&text);
    Ok(ReduceKernelInfo {
        entry,
        lanes: lanes
            .filter(|_| sets[0].row.is_some() || sets[0].col.is_some())
            .map(|l| l.count()),
        nd,
        clif,
    })
}

/// Which vector leaves a reduction gets (besides the scalar leaf, which serves everything).
/// The runtime picks lanes along the reduced axes when they are contiguous, else vectors of
/// outputs along a contiguous kept axis: when every operand is known to be contiguous, that
/// choice is known at compile time, and the other leaf (a large function) is not generated.
/// An operand laid out otherwise after all still gets the right values, from the scalar leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorLeaves {
    /// Both kinds, the runtime choosing.
    Both,
    /// Lanes along the reduced axes only.
    Row,
    /// Vectors of outputs only.
    Col,
}

/// A leaf's signature (see `define_leaf`).
pub(super) fn leaf_signature<M: Module>(module: &M) -> cranelift_codegen::ir::Signature {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend([
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
        AbiParam::new(ptr),
    ]);
    sig
}

pub(super) fn finish<M: Module>(
    module: &mut M,
    id: FuncId,
    name: &str,
    ctx: &mut cranelift_codegen::Context,
) -> Result<(FuncId, String)> {
    let text = super::map::define_in(module, id, name, ctx)?;
    Ok((id, text))
}

pub(super) fn vec_type(lanes: Lanes, d: DType) -> Type {
    match (lanes, d) {
        (Lanes::X32, DType::F32) => types::F32X4,
        (Lanes::X32, _) => types::I32X4,
        (Lanes::X64, DType::F64) => types::F64X2,
        (Lanes::X64, _) => types::I64X2,
    }
}

/// The reduction's starting value (`Reduction::start`), of type `ty` (a vector is splat).
fn identity(b: &mut FunctionBuilder, op: ReduceOp, ad: DType, ty: Type) -> Value {
    let start = Reduction::of(op, ad).start;
    let s = match start.expect("arg reductions have their own leaves") {
        Scalar::F32(v) => b.ins().f32const(v),
        Scalar::F64(v) => b.ins().f64const(v),
        Scalar::Bool(v) => b.ins().iconst(types::I8, v as i64),
        c => b.ins().iconst(clif_type(c.dtype()), c.to_bits()),
    };
    if ty.is_vector() {
        b.ins().splat(ty, s)
    } else {
        s
    }
}

/// `a ⊕ x` for the reduction, lane by lane on vectors. Max and min propagate NaN: a NaN `x`
/// replaces the partial, and a NaN partial is never replaced.
fn combine(b: &mut FunctionBuilder, op: ReduceOp, ad: DType, a: Value, x: Value) -> Value {
    let float = ad.is_float();
    match op {
        ReduceOp::Sum | ReduceOp::Mean if float => b.ins().fadd(a, x),
        ReduceOp::Sum | ReduceOp::Mean => b.ins().iadd(a, x),
        ReduceOp::Prod if float => b.ins().fmul(a, x),
        ReduceOp::Prod => b.ins().imul(a, x),
        ReduceOp::Max | ReduceOp::Min if float => {
            let ty = b.func.dfg.value_type(a);
            let nan = b.ins().fcmp(FloatCC::Unordered, x, x);
            if ty.is_vector() {
                // `a < x ? x : a` (max) / `x < a ? x : a` (min) is the shape Cranelift lowers
                // to one `maxps` / `minps` (which keep `a` when either is NaN), and a
                // select on an fcmp mask is one `blendv`: three instructions where the
                // or-ed masks took six (the row max of a softmax runs this per vector).
                let f = MemFlagsData::new().with_endianness(Endianness::Little);
                let m = extreme(b, op, a, x);
                let nan = b.ins().bitcast(ty, f, nan);
                b.ins().bitselect(nan, x, m)
            } else {
                let cc = if op == ReduceOp::Max {
                    FloatCC::GreaterThan
                } else {
                    FloatCC::LessThan
                };
                let better = b.ins().fcmp(cc, x, a);
                let take = b.ins().bor(better, nan);
                b.ins().select(take, x, a)
            }
        }
        ReduceOp::Max if ad == DType::Bool => b.ins().bor(a, x),
        ReduceOp::Min if ad == DType::Bool => b.ins().band(a, x),
        ReduceOp::Max => b.ins().smax(a, x),
        ReduceOp::Min => b.ins().smin(a, x),
        ReduceOp::All => b.ins().band(a, x),
        ReduceOp::Any => b.ins().bor(a, x),
        // `define_reduce_kernel` sends these to `argreduce_codegen`, which has its own leaves.
        ReduceOp::ArgMax | ReduceOp::ArgMin => unreachable!("argmax has its own leaves"),
    }
}

/// `a < x ? x : a` (max) / `x < a ? x : a` (min) on float vectors, `a` where either is NaN:
/// the shape Cranelift lowers to one `maxps` / `minps`.
fn extreme(b: &mut FunctionBuilder, op: ReduceOp, a: Value, x: Value) -> Value {
    let ty = b.func.dfg.value_type(a);
    let f = MemFlagsData::new().with_endianness(Endianness::Little);
    let lt = if op == ReduceOp::Max {
        b.ins().fcmp(FloatCC::LessThan, a, x)
    } else {
        b.ins().fcmp(FloatCC::LessThan, x, a)
    };
    let lt = b.ins().bitcast(ty, f, lt);
    b.ins().bitselect(lt, x, a)
}

/// The prologue's scalar value `x` (dtype `vd`) as the accumulator's dtype.
fn convert(b: &mut FunctionBuilder, s: &Spec, x: Value) -> Value {
    let (vd, ad) = (s.vd, s.ad);
    if matches!(s.op, ReduceOp::All | ReduceOp::Any) {
        return match vd {
            DType::Bool => x,
            DType::F32 => {
                let z = b.ins().f32const(0.0);
                b.ins().fcmp(FloatCC::NotEqual, x, z)
            }
            DType::F64 => {
                let z = b.ins().f64const(0.0);
                b.ins().fcmp(FloatCC::NotEqual, x, z)
            }
            _ => b.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
        };
    }
    if vd == ad {
        return x;
    }
    let wide = match vd {
        DType::Bool | DType::I32 => b.ins().sextend(types::I64, x),
        _ => x,
    };
    if ad == DType::F64 {
        b.ins().fcvt_from_sint(types::F64, wide)
    } else {
        wide
    }
}

/// The value type a leaf returns.
fn leaf_type(s: &Spec, leaf: Leaf, lanes: Option<Lanes>) -> Type {
    match (leaf, lanes) {
        (Leaf::Col, Some(l)) => vec_type(l, s.ad),
        _ => clif_type(s.ad),
    }
}

/// Whether a row leaf of this sum hands its input to the summing buffer function directly
/// (`stage_math`: one math op of an input contiguous along the row, less a constant along it),
/// which sums any length in the reference's pairwise order itself: the leaf then takes the
/// whole row in one call instead of splitting it here into calls of `PAIRWISE_BLOCK`
/// (logsumexp rows of 4096: 63 calls of the leaf and 32 of the buffer function a row). It asks
/// `passes_directly`, as `LeafInputs::direct` does: anything else computes the argument into a
/// buffer of `host_math::BLOCK`.
fn whole_row_sum(s: &Spec, leaf: Leaf, lanes: Option<Lanes>, cursor: bool) -> bool {
    let Some(st) = &s.staged else { return false };
    let [stage] = st.stages.as_slice() else {
        return false;
    };
    // The leaf splats the row-constant inputs its program reads.
    let reads = s.program.input_dtypes();
    let splat = |j: usize| reads.get(j).copied().flatten().is_some();
    st.last_is_math
        && matches!(s.op, ReduceOp::Sum | ReduceOp::Mean)
        && stage
            .direct(s.n_in)
            .is_some_and(|arg| passes_directly(s.along_n, leaf, lanes, cursor, arg, splat))
}

/// A leaf: `fn(bases: *const *const u8, sn: *const i64, si: *const i64, start: i64, len: i64,
/// out: *mut T)` reduces elements `start..start + len` along `N` from the operands' bases and
/// stores the result (a scalar, or for `Col` a vector of outputs) at `out`. Float sums split
/// long ranges and call themselves on the halves. With `cursor`, `sn` is the N-d descriptor
/// (`reduce_operands`).
fn define_leaf<M: Module>(
    module: &mut M,
    name: &str,
    s: &Spec,
    leaf: Leaf,
    lanes: Option<Lanes>,
    cursor: bool,
) -> Result<(FuncId, String)> {
    let ptr = module.target_config().pointer_type();
    let sig = leaf_signature(module);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let rty = leaf_type(s, leaf, lanes);
    let flags = MemFlagsData::trusted();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        let leaf_block = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let (bases_p, sn_p, si_p, start, len, out) = (p[0], p[1], p[2], p[3], p[4], p[5]);
        if s.pairwise && !whole_row_sum(s, leaf, lanes, cursor) {
            let split = b.create_block();
            let long = b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThan, len, PAIRWISE_BLOCK);
            b.ins().brif(long, split, &[], leaf_block, &[]);
            b.switch_to_block(split);
            let half = b.ins().ushr_imm_u(len, 1);
            let mid = b.ins().band_imm_s(half, -8);
            let rest = b.ins().isub(len, mid);
            let start2 = b.ins().iadd(start, mid);
            let slot =
                b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 32, 4));
            let t0 = b.ins().stack_addr(ptr, slot, 0);
            let t1 = b.ins().stack_addr(ptr, slot, 16);
            let me = module.declare_func_in_func(id, b.func);
            b.ins().call(me, &[bases_p, sn_p, si_p, start, mid, t0]);
            b.ins().call(me, &[bases_p, sn_p, si_p, start2, rest, t1]);
            let x0 = b.ins().load(rty, flags, t0, 0);
            let x1 = b.ins().load(rty, flags, t1, 0);
            let r = combine(&mut b, s.op, s.ad, x0, x1);
            b.ins().store(flags, r, out, 0);
            b.ins().return_(&[]);
        } else {
            b.ins().jump(leaf_block, &[]);
        }

        b.switch_to_block(leaf_block);
        let mut inputs = LeafInputs::new(
            &mut b,
            module,
            s.program,
            s.along_n,
            leaf,
            lanes,
            cursor,
            (bases_p, sn_p, si_p, start),
        )?;
        let mut summed = None;
        if let (Leaf::Row, Some(l), Some(st)) = (leaf, lanes, &s.staged) {
            let sum = st.last_is_math && matches!(s.op, ReduceOp::Sum | ReduceOp::Mean);
            summed = stage_math(&mut b, module, &mut inputs, st, l, start, len, sum)?;
        }
        if let Some(r) = summed {
            b.ins().store(flags, r, out, 0);
            b.ins().return_(&[]);
        } else {
            let (n_acc, acc_ty, l) = match (leaf, lanes) {
                (Leaf::Row, Some(l)) => (8 / l.count() as usize, vec_type(l, s.ad), l.count()),
                (Leaf::Col, Some(l)) => (8, vec_type(l, s.ad), 1),
                _ => (8, clif_type(s.ad), 1),
            };
            let accs: Vec<Variable> = (0..n_acc)
                .map(|_| {
                    let v = b.declare_var(acc_ty);
                    let id0 = identity(&mut b, s.op, s.ad, acc_ty);
                    b.def_var(v, id0);
                    v
                })
                .collect();
            // A float max / min over a row keeps NaNs apart (as the interpreter does): the
            // running extremes skip them and a mask per accumulator records them, so each
            // extreme's chain is one `maxps` a vector. With the NaN select in the chain it was
            // a `maxps` and a `pblendvb` (an integer-domain blend, with a bypass delay each
            // way): the row max of logsumexp ran at 1.8 floats a cycle from cache.
            let nans: Option<Vec<Variable>> = (leaf == Leaf::Row
                && s.ad.is_float()
                && matches!(s.op, ReduceOp::Max | ReduceOp::Min))
            .then(|| {
                let mask_ty = acc_ty.as_int();
                (0..n_acc)
                    .map(|_| {
                        let v = b.declare_var(mask_ty);
                        let zero = b.ins().iconst(mask_ty.lane_type(), 0);
                        let zero = b.ins().splat(mask_ty, zero);
                        b.def_var(v, zero);
                        v
                    })
                    .collect()
            });
            let acc = (&accs[..], nans.as_deref());
            let chunks = b.ins().band_imm_s(len, -8);
            let end8 = b.ins().iadd(start, chunks);
            let end = b.ins().iadd(start, len);
            // Row leaves take four blocks of 8 an iteration, then the blocks left one at a time:
            // Cranelift loads each vector constant of the prologue's math once per iteration
            // (it rematerializes constants where they are used), so four blocks share what one
            // loaded. The order into the accumulators is the same. callgrind, logsumexp rows of
            // 4096: the exp-sum leaf 50.3M -> 42.7M instructions (two blocks: 45.6M), the max
            // leaf 6.9M -> 5.9M; compiling W5 costs 7% more instructions.
            let rounds: i64 = if leaf == Leaf::Row { 4 } else { 1 };
            let head8 = b.create_block();
            let body8 = b.create_block();
            let last8 = b.create_block();
            let tree = b.create_block();
            b.append_block_param(head8, types::I64);
            b.append_block_param(last8, types::I64);
            b.ins().jump(head8, &[start.into()]);
            b.switch_to_block(head8);
            let n = b.block_params(head8)[0];
            let stop = b.ins().iadd_imm_s(end8, -(8 * rounds - 8));
            let more = b.ins().icmp(IntCC::SignedLessThan, n, stop);
            super::map::loop_branch(&mut b, more, body8, last8, n);
            b.switch_to_block(body8);
            // Vector loop bodies read the math's operand constants from a table.
            inputs.table.enter(&mut b, module)?;
            for r in 0..rounds {
                let nr = b.ins().iadd_imm_s(n, 8 * r);
                block_of_8(&mut b, module, s, &mut inputs, acc, leaf, l, nr)?;
            }
            inputs.table.leave();
            let next = b.ins().iadd_imm_s(n, 8 * rounds);
            b.ins().jump(head8, &[next.into()]);
            // The blocks of 8 left, one at a time.
            b.switch_to_block(last8);
            let n = b.block_params(last8)[0];
            if rounds > 1 {
                let one = b.create_block();
                let left = b.ins().icmp(IntCC::SignedLessThan, n, end8);
                b.ins().brif(left, one, &[], tree, &[]);
                b.switch_to_block(one);
                inputs.table.enter(&mut b, module)?;
                block_of_8(&mut b, module, s, &mut inputs, acc, leaf, l, n)?;
                inputs.table.leave();
                let next = b.ins().iadd_imm_s(n, 8);
                b.ins().jump(last8, &[next.into()]);
            } else {
                b.ins().jump(tree, &[]);
            }

            b.switch_to_block(tree);
            let mut parts: Vec<Value> = accs.iter().map(|&a| b.use_var(a)).collect();
            if leaf == Leaf::Row {
                parts = parts
                    .iter()
                    .flat_map(|&v| (0..l as u8).map(move |i| (v, i)))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .map(|(v, i)| b.ins().extractlane(v, i))
                    .collect();
            }
            let c = |b: &mut FunctionBuilder, x: Value, y: Value| combine(b, s.op, s.ad, x, y);
            let p01 = c(&mut b, parts[0], parts[1]);
            let p23 = c(&mut b, parts[2], parts[3]);
            let p45 = c(&mut b, parts[4], parts[5]);
            let p67 = c(&mut b, parts[6], parts[7]);
            let lo = c(&mut b, p01, p23);
            let hi = c(&mut b, p45, p67);
            let mut head = c(&mut b, lo, hi);
            if let Some(nans) = &nans {
                // Any NaN in the blocks of 8: the interpreter's NaN.
                let mut any = b.use_var(nans[0]);
                for &v in &nans[1..] {
                    let m = b.use_var(v);
                    any = b.ins().bor(any, m);
                }
                let seen = b.ins().vany_true(any);
                let nan = match s.ad {
                    DType::F32 => b.ins().f32const(f32::NAN),
                    _ => b.ins().f64const(f64::NAN),
                };
                head = b.ins().select(seen, nan, head);
            }

            // The last `len % 8` elements one at a time.
            let head1 = b.create_block();
            let body1 = b.create_block();
            let done = b.create_block();
            b.append_block_param(head1, types::I64);
            b.append_block_param(head1, rty);
            b.append_block_param(done, rty);
            b.ins().jump(head1, &[end8.into(), head.into()]);
            b.switch_to_block(head1);
            let n = b.block_params(head1)[0];
            let acc = b.block_params(head1)[1];
            let more = b.ins().icmp(IntCC::SignedLessThan, n, end);
            b.ins().brif(more, body1, &[], done, &[acc.into()]);
            b.switch_to_block(body1);
            let x = inputs.value(&mut b, module, n, leaf == Leaf::Col)?;
            let x = if leaf == Leaf::Col {
                x
            } else {
                convert(&mut b, s, x)
            };
            let r = combine(&mut b, s.op, s.ad, acc, x);
            let next = b.ins().iadd_imm_s(n, 1);
            b.ins().jump(head1, &[next.into(), r.into()]);
            b.switch_to_block(done);
            let r = b.block_params(done)[0];
            b.ins().store(flags, r, out, 0);
            b.ins().return_(&[]);
        }
        b.seal_all_blocks();
        b.finalize(module.target_config());
        std::mem::take(&mut inputs.table).define(module)?;
    }
    finish(module, id, name, &mut ctx)
}

/// Staged math (`host_math`) for the `len <= PAIRWISE_BLOCK` positions from `start`: each
/// stage's argument into its buffer (vectors, then the positions left one at a time), then the
/// buffer function over it; afterwards `inputs` computes the last stage, which reads them.
/// With `sum` (a sum of the last math op's result itself), the last stage's summing buffer
/// function computes the leaf's whole result instead, which is returned.
#[allow(clippy::too_many_arguments)]
fn stage_math<'p, M: Module>(
    b: &mut FunctionBuilder,
    module: &mut M,
    inputs: &mut LeafInputs<'p>,
    st: &'p host_math::Staged,
    l: Lanes,
    start: Value,
    len: Value,
    sum: bool,
) -> Result<Option<Value>> {
    const { assert!(PAIRWISE_BLOCK <= host_math::BLOCK) };
    let ptr = module.target_config().pointer_type();
    let flags = MemFlagsData::trusted();
    let buffers: Vec<(Value, Value, DType)> = st
        .stages
        .iter()
        .map(|stage| {
            let slot = host_math::buffer_slot(b, stage.dtype);
            let buf = b.ins().stack_addr(ptr, slot, 0);
            // Position `n` of the buffer at `shifted + n * size`: one addressing mode.
            let skip = b.ins().imul_imm_s(start, stage.dtype.size() as i64);
            (buf, b.ins().isub(buf, skip), stage.dtype)
        })
        .collect();
    let shifted = buffers.iter().map(|&(_, s, d)| (s, d)).collect();
    inputs.read_buffers(module, &st.last, shifted);
    let end = b.ins().iadd(start, len);
    let vlen = b.ins().band_imm_s(len, -8);
    let vend = b.ins().iadd(start, vlen);
    let mut result = None;
    for (k, (stage, &(buf, shifted, d))) in st.stages.iter().zip(&buffers).enumerate() {
        let summed = sum && k + 1 == st.stages.len();
        let fty = clif_type(d);
        // An input contiguous along the row (less one constant along it, logsumexp's
        // `x - max`) goes to the buffer function as it is, with no stage loop.
        let direct = stage
            .direct(inputs.n_in())
            .and_then(|(a, sub)| inputs.direct(b, a, sub, start));
        let with_shift = direct.is_some_and(|(_, shift)| shift.is_some());
        let entry = match summed {
            true => host_math::Entry::Sum {
                shifted: with_shift,
            },
            false => host_math::Entry::Map {
                shifted: with_shift,
            },
        };
        let callee = host_math::import(module, b, stage, entry)?;
        let (src, shift) = match direct {
            Some((src, shift)) => (src, shift.unwrap_or_else(|| zero_of(b, fty))),
            None => {
                // Blocks of 8 positions as vectors (two of f32x4, four of f64x2), then the
                // positions left one at a time.
                for (from, to, vector) in [(start, vend, true), (vend, end, false)] {
                    let (step, per) = if vector { (8, 8 / l.count()) } else { (1, 1) };
                    counted_loop(b, from, to, step, |b, n| {
                        for k in 0..per {
                            let nk = b.ins().iadd_imm_s(n, k * l.count());
                            let v = inputs.value_of(b, module, &stage.program, nk, vector)?;
                            let off = b.ins().imul_imm_s(nk, d.size() as i64);
                            let at = b.ins().iadd(shifted, off);
                            b.ins().store(flags, v, at, 0);
                        }
                        Ok(())
                    })?;
                }
                (buf, zero_of(b, fty))
            }
        };
        if summed {
            let call = b.ins().call(callee, &[src, len, shift]);
            result = Some(b.inst_results(call)[0]);
        } else {
            b.ins().call(callee, &[src, buf, len, shift]);
        }
    }
    Ok(result)
}

/// One block of 8 elements from position `n` into the accumulators (vector `k` of the block,
/// or element `k` for scalar leaves, into accumulator `k`, and its NaNs into NaN mask `k`
/// where the leaf keeps them apart).
#[allow(clippy::too_many_arguments)]
fn block_of_8<M: Module>(
    b: &mut FunctionBuilder,
    module: &mut M,
    s: &Spec,
    inputs: &mut LeafInputs,
    (accs, nans): (&[Variable], Option<&[Variable]>),
    leaf: Leaf,
    l: i64,
    n: Value,
) -> Result<()> {
    for (k, &acc) in accs.iter().enumerate() {
        let nk = b.ins().iadd_imm_s(n, k as i64 * l);
        let x = inputs.value(b, module, nk, leaf != Leaf::Scalar)?;
        let x = if leaf == Leaf::Scalar {
            convert(b, s, x)
        } else {
            x
        };
        let a = b.use_var(acc);
        let r = match nans {
            Some(nans) => {
                // NaNs into their mask, the extreme without them (see `define_leaf`).
                let nan = b.ins().fcmp(FloatCC::Unordered, x, x);
                let seen = b.use_var(nans[k]);
                let seen = b.ins().bor(seen, nan);
                b.def_var(nans[k], seen);
                extreme(b, s.op, a, x)
            }
            None => combine(b, s.op, s.ad, a, x),
        };
        b.def_var(acc, r);
    }
    Ok(())
}

/// The entry point (see the module docs): loops over `O` and `I`, calling a leaf per output
/// (or per vector of outputs) and storing its result, divided by `N` for a mean; argmax and
/// argmin leaves store their indices at the output themselves. `nd`: the leaves for mode 4.
fn define_entry<M: Module>(
    module: &mut M,
    name: &str,
    s: &Spec,
    flat: Leaves,
    nd: Option<Leaves>,
) -> Result<(FuncId, String)> {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend([
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(types::I64),
    ]);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let flags = MemFlagsData::trusted();
    let m = s.n_in;
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let (o_n, n_n, i_n, ptrs, so_p, sn_p, si_p, mode) =
            (p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
        let (mut bases, mut so, mut si) = (vec![], vec![], vec![]);
        for j in 0..=m {
            bases.push(
                b.ins()
                    .load(ptr, flags, ptrs, (j * ptr.bytes() as usize) as i32),
            );
            so.push(b.ins().load(types::I64, flags, so_p, (j * 8) as i32));
            si.push(b.ins().load(types::I64, flags, si_p, (j * 8) as i32));
        }
        let arr = b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (8 * m.max(1)) as u32,
            4,
        ));
        let arr = b.ins().stack_addr(ptr, arr, 0);
        let res = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 4));
        let res = b.ins().stack_addr(ptr, res, 0);
        let zero = b.ins().iconst(types::I64, 0);
        let nf = match s.ad {
            DType::F32 => Some(b.ins().fcvt_from_sint(types::F32, n_n)),
            DType::F64 => Some(b.ins().fcvt_from_sint(types::F64, n_n)),
            _ => None,
        };
        let exit = b.create_block();
        let v = NestValues {
            o_n,
            n_n,
            i_n,
            sn_p,
            si_p,
            mode,
            bases,
            so,
            si,
            arr,
            res,
            zero,
            nf,
            exit,
        };
        let flat_block = b.create_block();
        match nd {
            Some(nd) => {
                let nd_block = b.create_block();
                let is_nd = b.ins().band_imm_s(mode, 4);
                b.ins().brif(is_nd, nd_block, &[], flat_block, &[]);
                b.switch_to_block(nd_block);
                emit_nest(&mut b, module, s, &v, nd);
            }
            None => {
                b.ins().jump(flat_block, &[]);
            }
        }
        b.switch_to_block(flat_block);
        emit_nest(&mut b, module, s, &v, flat);
        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    finish(module, id, name, &mut ctx)
}

/// What the entry's nest reads, computed once in its first block.
struct NestValues {
    o_n: Value,
    n_n: Value,
    i_n: Value,
    sn_p: Value,
    si_p: Value,
    mode: Value,
    /// Per operand (inputs, then the output): base address and strides along `O` and `I`.
    bases: Vec<Value>,
    so: Vec<Value>,
    si: Vec<Value>,
    /// Scratch: the inputs' addresses for a leaf, and a leaf's result.
    arr: Value,
    res: Value,
    zero: Value,
    /// `N` as the accumulator's float type (for a mean).
    nf: Option<Value>,
    exit: Block,
}

/// The loops over `O` and `I` calling `leaves`, from the current block to `v.exit`.
fn emit_nest<M: Module>(
    b: &mut FunctionBuilder,
    module: &mut M,
    s: &Spec,
    v: &NestValues,
    leaves: Leaves,
) {
    let flags = MemFlagsData::trusted();
    let m = s.n_in;
    let direct = is_arg(s.op);
    let scalar_ref = module.declare_func_in_func(leaves.scalar, b.func);
    let row_ref = leaves.row.map(|r| module.declare_func_in_func(r, b.func));
    let col_ref = leaves
        .col
        .map(|(c, l)| (module.declare_func_in_func(c, b.func), l));
    let finalize = |b: &mut FunctionBuilder, x: Value| -> Value {
        match (s.op, v.nf) {
            (ReduceOp::Mean, Some(nf)) => {
                let ty = b.func.dfg.value_type(x);
                let d = if ty.is_vector() {
                    b.ins().splat(ty, nf)
                } else {
                    nf
                };
                b.ins().fdiv(x, d)
            }
            _ => x,
        }
    };
    let o_head = b.create_block();
    let o_body = b.create_block();
    b.append_block_param(o_head, types::I64);
    b.ins().jump(o_head, &[v.zero.into()]);
    b.switch_to_block(o_head);
    let o = b.block_params(o_head)[0];
    let more = b.ins().icmp(IntCC::SignedLessThan, o, v.o_n);
    b.ins().brif(more, o_body, &[], v.exit, &[]);
    b.switch_to_block(o_body);
    let row: Vec<Value> = (0..=m)
        .map(|j| {
            let off = b.ins().imul(o, v.so[j]);
            b.ins().iadd(v.bases[j], off)
        })
        .collect();
    let o_next = b.ins().iadd_imm_s(o, 1);
    // Calls `leaf` on the whole of N for output (o, i) (a vector of outputs from there for a
    // column leaf), and stores its result of type `ty` there unless the leaf did.
    let call = |b: &mut FunctionBuilder, leaf, i: Value, ty: Type| {
        for (j, (&r, &step)) in row.iter().zip(&v.si).take(m).enumerate() {
            let off = b.ins().imul(i, step);
            let a = b.ins().iadd(r, off);
            b.ins().store(flags, a, v.arr, (j * 8) as i32);
        }
        let off = b.ins().imul(i, v.si[m]);
        let out = b.ins().iadd(row[m], off);
        let dest = if direct { out } else { v.res };
        b.ins()
            .call(leaf, &[v.arr, v.sn_p, v.si_p, v.zero, v.n_n, dest]);
        if !direct {
            let x = b.ins().load(ty, flags, v.res, 0);
            let x = finalize(b, x);
            let f = if ty.is_vector() {
                MemFlagsData::new().with_notrap()
            } else {
                flags
            };
            b.ins().store(f, x, out, 0);
        }
    };
    let is_col = b.ins().band_imm_s(v.mode, 2);
    let vector = b.ins().band_imm_s(v.mode, 1);
    let row_block = b.create_block();
    let col_block = b.create_block();
    b.ins().brif(is_col, col_block, &[], row_block, &[]);

    // I == 1: one output per o, lanes along N when the caller allows it.
    b.switch_to_block(row_block);
    let sty = clif_type(s.ad);
    let row_scalar = b.create_block();
    let o_cont = b.create_block();
    match row_ref {
        Some(r) => {
            let row_vec = b.create_block();
            b.ins().brif(vector, row_vec, &[], row_scalar, &[]);
            b.switch_to_block(row_vec);
            call(b, r, v.zero, sty);
            b.ins().jump(o_cont, &[]);
        }
        None => {
            b.ins().jump(row_scalar, &[]);
        }
    }
    b.switch_to_block(row_scalar);
    call(b, scalar_ref, v.zero, sty);
    b.ins().jump(o_cont, &[]);
    b.switch_to_block(o_cont);
    b.ins().jump(o_head, &[o_next.into()]);

    // I > 1: vectors of outputs along I when allowed, then one output at a time.
    b.switch_to_block(col_block);
    let s_head = b.create_block();
    let s_body = b.create_block();
    b.append_block_param(s_head, types::I64);
    match col_ref {
        Some((c, l)) => {
            let v_head = b.create_block();
            let v_body = b.create_block();
            let v_check = b.create_block();
            b.append_block_param(v_head, types::I64);
            b.ins().brif(vector, v_check, &[], s_head, &[v.zero.into()]);
            b.switch_to_block(v_check);
            b.ins().jump(v_head, &[v.zero.into()]);
            b.switch_to_block(v_head);
            let i = b.block_params(v_head)[0];
            let end = b.ins().iadd_imm_s(i, l.count());
            let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, end, v.i_n);
            b.ins().brif(fits, v_body, &[], s_head, &[i.into()]);
            b.switch_to_block(v_body);
            call(b, c, i, vec_type(l, s.ad));
            b.ins().jump(v_head, &[end.into()]);
        }
        None => {
            b.ins().jump(s_head, &[v.zero.into()]);
        }
    }
    b.switch_to_block(s_head);
    let i = b.block_params(s_head)[0];
    let more = b.ins().icmp(IntCC::SignedLessThan, i, v.i_n);
    b.ins().brif(more, s_body, &[], o_cont, &[]);
    b.switch_to_block(s_body);
    call(b, scalar_ref, i, sty);
    let i_next = b.ins().iadd_imm_s(i, 1);
    b.ins().jump(s_head, &[i_next.into()]);
}
