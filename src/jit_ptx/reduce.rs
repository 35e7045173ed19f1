//! Reduce kernels: one block per output element (blocks stride over the outputs), the block's
//! threads striding over the reduced elements, then a tree: butterfly warp shuffles
//! (`shfl.sync.bfly`), one partial per warp in shared memory, and the first warp reducing those.
//! A row-wise reduction (the last axis, as in softmax) reads each row with consecutive threads
//! on consecutive elements, so its loads are coalesced.
//!
//! Parameters (docs/gpu.md): `out, in_0 .. in_{k-1}` (global pointers), then `i64`s: `n_out`,
//! `n_red` (elements per output), `dims[r]` (the shape of the reduced value, before the
//! reduction), `strides[k][r]` (each input's element strides over that shape, 0 where
//! broadcast). The output is contiguous (kept dims in order, `keepdims` or not). The block
//! size must be a multiple of 32 and at most 1024 (the launcher uses 256).
//!
//! Sum, prod, max, min, mean, all, any, argmax and argmin are generated, for every dtype the
//! CPU backend reduces (arg-reductions of halves aside); float max and min propagate NaN; an
//! arg-reduction carries (value, position) pairs through the tree (`Acc::Arg`) and gives
//! `perform`'s position exactly. A float sum is a tree, not the CPU's pairwise order: its error has
//! the same bound, its bits may differ. A float product, whose order decides more than bits,
//! is taken by thread 0 of the block in the interpreter's order ([`in_interpreters_order`]).

use super::gen::{bx, Gen};
use super::kernel::{
    counted_loop, declare_kernel, load, load_lanes, offsets, rows_in_groups, store, Inputs, LANES,
};
use super::scalar::{emit_program, konst};
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use crate::ir::{DType, ReduceOp, Reduction, Scalar};
use inkwell::types::IntType;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::{FloatPredicate, IntPredicate};

/// What the reduce kernel for one step needs to know.
pub struct ReduceSpec<'p> {
    pub op: ReduceOp,
    /// The value reduced, from the inputs (the identity for a plain reduction).
    pub program: &'p ScalarProgram,
    pub in_dtypes: Vec<DType>,
    /// The rank of the reduced value and the axes reduced (sorted, distinct).
    pub rank: usize,
    pub axes: Vec<usize>,
}

/// The dtype the output has: what the reduction accumulates in.
pub fn out_dtype(spec: &ReduceSpec) -> Result<DType> {
    let p = spec.program;
    if p.outputs.len() != 1 {
        return Err(Error::Unsupported(
            "ptx backend: a reduction of several values".into(),
        ));
    }
    let vd = p.insts[p.outputs[0]].dtype;
    Ok(Reduction::of(spec.op, vd).result)
}

