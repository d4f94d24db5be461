#!/usr/bin/env bash
# Regenerates the Python gRPC code from proto/ (the package gpuobs.api, used by gpuobsd and gpuobsctl;
# committed, so the package installs without grpcio-tools, e.g. on the offline GPU machine), with the
# messages' type stubs (*_pb2.pyi) that mypy reads: a generated module builds its classes at import,
# so without its stub every message is unknown. Each proto file and where its code goes:
#   proto/gpuobs/v1/observer.proto            -> python/gpuobs/api/v1/ (the API, gpuobs.v1.Observer)
#   proto/grpc/reflection/v1/reflection.proto -> python/gpuobs/api/reflection/v1/ (reflection v1,
#     which grpcio-reflection lacks: daemon/reflection.py)
# Use grpcio-tools 1.62 (protobuf 4.25 gencode): its code carries no runtime version gate and
# loads under the protobuf 5-7 runtimes of the CPU and GPU machines:
#   python3 -m venv /tmp/gt && /tmp/gt/bin/pip install grpcio-tools==1.62.3 && PYTHON=/tmp/gt/bin/python ...
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# generate PROTO_DIR NAME PACKAGE_DIR: proto/PROTO_DIR/NAME.proto into python/gpuobs/api/PACKAGE_DIR/,
# with the generated imports, absolute to the proto path, made the package's.
generate() {
  local proto_dir=$1 name=$2 package_dir=$3
  # -Iproto keeps the descriptor's file name PROTO_DIR/NAME.proto (what reflection serves)
  $python -m grpc_tools.protoc -Iproto --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    "proto/$proto_dir/$name.proto"
  cp "$out/$proto_dir/${name}_pb2.py" "$out/$proto_dir/${name}_pb2.pyi" "$out/$proto_dir/${name}_pb2_grpc.py" \
    "python/gpuobs/api/$package_dir/"
  local module=${proto_dir//\//.} package=gpuobs.api.${package_dir//\//.}
  sed -i "s/^from ${module//./\\.} import ${name}_pb2/from $package import ${name}_pb2/" \
    "python/gpuobs/api/$package_dir/${name}_pb2_grpc.py"
}

generate gpuobs/v1 observer v1
generate grpc/reflection/v1 reflection reflection/v1
