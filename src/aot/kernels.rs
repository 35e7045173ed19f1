//! The library kernels an ahead-of-time object carries, generated as Cranelift functions into
//! the object itself (so that the user links nothing but the object and libm):
//!
//! - row reductions, with the reference's semantics and order of operations (pairwise float
//!   sums, NaN-propagating max/min, first-occurrence argmax/argmin, wrapping integers);
//! - matrix products: a cache-blocked loop nest (k in blocks of [`KB`], 4-row by 2-vector
//!   register tiles accumulated in order along k), not a tuned GEMM;
//! - the helper functions map kernels import by name (`kiln_exp_f32`, `kiln_floordiv_i64`, ...),
//!   which in the JIT are Rust functions: here integer ones are written out in CLIF and float
//!   ones call the C math library (`expf`, `sin`, `fmodf`, ...), which the Rust functions the
//!   JIT calls call too.

use super::clif::{clif_type, define, for_fits, for_lt, mem, offset, signature};
use super::plan::{row_out_dtype, RowReduce};
use crate::error::{Error, Result};
use crate::ir::DType;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Signature, Type, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{FuncId, Linkage, Module};

/// The C math library functions the helpers may call (and names the entry point must not take).
pub const LIBM_NAMES: &[&str] = &[
    "exp", "expf", "log", "logf", "log1p", "log1pf", "expm1", "expm1f", "sin", "sinf", "cos",
    "cosf", "tan", "tanf", "tanh", "tanhf", "erf", "erff", "pow", "powf", "fmod", "fmodf",
];

/// Up to this many elements a float sum is one leaf of eight partial sums; above, it splits
/// (`perform::reduce::pairwise_sum`, whose order of operations the generated sum follows).
const PAIRWISE_BLOCK: i64 = crate::ir::PAIRWISE.block as i64;

/// Depth of the k blocks of the matrix product.
pub const KB: i64 = 256;

fn fconst(b: &mut FunctionBuilder, ty: Type, v: f64) -> Value {
    if ty == types::F32 {
        b.ins().f32const(v as f32)
    } else {
        b.ins().f64const(v)
    }
}

