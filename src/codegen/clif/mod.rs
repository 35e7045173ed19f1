//! The Cranelift code generator, for any `cranelift_module::Module`: the JIT's module and
//! object files alike.
//!
//! - `map`: map kernels (128-bit SIMD loops with a scalar tail, inline vector math from
//!   `crate::math`) over a `rows x cols` block with per-operand strides.
//! - `reduce`, `argreduce`, `reduce_operands`: reductions over any set of axes (pairwise float
//!   sums in the reference's order, NaN-propagating max and min, argmax and argmin with the
//!   reference's index, wrapping integers), and the operand walk their leaves share;
//!   `reduce_call`: how a caller lays out a call of one for its operands' strides (the JIT at
//!   call time, AOT at compile time).
//! - `scalar_ops`, `math_clif`, `operand_table`: one scalar op, the `Emit` implementation of
//!   the math expansions, and the table of vector constants kernels read.
//! - `half`: conversions between `f32` and the storage-only `f16` / `bf16`.
//! - `random`: random ops (the shared Philox stream of `random::stream`, then the op's
//!   transform), for object files.
//! - `helpers`: the `kiln_*` functions generated code calls (integer division, pow, libm), and
//!   `host_math`: staged math, which calls the host's AVX2 buffer functions by address (JIT
//!   only: objects are generated with it off).

pub mod argreduce;
pub mod half;
pub mod helpers;
pub mod host_math;
pub mod map;
pub mod math_clif;
pub mod nd_seek;
pub mod operand_table;
pub mod random;
pub mod reduce;
pub mod reduce_call;
pub mod reduce_operands;
pub mod scalar_ops;
