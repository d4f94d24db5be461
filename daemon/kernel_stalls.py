"""Hang evidence from counts no budget can skip: per kernel, its blocks in flight (entered, as the
device census counts every block, less exited, as the exit patch counts every exit where exits
are hooked) and how long none of them has exited. A kernel with blocks in flight and no exit for
the hang threshold is stalled: a hung launch is named within the threshold whatever happened to
its events (dropped, or skipped by the analysis budget). Which launch and which blocks come from
the block events, where the pairing saw them.

Checked from the published counters every HANG_CHECK_S: a numpy pass over the process's kernels,
nothing per event."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Stall:
    """A kernel with blocks in flight: since when no block of it has exited (the daemon's clock)."""

    slot: int
    blocks_in_flight: int
    exited: int
    since: float
    reported: bool = False


class KernelStalls:
    """The kernels of one process with blocks in flight, and for how long none exited."""

    MAX_TRACKED = 4096  # kernels in flight at once (an H200 runs at most a few hundred kernels at a time)

    def __init__(self) -> None:
        self.stalls: dict[int, Stall] = {}
        self.counted = False  # the producer counts block exits (its kernels' counters say so)

    def update(self, kernels: np.ndarray, now: float) -> None:
        """The kernels' published counters (KERNEL_COUNTERS_DTYPE rows, slot = row index)."""
        entered = kernels["blocks_observed"].astype(np.int64) + kernels["blocks_unobserved"].astype(np.int64)
        exited = kernels["blocks_exited"].astype(np.int64)
        self.counted = self.counted or bool(exited.any())
        # a snapshot may show an exit before its block's entry reached the counters: never below 0
        in_flight = np.maximum(entered - exited, 0)
        busy = np.flatnonzero(in_flight)[: self.MAX_TRACKED]
        kept: dict[int, Stall] = {}
        for slot, blocks, out in zip(busy.tolist(), in_flight[busy].tolist(), exited[busy].tolist()):
            stall = self.stalls.get(slot)
            if stall is None or stall.exited != out:  # new, or a block exited since: the clock starts again
                stall = Stall(slot, blocks, out, now)
            stall.blocks_in_flight = blocks
            kept[slot] = stall
        self.stalls = kept

    def stalled(self, now: float, min_age_s: float) -> list[Stall]:
        """Kernels whose blocks in flight have had no exit for at least min_age_s, the longest first."""
        return sorted((s for s in self.stalls.values() if now - s.since >= min_age_s), key=lambda s: s.since)

    def blocks_in_flight(self) -> int:
        return sum(s.blocks_in_flight for s in self.stalls.values())

    def oldest_since(self) -> float | None:
        return min((s.since for s in self.stalls.values()), default=None)
