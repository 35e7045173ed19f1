//! kiln's float GEMM (the `kiln-gemm` crate, shared with the runtime library that objects
//! link, `crates/kiln-rt`), with what kiln adds around it: safe calls on ndarray views and
//! the blocking its compiled code uses per dtype.

pub use kiln_gemm::{
    available, gemm, gemm_on, gemm_update, gemm_update_on, isa, k_step, Blocking, Element, Isa,
    Mat, ISA_VAR, PARALLEL_MIN,
};

/// `6x32`: the rows and columns of the micro-tile the kernels of `isa` compute for `T`.
pub fn tile_text<T: Element>(isa: Isa) -> String {
    format!("{}x{}", kiln_gemm::MR, T::nr(isa))
}

/// The ISAs this host runs the kernels of, narrowest first (tests compare their bits).
pub fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.available()).collect()
}

/// An error where `KILN_CPU_ISA` names no ISA or one this CPU lacks (checked when a function
/// is compiled, as `KILN_THREADS` is).
pub fn check_isa_request() -> crate::error::Result<()> {
    kiln_gemm::requested_isa()
        .map(|_| ())
        .map_err(crate::error::Error::Input)
}
use ndarray::{ArrayView2, ArrayViewMut2};

/// The `kc` of the blocking kiln's compiled code uses for floats of `dtype` (f32 or f64).
pub fn default_kc(dtype: crate::ir::DType) -> usize {
    match dtype {
        crate::ir::DType::F64 => <f64 as Element>::BLOCKING.kc,
        _ => <f32 as Element>::BLOCKING.kc,
    }
}

/// A view's shape and strides as a matrix.
pub fn mat_of<T>(v: &ArrayView2<T>) -> Mat<*const T> {
    let (rows, cols) = v.dim();
    Mat {
        ptr: v.as_ptr(),
        rows,
        cols,
        rs: v.strides()[0],
        cs: v.strides()[1],
    }
}

/// `c = a b` on rayon's threads with the default blocking, C only written. `None` (and C
/// untouched) where the host lacks AVX2 or FMA, or the shapes do not chain.
pub fn product<T: Element>(a: ArrayView2<T>, b: ArrayView2<T>, c: ArrayViewMut2<T>) -> Option<()> {
    product_on(a, b, c, rayon::current_num_threads())
}

/// [`product`] on at most `threads` threads (1: the calling thread alone, as each product of
/// a batch whose entries run side by side).
pub fn product_on<T: Element>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    mut c: ArrayViewMut2<T>,
    threads: usize,
) -> Option<()> {
    let (a, b, c) = checked(&a, &b, &mut c)?;
    // SAFETY: `checked` vouches for the views and the features.
    unsafe { gemm(a, b, c, threads, T::BLOCKING) };
    Some(())
}

/// `w = w - (a b) scale` (see [`gemm_update`]) on rayon's threads with the default blocking.
/// `None` (and W untouched) where the host lacks AVX2 or FMA, or the shapes do not chain.
pub fn update<T: Element>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    mut w: ArrayViewMut2<T>,
    scale: T,
) -> Option<()> {
    let (a, b, w) = checked(&a, &b, &mut w)?;
    // SAFETY: `checked` vouches for the views and the features.
    unsafe { gemm_update(a, b, w, scale, rayon::current_num_threads(), T::BLOCKING) };
    Some(())
}

/// The views of a safe call as matrices, where the host runs the kernels and the shapes
/// chain. They address their elements, and the output's is a unique borrow, so it overlaps
/// neither operand.
#[allow(clippy::type_complexity)]
fn checked<T: Element>(
    a: &ArrayView2<T>,
    b: &ArrayView2<T>,
    c: &mut ArrayViewMut2<T>,
) -> Option<(Mat<*const T>, Mat<*const T>, Mat<*mut T>)> {
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    if !available() || k != k2 || c.dim() != (m, n) {
        return None;
    }
    let (rs, cs) = (c.strides()[0], c.strides()[1]);
    let c = Mat {
        ptr: c.as_mut_ptr(),
        rows: m,
        cols: n,
        rs,
        cs,
    };
    Some((mat_of(a), mat_of(b), c))
}
