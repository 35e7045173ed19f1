"""W5's MLP training step (examples/bench.rs) beside the same model in JAX, in one run.

The model: batch 256, layers 784-512-512-10 with tanh hidden units, softmax cross-entropy
(mean over the batch), plain SGD with lr 0.01 on every weight and bias; weights N(0, 1/fan_in),
biases 0, labels uniform in 0..10. Both sides time only the jitted training step (data made
beforehand) and report the median of STEPS steps after their warm-up (kiln: the median that
`cargo run --release --example bench -- --json --only W5` reports).

    python3 benches/mlp_vs_jax.py [STEPS]   # from the repository root; needs JAX
"""

import json
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import side_by_side

BATCH, SIZES, LR = 256, (784, 512, 512, 10), 0.01


def loss_fn(params, x, labels):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i + 1 < len(params):
            h = jnp.tanh(h)
    log_p = jax.nn.log_softmax(h, axis=1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, SIZES[-1]) * log_p, axis=1))


@jax.jit
def train(params, x, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
    return loss, [(w - LR * gw, b - LR * gb) for (w, b), (gw, gb) in zip(params, grads)]


def jax_median(steps):
    rng = np.random.default_rng(0)
    params = [(jnp.asarray((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)),
               jnp.zeros(o, jnp.float32)) for i, o in zip(SIZES, SIZES[1:])]
    x = jnp.asarray(rng.standard_normal((BATCH, SIZES[0])).astype(np.float32))
    labels = jnp.asarray(rng.integers(0, SIZES[-1], BATCH))
    for _ in range(20):
        loss, params = train(params, x, labels)
    loss.block_until_ready()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss, params = train(params, x, labels)
        loss.block_until_ready()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def kiln_median(_steps):
    """kiln's W5 median (ms); the bench example chooses its own number of runs."""
    out = subprocess.run(
        ["cargo", "run", "--release", "--quiet", "--example", "bench", "--", "--json",
         "--only", "W5"], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_ms"]


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    side_by_side.compare_with(kiln_median, jax_median, steps)


if __name__ == "__main__":
    main()
