"""gpuobsctl export-parquet: recordings of three processes (two ranks of a job replaying a graph
step by step, one eager process with ops) added to a Hive-partitioned dataset whose rows are the
records themselves, exactly, with the joins done (step and replay on every event and launch), NULL
where a record has no value, one type per column name, and the columns docs/parquet.md lists."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from gpuobs.dataset_query import CANONICAL, query
from gpuobs.dataset_tables import TABLES, schemas
from gpuobs.launch_key import REPLAY_MASK, key_replays
from gpuobs.recording import Recording
from gpuobs.segment import LAUNCH_KINDS, OP_DTYPE, STEP_DTYPE
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.event_files import moved_to_host, record_job, start_job
from gpuobs_testing.synth import SYNTH_OP_LABELS

DOC = Path(__file__).resolve().parents[2] / "docs" / "parquet.md"
RECORDED_APART = ("step", "step_text", "op", "op_text", "op_nodes", "replay_span")  # other tables, text, spans


def type_name(kind: pa.DataType) -> str:
    """A column's type as docs/parquet.md writes it (a list's item name varies with pyarrow)."""
    return f"list<{kind.value_type}>" if pa.types.is_list(kind) else str(kind)


def documented_columns() -> dict[str, list[tuple[str, str]]]:
    """Per table, (column, type) as docs/parquet.md lists them (its sections "## TABLE table")."""
    out: dict[str, list[tuple[str, str]]] = {}
    for section in re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]:
        found = re.match(r"(\w+) table", section)
        if found:
            out[found.group(1)] = re.findall(r"^\| `(\w+)` \| ([\w<>]+) \|", section, re.M)
    return out


def read(dataset: Path, table: str) -> dict[str, list]:
    """A table of the dataset read by pyarrow's own dataset reader (partitions as columns)."""
    return pq.read_table(dataset / table, partitioning="hive").to_pydict()


