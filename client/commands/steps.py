"""gpuobsctl steps: a serving engine's steps (vLLM plugin), their requests, replays and blocks."""

from __future__ import annotations

import argparse


from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid, uint32, uint64
from ..connection import all_pages
from ..output import emit, message_dict, table

NAME = "steps"
HELP = "engine steps (vLLM plugin): requests and tokens, the graph replays and blocks of each step"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--last", type=uint32, default=20, help="the last N steps of each process")
    parser.add_argument("--replay", type=uint64, default=None,
                        help="only the step that launched this replay number (as `graphs` and events show it)")


def short_ids(ids: list[str], complete: bool) -> str:
    text = ",".join(ids[:3]) + (f",+{len(ids) - 3}" if len(ids) > 3 else "")
    return (text or "-") + ("" if complete else " (incomplete)")


def run(args: argparse.Namespace) -> int:
    request = pb.ListStepsRequest(pids=args.pid, last=args.last)
    if args.replay is not None:
        request.replay = args.replay
    response = all_pages(args.address, "ListSteps", request, "steps")
    if args.output == "json":
        emit("json", message_dict(response))
        return 0
    for total in response.totals:
        print(f"pid {total.pid}: {total.steps} steps recorded, {total.launches_before_steps} recorded kernel "
              f"launches before the first step")
    rows = []
    for step in response.steps:
        replays = " ".join(f"{r.replay}({r.nodes_matched}/{r.node_executions} matched, {r.blocks_observed} blocks)"
                           if r.node_executions else str(r.replay) for r in step.replays)
        rows.append({"pid": step.pid, "step": step.step, "requests": step.requests, "tokens": step.tokens,
                     "launches": step.kernel_launches, "blocks": step.blocks_expected, "replays": replays or "-",
                     "ids": short_ids(list(step.request_ids), step.request_ids_complete)})
    if rows:
        table([("pid", "PID"), ("step", "STEP"), ("requests", "REQS"), ("tokens", "TOKENS"),
               ("launches", "LAUNCHES"), ("blocks", "BLOCKS"), ("replays", "REPLAYS"), ("ids", "REQUEST IDS")], rows)
    elif not response.totals:
        print("no observed process")
    else:
        print("no engine steps recorded (is the gpuobs vLLM plugin installed beside vLLM?)")
    return 0
