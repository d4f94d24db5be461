"""The drain's pace between passes: a flood straight on, a trickle read in batches of what
accumulated (up to IDLE_PAUSE_MAX_S), nothing at all backing off to the same bound."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gpuobs import _native
from gpuobs.daemon.analysis_budget import BEHIND_SHARE
from gpuobs.daemon.drain_thread import DrainThread
from gpuobs.daemon.registry import Registry
from gpuobs_testing.records import NODES, block_events, graph_launches


@pytest.fixture
def drain() -> DrainThread:
    return DrainThread(registry=None, discovery_interval_s=0.2, drain_interval_s=0.002)  # type: ignore[arg-type]


def test_a_ring_past_the_follow_share_is_read_again_at_once(drain: DrainThread) -> None:
    assert drain.next_pause(0.05, read=70_000, fullest=DrainThread.FOLLOW_SHARE, since_last_pass_s=0.01) == 0.0
    assert drain.next_pause(0.05, read=10, fullest=1.0, since_last_pass_s=0.01) == 0.0  # records left behind


def test_a_trickle_waits_until_its_fullest_ring_would_be_at_the_follow_share(drain: DrainThread) -> None:
    share = DrainThread.FOLLOW_SHARE
    # filled share / 4 in 10 ms: the follow share in 40 ms
    assert drain.next_pause(0.002, read=500, fullest=share / 4, since_last_pass_s=0.01) == pytest.approx(0.04)
    # slower than that: never more than the bound, never less than the drain interval
    assert drain.next_pause(0.002, read=5, fullest=share / 1000, since_last_pass_s=0.05) == DrainThread.IDLE_PAUSE_MAX_S
    assert drain.next_pause(0.002, read=5000, fullest=share * 0.99, since_last_pass_s=0.0001) == 0.002


def test_nothing_read_backs_off_to_the_bound(drain: DrainThread) -> None:
    pause, pauses = 0.002, []
    for _ in range(10):
        pause = drain.next_pause(pause, read=0, fullest=0.0, since_last_pass_s=pause)
        pauses.append(pause)
    assert pauses == sorted(pauses) and pauses[0] == 0.004 and pauses[-1] == DrainThread.IDLE_PAUSE_MAX_S


def test_analyses_skip_while_a_ring_was_behind_in_the_last_pass(tmp_path: Path) -> None:
    """Time spent on one process's analyses is time every ring fills: a batch is analysed only
    when no ring was more than BEHIND_SHARE full in the last pass, nor its own before the batch
    was read. What is skipped is counted as not analysed."""
    writer = _native.Writer(str(tmp_path), event_ring_records=1024)
    writer.register_kernel("_Z6kernelv")
    registry = Registry(tmp_path, owners=[os.getuid()], torn_timeout_s=1.0, analysis_share=0.3)
    registry.discover()
    (process,) = registry.processes.values()
    pairing = process.analyses.block_pairing

    def write_and_drain(grid_id: int, blocks: int) -> None:
        records = np.concatenate(
            [
                block_events(grid_id, 0, blocks, slot=0, t0=1000),
                block_events(grid_id, 0, blocks, slot=0, t0=2000, kind="block_exit"),
            ]
        )
        assert writer.put_events(0, records) == len(records)
        writer.publish()
        registry.drain_pass()

    write_and_drain(1, 300)  # its ring more than BEHIND_SHARE full before the read: not analysed
    assert 600 / 1024 > BEHIND_SHARE and registry.pass_fullest > BEHIND_SHARE and pairing.analysed_total == 0
    write_and_drain(2, 10)  # read, not analysed: the last pass found a ring behind
    assert pairing.analysed_total == 0
    write_and_drain(3, 10)  # the last pass found every ring nearly empty: analysed
    assert pairing.analysed_total == 20
    assert pairing.unanalysed_total(process.segment.aggregates()) == 620


def test_launch_records_are_joined_while_a_ring_is_behind(tmp_path: Path) -> None:
    """Launch records are few and every join keys on them: a backlog of events in a ring skips
    the events' analyses, never theirs (a replay whose graph launch was skipped has no mode)."""
    writer = _native.Writer(str(tmp_path), event_ring_records=1024)
    writer.register_kernel("_Z6kernelv")
    registry = Registry(tmp_path, owners=[os.getuid()], torn_timeout_s=1.0, analysis_share=0.3)
    registry.discover()
    (process,) = registry.processes.values()
    backlog = block_events(1, 0, 600, slot=0, t0=1000)
    assert writer.put_events(0, backlog) == len(backlog)
    writer.publish()
    registry.drain_pass(max_batches=1)  # one batch, found behind: the pass ends judged behind
    assert registry.pass_fullest > BEHIND_SHARE and registry.analysis_budget.behind
    launches = graph_launches(range(1, 4), mode="blocks", graph_exec=0x7000)
    for index in range(len(launches)):
        assert writer.write_launch(launches[index : index + 1])
    writer.publish()
    registry.drain_pass()
    assert process.analyses.graph_join.replay_shape(0x7000).nodes == len(NODES)  # its nodes learned
    graph = process.analyses.graph_join.by_handle[0x7000]
    assert sum(node.unjoined for node in graph.nodes.values()) == 0
