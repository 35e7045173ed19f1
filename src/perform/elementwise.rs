//! Elementwise ops: unary, binary (numpy broadcasting), select and cast.

use crate::error::Error;
use crate::ir::types::broadcast_shapes;
use crate::ir::{BinaryOp, DType, UnaryOp};
use crate::math::arith::{Arith, IntPow};
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn, Zip};
use num_traits::Float;

fn shape_err(e: String) -> Error {
    Error::Shape(e)
}

/// `f` applied to `a` and `b` broadcast against each other.
pub fn zip2<A: Copy, B: Copy, C>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    f: impl Fn(A, B) -> C,
) -> Result<ArrayD<C>, Error> {
    let shape = broadcast_shapes(a.shape(), b.shape()).map_err(shape_err)?;
    let (av, bv) = (a.broadcast(IxDyn(&shape)), b.broadcast(IxDyn(&shape)));
    let (av, bv) = (
        av.ok_or_else(|| shape_err("broadcast".into()))?,
        bv.ok_or_else(|| shape_err("broadcast".into()))?,
    );
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

/// The logistic function, stable for both signs (exp never overflows).
pub fn sigmoid<F: Float>(x: F) -> F {
    let one = F::one();
    if x >= F::zero() {
        one / (one + (-x).exp())
    } else {
        let e = x.exp();
        e / (one + e)
    }
}

fn unary_float<F: Float + FloatExtra>(op: UnaryOp, x: F) -> F {
    let zero = F::zero();
    let one = F::one();
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sign => {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else if x == zero {
                zero // numpy: sign(-0.0) is 0.0
            } else {
                x // NaN
            }
        }
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Expm1 => x.exp_m1(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => one / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tan => x.tan(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_even(),
        UnaryOp::Square => x * x,
        UnaryOp::Reciprocal => one / x,
        UnaryOp::Relu => {
            if x.is_nan() || x > zero {
                x
            } else {
                zero
            }
        }
        UnaryOp::Not => x, // rejected by type inference
    }
}

/// What `num_traits::Float` lacks.
pub trait FloatExtra {
    fn erf(self) -> Self;
    fn round_even(self) -> Self;
}
impl FloatExtra for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn round_even(self) -> f32 {
        self.round_ties_even()
    }
}
impl FloatExtra for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn round_even(self) -> f64 {
        self.round_ties_even()
    }
}

macro_rules! unary_int {
    ($op:expr, $x:expr) => {{
        let x = $x;
        match $op {
            UnaryOp::Neg => x.wrapping_neg(),
            UnaryOp::Abs => x.wrapping_abs(),
            UnaryOp::Sign => x.signum(),
            UnaryOp::Square => x.wrapping_mul(x),
            UnaryOp::Relu => x.max(0),
            _ => x, // floor, ceil, round of an integer; float-only ops are rejected earlier
        }
    }};
}

pub fn unary(op: UnaryOp, t: &Tensor) -> Result<Tensor, Error> {
    Ok(match t {
        Tensor::F32(a) => Tensor::F32(a.mapv(|x| unary_float(op, x))),
        Tensor::F64(a) => Tensor::F64(a.mapv(|x| unary_float(op, x))),
        Tensor::I32(a) => Tensor::I32(a.mapv(|x| unary_int!(op, x))),
        Tensor::I64(a) => Tensor::I64(a.mapv(|x| unary_int!(op, x))),
        Tensor::Bool(a) if op == UnaryOp::Not => Tensor::Bool(a.mapv(|x| !x)),
        Tensor::Bool(_) => return Err(Error::Runtime(format!("{} does not take bool", op.name()))),
        Tensor::F16(_) | Tensor::BF16(_) => return Err(half_arithmetic(op.name(), t.dtype())),
    })
}

/// The error of an arithmetic op given a storage-only half (the type rules refuse it first).
pub(super) fn half_arithmetic(name: &str, d: DType) -> Error {
    Error::Runtime(crate::ir::infer::half_refused(name, d))
}

/// numpy's float `(floor_divide(a, b), mod(a, b))`: the shared expansion
/// (`math::arith::float_divmod`), which every backend emits.
pub fn float_divmod<F: Arith>(a: F, b: F) -> (F, F) {
    a.divmod(b)
}

