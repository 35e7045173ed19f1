//! The expansions compiled by rustc for 512-bit vectors (AVX-512F), over whole buffers: the
//! same functions as [`crate::avx2`], with the same signatures and the same bits, 16 f32 or 8
//! f64 lanes at a time.
//!
//! Every expansion is lane-wise IEEE arithmetic, so the lane count changes no value: a lane of
//! a 512-bit vector computes what a lane of a 256-bit one and the scalar evaluator compute.
//! What the width could change, the order of a sum, it does not: the summing functions keep
//! the reference's eight interleaved partials (element `i` into partial `i % 8`), in f32 as
//! one 256-bit accumulator that each 16-lane result enters as its low half, then its high half
//! (the order in which the 256-bit function adds the same 16 elements), in f64 as one 512-bit
//! accumulator of exactly those eight partials. The tail that does not fill a vector runs as
//! one masked vector (the 256-bit functions run the evaluator there; same bits).
//!
//! Only AVX-512F is used (no DQ or BW instruction), with AVX2 and FMA present as on every
//! AVX-512 CPU. Which width the CPU backend calls is the ISA its products use
//! (`KILN_CPU_ISA`, else the widest the host runs): see kiln's `codegen::clif::host_math`.
//! Every emitter method and expansion is `#[inline(always)]`, as in `avx2`, so that the whole
//! expansion is compiled inside the `#[target_feature]` loops.

use super::{unary_inline as unary, Emit, Eval32, Eval64, MathFn, Prec};
use crate::PAIRWISE;

use std::arch::x86_64::*;

/// A float sum's leaf length and split point ([`PAIRWISE`], the reference's order).
const PAIRWISE_BLOCK: usize = PAIRWISE.block;
fn pairwise_mid(n: usize) -> usize {
    PAIRWISE.mid(n)
}

/// As [`crate::avx2::PREFETCH_AHEAD`]: how far ahead a shifted sum prefetches, in elements.
const PREFETCH_AHEAD: usize = crate::avx2::PREFETCH_AHEAD;

/// Whether this CPU runs the functions of this module (AVX-512F, with AVX2 and FMA).
pub fn available() -> bool {
    crate::avx2::available() && std::is_x86_feature_detected!("avx512f")
}

/// f32 lanes, sixteen to a vector.
pub struct Avx512x32;
/// f64 lanes, eight to a vector.
pub struct Avx512x64;

// SAFETY (for every `unsafe` block below): the intrinsics need AVX-512F (and AVX2 + FMA for the
// 256-bit accumulator of the f32 sums), and these emitters are only used inside the
// `target_feature` functions at the end of this file, which are only called after
// `available()` said yes.

