import ctypes, json, os, sys
import torch
from gpuobs.injector_functions import InjectorAnnotations
from gpuobs.op_recorder import recording_ops

cuda = ctypes.CDLL("libcuda.so.1")

def capture_graph(stream):
    status, graph, ident = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    r = cuda.cuStreamGetCaptureInfo_v3(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(ident),
                                       ctypes.byref(graph), None, None, None)
    return r, status.value, ident.value, graph.value

model = torch.nn.Sequential(torch.nn.Linear(1024, 2048, bias=False), torch.nn.SiLU()).cuda().to(torch.bfloat16)
x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
out = {"calls": []}
with torch.inference_mode():
    model(x); torch.cuda.synchronize()
    notes = InjectorAnnotations(os.environ["CUDA_INJECTION64_PATH"])
    def record(label):
        out["calls"].append(["op", label, notes.record_op(label)])
    def capture(stream):
        info = capture_graph(stream)
        rc = notes.record_capture(stream)
        out["calls"].append(["capture", stream, rc, list(info)])
    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        graph = torch.cuda.CUDAGraph()
    with recording_ops(record, model, capture), torch.cuda.graph(graph):
        model(x)
    if hasattr(graph, "instantiate"):
        try:
            graph.instantiate()
        except Exception as e:
            out["instantiate"] = repr(e)
    for name in ("raw_cuda_graph", "raw_cuda_graph_exec"):
        try:
            out[name] = int(getattr(graph, name)())
        except Exception as e:
            out[name] = repr(e)
    torch.cuda.synchronize()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
out["functions"] = sorted(notes._functions or {})
print(json.dumps(out))
