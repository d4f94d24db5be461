"""Op labels as the launch ring carries them: an op record (the op's number, its label's length)
and then op text records with the label in pieces. The daemon's op attribution reads them live;
a recording carries them too, both those the injector wrote during it and those the daemon
writes at its start for the graph nodes captured before it (a graph's capture is long over when
a window of its replays is recorded), so that its trace names each kernel's op."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Container

import numpy as np

from gpuobs.segment import LAUNCH_DTYPE, LAUNCH_KINDS, MAX_OP_LABEL_BYTES, OP_DTYPE, STEP_TEXT_DTYPE

OP = LAUNCH_KINDS["op"]
OP_TEXT = LAUNCH_KINDS["op_text"]
LABEL_LOST = "(label lost: launch ring full)"
LABEL_NOT_RECORDED = "(label not in recording)"
MAX_LABEL_BYTES = 2 * MAX_OP_LABEL_BYTES  # longer than the injector writes: taken as lost
TEXT_BYTES = STEP_TEXT_DTYPE["text"].itemsize
# Op numbers the daemon gives labels at a recording's start: above any the injector gives (it
# counts from 1), so that they never name one of the process's own ops.
RECORDING_OP_BASE = 1 << 63


@dataclasses.dataclass
class OpLabel:
    """An op's label as far as its text records arrived: the pieces by offset, so that a piece
    read twice counts once and a label begun before a recording can be written into it as it
    stands (its remaining pieces come in the recording)."""

    text: bytearray
    pieces: dict[int, int] = dataclasses.field(default_factory=dict)  # offset -> length received
    host_time_ns: int = 0  # the op record's: when the op began, and on which thread
    thread: int = 0

    @classmethod
    def whole(cls, label: str) -> OpLabel:
        """A label with every piece, cut where the injector cuts."""
        text = bytearray(label.encode("utf-8", "replace")[:MAX_OP_LABEL_BYTES])
        return cls(text, {offset: min(TEXT_BYTES, len(text) - offset) for offset in range(0, len(text), TEXT_BYTES)})

    def copy(self) -> OpLabel:
        return dataclasses.replace(self, text=bytearray(self.text), pieces=dict(self.pieces))

    def takes(self, offset: int, length: int) -> bool:
        """Whether a text record at `offset` of `length` bytes is a piece of this label not held
        yet: the injector cuts a label at multiples of TEXT_BYTES, so anything else is a torn or
        foreign record, and a piece held already (a record read twice) is not counted again."""
        if offset % TEXT_BYTES or offset in self.pieces or not 0 < length <= TEXT_BYTES:
            return False
        return length == TEXT_BYTES and offset + length <= len(self.text) or offset + length == len(self.text)

    def label(self) -> str:
        if not self.text or sum(self.pieces.values()) < len(self.text):
            return LABEL_LOST
        return self.text.decode("utf-8", "replace")


class OpLabels(collections.OrderedDict):
    """op number -> OpLabel, oldest first, of the ops whose records were read."""

    def begin(self, record: np.void, keep: int, only: Container[int] | None = None) -> None:
        """An op record: its label's text follows; only the last `keep` ops are held (and of
        those, with `only`, the ops it names)."""
        op, size = int(record["op"]), int(record["text_bytes"])
        if only is not None and op not in only:
            return
        size = size if size <= MAX_LABEL_BYTES else 0
        held = self.get(op)
        if held is None or len(held.text) != size:  # else the same record again: keep its pieces
            self[op] = OpLabel(bytearray(size), host_time_ns=int(record["host_time_ns"]), thread=int(record["thread"]))
        self.move_to_end(op)
        while len(self) > keep:
            self.popitem(last=False)

    def text(self, record: np.void) -> None:
        known = self.get(int(record["step"]))
        if known is None:
            return
        offset, length = int(record["offset"]), int(record["length"])
        if known.takes(offset, length):
            known.text[offset : offset + length] = bytes(record["text"])[:length].ljust(length, b"\0")
            known.pieces[offset] = length

    def label(self, op: int, unknown: str = LABEL_LOST) -> str:
        """The op's label; LABEL_LOST when part of its text never came, `unknown` when its op
        record was not read (live: lost to a full ring, or older than the ops held)."""
        known = self.get(op)
        return known.label() if known is not None else unknown

    def read(self, rows: np.ndarray, keep: int, only: Container[int] | None = None) -> None:
        """Every op and op text record among these launch ring rows, in their order."""
        kinds = rows["kind"]
        for index in np.flatnonzero((kinds == OP) | (kinds == OP_TEXT)).tolist():
            raw = rows[index : index + 1]
            if int(kinds[index]) == OP:
                self.begin(raw.view(OP_DTYPE)[0], keep, only)
            else:
                self.text(raw.view(STEP_TEXT_DTYPE)[0])


def label_records(labels: dict[int, OpLabel]) -> np.ndarray:
    """Launch ring rows that give each op number its label as far as it is known, as the
    injector writes them: an op record with the label's whole length (and the op's own time and
    thread), then a text record of up to TEXT_BYTES per piece received."""
    pieces: list[tuple[int, OpLabel, bytes, int]] = []  # (op, label, text, offset); offset -1: the op record
    for op, known in labels.items():
        text = bytes(known.text)
        pieces.append((op, known, text, -1))
        pieces.extend(
            (op, known, text[offset : offset + length], offset) for offset, length in sorted(known.pieces.items())
        )
    rows = np.zeros(len(pieces), dtype=LAUNCH_DTYPE)
    heads, texts = rows.view(OP_DTYPE), rows.view(STEP_TEXT_DTYPE)
    for index, (op, known, text, offset) in enumerate(pieces):
        if offset < 0:
            heads["kind"][index], heads["op"][index], heads["text_bytes"][index] = OP, op, len(text)
            heads["text_records"][index] = -(-len(text) // TEXT_BYTES)
            heads["host_time_ns"][index], heads["thread"][index] = known.host_time_ns, known.thread
        else:
            texts["kind"][index], texts["step"][index], texts["offset"][index] = OP_TEXT, op, offset
            texts["length"][index], texts["text"][index] = len(text), text
    return rows


def recording_prelude(nodes: np.ndarray, node_labels: dict[int, str], recent: dict[int, OpLabel]) -> np.ndarray:
    """What a recording begins with (launch ring rows): the labels of the last ops the daemon
    read (`recent`, by their own numbers, as far as they arrived: an op that began before the
    recording may launch in it, and the rest of its label come in it), then the graph node
    records with their op's label: each node whose grid id has a label (`node_labels`: grid ids
    are the one key a destroyed exec's nodes and those of a new exec on its handle never share)
    names an op number of RECORDING_OP_BASE and up, one per label, whose label records come
    first."""
    numbers: dict[str, int] = {}
    named = nodes.copy()
    for index, grid_id in enumerate(named["grid_id"].tolist()):
        label = node_labels.get(grid_id)
        if label is not None:
            named["op"][index] = numbers.setdefault(label, RECORDING_OP_BASE + len(numbers))
    heads = label_records({**recent, **{op: OpLabel.whole(label) for label, op in numbers.items()}})
    # as bytes: a copy field by field would lose what lies between the fields of LAUNCH_DTYPE
    return np.frombuffer(heads.tobytes() + named.tobytes(), dtype=LAUNCH_DTYPE).copy()
