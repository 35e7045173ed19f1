//! Scalar programs: the body of a Composite elementwise op. A small SSA list of scalar
//! instructions over registers, each with its dtype; applied elementwise (with broadcasting)
//! to the op's inputs. User lambdas (`kiln::elementwise`) and, later, fusion produce them;
//! backends compile them into loop bodies.

use super::infer::infer;
use super::{BinaryOp, DType, F64Bits, Func, Op, TensorType, UnaryOp, Value};
use std::fmt;

/// What one instruction of a scalar program computes. Each does, on one element, what the
/// tensor op of the same name does (`perform` runs them with the same functions).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScalarOp {
    /// The op's input `i` (one element of it).
    Input(usize),
    /// A constant, converted to the instruction's dtype as `Op::Full` converts its value.
    Const(F64Bits),
    /// A unary op of one register.
    Unary(UnaryOp),
    /// A binary op of two registers of one dtype.
    Binary(BinaryOp),
    /// `select(cond, then, else)` of three registers, the first bool.
    Select,
    /// A conversion of one register to this dtype (the instruction's own).
    Cast(DType),
}

/// One instruction of a scalar program; it defines the register of its position.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScalarInst {
    /// What the instruction computes.
    pub op: ScalarOp,
    /// Registers (indices of earlier instructions).
    pub args: Vec<usize>,
    /// The register's dtype: what the tensor op would give on these arguments (`check`
    /// checks it), or an input's dtype.
    pub dtype: DType,
}

/// A scalar program: instruction `i` defines register `i`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScalarProgram {
    /// The instructions, in the order they run.
    pub insts: Vec<ScalarInst>,
    /// The registers that are the op's outputs, in order (at least one).
    pub outputs: Vec<usize>,
}

impl ScalarProgram {
    /// The dtypes of the inputs the program reads, by input index.
    pub fn input_dtypes(&self) -> Vec<Option<DType>> {
        let n = self
            .insts
            .iter()
            .filter_map(|i| {
                if let ScalarOp::Input(k) = i.op {
                    Some(k + 1)
                } else {
                    None
                }
            })
            .max()
            .unwrap_or(0);
        let mut out = vec![None; n];
        for i in &self.insts {
            if let ScalarOp::Input(k) = i.op {
                out[k] = Some(i.dtype);
            }
        }
        out
    }

    /// Checks the program: registers defined before use, each instruction's dtype what the
    /// tensor op of the same name would give.
    pub fn check(&self) -> Result<(), String> {
        if self.outputs.is_empty() {
            return Err("a scalar program needs at least one output".into());
        }
        for (r, inst) in self.insts.iter().enumerate() {
            if let Some(&a) = inst.args.iter().find(|&&a| a >= r) {
                return Err(format!("register %{r} reads %{a} before it is defined"));
            }
            let arg_tys: Vec<TensorType> = inst
                .args
                .iter()
                .map(|&a| TensorType::scalar(self.insts[a].dtype))
                .collect();
            let op = match &inst.op {
                ScalarOp::Input(_) | ScalarOp::Const(_) => continue,
                ScalarOp::Unary(u) => Op::Unary(*u),
                ScalarOp::Binary(b) => Op::Binary(*b),
                ScalarOp::Select => Op::Select,
                ScalarOp::Cast(t) => Op::Cast { to: *t },
            };
            let t = infer(&op, &arg_tys.iter().collect::<Vec<_>>())
                .map_err(|e| format!("register %{r}: {e}"))?;
            if t[0].dtype != inst.dtype {
                return Err(format!(
                    "register %{r}: {} gives {}, not {}",
                    op.name(),
                    t[0].dtype,
                    inst.dtype
                ));
            }
        }
        if let Some(&o) = self.outputs.iter().find(|&&o| o >= self.insts.len()) {
            return Err(format!("output %{o} is not defined"));
        }
        Ok(())
    }
}