fn binary_float<F: Float + Arith>(op: BinaryOp, a: F, b: F) -> F {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::FloorDiv => float_divmod(a, b).0,
        BinaryOp::Mod => float_divmod(a, b).1,
        BinaryOp::Pow => a.powf(b),
        // numpy's: `a` where it is greater (smaller) or NaN, else `b`. So a NaN on either side
        // propagates, and of two equal values (`+0.0` and `-0.0`) the second is returned.
        BinaryOp::Maximum => {
            if a > b || a.is_nan() {
                a
            } else {
                b
            }
        }
        BinaryOp::Minimum => {
            if a < b || a.is_nan() {
                a
            } else {
                b
            }
        }
        _ => F::nan(), // comparisons and logic are handled elsewhere
    }
}

/// numpy's integer floor division, remainder and power, as every backend computes them (the
/// shared expansions of `math::arith`): division and mod by zero give 0, MIN / -1 wraps, a
/// negative exponent gives 1/a^n truncated (0 unless |a| is 1).
pub trait IntArith: Copy {
    /// numpy's `floor_divide`: the quotient rounded towards minus infinity.
    fn floordiv(self, b: Self) -> Self;
    /// numpy's `mod`: the remainder of `floordiv`, with the sign of `b`.
    fn modulo(self, b: Self) -> Self;
    /// `self` to the power `b`, wrapping.
    fn ipow(self, b: Self) -> Self;
}

impl<T: Arith + IntPow> IntArith for T {
    fn floordiv(self, b: T) -> T {
        self.divmod(b).0
    }
    fn modulo(self, b: T) -> T {
        self.divmod(b).1
    }
    fn ipow(self, b: T) -> T {
        IntPow::ipow(self, b)
    }
}

fn binary_int<
    T: IntArith
        + Ord
        + num_traits::WrappingAdd
        + num_traits::WrappingSub
        + num_traits::WrappingMul
        + Default,
>(
    op: BinaryOp,
    a: T,
    b: T,
) -> T {
    match op {
        BinaryOp::Add => a.wrapping_add(&b),
        BinaryOp::Sub => a.wrapping_sub(&b),
        BinaryOp::Mul => a.wrapping_mul(&b),
        BinaryOp::FloorDiv | BinaryOp::Div => a.floordiv(b),
        BinaryOp::Mod => a.modulo(b),
        BinaryOp::Pow => a.ipow(b),
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum => a.min(b),
        _ => T::default(),
    }
}

fn compare<T: PartialOrd>(op: BinaryOp, a: T, b: T) -> bool {
    match op {
        BinaryOp::Lt => a < b,
        BinaryOp::Le => a <= b,
        BinaryOp::Gt => a > b,
        BinaryOp::Ge => a >= b,
        BinaryOp::Eq => a == b,
        _ => a != b,
    }
}

