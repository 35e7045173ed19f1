//! The built-in op set (docs/reference/text-form.md). An `Op` holds its parameters as fields; ops that do
//! the same thing compare and hash equal, which is what lets merging find duplicates.
//! Axes are stored normalized (non-negative, sorted) so that `[-1]` and `[1]` on a rank-2 input
//! are the same op.

use super::custom::CustomOpRef;
use super::types::TensorType;
use super::DType;
use crate::tensor::Tensor;
use std::hash::{Hash, Hasher};

/// An elementwise function of one operand (`Op::Unary`): the result has the operand's dtype
/// and shape. Only `Not` takes bool; the [`float_only`](UnaryOp::float_only) ones take f32 or
/// f64 only. No unary op takes a half (the graph API computes in f32 and rounds back).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`; integers wrap (the negation of the smallest integer is itself).
    Neg,
    /// `|x|`; integers wrap (the absolute value of the smallest integer is itself).
    Abs,
    /// -1, 0 or 1 by the sign of `x`; `sign(-0.0)` is 0.0 and NaN stays NaN (numpy `sign`).
    Sign,
    /// e^x.
    Exp,
    /// The natural logarithm.
    Log,
    /// log(1 + x), accurate near 0.
    Log1p,
    /// e^x - 1, accurate near 0.
    Expm1,
    /// The square root, correctly rounded.
    Sqrt,
    /// 1 / sqrt(x).
    Rsqrt,
    /// The sine.
    Sin,
    /// The cosine.
    Cos,
    /// The tangent.
    Tan,
    /// The hyperbolic tangent.
    Tanh,
    /// The logistic function 1 / (1 + e^-x).
    Sigmoid,
    /// The error function.
    Erf,
    /// Rounds down to an integer value; integers are unchanged.
    Floor,
    /// Rounds up to an integer value; integers are unchanged.
    Ceil,
    /// Rounds to the nearest integer value, half to even (numpy `round`); integers are
    /// unchanged.
    Round,
    /// `x * x`; integers wrap.
    Square,
    /// 1 / x.
    Reciprocal,
    /// max(x, 0); NaN stays NaN.
    Relu,
    /// Logical not of a bool operand (the only unary op on bool).
    Not,
}

/// An elementwise function of two operands (`Op::Binary`) of one dtype, broadcast together
/// (docs/reference/semantics.md). Comparisons give bool; the others keep the operands'
/// dtype. `And` and `Or` take bool only, comparisons any dtype, the rest numbers only; no
/// binary op takes a half.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`; integers wrap.
    Add,
    /// `a - b`; integers wrap.
    Sub,
    /// `a * b`; integers wrap.
    Mul,
    /// True division (numpy `true_divide`), floats only: integers use `FloorDiv`.
    Div,
    /// numpy `floor_divide`: the quotient rounded down. An integer division by 0 gives 0 and
    /// the smallest integer divided by -1 wraps.
    FloorDiv,
    /// numpy `power`. An integer to a negative power is 1/a^n truncated: 0 unless `a` is 1
    /// or -1.
    Pow,
    /// The larger operand; a NaN on either side propagates (numpy `maximum`).
    Maximum,
    /// The smaller operand; a NaN on either side propagates (numpy `minimum`).
    Minimum,
    /// numpy's remainder (`mod`), with the sign of the divisor; an integer modulo 0 gives 0.
    Mod,
    /// `a < b`, as bool.
    Lt,
    /// `a <= b`, as bool.
    Le,
    /// `a > b`, as bool.
    Gt,
    /// `a >= b`, as bool.
    Ge,
    /// `a == b`, as bool (NaN equals nothing).
    Eq,
    /// `a != b`, as bool (NaN differs from everything, itself included).
    Ne,
    /// Logical and of bool operands.
    And,
    /// Logical or of bool operands.
    Or,
}

