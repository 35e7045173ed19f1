#!/usr/bin/env bash
# Every figure README.md and docs/bench/ quote beside the peers, on this machine, in one command:
#
#   bash benches/peers/run.sh [OUT]     # OUT defaults to docs/bench/DATE-peers.md
#
# Makes the peers' environment if it is missing (setup.sh), then runs W1-W7 beside numpy,
# numexpr, JAX and PyTensor (compare.py) and the four model steps beside JAX
# (benches/models.sh), and writes both tables, with the machine and the commit, to OUT.
# About 5 to 15 minutes on two cores. Keep the machine otherwise idle: the header records the load.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv=${KILN_PEERS_VENV:-$HOME/.cache/kiln-peers}
out=${1:-docs/bench/$(date +%F)-peers.md}
[ -x "$venv/bin/python" ] || bash benches/peers/setup.sh
{
  echo "# kiln beside its peers ($(date +%F), commit $(git rev-parse --short HEAD))"
  echo
  echo '```'
  echo "bash benches/peers/run.sh"
  echo '```'
  echo
  echo "## The standard workloads (benches/peers/compare.py)"
  echo
  python3 benches/peers/compare.py
  echo
  echo "## The models (benches/models.sh)"
  echo
  PYTHON="$venv/bin/python" bash benches/models.sh
} > "$out.partial"
mv "$out.partial" "$out"
echo "wrote $out"
