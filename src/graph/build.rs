//! The pleasant way to build graphs: arithmetic operators and methods on `Var`.
//!
//! Every builder is `#[track_caller]`, so a type error names the line of the user's code that
//! built the bad node. Ops whose parameters depend on the input's rank (negative axes) are
//! normalized here, against the input type, so equal ops compare equal.
//!
//! Every shape, size, axis and count a builder takes is an i64, numpy's int (one integer type
//! for all of them: docs/reference/semantics.md); a negative size poisons the result with an
//! error naming the builder, and the IR's attributes hold the checked sizes as `usize`.

use super::{Graph, Var, VarKind};
use crate::error::{Error, Result, SourceLoc};
use crate::ir::types::{normalize_axes, normalize_axis, size, sizes};
use crate::ir::{BinaryOp, DType, Element, F64Bits, Op, RandomDist, ReduceOp, TensorType, UnaryOp};
use crate::tensor::Tensor;
use ndarray::ArrayD;
use std::ops;

/// Anything that can stand as an operand next to a `Var`: another `Var`, a plain number (which
/// becomes a 0-d constant of the other operand's dtype) or an ndarray (a constant of its own
/// dtype).
pub trait Operand {
    /// This operand as a variable of `like`'s graph. A number that is not a value of
    /// `like`'s dtype (a fraction for an integer dtype, say) gives a poisoned variable.
    #[track_caller]
    fn into_var(self, like: &Var) -> Var;
}

impl Operand for Var {
    fn into_var(self, _: &Var) -> Var {
        self
    }
}

impl Operand for &Var {
    fn into_var(self, _: &Var) -> Var {
        self.clone()
    }
}

/// A literal number in `dtype` (docs/reference/semantics.md): integers must fit the dtype exactly (a
/// fraction, a value out of range or an integer a float type cannot hold is an error, never a
/// silent truncation); a float literal is rounded to a float dtype, and one beyond its range is
/// an error. `int` is the literal when it was written as an integer.
fn literal(dtype: DType, int: Option<i64>, float: f64) -> Result<Tensor, String> {
    let shown = int.map_or_else(|| format!("{float:?}"), |i| i.to_string());
    let integral = float.fract() == 0.0;
    let cast = |to: &str| {
        format!("the literal {shown} is not a {dtype} value: cast the other operand first (`.cast({to})`) or write a {dtype} literal")
    };
    match dtype {
        DType::Bool => match int.map_or(float, |i| i as f64) {
            0.0 => Ok(Tensor::scalar(false)),
            1.0 => Ok(Tensor::scalar(true)),
            _ => Err(format!(
                "the literal {shown} is not a bool value (only 0 and 1 are)"
            )),
        },
        DType::I32 => {
            let v = match int {
                Some(i) => i32::try_from(i).ok(),
                None if integral && float >= i32::MIN as f64 && float <= i32::MAX as f64 => {
                    Some(float as i32)
                }
                None => None,
            };
            v.map(Tensor::scalar).ok_or_else(|| {
                cast(if integral && float.is_finite() { "kiln::i64" } else { "kiln::f64" })
            })
        }
        DType::I64 => {
            let v = match int {
                Some(i) => Some(i),
                // 2^63 is the first float above i64's range.
                None if integral && float >= -(2f64.powi(63)) && float < 2f64.powi(63) => {
                    Some(float as i64)
                }
                None => None,
            };
            v.map(Tensor::scalar).ok_or_else(|| cast("kiln::f64"))
        }
        DType::F32 => match int {
            Some(i) if (i as f32) as i64 != i || (i as f32) as f64 != i as f64 => {
                Err(cast("kiln::f64"))
            }
            Some(i) => Ok(Tensor::scalar(i as f32)),
            None if float.is_finite() && (float as f32).is_infinite() => Err(cast("kiln::f64")),
            None => Ok(Tensor::scalar(float as f32)),
        },
        DType::F64 => match int {
            Some(i) if (i as f64) as i64 != i || i == i64::MAX => Err(format!(
                "the literal {shown} is not exactly a f64 value: write it as a float or use an i64 operand"
            )),
            Some(i) => Ok(Tensor::scalar(i as f64)),
            None => Ok(Tensor::scalar(float)),
        },
        DType::F16 | DType::BF16 => {
            let v = int.map_or(float, |i| i as f64);
            let r = crate::ir::round_to(dtype, v);
            match int {
                Some(i) if r != v || i.unsigned_abs() > 1 << 53 => Err(cast("kiln::f32")),
                None if v.is_finite() && r.is_infinite() => Err(cast("kiln::f32")),
                _ => Ok(Tensor::full(dtype, &[], v)),
            }
        }
    }
}

