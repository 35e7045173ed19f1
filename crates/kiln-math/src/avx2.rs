//! The expansions compiled by rustc for 256-bit vectors (AVX2 + FMA), over whole buffers.
//!
//! Cranelift's x86 backend has 128-bit vectors only; LLVM, through rustc, has 256-bit ones.
//! This module implements [`Emit`] on `__m256` / `__m256d` with `std::arch` and runs the very
//! expansions of this crate through it, so these buffer functions compute the same bits as
//! the generated 128-bit code and the evaluators (the tail that does not fill a vector runs
//! the evaluator itself). The CPU backend calls them from kernels, a chunk of lanes at a time,
//! where the host has AVX2 and FMA (see kiln's `codegen::clif::host_math`).
//!
//! Every emitter method and every expansion is `#[inline(always)]`: the expansion must be
//! inlined whole into the `#[target_feature(enable = "avx2,fma")]` loop, or the intrinsics
//! would be out-of-line calls in code compiled without AVX.

use super::{unary_inline as unary, Emit, Eval32, Eval64, MathFn, Prec};
use crate::PAIRWISE;

use std::arch::x86_64::*;

/// A float sum's leaf length and split point ([`PAIRWISE`], the reference's order).
const PAIRWISE_BLOCK: usize = PAIRWISE.block;
fn pairwise_mid(n: usize) -> usize {
    PAIRWISE.mid(n)
}

/// How far ahead of what it reads a shifted sum (`sum(f(x - c))`, logsumexp's and softmax's
/// `sum(exp(x - max))`) prefetches, in elements: one block of a row group
/// (`runtime::rows::BLOCK_ELEMS`, 8 rows of 4096). Such a sum runs after a pass that found
/// the row constant, so its own rows are in cache and the next block's are not: fetching
/// those while the exponentials are computed lets the next block's first pass (the row max)
/// read from cache instead of waiting on memory. W3: 7.5-8.1 ms -> 6.6-6.7 ms on 2 threads.
/// Prefetches do not fault, so reading ahead past the end of a buffer is harmless.
pub const PREFETCH_AHEAD: usize = 1 << 15;

/// f32 lanes, eight to a vector.
pub struct Avx32;
/// f64 lanes, four to a vector.
pub struct Avx64;

/// Whether this CPU runs the functions of this module (AVX2 and FMA).
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

// SAFETY (for every `unsafe` block below): the intrinsics need AVX2 + FMA, and these emitters
// are only used inside the `target_feature` functions at the end of this file, which are only
// called after `available()` said yes.

#[allow(clippy::wrong_self_convention)]
impl Emit for Avx32 {
    type F = __m256;
    type I = __m256i;
    type M = __m256;

