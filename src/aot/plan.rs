//! The static plan of an ahead-of-time function, made from its lowered plan (`lower::Plan`):
//! every shape is known, so every value is a strided view of some storage (an input, a
//! constant in the object, or a buffer the plan computes into), view ops (the plan's
//! `perform` steps that only move data) change offsets and strides, and the rest is a list of
//! steps (map kernels, reductions, matrix products, `ifelse` branches) over views. Buffers are then placed: a buffer
//! that is a function output whole goes straight into the caller's output array, the others
//! into the scratch area at 64-byte-aligned offsets, reused once nothing reads them any more.

use crate::error::{Error, Result};
use crate::ir::reduce::Finish;
use crate::ir::scalar::{ScalarInst, ScalarOp, ScalarProgram};
use crate::ir::{DType, F64Bits, Func, Op, ReduceOp, Reduction, Value};
use crate::lower::memory::{place, Lifetime};
use crate::lower::{self, Kernel};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::fmt::Write as _;

mod index;
mod scan;
mod window;

/// Alignment of every buffer in the scratch area, in bytes.
pub const SCRATCH_ALIGN: usize = 64;

/// Index of a piece of storage in [`Plan::roots`].
pub type RootId = usize;

/// Where a piece of storage lives at run time.
#[derive(Clone, Debug, PartialEq)]
pub enum Loc {
    /// The caller's input array `i`.
    Input(usize),
    /// The caller's output array `o`.
    Output(usize),
    /// The scratch area, at this byte offset.
    Scratch(usize),
    /// Read-only data in the object (index into [`Plan::consts`]).
    Const(usize),
    /// One step's slice of root `of` inside loop `looped` (a `scan`): the address of `of` plus
    /// the loop's current step times `stride` bytes.
    Slice {
        /// The root sliced (the whole sequence, `[T, ..]`).
        of: RootId,
        /// Bytes from one step's slice to the next (the leading axis's stride).
        stride: i64,
        /// The id of the [`Step::Loop`] whose step counter moves the slice.
        looped: usize,
    },
}

/// A piece of storage.
#[derive(Clone, Debug)]
pub struct Root {
    /// Its size in bytes.
    pub bytes: usize,
    /// Where it lives; `None` for a buffer not yet placed (outputs, then the scratch area,
    /// are assigned once every step is planned).
    pub loc: Option<Loc>,
    /// The first step that touches it, on [`walk`]'s clock (buffers only; `usize::MAX` for a
    /// buffer no step touches).
    pub first: usize,
    /// The last step that touches it, on [`walk`]'s clock (buffers only).
    pub last: usize,
    /// A buffer the plan computes into (as opposed to an input or a constant).
    pub buffer: bool,
}

/// A strided view of a root: element `idx` is at byte `offset + sum(idx[d] * strides[d])`.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// The storage viewed.
    pub root: RootId,
    /// The element type.
    pub dtype: DType,
    /// Byte offset of element `[0, ..]` from the root's start.
    pub offset: i64,
    /// The view's shape.
    pub shape: Vec<usize>,
    /// Byte stride of each dim (0 where a dim is broadcast; may be negative).
    pub strides: Vec<i64>,
}

/// Row-major byte strides of `shape` for elements of `size` bytes.
pub fn contiguous_strides(shape: &[usize], size: usize) -> Vec<i64> {
    let mut st = vec![0i64; shape.len()];
    let mut acc = size as i64;
    for d in (0..shape.len()).rev() {
        st[d] = acc;
        acc *= shape[d].max(1) as i64;
    }
    st
}

impl View {
    fn new_contiguous(root: RootId, dtype: DType, shape: &[usize]) -> View {
        View {
            root,
            dtype,
            offset: 0,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape, dtype.size()),
        }
    }

    /// The number of elements (the product of the shape).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the view is dense and row-major (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expect = self.dtype.size() as i64;
        for d in (0..self.shape.len()).rev() {
            if self.shape[d] == 1 {
                continue;
            }
            if self.strides[d] != expect {
                return false;
            }
            expect *= self.shape[d] as i64;
        }
        true
    }

    /// The strides that read this view broadcast to `shape` (numpy rules, aligned on the
    /// right; a stretched or missing dim reads with stride 0), or `None` where it does not
    /// broadcast to `shape`.
    pub fn broadcast_strides(&self, shape: &[usize]) -> Option<Vec<i64>> {
        let r = shape.len();
        let lead = r.checked_sub(self.shape.len())?;
        let fits =
            (0..self.shape.len()).all(|d| self.shape[d] == 1 || self.shape[d] == shape[lead + d]);
        fits.then(|| {
            (0..r)
                .map(|a| lower::view::stride_over(&self.shape, &self.strides, r, a))
                .collect()
        })
    }

    fn with(&self, shape: Vec<usize>, strides: Vec<i64>, offset: i64) -> View {
        View {
            root: self.root,
            dtype: self.dtype,
            offset,
            shape,
            strides,
        }
    }

    /// The view's layout in elements (`lower::view` works in elements; the plan in bytes).
    fn layout(&self) -> lower::view::Layout {
        let size = self.dtype.size() as i64;
        lower::view::Layout {
            shape: self.shape.clone(),
            strides: self.strides.iter().map(|&s| (s / size) as isize).collect(),
            offset: (self.offset / size) as isize,
        }
    }

    /// The view of the same root laid out as `l` (in elements).
    fn with_layout(&self, l: lower::view::Layout) -> View {
        let size = self.dtype.size() as i64;
        self.with(
            l.shape,
            l.strides.iter().map(|&s| s as i64 * size).collect(),
            l.offset as i64 * size,
        )
    }
}

