"""PyTensor functions compiled by kiln: `import kiln.pytensor`, then
`pytensor.function(inputs, outputs, mode="KILN")`.

The linker converts the whole `FunctionGraph` PyTensor hands it (after its own rewrites) into
one kiln graph, op by op through `kiln_convert` (a `functools.singledispatch` on the Op's
class, as PyTensor's JAX, Numba and PyTorch backends dispatch), and compiles it once. Shared
variables and updates stay PyTensor's: they arrive as inputs and leave as outputs.

What an importer must keep of its source, and no more: PyTensor's dtype rules (an Elemwise of
int32 and float32 is float64; a sum of int32 is int64) are written here as the casts PyTensor's
own graph implies, and every op is then kiln's. An Op kiln has no conversion for runs through
its own `perform` as a kiln custom op (a warning names it once), so every graph of tensors
compiles; `unsupported(fgraph)` lists such Ops.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.scalar as ps
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, register_linker, register_mode
from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.link.basic import JITLinker
from importlib import import_module
from pytensor.tensor.type import TensorType

import kiln

# By module path: `pytensor.tensor.shape` is also a function of that package, which
# `from pytensor.tensor import shape` would give.
ptb = import_module("pytensor.tensor.basic")
pte = import_module("pytensor.tensor.elemwise")
ptm = import_module("pytensor.tensor.math")
pts = import_module("pytensor.tensor.shape")
ptsp = import_module("pytensor.tensor.special")
ptsub = import_module("pytensor.tensor.subtensor")
pt_raise = import_module("pytensor.raise_op")
ptx = import_module("pytensor.tensor.extra_ops")
ptsort = import_module("pytensor.tensor.sort")

__all__ = ["KilnLinker", "KILN", "kiln_convert", "unsupported"]


class Unsupported(NotImplementedError):
    """A node kiln has no conversion for."""


# --- Elemwise: PyTensor's scalar ops as kiln's ------------------------------------------
_UNARY = {
    ps.Neg: "neg", ps.Abs: "abs", ps.Sign: "sign", ps.Exp: "exp", ps.Log: "log",
    ps.Log1p: "log1p", ps.Expm1: "expm1", ps.Sqrt: "sqrt", ps.Sin: "sin", ps.Cos: "cos",
    ps.Tan: "tan", ps.Tanh: "tanh", ps.Erf: "erf", ps.Floor: "floor", ps.Ceil: "ceil",
    ps.Sqr: "square", ps.Reciprocal: "reciprocal", ps.Invert: "not",
}
_SIGMOID = getattr(ps, "Sigmoid", None) or __import__("pytensor.scalar.math", fromlist=["Sigmoid"]).Sigmoid
_UNARY[_SIGMOID] = "sigmoid"
_SOFTPLUS = import_module("pytensor.scalar.math").Softplus
_BINARY = {
    ps.Sub: "sub", ps.TrueDiv: "div", ps.IntDiv: "floordiv", ps.Mod: "mod", ps.Pow: "pow",
    ps.LT: "lt", ps.GT: "gt", ps.LE: "le", ps.GE: "ge", ps.EQ: "eq", ps.NEQ: "ne",
}
# n-ary in PyTensor, folded left to right as PyTensor's perform folds them.
_NARY = {ps.Add: "add", ps.Mul: "mul", ps.Maximum: "maximum", ps.Minimum: "minimum",
         ps.AND: "and", ps.OR: "or"}


class NeedsShapes(Unsupported):
    """A node whose conversion needs a size PyTensor knows only at run time: the graph is
    compiled once per call shape instead (the sizes are then known)."""


# The values known while a graph is converted: PyTensor's constants, and whatever a shape
# computation makes of them and of the sizes kiln's types know (folded with each op's own
# `perform`, on the small arrays shapes are).
_STATIC: dict = {}


def _const(var):
    """The value of `var` known at conversion time, or None."""
    if var in _STATIC:
        return _STATIC[var]
    return np.asarray(var.data) if isinstance(var, Constant) else None


def _const_ints(var, what):
    v = _const(var)
    if v is None:
        raise NeedsShapes(f"{what} known only at run time")
    return [int(d) for d in np.atleast_1d(v)]


# kiln's integers are i32 and i64: PyTensor's narrower ones (its small literals are int8)
# stand inside a graph as the kiln integer that holds every one of their values. Their
# wrap-around at overflow is theirs alone; a graph input or output of such a dtype is refused.
_WIDER = {"int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32",
          "uint32": "int64"}


def _kiln_dtype(dtype):
    return _WIDER.get(str(dtype), str(dtype))


def _cast(x, dtype):
    dtype = _kiln_dtype(dtype)
    return x if x.dtype == dtype else x.astype(dtype)


@functools.singledispatch
def kiln_convert(op, node, inputs):
    """kiln's variables for `node`'s outputs, given kiln's variables for its inputs."""
    raise Unsupported(f"{type(op).__name__}")