/// Defines the reduce kernel `name` in `g`'s module.
pub fn define_reduce<'ctx>(g: &Gen<'ctx>, name: &str, spec: &ReduceSpec) -> Result<()> {
    let acc = Acc::of(spec)?;
    let p = spec.program;
    let (n_in, r) = (spec.in_dtypes.len(), spec.rank);
    let readonly: Vec<bool> = std::iter::once(false)
        .chain((0..n_in).map(|_| true))
        .collect();
    let noalias = vec![true; n_in + 1];
    let k = declare_kernel(g, name, &readonly, &noalias, 2 + r + n_in * r)?;
    let (out, ins) = (k.pointers[0], &k.pointers[1..]);
    let (n_out, n_red) = (k.scalars[0], k.scalars[1]);
    let dims = &k.scalars[2..2 + r];
    let strides: Vec<Vec<IntValue>> = (0..n_in)
        .map(|j| k.scalars[2 + r + j * r..2 + r + (j + 1) * r].to_vec())
        .collect();
    let kept: Vec<usize> = (0..r).filter(|d| !spec.axes.contains(d)).collect();
    let pick =
        |axes: &[usize], v: &[IntValue<'ctx>]| axes.iter().map(|&d| v[d]).collect::<Vec<_>>();
    let kept_dims = pick(&kept, dims);
    let red_dims = pick(&spec.axes, dims);
    let kept_strides: Vec<Vec<IntValue>> = strides.iter().map(|s| pick(&kept, s)).collect();
    let red_strides: Vec<Vec<IntValue>> = strides.iter().map(|s| pick(&spec.axes, s)).collect();

    // Shared memory: one partial per warp (32 warps at most) and register of the accumulator,
    // as a 32- or 64-bit word.
    let words: Vec<IntType<'ctx>> = acc.dtypes().iter().map(|&d| word_type(g, d)).collect();
    let smem: Vec<PointerValue<'ctx>> = words
        .iter()
        .enumerate()
        .map(|(i, &w)| g.warp_partials(w, &format!("{name}_partials{i}")))
        .collect();

    // The thread's running partial: slots in the entry block, which LLVM turns into registers
    // (mem2reg) because the loops below are built without loop-carried values.
    let slots: Vec<PointerValue<'ctx>> = acc
        .dtypes()
        .iter()
        .map(|&d| bx(g.b.build_alloca(g.reg_type(d), "acc")))
        .collect::<Result<_>>()?;
    // The interpreter's 8 interleaved partials, where the reduction runs in its order.
    let in_order = in_interpreters_order(spec.op, acc.out_dtype());
    let partials: Vec<PointerValue<'ctx>> = match in_order {
        true => (0..8)
            .map(|_| bx(g.b.build_alloca(g.reg_type(acc.out_dtype()), "part")))
            .collect::<Result<_>>()?,
        false => Vec::new(),
    };
    let tid = g.sreg("tid.x")?;
    let ntid = g.sreg("ntid.x")?;
    let ctaid = g.sreg("ctaid.x")?;
    let nctaid = g.sreg("nctaid.x")?;
    let lane = bx(g.b.build_and(tid, g.c64(31), "lane"))?;
    let warp = bx(g.b.build_right_shift(tid, g.c64(5), false, "warp"))?;
    let nwarps = bx(g.b.build_right_shift(
        bx(g.b.build_int_add(ntid, g.c64(31), ""))?,
        g.c64(5),
        false,
        "nwarps",
    ))?;
    let reads = p.input_dtypes();
    let read: Vec<bool> = (0..n_in)
        .map(|j| reads.get(j).copied().flatten().is_some())
        .collect();
    let func = k.func;
    // Rows (one reduced axis, the innermost) in whole groups, every input read whole along it
    // aligned to a group or broadcast along it: each thread takes `LANES` consecutive elements
    // at a time with one vector load per input (see `map.rs`'s groups).
    let by_groups = match spec.axes.as_slice() {
        [a] if *a + 1 == r => {
            let inputs = Inputs {
                ptrs: ins,
                dtypes: &spec.in_dtypes,
            };
            rows_in_groups(g, dims, &strides, &read, &inputs)?
        }
        _ => None,
    };
    let load_acc = || -> Result<Regs<'ctx>> {
        acc.dtypes()
            .iter()
            .zip(&slots)
            .map(|(&d, &s)| bx(g.b.build_load(g.reg_type(d), s, "a")))
            .collect()
    };
    let store_acc = |v: &Regs<'ctx>| -> Result<()> {
        for (&s, &x) in slots.iter().zip(v) {
            bx(g.b.build_store(s, x))?;
        }
        Ok(())
    };
    // Element `e` (its index among the reduced elements) into the thread's partial: the
    // program's value, converted, combined.
    let accumulate = |vals: &[Option<BasicValueEnum<'ctx>>], e: IntValue<'ctx>| -> Result<()> {
        let x = emit_program(g, p, vals)?[0];
        let x = acc.element(g, x, e)?;
        let c = acc.combine(g, &load_acc()?, &x)?;
        store_acc(&c)
    };
    // The inputs the program reads at reduced element `e` of the output at `base` (each
    // input's offset of that output).
    let inputs_at =
        |base: &[IntValue<'ctx>], e: IntValue<'ctx>| -> Result<Vec<Option<BasicValueEnum<'ctx>>>> {
            let offs = offsets(g, e, &red_dims, &red_strides)?;
            (0..n_in)
                .map(|j| match reads.get(j).copied().flatten() {
                    Some(_) => {
                        let at = bx(g.b.build_int_add(base[j], offs[j], ""))?;
                        Ok(Some(load(g, ins[j], spec.in_dtypes[j], at)?))
                    }
                    None => Ok(None),
                })
                .collect()
        };
    counted_loop(g, func, ctaid, nctaid, n_out, "outputs", |o| {
        let base = offsets(g, o, &kept_dims, &kept_strides)?;
        if in_order {
            // Thread 0 takes the output's elements in the interpreter's order
            // (`perform::reduce::interleaved`): element n of the whole groups of 8 into
            // partial n % 8, the partials as a tree, then the rest one by one.
            let is_t0 = bx(g.b.build_int_compare(IntPredicate::EQ, tid, g.c64(0), ""))?;
            return if_then(g, func, is_t0, "in_order", || {
                let value_at = |e: IntValue<'ctx>| -> Result<Regs<'ctx>> {
                    let x = emit_program(g, p, &inputs_at(&base, e)?)?[0];
                    acc.element(g, x, e)
                };
                let ty = g.reg_type(acc.out_dtype());
                let get = |slot: PointerValue<'ctx>| -> Result<Regs<'ctx>> {
                    Ok(vec![bx(g.b.build_load(ty, slot, "p"))?])
                };
                for &part in &partials {
                    bx(g.b.build_store(part, acc.start(g)[0]))?;
                }
                let eight = g.c64(8);
                let chunks = bx(g.b.build_int_unsigned_div(n_red, eight, "chunks"))?;
                counted_loop(g, func, g.c64(0), g.c64(1), chunks, "chunk", |c| {
                    let e0 = bx(g.b.build_int_mul(c, eight, ""))?;
                    for (k, &part) in partials.iter().enumerate() {
                        let e = bx(g.b.build_int_add(e0, g.c64(k as i64), ""))?;
                        let x = value_at(e)?;
                        let v = acc.combine(g, &get(part)?, &x)?;
                        bx(g.b.build_store(part, v[0]))?;
                    }
                    Ok(())
                })?;
                let pair =
                    |a: usize, b: usize| acc.combine(g, &get(partials[a])?, &get(partials[b])?);
                let low = acc.combine(g, &pair(0, 1)?, &pair(2, 3)?)?;
                let high = acc.combine(g, &pair(4, 5)?, &pair(6, 7)?)?;
                store_acc(&acc.combine(g, &low, &high)?)?;
                let rest = bx(g.b.build_int_mul(chunks, eight, "rest"))?;
                counted_loop(g, func, rest, g.c64(1), n_red, "tail", |e| {
                    let c = acc.combine(g, &load_acc()?, &value_at(e)?)?;
                    store_acc(&c)
                })?;
                let v = acc.finish(g, &load_acc()?, n_red)?;
                store(g, out, acc.out_dtype(), o, v)
            });
        }
        // This thread's partial over elements tid, tid + ntid, ...
        store_acc(&acc.start(g))?;
        let join = g.ctx.append_basic_block(func, "partial");
        if let Some(fast) = by_groups {
            let groups_bb = g.ctx.append_basic_block(func, "row_groups");
            let elems_bb = g.ctx.append_basic_block(func, "row_elems");
            bx(g.b.build_conditional_branch(fast, groups_bb, elems_bb))?;
            g.b.position_at_end(groups_bb);
            let n_groups = bx(g.b.build_int_unsigned_div(n_red, g.c64(LANES as i64), ""))?;
            counted_loop(g, func, tid, ntid, n_groups, "groups", |q| {
                let e = bx(g.b.build_int_mul(q, g.c64(LANES as i64), "e"))?;
                let mut lanes: Vec<Vec<Option<BasicValueEnum>>> =
                    vec![vec![None; n_in]; LANES as usize];
                for j in (0..n_in).filter(|&j| read[j]) {
                    let last = strides[j][r - 1];
                    let step = bx(g.b.build_int_mul(e, last, ""))?;
                    let at = bx(g.b.build_int_add(base[j], step, ""))?;
                    let whole = bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(1), ""))?;
                    let xs = load_lanes(g, func, ins[j], spec.in_dtypes[j], at, Some(whole))?;
                    for (lane, x) in lanes.iter_mut().zip(xs) {
                        lane[j] = Some(x);
                    }
                }
                for (l, vals) in lanes.iter().enumerate() {
                    let el = bx(g.b.build_int_add(e, g.c64(l as i64), "el"))?;
                    accumulate(vals, el)?;
                }
                Ok(())
            })?;
            bx(g.b.build_unconditional_branch(join))?;
            g.b.position_at_end(elems_bb);
        }
        counted_loop(g, func, tid, ntid, n_red, "elems", |e| {
            accumulate(&inputs_at(&base, e)?, e)
        })?;
        bx(g.b.build_unconditional_branch(join))?;
        g.b.position_at_end(join);
        let partial = acc.warp_reduce(g, &load_acc()?)?;
        // Lane 0 of each warp publishes its warp's partial.
        let slot = |i: usize, idx: IntValue<'ctx>| {
            let ty = words[i].array_type(32);
            bx(unsafe {
                g.b.build_in_bounds_gep(ty, smem[i], &[g.c64(0), idx], "slot")
            })
        };
        let is_lane0 = bx(g.b.build_int_compare(IntPredicate::EQ, lane, g.c64(0), ""))?;
        if_then(g, func, is_lane0, "publish", || {
            for (i, (&d, &v)) in acc.dtypes().iter().zip(&partial).enumerate() {
                bx(g.b.build_store(slot(i, warp)?, as_word(g, d, v)?))?;
            }
            Ok(())
        })?;
        g.barrier()?;
        // The first warp reduces the partials; thread 0 writes the result.
        let is_warp0 = bx(g.b.build_int_compare(IntPredicate::EQ, warp, g.c64(0), ""))?;
        if_then(g, func, is_warp0, "final", || {
            let have = bx(g.b.build_int_compare(IntPredicate::ULT, lane, nwarps, ""))?;
            let safe_lane = bx(g.b.build_select(have, lane, g.c64(0), ""))?.into_int_value();
            let start = acc.start(g);
            let mut v: Regs<'ctx> = Vec::with_capacity(words.len());
            for (i, &d) in acc.dtypes().iter().enumerate() {
                let w = bx(g.b.build_load(words[i], slot(i, safe_lane)?, "w"))?.into_int_value();
                let x = from_word(g, d, w)?;
                v.push(bx(g.b.build_select(have, x, start[i], ""))?);
            }
            let v = acc.warp_reduce(g, &v)?;
            let is_t0 = bx(g.b.build_int_compare(IntPredicate::EQ, tid, g.c64(0), ""))?;
            if_then(g, func, is_t0, "write", || {
                let v = acc.finish(g, &v, n_red)?;
                store(g, out, acc.out_dtype(), o, v)
            })
        })?;
        // The partials are read before the next output's are written.
        g.barrier()?;
        Ok(())
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// Whether a reduction of `op` accumulating in `ad` runs in the interpreter's order, one
/// thread per output, rather than as a tree of threads: a float product, whose order decides
/// at an overflow between 0 and NaN, or a finite value and infinity, not only in the last
/// bits (`perform::reduce::interleaved`). Products are rare and short; the others keep the
/// tree, within the error bound of any order.
pub fn in_interpreters_order(op: ReduceOp, ad: DType) -> bool {
    op == ReduceOp::Prod && ad.is_float()
}

