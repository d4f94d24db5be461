"""gpuobsctl export-trace FILE [FILE ...] --out TRACE.pftrace: event files as one Perfetto trace."""

from __future__ import annotations

import argparse

from ..exporting import add_export_arguments, export_files

NAME = "export-trace"
HELP = "convert event files to one trace the Perfetto UI opens (no daemon needed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_export_arguments(parser, "Perfetto trace to write (.pftrace)")


def run(args: argparse.Namespace) -> int:
    count = export_files("gpuobs.trace_export", args.files, args.out)
    print(f"{args.out}: {count} slices")
    return 0
