"""gpuobs.api.reflection: the Python code generated from proto/grpc/reflection/ (gRPC server
reflection under the package names that grpcio-reflection does not serve)."""