/// The methods that read the same in both precisions: `$ps` names the float intrinsics'
/// suffix, `$epi` the integer lanes'.
macro_rules! common_methods {
    ($f:ty, $m:ty, $set1:ident, $add:ident, $sub:ident, $mul:ident, $div:ident,
     $fmadd:ident, $sqrt:ident, $abs:ident, $roundscale:ident, $cmp:ident, $blend:ident,
     $max:ident, $min:ident, $iblend:ident, $castf_i:ident, $casti_f:ident,
     $iadd:ident, $isub:ident, $sll:ident, $sra:ident, $srl:ident,
     $cmpeq:ident, $cmplt:ident, $sign:expr) => {
        #[inline(always)]
        fn add(&mut self, a: $f, b: $f) -> $f {
            unsafe { $add(a, b) }
        }
        #[inline(always)]
        fn sub(&mut self, a: $f, b: $f) -> $f {
            unsafe { $sub(a, b) }
        }
        #[inline(always)]
        fn mul(&mut self, a: $f, b: $f) -> $f {
            unsafe { $mul(a, b) }
        }
        #[inline(always)]
        fn div(&mut self, a: $f, b: $f) -> $f {
            unsafe { $div(a, b) }
        }
        #[inline(always)]
        fn fma(&mut self, a: $f, b: $f, c: $f) -> $f {
            unsafe { $fmadd(a, b, c) }
        }
        // The sign bit flipped or moved with integer logic: the float forms are AVX-512DQ.
        #[inline(always)]
        fn neg(&mut self, a: $f) -> $f {
            unsafe { $casti_f(_mm512_xor_si512($castf_i(a), $sign)) }
        }
        #[inline(always)]
        fn abs(&mut self, a: $f) -> $f {
            unsafe { $abs(a) }
        }
        #[inline(always)]
        fn sqrt(&mut self, a: $f) -> $f {
            unsafe { $sqrt(a) }
        }
        #[inline(always)]
        fn floor(&mut self, a: $f) -> $f {
            unsafe { $roundscale::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn round(&mut self, a: $f) -> $f {
            unsafe { $roundscale::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn copysign(&mut self, mag: $f, sign: $f) -> $f {
            unsafe {
                let s = $sign;
                let m = _mm512_andnot_si512(s, $castf_i(mag));
                $casti_f(_mm512_or_si512(m, _mm512_and_si512(s, $castf_i(sign))))
            }
        }
        #[inline(always)]
        fn lt(&mut self, a: $f, b: $f) -> $m {
            unsafe { $cmp::<_CMP_LT_OQ>(a, b) }
        }
        #[inline(always)]
        fn le(&mut self, a: $f, b: $f) -> $m {
            unsafe { $cmp::<_CMP_LE_OQ>(a, b) }
        }
        #[inline(always)]
        fn eq(&mut self, a: $f, b: $f) -> $m {
            unsafe { $cmp::<_CMP_EQ_OQ>(a, b) }
        }
        #[inline(always)]
        fn is_nan(&mut self, a: $f) -> $m {
            unsafe { $cmp::<_CMP_UNORD_Q>(a, a) }
        }
        #[inline(always)]
        fn mand(&mut self, a: $m, b: $m) -> $m {
            a & b
        }
        #[inline(always)]
        fn mor(&mut self, a: $m, b: $m) -> $m {
            a | b
        }
        #[inline(always)]
        fn mnot(&mut self, a: $m) -> $m {
            !a
        }
        // A blend takes its second operand where the mask is set.
        #[inline(always)]
        fn select(&mut self, m: $m, a: $f, b: $f) -> $f {
            unsafe { $blend(m, b, a) }
        }
        // `vmaxps lo, x` is `lo > x ? lo : x` (x where either is NaN), as in `avx2`.
        #[inline(always)]
        fn clamp_below(&mut self, x: $f, lo: $f) -> $f {
            unsafe { $max(lo, x) }
        }
        #[inline(always)]
        fn clamp_above(&mut self, x: $f, hi: $f) -> $f {
            unsafe { $min(hi, x) }
        }
        #[inline(always)]
        fn iselect(&mut self, m: $m, a: __m512i, b: __m512i) -> __m512i {
            unsafe { $iblend(m, b, a) }
        }
        #[inline(always)]
        fn to_bits(&mut self, a: $f) -> __m512i {
            unsafe { $castf_i(a) }
        }
        #[inline(always)]
        fn from_bits(&mut self, a: __m512i) -> $f {
            unsafe { $casti_f(a) }
        }
        #[inline(always)]
        fn iadd(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { $iadd(a, b) }
        }
        #[inline(always)]
        fn isub(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { $isub(a, b) }
        }
        #[inline(always)]
        fn iand(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_and_si512(a, b) }
        }
        #[inline(always)]
        fn ior(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_or_si512(a, b) }
        }
        #[inline(always)]
        fn shl(&mut self, a: __m512i, bits: u32) -> __m512i {
            unsafe { $sll(a, _mm_cvtsi32_si128(bits as i32)) }
        }
        #[inline(always)]
        fn sshr(&mut self, a: __m512i, bits: u32) -> __m512i {
            unsafe { $sra(a, _mm_cvtsi32_si128(bits as i32)) }
        }
        #[inline(always)]
        fn ushr(&mut self, a: __m512i, bits: u32) -> __m512i {
            unsafe { $srl(a, _mm_cvtsi32_si128(bits as i32)) }
        }
        #[inline(always)]
        fn ieq(&mut self, a: __m512i, b: __m512i) -> $m {
            unsafe { $cmpeq(a, b) }
        }
        #[inline(always)]
        fn ilt(&mut self, a: __m512i, b: __m512i) -> $m {
            unsafe { $cmplt(a, b) }
        }
    };
}

#[allow(clippy::wrong_self_convention)]
impl Emit for Avx512x32 {
    type F = __m512;
    type I = __m512i;
    type M = __mmask16;

    #[inline(always)]
    fn prec(&self) -> Prec {
        Prec::F32
    }
    #[inline(always)]
    fn fconst(&mut self, v: f64) -> __m512 {
        unsafe { _mm512_set1_ps(v as f32) }
    }
    #[inline(always)]
    fn iconst(&mut self, v: i64) -> __m512i {
        unsafe { _mm512_set1_epi32(v as i32) }
    }
    common_methods!(
        __m512,
        __mmask16,
        _mm512_set1_ps,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_div_ps,
        _mm512_fmadd_ps,
        _mm512_sqrt_ps,
        _mm512_abs_ps,
        _mm512_roundscale_ps,
        _mm512_cmp_ps_mask,
        _mm512_mask_blend_ps,
        _mm512_max_ps,
        _mm512_min_ps,
        _mm512_mask_blend_epi32,
        _mm512_castps_si512,
        _mm512_castsi512_ps,
        _mm512_add_epi32,
        _mm512_sub_epi32,
        _mm512_sll_epi32,
        _mm512_sra_epi32,
        _mm512_srl_epi32,
        _mm512_cmpeq_epi32_mask,
        _mm512_cmplt_epi32_mask,
        _mm512_set1_epi32(i32::MIN)
    );
    #[inline(always)]
    fn to_int(&mut self, a: __m512) -> __m512i {
        unsafe { _mm512_cvttps_epi32(a) }
    }
    #[inline(always)]
    fn to_float(&mut self, a: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn fallback(&mut self, name: &'static str, m: __mmask16, x: __m512, fast: __m512) -> __m512 {
        if m == 0 {
            return fast;
        }
        // SAFETY: __m512 is sixteen f32 lanes.
        let (x, fast) = unsafe {
            (
                std::mem::transmute::<__m512, [f32; 16]>(x),
                std::mem::transmute::<__m512, [f32; 16]>(fast),
            )
        };
        let r = lanes_fallback(name, m as u32, x, fast);
        unsafe { std::mem::transmute::<[f32; 16], __m512>(r) }
    }
}

#[allow(clippy::wrong_self_convention)]
impl Emit for Avx512x64 {
    type F = __m512d;
    type I = __m512i;
    type M = __mmask8;

    #[inline(always)]
    fn prec(&self) -> Prec {
        Prec::F64
    }
    #[inline(always)]
    fn fconst(&mut self, v: f64) -> __m512d {
        unsafe { _mm512_set1_pd(v) }
    }
    #[inline(always)]
    fn iconst(&mut self, v: i64) -> __m512i {
        unsafe { _mm512_set1_epi64(v) }
    }
    common_methods!(
        __m512d,
        __mmask8,
        _mm512_set1_pd,
        _mm512_add_pd,
        _mm512_sub_pd,
        _mm512_mul_pd,
        _mm512_div_pd,
        _mm512_fmadd_pd,
        _mm512_sqrt_pd,
        _mm512_abs_pd,
        _mm512_roundscale_pd,
        _mm512_cmp_pd_mask,
        _mm512_mask_blend_pd,
        _mm512_max_pd,
        _mm512_min_pd,
        _mm512_mask_blend_epi64,
        _mm512_castpd_si512,
        _mm512_castsi512_pd,
        _mm512_add_epi64,
        _mm512_sub_epi64,
        _mm512_sll_epi64,
        _mm512_sra_epi64,
        _mm512_srl_epi64,
        _mm512_cmpeq_epi64_mask,
        _mm512_cmplt_epi64_mask,
        _mm512_set1_epi64(i64::MIN)
    );
    // As in `avx2`: the f64 expansions do not convert between floats and 64-bit integers (see
    // the crate's docs), and the 512-bit conversions (AVX-512DQ) differ from Rust's `as` on
    // NaN and out-of-range values, so lane by lane keeps the evaluator's bits.
    #[inline(always)]
    fn to_int(&mut self, a: __m512d) -> __m512i {
        let v: [f64; 8] = unsafe { std::mem::transmute(a) };
        unsafe { std::mem::transmute(v.map(|x| x as i64)) }
    }
    #[inline(always)]
    fn to_float(&mut self, a: __m512i) -> __m512d {
        let v: [i64; 8] = unsafe { std::mem::transmute(a) };
        unsafe { std::mem::transmute(v.map(|x| x as f64)) }
    }
    #[inline(always)]
    fn fallback(&mut self, name: &'static str, m: __mmask8, x: __m512d, fast: __m512d) -> __m512d {
        if m == 0 {
            return fast;
        }
        // SAFETY: __m512d is eight f64 lanes.
        let (x, fast) = unsafe {
            (
                std::mem::transmute::<__m512d, [f64; 8]>(x),
                std::mem::transmute::<__m512d, [f64; 8]>(fast),
            )
        };
        let r = lanes_fallback(name, m as u32, x, fast);
        unsafe { std::mem::transmute::<[f64; 8], __m512d>(r) }
    }
}

/// A float the fallback computes lane by lane.
trait Lane: Copy {
    fn reference(name: &'static str, x: Self) -> Self;
}
impl Lane for f32 {
    fn reference(name: &'static str, x: f32) -> f32 {
        super::reference(name, x as f64) as f32
    }
}
impl Lane for f64 {
    fn reference(name: &'static str, x: f64) -> f64 {
        super::reference(name, x)
    }
}

/// The rare-input path of `fallback`, out of line: the reference function in the lanes whose
/// bit of `m` is set.
#[cold]
#[inline(never)]
fn lanes_fallback<T: Lane, const N: usize>(
    name: &'static str,
    m: u32,
    x: [T; N],
    fast: [T; N],
) -> [T; N] {
    let mut r = fast;
    for i in 0..N {
        if m >> i & 1 == 1 {
            r[i] = T::reference(name, x[i]);
        }
    }
    r
}

/// The f32 sums' accumulator: the reference's eight partials in one 256-bit vector.
#[inline(always)]
unsafe fn acc32_zero() -> __m256 {
    _mm256_setzero_ps()
}
/// Sixteen results into the partials: elements 0-7 (the low half), then 8-15, as the 256-bit
/// function adds two vectors of eight.
#[inline(always)]
unsafe fn acc32_full(acc: __m256, v: __m512) -> __m256 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    _mm256_add_ps(_mm256_add_ps(acc, lo), hi)
}
/// Eight results (the low half of `v`) into the partials.
#[inline(always)]
unsafe fn acc32_half(acc: __m256, v: __m512) -> __m256 {
    _mm256_add_ps(acc, _mm512_castps512_ps256(v))
}
#[inline(always)]
unsafe fn acc32_store(acc: __m256) -> [f32; 8] {
    let mut p = [0.0f32; 8];
    _mm256_storeu_ps(p.as_mut_ptr(), acc);
    p
}
/// The f64 sums' accumulator: the eight partials are the eight lanes.
#[inline(always)]
unsafe fn acc64_zero() -> __m512d {
    _mm512_setzero_pd()
}
#[inline(always)]
unsafe fn acc64_full(acc: __m512d, v: __m512d) -> __m512d {
    _mm512_add_pd(acc, v)
}
/// Never called: a vector of eight f64 is a whole group of partials.
#[inline(always)]
unsafe fn acc64_half(acc: __m512d, v: __m512d) -> __m512d {
    _mm512_add_pd(acc, v)
}
#[inline(always)]
unsafe fn acc64_store(acc: __m512d) -> [f64; 8] {
    let mut p = [0.0f64; 8];
    _mm512_storeu_pd(p.as_mut_ptr(), acc);
    p
}

/// The mask of the first `k` lanes (`k` below the lane count).
#[inline(always)]
fn first16(k: usize) -> __mmask16 {
    ((1u32 << k) - 1) as __mmask16
}
#[inline(always)]
fn first8(k: usize) -> __mmask8 {
    ((1u32 << k) - 1) as __mmask8
}

macro_rules! buffer_fns_512 {
    ($t:ty, $v:ty, $mask:ty, $all:expr, $first:ident, $emit:ident, $eval:ident, $lanes:literal,
     $loadz:ident, $store:ident, $store_mask:ident, $add:ident, $sub:ident, $set1:ident,
     $acc_zero:ident, $acc_full:ident, $acc_half:ident, $acc_store:ident,
     $run:ident, $dispatch:ident, $sum:ident, $sum_dispatch:ident, $apply:ident,
     $sum_of:ident, $biased:ident, $biased_dispatch:ident, $over:ident, $leaf:ident,
     $halves:ident) => {
        /// `f(src[i] - shift)` into `dst` (the same buffer, or ones that do not overlap; the
        /// shift is a softmax's row max, else 0, which changes no value).
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe extern "C" fn $run<const F: u8, const S: bool>(
            src: *const $t,
            dst: *mut $t,
            n: usize,
            shift: $t,
        ) {
            let sv = $set1(shift);
            let x = |i: usize, m: $mask| {
                let v = $loadz(m, src.add(i).cast());
                if S {
                    $sub(v, sv)
                } else {
                    v
                }
            };
            $over(MathFn::ALL[F as usize], n, dst, x);
        }

        /// `f(src[i] + bias[i])` into `dst` (which may be `src`, or overlap neither).
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe extern "C" fn $biased<const F: u8>(
            src: *const $t,
            bias: *const $t,
            dst: *mut $t,
            n: usize,
        ) {
            let x = |i: usize, m: $mask| {
                $add($loadz(m, src.add(i).cast()), $loadz(m, bias.add(i).cast()))
            };
            $over(MathFn::ALL[F as usize], n, dst, x);
        }

        /// As `avx2`'s: `tail(x, head(x))` into `dst`, a run of 128 elements at a time (the
        /// head over the whole run, then the tail), so that a long chain's vectors are in
        /// flight together. Returns how many it wrote: whole runs only.
        #[inline(always)]
        unsafe fn $halves(
            n: usize,
            dst: *mut $t,
            x: &impl Fn(usize, $mask) -> $v,
            mut head: impl FnMut($v) -> $v,
            mut tail: impl FnMut($v, $v) -> $v,
        ) -> usize {
            const RUN: usize = 128;
            let mut xs = [$set1(0.0); RUN / $lanes];
            let mut hs = [$set1(0.0); RUN / $lanes];
            let mut i = 0;
            while i + RUN <= n {
                for j in 0..RUN / $lanes {
                    xs[j] = x(i + j * $lanes, $all);
                    hs[j] = head(xs[j]);
                }
                for j in 0..RUN / $lanes {
                    $store(dst.add(i + j * $lanes).cast(), tail(xs[j], hs[j]));
                }
                i += RUN;
            }
            i
        }

        /// `f` of `x(i)` into `dst[i]` for `i < n`: four vectors an iteration, then one, then
        /// one masked vector for the lanes left. Every load of an iteration comes before its
        /// stores, so `dst` may be where `x` reads.
        #[inline(always)]
        unsafe fn $over(f: MathFn, n: usize, dst: *mut $t, x: impl Fn(usize, $mask) -> $v) {
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
                let a = unary(&mut $emit, f, x(i, $all));
                let b = unary(&mut $emit, f, x(i + $lanes, $all));
                let c = unary(&mut $emit, f, x(i + 2 * $lanes, $all));
                let d = unary(&mut $emit, f, x(i + 3 * $lanes, $all));
                $store(dst.add(i).cast(), a);
                $store(dst.add(i + $lanes).cast(), b);
                $store(dst.add(i + 2 * $lanes).cast(), c);
                $store(dst.add(i + 3 * $lanes).cast(), d);
                i += 4 * $lanes;
            }
            while i + $lanes <= n {
                $store(dst.add(i).cast(), unary(&mut $emit, f, x(i, $all)));
                i += $lanes;
            }
            if i < n {
                let m = $first(n - i);
                $store_mask(dst.add(i).cast(), m, unary(&mut $emit, f, x(i, m)));
            }
        }

        /// The sum of `f(src[i] - shift)` in the reference's pairwise order, as `avx2`'s:
        /// runs longer than `PAIRWISE_BLOCK` split in two at a multiple of 8, each a leaf.
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe extern "C" fn $sum<const F: u8, const S: bool>(
            src: *const $t,
            n: usize,
            shift: $t,
        ) -> $t {
            if n > PAIRWISE_BLOCK {
                let mid = pairwise_mid(n);
                return $sum::<F, S>(src, mid, shift) + $sum::<F, S>(src.add(mid), n - mid, shift);
            }
            $leaf::<F, S>(src, n, shift)
        }

        /// One leaf of `$sum` (at most `PAIRWISE_BLOCK` elements): element `i` into partial
        /// `i % 8` in order, the partials combined as `((p0 + p1) + (p2 + p3)) + ((p4 + p5) +
        /// (p6 + p7))`, then the last `n % 8` elements one at a time.
        #[target_feature(enable = "avx512f,avx2,fma")]
        #[cfg_attr(debug_assertions, inline(never))]
        unsafe fn $leaf<const F: u8, const S: bool>(src: *const $t, n: usize, shift: $t) -> $t {
            let f = MathFn::ALL[F as usize];
            let sv = $set1(shift);
            let x = |i: usize, m: $mask| {
                let v = $loadz(m, src.add(i).cast());
                if S {
                    $sub(v, sv)
                } else {
                    v
                }
            };
            let n8 = n & !7;
            let mut acc = $acc_zero();
            let mut i = 0;
            while i + 4 * $lanes <= n8 {
                if S {
                    // The iteration reads 256 bytes: four cache lines to fetch.
                    let q = src.add(i + PREFETCH_AHEAD).cast::<i8>();
                    for line in 0..4 {
                        _mm_prefetch::<_MM_HINT_T0>(q.add(64 * line));
                    }
                }
                let a = unary(&mut $emit, f, x(i, $all));
                let b = unary(&mut $emit, f, x(i + $lanes, $all));
                let c = unary(&mut $emit, f, x(i + 2 * $lanes, $all));
                let d = unary(&mut $emit, f, x(i + 3 * $lanes, $all));
                acc = $acc_full($acc_full($acc_full($acc_full(acc, a), b), c), d);
                i += 4 * $lanes;
            }
            while i + $lanes <= n8 {
                acc = $acc_full(acc, unary(&mut $emit, f, x(i, $all)));
                i += $lanes;
            }
            if i < n8 {
                // Eight left in a group of partials (f32 only: an f64 vector is a group).
                acc = $acc_half(acc, unary(&mut $emit, f, x(i, $first(8))));
                i += 8;
            }
            let p = $acc_store(acc);
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
            "512-bit",
            "AVX-512F",
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

buffer_fns_512!(
    f32,
    __m512,
    __mmask16,
    0xFFFF,
    first16,
    Avx512x32,
    Eval32,
    16,
    _mm512_maskz_loadu_ps,
    _mm512_storeu_ps,
    _mm512_mask_storeu_ps,
    _mm512_add_ps,
    _mm512_sub_ps,
    _mm512_set1_ps,
    acc32_zero,
    acc32_full,
    acc32_half,
    acc32_store,
    run32,
    buffer_fn_f32,
    sum32,
    sum_fn_f32,
    apply_f32,
    sum_f32,
    biased32,
    biased_fn_f32,
    over32,
    leaf32,
    halves32
);
buffer_fns_512!(
    f64,
    __m512d,
    __mmask8,
    0xFF,
    first8,
    Avx512x64,
    Eval64,
    8,
    _mm512_maskz_loadu_pd,
    _mm512_storeu_pd,
    _mm512_mask_storeu_pd,
    _mm512_add_pd,
    _mm512_sub_pd,
    _mm512_set1_pd,
    acc64_zero,
    acc64_full,
    acc64_half,
    acc64_store,
    run64,
    buffer_fn_f64,
    sum64,
    sum_fn_f64,
    apply_f64,
    sum_f64,
    biased64,
    biased_fn_f64,
    over64,
    leaf64,
    halves64
);
