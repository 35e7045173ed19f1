//! The user's graph, in Theano's structures: Variables (inputs, shared variables, constants and
//! results of Applies), Apply nodes of Ops, and their types.
//!
//! A `Graph` is a shared, append-only arena. Building is append-only, so creation order is a
//! topological order, and compilation only reads the graph: the user's graph is never changed
//! by compiling a function of it. A `Var` is a cheap handle (the graph plus an index) that the
//! arithmetic operators and methods in `build.rs` work on.
//!
//! Type errors do not panic: an op applied to inputs of the wrong types yields a *poisoned*
//! variable that carries the error and the caller's source location. The error surfaces when a
//! function using it is compiled (or at once through [`Var::check`] or the `try_` methods).

mod build;
mod control;
mod debugprint;
mod gradient_stops;
mod lambda;
mod scan;
mod sorting;
mod to_ssa;
mod windowed;

pub use build::{concat, scatter_add, select, Operand};
pub use control::ifelse;
pub use debugprint::debugprint;
pub use gradient_stops::{STOP_GRADIENT, ZERO_GRAD};
pub use lambda::{elementwise, unfold_program, Elementwise, Lambda, Scalar, ScalarOperand};
pub(crate) use scan::scan_with;
pub use scan::{scan, scan_reverse, scan_steps, ScanStep};
pub use sorting::scatter_set;
pub use to_ssa::{to_ssa, SsaFunction};

use crate::error::{Error, Result, SourceLoc};
use crate::ir::custom::CustomOpRef;
use crate::ir::{infer, DType, Op, TensorType};
use crate::tensor::Tensor;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use crate::shared::SharedCell;

/// The index of a variable in its graph's arena ([`GraphData::vars`]); ids follow creation
/// order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub(crate) u32);

/// The index of an Apply node in its graph's arena ([`GraphData::applies`]); ids follow
/// creation order, which is a topological order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApplyId(pub(crate) u32);

/// What a variable is.
#[derive(Clone, Debug)]
pub enum VarKind {
    /// A function input, supplied at call time.
    Input,
    /// A shared variable with its storage.
    Shared(SharedCell),
    /// A constant with its data. Never an input, never destroyed, always foldable.
    Constant(Tensor),
    /// Output `index` of an Apply.
    Result {
        /// The Apply that computes it.
        apply: ApplyId,
        /// Its position among the Apply's outputs.
        index: usize,
    },
    /// A parameter of a `scan`'s body (a carry or a slice of a sequence): it has a value only
    /// inside that body, at each step.
    RegionParam,
    /// A value whose op failed its type check; compiling anything that uses it gives the error.
    Poisoned(Error),
}

/// A variable as the arena stores it.
#[derive(Clone, Debug)]
pub struct VarData {
    /// Its dtype and shape (`None` dims are known only at call time).
    pub ty: TensorType,
    /// The user's name for it, if given.
    pub name: Option<String>,
    /// What it is: an input, shared, a constant, a result, a region parameter or poisoned.
    pub kind: VarKind,
}

/// An Apply node as the arena stores it: an op applied to variables.
#[derive(Clone, Debug)]
pub struct ApplyData {
    /// The op applied.
    pub op: Op,
    /// Its operands, in order.
    pub inputs: Vec<VarId>,
    /// The variables it computes (each a [`VarKind::Result`] of this Apply).
    pub outputs: Vec<VarId>,
    /// Where the user built this node.
    pub loc: SourceLoc,
    /// For `ifelse`: the Applies built by each branch's closure (a range of Apply ids), which
    /// become its regions. Empty for other ops.
    pub regions: Vec<std::ops::Range<u32>>,
    /// For `scan`: the parameters of its body (`VarKind::RegionParam`). Empty for other ops.
    pub params: Vec<VarId>,
}

/// The arena a [`Graph`] shares: every variable and Apply built, in creation order.
#[derive(Default, Debug)]
pub struct GraphData {
    /// The variables, indexed by [`VarId`].
    pub vars: Vec<VarData>,
    /// The Apply nodes, indexed by [`ApplyId`].
    pub applies: Vec<ApplyData>,
}

/// A graph of tensor variables. Cloning gives another handle to the same graph.
#[derive(Clone, Default)]
pub struct Graph {
    inner: Arc<RwLock<GraphData>>,
}

/// A variable of a graph.
#[derive(Clone)]
pub struct Var {
    graph: Graph,
    id: VarId,
}

