"""GPU time per request, kept: each process's engine steps folded into per-request rows as they
settle, so a request outlives the steps StepAttribution keeps in detail, for a window and a
count the operator sets (--request-keep-s, --request-keep), and feeds two histograms: device
time per request and busy ratio per step.

A step settles once it cannot change any more: the next step has begun (no later launch is its),
and the device has begun a replay after its last (every event of its replays has been read, the
registry's settle()). An exited process settles every step, its newest without a host time; so
does an idle engine, whose newest step began IDLE_NS ago with none after it: its requests then
leave the batch (an engine with requests to serve steps every few milliseconds).
A request is observed in the device-time histogram once, when a settled step with its full id
list no longer schedules it (it finished, or was preempted: a request resumed later adds to its
row but is not observed again), or when its row is let go, or at its process's exit.

Conservation: the rows' device times plus those of the rows let go add up to the settled steps'
split spans exactly; steps let go by StepAttribution before they settled are counted apart.

KV-cache slots: settling steps in order, the ledger keeps which request each cache block is (the
blocks each step's text handed out, the latest owner winning) and gives each settled step's
cache stores (cache_writes.CacheWrites) to the request whose block holds the slot, when that
request is one of the step's; the others are counted unattributed. A step whose text was cut
short or refused in part, or one let go before it settled, leaves the owners unknown: they are
forgotten (counted) and learned again as blocks are handed out. Stores a following eager step
may share (its kernels store under this step's last replay) are counted ambiguous.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterable

import numpy as np

from .analysis import ALL_REPLAYS, Analysis
from .cache_writes import CacheWrites
from .request_times import RequestTime, StepTime, fold_step, step_span
from .step_attribution import Step, StepAttribution

# (instance, replay) -> the graph join's summary of a replay kept in detail (None when not)
ReplaySummary = Callable[[int, int], "dict | None"]
# device time per request, seconds: 2^16 ns (66 us) to 2^36 ns (69 s) by factors of 4 (a decode
# token to a long generation)
REQUEST_DEVICE_EDGES_S: tuple[float, ...] = tuple((1 << octave) / 1e9 for octave in range(16, 37, 2))
# busy ratio per step: tenths up to 1 (above 1: the device ran a step past the next one's start)
BUSY_EDGES: tuple[float, ...] = tuple(round(0.1 * tenth, 1) for tenth in range(1, 11))
HISTOGRAMS: dict[str, tuple[float, ...]] = {
    "request_device_seconds": REQUEST_DEVICE_EDGES_S,
    "step_busy_ratio": BUSY_EDGES,
}


@dataclasses.dataclass(frozen=True)
class RequestRetention:
    """How long and how many requests a process keeps after their last step."""

    keep: int = 4096
    keep_s: float = 3600.0


@dataclasses.dataclass
class Histogram:
    """Counts per bucket (the last above every edge), their sum and count; never reset."""

    edges: tuple[float, ...]
    buckets: np.ndarray = dataclasses.field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.buckets = np.zeros(len(self.edges) + 1, dtype=np.int64)

    def observe(self, value: float) -> None:
        self.buckets[int(np.searchsorted(self.edges, value, side="left"))] += 1
        self.total += value
        self.count += 1


@dataclasses.dataclass
class LedgerRow:
    row: RequestTime
    seq: int  # settle order of its first step: the position a page walk goes by
    observed: bool = False  # in the device-time histogram already


@dataclasses.dataclass(frozen=True)
class LedgerTotals:
    steps_settled: int
    steps_device_ns: int  # the settled steps' spans that were split among their requests
    steps_lost: int  # let go by StepAttribution before they settled: in no request's row
    requests_let_go: int
    device_ns_let_go: int  # of the rows let go: rows + this == steps_device_ns
    cache_stores_attributed: int = 0  # settled steps' cache stores given to a request of the step
    cache_stores_unattributed: int = 0  # to a block no request of the step was known to hold
    cache_owners_forgotten: int = 0  # times the block owners were lost (a step cut short or let go)
    cache_stores_ambiguous: int = 0  # under a replay an eager step after it shared: given to no one


class RequestLedger(Analysis):
    # The newest step of an engine that began no step for this long (host clock) settles: its work
    # (milliseconds of replays) is done and read, and its requests are observed as they leave.
    IDLE_NS = 3_000_000_000
    MAX_CACHE_SLOTS = 1 << 20  # slots kept in the rows, all together
    MAX_CACHE_BLOCKS = 1 << 22  # block owners known (more blocks than a GPU's KV cache holds)

    def __init__(
        self,
        steps: StepAttribution,
        replay_summary: ReplaySummary,
        retention: RequestRetention | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,  # the producers' clock: CLOCK_MONOTONIC
        cache: CacheWrites | None = None,
    ) -> None:
        self.cache = cache
        self.block_owners: dict[int, str] = {}
        self.cache_slots_kept = 0
        self.cache_stores_attributed = 0
        self.cache_stores_unattributed = 0
        self.cache_owners_forgotten = 0
        self.cache_stores_ambiguous = 0
        self.clock_ns = clock_ns
        self.step_source = steps
        self.replay_summary = replay_summary
        self.retention = retention or RequestRetention()
        self.rows: collections.OrderedDict[str, LedgerRow] = collections.OrderedDict()  # least recent first
        self.times: dict[str, RequestTime] = {}  # the same rows by request, as fold_step takes them
        self.next_key = 0  # the next step (StepAttribution's key) to settle
        self.next_seq = 0
        self.last_ids: list[str] | None = None  # the last settled step's full id list
        self.batch = 0  # the requests of the last settled step: never let go while scheduled
        self.steps_settled = 0
        self.steps_device_ns = 0
        self.steps_lost = 0
        self.requests_let_go = 0
        self.device_ns_let_go = 0
        self.histograms = {name: Histogram(edges) for name, edges in HISTOGRAMS.items()}

    def span(self, step: Step) -> int:
        """The step's device span (request_times.step_span: 0, the step untimed and counted so,
        where not all of its replays are known)."""
        return step_span(step, [self.replay_summary(instance, number) for _, number, instance in step.replays])

    def settle(self, replay_begun: int) -> None:
        kept = self.step_source.steps
        if kept:
            first = next(iter(kept))
            if self.next_key < first:
                self.steps_lost += first - self.next_key
                self.next_key = first
                self._forget_owners()  # the blocks those steps handed out are not known
        exited = replay_begun == ALL_REPLAYS
        while self.next_key in kept:
            step = kept[self.next_key]
            following = kept.get(self.next_key + 1)
            if following is None and not exited:
                if self.clock_ns() - step.host_time_ns >= self.IDLE_NS:  # no later replay will begin
                    self._fold(StepTime(step, self.span(step), 0), None, exited=False)
                    self.next_key += 1
                    self._leave(self.last_ids or [])  # the idle engine's last batch has left it
                break
            if not exited and any(number >= replay_begun for _, number, _ in step.replays):
                break
            host = following.host_time_ns - step.host_time_ns if following is not None else 0
            self._fold(StepTime(step, self.span(step), max(host, 0)), following, exited=exited)
            self.next_key += 1
        if exited:
            if self.cache is not None:
                self.cache.let_go_through(None)  # no step will take what is still held
            for entry in self.rows.values():
                self._observe(entry)
        self._let_go()

    def _fold(self, timed: StepTime, following: Step | None, *, exited: bool) -> None:
        """`following`: the step after it, where one began; `exited`: none will."""
        self.steps_settled += 1
        if timed.split:
            self.steps_device_ns += timed.device_ns
        ratio = timed.busy_ratio
        if ratio is not None:
            self.histograms["step_busy_ratio"].observe(ratio)
        self.batch = len(timed.step.request_ids)
        for row in fold_step(self.times, timed):
            if row.request not in self.rows:
                self.rows[row.request] = LedgerRow(row, self.next_seq)
                self.next_seq += 1
            self.rows.move_to_end(row.request)
        step = timed.step
        # the stores of kernels outside a graph under its last replay are its own only where the
        # step after it is known to have begun with a graph replay, or no step will come
        self._attribute_cache(step, following.replays_launched > 0 if following is not None else exited)
        if step.ids_complete:
            ids = step.request_ids
            if self.last_ids is not None:
                scheduled = set(ids)
                self._leave(request for request in self.last_ids if request not in scheduled)
            self.last_ids = list(ids)
        else:
            self.last_ids = None  # a step whose ids were cut short says nothing of who left

    def _forget_owners(self) -> None:
        self.block_owners.clear()
        self.cache_owners_forgotten += 1

    def _attribute_cache(self, step: Step, graph_after: bool) -> None:
        """The blocks the step handed out, then its replays' cache stores to their owners. A
        kernel outside a graph stores under the replay last begun in its context: a step that
        launched no replay (vLLM runs a batch past its largest graph eagerly) stores under the
        step before's last one, so unless the next step is known to have launched one
        (`graph_after`; an engine that went idle may be waking with an eager step whose record
        is not read yet), the stores of kernels outside a graph under this step's last replay may
        be either step's: counted ambiguous, given to no one (its last replay's own nodes' stores
        are its own). A next step whose eager kernels stored before its first replay (a framework
        that runs its model eagerly and a graph after it) would still be taken for this one: not
        vLLM, whose steps with a graph run their attention between its pieces."""
        if not step.blocks_complete:
            self._forget_owners()
        for request, blocks in step.new_blocks.items():
            if len(self.block_owners) + len(blocks) > self.MAX_CACHE_BLOCKS:
                self._forget_owners()
            self.block_owners.update(dict.fromkeys(blocks, request))
        if self.cache is None or not step.replays:
            return
        numbers = [number for _, number, _ in step.replays]
        stores = self.cache.take(numbers[:-1])
        stores.update(self.cache.take(numbers[-1:], eager=False))  # its last replay's own nodes
        after = self.cache.take(numbers[-1:])  # kernels outside a graph after it
        if not graph_after:
            self.cache_stores_ambiguous += sum(after.values())
        else:
            stores.update(after)
        self.cache.let_go_through(numbers[-1])
        layout = self.step_source.kv_layout
        if not stores or layout is None:
            return
        scheduled = set(step.request_ids) if step.ids_complete else set()
        stored: set[str] = set()
        for slot, count in stores.items():
            owner = self.block_owners.get(slot // layout.block_size)
            row = self.times.get(owner) if owner is not None and owner in scheduled else None
            if row is None:
                self.cache_stores_unattributed += count
                continue
            self.cache_stores_attributed += count
            row.cache_stores += count
            stored.add(row.request)
            if slot in row.cache_slots:
                continue
            if self.cache_slots_kept < self.MAX_CACHE_SLOTS:
                row.cache_slots.add(slot)
                self.cache_slots_kept += 1
            else:
                row.cache_slots_complete = False
        for request in stored:
            self.times[request].cache_steps += 1

    def _leave(self, requests: Iterable[str]) -> None:
        """These requests left the batch: each kept one observed (once)."""
        for request in requests:
            entry = self.rows.get(request)
            if entry is not None:
                self._observe(entry)

    def _observe(self, entry: LedgerRow) -> None:
        """Once per request, and only one with a timed step: `counter` mode's requests have no
        device time to show, and zeros would read as free requests."""
        if not entry.observed:
            entry.observed = True
            if entry.row.steps > entry.row.steps_untimed:
                self.histograms["request_device_seconds"].observe(entry.row.device_ns / 1e9)

    def _let_go(self) -> None:
        """The least recently scheduled rows beyond the count, or older than the window (host
        clock of the newest settled step), go; each observed first if it was not yet. The count
        is at least the last step's batch: a request still scheduled keeps its one row."""
        newest = next(reversed(self.rows.values())).row.last_host_ns if self.rows else 0
        horizon = newest - int(self.retention.keep_s * 1e9)
        keep = max(self.retention.keep, self.batch)
        while len(self.rows) > self.batch:
            entry = next(iter(self.rows.values()))
            if len(self.rows) <= keep and entry.row.last_host_ns >= horizon:
                break
            self.rows.popitem(last=False)
            del self.times[entry.row.request]
            self.cache_slots_kept -= len(entry.row.cache_slots)
            self._observe(entry)
            self.requests_let_go += 1
            self.device_ns_let_go += entry.row.device_ns

    def report(self) -> LedgerTotals:
        return LedgerTotals(
            self.steps_settled,
            self.steps_device_ns,
            self.steps_lost,
            self.requests_let_go,
            self.device_ns_let_go,
            self.cache_stores_attributed,
            self.cache_stores_unattributed,
            self.cache_owners_forgotten,
            self.cache_stores_ambiguous,
        )

    def histogram_counts(self) -> dict[str, float]:
        """Both histograms as flat counters ("<name>:<bucket>", ":sum", ":count"), the form the
        metrics' per-identity sums carry over a process's exit."""
        counts: dict[str, float] = {}
        for name, histogram in self.histograms.items():
            for index, value in enumerate(histogram.buckets.tolist()):
                counts[f"{name}:{index}"] = float(value)
            counts[f"{name}:sum"] = histogram.total
            counts[f"{name}:count"] = float(histogram.count)
        return counts