@kiln_convert.register(pte.Elemwise)
def _elemwise(op, node, inputs):
    s = op.scalar_op
    out_dtype = node.outputs[0].dtype
    common = ps.upcast(*[i.dtype for i in node.inputs])
    args = [_cast(x, common) for x in inputs]
    kind = type(s)
    if kind in _UNARY:
        y = kiln._wrap(kiln._kiln.unary(_UNARY[kind], args[0]._v))
    elif kind in _BINARY:
        y = kiln._wrap(kiln._kiln.binary(_BINARY[kind], args[0]._v, args[1]._v))
    elif kind in _NARY:
        y = args[0]
        for a in args[1:]:
            y = kiln._wrap(kiln._kiln.binary(_NARY[kind], y._v, a._v))
    elif kind is ps.Cast:
        return [_cast(inputs[0], out_dtype)]
    elif kind is ps.Identity:
        y = args[0]
    elif kind is ps.IsNan:
        y = kiln.ne(args[0], args[0])
    elif kind is ps.IsInf:
        y = kiln.eq(abs(args[0]), float("inf"))
    elif kind is _SOFTPLUS:
        # log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
        x = args[0]
        y = kiln.maximum(x, 0.0) + kiln.log1p(kiln.exp(-abs(x)))
    elif kind is ps.Switch:
        branches = ps.upcast(node.inputs[1].dtype, node.inputs[2].dtype)
        c = _cast(inputs[0], "bool")
        return [_cast(kiln.where(c, _cast(inputs[1], branches), _cast(inputs[2], branches)), out_dtype)]
    elif kind is ps.Second:
        # fill(a, b): b broadcast to a's shape.
        return [_cast(kiln.where(kiln.constant(True), inputs[1], inputs[0] * 0 + 0), out_dtype)
                if node.inputs[0].type.shape != node.inputs[1].type.shape
                else _cast(inputs[1], out_dtype)]
    else:
        raise Unsupported(f"Elemwise{{{kind.__name__}}}")
    return [_cast(y, out_dtype)]


# --- reductions -------------------------------------------------------------------------
_REDUCE = {ps.Add: "sum", ps.Mul: "prod", ps.Maximum: "max", ps.Minimum: "min",
           ps.AND: "all", ps.OR: "any"}


@kiln_convert.register(pte.CAReduce)
def _careduce(op, node, inputs):
    name = _REDUCE.get(type(op.scalar_op))
    if name is None:
        raise Unsupported(f"CAReduce{{{type(op.scalar_op).__name__}}}")
    out_dtype = node.outputs[0].dtype
    x = inputs[0]
    if name in ("sum", "prod"):
        # PyTensor accumulates in its acc_dtype and gives `dtype`; kiln sums in the input's.
        x = _cast(x, getattr(op, "acc_dtype", None) or out_dtype)
    axes = None if op.axis is None else list(op.axis)
    return [_cast(kiln._wrap(kiln._kiln.reduce(name, x._v, axes, False)), out_dtype)]


@kiln_convert.register(ptm.Argmax)
def _argmax(op, node, inputs):
    axes = None if op.axis is None else list(op.axis)
    if axes is not None and len(axes) != 1:
        raise Unsupported("Argmax over several axes")
    return [_cast(inputs[0].argmax(axis=axes), node.outputs[0].dtype)]


