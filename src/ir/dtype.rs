//! Element types of tensors.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Booleans, one byte each: what comparisons give, and what `and`, `or`, `not` and
    /// `select`'s condition take.
    Bool,
    /// 32-bit signed integers, wrapping on overflow.
    I32,
    /// 64-bit signed integers, wrapping on overflow. `argmax`, `argmin` and `argsort` give
    /// their indices in it, and a bool `sum` gives it.
    I64,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16: a storage type. Arithmetic on it happens in `f32` (the IR's ops other
    /// than data movement, casts and `matmul` refuse it; the graph API casts around them).
    F16,
    /// bfloat16 (f32's exponent, 8 bits of precision): a storage type like `F16`.
    BF16,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 7] = [
        DType::Bool,
        DType::I32,
        DType::I64,
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// Any floating-point type, storage-only halves included.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// `f16` or `bf16`: stored in 16 bits, computed in `f32` (see `DType::F16`).
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The dtype arithmetic on this one happens in: `f32` for the halves, itself otherwise.
    pub fn compute(self) -> DType {
        if self.is_half() {
            DType::F32
        } else {
            self
        }
    }

    /// `i32` or `i64`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Integer or float: the dtypes arithmetic is defined on.
    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }

    /// The dtype's name in the text form and in messages (`f32`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "bool" => DType::Bool,
            "i32" => DType::I32,
            "i64" => DType::I64,
            "f32" => DType::F32,
            "f64" => DType::F64,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            _ => {
                return Err(format!(
                    "unknown dtype `{s}` (expected bool, i32, i64, f32, f64, f16 or bf16)"
                ))
            }
        })
    }
}

/// Rust scalar types that are kiln element types.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// The kiln dtype whose elements are this type.
    const DTYPE: DType;
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f64 {
    const DTYPE: DType = DType::F64;
}
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
}

/// `v` rounded to the nearest value of dtype `d` (ties to even), as `f64`: what storing `v`
/// into a `d` holds. Every host-side conversion to a half goes through here or
/// [`f16_of`] / [`bf16_of`], the one place their rounding is written; compiled code follows
/// the same steps (`codegen::clif::half`).
pub fn round_to(d: DType, v: f64) -> f64 {
    match d {
        DType::F16 => f16_of(v).to_f64(),
        DType::BF16 => bf16_of(v).to_f64(),
        DType::F32 => v as f32 as f64,
        _ => v,
    }
}

/// The bits of `v` rounded to the half `d` (`f16_of` / `bf16_of`): a half constant in
/// generated code.
pub fn half_bits(d: DType, v: f64) -> u16 {
    match d {
        DType::F16 => f16_of(v).to_bits(),
        _ => bf16_of(v).to_bits(),
    }
}

/// `v` as the nearest `f16` (ties to even), rounding once.
pub fn f16_of(v: f64) -> half::f16 {
    half::f16::from_f32(f32_round_to_odd(v))
}

/// `v` as the nearest `bf16` (ties to even), rounding once.
pub fn bf16_of(v: f64) -> half::bf16 {
    half::bf16::from_f32(f32_round_to_odd(v))
}

/// `v` rounded to `f32` toward zero, with the last bit set when that was inexact ("round to
/// odd"): rounding this to any format of at most 22 bits of precision gives the same result
/// as rounding `v` directly, so f64 -> half needs no 64-bit algorithm of its own. (`half`'s
/// own `from_f64` drops the f64's low 32 bits before rounding, which turns values just past a
/// tie into ties.)
pub fn f32_round_to_odd(v: f64) -> f32 {
    let d = v as f32;
    if d.is_nan() || d as f64 == v {
        return d;
    }
    let toward_zero = if (d as f64).abs() > v.abs() {
        d.to_bits() - 1
    } else {
        d.to_bits()
    };
    f32::from_bits(toward_zero | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_round_once_from_f64() {
        // Just past the tie between 1.0 and the next f16 (1 + 2^-10): the low bits past the
        // tie must round up, where truncating the f64 first would make it a tie (to even: 1.0).
        let past_tie = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16_of(past_tie).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(f16_of(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        let past_tie = 1.0 + 2f64.powi(-8) + 2f64.powi(-45);
        assert_eq!(bf16_of(past_tie).to_f64(), 1.0 + 2f64.powi(-7));
        // Overflow, underflow, signed zero, NaN.
        assert_eq!(f16_of(65520.0).to_f64(), f64::INFINITY);
        assert_eq!(f16_of(65519.99).to_f64(), 65504.0);
        assert_eq!(bf16_of(1e300).to_f64(), f64::INFINITY);
        assert_eq!(bf16_of(-1e300).to_f64(), f64::NEG_INFINITY);
        assert_eq!(f16_of(1e-300).to_f64(), 0.0);
        assert!(f16_of(-0.0).is_sign_negative());
        assert!(f16_of(f64::NAN).is_nan() && bf16_of(f64::NAN).is_nan());
        // Exactly representable values stay.
        for v in [0.5, -3.0, 65504.0, 2f64.powi(-24)] {
            assert_eq!(f16_of(v).to_f64(), v);
        }
    }
}
