//! Matrix products on the device through cuBLAS (loaded at run time by cudarc): the plan's
//! `gemm` steps, numpy's `matmul` over row-major device arrays, batched over leading dims, with
//! the folded transposes of the plan and the fused gradient update (`W - scale * A @ B`).
//!
//! cuBLAS is column-major; a row-major `C = A @ B` is the column-major `C^T = B^T @ A^T`, so
//! each call passes B first. Products are true f32 and f64 (cuBLAS's default math mode: no
//! TF32), summed in cuBLAS's order, which is neither the CPU GEMM's nor the interpreter's.

use super::cuda::Device;
use super::device::DeviceTensor;
use crate::error::{Error, Result};
use crate::ir::DType;
use crate::lower::view::View;
use cudarc::cublas::{result as blas, sys};
use std::sync::{Arc, Mutex, OnceLock};

/// The cuBLAS handle of the process's device, and the stream it queues on (the default one,
/// or a capture's: `capture.rs`), which its calls hold while they set it and queue.
struct Handle(sys::cublasHandle_t, Mutex<usize>);

// SAFETY: a cuBLAS handle may be used from any thread, one call at a time (the stream's lock;
// `matmul` is called with the context bound).
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

fn handle(dev: &Device) -> Result<&'static Handle> {
    static HANDLE: OnceLock<std::result::Result<Handle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // SAFETY: only tries to load the library (cudarc panics on use if it is missing).
            if !unsafe { sys::is_culib_present() } {
                return Err("cuBLAS (libcublas) not found".into());
            }
            dev.bind().map_err(|e| e.to_string())?;
            blas::create_handle()
                .map(|h| Handle(h, Mutex::new(0)))
                .map_err(|e| format!("cuBLAS: {e:?}"))
        })
        .as_ref()
        .map_err(|e| Error::Unsupported(e.clone()))
}

/// Whether the device's products take `dtype`.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

/// One operand as a stack of matrices: batch dims, rows, columns (logical, after the folded
/// transpose), and whether its storage is the transpose.
struct Mat {
    batch: Vec<usize>,
    rows: usize,
    cols: usize,
    transposed: bool,
}

fn as_matrices(t: &DeviceTensor, transposed: bool, vector_is_row: bool) -> Result<Mat> {
    let s = t.shape();
    Ok(match s.len() {
        0 => return Err(Error::Shape("matmul of a scalar".into())),
        1 if vector_is_row => Mat {
            batch: vec![],
            rows: 1,
            cols: s[0],
            transposed: false,
        },
        1 => Mat {
            batch: vec![],
            rows: s[0],
            cols: 1,
            transposed: false,
        },
        r => {
            let (a, b) = (s[r - 2], s[r - 1]);
            let (rows, cols) = if transposed { (b, a) } else { (a, b) };
            Mat {
                batch: s[..r - 2].to_vec(),
                rows,
                cols,
                transposed,
            }
        }
    })
}

/// An operand as cuBLAS takes it: a row-major array and whether to read it transposed. A view
/// that is a row-major array with its last two axes swapped (a transpose the plan did not fold)
/// is that array read transposed; other layouts are not taken (the caller runs the product on
/// the host).
fn stored(t: &DeviceTensor, transposed: bool) -> Result<(DeviceTensor, bool)> {
    if t.is_row_major() {
        return Ok((t.clone(), transposed));
    }
    let r = t.shape().len();
    if r >= 2 {
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        let swap = View::of(&crate::ir::Op::Transpose { perm }, r).expect("a transpose");
        if let Some(s) = t.view(&swap).filter(|s| s.is_row_major()) {
            return Ok((s, !transposed));
        }
    }
    Err(Error::Unsupported(
        "matmul on the device of a strided operand".into(),
    ))
}

/// The element stride from one matrix of `m` to the next over the batch `batch`: 0 when `m`
/// is one matrix broadcast, its size when it has every batch dim; other broadcasts of the
/// batch dims are not supported on the device.
fn batch_stride(m: &Mat, batch: &[usize]) -> Result<i64> {
    let n: usize = m.batch.iter().product();
    if n == 1 {
        return Ok(0);
    }
    let padded: Vec<usize> = std::iter::repeat_n(1, batch.len() - m.batch.len())
        .chain(m.batch.iter().copied())
        .collect();
    if padded == batch {
        Ok((m.rows * m.cols) as i64)
    } else {
        Err(Error::Unsupported(format!(
            "matmul on the device broadcasting batch dims {:?} to {batch:?}",
            m.batch
        )))
    }
}

fn int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::Unsupported(format!("matmul {what} {v} exceeds cuBLAS's")))
}

