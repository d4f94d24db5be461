#!/usr/bin/env bash
# The main job on a machine without a GPU: set up, then two gpuobs-synth processes (one in
# `blocks`, one in `sampled --shift 6`) play injected vLLM workers while gpuobs-drain drains
# their segments continuously and reports kernels, counts and the per-stage accounting.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
.venv/bin/gpuobs-synth --segment-dir "$dir" --mode blocks --rate 2000000 --duration 3 --label rank0 >/dev/null &
.venv/bin/gpuobs-synth --segment-dir "$dir" --mode sampled --shift 6 --kernels 12 --rate 20000000 --duration 3 \
  --label rank1 >/dev/null &
sleep 0.2
.venv/bin/gpuobs-drain --segment-dir "$dir" --duration 0 --top 6
wait