/// An Apply node of a graph.
#[derive(Clone)]
pub struct Apply {
    graph: Graph,
    id: ApplyId,
}

/// Whether `op` on `inputs` is computed in f32 by the graph API (`Graph::apply_in_f32`): it
/// computes and some operand is a half, or it is a `matmul` of a half and an f32. Not where
/// an operand is poisoned: its error goes on as it is (and a poisoned value keeps its half
/// type, so widening it would never end).
fn computes_on_halves(op: &Op, inputs: &[&Var]) -> bool {
    if inputs
        .iter()
        .any(|v| matches!(v.kind(), VarKind::Poisoned(_)))
    {
        return false;
    }
    let mut dtypes = inputs.iter().map(|v| v.dtype());
    let Some(h) = dtypes.clone().find(|d| d.is_half()) else {
        return false;
    };
    !op.takes_halves() || (*op == Op::MatMul && dtypes.any(|d| d != h))
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Read access to the arena. A poisoned lock only means another thread panicked while
    /// holding it; the data is append-only and stays consistent, so it is used anyway.
    pub fn data(&self) -> RwLockReadGuard<'_, GraphData> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn data_mut(&self) -> RwLockWriteGuard<'_, GraphData> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `other` is a handle to this same graph (not merely an equal one).
    pub fn same(&self, other: &Graph) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A fresh parameter of a region (`VarKind::RegionParam`) of type `ty`.
    pub(crate) fn region_param(&self, ty: TensorType) -> Var {
        self.add_var(VarData {
            ty,
            name: None,
            kind: VarKind::RegionParam,
        })
    }

    fn add_var(&self, data: VarData) -> Var {
        let mut g = self.data_mut();
        g.vars.push(data);
        Var {
            graph: self.clone(),
            id: VarId(g.vars.len() as u32 - 1),
        }
    }

    /// A function input of the given dtype and shape (`None` for a dim known only at call
    /// time). A negative size poisons the input: the error, naming this line, comes back from
    /// whatever uses it.
    #[track_caller]
    pub fn input(&self, name: &str, dtype: DType, shape: impl AsRef<[Option<i64>]>) -> Var {
        let shape = shape.as_ref();
        let known: Vec<i64> = shape.iter().flatten().copied().collect();
        let kind = match crate::ir::types::sizes(&format!("input {name:?}"), &known) {
            Ok(_) => VarKind::Input,
            Err(msg) => VarKind::Poisoned(Error::Type {
                msg,
                loc: Some(SourceLoc::caller()),
            }),
        };
        // A negative size stands as 0 in the poisoned input's type, which nothing compiles.
        let shape: Vec<Option<usize>> = (shape.iter())
            .map(|d| d.map(|d| usize::try_from(d).unwrap_or(0)))
            .collect();
        self.add_var(VarData {
            ty: TensorType::new(dtype, shape),
            name: Some(name.to_string()),
            kind,
        })
    }

    /// An input of type `ty` (the shape as the IR holds it), for the crate's own graphs.
    pub(crate) fn input_of(&self, name: &str, ty: TensorType) -> Var {
        self.add_var(VarData {
            ty,
            name: Some(name.to_string()),
            kind: VarKind::Input,
        })
    }

    /// A shared variable holding `value`. Its type is the value's dtype and shape; compiled
    /// functions read it and may update it (`FunctionBuilder::update`).
    pub fn shared(&self, name: &str, value: impl Into<Tensor>) -> Var {
        let value = value.into();
        self.add_var(VarData {
            ty: value.ty(),
            name: Some(name.to_string()),
            kind: VarKind::Shared(crate::shared::SharedValue::new(value)),
        })
    }

    /// A shared variable named `name` of `like`'s dtype and shape, every element `value`
    /// (an optimizer's moments: `g.shared_like("m.w", &w, 0.0)`). An error where `like`'s
    /// shape is not known (a shared variable holds a value from the start).
    pub fn shared_like(&self, name: &str, like: &Var, value: f64) -> Result<Var> {
        let ty = like.ty();
        let shape = ty.known_shape().ok_or_else(|| {
            Error::Shape(format!(
                "shared_like: {} is {ty}, and a shared variable needs every dim known",
                like.label()
            ))
        })?;
        Ok(self.shared(name, Tensor::full(ty.dtype, &shape, value)))
    }

    /// A constant holding `value`.
    pub fn constant(&self, value: impl Into<Tensor>) -> Var {
        let value = value.into();
        self.add_var(VarData {
            ty: value.ty(),
            name: None,
            kind: VarKind::Constant(value),
        })
    }

    /// Applies `op` to `inputs`. Type errors are returned at once.
    #[track_caller]
    pub fn try_apply(&self, op: Op, inputs: &[&Var]) -> Result<Vec<Var>> {
        let outs = self.apply_at(op, inputs, SourceLoc::caller());
        for o in &outs {
            o.check()?;
        }
        Ok(outs)
    }

    /// Applies `op` to `inputs`; a type error poisons the outputs (see the module docs).
    #[track_caller]
    pub fn apply(&self, op: Op, inputs: &[&Var]) -> Vec<Var> {
        self.apply_at(op, inputs, SourceLoc::caller())
    }

    pub(crate) fn apply_at(&self, op: Op, inputs: &[&Var], loc: SourceLoc) -> Vec<Var> {
        if computes_on_halves(&op, inputs) {
            return self.apply_in_f32(op, inputs, loc);
        }
        let mut op = op;
        if let Op::Random { dtype, .. } | Op::Arange { dtype, .. } = &mut op {
            if dtype.is_half() {
                // Made in f32 and rounded once, as an op on halves is.
                let h = std::mem::replace(dtype, DType::F32);
                let made = self.apply_at(op, inputs, loc).swap_remove(0);
                return vec![self.cast_at(&made, h, loc)];
            }
        }
        match self.check_inputs(&op, inputs) {
            Ok(types) => self.push_apply(op, inputs, types, loc, Vec::new(), Vec::new()),
            Err(e) => {
                let ty = inputs
                    .first()
                    .map(|v| v.ty())
                    .unwrap_or(TensorType::scalar(DType::F32));
                vec![self.add_var(VarData {
                    ty,
                    name: None,
                    kind: VarKind::Poisoned(e.at(loc)),
                })]
            }
        }
    }

    /// `op` computed in f32 on operands some of which are halves (storage types, which the
    /// IR's computing ops refuse): the halves cast to f32, and results cast back to the
    /// operands' half type where every float operand had that one type (as JAX and numpy
    /// keep `f16 + f16` in f16); mixed with another float type, results stay as computed.
    fn apply_in_f32(&self, op: Op, inputs: &[&Var], loc: SourceLoc) -> Vec<Var> {
        let float_types: Vec<DType> = inputs
            .iter()
            .map(|v| v.dtype())
            .filter(|d| d.is_float())
            .collect();
        let back = float_types
            .first()
            .copied()
            .filter(|&d| float_types.iter().all(|&e| e == d));
        let widened: Vec<Var> = inputs
            .iter()
            .map(|v| match v.dtype().is_half() {
                true => self.widen(v, loc),
                false => (*v).clone(),
            })
            .collect();
        let outs = self.apply_at(op, &widened.iter().collect::<Vec<_>>(), loc);
        match back {
            Some(h) if h.is_half() && !matches!(outs[0].kind(), VarKind::Poisoned(_)) => outs
                .iter()
                .map(|o| match o.dtype() == DType::F32 {
                    true => self.cast_at(o, h, loc),
                    false => o.clone(),
                })
                .collect(),
            _ => outs,
        }
    }

    /// A half `v` in f32. A transposed half is widened before its transpose, so that the
    /// transpose stays next to what reads it (a `matmul` then reads it through strides, as a
    /// gradient's `x^T @ g` does, instead of a transposed copy being converted).
    fn widen(&self, v: &Var, loc: SourceLoc) -> Var {
        if let Some(a) = v.owner() {
            if let (Op::Transpose { .. }, [x]) = (a.op(), a.inputs().as_slice()) {
                let wide = self.widen(x, loc);
                return self.apply_at(a.op(), &[&wide], loc).swap_remove(0);
            }
        }
        self.cast_at(v, DType::F32, loc)
    }

    fn cast_at(&self, v: &Var, to: DType, loc: SourceLoc) -> Var {
        self.apply_at(Op::Cast { to }, &[v], loc).swap_remove(0)
    }

    /// Appends an Apply whose output types are already known.
    pub(crate) fn push_apply(
        &self,
        op: Op,
        inputs: &[&Var],
        types: Vec<TensorType>,
        loc: SourceLoc,
        regions: Vec<std::ops::Range<u32>>,
        params: Vec<VarId>,
    ) -> Vec<Var> {
        {
            {
                let mut g = self.data_mut();
                let apply = ApplyId(g.applies.len() as u32);
                let base = g.vars.len() as u32;
                let outputs: Vec<VarId> =
                    (0..types.len() as u32).map(|i| VarId(base + i)).collect();
                for (index, ty) in types.into_iter().enumerate() {
                    g.vars.push(VarData {
                        ty,
                        name: None,
                        kind: VarKind::Result { apply, index },
                    });
                }
                let inputs = inputs.iter().map(|v| v.id).collect();
                g.applies.push(ApplyData {
                    op,
                    inputs,
                    outputs: outputs.clone(),
                    loc,
                    regions,
                    params,
                });
                drop(g);
                outputs
                    .into_iter()
                    .map(|id| Var {
                        graph: self.clone(),
                        id,
                    })
                    .collect()
            }
        }
    }

    fn check_inputs(&self, op: &Op, inputs: &[&Var]) -> Result<Vec<TensorType>> {
        for v in inputs {
            if !v.graph.same(self) {
                return Err(Error::ty(format!(
                    "{}: an operand belongs to another graph",
                    op.name()
                )));
            }
        }
        let g = self.data();
        for v in inputs {
            if let VarKind::Poisoned(e) = &g.vars[v.id.0 as usize].kind {
                return Err(e.clone());
            }
        }
        let tys: Vec<&TensorType> = inputs.iter().map(|v| &g.vars[v.id.0 as usize].ty).collect();
        infer(op, &tys).map_err(Error::ty)
    }

    /// Applies a user-defined op; returns its visible outputs (hidden ones stay in the graph).
    #[track_caller]
    pub fn apply_custom(&self, op: impl Into<CustomOpRef>, inputs: &[&Var]) -> Vec<Var> {
        let op = op.into();
        let hidden = op.num_hidden_outputs();
        let mut outs = self.apply_at(Op::Custom(op), inputs, SourceLoc::caller());
        if outs.len() > hidden && !matches!(outs[0].kind(), VarKind::Poisoned(_)) {
            outs.truncate(outs.len() - hidden);
        }
        outs
    }

    /// Applies a user-defined op and returns its default output (`CustomOp::default_output`).
    #[track_caller]
    pub fn apply_custom_default(&self, op: impl Into<CustomOpRef>, inputs: &[&Var]) -> Var {
        let op = op.into();
        let k = op.default_output();
        let mut outs = self.apply_custom(op, inputs);
        if k < outs.len() {
            outs.swap_remove(k)
        } else {
            outs.swap_remove(0)
        }
    }

    /// `apply_custom` with type errors returned at once.
    #[track_caller]
    pub fn try_apply_custom(
        &self,
        op: impl Into<CustomOpRef>,
        inputs: &[&Var],
    ) -> Result<Vec<Var>> {
        let outs = self.apply_custom(op, inputs);
        for o in &outs {
            o.check()?;
        }
        Ok(outs)
    }

    /// The Applies that use `v`, with the input position where they use it (Theano's clients).
    pub fn clients(&self, v: &Var) -> Vec<(Apply, usize)> {
        let g = self.data();
        let mut out = Vec::new();
        for (i, a) in g.applies.iter().enumerate() {
            for (pos, &inp) in a.inputs.iter().enumerate() {
                if inp == v.id {
                    out.push((
                        Apply {
                            graph: self.clone(),
                            id: ApplyId(i as u32),
                        },
                        pos,
                    ));
                }
            }
        }
        out
    }

    /// The Applies that `outputs` depend on, in topological order.
    pub fn toposort(&self, outputs: &[&Var]) -> Vec<Apply> {
        let g = self.data();
        let needed = reachable_applies(&g, outputs.iter().map(|v| v.id));
        needed
            .into_iter()
            .map(|id| Apply {
                graph: self.clone(),
                id,
            })
            .collect()
    }

    /// The handle of the variable `id` of this graph.
    pub fn var(&self, id: VarId) -> Var {
        Var {
            graph: self.clone(),
            id,
        }
    }
}

