"""PyTorch work whose kernels gpuobs must count exactly: a cuBLAS bf16 matmul, elementwise ops,
a Triton kernel, and (with --graph) the same step captured into a CUDA graph and replayed.

Prints one JSON line: a checksum of every output (to compare runs with and without the
injector) and, with --profile, the kernels torch.profiler saw (name, grid, block) as an
independent oracle for launches and blocks. With --step-aside the injector is asked to
unsubscribe first (tests/gpu/test_profiler_coexistence.py: what a profiler then records).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * 3.0 + y, mask=mask)


def step(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> list[torch.Tensor]:
    c = a @ b  # cuBLAS
    d = torch.nn.functional.silu(x) * y  # elementwise
    scale_add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return [c, d, out]


def digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--graph", action="store_true", help="capture the step and replay it")
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--notice",
        action="store_true",
        help="install gpuobs's profiler notice first (gpuobs.profiler_notice.install_here)",
    )
    parser.add_argument(
        "--step-aside",
        action="store_true",
        help="before profiling, ask the injector to unsubscribe so that CUPTI can attach",
    )
    args = parser.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    a = torch.randn(1024, 2048, device=dev, dtype=torch.bfloat16)
    b = torch.randn(2048, 512, device=dev, dtype=torch.bfloat16)
    x = torch.randn(1 << 20, device=dev)
    y = torch.randn(1 << 20, device=dev)
    out = torch.empty_like(x)
    step(a, b, x, y, out)  # warm up: module loads, Triton compile, cuBLAS handle
    torch.cuda.synchronize()

    result: dict = {}
    if args.graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step(a, b, x, y, out)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = step(a, b, x, y, out)
        torch.cuda.synchronize()
        for _ in range(args.replays):
            graph.replay()
        torch.cuda.synchronize()
        result["replays"] = args.replays
    elif args.profile:
        from torch.profiler import ProfilerActivity, profile

        if args.notice:
            import gpuobs.profiler_notice

            result["notice_installed"] = gpuobs.profiler_notice.install_here()
        if args.step_aside:
            import ctypes
            import os

            injector = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])  # the loaded one: same path
            result["step_aside_rc"] = injector.gpuobs_step_aside()

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.iters):
                outputs = step(a, b, x, y, out)
            torch.cuda.synchronize()
        kernels = []
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernels.append({"name": event.name})
        trace = []
        import os
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                data = json.load(f)
        for entry in data.get("traceEvents", []):
            if entry.get("cat") == "kernel":
                args_ = entry.get("args", {})
                trace.append({"name": entry["name"], "grid": args_.get("grid"), "block": args_.get("block")})
        result["profiler_kernels"] = trace
    else:
        for _ in range(args.iters):
            outputs = step(a, b, x, y, out)
        torch.cuda.synchronize()
    result["checksum"] = digest(outputs)
    result["iters"] = args.iters
    time.sleep(0.1)  # let the tool publish its counters
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
