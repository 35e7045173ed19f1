"""The standard workloads W1-W7 (README.md beside this file) in each peer library, one
workload and one library per process so that the thread settings take and W6 starts cold:

    python workloads.py LIBRARY WORKLOAD THREADS    # prints one JSON object, or {"skip": why}

compare.py runs this with the peers' environment (setup.sh) and kiln's `examples/bench` side
by side. The inputs are numpy's `default_rng(0)` standard normal f32; each result is checked
against a float64 numpy reference (the relative L2 error `||out - ref|| / ||ref||`).
"""

import json
import math
import sys
import time

import numpy as np

LIBRARIES = ("numpy", "numexpr", "jax", "pytensor", "torch")


class Skip(Exception):
    """This library has no form of this workload (or is not installed)."""


def timed(fn, runs=15, warmup=3):
    """Median, min and max wall time of `fn()` in ms, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1],
            "runs": runs}


def rel_err(out, ref):
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def library(name, threads):
    """The imported library, set to `threads` threads where it takes a setting at run time
    (the rest read the environment compare.py sets)."""
    try:
        if name == "numpy":
            return np
        if name == "numexpr":
            import numexpr
            numexpr.set_num_threads(threads)
            return numexpr
        if name == "jax":
            import jax
            return jax
        if name == "pytensor":
            import pytensor
            return pytensor
        if name == "torch":
            import torch
            torch.set_num_threads(threads)
            return torch
    except ImportError as e:
        raise Skip(f"not installed ({e})")
    raise Skip(f"unknown library {name}")


def w1(lib, name):
    """exp(-x*x) * sin(y) + 0.5*x*y on 16M elements."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(16_000_000, dtype=np.float32)
    y = rng.standard_normal(16_000_000, dtype=np.float32)
    if name == "numpy":
        fn = lambda: np.exp(-x * x) * np.sin(y) + 0.5 * x * y
    elif name == "numexpr":
        fn = lambda: lib.evaluate("exp(-x * x) * sin(y) + 0.5 * x * y",
                                  local_dict={"x": x, "y": y})
    elif name == "jax":
        import jax.numpy as jnp
        f = lib.jit(lambda a, b: jnp.exp(-a * a) * jnp.sin(b) + 0.5 * a * b)
        xs, ys = jnp.asarray(x), jnp.asarray(y)
        fn = lambda: f(xs, ys).block_until_ready()
    elif name == "pytensor":
        import pytensor.tensor as pt
        a, b = pt.vector("a", dtype="float32"), pt.vector("b", dtype="float32")
        f = lib.function([a, b], pt.exp(-a * a) * pt.sin(b) + 0.5 * a * b)
        fn = lambda: f(x, y)
    else:
        tx, ty = lib.from_numpy(x), lib.from_numpy(y)
        fn = lambda: lib.exp(-tx * tx) * lib.sin(ty) + 0.5 * tx * ty
    # The reference on the first million elements keeps the f64 copy small.
    n = 1_000_000
    xd, yd = x[:n].astype(np.float64), y[:n].astype(np.float64)
    ref = np.exp(-xd * xd) * np.sin(yd) + 0.5 * xd * yd
    return fn, lambda out: rel_err(np.asarray(out)[:n], ref)


def w2_w3(lib, name, workload):
    """Row softmax (W2) or logsumexp along axis 1 (W3) of a 4096 x 4096 matrix, both
    subtracting the row max."""
    x = np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32)
    softmax = workload == "W2"
    if name == "numpy":
        def fn():
            m = x.max(axis=1, keepdims=True)
            e = np.exp(x - m)
            s = e.sum(axis=1, keepdims=True)
            return e / s if softmax else np.log(s[:, 0]) + m[:, 0]
    elif name == "jax":
        import jax.nn
        f = lib.jit(jax.nn.softmax if softmax else
                    (lambda a: jax.nn.logsumexp(a, axis=1)))
        xs = lib.numpy.asarray(x)
        fn = lambda: f(xs).block_until_ready()
    elif name == "pytensor":
        import pytensor.tensor as pt
        import pytensor.tensor.special as special
        a = pt.matrix("a", dtype="float32")
        out = special.softmax(a, axis=1) if softmax else pt.logsumexp(a, axis=1)
        f = lib.function([a], out)
        fn = lambda: f(x)
    elif name == "torch":
        t = lib.from_numpy(x)
        fn = (lambda: lib.softmax(t, dim=1)) if softmax else (lambda: lib.logsumexp(t, dim=1))
    else:
        raise Skip("numexpr has no row reductions")
    rows = 256
    xd = x[:rows].astype(np.float64)
    m = xd.max(axis=1, keepdims=True)
    e = np.exp(xd - m)
    ref = e / e.sum(axis=1, keepdims=True) if softmax else np.log(e.sum(axis=1)) + m[:, 0]
    return fn, lambda out: rel_err(np.asarray(out)[:rows], ref)


