//! Host vector math: a kernel's transcendentals computed by rustc-compiled 256-bit or 512-bit
//! functions over buffers, instead of inline 128-bit Cranelift code.
//!
//! Cranelift's x86 backend has 128-bit vectors only. `crate::math::avx2` compiles the same
//! expansions with AVX2 + FMA (8 f32 or 4 f64 lanes), `crate::math::avx512` with AVX-512F (16
//! or 8); they compute the same bits, so where the host has AVX2 and FMA a loop may hand its
//! math to them, the 512-bit ones where the products run AVX-512 ([`width`]). The loop then
//! runs in stages over a block of positions (at most `BLOCK` of them, in stack buffers): stage
//! `k` evaluates the argument of the program's `k`-th math op into buffer `k` (earlier math ops
//! read from their buffers) and calls the buffer function on it; the last stage is the program
//! itself, every math op read from its buffer. Values that feed several stages are recomputed
//! rather than buffered: they are loads and a few arithmetic ops.
//!
//! Shortcuts:
//! - a stage whose argument is an input contiguous along the row, or such an input less one
//!   constant along it (a softmax's `x - max`), hands the input itself and the constant to a
//!   (shifted) buffer function, with no stage loop (`Stage::direct`);
//! - one whose argument is two such inputs added (an activation's `x W + b`) hands both to a
//!   biased buffer function, `f(src[i] + bias[i])` (`Stage::biased`);
//! - a map whose one output is its last math op's result has that op's buffer function write
//!   the output row, and no last stage; with a single stage that needs no loop it takes the
//!   whole row in one call. `tanh(x W + b)` on 256 x 512 f32, 2 threads: 112 -> 75 us;
//! - a float sum of the last math op's result itself (`sum(exp(x - max))`) takes its leaf's
//!   whole sum from a summing buffer function, which adds in the leaf's order.
//!
//! The JIT resolves the buffer functions in this process. Ahead-of-time objects keep the
//! inline math and stand alone, unless they link kiln's runtime library
//! (`AotOptions::runtime`), which exports the same functions under the same names
//! (`kiln_math::symbols`). `KILN_CPU_HOST_MATH=0` turns it off (to compare).
//!
//! Measured on logsumexp rows of 4096 f32 (W3), one thread: see `docs/decisions.md`.

use crate::error::{Error, Result};
use crate::ir::scalar::{ScalarInst, ScalarOp, ScalarProgram};
use crate::ir::{BinaryOp, DType};
use crate::math::MathFn;
use cranelift_codegen::ir::{types, AbiParam, FuncRef, StackSlot, StackSlotData, StackSlotKind};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{Linkage, Module};
use std::sync::OnceLock;

/// The most positions one block of stages covers (a sum's leaves cover at most 128).
pub const BLOCK: i64 = 128;

/// Whether kernels generated now may call the buffer functions: an x86-64 host with AVX2 and
/// FMA, and `KILN_CPU_HOST_MATH` not `0` / `off`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = matches!(
            std::env::var("KILN_CPU_HOST_MATH").as_deref(),
            Ok("0") | Ok("off") | Ok("false")
        );
        !off && available()
    })
}

#[cfg(target_arch = "x86_64")]
fn available() -> bool {
    crate::math::avx2::available()
}

#[cfg(not(target_arch = "x86_64"))]
fn available() -> bool {
    false
}

/// The name generated code imports the buffer function of `f` in `d` under: `f(src[i])`,
/// or with `shifted` `f(src[i] - shift)` (`kiln_math::symbols`, which kiln's runtime library
/// exports too).
pub fn symbol(f: MathFn, d: DType, shifted: bool) -> &'static str {
    kiln_math::symbols::map(f, prec(d), shifted)
}

/// The name generated code imports the biased buffer function of `f` in `d` under:
/// `f(src[i] + bias[i])` (`Stage::biased`).
pub fn biased_symbol(f: MathFn, d: DType) -> &'static str {
    kiln_math::symbols::biased(f, prec(d))
}

