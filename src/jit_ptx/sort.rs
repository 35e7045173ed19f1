//! `sort` and `argsort` as GPU kernels: one thread per lane along the axis, a stable
//! bottom-up merge sort of the lane's positions by the elements they point at, in
//! `perform::sort`'s order (NaN after every number, both zeros equal; descending compares the
//! other way round and stays stable). Any stable sort gives the same permutation for one
//! order, so the results are the interpreter's. The positions live in two scratch arrays of
//! `lanes * len` i64 that the launcher allocates after the inputs.
//!
//! Parameters (docs/gpu.md, "Sort"): `out`, `x`, `perm`, `tmp`, then `lanes`, `len`, `passes`
//! (`ceil(log2(len))`), `lane_dims[r-1]`, `x_lane_strides[r-1]`, `out_lane_strides[r-1]`,
//! `x_axis_stride`, `out_axis_stride` (elements). Whether it sorts descending, and whether it
//! writes the values (`sort`) or the positions (`argsort`), are constants of the kernel.

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{row_major, without, Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::{FloatPredicate, IntPredicate};

/// What a sort kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub axis: usize,
    pub descending: bool,
    /// `sort` (the values) or `argsort` (the positions, i64).
    pub values: bool,
}

/// A half's bits as an unsigned key in its sort order (negatives flipped below the positives,
/// both zeros one key, every NaN one key above infinity), as `aot::sort` keys them.
fn half_key<'ctx>(g: &Gen<'ctx>, dtype: DType, bits: IntValue<'ctx>) -> Result<IntValue<'ctx>> {
    let i32t = g.i32();
    let c = |v: u64| i32t.const_int(v, false);
    let bits = bx(g.b.build_int_z_extend(bits, i32t, ""))?;
    let magnitude = bx(g.b.build_and(bits, c(0x7fff), ""))?;
    let inf = if dtype == DType::F16 { 0x7c00 } else { 0x7f80 };
    let nan =
        bx(g.b.build_int_compare(IntPredicate::UGT, magnitude, c(inf), ""))?;
    let zero = bx(g.b.build_int_compare(IntPredicate::EQ, magnitude, c(0), ""))?;
    let negative =
        bx(g.b.build_int_compare(IntPredicate::UGT, bits, c(0x7fff), ""))?;
    let flipped = bx(g.b.build_xor(bits, c(0xffff), ""))?;
    let lifted = bx(g.b.build_or(bits, c(0x8000), ""))?;
    let key = bx(g.b.build_select(negative, flipped, lifted, ""))?.into_int_value();
    let key = bx(g.b.build_select(zero, c(0x8000), key, ""))?.into_int_value();
    Ok(bx(g.b.build_select(nan, c(0x1_0000), key, ""))?.into_int_value())
}

/// Whether element `u` comes strictly before `v` in ascending order (NaN last, both zeros
/// equal); pooling's max reads it too.
pub(super) fn before<'ctx>(
    g: &Gen<'ctx>,
    dtype: DType,
    u: BasicValueEnum<'ctx>,
    v: BasicValueEnum<'ctx>,
) -> Result<IntValue<'ctx>> {
    Ok(match dtype {
        DType::F32 | DType::F64 => {
            let (a, b) = (u.into_float_value(), v.into_float_value());
            let less = bx(g.b.build_float_compare(FloatPredicate::OLT, a, b, ""))?;
            let a_nan = bx(g.b.build_float_compare(FloatPredicate::UNO, a, a, ""))?;
            let b_nan = bx(g.b.build_float_compare(FloatPredicate::UNO, b, b, ""))?;
            let a_num = bx(g.b.build_not(a_nan, ""))?;
            // A number comes before a NaN.
            let number_first = bx(g.b.build_and(b_nan, a_num, ""))?;
            bx(g.b.build_or(less, number_first, ""))?
        }
        DType::I32 | DType::I64 => bx(g.b.build_int_compare(
            IntPredicate::SLT,
            u.into_int_value(),
            v.into_int_value(),
            "",
        ))?,
        // Registers hold bools as i1: false before true.
        DType::Bool => bx(g.b.build_int_compare(
            IntPredicate::ULT,
            u.into_int_value(),
            v.into_int_value(),
            "",
        ))?,
        DType::F16 | DType::BF16 => {
            let (a, b) = (
                half_key(g, dtype, u.into_int_value())?,
                half_key(g, dtype, v.into_int_value())?,
            );
            bx(g.b.build_int_compare(IntPredicate::ULT, a, b, ""))?
        }
    })
}

