"""SQL over a gpuobs dataset with DuckDB, the embedded engine (gpuobsctl query): a view per table
over its files, with the partition columns (host, date, process) as columns; and the canonical
queries docs/parquet.md shows, which CI also runs on Dask's distributed engine over the same
files and holds to the same answers (tests/daemon/test_dataset_engines.py).

The views list the files themselves (walked without following links; hidden files, such as an
export's files being written, left out), so a dataset's path needs no glob quoting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuobs.dataset_tables import TABLES
from gpuobs.dataset_writer import DatasetError, check_root
from gpuobs.trusted_folder import files_below

PARTITION_TYPES = "{'host': 'VARCHAR', 'date': 'DATE', 'process': 'VARCHAR'}"

# The questions a fleet's dataset is for, each one query (docs/parquet.md explains them).
CANONICAL: dict[str, str] = {
    # device time per kernel per model, across hosts: each kernel execution (a launch, or one
    # replay of a graph node) from its first event to its last
    "kernel-time": """
WITH executions AS (
  SELECT recording, kernel_slot, grid_id, replay, max(globaltimer_ns) - min(globaltimer_ns) AS span_ns
  FROM events
  GROUP BY recording, kernel_slot, grid_id, replay
)
SELECT r.model, k.name AS kernel, count(*) AS executions, sum(x.span_ns) AS device_ns
FROM executions x
JOIN kernels k USING (recording, kernel_slot)
JOIN recordings r USING (recording)
GROUP BY r.model, k.name
ORDER BY device_ns DESC, r.model NULLS FIRST, kernel
""",
    # the slowest rank of each step of a job (a job: the ranks of one model and world size),
    # by its device span of the step: its first event to its last; ties to the lower rank
    "slowest-rank": """
WITH spans AS (
  SELECT r.model, r.world_size, r.rank, e.step, max(e.globaltimer_ns) - min(e.globaltimer_ns) AS span_ns
  FROM events e
  JOIN recordings r USING (recording)
  WHERE e.step IS NOT NULL AND r.rank IS NOT NULL
  GROUP BY r.model, r.world_size, r.rank, e.step
), ranked AS (
  SELECT *,
    row_number() OVER (PARTITION BY model, world_size, step ORDER BY span_ns DESC, rank) AS place,
    count(*) OVER (PARTITION BY model, world_size, step) AS ranks
  FROM spans
)
SELECT model, world_size, step, rank AS slowest_rank, span_ns, ranks
FROM ranked
WHERE place = 1
ORDER BY model, world_size, step
""",
    # events each host's recordings missed (the daemon could not keep up), beside those they hold
    "drops-per-host": """
SELECT host, count(*) AS recordings, sum(events) AS events, sum(dropped) AS dropped
FROM recordings
GROUP BY host
ORDER BY host
""",
}


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def table_files(root: Path) -> dict[str, list[Path]]:
    """Per table, its Parquet files in the dataset (tables with none left out)."""
    check_root(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder")
    found = {
        table: [p for p in files_below(root / table) if p.suffix == ".parquet" and not p.name.startswith(".")]
        for table in TABLES
    }
    found = {table: files for table, files in found.items() if files}
    if not found:
        raise DatasetError(f"{root}: not a gpuobs dataset (no table of {', '.join(TABLES)} with files)")
    return found


def connect(root: Path) -> Any:
    """An in-memory DuckDB with a view per table of the dataset at root."""
    import duckdb

    connection = duckdb.connect(":memory:")
    for table, files in table_files(Path(root)).items():
        listed = "[" + ", ".join(_quoted(str(p.resolve())) for p in files) + "]"
        connection.execute(
            f"CREATE VIEW {table} AS SELECT * FROM read_parquet({listed}, hive_partitioning = true, "
            f"hive_types = {PARTITION_TYPES}, union_by_name = true)"
        )
    return connection


def query(root: Path, sql: str) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of one SQL statement over the dataset at root. DuckDB's errors
    (a syntax error, an unknown column) come out as DatasetError with DuckDB's words."""
    import duckdb

    try:
        connection = connect(root)
        try:
            cursor = connection.execute(sql)
            if cursor.description is None:
                return [], []
            return [column[0] for column in cursor.description], cursor.fetchall()
        finally:
            connection.close()
    except duckdb.Error as error:
        raise DatasetError(" ".join(str(error).split())) from None
