"""The four model benchmarks beside JAX in one run, one table: W5's MLP step, the CNN step,
the RNN LM step through `scan`, and the GPT-style step and its inference. Each model's kiln
and JAX medians alternate over three rounds (so both see the same machine) and the table
has the best of each. `benches/models.sh` runs this; see the per-model scripts beside it for
what each model is.

    python3 benches/models.py [STEPS] [--busy]   # --busy: another process keeps a core busy
"""

import sys

import jax

import cnn_vs_jax
import gpt_vs_jax
import mlp_vs_jax
import rnn_vs_jax
import side_by_side


def rows(steps):
    """(name, kiln medians by what they time, JAX medians by the same) for each model's round."""
    gpt_steps = max(steps // 4, 10)
    yield "MLP (W5)", {"train step": mlp_vs_jax.kiln_median(steps)}, \
        {"train step": mlp_vs_jax.jax_median(steps)}
    yield "CNN", {"train step": side_by_side.kiln_median("cnn", steps)}, \
        {"train step": cnn_vs_jax.jax_median(steps)}
    yield "RNN LM (scan)", {"train step": side_by_side.kiln_median("rnn_lm", steps)}, \
        {"train step": rnn_vs_jax.jax_median(steps)}
    yield "GPT", side_by_side.kiln_medians("gpt", gpt_steps), gpt_vs_jax.jax_medians(gpt_steps)


def main():
    args = sys.argv[1:]
    busy = "--busy" in args
    args = [a for a in args if a != "--busy"]
    steps = int(args[0]) if args else 100
    best = {}
    with side_by_side.busy_core(busy):
        for _ in range(3):
            for name, kiln, peer in rows(steps):
                for what, k in kiln.items():
                    j = peer[what]
                    old = best.get((name, what), (float("inf"), float("inf")))
                    best[(name, what)] = (min(old[0], k), min(old[1], j))
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {steps} steps ({max(steps // 4, 10)} "
          f"for GPT), best of 3 alternated medians"
          + (", one core kept busy by another process" if busy else ""))
    print("| model | what | kiln (ms) | JAX (ms) | kiln / JAX |")
    print("| --- | --- | --- | --- | --- |")
    for (name, what), (k, j) in best.items():
        print(f"| {name} | {what} | {k:.3f} | {j:.3f} | {k / j:.2f}x |")


if __name__ == "__main__":
    main()
