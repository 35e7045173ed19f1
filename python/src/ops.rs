//! The graph builders, one Python-callable function each, by kiln's op names.
//!
//! Each builds at the user's Python line (`loc::at_caller`) and raises the builder's error at
//! once. Numbers next to a variable become constants of its dtype by kiln's literal rule
//! (`kiln::Operand`), never by a rule of this binding's.

use crate::convert;
use crate::errors::{to_py, type_error};
use crate::loc::at_caller;
use crate::var::{Var, GRAPH};
use kiln::ir::{BinaryOp, ReduceOp, UnaryOp};
use kiln::Operand;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

/// A built variable, checked, or the builder's error as a Python exception.
fn built(py: Python<'_>, f: impl FnOnce() -> kiln::Var) -> PyResult<Var> {
    Var::checked(at_caller(py, f))
}

/// `obj` as a variable beside `like`: a variable as it is; a Python number as a constant of
/// `like`'s dtype (kiln's literal rule: it must be a value of that dtype); an array (or a
/// list) as a constant of its own dtype.
fn operand(py: Python<'_>, obj: &Bound<'_, PyAny>, like: &kiln::Var) -> PyResult<kiln::Var> {
    if let Ok(v) = obj.extract::<Var>() {
        return Ok(v.v);
    }
    let v = if obj.is_instance_of::<PyBool>() {
        let b: bool = obj.extract()?;
        at_caller(py, || {
            GRAPH.constant(kiln::Tensor::full(kiln::bool, &[], b as u8 as f64))
        })
    } else if obj.is_instance_of::<PyInt>() {
        let i: i64 = obj
            .extract()
            .map_err(|_| type_error(format!("{obj} does not fit an i64")))?;
        at_caller(py, || i.into_var(like))
    } else if obj.is_instance_of::<PyFloat>() {
        let x: f64 = obj.extract()?;
        at_caller(py, || x.into_var(like))
    } else {
        let t = convert::tensor(py, obj, None)?;
        at_caller(py, || GRAPH.constant(t))
    };
    v.check().map_err(|e| to_py(e.clone()))?;
    Ok(v)
}

fn by_name<T: Copy>(
    all: &[T],
    name: &str,
    what: &str,
    name_of: impl Fn(T) -> &'static str,
) -> PyResult<T> {
    (all.iter().copied())
        .find(|&op| name_of(op) == name)
        .ok_or_else(|| type_error(format!("kiln has no {what} op named {name:?}")))
}

/// The elementwise unary op `op` (`"exp"`, `"tanh"`, `"not"`, ...).
#[pyfunction]
fn unary(py: Python<'_>, op: &str, x: Var) -> PyResult<Var> {
    let op = by_name(&UnaryOp::ALL, op, "unary", UnaryOp::name)?;
    built(py, || x.v.unary(op))
}

