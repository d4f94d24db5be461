"""gpuobsctl ops: which layer's op launched each kernel (op records of a plugin, launch trace on);
gpuobsctl ops --record-steps N: open a window of N engine steps in which they are recorded."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import acknowledgement_timeout, pid, uint32
from ..connection import UsageError, call
from ..output import emit, message_dict, table
from .set_mode import acknowledgements

NAME = "ops"
HELP = "framework ops (module path, op, dtypes and shapes) and the kernels each launched"
EXAMPLES = """examples:
  gpuobsctl ops --top 30
  gpuobsctl ops --record-steps 8 --rank 0     # record the op labels of 8 steps"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--top", type=uint32, default=50, help="the N rows with the most launches")
    parser.add_argument(
        "--record-steps",
        type=uint32,
        metavar="N",
        help="record the ops of the next N engine steps of the selected processes (their plugin "
        "records them, the launch trace on for those steps only), then show them with ops",
    )
    parser.add_argument(
        "--rank",
        type=uint32,
        action="append",
        default=[],
        help="with --record-steps: also the processes of this rank (repeatable)",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        default=[],
        help="with --record-steps: also the processes on this GPU, UUID or PCI bus id (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=acknowledgement_timeout,
        default=2.0,
        help="with --record-steps: how long to wait for acknowledgements (500ms, 2s)",
    )


def run(args: argparse.Namespace) -> int:
    if args.record_steps is not None:
        return open_window(args)
    if args.rank or args.gpu:
        raise UsageError("--rank and --gpu select where --record-steps opens a window; ops shows processes by --pid")
    response = call(args.address, "ListOps", pb.ListOpsRequest(pids=args.pid, top=args.top))
    if args.output == "json":
        data = message_dict(response)
        for row, row_data in zip(response.ops, data["ops"]):
            row_data["share"] = row.share if row.HasField("share") else None  # null, not absent, when untimed
        emit("json", data)
        return 0
    for total in response.totals:
        print(
            f"pid {total.pid}: {total.ops} ops recorded, {total.launches_attributed} launches attributed, "
            f"{total.launches_without_op} outside any op of their thread"
            + (
                f"; {total.nodes_captured} graph nodes captured under an op, {total.nodes_without_op} outside any"
                if total.nodes_captured or total.nodes_without_op
                else ""
            )
            + device_text(total)
        )
    rows = [
        {
            "pid": row.pid,
            "op": row.op,
            "launches": row.launches,
            "nodes": row.graph_nodes,
            "executions": row.node_executions,
            "blocks": row.blocks,
            "kernel": row.kernel,
            "device": f"{row.device_ns / 1000:.1f}" if row.timed else "-",
            "timed": row.timed,
            "share": f"{100 * row.share:.1f}%" if row.HasField("share") else "-",
        }
        for row in response.ops
    ]
    if rows:
        table(
            [
                ("pid", "PID"),
                ("launches", "LAUNCHES"),
                ("nodes", "GRAPH NODES"),
                ("executions", "NODE RUNS"),
                ("blocks", "BLOCKS"),
                ("device", "DEVICE us"),
                ("timed", "TIMED"),
                ("share", "SHARE"),
                ("op", "OP"),
                ("kernel", "KERNEL"),
            ],
            rows,
        )
    elif response.totals:
        print(
            "no ops recorded: `gpuobsctl ops --record-steps N` asks a serving engine's plugin to record the "
            "ops of its next N steps (and the launches they make); a plain PyTorch program records them with "
            "gpuobs.op_recorder and GPUOBS_LAUNCH_TRACE=1"
        )
    else:
        print("no observed process")
    return 0


def device_text(total: pb.OpTotals) -> str:
    """The process's device time timed (blocks mode), what the rows' shares are of; empty
    without any."""
    if not total.timed and not total.partial:
        return ""
    return f"; {total.device_ns / 1000:.1f} us of device time over {total.timed} launches and node runs timed" + (
        f", {total.partial} with block events missing (not timed)" if total.partial else ""
    )


def open_window(args: argparse.Namespace) -> int:
    """Asks gpuobsd for an op window in the selected processes; fails unless each acknowledged."""
    request = pb.OpenOpsWindowRequest(
        steps=args.record_steps, pids=args.pid, ranks=args.rank, gpus=args.gpu, timeout_ms=int(args.timeout * 1000)
    )
    return acknowledgements(
        call(args.address, "OpenOpsWindow", request, timeout=args.timeout + 5), args.output, "open the window"
    )