/// The input variables (`VarKind::Input`) that `outputs` are computed from, in the order they
/// were made: the inputs a function of `outputs` needs.
pub(crate) fn input_vars(outputs: &[Var]) -> Vec<Var> {
    let Some(graph) = outputs.first().map(Var::graph) else {
        return Vec::new();
    };
    let g = graph.data();
    let roots: Vec<VarId> = outputs.iter().map(Var::id).collect();
    used_vars(&g, &roots, &reachable_applies(&g, roots.iter().copied()))
        .into_iter()
        .filter(|v| matches!(g.vars[v.0 as usize].kind, VarKind::Input))
        .map(|v| graph.var(v))
        .collect()
}

/// Every variable a function of `roots` touches: the roots and the inputs of `applies` (the
/// Applies they need), sorted, each once.
pub(crate) fn used_vars(g: &GraphData, roots: &[VarId], applies: &[ApplyId]) -> Vec<VarId> {
    let mut used = roots.to_vec();
    for &a in applies {
        used.extend(g.applies[a.0 as usize].inputs.iter().copied());
    }
    used.sort_unstable();
    used.dedup();
    used
}

/// The Applies reachable backwards from `roots`, sorted by creation, which is a topological
/// order because an Apply's inputs always exist before it.
pub(crate) fn reachable_applies(
    g: &GraphData,
    roots: impl IntoIterator<Item = VarId>,
) -> Vec<ApplyId> {
    let mut seen_var = vec![false; g.vars.len()];
    let mut seen_apply = vec![false; g.applies.len()];
    let mut stack: Vec<VarId> = roots.into_iter().collect();
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen_var[v.0 as usize], true) {
            continue;
        }
        if let VarKind::Result { apply, .. } = g.vars[v.0 as usize].kind {
            if !std::mem::replace(&mut seen_apply[apply.0 as usize], true) {
                stack.extend(g.applies[apply.0 as usize].inputs.iter().copied());
            }
        }
    }
    (0..g.applies.len())
        .filter(|&i| seen_apply[i])
        .map(|i| ApplyId(i as u32))
        .collect()
}

