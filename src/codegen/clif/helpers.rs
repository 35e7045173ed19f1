//! Functions that generated code calls for the scalar ops Cranelift has no instruction for.
//! They call the very functions the reference `perform` uses, so compiled results are
//! bit-identical to the interpreter's. Every one is registered with the JIT by name
//! (`SYMBOLS`): an unregistered import would make cranelift-jit panic.

use crate::perform::{float_divmod, sigmoid, IntArith};

macro_rules! float_unary {
    ($($name32:ident, $name64:ident => |$x:ident| $e:expr;)*) => {$(
        extern "C" fn $name32($x: f32) -> f32 { $e }
        extern "C" fn $name64($x: f64) -> f64 { $e }
    )*};
}

float_unary! {
    kiln_exp_f32, kiln_exp_f64 => |x| x.exp();
    kiln_log_f32, kiln_log_f64 => |x| x.ln();
    kiln_log1p_f32, kiln_log1p_f64 => |x| x.ln_1p();
    kiln_expm1_f32, kiln_expm1_f64 => |x| x.exp_m1();
    kiln_sin_f32, kiln_sin_f64 => |x| x.sin();
    kiln_cos_f32, kiln_cos_f64 => |x| x.cos();
    kiln_tan_f32, kiln_tan_f64 => |x| x.tan();
    kiln_tanh_f32, kiln_tanh_f64 => |x| x.tanh();
    kiln_sigmoid_f32, kiln_sigmoid_f64 => |x| sigmoid(x);
}

extern "C" fn kiln_erf_f32(x: f32) -> f32 {
    libm::erff(x)
}
extern "C" fn kiln_erf_f64(x: f64) -> f64 {
    libm::erf(x)
}
extern "C" fn kiln_pow_f32(a: f32, b: f32) -> f32 {
    a.powf(b)
}
extern "C" fn kiln_pow_f64(a: f64, b: f64) -> f64 {
    a.powf(b)
}
extern "C" fn kiln_floordiv_f32(a: f32, b: f32) -> f32 {
    float_divmod(a, b).0
}
extern "C" fn kiln_floordiv_f64(a: f64, b: f64) -> f64 {
    float_divmod(a, b).0
}
extern "C" fn kiln_mod_f32(a: f32, b: f32) -> f32 {
    float_divmod(a, b).1
}
extern "C" fn kiln_mod_f64(a: f64, b: f64) -> f64 {
    float_divmod(a, b).1
}

macro_rules! int_helpers {
    ($t:ty, $fd:ident, $md:ident, $pw:ident) => {
        extern "C" fn $fd(a: $t, b: $t) -> $t {
            a.floordiv(b)
        }
        extern "C" fn $md(a: $t, b: $t) -> $t {
            a.modulo(b)
        }
        extern "C" fn $pw(a: $t, b: $t) -> $t {
            a.ipow(b)
        }
    };
}
int_helpers!(i32, kiln_floordiv_i32, kiln_mod_i32, kiln_pow_i32);
int_helpers!(i64, kiln_floordiv_i64, kiln_mod_i64, kiln_pow_i64);

/// The reference functions the math expansions fall back on for rare inputs (huge arguments of
/// sin and cos): the same values `crate::math::reference` gives the evaluators.
macro_rules! reference_helpers {
    ($($name:literal => $f32:ident, $f64:ident;)*) => {
        $(
            extern "C" fn $f32(x: f32) -> f32 {
                crate::math::reference($name, x as f64) as f32
            }
            extern "C" fn $f64(x: f64) -> f64 {
                crate::math::reference($name, x)
            }
        )*
        const REFERENCE: &[(&str, *const u8)] = &[
            $(
                (concat!("kiln_ref_", $name, "_f32"), $f32 as *const u8),
                (concat!("kiln_ref_", $name, "_f64"), $f64 as *const u8),
            )*
        ];
    };
}
reference_helpers! {
    "sin" => kiln_ref_sin_f32, kiln_ref_sin_f64;
    "cos" => kiln_ref_cos_f32, kiln_ref_cos_f64;
    "tan" => kiln_ref_tan_f32, kiln_ref_tan_f64;
}

/// Whether generated code may import `name`: only registered helpers resolve (cranelift-jit
/// panics on a symbol it cannot find), so every import is checked against this first.
pub fn is_registered(name: &str) -> bool {
    symbols().any(|(n, _)| n == name)
}

/// Every helper by the name generated code imports it under.
pub fn symbols() -> impl Iterator<Item = (&'static str, *const u8)> {
    SYMBOLS
        .iter()
        .chain(REFERENCE)
        .copied()
        .chain(super::host_math::symbols())
}

