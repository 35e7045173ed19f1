"""What calling kiln from Python costs beside calling it from Rust, and beside the peers.

    python benches/python_overhead.py            # kiln from Python, numpy (and PyTensor, JAX
                                                 # where they are installed)
    python benches/python_overhead.py --rust     # also kiln from Rust (examples/bench.rs),
                                                 # built and run with cargo

Install the package first (`pip install ./python`, a release build: a dev build's figures
mean nothing). W7 is `x + 1` on 10 float32 elements: nearly all of its time is the call
itself. W1 (an elementwise chain on 16M floats) and W4 (a 1024^3 matmul) show that the
binding adds nothing measurable to real work. Medians of per-call timings, one process;
say what else ran on the machine when you quote them.
"""

import argparse
import json
import subprocess
import sys
import time

import numpy as np

import kiln


def per_call_us(fn, calls, warmup=100):
    """The median of `calls` timings of one call each, in microseconds."""
    for _ in range(warmup):
        fn()
    times = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    times.sort()
    return times[len(times) // 2] / 1e3


def kiln_python():
    """W7, W1 and W4 built and called through the kiln package."""
    rng = np.random.default_rng(0)
    out = {}
    x = kiln.vector("x", "float32", shape=(10,))
    f7 = kiln.function([x], x + 1)
    x7 = rng.standard_normal(10, dtype=np.float32)
    out["W7"] = per_call_us(lambda: f7(x7), 20000)
    a, b = kiln.vector("a", "float32"), kiln.vector("b", "float32")
    f1 = kiln.function([a, b], kiln.exp(-(a * a)) * kiln.sin(b) + a * b * 0.5)
    a1, b1 = (rng.standard_normal(16_000_000, dtype=np.float32) for _ in range(2))
    out["W1"] = per_call_us(lambda: f1(a1, b1), 15, warmup=3)
    m, n = kiln.matrix("m", "float32"), kiln.matrix("n", "float32")
    f4 = kiln.function([m, n], m @ n)
    m4, n4 = (rng.standard_normal((1024, 1024), dtype=np.float32) for _ in range(2))
    out["W4"] = per_call_us(lambda: f4(m4, n4), 15, warmup=3)
    return out


def numpy_w7():
    x = np.random.default_rng(0).standard_normal(10, dtype=np.float32)
    return per_call_us(lambda: x + 1, 20000)


def floor_us():
    """What timing a call that does nothing costs: part of every figure here."""
    return per_call_us(lambda: None, 20000)


def peers_w7():
    out = {}
    x = np.random.default_rng(0).standard_normal(10, dtype=np.float32)
    try:
        import pytensor
        import pytensor.tensor as pt

        a = pt.vector("a", dtype="float32")
        f = pytensor.function([a], a + 1)
        out["PyTensor"] = per_call_us(lambda: f(x), 20000)
    except ImportError:
        pass
    try:
        import jax

        g = jax.jit(lambda v: v + 1)
        xs = jax.numpy.asarray(x)
        out["JAX"] = per_call_us(lambda: g(xs).block_until_ready(), 20000)
    except ImportError:
        pass
    return out


def kiln_rust():
    """W7, W1 and W4 from examples/bench.rs (release), in microseconds."""
    cmd = ["cargo", "run", "--quiet", "--release", "--example", "bench", "--",
           "--json", "--only", "W1,W4,W7"]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    out = {}
    for line in lines:
        r = json.loads(line)
        out[r["workload"]] = r.get("median_us", r["median_ms"] * 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rust", action="store_true", help="also run kiln from Rust (cargo)")
    args = ap.parse_args()
    py = kiln_python()
    rust = kiln_rust() if args.rust else {}
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; timer floor "
          f"{floor_us():.2f} us per call (in every figure)")
    print("| work | kiln from Python | kiln from Rust | added by Python |")
    print("| --- | --- | --- | --- |")
    for w in ["W7", "W1", "W4"]:
        unit, scale = ("us", 1.0) if w == "W7" else ("ms", 1e-3)
        r = rust.get(w)
        added = f"{(py[w] - r) * scale:+.2f} {unit}" if r is not None else "-"
        rs = f"{r * scale:.2f} {unit}" if r is not None else "-"
        print(f"| {w} | {py[w] * scale:.2f} {unit} | {rs} | {added} |")
    peers = {"numpy": numpy_w7(), **peers_w7()}
    print()
    print("| W7 (x + 1, 10 float32) | us per call |")
    print("| --- | --- |")
    print(f"| kiln from Python | {py['W7']:.2f} |")
    for name, us in peers.items():
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
