#!/usr/bin/env python3
"""W1-W7 in kiln and in its peers, side by side in one run, printed as one table per workload.

    python3 benches/peers/compare.py [--only W1,W5] [--threads N] [--rounds R]
                                     [--peers numpy,jax] [--json OUT]

Run from anywhere with any Python 3 (it only starts processes): the peers run in the virtual
environment setup.sh makes ($KILN_PEERS_VENV, default ~/.cache/kiln-peers), kiln's side is
`target/release/examples/bench` (built first). Every round runs every side once per workload,
each in a fresh process, in turn, so a noisy spell falls on all of them; the table has the
median of the rounds' medians. What else ran on the machine decides how far to trust a ratio:
the header prints the load average before and after.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("KILN_PEERS_VENV", os.path.expanduser("~/.cache/kiln-peers"))
WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7")
WHAT = {
    "W1": "exp(-x*x) * sin(y) + 0.5*x*y, 16M f32",
    "W2": "row softmax, 4096 x 4096 f32",
    "W3": "logsumexp along axis 1, 4096 x 4096 f32",
    "W4": "matmul 1024^3 f32",
    "W5": "MLP training step, batch 256, 784-512-512-10",
    "W6": "W5 from building the graph to the first result, fresh process",
    "W7": "x + 1 on 10 f32, per call",
}


def thread_env(threads):
    """The environment that holds every library to `threads` threads."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS", "RAYON_NUM_THREADS",
                "KILN_THREADS"):
        env[var] = str(threads)
    env["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
                        f"intra_op_parallelism_threads={threads}")
    return env


def run_json(cmd, env):
    """The last JSON line `cmd` prints, or {"error": ...} when it fails."""
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def kiln_side(workload, threads):
    binary = os.path.join(ROOT, "target", "release", "examples", "bench")
    return run_json([binary, "--json", "--only", workload, "--threads", str(threads)],
                    thread_env(threads))


def peer_side(peer, workload, threads):
    python = os.path.join(VENV, "bin", "python")
    return run_json([python, os.path.join(HERE, "workloads.py"), peer, workload, str(threads)],
                    thread_env(threads))


def machine():
    """What the figures were measured on: the CPU, its cores, the commit."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip() or "unknown"
    return f"{model}, {os.cpu_count()} logical cores, commit {commit}"


def load():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def summary(results, key):
    """The median over rounds of each round's `key`, or None."""
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values else None


def table(workload, sides):
    """One workload's markdown table: every side's median, min, error and kiln's ratio to it."""
    unit = "us" if workload == "W7" else "ms"
    key = "median_us" if workload == "W7" else "median_ms"
    lines = [f"### {workload}: {WHAT[workload]}", "",
             f"| side | median ({unit}) | min ({unit}) | rel. error | kiln / side |",
             "| --- | --- | --- | --- | --- |"]
    kiln = summary(sides.get("kiln", []), key)
    for side, results in sides.items():
        skipped = [r for r in results if "skip" in r or "error" in r]
        med = summary(results, key)
        if med is None:
            why = skipped[0].get("skip") or skipped[0].get("error") if skipped else "no result"
            lines.append(f"| {side} | - | - | - | {why} |")
            continue
        low = summary(results, "min_ms")
        if low is not None and workload == "W7":
            low *= 1e3
        err = summary(results, "rel_err")
        ratio = f"{kiln / med:.2f}" if kiln is not None and side != "kiln" else ""
        lines.append(f"| {side} | {med:.3f} | {'' if low is None else f'{low:.3f}'} | "
                     f"{'' if err is None else f'{err:.1e}'} | {ratio} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", default="numpy,numexpr,jax,pytensor,torch")
    parser.add_argument("--json", help="also write every round's results here")
    args = parser.parse_args()
    workloads = [w for w in args.only.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"compare.py: unknown workload {w} (the workloads: {', '.join(WORKLOADS)})")
    if not os.path.exists(os.path.join(VENV, "bin", "python")):
        sys.exit(f"compare.py: no peers' environment at {VENV}: run benches/peers/setup.sh")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "bench"],
                   cwd=ROOT, check=True)
    peers = [p for p in args.peers.split(",") if p]

    before = load()
    results = {w: {side: [] for side in ["kiln"] + peers} for w in workloads}
    for round_ in range(args.rounds):
        for w in workloads:
            results[w]["kiln"].append(kiln_side(w, args.threads))
            for p in peers:
                results[w][p].append(peer_side(p, w, args.threads))
        print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)

    print(f"# benches/peers/compare.py --only {','.join(workloads)} --threads {args.threads} "
          f"--rounds {args.rounds}")
    print(f"# {datetime.datetime.now().isoformat(timespec='minutes')}, {machine()}")
    print(f"# load average before {before}, after {load()}; medians of {args.rounds} "
          f"alternated rounds; kiln / side below 1 means kiln is faster")
    for w in workloads:
        # Peers that have no form of the workload say so in one row rather than vanish.
        print()
        print(table(w, results[w]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
