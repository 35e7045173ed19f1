"""Building graphs from Python: leaves, operators, methods, indexing, and what numpy says."""

import numpy as np
import pytest

import kiln


def run(inputs, outputs, *args, backend=None):
    return kiln.function(inputs, outputs, backend=backend)(*args)


@pytest.fixture(params=["cpu", "interp"])
def backend(request):
    return request.param


def test_leaves_have_the_types_they_were_given():
    x = kiln.tensor("x", dtype="float32", shape=(None, 3))
    assert (x.name, x.dtype, x.shape, x.ndim, x.type) == ("x", "float32", (None, 3), 2, "f32[?, 3]")
    assert kiln.scalar("s", np.int64).type == "i64[]"
    assert kiln.vector("v", np.float64).shape == (None,)
    assert kiln.matrix("m", "int32").dtype == "int32"
    assert kiln.constant(np.arange(6).reshape(2, 3)).type == "i64[2, 3]"
    assert kiln.shared(np.zeros(4, np.float32), name="w").type == "f32[4]"


def test_operators_match_numpy(backend):
    x, y = kiln.vector("x"), kiln.vector("y")
    a, b = np.array([1.5, -2.0, 3.0]), np.array([0.5, 4.0, -1.0])
    exprs = [x + y, x - y, x * y, x / y, x // y, x % y, x ** 2, -x, abs(x), 2.0 - x, 1 / x, 3 * x]
    want = [a + b, a - b, a * b, a / b, a // b, a % b, a**2, -a, abs(a), 2.0 - a, 1 / a, 3 * a]
    for got, w in zip(run([x, y], exprs, a, b, backend=backend), want):
        np.testing.assert_allclose(got, w, rtol=1e-15)


def test_comparisons_and_logic_give_bools(backend):
    x = kiln.vector("x")
    a = np.array([1.0, 2.0, 3.0])
    lt, ge, both, neither = run(
        [x], [x < 2, x >= 2, (x > 1) & (x < 3), ~((x < 2) | (x > 2))], a, backend=backend
    )
    assert lt.dtype == np.bool_
    np.testing.assert_array_equal(lt, a < 2)
    np.testing.assert_array_equal(ge, a >= 2)
    np.testing.assert_array_equal(both, (a > 1) & (a < 3))
    np.testing.assert_array_equal(neither, ~((a < 2) | (a > 2)))


def test_equality_is_identity_and_elementwise_eq_is_a_function():
    x, y = kiln.vector("x"), kiln.vector("y")
    assert x == x and x != y and len({x, y, x}) == 2
    np.testing.assert_array_equal(
        run([x, y], kiln.eq(x, y), np.array([1.0, 2.0]), np.array([1.0, 3.0])), [True, False]
    )


def test_unary_functions_match_numpy(backend):
    x = kiln.vector("x")
    a = np.array([0.25, 0.5, 1.5])
    names = ["exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "floor", "ceil"]
    outs = run([x], [getattr(kiln, n)(x) for n in names], a, backend=backend)
    for n, got in zip(names, outs):
        np.testing.assert_allclose(got, getattr(np, n)(a), rtol=1e-14, err_msg=n)


def test_reductions_over_axes_and_keepdims(backend):
    x = kiln.tensor("x", shape=(2, 3, 4))
    a = np.random.default_rng(0).normal(size=(2, 3, 4))
    outs = run(
        [x],
        [x.sum(), x.sum(axis=1), x.mean(axis=(0, 2), keepdims=True), x.max(-1), x.min(0),
         x.prod(axis=2), x.argmax(axis=1), kiln.sum(x, axis=-1)],
        a,
        backend=backend,
    )
    want = [a.sum(), a.sum(1), a.mean((0, 2), keepdims=True), a.max(-1), a.min(0), a.prod(2),
            a.argmax(1), a.sum(-1)]
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-12)
    assert outs[6].dtype == np.int64


def test_shape_methods_match_numpy(backend):
    x = kiln.tensor("x", shape=(2, 3))
    a = np.arange(6.0).reshape(2, 3)
    outs = run(
        [x],
        [x.reshape(3, 2), x.reshape((-1,)), x.T, x.transpose(1, 0), x.flatten(),
         x.dimshuffle(1, "x", 0), x.expand_dims(0), kiln.broadcast_to(x[0], (4, 3)),
         x.astype("int32"), kiln.concatenate([x, x], axis=1), kiln.stack([x, x], axis=0)],
        a,
        backend=backend,
    )
    want = [a.reshape(3, 2), a.reshape(-1), a.T, a.T, a.flatten(), a.T[:, None, :], a[None],
            np.broadcast_to(a[0], (4, 3)), a.astype(np.int32), np.concatenate([a, a], 1),
            np.stack([a, a])]
    for got, w in zip(outs, want):
        assert got.shape == w.shape
        np.testing.assert_array_equal(got, w)
    assert outs[8].dtype == np.int32


@pytest.mark.parametrize(
    "key",
    [1, -1, slice(1, None), slice(None, None, -1), (0, 2), (slice(None), 1), (Ellipsis, 0),
     (None, 1), (1, None, slice(0, 3, 2)), (slice(-2, None), Ellipsis, None)],
)
def test_basic_indexing_matches_numpy(key):
    x = kiln.tensor("x", shape=(3, 4))
    a = np.arange(12.0).reshape(3, 4)
    got = run([x], x[key], a)
    np.testing.assert_array_equal(got, a[key])


def test_indexing_by_an_array_takes_rows():
    x = kiln.matrix("x")
    i = kiln.vector("i", dtype="int64")
    a = np.arange(12.0).reshape(4, 3)
    idx = np.array([3, 0, -1])
    np.testing.assert_array_equal(run([x, i], x[i], a, idx), a[idx])
    np.testing.assert_array_equal(run([x], x[[1, 1]], a), a[[1, 1]])
    np.testing.assert_array_equal(run([x, i], kiln.take(x, i, axis=0), a, idx), a[idx])


def test_out_of_range_indices_and_misuse_are_python_errors():
    x = kiln.tensor("x", shape=(3, 4))
    with pytest.raises(IndexError):
        x[3]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(TypeError):
        bool(x > 0)
    with pytest.raises(TypeError):
        list(x)


def test_where_sort_cumsum_softmax_and_one_hot(backend):
    x = kiln.vector("x")
    a = np.array([3.0, -1.0, 2.0, 0.5])
    outs = run(
        [x],
        [kiln.where(x > 0, x, 0.0), kiln.sort(x), kiln.argsort(x), kiln.cumsum(x),
         kiln.softmax(x), kiln.one_hot(kiln.argsort(x), 4, "float32")],
        a,
        backend=backend,
    )
    e = np.exp(a - a.max())
    want = [np.where(a > 0, a, 0.0), np.sort(a), np.argsort(a), np.cumsum(a), e / e.sum(),
            np.eye(4, dtype=np.float32)[np.argsort(a)]]
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-14)


def test_matmul_of_batches_matches_numpy(backend):
    a = kiln.tensor("a", "float32", (2, 3, 4))
    b = kiln.tensor("b", "float32", (4, 5))
    rng = np.random.default_rng(1)
    av, bv = rng.normal(size=(2, 3, 4)).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)
    np.testing.assert_allclose(run([a, b], a @ b, av, bv, backend=backend), av @ bv, rtol=1e-5)
    np.testing.assert_allclose(run([a, b], kiln.dot(a, b), av, bv), av @ bv, rtol=1e-5)


def test_numbers_take_the_variables_dtype_and_inexact_ones_are_refused():
    i = kiln.vector("i", dtype="int32")
    assert (i * 2).dtype == "int32"
    assert (2 * i).dtype == "int32"
    with pytest.raises(kiln.TypeError) as e:
        i * 2.5
    assert "2.5" in str(e.value)


def test_every_public_name_has_a_type_stub():
    import ast
    import pathlib

    stub = pathlib.Path(kiln.__file__).with_suffix(".pyi")
    tree = ast.parse(stub.read_text())
    named = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            named.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            named.update(a.asname or a.name for a in node.names)
    missing = sorted(set(kiln.__all__) - named)
    assert not missing, f"names without a stub in {stub.name}: {missing}"