macro_rules! number_operand {
    ($($t:ty => $int:expr),*) => {$(
        impl Operand for $t {
            #[allow(clippy::redundant_closure_call)]
            #[track_caller]
            fn into_var(self, like: &Var) -> Var {
                match literal(like.dtype(), ($int)(self), self as f64) {
                    Ok(t) => like.graph.constant(t),
                    Err(msg) => like.graph.add_var(super::VarData {
                        ty: TensorType::scalar(like.dtype()),
                        name: None,
                        kind: VarKind::Poisoned(Error::Type {
                            msg,
                            loc: Some(SourceLoc::caller()),
                        }),
                    }),
                }
            }
        }
    )*};
}
number_operand!(f64 => |_| None, f32 => |_| None, i32 => |x| Some(x as i64), i64 => Some);

impl<T: Element> Operand for ArrayD<T>
where
    ArrayD<T>: Into<Tensor>,
{
    fn into_var(self, like: &Var) -> Var {
        like.graph.constant(self)
    }
}

impl<T: Element> Operand for &ArrayD<T>
where
    ArrayD<T>: Into<Tensor>,
{
    fn into_var(self, like: &Var) -> Var {
        like.graph.constant(self.clone())
    }
}

impl Var {
    pub(super) fn apply1(&self, op: Op, others: &[&Var], loc: SourceLoc) -> Var {
        let mut inputs = vec![self];
        inputs.extend_from_slice(others);
        self.graph.apply_at(op, &inputs, loc).swap_remove(0)
    }

    /// Builds an op whose parameters depend on this variable's type; a failure to build the
    /// parameters poisons the result like a type error does.
    pub(crate) fn apply_with(
        &self,
        loc: SourceLoc,
        make: impl FnOnce(&TensorType) -> Result<Op, String>,
    ) -> Var {
        if let VarKind::Poisoned(_) = self.kind() {
            return self.clone();
        }
        match make(&self.ty()) {
            Ok(op) => self.apply1(op, &[], loc),
            Err(msg) => self.graph.add_var(super::VarData {
                ty: self.ty(),
                name: None,
                kind: VarKind::Poisoned(Error::Type {
                    msg,
                    loc: Some(loc),
                }),
            }),
        }
    }

    /// The elementwise unary `op` of this variable; a type error poisons the result.
    #[track_caller]
    pub fn unary(&self, op: UnaryOp) -> Var {
        self.apply1(Op::Unary(op), &[], SourceLoc::caller())
    }

    /// The elementwise binary `op` of this variable and `other`, broadcast (numpy rules); a
    /// type error poisons the result.
    #[track_caller]
    pub fn binary(&self, op: BinaryOp, other: impl Operand) -> Var {
        let o = other.into_var(self);
        self.apply1(Op::Binary(op), &[&o], SourceLoc::caller())
    }

    /// `binary` with the type error returned at once.
    #[track_caller]
    pub fn try_binary(&self, op: BinaryOp, other: impl Operand) -> Result<Var> {
        let v = self.binary(op, other);
        v.check()?;
        Ok(v)
    }

    /// `unary` with the type error returned at once.
    #[track_caller]
    pub fn try_unary(&self, op: UnaryOp) -> Result<Var> {
        let v = self.unary(op);
        v.check()?;
        Ok(v)
    }

    /// The elements converted to `to`.
    #[track_caller]
    pub fn cast(&self, to: DType) -> Var {
        self.apply1(Op::Cast { to }, &[], SourceLoc::caller())
    }

    /// A reduction over `axes` (negative axes count from the end; `None` reduces every axis).
    #[track_caller]
    pub fn reduce(&self, op: ReduceOp, axes: Option<&[i64]>, keepdims: bool) -> Var {
        self.apply_with(SourceLoc::caller(), |t| {
            let axes = axes
                .map(|a| normalize_axes(a, t.rank()))
                .transpose()
                .map_err(|e| format!("{}: {e}", op.name()))?;
            Ok(Op::Reduce { op, axes, keepdims })
        })
    }

