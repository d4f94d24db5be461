"""One recording -> the rows of each table of a gpuobs dataset (pyarrow tables of a fixed schema,
SCHEMAS): what a row is, what is NULL, and the joins done once here so that no query has to
rebuild them (the step and the whole replay number of every event and launch). Where the files
go is gpuobs.dataset_writer's; docs/parquet.md is the schema.

Rules every table keeps (tests/daemon/test_parquet.py holds them):
- a column name has one type and one meaning in every table it is in (`replay` uint64, `pid`
  uint32, `kernel_slot` uint32, ...), so a join never casts;
- NULL where a record has no such value (an eager launch's replay, a graph launch's kernel, a
  record written before any step), never a sentinel (0, 0xFFFFFFFF);
- every row names its `recording` (a digest of the event file: unique across hosts, the same
  file always the same) and `pid`; the host, the date and the process are partition columns
  (gpuobs.dataset_writer), not stored in the files.

Device times (`globaltimer_ns`) and host times (`host_time_ns`, CLOCK_MONOTONIC of the process's
host) are separate clocks; the clocks table holds the pairs the recording gives to relate them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpuobs.launch_key import REPLAY_BITS, REPLAY_MASK, key_replays
from gpuobs.op_labels import OpLabels
from gpuobs.recording import Recording
from gpuobs.segment import EVENT_KINDS, LAUNCH_KINDS, MODES, STEP_DTYPE, STEP_SAME_REQUESTS

if TYPE_CHECKING:
    import pyarrow as pa

TABLES = ("recordings", "events", "launches", "steps", "ops", "kernels", "clocks")
# records of their own tables, text, or replays' device spans (their own layout)
NOT_LAUNCHES = ("step", "step_text", "op", "op_text", "op_nodes", "replay_span")
NO_KERNEL = 0xFFFFFFFF  # a launch record's kernel_slot when it carries no kernel (graph records)


def schemas() -> dict[str, pa.Schema]:
    """Each table's columns in order (pyarrow is imported only when an export runs)."""
    import pyarrow as pa

    u8, u16, u32, u64, text = pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(), pa.string()
    who = [("recording", text), ("pid", u32)]
    shape = [("grid_x", u32), ("grid_y", u32), ("grid_z", u32), ("block_dim_x", u32), ("block_dim_y", u32)]
    shape.append(("block_dim_z", u32))
    columns: dict[str, list[tuple[str, pa.DataType]]] = {
        "recordings": [
            *who,
            ("file", text),
            ("format", u8),
            ("pid_start_ticks", u64),
            ("process_started_realtime_ns", u64),
            ("started_realtime_ns", u64),
            ("started_monotonic_ns", u64),
            ("model", text),
            ("rank", u32),
            ("world_size", u32),
            ("local_rank", u32),
            ("role", text),
            ("label", text),
            ("gpu_uuids", pa.list_(text)),
            ("events", u64),
            ("launch_records", u64),
            ("dropped", u64),
        ],
        "events": [
            *who,
            ("globaltimer_ns", u64),
            ("kind", text),
            ("kernel_slot", u32),
            ("grid_id", u64),
            ("replay", u64),
            ("step", u64),
            ("sm_id", u16),
            ("block_x", u32),
            ("block_y", u32),
            ("block_z", u32),
            ("pc", u64),
            ("address", u64),
            ("thread_index", u16),
            ("access_bytes", u32),
            ("event_flags", u16),
            *shape,
            ("seq", u64),
        ],
        "launches": [
            *who,
            ("host_time_ns", u64),
            ("kind", text),
            ("kernel_slot", u32),
            ("grid_id", u64),
            ("replay", u64),
            ("step", u64),
            ("stream", u64),
            ("graph_exec", u64),
            ("graph_node", u64),
            ("graph_launch_id", u64),
            *shape,
            ("context_index", u32),
            ("mode", text),
            ("shift", u32),
            ("launch_flags", u32),
            ("thread", u64),
            ("op", u64),
            ("seq", u64),
        ],
        "steps": [
            *who,
            ("host_time_ns", u64),
            ("step", u64),
            ("thread", u64),
            ("requests", u32),
            ("tokens", u32),
            ("same_requests", pa.bool_()),
            ("seq", u64),
        ],
        "ops": [*who, ("host_time_ns", u64), ("op", u64), ("thread", u64), ("label", text)],
        "kernels": [*who, ("kernel_slot", u32), ("name", text), ("mangled", text)],
        "clocks": [
            *who,
            ("kind", text),
            ("host_time_ns", u64),
            ("globaltimer_ns", u64),
            ("realtime_ns", u64),
            ("grid_id", u64),
            ("replay", u64),
        ],
    }
    return {name: pa.schema(fields) for name, fields in columns.items()}


