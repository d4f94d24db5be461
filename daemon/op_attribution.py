"""Op attribution: per process, the framework ops a plugin recorded (a label: module path, op,
input dtypes and shapes) and the kernels each launched: which layer's op runs a kernel.

A plugin writes an op record on the thread that runs the op, before the op launches anything, into
the same ring as the launch records, and an op record with an empty label when the op is over; so
the eager launch records of that thread in between are the op's (the ring orders one thread's
records as it wrote them), and those outside any op are counted apart. An
eager launch leaves a record only while the injector's launch trace is on: ops are attributed in
the windows where both are recorded, never in steady state. An op whose label was lost (launch ring full: counted there) is named so.

Bounded: at most MAX_LABELS labels keep rows of their own, then the rest go to OTHER; per label,
the kernels it launched (a label names one op of one layer: a handful of kernels).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuobs.segment import LAUNCH_KINDS, OP_DTYPE, STEP_TEXT_DTYPE

from .analysis import Analysis

OP = LAUNCH_KINDS["op"]
OP_TEXT = LAUNCH_KINDS["op_text"]
EAGER = LAUNCH_KINDS["eager"]
OTHER = "(other ops)"
LABEL_LOST = "(label lost: launch ring full)"


@dataclasses.dataclass
class PendingOp:
    """An op whose label may still be arriving (its text records follow it)."""

    text: bytearray
    expected: int
    received: int = 0

    def label(self) -> str:
        if self.received < self.expected:
            return LABEL_LOST
        return self.text.decode("utf-8", "replace")


@dataclasses.dataclass(frozen=True)
class OpTotals:
    ops: int                   # op records seen
    launches_attributed: int   # eager launch records that followed an op of their thread
    launches_without_op: int   # eager launch records of a thread outside any op (before its first, between two)
    labels: int                # labels with rows of their own
    launches_other: int        # attributed to OTHER: their label came after MAX_LABELS others


class OpAttribution(Analysis):
    MAX_LABELS = 4096
    MAX_PENDING = 1024  # ops of all threads whose label is still open (a thread has one at a time)

    def __init__(self) -> None:
        self.current: dict[int, int] = {}           # thread -> the op it runs now
        self.pending: dict[int, PendingOp] = {}     # op -> its label as far as it arrived
        self.labels: dict[str, dict[int, list[int]]] = {}  # label -> kernel slot -> [launches, blocks]
        self.ops_seen = 0
        self.launches_attributed = 0
        self.launches_without_op = 0
        self.launches_other = 0

    def on_launches(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        kinds = rows["kind"]
        mine = np.flatnonzero((kinds == OP) | (kinds == OP_TEXT) | (kinds == EAGER))
        if not len(mine) or not ((kinds == OP).any() or self.current):
            self.launches_without_op += int(np.count_nonzero(kinds == EAGER))
            return
        for index in mine.tolist():
            raw = rows[index:index + 1]
            kind = int(kinds[index])
            if kind == OP:
                self._begin(raw.view(OP_DTYPE)[0])
            elif kind == OP_TEXT:
                self._text(raw.view(STEP_TEXT_DTYPE)[0])
            else:
                self._launch(rows[index])

    def _begin(self, record: np.void) -> None:
        op, thread = int(record["op"]), int(record["thread"])
        previous = self.current.pop(thread, None)
        if previous is not None:
            self.pending.pop(previous, None)
        if int(record["text_bytes"]) == 0:
            return  # an empty label: the thread's op is over, its next launches belong to none
        self.ops_seen += 1
        self.current[thread] = op
        self.pending[op] = PendingOp(bytearray(int(record["text_bytes"])), int(record["text_bytes"]))
        while len(self.pending) > self.MAX_PENDING:  # threads that ended: their last op is over
            oldest = next(iter(self.pending))
            self.pending.pop(oldest)
            self.current = {t: o for t, o in self.current.items() if o != oldest}

    def _text(self, record: np.void) -> None:
        pending = self.pending.get(int(record["step"]))
        if pending is None:
            return
        offset, length = int(record["offset"]), int(record["length"])
        if offset + length > pending.expected:
            return  # not this op's: a torn or foreign record
        pending.text[offset:offset + length] = bytes(record["text"])[:length].ljust(length, b"\0")
        pending.received += length

    def _launch(self, row: np.void) -> None:
        op = self.current.get(int(row["thread"]))
        pending = self.pending.get(op) if op is not None else None
        if pending is None:
            self.launches_without_op += 1
            return
        label = pending.label()
        kernels = self.labels.get(label)
        if kernels is None:
            if len(self.labels) >= self.MAX_LABELS:
                label, self.launches_other = OTHER, self.launches_other + 1
            kernels = self.labels.setdefault(label, {})
        counts = kernels.setdefault(int(row["kernel_slot"]), [0, 0])
        counts[0] += 1
        counts[1] += int(row["grid_x"]) * int(row["grid_y"]) * int(row["grid_z"])
        self.launches_attributed += 1

    def report(self) -> OpTotals:
        return OpTotals(self.ops_seen, self.launches_attributed, self.launches_without_op,
                        len(self.labels) - (OTHER in self.labels), self.launches_other)
