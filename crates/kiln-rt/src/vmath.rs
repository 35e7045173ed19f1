//! The math expansions' buffer functions (`kiln_math::avx2`, 256-bit, and `kiln_math::avx512`,
//! 512-bit), exported under the names generated code calls them by (`kiln_math::symbols`): an
//! object compiled with the runtime computes a kernel's `exp`, `tanh`, ... as the JIT's kernels
//! do, 8 or 16 f32 lanes at a time, where its own inline code has 4. Objects for x86_64 need
//! AVX2 and FMA in any case (the `haswell` preset), so the 256-bit functions serve without
//! asking; the 512-bit ones serve by the JIT's rule (kiln's `codegen::clif::host_math::width`),
//! decided when the object's process first calls one: where its products run AVX-512
//! (`KILN_CPU_ISA`, else the widest the CPU runs). Both widths give the same bits.

use kiln_math::MathFn;
use std::sync::OnceLock;

/// Whether the 512-bit functions serve this process (see the module's docs).
fn wide() -> bool {
    static WIDE: OnceLock<bool> = OnceLock::new();
    *WIDE.get_or_init(|| {
        kiln_gemm::isa() == kiln_gemm::Isa::Avx512 && kiln_math::avx512::available()
    })
}

/// Each getter of `kiln_math::avx2`, answered by `avx512`'s where [`wide`] says so.
macro_rules! by_width {
    ($($get:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        fn $get($($arg: $ty),*) -> $ret {
            match wide() {
                true => kiln_math::avx512::$get($($arg),*),
                false => kiln_math::avx2::$get($($arg),*),
            }
        }
    )*};
}

by_width! {
    buffer_fn_f32(f: MathFn, shifted: bool) -> unsafe extern "C" fn(*const f32, *mut f32, usize, f32);
    buffer_fn_f64(f: MathFn, shifted: bool) -> unsafe extern "C" fn(*const f64, *mut f64, usize, f64);
    sum_fn_f32(f: MathFn, shifted: bool) -> unsafe extern "C" fn(*const f32, usize, f32) -> f32;
    sum_fn_f64(f: MathFn, shifted: bool) -> unsafe extern "C" fn(*const f64, usize, f64) -> f64;
    biased_fn_f32(f: MathFn) -> unsafe extern "C" fn(*const f32, *const f32, *mut f32, usize);
    biased_fn_f64(f: MathFn) -> unsafe extern "C" fn(*const f64, *const f64, *mut f64, usize);
}

/// For each function: its map, shifted map, sum, shifted sum and biased entry points in f32,
/// then in f64, as `extern "C"` functions of those names; and `EXPORTS`, every name.
macro_rules! exports {
    ($($f:ident: $m32:ident $sm32:ident $s32:ident $ss32:ident $b32:ident,
        $m64:ident $sm64:ident $s64:ident $ss64:ident $b64:ident;)*) => {
        $(
            exports!(@map $f, $m32, f32, buffer_fn_f32, false);
            exports!(@map $f, $sm32, f32, buffer_fn_f32, true);
            exports!(@sum $f, $s32, f32, sum_fn_f32, false);
            exports!(@sum $f, $ss32, f32, sum_fn_f32, true);
            exports!(@biased $f, $b32, f32, biased_fn_f32);
            exports!(@map $f, $m64, f64, buffer_fn_f64, false);
            exports!(@map $f, $sm64, f64, buffer_fn_f64, true);
            exports!(@sum $f, $s64, f64, sum_fn_f64, false);
            exports!(@sum $f, $ss64, f64, sum_fn_f64, true);
            exports!(@biased $f, $b64, f64, biased_fn_f64);
        )*
        /// Every exported name.
        #[cfg(test)]
        const EXPORTS: &[&str] = &[$(
            stringify!($m32), stringify!($sm32), stringify!($s32), stringify!($ss32),
            stringify!($b32), stringify!($m64), stringify!($sm64), stringify!($s64),
            stringify!($ss64), stringify!($b64),
        )*];
    };
    (@map $f:ident, $name:ident, $t:ty, $get:ident, $shifted:expr) => {
        /// `dst[i] = f(src[i])` (less `shift` where shifted) for `i < n`.
        ///
        /// # Safety
        /// `src` and `dst` address `n` elements (the same ones, or apart); AVX2 and FMA.
        #[no_mangle]
        pub unsafe extern "C" fn $name(src: *const $t, dst: *mut $t, n: usize, shift: $t) {
            // SAFETY: the caller's promise.
            unsafe { $get(MathFn::$f, $shifted)(src, dst, n, shift) }
        }
    };
    (@sum $f:ident, $name:ident, $t:ty, $get:ident, $shifted:expr) => {
        /// The sum of `f(src[i])` (less `shift` where shifted) in a float sum's order.
        ///
        /// # Safety
        /// `src` addresses `n` elements; AVX2 and FMA.
        #[no_mangle]
        pub unsafe extern "C" fn $name(src: *const $t, n: usize, shift: $t) -> $t {
            // SAFETY: the caller's promise.
            unsafe { $get(MathFn::$f, $shifted)(src, n, shift) }
        }
    };
    (@biased $f:ident, $name:ident, $t:ty, $get:ident) => {
        /// `dst[i] = f(src[i] + bias[i])` for `i < n`.
        ///
        /// # Safety
        /// The three address `n` elements (`dst` may be `src`); AVX2 and FMA.
        #[no_mangle]
        pub unsafe extern "C" fn $name(src: *const $t, bias: *const $t, dst: *mut $t, n: usize) {
            // SAFETY: the caller's promise.
            unsafe { $get(MathFn::$f)(src, bias, dst, n) }
        }
    };
}

