//! `take` and `take_along_axis` as GPU kernels: a grid-stride loop over the result's elements,
//! each reading its index (i32 or i64; negative counts from the end), checking it against the
//! axis and copying the element it picks.
//!
//! Parameters (docs/gpu.md, "Gather"): `out`, `data`, `index`, `flag` (one i32 the kernel sets
//! to 1 when an index is out of range, and otherwise leaves alone), then `n`, `dims[r]` (the
//! result's shape), `data_strides[r]` and `index_strides[r]` (elements, over the result's index
//! space: 0 where the operand is the same for every value of that dim; the data's stride is 0
//! along the dims the index picks), `axis_len` and `axis_stride` (the indexed axis of the data).
//! A launcher that finds the flag set runs the step's `perform` on the host, whose error names
//! the index (`KernelInfo::index_error`): the message is written once, there.

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::DType;
use crate::tensor::{Tensor, TensorRef};
use inkwell::IntPredicate;

/// Which gather a kernel computes: `take` along `axis`, or `take_along_axis` (`along`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gather {
    pub axis: usize,
    pub along: bool,
}

/// Defines the gather kernel `name` of a result of rank `rank`, elements of `data`, indices
/// of `index`.
pub fn define_gather(
    g: &Gen<'_>,
    name: &str,
    data: DType,
    index: DType,
    rank: usize,
) -> Result<()> {
    if !matches!(index, DType::I32 | DType::I64) {
        return Err(Error::Unsupported(format!(
            "{name}: indices of {index} (i32 or i64 expected)"
        )));
    }
    let k = declare_kernel(
        g,
        name,
        &[false, true, true, false],
        &[true, true, true, true],
        1 + 3 * rank + 2,
    )?;
    let [out, src, idx, flag] = [k.pointers[0], k.pointers[1], k.pointers[2], k.pointers[3]];
    let s = &k.scalars;
    let n = s[0];
    let dims = s[1..1 + rank].to_vec();
    let strides = vec![
        s[1 + rank..1 + 2 * rank].to_vec(),
        s[1 + 2 * rank..1 + 3 * rank].to_vec(),
    ];
    let (axis_len, axis_stride) = (s[1 + 3 * rank], s[2 + 3 * rank]);
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, n, "elems", |i| {
        let offs = offsets(g, i, &dims, &strides)?;
        at_position(g, k.func, (idx, index, offs[1]), axis_len, flag, |p| {
            let along = bx(g.b.build_int_mul(p, axis_stride, ""))?;
            let at = bx(g.b.build_int_add(offs[0], along, "at"))?;
            let v = load(g, src, data, at)?;
            store(g, out, data, i, v)
        })?;
        Ok(())
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// Loads the index at `at` of `idx` (i32 or i64), makes it a position along an axis of `len`
/// (negative counts from the end), and runs `body` with it, or, when it is out of range,
/// sets `flag` instead (the check gathers and scatters share).
pub fn at_position<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    (idx, index, at): (
        inkwell::values::PointerValue<'ctx>,
        DType,
        inkwell::values::IntValue<'ctx>,
    ),
    len: inkwell::values::IntValue<'ctx>,
    flag: inkwell::values::PointerValue<'ctx>,
    body: impl FnOnce(inkwell::values::IntValue<'ctx>) -> Result<()>,
) -> Result<()> {
    let raw = load(g, idx, index, at)?.into_int_value();
    let raw = bx(g.b.build_int_s_extend_or_bit_cast(raw, g.i64(), "index"))?;
    let negative =
        bx(g.b.build_int_compare(IntPredicate::SLT, raw, g.c64(0), "negative"))?;
    let wrapped = bx(g.b.build_int_add(raw, len, "wrapped"))?;
    let p = bx(g.b.build_select(negative, wrapped, raw, "position"))?.into_int_value();
    // Unsigned: what is still negative after wrapping is out of range too.
    let bad = bx(g.b.build_int_compare(IntPredicate::UGE, p, len, "bad"))?;
    let (on_bad, on_good, next) = (
        g.ctx.append_basic_block(func, "bad"),
        g.ctx.append_basic_block(func, "good"),
        g.ctx.append_basic_block(func, "next"),
    );
    bx(g.b.build_conditional_branch(bad, on_bad, on_good))?;
    g.b.position_at_end(on_bad);
    bx(g.b.build_store(flag, g.c32(1)))?;
    bx(g.b.build_unconditional_branch(next))?;
    g.b.position_at_end(on_good);
    body(p)?;
    bx(g.b.build_unconditional_branch(next))?;
    g.b.position_at_end(next);
    Ok(())
}

/// The launch of a gather on `[data, index]`: the result's shape and
/// `[n, dims.., data_strides.., index_strides.., axis_len, axis_stride]`.
pub fn gather_launch<T: Operand>(gather: Gather, inputs: &[T]) -> Result<Launch> {
    let [data, index] = inputs else {
        return Err(Error::Runtime(
            "a gather takes the data and the indices".into(),
        ));
    };
    let (xs, xst) = (data.shape(), data.strides());
    let (is, ist) = (index.shape(), index.strides());
    let a = gather.axis;
    if a >= xs.len() {
        return Err(Error::Shape(format!(
            "gather: axis {a} of an array of rank {}",
            xs.len()
        )));
    }
    let (shape, ds, dst): (Vec<usize>, Vec<i64>, Vec<i64>) = if gather.along {
        if is.len() != xs.len() {
            return Err(Error::Shape(format!(
                "take_along_axis: indices of shape {is:?} for an array of {xs:?}"
            )));
        }
        let mut shape = Vec::new();
        for d in 0..xs.len() {
            shape.push(match (xs[d], is[d]) {
                _ if d == a => is[d],
                (x, i) if x == i || i == 1 => x,
                (1, i) => i,
                _ => {
                    return Err(Error::Shape(format!(
                        "take_along_axis: {xs:?} and indices of {is:?} do not broadcast"
                    )))
                }
            });
        }
        let stretched = |dims: &[usize], st: &[isize], picked: Option<usize>| -> Vec<i64> {
            (0..dims.len())
                .map(|d| match dims[d] {
                    _ if Some(d) == picked => 0,
                    1 => 0,
                    _ => st[d] as i64,
                })
                .collect()
        };
        let ds = stretched(xs, &xst, Some(a));
        let dst = stretched(is, &ist, None);
        (shape, ds, dst)
    } else {
        let mut shape = xs[..a].to_vec();
        shape.extend(is);
        shape.extend(&xs[a + 1..]);
        let mut ds: Vec<i64> = xst[..a].iter().map(|&s| s as i64).collect();
        ds.extend(std::iter::repeat_n(0, is.len()));
        ds.extend(xst[a + 1..].iter().map(|&s| s as i64));
        let mut dst = vec![0i64; a];
        dst.extend(ist.iter().map(|&s| s as i64));
        dst.resize(shape.len(), 0);
        (shape, ds, dst)
    };
    let n: usize = shape.iter().product();
    let mut scalars = vec![n as i64];
    scalars.extend(shape.iter().map(|&d| d as i64));
    scalars.extend(ds);
    scalars.extend(dst);
    scalars.extend([xs[a] as i64, xst[a] as i64]);
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: n > 0,
    })
}

/// The gather on the host (`perform`): for a gather with no element, whose indices are
/// still checked, and to name the index a kernel found out of range.
pub fn gather_on_host(
    gather: Gather,
    data: &TensorRef<'_>,
    index: &TensorRef<'_>,
) -> Result<Tensor> {
    let op = if gather.along {
        crate::ir::Op::TakeAlongAxis { axis: gather.axis }
    } else {
        crate::ir::Op::Take { axis: gather.axis }
    };
    let mut out = crate::perform::perform(&op, &[&data.to_owned(), &index.to_owned()])?;
    Ok(out.remove(0))
}
