"""The canonical queries of docs/parquet.md on a distributed engine: Dask's, in its local cluster
mode (a scheduler and worker processes, dask.dataframe reading the dataset's Parquet with its
Hive partitions), over the same files as DuckDB, with the same answers. The files are what
export-parquet wrote from a daemon's recordings of a job (two ranks) and an eager process, on two
hosts (the second's recordings moved there): nothing is converted for either engine."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from gpuobs.dataset_query import CANONICAL, query
from gpuobs.dataset_tables import TABLES
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.event_files import moved_to_host, record_job, start_job

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")


def plain(value: Any) -> Any:
    """One engine's value as the other's: integers as int, NULL (NaN, NA) as None."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, Decimal | int) or hasattr(value, "item"):
        value = value.item() if hasattr(value, "item") else value
        return int(value) if not isinstance(value, str) else value
    return value


def rows(frame: pd.DataFrame) -> list[tuple]:
    return [tuple(plain(v) for v in row) for row in frame.itertuples(index=False, name=None)]


def kernel_time(tables: dict[str, Any]) -> list[tuple]:
    keys = ["recording", "kernel_slot", "grid_id", "replay"]
    spans = (
        tables["events"][[*keys, "globaltimer_ns"]].groupby(keys, dropna=False)["globaltimer_ns"].agg(["min", "max"])
    )
    executions = spans.compute().reset_index()
    executions["span_ns"] = executions["max"].astype("int64") - executions["min"].astype("int64")
    kernels = tables["kernels"][["recording", "kernel_slot", "name"]].compute()
    recordings = tables["recordings"][["recording", "model"]].compute()
    joined = executions.merge(kernels, on=["recording", "kernel_slot"]).merge(recordings, on="recording")
    joined["model"] = joined["model"].astype(object)
    summed = (
        joined.groupby(["model", "name"], dropna=False)
        .agg(executions=("span_ns", "size"), device_ns=("span_ns", "sum"))
        .reset_index()
    )
    summed["model_order"] = summed["model"].notna()
    summed = summed.sort_values(["device_ns", "model_order", "model", "name"], ascending=[False, True, True, True])
    return rows(summed[["model", "name", "executions", "device_ns"]])


def slowest_rank(tables: dict[str, Any]) -> list[tuple]:
    events = tables["events"][["recording", "step", "globaltimer_ns"]].dropna(subset=["step"])
    recordings = tables["recordings"][["recording", "model", "world_size", "rank"]].compute().dropna(subset=["rank"])
    joined = events.merge(recordings, on="recording")
    keys = ["model", "world_size", "rank", "step"]
    spans = joined.groupby(keys)["globaltimer_ns"].agg(["min", "max"]).compute().reset_index()
    spans["span_ns"] = spans["max"].astype("int64") - spans["min"].astype("int64")
    spans = spans.sort_values(
        ["model", "world_size", "step", "span_ns", "rank"], ascending=[True, True, True, False, True]
    )
    job_step = ["model", "world_size", "step"]
    slowest = spans.groupby(job_step, as_index=False).first()
    slowest["ranks"] = spans.groupby(job_step)["rank"].size().values
    return rows(slowest[["model", "world_size", "step", "rank", "span_ns", "ranks"]])


def drops_per_host(tables: dict[str, Any]) -> list[tuple]:
    recordings = tables["recordings"][["host", "events", "dropped", "recording"]]
    grouped = recordings.groupby("host", observed=True).agg({"recording": "count", "events": "sum", "dropped": "sum"})
    done = grouped.compute().reset_index().sort_values("host")
    done["host"] = done["host"].astype(str)
    return rows(done[["host", "recording", "events", "dropped"]])


def test_the_canonical_queries_answer_the_same_on_dask_distributed(start_synth, start_daemon, tmp_path: Path) -> None:
    job = start_job(start_synth, start_daemon)
    files = record_job(job, tmp_path)
    elsewhere = tmp_path / "host-b"
    elsewhere.mkdir()
    moved = [moved_to_host(path, elsewhere / path.name, "host-b") for path in files]
    out = tmp_path / "dataset"
    for batch in (files, moved):
        done = gpuobsctl(job.daemon.address, "export-parquet", *map(str, batch), "--out", str(out))
        assert done.returncode == 0, done.stderr
    expected = {name: [tuple(plain(v) for v in row) for row in query(out, sql)[1]] for name, sql in CANONICAL.items()}
    assert all(expected.values()) and len(expected["drops-per-host"]) == 2
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        with distributed.Client(cluster):
            tables = {
                table: dd.read_parquet(str(out / table), dtype_backend="pyarrow", engine="pyarrow") for table in TABLES
            }
            assert {"host", "date", "process"} <= set(tables["events"].columns)  # the partitions, read as columns
            assert len(tables["events"]) == sum(row[2] for row in expected["drops-per-host"])
            answers = {
                "kernel-time": kernel_time(tables),
                "slowest-rank": slowest_rank(tables),
                "drops-per-host": drops_per_host(tables),
            }
    assert answers == expected