/// Whether the reduction `op` of values of `vd` is a kernel: all but an arg-reduction of
/// halves, whose registers hold bits with no order here (it runs on the host).
pub fn has_kernel(op: ReduceOp, vd: DType) -> bool {
    !(matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) && vd.is_half())
}

/// A thread's partial in registers: the accumulator (one register), or an arg-reduction's
/// best value and its position (two).
type Regs<'ctx> = Vec<BasicValueEnum<'ctx>>;

/// What a reduce kernel accumulates.
#[derive(Clone, Copy)]
enum Acc {
    /// The reduction's accumulator, of dtype `ad` (`Reduction::of`'s).
    Value { op: ReduceOp, vd: DType, ad: DType },
    /// `argmax` (`max`) or `argmin` of values of dtype `vd`: the best value so far and its
    /// index among the reduced elements (`NONE` before the first). `perform`'s answer is the
    /// first NaN, else the first best; "better" is a total order on (value, index) pairs
    /// (a NaN beats a number, the lower index breaks ties), so any tree gives that answer.
    Arg { max: bool, vd: DType },
}

/// The position of an arg-reduction's partial that has seen no element.
const NONE: i64 = i64::MAX;

impl Acc {
    fn of(spec: &ReduceSpec) -> Result<Acc> {
        let p = spec.program;
        let vd = p.insts[p.outputs[0]].dtype;
        if !has_kernel(spec.op, vd) {
            return Err(bad_op(spec.op, vd));
        }
        Ok(match spec.op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => Acc::Arg {
                max: spec.op == ReduceOp::ArgMax,
                vd,
            },
            op => Acc::Value {
                op,
                vd,
                ad: out_dtype(spec)?,
            },
        })
    }

    /// The dtype of each register.
    fn dtypes(&self) -> Vec<DType> {
        match *self {
            Acc::Value { ad, .. } => vec![ad],
            Acc::Arg { vd, .. } => vec![vd, DType::I64],
        }
    }

    fn out_dtype(&self) -> DType {
        match *self {
            Acc::Value { ad, .. } => ad,
            Acc::Arg { .. } => DType::I64,
        }
    }

    /// The partial of no element.
    fn start<'ctx>(&self, g: &Gen<'ctx>) -> Regs<'ctx> {
        match *self {
            Acc::Value { op, ad, .. } => vec![identity(g, op, ad)],
            Acc::Arg { vd, .. } => vec![konst(g, vd, 0.0), g.c64(NONE).into()],
        }
    }

    /// The partial of element `e` of value `x`.
    fn element<'ctx>(
        &self,
        g: &Gen<'ctx>,
        x: BasicValueEnum<'ctx>,
        e: IntValue<'ctx>,
    ) -> Result<Regs<'ctx>> {
        Ok(match *self {
            Acc::Value { op, vd, ad } => vec![convert(g, op, vd, ad, x)?],
            Acc::Arg { .. } => vec![x, e.into()],
        })
    }

    /// Two partials combined.
    fn combine<'ctx>(&self, g: &Gen<'ctx>, a: &Regs<'ctx>, b: &Regs<'ctx>) -> Result<Regs<'ctx>> {
        match *self {
            Acc::Value { op, ad, .. } => Ok(vec![combine(g, op, ad, a[0], b[0])?]),
            Acc::Arg { max, vd } => {
                let take = arg_better(g, max, vd, a, b)?;
                a.iter()
                    .zip(b)
                    .map(|(&x, &y)| bx(g.b.build_select(take, y, x, "")))
                    .collect()
            }
        }
    }

    /// The result from the combined partial: the mean divides by the count, an arg-reduction
    /// gives its position.
    fn finish<'ctx>(
        &self,
        g: &Gen<'ctx>,
        v: &Regs<'ctx>,
        n_red: IntValue<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        match *self {
            Acc::Value { op, ad, .. } => finish(g, op, ad, v[0], n_red),
            Acc::Arg { .. } => Ok(v[1]),
        }
    }

    /// The partial combined over the 32 lanes of the warp (every lane ends with it).
    fn warp_reduce<'ctx>(&self, g: &Gen<'ctx>, v: &Regs<'ctx>) -> Result<Regs<'ctx>> {
        if let Acc::Value { op, ad, .. } = *self {
            return Ok(vec![warp_reduce(g, op, ad, v[0])?]);
        }
        if g.host {
            return Ok(v.clone());
        }
        let mut v = v.clone();
        for mask in [16, 8, 4, 2, 1] {
            let other = self
                .dtypes()
                .iter()
                .zip(&v)
                .map(|(&d, &x)| from_word(g, d, shfl_xor(g, as_word(g, d, x)?, mask)?))
                .collect::<Result<Regs>>()?;
            v = self.combine(g, &v, &other)?;
        }
        Ok(v)
    }
}

