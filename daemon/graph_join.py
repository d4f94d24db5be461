"""The graph join: per process, what its CUDA graphs did: graph execs, replays and node executions from the
launch records, each node execution joined to its device block events.

The injector makes one host callback per replay (a graph launch record) and none per node,
except in the replays it records node by node to learn an exec's nodes (the first, normally;
every replay under the launch trace): those records say so (GRAPH_NODES_RECORDED) and their
node records follow. A graph exec's kernel nodes and their grid ids never change, so a replay
not recorded node by node ran the exec's learned nodes: its node executions are implied, in the
census and in the join alike. Replays of an exec whose nodes were never learned are counted as
such (their node executions are unknown, never guessed).

The join key is the launch key (gpuobs.launch_key: grid id and replay number), never the
order of arrival. Launch records are drained before events in each pass (a launch record is
written before its kernel can run), so an event's node execution is normally known when the
event arrives; events that match none are held until their replay is finished with and then
counted as unmatched.

Memory is bounded: per graph exec the last KEEP_REPLAYS replays are kept in detail; older ones
are folded into totals, but only once the daemon has caught up with the event rings and the device
has begun a later replay (settle()): a fast program launches thousands of replays ahead of its
device, so a replay out of the window may not have run yet, and a switch to an event mode that
lands meanwhile gives it events. A daemon that never catches up folds anyway past MAX_UNSETTLED
replays.

Graph execs are told apart by their first-seen order (`instance`), not by their handle: the
driver may give a destroyed exec's handle to a new one, which gets a GraphExec of its own. A
destroyed exec's GraphExec becomes final once the daemon has caught up with the event rings
FINAL_AFTER_S after the destroy record: its replays in detail are kept as rows, their events
let go, its grid ids no longer looked up; at MAX_GRAPHS the oldest final one makes room.

A node execution is judged by the device's own evidence, not by the mode the host saw when it
launched the replay: a switch lands while replays are queued on the GPU, so a replay launched in
one mode may run its nodes in another. An execution with events of its (grid id, replay) ran in
an event mode: it is matched when every block entered, mismatched otherwise, sampled when its
events are those of sampled blocks (`sampled` in a kernel without access hooks: 1 in 2^shift of
its blocks, never judged whole); one without any event is unrecorded (it ran in a mode that
records none, its kernel was filtered out, or every one of its events was dropped, which the drop counters say).

A node execution's device time (DeviceTime) is its span, first block enter to last block event,
when every block's events came; folded into its node when its replay leaves the window, so that
it outlives the spans.

The census (graph execs, replays, node executions per node) is exact and vectorized. The join
is per node execution in Python, so it runs under the daemon's analysis budget: node executions
of launch batches beyond the budget, and the replays that had events in an event batch the
budget skipped (those: found in one vectorized pass, and remembered for replays whose launch
record comes later), are counted as unjoined rather than judged.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator

import numpy as np
from gpuobs.launch_key import REPLAY_MASK, group_by_launch, key_grid_id, key_replay
from gpuobs.segment import GRAPH_NODES_RECORDED, LAUNCH_DTYPE, LAUNCH_KINDS, REPLAY_SPAN_DTYPE, field_names

from .analysis import Analysis
from .analysis_budget import AnalysisBudget
from .graph_exec import (
    BLOCK_ENTER,
    BLOCK_EXIT,
    LAUNCH_EVENT,
    MATCHED,
    MISMATCHED,
    NO_REPLAY,
    SAMPLED,
    STATUSES,
    UNJOINED,
    UNRECORDED,
    DeviceSpan,
    DeviceTime,
    GraphExec,
    NodeCensus,
    NodeExecution,
    ReplayRecord,
    ReplayShape,
    covered_ns,
    span_parts,
)
from .time_budget import TimeBudget

GRAPH_NODE = LAUNCH_KINDS["graph_node"]
GRAPH_LAUNCH = LAUNCH_KINDS["graph_launch"]
EXEC_CREATED = LAUNCH_KINDS["graph_exec_created"]
EXEC_DESTROYED = LAUNCH_KINDS["graph_exec_destroyed"]
REPLAY_SPAN = LAUNCH_KINDS["replay_span"]
MAX_SHAPES_CACHED = 1024  # replay shapes kept between batches (one per exec instance in use)


@dataclasses.dataclass(frozen=True)
class GraphJoinReport:
    """The graph execs of one process as a whole: per kernel slot its launches that were graph
    node executions; execs kept, not counted (MAX_GRAPHS) and let go."""

    executions_per_kernel: dict[int, int]
    execs: int
    execs_dropped: int
    execs_forgotten: int


class GraphJoin(Analysis):
    """All graph execs of one process."""

    MAX_GRAPHS = 4096  # execs kept: the oldest final one makes room, else a new exec is not counted
    FINAL_AFTER_S = 1.0  # a destroyed exec's last events are read by then (and the rings caught up) ...
    FINAL_LATEST_S = 30.0  # ... or by then, when no later replay has begun to say its last one finished
    KEEP_REPLAYS = 1024  # per graph exec, replays kept in detail
    MAX_UNSETTLED = 8 * 1024  # replays out of the window waiting for the daemon to catch up
    SWEEP_SPANS = 1 << 16  # spans held before unclaimed ones are looked for ...
    SWEEP_EVERY_S = 2.0  # ... at most this often (a sweep walks every kept replay)
    AHEAD_REPLAYS = 1 << 20  # events of a replay this far past the last launch record read wait for it
    KEEP_DEVICE_SPANS = 1 << 16  # replays' spans from the injector (ReplaySpan records) kept, newest

    def __init__(
        self,
        budget: TimeBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        exits_hooked: bool = False,
    ) -> None:
        """`exits_hooked`: the process says it records block exits (so does one that shows one)."""
        self.budget = budget or AnalysisBudget()
        self.clock = clock
        self.exits_recorded = exits_hooked
        self.device_time = DeviceTime()  # of every node execution folded, whatever exec it was of
        self.replay_begun = 0  # replays numbered below it have had all their events read (settle())
        self.last_sweep = 0.0
        self.execs: dict[int, GraphExec] = {}  # by instance: every exec kept, first seen first
        self.by_handle: dict[int, GraphExec] = {}  # the exec a handle's records go to now
        self._instances = itertools.count(1)
        self.graphs_dropped = 0  # launch records of execs not counted (MAX_GRAPHS kept, none final)
        self.graphs_forgotten = 0  # final execs let go to make room
        self.spans: dict[int, DeviceSpan] = {}
        self.span_replays: collections.Counter[int] = collections.Counter()  # low replay bits -> spans held
        self.grid_owner: dict[int, GraphExec] = {}  # node grid id -> its exec (not final ones)
        self._owners_version = 0  # bumped whenever grid_owner changes
        self._shapes: dict[int, tuple[int, ReplayShape]] = {}  # instance -> (nodes_version, shape)
        self.unsettled: collections.deque[tuple[GraphExec, ReplayRecord]] = collections.deque()
        self.newest_replay = 0  # the highest replay number of a graph launch record read
        self.destroyed: collections.deque[GraphExec] = collections.deque()  # destroyed, not final yet
        # (instance, low replay bits) of skipped events whose replay had no record yet
        self.skipped_ahead: collections.OrderedDict[tuple[int, int], None] = collections.OrderedDict()
        self._owner_arrays = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64))
        self._owner_arrays_version = 0
        # replay -> (first entry, last entry, launches) on the device clock: each replay's span as
        # the injector read it (`counter` and up), for replays without block events
        self.device_spans: collections.OrderedDict[int, tuple[int, int, int]] = collections.OrderedDict()

    # -- launch records ------------------------------------------------------------------------
    def _graph(self, graph_exec: int) -> GraphExec | None:
        """The exec this handle's records go to; a new one for a handle not seen yet."""
        graph = self.by_handle.get(graph_exec)
        return graph if graph is not None else self._new_exec(graph_exec)

    def _new_exec(self, graph_exec: int) -> GraphExec | None:
        if len(self.execs) >= self.MAX_GRAPHS and not self._forget_one():
            self.graphs_dropped += 1
            return None
        graph = GraphExec(graph_exec, instance=next(self._instances))
        self.execs[graph.instance] = graph
        self.by_handle[graph_exec] = graph
        return graph

    def _forget_one(self) -> bool:
        """Lets the oldest final exec go; False when none is final."""
        oldest = next((graph for graph in self.execs.values() if graph.final is not None), None)
        if oldest is None:
            return False
        del self.execs[oldest.instance]
        if self.by_handle.get(oldest.graph_exec) is oldest:
            del self.by_handle[oldest.graph_exec]
        self.graphs_forgotten += 1
        return True

    def on_launches(self, launches: np.ndarray) -> None:
        kinds = launches["kind"]
        spans = launches[kinds == REPLAY_SPAN]
        if len(spans):
            self._keep_device_spans(spans.view(REPLAY_SPAN_DTYPE))
        rows = launches[(kinds >= GRAPH_NODE) & (kinds <= EXEC_DESTROYED)]
        if not len(rows):
            return
        # a creation record may start a new exec for a reused handle: what comes before it
        # belongs to the old one, so each creation starts a run of its own
        created = np.flatnonzero(rows["kind"] == EXEC_CREATED).tolist()
        bounds = sorted({0, *created, len(rows)})
        for start, end in zip(bounds[:-1], bounds[1:]):
            run = rows[start:end]
            self._count(run)  # exact, whatever the budget
            with self.budget.spending():
                if self.budget.allows():
                    self._join_launches(run)
                else:
                    self._count_unjoined(run)

    def _keep_device_spans(self, spans: np.ndarray) -> None:
        """Replay spans the injector read, kept for the replays' rows (newest KEEP_DEVICE_SPANS):
        a replay's span arrives after its graph launch record, before the snapshot that says it
        finished, so a replay settles with it."""
        for replay, first, last, launches in zip(
            spans["replay"].tolist(),
            spans["first_entry_ns"].tolist(),
            spans["last_entry_ns"].tolist(),
            spans["launches"].tolist(),
            strict=True,
        ):
            self.device_spans[replay] = (first, last, launches)
        while len(self.device_spans) > self.KEEP_DEVICE_SPANS:
            self.device_spans.popitem(last=False)

    def _created(self, graph_exec: int) -> None:
        """A graph exec instantiated: a GraphExec of its own, unless its handle's has seen
        nothing yet (a handle reused after a destroy, or whose destroy record was lost, starts
        a new one; the old one is destroyed)."""
        graph = self.by_handle.get(graph_exec)
        if graph is not None and graph.alive and not graph.replays and not graph.nodes:
            return
        if graph is not None:
            self._destroyed(graph)
        self._new_exec(graph_exec)

    def _destroyed(self, graph: GraphExec) -> None:
        if graph.alive:
            graph.alive = False
            graph.destroyed_at = self.clock()
            self.destroyed.append(graph)

    def _count(self, rows: np.ndarray) -> None:
        """The exact census, one numpy pass: lifetimes, replays, node executions per node (of a
        run in which only the first record may be a creation)."""
        kinds = rows["kind"]
        for kind, graph_exec in rows[(kinds == EXEC_CREATED) | (kinds == EXEC_DESTROYED)][
            ["kind", "graph_exec"]
        ].tolist():
            if kind == EXEC_CREATED:
                self._created(int(graph_exec))
            else:
                graph = self._graph(int(graph_exec))
                if graph is not None:
                    self._destroyed(graph)
        graph_launches = rows[kinds == GRAPH_LAUNCH]
        if len(graph_launches):
            self.newest_replay = max(self.newest_replay, int(graph_launches["replay"].max()))
        implied = (graph_launches["flags"] & GRAPH_NODES_RECORDED) == 0
        execs, counts = np.unique(graph_launches["graph_exec"], return_counts=True)
        implied_counts = dict(zip(*np.unique(graph_launches["graph_exec"][implied], return_counts=True)))
        for graph_exec, count in zip(execs.tolist(), counts.tolist()):
            graph = self._graph(graph_exec)
            if graph is not None:
                graph.replays_seen += count
                graph.replays_implied += int(implied_counts.get(graph_exec, 0))
        nodes = rows[kinds == GRAPH_NODE]
        if not len(nodes):
            return
        order = np.lexsort((nodes["graph_node"], nodes["graph_exec"]))
        nodes = nodes[order]
        pairs = np.stack([nodes["graph_exec"], nodes["graph_node"]], axis=1)
        starts = np.flatnonzero(np.concatenate([[True], np.any(pairs[1:] != pairs[:-1], axis=1)]))
        ends = np.append(starts[1:], len(nodes))
        launch_ids = nodes["graph_launch_id"].astype(np.int64)
        low, high = np.minimum.reduceat(launch_ids, starts), np.maximum.reduceat(launch_ids, starts)
        grid_ids = nodes["grid_id"]
        one_grid_id = np.minimum.reduceat(grid_ids, starts) == np.maximum.reduceat(grid_ids, starts)
        for start, end, first_id, last_id, single in zip(
            starts.tolist(), ends.tolist(), low.tolist(), high.tolist(), one_grid_id.tolist()
        ):
            row = nodes[start]
            graph = self._graph(int(row["graph_exec"]))
            if graph is None:
                continue
            node = int(row["graph_node"])
            entry = graph.nodes.get(node)
            if entry is None:
                graph.nodes_version += 1
                entry = graph.nodes[node] = NodeCensus(
                    node,
                    int(row["kernel_slot"]),
                    (int(row["grid_x"]), int(row["grid_y"]), int(row["grid_z"])),
                    (int(row["block_x"]), int(row["block_y"]), int(row["block_z"])),
                )
            entry.executions += end - start
            graph.recorded_executions += end - start
            graph.first_launch_id = min(graph.first_launch_id or first_id, first_id)
            graph.last_launch_id = max(graph.last_launch_id, last_id)
            # a node keeps its grid id across replays: normally one value per group
            for grid_id in [int(grid_ids[start])] if single else np.unique(grid_ids[start:end]).tolist():
                if len(entry.grid_ids) < 4 and grid_id not in entry.grid_ids:
                    entry.grid_ids.add(grid_id)
                    graph.nodes_version += 1
                if grid_id not in self.grid_owner and graph.final is None:
                    self.grid_owner[grid_id] = graph
                    self._owners_version += 1
        # (replays kept before their exec's nodes were learned ran those nodes too: an implied
        # replay's executions are the learned ones whenever it is judged)

    def _count_unjoined(self, rows: np.ndarray) -> None:
        """Node executions of launch batches the budget skipped: recorded ones and implied ones."""
        nodes = rows[rows["kind"] == GRAPH_NODE]
        pairs, counts = np.unique(
            np.stack([nodes["graph_exec"], nodes["graph_node"]], axis=1), axis=0, return_counts=True
        )
        for (graph_exec, node), count in zip(pairs.tolist(), counts.tolist()):
            graph = self.by_handle.get(graph_exec)
            if graph is not None and node in graph.nodes:
                graph.nodes[node].unjoined += count
        launches = rows[(rows["kind"] == GRAPH_LAUNCH) & ((rows["flags"] & GRAPH_NODES_RECORDED) == 0)]
        execs, counts = np.unique(launches["graph_exec"], return_counts=True)
        for graph_exec, count in zip(execs.tolist(), counts.tolist()):
            graph = self.by_handle.get(graph_exec)
            for node in graph.nodes.values() if graph is not None else ():
                node.unjoined += count

    def _join_launches(self, rows: np.ndarray) -> None:
        """Per replay and node execution, what the join needs (in order: one graph launch, then
        its node launches)."""
        names = field_names(rows.dtype)
        for values in rows.tolist():
            row = dict(zip(names, values))
            kind = int(row["kind"])
            if kind not in (GRAPH_LAUNCH, GRAPH_NODE):
                continue
            graph = self.by_handle.get(int(row["graph_exec"]))
            if graph is None:
                continue
            if kind == GRAPH_LAUNCH:
                record = self._keep(
                    graph, ReplayRecord(int(row["replay"]), 0, int(row["host_time_ns"]), int(row["mode"]))
                )
                record.implied = not int(row["flags"]) & GRAPH_NODES_RECORDED
            else:
                self._node_execution(graph, row)

    def _node_execution(self, graph: GraphExec, row: dict) -> None:
        node, grid_id, launch_id = int(row["graph_node"]), int(row["grid_id"]), int(row["graph_launch_id"])
        replay = int(row["replay"])
        record = graph.recent.get(replay) if replay else None
        if record is None:
            # no graph launch record for this replay (dropped, or skipped by the budget)
            record = self._keep(graph, ReplayRecord(replay, launch_id, int(row["host_time_ns"]), int(row["mode"])))
        record.launch_id = launch_id
        recordable = replay != 0 and int(row["kernel_slot"]) != 0xFFFFFFFF
        record.executions.append(
            NodeExecution(node, grid_id, int(row["kernel_slot"]), graph.nodes[node].blocks_per_execution, recordable)
        )

    def _keep(self, graph: GraphExec, record: ReplayRecord) -> ReplayRecord:
        key = record.replay if record.replay else -record.number  # unknown replays stay apart
        if key in graph.recent:
            return graph.recent[key]
        if record.replay and self.skipped_ahead.pop((graph.instance, record.replay & REPLAY_MASK), 0) is None:
            record.tainted = True  # some of its events came, and were skipped, before it did
        graph.recent[key] = record
        while len(graph.recent) > self.KEEP_REPLAYS:
            _, oldest = graph.recent.popitem(last=False)
            self.unsettled.append((graph, oldest))
        while len(self.unsettled) > self.MAX_UNSETTLED:
            self._fold(*self.unsettled.popleft())
        return record

    def settle(self, replay_begun: int) -> None:
        """The daemon has read every event ring to its end, and the device had begun replay
        `replay_begun` before: replays out of the window and numbered below it are final, and so
        are the execs destroyed at least FINAL_AFTER_S ago whose replays are (or, for an exec
        whose last replay was the process's last, FINAL_LATEST_S ago: no later replay may come to
        say it finished)."""
        self.replay_begun = max(self.replay_begun, replay_begun)
        # the queue is in replay order per exec, and nearly so across execs: a replay found not
        # begun stops the fold, and what follows it waits for a later pass (or MAX_UNSETTLED)
        while self.unsettled and self.unsettled[0][1].replay < replay_begun:
            self._fold(*self.unsettled.popleft())
        now = self.clock()
        while self.destroyed and now - self.destroyed[0].destroyed_at >= self.FINAL_AFTER_S:
            graph = self.destroyed[0]
            newest = max((record.replay for record in graph.recent.values()), default=0)
            if newest >= replay_begun and now - graph.destroyed_at < self.FINAL_LATEST_S:
                break
            self._finalize(self.destroyed.popleft())

    def _finalize(self, graph: GraphExec) -> None:
        """A destroyed exec's results are fixed: its replays in detail become report rows, their
        judgements go into the totals, its events held go (those no replay claims counted as
        unmatched), and its grid ids are no longer looked up for events."""
        rows: dict[int, dict] = {}
        previous_end = 0
        for record in graph.recent.values():
            row = self._replay_row(graph, record, list(self.judged(graph, record)), previous_end)
            rows[record.replay or -record.number] = row
            previous_end = row["device_end_ns"] or previous_end
            self._fold(graph, record)
        graph.recent.clear()
        graph.events_unmatched = self.unmatched_events(graph, final=True)
        for key in [key for key in self.spans if self.grid_owner.get(key_grid_id(key)) is graph]:
            self._drop_span(key)
        for grid_id in [grid_id for node in graph.nodes.values() for grid_id in node.grid_ids]:
            if self.grid_owner.get(grid_id) is graph:
                del self.grid_owner[grid_id]
                self._owners_version += 1
        graph.final = rows

    def _fold(self, graph: GraphExec, record: ReplayRecord) -> None:
        """A replay leaves the detailed window: its results go into the totals, its spans away."""
        self._check_orders(graph, record)
        if record.implied and not graph.nodes:
            graph.folded_unlearned += 1
        has_spans = self._has_spans(record)
        for node_index, time_of in self._device_times(graph, record, settled=True).items():
            graph.nodes[node_index].device += time_of
            self.device_time += time_of
        for execution, status, observed in self.judged(graph, record):
            node = graph.nodes[execution.node]
            setattr(node, status, getattr(node, status) + 1)
            node.blocks_observed += observed
            if has_spans:
                self._drop_span(execution.key(record.replay))

    def replay_shape(self, graph_exec: int) -> ReplayShape:
        """What a replay of this exec runs now, as learned so far: its instance, kernel nodes,
        blocks, and (executions, blocks) per kernel slot; nothing for an exec not counted."""
        graph = self.by_handle.get(graph_exec)
        if graph is None:
            return NO_REPLAY
        cached = self._shapes.get(graph.instance)
        if cached is not None and cached[0] == graph.nodes_version:
            return cached[1]
        kernels: dict[int, tuple[int, int]] = {}
        for node in graph.nodes.values():
            executions, blocks = kernels.get(node.slot, (0, 0))
            kernels[node.slot] = (executions + 1, blocks + node.blocks_per_execution)
        shape = ReplayShape(graph.instance, len(graph.nodes), sum(b for _, b in kernels.values()), kernels)
        if len(self._shapes) >= MAX_SHAPES_CACHED:
            self._shapes.clear()
        self._shapes[graph.instance] = (graph.nodes_version, shape)
        return shape

    def graph_exec_of(self, grid_id: int) -> int:
        """The graph exec a grid id is a node of (0: an eager launch, or an exec now final)."""
        graph = self.grid_owner.get(grid_id)
        return graph.graph_exec if graph is not None else 0

    def node_records(self) -> np.ndarray:
        """A graph node launch record (replay 0, host time 0) per grid id of every node learned,
        of the execs not final: what a recording that begins now needs to tell those nodes'
        events from eager launches' (their own node records were read before it began)."""
        rows = [
            (graph.graph_exec, node, grid_id)
            for graph in list(self.execs.values())
            if graph.final is None
            for node in list(graph.nodes.values())
            for grid_id in sorted(node.grid_ids)
        ]
        records = np.zeros(len(rows), dtype=LAUNCH_DTYPE)
        records["kind"] = GRAPH_NODE
        columns = {
            "graph_exec": [graph_exec for graph_exec, _, _ in rows],
            "graph_node": [n.node for _, n, _ in rows],
            "grid_id": [grid_id for _, _, grid_id in rows],
            "kernel_slot": [n.slot for _, n, _ in rows],
        }
        for axis, name in enumerate("xyz"):
            columns[f"grid_{name}"] = [n.grid[axis] for _, n, _ in rows]
            columns[f"block_{name}"] = [n.block[axis] for _, n, _ in rows]
        for name, values in columns.items():
            records[name] = values
        return records

    def report(self) -> GraphJoinReport:
        executions: dict[int, int] = collections.defaultdict(int)
        for graph in list(self.execs.values()):
            for node in list(graph.nodes.values()):
                executions[node.slot] += graph.executions_of(node)
        return GraphJoinReport(dict(executions), len(self.execs), self.graphs_dropped, self.graphs_forgotten)

    # -- device events -------------------------------------------------------------------------
    def node_grid_ids(self) -> np.ndarray:
        """Grid ids that belong to graph nodes (their events carry a meaningful replay number)."""
        return self._grid_owners()[0]

    def _grid_owners(self) -> tuple[np.ndarray, np.ndarray]:
        """Node grid ids, sorted, and the instance of each one's exec (for vectorized lookups)."""
        if self._owner_arrays_version != self._owners_version:
            grid_ids = np.fromiter(self.grid_owner, dtype=np.uint64, count=len(self.grid_owner))
            owners = np.fromiter(
                (graph.instance for graph in self.grid_owner.values()), dtype=np.uint64, count=len(self.grid_owner)
            )
            order = np.argsort(grid_ids)
            self._owner_arrays = (grid_ids[order], owners[order])
            self._owner_arrays_version = self._owners_version
        return self._owner_arrays

    def on_events(self, events: np.ndarray, kind_counts: np.ndarray | None = None) -> None:
        if not self.exits_recorded and len(events):
            self.exits_recorded = bool(
                kind_counts[BLOCK_EXIT] if kind_counts is not None else (events["kind"] == BLOCK_EXIT).any()
            )
        if not self.grid_owner or not len(events):
            return
        if kind_counts is not None and not kind_counts[[BLOCK_ENTER, BLOCK_EXIT, LAUNCH_EVENT]].any():
            return
        with self.budget.spending():
            if self.budget.allows():
                self._join_events(events)
            else:
                self._taint(self._node_events(events))

    def _node_events(self, events: np.ndarray) -> np.ndarray:
        """The block and launch events of graph nodes (those the join is about)."""
        kinds = events["kind"]
        return events[
            ((kinds == BLOCK_ENTER) | (kinds == BLOCK_EXIT) | (kinds == LAUNCH_EVENT))
            & np.isin(events["grid_id"], self.node_grid_ids())
        ]

    def _taint(self, skipped: np.ndarray) -> None:
        """Events the budget skipped: exactly the replays they belong to go unjudged (unjoined),
        found in one vectorized pass; every other replay is still judged on its own events."""
        if not len(skipped):
            return
        grid_ids, owners = self._grid_owners()
        owner_of = owners[np.searchsorted(grid_ids, skipped["grid_id"].astype(np.uint64))]
        pairs = np.unique(np.stack([owner_of, skipped["replay"].astype(np.uint64)], axis=1), axis=0)
        by_instance: dict[int, set[int]] = collections.defaultdict(set)  # instance -> low 32 bits of replays
        for owner, replay in pairs.tolist():
            if replay:
                by_instance[owner].add(replay)
        found: set[tuple[int, int]] = set()
        graphs = [self.execs[instance] for instance in by_instance if instance in self.execs]
        for owner, record in self._held(graphs):
            if record.replay and record.replay & REPLAY_MASK in by_instance[owner.instance]:
                record.tainted = True
                found.add((owner.instance, record.replay & REPLAY_MASK))
        # replays whose launch record has not been read yet: tainted when it is (_keep)
        for instance, replays in by_instance.items():
            for replay in replays:
                if (instance, replay) not in found:
                    self.skipped_ahead[(instance, replay)] = None
        while len(self.skipped_ahead) > self.MAX_UNSETTLED:
            self.skipped_ahead.popitem(last=False)

    def _join_events(self, events: np.ndarray) -> None:
        block = self._node_events(events)
        if not len(block):
            return
        order, starts, uniques = group_by_launch(block["grid_id"], block["replay"].astype(np.uint64))  # all nodes'
        for key, part in zip(uniques, span_parts(block[order], starts)):
            span = self.spans.get(key)
            if span is None:
                span = self.spans[key] = DeviceSpan()
                self.span_replays[key_replay(key)] += 1
            span.merge(part)
        now = time.monotonic()
        if len(self.spans) > self.SWEEP_SPANS and now - self.last_sweep >= self.SWEEP_EVERY_S:
            self.last_sweep = now
            self._sweep()

    def _drop_span(self, key: int) -> None:
        if self.spans.pop(key, None) is not None:
            replay = key_replay(key)
            left = self.span_replays[replay] - 1
            if left:
                self.span_replays[replay] = left
            else:
                del self.span_replays[replay]

    def _has_spans(self, record: ReplayRecord) -> bool:
        """Whether any device event of this replay's number is held (most replays of a process
        in a mode without events have none: judged without a look per node)."""
        return bool(record.replay) and (record.replay & REPLAY_MASK) in self.span_replays

    def _claims(self, graph: GraphExec | None) -> dict[int, dict[int, ReplayRecord]]:
        """Per exec (instance), its replays still held (in a window or waiting to settle), by
        the low 32 bits of their replay number (what the device stamps)."""
        graphs = list(self.execs.values()) if graph is None else [graph]
        claims: dict[int, dict[int, ReplayRecord]] = {c.instance: {} for c in graphs}
        for owner, record in self._held(graphs):
            if record.replay:
                claims[owner.instance][record.replay & REPLAY_MASK] = record
        return claims

    def _held(self, graphs: list[GraphExec]) -> Iterator[tuple[GraphExec, ReplayRecord]]:
        """The replays of these graph execs still held: in their windows, then waiting to settle."""
        for graph in graphs:
            for record in graph.recent.values():
                yield graph, record
        wanted = {id(graph) for graph in graphs}
        for owner, record in self.unsettled:
            if id(owner) in wanted:
                yield owner, record

    def _claimed(self, key: int, claims: dict[int, dict[int, ReplayRecord]]) -> bool:
        """A span is claimed when a held replay of its grid id's exec ran a node of that grid id."""
        owner = self.grid_owner.get(key_grid_id(key))
        record = claims.get(owner.instance, {}).get(key_replay(key)) if owner is not None else None
        if record is None:
            return False
        # an implied replay ran every learned node, and this grid id is one of its exec's
        return record.implied or any(execution.grid_id == key_grid_id(key) for execution in record.executions)

    def _ahead(self, replay: int) -> bool:
        """Whether events of this replay (low 32 bits) may come before its launch record: it is
        numbered after every graph launch record read (the daemon reads the launch ring, then
        the event rings, and a replay launched in between has events but no record yet). Up to
        AHEAD_REPLAYS ahead, modulo 2^32 as the device stamps it; a number further off is no
        replay still to come."""
        return 0 < (replay - self.newest_replay) & REPLAY_MASK <= self.AHEAD_REPLAYS

    def _sweep(self) -> None:
        """Spans no kept replay claims are unmatched events: counted, then forgotten (not those
        of replays whose launch record may still come)."""
        claims = self._claims(None)
        for key in [k for k in self.spans if not self._claimed(k, claims) and not self._ahead(key_replay(k))]:
            span = self.spans[key]
            owner = self.grid_owner.get(key_grid_id(key))
            if owner is not None:
                owner.events_unmatched += span.events
            self._drop_span(key)

    # -- reading -------------------------------------------------------------------------------
    def execution_status(self, execution: NodeExecution, record: ReplayRecord) -> tuple[str, int]:
        """Judged by the device's evidence: events of this execution mean it ran in an event mode."""
        replay = record.replay
        span = self.spans.get(execution.key(replay)) if replay and execution.recordable else None
        observed = span.enters if span else 0
        if record.tainted:
            return UNJOINED, observed
        if span is None or not span.events or span.launches == span.events:
            return UNRECORDED, observed  # no block events (a launch event alone times it, no more)
        if span.sampled:
            return SAMPLED, observed
        return (MATCHED if observed == execution.blocks else MISMATCHED), observed

    def judged(self, graph: GraphExec, record: ReplayRecord) -> Iterator[tuple[NodeExecution, str, int]]:
        """Each node execution of a replay with its status and the blocks seen."""
        executions = graph.executions(record)
        if not self._has_spans(record):
            status = UNJOINED if record.tainted else UNRECORDED
            return ((execution, status, 0) for execution in executions)
        return ((execution, *self.execution_status(execution, record)) for execution in executions)

    def unmatched_events(self, graph: GraphExec, final: bool = False) -> int:
        """Events held for this graph's grid ids that no kept replay claims, plus those swept;
        until the exec is final, not those of replays whose launch record may still come."""
        claims = self._claims(graph)
        held = sum(
            span.events
            for key, span in self.spans.items()
            if self.grid_owner.get(key_grid_id(key)) is graph
            and not self._claimed(key, claims)
            and (final or not self._ahead(key_replay(key)))
        )
        return graph.events_unmatched + held

    def _check_orders(self, graph: GraphExec, record: ReplayRecord, orders: GraphExec | None = None) -> None:
        """Host order: node callbacks in launch order; device order: first block enter per node.
        Both compared with the longest replay seen (a replay cut off by the start of observation
        is shorter)."""
        orders = orders or graph  # where the orders seen so far are kept
        if not record.implied:  # an implied replay has no host order of its own
            order = [execution.node for execution in record.executions]
            if len(order) > len(orders.order):
                orders.order = order
            elif len(order) == len(orders.order) and order != orders.order:
                orders.order_stable = False
        if not self._has_spans(record):
            return
        firsts = []
        for execution in graph.executions(record):
            span = self.spans.get(execution.key(record.replay))
            if not execution.recordable or span is None or span.enters != execution.blocks:
                return  # only fully recorded replays say anything about device order
            firsts.append((span.first_ns, execution.node))
        device_order = [node for _, node in sorted(firsts)]
        if len(device_order) > len(orders.device_order):
            orders.device_order = device_order
        elif len(device_order) == len(orders.device_order) and device_order != orders.device_order:
            orders.device_order_stable = False

    def _device_times(self, graph: GraphExec, record: ReplayRecord, settled: bool = False) -> dict[int, DeviceTime]:
        """node -> the device time of its execution in this replay (DeviceTime.add): none for a
        replay without events; a replay the budget skipped events of has none timed. A replay
        still held is settled once the device had begun a later one when the rings were last
        read to their end."""
        times: dict[int, DeviceTime] = {}
        if not self._has_spans(record):
            return times
        settled = settled or record.replay < self.replay_begun
        for execution in graph.executions(record):
            span = self.spans.get(execution.key(record.replay)) if execution.recordable else None
            blocks = None if record.tainted else execution.blocks
            times.setdefault(execution.node, DeviceTime()).add(span, blocks, self.exits_recorded, settled)
        return times

    def node_device_times(self, graph: GraphExec) -> dict[int, DeviceTime]:
        """node -> the device time of its executions so far: folded ones and those of the
        replays still held (their spans may still grow: a replay held is timed once all its
        blocks are in)."""
        times = {node: dataclasses.replace(census.device) for node, census in graph.nodes.items()}
        for _, record in self._held([graph]):
            for node, time_of in self._device_times(graph, record).items():
                times[node] += time_of
        return times

    def device_total(self) -> DeviceTime:
        """The device time of every node execution of the process so far (execs let go included)."""
        total = dataclasses.replace(self.device_time)
        for graph, record in self._held(list(self.execs.values())):
            for time_of in self._device_times(graph, record).values():
                total += time_of
        return total

    def replay_summary(self, instance: int, replay: int) -> dict | None:
        """One replay still kept in detail (of the exec `instance`): its node executions, how
        many matched, blocks seen, and its span on the device clock (0 without events), from
        the same row `graphs` shows, so that a step's replays and the graph's agree."""
        graph = self.execs.get(instance)
        if graph is None or not replay:
            return None
        if graph.final is not None:
            row = graph.final.get(replay)
        else:
            record = graph.recent.get(replay)
            row = None if record is None else self._replay_row(graph, record, list(self.judged(graph, record)), 0)
        return (
            None
            if row is None
            else {
                "node_executions": row["node_executions"],
                "nodes_matched": row["nodes_matched"],
                "blocks_observed": sum(row["node_blocks"]),
                "joined": row["joined"],
                "mode": row["mode"],
                "device_start_ns": row["device_start_ns"],
                "device_end_ns": row["device_end_ns"],
                "device_busy_ns": row["busy_ns"],
            }
        )

    def _replay_row(
        self, graph: GraphExec, record: ReplayRecord, judged: list[tuple[NodeExecution, str, int]], previous_end: int
    ) -> dict:
        """One replay in detail, from its judged node executions (none for a replay without
        events: its nodes then show no blocks); previous_end: the last event of the replay
        before it, for the gap."""
        blocks, matched, start, end = [], 0, 0, 0
        launched: list[int] = []  # launch events' times, where no execution has block events
        runs: list[tuple[int, int]] | None = []  # each execution's own run; None once one is not whole
        executions = graph.executions(record)
        for execution, status, observed in judged:
            matched += status == MATCHED
            blocks.append(observed)
            span = self.spans.get(execution.key(record.replay)) if record.replay else None
            if span and span.enters and not span.sampled:  # a sample of blocks spans nothing
                start = span.first_ns if not start else min(start, span.first_ns)
                end = max(end, span.last_ns)
            elif span and span.launches and not span.enters + span.exits:
                launched.append(span.first_ns)
            if runs is None:
                continue
            if span is not None and status == MATCHED and self.exits_recorded and span.whole(execution.blocks, True):
                runs.append((span.first_ns, span.last_ns))
            else:
                runs = None
        device = self.device_spans.get(record.replay) if record.replay else None
        if not start and device is not None and executions and device[2] == len(executions):
            # `counter` and up, no block events: the injector's replay span, block (0,0,0)'s first
            # entry to its last over the replay's kernels; one that fewer launches folded into than
            # the replay has kernel nodes (a switch to `off` mid-replay) is not the replay's
            start, end = device[0], device[1]
        elif not start and launched:
            # `counter` with launch times: the first node's entry to the last node's, which leaves
            # out the last node's own run (and counts the waits between nodes, as a span does)
            start, end = min(launched), max(launched)
        if len(blocks) < len(executions):
            blocks = [0] * len(executions)
        return {
            "replay": record.replay,
            "launch_id": record.launch_id,
            "host_time_ns": record.host_time_ns,
            "mode": record.mode,
            "node_executions": len(executions),
            "nodes_matched": matched,
            "joined": not record.tainted,
            "node_blocks": blocks,
            "device_start_ns": start,
            "device_end_ns": end,
            "span_ns": end - start if start else 0,
            # busy: the time some node execution ran, known only where every one ran whole with its
            # blocks' exits recorded (`blocks` mode): in a replay's span, the gaps between nodes are
            # idle (launch latency, a host wait for a conditional node) and do not count
            "busy_ns": covered_ns(runs) if runs else None,
            "gap_ns": start - previous_end if start and previous_end else 0,
        }

    def exec_report(self, graph: GraphExec, replays: int) -> dict:
        """Totals over every replay seen, and the last `replays` in detail."""
        totals = {status: 0 for status in STATUSES}
        per_node = {
            node: {status: graph.nodes[node].__dict__[status] for status in totals}
            | {"blocks_observed": graph.nodes[node].blocks_observed}
            for node in graph.nodes
        }
        order_check = GraphExec(
            graph.graph_exec,
            order=list(graph.order),
            order_stable=graph.order_stable,
            device_order=list(graph.device_order),
            device_order_stable=graph.device_order_stable,
        )
        details = list(graph.final.values()) if graph.final is not None else []
        # implied replays without any event: every learned node gets the same status, added once
        eventless = {UNRECORDED: 0, UNJOINED: 0}

        def count(record: ReplayRecord) -> Iterator[tuple[NodeExecution, str, int]]:
            if record.implied and not self._has_spans(record):
                eventless[UNJOINED if record.tainted else UNRECORDED] += 1
                return iter(())
            return self.judged(graph, record)

        for owner, record in self.unsettled:
            if owner is graph:
                for execution, status, observed in count(record):
                    per_node[execution.node][status] += 1
                    per_node[execution.node]["blocks_observed"] += observed
        previous_end = 0
        for record in graph.recent.values():
            self._check_orders(graph, record, order_check)
            judged = list(count(record))
            for execution, status, observed in judged:
                per_node[execution.node][status] += 1
                per_node[execution.node]["blocks_observed"] += observed
            details.append(self._replay_row(graph, record, judged, previous_end))
            previous_end = details[-1]["device_end_ns"] or previous_end
        eventless[UNJOINED] += graph.folded_unlearned
        for execution in graph.learned():
            for status, replays_of_status in eventless.items():
                per_node[execution.node][status] += replays_of_status
        for node in per_node.values():
            for status in totals:
                totals[status] += node[status]
        return {
            "totals": totals,
            "per_node": per_node,
            "replays": details[-replays:] if replays else [],
            "order": order_check.order,
            "order_stable": order_check.order_stable,
            "device_order_stable": order_check.device_order_stable,
            "events_unmatched": self.unmatched_events(graph),
        }
