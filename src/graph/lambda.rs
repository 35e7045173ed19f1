//! Elementwise lambdas (libnd4j's `applyLambda`/`applyPairwiseLambda`): a Rust closure over
//! scalar expressions becomes a Composite op holding a scalar program, so it broadcasts,
//! differentiates (through its scalar ops), and compiles like a built-in op.
//!
//! ```
//! let g = kiln::Graph::new();
//! let x = g.input("x", kiln::f32, [Some(3)]);
//! let y = g.input("y", kiln::f32, [Some(1)]);
//! let scaled_sum = kiln::elementwise("scaled_sum", |a: kiln::Scalar, b: kiln::Scalar| (a + b) * 2.0);
//! let z = scaled_sum.apply(&[&x, &y]);
//! assert_eq!(z.ty().to_string(), "f32[3]");
//! ```

use super::{Var, VarData, VarKind};
use crate::error::{Error, Result, SourceLoc};
use crate::ir::scalar::{ScalarInst, ScalarOp, ScalarProgram};
use crate::ir::{infer, BinaryOp, DType, F64Bits, Op, TensorType, UnaryOp};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

#[derive(Default)]
struct Builder {
    program: ScalarProgram,
    error: Option<String>,
}

/// A scalar expression inside an elementwise lambda.
#[derive(Clone)]
pub struct Scalar {
    b: Rc<RefCell<Builder>>,
    reg: usize,
    dtype: DType,
}

impl Scalar {
    fn push(&self, op: ScalarOp, args: &[&Scalar]) -> Scalar {
        let mut b = self.b.borrow_mut();
        let tys: Vec<TensorType> = args.iter().map(|a| TensorType::scalar(a.dtype)).collect();
        let tensor_op = match &op {
            ScalarOp::Unary(u) => Op::Unary(*u),
            ScalarOp::Binary(o) => Op::Binary(*o),
            ScalarOp::Select => Op::Select,
            ScalarOp::Cast(t) => Op::Cast { to: *t },
            _ => unreachable!("inputs and constants are pushed directly"),
        };
        let dtype = match infer(&tensor_op, &tys.iter().collect::<Vec<_>>()) {
            Ok(t) => t[0].dtype,
            Err(e) => {
                b.error.get_or_insert(e);
                self.dtype
            }
        };
        b.program.insts.push(ScalarInst {
            op,
            args: args.iter().map(|a| a.reg).collect(),
            dtype,
        });
        Scalar {
            b: self.b.clone(),
            reg: b.program.insts.len() - 1,
            dtype,
        }
    }

    fn constant(&self, v: f64) -> Scalar {
        self.constant_of(self.dtype, v)
    }

    fn constant_of(&self, dtype: DType, v: f64) -> Scalar {
        let mut b = self.b.borrow_mut();
        b.program.insts.push(ScalarInst {
            op: ScalarOp::Const(F64Bits(v)),
            args: vec![],
            dtype,
        });
        Scalar {
            b: self.b.clone(),
            reg: b.program.insts.len() - 1,
            dtype,
        }
    }

    /// The expression's dtype (inferred as for the tensor op).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The unary op `u` of this expression. A type error is reported when the lambda's
    /// program is built.
    pub fn unary(&self, u: UnaryOp) -> Scalar {
        self.push(ScalarOp::Unary(u), &[self])
    }

    /// The binary op `o` of this expression and `other` (a number takes this expression's
    /// dtype). A type error is reported when the lambda's program is built.
    pub fn binary(&self, o: BinaryOp, other: impl Into<ScalarOperand>) -> Scalar {
        let other = other.into().resolve(self);
        self.push(ScalarOp::Binary(o), &[self, &other])
    }

    /// This expression converted to `to`.
    pub fn cast(&self, to: DType) -> Scalar {
        self.push(ScalarOp::Cast(to), &[self])
    }

    /// `cond ? a : b` with `self` as the condition.
    pub fn select(&self, a: impl Into<ScalarOperand>, b: impl Into<ScalarOperand>) -> Scalar {
        let a = a.into();
        let b = b.into();
        let (a, b) = match (a, b) {
            (ScalarOperand::Expr(a), b) => {
                let b = b.resolve(&a);
                (a, b)
            }
            (a, ScalarOperand::Expr(b)) => (a.resolve(&b), b),
            // Two plain numbers: f64, as numpy would.
            (ScalarOperand::Number(x), ScalarOperand::Number(y)) => (
                self.constant_of(DType::F64, x),
                self.constant_of(DType::F64, y),
            ),
        };
        self.push(ScalarOp::Select, &[self, &a, &b])
    }
}