/// Whether the arg-reduction partial `b` (value, position) is better than `a`: a position
/// before none; a NaN before a number, or before a later NaN; a greater value (`max`, else a
/// smaller), or an equal one at an earlier position.
fn arg_better<'ctx>(
    g: &Gen<'ctx>,
    max: bool,
    vd: DType,
    a: &Regs<'ctx>,
    b: &Regs<'ctx>,
) -> Result<IntValue<'ctx>> {
    let bb = &g.b;
    let (ai, bi) = (a[1].into_int_value(), b[1].into_int_value());
    let a_none = bx(bb.build_int_compare(IntPredicate::EQ, ai, g.c64(NONE), ""))?;
    let b_some = bx(bb.build_int_compare(IntPredicate::NE, bi, g.c64(NONE), ""))?;
    let earlier = bx(bb.build_int_compare(IntPredicate::SLT, bi, ai, ""))?;
    let no = g.i1().const_zero();
    let (a_nan, b_nan, beats, ties) = if vd.is_float() {
        let (av, bv) = (a[0].into_float_value(), b[0].into_float_value());
        let p = if max {
            FloatPredicate::OGT
        } else {
            FloatPredicate::OLT
        };
        (
            bx(bb.build_float_compare(FloatPredicate::UNO, av, av, ""))?,
            bx(bb.build_float_compare(FloatPredicate::UNO, bv, bv, ""))?,
            bx(bb.build_float_compare(p, bv, av, ""))?,
            bx(bb.build_float_compare(FloatPredicate::OEQ, bv, av, ""))?,
        )
    } else {
        let (av, bv) = (a[0].into_int_value(), b[0].into_int_value());
        // Bools compare as 0 < 1; integers signed.
        let p = match (max, vd == DType::Bool) {
            (true, true) => IntPredicate::UGT,
            (true, false) => IntPredicate::SGT,
            (false, true) => IntPredicate::ULT,
            (false, false) => IntPredicate::SLT,
        };
        (
            no,
            no,
            bx(bb.build_int_compare(p, bv, av, ""))?,
            bx(bb.build_int_compare(IntPredicate::EQ, bv, av, ""))?,
        )
    };
    // Both numbers: greater, or equal and earlier. Both NaN: earlier.
    let numbers = bx(bb.build_or(a_nan, b_nan, ""))?;
    let numbers = bx(bb.build_not(numbers, ""))?;
    let tie_wins = bx(bb.build_and(ties, earlier, ""))?;
    let by_value = bx(bb.build_or(beats, tie_wins, ""))?;
    let by_value = bx(bb.build_and(numbers, by_value, ""))?;
    let both_nan = bx(bb.build_and(a_nan, b_nan, ""))?;
    let nan_first = bx(bb.build_and(both_nan, earlier, ""))?;
    let not_a_nan = bx(bb.build_not(a_nan, ""))?;
    let nan_beats = bx(bb.build_and(b_nan, not_a_nan, ""))?;
    let wins = bx(bb.build_or(by_value, nan_first, ""))?;
    let wins = bx(bb.build_or(wins, nan_beats, ""))?;
    let wins = bx(bb.build_or(wins, a_none, ""))?;
    bx(bb.build_and(wins, b_some, "better"))
}