impl Var {
    /// The graph the variable belongs to.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The variable's index in its graph.
    pub fn id(&self) -> VarId {
        self.id
    }

    fn with<R>(&self, f: impl FnOnce(&VarData) -> R) -> R {
        f(&self.graph.data().vars[self.id.0 as usize])
    }

    /// The variable's type: dtype and shape (`None` for a dim known only at call time).
    pub fn ty(&self) -> TensorType {
        self.with(|d| d.ty.clone())
    }

    /// The variable's element type.
    pub fn dtype(&self) -> DType {
        self.with(|d| d.ty.dtype)
    }

    /// The variable's number of dims.
    pub fn rank(&self) -> usize {
        self.with(|d| d.ty.rank())
    }

    /// The variable's name, if it has one.
    pub fn name(&self) -> Option<String> {
        self.with(|d| d.name.clone())
    }

    /// What the variable is (a copy: a shared variable's cell is shared, not copied).
    pub fn kind(&self) -> VarKind {
        self.with(|d| d.kind.clone())
    }

    /// Gives the variable a name (shown by debugprint and in the IR).
    pub fn named(self, name: &str) -> Var {
        self.graph.data_mut().vars[self.id.0 as usize].name = Some(name.to_string());
        self
    }

    /// The Apply that produced this variable, if any.
    pub fn owner(&self) -> Option<Apply> {
        self.with(|d| match d.kind {
            VarKind::Result { apply, .. } => Some(Apply {
                graph: self.graph.clone(),
                id: apply,
            }),
            _ => None,
        })
    }