/// A call of an imported function (from libm) of `args.len()` arguments of type `ty`.
fn call_import<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    name: &str,
    ty: Type,
    args: &[Value],
) -> Result<Value> {
    let params = vec![ty; args.len()];
    let sig = signature(module, &params, &[ty]);
    let id = module
        .declare_function(name, Linkage::Import, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let f = module.declare_func_in_func(id, b.func);
    let inst = b.ins().call(f, args);
    Ok(b.inst_results(inst)[0])
}

/// `fn(ptr, n: i64, out: ptr)`: reduces the `n` elements of dtype `e` at `ptr` (contiguous)
/// and stores the result at `out`.
pub fn define_reducer<M: Module>(
    module: &mut M,
    name: &str,
    row: RowReduce,
    e: DType,
    text: &mut String,
) -> Result<FuncId> {
    let ptr = module.target_config().pointer_type();
    let ty = clif_type(e);
    let size = e.size() as i64;
    let float = e.is_float();
    // The pairwise sum, a recursive function of its own.
    let pairwise = if float && matches!(row, RowReduce::Sum | RowReduce::Mean) {
        let sig = signature(module, &[ptr, types::I64], &[ty]);
        let (id, t) = define(
            module,
            &format!("{name}_pairwise"),
            Linkage::Local,
            sig,
            |module, me, b, p| {
                // The reference's order (`perform::reduce::pairwise_sum`): fewer than 8
                // elements in one running sum; up to PAIRWISE_BLOCK, element `i` into partial
                // sum `i % 8` (whole groups of 8), the partials added pairwise, then the rest
                // one by one; above, split at half rounded down to a multiple of 8.
                let (xs, n) = (p[0], p[1]);
                let tiny = b.create_block();
                let not_tiny = b.create_block();
                let leaf = b.create_block();
                let big = b.create_block();
                let is_tiny = b.ins().icmp_imm_s(IntCC::SignedLessThan, n, 8);
                b.ins().brif(is_tiny, tiny, &[], not_tiny, &[]);

                b.switch_to_block(tiny);
                let acc = b.declare_var(ty);
                let z = fconst(b, ty, 0.0);
                b.def_var(acc, z);
                let zero = b.ins().iconst(types::I64, 0);
                for_lt(b, zero, n, 1, |b, i| {
                    let at = offset(b, xs, i, size);
                    let x = b.ins().load(ty, mem(), at, 0);
                    let a = b.use_var(acc);
                    let s = b.ins().fadd(a, x);
                    b.def_var(acc, s);
                    Ok(())
                })?;
                let a = b.use_var(acc);
                b.ins().return_(&[a]);

                b.switch_to_block(not_tiny);
                let is_leaf = b
                    .ins()
                    .icmp_imm_s(IntCC::SignedLessThanOrEqual, n, PAIRWISE_BLOCK);
                b.ins().brif(is_leaf, leaf, &[], big, &[]);

                b.switch_to_block(leaf);
                let parts: Vec<_> = (0..8).map(|_| b.declare_var(ty)).collect();
                for &v in &parts {
                    let z = fconst(b, ty, 0.0);
                    b.def_var(v, z);
                }
                let zero = b.ins().iconst(types::I64, 0);
                let rest = for_fits(b, zero, n, 8, |b, i| {
                    for (j, &v) in parts.iter().enumerate() {
                        let at = offset(b, xs, i, size);
                        let x = b.ins().load(ty, mem(), at, j as i32 * size as i32);
                        let a = b.use_var(v);
                        let s = b.ins().fadd(a, x);
                        b.def_var(v, s);
                    }
                    Ok(())
                })?;
                let v: Vec<Value> = parts.iter().map(|&p| b.use_var(p)).collect();
                let (s01, s23) = (b.ins().fadd(v[0], v[1]), b.ins().fadd(v[2], v[3]));
                let (s45, s67) = (b.ins().fadd(v[4], v[5]), b.ins().fadd(v[6], v[7]));
                let (lo, hi) = (b.ins().fadd(s01, s23), b.ins().fadd(s45, s67));
                let head = b.ins().fadd(lo, hi);
                let tail = b.declare_var(ty);
                b.def_var(tail, head);
                for_lt(b, rest, n, 1, |b, i| {
                    let at = offset(b, xs, i, size);
                    let x = b.ins().load(ty, mem(), at, 0);
                    let a = b.use_var(tail);
                    let s = b.ins().fadd(a, x);
                    b.def_var(tail, s);
                    Ok(())
                })?;
                let t = b.use_var(tail);
                b.ins().return_(&[t]);

                b.switch_to_block(big);
                let me_ref = module.declare_func_in_func(me, b.func);
                let half = b.ins().sshr_imm_s(n, 1);
                let mid = b.ins().band_imm_s(half, !7);
                let lo = b.ins().call(me_ref, &[xs, mid]);
                let lo = b.inst_results(lo)[0];
                let hi_ptr = offset(b, xs, mid, size);
                let rest = b.ins().isub(n, mid);
                let hi = b.ins().call(me_ref, &[hi_ptr, rest]);
                let hi = b.inst_results(hi)[0];
                let s = b.ins().fadd(lo, hi);
                b.ins().return_(&[s]);
                Ok(())
            },
        )?;
        text.push_str(&t);
        Some(id)
    } else {
        None
    };
    let out_ty = clif_type(row_out_dtype(row, e));
    let sig = signature(module, &[ptr, types::I64, ptr], &[]);
    let (id, t) = define(module, name, Linkage::Local, sig, |module, _, b, p| {
        let (xs, n, out) = (p[0], p[1], p[2]);
        let zero = b.ins().iconst(types::I64, 0);
        let result = match row {
            RowReduce::Sum | RowReduce::Mean if float => {
                let f = module.declare_func_in_func(pairwise.expect("defined above"), b.func);
                let call = b.ins().call(f, &[xs, n]);
                let s = b.inst_results(call)[0];
                if row == RowReduce::Mean {
                    let nf = b.ins().fcvt_from_sint(ty, n);
                    b.ins().fdiv(s, nf)
                } else {
                    s
                }
            }
            RowReduce::Sum | RowReduce::Prod => {
                let acc = b.declare_var(ty);
                let init = match (row, float) {
                    (RowReduce::Sum, _) => b.ins().iconst(ty, 0),
                    (_, true) => fconst(b, ty, 1.0),
                    (_, false) => b.ins().iconst(ty, 1),
                };
                b.def_var(acc, init);
                for_lt(b, zero, n, 1, |b, i| {
                    let at = offset(b, xs, i, size);
                    let x = b.ins().load(ty, mem(), at, 0);
                    let a = b.use_var(acc);
                    let r = match (row, float) {
                        (RowReduce::Sum, _) => b.ins().iadd(a, x),
                        (_, true) => b.ins().fmul(a, x),
                        (_, false) => b.ins().imul(a, x),
                    };
                    b.def_var(acc, r);
                    Ok(())
                })?;
                b.use_var(acc)
            }
            RowReduce::Max | RowReduce::Min | RowReduce::ArgMax | RowReduce::ArgMin => {
                let max = matches!(row, RowReduce::Max | RowReduce::ArgMax);
                let best = b.declare_var(ty);
                let at = b.declare_var(types::I64);
                let x0 = b.ins().load(ty, mem(), xs, 0);
                b.def_var(best, x0);
                b.def_var(at, zero);
                let one = b.ins().iconst(types::I64, 1);
                for_lt(b, one, n, 1, |b, i| {
                    let p = offset(b, xs, i, size);
                    let x = b.ins().load(ty, mem(), p, 0);
                    let cur = b.use_var(best);
                    // Strictly better (the first of equals wins); the first NaN wins and stays.
                    let take = if float {
                        let cc = if max {
                            FloatCC::GreaterThan
                        } else {
                            FloatCC::LessThan
                        };
                        let better = b.ins().fcmp(cc, x, cur);
                        let x_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
                        let cur_ok = b.ins().fcmp(FloatCC::Ordered, cur, cur);
                        let first_nan = b.ins().band(x_nan, cur_ok);
                        b.ins().bor(better, first_nan)
                    } else {
                        let cc = if max {
                            IntCC::SignedGreaterThan
                        } else {
                            IntCC::SignedLessThan
                        };
                        b.ins().icmp(cc, x, cur)
                    };
                    let nb = b.ins().select(take, x, cur);
                    b.def_var(best, nb);
                    let a = b.use_var(at);
                    let na = b.ins().select(take, i, a);
                    b.def_var(at, na);
                    Ok(())
                })?;
                if matches!(row, RowReduce::Max | RowReduce::Min) {
                    b.use_var(best)
                } else {
                    b.use_var(at)
                }
            }
            RowReduce::All | RowReduce::Any => {
                let all = row == RowReduce::All;
                let acc = b.declare_var(types::I8);
                let init = b.ins().iconst(types::I8, all as i64);
                b.def_var(acc, init);
                for_lt(b, zero, n, 1, |b, i| {
                    let p = offset(b, xs, i, size);
                    let x = b.ins().load(ty, mem(), p, 0);
                    let nz = b.ins().icmp_imm_s(IntCC::NotEqual, x, 0);
                    let a = b.use_var(acc);
                    let r = if all {
                        b.ins().band(a, nz)
                    } else {
                        b.ins().bor(a, nz)
                    };
                    b.def_var(acc, r);
                    Ok(())
                })?;
                b.use_var(acc)
            }
            RowReduce::Mean => {
                return Err(Error::Unsupported(format!(
                    "internal: mean of {e} rows (they are converted to f64 first)"
                )))
            }
        };
        debug_assert_eq!(b.func.dfg.value_type(result), out_ty);
        b.ins().store(mem(), result, out, 0);
        b.ins().return_(&[]);
        Ok(())
    })?;
    text.push_str(&t);
    Ok(id)
}

/// `fn(m, n, k, a, a_rs, a_cs, b, b_rs, c)`: `c = a @ b` with `a` an `m x k` matrix at byte
/// strides `a_rs, a_cs`, `b` a `k x n` matrix with rows `b_rs` bytes apart and unit element
/// stride, `c` a dense row-major `m x n` matrix. Each element is accumulated in order along k
/// (multiply, then add).
pub fn define_matmul<M: Module>(
    module: &mut M,
    name: &str,
    dtype: DType,
    text: &mut String,
) -> Result<FuncId> {
    let ptr = module.target_config().pointer_type();
    let i64t = types::I64;
    let ty = clif_type(dtype);
    let size = dtype.size() as i64;
    let float = dtype.is_float();
    // Vector lanes in 128 bits (floats only; integer products run the scalar tiles).
    let lanes = if float { 16 / size } else { 1 };
    let vty = if lanes > 1 {
        ty.by(lanes as u32).expect("a 128-bit vector type")
    } else {
        ty
    };
    // Tile widths: (columns, vectors per row; 0 for one scalar column).
    let widths: Vec<(i64, usize)> = if float {
        vec![(2 * lanes, 2), (lanes, 1), (1, 0)]
    } else {
        vec![(1, 0)]
    };
    let sig = signature(
        module,
        &[i64t, i64t, i64t, ptr, i64t, i64t, ptr, i64t, ptr],
        &[],
    );
    let (id, t) = define(module, name, Linkage::Local, sig, |_, _, b, p| {
        let (m, n, k) = (p[0], p[1], p[2]);
        let (a, a_rs, a_cs) = (p[3], p[4], p[5]);
        let (bm, b_rs, c) = (p[6], p[7], p[8]);
        let zero = b.ins().iconst(i64t, 0);
        // c = 0
        let total = b.ins().imul(m, n);
        let zv = if float {
            fconst(b, ty, 0.0)
        } else {
            b.ins().iconst(ty, 0)
        };
        for_lt(b, zero, total, 1, |b, i| {
            let at = offset(b, c, i, size);
            b.ins().store(mem(), zv, at, 0);
            Ok(())
        })?;
        let c_rs = b.ins().imul_imm_s(n, size);
        for_lt(b, zero, k, KB, |b, p0| {
            let p_end = b.ins().iadd_imm_s(p0, KB);
            let p_end = b.ins().smin(p_end, k);
            let j = b.declare_var(i64t);
            b.def_var(j, zero);
            for &(w, nvec) in &widths {
                let j0 = b.use_var(j);
                let j_end = for_fits(b, j0, n, w, |b, j| {
                    let tile = |b: &mut FunctionBuilder, i: Value, mr: usize| {
                        tile_loop(
                            b,
                            TileArgs {
                                ty,
                                vty,
                                size,
                                float,
                                mr,
                                nvec,
                                i,
                                j,
                                p0,
                                p_end,
                                a,
                                a_rs,
                                a_cs,
                                bm,
                                b_rs,
                                c,
                                c_rs,
                            },
                        )
                    };
                    let i_end = for_fits(b, zero, m, 4, |b, i| tile(b, i, 4))?;
                    for_lt(b, i_end, m, 1, |b, i| tile(b, i, 1))
                })?;
                b.def_var(j, j_end);
            }
            Ok(())
        })?;
        b.ins().return_(&[]);
        Ok(())
    })?;
    text.push_str(&t);
    Ok(id)
}

struct TileArgs {
    ty: Type,
    vty: Type,
    size: i64,
    float: bool,
    mr: usize,
    nvec: usize,
    i: Value,
    j: Value,
    p0: Value,
    p_end: Value,
    a: Value,
    a_rs: Value,
    a_cs: Value,
    bm: Value,
    b_rs: Value,
    c: Value,
    c_rs: Value,
}

/// `c[i..i+mr, j..j+width] += a[i..i+mr, p0..p_end] @ b[p0..p_end, j..j+width]` with the
/// tile of `c` held in registers.
fn tile_loop(b: &mut FunctionBuilder, t: TileArgs) -> Result<()> {
    let vbytes = if t.nvec > 0 { t.vty.bytes() as i32 } else { 0 };
    let cols = t.nvec.max(1);
    let acc_ty = if t.nvec > 0 { t.vty } else { t.ty };
    // Where the tile's rows start in c, a and b.
    let j_bytes = b.ins().imul_imm_s(t.j, t.size);
    let mut c_rows = Vec::new();
    let mut a_rows = Vec::new();
    let a_p0 = b.ins().imul(t.p0, t.a_cs);
    for r in 0..t.mr {
        let row = b.ins().iadd_imm_s(t.i, r as i64);
        let cr = b.ins().imul(row, t.c_rs);
        let cr = b.ins().iadd(t.c, cr);
        c_rows.push(b.ins().iadd(cr, j_bytes));
        let ar = b.ins().imul(row, t.a_rs);
        let ar = b.ins().iadd(t.a, ar);
        let ar = b.ins().iadd(ar, a_p0);
        let v = b.declare_var(types::I64);
        b.def_var(v, ar);
        a_rows.push(v);
    }
    let b_p0 = b.ins().imul(t.p0, t.b_rs);
    let b_p0 = b.ins().iadd(t.bm, b_p0);
    let b_p0 = b.ins().iadd(b_p0, j_bytes);
    let b_row = b.declare_var(types::I64);
    b.def_var(b_row, b_p0);
    let mut acc = Vec::new();
    for cr in &c_rows {
        for v in 0..cols {
            let var = b.declare_var(acc_ty);
            let x = b.ins().load(acc_ty, mem(), *cr, v as i32 * vbytes);
            b.def_var(var, x);
            acc.push(var);
        }
    }
    for_lt(b, t.p0, t.p_end, 1, |b, _| {
        let brow = b.use_var(b_row);
        let bv: Vec<Value> = (0..cols)
            .map(|v| b.ins().load(acc_ty, mem(), brow, v as i32 * vbytes))
            .collect();
        for r in 0..t.mr {
            let ap = b.use_var(a_rows[r]);
            let x = b.ins().load(t.ty, mem(), ap, 0);
            let xv = if t.nvec > 0 {
                b.ins().splat(t.vty, x)
            } else {
                x
            };
            for v in 0..cols {
                let cur = b.use_var(acc[r * cols + v]);
                let next = if t.float {
                    let prod = b.ins().fmul(xv, bv[v]);
                    b.ins().fadd(cur, prod)
                } else {
                    let prod = b.ins().imul(xv, bv[v]);
                    b.ins().iadd(cur, prod)
                };
                b.def_var(acc[r * cols + v], next);
            }
            let next_a = b.ins().iadd(ap, t.a_cs);
            b.def_var(a_rows[r], next_a);
        }
        let next_b = b.ins().iadd(brow, t.b_rs);
        b.def_var(b_row, next_b);
        Ok(())
    })?;
    for (r, cr) in c_rows.iter().enumerate() {
        for v in 0..cols {
            let x = b.use_var(acc[r * cols + v]);
            b.ins().store(mem(), x, *cr, v as i32 * vbytes);
        }
    }
    Ok(())
}

/// Defines, in the object, every `kiln_*` helper that the generated code imports. Helpers not
/// imported are not emitted; an imported one this module does not know is an error.
pub fn define_helpers<M: Module>(module: &mut M, text: &mut String) -> Result<Vec<String>> {
    let wanted: Vec<(String, Signature)> = module
        .declarations()
        .get_functions()
        .filter(|(_, d)| d.linkage == Linkage::Import)
        .filter_map(|(_, d)| {
            let name = d.name.clone()?;
            name.starts_with("kiln_")
                .then(|| (name, d.signature.clone()))
        })
        .collect();
    let mut names = Vec::new();
    for (name, sig) in wanted {
        let (op, ty) = name["kiln_".len()..]
            .rsplit_once('_')
            .ok_or_else(|| unknown_helper(&name))?;
        let dtype: DType = ty.parse().map_err(|_| unknown_helper(&name))?;
        let op = op.to_string();
        let (_, t) = define(module, &name, Linkage::Local, sig, |module, _, b, p| {
            let r =
                helper_body(module, b, &op, dtype, p).ok_or_else(|| unknown_helper(&name))??;
            b.ins().return_(&[r]);
            Ok(())
        })?;
        text.push_str(&t);
        names.push(name);
    }
    Ok(names)
}

fn unknown_helper(name: &str) -> Error {
    Error::Unsupported(format!(
        "generated code imports `{name}`, which has no ahead-of-time definition"
    ))
}

/// The body of helper `op` on `d`, or `None` for a helper this module does not know.
fn helper_body<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    op: &str,
    d: DType,
    p: &[Value],
) -> Option<Result<Value>> {
    let ty = clif_type(d);
    if d.is_float() {
        let f32 = d == DType::F32;
        let libm = |name: &str| {
            if f32 {
                format!("{name}f")
            } else {
                name.to_string()
            }
        };
        let simple = [
            "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "pow",
        ];
        if simple.contains(&op) {
            return Some(call_import(module, b, &libm(op), ty, p));
        }
        // The math expansions' rare-input fallback (`kiln::math::reference`): the f64 libm
        // function, rounded for f32 lanes, so the object gives the JIT's bits.
        if let Some(f) = op.strip_prefix("ref_") {
            if ["sin", "cos", "tan"].contains(&f) {
                if !f32 {
                    return Some(call_import(module, b, f, ty, p));
                }
                let wide = b.ins().fpromote(types::F64, p[0]);
                return Some(
                    call_import(module, b, f, types::F64, &[wide])
                        .map(|r| b.ins().fdemote(types::F32, r)),
                );
            }
        }
        return match op {
            "sigmoid" => Some(sigmoid(module, b, ty, &libm("exp"), p[0])),
            "floordiv" | "mod" => Some(float_divmod(
                module,
                b,
                ty,
                &libm("fmod"),
                p[0],
                p[1],
                op == "mod",
            )),
            _ => None,
        };
    }
    if d.is_int() {
        return match op {
            "floordiv" | "mod" => Some(Ok(int_divmod(b, ty, p[0], p[1], op == "mod"))),
            "pow" => Some(int_pow(b, ty, p[0], p[1])),
            _ => None,
        };
    }
    None
}

