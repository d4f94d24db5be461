"""gpuobsctl record PATH [--duration S] [--count N] [--pid PID] [--on-daemon]: events, launches and
kernel names to event files, written where gpuobsctl runs (streamed back by the daemon), or by the
daemon where it runs."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import MAX_RECORD_S, pid, record_seconds, uint64
from ..connection import call
from ..local_recording import record_here
from ..output import emit, table

NAME = "record"
HELP = "record events, launches and kernel names to event files (one per process)"
EXAMPLES = """examples:
  gpuobsctl record /tmp/run.gpuobs --duration 30s
  gpuobsctl record /var/tmp/x.gpuobs --on-daemon --count 1000000 --pid 4242"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="output file, written here (several processes: PATH-<pid>)")
    parser.add_argument(
        "--on-daemon",
        action="store_true",
        help="the daemon writes PATH on its own machine and file system (with its permissions)",
    )
    parser.add_argument(
        "--duration",
        type=record_seconds,
        default=0.0,
        help="how long to record (30s, 2m, 1h; a bare number is seconds; 0: until --count events)",
    )
    parser.add_argument("--count", type=uint64, default=0, help="events to record per process")
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")


def run(args: argparse.Namespace) -> int:
    request = pb.RecordRequest(
        path=os.path.abspath(args.path),
        duration_ms=int(args.duration * 1000),
        max_events=max(0, args.count),
        pids=args.pid,
    )
    window = args.duration or MAX_RECORD_S  # by count alone: as long as the daemon may record
    if args.on_daemon:
        files = call(args.address, "Record", request, timeout=window + 30).files
    else:  # streamed back and written here, with this user's permissions
        files = record_here(args.address, Path(request.path), request, timeout=window + 120)
    rows = [
        {
            "pid": f.pid,
            "path": str(f.path),
            "events": f.events,
            "launches": f.launches,
            "dropped": f.dropped,
            "stopped": f.stopped,
        }
        for f in files
    ]
    if args.output == "json":
        emit("json", {"files": rows})
    else:
        table(
            [("pid", "PID"), ("events", "EVENTS"), ("launches", "LAUNCHES"), ("dropped", "DROPPED"), ("path", "FILE")],
            rows,
        )
        for reason in dict.fromkeys(f.stopped for f in files if f.stopped):
            print(f"the recording ended early: {reason}; what it wrote is kept")
    return 0
