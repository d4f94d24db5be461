"""gpuobsctl export-parquet FILE [FILE ...] --out DIR: event files as Parquet tables."""

from __future__ import annotations

import argparse

from ..exporting import add_export_arguments, export_files
from ..output import emit

NAME = "export-parquet"
HELP = "convert event files to Parquet tables (events, launches, steps, ops, kernels) for DuckDB, Spark, pandas"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_export_arguments(
        parser, "folder for events.parquet, launches.parquet, steps.parquet, ops.parquet, kernels.parquet"
    )


def run(args: argparse.Namespace) -> int:
    rows = export_files("gpuobs.parquet_export", args.files, args.out)
    if args.output == "json":
        emit("json", {"out": args.out, "rows": rows})
    else:
        print(f"{args.out}: " + ", ".join(f"{name}.parquet {count} rows" for name, count in rows.items()))
    return 0