/// Every helper by the name generated code imports it under.
const SYMBOLS: &[(&str, *const u8)] = &[
    ("kiln_exp_f32", kiln_exp_f32 as *const u8),
    ("kiln_exp_f64", kiln_exp_f64 as *const u8),
    ("kiln_log_f32", kiln_log_f32 as *const u8),
    ("kiln_log_f64", kiln_log_f64 as *const u8),
    ("kiln_log1p_f32", kiln_log1p_f32 as *const u8),
    ("kiln_log1p_f64", kiln_log1p_f64 as *const u8),
    ("kiln_expm1_f32", kiln_expm1_f32 as *const u8),
    ("kiln_expm1_f64", kiln_expm1_f64 as *const u8),
    ("kiln_sin_f32", kiln_sin_f32 as *const u8),
    ("kiln_sin_f64", kiln_sin_f64 as *const u8),
    ("kiln_cos_f32", kiln_cos_f32 as *const u8),
    ("kiln_cos_f64", kiln_cos_f64 as *const u8),
    ("kiln_tan_f32", kiln_tan_f32 as *const u8),
    ("kiln_tan_f64", kiln_tan_f64 as *const u8),
    ("kiln_tanh_f32", kiln_tanh_f32 as *const u8),
    ("kiln_tanh_f64", kiln_tanh_f64 as *const u8),
    ("kiln_sigmoid_f32", kiln_sigmoid_f32 as *const u8),
    ("kiln_sigmoid_f64", kiln_sigmoid_f64 as *const u8),
    ("kiln_erf_f32", kiln_erf_f32 as *const u8),
    ("kiln_erf_f64", kiln_erf_f64 as *const u8),
    ("kiln_pow_f32", kiln_pow_f32 as *const u8),
    ("kiln_pow_f64", kiln_pow_f64 as *const u8),
    ("kiln_floordiv_f32", kiln_floordiv_f32 as *const u8),
    ("kiln_floordiv_f64", kiln_floordiv_f64 as *const u8),
    ("kiln_mod_f32", kiln_mod_f32 as *const u8),
    ("kiln_mod_f64", kiln_mod_f64 as *const u8),
    ("kiln_floordiv_i32", kiln_floordiv_i32 as *const u8),
    ("kiln_floordiv_i64", kiln_floordiv_i64 as *const u8),
    ("kiln_mod_i32", kiln_mod_i32 as *const u8),
    ("kiln_mod_i64", kiln_mod_i64 as *const u8),
    ("kiln_pow_i32", kiln_pow_i32 as *const u8),
    ("kiln_pow_i64", kiln_pow_i64 as *const u8),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    /// Every name the code generators form for an import resolves: the helpers of scalar
    /// ops (per dtype) and the reference fallbacks of the math expansions (per precision).
    #[test]
    fn every_name_generated_code_imports_is_registered() {
        let mut names = Vec::new();
        for d in [DType::F32, DType::F64] {
            let s = super::super::scalar_ops::suffix(d);
            for f in [
                "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sigmoid", "erf",
                "pow", "floordiv", "mod",
            ] {
                names.push(format!("kiln_{f}_{s}"));
            }
        }
        for d in [DType::I32, DType::I64] {
            let s = super::super::scalar_ops::suffix(d);
            for f in ["floordiv", "mod", "pow"] {
                names.push(format!("kiln_{f}_{s}"));
            }
        }
        for p in [crate::math::Prec::F32, crate::math::Prec::F64] {
            for f in ["sin", "cos", "tan"] {
                names.push(super::super::math_clif::fallback_symbol(f, p));
            }
        }
        if super::super::host_math::enabled() {
            for f in crate::math::MathFn::ALL {
                for d in [DType::F32, DType::F64] {
                    names.push(super::super::host_math::biased_symbol(f, d).to_string());
                    for s in [false, true] {
                        names.push(super::super::host_math::symbol(f, d, s).to_string());
                        names.push(super::super::host_math::sum_symbol(f, d, s).to_string());
                    }
                }
            }
        }
        for n in &names {
            assert!(is_registered(n), "{n} is not registered");
        }
        assert!(!is_registered("kiln_no_such_helper"));
        // The cursor seek is generated into each module, never imported.
        assert!(!is_registered(super::super::nd_seek::SEEK));
        // No name is registered twice (the JIT would keep only one address).
        let mut all: Vec<&str> = symbols().map(|(n, _)| n).collect();
        let len = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), len);
    }
}
