"""gpuobsctl kernels [--top N] [--pid PID] [--kernel-id ID]"""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import kernel_id, pid, uint32
from ..connection import call, every_kernel
from ..output import emit, fit, message_dict, table

NAME = "kernels"
HELP = "per-kernel launches, blocks, accesses and events"
EXAMPLES = """examples:
  gpuobsctl kernels --top 20
  gpuobsctl kernels --pid 4242 --kernel-id 237af43c39d4 --wide"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top", type=uint32, default=20, help="most launched first; 0 for all")
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument(
        "--kernel-id",
        type=kernel_id,
        action="append",
        default=[],
        help="only the kernel of this kernel_id (a metric series' label; repeatable): its full name, in every process",
    )


def shape_text(kernel: pb.Kernel) -> str:
    """The most launched (grid, block) shape, and how many others there were."""
    if not kernel.shapes:
        return "-"
    top = kernel.shapes[0]
    text = f"{'x'.join(map(str, top.grid))}/{'x'.join(map(str, top.block))}"
    others = len(kernel.shapes) - 1 + (1 if kernel.other_shape_launches else 0)
    return f"{text} +{others}" if others else text


def duration_text(durations: pb.BlockDurations) -> str:
    """p50/p99 in us; `*` where some of the kernel's block events were not analysed."""
    mark = "*" if durations.unanalysed else ""
    if not durations.count:
        return "-" + mark
    return f"{durations.p50_ns / 1000:.1f}/{durations.p99_ns / 1000:.1f}{mark}"


def ranks_by_pid(address: str) -> dict[int, int]:
    """The rank of each process whose identity is set (from the status): empty when none says,
    and then the table has no RANK column, as for a process that is not part of a job."""
    return {p.pid: p.rank for p in call(address, "GetStatus", pb.GetStatusRequest()).processes if p.identity_set}


def run(args: argparse.Namespace) -> int:
    if args.top > 0 and not args.kernel_id:
        kernels = list(call(args.address, "ListKernels", pb.ListKernelsRequest(pids=args.pid, top=args.top)).kernels)
    else:  # every kernel (those of the ids asked for): page by page, then most launched first as with --top
        kernels = sorted(
            (k for k in every_kernel(args.address, args.pid) if not args.kernel_id or k.kernel_id in args.kernel_id),
            key=lambda k: (-k.launches, k.pid, k.slot),
        )
        if args.kernel_id and args.top:
            kernels = kernels[: args.top]
    if args.output == "json":
        emit("json", {"kernels": [message_dict(k) for k in kernels]})
        return 0
    ranks = ranks_by_pid(args.address)
    rows = [
        {
            "pid": k.pid,
            "rank": ranks.get(k.pid, "-"),
            "launches": k.launches,
            "graph": k.graph_launches,
            "blocks": k.blocks_observed,
            "expected": k.blocks_expected,
            "unpatched": k.blocks_unpatched + k.blocks_unobserved,
            "accesses": k.memory_accesses,
            "events": k.events_delivered,
            "dropped": k.events_dropped,
            "shape": shape_text(k),
            "duration": duration_text(k.block_durations),
            "records": k.records or "-",
            "kernel_id": k.kernel_id,
            # asked for by id: the full name (what the id resolves), else one a line
            "name": k.name if args.kernel_id else fit(k.name, 60),
        }
        for k in kernels
    ]
    table(
        [
            ("pid", "PID"),
            *([("rank", "RANK")] if ranks else []),
            ("launches", "LAUNCHES"),
            ("graph", "IN GRAPHS"),
            ("blocks", "BLOCKS"),
            ("expected", "EXPECTED"),
            ("unpatched", "UNCOUNTED"),
            ("accesses", "ACCESSES"),
            ("events", "EVENTS"),
            ("dropped", "DROPPED"),
            ("records", "RECORDS"),
            ("shape", "GRID/BLOCK"),
            ("duration", "BLOCK us p50/p99"),
            ("kernel_id", "KERNEL_ID"),
            ("name", "KERNEL"),
        ],
        rows,
    )
    if any(k.block_durations.unanalysed for k in kernels):
        print(
            "* some of its block events were not analysed (gpuobsd's analysis share was spent): durations from the rest"
        )
    return 0