    #[inline(always)]
    fn prec(&self) -> Prec {
        Prec::F32
    }
    #[inline(always)]
    fn fconst(&mut self, v: f64) -> __m256 {
        unsafe { _mm256_set1_ps(v as f32) }
    }
    #[inline(always)]
    fn iconst(&mut self, v: i64) -> __m256i {
        unsafe { _mm256_set1_epi32(v as i32) }
    }
    #[inline(always)]
    fn add(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    fn fma(&mut self, a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn neg(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_xor_ps(a, _mm256_set1_ps(-0.0)) }
    }
    #[inline(always)]
    fn abs(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), a) }
    }
    #[inline(always)]
    fn sqrt(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_sqrt_ps(a) }
    }
    #[inline(always)]
    fn floor(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn round(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn copysign(&mut self, mag: __m256, sign: __m256) -> __m256 {
        unsafe {
            let s = _mm256_set1_ps(-0.0);
            _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign))
        }
    }
    #[inline(always)]
    fn lt(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    fn le(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_LE_OQ>(a, b) }
    }
    #[inline(always)]
    fn eq(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b) }
    }
    #[inline(always)]
    fn is_nan(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    fn mand(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn mor(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn mnot(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1))) }
    }
    #[inline(always)]
    fn select(&mut self, m: __m256, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_blendv_ps(b, a, m) }
    }
    // `maxps a, b` is `a > b ? a : b` (b where either is NaN): `clamp_below`'s select.
    #[inline(always)]
    fn clamp_below(&mut self, x: __m256, lo: __m256) -> __m256 {
        unsafe { _mm256_max_ps(lo, x) }
    }
    #[inline(always)]
    fn clamp_above(&mut self, x: __m256, hi: __m256) -> __m256 {
        unsafe { _mm256_min_ps(hi, x) }
    }
    #[inline(always)]
    fn iselect(&mut self, m: __m256, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_blendv_epi8(b, a, _mm256_castps_si256(m)) }
    }
    #[inline(always)]
    fn to_bits(&mut self, a: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(a) }
    }
    #[inline(always)]
    fn from_bits(&mut self, a: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(a) }
    }
    #[inline(always)]
    fn to_int(&mut self, a: __m256) -> __m256i {
        unsafe { _mm256_cvttps_epi32(a) }
    }
    #[inline(always)]
    fn to_float(&mut self, a: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn iadd(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    fn isub(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    fn iand(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    fn ior(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    fn shl(&mut self, a: __m256i, bits: u32) -> __m256i {
        unsafe { _mm256_sll_epi32(a, _mm_cvtsi32_si128(bits as i32)) }
    }
    #[inline(always)]
    fn sshr(&mut self, a: __m256i, bits: u32) -> __m256i {
        unsafe { _mm256_sra_epi32(a, _mm_cvtsi32_si128(bits as i32)) }
    }
    #[inline(always)]
    fn ushr(&mut self, a: __m256i, bits: u32) -> __m256i {
        unsafe { _mm256_srl_epi32(a, _mm_cvtsi32_si128(bits as i32)) }
    }
    #[inline(always)]
    fn ieq(&mut self, a: __m256i, b: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)) }
    }
    #[inline(always)]
    fn ilt(&mut self, a: __m256i, b: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, a)) }
    }
    #[inline(always)]
    fn fallback(&mut self, name: &'static str, m: __m256, x: __m256, fast: __m256) -> __m256 {
        unsafe {
            if _mm256_movemask_ps(m) == 0 {
                return fast;
            }
            lanes_fallback::<f32, 8, _>(name, m, x, fast)
        }
    }
}

#[allow(clippy::wrong_self_convention)]
impl Emit for Avx64 {
    type F = __m256d;
    type I = __m256i;
    type M = __m256d;

