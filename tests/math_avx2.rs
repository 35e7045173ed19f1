//! The buffer functions (`kiln::math::avx2`, 256-bit, and `kiln::math::avx512`, 512-bit) run
//! the shared expansions through a vector emitter: they must give exactly the evaluators' bits,
//! for every function, in f32 and f64, over the whole float line (strided bit patterns: every
//! sign, exponent, subnormals, specials, and NaN payloads), at every buffer length (the tail
//! included), and their sums must add in the reference's pairwise order. One set of tests,
//! run on each width the CPU has.
#![cfg(target_arch = "x86_64")]

use kiln::math::{unary, Eval32, Eval64, MathFn};

/// f32 bit patterns a prime stride apart (about a million), plus the specials.
fn line32() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX / 4093)
        .map(|k| f32::from_bits(k * 4093))
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-45,
        -1e-45,
    ]);
    v.extend([88.72, 88.73, -103.9, -104.0, 1.0e6, 2.0e20, -3.0e38]);
    v
}

/// f64 bit patterns a prime stride apart (about half a million), plus the specials.
fn line64() -> Vec<f64> {
    let mut v: Vec<f64> = (0..=u64::MAX / 36_028_797_018_963_913u64 * 1000)
        .map(|k| f64::from_bits(k.wrapping_mul(36_028_797_018_963_913)))
        .collect();
    v.extend([
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        5e-324,
        -5e-324,
    ]);
    v.extend([709.7, 709.8, -745.2, 1e5, 1e22, 1e300, -1e300]);
    v
}

/// The tests of one width's module (`$m`), skipped where the CPU does not run it.
macro_rules! buffer_function_tests {
    ($m:ident, $what:literal) => {
        mod $m {
            use super::*;
            use kiln::math::$m as isa;

            fn skip() -> bool {
                if isa::available() {
                    return false;
                }
                eprintln!("skipped: this CPU has no {}", $what);
                true
            }

            /// A test that every buffer function of one precision gives the evaluator's bits on `$line`.
            macro_rules! same_bits {
                ($name:ident, $line:ident, $apply:path, $eval:ident) => {
                    #[test]
                    fn $name() {
                        if skip() {
                            return;
                        }
                        let x = $line();
                        assert!(x.len() > 100_000);
                        for f in MathFn::ALL {
                            let mut y = x.clone();
                            $apply(f, &mut y).unwrap();
                            for (a, b) in x.iter().zip(&y) {
                                let want = unary(&mut $eval, f, *a);
                                assert_eq!(
                                    b.to_bits(),
                                    want.to_bits(),
                                    "{}({a:e} = {:#x}): {b:e} against {want:e}",
                                    f.name(),
                                    a.to_bits()
                                );
                            }
                        }
                    }
                };
            }

            same_bits!(
                buffer_functions_give_the_evaluators_bits_f32,
                line32,
                isa::apply_f32,
                Eval32
            );
            same_bits!(
                buffer_functions_give_the_evaluators_bits_f64,
                line64,
                isa::apply_f64,
                Eval64
            );

            #[test]
            fn every_length_and_offset_is_covered() {
                if skip() {
                    return;
                }
                // Lengths 0..40 at odd offsets: the four-vector loop, the one-vector step and the tail;
                // and around the runs of 128 of tanh and sigmoid (their two halves a run at a time).
                let x: Vec<f32> = (0..620).map(|i| (i as f32 - 20.0) * 0.37 % 23.0).collect();
                let xd: Vec<f64> = x.iter().map(|&v| v as f64 * 1.01).collect();
                let lengths = (0..40).chain([127, 128, 129, 135, 255, 256, 257, 300, 385, 600]);
                for f in [
                    MathFn::Exp,
                    MathFn::Sin,
                    MathFn::Log1p,
                    MathFn::Tanh,
                    MathFn::Sigmoid,
                ] {
                    for off in 0..3 {
                        for n in lengths.clone() {
                            let mut y = x.clone();
                            isa::apply_f32(f, &mut y[off..off + n]).unwrap();
                            let mut yd = xd.clone();
                            isa::apply_f64(f, &mut yd[off..off + n]).unwrap();
                            for i in 0..x.len() {
                                let inside = (off..off + n).contains(&i);
                                let want = if inside {
                                    unary(&mut Eval32, f, x[i])
                                } else {
                                    x[i]
                                };
                                assert_eq!(
                                    y[i].to_bits(),
                                    want.to_bits(),
                                    "{} f32 n={n} i={i}",
                                    f.name()
                                );
                                let want = if inside {
                                    unary(&mut Eval64, f, xd[i])
                                } else {
                                    xd[i]
                                };
                                assert_eq!(
                                    yd[i].to_bits(),
                                    want.to_bits(),
                                    "{} f64 n={n} i={i}",
                                    f.name()
                                );
                            }
                        }
                    }
                }
            }

            /// The summing buffer functions add in the reference's pairwise order: runs of more than 128
            /// split in two at a multiple of 8; a run of at most 128 is a leaf, element `i` into partial
            /// `i % 8`, the partials combined pairwise, then the last `n % 8` one by one.
            #[test]
            fn summing_functions_add_in_the_pairwise_order() {
                if skip() {
                    return;
                }
                fn pairwise<T: Copy + std::ops::Add<Output = T>>(v: &[T], zero: T) -> T {
                    if v.len() > 128 {
                        let mid = (v.len() / 2) & !7;
                        return pairwise(&v[..mid], zero) + pairwise(&v[mid..], zero);
                    }
                    let n8 = v.len() / 8 * 8;
                    let mut p = [zero; 8];
                    for (i, &x) in v[..n8].iter().enumerate() {
                        p[i % 8] = p[i % 8] + x;
                    }
                    let mut s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
                    for &x in &v[n8..] {
                        s = s + x;
                    }
                    s
                }
                let x: Vec<f32> = (0..1100)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.11)
                    .collect();
                let xd: Vec<f64> = x.iter().map(|&v| v as f64 * 1.01).collect();
                let lengths = (0..=140).chain([255, 256, 257, 263, 511, 1000, 1100]);
                for (f, shift) in MathFn::ALL.iter().flat_map(|&f| [(f, 0.0), (f, 1.25)]) {
                    for n in lengths.clone() {
                        let y: Vec<f32> = x[..n]
                            .iter()
                            .map(|&v| unary(&mut Eval32, f, v - shift as f32))
                            .collect();
                        let want = pairwise(&y, 0.0f32);
                        let got = isa::sum_f32(f, &x[..n], shift as f32).unwrap();
                        assert!(
                            got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                            "{} f32 n={n}: {got:e} against {want:e}",
                            f.name()
                        );
                        let y: Vec<f64> = xd[..n]
                            .iter()
                            .map(|&v| unary(&mut Eval64, f, v - shift))
                            .collect();
                        let want = pairwise(&y, 0.0f64);
                        let got = isa::sum_f64(f, &xd[..n], shift).unwrap();
                        assert!(
                            got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                            "{} f64 n={n}: {got:e} against {want:e}",
                            f.name()
                        );
                    }
                }
            }
        }
    };
}

buffer_function_tests!(avx2, "AVX2 + FMA");
buffer_function_tests!(avx512, "AVX-512F");
