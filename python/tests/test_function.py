"""Compiling and calling: gradients, shared state and updates, errors with the user's line,
saving, and numpy arrays in and out without copies."""

import inspect
import threading

import numpy as np
import pytest

import kiln


def test_gradient_descent_learns_a_linear_map():
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(3, 1))
    xs = rng.normal(size=(64, 3))
    ys = xs @ true_w
    x, y = kiln.matrix("x"), kiln.matrix("y")
    w = kiln.shared(np.zeros((3, 1)), name="w")
    loss = ((x @ w - y) ** 2).mean()
    gw = kiln.grad(loss, w)
    step = kiln.function([x, y], loss, updates=[(w, w - 0.5 * gw)])
    first = step(xs, ys)
    for _ in range(200):
        last = step(xs, ys)
    assert last < 1e-8 < first
    np.testing.assert_allclose(w.get_value(), true_w, rtol=1e-4)


def test_grad_of_a_list_gives_a_list_matching_finite_differences():
    x = kiln.vector("x")
    a = kiln.shared(np.array([0.3, -0.2]), name="a")
    cost = (kiln.tanh(x * a) ** 2).sum()
    gx, ga = kiln.grad(cost, [x, a])
    f = kiln.function([x], [cost, gx, ga])
    xv = np.array([0.7, 1.1])
    c, gxv, gav = f(xv)
    eps = 1e-6
    for k in range(2):
        d = np.zeros(2)
        d[k] = eps
        num = (f(xv + d)[0] - f(xv - d)[0]) / (2 * eps)
        assert abs(num - gxv[k]) < 1e-6


def test_a_single_output_returns_an_array_and_a_list_returns_a_list():
    x = kiln.vector("x")
    one = kiln.function([x], x + 1)
    many = kiln.function([x], [x + 1])
    assert isinstance(one(np.zeros(2)), np.ndarray)
    assert isinstance(many(np.zeros(2)), list)


def test_updates_as_a_dict_and_set_value_between_calls():
    c = kiln.shared(np.int64(0), name="c")
    tick = kiln.function([], c, updates={c: c + 1})
    assert [int(tick()) for _ in range(3)] == [0, 1, 2]
    c.set_value(10)
    assert int(tick()) == 10 and int(c.get_value()) == 11


def test_arguments_convert_from_numbers_and_lists_and_any_strides():
    x = kiln.vector("x", dtype="float32")
    f = kiln.function([x], x * 2)
    np.testing.assert_array_equal(f([1, 2, 3]), np.array([2, 4, 6], np.float32))
    a = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(f(a[::-3]), a[::-3] * 2)
    s = kiln.scalar("s", dtype="int64")
    assert int(kiln.function([s], s * 3)(7)) == 21


def test_results_own_their_buffers():
    x = kiln.vector("x")
    out = kiln.function([x], x + 1)(np.zeros(3))
    assert out.flags.owndata or out.base is not None
    out[0] = 5.0  # writable, not a view of anything kiln keeps
    assert out[0] == 5.0


def test_type_errors_name_the_python_line_that_built_the_node():
    x = kiln.vector("x", dtype="float32")
    i = kiln.vector("i", dtype="int32")
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(kiln.TypeError) as e:
        x + i  # the line the error names
    assert isinstance(e.value, TypeError) and isinstance(e.value, kiln.KilnError)
    assert f"test_function.py:{line}" in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_a_call_with_a_bad_shape_is_a_shape_error_and_leaves_state_alone():
    x = kiln.matrix("x")
    w = kiln.shared(np.ones((3, 2)), name="w")
    y = (x @ w).sum()
    f = kiln.function([x], y, updates=[(w, w * 2)])
    with pytest.raises(kiln.ShapeError) as e:
        f(np.ones((4, 5)))
    assert isinstance(e.value, ValueError)
    assert "test_function.py" in str(e.value)
    np.testing.assert_array_equal(w.get_value(), np.ones((3, 2)))
    with pytest.raises(kiln.TypeError):
        f()


def test_arrays_convert_only_where_no_value_changes():
    x = kiln.vector("x", dtype="float64")
    f = kiln.function([x], x + 1)
    np.testing.assert_array_equal(f(np.array([1, 2], np.int32)), [2.0, 3.0])
    y = kiln.vector("y", dtype="float32")
    g = kiln.function([y], y + 1)
    with pytest.raises(kiln.TypeError) as e:
        g(np.array([0.1, 0.2]))  # float64 would be rounded
    assert "input 0" in str(e.value) and "astype" in str(e.value)
    with pytest.raises(kiln.TypeError):
        g(np.array(["a", "b"]))
    w = kiln.shared(np.zeros(2, np.float32), name="w")
    with pytest.raises(kiln.TypeError):
        w.set_value(np.array([0.1, 0.2]))
    np.testing.assert_array_equal(w.get_value(), [0.0, 0.0])


def test_backends_agree(tmp_path):
    x = kiln.matrix("x")
    y = kiln.softmax(kiln.exp(x) @ x.T, axis=-1).sum(axis=0)
    a = np.random.default_rng(3).normal(size=(5, 5))
    cpu = kiln.function([x], y, backend="cpu")(a)
    interp = kiln.function([x], y, backend="interp")(a)
    unopt = kiln.function([x], y, optimize=False)(a)
    np.testing.assert_allclose(cpu, interp, rtol=1e-13)
    np.testing.assert_allclose(unopt, interp, rtol=1e-13)
    with pytest.raises(kiln.KilnError):
        kiln.function([x], y, backend="tpu")


def test_save_and_load_a_function_with_its_state(tmp_path):
    x = kiln.vector("x")
    w = kiln.shared(np.array([1.0, 2.0]), name="w")
    f = kiln.function([x], (x * w).sum(), updates=[(w, w + 1)])
    f(np.ones(2))
    f.save(tmp_path / "f.kfn")
    g = kiln.load_function(tmp_path / "f.kfn")
    assert float(g(np.ones(2))) == float(f(np.ones(2))) == 5.0
    f.save_state(tmp_path / "s.npz")
    f(np.ones(2))
    f.load_state(tmp_path / "s.npz")
    np.testing.assert_array_equal(w.get_value(), [3.0, 4.0])
    assert "@f" in f.func_text() or "func" in f.func_text()


def test_profile_reports_the_calls():
    x = kiln.vector("x")
    f = kiln.function([x], kiln.exp(x).sum(), profile=True)
    f(np.ones(1000))
    report = f.profile()
    assert report is not None and "call" in report


def test_calls_from_many_threads_at_once_give_each_its_own_result():
    x = kiln.vector("x")
    f = kiln.function([x], (x * x).sum())
    results = {}

    def work(k):
        results[k] = float(f(np.full(1000, float(k))))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: 1000.0 * k * k for k in range(8)}


def test_nn_builders_train_a_classifier():
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(128, 4)).astype(np.float32)
    ys = (xs[:, 0] > 0).astype(np.int64)
    x = kiln.matrix("x", "float32")
    t = kiln.vector("t", "int64")
    w = kiln.shared(np.zeros((4, 2), np.float32), name="w")
    loss = kiln.cross_entropy(kiln.gelu(x) @ w, t)
    step = kiln.function([x, t], loss, updates=[(w, w - 0.5 * kiln.grad(loss, w))])
    losses = [float(step(xs, ys)) for _ in range(50)]
    assert losses[-1] < 0.5 * losses[0]
