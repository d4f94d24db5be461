"""Event files -> Parquet tables a fleet's recordings load into DuckDB, Spark or pandas as they
are: events.parquet, launches.parquet, steps.parquet, ops.parquet and kernels.parquet in one
folder, a row per record of every file given (an op is one row: its label comes in pieces, and
the daemon may write an op at a recording's start that the recording then holds again), each
with the recording it came from and the pid, so that files of many hosts and processes
concatenate without a clash. Columns are the records' own fields (the
segment layout's field tables, gpuobs.segment's dtypes) plus the kind's name; docs/parquet.md
is the schema."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from gpuobs.op_labels import OpLabels
from gpuobs.output_files import new_files
from gpuobs.recording import Recording, distinct_files
from gpuobs.segment import EVENT_KINDS, LAUNCH_KINDS, STEP_DTYPE, field_names

TABLES = ("events", "launches", "steps", "ops", "kernels")
NOT_LAUNCHES = ("step", "step_text", "op", "op_text", "op_nodes")  # records of their own tables, or text
STEP_FIELDS = ("host_time_ns", "step", "thread", "requests", "tokens", "flags")


def _pyarrow() -> tuple[ModuleType, ModuleType]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise RuntimeError("Parquet export needs pyarrow: pip install 'gpuobs[parquet]'") from None
    return pyarrow, pyarrow.parquet


def _columns(rows: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(rows[name]) for name in names}


def tables(recordings: list[tuple[str, Recording]]) -> dict[str, Any]:
    """The tables (pyarrow.Table, untyped) of these recordings, named by their source files."""
    pa, _ = _pyarrow()
    event_kinds = {value: name for name, value in EVENT_KINDS.items()}
    launch_kinds = {value: name for name, value in LAUNCH_KINDS.items()}
    parts: dict[str, list] = {name: [] for name in TABLES}
    for source, recording in recordings:

        def identity(count: int, source: str = source, recording: Recording = recording) -> dict[str, object]:
            return {
                "recording": pa.array([source] * count, pa.dictionary(pa.int32(), pa.string())),
                "pid": pa.array(np.full(count, recording.pid, dtype=np.uint32)),
            }

        events = recording.events
        columns = {**identity(len(events)), **_columns(events, field_names(events.dtype))}
        columns["kind_name"] = pa.array(
            [event_kinds.get(int(k), str(k)) for k in events["kind"]], pa.dictionary(pa.int8(), pa.string())
        )
        parts["events"].append(pa.table(columns))
        launches = recording.launches
        kernel_rows = launches[np.isin(launches["kind"], [v for n, v in LAUNCH_KINDS.items() if n not in NOT_LAUNCHES])]
        columns = {**identity(len(kernel_rows)), **_columns(kernel_rows, field_names(launches.dtype))}
        columns["kind_name"] = pa.array(
            [launch_kinds.get(int(k), str(k)) for k in kernel_rows["kind"]], pa.dictionary(pa.int8(), pa.string())
        )
        parts["launches"].append(pa.table(columns))
        steps = launches[launches["kind"] == LAUNCH_KINDS["step"]].view(STEP_DTYPE)
        parts["steps"].append(pa.table({**identity(len(steps)), **_columns(steps, STEP_FIELDS)}))
        labels = OpLabels()  # one per op: a record the daemon wrote and then read again is one op
        labels.read(launches, keep=max(1, int((launches["kind"] == LAUNCH_KINDS["op"]).sum())))
        parts["ops"].append(
            pa.table(
                {
                    **identity(len(labels)),
                    "host_time_ns": pa.array([known.host_time_ns for known in labels.values()], pa.uint64()),
                    "op": pa.array(list(labels), pa.uint64()),
                    "thread": pa.array([known.thread for known in labels.values()], pa.uint64()),
                    "label": pa.array([known.label() for known in labels.values()], pa.string()),
                }
            )
        )
        kernels = sorted(recording.kernels.values(), key=lambda k: k["slot"])
        parts["kernels"].append(
            pa.table(
                {
                    **identity(len(kernels)),
                    "slot": pa.array([k["slot"] for k in kernels], pa.uint32()),
                    "name": pa.array([k["name"] for k in kernels], pa.string()),
                    "mangled": pa.array([k.get("mangled", "") for k in kernels], pa.string()),
                }
            )
        )
    return {
        name: pa.concat_tables(part, promote_options="permissive") if part else None for name, part in parts.items()
    }


def export(paths: list[Path], out_dir: Path) -> dict[str, int]:
    """Writes the tables of these event files into out_dir (made if its parent is there), all
    of them or none, never over a table that is there; returns rows per table."""
    _, parquet = _pyarrow()
    made = tables([(path.name, Recording.open(path)) for path in distinct_files(paths, by_name=True)])
    files = [out_dir / f"{name}.parquet" for name in made]
    created = not out_dir.exists()
    out_dir.mkdir(exist_ok=True)
    try:
        with new_files(files) as handles:
            for table, handle in zip(made.values(), handles):
                parquet.write_table(table, handle, compression="zstd")
    except BaseException:
        if created:
            out_dir.rmdir()
        raise
    return {name: table.num_rows for name, table in made.items()}
