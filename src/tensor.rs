//! Concrete tensors: an n-dimensional array of one of kiln's dtypes. `ndarray` is the storage
//! at the API edge and in the reference interpreter.

use crate::ir::{DType, Element, TensorType};
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use std::fmt;
use std::hash::{Hash, Hasher};

/// An owned tensor of any dtype.
#[derive(Clone)]
pub enum Tensor {
    /// A `bool` tensor.
    Bool(ArrayD<bool>),
    /// An `i32` tensor.
    I32(ArrayD<i32>),
    /// An `i64` tensor.
    I64(ArrayD<i64>),
    /// An `f32` tensor.
    F32(ArrayD<f32>),
    /// An `f64` tensor.
    F64(ArrayD<f64>),
    /// An `f16` tensor (a storage type: see `DType::F16`).
    F16(ArrayD<half::f16>),
    /// A `bf16` tensor (a storage type: see `DType::BF16`).
    BF16(ArrayD<half::bf16>),
}

/// A borrowed tensor of any dtype: what `Function::call` takes.
#[derive(Clone, Debug)]
pub enum TensorRef<'a> {
    /// A view of `bool` elements.
    Bool(ArrayViewD<'a, bool>),
    /// A view of `i32` elements.
    I32(ArrayViewD<'a, i32>),
    /// A view of `i64` elements.
    I64(ArrayViewD<'a, i64>),
    /// A view of `f32` elements.
    F32(ArrayViewD<'a, f32>),
    /// A view of `f64` elements.
    F64(ArrayViewD<'a, f64>),
    /// A view of `f16` elements.
    F16(ArrayViewD<'a, half::f16>),
    /// A view of `bf16` elements.
    BF16(ArrayViewD<'a, half::bf16>),
}

/// Applies `$body` to the array inside a tensor, binding it to `$a`, for every dtype.
#[macro_export]
#[doc(hidden)]
macro_rules! for_each_dtype {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::Bool($a) => $body,
            $crate::tensor::Tensor::I32($a) => $body,
            $crate::tensor::Tensor::I64($a) => $body,
            $crate::tensor::Tensor::F32($a) => $body,
            $crate::tensor::Tensor::F64($a) => $body,
            $crate::tensor::Tensor::F16($a) => $body,
            $crate::tensor::Tensor::BF16($a) => $body,
        }
    };
}

/// `for_each_dtype!` for a `TensorRef`.
#[macro_export]
#[doc(hidden)]
macro_rules! for_each_ref {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::TensorRef::Bool($a) => $body,
            $crate::tensor::TensorRef::I32($a) => $body,
            $crate::tensor::TensorRef::I64($a) => $body,
            $crate::tensor::TensorRef::F32($a) => $body,
            $crate::tensor::TensorRef::F64($a) => $body,
            $crate::tensor::TensorRef::F16($a) => $body,
            $crate::tensor::TensorRef::BF16($a) => $body,
        }
    };
}

/// Like `for_each_dtype!`, and rewraps the result in the same variant.
#[macro_export]
#[doc(hidden)]
macro_rules! map_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::Bool($a) => $crate::tensor::Tensor::Bool($body),
            $crate::tensor::Tensor::I32($a) => $crate::tensor::Tensor::I32($body),
            $crate::tensor::Tensor::I64($a) => $crate::tensor::Tensor::I64($body),
            $crate::tensor::Tensor::F32($a) => $crate::tensor::Tensor::F32($body),
            $crate::tensor::Tensor::F64($a) => $crate::tensor::Tensor::F64($body),
            $crate::tensor::Tensor::F16($a) => $crate::tensor::Tensor::F16($body),
            $crate::tensor::Tensor::BF16($a) => $crate::tensor::Tensor::BF16($body),
        }
    };
}

/// Like `for_each_ref!`, and rewraps the result in the same `TensorRef` variant.
macro_rules! map_ref {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            TensorRef::Bool($a) => TensorRef::Bool($body),
            TensorRef::I32($a) => TensorRef::I32($body),
            TensorRef::I64($a) => TensorRef::I64($body),
            TensorRef::F32($a) => TensorRef::F32($body),
            TensorRef::F64($a) => TensorRef::F64($body),
            TensorRef::F16($a) => TensorRef::F16($body),
            TensorRef::BF16($a) => TensorRef::BF16($body),
        }
    };
}

