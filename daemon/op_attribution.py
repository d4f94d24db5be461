"""Op attribution: per process, the framework ops a plugin recorded (a label: module path, op,
input dtypes and shapes) and the kernels each launched: which layer's op runs a kernel.

A plugin calls the injector before each op (gpuobs_record_op): the injector writes an op record
with the op's number and label into the same ring as the launch records, and stamps that number
into every eager launch record its thread makes until the op is over, so a launch names its op
itself, whatever other threads do and whatever records the ring dropped. An eager launch leaves
a record only while the injector's launch trace is on: ops are attributed in the windows where
both are recorded, never in steady state. Launches outside any op are counted apart; a launch
whose op record (or part of its label) was lost to a full ring goes under LABEL_LOST.

Graph nodes: while a stream captures a graph, the plugin reports after each op the nodes it
added (op nodes records: the op's number, the graph, node handles). A graph exec created from
that graph (its creation record names the graph) gets those nodes' labels, and every execution
of a labelled node (the graph join's exact census: replays times the exec's nodes, with no
record per replay) counts for its label. The node handles the Sanitizer gives at replay are the
ones seen at capture (measured on the H200 with the captured graph kept alive). Two fallbacks
cover what was not measured: an exec whose creation record names no captured graph (should the
Sanitizer's graph handle not be the capture's) takes the capture made just before it; and an
exec none of whose node handles is a captured one (should the handles differ once the captured
graph is destroyed, as PyTorch does after instantiating it) is matched by position: the k-th
kernel node of its first recorded replay is the k-th kernel node the capture added, when both
have as many. Each binding is counted by the way it was made.

Bounded: labels of the last KEEP_OPS ops are held (a launch follows its op closely in the ring);
at most MAX_LABELS labels keep rows of their own, the rest go to OTHER; a label longer than
MAX_LABEL_BYTES is taken as lost; the captured nodes of the last KEEP_GRAPHS graphs wait for an
exec, and the labels of the last KEEP_EXECS execs made are kept.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Iterator

import numpy as np

from gpuobs.segment import GRAPH_NODES_RECORDED, LAUNCH_KINDS, OP_DTYPE, OP_NODES_DTYPE, STEP_TEXT_DTYPE

from .analysis import Analysis
from .graph_exec import GraphExec

OP = LAUNCH_KINDS["op"]
OP_TEXT = LAUNCH_KINDS["op_text"]
OP_NODES = LAUNCH_KINDS["op_nodes"]
EXEC_CREATED = LAUNCH_KINDS["graph_exec_created"]
EAGER = LAUNCH_KINDS["eager"]
GRAPH_NODE = LAUNCH_KINDS["graph_node"]
GRAPH_LAUNCH = LAUNCH_KINDS["graph_launch"]
ANNOTATIONS = (OP, OP_TEXT, OP_NODES, EXEC_CREATED)  # read one by one, in ring order
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
    nodes_captured: int = 0    # graph nodes an op added under capture (op nodes records)
    nodes_without_op: int = 0  # graph nodes added under capture outside any op


@dataclasses.dataclass
class Capture:
    """One capture as the op recorder reported it."""

    graph: int
    labels: dict[int, str] = dataclasses.field(default_factory=dict)  # node -> its op's label
    kernels: list[int] = dataclasses.field(default_factory=list)  # kernel nodes in the order they were added


@dataclasses.dataclass
class BoundExec:
    """An exec made from a labelled capture, and its nodes' labels once known."""

    made: GraphExec
    capture: Capture
    labels: dict[int, str] | None = None  # None until its nodes are learned
    first_replay: int = 0  # the replay whose node records give its launch order
    order: list[int] = dataclasses.field(default_factory=list)  # its kernel nodes in launch order


@dataclasses.dataclass
class NodeRow:
    """A label's kernel in graphs: its nodes in execs made from labelled graphs, their executions."""

    nodes: int = 0
    executions: int = 0
    blocks: int = 0