def test_recordings_become_partitions_of_a_dataset_row_for_record(start_synth, start_daemon, tmp_path: Path) -> None:
    job = start_job(start_synth, start_daemon)
    daemon, ranks, eager = job.daemon, job.ranks, job.eager
    files = record_job(job, tmp_path)
    assert len(files) == 3
    out = tmp_path / "dataset"
    done = gpuobsctl(daemon.address, "--output", "json", "export-parquet", *map(str, files), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    recordings = {path.name: Recording.open(path) for path in files}
    host = socket.gethostname()

    # the layout: TABLE/host=/date=/process=pid-start ticks (the segment's own name)/RECORDING.parquet
    processes = {f"{s.pid}-{s.segment.name.split('-')[2].removesuffix('.seg')}" for s in (*ranks, eager)}
    for table in TABLES:
        placed = sorted(p.relative_to(out / table).parts for p in (out / table).rglob("*") if p.is_file())
        assert len(placed) == 3 and {parts[0] for parts in placed} == {f"host={host}"}, placed
        assert {parts[2] for parts in placed} == {f"process={name}" for name in processes}
        assert all(re.fullmatch(r"date=\d{4}-\d\d-\d\d", parts[1]) and len(parts[3]) == 32 + 8 for parts in placed)
    tables = {table: pq.read_table(out / table, partitioning="hive") for table in TABLES}
    assert {table: t.num_rows for table, t in tables.items()} == rows

    # the columns docs/parquet.md lists, with their types; one type per column name in every table
    documented = documented_columns()
    for table, written in tables.items():
        stored = pq.read_schema(next((out / table).rglob("*.parquet")))
        assert [(f.name, type_name(f.type)) for f in stored] == documented[table]
        assert written.column_names[-3:] == ["host", "date", "process"]
    type_of: dict[str, set[str]] = {}
    for schema in schemas().values():
        for field in schema:
            type_of.setdefault(field.name, set()).add(type_name(field.type))
    assert {name: types for name, types in type_of.items() if len(types) > 1} == {}

    data = {table: read(out, table) for table in TABLES}
    by_name = {row: name for row, name in zip(data["recordings"]["recording"], data["recordings"]["file"])}

    def mine(table: str, name: str) -> dict[str, np.ndarray]:
        chosen = np.array([by_name[r] == name for r in data[table]["recording"]], dtype=bool)
        return {
            column: np.array(values, dtype=object)[chosen] for column, values in data[table].items() if column != "date"
        }

    identity = {
        pid: (model, rank, size)
        for pid, model, rank, size in zip(*(data["recordings"][c] for c in ("pid", "model", "rank", "world_size")))
    }
    assert identity == {ranks[0].pid: ("llama", 0, 2), ranks[1].pid: ("llama", 1, 2), eager.pid: (None, None, None)}
    for name, recording in recordings.items():
        events, launches = recording.events, recording.launches
        # exact counts: a row per event; per launch record in launches, steps or ops (text records aside)
        ev, la, st = mine("events", name), mine("launches", name), mine("steps", name)
        assert len(ev["seq"]) == len(events) and (ev["pid"] == recording.pid).all()
        assert np.array_equal(ev["seq"].astype(np.uint64), events["seq"])
        assert np.array_equal(ev["globaltimer_ns"].astype(np.uint64), events["globaltimer_ns"])
        apart = np.isin(launches["kind"], [LAUNCH_KINDS[k] for k in RECORDED_APART])
        assert np.array_equal(la["seq"].astype(np.uint64), launches["seq"][~apart])
        assert len(st["step"]) == (launches["kind"] == LAUNCH_KINDS["step"]).sum()
        # an op is one row, also where the daemon wrote its record at the start and read it again
        op_records = launches[launches["kind"] == LAUNCH_KINDS["op"]].view(OP_DTYPE)
        assert sorted(mine("ops", name)["op"].tolist()) == np.unique(op_records["op"]).tolist()
        assert len(mine("kernels", name)["name"]) == len(recording.kernels)
        (row,) = [i for i, r in enumerate(data["recordings"]["recording"]) if by_name[r] == name]
        assert data["recordings"]["events"][row] == len(events)
        assert data["recordings"]["launch_records"][row] == len(launches)
        assert data["recordings"]["host"][row] == host and data["recordings"]["dropped"][row] == recording.dropped

        # NULL, never a sentinel: an event's replay is a graph node execution's (whole), else NULL
        nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]
        is_node = key_replays(events["grid_id"], events["replay"], np.unique(nodes["grid_id"])) != 0
        replay = ev["replay"]
        assert [r is None for r in replay] == (~is_node).tolist()
        assert all(int(r) & REPLAY_MASK == int(low) for r, low in zip(replay[is_node], events["replay"][is_node]))
        assert None not in la["host_time_ns"][la["kind"] != "graph_node"].tolist()  # only prelude records lack one
        assert 0 not in la["host_time_ns"].tolist() and 0xFFFFFFFF not in la["kernel_slot"].tolist()
        assert all(s is None for s in la["kernel_slot"][la["kind"] == "graph_launch"])
        assert 0 not in la["op"].tolist() and 0 not in la["thread"].tolist()
        assert all(t is None for t in ev["thread_index"][ev["kind"] != "memory_access"])
        assert all(a is None for a in ev["address"][ev["kind"] == "block_enter"])
        launch_events = ev["kind"] == "launch"
        assert all(g is not None for g in ev["grid_x"][launch_events]) and launch_events.any()

        # the joins: an event's step is its launch's (by whole replay, or an eager launch's grid id)
        graph_step = {
            int(r): s for k, r, s in zip(la["kind"], la["replay"], la["step"]) if k == "graph_launch" and s is not None
        }
        eager_step = {int(g): s for k, g, s in zip(la["kind"], la["grid_id"], la["step"]) if k == "eager"}
        expected = [
            graph_step.get(int(r)) if r is not None else eager_step.get(int(g)) for r, g in zip(replay, ev["grid_id"])
        ]
        assert ev["step"].tolist() == expected
        steps = launches[launches["kind"] == LAUNCH_KINDS["step"]].view(STEP_DTYPE)
        if recording.pid in (ranks[0].pid, ranks[1].pid):
            assert len(steps) > 0 and sum(s is not None for s in ev["step"]) > len(events) // 2
            # a graph launch's step: the last step record at or before it on the host clock
            for time_ns, step in zip(
                la["host_time_ns"][la["kind"] == "graph_launch"], la["step"][la["kind"] == "graph_launch"]
            ):
                before = steps["step"][steps["host_time_ns"] <= time_ns]
                assert step == (int(before[-1]) if len(before) else None)
        else:
            assert len(steps) == 0 and all(s is None for s in ev["step"])

        # the clock pairs: the recording's start (host monotonic and realtime), and launch / first event pairs
        clocks = mine("clocks", name)
        starts = clocks["kind"] == "recording_start"
        assert starts.sum() == 1 and clocks["realtime_ns"][starts][0] == recording.started_realtime_ns
        pairs = ~starts
        assert pairs.sum() > 0 and all(
            d is not None and h > 0 for d, h in zip(clocks["globaltimer_ns"][pairs], clocks["host_time_ns"][pairs])
        )

        # ops: each launch's op is a row, its label whole (synth: op k has label (k - 1) % 3 of SYNTH_OP_LABELS)
        ops = mine("ops", name)
        label_of = dict(zip(ops["op"].tolist(), ops["label"].tolist()))
        named = {int(op) for op in la["op"] if op is not None}
        assert {op: label_of.get(op) for op in named} == {op: SYNTH_OP_LABELS[(op - 1) % 3] for op in named}
        assert bool(named) == (recording.pid == eager.pid)

    # the canonical queries (DuckDB) against the same answers computed here from the recordings
    _, slowest = query(out, CANONICAL["slowest-rank"])
    spans: dict[int, dict[int, int]] = {}  # step -> rank -> device span
    for rank, synth in enumerate(ranks):
        ev = mine("events", next(n for n, r in recordings.items() if r.pid == synth.pid))
        for step in {s for s in ev["step"] if s is not None}:
            times = ev["globaltimer_ns"][ev["step"] == step].astype(np.int64)
            spans.setdefault(int(step), {})[rank] = int(times.max() - times.min())
    expected_rows = [
        ("llama", 2, step, max(by_rank, key=lambda r: (by_rank[r], -r)), max(by_rank.values()), len(by_rank))
        for step, by_rank in sorted(spans.items())
    ]
    assert [tuple(row) for row in slowest] == expected_rows and len(expected_rows) > 3
    _, kernel_time = query(out, CANONICAL["kernel-time"])
    executions = sum(
        len({(int(g), r) for g, r in zip(mine("events", n)["grid_id"], mine("events", n)["replay"])})
        for n in recordings
    )
    assert sum(row[2] for row in kernel_time) == executions
    assert {row[0] for row in kernel_time} == {"llama", None}
    _, drops = query(out, CANONICAL["drops-per-host"])
    assert [tuple(row) for row in drops] == [(host, 3, sum(len(r.events) for r in recordings.values()), 0)]


