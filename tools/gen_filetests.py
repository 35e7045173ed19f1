#!/usr/bin/env python3
"""Writes the op corpus of tests/filetests/ops/: one .kir file per case, with `; run:` lines whose
expected values numpy computes. Run with a Python that has numpy; the files are committed, so
the tests need no Python. Usage: python3 tools/gen_filetests.py"""
import math, os
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "filetests", "ops")
DT = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_}
NAME = {np.dtype(v): k for k, v in DT.items()}

def atom(x, dt):
    if dt == "bool":
        return "true" if x else "false"
    if dt in ("i32", "i64"):
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)

def lit(a):
    a = np.asarray(a)
    dt = NAME[a.dtype]
    def rec(v):
        if v.ndim == 0:
            return atom(v[()], dt)
        return "[" + ", ".join(rec(x) for x in v) + "]"
    return rec(a)

def ty(a, unknown=()):
    a = np.asarray(a)
    dims = ["?" if i in unknown else str(d) for i, d in enumerate(a.shape)]
    return f"{NAME[a.dtype]}[{', '.join(dims)}]"

def write(name, doc, params, body, outs, runs):
    """params: list of (name, example array, unknown dims); body: lines; outs: list of (value, type)."""
    sig = ", ".join(f"%{n}: {ty(a, u)}" for n, a, u in params)
    rets = ", ".join(t for _, t in outs)
    lines = [f"; {doc}"]
    for ins, exp in runs:
        if isinstance(exp, str):
            lines.append(f"; run: {', '.join(lit(i) for i in ins)} -> {exp}")
        else:
            lines.append(f"; run: {', '.join(lit(i) for i in ins)} -> {', '.join(lit(e) for e in exp)}")
    lines.append(f"func @{name}({sig}) -> ({rets}) {{")
    lines += ["  " + b for b in body]
    lines.append("  return " + ", ".join(v for v, _ in outs))
    lines.append("}")
    with open(os.path.join(OUT, name + ".kir"), "w") as f:
        f.write("\n".join(lines) + "\n")

def f32(*v):
    return np.array(v, np.float32)

def f64(*v):
    return np.array(v, np.float64)

np.seterr(all="ignore")
os.makedirs(OUT, exist_ok=True)
specials = f32(-2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, np.inf, -np.inf, np.nan)
pos = f64(0.0, 1e-300, 0.5, 1.0, 2.0, 100.0, np.inf, np.nan)
count = 0

def sigmoid(x):
    return 1 / (1 + np.exp(-x))

unary = {
    "neg": (np.negative, specials), "abs": (np.abs, specials), "sign": (np.sign, specials),
    "exp": (np.exp, specials), "log": (np.log, pos), "log1p": (np.log1p, f64(-1.0, -0.5, 0.0, 1e-20, 1.0, np.inf)),
    "expm1": (np.expm1, f64(-np.inf, -1.0, -1e-20, 0.0, 1e-20, 1.0, 700.0)), "sqrt": (np.sqrt, pos),
    "rsqrt": (lambda x: 1 / np.sqrt(x), f64(0.25, 1.0, 4.0, np.inf)), "sin": (np.sin, f64(-3.0, 0.0, 0.5, 1e10)),
    "cos": (np.cos, f64(-3.0, 0.0, 0.5, 100.0)), "tan": (np.tan, f64(-1.0, 0.0, 0.5)), "tanh": (np.tanh, specials),
    "sigmoid": (sigmoid, f64(-800.0, -1.0, 0.0, 1.0, 800.0)), "floor": (np.floor, specials), "ceil": (np.ceil, specials),
    "round": (np.round, f32(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6)), "square": (np.square, specials),
    "reciprocal": (np.reciprocal, f64(-0.0, 0.0, 2.0, np.inf)), "relu": (lambda x: np.where(np.isnan(x), x, np.maximum(x, 0)), specials),
}
for op, (fn, x) in unary.items():
    write(f"unary_{op}", f"{op} on special values (numpy {fn.__name__ if hasattr(fn, '__name__') else op})",
          [("x", x, (0,))], [f"%y = {op} %x"], [("%y", ty(x, (0,)))], [([x], [fn(x)])])
    count += 1