/// What a reduction (`Op::Reduce`, `Op::FusedReduce`) computes over its axes. The result and
/// accumulator dtypes, starting values and summation order are defined once in
/// [`Reduction`](super::Reduction) (docs/reference/semantics.md, "Reductions").
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum, in numpy's pairwise order for floats; bool sums to i64; empty is 0.
    Sum,
    /// The product; bool gives i64; empty is 1.
    Prod,
    /// The largest element, NaN propagating; an empty axis is an error.
    Max,
    /// The smallest element, NaN propagating; an empty axis is an error.
    Min,
    /// The mean: the pairwise sum divided by the count; integers and bool give f64.
    Mean,
    /// The index (i64) of the first largest element along one axis (or over every element,
    /// flattened), NaN counting as largest; an empty axis is an error.
    ArgMax,
    /// The index (i64) of the first smallest element along one axis (or over every element,
    /// flattened), NaN counting as smallest; an empty axis is an error.
    ArgMin,
    /// Whether every element is nonzero (NaN counts as nonzero), as bool; empty is true.
    All,
    /// Whether any element is nonzero (NaN counts as nonzero), as bool; empty is false.
    Any,
}

/// An f64 parameter compared and hashed by its bits, so that ops holding one can be merged.
#[derive(Copy, Clone, Debug)]
pub struct F64Bits(pub f64);

impl PartialEq for F64Bits {
    fn eq(&self, o: &Self) -> bool {
        self.0.to_bits() == o.0.to_bits()
    }
}
impl Eq for F64Bits {}
impl Hash for F64Bits {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.to_bits().hash(h)
    }
}

