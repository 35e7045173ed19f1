//! Reduction semantics, defined once (docs/reference/semantics.md). Type inference, `perform`, lowering
//! and every code generator read a reduction from here: its result and accumulator dtypes, the
//! accumulator's starting value, whether an empty axis has a value, how two partials combine,
//! what finishes the result (`mean`'s division) and the order in which a float sum adds.
//!
//! It lives in `ir` (not in the kernel plan above it) because type inference needs the result
//! dtype; the plan's reduce steps carry a [`Reduction`] built here.

use super::{DType, ReduceOp};

/// How two partial results combine.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    /// The sum (`sum`, `mean`).
    Add,
    /// The product (`prod`).
    Mul,
    /// The larger; NaN wins on floats (numpy's `max`).
    Max,
    /// The smaller; NaN wins on floats.
    Min,
    /// Logical and (`all`).
    And,
    /// Logical or (`any`).
    Or,
    /// The index of the first largest element (a NaN counts as largest).
    ArgMax,
    /// The index of the first smallest element (a NaN counts as smallest).
    ArgMin,
}

/// What happens to the combined value at the end.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Finish {
    /// Nothing: the combined value is the result.
    None,
    /// Divided by the number of reduced elements (`mean`).
    DivideByCount,
}

/// numpy's pairwise summation, as data (defined with the math expansions, whose summing
/// buffer functions follow it too).
pub use kiln_math::{Pairwise, PAIRWISE};

/// The order in which a reduction combines its elements. Float sums split long ranges
/// (`Pairwise`); every float reduction takes a range in eight interleaved partials combined as
/// a tree, then the tail (`perform::reduce::interleaved`, the kernels' order: a float `prod`
/// rounds by it, and `max`/`min` of zeros of both signs show it). The integer and bool
/// combiners are exact in any order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// The whole range in eight interleaved partials, then the tail (no splitting).
    Interleaved,
    /// numpy's pairwise summation with these block and lane sizes (every float `sum` and
    /// `mean`: [`PAIRWISE`]).
    Pairwise(Pairwise),
}

/// A scalar of a given dtype (a reduction's starting value).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Scalar {
    /// A bool value.
    Bool(bool),
    /// An i32 value.
    I32(i32),
    /// An i64 value.
    I64(i64),
    /// An f32 value.
    F32(f32),
    /// An f64 value.
    F64(f64),
}

impl Scalar {
    /// The dtype of the value.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::I32(_) => DType::I32,
            Scalar::I64(_) => DType::I64,
            Scalar::F32(_) => DType::F32,
            Scalar::F64(_) => DType::F64,
        }
    }

    /// The value as an `f64` (exact for every value a reduction starts from).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::I32(v) => v as f64,
            Scalar::I64(v) => v as f64,
            Scalar::F32(v) => v as f64,
            Scalar::F64(v) => v,
        }
    }

    /// The value's bits as an integer of its width (floats by their bit pattern, bools 0/1).
    pub fn to_bits(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::I32(v) => v as i64,
            Scalar::I64(v) => v,
            Scalar::F32(v) => v.to_bits() as i64,
            Scalar::F64(v) => v.to_bits() as i64,
        }
    }
}

/// Everything a backend needs to know about one reduction of values of one dtype.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Reduction {
    /// The reduction this describes.
    pub op: ReduceOp,
    /// The dtype of the values reduced (after a fused producer, if any).
    pub value: DType,
    /// The dtype partial results are kept in; values are converted to it (bool to i64 for a
    /// sum, integers to f64 for a mean, anything to bool for `all`/`any`). For `argmax` and
    /// `argmin`, the value's own dtype, in which elements are compared.
    pub acc: DType,
    /// The dtype of the result.
    pub result: DType,
    /// How two partial results combine.
    pub combiner: Combiner,
    /// The accumulator's starting value, in `acc`'s dtype: the identity of `combiner` (minus
    /// infinity for a float `max`, the smallest integer for an integer one). `None` for
    /// `argmax`/`argmin`, which start from the first element.
    pub start: Option<Scalar>,
    /// Whether the reduction of an empty axis has a value (`start`, finished); `max`, `min`,
    /// `argmax` and `argmin` of an empty axis are errors.
    pub empty_has_value: bool,
    /// What turns the combined value into the result (`mean`'s division by the count).
    pub finish: Finish,
    /// The order in which elements combine, which fixes a float result's rounding.
    pub order: Order,
}

