#!/usr/bin/env bash
# A first look at vLLM under gpuobs on the GPU machine: the real OpenAI server with no tool, then
# under the injector with a gpuobsd beside it (counter mode, switched to blocks between the two
# requests), then with no tool again (the first start compiles, the later ones find the cache).
# Records start times, the engine's own timings and what gpuobsctl shows, into OUT_DIR.tgz.
# Usage (GPU machine, gpuobs installed, the vLLM payload staged: ../shared/tools/vllm-device):
#   bash tests/gpu/vllm_probe.sh OUT_DIR PAYLOAD_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: vllm_probe.sh OUT_DIR PAYLOAD_DIR}
payload=${2:?usage: vllm_probe.sh OUT_DIR PAYLOAD_DIR}
mkdir -p "$out"
python=${PYTHON:-python3}
eval "$(bash "$payload/device_unpack.sh" "$payload" --env)" || exit 1
model=${VLLM_MODEL_DIR:-/tmp/tinyqwen3}
[ -d "$model" ] || $python "$payload/make_tiny_qwen3.py" "$model" > "$out/make_model.log" 2>&1 || exit 1
serve_args=(--max-model-len 512 --gpu-memory-utilization 0.2 --max-num-seqs 4 --max-num-batched-tokens 512
            --compilation-config '{"cudagraph_capture_sizes":[1,2,4]}')
injector=$($python -c 'import gpuobs, pathlib; print(pathlib.Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so")')
export MAX_TOKENS=${MAX_TOKENS:-16}

engine_timings() {  # the engine's own start-up figures from a serve.log
  grep -E "init engine|Graph capturing finished|torch.compile takes|Compiling a graph|Model loading took|Application startup complete" "$1" \
    | sed -E 's/^.*\] //' | head -12
}

echo "== no tool (cold compile cache)" | tee "$out/probe.txt"
bash "$payload/serve_smoke.sh" "$model" "$out/none-cold" "${serve_args[@]}" >> "$out/probe.txt" 2>&1
engine_timings "$out/none-cold/serve.log" >> "$out/probe.txt"

echo "== gpuobs: counter, then blocks before the second request" | tee -a "$out/probe.txt"
segments=$(mktemp -d -p /dev/shm gpuobs-vllm-XXXX)
run=$(mktemp -d)
export GPUOBS_ADDRESS="unix://$run/gpuobsd.sock"
$python -m gpuobs.daemon.main --runtime-dir "$run" --segment-dir "$segments" --metrics-address 127.0.0.1:9464 \
  --log-format json > "$out/gpuobsd.log" 2>&1 &
daemon=$!
ctl() { $python -m gpuobs.client.main "$@"; }
for _ in $(seq 100); do ctl status > /dev/null 2>&1 && break; sleep 0.1; done
hook() {
  case "$1" in
    before) ctl status > "$out/status-before.txt" 2>&1 ;;
    after_completion) ctl status > "$out/status-counter.txt" 2>&1; ctl set-mode blocks > "$out/set-mode.txt" 2>&1 ;;
    after_chat)
      sleep 1
      ctl status > "$out/status-blocks.txt" 2>&1
      ctl --output json status > "$out/status.json" 2>&1
      ctl kernels --top 30 > "$out/kernels.txt" 2>&1
      ctl --output json kernels --top 0 > "$out/kernels.json" 2>&1
      ctl graphs --replays 20 > "$out/graphs.txt" 2>&1
      curl -s 127.0.0.1:9464/metrics > "$out/metrics.txt" 2>&1 ;;
  esac
}
export -f hook ctl; export out python
CUDA_INJECTION64_PATH=$injector GPUOBS_SEGMENT_DIR=$segments GPUOBS_MODE=counter GPUOBS_LABEL=vllm \
  HEALTH_TIMEOUT=420 SMOKE_HOOK=hook \
  bash "$payload/serve_smoke.sh" "$model" "$out/gpuobs" "${serve_args[@]}" >> "$out/probe.txt" 2>&1
engine_timings "$out/gpuobs/serve.log" >> "$out/probe.txt"
grep -h "gpuobs" "$out/gpuobs/serve.log" | sort | uniq -c | head -20 >> "$out/probe.txt"
kill -INT $daemon; wait $daemon

echo "== no tool (warm compile cache)" | tee -a "$out/probe.txt"
bash "$payload/serve_smoke.sh" "$model" "$out/none-warm" "${serve_args[@]}" >> "$out/probe.txt" 2>&1
engine_timings "$out/none-warm/serve.log" >> "$out/probe.txt"
cat "$out/probe.txt"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "archive: $out.tgz"