/// numpy's `matmul` of `a` and `b` (each read transposed where `transposed` says), or with
/// `update = (w, scale)`, `w - scale * a @ b`; row-major, into `dest` where it fits (of the
/// result's dtype and shape, a whole dense buffer, not an operand's unless it is `w` itself,
/// which is then updated where it is), else into a fresh array.
pub fn matmul(
    dev: &Arc<Device>,
    a: &DeviceTensor,
    b: &DeviceTensor,
    transposed: [bool; 2],
    update: Option<(&DeviceTensor, f64)>,
    dest: Option<DeviceTensor>,
) -> Result<DeviceTensor> {
    let dtype = a.dtype();
    if b.dtype() != dtype || !supports(dtype) {
        return Err(Error::Unsupported(format!(
            "matmul on the device of {} and {} (f32 and f64 only)",
            a.dtype(),
            b.dtype()
        )));
    }
    let (a, ta) = stored(a, transposed[0])?;
    let (b, tb) = stored(b, transposed[1])?;
    let (a, b) = (&a, &b);
    let ma = as_matrices(a, ta, true)?;
    let mb = as_matrices(b, tb, false)?;
    if ma.cols != mb.rows {
        return Err(Error::Shape(format!(
            "matmul: {:?} @ {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let (m, k, n) = (ma.rows, ma.cols, mb.cols);
    let batch = crate::ir::broadcast_shapes(&ma.batch, &mb.batch).map_err(Error::Shape)?;
    let mut out_shape = batch.clone();
    if a.shape().len() >= 2 {
        out_shape.push(m);
    }
    if b.shape().len() >= 2 {
        out_shape.push(n);
    }
    let count = (batch.iter().try_fold(1usize, |n, &d| n.checked_mul(d))).ok_or_else(|| {
        Error::Shape(format!(
            "matmul: a batch of {batch:?} is too large to count"
        ))
    })?;
    let fits = |d: &DeviceTensor| {
        let w = update.map(|(w, _)| w);
        d.dtype() == dtype
            && d.shape() == out_shape.as_slice()
            && d.is_row_major()
            && d.byte_offset() == 0
            && !d.buffer_of(a)
            && !d.buffer_of(b)
            && w.is_none_or(|w| !d.buffer_of(w) || d.same_elements(w))
    };
    let c = match dest.filter(fits) {
        Some(d) => d,
        None => DeviceTensor::uninit(dev, dtype, &out_shape)?,
    };
    // The result's bytes, `count * m * n` elements (an absent `m` or `n` is 1): `c` exists, so
    // they fit in an address; checked all the same rather than trusted to wrap never.
    let bytes = crate::runtime::memory::array_bytes(dtype, &out_shape)
        .ok_or_else(|| Error::Shape(format!("matmul: {out_shape:?} is too large to address")))?;
    let (alpha, beta) = match update {
        Some((w, scale)) => {
            if !w.is_row_major() {
                return Err(Error::Unsupported(
                    "a gemm update of a strided matrix on the device".into(),
                ));
            }
            if w.shape() != out_shape.as_slice() || w.dtype() != dtype {
                return Err(Error::Shape(format!(
                    "gemm update: {:?} @ {:?} into {:?}",
                    a.shape(),
                    b.shape(),
                    w.shape()
                )));
            }
            if !c.same_elements(w) {
                dev.copy_at(
                    c.buffer(),
                    c.byte_offset(),
                    w.buffer(),
                    w.byte_offset(),
                    bytes,
                )?;
            }
            (-scale, 1.0)
        }
        None => (1.0, 0.0),
    };
    if bytes == 0 {
        return Ok(c);
    }
    if k == 0 {
        if update.is_none() {
            dev.zero(c.buffer(), bytes)?;
        }
        return Ok(c);
    }
    let (sa, sb) = (batch_stride(&ma, &batch)?, batch_stride(&mb, &batch)?);
    // Column-major C^T (n x m) = op(B) (n x k) @ op(A) (k x m); see the module doc.
    let call = Gemm {
        trans: [mb.transposed, ma.transposed],
        m: int(n, "columns")?,
        n: int(m, "rows")?,
        k: int(k, "depth")?,
        alpha,
        beta,
        a: (
            b.address(),
            int(if mb.transposed { k } else { n }.max(1), "stride")?,
            sb,
        ),
        b: (
            a.address(),
            int(if ma.transposed { m } else { k }.max(1), "stride")?,
            sa,
        ),
        c: (c.address(), int(n.max(1), "stride")?, (m * n) as i64),
        batches: int(count, "batch")?,
    };
    // SAFETY: the addresses are live device buffers holding the matrices the shapes, leading
    // dims and batch strides describe (row-major arrays, checked above).
    unsafe {
        if dev.is_host() {
            let run: Box<dyn Fn() + Send + Sync> = match dtype {
                DType::F32 => Box::new(move || call.on_host::<f32>()),
                _ => Box::new(move || call.on_host::<f64>()),
            };
            // Recorded where a capture is in progress (the addresses stay the graph's).
            if let Some(op) = super::capture::record_host(dev, super::capture::HostOp::Call(run)) {
                op.run();
            }
        } else {
            call.cublas(dev, dtype)?
        }
    }
    Ok(c)
}

/// One strided batched column-major GEMM, as cuBLAS takes it: per batch,
/// `C = alpha * op(A) @ op(B) + beta * C` with `op(A)` m x k and `op(B)` k x n; each operand
/// an address, a leading dim and a batch stride (elements).
struct Gemm {
    trans: [bool; 2],
    m: i32,
    n: i32,
    k: i32,
    alpha: f64,
    beta: f64,
    a: (u64, i32, i64),
    b: (u64, i32, i64),
    c: (u64, i32, i64),
    batches: i32,
}

/// The element types of the host reference.
trait Real: Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {
    const ZERO: Self;
    fn of(v: f64) -> Self;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    fn of(v: f64) -> f32 {
        v as f32
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    fn of(v: f64) -> f64 {
        v
    }
}

impl Gemm {
    /// Through cuBLAS.
    ///
    /// # Safety
    /// As `matmul`'s call: the addresses hold what the dims, leading dims and strides reach.
    unsafe fn cublas(&self, dev: &Device, dtype: DType) -> Result<()> {
        let h = handle(dev)?;
        dev.bind()?;
        let stream = super::capture::stream(dev) as usize;
        let mut current = h.1.lock().unwrap_or_else(|e| e.into_inner());
        if *current != stream {
            blas::set_stream(h.0, stream as sys::cudaStream_t)
                .map_err(|e| Error::Runtime(format!("cuBLAS set stream: {e:?}")))?;
            *current = stream;
        }
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (ta, tb) = (op(self.trans[0]), op(self.trans[1]));
        let (a, b, c) = (self.a, self.b, self.c);
        let status = match dtype {
            DType::F32 => {
                let (al, be) = (self.alpha as f32, self.beta as f32);
                blas::sgemm_strided_batched(
                    h.0,
                    ta,
                    tb,
                    self.m,
                    self.n,
                    self.k,
                    &al,
                    a.0 as *const f32,
                    a.1,
                    a.2,
                    b.0 as *const f32,
                    b.1,
                    b.2,
                    &be,
                    c.0 as *mut f32,
                    c.1,
                    c.2,
                    self.batches,
                )
            }
            _ => blas::dgemm_strided_batched(
                h.0,
                ta,
                tb,
                self.m,
                self.n,
                self.k,
                &self.alpha,
                a.0 as *const f64,
                a.1,
                a.2,
                b.0 as *const f64,
                b.1,
                b.2,
                &self.beta,
                c.0 as *mut f64,
                c.1,
                c.2,
                self.batches,
            ),
        };
        status.map_err(|e| Error::Runtime(format!("cuBLAS gemm: {e:?}")))
    }

    /// The same on the host device, by definition (a plain triple loop, summing in the
    /// element type): what the tests without a GPU run, so that the shapes, leading dims,
    /// transposes and batch strides given to cuBLAS are checked against the interpreter.
    ///
    /// # Safety
    /// As `cublas`, with host addresses.
    unsafe fn on_host<T: Real>(&self) {
        let (m, n, k) = (self.m as i64, self.n as i64, self.k as i64);
        let (a, b, c) = (self.a, self.b, self.c);
        let (alpha, beta) = (T::of(self.alpha), T::of(self.beta));
        for batch in 0..self.batches as i64 {
            let pa = (a.0 as *const T).offset((batch * a.2) as isize);
            let pb = (b.0 as *const T).offset((batch * b.2) as isize);
            let pc = (c.0 as *mut T).offset((batch * c.2) as isize);
            for j in 0..n {
                for i in 0..m {
                    let mut acc = T::ZERO;
                    for l in 0..k {
                        let x = if self.trans[0] {
                            *pa.offset((l + i * a.1 as i64) as isize)
                        } else {
                            *pa.offset((i + l * a.1 as i64) as isize)
                        };
                        let y = if self.trans[1] {
                            *pb.offset((j + l * b.1 as i64) as isize)
                        } else {
                            *pb.offset((l + j * b.1 as i64) as isize)
                        };
                        acc = acc + x * y;
                    }
                    let at = pc.offset((i + j * c.1 as i64) as isize);
                    // beta = 0 never reads C (it may hold anything).
                    *at = if self.beta == 0.0 {
                        alpha * acc
                    } else {
                        alpha * acc + beta * *at
                    };
                }
            }
        }
    }
}
