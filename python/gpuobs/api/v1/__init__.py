"""gpuobs.v1: observer_pb2 (messages) and observer_pb2_grpc (the Observer stub and servicer)."""