/// A built-in op with its parameters. The inputs are the instruction's arguments, numbered
/// from 0 in the order the text form writes them; docs/reference/ops.md lists every op with
/// its dtypes, and type inference (`infer`) states each rule with the error it gives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// An elementwise function of one operand.
    Unary(UnaryOp),
    /// An elementwise function of two operands of one dtype, broadcast together.
    Binary(BinaryOp),
    /// `select(cond, then, else)`: numpy `where`. The condition is bool, the branches share a
    /// dtype (halves included), and all three broadcast together.
    Select,
    /// Converts every element to another dtype: floats to integers truncate toward zero and
    /// saturate, NaN becomes 0; to bool is `x != 0` (NaN is true); bool gives 0 or 1
    /// (docs/reference/semantics.md, "Casts").
    Cast {
        /// The dtype converted to.
        to: DType,
    },
    /// Reduction over `axes` (normalized, sorted; `None` means every axis).
    Reduce {
        /// What is computed over the reduced elements.
        op: ReduceOp,
        /// The axes reduced; `argmax` and `argmin` take one axis or `None` (the index is then
        /// into the flattened input, in row-major order).
        axes: Option<Vec<usize>>,
        /// Whether the reduced axes stay in the result with extent 1 (numpy's `keepdims`)
        /// rather than being dropped.
        keepdims: bool,
    },
    /// A view: output axis `i` is input axis `perm[i]`.
    Transpose {
        /// A permutation of the input's axes.
        perm: Vec<usize>,
    },
    /// A view when the input is contiguous. One entry may be -1.
    Reshape {
        /// The new shape, with the input's number of elements; its one `-1` entry, if any,
        /// stands for the extent that makes the count match.
        shape: Vec<i64>,
    },
    /// A view with zero strides on stretched dims.
    BroadcastTo {
        /// The target shape: the input's dims align on the right, and only those of extent 1
        /// (in the type) stretch.
        shape: Vec<usize>,
    },
    /// Inserts size-1 dims at `axes` (positions in the output, normalized, sorted).
    ExpandDims {
        /// Where the new dims are, counted in the output's axes.
        axes: Vec<usize>,
    },
    /// Removes the size-1 dims at `axes` (normalized, sorted).
    Squeeze {
        /// The axes removed; each must have extent 1.
        axes: Vec<usize>,
    },
    /// numpy `concatenate`: one or more inputs of one dtype and rank, joined along `axis`;
    /// their other dims must agree.
    Concat {
        /// The axis the inputs are joined along.
        axis: usize,
    },
    /// numpy `take`: the elements of input 0 at the positions input 1 (i32 or i64, any shape;
    /// negative counts from the end; out of range is an error) gives along `axis`. The result
    /// has input 0's dims before `axis`, then the indices' dims, then input 0's dims after it.
    Take {
        /// The axis of input 0 the indices pick along.
        axis: usize,
    },
    /// numpy `add.at` out of place: input 0 with the elements of input 2 added at the
    /// positions input 1 gives along `axis` (repeated positions add up, in index order);
    /// input 2 has the shape `take` gives for these inputs. The gradient of `take`.
    ScatterAdd {
        /// The axis of input 0 the indices pick along.
        axis: usize,
    },
    /// numpy `cumsum` along `axis`: each element the sum of those before it and itself, added
    /// in order (numpy's order, not a pairwise one); the dtype is `sum`'s (bool gives i64).
    Cumsum {
        /// The axis summed along.
        axis: usize,
    },
    /// numpy `take_along_axis`: input 1 (i32 or i64, the rank of input 0) picks, in each
    /// lane along `axis`, which of input 0's elements go there; the other dims broadcast
    /// together. The result has the broadcast dims and the indices' length along `axis`.
    TakeAlongAxis {
        /// The axis the indices pick along.
        axis: usize,
    },
    /// numpy's `x[.., indices, ..] = updates` on a copy (Theano's `set_subtensor` with integer
    /// indices): input 0 with the elements of input 2 written at the positions input 1 gives
    /// along `axis`. Input 2 has the shape `take` gives; where a position repeats, the last one
    /// in index order is kept.
    ScatterSet {
        /// The axis of input 0 the indices pick along.
        axis: usize,
    },
    /// numpy `cumprod` along `axis`: each element the product of those before it and itself,
    /// multiplied in order; the dtype is `prod`'s (bool gives i64).
    Cumprod {
        /// The axis multiplied along.
        axis: usize,
    },
    /// The gradient of `cumprod` with respect to its input, from the input (0) and the
    /// gradient of the output (1): exact where the input holds zeros, where dividing the output
    /// by the input would not be.
    CumprodGrad {
        /// The axis of the `cumprod` differentiated.
        axis: usize,
    },
    /// numpy `sort` along `axis` (stable; NaN sorts as the greatest value), largest first when
    /// `descending`, equal elements then still in index order.
    Sort {
        /// The axis sorted along.
        axis: usize,
        /// Largest first instead of smallest first.
        descending: bool,
    },
    /// numpy `argsort` along `axis` (stable, i64 positions), in the order `sort` gives.
    Argsort {
        /// The axis sorted along.
        axis: usize,
        /// Largest first instead of smallest first.
        descending: bool,
    },
    /// A 2-D convolution (cross-correlation, as in PyTorch and JAX) of input 0 (`[N, C, H, W]`)
    /// with the filters of input 1 (`[O, C / groups, KH, KW]`), giving `[N, O, OH, OW]`.
    Conv2d(super::window::Conv2d),
    /// The gradient of `conv2d` with respect to its image, from the output's gradient (0) and
    /// the filters (1); `image` is the image's height and width.
    Conv2dGradImage {
        /// The parameters of the convolution differentiated.
        conv: super::window::Conv2d,
        /// The image's height and width, which the output's shape alone does not fix.
        image: [usize; 2],
    },
    /// The gradient of `conv2d` with respect to its filters, from the image (0) and the output's
    /// gradient (1); `kernel` is the filters' height and width.
    Conv2dGradFilter {
        /// The parameters of the convolution differentiated.
        conv: super::window::Conv2d,
        /// The filters' height and width.
        kernel: [usize; 2],
    },
    /// Max or average pooling over the last two axes.
    Pool2d(super::window::Pool2d),
    /// The gradient of `pool2d` with respect to its input, from the input (0) and the
    /// output's gradient (1).
    Pool2dGrad(super::window::Pool2d),
    /// A one-hot encoding (JAX's `one_hot`): for integer indices of shape `s`, an array of
    /// shape `s + [depth]` and dtype `dtype`, 1 where the last index equals the index and 0
    /// elsewhere; an index outside `0..depth` gives a row of zeros.
    OneHot {
        /// The extent of the new last axis.
        depth: usize,
        /// The result's dtype.
        dtype: DType,
    },
    /// numpy basic slicing on the leading `starts.len()` axes. `i64::MIN` / `i64::MAX` are minus
    /// and plus infinity: an omitted start is MIN for a positive step and MAX for a negative one,
    /// an omitted stop the other way round (see `infer::slice_bounds`).
    Slice {
        /// The first index taken on each sliced axis (negative counts from the end; clamped).
        starts: Vec<i64>,
        /// The index each sliced axis stops before (negative counts from the end; clamped).
        stops: Vec<i64>,
        /// The stride on each sliced axis: nonzero, negative walking backwards.
        steps: Vec<i64>,
    },
    /// numpy `matmul`: 1-D and batched operands included.
    MatMul,
    /// A constant value.
    Const(Tensor),
    /// An array of zeros (false for bool); no inputs.
    Zeros {
        /// The result's shape.
        shape: Vec<usize>,
        /// The result's dtype.
        dtype: DType,
    },
    /// An array of ones (true for bool); no inputs.
    Ones {
        /// The result's shape.
        shape: Vec<usize>,
        /// The result's dtype.
        dtype: DType,
    },
    /// numpy `full`: an array of one value; no inputs.
    Full {
        /// The result's shape.
        shape: Vec<usize>,
        /// The result's dtype.
        dtype: DType,
        /// The value, converted to `dtype` as a cast converts (integers truncate, bool is
        /// `value != 0`).
        value: F64Bits,
    },
    /// numpy `arange`: the 1-D array `start, start + step, ...` of `ceil((stop - start) / step)`
    /// elements (none where that is not positive); no inputs. Not for bool or halves.
    Arange {
        /// The first value (finite).
        start: F64Bits,
        /// The end, excluded (finite).
        stop: F64Bits,
        /// The spacing (finite, nonzero; negative counts down).
        step: F64Bits,
        /// The result's dtype. Integers are made the numpy way, from `start` and
        /// `start + step` truncated: `arange(0.5, 5, 1.5)` as i64 is `[0, 2, 4]`.
        dtype: DType,
    },
    /// Random numbers from a counter-based stream (see `crate::random` for the layout). Takes
    /// no input, or one 0-d i64 `counter` mixed into the seed so that a shared counter updated
    /// at each call gives fresh numbers per call.
    Random {
        /// The distribution and its parameters.
        dist: RandomDist,
        /// The stream's key: every element is a pure function of it (and the counter) and
        /// the element's row-major index.
        seed: u64,
        /// The result's shape.
        shape: Vec<usize>,
        /// The result's dtype: f32 or f64 (bernoulli also bool and the integers).
        dtype: DType,
    },
    /// `ifelse %cond { then } else { otherwise }`: lazy, only the taken region runs. The
    /// instruction holds two regions whose yields give its results (see `Inst::regions`).
    IfElse,
    /// `scan %init.., %xs.. (%carry.., %x..) { body }`: a loop over the leading axis of the
    /// sequences `xs` (JAX's `lax.scan`, Theano's `scan`). The one region's parameters are the
    /// carries (typed as `init`) and one slice of each sequence; it yields the new carries,
    /// then one value per stacked output. Results: the last carries, then each yielded value
    /// stacked along a new leading axis (in the sequences' order, `reverse` or not). With
    /// `reverse`, the steps walk the sequences from their end.
    Scan {
        /// How many of the leading arguments are carries' initial values; the rest are the
        /// sequences (at least one).
        carries: usize,
        /// Walk the sequences from their end.
        reverse: bool,
    },
    /// An elementwise op whose body is a scalar program (a user lambda, or fused ops): its
    /// inputs broadcast together and each output register gives one output.
    Composite {
        /// The name messages give the op (`Op::display_name`): the lambda's name, or `fused`
        /// for ops the optimizer fused.
        name: String,
        /// The scalar program computed at each element; input `i` of the program is argument
        /// `i` of the instruction.
        program: std::sync::Arc<super::scalar::ScalarProgram>,
    },
    /// A reduction whose input is computed elementwise by a scalar program from its arguments
    /// (an elementwise producer fused into the reduction as its prologue), so the input is never
    /// stored whole.
    FusedReduce {
        /// What is computed over the reduced elements.
        op: ReduceOp,
        /// The axes reduced (normalized, sorted; `None` means every axis), as in `Reduce`.
        axes: Option<Vec<usize>>,
        /// Whether the reduced axes stay in the result with extent 1.
        keepdims: bool,
        /// The prologue: its first output, over the broadcast arguments, is what is reduced.
        program: std::sync::Arc<super::scalar::ScalarProgram>,
    },
    /// A user-defined op (see `custom`).
    Custom(CustomOpRef),
}

