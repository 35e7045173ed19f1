//! The SSA function: what a compiled function is made of between the user's graph and a
//! backend. Values are defined once, instructions are in order, and everything lives in arenas
//! indexed by small `Copy` handles, as in Cranelift's `ir` module, so that the function is cheap
//! to clone and easy to rewrite.

use super::infer::infer;
use super::op::Op;
use super::types::TensorType;
use std::fmt;

/// A value: a function parameter or the result of an instruction.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

impl Value {
    /// The value's position in `Func::values`, where its type and name are.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// What a function knows of one value: its type, and where it came from for messages.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    /// The value's type, fixed where it is defined.
    pub ty: TensorType,
    /// The name from the source (graph variable name or text-form name), if any.
    pub name: Option<String>,
    /// Where the source built it (`src/main.rs:12:5`, `model.kir:3:8`), for messages.
    pub loc: Option<String>,
}

/// A nested sequence of instructions that ends by yielding values (the branches of `ifelse`,
/// the body of `scan`). Instructions in a region may use values defined before the region,
/// and its parameters (a scan's carries and sequence slices; `ifelse`'s branches have none).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Region {
    /// The values the region is entered with, defined by it (empty for `ifelse`'s branches).
    pub params: Vec<Value>,
    /// The region's instructions, in the order they run.
    pub body: Vec<Inst>,
    /// The values the region ends with: the instruction's results (`ifelse`), or a scan
    /// step's new carries and outputs.
    pub yields: Vec<Value>,
}

/// One instruction: an op applied to argument values, defining result values.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// The op applied, with its parameters.
    pub op: Op,
    /// The values the op reads, in the op's input order.
    pub args: Vec<Value>,
    /// The values the instruction defines, one per output of the op (hidden outputs of a
    /// custom op included).
    pub results: Vec<Value>,
    /// Nested regions (only control ops have any).
    pub regions: Vec<Region>,
    /// Theano's `destroy_map` for this instruction: result 0 may be written into the buffer of
    /// argument `k`, which nothing reads afterwards. Set only by the in-place pass
    /// (`rewrite::inplace`), which proves it safe; printed as the attribute `inplace = k`.
    pub inplace: Option<usize>,
}

impl Inst {
    /// An instruction without regions that writes fresh buffers.
    pub fn new(op: Op, args: Vec<Value>, results: Vec<Value>) -> Inst {
        Inst {
            op,
            args,
            results,
            regions: Vec::new(),
            inplace: None,
        }
    }
}

/// A function in SSA form.
#[derive(Clone, Debug, PartialEq)]
pub struct Func {
    /// The function's name (`@name` in the text form).
    pub name: String,
    /// The arena of every value, parameters and region values included, indexed by
    /// `Value::index`.
    pub values: Vec<ValueData>,
    /// The parameters, in order (from a graph: the call's inputs, then the shared variables
    /// the function reads or updates).
    pub params: Vec<Value>,
    /// The top-level instructions, in the order they run.
    pub body: Vec<Inst>,
    /// The values the function returns, in order (from a graph: the requested outputs, then
    /// one new value per shared-variable update).
    pub outputs: Vec<Value>,
}

impl Func {
    /// An empty function named `name`: no values, parameters, instructions or outputs.
    pub fn new(name: impl Into<String>) -> Func {
        Func {
            name: name.into(),
            values: Vec::new(),
            params: Vec::new(),
            body: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// A fresh value of type `ty`, not yet defined anywhere.
    pub fn new_value(&mut self, ty: TensorType, name: Option<String>) -> Value {
        self.values.push(ValueData {
            ty,
            name,
            loc: None,
        });
        Value(self.values.len() as u32 - 1)
    }

    /// A fresh value of type `ty`, appended to the parameters.
    pub fn add_param(&mut self, ty: TensorType, name: Option<String>) -> Value {
        let v = self.new_value(ty, name);
        self.params.push(v);
        v
    }

    /// The type of `v`.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.values[v.index()].ty
    }

    /// The source's name for `v`, if it has one.
    pub fn name_of(&self, v: Value) -> Option<&str> {
        self.values[v.index()].name.as_deref()
    }

    /// Records where the source built `v`.
    pub fn set_loc(&mut self, v: Value, loc: impl Into<String>) {
        self.values[v.index()].loc = Some(loc.into());
    }

    /// `describe`, with where the source built `v` when that is known:
    /// `` `h` (built at src/main.rs:12:5) ``.
    pub fn describe_at(&self, v: Value) -> String {
        match &self.values[v.index()].loc {
            Some(l) => format!("{} (built at {l})", self.describe(v)),
            None => self.describe(v),
        }
    }

    /// How messages name `v`: `input `x`` for a parameter, `` `y` `` for a named value, its
    /// number (`%7`) otherwise.
    pub fn describe(&self, v: Value) -> String {
        let param = self.params.contains(&v);
        match (self.name_of(v), param) {
            (Some(n), true) => format!("input `{n}`"),
            (None, true) => format!("input {v}"),
            (Some(n), false) => format!("`{n}`"),
            (None, false) => v.to_string(),
        }
    }

    /// Builds an instruction with inferred result types, without appending it.
    pub fn make_inst(&mut self, op: Op, args: &[Value]) -> Result<Inst, String> {
        let tys: Vec<&TensorType> = args.iter().map(|&a| &self.values[a.index()].ty).collect();
        let outs = infer(&op, &tys)?;
        let results = outs.into_iter().map(|t| self.new_value(t, None)).collect();
        Ok(Inst {
            op,
            args: args.to_vec(),
            results,
            regions: Vec::new(),
            inplace: None,
        })
    }

    /// Appends `op(args)` to the body and returns its results.
    pub fn push(&mut self, op: Op, args: &[Value]) -> Result<Vec<Value>, String> {
        let inst = self.make_inst(op, args)?;
        let r = inst.results.clone();
        self.body.push(inst);
        Ok(r)
    }

    /// Appends a single-result op and returns its result.
    pub fn push1(&mut self, op: Op, args: &[Value]) -> Result<Value, String> {
        Ok(self.push(op, args)?[0])
    }

    /// Whether running `inst` may return an error at run time (`Op::may_fail`), an `ifelse`
    /// when an instruction of either branch may.
    pub fn may_fail(&self, inst: &Inst) -> bool {
        if inst.op == Op::IfElse {
            return inst
                .regions
                .iter()
                .any(|r| r.body.iter().any(|i| self.may_fail(i)));
        }
        let args: Vec<&TensorType> = inst.args.iter().map(|&a| self.ty(a)).collect();
        let results: Vec<&TensorType> = inst.results.iter().map(|&r| self.ty(r)).collect();
        inst.op.may_fail(&args, &results)
    }

    /// Number of instructions, nested ones included.
    pub fn inst_count(&self) -> usize {
        fn count(b: &[Inst]) -> usize {
            b.iter()
                .map(|i| 1 + i.regions.iter().map(|r| count(&r.body)).sum::<usize>())
                .sum()
        }
        count(&self.body)
    }
}
