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
use super::kernel::{counted_loop, declare_kernel, grid_stride, load, offsets, store, window_of};
use super::launch::{Launch, Operand};
use crate::error::{Error, Result};
use crate::ir::window::Conv2d;
use crate::ir::DType;
use inkwell::values::{FloatValue, IntValue};
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

/// The chunked dot product of the GEMM (`gemm`'s order): terms `0..n` in chunks of `kstep`,
/// each summed by FMAs of `term(t)`'s two factors from zero, the chunks added in order.
fn gemm_dot<'ctx>(
    g: &Gen<'ctx>,
    func: inkwell::values::FunctionValue<'ctx>,
    slots: (
        inkwell::values::PointerValue<'ctx>,
        inkwell::values::PointerValue<'ctx>,
    ),
    fty: inkwell::types::FloatType<'ctx>,
    (n, kstep): (IntValue<'ctx>, IntValue<'ctx>),
    mut term: impl FnMut(IntValue<'ctx>) -> Result<(FloatValue<'ctx>, FloatValue<'ctx>)>,
) -> Result<FloatValue<'ctx>> {
    let (total, acc) = slots;
    let zero = fty.const_zero();
    bx(g.b.build_store(total, zero))?;
    counted_loop(g, func, g.c64(0), kstep, n, "chunks", |first| {
        bx(g.b.build_store(acc, zero))?;
        let end = bx(g.b.build_int_add(first, kstep, ""))?;
        let lt = bx(g.b.build_int_compare(IntPredicate::ULT, end, n, ""))?;
        let end = bx(g.b.build_select(lt, end, n, "end"))?.into_int_value();
        counted_loop(g, func, first, g.c64(1), end, "terms", |t| {
            let (a, b) = term(t)?;
            let s = bx(g.b.build_load(fty, acc, "s"))?.into_float_value();
            bx(g.b.build_store(acc, g.fcall("fma", &[a, b, s])?))?;
            Ok(())
        })?;
        let a = bx(g.b.build_load(fty, acc, "a"))?.into_float_value();
        let sum = bx(g.b.build_load(fty, total, "sum"))?.into_float_value();
        let added = bx(g.b.build_float_add(sum, a, ""))?;
        let is_first = bx(g.b.build_int_compare(IntPredicate::EQ, first, g.c64(0), ""))?;
        bx(g.b.build_store(total, bx(g.b.build_select(is_first, a, added, ""))?))?;
        Ok(())
    })?;
    Ok(bx(g.b.build_load(fty, total, "dot"))?.into_float_value())
}