/// The distribution of a random op.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RandomDist {
    /// `low + (high - low) * u` for `u` uniform on `[0, 1)`; f32 or f64.
    Uniform {
        /// The lower bound (finite).
        low: F64Bits,
        /// The upper bound (finite, at least `low`).
        high: F64Bits,
    },
    /// `mean + std * z` for `z` standard normal (Box-Muller); f32 or f64.
    Normal {
        /// The mean (finite).
        mean: F64Bits,
        /// The standard deviation (finite, not negative).
        std: F64Bits,
    },
    /// 1 (true) with probability `p`, else 0 (false): `u < p` for `u` uniform on `[0, 1)`.
    Bernoulli {
        /// The probability of a 1, in `[0, 1]`.
        p: F64Bits,
    },
}

impl RandomDist {
    /// The op's name in the text form: `uniform`, `normal` or `bernoulli`.
    pub fn name(self) -> &'static str {
        match self {
            RandomDist::Uniform { .. } => "uniform",
            RandomDist::Normal { .. } => "normal",
            RandomDist::Bernoulli { .. } => "bernoulli",
        }
    }
}

impl UnaryOp {
    /// Every unary op, in declaration order.
    pub const ALL: [UnaryOp; 22] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Sign,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tan,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Square,
        UnaryOp::Reciprocal,
        UnaryOp::Relu,
        UnaryOp::Not,
    ];

    /// The op's name in the text form (`neg`, `log1p`, ...).
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Sign => "sign",
            Exp => "exp",
            Log => "log",
            Log1p => "log1p",
            Expm1 => "expm1",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Sin => "sin",
            Cos => "cos",
            Tan => "tan",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Erf => "erf",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Square => "square",
            Reciprocal => "reciprocal",
            Relu => "relu",
            Not => "not",
        }
    }

    /// Ops defined on floats only (the transcendentals, the roots and `reciprocal`); the
    /// roundings take integers too, which they leave unchanged.
    pub fn float_only(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Exp | Log
                | Log1p
                | Expm1
                | Sqrt
                | Rsqrt
                | Sin
                | Cos
                | Tan
                | Tanh
                | Sigmoid
                | Erf
                | Reciprocal
        )
    }

    /// Ops that cost many arithmetic ops an element (the transcendentals, and square roots):
    /// worth computing once rather than once per element of a broadcast.
    pub fn is_costly(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Exp | Log | Log1p | Expm1 | Sqrt | Rsqrt | Sin | Cos | Tan | Tanh | Sigmoid | Erf
        )
    }
}