import math as _m
erf = np.vectorize(_m.erf)
x = f64(-3.0, -0.5, -0.0, 0.0, 0.25, 1.0, 6.0)
write("unary_erf", "erf", [("x", x, ())], ["%y = erf %x"], [("%y", ty(x))], [([x], [erf(x)])])
write("unary_not", "logical not", [("x", np.array([True, False]), ())], ["%y = not %x"], [("%y", "bool[2]")], [([np.array([True, False])], [np.array([False, True])])])
write("unary_int_abs_neg", "abs and neg of integers wrap at the minimum", [("x", np.array([-3, 0, 7, -2**31], np.int32), ())],
      ["%a = abs %x", "%n = neg %x"], [("%a", "i32[4]"), ("%n", "i32[4]")],
      [([np.array([-3, 0, 7, -2**31], np.int32)], [np.array([3, 0, 7, -2**31], np.int32), np.array([3, 0, -7, -2**31], np.int32)])])
count += 3

a = f32(1.5, -2.0, 0.0, np.nan, np.inf, -0.0)
b = f32(2.0, 3.0, -0.0, 1.0, np.inf, 0.0)
binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
          "minimum": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
          "eq": np.equal, "ne": np.not_equal}
for op, fn in binary.items():
    r = fn(a, b)
    write(f"binary_{op}", f"{op} with NaN, inf and signed zeros", [("a", a, ()), ("b", b, ())], [f"%y = {op} %a, %b"],
          [("%y", ty(r))], [([a, b], [r])])
    count += 1
fa, fb = f64(7.5, -7.5, 1.0, -1.0, 1.0, 5.5, -0.0), f64(2.0, 2.0, -3.0, 3.0, 0.0, np.inf, 2.0)
for op, fn in {"floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power}.items():
    r = fn(fa, fb)
    write(f"binary_{op}_f64", f"numpy {fn.__name__} on floats", [("a", fa, ()), ("b", fb, ())], [f"%y = {op} %a, %b"], [("%y", ty(r))], [([fa, fb], [r])])
    count += 1
ia, ib = np.array([7, -7, 7, -7, 5, 0], np.int64), np.array([2, 2, -2, -2, 0, 0], np.int64)
def safe(fn):
    return np.where(ib == 0, 0, fn(ia, np.where(ib == 0, 1, ib)))
for op, fn in {"floordiv": np.floor_divide, "mod": np.remainder}.items():
    write(f"binary_{op}_int_by_zero", f"integer {op}: numpy signs, and 0 for a zero divisor", [("a", ia, ()), ("b", ib, ())],
          [f"%y = {op} %a, %b"], [("%y", "i64[6]")], [([ia, ib], [safe(fn)])])
    count += 1
ba, bb = np.array([True, True, False, False]), np.array([True, False, True, False])
for op, fn in {"and": np.logical_and, "or": np.logical_or}.items():
    write(f"binary_{op}", f"logical {op}", [("a", ba, ()), ("b", bb, ())], [f"%y = {op} %a, %b"], [("%y", "bool[4]")], [([ba, bb], [fn(ba, bb)])])
    count += 1
# Broadcasting
m = np.arange(6, dtype=np.float64).reshape(2, 3)
col = f64(10, 20).reshape(2, 1)
write("broadcast_col_row", "a column against a row broadcasts to a matrix", [("c", col, ()), ("r", f64(1, 2, 3), ())],
      ["%y = add %c, %r"], [("%y", "f64[2, 3]")], [([col, f64(1, 2, 3)], [col + f64(1, 2, 3)])])
write("broadcast_scalar", "a 0-d operand broadcasts everywhere", [("m", m, ()), ("s", np.float64(2.0).reshape(()), ())],
      ["%y = mul %m, %s"], [("%y", "f64[2, 3]")], [([m, np.array(2.0)], [m * 2])])
write("broadcast_rank_mismatch", "rank 1 against rank 3, aligned on the right", [("a", np.ones((2, 1, 3)), ()), ("b", f64(1, 2, 3), ())],
      ["%y = sub %a, %b"], [("%y", "f64[2, 1, 3]")], [([np.ones((2, 1, 3)), f64(1, 2, 3)], [np.ones((2, 1, 3)) - f64(1, 2, 3)])])
write("broadcast_unknown_dims", "unknown dims resolved at run time, including a mismatch", [("a", m, (0, 1)), ("b", f64(1, 2, 3), ())],
      ["%y = add %a, %b"], [("%y", "f64[?, 3]")], [([m, f64(1, 2, 3)], [m + f64(1, 2, 3)]), ([np.ones((2, 2)), f64(1, 2, 3)], "error: broadcast")])
e = np.zeros((0, 3))
write("broadcast_empty", "an empty dim broadcasts against a size-1 dim", [("a", e, ()), ("b", np.ones((1, 3)), ())],
      ["%y = add %a, %b"], [("%y", "f64[0, 3]")], [([e, np.ones((1, 3))], [e + 1])])
count += 5
c = np.array([[True], [False]])
write("select_broadcast", "select broadcasts its three operands", [("c", c, ()), ("a", f64(1, 2, 3), ()), ("b", np.array(0.5), ())],
      ["%y = select %c, %a, %b"], [("%y", "f64[2, 3]")], [([c, f64(1, 2, 3), np.array(0.5)], [np.where(c, f64(1, 2, 3), 0.5)])])
x = f32(1e10, -1e10, np.nan, 3.9, -3.9, 0.0)
write("cast_f32_i32", "float to int truncates and saturates; NaN gives 0", [("x", x, ())], ["%y = cast %x {to = i32}"], [("%y", "i32[6]")],
      [([x], [np.array([2**31 - 1, -2**31, 0, 3, -3, 0], np.int32)])])
write("cast_to_bool", "nonzero is true, NaN included", [("x", x, ())], ["%y = cast %x {to = bool}"], [("%y", "bool[6]")], [([x], [x != 0])])
write("cast_bool_f64", "bool to float", [("x", ba, ())], ["%y = cast %x {to = f64}"], [("%y", "f64[4]")], [([ba], [ba.astype(np.float64)])])
count += 4
# Reductions
r = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], np.float32)
reds = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}
for op, fn in reds.items():
    for axes, keep in [((1,), False), ((0,), True), (None, False)]:
        ax = "" if axes is None else f"axes = [{', '.join(str(a) for a in axes)}]"
        attrs = ", ".join(p for p in [ax, "keepdims = true" if keep else ""] if p)
        attrs = f" {{{attrs}}}" if attrs else ""
        out = np.asarray(fn(r, axis=axes, keepdims=keep), np.float32)
        tag = "all" if axes is None else f"ax{axes[0]}{'k' if keep else ''}"
        write(f"reduce_{op}_{tag}", f"{op} over {axes} keepdims={keep}", [("x", r, ())], [f"%y = {op} %x{attrs}"], [("%y", ty(out))], [([r], [out])])
        count += 1