/// `1 / (1 + exp(-x))` for `x >= 0`, `e / (1 + e)` with `e = exp(x)` otherwise (the
/// reference's formula; one exp either way).
fn sigmoid<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    ty: Type,
    exp: &str,
    x: Value,
) -> Result<Value> {
    let zero = fconst(b, ty, 0.0);
    let one = fconst(b, ty, 1.0);
    let pos = b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, zero);
    let nx = b.ins().fneg(x);
    let arg = b.ins().select(pos, nx, x);
    let e = call_import(module, b, exp, ty, &[arg])?;
    let den = b.ins().fadd(one, e);
    let num = b.ins().select(pos, one, e);
    Ok(b.ins().fdiv(num, den))
}

/// numpy's float floor division and modulo (the reference's `float_divmod`).
#[allow(clippy::too_many_arguments)]
fn float_divmod<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    ty: Type,
    fmod: &str,
    a: Value,
    d: Value,
    want_mod: bool,
) -> Result<Value> {
    let zero = fconst(b, ty, 0.0);
    let one = fconst(b, ty, 1.0);
    let half = fconst(b, ty, 0.5);
    let m0 = call_import(module, b, fmod, ty, &[a, d])?;
    let d_zero = b.ins().fcmp(FloatCC::Equal, d, zero);
    let a_over_d = b.ins().fdiv(a, d);
    // m != 0: fix the sign of the remainder to the divisor's.
    let am = b.ins().fsub(a, m0);
    let div0 = b.ins().fdiv(am, d);
    let m_nz = b.ins().fcmp(FloatCC::NotEqual, m0, zero);
    let d_neg = b.ins().fcmp(FloatCC::LessThan, d, zero);
    let m_neg = b.ins().fcmp(FloatCC::LessThan, m0, zero);
    let signs_differ = b.ins().bxor(d_neg, m_neg);
    let fix = b.ins().band(m_nz, signs_differ);
    let m_fixed = b.ins().fadd(m0, d);
    let div_fixed = b.ins().fsub(div0, one);
    let signed_zero = b.ins().fcopysign(zero, d);
    let m1 = b.ins().select(fix, m_fixed, m0);
    let m = b.ins().select(m_nz, m1, signed_zero);
    let div = b.ins().select(fix, div_fixed, div0);
    // q = floor(div), rounded up when div is more than half above it; 0 with a / b's sign
    // when div is 0.
    let fl = b.ins().floor(div);
    let frac = b.ins().fsub(div, fl);
    let up = b.ins().fcmp(FloatCC::GreaterThan, frac, half);
    let fl1 = b.ins().fadd(fl, one);
    let q1 = b.ins().select(up, fl1, fl);
    let div_nz = b.ins().fcmp(FloatCC::NotEqual, div, zero);
    let q0 = b.ins().fcopysign(zero, a_over_d);
    let q = b.ins().select(div_nz, q1, q0);
    // Division by zero: (a / b, fmod(a, b)).
    Ok(if want_mod {
        b.ins().select(d_zero, m0, m)
    } else {
        b.ins().select(d_zero, a_over_d, q)
    })
}