/// One step of the plan.
#[derive(Clone, Debug)]
pub enum Step {
    /// A map kernel over `shape`: inputs read at their (broadcast) views, outputs written at
    /// theirs.
    Map {
        /// What the step computes, for messages and dumps (`@f: %y = add`).
        what: String,
        /// The scalar program run at each element: its inputs are `inputs`, its outputs
        /// `outputs`.
        program: ScalarProgram,
        /// The index space the kernel runs over.
        shape: Vec<usize>,
        /// The program's inputs, each broadcast to `shape`.
        inputs: Vec<View>,
        /// Where the program's outputs are written, each of shape `shape`.
        outputs: Vec<View>,
    },
    /// The reduction `op` over the axes `reduced` of `space` of the value `program` computes
    /// from `inputs` (each read over `space`, stride 0 where broadcast), into `out` (dense
    /// over the kept axes): a call of the JIT's reduction kernel.
    Reduce {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The reduction.
        op: ReduceOp,
        /// The scalar program whose (first) output is reduced.
        program: ScalarProgram,
        /// The full index space, reduced axes included.
        space: Vec<usize>,
        /// Per axis of `space`, whether it is reduced.
        reduced: Vec<bool>,
        /// The program's inputs, each with the shape `space`.
        inputs: Vec<View>,
        /// The result: dense, with the kept axes' shape.
        out: View,
    },
    /// `c[batch, m, n] = a[batch, m, k] @ b[batch, k, n]`; `b` reads its rows with unit
    /// element stride, `c` is contiguous.
    MatMul {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The element type of `a`, `b` and `c` (halves are converted to f32 beforehand).
        dtype: DType,
        /// The batch dims (broadcast between the operands).
        batch: Vec<usize>,
        /// Rows of `a` and `c`.
        m: usize,
        /// Columns of `b` and `c`.
        n: usize,
        /// The contracted dim: columns of `a`, rows of `b`.
        k: usize,
        /// The left operand, `[batch.., m, k]` (stride 0 on broadcast batch dims).
        a: View,
        /// The right operand, `[batch.., k, n]` (stride 0 on broadcast batch dims).
        b: View,
        /// The product, `[batch.., m, n]`.
        c: View,
    },
    /// A random op: elements `0..` of the stream of `seed` (with the per-call counter, a 0-d
    /// i64, mixed in when there is one) into the dense `out`.
    Random {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The distribution drawn from.
        dist: crate::ir::RandomDist,
        /// The op's seed, which picks the stream.
        seed: u64,
        /// The per-call counter (a 0-d i64), where the op takes one.
        counter: Option<View>,
        /// Where the numbers go (dense; its dtype is the op's).
        out: View,
    },
    /// A gather over `shape`: `out[p] = data[p + position(index[p]) * axis_stride]`, where
    /// `data`, `index` and `out` are read over `shape` (`data` with stride 0 where the index
    /// picks) and an index is a position along an axis of `axis_len` (negative from the end).
    /// An index out of range ends the call, returning `code`.
    Gather {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The index space walked (the output's shape).
        shape: Vec<usize>,
        /// The data read, viewed over `shape` (stride 0 along the indexed axis).
        data: View,
        /// The indices (i32 or i64), viewed over `shape`.
        index: View,
        /// The length of the indexed axis of the data (the range an index must fall in).
        axis_len: usize,
        /// The data's byte stride along the indexed axis.
        axis_stride: i64,
        /// Where the gathered elements go, of shape `shape`.
        out: View,
        /// The failure code returned for an index out of range.
        code: u32,
    },
    /// Every index of `index` checked as [`Step::Gather`] checks it, nothing read or written:
    /// for a gather with no element to write, whose indices are still checked (as `perform`
    /// checks them).
    CheckIndices {
        /// What the step checks, for messages and dumps.
        what: String,
        /// The indices checked.
        index: View,
        /// The length of the indexed axis (the range an index must fall in).
        axis_len: usize,
        /// The failure code returned for an index out of range.
        code: u32,
    },
    /// A scatter over `shape`, in row-major order (index order):
    /// `target[p + position(index[p]) * axis_stride] = updates[p]` (or `+=` with `add`), each
    /// index checked first as for [`Step::Gather`] (returning `code`).
    Scatter {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The index space walked (the updates' shape).
        shape: Vec<usize>,
        /// The values written, of shape `shape`.
        updates: View,
        /// The indices (i32 or i64), of shape `shape`.
        index: View,
        /// The array written into, viewed over `shape` (stride 0 along the indexed axis).
        target: View,
        /// The length of the target's indexed axis (the range an index must fall in).
        axis_len: usize,
        /// The target's byte stride along the indexed axis.
        axis_stride: i64,
        /// Whether updates are added (`scatter_add`) rather than stored (`scatter_set`).
        add: bool,
        /// The failure code returned for an index out of range.
        code: u32,
    },
    /// `sort` or `argsort` of each lane of `data` (`[lanes.., n]`, the sorted axis last):
    /// the lane's positions sorted into `perm` (with `tmp` as room, both `n` i64), then the
    /// elements at them written to `values` and the positions (i64) to `positions`, each
    /// laid out like `data`.
    Sort {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The lanes sorted, the sorted axis last.
        data: View,
        /// Whether to sort largest first.
        descending: bool,
        /// Where the sorted elements go (`sort`), if anywhere.
        values: Option<View>,
        /// Where the sorted positions go (`argsort`), if anywhere.
        positions: Option<View>,
        /// Room for one lane's positions as they are sorted (`n` i64).
        perm: View,
        /// The merge sort's second buffer of `n` i64.
        tmp: View,
    },
    /// A `scan`'s loop: `body` run `count` times, step `t` going `0..count` (or back from
    /// `count - 1` when `reverse`); roots of [`Loc::Slice`] with `looped == id` are at step
    /// `t` of their root.
    Loop {
        /// What the loop computes, for messages and dumps.
        what: String,
        /// The loop's id, which [`Loc::Slice`] roots name.
        id: usize,
        /// How many times the body runs.
        count: usize,
        /// Whether the steps run from the last back to the first.
        reverse: bool,
        /// The steps run each time.
        body: Vec<Step>,
    },
    /// The map step `body` run `count` times in order, its operands (inputs, then outputs)
    /// moved on by `advance[i]` bytes each time: a recurrence along an axis (`cumsum`).
    Sweep {
        /// What the step computes, for messages and dumps.
        what: String,
        /// How many times `body` runs.
        count: usize,
        /// The map step run each time (the first run's operands).
        body: Box<Step>,
        /// Per operand of `body` (inputs, then outputs), bytes it moves by after each run.
        advance: Vec<i64>,
    },
    /// `ifelse`: the steps of the branch that `cond` (one bool) chooses run; each ends by
    /// copying what it yields into the same result buffers.
    IfElse {
        /// What the step computes, for messages and dumps.
        what: String,
        /// The condition, one bool.
        cond: View,
        /// The steps run when `cond` is true.
        then: Vec<Step>,
        /// The steps run when `cond` is false.
        otherwise: Vec<Step>,
    },
}

/// Visits `steps` and the steps inside them in the order they are laid out (each step, then
/// its branches), with positions counted from `*pos`: the clock buffer lifetimes are measured
/// in. A buffer read in one branch and written in the other is alive over both, which is
/// more than needed (only one runs) but never too little.
pub fn walk<'s>(steps: &'s [Step], pos: &mut usize, f: &mut dyn FnMut(usize, &'s Step)) {
    for s in steps {
        f(*pos, s);
        *pos += 1;
        match s {
            Step::IfElse {
                then, otherwise, ..
            } => {
                walk(then, pos, f);
                walk(otherwise, pos, f);
            }
            Step::Loop { body, .. } => walk(body, pos, f),
            _ => {}
        }
    }
}

impl Step {
    fn views(&self) -> (Vec<&View>, Vec<RootId>) {
        // (views read, roots written)
        match self {
            Step::Map {
                inputs, outputs, ..
            } => (
                inputs.iter().collect(),
                outputs.iter().map(|v| v.root).collect(),
            ),
            Step::Reduce { inputs, out, .. } => (inputs.iter().collect(), vec![out.root]),
            Step::MatMul { a, b, c, .. } => (vec![a, b], vec![c.root]),
            Step::IfElse { cond, .. } => (vec![cond], vec![]),
            Step::Loop { .. } => (vec![], vec![]),
            Step::Random { counter, out, .. } => (counter.iter().collect(), vec![out.root]),
            Step::Gather {
                data, index, out, ..
            } => (vec![data, index], vec![out.root]),
            Step::Scatter {
                updates,
                index,
                target,
                ..
            } => (vec![updates, index, target], vec![target.root]),
            Step::Sweep { body, .. } => body.views(),
            Step::CheckIndices { index, .. } => (vec![index], vec![]),
            Step::Sort {
                data,
                values,
                positions,
                perm,
                tmp,
                ..
            } => (
                vec![data],
                values
                    .iter()
                    .chain(positions)
                    .chain([perm, tmp])
                    .map(|v| v.root)
                    .collect(),
            ),
        }
    }
}

/// A parameter or result of the entry point.
#[derive(Clone, Debug)]
pub struct Arg {
    /// The C parameter name.
    pub name: String,
    /// The element type.
    pub dtype: DType,
    /// The array's shape.
    pub shape: Vec<usize>,
}

/// The whole static plan.
pub struct Plan {
    /// Every piece of storage the steps' views refer to, placed.
    pub roots: Vec<Root>,
    /// The bytes of each constant the object holds ([`Loc::Const`]), row-major and
    /// little-endian.
    pub consts: Vec<Vec<u8>>,
    /// The steps the entry point runs, in order.
    pub steps: Vec<Step>,
    /// The entry point's inputs, in parameter order.
    pub inputs: Vec<Arg>,
    /// The entry point's outputs, in result order.
    pub outputs: Vec<Arg>,
    /// The size in bytes of the scratch area the caller passes (0: none).
    pub scratch_bytes: usize,
    /// What each failure code the entry point can return means (code `i + 1` is
    /// `errors[i]`).
    pub errors: Vec<String>,
}

fn describe(func: &Func, inst: &lower::Step) -> String {
    let r = inst
        .results
        .first()
        .map(|&v| match func.name_of(v) {
            Some(n) => format!("%{n}"),
            None => format!("%{}", v.0),
        })
        .unwrap_or_default();
    format!("@{}: {r} = {}", func.name, inst.op.display_name())
}

fn known(func: &Func, v: Value, what: &str) -> Result<Vec<usize>> {
    let ty = func.ty(v);
    ty.known_shape().ok_or_else(|| {
        let d = ty.shape.iter().position(|d| d.is_none()).unwrap_or(0);
        Error::Unsupported(format!(
            "@{}: {what} has type {ty}: ahead of time every dim must be known (dim {d} is not)",
            func.name
        ))
    })
}

fn value_name(func: &Func, v: Value) -> String {
    match func.name_of(v) {
        Some(n) => format!("%{n}"),
        None => format!("%{}", v.0),
    }
}

/// The bytes of a tensor in row-major order, little-endian (the only byte order the supported
/// targets use).
fn tensor_bytes(t: &Tensor) -> Vec<u8> {
    let mut out = Vec::with_capacity(t.len() * t.dtype().size());
    match t {
        Tensor::Bool(a) => out.extend(a.iter().map(|&x| x as u8)),
        Tensor::I32(a) => a.iter().for_each(|x| out.extend(x.to_le_bytes())),
        Tensor::I64(a) => a.iter().for_each(|x| out.extend(x.to_le_bytes())),
        Tensor::F32(a) => a.iter().for_each(|x| out.extend(x.to_le_bytes())),
        Tensor::F64(a) => a.iter().for_each(|x| out.extend(x.to_le_bytes())),
        Tensor::F16(a) => a.iter().for_each(|x| out.extend(x.to_le_bytes())),
        Tensor::BF16(a) => a.iter().for_each(|x| out.extend(x.to_le_bytes())),
    }
    out
}

/// `input 0 : from` (then `cast` to `to` where they differ): a copy or conversion program.
fn copy_program(from: DType, to: DType) -> ScalarProgram {
    let mut p = ScalarProgram {
        insts: vec![ScalarInst {
            op: ScalarOp::Input(0),
            args: vec![],
            dtype: from,
        }],
        outputs: vec![0],
    };
    if from != to {
        p.insts.push(ScalarInst {
            op: ScalarOp::Cast(to),
            args: vec![0],
            dtype: to,
        });
        p.outputs = vec![1];
    }
    p
}

/// A scalar program from its text, for the fixed templates the plan writes (window, index
/// and running steps): parsing checks it, and an error is kiln's own.
fn program(src: &str) -> Result<ScalarProgram> {
    crate::ir::scalar::parse_program(src)
        .map_err(|e| Error::Unsupported(format!("internal: a plan's program: {e}: {src}")))
}

/// Merges adjacent dims that every operand walks as one (and drops size-1 dims): the shape
/// and, per operand, the strides. A shape with a zero dim comes back as `None` (nothing to do).
pub fn collapse(shape: &[usize], strides: &[Vec<i64>]) -> Option<(Vec<usize>, Vec<Vec<i64>>)> {
    if shape.contains(&0) {
        return None;
    }
    let mut sh: Vec<usize> = Vec::new();
    let mut st: Vec<Vec<i64>> = vec![Vec::new(); strides.len()];
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let merge = !sh.is_empty()
            && strides
                .iter()
                .zip(&st)
                .all(|(s, acc)| *acc.last().expect("same length") == s[d] * shape[d] as i64);
        if merge {
            let last = sh.len() - 1;
            sh[last] *= shape[d];
            for (acc, s) in st.iter_mut().zip(strides) {
                let l = acc.len() - 1;
                acc[l] = s[d];
            }
        } else {
            sh.push(shape[d]);
            for (acc, s) in st.iter_mut().zip(strides) {
                acc.push(s[d]);
            }
        }
    }
    Some((sh, st))
}

struct Builder<'a> {
    func: &'a Func,
    roots: Vec<Root>,
    consts: Vec<Vec<u8>>,
    steps: Vec<Step>,
    views: HashMap<Value, View>,
    errors: Vec<String>,
    /// Loops planned so far (their ids).
    loops: usize,
}