/// A number or an expression next to a `Scalar`; numbers adopt the expression's dtype.
pub enum ScalarOperand {
    /// An expression of the lambda.
    Expr(Scalar),
    /// A plain number, made a constant of the other operand's dtype.
    Number(f64),
}

impl ScalarOperand {
    fn resolve(self, like: &Scalar) -> Scalar {
        match self {
            ScalarOperand::Expr(s) => s,
            ScalarOperand::Number(v) => like.constant(v),
        }
    }
}

impl From<Scalar> for ScalarOperand {
    fn from(s: Scalar) -> Self {
        ScalarOperand::Expr(s)
    }
}
impl From<&Scalar> for ScalarOperand {
    fn from(s: &Scalar) -> Self {
        ScalarOperand::Expr(s.clone())
    }
}
impl From<f64> for ScalarOperand {
    fn from(v: f64) -> Self {
        ScalarOperand::Number(v)
    }
}

macro_rules! scalar_unary {
    ($($name:ident => $op:ident),*) => {
        impl Scalar {$(
            #[doc = concat!("`", stringify!($name), "` of this expression ([`UnaryOp::",
                stringify!($op), "`]).")]
            pub fn $name(&self) -> Scalar { self.unary(UnaryOp::$op) }
        )*}
    };
}
scalar_unary!(exp => Exp, log => Log, log1p => Log1p, expm1 => Expm1, sqrt => Sqrt, rsqrt => Rsqrt, sin => Sin,
    cos => Cos, tan => Tan, tanh => Tanh, sigmoid => Sigmoid, erf => Erf, abs => Abs, sign => Sign, floor => Floor,
    ceil => Ceil, round => Round, square => Square, reciprocal => Reciprocal, relu => Relu);

macro_rules! scalar_binary {
    ($($name:ident => $op:ident),*) => {
        impl Scalar {$(
            #[doc = concat!("`", stringify!($name), "` of this expression and `other` ([`BinaryOp::",
                stringify!($op), "`]).")]
            pub fn $name(&self, other: impl Into<ScalarOperand>) -> Scalar { self.binary(BinaryOp::$op, other) }
        )*}
    };
}
scalar_binary!(pow => Pow, maximum => Maximum, minimum => Minimum, lt => Lt, le => Le, gt => Gt, ge => Ge, eq => Eq, ne => Ne);