/// Defines `conv2d`'s image gradient kernel (`grad` false) or filter gradient kernel (`grad`
/// true) of `conv` over `dtype`.
///
/// Image gradient, parameters `out, g, w, n_out, dims[4] (N, C, H, W), og, cg, kh, kw, oh, ow,
/// kstep, g_strides[4], w_strides[4]`: one thread per image element, adding, for each tap in
/// order whose window holds it, the dot product over the group's filters (`perform`'s col2im
/// of its GEMM). Filter gradient, parameters `out, x, g, n_out, dims[4] (O, CG, KH, KW), n, c,
/// h, w, oh, ow, og, chunk_images, kc, x_strides[4], g_strides[4]`: one thread per filter
/// element, the dot product over each chunk of images' output positions (the GEMM's k, in
/// chunks of `k_step`), the image chunks added in order, as `perform` chunks its unrolling.
pub fn define_conv_grad<'ctx>(
    g: &Gen<'ctx>,
    name: &str,
    conv: &Conv2d,
    dtype: DType,
    filter: bool,
) -> Result<()> {
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::Unsupported(format!(
            "{name}: a convolution of {dtype}"
        )));
    }
    let n_scalars = if filter { 1 + 4 + 9 + 8 } else { 1 + 4 + 7 + 8 };
    let k = declare_kernel(
        g,
        name,
        &[false, true, true],
        &[true, true, true],
        n_scalars,
    )?;
    let (out, p1, p2) = (k.pointers[0], k.pointers[1], k.pointers[2]);
    let s = k.scalars.clone();
    let fty = g.float_type(dtype);
    let slots = (
        bx(g.b.build_alloca(fty, "total"))?,
        bx(g.b.build_alloca(fty, "acc"))?,
    );
    let image_sum = bx(g.b.build_alloca(fty, "image_sum"))?;
    let zero = fty.const_zero();
    let c64 = |v: i64| g.c64(v);
    let mul = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_mul(a, b, ""));
    let add = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_add(a, b, ""));
    let udiv = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_unsigned_div(a, b, ""));
    let urem = |a: IntValue<'ctx>, b: IntValue<'ctx>| bx(g.b.build_int_unsigned_rem(a, b, ""));
    let dot4 = |st: &[IntValue<'ctx>], at: [IntValue<'ctx>; 4]| -> Result<IntValue<'ctx>> {
        add(
            add(mul(at[0], st[0])?, mul(at[1], st[1])?)?,
            add(mul(at[2], st[2])?, mul(at[3], st[3])?)?,
        )
    };
    let n_out = s[0];
    let dims = s[1..5].to_vec();
    let unit = |d: usize| (0..4).map(|e| g.c64((d == e) as i64)).collect::<Vec<_>>();
    let coords: Vec<Vec<IntValue>> = (0..4).map(unit).collect();
    let (start, step) = grid_stride(g)?;
    counted_loop(g, k.func, start, step, n_out, "elems", |i| {
        let at = offsets(g, i, &dims, &coords)?;
        let v = if !filter {
            // dx[n, c, y, x]
            let (og, cg, kh, kw, oh, ow, kstep) = (s[5], s[6], s[7], s[8], s[9], s[10], s[11]);
            let (gs, ws) = (&s[12..16], &s[16..20]);
            let (n, call, y, x) = (at[0], at[1], at[2], at[3]);
            let group = udiv(call, cg)?;
            let c = urem(call, cg)?;
            let o0 = mul(group, og)?;
            bx(g.b.build_store(image_sum, zero))?;
            counted_loop(g, k.func, c64(0), c64(1), kh, "ki", |ki| {
                counted_loop(g, k.func, c64(0), c64(1), kw, "kj", |kj| {
                    // The window whose tap (ki, kj) reads this element, along each axis.
                    let num = |c: IntValue<'ctx>, k: IntValue<'ctx>, a: usize| {
                        let tap = mul(k, c64(conv.dilation[a] as i64))?;
                        add(
                            c,
                            bx(g.b.build_int_sub(c64(conv.padding[a] as i64), tap, ""))?,
                        )
                    };
                    let (ny, nx) = (num(y, ki, 0)?, num(x, kj, 1)?);
                    let (oy, vy) = window_of(g, ny, conv.stride[0], oh)?;
                    let (ox, vx) = window_of(g, nx, conv.stride[1], ow)?;
                    let valid = bx(g.b.build_and(vy, vx, "valid"))?;
                    let oy = bx(g.b.build_select(valid, oy, c64(0), ""))?.into_int_value();
                    let ox = bx(g.b.build_select(valid, ox, c64(0), ""))?.into_int_value();
                    let d = gemm_dot(g, k.func, slots, fty, (og, kstep), |o| {
                        let of = add(o0, o)?;
                        let wv = load(g, p2, dtype, dot4(ws, [of, c, ki, kj])?)?.into_float_value();
                        let gv = load(g, p1, dtype, dot4(gs, [n, of, oy, ox])?)?.into_float_value();
                        Ok((wv, gv))
                    })?;
                    let sum = bx(g.b.build_load(fty, image_sum, "sum"))?.into_float_value();
                    let added = bx(g.b.build_float_add(sum, d, ""))?;
                    bx(g.b.build_store(image_sum, bx(g.b.build_select(valid, added, sum, ""))?))?;
                    Ok(())
                })
            })?;
            bx(g.b.build_load(fty, image_sum, "dx"))?
        } else {
            // dw[o, c, ki, kj]
            let (n_img, h, wd, oh, ow, og, chunk, kc) =
                (s[5], s[7], s[8], s[9], s[10], s[11], s[12], s[13]);
            let cg = dims[1];
            let (xs, gs) = (&s[14..18], &s[18..22]);
            let (o, c, ki, kj) = (at[0], at[1], at[2], at[3]);
            let call = add(mul(udiv(o, og)?, cg)?, c)?;
            let p = mul(oh, ow)?;
            let y0 = bx(g.b.build_int_sub(
                mul(ki, c64(conv.dilation[0] as i64))?,
                c64(conv.padding[0] as i64),
                "",
            ))?;
            let x0 = bx(g.b.build_int_sub(
                mul(kj, c64(conv.dilation[1] as i64))?,
                c64(conv.padding[1] as i64),
                "",
            ))?;
            bx(g.b.build_store(image_sum, zero))?;
            counted_loop(g, k.func, c64(0), chunk, n_img, "images", |first| {
                let end = add(first, chunk)?;
                let lt = bx(g.b.build_int_compare(IntPredicate::ULT, end, n_img, ""))?;
                let end = bx(g.b.build_select(lt, end, n_img, ""))?.into_int_value();
                let width = mul(bx(g.b.build_int_sub(end, first, ""))?, p)?;
                // gemm::k_step(width, kc): near-equal chunks of at most kc.
                let one = c64(1);
                // max(ceil(a / b), 1)
                let ceil_div = |a: IntValue<'ctx>, b: IntValue<'ctx>| -> Result<IntValue<'ctx>> {
                    let q = udiv(add(a, bx(g.b.build_int_sub(b, one, ""))?)?, b)?;
                    let zero = bx(g.b.build_int_compare(IntPredicate::EQ, q, c64(0), ""))?;
                    Ok(bx(g.b.build_select(zero, one, q, ""))?.into_int_value())
                };
                let chunks = ceil_div(width, kc)?;
                let kstep = ceil_div(width, chunks)?;
                let d = gemm_dot(g, k.func, slots, fty, (width, kstep), |t| {
                    let n = add(first, udiv(t, p)?)?;
                    let q = urem(t, p)?;
                    let (oy, ox) = (udiv(q, ow)?, urem(q, ow)?);
                    let iy = add(mul(oy, c64(conv.stride[0] as i64))?, y0)?;
                    let ix = add(mul(ox, c64(conv.stride[1] as i64))?, x0)?;
                    let in_y = bx(g.b.build_int_compare(IntPredicate::ULT, iy, h, ""))?;
                    let in_x = bx(g.b.build_int_compare(IntPredicate::ULT, ix, wd, ""))?;
                    let inside = bx(g.b.build_and(in_y, in_x, ""))?;
                    let here = dot4(xs, [n, call, iy, ix])?;
                    let plane = dot4(xs, [n, call, c64(0), c64(0)])?;
                    let safe = bx(g.b.build_select(inside, here, plane, ""))?.into_int_value();
                    let xv = load(g, p1, dtype, safe)?.into_float_value();
                    let xv = bx(g.b.build_select(inside, xv, zero, ""))?.into_float_value();
                    let gv = load(g, p2, dtype, dot4(gs, [n, o, oy, ox])?)?.into_float_value();
                    Ok((xv, gv))
                })?;
                let sum = bx(g.b.build_load(fty, image_sum, "sum"))?.into_float_value();
                bx(g.b.build_store(image_sum, bx(g.b.build_float_add(sum, d, ""))?))?;
                Ok(())
            })?;
            bx(g.b.build_load(fty, image_sum, "dw"))?
        };
        store(g, out, dtype, i, v)
    })?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// The launch of `conv`'s image gradient (on `[g, w]`, for an image of `image`) or filter
