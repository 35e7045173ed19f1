//! The e-graph language for kiln's ops, and the analysis every e-class carries.
//!
//! A node is a head and its argument e-classes. Ops are interned: a node holds a small
//! [`OpId`] into the analysis' table of [`Op`]s (with their parameters: axes, perms, dtypes,
//! constants), so nodes are cheap to hash, compare and order whatever their parameters, and two
//! equal ops on equal arguments are one node (merging is hash-consing). An instruction with
//! several results, or one that must never merge with an equal one (an `ifelse`, a custom op
//! with state or its own random stream), is a [`Head::Tuple`] whose results are read with
//! [`Head::Get`].
//!
//! The analysis gives each e-class its type (dtype and shape, unknown dims included), its value
//! when that is a constant small enough to fold (computed with the op's own `perform`, so
//! folding never disagrees with running), and whether every element is one number (`splat`),
//! which is what the algebraic rules test.

use crate::ir::custom::Resource;
use crate::ir::{infer, BinaryOp, Op, ReduceOp, TensorType, UnaryOp};
use crate::perform::perform;
use crate::tensor::Tensor;
use egg::{Analysis, DidMerge, EGraph, Id, Language};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

/// The largest result, in elements, that is folded into a constant.
pub const MAX_FOLDED: usize = 4096;

/// The most input elements a fold may read: folding is compile-time work, and a small result
/// of a huge constant (a sum, a matmul) is left to run time.
pub const MAX_FOLD_INPUT: usize = 1 << 20;

/// An op interned in [`Ops`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

/// The table of the ops an e-graph's nodes refer to. Equal ops get one id.
#[derive(Default, Debug)]
pub struct Ops {
    ops: Vec<Op>,
    index: HashMap<Op, OpId>,
}

impl Ops {
    /// The id of `op`, adding it to the table when it is new.
    pub fn intern(&mut self, op: Op) -> OpId {
        if let Some(&id) = self.index.get(&op) {
            return id;
        }
        let id = OpId(self.ops.len() as u32);
        self.ops.push(op.clone());
        self.index.insert(op, id);
        id
    }

    /// As [`Ops::intern`], cloning `op` only when it is new.
    pub fn intern_ref(&mut self, op: &Op) -> OpId {
        match self.index.get(op) {
            Some(&id) => id,
            None => self.intern(op.clone()),
        }
    }

    /// The op interned as `id`.
    ///
    /// # Panics
    ///
    /// Where `id` is not an id of this table.
    pub fn get(&self, id: OpId) -> &Op {
        &self.ops[id.0 as usize]
    }

    /// The id of `op` if some node uses it.
    pub fn lookup(&self, op: &Op) -> Option<OpId> {
        self.index.get(op).copied()
    }
}

/// The family of a unary op.
pub const fn fam_unary(u: UnaryOp) -> u16 {
    u as u16
}
/// The family of a binary op.
pub const fn fam_binary(b: BinaryOp) -> u16 {
    32 + b as u16
}
/// The family of a reduction (any axes).
pub const fn fam_reduce(r: ReduceOp) -> u16 {
    64 + r as u16
}
/// The family of `select`.
pub const FAM_SELECT: u16 = 96;
/// The family of `cast` (to any dtype).
pub const FAM_CAST: u16 = 97;
/// The family of `transpose` (any perm).
pub const FAM_TRANSPOSE: u16 = 98;
/// The family of `reshape` (any shape).
pub const FAM_RESHAPE: u16 = 99;
/// The family of `broadcast_to` (any shape).
pub const FAM_BROADCAST_TO: u16 = 100;
/// The family of `expand_dims` (any axes).
pub const FAM_EXPAND_DIMS: u16 = 101;
/// The family of `squeeze` (any axes).
pub const FAM_SQUEEZE: u16 = 102;
/// The family of constants (`Op::Const`, any value).
pub const FAM_CONST: u16 = 106;