/// Defines the sort kernel `name` of `sort` over `dtype` and rank `rank`.
pub fn define_sort<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    sort: Sort,
    dtype: DType,
    rank: usize,
) -> Result<()> {
    if rank == 0 {
        return Err(Error::Unsupported(format!("{name}: a sort of rank 0")));
    }
    let c = rank - 1;
    let k = declare_kernel(
        g,
        name,
        &[false, true, false, false],
        &[true, true, true, true],
        3 + 3 * c + 2,
    )?;
    let [out, x, perm, tmp] = [0, 1, 2, 3].map(|i| k.pointers[i]);
    let s = &k.scalars;
    let (lanes, len, passes) = (s[0], s[1], s[2]);
    let dims = s[3..3 + c].to_vec();
    let strides = vec![
        s[3 + c..3 + 2 * c].to_vec(),
        s[3 + 2 * c..3 + 3 * c].to_vec(),
    ];
    let (x_step, out_step) = (s[3 + 3 * c], s[4 + 3 * c]);
    let i64t = g.i64();
    // The merge's two cursors (allocated in the entry block: registers once promoted).
    let (ci, cj) = (
        bx(g.b.build_alloca(i64t, "i"))?,
        bx(g.b.build_alloca(i64t, "j"))?,
    );
    let mul = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_mul(a, b, ""));
    let add = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_add(a, b, ""));
    let min = |a: IntValue<'ctx>, b: IntValue<'ctx>| -> Result<IntValue<'ctx>> {
        let lt = bx(g.b.build_int_compare(IntPredicate::ULT, a, b, ""))?;
        Ok(bx(g.b.build_select(lt, a, b, ""))?.into_int_value())
    };
    let at = |p: PointerValue<'ctx>, i: IntValue<'ctx>| load(g, p, DType::I64, i);
    let put = |p: PointerValue<'ctx>, i: IntValue<'ctx>, v: IntValue<'ctx>| {
        store(g, p, DType::I64, i, v.into())
    };
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, lanes, "lanes", |l| {
        let offs = offsets(g, l, &dims, &strides)?;
        let base = mul(l, len)?;
        let elem = |pos: IntValue<'ctx>| -> Result<BasicValueEnum<'ctx>> {
            load(g, x, dtype, add(offs[0], mul(pos, x_step)?)?)
        };
        counted_loop(g, k.func, g.c64(0), g.c64(1), len, "iota", |i| {
            put(perm, add(base, i)?, i)
        })?;
        counted_loop(g, k.func, g.c64(0), g.c64(1), passes, "passes", |pass| {
            let width = bx(g.b.build_left_shift(g.c64(1), pass, "width"))?;
            let odd = bx(g.b.build_int_compare(
                IntPredicate::NE,
                bx(g.b.build_and(pass, g.c64(1), ""))?,
                g.c64(0),
                "odd",
            ))?;
            let src = bx(g.b.build_select(odd, tmp, perm, "src"))?.into_pointer_value();
            let dst = bx(g.b.build_select(odd, perm, tmp, "dst"))?.into_pointer_value();
            let pair = mul(width, g.c64(2))?;
            counted_loop(g, k.func, g.c64(0), pair, len, "runs", |lo| {
                let mid = min(add(lo, width)?, len)?;
                let hi = min(add(lo, pair)?, len)?;
                bx(g.b.build_store(ci, lo))?;
                bx(g.b.build_store(cj, mid))?;
                counted_loop(g, k.func, lo, g.c64(1), hi, "merge", |kk| {
                    let i = bx(g.b.build_load(i64t, ci, "i"))?.into_int_value();
                    let j = bx(g.b.build_load(i64t, cj, "j"))?.into_int_value();
                    let right_left = bx(g.b.build_int_compare(IntPredicate::ULT, j, hi, ""))?;
                    let left_done = bx(g.b.build_int_compare(IntPredicate::UGE, i, mid, ""))?;
                    // Positions to compare, kept inside the runs when one is used up.
                    let il = bx(g.b.build_select(left_done, lo, i, ""))?.into_int_value();
                    let jl = bx(g.b.build_select(right_left, j, lo, ""))?.into_int_value();
                    let pi = at(src, add(base, il)?)?.into_int_value();
                    let pj = at(src, add(base, jl)?)?.into_int_value();
                    let (ei, ej) = (elem(pi)?, elem(pj)?);
                    // Ascending: the right one first if it is before the left one; descending,
                    // if the left one is before it.
                    let right_first = if sort.descending {
                        before(g, dtype, ei, ej)?
                    } else {
                        before(g, dtype, ej, ei)?
                    };
                    let take = bx(g.b.build_or(left_done, right_first, ""))?;
                    let take_right = bx(g.b.build_and(right_left, take, "take_right"))?;
                    let p = bx(g.b.build_select(take_right, pj, pi, ""))?.into_int_value();
                    put(dst, add(base, kk)?, p)?;
                    let inc = bx(g.b.build_int_z_extend(take_right, i64t, ""))?;
                    bx(g.b.build_store(cj, add(j, inc)?))?;
                    let i_next = bx(g.b.build_int_sub(add(i, g.c64(1))?, inc, ""))?;
                    bx(g.b.build_store(ci, i_next))?;
                    Ok(())
                })
            })
        })?;
        // After an odd number of passes the positions are in `tmp`.
        let odd = bx(g.b.build_int_compare(
            IntPredicate::NE,
            bx(g.b.build_and(passes, g.c64(1), ""))?,
            g.c64(0),
            "",
        ))?;
        let sorted = bx(g.b.build_select(odd, tmp, perm, "sorted"))?.into_pointer_value();
        counted_loop(g, k.func, g.c64(0), g.c64(1), len, "write", |kk| {
            let p = at(sorted, add(base, kk)?)?.into_int_value();
            let to = add(offs[1], mul(kk, out_step)?)?;
            if sort.values {
                store(g, out, dtype, to, elem(p)?)
            } else {
                store(g, out, DType::I64, to, p.into())
            }
        })
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of `sort` on `[x]`: the output (x's shape, contiguous) and the parameters after
/// the scratch pointers; the scratch holds `2 * lanes * len` i64 (`Launch::out_shape`'s
/// elements times two).
pub fn sort_launch<T: Operand>(sort: Sort, inputs: &[T]) -> Result<Launch> {
    let [x] = inputs else {
        return Err(Error::Runtime("a sort takes one input".into()));
    };
    let shape = x.shape().to_vec();
    let a = sort.axis;
    if a >= shape.len() {
        return Err(Error::Shape(format!(
            "sort: axis {a} of an array of rank {}",
            shape.len()
        )));
    }
    let x_st: Vec<i64> = x.strides().iter().map(|&s| s as i64).collect();
    let out_st = row_major(&shape);
    let lane = |v: &[i64]| without(v, a);
    let dims: Vec<i64> = lane(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
    let lanes: i64 = dims.iter().product();
    let len = shape[a];
    let passes = len.max(1).next_power_of_two().trailing_zeros() as i64;
    let mut scalars = vec![lanes, len as i64, passes];
    scalars.extend(&dims);
    scalars.extend(lane(&x_st));
    scalars.extend(lane(&out_st));
    scalars.extend([x_st[a], out_st[a]]);
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: lanes > 0 && len > 0,
    })
}