/// The name generated code imports the summing buffer function of `f` in `d` under (the sum
/// of `f` over a buffer, in a float sum's leaf order; less `shift` with `shifted`).
pub fn sum_symbol(f: MathFn, d: DType, shifted: bool) -> &'static str {
    kiln_math::symbols::sum(f, prec(d), shifted)
}

fn prec(d: DType) -> crate::math::Prec {
    match d {
        DType::F64 => crate::math::Prec::F64,
        _ => crate::math::Prec::F32,
    }
}

/// The vector width of the buffer functions this process's kernels call: `"avx512"` (16 f32
/// lanes) where the products' ISA is AVX-512 (`KILN_CPU_ISA`, else the widest the host runs)
/// and the host has AVX-512F, else `"avx2"` (8 lanes). Both give the same bits
/// (`tests/math_avx2.rs`), so the choice is speed alone. `None` where kernels call none
/// ([`enabled`] says no).
pub fn width() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    if enabled() {
        return Some(match wide() {
            true => "avx512",
            false => "avx2",
        });
    }
    None
}

/// Whether the 512-bit buffer functions serve this process (see [`width`]).
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    crate::gemm::isa() == crate::gemm::Isa::Avx512 && crate::math::avx512::available()
}

/// The buffer functions by name, for the JIT's symbol table (none without AVX2 and FMA): the
/// 512-bit ones where [`width`] says so, else the 256-bit ones, under the same names.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        macro_rules! table {
            ($m:ident) => {{
                use crate::math::$m::{
                    biased_fn_f32, biased_fn_f64, buffer_fn_f32, buffer_fn_f64, sum_fn_f32,
                    sum_fn_f64,
                };
                let mut all = Vec::new();
                for f in MathFn::ALL {
                    all.extend([
                        (biased_symbol(f, DType::F32), biased_fn_f32(f) as *const u8),
                        (biased_symbol(f, DType::F64), biased_fn_f64(f) as *const u8),
                    ]);
                    for s in [false, true] {
                        all.extend([
                            (symbol(f, DType::F32, s), buffer_fn_f32(f, s) as *const u8),
                            (symbol(f, DType::F64, s), buffer_fn_f64(f, s) as *const u8),
                            (sum_symbol(f, DType::F32, s), sum_fn_f32(f, s) as *const u8),
                            (sum_symbol(f, DType::F64, s), sum_fn_f64(f, s) as *const u8),
                        ]);
                    }
                }
                all
            }};
        }
        return match wide() {
            true => table!(avx512),
            false => table!(avx2),
        };
    }
    Vec::new()
}

/// A stack slot for one block of a stage's values (32-byte aligned, for the 256-bit loads).
pub fn buffer_slot(b: &mut FunctionBuilder, d: DType) -> StackSlot {
    let bytes = BLOCK as u32 * d.size() as u32;
    b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 5))
}

/// Which buffer function of a stage a kernel calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `f(src[i] - shift)` into `dst`: `f(src, dst, n, shift)`; unshifted, `f(src[i])` (the
    /// shift is ignored).
    Map {
        /// Whether the function subtracts `shift` first.
        shifted: bool,
    },
    /// The sum of `f(src[i] - shift)` in a float sum's leaf order: `sum f(src, n, shift) -> T`.
    Sum {
        /// Whether the function subtracts `shift` first.
        shifted: bool,
    },
    /// `f(src[i] + bias[i])` into `dst`: `f(src, bias, dst, n)` (`Stage::biased`).
    Biased,
}

