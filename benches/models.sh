#!/usr/bin/env bash
# The four model benchmarks (MLP, CNN, RNN LM, GPT) beside JAX in one run, printing one table.
#
#   bash benches/models.sh [STEPS] [--busy]
#
# Run from the repository root with a Python that has JAX and numpy (PYTHON=..., default
# python3; `python3 -m venv v && v/bin/pip install numpy jax` makes one). The kiln side is
# built first so that no compilation runs between timed rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench --example cnn --example rnn_lm --example gpt
exec "${PYTHON:-python3}" benches/models.py "$@"