    /// numpy `matmul`: the matrix product of this and `other`, batch dims broadcast, a 1-D
    /// operand taken as a row (left) or a column (right). Halves are accumulated in f32, which
    /// is the result's dtype.
    #[track_caller]
    pub fn matmul(&self, other: &Var) -> Var {
        self.apply1(Op::MatMul, &[other], SourceLoc::caller())
    }

    /// Permutes the axes; output axis `i` is input axis `perm[i]` (negative counts from the
    /// end, as numpy's `transpose` takes it: `x.transpose(&[0, -1, -2])` swaps the last two).
    #[track_caller]
    pub fn transpose(&self, perm: &[i64]) -> Var {
        self.apply_with(SourceLoc::caller(), |t| {
            let perm = (perm.iter())
                .map(|&a| normalize_axis(a, t.rank()))
                .collect::<Result<Vec<usize>, String>>()
                .map_err(|e| format!("transpose: {e}"))?;
            Ok(Op::Transpose { perm })
        })
    }

    /// Reverses the axes (the matrix transpose for rank 2).
    #[track_caller]
    pub fn t(&self) -> Var {
        let perm: Vec<usize> = (0..self.rank()).rev().collect();
        self.apply1(Op::Transpose { perm }, &[], SourceLoc::caller())
    }

    /// Reshape; one entry may be -1.
    #[track_caller]
    pub fn reshape(&self, shape: &[i64]) -> Var {
        self.apply1(
            Op::Reshape {
                shape: shape.to_vec(),
            },
            &[],
            SourceLoc::caller(),
        )
    }

    /// numpy `broadcast_to`: this tensor stretched to `shape` (a view, no copy).
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[i64]) -> Var {
        self.apply_with(SourceLoc::caller(), |_| {
            let shape = sizes("broadcast_to", shape)?;
            Ok(Op::BroadcastTo { shape })
        })
    }

    /// Inserts size-1 dims at `axes` (positions in the result; negative counts from the end).
    #[track_caller]
    pub fn expand_dims(&self, axes: &[i64]) -> Var {
        self.apply_with(SourceLoc::caller(), |t| {
            let axes = normalize_axes(axes, t.rank() + axes.len())
                .map_err(|e| format!("expand_dims: {e}"))?;
            Ok(Op::ExpandDims { axes })
        })
    }

    /// Removes the size-1 dims at `axes` (`None`: every dim known to be 1).
    #[track_caller]
    pub fn squeeze(&self, axes: Option<&[i64]>) -> Var {
        self.apply_with(SourceLoc::caller(), |t| {
            let axes = match axes {
                Some(a) => normalize_axes(a, t.rank()).map_err(|e| format!("squeeze: {e}"))?,
                None => (0..t.rank()).filter(|&i| t.shape[i] == Some(1)).collect(),
            };
            Ok(Op::Squeeze { axes })
        })
    }

    /// numpy `take`: the elements at the positions `indices` (an i32 or i64 tensor of any
    /// shape; negative counts from the end) gives along `axis` (negative counts from the end).
    /// The result has this tensor's dims before `axis`, the indices' dims, then its dims after
    /// `axis`; an embedding lookup is `table.take(&ids, 0)`. Its gradient is a `scatter_add`
    /// into zeros. An index out of range is an error when the function runs.
    #[track_caller]
    pub fn take(&self, indices: &Var, axis: i64) -> Var {
        let loc = SourceLoc::caller();
        match normalize_axis(axis, self.rank()) {
            Ok(axis) => self.apply1(Op::Take { axis }, &[indices], loc),
            Err(e) => self.apply_with(loc, |_| Err(format!("take: {e}"))),
        }
    }

    /// numpy `cumsum` along `axis` (negative counts from the end): running sums, added in
    /// order; the dtype is `sum`'s (bool gives i64).
    #[track_caller]
    pub fn cumsum(&self, axis: i64) -> Var {
        let loc = SourceLoc::caller();
        self.apply_with(loc, |t| {
            let axis = normalize_axis(axis, t.rank()).map_err(|e| format!("cumsum: {e}"))?;
            Ok(Op::Cumsum { axis })
        })
    }

    /// A one-hot encoding of these integer indices (JAX's `one_hot`): shape `self.shape +
    /// [depth]`, `dtype`, 1 where the last index equals the index and 0 elsewhere; an index
    /// outside `0..depth` gives a row of zeros.
    #[track_caller]
    pub fn one_hot(&self, depth: i64, dtype: DType) -> Var {
        self.apply_with(SourceLoc::caller(), |_| {
            let depth = size("one_hot: depth", depth)?;
            Ok(Op::OneHot { depth, dtype })
        })
    }

    /// numpy basic slicing of the leading axes: `(start, stop, step)` per axis, `None` for an
    /// omitted bound.
    #[track_caller]
    pub fn slice(&self, ranges: &[(Option<i64>, Option<i64>, i64)]) -> Var {
        // Omitted bounds are the infinities that clamp to where numpy starts and stops.
        let (lo, hi) = (i64::MIN, i64::MAX);
        let op = Op::Slice {
            starts: ranges
                .iter()
                .map(|&(s, _, st)| s.unwrap_or(if st > 0 { lo } else { hi }))
                .collect(),
            stops: ranges
                .iter()
                .map(|&(_, e, st)| e.unwrap_or(if st > 0 { hi } else { lo }))
                .collect(),
            steps: ranges.iter().map(|r| r.2).collect(),
        };
        self.apply1(op, &[], SourceLoc::caller())
    }
}

