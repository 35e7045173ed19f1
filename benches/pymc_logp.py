"""PyMC models' logp and gradient under PyTensor's modes and kiln's, side by side.

    python benches/pymc_logp.py          # needs the kiln package with PyMC: pip install './python[pymc]'

For each model of python/tests/test_pymc.py (eight schools, a logistic regression, a Gaussian
mixture) and each mode (KILN; PyTensor's C backend, FAST_RUN; NUMBA; JAX where installed) it
prints the time to compile `[logp, *grad(logp)]` (PyTensor's rewrites included, one fresh
compile) and the median time of one evaluation at the initial point. Use a release build of
the package; say what else ran on the machine when you quote the figures.
"""

import os
import sys
import time
import warnings

import numpy as np
import pytensor

import kiln.pytensor  # noqa: F401  (registers mode="KILN")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
import test_pymc  # noqa: E402  (the models)


def median_us(fn, calls=2000):
    for _ in range(50):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return times[len(times) // 2] / 1e3


def modes():
    out = ["KILN", "FAST_RUN", "NUMBA"]
    try:
        import jax  # noqa: F401

        out.append("JAX")
    except ImportError:
        pass
    return out


def main():
    print("| model | mode | compile (ms) | logp + grad (us) |")
    print("| --- | --- | --- | --- |")
    for make in test_pymc.MODELS:
        model = make()
        logp = model.logp()
        grads = pytensor.grad(logp, model.value_vars)
        point = model.initial_point()
        args = [point[v.name] for v in model.value_vars]
        for mode in modes():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                try:
                    f = pytensor.function(model.value_vars, [logp, *grads], mode=mode)
                except Exception as e:  # a peer that cannot compile the model says so
                    print(f"| {make.__name__} | {mode} | failed: {type(e).__name__} | - |")
                    continue
                compile_ms = (time.perf_counter() - t0) * 1e3
            f(*args)
            print(f"| {make.__name__} | {mode} | {compile_ms:.0f} | {median_us(lambda: f(*args)):.1f} |")


if __name__ == "__main__":
    main()