/// gradient (on `[x, g]`, for filters of `kernel`) over `dtype`.
pub fn conv_grad_launch<T: Operand>(
    conv: &Conv2d,
    dtype: DType,
    spatial: [usize; 2],
    filter: bool,
    inputs: &[T],
) -> Result<Launch> {
    let [a, b] = inputs else {
        return Err(Error::Runtime(
            "a convolution gradient takes two inputs".into(),
        ));
    };
    let (as_, bs) = (a.shape(), b.shape());
    if as_.len() != 4 || bs.len() != 4 || conv.groups == 0 {
        return Err(Error::Shape(
            "a convolution gradient takes rank-4 tensors".into(),
        ));
    }
    conv.check().map_err(Error::Shape)?;
    let wide = |v: Vec<isize>| -> Vec<i64> { v.into_iter().map(|s| s as i64).collect() };
    let (shape, mut scalars) = if !filter {
        // [g, w]: g [N, O, OH, OW], w [O, CG, KH, KW]
        let (gy, w) = (as_, bs);
        let x = [gy[0], w[1] * conv.groups, spatial[0], spatial[1]];
        conv.check_channels(Some(x[1]), Some(w[0]), Some(w[1]))
            .map_err(Error::Shape)?;
        let o = conv.output(spatial, [w[2], w[3]]).map_err(Error::Shape)?;
        if gy != [x[0], w[0], o[0], o[1]] {
            return Err(Error::Shape(format!(
                "conv2d_grad_image: a gradient of shape {gy:?} for an output of {:?}",
                [x[0], w[0], o[0], o[1]]
            )));
        }
        let og = w[0] / conv.groups;
        let kstep = crate::gemm::k_step(og, crate::gemm::default_kc(dtype)).max(1);
        let sc: Vec<i64> = [og, w[1], w[2], w[3], o[0], o[1], kstep]
            .map(|v| v as i64)
            .to_vec();
        (x.to_vec(), sc)
    } else {
        // [x, g]: x [N, C, H, W], g [N, O, OH, OW]
        let (x, gy) = (as_, bs);
        let w = [gy[1], x[1] / conv.groups, spatial[0], spatial[1]];
        conv.check_channels(Some(x[1]), Some(w[0]), Some(w[1]))
            .map_err(Error::Shape)?;
        let o = conv.output([x[2], x[3]], spatial).map_err(Error::Shape)?;
        if gy != [x[0], w[0], o[0], o[1]] {
            return Err(Error::Shape(format!(
                "conv2d_grad_filter: a gradient of shape {gy:?} for an output of {:?}",
                [x[0], w[0], o[0], o[1]]
            )));
        }
        let (k, p) = (w[1] * w[2] * w[3], o[0] * o[1]);
        // perform's chunks of images (`perform::window`'s budget of unrolled elements).
        let chunk = ((1usize << 22) / (k * p).max(1)).clamp(1, x[0].max(1));
        let kc = crate::gemm::default_kc(dtype);
        let sc: Vec<i64> = [
            x[0],
            x[1],
            x[2],
            x[3],
            o[0],
            o[1],
            w[0] / conv.groups,
            chunk,
            kc,
        ]
        .map(|v| v as i64)
        .to_vec();
        (w.to_vec(), sc)
    };
    let n: usize = shape.iter().product();
    let mut all = vec![n as i64];
    all.extend(shape.iter().map(|&d| d as i64));
    all.append(&mut scalars);
    all.extend(wide(a.strides()));
    all.extend(wide(b.strides()));
    Ok(Launch {
        out_shape: shape,
        scalars: all,
        work: n > 0,
    })
}