impl fmt::Display for ScalarProgram {
    /// `%0 = input 0 : f32; %1 = const 2.0 : f32; %2 = mul %0, %1 : f32; return %2`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (r, i) in self.insts.iter().enumerate() {
            let args = i
                .args
                .iter()
                .map(|a| format!("%{a}"))
                .collect::<Vec<_>>()
                .join(", ");
            let head = match &i.op {
                ScalarOp::Input(k) => format!("input {k}"),
                ScalarOp::Const(c) => format!("const {}", super::text::float_text(c.0)),
                ScalarOp::Unary(u) => format!("{} {args}", u.name()),
                ScalarOp::Binary(b) => format!("{} {args}", b.name()),
                ScalarOp::Select => format!("select {args}"),
                ScalarOp::Cast(t) => format!("cast {args} to {t}"),
            };
            write!(f, "%{r} = {head} : {}; ", i.dtype)?;
        }
        write!(
            f,
            "return {}",
            self.outputs
                .iter()
                .map(|o| format!("%{o}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Parses the text `Display` writes.
pub fn parse_program(src: &str) -> Result<ScalarProgram, String> {
    let mut p = ScalarProgram::default();
    let reg = |s: &str, n: usize| -> Result<usize, String> {
        let r: usize = s
            .trim()
            .strip_prefix('%')
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| format!("bad register `{s}`"))?;
        if r >= n {
            return Err(format!("register %{r} is used before it is defined"));
        }
        Ok(r)
    };
    for stmt in src.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(outs) = stmt.strip_prefix("return") {
            p.outputs = outs
                .split(',')
                .map(|o| reg(o, p.insts.len()))
                .collect::<Result<_, _>>()?;
            continue;
        }
        let (lhs, rhs) = stmt
            .split_once('=')
            .ok_or_else(|| format!("expected `%N = ...` in `{stmt}`"))?;
        if lhs.trim() != format!("%{}", p.insts.len()) {
            return Err(format!(
                "registers must be numbered in order: expected %{} in `{stmt}`",
                p.insts.len()
            ));
        }
        let (body, dt) = rhs
            .rsplit_once(':')
            .ok_or_else(|| format!("missing `: dtype` in `{stmt}`"))?;
        let dtype: DType = dt.trim().parse()?;
        let body = body.trim();
        let (name, rest) = body.split_once(' ').unwrap_or((body, ""));
        let n = p.insts.len();
        let (op, args) = match name {
            "input" => (
                ScalarOp::Input(
                    rest.trim()
                        .parse()
                        .map_err(|_| format!("bad input index in `{stmt}`"))?,
                ),
                vec![],
            ),
            "const" => (
                ScalarOp::Const(F64Bits(
                    super::text::parse_float(rest.trim())
                        .ok_or_else(|| format!("bad constant in `{stmt}`"))?,
                )),
                vec![],
            ),
            "cast" => {
                let (a, to) = rest
                    .split_once(" to ")
                    .ok_or_else(|| format!("expected `cast %N to DTYPE` in `{stmt}`"))?;
                // The written target and the result's dtype say the same thing twice; a
                // program where they differ is refused rather than read as either.
                let to: DType = to.trim().parse()?;
                if to != dtype {
                    return Err(format!(
                        "a cast to {to} has the result dtype {dtype} in `{stmt}`"
                    ));
                }
                (ScalarOp::Cast(dtype), vec![reg(a, n)?])
            }
            _ => {
                let args = rest
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|a| reg(a, n))
                    .collect::<Result<Vec<_>, _>>()?;
                let op = if name == "select" {
                    ScalarOp::Select
                } else if let Some(u) = UnaryOp::ALL.iter().find(|u| u.name() == name) {
                    ScalarOp::Unary(*u)
                } else if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == name) {
                    ScalarOp::Binary(*b)
                } else {
                    return Err(format!("unknown scalar op `{name}`"));
                };
                (op, args)
            }
        };
        p.insts.push(ScalarInst { op, args, dtype });
    }
    p.check()?;
    Ok(p)
}

/// The scalar program of a single elementwise op, or `None` for other ops.
pub fn program_of(op: &Op, func: &Func, args: &[Value], result: Value) -> Option<ScalarProgram> {
    let dt = |v: Value| func.ty(v).dtype;
    let out = dt(result);
    let inputs: Vec<ScalarInst> = args
        .iter()
        .enumerate()
        .map(|(i, &a)| ScalarInst {
            op: ScalarOp::Input(i),
            args: vec![],
            dtype: dt(a),
        })
        .collect();
    let n = inputs.len();
    let body = match op {
        Op::Unary(u) => ScalarOp::Unary(*u),
        Op::Binary(b) => ScalarOp::Binary(*b),
        Op::Select => ScalarOp::Select,
        Op::Cast { to } => ScalarOp::Cast(*to),
        Op::Composite { program, .. } if program.outputs.len() == 1 => {
            return Some((**program).clone())
        }
        _ => return None,
    };
    let mut insts = inputs;
    insts.push(ScalarInst {
        op: body,
        args: (0..n).collect(),
        dtype: out,
    });
    Some(ScalarProgram {
        insts,
        outputs: vec![n],
    })
}
