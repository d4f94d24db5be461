"""gpuobsctl query DIR (SQL | --canonical NAME): SQL over a gpuobs dataset with DuckDB."""

from __future__ import annotations

import argparse
import datetime
import decimal
from typing import Any

from gpuobs.dataset_query import CANONICAL

from ..connection import CommandError, UsageError
from ..output import emit, table

NAME = "query"
HELP = "run SQL over a Parquet dataset that export-parquet wrote (DuckDB; a view per table)"
EXAMPLES = """examples:
  gpuobsctl query /tmp/dataset --canonical kernel-time
  gpuobsctl query /tmp/dataset 'SELECT count(*) FROM events'"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="the dataset folder (export-parquet --out)")
    parser.add_argument(
        "sql",
        nargs="?",
        help="one SQL statement over the views recordings, events, launches, steps, ops, kernels, clocks",
    )
    parser.add_argument(
        "--canonical", choices=sorted(CANONICAL), help="one of the queries docs/parquet.md explains, instead of SQL"
    )


def _plain(value: Any) -> Any:
    """A DuckDB value as JSON holds it: integers as numbers (128-bit sums too), dates as text."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.date | datetime.datetime | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def run(args: argparse.Namespace) -> int:
    if (args.sql is None) == (args.canonical is None):
        raise UsageError("give either SQL or --canonical NAME")
    from pathlib import Path

    from gpuobs.dataset_query import query
    from gpuobs.dataset_writer import DatasetError

    try:
        columns, rows = query(Path(args.dataset), CANONICAL[args.canonical] if args.canonical else args.sql)
    except (DatasetError, OSError) as error:
        raise CommandError(str(error)) from None
    records = [dict(zip(columns, (_plain(value) for value in row))) for row in rows]
    if args.output == "json":
        emit("json", {"columns": columns, "rows": records})
    else:
        table(
            [(name, name) for name in columns], [{k: "NULL" if v is None else v for k, v in r.items()} for r in records]
        )
    return 0
