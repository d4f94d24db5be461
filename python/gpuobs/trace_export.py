"""Recording -> Chrome/Perfetto trace JSON (the Perfetto UI opens it): one track per SM with a
slice per block (enter to exit; an instant when exits were not hooked), and one track per
stream with a slice per kernel launch spanning its blocks. All times are the device clock
(%globaltimer), microseconds relative to the first event.

Events go to their launch by the launch key (gpuobs.launch_key): a graph node keeps its grid
id in every replay, so each of its executions is a slice of its own, and a block's exit ends
the slice of that execution's enter, not of another replay's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuobs.launch_key import REPLAY_MASK, group_by_launch, key_grid_id, key_replay, key_replays
from gpuobs.recording import Recording
from gpuobs.segment import EVENT_KINDS, LAUNCH_KINDS

BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]


def streams_of(launches: np.ndarray) -> tuple[dict[int, int], dict[int, int]]:
    """(stream per eager grid id, stream per replay's low 32 bits) from the launch records."""
    eager = launches[launches["kind"] == LAUNCH_KINDS["eager"]]
    replays = launches[launches["kind"] == LAUNCH_KINDS["graph_launch"]]
    return (dict(zip(eager["grid_id"].tolist(), eager["stream"].tolist())),
            dict(zip((replays["replay"] & np.uint64(REPLAY_MASK)).tolist(), replays["stream"].tolist())))


def to_trace(recording: Recording) -> dict:
    events = recording.events
    trace: list[dict] = []
    pid_sms = f"GPU blocks (pid {recording.pid})"
    pid_streams = f"GPU kernels (pid {recording.pid})"
    trace.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": pid_sms}})
    trace.append({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": pid_streams}})
    if len(events) == 0:
        return {"traceEvents": trace, "displayTimeUnit": "ns"}
    origin = int(events["globaltimer_ns"].min())
    names = {slot: entry["name"] for slot, entry in recording.kernels.items()}
    launches = recording.launches
    node_grid_ids = np.unique(launches["grid_id"][launches["kind"] == LAUNCH_KINDS["graph_node"]])
    replays = key_replays(events["grid_id"], events["replay"], node_grid_ids)
    eager_stream, replay_stream = streams_of(launches)

    def block_key(rows: np.ndarray, numbers: np.ndarray) -> list[tuple[int, ...]]:
        return list(zip(rows["grid_id"].tolist(), numbers.tolist(), rows["block_x"].tolist(), rows["block_y"].tolist(),
                        rows["block_z"].tolist()))

    is_exit = events["kind"] == BLOCK_EXIT
    exit_time = dict(zip(block_key(events[is_exit], replays[is_exit]), events["globaltimer_ns"][is_exit].tolist()))
    is_enter = events["kind"] == BLOCK_ENTER
    for row, key in zip(events[is_enter], block_key(events[is_enter], replays[is_enter])):
        start = int(row["globaltimer_ns"])
        end = exit_time.get(key)
        name = names.get(int(row["kernel_slot"]), f"slot {int(row['kernel_slot'])}")
        args = {"block": f"({key[2]},{key[3]},{key[4]})", "grid_id": key[0], **({"replay": key[1]} if key[1] else {})}
        common = {"pid": 1, "tid": int(row["sm_id"]), "ts": (start - origin) / 1000.0, "name": name, "args": args}
        if end is None:
            trace.append({"ph": "i", "s": "t", **common})
        else:
            trace.append({"ph": "X", "dur": max(0.001, (end - start) / 1000.0), **common})
    order, starts, keys = group_by_launch(events["grid_id"], replays)
    times = events["globaltimer_ns"][order].astype(np.int64)
    firsts, lasts = np.minimum.reduceat(times, starts), np.maximum.reduceat(times, starts)
    counts = np.diff(np.append(starts, len(order)))
    slots = events["kernel_slot"][order][starts]
    for key, first, last, count, slot in zip(keys, firsts.tolist(), lasts.tolist(), counts.tolist(), slots.tolist()):
        grid_id, replay = key_grid_id(key), key_replay(key)
        stream = replay_stream.get(replay, 0) if replay else eager_stream.get(grid_id, 0)
        trace.append({"ph": "X", "pid": 2, "tid": int(stream) & 0x7FFFFFFF, "ts": (first - origin) / 1000.0,
                      "dur": max(0.001, (last - first) / 1000.0), "name": names.get(int(slot), "kernel"),
                      "args": {"grid_id": grid_id, **({"replay": replay} if replay else {}), "events": count}})
    return {"traceEvents": trace, "displayTimeUnit": "ns"}


def export(recording_path: Path, out_path: Path) -> int:
    trace = to_trace(Recording.open(recording_path))
    out_path.write_text(json.dumps(trace))
    return len(trace["traceEvents"])