impl Builder<'_> {
    fn buffer(&mut self, dtype: DType, shape: &[usize]) -> View {
        let bytes = shape.iter().product::<usize>() * dtype.size();
        self.roots.push(Root {
            bytes,
            loc: None,
            first: usize::MAX,
            last: 0,
            buffer: true,
        });
        View::new_contiguous(self.roots.len() - 1, dtype, shape)
    }

    fn constant(&mut self, t: &Tensor) -> View {
        let bytes = tensor_bytes(t);
        self.roots.push(Root {
            bytes: bytes.len(),
            loc: Some(Loc::Const(self.consts.len())),
            first: 0,
            last: 0,
            buffer: false,
        });
        self.consts.push(bytes);
        View::new_contiguous(self.roots.len() - 1, t.dtype(), t.shape())
    }

    fn view(&self, v: Value) -> Result<View> {
        self.views.get(&v).cloned().ok_or_else(|| {
            Error::Unsupported(format!(
                "@{}: {} is not defined before it is used",
                self.func.name,
                value_name(self.func, v)
            ))
        })
    }

    /// A contiguous copy of `v` (a new buffer), through a map step.
    fn materialize(&mut self, v: &View, what: &str) -> View {
        self.converted(v, v.dtype, what)
    }

    /// A contiguous copy of `v` converted to `to` (a new buffer), through a map step.
    fn converted(&mut self, v: &View, to: DType, what: &str) -> View {
        let out = self.buffer(to, &v.shape);
        self.steps.push(Step::Map {
            what: format!("copy for {what}"),
            program: copy_program(v.dtype, to),
            shape: v.shape.clone(),
            inputs: vec![v.clone()],
            outputs: vec![out.clone()],
        });
        out
    }

    /// The view `v` of `a` (`lower::view`): no data moves, except that a reshape of a view
    /// that is not row-major first copies it.
    fn apply_view(&mut self, what: &str, v: &lower::view::View, a: &View) -> Result<View> {
        if let Some(l) = v.apply(&a.layout()) {
            return Ok(a.with_layout(l));
        }
        let src = match v {
            lower::view::View::Reshape { .. } => self.materialize(a, what),
            _ => a.clone(),
        };
        v.apply(&src.layout())
            .map(|l| src.with_layout(l))
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "{what}: the view {v} does not apply to shape {:?}",
                    a.shape
                ))
            })
    }

    /// Plans the lowered `steps` into `self.steps`.
    fn steps(&mut self, steps: &[lower::Step]) -> Result<()> {
        steps.iter().try_for_each(|s| self.step(s))
    }

    /// Plans one lowered step: its kernel becomes a map, reduction or product over views; a
    /// view op only makes a new view; an `ifelse` becomes a branch over two step lists.
    fn step(&mut self, inst: &lower::Step) -> Result<()> {
        let func = self.func;
        let what = describe(func, inst);
        let mut shapes = Vec::new();
        for &r in &inst.results {
            shapes.push(known(func, r, &value_name(func, r))?);
        }
        let args: Vec<View> = inst
            .args
            .iter()
            .map(|&a| self.view(a))
            .collect::<Result<_>>()?;
        let rdt = |i: usize| func.ty(inst.results[i]).dtype;
        let set = |me: &mut Self, v: View| {
            me.views.insert(inst.results[0], v);
        };
        match &inst.kernel {
            Kernel::Map { program, .. } => {
                let program = (**program).clone();
                let outs: Vec<View> = (0..inst.results.len())
                    .map(|i| self.buffer(rdt(i), &shapes[i]))
                    .collect();
                for (r, v) in inst.results.iter().zip(&outs) {
                    self.views.insert(*r, v.clone());
                }
                self.steps.push(Step::Map {
                    what,
                    program,
                    shape: shapes[0].clone(),
                    inputs: args,
                    outputs: outs,
                });
            }
            Kernel::Reduce {
                op,
                axes,
                program,
                space,
                ..
            } => {
                let full: Vec<usize> = space.iter().map(|d| d.unwrap_or(0)).collect();
                self.reduce(what, (**program).clone(), args, full, *op, axes, inst)?;
            }
            Kernel::Gemm {
                transposed,
                update: None,
            } => {
                // A folded transpose is read through swapped strides, as the JIT's GEMM does.
                let swapped = |v: &View, t: bool| {
                    let mut v = v.clone();
                    let r = v.shape.len();
                    if t && r >= 2 {
                        v.shape.swap(r - 2, r - 1);
                        v.strides.swap(r - 2, r - 1);
                    }
                    v
                };
                let (mut a, mut b) = (
                    swapped(&args[0], transposed[0]),
                    swapped(&args[1], transposed[1]),
                );
                if a.dtype.is_half() {
                    // Read into f32 first, as the JIT's GEMM does (`perform::matmul_into`).
                    a = self.converted(&a, DType::F32, &what);
                    b = self.converted(&b, DType::F32, &what);
                }
                let c = self.matmul(&what, &a, &b, rdt(0), &shapes[0])?;
                set(self, c);
            }
            Kernel::IfElse { then, otherwise } => {
                self.ifelse(&what, inst, &args, then, otherwise)?
            }
            Kernel::View(v) => {
                let out = self.apply_view(&what, v, &args[0])?;
                set(self, out);
            }
            Kernel::Perform => self.perform(inst, &what, args, &shapes)?,
            Kernel::Scan {
                body,
                params,
                carries,
                reverse,
            } => self.scan(&what, inst, &args, body, params, *carries, *reverse)?,
            Kernel::Gemm {
                update: Some(_), ..
            }
            | Kernel::Rows { .. } => {
                return Err(Error::Unsupported(format!(
                    "{what}: internal: ahead of time the plan has no fused updates or row groups"
                )))
            }
        }
        Ok(())
    }

    /// An `ifelse`: each branch planned into a step list of its own, ending with copies of
    /// what it yields into the results' buffers (which both branches write).
    fn ifelse(
        &mut self,
        what: &str,
        inst: &lower::Step,
        args: &[View],
        then: &lower::Branch,
        otherwise: &lower::Branch,
    ) -> Result<()> {
        let func = self.func;
        let results: Vec<View> = inst
            .results
            .iter()
            .map(|&r| {
                let shape = known(func, r, &value_name(func, r))?;
                Ok(self.buffer(func.ty(r).dtype, &shape))
            })
            .collect::<Result<_>>()?;
        let branch = |me: &mut Self, br: &lower::Branch| -> Result<Vec<Step>> {
            let outer = std::mem::take(&mut me.steps);
            let planned = me.steps(&br.steps).and_then(|()| {
                for (y, out) in br.yields.iter().zip(&results) {
                    let v = me.view(*y)?;
                    me.steps.push(Step::Map {
                        what: format!("{what}: yield"),
                        program: copy_program(v.dtype, out.dtype),
                        shape: out.shape.clone(),
                        inputs: vec![v],
                        outputs: vec![out.clone()],
                    });
                }
                Ok(())
            });
            let inner = std::mem::replace(&mut me.steps, outer);
            planned.map(|()| inner)
        };
        let then = branch(self, then)?;
        let otherwise = branch(self, otherwise)?;
        self.steps.push(Step::IfElse {
            what: what.to_string(),
            cond: args[0].clone(),
            then,
            otherwise,
        });
        for (r, v) in inst.results.iter().zip(results) {
            self.views.insert(*r, v);
        }
        Ok(())
    }

    /// A step that runs `perform` on the JIT: ahead of time, view ops become views, constants
    /// data in the object and `concat` copies; what needs the run time is refused.
    fn perform(
        &mut self,
        inst: &lower::Step,
        what: &str,
        args: Vec<View>,
        shapes: &[Vec<usize>],
    ) -> Result<()> {
        let what = what.to_string();
        let rdt = |i: usize| self.func.ty(inst.results[i]).dtype;
        let set = |me: &mut Self, v: View| {
            me.views.insert(inst.results[0], v);
        };
        match &inst.op {
            Op::Concat { axis } => {
                let out = self.buffer(rdt(0), &shapes[0]);
                let mut at = 0i64;
                for a in &args {
                    let mut dst = out.clone();
                    dst.offset += at * out.strides[*axis];
                    dst.shape = a.shape.clone();
                    at += a.shape[*axis] as i64;
                    self.steps.push(Step::Map {
                        what: what.clone(),
                        program: copy_program(a.dtype, a.dtype),
                        shape: a.shape.clone(),
                        inputs: vec![a.clone()],
                        outputs: vec![dst],
                    });
                }
                set(self, out);
            }
            Op::Const(t) => {
                let v = self.constant(t);
                set(self, v);
            }
            Op::Zeros { shape, dtype }
            | Op::Ones { shape, dtype }
            | Op::Full { shape, dtype, .. } => {
                let value = match &inst.op {
                    Op::Zeros { .. } => 0.0,
                    Op::Ones { .. } => 1.0,
                    Op::Full { value, .. } => value.0,
                    _ => unreachable!("matched above"),
                };
                // One element, read with stride 0 everywhere.
                let one = self.constant(&Tensor::full(*dtype, &[], value));
                set(self, one.with(shape.clone(), vec![0; shape.len()], 0));
            }
            Op::Arange { .. } => {
                let t = crate::perform::perform(&inst.op, &[])
                    .map_err(|e| Error::Unsupported(format!("{what}: {e}")))?
                    .remove(0);
                let v = self.constant(&t);
                set(self, v);
            }
            Op::Random {
                dist, seed, dtype, ..
            } => {
                let out = self.buffer(*dtype, &shapes[0]);
                self.steps.push(Step::Random {
                    what,
                    dist: *dist,
                    seed: *seed,
                    counter: args.first().cloned(),
                    out: out.clone(),
                });
                set(self, out);
            }
            Op::Take { axis } => {
                let v = self.take(&what, &args[0], &args[1], *axis, &shapes[0]);
                set(self, v);
            }
            Op::TakeAlongAxis { axis } => {
                let v = self.take_along_axis(&what, &args[0], &args[1], *axis, &shapes[0]);
                set(self, v);
            }
            Op::ScatterAdd { axis } | Op::ScatterSet { axis } => {
                let add = matches!(inst.op, Op::ScatterAdd { .. });
                let v = self.scatter(&what, &args, *axis, add);
                set(self, v);
            }
            Op::Sort { axis, descending } | Op::Argsort { axis, descending } => {
                let values = matches!(inst.op, Op::Sort { .. });
                let v = self.sort(&what, &args[0], *axis, *descending, values);
                set(self, v);
            }
            Op::OneHot { depth, dtype } => {
                let v = self.one_hot(&what, &args[0], *depth, *dtype)?;
                set(self, v);
            }
            Op::Cumsum { axis } | Op::Cumprod { axis } => {
                let sum = matches!(inst.op, Op::Cumsum { .. });
                let v = self.cumulative(&what, &args[0], *axis, sum, rdt(0))?;
                set(self, v);
            }
            Op::CumprodGrad { axis } => {
                let v = self.cumprod_grad(&what, &args[0], &args[1], *axis)?;
                set(self, v);
            }
            Op::Conv2d(conv) => {
                let v = self.conv2d(&what, &args[0], &args[1], conv, &shapes[0])?;
                set(self, v);
            }
            Op::Conv2dGradImage { conv, image } => {
                let v = self.conv2d_grad_image(&what, &args[0], &args[1], conv, *image)?;
                set(self, v);
            }
            Op::Conv2dGradFilter { conv, kernel } => {
                let v = self.conv2d_grad_filter(&what, &args[0], &args[1], conv, *kernel)?;
                set(self, v);
            }
            Op::Pool2d(pool) => {
                let v = self.pool2d(&what, &args[0], pool, &shapes[0])?;
                set(self, v);
            }
            Op::Pool2dGrad(pool) => {
                let v = self.pool2d_grad(&what, &args[0], &args[1], pool)?;
                set(self, v);
            }
            Op::Custom(c) => {
                return Err(Error::Unsupported(format!(
                    "{what}: the custom op `{}` is not supported ahead of time",
                    c.name()
                )))
            }
            op => {
                return Err(Error::Unsupported(format!(
                    "{what}: `{}` is not supported ahead of time",
                    op.name()
                )))
            }
        }
        Ok(())
    }

    /// A reduction over `axes` of what `program` computes from `args` over `space`: one step
    /// that calls the JIT's own reduction kernel (`codegen::clif::reduce`), or, when the
    /// reduced axes are empty, a fill with the reduction's value of nothing.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        what: String,
        program: ScalarProgram,
        args: Vec<View>,
        space: Vec<usize>,
        op: ReduceOp,
        axes: &Option<Vec<usize>>,
        inst: &lower::Step,
    ) -> Result<()> {
        let reduced: Vec<bool> = (0..space.len())
            .map(|a| axes.as_ref().is_none_or(|ax| ax.contains(&a)))
            .collect();
        let value = program.insts[program.outputs[0]].dtype;
        let reduction = Reduction::of(op, value);
        let out_shape = known(self.func, inst.results[0], "the result")?;
        let out = self.buffer(reduction.result, &out_shape);
        self.views.insert(inst.results[0], out.clone());
        let n_out: usize = out_shape.iter().product();
        let n_reduced: usize = (0..space.len())
            .filter(|&a| reduced[a])
            .map(|a| space[a])
            .product();
        if n_out == 0 {
            return Ok(());
        }
        if n_reduced == 0 {
            // The value of an empty reduction (`Reduction`'s start and finish), or the
            // reference's error.
            let start = reduction.start.filter(|_| reduction.empty_has_value);
            let Some(start) = start else {
                return Err(Error::Unsupported(format!(
                    "{what}: {} of an empty axis has no identity",
                    op.name()
                )));
            };
            let v = match reduction.finish {
                Finish::None => start.to_f64(),
                Finish::DivideByCount => f64::NAN,
            };
            let fill = ScalarProgram {
                insts: vec![ScalarInst {
                    op: ScalarOp::Const(F64Bits(v)),
                    args: vec![],
                    dtype: reduction.result,
                }],
                outputs: vec![0],
            };
            self.steps.push(Step::Map {
                what,
                program: fill,
                shape: out_shape,
                inputs: vec![],
                outputs: vec![out],
            });
            return Ok(());
        }
        let mut inputs = Vec::new();
        for a in &args {
            let st = a.broadcast_strides(&space).ok_or_else(|| {
                Error::Unsupported(format!(
                    "{what}: cannot broadcast {:?} to {space:?}",
                    a.shape
                ))
            })?;
            inputs.push(a.with(space.clone(), st, a.offset));
        }
        self.steps.push(Step::Reduce {
            what,
            op,
            program,
            space,
            reduced,
            inputs,
            out,
        });
        Ok(())
    }

    fn matmul(
        &mut self,
        what: &str,
        a: &View,
        b: &View,
        dtype: DType,
        out_shape: &[usize],
    ) -> Result<View> {
        // numpy: a 1-D operand is a row (left) or a column (right).
        let mut a2 = a.clone();
        if a2.shape.len() == 1 {
            a2.shape.insert(0, 1);
            a2.strides.insert(0, 0);
        }
        let mut b2 = b.clone();
        if b2.shape.len() == 1 {
            b2.shape.push(1);
            b2.strides.push(0);
        }
        let (ra, rb) = (a2.shape.len(), b2.shape.len());
        let (m, k, n) = (a2.shape[ra - 2], a2.shape[ra - 1], b2.shape[rb - 1]);
        let batch = crate::ir::broadcast_shapes(&a2.shape[..ra - 2], &b2.shape[..rb - 2])
            .map_err(|e| Error::Unsupported(format!("{what}: {e}")))?;
        let size = dtype.size() as i64;
        // The kernel reads rows of b with unit stride.
        if n > 1 && b2.strides[rb - 1] != size {
            b2 = self.materialize(&b2, what);
        } else if n == 1 {
            b2.strides[rb - 1] = size;
        }
        // Batch dims broadcast (stride 0 where stretched), then the matrix dims.
        let full = |v: &View, x: usize, y: usize| -> View {
            let r = v.shape.len();
            let lead = v.with(
                v.shape[..r - 2].to_vec(),
                v.strides[..r - 2].to_vec(),
                v.offset,
            );
            let mut st = lead
                .broadcast_strides(&batch)
                .expect("batch dims broadcast (checked by inference)");
            st.extend([v.strides[r - 2], v.strides[r - 1]]);
            let mut s = batch.clone();
            s.extend([x, y]);
            v.with(s, st, v.offset)
        };
        let av = full(&a2, m, k);
        let bv = full(&b2, k, n);
        let mut cshape = batch.clone();
        cshape.extend([m, n]);
        let c = self.buffer(dtype, &cshape);
        self.steps.push(Step::MatMul {
            what: what.to_string(),
            dtype,
            batch,
            m,
            n,
            k,
            a: av,
            b: bv,
            c: c.clone(),
        });
        // The result's own shape (dims of 1-D operands removed): the same contiguous data.
        Ok(c.with(
            out_shape.to_vec(),
            contiguous_strides(out_shape, dtype.size()),
            0,
        ))
    }
}

