"""Per process, the KV-cache slots its cache-write kernels stored to, per graph replay: what the
request ledger attributes to requests through the blocks each step handed them.

A store is a memory event (`memory` or `sampled` mode, with access hooks on the cache kernel:
GPUOBS_MEMORY_KERNELS or the memory patch set) of a kernel named as a KV-cache writer, flagged
as a write. Its address names a slot through the KV cache's layout, which the plugin sends in
the steps' text (gpuobs.step_text.KvCacheLayout). Its replay field names the CUDA-graph replay
it ran in, or for a kernel launched outside a graph (vLLM's attention between the pieces of a
piecewise graph) the replay last begun on its stream: in both cases a replay of the step that
wrote it, as vLLM writes the cache only after a step's first graph piece.

Bounded: slots are kept for the last MAX_REPLAYS replays not yet taken; the rest are counted.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Callable, Iterable

import numpy as np
from gpuobs.segment import ACCESS_WRITE, EVENT_KINDS
from gpuobs.step_text import KvCacheLayout

from .analysis import Analysis
from .analysis_budget import AnalysisBudget
from .time_budget import TimeBudget

# the kernels that write the KV cache: vLLM's reshape_and_cache family (flash and MLA variants
# too), and a Triton cache write by its name
KV_CACHE_KERNEL = re.compile(r"reshape_and_cache|concat_and_cache|kv_cache_write|cache_write")
MEMORY_ACCESS = EVENT_KINDS["memory_access"]
# slot -> name of each kernel slot asked for (the segment's kernel table)
KernelNames = Callable[[list[int]], dict[int, str]]


def slots_of(layout: KvCacheLayout, addresses: np.ndarray) -> np.ndarray:
    """The slot each address lies in (int64), -1 where it is in no layer's cache: the offset from
    a layer's base taken apart by the strides, largest first, every index within its size and
    nothing left over below an element (so a layer interleaved with another in one tensor never
    claims the other's bytes)."""
    out = np.full(len(addresses), -1, dtype=np.int64)
    if not len(addresses):
        return out
    order = sorted(range(len(layout.shape)), key=lambda d: layout.strides[d], reverse=True)
    extent = sum((size - 1) * stride for size, stride in zip(layout.shape, layout.strides, strict=True)) + 1
    extent_bytes = extent * layout.element_bytes
    positions = layout.shape[layout.position_dim]
    raw = addresses.astype(np.uint64)
    for base in layout.bases:
        open_ = out < 0
        inside = open_ & (raw >= np.uint64(base)) & (raw < np.uint64(base + extent_bytes))
        if not inside.any():
            continue
        offset = (raw[inside] - np.uint64(base)).astype(np.int64)
        rest = offset // layout.element_bytes
        valid = np.ones(len(rest), dtype=bool)
        index = {}
        for dim in order:
            stride = layout.strides[dim]
            index[dim] = rest // stride
            rest = rest % stride
            valid &= index[dim] < layout.shape[dim]
        valid &= rest == 0
        slots = index[layout.block_dim] * positions + index[layout.position_dim]
        picked = np.flatnonzero(inside)
        out[picked[valid]] = slots[valid]
    return out


@dataclasses.dataclass(frozen=True)
class CacheWriteTotals:
    stores: int  # cache-kernel stores read (sampled: those the hash kept)
    before_layout: int  # of them, read before any layout came (vLLM's warm-up writes the cache)
    outside: int  # at no slot of the layout
    skipped: int  # in batches the analysis budget skipped
    dropped: int  # kept for a replay no step took before MAX_REPLAYS newer ones came


class CacheWrites(Analysis):
    MAX_REPLAYS = 8192  # replays whose slots wait for their step to settle
    MAX_SLOTS_PER_REPLAY = 1 << 16

    def __init__(
        self,
        kernel_names: KernelNames,
        layout: Callable[[], KvCacheLayout | None],
        budget: TimeBudget | None = None,
    ) -> None:
        self.kernel_names = kernel_names
        self.layout = layout
        self.budget = budget or AnalysisBudget()
        self.writers: set[int] = set()  # kernel slots named as cache writers
        self.looked_up: set[int] = set()
        # low 32 bits of a replay -> slot -> stores
        self.by_replay: collections.OrderedDict[int, collections.Counter[int]] = collections.OrderedDict()
        self.stores = 0
        self.before_layout = 0
        self.outside = 0
        self.skipped = 0
        self.dropped = 0

    def on_events(self, events: np.ndarray, kind_counts: np.ndarray | None = None) -> None:
        if kind_counts is not None and not kind_counts[MEMORY_ACCESS]:
            return
        memory = (events["kind"] == MEMORY_ACCESS) & ((events["flags"] & ACCESS_WRITE) != 0)
        if not memory.any():
            return
        slots = events["kernel_slot"][memory]
        self._look_up(np.unique(slots).tolist())
        if not self.writers:
            return
        writes = np.flatnonzero(memory)[np.isin(slots, list(self.writers))]
        if not len(writes):
            return
        if not self.budget.allows():
            self.skipped += len(writes)
            return
        with self.budget.spending():
            self._fold(events["address"][writes], events["replay"][writes])

    def _look_up(self, slots: list[int]) -> None:
        new = [slot for slot in slots if slot not in self.looked_up]
        if not new:
            return
        self.looked_up.update(new)
        for slot, name in self.kernel_names(new).items():
            if KV_CACHE_KERNEL.search(name):
                self.writers.add(slot)

    def _fold(self, addresses: np.ndarray, replays: np.ndarray) -> None:
        self.stores += len(addresses)
        layout = self.layout()
        if layout is None:
            self.before_layout += len(addresses)
            return
        slots = slots_of(layout, addresses)
        found = slots >= 0
        self.outside += int(np.count_nonzero(~found))
        keys = np.stack([replays[found].astype(np.int64), slots[found]], axis=1)
        if not len(keys):
            return
        pairs, counts = np.unique(keys, axis=0, return_counts=True)
        for (replay, slot), count in zip(pairs.tolist(), counts.tolist(), strict=True):
            held = self.by_replay.get(replay)
            if held is None:
                held = self.by_replay[replay] = collections.Counter()
                while len(self.by_replay) > self.MAX_REPLAYS:
                    _, old = self.by_replay.popitem(last=False)
                    self.dropped += sum(old.values())
            if slot in held or len(held) < self.MAX_SLOTS_PER_REPLAY:
                held[slot] += count
            else:
                self.dropped += count

    def take(self, replays: Iterable[int]) -> collections.Counter[int]:
        """The slots stored to in these replays (full numbers), with their stores; given once."""
        taken: collections.Counter[int] = collections.Counter()
        for replay in replays:
            held = self.by_replay.pop(replay & 0xFFFFFFFF, None)
            if held:
                taken.update(held)
        return taken

    def report(self) -> CacheWriteTotals:
        return CacheWriteTotals(self.stores, self.before_layout, self.outside, self.skipped, self.dropped)
