#!/usr/bin/env bash
# Run on the CPU machine before a GPU run: downloads the Python wheels the GPU machine lacks for
# the daemon, the CLI and the trace export (it has grpcio, protobuf, prometheus-client, uvloop and
# numpy, but not these) into .whl/, which `run` carries (carry: [".whl"]) and run_gpu_suite.sh installs offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl structlog perfetto argcomplete "grpcio-health-checking==1.62.3" "grpcio-reflection==1.62.3"
ls -la .whl
