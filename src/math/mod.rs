//! kiln's math: the vector math expansions (exp, log, sin, ...) of the `kiln-math` crate,
//! re-exported (a crate of its own so that kiln's runtime library for objects runs the same
//! buffer functions the JIT's kernels call), and what needs kiln's IR: numpy's divisions and
//! integer power (`arith`), and which elementwise op each expansion computes.

pub use kiln_math::*;

pub mod arith;

use crate::ir::UnaryOp;

/// The expansion that computes the elementwise op `u`, if there is one (every code generator
/// asks here).
pub fn of_unary(u: UnaryOp) -> Option<MathFn> {
    let f = match u {
        UnaryOp::Exp => MathFn::Exp,
        UnaryOp::Expm1 => MathFn::Expm1,
        UnaryOp::Log => MathFn::Log,
        UnaryOp::Log1p => MathFn::Log1p,
        UnaryOp::Sin => MathFn::Sin,
        UnaryOp::Cos => MathFn::Cos,
        UnaryOp::Tan => MathFn::Tan,
        UnaryOp::Tanh => MathFn::Tanh,
        UnaryOp::Sigmoid => MathFn::Sigmoid,
        UnaryOp::Erf => MathFn::Erf,
        _ => return None,
    };
    has_expansion(f).then_some(f)
}