# --- shapes and views -------------------------------------------------------------------
@kiln_convert.register(pte.DimShuffle)
def _dimshuffle(op, node, inputs):
    return [inputs[0].dimshuffle(*op.new_order)]


@kiln_convert.register(pts.Reshape)
def _reshape(op, node, inputs):
    return [inputs[0].reshape(_const_ints(node.inputs[1], "a reshape's shape"))]


@kiln_convert.register(pts.SpecifyShape)
def _specify_shape(op, node, inputs):
    # The checked shape is the output's type; kiln checks the types of its inputs at the call.
    return [inputs[0]]


def _known(node, value):
    """`value` as `node`'s output, known from here on."""
    value = np.asarray(value, dtype=_kiln_dtype(node.outputs[0].dtype))
    _STATIC[node.outputs[0]] = value
    return [kiln.constant(value)]


@kiln_convert.register(pts.Shape)
def _shape(op, node, inputs):
    # The sizes kiln's type knows (it may know more than PyTensor's, and knows every one when
    # the graph is compiled for a call's shapes).
    shape = inputs[0].shape
    if any(d is None for d in shape):
        raise NeedsShapes("Shape of a dim known only at run time")
    return _known(node, shape)


@kiln_convert.register(pts.Shape_i)
def _shape_i(op, node, inputs):
    d = inputs[0].shape[op.i]
    if d is None:
        raise NeedsShapes("Shape_i of a dim known only at run time")
    return _known(node, d)


@kiln_convert.register(ptb.ScalarFromTensor)
@kiln_convert.register(ptb.TensorFromScalar)
def _scalar_tensor(op, node, inputs):
    # kiln has no scalar type: a PyTensor scalar is a 0-d kiln variable.
    return [_cast(inputs[0], node.outputs[0].dtype)]


_ASSERT_WARNED = []


@kiln_convert.register(pt_raise.CheckAndRaise)
def _assert(op, node, inputs):
    # kiln has no assertion op: the value passes through unchecked (as in PyTensor's JAX
    # backend), said once.
    if not _ASSERT_WARNED:
        import warnings

        warnings.warn(
            "kiln does not check PyTensor's Assert and CheckAndRaise ops: their conditions are skipped",
            stacklevel=2,
        )
        _ASSERT_WARNED.append(True)
    return [inputs[0]]


@kiln_convert.register(pytensor.compile.ops.DeepCopyOp)
def _deep_copy(op, node, inputs):
    # kiln's results are fresh arrays: the copy is there already.
    return [inputs[0]]


@kiln_convert.register(ptb.Alloc)
def _alloc(op, node, inputs):
    shape = [_const_ints(s, "an Alloc's shape")[0] for s in node.inputs[1:]]
    v = _cast(inputs[0], node.outputs[0].dtype)
    return [kiln.broadcast_to(v, shape) * 1 if shape else v]


@kiln_convert.register(ptb.ARange)
def _arange(op, node, inputs):
    # The bounds must be known (kiln's arange has a static length); numpy's arange of them.
    start, stop, step = (_const(v) for v in node.inputs)
    if start is None or stop is None or step is None:
        raise NeedsShapes("ARange with bounds known only at run time")
    dtype = node.outputs[0].dtype
    return _known(node, np.arange(start.item(), stop.item(), step.item(), dtype=dtype))


@kiln_convert.register(ptb.Join)
def _join(op, node, inputs):
    dtype = node.outputs[0].dtype
    if isinstance(getattr(op, "axis", None), int):
        axis, parts = op.axis, inputs
    else:
        # Older PyTensor: the axis is the first input.
        axis, parts = _const_ints(node.inputs[0], "a Join's axis")[0], inputs[1:]
    return [kiln.concatenate([_cast(x, dtype) for x in parts], axis)]


@kiln_convert.register(ptb.MakeVector)
def _make_vector(op, node, inputs):
    dtype = node.outputs[0].dtype
    if not inputs:
        return [kiln.constant(np.zeros(0, dtype))]
    return [kiln.stack([_cast(x, dtype) for x in inputs])]


