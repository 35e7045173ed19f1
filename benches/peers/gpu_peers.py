#!/usr/bin/env python3
"""The GPU workloads G0-G7 (README.md beside this file) in the peers, on the GPU machine:
PyTorch eager, torch.compile, PyTorch in a CUDA graph and JAX, whichever are installed.

    python3 gpu_peers.py [--only G1,G2] [--json peers.json]

`tools/gpu-check.sh` packs this beside kiln's `gpu_bench`, and `gpucheck/run.sh` runs both in
one call so that the ratios come from one machine. Inputs and results stay on the device;
PyTorch times are medians of CUDA event times around one call, JAX's medians of wall time
to `block_until_ready` (it has no events), each after a warm-up. The JSON maps
"G1:torch.compile" and the like to {"median_ms": ...}, the names `tools/gpu_table.py` reads.
"""

import argparse
import json
import math
import statistics
import sys
import time

N1 = 64 * 1024 * 1024          # G1's elements
ROWS = 8192                   # G2 and G3: ROWS x ROWS
MATMUL = 4096                 # G4: MATMUL^3
SIZES = (784, 512, 512, 10)   # G5: W5's MLP
BATCH = 256
LR = 0.01


# This file travels alone to the GPU machine (tools/gpu-check.sh packs it into gpucheck/), so
# it keeps its own timing helpers rather than importing workloads.py's.


def cuda_median(torch, fn, runs=50, warmup=5):
    """Median ms of `fn()` between two CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def wall_median(fn, runs=50, warmup=5):
    """Median ms of wall time of `fn()`, which waits for its result."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def mlp_params(torch):
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:]):
        w = torch.randn(fan_in, fan_out, device="cuda", generator=gen) / math.sqrt(fan_in)
        params += [w.requires_grad_(), torch.zeros(fan_out, device="cuda", requires_grad=True)]
    x = torch.randn(BATCH, SIZES[0], device="cuda", generator=gen)
    y = torch.nn.functional.one_hot(
        torch.randint(0, SIZES[-1], (BATCH,), device="cuda", generator=gen), SIZES[-1]).float()
    return params, x, y


def torch_peers(only, out):
    try:
        import torch
    except ImportError:
        print("torch is not installed: its peers are left out", file=sys.stderr)
        return
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: its peers are left out", file=sys.stderr)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    out["device"] = torch.cuda.get_device_name()
    put = lambda key, ms: out.__setitem__(key, {"median_ms": ms})

    def both(wl, eager_name, eager, expression):
        """The eager form and torch.compile of `expression`, where torch.compile works."""
        put(f"{wl}:{eager_name}", cuda_median(torch, eager))
        try:
            compiled = torch.compile(expression)
            put(f"{wl}:torch.compile", cuda_median(torch, compiled))
        except Exception as e:  # the compiler needs Triton and a C compiler; say so, go on
            print(f"{wl}: torch.compile failed: {e}", file=sys.stderr)

    if "G0" in only:
        a = torch.empty(1 << 28, device="cuda")  # 1 GiB of f32
        b = torch.empty_like(a)
        ms = cuda_median(torch, lambda: b.copy_(a), runs=20)
        out["copy_GBps"] = 2 * a.numel() * 4 / (ms * 1e-3) / 1e9
        del a, b
    if "G1" in only:
        x, y = torch.randn(N1, device="cuda"), torch.randn(N1, device="cuda")
        expr = lambda: torch.exp(-x * x) * torch.sin(y) + 0.5 * x * y
        both("G1", "torch eager", expr, expr)
        del x, y
    if "G2" in only or "G3" in only:
        m = torch.randn(ROWS, ROWS, device="cuda")
        if "G2" in only:
            def softmax():
                e = torch.exp(m - m.max(dim=1, keepdim=True).values)
                return e / e.sum(dim=1, keepdim=True)
            both("G2", "torch.softmax", lambda: torch.softmax(m, dim=1), softmax)
        if "G3" in only:
            def logsumexp():
                top = m.max(dim=1, keepdim=True).values
                return torch.log(torch.exp(m - top).sum(dim=1)) + top[:, 0]
            both("G3", "torch.logsumexp", lambda: torch.logsumexp(m, dim=1), logsumexp)
        del m
    if "G4" in only:
        a = torch.randn(MATMUL, MATMUL, device="cuda")
        b = torch.randn(MATMUL, MATMUL, device="cuda")
        put("G4:torch (cuBLAS, f32)", cuda_median(torch, lambda: a @ b, runs=20))
        del a, b
    if "G5" in only:
        params, x, y = mlp_params(torch)

        def step():
            h = x
            for i in range(0, len(params) - 2, 2):
                h = torch.tanh(h @ params[i] + params[i + 1])
            z = h @ params[-2] + params[-1]
            loss = -(y * torch.log_softmax(z, dim=1)).sum() / BATCH
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(LR * g)
        put("G5:torch eager", cuda_median(torch, step))
        # The same step captured once and replayed: no Python and no launches per kernel.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        put("G5:torch eager in a CUDA graph", cuda_median(torch, graph.replay))
    if "G7" in only:
        x = torch.randn(10, device="cuda")

        def tiny():
            (x + 1)
            torch.cuda.synchronize()
        put("G7:torch (launch + sync)", wall_median(tiny, runs=1000, warmup=50))