/// Plans `func` (optimized, every shape known): lowers it, plans its steps over views and
/// places its buffers. `in_names[i]` and `out_names[o]` name the entry point's arguments (one
/// per parameter and per output).
///
/// # Errors
///
/// [`Error::Unsupported`] for a value with an unknown dim, a custom op or another op that
/// cannot run ahead of time, and for an empty reduction that has no value.
pub fn build(func: &Func, in_names: &[String], out_names: &[String]) -> Result<Plan> {
    let mut b = Builder {
        func,
        roots: Vec::new(),
        consts: Vec::new(),
        steps: Vec::new(),
        views: HashMap::new(),
        errors: Vec::new(),
        loops: 0,
    };
    let mut inputs = Vec::new();
    for (i, &p) in func.params.iter().enumerate() {
        let shape = known(func, p, &format!("the input {}", value_name(func, p)))?;
        let dtype = func.ty(p).dtype;
        b.roots.push(Root {
            bytes: shape.iter().product::<usize>() * dtype.size(),
            loc: Some(Loc::Input(i)),
            first: 0,
            last: 0,
            buffer: false,
        });
        b.views
            .insert(p, View::new_contiguous(b.roots.len() - 1, dtype, &shape));
        inputs.push(Arg {
            name: in_names[i].clone(),
            dtype,
            shape,
        });
    }
    // Every instruction a step of its own: views need no folding, and no step fuses work
    // that only the JIT's runtime can run (row groups, the GEMM's fused update).
    let lowered = lower::lower(func);
    b.steps(&lowered.steps)?;
    // Outputs: a buffer that is the output whole is computed straight into the caller's
    // array; anything else (an input, a constant, a view, a value returned twice) is copied.
    let mut outputs = Vec::new();
    let mut placed: Vec<bool> = vec![false; b.roots.len()];
    for (o, &v) in func.outputs.iter().enumerate() {
        let shape = known(func, v, &format!("the output {}", value_name(func, v)))?;
        let view = b.view(v)?;
        outputs.push(Arg {
            name: out_names[o].clone(),
            dtype: view.dtype,
            shape: shape.clone(),
        });
        let root = &b.roots[view.root];
        let whole = root.buffer
            && !placed[view.root]
            && view.offset == 0
            && view.is_contiguous()
            && view.numel() * view.dtype.size() == root.bytes;
        if whole {
            placed[view.root] = true;
            b.roots[view.root].loc = Some(Loc::Output(o));
        } else {
            let dst = b.buffer(view.dtype, &shape);
            placed.push(true);
            b.roots[dst.root].loc = Some(Loc::Output(o));
            b.steps.push(Step::Map {
                what: format!("output {o}"),
                program: copy_program(view.dtype, view.dtype),
                shape,
                inputs: vec![view],
                outputs: vec![dst],
            });
        }
    }
    // Lifetimes of buffers: from the first step that touches them to the last (a step's
    // slice of a root touches the root).
    let roots = &mut b.roots;
    walk(&b.steps, &mut 0, &mut |t, s| {
        for r in touched(roots, s) {
            let root = &mut roots[r];
            root.first = root.first.min(t);
            root.last = root.last.max(t);
        }
    });
    // A loop runs its body again: what the body touches lives over the whole loop.
    walk(&b.steps, &mut 0, &mut |t, s| {
        if let Step::Loop { body, .. } = s {
            let mut end = t + 1;
            let mut inside = Vec::new();
            walk(body, &mut end, &mut |_, s| inside.extend(touched(roots, s)));
            for r in inside {
                let root = &mut roots[r];
                root.first = root.first.min(t);
                root.last = root.last.max(end);
            }
        }
    });
    let scratch_bytes = layout(&mut b.roots);
    Ok(Plan {
        roots: b.roots,
        consts: b.consts,
        steps: b.steps,
        inputs,
        outputs,
        scratch_bytes,
        errors: b.errors,
    })
}

