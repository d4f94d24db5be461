"""The graph join on hand-made records: what must count as matched, mismatched, unrecorded,
unjoined and unmatched, and how graph execs come and go."""

from __future__ import annotations

import numpy as np
from gpuobs.daemon.analysis import ALL_REPLAYS
from gpuobs.daemon.graph_join import GraphJoin
from gpuobs.daemon.time_budget import UNLIMITED_SHARE, TimeBudget
from gpuobs.segment import LAUNCH_DTYPE, LAUNCH_KINDS
from gpuobs_testing.records import EXEC, NODES, block_events, graph_launches


def joining_everything() -> GraphJoin:
    """A join whose analysis budget never skips: these tests judge the join itself (with the
    daemon's default share, a loaded 2-core machine left a batch unjoined now and then)."""
    return GraphJoin(TimeBudget(share=UNLIMITED_SHARE, burst_s=1.0))


def test_replays_not_recorded_node_by_node_run_the_learned_nodes() -> None:
    """The injector records the first replay node by node; the others have a graph launch
    record only: their node executions are the learned nodes', joined the same way."""
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 6), recorded=range(1, 2)))
    events = [
        block_events(grid, replay, blocks, slot=slot, t0=replay * 1000 + 100 * slot)
        for replay in range(1, 6)
        for slot, (grid, blocks) in enumerate(NODES.values())
    ]
    join.on_events(np.concatenate(events))
    graph = join.by_handle[EXEC]
    assert (graph.replays, graph.node_executions, graph.replays_nodes_unknown) == (5, 10, 0)
    assert [graph.executions_of(node) for node in graph.nodes.values()] == [5, 5]
    report = join.exec_report(graph, replays=5)
    assert report["totals"] == {"matched": 10, "mismatched": 0, "sampled": 0, "unrecorded": 0, "unjoined": 0}
    assert [r["node_blocks"] for r in report["replays"]] == [[4, 3]] * 5
    assert report["events_unmatched"] == 0


def test_replays_kept_before_the_nodes_were_learned_run_them_once_learned() -> None:
    """The first replay came before the injector turned its node callbacks on: once a later
    replay has taught the nodes, the first one's node executions are known too."""
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 2), recorded=range(0)))
    join.on_launches(graph_launches(range(2, 4), recorded=range(2, 3)))
    graph = join.by_handle[EXEC]
    assert (graph.replays, graph.node_executions, graph.replays_nodes_unknown) == (3, 6, 0)
    report = join.exec_report(graph, replays=3)
    assert [r["node_executions"] for r in report["replays"]] == [2, 2, 2]


def test_replays_of_an_exec_never_learned_are_counted_not_guessed() -> None:
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 4), recorded=range(0)))
    graph = join.by_handle[EXEC]
    assert (graph.replays, graph.node_executions, graph.replays_nodes_unknown) == (3, 0, 3)


def test_matched_mismatched_and_unmatched_are_told_apart() -> None:
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 4)))
    (grid_a, blocks_a), (grid_b, blocks_b) = NODES.values()
    join.on_events(
        np.concatenate(
            [
                block_events(grid_a, 1, blocks_a, slot=0, t0=100),
                block_events(grid_b, 1, blocks_b, slot=1, t0=200),
                block_events(grid_a, 2, blocks_a - 1, slot=0, t0=1100),  # one enter lost: mismatched
                block_events(grid_b, 2, blocks_b, slot=1, t0=1200),
                # replay 3 recorded nothing for node b (the device's evidence: no event of its own, so it is
                # unrecorded, not judged); its events carry a replay number nobody launched (nor will:
                # it is not just ahead of the launch records read): unmatched
                block_events(grid_a, 3, blocks_a, slot=0, t0=2100),
                block_events(grid_b, 3 + GraphJoin.AHEAD_REPLAYS + 1, blocks_b, slot=1, t0=2200),
            ]
        )
    )
    graph = join.by_handle[EXEC]
    report = join.exec_report(graph, replays=3)
    assert report["totals"] == {"matched": 4, "mismatched": 1, "sampled": 0, "unrecorded": 1, "unjoined": 0}
    assert report["events_unmatched"] == blocks_b
    assert [r["node_blocks"] for r in report["replays"]] == [[4, 3], [3, 3], [4, 0]]
    first, second = report["replays"][:2]
    assert (first["device_start_ns"], first["device_end_ns"]) == (100, 200 + 2 * 10)
    assert second["gap_ns"] == 1100 - 220