/// An op's family: the op without its parameters (`sum` of any axes, `transpose` of any perm).
/// It is what rules search by.
pub fn family(op: &Op) -> u16 {
    match op {
        Op::Unary(u) => fam_unary(*u),
        Op::Binary(b) => fam_binary(*b),
        Op::Reduce { op, .. } => fam_reduce(*op),
        Op::Select => FAM_SELECT,
        Op::Cast { .. } => FAM_CAST,
        Op::Transpose { .. } => FAM_TRANSPOSE,
        Op::Reshape { .. } => FAM_RESHAPE,
        Op::BroadcastTo { .. } => FAM_BROADCAST_TO,
        Op::ExpandDims { .. } => FAM_EXPAND_DIMS,
        Op::Squeeze { .. } => FAM_SQUEEZE,
        Op::Concat { .. } => 103,
        Op::Slice { .. } => 104,
        Op::MatMul => 105,
        Op::Const(_) => FAM_CONST,
        Op::Zeros { .. } => 107,
        Op::Ones { .. } => 108,
        Op::Full { .. } => 109,
        Op::Arange { .. } => 110,
        Op::Random { .. } => 111,
        Op::IfElse => 112,
        Op::Composite { .. } => 113,
        Op::FusedReduce { .. } => 114,
        Op::Custom(_) => 115,
        Op::Take { .. } => 116,
        Op::ScatterAdd { .. } => 117,
        Op::OneHot { .. } => 118,
        Op::Cumsum { .. } => 119,
        Op::TakeAlongAxis { .. } => 120,
        Op::ScatterSet { .. } => 121,
        Op::Cumprod { .. } => 122,
        Op::CumprodGrad { .. } => 123,
        Op::Sort { .. } => 124,
        Op::Argsort { .. } => 125,
        Op::Conv2d(_) => 126,
        Op::Conv2dGradImage { .. } => 127,
        Op::Conv2dGradFilter { .. } => 128,
        Op::Pool2d(_) => 129,
        Op::Pool2dGrad(_) => 130,
        Op::Scan { .. } => 131,
    }
}

/// What a node is, apart from its arguments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Head {
    /// Parameter `i` of the function.
    Param(u32),
    /// A pure op with one result; `fam` is [`family`] of the op.
    Op {
        /// The op's family, which rules search by.
        fam: u16,
        /// The op, with its parameters.
        op: OpId,
    },
    /// An instruction with several results, or one that must not merge with an equal one
    /// (`tag` is then unique, else 0). Its e-class has no tensor type; [`Head::Get`] reads a
    /// result.
    Tuple {
        /// The op, with its parameters.
        op: OpId,
        /// A number unique to this instruction where it must not merge; 0 otherwise.
        tag: u32,
    },
    /// Result `i` of the tuple that is the only argument.
    Get(u32),
}

/// What rules search by: an op's family, or the kind of head.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Disc {
    /// A [`Head::Param`], any parameter.
    Param,
    /// A [`Head::Op`] of this family.
    Op(u16),
    /// A [`Head::Tuple`], any op.
    Tuple,
    /// A [`Head::Get`], any result.
    Get,
}

/// A node of the e-graph: a head and its argument e-classes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node {
    /// What the node is.
    pub head: Head,
    /// The e-classes of its arguments, in order.
    pub args: SmallVec<[Id; 3]>,
}

impl Node {
    /// The node `head` of the e-classes `args`.
    pub fn new(head: Head, args: &[Id]) -> Node {
        Node {
            head,
            args: SmallVec::from_slice(args),
        }
    }

    /// The op of an `Op` or `Tuple` node.
    pub fn op_id(&self) -> Option<OpId> {
        match self.head {
            Head::Op { op, .. } | Head::Tuple { op, .. } => Some(op),
            _ => None,
        }
    }

    /// The family of an `Op` node.
    pub fn fam(&self) -> Option<u16> {
        match self.head {
            Head::Op { fam, .. } => Some(fam),
            _ => None,
        }
    }
}

impl Language for Node {
    type Discriminant = Disc;

    fn discriminant(&self) -> Disc {
        match self.head {
            Head::Param(_) => Disc::Param,
            Head::Op { fam, .. } => Disc::Op(fam),
            Head::Tuple { .. } => Disc::Tuple,
            Head::Get(_) => Disc::Get,
        }
    }

    fn matches(&self, other: &Self) -> bool {
        self.head == other.head && self.args.len() == other.args.len()
    }

    fn children(&self) -> &[Id] {
        &self.args
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.args
    }
}

/// The type of an e-class: one tensor, or the results of a tuple.
#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    /// The e-class is one tensor of this type.
    One(TensorType),
    /// The e-class is a tuple whose results have these types.
    Many(Vec<TensorType>),
}

