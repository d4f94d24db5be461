"""What the graph join holds per graph exec: its census (nodes, replays, node executions, each
node's grid ids), its last replays in detail with their node executions, and the device's view of
one node execution (its block events). GraphJoin (graph_join.py) fills and judges them; the
service reads them for ListGraphs."""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
from gpuobs.launch_key import launch_key
from gpuobs.segment import BLOCK_SAMPLED, EVENT_KINDS

BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
LAUNCH_EVENT = EVENT_KINDS["launch"]

MATCHED, MISMATCHED, UNRECORDED, UNJOINED = "matched", "mismatched", "unrecorded", "unjoined"
SAMPLED = "sampled"  # ran in `sampled` in a kernel without access hooks: events of 1 in 2^shift of its blocks
STATUSES = (MATCHED, MISMATCHED, SAMPLED, UNRECORDED, UNJOINED)
_record_numbers = itertools.count(1)


@dataclasses.dataclass
class DeviceSpan:
    """The block events of one launch as the device saw it: a node execution (grid id, replay)
    or an eager launch (its grid id)."""

    enters: int = 0
    events: int = 0
    first_ns: int = 0  # first block enter or launch event (block (0,0,0)'s, after its enter)
    last_ns: int = 0  # last block event of any kind
    exits: int = 0
    sampled: int = 0  # of its events, those of sampled blocks (BLOCK_SAMPLED): a sample, never whole
    launches: int = 0  # launch events: alone (`counter` with launch times), its entry time only

    def merge(self, part: DeviceSpan) -> None:
        """More block events of the same launch (a later batch's part of it)."""
        if part.enters or part.launches:
            self.first_ns = part.first_ns if not self.enters + self.launches else min(self.first_ns, part.first_ns)
        self.enters += part.enters
        self.launches += part.launches
        self.exits += part.exits
        self.events += part.events
        self.sampled += part.sampled
        self.last_ns = max(self.last_ns, part.last_ns)

    def whole(self, blocks: int, exits_recorded: bool) -> bool:
        """Every block entered and, where the process records block exits, exited: its span is
        then its launch's, first enter to last event. A sample of its blocks never is."""
        return not self.sampled and self.enters == blocks and (not exits_recorded or self.exits == blocks)


def span_parts(block: np.ndarray, starts: np.ndarray) -> list[DeviceSpan]:
    """The spans of groups of a batch's events, each group one launch's (sorted together, `starts`
    where each begins): one pass of reductions over the batch, whatever the number of launches."""
    times = block["globaltimer_ns"].astype(np.int64)
    is_enter = block["kind"] == BLOCK_ENTER
    is_launch = block["kind"] == LAUNCH_EVENT
    enters = np.add.reduceat(is_enter.astype(np.int64), starts)
    launches = np.add.reduceat(is_launch.astype(np.int64), starts)
    exits = np.add.reduceat((block["kind"] == BLOCK_EXIT).astype(np.int64), starts)
    sampled = np.add.reduceat(((block["flags"] & np.uint16(BLOCK_SAMPLED)) != 0).astype(np.int64), starts)
    firsts = np.minimum.reduceat(np.where(is_enter | is_launch, times, np.iinfo(np.int64).max), starts)
    lasts = np.maximum.reduceat(times, starts)
    counts = np.diff(np.append(starts, len(block)))
    return [
        DeviceSpan(n_enters, n_events, first, last, n_exits, n_sampled, n_launches)
        for n_enters, n_events, first, last, n_exits, n_sampled, n_launches in zip(
            enters.tolist(),
            counts.tolist(),
            firsts.tolist(),
            lasts.tolist(),
            exits.tolist(),
            sampled.tolist(),
            launches.tolist(),
            strict=True,
        )
    ]


