"""gpuobsd: discovers the segments of injected processes, drains them continuously, answers the
gRPC API (`gpuobs.v1.Observer`) and exports Prometheus metrics. Entry point: `main.py`."""