/// numpy's integer floor division and modulo; 0 for a zero divisor, wrapping `MIN / -1`.
fn int_divmod(b: &mut FunctionBuilder, ty: Type, a: Value, d: Value, want_mod: bool) -> Value {
    let zero = b.ins().iconst(ty, 0);
    let one = b.ins().iconst(ty, 1);
    let d_zero = b.ins().icmp_imm_s(IntCC::Equal, d, 0);
    let d_m1 = b.ins().icmp_imm_s(IntCC::Equal, d, -1);
    // sdiv traps on 0 and on MIN / -1: divide by 1 there and patch the result.
    let special = b.ins().bor(d_zero, d_m1);
    let safe = b.ins().select(special, one, d);
    let q0 = b.ins().sdiv(a, safe);
    let r0 = b.ins().srem(a, safe);
    let neg_a = b.ins().ineg(a);
    let q = b.ins().select(d_m1, neg_a, q0);
    let r = b.ins().select(d_m1, zero, r0);
    let r_nz = b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
    let out = if want_mod {
        let r_neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
        let d_neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, d, 0);
        let differ = b.ins().bxor(r_neg, d_neg);
        let fix = b.ins().band(r_nz, differ);
        let rd = b.ins().iadd(r, d);
        b.ins().select(fix, rd, r)
    } else {
        let a_neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, a, 0);
        let d_neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, d, 0);
        let differ = b.ins().bxor(a_neg, d_neg);
        let fix = b.ins().band(r_nz, differ);
        let q1 = b.ins().iadd_imm_s(q, -1);
        b.ins().select(fix, q1, q)
    };
    b.ins().select(d_zero, zero, out)
}

