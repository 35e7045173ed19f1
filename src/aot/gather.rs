//! The code of gather and scatter steps, written into the entry point: loops over the step's
//! (collapsed) shape with compile-time strides, each index loaded, made a position (negative
//! counts from the end), checked against the axis, and turned into a byte offset. An index out
//! of range returns the step's failure code from the entry point at once.
//!
//! Written here rather than as a kernel of `codegen::clif`: the JIT runs these ops through
//! `perform` on the host, so only the object needs them, and with every stride known the
//! loops are a few instructions each.

use super::clif::mem;
use super::plan::collapse;
use crate::codegen::clif::scalar_ops::clif_type;
use crate::error::{Error, Result};
use crate::ir::DType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// Where an index points: along an axis of `len` elements, `stride` bytes apart; an index out
/// of range makes the entry point return `code`.
#[derive(Copy, Clone)]
pub struct Axis {
    pub len: usize,
    pub stride: i64,
    pub code: u32,
}

/// An integer type as wide as one element of `dtype`: elements are moved as bits.
pub fn bits_type(dtype: DType) -> Type {
    match dtype.size() {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        _ => types::I64,
    }
}

/// The byte offset along `axis` of the index at `at` (i32 or i64 `index`), after checking it.
fn position(b: &mut FunctionBuilder, at: Value, index: DType, axis: Axis) -> Result<Value> {
    let i = match index {
        DType::I32 => {
            let v = b.ins().load(types::I32, mem(), at, 0);
            b.ins().sextend(types::I64, v)
        }
        DType::I64 => b.ins().load(types::I64, mem(), at, 0),
        t => {
            return Err(Error::Unsupported(format!(
                "internal: indices of {t} in a gather"
            )))
        }
    };
    let n = axis.len as i64;
    let negative = b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
    let wrapped = b.ins().iadd_imm_s(i, n);
    let p = b.ins().select(negative, wrapped, i);
    // Unsigned: what is still negative after wrapping is out of range too.
    let bad = b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, p, n);
    let (fail, ok) = (b.create_block(), b.create_block());
    b.ins().brif(bad, fail, &[], ok, &[]);
    b.switch_to_block(fail);
    let code = b.ins().iconst(types::I32, axis.code as i64);
    b.ins().return_(&[code]);
    b.switch_to_block(ok);
    Ok(b.ins().imul_imm_s(p, axis.stride))
}

/// `out[p] = data[p + position(index[p])]` over `shape`; `strides` are those of `data`,
/// `index` and `out` (bytes), `bases` their first elements.
pub fn gather(
    b: &mut FunctionBuilder,
    shape: &[usize],
    strides: [Vec<i64>; 3],
    bases: [Value; 3],
    dtypes: [DType; 2],
    axis: Axis,
) -> Result<()> {
    let [data, index] = dtypes;
    let Some((sh, st)) = collapse(shape, &strides) else {
        return Ok(());
    };
    let ty = bits_type(data);
    // The trailing dims along which the index stays put (an embedding's row): its position is
    // found once, and the row copied in an inner loop.
    let inner = st[1].iter().rev().take_while(|&&s| s == 0).count();
    let split = sh.len() - inner;
    let (outer_st, inner_st): (Vec<Vec<i64>>, Vec<Vec<i64>>) = st
        .iter()
        .map(|s| (s[..split].to_vec(), s[split..].to_vec()))
        .unzip();
    let inner_sh = sh[split..].to_vec();
    super::emit::nest(b, &sh[..split], &outer_st, bases.to_vec(), &mut |b, p| {
        let off = position(b, p[1], index, axis)?;
        let from = b.ins().iadd(p[0], off);
        let es = data.size() as i64;
        if let [n] = inner_sh[..] {
            if inner_st[0][0] == es && inner_st[2][0] == es {
                return copy_bytes(b, from, p[2], n as i64 * es, ty);
            }
        }
        let copy_st = vec![inner_st[0].clone(), inner_st[2].clone()];
        super::emit::nest(b, &inner_sh, &copy_st, vec![from, p[2]], &mut |b, q| {
            let v = b.ins().load(ty, mem(), q[0], 0);
            b.ins().store(mem(), v, q[1], 0);
            Ok(())
        })
    })
}

