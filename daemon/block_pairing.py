"""Block pairing: per kernel, what the counters in the segment do not hold, how long blocks ran
(block enter paired with block exit) and which blocks are still in flight. The pairing, each
kernel's duration histogram and its counts are native (block_pairer.h: a hash map in ring order,
tens of ns per event): no Python per event. (Launch shapes come with the counters: the device's
launch census counts them.)

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
All processes together may spend at most a fixed share of the daemon's time on
it (the AnalysisBudget), so the drain never falls behind because of it: block events
beyond that budget are counted per kernel as not analysed (their partners then show as unpaired).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from gpuobs import _native
from gpuobs.segment import EVENT_KINDS, PENDING_BLOCK_DTYPE

from .analysis import Analysis
from .analysis_budget import AnalysisBudget
from .results import BlockDurations
from .time_budget import TimeBudget

BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
BUCKETS_PER_OCTAVE = int(_native.DURATION_BUCKETS_PER_OCTAVE)  # the native pairer's histograms
BUCKETS = int(_native.DURATION_BUCKETS)
PENDING_DTYPE = PENDING_BLOCK_DTYPE  # the native pairer's held enters (block_pairer.h)


@dataclasses.dataclass
class Durations:
    """One kernel's block durations as the native pairer keeps them (its log2 histogram)."""

    histogram: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(BUCKETS, dtype=np.uint64))
    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0

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

    MAX_PENDING = 1 << 14  # enter events waiting for their exit: an H200 holds at most 132 x 32 blocks

    def __init__(
        self,
        budget: TimeBudget | None = None,
        exits_hooked: bool = False,
        node_grid_ids: Callable[[], np.ndarray] = lambda: NO_GRID_IDS,
    ) -> None:
        self.budget = budget or AnalysisBudget()
        self.node_grid_ids = node_grid_ids
        # the enters held (the blocks in flight), durations, and block events looked at and
        # without a partner, per kernel
        self.pairer = _native.BlockPairer(self.MAX_PENDING)
        self.exits_seen = exits_hooked

    @property
    def pending(self) -> np.ndarray:
        """The enters held, one PENDING_DTYPE row each, in no particular order."""
        return np.frombuffer(self.pairer.pending(), dtype=PENDING_DTYPE)

    def on_events(self, events: np.ndarray, kind_counts: np.ndarray) -> None:
        self.add_events(events, self.node_grid_ids(), kind_counts)

    def add_events(self, events: np.ndarray, node_grid_ids: np.ndarray, kind_counts: np.ndarray | None = None) -> None:
        """kind_counts: the batch's events per kind, when the caller has them (saves a pass).
        node_grid_ids: sorted (the graph join keeps them so)."""
        if not self.exits_seen:
            exits = kind_counts[BLOCK_EXIT] if kind_counts is not None else (events["kind"] == BLOCK_EXIT).any()
            if not exits:
                return
            self.exits_seen = True
        if not self.budget.allows():
            # Nothing per event here: a skipped batch costs nothing. What it held shows as
            # delivered block events minus analysed ones (report()).
            if len(self.pairer):
                self._give_up_pending()  # their exits may be in this batch: do not show them in flight
            return
        if kind_counts is not None and not (kind_counts[BLOCK_ENTER] or kind_counts[BLOCK_EXIT]):
            return
        with self.budget.spending():
            self.pairer.pair(np.ascontiguousarray(events), np.ascontiguousarray(node_grid_ids, dtype=np.uint64))

    @property
    def analysed_total(self) -> int:
        """Block events looked at (paired or held), all kernels."""
        return self.pairer.analysed_total()

    @property
    def analysed(self) -> dict[int, int]:
        """Block events looked at, per kernel slot."""
        return self.pairer.analysed()

    @property
    def unpaired(self) -> dict[int, int]:
        """Block events without a partner (lonely unsampled exits, enters given up), per kernel slot."""
        return self.pairer.unpaired()

    @property
    def durations(self) -> dict[int, Durations]:
        """Every kernel's block durations so far (the native pairer's histograms), by slot."""
        return self.durations_of(None)

    def durations_of(self, slots: list[int] | None) -> dict[int, Durations]:
        """Those kernels' block durations (all with None), by slot; kernels without pairs left out."""
        return {
            slot: Durations(np.frombuffer(histogram, dtype=np.uint64).copy(), count, total, low, high)
            for slot, (histogram, count, total, low, high) in self.pairer.durations(slots).items()
        }

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
        if len(self.pairer):
            in_flight = np.sort(np.fromiter(kernels_in_flight, dtype=np.uint32, count=len(kernels_in_flight)))
            self.pairer.drop_stale(in_flight, max(0, entered_before_ns))

    def _give_up_pending(self) -> None:
        self.pairer.clear()

    MAX_HUNG_LAUNCHES = 256  # launches the hang warnings look at, at most, per check
    MAX_LISTED_BLOCKS = 4096  # blocks listed per launch (the count is always exact)

    def in_flight(
        self, now_ns: int, min_age_ns: int, after: tuple[int, int] = (0, 0), limit: int = MAX_HUNG_LAUNCHES
    ) -> list[dict]:
        """Blocks that entered and have not exited, at least min_age_ns old, per launch (grid id
        and, for graph nodes, replay number), in (grid id, replay) order from `after` on (that
        key included), at most `limit` launches: the order a paged walk resumes in, whatever
        exits meanwhile. Ages compare the device clock (%globaltimer, ns since the epoch) with
        the host's realtime clock."""
        if not self.exits_seen or not len(self.pairer) or limit <= 0:
            return []
        pending = self.pending
        grid_after, replay_after = np.uint64(after[0]), np.uint64(after[1])
        old = pending[
            (pending["time"] <= now_ns - min_age_ns)
            & (
                (pending["grid_id"] > grid_after)
                | ((pending["grid_id"] == grid_after) & (pending["replay"] >= replay_after))
            )
        ]
        if not len(old):
            return []
        old = old[np.lexsort((old["block"], old["replay"], old["grid_id"]))]
        change = (old["grid_id"][1:] != old["grid_id"][:-1]) | (old["replay"][1:] != old["replay"][:-1])
        starts = np.flatnonzero(np.concatenate([[True], change]))[: limit + 1]
        ends = np.append(starts[1:], len(old))[:limit]
        launches = []
        for start, end in zip(starts[:limit].tolist(), ends.tolist()):
            mine = old[start:end]
            oldest = int(mine["time"].min())
            block = mine["block"][: self.MAX_LISTED_BLOCKS]
            blocks = list(
                zip(
                    (block & np.uint64(0xFFFFFFFF)).tolist(),
                    ((block >> np.uint64(32)) & np.uint64(0xFFFF)).tolist(),
                    (block >> np.uint64(48)).tolist(),
                )
            )
            launches.append(
                {
                    "grid_id": int(mine["grid_id"][0]),
                    "replay": int(mine["replay"][0]),
                    "slot": int(mine["kernel_slot"][0]),
                    "blocks": blocks,
                    "block_count": len(mine),
                    "sms": np.unique(mine["sm"]).tolist(),
                    "oldest_enter_ns": oldest,
                    "age_ns": max(0, now_ns - oldest),
                }
            )
        return launches

    def report(self) -> InFlight:
        if not self.exits_seen or not len(self.pairer):
            return InFlight(self.exits_seen, 0, 0)
        pending = self.pending
        return InFlight(True, len(pending), int(pending["time"].min()))

    def block_durations(self, slots: list[int], block_events_delivered: list[int]) -> list[BlockDurations]:
        """Block durations of these kernel slots, with one pass over the enters held.
        `block_events_delivered`: each slot's block enter and exit events the reader delivered
        (the native reader's aggregates); those not analysed were skipped by the budget."""
        held = np.bincount(self.pending["kernel_slot"]) if len(self.pairer) else np.zeros(0, dtype=np.int64)
        every, unpaired, analysed = self.durations_of(list(slots)), self.unpaired, self.analysed
        return [
            self._durations_of(
                every.get(slot),
                events - analysed.get(slot, 0),
                unpaired.get(slot, 0) + (int(held[slot]) if slot < len(held) else 0),
            )
            for slot, events in zip(slots, block_events_delivered)
        ]

    def _durations_of(self, durations: Durations | None, unanalysed: int, unpaired: int) -> BlockDurations:
        stats = BlockDurations(unpaired=unpaired, unanalysed=max(0, unanalysed) if self.exits_seen else 0)
        if durations is not None and durations.count:
            stats = dataclasses.replace(
                stats,
                count=durations.count,
                mean_ns=durations.total_ns / durations.count,
                min_ns=durations.min_ns,
                p50_ns=durations.percentile(0.5),
                p99_ns=durations.percentile(0.99),
                max_ns=durations.max_ns,
            )
        return stats
