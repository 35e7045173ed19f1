//! The library kernels an ahead-of-time object carries, generated as Cranelift functions into
//! the object itself (so that the user links nothing but the object and libm):
//!
//! - matrix products: a cache-blocked loop nest (k in the JIT's GEMM's chunks, 4-row by
//!   2-vector register tiles summed by FMAs in the GEMM's order, so that the bits are the
//!   JIT's), not a tuned GEMM; with `AotOptions::runtime` float products call the JIT's GEMM
//!   in kiln's runtime library first, and the loop nest is their fallback;
//! - the helper functions map kernels import by name (`kiln_exp_f32`, `kiln_floordiv_i64`, ...),
//!   which in the JIT are Rust functions: here integer ones are written out in CLIF and float
//!   ones call the C math library (`expf`, `sin`, `fmodf`, ...), which the Rust functions the
//!   JIT calls call too.

use super::clif::{clif_type, define, for_fits, for_lt, for_lt_by, mem, offset, signature};
use crate::codegen::clif::math_clif::ClifMath;
use crate::error::{Error, Result};
use crate::ir::DType;
use crate::math::arith;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Signature, Type, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{FuncId, Linkage, Module};

/// The C math library functions the helpers may call (and names the entry point must not take).
pub const LIBM_NAMES: &[&str] = &[
    "exp", "expf", "log", "logf", "log1p", "log1pf", "expm1", "expm1f", "sin", "sinf", "cos",
    "cosf", "tan", "tanf", "tanh", "tanhf", "erf", "erff", "pow", "powf", "fmod", "fmodf",
];

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

/// The runtime library's product of `dtype` (`crates/kiln-rt`), where it has one.
pub fn runtime_gemm(dtype: DType) -> Option<String> {
    matches!(dtype, DType::F32 | DType::F64).then(|| format!("{RUNTIME_PREFIX}gemm_{dtype}"))
}

/// What the symbols of kiln's runtime library start with (they are no `kiln_*` helper): its
/// products and the math expansions' buffer functions (`kiln_math::symbols`).
pub const RUNTIME_PREFIX: &str = "kiln_rt_";

