"""gpuobsctl export-parquet: recordings of two processes into one set of Parquet tables whose
rows are the records themselves, and whose columns are what docs/parquet.md says."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from gpuobs.recording import Recording
from gpuobs.segment import LAUNCH_KINDS
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.synth import SYNTH_OP_LABELS

DOC = Path(__file__).resolve().parents[2] / "docs" / "parquet.md"


def documented_columns() -> dict[str, list[str]]:
    """Per table, the columns docs/parquet.md lists (after recording and pid)."""
    out: dict[str, list[str]] = {}
    for section in re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]:
        table = section.split(".parquet", 1)[0]
        out[table] = ["recording", "pid"] + re.findall(r"^\| `(\w+)` \|", section, re.M)
    return out


def test_recordings_of_two_processes_become_one_set_of_tables(start_synth, start_daemon, tmp_path: Path) -> None:
    daemon = start_daemon()
    graphs = start_synth(
        "--mode", "blocks", "--graph-nodes", "3", "--steps", "--kernels", "3", "--rate", "20000", "--duration", "30"
    )
    eager = start_synth(
        "--mode", "blocks", "--kernels", "4", "--rate", "20000", "--duration", "30", "--launch-trace", "--ops", "3"
    )
    daemon.wait_processes(2)
    time.sleep(0.5)
    done = gpuobsctl(
        daemon.address,
        "--output",
        "json",
        "record",
        str(tmp_path / "run.gpuobs"),
        "--count",
        "30000",
        "--duration",
        "20",
    )
    assert done.returncode == 0, done.stderr
    files = [Path(f["path"]) for f in json.loads(done.stdout)["files"]]
    assert len(files) == 2
    out = tmp_path / "tables"
    done = gpuobsctl(daemon.address, "--output", "json", "export-parquet", *map(str, files), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    recordings = {path.name: Recording.open(path) for path in files}
    tables = {
        name: pq.read_table(out / f"{name}.parquet") for name in ("events", "launches", "steps", "ops", "kernels")
    }
    assert {name: table.num_rows for name, table in tables.items()} == rows
    assert {name: table.column_names for name, table in tables.items()} == documented_columns()

    def column(table: str, name: str) -> np.ndarray:
        values = tables[table].column(name)
        return np.array(values.to_pylist()) if "dictionary" in str(values.type) else values.to_numpy()

    assert set(column("events", "pid").tolist()) == {graphs.pid, eager.pid}
    for name, recording in recordings.items():
        mine = column("events", "recording") == name
        assert (column("events", "pid")[mine] == recording.pid).all() and mine.sum() == len(recording.events)
        for field in ("globaltimer_ns", "grid_id", "replay", "kernel_slot", "sm_id", "seq"):
            assert np.array_equal(column("events", field)[mine], recording.events[field]), field
        launches = recording.launches
        kernel_rows = ~np.isin(
            launches["kind"], [LAUNCH_KINDS[kind] for kind in ("step", "step_text", "op", "op_text", "op_nodes")]
        )
        assert (column("launches", "recording") == name).sum() == kernel_rows.sum()
        assert np.array_equal(
            column("launches", "seq")[column("launches", "recording") == name], launches["seq"][kernel_rows]
        )
        mine = column("ops", "recording") == name
        assert mine.sum() == (launches["kind"] == LAUNCH_KINDS["op"]).sum()
        label_of = dict(zip(column("ops", "op")[mine].tolist(), column("ops", "label")[mine].tolist()))
        named = set(column("launches", "op")[column("launches", "recording") == name].tolist()) - {0}
        # each launch's op is a row, its label whole (synth: op k has label (k - 1) % 3 of SYNTH_OP_LABELS),
        # an op begun before the recording too (the daemon writes it at the start)
        assert {op: label_of.get(op) for op in named} == {op: SYNTH_OP_LABELS[(op - 1) % 3] for op in named}
        assert bool(named) == (recording.pid == eager.pid)
        assert (column("kernels", "recording") == name).sum() == len(recording.kernels)
    assert set(column("events", "kind_name").tolist()) >= {"block_enter", "launch"}
    assert len(column("steps", "step")) > 0 and set(column("steps", "pid").tolist()) == {graphs.pid}
    assert (np.diff(column("steps", "step")) == 1).all()  # only the graph process has engine steps
    assert {"graph_launch", "eager"} <= set(column("launches", "kind_name").tolist())
    assert not {"op", "op_text", "op_nodes", "step", "step_text"} & set(column("launches", "kind_name").tolist())


def test_a_file_that_is_not_an_event_file_is_refused_by_name(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gpuobs"
    junk.write_bytes(b"\0" * 100)
    done = gpuobsctl("unix:///nonexistent.sock", "export-parquet", str(junk), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "junk.gpuobs" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_op_written_at_the_recordings_start_and_read_again_is_one_row() -> None:
    """The daemon writes the last ops it read at a recording's start; a batch it read just before
    may reach the recording too. ops.parquet has one row per op, with the op's own time and thread."""
    from gpuobs.op_labels import OpLabel, OpLabels, label_records, recording_prelude
    from gpuobs.parquet_export import tables
    from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE, OP_DTYPE

    own = label_records({5: OpLabel.whole("layer.0 aten::mm"), 6: OpLabel.whole("layer.0 aten::silu")})
    heads = own.view(OP_DTYPE)
    is_op = heads["kind"] == LAUNCH_KINDS["op"]
    heads["host_time_ns"][is_op], heads["thread"][is_op] = [123, 456], 77
    live = OpLabels()
    live.read(own, keep=10)
    prelude = recording_prelude(np.zeros(0, dtype=LAUNCH_DTYPE), {}, {5: live[5].copy()})
    eager = np.zeros(1, dtype=LAUNCH_DTYPE)
    eager["kind"], eager["op"] = LAUNCH_KINDS["eager"], 5
    recording = Recording(
        pid=1,
        events=np.zeros(0, dtype=EVENT_DTYPE),
        launches=np.concatenate([prelude, own, eager]),
        kernels={},
        dropped=0,
        started_realtime_ns=0,
    )
    ops = tables([("r", recording)])["ops"].to_pydict()
    assert (ops["op"], ops["host_time_ns"], ops["thread"]) == ([5, 6], [123, 456], [77, 77])
    assert ops["label"] == ["layer.0 aten::mm", "layer.0 aten::silu"]