def _masked(values: np.ndarray, valid: np.ndarray | bool) -> np.ma.MaskedArray:
    """values, NULL where not valid."""
    return np.ma.MaskedArray(values, mask=~np.broadcast_to(np.asarray(valid, dtype=bool), values.shape))


def whole_replays(low: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The whole replay numbers (uint64) of events that carry their low 32 bits: the one of a
    graph launch the recording holds with those bits, else the number with those bits nearest
    the recording's first graph launch (a replay that began before the recording), else the low
    bits themselves (a process counts its replays from 1: exact below 2^32)."""
    low = low.astype(np.uint64)
    if not len(known):
        return low
    by_low = dict(zip((known & np.uint64(REPLAY_MASK)).tolist(), known.tolist()))
    anchor = int(known.min())
    span = 1 << REPLAY_BITS
    unique, inverse = np.unique(low, return_inverse=True)
    wholes = []
    for bits in unique.tolist():
        whole = by_low.get(bits)
        if whole is None:
            ahead = (bits - anchor) % span
            whole = anchor + ahead
            if ahead > span // 2 and whole >= span:  # nearer below the anchor: a replay before it
                whole -= span
        wholes.append(whole)
    return np.array(wholes, dtype=np.uint64)[inverse.reshape(-1)]


def _lookup(keys: np.ndarray, found: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(values, known): found[key] per key, known False where the key is not in found."""
    unique, inverse = np.unique(keys, return_inverse=True)
    values = np.array([found.get(key, 0) for key in unique.tolist()], dtype=np.uint64)
    present = np.array([key in found for key in unique.tolist()], dtype=bool)
    inverse = inverse.reshape(-1)
    return values[inverse], present[inverse]


def steps_at(step_times: np.ndarray, step_numbers: np.ndarray, host_times: np.ndarray) -> np.ma.MaskedArray:
    """Per host time, the step that began last at or before it (as the daemon's step attribution
    counts a launch to a step); NULL before the first step and for a time of 0 (a record the
    daemon wrote at the recording's start)."""
    if not len(step_times):
        return _masked(np.zeros(len(host_times), dtype=np.uint64), False)
    positions = np.searchsorted(step_times, host_times, side="right") - 1
    found = (positions >= 0) & (host_times > 0)
    return _masked(step_numbers[np.maximum(positions, 0)].astype(np.uint64), found)


def _names(codes: np.ndarray, names: dict[int, str]) -> pa.Array:
    """A string per code (its name, or the number where it has none), built per distinct code."""
    import pyarrow as pa

    unique, inverse = np.unique(codes, return_inverse=True)
    dictionary = pa.array([names.get(code, str(code)) for code in unique.tolist()], pa.string())
    indices = pa.array(inverse.reshape(-1).astype(np.int32))
    return pa.DictionaryArray.from_arrays(indices, dictionary).dictionary_decode()


def _repeat(value: str, count: int) -> pa.Array:
    import pyarrow as pa

    return _names(np.zeros(count, dtype=np.uint8), {0: value}) if count else pa.array([], pa.string())


def _table(name: str, columns: dict[str, object]) -> pa.Table:
    import pyarrow as pa

    schema = schemas()[name]
    assert list(columns) == schema.names, (name, list(columns), schema.names)
    arrays = []
    for field in schema:
        values = columns[field.name]
        if isinstance(values, pa.Array):
            arrays.append(values)
        elif isinstance(values, np.ma.MaskedArray):
            arrays.append(pa.array(values.data, type=field.type, mask=np.ma.getmaskarray(values)))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def tables(recording: Recording, recording_id: str, file_name: str) -> dict[str, pa.Table]:
    """The rows of one recording, per table of TABLES."""
    events, launches = recording.events, recording.launches
    event_kinds = {value: name for name, value in EVENT_KINDS.items()}
    launch_kinds = {value: name for name, value in LAUNCH_KINDS.items()}
    mode_names = {value: name for name, value in MODES.items()}

    def who(count: int) -> dict[str, object]:
        return {"recording": _repeat(recording_id, count), "pid": np.full(count, recording.pid, dtype=np.uint32)}

    # steps, in ring order (host times ascend: the engine thread writes them one after another)
    steps = launches[launches["kind"] == LAUNCH_KINDS["step"]].view(STEP_DTYPE)
    order = np.argsort(steps["host_time_ns"], kind="stable")
    step_times, step_numbers = steps["host_time_ns"][order], steps["step"][order]

    # launch records: a step by host time; a graph record's replay as recorded
    rows = launches[~np.isin(launches["kind"], [LAUNCH_KINDS[kind] for kind in NOT_LAUNCHES])]
    kind = rows["kind"]
    is_eager, is_node = kind == LAUNCH_KINDS["eager"], kind == LAUNCH_KINDS["graph_node"]
    is_graph_launch = kind == LAUNCH_KINDS["graph_launch"]
    is_kernel = is_eager | is_node
    is_graph = ~is_eager
    launch_step = steps_at(step_times, step_numbers, rows["host_time_ns"])
    stepped = ~np.ma.getmaskarray(launch_step)
    replay_step = dict(
        zip(rows["replay"][is_graph_launch & stepped].tolist(), launch_step.data[is_graph_launch & stepped].tolist())
    )
    eager_step = dict(zip(rows["grid_id"][is_eager & stepped].tolist(), launch_step.data[is_eager & stepped].tolist()))
    shape = {
        "grid_x": _masked(rows["grid_x"], is_kernel),
        "grid_y": _masked(rows["grid_y"], is_kernel),
        "grid_z": _masked(rows["grid_z"], is_kernel),
        "block_dim_x": _masked(rows["block_x"], is_kernel),
        "block_dim_y": _masked(rows["block_y"], is_kernel),
        "block_dim_z": _masked(rows["block_z"], is_kernel),
    }
    launch_table = _table(
        "launches",
        {
            **who(len(rows)),
            "host_time_ns": _masked(rows["host_time_ns"], rows["host_time_ns"] > 0),
            "kind": _names(kind, launch_kinds),
            "kernel_slot": _masked(rows["kernel_slot"], is_kernel & (rows["kernel_slot"] != NO_KERNEL)),
            "grid_id": _masked(rows["grid_id"], is_kernel),
            "replay": _masked(rows["replay"], (is_node | is_graph_launch) & (rows["replay"] > 0)),
            "step": launch_step,
            "stream": _masked(rows["stream"], is_eager | is_graph_launch),
            "graph_exec": _masked(rows["graph_exec"], is_graph),
            "graph_node": _masked(rows["graph_node"], is_node),
            "graph_launch_id": _masked(rows["graph_launch_id"], is_node),
            **shape,
            "context_index": rows["context_index"],
            "mode": _names(rows["mode"], mode_names),
            "shift": rows["shift"],
            "launch_flags": rows["flags"],
            "thread": _masked(rows["thread"], is_eager & (rows["thread"] > 0)),
            "op": _masked(rows["op"], is_kernel & (rows["op"] > 0)),
            "seq": rows["seq"],
        },
    )

    # device events: the launch each belongs to (gpuobs.launch_key), its whole replay, its step
    nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]
    node_replay = key_replays(events["grid_id"], events["replay"], np.unique(nodes["grid_id"])) != 0
    known = np.unique(launches["replay"][np.isin(launches["kind"], [LAUNCH_KINDS["graph_launch"]])])
    replay = np.zeros(len(events), dtype=np.uint64)
    replay[node_replay] = whole_replays(events["replay"][node_replay], known[known > 0])
    event_step = np.zeros(len(events), dtype=np.uint64)
    has_step = np.zeros(len(events), dtype=bool)
    event_step[node_replay], has_step[node_replay] = _lookup(replay[node_replay], replay_step)
    event_step[~node_replay], has_step[~node_replay] = _lookup(events["grid_id"][~node_replay], eager_step)
    ekind = events["kind"]
    is_access = ekind == EVENT_KINDS["memory_access"]
    is_bulk = ekind == EVENT_KINDS["bulk_copy"]
    is_launch = ekind == EVENT_KINDS["launch"]
    grid = events["address"]
    launch_shape = {
        "grid_x": _masked(grid & np.uint64(0xFFFFFFFF), is_launch),
        "grid_y": _masked((grid >> np.uint64(32)) & np.uint64(0xFFFF), is_launch),
        "grid_z": _masked(grid >> np.uint64(48), is_launch),
        "block_dim_x": _masked(events["block_x"], is_launch),
        "block_dim_y": _masked(events["block_y"], is_launch),
        "block_dim_z": _masked(events["block_z"], is_launch),
    }
    zero = np.zeros(len(events), dtype=np.uint32)
    event_table = _table(
        "events",
        {
            **who(len(events)),
            "globaltimer_ns": events["globaltimer_ns"],
            "kind": _names(ekind, event_kinds),
            "kernel_slot": events["kernel_slot"],
            "grid_id": events["grid_id"],
            "replay": _masked(replay, node_replay),
            "step": _masked(event_step, has_step),
            "sm_id": events["sm_id"],
            # a launch event comes from block (0,0,0): its block fields hold the block shape
            "block_x": np.where(is_launch, zero, events["block_x"]),
            "block_y": np.where(is_launch, zero, events["block_y"]),
            "block_z": np.where(is_launch, zero, events["block_z"]),
            "pc": events["pc"],
            "address": _masked(events["address"], is_access | is_bulk),
            "thread_index": _masked(events["thread"], is_access),
            # a bulk copy's size is `thread` blocks of `access_bytes` bytes
            "access_bytes": _masked(
                np.where(is_bulk, events["thread"].astype(np.uint32) * events["access_bytes"], events["access_bytes"]),
                is_access | is_bulk,
            ),
            "event_flags": events["flags"],
            **launch_shape,
            "seq": events["seq"],
        },
    )

    step_table = _table(
        "steps",
        {
            **who(len(steps)),
            "host_time_ns": steps["host_time_ns"],
            "step": steps["step"],
            "thread": steps["thread"],
            "requests": steps["requests"],
            "tokens": steps["tokens"],
            "same_requests": (steps["flags"] & STEP_SAME_REQUESTS) != 0,
            "seq": steps["seq"],
        },
    )

    labels = OpLabels()  # one per op: a record the daemon wrote and then read again is one op
    labels.read(launches, keep=max(1, int((launches["kind"] == LAUNCH_KINDS["op"]).sum())))
    op_times = np.array([known.host_time_ns for known in labels.values()], dtype=np.uint64)
    op_threads = np.array([known.thread for known in labels.values()], dtype=np.uint64)
    op_table = _table(
        "ops",
        {
            **who(len(labels)),
            "host_time_ns": _masked(op_times, op_times > 0),
            "op": np.array(list(labels), dtype=np.uint64),
            "thread": _masked(op_threads, op_threads > 0),
            "label": [known.label() for known in labels.values()],
        },
    )

    kernels = sorted(recording.kernels.values(), key=lambda k: k["slot"])
    kernel_table = _table(
        "kernels",
        {
            **who(len(kernels)),
            "kernel_slot": np.array([k["slot"] for k in kernels], dtype=np.uint32),
            "name": [k["name"] for k in kernels],
            "mangled": [k.get("mangled") or None for k in kernels],
        },
    )

    return {
        "recordings": _recording_row(recording, recording_id, file_name),
        "events": event_table,
        "launches": launch_table,
        "steps": step_table,
        "ops": op_table,
        "kernels": kernel_table,
        "clocks": _clock_table(recording, recording_id, rows, replay, node_replay),
    }