/// `fn(m, n, k, kstep, a, a_rs, a_cs, b, b_rs, c)`: `c = a @ b` with `a` an `m x k` matrix at
/// byte strides `a_rs, a_cs`, `b` a `k x n` matrix with rows `b_rs` bytes apart and unit element
/// stride, `c` a dense row-major `m x n` matrix. Each element is summed in the JIT's GEMM's
/// order (`gemm::k_step`): chunks of `kstep` terms along k, each by FMAs in order from zero
/// (floats; integers wrap, where order does not matter), added to `c` in chunk order.
///
/// With `runtime`, a float product first calls the runtime library's GEMM (the JIT's own, at
/// its speed), and runs the loop nest only where that returns nonzero (a CPU without AVX2):
/// both sum in the same order, so the bits are the same either way.
pub fn define_matmul<M: Module>(
    module: &mut M,
    name: &str,
    dtype: DType,
    runtime: bool,
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
        &[i64t, i64t, i64t, i64t, ptr, i64t, i64t, ptr, i64t, ptr],
        &[],
    );
    let (id, t) = define(module, name, Linkage::Local, sig, |module, _, b, p| {
        let (m, n, k, kstep) = (p[0], p[1], p[2], p[3]);
        let (a, a_rs, a_cs) = (p[4], p[5], p[6]);
        let (bm, b_rs, c) = (p[7], p[8], p[9]);
        if let Some(gemm) = runtime_gemm(dtype).filter(|_| runtime) {
            call_runtime_gemm(module, b, &gemm, size, p)?;
        }
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
        for_lt_by(b, zero, k, kstep, |b, p0| {
            let p_end = b.ins().iadd(p0, kstep);
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

/// `if gemm(m, n, k, a, .., c, ..) == 0 { return }`, with the matrix product's parameters
/// `p` (byte strides) passed as the runtime library takes them (element strides); the builder
/// is left in the block that runs the loop nest.
fn call_runtime_gemm<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    gemm: &str,
    size: i64,
    p: &[Value],
) -> Result<()> {
    let ptr = module.target_config().pointer_type();
    let i64t = types::I64;
    let sig = signature(
        module,
        &[
            i64t, i64t, i64t, ptr, i64t, i64t, ptr, i64t, i64t, ptr, i64t, i64t,
        ],
        &[types::I32],
    );
    let id = module
        .declare_function(gemm, Linkage::Import, &sig)
        .map_err(|e| Error::Unsupported(format!("{gemm}: {e}")))?;
    let f = module.declare_func_in_func(id, b.func);
    let (m, n, k) = (p[0], p[1], p[2]);
    // Byte strides are whole elements (views move by elements).
    let shift = size.trailing_zeros() as i64;
    let a_rs = b.ins().sshr_imm_s(p[5], shift);
    let a_cs = b.ins().sshr_imm_s(p[6], shift);
    let b_rs = b.ins().sshr_imm_s(p[8], shift);
    let one = b.ins().iconst(i64t, 1);
    let args = [m, n, k, p[4], a_rs, a_cs, p[7], b_rs, one, p[9], n, one];
    let call = b.ins().call(f, &args);
    let failed = b.inst_results(call)[0];
    let done = b.create_block();
    let own = b.create_block();
    b.ins().brif(failed, own, &[], done, &[]);
    b.switch_to_block(done);
    b.ins().return_(&[]);
    b.switch_to_block(own);
    Ok(())
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
    // The chunk's sum starts from zero (`gemm::kernel`), not from what c holds.
    let zero = if t.float {
        fconst(b, t.ty, 0.0)
    } else {
        b.ins().iconst(t.ty, 0)
    };
    let zero = if t.nvec > 0 {
        b.ins().splat(t.vty, zero)
    } else {
        zero
    };
    let mut acc = Vec::new();
    for _ in &c_rows {
        for _ in 0..cols {
            let var = b.declare_var(acc_ty);
            b.def_var(var, zero);
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
                    b.ins().fma(xv, bv[v], cur)
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
    // The first chunk's sum is c; later ones are added to it.
    let first = b.ins().icmp_imm_s(IntCC::Equal, t.p0, 0);
    for (r, cr) in c_rows.iter().enumerate() {
        for v in 0..cols {
            let x = b.use_var(acc[r * cols + v]);
            let old = b.ins().load(acc_ty, mem(), *cr, v as i32 * vbytes);
            let sum = if t.float {
                b.ins().fadd(old, x)
            } else {
                b.ins().iadd(old, x)
            };
            let x = b.ins().select(first, x, sum);
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
            (name.starts_with("kiln_") && !name.starts_with(RUNTIME_PREFIX))
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
            "floordiv" | "mod" => Some(expand(module, b, d, |e| {
                let (q, m) = arith::float_divmod(e, p[0], p[1]);
                if op == "mod" {
                    m
                } else {
                    q
                }
            })),
            _ => None,
        };
    }
    if d.is_int() {
        return match op {
            "floordiv" | "mod" => Some(expand(module, b, d, |e| {
                let (q, m) = arith::int_divmod(e, p[0], p[1]);
                if op == "mod" {
                    m
                } else {
                    q
                }
            })),
            "pow" => Some(expand(module, b, d, |e| arith::int_pow(e, p[0], p[1]))),
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

/// A shared expansion of `math::arith` for dtype `d` (integers in the emitter's integer
/// lanes: `i32` with an `f32` emitter, `i64` with an `f64` one), as scalar code.
fn expand<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    d: DType,
    f: impl FnOnce(&mut ClifMath<'_, '_, M>) -> Value,
) -> Result<Value> {
    let fty = match arith::lanes_for(d) {
        crate::math::Prec::F32 => types::F32,
        crate::math::Prec::F64 => types::F64,
    };
    let mut e = ClifMath::new(b, module, fty, None);
    let v = f(&mut e);
    match e.error {
        Some(msg) => Err(Error::Unsupported(msg)),
        None => Ok(v),
    }
}