/// The word a register of dtype `d` travels in through shuffles and shared memory.
fn word_type<'ctx>(g: &Gen<'ctx>, d: DType) -> IntType<'ctx> {
    if d.size() == 8 {
        g.i64()
    } else {
        g.i32()
    }
}

/// `if (cond) then()`, built in place.
pub(super) fn if_then<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    cond: IntValue<'ctx>,
    name: &str,
    then: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let yes = g.ctx.append_basic_block(func, name);
    let after = g.ctx.append_basic_block(func, &format!("{name}_end"));
    bx(g.b.build_conditional_branch(cond, yes, after))?;
    g.b.position_at_end(yes);
    then()?;
    bx(g.b.build_unconditional_branch(after))?;
    g.b.position_at_end(after);
    Ok(())
}

/// The reduction's starting value (`Reduction::start`) in the accumulator's dtype; argmax and
/// argmin (whose partials start from an element) get 0.
pub(super) fn identity<'ctx>(g: &Gen<'ctx>, op: ReduceOp, ad: DType) -> BasicValueEnum<'ctx> {
    match Reduction::of(op, ad).start {
        Some(Scalar::I32(v)) => g.c32(v as i64).into(),
        Some(Scalar::I64(v)) => g.c64(v).into(),
        Some(s) => konst(g, ad, s.to_f64()),
        None => konst(g, ad, 0.0),
    }
}

