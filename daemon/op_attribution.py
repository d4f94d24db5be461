"""Op attribution: per process, the framework ops a plugin recorded (a label: module path, op,
input dtypes and shapes) and the kernels each launched: which layer's op runs a kernel.

A plugin calls the injector before each op (gpuobs_record_op): the injector writes an op record
with the op's number and label into the same ring as the launch records, and stamps that number
into every eager launch record its thread makes until the op is over, so a launch names its op
itself, whatever other threads do and whatever records the ring dropped. An eager launch leaves
a record only while the injector's launch trace is on: ops are attributed in the windows where
both are recorded, never in steady state. Launches outside any op are counted apart; a launch
whose op record (or part of its label) was lost to a full ring goes under LABEL_LOST.

Bounded: labels of the last KEEP_OPS ops are held (a launch follows its op closely in the ring);
at most MAX_LABELS labels keep rows of their own, the rest go to OTHER; a label longer than
MAX_LABEL_BYTES is taken as lost.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from gpuobs.segment import LAUNCH_KINDS, OP_DTYPE, STEP_TEXT_DTYPE

from .analysis import Analysis

OP = LAUNCH_KINDS["op"]
OP_TEXT = LAUNCH_KINDS["op_text"]
EAGER = LAUNCH_KINDS["eager"]
OTHER = "(other ops)"
LABEL_LOST = "(label lost: launch ring full)"
MAX_LABEL_BYTES = 8192  # the injector cuts labels to 4096


@dataclasses.dataclass
class OpLabel:
    """An op's label as far as its text records arrived."""

    text: bytearray
    received: int = 0

    def label(self) -> str:
        if not self.text or self.received < len(self.text):
            return LABEL_LOST
        return self.text.decode("utf-8", "replace")


@dataclasses.dataclass(frozen=True)
class OpTotals:
    ops: int                   # op records seen
    launches_attributed: int   # eager launch records that named an op
    launches_without_op: int   # eager launch records made outside any op
    labels: int                # labels with rows of their own
    launches_other: int        # attributed to OTHER: their label came after MAX_LABELS others


class OpAttribution(Analysis):
    MAX_LABELS = 4096
    KEEP_OPS = 65536

    def __init__(self) -> None:
        self.ops: collections.OrderedDict[int, OpLabel] = collections.OrderedDict()  # op number -> label
        self.labels: dict[str, dict[int, list[int]]] = {}  # label -> kernel slot -> [launches, blocks]
        self.ops_seen = 0
        self.launches_attributed = 0
        self.launches_without_op = 0
        self.launches_other = 0

    def on_launches(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        kinds = rows["kind"]
        for index in np.flatnonzero((kinds == OP) | (kinds == OP_TEXT)).tolist():  # before the launches they name
            raw = rows[index:index + 1]
            if int(kinds[index]) == OP:
                self._begin(raw.view(OP_DTYPE)[0])
            else:
                self._text(raw.view(STEP_TEXT_DTYPE)[0])
        eager = rows[kinds == EAGER]
        if not len(eager):
            return
        named = eager["op"] != 0
        self.launches_without_op += int(np.count_nonzero(~named))
        eager = eager[named]
        if not len(eager):
            return
        blocks = eager["grid_x"].astype(np.uint64) * eager["grid_y"] * eager["grid_z"]
        pairs = np.stack([eager["op"], eager["kernel_slot"].astype(np.uint64)], axis=1)
        unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
        launches = np.bincount(inverse.ravel(), minlength=len(unique))
        block_sums = np.bincount(inverse.ravel(), weights=blocks.astype(np.float64), minlength=len(unique))
        for (op, slot), count, total in zip(unique.tolist(), launches.tolist(), block_sums.tolist()):
            known = self.ops.get(op)
            self._add(known.label() if known else LABEL_LOST, slot, count, int(total))

    def _add(self, label: str, slot: int, launches: int, blocks: int) -> None:
        kernels = self.labels.get(label)
        if kernels is None:
            if len(self.labels) >= self.MAX_LABELS:
                label, self.launches_other = OTHER, self.launches_other + launches
            kernels = self.labels.setdefault(label, {})
        counts = kernels.setdefault(slot, [0, 0])
        counts[0] += launches
        counts[1] += blocks
        self.launches_attributed += launches

    def _begin(self, record: np.void) -> None:
        size = int(record["text_bytes"])
        self.ops_seen += 1
        self.ops[int(record["op"])] = OpLabel(bytearray(size if size <= MAX_LABEL_BYTES else 0))
        while len(self.ops) > self.KEEP_OPS:
            self.ops.popitem(last=False)

    def _text(self, record: np.void) -> None:
        known = self.ops.get(int(record["step"]))
        if known is None:
            return
        offset, length = int(record["offset"]), int(record["length"])
        if offset + length > len(known.text):
            return  # not this op's: a torn or foreign record
        known.text[offset:offset + length] = bytes(record["text"])[:length].ljust(length, b"\0")
        known.received += length

    def report(self) -> OpTotals:
        return OpTotals(self.ops_seen, self.launches_attributed, self.launches_without_op,
                        len(self.labels) - (OTHER in self.labels), self.launches_other)
