#!/usr/bin/env bash
# Regenerates python/gpuobs/_native.pyi, the type stub mypy reads for the compiled module
# gpuobs._native (a compiled module has no source to check its callers against): mypy's stubgen
# writes it from the signatures pybind11 puts in the docstrings of the module built into .venv.
# Run it after scripts/setup.sh whenever segment/native/bindings.cpp changes what it binds;
# tests/segment/test_native_stub.py fails while the committed stub and the built module differ.
# An argument writes the stub into that folder instead (what the test does).
set -euo pipefail
out=$(cd "${1:-$(dirname "$0")/../python/gpuobs}" && pwd)
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# (mypy is compiled: its stubgen runs from its main, not with -m)
"$python" -c "from mypy.stubgen import main; main()" --quiet -m gpuobs._native -o "$work"
# The one edit: a numpy array goes wherever pybind11 takes a buffer (typing_extensions.Buffer),
# and numpy's stubs give ndarray the buffer protocol (__buffer__) only from Python 3.12 on.
sed -e 's/typing_extensions\.Buffer/typing_extensions.Buffer | numpy.ndarray/g' -e '1i import numpy' \
  "$work/gpuobs/_native.pyi" >"$out/_native.pyi"