/// The value `x` (dtype `vd`) as the accumulator's dtype `ad`, as the CPU backend converts.
pub(super) fn convert<'ctx>(
    g: &Gen<'ctx>,
    op: ReduceOp,
    vd: DType,
    ad: DType,
    x: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    if matches!(op, ReduceOp::All | ReduceOp::Any) {
        return Ok(match vd {
            DType::Bool => x,
            DType::F32 | DType::F64 => {
                let x = x.into_float_value();
                let z = x.get_type().const_float(0.0);
                bx(g.b.build_float_compare(FloatPredicate::UNE, x, z, ""))?.into()
            }
            _ => {
                let x = x.into_int_value();
                bx(g.b.build_int_compare(IntPredicate::NE, x, x.get_type().const_zero(), ""))?
                    .into()
            }
        });
    }
    if vd == ad {
        return Ok(x);
    }
    let x = x.into_int_value();
    // bool is 0/1: zero-extend; i32 sign-extends.
    let wide = match vd {
        DType::Bool => bx(g.b.build_int_z_extend(x, g.i64(), ""))?,
        DType::I32 => bx(g.b.build_int_s_extend(x, g.i64(), ""))?,
        _ => x,
    };
    Ok(if ad == DType::F64 {
        bx(g.b.build_signed_int_to_float(wide, g.ctx.f64_type(), ""))?.into()
    } else {
        wide.into()
    })
}

