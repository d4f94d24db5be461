"""Recordings -> one Perfetto trace (protobuf, written with the perfetto package's streaming
builder; the Perfetto UI and trace processor open it). Per recorded process, under a process
track of its pid:

- a track per stream (eager kernels) and per graph exec (its node executions), a slice per
  kernel execution from its first event to its last, named by the kernel, with its grid id,
  replay and counts as arguments;
- a track per SM with a slice per block (enter to exit; an instant when exits were not hooked);
- the engine's steps (the vLLM plugin's records), a slice from each step to the next;
- above each stream's and graph exec's track, on one named "ops · " and the same, the framework
  ops (module path, op, dtypes and shapes) that launched its kernels: an eager op from its first
  kernel's first event to its last kernel's last (its launches name it: the launch trace and an op
  window were on), a graph node's op over each execution of the node (labels recorded at capture,
  written by the daemon at the recording's start). A graph exec has op slices only when its
  nodes' labels were settled before the recording began: not for an exec made during it, nor for
  one matched to its capture by launch order whose first replay had not ended by then. An op
  whose label is not in the recording is named LABEL_NOT_RECORDED.

A track holds slices that nest, so where executions or blocks overlap in time (blocks resident
on one SM together, graph branches) they are spread over numbered lanes of the same name.

Times are the device clock (%globaltimer, absolute nanoseconds, as the trace's own clock). Steps
are stamped by the host (CLOCK_MONOTONIC): they are placed on the device clock by the pair that
a clock snapshot in the trace also carries, the least gap between a launch record's host time and
its launch's first block on the device (a graph replay, or an eager launch under the launch
trace): late by up to one launch's latency, a few microseconds; without such a pair no step is
placed (the process track says so).

Names are interned (Perfetto's interned data, on the trace's one packet sequence with incremental
state): each slice name, category, argument name and string argument value is written once, in
the first packet that uses it, and referred to by number after; the categories are kernel, block,
op, step and recording. 33 bytes per event on a gpuobs-synth recording of 60,000 events, from
111 without (docs/parquet.md, "Trace size").

Events go to their launch by the launch key (gpuobs.launch_key): a graph node keeps its grid id in
every replay, so each of its executions is a slice of its own, and a block's exit ends the slice
of that execution's enter, not of another replay's."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import BuiltinClock, TracePacket, TrackDescriptor, TrackEvent
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from gpuobs.launch_key import REPLAY_MASK, group_by_launch, key_grid_id, key_replay, key_replays
from gpuobs.op_labels import LABEL_NOT_RECORDED, OpLabels
from gpuobs.output_files import new_file
from gpuobs.recording import Recording, RecordingError, distinct_files
from gpuobs.segment import EVENT_KINDS, LAUNCH_KINDS, STEP_DTYPE

BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
SEQUENCE = 1  # every packet comes from this one writer
OPS = "ops · "  # the track of the ops above a stream's or graph exec's
LANES_RANKED = 64  # a track's lanes keep their order up to this many


@dataclasses.dataclass
class Slice:
    """One slice to write: on the track group `group`, [start, end] ns (end None: an instant; a
    slice lasts 1 ns at least, so that its end never comes before its beginning)."""

    group: str
    start: int
    end: int | None
    name: str
    args: dict[str, int | str]

    def __post_init__(self) -> None:
        if self.end is not None:
            self.end = max(self.end, self.start + 1)


def lanes(slices: list[Slice]) -> list[int]:
    """A lane per slice such that slices of one group in one lane never overlap (the least lanes:
    each slice takes the lane that freed up first, or a new one)."""
    lane_of = [0] * len(slices)
    by_group: dict[str, list[int]] = {}
    for index, item in enumerate(slices):
        by_group.setdefault(item.group, []).append(index)
    for indices in by_group.values():
        indices.sort(key=lambda i: slices[i].start)
        free: list[tuple[int, int]] = []  # (end, lane)
        count = 0
        for index in indices:
            item = slices[index]
            if item.end is None:
                continue  # instants need no lane of their own
            if free and free[0][0] <= item.start:
                _, lane = heapq.heappop(free)
            else:
                lane, count = count, count + 1
            lane_of[index] = lane
            heapq.heappush(free, (item.end, lane))
    return lane_of


def clock_pair(recording: Recording, replays: np.ndarray) -> tuple[int, int] | None:
    """(device ns, host monotonic ns) of one instant, from the launch record whose launch's first
    block came soonest after it; None without any launch record that has events."""
    events, launches = recording.events, recording.launches
    if not len(events):
        return None
    candidates: list[tuple[int, int]] = []  # (device, host)

    def first_events(keys: np.ndarray, times: np.ndarray) -> dict[int, int]:
        """Per key, its first event (of any kind: each one is evidence the launch had begun)."""
        if not len(keys):
            return {}
        order = np.argsort(keys, kind="stable")
        unique, starts = np.unique(keys[order], return_index=True)
        return dict(zip(unique.tolist(), np.minimum.reduceat(times[order], starts).tolist()))

    times = events["globaltimer_ns"].astype(np.int64)
    graph_first = first_events(replays[replays != 0], times[replays != 0])
    graph = launches[launches["kind"] == LAUNCH_KINDS["graph_launch"]]
    for replay, host in zip((graph["replay"] & np.uint64(REPLAY_MASK)).tolist(), graph["host_time_ns"].tolist()):
        if replay in graph_first:
            candidates.append((graph_first[replay], int(host)))
    eager_first = first_events(events["grid_id"][replays == 0], times[replays == 0])
    eager = launches[(launches["kind"] == LAUNCH_KINDS["eager"]) & (launches["host_time_ns"] > 0)]
    for grid_id, host in zip(eager["grid_id"].tolist(), eager["host_time_ns"].tolist()):
        if grid_id in eager_first:
            candidates.append((eager_first[grid_id], int(host)))
    return min(candidates, key=lambda pair: pair[0] - pair[1], default=None)


def process_slices(recording: Recording) -> tuple[list[Slice], dict[str, int | str]]:
    """The slices of one recording, and what its process track says about it."""
    events, launches = recording.events, recording.launches
    names = {slot: entry["name"] for slot, entry in recording.kernels.items()}
    nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]
    node_exec = dict(zip(nodes["grid_id"].tolist(), nodes["graph_exec"].tolist()))
    replays = key_replays(events["grid_id"], events["replay"], np.unique(nodes["grid_id"]))
    eager = launches[launches["kind"] == LAUNCH_KINDS["eager"]]
    eager_stream = dict(zip(eager["grid_id"].tolist(), eager["stream"].tolist()))
    eager_op = {grid_id: op for grid_id, op in zip(eager["grid_id"].tolist(), eager["op"].tolist()) if op}
    node_op = {grid_id: op for grid_id, op in zip(nodes["grid_id"].tolist(), nodes["op"].tolist()) if op}
    named = {*eager_op.values(), *node_op.values()}  # the labels held: those of the ops named
    labels = OpLabels()
    labels.read(launches, keep=len(named), only=named)
    op_spans: dict[tuple[int, str], list[int]] = {}  # (eager op, its stream's group) -> [first, last, kernels]
    graph_launches = launches[launches["kind"] == LAUNCH_KINDS["graph_launch"]]
    exec_stream = dict(zip(graph_launches["graph_exec"].tolist(), graph_launches["stream"].tolist()))
    slices: list[Slice] = []
    about: dict[str, int | str] = {"pid": recording.pid, "events": len(events), "dropped": recording.dropped}

    def block_key(rows: np.ndarray, numbers: np.ndarray) -> list[tuple[int, ...]]:
        return list(
            zip(
                rows["grid_id"].tolist(),
                numbers.tolist(),
                rows["block_x"].tolist(),
                rows["block_y"].tolist(),
                rows["block_z"].tolist(),
            )
        )

    is_exit = events["kind"] == BLOCK_EXIT
    exit_time = dict(zip(block_key(events[is_exit], replays[is_exit]), events["globaltimer_ns"][is_exit].tolist()))
    is_enter = events["kind"] == BLOCK_ENTER
    for row, key in zip(events[is_enter], block_key(events[is_enter], replays[is_enter])):
        slot = int(row["kernel_slot"])
        args: dict[str, int | str] = {"block": f"({key[2]},{key[3]},{key[4]})", "grid_id": key[0]}
        if key[1]:
            args["replay"] = key[1]
        slices.append(
            Slice(
                f"SM {int(row['sm_id'])}",
                int(row["globaltimer_ns"]),
                exit_time.get(key),
                names.get(slot, f"slot {slot}"),
                args,
            )
        )
    if len(events):
        order, starts, keys = group_by_launch(events["grid_id"], replays)
        times = events["globaltimer_ns"][order].astype(np.int64)
        firsts, lasts = np.minimum.reduceat(times, starts), np.maximum.reduceat(times, starts)
        counts = np.diff(np.append(starts, len(order)))
        entered = np.add.reduceat((events["kind"][order] == BLOCK_ENTER).astype(np.int64), starts)
        slots = events["kernel_slot"][order][starts]
        for key, first, last, count, blocks, slot in zip(
            keys, firsts.tolist(), lasts.tolist(), counts.tolist(), entered.tolist(), slots.tolist()
        ):
            grid_id, replay = key_grid_id(key), key_replay(key)
            if replay:
                graph_exec = node_exec.get(grid_id, 0)
                group = f"graph exec {graph_exec:#x} (stream {exec_stream.get(graph_exec, 0):#x})"
            else:
                stream = eager_stream.get(grid_id)
                group = f"stream {stream:#x}" if stream is not None else "eager kernels (stream not traced)"
            args = {"grid_id": grid_id, "events": count, "blocks_entered": blocks}
            if replay:
                args["replay"] = replay
            slices.append(Slice(group, first, last, names.get(int(slot), f"slot {int(slot)}"), args))
            op = node_op.get(grid_id, 0) if replay else eager_op.get(grid_id, 0)
            if op and replay:
                slices.append(
                    Slice(
                        OPS + group,
                        first,
                        last,
                        labels.label(op, LABEL_NOT_RECORDED),
                        {"grid_id": grid_id, "replay": replay},
                    )
                )
            elif op:
                span = op_spans.setdefault((op, group), [first, last, 0])
                span[0], span[1], span[2] = min(span[0], first), max(span[1], last), span[2] + 1
    for (op, group), (first, last, kernels) in op_spans.items():
        slices.append(
            Slice(OPS + group, first, last, labels.label(op, LABEL_NOT_RECORDED), {"op": op, "kernels": kernels})
        )
    steps = launches[launches["kind"] == LAUNCH_KINDS["step"]].view(STEP_DTYPE)
    pair = clock_pair(recording, replays)
    if pair is not None:
        about["clock_pair_device_ns"], about["clock_pair_host_monotonic_ns"] = pair
    if len(steps) and pair is None:
        about["steps"] = f"{len(steps)} not placed: no launch record with device events to relate the clocks"
    elif pair is not None and len(steps):
        offset = pair[0] - pair[1]
        times = (steps["host_time_ns"].astype(np.int64) + offset).tolist()
        for index, step in enumerate(steps):
            end = times[index + 1] if index + 1 < len(steps) else None
            slices.append(
                Slice(
                    "engine steps",
                    times[index],
                    end,
                    f"step {int(step['step'])}",
                    {"requests": int(step["requests"]), "tokens": int(step["tokens"])},
                )
            )
    return slices, about


def track_ranks(groups: set[str]) -> dict[str, int]:
    """The order of a process's tracks: the engine's steps, then each stream and graph exec with
    its ops right above it, then the SMs by number."""

    def order(group: str) -> tuple:
        base = group.removeprefix(OPS)
        if group == "engine steps":
            return (0,)
        if base.startswith("SM "):
            return (2, int(base.split()[1]))
        return (1, base, group == base)  # the ops' track first

    return {group: rank for rank, group in enumerate(sorted(groups, key=order))}


def category_of(group: str) -> str:
    """A slice's category, by its track: kernel executions, blocks, ops, steps."""
    if group.startswith("SM "):
        return "block"
    if group.startswith(OPS):
        return "op"
    if group == "engine steps":
        return "step"
    return "kernel"