def w4(lib, name):
    """A 1024^3 f32 matrix product."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)
    if name == "numpy":
        fn = lambda: a @ b
    elif name == "jax":
        f = lib.jit(lambda p, q: p @ q)
        pa, pb = lib.numpy.asarray(a), lib.numpy.asarray(b)
        fn = lambda: f(pa, pb).block_until_ready()
    elif name == "pytensor":
        import pytensor.tensor as pt
        p, q = pt.matrix("p", dtype="float32"), pt.matrix("q", dtype="float32")
        f = lib.function([p, q], p @ q)
        fn = lambda: f(a, b)
    elif name == "torch":
        ta, tb = lib.from_numpy(a), lib.from_numpy(b)
        fn = lambda: ta @ tb
    else:
        raise Skip("numexpr has no products")
    rows = 64
    ref = a[:rows].astype(np.float64) @ b.astype(np.float64)
    return fn, lambda out: rel_err(np.asarray(out)[:rows], ref)


SIZES = (784, 512, 512, 10)
BATCH = 256
LR = 0.01


def mlp_data():
    """W5's batch, one-hot labels and initial parameters: weights N(0, 1/fan_in), biases 0."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32)
    labels = rng.integers(0, SIZES[-1], BATCH)
    y = np.eye(SIZES[-1], dtype=np.float32)[labels]
    params = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:]):
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32) / np.float32(math.sqrt(fan_in))
        params += [w, np.zeros(fan_out, np.float32)]
    return x, y, params


