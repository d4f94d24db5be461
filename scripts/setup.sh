#!/usr/bin/env bash
# Sets up gpuobs on a fresh machine: a virtual environment in .venv with the package, its
# native parts (reader, gpuobs-synth) and, where nvcc is found, the injector and its patches.
# GPUOBS_REQUIRE_INJECTOR=1 turns a missing injector toolchain into an error (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Build requirements installed up front so that the build can see the sanitizer package.
.venv/bin/python -m pip install -q "scikit-build-core>=0.11" "pybind11>=2.13" "numpy>=1.26" \
  "nvidia-cuda-sanitizer-api==13.0.*" "nvidia-cuda-nvdisasm" "pytest>=8" "hypothesis>=6.100"
require=OFF
if [ "${GPUOBS_REQUIRE_INJECTOR:-0}" = "1" ]; then require=ON; fi
.venv/bin/python -m pip install -q --no-build-isolation \
  -C cmake.define.GPUOBS_REQUIRE_INJECTOR=$require -C build-dir=build/{wheel_tag} ".[test]"
echo "gpuobs installed in .venv"
