"""gpuobsctl trace --duration S --out TRACE.pftrace [--pid PID]: a window of what the GPU did, as
a Perfetto trace, in one step (record, then export-trace)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid, uint64, window_seconds
from ..connection import CommandError
from ..exporting import export_files
from ..local_recording import record_here, refuse_existing_output
from ..output import emit

NAME = "trace"
HELP = (
    "record a window and write it as one Perfetto trace (kernels per stream and graph exec, the ops that launched "
    "them, blocks per SM, steps)"
)
EXAMPLES = """examples:
  gpuobsctl trace --duration 5s --out /tmp/decode.pftrace    # open it in the Perfetto UI"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration", type=window_seconds, required=True, help="how long to record (30s, 2m; a bare number is seconds)"
    )
    parser.add_argument("--out", required=True, help="Perfetto trace to write (.pftrace)")
    parser.add_argument("--count", type=uint64, default=0, help="stop a process's window after this many events")
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument(
        "--keep-events",
        action="store_true",
        help="keep the event files beside the trace (OUT.events, OUT.events-<pid>)",
    )


def run(args: argparse.Namespace) -> int:
    out = Path(os.path.abspath(args.out))
    if not out.parent.is_dir():
        raise CommandError(f"{out.parent}: no such folder")
    refuse_existing_output(out)  # said before the window is recorded, not after
    # the event files, streamed back by the daemon, beside the trace
    request = pb.RecordRequest(
        path=f"{out}.events", duration_ms=int(args.duration * 1000), max_events=max(0, args.count), pids=args.pid
    )
    recorded = record_here(args.address, Path(request.path), request, timeout=args.duration + 120)
    files = [f.path for f in recorded]
    if not files:
        raise CommandError("no observed process to trace")
    try:
        slices = export_files("gpuobs.trace_export", files, out)
    finally:
        if not args.keep_events:
            for path in files:
                path.unlink(missing_ok=True)
    rows = [{"pid": f.pid, "events": f.events, "launches": f.launches, "dropped": f.dropped} for f in recorded]
    if args.output == "json":
        emit("json", {"trace": str(out), "slices": slices, "processes": rows})
    else:
        print(
            f"{out}: {slices} slices from {len(rows)} process(es), "
            f"{sum(r['events'] for r in rows)} events, {sum(r['dropped'] for r in rows)} dropped"
        )
        for reason in dict.fromkeys(f.stopped for f in recorded if f.stopped):
            print(f"the window was cut short: {reason}")
    return 0
