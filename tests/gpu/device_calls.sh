#!/usr/bin/env bash
# The GPU suite, the vLLM tests and the overhead benchmarks of one commit in three device calls,
# each under the device's 600 s limit and all three in its 30 minutes (measured on the H200 at
# 13ef1c3: call 1 with the decode graph 489 s (suite and build 309 s, decode graph 180 s),
# call 2 440 s, call 3 328 s; a cold start ~45-90 s of device time: 1,571 s held in all, with
# a 91 s try that got no machine). At 21f5a1f the suite and build took 384 s and the decode
# graph's third round no longer fitted call 1: give call 1 `none` and call 3 `decode` (call 3
# 345 s + the decode graph ~180 s). At 5e8016a: call 1 391 s (the build 19 s), call 3 457 s (the
# vLLM ops scene and serve tests grew: no room left for `decode` after it); a try that gets no
# machine costs ~90 s of device time. At 910cb9b on an H100: call 1 250 s, 1b 31 s, call 3 573 s
# (its tests 561 s: 14 s from its limit, so nothing fits after it), call 2 527 s (its bench's 480 s
# budget left the ninth process out): call 3 is now split, 3o (the ops scene) then 3. At 344fd1a
# on an H100: call 1 357 s, 1b 22 s, 3o 130 s, 3 336 s, call 2 462 s (1,425 s held with the cold
# start). At 31c9147 on an H100: call 1 with `launch-times` 361 s (the suite 300 s), 3o 101 s.
# At 66a890a on an H100: call 1 with `step-spans` 430 s (the suite 325 s), call 3 272 s.
# Call 4 is a fourth that does not fit beside the others: run it instead of call 2 (or give
# call 2 GPUOBS_DECODE_MODEL_SIZE=gpu-bound), right after call 1. The vLLM payload comes in two
# chunk folders that must be carried by calls back to back on a warm machine (it stays warm ~30 s
# after a call): make the next call at once. Should the
# machine go cold after call 1 all the same, call 1b (18 s at 13ef1c3) unpacks the first chunk
# again and builds, and calls 2 and 3 follow it. Build the chunks with
# `CHUNK_MB=42 build_payload.sh .vllm`: a 62 MiB chunk and this repository's tracked files pass
# the 64 MiB a call carries.
#
#   call 1 (carry .whl .vllm/c1):  bash tests/gpu/device_calls.sh 1 COMMIT [overhead workloads: silu,gemm; none]
#   call 1b (carry .whl .vllm/c1): bash tests/gpu/device_calls.sh 1b COMMIT   (only after a cold machine)
#   call 2 (carry .vllm/c2):       bash tests/gpu/device_calls.sh 2 COMMIT
#   call 3o (carry .vllm/c2):      bash tests/gpu/device_calls.sh 3o COMMIT  (the vLLM ops scene: ~100 s)
#   call 3 (carry .vllm/c2):       bash tests/gpu/device_calls.sh 3 COMMIT [overhead workloads after it]
#                                  (GPUOBS_OVERHEAD_ROUNDS=N before it; `step-spans`, 3 rounds: ~100 s)
#                                  (serve and per-request tests, without the ops scene since 910cb9b)
#   call 4 (carry .vllm/c2):       bash tests/gpu/device_calls.sh 4 COMMIT   (the decode bench on the
#                                  GPU-bound model, 3 rounds; not a test; call 2 runs it as the test
#                                  with GPUOBS_DECODE_MODEL_SIZE=gpu-bound in the environment)
#   call 5 (carry .vllm/c2):       bash tests/gpu/device_calls.sh 5 COMMIT   (the decode bench on the
#                                  8B-class model: no tool, floor-steady, gpuobs in off, counter,
#                                  sampled --shift 10 and blocks; 3 rounds, 9 processes, ~560 s
#                                  estimated with the model made in it)
#   call 5f (carry .vllm/c2):      bash tests/gpu/device_calls.sh 5f COMMIT  (the 8B-class floor of
#                                  `off` taken apart: no tool, floor-subscribe, floor-resource,
#                                  floor-launch, floor-steady; two rounds and what fits of a third)
#   call 6:                        bash tests/gpu/device_calls.sh 6 COMMIT   (graph execs across
#                                  unpatch and re-patch, tests/gpu/test_graph_repatch.py, then the
#                                  decode graph's floor taken apart, overhead.py --workloads floor,
#                                  5 rounds; ~260 s estimated)
#   call 7 (carry .vllm/c2):       bash tests/gpu/device_calls.sh 7 COMMIT   (the served 8B-class cost:
#                                  vllm_overhead.py --model-size 8b, five fresh servers: no tool,
#                                  the drop-in in off, counter, sampled --shift 10 and blocks, no
#                                  tool, the floor tool (floor-steady), no tool; ~530 s estimated
#                                  with the model already made)
# Calls 5, 5f, 6 and 7 follow call 1 or 1b (the build) on a warm machine; 5, 5f and 7 carry the
# second chunk like calls 2-4. The first of 5, 5f and 7 makes the 8B-class model in /tmp (~60 s
# estimated, 15 GB) and compiles it once in vLLM; the others find the model while the machine
# stays warm. Call 7 has no room for making it: run it after 5 or 5f (made there, it leaves
# call 7 its five servers; made in call 7, the last no-tool server falls to its budget).
#
# Everything goes under $OUT; what lies deeper than the device returns is also in $OUT/*.tgz.
# Afterwards, here: python bench/overhead.py --merge overhead-kernels.json overhead-decode.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
call=${1:?usage: device_calls.sh 1|1b|2|3|3o|4|5|5f|6|7 COMMIT}
commit=${2:?usage: device_calls.sh 1|1b|2|3|3o|4|5|5f|6|7 COMMIT}
out=${OUT:?OUT: the output folder of the device call}
export PATH="/usr/local/cuda/bin:$PATH" GPUOBS_COMMIT="$commit"
left() { echo $(( $1 - SECONDS )); }  # seconds left of a call that must end by $1

