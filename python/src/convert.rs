//! numpy arrays and dtypes to kiln's and back: views borrowed in, owned arrays handed out,
//! neither copied.

use crate::errors::type_error;
use kiln::{DType, Tensor, TensorRef};
use numpy::{PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// A kiln dtype from what Python calls one: a numpy dtype, a numpy scalar type
/// (`np.float32`), or its name (`"float32"`; kiln's `"f32"` too).
pub fn dtype(py: Python<'_>, spec: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(name) = spec.extract::<String>() {
        if let Ok(d) = name.parse::<DType>() {
            return Ok(d);
        }
    }
    let np = py.import("numpy")?;
    let name: String = match np.call_method1("dtype", (spec,)) {
        Ok(d) => d.getattr("name")?.extract()?,
        Err(_) => return Err(type_error(format!("{spec} is not a dtype"))),
    };
    from_numpy_name(&name)
        .ok_or_else(|| type_error(format!("kiln has no dtype for numpy's {name}")))
}

/// kiln's dtype for numpy's dtype name.
fn from_numpy_name(name: &str) -> Option<DType> {
    Some(match name {
        "bool" => DType::Bool,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float32" => DType::F32,
        "float64" => DType::F64,
        "float16" => DType::F16,
        _ => return None,
    })
}

/// numpy's name for a kiln dtype (`bfloat16` has none in numpy itself).
pub fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
    }
}

/// An array argument, borrowed from numpy for the length of a call.
pub enum Borrowed<'py> {
    Bool(PyReadonlyArrayDyn<'py, bool>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
}

impl Borrowed<'_> {
    /// The borrowed elements as kiln reads them (strides as numpy holds them).
    pub fn view(&self) -> TensorRef<'_> {
        match self {
            Borrowed::Bool(a) => TensorRef::Bool(a.as_array()),
            Borrowed::I32(a) => TensorRef::I32(a.as_array()),
            Borrowed::I64(a) => TensorRef::I64(a.as_array()),
            Borrowed::F32(a) => TensorRef::F32(a.as_array()),
            Borrowed::F64(a) => TensorRef::F64(a.as_array()),
        }
    }
}

/// `obj` as an array of `want` (`what` names it in errors): a numpy array of that dtype is
/// borrowed as it is; one of another dtype is converted only where numpy calls the cast safe
/// (no value changes: int32 to float64, float32 to float64), else refused; anything else (a
/// Python number, a list) goes through `numpy.asarray(obj, want)`, as numpy reads literals.
pub fn borrow<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    want: DType,
    what: &dyn Fn() -> String,
) -> PyResult<Borrowed<'py>> {
    // The common case first, and cheaply (a call's whole cost for small arrays): an array
    // of the dtype wanted, borrowed as it is.
    let exact = match want {
        DType::Bool => exact(obj).map(Borrowed::Bool),
        DType::I32 => exact(obj).map(Borrowed::I32),
        DType::I64 => exact(obj).map(Borrowed::I64),
        DType::F32 => exact(obj).map(Borrowed::F32),
        DType::F64 => exact(obj).map(Borrowed::F64),
        DType::F16 | DType::BF16 => None,
    };
    if let Some(b) = exact {
        return Ok(b);
    }
    let what = what();
    let np = py.import("numpy")?;
    let arr = match obj.cast::<numpy::PyUntypedArray>() {
        Ok(a) => {
            let have = a.dtype().to_string();
            if from_numpy_name(&have) == Some(want) {
                obj.clone()
            } else if np
                .call_method1("can_cast", (a.dtype(), numpy_name(want), "safe"))?
                .extract::<bool>()?
            {
                np.call_method1("asarray", (obj, numpy_name(want)))?
            } else {
                return Err(type_error(format!(
                    "{what} is {want}, and an array of {have} does not convert to it without \
                     changing values: convert it first (.astype(\"{}\"))",
                    numpy_name(want)
                )));
            }
        }
        Err(_) => np
            .call_method1("asarray", (obj, numpy_name(want)))
            .map_err(|e| type_error(format!("{what} is {want}: {obj} does not convert ({e})")))?,
    };
    Ok(match want {
        DType::Bool => Borrowed::Bool(arr.extract()?),
        DType::I32 => Borrowed::I32(arr.extract()?),
        DType::I64 => Borrowed::I64(arr.extract()?),
        DType::F32 => Borrowed::F32(arr.extract()?),
        DType::F64 => Borrowed::F64(arr.extract()?),
        DType::F16 | DType::BF16 => {
            return Err(type_error(format!(
                "{what} is {want}: halves are not yet taken from Python (pass float32 and cast)"
            )))
        }
    })
}

/// `obj` borrowed where it is a numpy array of `T` already.
fn exact<'py, T: numpy::Element>(obj: &Bound<'py, PyAny>) -> Option<PyReadonlyArrayDyn<'py, T>> {
    obj.cast::<PyArrayDyn<T>>().ok()?.try_readonly().ok()
}

/// An owned copy of `obj` (a numpy array or anything `numpy.asarray` takes) as a tensor, in
/// `want` where given (by `borrow`'s rule), else in the array's own dtype.
pub fn tensor(py: Python<'_>, obj: &Bound<'_, PyAny>, want: Option<DType>) -> PyResult<Tensor> {
    let (arr, d) = match want {
        Some(d) => (obj.clone(), d),
        None => {
            let arr = py.import("numpy")?.call_method1("asarray", (obj,))?;
            let name: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
            let d = from_numpy_name(&name)
                .ok_or_else(|| type_error(format!("kiln has no dtype for numpy's {name}")))?;
            (arr, d)
        }
    };
    Ok(match borrow(py, &arr, d, &|| "the value".to_string())? {
        Borrowed::Bool(a) => Tensor::Bool(a.as_array().to_owned()),
        Borrowed::I32(a) => Tensor::I32(a.as_array().to_owned()),
        Borrowed::I64(a) => Tensor::I64(a.as_array().to_owned()),
        Borrowed::F32(a) => Tensor::F32(a.as_array().to_owned()),
        Borrowed::F64(a) => Tensor::F64(a.as_array().to_owned()),
    })
}

/// A tensor handed to numpy: the array owns kiln's buffer, nothing is copied.
pub fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Py<PyAny>> {
    Ok(match t {
        Tensor::Bool(a) => PyArrayDyn::from_owned_array(py, a).into_any().unbind(),
        Tensor::I32(a) => PyArrayDyn::from_owned_array(py, a).into_any().unbind(),
        Tensor::I64(a) => PyArrayDyn::from_owned_array(py, a).into_any().unbind(),
        Tensor::F32(a) => PyArrayDyn::from_owned_array(py, a).into_any().unbind(),
        Tensor::F64(a) => PyArrayDyn::from_owned_array(py, a).into_any().unbind(),
        Tensor::F16(_) | Tensor::BF16(_) => {
            return Err(type_error(
                "results of f16 or bf16 are not yet handed to Python (cast them to float32)",
            ))
        }
    })
}
