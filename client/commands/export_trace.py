"""gpuobsctl export-trace FILE --out TRACE.json: an event file as a Chrome/Perfetto trace."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuobs.recording import RecordingError
from gpuobs.trace_export import export

from ..connection import CommandError

NAME = "export-trace"
HELP = "convert an event file to a trace the Perfetto UI opens (no daemon needed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="event file written by `gpuobsctl record`")
    parser.add_argument("--out", required=True, help="trace JSON to write")


def run(args: argparse.Namespace) -> int:
    try:
        count = export(Path(args.file), Path(args.out))
    except (RecordingError, OSError) as error:
        raise CommandError(str(error)) from None
    print(f"{args.out}: {count} trace events")
    return 0