/// Declares the buffer function `entry` of `stage` in the function `b` builds.
pub fn import<M: Module>(
    module: &mut M,
    b: &mut FunctionBuilder,
    stage: &Stage,
    entry: Entry,
) -> Result<FuncRef> {
    let ptr = module.target_config().pointer_type();
    let fty = super::scalar_ops::clif_type(stage.dtype);
    let mut sig = module.make_signature();
    let symbol = match entry {
        Entry::Sum { shifted } => {
            sig.params.extend([ptr, types::I64, fty].map(AbiParam::new));
            sig.returns.push(AbiParam::new(fty));
            sum_symbol(stage.f, stage.dtype, shifted)
        }
        Entry::Biased => {
            sig.params
                .extend([ptr, ptr, ptr, types::I64].map(AbiParam::new));
            biased_symbol(stage.f, stage.dtype)
        }
        Entry::Map { shifted } => {
            sig.params
                .extend([ptr, ptr, types::I64, fty].map(AbiParam::new));
            symbol(stage.f, stage.dtype, shifted)
        }
    };
    if !super::helpers::is_registered(symbol) {
        return Err(Error::Unsupported(format!("{symbol} is not registered")));
    }
    let id = module
        .declare_function(symbol, Linkage::Import, &sig)
        .map_err(|e| Error::Unsupported(format!("{symbol}: {e}")))?;
    Ok(module.declare_func_in_func(id, b.func))
}

/// One stage: the argument of a math op, then the buffer function applied to it.
#[derive(Clone, Debug)]
pub struct Stage {
    /// Computes the argument (output 0). Input `n_in + j` is math op `j`'s buffer.
    pub program: ScalarProgram,
    /// The math op applied to the argument.
    pub f: MathFn,
    /// The float type of the argument and the result (f32 or f64).
    pub dtype: DType,
}

impl Stage {
    /// When the argument is an input (`Some((a, None))`) or one input less another
    /// (`Some((a, Some(b)))`, a softmax's `x - max`), their indices: a loop whose input `a` is
    /// contiguous (and `b` constant along it) hands `a` itself and `b`'s value to the buffer
    /// function (`f(src[i] - shift)`), with no stage loop.
    pub fn direct(&self, n_in: usize) -> Option<(usize, Option<usize>)> {
        let (out, inst) = self.argument()?;
        match inst.op {
            ScalarOp::Input(_) => Some((self.input(out, n_in)?, None)),
            ScalarOp::Binary(BinaryOp::Sub) if self.program.insts.len() == 3 => Some((
                self.input(inst.args[0], n_in)?,
                Some(self.input(inst.args[1], n_in)?),
            )),
            _ => None,
        }
    }

    /// When the argument is one input plus another (`Some((a, b))`, an activation of
    /// `x W + b`), their indices: a loop where both are contiguous along the row hands them to
    /// the biased buffer function (`f(src[i] + bias[i])`), with no stage loop. IEEE addition
    /// commutes, so either may be the bias.
    pub fn biased(&self, n_in: usize) -> Option<(usize, usize)> {
        let (_, inst) = self.argument()?;
        match inst.op {
            ScalarOp::Binary(BinaryOp::Add) if self.program.insts.len() == 3 => Some((
                self.input(inst.args[0], n_in)?,
                self.input(inst.args[1], n_in)?,
            )),
            _ => None,
        }
    }

    /// The register of the argument and its instruction.
    fn argument(&self) -> Option<(usize, &ScalarInst)> {
        let out = *self.program.outputs.first()?;
        Some((out, &self.program.insts[out]))
    }

    /// The input register `r` reads, where it reads one of the kernel's `n_in` inputs (not a
    /// buffer of an earlier stage).
    fn input(&self, r: usize, n_in: usize) -> Option<usize> {
        match self.program.insts[r].op {
            ScalarOp::Input(j) if j < n_in => Some(j),
            _ => None,
        }
    }
}

/// A program split at its math ops.
#[derive(Clone, Debug)]
pub struct Staged {
    /// One stage per math op of the program, in program order.
    pub stages: Vec<Stage>,
    /// The program with every math op read from its buffer (input `n_in + j`).
    pub last: ScalarProgram,
    /// Whether `last` is the last math op's result itself (`sum(exp(x - m))`): a sum's leaf
    /// then calls the summing buffer function instead of `f` and a loop over its buffer.
    pub last_is_math: bool,
}

