"""PyTorch ops captured into a CUDA graph, each op followed by a look at the capture's leaf nodes
(cuStreamGetCaptureInfo: the nodes the op just added), then the graph replayed. Prints one JSON
line: per op its name and those node handles, and the replays made. What it settles: whether the
node handles known at capture are the ones the injector's node-launch records carry at replay,
i.e. whether a label recorded at capture can name a graph node (tests/gpu/test_op_capture_probe.py)."""

from __future__ import annotations

import ctypes
import json
import sys

import torch


def capture_leaves(stream: int) -> tuple[list[int], int]:
    """Handles of the capture's current leaf nodes on this stream, and the graph being captured
    (the driver API, which has kept these entry points across CUDA 12 and 13)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    status, graph, count = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_size_t()
    identifier = ctypes.c_uint64()
    nodes = ctypes.POINTER(ctypes.c_void_p)()
    if hasattr(cuda, "cuStreamGetCaptureInfo_v3"):
        edges = ctypes.c_void_p()
        result = cuda.cuStreamGetCaptureInfo_v3(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(identifier),
                                                ctypes.byref(graph), ctypes.byref(nodes), ctypes.byref(edges),
                                                ctypes.byref(count))
    else:
        result = cuda.cuStreamGetCaptureInfo_v2(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(identifier),
                                                ctypes.byref(graph), ctypes.byref(nodes), ctypes.byref(count))
    if result != 0:
        raise SystemExit(f"cuStreamGetCaptureInfo: CUresult {result}")
    return [int(nodes[i]) for i in range(count.value)], graph.value


def graph_nodes(graph: int) -> list[int] | str:
    """Every node of the graph being captured so far (cuGraphGetNodes), or the error it gave."""
    cuda = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_size_t(0)
    result = cuda.cuGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(count))
    if result != 0:
        return f"CUresult {result}"
    nodes = (ctypes.c_void_p * max(1, count.value))()
    result = cuda.cuGraphGetNodes(ctypes.c_void_p(graph), nodes, ctypes.byref(count))
    return [int(nodes[i]) for i in range(count.value)] if result == 0 else f"CUresult {result}"


def main() -> int:
    torch.manual_seed(0)
    a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 256, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1 << 16, device="cuda")
    ops = [("aten::mm", lambda: a @ b), ("aten::silu", lambda: torch.nn.functional.silu(x)),
           ("aten::mul", lambda: x * 3.0), ("aten::add", lambda: x + 1.0)]
    for _, op in ops:  # warm up: module loads, cuBLAS handle
        op()
    torch.cuda.synchronize()
    try:  # keep the captured graph: destroyed at instantiation, its node addresses could be reused
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # a torch without the option
        graph = torch.cuda.CUDAGraph()
    seen: list[dict] = []
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream().cuda_stream
        known: set[int] = set()
        for name, op in ops:
            op()
            leaves, captured = capture_leaves(stream)
            everything = graph_nodes(captured)
            added = sorted(set(everything) - known) if isinstance(everything, list) else everything
            known |= set(everything) if isinstance(everything, list) else set()
            seen.append({"op": name, "leaves": leaves, "added": added})
    if hasattr(graph, "instantiate"):
        graph.instantiate()  # kept graphs are instantiated here, not at the end of capture
    torch.cuda.synchronize()
    replays = 3
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    print(json.dumps({"ops": seen, "replays": replays}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
