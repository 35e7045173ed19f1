"""The training step and the inference of examples/gpt.rs beside the same model in JAX, in one
run.

The model: token and position embeddings (256 tokens, 64 positions -> 128), 2 pre-norm blocks
(causal self-attention over 4 heads of 32 with separate q, k, v and output products; a GELU
MLP 128 -> 512 -> 128; residuals), a final layer norm and a linear head to 256 logits, softmax
cross-entropy, Adam written out by hand; batch 16. Both sides time only the compiled training
step and the compiled forward pass (data made beforehand) and report the median of STEPS calls
after their warm-up; kiln's and JAX's rounds alternate, three each.

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install numpy jax   # once
    /tmp/peers/bin/python benches/gpt_vs_jax.py [STEPS] [--busy]   # from the repository root

With `--busy`, another process keeps one core busy through every round of both sides.
"""

import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import side_by_side

VOCAB, DIM, HEADS, BLOCKS, SEQ, BATCH = 256, 128, 4, 2, 64, 16
HEAD_DIM = DIM // HEADS
LR, B1, B2 = 3e-3, 0.9, 0.999


def init_params(rng):
    normal = lambda *shape: (0.02 * rng.standard_normal(shape)).astype(np.float32)
    ones, zeros = (lambda n: np.ones(n, np.float32)), (lambda n: np.zeros(n, np.float32))
    params = {"wte": normal(VOCAB, DIM), "wpe": normal(SEQ, DIM),
              "ln_f": (ones(DIM), zeros(DIM)), "head": normal(DIM, VOCAB), "blocks": []}
    for _ in range(BLOCKS):
        params["blocks"].append({
            "ln1": (ones(DIM), zeros(DIM)), "ln2": (ones(DIM), zeros(DIM)),
            "wq": normal(DIM, DIM), "wk": normal(DIM, DIM), "wv": normal(DIM, DIM),
            "wo": normal(DIM, DIM), "w1": normal(DIM, 4 * DIM), "b1": zeros(4 * DIM),
            "w2": normal(4 * DIM, DIM), "b2": zeros(DIM)})
    return jax.tree_util.tree_map(jnp.asarray, params)


def layer_norm(x, gain_bias):
    gain, bias = gain_bias
    centered = x - x.mean(-1, keepdims=True)
    var = (centered * centered).mean(-1, keepdims=True)
    return centered * jax.lax.rsqrt(var + 1e-5) * gain + bias


def gelu(x):
    c = math.sqrt(2 / math.pi)
    return x * 0.5 * (jnp.tanh((x + 0.044715 * x * x * x) * c) + 1)


def heads(x):
    return x.reshape(BATCH, SEQ, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)


MASK = jnp.asarray(np.triu(np.full((SEQ, SEQ), -1e9, np.float32), 1))


def forward(params, tokens):
    h = params["wte"][tokens] + params["wpe"]
    for b in params["blocks"]:
        x = layer_norm(h, b["ln1"])
        q, k, v = heads(x @ b["wq"]), heads(x @ b["wk"]), heads(x @ b["wv"])
        scores = q @ k.transpose(0, 1, 3, 2) * (1 / math.sqrt(HEAD_DIM)) + MASK
        att = jax.nn.softmax(scores, axis=-1)
        merged = (att @ v).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, DIM)
        h = h + merged @ b["wo"]
        x = layer_norm(h, b["ln2"])
        h = h + gelu(x @ b["w1"] + b["b1"]) @ b["w2"] + b["b2"]
    return layer_norm(h, params["ln_f"]).reshape(BATCH * SEQ, DIM) @ params["head"]


def loss_fn(params, tokens, targets):
    log_p = jax.nn.log_softmax(forward(params, tokens), axis=1)
    onehot = jax.nn.one_hot(targets.reshape(-1), VOCAB)
    return -jnp.mean(jnp.sum(onehot * log_p, axis=1))


@jax.jit
def train(state, tokens, targets):
    params, m, v, step = state
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
    t = step + 1
    rate = LR * jnp.sqrt(1 - B2 ** t) / (1 - B1 ** t)
    m = jax.tree_util.tree_map(lambda m, g: B1 * m + (1 - B1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: B2 * v + (1 - B2) * g * g, v, grads)
    params = jax.tree_util.tree_map(lambda p, m, v: p - m * rate / (jnp.sqrt(v) + 1e-8),
                                    params, m, v)
    return loss, (params, m, v, t)


infer = jax.jit(forward)


def timed(calls, block):
    times = []
    for call in calls:
        t = time.perf_counter()
        block(call())
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def jax_medians(steps):
    rng = np.random.default_rng(0)
    params = init_params(rng)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.float32(0))
    data = [(jnp.asarray(rng.integers(0, VOCAB, (BATCH, SEQ))),
             jnp.asarray(rng.integers(0, VOCAB, (BATCH, SEQ)))) for _ in range(steps)]
    for x, y in data[:20]:
        loss, state = train(state, x, y)
        infer(state[0], x).block_until_ready()
    loss.block_until_ready()

    def step(x, y):
        nonlocal state
        loss, state = train(state, x, y)
        return loss

    train_ms = timed([lambda x=x, y=y: step(x, y) for x, y in data],
                     lambda out: out.block_until_ready())
    infer_ms = timed([lambda x=x: infer(state[0], x) for x, _ in data],
                     lambda out: out.block_until_ready())
    return {"train step": train_ms, "inference": infer_ms}


def main():
    args = sys.argv[1:]
    busy = "--busy" in args
    args = [a for a in args if a != "--busy"]
    steps = int(args[0]) if args else 100
    rounds = []
    with side_by_side.busy_core(busy):
        for _ in range(3):
            rounds.append((side_by_side.kiln_medians("gpt", steps), jax_medians(steps)))
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {steps} calls, best of 3 "
          f"alternated medians" + (", one core kept busy by another process" if busy else ""))
    print("| | kiln (ms) | JAX (ms) | kiln / JAX |")
    print("| --- | --- | --- | --- |")
    for what in ("train step", "inference"):
        k = min(r[0][what] for r in rounds)
        j = min(r[1][what] for r in rounds)
        print(f"| {what} | {k:.3f} | {j:.3f} | {k / j:.2f}x |")
    for i, (k, j) in enumerate(rounds):
        print(f"round {i}: kiln {k}, jax {j}")


if __name__ == "__main__":
    main()