/// Integer power by squaring, wrapping; negative exponents as the reference (1 for a base of
/// 1, +-1 for -1, else 0).
fn int_pow(b: &mut FunctionBuilder, ty: Type, base: Value, e: Value) -> Result<Value> {
    let acc = b.declare_var(ty);
    let bb = b.declare_var(ty);
    let ee = b.declare_var(ty);
    let one = b.ins().iconst(ty, 1);
    b.def_var(acc, one);
    b.def_var(bb, base);
    b.def_var(ee, e);
    let header = b.create_block();
    let body = b.create_block();
    let done = b.create_block();
    b.ins().jump(header, &[]);
    b.switch_to_block(header);
    let ev = b.use_var(ee);
    let more = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, ev, 0);
    b.ins().brif(more, body, &[], done, &[]);
    b.switch_to_block(body);
    let ev = b.use_var(ee);
    let bv = b.use_var(bb);
    let av = b.use_var(acc);
    let odd = b.ins().band_imm_s(ev, 1);
    let odd = b.ins().icmp_imm_s(IntCC::NotEqual, odd, 0);
    let mul = b.ins().imul(av, bv);
    let na = b.ins().select(odd, mul, av);
    b.def_var(acc, na);
    let sq = b.ins().imul(bv, bv);
    b.def_var(bb, sq);
    let half = b.ins().sshr_imm_s(ev, 1);
    b.def_var(ee, half);
    b.ins().jump(header, &[]);
    b.switch_to_block(done);
    let pos = b.use_var(acc);
    // e < 0: 1 for base 1; for base -1, 1 when e is even, else -1; 0 otherwise.
    let e_neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, e, 0);
    let zero = b.ins().iconst(ty, 0);
    let minus = b.ins().iconst(ty, -1);
    let is_one = b.ins().icmp_imm_s(IntCC::Equal, base, 1);
    let is_m1 = b.ins().icmp_imm_s(IntCC::Equal, base, -1);
    let e_odd = b.ins().band_imm_s(e, 1);
    let e_odd = b.ins().icmp_imm_s(IntCC::NotEqual, e_odd, 0);
    let m1_result = b.ins().select(e_odd, minus, one);
    let r = b.ins().select(is_m1, m1_result, zero);
    let neg = b.ins().select(is_one, one, r);
    Ok(b.ins().select(e_neg, neg, pos))
}
