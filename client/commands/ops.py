"""gpuobsctl ops: which layer's op launched each kernel (op records of a plugin, launch trace on)."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid, uint32
from ..connection import call
from ..output import emit, message_dict, table

NAME = "ops"
HELP = "framework ops (module path, op, dtypes and shapes) and the kernels each launched"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--top", type=uint32, default=50, help="the N rows with the most launches")


def run(args: argparse.Namespace) -> int:
    response = call(args.address, "ListOps", pb.ListOpsRequest(pids=args.pid, top=args.top))
    if args.output == "json":
        emit("json", message_dict(response))
        return 0
    for total in response.totals:
        print(f"pid {total.pid}: {total.ops} ops recorded, {total.launches_attributed} launches attributed, "
              f"{total.launches_without_op} outside any op of their thread"
              + (f"; {total.nodes_captured} graph nodes captured under an op, {total.nodes_without_op} outside any"
                 if total.nodes_captured or total.nodes_without_op else ""))
    rows = [{"pid": row.pid, "op": row.op, "launches": row.launches, "nodes": row.graph_nodes,
             "executions": row.node_executions, "blocks": row.blocks, "kernel": row.kernel}
            for row in response.ops]
    if rows:
        table([("pid", "PID"), ("launches", "LAUNCHES"), ("nodes", "GRAPH NODES"), ("executions", "NODE RUNS"),
               ("blocks", "BLOCKS"), ("op", "OP"), ("kernel", "KERNEL")], rows)
    elif response.totals:
        print("no ops recorded: a plugin records them through the injector's gpuobs_record_op, while the launch "
              "trace (GPUOBS_LAUNCH_TRACE=1) records the launches they make")
    else:
        print("no observed process")
    return 0