impl BinaryOp {
    /// Every binary op, in declaration order.
    pub const ALL: [BinaryOp; 17] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::FloorDiv,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Mod,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::And,
        BinaryOp::Or,
    ];

    /// The op's name in the text form (`add`, `floordiv`, ...).
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            FloorDiv => "floordiv",
            Pow => "pow",
            Maximum => "maximum",
            Minimum => "minimum",
            Mod => "mod",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
            Eq => "eq",
            Ne => "ne",
            And => "and",
            Or => "or",
        }
    }

    /// `lt`, `le`, `gt`, `ge`, `eq` and `ne`: the ops whose result is bool whatever the
    /// operands' dtype.
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Lt | Le | Gt | Ge | Eq | Ne)
    }

    /// `and` and `or`: the ops that take bool operands only.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }
}

impl ReduceOp {
    /// The dtype of the reduction of values of `input` (docs/reference/semantics.md): `sum` and `prod`
    /// keep the dtype (bool sums to i64), `mean` of integers is f64, `argmax`/`argmin` give
    /// i64, `all`/`any` bool. Type inference, `perform` and every backend read this.
    pub fn result_dtype(self, input: DType) -> DType {
        match self {
            ReduceOp::Sum | ReduceOp::Prod if input == DType::Bool => DType::I64,
            ReduceOp::Mean if !input.is_float() => DType::F64,
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
            ReduceOp::All | ReduceOp::Any => DType::Bool,
            _ => input,
        }
    }

    /// Whether the reduction of an empty axis has a value (`sum` 0, `prod` 1, `all` true, ...);
    /// `max`, `min`, `argmax` and `argmin` of an empty axis are errors.
    pub fn has_identity(self) -> bool {
        !matches!(
            self,
            ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
        )
    }

    /// Every reduction, in declaration order.
    pub const ALL: [ReduceOp; 9] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Mean,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
        ReduceOp::All,
        ReduceOp::Any,
    ];

    /// The op's name in the text form (`sum`, `argmax`, ...).
    pub fn name(self) -> &'static str {
        use ReduceOp::*;
        match self {
            Sum => "sum",
            Prod => "prod",
            Max => "max",
            Min => "min",
            Mean => "mean",
            ArgMax => "argmax",
            ArgMin => "argmin",
            All => "all",
            Any => "any",
        }
    }
}

