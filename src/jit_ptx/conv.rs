//! `conv2d` as a GPU kernel: one thread per output element, a direct convolution summing the
//! filter's taps over the group's channels in `(channel, row, column)` order, padding read as
//! zero, with the GEMM's arithmetic (`gemm`'s module doc): the terms split into chunks of
//! `kstep` (`gemm::k_step`), each summed by FMAs in order from zero, the chunks added in
//! order. `perform` multiplies the unrolled image (im2col, zeros in the padding) with that GEMM
//! in the same order, so the kernel gives the interpreter's bits. Not the fastest convolution
//! a GPU can run (cuDNN's implicit GEMMs tile the filters through shared memory); it keeps a
//! convolution on the device instead of two copies through the host.
//!
//! Parameters (docs/gpu.md, "Convolution"): `out`, `x`, `w`, then `n_out`, `dims[4]` (the
//! output's `N, O, OH, OW`), `cg` (channels per group), `kh`, `kw`, `h`, `w` (the image's),
//! `og` (filters per group), `kstep`, `x_strides[4]`, `w_strides[4]` (elements). Strides,
//! padding and dilation are constants of the kernel.

use super::gen::{bx, Gen};
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store};
use super::launch::{Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::window::Conv2d;
use crate::ir::DType;
use inkwell::values::IntValue;
use inkwell::IntPredicate;

/// Defines the convolution kernel `name` of `conv` over floats of `dtype`.
pub fn define_conv<'ctx>(g: &Gen<'ctx>, name: &str, conv: &Conv2d, dtype: DType) -> Result<()> {
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::Unsupported(format!(
            "{name}: a convolution of {dtype}"
        )));
    }
    let k = declare_kernel(
        g,
        name,
        &[false, true, true],
        &[true, true, true],
        1 + 4 + 7 + 8,
    )?;
    let (out, x, w) = (k.pointers[0], k.pointers[1], k.pointers[2]);
    let s = &k.scalars;
    let n_out = s[0];
    let dims = s[1..5].to_vec();
    let (cg, kh, kw, h, wd, og, kstep) = (s[5], s[6], s[7], s[8], s[9], s[10], s[11]);
    let xs = &s[12..16];
    let ws = &s[16..20];
    let fty = g.float_type(dtype);
    // The running sums, in registers once LLVM promotes them (allocated in the entry block).
    let total = bx(g.b.build_alloca(fty, "total"))?;
    let acc = bx(g.b.build_alloca(fty, "acc"))?;
    let zero = fty.const_zero();
    let c64 = |v: usize| g.c64(v as i64);
    let mul = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_mul(a, b, ""));
    let add = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_add(a, b, ""));
    // The output coordinates: offsets with unit strides, one coordinate each.
    let unit = |d: usize| (0..4).map(|e| g.c64((d == e) as i64)).collect::<Vec<_>>();
    let coords: Vec<Vec<IntValue>> = (0..4).map(unit).collect();
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, n_out, "outputs", |i| {
        let at = offsets(g, i, &dims, &coords)?;
        let (n, o, oy, ox) = (at[0], at[1], at[2], at[3]);
        let group = bx(g.b.build_int_unsigned_div(o, og, "group"))?;
        let c0 = mul(group, cg)?;
        let y0 =
            bx(g.b.build_int_sub(mul(oy, c64(conv.stride[0]))?, c64(conv.padding[0]), ""))?;
        let x0 =
            bx(g.b.build_int_sub(mul(ox, c64(conv.stride[1]))?, c64(conv.padding[1]), ""))?;
        let image = mul(n, xs[0])?;
        let filter = mul(o, ws[0])?;
        let taps = mul(kh, kw)?;
        let terms = mul(cg, taps)?;
        bx(g.b.build_store(total, zero))?;
        // Chunks of `kstep` terms, each from zero; the first stored, the rest added.
        counted_loop(g, k.func, g.c64(0), kstep, terms, "chunks", |first| {
            bx(g.b.build_store(acc, zero))?;
            let end = add(first, kstep)?;
            let lt = bx(g.b.build_int_compare(IntPredicate::ULT, end, terms, ""))?;
            let end = bx(g.b.build_select(lt, end, terms, "end"))?.into_int_value();
            counted_loop(g, k.func, first, g.c64(1), end, "terms", |t| {
                let c = bx(g.b.build_int_unsigned_div(t, taps, "c"))?;
                let tap = bx(g.b.build_int_unsigned_rem(t, taps, "tap"))?;
                let ki = bx(g.b.build_int_unsigned_div(tap, kw, "ki"))?;
                let kj = bx(g.b.build_int_unsigned_rem(tap, kw, "kj"))?;
                let iy = add(y0, mul(ki, c64(conv.dilation[0]))?)?;
                let ix = add(x0, mul(kj, c64(conv.dilation[1]))?)?;
                // Unsigned: a negative coordinate is out of range too.
                let in_y = bx(g.b.build_int_compare(IntPredicate::ULT, iy, h, ""))?;
                let in_x = bx(g.b.build_int_compare(IntPredicate::ULT, ix, wd, ""))?;
                let inside = bx(g.b.build_and(in_y, in_x, "inside"))?;
                let channel = mul(add(c0, c)?, xs[1])?;
                let here = add(add(mul(iy, xs[2])?, mul(ix, xs[3])?)?, add(image, channel)?)?;
                // Padding reads the plane's first element and uses zero.
                let safe = bx(g.b.build_select(inside, here, add(image, channel)?, ""))?;
                let xv = load(g, x, dtype, safe.into_int_value())?.into_float_value();
                let xv = bx(g.b.build_select(inside, xv, zero, "xv"))?.into_float_value();
                let wat = add(
                    add(filter, mul(c, ws[1])?)?,
                    add(mul(ki, ws[2])?, mul(kj, ws[3])?)?,
                )?;
                let wv = load(g, w, dtype, wat)?.into_float_value();
                let a = bx(g.b.build_load(fty, acc, "a"))?.into_float_value();
                let next = g.fcall("fma", &[wv, xv, a])?;
                bx(g.b.build_store(acc, next))?;
                Ok(())
            })?;
            let a = bx(g.b.build_load(fty, acc, "a"))?.into_float_value();
            let sum = bx(g.b.build_load(fty, total, "sum"))?.into_float_value();
            let added = bx(g.b.build_float_add(sum, a, "added"))?;
            let is_first =
                bx(g.b.build_int_compare(IntPredicate::EQ, first, g.c64(0), "first"))?;
            let v = bx(g.b.build_select(is_first, a, added, ""))?;
            bx(g.b.build_store(total, v))?;
            Ok(())
        })?;
        let v = bx(g.b.build_load(fty, total, "v"))?;
        store(g, out, dtype, i, v)
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of `conv` on `[x, w]` of `dtype`: the output's shape and the parameters.
pub fn conv_launch<T: Operand>(conv: &Conv2d, dtype: DType, inputs: &[T]) -> Result<Launch> {
    let [x, w] = inputs else {
        return Err(Error::Runtime("conv2d takes an image and filters".into()));
    };
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 4 || ws.len() != 4 {
        return Err(Error::Shape(format!(
            "conv2d: the image {xs:?} and filters {ws:?} must have rank 4"
        )));
    }
    conv.check().map_err(Error::Shape)?;
    conv.check_channels(Some(xs[1]), Some(ws[0]), Some(ws[1]))
        .map_err(Error::Shape)?;
    let o = conv
        .output([xs[2], xs[3]], [ws[2], ws[3]])
        .map_err(Error::Shape)?;
    let shape = vec![xs[0], ws[0], o[0], o[1]];
    let n: usize = shape.iter().product();
    let terms = ws[1] * ws[2] * ws[3];
    let kstep = crate::gemm::k_step(terms, crate::gemm::default_kc(dtype)).max(1);
    let mut scalars = vec![n as i64];
    scalars.extend(shape.iter().map(|&d| d as i64));
    scalars.extend(
        [
            ws[1],
            ws[2],
            ws[3],
            xs[2],
            xs[3],
            ws[0] / conv.groups,
            kstep,
        ]
        .map(|v| v as i64),
    );
    scalars.extend(x.strides().iter().map(|&s| s as i64));
    scalars.extend(w.strides().iter().map(|&s| s as i64));
    Ok(Launch {
        out_shape: shape,
        scalars,
        work: n > 0,
    })
}
