//! The sort helper of objects that `sort` or `argsort`: a stable bottom-up merge sort of one
//! lane's positions `0..n` by the elements they point at, in `perform::sort`'s order (numpy's,
//! NaN after every number, `-0.0` equal to `0.0`; descending is the order reversed with equal
//! elements still in index order). Any stable sort gives the same permutation for one order,
//! so the object's results are `perform`'s.
//!
//! Written by hand in CLIF: the object links nothing but libm, so there is no `qsort` (which is
//! not stable either) to call.

use super::clif::{define, for_lt, for_lt_by, mem, offset, signature};
use crate::error::Result;
use crate::ir::DType;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{FuncId, Linkage, Module};

/// Whether the element at `x` comes strictly before the one at `y` in ascending order.
fn before(b: &mut FunctionBuilder, dtype: DType, x: Value, y: Value) -> Value {
    match dtype {
        DType::F32 | DType::F64 => {
            let ty = if dtype == DType::F32 {
                types::F32
            } else {
                types::F64
            };
            let (u, v) = (b.ins().load(ty, mem(), x, 0), b.ins().load(ty, mem(), y, 0));
            let less = b.ins().fcmp(FloatCC::LessThan, u, v);
            let u_nan = b.ins().fcmp(FloatCC::Unordered, u, u);
            let v_nan = b.ins().fcmp(FloatCC::Unordered, v, v);
            // A number comes before a NaN.
            let number_first = b.ins().band_not(v_nan, u_nan);
            b.ins().bor(less, number_first)
        }
        DType::I32 | DType::I64 => {
            let ty = if dtype == DType::I32 {
                types::I32
            } else {
                types::I64
            };
            let (u, v) = (b.ins().load(ty, mem(), x, 0), b.ins().load(ty, mem(), y, 0));
            b.ins().icmp(IntCC::SignedLessThan, u, v)
        }
        DType::Bool => {
            let (u, v) = (
                b.ins().load(types::I8, mem(), x, 0),
                b.ins().load(types::I8, mem(), y, 0),
            );
            b.ins().icmp(IntCC::UnsignedLessThan, u, v)
        }
        DType::F16 | DType::BF16 => {
            let (u, v) = (half_key(b, dtype, x), half_key(b, dtype, y));
            b.ins().icmp(IntCC::UnsignedLessThan, u, v)
        }
    }
}

/// A half's bits at `at` as an unsigned key in its sort order: negatives reversed below the
/// positives, both zeros one key, every NaN one key above infinity.
fn half_key(b: &mut FunctionBuilder, dtype: DType, at: Value) -> Value {
    let raw = b.ins().load(types::I16, mem(), at, 0);
    let bits = b.ins().uextend(types::I32, raw);
    let magnitude = b.ins().band_imm_u(bits, 0x7fff);
    let infinity = if dtype == DType::F16 { 0x7c00 } else { 0x7f80 };
    let nan = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedGreaterThan, magnitude, infinity);
    let zero = b.ins().icmp_imm_s(IntCC::Equal, magnitude, 0);
    let negative = b.ins().icmp_imm_s(IntCC::UnsignedGreaterThan, bits, 0x7fff);
    let flipped = b.ins().bxor_imm_u(bits, 0xffff);
    let lifted = b.ins().bor_imm_u(bits, 0x8000);
    let key = b.ins().select(negative, flipped, lifted);
    let zero_key = b.ins().iconst(types::I32, 0x8000);
    let key = b.ins().select(zero, zero_key, key);
    let nan_key = b.ins().iconst(types::I32, 0x1_0000);
    b.ins().select(nan, nan_key, key)
}

