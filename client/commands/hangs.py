"""gpuobsctl hangs [--min-age-ms N] [--pid PID]: blocks that entered and have not exited.

Hang evidence needs block exits hooked (a process started with GPUOBS_BLOCK_EXIT=1): the kernels
whose blocks in flight have had no exit for the age come from the device's counts, in every mode
and whatever the daemon analysed; which launch and which blocks from the block events (blocks or
sampled mode), where the daemon analysed them. The command says which processes cannot tell (no
exit hooks) and what was not analysed; it never says "none" for what it did not look at.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid, uint32
from ..connection import all_pages
from ..output import emit, fit, message_dict, table

NAME = "hangs"
HELP = "launches whose blocks entered and have not exited (which kernel, which blocks, SMs, since when)"
EXAMPLES = """examples:
  gpuobsctl hangs
  gpuobsctl hangs --min-age-ms 2000 --pid 4242"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min-age-ms", type=uint32, default=1000, help="only blocks in flight this long (default 1000)"
    )
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")


def block_ranges(blocks: Iterable[pb.BlockIndex]) -> str:
    """Block indices, runs of consecutive x compressed: 0-5, 9 (y and z shown when not 0)."""
    parts: list[str] = []
    run_start = previous = None
    for block in blocks:
        if block.y or block.z:
            parts.append(f"({block.x},{block.y},{block.z})")
            continue
        if previous is not None and block.x == previous + 1:
            previous = block.x
            continue
        if run_start is not None:
            parts.append(f"{run_start}-{previous}" if previous != run_start else str(run_start))
        run_start = previous = block.x
    if run_start is not None:
        parts.append(f"{run_start}-{previous}" if previous != run_start else str(run_start))
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    response = all_pages(
        args.address, "ListHangs", pb.ListHangsRequest(pids=args.pid, min_age_ms=max(0, args.min_age_ms)), "launches"
    )
    launches = sorted(response.launches, key=lambda h: -h.age_ns)  # the oldest first
    if args.output == "json":
        emit(
            "json",
            {
                "launches": [message_dict(h) for h in launches],
                "processes": [message_dict(p) for p in response.processes],
            },
        )
        return 0
    blind = [p.pid for p in response.processes if p.alive and not p.exits_hooked]
    stalled = [(p.pid, k) for p in response.processes if p.alive for k in p.stalled]
    if stalled:  # from counts: what no budget or drop can hide
        table(
            [("pid", "PID"), ("no_exit", "NO EXIT FOR s"), ("blocks", "BLOCKS IN FLIGHT"), ("kernel", "KERNEL")],
            [
                {
                    "pid": pid,
                    "no_exit": f"{k.no_exit_ns / 1e9:.2f}",
                    "blocks": k.blocks_in_flight,
                    "kernel": fit(k.kernel, 70),
                }
                for pid, k in sorted(stalled, key=lambda item: -item[1].no_exit_ns)
            ],
        )
        print()
    if launches:
        table(
            [
                ("pid", "PID"),
                ("age", "AGE s"),
                ("blocks", "IN FLIGHT"),
                ("which", "BLOCKS"),
                ("sms", "SMS"),
                ("where", "LAUNCH"),
                ("kernel", "KERNEL"),
            ],
            [
                {
                    "pid": h.pid,
                    "age": f"{h.age_ns / 1e9:.2f}",
                    "blocks": h.block_count,
                    "which": block_ranges(h.blocks),
                    "sms": ",".join(map(str, h.sms[:16])) + ("..." if len(h.sms) > 16 else ""),
                    "where": (f"graph 0x{h.graph_exec:x} replay {h.replay}" if h.graph_exec else f"grid id {h.grid_id}")
                    + (
                        f" ({h.kernel_events_dropped} events of this kernel dropped)" if h.kernel_events_dropped else ""
                    ),
                    "kernel": fit(h.kernel, 60),
                }
                for h in launches
            ],
        )
    elif stalled:
        print(
            "which launch and blocks: not in the block events the daemon holds (dropped, not analysed, or not "
            "recorded in this mode)"
        )
    unlooked = [
        p for p in response.processes if p.alive and p.exits_hooked and not p.exits_counted and p.events_unanalysed
    ]
    if not launches and not stalled and not unlooked:
        print(f"no blocks in flight for {args.min_age_ms} ms or more" + (" in the other processes" if blind else ""))
    for process in response.processes:
        if process.alive and process.exits_hooked and process.events_unanalysed:
            print(
                f"pid {process.pid}: {process.events_unanalysed} block events not analysed (gpuobsd's analysis "
                f"share was spent): launches and blocks in flight may be missing above"
                + ("" if process.exits_counted else ", and this producer counts no exits to tell otherwise")
            )
    if blind:
        print(
            f"cannot tell for pid {', '.join(map(str, blind))}: started without GPUOBS_BLOCK_EXIT=1 "
            "(block exits not recorded)"
        )
    return 0
