"""Block pairing: per kernel, what the counters in the segment do not hold, how long blocks ran
(block enter paired with block exit) and which blocks are still in flight. Batched in numpy: no Python per
event. (Launch shapes come with the counters: the device's launch census counts them.)

In `sampled` (kernels without access hooks) the events are those of 1 in 2^shift blocks, chosen
by a hash that rotates every 33.6 ms of device time: durations are then a sample of the kernel's
blocks (unbiased over block positions and launches, with the sample's count beside them), and
the blocks in flight are the sampled ones only, so a hung launch shows here only when one of its
blocks was kept.

Block durations and in-flight blocks (hang evidence) need exit events, which the injector
records only with GPUOBS_BLOCK_EXIT=1 (an exit hook is costly, see
bench/results/injector-decisions-2026-11-29.md); the segment header says whether it does. Enter
events are held for pairing only for such a process (or once one shows an exit event), so a
process without exit hooks costs nothing here. The enters still held are the blocks in flight.
Pairing sorts; all processes together may spend at most a fixed share of the daemon's time on
it (the AnalysisBudget), so the drain never falls behind because of it: block events
beyond that budget are counted per kernel as not analysed (their partners then show as unpaired).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable

import numpy as np

from gpuobs.launch_key import key_replays
from gpuobs.segment import BLOCK_SAMPLED, EVENT_KINDS

from .analysis import Analysis
from .analysis_budget import AnalysisBudget
from .results import BlockDurations
from .time_budget import TimeBudget

BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
BUCKETS_PER_OCTAVE = 8
BUCKETS = 64 * BUCKETS_PER_OCTAVE
PENDING_DTYPE = np.dtype([("grid_id", np.uint64), ("replay", np.uint64), ("block", np.uint64),
                          ("time", np.int64), ("kernel_slot", np.uint32), ("sm", np.uint16), ("flags", np.uint16)])


def duration_buckets(durations: np.ndarray) -> np.ndarray:
    """The log2 histogram bucket of each duration (ns), BUCKETS_PER_OCTAVE an octave."""
    buckets = np.floor(np.log2(np.maximum(durations, 1)) * BUCKETS_PER_OCTAVE).astype(np.int64)
    return np.clip(buckets, 0, BUCKETS - 1)


@dataclasses.dataclass
class Durations:
    histogram: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(BUCKETS, dtype=np.uint64))
    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0

    def add(self, durations: np.ndarray) -> None:
        self.merge(np.bincount(duration_buckets(durations), minlength=BUCKETS).astype(np.uint64), len(durations),
                   int(durations.sum()), int(durations.min()), int(durations.max()))

    def merge(self, histogram: np.ndarray, count: int, total_ns: int, low: int, high: int) -> None:
        """Durations already bucketed (count of them, their sum, least and most)."""
        self.histogram += histogram
        self.min_ns = low if not self.count else min(self.min_ns, low)
        self.max_ns = max(self.max_ns, high)
        self.count += count
        self.total_ns += total_ns

    def percentile(self, fraction: float) -> int:
        """The geometric middle of the bucket holding that fraction of the blocks, kept within
        the observed min and max."""
        if not self.count:
            return 0
        rank = fraction * self.count
        bucket = int(np.searchsorted(np.cumsum(self.histogram), max(rank, 1)))
        middle = 2.0 ** ((bucket + 0.5) / BUCKETS_PER_OCTAVE)
        return int(min(max(middle, self.min_ns), self.max_ns))


@dataclasses.dataclass(frozen=True)
class InFlight:
    """Blocks in flight of one process: whether it can tell (it records block exits), how many,
    and the device time of the oldest one's enter (0 when none)."""

    exits_hooked: bool
    blocks: int
    oldest_enter_ns: int


NO_GRID_IDS = np.zeros(0, dtype=np.uint64)


