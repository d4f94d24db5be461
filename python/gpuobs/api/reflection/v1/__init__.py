"""grpc.reflection.v1: reflection_pb2 (messages) and reflection_pb2_grpc (the ServerReflection
stub and servicer), the v1alpha protocol under its stable name (daemon/reflection.py serves it)."""