class Interned:
    """Names interned on the trace's one packet sequence (Perfetto's incremental state): a name's
    first use writes it into that packet's interned data with a number, each later use only the
    number. The first packet of the sequence clears the state; every packet that refers to it
    says it needs it."""

    NAME_FIELDS = ("event_names", "event_categories", "debug_annotation_names", "debug_annotation_string_values")

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, int]] = {field: {} for field in self.NAME_FIELDS}

    def iid(self, packet: TracePacket, field: str, value: str) -> int:
        table = self.tables[field]
        iid = table.get(value)
        if iid is None:
            iid = table[value] = len(table) + 1
            entry = getattr(packet.interned_data, field).add()
            entry.iid = iid
            if field == "debug_annotation_string_values":
                entry.str = value.encode()
            else:
                entry.name = value
        return iid

    def name_event(self, packet: TracePacket, name: str, category: str) -> None:
        packet.track_event.name_iid = self.iid(packet, "event_names", name)
        packet.track_event.category_iids.append(self.iid(packet, "event_categories", category))

    def annotator(self, packet: TracePacket) -> Callable[[str, str], int]:
        """For _annotate: interns an argument's name (field "name") or string value ("value")."""
        return lambda kind, text: self.iid(
            packet, "debug_annotation_names" if kind == "name" else "debug_annotation_string_values", text
        )