class OpAttribution(Analysis):
    MAX_LABELS = 4096
    KEEP_OPS = 65536
    KEEP_GRAPHS = 1024
    KEEP_EXECS = 4096

    def __init__(self, exec_of: Callable[[int], GraphExec | None] = lambda handle: None) -> None:
        """`exec_of`: the graph join's exec for a handle (the join reads each batch first)."""
        self.ops: collections.OrderedDict[int, OpLabel] = collections.OrderedDict()  # op number -> label
        self.labels: dict[str, dict[int, list[int]]] = {}  # label -> kernel slot -> [launches, blocks]
        self.ops_seen = 0
        self.launches_attributed = 0
        self.launches_without_op = 0
        self.launches_other = 0
        self.exec_of = exec_of
        self.captured: collections.OrderedDict[int, Capture] = collections.OrderedDict()  # by capture id
        self.pending_capture: int | None = None  # nodes were last reported for it, until an exec is made
        self.bound: collections.OrderedDict[int, BoundExec] = collections.OrderedDict()  # by exec instance
        self.ordering: dict[int, BoundExec] = {}  # exec handle -> bound exec still taking its launch order
        self.nodes_captured = 0
        self.nodes_without_op = 0
        self.bound_by_graph = 0  # execs whose creation record named a captured graph
        self.bound_by_order = 0  # execs made right after a capture whose graph they did not name
        self.matched_by_position = 0  # execs whose node handles were not the captured ones

    def on_launches(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        kinds = rows["kind"]
        for index in np.flatnonzero(np.isin(kinds, ANNOTATIONS)).tolist():  # before the launches they name
            raw = rows[index:index + 1]
            kind = int(kinds[index])
            if kind == OP:
                self._begin(raw.view(OP_DTYPE)[0])
            elif kind == OP_TEXT:
                self._text(raw.view(STEP_TEXT_DTYPE)[0])
            elif kind == OP_NODES:
                self._nodes(raw.view(OP_NODES_DTYPE)[0])
            else:
                self._exec_created(int(raw["graph_exec"][0]), int(raw["graph_node"][0]))
        if self.ordering:
            self._launch_order(rows[(kinds == GRAPH_NODE) | (kinds == GRAPH_LAUNCH)])
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

    def _nodes(self, record: np.void) -> None:
        """Nodes an op added under capture, with the op's label as it stands now (its text
        records come right after its op record, before any node of it)."""
        op, count, mask = int(record["op"]), int(record["count"]), int(record["kernel_mask"])
        capture_id = int(record["capture_id"])
        nodes = record["nodes"]["node"][:count].tolist()
        capture = self.captured.get(capture_id)
        if capture is None:
            capture = self.captured[capture_id] = Capture(int(record["graph"]))
            while len(self.captured) > self.KEEP_GRAPHS:
                self.captured.popitem(last=False)
        self.pending_capture = capture_id
        capture.kernels.extend(node for index, node in enumerate(nodes) if mask >> index & 1)
        if op == 0:
            self.nodes_without_op += len(nodes)
            return
        self.nodes_captured += len(nodes)
        known = self.ops.get(op)
        text = known.label() if known else LABEL_LOST
        for node in nodes:
            capture.labels[node] = text

    def _exec_created(self, handle: int, graph: int) -> None:
        """An exec made from `graph` takes the newest capture of that graph; when no capture held
        here names it, the capture reported since the last exec was made, if any (a framework
        instantiates a graph right after capturing it, as PyTorch does). A capture binds one exec."""
        made = self.exec_of(handle)
        pending, self.pending_capture = self.pending_capture, None
        if made is None:
            return
        self.bound.pop(made.instance, None)
        self.ordering.pop(handle, None)
        key = next((key for key, capture in reversed(self.captured.items()) if capture.graph == graph), None)
        if key is not None:
            self.bound_by_graph += 1
        elif pending is not None and pending in self.captured:
            key = pending
            self.bound_by_order += 1
        if key is None:
            return
        bound = self.bound[made.instance] = BoundExec(made, self.captured.pop(key))
        self.ordering[handle] = bound
        while len(self.bound) > self.KEEP_EXECS:
            _, oldest = self.bound.popitem(last=False)
            if self.ordering.get(oldest.made.graph_exec) is oldest:
                del self.ordering[oldest.made.graph_exec]

    def _launch_order(self, rows: np.ndarray) -> None:
        """The kernel nodes of each bound exec's first replay recorded node by node, in launch
        order (for the match by position): its launch record, then its node records, until a
        launch of another replay says it is over."""
        rows = rows[np.isin(rows["graph_exec"], np.fromiter(self.ordering, dtype=np.uint64))]
        for kind, handle, node, replay, flags in rows[["kind", "graph_exec", "graph_node", "replay", "flags"]].tolist():
            bound = self.ordering.get(handle)
            if bound is None:
                continue
            if kind == GRAPH_LAUNCH:
                if bound.first_replay and replay != bound.first_replay:
                    del self.ordering[handle]  # the first recorded replay is over: its order is whole
                elif flags & GRAPH_NODES_RECORDED:
                    bound.first_replay = replay
            elif bound.first_replay and replay == bound.first_replay:
                bound.order.append(node)

    def labels_of(self, bound: BoundExec) -> dict[int, str]:
        """node -> label for a bound exec: by handle, or by position when none of its handles is
        a captured one (once its first recorded replay is over); settled once it is over."""
        if bound.labels is not None:
            return bound.labels
        made, capture = bound.made, bound.capture
        labels = {node: capture.labels[node] for node in made.nodes if node in capture.labels}
        if made.graph_exec in self.ordering and self.ordering[made.graph_exec] is bound:
            return labels  # the first replay may still be arriving: nothing settled yet
        if not labels and bound.order and len(bound.order) == len(capture.kernels):
            labels = {node: capture.labels[captured] for node, captured in zip(bound.order, capture.kernels)
                      if captured in capture.labels}
            self.matched_by_position += 1
        bound.labels = labels
        bound.capture = Capture(capture.graph)  # its labels are the exec's now: the rest is not kept
        bound.order = []
        return labels

    def graph_rows(self) -> Iterator[tuple[str, int, NodeRow]]:
        """(label, kernel slot, its nodes, executions and blocks) over the execs made from
        labelled captures, from the graph join's exact census of each node."""
        rows: dict[tuple[str, int], NodeRow] = {}
        for bound in self.bound.values():
            labels = self.labels_of(bound)
            if not labels:
                continue
            made = bound.made
            for census in made.nodes.values():
                label = labels.get(census.node)
                if label is None:
                    continue
                executions = made.executions_of(census)  # recorded and implied replays
                row = rows.setdefault((label, census.slot), NodeRow())
                row.nodes += 1
                row.executions += executions
                row.blocks += executions * census.blocks_per_execution
        return ((label, slot, row) for (label, slot), row in rows.items())

    def report(self) -> OpTotals:
        return OpTotals(self.ops_seen, self.launches_attributed, self.launches_without_op,
                        len(self.labels) - (OTHER in self.labels), self.launches_other, self.nodes_captured,
                        self.nodes_without_op)
