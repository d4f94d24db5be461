"""Block pairing on hand-made events: enter and exit events pair into block durations by
their launch's key, across batches."""

from __future__ import annotations

import numpy as np
from gpuobs.daemon.block_pairing import BlockPairing
from gpuobs.daemon.time_budget import UNLIMITED_SHARE, TimeBudget
from gpuobs.segment import BLOCK_EARLIER_EPOCH, BLOCK_SAMPLED
from gpuobs_testing.records import block_events


def test_block_durations_pair_enter_and_exit_across_batches() -> None:
    pairing = BlockPairing(TimeBudget(share=UNLIMITED_SHARE, burst_s=1.0))  # pairing judged, not the budget
    enters = block_events(5, 7, 6, slot=2, t0=1000)
    exits = block_events(5, 8, 6, slot=2, t0=1500, kind="block_exit")  # eager: replay word moved on
    pairing.add_events(enters, node_grid_ids=np.zeros(0, dtype=np.uint64))  # no exit seen yet: nothing held
    pairing.add_events(np.concatenate([enters, exits[:4]]), node_grid_ids=np.zeros(0, dtype=np.uint64))
    pairing.add_events(exits[4:], node_grid_ids=np.zeros(0, dtype=np.uint64))
    stats = pairing.block_durations([2], [0])[0]
    assert (stats.count, stats.unpaired, stats.min_ns, stats.max_ns) == (6, 0, 500, 500)
    assert abs(stats.p50_ns - 500) <= 500 * 0.09
    # for a graph node the replay number is part of the key: an exit of another replay does not pair
    pairing.add_events(
        np.concatenate([block_events(5, 1, 2, slot=3, t0=0), block_events(5, 2, 2, slot=3, t0=50, kind="block_exit")]),
        node_grid_ids=np.array([5], dtype=np.uint64),
    )
    assert (pairing.block_durations([3], [0])[0].count, pairing.block_durations([3], [0])[0].unpaired) == (0, 4)


def test_sampled_blocks_pair_and_their_exits_without_an_enter_are_no_anomaly() -> None:
    """`sampled` (block set): the kept blocks' enters and exits pair into durations as any; an exit
    the epoch before kept, whose block entered in an epoch that did not keep it, comes alone and
    is not counted unpaired. An unsampled exit alone still is."""
    pairing = BlockPairing(TimeBudget(share=UNLIMITED_SHARE, burst_s=1.0))
    none = np.zeros(0, dtype=np.uint64)
    enters = block_events(9, 1, 3, slot=4, t0=1000)
    exits = block_events(9, 1, 5, slot=4, t0=1400, kind="block_exit")  # blocks 3 and 4: exits alone
    for batch in (enters, exits):
        batch["flags"] = BLOCK_SAMPLED
    exits["flags"][3:] |= BLOCK_EARLIER_EPOCH
    pairing.add_events(np.concatenate([enters, exits]), node_grid_ids=none)
    stats = pairing.block_durations([4], [0])[0]
    assert (stats.count, stats.unpaired, stats.min_ns, stats.max_ns) == (3, 0, 400, 400)
    alone = block_events(10, 1, 2, slot=4, t0=5000, kind="block_exit")  # not sampled: an anomaly
    pairing.add_events(alone, node_grid_ids=none)
    assert pairing.block_durations([4], [0])[0].unpaired == 2
    assert pairing.report().blocks == 0


def test_enters_beyond_the_bound_give_up_the_oldest_and_stale_ones_are_let_go() -> None:
    """At most MAX_PENDING enters are held (the newest); those given up count as unpaired, as do
    held enters of kernels the counts say have nothing in flight, once older than asked."""

    class Small(BlockPairing):
        MAX_PENDING = 8

    pairing = Small(TimeBudget(share=UNLIMITED_SHARE, burst_s=1.0), exits_hooked=True)
    none = np.zeros(0, dtype=np.uint64)
    pairing.add_events(block_events(3, 0, 12, slot=1, t0=1000), node_grid_ids=none)
    pending = pairing.pending
    assert len(pending) == 8 and sorted(pending["block"].tolist()) == list(range(4, 12))
    assert pairing.block_durations([1], [12])[0].unpaired == 4 + 8  # given up, and held
    pairing.add_events(block_events(3, 0, 12, slot=1, t0=2000, kind="block_exit"), node_grid_ids=none)
    stats = pairing.block_durations([1], [24])[0]
    assert (stats.count, stats.unpaired, stats.min_ns, stats.max_ns) == (8, 8, 1000, 1000)  # 4 lonely exits
    pairing.add_events(block_events(4, 0, 3, slot=2, t0=5000), node_grid_ids=none)
    pairing.add_events(block_events(5, 0, 2, slot=5, t0=5000), node_grid_ids=none)
    pairing.drop_stale({5}, entered_before_ns=5015)  # slot 5 has blocks in flight; slot 2 none
    assert sorted(pairing.pending["grid_id"].tolist()) == [4, 5, 5]  # slot 2's block entered at 5020 stays
    assert pairing.block_durations([2], [3])[0].unpaired == 3  # 2 let go + 1 held


def test_a_graph_nodes_replays_pair_in_ring_order_even_under_one_key() -> None:
    """Before the graph join knows a node's grid id its events are keyed by grid id alone:
    replays of it still pair each exit with the enter before it (one ring per context, in order)."""
    pairing = BlockPairing(TimeBudget(share=UNLIMITED_SHARE, burst_s=1.0), exits_hooked=True)
    batch = np.concatenate(
        [
            block_events(7, 1, 2, slot=0, t0=100),
            block_events(7, 1, 2, slot=0, t0=300, kind="block_exit"),
            block_events(7, 2, 2, slot=0, t0=1000),
            block_events(7, 2, 2, slot=0, t0=1100, kind="block_exit"),
        ]
    )
    pairing.add_events(batch, node_grid_ids=np.zeros(0, dtype=np.uint64))
    stats = pairing.block_durations([0], [8])[0]
    assert (stats.count, stats.unpaired, stats.min_ns, stats.max_ns) == (4, 0, 100, 200)
