#!/usr/bin/env bash
# Regenerates the Python gRPC code from proto/ into daemon/proto/ (committed, so the package
# installs without grpcio-tools, e.g. on the offline GPU machine).
# Use grpcio-tools 1.62 (protobuf 4.25 gencode): its code carries no runtime version gate and
# loads under the protobuf 5-7 runtimes of the CPU and GPU machines:
#   python3 -m venv /tmp/gt && /tmp/gt/bin/pip install grpcio-tools==1.62.3 && PYTHON=/tmp/gt/bin/python ...
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
$python -m grpc_tools.protoc -Iproto --python_out=daemon/proto --grpc_python_out=daemon/proto \
  proto/gpuobs/v1/observer.proto
# Generated imports are absolute to the proto path: make them package-relative.
sed -i 's/^from gpuobs.v1 import observer_pb2/from gpuobs.daemon.proto.gpuobs.v1 import observer_pb2/' \
  daemon/proto/gpuobs/v1/observer_pb2_grpc.py
