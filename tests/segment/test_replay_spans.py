"""Replay spans (replay_spans.h, replay_span_ledger.h) played on the host with the patches' own
fold and the tool thread's own ledger: each replay's span is published once and exactly, or
counted unclean, whatever order the device, the reader and the resets come in."""

from __future__ import annotations

import random

import pytest
from gpuobs import _native

SLOTS = _native.REPLAY_SPAN_SLOTS
ENDED = _native.REPLAY_ENDED


def run_replay(table: _native.ReplaySpanTable, replay: int, entries: list[int]) -> None:
    """A replay as the host and the device order it: its number copied in, its kernels' block
    (0,0,0) entries, its end copied in after them."""
    for entry in entries:
        table.fold(replay, entry)


def read_and_reset(table: _native.ReplaySpanTable, word: int, word_after: int | None = None) -> list[tuple]:
    spans, resets = table.read(word)
    table.reset(resets)
    table.reset_done(resets, word if word_after is None else word_after)
    return spans


def test_each_done_replay_is_published_once_with_its_first_and_last_entry() -> None:
    table = _native.ReplaySpanTable()
    run_replay(table, 1, [100, 140, 120])
    run_replay(table, 2, [300, 310])
    assert read_and_reset(table, 2 | ENDED) == [(1, 100, 140, 3), (2, 300, 310, 2)]
    assert read_and_reset(table, 2 | ENDED) == []  # read once
    assert (table.published, table.unclean) == (2, 0)


def test_a_replay_still_running_is_not_read_and_eager_launches_fold_into_none() -> None:
    table = _native.ReplaySpanTable()
    run_replay(table, 7, [10, 20])
    assert read_and_reset(table, 7) == []  # its end not copied in yet: more nodes may come
    run_replay(table, 7, [30])
    table.fold(7 | ENDED, 999)  # an eager launch after the replay's end
    table.fold(0, 999)  # one before any replay
    assert read_and_reset(table, 7 | ENDED) == [(7, 10, 30, 3)]
    # a later replay begun says it is done as well
    run_replay(table, 9, [50])
    run_replay(table, 12, [60])
    assert read_and_reset(table, 12) == [(9, 50, 50, 1)]


def test_two_replays_in_one_slot_are_counted_unclean_never_merged() -> None:
    """The reader fell a whole table behind: replay r and r + SLOTS folded into one slot."""
    table = _native.ReplaySpanTable()
    run_replay(table, 5, [100])
    run_replay(table, 5 + SLOTS, [200, 210])
    assert read_and_reset(table, (5 + SLOTS) | ENDED) == []
    assert (table.published, table.unclean) == (0, 1)
    run_replay(table, 5 + 2 * SLOTS, [300])  # the slot serves its next replay cleanly
    assert read_and_reset(table, (5 + 2 * SLOTS) | ENDED) == [(5 + 2 * SLOTS, 300, 300, 1)]


def test_a_replay_that_began_before_its_slots_reset_landed_is_not_trusted() -> None:
    """The reset races the slot's next replay: its first entries may be wiped, so the word read
    after the reset decides, and that replay's span is counted unclean instead of short."""
    table = _native.ReplaySpanTable()
    run_replay(table, 3, [100])
    spans, resets = table.read(3 | ENDED)
    assert spans == [(3, 100, 100, 1)]
    run_replay(table, 3 + SLOTS, [500])  # began before the reset landed ...
    table.reset(resets)  # ... and lost its first entry to it
    table.reset_done(resets, 3 + SLOTS)
    run_replay(table, 3 + SLOTS, [600])
    assert read_and_reset(table, (3 + SLOTS) | ENDED) == []
    assert (table.published, table.unclean) == (1, 1)
    # a reset that landed before the word moved on trusts the next one
    run_replay(table, 3 + 2 * SLOTS, [700])
    assert read_and_reset(table, (3 + 2 * SLOTS) | ENDED) == [(3 + 2 * SLOTS, 700, 700, 1)]


def test_a_reset_that_may_not_have_landed_never_counts_a_replay_twice() -> None:
    table = _native.ReplaySpanTable()
    run_replay(table, 4, [40])
    spans, resets = table.read(4 | ENDED)
    assert spans == [(4, 40, 40, 1)]
    table.reset_failed(resets)  # the copies failed: the slot still holds replay 4
    assert read_and_reset(table, 4 | ENDED) == []
    assert (table.published, table.unclean) == (1, 0)
    run_replay(table, 4 + SLOTS, [80])  # may have begun before a reset: not trusted
    assert read_and_reset(table, (4 + SLOTS) | ENDED) == [] and table.unclean == 1


@pytest.mark.parametrize("seed", range(5))
def test_replays_interleaved_with_reads_are_published_or_unclean_exactly(seed: int) -> None:
    """Replays of one context (numbers with gaps: other contexts' replays take the rest) and
    reads at random points: every replay done is published once with its own entries, or
    counted unclean; published + unclean never exceeds the replays, and a reader that keeps up
    (here: at most SLOTS / 2 numbers between reads) loses none."""
    rng = random.Random(seed)
    table = _native.ReplaySpanTable()
    replay, last_read, made = 0, 0, {}
    published: dict[int, tuple] = {}
    for _ in range(3000):
        replay += rng.randint(1, 3)
        entries = [rng.randint(1, 10**9) for _ in range(rng.randint(1, 4))]
        run_replay(table, replay, entries)
        made[replay] = (min(entries), max(entries), len(entries))
        if replay - last_read >= SLOTS // 2 or rng.random() < 0.05:
            for found in read_and_reset(table, replay | ENDED):
                assert found[0] not in published
                published[found[0]] = found[1:]
            last_read = replay
    for found in read_and_reset(table, replay | ENDED):
        published[found[0]] = found[1:]
    assert published == made and table.unclean == 0


def test_a_replay_that_may_overlap_another_is_counted_unclean() -> None:
    """One replay word a context: replays on two streams, or launched by two threads at once, can
    fold into each other's slots with launch counts that look whole. The injector taints both."""
    table = _native.ReplaySpanTable()
    run_replay(table, 10, [100, 110])
    run_replay(table, 11, [105, 120])
    table.taint(10)
    table.taint(11)
    assert read_and_reset(table, 11 | ENDED) == []
    assert (table.published, table.unclean) == (0, 2)


def test_a_slots_next_replay_begun_during_the_copy_is_not_trusted() -> None:
    """The word read after the table copy says the slot's next replay may have folded into it."""
    table = _native.ReplaySpanTable()
    run_replay(table, 6, [60])
    spans, resets = table.read(6 | ENDED, 6 + SLOTS)
    assert spans == [] and table.unclean == 1


def test_a_replay_a_reset_wiped_whole_is_counted_once() -> None:
    """The slot's next replay ran from start to end between the read and the reset landing: the
    slot reads empty, and that replay is counted unclean, once."""
    table = _native.ReplaySpanTable()
    run_replay(table, 2, [20])
    spans, resets = table.read(2 | ENDED)
    run_replay(table, 2 + SLOTS, [30])  # all of it before the reset
    table.reset(resets)
    table.reset_done(resets, (2 + SLOTS) | ENDED)
    assert read_and_reset(table, (3 + SLOTS) | ENDED) == []
    assert read_and_reset(table, (4 + SLOTS) | ENDED) == []
    assert (table.published, table.unclean) == (1, 1)
