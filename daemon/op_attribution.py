"""Op attribution: per process, the framework ops a plugin recorded (a label: module path, op,
input dtypes and shapes) and the kernels each launched: which layer's op runs a kernel.

A plugin calls the injector before each op (gpuobs_record_op): the injector writes an op record
with the op's number and label into the same ring as the launch records, and stamps that number
into every eager launch record its thread makes until the op is over, so a launch names its op
itself, whatever other threads do and whatever records the ring dropped. An eager launch leaves
a record only while the injector's launch trace is on: ops are attributed in the windows where
both are recorded, never in steady state. Launches outside any op are counted apart; a launch
whose op record (or part of its label) was lost to a full ring goes under gpuobs.op_labels.LABEL_LOST.

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

Device time (blocks mode): a launch's time is its first block enter to its last block event, as
the graph join's spans are; a node execution's comes from the join, an eager launch's from the
block events of its grid id. A launch is timed only when every block's events came (enters, and
exits where the process records them): with some missing, its span could be short by any amount,
so it is counted partial instead, neither timed nor part of any share, and only once no more of
its events can come (the process is gone, or the bound below lets it go: until then its blocks may
still be running). A share is of the device time of every launch and node execution of the
process that was timed, inside an op or not; an eager launch with no launch record has no grid
size to tell whether it is whole, so it is not timed at all.

Bounded: labels of the last KEEP_OPS ops are held (a launch follows its op closely in the ring);
at most MAX_LABELS labels keep rows of their own, the rest go to OTHER; a label longer than
MAX_LABEL_BYTES is taken as lost; the captured nodes of the last KEEP_GRAPHS graphs wait for an
exec, and the labels of the last KEEP_EXECS execs made are kept; the last KEEP_LAUNCHES eager
launch records wait for their block events (a launch's first event later than that is not
timed), and at most MAX_IN_FLIGHT launches whose events came in part wait for the rest (the
oldest let go is partial, and counted).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Iterator

import numpy as np
from gpuobs.op_labels import OP, OP_TEXT, OpLabel, OpLabels
from gpuobs.segment import EVENT_KINDS, GRAPH_NODES_RECORDED, LAUNCH_KINDS, OP_DTYPE, OP_NODES_DTYPE, STEP_TEXT_DTYPE

from .analysis import ALL_REPLAYS, Analysis
from .analysis_budget import AnalysisBudget
from .graph_exec import DeviceSpan, DeviceTime, GraphExec, span_parts
from .time_budget import TimeBudget

OP_NODES = LAUNCH_KINDS["op_nodes"]
EXEC_CREATED = LAUNCH_KINDS["graph_exec_created"]
EAGER = LAUNCH_KINDS["eager"]
GRAPH_NODE = LAUNCH_KINDS["graph_node"]
GRAPH_LAUNCH = LAUNCH_KINDS["graph_launch"]
ANNOTATIONS = (OP, OP_TEXT, OP_NODES, EXEC_CREATED)  # read one by one, in ring order
BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
OTHER = "(other ops)"
OUTSIDE = -1  # the row of an eager launch made outside any op
HELD_DTYPE = np.dtype([("grid_id", np.uint64), ("row", np.int64), ("blocks", np.uint64)])


@dataclasses.dataclass(frozen=True)
class OpTotals:
    ops: int  # op records seen
    launches_attributed: int  # eager launch records that named an op
    launches_without_op: int  # eager launch records made outside any op
    labels: int  # labels with rows of their own
    launches_other: int  # attributed to OTHER: their label came after MAX_LABELS others
    nodes_captured: int = 0  # graph nodes an op added under capture (op nodes records)
    nodes_without_op: int = 0  # graph nodes added under capture outside any op
    timings_let_go: int = 0  # eager launches let go (MAX_IN_FLIGHT) before all their block events came


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
    device: DeviceTime = dataclasses.field(default_factory=DeviceTime)


@dataclasses.dataclass
class InFlight:
    """An eager launch some of whose block events came: its row, its blocks, its span so far."""

    row: int
    blocks: int
    span: DeviceSpan = dataclasses.field(default_factory=DeviceSpan)


class OpAttribution(Analysis):
    MAX_LABELS = 4096
    KEEP_OPS = 65536
    KEEP_GRAPHS = 1024
    KEEP_EXECS = 4096
    KEEP_LAUNCHES = 65536  # eager launch records held for their block events
    MAX_IN_FLIGHT = 4096  # eager launches with some block events, waiting for the rest

    def __init__(
        self,
        exec_of: Callable[[int], GraphExec | None] = lambda handle: None,
        node_times: Callable[[GraphExec], dict[int, DeviceTime]] = lambda graph: {},
        *,
        budget: TimeBudget | None = None,
        exits_hooked: bool = False,
    ) -> None:
        """`exec_of`: the graph join's exec for a handle (the join reads each batch first);
        `node_times`: the join's device time per node of an exec; `exits_hooked`: the process
        says it records block exits (so does one that shows one)."""
        self.ops = OpLabels()  # op number -> label, of the last KEEP_OPS ops
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
        self.node_times = node_times
        self.budget = budget or AnalysisBudget()
        self.exits_recorded = exits_hooked
        self.rows: dict[tuple[str, int], int] = {}  # (label, kernel slot) -> row, an index into row_times
        self.row_times: list[DeviceTime] = []  # eager launches' device time per row
        self.outside_time = DeviceTime()  # of eager launches outside any op
        self.held = np.zeros(0, dtype=HELD_DTYPE)  # the last eager launch records, a ring (made at the first)
        self.held_written = 0
        self.in_flight: collections.OrderedDict[int, InFlight] = collections.OrderedDict()  # by grid id
        self.timings_let_go = 0

    def on_launches(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        kinds = rows["kind"]
        for index in np.flatnonzero(np.isin(kinds, ANNOTATIONS)).tolist():  # before the launches they name
            raw = rows[index : index + 1]
            kind = int(kinds[index])
            if kind == OP:
                self._begin(raw.view(OP_DTYPE)[0])
            elif kind == OP_TEXT:
                self.ops.text(raw.view(STEP_TEXT_DTYPE)[0])
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
        blocks = eager["grid_x"].astype(np.uint64) * eager["grid_y"] * eager["grid_z"]
        row_of = np.full(len(eager), OUTSIDE, dtype=np.int64)
        if named.any():
            row_of[named] = self._attribute(eager[named], blocks[named])
        self._hold(eager["grid_id"], row_of, blocks)

    def _attribute(self, eager: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """Counts launches that name an op under their label and kernel; each one's row."""
        pairs = np.stack([eager["op"], eager["kernel_slot"].astype(np.uint64)], axis=1)
        unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        launches = np.bincount(inverse, minlength=len(unique))
        block_sums = np.bincount(inverse, weights=blocks.astype(np.float64), minlength=len(unique))
        rows = np.zeros(len(unique), dtype=np.int64)
        for index, ((op, slot), count, total) in enumerate(
            zip(unique.tolist(), launches.tolist(), block_sums.tolist())
        ):
            rows[index] = self._add(self.ops.label(op), slot, count, int(total))
        return rows[inverse]

    def _add(self, label: str, slot: int, launches: int, blocks: int) -> int:
        """Counts launches under a label's kernel; returns its row."""
        kernels = self.labels.get(label)
        if kernels is None:
            if len(self.labels) >= self.MAX_LABELS:
                label, self.launches_other = OTHER, self.launches_other + launches
            kernels = self.labels.setdefault(label, {})
        counts = kernels.setdefault(slot, [0, 0])
        counts[0] += launches
        counts[1] += blocks
        self.launches_attributed += launches
        return self._row(label, slot)

    def _row(self, label: str, slot: int) -> int:
        row = self.rows.get((label, slot))
        if row is None:
            row = self.rows[(label, slot)] = len(self.row_times)
            self.row_times.append(DeviceTime())
        return row

    def _hold(self, grid_ids: np.ndarray, rows: np.ndarray, blocks: np.ndarray) -> None:
        """Eager launch records into the ring of those held for their block events (the last
        KEEP_LAUNCHES: a launch's events come soon after its record)."""
        if not len(self.held):
            self.held = np.zeros(self.KEEP_LAUNCHES, dtype=HELD_DTYPE)
        keep = min(len(grid_ids), self.KEEP_LAUNCHES)
        at = (self.held_written + np.arange(len(grid_ids) - keep, len(grid_ids))) % self.KEEP_LAUNCHES
        self.held["grid_id"][at] = grid_ids[-keep:]
        self.held["row"][at] = rows[-keep:]
        self.held["blocks"][at] = blocks[-keep:]
        self.held_written += len(grid_ids)

    # -- block events of eager launches -------------------------------------------------------
    def on_events(self, events: np.ndarray, kind_counts: np.ndarray) -> None:
        if not self.exits_recorded:
            self.exits_recorded = bool(kind_counts[BLOCK_EXIT])
        if not self.held_written or not (kind_counts[BLOCK_ENTER] or kind_counts[BLOCK_EXIT]):
            return
        with self.budget.spending():
            if self.budget.allows():  # else: the launches whose events it skipped are never whole
                self._time(events)

    def _time(self, events: np.ndarray) -> None:
        """Block events into the spans of the eager launches held; a launch whole is timed."""
        kinds = events["kind"]
        block = events[(kinds == BLOCK_ENTER) | (kinds == BLOCK_EXIT)]
        block = block[np.argsort(block["grid_id"], kind="stable")]
        grid_ids = block["grid_id"]
        starts = np.flatnonzero(np.concatenate([[True], grid_ids[1:] != grid_ids[:-1]]))
        keys = grid_ids[starts].tolist()
        self._begin_flights([key for key in keys if key not in self.in_flight])
        for key, part in zip(keys, span_parts(block, starts)):
            flight = self.in_flight.get(key)
            if flight is None:
                continue  # not an eager launch held: a node execution's, or a launch without its record
            span = flight.span
            span.merge(part)
            if span.whole(flight.blocks, self.exits_recorded):
                del self.in_flight[key]
                self._time_of(flight.row).add(span, flight.blocks, self.exits_recorded)
        while len(self.in_flight) > self.MAX_IN_FLIGHT:  # the oldest, once the batch's whole ones are out
            self._let_go(self.in_flight.popitem(last=False)[1])
            self.timings_let_go += 1

    def _begin_flights(self, grid_ids: list[int]) -> None:
        """The launches held with these grid ids take their first block events: in flight now
        (taken out of the ring, so that a late event of a launch timed already starts none)."""
        if not grid_ids:
            return
        filled = self.held[: min(self.held_written, self.KEEP_LAUNCHES)]
        found = np.flatnonzero(np.isin(filled["grid_id"], np.array(grid_ids, dtype=np.uint64)) & (filled["blocks"] > 0))
        for grid_id, row, blocks in filled[found].tolist():
            self.in_flight[grid_id] = InFlight(row, blocks)
        filled["blocks"][found] = 0

    def _let_go(self, flight: InFlight) -> None:
        """A launch in flight whose other block events will not be read: partial."""
        self._time_of(flight.row).add(flight.span, flight.blocks, self.exits_recorded)

    def _time_of(self, row: int) -> DeviceTime:
        return self.outside_time if row == OUTSIDE else self.row_times[row]

    def settle(self, replay_begun: int) -> None:
        """Once the process is gone and its rings are read, launches in flight are partial."""
        if replay_begun >= ALL_REPLAYS:
            while self.in_flight:
                self._let_go(self.in_flight.popitem(last=False)[1])

    def eager_time(self, label: str, slot: int) -> DeviceTime:
        """The device time of a label's eager launches of a kernel."""
        row = self.rows.get((label, slot))
        return DeviceTime() if row is None else self.row_times[row]

    def eager_total(self) -> DeviceTime:
        """The device time of every eager launch with a record, inside an op or not."""
        total = dataclasses.replace(self.outside_time)
        for time_of in self.row_times:
            total += time_of
        return total

    def _begin(self, record: np.void) -> None:
        self.ops_seen += 1
        self.ops.begin(record, self.KEEP_OPS)

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
        text = self.ops.label(op)
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
            labels = {
                node: capture.labels[captured]
                for node, captured in zip(bound.order, capture.kernels)
                if captured in capture.labels
            }
            self.matched_by_position += 1
        bound.labels = labels
        bound.capture = Capture(capture.graph)  # its labels are the exec's now: the rest is not kept
        bound.order = []
        return labels

    def recent_labels(self, count: int) -> dict[int, OpLabel]:
        """op number -> label (a copy, as far as its pieces arrived) of the last `count` ops read:
        one whose label is still arriving is completed by the records that follow."""
        recent = reversed(list(itertools.islice(reversed(self.ops.items()), count)))
        return {op: known.copy() for op, known in recent}

    def node_labels(self) -> dict[int, str]:
        """grid id -> label of each node learned, over the live execs made from labelled captures
        whose nodes' labels are known: what a recording that begins now writes for them (a
        destroyed exec runs no more, and its handle may be a new exec's now)."""
        out: dict[int, str] = {}
        for bound in list(self.bound.values()):
            if not bound.made.alive:
                continue
            labels = self.labels_of(bound)
            for census in list(bound.made.nodes.values()):
                if census.node in labels:
                    out.update(dict.fromkeys(census.grid_ids, labels[census.node]))
        return out

    def graph_rows(self) -> Iterator[tuple[str, int, NodeRow]]:
        """(label, kernel slot, its nodes, executions and blocks) over the execs made from
        labelled captures, from the graph join's exact census of each node."""
        rows: dict[tuple[str, int], NodeRow] = {}
        for bound in self.bound.values():
            labels = self.labels_of(bound)
            if not labels:
                continue
            made = bound.made
            times = self.node_times(made)
            for census in made.nodes.values():
                label = labels.get(census.node)
                if label is None:
                    continue
                executions = made.executions_of(census)  # recorded and implied replays
                row = rows.setdefault((label, census.slot), NodeRow())
                row.nodes += 1
                row.executions += executions
                row.blocks += executions * census.blocks_per_execution
                row.device += times.get(census.node, DeviceTime())
        return ((label, slot, row) for (label, slot), row in rows.items())

    def report(self) -> OpTotals:
        return OpTotals(
            self.ops_seen,
            self.launches_attributed,
            self.launches_without_op,
            len(self.labels) - (OTHER in self.labels),
            self.launches_other,
            self.nodes_captured,
            self.nodes_without_op,
            self.timings_let_go,
        )
