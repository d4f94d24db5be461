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
    categories: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ReadTrace:
    processes: dict[int, int]  # process track uuid -> pid
    tracks: dict[int, str]  # uuid -> name
    slices: list[TraceSlice]
    clock_snapshots: list[dict[int, int]]
    ranks: dict[int, int] = dataclasses.field(default_factory=dict)  # uuid -> sibling_order_rank, where set


INTERNED_FIELDS = ("event_names", "event_categories", "debug_annotation_names", "debug_annotation_string_values")


def read_trace(path: Path) -> ReadTrace:
    """Parses the trace; asserts what a viewer relies on: every end closes the latest open slice
    of its track, and every slice that begins ends; and, as the trace processor reads interned
    data, that each packet sequence clears its incremental state before any packet that needs
    it, that every number a packet uses was interned on its sequence since (in it or before),
    and that no number is interned twice with two names."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

    trace = Trace.FromString(Path(path).read_bytes())
    processes: dict[int, int] = {}
    tracks: dict[int, str] = {}
    open_slices: dict[int, list[TraceSlice]] = {}
    slices: list[TraceSlice] = []
    snapshots: list[dict[int, int]] = []
    ranks: dict[int, int] = {}
    state: dict[int, dict[str, dict[int, str]]] = {}  # sequence -> field -> iid -> name
    for packet in trace.packet:
        sequence = packet.trusted_packet_sequence_id
        if packet.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            state[sequence] = {field: {} for field in INTERNED_FIELDS}
        if packet.HasField("interned_data"):
            assert sequence in state, "interned data before the sequence cleared its state"
            for field in INTERNED_FIELDS:
                for entry in getattr(packet.interned_data, field):
                    name = entry.str.decode() if field == "debug_annotation_string_values" else entry.name
                    known = state[sequence][field].setdefault(entry.iid, name)
                    assert known == name, (field, entry.iid, known, name)
        interned = state.get(sequence, {})
        if packet.HasField("track_event") and (
            packet.track_event.HasField("name_iid")
            or packet.track_event.category_iids
            or any(
                a.HasField("name_iid") or a.HasField("string_value_iid") for a in packet.track_event.debug_annotations
            )
        ):
            assert packet.sequence_flags & TracePacket.SEQ_NEEDS_INCREMENTAL_STATE, "interned names, flag not set"
            assert sequence in state, "a packet that needs incremental state before it was cleared"

        def lookup(field: str, iid: int, interned: dict[str, dict[int, str]] = interned) -> str:
            assert iid in interned.get(field, {}), f"{field} {iid} used before it was interned"
            return interned[field][iid]

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
                (lookup("debug_annotation_names", a.name_iid) if a.HasField("name_iid") else a.name): (
                    a.string_value
                    if a.HasField("string_value")
                    else lookup("debug_annotation_string_values", a.string_value_iid)
                    if a.HasField("string_value_iid")
                    else a.uint_value
                    if a.HasField("uint_value")
                    else a.int_value
                )
                for a in event.debug_annotations
            }
            name = lookup("event_names", event.name_iid) if event.HasField("name_iid") else event.name
            categories = [lookup("event_categories", iid) for iid in event.category_iids] + list(event.categories)
            if event.type == TrackEvent.TYPE_SLICE_BEGIN:
                made = TraceSlice(
                    tracks[event.track_uuid], event.track_uuid, packet.timestamp, None, name, args, categories
                )
                open_slices.setdefault(event.track_uuid, []).append(made)
                slices.append(made)
            elif event.type == TrackEvent.TYPE_SLICE_END:
                began = open_slices[event.track_uuid].pop()
                assert packet.timestamp > began.start, (began, packet.timestamp)
                began.end = packet.timestamp
            else:
                slices.append(
                    TraceSlice(
                        tracks[event.track_uuid], event.track_uuid, packet.timestamp, None, name, args, categories
                    )
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