impl Op {
    /// The op's name in the text form.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Select => "select",
            Op::Cast { .. } => "cast",
            Op::Reduce { op, .. } => op.name(),
            Op::Transpose { .. } => "transpose",
            Op::Reshape { .. } => "reshape",
            Op::BroadcastTo { .. } => "broadcast_to",
            Op::ExpandDims { .. } => "expand_dims",
            Op::Squeeze { .. } => "squeeze",
            Op::Concat { .. } => "concat",
            Op::Take { .. } => "take",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::OneHot { .. } => "one_hot",
            Op::Cumsum { .. } => "cumsum",
            Op::TakeAlongAxis { .. } => "take_along_axis",
            Op::ScatterSet { .. } => "scatter_set",
            Op::Cumprod { .. } => "cumprod",
            Op::CumprodGrad { .. } => "cumprod_grad",
            Op::Sort { .. } => "sort",
            Op::Argsort { .. } => "argsort",
            Op::Conv2d(_) => "conv2d",
            Op::Conv2dGradImage { .. } => "conv2d_grad_image",
            Op::Conv2dGradFilter { .. } => "conv2d_grad_filter",
            Op::Pool2d(p) => p.kind.name(),
            Op::Pool2dGrad(p) => p.kind.grad_name(),
            Op::Slice { .. } => "slice",
            Op::MatMul => "matmul",
            Op::Const(_) => "const",
            Op::Zeros { .. } => "zeros",
            Op::Ones { .. } => "ones",
            Op::Full { .. } => "full",
            Op::Arange { .. } => "arange",
            Op::Random { dist, .. } => dist.name(),
            Op::IfElse => "ifelse",
            Op::Scan { .. } => "scan",
            Op::Composite { .. } => "composite",
            Op::FusedReduce { .. } => "fused_reduce",
            Op::Custom(_) => "custom",
        }
    }

    /// The name for messages: a custom op's own name, else the text-form name.
    pub fn display_name(&self) -> &str {
        match self {
            Op::Custom(c) => c.name(),
            Op::Composite { name, .. } => name,
            Op::FusedReduce { op, .. } => op.name(),
            _ => self.name(),
        }
    }

    /// Whether the op takes `f16` / `bf16` operands: ops that move, select or convert stored
    /// elements (exact on any dtype), `matmul` (it reads halves and accumulates in f32),
    /// regions and user ops. Every op that computes takes them only through a cast to f32.
    pub fn takes_halves(&self) -> bool {
        matches!(
            self,
            Op::Cast { .. }
                | Op::Select
                | Op::Transpose { .. }
                | Op::Reshape { .. }
                | Op::BroadcastTo { .. }
                | Op::ExpandDims { .. }
                | Op::Squeeze { .. }
                | Op::Concat { .. }
                | Op::Take { .. }
                | Op::TakeAlongAxis { .. }
                | Op::ScatterSet { .. }
                | Op::Sort { .. }
                | Op::Argsort { .. }
                | Op::Slice { .. }
                | Op::MatMul
                | Op::IfElse
                | Op::Scan { .. }
                | Op::Composite { .. }
                | Op::FusedReduce { .. }
                | Op::Custom(_)
        )
    }

    /// Number of inputs the op takes; `None` for a variable number (`concat`, `scan`, a random
    /// op's optional counter, a custom op without an exact count).
    pub fn arity(&self) -> Option<usize> {
        match self {
            Op::Unary(_) | Op::Cast { .. } | Op::Reduce { .. } => Some(1),
            Op::Transpose { .. } | Op::Reshape { .. } | Op::BroadcastTo { .. } => Some(1),
            Op::ExpandDims { .. } | Op::Squeeze { .. } | Op::Slice { .. } => Some(1),
            Op::Binary(_) | Op::MatMul | Op::Take { .. } => Some(2),
            Op::Select | Op::ScatterAdd { .. } | Op::ScatterSet { .. } => Some(3),
            Op::OneHot { .. } | Op::Cumsum { .. } | Op::Cumprod { .. } => Some(1),
            Op::Sort { .. } | Op::Argsort { .. } | Op::Pool2d(_) => Some(1),
            Op::TakeAlongAxis { .. } | Op::CumprodGrad { .. } | Op::Conv2d(_) => Some(2),
            Op::Conv2dGradImage { .. } | Op::Conv2dGradFilter { .. } | Op::Pool2dGrad(_) => Some(2),
            Op::Concat { .. } => None,
            Op::Const(_) | Op::Zeros { .. } | Op::Ones { .. } | Op::Full { .. } => Some(0),
            Op::Arange { .. } => Some(0),
            Op::Random { .. } | Op::Scan { .. } => None,
            Op::IfElse => Some(1),
            Op::Composite { program, .. } | Op::FusedReduce { program, .. } => {
                Some(program.input_dtypes().len())
            }
            Op::Custom(c) => match c.num_inputs() {
                super::custom::Arity::Exactly(n) => Some(n),
                _ => None,
            },
        }
    }

    /// Theano's `view_map`: for each output, the input it may alias. Views never copy in the
    /// reference interpreter's contract; the in-place pass follows them transitively.
    pub fn view_map(&self) -> Vec<(usize, usize)> {
        match self {
            Op::Custom(c) => c.view_map(),
            Op::Transpose { .. }
            | Op::Reshape { .. }
            | Op::BroadcastTo { .. }
            | Op::ExpandDims { .. }
            | Op::Squeeze { .. }
            | Op::Slice { .. } => vec![(0, 0)],
            _ => vec![],
        }
    }

    /// Theano's `destroy_map`: for each output, the input it overwrites. No built-in op
    /// destroys its inputs; in-place variants are introduced by the in-place pass.
    pub fn destroy_map(&self) -> Vec<(usize, usize)> {
        match self {
            Op::Custom(c) => c.destroy_map(),
            _ => vec![],
        }
    }

    /// The argument an op may update where it is, touching only the positions it names and
    /// checking all of them before the first write (so a failed run leaves the buffer as it
    /// was): a scatter's array. The in-place pass may mark it; see `rewrite::inplace`.
    pub fn updates_in_place(&self) -> Option<usize> {
        match self {
            Op::ScatterAdd { .. } | Op::ScatterSet { .. } => Some(0),
            _ => None,
        }
    }

    /// Number of trailing outputs that are kept by the op and not shown to callers.
    pub fn num_hidden_outputs(&self) -> usize {
        match self {
            Op::Custom(c) => c.num_hidden_outputs(),
            _ => 0,
        }
    }

    /// Whether running the op on arguments of these types, giving results of these types, may
    /// return an error at run time (the run-time checks of a correct backend, not its bugs):
    /// anything with a dim not known in the types (its extents may not fit), a reduction with
    /// no identity over an empty axis, `take`, `take_along_axis` and the scatters (an index
    /// may be out of range), `scan` (sequences of unequal lengths, a carry whose shape changes), a custom op (user
    /// code), or `ifelse` (whose branches the caller looks into: see `Func::may_fail`).
    /// Everything else is decided by type inference.
    pub fn may_fail(&self, args: &[&TensorType], results: &[&TensorType]) -> bool {
        if args
            .iter()
            .chain(results)
            .any(|t| t.known_shape().is_none())
        {
            return true;
        }
        match self {
            // An index out of range is an error.
            Op::Custom(_) | Op::IfElse | Op::Take { .. } | Op::ScatterAdd { .. } => true,
            // Sequences of unequal lengths, or a carry whose shape changes, are errors.
            Op::Scan { .. } => true,
            Op::TakeAlongAxis { .. } | Op::ScatterSet { .. } => true,
            Op::Reduce { op, axes, .. } | Op::FusedReduce { op, axes, .. }
                if !op.has_identity() =>
            {
                let mut shape: Vec<Option<usize>> = Vec::new();
                for t in args {
                    shape = super::types::broadcast_dims(&shape, &t.shape).unwrap_or_default();
                }
                shape
                    .iter()
                    .enumerate()
                    .any(|(a, &d)| d == Some(0) && axes.as_ref().is_none_or(|ax| ax.contains(&a)))
            }
            _ => false,
        }
    }

    /// Elementwise ops (one output element from the same-index input elements, broadcasting).
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast { .. } | Op::Composite { .. }
        )
    }
}