/// Like `for_each_ref!`, and wraps the (owned) result in the same dtype's `Tensor` variant.
macro_rules! ref_to_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            TensorRef::Bool($a) => Tensor::Bool($body),
            TensorRef::I32($a) => Tensor::I32($body),
            TensorRef::I64($a) => Tensor::I64($body),
            TensorRef::F32($a) => Tensor::F32($body),
            TensorRef::F64($a) => Tensor::F64($body),
            TensorRef::F16($a) => Tensor::F16($body),
            TensorRef::BF16($a) => Tensor::BF16($body),
        }
    };
}

impl Tensor {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::Bool(_) => DType::Bool,
            Tensor::I32(_) => DType::I32,
            Tensor::I64(_) => DType::I64,
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::F16(_) => DType::F16,
            Tensor::BF16(_) => DType::BF16,
        }
    }

    /// The extent of each axis.
    pub fn shape(&self) -> &[usize] {
        for_each_dtype!(self, a => a.shape())
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        for_each_dtype!(self, a => a.len())
    }

    /// Whether the tensor has no elements (some extent is 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type with every dim known.
    pub fn ty(&self) -> TensorType {
        TensorType::fixed(self.dtype(), self.shape())
    }

    /// A borrowed view of the whole tensor.
    pub fn view(&self) -> TensorRef<'_> {
        match self {
            Tensor::Bool(a) => TensorRef::Bool(a.view()),
            Tensor::I32(a) => TensorRef::I32(a.view()),
            Tensor::I64(a) => TensorRef::I64(a.view()),
            Tensor::F32(a) => TensorRef::F32(a.view()),
            Tensor::F64(a) => TensorRef::F64(a.view()),
            Tensor::F16(a) => TensorRef::F16(a.view()),
            Tensor::BF16(a) => TensorRef::BF16(a.view()),
        }
    }

    /// A view of this tensor's elements that does not borrow it, for an in-place step that reads
    /// a buffer while a kernel writes it (see `runtime::Thunk::run_into`).
    ///
    /// # Safety
    /// The tensor must be in standard layout, and must not be dropped, moved out of its heap
    /// buffer (reallocated) or written through other paths while the view is read, except by a
    /// kernel that writes each element only after reading the same element of the view.
    pub(crate) unsafe fn alias_view<'a>(&self) -> TensorRef<'a> {
        debug_assert!(self.view().is_standard_layout());
        let sh = IxDyn(self.shape());
        // SAFETY: the caller keeps the buffer alive and in standard layout (see above).
        unsafe {
            match self {
                Tensor::Bool(a) => TensorRef::Bool(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
                Tensor::I32(a) => TensorRef::I32(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
                Tensor::I64(a) => TensorRef::I64(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
                Tensor::F32(a) => TensorRef::F32(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
                Tensor::F64(a) => TensorRef::F64(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
                Tensor::F16(a) => TensorRef::F16(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
                Tensor::BF16(a) => TensorRef::BF16(ArrayViewD::from_shape_ptr(sh, a.as_ptr())),
            }
        }
    }

    /// An empty 1-d tensor (shape `[0]`) of `dtype`, without allocating: a stand-in for a
    /// buffer moved out for a moment (on the per-call path, so kept cheap).
    pub fn empty(dtype: DType) -> Tensor {
        fn e<T>() -> ArrayD<T> {
            // SAFETY: shape [0] holds no elements, and the vector has none.
            unsafe { ArrayD::from_shape_vec_unchecked(IxDyn(&[0]), Vec::new()) }
        }
        match dtype {
            DType::Bool => Tensor::Bool(e()),
            DType::I32 => Tensor::I32(e()),
            DType::I64 => Tensor::I64(e()),
            DType::F32 => Tensor::F32(e()),
            DType::F64 => Tensor::F64(e()),
            DType::F16 => Tensor::F16(e()),
            DType::BF16 => Tensor::BF16(e()),
        }
    }

    /// A tensor of `shape` filled with `value` converted to `dtype` (as numpy's `full`).
    pub fn full(dtype: DType, shape: &[usize], value: f64) -> Tensor {
        let sh = IxDyn(shape);
        match dtype {
            DType::Bool => Tensor::Bool(ArrayD::from_elem(sh, value != 0.0)),
            DType::I32 => Tensor::I32(ArrayD::from_elem(sh, value as i32)),
            DType::I64 => Tensor::I64(ArrayD::from_elem(sh, value as i64)),
            DType::F32 => Tensor::F32(ArrayD::from_elem(sh, value as f32)),
            DType::F64 => Tensor::F64(ArrayD::from_elem(sh, value)),
            DType::F16 => Tensor::F16(ArrayD::from_elem(sh, crate::ir::f16_of(value))),
            DType::BF16 => Tensor::BF16(ArrayD::from_elem(sh, crate::ir::bf16_of(value))),
        }
    }

    /// Index `i` of the leading axis, as an owned row-major tensor (a scan's step of a
    /// sequence). `i` must be in range.
    pub fn index_leading(&self, i: usize) -> Tensor {
        map_tensor!(self, a => a
            .index_axis(ndarray::Axis(0), i)
            .as_standard_layout()
            .into_owned())
    }

    /// Writes `src` over index `i` of the leading axis (a scan's stacked output, filled step by
    /// step). An error where `src`'s dtype or shape is not that of one index; `i` must be in
    /// range.
    pub fn write_leading(&mut self, i: usize, src: TensorRef<'_>) -> Result<(), String> {
        fn write<T: Copy>(
            dst: &mut ArrayD<T>,
            i: usize,
            src: ArrayViewD<'_, T>,
        ) -> Result<(), String> {
            let mut row = dst.index_axis_mut(ndarray::Axis(0), i);
            if row.shape() != src.shape() {
                return Err(format!(
                    "{:?} where the others are {:?}",
                    src.shape(),
                    row.shape()
                ));
            }
            match (row.as_slice_mut(), src.as_slice()) {
                (Some(d), Some(s)) => d.copy_from_slice(s),
                _ => row.assign(&src),
            }
            Ok(())
        }
        let (dtype, want) = (self.dtype(), src.dtype());
        match (self, src) {
            (Tensor::Bool(d), TensorRef::Bool(s)) => write(d, i, s),
            (Tensor::I32(d), TensorRef::I32(s)) => write(d, i, s),
            (Tensor::I64(d), TensorRef::I64(s)) => write(d, i, s),
            (Tensor::F32(d), TensorRef::F32(s)) => write(d, i, s),
            (Tensor::F64(d), TensorRef::F64(s)) => write(d, i, s),
            (Tensor::F16(d), TensorRef::F16(s)) => write(d, i, s),
            (Tensor::BF16(d), TensorRef::BF16(s)) => write(d, i, s),
            _ => Err(format!("{want} where the others are {dtype}")),
        }
    }

    /// `parts`, all of dtype `dtype` and shape `elem`, stacked along a new leading axis
    /// (numpy's `stack`): a scan's stacked output. An error names the first part that differs.
    pub fn stack(dtype: DType, elem: &[usize], parts: &[Tensor]) -> Result<Tensor, String> {
        check_stack_parts(dtype, elem, parts.iter().map(|p| (p.dtype(), p.shape())))?;
        fn join<T: Clone>(shape: Vec<usize>, parts: Vec<&ArrayD<T>>) -> ArrayD<T> {
            let mut data = Vec::with_capacity(shape.iter().product());
            for p in parts {
                match p.as_slice() {
                    Some(s) => data.extend_from_slice(s),
                    None => data.extend(p.iter().cloned()),
                }
            }
            ArrayD::from_shape_vec(IxDyn(&shape), data).expect("the parts' shapes were checked")
        }
        let mut shape = vec![parts.len()];
        shape.extend_from_slice(elem);
        macro_rules! each {
            ($v:ident) => {
                Tensor::$v(join(
                    shape,
                    parts
                        .iter()
                        .map(|p| match p {
                            Tensor::$v(a) => a,
                            _ => unreachable!("dtypes were checked"),
                        })
                        .collect(),
                ))
            };
        }
        Ok(match dtype {
            DType::Bool => each!(Bool),
            DType::I32 => each!(I32),
            DType::I64 => each!(I64),
            DType::F32 => each!(F32),
            DType::F64 => each!(F64),
            DType::F16 => each!(F16),
            DType::BF16 => each!(BF16),
        })
    }

    /// A tensor of `shape` filled with zeros (false for bool).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        Tensor::full(dtype, shape, 0.0)
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(v: T) -> Tensor
    where
        ArrayD<T>: Into<Tensor>,
    {
        ArrayD::from_elem(IxDyn(&[]), v).into()
    }

    /// Every element converted to f64 in logical (row-major) order; for tests and printing.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Tensor::Bool(a) => a.iter().map(|&x| x as u8 as f64).collect(),
            Tensor::I32(a) => a.iter().map(|&x| x as f64).collect(),
            Tensor::I64(a) => a.iter().map(|&x| x as f64).collect(),
            Tensor::F32(a) => a.iter().map(|&x| x as f64).collect(),
            Tensor::F64(a) => a.iter().copied().collect(),
            Tensor::F16(a) => a.iter().map(|x| x.to_f64()).collect(),
            Tensor::BF16(a) => a.iter().map(|x| x.to_f64()).collect(),
        }
    }

    /// The array, if the tensor is `f32`.
    pub fn as_f32(&self) -> Option<&ArrayD<f32>> {
        match self {
            Tensor::F32(a) => Some(a),
            _ => None,
        }
    }
    /// The array, if the tensor is `f64`.
    pub fn as_f64(&self) -> Option<&ArrayD<f64>> {
        match self {
            Tensor::F64(a) => Some(a),
            _ => None,
        }
    }
    /// The array, if the tensor is `i32`.
    pub fn as_i32(&self) -> Option<&ArrayD<i32>> {
        match self {
            Tensor::I32(a) => Some(a),
            _ => None,
        }
    }
    /// The array, if the tensor is `i64`.
    pub fn as_i64(&self) -> Option<&ArrayD<i64>> {
        match self {
            Tensor::I64(a) => Some(a),
            _ => None,
        }
    }
    /// The array, if the tensor is `bool`.
    pub fn as_bool(&self) -> Option<&ArrayD<bool>> {
        match self {
            Tensor::Bool(a) => Some(a),
            _ => None,
        }
    }

    /// Bitwise equality: NaNs with the same bits are equal, 0.0 and -0.0 are not.
    pub fn bit_eq(&self, other: &Tensor) -> bool {
        if self.dtype() != other.dtype() || self.shape() != other.shape() {
            return false;
        }
        match (self, other) {
            (Tensor::F32(a), Tensor::F32(b)) => {
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (Tensor::F64(a), Tensor::F64(b)) => {
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (Tensor::F16(a), Tensor::F16(b)) => {
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (Tensor::BF16(a), Tensor::BF16(b)) => {
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (Tensor::Bool(a), Tensor::Bool(b)) => a == b,
            (Tensor::I32(a), Tensor::I32(b)) => a == b,
            (Tensor::I64(a), Tensor::I64(b)) => a == b,
            _ => false,
        }
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.bit_eq(other)
    }
}
impl Eq for Tensor {}

impl Hash for Tensor {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.dtype().hash(h);
        self.shape().hash(h);
        match self {
            Tensor::Bool(a) => a.iter().for_each(|x| x.hash(h)),
            Tensor::I32(a) => a.iter().for_each(|x| x.hash(h)),
            Tensor::I64(a) => a.iter().for_each(|x| x.hash(h)),
            Tensor::F32(a) => a.iter().for_each(|x| x.to_bits().hash(h)),
            Tensor::F64(a) => a.iter().for_each(|x| x.to_bits().hash(h)),
            Tensor::F16(a) => a.iter().for_each(|x| x.to_bits().hash(h)),
            Tensor::BF16(a) => a.iter().for_each(|x| x.to_bits().hash(h)),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for_each_dtype!(self, a => write!(f, "{}{:?}", self.dtype(), a))
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for_each_dtype!(self, a => write!(f, "{a}"))
    }
}

impl<'a> TensorRef<'a> {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            TensorRef::Bool(_) => DType::Bool,
            TensorRef::I32(_) => DType::I32,
            TensorRef::I64(_) => DType::I64,
            TensorRef::F32(_) => DType::F32,
            TensorRef::F64(_) => DType::F64,
            TensorRef::F16(_) => DType::F16,
            TensorRef::BF16(_) => DType::BF16,
        }
    }

    /// The extent of each axis.
    pub fn shape(&self) -> &[usize] {
        for_each_ref!(self, a => a.shape())
    }

    /// The same view with a shorter lifetime (ndarray views are not covariant).
    pub fn reborrow(&self) -> TensorRef<'_> {
        map_ref!(self, a => a.view())
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        for_each_ref!(self, a => a.len())
    }

    /// Whether the view has no elements (some extent is 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the elements are contiguous in row-major order.
    pub fn is_standard_layout(&self) -> bool {
        for_each_ref!(self, a => a.is_standard_layout())
    }

    /// The address of the first element.
    pub fn as_ptr(&self) -> *const u8 {
        for_each_ref!(self, a => a.as_ptr() as *const u8)
    }

    /// A standard-layout copy broadcast to `shape`, or `None` when the shapes do not fit.
    pub fn broadcast_owned(&self, shape: &[usize]) -> Option<Tensor> {
        let sh = IxDyn(shape);
        Some(ref_to_tensor!(self, a => a.broadcast(sh)?.as_standard_layout().into_owned()))
    }

    /// A copy in standard (row-major, contiguous) layout.
    pub fn to_standard_owned(&self) -> Tensor {
        ref_to_tensor!(self, a => row_major_copy(a))
    }

    /// An owned copy of the elements; its memory layout is the view's where the view is
    /// contiguous (use `to_standard_owned` for a copy that is surely row-major).
    pub fn to_owned(&self) -> Tensor {
        ref_to_tensor!(self, a => a.to_owned())
    }
}

macro_rules! conversions {
    ($($t:ty => $v:ident),*) => {$(
        impl From<ArrayD<$t>> for Tensor {
            fn from(a: ArrayD<$t>) -> Tensor { Tensor::$v(a) }
        }
        impl<'a> From<ArrayViewD<'a, $t>> for TensorRef<'a> {
            fn from(a: ArrayViewD<'a, $t>) -> TensorRef<'a> { TensorRef::$v(a) }
        }
        impl<'a> From<&'a ArrayD<$t>> for TensorRef<'a> {
            fn from(a: &'a ArrayD<$t>) -> TensorRef<'a> { TensorRef::$v(a.view()) }
        }
        impl TryFrom<Tensor> for ArrayD<$t> {
            type Error = crate::Error;
            fn try_from(t: Tensor) -> Result<ArrayD<$t>, crate::Error> {
                match t {
                    Tensor::$v(a) => Ok(a),
                    other => Err(crate::Error::Input(format!(
                        "expected a tensor of {}, found {}", <$t as Element>::DTYPE, other.dtype()
                    ))),
                }
            }
        }
    )*};
}
conversions!(
    bool => Bool, i32 => I32, i64 => I64, f32 => F32, f64 => F64,
    half::f16 => F16, half::bf16 => BF16
);

impl<'a> TensorRef<'a> {
    /// Index `i` of the leading axis (a view, no copy: a scan's step of a sequence). `i` must
    /// be in range.
    pub fn index_leading(self, i: usize) -> TensorRef<'a> {
        map_ref!(self, a => a.index_axis_move(ndarray::Axis(0), i))
    }

    /// Rows `r0..r1` of the first axis (a view, no copy).
    pub fn slice_rows(self, r0: usize, r1: usize) -> TensorRef<'a> {
        let s = ndarray::Slice::from(r0..r1);
        map_ref!(self, a => a.slice_axis_move(ndarray::Axis(0), s))
    }

    /// The same elements with the last two dims swapped (a strided view, no copy); a view of
    /// fewer than two dims is returned as it is.
    pub fn swap_last_two(self) -> TensorRef<'a> {
        fn swap<T>(mut a: ArrayViewD<'_, T>) -> ArrayViewD<'_, T> {
            let n = a.ndim();
            if n >= 2 {
                a.swap_axes(n - 2, n - 1);
            }
            a
        }
        map_ref!(self, a => swap(a))
    }
}

impl<'a> From<&'a Tensor> for TensorRef<'a> {
    fn from(t: &'a Tensor) -> TensorRef<'a> {
        t.view()
    }
}

/// That every part of a stack (its dtype and shape) is of dtype `dtype` and shape `elem`; the
/// error names the first that is not. Read by `Tensor::stack` and the devices' stacks.
pub fn check_stack_parts<'a>(
    dtype: DType,
    elem: &[usize],
    parts: impl IntoIterator<Item = (DType, &'a [usize])>,
) -> Result<(), String> {
    match (parts.into_iter().enumerate()).find(|(_, (d, s))| *d != dtype || *s != elem) {
        Some((i, (d, s))) => Err(format!(
            "part {i} is {d}{s:?} where the others are {dtype}{elem:?}"
        )),
        None => Ok(()),
    }
}

/// `a`'s elements in a new row-major array, copied a row (lane of the last axis) at a time:
/// a row that is contiguous (a restrided head split's) is one block copy. ndarray's
/// `as_standard_layout` walked a [16, 64, 4, 32] transpose at 3-4 GB/s, its `iter` at 0.2.
/// A large array is copied in slabs of its first axis on rayon's threads (the GPT example's
/// head merges, 1 MiB each, took 0.2 ms on one thread).
pub fn row_major_copy<T: Clone + Send + Sync>(a: &ndarray::ArrayViewD<'_, T>) -> ArrayD<T> {
    if let Some(s) = a.as_slice() {
        return ArrayD::from_shape_vec(a.raw_dim(), s.to_vec()).expect("the same shape");
    }
    let (n, len) = (a.shape().first().copied().unwrap_or(1), a.len());
    let mut out: Vec<T> = Vec::with_capacity(len);
    let parts = match len >= COPY_PARALLEL_MIN && a.ndim() >= 2 {
        true => rayon::current_num_threads().min(n),
        false => 1,
    };
    let spare = &mut out.spare_capacity_mut()[..len];
    if parts <= 1 {
        copy_rows(a, spare);
    } else {
        use rayon::prelude::*;
        let per = n.div_ceil(parts);
        let slab_len = len / n * per;
        spare
            .par_chunks_mut(slab_len.max(1))
            .enumerate()
            .for_each(|(p, dst)| {
                let rows = p * per..(p * per + per).min(n);
                copy_rows(
                    &a.slice_axis(ndarray::Axis(0), ndarray::Slice::from(rows)),
                    dst,
                );
            });
    }
    // SAFETY: `copy_rows` wrote every one of the `len` elements (each slab is the part of
    // `out` its rows fill, in row-major order).
    unsafe { out.set_len(len) };
    ArrayD::from_shape_vec(a.raw_dim(), out).expect("the same shape")
}

/// Elements from which [`row_major_copy`] copies on several threads.
const COPY_PARALLEL_MIN: usize = 1 << 17;

/// `a`'s elements written into `out` (exactly `a.len()` of them) in row-major order, a row at
/// a time.
fn copy_rows<T: Clone>(a: &ndarray::ArrayViewD<'_, T>, out: &mut [std::mem::MaybeUninit<T>]) {
    assert_eq!(out.len(), a.len(), "a row-major copy fills its destination");
    if a.ndim() == 0 {
        for (d, v) in out.iter_mut().zip(a.iter()) {
            d.write(v.clone());
        }
        return;
    }
    let width = a.shape()[a.ndim() - 1];
    if width == 0 {
        return;
    }
    for (row, dst) in a.rows().into_iter().zip(out.chunks_exact_mut(width)) {
        match row.as_slice() {
            Some(s) => {
                for (d, v) in dst.iter_mut().zip(s) {
                    d.write(v.clone());
                }
            }
            None => {
                for (d, v) in dst.iter_mut().zip(row.iter()) {
                    d.write(v.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::row_major_copy;
    use ndarray::{ArrayD, IxDyn};

    /// Large transposes (copied in slabs on several threads, with a ragged last slab), small
    /// ones, reversed and gapped views: the copy is ndarray's own row-major order.
    #[test]
    fn row_major_copies_keep_the_logical_order() {
        let base = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            ArrayD::from_shape_vec(IxDyn(shape), (0..n as i64).collect()).unwrap()
        };
        let check = |v: ndarray::ArrayViewD<'_, i64>| {
            let got = row_major_copy(&v);
            assert_eq!(got.shape(), v.shape());
            assert!(got.as_slice().is_some(), "the copy is row-major");
            assert!(got.iter().eq(v.iter()), "shape {:?}", v.shape());
        };
        let heads = base(&[7, 4, 64, 80]);
        check(heads.view().permuted_axes(IxDyn(&[0, 2, 1, 3])));
        check(heads.view().permuted_axes(IxDyn(&[3, 2, 1, 0])));
        let small = base(&[3, 5, 2]);
        check(small.view().permuted_axes(IxDyn(&[2, 0, 1])));
        let mut rev = base(&[300, 600]);
        rev.invert_axis(ndarray::Axis(1));
        check(rev.view());
        let gapped = base(&[2, 200_000]);
        check(gapped.slice(ndarray::s![.., ..;3]).into_dyn());
        check(base(&[0, 4]).view().permuted_axes(IxDyn(&[1, 0])));
        check(base(&[]).view());
    }
}
