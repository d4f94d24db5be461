"""Per process, how many memory events each (kernel, pc) recorded: the input of
`gpuobsctl source --top`, which maps PCs to source lines. One numpy pass per batch, under the
daemon's analysis budget (a batch skipped is counted, so the ranking says what it stands on)."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
from gpuobs.segment import EVENT_KINDS

from .analysis import Analysis
from .analysis_budget import AnalysisBudget
from .time_budget import TimeBudget

MEMORY_KINDS = (EVENT_KINDS["memory_access"], EVENT_KINDS["bulk_copy"])


@dataclasses.dataclass(frozen=True)
class HotPcTotals:
    """Memory events of one process: counted per (kernel, pc), skipped by the budget, and the
    distinct (kernel, pc) pairs counted."""

    counted: int
    skipped: int
    distinct: int


class HotPcs(Analysis):
    MAX_PCS = 1 << 16  # distinct (slot, pc) kept per process; beyond, new ones are counted as other

    def __init__(self, budget: TimeBudget | None = None) -> None:
        self.budget = budget or AnalysisBudget()
        self.counts: collections.Counter[tuple[int, int]] = collections.Counter()
        self.order: list[tuple[int, int]] = []  # the keys of counts in the order first seen
        self.counted = 0
        self.skipped = 0
        self.other = 0

    def on_events(self, events: np.ndarray, kind_counts: np.ndarray | None = None) -> None:
        """kind_counts: the batch's events per kind, when the caller has them (saves a pass)."""
        if kind_counts is not None and not kind_counts[list(MEMORY_KINDS)].any():
            return
        memory = np.isin(events["kind"], MEMORY_KINDS)
        if not memory.any():
            return
        if not self.budget.allows():
            self.skipped += int(np.count_nonzero(memory))
            return
        with self.budget.spending():
            picked = events[memory]
            keys = np.stack([picked["kernel_slot"].astype(np.uint64), picked["pc"]], axis=1)
            rows, counts = np.unique(keys, axis=0, return_counts=True)
            for (slot, pc), count in zip(rows.tolist(), counts.tolist()):
                key = (slot, pc)
                if key in self.counts:
                    self.counts[key] += count
                elif len(self.counts) < self.MAX_PCS:
                    self.counts[key] = count
                    self.order.append(key)
                else:
                    self.other += count
            self.counted += len(picked)

    def top(self, count: int) -> list[tuple[int, int, int]]:
        """(slot, pc, events), most events first."""
        return [(slot, pc, events) for (slot, pc), events in self.counts.most_common(count)]

    @property
    def distinct(self) -> int:
        """(slot, pc) pairs counted so far."""
        return len(self.order)

    def seen(self, first: int, count: int) -> list[tuple[int, int, int]]:
        """(slot, pc, events) of the pairs first seen first..first+count-1: a paged walk's
        positions, which new pairs only extend."""
        return [(slot, pc, self.counts[(slot, pc)]) for slot, pc in self.order[first : first + max(0, count)]]

    def report(self) -> HotPcTotals:
        return HotPcTotals(self.counted, self.skipped, self.distinct)