/// The storage roots step `s` reads or writes (a slice's own root in place of the slice).
fn touched(roots: &[Root], s: &Step) -> Vec<RootId> {
    let (reads, writes) = s.views();
    reads
        .iter()
        .map(|v| v.root)
        .chain(writes)
        .map(|mut r| {
            while let Some(Loc::Slice { of, .. }) = roots[r].loc {
                r = of;
            }
            r
        })
        .collect()
}

/// Places every unplaced buffer in the scratch area (`lower::memory`'s static memory plan, at
/// 64-byte-aligned offsets). Returns the area's size.
fn layout(roots: &mut [Root]) -> usize {
    let unplaced: Vec<usize> = (0..roots.len())
        .filter(|&r| roots[r].buffer && roots[r].loc.is_none())
        .collect();
    let lives: Vec<Lifetime> = unplaced
        .iter()
        .map(|&r| match roots[r].first {
            // Never touched by a step (a dead value): needs no memory.
            usize::MAX => Lifetime {
                bytes: 0,
                first: 0,
                last: 0,
            },
            first => Lifetime {
                bytes: roots[r].bytes,
                first,
                last: roots[r].last,
            },
        })
        .collect();
    let (offsets, total) = place(&lives, SCRATCH_ALIGN);
    for (r, off) in unplaced.into_iter().zip(offsets) {
        roots[r].loc = Some(Loc::Scratch(off));
    }
    total
}