impl Reduction {
    /// The reduction `op` of values of dtype `value`.
    pub fn of(op: ReduceOp, value: DType) -> Reduction {
        use ReduceOp as R;
        let result = op.result_dtype(value);
        let acc = match op {
            R::ArgMax | R::ArgMin => value,
            _ => result,
        };
        let combiner = match op {
            R::Sum | R::Mean => Combiner::Add,
            R::Prod => Combiner::Mul,
            R::Max => Combiner::Max,
            R::Min => Combiner::Min,
            R::All => Combiner::And,
            R::Any => Combiner::Or,
            R::ArgMax => Combiner::ArgMax,
            R::ArgMin => Combiner::ArgMin,
        };
        let start = match combiner {
            Combiner::ArgMax | Combiner::ArgMin => None,
            c => Some(start_value(c, acc)),
        };
        Reduction {
            op,
            value,
            acc,
            result,
            combiner,
            start,
            empty_has_value: op.has_identity(),
            finish: if op == R::Mean {
                Finish::DivideByCount
            } else {
                Finish::None
            },
            order: if combiner == Combiner::Add && acc.is_float() {
                Order::Pairwise(PAIRWISE)
            } else {
                Order::Interleaved
            },
        }
    }

    /// Whether this is `argmax` or `argmin` (a result that is an index).
    pub fn is_arg(&self) -> bool {
        matches!(self.combiner, Combiner::ArgMax | Combiner::ArgMin)
    }

    /// Whether this is a float sum in pairwise order.
    pub fn is_pairwise(&self) -> bool {
        matches!(self.order, Order::Pairwise(_))
    }
}

/// The starting value of `combiner` in dtype `acc`.
fn start_value(combiner: Combiner, acc: DType) -> Scalar {
    let of_float = |v: f64| match acc {
        DType::F32 => Scalar::F32(v as f32),
        _ => Scalar::F64(v),
    };
    match (combiner, acc) {
        (Combiner::Add, DType::F32 | DType::F64) => of_float(0.0),
        (Combiner::Mul, DType::F32 | DType::F64) => of_float(1.0),
        (Combiner::Max, DType::F32 | DType::F64) => of_float(f64::NEG_INFINITY),
        (Combiner::Min, DType::F32 | DType::F64) => of_float(f64::INFINITY),
        (Combiner::Add, DType::I32) => Scalar::I32(0),
        (Combiner::Mul, DType::I32) => Scalar::I32(1),
        (Combiner::Max, DType::I32) => Scalar::I32(i32::MIN),
        (Combiner::Min, DType::I32) => Scalar::I32(i32::MAX),
        (Combiner::Add, DType::I64) => Scalar::I64(0),
        (Combiner::Mul, DType::I64) => Scalar::I64(1),
        (Combiner::Max, DType::I64) => Scalar::I64(i64::MIN),
        (Combiner::Min, DType::I64) => Scalar::I64(i64::MAX),
        // Bools: max is `or`, min is `and`.
        (Combiner::Max | Combiner::Or, _) => Scalar::Bool(false),
        (Combiner::Min | Combiner::And, _) => Scalar::Bool(true),
        // Sums and products keep no bool accumulator (bool sums to i64), so this is unused.
        (Combiner::Add, _) => Scalar::Bool(false),
        (Combiner::Mul, _) => Scalar::Bool(true),
        (Combiner::ArgMax | Combiner::ArgMin, _) => unreachable!("arg reductions have no start"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_identities_of_their_combiners_in_the_accumulator_dtype() {
        for op in ReduceOp::ALL {
            for dt in [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64] {
                let r = Reduction::of(op, dt);
                if let Some(s) = r.start {
                    assert_eq!(s.dtype(), r.acc, "{op:?} of {dt:?}");
                }
                assert_eq!(r.start.is_none(), r.is_arg());
            }
        }
        assert_eq!(
            Reduction::of(ReduceOp::Max, DType::F32).start,
            Some(Scalar::F32(f32::NEG_INFINITY))
        );
        assert_eq!(
            Reduction::of(ReduceOp::Sum, DType::Bool).start,
            Some(Scalar::I64(0))
        );
        assert_eq!(Reduction::of(ReduceOp::Mean, DType::I32).acc, DType::F64);
        assert_eq!(Reduction::of(ReduceOp::ArgMax, DType::F32).acc, DType::F32);
        assert!(Reduction::of(ReduceOp::Mean, DType::I64).is_pairwise());
        assert!(!Reduction::of(ReduceOp::Sum, DType::I64).is_pairwise());
    }

    #[test]
    fn pairwise_splits_at_half_rounded_down_to_the_lanes() {
        assert_eq!(PAIRWISE.mid(129), 64);
        assert_eq!(PAIRWISE.mid(200), 96);
        assert_eq!(PAIRWISE.mid(1000), 496);
    }
}
