#!/usr/bin/env bash
# Builds gpuobs on the GPU machine and runs the whole GPU suite in one go; writes the log, the
# JUnit XML and a summary (date, device, commit, command, pass/fail per test) into OUT_DIR.
# Usage: bash tests/gpu/run_gpu_suite.sh OUT_DIR [pytest args...]
# Also writes OUT_DIR.tgz with everything (GPUOBS_WALKTHROUGH=1 adds the user guide's walk-through).
# The GPU machine has no network: the build uses the toolchain and packages already there.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: run_gpu_suite.sh OUT_DIR [pytest args]}
shift
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
export GPUOBS_REPORT_DIR="$out"  # reports the tests write (graphs-40x7.json)
python=${PYTHON:-python3}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${GPUOBS_COMMIT:-unknown}"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "nvcc: $(nvcc --version | tail -1)"
  echo "python: $($python --version 2>&1), torch $($python -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "command: bash tests/gpu/run_gpu_suite.sh $out $*"
} > "$out/environment.txt"
cat "$out/environment.txt"
start=$(date +%s)
if ! bash tests/gpu/install_on_device.sh "$out/build.log"; then
  tail -50 "$out/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
$python -m pytest -v -p no:cacheprovider tests/gpu --junitxml="$out/junit.xml" "$@" 2>&1 | tee "$out/gpu-tests.log"
status=${PIPESTATUS[0]}
$python tests/gpu/summarize.py "$out/junit.xml" "$out/environment.txt" > "$out/summary.md"
tail -40 "$out/summary.md"
# GPUOBS_WALKTHROUGH=1: also record the user guide's walk-through (scripts/gpu_walkthrough.sh)
if [ "${GPUOBS_WALKTHROUGH:-0}" = "1" ]; then
  timeout 180 bash scripts/gpu_walkthrough.sh "$out/walk" | tail -1
fi
# One archive of everything: the device returns a limited number of files per run
rm -f "$out/build.log.gz"; gzip -q "$out/build.log" 2>/dev/null
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "archive: $out.tgz"
exit "$status"
