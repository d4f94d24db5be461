"""Op labels as the launch ring carries them: an op record (the op's number, its label's length)
and then op text records with the label in pieces. The daemon's op attribution reads them live;
a recording carries them too, both those the injector wrote during it and those the daemon
writes at its start for the graph nodes captured before it (a graph's capture is long over when
a window of its replays is recorded), so that its trace names each kernel's op."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from gpuobs.segment import LAUNCH_DTYPE, LAUNCH_KINDS, MAX_OP_LABEL_BYTES, OP_DTYPE, STEP_TEXT_DTYPE

OP = LAUNCH_KINDS["op"]
OP_TEXT = LAUNCH_KINDS["op_text"]
LABEL_LOST = "(label lost: launch ring full)"
MAX_LABEL_BYTES = 2 * MAX_OP_LABEL_BYTES  # longer than the injector writes: taken as lost
TEXT_BYTES = STEP_TEXT_DTYPE["text"].itemsize
# Op numbers the daemon gives labels at a recording's start: above any the injector gives (it
# counts from 1), so that they never name one of the process's own ops.
RECORDING_OP_BASE = 1 << 63


@dataclasses.dataclass
class OpLabel:
    """An op's label as far as its text records arrived."""

    text: bytearray
    received: int = 0

    def label(self) -> str:
        if not self.text or self.received < len(self.text):
            return LABEL_LOST
        return self.text.decode("utf-8", "replace")


class OpLabels(collections.OrderedDict):
    """op number -> OpLabel, oldest first, of the ops whose records were read."""

    def begin(self, record: np.void, keep: int) -> None:
        """An op record: its label's text follows; only the last `keep` ops are held."""
        size = int(record["text_bytes"])
        self[int(record["op"])] = OpLabel(bytearray(size if size <= MAX_LABEL_BYTES else 0))
        while len(self) > keep:
            self.popitem(last=False)

    def text(self, record: np.void) -> None:
        known = self.get(int(record["step"]))
        if known is None:
            return
        offset, length = int(record["offset"]), int(record["length"])
        if offset + length > len(known.text):
            return  # not this op's: a torn or foreign record
        known.text[offset:offset + length] = bytes(record["text"])[:length].ljust(length, b"\0")
        known.received += length

    def label(self, op: int) -> str:
        """The op's label; LABEL_LOST when its record or part of its text never came."""
        known = self.get(op)
        return known.label() if known is not None else LABEL_LOST

    def read(self, rows: np.ndarray, keep: int) -> None:
        """Every op and op text record among these launch ring rows, in their order."""
        kinds = rows["kind"]
        for index in np.flatnonzero((kinds == OP) | (kinds == OP_TEXT)).tolist():
            raw = rows[index:index + 1]
            if int(kinds[index]) == OP:
                self.begin(raw.view(OP_DTYPE)[0], keep)
            else:
                self.text(raw.view(STEP_TEXT_DTYPE)[0])


def label_records(labels: dict[int, str]) -> np.ndarray:
    """Launch ring rows that give each op number its label, as the injector writes them (an op
    record, then text records of TEXT_BYTES each); a label longer than the injector's limit is
    cut there."""
    pieces: list[tuple[int, bytes, int]] = []  # (op, text, offset); offset -1: the op record
    for op, label in labels.items():
        text = label.encode("utf-8", "replace")[:MAX_OP_LABEL_BYTES]
        pieces.append((op, text, -1))
        pieces.extend((op, text[offset:offset + TEXT_BYTES], offset) for offset in range(0, len(text), TEXT_BYTES))
    rows = np.zeros(len(pieces), dtype=LAUNCH_DTYPE)
    heads, texts = rows.view(OP_DTYPE), rows.view(STEP_TEXT_DTYPE)
    for index, (op, text, offset) in enumerate(pieces):
        if offset < 0:
            heads["kind"][index], heads["op"][index], heads["text_bytes"][index] = OP, op, len(text)
            heads["text_records"][index] = -(-len(text) // TEXT_BYTES)
        else:
            texts["kind"][index], texts["step"][index], texts["offset"][index] = OP_TEXT, op, offset
            texts["length"][index], texts["text"][index] = len(text), text
    return rows


def recording_prelude(nodes: np.ndarray, node_labels: dict[tuple[int, int], str],
                      recent: dict[int, str]) -> np.ndarray:
    """What a recording begins with (launch ring rows): the labels of the last ops the daemon
    read (`recent`, by their own numbers: an op that began before the recording may launch in
    it), then the graph node records with their op's label: each node whose (exec, node) handles
    have a label names an op number of RECORDING_OP_BASE and up, one per label, whose label
    records come first."""
    numbers: dict[str, int] = {}
    named = nodes.copy()
    for index, key in enumerate(zip(named["graph_exec"].tolist(), named["graph_node"].tolist())):
        label = node_labels.get(key)
        if label is not None:
            named["op"][index] = numbers.setdefault(label, RECORDING_OP_BASE + len(numbers))
    heads = label_records({**recent, **{op: label for label, op in numbers.items()}})
    # as bytes: a copy field by field would lose what lies between the fields of LAUNCH_DTYPE
    return np.frombuffer(heads.tobytes() + named.tobytes(), dtype=LAUNCH_DTYPE).copy()