def _annotate(event: TrackEvent, args: dict[str, int | str], interned: Callable[[str, str], int] | None = None) -> None:
    """The arguments of a slice; names and string values by number where `interned` numbers them."""
    for name, value in args.items():
        annotation = event.debug_annotations.add()
        if interned is None:
            annotation.name = name
        else:
            annotation.name_iid = interned("name", name)
        if isinstance(value, str):
            if interned is None:
                annotation.string_value = value
            else:
                annotation.string_value_iid = interned("value", value)
        elif value >= 1 << 63:  # an op number the daemon gave, a grid id: beyond int64
            annotation.uint_value = int(value)
        else:
            annotation.int_value = int(value)


def write_trace(recordings: Iterable[Recording], out: BinaryIO) -> int:
    """Writes the trace of these recordings; returns the slices and instants written."""
    builder = StreamingTraceProtoBuilder(out)
    written = 0
    next_uuid = iter(range(1, 1 << 62))
    interned = Interned()
    first = [True]

    def packet() -> TracePacket:
        made = builder.create_packet()
        made.trusted_packet_sequence_id = SEQUENCE
        if first[0]:  # the sequence's interned names start empty here
            made.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            first[0] = False
        return made

    def event_packet() -> TracePacket:
        made = packet()
        made.sequence_flags |= TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        return made

    for recording in recordings:
        slices, about = process_slices(recording)
        process_uuid = next(next_uuid)
        descriptor = packet()
        descriptor.track_descriptor.uuid = process_uuid
        descriptor.track_descriptor.process.pid = recording.pid
        descriptor.track_descriptor.process.process_name = f"GPU work of pid {recording.pid} (gpuobs)"
        descriptor.track_descriptor.child_ordering = TrackDescriptor.ChildTracksOrdering.EXPLICIT
        rank_of = track_ranks({item.group for item in slices})
        builder.write_packet(descriptor)
        if "clock_pair_device_ns" in about:
            snapshot = packet()
            for clock, value in (
                (BuiltinClock.BUILTIN_CLOCK_BOOTTIME, about["clock_pair_device_ns"]),
                (BuiltinClock.BUILTIN_CLOCK_MONOTONIC, about["clock_pair_host_monotonic_ns"]),
            ):
                entry = snapshot.clock_snapshot.clocks.add()
                entry.clock_id, entry.timestamp = clock, int(value)
            builder.write_packet(snapshot)
        summary = event_packet()
        summary.timestamp = min((s.start for s in slices), default=0)
        summary.track_event.type = TrackEvent.TYPE_INSTANT
        summary.track_event.track_uuid = process_uuid
        interned.name_event(summary, "recording", "recording")
        _annotate(summary.track_event, about, interned.annotator(summary))
        builder.write_packet(summary)
        tracks: dict[tuple[str, int], int] = {}
        lane_of = lanes(slices)
        edges: list[tuple[int, int, int, int]] = []  # (time, 0 end / 1 begin or instant, slice, lane)
        for index, item in enumerate(slices):
            edges.append((item.start, 1, index, lane_of[index]))
            if item.end is not None:
                edges.append((item.end, 0, index, lane_of[index]))
        edges.sort()  # ends before begins at one time: a slice that ends as the next begins nests
        for time, begins, index, lane in edges:
            item = slices[index]
            track = tracks.get((item.group, lane))
            if track is None:
                track = tracks[(item.group, lane)] = next(next_uuid)
                made = packet()
                made.track_descriptor.uuid = track
                made.track_descriptor.parent_uuid = process_uuid
                made.track_descriptor.name = item.group if lane == 0 else f"{item.group} #{lane + 1}"
                rank = rank_of[item.group] * LANES_RANKED + min(lane, LANES_RANKED - 1)
                made.track_descriptor.sibling_order_rank = rank
                builder.write_packet(made)
            made = event_packet() if begins else packet()  # an end names nothing
            made.timestamp = int(time)
            made.track_event.track_uuid = track
            if not begins:
                made.track_event.type = TrackEvent.TYPE_SLICE_END
            else:
                made.track_event.type = TrackEvent.TYPE_INSTANT if item.end is None else TrackEvent.TYPE_SLICE_BEGIN
                interned.name_event(made, item.name, category_of(item.group))
                _annotate(made.track_event, item.args, interned.annotator(made))
                written += 1
            builder.write_packet(made)
    return written


def export(recording_paths: list[Path], out_path: Path) -> int:
    """The trace of these event files into out_path (a new file, whole or not at all); returns
    the slices and instants written."""
    recordings = [Recording.open(path) for path in distinct_files(recording_paths)]
    try:
        with new_file(out_path) as out:
            return write_trace(recordings, out)
    except (ValueError, OverflowError) as error:  # a field no trace can hold: a corrupt file
        raise RecordingError(f"an event file holds a value a trace cannot: {error}") from None
