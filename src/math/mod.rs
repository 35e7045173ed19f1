//! Vector math expansions (exp, log, sin, ...) written once, generic over an emitter
//! ([`Emit`]), so every code generator (Cranelift scalar and SIMD code, LLVM NVPTX later)
//! emits the same operation sequence and computes the same bits. [`Eval32`] and [`Eval64`] run
//! the expansions on plain Rust numbers: the ulp tests measure those, and they are exactly what
//! the generated code computes.

mod emit;
pub use emit::*;

/// The functions with an expansion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathFn {
    Exp,
    Expm1,
    Log,
    Log1p,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Erf,
}

/// Whether `f` has an expansion here (the others are called as functions).
pub fn has_expansion(_f: MathFn) -> bool {
    false
}

/// Computes `f(x)` with `e`.
pub fn unary<E: Emit>(_e: &mut E, _f: MathFn, x: E::F) -> E::F {
    x
}
