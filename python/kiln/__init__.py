"""kiln from Python: build a graph of tensor variables, take gradients, compile a function.

    import numpy as np, kiln
    x = kiln.matrix("x", dtype="float32")
    w = kiln.shared(np.zeros((3, 2), np.float32), name="w")
    y = kiln.tanh(x @ w).sum()
    gw = kiln.grad(y, w)
    step = kiln.function([x], y, updates=[(w, w - 0.1 * gw)])
    step(np.ones((4, 3), np.float32))

Everything here builds through kiln's own graph builders (the `_kiln` extension): numbers
beside a variable take its dtype when they are values of it, broadcasting is numpy's as types
decide it, and every error names the line of your code that built the failing node.
"""

from __future__ import annotations

import builtins as _builtins

import numpy as _np

from . import _kiln
from .errors import KilnError, ShapeError, TypeError

__all__ = ["Variable", "Function", "KilnError", "TypeError", "ShapeError"]

_UNARY, _BINARY, _REDUCE = _kiln.op_names()


def _raw(x):
    """The extension's handle of a Variable; anything else as it is (a number, an array)."""
    return x._v if isinstance(x, Variable) else x


def _wrap(v):
    return Variable(v)


def _axes(axis):
    """An axis argument (None, an int or a sequence of ints) as a list of ints, or None."""
    if axis is None:
        return None
    if isinstance(axis, (int, _np.integer)):
        return [int(axis)]
    return [int(a) for a in axis]


def _shape(args):
    """A shape given as one sequence or as separate ints (`x.reshape(2, 3)`)."""
    if len(args) == 1 and not isinstance(args[0], (int, _np.integer)):
        return [int(d) for d in args[0]]
    return [int(d) for d in args]


