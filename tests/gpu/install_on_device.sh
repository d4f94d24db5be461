#!/usr/bin/env bash
# Installs this checkout on the GPU machine (offline): the wheels it lacks (.whl, carried from
# tests/gpu/fetch_wheels.sh), gpuobs built for sm_90 with the benchmark tools (the floor tool and
# the diagnostic patches: a bench build, never the default), and the test helpers from
# tests/support. Output to the log named by $1; exits non-zero on the first failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: install_on_device.sh LOG}
python=${PYTHON:-python3}
: > "$log"
if ls .whl/*.whl >/dev/null 2>&1; then
  $python -m pip install -q --no-index --no-deps .whl/*.whl >> "$log" 2>&1 || exit 1
fi
$python -m pip install -q --no-build-isolation --no-index --no-deps -C cmake.define.GPUOBS_PATCH_ARCHS=90 \
  -C cmake.define.GPUOBS_BENCH_TOOLS=ON . >> "$log" 2>&1 || exit 1
$python -m pip install -q --no-build-isolation --no-index --no-deps ./tests/support >> "$log" 2>&1