macro_rules! scalar_operator {
    ($tr:ident, $m:ident, $op:ident) => {
        impl<T: Into<ScalarOperand>> std::ops::$tr<T> for Scalar {
            type Output = Scalar;
            fn $m(self, rhs: T) -> Scalar {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl<T: Into<ScalarOperand>> std::ops::$tr<T> for &Scalar {
            type Output = Scalar;
            fn $m(self, rhs: T) -> Scalar {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl std::ops::$tr<Scalar> for f64 {
            type Output = Scalar;
            fn $m(self, rhs: Scalar) -> Scalar {
                rhs.constant(self).binary(BinaryOp::$op, rhs)
            }
        }
    };
}
scalar_operator!(Add, add, Add);
scalar_operator!(Sub, sub, Sub);
scalar_operator!(Mul, mul, Mul);
scalar_operator!(Div, div, Div);

impl std::ops::Neg for Scalar {
    type Output = Scalar;
    fn neg(self) -> Scalar {
        self.unary(UnaryOp::Neg)
    }
}

/// Closures of one to four scalar arguments.
pub trait Lambda<Args> {
    /// How many scalar arguments the closure takes.
    fn arity(&self) -> usize;
    /// Calls the closure on `args` (exactly `arity` of them).
    fn call(&self, args: &[Scalar]) -> Scalar;
}
impl<F: Fn(Scalar) -> Scalar> Lambda<(Scalar,)> for F {
    fn arity(&self) -> usize {
        1
    }
    fn call(&self, a: &[Scalar]) -> Scalar {
        self(a[0].clone())
    }
}
impl<F: Fn(Scalar, Scalar) -> Scalar> Lambda<(Scalar, Scalar)> for F {
    fn arity(&self) -> usize {
        2
    }
    fn call(&self, a: &[Scalar]) -> Scalar {
        self(a[0].clone(), a[1].clone())
    }
}
impl<F: Fn(Scalar, Scalar, Scalar) -> Scalar> Lambda<(Scalar, Scalar, Scalar)> for F {
    fn arity(&self) -> usize {
        3
    }
    fn call(&self, a: &[Scalar]) -> Scalar {
        self(a[0].clone(), a[1].clone(), a[2].clone())
    }
}
impl<F: Fn(Scalar, Scalar, Scalar, Scalar) -> Scalar> Lambda<(Scalar, Scalar, Scalar, Scalar)>
    for F
{
    fn arity(&self) -> usize {
        4
    }
    fn call(&self, a: &[Scalar]) -> Scalar {
        self(a[0].clone(), a[1].clone(), a[2].clone(), a[3].clone())
    }
}

/// A new elementwise op defined by a closure over scalars. Apply it with
/// [`Elementwise::apply`]; the closure runs once per application, with the inputs' dtypes.
pub fn elementwise<Args, F: Lambda<Args>>(name: &str, f: F) -> Elementwise<Args, F> {
    Elementwise {
        name: name.to_string(),
        f,
        _args: std::marker::PhantomData,
    }
}

/// An elementwise op made by [`elementwise`]: a named closure over scalars, applied to
/// tensors with [`Elementwise::apply`].
pub struct Elementwise<Args, F> {
    name: String,
    f: F,
    _args: std::marker::PhantomData<Args>,
}

impl<Args, F: Lambda<Args>> Elementwise<Args, F> {
    /// The scalar program for inputs of these dtypes.
    ///
    /// # Errors
    ///
    /// A type error where `dtypes` does not have one dtype per closure argument, or where an
    /// op of the closure does not take its operands' dtypes.
    pub fn program(&self, dtypes: &[DType]) -> Result<ScalarProgram> {
        if dtypes.len() != self.f.arity() {
            return Err(Error::ty(format!(
                "{} takes {} inputs, got {}",
                self.name,
                self.f.arity(),
                dtypes.len()
            )));
        }
        let b = Rc::new(RefCell::new(Builder::default()));
        let args: Vec<Scalar> = dtypes
            .iter()
            .enumerate()
            .map(|(i, &dt)| {
                b.borrow_mut().program.insts.push(ScalarInst {
                    op: ScalarOp::Input(i),
                    args: vec![],
                    dtype: dt,
                });
                Scalar {
                    b: b.clone(),
                    reg: i,
                    dtype: dt,
                }
            })
            .collect();
        let out = self.f.call(&args);
        let mut built = b.borrow_mut();
        if let Some(e) = built.error.take() {
            return Err(Error::ty(format!("{}: {e}", self.name)));
        }
        built.program.outputs = vec![out.reg];
        Ok(std::mem::take(&mut built.program))
    }

    /// Applies the op to `inputs` (broadcast together).
    #[track_caller]
    pub fn apply(&self, inputs: &[&Var]) -> Var {
        let loc = SourceLoc::caller();
        let Some(first) = inputs.first() else {
            let g = super::Graph::new();
            return g.add_var(VarData {
                ty: TensorType::scalar(DType::F32),
                name: None,
                kind: VarKind::Poisoned(Error::ty(format!("{} takes inputs", self.name)).at(loc)),
            });
        };
        match self.program(&inputs.iter().map(|v| v.dtype()).collect::<Vec<_>>()) {
            Ok(p) => first
                .graph()
                .apply_at(
                    Op::Composite {
                        name: self.name.clone(),
                        program: Arc::new(p),
                    },
                    inputs,
                    loc,
                )
                .swap_remove(0),
            Err(e) => first.graph().add_var(VarData {
                ty: first.ty(),
                name: None,
                kind: VarKind::Poisoned(e.at(loc)),
            }),
        }
    }
}

/// A scalar program written out as graph ops on `inputs` (for gradients of Composites).
pub fn unfold_program(program: &ScalarProgram, inputs: &[Var]) -> Result<Vec<Var>> {
    let g = inputs
        .first()
        .map(|v| v.graph().clone())
        .ok_or_else(|| Error::Grad("composite without inputs".into()))?;
    let mut regs: Vec<Var> = Vec::new();
    for inst in &program.insts {
        let a = |k: usize| &regs[inst.args[k]];
        let v = match &inst.op {
            ScalarOp::Input(i) => inputs[*i].clone(),
            ScalarOp::Const(c) => g.constant(crate::tensor::Tensor::full(inst.dtype, &[], c.0)),
            ScalarOp::Unary(u) => a(0).unary(*u),
            ScalarOp::Binary(b) => a(0).binary(*b, a(1)),
            ScalarOp::Select => super::select(a(0), a(1), a(2)),
            ScalarOp::Cast(t) => a(0).cast(*t),
        };
        v.check()?;
        regs.push(v);
    }
    Ok(program.outputs.iter().map(|&o| regs[o].clone()).collect())
}