/// Splits `program` (with `n_in` inputs) at its math ops; `None` when it has none, or when one
/// computes in a dtype other than f32 and f64.
pub fn split(program: &ScalarProgram, n_in: usize) -> Option<Staged> {
    let math: Vec<(usize, MathFn)> = program
        .insts
        .iter()
        .enumerate()
        .filter_map(|(r, i)| match i.op {
            ScalarOp::Unary(u) => super::scalar_ops::math_fn(u).map(|f| (r, f)),
            _ => None,
        })
        .collect();
    // Stages read their inputs in place, so halves (which convert as they load) run unstaged.
    if math.is_empty()
        || program.insts.iter().any(|i| i.dtype.is_half())
        || math
            .iter()
            .any(|&(r, _)| !matches!(program.insts[r].dtype, DType::F32 | DType::F64))
    {
        return None;
    }
    // The program with math ops `..k` read from their buffers.
    let reading = |k: usize| -> Vec<ScalarInst> {
        let mut insts = program.insts.clone();
        for (j, &(r, _)) in math.iter().enumerate().take(k) {
            insts[r] = ScalarInst {
                op: ScalarOp::Input(n_in + j),
                args: vec![],
                dtype: insts[r].dtype,
            };
        }
        insts
    };
    let stages = math
        .iter()
        .enumerate()
        .map(|(k, &(r, f))| Stage {
            program: live(&reading(k), &[program.insts[r].args[0]]),
            f,
            dtype: program.insts[r].dtype,
        })
        .collect();
    let last = live(&reading(math.len()), &program.outputs);
    let last_is_math = last.outputs == [0]
        && last.insts.len() == 1
        && last.insts[0].op == ScalarOp::Input(n_in + math.len() - 1);
    Some(Staged {
        stages,
        last,
        last_is_math,
    })
}