/// `a ⊕ x`. Float max and min take `x` when it is better or NaN, so a NaN wins and stays.
pub(super) fn combine<'ctx>(
    g: &Gen<'ctx>,
    op: ReduceOp,
    ad: DType,
    a: BasicValueEnum<'ctx>,
    x: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    let b = &g.b;
    if ad.is_float() {
        let (a, x) = (a.into_float_value(), x.into_float_value());
        return Ok(match op {
            ReduceOp::Sum | ReduceOp::Mean => bx(b.build_float_add(a, x, ""))?.into(),
            ReduceOp::Prod => bx(b.build_float_mul(a, x, ""))?.into(),
            ReduceOp::Max | ReduceOp::Min => {
                let p = if op == ReduceOp::Max {
                    FloatPredicate::OGT
                } else {
                    FloatPredicate::OLT
                };
                let better = bx(b.build_float_compare(p, x, a, ""))?;
                let nan = bx(b.build_float_compare(FloatPredicate::UNO, x, x, ""))?;
                let take = bx(b.build_or(better, nan, ""))?;
                bx(b.build_select(take, x, a, ""))?
            }
            _ => return Err(bad_op(op, ad)),
        });
    }
    let (a, x) = (a.into_int_value(), x.into_int_value());
    let v = match op {
        ReduceOp::Sum | ReduceOp::Mean => bx(b.build_int_add(a, x, ""))?,
        ReduceOp::Prod => bx(b.build_int_mul(a, x, ""))?,
        ReduceOp::Max if ad == DType::Bool => bx(b.build_or(a, x, ""))?,
        ReduceOp::Min if ad == DType::Bool => bx(b.build_and(a, x, ""))?,
        ReduceOp::Max | ReduceOp::Min => {
            let p = if op == ReduceOp::Max {
                IntPredicate::SGT
            } else {
                IntPredicate::SLT
            };
            let c = bx(b.build_int_compare(p, a, x, ""))?;
            bx(b.build_select(c, a, x, ""))?.into_int_value()
        }
        ReduceOp::All => bx(b.build_and(a, x, ""))?,
        ReduceOp::Any => bx(b.build_or(a, x, ""))?,
        ReduceOp::ArgMax | ReduceOp::ArgMin => return Err(bad_op(op, ad)),
    };
    Ok(v.into())
}

fn bad_op(op: ReduceOp, ad: DType) -> Error {
    Error::Unsupported(format!(
        "ptx backend: no reduce kernel for {} of {ad}",
        op.name()
    ))
}

