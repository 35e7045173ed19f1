"""The training step of examples/rnn_lm.rs beside the same model in JAX, in one run.

The model: an embedding (32 tokens -> 16), a tanh RNN cell (16 -> 64, 64 -> 64) run over 24
steps by `lax.scan` (kiln: `kiln::scan`), a dense layer to 32 logits at every step, softmax
cross-entropy, plain SGD; batch 32. Both sides time only the jitted training step (data made
beforehand) and report the median of STEPS steps after their warm-up.

    python3 benches/rnn_vs_jax.py [STEPS]   # from the repository root; needs JAX
                                            # (benches/peers/setup.sh installs it)
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import side_by_side

VOCAB, EMBED, HIDDEN, BATCH, STEPS = 32, 16, 64, 32, 24
LR = 0.5


def loss_fn(params, inputs, targets):
    embed, wx, wh, bh, wo, bo = params
    x = embed[inputs]  # [STEPS, BATCH, EMBED]

    def cell(h, xt):
        h = jnp.tanh(xt @ wx + h @ wh + bh)
        return h, h

    _, hs = jax.lax.scan(cell, jnp.zeros((BATCH, HIDDEN), jnp.float32), x)
    logits = hs.reshape(STEPS * BATCH, HIDDEN) @ wo + bo
    log_p = jax.nn.log_softmax(logits, axis=1)
    onehot = jax.nn.one_hot(targets.reshape(-1), VOCAB)
    return -jnp.mean(jnp.sum(onehot * log_p, axis=1))


@jax.jit
def train(params, inputs, targets):
    loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets)
    return loss, [p - LR * g for p, g in zip(params, grads)]


def jax_median(steps):
    rng = np.random.default_rng(0)
    normal = lambda shape, s: (s * rng.standard_normal(shape)).astype(np.float32)
    params = [normal((VOCAB, EMBED), 1.0),
              normal((EMBED, HIDDEN), (1 / EMBED) ** 0.5),
              normal((HIDDEN, HIDDEN), (1 / HIDDEN) ** 0.5),
              np.zeros(HIDDEN, np.float32),
              normal((HIDDEN, VOCAB), (1 / HIDDEN) ** 0.5),
              np.zeros(VOCAB, np.float32)]
    params = [jnp.asarray(p) for p in params]
    data = [(jnp.asarray(rng.integers(0, VOCAB, (STEPS, BATCH))),
             jnp.asarray(rng.integers(0, VOCAB, (STEPS, BATCH))))
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
    side_by_side.compare("rnn_lm", jax_median, steps)


if __name__ == "__main__":
    main()
