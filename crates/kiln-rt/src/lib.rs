//! kiln's runtime library for ahead-of-time objects (`libkiln_rt.a`).
//!
//! An object compiled with `AotOptions::runtime` (`kiln aot --runtime`) calls two things here
//! that the JIT runs too, where it would otherwise carry code of its own:
//! - its float matrix products, in kiln's GEMM (the `kiln-gemm` crate), instead of its loop
//!   nest;
//! - its kernels' transcendentals (`exp`, `tanh`, ...), in the math expansions' 256-bit buffer
//!   functions (`kiln_math::avx2`, exported by `vmath`), instead of inline 128-bit code.
//!
//! Cranelift, which writes the objects, has only 128-bit vectors, so its products and math run
//! at about half the speed of rustc's AVX2 code. Both compute the same operations in the same
//! order, so an object gives the same bits either way.
//!
//! Build it with `cargo build --release -p kiln-rt` (it is `target/release/libkiln_rt.a`) and
//! link it after the objects: `cc main.c f.o target/release/libkiln_rt.a -lm -lpthread -ldl -o
//! main` (Rust's standard library, which it contains, needs the last two). Each product runs
//! on the calling thread; the library starts no threads. Its packing buffers are allocated on
//! first use and kept, in pools that concurrent calls take them from under a lock.

mod vmath;

use kiln_gemm::{Element, Mat};

/// `c = a @ b` for an `m x k` matrix `a`, a `k x n` matrix `b` and an `m x n` matrix `c`,
/// element `(i, j)` of each at `ptr + i * rs + j * cs` (strides in elements, not bytes).
/// Returns 0 once `c` holds the product, or 1 (and `c` untouched) where this CPU lacks AVX2
/// or FMA: the object then runs its own loop, which gives the same bits.
///
/// # Safety
/// The matrices must address their elements, `c`'s writable and overlapping neither `a` nor
/// `b`.
unsafe fn product<T: Element>(
    m: i64,
    n: i64,
    k: i64,
    a: (*const T, i64, i64),
    b: (*const T, i64, i64),
    c: (*mut T, i64, i64),
) -> i32 {
    if !kiln_gemm::available() || m < 0 || n < 0 || k < 0 {
        return 1;
    }
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let (a, b) = (mat(a, m, k), mat(b, k, n));
    let c = mat(c, m, n);
    // SAFETY: the features are checked above; the caller vouches for the matrices.
    unsafe { kiln_gemm::gemm(a, b, c, 1, T::BLOCKING) };
    0
}

/// A `rows x cols` matrix at `ptr` with element strides `rs`, `cs`.
fn mat<P>((ptr, rs, cs): (P, i64, i64), rows: usize, cols: usize) -> Mat<P> {
    Mat {
        ptr,
        rows,
        cols,
        rs: rs as isize,
        cs: cs as isize,
    }
}

/// `c = a @ b` of f32 matrices: `a` is `m x k`, `b` is `k x n` and `c` is `m x n`, element
/// `(i, j)` of each at `ptr + i * rs + j * cs` (strides in elements, not bytes). Returns 0 once
/// `c` holds the product, or 1 (and `c` untouched) where this CPU lacks AVX2 or FMA, or a
/// size is negative: the object then runs its own loop, which gives the same bits.
///
/// # Safety
/// The matrices must address their elements, `c`'s writable and overlapping neither `a` nor
/// `b`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_gemm_f32(
    m: i64,
    n: i64,
    k: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { product(m, n, k, (a, a_rs, a_cs), (b, b_rs, b_cs), (c, c_rs, c_cs)) }
}

/// `c = a @ b` of f64 matrices: `a` is `m x k`, `b` is `k x n` and `c` is `m x n`, element
/// `(i, j)` of each at `ptr + i * rs + j * cs` (strides in elements, not bytes). Returns 0 once
/// `c` holds the product, or 1 (and `c` untouched) where this CPU lacks AVX2 or FMA, or a
/// size is negative: the object then runs its own loop, which gives the same bits.
///
/// # Safety
/// The matrices must address their elements, `c`'s writable and overlapping neither `a` nor
/// `b`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_gemm_f64(
    m: i64,
    n: i64,
    k: i64,
    a: *const f64,
    a_rs: i64,
    a_cs: i64,
    b: *const f64,
    b_rs: i64,
    b_cs: i64,
    c: *mut f64,
    c_rs: i64,
    c_cs: i64,
) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { product(m, n, k, (a, a_rs, a_cs), (b, b_rs, b_cs), (c, c_rs, c_cs)) }
}