def test_counter_mode_replays_are_unrecorded_not_mismatched() -> None:
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 3), mode="counter"))
    report = join.exec_report(join.by_handle[EXEC], replays=2)
    assert report["totals"] == {"matched": 0, "mismatched": 0, "sampled": 0, "unrecorded": 4, "unjoined": 0}


def test_the_devices_evidence_judges_a_replay_that_ran_in_another_mode_than_launched() -> None:
    """A switch lands while replays are queued: replay 1 was launched in counter but its nodes ran
    in blocks (their events are there: judged, matched); replay 2 was launched in blocks and ran
    in counter (no event: unrecorded, not mismatched)."""
    join = joining_everything()
    join.on_launches(
        np.concatenate([graph_launches(range(1, 2), mode="counter"), graph_launches(range(2, 3), mode="blocks")])
    )
    join.on_events(
        np.concatenate(
            [
                block_events(grid, 1, blocks, slot=slot, t0=100 * slot)
                for slot, (grid, blocks) in enumerate(NODES.values())
            ]
        )
    )
    report = join.exec_report(join.by_handle[EXEC], replays=2)
    assert report["totals"] == {"matched": 2, "mismatched": 0, "sampled": 0, "unrecorded": 2, "unjoined": 0}


def test_old_replays_fold_into_totals_and_free_their_spans() -> None:
    join = joining_everything()
    join.KEEP_REPLAYS = 4
    for replay in range(1, 11):
        join.on_launches(graph_launches(range(replay, replay + 1)))
        for slot, (grid_id, blocks) in enumerate(NODES.values()):
            join.on_events(block_events(grid_id, replay, blocks, slot=slot, t0=replay * 1000))
        join.settle(ALL_REPLAYS)  # the daemon read every ring to its end
    graph = join.by_handle[EXEC]
    assert len(graph.recent) == 4 and len(join.spans) == 4 * len(NODES)
    report = join.exec_report(graph, replays=16)
    assert report["totals"]["matched"] == 10 * len(NODES) and len(report["replays"]) == 4
    assert report["per_node"][0xA0]["blocks_observed"] == 10 * 4


def test_replays_leaving_the_window_wait_for_their_events() -> None:
    """A fast program launches many replays before the daemon reads their events: a replay that
    leaves the detailed window is judged only once the daemon has caught up."""
    join = joining_everything()
    join.KEEP_REPLAYS = 4
    join.on_launches(graph_launches(range(1, 11)))  # launch records of 10 replays read first
    for replay in range(1, 11):
        for slot, (grid_id, blocks) in enumerate(NODES.values()):
            join.on_events(block_events(grid_id, replay, blocks, slot=slot, t0=replay * 1000))
    join.settle(ALL_REPLAYS)
    report = join.exec_report(join.by_handle[EXEC], replays=16)
    assert report["totals"] == {
        "matched": 10 * len(NODES),
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 0,
        "unjoined": 0,
    }
    assert report["events_unmatched"] == 0 and not join.spans.keys() - {
        (grid_id << 32) | replay for replay in range(7, 11) for grid_id, _ in NODES.values()
    }


