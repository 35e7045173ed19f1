"""Lazy ifelse and scan with bodies written in Python."""

import numpy as np
import pytest

import kiln


def test_ifelse_computes_only_the_branch_taken():
    x = kiln.vector("x", shape=(2,))
    positive = x.sum() > 0
    # log of a negative number is NaN: the lazy branch never computes it for negative sums.
    y = kiln.ifelse(positive, lambda: kiln.log(x), lambda: kiln.zeros((2,)))
    f = kiln.function([x], y)
    np.testing.assert_allclose(f(np.array([1.0, 2.0])), np.log([1.0, 2.0]))
    np.testing.assert_array_equal(f(np.array([-1.0, -2.0])), [0.0, 0.0])


def test_ifelse_of_several_values_and_its_gradient():
    x = kiln.scalar("x")
    a, b = kiln.ifelse(x > 0, lambda: [x * x, x + 1], lambda: [-x, x * 0])
    g = kiln.grad(a + b, x)
    f = kiln.function([x], [a, b, g])
    assert [float(v) for v in f(3.0)] == [9.0, 4.0, 7.0]
    assert [float(v) for v in f(-2.0)] == [2.0, 0.0, -1.0]


def test_scan_runs_a_recurrence_and_stacks_each_step():
    xs = kiln.matrix("xs")
    h0 = kiln.vector("h0")
    w = kiln.shared(np.array([[0.5, -0.2], [0.1, 0.3]]), name="w")

    def step(carries, slices):
        h = kiln.tanh(carries[0] @ w + slices[0])
        return [h], [h]

    (last,), (hs,) = kiln.scan(step, [h0], [xs])
    loss = (hs**2).sum()
    gw = kiln.grad(loss, w)
    f = kiln.function([xs, h0], [last, hs, gw])
    xv, hv = np.random.default_rng(0).normal(size=(5, 2)), np.zeros(2)
    got_last, got_hs, got_gw = f(xv, hv)
    h, want = hv, []
    for t in range(5):
        h = np.tanh(h @ w.get_value() + xv[t])
        want.append(h)
    np.testing.assert_allclose(got_hs, np.array(want), rtol=1e-12)
    np.testing.assert_allclose(got_last, want[-1], rtol=1e-12)
    assert got_gw.shape == (2, 2) and np.isfinite(got_gw).all()


def test_scan_in_reverse_keeps_the_sequence_order():
    xs = kiln.vector("xs")
    (total,), (partial,) = kiln.scan(
        lambda c, x: ([c[0] + x[0]], [c[0] + x[0]]), [kiln.constant(0.0)], [xs], reverse=True
    )
    f = kiln.function([xs], [total, partial])
    t, p = f(np.array([1.0, 2.0, 3.0]))
    assert float(t) == 6.0
    np.testing.assert_array_equal(p, [6.0, 5.0, 3.0])


def test_an_error_raised_in_a_body_comes_back_as_it_was():
    xs = kiln.vector("xs")

    def body(c, x):
        raise RuntimeError("the body's own error")

    with pytest.raises(RuntimeError, match="the body's own error"):
        kiln.scan(body, [kiln.constant(0.0)], [xs])
    with pytest.raises(RuntimeError, match="branch"):
        kiln.ifelse(xs.sum() > 0, lambda: xs, lambda: (_ for _ in ()).throw(RuntimeError("branch")))


def test_a_body_of_the_wrong_type_is_a_kiln_type_error():
    xs = kiln.vector("xs", dtype="float32")
    with pytest.raises(kiln.TypeError):
        kiln.scan(lambda c, x: ([c[0].astype("int32")], []), [kiln.constant(0.0, "float32")], [xs])