/// The result from the combined value: the mean divides by the count.
pub(super) fn finish<'ctx>(
    g: &Gen<'ctx>,
    op: ReduceOp,
    ad: DType,
    v: BasicValueEnum<'ctx>,
    n_red: IntValue<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    if op != ReduceOp::Mean {
        return Ok(v);
    }
    let ty = g.float_type(ad);
    let n = bx(g.b.build_unsigned_int_to_float(n_red, ty, "n"))?;
    Ok(bx(g.b.build_float_div(v.into_float_value(), n, "mean"))?.into())
}

/// A register value as the 32- or 64-bit word that shuffles and shared memory carry.
pub(super) fn as_word<'ctx>(
    g: &Gen<'ctx>,
    ad: DType,
    v: BasicValueEnum<'ctx>,
) -> Result<IntValue<'ctx>> {
    Ok(match ad {
        DType::Bool => bx(g.b.build_int_z_extend(v.into_int_value(), g.i32(), ""))?,
        DType::I32 | DType::I64 => v.into_int_value(),
        DType::F32 => bx(g.b.build_bit_cast(v, g.i32(), ""))?.into_int_value(),
        DType::F64 => bx(g.b.build_bit_cast(v, g.i64(), ""))?.into_int_value(),
        DType::F16 | DType::BF16 => bx(g.b.build_int_z_extend(v.into_int_value(), g.i32(), ""))?,
    })
}

pub(super) fn from_word<'ctx>(
    g: &Gen<'ctx>,
    ad: DType,
    w: IntValue<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    Ok(match ad {
        DType::Bool => {
            bx(g.b.build_int_compare(IntPredicate::NE, w, g.i32().const_zero(), ""))?.into()
        }
        DType::I32 | DType::I64 => w.into(),
        DType::F32 | DType::F64 => bx(g.b.build_bit_cast(w, g.float_type(ad), ""))?,
        DType::F16 | DType::BF16 => bx(g.b.build_int_truncate(w, g.ctx.i16_type(), ""))?.into(),
    })
}

/// The value of the lane `lane ^ mask` (butterfly), for a 32- or 64-bit word; all 32 lanes of
/// the warp take part.
fn shfl_xor<'ctx>(g: &Gen<'ctx>, w: IntValue<'ctx>, mask: i64) -> Result<IntValue<'ctx>> {
    let shfl = |x: IntValue<'ctx>| -> Result<IntValue<'ctx>> {
        Ok(g.call(
            "llvm.nvvm.shfl.sync.bfly.i32",
            g.i32().into(),
            &[
                g.c32(-1).into(),
                x.into(),
                g.c32(mask).into(),
                g.c32(0x1f).into(),
            ],
        )?
        .into_int_value())
    };
    if w.get_type().get_bit_width() == 32 {
        return shfl(w);
    }
    let lo = bx(g.b.build_int_truncate(w, g.i32(), "lo"))?;
    let hi = bx(g.b.build_right_shift(w, g.c64(32), false, ""))?;
    let hi = bx(g.b.build_int_truncate(hi, g.i32(), "hi"))?;
    let (lo, hi) = (shfl(lo)?, shfl(hi)?);
    let lo = bx(g.b.build_int_z_extend(lo, g.i64(), ""))?;
    let hi = bx(g.b.build_int_z_extend(hi, g.i64(), ""))?;
    let hi = bx(g.b.build_left_shift(hi, g.c64(32), ""))?;
    bx(g.b.build_or(hi, lo, ""))
}

/// Combines the value over the 32 lanes of the warp (every lane ends with a full result).
pub(super) fn warp_reduce<'ctx>(
    g: &Gen<'ctx>,
    op: ReduceOp,
    ad: DType,
    mut v: BasicValueEnum<'ctx>,
) -> Result<BasicValueEnum<'ctx>> {
    if g.host {
        // One thread: its value is the warp's.
        return Ok(v);
    }
    for mask in [16, 8, 4, 2, 1] {
        let other = from_word(g, ad, shfl_xor(g, as_word(g, ad, v)?, mask)?)?;
        v = combine(g, op, ad, v, other)?;
    }
    Ok(v)
}
