"""A Perfetto trace read back for checking: its tracks, and per track its slices and instants
(gpuobs.trace_export writes it with perfetto's builder; this reads it with the same protos)."""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class TraceSlice:
    track: str
    track_uuid: int
    start: int
    end: int | None  # None: an instant
    name: str
    args: dict[str, int | str]


@dataclasses.dataclass
class ReadTrace:
    processes: dict[int, int]  # process track uuid -> pid
    tracks: dict[int, str]  # uuid -> name
    slices: list[TraceSlice]
    clock_snapshots: list[dict[int, int]]
    ranks: dict[int, int] = dataclasses.field(default_factory=dict)  # uuid -> sibling_order_rank, where set


def read_trace(path: Path) -> ReadTrace:
    """Parses the trace; asserts what a viewer relies on: every end closes the latest open slice
    of its track, and every slice that begins ends."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(Path(path).read_bytes())
    processes: dict[int, int] = {}
    tracks: dict[int, str] = {}
    open_slices: dict[int, list[TraceSlice]] = {}
    slices: list[TraceSlice] = []
    snapshots: list[dict[int, int]] = []
    ranks: dict[int, int] = {}
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            descriptor = packet.track_descriptor
            if descriptor.HasField("process"):
                processes[descriptor.uuid] = descriptor.process.pid
            tracks[descriptor.uuid] = descriptor.name
            if descriptor.HasField("sibling_order_rank"):
                ranks[descriptor.uuid] = descriptor.sibling_order_rank
        elif packet.HasField("clock_snapshot"):
            snapshots.append({clock.clock_id: clock.timestamp for clock in packet.clock_snapshot.clocks})
        elif packet.HasField("track_event"):
            event = packet.track_event
            assert event.track_uuid in tracks, "an event before its track's descriptor"
            args = {
                a.name: (
                    a.string_value
                    if a.HasField("string_value")
                    else a.uint_value
                    if a.HasField("uint_value")
                    else a.int_value
                )
                for a in event.debug_annotations
            }
            if event.type == TrackEvent.TYPE_SLICE_BEGIN:
                made = TraceSlice(tracks[event.track_uuid], event.track_uuid, packet.timestamp, None, event.name, args)
                open_slices.setdefault(event.track_uuid, []).append(made)
                slices.append(made)
            elif event.type == TrackEvent.TYPE_SLICE_END:
                began = open_slices[event.track_uuid].pop()
                assert packet.timestamp > began.start, (began, packet.timestamp)
                began.end = packet.timestamp
            else:
                slices.append(
                    TraceSlice(tracks[event.track_uuid], event.track_uuid, packet.timestamp, None, event.name, args)
                )
    assert not any(open_slices.values()), "slices that never end"
    ended_by_track: dict[int, list[tuple[TraceSlice, int]]] = {}  # slices (not instants), with their end
    for item in slices:
        if item.end is not None:
            ended_by_track.setdefault(item.track_uuid, []).append((item, item.end))
    for track, ended in ended_by_track.items():
        ended.sort(key=lambda pair: pair[0].start)
        for (before, before_end), (after, _) in zip(ended, ended[1:]):
            assert before_end <= after.start, (track, before, after)
    return ReadTrace(processes, tracks, slices, snapshots, ranks)
