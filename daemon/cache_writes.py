"""Per process, the KV-cache slots its cache-write kernels stored to, per graph replay: what the
request ledger attributes to requests through the blocks each step handed them.

A store is a memory event (`memory` or `sampled` mode, with access hooks on the cache kernel:
GPUOBS_MEMORY_KERNELS or the memory patch set) of a kernel named as a KV-cache writer, flagged
as a write. Its address names a slot through the KV cache's layout, which the plugin sends in
the steps' text (gpuobs.step_text.KvCacheLayout). Its replay field names the CUDA-graph replay
it ran in (a graph node's: its grid id is one of the graph join's nodes), or for a kernel
launched outside a graph the replay last begun in its context: vLLM's attention between the
pieces of a piecewise graph stores under a piece of its own step (vLLM writes the cache only
after a step's first piece), and a step run without a graph under the step before's last
replay, which the request ledger counts as ambiguous. Stores are held apart by replay and by
whether they ran in a node.

Bounded: slots are kept for the last MAX_REPLAYS replays not yet taken; the rest are counted.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
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


@functools.lru_cache(maxsize=8)
def layer_order(layout: KvCacheLayout) -> tuple[np.ndarray, bool]:
    """The layers' bases sorted, and whether their extents are disjoint (every layer a tensor of
    its own): then an address can lie in one layer only, the last whose base is at or below it."""
    bases = np.array(sorted(layout.bases), dtype=np.uint64)
    disjoint = all(int(b) - int(a) >= layout.extent_bytes for a, b in zip(bases, bases[1:], strict=False))
    return bases, disjoint


def slots_of(layout: KvCacheLayout, addresses: np.ndarray) -> np.ndarray:
    """The slot each address lies in (int64), -1 where it is in no layer's cache: the offset from
    a layer's base taken apart by the strides, largest first, every index within its size and
    nothing left over below an element (so a layer interleaved with another in one tensor never
    claims the other's bytes). Layers of tensors of their own cost one pass; interleaved ones
    one pass a layer (at most MAX_LAYERS)."""
    out = np.full(len(addresses), -1, dtype=np.int64)
    if not len(addresses):
        return out
    raw = addresses.astype(np.uint64)
    bases, disjoint = layer_order(layout)
    extent = np.uint64(layout.extent_bytes)
    if disjoint:
        layer = np.searchsorted(bases, raw, side="right") - 1
        found = layer >= 0
        offset = raw - bases[np.maximum(layer, 0)]
        inside = found & (offset < extent)
        out[inside] = slots_in_layer(layout, offset[inside].astype(np.int64))
        return out
    for base in bases:
        inside = (out < 0) & (raw >= base) & (raw < base + extent)  # below 2^64: KvCacheLayout.problem()
        if inside.any():
            out[inside] = slots_in_layer(layout, (raw[inside] - base).astype(np.int64))
    return out


def slots_in_layer(layout: KvCacheLayout, offsets: np.ndarray) -> np.ndarray:
    """The slots at these byte offsets into one layer's cache (-1: between its elements or past a
    dimension's size)."""
    order = sorted(range(len(layout.shape)), key=lambda d: (layout.strides[d], layout.shape[d]), reverse=True)
    rest = offsets // layout.element_bytes
    valid = np.ones(len(offsets), dtype=bool)  # a store inside an element is to that element
    index: dict[int, np.ndarray] = {}
    for dim in order:
        stride = layout.strides[dim]
        index[dim] = rest // stride
        rest = rest % stride
        valid &= index[dim] < layout.shape[dim]
    valid &= rest == 0
    slots = index[layout.block_dim] * layout.shape[layout.position_dim] + index[layout.position_dim]
    return np.where(valid, slots, -1)


@dataclasses.dataclass(frozen=True)
class CacheWriteTotals:
    stores: int  # cache-kernel stores read (sampled: those the hash kept)
    before_layout: int  # of them, read before any layout came (vLLM's warm-up writes the cache)
    outside: int  # at no slot of the layout
    skipped: int  # in batches the analysis budget skipped
    dropped: int  # kept for a replay no step took before MAX_REPLAYS newer ones came


class CacheWrites(Analysis):
    MAX_REPLAYS = 8192  # replays whose slots wait for their step to settle
    MAX_SLOTS_HELD = 1 << 20  # (replay, slot) pairs held over all of them; past it, counted dropped

    def __init__(
        self,
        kernel_names: KernelNames,
        layout: Callable[[], KvCacheLayout | None],
        budget: TimeBudget | None = None,
        node_grid_ids: Callable[[], np.ndarray] = lambda: np.empty(0, dtype=np.uint64),
    ) -> None:
        self.kernel_names = kernel_names
        self.layout = layout
        self.node_grid_ids = node_grid_ids  # sorted: a store of one of them ran in a graph node
        self.budget = budget or AnalysisBudget()
        self.writers: set[int] = set()  # kernel slots named as cache writers
        self.looked_up: set[int] = set()
        # (low 32 bits of a replay) x 2, + 1 for stores outside a graph -> slot -> stores, in the
        # order first seen
        self.by_replay: collections.OrderedDict[int, collections.Counter[int]] = collections.OrderedDict()
        self.held = 0  # the pairs in by_replay
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
            nodes = self.node_grid_ids()
            grid_ids = events["grid_id"][writes]
            at = np.minimum(np.searchsorted(nodes, grid_ids), max(len(nodes) - 1, 0))
            eager = ~(nodes[at] == grid_ids) if len(nodes) else np.ones(len(writes), dtype=bool)
            self._fold(events["address"][writes], events["replay"][writes].astype(np.int64) * 2 + eager)

    def _look_up(self, slots: list[int]) -> None:
        new = [slot for slot in slots if slot not in self.looked_up]
        if not new:
            return
        self.looked_up.update(new)
        for slot, name in self.kernel_names(new).items():
            if KV_CACHE_KERNEL.search(name):
                self.writers.add(slot)

    def _fold(self, addresses: np.ndarray, keys_of: np.ndarray) -> None:
        """`keys_of`: each store's replay key (by_replay's)."""
        self.stores += len(addresses)
        layout = self.layout()
        if layout is None:
            self.before_layout += len(addresses)
            return
        slots = slots_of(layout, addresses)
        found = slots >= 0
        self.outside += int(np.count_nonzero(~found))
        keys = np.stack([keys_of[found], slots[found]], axis=1)
        if not len(keys):
            return
        pairs, counts = np.unique(keys, axis=0, return_counts=True)
        starts = np.flatnonzero(np.r_[True, np.diff(pairs[:, 0]) != 0])
        for first, end in zip(starts.tolist(), [*starts[1:].tolist(), len(pairs)], strict=True):
            self._hold(int(pairs[first, 0]), pairs[first:end, 1], counts[first:end])

    def _hold(self, key: int, slots: np.ndarray, counts: np.ndarray) -> None:
        """One replay key's slots of a batch, held for its step, or counted dropped past the bounds."""
        held = self.by_replay.get(key)
        if held is None:
            held = self.by_replay[key] = collections.Counter()
            while len(self.by_replay) > self.MAX_REPLAYS:
                self._drop(next(iter(self.by_replay)))
        if self.held + len(slots) > self.MAX_SLOTS_HELD:
            self.dropped += int(counts.sum())
            return
        before = len(held)
        held.update(dict(zip(slots.tolist(), counts.tolist(), strict=True)))
        self.held += len(held) - before

    def _drop(self, key: int) -> None:
        old = self.by_replay.pop(key)
        self.held -= len(old)
        self.dropped += sum(old.values())

    def take(self, replays: Iterable[int], eager: bool = True) -> collections.Counter[int]:
        """The slots stored to in these replays (full numbers), with their stores; given once.
        `eager`: with the stores of kernels outside a graph that ran under them (else those stay)."""
        taken: collections.Counter[int] = collections.Counter()
        for replay in replays:
            in_graph = (replay & 0xFFFFFFFF) * 2  # its nodes' key; + 1: kernels outside a graph
            for key in (in_graph, in_graph + 1) if eager else (in_graph,):
                held = self.by_replay.pop(key, None)
                if held:
                    self.held -= len(held)
                    taken.update(held)
        return taken

    def let_go_through(self, replay: int | None) -> None:
        """A step has settled whose last named replay is `replay` (None: the process is gone):
        the stores still held for it or an earlier replay belong to no step that will settle
        (replays past those a step names, steps let go before they settled); counted dropped."""
        last = None if replay is None else replay & 0xFFFFFFFF
        while self.by_replay:
            first = next(iter(self.by_replay))
            if last is not None and (last - (first >> 1)) & 0xFFFFFFFF >= 1 << 31:  # after it (32-bit order)
                return
            self._drop(first)

    def report(self) -> CacheWriteTotals:
        return CacheWriteTotals(self.stores, self.before_layout, self.outside, self.skipped, self.dropped)
