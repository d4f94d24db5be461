#!/usr/bin/env bash
# The main job on a machine without a GPU: set up, start gpuobsd (unprivileged, in a temporary
# runtime directory), let two gpuobs-synth processes play injected vLLM workers, then drive the
# daemon with gpuobsctl and read its Prometheus metrics. On a GPU machine the producers are real
# CUDA processes started with CUDA_INJECTION64_PATH (docs/user-guide.md, "Observing a CUDA program").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/segments"
port=${GPUOBS_DEMO_METRICS_PORT:-$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
.venv/bin/gpuobsd --runtime-dir "$work/run" --segment-dir "$work/segments" --metrics-address "127.0.0.1:$port" \
  --log-format console 2> "$work/gpuobsd.log" & pids+=($!)
# Both ranks as the vLLM drop-in starts them: the block patch set, mode counter, CUDA graphs
# captured at start and replayed (8 kernel nodes, the graph exec alive); rank1 also with the
# drop-in's optional GPUOBS_MEMORY_KERNELS, so its cache-write kernel has the access hooks.
.venv/bin/gpuobs-synth --segment-dir "$work/segments" --patch-set block --mode counter --graph-nodes 8 --live-graphs 1 \
  --rate 2000000 --label rank0 --rank 0 --world-size 2 --model Qwen3-8B 2>/dev/null & pids+=($!)
GPUOBS_MEMORY_KERNELS=reshape_and_cache .venv/bin/gpuobs-synth --segment-dir "$work/segments" --patch-set block \
  --mode counter --graph-nodes 8 --live-graphs 1 --rate 2000000 --label rank1 --rank 1 --world-size 2 \
  --model Qwen3-8B --seed 2 2>/dev/null & pids+=($!)
export GPUOBS_ADDRESS="unix://$work/run/gpuobsd.sock"
for _ in $(seq 100); do [ -S "$work/run/gpuobsd.sock" ] && break; sleep 0.1; done
[ -S "$work/run/gpuobsd.sock" ] || { cat "$work/gpuobsd.log"; exit 1; }
sleep 1
ctl() { echo "\$ gpuobsctl $*"; .venv/bin/gpuobsctl "$@"; echo; }
ctl status
ctl set-mode sampled --shift 10
sleep 1
ctl kernels --top 5
ctl kernels --top 3 --pid "${pids[2]}"
ctl graphs --replays 4 --pid "${pids[1]}"
ctl status
echo "\$ curl -s 127.0.0.1:$port/metrics | grep -E '^gpuobs_(processes|events_total|events_dropped_total|sample_shift|accounting)'"
curl -s "127.0.0.1:$port/metrics" | grep -E '^gpuobs_(processes|events_total|events_dropped_total|sample_shift|accounting)'
