"""gpuobsctl export-trace FILE [FILE ...] --out TRACE.pftrace: event files as one Perfetto trace."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuobs.recording import RecordingError

from ..connection import CommandError

NAME = "export-trace"
HELP = "convert event files to one trace the Perfetto UI opens (no daemon needed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="event files written by `gpuobsctl record`")
    parser.add_argument("--out", required=True, help="Perfetto trace to write (.pftrace)")


def run(args: argparse.Namespace) -> int:
    from gpuobs.trace_export import export  # the trace builder's protos load only for the commands that write traces

    try:
        count = export([Path(f) for f in args.files], Path(args.out))
    except (RecordingError, OSError) as error:
        raise CommandError(str(error)) from None
    print(f"{args.out}: {count} slices")
    return 0
