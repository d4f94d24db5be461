"""cuBLAS bf16 GEMM (4096^3) under whatever tool the environment injects: median ms of --iters."""

import json
import statistics
import sys

import torch


def main() -> int:
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        c = a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        c = a @ b
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    print(json.dumps({"median_ms": statistics.median(times), "checksum": float(c.float().sum().item())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
