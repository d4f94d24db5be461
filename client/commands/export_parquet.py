"""gpuobsctl export-parquet FILE [FILE ...] --out DIR: event files added to a Parquet dataset."""

from __future__ import annotations

import argparse

from ..exporting import add_export_arguments, export_files
from ..output import emit

NAME = "export-parquet"
HELP = "add event files to a Hive-partitioned Parquet dataset (DuckDB, Spark, Trino, ClickHouse, Dask)"
EXAMPLES = """examples:
  gpuobsctl export-parquet /tmp/run*.gpuobs --out /tmp/dataset"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_export_arguments(
        parser,
        "dataset folder (made if missing): TABLE/host=H/date=D/process=P/RECORDING.parquet, added, never overwritten",
    )


def run(args: argparse.Namespace) -> int:
    rows = export_files("gpuobs.dataset_writer", args.files, args.out)
    if args.output == "json":
        emit("json", {"out": args.out, "rows": rows})
    else:
        print(f"{args.out}: added " + ", ".join(f"{name} {count} rows" for name, count in rows.items()))
    return 0
