#!/usr/bin/env bash
# The GPU machine's half of tools/gpu-check.sh (copied to gpucheck/run.sh): runs everything,
# each part under its own time limit, and keeps going after a failure so one run gives the
# whole picture. Exit status: the number of parts that failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-$here/out}}
mkdir -p "$out"
cd "$here"
export KILN_FILETESTS="$here/filetests"
# Unpack the binaries (python's lzma: present wherever python3 is, unlike xz).
for f in ptx backend_diff gpu_bench; do
    if [ -f "$f.xz" ]; then
        python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f.xz" "/tmp/$f" && chmod +x "/tmp/$f"
    fi
done
bin=/tmp
# cuBLAS is loaded at run time under the names of CUDA 12 (libcublas.so, .so.12): point one at
# whatever libcublas the machine has (the CUDA toolkit's, or PyTorch's wheel).
lib=$(ls /usr/local/cuda/lib64/libcublas.so* /usr/local/cuda/targets/*/lib/libcublas.so* 2>/dev/null | head -1)
[ -n "$lib" ] || lib=$(find / -xdev -name 'libcublas.so*' -not -path '*/proc/*' 2>/dev/null | head -1)
if [ -n "$lib" ]; then
    mkdir -p /tmp/kiln-libs && ln -sf "$lib" /tmp/kiln-libs/libcublas.so
    export LD_LIBRARY_PATH="/tmp/kiln-libs:$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "cuBLAS: $lib"
else
    echo "cuBLAS: none found (products will fail on the device)"
fi
failed=0
part() { # name, seconds, command...
    local name=$1 secs=$2; shift 2
    echo "=== $name"
    local t0=$(date +%s%N)
    timeout "$secs" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '%s rc=%d %d ms\n' "$name" "$rc" "$ms" | tee -a "$out/parts.txt"
    tail -n 25 "$out/$name.log"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
# Limits sized for a lent machine's 15 minutes: about 8 minutes in all at worst.
part tests 150 $bin/ptx --test-threads 1 --nocapture gpu
part kiln_bench 60 $bin/gpu_bench --json "$out/kiln.json"
if [ -f gpu_peers.py ]; then
    part peers 150 env PYTHONUNBUFFERED=1 python3 gpu_peers.py --only G0,G1,G2,G3,G4,G5,G7 --json "$out/peers.json"
fi
part random 120 env KILN_RANDOM_CASES=${KILN_RANDOM_CASES:-40} $bin/backend_diff --nocapture random_programs_agree_on_the_gpu
if command -v compute-sanitizer >/dev/null; then
    part sanitizer 60 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/ptx --test-threads 1 the_gpu_backend_runs kernels_at_scale row_groups gpu_graphs huge_trig_arguments_are_reduced_on_the_gpu float_products_give_the_interpreters_bits_on_the_gpu sgd_updates every_kind
fi
python3 gpu_table.py "$out" | tee "$out/table.md"
exit $failed