def covered_ns(intervals: list[tuple[int, int]]) -> int:
    """The time at least one of the (start, end) intervals covers: a replay's busy time, where
    node executions on several streams overlap and waits between them count for nothing."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


@dataclasses.dataclass
class DeviceTime:
    """The device time of some launches (eager ones or node executions): the sum over those
    timed, how many were timed, and how many had some block events but not every one, so were
    not timed (a span with blocks missing would be a guess, short by an unknown amount); those
    whose events were a sample of their blocks (`sampled`) are neither."""

    ns: int = 0
    timed: int = 0
    partial: int = 0
    sampled: int = 0

    def add(self, span: DeviceSpan | None, blocks: int | None, exits_recorded: bool, settled: bool = True) -> None:
        """One launch by its span: timed when whole (DeviceSpan.whole); `blocks` None:
        not every event of it was looked at. Partial only once `settled` (every event it will
        have has been read: before, its missing blocks may still be running). Nothing for a
        launch without block events (run in a mode without them, or filtered out)."""
        if span is None or not span.enters + span.exits:
            return
        if span.sampled:
            self.sampled += 1
            return
        if blocks is not None and span.whole(blocks, exits_recorded):
            self.ns += span.last_ns - span.first_ns
            self.timed += 1
        elif settled:
            self.partial += 1

    def __iadd__(self, other: DeviceTime) -> DeviceTime:
        self.ns += other.ns
        self.timed += other.timed
        self.partial += other.partial
        self.sampled += other.sampled
        return self


@dataclasses.dataclass
class NodeExecution:
    node: int
    grid_id: int
    slot: int
    blocks: int  # grid size
    recordable: bool  # its replay number is known (its events can be told from other replays')

    def key(self, replay: int) -> int:
        return launch_key(self.grid_id, replay)


@dataclasses.dataclass
class ReplayRecord:
    replay: int
    launch_id: int
    host_time_ns: int
    mode: int
    executions: list[NodeExecution] = dataclasses.field(default_factory=list)  # its node records
    implied: bool = False  # no node records: it ran the exec's learned nodes (GraphExec.learned)
    tainted: bool = False  # some of its events were in a batch the budget skipped: not judged
    number: int = dataclasses.field(default_factory=lambda: next(_record_numbers))  # creation order


@dataclasses.dataclass(frozen=True, eq=False)
class ReplayShape:
    """What one replay of a graph exec runs, as far as its nodes are learned: its instance (which
    tells apart execs whose handle the driver reused), kernel nodes, blocks, and per kernel slot
    (node executions, blocks): what a step's requests share of it."""

    instance: int
    nodes: int
    blocks: int
    kernels: dict[int, tuple[int, int]]


NO_REPLAY = ReplayShape(0, 0, 0, {})  # an exec the census does not count


@dataclasses.dataclass
class NodeCensus:
    node: int
    slot: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    executions: int = 0
    grid_ids: set[int] = dataclasses.field(default_factory=set)
    # folded in from replays no longer kept in detail
    matched: int = 0
    mismatched: int = 0
    sampled: int = 0
    unrecorded: int = 0
    unjoined: int = 0
    blocks_observed: int = 0
    device: DeviceTime = dataclasses.field(default_factory=DeviceTime)

    @property
    def blocks_per_execution(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclasses.dataclass
class GraphExec:
    """One graph exec as the daemon saw it: the exact census of its nodes, replays and node
    executions, and its last replays in detail (or, once final, their report rows)."""

    graph_exec: int
    instance: int = 0  # first-seen order in the process, from 1 (a reused handle gets a new one)
    alive: bool = True
    destroyed_at: float = 0.0  # clock when its destroy record was read (or its handle was reused)
    # destroyed and final: its replays in detail as report rows, by replay number (or -position)
    final: dict[int, dict] | None = None
    nodes: dict[int, NodeCensus] = dataclasses.field(default_factory=dict)
    first_launch_id: int = 0
    last_launch_id: int = 0
    replays_seen: int = 0  # GRAPHS_LAUNCH_BEGIN records
    replays_implied: int = 0  # of which not recorded node by node: they ran the learned nodes
    recorded_executions: int = 0  # node executions with a node record of their own
    order: list[int] = dataclasses.field(default_factory=list)  # node order of the longest replay seen
    order_stable: bool = True
    device_order: list[int] = dataclasses.field(default_factory=list)
    device_order_stable: bool = True
    events_unmatched: int = 0
    # implied replays folded before any node was learned: their executions, once nodes are
    # known, are counted unjoined (never judged)
    folded_unlearned: int = 0
    recent: collections.OrderedDict = dataclasses.field(
        default_factory=collections.OrderedDict
    )  # replay -> ReplayRecord
    nodes_version: int = 0  # bumped when a node or a node's grid id is learned
    _learned: tuple = ()
    _learned_version: int = -1

    def learned(self) -> tuple[NodeExecution, ...]:
        """The node executions of a replay not recorded node by node: one shared tuple per exec
        (an implied replay holds none of its own, so a replay costs the same whatever the
        graph's size)."""
        if self._learned_version != self.nodes_version:
            self._learned = tuple(
                NodeExecution(
                    node.node,
                    min(node.grid_ids) if node.grid_ids else 0,
                    node.slot,
                    node.blocks_per_execution,
                    len(node.grid_ids) == 1,
                )
                for node in self.nodes.values()
            )
            self._learned_version = self.nodes_version
        return self._learned

    def executions(self, record: ReplayRecord) -> Sequence[NodeExecution]:
        return self.learned() if record.implied else record.executions

    @property
    def replays(self) -> int:
        if self.replays_seen:
            return self.replays_seen
        return self.last_launch_id - self.first_launch_id + 1 if self.last_launch_id else 0

    @property
    def node_executions(self) -> int:
        return self.recorded_executions + self.replays_implied * len(self.nodes)

    @property
    def replays_nodes_unknown(self) -> int:
        """Replays whose node executions cannot be said: not recorded, and no node ever learned."""
        return 0 if self.nodes else self.replays_implied

    def executions_of(self, node: NodeCensus) -> int:
        return node.executions + self.replays_implied