exports! {
    Exp: kiln_rt_vmath_exp_f32 kiln_rt_vmath_shifted_exp_f32 kiln_rt_vmath_sum_exp_f32 kiln_rt_vmath_sum_shifted_exp_f32 kiln_rt_vmath_biased_exp_f32,
        kiln_rt_vmath_exp_f64 kiln_rt_vmath_shifted_exp_f64 kiln_rt_vmath_sum_exp_f64 kiln_rt_vmath_sum_shifted_exp_f64 kiln_rt_vmath_biased_exp_f64;
    Expm1: kiln_rt_vmath_expm1_f32 kiln_rt_vmath_shifted_expm1_f32 kiln_rt_vmath_sum_expm1_f32 kiln_rt_vmath_sum_shifted_expm1_f32 kiln_rt_vmath_biased_expm1_f32,
        kiln_rt_vmath_expm1_f64 kiln_rt_vmath_shifted_expm1_f64 kiln_rt_vmath_sum_expm1_f64 kiln_rt_vmath_sum_shifted_expm1_f64 kiln_rt_vmath_biased_expm1_f64;
    Log: kiln_rt_vmath_log_f32 kiln_rt_vmath_shifted_log_f32 kiln_rt_vmath_sum_log_f32 kiln_rt_vmath_sum_shifted_log_f32 kiln_rt_vmath_biased_log_f32,
        kiln_rt_vmath_log_f64 kiln_rt_vmath_shifted_log_f64 kiln_rt_vmath_sum_log_f64 kiln_rt_vmath_sum_shifted_log_f64 kiln_rt_vmath_biased_log_f64;
    Log1p: kiln_rt_vmath_log1p_f32 kiln_rt_vmath_shifted_log1p_f32 kiln_rt_vmath_sum_log1p_f32 kiln_rt_vmath_sum_shifted_log1p_f32 kiln_rt_vmath_biased_log1p_f32,
        kiln_rt_vmath_log1p_f64 kiln_rt_vmath_shifted_log1p_f64 kiln_rt_vmath_sum_log1p_f64 kiln_rt_vmath_sum_shifted_log1p_f64 kiln_rt_vmath_biased_log1p_f64;
    Sin: kiln_rt_vmath_sin_f32 kiln_rt_vmath_shifted_sin_f32 kiln_rt_vmath_sum_sin_f32 kiln_rt_vmath_sum_shifted_sin_f32 kiln_rt_vmath_biased_sin_f32,
        kiln_rt_vmath_sin_f64 kiln_rt_vmath_shifted_sin_f64 kiln_rt_vmath_sum_sin_f64 kiln_rt_vmath_sum_shifted_sin_f64 kiln_rt_vmath_biased_sin_f64;
    Cos: kiln_rt_vmath_cos_f32 kiln_rt_vmath_shifted_cos_f32 kiln_rt_vmath_sum_cos_f32 kiln_rt_vmath_sum_shifted_cos_f32 kiln_rt_vmath_biased_cos_f32,
        kiln_rt_vmath_cos_f64 kiln_rt_vmath_shifted_cos_f64 kiln_rt_vmath_sum_cos_f64 kiln_rt_vmath_sum_shifted_cos_f64 kiln_rt_vmath_biased_cos_f64;
    Tan: kiln_rt_vmath_tan_f32 kiln_rt_vmath_shifted_tan_f32 kiln_rt_vmath_sum_tan_f32 kiln_rt_vmath_sum_shifted_tan_f32 kiln_rt_vmath_biased_tan_f32,
        kiln_rt_vmath_tan_f64 kiln_rt_vmath_shifted_tan_f64 kiln_rt_vmath_sum_tan_f64 kiln_rt_vmath_sum_shifted_tan_f64 kiln_rt_vmath_biased_tan_f64;
    Tanh: kiln_rt_vmath_tanh_f32 kiln_rt_vmath_shifted_tanh_f32 kiln_rt_vmath_sum_tanh_f32 kiln_rt_vmath_sum_shifted_tanh_f32 kiln_rt_vmath_biased_tanh_f32,
        kiln_rt_vmath_tanh_f64 kiln_rt_vmath_shifted_tanh_f64 kiln_rt_vmath_sum_tanh_f64 kiln_rt_vmath_sum_shifted_tanh_f64 kiln_rt_vmath_biased_tanh_f64;
    Sigmoid: kiln_rt_vmath_sigmoid_f32 kiln_rt_vmath_shifted_sigmoid_f32 kiln_rt_vmath_sum_sigmoid_f32 kiln_rt_vmath_sum_shifted_sigmoid_f32 kiln_rt_vmath_biased_sigmoid_f32,
        kiln_rt_vmath_sigmoid_f64 kiln_rt_vmath_shifted_sigmoid_f64 kiln_rt_vmath_sum_sigmoid_f64 kiln_rt_vmath_sum_shifted_sigmoid_f64 kiln_rt_vmath_biased_sigmoid_f64;
    Erf: kiln_rt_vmath_erf_f32 kiln_rt_vmath_shifted_erf_f32 kiln_rt_vmath_sum_erf_f32 kiln_rt_vmath_sum_shifted_erf_f32 kiln_rt_vmath_biased_erf_f32,
        kiln_rt_vmath_erf_f64 kiln_rt_vmath_shifted_erf_f64 kiln_rt_vmath_sum_erf_f64 kiln_rt_vmath_sum_shifted_erf_f64 kiln_rt_vmath_biased_erf_f64;
}

#[cfg(test)]
mod tests {
    /// The library exports every name generated code may call, and no other.
    #[test]
    fn every_name_generated_code_calls_is_exported() {
        let mut want = kiln_math::symbols::all();
        let mut got = super::EXPORTS.to_vec();
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }
}