/// What the analysis knows of an e-class.
#[derive(Clone, Debug)]
pub struct Data {
    /// The e-class's type.
    pub ty: Ty,
    /// The e-class is this constant (an interned `Op::Const`).
    pub constant: Option<OpId>,
    /// Every element of the value is this number (a constant, `zeros`, `full`, ...).
    pub splat: Option<f64>,
}

impl Data {
    /// The tensor type (`None` for a tuple).
    pub fn ty(&self) -> Option<&TensorType> {
        match &self.ty {
            Ty::One(t) => Some(t),
            Ty::Many(_) => None,
        }
    }
}

/// Whether two equal applications of `op` to equal arguments give equal values, so they may
/// be one e-class (merging). Ops with state or a per-position random stream may not; `ifelse`
/// and `scan` hold regions the e-graph does not look into.
pub fn mergeable(op: &Op) -> bool {
    match op {
        Op::IfElse | Op::Scan { .. } => false,
        Op::Custom(c) => c.num_hidden_outputs() == 0 && !c.resources().contains(&Resource::Random),
        _ => true,
    }
}

/// Whether an op may be computed at compile time when its arguments are constants.
fn foldable(op: &Op) -> bool {
    !matches!(
        op,
        Op::Const(_) | Op::Custom(_) | Op::IfElse | Op::Scan { .. } | Op::Random { .. }
    )
}

/// The number every element of `t` equals, if there is one (compared by bits).
pub fn splat_of(t: &Tensor) -> Option<f64> {
    fn same<T: Copy>(a: &ndarray::ArrayD<T>, eq: impl Fn(T, T) -> bool) -> Option<T> {
        let first = *a.iter().next()?;
        a.iter().all(|&x| eq(x, first)).then_some(first)
    }
    match t {
        Tensor::Bool(a) => same(a, |x, y| x == y).map(|x| x as u8 as f64),
        Tensor::I32(a) => same(a, |x, y| x == y).map(|x| x as f64),
        Tensor::I64(a) => same(a, |x, y| x == y).map(|x| x as f64),
        Tensor::F32(a) => same(a, |x, y| x.to_bits() == y.to_bits()).map(|x| x as f64),
        Tensor::F64(a) => same(a, |x, y| x.to_bits() == y.to_bits()),
        Tensor::F16(a) => same(a, |x, y| x.to_bits() == y.to_bits()).map(|x| x.to_f64()),
        Tensor::BF16(a) => same(a, |x, y| x.to_bits() == y.to_bits()).map(|x| x.to_f64()),
    }
}

/// The analysis: types, constants (folding) and splats; it also holds what the e-graph's nodes
/// refer to (the op table, the parameters' types, the result types of `ifelse` tuples) and
/// the nodes that stabilizing rules replaced, which extraction avoids.
#[derive(Default, Debug)]
pub struct KilnAnalysis {
    /// The ops the nodes refer to.
    pub ops: Ops,
    /// The type of each parameter of the function ([`Head::Param`]).
    pub param_types: Vec<TensorType>,
    /// Result types of unique tuples that inference cannot give (an `ifelse`'s come from its
    /// regions), by tag.
    pub tuple_types: HashMap<u32, Vec<TensorType>>,
    /// Nodes a stabilizing rule replaced by a better-behaved equal term.
    pub avoid: Vec<Node>,
    /// Whether to fold constants.
    pub fold: bool,
}

/// An e-graph of kiln's ops with its analysis.
pub type KilnEGraph = EGraph<Node, KilnAnalysis>;

/// The tensor types of `args`, if every one is a tensor.
pub fn arg_types<'a>(eg: &'a KilnEGraph, args: &[Id]) -> Option<Vec<&'a TensorType>> {
    args.iter().map(|&a| eg[a].data.ty()).collect()
}

