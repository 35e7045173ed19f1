#!/usr/bin/env bash
# Makes the virtual environment the peers run in: numpy, numexpr, PyTensor and JAX (CPU), and
# PyTorch's CPU build when KILN_PEERS_TORCH=1. Once per machine; run again to update.
#
#   bash benches/peers/setup.sh          # into $KILN_PEERS_VENV, default ~/.cache/kiln-peers
#
# PyTensor needs Python 3.12 or newer: the first of $PYTHON, python3.13, python3.12, pyenv's
# 3.13 and 3.12 that is at least 3.12 makes the environment. Nothing is installed outside it.
set -euo pipefail
venv=${KILN_PEERS_VENV:-$HOME/.cache/kiln-peers}

new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
python=""
for candidate in "${PYTHON:-}" python3.13 python3.12 \
    "$HOME"/.pyenv/versions/3.13*/bin/python "$HOME"/.pyenv/versions/3.12*/bin/python python3; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null && new_enough "$candidate"; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "setup.sh: no Python 3.12 or newer found (set PYTHON=...)" >&2
  exit 1
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q numpy numexpr pytensor jax
if [ "${KILN_PEERS_TORCH:-0}" = 1 ]; then
  # The CPU wheel: the default one carries CUDA (gigabytes) that a CPU comparison never uses.
  "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu \
    || echo "setup.sh: torch was not installed; the comparison leaves it out" >&2
fi
"$venv/bin/python" -c 'import numpy, numexpr, pytensor, jax
print("peers in", __import__("sys").prefix + ":", "numpy", numpy.__version__, "numexpr",
      numexpr.__version__, "pytensor", pytensor.__version__, "jax", jax.__version__)'
