"""gpuobsctl export-trace FILE [FILE ...] --out TRACE.pftrace: event files as one Perfetto trace."""

from __future__ import annotations

import argparse

from ..exporting import add_export_arguments, export_files
from ..output import emit

NAME = "export-trace"
HELP = "convert event files to one trace the Perfetto UI opens (no daemon needed)"
EXAMPLES = """examples:
  gpuobsctl export-trace /tmp/run*.gpuobs --out /tmp/run.pftrace    # what record wrote"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_export_arguments(parser, "Perfetto trace to write (.pftrace)")


def run(args: argparse.Namespace) -> int:
    count = export_files("gpuobs.trace_export", args.files, args.out)
    if args.output == "json":
        emit("json", {"out": str(args.out), "slices": count})
    else:
        print(f"{args.out}: {count} slices")
    return 0