write("reduce_negative_axis", "a negative axis counts from the end", [("x", r, ())], ["%y = sum %x {axes = [-1]}"], [("%y", "f32[2]")], [([r], [r.sum(-1)])])
nanr = f64(1.0, np.nan, 5.0, np.nan)
write("reduce_argmax_nan", "argmax and argmin: the first NaN is the extreme", [("x", nanr, ())], ["%a = argmax %x", "%b = argmin %x", "%m = max %x"],
      [("%a", "i64[]"), ("%b", "i64[]"), ("%m", "f64[]")], [([nanr], [np.argmax(nanr), np.argmin(nanr), np.max(nanr)])])
write("reduce_argmax_axis", "argmax along an axis, first occurrence", [("x", np.array([[1, 3, 3], [2, 2, 0]], np.int32), ())],
      ["%a = argmax %x {axes = [1]}"], [("%a", "i64[2]")], [([np.array([[1, 3, 3], [2, 2, 0]], np.int32)], [np.array([1, 0])])])
em = np.zeros((2, 0))
write("reduce_empty", "sum/prod/all/any of an empty axis give their identities", [("x", em, ())],
      ["%s = sum %x {axes = [1]}", "%p = prod %x {axes = [1]}", "%a = all %x {axes = [1]}", "%o = any %x {axes = [1]}"],
      [("%s", "f64[2]"), ("%p", "f64[2]"), ("%a", "bool[2]"), ("%o", "bool[2]")], [([em], [np.zeros(2), np.ones(2), np.ones(2, bool), np.zeros(2, bool)])])