def mlp_step(lib, name):
    """One training step of W5 (forward, softmax cross-entropy, backward, SGD in place),
    returning the loss; the parameters live in the library between calls."""
    x, y, params = mlp_data()
    if name == "numpy":
        def step():
            acts = [x]
            for i in range(0, len(params) - 2, 2):
                acts.append(np.tanh(acts[-1] @ params[i] + params[i + 1]))
            z = acts[-1] @ params[-2] + params[-1]
            z = z - z.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            loss = -(y * logp).sum() / BATCH
            g = (np.exp(logp) - y) / BATCH
            for i in range(len(params) - 2, -1, -2):
                gw, gb = acts[i // 2].T @ g, g.sum(axis=0)
                if i:
                    g = (g @ params[i].T) * (1 - acts[i // 2] ** 2)
                params[i] -= LR * gw
                params[i + 1] -= LR * gb
            return loss
        return step
    if name == "jax":
        import jax
        import jax.numpy as jnp

        def loss_of(ps, xb, yb):
            h = xb
            for i in range(0, len(ps) - 2, 2):
                h = jnp.tanh(h @ ps[i] + ps[i + 1])
            z = h @ ps[-2] + ps[-1]
            return -(yb * jax.nn.log_softmax(z, axis=1)).sum() / BATCH

        def update(ps, xb, yb):
            loss, grads = jax.value_and_grad(loss_of)(ps, xb, yb)
            return [p - LR * g for p, g in zip(ps, grads)], loss

        # Donating the parameters lets XLA update them in place, as kiln does.
        f = jax.jit(update, donate_argnums=0)
        state = {"ps": [jnp.asarray(p) for p in params]}
        xb, yb = jnp.asarray(x), jnp.asarray(y)

        def step():
            state["ps"], loss = f(state["ps"], xb, yb)
            return loss.block_until_ready()
        return step
    if name == "pytensor":
        import pytensor.tensor as pt
        import pytensor.tensor.special as special
        shared = [lib.shared(p) for p in params]
        xb, yb = pt.matrix("x", dtype="float32"), pt.matrix("y", dtype="float32")
        h = xb
        for i in range(0, len(shared) - 2, 2):
            h = pt.tanh(h @ shared[i] + shared[i + 1])
        z = h @ shared[-2] + shared[-1]
        loss = -(yb * special.log_softmax(z, axis=1)).sum() / BATCH
        grads = pt.grad(loss, shared)
        f = lib.function([xb, yb], loss,
                         updates=[(p, p - np.float32(LR) * g) for p, g in zip(shared, grads)])
        return lambda: f(x, y)
    if name == "torch":
        ps = [lib.tensor(p, requires_grad=True) for p in params]
        tx, ty = lib.from_numpy(x), lib.from_numpy(y)

        def step():
            h = tx
            for i in range(0, len(ps) - 2, 2):
                h = lib.tanh(h @ ps[i] + ps[i + 1])
            z = h @ ps[-2] + ps[-1]
            loss = -(ty * lib.log_softmax(z, dim=1)).sum() / BATCH
            for p in ps:
                p.grad = None
            loss.backward()
            with lib.no_grad():
                for p in ps:
                    p.sub_(LR * p.grad)
            return loss.item()
        return step
    raise Skip("numexpr has no products")


def first_loss_reference():
    """W5's first loss in float64: every side's first step should give it."""
    x, y, params = mlp_data()
    h = x.astype(np.float64)
    ps = [p.astype(np.float64) for p in params]
    for i in range(0, len(ps) - 2, 2):
        h = np.tanh(h @ ps[i] + ps[i + 1])
    z = h @ ps[-2] + ps[-1]
    z = z - z.max(axis=1, keepdims=True)
    return float(-(y * (z - np.log(np.exp(z).sum(axis=1, keepdims=True)))).sum() / BATCH)


def run(name, workload, threads):
    lib = library(name, threads)
    if workload == "W6":
        # From building the step to its first result, in this fresh process (imports done).
        # PyTensor's compiled-module cache (~/.pytensor) is warm after its first run ever.
        start = time.perf_counter()
        float(mlp_step(lib, name)())
        return {"median_ms": (time.perf_counter() - start) * 1e3, "runs": 1}
    if workload == "W5":
        step = mlp_step(lib, name)
        first = float(step())
        result = timed(step, runs=31, warmup=5)
        result["first_loss"] = first
        result["rel_err"] = abs(first - first_loss_reference()) / first_loss_reference()
        return result
    if workload == "W7":
        x = np.random.default_rng(0).standard_normal(10, dtype=np.float32)
        if name == "numpy":
            fn = lambda: x + 1
        elif name == "jax":
            f = lib.jit(lambda a: a + 1)
            xs = lib.numpy.asarray(x)
            fn = lambda: f(xs).block_until_ready()
        elif name == "pytensor":
            import pytensor.tensor as pt
            a = pt.vector("a", dtype="float32")
            f = lib.function([a], a + 1)
            fn = lambda: f(x)
        elif name == "torch":
            t = lib.from_numpy(x)
            fn = lambda: t + 1
        else:
            fn = lambda: lib.evaluate("x + 1", local_dict={"x": x})
        result = timed(fn, runs=10_000, warmup=100)
        result["median_us"] = result["median_ms"] * 1e3
        result["rel_err"] = rel_err(np.asarray(fn()), x.astype(np.float64) + 1)
        return result
    if workload == "W1":
        fn, check = w1(lib, name)
    elif workload in ("W2", "W3"):
        fn, check = w2_w3(lib, name, workload)
    elif workload == "W4":
        fn, check = w4(lib, name)
    else:
        raise Skip(f"unknown workload {workload}")
    result = timed(fn)
    result["rel_err"] = check(fn())
    return result


def main():
    name, workload, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        result = run(name, workload, threads)
    except Skip as why:
        result = {"skip": str(why)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
