//! The intermediate representation: dtypes, tensor types, the op set, type inference and the
//! SSA function.

pub mod custom;
pub mod dot;
mod dtype;
pub mod func;
pub mod infer;
pub mod op;
pub mod reduce;
pub mod scalar;
pub mod text;
pub mod types;
pub mod verify;
pub mod window;

pub use dtype::{bf16_of, f16_of, f32_round_to_odd, half_bits, round_to, DType, Element};
pub use func::{Func, Inst, Region, Value, ValueData};
pub use infer::{infer, infer_shape};
pub use op::{BinaryOp, F64Bits, Op, RandomDist, ReduceOp, UnaryOp};
pub use reduce::{Reduction, Scalar, PAIRWISE};
pub use types::{broadcast_dims, broadcast_shapes, Dim, TensorType};