write("reduce_max_empty_error", "max of an empty axis is an error", [("x", em, (1,))], ["%m = max %x {axes = [1]}"], [("%m", "f64[2]")], [([em], "error: empty")])
bi = np.array([[True, False], [True, True]])
write("reduce_bool", "bool sums to i64; all and any", [("x", bi, ())], ["%s = sum %x {axes = [1]}", "%a = all %x", "%o = any %x {axes = [0]}"],
      [("%s", "i64[2]"), ("%a", "bool[]"), ("%o", "bool[2]")], [([bi], [bi.sum(1), bi.all(), bi.any(0)])])
ii = np.array([1, 2, 4], np.int32)
write("reduce_mean_int", "the mean of integers is f64", [("x", ii, ())], ["%m = mean %x"], [("%m", "f64[]")], [([ii], [np.mean(ii)])])
count += 7
# Shape ops
t = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
write("transpose", "transpose with a perm", [("x", t, ())], ["%y = transpose %x {perm = [2, 0, 1]}"], [("%y", "f32[4, 2, 3]")], [([t], [t.transpose(2, 0, 1)])])
write("reshape_infer", "reshape with -1", [("x", t, ())], ["%y = reshape %x {shape = [4, -1]}"], [("%y", "f32[4, 6]")], [([t], [t.reshape(4, -1)])])
write("reshape_of_transpose", "reshape reads a transposed view in logical order", [("x", t, ())],
      ["%t = transpose %x {perm = [1, 0, 2]}", "%y = reshape %t {shape = [-1]}"], [("%y", "f32[24]")], [([t], [t.transpose(1, 0, 2).reshape(-1)])])
write("reshape_unknown_error", "a reshape that does not fit at run time", [("x", f32(1, 2, 3), (0,))], ["%y = reshape %x {shape = [2, -1]}"], [("%y", "f32[2, ?]")],
      [([f32(1, 2, 3)], "error: cannot reshape"), ([f32(1, 2, 3, 4)], [f32(1, 2, 3, 4).reshape(2, 2)])])
write("broadcast_to", "broadcast_to a larger shape", [("x", f32(1, 2, 3), ())], ["%y = broadcast_to %x {shape = [2, 3]}"], [("%y", "f32[2, 3]")],
      [([f32(1, 2, 3)], [np.broadcast_to(f32(1, 2, 3), (2, 3))])])
write("expand_squeeze", "expand_dims with a negative axis, then squeeze", [("x", f32(1, 2), ())],
      ["%e = expand_dims %x {axes = [0, -1]}", "%s = squeeze %e {axes = [0]}"], [("%e", "f32[1, 2, 1]"), ("%s", "f32[2, 1]")],
      [([f32(1, 2)], [f32(1, 2).reshape(1, 2, 1), f32(1, 2).reshape(2, 1)])])
write("concat_axis1", "concat along axis 1 (negative)", [("a", np.ones((2, 1)), ()), ("b", m, ())], ["%y = concat %a, %b {axis = -1}"], [("%y", "f64[2, 4]")],
      [([np.ones((2, 1)), m], [np.concatenate([np.ones((2, 1)), m], -1)])])
write("concat_empty", "concat with an empty piece", [("a", np.zeros(0), ()), ("b", f64(1, 2), ())], ["%y = concat %a, %b {axis = 0}"], [("%y", "f64[2]")],
      [([np.zeros(0), f64(1, 2)], [f64(1, 2)])])
v = np.arange(6, dtype=np.int64)
for name, (st, sp, stp), ref in [("reverse", ("null", "null", -1), v[::-1]), ("step2", ("1", "null", 2), v[1::2]),
                                 ("negstart", ("-2", "null", 1), v[-2:]), ("neg_step2", ("5", "null", -2), v[5::-2]),
                                 ("clamp", ("-100", "100", 1), v[-100:100]), ("empty", ("4", "2", 1), v[4:2])]:
    write(f"slice_{name}", f"numpy slicing [{st}:{sp}:{stp}]", [("x", v, ())], [f"%y = slice %x {{starts = [{st}], stops = [{sp}], steps = [{stp}]}}"],
          [("%y", ty(ref))], [([v], [ref])])
    count += 1
write("slice_2d", "slicing two axes", [("x", m, ())], ["%y = slice %x {starts = [null, 1], stops = [null, null], steps = [-1, 1]}"], [("%y", "f64[2, 2]")],
      [([m], [m[::-1, 1:]])])
