"""PyMC models' log densities and their gradients compiled with mode="KILN", checked against
PyTensor's default mode at several points."""

import warnings

import numpy as np
import pytest

pm = pytest.importorskip("pymc")
pytensor = pytest.importorskip("pytensor")

import kiln.pytensor  # noqa: E402,F401  (registers the mode)


def eight_schools():
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        theta_t = pm.Normal("theta_t", 0, 1, shape=8)
        pm.Normal("obs", mu + tau * theta_t, sigma, observed=y)
    return model


def logistic_regression():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 3))
    y = rng.random(100) < 1 / (1 + np.exp(-(x @ np.array([1.0, -2.0, 0.5]) + 0.3)))
    with pm.Model() as model:
        w = pm.Normal("w", 0, 2, shape=3)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("obs", logit_p=pm.math.dot(x, w) + b, observed=y.astype("int64"))
    return model


def gaussian_mixture():
    rng = np.random.default_rng(1)
    data = np.concatenate([rng.normal(-2, 0.5, 60), rng.normal(1.5, 1.0, 90)])
    with pm.Model() as model:
        weights = pm.Dirichlet("weights", np.ones(2))
        mus = pm.Normal("mus", 0, 5, shape=2, transform=pm.distributions.transforms.ordered,
                        initval=np.array([-1.0, 1.0]))
        sigmas = pm.HalfNormal("sigmas", 2, shape=2)
        pm.NormalMixture("obs", w=weights, mu=mus, sigma=sigmas, observed=data)
    return model


MODELS = [eight_schools, logistic_regression, gaussian_mixture]


def points(model, n, seed):
    """The model's initial point and `n` points around it, in the value variables' space."""
    rng = np.random.default_rng(seed)
    start = model.initial_point()
    yield start
    for _ in range(n):
        yield {k: v + rng.normal(scale=0.5, size=np.shape(v)) for k, v in start.items()}


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_logp_and_its_gradient_match_pytensors_default_mode(make):
    model = make()
    logp = model.logp()
    grads = pytensor.grad(logp, model.value_vars)
    ins = model.value_vars
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Ops kiln runs through perform are named there
        fk = pytensor.function(ins, [logp, *grads], mode="KILN")
    fr = pytensor.function(ins, [logp, *grads])
    for point in points(model, 4, seed=7):
        args = [point[v.name] for v in ins]
        for got, want in zip(fk(*args), fr(*args), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_compile_logp_dlogp_through_pymc(make):
    model = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = model.compile_logp(mode="KILN")
    g = model.compile_logp()
    point = model.initial_point()
    np.testing.assert_allclose(f(point), g(point), rtol=1e-10)