fn fold(eg: &mut KilnEGraph, op: OpId, args: &[Id], ty: &TensorType) -> Option<OpId> {
    let n_out = ty.known_shape()?.iter().product::<usize>();
    if !eg.analysis.fold || n_out > MAX_FOLDED || !foldable(eg.analysis.ops.get(op)) {
        return None;
    }
    let consts: Option<Vec<OpId>> = args.iter().map(|&a| eg[a].data.constant).collect();
    let consts = consts?;
    let ops = &eg.analysis.ops;
    let tensors: Vec<&Tensor> = consts
        .iter()
        .map(|&c| match ops.get(c) {
            Op::Const(t) => t,
            _ => unreachable!("constants are interned Op::Const"),
        })
        .collect();
    if tensors.iter().map(|t| t.len()).sum::<usize>() > MAX_FOLD_INPUT {
        return None;
    }
    // A failure (a shape error, say) is left for run time to report.
    let t = perform(ops.get(op), &tensors).ok()?.pop()?;
    if t.ty() != *ty {
        return None;
    }
    Some(eg.analysis.ops.intern(Op::Const(t)))
}

impl Analysis<Node> for KilnAnalysis {
    type Data = Data;

    fn make(eg: &mut KilnEGraph, node: &Node, _id: Id) -> Data {
        match node.head {
            Head::Param(i) => Data {
                ty: Ty::One(eg.analysis.param_types[i as usize].clone()),
                constant: None,
                splat: None,
            },
            Head::Get(i) => {
                let ty = match &eg[node.args[0]].data.ty {
                    Ty::Many(ts) => ts[i as usize].clone(),
                    Ty::One(_) => unreachable!("get of a tensor"),
                };
                Data {
                    ty: Ty::One(ty),
                    constant: None,
                    splat: None,
                }
            }
            Head::Tuple { op, tag } => {
                let tys = match eg.analysis.tuple_types.get(&tag) {
                    Some(t) => t.clone(),
                    None => {
                        let args = arg_types(eg, &node.args).expect("tuple of tuples");
                        infer(eg.analysis.ops.get(op), &args)
                            .expect("nodes are type-checked before they are added")
                    }
                };
                Data {
                    ty: Ty::Many(tys),
                    constant: None,
                    splat: None,
                }
            }
            Head::Op { op, .. } => {
                let ty = {
                    let args = arg_types(eg, &node.args).expect("an op on a tuple");
                    infer(eg.analysis.ops.get(op), &args)
                        .expect("nodes are type-checked before they are added")
                        .swap_remove(0)
                };
                let (constant, splat) = match eg.analysis.ops.get(op) {
                    Op::Const(t) => (Some(op), splat_of(t)),
                    o => {
                        let splat = match o {
                            Op::Zeros { .. } => Some(0.0),
                            Op::Ones { .. } => Some(1.0),
                            Op::Full { value, .. } => {
                                let t = Tensor::full(ty.dtype, &[], value.0);
                                Some(t.to_f64_vec()[0])
                            }
                            Op::BroadcastTo { .. }
                            | Op::Reshape { .. }
                            | Op::ExpandDims { .. }
                            | Op::Squeeze { .. }
                            | Op::Transpose { .. } => eg[node.args[0]].data.splat,
                            _ => None,
                        };
                        let c = fold(eg, op, &node.args, &ty);
                        let splat = match c {
                            Some(c) => match eg.analysis.ops.get(c) {
                                Op::Const(t) => splat_of(t),
                                _ => None,
                            },
                            None => splat,
                        };
                        (c, splat)
                    }
                };
                Data {
                    ty: Ty::One(ty),
                    constant,
                    splat,
                }
            }
        }
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        debug_assert_eq!(a.ty, b.ty, "only values of one type are made equal");
        let mut changed = false;
        if a.constant.is_none() && b.constant.is_some() {
            a.constant = b.constant;
            changed = true;
        }
        if a.splat.is_none() && b.splat.is_some() {
            a.splat = b.splat;
            changed = true;
        }
        let b_differs =
            a.constant != b.constant || a.splat.map(f64::to_bits) != b.splat.map(f64::to_bits);
        DidMerge(changed, b_differs)
    }

    /// A constant e-class gets the constant's node, which extraction then prefers.
    fn modify(eg: &mut KilnEGraph, id: Id) {
        let Some(c) = eg[id].data.constant else {
            return;
        };
        let head = Head::Op {
            fam: family(eg.analysis.ops.get(c)),
            op: c,
        };
        if eg[id].nodes.iter().any(|n| n.head == head) {
            return;
        }
        let k = eg.add(Node::new(head, &[]));
        eg.union(id, k);
    }
}