/// The elementwise binary op `op` (`"add"`, `"lt"`, `"maximum"`, ...) of `a` and `b`
/// (broadcast, numpy's rules); `b op a` where `reflected` (Python's `__radd__`).
#[pyfunction]
#[pyo3(signature = (op, a, b, reflected=false))]
fn binary(
    py: Python<'_>,
    op: &str,
    a: Var,
    b: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Var> {
    let op = by_name(&BinaryOp::ALL, op, "binary", BinaryOp::name)?;
    let b = operand(py, b, &a.v)?;
    built(py, || match reflected {
        false => a.v.binary(op, &b),
        true => b.binary(op, &a.v),
    })
}

/// The reduction `op` (`"sum"`, `"mean"`, `"argmax"`, ...) over `axes` (None: every axis).
#[pyfunction]
#[pyo3(signature = (op, x, axes=None, keepdims=false))]
fn reduce(
    py: Python<'_>,
    op: &str,
    x: Var,
    axes: Option<Vec<i64>>,
    keepdims: bool,
) -> PyResult<Var> {
    let op = by_name(&ReduceOp::ALL, op, "reduction", ReduceOp::name)?;
    built(py, || x.v.reduce(op, axes.as_deref(), keepdims))
}

/// The elements converted to `dtype`.
#[pyfunction]
fn cast(py: Python<'_>, x: Var, dtype: &Bound<'_, PyAny>) -> PyResult<Var> {
    let d = convert::dtype(py, dtype)?;
    built(py, || x.v.cast(d))
}

/// numpy's `matmul`.
#[pyfunction]
fn matmul(py: Python<'_>, a: Var, b: &Bound<'_, PyAny>) -> PyResult<Var> {
    let b = operand(py, b, &a.v)?;
    built(py, || a.v.matmul(&b))
}

/// Reshape; one entry may be -1.
#[pyfunction]
fn reshape(py: Python<'_>, x: Var, shape: Vec<i64>) -> PyResult<Var> {
    built(py, || x.v.reshape(&shape))
}

/// Permutes the axes (negative counts from the end).
#[pyfunction]
fn transpose(py: Python<'_>, x: Var, perm: Vec<i64>) -> PyResult<Var> {
    built(py, || x.v.transpose(&perm))
}

/// numpy's `broadcast_to`.
#[pyfunction]
fn broadcast_to(py: Python<'_>, x: Var, shape: Vec<i64>) -> PyResult<Var> {
    built(py, || x.v.broadcast_to(&shape))
}

/// Inserts size-1 dims at `axes` (positions in the result).
#[pyfunction]
fn expand_dims(py: Python<'_>, x: Var, axes: Vec<i64>) -> PyResult<Var> {
    built(py, || x.v.expand_dims(&axes))
}

/// Removes size-1 dims (`None`: every dim known to be 1).
#[pyfunction]
#[pyo3(signature = (x, axes=None))]
fn squeeze(py: Python<'_>, x: Var, axes: Option<Vec<i64>>) -> PyResult<Var> {
    built(py, || x.v.squeeze(axes.as_deref()))
}

/// numpy basic slicing: `(start, stop, step)` per leading axis, `None` for an omitted bound.
#[pyfunction]
fn slice(py: Python<'_>, x: Var, ranges: Vec<(Option<i64>, Option<i64>, i64)>) -> PyResult<Var> {
    built(py, || x.v.slice(&ranges))
}

/// numpy's `take` along `axis`.
#[pyfunction]
fn take(py: Python<'_>, x: Var, indices: &Bound<'_, PyAny>, axis: i64) -> PyResult<Var> {
    let i = operand(py, indices, &x.v)?;
    built(py, || x.v.take(&i, axis))
}

/// numpy's `take_along_axis`.
#[pyfunction]
fn take_along_axis(py: Python<'_>, x: Var, indices: &Bound<'_, PyAny>, axis: i64) -> PyResult<Var> {
    let i = operand(py, indices, &x.v)?;
    built(py, || x.v.take_along_axis(&i, axis))
}

/// numpy's `concatenate` along `axis`.
#[pyfunction]
fn concat(py: Python<'_>, xs: Vec<Var>, axis: i64) -> PyResult<Var> {
    if xs.is_empty() {
        return Err(type_error("concatenate needs at least one variable"));
    }
    let refs: Vec<&kiln::Var> = xs.iter().map(|x| &x.v).collect();
    built(py, || kiln::concat(&refs, axis))
}

/// `a` where `cond` is true, else `b` (numpy's `where`, Theano's `switch`).
#[pyfunction]
fn select(py: Python<'_>, cond: Var, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<Var> {
    // A number takes the dtype of the other branch, as in kiln's own `select`.
    let (a, b) = match (a.extract::<Var>(), b.extract::<Var>()) {
        (Ok(a), _) => {
            let b = operand(py, b, &a.v)?;
            (a.v, b)
        }
        (_, Ok(b)) => (operand(py, a, &b.v)?, b.v),
        _ => {
            let a = operand(py, a, &cond.v)?;
            (a.clone(), operand(py, b, &a)?)
        }
    };
    built(py, || kiln::select(&cond.v, &a, &b))
}

/// Sorting and running ops along one axis, by name.
#[pyfunction]
fn along(py: Python<'_>, op: &str, x: Var, axis: i64) -> PyResult<Var> {
    let f: fn(&kiln::Var, i64) -> kiln::Var = match op {
        "cumsum" => kiln::Var::cumsum,
        "cumprod" => kiln::Var::cumprod,
        "sort" => kiln::Var::sort,
        "argsort" => kiln::Var::argsort,
        "sort_descending" => kiln::Var::sort_descending,
        "argsort_descending" => kiln::Var::argsort_descending,
        "softmax" => kiln::nn::softmax,
        "log_softmax" => kiln::nn::log_softmax,
        _ => {
            return Err(type_error(format!(
                "kiln has no op along an axis named {op:?}"
            )))
        }
    };
    built(py, || f(&x.v, axis))
}

/// One-hot rows of the integer indices `x`.
#[pyfunction]
fn one_hot(py: Python<'_>, x: Var, depth: i64, dtype: &Bound<'_, PyAny>) -> PyResult<Var> {
    let d = convert::dtype(py, dtype)?;
    built(py, || x.v.one_hot(depth, d))
}

/// The `k` largest elements of the last axis and their positions.
#[pyfunction]
fn topk(py: Python<'_>, x: Var, k: i64) -> PyResult<(Var, Var)> {
    let (values, positions) = at_caller(py, || x.v.topk(k));
    Ok((Var::checked(values)?, Var::checked(positions)?))
}

/// An array of `dtype` and `shape` filled with `value`.
#[pyfunction]
fn full(py: Python<'_>, shape: Vec<i64>, value: f64, dtype: &Bound<'_, PyAny>) -> PyResult<Var> {
    let d = convert::dtype(py, dtype)?;
    built(py, || GRAPH.full(d, &shape, value))
}

/// numpy's `arange` in `dtype`.
#[pyfunction]
fn arange(
    py: Python<'_>,
    start: f64,
    stop: f64,
    step: f64,
    dtype: &Bound<'_, PyAny>,
) -> PyResult<Var> {
    let d = convert::dtype(py, dtype)?;
    built(py, || GRAPH.arange(start, stop, step, d))
}

/// `kiln::nn`'s cross-entropy of `logits` against integer `targets` (the mean).
#[pyfunction]
fn cross_entropy(py: Python<'_>, logits: Var, targets: Var) -> PyResult<Var> {
    built(py, || kiln::nn::cross_entropy(&logits.v, &targets.v))
}

/// `kiln::nn`'s layer norm over the last axis.
#[pyfunction]
fn layer_norm(py: Python<'_>, x: Var, gain: Var, bias: Var, eps: f64) -> PyResult<Var> {
    built(py, || kiln::nn::layer_norm(&x.v, &gain.v, &bias.v, eps))
}

/// `kiln::nn`'s GELU.
#[pyfunction]
fn gelu(py: Python<'_>, x: Var) -> PyResult<Var> {
    built(py, || kiln::nn::gelu(&x.v))
}

/// `kiln::nn`'s attention of `q` over `k` and `v`.
#[pyfunction]
fn attention(py: Python<'_>, q: Var, k: Var, v: Var, causal: bool) -> PyResult<Var> {
    built(py, || kiln::nn::attention(&q.v, &k.v, &v.v, causal))
}

/// The gradients of the 0-d `cost` with respect to each of `wrt`.
#[pyfunction]
fn grad(py: Python<'_>, cost: Var, wrt: Vec<Var>) -> PyResult<Vec<Var>> {
    let refs: Vec<&kiln::Var> = wrt.iter().map(|w| &w.v).collect();
    let gs = at_caller(py, || kiln::grad(&cost.v, &refs)).map_err(to_py)?;
    gs.into_iter().map(Var::checked).collect()
}

/// The names of kiln's unary, binary and reduction ops, for the Python layer's functions.
#[pyfunction]
fn op_names() -> (Vec<&'static str>, Vec<&'static str>, Vec<&'static str>) {
    (
        UnaryOp::ALL.iter().map(|o| o.name()).collect(),
        BinaryOp::ALL.iter().map(|o| o.name()).collect(),
        ReduceOp::ALL.iter().map(|o| o.name()).collect(),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(cast, m)?)?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(reshape, m)?)?;
    m.add_function(wrap_pyfunction!(transpose, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast_to, m)?)?;
    m.add_function(wrap_pyfunction!(expand_dims, m)?)?;
    m.add_function(wrap_pyfunction!(squeeze, m)?)?;
    m.add_function(wrap_pyfunction!(slice, m)?)?;
    m.add_function(wrap_pyfunction!(take, m)?)?;
    m.add_function(wrap_pyfunction!(take_along_axis, m)?)?;
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    m.add_function(wrap_pyfunction!(along, m)?)?;
    m.add_function(wrap_pyfunction!(one_hot, m)?)?;
    m.add_function(wrap_pyfunction!(topk, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(gelu, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(grad, m)?)?;
    m.add_function(wrap_pyfunction!(op_names, m)?)?;
    Ok(())
}
