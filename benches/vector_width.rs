//! How much do Cranelift and its 128-bit vectors hold W3 (logsumexp over the rows of a
//! 4096x4096 f32 matrix) back? This runs, on one thread and the same matrix:
//!
//! - `kiln_cpu`: kiln's CPU backend (Cranelift's 128-bit loops; where the host has AVX2 and
//!   FMA, the exp-sum is staged math, `kiln::jit_cpu::host_math`, which runs exp and the sum at
//!   256 bits; `KILN_CPU_HOST_MATH=0` measures the inline 128-bit code instead);
//! - `llvm_128` and `llvm_256`: the same algorithm compiled by rustc (LLVM) with SSE4.1 + FMA
//!   and with AVX2 + FMA. The row max, then `sum(exp(x - max))` with kiln's exp expansion
//!   (the same operation sequence, checked bit for bit against kiln's evaluator), then
//!   `log(sum) + max`.
//!
//! `llvm_128 / kiln_cpu` is what Cranelift's code generation costs at the same width;
//! `llvm_256 / llvm_128` what the width costs. x86_64 with AVX2 and FMA only; elsewhere it
//! says so and measures nothing. Results are checked against each other before timing.

use criterion::{criterion_group, criterion_main, Criterion};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    const LN2_HI: f64 = 0.6931471824645996;
    const LN2_LO: f64 = -1.9046542121259336e-09;
    // kiln's constants for f32 exp, as f64 values rounded to f32 where they are used.
    /// `Q` of `e^r = 1 + (r + r^2 Q(r))`, lowest degree first (kiln's `EXP_F32`).
    const Q: [f64; 5] = [
        0.4999999403953552,
        0.1666652113199234,
        0.04166838899254799,
        0.00836874544620514,
        0.0013814540579915047,
    ];
    const SHIFTER: f64 = 12582912.0;

    /// kiln's f32 exp expansion (`src/math/exp_log.rs`: clamp, shifter rounding, two-part
    /// ln2, `1 + (r + r^2 Q(r))`, `2^h 2^(n-h)`), step for step, and the rows' logsumexp
    /// around it, for one vector width. It is written out with `std::arch` rather than run
    /// through `kiln::math::unary` because that generic function is too large for LLVM to
    /// inline into `target_feature` code, and a call per vector would measure the call.
    /// `check_exp` holds it to kiln's evaluator bit for bit.
    macro_rules! width {
        ($exp:ident, $lse:ident, $feat:literal, $v:ty, $lanes:literal, $set1:ident,
         $seti:ident, $load:ident, $store:ident, $add:ident, $sub:ident, $mul:ident,
         $fmadd:ident, $max:ident, $min:ident, $cps:ident, $cpi:ident, $iadd:ident,
         $isub:ident, $iand:ident, $slli:ident) => {
            #[target_feature(enable = $feat)]
            #[inline]
            pub unsafe fn $exp(x: $v) -> $v {
                // `x < lo ? lo : x` and `hi < t ? hi : t`, as maxps / minps give them.
                let t = $max($set1(-120.0), x);
                let t = $min($set1(100.0), t);
                let s = $set1(SHIFTER as f32);
                let sh = $fmadd(t, $set1(std::f32::consts::LOG2_E), s);
                let n = $sub(sh, s);
                let r = $fmadd(n, $set1(-LN2_HI as f32), t);
                let r = $fmadd(n, $set1(-LN2_LO as f32), r);
                let r2 = $mul(r, r);
                let mut p = $set1(Q[4] as f32);
                for &q in Q[..4].iter().rev() {
                    p = $fmadd(p, r, $set1(q as f32));
                }
                let em1 = $fmadd(r2, p, r);
                let p1 = $add($set1(1.0), em1);
                let one = $seti(1.0f32.to_bits() as i32);
                let tb = $cps(sh);
                let nb = $slli::<23>(tb);
                let hb = $iand($slli::<22>(tb), $seti(-(1 << 23)));
                let s1 = $cpi($iadd(hb, one));
                let s2 = $cpi($iadd($isub(nb, hb), one));
                $mul($mul(p1, s1), s2)
            }

            /// The rows' logsumexp, four vectors an iteration into four accumulators (as
            /// kiln's row leaves); rows must be a multiple of four vectors long.
            #[target_feature(enable = $feat)]
            pub unsafe fn $lse(x: &[f32], cols: usize, out: &mut [f32]) {
                const STEP: usize = 4 * $lanes;
                assert_eq!(cols % STEP, 0);
                for (row, o) in x.chunks_exact(cols).zip(out.iter_mut()) {
                    let p = row.as_ptr();
                    let mut m = [$set1(f32::NEG_INFINITY); 4];
                    for i in (0..cols).step_by(STEP) {
                        for (k, m) in m.iter_mut().enumerate() {
                            *m = $max(*m, $load(p.add(i + k * $lanes)));
                        }
                    }
                    let mut lanes = [0f32; $lanes];
                    $store(lanes.as_mut_ptr(), $max($max(m[0], m[1]), $max(m[2], m[3])));
                    let mx = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mb = $set1(mx);
                    let mut acc = [$set1(0.0); 4];
                    for i in (0..cols).step_by(STEP) {
                        for (k, a) in acc.iter_mut().enumerate() {
                            let v = $sub($load(p.add(i + k * $lanes)), mb);
                            *a = $add(*a, $exp(v));
                        }
                    }
                    let s = $add($add(acc[0], acc[1]), $add(acc[2], acc[3]));
                    $store(lanes.as_mut_ptr(), s);
                    *o = lanes.iter().sum::<f32>().ln() + mx;
                }
            }
        };
    }

    // 128-bit vectors, VEX-encoded with FMA: what Cranelift generates on this host.
    width!(
        exp_128,
        lse_rows_128,
        "avx,fma",
        __m128,
        4,
        _mm_set1_ps,
        _mm_set1_epi32,
        _mm_loadu_ps,
        _mm_storeu_ps,
        _mm_add_ps,
        _mm_sub_ps,
        _mm_mul_ps,
        _mm_fmadd_ps,
        _mm_max_ps,
        _mm_min_ps,
        _mm_castps_si128,
        _mm_castsi128_ps,
        _mm_add_epi32,
        _mm_sub_epi32,
        _mm_and_si128,
        _mm_slli_epi32
    );
    // 256-bit vectors with AVX2 and FMA.
    width!(
        exp_256,
        lse_rows_256,
        "avx2,fma",
        __m256,
        8,
        _mm256_set1_ps,
        _mm256_set1_epi32,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_fmadd_ps,
        _mm256_max_ps,
        _mm256_min_ps,
        _mm256_castps_si256,
        _mm256_castsi256_ps,
        _mm256_add_epi32,
        _mm256_sub_epi32,
        _mm256_and_si256,
        _mm256_slli_epi32
    );

    /// Both widths' exp against kiln's scalar evaluator of its expansion, bit for bit, on a
    /// sweep that crosses the subnormal range and both clamps, and on the specials.
    pub fn check_exp() {
        use kiln::math::{Eval32, MathFn};
        let mut xs: Vec<f32> = (-1300..=1100).map(|i| i as f32 * 0.0977).collect();
        xs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            88.7,
            -103.9,
        ]);
        for x in xs {
            let want = kiln::math::unary(&mut Eval32, MathFn::Exp, x);
            let (mut a, mut b) = ([0f32; 4], [0f32; 8]);
            unsafe {
                _mm_storeu_ps(a.as_mut_ptr(), exp_128(_mm_set1_ps(x)));
                _mm256_storeu_ps(b.as_mut_ptr(), exp_256(_mm256_set1_ps(x)));
            }
            for got in [a[0], b[0]] {
                let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
                assert!(same, "exp({x}): bench {got:e}, kiln {want:e}");
            }
        }
    }

    pub fn supported() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
}

