"""gpuobsctl graphs [--pid PID]: per CUDA graph exec, its nodes, replays and blocks."""

from __future__ import annotations

import argparse

from google.protobuf.json_format import MessageToDict

from gpuobs.daemon.proto.gpuobs.v1 import observer_pb2 as pb

from ..connection import call
from ..output import emit, table

NAME = "graphs"
HELP = "per CUDA graph exec: nodes, replays, node executions, blocks per node and replay"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, action="append", default=[], help="only this process (repeatable)")


def run(args: argparse.Namespace) -> int:
    response = call(args.address, "ListGraphs", pb.ListGraphsRequest(pids=args.pid))
    if args.output == "json":
        emit("json", [MessageToDict(g, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
                      for g in response.graphs])
        return 0
    for graph in response.graphs:
        print(f"pid {graph.pid} graph exec 0x{graph.graph_exec:x}: {len(graph.nodes)} kernel nodes, "
              f"{graph.replays} replays (launch ids {graph.first_launch_id}..{graph.last_launch_id}), "
              f"{graph.node_executions} node executions, {graph.blocks_per_replay} blocks per replay, "
              f"node order {'stable' if graph.order_stable else 'CHANGED between replays'}")
        table([("node", "NODE"), ("executions", "EXECUTIONS"), ("blocks", "BLOCKS/EXEC"), ("grid", "GRID"),
               ("name", "KERNEL")],
              [{"node": f"0x{n.node:x}", "executions": n.executions, "blocks": n.blocks_per_execution,
                "grid": "x".join(map(str, n.grid)), "name": n.name if len(n.name) <= 70 else n.name[:67] + "..."}
               for n in graph.nodes])
        print()
    if not response.graphs:
        print("no CUDA graph launches seen")
    return 0