def test_replays_the_device_has_not_begun_are_not_judged_yet() -> None:
    """The host runs far ahead of its device (a GPU queues over a thousand replays of a short
    graph): the daemon has read every launch record and every event there is, but replays the
    device has not run yet are not final, whatever the window; a mode switch that lands meanwhile
    gives them events, which must find their replay (on the H200 a premature judgement left
    thousands of events unmatched)."""
    join = joining_everything()
    join.KEEP_REPLAYS = 4
    join.on_launches(graph_launches(range(1, 21), mode="counter"))  # 20 launched, 16 out of the window
    for _ in range(1, 6):  # the device ran 1-5 in counter (no events) and began 6: settled each time
        join.settle(6)
    graph = join.by_handle[EXEC]
    assert [record.replay for _, record in join.unsettled] == list(range(6, 17))
    for replay in range(6, 21):  # the switch to blocks lands: 6-20 run with events
        join.on_events(
            np.concatenate(
                [block_events(g, replay, b, slot=s, t0=replay * 1000) for s, (g, b) in enumerate(NODES.values())]
            )
        )
        join.settle(replay + 1)
    join.settle(ALL_REPLAYS)  # the producer is gone: every replay finished
    report = join.exec_report(graph, replays=4)
    assert report["totals"] == {
        "matched": 15 * len(NODES),
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 5 * len(NODES),
        "unjoined": 0,
    }
    assert report["events_unmatched"] == 0 and not join.unsettled


def test_events_read_before_their_launch_record_wait_for_it() -> None:
    """The daemon reads the launch ring, then the event rings: a replay launched in between has
    events but no launch record yet. A sweep for unclaimed events then must not count them (on
    the H200 a sweep in that gap left 1,582 events unmatched and their executions unrecorded);
    events of a replay number no launch will ever have are still counted."""
    join = joining_everything()
    join.SWEEP_SPANS, join.SWEEP_EVERY_S = 0, 0.0  # a sweep after every batch
    join.on_launches(graph_launches(range(1, 3)))
    ahead = [block_events(g, r, b, slot=s, t0=r * 1000) for r in (1, 2, 3) for s, (g, b) in enumerate(NODES.values())]
    join.on_events(np.concatenate(ahead + [block_events(12, 0x80000000, 2, slot=1, t0=0)]))  # replay 3: no record yet
    join.on_launches(graph_launches(range(3, 4), recorded=range(0)))
    join.on_events(block_events(11, 3, 0, slot=0, t0=0))  # (any batch) another sweep
    join.settle(ALL_REPLAYS)
    report = join.exec_report(join.by_handle[EXEC], replays=3)
    assert report["totals"] == {
        "matched": 3 * len(NODES),
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 0,
        "unjoined": 0,
    }
    assert report["events_unmatched"] == 2  # the stray replay number's


def test_a_destroyed_exec_is_final_once_the_device_is_past_its_last_replay() -> None:
    clock = Clock()
    join = GraphJoin(clock=clock)
    join.on_launches(np.concatenate([lifetime("created"), graph_launches(range(1, 4)), lifetime("destroyed")]))
    graph = join.by_handle[EXEC]
    clock.now += GraphJoin.FINAL_AFTER_S
    join.settle(3)  # its last replay may still be running
    assert graph.final is None
    join.settle(4)
    assert graph.final is not None
    # the process's last replay: nothing later begins, so time alone makes it final
    join.on_launches(
        np.concatenate([lifetime("created"), other_grid_ids(graph_launches(range(4, 6)), 100), lifetime("destroyed")])
    )
    last = join.by_handle[EXEC]
    clock.now += GraphJoin.FINAL_AFTER_S
    join.settle(5)
    assert last.final is None
    clock.now += GraphJoin.FINAL_LATEST_S
    join.settle(5)
    assert last.final is not None


def test_beyond_the_analysis_budget_executions_are_counted_unjoined_not_misjudged() -> None:
    join = GraphJoin(TimeBudget(share=0.0, burst_s=0.0))  # no time for the join at all
    join.on_launches(graph_launches(range(1, 4)))
    grid_id, blocks = NODES[0xA0]
    join.on_events(block_events(grid_id, 1, blocks, slot=0, t0=0))
    graph = join.by_handle[EXEC]
    assert (graph.replays, graph.node_executions) == (3, 3 * len(NODES))  # the join stays exact
    assert join.exec_report(graph, replays=3)["totals"] == {
        "matched": 0,
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 0,
        "unjoined": 3 * len(NODES),
    }


