"""A small module tree (two layers of up projection, silu, down projection and a residual add, in
bf16) run under the op recorder (gpuobs.op_recorder) with the injector's launch trace on: the
segment gets an op record before each op and an eager launch record per kernel, which the op
attribution joins (tests/gpu/test_ops_gpu.py). With --graph N the forward is captured into a CUDA
graph under the recorder instead (each op reports the nodes it added) and replayed N times.
Prints one JSON line: the labels recorded (and the replays)."""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from gpuobs.injector_functions import InjectorAnnotations
from gpuobs.op_recorder import recording_ops


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up_proj = torch.nn.Linear(1024, 2048, bias=False)
        self.down_proj = torch.nn.Linear(2048, 1024, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.up_proj(x)))


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--graph", type=int, default=0, help="capture the forward and replay it this many times")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(Layer(), Layer()).cuda().to(torch.bfloat16)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        model(x)  # warm up: module loads, cuBLAS handle
        torch.cuda.synchronize()
        notes = InjectorAnnotations(os.environ["CUDA_INJECTION64_PATH"])
        labels: list[str] = []

        def record(label: str) -> None:
            labels.append(label)
            notes.record_op(label)

        captures: list[int] = []  # what the injector answered each op under capture

        def capture(stream: int) -> None:
            captures.append(notes.record_capture(stream))

        if args.graph:
            graph = torch.cuda.CUDAGraph()
            with recording_ops(record, model, capture), torch.cuda.graph(graph):
                model(x)
            torch.cuda.synchronize()
            for _ in range(args.graph):
                graph.replay()
        else:
            with recording_ops(record, model):
                model(x)
        torch.cuda.synchronize()
    print(json.dumps({"labels": [label for label in labels if label], "replays": args.graph, "captures": captures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