class Variable:
    """A symbolic tensor: an input, a constant, a shared variable or the result of an op.

    It has numpy's operators and the methods of numpy's arrays that make sense on a graph;
    `==` and `!=` compare variables themselves (as in Theano and PyTensor, so that variables
    can key dicts): use `kiln.eq` and `kiln.neq` for the elementwise comparison.
    """

    __slots__ = ("_v",)

    def __init__(self, handle):
        self._v = handle

    # --- what the variable is -------------------------------------------------------------
    @property
    def name(self):
        """The name given to the variable, or None."""
        return self._v.name

    @property
    def dtype(self):
        """numpy's name of the dtype (`"float32"`)."""
        return self._v.dtype

    @property
    def shape(self):
        """The static shape: an int per known dim, None per dim known only at call time."""
        return tuple(self._v.shape)

    @property
    def ndim(self):
        """The rank."""
        return len(self._v.shape)

    @property
    def type(self):
        """The type as kiln prints it (`f32[3, ?]`)."""
        return self._v.type_text

    def __repr__(self):
        name = self.name
        return f"Variable({name + ': ' if name else ''}{self.type})"

    def __bool__(self):
        raise TypeError("a symbolic variable has no truth value: compile it, or use kiln.ifelse")

    def __iter__(self):
        raise TypeError("a symbolic variable is not iterable")

    def __len__(self):
        raise TypeError("a symbolic variable has no len(): use .shape")

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return not self.__eq__(other)

    # --- shared variables -----------------------------------------------------------------
    def get_value(self):
        """A shared variable's value (a copy)."""
        return self._v.get_value()

    def set_value(self, value):
        """Sets a shared variable's value (converted to its dtype; same shape)."""
        self._v.set_value(value)

    # --- arithmetic -----------------------------------------------------------------------
    def _bin(self, op, other, reflected=False):
        return _wrap(_kiln.binary(op, self._v, _raw(other), reflected))

    def __add__(self, o):
        return self._bin("add", o)

    def __radd__(self, o):
        return self._bin("add", o, True)

    def __sub__(self, o):
        return self._bin("sub", o)

    def __rsub__(self, o):
        return self._bin("sub", o, True)

    def __mul__(self, o):
        return self._bin("mul", o)

    def __rmul__(self, o):
        return self._bin("mul", o, True)

    def __truediv__(self, o):
        return self._bin("div", o)

    def __rtruediv__(self, o):
        return self._bin("div", o, True)

    def __floordiv__(self, o):
        return self._bin("floordiv", o)

    def __rfloordiv__(self, o):
        return self._bin("floordiv", o, True)

    def __mod__(self, o):
        return self._bin("mod", o)

    def __rmod__(self, o):
        return self._bin("mod", o, True)

    def __pow__(self, o):
        return self._bin("pow", o)

    def __rpow__(self, o):
        return self._bin("pow", o, True)

    def __matmul__(self, o):
        return _wrap(_kiln.matmul(self._v, _raw(o)))

    def __rmatmul__(self, o):
        return _wrap(_kiln.matmul(_raw(constant(o)), self._v))

    def __lt__(self, o):
        return self._bin("lt", o)

    def __le__(self, o):
        return self._bin("le", o)

    def __gt__(self, o):
        return self._bin("gt", o)

    def __ge__(self, o):
        return self._bin("ge", o)

    def __and__(self, o):
        return self._bin("and", o)

    def __rand__(self, o):
        return self._bin("and", o, True)

    def __or__(self, o):
        return self._bin("or", o)

    def __ror__(self, o):
        return self._bin("or", o, True)

    def __neg__(self):
        return _wrap(_kiln.unary("neg", self._v))

    def __pos__(self):
        return self

    def __abs__(self):
        return _wrap(_kiln.unary("abs", self._v))

    def __invert__(self):
        return _wrap(_kiln.unary("not", self._v))

    # --- methods --------------------------------------------------------------------------
    def _reduce(self, op, axis, keepdims):
        return _wrap(_kiln.reduce(op, self._v, _axes(axis), keepdims))

    def sum(self, axis=None, keepdims=False):
        """The sum over `axis` (an int, a tuple, or None for every axis)."""
        return self._reduce("sum", axis, keepdims)

    def prod(self, axis=None, keepdims=False):
        """The product over `axis`."""
        return self._reduce("prod", axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        """The mean over `axis`."""
        return self._reduce("mean", axis, keepdims)

    def max(self, axis=None, keepdims=False):
        """The maximum over `axis` (NaN wins, as in numpy)."""
        return self._reduce("max", axis, keepdims)

    def min(self, axis=None, keepdims=False):
        """The minimum over `axis`."""
        return self._reduce("min", axis, keepdims)

    def all(self, axis=None, keepdims=False):
        """Whether every element over `axis` is true."""
        return self._reduce("all", axis, keepdims)

    def any(self, axis=None, keepdims=False):
        """Whether any element over `axis` is true."""
        return self._reduce("any", axis, keepdims)

    def argmax(self, axis=None, keepdims=False):
        """The position of the maximum along `axis` (of the flattened array for None), i64."""
        return self._reduce("argmax", axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        """The position of the minimum along `axis`, i64."""
        return self._reduce("argmin", axis, keepdims)

    def reshape(self, *shape):
        """numpy's reshape: `x.reshape(2, -1)` or `x.reshape((2, -1))`."""
        return _wrap(_kiln.reshape(self._v, _shape(shape)))

    def flatten(self):
        """The elements as one axis, in C order."""
        return self.reshape(-1)

    def transpose(self, *axes):
        """Permutes the axes (reverses them without arguments)."""
        perm = list(range(self.ndim))[::-1] if not axes else _shape(axes)
        return _wrap(_kiln.transpose(self._v, perm))

    @property
    def T(self):
        """The axes reversed."""
        return self.transpose()

    def astype(self, dtype):
        """The elements converted to `dtype`."""
        return _wrap(_kiln.cast(self._v, dtype))

    def dimshuffle(self, *pattern):
        """Theano's dimshuffle: `x.dimshuffle(1, "x", 0)` permutes the axes and inserts
        broadcastable ones at each `"x"`; an axis left out must have extent 1."""
        if len(pattern) == 1 and isinstance(pattern[0], (list, tuple)):
            pattern = tuple(pattern[0])
        kept = [p for p in pattern if p != "x"]
        dropped = [a for a in range(self.ndim) if a not in kept]
        x = self.squeeze(dropped) if dropped else self
        order = sorted(kept)
        x = x.transpose(*[order.index(p) for p in kept]) if kept != order else x
        new = [i for i, p in enumerate(pattern) if p == "x"]
        return x.expand_dims(new) if new else x

    def squeeze(self, axis=None):
        """Removes size-1 dims (`axis`, or every dim known to be 1)."""
        return _wrap(_kiln.squeeze(self._v, _axes(axis)))

    def expand_dims(self, axis):
        """Inserts size-1 dims at `axis` (positions in the result)."""
        return _wrap(_kiln.expand_dims(self._v, _axes(axis)))

    def take(self, indices, axis=0):
        """numpy's take."""
        return take(self, indices, axis)

    def __getitem__(self, key):
        return _index(self, key)


def _is_index_array(k):
    return isinstance(k, (Variable, list, _np.ndarray))


def _index(x, key):
    """numpy's indexing: ints, slices, `...` and `None` (basic), or one array of positions
    along the first axis (through `take`)."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) == 1 and _is_index_array(key[0]):
        return take(x, key[0], 0)
    if _builtins.any(_is_index_array(k) for k in key):
        raise TypeError("kiln indexes by one array of positions at a time: use kiln.take")
    real = _builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if key.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (x.ndim - real) + key[i + 1 :]
    if real > x.ndim:
        raise IndexError(f"too many indices: {real} for a variable of rank {x.ndim}")
    ranges, drop, new, axis, out = [], [], [], 0, 0
    for k in key:
        if k is None:
            new.append(out)
            out += 1
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            ranges.append((k.start, k.stop, step))
            axis += 1
            out += 1
        elif isinstance(k, (int, _np.integer)):
            k = int(k)
            n = x.shape[axis]
            if n is not None and not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            ranges.append((k, None if k == -1 else k + 1, 1))
            drop.append(axis)
            axis += 1
        else:
            raise TypeError(f"kiln cannot index with {k!r}")
    y = _wrap(_kiln.slice(x._v, ranges)) if ranges else x
    if drop:
        y = y.squeeze(drop)
    if new:
        y = y.expand_dims(new)
    return y


# --- leaves -------------------------------------------------------------------------------
def tensor(name=None, dtype="float64", shape=()):
    """A function input of `dtype` and `shape` (None for a dim known only at call time)."""
    return _wrap(_kiln.input(name or "input", dtype, [None if d is None else int(d) for d in shape]))


def scalar(name=None, dtype="float64"):
    """A 0-d input."""
    return tensor(name, dtype, ())


def vector(name=None, dtype="float64", shape=(None,)):
    """A 1-d input."""
    return tensor(name, dtype, shape)


def matrix(name=None, dtype="float64", shape=(None, None)):
    """A 2-d input."""
    return tensor(name, dtype, shape)


def constant(value, dtype=None):
    """A constant holding a copy of `value` (in `dtype` where given)."""
    if isinstance(value, Variable):
        return value
    return _wrap(_kiln.constant(value, dtype))


def shared(value, name=None, dtype=None):
    """A shared variable holding a copy of `value`: functions read it, and update it in place
    where asked (`function(..., updates=[(w, new_w)])`)."""
    return _wrap(_kiln.shared(name or "shared", value, dtype))


def zeros(shape, dtype="float64"):
    """An array of zeros."""
    return full(shape, 0.0, dtype)


def ones(shape, dtype="float64"):
    """An array of ones."""
    return full(shape, 1.0, dtype)


def full(shape, value, dtype="float64"):
    """An array with every element `value`."""
    return _wrap(_kiln.full(_shape((shape,)) if not isinstance(shape, int) else [shape], float(value), dtype))


def arange(start, stop=None, step=1, dtype="int64"):
    """numpy's arange."""
    if stop is None:
        start, stop = 0, start
    return _wrap(_kiln.arange(float(start), float(stop), float(step), dtype))


# --- ops ----------------------------------------------------------------------------------
def _unary_fn(op):
    def f(x):
        return _wrap(_kiln.unary(op, _raw(constant(x))))

    f.__name__ = op
    f.__doc__ = f"kiln's elementwise `{op}`."
    return f


def _binary_fn(op):
    def f(a, b):
        if isinstance(a, Variable):
            return _wrap(_kiln.binary(op, a._v, _raw(b)))
        if isinstance(b, Variable):
            return _wrap(_kiln.binary(op, b._v, a, True))
        return _wrap(_kiln.binary(op, _raw(constant(a)), _raw(b)))

    f.__name__ = op
    f.__doc__ = f"kiln's elementwise `{op}` (numpy broadcasting)."
    return f


def _reduce_fn(op):
    def f(x, axis=None, keepdims=False):
        return _wrap(_kiln.reduce(op, _raw(constant(x)), _axes(axis), keepdims))

    f.__name__ = op
    f.__doc__ = f"kiln's `{op}` over `axis` (None: every axis)."
    return f


# The module's `sum`, `max`, `any`, `abs`, `round` ... are kiln's ops, as numpy's are numpy's:
# code below that means Python's own spells it `_builtins.sum`.
# Python keywords and numpy's spellings: kiln's `not` is `logical_not`, and so on.
_UNARY_NAMES = {"not": "logical_not", "neg": "negative"}
_BINARY_NAMES = {"and": "logical_and", "or": "logical_or"}
_NUMPY_ALIASES = {
    "sub": "subtract",
    "mul": "multiply",
    "div": "true_divide",
    "floordiv": "floor_divide",
    "pow": "power",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
    "eq": "equal",
    "ne": "not_equal",
}

for _op in _UNARY:
    globals()[_UNARY_NAMES.get(_op, _op)] = _unary_fn(_op)
    __all__.append(_UNARY_NAMES.get(_op, _op))
for _op in _BINARY:
    globals()[_BINARY_NAMES.get(_op, _op)] = _binary_fn(_op)
    __all__.append(_BINARY_NAMES.get(_op, _op))
    if _op in _NUMPY_ALIASES:
        globals()[_NUMPY_ALIASES[_op]] = globals()[_op]
        __all__.append(_NUMPY_ALIASES[_op])
for _op in _REDUCE:
    globals()[_op] = _reduce_fn(_op)
    __all__.append(_op)
neq = globals()["ne"]
divide = globals()["div"]
__all__ += ["neq", "divide"]


def cast(x, dtype):
    """The elements converted to `dtype`."""
    return constant(x).astype(dtype)


def matmul(a, b):
    """numpy's matmul."""
    return constant(a) @ b


dot = matmul


def reshape(x, shape):
    """numpy's reshape."""
    return constant(x).reshape(shape)


def transpose(x, axes=None):
    """numpy's transpose."""
    return constant(x).transpose(*(axes or ()))


def broadcast_to(x, shape):
    """numpy's broadcast_to (a view)."""
    return _wrap(_kiln.broadcast_to(_raw(constant(x)), _shape((shape,))))


def expand_dims(x, axis):
    """numpy's expand_dims."""
    return constant(x).expand_dims(axis)


def squeeze(x, axis=None):
    """numpy's squeeze."""
    return constant(x).squeeze(axis)


def take(x, indices, axis=0):
    """numpy's take: the elements at integer `indices` (any shape) along `axis`."""
    return _wrap(_kiln.take(_raw(constant(x)), _raw(indices), int(axis)))


def take_along_axis(x, indices, axis):
    """numpy's take_along_axis."""
    return _wrap(_kiln.take_along_axis(_raw(constant(x)), _raw(indices), int(axis)))


def concatenate(xs, axis=0):
    """numpy's concatenate."""
    return _wrap(_kiln.concat([_raw(constant(x)) for x in xs], int(axis)))


def stack(xs, axis=0):
    """numpy's stack: each variable given a new axis, then concatenated along it."""
    return concatenate([constant(x).expand_dims(axis) for x in xs], axis)


def where(cond, a, b):
    """numpy's where: `a` where `cond` is true, else `b` (both computed)."""
    return _wrap(_kiln.select(_raw(constant(cond)), _raw(a), _raw(b)))


switch = where


def _along(op):
    def f(x, axis=-1):
        return _wrap(_kiln.along(op, _raw(constant(x)), int(axis)))

    f.__name__ = op
    f.__doc__ = f"kiln's `{op}` along `axis`."
    return f


cumsum = _along("cumsum")
cumprod = _along("cumprod")
sort = _along("sort")
argsort = _along("argsort")
softmax = _along("softmax")
log_softmax = _along("log_softmax")


def one_hot(indices, depth, dtype="float32"):
    """One-hot rows of integer `indices` (JAX's one_hot)."""
    return _wrap(_kiln.one_hot(_raw(constant(indices)), int(depth), dtype))


def topk(x, k):
    """The `k` largest elements of the last axis, largest first, and their positions."""
    v, i = _kiln.topk(_raw(constant(x)), int(k))
    return _wrap(v), _wrap(i)


def cross_entropy(logits, targets):
    """The mean cross-entropy of `logits` against integer class `targets`."""
    return _wrap(_kiln.cross_entropy(_raw(logits), _raw(targets)))


def layer_norm(x, gain, bias, eps=1e-5):
    """Layer normalization over the last axis."""
    return _wrap(_kiln.layer_norm(_raw(x), _raw(gain), _raw(bias), float(eps)))


def gelu(x):
    """GELU (the tanh approximation)."""
    return _wrap(_kiln.gelu(_raw(x)))


def attention(q, k, v, causal=False):
    """Scaled dot-product attention of `q` over `k` and `v` (causal masks the future)."""
    return _wrap(_kiln.attention(_raw(q), _raw(k), _raw(v), bool(causal)))


def grad(cost, wrt):
    """The gradient of the 0-d `cost` with respect to `wrt` (a variable, or a list of them:
    a list back)."""
    if isinstance(wrt, Variable):
        return _wrap(_kiln.grad(cost._v, [wrt._v])[0])
    return [_wrap(g) for g in _kiln.grad(cost._v, [w._v for w in wrt])]


def ifelse(cond, then, otherwise):
    """Theano's lazy ifelse: `then()` where the 0-d bool `cond` is true, else `otherwise()`;
    only the branch taken is computed. Each callable returns a variable (one back) or a list
    (a list back) of the same types."""
    single = []

    def branch(f):
        def run():
            out = f()
            single.append(isinstance(out, Variable))
            outs = [out] if isinstance(out, Variable) else list(out)
            return [_raw(constant(o)) for o in outs]

        return run

    outs = [_wrap(v) for v in _kiln.ifelse(_raw(cond), branch(then), branch(otherwise))]
    return outs[0] if single and single[0] and len(outs) == 1 else outs


def scan(body, init, xs, reverse=False):
    """`lax.scan`: `body(carries, slices)` gets lists of variables (the carries, and each
    sequence's slice at the step) and returns `(new_carries, ys)`; the result is
    `(last_carries, stacked_ys)`, each stacked value with the steps along a new first axis.
    `reverse` walks the sequences from their end (the stacked values keep their order)."""

    def raw_body(cs, ss):
        new, ys = body([_wrap(c) for c in cs], [_wrap(x) for x in ss])
        return [_raw(constant(v)) for v in new], [_raw(constant(v)) for v in ys]

    last, stacked = _kiln.scan(raw_body, [_raw(v) for v in init], [_raw(v) for v in xs], reverse)
    return [_wrap(v) for v in last], [_wrap(v) for v in stacked]


class Op:
    """An op written in Python, in Theano's shape. Subclass it and define

    - `make_node(self, *inputs)`: the outputs' types, a list of `(dtype, shape)` (`None` for
      a dim `perform` decides), after checking the inputs (raise `kiln.TypeError`);
    - `perform(self, inputs, output_storage)`: compute from numpy arrays, storing output `i`
      in `output_storage[i][0]` (Theano's protocol);
    - optionally `grad(self, inputs, output_grads)`: one variable per input (None where the
      output does not depend on it); without it the op is not differentiable.

    Calling the op on variables applies it: `MyOp()(x, y)` (a variable, or a list for several
    outputs). kiln calls `perform` with the GIL held, from whichever thread runs the call.
    """

    def make_node(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} defines no make_node")

    def perform(self, inputs, output_storage):
        raise NotImplementedError(f"{type(self).__name__} defines no perform")

    def __call__(self, *inputs):
        ins = [constant(i) for i in inputs]
        types = self.make_node(*ins)

        def run(arrays):
            storage = [[None] for _ in types]
            self.perform(arrays, storage)
            return [s[0] for s in storage]

        grad = None
        if type(self).grad is not Op.grad:

            def grad(xs, _ys, gs):
                g = self.grad([_wrap(x) for x in xs], [None if v is None else _wrap(v) for v in gs])
                return [None if v is None else _raw(constant(v)) for v in g]

        outs = _kiln.python_op(
            type(self).__name__, [_raw(i) for i in ins],
            [(d, [None if n is None else int(n) for n in shape]) for d, shape in types], run, grad,
        )
        outs = [_wrap(o) for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def grad(self, inputs, output_grads):
        raise NotImplementedError


def as_op(otypes, grad=None, name=None):
    """Theano's as_op: makes a function of numpy arrays an op. `otypes` lists the outputs'
    `(dtype, shape)`; `grad(inputs, output_grads)`, where given, returns one variable per
    input. The function returns one array, or a tuple for several outputs.

        @kiln.as_op([("float64", (None,))])
        def cumulative_max(x):
            return np.maximum.accumulate(x)
    """

    def wrap(fn):
        class _AsOp(Op):
            def make_node(self, *inputs):
                return list(otypes)

            def perform(self, inputs, output_storage):
                out = fn(*inputs)
                outs = out if isinstance(out, tuple) else (out,)
                for s, o in zip(output_storage, outs, strict=True):
                    s[0] = o

        if grad is not None:
            _AsOp.grad = lambda self, inputs, gs: grad(inputs, gs)
        _AsOp.__name__ = name or fn.__name__
        op = _AsOp()
        functools_wraps(fn)(op)
        return op

    return wrap


def functools_wraps(fn):
    import functools

    def apply(obj):
        try:
            functools.update_wrapper(obj, fn)
        except AttributeError:
            pass
        return obj

    return apply


def debugprint(outputs):
    """Prints the graph of `outputs` (a variable or a list) as kiln's text and returns it."""
    outs = [outputs] if isinstance(outputs, Variable) else list(outputs)
    text = _kiln.debugprint([o._v for o in outs])
    print(text)
    return text


# --- functions ----------------------------------------------------------------------------
Function = _kiln.Function


def function(inputs, outputs, updates=None, backend=None, optimize=True, profile=False, name=None):
    """Compiles `outputs` (a variable, or a list: a list back) as a function of `inputs`.

    `updates` pairs shared variables with their new values (a list of pairs or a dict), set
    after each call; `backend` is "cpu" (the default), "interp" or "gpu".
    """
    single = isinstance(outputs, Variable)
    outs = [outputs] if single else list(outputs)
    pairs = list(updates.items()) if isinstance(updates, dict) else list(updates or [])
    return _kiln.function(
        [_raw(i) for i in inputs],
        [_raw(constant(o)) for o in outs],
        single,
        [(_raw(s), _raw(constant(v))) for s, v in pairs],
        backend,
        optimize,
        profile,
        name,
    )


def aot(inputs, outputs, object, header=None, symbol=None, target=None, runtime=False):
    """Compiles `outputs` of `inputs` ahead of time: writes the object file `object` (and its
    C header where given) for a program that wants no JIT; returns the entry point's C name.
    `runtime=True` links kiln's runtime library for the JIT's speed (docs/reference/aot.md)."""
    outs = [outputs] if isinstance(outputs, Variable) else list(outputs)
    return _kiln.aot(
        [_raw(i) for i in inputs], [_raw(constant(o)) for o in outs], object, header, symbol,
        target, runtime,
    )


def load_function(path, backend=None):
    """Loads a function written by `Function.save` (one result: an array back)."""
    return _kiln.load_function(path, backend)


__all__ += [
    "tensor", "scalar", "vector", "matrix", "constant", "shared", "zeros", "ones", "full",
    "arange", "cast", "matmul", "dot", "reshape", "transpose", "broadcast_to", "expand_dims",
    "squeeze", "take", "take_along_axis", "concatenate", "stack", "where", "switch", "cumsum",
    "cumprod", "sort", "argsort", "softmax", "log_softmax", "one_hot", "topk",
    "cross_entropy", "layer_norm", "gelu", "attention", "grad", "ifelse", "scan",
    "debugprint", "function", "aot", "Op", "as_op",
    "load_function",
]