/// The instructions `outputs` depend on, in their order, renumbered.
fn live(insts: &[ScalarInst], outputs: &[usize]) -> ScalarProgram {
    let mut needed = vec![false; insts.len()];
    for &o in outputs {
        needed[o] = true;
    }
    for r in (0..insts.len()).rev() {
        if needed[r] {
            for &a in &insts[r].args {
                needed[a] = true;
            }
        }
    }
    let mut new_index = vec![usize::MAX; insts.len()];
    let mut kept = Vec::new();
    for (r, inst) in insts.iter().enumerate().filter(|(r, _)| needed[*r]) {
        new_index[r] = kept.len();
        let mut inst = inst.clone();
        for a in &mut inst.args {
            *a = new_index[*a];
        }
        kept.push(inst);
    }
    ScalarProgram {
        insts: kept,
        outputs: outputs.iter().map(|&o| new_index[o]).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::scalar::ScalarInst;
    use crate::ir::{BinaryOp, UnaryOp};

    fn inst(op: ScalarOp, args: &[usize]) -> ScalarInst {
        ScalarInst {
            op,
            args: args.to_vec(),
            dtype: DType::F32,
        }
    }

    /// The import names follow the functions' names and `MathFn::ALL`'s order.
    #[test]
    fn names_are_the_functions_names() {
        for f in MathFn::ALL {
            for (d, s) in [(DType::F32, "f32"), (DType::F64, "f64")] {
                let n = f.name();
                assert_eq!(symbol(f, d, false), format!("kiln_rt_vmath_{n}_{s}"));
                assert_eq!(symbol(f, d, true), format!("kiln_rt_vmath_shifted_{n}_{s}"));
                assert_eq!(
                    sum_symbol(f, d, false),
                    format!("kiln_rt_vmath_sum_{n}_{s}")
                );
                assert_eq!(
                    sum_symbol(f, d, true),
                    format!("kiln_rt_vmath_sum_shifted_{n}_{s}")
                );
            }
        }
    }

    /// `exp(x - m) * sin(exp(x - m) + y)`: two stages, the second reading the first's buffer,
    /// and `x - m` recomputed where needed.
    #[test]
    fn split_reads_earlier_math_from_buffers() {
        let p = ScalarProgram {
            insts: vec![
                inst(ScalarOp::Input(0), &[]),
                inst(ScalarOp::Input(1), &[]),
                inst(ScalarOp::Binary(BinaryOp::Sub), &[0, 1]),
                inst(ScalarOp::Unary(UnaryOp::Exp), &[2]),
                inst(ScalarOp::Input(2), &[]),
                inst(ScalarOp::Binary(BinaryOp::Add), &[3, 4]),
                inst(ScalarOp::Unary(UnaryOp::Sin), &[5]),
                inst(ScalarOp::Binary(BinaryOp::Mul), &[3, 6]),
            ],
            outputs: vec![7],
        };
        let s = split(&p, 3).unwrap();
        assert_eq!(s.stages.len(), 2);
        assert!(!s.last_is_math);
        assert_eq!(s.stages[0].f, MathFn::Exp);
        // x - m only.
        assert_eq!(s.stages[0].program.insts.len(), 3);
        assert_eq!(s.stages[0].program.outputs, vec![2]);
        // exp's buffer (input 3) + y.
        let st1 = &s.stages[1].program;
        assert_eq!(st1.insts.len(), 3);
        assert!(st1.insts.iter().any(|i| i.op == ScalarOp::Input(3)));
        assert!(!st1.insts.iter().any(|i| i.op == ScalarOp::Input(0)));
        // buffer 0 * buffer 1.
        let ops: Vec<&ScalarOp> = s.last.insts.iter().map(|i| &i.op).collect();
        assert_eq!(
            ops,
            [
                &ScalarOp::Input(3),
                &ScalarOp::Input(4),
                &ScalarOp::Binary(BinaryOp::Mul)
            ]
        );
        for prog in s.stages.iter().map(|s| &s.program).chain([&s.last]) {
            prog.check().unwrap();
        }
        // sum(exp(x - m)) sums the last buffer as it is.
        let lse = ScalarProgram {
            insts: p.insts[..4].to_vec(),
            outputs: vec![3],
        };
        let st = split(&lse, 2).unwrap();
        assert!(st.last_is_math);
        assert_eq!(st.stages[0].direct(2), Some((0, Some(1))));
        // Not when the operand is a buffer (input 3 of 3), nor for other arithmetic.
        assert_eq!(s.stages[1].direct(3), None);
        assert_eq!(s.stages[0].direct(3), Some((0, Some(1))));
        // `exp(input first op input second)`.
        let exp_of = |op: BinaryOp, first: usize, second: usize| ScalarProgram {
            insts: vec![
                inst(ScalarOp::Input(first), &[]),
                inst(ScalarOp::Input(second), &[]),
                inst(ScalarOp::Binary(op), &[0, 1]),
                inst(ScalarOp::Unary(UnaryOp::Exp), &[2]),
            ],
            outputs: vec![3],
        };
        let mul = exp_of(BinaryOp::Mul, 0, 1);
        assert_eq!(split(&mul, 2).unwrap().stages[0].direct(2), None);
        assert_eq!(split(&mul, 2).unwrap().stages[0].biased(2), None);
        // `exp(x + b)`: biased, either way round; `x - m` is not.
        let st = split(&exp_of(BinaryOp::Add, 1, 0), 2).unwrap();
        assert_eq!(st.stages[0].biased(2), Some((1, 0)));
        assert_eq!(st.stages[0].direct(2), None);
        assert!(st.last_is_math);
        assert_eq!(split(&lse, 2).unwrap().stages[0].biased(2), None);
        // Not when an operand is a buffer.
        assert_eq!(st.stages[0].biased(1), None);
        // No math, no stages.
        let plain = ScalarProgram {
            insts: vec![inst(ScalarOp::Input(0), &[])],
            outputs: vec![0],
        };
        assert!(split(&plain, 1).is_none());
    }
}
