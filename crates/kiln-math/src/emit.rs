//! The emitter interface the expansions are written against.

/// The float format an expansion computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prec {
    F32,
    F64,
}

/// Builds (or evaluates) float code. `F` is a float value (a scalar or a vector of lanes), `I` an
/// integer value of the same lane width (i32 lanes for f32, i64 lanes for f64), `M` a lane mask
/// (the result of a comparison). Every operation is lane-wise and rounds as IEEE-754 does in
/// round-to-nearest-even; nothing may be reassociated or contracted by the emitter.
#[allow(clippy::wrong_self_convention)]
pub trait Emit {
    type F: Copy;
    type I: Copy;
    type M: Copy;

    fn prec(&self) -> Prec;

    /// A float constant (rounded to the precision).
    fn fconst(&mut self, v: f64) -> Self::F;
    /// An integer constant (of the lane width).
    fn iconst(&mut self, v: i64) -> Self::I;
    /// A float constant used once, by the operation that follows (best as its last operand).
    /// Code generators may load it from memory there rather than hold it in a register:
    /// x86 instructions read their last operand from memory.
    fn fconst_operand(&mut self, v: f64) -> Self::F {
        self.fconst(v)
    }

    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b + c` with one rounding.
    fn fma(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn neg(&mut self, a: Self::F) -> Self::F;
    fn abs(&mut self, a: Self::F) -> Self::F;
    fn sqrt(&mut self, a: Self::F) -> Self::F;
    fn floor(&mut self, a: Self::F) -> Self::F;
    /// Round to the nearest integer, ties to even.
    fn round(&mut self, a: Self::F) -> Self::F;
    /// Copies the sign bit of `sign` onto `mag`.
    fn copysign(&mut self, mag: Self::F, sign: Self::F) -> Self::F;

    /// Ordered comparisons: false when either side is NaN.
    fn lt(&mut self, a: Self::F, b: Self::F) -> Self::M;
    fn le(&mut self, a: Self::F, b: Self::F) -> Self::M;
    fn eq(&mut self, a: Self::F, b: Self::F) -> Self::M;
    fn is_nan(&mut self, a: Self::F) -> Self::M;
    fn mand(&mut self, a: Self::M, b: Self::M) -> Self::M;
    fn mor(&mut self, a: Self::M, b: Self::M) -> Self::M;
    fn mnot(&mut self, a: Self::M) -> Self::M;
    /// Per lane: `a` where `m` is set, else `b`.
    fn select(&mut self, m: Self::M, a: Self::F, b: Self::F) -> Self::F;
    /// `x < lo ? lo : x` (a NaN `x` kept): a lower clamp, where a target has it as one
    /// instruction (x86's `maxps lo, x` is exactly this).
    #[inline(always)]
    fn clamp_below(&mut self, x: Self::F, lo: Self::F) -> Self::F {
        let m = self.lt(x, lo);
        self.select(m, lo, x)
    }
    /// `hi < x ? hi : x` (a NaN `x` kept): an upper clamp (x86's `minps hi, x`).
    #[inline(always)]
    fn clamp_above(&mut self, x: Self::F, hi: Self::F) -> Self::F {
        let m = self.lt(hi, x);
        self.select(m, hi, x)
    }
    fn iselect(&mut self, m: Self::M, a: Self::I, b: Self::I) -> Self::I;

    /// The bits of a float as an integer, and back.
    fn to_bits(&mut self, a: Self::F) -> Self::I;
    fn from_bits(&mut self, a: Self::I) -> Self::F;
    /// Float to integer, truncating toward zero (the input is known to be in range).
    fn to_int(&mut self, a: Self::F) -> Self::I;
    /// Integer to float (exact for the magnitudes the expansions use).
    fn to_float(&mut self, a: Self::I) -> Self::F;
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn shl(&mut self, a: Self::I, bits: u32) -> Self::I;
    /// Arithmetic (sign-extending) shift right.
    fn sshr(&mut self, a: Self::I, bits: u32) -> Self::I;
    /// Logical shift right.
    fn ushr(&mut self, a: Self::I, bits: u32) -> Self::I;
    fn ieq(&mut self, a: Self::I, b: Self::I) -> Self::M;
    fn ilt(&mut self, a: Self::I, b: Self::I) -> Self::M;

    /// The rare-input escape: in lanes where `m` is set, the result is the reference function
    /// `name` (a libm name without precision suffix: "sin", "cos", "tan", ...) applied to `x`;
    /// elsewhere it is `fast`. Code generators branch around it when no lane needs it, so it
    /// costs nothing on the common path. Use it only where the fast path cannot be made
    /// accurate (huge arguments of sin/cos), never for ordinary inputs.
    fn fallback(&mut self, name: &'static str, m: Self::M, x: Self::F, fast: Self::F) -> Self::F;
}

/// Scalar evaluators: run an expansion on one `f32` or `f64`.
pub struct Eval32;
pub struct Eval64;

macro_rules! eval_impl {
    ($ty:ident, $f:ty, $i:ty, $u:ty, $prec:expr) => {
        impl Emit for $ty {
            type F = $f;
            type I = $i;
            type M = bool;
            fn prec(&self) -> Prec {
                $prec
            }
            fn fconst(&mut self, v: f64) -> $f {
                v as $f
            }
            fn iconst(&mut self, v: i64) -> $i {
                v as $i
            }
            fn add(&mut self, a: $f, b: $f) -> $f {
                a + b
            }
            fn sub(&mut self, a: $f, b: $f) -> $f {
                a - b
            }
            fn mul(&mut self, a: $f, b: $f) -> $f {
                a * b
            }
            fn div(&mut self, a: $f, b: $f) -> $f {
                a / b
            }
            fn fma(&mut self, a: $f, b: $f, c: $f) -> $f {
                a.mul_add(b, c)
            }
            fn neg(&mut self, a: $f) -> $f {
                -a
            }
            fn abs(&mut self, a: $f) -> $f {
                a.abs()
            }
            fn sqrt(&mut self, a: $f) -> $f {
                a.sqrt()
            }
            fn floor(&mut self, a: $f) -> $f {
                a.floor()
            }
            fn round(&mut self, a: $f) -> $f {
                a.round_ties_even()
            }
            fn copysign(&mut self, mag: $f, sign: $f) -> $f {
                mag.copysign(sign)
            }
            fn lt(&mut self, a: $f, b: $f) -> bool {
                a < b
            }
            fn le(&mut self, a: $f, b: $f) -> bool {
                a <= b
            }
            fn eq(&mut self, a: $f, b: $f) -> bool {
                a == b
            }
            fn is_nan(&mut self, a: $f) -> bool {
                a.is_nan()
            }
            fn mand(&mut self, a: bool, b: bool) -> bool {
                a & b
            }
            fn mor(&mut self, a: bool, b: bool) -> bool {
                a | b
            }
            fn mnot(&mut self, a: bool) -> bool {
                !a
            }
            fn select(&mut self, m: bool, a: $f, b: $f) -> $f {
                if m {
                    a
                } else {
                    b
                }
            }
            fn iselect(&mut self, m: bool, a: $i, b: $i) -> $i {
                if m {
                    a
                } else {
                    b
                }
            }
            fn to_bits(&mut self, a: $f) -> $i {
                a.to_bits() as $i
            }
            fn from_bits(&mut self, a: $i) -> $f {
                <$f>::from_bits(a as $u)
            }
            fn to_int(&mut self, a: $f) -> $i {
                a as $i
            }
            fn to_float(&mut self, a: $i) -> $f {
                a as $f
            }
            fn iadd(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_add(b)
            }
            fn isub(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_sub(b)
            }
            fn iand(&mut self, a: $i, b: $i) -> $i {
                a & b
            }
            fn ior(&mut self, a: $i, b: $i) -> $i {
                a | b
            }
            fn shl(&mut self, a: $i, bits: u32) -> $i {
                a.wrapping_shl(bits)
            }
            fn sshr(&mut self, a: $i, bits: u32) -> $i {
                a.wrapping_shr(bits)
            }
            fn ushr(&mut self, a: $i, bits: u32) -> $i {
                ((a as $u) >> bits) as $i
            }
            fn ieq(&mut self, a: $i, b: $i) -> bool {
                a == b
            }
            fn ilt(&mut self, a: $i, b: $i) -> bool {
                a < b
            }
            fn fallback(&mut self, name: &'static str, m: bool, x: $f, fast: $f) -> $f {
                if m {
                    reference(name, x as f64) as $f
                } else {
                    fast
                }
            }
        }
    };
}
eval_impl!(Eval32, f32, i32, u32, Prec::F32);
eval_impl!(Eval64, f64, i64, u64, Prec::F64);

/// The libm functions `fallback` may name, in f64 (f32 lanes round the f64 result, which for
/// these functions is correctly rounded in all but astronomically rare cases).
pub fn reference(name: &str, x: f64) -> f64 {
    match name {
        "sin" => libm::sin(x),
        "cos" => libm::cos(x),
        "tan" => libm::tan(x),
        _ => f64::NAN,
    }
}
