//! The emitter interface the expansions are written against.

/// The float format an expansion computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prec {
    /// IEEE-754 binary32 (`f32`), with i32 integer lanes.
    F32,
    /// IEEE-754 binary64 (`f64`), with i64 integer lanes.
    F64,
}

/// Builds (or evaluates) float code. `F` is a float value (a scalar or a vector of lanes), `I` an
/// integer value of the same lane width (i32 lanes for f32, i64 lanes for f64), `M` a lane mask
/// (the result of a comparison). Every operation is lane-wise and rounds as IEEE-754 does in
/// round-to-nearest-even; nothing may be reassociated or contracted by the emitter.
#[allow(clippy::wrong_self_convention)]
pub trait Emit {
    /// A float value: a scalar or a vector of lanes.
    type F: Copy;
    /// An integer value with lanes of the float's width (i32 for f32, i64 for f64).
    type I: Copy;
    /// A lane mask, the result of a comparison.
    type M: Copy;

    /// The float format the emitter computes in; expansions consult it only to pick
    /// coefficients, thresholds and the bit layout.
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

    /// `a + b`.
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a - b`.
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b`.
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a / b`.
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b + c` with one rounding.
    fn fma(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `-a`: the sign bit flipped (NaN and zero included).
    fn neg(&mut self, a: Self::F) -> Self::F;
    /// `|a|`: the sign bit cleared.
    fn abs(&mut self, a: Self::F) -> Self::F;
    /// The square root, correctly rounded.
    fn sqrt(&mut self, a: Self::F) -> Self::F;
    /// Round toward negative infinity to an integer.
    fn floor(&mut self, a: Self::F) -> Self::F;
    /// Round to the nearest integer, ties to even.
    fn round(&mut self, a: Self::F) -> Self::F;
    /// Copies the sign bit of `sign` onto `mag`.
    fn copysign(&mut self, mag: Self::F, sign: Self::F) -> Self::F;

    /// `a < b`. The comparisons are ordered: false when either side is NaN.
    fn lt(&mut self, a: Self::F, b: Self::F) -> Self::M;
    /// `a <= b` (ordered).
    fn le(&mut self, a: Self::F, b: Self::F) -> Self::M;
    /// `a == b` (ordered; `-0 == +0`).
    fn eq(&mut self, a: Self::F, b: Self::F) -> Self::M;
    /// Set in the lanes where `a` is NaN.
    fn is_nan(&mut self, a: Self::F) -> Self::M;
    /// Lane-wise `a and b` of two masks.
    fn mand(&mut self, a: Self::M, b: Self::M) -> Self::M;
    /// Lane-wise `a or b` of two masks.
    fn mor(&mut self, a: Self::M, b: Self::M) -> Self::M;
    /// Lane-wise `not a` of a mask.
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
    /// Per lane: `a` where `m` is set, else `b` ([`Emit::select`] on integers).
    fn iselect(&mut self, m: Self::M, a: Self::I, b: Self::I) -> Self::I;

    /// The bits of a float as an integer, and back.
    fn to_bits(&mut self, a: Self::F) -> Self::I;
    /// The float whose bits are `a` (the inverse of [`Emit::to_bits`]).
    fn from_bits(&mut self, a: Self::I) -> Self::F;
    /// Float to integer, truncating toward zero (the input is known to be in range).
    fn to_int(&mut self, a: Self::F) -> Self::I;
    /// Integer to float (exact for the magnitudes the expansions use).
    fn to_float(&mut self, a: Self::I) -> Self::F;
    /// `a + b`, wrapping.
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// `a - b`, wrapping.
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Bitwise `a & b`.
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Bitwise `a | b`.
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Shift left by `bits` (less than the lane width).
    fn shl(&mut self, a: Self::I, bits: u32) -> Self::I;
    /// Arithmetic (sign-extending) shift right.
    fn sshr(&mut self, a: Self::I, bits: u32) -> Self::I;
    /// Logical shift right.
    fn ushr(&mut self, a: Self::I, bits: u32) -> Self::I;
    /// `a == b` on integers.
    fn ieq(&mut self, a: Self::I, b: Self::I) -> Self::M;
    /// `a < b` on signed integers.
    fn ilt(&mut self, a: Self::I, b: Self::I) -> Self::M;

    /// The rare-input escape: in lanes where `m` is set, the result is the reference function
    /// `name` (a libm name without precision suffix: "sin", "cos", "tan", ...) applied to `x`;
    /// elsewhere it is `fast`. Code generators branch around it when no lane needs it, so it
    /// costs nothing on the common path. Use it only where the fast path cannot be made
    /// accurate (huge arguments of sin/cos), never for ordinary inputs.
    fn fallback(&mut self, name: &'static str, m: Self::M, x: Self::F, fast: Self::F) -> Self::F;
}

/// The scalar evaluator in f32: runs an expansion on one `f32` (masks are `bool`), giving the
/// bits generated code computes; the ulp tests measure it.
pub struct Eval32;
/// The scalar evaluator in f64: runs an expansion on one `f64`, as [`Eval32`] does in f32.
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

/// The libm functions [`Emit::fallback`] may name, in f64 (f32 lanes round the f64 result, which
/// for these functions is correctly rounded in all but astronomically rare cases); any other
/// name gives NaN.
pub fn reference(name: &str, x: f64) -> f64 {
    match name {
        "sin" => libm::sin(x),
        "cos" => libm::cos(x),
        "tan" => libm::tan(x),
        _ => f64::NAN,
    }
}
