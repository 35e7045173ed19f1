"""The training step of examples/cnn.rs beside the same model in JAX, in one run.

The model: conv 3x3 (1 -> 8, padding 1) + bias + relu + 2x2 max pool, conv 3x3 (8 -> 16) +
bias + relu + 2x2 max pool, dense 144 -> 4, softmax cross-entropy, plain SGD; batch 64 of
12x12 images. Both sides time only the jitted training step (data made beforehand) and
report the median of STEPS steps after their warm-up.

    python3 benches/cnn_vs_jax.py [STEPS]   # from the repository root; needs JAX
                                            # (benches/peers/setup.sh installs it)
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import side_by_side

BATCH, SIDE, C1, C2, CLASSES = 64, 12, 8, 16, 4
FLAT = C2 * (SIDE // 4) * (SIDE // 4)
LR = 0.05


def conv(x, w):
    return jax.lax.conv_general_dilated(
        x, w, window_strides=(1, 1), padding=((1, 1), (1, 1)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def pool(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def loss_fn(params, images, labels):
    w1, b1, w2, b2, w3, b3 = params
    h = pool(jax.nn.relu(conv(images, w1) + b1))
    h = pool(jax.nn.relu(conv(h, w2) + b2))
    logits = h.reshape(BATCH, FLAT) @ w3 + b3
    log_p = jax.nn.log_softmax(logits, axis=1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, CLASSES) * log_p, axis=1))


@jax.jit
def train(params, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
    return loss, [p - LR * g for p, g in zip(params, grads)]


def jax_median(steps):
    rng = np.random.default_rng(0)
    he = lambda shape, fan: (np.sqrt(2.0 / fan) * rng.standard_normal(shape)).astype(np.float32)
    params = [he((C1, 1, 3, 3), 9), np.zeros((C1, 1, 1), np.float32),
              he((C2, C1, 3, 3), C1 * 9), np.zeros((C2, 1, 1), np.float32),
              he((FLAT, CLASSES), FLAT), np.zeros(CLASSES, np.float32)]
    params = [jnp.asarray(p) for p in params]
    data = [(jnp.asarray(rng.random((BATCH, 1, SIDE, SIDE), dtype=np.float32)),
             jnp.asarray(rng.integers(0, CLASSES, BATCH)))
            for _ in range(steps)]
    for x, y in data[:20]:
        loss, params = train(params, x, y)
    loss.block_until_ready()
    times = []
    for x, y in data:
        t = time.perf_counter()
        loss, params = train(params, x, y)
        loss.block_until_ready()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    side_by_side.compare("cnn", jax_median, steps)


if __name__ == "__main__":
    main()