@kiln_convert.register(ptsub.Subtensor)
def _subtensor(op, node, inputs):
    idx = ptsub.indices_from_subtensor(node.inputs[1:], op.idx_list)

    def value(v):
        if v is None or isinstance(v, int):
            return v
        c = _const(v)
        if c is None:
            raise Unsupported("Subtensor with bounds known only at run time")
        return int(c)

    key = tuple(
        slice(value(k.start), value(k.stop), value(k.step)) if isinstance(k, slice) else value(k)
        for k in idx
    )
    return [inputs[0][key]]


@kiln_convert.register(ptsub.AdvancedSubtensor)
def _advanced_subtensor(op, node, inputs):
    # One integer array along one axis, every other axis whole: numpy's take.
    axis = op._take_axis() if hasattr(op, "_take_axis") else None
    if axis is None or len(inputs) != 2 or not node.inputs[1].dtype.startswith(("int", "uint")):
        raise Unsupported("AdvancedSubtensor other than one integer array along one axis")
    return [kiln.take(inputs[0], _cast(inputs[1], "int64"), axis)]


@kiln_convert.register(ptb.Split)
def _split(op, node, inputs):
    # numpy's split at the running sums of the sizes, which must be known: slices of kiln's.
    sizes = _const_ints(node.inputs[1], "a Split's sizes")
    x, axis = inputs[0], op.axis % inputs[0].ndim
    length = x.shape[axis]
    if length is not None and (sum(sizes) != length or min(sizes, default=0) < 0):
        raise kiln.ShapeError(
            f"Split sizes {sizes} do not cut an axis of {length} (they must be non-negative and add up to it)"
        )
    outs, start = [], 0
    for size in sizes:
        key = tuple(slice(start, start + size) if d == axis else slice(None) for d in range(x.ndim))
        outs.append(x[key])
        start += size
    return outs


# --- along an axis: running sums and sorts ----------------------------------------------
@kiln_convert.register(ptx.CumOp)
def _cum_op(op, node, inputs):
    # PyTensor flattens first where the axis is None (as numpy does).
    x, axis = inputs[0], op.axis
    if axis is None:
        x, axis = x.reshape([-1]), 0
    along = {"add": kiln.cumsum, "mul": kiln.cumprod}.get(op.mode)
    if along is None:
        raise Unsupported(f"CumOp{{{op.mode}}}")
    return [_cast(along(x, axis), node.outputs[0].dtype)]


@kiln_convert.register(ptsort.SortOp)
@kiln_convert.register(ptsort.ArgSortOp)
def _sort(op, node, inputs):
    # kiln sorts NaNs last, as numpy does; equal keys keep their order (numpy's "stable"; its
    # default quicksort may order ties otherwise, and argsort then differs there).
    x, axis = inputs[0], op.axis
    if axis is None:
        x, axis = x.reshape([-1]), 0
    along = kiln.sort if isinstance(op, ptsort.SortOp) else kiln.argsort
    return [_cast(along(x, axis), node.outputs[0].dtype)]


# --- products and the nn ops ----------------------------------------------------------
@kiln_convert.register(ptm.Dot)
def _dot(op, node, inputs):
    dtype = node.outputs[0].dtype
    return [_cast(_cast(inputs[0], dtype) @ _cast(inputs[1], dtype), dtype)]


@kiln_convert.register(ptsp.Softmax)
def _softmax(op, node, inputs):
    axis = op.axis
    if axis is None or len(axis) != 1:
        raise Unsupported("Softmax over several axes")
    return [kiln.softmax(inputs[0], axis[0])]


@kiln_convert.register(ptsp.LogSoftmax)
def _log_softmax(op, node, inputs):
    axis = op.axis
    if axis is None or len(axis) != 1:
        raise Unsupported("LogSoftmax over several axes")
    return [kiln.log_softmax(inputs[0], axis[0])]


@kiln_convert.register(OpFromGraph)
def _op_from_graph(op, node, inputs):
    # Its inner graph, converted where it stands (an OpFromGraph is a function of its inputs).
    return _convert_graph(op.fgraph.inputs, op.fgraph.outputs, dict(zip(op.fgraph.inputs, inputs)))