macro_rules! unary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Var {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` ([`UnaryOp::", stringify!($op),
                "`]); a type error poisons the result.")]
            #[track_caller]
            pub fn $name(&self) -> Var {
                self.apply1(Op::Unary(UnaryOp::$op), &[], SourceLoc::caller())
            }
        )*}
    };
}
unary_methods!(
    exp => Exp, log => Log, log1p => Log1p, expm1 => Expm1, sqrt => Sqrt, rsqrt => Rsqrt,
    sin => Sin, cos => Cos, tan => Tan, tanh => Tanh, sigmoid => Sigmoid, erf => Erf,
    abs => Abs, sign => Sign, floor => Floor, ceil => Ceil, round => Round, square => Square,
    reciprocal => Reciprocal, relu => Relu, logical_not => Not,
);

macro_rules! binary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Var {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` ([`BinaryOp::", stringify!($op),
                "`]) of this and `other`, broadcast (numpy rules); a type error poisons the \
                result.")]
            #[track_caller]
            pub fn $name(&self, other: impl Operand) -> Var {
                let o = other.into_var(self);
                self.apply1(Op::Binary(BinaryOp::$op), &[&o], SourceLoc::caller())
            }
        )*}
    };
}
binary_methods!(
    pow => Pow, maximum => Maximum, minimum => Minimum, floordiv => FloorDiv, modulo => Mod,
    lt => Lt, le => Le, gt => Gt, ge => Ge, eq => Eq, ne => Ne, and => And, or => Or,
);

macro_rules! reduce_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Var {$(
            /// Reduction over `axes` (negative axes count from the end; `None`: all axes).
            #[track_caller]
            pub fn $name(&self, axes: Option<&[i64]>, keepdims: bool) -> Var {
                self.reduce(ReduceOp::$op, axes, keepdims)
            }
        )*}
    };
}
reduce_methods!(sum => Sum, prod => Prod, max => Max, min => Min, mean => Mean, all => All, any => Any);

impl Var {
    /// Index of the largest element along `axis` (`None`: of the flattened tensor).
    #[track_caller]
    pub fn argmax(&self, axis: Option<i64>, keepdims: bool) -> Var {
        self.reduce(
            ReduceOp::ArgMax,
            axis.as_ref().map(std::slice::from_ref),
            keepdims,
        )
    }

    /// Index of the smallest element along `axis` (`None`: of the flattened tensor).
    #[track_caller]
    pub fn argmin(&self, axis: Option<i64>, keepdims: bool) -> Var {
        self.reduce(
            ReduceOp::ArgMin,
            axis.as_ref().map(std::slice::from_ref),
            keepdims,
        )
    }
}

/// numpy `where`: `cond ? a : b` elementwise, broadcasting all three.
#[track_caller]
pub fn select(cond: &Var, a: impl Operand, b: impl Operand) -> Var {
    let a = a.into_var(cond);
    let b = b.into_var(&a);
    let a = if a.is_constant() && a.rank() == 0 && a.dtype() != b.dtype() {
        a.cast(b.dtype())
    } else {
        a
    };
    cond.apply1(Op::Select, &[&a, &b], SourceLoc::caller())
}

