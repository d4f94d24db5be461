#!/usr/bin/env bash
# The user guide's walk-through on a GPU machine, recorded: starts gpuobsd, runs PyTorch workloads
# under the injector, and shows status, set-mode, kernels, graphs and the metrics as an operator
# would type them. Writes every command and its output to OUT_DIR/walkthrough.txt.
# Usage: bash scripts/gpu_walkthrough.sh OUT_DIR   (after gpuobs is installed, e.g. by the GPU suite)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_walkthrough.sh OUT_DIR}
mkdir -p "$out"
python=${PYTHON:-python3}
work=$(mktemp -d)
segments=$(mktemp -d -p /dev/shm gpuobs-walkthrough-XXXX)
log="$out/walkthrough.txt"
: > "$log"
export GPUOBS_ADDRESS="unix://$work/run/gpuobsd.sock"
injector=$($python -c 'import gpuobs, pathlib; print(pathlib.Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so")')

command -v gpuobsd > /dev/null || gpuobsd() { $python -m gpuobs.daemon.main "$@"; }
command -v gpuobsctl > /dev/null || gpuobsctl() { $python -m gpuobs.client.main "$@"; }

show() {  # prints the command as typed, then its output
  echo "\$ $*" >> "$log"
  "$@" >> "$log" 2>&1
  echo >> "$log"
}

gpuobsd --runtime-dir "$work/run" --segment-dir "$segments" --metrics-address 127.0.0.1:9464 \
  --hang-threshold-ms 1000 --log-format json > "$out/gpuobsd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do gpuobsctl status > /dev/null 2>&1 && break; sleep 0.1; done

echo "# a PyTorch program under the injector, in counter mode" >> "$log"
CUDA_INJECTION64_PATH=$injector GPUOBS_SEGMENT_DIR=$segments GPUOBS_MODE=counter GPUOBS_LABEL=torch-loop \
  $python tests/gpu/workloads/torch_loop.py --seconds 12 > "$out/torch_loop.out" 2>&1 &
workload=$!
for _ in $(seq 300); do gpuobsctl status 2>/dev/null | grep -q torch-loop && break; sleep 0.1; done
sleep 2
show gpuobsctl status
show gpuobsctl set-mode blocks
sleep 2
show gpuobsctl kernels --top 6
show gpuobsctl set-mode sampled --shift 10
show gpuobsctl set-mode counter
echo "\$ curl -s 127.0.0.1:9464/metrics | grep -E '^gpuobs_(mode|blocks_total|events_total|events_dropped_total)' | head -12" >> "$log"
curl -s 127.0.0.1:9464/metrics | grep -E '^gpuobs_(mode|blocks_total|events_total|events_dropped_total)' | head -12 >> "$log"
echo >> "$log"
wait $workload

echo "# a decode-like CUDA graph (40 layers) replayed 7 times, in blocks mode" >> "$log"
CUDA_INJECTION64_PATH=$injector GPUOBS_SEGMENT_DIR=$segments GPUOBS_MODE=blocks GPUOBS_BLOCK_EXIT=1 \
  GPUOBS_LABEL=decode-graph GPUOBS_RING_RECORDS=4194304 \
  $python tests/gpu/workloads/decode_graph40.py --layers 40 --replays 7 > "$out/decode.out" 2>&1
sleep 1
show gpuobsctl graphs --replays 7
show gpuobsctl kernels --top 8
echo "# a kernel that hangs (a Triton kernel spinning on a flag), block exits recorded" >> "$log"
CUDA_INJECTION64_PATH=$injector GPUOBS_SEGMENT_DIR=$segments GPUOBS_MODE=blocks GPUOBS_BLOCK_EXIT=1 \
  GPUOBS_LABEL=spin $python tests/gpu/workloads/spin_flag.py --grid 6 --release-after 4 > "$out/spin.out" 2>&1 &
spinner=$!
for _ in $(seq 300); do grep -q spinning "$out/spin.out" 2>/dev/null && break; sleep 0.1; done
sleep 1.5
show gpuobsctl hangs
echo "\$ curl -s 127.0.0.1:9464/metrics | grep -E '^gpuobs_(blocks_in_flight|oldest_block)'" >> "$log"
curl -s 127.0.0.1:9464/metrics | grep -E '^gpuobs_(blocks_in_flight|oldest_block)' >> "$log"
echo >> "$log"
wait $spinner
grep kernel_hang_suspected "$out/gpuobsd.log" >> "$log"
echo >> "$log"
echo "\$ gpuobsctl run --mode counter -- python tests/gpu/workloads/torch_ops.py --iters 3" >> "$log"
gpuobsctl --address unix:///nonexistent.sock run --mode counter --top 8 -- \
  $python tests/gpu/workloads/torch_ops.py --iters 3 >> "$log" 2>&1
kill $daemon
wait $daemon
rm -rf "$work" "$segments"
echo "walk-through written to $log"