# --- graphs -----------------------------------------------------------------------------
def _toposort(outputs, inputs):
    from pytensor.graph.traversal import io_toposort

    return io_toposort(inputs, outputs)


def _convert_graph(ins, outs, env):
    """kiln's variables for `outs`, with `env` giving kiln's for `ins` (filled as it goes)."""
    for node in _toposort(outs, ins):
        if _fold(node):
            for v in node.outputs:
                env[v] = kiln.constant(_STATIC[v].astype(_kiln_dtype(_STATIC[v].dtype)))
            continue
        args = []
        for v in node.inputs:
            if v not in env:
                c = _const(v)
                if c is None:
                    raise Unsupported(f"an input of {node.op} that is neither computed nor given")
                dtype = _kiln_dtype(getattr(v, "dtype", c.dtype))
                env[v] = kiln.constant(c.astype(dtype))
            args.append(env[v])
        try:
            results = kiln_convert(node.op, node, args)
        except NeedsShapes:
            if not (_PER_SHAPE and _PER_SHAPE[0]):
                raise
            results = _through_perform(node, args)
        except Unsupported:
            results = _through_perform(node, args)
        for v, r in zip(node.outputs, results, strict=True):
            env[v] = r
    result = []
    for o in outs:
        if o not in env:
            env[o] = kiln.constant(np.asarray(_const(o)))
        result.append(env[o])
    return result


# Whether the graph being converted has its inputs' sizes (compiled for a call's shapes).
_PER_SHAPE = []
_WARNED = set()


def _passable(t):
    """Whether values of PyTensor type `t` pass between kiln and an Op's perform: tensors
    and PyTensor scalars of kiln's dtypes or of the narrow integers kiln widens."""
    return isinstance(t, (TensorType, ps.ScalarType)) and _kiln_dtype(t.dtype) in _KILN_DTYPES


def _through_perform(node, args):
    """`node` as a kiln custom op that runs the Op's own `perform` on the call's arrays (the
    GIL held), where kiln has no conversion for it; said once per Op class."""
    if not node.inputs or not all(_passable(v.type) for v in (*node.inputs, *node.outputs)):
        raise Unsupported(f"{type(node.op).__name__} (and its perform takes what kiln cannot pass)")
    name = type(node.op).__name__
    if name not in _WARNED:
        import warnings

        _WARNED.add(name)
        warnings.warn(f"kiln runs PyTensor's {name} through its perform (no kiln conversion yet)",
                      stacklevel=2)

    def run(arrays, node=node):
        # Each value as the Op expects it: its own dtype (narrow integers narrowed back), a
        # PyTensor scalar as a numpy scalar.
        given = []
        for a, v in zip(arrays, node.inputs):
            a = np.asarray(a, dtype=v.type.dtype)
            given.append(a[()] if isinstance(v.type, ps.ScalarType) else a)
        storage = [[None] for _ in node.outputs]
        node.op.perform(node, given, storage)
        return [np.asarray(s[0], dtype=_kiln_dtype(o.type.dtype)) for s, o in zip(storage, node.outputs)]

    def shape(t):
        return list(t.shape) if isinstance(t, TensorType) else []

    outs = kiln._kiln.python_op(
        name, [_cast(a, v.type.dtype)._v for a, v in zip(args, node.inputs)],
        [(_kiln_dtype(o.type.dtype), shape(o.type)) for o in node.outputs], run, None,
    )
    return [kiln._wrap(o) for o in outs]


def _fold(node):
    """Computes `node` now, with its own `perform`, where every input is known and small (a
    shape computation); records its outputs as known."""
    vals = [_const(v) for v in node.inputs]
    if not node.inputs or any(v is None for v in vals) or sum(np.size(v) for v in vals) > 4096:
        return False
    if any(isinstance(o.type, TensorType) and _kiln_dtype(o.dtype) not in _KILN_DTYPES for o in node.outputs):
        return False
    storage = [[None] for _ in node.outputs]
    try:
        node.op.perform(node, [v[()] if np.ndim(v) == 0 and not isinstance(i.type, TensorType) else v
                               for v, i in zip(vals, node.inputs)], storage)
    except Exception:
        return False
    for o, (value,) in zip(node.outputs, storage):
        _STATIC[o] = np.asarray(value)
    return True