def _recording_row(recording: Recording, recording_id: str, file_name: str) -> pa.Table:
    process = recording.process
    identity = process.get("identity_set", False)

    def said(key: str) -> object:
        """A process field the file says, NULL where it does not (or its plugin set no identity)."""
        if key in ("model", "rank", "world_size", "local_rank", "role") and not identity:
            return None
        value = process.get(key)
        return None if value == "" else value

    return _table(
        "recordings",
        {
            "recording": [recording_id],
            "pid": [recording.pid],
            "file": [file_name],
            "format": [recording.version],
            "pid_start_ticks": [said("pid_start_ticks")],
            "process_started_realtime_ns": [said("process_started_realtime_ns")],
            "started_realtime_ns": [recording.started_realtime_ns],
            "started_monotonic_ns": [said("started_monotonic_ns")],
            "model": [said("model")],
            "rank": [said("rank")],
            "world_size": [said("world_size")],
            "local_rank": [said("local_rank")],
            "role": [said("role")],
            "label": [said("label")],
            "gpu_uuids": [process.get("gpu_uuids", [])],
            "events": [len(recording.events)],
            "launch_records": [len(recording.launches)],
            "dropped": [recording.dropped],
        },
    )


def _clock_table(
    recording: Recording, recording_id: str, rows: np.ndarray, event_replays: np.ndarray, node_replay: np.ndarray
) -> pa.Table:
    """The clock pairs the recording holds: its start (the daemon's CLOCK_MONOTONIC and
    CLOCK_REALTIME at one instant), and per launch record with a host time whose launch has
    device events, its host time and its launch's first event (the device began it no sooner
    than that: each pair is late by the launch's latency, and the least gap is the tightest)."""
    events = recording.events
    kinds: list[str] = []
    host: list[int] = []
    device: list[int | None] = []
    real: list[int | None] = []
    grids: list[int | None] = []
    replays: list[int | None] = []
    if "started_monotonic_ns" in recording.process:
        kinds.append("recording_start")
        host.append(recording.process["started_monotonic_ns"])
        device.append(None)
        real.append(recording.started_realtime_ns)
        grids.append(None)
        replays.append(None)
    times = events["globaltimer_ns"]
    first_of_replay: dict[int, int] = {}
    first_of_grid: dict[int, int] = {}
    if len(events):
        for mask, keys, into in (
            (node_replay, event_replays, first_of_replay),
            (~node_replay, events["grid_id"], first_of_grid),
        ):
            if mask.any():
                order = np.argsort(keys[mask], kind="stable")
                unique, starts = np.unique(keys[mask][order], return_index=True)
                into.update(zip(unique.tolist(), np.minimum.reduceat(times[mask][order], starts).tolist()))
    for row in rows[rows["host_time_ns"] > 0]:
        row_kind = int(row["kind"])
        if row_kind == LAUNCH_KINDS["graph_launch"] and int(row["replay"]) in first_of_replay:
            kinds.append("graph_launch")
            device.append(first_of_replay[int(row["replay"])])
            grids.append(None)
            replays.append(int(row["replay"]))
        elif row_kind == LAUNCH_KINDS["eager"] and int(row["grid_id"]) in first_of_grid:
            kinds.append("eager")
            device.append(first_of_grid[int(row["grid_id"])])
            grids.append(int(row["grid_id"]))
            replays.append(None)
        else:
            continue
        host.append(int(row["host_time_ns"]))
        real.append(None)
    return _table(
        "clocks",
        {
            "recording": [recording_id] * len(kinds),
            "pid": np.full(len(kinds), recording.pid, dtype=np.uint32),
            "kind": kinds,
            "host_time_ns": host,
            "globaltimer_ns": device,
            "realtime_ns": real,
            "grid_id": grids,
            "replay": replays,
        },
    )
