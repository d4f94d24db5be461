"""gpuobsctl export-parquet FILE [FILE ...] --out DIR: event files as Parquet tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuobs.recording import RecordingError

from ..connection import CommandError
from ..output import emit

NAME = "export-parquet"
HELP = "convert event files to Parquet tables (events, launches, steps, kernels) for DuckDB, Spark, pandas"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="event files written by `gpuobsctl record` (several hosts' too)")
    parser.add_argument("--out", required=True, help="folder for events.parquet, launches.parquet, ...")


def run(args: argparse.Namespace) -> int:
    from gpuobs.parquet_export import export  # pyarrow loads only for this command

    try:
        rows = export([Path(f) for f in args.files], Path(args.out))
    except (RecordingError, OSError, RuntimeError) as error:
        raise CommandError(str(error)) from None
    if args.output == "json":
        emit("json", {"out": args.out, "rows": rows})
    else:
        print(f"{args.out}: " + ", ".join(f"{name}.parquet {count} rows" for name, count in rows.items()))
    return 0