_KILN_DTYPES = {"bool", "int32", "int64", "float32", "float64"}


def unsupported(fgraph):
    """The names of the Ops in `fgraph` kiln has no conversion for: they run through their own
    `perform` (empty: the graph converts whole)."""
    missing = []
    for node in fgraph.toposort():
        try:
            handler = kiln_convert.dispatch(type(node.op))
        except Exception:
            handler = None
        if handler is kiln_convert.dispatch(object):
            missing.append(type(node.op).__name__)
        elif isinstance(node.op, pte.Elemwise):
            kind = type(node.op.scalar_op)
            known = set(_UNARY) | set(_BINARY) | set(_NARY) | {
                ps.Cast, ps.Identity, ps.Switch, ps.Second, _SOFTPLUS, ps.IsNan, ps.IsInf}
            if kind not in known:
                missing.append(f"Elemwise{{{kind.__name__}}}")
    return sorted(set(missing))


def _compile(fgraph, shapes):
    """`fgraph` compiled by kiln with its inputs of `shapes` (PyTensor's types' where None)."""
    ins = []
    for k, v in enumerate(fgraph.inputs):
        if not isinstance(v.type, TensorType) or _kiln_dtype(v.type.dtype) != v.type.dtype:
            raise NotImplementedError(f"kiln cannot compile this graph yet: an input of type {v.type}")
        shape = v.type.shape if shapes is None else shapes[k]
        ins.append(kiln.tensor(v.name or f"in{k}", v.type.dtype, shape))
    _STATIC.clear()
    _PER_SHAPE[:] = [shapes is not None]
    try:
        outs = _convert_graph(fgraph.inputs, fgraph.outputs, dict(zip(fgraph.inputs, ins)))
    finally:
        _STATIC.clear()
        _PER_SHAPE.clear()
    # A function output that is one of its inputs is copied: PyTensor's outputs never alias
    # its inputs' storage unless asked.
    outs = [(o | False if o.dtype == "bool" else o + 0) if o in ins else o for o in outs]
    return kiln.function(ins, outs)


class _PerShape:
    """A graph compiled once per call shape: the sizes its shape computations need are then
    known (kiln compiles in milliseconds)."""

    def __init__(self, fgraph):
        self.fgraph = fgraph
        self.compiled = {}

    def __call__(self, *args):
        key = tuple(np.shape(a) for a in args)
        f = self.compiled.get(key)
        if f is None:
            f = self.compiled[key] = _compile(self.fgraph, key)
        return f(*args)


def convert(fgraph):
    """`fgraph` as a callable of its inputs' arrays returning its outputs': one kiln function,
    or one per call shape where the graph computes with sizes known only at run time."""
    try:
        return _compile(fgraph, None)
    except NeedsShapes:
        return _PerShape(fgraph)
    except Unsupported as e:
        raise NotImplementedError(
            f"kiln cannot compile this graph yet: {e} (unsupported here: "
            f"{', '.join(unsupported(fgraph)) or 'none by op class'})"
        ) from None


class KilnLinker(JITLinker):
    """A PyTensor linker that compiles the whole graph with kiln."""

    required_rewrites = ("minimum_compile",)
    incompatible_rewrites = (
        "cxx_only",
        "BlasOpt",
        "fusion",
        "inplace",
        "scan_reduce_trace_prealloc",
        "reuse_decomposition_multiple_solves",
        "scan_split_non_sequence_decomposition_and_solve",
    )

    def fgraph_convert(self, fgraph, input_storage, storage_map, **kwargs):
        return convert(fgraph)

    def jit_compile(self, fn):
        return fn

    def create_thunk_inputs(self, storage_map):
        return [storage_map[n] for n in self.fgraph.inputs]


register_linker("kiln", KilnLinker())
KILN = Mode(KilnLinker(), RewriteDatabaseQuery(include=["fast_run"], exclude=["fusion", "inplace", "BlasOpt", "cxx_only"]))
register_mode("KILN", KILN)
