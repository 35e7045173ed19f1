//! `one_hot` as a GPU kernel: element `i` of the contiguous result (`indices.shape + [depth]`)
//! is 1 where the index at `i / depth` equals `i % depth`, else 0; an index outside
//! `0..depth` matches nothing, so its row is zeros (JAX's rule, `perform::index::one_hot`'s).
//!
//! Parameters (docs/gpu.md, "One-hot"): `out`, `index`, then `n`, `depth`, `dims[r]` (the
//! indices' shape) and `index_strides[r]` (elements).

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{Launch, Operand};
use super::scalar::konst;
use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::IntPredicate;

/// Defines the one-hot kernel `name` of indices of `index` and rank `rank` into `dtype`.
pub fn define_one_hot(
    g: &Gen<'_>,
    name: &str,
    index: DType,
    dtype: DType,
    rank: usize,
) -> Result<()> {
    if !matches!(index, DType::I32 | DType::I64) {
        return Err(Error::Unsupported(format!(
            "{name}: indices of {index} (i32 or i64 expected)"
        )));
    }
    let k = declare_kernel(g, name, &[false, true], &[true, true], 2 + 2 * rank)?;
    let (out, idx) = (k.pointers[0], k.pointers[1]);
    let s = &k.scalars;
    let (n, depth) = (s[0], s[1]);
    let dims = s[2..2 + rank].to_vec();
    let strides = vec![s[2 + rank..2 + 2 * rank].to_vec()];
    let (one, zero) = (konst(g, dtype, 1.0), konst(g, dtype, 0.0));
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, n, "elems", |i| {
        let column = bx(g.b.build_int_unsigned_rem(i, depth, "column"))?;
        let row = bx(g.b.build_int_unsigned_div(i, depth, "row"))?;
        let at = offsets(g, row, &dims, &strides)?;
        let v = load(g, idx, index, at[0])?.into_int_value();
        let v = bx(g.b.build_int_s_extend_or_bit_cast(v, g.i64(), "index"))?;
        let hit = bx(g.b.build_int_compare(IntPredicate::EQ, v, column, "hit"))?;
        let x = bx(g.b.build_select(hit, one, zero, "x"))?;
        store(g, out, dtype, i, x)
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of a one-hot of `depth` on `[indices]`: the result's shape and
/// `[n, depth, dims.., index_strides..]`.
pub fn one_hot_launch<T: Operand>(depth: usize, inputs: &[T]) -> Result<Launch> {
    let [idx] = inputs else {
        return Err(Error::Runtime("one_hot takes the indices".into()));
    };
    let mut shape = idx.shape().to_vec();
    shape.push(depth);
    let n: usize = shape.iter().product();
    let mut scalars = vec![n as i64, depth as i64];
    scalars.extend(idx.shape().iter().map(|&d| d as i64));
    scalars.extend(idx.strides().iter().map(|&s| s as i64));
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: n > 0,
    })
}