/// numpy `add.at(x.copy(), ...)` along `axis`: `x` with `updates` added at the positions
/// `indices` (i32 or i64; negative counts from the end) gives along `axis` (negative counts from
/// the end). `updates` has the shape `x.take(indices, axis)` has; repeated positions add up.
/// The gradient of `take`; its own gradients are `g` for `x` and `g.take(indices, axis)` for
/// `updates`. An index out of range is an error when the function runs.
#[track_caller]
pub fn scatter_add(x: &Var, indices: &Var, updates: &Var, axis: i64) -> Var {
    let loc = SourceLoc::caller();
    match normalize_axis(axis, x.rank()) {
        Ok(axis) => x.apply1(Op::ScatterAdd { axis }, &[indices, updates], loc),
        Err(e) => x.apply_with(loc, |_| Err(format!("scatter_add: {e}"))),
    }
}

/// Joins tensors along `axis` (negative counts from the end).
#[track_caller]
pub fn concat(inputs: &[&Var], axis: i64) -> Var {
    let loc = SourceLoc::caller();
    let Some(first) = inputs.first() else {
        let g = Graph::new();
        return g.add_var(super::VarData {
            ty: TensorType::scalar(DType::F32),
            name: None,
            kind: VarKind::Poisoned(Error::Type {
                msg: "concat takes at least one input".into(),
                loc: Some(loc),
            }),
        });
    };
    match normalize_axis(axis, first.rank()) {
        Ok(axis) => first
            .graph
            .apply_at(Op::Concat { axis }, inputs, loc)
            .swap_remove(0),
        Err(e) => first.apply_with(loc, |_| Err(format!("concat: {e}"))),
    }
}

impl Graph {
    /// An array of zeros of `dtype` and `shape`.
    #[track_caller]
    pub fn zeros(&self, dtype: DType, shape: &[i64]) -> Var {
        self.made("zeros", shape, dtype, SourceLoc::caller(), |shape| {
            Op::Zeros { shape, dtype }
        })
    }

    /// An array of ones of `dtype` and `shape`.
    #[track_caller]
    pub fn ones(&self, dtype: DType, shape: &[i64]) -> Var {
        self.made("ones", shape, dtype, SourceLoc::caller(), |shape| {
            Op::Ones { shape, dtype }
        })
    }

    /// An array of `dtype` and `shape` with every element `value`.
    #[track_caller]
    pub fn full(&self, dtype: DType, shape: &[i64], value: f64) -> Var {
        let value = F64Bits(value);
        self.made("full", shape, dtype, SourceLoc::caller(), |shape| {
            Op::Full {
                shape,
                dtype,
                value,
            }
        })
    }

    /// The op `make` builds from `shape` once its sizes are checked, applied to no inputs; a
    /// negative size poisons the result (a `dtype` tensor of `shape`'s rank) with an error at
    /// `loc` that names `what`.
    fn made(
        &self,
        what: &str,
        shape: &[i64],
        dtype: DType,
        loc: SourceLoc,
        make: impl FnOnce(Vec<usize>) -> Op,
    ) -> Var {
        self.made_from(what, shape, dtype, loc, &[], make)
    }

    /// `made` with `inputs` (a random op's counter).
    fn made_from(
        &self,
        what: &str,
        shape: &[i64],
        dtype: DType,
        loc: SourceLoc,
        inputs: &[&Var],
        make: impl FnOnce(Vec<usize>) -> Op,
    ) -> Var {
        match sizes(what, shape) {
            Ok(shape) => self.apply_at(make(shape), inputs, loc).swap_remove(0),
            Err(msg) => self.add_var(super::VarData {
                ty: TensorType::new(dtype, vec![None; shape.len()]),
                name: None,
                kind: VarKind::Poisoned(Error::Type {
                    msg,
                    loc: Some(loc),
                }),
            }),
        }
    }

    /// Random numbers of `dist` from the counter-based stream of `seed` (see `kiln::random`).
    /// With a `counter` (a 0-d i64, typically a shared variable updated at each call), the
    /// numbers change with the counter; without one, every call gives the same numbers.
    #[track_caller]
    pub fn random(
        &self,
        dist: RandomDist,
        seed: u64,
        shape: &[i64],
        dtype: DType,
        counter: Option<&Var>,
    ) -> Var {
        let loc = SourceLoc::caller();
        let make = |shape| Op::Random {
            dist,
            seed,
            shape,
            dtype,
        };
        self.made_from(dist.name(), shape, dtype, loc, counter.as_slice(), make)
    }

