#!/usr/bin/env bash
# Sets up gpuobs on a fresh machine: a virtual environment in .venv with the package, its
# native parts (reader, gpuobs-synth) and, where nvcc is found, the injector and its patches.
# Without nvcc it builds daemon-only and says so, since the demo needs no injector;
# GPUOBS_REQUIRE_INJECTOR=1 turns that into the build's error instead (CI sets it).
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
# Where cmake/injector.cmake looks for nvcc: $CUDA_HOME/bin (/usr/local/cuda/bin without it), PATH.
has_nvcc() {
  [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || command -v nvcc >/dev/null
}
# Passed every time, ON or OFF: the build directory's CMake cache would keep an earlier value.
daemon_only=OFF
if [ "${GPUOBS_DAEMON_ONLY:-0}" = "1" ]; then
  daemon_only=ON  # asked for
elif [ "${GPUOBS_REQUIRE_INJECTOR:-0}" != "1" ] && ! has_nvcc; then
  daemon_only=ON
  echo "scripts/setup.sh: no nvcc found (CUDA_HOME/bin, /usr/local/cuda/bin, PATH): building without the injector," \
    "enough for the demo and the CPU tests (README, \"Install\", says how to add it)"
fi
# GPUOBS_BENCH_TOOLS=1 adds the benchmarks' floor tool and diagnostic patches (never for a service).
bench_tools=$([ "${GPUOBS_BENCH_TOOLS:-0}" = "1" ] && echo ON || echo OFF)
.venv/bin/python -m pip install -q --no-build-isolation -C cmake.define.GPUOBS_DAEMON_ONLY=$daemon_only \
  -C cmake.define.GPUOBS_BENCH_TOOLS=$bench_tools -C build-dir=build/{wheel_tag} ".[test]"
# The helpers the tests and bench/ share (gpuobs_testing), from the repository: not in the wheel.
.venv/bin/python -m pip install -q --no-build-isolation --no-deps ./tests/support
if [ "$daemon_only" = ON ]; then
  echo "gpuobs installed in .venv, without the injector"
else
  echo "gpuobs installed in .venv"
fi
