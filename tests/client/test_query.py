"""gpuobsctl query: SQL over a dataset with DuckDB, a view per table with the partition columns;
a table for people, JSON for programs (integers as numbers, dates as text, NULL as null); SQL
DuckDB refuses, and a folder that is no dataset, as one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gpuobs.segment import EVENT_DTYPE, EVENT_KINDS, LAUNCH_DTYPE
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.event_files import process_record, write_event_file

NO_DAEMON = "unix:///nonexistent/gpuobsd.sock"


def dataset(tmp_path: Path) -> Path:
    """Two hosts' recordings: host-a with 3 events and 2 dropped, host-b with 5 events."""
    out = tmp_path / "ds"
    for host, count, dropped in (("host-a", 3, 2), ("host-b", 5, 0)):
        events = np.zeros(count, dtype=EVENT_DTYPE)
        events["kind"], events["grid_id"] = EVENT_KINDS["block_enter"], 5
        events["globaltimer_ns"] = np.arange(count) * 100
        path = write_event_file(
            tmp_path / f"{host}.gpuobs",
            events,
            np.zeros(0, dtype=LAUNCH_DTYPE),
            process=process_record(host),
            dropped=dropped,
            started_realtime_ns=1_700_000_000_000_000_000,  # 2023-11-14 UTC
        )
        done = gpuobsctl(NO_DAEMON, "export-parquet", str(path), "--out", str(out))
        assert done.returncode == 0, done.stderr
    return out


def query(*args: str) -> tuple[int, str, str]:
    done = gpuobsctl(NO_DAEMON, "query", *args)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stdout, done.stderr.strip()


def test_sql_over_the_dataset_as_a_table_and_as_json(tmp_path: Path) -> None:
    out = dataset(tmp_path)
    sql = "SELECT host, date, count(*) AS events, max(replay) AS replay FROM events GROUP BY ALL ORDER BY host"
    code, text, _ = query(str(out), sql)
    assert code == 0 and text.splitlines() == [
        "host    date        events  replay",
        "host-a  2023-11-14  3       NULL",
        "host-b  2023-11-14  5       NULL",
    ]
    code, text, _ = query(str(out), sql, "--output", "json")
    assert code == 0 and json.loads(text) == {
        "schema_version": 1,
        "columns": ["host", "date", "events", "replay"],
        "rows": [
            {"host": "host-a", "date": "2023-11-14", "events": 3, "replay": None},
            {"host": "host-b", "date": "2023-11-14", "events": 5, "replay": None},
        ],
    }
    code, text, _ = query(str(out), "--canonical", "drops-per-host", "--output", "json")
    assert code == 0 and json.loads(text)["rows"] == [
        {"host": "host-a", "recordings": 1, "events": 3, "dropped": 2},
        {"host": "host-b", "recordings": 1, "events": 5, "dropped": 0},
    ]


def test_what_query_refuses_is_one_line(tmp_path: Path) -> None:
    out = dataset(tmp_path)
    code, _, said = query(str(out), "SELECT nothing FROM events")
    assert code == 1 and len(said.splitlines()) == 1 and "nothing" in said
    code, _, said = query(str(out))  # usage: exit 2, the usage then the reason
    assert code == 2 and said.splitlines()[-1] == "gpuobsctl: give either SQL or --canonical NAME"
    code, _, said = query(str(out), "SELECT 1", "--canonical", "kernel-time")
    assert code == 2 and said.splitlines()[-1] == "gpuobsctl: give either SQL or --canonical NAME"
    code, _, said = query(str(tmp_path / "none"), "SELECT 1")
    assert code == 1 and "no such folder" in said
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, said = query(str(empty), "SELECT 1")
    assert code == 1 and "not a gpuobs dataset" in said
    code, _, said = query(str(out), "--canonical", "nope")
    assert code == 2 and "invalid choice" in said  # a usage error, found before the query
