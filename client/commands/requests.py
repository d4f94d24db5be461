"""gpuobsctl requests: GPU time per request (#33), the top requests by device time over the
engine steps each process keeps (each step's device span split by its requests' tokens)."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import number, pid
from ..connection import call
from ..output import emit, message_dict

NAME = "requests"
HELP = "GPU time per request (vLLM plugin): device time, tokens, steps, launches and blocks"
COLUMNS = [
    ("pid", "PID"),
    ("request", "REQUEST"),
    ("device_ms", "DEVICE MS"),
    ("tokens", "TOKENS"),
    ("steps", "STEPS"),
    ("untimed", "UNTIMED"),
    ("launches", "LAUNCHES"),
    ("blocks", "BLOCKS"),
    ("span", "STEPS SEEN"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--top", type=number(1, 100_000), default=20, help="the N requests with the most device time")


def show(address: str, output: str, request: pb.ListRequestsRequest) -> int:
    """One call, printed as a table (or JSON): shared with `gpuobsctl request ID`."""
    response = call(address, "ListRequests", request)
    if output == "json":
        emit("json", message_dict(response))
        return 0
    rows = [
        {
            "pid": r.pid,
            "request": r.request,
            "device_ms": f"{r.device_ns / 1e6:.3f}",
            "tokens": r.tokens,
            "steps": r.steps,
            "untimed": r.steps_untimed,
            "launches": r.kernel_launches,
            "blocks": r.blocks,
            "span": f"{r.first_step}..{r.last_step}",
        }
        for r in response.requests
    ]
    print(f"kept steps' device time split among their requests: {response.steps_device_ns / 1e6:.3f} ms")
    if rows:
        emit("text", None, COLUMNS, rows)
    return 0


def run(args: argparse.Namespace) -> int:
    return show(args.address, args.output, pb.ListRequestsRequest(pids=args.pid, top=args.top))