def jax_peers(only, out):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax is not installed: its peers are left out", file=sys.stderr)
        return
    if jax.devices()[0].platform != "gpu":
        print("jax sees no GPU: its peers are left out", file=sys.stderr)
        return
    key = jax.random.PRNGKey(0)
    put = lambda wl, f, *args: out.__setitem__(
        f"{wl}:JAX", {"median_ms": wall_median(lambda: f(*args).block_until_ready())})
    if "G1" in only:
        x, y = jax.random.normal(key, (N1,)), jax.random.normal(jax.random.PRNGKey(1), (N1,))
        put("G1", jax.jit(lambda a, b: jnp.exp(-a * a) * jnp.sin(b) + 0.5 * a * b), x, y)
    if "G2" in only or "G3" in only:
        m = jax.random.normal(key, (ROWS, ROWS))
        if "G2" in only:
            put("G2", jax.jit(lambda a: jax.nn.softmax(a, axis=1)), m)
        if "G3" in only:
            put("G3", jax.jit(lambda a: jax.nn.logsumexp(a, axis=1)), m)
    if "G4" in only:
        a = jax.random.normal(key, (MATMUL, MATMUL))
        b = jax.random.normal(jax.random.PRNGKey(1), (MATMUL, MATMUL))
        put("G4", jax.jit(lambda p, q: jnp.matmul(p, q, precision="highest")), a, b)
    if "G5" in only:
        keys = jax.random.split(key, 8)
        params = []
        for i, (fan_in, fan_out) in enumerate(zip(SIZES, SIZES[1:])):
            params += [jax.random.normal(keys[i], (fan_in, fan_out)) / math.sqrt(fan_in),
                       jnp.zeros(fan_out)]
        x = jax.random.normal(keys[6], (BATCH, SIZES[0]))
        y = jax.nn.one_hot(jax.random.randint(keys[7], (BATCH,), 0, SIZES[-1]), SIZES[-1])

        def loss_of(ps):
            h = x
            for i in range(0, len(ps) - 2, 2):
                h = jnp.tanh(h @ ps[i] + ps[i + 1])
            return -(y * jax.nn.log_softmax(h @ ps[-2] + ps[-1], axis=1)).sum() / BATCH

        update = jax.jit(lambda ps: [p - LR * g for p, g in zip(ps, jax.grad(loss_of)(ps))],
                         donate_argnums=0)
        state = {"ps": params}

        def step():
            state["ps"] = update(state["ps"])
            return state["ps"][0]
        out["G5:JAX"] = {"median_ms": wall_median(lambda: step().block_until_ready())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="G0,G1,G2,G3,G4,G5,G7")
    parser.add_argument("--json", help="write the results here as well as to stdout")
    args = parser.parse_args()
    only = set(args.only.split(","))
    out = {}
    # One peer failing (a driver the library does not support) leaves the others' figures.
    for peers in (torch_peers, jax_peers):
        try:
            peers(only, out)
        except Exception as e:
            print(f"{peers.__name__}: {type(e).__name__}: {e}", file=sys.stderr)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