    /// Uniform numbers in `[low, high)`.
    #[track_caller]
    pub fn uniform(&self, seed: u64, shape: &[i64], dtype: DType, low: f64, high: f64) -> Var {
        let dist = RandomDist::Uniform {
            low: F64Bits(low),
            high: F64Bits(high),
        };
        self.random(dist, seed, shape, dtype, None)
    }

    /// Normal numbers of mean `mean` and standard deviation `std`.
    #[track_caller]
    pub fn normal(&self, seed: u64, shape: &[i64], dtype: DType, mean: f64, std: f64) -> Var {
        let dist = RandomDist::Normal {
            mean: F64Bits(mean),
            std: F64Bits(std),
        };
        self.random(dist, seed, shape, dtype, None)
    }

    /// 1 (true) with probability `p`, else 0 (false).
    #[track_caller]
    pub fn bernoulli(&self, seed: u64, shape: &[i64], dtype: DType, p: f64) -> Var {
        let dist = RandomDist::Bernoulli { p: F64Bits(p) };
        self.random(dist, seed, shape, dtype, None)
    }

    /// numpy `arange`: `start, start + step, ...` up to but not including `stop`, in `dtype`.
    #[track_caller]
    pub fn arange(&self, start: f64, stop: f64, step: f64, dtype: DType) -> Var {
        let op = Op::Arange {
            start: F64Bits(start),
            stop: F64Bits(stop),
            step: F64Bits(step),
            dtype,
        };
        self.apply_at(op, &[], SourceLoc::caller()).swap_remove(0)
    }
}

// The arithmetic operators, for `Var` and `&Var` on the left and any operand on the right, and
// for plain numbers on the left. Only one float type (f64) and one integer type (i64) take a
// `Var` on the right, so that unsuffixed literals (`1.5 - &x`) infer without annotations; the
// number still adopts the `Var`'s dtype.
macro_rules! operator {
    ($tr:ident, $method:ident, $op:ident) => {
        impl<T: Operand> ops::$tr<T> for &Var {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: T) -> Var {
                let r = rhs.into_var(self);
                self.apply1(Op::Binary(BinaryOp::$op), &[&r], SourceLoc::caller())
            }
        }
        impl<T: Operand> ops::$tr<T> for Var {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: T) -> Var {
                let r = rhs.into_var(&self);
                self.apply1(Op::Binary(BinaryOp::$op), &[&r], SourceLoc::caller())
            }
        }
        impl ops::$tr<&Var> for f64 {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: &Var) -> Var {
                let l = self.into_var(rhs);
                l.apply1(Op::Binary(BinaryOp::$op), &[rhs], SourceLoc::caller())
            }
        }
        impl ops::$tr<Var> for f64 {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: Var) -> Var {
                let l = self.into_var(&rhs);
                l.apply1(Op::Binary(BinaryOp::$op), &[&rhs], SourceLoc::caller())
            }
        }
        impl ops::$tr<&Var> for i64 {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: &Var) -> Var {
                let l = self.into_var(rhs);
                l.apply1(Op::Binary(BinaryOp::$op), &[rhs], SourceLoc::caller())
            }
        }
    };
}
operator!(Add, add, Add);
operator!(Sub, sub, Sub);
operator!(Mul, mul, Mul);
operator!(Div, div, Div);
operator!(Rem, rem, Mod);

impl ops::Neg for &Var {
    type Output = Var;
    #[track_caller]
    fn neg(self) -> Var {
        self.apply1(Op::Unary(UnaryOp::Neg), &[], SourceLoc::caller())
    }
}

impl ops::Neg for Var {
    type Output = Var;
    #[track_caller]
    fn neg(self) -> Var {
        self.apply1(Op::Unary(UnaryOp::Neg), &[], SourceLoc::caller())
    }
}

impl ops::Not for &Var {
    type Output = Var;
    #[track_caller]
    fn not(self) -> Var {
        self.apply1(Op::Unary(UnaryOp::Not), &[], SourceLoc::caller())
    }
}