    #[inline(always)]
    fn prec(&self) -> Prec {
        Prec::F64
    }
    #[inline(always)]
    fn fconst(&mut self, v: f64) -> __m256d {
        unsafe { _mm256_set1_pd(v) }
    }
    #[inline(always)]
    fn iconst(&mut self, v: i64) -> __m256i {
        unsafe { _mm256_set1_epi64x(v) }
    }
    #[inline(always)]
    fn add(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_add_pd(a, b) }
    }
    #[inline(always)]
    fn sub(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_sub_pd(a, b) }
    }
    #[inline(always)]
    fn mul(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_mul_pd(a, b) }
    }
    #[inline(always)]
    fn div(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_div_pd(a, b) }
    }
    #[inline(always)]
    fn fma(&mut self, a: __m256d, b: __m256d, c: __m256d) -> __m256d {
        unsafe { _mm256_fmadd_pd(a, b, c) }
    }
    #[inline(always)]
    fn neg(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_xor_pd(a, _mm256_set1_pd(-0.0)) }
    }
    #[inline(always)]
    fn abs(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_andnot_pd(_mm256_set1_pd(-0.0), a) }
    }
    #[inline(always)]
    fn sqrt(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_sqrt_pd(a) }
    }
    #[inline(always)]
    fn floor(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_round_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn round(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn copysign(&mut self, mag: __m256d, sign: __m256d) -> __m256d {
        unsafe {
            let s = _mm256_set1_pd(-0.0);
            _mm256_or_pd(_mm256_andnot_pd(s, mag), _mm256_and_pd(s, sign))
        }
    }
    #[inline(always)]
    fn lt(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_cmp_pd::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    fn le(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_cmp_pd::<_CMP_LE_OQ>(a, b) }
    }
    #[inline(always)]
    fn eq(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_cmp_pd::<_CMP_EQ_OQ>(a, b) }
    }
    #[inline(always)]
    fn is_nan(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_cmp_pd::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    fn mand(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_and_pd(a, b) }
    }
    #[inline(always)]
    fn mor(&mut self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_or_pd(a, b) }
    }
    #[inline(always)]
    fn mnot(&mut self, a: __m256d) -> __m256d {
        unsafe { _mm256_xor_pd(a, _mm256_castsi256_pd(_mm256_set1_epi32(-1))) }
    }
    #[inline(always)]
    fn select(&mut self, m: __m256d, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_blendv_pd(b, a, m) }
    }
    #[inline(always)]
    fn clamp_below(&mut self, x: __m256d, lo: __m256d) -> __m256d {
        unsafe { _mm256_max_pd(lo, x) }
    }
    #[inline(always)]
    fn clamp_above(&mut self, x: __m256d, hi: __m256d) -> __m256d {
        unsafe { _mm256_min_pd(hi, x) }
    }
    #[inline(always)]
    fn iselect(&mut self, m: __m256d, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_blendv_epi8(b, a, _mm256_castpd_si256(m)) }
    }
    #[inline(always)]
    fn to_bits(&mut self, a: __m256d) -> __m256i {
        unsafe { _mm256_castpd_si256(a) }
    }
    #[inline(always)]
    fn from_bits(&mut self, a: __m256i) -> __m256d {
        unsafe { _mm256_castsi256_pd(a) }
    }
    // AVX2 has no 64-bit float<->int conversions; the expansions do not use them in f64
    // (see `crate::math`), so lane by lane is enough.
    #[inline(always)]
    fn to_int(&mut self, a: __m256d) -> __m256i {
        let v: [f64; 4] = unsafe { std::mem::transmute(a) };
        unsafe { std::mem::transmute(v.map(|x| x as i64)) }
    }
    #[inline(always)]
    fn to_float(&mut self, a: __m256i) -> __m256d {
        let v: [i64; 4] = unsafe { std::mem::transmute(a) };
        unsafe { std::mem::transmute(v.map(|x| x as f64)) }
    }
    #[inline(always)]
    fn iadd(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi64(a, b) }
    }
    #[inline(always)]
    fn isub(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi64(a, b) }
    }
    #[inline(always)]
    fn iand(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    fn ior(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    fn shl(&mut self, a: __m256i, bits: u32) -> __m256i {
        unsafe { _mm256_sll_epi64(a, _mm_cvtsi32_si128(bits as i32)) }
    }
    #[inline(always)]
    fn sshr(&mut self, a: __m256i, bits: u32) -> __m256i {
        // AVX2 has no 64-bit arithmetic shift: shift logically, then sign-extend from the
        // bit the sign landed on (`(v ^ s) - s`, `s` that bit).
        unsafe {
            let v = _mm256_srl_epi64(a, _mm_cvtsi32_si128(bits as i32));
            let s = _mm256_set1_epi64x(((1u64 << 63) >> bits) as i64);
            _mm256_sub_epi64(_mm256_xor_si256(v, s), s)
        }
    }
    #[inline(always)]
    fn ushr(&mut self, a: __m256i, bits: u32) -> __m256i {
        unsafe { _mm256_srl_epi64(a, _mm_cvtsi32_si128(bits as i32)) }
    }
    #[inline(always)]
    fn ieq(&mut self, a: __m256i, b: __m256i) -> __m256d {
        unsafe { _mm256_castsi256_pd(_mm256_cmpeq_epi64(a, b)) }
    }
    #[inline(always)]
    fn ilt(&mut self, a: __m256i, b: __m256i) -> __m256d {
        unsafe { _mm256_castsi256_pd(_mm256_cmpgt_epi64(b, a)) }
    }
    #[inline(always)]
    fn fallback(&mut self, name: &'static str, m: __m256d, x: __m256d, fast: __m256d) -> __m256d {
        unsafe {
            if _mm256_movemask_pd(m) == 0 {
                return fast;
            }
            lanes_fallback::<f64, 4, _>(name, m, x, fast)
        }
    }
}

/// A float the fallback can compute lane by lane.
trait Lane: Copy {
    fn reference(name: &'static str, x: Self) -> Self;
    fn sign_set(self) -> bool;
}
impl Lane for f32 {
    fn reference(name: &'static str, x: f32) -> f32 {
        super::reference(name, x as f64) as f32
    }
    fn sign_set(self) -> bool {
        self.is_sign_negative()
    }
}
impl Lane for f64 {
    fn reference(name: &'static str, x: f64) -> f64 {
        super::reference(name, x)
    }
    fn sign_set(self) -> bool {
        self.is_sign_negative()
    }
}

/// The rare-input path of `fallback`, out of line: the reference function in the lanes whose
/// mask is set. `V` is a 256-bit vector of `N` lanes of `T`.
#[cold]
#[inline(never)]
fn lanes_fallback<T: Lane, const N: usize, V: Copy>(name: &'static str, m: V, x: V, fast: V) -> V {
    // SAFETY: V is a 256-bit vector of N lanes of T (the callers above).
    unsafe {
        let m: [T; N] = std::mem::transmute_copy(&m);
        let x: [T; N] = std::mem::transmute_copy(&x);
        let mut r: [T; N] = std::mem::transmute_copy(&fast);
        for i in 0..N {
            if m[i].sign_set() {
                r[i] = T::reference(name, x[i]);
            }
        }
        std::mem::transmute_copy(&r)
    }
}

/// `$fun::<k, shifted>` for the function `f`, `k` its index in `MathFn::ALL` (the const
/// generic the buffer and summing functions are instantiated with).
macro_rules! by_index {
    ($f:expr, $fun:ident) => {{
        macro_rules! entry {
            ($k:literal) => {
                $fun::<$k>
            };
        }
        by_index!(@match $f)
    }};
    ($f:expr, $fun:ident, $shifted:expr) => {{
        macro_rules! entry {
            ($k:literal) => {
                if $shifted {
                    $fun::<$k, true>
                } else {
                    $fun::<$k, false>
                }
            };
        }
        by_index!(@match $f)
    }};
    (@match $f:expr) => {{
        match $f {
            MathFn::Exp => entry!(0),
            MathFn::Expm1 => entry!(1),
            MathFn::Log => entry!(2),
            MathFn::Log1p => entry!(3),
            MathFn::Sin => entry!(4),
            MathFn::Cos => entry!(5),
            MathFn::Tan => entry!(6),
            MathFn::Tanh => entry!(7),
            MathFn::Sigmoid => entry!(8),
            MathFn::Erf => entry!(9),
        }
    }};
}

/// The public entry points of one width's buffer functions (`$run`, `$sum`, `$biased`), the
/// same for every width (`avx2` and `avx512`): `available()` is the expanding module's.
macro_rules! entry_points {
    ($t:ty, $width:literal, $lacks:literal, $run:ident, $dispatch:ident, $sum:ident,
     $sum_dispatch:ident, $biased:ident, $biased_dispatch:ident, $apply:ident,
     $sum_of:ident) => {
        /// The entry point of the sum of `f` over a buffer (less `shift` when `shifted`), for
        /// generated code. The caller must have checked `available()`.
        pub fn $sum_dispatch(
            f: MathFn,
            shifted: bool,
        ) -> unsafe extern "C" fn(*const $t, usize, $t) -> $t {
            by_index!(f, $sum, shifted)
        }

        /// The entry point of `f` over a buffer, for generated code: `extern "C"`, from
        /// `src` (less `shift` when `shifted`; the unshifted function ignores it) into `dst`
        /// (`n` elements; the same buffer, or ones that do not overlap). The caller must have
        /// checked `available()`.
        pub fn $dispatch(
            f: MathFn,
            shifted: bool,
        ) -> unsafe extern "C" fn(*const $t, *mut $t, usize, $t) {
            by_index!(f, $run, shifted)
        }

        /// The entry point of `f(src[i] + bias[i])` over a buffer, for generated code. The
        /// caller must have checked `available()`.
        pub fn $biased_dispatch(
            f: MathFn,
        ) -> unsafe extern "C" fn(*const $t, *const $t, *mut $t, usize) {
            by_index!(f, $biased)
        }

        #[doc = concat!("`f` over `x` in place with ", $width, " vectors; `None` where the CPU lacks ", $lacks, ".")]
        pub fn $apply(f: MathFn, x: &mut [$t]) -> Option<()> {
            let p = x.as_mut_ptr();
            available().then(|| unsafe { $dispatch(f, false)(p, p, x.len(), 0.0) })
        }

        #[doc = concat!("The sum of `f(x - shift)` over `x` in the reference's pairwise order (the summing function's); `None` where the CPU lacks ", $lacks, ".")]
        pub fn $sum_of(f: MathFn, x: &[$t], shift: $t) -> Option<$t> {
            let shifted = shift.to_bits() != 0;
            available().then(|| unsafe { $sum_dispatch(f, shifted)(x.as_ptr(), x.len(), shift) })
        }
    };
}

macro_rules! buffer_fns {
    ($t:ty, $v:ty, $emit:ident, $eval:ident, $lanes:literal, $load:ident, $store:ident,
     $run:ident, $dispatch:ident, $zero:ident, $add:ident, $sum:ident, $sum_dispatch:ident,
     $sub:ident, $set1:ident, $apply:ident, $sum_of:ident, $biased:ident,
     $biased_dispatch:ident, $over:ident, $leaf:ident, $halves:ident) => {
        /// `f(src[i] - shift)` into `dst` (the same buffer, or ones that do not overlap; the
        /// shift is a softmax's row max, else 0, which changes no value).
        #[target_feature(enable = "avx2,fma")]
        unsafe extern "C" fn $run<const F: u8, const S: bool>(
            src: *const $t,
            dst: *mut $t,
            n: usize,
            shift: $t,
        ) {
            // Without a shift (`S` false) no subtraction: in the loop it would hold a register
            // the expansions need (sin over a buffer was 24% slower with it).
            let sv = $set1(shift);
            let x = |i: usize| {
                let v = $load(src.add(i));
                if S {
                    $sub(v, sv)
                } else {
                    v
                }
            };
            let xs = |i: usize| if S { *src.add(i) - shift } else { *src.add(i) };
            $over(MathFn::ALL[F as usize], n, dst, x, xs);
        }

        /// `f(src[i] + bias[i])` into `dst` (which may be `src`, or overlap neither): an
        /// activation of `x W + b`, with the add done here rather than in a pass of its own.
        #[target_feature(enable = "avx2,fma")]
        unsafe extern "C" fn $biased<const F: u8>(
            src: *const $t,
            bias: *const $t,
            dst: *mut $t,
            n: usize,
        ) {
            let x = |i: usize| $add($load(src.add(i)), $load(bias.add(i)));
            let xs = |i: usize| *src.add(i) + *bias.add(i);
            $over(MathFn::ALL[F as usize], n, dst, x, xs);
        }

        /// `tail(x, head(x))` of `x(i)` into `dst[i]`, a run of 128 elements at a time: the
        /// head over the whole run, then the tail over it, so that the chains of the whole
        /// run are in flight together (one vector's whole tanh, about 75 cycles of latency,
        /// filled the reorder buffer with four). Returns how many it wrote: whole runs only.
        /// Every load of a run comes before its stores.
        #[inline(always)]
        unsafe fn $halves(
            n: usize,
            dst: *mut $t,
            x: &impl Fn(usize) -> $v,
            mut head: impl FnMut($v) -> $v,
            mut tail: impl FnMut($v, $v) -> $v,
        ) -> usize {
            // 128: the chunk staged maps hand over (`jit_cpu::host_math`), so those get the
            // runs too; whole rows measured the same with 128 and 256.
            const RUN: usize = 128;
            let mut xs = [$zero(); RUN / $lanes];
            let mut hs = [$zero(); RUN / $lanes];
            let mut i = 0;
            while i + RUN <= n {
                for j in 0..RUN / $lanes {
                    xs[j] = x(i + j * $lanes);
                    hs[j] = head(xs[j]);
                }
                for j in 0..RUN / $lanes {
                    $store(dst.add(i + j * $lanes), tail(xs[j], hs[j]));
                }
                i += RUN;
            }
            i
        }

        /// `f` of `x(i)` into `dst[i]` for `i < n`: four vectors an iteration (independent
        /// chains hide the math's latency: 8% faster than two for exp), then one, then the
        /// evaluator on `xs(i)` for the lanes left. Every load of an iteration comes before
        /// its stores, so `dst` may be where `x` reads.
        #[inline(always)]
        unsafe fn $over(
            f: MathFn,
            n: usize,
            dst: *mut $t,
            x: impl Fn(usize) -> $v,
            xs: impl Fn(usize) -> $t,
        ) {
            // Functions whose chain is too long for the reorder buffer, in two halves.
            let mut i = match f {
                MathFn::Tanh => $halves(
                    n,
                    dst,
                    &x,
                    |v| super::special::tanh_head(&mut $emit, v),
                    |v, h| super::special::tanh_tail(&mut $emit, v, h),
                ),
                MathFn::Sigmoid => $halves(
                    n,
                    dst,
                    &x,
                    |v| super::special::sigmoid_head(&mut $emit, v),
                    |v, h| super::special::sigmoid_tail(&mut $emit, v, h),
                ),
                _ => 0,
            };
            while i + 4 * $lanes <= n {
                let a = unary(&mut $emit, f, x(i));
                let b = unary(&mut $emit, f, x(i + $lanes));
                let c = unary(&mut $emit, f, x(i + 2 * $lanes));
                let d = unary(&mut $emit, f, x(i + 3 * $lanes));
                $store(dst.add(i), a);
                $store(dst.add(i + $lanes), b);
                $store(dst.add(i + 2 * $lanes), c);
                $store(dst.add(i + 3 * $lanes), d);
                i += 4 * $lanes;
            }
            while i + $lanes <= n {
                $store(dst.add(i), unary(&mut $emit, f, x(i)));
                i += $lanes;
            }
            while i < n {
                *dst.add(i) = unary(&mut $eval, f, xs(i));
                i += 1;
            }
        }

        /// The sum of `f(src[i] - shift)` in the reference's pairwise order
        /// (`perform::reduce::pairwise_sum`): runs longer than `PAIRWISE_BLOCK` split in two at
        /// a multiple of 8; a run of at most that many is a leaf (see
        /// `codegen::clif::reduce`): element `i` into partial sum `i % 8` (lane `i % 8` of
        /// the accumulators), the partials combined as `((p0 + p1) + (p2 + p3)) + ((p4 + p5) +
        /// (p6 + p7))`, then the last `n % 8` elements added one at a time.
        #[target_feature(enable = "avx2,fma")]
        unsafe extern "C" fn $sum<const F: u8, const S: bool>(
            src: *const $t,
            n: usize,
            shift: $t,
        ) -> $t {
            if n > PAIRWISE_BLOCK {
                // Longer runs split as the reference's pairwise sum splits them (at a
                // multiple of 8), each half summed the same way: a whole row in one call.
                let mid = pairwise_mid(n);
                return $sum::<F, S>(src, mid, shift) + $sum::<F, S>(src.add(mid), n - mid, shift);
            }
            $leaf::<F, S>(src, n, shift)
        }

        /// One leaf of `$sum` (at most `PAIRWISE_BLOCK` elements). Out of line in debug
        /// builds, where its frame (every expansion's values on the stack) would otherwise be
        /// in each level of the recursion.
        #[target_feature(enable = "avx2,fma")]
        #[cfg_attr(debug_assertions, inline(never))]
        #[allow(clippy::modulo_one)] // f32: one accumulator of 8 lanes; f64: two of 4.
        unsafe fn $leaf<const F: u8, const S: bool>(src: *const $t, n: usize, shift: $t) -> $t {
            const ACCS: usize = 8 / $lanes;
            let f = MathFn::ALL[F as usize];
            let sv = $set1(shift);
            let x = |i: usize| {
                let v = $load(src.add(i));
                if S {
                    $sub(v, sv)
                } else {
                    v
                }
            };
            let n8 = n & !7;
            let mut acc = [$zero(); ACCS];
            let mut i = 0;
            while i + 4 * $lanes <= n8 {
                if S {
                    // The iteration reads 128 bytes: two cache lines to fetch.
                    let q = src.add(i + PREFETCH_AHEAD).cast::<i8>();
                    _mm_prefetch::<_MM_HINT_T0>(q);
                    _mm_prefetch::<_MM_HINT_T0>(q.add(64));
                }
                let a = unary(&mut $emit, f, x(i));
                let b = unary(&mut $emit, f, x(i + $lanes));
                let c = unary(&mut $emit, f, x(i + 2 * $lanes));
                let d = unary(&mut $emit, f, x(i + 3 * $lanes));
                // Vector `v` of the iteration holds partials `(v % ACCS) * lanes ..`.
                for (v, x) in [a, b, c, d].into_iter().enumerate() {
                    acc[v % ACCS] = $add(acc[v % ACCS], x);
                }
                i += 4 * $lanes;
            }
            while i < n8 {
                let k = (i / $lanes) % ACCS;
                acc[k] = $add(acc[k], unary(&mut $emit, f, x(i)));
                i += $lanes;
            }
            let mut p = [0.0 as $t; 8];
            for (k, a) in acc.into_iter().enumerate() {
                $store(p.as_mut_ptr().add(k * $lanes), a);
            }
            let mut s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            while i < n {
                let v = if S { *src.add(i) - shift } else { *src.add(i) };
                s += unary(&mut $eval, f, v);
                i += 1;
            }
            s
        }

        entry_points!(
            $t,
            "256-bit",
            "AVX2 or FMA",
            $run,
            $dispatch,
            $sum,
            $sum_dispatch,
            $biased,
            $biased_dispatch,
            $apply,
            $sum_of
        );
    };
}

buffer_fns!(
    f32,
    __m256,
    Avx32,
    Eval32,
    8,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    run32,
    buffer_fn_f32,
    _mm256_setzero_ps,
    _mm256_add_ps,
    sum32,
    sum_fn_f32,
    _mm256_sub_ps,
    _mm256_set1_ps,
    apply_f32,
    sum_f32,
    biased32,
    biased_fn_f32,
    over32,
    leaf32,
    halves32
);
buffer_fns!(
    f64,
    __m256d,
    Avx64,
    Eval64,
    4,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    run64,
    buffer_fn_f64,
    _mm256_setzero_pd,
    _mm256_add_pd,
    sum64,
    sum_fn_f64,
    _mm256_sub_pd,
    _mm256_set1_pd,
    apply_f64,
    sum_f64,
    biased64,
    biased_fn_f64,
    over64,
    leaf64,
    halves64
);