#[cfg(target_arch = "x86_64")]
fn w3_width(c: &mut Criterion) {
    use kiln::{function, Backend, Graph, Var};
    use ndarray::{ArrayD, IxDyn};

    if !x86::supported() {
        eprintln!("vector_width: this CPU has no AVX2 + FMA; nothing measured");
        return;
    }
    x86::check_exp(); // needs AVX2: after the `supported` test
                      // One thread for every contender: this compares code, not threading.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    let (n, m) = (4096, 4096);
    let xv = ArrayD::from_shape_fn(IxDyn(&[n, m]), |i| {
        4.0 * kiln::random::uniform_f32(5, (i[0] * m + i[1]) as u64) - 2.0
    });
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(n as i64), Some(m as i64)]);
    // W3 as examples/bench.rs builds it.
    let mx = x.max(Some(&[1]), true);
    let out: Var = (&x - &mx).exp().sum(Some(&[1]), false).log() + mx.reshape(&[n as i64]);
    let f = function(&[&x], &[&out])
        .backend(Backend::Cpu)
        .compile()
        .expect("compile W3");
    let data = xv.as_slice().expect("standard layout");
    let kiln_out = f.call(&[xv.view()]).expect("run W3").remove(0);
    let kiln_out = kiln_out.as_f32().expect("f32 result");
    let (mut o128, mut o256) = (vec![0f32; n], vec![0f32; n]);
    unsafe {
        x86::lse_rows_128(data, m, &mut o128);
        x86::lse_rows_256(data, m, &mut o256);
    }
    for (r, ((k, a), b)) in kiln_out.iter().zip(&o128).zip(&o256).enumerate() {
        let close = |y: f32| (y - k).abs() <= 1e-6 * k.abs().max(1.0);
        assert!(
            close(*a) && close(*b),
            "row {r}: kiln {k}, llvm_128 {a}, llvm_256 {b}"
        );
    }

    let mut group = c.benchmark_group("w3_vector_width");
    group.sample_size(20);
    group.bench_function("kiln_cpu", |b| b.iter(|| f.call(&[xv.view()]).unwrap()));
    group.bench_function("llvm_128", |b| {
        b.iter(|| unsafe { x86::lse_rows_128(data, m, &mut o128) })
    });
    group.bench_function("llvm_256", |b| {
        b.iter(|| unsafe { x86::lse_rows_256(data, m, &mut o256) })
    });
    group.finish();
}

#[cfg(not(target_arch = "x86_64"))]
fn w3_width(_: &mut Criterion) {
    eprintln!("vector_width: x86_64 only; nothing measured");
}

criterion_group!(benches, w3_width);
criterion_main!(benches);
