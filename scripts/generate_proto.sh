#!/usr/bin/env bash
# Regenerates the Python gRPC code from proto/ into python/gpuobs/api/v1/ (the package gpuobs.api.v1, used by
# gpuobsd and gpuobsctl; committed, so the package installs without grpcio-tools, e.g. on the
# offline GPU machine), with the messages' type stub (observer_pb2.pyi) that mypy reads: the
# generated module builds its classes at import, so without the stub every message is unknown.
# Use grpcio-tools 1.62 (protobuf 4.25 gencode): its code carries no runtime version gate and
# loads under the protobuf 5-7 runtimes of the CPU and GPU machines:
#   python3 -m venv /tmp/gt && /tmp/gt/bin/pip install grpcio-tools==1.62.3 && PYTHON=/tmp/gt/bin/python ...
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -Iproto keeps the descriptor's file name gpuobs/v1/observer.proto (what reflection serves)
$python -m grpc_tools.protoc -Iproto --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  proto/gpuobs/v1/observer.proto
cp "$out"/gpuobs/v1/observer_pb2.py "$out"/gpuobs/v1/observer_pb2.pyi "$out"/gpuobs/v1/observer_pb2_grpc.py \
  python/gpuobs/api/v1/
# Generated imports are absolute to the proto path: make them the package's.
sed -i 's/^from gpuobs.v1 import observer_pb2/from gpuobs.api.v1 import observer_pb2/' python/gpuobs/api/v1/observer_pb2_grpc.py