pub fn binary(op: BinaryOp, x: &Tensor, y: &Tensor) -> Result<Tensor, Error> {
    if op.is_comparison() {
        return Ok(Tensor::Bool(match (x, y) {
            (Tensor::F32(a), Tensor::F32(b)) => zip2(a, b, |p, q| compare(op, p, q))?,
            (Tensor::F64(a), Tensor::F64(b)) => zip2(a, b, |p, q| compare(op, p, q))?,
            (Tensor::I32(a), Tensor::I32(b)) => zip2(a, b, |p, q| compare(op, p, q))?,
            (Tensor::I64(a), Tensor::I64(b)) => zip2(a, b, |p, q| compare(op, p, q))?,
            (Tensor::Bool(a), Tensor::Bool(b)) => zip2(a, b, |p, q| compare(op, p, q))?,
            _ => return Err(dtype_mismatch(op, x, y)),
        }));
    }
    Ok(match (x, y) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(zip2(a, b, |p, q| binary_float(op, p, q))?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(zip2(a, b, |p, q| binary_float(op, p, q))?),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(zip2(a, b, |p, q| binary_int(op, p, q))?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(zip2(a, b, |p, q| binary_int(op, p, q))?),
        (Tensor::Bool(a), Tensor::Bool(b)) if op.is_logical() => {
            Tensor::Bool(zip2(a, b, |p, q| {
                if op == BinaryOp::And {
                    p && q
                } else {
                    p || q
                }
            })?)
        }
        _ => return Err(dtype_mismatch(op, x, y)),
    })
}

fn dtype_mismatch(op: BinaryOp, x: &Tensor, y: &Tensor) -> Error {
    Error::Runtime(format!(
        "{} is not defined on {} and {}",
        op.name(),
        x.dtype(),
        y.dtype()
    ))
}

/// numpy `where(cond, a, b)` with broadcasting of all three.
pub fn select(c: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor, Error> {
    let Tensor::Bool(c) = c else {
        return Err(Error::Runtime("select: the condition must be bool".into()));
    };
    macro_rules! sel {
        ($a:expr, $b:expr) => {{
            let shape = broadcast_shapes(c.shape(), $a.shape()).map_err(shape_err)?;
            let shape = broadcast_shapes(&shape, $b.shape()).map_err(shape_err)?;
            let sh = IxDyn(&shape);
            let bad = || shape_err("select: operands do not broadcast".into());
            let (cv, av, bv) = (
                c.broadcast(sh.clone()).ok_or_else(bad)?,
                $a.broadcast(sh.clone()).ok_or_else(bad)?,
                $b.broadcast(sh).ok_or_else(bad)?,
            );
            Zip::from(&cv)
                .and(&av)
                .and(&bv)
                .map_collect(|&k, &p, &q| if k { p } else { q })
        }};
    }
    Ok(match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(sel!(a, b)),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(sel!(a, b)),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(sel!(a, b)),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(sel!(a, b)),
        (Tensor::Bool(a), Tensor::Bool(b)) => Tensor::Bool(sel!(a, b)),
        (Tensor::F16(a), Tensor::F16(b)) => Tensor::F16(sel!(a, b)),
        (Tensor::BF16(a), Tensor::BF16(b)) => Tensor::BF16(sel!(a, b)),
        _ => {
            return Err(Error::Runtime(format!(
                "select: branches differ in dtype ({} and {})",
                a.dtype(),
                b.dtype()
            )))
        }
    })
}

/// Converts to `to`: floats to integers truncate toward zero and saturate, NaN becomes 0 (what
/// Rust's `as` does); numbers to bool are `!= 0` (NaN is true); bool to numbers is 0 or 1.
pub fn cast(t: &Tensor, to: DType) -> Tensor {
    macro_rules! from {
        ($a:expr, $conv:expr) => {{
            let a = $a;
            #[allow(clippy::redundant_closure_call)]
            match to {
                DType::Bool => Tensor::Bool(a.mapv(|x| ($conv)(x) != 0.0)),
                DType::I32 => Tensor::I32(a.mapv(|x| ($conv)(x) as i32)),
                DType::I64 => Tensor::I64(a.mapv(|x| ($conv)(x) as i64)),
                DType::F32 => Tensor::F32(a.mapv(|x| ($conv)(x) as f32)),
                DType::F64 => Tensor::F64(a.mapv(|x| ($conv)(x))),
                DType::F16 => Tensor::F16(a.mapv(|x| crate::ir::f16_of(($conv)(x)))),
                DType::BF16 => Tensor::BF16(a.mapv(|x| crate::ir::bf16_of(($conv)(x)))),
            }
        }};
    }
    match t {
        // Integers convert directly, so i64 values beyond 2^53 stay exact.
        Tensor::I64(a) => match to {
            DType::I64 => Tensor::I64(a.clone()),
            DType::I32 => Tensor::I32(a.mapv(|x| x as i32)),
            DType::Bool => Tensor::Bool(a.mapv(|x| x != 0)),
            DType::F32 => Tensor::F32(a.mapv(|x| x as f32)),
            DType::F64 => Tensor::F64(a.mapv(|x| x as f64)),
            // Through f64 rounded to odd (as every backend does), so the half's rounding is
            // the only one: a nearest f64 would round first (`math::half::i64_to_f64_odd`).
            DType::F16 | DType::BF16 => from!(a, |x: i64| {
                crate::math::half::i64_to_f64_odd(&mut crate::math::Eval64, x)
            }),
        },
        Tensor::I32(a) => from!(a, |x: i32| x as f64),
        Tensor::Bool(a) => from!(a, |x: bool| x as u8 as f64),
        Tensor::F64(a) => from!(a, |x: f64| x),
        // Halves widen exactly; casts to them round once, to nearest even (`ir::round_to`).
        Tensor::F16(a) if to == DType::F16 => Tensor::F16(a.clone()),
        Tensor::BF16(a) if to == DType::BF16 => Tensor::BF16(a.clone()),
        Tensor::F16(a) => from!(a, |x: half::f16| x.to_f64()),
        Tensor::BF16(a) => from!(a, |x: half::bf16| x.to_f64()),
        Tensor::F32(a) => match to {
            // Direct, so that f32 -> i32 saturates at i32's bounds exactly.
            DType::I32 => Tensor::I32(a.mapv(|x| x as i32)),
            DType::F32 => Tensor::F32(a.clone()),
            _ => from!(a, |x: f32| x as f64),
        },
    }
}
