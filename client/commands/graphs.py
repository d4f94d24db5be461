"""gpuobsctl graphs [--pid PID]: per CUDA graph exec, its nodes, replays and blocks."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid, uint32
from ..connection import every_page
from ..output import emit, fit, message_dict, micros, table

NAME = "graphs"
HELP = "per CUDA graph exec: nodes, replays, node executions, blocks per node and replay"
EXAMPLES = """examples:
  gpuobsctl graphs --replays 4
  gpuobsctl --output json graphs --pid 4242"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument(
        "--replays", type=uint32, default=8, help="the last N replays of each graph in detail (1..1024)"
    )


def run(args: argparse.Namespace) -> int:
    graphs = every_page(args.address, "ListGraphs", pb.ListGraphsRequest(pids=args.pid, replays=args.replays), "graphs")
    if args.output == "json":
        emit("json", {"graphs": [message_dict(g) for g in graphs]})
        return 0
    for graph in graphs:
        print(
            f"pid {graph.pid} graph exec 0x{graph.graph_exec:x}{'' if graph.alive else ' (destroyed)'}: "
            f"{len(graph.nodes)} kernel nodes, {graph.replays} replays (launch ids "
            f"{graph.first_launch_id}..{graph.last_launch_id}), {graph.node_executions} node executions, "
            f"{graph.blocks_per_replay} blocks per replay, node order "
            f"{'stable' if graph.order_stable else 'CHANGED between replays'}"
        )
        sampled = f"{graph.executions_sampled} sampled, " if graph.executions_sampled else ""
        print(
            f"  joined to device events: {graph.executions_matched} matched, {graph.executions_mismatched} "
            f"mismatched, {sampled}{graph.executions_unrecorded} unrecorded, {graph.executions_unjoined} unjoined; "
            f"{graph.events_unmatched} unmatched events"
        )
        table(
            [
                ("position", "#"),
                ("node", "NODE"),
                ("executions", "EXECUTIONS"),
                ("matched", "MATCHED"),
                *([("sampled", "SAMPLED")] if graph.executions_sampled else []),
                ("blocks", "BLOCKS/EXEC"),
                ("grid", "GRID"),
                ("name", "KERNEL"),
            ],
            [
                {
                    "position": n.position,
                    "node": f"0x{n.node:x}",
                    "executions": n.executions,
                    "matched": n.executions_matched,
                    "sampled": n.executions_sampled,
                    "blocks": n.blocks_per_execution,
                    "grid": "x".join(map(str, n.grid)),
                    "name": fit(n.name, 60),
                }
                for n in graph.nodes
            ],
        )
        if graph.recent_replays:
            print()
            table(
                [
                    ("replay", "REPLAY"),
                    ("launch_id", "LAUNCH ID"),
                    ("mode", "MODE"),
                    ("matched", "NODES MATCHED"),
                    ("blocks", "BLOCKS"),
                    ("span", "DEVICE SPAN us"),
                    ("busy", "BUSY us"),
                    ("gap", "GAP us"),
                ],
                [
                    {
                        "replay": r.replay,
                        "launch_id": r.launch_id,
                        "mode": r.mode,
                        "matched": f"{r.nodes_matched}/{r.node_executions}",
                        "blocks": sum(r.node_blocks),
                        "span": micros(r.span_ns) if r.device_start_ns else "-",
                        "busy": micros(r.busy_ns) if r.HasField("busy_ns") else "-",
                        "gap": micros(r.gap_ns) if r.gap_ns else "-",
                    }
                    for r in graph.recent_replays
                ],
            )
        print()
    if not graphs:
        print("no CUDA graph launches seen")
    return 0