def test_a_skipped_event_batch_leaves_exactly_the_replays_it_held_unjoined() -> None:
    """A batch the budget skipped held events of replay 1 (one node) only: replay 1 is not judged;
    replays 2 and 3, whose events all came in joined batches, are, however close in time."""
    budget = TimeBudget(share=0.3, burst_s=1e9)
    join = GraphJoin(budget)
    join.on_launches(graph_launches(range(1, 3)))
    (grid_id, blocks), _ = NODES.values()
    budget.exhaust()  # this batch of events is skipped
    join.on_events(block_events(grid_id, 1, blocks, slot=0, t0=0))
    budget.refill()  # and the next ones are not
    join.on_launches(graph_launches(range(3, 4)))
    join.on_events(
        np.concatenate(
            [
                block_events(g, r, b, slot=s, t0=r * 1000)
                for r in (1, 2, 3)
                for s, (g, b) in enumerate(NODES.values())
                if (r, s) != (1, 0)
            ]
        )
    )
    report = join.exec_report(join.by_handle[EXEC], replays=3)
    assert report["totals"] == {
        "matched": 2 * len(NODES),
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 0,
        "unjoined": len(NODES),
    }
    assert [r["joined"] for r in report["replays"]] == [False, True, True]


def test_past_two_to_the_32_replays_a_skipped_batch_still_finds_its_replays() -> None:
    """The device stamps the low 32 bits of the replay number; a daemon that runs for days sees
    replay numbers beyond them, and the skipped batch must still name the right replay."""
    first = (1 << 32) + 5
    budget = TimeBudget(share=0.3, burst_s=1e9)
    join = GraphJoin(budget)
    join.on_launches(graph_launches(range(first, first + 2)))
    budget.exhaust()
    join.on_events(
        np.concatenate(
            [block_events(g, first & 0xFFFFFFFF, b, slot=s, t0=0) for s, (g, b) in enumerate(NODES.values())]
        )
    )
    budget.refill()
    join.on_events(
        np.concatenate(
            [block_events(g, (first + 1) & 0xFFFFFFFF, b, slot=s, t0=10_000) for s, (g, b) in enumerate(NODES.values())]
        )
    )
    report = join.exec_report(join.by_handle[EXEC], replays=2)
    assert [(r["replay"], r["joined"], r["nodes_matched"]) for r in report["replays"]] == [
        (first, False, 0),
        (first + 1, True, len(NODES)),
    ]


def test_implied_replays_share_the_learned_nodes_and_are_judged_like_recorded_ones() -> None:
    """A replay not recorded node by node holds no node executions of its own (a graph of
    hundreds of nodes replayed thousands of times must not cost the daemon an object per node
    execution), yet is judged node by node where it has events, and learns nodes found later."""
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 2001), recorded=range(1, 2)))
    graph = join.by_handle[EXEC]
    held = list(graph.recent.values()) + [record for _, record in join.unsettled]
    assert len(held) == 2000 and all(record.executions == [] for record in held if record.implied)
    assert {id(graph.executions(record)) for record in held if record.implied} == {id(graph.learned())}
    join.on_events(np.concatenate([block_events(g, 2000, b, slot=s, t0=0) for s, (g, b) in enumerate(NODES.values())]))
    report = join.exec_report(graph, replays=2)
    assert report["totals"] == {
        "matched": len(NODES),
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 1999 * len(NODES),
        "unjoined": 0,
    }
    assert [r["nodes_matched"] for r in report["replays"]] == [0, len(NODES)]
    assert report["events_unmatched"] == 0


def test_events_skipped_before_their_replay_is_known_leave_it_unjoined() -> None:
    """The drain may read a replay's events before its launch record (it reads a bounded number
    of launch batches per pass): a skipped batch still marks that replay, once it is known."""
    budget = TimeBudget(share=0.3, burst_s=1e9)
    join = GraphJoin(budget)
    join.on_launches(graph_launches(range(1, 2)))  # replay 1 learns the nodes
    (grid_id, blocks), _ = NODES.values()
    budget.exhaust()
    join.on_events(block_events(grid_id, 2, blocks, slot=0, t0=0))  # replay 2's, skipped
    budget.refill()
    join.on_launches(graph_launches(range(2, 3), recorded=range(0)))  # then its launch record
    join.on_events(
        np.concatenate(
            [
                block_events(g, r, b, slot=s, t0=r * 1000)
                for r in (1, 2)
                for s, (g, b) in enumerate(NODES.values())
                if (r, s) != (2, 0)
            ]
        )
    )
    report = join.exec_report(join.by_handle[EXEC], replays=2)
    assert report["totals"] == {
        "matched": len(NODES),
        "mismatched": 0,
        "sampled": 0,
        "unrecorded": 0,
        "unjoined": len(NODES),
    }