    /// `Err` with the type error if this variable is poisoned.
    pub fn check(&self) -> Result<&Var> {
        match self.kind() {
            VarKind::Poisoned(e) => Err(e),
            _ => Ok(self),
        }
    }

    /// Whether the variable is a constant ([`VarKind::Constant`]).
    pub fn is_constant(&self) -> bool {
        matches!(self.kind(), VarKind::Constant(_))
    }

    /// The value of a constant or shared variable.
    ///
    /// # Panics
    /// Where a shared variable's newest value is on the GPU (`Backend::Gpu` keeps it there)
    /// and cannot be copied back because the device failed; [`Var::try_value`] returns that
    /// error instead.
    pub fn value(&self) -> Option<Tensor> {
        self.try_value().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Var::value`], with the error of a value that could not be copied back from the GPU.
    pub fn try_value(&self) -> Result<Option<Tensor>> {
        match self.kind() {
            VarKind::Constant(t) => Ok(Some(t)),
            VarKind::Shared(c) => c.value().map(Some),
            _ => Ok(None),
        }
    }

    /// Replaces the value of a shared variable; it must keep its dtype and shape.
    pub fn set_value(&self, value: impl Into<Tensor>) -> Result<()> {
        let value = value.into();
        let VarKind::Shared(cell) = self.kind() else {
            return Err(Error::Input(format!(
                "{} is not a shared variable",
                self.label()
            )));
        };
        let ty = self.ty();
        if value.dtype() != ty.dtype || !ty.accepts_shape(value.shape()) {
            return Err(Error::Input(format!(
                "shared variable {}: expected {ty}, got {}{:?}",
                self.label(),
                value.dtype(),
                value.shape()
            )));
        }
        cell.set(value);
        Ok(())
    }

    /// A short description for messages: the name, or the op that made it.
    pub fn label(&self) -> String {
        if let Some(n) = self.name() {
            return format!("`{n}`");
        }
        match self.owner() {
            Some(a) => format!("the result of {} built at {}", a.op().name(), a.loc()),
            None => format!("variable #{}", self.id.0),
        }
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Var({}, {})", self.label(), self.ty())
    }
}

impl Apply {
    fn with<R>(&self, f: impl FnOnce(&ApplyData) -> R) -> R {
        f(&self.graph.data().applies[self.id.0 as usize])
    }

    /// The node's index in its graph.
    pub fn id(&self) -> ApplyId {
        self.id
    }

    /// The op the node applies.
    pub fn op(&self) -> Op {
        self.with(|a| a.op.clone())
    }

    /// Where the user built the node.
    pub fn loc(&self) -> SourceLoc {
        self.with(|a| a.loc)
    }

    /// The node's operands, in order.
    pub fn inputs(&self) -> Vec<Var> {
        self.with(|a| a.inputs.iter().map(|&id| self.graph.var(id)).collect())
    }

    /// For `ifelse`: the Apply-id ranges of its branches; for `scan`: that of its body.
    pub fn regions(&self) -> Vec<std::ops::Range<u32>> {
        self.with(|a| a.regions.clone())
    }

    /// For `scan`: the parameters of its body (carries, then one slice per sequence).
    pub fn params(&self) -> Vec<Var> {
        self.with(|a| a.params.iter().map(|&id| self.graph.var(id)).collect())
    }

    /// The variables the node computes, in order (hidden outputs of a custom op included).
    pub fn outputs(&self) -> Vec<Var> {
        self.with(|a| a.outputs.iter().map(|&id| self.graph.var(id)).collect())
    }
}

impl Graph {
    /// Rebuilds the Applies with ids in `range` (in order), reading `map`'s replacements for
    /// their inputs, and records each old output's new variable in `map`. Nested regions move
    /// with their Applies, since each old Apply makes exactly one new one; a nested `scan`'s
    /// body parameters are made afresh first (its body's Applies come before it and read them).
    pub(crate) fn clone_range(
        &self,
        range: std::ops::Range<u32>,
        map: &mut std::collections::HashMap<VarId, Var>,
    ) {
        let shift = self.data().applies.len() as i64 - range.start as i64;
        let params: Vec<VarId> = self.data().applies[range.start as usize..range.end as usize]
            .iter()
            .flat_map(|a| a.params.iter().copied())
            .collect();
        for p in params {
            let ty = self.data().vars[p.0 as usize].ty.clone();
            map.insert(p, self.region_param(ty));
        }
        for a in range {
            let ad = self.data().applies[a as usize].clone();
            let inputs: Vec<Var> = ad
                .inputs
                .iter()
                .map(|i| map.get(i).cloned().unwrap_or_else(|| self.var(*i)))
                .collect();
            let refs: Vec<&Var> = inputs.iter().collect();
            let types = ad
                .outputs
                .iter()
                .map(|o| self.data().vars[o.0 as usize].ty.clone())
                .collect();
            let regions = ad
                .regions
                .iter()
                .map(|r| (r.start as i64 + shift) as u32..(r.end as i64 + shift) as u32)
                .collect();
            let params = ad.params.iter().map(|p| map[p].id).collect();
            let outs = self.push_apply(ad.op.clone(), &refs, types, ad.loc, regions, params);
            for (o, n) in ad.outputs.iter().zip(outs) {
                map.insert(*o, n);
            }
        }
    }
}
