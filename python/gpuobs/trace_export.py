"""Recording -> Chrome/Perfetto trace JSON (the Perfetto UI opens it): one track per SM with a
slice per block (enter to exit; an instant when exits were not hooked), and one track per
stream with a slice per kernel launch spanning its blocks. All times are the device clock
(%globaltimer), microseconds relative to the first event."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuobs.recording import Recording
from gpuobs.segment import EVENT_KINDS


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
    stream_of = dict(zip(recording.launches["grid_id"].tolist(), recording.launches["stream"].tolist()))
    enters = events[events["kind"] == EVENT_KINDS["block_enter"]]
    exits = events[events["kind"] == EVENT_KINDS["block_exit"]]
    key = lambda e: np.stack([e["grid_id"], e["block_x"], e["block_y"], e["block_z"]]).T  # noqa: E731
    exit_time = {tuple(k): int(t) for k, t in zip(key(exits).tolist(), exits["globaltimer_ns"].tolist())}
    for row in enters:
        start = int(row["globaltimer_ns"])
        end = exit_time.get((int(row["grid_id"]), int(row["block_x"]), int(row["block_y"]), int(row["block_z"])))
        name = names.get(int(row["kernel_slot"]), f"slot {int(row['kernel_slot'])}")
        block = f"({int(row['block_x'])},{int(row['block_y'])},{int(row['block_z'])})"
        common = {"pid": 1, "tid": int(row["sm_id"]), "ts": (start - origin) / 1000.0, "name": name,
                  "args": {"block": block, "grid_id": int(row["grid_id"])}}
        if end is None:
            trace.append({"ph": "i", "s": "t", **common})
        else:
            trace.append({"ph": "X", "dur": max(0.001, (end - start) / 1000.0), **common})
    for grid_id in np.unique(events["grid_id"]).tolist():
        mine = events[events["grid_id"] == grid_id]
        start, end = int(mine["globaltimer_ns"].min()), int(mine["globaltimer_ns"].max())
        trace.append({"ph": "X", "pid": 2, "tid": int(stream_of.get(grid_id, 0)) & 0x7FFFFFFF,
                      "ts": (start - origin) / 1000.0, "dur": max(0.001, (end - start) / 1000.0),
                      "name": names.get(int(mine["kernel_slot"][0]), "kernel"), "args": {"grid_id": grid_id,
                                                                                         "events": len(mine)}})
    return {"traceEvents": trace, "displayTimeUnit": "ns"}


def export(recording_path: Path, out_path: Path) -> int:
    trace = to_trace(Recording.open(recording_path))
    out_path.write_text(json.dumps(trace))
    return len(trace["traceEvents"])
