#!/usr/bin/env python3
"""Merges kiln's G workloads (kiln.json, from gpu_bench) with the peers' (peers.json, from
gpu_peers.py) into one table (Markdown, stdout) and one JSON file (gpu-check.json).
usage: gpu_table.py OUT_DIR"""
import json, os, sys

out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else {}
kiln, peers = load("kiln.json"), load("peers.json")
# The peer each workload's target is measured against (issue 26).
target = {"G1": "torch.compile", "G2": "torch.compile", "G3": "torch.compile",
          "G4": "torch (cuBLAS, f32)", "G5": "torch eager in a CUDA graph",
          "G7": "torch (launch + sync)"}
rows = ["| workload | kiln ms | rel err | peer | peer ms | kiln / peer | other peers (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- |"]
ids = sorted({k.split(":")[0] for k in list(kiln) + list(peers) if ":" in k})
for wl in ids:
    k = kiln.get(f"{wl}:kiln", {})
    others = {key.split(":", 1)[1]: v for key, v in peers.items()
              if key.startswith(wl + ":") and isinstance(v, dict) and "median_ms" in v}
    ref = target.get(wl)
    pm = others.get(ref, {}).get("median_ms") if ref else None
    km = k.get("median_ms")
    ratio = f"{km / pm:.2f}x" if km and pm else "-"
    rest = ", ".join(f"{n} {v['median_ms']:.4f}" for n, v in others.items() if n != ref)
    err = k.get("rel_err")
    rows.append(f"| {wl} | {km:.4f} | {err if err is None else f'{err:.1e}'} | {ref or '-'} | "
                f"{pm if pm is None else f'{pm:.4f}'} | {ratio} | {rest} |" if km is not None else
                f"| {wl} | not run by kiln | - | {ref or '-'} | "
                f"{pm if pm is None else f'{pm:.4f}'} | - | {rest} |")
print(f"device: {kiln.get('device') or peers.get('device')}; copy bandwidth (G0, torch): "
      f"{peers.get('copy_GBps', 0):.0f} GB/s\n")
print("\n".join(rows))
parts = open(os.path.join(out, "parts.txt")).read() if os.path.exists(os.path.join(out, "parts.txt")) else ""
print("\nparts:\n" + parts)
json.dump({"kiln": kiln, "peers": peers, "parts": parts.splitlines()},
          open(os.path.join(out, "gpu-check.json"), "w"), indent=1)
