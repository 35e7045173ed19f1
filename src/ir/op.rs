//! The built-in op set (docs/reference/text-form.md). An `Op` holds its parameters as fields; ops that do
//! the same thing compare and hash equal, which is what lets merging find duplicates.
//! Axes are stored normalized (non-negative, sorted) so that `[-1]` and `[1]` on a rank-2 input
//! are the same op.

use super::custom::CustomOpRef;
use super::types::TensorType;
use super::DType;
use crate::tensor::Tensor;
use std::hash::{Hash, Hasher};

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Log,
    Log1p,
    Expm1,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Erf,
    Floor,
    Ceil,
    Round,
    Square,
    Reciprocal,
    Relu,
    Not,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Pow,
    Maximum,
    Minimum,
    Mod,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    Mean,
    ArgMax,
    ArgMin,
    All,
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

/// A built-in op with its parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `select(cond, then, else)`: numpy `where`.
    Select,
    Cast {
        to: DType,
    },
    /// Reduction over `axes` (normalized, sorted; `None` means every axis).
    Reduce {
        op: ReduceOp,
        axes: Option<Vec<usize>>,
        keepdims: bool,
    },
    /// A view: output axis `i` is input axis `perm[i]`.
    Transpose {
        perm: Vec<usize>,
    },
    /// A view when the input is contiguous. One entry may be -1.
    Reshape {
        shape: Vec<i64>,
    },
    /// A view with zero strides on stretched dims.
    BroadcastTo {
        shape: Vec<usize>,
    },
    /// Inserts size-1 dims at `axes` (positions in the output, normalized, sorted).
    ExpandDims {
        axes: Vec<usize>,
    },
    /// Removes the size-1 dims at `axes` (normalized, sorted).
    Squeeze {
        axes: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    /// numpy `take`: the elements of input 0 at the positions input 1 (i32 or i64, any shape;
    /// negative counts from the end; out of range is an error) gives along `axis`. The result
    /// has input 0's dims before `axis`, then the indices' dims, then input 0's dims after it.
    Take {
        axis: usize,
    },
    /// numpy `add.at` out of place: input 0 with the elements of input 2 added at the
    /// positions input 1 gives along `axis` (repeated positions add up, in index order);
    /// input 2 has the shape `take` gives for these inputs. The gradient of `take`.
    ScatterAdd {
        axis: usize,
    },
    /// numpy `cumsum` along `axis`: each element the sum of those before it and itself, added
    /// in order (numpy's order, not a pairwise one); the dtype is `sum`'s (bool gives i64).
    Cumsum {
        axis: usize,
    },
    /// numpy `take_along_axis`: input 1 (i32 or i64, the rank of input 0) picks, in each
    /// lane along `axis`, which of input 0's elements go there; the other dims broadcast
    /// together. The result has the broadcast dims and the indices' length along `axis`.
    TakeAlongAxis {
        axis: usize,
    },
    /// numpy's `x[.., indices, ..] = updates` on a copy (Theano's `set_subtensor` with integer
    /// indices): input 0 with the elements of input 2 written at the positions input 1 gives
    /// along `axis`. Input 2 has the shape `take` gives; where a position repeats, the last one
    /// in index order is kept.
    ScatterSet {
        axis: usize,
    },
    /// numpy `cumprod` along `axis`: each element the product of those before it and itself,
    /// multiplied in order; the dtype is `prod`'s (bool gives i64).
    Cumprod {
        axis: usize,
    },
    /// The gradient of `cumprod` with respect to its input, from the input (0) and the
    /// gradient of the output (1): exact where the input holds zeros, where dividing the output
    /// by the input would not be.
    CumprodGrad {
        axis: usize,
    },
    /// numpy `sort` along `axis` (stable; NaN sorts as the greatest value), largest first when
    /// `descending`, equal elements then still in index order.
    Sort {
        axis: usize,
        descending: bool,
    },
    /// numpy `argsort` along `axis` (stable, i64 positions), in the order `sort` gives.
    Argsort {
        axis: usize,
        descending: bool,
    },
    /// A 2-D convolution (cross-correlation, as in PyTorch and JAX) of input 0 (`[N, C, H, W]`)
    /// with the filters of input 1 (`[O, C / groups, KH, KW]`), giving `[N, O, OH, OW]`.
    Conv2d(super::window::Conv2d),
    /// The gradient of `conv2d` with respect to its image, from the output's gradient (0) and
    /// the filters (1); `image` is the image's height and width.
    Conv2dGradImage {
        conv: super::window::Conv2d,
        image: [usize; 2],
    },
    /// The gradient of `conv2d` with respect to its filters, from the image (0) and the output's
    /// gradient (1); `kernel` is the filters' height and width.
    Conv2dGradFilter {
        conv: super::window::Conv2d,
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
        depth: usize,
        dtype: DType,
    },
    /// numpy basic slicing on the leading `starts.len()` axes. `i64::MIN` / `i64::MAX` are minus
    /// and plus infinity: an omitted start is MIN for a positive step and MAX for a negative one,
    /// an omitted stop the other way round (see `infer::slice_bounds`).
    Slice {
        starts: Vec<i64>,
        stops: Vec<i64>,
        steps: Vec<i64>,
    },
    /// numpy `matmul`: 1-D and batched operands included.
    MatMul,
    /// A constant value.
    Const(Tensor),
    Zeros {
        shape: Vec<usize>,
        dtype: DType,
    },
    Ones {
        shape: Vec<usize>,
        dtype: DType,
    },
    Full {
        shape: Vec<usize>,
        dtype: DType,
        value: F64Bits,
    },
    Arange {
        start: F64Bits,
        stop: F64Bits,
        step: F64Bits,
        dtype: DType,
    },
    /// Random numbers from a counter-based stream (see `crate::random` for the layout). Takes
    /// no input, or one 0-d i64 `counter` mixed into the seed so that a shared counter updated
    /// at each call gives fresh numbers per call.
    Random {
        dist: RandomDist,
        seed: u64,
        shape: Vec<usize>,
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
        carries: usize,
        reverse: bool,
    },
    /// An elementwise op whose body is a scalar program (a user lambda, or fused ops): its
    /// inputs broadcast together and each output register gives one output.
    Composite {
        name: String,
        program: std::sync::Arc<super::scalar::ScalarProgram>,
    },
    /// A reduction whose input is computed elementwise by a scalar program from its arguments
    /// (an elementwise producer fused into the reduction as its prologue), so the input is never
    /// stored whole.
    FusedReduce {
        op: ReduceOp,
        axes: Option<Vec<usize>>,
        keepdims: bool,
        program: std::sync::Arc<super::scalar::ScalarProgram>,
    },
    /// A user-defined op (see `custom`).
    Custom(CustomOpRef),
}

/// The distribution of a random op.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RandomDist {
    Uniform { low: F64Bits, high: F64Bits },
    Normal { mean: F64Bits, std: F64Bits },
    Bernoulli { p: F64Bits },
}

impl RandomDist {
    pub fn name(self) -> &'static str {
        match self {
            RandomDist::Uniform { .. } => "uniform",
            RandomDist::Normal { .. } => "normal",
            RandomDist::Bernoulli { .. } => "bernoulli",
        }
    }
}

impl UnaryOp {
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

    /// Ops defined on floats only (transcendentals and roundings).
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

    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Lt | Le | Gt | Ge | Eq | Ne)
    }

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

    /// Number of inputs the op takes; `None` for a variable number (concat).
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
    /// no identity over an empty axis, a custom op (user code), or `ifelse` (whose branches the
    /// caller looks into: see `Func::may_fail`). Everything else is decided by type inference.
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
