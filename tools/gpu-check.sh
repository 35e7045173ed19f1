#!/usr/bin/env bash
# The one-command GPU check (docs/gpu.md). On this machine (Rust, LLVM 19):
#   tools/gpu-check.sh            builds the GPU test binaries and the bench with --features gpu
#                                 and gathers them with the corpus, the peers' script and a
#                                 runner into gpucheck/ (ignored by git; under 64 MiB)
# On a machine with an NVIDIA GPU (no Rust, no network needed), from the repository root:
#   bash gpucheck/run.sh [OUT]    runs the GPU tests (corpus and random programs against the
#                                 interpreter, kernels at scale), compute-sanitizer on a sample,
#                                 kiln's G workloads and benches/peers/gpu_peers.py, and writes
#                                 OUT/table.md and OUT/gpu-check.json (OUT defaults to $OUT or
#                                 gpucheck/out)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dest=gpucheck
rm -rf "$dest" && mkdir -p "$dest"
# Test binaries: their paths from cargo's JSON messages.
cargo test --release --features gpu --no-run --test ptx --test backend_diff \
    --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], "'"$dest"'/" + m["target"]["name"])
'
cargo build --release --features gpu --example gpu_bench
cp target/release/examples/gpu_bench "$dest/"
strip "$dest"/ptx "$dest"/backend_diff "$dest"/gpu_bench
# Each binary links LLVM (about 45 MiB stripped); xz brings the three to about 40 MiB.
xz -T0 -6 "$dest"/ptx "$dest"/backend_diff "$dest"/gpu_bench
cp -r tests/filetests "$dest/filetests"
cp benches/peers/gpu_peers.py "$dest/"
cp tools/gpu-run.sh "$dest/run.sh"
cp tools/gpu_table.py "$dest/"
du -sh "$dest"
echo "gathered into $dest/; on the GPU machine: bash $dest/run.sh"