impl Plan {
    /// The plan as text, for the `schedule` dump.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let view = |v: &View| {
            format!(
                "r{}+{} {}{:?} strides {:?}",
                v.root, v.offset, v.dtype, v.shape, v.strides
            )
        };
        for (i, r) in self.roots.iter().enumerate() {
            let _ = writeln!(
                s,
                "r{i}: {} bytes at {:?}, steps {}..{}",
                r.bytes,
                r.loc,
                if r.first == usize::MAX { 0 } else { r.first },
                r.last
            );
        }
        walk(&self.steps, &mut 0, &mut |t, st| {
            let _ = match st {
                Step::Map {
                    what,
                    shape,
                    inputs,
                    outputs,
                    ..
                } => writeln!(
                    s,
                    "{t}: map over {shape:?} ({what}): {} -> {}",
                    inputs.iter().map(view).collect::<Vec<_>>().join(", "),
                    outputs.iter().map(view).collect::<Vec<_>>().join(", ")
                ),
                Step::Reduce {
                    what,
                    op,
                    space,
                    reduced,
                    inputs,
                    out,
                    ..
                } => writeln!(
                    s,
                    "{t}: reduce {} over {space:?} axes {:?} ({what}): {} -> {}",
                    op.name(),
                    (0..space.len()).filter(|&a| reduced[a]).collect::<Vec<_>>(),
                    inputs.iter().map(view).collect::<Vec<_>>().join(", "),
                    view(out)
                ),
                Step::MatMul {
                    what,
                    batch,
                    m,
                    n,
                    k,
                    a,
                    b,
                    c,
                    ..
                } => writeln!(
                    s,
                    "{t}: matmul {batch:?} x ({m} x {k}) @ ({k} x {n}) ({what}): {}, {} -> {}",
                    view(a),
                    view(b),
                    view(c)
                ),
                Step::Random {
                    what,
                    dist,
                    seed,
                    counter,
                    out,
                } => writeln!(
                    s,
                    "{t}: {} seed {seed}{} ({what}) -> {}",
                    dist.name(),
                    counter
                        .as_ref()
                        .map(|c| format!(" mixed with {}", view(c)))
                        .unwrap_or_default(),
                    view(out)
                ),
                Step::Gather {
                    what,
                    shape,
                    data,
                    index,
                    axis_len,
                    axis_stride,
                    out,
                    code,
                } => writeln!(
                    s,
                    "{t}: gather over {shape:?} ({what}): {} at {} (axis of {axis_len}, stride \
                     {axis_stride}) -> {}, failing with {code}",
                    view(data),
                    view(index),
                    view(out)
                ),
                Step::Scatter {
                    what,
                    shape,
                    updates,
                    index,
                    target,
                    axis_len,
                    axis_stride,
                    add,
                    code,
                } => writeln!(
                    s,
                    "{t}: scatter {} over {shape:?} ({what}): {} at {} (axis of {axis_len}, \
                     stride {axis_stride}) into {}, failing with {code}",
                    if *add { "add" } else { "set" },
                    view(updates),
                    view(index),
                    view(target)
                ),
                Step::CheckIndices {
                    what,
                    index,
                    axis_len,
                    code,
                } => writeln!(
                    s,
                    "{t}: check the indices {} (axis of {axis_len}) ({what}), failing with {code}",
                    view(index)
                ),
                Step::Sort {
                    what,
                    data,
                    descending,
                    values,
                    positions,
                    ..
                } => writeln!(
                    s,
                    "{t}: sort{} the lanes of {} ({what}) -> {}",
                    if *descending { " descending" } else { "" },
                    view(data),
                    values
                        .iter()
                        .chain(positions)
                        .map(view)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Step::Sweep {
                    what,
                    count,
                    body,
                    advance,
                } => match body.as_ref() {
                    Step::Map {
                        shape,
                        inputs,
                        outputs,
                        ..
                    } => writeln!(
                        s,
                        "{t}: {count} times, moving by {advance:?}: map over {shape:?} ({what}): \
                         {} -> {}",
                        inputs.iter().map(view).collect::<Vec<_>>().join(", "),
                        outputs.iter().map(view).collect::<Vec<_>>().join(", ")
                    ),
                    _ => writeln!(s, "{t}: {count} times ({what})"),
                },
                Step::Loop {
                    what,
                    id,
                    count,
                    reverse,
                    body,
                } => {
                    let mut end = t + 1;
                    walk(body, &mut end, &mut |_, _| {});
                    writeln!(
                        s,
                        "{t}: loop {id} ({what}): steps {}..{end} {count} times{}",
                        t + 1,
                        if *reverse { ", from the last" } else { "" }
                    )
                }
                Step::IfElse {
                    what, cond, then, ..
                } => {
                    let mut end = t + 1;
                    walk(then, &mut end, &mut |_, _| {});
                    writeln!(
                        s,
                        "{t}: ifelse ({what}) on {}: then steps {}..{end}, else steps {end}..",
                        view(cond),
                        t + 1
                    )
                }
            };
        });
        let _ = writeln!(s, "scratch: {} bytes", self.scratch_bytes);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_merges_dense_dims_and_drops_ones() {
        // A dense [2, 1, 3, 4] array and a [4] row broadcast over it: the leading dims merge
        // (both walk them as one), the row's dim does not.
        let (sh, st) = collapse(&[2, 1, 3, 4], &[vec![48, 0, 16, 4], vec![0, 0, 0, 4]]).unwrap();
        assert_eq!(sh, vec![6, 4]);
        assert_eq!(st, vec![vec![16, 4], vec![0, 4]]);
        let (sh, st) = collapse(&[2, 3, 4], &[vec![48, 16, 4]]).unwrap();
        assert_eq!((sh, st), (vec![24], vec![vec![4]]));
        assert!(collapse(&[2, 0], &[vec![4, 4]]).is_none());
    }

    #[test]
    fn layout_reuses_dead_buffers() {
        let mk = |bytes, first, last| Root {
            bytes,
            loc: None,
            first,
            last,
            buffer: true,
        };
        let mut roots = vec![mk(100, 0, 1), mk(100, 1, 2), mk(100, 2, 3)];
        let total = layout(&mut roots);
        assert_eq!(roots[0].loc, Some(Loc::Scratch(0)));
        assert_eq!(roots[1].loc, Some(Loc::Scratch(128)));
        assert_eq!(roots[2].loc, Some(Loc::Scratch(0)));
        assert_eq!(total, 256);
    }
}