/// Copies `bytes` (a multiple of the size of `ty`) from `src` to `dst`: 64 bytes at a
/// time (four 16-byte moves, so the loop's own work is a quarter of the moves'), then 16,
/// then element by element (a row of a gather: an inline copy keeps the object free of a C
/// library call beyond libm).
fn copy_bytes(b: &mut FunctionBuilder, src: Value, dst: Value, bytes: i64, ty: Type) -> Result<()> {
    let (wide, chunks) = (bytes / 64 * 64, bytes / 16 * 16);
    // Moves of `t` from `start` to `end`, `moves` of them per iteration.
    let step = |b: &mut FunctionBuilder, (start, end): (i64, i64), t: Type, moves: i64| {
        let size = t.bytes() as i64;
        let (start, end) = (
            b.ins().iconst(types::I64, start),
            b.ins().iconst(types::I64, end),
        );
        super::clif::for_lt(b, start, end, size * moves, |b, i| {
            let (s, d) = (b.ins().iadd(src, i), b.ins().iadd(dst, i));
            // All the loads before the stores: the rows of a gather never overlap.
            let v: Vec<Value> = (0..moves)
                .map(|m| b.ins().load(t, mem(), s, (m * size) as i32))
                .collect();
            for (m, v) in v.into_iter().enumerate() {
                b.ins().store(mem(), v, d, (m as i64 * size) as i32);
            }
            Ok(())
        })
    };
    if wide > 0 {
        step(b, (0, wide), types::I8X16, 4)?;
    }
    if chunks > wide {
        step(b, (wide, chunks), types::I8X16, 1)?;
    }
    if bytes > chunks {
        step(b, (chunks, bytes), ty, 1)?;
    }
    Ok(())
}

/// Over `shape` in row-major order, `target[p + position(index[p])] = updates[p]` (`+=` with
/// `add`); `strides` are those of `updates`, `index` and `target`.
pub fn scatter(
    b: &mut FunctionBuilder,
    shape: &[usize],
    strides: [Vec<i64>; 3],
    bases: [Value; 3],
    dtypes: [DType; 2],
    axis: Axis,
    add: bool,
) -> Result<()> {
    let [data, index] = dtypes;
    // Collapsing keeps the row-major order, so positions repeat in index order.
    let Some((sh, st)) = collapse(shape, &strides) else {
        return Ok(());
    };
    super::emit::nest(b, &sh, &st, bases.to_vec(), &mut |b, p| {
        let off = position(b, p[1], index, axis)?;
        let to = b.ins().iadd(p[2], off);
        if add {
            let ty = clif_type(data);
            let u = b.ins().load(ty, mem(), p[0], 0);
            let old = b.ins().load(ty, mem(), to, 0);
            let sum = if data.is_float() {
                b.ins().fadd(old, u)
            } else {
                b.ins().iadd(old, u)
            };
            b.ins().store(mem(), sum, to, 0);
        } else {
            let ty = bits_type(data);
            let u = b.ins().load(ty, mem(), p[0], 0);
            b.ins().store(mem(), u, to, 0);
        }
        Ok(())
    })
}

/// Every index of the `index` array over `shape` (byte `strides`, first at `base`) checked, as
/// [`gather`] checks them; nothing else.
pub fn check_indices(
    b: &mut FunctionBuilder,
    shape: &[usize],
    strides: &[i64],
    base: Value,
    index: DType,
    axis: Axis,
) -> Result<()> {
    let Some((sh, st)) = collapse(shape, &[strides.to_vec()]) else {
        return Ok(());
    };
    super::emit::nest(b, &sh, &st, vec![base], &mut |b, p| {
        position(b, p[0], index, axis).map(|_| ())
    })
}