count += 9
# matmul
A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(12, dtype=np.float32).reshape(3, 4)
for name, (x, y) in {"2d": (A, B), "1d_2d": (f32(1, 2, 3), B), "2d_1d": (A, f32(1, 2, 3)), "1d_1d": (f32(1, 2, 3), f32(4, 5, 6)),
                     "batched": (np.arange(12, dtype=np.float32).reshape(2, 2, 3), B)}.items():
    out = np.matmul(x, y)
    write(f"matmul_{name}", f"numpy matmul {x.shape} @ {y.shape}", [("a", x, ()), ("b", y, ())], ["%y = matmul %a, %b"], [("%y", ty(out))], [([x, y], [out])])
    count += 1
write("matmul_int", "integer matmul", [("a", A.astype(np.int64), ()), ("b", B.astype(np.int64), ())], ["%y = matmul %a, %b"], [("%y", "i64[2, 4]")],
      [([A.astype(np.int64), B.astype(np.int64)], [A.astype(np.int64) @ B.astype(np.int64)])])
# creation and constants
write("creation", "zeros, ones, full and arange", [], ["%z = zeros {shape = [2], dtype = i32}", "%o = ones {shape = [1, 2], dtype = f64}",
      "%f = full {shape = [2], dtype = f32, value = 2.5}", "%a = arange {start = 1.0, stop = 0.0, step = -0.25, dtype = f64}"],
      [("%z", "i32[2]"), ("%o", "f64[1, 2]"), ("%f", "f32[2]"), ("%a", "f64[4]")],
      [([], [np.zeros(2, np.int32), np.ones((1, 2)), np.full(2, 2.5, np.float32), np.arange(1.0, 0.0, -0.25)])])
write("const_specials", "constants of every dtype, specials included", [], ["%a = const [nan, inf, -inf, -0.0] : f64[4]", "%b = const [[true, false]] : bool[1, 2]",
      "%c = const -7 : i64[]", "%d = const [0.1, 3.4028235e38] : f32[2]"], [("%a", "f64[4]"), ("%b", "bool[1, 2]"), ("%c", "i64[]"), ("%d", "f32[2]")],
      [([], [f64(np.nan, np.inf, -np.inf, -0.0), np.array([[True, False]]), np.array(-7), f32(0.1, 3.4028235e38)])])
count += 3
# Composite programs: the contract's softmax and logsumexp
X = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, 1000.0]], np.float32)
sm = np.exp(X - X.max(1, keepdims=True)); sm = sm / sm.sum(1, keepdims=True)
write("prog_softmax", "stable row softmax", [("x", X, (1,))], ["%m = max %x {axes = [1], keepdims = true}", "%d = sub %x, %m", "%e = exp %d",
      "%s = sum %e {axes = [1], keepdims = true}", "%y = div %e, %s"], [("%y", "f32[2, ?]")], [([X], [sm.astype(np.float32)])])
lse = np.log(np.exp(X - X.max(1, keepdims=True)).sum(1)) + X.max(1)
write("prog_logsumexp", "logsumexp with the max shift", [("x", X, ())], ["%m = max %x {axes = [1], keepdims = true}", "%d = sub %x, %m", "%e = exp %d",
      "%s = sum %e {axes = [1]}", "%l = log %s", "%r = reshape %m {shape = [2]}", "%y = add %l, %r"], [("%y", "f32[2]")], [([X], [lse.astype(np.float32)])])
x1, y1 = f32(0.0, 0.5, -1.0), f32(1.0, -2.0, 3.0)
w1 = np.exp(-x1 * x1) * np.sin(y1) + np.float32(0.5) * x1 * y1
write("prog_w1", "the W1 expression", [("x", x1, (0,)), ("y", y1, (0,))], ["%a = mul %x, %x", "%b = neg %a", "%c = exp %b", "%d = sin %y", "%e = mul %c, %d",
      "%h = const 0.5 : f32[]", "%f = mul %x, %y", "%g = mul %h, %f", "%r = add %e, %g"], [("%r", "f32[?]")], [([x1, y1], [w1.astype(np.float32)])])
count += 3
print(f"wrote {count} files to {OUT}")