class BlockPairing(Analysis):
    """Block durations and blocks in flight of every kernel of one process. `node_grid_ids`:
    the grid ids of graph nodes now (the graph join's), whose events carry a replay number that
    is part of their launch's key."""

    MAX_PENDING = 1 << 14   # enter events waiting for their exit: an H200 holds at most 132 x 32 blocks

    def __init__(self, budget: TimeBudget | None = None, exits_hooked: bool = False,
                 node_grid_ids: Callable[[], np.ndarray] = lambda: NO_GRID_IDS) -> None:
        self.budget = budget or AnalysisBudget()
        self.node_grid_ids = node_grid_ids
        self.analysed: dict[int, int] = collections.defaultdict(int)  # block events paired or held, per kernel slot
        self.analysed_total = 0  # the same, all kernels: one whole value, read without the process's lock
        self.durations: dict[int, Durations] = {}
        self.unpaired: dict[int, int] = collections.defaultdict(int)
        self.pending = np.zeros(0, dtype=PENDING_DTYPE)
        self.exits_seen = exits_hooked
        # block events taken and not yet paired: pairing sorts, and its cost is per call as much
        # as per event, so a trickle is paired in batches of PAIR_BATCH or every PAIR_WAIT_S
        self._queued: list[np.ndarray] = []
        self._queued_events = 0
        self._queued_since = 0.0
        self._node_grid_ids = NO_GRID_IDS

    PAIR_BATCH = 1 << 14
    PAIR_WAIT_S = 0.25

    def on_events(self, events: np.ndarray, kind_counts: np.ndarray) -> None:
        self.add_events(events, self.node_grid_ids(), kind_counts)

    def add_events(self, events: np.ndarray, node_grid_ids: np.ndarray, kind_counts: np.ndarray | None = None) -> None:
        """kind_counts: the batch's events per kind, when the caller has them (saves a pass)."""
        if not self.exits_seen:
            exits = kind_counts[BLOCK_EXIT] if kind_counts is not None else (events["kind"] == BLOCK_EXIT).any()
            if not exits:
                return
            self.exits_seen = True
        if not self.budget.allows():
            # Nothing per event here: a skipped batch costs nothing. What it held shows as
            # delivered block events minus analysed ones (report()).
            self.flush()
            if len(self.pending):
                self._give_up_pending()  # their exits may be in this batch: do not show them in flight
            return
        if kind_counts is not None and not (kind_counts[BLOCK_ENTER] or kind_counts[BLOCK_EXIT]):
            return
        with self.budget.spending():
            kinds = events["kind"]
            block = events[(kinds == BLOCK_ENTER) | (kinds == BLOCK_EXIT)]
            if len(block):
                counts = np.bincount(block["kernel_slot"])
                for slot in np.flatnonzero(counts).tolist():
                    self.analysed[slot] += int(counts[slot])
                self.analysed_total += len(block)
                if not self._queued:
                    self._queued_since = time.monotonic()
                self._queued.append(block)  # a copy: the batch is a view of the reader's buffer
                self._queued_events += len(block)
                self._node_grid_ids = node_grid_ids
        if self._queued_events >= self.PAIR_BATCH or (
                self._queued and time.monotonic() - self._queued_since >= self.PAIR_WAIT_S):
            self.flush()

    def settle(self, replay_begun: int) -> None:
        if self._queued and time.monotonic() - self._queued_since >= self.PAIR_WAIT_S:
            self.flush()

    def flush(self) -> None:
        """Pairs what was taken and is queued (before anything reads the pairs or the enters held)."""
        if not self._queued:
            return
        block = np.concatenate(self._queued) if len(self._queued) > 1 else self._queued[0]
        self._queued, self._queued_events = [], 0
        with self.budget.spending():
            self._pair(block, self._node_grid_ids)

    def _pair(self, block: np.ndarray, node_grid_ids: np.ndarray) -> None:
        fresh = np.zeros(len(block), dtype=PENDING_DTYPE)
        fresh["grid_id"] = block["grid_id"]
        fresh["replay"] = key_replays(block["grid_id"], block["replay"], node_grid_ids)
        fresh["block"] = (block["block_x"].astype(np.uint64) | (block["block_y"].astype(np.uint64) << np.uint64(32)) |
                          (block["block_z"].astype(np.uint64) << np.uint64(48)))
        fresh["time"] = block["globaltimer_ns"].astype(np.int64)
        fresh["kernel_slot"] = block["kernel_slot"]
        fresh["sm"] = block["sm_id"]
        fresh["flags"] = block["flags"]
        is_exit = np.concatenate([np.zeros(len(self.pending), dtype=bool), block["kind"] == BLOCK_EXIT])
        rows = np.concatenate([self.pending, fresh])
        # enters sort before exits of the same block; a stable sort keeps ring order otherwise
        order = np.lexsort((is_exit, rows["block"], rows["replay"], rows["grid_id"]))
        rows, is_exit = rows[order], is_exit[order]
        same = ((rows["grid_id"][1:] == rows["grid_id"][:-1]) & (rows["replay"][1:] == rows["replay"][:-1]) &
                (rows["block"][1:] == rows["block"][:-1]))
        pair = same & ~is_exit[:-1] & is_exit[1:]
        enter_index = np.flatnonzero(pair)
        exit_index = enter_index + 1
        if len(enter_index):
            self._add_durations(rows["kernel_slot"][enter_index],
                                np.maximum(rows["time"][exit_index] - rows["time"][enter_index], 0))
        paired = np.zeros(len(rows), dtype=bool)
        paired[enter_index] = True
        paired[exit_index] = True
        # A sampled block's exit may come without its enter and be no anomaly: the exit is kept by
        # its own epoch's choice or the one before, and the block may have entered in an epoch
        # whose choice did not keep it (sample_hash.h). Only unsampled lonely exits count.
        lonely_exits = ~paired & is_exit & ((rows["flags"] & np.uint16(BLOCK_SAMPLED)) == 0)
        self._count_unpaired(rows["kernel_slot"][lonely_exits])
        waiting = rows[~paired & ~is_exit]
        if len(waiting) > self.MAX_PENDING:
            waiting = waiting[np.argsort(waiting["time"], kind="stable")]
            self._count_unpaired(waiting["kernel_slot"][:-self.MAX_PENDING])
            waiting = waiting[-self.MAX_PENDING:]
        self.pending = waiting

    def _add_durations(self, slots: np.ndarray, durations: np.ndarray) -> None:
        """Every kernel's durations of one pairing at once: one histogram pass for all kernels."""
        kernels, which = np.unique(slots, return_inverse=True)
        histograms = np.bincount(which * BUCKETS + duration_buckets(durations),
                                 minlength=len(kernels) * BUCKETS).reshape(len(kernels), BUCKETS).astype(np.uint64)
        counts = np.bincount(which, minlength=len(kernels))
        totals = np.bincount(which, weights=durations.astype(np.float64), minlength=len(kernels))
        order = np.argsort(which, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(which[order]) != 0])
        lows = np.minimum.reduceat(durations[order], starts)
        highs = np.maximum.reduceat(durations[order], starts)
        for index, slot in enumerate(kernels.tolist()):
            self.durations.setdefault(slot, Durations()).merge(histograms[index], int(counts[index]),
                                                               int(totals[index]), int(lows[index]), int(highs[index]))

    def _count_unpaired(self, slots: np.ndarray) -> None:
        for slot, count in zip(*np.unique(slots, return_counts=True)):
            self.unpaired[int(slot)] += int(count)

    def unanalysed_total(self, aggregates: np.ndarray) -> int:
        """Block events the reader delivered (aggregates: per slot and kind) that the pairing did
        not look at (the budget skipped their batch); 0 where it pairs nothing (no exits)."""
        if not self.exits_seen:
            return 0
        delivered = int(aggregates[:, BLOCK_ENTER].sum() + aggregates[:, BLOCK_EXIT].sum())
        return max(0, delivered - self.analysed_total)

    def drop_stale(self, kernels_in_flight: set[int], entered_before_ns: int) -> None:
        """Held enters of kernels that have no block in flight by the counts (kernel_stalls.py),
        entered before `entered_before_ns`: their exits were lost (dropped, or a sampled block's
        exit more than an epoch after its enter), so they are not in flight; counted unpaired."""
        self.flush()
        if not len(self.pending):
            return
        stale = (~np.isin(self.pending["kernel_slot"], np.fromiter(kernels_in_flight, dtype=np.uint32,
                                                                    count=len(kernels_in_flight))) &
                 (self.pending["time"] < entered_before_ns))
        if stale.any():
            self._count_unpaired(self.pending["kernel_slot"][stale])
            self.pending = self.pending[~stale]

    def _give_up_pending(self) -> None:
        self._count_unpaired(self.pending["kernel_slot"])
        self.pending = np.zeros(0, dtype=PENDING_DTYPE)

    MAX_HUNG_LAUNCHES = 256     # launches the hang warnings look at, at most, per check
    MAX_LISTED_BLOCKS = 4096    # blocks listed per launch (the count is always exact)

    def in_flight(self, now_ns: int, min_age_ns: int, after: tuple[int, int] = (0, 0),
                  limit: int = MAX_HUNG_LAUNCHES) -> list[dict]:
        """Blocks that entered and have not exited, at least min_age_ns old, per launch (grid id
        and, for graph nodes, replay number), in (grid id, replay) order from `after` on (that
        key included), at most `limit` launches: the order a paged walk resumes in, whatever
        exits meanwhile. Ages compare the device clock (%globaltimer, ns since the epoch) with
        the host's realtime clock."""
        self.flush()
        if not self.exits_seen or not len(self.pending) or limit <= 0:
            return []
        pending = self.pending
        grid_after, replay_after = np.uint64(after[0]), np.uint64(after[1])
        old = pending[(pending["time"] <= now_ns - min_age_ns) &
                      ((pending["grid_id"] > grid_after) |
                       ((pending["grid_id"] == grid_after) & (pending["replay"] >= replay_after)))]
        if not len(old):
            return []
        old = old[np.lexsort((old["block"], old["replay"], old["grid_id"]))]
        change = (old["grid_id"][1:] != old["grid_id"][:-1]) | (old["replay"][1:] != old["replay"][:-1])
        starts = np.flatnonzero(np.concatenate([[True], change]))[:limit + 1]
        ends = np.append(starts[1:], len(old))[:limit]
        launches = []
        for start, end in zip(starts[:limit].tolist(), ends.tolist()):
            mine = old[start:end]
            oldest = int(mine["time"].min())
            block = mine["block"][: self.MAX_LISTED_BLOCKS]
            blocks = list(zip((block & np.uint64(0xFFFFFFFF)).tolist(),
                              ((block >> np.uint64(32)) & np.uint64(0xFFFF)).tolist(),
                              (block >> np.uint64(48)).tolist()))
            launches.append({"grid_id": int(mine["grid_id"][0]), "replay": int(mine["replay"][0]),
                             "slot": int(mine["kernel_slot"][0]), "blocks": blocks, "block_count": len(mine),
                             "sms": np.unique(mine["sm"]).tolist(), "oldest_enter_ns": oldest,
                             "age_ns": max(0, now_ns - oldest)})
        return launches

    def report(self) -> InFlight:
        self.flush()
        if not self.exits_seen or not len(self.pending):
            return InFlight(self.exits_seen, 0, 0)
        return InFlight(True, len(self.pending), int(self.pending["time"].min()))

    def block_durations(self, slots: list[int], block_events_delivered: list[int]) -> list[BlockDurations]:
        """Block durations of these kernel slots, with one pass over the enters held.
        `block_events_delivered`: each slot's block enter and exit events the reader delivered
        (the native reader's aggregates); those not analysed were skipped by the budget."""
        self.flush()
        held = np.bincount(self.pending["kernel_slot"]) if len(self.pending) else np.zeros(0, dtype=np.int64)
        return [self._durations_of(slot, events, int(held[slot]) if slot < len(held) else 0)
                for slot, events in zip(slots, block_events_delivered)]

    def _durations_of(self, slot: int, block_events_delivered: int, pending: int) -> BlockDurations:
        durations = self.durations.get(slot)
        stats = BlockDurations(
            unpaired=self.unpaired.get(slot, 0) + pending,
            unanalysed=max(0, block_events_delivered - self.analysed.get(slot, 0)) if self.exits_seen else 0)
        if durations is not None and durations.count:
            stats = dataclasses.replace(
                stats, count=durations.count, mean_ns=durations.total_ns / durations.count, min_ns=durations.min_ns,
                p50_ns=durations.percentile(0.5), p99_ns=durations.percentile(0.99), max_ns=durations.max_ns)
        return stats
