"""Reading gpuobs segments from Python.

The layout (record dtypes, sizes, modes, kinds, flags) comes from the native module, which is
compiled from the segment library's own header (segment/native/include/gpuobs/layout.h): there
is no second copy of any offset, name or wire value here. Reading is batched in
C++ into reusable numpy buffers; nothing in this module loops over events.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TypeAlias

import numpy as np

from gpuobs import _native

# A field table the native module read off a C++ struct: (name, offset, format) per field, the
# format numpy's name for it, or (the element's field table, its size, count) for an array of structs.
FieldTable: TypeAlias = list[tuple[str, int, "str | tuple[FieldTable, int, int]"]]


def _dtype(fields: FieldTable, itemsize: int) -> np.dtype:
    """A numpy dtype from a field table the native module read off a C++ struct."""

    def fmt(format_: str | tuple[FieldTable, int, int]) -> str | tuple[np.dtype, tuple[int]]:
        if isinstance(format_, str):
            return format_
        element_fields, element_size, count = format_
        return (_dtype(element_fields, element_size), (count,))

    return np.dtype(
        {
            "names": [name for name, _, _ in fields],
            "formats": [fmt(format_) for _, _, format_ in fields],
            "offsets": [offset for _, offset, _ in fields],
            "itemsize": itemsize,
        }
    )


def _struct_dtype(name: str) -> np.dtype:
    return _dtype(_native.FIELDS[name], _native.STRUCT_SIZES[name])


EVENT_DTYPE: np.dtype = _struct_dtype("event_record")
LAUNCH_DTYPE: np.dtype = _struct_dtype("launch_record")
STEP_DTYPE: np.dtype = _struct_dtype("step_record")  # a launch ring row
STEP_TEXT_DTYPE: np.dtype = _struct_dtype("step_text_record")  # also an op's label (kind op_text)
OP_DTYPE: np.dtype = _struct_dtype("op_record")
OP_NODES_DTYPE: np.dtype = _struct_dtype("op_nodes_record")  # graph nodes an op captured
REPLAY_SPAN_DTYPE: np.dtype = _struct_dtype("replay_span_record")  # a replay's span on the device
STEP_SAME_REQUESTS: int = int(_native.STEP_SAME_REQUESTS)
ACCESS_WRITE: int = int(_native.ACCESS_WRITE)  # a memory event's flag: the access stored
GRAPH_NODES_RECORDED: int = int(_native.GRAPH_NODES_RECORDED)  # graph launch record flag
MAX_OP_LABEL_BYTES: int = int(_native.MAX_OP_LABEL_BYTES)  # the injector cuts an op's label there
LAUNCH_CAPTURED: int = int(_native.LAUNCH_CAPTURED)  # launch record flag: the kernel filter let it record
KERNEL_COUNTERS_DTYPE: np.dtype = _struct_dtype("kernel_counters")
# the daemon's block pairer's held enters (not on the wire)
PENDING_BLOCK_DTYPE: np.dtype = _dtype(_native.PENDING_BLOCK_FIELDS, _native.PENDING_BLOCK_SIZE)
KERNEL_SHAPES_DTYPE: np.dtype = _struct_dtype("kernel_shapes")
MODES: dict[str, int] = dict(_native.MODES)
PROCESS_ROLES: dict[str, int] = dict(_native.PROCESS_ROLES)  # a segment's role field
TAKES_OP_WINDOWS: int = int(_native.TAKES_OP_WINDOWS)  # identity_flags: a plugin asks for op windows
IDENTITY_SET: int = int(_native.IDENTITY_SET)  # header identity_flags: role, rank, world size, model set
MODE_NAMES: dict[int, str] = {value: name for name, value in MODES.items()}
ACCESS_MODES: frozenset[str] = frozenset(_native.ACCESS_MODES)  # record nothing but accesses
SAMPLED_MODES: frozenset[str] = frozenset(_native.SAMPLED_MODES)  # the sample shift applies
EVENT_MODES: frozenset[str] = frozenset(_native.EVENT_MODES)  # record events at all
BLOCK_SAMPLED: int = int(_native.BLOCK_SAMPLED)  # block event flag: one of the 1 in 2^shift blocks of `sampled`
BLOCK_EARLIER_EPOCH: int = int(_native.BLOCK_EARLIER_EPOCH)  # a sampled exit kept by the epoch before its own
KERNEL_ACCESS_HOOKS_CHOSEN: int = int(_native.KERNEL_ACCESS_HOOKS_CHOSEN)  # kernel entry flag: GPUOBS_MEMORY_KERNELS
EVENT_KINDS: dict[str, int] = dict(_native.EVENT_KINDS)
LAUNCH_KINDS: dict[str, int] = dict(_native.LAUNCH_KINDS)
CONTROL_STATUS: dict[str, int] = dict(_native.CONTROL_STATUS)
PATCH_SETS: dict[str, int] = dict(_native.PATCH_SETS)
SEGMENT_STATES: dict[str, int] = dict(_native.SEGMENT_STATES)
STATE_LIVE: int = SEGMENT_STATES["live"]
STATE_EXITED: int = SEGMENT_STATES["exited"]
SegmentError = _native.SegmentError

SEGMENT_PREFIX: str = _native.SEGMENT_PREFIX
SEGMENT_SUFFIX: str = _native.SEGMENT_SUFFIX


def field_names(dtype: np.dtype) -> tuple[str, ...]:
    """The fields of a record dtype (one of the above, or a view of one), in order: numpy's
    `names` is None for a dtype without fields, which a record never is."""
    names = dtype.names
    if names is None:
        raise TypeError(f"{dtype} is no record dtype: it has no fields")
    return names


def segment_paths(directory: str | os.PathLike[str]) -> list[Path]:
    """Segment files in `directory`, oldest first; temporary files being created are skipped."""
    root = Path(directory)
    try:
        entries = [p for p in root.iterdir() if p.name.startswith(SEGMENT_PREFIX) and p.name.endswith(SEGMENT_SUFFIX)]
    except FileNotFoundError:
        return []
    return sorted(entries, key=lambda p: p.name)


@dataclasses.dataclass(frozen=True)
class StageAccount:
    """One stage of the pipeline: every record produced is delivered, dropped, lost to a torn
    or corrupt slot, or still in flight.

    `unpublished` is what the reader holds beyond the producer's last published `produced`: the
    producer claimed (or dropped) records and was stopped before its counters caught up, as after
    SIGKILL. Those records are real (they were read or counted as drops) but their production was
    never published; the account names them instead of letting the sum be silently off."""

    stage: str
    produced: int
    delivered: int
    dropped: int
    torn: int
    corrupt: int
    in_flight: int
    unpublished: int = 0

    @property
    def balanced(self) -> bool:
        return (
            self.produced + self.unpublished
            == self.delivered + self.dropped + self.torn + self.corrupt + self.in_flight
        )


@dataclasses.dataclass(frozen=True)
class Accounting:
    stages: tuple[StageAccount, ...]
    errors: tuple[str, ...]
    quiescent: bool
    complete: bool = True  # False: no consistent snapshot this time (the producer was publishing)


class Segment:
    """One producer's segment, opened as its single consumer."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        owners: Iterable[int] = (),
        allow_group: bool = True,
        exclusive: bool = True,
        batch_records: int = 1 << 16,
    ) -> None:
        self.reader = _native.Reader(str(path), list(owners), allow_group, exclusive)
        self.header: dict = self.reader.header()
        self.owner_uid: int = self.reader.owner_uid()  # the producer's user, as the validated file says
        self._events = np.empty(batch_records, dtype=EVENT_DTYPE)
        self._launches = np.empty(max(1024, batch_records // 16), dtype=LAUNCH_DTYPE)
        self._claim_floor: tuple[int, int] | None = None  # (publish_seq, claimed + dropped) last seen

    @property
    def pid(self) -> int:
        return int(self.header["pid"])

    @property
    def event_rings(self) -> int:
        return int(self.header["event_rings"])

    def read_events(self, ring: int = 0) -> np.ndarray:
        """Next batch of complete events of one ring. The array is a view of a reused buffer:
        copy what must outlive the next call."""
        count = self.reader.read_events(ring, self._events)
        return self._events[:count]

    def read_launches(self) -> np.ndarray:
        count = self.reader.read_launches(self._launches)
        return self._launches[:count]

    def drain_counts(self) -> tuple[int, int]:
        """Reads everything available now from every ring; returns (events, launches) read."""
        events = launches = 0
        for ring in range(self.event_rings):
            while (count := self.reader.read_events(ring, self._events)) > 0:
                events += count
        while (count := self.reader.read_launches(self._launches)) > 0:
            launches += count
        return events, launches

    def kernels(self, first_slot: int = 0, max_count: int | None = None) -> list[dict]:
        return self.reader.kernels(first_slot, max_count)

    def kernels_at(self, slots: list[int]) -> list[dict]:
        """Entries of those slots, in that order; slots not (yet) published are left out."""
        return self.reader.kernels_at(slots)

    def kernel_count(self) -> int:
        return self.reader.kernel_count()

    def counters(self, first_slot: int = 0, max_count: int | None = None) -> tuple[dict, np.ndarray] | None:
        """(global counters, per-kernel counters as a KERNEL_COUNTERS_DTYPE array: row i is
        slot first_slot + i), one consistent snapshot; None when the producer kept publishing
        during every try."""
        snapshot = self.reader.counters(first_slot, max_count)
        if snapshot is None:
            return None
        assert isinstance(snapshot, tuple), snapshot  # the binding's type is any object: None or this pair
        global_counters, kernels = snapshot
        return global_counters, np.frombuffer(kernels, dtype=KERNEL_COUNTERS_DTYPE)

    def global_counters(self) -> dict | None:
        """The process-wide counters alone, one consistent snapshot (None as for counters()):
        what status and accounting need, without a copy of every kernel's counters."""
        counters = self.reader.global_counters()
        assert counters is None or isinstance(counters, dict), counters  # the binding's type is any object
        return counters

    def aggregates(self, first_slot: int = 0, max_count: int | None = None) -> np.ndarray:
        """Events delivered so far, per kernel slot (rows, from first_slot) and event kind (columns)."""
        raw = self.reader.aggregates(first_slot, max_count)
        return np.frombuffer(raw, dtype=np.uint64).reshape(-1, _native.EVENT_KIND_COUNT)

    def control_state(self) -> dict:
        return self.reader.control_state()

    def request_control(
        self, mode: str, shift: int = 0, kernel_filter: str = "", patch_set: str | None = None, ops_steps: int = 0
    ) -> int:
        """Asks the producer for a mode (and, with ops_steps > 0, an op window of that many engine
        steps); returns the generation its acknowledgement will carry. Raises ValueError (nothing
        written) for an invalid request."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; modes are {', '.join(MODES)}")
        if patch_set is None:
            # the set in force: the producer itself asks for the memory set where `memory` needs it
            patch_set_value = self.control_state()["applied_patch_set"]
        else:
            if patch_set not in PATCH_SETS:
                raise ValueError(f"unknown patch set {patch_set!r}")
            patch_set_value = PATCH_SETS[patch_set]
        return self.reader.request_control(MODES[mode], shift, patch_set_value, kernel_filter, ops_steps)

    def accounting(self) -> Accounting:
        """Per-stage conservation from the segment's own counters, and the invariants that must
        hold at any instant. Equalities that only hold at rest are checked when the producer's
        last snapshot was quiescent and everything claimed has been read."""
        counters = self.global_counters()
        errors: list[str] = []
        if counters is None:
            # not an error: a producer preempted in the middle of a publish; look again later
            return Accounting((), (), False, complete=False)
        quiescent = bool(counters["device_quiescent"])
        rings = [self.reader.event_ring_stats(i) for i in range(self.event_rings)]
        # claimed from the same seqlock snapshot as produced: the ring heads are republished
        # with every snapshot and would be newer than `produced` if read on their own
        claimed = counters["device_events_claimed"]
        delivered = sum(r["delivered"] for r in rings)
        torn = sum(r["torn"] for r in rings)
        corrupt = sum(r["corrupt"] for r in rings)
        consumed = sum(r["tail"] for r in rings)
        produced = counters["device_events_produced"]
        dropped = counters["device_events_dropped"]
        for index, ring in enumerate(rings):
            if ring["delivered"] + ring["torn"] + ring["corrupt"] != ring["tail"]:
                errors.append(f"event ring {index}: delivered+torn+corrupt != consumed")
        # On the GPU `produced` is a relaxed reduction issued before the claim, and may land after
        # a later claim is visible in the ring head: within one snapshot produced < claimed +
        # dropped can be momentarily true. The invariant is checked one snapshot late: every
        # claim and drop a snapshot showed must be covered by `produced` in any later snapshot.
        floor = self._claim_floor
        publish_seq = int(counters["publish_seq"])
        if floor is not None and publish_seq > floor[0] and produced < floor[1]:
            errors.append(f"device: produced {produced} < claimed + dropped {floor[1]} of an earlier snapshot")
        if floor is None or publish_seq > floor[0]:
            self._claim_floor = (publish_seq, claimed + dropped)
        if quiescent and produced != claimed + dropped:
            errors.append(f"device at rest: produced {produced} != claimed {claimed} + dropped {dropped}")
        if quiescent and consumed > claimed:
            errors.append(f"device at rest: consumed {consumed} > claimed {claimed}")
        in_flight = max(0, produced - dropped - consumed)
        unpublished = max(0, consumed + dropped - produced)
        device = StageAccount("device", produced, delivered, dropped, torn, corrupt, in_flight, unpublished)

        launch = self.reader.launch_ring_stats()
        if launch["delivered"] + launch["torn"] + launch["corrupt"] != launch["tail"]:
            errors.append("launch ring: delivered+torn+corrupt != consumed")
        if launch["produced"] < launch["head"] + launch["dropped"]:
            errors.append("launch ring: produced < claimed + dropped")
        host = StageAccount(
            "host",
            launch["produced"],
            launch["delivered"],
            launch["dropped"],
            launch["torn"],
            launch["corrupt"],
            max(0, launch["produced"] - launch["dropped"] - launch["tail"]),
            max(0, launch["tail"] + launch["dropped"] - launch["produced"]),
        )
        return Accounting((device, host), tuple(errors), quiescent)