def test_a_second_export_adds_partitions_and_never_writes_over_one(start_synth, start_daemon, tmp_path: Path) -> None:
    """The same recording again is refused with nothing changed; another host's recordings are
    partitions beside the first host's, and the queries see both."""
    job = start_job(start_synth, start_daemon)
    daemon = job.daemon
    files = record_job(job, tmp_path)
    out = tmp_path / "dataset"
    assert gpuobsctl(daemon.address, "export-parquet", *map(str, files), "--out", str(out)).returncode == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    again = gpuobsctl(daemon.address, "export-parquet", str(files[0]), "--out", str(out))
    assert again.returncode == 1 and "is in the dataset" in again.stderr and "Traceback" not in again.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = [moved_to_host(path, elsewhere / path.name, "host-b") for path in files]
    done = gpuobsctl(daemon.address, "--output", "json", "export-parquet", *map(str, moved), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert all(p.read_bytes() == data for p, data in before.items())  # the first host's files as they were
    assert sorted(p.name for p in (out / "events").iterdir()) == sorted([f"host={socket.gethostname()}", "host=host-b"])
    _, drops = query(out, CANONICAL["drops-per-host"])
    events = sum(len(Recording.open(p).events) for p in files)
    assert sorted(tuple(row) for row in drops) == sorted(
        [(socket.gethostname(), 3, events, 0), ("host-b", 3, events, 0)]
    )
    _, counted = query(out, "SELECT host, count(*) FROM events GROUP BY host ORDER BY host")
    assert sorted(row[1] for row in counted) == [events, events]


def test_a_file_that_is_not_an_event_file_is_refused_by_name(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gpuobs"
    junk.write_bytes(b"\0" * 100)
    done = gpuobsctl("unix:///nonexistent.sock", "export-parquet", str(junk), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "junk.gpuobs" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_op_written_at_the_recordings_start_and_read_again_is_one_row() -> None:
    """The daemon writes the last ops it read at a recording's start; a batch it read just before
    may reach the recording too. ops has one row per op, with the op's own time and thread."""
    from gpuobs.dataset_tables import tables
    from gpuobs.op_labels import OpLabel, OpLabels, label_records, recording_prelude
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
    ops = tables(recording, "r", "r.gpuobs")["ops"].to_pydict()
    assert (ops["op"], ops["host_time_ns"], ops["thread"]) == ([5, 6], [123, 456], [77, 77])
    assert ops["label"] == ["layer.0 aten::mm", "layer.0 aten::silu"]


def test_replays_begun_before_the_recording_get_their_whole_number() -> None:
    """An event carries its replay's low 32 bits: the whole number is the recorded graph launch's
    with those bits, else the nearest to the recording's first graph launch."""
    from gpuobs.dataset_tables import whole_replays

    base = 5 << 32
    known = np.array([base + 10, base + 11], dtype=np.uint64)
    low = np.array([10, 11, 9, 12, 0xFFFFFFFF], dtype=np.uint64)
    assert whole_replays(low, known).tolist() == [base + 10, base + 11, base + 9, base + 12, base - 1]
    assert whole_replays(np.array([7], dtype=np.uint64), np.zeros(0, dtype=np.uint64)).tolist() == [7]