case "$call" in
  1)
    bash .vllm/c1/device_unpack.sh .vllm/c1 > "$out/unpack-c1.txt" 2>&1
    timeout 450 bash tests/gpu/run_gpu_suite.sh "$out/gpu" > "$out/suite-console.txt" 2>&1
    echo "suite rc $? at $SECONDS s"
    workloads=${3:-silu,gemm}
    [ "$workloads" = none ] && { tail -3 "$out/gpu/summary.md" 2>/dev/null | head -1; exit 0; }
    timeout "$(left 570)" python3 bench/overhead.py --rounds 3 --workloads "$workloads" \
      --out "$out/overhead-kernels.json" --commit "$commit" > "$out/overhead-kernels.txt" 2>&1
    echo "overhead ($workloads) rc $? at $SECONDS s"
    tail -3 "$out/gpu/summary.md" 2>/dev/null | head -1
    ;;
  1b)
    bash .vllm/c1/device_unpack.sh .vllm/c1 > "$out/unpack-c1.txt" 2>&1 || { echo "chunk 1 did not unpack"; exit 1; }
    bash tests/gpu/install_on_device.sh "$out/build.log"
    echo "build rc $? at $SECONDS s"
    ;;
  2|3|3o)
    payload_env=$(bash .vllm/c2/device_unpack.sh .vllm/c2 --env) || { echo "payload incomplete: redo call 1"; exit 1; }
    eval "$payload_env"
    export GPUOBS_VLLM_PAYLOAD=.vllm/c2 GPUOBS_REPORT_DIR="$out/r" GPUOBS_DECODE_MODEL_SIZE=${GPUOBS_DECODE_MODEL_SIZE:-host-bound}
    case "$call" in
      2) test=tests/gpu/test_vllm_decode.py ;;
      3) test="tests/gpu/test_vllm.py tests/gpu/test_vllm_requests.py" ;;
      3o) test=tests/gpu/test_vllm_ops.py ;;
    esac
    limit=$([ "$call" = 2 ] && echo 570 || echo 575)
    # shellcheck disable=SC2086 # call 3 runs two test files that judge one vLLM run
    timeout "$(left "$limit")" python3 -m pytest -v -p no:cacheprovider $test --junitxml="$out/junit-$call.xml" \
      > "$out/vllm-tests-$call.log" 2>&1
    echo "$test rc $? at $SECONDS s"
    (cd "$out" && tar czf "r-$call.tgz" r)
    if [ "$call" = 3 ] && [ -n "${3:-}" ]; then
      timeout "$(left 575)" python3 bench/overhead.py --rounds "${GPUOBS_OVERHEAD_ROUNDS:-3}" --workloads "$3" \
        --out "$out/overhead-decode.json" --commit "$commit" > "$out/overhead-decode.txt" 2>&1
      echo "overhead ($3) rc $? at $SECONDS s"
    fi
    grep -E "passed|failed" "$out/vllm-tests-$call.log" | tail -1
    ;;
  4)
    payload_env=$(bash .vllm/c2/device_unpack.sh .vllm/c2 --env) || { echo "payload incomplete: redo call 1"; exit 1; }
    eval "$payload_env"
    timeout "$(left 575)" python3 bench/vllm_decode.py --payload .vllm/c2 --model-size gpu-bound --configs none,floor-steady,gpuobs \
      --budget-s 480 --out "$out/vllm-decode-gpu-bound" --commit "$commit" > "$out/vllm-decode-gpu-bound.txt" 2>&1
    echo "gpu-bound decode bench rc $? at $SECONDS s"
    tail -12 "$out/vllm-decode-gpu-bound.txt"
    ;;
  5|5f)
    payload_env=$(bash .vllm/c2/device_unpack.sh .vllm/c2 --env) || { echo "payload incomplete: redo call 1"; exit 1; }
    eval "$payload_env"
    if [ "$call" = 5 ]; then
      name=vllm-decode-8b configs=none,floor-steady,gpuobs
      modes=(--gpuobs-modes "off,counter,sampled --shift 10,blocks")
    else
      name=vllm-decode-8b-floor configs=none,floor-subscribe,floor-resource,floor-launch,floor-steady
      modes=()
    fi
    # no process starts after 430 s: the one measuring then and the one after it end by ~560 s
    timeout "$(left 575)" python3 bench/vllm_decode.py --payload .vllm/c2 --model-size 8b --configs "$configs" \
      ${modes[@]+"${modes[@]}"} --rounds 3 --budget-s 430 --out "$out/$name" --commit "$commit" > "$out/$name.txt" 2>&1
    echo "8b decode bench ($configs) rc $? at $SECONDS s"
    tail -12 "$out/$name.txt"
    ;;
  6)
    # the answers: printed into the log, and $out/r/graph-repatch.json
    GPUOBS_REPORT_DIR="$out/r" timeout 150 python3 -m pytest -v -s -p no:cacheprovider tests/gpu/test_graph_repatch.py \
      --junitxml="$out/junit-6.xml" > "$out/graph-repatch.log" 2>&1
    echo "graph repatch test rc $? at $SECONDS s"
    timeout "$(left 575)" python3 bench/overhead.py --rounds 5 --workloads floor \
      --out "$out/overhead-floor.json" --commit "$commit" > "$out/overhead-floor.txt" 2>&1
    echo "overhead (floor) rc $? at $SECONDS s"
    grep -E "passed|failed" "$out/graph-repatch.log" | tail -1
    tail -12 "$out/overhead-floor.txt"
    ;;
  7)
    payload_env=$(bash .vllm/c2/device_unpack.sh .vllm/c2 --env) || { echo "payload incomplete: redo call 1"; exit 1; }
    eval "$payload_env"
    # no server starts after 470 s: the last, a no-tool one (~85-95 s), ends by ~565 s
    timeout "$(left 575)" python3 bench/vllm_overhead.py --payload .vllm/c2 --model-size 8b --budget-s 470 \
      --out "$out/vllm-serve-8b" --commit "$commit" > "$out/vllm-serve-8b.txt" 2>&1
    echo "8b serve bench rc $? at $SECONDS s"
    tail -12 "$out/vllm-serve-8b.txt"
    ;;
  *) echo "usage: device_calls.sh 1|1b|2|3|3o|4|5|5f|6|7 COMMIT" >&2; exit 2 ;;
esac