def test_replays_folded_before_their_nodes_were_learned_still_add_up() -> None:
    """Implied replays that left the window before any node was learned: once nodes are known,
    matched + mismatched + unrecorded + unjoined still equals the node executions."""
    join = joining_everything()
    join.KEEP_REPLAYS = 2
    join.on_launches(graph_launches(range(1, 5), recorded=range(0)))  # no node learned yet
    join.settle(ALL_REPLAYS)  # replays 1 and 2 are folded, with no node known
    join.on_launches(graph_launches(range(5, 6)))  # replay 5 is recorded: the nodes are learned
    graph = join.by_handle[EXEC]
    totals = join.exec_report(graph, replays=2)["totals"]
    assert sum(totals.values()) == graph.node_executions == 5 * len(NODES), totals


def lifetime(kind: str, graph_exec: int = EXEC) -> np.ndarray:
    record = np.zeros(1, dtype=LAUNCH_DTYPE)
    record["kind"] = LAUNCH_KINDS[f"graph_exec_{kind}"]
    record["graph_exec"] = graph_exec
    return record


def other_grid_ids(launches: np.ndarray, offset: int) -> np.ndarray:
    """The same records with the nodes' grid ids moved (another instantiation of the graph)."""
    moved = launches.copy()
    nodes = moved["kind"] == LAUNCH_KINDS["graph_node"]
    moved["grid_id"][nodes] += offset
    return moved


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_reused_exec_handle_gets_a_census_of_its_own() -> None:
    """The driver gave a destroyed exec's handle to a new one (in one launch batch): two
    censuses, each with its own replays, nodes and events; the old one becomes final a while
    after its destroy, keeps its replays as rows, and its grid ids are no longer looked up."""
    clock = Clock()
    join = GraphJoin(clock=clock)
    second = other_grid_ids(graph_launches(range(3, 5)), 100)
    join.on_launches(
        np.concatenate(
            [lifetime("created"), graph_launches(range(1, 3)), lifetime("destroyed"), lifetime("created"), second]
        )
    )
    events = [
        block_events(grid + offset, replay, blocks, slot=slot, t0=replay * 1000 + 100 * slot)
        for replays, offset in ((range(1, 3), 0), (range(3, 5), 100))
        for replay in replays
        for slot, (grid, blocks) in enumerate(NODES.values())
    ]
    join.on_events(np.concatenate(events))
    old, new = join.execs.values()
    assert (old.instance, new.instance, old.graph_exec, new.graph_exec) == (1, 2, EXEC, EXEC)
    assert join.by_handle[EXEC] is new and not old.alive and new.alive
    assert (old.replays, new.replays) == (2, 2)
    assert [sorted(n.grid_ids) for n in old.nodes.values()] == [[11], [12]]
    assert [sorted(n.grid_ids) for n in new.nodes.values()] == [[111], [112]]
    for graph in (old, new):
        report = join.exec_report(graph, replays=4)
        assert report["totals"] == {"matched": 4, "mismatched": 0, "sampled": 0, "unrecorded": 0, "unjoined": 0}
        assert report["events_unmatched"] == 0
    join.settle(ALL_REPLAYS)
    assert old.final is None  # its last events may still be in a ring
    clock.now += GraphJoin.FINAL_AFTER_S
    join.settle(ALL_REPLAYS)
    assert old.final is not None and new.final is None
    assert join.node_grid_ids().tolist() == [111, 112] and join.graph_exec_of(11) == 0
    assert join.graph_exec_of(111) == EXEC
    report = join.exec_report(old, replays=4)
    assert report["totals"] == {"matched": 4, "mismatched": 0, "sampled": 0, "unrecorded": 0, "unjoined": 0}
    assert [(r["replay"], r["nodes_matched"], r["node_blocks"]) for r in report["replays"]] == [
        (1, 2, [4, 3]),
        (2, 2, [4, 3]),
    ]
    assert join.replay_summary(1, 2)["nodes_matched"] == 2 and join.replay_summary(2, 3)["nodes_matched"] == 2
    assert join.replay_summary(2, 1) is None
    assert not any(key >> 32 in (11, 12) for key in join.spans)


