"""What benches/cnn_vs_jax.py and benches/rnn_vs_jax.py share: timing a kiln example's training
step (its `--time STEPS` mode) and printing it beside JAX's, alternated over three rounds so
that both see the same machine."""

import contextlib
import re
import subprocess
import sys

import jax


@contextlib.contextmanager
def busy_core(busy):
    """With `busy`, another process keeps one core busy (a Python loop) while the block runs:
    how each side shares a machine that is not its own."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def kiln_medians(example, steps):
    """Every median (ms) that `cargo run --example EXAMPLE -- --time STEPS` prints, by what it
    times (`train step`, `inference`)."""
    out = subprocess.run(
        ["cargo", "run", "--release", "--quiet", "--example", example, "--", "--time",
         str(steps)],
        check=True, capture_output=True, text=True).stdout
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^([a-z ]+) median ([0-9.]+) ms", out, re.MULTILINE)}


def kiln_median(example, steps):
    """The median training step (ms) that `cargo run --example EXAMPLE -- --time STEPS` prints."""
    return kiln_medians(example, steps)["train step"]


def compare(example, jax_median, steps):
    """Three alternated rounds of kiln's and JAX's medians; prints the best of each and the
    ratio, then every round."""
    compare_with(lambda n: kiln_median(example, n), jax_median, steps)


def compare_with(kiln_side, jax_median, steps):
    """`compare`, with kiln's median (ms) from `kiln_side(steps)`."""
    rounds = []
    for _ in range(3):
        rounds.append((kiln_side(steps), jax_median(steps)))
    k = min(r[0] for r in rounds)
    j = min(r[1] for r in rounds)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {steps} steps, best of "
          f"3 alternated medians")
    print("| | train step (ms) | ratio to JAX |")
    print("| --- | --- | --- |")
    print(f"| kiln | {k:.3f} | {k / j:.2f}x |")
    print(f"| JAX | {j:.3f} | 1.00x |")
    for i, (a, b) in enumerate(rounds):
        print(f"round {i}: kiln {a:.3f} ms, jax {b:.3f} ms")