/// Defines `name(n, data, stride, perm, tmp, descending)`: `perm` (n i64) becomes the
/// positions of the lane `data` (n elements of `dtype`, `stride` bytes apart) in sorted order;
/// `tmp` is n i64 of room.
pub fn define_sort<M: Module>(
    module: &mut M,
    name: &str,
    dtype: DType,
    text: &mut String,
) -> Result<FuncId> {
    let ptr = module.target_config().pointer_type();
    let i64t = types::I64;
    let sig = signature(module, &[i64t, ptr, i64t, ptr, ptr, i64t], &[]);
    let (id, t) = define(module, name, Linkage::Local, sig, |_, _, b, p| {
        let (n, data, stride, perm, tmp, descending) = (p[0], p[1], p[2], p[3], p[4], p[5]);
        let zero = b.ins().iconst(i64t, 0);
        for_lt(b, zero, n, 1, |b, i| {
            let at = offset(b, perm, i, 8);
            b.ins().store(mem(), i, at, 0);
            Ok(())
        })?;
        // Runs of `width` merged pairwise from `src` into `dst`, which then swap.
        let (src, dst, width) = (b.declare_var(ptr), b.declare_var(ptr), b.declare_var(i64t));
        b.def_var(src, perm);
        b.def_var(dst, tmp);
        let one = b.ins().iconst(i64t, 1);
        b.def_var(width, one);
        let (head, body, exit) = (b.create_block(), b.create_block(), b.create_block());
        b.ins().jump(head, &[]);
        b.switch_to_block(head);
        let w = b.use_var(width);
        let more = b.ins().icmp(IntCC::SignedLessThan, w, n);
        b.ins().brif(more, body, &[], exit, &[]);
        b.switch_to_block(body);
        let (s, d, w) = (b.use_var(src), b.use_var(dst), b.use_var(width));
        let pair = b.ins().ishl_imm_u(w, 1);
        for_lt_by(b, zero, n, pair, |b, lo| {
            let mid = b.ins().iadd(lo, w);
            let mid = b.ins().smin(mid, n);
            let hi = b.ins().iadd(lo, pair);
            let hi = b.ins().smin(hi, n);
            merge(b, dtype, [data, stride, descending], [s, d], [lo, mid, hi])
        })?;
        b.def_var(width, pair);
        b.def_var(src, d);
        b.def_var(dst, s);
        b.ins().jump(head, &[]);
        b.switch_to_block(exit);
        // The sorted positions end in `perm`.
        let s = b.use_var(src);
        let (copy, done) = (b.create_block(), b.create_block());
        let elsewhere = b.ins().icmp(IntCC::NotEqual, s, perm);
        b.ins().brif(elsewhere, copy, &[], done, &[]);
        b.switch_to_block(copy);
        for_lt(b, zero, n, 1, |b, i| {
            let from = offset(b, s, i, 8);
            let v = b.ins().load(i64t, mem(), from, 0);
            let to = offset(b, perm, i, 8);
            b.ins().store(mem(), v, to, 0);
            Ok(())
        })?;
        b.ins().jump(done, &[]);
        b.switch_to_block(done);
        b.ins().return_(&[]);
        Ok(())
    })?;
    text.push_str(&t);
    text.push('\n');
    Ok(id)
}

/// Merges the sorted runs `src[lo..mid]` and `src[mid..hi]` into `dst[lo..hi]`, taking from
/// the right run only when its element comes strictly first (so equal elements keep their
/// order: the merge is stable).
fn merge(
    b: &mut FunctionBuilder,
    dtype: DType,
    [data, stride, descending]: [Value; 3],
    [src, dst]: [Value; 2],
    [lo, mid, hi]: [Value; 3],
) -> Result<()> {
    let i64t = types::I64;
    let (i, j) = (b.declare_var(i64t), b.declare_var(i64t));
    b.def_var(i, lo);
    b.def_var(j, mid);
    let one = b.ins().iconst(i64t, 1);
    for_lt_by(b, lo, hi, one, |b, k| {
        let (iv, jv) = (b.use_var(i), b.use_var(j));
        let right_left = b.ins().icmp(IntCC::SignedLessThan, jv, hi);
        let left_done = b.ins().icmp(IntCC::SignedGreaterThanOrEqual, iv, mid);
        // Positions to compare, kept inside the runs when one is used up.
        let il = b.ins().select(left_done, lo, iv);
        let jl = b.ins().select(right_left, jv, lo);
        let at_i = offset(b, src, il, 8);
        let at_j = offset(b, src, jl, 8);
        let (pi, pj) = (
            b.ins().load(i64t, mem(), at_i, 0),
            b.ins().load(i64t, mem(), at_j, 0),
        );
        let xi = b.ins().imul(pi, stride);
        let xi = b.ins().iadd(data, xi);
        let xj = b.ins().imul(pj, stride);
        let xj = b.ins().iadd(data, xj);
        // Ascending: the right one first if it is before the left one; descending, if the
        // left one is before it.
        let desc = b.ins().icmp_imm_s(IntCC::NotEqual, descending, 0);
        let x = b.ins().select(desc, xi, xj);
        let y = b.ins().select(desc, xj, xi);
        let right_first = before(b, dtype, x, y);
        let take = b.ins().bor(left_done, right_first);
        let take_right = b.ins().band(right_left, take);
        let p = b.ins().select(take_right, pj, pi);
        let to = offset(b, dst, k, 8);
        b.ins().store(mem(), p, to, 0);
        let inc = b.ins().uextend(i64t, take_right);
        let j_next = b.ins().iadd(jv, inc);
        let i_next = b.ins().iadd(iv, one);
        let i_next = b.ins().isub(i_next, inc);
        b.def_var(i, i_next);
        b.def_var(j, j_next);
        Ok(())
    })
}