def test_censuses_of_destroyed_execs_make_room_for_new_ones() -> None:
    """A process that instantiates and destroys graph execs without end: at most MAX_GRAPHS
    censuses, the oldest final ones let go (counted), and the grid id lookup holds only the
    execs not final."""
    clock = Clock()
    join = GraphJoin(clock=clock)
    join.MAX_GRAPHS = 4
    for index in range(10):
        launches = other_grid_ids(graph_launches(range(2 * index + 1, 2 * index + 3)), 100 * index)
        join.on_launches(np.concatenate([lifetime("created"), launches, lifetime("destroyed")]))
        clock.now += GraphJoin.FINAL_AFTER_S
        join.settle(ALL_REPLAYS)
        assert len(join.execs) <= 4 and len(join.grid_owner) == 0
    assert (join.graphs_forgotten, join.graphs_dropped) == (6, 0)
    assert [graph.instance for graph in join.execs.values()] == [7, 8, 9, 10]
    assert sum(graph.executions_of(node) for graph in join.execs.values() for node in graph.nodes.values()) == 16


def test_a_replays_busy_time_is_what_its_node_executions_ran_not_the_gaps() -> None:
    """Busy time counts each node execution's first enter to last exit, once where executions
    overlap and not at all between them; a replay with a node not whole (an enter lost) has none."""
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 3)))
    (grid_a, blocks_a), (grid_b, blocks_b) = NODES.values()
    join.on_events(
        np.concatenate(
            [
                # replay 1: a runs 100..150 (enters 100.., exits 120..150), b 1000..1040: a gap of 850
                block_events(grid_a, 1, blocks_a, slot=0, t0=100),
                block_events(grid_a, 1, blocks_a, slot=0, t0=120, kind="block_exit"),
                block_events(grid_b, 1, blocks_b, slot=1, t0=1000),
                block_events(grid_b, 1, blocks_b, slot=1, t0=1020, kind="block_exit"),
                # replay 2: a lost one enter; its span is still measured, its busy time is not known
                block_events(grid_a, 2, blocks_a - 1, slot=0, t0=2100),
                block_events(grid_a, 2, blocks_a, slot=0, t0=2120, kind="block_exit"),
                block_events(grid_b, 2, blocks_b, slot=1, t0=2200),
                block_events(grid_b, 2, blocks_b, slot=1, t0=2220, kind="block_exit"),
            ]
        )
    )
    first, second = join.exec_report(join.by_handle[EXEC], replays=2)["replays"]
    assert (first["span_ns"], first["busy_ns"]) == (1040 - 100, (150 - 100) + (1040 - 1000))
    assert join.replay_summary(join.by_handle[EXEC].instance, 1)["device_busy_ns"] == 90
    assert second["span_ns"] == 2240 - 2100 and second["busy_ns"] is None


def test_a_replay_without_exits_has_a_span_but_no_busy_time() -> None:
    """Without block exits (enters only), the last event is an enter: a span, not a run time."""
    join = joining_everything()
    join.on_launches(graph_launches(range(1, 2)))
    join.on_events(
        np.concatenate([block_events(g, 1, b, slot=s, t0=100 * (s + 1)) for s, (g, b) in enumerate(NODES.values())])
    )
    (replay,) = join.exec_report(join.by_handle[EXEC], replays=1)["replays"]
    assert replay["span_ns"] > 0 and replay["busy_ns"] is None
